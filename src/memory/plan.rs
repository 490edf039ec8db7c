//! TODO: plan
