//! The HTTP API (axum): `GET /healthz` (open), and behind the bearer token:
//! OpenAI-compatible `POST /v1/chat/completions` (SSE stream ending in `[DONE]`, or
//! one JSON answer), `GET /v1/models`, `GET /v1/sessions`,
//! `GET /v1/sessions/{key}/messages`, `POST /v1/sessions/{key}/cancel` (ends the
//! session's open chat requests: their turns are cancelled, what was said is kept),
//! `POST /v1/memory/search` and
//! `POST /v1/memory/get` (exactly the CLI's `--json` objects), the read-only
//! `GET /v1/memory/status` (`claw memory status --json`'s object),
//! `GET /v1/memory/sources` (`{"object": "list", "data": [source]}`) and
//! `GET /v1/memory/files?source=NAME` (the source's indexed files: `{"object":
//! "list", "source", "root", "data": [{"path", "size", "mtime"}]}`), and `GET /v1/status`;
//! `POST /v1/approvals/{id}` (`{"decision": "once"|"always"|"deny"}`: answers an
//! approval request of a streamed turn; 404 for an id that is not waiting, 400
//! for another decision);
//! `/mcp`: claw's memory as an MCP server (streamable HTTP, `claw_mcp`) over the
//! same warm engine, behind the same token.
//! `/` serves the WebChat page (static, no data: the page asks for the token), with
//! `/webchat.js` and `/webchat.css`, under a strict Content-Security-Policy; `/memory`
//! serves the Memory page (search with explain, browse, status; `/memory.js`, the
//! same styles and policy) over the memory endpoints; both pages load `/common.js`
//! (the token, API calls and DOM helpers they share).
//!
//! Streaming contract (WebChat and `claw -m` depend on it): standard
//! `chat.completion.chunk` objects; anything claw-specific rides in an extra `claw`
//! field of a chunk whose `choices[0].delta` is `{}`: `{"tool": {"id", "name",
//! "arguments", "status": "started"|"done"|"error", "preview"}}`, `{"status": line}`,
//! `{"end_answer": true}`; the last chunk carries `finish_reason` and
//! `{"claw": {"end", "message", "session"}}`.
//!
//! Approvals: a gated tool call (write, command, fetch from a new host) sends a
//! data event whose object has `"type": "approval_request"`, `id`, `tool`,
//! `preview`, `arguments`, `reach`, `always`, `session` and `timeout_seconds`
//! (also under `claw.approval_request`; the object is otherwise a chunk with an
//! empty delta, so OpenAI clients skip it). The turn waits for
//! `POST /v1/approvals/{id}` or the timeout (a denial), then sends
//! `{"claw": {"approval": {"id", "decision": "once"|"always"|"deny"|"timeout"}}}`.
//! A non-streamed request cannot answer: it fails (409 `approval_required`) and
//! its turn is cancelled. While a turn is quiet (a slow first
//! token, a long tool), the stream sends an SSE comment line `: keep-alive` every
//! `gateway.sse_keepalive_seconds` (default 15) so proxies and clients keep waiting;
//! SSE clients ignore comment lines.

use crate::bus::{Bus, EndKind, Inbound, TurnEvent, TurnReport};
use crate::memory::MemoryHub;
use crate::token::Token;
use crate::transcripts;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use claw_memory_api::{
    GetRequest, MemoryError, Mode, SearchError, SearchRequest, SourceFilter, SyncPolicy,
};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_util::sync::CancellationToken;

/// The WebChat page, built into the binary.
pub const WEBCHAT_HTML: &str = include_str!("../assets/webchat.html");
/// The WebChat page's code (`/webchat.js`).
pub const WEBCHAT_JS: &str = include_str!("../assets/webchat.js");
/// The Memory page (`/memory`): search, browse, status.
pub const MEMORY_HTML: &str = include_str!("../assets/memory.html");
/// The Memory page's code (`/memory.js`).
pub const MEMORY_JS: &str = include_str!("../assets/memory.js");
/// The code both pages share (`/common.js`): the token, API calls, DOM helpers.
pub const COMMON_JS: &str = include_str!("../assets/common.js");
/// The WebChat page's styles (`/webchat.css`, the Memory page's too).
pub const WEBCHAT_CSS: &str = include_str!("../assets/webchat.css");
/// The WebChat page's Content-Security-Policy: only its own script and styles, calls
/// to this origin only, no inline script or event handlers, no framing (a second line
/// of defence behind the page's escaping of model output).
pub const WEBCHAT_CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
/// Session used when a request names none.
pub const DEFAULT_SESSION: &str = "http:default";
/// Header naming the session.
pub const SESSION_HEADER: &str = "x-claw-session";
/// Header carrying why the embedding model did not load (search answers).
pub const EMBEDDER_ERROR_HEADER: &str = "x-claw-embedder-error";

