//! A session's running turn stopped through the gateway's API, in-process
//! (`crate::common::Gateway`) against a slow echoing LLM
//! (`claw_testkit::echo_llm`): `POST /v1/sessions/{key}/cancel` (what the
//! REPL's Ctrl-C sends) stops it — the stream ends `cancelled` long before the
//! LLM would have answered, what was said stays in the transcript and the next
//! message is answered — and so does `/stop` sent as a message from any
//! channel, served at once rather than queued behind the turn.

use crate::common::{Gateway, echo_gateway, pairs as messages};
use claw_gateway::client::{ChatEvent, Client, ClientError};
use claw_testkit::echo_llm::{EchoLlm, answer_for};
use serde_json::Value;
use std::io::Write;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// Wait (30 s at most) until a turn runs.
fn wait_running(client: &Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = client.request("GET", "/v1/status", None).unwrap();
        let st: Value = serde_json::from_slice(&st.body).unwrap();
        if st["queues"]["running"] == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "the turn never ran: {st}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a turn run in the background came to: its result, the text it
/// streamed and when it ended.
type TurnEnd = (
    Result<(String, Option<String>), ClientError>,
    Vec<String>,
    Instant,
);

/// A gateway over an echoing LLM whose every answer takes 4 s to start, and
/// `message` sent to session `key` from `channel` on a thread of its own,
/// returned once that turn runs (so it surely is running when stopped).
fn running_turn(
    key: &'static str,
    message: &'static str,
    channel: &'static str,
) -> (TempDir, EchoLlm, Gateway, JoinHandle<TurnEnd>) {
    let (dir, llm, gw) = echo_gateway(Duration::from_secs(4), Duration::ZERO, 1);
    let client = gw.client();
    let turn = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let r = client.chat(key, message, false, channel, |ev| {
            if let ChatEvent::Text(t) = ev {
                seen.push(t.clone());
            }
        });
        (r, seen, Instant::now())
    });
    wait_running(&gw.client());
    (dir, llm, gw, turn)
}

#[test]
fn cancel_stops_the_remote_turn_and_the_session_goes_on() {
    let key = "repl:cancel";
    let (dir, _llm, gw, turn) = running_turn(key, "first question", "cli");
    let ws = dir.path();
    let client = gw.client();
    // The turn runs (the LLM is thinking): cancel.
    let cancelled_at = Instant::now();
    let r = client
        .request("POST", "/v1/sessions/repl:cancel/cancel", None)
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["cancelled"], 1, "{body}");
    let (result, seen, ended_at) = turn.join().unwrap();
    // Measured from the cancel, not from the request (queueing and start-up
    // under load are not the cancel's latency): well before the LLM's 4 s.
    let took = ended_at.duration_since(cancelled_at);
    let (end, _) = result.expect("the stream ends cleanly");
    assert_eq!(end, "cancelled");
    assert!(seen.is_empty(), "{seen:?}");
    assert!(took < Duration::from_secs(3), "cancel took {took:?}");

    // Nothing left to cancel; the next message is answered in the same session.
    let r = client
        .request("POST", "/v1/sessions/repl:cancel/cancel", None)
        .unwrap();
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["cancelled"], 0, "{body}");
    let (end, why) = client
        .chat(key, "second question", false, "cli", |_| {})
        .unwrap();
    assert_eq!(end, "answered", "{why:?}");
    let msgs = messages(ws, key);
    assert_eq!(
        msgs.first(),
        Some(&("user".to_string(), "first question".to_string())),
        "what was said is kept: {msgs:?}"
    );
    assert_eq!(
        msgs[msgs.len() - 2..],
        [
            ("user".to_string(), "second question".to_string()),
            ("assistant".to_string(), answer_for("second question")),
        ],
        "{msgs:?}"
    );
    // Without the token, no cancelling.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", gw.client().info.port)).unwrap();
    write!(
        raw,
        "POST /v1/sessions/x/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    std::io::Read::read_to_string(&mut raw, &mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 401"), "{out}");
}

/// `/stop` sent as a message (what a Matrix or Telegram user types, or any
/// OpenAI client) is a command, not a turn: it is served at once, not queued
/// behind the turn it stops, and that turn ends `cancelled`.
#[test]
fn stop_as_a_message_cancels_the_running_turn_from_any_channel() {
    let key = "chat:stop";
    let (dir, _llm, gw, turn) = running_turn(key, "a long question", "telegram");
    let ws = dir.path();
    let client = gw.client();
    let stopped_at = Instant::now();
    let mut reply = String::new();
    let (end, why) = client
        .chat(key, "/stop", false, "telegram", |ev| {
            if let ChatEvent::Text(t) = ev {
                reply.push_str(t);
            }
        })
        .unwrap();
    assert_eq!(end, "answered", "{why:?}");
    let (result, _, ended_at) = turn.join().unwrap();
    let took = ended_at.duration_since(stopped_at);
    let (end, _) = result.expect("the stream ends cleanly");
    assert_eq!(end, "cancelled");
    assert!(took < Duration::from_secs(3), "the stop took {took:?}");
    // Nothing runs now; `/stop` says so and never reaches the model.
    let (end, _) = client
        .chat(key, "/stop", false, "telegram", |_| {})
        .unwrap();
    assert_eq!(end, "answered");
    assert!(
        messages(ws, key).iter().all(|(_, c)| c != "/stop"),
        "{:?}",
        messages(ws, key)
    );
    assert_eq!(reply, "Stopped the running turn.");
}
