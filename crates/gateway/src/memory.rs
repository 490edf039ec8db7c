//! The warm memory engine: the embedding model is loaded once at start-up and
//! shared by the HTTP search endpoints, the assistant's memory tools and the
//! watcher's indexing thread (one copy of the model in the process). Blocking,
//! like the engine: call it from `spawn_blocking`.

use claw_agent::tools::memory::{MemoryBackend, MemoryBackendError};
use claw_memory_api::embed::{self, Embedder, Loaded};
use claw_memory_api::{
    GetRequest, GetResponse, IndexedFile, Memory, MemoryConfig, MemoryError, SearchOutcome,
    SearchRequest, SourceRoot, Status, SyncPolicy, SyncReport,
};
use std::sync::Arc;

/// Errors opening the engine.
#[derive(Debug, thiserror::Error)]
pub enum MemoryHubError {
    #[error("opening the memory index {location}")]
    Open {
        location: String,
        source: MemoryError,
    },
}

/// The memory engine of a running gateway, on whichever backend
/// `memory.backend` names.
pub struct MemoryHub {
    /// Shared with the `/mcp` server (one engine, one model).
    service: Arc<Memory>,
    /// Why the configured model did not load.
    embedder_error: Option<String>,
    /// The index was built with a model (so an unloadable model must not
    /// let the watcher rebuild it keyword-only).
    index_model: String,
    /// The scheduled consolidation's settings, for the status (None: unknown).
    consolidation: Option<claw_agent::promote::ConsolidationSettings>,
    /// The index was built keyword-only and the configured model loads now:
    /// its chunks lack vectors until [`MemoryHub::catch_up_vectors`] runs.
    needs_vectors: bool,
}

impl MemoryHub {
    /// Open the memory and load the model once.
    pub fn open(mem: MemoryConfig) -> Result<MemoryHub, MemoryHubError> {
        let location = match &mem.backend {
            claw_memory_api::Backend::Sqlite => mem.db_path().display().to_string(),
            claw_memory_api::Backend::Postgres(pg) => pg.location(),
        };
        let open_err = |source| MemoryHubError::Open {
            location: location.clone(),
            source,
        };
        // Read the index's model first with a keyword-only handle.
        let probe = Memory::open_shared(mem.clone(), None).map_err(open_err)?;
        let index_model = probe.index_model().map_err(open_err)?;
        let keyword_only_index = probe.is_built().map_err(open_err)? && index_model.is_empty();
        drop(probe);
        // A keyword-only index with a model that loads now (installed after
        // indexing) is caught up: the model is kept, and the index gains its
        // vectors in the background. When it does not load, keyword-only is
        // what the index is: nothing to report.
        let (embedder, embedder_error) = match embed::load(&mem.embed, mem.memory.embed_batch_size)
        {
            Loaded::Ready(b) => (Some(Arc::<dyn Embedder>::from(b)), None),
            Loaded::Disabled => (None, None),
            Loaded::Unavailable(_) if keyword_only_index => (None, None),
            Loaded::Unavailable(e) => (None, Some(e.to_string())),
        };
        let needs_vectors = keyword_only_index && embedder.is_some();
        // One model for the searches, `/mcp` and the watcher.
        let service = Arc::new(Memory::open_shared(mem, embedder).map_err(open_err)?);
        Ok(MemoryHub {
            service,
            embedder_error,
            index_model,
            consolidation: None,
            needs_vectors,
        })
    }

    /// Whether the index lacks the vectors of a model that loads now
    /// (built keyword-only before the model was installed).
    pub fn needs_vectors(&self) -> bool {
        self.needs_vectors
    }

    /// Give a keyword-only index its vectors: a full index run with the loaded
    /// model under the writer lock (waiting up to `wait` for another writer).
    /// The index is rebuilt aside and swapped in, so searches go on meanwhile
    /// (keyword-only until the swap). Blocking, and long on a big workspace.
    pub fn catch_up_vectors(
        &self,
        wait: std::time::Duration,
        progress: &(dyn Fn(claw_memory_api::Progress) + Sync),
    ) -> Result<Option<claw_memory_api::IndexReport>, MemoryError> {
        self.service
            .catch_up_vectors("claw gateway (embedding the notes)", wait, progress)
    }