/// Everything the handlers share.
pub struct AppState {
    pub token: Token,
    pub bus: Bus,
    /// None: no LLM configured (chat answers 503; memory still works).
    pub chat_enabled: Option<String>,
    pub memory: Option<Arc<MemoryHub>>,
    pub sessions_dir: PathBuf,
    pub stop: CancellationToken,
    /// `/v1/status` body besides the live counters.
    pub status: Box<dyn Fn() -> Value + Send + Sync>,
    pub clock: claw_memory_api::clock::Clock,
    /// The most recently active session of a user-facing channel (where
    /// heartbeat answers and cron answers without a target go).
    pub recent: Arc<std::sync::Mutex<Option<String>>>,
    /// `/mcp`'s server (None: not mounted, the memory engine did not open).
    pub mcp: Option<claw_mcp::MemoryServer>,
    /// Silence on a chat stream before a `: keep-alive` comment (None: never).
    pub sse_keepalive: Option<std::time::Duration>,
    /// Open chat requests: request number → (session, cancel).
    open: Arc<std::sync::Mutex<std::collections::HashMap<u64, (String, CancellationToken)>>>,
    next_id: AtomicU64,
    /// Approval requests of running turns (shared with the session workers).
    pub approvals: Arc<crate::approvals::Approvals>,
}

impl AppState {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        token: Token,
        bus: Bus,
        chat_enabled: Option<String>,
        memory: Option<Arc<MemoryHub>>,
        sessions_dir: PathBuf,
        stop: CancellationToken,
        status: Box<dyn Fn() -> Value + Send + Sync>,
        clock: claw_memory_api::clock::Clock,
    ) -> AppState {
        AppState {
            token,
            bus,
            chat_enabled,
            memory,
            sessions_dir,
            stop,
            status,
            clock,
            recent: Arc::new(std::sync::Mutex::new(None)),
            mcp: None,
            sse_keepalive: Some(std::time::Duration::from_secs(
                crate::config::DEFAULT_SSE_KEEPALIVE_SECONDS,
            )),
            open: Default::default(),
            next_id: AtomicU64::new(1),
            approvals: crate::approvals::Approvals::new(std::time::Duration::from_secs(
                crate::approvals::DEFAULT_APPROVAL_TIMEOUT_SECONDS,
            )),
        }
    }

    /// The approval registry the session workers ask through.
    pub fn with_approvals(mut self, approvals: Arc<crate::approvals::Approvals>) -> AppState {
        self.approvals = approvals;
        self
    }

    /// Silence on a chat stream before a `: keep-alive` comment (None: never).
    pub fn with_sse_keepalive(mut self, every: Option<std::time::Duration>) -> AppState {
        self.sse_keepalive = every;
        self
    }

    /// Mount claw's MCP server at `/mcp` over the warm engine (`opts.mem` is
    /// ignored for the engine: the hub's is used; it still names the workspace
    /// for `memory_append` and `memory_status`). No-op without a memory engine.
    pub fn with_mcp(mut self, opts: claw_mcp::ServerOptions) -> AppState {
        self.mcp = self
            .memory
            .as_ref()
            .map(|hub| claw_mcp::MemoryServer::with_service(opts, hub.service()));
        self
    }
}

type Shared = Arc<AppState>;

/// The router.
pub fn router(state: Shared) -> Router {
    let mut api = Router::new();
    if let Some(server) = state.mcp.clone() {
        api = api.route_service(
            "/mcp",
            claw_mcp::http_service_until(server, state.stop.clone()),
        );
    }
    let api = api
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/sessions", get(sessions))
        .route("/v1/sessions/{key}/messages", get(session_messages))
        .route("/v1/sessions/{key}/subagents", get(session_subagents))
        .route("/v1/sessions/{key}/cancel", post(cancel_session))
        .route("/v1/approvals/{id}", post(answer_approval))
        .route("/v1/memory/search", post(memory_search))
        .route("/v1/memory/get", post(memory_get))
        .route("/v1/memory/status", get(memory_status))
        .route("/v1/memory/sources", get(memory_sources))
        .route("/v1/memory/files", get(memory_files))
        .route("/v1/status", get(status))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    let mut open = Router::new().route("/healthz", get(|| async { Json(json!({"status": "ok"})) }));
    for (path, content_type, body) in PAGE_FILES {
        open = open.route(
            path,
            get(move || async move { page_file(content_type, body) }),
        );
    }
    open.merge(api).with_state(state)
}

/// An OpenAI-style error body.
pub fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    (
        status,
        Json(json!({"error": {"message": message.into(), "type": kind, "kind": kind}})),
    )
        .into_response()
}

