//! The `memory_search` and `memory_get` tools: thin adapters over a
//! [`MemoryBackend`] (the memory engine, wired by the driver). They speak the
//! engine's own contract — [`SearchRequest`] / [`SearchResponse`] and
//! [`GetRequest`] / [`GetResponse`], the shapes of `claw memory search --json`
//! and `claw memory get --json` — and render hits to the model with the engine's
//! one [`citation`] format.
//!
//! Invariant: these tools only read; the backend is called on a blocking thread
//! (SQLite and embedding are blocking work).
#![warn(missing_docs)]

use claw_memory_api::MemoryError;
use claw_memory_api::SearchOutcome;
use claw_memory_api::SyncReport;
use claw_memory_api::{
    GetRequest, GetResponse, Mode, SearchRequest, SearchResponse, SourceFilter, citation,
};
use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolError, ToolOutput, ToolResult};

/// Arguments of `memory_search` (the CLI's `claw memory search` options).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// What to look for.
    pub query: String,
    /// Most results (1..=50, default 6).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Drop hits scoring below this (default from the config).
    #[serde(default)]
    pub min_score: Option<f64>,
    /// Retrieval mode (default hybrid).
    #[serde(default)]
    pub mode: Option<Mode>,
    /// `memory`, `sessions`, `all` or a source name.
    #[serde(default)]
    pub source: Option<String>,
}

impl MemorySearchArgs {
    /// The engine request, as `claw memory search` builds it from its flags.
    pub fn to_request(&self) -> SearchRequest {
        let mut req = SearchRequest::new(self.query.clone());
        if let Some(limit) = self.limit {
            req.limit = limit.clamp(1, 50);
        }
        req.min_score = self.min_score;
        req.mode = self.mode.unwrap_or(Mode::Hybrid);
        if let Some(source) = &self.source {
            req.source = SourceFilter::parse(source);
        }
        req
    }
}

/// Arguments of `memory_get` (the CLI's `claw memory get` options).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryGetArgs {
    /// Path of an indexed file.
    pub path: String,
    /// First line (1-based, default 1).
    #[serde(default)]
    pub from: Option<usize>,
    /// Most lines (default 120).
    #[serde(default)]
    pub lines: Option<usize>,
}

impl MemoryGetArgs {
    /// The engine request, as `claw memory get` builds it from its flags.
    pub fn to_request(&self) -> GetRequest {
        let mut req = GetRequest::new(self.path.clone());
        if let Some(from) = self.from {
            req.from = from.max(1);
        }
        if let Some(lines) = self.lines {
            req.lines = lines.max(1);
        }
        req
    }
}

/// `memory_search`'s result: the engine's response and what the inline sync
/// before it did, exactly the JSON of `claw memory search --json`.
pub type MemorySearchResponse = SearchOutcome;

/// `memory_get`'s result: exactly the JSON of `claw memory get --json`.
pub type MemoryGetResponse = GetResponse;

