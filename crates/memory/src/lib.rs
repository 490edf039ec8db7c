//! The memory engine: notes folders and session transcripts become one searchable
//! memory in one SQLite file (chunks + FTS5 + sqlite-vec), kept fresh incrementally.
//!
//! Pure logic (`chunk`, `plan`, `search::query`, `search::score`, `redact`,
//! `dates`) is separated from I/O (`store`, `embed`, `walk`, `indexer`, `watch`).

#[allow(unsafe_code)] // openat2(2) and fd-relative syscalls; each block carries a SAFETY note
pub mod beneath;
pub mod chunk;
/// "Now" as a value: claw's one clock ([`claw_base::clock`]).
pub use claw_base::clock;
/// An error and its causes as one line ([`claw_base::error::chain`]).
pub use claw_base::error::chain as error_chain;
pub mod config;
pub mod dates;
pub mod dircache;
pub mod embed;
pub mod freshness;
pub mod index_storage;
pub mod indexer;
pub mod lock;
pub mod plan;
pub mod private;
#[allow(unsafe_code)] // getdents64(2) and fstatat(2) for the freshness walk; SAFETY notes inline
pub mod rawdir;
pub mod readable;
pub mod rebuild;
pub mod redact;
pub mod search;
pub mod service;
pub mod sidecar;
mod stampwalk;
pub mod state;
pub mod store;
pub mod transcript;
pub mod walk;
pub mod watch;
pub mod words;
pub mod workspace_id;
