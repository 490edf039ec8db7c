//! TODO: tools