async fn require_token(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if !st.token.verify_header(given) {
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token (Authorization: Bearer <token from the state dir's gateway.token or CLAW_GATEWAY_TOKEN>)",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    next.run(req).await
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The pages' static files, served without the token (no data in them: the
/// pages ask for it): path, content type, body.
const PAGE_FILES: [(&str, &str, &str); 6] = [
    ("/", HTML, WEBCHAT_HTML),
    ("/webchat.js", JS, WEBCHAT_JS),
    ("/webchat.css", CSS, WEBCHAT_CSS),
    ("/memory", HTML, MEMORY_HTML),
    ("/memory.js", JS, MEMORY_JS),
    ("/common.js", JS, COMMON_JS),
];

/// One of the pages' static files, under [`WEBCHAT_CSP`].
fn page_file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_SECURITY_POLICY, WEBCHAT_CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::REFERRER_POLICY, "no-referrer"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn models(State(st): State<Shared>) -> Response {
    let created = st.clock.now().timestamp();
    Json(json!({
        "object": "list",
        "data": [{"id": "claw", "object": "model", "created": created, "owned_by": "claw"}]
    }))
    .into_response()
}

async fn status(State(st): State<Shared>) -> Response {
    // The status body reads files (the jobs file): off the runtime.
    let s2 = st.clone();
    let mut v = tokio::task::spawn_blocking(move || (s2.status)())
        .await
        .unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut v {
        let s = st.bus.stats.snapshot();
        m.insert("sessions".into(), json!(s.sessions));
        m.insert(
            "queues".into(),
            json!({
                "inbound": st.bus.inbound_depth(),
                "outbound": st.bus.outbound_depth(),
                "waiting": s.queued,
                "running": s.running,
            }),
        );
        m.insert(
            "turns".into(),
            json!({"accepted": s.accepted, "finished": s.finished}),
        );
        m.insert("accepting".into(), json!(!st.stop.is_cancelled()));
        m.insert(
            "approvals".into(),
            json!({"waiting": st.approvals.waiting(), "timeout_seconds": st.approvals.timeout.as_secs()}),
        );
    }
    Json(v).into_response()
}

// ---- chat completions -------------------------------------------------------

/// The text of the last user message (string content or text parts).
fn last_user_text(body: &Value) -> Option<String> {
    let msgs = body.get("messages")?.as_array()?;
    let m = msgs
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))?;
    match m.get("content")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let text: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            (!text.is_empty()).then(|| text.join("\n"))
        }
        _ => None,
    }
}

fn session_key(headers: &HeaderMap, body: &Value) -> String {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .or_else(|| {
            body.get("user")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| DEFAULT_SESSION.to_string())
}

fn finish_reason(end: EndKind) -> &'static str {
    match end {
        EndKind::Answered => "stop",
        EndKind::MaxIterations => "length",
        _ => "stop",
    }
}

fn chunk(
    id: &str,
    created: i64,
    delta: Value,
    finish: Option<&str>,
    claw: Option<Value>,
) -> String {
    let mut v = json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": "claw",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    });
    if let (Some(c), Value::Object(m)) = (claw, &mut v) {
        m.insert("claw".into(), c);
    }
    v.to_string()
}

/// One SSE frame.
fn sse(data: &str) -> String {
    format!("data: {data}\n\n")
}

/// The SSE comment a quiet stream sends (clients ignore it; proxies see traffic).
pub const SSE_KEEPALIVE: &str = ": keep-alive\n\n";

async fn chat_completions(
    State(st): State<Shared>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let body: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("the body is not JSON: {e}"),
            );
        }
    };
    let Some(input) = last_user_text(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "no user message with text content in `messages`",
        );
    };
    if st.chat_enabled.is_none() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_llm",
            "this gateway has no LLM configured (agent.profiles or CLAW_LLM_*)",
        );
    }
    if st.stop.is_cancelled() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down",
        );
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let key = session_key(&headers, &body);
    let ext = body.get("claw");
    let channel = ext
        .and_then(|c| c.get("channel"))
        .and_then(Value::as_str)
        .unwrap_or("http");
    let yes = ext
        .and_then(|c| c.get("yes"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let (mut msg, rx) = Inbound::with_reply(channel, &key, "http", &input);
    msg.yes = yes;
    // Gated calls reach this request as approval requests (a non-streamed one
    // then fails naming the streamed way).
    msg.approvals = true;
    if !matches!(channel, "cron" | "heartbeat")
        && let Ok(mut r) = st.recent.lock()
    {
        *r = Some(key.clone());
    }
    if st.bus.submit(msg).await.is_err() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the gateway is shutting down",
        );
    }
    let n = st.next_id.fetch_add(1, Ordering::SeqCst);
    let id = format!("chatcmpl-claw-{n}");
    let open = OpenRequest::register(&st, n, &key);
    let created = st.clock.now().timestamp();
    let session_header = HeaderValue::from_str(&key).ok();
    let mut resp = if stream {
        stream_response(sse_frames(
            rx,
            id,
            created,
            key.clone(),
            st.sse_keepalive,
            open,
        ))
    } else {
        collect_response(rx, id, created, key.clone(), open).await
    };
    if let Some(h) = session_header {
        resp.headers_mut().insert(SESSION_HEADER, h);
    }
    resp
}

