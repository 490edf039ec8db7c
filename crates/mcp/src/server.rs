//! claw's memory as an MCP server ([`MemoryServer`], an rmcp `ServerHandler`).
//!
//! Tools: `memory_search`, `memory_get`, `memory_status` (read-only) and
//! `memory_append` (additive; not offered with `mcp.read_only`). Each result
//! carries the CLI's `--json` object as `structuredContent` plus a readable text
//! block with the citations. Resources: `memory://MEMORY.md` and the day's note
//! `memory://memory/YYYY-MM-DD.md` (served through the redactor, like `get`).
//!
//! Invariants:
//! - one [`Memory`] per server (SQLite or PostgreSQL, as `memory.backend` says), opened on first use and shared by every
//!   session (stdio has one; streamable HTTP one per client): the embedding model
//!   loads once;
//! - memory work runs on `spawn_blocking`, so requests are served concurrently
//!   and the runtime never blocks; a search syncs like `claw memory search`
//!   ([`SyncPolicy::DEFAULT`]: at most 20 files inline, never waiting for the
//!   writer lock);
//! - bad arguments (unknown tool, wrong types, unknown fields, out-of-range
//!   values, a `memory_append` over [`MAX_APPEND_BYTES`], a path that is not
//!   indexed) are JSON-RPC errors (`-32602`) with a message saying what to send;
//!   other failures (a note that would outgrow `memory.max_file_bytes`) are tool
//!   errors (`isError: true`); nothing a client sends ends the process;
//! - over stdio, lines are framed by [`crate::stdio`]: a line that is not JSON
//!   gets `-32700`, one over its size limit `-32600`, and the server reads on.

use crate::append::{self, AppendError, MAX_APPEND_BYTES, Target};
use crate::stdio::LineTransport;
use chrono::FixedOffset;
use claw_memory_api::config::MemoryConfig;
use claw_memory_api::{
    GetRequest, Memory, MemoryError, Mode, SearchError, SearchRequest, SourceFilter, SyncPolicy,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::tower::StreamableHttpService;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex, OnceLock};

/// Most results one `memory_search` returns.
pub const MAX_SEARCH_LIMIT: usize = 50;
/// Most lines one `memory_get` returns.
pub const MAX_GET_LINES: usize = 2000;

/// What the server serves.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// The memory engine's configuration (workspace, model, clock).
    pub mem: MemoryConfig,
    /// `mcp.read_only`: `memory_append` is not offered.
    pub read_only: bool,
    /// `agent.jail_to_workspace`: `memory_append` opens its note beneath the workspace.
    pub jail: bool,
    /// The user's time zone, for the day's note.
    pub utc_offset: FixedOffset,
    /// `memory.consolidation` resolved, for `memory_status` (None: unknown,
    /// reported as `enabled: null`).
    pub consolidation: Option<claw_agent::promote::ConsolidationSettings>,
}

/// The MCP server over claw's memory. Cheap to clone: clones share one engine.
#[derive(Clone)]
pub struct MemoryServer {
    inner: Arc<Inner>,
}

struct Inner {
    opts: ServerOptions,
    /// The engine: opened on first use, or given (the gateway's warm one).
    service: OnceLock<Arc<Memory>>,
    /// One append at a time (appends to the same note must not interleave).
    append_lock: Mutex<()>,
}

impl std::fmt::Debug for MemoryServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryServer")
            .field("opts", &self.inner.opts)
            .finish()
    }
}

/// `memory_search`'s arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    limit: Option<i64>,
    min_score: Option<f64>,
    mode: Option<String>,
    source: Option<String>,
}

/// `memory_get`'s arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    path: String,
    from: Option<i64>,
    lines: Option<i64>,
}

/// `memory_status` takes nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusArgs {}

/// `memory_append`'s arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppendArgs {
    text: String,
    target: Option<String>,
    heading: Option<String>,
}

fn object(v: Value) -> Arc<rmcp::model::JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(Default::default()),
    }
}

