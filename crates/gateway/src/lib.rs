//! claw's always-on gateway: one process that owns the sessions and the index
//! writer. It runs the memory watcher (own thread) and the warm memory engine
//! (`memory`), a message bus with bounded queues (`bus`), agent workers — one turn
//! at a time per session, sessions concurrently up to a cap (`worker`) — and the
//! HTTP API with its OpenAI-compatible endpoint and WebChat page (`http`), behind a
//! bearer token (`token`), served by an accept loop with a header read timeout and
//! a per-client connection cap (`listen`). A running gateway advertises itself in
//! the state dir (`discovery`) so the CLI can send its work there (`client`).
//! Gated tool calls become approval requests answered through the API
//! (`approvals`). Shutdown is one cancellation token (`server`).

pub mod approvals;
pub mod bus;
pub mod client;
pub mod config;
pub mod delivery;
pub mod discovery;
pub mod http;
pub mod listen;
pub mod memory;
pub mod server;
pub mod token;
pub mod transcripts;
pub mod worker;