/// Why the memory backend could not answer.
#[derive(Debug, thiserror::Error)]
pub enum MemoryBackendError {
    /// The memory database could not be opened.
    #[error("cannot open the memory database")]
    Open(#[source] MemoryError),
    /// The search or get failed.
    #[error(transparent)]
    Service(#[from] MemoryError),
}

impl MemoryBackendError {
    /// The message with its causes, `a: b: c`.
    pub fn message(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        // `transparent` shares its inner error's message: skip repeating it.
        if let MemoryBackendError::Service(inner) = self {
            cause = std::error::Error::source(inner);
        }
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        out
    }
}

/// The memory engine as the tools see it. Blocking; implemented over
/// `claw_memory_api::Memory` (either backend) by [`crate::memory_backend`].
pub trait MemoryBackend: Send + Sync {
    /// One search (after the backend's inline sync, reported in the outcome).
    fn search(&self, req: &SearchRequest) -> Result<SearchOutcome, MemoryBackendError>;
    /// Lines of an indexed file.
    fn get(&self, req: &GetRequest) -> Result<GetResponse, MemoryBackendError>;
    /// A tool of this session changed files in the workspace: the next search
    /// must look at the disk itself, not trust a watcher that may not have seen
    /// the change yet.
    fn note_write(&self) {}
}

/// How memory results are shown to the model.
pub trait RenderForModel {
    /// The text the model receives.
    fn render(&self) -> String;
}

impl RenderForModel for SearchResponse {
    fn render(&self) -> String {
        let mut out = if self.results.is_empty() {
            format!(
                "No memory matches for \"{}\" (mode {}): memory holds nothing relevant on this. \
                 Say so rather than guess; do not present unrelated notes as memory.",
                self.query, self.mode
            )
        } else {
            format!(
                "Memory results for \"{}\" (mode {}, {} hits):",
                self.query,
                self.mode,
                self.results.len()
            )
        };
        if let Some(f) = &self.fallback {
            out.push_str(&format!("\n(fallback: {f})"));
        }
        for (i, hit) in self.results.iter().enumerate() {
            let said = hit
                .context
                .as_deref()
                .map(|c| format!("; said {c}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "\n\n[{}] {} (score {:.3}, source {}{said})\n{}",
                i + 1,
                hit.citation,
                hit.score,
                hit.source,
                hit.snippet.trim_end()
            ));
        }
        if !self.results.is_empty() {
            out.push_str("\n\nCite sources as path#Lstart-Lend; use memory_get for more lines.");
        }
        out
    }
}

impl RenderForModel for SearchOutcome {
    fn render(&self) -> String {
        let mut out = self.response.render();
        if let SyncReport::Stale {
            pending, reason, ..
        } = &self.sync
        {
            let behind = if *pending > 0 {
                format!("{pending} file(s) changed on disk are not indexed yet")
            } else {
                "the index is not built yet".to_string()
            };
            out.push_str(&format!(
                "\n\n(note: these results come from the index as it is: {behind} ({reason}))"
            ));
        }
        if let Some(line) = claw_memory_api::describe_oversized(&self.too_big) {
            out.push_str(&format!(
                "\n\n(note: {line}; read them with read_file, or split them into smaller notes)"
            ));
        }
        out
    }
}

impl RenderForModel for GetResponse {
    fn render(&self) -> String {
        if self.total_lines == 0 {
            return format!("{} is empty.", self.path);
        }
        // A transcript reads as the conversation: one line per turn.
        let body = if self.turns.is_empty() {
            self.text.trim_end_matches('\n').to_string()
        } else {
            self.turns
                .iter()
                .map(|t| {
                    let when = t
                        .time
                        .as_deref()
                        .map(|w| format!(" {w}"))
                        .unwrap_or_default();
                    format!("L{} {}{when}: {}", t.line, t.role, t.text)
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let mut out = format!(
            "{} (of {} lines, source {})\n{}",
            citation(&self.path, self.from, self.to),
            self.total_lines,
            self.source,
            body
        );
        if self.truncated {
            out.push_str("\n[the last line was cut to fit the character budget]");
        }
        if let Some(next) = self.next_from {
            out.push_str(&format!("\n[more lines follow; continue with from={next}]"));
        }
        out
    }
}

fn backend(ctx: &ToolContext) -> Result<std::sync::Arc<dyn MemoryBackend>, ToolError> {
    ctx.memory.clone().ok_or_else(|| ToolError::Memory {
        message: "memory is not available in this session".into(),
    })
}

async fn on_blocking<T, F>(f: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, MemoryBackendError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|e| ToolError::Memory {
            message: e.message(),
        }),
        Err(e) => Err(ToolError::Memory {
            message: format!("the memory task failed: {e}"),
        }),
    }
}

/// `memory_search`.
pub async fn search(ctx: &ToolContext, args: MemorySearchArgs) -> ToolResult {
    if args.query.trim().is_empty() {
        return Err(ToolError::invalid(
            "memory_search",
            "`query` must not be empty",
        ));
    }
    let b = backend(ctx)?;
    let mut req = args.to_request();
    req.exclude_session = ctx
        .session
        .as_deref()
        .map(crate::session::file_name_for_key);
    on_blocking(move || b.search(&req))
        .await
        .map(ToolOutput::MemorySearch)
}

/// `memory_get`.
pub async fn get(ctx: &ToolContext, args: MemoryGetArgs) -> ToolResult {
    let b = backend(ctx)?;
    let req = args.to_request();
    on_blocking(move || b.get(&req))
        .await
        .map(ToolOutput::MemoryGet)
}

#[cfg(test)]
mod tests {
    //! Unit tests of the adapter and the rendering. They use a small in-test
    //! backend on purpose: the real engine is exercised by the memory tests, and
    //! the claw crate's `memory_contract` test checks these tools against the CLI.
    use super::*;
    use crate::message::ToolCall;
    use crate::tools::ToolRegistry;
    use claw_memory_api::{Fallback, SearchError, SearchHit};
    use std::sync::{Arc, Mutex};

    struct Recording {
        seen: Mutex<Vec<SearchRequest>>,
    }

    impl MemoryBackend for Recording {
        fn search(&self, req: &SearchRequest) -> Result<SearchOutcome, MemoryBackendError> {
            self.seen.lock().unwrap().push(req.clone());
            let sync = if req.query.contains("stale") {
                SyncReport::Stale {
                    pending: 3,
                    reason: claw_memory_api::StaleReason::Busy {
                        pid: 7,
                        what: "claw memory index".into(),
                    },
                    sample: Vec::new(),
                }
            } else {
                SyncReport::Fresh {
                    checked_ms: 1,
                    watcher: None,
                }
            };
            if req.query == "boom" {
                return Err(MemoryError::Search(SearchError::UnknownSource {
                    name: "garden".into(),
                    known: "memory, sessions".into(),
                })
                .into());
            }
            let response = SearchResponse {
                query: req.query.clone(),
                mode: Mode::Hybrid,
                fallback: Some(Fallback::NoEmbedder),
                results: vec![SearchHit {
                    path: "memory/2026-11-02.md".into(),
                    source: "memory".into(),
                    start_line: 12,
                    end_line: 20,
                    score: 0.8123,
                    snippet: "Decided to use SQLite.".into(),
                    citation: citation("memory/2026-11-02.md", 12, 20),
                    context: None,
                    explain: None,
                }],
            };
            Ok(SearchOutcome {
                response,
                sync,
                too_big: Vec::new(),
            })
        }

        fn get(&self, req: &GetRequest) -> Result<GetResponse, MemoryBackendError> {
            if req.path == "missing.md" {
                return Err(MemoryError::Search(SearchError::NotIndexed(req.path.clone())).into());
            }
            Ok(GetResponse {
                path: req.path.clone(),
                source: "memory".into(),
                from: req.from,
                to: 2,
                total_lines: 5,
                text: "a\nb\n".into(),
                next_from: Some(3),
                truncated: false,
                turns: Vec::new(),
            })
        }
    }

    #[test]
    fn arguments_become_the_cli_requests() {
        let args: MemorySearchArgs = serde_json::from_str(
            r#"{"query":"q","limit":500,"mode":"fts","source":"sessions","min_score":0.5}"#,
        )
        .unwrap();
        let req = args.to_request();
        assert_eq!(
            (req.limit, req.mode, req.source, req.min_score),
            (50, Mode::Fts, SourceFilter::Sessions, Some(0.5))
        );
        assert_eq!(
            MemorySearchArgs {
                query: "q".into(),
                limit: None,
                min_score: None,
                mode: None,
                source: None
            }
            .to_request(),
            SearchRequest::new("q")
        );
        let g = MemoryGetArgs {
            path: "a.md".into(),
            from: Some(0),
            lines: Some(3),
        }
        .to_request();
        assert_eq!((g.from, g.lines), (1, 3));
        assert_eq!(
            MemoryGetArgs {
                path: "a.md".into(),
                from: None,
                lines: None
            }
            .to_request(),
            GetRequest::new("a.md")
        );
    }

    #[tokio::test]
    async fn dispatch_renders_citations_and_passes_arguments() {
        let backend = Arc::new(Recording {
            seen: Mutex::new(Vec::new()),
        });
        let mut ctx = ToolContext::new("/tmp");
        ctx.memory = Some(backend.clone());
        let reg = ToolRegistry::new(ctx);
        assert!(reg.names().contains(&"memory_search"));
        let call = ToolCall {
            id: "c1".into(),
            name: "memory_search".into(),
            arguments: r#"{"query":"database decision","limit":3,"mode":"fts"}"#.into(),
        };
        let out = reg.dispatch(&call).await.unwrap();
        let text = out.render();
        assert!(
            text.contains("[1] memory/2026-11-02.md#L12-L20 (score 0.812, source memory)"),
            "{text}"
        );
        assert!(text.contains("Decided to use SQLite."));
        assert!(text.contains("fallback: no-embedder"));
        let seen = backend.seen.lock().unwrap().clone();
        assert_eq!(seen[0].limit, 3);
        assert_eq!(seen[0].mode, Mode::Fts);
        // The structured result is the CLI's JSON shape.
        let v = serde_json::to_value(&out).unwrap();
        assert_eq!(v["tool"], "memory_search");
        assert_eq!(v["fallback"], "no-embedder");
        assert_eq!(v["results"][0]["citation"], "memory/2026-11-02.md#L12-L20");
        assert_eq!(v["sync"]["status"], "fresh");
        assert!(!text.contains("note:"), "{text}");
        // A busy writer: the answer comes from the index as it is, and says so.
        let stale = reg
            .dispatch(&ToolCall {
                arguments: r#"{"query":"stale index"}"#.into(),
                ..call.clone()
            })
            .await
            .unwrap()
            .render();
        assert!(
            stale.contains("(note: these results come from the index as it is: 3 file(s) changed on disk are not indexed yet (another writer (pid 7"),
            "{stale}"
        );

        let err = reg
            .dispatch(&ToolCall {
                arguments: r#"{"query":"boom"}"#.into(),
                ..call.clone()
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.render(),
            "Error: memory: unknown source `garden` (known: memory, sessions)"
        );
        let err = reg
            .dispatch(&ToolCall {
                arguments: r#"{"query":"x","mode":"semantic"}"#.into(),
                ..call.clone()
            })
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");

        let get_call = ToolCall {
            id: "c2".into(),
            name: "memory_get".into(),
            arguments: r#"{"path":"memory/a.md"}"#.into(),
        };
        let got = reg.dispatch(&get_call).await.unwrap();
        assert_eq!(
            got.render(),
            "memory/a.md#L1-L2 (of 5 lines, source memory)\na\nb\n[more lines follow; continue with from=3]"
        );
        let v = serde_json::to_value(&got).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "from",
                "next_from",
                "path",
                "source",
                "text",
                "to",
                "tool",
                "total_lines",
                "truncated"
            ]
        );
        let err = reg
            .dispatch(&ToolCall {
                arguments: r#"{"path":"missing.md"}"#.into(),
                ..get_call
            })
            .await
            .unwrap_err();
        assert_eq!(
            err.render(),
            "Error: memory: `missing.md` is not an indexed file"
        );
    }

    #[test]
    fn no_results_say_plainly_that_memory_holds_nothing() {
        let mut r = SearchResponse {
            query: "zzqqxxnotaword".into(),
            mode: Mode::Hybrid,
            fallback: None,
            results: Vec::new(),
        };
        let t = r.render();
        assert!(t.contains("memory holds nothing relevant on this"), "{t}");
        assert!(!t.contains("Cite sources"), "{t}");
        // Positive control: with a hit, no such claim.
        r.results.push(SearchHit {
            path: "memory/a.md".into(),
            source: "memory".into(),
            start_line: 1,
            end_line: 2,
            score: 0.7,
            snippet: "a".into(),
            citation: citation("memory/a.md", 1, 2),
            context: None,
            explain: None,
        });
        let t = r.render();
        assert!(!t.contains("holds nothing"), "{t}");
    }

    #[tokio::test]
    async fn search_leaves_out_the_asking_session() {
        let backend = Arc::new(Recording {
            seen: Mutex::new(Vec::new()),
        });
        let call = ToolCall {
            id: "c1".into(),
            name: "memory_search".into(),
            arguments: r#"{"query":"foam orphans"}"#.into(),
        };
        let mut ctx = ToolContext::new("/tmp");
        ctx.memory = Some(backend.clone());
        ctx.session = Some("cli:default".into());
        ToolRegistry::new(ctx).dispatch(&call).await.unwrap();
        // Positive control: without a session nothing is left out.
        let mut ctx = ToolContext::new("/tmp");
        ctx.memory = Some(backend.clone());
        ToolRegistry::new(ctx).dispatch(&call).await.unwrap();
        let seen = backend.seen.lock().unwrap();
        assert_eq!(
            seen[0].exclude_session.as_deref(),
            Some("cli_default.jsonl")
        );
        assert_eq!(seen[1].exclude_session, None);
    }
}
