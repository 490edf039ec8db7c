//! TODO: breaker