/// A chat request while it is open: `POST /v1/sessions/{key}/cancel` finds it
/// here; dropping it (the response ended, or the client went away) removes it.
struct OpenRequest {
    n: u64,
    cancel: CancellationToken,
    open: Arc<std::sync::Mutex<std::collections::HashMap<u64, (String, CancellationToken)>>>,
}

impl OpenRequest {
    fn register(st: &AppState, n: u64, key: &str) -> OpenRequest {
        let cancel = CancellationToken::new();
        if let Ok(mut m) = st.open.lock() {
            m.insert(n, (key.to_string(), cancel.clone()));
        }
        OpenRequest {
            n,
            cancel,
            open: st.open.clone(),
        }
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        if let Ok(mut m) = self.open.lock() {
            m.remove(&self.n);
        }
    }
}

/// The report of a turn whose request was cancelled (the worker's own report
/// cannot reach a closed reply stream).
fn cancelled_report() -> TurnReport {
    TurnReport {
        end: EndKind::Cancelled,
        answer: String::new(),
        message: Some("cancelled".into()),
    }
}

/// The next event of a turn, or (once `open` is cancelled) the closed stream's
/// buffered rest: closing the reply stream is what tells the worker to stop.
async fn next_event(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<TurnEvent>,
    open: &OpenRequest,
) -> Option<TurnEvent> {
    if !open.cancel.is_cancelled() {
        tokio::select! {
            ev = rx.recv() => return ev,
            _ = open.cancel.cancelled() => {}
        }
    }
    // Closing is idempotent; what is buffered still drains.
    rx.close();
    match rx.recv().await {
        Some(ev) => Some(ev),
        None => Some(TurnEvent::Finished(cancelled_report())),
    }
}

/// An SSE response carrying `frames` ([`sse_frames`]).
fn stream_response(frames: impl futures_util::Stream<Item = String> + Send + 'static) -> Response {
    use futures_util::StreamExt;
    let s = frames.map(Ok::<_, std::convert::Infallible>);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(s))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// The SSE frames of one streamed turn: the role chunk, the turn's events, a
/// `: keep-alive` comment after each `keepalive` of silence, the end chunk, `[DONE]`.
fn sse_frames(
    rx: tokio::sync::mpsc::UnboundedReceiver<TurnEvent>,
    id: String,
    created: i64,
    key: String,
    keepalive: Option<std::time::Duration>,
    open: OpenRequest,
) -> impl futures_util::Stream<Item = String> {
    let open = Arc::new(open);
    enum St {
        Start,
        Events,
        Done,
        End,
    }
    let first = chunk(
        &id,
        created,
        json!({"role": "assistant", "content": ""}),
        None,
        None,
    );
    futures_util::stream::unfold((St::Start, rx, first), move |(state, mut rx, first)| {
        let id = id.clone();
        let key = key.clone();
        let open = open.clone();
        async move {
            let frame = match state {
                St::Start => {
                    let f = sse(&first);
                    return Some((f, (St::Events, rx, first)));
                }
                St::Done => return Some((sse("[DONE]"), (St::End, rx, first))),
                St::End => return None,
                St::Events => match keepalive {
                    None => next_event(&mut rx, &open).await,
                    Some(every) => {
                        match tokio::time::timeout(every, next_event(&mut rx, &open)).await {
                            Ok(ev) => ev,
                            Err(_) => {
                                return Some((SSE_KEEPALIVE.to_string(), (St::Events, rx, first)));
                            }
                        }
                    }
                },
            };
            let (data, next) = match frame {
                Some(TurnEvent::Text(t)) => (
                    chunk(&id, created, json!({"content": t}), None, None),
                    St::Events,
                ),
                Some(TurnEvent::EndAnswer) => (
                    chunk(
                        &id,
                        created,
                        json!({}),
                        None,
                        Some(json!({"end_answer": true})),
                    ),
                    St::Events,
                ),
                Some(TurnEvent::Status(line)) => (
                    chunk(&id, created, json!({}), None, Some(json!({"status": line}))),
                    St::Events,
                ),
                Some(TurnEvent::Tool(t)) => (
                    chunk(&id, created, json!({}), None, Some(json!({"tool": t}))),
                    St::Events,
                ),
                Some(TurnEvent::Approval(a)) => (approval_chunk(created, &a), St::Events),
                Some(TurnEvent::ApprovalResolved(r)) => (
                    chunk(&id, created, json!({}), None, Some(json!({"approval": r}))),
                    St::Events,
                ),
                Some(TurnEvent::Finished(r)) => (end_chunk(&id, created, &r, &key), St::Done),
                // The worker went away without an end: say so.
                None => (
                    end_chunk(
                        &id,
                        created,
                        &TurnReport {
                            end: EndKind::Failed,
                            answer: String::new(),
                            message: Some("the turn ended without a result".into()),
                        },
                        &key,
                    ),
                    St::Done,
                ),
            };
            Some((sse(&data), (next, rx, first)))
        }
    })
}

