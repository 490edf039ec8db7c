//! A scripted HTTP/1.1 server on 127.0.0.1 for tests: each test lists the replies
//! (status, headers, a JSON/text body or a stream of SSE events with optional
//! delays and raw malformed lines), the server serves them in order, one per
//! request, and records every request (method, path, headers, JSON body).
//!
//! Real TCP, real HTTP framing (SSE bodies are sent with chunked transfer encoding,
//! one chunk per step), `Connection: close` on every reply. The server runs on its
//! own thread and runtime, so it works from `#[tokio::test]` (any flavour, paused
//! clock included) and from plain `#[test]`s that run the `claw` binary.
//!
//! ```text
//! #[path = "support/scripted_server.rs"]
//! mod scripted_server;
//! use scripted_server::{ScriptedServer, Reply, Step, openai, anthropic};
//!
//! let server = ScriptedServer::start([
//!     Reply::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "1"),
//!     openai::text(&["Hel", "lo"]),
//! ]);
//! // point the client at server.url() (no trailing /v1) ...
//! assert_eq!(server.requests()[1].path, "/v1/chat/completions");
//! ```
//!
//! A request with no reply left gets `500 {"error": {"message": "scripted server: no reply left ..."}}`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::loopback::Loopback;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One step of an SSE body.
#[derive(Debug, Clone)]
pub enum Step {
    /// `event: <name>` (if any) + one `data:` line per line of `data`, then a blank line.
    Event { event: Option<String>, data: String },
    /// Bytes sent verbatim (malformed lines, half events, `\r\n` framing...).
    Raw(String),
    /// Pause before the next step (the bytes so far are flushed first).
    Delay(Duration),
}

impl Step {
    /// `data: <json>`.
    pub fn data(v: Value) -> Step {
        Step::Event {
            event: None,
            data: v.to_string(),
        }
    }
    /// `event: <name>` + `data: <json>`.
    pub fn event(name: &str, v: Value) -> Step {
        Step::Event {
            event: Some(name.to_string()),
            data: v.to_string(),
        }
    }
    /// `data: [DONE]`.
    pub fn done() -> Step {
        Step::Event {
            event: None,
            data: "[DONE]".into(),
        }
    }
    pub fn raw(s: &str) -> Step {
        Step::Raw(s.to_string())
    }
    pub fn delay_ms(ms: u64) -> Step {
        Step::Delay(Duration::from_millis(ms))
    }

    fn bytes(&self) -> Option<String> {
        match self {
            Step::Event { event, data } => {
                let mut s = String::new();
                if let Some(e) = event {
                    s.push_str(&format!("event: {e}\n"));
                }
                for line in data.split('\n') {
                    s.push_str(&format!("data: {line}\n"));
                }
                s.push('\n');
                Some(s)
            }
            Step::Raw(r) => Some(r.clone()),
            Step::Delay(_) => None,
        }
    }
}

/// A reply body.
#[derive(Debug, Clone)]
pub enum Body {
    Json(Value),
    Text(String),
    /// `text/event-stream`, chunked, one chunk per step.
    Sse(Vec<Step>),
}

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Reply {
    pub fn json(status: u16, v: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Json(v),
        }
    }
    pub fn text(status: u16, s: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Text(s.to_string()),
        }
    }
    /// A 200 event stream.
    pub fn sse(steps: Vec<Step>) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body: Body::Sse(steps),
        }
    }
    /// Add a response header.
    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// Names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` if it is not JSON).
    pub json: Value,
    pub raw_body: String,
}

impl Recorded {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The content of the last tool result among this request's messages (a
    /// session's earlier turns are replayed first).
    pub fn last_tool_result(&self) -> Option<String> {
        self.json["messages"]
            .as_array()?
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .and_then(|m| m["content"].as_str())
            .map(str::to_string)
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Reply>,
    requests: Vec<Recorded>,
}

/// The running server; stops when dropped.
pub struct ScriptedServer {
    server: Loopback,
    state: Arc<Mutex<State>>,
}

impl ScriptedServer {
    /// Bind a random port on 127.0.0.1 and serve `replies` in order.
    pub fn start(replies: impl IntoIterator<Item = Reply>) -> ScriptedServer {
        let state = Arc::new(Mutex::new(State {
            script: replies.into_iter().collect(),
            requests: Vec::new(),
        }));
        let st = state.clone();
        let server = Loopback::start(1, move |sock| {
            let st = st.clone();
            async move {
                let _ = serve(sock, st).await;
            }
        });
        ScriptedServer { server, state }
    }

    /// `http://127.0.0.1:<port>` (no `/v1`).
    pub fn url(&self) -> String {
        self.server.url()
    }

    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Append a reply to the script.
    pub fn push(&self, reply: Reply) {
        self.lock().script.push_back(reply);
    }

