//! The service over PostgreSQL + pgvector (`memory.backend: postgres`): the
//! same steps as the SQLite service (bounded inline sync before a search,
//! search, get, status, index, sources) over `claw_memory_pg::PgStore`, this
//! workspace's rows in a shared database.
//!
//! The blocking `postgres` client drives its own runtime and panics when called
//! from a tokio worker (or a `spawn_blocking` thread of one): every call that
//! touches the database runs on a thread of its own ([`off_runtime`]).

use crate::status::{ChangedOnDisk, Status};
use crate::{GetAnswer, MemoryError};
use claw_memory::config::{MemoryConfig, PgSettings};
use claw_memory::embed::{self, Embedder, Loaded};
use claw_memory::freshness::{self, FileRef, StaleReason, SyncReport};
use claw_memory::index_storage::{IndexStorage, source_roots};
use claw_memory::indexer::{self, IndexOptions, IndexReport, OversizedNote, Progress};
use claw_memory::lock::{LockError, WriterLock};
use claw_memory::search::engine;
use claw_memory::search::{GetRequest, Mode, SearchError, SearchRequest};
use claw_memory::service::{FirstIndex, SearchOutcome, SyncPolicy};
use claw_memory::store::SkippedRecord;
use claw_memory::store::StoreError;
use claw_memory::walk::SourceRoot;
use claw_memory_pg::{PgConfig, PgStore};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Run `f` on its own thread (see the module doc).
pub(crate) fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// Where the query and index embedder comes from.
enum Model {
    /// Loaded from the settings on first need, then kept.
    Lazy(OnceLock<Loaded>),
    /// Shared with other owners in the process (the gateway's watcher).
    Shared(Option<Arc<dyn Embedder>>),
}

/// This workspace's memory in a PostgreSQL database.
pub(crate) struct PgMemory {
    settings: MemoryConfig,
    pg: PgSettings,
    store: Option<PgStore>,
    model: Model,
    holder: String,
}

/// Where this workspace's sources differ from its rows (stat-level):
/// `(source, path)` of new and modified files, and the files gone from disk.
struct Behind {
    new: Vec<(String, String)>,
    modified: Vec<(String, String)>,
    removed: Vec<FileRef>,
    /// Files over the size limit with no rows: left out, not new. (This
    /// backend keeps no record of skipped files; the disk is the record.)
    too_big: Vec<OversizedNote>,
}

impl PgMemory {
    /// Connect as this workspace (its id kept in the state dir).
    pub(crate) fn connect(
        settings: MemoryConfig,
        pg: PgSettings,
        shared: Option<Option<Arc<dyn Embedder>>>,
    ) -> Result<PgMemory, MemoryError> {
        let state = settings.state_dir();
        let open = || -> Result<PgStore, StoreError> {
            let id =
                claw_memory_pg::workspace_id(&state).map_err(|source| StoreError::StateDir {
                    path: state.clone(),
                    source,
                })?;
            let mut cfg = PgConfig::new(&pg.url, &pg.namespace, id);
            cfg.schema = pg.schema.clone();
            cfg.search_namespaces = pg.search_namespaces.clone();
            PgStore::connect(cfg)
        };
        let store = off_runtime(open).map_err(|source| MemoryError::Open {
            location: pg.location(),
            source,
        })?;
        Ok(PgMemory {
            settings,
            pg,
            store: Some(store),
            model: match shared {
                Some(e) => Model::Shared(e),
                None => Model::Lazy(OnceLock::new()),
            },
            holder: freshness::SYNC_HOLDER.to_string(),
        })
    }

    pub(crate) fn settings(&self) -> &MemoryConfig {
        &self.settings
    }

    pub(crate) fn location(&self) -> String {
        self.pg.location()
    }

    pub(crate) fn set_lock_holder(&mut self, holder: String) {
        self.holder = holder;
    }

    fn store(&self) -> &PgStore {
        // Present from `connect` until `drop`.
        self.store.as_ref().expect("connected")
    }