/// The data event of an approval request: `"type": "approval_request"` with the
/// request's fields at the top (its `id` is the approval's), also under
/// `claw.approval_request`; otherwise a chunk with an empty delta.
fn approval_chunk(created: i64, a: &crate::bus::ApprovalRequest) -> String {
    let fields = serde_json::to_value(a).unwrap_or_else(|_| json!({}));
    let mut v = json!({
        "object": "chat.completion.chunk",
        "created": created,
        "model": "claw",
        "choices": [{"index": 0, "delta": {}, "finish_reason": null}],
        "type": "approval_request",
        "claw": {"approval_request": fields.clone()},
    });
    if let (Value::Object(m), Value::Object(f)) = (&mut v, fields) {
        for (k, val) in f {
            m.insert(k, val);
        }
    }
    v.to_string()
}

fn end_chunk(id: &str, created: i64, r: &TurnReport, key: &str) -> String {
    chunk(
        id,
        created,
        json!({}),
        Some(finish_reason(r.end)),
        Some(json!({"end": r.end, "message": r.message, "session": key})),
    )
}

async fn collect_response(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<TurnEvent>,
    id: String,
    created: i64,
    key: String,
    open: OpenRequest,
) -> Response {
    let mut tools = Vec::new();
    let report = loop {
        match next_event(&mut rx, &open).await {
            Some(TurnEvent::Finished(r)) => break r,
            Some(TurnEvent::Tool(t)) => tools.push(t),
            Some(TurnEvent::Approval(a)) => {
                // Returning drops the reply stream: the worker cancels the turn
                // and the request is withdrawn.
                return approval_required(&a);
            }
            Some(_) => {}
            None => {
                break TurnReport {
                    end: EndKind::Failed,
                    answer: String::new(),
                    message: Some("the turn ended without a result".into()),
                };
            }
        }
    };
    match report.end {
        EndKind::Answered | EndKind::MaxIterations => Json(json!({
            "id": id,
            "object": "chat.completion",
            "created": created,
            "model": "claw",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": report.answer},
                "finish_reason": finish_reason(report.end),
            }],
            "claw": {"end": report.end, "message": report.message, "session": key, "tools": tools},
        }))
        .into_response(),
        EndKind::Rejected => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            report.message.unwrap_or_default(),
        ),
        EndKind::Cancelled | EndKind::LoopBroken | EndKind::Failed => {
            let kind = match report.end {
                EndKind::Cancelled => "cancelled",
                EndKind::LoopBroken => "loop_broken",
                _ => "turn_failed",
            };
            error(
                StatusCode::BAD_GATEWAY,
                kind,
                report.message.unwrap_or_default(),
            )
        }
    }
}

/// The error of a non-streamed request whose turn needs an approval.
fn approval_required(a: &crate::bus::ApprovalRequest) -> Response {
    error(
        StatusCode::CONFLICT,
        "approval_required",
        format!(
            "`{}` needs the user's approval, and a non-streamed request cannot give it: \
             send the request with \"stream\": true and answer the stream's \
             `approval_request` event with POST /v1/approvals/{{id}} \
             {{\"decision\": \"once\"|\"always\"|\"deny\"}} (or allow side effects \
             with \"claw\": {{\"yes\": true}}); the turn was cancelled",
            a.preview
        ),
    )
}

// ---- approvals ------------------------------------------------------------------

