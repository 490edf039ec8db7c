//! TODO: core