    /// Requests received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.lock().requests.clone()
    }

    /// The content of the latest result of tool call `call_id` the model got in
    /// request `req` (a session's history may hold earlier runs of the same id).
    pub fn tool_result(&self, req: usize, call_id: &str) -> String {
        self.requests()[req].json["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .rev()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_else(|| panic!("no result of tool call {call_id} in request {req}"))
            .to_string()
    }

    /// The tool results the model received in the last request, in order.
    pub fn last_tool_results(&self) -> Vec<String> {
        let reqs = self.requests();
        let last = &reqs.last().expect("no request yet").json;
        tool_contents(last)
            .into_iter()
            .map(str::to_string)
            .collect()
    }

    /// Replies not served yet.
    pub fn remaining(&self) -> usize {
        self.lock().script.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

async fn serve(mut sock: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(p) = find(&buf, b"\r\n\r\n") {
            break p;
        }
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let path = parts.next().unwrap_or_default().to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&tmp[..n]);
    }
    let raw_body = String::from_utf8_lossy(&body).into_owned();
    let reply = {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        st.requests.push(Recorded {
            method: method.clone(),
            path: path.clone(),
            headers,
            json: serde_json::from_str(&raw_body).unwrap_or(Value::Null),
            raw_body,
        });
        st.script.pop_front()
    };
    let reply = reply.unwrap_or_else(|| {
        Reply::json(
            500,
            json!({"error": {"message": format!("scripted server: no reply left for {method} {path}")}}),
        )
    });
    write_reply(&mut sock, reply).await
}

async fn write_reply(sock: &mut TcpStream, reply: Reply) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {} {}\r\n", reply.status, reason(reply.status));
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("connection: close\r\n");
    match reply.body {
        Body::Json(v) => {
            let b = v.to_string();
            head.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n\r\n{b}",
                b.len()
            ));
            sock.write_all(head.as_bytes()).await?;
        }
        Body::Text(t) => {
            head.push_str(&format!(
                "content-type: text/plain\r\ncontent-length: {}\r\n\r\n{t}",
                t.len()
            ));
            sock.write_all(head.as_bytes()).await?;
        }
        Body::Sse(steps) => {
            head.push_str(
                "content-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n",
            );
            sock.write_all(head.as_bytes()).await?;
            sock.flush().await?;
            for step in steps {
                match step.bytes() {
                    Some(b) if !b.is_empty() => {
                        sock.write_all(format!("{:x}\r\n{b}\r\n", b.len()).as_bytes())
                            .await?;
                        sock.flush().await?;
                    }
                    Some(_) => {}
                    None => {
                        if let Step::Delay(d) = step {
                            tokio::time::sleep(d).await;
                        }
                    }
                }
            }
            sock.write_all(b"0\r\n\r\n").await?;
        }
    }
    sock.flush().await?;
    let _ = sock.shutdown().await;
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Scripts in the OpenAI-compatible `/v1/chat/completions` streaming format.
pub mod openai {
    use super::{Reply, Step};
    use serde_json::{Value, json};

    /// One `chat.completion.chunk` with this `delta` and `finish_reason`.
    pub fn chunk(delta: Value, finish: Option<&str>) -> Step {
        Step::data(json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "scripted",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    }

    /// The usage chunk sent when `stream_options.include_usage` is set.
    pub fn usage(prompt: u64, completion: u64) -> Step {
        Step::data(json!({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                      "total_tokens": prompt + completion},
        }))
    }

    /// The steps of a streamed text answer (role chunk, one chunk per piece,
    /// finish `stop`, usage 10/pieces, `[DONE]`).
    pub fn text_steps(pieces: &[&str]) -> Vec<Step> {
        let mut s = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
        for p in pieces {
            s.push(chunk(json!({"content": p}), None));
        }
        s.push(chunk(json!({}), Some("stop")));
        s.push(usage(10, pieces.len() as u64));
        s.push(Step::done());
        s
    }

    /// A streamed text answer.
    pub fn text(pieces: &[&str]) -> Reply {
        Reply::sse(text_steps(pieces))
    }

