//! TODO: scoring benchmark
fn main() {}