    /// The embedder (loaded on first call; none for a keyword-only index).
    fn embedder(&self) -> Result<Option<&dyn Embedder>, StoreError> {
        match &self.model {
            Model::Shared(e) => Ok(e.as_deref()),
            Model::Lazy(cell) => {
                if let Some(l) = cell.get() {
                    return Ok(l.embedder());
                }
                let keyword_only =
                    IndexStorage::meta(self.store(), "model")?.is_some_and(|m| m.is_empty());
                let loaded = if keyword_only {
                    Loaded::Disabled
                } else {
                    embed::load(&self.settings.embed, self.settings.memory.embed_batch_size)
                };
                Ok(cell.get_or_init(|| loaded).embedder())
            }
        }
    }

    pub(crate) fn embedder_error(&self) -> Option<&claw_memory::embed::EmbedError> {
        match &self.model {
            Model::Lazy(cell) => match cell.get() {
                Some(Loaded::Unavailable(e)) => Some(e),
                _ => None,
            },
            Model::Shared(_) => None,
        }
    }

    pub(crate) fn index_embedder(&self) -> Result<Option<&dyn Embedder>, MemoryError> {
        off_runtime(|| self.embedder()).map_err(MemoryError::Store)
    }

    fn behind_disk(&self) -> Result<Behind, StoreError> {
        let pg = self.store();
        let mut b = Behind {
            new: Vec::new(),
            modified: Vec::new(),
            removed: Vec::new(),
            too_big: Vec::new(),
        };
        let limit = self.settings.memory.max_file_bytes;
        for src in source_roots(&self.settings, pg)? {
            let (disk, _) = claw_memory::walk::walk_source(&src);
            let stored = pg.file_records(&src.name)?;
            // What the SQLite index remembers as skipped for its size, as of now.
            let oversized: std::collections::HashMap<String, SkippedRecord> = disk
                .iter()
                .filter(|f| f.size.max(0) as u64 > limit && !stored.contains_key(&f.rel))
                .map(|f| {
                    b.too_big.push(OversizedNote {
                        source: src.name.clone(),
                        path: f.rel.clone(),
                        size: f.size.max(0) as u64,
                        limit,
                    });
                    let r = SkippedRecord {
                        path: f.rel.clone(),
                        mtime_ns: f.mtime_ns,
                        size: f.size,
                        reason: claw_memory::walk::IssueReason::TooBig.as_str().to_string(),
                        message: String::new(),
                    };
                    (f.rel.clone(), r)
                })
                .collect();
            let p = claw_memory::plan::plan_with_skipped(&disk, &stored, &oversized, false);
            let named = |f: &claw_memory::walk::DiskFile| (src.name.clone(), f.rel.clone());
            b.new.extend(p.add.iter().map(named));
            b.modified.extend(p.check.iter().map(named));
            b.removed.extend(p.remove.into_iter().map(|path| FileRef {
                source: src.name.clone(),
                path,
            }));
        }
        Ok(b)
    }

