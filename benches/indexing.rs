//! TODO: indexing benchmark
fn main() {}
