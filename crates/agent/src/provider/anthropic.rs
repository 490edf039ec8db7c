//! Anthropic `/v1/messages` with `stream: true`: the request body (system prompt
//! apart, `tool_use` / `tool_result` content blocks, strict user/assistant
//! alternation) and the assembly of the event stream: `message_start`,
//! `content_block_start`, `content_block_delta` (`text_delta`, `input_json_delta`),
//! `content_block_stop`, `message_delta` (stop reason, usage), `message_stop`,
//! `ping`, `error`.
//!
//! Data that is not JSON is skipped with a warning, as in `openai.rs`; unknown
//! event and block types (thinking, citations, ...) are ignored.
//!
//! Invariant: no I/O here except through `http::stream`; no unwrap on network input.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::http::{self, Flow, StreamHandler, error_message, shorten};
use super::sse::SseEvent;
use super::{AttemptError, Profile, is_context_overflow_text};
use crate::message::{ChatRequest, ChatResponse, Role, StopReason, StreamDelta, ToolCall, Usage};

/// The API version header value.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";
/// `max_tokens` is mandatory for this API: used when the request says 0.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// The JSON body for a streamed message.
pub fn request_body(model: &str, req: &ChatRequest) -> Value {
    let mut system = req.system.clone();
    // (role, content blocks); consecutive same-role messages are merged.
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let (role, blocks): (&'static str, Vec<Value>) = match m.role {
            Role::System => {
                // History system notes (e.g. a compaction summary) join the system prompt.
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(&m.content);
                continue;
            }
            Role::User => ("user", vec![json!({"type": "text", "text": m.content})]),
            Role::Tool => {
                let mut b = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                });
                if m.is_error {
                    b["is_error"] = json!(true);
                }
                ("user", vec![b])
            }
            Role::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    blocks.push(json!({
                        "type": "tool_use", "id": c.id, "name": c.name,
                        "input": tool_input(&c.arguments),
                    }));
                }
                ("assistant", blocks)
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let mut body = json!({
        "model": model,
        "max_tokens": if req.max_tokens > 0 { req.max_tokens } else { DEFAULT_MAX_TOKENS },
        "messages": messages,
        "stream": true,
    });
    if !system.is_empty() {
        body["system"] = json!(system);
    }
    if !req.tools.is_empty() {
        body["tools"] = Value::Array(
            req.tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect(),
        );
    }
    body
}

/// `tool_use.input` must be an object: raw arguments that are not a JSON object
/// (the model produced invalid JSON) are sent back wrapped so the model sees them.
fn tool_input(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({ "invalid_arguments": raw }),
    }
}

pub(crate) async fn complete(
    client: &reqwest::Client,
    profile: &Profile,
    req: &ChatRequest,
    limits: http::Limits,
    deltas: &UnboundedSender<StreamDelta>,
) -> Result<ChatResponse, AttemptError> {
    let mut headers = vec![("anthropic-version", ANTHROPIC_VERSION.to_string())];
    if let Some(k) = &profile.api_key {
        headers.push(("x-api-key", k.clone()));
    }
    let post = http::Post {
        url: profile.endpoint(),
        headers,
        body: request_body(&profile.model, req),
    };
    http::stream(
        client,
        post,
        limits,
        AnthropicStream::default(),
        &profile.model,
        deltas,
    )
    .await
}

#[derive(Debug)]
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        json: String,
        /// `input` given whole in `content_block_start` (used if no deltas follow).
        initial: Option<Value>,
    },
    Other,
}

/// Assembles one streamed message.
#[derive(Debug, Default)]
pub(crate) struct AnthropicStream {
    text: String,
    blocks: Vec<(u64, Block)>,
    tool_calls: Vec<ToolCall>,
    usage: Usage,
    stop: Option<String>,
    started: bool,
    stopped: bool,
    skipped: usize,
}

impl AnthropicStream {
    fn block(&mut self, index: u64) -> Option<&mut Block> {
        self.blocks
            .iter_mut()
            .find(|(i, _)| *i == index)
            .map(|(_, b)| b)
    }

