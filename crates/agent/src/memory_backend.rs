//! Connects the `memory_search` / `memory_get` tools to the memory engine: the
//! tools' [`MemoryBackend`] over [`claw_memory::service::MemoryService`], the same
//! service `claw memory search|get` use. Blocking, like the engine.
#![warn(missing_docs)]

use crate::tools::memory::{MemoryBackend, MemoryBackendError};
use claw_memory::config::MemoryConfig;
use claw_memory::search::{GetRequest, GetResponse, SearchRequest, SearchResponse};
use claw_memory::service::{MemoryService, SyncPolicy};
use std::sync::OnceLock;

/// The real memory engine behind the tools. The database is opened on first use
/// (on the tools' blocking thread, never on the async runtime); a failed open is
/// retried on the next call.
pub struct EngineBackend {
    settings: MemoryConfig,
    service: OnceLock<MemoryService<'static>>,
}

impl EngineBackend {
    /// A backend for the workspace in `settings`.
    pub fn new(settings: MemoryConfig) -> EngineBackend {
        EngineBackend {
            settings,
            service: OnceLock::new(),
        }
    }

    fn service(&self) -> Result<&MemoryService<'static>, MemoryBackendError> {
        if let Some(s) = self.service.get() {
            return Ok(s);
        }
        let opened =
            MemoryService::open(self.settings.clone()).map_err(MemoryBackendError::Open)?;
        Ok(self.service.get_or_init(|| opened))
    }
}

impl MemoryBackend for EngineBackend {
    /// Answers from the index as it is (no inline sync: the tools never write
    /// the index; `claw memory watch` keeps it fresh).
    fn search(&self, req: &SearchRequest) -> Result<SearchResponse, MemoryBackendError> {
        Ok(self.service()?.search(req, SyncPolicy::Skip)?.response)
    }

    fn get(&self, req: &GetRequest) -> Result<GetResponse, MemoryBackendError> {
        Ok(self.service()?.get(req)?)
    }
}