    /// Say in the status whether (and when) the gateway consolidates.
    pub fn with_consolidation(
        mut self,
        settings: Option<claw_agent::promote::ConsolidationSettings>,
    ) -> MemoryHub {
        self.consolidation = settings;
        self
    }

    /// Search, with the CLI's inline sync policy.
    pub fn search(
        &self,
        req: &SearchRequest,
        policy: SyncPolicy,
    ) -> Result<SearchOutcome, MemoryError> {
        self.service.search(req, policy)
    }

    /// Lines of an indexed file.
    pub fn get(&self, req: &GetRequest) -> Result<GetResponse, MemoryError> {
        Ok(self.service.get(req, None)?.response)
    }

    /// `claw memory status --json`'s object (with whether the scheduled
    /// consolidation runs, and when).
    pub fn status(&self) -> Result<Status, MemoryError> {
        let mut st = self.service.status()?;
        if let Some(c) = &self.consolidation {
            c.describe(&mut st.consolidation);
        }
        Ok(st)
    }

    /// Every source: the built-in ones, then the registered folders.
    pub fn sources(&self) -> Result<Vec<SourceRoot>, MemoryError> {
        self.service.sources()
    }

    /// The indexed files of one source, by path.
    pub fn files(&self, source: &str) -> Result<Vec<IndexedFile>, MemoryError> {
        self.service.files(source)
    }

    /// The inline sync without trusting the watcher's vouch (after the
    /// assistant's own write, which the watcher may not have seen yet).
    pub fn sync_walk(&self, limit: usize) -> Result<SyncReport, MemoryError> {
        self.service.sync_walk(limit)
    }

    /// Why the model did not load.
    pub fn embedder_error(&self) -> Option<&str> {
        self.embedder_error.as_deref()
    }

    /// The model the index was built with ("" keyword-only or never built).
    pub fn index_model(&self) -> &str {
        &self.index_model
    }

    /// The engine itself, for the `/mcp` server and the watcher to share.
    pub fn service(&self) -> Arc<Memory> {
        self.service.clone()
    }

    /// The settings the engine runs with.
    pub fn settings(&self) -> &MemoryConfig {
        self.service.settings()
    }
}

/// The assistant's memory tools over the warm engine, with the CLI's inline
/// sync (cheap while the gateway's idle watcher vouches for the index).
pub struct HubBackend {
    hub: Arc<MemoryHub>,
    /// Set by [`MemoryBackend::note_write`], cleared by the next search.
    wrote: std::sync::atomic::AtomicBool,
}

impl HubBackend {
    pub fn new(hub: Arc<MemoryHub>) -> HubBackend {
        HubBackend {
            hub,
            wrote: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl MemoryBackend for HubBackend {
    /// After this session's own write, walks even though the gateway's watcher
    /// vouches (it may not have been told yet), like the CLI's engine backend.
    fn search(&self, req: &SearchRequest) -> Result<SearchOutcome, MemoryBackendError> {
        let walked = match SyncPolicy::DEFAULT {
            SyncPolicy::Inline { limit }
                if self.wrote.swap(false, std::sync::atomic::Ordering::SeqCst) =>
            {
                Some(self.hub.sync_walk(limit)?)
            }
            _ => None,
        };
        let mut outcome = self.hub.search(req, SyncPolicy::DEFAULT)?;
        if let Some(report) = walked
            && matches!(outcome.sync, SyncReport::Fresh { .. })
        {
            outcome.sync = report;
        }
        Ok(outcome)
    }

    fn get(&self, req: &GetRequest) -> Result<GetResponse, MemoryBackendError> {
        Ok(self.hub.get(req)?)
    }

    fn note_write(&self) {
        self.wrote.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}
