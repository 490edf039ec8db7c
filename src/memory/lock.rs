//! TODO: lock
