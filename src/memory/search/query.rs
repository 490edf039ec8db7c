//! TODO: query
