//! TODO: watch