    fn close_block(&mut self, index: u64, deltas: &UnboundedSender<StreamDelta>) {
        let Some(pos) = self.blocks.iter().position(|(i, _)| *i == index) else {
            return;
        };
        let (_, block) = self.blocks.remove(pos);
        if let Block::ToolUse {
            id,
            name,
            json,
            initial,
        } = block
        {
            let arguments = if !json.is_empty() {
                json
            } else {
                match initial {
                    Some(v) if v.as_object().is_some_and(|o| !o.is_empty()) => v.to_string(),
                    _ => "{}".to_string(),
                }
            };
            let call = ToolCall {
                id,
                name,
                arguments,
            };
            let _ = deltas.send(StreamDelta::ToolCall(call.clone()));
            self.tool_calls.push(call);
        }
    }
}

impl StreamHandler for AnthropicStream {
    fn on_event(
        &mut self,
        ev: &SseEvent,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<Flow, AttemptError> {
        let data = ev.data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let v: Value = match serde_json::from_str(data) {
            Ok(v) => v,
            Err(e) => {
                self.skipped += 1;
                tracing::warn!(error = %e, data = %shorten(data, 200), "skipping malformed SSE data line");
                return Ok(Flow::Continue);
            }
        };
        let kind = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or("");
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let num = |v: Option<&Value>, k: &str| v.and_then(|u| u.get(k)).and_then(Value::as_u64);
        match kind {
            "message_start" => {
                self.started = true;
                let u = v.get("message").and_then(|m| m.get("usage"));
                self.usage.input_tokens = num(u, "input_tokens").unwrap_or(0)
                    + num(u, "cache_creation_input_tokens").unwrap_or(0)
                    + num(u, "cache_read_input_tokens").unwrap_or(0);
                self.usage.output_tokens = num(u, "output_tokens").unwrap_or(0);
            }
            "content_block_start" => {
                self.started = true;
                let cb = v.get("content_block");
                let ty = cb.and_then(|b| b.get("type")).and_then(Value::as_str);
                let s = |k: &str| {
                    cb.and_then(|b| b.get(k))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string()
                };
                let block = match ty {
                    Some("text") => {
                        let t = s("text");
                        if !t.is_empty() {
                            self.text.push_str(&t);
                            let _ = deltas.send(StreamDelta::Text(t));
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: s("id"),
                        name: s("name"),
                        json: String::new(),
                        initial: cb.and_then(|b| b.get("input")).cloned(),
                    },
                    _ => Block::Other,
                };
                self.blocks.push((index, block));
            }
            "content_block_delta" => {
                let d = v.get("delta");
                let dt = d.and_then(|d| d.get("type")).and_then(Value::as_str);
                let piece = |k: &str| d.and_then(|d| d.get(k)).and_then(Value::as_str);
                match (dt, self.block(index)) {
                    (Some("text_delta"), _) => {
                        if let Some(t) = piece("text")
                            && !t.is_empty()
                        {
                            self.text.push_str(t);
                            let _ = deltas.send(StreamDelta::Text(t.to_string()));
                        }
                    }
                    (Some("input_json_delta"), Some(Block::ToolUse { json, .. })) => {
                        json.push_str(piece("partial_json").unwrap_or(""));
                    }
                    _ => {} // thinking, signatures, citations: not shown
                }
            }
            "content_block_stop" => self.close_block(index, deltas),
            "message_delta" => {
                if let Some(r) = v
                    .get("delta")
                    .and_then(|d| d.get("stop_reason"))
                    .and_then(Value::as_str)
                {
                    self.stop = Some(r.to_string());
                }
                let u = v.get("usage");
                if let Some(o) = num(u, "output_tokens") {
                    self.usage.output_tokens = o;
                }
                if let Some(i) = num(u, "input_tokens").filter(|i| *i > 0) {
                    self.usage.input_tokens = i
                        + num(u, "cache_creation_input_tokens").unwrap_or(0)
                        + num(u, "cache_read_input_tokens").unwrap_or(0);
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Done);
            }
            "error" => return Err(stream_error(v.get("error").unwrap_or(&v))),
            // A whole, non-streamed message (a server that ignored `stream: true`).
            "message" => {
                self.started = true;
                self.stopped = true;
                for b in v
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => {
                            let t = s("text");
                            self.text.push_str(&t);
                            let _ = deltas.send(StreamDelta::Text(t));
                        }
                        Some("tool_use") => {
                            let call = ToolCall {
                                id: s("id"),
                                name: s("name"),
                                arguments: b.get("input").map_or("{}".into(), Value::to_string),
                            };
                            let _ = deltas.send(StreamDelta::ToolCall(call.clone()));
                            self.tool_calls.push(call);
                        }
                        _ => {}
                    }
                }
                self.stop = v
                    .get("stop_reason")
                    .and_then(Value::as_str)
                    .map(String::from);
                let u = v.get("usage");
                self.usage = Usage {
                    input_tokens: num(u, "input_tokens").unwrap_or(0),
                    output_tokens: num(u, "output_tokens").unwrap_or(0),
                };
                return Ok(Flow::Done);
            }
            _ => {} // ping and future event types
        }
        Ok(Flow::Continue)
    }

