//! The gateway's HTTP API in-process (`crate::common::Gateway`) against an
//! OpenAI-compatible LLM server that echoes each message
//! (`claw_testkit::echo_llm`): the bearer token (401 without it), streaming and
//! non-streaming chat completions, sessions and their transcripts, and
//! per-session order. (The load test, shared with the benchmark example, runs
//! `claw gateway` in the `claw` crate.)

use crate::client_support::post_chat;
use crate::common::{echo_gateway, pairs};
use claw_testkit::echo_llm::{answer_for, expected_pairs};
use claw_testkit::gateway_http::chat_body;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

#[test]
fn token_streaming_non_streaming_and_sessions() {
    let (dir, llm, gw) = echo_gateway(Duration::ZERO, Duration::from_millis(5), 3);
    let ws = dir.path();
    let c = gw.client();

    // The token: generated on first start, private, required everywhere but /healthz.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(claw_testkit::state_dir(ws).join("gateway.token"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(gw.token.len(), 64);
    let health = gw.client_with("").request("GET", "/healthz", None).unwrap();
    assert_eq!(health.status, 200);
    for bad in ["", "wrong", &gw.token[..63]] {
        let anon = gw.client_with(bad);
        for (method, path) in [
            ("GET", "/v1/models"),
            ("GET", "/v1/sessions"),
            ("POST", "/v1/chat/completions"),
            ("POST", "/v1/memory/search"),
        ] {
            let body = serde_json::to_vec(&chat_body("sneaky", false)).unwrap();
            let r = anon.request(method, path, Some(&body)).unwrap();
            assert_eq!(r.status, 401, "{method} {path} with token {bad:?}");
        }
    }
    assert!(
        llm.served().is_empty(),
        "nothing reached the LLM without the token"
    );
    let models: Value =
        serde_json::from_slice(&c.request("GET", "/v1/models", None).unwrap().body).unwrap();
    assert_eq!(models["data"][0]["id"], "claw");

    // Non-streaming.
    let v = post_chat(&c, "t:1", "hello");
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["message"]["content"], "echo: hello");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    // Streaming: standard chunks, role first, the text in pieces, then [DONE].
    let mut body = chat_body("again", true);
    body["user"] = json!("ignored-when-the-header-is-set");
    let r = c
        .request_with(
            "POST",
            "/v1/chat/completions",
            Some(&serde_json::to_vec(&body).unwrap()),
            &[("X-Claw-Session", "t:1")],
        )
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let text = String::from_utf8(r.body).unwrap();
    let frames: Vec<&str> = text
        .split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            f.strip_prefix("data: ")
                .expect("every frame is a data line")
        })
        .collect();
    assert_eq!(*frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1]
        .iter()
        .map(|f| serde_json::from_str(f).unwrap())
        .collect();
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk")
    );
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let streamed: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(streamed, "echo: again");
    assert!(
        chunks
            .iter()
            .filter(|c| c["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|s| !s.is_empty()))
            .count()
            >= 2,
        "the answer streams in pieces: {text}"
    );
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["claw"]["end"], "answered");

    // The `user` field names the session when there is no header.
    let mut body = chat_body("from alice", false);
    body["user"] = json!("alice");
    let r = c
        .post_json("/v1/chat/completions", &body)
        .expect("post as alice");
    assert_eq!(r.header("x-claw-session"), Some("alice"));

    // History is claw's transcript; the sessions API reads it back.
    assert_eq!(
        pairs(ws, "t:1"),
        expected_pairs(&["hello".into(), "again".into()])
    );
    let sessions: Value =
        serde_json::from_slice(&c.request("GET", "/v1/sessions", None).unwrap().body).unwrap();
    let list = sessions["data"].as_array().unwrap();
    let find = |k: &str| list.iter().find(|s| s["key"] == k).cloned();
    assert_eq!(find("t:1").unwrap()["messages"], 4);
    assert_eq!(find("alice").unwrap()["messages"], 2);
    assert!(find("t:1").unwrap()["last_activity"].is_string());
    let msgs: Value = serde_json::from_slice(
        &c.request("GET", "/v1/sessions/t:1/messages", None)
            .unwrap()
            .body,
    )
    .unwrap();
    let roles = claw_testkit::strs(&msgs["data"], "/role");
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(msgs["data"][3]["content"], "echo: again");
    let missing = c
        .request("GET", "/v1/sessions/nobody/messages", None)
        .unwrap();
    assert_eq!(missing.status, 404);
    // The second turn's request carried the first turn as history.
    assert_eq!(llm.served().len(), 3);
}

#[test]
fn per_session_order() {
    let (dir, _llm, gw) = echo_gateway(Duration::from_millis(250), Duration::ZERO, 1);
    let ws = dir.path();

    // Five messages to one session, each sent once the gateway has accepted the
    // previous one, while each turn takes 250 ms: they queue behind the running
    // turn and run in the order they were accepted, one at a time.
    let inputs: Vec<String> = (0..5).map(|i| format!("ordered {i}")).collect();
    let c = gw.client();
    let accepted = || -> u64 {
        let v: Value =
            serde_json::from_slice(&c.request("GET", "/v1/status", None).unwrap().body).unwrap();
        v["turns"]["accepted"].as_u64().unwrap()
    };
    let mut pending = Vec::new();
    for (i, text) in inputs.iter().enumerate() {
        let mut sock = std::net::TcpStream::connect(("127.0.0.1", gw.info.port)).unwrap();
        let body = serde_json::to_vec(&chat_body(text, false)).unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             X-Claw-Session: order\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n",
            gw.token,
            body.len()
        );
        std::io::Write::write_all(&mut sock, head.as_bytes()).unwrap();
        std::io::Write::write_all(&mut sock, &body).unwrap();
        pending.push(sock);
        let deadline = Instant::now() + Duration::from_secs(30);
        while accepted() < i as u64 + 1 {
            assert!(Instant::now() < deadline, "message {i} was not accepted");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let status: Value =
        serde_json::from_slice(&c.request("GET", "/v1/status", None).unwrap().body).unwrap();
    assert!(
        status["queues"]["waiting"].as_u64().unwrap() >= 3,
        "later messages wait behind the running turn: {status}"
    );
    for (sock, text) in pending.iter_mut().zip(&inputs) {
        let mut raw = String::new();
        std::io::Read::read_to_string(sock, &mut raw).unwrap();
        let body = &raw[raw.find("\r\n\r\n").unwrap() + 4..];
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], answer_for(text));
    }
    assert_eq!(pairs(ws, "order"), expected_pairs(&inputs));
}
