//! The `memory_search` and `memory_get` tools: thin adapters over a
//! [`MemoryBackend`] (the memory engine, wired by the driver), returning the same
//! JSON shape as `claw memory search --json` and rendering hits to the model with
//! `path#Lstart-Lend` citations.
//!
//! Invariant: these tools only read; the backend is called on a blocking thread
//! (SQLite and embedding are blocking work).

use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolError, ToolOutput, ToolResult};

/// Retrieval mode, as in `claw memory search --mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    Hybrid,
    Fts,
    Vector,
}

/// Arguments of `memory_search` (the CLI's `claw memory search` options).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    pub query: String,
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub min_score: Option<f64>,
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// `memory`, `sessions`, `all` or a source name.
    #[serde(default)]
    pub source: Option<String>,
}

/// Arguments of `memory_get` (the CLI's `claw memory get` options).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryGetArgs {
    pub path: String,
    #[serde(default)]
    pub from: Option<usize>,
    #[serde(default)]
    pub lines: Option<usize>,
}

/// One hit, exactly as in `claw memory search --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryHit {
    pub path: String,
    pub source: String,
    pub start_line: usize,
    pub end_line: usize,
    pub score: f64,
    pub snippet: String,
    /// `path#L12-L20`.
    pub citation: String,
}

/// `{"query","mode","fallback","results":[...]}`, as in `claw memory search --json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySearchResponse {
    pub query: String,
    pub mode: String,
    /// Why a stage was skipped (`no-embedder`, `no-vec0`), or null.
    pub fallback: Option<String>,
    pub results: Vec<MemoryHit>,
}

/// Lines of an indexed file, as `claw memory get --json` returns them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryGetResponse {
    pub path: String,
    pub start_line: usize,
    pub end_line: usize,
    pub total_lines: usize,
    pub text: String,
    /// The `from` to continue with, when more lines follow.
    pub next_from: Option<usize>,
}

/// The memory engine as the tools see it. Blocking; implemented over
/// `claw_memory::search::engine` by the driver's wiring.
pub trait MemoryBackend: Send + Sync {
    fn search(&self, args: &MemorySearchArgs) -> Result<MemorySearchResponse, String>;
    fn get(&self, args: &MemoryGetArgs) -> Result<MemoryGetResponse, String>;
}

/// `path#L12-L20` (or `path#L12` for one line).
pub fn citation(path: &str, start_line: usize, end_line: usize) -> String {
    if start_line == end_line {
        format!("{path}#L{start_line}")
    } else {
        format!("{path}#L{start_line}-L{end_line}")
    }
}

impl MemorySearchResponse {
    pub fn render(&self) -> String {
        let mut out = if self.results.is_empty() {
            format!(
                "No memory matches for \"{}\" (mode {}).",
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
            let cite = if hit.citation.is_empty() {
                citation(&hit.path, hit.start_line, hit.end_line)
            } else {
                hit.citation.clone()
            };
            out.push_str(&format!(
                "\n\n[{}] {cite} (score {:.3}, source {})\n{}",
                i + 1,
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

impl MemoryGetResponse {
    pub fn render(&self) -> String {
        if self.total_lines == 0 {
            return format!("{} is empty.", self.path);
        }
        let mut out = format!(
            "{} (of {} lines)\n{}",
            citation(&self.path, self.start_line, self.end_line),
            self.total_lines,
            self.text.trim_end_matches('\n')
        );
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
    F: FnOnce() -> Result<T, String> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(|message| ToolError::Memory { message }),
        Err(e) => Err(ToolError::Memory {
            message: format!("the memory task failed: {e}"),
        }),
    }
}

/// `memory_search`.
pub async fn search(ctx: &ToolContext, args: MemorySearchArgs) -> ToolResult {
    if args.query.trim().is_empty() {
        return Err(ToolError::InvalidArguments {
            tool: "memory_search".into(),
            message: "`query` must not be empty".into(),
        });
    }
    let b = backend(ctx)?;
    on_blocking(move || b.search(&args))
        .await
        .map(ToolOutput::MemorySearch)
}

/// `memory_get`.
pub async fn get(ctx: &ToolContext, args: MemoryGetArgs) -> ToolResult {
    let b = backend(ctx)?;
    on_blocking(move || b.get(&args))
        .await
        .map(ToolOutput::MemoryGet)
}

#[cfg(test)]
mod tests {
    //! Unit tests of the adapter and the rendering. They use a small in-test
    //! backend on purpose: the real engine is exercised by the memory tests and
    //! wired to these tools by the driver.
    use super::*;
    use crate::message::ToolCall;
    use crate::tools::ToolRegistry;
    use std::sync::{Arc, Mutex};

    struct Recording {
        seen: Mutex<Vec<MemorySearchArgs>>,
    }

    impl MemoryBackend for Recording {
        fn search(&self, args: &MemorySearchArgs) -> Result<MemorySearchResponse, String> {
            self.seen.lock().unwrap().push(args.clone());
            if args.query == "boom" {
                return Err("index is locked".into());
            }
            Ok(MemorySearchResponse {
                query: args.query.clone(),
                mode: "hybrid".into(),
                fallback: Some("no-embedder".into()),
                results: vec![MemoryHit {
                    path: "memory/2026-11-02.md".into(),
                    source: "memory".into(),
                    start_line: 12,
                    end_line: 20,
                    score: 0.8123,
                    snippet: "Decided to use SQLite.".into(),
                    citation: citation("memory/2026-11-02.md", 12, 20),
                }],
            })
        }

        fn get(&self, args: &MemoryGetArgs) -> Result<MemoryGetResponse, String> {
            Ok(MemoryGetResponse {
                path: args.path.clone(),
                start_line: args.from.unwrap_or(1),
                end_line: 2,
                total_lines: 5,
                text: "a\nb\n".into(),
                next_from: Some(3),
            })
        }
    }

    #[test]
    fn json_shape_matches_cli() {
        let r = MemorySearchResponse {
            query: "q".into(),
            mode: "fts".into(),
            fallback: None,
            results: vec![],
        };
        let v = serde_json::to_value(&r).unwrap();
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 4);
        assert!(v["fallback"].is_null());
        assert_eq!(citation("a.md", 3, 3), "a.md#L3");
        assert_eq!(citation("a.md", 3, 9), "a.md#L3-L9");
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
        assert_eq!(seen[0].limit, Some(3));
        assert_eq!(seen[0].mode, Some(SearchMode::Fts));

        let err = reg
            .dispatch(&ToolCall {
                arguments: r#"{"query":"boom"}"#.into(),
                ..call.clone()
            })
            .await
            .unwrap_err();
        assert_eq!(err.render(), "Error: memory: index is locked");
        let err = reg
            .dispatch(&ToolCall {
                arguments: r#"{"query":"x","mode":"semantic"}"#.into(),
                ..call.clone()
            })
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");

        let got = reg
            .dispatch(&ToolCall {
                id: "c2".into(),
                name: "memory_get".into(),
                arguments: r#"{"path":"memory/a.md"}"#.into(),
            })
            .await
            .unwrap();
        assert_eq!(
            got.render(),
            "memory/a.md#L1-L2 (of 5 lines)\na\nb\n[more lines follow; continue with from=3]"
        );
    }
}
