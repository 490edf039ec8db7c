//! The log subscriber as a user meets it: `claw gateway` writes its lines on
//! stderr as text by default (no colour escapes when stderr is not a terminal)
//! and as one JSON object a line under `--log-format json`; `RUST_LOG` filters
//! them.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Run `claw gateway --port 0 <args>` until it says it listens, then stop it
/// with SIGTERM; its stderr, whole.
fn gateway_log(ws: &Path, args: &[&str], rust_log: Option<&str>) -> String {
    let mut c = claw_testkit::claw_keyword_only(ws);
    c.args(["gateway", "--port", "0"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(f) = rust_log {
        c.env("RUST_LOG", f);
    }
    let mut child = c.spawn().expect("spawn claw gateway");
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().expect("stderr");
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let state = claw_testkit::state_dir(ws);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut log = Vec::new();
    while claw_gateway::discovery::read_live(&state).is_none() {
        assert!(
            Instant::now() < deadline,
            "the gateway did not start: {log:?}"
        );
        log.extend(rx.try_iter());
        std::thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status:?}: {log:?}");
    log.extend(rx.iter());
    log.join("\n") + "\n"
}

#[test]
fn gateway_logs_are_text_by_default_json_on_request_and_follow_rust_log() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();

    let text = gateway_log(ws, &[], None);
    let listening = text
        .lines()
        .find(|l| l.contains("listening on"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        listening.contains(" INFO claw_gateway: listening on http://127.0.0.1:"),
        "{listening}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no colour escapes into a pipe: {text:?}"
    );

    let json = gateway_log(ws, &["--log-format", "json"], None);
    let lines: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let listening = lines
        .iter()
        .find(|v| {
            v["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("listening on"))
        })
        .unwrap_or_else(|| panic!("{json}"));
    assert_eq!(listening["level"], "INFO");
    assert_eq!(listening["target"], "claw_gateway");
    assert!(
        listening["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );

    // RUST_LOG replaces the default: errors only, so the info lines go.
    let quiet = gateway_log(ws, &[], Some("error"));
    assert!(!quiet.contains("listening on"), "{quiet}");
}

#[test]
fn an_unknown_log_format_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = claw_testkit::claw_keyword_only(dir.path())
        .args(["gateway", "--log-format", "xml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("xml"));
}
