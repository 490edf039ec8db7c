//! An OpenAI-compatible LLM server for gateway tests and benchmarks whose answer
//! depends on the request: it streams `echo: <last user message>` back, after an
//! optional delay and with an optional pause between pieces. Every request's last
//! user message and the time the server spent on it are recorded, so a load test
//! can check that each message got its own answer and subtract the server's time
//! from the client's (the gateway's overhead). Real TCP on 127.0.0.1 ([`Loopback`]),
//! `Connection: close`.

use crate::loopback::Loopback;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One served request.
#[derive(Debug, Clone)]
pub struct Served {
    /// The last user message of the request.
    pub input: String,
    /// Time from the request's arrival to the last byte sent.
    pub elapsed: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Timing {
    first: Duration,
    between: Duration,
    pieces: usize,
}

/// The running server; stops when dropped.
pub struct EchoLlm {
    server: Loopback,
    served: Arc<Mutex<Vec<Served>>>,
}

impl EchoLlm {
    /// Answer after `first`, then send the text in `pieces` parts `between` apart.
    pub fn start(first: Duration, between: Duration, pieces: usize) -> EchoLlm {
        let timing = Timing {
            first,
            between,
            pieces: pieces.max(1),
        };
        let served = Arc::new(Mutex::new(Vec::new()));
        let s = served.clone();
        let server = Loopback::start(2, move |sock| {
            let s = s.clone();
            async move {
                let _ = serve(sock, s, timing).await;
            }
        });
        EchoLlm { server, served }
    }

    /// `http://127.0.0.1:<port>` (no `/v1`).
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// Requests served so far.
    pub fn served(&self) -> Vec<Served> {
        self.served
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// The answer the server gives to `input`.
pub fn answer_for(input: &str) -> String {
    format!("echo: {input}")
}

/// The (role, content) pairs a transcript holds after `inputs` were answered
/// by this server, in order.
pub fn expected_pairs(inputs: &[String]) -> Vec<(String, String)> {
    inputs
        .iter()
        .flat_map(|i| {
            [
                ("user".to_string(), i.clone()),
                ("assistant".to_string(), answer_for(i)),
            ]
        })
        .collect()
}

fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| {
            m.iter()
                .rev()
                .find(|m| m["role"] == "user")
                .and_then(|m| m["content"].as_str())
        })
        .unwrap_or("")
        .to_string()
}

async fn serve(
    mut sock: TcpStream,
    served: Arc<Mutex<Vec<Served>>>,
    t: Timing,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let (head_end, len) = loop {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            break (i + 4, len);
        }
    };
    while buf.len() < head_end + len {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let arrived = Instant::now();
    let body: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    let input = last_user(&body);
    let text = answer_for(&input);
    tokio::time::sleep(t.first).await;
    sock.write_all(
        b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
    )
    .await?;
    let chars: Vec<char> = text.chars().collect();
    let per = chars.len().div_ceil(t.pieces).max(1);
    let mut events: Vec<Value> = chars
        .chunks(per)
        .map(|c| {
            json!({"id": "echo", "object": "chat.completion.chunk", "model": "echo",
                   "choices": [{"index": 0, "delta": {"content": c.iter().collect::<String>()}, "finish_reason": null}]})
        })
        .collect();
    events.push(
        json!({"id": "echo", "object": "chat.completion.chunk", "model": "echo",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}),
    );
    let n = events.len();
    for (i, ev) in events.into_iter().enumerate() {
        let b = format!("data: {ev}\n\n");
        sock.write_all(format!("{:x}\r\n{b}\r\n", b.len()).as_bytes())
            .await?;
        sock.flush().await?;
        if i + 2 < n && !t.between.is_zero() {
            tokio::time::sleep(t.between).await;
        }
    }
    let done = "data: [DONE]\n\n";
    sock.write_all(format!("{:x}\r\n{done}\r\n0\r\n\r\n", done.len()).as_bytes())
        .await?;
    sock.flush().await?;
    served
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Served {
            input,
            elapsed: arrived.elapsed(),
        });
    let _ = sock.shutdown().await;
    Ok(())
}
