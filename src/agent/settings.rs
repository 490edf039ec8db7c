//! TODO: settings
