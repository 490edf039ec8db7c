//! Connects the `memory_search` / `memory_get` tools to the memory engine: an
//! adapter from the tools' argument and response types to
//! [`claw_memory::service::MemoryService`]. Blocking, like the engine.

use crate::tools::memory::{
    MemoryBackend, MemoryGetArgs, MemoryGetResponse, MemoryHit, MemorySearchArgs,
    MemorySearchResponse, SearchMode,
};
use claw_memory::config::MemoryConfig;
use claw_memory::search::engine::{GetRequest, Mode, SearchRequest, SourceFilter};
use claw_memory::service::MemoryService;
use std::sync::OnceLock;

/// The real memory engine behind the tools. The database is opened on first use
/// (on the tools' blocking thread, never on the async runtime).
pub struct EngineBackend {
    settings: MemoryConfig,
    service: OnceLock<Result<MemoryService, String>>,
}

impl EngineBackend {
    pub fn new(settings: MemoryConfig) -> EngineBackend {
        EngineBackend {
            settings,
            service: OnceLock::new(),
        }
    }

    fn service(&self) -> Result<&MemoryService, String> {
        self.service
            .get_or_init(|| {
                MemoryService::open(self.settings.clone())
                    .map_err(|e| format!("cannot open the memory database: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl MemoryBackend for EngineBackend {
    fn search(&self, args: &MemorySearchArgs) -> Result<MemorySearchResponse, String> {
        let mut req = SearchRequest::new(args.query.clone());
        if let Some(limit) = args.limit {
            req.limit = limit.clamp(1, 50);
        }
        req.min_score = args.min_score;
        req.mode = match args.mode.unwrap_or(SearchMode::Hybrid) {
            SearchMode::Hybrid => Mode::Hybrid,
            SearchMode::Fts => Mode::Fts,
            SearchMode::Vector => Mode::Vector,
        };
        if let Some(source) = &args.source {
            req.source = SourceFilter::parse(source);
        }
        let resp = self.service()?.search(&req).map_err(|e| e.to_string())?;
        Ok(MemorySearchResponse {
            query: resp.query,
            mode: resp.mode.as_str().to_string(),
            fallback: resp.fallback,
            results: resp
                .results
                .into_iter()
                .map(|h| MemoryHit {
                    citation: h.citation,
                    path: h.path,
                    source: h.source,
                    start_line: h.start_line,
                    end_line: h.end_line,
                    score: h.score,
                    snippet: h.snippet,
                })
                .collect(),
        })
    }

    fn get(&self, args: &MemoryGetArgs) -> Result<MemoryGetResponse, String> {
        let mut req = GetRequest::new(args.path.clone());
        if let Some(from) = args.from {
            req.from = from.max(1);
        }
        if let Some(lines) = args.lines {
            req.lines = lines.max(1);
        }
        let resp = self.service()?.get(&req).map_err(|e| e.to_string())?;
        Ok(MemoryGetResponse {
            path: resp.path,
            start_line: resp.from,
            end_line: resp.to,
            total_lines: resp.total_lines,
            text: resp.text,
            next_from: resp.next_from,
        })
    }
}