/// `POST /v1/approvals/{id}`: answer a waiting approval request.
async fn answer_approval(
    State(st): State<Shared>,
    UrlPath(id): UrlPath<String>,
    body: axum::body::Bytes,
) -> Response {
    const EXPECTED: &str = "the body must be {\"decision\": \"once\"|\"always\"|\"deny\"} (\"always\": for this session only)";
    let given = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
        v.get("decision")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    let Some(decision) = given.as_deref().and_then(crate::approvals::Decision::parse) else {
        let got = match given {
            Some(d) => format!("got decision `{d}`"),
            None => "got no `decision` string".to_string(),
        };
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("{EXPECTED}; {got}"),
        );
    };
    match st.approvals.answer(&id, decision) {
        Ok(session) => Json(json!({"id": id, "session": session, "decision": decision.as_str()}))
            .into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, "not_found", e.to_string()),
    }
}

// ---- sessions -----------------------------------------------------------------

async fn sessions(State(st): State<Shared>) -> Response {
    let dir = st.sessions_dir.clone();
    match tokio::task::spawn_blocking(move || transcripts::list(&dir)).await {
        Ok(Ok(list)) => Json(json!({"object": "list", "data": list})).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, "io", e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "task", e.to_string()),
    }
}

async fn session_messages(State(st): State<Shared>, UrlPath(key): UrlPath<String>) -> Response {
    let dir = st.sessions_dir.clone();
    let k = key.clone();
    match tokio::task::spawn_blocking(move || transcripts::messages(&dir, &k)).await {
        Ok(Ok(Some(msgs))) => {
            Json(json!({"object": "list", "session": key, "data": msgs})).into_response()
        }
        Ok(Ok(None)) => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no session `{key}`"),
        ),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, "io", e.to_string()),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "task", e.to_string()),
    }
}

/// `GET /v1/sessions/{key}/subagents`: the session's sub-agents with their state
/// (an empty list for a session that has none or no worker yet).
async fn session_subagents(UrlPath(key): UrlPath<String>) -> Response {
    let list = claw_agent::subagents::listed(&key).unwrap_or_default();
    Json(json!({"object": "list", "session": key, "data": list})).into_response()
}

/// `POST /v1/sessions/{key}/cancel`: cancel the session's open chat requests
/// (the running turn stops, keeping what was said; queued ones never start)
/// and its unfinished sub-agents (each announced as cancelled).
async fn cancel_session(State(st): State<Shared>, UrlPath(key): UrlPath<String>) -> Response {
    let mut n = 0;
    if let Ok(m) = st.open.lock() {
        for (k, c) in m.values() {
            if *k == key && !c.is_cancelled() {
                c.cancel();
                n += 1;
            }
        }
    }
    let subagents = claw_agent::subagents::cancel_children(&key);
    Json(json!({"session": key, "cancelled": n, "subagents_cancelled": subagents})).into_response()
}

// ---- memory ---------------------------------------------------------------------

/// `POST /v1/memory/search`: the CLI's flags as JSON.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchBody {
    pub query: String,
    #[serde(default = "default_limit")]
    pub limit: usize,
    pub min_score: Option<f64>,
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub explain: bool,
    #[serde(default)]
    pub no_sync: bool,
}

fn default_limit() -> usize {
    6
}

/// `POST /v1/memory/get`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetBody {
    pub path: String,
    #[serde(default)]
    pub from: Option<usize>,
    #[serde(default)]
    pub lines: Option<usize>,
}

fn service_error(e: &MemoryError) -> Response {
    let (status, kind) = match e.search_error() {
        Some(SearchError::NotIndexed(_)) => (StatusCode::NOT_FOUND, "not_indexed"),
        Some(SearchError::UnknownSource { .. }) => (StatusCode::BAD_REQUEST, "unknown_source"),
        Some(_) => (StatusCode::BAD_REQUEST, "search"),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "service"),
    };
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        src = s.source();
    }
    error(status, kind, msg)
}

/// A memory endpoint's inputs: the warm engine (503 when it did not open) and
/// the parsed JSON body (400 naming what is wrong).
struct MemoryCall<B> {
    hub: Arc<MemoryHub>,
    body: B,
}

impl<B: serde::de::DeserializeOwned> axum::extract::FromRequest<Shared> for MemoryCall<B> {
    type Rejection = Response;

    async fn from_request(req: Request, st: &Shared) -> Result<Self, Response> {
        let Some(hub) = st.memory.clone() else {
            return Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "no_memory",
                "the memory engine did not open",
            ));
        };
        let bytes = axum::body::Bytes::from_request(req, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let body = serde_json::from_slice(&bytes).map_err(|e| {
            error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                e.to_string(),
            )
        })?;
        Ok(MemoryCall { hub, body })
    }
}