    /// The bounded inline sync, as on SQLite: stat the sources, re-index up
    /// to `limit` changed files without waiting for the writer lock, else
    /// answer from the index and say it is stale. Rows are written per source
    /// under PostgreSQL advisory locks (by the store). With the report, the
    /// notes left out for their size.
    fn sync_now(&self, limit: usize) -> Result<(SyncReport, Vec<OversizedNote>), MemoryError> {
        let started = Instant::now();
        let behind = self.behind_disk().map_err(MemoryError::Freshness)?;
        let gone = behind.removed;
        let mut dirty = behind.new;
        dirty.extend(behind.modified);
        dirty.extend(gone.iter().map(|g| (g.source.clone(), g.path.clone())));
        if dirty.is_empty() {
            let fresh = SyncReport::Fresh {
                checked_ms: started.elapsed().as_millis() as u64,
                watcher: None,
            };
            return Ok((fresh, behind.too_big));
        }
        let sample = || {
            dirty
                .iter()
                .take(5)
                .map(|(s, p)| FileRef::new(s.clone(), p.clone()))
                .collect()
        };
        if dirty.len() > limit {
            let stale = SyncReport::Stale {
                pending: dirty.len(),
                reason: StaleReason::Backlog { limit },
                sample: sample(),
            };
            return Ok((stale, behind.too_big));
        }
        let lock =
            match WriterLock::acquire(&self.settings.state_dir(), &self.holder, Duration::ZERO) {
                Ok(lock) => lock,
                Err(e) => {
                    let reason = match e {
                        LockError::Held { pid, what, .. } => StaleReason::Busy { pid, what },
                        other => StaleReason::Failed {
                            message: other.to_string(),
                        },
                    };
                    let stale = SyncReport::Stale {
                        pending: dirty.len(),
                        reason,
                        sample: sample(),
                    };
                    return Ok((stale, behind.too_big));
                }
            };
        let embedder = self.embedder().map_err(MemoryError::Freshness)?;
        // `run_paths` needs the store mutably only for grouping, which the
        // PostgreSQL store does per file: a second handle on the pool does it.
        let mut pg = self.store().clone();
        let report = indexer::run_paths(&mut pg, &self.settings, embedder, &dirty, &lock, &|_| {})
            .map_err(MemoryError::Index)?;
        // A file the run left out (too big, binary, unreadable) was not
        // re-indexed, as on SQLite.
        let left_out = |s: &str, p: &str| {
            report
                .issues
                .iter()
                .any(|i| i.skipped && i.source == s && i.path == p)
        };
        let reindexed = dirty
            .iter()
            .filter(|(s, p)| !gone.iter().any(|g| &g.source == s && &g.path == p))
            .filter(|(s, p)| !left_out(s, p))
            .map(|(s, p)| FileRef::new(s.clone(), p.clone()))
            .collect();
        let mut too_big = behind.too_big;
        too_big.extend(report.too_big);
        too_big.sort_by(|a, b| (&a.source, &a.path).cmp(&(&b.source, &b.path)));
        too_big.dedup_by(|a, b| a.source == b.source && a.path == b.path);
        let synced = SyncReport::Synced {
            reindexed,
            removed: gone,
            elapsed_ms: started.elapsed().as_millis() as u64,
        };
        Ok((synced, too_big))
    }

    /// One watcher batch: every file that differs from its rows is
    /// re-indexed (or removed) under the writer lock, waited for up to
    /// `wait`; rows are written per source under advisory locks, as `memory
    /// index` writes them. `(report, reindexed, removed)`.
    pub(crate) fn apply_changes(
        &self,
        holder: &str,
        wait: Duration,
    ) -> Result<(IndexReport, Vec<FileRef>, Vec<FileRef>), MemoryError> {
        off_runtime(|| {
            let behind = self.behind_disk().map_err(MemoryError::Freshness)?;
            let gone = behind.removed;
            let mut dirty = behind.new;
            dirty.extend(behind.modified);
            let reindexed: Vec<FileRef> = dirty
                .iter()
                .map(|(s, p)| FileRef::new(s.clone(), p.clone()))
                .collect();
            dirty.extend(gone.iter().map(|g| (g.source.clone(), g.path.clone())));
            if dirty.is_empty() {
                return Ok((IndexReport::default(), Vec::new(), Vec::new()));
            }
            let lock = WriterLock::acquire(&self.settings.state_dir(), holder, wait)?;
            let embedder = self.embedder().map_err(MemoryError::Freshness)?;
            let mut pg = self.store().clone();
            let report =
                indexer::run_paths(&mut pg, &self.settings, embedder, &dirty, &lock, &|_| {})
                    .map_err(MemoryError::Index)?;
            Ok((report, reindexed, gone))
        })
    }

    pub(crate) fn sync(&self, limit: usize) -> Result<SyncReport, MemoryError> {
        off_runtime(|| self.sync_now(limit)).map(|(sync, _)| sync)
    }

    pub(crate) fn search(
        &self,
        req: &SearchRequest,
        policy: SyncPolicy,
    ) -> Result<SearchOutcome, MemoryError> {
        off_runtime(|| {
            let (sync, too_big) = match policy {
                // Not checked: the disk is this backend's record of what is too big.
                SyncPolicy::Skip => (SyncReport::Skipped, Vec::new()),
                SyncPolicy::Inline { limit } => self.sync_now(limit)?,
            };
            let embedder = if req.mode == Mode::Fts {
                None
            } else {
                self.embedder().map_err(MemoryError::Freshness)?
            };
            let response = engine::search_in_zone(
                self.store(),
                embedder,
                &self.settings.memory,
                req,
                self.settings.clock.now_unix(),
                &self.settings.zone,
            )?;
            Ok(SearchOutcome {
                response,
                sync,
                too_big,
            })
        })
    }

