//! TODO: driver
