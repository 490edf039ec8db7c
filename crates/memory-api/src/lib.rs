//! One memory, every surface: [`Memory::open`] reads `memory.backend` from a
//! [`MemoryConfig`] and hands back one service that indexes, syncs, searches,
//! gets, reports status and manages sources, whichever storage is under it
//! (the SQLite file in the state directory, or a shared PostgreSQL database).
//!
//! The CLI, the assistant's memory tools, the gateway, the MCP server and the
//! evaluation all go through [`Memory`]; nothing above the memory crates names
//! a backend or reaches a store. Source validation (reserved names,
//! overlapping roots) lives here too ([`sources`]), so every backend refuses
//! the same bad input with the same message.
//!
//! Blocking, like the engine: call it from `spawn_blocking` or a thread of its
//! own. (The PostgreSQL client's calls run on threads of their own, so that is
//! safe from a tokio runtime's blocking pool too.)
#![warn(missing_docs)]

pub mod consolidation;
pub mod eval;
mod pg;
pub mod sources;
pub mod status;
pub mod watch;

use claw_memory::embed::{EmbedError, Embedder};
use claw_memory::service::MemoryService;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

// ---- the memory library's public API ------------------------------------------
//
// The crates above the memory layer (the assistant, MCP, the gateway, the
// binary) depend on this crate only, not on `claw-memory` (checked by the crate
// graph in `crates/claw/tests/architecture.rs`): what they may name of the
// engine is re-exported here. The rest of `claw_memory` (the store, the
// indexer's and the freshness check's internals, the watcher actor, the
// search storages) is reached only by the memory crates.

/// Foundations the upper crates share with the engine: path resolution that
/// cannot escape a root, the clock, configuration, the embedding model,
/// private file modes, redaction, the state directory.
pub use claw_memory::{beneath, clock, config, dates, embed, lock, private, redact, state};

pub use claw_memory::config::{Backend, DayZone, MemoryConfig, PgSettings};
pub use claw_memory::error_chain;
pub use claw_memory::freshness::IdentityMismatch;
pub use claw_memory::freshness::{FileRef, StaleReason, SyncReport};
pub use claw_memory::indexer::{IndexError, IndexOptions, IndexReport, Progress};
pub use claw_memory::indexer::{
    IndexIssue, OversizedNote, RebuildReason, describe_oversized, human_bytes,
};
pub use claw_memory::lock::{LockError, WriterLock};
pub use claw_memory::search::engine::{
    GET_DEFAULT_LINES, GET_MAX_CHARS, GET_TURNS_AROUND, GetTurn,
};
pub use claw_memory::search::score::{Fusion, KeywordNorm};
pub use claw_memory::search::{Fallback, SearchHit, citation, parse_citation};
pub use claw_memory::search::{
    GetRequest, GetResponse, Mode, SearchError, SearchRequest, SearchResponse, SourceFilter,
};
pub use claw_memory::service::ServiceError;
pub use claw_memory::service::{FirstIndex, SearchOutcome, SyncPolicy};
pub use claw_memory::store::{RecallHit, RecallRow, StoreError, now_unix};
pub use claw_memory::walk::SourceRoot;
pub use claw_memory::walk::{IssueReason, SOURCE_SESSIONS, SourceKind};
pub use sources::SourceError;
pub use status::{ChangedOnDisk, Status, VectorGap};