    fn finish(
        mut self,
        model: &str,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<ChatResponse, AttemptError> {
        if !self.started {
            return Err(AttemptError::Stream {
                message: if self.skipped > 0 {
                    format!("no valid event in the stream ({} malformed)", self.skipped)
                } else {
                    "the stream ended without any event".to_string()
                },
                retryable: true,
            });
        }
        if !self.stopped && self.stop.is_none() {
            return Err(AttemptError::Stream {
                message: "the stream ended before the answer was complete".into(),
                retryable: true,
            });
        }
        // Blocks never closed (a sloppy server): close them in order.
        let open: Vec<u64> = self.blocks.iter().map(|(i, _)| *i).collect();
        for i in open {
            self.close_block(i, deltas);
        }
        let stop = Some(match self.stop.as_deref() {
            Some("end_turn") | Some("stop_sequence") => StopReason::EndTurn,
            Some("tool_use") => StopReason::ToolUse,
            Some("max_tokens") => StopReason::MaxTokens,
            _ if !self.tool_calls.is_empty() => StopReason::ToolUse,
            _ => StopReason::Other,
        });
        Ok(ChatResponse {
            text: self.text,
            tool_calls: self.tool_calls,
            usage: self.usage,
            stop,
            model: model.to_string(),
        })
    }

    fn classify_status(status: u16, retry_after: Option<Duration>, body: &str) -> AttemptError {
        let message = error_message(body);
        if status == 413 || (status == 400 && is_context_overflow_text(&message)) {
            return AttemptError::ContextOverflow(message);
        }
        AttemptError::Http {
            status,
            message,
            retry_after,
        }
    }
}

/// An `error` event: `{"type": "overloaded_error", "message": ...}`.
fn stream_error(err: &Value) -> AttemptError {
    let ty = err.get("type").and_then(Value::as_str).unwrap_or("");
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| shorten(&err.to_string(), 500));
    let full = format!("{ty}: {message}");
    let status = match ty {
        "invalid_request_error" if is_context_overflow_text(&message) => {
            return AttemptError::ContextOverflow(message);
        }
        "request_too_large" => return AttemptError::ContextOverflow(message),
        "authentication_error" => 401,
        "permission_error" => 403,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        "api_error" => 500,
        "timeout_error" => 504,
        _ => {
            return AttemptError::Stream {
                message: full,
                retryable: false,
            };
        }
    };
    AttemptError::Http {
        status,
        message: full,
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use chrono::Utc;
    use tokio::sync::mpsc::unbounded_channel;

    fn run(events: &[Value]) -> (Result<ChatResponse, AttemptError>, Vec<StreamDelta>) {
        let (tx, mut rx) = unbounded_channel();
        let mut s = AnthropicStream::default();
        let mut res = None;
        for e in events {
            let ev = SseEvent {
                event: e["type"].as_str().map(String::from),
                data: e.to_string(),
                id: None,
            };
            match s.on_event(&ev, &tx) {
                Ok(Flow::Done) => break,
                Ok(Flow::Continue) => {}
                Err(e) => {
                    res = Some(Err(e));
                    break;
                }
            }
        }
        let res = res.unwrap_or_else(|| s.finish("claude", &tx));
        drop(tx);
        let mut out = Vec::new();
        while let Ok(d) = rx.try_recv() {
            out.push(d);
        }
        (res, out)
    }

    fn start() -> Value {
        json!({"type":"message_start","message":{"id":"m1","usage":{"input_tokens":25,"output_tokens":1}}})
    }

    #[test]
    fn text_tool_use_usage() {
        let (r, d) = run(&[
            start(),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"ping"}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me "}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"look."}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"read_file","input":{}}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"path\": \"a"}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":".md\"}"}}),
            json!({"type":"content_block_stop","index":1}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}),
            json!({"type":"message_stop"}),
        ]);
        let r = r.unwrap();
        assert_eq!(r.text, "Let me look.");
        assert_eq!(
            r.tool_calls,
            [ToolCall {
                id: "toolu_1".into(),
                name: "read_file".into(),
                arguments: "{\"path\": \"a.md\"}".into()
            }]
        );
        assert_eq!(r.stop, Some(StopReason::ToolUse));
        assert_eq!(
            r.usage,
            Usage {
                input_tokens: 25,
                output_tokens: 42
            }
        );
        assert_eq!(d.len(), 3);
        assert_eq!(d[0], StreamDelta::Text("Let me ".into()));
        assert!(matches!(&d[2], StreamDelta::ToolCall(c) if c.name == "read_file"));
    }

    #[test]
    fn tool_use_without_deltas_uses_empty_object() {
        let (r, _) = run(&[
            start(),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"list_dir","input":{}}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":5}}),
            json!({"type":"message_stop"}),
        ]);
        assert_eq!(r.unwrap().tool_calls[0].arguments, "{}");
    }

    #[test]
    fn error_events() {
        let (r, _) = run(&[
            start(),
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        ]);
        assert!(
            matches!(r, Err(AttemptError::Http { status: 529, .. })),
            "{r:?}"
        );
        let (r, _) = run(&[
            json!({"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 250000 tokens > 200000 maximum"}}),
        ]);
        assert!(matches!(r, Err(AttemptError::ContextOverflow(_))));
    }

    #[test]
    fn truncated_stream_is_retryable() {
        let (r, _) = run(&[
            start(),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ]);
        assert!(matches!(
            r,
            Err(AttemptError::Stream {
                retryable: true,
                ..
            })
        ));
    }

    #[test]
    fn status_classification() {
        let overflow = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert!(matches!(
            AnthropicStream::classify_status(400, None, overflow),
            AttemptError::ContextOverflow(m) if m.starts_with("prompt is too long")
        ));
        let auth = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        assert!(matches!(
            AnthropicStream::classify_status(401, None, auth),
            AttemptError::Http { status: 401, message, .. } if message == "invalid x-api-key"
        ));
    }

    #[test]
    fn body_shape() {
        let now = Utc::now();
        let c1 = ToolCall {
            id: "t1".into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let c2 = ToolCall {
            id: "t2".into(),
            name: "exec".into(),
            arguments: "{broken".into(),
        };
        let req = ChatRequest {
            system: "sys".into(),
            messages: vec![
                Message::user("hi", now),
                Message::assistant("checking", vec![c1.clone(), c2.clone()], now),
                Message::tool_result(&c1, "body", false, now),
                Message::tool_result(&c2, "bad json", true, now),
                Message::system("summary of earlier turns", now),
                Message::user("and?", now),
            ],
            tools: vec![],
            max_tokens: 0,
        };
        let b = request_body("claude", &req);
        assert_eq!(b["system"], "sys\n\nsummary of earlier turns");
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3, "{m:#?}");
        assert_eq!(m[0]["role"], "user");
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["content"][1]["type"], "tool_use");
        assert_eq!(m[1]["content"][1]["input"], json!({"path": "a"}));
        assert_eq!(
            m[1]["content"][2]["input"],
            json!({"invalid_arguments": "{broken"})
        );
        assert_eq!(m[2]["role"], "user");
        let c = m[2]["content"].as_array().unwrap();
        assert_eq!(c[0]["type"], "tool_result");
        assert_eq!(c[0]["tool_use_id"], "t1");
        assert_eq!(c[1]["is_error"], true);
        assert_eq!(c[2], json!({"type": "text", "text": "and?"}));
    }
}
