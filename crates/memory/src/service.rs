//! The memory engine assembled once: [`MemoryService`] owns the store connection,
//! loads the query embedder lazily (only when a search or an inline sync needs
//! vectors, and the index has some), syncs changed files before a search under
//! an explicit [`SyncPolicy`], searches, gets lines and reports status. The CLI
//! (`claw memory search|get`), the assistant's memory tools and the evaluation
//! all go through it. Blocking; call it from `spawn_blocking`.
#![warn(missing_docs)]

use crate::config::{MemoryConfig, MemorySettings};
use crate::embed::{self, EmbedError, Embedder, Loaded};
use crate::freshness::{self, StaleReason, Staleness, SyncReport};
use crate::indexer::{self, IndexError, IndexOptions, IndexReport, Progress};
use crate::lock::{LockError, WriterLock};
use crate::search::engine;
use crate::search::types::{GetRequest, GetResponse, Mode, SearchError, SearchResponse};
use crate::search::{SearchRequest, get};
use crate::store::{Store, StoreError, StoreStats, VecBackend};
use crate::walk::{self, SourceRoot};
use crate::watch::{self, WatcherStatus};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Whether (and how much) a search first re-indexes files changed on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Stat the sources (no hashing) and re-index at most `limit` dirty files
    /// inline, never waiting for the writer lock; more, or a busy writer, is
    /// reported as [`SyncReport::Stale`] and the answer comes from the index.
    Inline {
        /// Most files re-indexed before answering.
        limit: usize,
    },
    /// Answer from the index as it is ([`SyncReport::Skipped`]).
    Skip,
}

impl SyncPolicy {
    /// [`SyncPolicy::Skip`] when the caller asked for no sync (`--no-sync`,
    /// `no_sync: true`), else [`SyncPolicy::DEFAULT`].
    pub fn skip_if(no_sync: bool) -> SyncPolicy {
        if no_sync {
            SyncPolicy::Skip
        } else {
            SyncPolicy::DEFAULT
        }
    }

    /// `Inline` with [`freshness::DEFAULT_SYNC_LIMIT`] files.
    pub const DEFAULT: SyncPolicy = SyncPolicy::Inline {
        limit: freshness::DEFAULT_SYNC_LIMIT,
    };
}

/// A search's answer plus what the inline sync did (serialised: the response
/// flattened beside `sync`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchOutcome {
    /// The engine's answer.
    #[serde(flatten)]
    pub response: SearchResponse,
    /// `{"status": "fresh" | "synced" | "stale" | "skipped", ...}`.
    pub sync: SyncReport,
    /// Notes the index leaves out for their size, so a search cannot find
    /// them (absent from the JSON when there are none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub too_big: Vec<indexer::OversizedNote>,
}

/// What the index holds and how far it is behind the disk.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServiceStatus {
    /// Counts of files, chunks, vectors, bytes.
    pub stats: StoreStats,
    /// The embedding model the index was built with (`None`: never built;
    /// `Some("")`: keyword-only).
    pub model: Option<String>,
    /// Files changed on disk since they were indexed (stat only).
    pub staleness: Staleness,
    /// Vector dimension of the index (`None`: no vectors).
    pub dims: Option<usize>,
    /// Whether sqlite-vec is usable.
    #[serde(skip)]
    pub vector_backend: VecBackend,
    /// The chunker version the index was built with.
    pub chunker_version: Option<String>,
    /// Unix seconds of the last index run.
    pub last_index_at: Option<i64>,
    /// Every source (built-ins, then registered folders).
    pub sources: Vec<SourceRoot>,
    /// The most recent watcher heartbeat, if any.
    pub watcher: Option<WatcherStatus>,
    /// Files remembered as skipped for cause (too big, binary).
    pub skipped_files: i64,
    /// Of those, the notes over the size limit, by path and size.
    pub too_big: Vec<indexer::OversizedNote>,
}