/// Errors of the memory service. Each variant's message is its context; the
/// cause is its `source()` (print the chain, e.g. with anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The SQLite service (its own messages and causes, unchanged).
    #[error(transparent)]
    Sqlite(#[from] ServiceError),
    /// The shared database could not be opened.
    #[error("opening {location}")]
    Open {
        /// `postgres:<schema>/<namespace>`.
        location: String,
        /// Why.
        source: StoreError,
    },
    /// Checking the disk against the index failed.
    #[error("checking freshness")]
    Freshness(#[source] StoreError),
    /// Reading what the index holds failed.
    #[error("reading the index status")]
    Status(#[source] StoreError),
    /// Reading or writing the index failed.
    #[error(transparent)]
    Store(StoreError),
    /// The search or get itself.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// Indexing failed.
    #[error("indexing failed")]
    Index(#[source] IndexError),
    /// Taking the writer lock failed (held by another writer, or unusable).
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A folder that cannot be registered.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// What only a shared index can do (another workspace's file).
    #[error("{0}: it needs memory.backend postgres")]
    NeedsSharedIndex(&'static str),
    /// What this backend does not do yet.
    #[error("{what} is not supported with the PostgreSQL backend yet")]
    Unsupported {
        /// The feature.
        what: &'static str,
    },
    /// The migration needs a PostgreSQL backend configured.
    #[error(
        "no PostgreSQL backend is configured: set \"memory\": {{\"backend\": {{\"kind\": \"postgres\", \"url_env\": \"CLAW_PG_URL\", \"namespace\": \"team\"}}}} in the config file"
    )]
    NoPostgres,
    /// The watcher failed.
    #[error(transparent)]
    Watch(claw_memory::watch::WatchError),
    /// The migration failed.
    #[error("migration failed")]
    Migrate(#[source] StoreError),
}

impl MemoryError {
    /// The search or get's own error (a bad request rather than a failure:
    /// an unknown source, a path that is not indexed), whichever backend.
    pub fn search_error(&self) -> Option<&SearchError> {
        match self {
            MemoryError::Sqlite(ServiceError::Search(s)) | MemoryError::Search(s) => Some(s),
            _ => None,
        }
    }

    /// [`MemoryError::search_error`] by value (the error itself otherwise).
    pub fn into_search_error(self) -> Result<SearchError, MemoryError> {
        match self {
            MemoryError::Sqlite(ServiceError::Search(s)) | MemoryError::Search(s) => Ok(s),
            other => Err(other),
        }
    }
}

/// A `get`'s answer: the lines, and, on a shared index, the workspace that
/// indexed the file when it is not this one (served from its stored chunks).
#[derive(Debug, Clone)]
pub struct GetAnswer {
    /// The lines (`claw memory get --json`).
    pub response: GetResponse,
    /// Another workspace's id when the file is its (PostgreSQL only).
    pub workspace_id: Option<String>,
}

/// One indexed file of a source ([`Memory::files`]; `GET /v1/memory/files`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IndexedFile {
    /// Relative to the source root, '/'-separated (what `get` takes).
    pub path: String,
    /// Size in bytes when it was indexed.
    pub size: i64,
    /// Modification time when it was indexed, unix seconds.
    pub mtime: i64,
}

/// What registering a source did.
#[derive(Debug, Clone)]
pub struct AddedSource {
    /// The source's name.
    pub name: String,
    /// Its canonical folder.
    pub root: std::path::PathBuf,
}

/// The storage under the service.
// One per process, made once and held in an `Arc`: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Inner {
    Sqlite(MemoryService<'static>),
    Postgres(pg::PgMemory),
}

/// A workspace's memory, whichever backend holds it.
pub struct Memory {
    inner: Inner,
    /// Recalls a search could not record yet (another writer held the
    /// database): recorded with the next search's.
    pending_recalls: std::sync::Mutex<Vec<(RecallHit, i64)>>,
}

/// Most recalls kept waiting for the database ([`Memory::search`]).
const PENDING_RECALLS_MAX: usize = 10_000;

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("backend", &self.backend_name())
            .field("location", &self.location())
            .finish()
    }
}

impl Memory {
    /// Open the memory `settings.backend` names; the embedding model loads on
    /// first need (not at all for keyword-only searches).
    pub fn open(settings: MemoryConfig) -> Result<Memory, MemoryError> {
        Memory::open_with(settings, None)
    }

