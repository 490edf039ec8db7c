//! Approvals through the protocol, in-process (`crate::common::Gateway`) against
//! the scripted OpenAI-compatible model (`claw_testkit::scripted_server`) whose
//! turns call `write_file`: a streamed turn sends an `approval_request` data
//! event and waits; `POST /v1/approvals/{id}` answers it once, always (the same
//! session is not asked again; another session is) or deny; an unanswered one
//! times out as a denial; the endpoint is behind the token, 404s an id that is
//! not waiting and 400s another decision; a non-streamed request that needs an
//! approval fails naming the streamed way.

use crate::client_support::{request_chat, stream_turn};
use crate::common::Gateway;
use claw_gateway::client::{ChatEvent, Client};
use claw_testkit::scripted_server::openai::write_file_call as write;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// The next approval request of a streaming turn (30 s at most).
fn next_approval(rx: &Receiver<ChatEvent>) -> Value {
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(ChatEvent::Approval(a)) => return a,
            Ok(ChatEvent::End { end, message }) => {
                panic!("the turn ended ({end}: {message:?}) without asking")
            }
            Ok(_) => {}
            Err(e) => panic!("no approval request: {e}"),
        }
    }
}

/// The rest of a turn's events, up to its end.
fn rest(rx: &Receiver<ChatEvent>) -> Vec<ChatEvent> {
    let mut out = Vec::new();
    while let Ok(ev) = rx.recv_timeout(Duration::from_secs(30)) {
        let end = matches!(ev, ChatEvent::End { .. });
        out.push(ev);
        if end {
            break;
        }
    }
    out
}

fn decisions(events: &[ChatEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            ChatEvent::ApprovalResolved(r) => r["decision"].as_str().map(str::to_string),
            _ => None,
        })
        .collect()
}

fn asked(events: &[ChatEvent]) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, ChatEvent::Approval(_)))
        .count()
}

fn answer(c: &Client, id: &str, body: &Value) -> (u16, Value) {
    let r = c
        .request(
            "POST",
            &format!("/v1/approvals/{id}"),
            Some(&serde_json::to_vec(body).unwrap()),
        )
        .unwrap();
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

fn gateway(ws: &Path, server: &ScriptedServer, gateway_section: Value) -> Gateway {
    std::fs::write(
        ws.join("config.json"),
        json!({"gateway": gateway_section}).to_string(),
    )
    .unwrap();
    Gateway::start(ws, Some(&server.url()))
}

#[test]
fn once_always_and_deny_through_the_api_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start(openai::write_file_turns(&[
        ("w1", "a.txt", "wrote a"),
        ("w2", "b.txt", "wrote b"),
        ("w3", "c.txt", "wrote c"),
        // Another session.
        ("w4", "d.txt", "could not write d"),
    ]));
    let gw = gateway(ws, &server, json!({}));
    let c = gw.client();

    // Once.
    let (rx, h) = stream_turn(c.clone(), "api:one", "write a");
    let a = next_approval(&rx);
    assert_eq!(a["tool"], "write_file");
    assert_eq!(a["preview"], "write_file: a.txt");
    assert_eq!(a["reach"], "workspace");
    assert_eq!(a["session"], "api:one");
    assert!(a["arguments"].as_str().unwrap().contains("a.txt"));
    assert!(!ws.join("a.txt").exists(), "nothing runs before the answer");
    let st: Value =
        serde_json::from_slice(&c.request("GET", "/v1/status", None).unwrap().body).unwrap();
    assert_eq!(
        st["approvals"],
        json!({"waiting": 1, "timeout_seconds": 120}),
        "{st}"
    );
    let id = a["id"].as_str().unwrap().to_string();
    // Behind the token; a bad decision is 400 and leaves the request waiting.
    let r = gw
        .client_with("wrong-token")
        .request("POST", &format!("/v1/approvals/{id}"), Some(b"{}"))
        .unwrap();
    assert_eq!(r.status, 401);
    let (status, body) = answer(&c, &id, &json!({"decision": "yes"}));
    assert_eq!(status, 400);
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("once")
            && msg.contains("always")
            && msg.contains("deny")
            && msg.contains("yes"),
        "{msg}"
    );
    let (status, body) = answer(&c, &id, &json!({"decision": "once"}));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["session"], "api:one");
    let events = rest(&rx);
    assert_eq!(decisions(&events), ["once"]);
    assert_eq!(h.join().unwrap().unwrap().0, "answered");
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "w1");
    // Answered already: unknown now.
    let (status, body) = answer(&c, &id, &json!({"decision": "once"}));
    assert_eq!(status, 404, "{body}");
    assert_eq!(
        answer(&c, "appr-unknown", &json!({"decision": "deny"})).0,
        404
    );

    // Always: asked once, then the same session is not asked again.
    let (rx, h) = stream_turn(c.clone(), "api:one", "write b");
    let a = next_approval(&rx);
    assert_eq!(a["always"], "every `write_file` call");
    let (status, _) = answer(
        &c,
        a["id"].as_str().unwrap(),
        &json!({"decision": "always"}),
    );
    assert_eq!(status, 200);
    assert_eq!(decisions(&rest(&rx)), ["always"]);
    assert_eq!(h.join().unwrap().unwrap().0, "answered");
    let (rx, h) = stream_turn(c.clone(), "api:one", "write c");
    let events = rest(&rx);
    assert_eq!(asked(&events), 0, "always covers the session: {events:?}");
    assert_eq!(h.join().unwrap().unwrap().0, "answered");
    assert_eq!(std::fs::read_to_string(ws.join("c.txt")).unwrap(), "w3");

    // Another session is asked again; deny: the call never runs and the model
    // hears the user declined.
    let (rx, h) = stream_turn(c.clone(), "api:two", "write d");
    let a = next_approval(&rx);
    assert_eq!(a["session"], "api:two");
    let (status, _) = answer(&c, a["id"].as_str().unwrap(), &json!({"decision": "deny"}));
    assert_eq!(status, 200);
    assert_eq!(decisions(&rest(&rx)), ["deny"]);
    assert_eq!(h.join().unwrap().unwrap().0, "answered");
    assert!(!ws.join("d.txt").exists());
    assert_eq!(
        server.tool_result(7, "w4"),
        "Error: the user declined to run `write_file`"
    );
}

