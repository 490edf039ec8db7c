//! `claw memory status --json`'s object, built from the memory crate alone so
//! that the MCP server's `memory_status` returns the CLI's exact JSON (the
//! integration test compares the two). Field order and names are the contract.

use claw_memory::config::MemoryConfig;
use claw_memory::store::{Store, StoreError, VecBackend};
use claw_memory::{freshness, walk, watch};
use serde::Serialize;

/// `claw memory status --json` shape.
#[derive(Debug, Serialize)]
pub struct StatusJson {
    pub workspace: String,
    pub db_path: String,
    pub db_bytes: u64,
    pub files: i64,
    pub chunks: i64,
    pub vectors: i64,
    /// Embedding model id of the index; empty when keyword-only.
    pub model: String,
    pub dims: usize,
    pub cache_entries: i64,
    /// `vec0 <version>` or `unavailable: <reason>`.
    pub vector_backend: String,
    pub fts_tokenizers: Vec<&'static str>,
    pub chunker_version: Option<String>,
    /// Unix seconds of the last index run.
    pub last_index_at: Option<i64>,
    /// Files that differ on disk from the index (stat-level).
    pub changed_on_disk: ChangedOnDisk,
    pub sources: Vec<walk::SourceRoot>,
    /// The most recent `claw memory watch` heartbeat.
    pub watcher: Option<watch::WatcherStatus>,
}

/// Stat-level difference between disk and index.
#[derive(Debug, Default, Serialize)]
pub struct ChangedOnDisk {
    pub new: usize,
    pub modified: usize,
    pub deleted: usize,
}

/// Errors while reading the status.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("cannot open the memory database {path}")]
    Open {
        path: String,
        #[source]
        source: StoreError,
    },
    #[error("reading the index status")]
    Store(#[from] StoreError),
}

/// The status of the workspace's index (opens its own read connection).
pub fn status(mem: &MemoryConfig) -> Result<StatusJson, StatusError> {
    let path = mem.db_path();
    let store = Store::open(&path).map_err(|source| StatusError::Open {
        path: path.display().to_string(),
        source,
    })?;
    let stats = store.stats()?;
    let staleness = freshness::check(mem, &store)?;
    Ok(StatusJson {
        workspace: mem.workspace.display().to_string(),
        db_path: path.display().to_string(),
        db_bytes: stats.db_bytes,
        files: stats.files,
        chunks: stats.chunks,
        vectors: stats.vectors,
        model: store.meta("model")?.unwrap_or_default(),
        dims: store.vec_dims()?.unwrap_or(0),
        cache_entries: stats.cache_entries,
        vector_backend: match store.vec_backend() {
            VecBackend::Vec0 { version } => format!("vec0 {version}"),
            VecBackend::Unavailable { reason } => format!("unavailable: {reason}"),
        },
        fts_tokenizers: vec!["unicode61", "trigram"],
        chunker_version: store.meta("chunker_version")?,
        last_index_at: store.meta("last_index_at")?.and_then(|v| v.parse().ok()),
        changed_on_disk: ChangedOnDisk {
            new: staleness.new.len(),
            modified: staleness.changed.len(),
            deleted: staleness.deleted.len(),
        },
        sources: walk::sources(mem, &store)?,
        watcher: watch::watcher_status(&store)?,
    })
}

impl StatusJson {
    /// A few readable lines.
    pub fn render(&self) -> String {
        let model = if self.model.is_empty() {
            "none (keyword-only)".to_string()
        } else {
            format!("{} ({} dims)", self.model, self.dims)
        };
        format!(
            "workspace: {}\nindexed: {} files, {} chunks, {} vectors\nmodel: {}\nchanged on disk: {} new, {} modified, {} deleted\nsources: {}",
            self.workspace,
            self.files,
            self.chunks,
            self.vectors,
            model,
            self.changed_on_disk.new,
            self.changed_on_disk.modified,
            self.changed_on_disk.deleted,
            self.sources
                .iter()
                .map(|s| s.name.clone())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}
