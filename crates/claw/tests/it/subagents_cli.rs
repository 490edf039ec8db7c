//! Sub-agents through the real `claw` binary against a content-routed
//! OpenAI-compatible server (children run concurrently, so replies are chosen by
//! what each request says, not by arrival order): `claw -m` waits for its
//! children and announces them in a parent turn; spawns beyond
//! `agents.max_subagents` queue; a child's tool set never has `spawn`/`cron`
//! and honours its allow-list; in the REPL a fan-out of four ends done, failed,
//! timed out and cancelled by `/stop`, each announced into a parent turn, and
//! `/agents` lists them.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the router answers.
enum R {
    Text(u64, String),
    Spawns(Vec<Value>),
    Error(u64, u16),
}

type Route = Arc<dyn Fn(&Value) -> R + Send + Sync>;

struct Router {
    url: String,
    seen: Arc<Mutex<Vec<Value>>>,
    /// Most child requests in flight at once.
    peak_children: Arc<Mutex<(usize, usize)>>,
}

fn last_user(req: &Value) -> String {
    req["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

fn has_tool_result(req: &Value) -> bool {
    req["messages"]
        .as_array()
        .is_some_and(|m| m.last().is_some_and(|m| m["role"] == "tool"))
}

fn tool_names(req: &Value) -> Vec<String> {
    req["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn is_child(req: &Value) -> bool {
    last_user(req).starts_with("TASK-")
}

impl Router {
    fn start(route: Route) -> Router {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let peak = Arc::new(Mutex::new((0usize, 0usize)));
        let (s, p) = (seen.clone(), peak.clone());
        std::thread::spawn(move || {
            for sock in listener.incoming().flatten() {
                let (route, s, p) = (route.clone(), s.clone(), p.clone());
                std::thread::spawn(move || serve(sock, &route, &s, &p));
            }
        });
        Router {
            url,
            seen,
            peak_children: peak,
        }
    }

    fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    fn wait_for(&self, what: &str, f: impl Fn(&[Value]) -> bool) {
        let start = Instant::now();
        while !f(&self.seen()) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn serve(
    mut sock: TcpStream,
    route: &Route,
    seen: &Mutex<Vec<Value>>,
    peak: &Mutex<(usize, usize)>,
) {
    let mut reader = BufReader::new(sock.try_clone().unwrap());
    let mut len = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let l = line.trim();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push(req.clone());
    let child = is_child(&req);
    if child {
        let mut p = peak.lock().unwrap();
        p.0 += 1;
        p.1 = p.1.max(p.0);
    }
    let reply = route(&req);
    let chunk = |delta: Value, finish: Option<&str>| {
        format!(
            "data: {}\n\n",
            json!({"id": "c", "object": "chat.completion.chunk", "model": "routed",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    let out = match reply {
        R::Error(delay, status) => {
            std::thread::sleep(Duration::from_millis(delay));
            format!(
                "HTTP/1.1 {status} Bad Request\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n{}",
                json!({"error": {"message": "scripted failure", "type": "invalid_request_error"}})
            )
        }
        R::Text(delay, text) => {
            std::thread::sleep(Duration::from_millis(delay));
            let mut s = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            );
            s += &chunk(json!({"role": "assistant", "content": text}), None);
            s += &chunk(json!({}), Some("stop"));
            s += "data: [DONE]\n\n";
            s
        }
        R::Spawns(args) => {
            let mut s = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
            );
            let calls: Vec<Value> = args
                .iter()
                .enumerate()
                .map(|(i, a)| {
                    json!({"index": i, "id": format!("s{i}"), "type": "function",
                    "function": {"name": "spawn", "arguments": a.to_string()}})
                })
                .collect();
            s += &chunk(
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
                None,
            );
            s += &chunk(json!({}), Some("tool_calls"));
            s += "data: [DONE]\n\n";
            s
        }
    };
    let _ = sock.write_all(out.as_bytes());
    let _ = sock.flush();
    if child {
        peak.lock().unwrap().0 -= 1;
    }
}

fn claw(ws: &Path, llm: &str, config: &Value) -> Command {
    claw_testkit::claw_scripted(ws, llm, config)
}

/// Parent: spawn on the first request, "started" after the spawn results,
/// "ack: …" for an announcement turn.
fn parent(req: &Value, spawns: &[Value]) -> R {
    let user = last_user(req);
    if user.starts_with("[system: sub-agent") {
        R::Text(0, format!("ack {}", user.lines().next().unwrap_or("")))
    } else if has_tool_result(req) {
        R::Text(0, "started".into())
    } else {
        R::Spawns(spawns.to_vec())
    }
}

#[test]
fn one_shot_waits_for_children_queues_beyond_the_cap_and_restricts_their_tools() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let spawns = vec![
        json!({"task": "TASK-A list everything", "label": "a"}),
        json!({"task": "TASK-B read only", "label": "b", "tools": ["read_file", "spawn"]}),
    ];
    let route: Route = Arc::new(move |req: &Value| {
        let user = last_user(req);
        match user.as_str() {
            u if u.starts_with("TASK-A") => R::Text(300, "result of A".into()),
            u if u.starts_with("TASK-B") => R::Text(0, "result of B".into()),
            _ => parent(req, &spawns),
        }
    });
    let llm = Router::start(route);
    let out = claw(
        ws,
        &llm.url,
        &json!({"agents": {"max_subagents": 1, "subagent_timeout_secs": 20}}),
    )
    .stdin(Stdio::null())
    .args(["--yes", "-m", "fan out"])
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.starts_with("started\n"), "{stdout}");
    assert!(stdout.contains("ack [system: sub-agent"), "{stdout}");

    let seen = llm.seen();
    // The parent's follow-up after the spawns: the second one was queued.
    let after = seen
        .iter()
        .find(|r| !is_child(r) && has_tool_result(r))
        .unwrap();
    let results = claw_testkit::scripted_server::tool_contents(after);
    assert!(results[0].contains("is running"), "{results:?}");
    assert!(results[1].contains("is queued"), "{results:?}");
    assert_eq!(llm.peak_children.lock().unwrap().1, 1, "the cap of 1 held");

    // Tool sets: the parent offers spawn; children never spawn or cron; B only read_file.
    let parent_tools = tool_names(&seen[0]);
    assert!(
        parent_tools.contains(&"spawn".to_string()),
        "{parent_tools:?}"
    );
    let child = |p: &str| {
        seen.iter()
            .find(|r| last_user(r).starts_with(p))
            .map(tool_names)
            .unwrap()
    };
    let a = child("TASK-A");
    assert!(a.contains(&"exec".to_string()), "{a:?}");
    for banned in ["spawn", "cron", "message"] {
        assert!(!a.iter().any(|t| t == banned), "{banned} in {a:?}");
    }
    assert_eq!(child("TASK-B"), vec!["read_file".to_string()]);

    // Both results reached the parent (one turn after both finished).
    let announced: Vec<String> = seen
        .iter()
        .filter(|r| last_user(r).starts_with("[system: sub-agent"))
        .map(last_user)
        .collect();
    let all = announced.join("\n");
    assert!(
        all.contains("result of A") && all.contains("result of B"),
        "{all}"
    );
    assert!(
        all.contains("\"a\" done") && all.contains("\"b\" done"),
        "{all}"
    );
    // Each child kept its own transcript.
    let sessions = std::fs::read_dir(ws.join("sessions")).unwrap();
    let names: Vec<String> = sessions
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.iter().filter(|n| n.starts_with("subagent_")).count(),
        2,
        "{names:?}"
    );
}

#[test]
fn repl_fan_out_done_failed_timed_out_and_stopped_each_announced() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    // Spawns in one message start in parallel, so which of them would queue is
    // a race: the three first ones fit the cap, and `hang` is spawned by the
    // parent's turn for slow's timeout, so it runs a whole budget after slow
    // started and /stop reaches it long before its own budget ends.
    let spawns = vec![
        json!({"task": "TASK-OK", "label": "ok"}),
        json!({"task": "TASK-FAIL", "label": "fail"}),
        json!({"task": "TASK-SLOW", "label": "slow"}),
    ];
    let hang = vec![json!({"task": "TASK-HANG", "label": "hang"})];
    let route: Route = Arc::new(move |req: &Value| {
        let user = last_user(req);
        match user.as_str() {
            "TASK-OK" => R::Text(1_000, "ok result".into()),
            "TASK-FAIL" => R::Error(1_000, 400),
            "TASK-SLOW" => R::Text(60_000, "too late".into()),
            "TASK-HANG" => R::Text(60_000, "never".into()),
            _ if user.starts_with("[system: sub-agent")
                && user.contains("\"slow\" failed")
                && !has_tool_result(req) =>
            {
                R::Spawns(hang.clone())
            }
            _ => parent(req, &spawns),
        }
    });
    let llm = Router::start(route);
    let mut child = claw(
        ws,
        &llm.url,
        &json!({"agents": {"max_subagents": 3, "subagent_timeout_secs": 6}}),
    )
    .arg("--yes")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "fan out").unwrap();
    // ok, fail and the timeout (6 s) are announced, and hang runs.
    let announced = |s: &[Value], what: &str| {
        s.iter()
            .any(|r| last_user(r).starts_with("[system: sub-agent") && last_user(r).contains(what))
    };
    llm.wait_for("ok, fail and slow announced, and hang running", |s| {
        announced(s, "\"ok\" done")
            && announced(s, "\"fail\" failed")
            && announced(s, "\"slow\" failed")
            && s.iter().any(|r| last_user(r) == "TASK-HANG")
    });
    writeln!(stdin, "/stop").unwrap();
    llm.wait_for("the cancellation's announcement", |s| {
        announced(s, "\"hang\" cancelled")
    });
    // Let the announcement turn finish before listing.
    std::thread::sleep(Duration::from_millis(500));
    writeln!(stdin, "/agents").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);

    let seen = llm.seen();
    let texts: Vec<String> = seen
        .iter()
        .filter(|r| last_user(r).starts_with("[system: sub-agent"))
        .map(last_user)
        .collect();
    let find = |label: &str| {
        texts
            .iter()
            .find(|t| t.contains(&format!("\"{label}\"")))
            .cloned()
            .unwrap_or_else(|| panic!("no announcement for {label}: {texts:?}"))
    };
    assert!(find("ok").contains("\"ok\" done") && find("ok").contains("ok result"));
    assert!(find("fail").contains("\"fail\" failed"), "{}", find("fail"));
    assert!(
        find("slow").contains("\"slow\" failed") && find("slow").contains("timed out after 6 s"),
        "{}",
        find("slow")
    );
    assert!(
        find("hang").contains("\"hang\" cancelled"),
        "{}\nrequests: {:#?}\nstdout: {stdout}\nstderr: {stderr}",
        find("hang"),
        seen.iter()
            .map(|r| (last_user(r), is_child(r)))
            .collect::<Vec<_>>()
    );
    for (label, state) in [
        ("ok", "done"),
        ("fail", "failed"),
        ("slow", "failed"),
        ("hang", "cancelled"),
    ] {
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(state) && l.contains(label) && l.contains("subagent:")),
            "/agents lists {label} as {state}: {stdout}\n{stderr}"
        );
    }
    assert!(stdout.contains("ack [system: sub-agent"), "{stdout}");
}

