//! claw: a memory-centric personal AI assistant for the terminal.
//!
//! The crate is a library with a thin binary (`src/main.rs`): `memory` is the
//! local memory engine (index, search, watch, eval), `agent` is the assistant
//! that lives on it, `cli` renders both for people (text) and scripts (`--json`).

pub mod agent;
pub mod cli;
pub mod config;
pub mod memory;
