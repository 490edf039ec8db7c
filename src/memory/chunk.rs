//! TODO: chunk
