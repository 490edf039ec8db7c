//! `claw memory status --json`'s object ([`Status`]), one struct for both
//! backends so the shapes cannot drift: the CLI, MCP's `memory_status` and the
//! gateway all return it. Field order and names are the contract.
#![allow(missing_docs)] // the fields are documented where they are not obvious

use claw_memory::config::MemoryConfig;
use claw_memory::indexer::OversizedNote;
use claw_memory::service::ServiceStatus;
use claw_memory::store::VecBackend;
use claw_memory::{walk, watch};
use serde::Serialize;

/// `claw memory status --json` shape.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Where the index lives: `sqlite`, or `postgres` for `memory.backend`
    /// `{"kind": "postgres"}` (whose status the CLI fills into this same struct).
    pub backend: &'static str,
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
    /// The keyword stage's tokenizers (`unicode61 (stems)`, `trigram` on SQLite;
    /// `tsvector simple (stems)`, `pg_trgm` on PostgreSQL: the word index holds
    /// stems, see `claw_memory::words`).
    pub fts_tokenizers: Vec<&'static str>,
    pub chunker_version: Option<String>,
    /// Unix seconds of the last index run.
    pub last_index_at: Option<i64>,
    /// Files that differ on disk from the index (stat-level).
    pub changed_on_disk: ChangedOnDisk,
    pub sources: Vec<walk::SourceRoot>,
    /// The most recent `claw memory watch` heartbeat (`alive` says whether it still runs).
    pub watcher: Option<watch::WatcherStatus>,
    /// Files remembered as skipped for cause (too big, binary): not indexed,
    /// not "behind" either until they change.
    pub skipped_files: i64,
    /// Where the rows live: the database file on SQLite,
    /// `postgres:SCHEMA/NAMESPACE` on PostgreSQL.
    pub location: String,
    /// The namespaces a search sees (PostgreSQL; empty on SQLite).
    pub namespaces: Vec<String>,
    /// Chunks a search can return: this workspace's on SQLite, every searched
    /// namespace's (all workspaces) on PostgreSQL.
    pub visible_chunks: i64,
    /// The workspace's stable id (`<state dir>/workspace-id`, what `memory get
    /// --workspace-id` on another machine takes); null until a shared backend
    /// has created it.
    pub workspace_id: Option<String>,
    /// The notes left out of the index for being over the size limit
    /// (`memory.max_file_bytes`), by path and size: not searchable until they
    /// shrink or the limit is raised.
    pub too_big: Vec<OversizedNote>,
    /// The chunks the index holds without the vectors the available embedding
    /// model would give them (indexed before the model was installed or
    /// configured): search stays keyword-only for them until `claw memory index`.
    /// Null when there is no such gap (or no model is available).
    pub vectors_missing: Option<VectorGap>,
    /// The scheduled consolidation into MEMORY.md (`claw memory consolidate`):
    /// whether it runs and when, its last run (promoted, updated, skipped,
    /// with provenance) and what it promoted recently.
    pub consolidation: crate::consolidation::ConsolidationStatus,
    /// The index's vectors came from another model or precision than the
    /// configured one (`embedding.precision` changed, another model): the next
    /// `claw memory index` re-embeds every chunk through the rebuild; until then
    /// search is keyword-only. Null when they agree.
    pub model_change: Option<claw_memory::embed::ModelChange>,
    /// `embedding.precision` asked for `int8` but the model directory has no
    /// `model_int8.onnx`: fp32 runs instead (reinstalling the model makes it).
    /// Null otherwise.
    pub precision_fallback: Option<claw_memory::embed::PrecisionFallback>,
}

/// Chunks without vectors while an embedding model is available ([`Status::vectors_missing`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VectorGap {
    /// How many chunks lack a vector of `model`.
    pub chunks: i64,
    /// The available model's id.
    pub model: String,
}

impl VectorGap {
    /// `12,295 chunks without vectors — run `claw memory index``: the line status,
    /// doctor and search show.
    pub fn describe(&self) -> String {
        format!(
            "{} chunks without vectors — run `claw memory index` (the embedding model {} is available; until then search is keyword-only for them)",
            thousands(self.chunks),
            self.model
        )
    }
}

/// `12295` → `12,295`.
fn thousands(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Stat-level difference between disk and index.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ChangedOnDisk {
    pub new: usize,
    pub modified: usize,
    pub deleted: usize,
}

impl Status {
    /// The contract's object from the SQLite service's status.
    pub(crate) fn sqlite(mem: &MemoryConfig, st: &ServiceStatus) -> Status {
        Status {
            backend: "sqlite",
            workspace: mem.workspace.display().to_string(),
            db_path: mem.db_path().display().to_string(),
            db_bytes: st.stats.db_bytes,
            files: st.stats.files,
            chunks: st.stats.chunks,
            vectors: st.stats.vectors,
            model: st.model.clone().unwrap_or_default(),
            dims: st.dims.unwrap_or(0),
            cache_entries: st.stats.cache_entries,
            vector_backend: match &st.vector_backend {
                VecBackend::Vec0 { version } => format!("vec0 {version}"),
                VecBackend::Unavailable { reason } => format!("unavailable: {reason}"),
            },
            fts_tokenizers: vec!["unicode61 (stems)", "trigram"],
            chunker_version: st.chunker_version.clone(),
            last_index_at: st.last_index_at,
            changed_on_disk: ChangedOnDisk {
                new: st.staleness.new.len(),
                modified: st.staleness.changed.len(),
                deleted: st.staleness.deleted.len(),
            },
            sources: st.sources.clone(),
            watcher: st.watcher.clone(),
            skipped_files: st.skipped_files,
            location: mem.db_path().display().to_string(),
            namespaces: Vec::new(),
            visible_chunks: st.stats.chunks,
            workspace_id: claw_memory::workspace_id::existing_workspace_id(&mem.state_dir())
                .ok()
                .flatten(),
            too_big: st.too_big.clone(),
            vectors_missing: None,
            consolidation: Default::default(),
            model_change: None,
            precision_fallback: None,
        }
    }
}

impl Status {
    /// A few readable lines.
    pub fn render(&self) -> String {
        let model = if self.model.is_empty() {
            "none (keyword-only)".to_string()
        } else {
            format!("{} ({} dims)", self.model, self.dims)
        };
        let mut out = format!(
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
        );
        for n in &self.too_big {
            out.push_str(&format!("\nnot indexed, too big: {}", n.describe()));
        }
        if let Some(g) = &self.vectors_missing {
            out.push_str(&format!("\nembedding: {}", g.describe()));
        }
        if let Some(c) = &self.model_change {
            out.push_str(&format!("\nembedding: {c}"));
        }
        if let Some(f) = &self.precision_fallback {
            out.push_str(&format!("\nprecision: {f}"));
        }
        for line in self.consolidation.render() {
            out.push('\n');
            out.push_str(&line);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_is_named_with_its_size() {
        assert_eq!(thousands(12_295), "12,295");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
        let g = VectorGap {
            chunks: 12_295,
            model: "m@1".into(),
        };
        assert!(
            g.describe()
                .starts_with("12,295 chunks without vectors — run `claw memory index`"),
            "{}",
            g.describe()
        );
    }
}
