//! Connects the `memory_search` / `memory_get` tools to the memory engine: the
//! tools' [`MemoryBackend`] over [`claw_memory_api::Memory`], the same
//! service `claw memory search|get` use, on either backend (`memory.backend`).
//! Blocking, like the engine.
//!
//! The assistant searches like the CLI: every search first runs the service's
//! bounded inline sync (at most `freshness::DEFAULT_SYNC_LIMIT` changed files
//! re-indexed, never waiting for the writer lock: another writer means the
//! answer comes from the index as it is, and the result says so), and a
//! workspace that was never indexed is indexed fully on first use, with progress
//! through [`EngineBackend::with_progress`].
#![warn(missing_docs)]

use crate::tools::memory::{MemoryBackend, MemoryBackendError};
use claw_memory_api::{
    FirstIndex, GetRequest, GetResponse, Memory, MemoryConfig, Progress, SearchOutcome,
    SearchRequest, StaleReason, SyncPolicy, SyncReport,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Where progress lines of a first indexing pass go (the CLI prints them on stderr).
pub type ProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The real memory engine behind the tools. The database is opened on first use
/// (on the tools' blocking thread, never on the async runtime); a failed open is
/// retried on the next call.
pub struct EngineBackend {
    settings: MemoryConfig,
    service: OnceLock<Arc<Memory>>,
    policy: SyncPolicy,
    /// Set by [`MemoryBackend::note_write`], cleared by the next search.
    wrote: std::sync::atomic::AtomicBool,
    progress: Option<ProgressSink>,
}

impl EngineBackend {
    /// A backend for the workspace in `settings`, syncing inline before each
    /// search ([`SyncPolicy::DEFAULT`]).
    pub fn new(settings: MemoryConfig) -> EngineBackend {
        EngineBackend {
            settings,
            service: OnceLock::new(),
            policy: SyncPolicy::DEFAULT,
            wrote: std::sync::atomic::AtomicBool::new(false),
            progress: None,
        }
    }

    /// Use another sync policy before searches ([`SyncPolicy::Skip`]: answer from
    /// the index as it is, like `claw memory search --no-sync`).
    pub fn with_sync_policy(mut self, policy: SyncPolicy) -> EngineBackend {
        self.policy = policy;
        self
    }

    /// Report the progress of a first indexing pass to `sink`.
    pub fn with_progress(mut self, sink: ProgressSink) -> EngineBackend {
        self.progress = Some(sink);
        self
    }

    fn service(&self) -> Result<&Arc<Memory>, MemoryBackendError> {
        if let Some(s) = self.service.get() {
            return Ok(s);
        }
        let opened = Memory::open(self.settings.clone()).map_err(MemoryBackendError::Open)?;
        Ok(self.service.get_or_init(|| Arc::new(opened)))
    }

    /// The memory behind the tools (opened on first call), for a watcher in
    /// this process: it indexes with the same model the searches load.
    pub fn memory(&self) -> Result<Arc<Memory>, MemoryBackendError> {
        self.service().cloned()
    }

    fn say(&self, line: &str) {
        if let Some(p) = &self.progress {
            p(line);
        }
    }

    /// Index a never-indexed workspace (with progress); `None` when it already
    /// was, else what happened, as a [`SyncReport`].
    fn first_index(&self, service: &Memory) -> Result<Option<SyncReport>, MemoryBackendError> {
        if matches!(self.policy, SyncPolicy::Skip) || service.is_built()? {
            return Ok(None);
        }
        let done = AtomicUsize::new(0);
        let total = AtomicUsize::new(0);
        let on_progress = |p: Progress| match p {
            Progress::Planned { to_read, .. } => {
                total.store(to_read, Ordering::Relaxed);
                self.say(&format!(
                    "memory: indexing this workspace for the first time ({to_read} files)"
                ));
            }
            Progress::File { .. } => {
                let n = done.fetch_add(1, Ordering::Relaxed) + 1;
                let of = total.load(Ordering::Relaxed);
                if n.is_multiple_of(50) && n < of {
                    self.say(&format!("memory: indexed {n}/{of} files"));
                }
            }
        };
        match service.build_if_never_indexed("claw (first memory index)", &on_progress)? {
            FirstIndex::AlreadyBuilt => Ok(None),
            FirstIndex::Built(report) => {
                self.say(&format!(
                    "memory: indexed {} files ({} chunks) in {:.1} s",
                    report.files_changed,
                    report.chunks_added,
                    report.elapsed_ms as f64 / 1000.0
                ));
                Ok(Some(SyncReport::Synced {
                    reindexed: Vec::new(),
                    removed: Vec::new(),
                    elapsed_ms: report.elapsed_ms,
                }))
            }
            FirstIndex::Busy { pid, what } => Ok(Some(SyncReport::Stale {
                pending: 0,
                reason: StaleReason::Busy { pid, what },
                sample: Vec::new(),
            })),
        }
    }

    /// The embedder the service searches and indexes with (loaded on first
    /// call, then shared: a watcher in this process indexes with it instead of
    /// loading the model a second time).
    pub fn index_embedder(
        &self,
    ) -> Result<Option<&dyn claw_memory_api::embed::Embedder>, MemoryBackendError> {
        Ok(self.service()?.index_embedder()?)
    }

    /// The memory settings the backend runs with.
    pub fn settings(&self) -> &MemoryConfig {
        &self.settings
    }

    /// Bring the index up to date before a session: index a never-indexed
    /// workspace fully, else run the bounded inline sync (never waiting for the
    /// writer lock). What it did, for a status line.
    pub fn sync(&self) -> Result<SyncReport, MemoryBackendError> {
        let service = self.service()?;
        if let Some(report) = self.first_index(service)? {
            return Ok(report);
        }
        let limit = match self.policy {
            SyncPolicy::Inline { limit } => limit,
            SyncPolicy::Skip => return Ok(SyncReport::Skipped),
        };
        Ok(service.sync(limit)?)
    }
}

impl MemoryBackend for EngineBackend {
    /// Syncs under the backend's policy (a never-indexed workspace is indexed
    /// first), then searches. The outcome carries the sync report, like
    /// `claw memory search --json`.
    fn search(&self, req: &SearchRequest) -> Result<SearchOutcome, MemoryBackendError> {
        let service = self.service()?;
        let first = self.first_index(service)?;
        // After this session's own write, walk even when a watcher vouches: it
        // may not have been told about the write yet.
        let walked = match self.policy {
            SyncPolicy::Inline { limit }
                if self.wrote.swap(false, std::sync::atomic::Ordering::SeqCst) =>
            {
                Some(service.sync_walk(limit)?)
            }
            _ => None,
        };
        let mut outcome = service.search(req, self.policy)?;
        if let Some(report) = first.or(walked)
            && matches!(outcome.sync, SyncReport::Fresh { .. })
        {
            outcome.sync = report;
        }
        Ok(outcome)
    }

    fn note_write(&self) {
        self.wrote.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn get(&self, req: &GetRequest) -> Result<GetResponse, MemoryBackendError> {
        Ok(self.service()?.get(req, None)?.response)
    }
}