/// On the wire: the request is a `data:` event whose object has `"type":
/// "approval_request"`, `id`, `tool`, `preview` and `reach` at the top; nobody
/// answers, so after the configured second it is denied (`timeout`).
#[test]
fn an_unanswered_request_times_out_as_a_denial() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start([write("w1", "a.txt"), openai::text(&["gave up"])]);
    let gw = gateway(ws, &server, json!({"approval_timeout_seconds": 1}));
    let c = gw.client();
    let started = std::time::Instant::now();
    let r = request_chat(&c, "api:late", "write a", true);
    assert_eq!(r.status, 200);
    assert!(started.elapsed() >= Duration::from_secs(1));
    let data: Vec<Value> = String::from_utf8(r.body)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let requests: Vec<&Value> = data
        .iter()
        .filter(|v| v["type"] == "approval_request")
        .collect();
    assert_eq!(requests.len(), 1, "{data:?}");
    let a = requests[0];
    assert!(a["id"].as_str().unwrap().starts_with("appr-"), "{a}");
    assert_eq!(a["tool"], "write_file");
    assert_eq!(a["preview"], "write_file: a.txt");
    assert_eq!(a["reach"], "workspace");
    assert_eq!(a["timeout_seconds"], 1);
    let events: Vec<ChatEvent> = data
        .iter()
        .flat_map(claw_gateway::client::chunk_events)
        .collect();
    assert_eq!(decisions(&events), ["timeout"]);
    assert!(
        events.iter().any(|e| matches!(e, ChatEvent::Status(s)
            if s.contains("not approved within 1 s"))),
        "{events:?}"
    );
    assert!(
        matches!(events.last(), Some(ChatEvent::End { end, .. }) if end == "answered"),
        "{events:?}"
    );
    assert!(!ws.join("a.txt").exists());
    assert_eq!(
        server.tool_result(1, "w1"),
        "Error: the user declined to run `write_file`"
    );
    // Too late: the request is gone.
    let (status, _) = answer(&c, a["id"].as_str().unwrap(), &json!({"decision": "once"}));
    assert_eq!(status, 404);
}

#[test]
fn a_non_streamed_request_that_needs_an_approval_fails_naming_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start([write("w1", "a.txt"), openai::text(&["unused"])]);
    let gw = gateway(ws, &server, json!({}));
    let r = request_chat(&gw.client(), "api:plain", "write a", false);
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    let body: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(body["error"]["type"], "approval_required");
    let msg = body["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("write_file: a.txt")
            && msg.contains("\"stream\": true")
            && msg.contains("/v1/approvals/"),
        "{msg}"
    );
    assert!(!ws.join("a.txt").exists());
}
