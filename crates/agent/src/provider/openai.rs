//! OpenAI-compatible `/v1/chat/completions` with `stream: true` (OpenAI, llama.cpp's
//! server, Ollama, vLLM): the request body, and the assembly of streamed chunks —
//! text deltas forwarded as they arrive, `delta.tool_calls` fragments (index, id,
//! name, argument pieces) joined into whole calls, usage, finish reason, `[DONE]`.
//!
//! Data lines that are not JSON are skipped with a warning (a proxy's garbage
//! must not kill an answer); if nothing valid arrives at all the attempt fails.
//! Tool arguments are passed through as raw text, valid JSON or not.
//!
//! Invariant: no I/O here except through `http::stream`; no unwrap on network input.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedSender;

use super::http::{self, Flow, StreamHandler, error_message, shorten};
use super::sse::SseEvent;
use super::{AttemptError, Profile, is_context_overflow_text};
use crate::message::{
    ChatRequest, ChatResponse, Message, Role, StopReason, StreamDelta, ToolCall, Usage,
};

/// The JSON body for a streamed chat completion.
pub fn request_body(model: &str, req: &ChatRequest) -> Value {
    let mut messages = Vec::with_capacity(req.messages.len() + 1);
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    messages.extend(req.messages.iter().map(message_json));
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if req.max_tokens > 0 {
        body["max_tokens"] = json!(req.max_tokens);
    }
    if !req.tools.is_empty() {
        body["tools"] = Value::Array(
            req.tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters,
                    }})
                })
                .collect(),
        );
    }
    body
}

fn message_json(m: &Message) -> Value {
    match m.role {
        Role::System => json!({"role": "system", "content": m.content}),
        Role::User => json!({"role": "user", "content": m.content}),
        Role::Assistant => {
            let mut v = json!({"role": "assistant", "content": m.content});
            if !m.tool_calls.is_empty() {
                if m.content.is_empty() {
                    v["content"] = Value::Null;
                }
                v["tool_calls"] = Value::Array(
                    m.tool_calls
                        .iter()
                        .map(|c| {
                            json!({"id": c.id, "type": "function",
                                   "function": {"name": c.name, "arguments": c.arguments}})
                        })
                        .collect(),
                );
            }
            v
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
    }
}

pub(crate) async fn complete(
    client: &reqwest::Client,
    profile: &Profile,
    req: &ChatRequest,
    limits: http::Limits,
    deltas: &UnboundedSender<StreamDelta>,
) -> Result<ChatResponse, AttemptError> {
    let mut headers = Vec::new();
    if let Some(k) = &profile.api_key {
        headers.push(("authorization", format!("Bearer {k}")));
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
        OpenAiStream::default(),
        &profile.model,
        deltas,
    )
    .await
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Assembles one streamed completion.
#[derive(Debug, Default)]
pub(crate) struct OpenAiStream {
    text: String,
    calls: Vec<(u64, PartialCall)>,
    usage: Option<Usage>,
    finish: Option<String>,
    done: bool,
    valid_events: usize,
    skipped: usize,
}

impl OpenAiStream {
    fn call_slot(&mut self, index: Option<u64>, id: Option<&str>) -> &mut PartialCall {
        let index = match index {
            Some(i) => i,
            // No index (some servers): a new id starts a new call, else continue the last.
            None => match (id, self.calls.last()) {
                (Some(id), Some((i, last))) if last.id == id || last.id.is_empty() => *i,
                (None, Some((i, _))) => *i,
                _ => self.calls.len() as u64,
            },
        };
        let pos = match self.calls.iter().position(|(i, _)| *i == index) {
            Some(p) => p,
            None => {
                self.calls.push((index, PartialCall::default()));
                self.calls.len() - 1
            }
        };
        &mut self.calls[pos].1
    }
}

impl StreamHandler for OpenAiStream {
    fn on_event(
        &mut self,
        ev: &SseEvent,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<Flow, AttemptError> {
        let data = ev.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(Flow::Done);
        }
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
        self.valid_events += 1;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(err));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
            self.usage = Some(Usage {
                input_tokens: n("prompt_tokens"),
                output_tokens: n("completion_tokens"),
            });
        }
        let choices = v.get("choices").and_then(Value::as_array);
        for choice in choices.into_iter().flatten() {
            // Only the first choice is used (we never ask for n > 1).
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            let delta = choice.get("delta").or_else(|| choice.get("message"));
            if let Some(delta) = delta {
                if let Some(t) = delta.get("content").and_then(Value::as_str)
                    && !t.is_empty()
                {
                    self.text.push_str(t);
                    let _ = deltas.send(StreamDelta::Text(t.to_string()));
                }
                for tc in delta
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let id = tc
                        .get("id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty());
                    let f = tc.get("function");
                    let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                    let args = f.and_then(|f| f.get("arguments"));
                    let slot = self.call_slot(tc.get("index").and_then(Value::as_u64), id);
                    if let Some(id) = id
                        && slot.id.is_empty()
                    {
                        slot.id = id.to_string();
                    }
                    if let Some(n) = name
                        && !n.is_empty()
                    {
                        if slot.name.is_empty() || slot.name == n {
                            slot.name = n.to_string();
                        } else {
                            // Some servers stream the name in pieces.
                            slot.name.push_str(n);
                        }
                    }
                    match args {
                        Some(Value::String(s)) => slot.arguments.push_str(s),
                        // A server that sends the arguments as an object, not text.
                        Some(v @ Value::Object(_)) => slot.arguments.push_str(&v.to_string()),
                        _ => {}
                    }
                }
            }
            if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(f.to_string());
            }
        }
        Ok(Flow::Continue)
    }

    fn finish(
        self,
        model: &str,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<ChatResponse, AttemptError> {
        if self.valid_events == 0 {
            return Err(AttemptError::Stream {
                message: if self.skipped > 0 {
                    format!("no valid event in the stream ({} malformed)", self.skipped)
                } else {
                    "the stream ended without any event".to_string()
                },
                retryable: true,
            });
        }
        if !self.done && self.finish.is_none() {
            return Err(AttemptError::Stream {
                message: "the stream ended before the answer was complete".into(),
                retryable: true,
            });
        }
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, c))| ToolCall {
                id: if c.id.is_empty() {
                    format!("call_{n}")
                } else {
                    c.id
                },
                name: c.name,
                arguments: c.arguments,
            })
            .collect();
        for c in &tool_calls {
            let _ = deltas.send(StreamDelta::ToolCall(c.clone()));
        }
        let stop = match self.finish.as_deref() {
            _ if !tool_calls.is_empty() => Some(StopReason::ToolUse),
            Some("stop") | Some("eos") => Some(StopReason::EndTurn),
            Some("tool_calls") | Some("function_call") => Some(StopReason::ToolUse),
            Some("length") => Some(StopReason::MaxTokens),
            Some(_) => Some(StopReason::Other),
            None => Some(StopReason::EndTurn),
        };
        Ok(ChatResponse {
            text: self.text,
            tool_calls,
            usage: self.usage.unwrap_or_default(),
            stop,
            model: model.to_string(),
        })
    }

    fn classify_status(status: u16, retry_after: Option<Duration>, body: &str) -> AttemptError {
        let message = error_message(body);
        let code_or_type = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| {
                let e = v.get("error")?;
                Some(format!(
                    "{} {}",
                    e.get("code").map(|c| c.to_string()).unwrap_or_default(),
                    e.get("type").and_then(Value::as_str).unwrap_or_default()
                ))
            })
            .unwrap_or_default();
        if matches!(status, 400 | 413 | 422)
            && (is_context_overflow_text(&code_or_type) || is_context_overflow_text(&message))
        {
            return AttemptError::ContextOverflow(message);
        }
        AttemptError::Http {
            status,
            message,
            retry_after,
        }
    }
}

