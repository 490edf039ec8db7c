//! claw speaks the Model Context Protocol, both directions, through the official
//! Rust SDK (`rmcp`; no hand-written JSON-RPC):
//!
//! - [`server`]: claw's memory as an MCP server — `memory_search`, `memory_get`,
//!   `memory_status`, `memory_append` and the resources `memory://MEMORY.md` and
//!   the day's note — over stdio (`claw mcp`) or streamable HTTP
//!   ([`server::http_service`], for the gateway to mount at `/mcp`), on
//!   whichever backend `memory.backend` names (`claw_memory_api::Memory`);
//! - [`client`]: the MCP servers the user configured (`mcp.servers`) as claw's
//!   dynamic tools `mcp__<server>__<tool>` ([`claw_agent::tools::DynamicTools`]);
//! - [`config`]: the `mcp` section of the config file;
//! - [`append`]: `memory_append`'s write: redacted, through the agent's file jail,
//!   bounded per call and by the index's per-file limit;
//! - [`stdio`]: `claw mcp`'s stdio framing: bounded lines, JSON-RPC errors for
//!   lines that are not JSON or too long.

pub mod append;
pub mod client;
pub mod config;
pub mod server;
pub mod stdio;

pub use client::{McpClients, ServerState, ServerSummary};
pub use config::{McpConfig, ServerSpec};
pub use server::{MemoryServer, ServerOptions, http_service, http_service_until, serve_stdio};