    /// Open with an embedder shared with other owners in the process (`None`:
    /// keyword only): a long-lived process (the gateway) loads the model once
    /// for its searches and its watcher.
    pub fn open_shared(
        settings: MemoryConfig,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<Memory, MemoryError> {
        Memory::open_with(settings, Some(embedder))
    }

    fn open_with(
        settings: MemoryConfig,
        shared: Option<Option<Arc<dyn Embedder>>>,
    ) -> Result<Memory, MemoryError> {
        let inner = match settings.backend.clone() {
            Backend::Sqlite => Inner::Sqlite(match shared {
                Some(e) => MemoryService::open_shared(settings, e)?,
                None => MemoryService::open(settings)?,
            }),
            Backend::Postgres(pg) => Inner::Postgres(pg::PgMemory::connect(settings, pg, shared)?),
        };
        Ok(Memory {
            inner,
            pending_recalls: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Close the memory and leave the embedding model it loaded to the
    /// process's exit: a one-shot command (`claw memory search`) saves the
    /// 7–18 ms that freeing the model's session and tokenizers costs. Recalls
    /// still waiting for the database are dropped, as on a plain drop.
    pub fn finish_for_exit(self) {
        let Memory { inner, .. } = self;
        match inner {
            Inner::Sqlite(service) => service.finish_for_exit(),
            Inner::Postgres(pg) => pg.finish_for_exit(),
        }
    }

    /// The settings the memory runs with.
    pub fn settings(&self) -> &MemoryConfig {
        match &self.inner {
            Inner::Sqlite(s) => s.settings(),
            Inner::Postgres(p) => p.settings(),
        }
    }

    /// `sqlite` or `postgres` (status's `backend`).
    pub fn backend_name(&self) -> &'static str {
        match &self.inner {
            Inner::Sqlite(_) => "sqlite",
            Inner::Postgres(_) => "postgres",
        }
    }

    /// Where the rows live: the database file, or `postgres:SCHEMA/NAMESPACE`.
    pub fn location(&self) -> String {
        match &self.inner {
            Inner::Sqlite(s) => s.settings().db_path().display().to_string(),
            Inner::Postgres(p) => p.location(),
        }
    }

    /// Name what an inline sync is doing in the writer lock (shown to another
    /// writer that finds it held), e.g. the command that runs the search.
    pub fn set_lock_holder(&mut self, holder: impl Into<String>) {
        match &mut self.inner {
            Inner::Sqlite(s) => s.set_lock_holder(holder),
            Inner::Postgres(p) => p.set_lock_holder(holder.into()),
        }
    }

    /// Sync under `policy` (at most `limit` changed files re-indexed inline,
    /// never waiting for the writer lock), then search. Each hit returned is
    /// counted as recalled ([`Memory::recalls`]): best effort, never failing
    /// or stalling the search (counts the database cannot take right now wait
    /// in this process for the next search).
    pub fn search(
        &self,
        req: &SearchRequest,
        policy: SyncPolicy,
    ) -> Result<SearchOutcome, MemoryError> {
        let outcome = match &self.inner {
            Inner::Sqlite(s) => s.search(req, policy)?,
            Inner::Postgres(p) => p.search(req, policy)?,
        };
        self.record_recalls(&outcome.response.results);
        Ok(outcome)
    }

    /// Count one recall of each hit (see [`Memory::search`]).
    fn record_recalls(&self, hits: &[SearchHit]) {
        let mut pending = self
            .pending_recalls
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        pending.extend(hits.iter().map(|h| {
            (
                RecallHit {
                    source: h.source.clone(),
                    path: h.path.clone(),
                    start_line: h.start_line,
                    end_line: h.end_line,
                },
                1,
            )
        }));
        if pending.is_empty() {
            return;
        }
        let now = self.settings().clock.now_unix();
        let written = match &self.inner {
            Inner::Sqlite(s) => s.on_store(|store| store.record_recalls(&pending, now)),
            Inner::Postgres(p) => p.record_recalls(&pending, now),
        };
        match written {
            Ok(()) => pending.clear(),
            Err(e) => {
                tracing::debug!("recall counts not recorded yet: {e}");
                let n = pending.len();
                if n > PENDING_RECALLS_MAX {
                    pending.drain(..n - PENDING_RECALLS_MAX);
                }
            }
        }
    }

    /// How often searches returned the chunks of `paths` in `source` (every
    /// file of the source when `paths` is empty): this workspace's counts.
    pub fn recalls(&self, source: &str, paths: &[String]) -> Result<Vec<RecallRow>, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => s
                .on_store(|store| store.recall_rows(source, paths))
                .map_err(MemoryError::Store),
            Inner::Postgres(p) => p.recall_rows(source, paths),
        }
    }

    /// Forget the recalls last seen before `before` (unix seconds); how many.
    pub fn prune_recalls(&self, before: i64) -> Result<usize, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => s
                .on_store(|store| store.prune_recalls(before))
                .map_err(MemoryError::Store),
            Inner::Postgres(p) => p.prune_recalls(before),
        }
    }

    /// Lines of an indexed file. `workspace` reads another workspace's file
    /// from a shared index (PostgreSQL); on SQLite it is refused. A path that
    /// is not an indexed file but a citation as search prints it
    /// (`path#L3-L9`, `path:3-9`) returns exactly the cited lines.
    pub fn get(&self, req: &GetRequest, workspace: Option<&str>) -> Result<GetAnswer, MemoryError> {
        match self.get_exact(req, workspace) {
            Err(e) => match req.cited() {
                Some(cited) => self.get_exact(&cited, workspace).map_err(|_| e),
                None => Err(e),
            },
            ok => ok,
        }
    }

    fn get_exact(
        &self,
        req: &GetRequest,
        workspace: Option<&str>,
    ) -> Result<GetAnswer, MemoryError> {
        match &self.inner {
            Inner::Sqlite(_) if workspace.is_some() => Err(MemoryError::NeedsSharedIndex(
                "reading another machine's file from a shared index",
            )),
            Inner::Sqlite(s) => Ok(GetAnswer {
                response: s.get(req)?,
                workspace_id: None,
            }),
            Inner::Postgres(p) => p.get(req, workspace),
        }
    }

    /// The bounded inline sync alone (a live watcher's vouch is trusted).
    pub fn sync(&self, limit: usize) -> Result<SyncReport, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => Ok(s.sync(limit)?),
            Inner::Postgres(p) => p.sync(limit),
        }
    }

    /// [`Memory::sync`] without trusting a watcher's vouch: always walks (for
    /// a caller that just wrote a file itself).
    pub fn sync_walk(&self, limit: usize) -> Result<SyncReport, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => Ok(s.sync_walk(limit)?),
            Inner::Postgres(p) => p.sync(limit),
        }
    }

    /// Whether the index was ever built.
    pub fn is_built(&self) -> Result<bool, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => Ok(s.is_built()?),
            Inner::Postgres(p) => p.is_built(),
        }
    }

    /// Index the workspace fully when it was never indexed, without waiting
    /// for the writer lock ([`FirstIndex::Busy`] when another writer holds it).
    pub fn build_if_never_indexed(
        &self,
        what: &str,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<FirstIndex, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => Ok(s.build_if_never_indexed(what, progress)?),
            Inner::Postgres(p) => p.build_if_never_indexed(what, progress),
        }
    }

    /// Take the workspace's writer lock (one writer per workspace; on
    /// PostgreSQL rows are further serialised per source by advisory locks),
    /// waiting up to `wait` for another writer.
    pub fn writer_lock(&self, what: &str, wait: Duration) -> Result<WriterLock, MemoryError> {
        Ok(WriterLock::acquire(
            &self.settings().state_dir(),
            what,
            wait,
        )?)
    }

    /// Give a keyword-only index the vectors it lacks ([`Memory::vector_gap`]:
    /// built before the model was installed or configured): an index
    /// run with the configured model under the writer lock, waiting up to
    /// `wait` for another writer. The index is rebuilt aside and swapped in,
    /// so searches go on meanwhile (keyword-only until the swap). `Ok(None)`
    /// when there is no gap, or no model to fill it. Blocking, and long on a
    /// big workspace: `claw memory watch` runs it before it watches, the
    /// gateway on a thread of its own.
    pub fn catch_up_vectors(
        &self,
        holder: &str,
        wait: Duration,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Option<IndexReport>, MemoryError> {
        // A keyword-only index: the run rebuilds it with the model ("model
        // changed"). An index of another model is `claw memory index`'s call.
        let needs = |st: &Status| st.chunks > 0 && st.model.is_empty();
        if !needs(&self.counts()?) {
            return Ok(None);
        }
        // A service that loads its model lazily has none for a keyword-only
        // index (the REPL's): the configured model is loaded for the run.
        let own;
        let embedder = match self.index_embedder()? {
            Some(e) => e,
            None => {
                let s = self.settings();
                if matches!(s.embed, config::EmbedProvider::None) {
                    return Ok(None);
                }
                own = claw_memory::embed::load(&s.embed, s.memory.embed_batch_size);
                match own.embedder() {
                    Some(e) => e,
                    None => return Ok(None),
                }
            }
        };
        let lock = self.writer_lock(holder, wait)?;
        // Another writer may have caught up while this one waited.
        if !needs(&self.counts()?) {
            return Ok(None);
        }
        self.index(&IndexOptions::default(), Some(embedder), &lock, progress)
            .map(Some)
    }

    /// A full index run under `lock` (`force`: re-read and re-chunk
    /// everything; embeddings still come from the cache).
    pub fn index(
        &self,
        opts: &IndexOptions,
        embedder: Option<&dyn Embedder>,
        lock: &WriterLock,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<IndexReport, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => s
                .index(opts, embedder, lock, progress)
                .map_err(MemoryError::Index),
            Inner::Postgres(p) => p.index(opts, embedder, lock, progress),
        }
    }

    /// What is indexed and how far the index is behind the disk
    /// (`claw memory status --json`).
    pub fn status(&self) -> Result<Status, MemoryError> {
        let mut st = self.counts()?;
        st.vectors_missing = self.gap_for(st.chunks, st.vectors, &st.model);
        st.consolidation = consolidation::status(&self.settings().state_dir());
        let embed = &self.settings().embed;
        st.model_change = claw_memory::embed::pending_model_change(embed, &st.model);
        st.precision_fallback = claw_memory::embed::precision_fallback(embed);
        Ok(st)
    }

    /// The status as the index alone says it (counts, model, sources), without
    /// loading a model or reading the consolidation's records.
    fn counts(&self) -> Result<Status, MemoryError> {
        Ok(match &self.inner {
            Inner::Sqlite(s) => Status::sqlite(s.settings(), &s.status()?),
            Inner::Postgres(p) => p.status()?,
        })
    }

    /// The chunks that lack vectors while an embedding model is available
    /// ([`Status::vectors_missing`]): what `claw memory index` would embed.
    pub fn vector_gap(&self) -> Result<Option<VectorGap>, MemoryError> {
        Ok(self.status()?.vectors_missing)
    }

    /// The gap for an index of `chunks` chunks, `vectors` of them with a vector of
    /// `index_model`: loads the configured model (only when some chunk lacks a
    /// vector) to learn whether it is available and which it is.
    fn gap_for(&self, chunks: i64, vectors: i64, index_model: &str) -> Option<VectorGap> {
        let settings = self.settings();
        if chunks <= 0 || vectors >= chunks || matches!(settings.embed, config::EmbedProvider::None)
        {
            return None;
        }
        let loaded = claw_memory::embed::load(&settings.embed, settings.memory.embed_batch_size);
        let model = loaded.embedder()?.model_id().to_string();
        let missing = if index_model == model {
            chunks - vectors
        } else {
            chunks
        };
        (missing > 0).then_some(VectorGap {
            chunks: missing,
            model,
        })
    }

    /// Every source: the built-in ones, then the registered folders.
    pub fn sources(&self) -> Result<Vec<SourceRoot>, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => s
                .on_store(|store| claw_memory::walk::sources(s.settings(), store))
                .map_err(MemoryError::Store),
            Inner::Postgres(p) => p.sources(),
        }
    }

    /// The indexed files of the source `name`, by path: what a browser of the
    /// memory lists (an unknown name is [`SearchError::UnknownSource`]).
    pub fn files(&self, name: &str) -> Result<Vec<IndexedFile>, MemoryError> {
        let sources = self.sources()?;
        if !sources.iter().any(|s| s.name == name) {
            let mut known: Vec<String> = sources.into_iter().map(|s| s.name).collect();
            known.sort();
            return Err(MemoryError::Search(SearchError::UnknownSource {
                name: name.to_string(),
                known: known.join(", "),
            }));
        }
        let records = match &self.inner {
            Inner::Sqlite(s) => s
                .on_store(|store| store.file_records(name))
                .map_err(MemoryError::Store)?,
            Inner::Postgres(p) => p.file_records(name)?,
        };
        let mut files: Vec<IndexedFile> = records
            .into_values()
            .map(|r| IndexedFile {
                path: r.path,
                size: r.size,
                mtime: r.mtime_ns.div_euclid(1_000_000_000),
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    /// Register `path` as a notes source named `name` (default: the folder's
    /// name), after the checks of [`sources`]. `follow_symlinks_outside` also
    /// indexes files reached through links that leave the folder.
    pub fn add_source(
        &self,
        path: &Path,
        name: Option<&str>,
        follow_symlinks_outside: bool,
    ) -> Result<AddedSource, MemoryError> {
        let new = sources::resolve(path, name)?;
        let workspace = &self.settings().workspace;
        match &self.inner {
            Inner::Sqlite(s) => s.on_store(|store| -> Result<(), MemoryError> {
                let existing: Vec<_> = store
                    .sources()
                    .map_err(MemoryError::Store)?
                    .into_iter()
                    .map(|r| (r.name, r.root))
                    .collect();
                sources::check_new(workspace, &new, &existing)?;
                store
                    .add_source(&new.name, &new.root)
                    .map_err(MemoryError::Store)?;
                if follow_symlinks_outside {
                    store
                        .set_source_follow_symlinks_outside(&new.name, true)
                        .map_err(MemoryError::Store)?;
                }
                Ok(())
            })?,
            Inner::Postgres(_) if follow_symlinks_outside => {
                return Err(MemoryError::Unsupported {
                    what: "following symlinks outside a source",
                });
            }
            Inner::Postgres(p) => {
                sources::check_new(workspace, &new, &p.registered()?)?;
                p.add_source(&new.name, &new.root)?;
            }
        }
        Ok(AddedSource {
            name: new.name,
            root: new.root,
        })
    }

    /// Drop a registered source and its rows: `(files, chunks)` removed, or
    /// `None` when no source has that name. Waits for the writer lock.
    pub fn remove_source(
        &self,
        name: &str,
        lock_wait: Duration,
    ) -> Result<Option<(usize, usize)>, MemoryError> {
        let _lock = self.writer_lock("claw memory remove", lock_wait)?;
        match &self.inner {
            Inner::Sqlite(s) => s
                .on_store(|store| store.remove_source(name))
                .map_err(MemoryError::Store),
            Inner::Postgres(p) => p.remove_source(name),
        }
    }

    /// The embedder the memory searches and indexes with (loaded on first
    /// call; `None` for a keyword-only index or when the model did not load).
    pub fn index_embedder(&self) -> Result<Option<&dyn Embedder>, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => Ok(s.index_embedder()?),
            Inner::Postgres(p) => p.index_embedder(),
        }
    }

    /// Why the configured embedder did not load, once a search tried to.
    pub fn embedder_error(&self) -> Option<&EmbedError> {
        match &self.inner {
            Inner::Sqlite(s) => s.embedder_error(),
            Inner::Postgres(p) => p.embedder_error(),
        }
    }

    /// The model the index was built with (`""`: keyword-only or never built).
    pub fn index_model(&self) -> Result<String, MemoryError> {
        Ok(self.status_model()?.unwrap_or_default())
    }

    fn status_model(&self) -> Result<Option<String>, MemoryError> {
        match &self.inner {
            Inner::Sqlite(s) => s
                .on_store(|store| store.meta("model"))
                .map_err(MemoryError::Store),
            Inner::Postgres(p) => p.model(),
        }
    }

    /// The PostgreSQL service, when that is the backend.
    pub(crate) fn postgres(&self) -> Option<&pg::PgMemory> {
        match &self.inner {
            Inner::Postgres(p) => Some(p),
            Inner::Sqlite(_) => None,
        }
    }

    /// Copy this workspace's SQLite index (vectors and embedding cache
    /// included: nothing is embedded again) into the configured PostgreSQL
    /// backend, under the writer lock.
    pub fn migrate_sqlite_to_postgres(
        settings: &MemoryConfig,
    ) -> Result<claw_memory_pg::MigrateReport, MemoryError> {
        let Backend::Postgres(pgs) = settings.backend.clone() else {
            return Err(MemoryError::NoPostgres);
        };
        let sqlite = claw_memory::store::Store::open(&settings.db_path()).map_err(|source| {
            ServiceError::Open {
                path: settings.db_path(),
                source,
            }
        })?;
        let mut pg = pg::PgMemory::connect(settings.clone(), pgs, Some(None))?;
        let lock = WriterLock::acquire(
            &settings.state_dir(),
            "claw memory migrate",
            Duration::from_secs(5),
        )?;
        let store = pg.store_mut();
        let report = pg::off_runtime(move || claw_memory_pg::copy_sqlite(&sqlite, store))
            .map_err(MemoryError::Migrate)?;
        drop(lock);
        Ok(report)
    }
}
