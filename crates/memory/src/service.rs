//! The memory engine as one long-lived object for callers that search repeatedly
//! (the assistant's `memory_search` / `memory_get` tools): it owns the store
//! connection and loads the query embedder once, lazily, only when the index has
//! vectors. Blocking; call it from `spawn_blocking`.

use crate::config::MemoryConfig;
use crate::embed::{self, Loaded};
use crate::search::engine::{
    self, GetRequest, GetResponse, Mode, SearchError, SearchRequest, SearchResponse,
};
use crate::store::{Store, StoreError};
use std::sync::{Mutex, OnceLock};

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

/// A store plus a lazily loaded embedder.
pub struct MemoryService {
    settings: MemoryConfig,
    store: Mutex<Store>,
    embedder: OnceLock<Loaded>,
}

impl MemoryService {
    /// Open the workspace's memory database.
    pub fn open(settings: MemoryConfig) -> Result<MemoryService, StoreError> {
        let store = Store::open(&settings.db_path())?;
        Ok(MemoryService {
            settings,
            store: Mutex::new(store),
            embedder: OnceLock::new(),
        })
    }

    /// Run a search with the settings' retrieval parameters.
    pub fn search(&self, req: &SearchRequest) -> Result<SearchResponse, SearchError> {
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        let embedder = if req.mode == Mode::Fts {
            None
        } else {
            match self.embedder.get() {
                Some(l) => l.embedder(),
                None => {
                    let loaded = query_embedder(&self.settings, &store, Mode::Hybrid)?;
                    self.embedder.get_or_init(|| loaded).embedder()
                }
            }
        };
        engine::search(
            &store,
            embedder,
            &self.settings.memory,
            req,
            self.settings.clock.now_unix(),
        )
    }

    /// Lines of an indexed file.
    pub fn get(&self, req: &GetRequest) -> Result<GetResponse, SearchError> {
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        engine::get_lines(&self.settings, &store, req)
    }
}
