//! TODO: search benchmark
fn main() {}
