//! claw's foundations, each written once and shared by every crate.
//!
//! - [`clock`]: "now" as a value — the only place that reads the wall clock.
//! - [`fs`]: the atomic write-then-rename of a small private file.
//! - [`child_env`]: the environment a child process (`exec`, hooks) gets.
//! - [`error`]: an error and its causes as one line.
//! - `http` (feature `http`): the one reqwest client setup.
//!
//! This crate sits below all the others and depends on none of them. It has no
//! tokio and no HTTP stack unless a feature asks for them (`tokio`: a clock that
//! follows tokio's pausable clock; `http`: the reqwest client setup), so the
//! memory engine stays free of both.

pub mod child_env;
pub mod clock;
pub mod error;
pub mod fs;
#[cfg(feature = "http")]
pub mod http;

pub use clock::{Clock, ClockError};