fn read_only_annotations(title: &str) -> ToolAnnotations {
    ToolAnnotations::with_title(title)
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

/// The tools offered (without `memory_append` when read-only).
pub fn tools(read_only: bool) -> Vec<Tool> {
    let mut tools = vec![
        Tool::new(
            "memory_search",
            "Search the user's memory — notes (MEMORY.md, memory/*.md, registered notes \
folders) and past assistant sessions — by meaning and keywords (hybrid vector + BM25). Use it \
before answering any question about the past (what was said in earlier conversations), the \
user's preferences, earlier decisions, people or dates; a date or a relative time in the query \
(\"on May 4th\", \"last week\") ranks what was said then first. Returns the best \
snippets with citations `path#Lstart-Lend`; read more of a file with memory_get and cite the \
citations in your answer.",
            object(json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "minLength": 1, "description": "What to look for: a question, some words, or an identifier (error code, ticket, name)."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT, "description": "Most results to return (default 6)."},
                    "min_score": {"type": "number", "minimum": 0, "maximum": 1, "description": "Drop hits whose relevance is below this (default 0.35; 0 keeps everything found)."},
                    "mode": {"type": "string", "enum": ["hybrid", "fts", "vector"], "description": "hybrid (default): meaning + keywords; fts: keywords only; vector: meaning only."},
                    "source": {"type": "string", "description": "Where to search: `all` (default), `memory` (the workspace notes), `sessions` (past conversations) or the name of a registered notes folder."}
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        )
        .with_annotations(read_only_annotations("Search memory")),
        Tool::new(
            "memory_get",
            "Read lines of an indexed memory file — a `path` from memory_search results — \
from line `from` (default 1), `lines` lines (default 120, at most 12,000 characters). The \
result says where to continue (`next_from`). Secrets are shown redacted.",
            object(json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "minLength": 1, "description": "Path of an indexed file exactly as memory_search shows it (e.g. memory/2026-11-02.md)."},
                    "from": {"type": "integer", "minimum": 1, "description": "First line, 1-based (default 1)."},
                    "lines": {"type": "integer", "minimum": 1, "maximum": MAX_GET_LINES, "description": "Number of lines (default 120)."}
                },
                "required": ["path"],
                "additionalProperties": false
            })),
        )
        .with_annotations(read_only_annotations("Read memory lines")),
        Tool::new(
            "memory_status",
            "What claw's memory index holds (files, chunks, vectors, embedding model, \
sources) and how many files changed on disk since they were indexed.",
            object(json!({
                "type": "object",
                "properties": {},
                "additionalProperties": false
            })),
        )
        .with_annotations(read_only_annotations("Memory status")),
    ];
    if !read_only {
        tools.push(
            Tool::new(
                "memory_append",
                format!(
                    "Save a durable note to the user's memory: appended to today's daily note \
(memory/YYYY-MM-DD.md, default) or to MEMORY.md (long-term facts and preferences). Only \
appends, never rewrites; secrets are redacted before writing. The note is searchable at once. \
One append takes at most {MAX_APPEND_BYTES} bytes (64 KiB) of text and heading; an append that \
would take the file past the memory index's per-file limit is refused."
                ),
                object(json!({
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "minLength": 1, "description": format!("The note, in Markdown: a fact, decision or preference worth remembering, written to stand on its own. At most {MAX_APPEND_BYTES} bytes.")},
                        "target": {"type": "string", "enum": ["today", "MEMORY.md"], "description": "today (default): today's daily note; MEMORY.md: the long-term memory file."},
                        "heading": {"type": "string", "description": "Optional one-line heading, written as `## heading` above the note."}
                    },
                    "required": ["text"],
                    "additionalProperties": false
                })),
            )
            .with_annotations(
                ToolAnnotations::with_title("Append to memory")
                    .read_only(false)
                    .destructive(false)
                    .idempotent(false)
                    .open_world(false),
            ),
        );
    }
    tools
}

fn bad_args(tool: &str, message: impl std::fmt::Display) -> McpError {
    McpError::invalid_params(format!("invalid arguments for `{tool}`: {message}"), None)
}

/// Argument `field` of `tool` must not be blank.
fn not_blank(tool: &str, field: &str, value: &str) -> Result<(), McpError> {
    if value.trim().is_empty() {
        return Err(bad_args(tool, format!("`{field}` must not be empty")));
    }
    Ok(())
}

/// Argument `field` of `tool`: `default` when absent, else a number in `1..=max`.
fn count_in(
    tool: &str,
    field: &str,
    value: Option<i64>,
    default: usize,
    max: usize,
) -> Result<usize, McpError> {
    match value {
        None => Ok(default),
        Some(n) if (1..=max as i64).contains(&n) => Ok(n as usize),
        Some(n) => Err(bad_args(
            tool,
            format!("`{field}` must be 1..={max}, got {n}"),
        )),
    }
}

fn parse<T: serde::de::DeserializeOwned>(tool: &str, args: Value) -> Result<T, McpError> {
    serde_json::from_value(args).map_err(|e| bad_args(tool, e))
}

