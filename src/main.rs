//! The `claw` binary: parse arguments, resolve settings, dispatch to `claw::cli`.
fn main() {}
