//! TODO: embed