/// A successful result: the JSON as structured content plus readable text.
fn structured(text: String, json: Value) -> CallToolResponse {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json);
    r.into()
}

fn tool_error(message: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(message)]).into()
}

/// A service error: the caller's argument (JSON-RPC error) or a failure (tool error).
fn service_failure(tool: &str, e: MemoryError) -> Result<CallToolResponse, McpError> {
    match e.search_error() {
        Some(
            SearchError::NotIndexed(_)
            | SearchError::Refused { .. }
            | SearchError::UnknownSource { .. },
        ) => Err(bad_args(tool, &e)),
        _ => Ok(tool_error(format!(
            "{tool} failed: {}",
            claw_memory_api::error_chain(&e)
        ))),
    }
}

impl MemoryServer {
    pub fn new(opts: ServerOptions) -> MemoryServer {
        MemoryServer {
            inner: Arc::new(Inner {
                opts,
                service: OnceLock::new(),
                append_lock: Mutex::new(()),
            }),
        }
    }

    /// A server over an engine that is already open (the gateway's warm
    /// `MemoryHub`): no second database handle, no second model.
    pub fn with_service(opts: ServerOptions, service: Arc<Memory>) -> MemoryServer {
        let cell = OnceLock::new();
        let _ = cell.set(service);
        MemoryServer {
            inner: Arc::new(Inner {
                opts,
                service: cell,
                append_lock: Mutex::new(()),
            }),
        }
    }

    pub fn options(&self) -> &ServerOptions {
        &self.inner.opts
    }