/// `claw gateway` whose model has session `key`'s turn (`fan out`) spawn one
/// child (`task`, `label`), which the model answers `reply` after `delay_ms`;
/// the parent's turn has been answered.
fn gateway_with_a_child(
    ws: &Path,
    timeout_secs: u64,
    (task, label): (&'static str, &str),
    (delay_ms, reply): (u64, &'static str),
    key: &str,
) -> (crate::gateway::Gateway, Router) {
    std::fs::write(
        ws.join("config.json"),
        json!({"agents": {"max_subagents": 2, "subagent_timeout_secs": timeout_secs}}).to_string(),
    )
    .unwrap();
    let prefix = task.split_whitespace().next().unwrap();
    let spawns = vec![json!({"task": task, "label": label})];
    let route: Route = Arc::new(move |req: &Value| {
        if last_user(req).starts_with(prefix) {
            R::Text(delay_ms, reply.into())
        } else {
            parent(req, &spawns)
        }
    });
    let llm = Router::start(route);
    let gw = crate::gateway::Gateway::start(ws, Some(&llm.url));
    let (end, why) = gw
        .client()
        .chat(key, "fan out", true, "http", |_| {})
        .expect("chat through the gateway");
    assert_eq!(end, "answered", "{why:?}");
    (gw, llm)
}

#[test]
fn the_gateway_runs_children_in_its_session_worker_and_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (gw, llm) = gateway_with_a_child(
        ws,
        20,
        ("TASK-GW summarise", "gw"),
        (200, "gateway child result"),
        "api:fan",
    );
    let client = gw.client();
    // The child's announcement starts a parent turn inside the gateway.
    llm.wait_for("the announcement turn", |s| {
        s.iter().any(|r| {
            last_user(r).starts_with("[system: sub-agent")
                && last_user(r).contains("gateway child result")
        })
    });
    let start = Instant::now();
    let listed = loop {
        let r = client
            .request("GET", "/v1/sessions/api:fan/subagents", None)
            .expect("list sub-agents");
        assert_eq!(r.status, 200);
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if v["data"][0]["state"] == "done" {
            break v;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(listed["session"], "api:fan");
    let child = &listed["data"][0];
    assert_eq!(child["label"], "gw");
    assert_eq!(child["result"], "gateway child result");
    assert!(child["session"].as_str().unwrap().starts_with("subagent:"));
    let none = client
        .request("GET", "/v1/sessions/nobody/subagents", None)
        .unwrap();
    let v: Value = serde_json::from_slice(&none.body).unwrap();
    assert_eq!(v["data"], json!([]));
}

#[test]
fn the_gateway_cancel_endpoint_stops_a_sessions_children() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (gw, llm) = gateway_with_a_child(
        ws,
        120,
        ("TASK-SLOW think for a long time", "slow"),
        (60_000, "too late"),
        "api:slow",
    );
    let client = gw.client();
    llm.wait_for("the child's request", |s| {
        s.iter().any(|r| last_user(r).starts_with("TASK-SLOW"))
    });
    let r = client
        .request("POST", "/v1/sessions/api:slow/cancel", None)
        .expect("cancel");
    assert_eq!(r.status, 200);
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["subagents_cancelled"], 1, "{v}");
    let start = Instant::now();
    loop {
        let r = client
            .request("GET", "/v1/sessions/api:slow/subagents", None)
            .expect("list sub-agents");
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        if v["data"][0]["state"] == "cancelled" {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{v}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Announced back into the parent, never lost.
    llm.wait_for("the cancellation announced", |s| {
        s.iter().any(|r| {
            let u = last_user(r);
            u.starts_with("[system: sub-agent") && u.contains("cancel")
        })
    });
    // Nothing left to cancel.
    let r = client
        .request("POST", "/v1/sessions/api:slow/cancel", None)
        .unwrap();
    let v: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["subagents_cancelled"], 0, "{v}");
}
