//! What the gateway tests of both crates say to a gateway and read back from
//! it, whichever way it runs (in-process in `claw-gateway`'s tests, `claw
//! gateway` in `claw`'s): a chat-completions body, requests on a raw kept-alive
//! connection, waiting for the server to close one, and a session's transcript.

use serde_json::{Value, json};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// An OpenAI chat-completions request body with one user message (and a
/// system message, which claw ignores).
pub fn chat_body(text: &str, stream: bool) -> Value {
    json!({"model": "claw", "stream": stream, "messages": [
        {"role": "system", "content": "ignored: claw has its own prompt"},
        {"role": "user", "content": text}
    ]})
}

/// Write `<ws>/config.json` with `gateway` (JSON text) as its `gateway` section.
pub fn write_gateway_config(ws: &Path, gateway: &str) {
    std::fs::write(
        ws.join("config.json"),
        format!(r#"{{"gateway": {gateway}}}"#),
    )
    .unwrap();
}

/// Read `s` until the server closes it (end of file or reset), at most until
/// `deadline`: when it closed, or None while it is still open. Bytes the server
/// sends first are returned too.
pub fn wait_closed(s: &mut TcpStream, deadline: Instant) -> Option<(Instant, Vec<u8>)> {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Some((Instant::now(), got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return Some((Instant::now(), got)),
        }
    }
}

/// A request (the head only) on a kept-alive connection: the status and the
/// body (by `Content-Length`).
pub fn request_on(s: &mut TcpStream, method: &str, path: &str, token: &str) -> (u16, Vec<u8>) {
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed before the response head");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let status: u16 = head[9..12].parse().unwrap();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("a content-length");
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "closed inside the body");
        buf.extend_from_slice(&chunk[..n]);
    }
    (status, buf[head_end..head_end + len].to_vec())
}

/// The messages of the transcript file at `path` (missing: none). Every record
/// must parse and the last line must be whole.
pub fn transcript(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "torn last line in {}",
        path.display()
    );
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("every transcript line parses"))
        .filter(|v| v["type"] == "message")
        .collect()
}

/// (role, content) of the user/assistant messages of the transcript at `path`.
pub fn pairs(path: &Path) -> Vec<(String, String)> {
    transcript(path)
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}