fn json_bytes(bytes: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

async fn memory_search(call: MemoryCall<SearchBody>) -> Response {
    let MemoryCall { hub, body: b } = call;
    let mode = match b.mode.as_deref().unwrap_or("hybrid") {
        "hybrid" => Mode::Hybrid,
        "fts" => Mode::Fts,
        "vector" => Mode::Vector,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("unknown mode `{other}` (hybrid, fts, vector)"),
            );
        }
    };
    let req = SearchRequest {
        limit: b.limit,
        min_score: b.min_score,
        mode,
        source: SourceFilter::parse(b.source.as_deref().unwrap_or("all")),
        explain: b.explain,
        ..SearchRequest::new(b.query)
    };
    let policy = SyncPolicy::skip_if(b.no_sync);
    let h = hub.clone();
    let started = std::time::Instant::now();
    let r = tokio::task::spawn_blocking(move || {
        let t = std::time::Instant::now();
        let r = h.search(&req, policy);
        (r, t.elapsed())
    })
    .await;
    match r {
        Ok((Ok(outcome), searched)) => match serde_json::to_vec(&outcome) {
            Ok(bytes) => {
                let mut resp = json_bytes(bytes);
                // Where the gateway's time went (not part of the JSON contract).
                let timing = format!(
                    "search;dur={:.2}, total;dur={:.2}",
                    searched.as_secs_f64() * 1e3,
                    started.elapsed().as_secs_f64() * 1e3
                );
                if let Ok(v) = HeaderValue::from_str(&timing) {
                    resp.headers_mut().insert("server-timing", v);
                }
                if let Some(e) = hub.embedder_error()
                    && let Ok(v) = HeaderValue::from_str(&e.replace(['\r', '\n'], " "))
                {
                    resp.headers_mut().insert(EMBEDDER_ERROR_HEADER, v);
                }
                resp
            }
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "encode", e.to_string()),
        },
        Ok((Err(e), _)) => service_error(&e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "task", e.to_string()),
    }
}

async fn memory_get(call: MemoryCall<GetBody>) -> Response {
    let MemoryCall { hub, body: b } = call;
    let req = GetRequest {
        path: b.path,
        from: b.from.unwrap_or(1).max(1),
        lines: b.lines.unwrap_or(claw_memory_api::GET_DEFAULT_LINES).max(1),
        max_chars: claw_memory_api::GET_MAX_CHARS,
        turns_around: 0,
    };
    match tokio::task::spawn_blocking(move || hub.get(&req)).await {
        Ok(Ok(resp)) => match serde_json::to_vec(&resp) {
            Ok(bytes) => json_bytes(bytes),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "encode", e.to_string()),
        },
        Ok(Err(e)) => service_error(&e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "task", e.to_string()),
    }
}

/// Run `f` on the warm engine off the runtime and answer its value as JSON
/// (an engine error as [`service_error`]; 503 when the engine did not open).
async fn memory_read<T: serde::Serialize + Send + 'static>(
    st: &Shared,
    f: impl FnOnce(&MemoryHub) -> Result<T, MemoryError> + Send + 'static,
) -> Response {
    let Some(hub) = st.memory.clone() else {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "no_memory",
            "the memory engine did not open",
        );
    };
    match tokio::task::spawn_blocking(move || f(&hub)).await {
        Ok(Ok(v)) => match serde_json::to_vec(&v) {
            Ok(bytes) => json_bytes(bytes),
            Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "encode", e.to_string()),
        },
        Ok(Err(e)) => service_error(&e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "task", e.to_string()),
    }
}

/// `GET /v1/memory/status`: `claw memory status --json`'s object.
async fn memory_status(State(st): State<Shared>) -> Response {
    let mut resp = memory_read(&st, |hub| hub.status()).await;
    if let Some(hub) = &st.memory
        && let Some(e) = hub.embedder_error()
        && let Ok(v) = HeaderValue::from_str(&e.replace(['\r', '\n'], " "))
    {
        resp.headers_mut().insert(EMBEDDER_ERROR_HEADER, v);
    }
    resp
}

/// `GET /v1/memory/sources`: every source (built-in, then registered folders).
async fn memory_sources(State(st): State<Shared>) -> Response {
    memory_read(&st, |hub| {
        Ok(json!({"object": "list", "data": hub.sources()?}))
    })
    .await
}

/// `GET /v1/memory/files?source=NAME`'s query.
#[derive(Debug, Deserialize)]
pub struct FilesQuery {
    pub source: String,
}