    /// Runs blocking memory work off the runtime.
    async fn blocking<T, F>(&self, f: F) -> Result<T, McpError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> T + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| McpError::internal_error(format!("the memory task failed: {e}"), None))
    }

    async fn search(&self, args: Value) -> Result<CallToolResponse, McpError> {
        const T: &str = "memory_search";
        let a: SearchArgs = parse(T, args)?;
        not_blank(T, "query", &a.query)?;
        let limit = count_in(T, "limit", a.limit, 6, MAX_SEARCH_LIMIT)?;
        if let Some(m) = a.min_score
            && !(0.0..=1.0).contains(&m)
        {
            return Err(bad_args(T, format!("`min_score` must be 0..=1, got {m}")));
        }
        let mode = match a.mode.as_deref() {
            None => Mode::Hybrid,
            Some(m) => m.parse::<Mode>().map_err(|_| {
                bad_args(
                    T,
                    format!("`mode` must be hybrid, fts or vector, got `{m}`"),
                )
            })?,
        };
        let req = SearchRequest {
            limit,
            min_score: a.min_score,
            mode,
            source: SourceFilter::parse(a.source.as_deref().unwrap_or("all")),
            ..SearchRequest::new(a.query)
        };
        let outcome = self
            .blocking(move |inner| {
                let service = inner.service()?;
                service.search(&req, SyncPolicy::DEFAULT)
            })
            .await?;
        match outcome {
            Ok(o) => {
                let json = serde_json::to_value(&o)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                Ok(structured(render_search(&o), json))
            }
            Err(e) => service_failure(T, e),
        }
    }

    async fn get(&self, args: Value) -> Result<CallToolResponse, McpError> {
        const T: &str = "memory_get";
        let a: GetArgs = parse(T, args)?;
        not_blank(T, "path", &a.path)?;
        let from = match a.from {
            None => 1,
            Some(n) if n >= 1 => n as usize,
            Some(n) => return Err(bad_args(T, format!("`from` must be at least 1, got {n}"))),
        };
        let lines = count_in(
            T,
            "lines",
            a.lines,
            claw_memory_api::GET_DEFAULT_LINES,
            MAX_GET_LINES,
        )?;
        let req = GetRequest {
            path: a.path,
            from,
            lines,
            max_chars: claw_memory_api::GET_MAX_CHARS,
            turns_around: 0,
        };
        let result = self
            .blocking(move |inner| Ok::<_, MemoryError>(inner.service()?.get(&req, None)?.response))
            .await?;
        match result {
            Ok(r) => {
                let json = serde_json::to_value(&r)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                let cite = claw_memory_api::citation(&r.path, r.from, r.to);
                let more = match r.next_from {
                    Some(n) => format!(
                        "\n[lines {}-{} of {}; continue with from={n}]",
                        r.from, r.to, r.total_lines
                    ),
                    None => format!(
                        "\n[lines {}-{} of {}; end of file]",
                        r.from, r.to, r.total_lines
                    ),
                };
                Ok(structured(format!("{cite}\n{}{more}", r.text), json))
            }
            Err(e) => service_failure(T, e),
        }
    }

    async fn status(&self, args: Value) -> Result<CallToolResponse, McpError> {
        let _: StatusArgs = parse("memory_status", args)?;
        let result = self.blocking(|inner| inner.service()?.status()).await?;
        match result {
            Ok(mut s) => {
                if let Some(c) = &self.inner.opts.consolidation {
                    c.describe(&mut s.consolidation);
                }
                let json = serde_json::to_value(&s)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                Ok(structured(s.render(), json))
            }
            Err(e) => Ok(tool_error(format!(
                "memory_status failed: {}",
                claw_memory_api::error_chain(&e)
            ))),
        }
    }

    async fn append(&self, args: Value) -> Result<CallToolResponse, McpError> {
        const T: &str = "memory_append";
        if self.inner.opts.read_only {
            return Err(McpError::invalid_params(
                "`memory_append` is disabled: this claw serves memory read-only (mcp.read_only)",
                None,
            ));
        }
        let a: AppendArgs = parse(T, args)?;
        if a.text.trim().is_empty() {
            return Err(bad_args(T, "`text` must not be empty"));
        }
        let target = match a.target.as_deref() {
            None => Target::Today,
            Some(t) => Target::parse(t).ok_or_else(|| {
                bad_args(
                    T,
                    format!("`target` must be `today` or `MEMORY.md`, got `{t}`"),
                )
            })?,
        };
        if a.heading.as_deref().is_some_and(|h| h.contains('\n')) {
            return Err(bad_args(T, "`heading` must be one line"));
        }
        let result = self
            .blocking(move |inner| {
                let _one = inner.append_lock.lock().unwrap_or_else(|p| p.into_inner());
                let o = &inner.opts;
                // MEMORY.md has other writers in other processes (a scheduled
                // consolidation, `/remember`): appended under its lock, so a
                // merge-and-rewrite never drops the appended lines.
                let _file = match target {
                    Target::MemoryMd => Some(claw_memory_api::WriterLock::acquire_named(
                        &o.mem.state_dir(),
                        claw_memory_api::lock::MEMORY_FILE_LOCK,
                        "MEMORY.md",
                        "memory_append (MCP)",
                        claw_agent::memory_file::LOCK_WAIT,
                    )?),
                    Target::Today => None,
                };
                let rel = target.path(o.mem.clock.now(), o.utc_offset);
                append::append(
                    &o.mem.workspace,
                    o.jail,
                    &rel,
                    &a.text,
                    a.heading.as_deref(),
                    o.mem.memory.max_file_bytes,
                )
            })
            .await?;
        match result {
            Ok(done) => {
                let json = serde_json::to_value(&done)
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
                let text = format!(
                    "appended to {} ({}){}",
                    done.citation,
                    if done.created {
                        "new note"
                    } else {
                        "existing note"
                    },
                    if done.redacted {
                        "; secrets were redacted"
                    } else {
                        ""
                    }
                );
                Ok(structured(text, json))
            }
            // An oversized argument is the caller's to fix (-32602), like any
            // out-of-range value; a full note is a tool error.
            Err(e @ AppendError::TooLarge { .. }) => Err(bad_args(T, e)),
            Err(e) => Ok(tool_error(format!(
                "memory_append failed: {}",
                claw_memory_api::error_chain(&e)
            ))),
        }
    }

    /// The resources: `MEMORY.md` and today's note, those that exist.
    fn resource_paths(&self) -> Vec<String> {
        let o = &self.inner.opts;
        let today = append::daily_note(o.mem.clock.now(), o.utc_offset);
        vec!["MEMORY.md".to_string(), today]
    }
}

impl Inner {
    fn service(&self) -> Result<&Memory, MemoryError> {
        if let Some(s) = self.service.get() {
            return Ok(s);
        }
        let opened = Arc::new(Memory::open(self.opts.mem.clone())?);
        Ok(self.service.get_or_init(|| opened))
    }
}

/// Readable search results: rank, citation, score, snippet.
fn render_search(o: &claw_memory_api::SearchOutcome) -> String {
    let r = &o.response;
    let mut s = String::new();
    if r.results.is_empty() {
        s.push_str(&format!("No matches for \"{}\".", r.query));
    }
    for (i, hit) in r.results.iter().enumerate() {
        if i > 0 {
            s.push('\n');
        }
        s.push_str(&format!(
            "{}. {} (score {:.3}, source {})\n{}\n",
            i + 1,
            hit.citation,
            hit.score,
            hit.source,
            hit.snippet
        ));
    }
    if let Some(fb) = &r.fallback {
        s.push_str(&format!("\n[fallback: {fb}]"));
    }
    if let Some(note) = o.sync.note() {
        s.push_str(&format!("\n[{note}]"));
    }
    if let Some(note) = claw_memory_api::describe_oversized(&o.too_big) {
        s.push_str(&format!("\n[{note}]"));
    }
    s
}