    /// This workspace's file from disk, else another workspace's from the
    /// shared index (with the owning workspace's id). `workspace` names another
    /// workspace to read from (its file even when this one has the same path).
    pub(crate) fn get(
        &self,
        req: &GetRequest,
        workspace: Option<&str>,
    ) -> Result<GetAnswer, MemoryError> {
        off_runtime(|| {
            let pg = self.store();
            let sources = source_roots(&self.settings, pg).map_err(SearchError::from)?;
            let workspace = workspace.filter(|w| *w != pg.config().workspace);
            let here = match workspace {
                None => engine::get_lines_in(pg, &sources, req),
                Some(_) => Err(SearchError::NotIndexed(req.path.clone())),
            };
            match here {
                Ok(response) => Ok(GetAnswer {
                    response,
                    workspace_id: None,
                }),
                Err(SearchError::NotIndexed(p)) => {
                    match shared_file(pg, req, workspace).map_err(SearchError::from)? {
                        Some((response, ws)) => Ok(GetAnswer {
                            response,
                            workspace_id: Some(ws),
                        }),
                        None => Err(SearchError::NotIndexed(p).into()),
                    }
                }
                Err(e) => Err(e.into()),
            }
        })
    }

    pub(crate) fn status(&self) -> Result<Status, MemoryError> {
        off_runtime(|| {
            let pg = self.store();
            let read = MemoryError::Status;
            let st = pg.stats().map_err(read)?;
            let behind = self.behind_disk().map_err(MemoryError::Freshness)?;
            let loc = self.location();
            Ok(Status {
                backend: "postgres",
                workspace: self.settings.workspace.display().to_string(),
                db_path: loc.clone(),
                db_bytes: u64::try_from(st.db_bytes).unwrap_or(0),
                files: st.files,
                chunks: st.chunks,
                vectors: st.vectors,
                model: IndexStorage::meta(pg, "model")
                    .map_err(read)?
                    .unwrap_or_default(),
                dims: pg.vec_dims().map_err(read)?.unwrap_or(0),
                cache_entries: st.cache_entries,
                vector_backend: format!("pgvector {} (HNSW, cosine)", st.pgvector),
                fts_tokenizers: vec!["tsvector simple (stems)", "pg_trgm"],
                chunker_version: IndexStorage::meta(pg, "chunker_version").map_err(read)?,
                last_index_at: IndexStorage::meta(pg, "last_index_at")
                    .map_err(read)?
                    .and_then(|v| v.parse().ok()),
                changed_on_disk: ChangedOnDisk {
                    new: behind.new.len(),
                    modified: behind.modified.len(),
                    deleted: behind.removed.len(),
                },
                sources: source_roots(&self.settings, pg).map_err(read)?,
                watcher: None,
                // Binary files are re-examined by each index run; a note over
                // the size limit is left out until it changes.
                skipped_files: behind.too_big.len() as i64,
                location: loc,
                namespaces: pg.namespaces().to_vec(),
                visible_chunks: st.visible_chunks,
                workspace_id: Some(pg.config().workspace.clone()),
                too_big: behind.too_big,
                vectors_missing: None,
                consolidation: Default::default(),
                model_change: None,
                precision_fallback: None,
            })
        })
    }

    pub(crate) fn record_recalls(
        &self,
        hits: &[(claw_memory::store::RecallHit, i64)],
        at: i64,
    ) -> Result<(), StoreError> {
        off_runtime(|| self.store().record_recalls(hits, at))
    }

    pub(crate) fn recall_rows(
        &self,
        source: &str,
        paths: &[String],
    ) -> Result<Vec<claw_memory::store::RecallRow>, MemoryError> {
        off_runtime(|| self.store().recall_rows(source, paths)).map_err(MemoryError::Store)
    }

    pub(crate) fn prune_recalls(&self, before: i64) -> Result<usize, MemoryError> {
        off_runtime(|| self.store().prune_recalls(before)).map_err(MemoryError::Store)
    }

    pub(crate) fn model(&self) -> Result<Option<String>, MemoryError> {
        off_runtime(|| IndexStorage::meta(self.store(), "model")).map_err(MemoryError::Store)
    }