/// `GET /v1/memory/files?source=NAME`: the source's indexed files, by path.
async fn memory_files(
    State(st): State<Shared>,
    query: Result<axum::extract::Query<FilesQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let source = match query {
        Ok(q) => q.0.source,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                format!("expected ?source=NAME: {e}"),
            );
        }
    };
    memory_read(&st, move |hub| {
        let files = hub.files(&source)?;
        let root = hub
            .sources()?
            .into_iter()
            .find(|s| s.name == source)
            .map(|s| s.root);
        Ok(json!({"object": "list", "source": source, "root": root, "data": files}))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_open() -> OpenRequest {
        OpenRequest {
            n: 0,
            cancel: CancellationToken::new(),
            open: Default::default(),
        }
    }

    /// A cancelled request closes the reply stream (the worker's signal to stop)
    /// and ends with a `cancelled` end chunk and `[DONE]`.
    #[tokio::test]
    async fn cancelling_closes_the_reply_stream_and_ends_cancelled() {
        use futures_util::StreamExt;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let open = test_open();
        let cancel = open.cancel.clone();
        let frames = sse_frames(rx, "x".into(), 1, "k".into(), None, open);
        futures_util::pin_mut!(frames);
        frames.next().await.expect("role chunk");
        tx.send(TurnEvent::Text("partial".into())).expect("send");
        assert!(frames.next().await.expect("text").contains("partial"));
        cancel.cancel();
        let end = frames.next().await.expect("end chunk");
        assert!(end.contains("\"end\":\"cancelled\""), "{end}");
        assert!(tx.is_closed(), "the worker sees the closed stream");
        assert_eq!(frames.next().await.as_deref(), Some("data: [DONE]\n\n"));
    }

    /// A quiet turn gets a `: keep-alive` comment per interval of silence, and
    /// none once events flow; the stream still ends with the end chunk and `[DONE]`.
    #[tokio::test(start_paused = true)]
    async fn quiet_streams_send_keep_alive_comments() {
        use futures_util::StreamExt;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let every = std::time::Duration::from_secs(15);
        let frames = sse_frames(rx, "x".into(), 1, "k".into(), Some(every), test_open());
        futures_util::pin_mut!(frames);
        let t0 = tokio::time::Instant::now();
        let first = frames.next().await.expect("role chunk");
        assert!(first.starts_with("data: ") && first.contains("\"role\":\"assistant\""));
        // The model is slow: 31 s without a token → two keep-alives, 15 s apart.
        assert_eq!(frames.next().await.as_deref(), Some(SSE_KEEPALIVE));
        assert_eq!(t0.elapsed(), every);
        assert_eq!(frames.next().await.as_deref(), Some(SSE_KEEPALIVE));
        assert_eq!(t0.elapsed(), every * 2);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        tx.send(TurnEvent::Text("hello".into())).expect("send");
        let text = frames.next().await.expect("text chunk");
        assert!(text.contains("\"content\":\"hello\""), "{text}");
        assert_eq!(t0.elapsed(), std::time::Duration::from_secs(31));
        tx.send(TurnEvent::Finished(TurnReport {
            end: EndKind::Answered,
            answer: "hello".into(),
            message: None,
        }))
        .expect("send");
        let end = frames.next().await.expect("end chunk");
        assert!(end.contains("\"finish_reason\":\"stop\""), "{end}");
        assert_eq!(frames.next().await.as_deref(), Some("data: [DONE]\n\n"));
        assert_eq!(frames.next().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn no_keep_alives_when_disabled() {
        use futures_util::StreamExt;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let frames = sse_frames(rx, "x".into(), 1, "k".into(), None, test_open());
        futures_util::pin_mut!(frames);
        frames.next().await.expect("role chunk");
        let sender = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            tx.send(TurnEvent::Text("late".into())).expect("send");
        });
        let next = frames.next().await.expect("text chunk");
        assert!(next.contains("late"), "{next}");
        sender.await.expect("sender");
    }

    #[test]
    fn last_user_message_is_the_input() {
        let body = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": [{"type": "text", "text": "second"}, {"type": "image_url"}]},
            {"role": "assistant", "content": "b"},
        ]});
        assert_eq!(last_user_text(&body).as_deref(), Some("second"));
        assert_eq!(last_user_text(&json!({"messages": []})), None);
    }

    #[test]
    fn session_from_header_then_user_then_default() {
        let mut h = HeaderMap::new();
        assert_eq!(session_key(&h, &json!({})), DEFAULT_SESSION);
        assert_eq!(session_key(&h, &json!({"user": "alice"})), "alice");
        h.insert(SESSION_HEADER, HeaderValue::from_static("web:1"));
        assert_eq!(session_key(&h, &json!({"user": "alice"})), "web:1");
    }

    #[test]
    fn tool_chunk_has_an_empty_delta_and_the_claw_field() {
        let c: Value = serde_json::from_str(&chunk(
            "x",
            1,
            json!({}),
            None,
            Some(json!({"tool": {"id": "c1", "status": "started"}})),
        ))
        .expect("json");
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["choices"][0]["delta"], json!({}));
        assert_eq!(c["claw"]["tool"]["status"], "started");
    }
}
