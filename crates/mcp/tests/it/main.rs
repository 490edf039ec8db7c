//! One integration-test binary for `claw-mcp`: claw's MCP client against MCP
//! servers claw did not write (npm's reference servers).
#![allow(clippy::unwrap_used)]

mod client_npm;
mod http_service;
