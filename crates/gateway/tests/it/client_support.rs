//! A gateway's client side, for the gateway tests of `claw-gateway` (in-process)
//! and of `claw` (`claw gateway`, which includes this file): a chat completion
//! posted, a streaming turn on a thread, and the text it streamed.

use claw_gateway::client::{ChatEvent, Client, HttpResponse};
use claw_testkit::gateway_http::chat_body;
use serde_json::Value;

/// POST a chat completion (`stream` or not) with an explicit session header;
/// the response as it came.
pub fn request_chat(c: &Client, session: &str, text: &str, stream: bool) -> HttpResponse {
    c.request_with(
        "POST",
        "/v1/chat/completions",
        Some(&serde_json::to_vec(&chat_body(text, stream)).unwrap()),
        &[("X-Claw-Session", session)],
    )
    .unwrap()
}

/// POST a chat completion with an explicit session header.
pub fn post_chat(c: &Client, session: &str, text: &str) -> Value {
    let r = request_chat(c, session, text, false);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

/// A streaming turn's end: `(end, message)` or the client's error.
pub type StreamEnd = std::thread::JoinHandle<Result<(String, Option<String>), String>>;

/// Start a streaming turn on a thread; returns (events receiver, join handle).
pub fn stream_turn(
    c: Client,
    session: &str,
    text: &str,
) -> (std::sync::mpsc::Receiver<ChatEvent>, StreamEnd) {
    let (tx, rx) = std::sync::mpsc::channel();
    let (session, text) = (session.to_string(), text.to_string());
    let h = std::thread::spawn(move || {
        c.chat(&session, &text, false, "test", |ev| {
            let _ = tx.send(ev.clone());
        })
        .map_err(|e| e.to_string())
    });
    (rx, h)
}

/// The text a streaming turn sent so far.
pub fn streamed_text(rx: &std::sync::mpsc::Receiver<ChatEvent>) -> String {
    rx.try_iter()
        .filter_map(|e| match e {
            ChatEvent::Text(t) => Some(t),
            _ => None,
        })
        .collect()
}
