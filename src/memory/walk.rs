//! TODO: walk
