//! The gateway's connection hygiene, in-process (`crate::common::Gateway`) with
//! small limits from the config file: connections that never finish their
//! request head (a partial request line, partial headers, a head trickled a
//! byte at a time) and a kept-alive connection left idle are closed once
//! `gateway.header_read_timeout_seconds` passes, while authenticated requests
//! keep being answered; a chat stream (SSE) with silences longer than that
//! timeout, a slow non-streaming answer and an open `/mcp` event stream are not
//! cut. (The per-client connection cap, whose refusals are judged by the log
//! lines they leave, is tested on `claw gateway` in the `claw` crate.)

use crate::client_support::{stream_turn, streamed_text};
use crate::common::Gateway;
use claw_testkit::echo_llm::{EchoLlm, answer_for};
use claw_testkit::gateway_http::{chat_body, request_on, wait_closed, write_gateway_config};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn connect(gw: &Gateway) -> TcpStream {
    TcpStream::connect(("127.0.0.1", gw.info.port)).unwrap()
}

/// `/v1/status`'s connection counters, asked on a fresh connection.
fn connections(gw: &Gateway) -> Value {
    let r = gw.client().request("GET", "/v1/status", None).unwrap();
    assert_eq!(r.status, 200);
    serde_json::from_slice::<Value>(&r.body).unwrap()["connections"].clone()
}

#[test]
fn slow_header_connections_are_closed_while_the_gateway_keeps_serving() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    // The timer may fire late on a loaded machine; the old gateway kept them forever.
    const MARGIN: Duration = Duration::from_secs(5);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_gateway_config(ws, r#"{"header_read_timeout_seconds": 2}"#);
    let gw = Gateway::start(ws, None);
    let started = Instant::now();
    // 50 connections that never finish their head: half stop inside the request
    // line, half inside the headers.
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|i| {
            let mut s = connect(&gw);
            let part: &[u8] = if i % 2 == 0 {
                b"GET /v1/sta"
            } else {
                b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
            };
            s.write_all(part).unwrap();
            s
        })
        .collect();
    // One trickles its head a byte every 200 ms: arriving bytes do not restart
    // the clock. A write fails soon after the server has closed.
    let port = gw.info.port;
    let trickle = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let t = Instant::now();
        let head = format!(
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: {}",
            "a".repeat(200)
        );
        for b in head.bytes() {
            if s.write_all(&[b]).is_err() {
                return Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    });
    // A kept-alive connection: one request answered, then idle.
    let mut idle = connect(&gw);
    let (status, _) = request_on(&mut idle, "GET", "/healthz", &gw.token);
    assert_eq!(status, 200);
    let idle_since = Instant::now();

    // Positive control: the gateway answers an authenticated request during the
    // attack.
    let during = gw.client().request("GET", "/v1/status", None).unwrap();
    assert_eq!(
        during.status,
        200,
        "{}",
        String::from_utf8_lossy(&during.body)
    );

    let deadline = started + TIMEOUT + MARGIN;
    let mut last = Duration::ZERO;
    for (i, s) in slow.iter_mut().enumerate() {
        let (at, got) = wait_closed(s, deadline).unwrap_or_else(|| {
            panic!(
                "slow connection {i} still open {:?} after it connected",
                started.elapsed()
            )
        });
        // Nothing is answered to a head that never came; and not before the timeout.
        assert!(got.is_empty(), "{}", String::from_utf8_lossy(&got));
        let after = at.duration_since(started);
        assert!(
            after >= TIMEOUT - Duration::from_millis(100),
            "closed after {after:?}"
        );
        last = last.max(after);
    }
    let (at, _) = wait_closed(&mut idle, idle_since + TIMEOUT + MARGIN)
        .expect("the idle kept-alive connection is closed");
    let idle_for = at.duration_since(idle_since);
    assert!(
        idle_for >= TIMEOUT - Duration::from_millis(100),
        "{idle_for:?}"
    );
    let trickled = trickle
        .join()
        .unwrap()
        .expect("the trickling connection is closed");
    assert!(trickled < TIMEOUT + MARGIN, "trickled for {trickled:?}");
    println!(
        "50 slow-header connections closed by {last:.2?} after connecting (timeout {TIMEOUT:?}); \
         idle kept-alive connection closed after {idle_for:.2?}; trickling one after {trickled:.2?}"
    );

    // Still serving, and the closes were counted.
    let c = connections(&gw);
    assert!(c["header_timeouts"].as_u64().unwrap() >= 50, "{c}");
    assert_eq!(c["refused_over_cap"], 0, "{c}");
}

