//! TODO: eval