    /// The steps of one tool call whose arguments arrive in `arg_pieces`.
    pub fn tool_call_steps(id: &str, name: &str, arg_pieces: &[&str]) -> Vec<Step> {
        let mut s = vec![chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}
            ]}),
            None,
        )];
        for p in arg_pieces {
            s.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
                None,
            ));
        }
        s.push(chunk(json!({}), Some("tool_calls")));
        s.push(usage(20, 5));
        s.push(Step::done());
        s
    }

    /// A streamed answer that calls one tool.
    pub fn tool_call(id: &str, name: &str, arg_pieces: &[&str]) -> Reply {
        Reply::sse(tool_call_steps(id, name, arg_pieces))
    }

    /// Turns of `(id, path, answer)`: each a `write_file` call `id` writing its
    /// own id into `path` ([`write_file_call`]), then the text `answer`.
    pub fn write_file_turns(turns: &[(&str, &str, &str)]) -> Vec<Reply> {
        turns
            .iter()
            .flat_map(|(id, path, answer)| [write_file_call(id, path), text(&[answer])])
            .collect()
    }

    /// A `write_file` call `id` writing its own id into `path`.
    pub fn write_file_call(id: &str, path: &str) -> Reply {
        tool_call(
            id,
            "write_file",
            &[&json!({"path": path, "content": id}).to_string()],
        )
    }

    /// A turn in which the model writes `note.md` (`written\n`, tool call
    /// `w1`), then answers `done`.
    pub fn write_note_turn() -> [Reply; 2] {
        [
            tool_call(
                "w1",
                "write_file",
                &[r#"{"path": "note.md", "content": "written\n"}"#],
            ),
            text(&["done"]),
        ]
    }

    /// An OpenAI-style error body.
    pub fn error(status: u16, message: &str, code: Option<&str>) -> Reply {
        Reply::json(
            status,
            json!({"error": {"message": message, "type": "invalid_request_error", "code": code}}),
        )
    }
}

/// Scripts in the Anthropic `/v1/messages` streaming format.
pub mod anthropic {
    use super::{Reply, Step};
    use serde_json::{Value, json};

    fn ev(v: Value) -> Step {
        let name = v["type"].as_str().unwrap_or("message").to_string();
        Step::event(&name, v)
    }

    pub fn message_start(input_tokens: u64) -> Step {
        ev(json!({"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "scripted",
            "content": [], "stop_reason": null,
            "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}))
    }
    pub fn text_start(index: u64) -> Step {
        ev(
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        )
    }
    pub fn text_delta(index: u64, t: &str) -> Step {
        ev(
            json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
        )
    }
    pub fn tool_start(index: u64, id: &str, name: &str) -> Step {
        ev(json!({"type": "content_block_start", "index": index,
                  "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}))
    }
    pub fn json_delta(index: u64, piece: &str) -> Step {
        ev(json!({"type": "content_block_delta", "index": index,
                  "delta": {"type": "input_json_delta", "partial_json": piece}}))
    }
    pub fn block_stop(index: u64) -> Step {
        ev(json!({"type": "content_block_stop", "index": index}))
    }
    pub fn message_delta(stop_reason: &str, output_tokens: u64) -> Step {
        ev(
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                  "usage": {"output_tokens": output_tokens}}),
        )
    }
    pub fn message_stop() -> Step {
        ev(json!({"type": "message_stop"}))
    }
    pub fn ping() -> Step {
        ev(json!({"type": "ping"}))
    }
    /// An `error` event (e.g. `overloaded_error`).
    pub fn error_event(kind: &str, message: &str) -> Step {
        ev(json!({"type": "error", "error": {"type": kind, "message": message}}))
    }

    /// The steps of a streamed text answer (input 10 tokens, output = pieces).
    pub fn text_steps(pieces: &[&str]) -> Vec<Step> {
        let mut s = vec![message_start(10), text_start(0), ping()];
        for p in pieces {
            s.push(text_delta(0, p));
        }
        s.push(block_stop(0));
        s.push(message_delta("end_turn", pieces.len() as u64));
        s.push(message_stop());
        s
    }

    pub fn text(pieces: &[&str]) -> Reply {
        Reply::sse(text_steps(pieces))
    }

    /// The steps of an answer that calls one tool, arguments in `arg_pieces`.
    pub fn tool_use_steps(id: &str, name: &str, arg_pieces: &[&str]) -> Vec<Step> {
        let mut s = vec![message_start(20), tool_start(0, id, name)];
        for p in arg_pieces {
            s.push(json_delta(0, p));
        }
        s.push(block_stop(0));
        s.push(message_delta("tool_use", 7));
        s.push(message_stop());
        s
    }

    pub fn tool_use(id: &str, name: &str, arg_pieces: &[&str]) -> Reply {
        Reply::sse(tool_use_steps(id, name, arg_pieces))
    }

    /// An Anthropic error body.
    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"type": "error", "error": {"type": kind, "message": message}}),
        )
    }
}

/// The text of each tool result (`role: tool` message) in an OpenAI-style
/// request, in order; panics on one without text content.
pub fn tool_contents(request: &Value) -> Vec<&str> {
    request["messages"]
        .as_array()
        .expect("the request has messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            m["content"]
                .as_str()
                .unwrap_or_else(|| panic!("a tool result without text: {m}"))
        })
        .collect()
}
