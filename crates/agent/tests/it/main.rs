//! One integration-test binary for the assistant library: driver, providers over real HTTP/SSE, tools.
#![allow(clippy::unwrap_used)]

mod agent_driver;
mod provider_failover;
mod provider_streaming;
mod ssrf_fetch;
mod tools_exec;
mod tools_fs;
mod tools_web;