const URI_PREFIX: &str = "memory://";

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("claw", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "claw's memory: the user's notes and past assistant sessions. Search with \
memory_search before answering about the past, the user's preferences, earlier decisions, \
people or dates; read more with \
memory_get; cite `path#Lstart-Lend`.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(tools(
            self.inner.opts.read_only,
        )))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools(self.inner.opts.read_only)
            .into_iter()
            .find(|t| t.name == name)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        match request.name.as_ref() {
            "memory_search" => self.search(args).await,
            "memory_get" => self.get(args).await,
            "memory_status" => self.status(args).await,
            "memory_append" => self.append(args).await,
            other => Err(McpError::invalid_params(
                format!(
                    "unknown tool `{other}`; available: {}",
                    tools(self.inner.opts.read_only)
                        .iter()
                        .map(|t| t.name.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let ws = self.inner.opts.mem.workspace.clone();
        let resources = self
            .resource_paths()
            .into_iter()
            .filter_map(|p| {
                let size = std::fs::metadata(ws.join(&p)).ok()?.len();
                let title = if p == "MEMORY.md" {
                    "Long-term memory (MEMORY.md)".to_string()
                } else {
                    format!("Today's note ({p})")
                };
                Some(
                    Resource::new(format!("{URI_PREFIX}{p}"), p.clone())
                        .with_title(title)
                        .with_mime_type("text/markdown")
                        .with_size(size),
                )
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let uri = request.uri.clone();
        let rel = uri
            .strip_prefix(URI_PREFIX)
            .filter(|p| self.resource_paths().iter().any(|r| r == p))
            .map(str::to_string)
            .ok_or_else(|| {
                McpError::resource_not_found(
                    format!(
                        "no resource `{uri}`: claw serves {}",
                        self.resource_paths()
                            .iter()
                            .map(|p| format!("{URI_PREFIX}{p}"))
                            .collect::<Vec<_>>()
                            .join(" and ")
                    ),
                    None,
                )
            })?;
        let jail = self.inner.opts.jail;
        let text = self
            .blocking(move |inner| -> Result<String, String> {
                use std::io::Read;
                let j = claw_agent::tools::jail::Jail::new(&inner.opts.mem.workspace, jail)
                    .map_err(|e| e.to_string())?;
                let mut s = String::new();
                j.open_read(&rel)
                    .map_err(|e| e.to_string())?
                    .handle
                    .read_to_string(&mut s)
                    .map_err(|e| e.to_string())?;
                Ok(claw_memory_api::redact::redact(&s).into_owned())
            })
            .await?
            .map_err(|e| McpError::resource_not_found(format!("`{uri}`: {e}"), None))?;
        let contents = ResourceContents::TextResourceContents {
            uri,
            mime_type: Some("text/markdown".into()),
            text,
            meta: None,
        };
        Ok(ReadResourceResult::new(vec![contents]).into())
    }
}

/// Serves `server` on stdin/stdout until the client closes the stream, through
/// claw's own framing ([`LineTransport`]: a line that is not JSON or is over
/// [`crate::stdio::MAX_MESSAGE_BYTES`] gets a JSON-RPC error, and reading goes on).
pub async fn serve_stdio(server: MemoryServer) -> Result<(), std::io::Error> {
    let (stdin, stdout) = rmcp::transport::stdio();
    let running = server
        .serve(LineTransport::new(stdin, stdout))
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// The streamable-HTTP service of `server`, for the gateway to mount at `/mcp`
/// (behind its bearer token). Every HTTP session shares the server's one engine.
pub fn http_service(
    server: MemoryServer,
) -> StreamableHttpService<MemoryServer, LocalSessionManager> {
    http_service_until(server, tokio_util::sync::CancellationToken::new())
}

/// [`http_service`] whose sessions end when `stop` is cancelled (the gateway's
/// shutdown: open SSE streams must not hold the process past its grace period).
pub fn http_service_until(
    server: MemoryServer,
    stop: tokio_util::sync::CancellationToken,
) -> StreamableHttpService<MemoryServer, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default();
    config.cancellation_token = stop;
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