/// An `{"error": ...}` object inside the stream.
fn stream_error(err: &Value) -> AttemptError {
    let text = err.to_string();
    let message = err
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| err.as_str().map(str::to_string))
        .unwrap_or_else(|| shorten(&text, 500));
    if is_context_overflow_text(&text) {
        return AttemptError::ContextOverflow(message);
    }
    let t = text.to_ascii_lowercase();
    let status = err
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok());
    match status {
        Some(s @ 400..=599) => AttemptError::Http {
            status: s,
            message,
            retry_after: None,
        },
        _ => AttemptError::Stream {
            retryable: [
                "overload",
                "rate_limit",
                "rate limit",
                "server_error",
                "internal",
                "unavailable",
            ]
            .iter()
            .any(|p| t.contains(p)),
            message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use tokio::sync::mpsc::unbounded_channel;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            data: data.to_string(),
            ..Default::default()
        }
    }

    fn run(events: &[&str]) -> (Result<ChatResponse, AttemptError>, Vec<StreamDelta>) {
        let (tx, mut rx) = unbounded_channel();
        let mut s = OpenAiStream::default();
        let mut res = None;
        for e in events {
            match s.on_event(&ev(e), &tx) {
                Ok(Flow::Done) => break,
                Ok(Flow::Continue) => {}
                Err(e) => {
                    res = Some(Err(e));
                    break;
                }
            }
        }
        let res = res.unwrap_or_else(|| s.finish("m", &tx));
        drop(tx);
        let mut out = Vec::new();
        while let Ok(d) = rx.try_recv() {
            out.push(d);
        }
        (res, out)
    }

    #[test]
    fn text_and_usage() {
        let (r, d) = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#,
            "[DONE]",
        ]);
        let r = r.unwrap();
        assert_eq!(r.text, "Hello");
        assert_eq!(
            d,
            [
                StreamDelta::Text("Hel".into()),
                StreamDelta::Text("lo".into())
            ]
        );
        assert_eq!(r.usage.input_tokens, 12);
        assert_eq!(r.usage.output_tokens, 3);
        assert_eq!(r.stop, Some(StopReason::EndTurn));
        assert_eq!(r.model, "m");
    }

    #[test]
    fn tool_calls_assembled_by_index() {
        let (r, d) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"read_file","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"c2","function":{"name":"exec","arguments":"{\"cmd\""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"path\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"a.md\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":":\"ls\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        let r = r.unwrap();
        assert_eq!(r.stop, Some(StopReason::ToolUse));
        assert_eq!(
            r.tool_calls,
            [
                ToolCall {
                    id: "c1".into(),
                    name: "read_file".into(),
                    arguments: r#"{"path":"a.md"}"#.into()
                },
                ToolCall {
                    id: "c2".into(),
                    name: "exec".into(),
                    arguments: r#"{"cmd":"ls"}"#.into()
                },
            ]
        );
        assert_eq!(d.len(), 2);
        assert!(matches!(&d[0], StreamDelta::ToolCall(c) if c.id == "c1"));
    }

    #[test]
    fn tool_call_without_index_or_id() {
        let (r, _) = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"name":"list_dir","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        let r = r.unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.tool_calls[0].name, "list_dir");
    }

    #[test]
    fn invalid_arguments_pass_through() {
        let (r, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"x","arguments":"{not json"}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(r.unwrap().tool_calls[0].arguments, "{not json");
    }

    #[test]
    fn finish_reasons() {
        let f = |reason: &str| {
            let chunk = format!(
                r#"{{"choices":[{{"index":0,"delta":{{"content":"x"}},"finish_reason":"{reason}"}}]}}"#
            );
            run(&[&chunk]).0.unwrap().stop
        };
        assert_eq!(f("stop"), Some(StopReason::EndTurn));
        assert_eq!(f("length"), Some(StopReason::MaxTokens));
        assert_eq!(f("content_filter"), Some(StopReason::Other));
    }

    #[test]
    fn malformed_data_is_skipped_but_not_all() {
        let (r, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#,
            "{oops",
            r#"{"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}"#,
        ]);
        assert_eq!(r.unwrap().text, "ab");
        let (r, _) = run(&["{oops", "nope"]);
        assert!(
            matches!(r, Err(AttemptError::Stream { ref message, .. }) if message.contains("2 malformed")),
            "{r:?}"
        );
    }

    /// Whether `r` is a stream error worth retrying.
    fn retryable_stream_error<T>(r: &Result<T, AttemptError>) -> bool {
        matches!(
            r,
            Err(AttemptError::Stream {
                retryable: true,
                ..
            })
        )
    }

    #[test]
    fn truncated_stream_is_retryable_error() {
        let (r, _) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"a"}}]}"#]);
        assert!(retryable_stream_error(&r));
    }

    #[test]
    fn error_in_stream() {
        let (r, _) = run(&[r#"{"error":{"message":"boom","type":"server_error"}}"#]);
        assert!(retryable_stream_error(&r));
        let (r, _) = run(&[
            r#"{"error":{"code":400,"message":"the request exceeds the available context size","type":"exceed_context_size_error"}}"#,
        ]);
        assert!(matches!(r, Err(AttemptError::ContextOverflow(_))));
    }

    #[test]
    fn status_classification() {
        let c = |status, body: &str| OpenAiStream::classify_status(status, None, body);
        assert!(matches!(
            c(
                400,
                r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#
            ),
            AttemptError::ContextOverflow(_)
        ));
        assert!(matches!(
            c(
                400,
                r#"{"error":{"code":400,"message":"request (5000 tokens) exceeds the available context size (4096 tokens)","type":"exceed_context_size_error"}}"#
            ),
            AttemptError::ContextOverflow(_)
        ));
        match c(401, r#"{"error":{"message":"Incorrect API key"}}"#) {
            AttemptError::Http {
                status, message, ..
            } => {
                assert_eq!(status, 401);
                assert_eq!(message, "Incorrect API key");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            c(400, "bad request"),
            AttemptError::Http { status: 400, .. }
        ));
    }

    #[test]
    fn body_shape() {
        let now = Utc::now();
        let call = ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let req = ChatRequest {
            system: "be brief".into(),
            messages: vec![
                Message::user("hi", now),
                Message::assistant("", vec![call.clone()], now),
                Message::tool_result(&call, "contents", false, now),
            ],
            tools: vec![crate::message::ToolSpec {
                name: "read_file".into(),
                description: "read".into(),
                parameters: json!({"type": "object"}),
            }],
            max_tokens: 100,
        };
        let b = request_body("gpt", &req);
        assert_eq!(b["model"], "gpt");
        assert_eq!(b["stream"], true);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["max_tokens"], 100);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(m[1], json!({"role": "user", "content": "hi"}));
        assert_eq!(m[2]["content"], Value::Null);
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "contents"})
        );
        assert_eq!(b["tools"][0]["function"]["name"], "read_file");
    }
}
