//! `claw gateway` as a real process against an OpenAI-compatible LLM server that
//! echoes each message (`claw_testkit::echo_llm`): the bearer token (401 without
//! it), streaming and non-streaming chat completions, sessions and their
//! transcripts, per-session order, the CLI routed through the gateway (output
//! identical to `--local`), a load of 50 sessions × 5 messages (each answered once,
//! in order, transcripts without lost or duplicated lines; throughput and the
//! gateway's overhead printed), SIGTERM during a streaming turn (exit 0 within the
//! grace period, transcript intact), SIGTERM past the grace period (the turn is
//! cancelled, exit 0) and `kill -9` (nothing answered is lost, the next start works);
//! and one turn end to end against the real llama.cpp server (`real_model_turn`, run by
//! `e2e_local_llm` on its server, through its relay, within its budget).

use claw_gateway::client::{ChatEvent, Client};
use claw_gateway::discovery::{self, GatewayInfo};
use claw_gateway::token::Token;
use claw_testkit::echo_llm::{EchoLlm, answer_for};
use claw_testkit::gateway_proc::GatewayProc;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// `claw` with a clean environment, keyword-only memory, the echo LLM.
pub fn claw(ws: &Path, llm: Option<&str>) -> Command {
    claw_env(ws, llm, false)
}

