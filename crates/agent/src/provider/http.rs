//! One streaming HTTP attempt: POST a JSON body, map an error status to an
//! [`AttemptError`], feed the `text/event-stream` body through the SSE parser into
//! an API-specific [`StreamHandler`], with a time limit on the response headers and
//! on the gap between chunks. Cancellation is handled by the caller dropping this future.
//!
//! Invariant: never panics or unwraps on network input; error bodies are capped.

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc::UnboundedSender;

use super::sse::{SseEvent, SseParser};
use super::{AttemptError, failover::parse_retry_after};
use crate::message::{ChatResponse, StreamDelta};

/// Largest error body kept for the message.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Largest non-streamed JSON answer accepted.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

/// What a handler wants after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// The response is complete (`[DONE]`, `message_stop`): stop reading.
    Done,
}

/// API-specific assembly of a streamed answer. Pure: unit-tested without a network.
pub(crate) trait StreamHandler {
    fn on_event(
        &mut self,
        ev: &SseEvent,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<Flow, AttemptError>;
    /// The stream ended (after `Done`, or at end of body).
    fn finish(
        self,
        model: &str,
        deltas: &UnboundedSender<StreamDelta>,
    ) -> Result<ChatResponse, AttemptError>;
    /// Turn an error status + body into an attempt error.
    fn classify_status(status: u16, retry_after: Option<Duration>, body: &str) -> AttemptError;
}

/// Time limits of one attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub response_timeout: Duration,
    pub idle_timeout: Duration,
}

/// One POST to make.
pub(crate) struct Post {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: serde_json::Value,
}

pub(crate) async fn stream<H: StreamHandler>(
    client: &reqwest::Client,
    post: Post,
    limits: Limits,
    mut handler: H,
    model: &str,
    deltas: &UnboundedSender<StreamDelta>,
) -> Result<ChatResponse, AttemptError> {
    let mut rb = client
        .post(&post.url)
        .header("accept", "text/event-stream")
        .json(&post.body);
    for (k, v) in &post.headers {
        rb = rb.header(*k, v);
    }
    let resp = match tokio::time::timeout(limits.response_timeout, rb.send()).await {
        Err(_) => {
            return Err(AttemptError::Timeout(format!(
                "waiting {:?} for the response",
                limits.response_timeout
            )));
        }
        Ok(Err(e)) => return Err(network_error(&e)),
        Ok(Ok(r)) => r,
    };
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        let retry_after = retry_after(resp.headers());
        let body = read_capped(resp, limits.idle_timeout).await;
        return Err(H::classify_status(status, retry_after, &body));
    }
    let is_json = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"));
    if is_json {
        // A server that ignored `stream: true` and sent the whole answer at once:
        // handled as a single event carrying the complete JSON body.
        let body = read_limited(resp, limits.idle_timeout, MAX_JSON_BODY).await?;
        let ev = SseEvent {
            data: body,
            ..Default::default()
        };
        handler.on_event(&ev, deltas)?;
        return handler.finish(model, deltas);
    }
    let mut parser = SseParser::new();
    let mut chunks = resp.bytes_stream();
    loop {
        let next = match tokio::time::timeout(limits.idle_timeout, chunks.next()).await {
            Err(_) => {
                return Err(AttemptError::Timeout(format!(
                    "after {:?} without data from the stream",
                    limits.idle_timeout
                )));
            }
            Ok(n) => n,
        };
        let at_end = next.is_none();
        let events: Vec<SseEvent> = match next {
            Some(Ok(bytes)) => parser.feed(&bytes).map_err(|e| AttemptError::Stream {
                message: e.to_string(),
                retryable: false,
            })?,
            Some(Err(e)) => {
                return Err(AttemptError::Stream {
                    message: format!(
                        "connection broke mid-stream: {}",
                        claw_base::error::chain(&e)
                    ),
                    retryable: true,
                });
            }
            None => parser.finish().into_iter().collect(),
        };
        let done = feed_events(&events, &mut handler, deltas)?;
        if done || at_end {
            return handler.finish(model, deltas);
        }
    }
}

fn feed_events<H: StreamHandler>(
    events: &[SseEvent],
    handler: &mut H,
    deltas: &UnboundedSender<StreamDelta>,
) -> Result<bool, AttemptError> {
    for ev in events {
        if handler.on_event(ev, deltas)? == Flow::Done {
            return Ok(true);
        }
    }
    Ok(false)
}

/// `retry-after-ms` (OpenAI) or `retry-after` (seconds or HTTP date).
fn retry_after(h: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = h
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v >= 0.0)
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let v = h.get("retry-after")?.to_str().ok()?;
    parse_retry_after(v, claw_base::Clock::System.system_time())
}

async fn read_capped(resp: reqwest::Response, limit: Duration) -> String {
    let mut out = Vec::new();
    let mut chunks = resp.bytes_stream();
    while let Ok(Some(Ok(b))) = tokio::time::timeout(limit, chunks.next()).await {
        out.extend_from_slice(&b);
        if out.len() >= MAX_ERROR_BODY {
            out.truncate(MAX_ERROR_BODY);
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn read_limited(
    resp: reqwest::Response,
    idle: Duration,
    max: usize,
) -> Result<String, AttemptError> {
    let mut out = Vec::new();
    let mut chunks = resp.bytes_stream();
    loop {
        match tokio::time::timeout(idle, chunks.next()).await {
            Err(_) => {
                return Err(AttemptError::Timeout(format!(
                    "after {idle:?} without data from the response body"
                )));
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(AttemptError::Stream {
                    message: format!(
                        "connection broke while reading the body: {}",
                        claw_base::error::chain(&e)
                    ),
                    retryable: true,
                });
            }
            Ok(Some(Ok(b))) => {
                out.extend_from_slice(&b);
                if out.len() > max {
                    return Err(AttemptError::Stream {
                        message: format!("response body larger than {max} bytes"),
                        retryable: false,
                    });
                }
            }
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn network_error(e: &reqwest::Error) -> AttemptError {
    if e.is_timeout() {
        AttemptError::Timeout(claw_base::error::chain(e))
    } else {
        AttemptError::Network(claw_base::error::chain(e))
    }
}

/// The `message` of a JSON error body (`{"error": {"message": ..}}`,
/// `{"error": ".."}`, `{"message": ..}`), or the body itself, shortened.
pub(crate) fn error_message(body: &str) -> String {
    let from_json = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error").unwrap_or(&v);
            e.get("message")
                .and_then(|m| m.as_str())
                .or_else(|| e.as_str())
                .map(str::to_string)
        });
    let msg = from_json.unwrap_or_else(|| body.trim().to_string());
    shorten(&msg, 500)
}

pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}
