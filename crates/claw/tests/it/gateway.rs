//! `claw gateway` as a real process against an OpenAI-compatible LLM server that
//! echoes each message (`claw_testkit::echo_llm`): the CLI routed through the
//! gateway (output identical to `--local`), a load of 50 sessions × 5 messages
//! (each answered once, in order, transcripts without lost or duplicated lines;
//! throughput and the gateway's overhead printed — the same code as
//! `examples/gateway_bench load`, whose figures BENCHMARKS.md gives), SIGTERM during a streaming turn (exit
//! 0 within the grace period, transcript intact), SIGTERM past the grace period
//! (the turn is cancelled, exit 0) and `kill -9` (nothing answered is lost, the
//! next start works), `install-service`, cron jobs run by the gateway, a channel
//! whose token variable is unset; and one turn end to end against the real
//! llama.cpp server (`real_model_turn`, run by `e2e_local_llm` on its server,
//! through its relay, within its budget). The HTTP API itself, its connection
//! hygiene, channels in the gateway and WebChat are tested in-process in
//! `claw-gateway`; the channels in `claw-channels`.

use claw_gateway::client::{ChatEvent, Client};
use claw_gateway::discovery::{self, GatewayInfo};
use claw_gateway::token::Token;
use claw_testkit::LlmEnv;
use claw_testkit::echo_llm::{EchoLlm, answer_for, expected_pairs};
use claw_testkit::gateway_http;
use claw_testkit::gateway_proc::GatewayProc;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../../gateway/tests/it/client_support.rs"]
mod client_support;
use client_support::{post_chat, stream_turn, streamed_text};

/// `claw` with a clean environment, keyword-only memory, the echo LLM.
pub fn claw(ws: &Path, llm: Option<&str>) -> Command {
    claw_env(ws, llm, false)
}

/// `claw` with a clean environment and the echo LLM; `model`: the real local
/// embedding model (else keyword-only).
pub fn claw_env(ws: &Path, llm: Option<&str>, model: bool) -> Command {
    let mut c = if model {
        claw_testkit::claw(ws)
    } else {
        claw_testkit::claw_keyword_only(ws)
    };
    c.env("TZ", "UTC");
    if let Some(url) = llm {
        c.openai_llm(url, "echo");
    }
    if ws.join("config.json").is_file() {
        c.env("CLAW_CONFIG", ws.join("config.json"));
    }
    c
}

