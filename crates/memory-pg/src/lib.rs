//! claw's memory on PostgreSQL + pgvector: a second storage backend behind the
//! memory library's two boundaries, `claw_memory::index_storage::IndexStorage`
//! (the indexer's writes) and `claw_memory::search::storage::SearchStorage`
//! (search's candidate generation and row reads). Chunking, embedding, the
//! incremental plan, scoring, decay and MMR stay in `claw_memory`; only
//! persistence and candidate generation differ.
//!
//! It lives in its own crate because the `postgres` client pulls tokio, which
//! `claw_memory` must never depend on. Blocking: call it from a dedicated thread
//! or `spawn_blocking`, like the SQLite store.
//!
//! Several writers share one database: every row is owned by a namespace, a
//! workspace id (stable, kept in the writing workspace's state dir) and a source;
//! each file is written in one transaction (its own, or its write group's) under
//! per-source advisory locks, so a lost connection leaves every file fully old or
//! fully new.
#![warn(missing_docs)]

mod indexed;
mod migrate;
mod search;
mod store;

pub use claw_memory::workspace_id::{WORKSPACE_ID_FILE, workspace_id};
pub use indexed::{IndexedFile, reassemble};
pub use migrate::{MigrateReport, copy_sqlite};
pub use store::{
    DEFAULT_EF_SEARCH, GROUP_MAX_CHUNKS, HNSW_EF_CONSTRUCTION, HNSW_M, PgConfig, PgError, PgStats,
    PgStore, SCHEMA_VERSION,
};