#[test]
fn streams_and_slow_answers_outlast_the_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_gateway_config(ws, r#"{"header_read_timeout_seconds": 1}"#);
    // First token after 1.5 s, then pieces 1.2 s apart: ~4 s per answer, each
    // silence longer than the 1 s header timeout (keep-alive comments come every 15 s).
    let llm = EchoLlm::start(Duration::from_millis(1500), Duration::from_millis(1200), 3);
    let gw = Gateway::start(ws, Some(&llm.url()));
    let started = Instant::now();
    let (rx, streamed) = stream_turn(gw.client(), "sse", "a slow stream");
    let c = gw.client();
    let plain = std::thread::spawn(move || {
        c.request_with(
            "POST",
            "/v1/chat/completions",
            Some(&serde_json::to_vec(&chat_body("a slow answer", false)).unwrap()),
            &[("X-Claw-Session", "plain")],
        )
        .map_err(|e| e.to_string())
    });
    let mcp = mcp_event_stream_stays_open(&gw, Duration::from_secs(4));

    let (end, message) = streamed.join().unwrap().expect("the stream completed");
    assert_eq!(end, "answered", "{message:?}");
    let text: String = streamed_text(&rx);
    assert_eq!(text, answer_for("a slow stream"));
    let r = plain.join().unwrap().expect("the slow answer arrived");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        v["choices"][0]["message"]["content"],
        answer_for("a slow answer")
    );
    let took = started.elapsed();
    // The premise: both lasted well past the header timeout.
    assert!(took >= Duration::from_secs(3), "{took:?}");
    println!(
        "a chat stream and a non-streaming answer of {took:.2?} and a silent /mcp stream of 4 s, header timeout 1 s: not cut"
    );
    mcp.unwrap_or_else(|e| panic!("{e}"));
}

/// Open an MCP session on `/mcp` and its event stream (`GET`), which is silent
/// until the server has something to say; it must still be open after `hold`.
fn mcp_event_stream_stays_open(gw: &Gateway, hold: Duration) -> Result<(), String> {
    let port = gw.info.port;
    let post = |body: &str, session: Option<&str>| -> (String, String) {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let sid = session
            .map(|v| format!("Mcp-Session-Id: {v}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             {sid}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            gw.token,
            body.len()
        )
        .unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        let (head, rest) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
        (head.to_string(), rest.to_string())
    };
    let (head, body) = post(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"hygiene","version":"0"}}}"#,
        None,
    );
    let session = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("mcp-session-id")
                .then(|| v.trim().to_string())
        })
        .ok_or_else(|| format!("no MCP session: {head}\n{body}"))?;
    let (head, _) = post(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        Some(&session),
    );
    if !head.starts_with("HTTP/1.1 202") {
        return Err(format!("initialized: {head}"));
    }
    let mut s = connect(gw);
    write!(
        s,
        "GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
         Accept: text/event-stream\r\nMcp-Session-Id: {session}\r\n\r\n",
        gw.token
    )
    .unwrap();
    let opened = Instant::now();
    // The stream's head first: a 200 event stream (an error answer would leave
    // the connection idle, and the idle limit would close it).
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => return Err(format!("no /mcp stream head: {other:?}")),
        }
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") || !head.contains("text/event-stream") {
        return Err(format!("GET /mcp: {head}"));
    }
    match wait_closed(&mut s, opened + hold) {
        None => Ok(()),
        Some((at, got)) => Err(format!(
            "the /mcp event stream closed after {:?}: {}",
            at.duration_since(opened),
            String::from_utf8_lossy(&got)
        )),
    }
}
