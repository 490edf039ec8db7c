//! SSRF through the real `claw -m` binary: a scripted LLM asks for `web_fetch`
//! of a page on 127.0.0.1. Without configuration the tool result the model gets
//! is the guard's refusal and the page server sees no request; with
//! `{"web": {"allow_private": true}}` in the config file the page comes through.
//! A misspelt key in the `web` section is an error naming it.

use claw_testkit::route_server as ssrf_support;
use claw_testkit::scripted_server;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use scripted_server::{ScriptedServer, openai};
use ssrf_support::{Route, RouteServer};

fn claw(ws: &Path, llm: &str, config: Option<&Path>) -> Command {
    let mut c = claw_testkit::claw_llm(ws, llm);
    c.stdin(Stdio::null());
    if let Some(cfg) = config {
        c.env("CLAW_CONFIG", cfg);
    }
    c
}

/// Runs one `-m` turn in which the model fetches `url`; returns the run and
/// the tool result the model received.
fn turn(ws: &Path, url: &str, config: Option<&Path>) -> (Output, String) {
    let args = serde_json::json!({ "url": url }).to_string();
    let llm = ScriptedServer::start([
        openai::tool_call("call_1", "web_fetch", &[&args]),
        openai::text(&["done"]),
    ]);
    let out = claw(ws, &llm.url(), config)
        // No terminal to confirm a fetch from a new host: allow it, so the
        // SSRF guard is what decides.
        .args(["--yes", "-m", "fetch it"])
        .output()
        .expect("run claw");
    let reqs = llm.requests();
    // The last tool message: earlier turns of the session are replayed first.
    let tool_result = reqs
        .get(1)
        .and_then(|r| r.last_tool_result())
        .unwrap_or_default();
    (out, tool_result)
}

#[test]
fn loopback_fetch_is_refused_by_default_and_allowed_by_config() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let page = RouteServer::start("127.0.0.1:0");
    page.route("/", Route::Page("INTERNAL DASHBOARD".into()));

    let (out, result) = turn(ws, &page.url("/"), None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        result.contains("refused URL")
            && result.contains("127.0.0.1 is a loopback address; set web.allow_private to allow"),
        "tool result: {result}"
    );
    assert!(page.hits().is_empty(), "reached: {:?}", page.hits());

    let cfg = ws.join("config.json");
    std::fs::write(&cfg, r#"{"web": {"allow_private": true}}"#).unwrap();
    let (out, result) = turn(ws, &page.url("/"), Some(&cfg));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        result.contains("INTERNAL DASHBOARD"),
        "tool result: {result}"
    );
    assert_eq!(page.hits(), vec!["/".to_string()]);

    std::fs::write(&cfg, r#"{"web": {"allow_private": false}}"#).unwrap();
    let (_, result) = turn(ws, &page.url("/"), Some(&cfg));
    assert!(result.contains("refused URL"), "tool result: {result}");
    assert_eq!(page.hits().len(), 1);
}

#[test]
fn misspelt_web_key_is_an_error_naming_it() {
    let dir = claw_testkit::workspace(&[("config.json", r#"{"web": {"allow_privat": true}}"#)]);
    let ws = dir.path();
    let cfg = ws.join("config.json");
    let out = claw(ws, "http://127.0.0.1:9", Some(&cfg))
        .args(["-m", "hi"])
        .output()
        .expect("run claw");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("allow_privat"), "{stderr}");
}
