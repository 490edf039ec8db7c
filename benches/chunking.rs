//! TODO: chunking benchmark
fn main() {}