/// `claw --session <session>` (the REPL, routed to the running gateway) fed
/// `input` on its standard input, run to its end.
pub fn repl(ws: &Path, llm: Option<&str>, session: &str, input: &[u8]) -> Output {
    let mut child = claw(ws, llm)
        .args(["--session", session])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

/// A fresh workspace, an instant one-piece echo LLM and the gateway over both.
pub fn echo_gateway() -> (tempfile::TempDir, EchoLlm, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let llm = EchoLlm::start(Duration::ZERO, Duration::ZERO, 1);
    let gw = Gateway::start(dir.path(), Some(&llm.url()));
    (dir, llm, gw)
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

/// The messages of session `key`'s transcript.
fn transcript(ws: &Path, key: &str) -> Vec<Value> {
    gateway_http::transcript(&transcript_path(ws, key))
}

/// (role, content) of the user/assistant messages of session `key`'s transcript.
fn pairs(ws: &Path, key: &str) -> Vec<(String, String)> {
    gateway_http::pairs(&transcript_path(ws, key))
}

fn transcript_path(ws: &Path, key: &str) -> std::path::PathBuf {
    ws.join("sessions")
        .join(claw_agent::session::file_name_for_key(key))
}

#[test]
fn the_cli_through_the_gateway_prints_what_the_local_run_prints() {
    let dir = claw_testkit::workspace(&[(
        "memory/2026-11-02.md",
        "# Webhooks\n\nThe payment webhook retried forever because the handler timed out.\n",
    )]);
    let ws = dir.path();
    let out = claw(ws, None).args(["memory", "index"]).output().unwrap();
    assert!(out.status.success());
    let llm = EchoLlm::start(Duration::ZERO, Duration::ZERO, 1);
    let gw = Gateway::start(ws, Some(&llm.url()));

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
    assert_eq!(status["turns"]["finished"], 1, "{status}");

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
    let text: String = streamed_text(&rx);
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
    let dir = claw_testkit::workspace(&[("config.json", r#"{"gateway": {"grace_seconds": 1}}"#)]);
    let ws = dir.path();
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
    let (dir, llm, mut gw) = echo_gateway();
    let ws = dir.path();
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

/// The unit carries the setup of the shell that installed it: an environment
/// file (0600) with the LLM, the model and the tokens the config names, loaded
/// by `EnvironmentFile=`, and `systemd-analyze verify` accepts the unit (with a
/// positive control: a broken `EnvironmentFile=` line is reported).
#[test]
fn install_service_writes_the_environment_and_verifies() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("my ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"channels": {"telegram": {"token_env": "MY_TG_TOKEN", "allow_from": ["42"]}}}"#,
    )
    .unwrap();
    let unit_path = dir.path().join("units dir/claw-gateway.service");
    let out = claw(&ws, None)
        .env("CLAW_CONFIG", &cfg)
        .env("CLAW_LLM_API", "openai")
        .env("CLAW_LLM_BASE_URL", "http://127.0.0.1:9/v1")
        .env("CLAW_LLM_MODEL", "tiny")
        .env("CLAW_LLM_API_KEY", "sk-\"quoted\\key")
        .env("MY_TG_TOKEN", "123:abc")
        .env("UNRELATED_SECRET", "nope")
        .args(["gateway", "install-service", "--output"])
        .arg(&unit_path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let env_path = unit_path.with_extension("env");
    let mode = std::fs::metadata(&env_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let env = std::fs::read_to_string(&env_path).unwrap();
    for line in [
        "CLAW_LLM_API=\"openai\"",
        "CLAW_LLM_MODEL=\"tiny\"",
        "CLAW_LLM_API_KEY=\"sk-\\\"quoted\\\\key\"",
        "MY_TG_TOKEN=\"123:abc\"",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} not in\n{env}");
    }
    assert!(!env.contains("UNRELATED_SECRET"), "{env}");
    assert!(
        !env.contains("CLAW_WORKSPACE"),
        "the unit passes it as a flag: {env}"
    );
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    assert!(
        unit.contains(&format!(
            "EnvironmentFile={}",
            env_path.display().to_string().replace(' ', "\\x20")
        )),
        "{unit}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("MY_TG_TOKEN") && !stdout.contains("123:abc"),
        "{stdout}"
    );
    // systemd's own check, when this machine has it (CI does: it must).
    let verify = |p: &std::path::Path| {
        std::process::Command::new("systemd-analyze")
            .arg("verify")
            .arg(p)
            .output()
    };
    match verify(&unit_path) {
        Ok(v) => {
            let err = String::from_utf8_lossy(&v.stderr);
            assert!(v.status.success() && err.trim().is_empty(), "{err}");
            // Positive control: a quoted path is one systemd ignores, loudly.
            let bad = dir.path().join("bad.service");
            std::fs::write(
                &bad,
                unit.replace("EnvironmentFile=", "EnvironmentFile=\"")
                    .replace(".env\n", ".env\"\n"),
            )
            .unwrap();
            let v = verify(&bad).unwrap();
            let err = String::from_utf8_lossy(&v.stderr);
            assert!(err.contains("EnvironmentFile"), "{err}");
        }
        Err(e) => assert!(
            std::env::var("CI").is_err(),
            "systemd-analyze is missing under CI: {e}"
        ),
    }
}

/// One turn through `claw gateway` against the real llama.cpp server, through the
/// rig's relay (called by `e2e_local_llm`, which owns the server, the relay and
/// the budget). The tiny model answers a fresh turn with one grammar-forced tool
/// call, then text. Its arguments are nonsense: assert the shape, never the
/// content. One attempt: the relay's bounds leave the model no way to run away.
pub fn real_model_turn(
    llama: &claw_testkit::llama::LlamaServer,
    relay: &claw_testkit::llama::Relay,
    budget: &claw_testkit::llama::Budget,
) {
    let dir = claw_testkit::llama::fixed_workspace(llama, "gateway", 0);
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    std::fs::write(ws.join("notes/today.md"), "- buy milk\n").unwrap();
    std::fs::write(
        ws.join("config.json"),
        claw_testkit::llama::SMALL_MODEL_CONFIG,
    )
    .unwrap();
    let url = relay.url();
    let mut gw = Gateway::start(ws, Some(&url));
    let mut c = gw.client();
    c.timeout = Some(budget.deadline().saturating_duration_since(Instant::now()));
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
    if let Some(why) = budget.exceeded() {
        panic!("the real-model test ran past its budget: {why}; {}", ctx());
    }
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
    let (dir, _llm, gw) = echo_gateway();
    let ws = dir.path();
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

/// A configured channel whose token variable is not set: `claw gateway`
/// refuses to start, naming the variable.
#[test]
fn gateway_refuses_to_start_without_a_channel_token() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("config.json"),
        json!({"channels": {"telegram": {"token_env": "CLAW_TG_TOKEN", "allow_from": ["42"],
            "base_url": "http://127.0.0.1:9"}}})
        .to_string(),
    )
    .unwrap();
    let llm = EchoLlm::start(Duration::ZERO, Duration::ZERO, 1);
    let out = claw(ws, Some(&llm.url()))
        .args(["gateway", "--port", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CLAW_TG_TOKEN"), "{err}");
}
