//! The gateway's `/mcp`: claw's memory as an MCP server over streamable HTTP,
//! mounted on `claw gateway` behind its bearer token and sharing its warm
//! engine. Driven by a client claw did not write — the official Python MCP SDK
//! (PyPI `mcp`, from `scripts/setup-mcp.sh`) through `gateway_mcp_client.py`:
//! initialize, list tools, `memory_search` (the CLI's exact JSON as
//! `structuredContent`) and `memory_get`. Without the token (or with a wrong
//! one) `/mcp` answers 401 like every other API route.

use super::gateway::{Gateway, claw};
use claw_gateway::client::Client;
use claw_gateway::token::Token;
use claw_testkit::{mcp_peers, write_tree};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;

const QUERY: &str = mcp_peers::MCP_QUERY;

fn fixture(ws: &Path) {
    write_tree(ws, mcp_peers::MCP_NOTES);
    let out = claw(ws, None).args(["memory", "index"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The raw status line of a request to `/mcp` with `auth` (or none).
fn raw_status(port: u16, auth: Option<&str>) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or_default().to_string()
}

/// Runs the Python client against `url`; its JSON report.
pub fn python_client(url: &str, token: &str, extra: &[&str]) -> Value {
    let out = claw_testkit::run_ok(
        Command::new(mcp_peers::python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/gateway_mcp_client.py"))
            .args([url, token, QUERY])
            .args(extra),
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "python client printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Timings differ from call to call; everything else must be identical.
fn without_timings(mut v: Value) -> Value {
    if let Some(sync) = v.get_mut("sync").and_then(Value::as_object_mut) {
        for k in ["checked_ms", "elapsed_ms"] {
            if sync.contains_key(k) {
                sync.insert(k.into(), Value::from(0));
            }
        }
    }
    v
}

#[test]
fn the_python_sdk_searches_memory_through_the_gateways_mcp() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    fixture(ws);
    let gw = Gateway::start(ws, None);
    let (info, token) = (gw.info.clone(), gw.token.clone());

    // Without the token, or with a wrong one: 401, before any MCP work.
    assert!(raw_status(info.port, None).contains(" 401 "));
    assert!(raw_status(info.port, Some("Bearer not-the-token")).contains(" 401 "));
    let wrong = Client::new(info.clone(), Token::new("not-the-token"));
    let r = wrong
        .request_with("POST", "/mcp", Some(b"{}"), &[])
        .unwrap();
    assert_eq!(r.status, 401);
    // With it, the MCP transport answers (a bare POST without a session is a
    // protocol error, not an auth error).
    assert!(!raw_status(info.port, Some(&format!("Bearer {token}"))).contains(" 401 "));

    // The REST memory endpoints share one extractor: a bad body is a 400
    // naming the problem, a good one the CLI's JSON.
    let ok = Client::new(info.clone(), Token::new(token.clone()));
    for path in ["/v1/memory/search", "/v1/memory/get"] {
        let r = ok
            .request_with("POST", path, Some(br#"{"qury": "x"}"#), &[])
            .unwrap();
        assert_eq!(r.status, 400, "{path}");
        let v: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["error"]["kind"], "invalid_request_error", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains("qury"),
            "{v}"
        );
    }
    let r = ok
        .request_with(
            "POST",
            "/v1/memory/get",
            Some(br#"{"path": "MEMORY.md"}"#),
            &[],
        )
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    let url = format!("http://127.0.0.1:{}/mcp", info.port);
    let r = python_client(&url, &token, &[]);
    assert_eq!(r["server"]["name"], "claw", "{r}");
    let tools: Vec<&str> = r["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        tools,
        [
            "memory_append",
            "memory_get",
            "memory_search",
            "memory_status"
        ]
    );

    // `memory_search`'s structured content is the CLI's `--json` object.
    let search = &r["search"];
    assert_ne!(search["isError"], true, "{search}");
    let hits = search["structuredContent"]["results"].as_array().unwrap();
    assert!(!hits.is_empty(), "{search}");
    assert_eq!(hits[0]["path"], "memory/2026-11-02.md", "{search}");
    let cli = claw(ws, None)
        .args([
            "memory", "search", QUERY, "--limit", "3", "--json", "--local",
        ])
        .output()
        .unwrap();
    assert!(cli.status.success(), "{cli:?}");
    let cli: Value = serde_json::from_slice(&cli.stdout).unwrap();
    // The scores agree to 1e-4, not exactly: the pinned clock (`CLAW_NOW`) still
    // advances, from the gateway's start for its answer and from the CLI's for
    // the CLI's, so a dated note's recency decay differs by the seconds between
    // (0.980578 against 0.980579 on a loaded machine).
    let (mut mcp, mut cli) = (search["structuredContent"].clone(), cli);
    let scores = |v: &mut Value| -> Vec<f64> {
        v["results"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .map(|h| h["score"].take().as_f64().unwrap())
            .collect()
    };
    let (a, b) = (scores(&mut mcp), scores(&mut cli));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-4, "{a:?} vs {b:?}");
    }
    assert_eq!(without_timings(mcp), without_timings(cli));
    let text = search["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("memory/2026-11-02.md#L"), "{text}");

    // `memory_get` reads lines of an indexed note.
    let get = &r["get"];
    assert_eq!(get["structuredContent"]["path"], "memory/2026-11-02.md");
    assert_eq!(get["structuredContent"]["from"], 1);
    assert!(
        get["structuredContent"]["text"]
            .as_str()
            .unwrap()
            .starts_with("# 2026-11-02"),
        "{get}"
    );
}
