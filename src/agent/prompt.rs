//! TODO: prompt
