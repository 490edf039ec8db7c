//! The assistant: a pure agent state machine (`core`), LLM providers with
//! streaming and failover (`provider`), typed tools (`tools`), JSONL sessions
//! (`session`), the async driver that performs the machine's effects (`driver`), and
//! the one table of chat commands every surface parses (`commands`).

pub mod breaker;
pub mod commands;
pub mod compaction;
pub mod config;
pub mod consolidate;
pub mod core;
pub mod driver;
pub mod hooks;
pub mod memory_backend;
pub mod memory_file;
pub mod message;
pub mod promote;
pub mod prompt;
pub mod provider;
pub mod session;
pub mod settings;
pub mod subagents;
pub mod think;
pub mod tools;
