//! TODO: dates
