//! TODO: score
