//! One integration-test binary for the assistant library: driver, providers over real HTTP/SSE, tools.
#![allow(clippy::unwrap_used)]
#![allow(unsafe_code)] // libc calls that set up hostile filesystem states (FIFOs, renameat2 races)

mod agent_driver;
mod common;
mod confirm_driver;
mod consolidation_job;
mod jail_escapes;
mod memory_file_writers;
mod protected_paths;
mod provider_failover;
mod provider_streaming;
mod ssrf_fetch;
mod tools_exec;
mod tools_fs;
mod tools_web;