/// Errors of the service. Each variant's message is its context; the cause is
/// its `source()` (print the chain, e.g. with anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The database could not be opened.
    #[error("opening {}", path.display())]
    Open {
        /// The database file.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
    /// Checking the disk against the index failed.
    #[error("checking freshness")]
    Freshness(#[source] StoreError),
    /// The inline sync failed.
    #[error("syncing changed files before the search")]
    Sync(#[source] StoreError),
    /// Reading what the index holds failed.
    #[error("reading the index status")]
    Status(#[source] StoreError),
    /// The search or get itself.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// The first indexing pass of a never-indexed workspace failed.
    #[error("indexing the workspace for the first time")]
    FirstIndex(#[source] IndexError),
    /// Taking the writer lock for the first indexing pass failed.
    #[error("taking the writer lock")]
    Lock(#[source] LockError),
}

/// What [`MemoryService::build_if_never_indexed`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum FirstIndex {
    /// The index already existed: nothing to do.
    AlreadyBuilt,
    /// The workspace was indexed for the first time.
    Built(Box<IndexReport>),
    /// Another process holds the writer lock (it is probably building the
    /// index right now); searches answer from what is there meanwhile.
    Busy {
        /// The holder's pid.
        pid: u32,
        /// What the holder said it is doing.
        what: String,
    },
}

impl FirstIndex {
    /// The writer lock for a first build, taken without waiting for another
    /// writer ([`freshness::SYNC_LOCK_WAIT`]): `Ok(Err(FirstIndex::Busy))` when
    /// another process holds it, on either backend.
    pub fn writer_lock(
        settings: &MemoryConfig,
        what: &str,
    ) -> Result<Result<WriterLock, FirstIndex>, LockError> {
        match WriterLock::acquire(&settings.state_dir(), what, freshness::SYNC_LOCK_WAIT) {
            Ok(l) => Ok(Ok(l)),
            Err(LockError::Held { pid, what, .. }) => Ok(Err(FirstIndex::Busy { pid, what })),
            Err(e) => Err(e),
        }
    }
}

/// Where the query embedder comes from.
enum EmbedderSlot<'e> {
    /// Loaded from the settings on first need, then kept.
    Lazy(OnceLock<Loaded>),
    /// Supplied by the caller (already loaded, or none).
    Given(Option<&'e dyn Embedder>),
    /// Shared with other owners in the process (a watcher's sink): one model copy.
    Shared(Option<Arc<dyn Embedder>>),
}

/// A store plus a lazily loaded query embedder. `'e` is the lifetime of an
/// embedder supplied with [`MemoryService::with_store`]; services that load
/// their own are `MemoryService<'static>`.
pub struct MemoryService<'e> {
    settings: MemoryConfig,
    store: Mutex<Store>,
    embedder: EmbedderSlot<'e>,
    /// What the inline sync says it is doing in the writer lock.
    holder: String,
}

impl MemoryService<'static> {
    /// Open the workspace's memory database; the embedder loads on first need.
    pub fn open(settings: MemoryConfig) -> Result<MemoryService<'static>, ServiceError> {
        let path = settings.db_path();
        let store = Store::open(&path).map_err(|source| ServiceError::Open { path, source })?;
        Ok(MemoryService {
            settings,
            store: Mutex::new(store),
            embedder: EmbedderSlot::Lazy(OnceLock::new()),
            holder: freshness::SYNC_HOLDER.to_string(),
        })
    }

    /// Open the workspace's memory database with an embedder shared with other
    /// owners in the process (`None`: keyword only): a long-lived process loads
    /// the model once for its searches and its watcher.
    pub fn open_shared(
        settings: MemoryConfig,
        embedder: Option<Arc<dyn Embedder>>,
    ) -> Result<MemoryService<'static>, ServiceError> {
        let path = settings.db_path();
        let store = Store::open(&path).map_err(|source| ServiceError::Open { path, source })?;
        Ok(MemoryService {
            settings,
            store: Mutex::new(store),
            embedder: EmbedderSlot::Shared(embedder),
            holder: freshness::SYNC_HOLDER.to_string(),
        })
    }
}