/// `claw` with a clean environment and the echo LLM; `model`: the real local
/// embedding model (else keyword-only).
pub fn claw_env(ws: &Path, llm: Option<&str>, model: bool) -> Command {
    let mut c = Command::new(claw_testkit::claw_bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", ws.join("home"))
        .env("CLAW_WORKSPACE", ws)
        .env("CLAW_NOW", claw_testkit::TEST_NOW)
        .env("TZ", "UTC");
    if model {
        let (dir, ort) = claw_testkit::model_paths();
        c.env("CLAW_EMBED_MODEL_DIR", dir)
            .env("ORT_DYLIB_PATH", ort);
    } else {
        c.env("CLAW_EMBED_PROVIDER", "none");
    }
    if let Some(url) = llm {
        c.env("CLAW_LLM_API", "openai")
            .env("CLAW_LLM_BASE_URL", url)
            .env("CLAW_LLM_MODEL", "echo");
    }
    if ws.join("config.json").is_file() {
        c.env("CLAW_CONFIG", ws.join("config.json"));
    }
    c
}

/// A running `claw gateway` (`claw_testkit::gateway_proc`) with its discovery
/// info and token; killed when dropped.
pub struct Gateway {
    proc: GatewayProc,
    pub info: GatewayInfo,
    pub token: String,
}

impl Gateway {
    pub fn start(ws: &Path, llm: Option<&str>) -> Gateway {
        Gateway::start_with(ws, llm, false)
    }

    /// `model`: with the real embedding model (warm in the gateway).
    pub fn start_with(ws: &Path, llm: Option<&str>, model: bool) -> Gateway {
        let mut proc = GatewayProc::spawn(claw_env(ws, llm, model));
        let state = claw_testkit::state_dir(ws);
        let info = proc.wait_until("listening", Duration::from_secs(60), |p| {
            discovery::read_live(&state).filter(|i| i.pid == p.pid())
        });
        let token = std::fs::read_to_string(state.join("gateway.token"))
            .unwrap()
            .trim()
            .to_string();
        Gateway { proc, info, token }
    }

    pub fn client(&self) -> Client {
        let mut c = Client::new(self.info.clone(), Token::new(self.token.clone()));
        c.timeout = Some(Duration::from_secs(60));
        c
    }

    fn client_with(&self, token: &str) -> Client {
        Client::new(self.info.clone(), Token::new(token))
    }

    fn signal(&self, sig: i32) {
        self.proc.signal(sig)
    }

    /// Wait for the process to exit; its status code and how long it took.
    fn wait_exit(&mut self, limit: Duration) -> (i32, Duration) {
        self.proc.wait_exit(limit)
    }

    pub fn log(&self) -> String {
        self.proc.log()
    }

    /// Wait until the log contains `needle` (panics with the log after `limit`).
    pub fn wait_log(&self, needle: &str, limit: Duration) {
        self.proc.wait_log(needle, limit)
    }
}

pub fn chat_body(text: &str, stream: bool) -> Value {
    json!({"model": "claw", "stream": stream, "messages": [
        {"role": "system", "content": "ignored: claw has its own prompt"},
        {"role": "user", "content": text}
    ]})
}

/// POST a chat completion with an explicit session header.
fn post_chat(c: &Client, session: &str, text: &str) -> Value {
    let r = c
        .request_with(
            "POST",
            "/v1/chat/completions",
            Some(&serde_json::to_vec(&chat_body(text, false)).unwrap()),
            &[("X-Claw-Session", session)],
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

/// The messages of a transcript file (all records must parse).
fn transcript(ws: &Path, key: &str) -> Vec<Value> {
    let path = ws
        .join("sessions")
        .join(claw_agent::session::file_name_for_key(key));
    let text = std::fs::read_to_string(&path).unwrap_or_default();
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

/// (role, content) of a transcript's user/assistant messages.
fn pairs(ws: &Path, key: &str) -> Vec<(String, String)> {
    transcript(ws, key)
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn expected_pairs(inputs: &[String]) -> Vec<(String, String)> {
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

#[test]
fn token_streaming_non_streaming_and_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = EchoLlm::start(Duration::ZERO, Duration::from_millis(5), 3);
    let gw = Gateway::start(ws, Some(&llm.url()));
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
    let roles: Vec<&str> = msgs["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
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
fn per_session_order_and_the_cli_through_the_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    std::fs::write(
        ws.join("memory/2026-11-02.md"),
        "# Webhooks\n\nThe payment webhook retried forever because the handler timed out.\n",
    )
    .unwrap();
    let out = claw(ws, None).args(["memory", "index"]).output().unwrap();
    assert!(out.status.success());
    let llm = EchoLlm::start(Duration::from_millis(250), Duration::ZERO, 1);
    let gw = Gateway::start(ws, Some(&llm.url()));

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

    // `claw -m` through the gateway prints what the local run prints.
    let routed = claw(ws, Some(&llm.url()))
        .args(["-m", "ping", "--session", "cli:via"])
        .output()
        .unwrap();
    let local = claw(ws, Some(&llm.url()))
        .args(["-m", "ping", "--session", "cli:local", "--local"])
        .output()
        .unwrap();
    assert!(routed.status.success(), "{routed:?}");
    assert!(local.status.success(), "{local:?}");
    assert_eq!(String::from_utf8_lossy(&routed.stdout), "echo: ping\n");
    assert_eq!(routed.stdout, local.stdout);
    // The gateway wrote the routed turn (it owns the sessions).
    assert_eq!(pairs(ws, "cli:via"), expected_pairs(&["ping".into()]));
    let status: Value = serde_json::from_slice(
        &claw(ws, None)
            .args(["gateway", "status", "--json"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(status["running"], true);
    assert_eq!(status["turns"]["finished"], 6, "{status}");

    // `claw memory search/get` give the same output either way (once the new
    // transcripts are indexed, so both report a fresh index).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = claw(ws, None)
            .args(["memory", "search", "webhook", "--json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["sync"]["status"] == "fresh" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the index never became fresh: {v}"
        );
    }
    let timings = regex::Regex::new(r#""(checked_ms|elapsed_ms)":\d+"#).unwrap();
    for args in [
        vec!["memory", "search", "webhook retried", "--json"],
        vec!["memory", "search", "webhook retried"],
        vec!["memory", "search", "nothing-like-this-anywhere", "--json"],
        vec!["memory", "get", "memory/2026-11-02.md", "--json"],
        vec!["memory", "get", "memory/2026-11-02.md", "--from", "3"],
    ] {
        let via = claw(ws, None).args(&args).output().unwrap();
        let mut local_args = args.clone();
        local_args.push("--local");
        let here = claw(ws, None).args(&local_args).output().unwrap();
        assert_eq!(via.status.code(), here.status.code(), "{args:?}");
        // Timings differ from run to run; everything else is byte for byte.
        let norm = |b: &[u8]| {
            timings
                .replace_all(&String::from_utf8_lossy(b), "\"$1\":0")
                .into_owned()
        };
        assert_eq!(norm(&via.stdout), norm(&here.stdout), "{args:?}");
        assert!(!via.stdout.is_empty(), "{args:?}");
    }
    // An error (a path that is not indexed) reads the same too.
    let via = claw(ws, None)
        .args(["memory", "get", "memory/none.md"])
        .output()
        .unwrap();
    let here = claw(ws, None)
        .args(["memory", "get", "memory/none.md", "--local"])
        .output()
        .unwrap();
    assert_eq!(via.status.code(), Some(2));
    assert_eq!(via.stderr, here.stderr);
    assert!(gw.log().contains("listening on"));
}

/// What a load run measured.
pub struct LoadFigures {
    pub messages: usize,
    pub wall: Duration,
    /// Client-side latency per message, ms, sorted.
    pub latency_ms: Vec<f64>,
    /// Client latency minus the LLM server's own time, ms, sorted.
    pub overhead_ms: Vec<f64>,
}

impl LoadFigures {
    pub fn line(&self, sessions: usize, per: usize, llm_ms: u64) -> String {
        format!(
            "gateway load: {sessions} sessions x {per} messages in {:.2} s = {:.1} msg/s; \
             latency p50 {:.1} ms p95 {:.1} ms; gateway overhead p50 {:.1} ms p95 {:.1} ms \
             (LLM server {llm_ms} ms per answer)",
            self.wall.as_secs_f64(),
            self.messages as f64 / self.wall.as_secs_f64(),
            percentile(&self.latency_ms, 0.5),
            percentile(&self.latency_ms, 0.95),
            percentile(&self.overhead_ms, 0.5),
            percentile(&self.overhead_ms, 0.95),
        )
    }
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// `sessions` concurrent clients, each sending `per` messages one after the
/// other through a fresh gateway (worker cap `cap`) to an LLM that takes
/// `llm_ms`; asserts every message was answered exactly once, in order, with
/// transcripts holding each message once.
pub fn load_run(sessions: usize, per: usize, llm_ms: u64, cap: usize) -> LoadFigures {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("config.json"),
        json!({"gateway": {"max_concurrent_sessions": cap}}).to_string(),
    )
    .unwrap();
    let llm = EchoLlm::start(Duration::from_millis(llm_ms), Duration::ZERO, 2);
    let gw = Gateway::start(ws, Some(&llm.url()));
    let started = Instant::now();
    let handles: Vec<_> = (0..sessions)
        .map(|s| {
            let c = gw.client();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                for m in 0..per {
                    let text = format!("s{s} m{m}");
                    let t = Instant::now();
                    let v = post_chat(&c, &format!("load:{s}"), &text);
                    lat.push((text.clone(), t.elapsed()));
                    assert_eq!(v["choices"][0]["message"]["content"], answer_for(&text));
                }
                lat
            })
        })
        .collect();
    let latencies: Vec<(String, Duration)> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let wall = started.elapsed();

    // Each message reached the LLM exactly once.
    let served = llm.served();
    assert_eq!(served.len(), sessions * per);
    let mut inputs: Vec<&str> = served.iter().map(|s| s.input.as_str()).collect();
    inputs.sort();
    inputs.dedup();
    assert_eq!(inputs.len(), sessions * per, "a message was sent twice");
    // Transcripts: every message once, in order, nothing lost or duplicated.
    for s in 0..sessions {
        let want: Vec<String> = (0..per).map(|m| format!("s{s} m{m}")).collect();
        assert_eq!(pairs(ws, &format!("load:{s}")), expected_pairs(&want));
    }
    // The gateway's overhead: the client's time minus the LLM server's own.
    let llm_time: std::collections::HashMap<&str, Duration> = served
        .iter()
        .map(|s| (s.input.as_str(), s.elapsed))
        .collect();
    let mut overhead_ms: Vec<f64> = latencies
        .iter()
        .map(|(t, d)| (d.saturating_sub(llm_time[t.as_str()])).as_secs_f64() * 1000.0)
        .collect();
    overhead_ms.sort_by(f64::total_cmp);
    let mut latency_ms: Vec<f64> = latencies
        .iter()
        .map(|(_, d)| d.as_secs_f64() * 1000.0)
        .collect();
    latency_ms.sort_by(f64::total_cmp);
    LoadFigures {
        messages: sessions * per,
        wall,
        latency_ms,
        overhead_ms,
    }
}

#[test]
fn load_50_sessions_x_5_messages() {
    let f = load_run(50, 5, 20, 64);
    println!("{}", f.line(50, 5, 20));
    assert_eq!(f.messages, 250);
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

#[test]
fn sigterm_during_a_streaming_turn_finishes_it_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    // ~2 s of streaming, well inside the default 10 s grace period.
    let llm = EchoLlm::start(Duration::from_millis(100), Duration::from_millis(300), 7);
    let mut gw = Gateway::start(ws, Some(&llm.url()));
    let (rx, h) = stream_turn(gw.client(), "term", "a long answer please");
    // Wait for the answer to start streaming, then ask the gateway to stop.
    match rx.recv_timeout(Duration::from_secs(30)).unwrap() {
        ChatEvent::Text(_) => {}
        other => panic!("expected text first, got {other:?}"),
    }
    gw.signal(libc::SIGTERM);
    let (code, took) = gw.wait_exit(Duration::from_secs(15));
    assert_eq!(code, 0, "{}", gw.log());
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let (end, _) = h.join().unwrap().expect("the stream completed");
    assert_eq!(end, "answered");
    let text: String = rx
        .try_iter()
        .filter_map(|e| match e {
            ChatEvent::Text(t) => Some(t),
            _ => None,
        })
        .collect();
    assert!(answer_for("a long answer please").ends_with(&text));
    assert_eq!(
        pairs(ws, "term"),
        expected_pairs(&["a long answer please".into()])
    );
    // Discovery file removed; the writer lock released (an index run takes it).
    assert!(!claw_testkit::state_dir(ws).join("gateway.json").exists());
    let out = claw(ws, None).args(["memory", "index"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(gw.log().contains("SIGTERM"), "{}", gw.log());
}

#[test]
fn sigterm_past_the_grace_period_cancels_the_turn_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("config.json"),
        r#"{"gateway": {"grace_seconds": 1}}"#,
    )
    .unwrap();
    // ~20 s of streaming: far past the 1 s grace period.
    let llm = EchoLlm::start(Duration::from_millis(50), Duration::from_secs(2), 10);
    let mut gw = Gateway::start(ws, Some(&llm.url()));
    let (rx, h) = stream_turn(gw.client(), "slow", "never mind");
    assert!(matches!(
        rx.recv_timeout(Duration::from_secs(30)).unwrap(),
        ChatEvent::Text(_)
    ));
    let queued = gw.client();
    gw.signal(libc::SIGTERM);
    let (code, took) = gw.wait_exit(Duration::from_secs(12));
    assert_eq!(code, 0, "{}", gw.log());
    assert!(took < Duration::from_secs(8), "took {took:?}");
    let (end, _) = h.join().unwrap().expect("the stream ended cleanly");
    assert_eq!(end, "cancelled");
    // The transcript is consistent: the user message, no half-written line.
    let p = pairs(ws, "slow");
    assert_eq!(p[0], ("user".to_string(), "never mind".to_string()));
    assert!(p.iter().all(|(_, c)| c != &answer_for("never mind")));
    // Nothing listens any more.
    assert!(queued.request("GET", "/healthz", None).is_err());
}

#[test]
fn kill_9_loses_no_answered_message_and_the_next_start_works() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = EchoLlm::start(Duration::ZERO, Duration::ZERO, 1);
    let mut gw = Gateway::start(ws, Some(&llm.url()));
    let inputs: Vec<String> = (0..3).map(|i| format!("keep {i}")).collect();
    for i in &inputs {
        post_chat(&gw.client(), "durable", i);
    }
    gw.signal(libc::SIGKILL);
    let (code, _) = gw.wait_exit(Duration::from_secs(10));
    assert_ne!(code, 0);
    // The stale discovery file is ignored.
    assert!(claw_testkit::state_dir(ws).join("gateway.json").exists());
    let status = claw(ws, None).args(["gateway", "status"]).output().unwrap();
    assert_eq!(status.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&status.stdout).contains("no gateway is running"));
    assert_eq!(pairs(ws, "durable"), expected_pairs(&inputs));

    let gw2 = Gateway::start(ws, Some(&llm.url()));
    assert_ne!(gw2.info.pid, gw.info.pid);
    assert_eq!(gw2.token, gw.token, "the token survives restarts");
    post_chat(&gw2.client(), "durable", "keep 3");
    let mut all = inputs.clone();
    all.push("keep 3".into());
    assert_eq!(pairs(ws, "durable"), expected_pairs(&all));
    // A second gateway for the same workspace refuses to start.
    let second = claw(ws, Some(&llm.url()))
        .args(["gateway", "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&second.stderr).contains("already runs"));
}

#[test]
fn install_service_writes_a_user_unit() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let out = claw(ws, None)
        .args(["gateway", "install-service"])
        .env("XDG_CONFIG_HOME", ws.join("xdg"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let unit = std::fs::read_to_string(ws.join("xdg/systemd/user/claw-gateway.service")).unwrap();
    assert!(unit.contains(" gateway --workspace "), "{unit}");
    assert!(unit.contains(&ws.display().to_string()), "{unit}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("systemctl --user enable --now claw-gateway.service"));
}

/// One turn through `claw gateway` against the real llama.cpp server, through the
/// rig's relay (called by `e2e_local_llm`, which owns the server, the relay and
/// the budget). The tiny model answers a fresh turn with one grammar-forced tool
/// call, then text. Its arguments are nonsense: assert the shape, never the
/// content. One attempt: the relay's bounds leave the model no way to run away.
pub fn real_model_turn(
    llama: &claw_testkit::llama::LlamaServer,
    relay: &claw_testkit::llama::Relay,
    deadline: Instant,
) {
    let dir = claw_testkit::llama::fixed_workspace(llama, "gateway", 0);
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    std::fs::write(ws.join("notes/today.md"), "- buy milk\n").unwrap();
    std::fs::write(
        ws.join("config.json"),
        r#"{"agent": {"max_tokens": 256, "context_window": 4096, "max_iterations": 6,
                       "confirm_side_effects": true, "jail_to_workspace": true},
             "agents": {"max_subagents": 0}}"#,
    )
    .unwrap();
    let url = relay.url();
    let mut gw = Gateway::start(ws, Some(&url));
    let mut c = gw.client();
    c.timeout = Some(deadline.saturating_duration_since(Instant::now()));
    let mut tools = Vec::new();
    let mut text = String::new();
    let r = c.chat(
        "e2e",
        "What is in my notes folder? Use a tool.",
        false,
        "test",
        |ev| match ev {
            ChatEvent::Tool(t) => tools.push(t.clone()),
            ChatEvent::Text(t) => text.push_str(t),
            _ => {}
        },
    );
    let ctx = || {
        format!(
            "the model's exchanges:\n{}\ngateway log:\n{}",
            relay.transcript(),
            gw.log()
        )
    };
    assert!(
        Instant::now() <= deadline,
        "the real-model test ran past its budget; {}",
        ctx()
    );
    let (end, why) = r.unwrap_or_else(|e| panic!("the stream did not complete ({e:?}); {}", ctx()));
    assert_eq!(end, "answered", "{why:?}; {}", ctx());
    // A tool call streamed as started, then done or error, with its id and name.
    assert!(
        !tools.is_empty(),
        "no tool activity in the stream; {}",
        ctx()
    );
    let first = &tools[0];
    let id = first["id"].as_str().unwrap();
    assert!(!id.is_empty());
    assert!(first["name"].is_string());
    assert!(first["arguments"].is_string());
    assert!(
        tools
            .iter()
            .any(|t| t["id"] == id && (t["status"] == "done" || t["status"] == "error")),
        "{tools:?}"
    );
    // The transcript: the user's message, the call, its result, the answer.
    let msgs = transcript(ws, "e2e");
    assert_eq!(msgs[0]["role"], "user");
    assert!(
        msgs.iter()
            .any(|m| m["role"] == "tool" && m["tool_call_id"] == id),
        "{msgs:?}"
    );
    let last = msgs.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert_eq!(last["content"].as_str().unwrap().trim(), text.trim());
    assert!(!text.trim().is_empty(), "{}", ctx());
    gw.signal(libc::SIGTERM);
    assert_eq!(gw.wait_exit(Duration::from_secs(15)).0, 0);
}

#[test]
fn cron_jobs_run_in_the_gateway_and_deliver_their_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = EchoLlm::start(Duration::ZERO, Duration::ZERO, 1);
    let gw = Gateway::start(ws, Some(&llm.url()));
    // Added while the gateway runs: it reads the jobs file without a restart.
    let out = claw(ws, None)
        .args([
            "cron",
            "add",
            "--every",
            "1s",
            "--message",
            "cron hello",
            "--session",
            "inbox",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let job: Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        let v: Value =
            serde_json::from_slice(&gw.client().request("GET", "/v1/status", None).unwrap().body)
                .unwrap();
        if v["cron"]["deliveries"]
            .as_array()
            .is_some_and(|d| !d.is_empty())
        {
            break v;
        }
        assert!(Instant::now() < deadline, "no delivery: {v}\n{}", gw.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    let d = &status["cron"]["deliveries"][0];
    assert_eq!(d["session"], "inbox");
    assert_eq!(d["content"], answer_for("cron hello"));
    assert_eq!(status["cron"]["jobs"], 1);
    assert_eq!(status["cron"]["next_runs"][0]["id"], id.as_str());
    // The turn ran in the job's own session.
    let p = pairs(ws, &format!("cron:{id}"));
    assert_eq!(p[..2], expected_pairs(&["cron hello".into()])[..]);
    assert!(
        gw.log().contains(&format!("cron: job {id} fired")),
        "{}",
        gw.log()
    );
}