    pub(crate) fn is_built(&self) -> Result<bool, MemoryError> {
        off_runtime(|| IndexStorage::meta(self.store(), "model"))
            .map(|m| m.is_some())
            .map_err(MemoryError::Freshness)
    }

    pub(crate) fn index(
        &self,
        opts: &IndexOptions,
        embedder: Option<&dyn Embedder>,
        lock: &WriterLock,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<IndexReport, MemoryError> {
        off_runtime(|| {
            let mut pg = self.store().clone();
            indexer::run(&mut pg, &self.settings, embedder, opts, lock, progress)
                .map_err(MemoryError::Index)
        })
    }

    pub(crate) fn build_if_never_indexed(
        &self,
        what: &str,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<FirstIndex, MemoryError> {
        if self.is_built()? {
            return Ok(FirstIndex::AlreadyBuilt);
        }
        let lock = match FirstIndex::writer_lock(&self.settings, what).map_err(MemoryError::Lock)? {
            Ok(l) => l,
            Err(busy) => return Ok(busy),
        };
        let embedder = off_runtime(|| self.embedder()).map_err(MemoryError::Freshness)?;
        let report = self.index(&IndexOptions::default(), embedder, &lock, progress)?;
        Ok(FirstIndex::Built(Box::new(report)))
    }

    pub(crate) fn sources(&self) -> Result<Vec<SourceRoot>, MemoryError> {
        off_runtime(|| source_roots(&self.settings, self.store())).map_err(MemoryError::Store)
    }

    /// The stored file states of one of this workspace's sources.
    pub(crate) fn file_records(
        &self,
        source: &str,
    ) -> Result<std::collections::HashMap<String, claw_memory::store::FileRecord>, MemoryError>
    {
        off_runtime(|| self.store().file_records(source)).map_err(MemoryError::Store)
    }

    pub(crate) fn registered(&self) -> Result<Vec<(String, std::path::PathBuf)>, MemoryError> {
        off_runtime(|| self.store().sources())
            .map(|v| v.into_iter().map(|s| (s.name, s.root)).collect())
            .map_err(MemoryError::Store)
    }

    pub(crate) fn add_source(&self, name: &str, root: &std::path::Path) -> Result<(), MemoryError> {
        off_runtime(|| self.store().add_source(name, root)).map_err(MemoryError::Store)
    }

    pub(crate) fn remove_source(&self, name: &str) -> Result<Option<(usize, usize)>, MemoryError> {
        off_runtime(|| self.store().remove_source(name)).map_err(MemoryError::Store)
    }

    /// The store, for the migration (run off the runtime by the caller).
    pub(crate) fn store_mut(&mut self) -> &mut PgStore {
        self.store.as_mut().expect("connected")
    }
}

/// `get` of a file that is not this workspace's: another workspace sharing the
/// namespace indexed it (a search here can return it). Served from its stored
/// chunks, redacted at index time, reassembled by line range. `Ok(None)` when
/// no other workspace has it either.
fn shared_file(
    pg: &PgStore,
    req: &GetRequest,
    workspace: Option<&str>,
) -> Result<Option<(claw_memory::search::GetResponse, String)>, StoreError> {
    let Some(rel) = relative_request_path(&req.path) else {
        return Ok(None);
    };
    Ok(pg.indexed_file(&rel, workspace)?.map(|f| {
        (
            engine::slice_lines(&f.text, &f.path, &f.source, req),
            f.workspace,
        )
    }))
}

/// `req.path` as a path relative to a source root (`./` and repeated `/`
/// dropped), or None when it cannot name another workspace's file (absolute, `..`).
fn relative_request_path(raw: &str) -> Option<String> {
    let p = std::path::Path::new(raw.trim());
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

impl PgMemory {
    /// Close the pool; the model is left to the process's exit (see
    /// [`crate::Memory::finish_for_exit`]).
    pub(crate) fn finish_for_exit(mut self) {
        std::mem::forget(std::mem::replace(&mut self.model, Model::Shared(None)));
    }
}

impl Drop for PgMemory {
    /// The pool's connections close off the runtime too (closing one blocks on it).
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            off_runtime(move || drop(store));
        }
    }
}