impl<'e> MemoryService<'e> {
    /// A service over an open store with a given embedder (`None`: keyword only).
    pub fn with_store(
        settings: MemoryConfig,
        store: Store,
        embedder: Option<&'e dyn Embedder>,
    ) -> MemoryService<'e> {
        MemoryService {
            settings,
            store: Mutex::new(store),
            embedder: EmbedderSlot::Given(embedder),
            holder: freshness::SYNC_HOLDER.to_string(),
        }
    }

    /// Name what an inline sync is doing in the writer lock (shown to another
    /// writer that finds it held), e.g. the command that runs the search.
    pub fn set_lock_holder(&mut self, holder: impl Into<String>) {
        self.holder = holder.into();
    }

    /// Replace the retrieval parameters (weights, half-life, min score…).
    pub fn set_retrieval(&mut self, params: MemorySettings) {
        self.settings.memory = params;
    }

    /// The settings the service runs with.
    pub fn settings(&self) -> &MemoryConfig {
        &self.settings
    }

    /// The store, reopened first when its file was replaced (a rebuild swapped
    /// a new database in; see `rebuild`): a long-lived service (the gateway,
    /// MCP, the REPL) follows it. A deleted file is left alone (whoever
    /// deletes it rebuilds it), and when the reopen fails the old file keeps
    /// answering.
    fn store(&self) -> MutexGuard<'_, Store> {
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if store.is_replaced()
            && store.path().exists()
            && let Ok(fresh) = store.reopen()
        {
            *store = fresh;
        }
        store
    }

    /// The embedder, loading it on first call (not at all while the index is
    /// keyword-only, so those searches stay fast). "Keyword-only" is not
    /// remembered: once a catch-up swaps in an index with vectors (the REPL's
    /// own, or another process's), the next call loads the model.
    fn embedder(&self, store: &Store) -> Result<Option<&dyn Embedder>, StoreError> {
        match &self.embedder {
            EmbedderSlot::Given(e) => Ok(*e),
            EmbedderSlot::Shared(e) => Ok(e.as_deref()),
            EmbedderSlot::Lazy(cell) => {
                if let Some(l) = cell.get() {
                    return Ok(l.embedder());
                }
                let loaded = query_embedder(&self.settings, store, Mode::Hybrid)?;
                if matches!(loaded, Loaded::Disabled) {
                    return Ok(None);
                }
                Ok(cell.get_or_init(|| loaded).embedder())
            }
        }
    }

    /// The embedder that indexes for this service (the query embedder, loaded
    /// on first call; `None` for a keyword-only index or when the configured
    /// model did not load). A watcher in the same process indexes with it, so
    /// the model is loaded once.
    pub fn index_embedder(&self) -> Result<Option<&dyn Embedder>, ServiceError> {
        let store = self.store();
        self.embedder(&store).map_err(ServiceError::Freshness)
    }

    /// Close the store and leave a model this service loaded to the process's
    /// exit: for a one-shot command about to exit, freeing the model (its
    /// session and tokenizers) costs 7–18 ms for nothing.
    pub fn finish_for_exit(self) {
        let MemoryService {
            store, embedder, ..
        } = self;
        drop(store);
        std::mem::forget(embedder);
    }

    /// Why the configured embedder did not load, once a search tried to load it.
    pub fn embedder_error(&self) -> Option<&EmbedError> {
        match &self.embedder {
            EmbedderSlot::Lazy(cell) => match cell.get() {
                Some(Loaded::Unavailable(e)) => Some(e),
                _ => None,
            },
            EmbedderSlot::Given(_) | EmbedderSlot::Shared(_) => None,
        }
    }

    /// Sync under `policy`, then search. The embedder loads when the mode needs
    /// vectors or dirty files must be re-indexed (their chunks need vectors).
    ///
    /// Without a vouching watcher, the stat walk runs on a helper thread while
    /// this one answers the query from the index as it is; when the check
    /// finds the index fresh that answer stands, otherwise the dirty files
    /// are synced and the query runs again. The outcome is the one of syncing
    /// first and searching after.
    pub fn search(
        &self,
        req: &SearchRequest,
        policy: SyncPolicy,
    ) -> Result<SearchOutcome, ServiceError> {
        let mut store = self.store();
        // A live, idle watcher vouches for the index: no stat walk.
        let vouched = match policy {
            SyncPolicy::Skip => None,
            SyncPolicy::Inline { .. } => {
                freshness::vouching_watcher(&store).map_err(ServiceError::Freshness)?
            }
        };
        let query_embedder = |embedder| {
            if req.mode == Mode::Fts {
                None
            } else {
                embedder
            }
        };
        let limit = match (policy, vouched) {
            (SyncPolicy::Inline { limit }, None) => limit,
            _ => {
                let embedder = if req.mode != Mode::Fts {
                    self.embedder(&store).map_err(ServiceError::Freshness)?
                } else {
                    None
                };
                let sync = match vouched {
                    Some(_) => SyncReport::Fresh {
                        checked_ms: 0,
                        watcher: vouched,
                    },
                    None => SyncReport::Skipped,
                };
                let response = self.query(&store, query_embedder(embedder), req)?;
                let too_big = self.oversized(&store)?;
                return Ok(SearchOutcome {
                    response,
                    sync,
                    too_big,
                });
            }
        };
        let pending =
            freshness::start_check(&self.settings, &store).map_err(ServiceError::Freshness)?;
        let early = if req.mode != Mode::Fts {
            self.embedder(&store).map_err(ServiceError::Freshness)?
        } else {
            None
        };
        let answer = self.query(&store, early, req);
        let st = pending.finish(&store).map_err(ServiceError::Freshness)?;
        if st.is_fresh() {
            return Ok(SearchOutcome {
                response: answer?,
                sync: SyncReport::Fresh {
                    checked_ms: st.elapsed_ms,
                    watcher: None,
                },
                too_big: self.oversized(&store)?,
            });
        }
        let embedder = self.embedder(&store).map_err(ServiceError::Freshness)?;
        let sync = self.sync_stale(&mut store, embedder, limit, st)?;
        // Nothing was written when the sync declined a backlog or another
        // model's index: the answer already given stands. Otherwise the index
        // moved (or another writer is moving it): ask again.
        let unchanged = matches!(
            &sync,
            SyncReport::Stale {
                reason: StaleReason::Backlog { .. } | StaleReason::Identity(_),
                ..
            }
        );
        let response = match answer {
            Ok(response) if unchanged => response,
            _ => self.query(&store, query_embedder(embedder), req)?,
        };
        let too_big = self.oversized(&store)?;
        Ok(SearchOutcome {
            response,
            sync,
            too_big,
        })
    }

    /// The notes the index leaves out for their size ([`indexer::oversized_notes`]).
    fn oversized(&self, store: &Store) -> Result<Vec<indexer::OversizedNote>, ServiceError> {
        let sources = walk::sources(&self.settings, store).map_err(ServiceError::Status)?;
        indexer::oversized_notes(store, &sources, self.settings.memory.max_file_bytes)
            .map_err(ServiceError::Status)
    }

    fn query(
        &self,
        store: &Store,
        embedder: Option<&dyn Embedder>,
        req: &SearchRequest,
    ) -> Result<SearchResponse, ServiceError> {
        Ok(engine::search_in_zone(
            store,
            embedder,
            &self.settings.memory,
            req,
            self.settings.clock.now_unix(),
            &self.settings.zone,
        )?)
    }

    /// The inline sync alone (no search): at most `limit` changed files are
    /// re-indexed, never waiting for the writer lock.
    pub fn sync(&self, limit: usize) -> Result<SyncReport, ServiceError> {
        let store = self.store();
        if let Some(pid) = freshness::vouching_watcher(&store).map_err(ServiceError::Freshness)? {
            return Ok(SyncReport::Fresh {
                checked_ms: 0,
                watcher: Some(pid),
            });
        }
        drop(store);
        self.sync_walk(limit)
    }

    /// [`MemoryService::sync`] without trusting a watcher's vouch: always walks.
    /// For a caller that just wrote a file itself and cannot wait for the
    /// watcher to be told (the assistant's `write_file` then `memory_search` in
    /// one turn).
    pub fn sync_walk(&self, limit: usize) -> Result<SyncReport, ServiceError> {
        let mut store = self.store();
        let st = freshness::check(&self.settings, &store).map_err(ServiceError::Freshness)?;
        if st.is_fresh() {
            return Ok(SyncReport::Fresh {
                checked_ms: st.elapsed_ms,
                watcher: None,
            });
        }
        let embedder = self.embedder(&store).map_err(ServiceError::Freshness)?;
        self.sync_stale(&mut store, embedder, limit, st)
    }

    /// Brings the index up to date after a check `st` that found it stale (at
    /// most `limit` files, else the backlog is reported).
    fn sync_stale(
        &self,
        store: &mut Store,
        embedder: Option<&dyn Embedder>,
        limit: usize,
        st: freshness::Staleness,
    ) -> Result<SyncReport, ServiceError> {
        freshness::sync_checked(store, &self.settings, embedder, limit, st, &self.holder)
            .map_err(ServiceError::Sync)
    }

    /// Whether the index was ever built (a `model` identity is recorded).
    pub fn is_built(&self) -> Result<bool, ServiceError> {
        let store = self.store();
        Ok(store
            .meta("model")
            .map_err(ServiceError::Freshness)?
            .is_some())
    }

    /// Index the workspace fully when it was never indexed (its first use): the
    /// inline sync is bounded and would leave such a workspace `stale`. Takes the
    /// writer lock without waiting; another writer is reported as
    /// [`FirstIndex::Busy`], never waited for. `progress` sees the indexer's events.
    pub fn build_if_never_indexed(
        &self,
        what: &str,
        progress: &dyn Fn(Progress),
    ) -> Result<FirstIndex, ServiceError> {
        let mut store = self.store();
        if store
            .meta("model")
            .map_err(ServiceError::Freshness)?
            .is_some()
        {
            return Ok(FirstIndex::AlreadyBuilt);
        }
        let lock =
            match FirstIndex::writer_lock(&self.settings, what).map_err(ServiceError::Lock)? {
                Ok(l) => l,
                Err(busy) => return Ok(busy),
            };
        let embedder = self.embedder(&store).map_err(ServiceError::Freshness)?;
        let report = indexer::run(
            &mut *store,
            &self.settings,
            embedder,
            &IndexOptions::default(),
            &lock,
            progress,
        )
        .map_err(ServiceError::FirstIndex)?;
        Ok(FirstIndex::Built(Box::new(report)))
    }

    /// A full index run (`claw memory index`) under `lock`, on the service's
    /// store (reopened first when a rebuild swapped a new file in).
    pub fn index(
        &self,
        opts: &IndexOptions,
        embedder: Option<&dyn Embedder>,
        lock: &WriterLock,
        progress: &dyn Fn(Progress),
    ) -> Result<IndexReport, IndexError> {
        let mut store = self.store();
        indexer::run(&mut *store, &self.settings, embedder, opts, lock, progress)
    }

    /// The store itself, for the memory crates' service layer
    /// (`claw-memory-api`: source registry, migration). Nothing above the
    /// memory crates reaches the store.
    pub fn on_store<R>(&self, f: impl FnOnce(&mut Store) -> R) -> R {
        f(&mut self.store())
    }

    /// Lines of an indexed file.
    pub fn get(&self, req: &GetRequest) -> Result<GetResponse, ServiceError> {
        let store = self.store();
        let sources = walk::sources(&self.settings, &store).map_err(SearchError::from)?;
        Ok(get::get_lines_in(&*store, &sources, req)?)
    }

    /// What is indexed, and how far the index is behind the disk.
    pub fn status(&self) -> Result<ServiceStatus, ServiceError> {
        let store = self.store();
        let read = |e: StoreError| ServiceError::Status(e);
        let stats = store.stats().map_err(read)?;
        let model = store.meta("model").map_err(read)?;
        let staleness =
            freshness::check(&self.settings, &store).map_err(ServiceError::Freshness)?;
        Ok(ServiceStatus {
            stats,
            model,
            staleness,
            dims: store.vec_dims().map_err(read)?,
            vector_backend: store.vec_backend().clone(),
            chunker_version: store.meta("chunker_version").map_err(read)?,
            last_index_at: store
                .meta("last_index_at")
                .map_err(read)?
                .and_then(|v| v.parse().ok()),
            sources: walk::sources(&self.settings, &store).map_err(read)?,
            watcher: watch::watcher_status(&store).map_err(read)?,
            skipped_files: store.skipped_count().map_err(read)?,
            too_big: self.oversized(&store)?,
        })
    }
}

/// The embedder a search in `mode` needs: none for keyword-only searches or when
/// the index is keyword-only (so those stay fast), else the configured backend
/// (also for a never-built index, which a search's inline sync may build).
pub fn query_embedder(
    settings: &MemoryConfig,
    store: &Store,
    mode: Mode,
) -> Result<Loaded, StoreError> {
    let keyword_only_index = store.meta("model")?.is_some_and(|m| m.is_empty());
    Ok(if mode != Mode::Fts && !keyword_only_index {
        embed::load(&settings.embed, settings.memory.embed_batch_size)
    } else {
        Loaded::Disabled
    })
}
