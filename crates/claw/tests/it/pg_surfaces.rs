//! One memory, every surface, on `memory.backend: postgres`: two workspaces share
//! a namespace, and workspace A reaches workspace B's notes through every door —
//! the CLI (index → search → get → status), `claw memory watch` (an edit in A is
//! written to PostgreSQL and B's search finds it without syncing), `claw gateway`
//! (`/v1/memory/search`, `/v1/memory/get`, `/v1/memory/files`, `/v1/memory/status`, and `/v1/chat/completions` whose
//! scripted model calls `memory_search`) and `claw mcp` (`memory_search`,
//! `memory_status`). The JSON shapes are the SQLite ones: the same keys.
//! Needs `CLAW_PG_URL`; under `CI=true` a missing server fails.

use claw_gateway::client::Client;
use claw_gateway::discovery;
use claw_gateway::token::Token;
use claw_testkit::claw_keyword_only;
use claw_testkit::gateway_proc::GatewayProc;
use claw_testkit::pg::TestSchema;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use claw_testkit::{LineChild, LlmEnv};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Keyword-only `claw` in `ws` on the shared backend.
pub(crate) fn claw(ws: &Path, cfg: &Path, url: &str) -> Command {
    let mut c = claw_keyword_only(ws);
    c.env("CLAW_PG_URL", url).env("CLAW_CONFIG", cfg);
    c
}

/// `args`' JSON output; exit 0, or 1 (nothing found) for a search.
fn run_json(mut c: Command, args: &[&str]) -> Value {
    let out = c.args(args).output().unwrap();
    let nothing_found = args.contains(&"search") && out.status.code() == Some(1);
    assert!(
        out.status.success() || nothing_found,
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect()
}

fn paths(search: &Value) -> Vec<String> {
    search["results"]
        .as_array()
        .unwrap_or_else(|| panic!("{search}"))
        .iter()
        .map(|h| h["path"].as_str().unwrap().to_string())
        .collect()
}

pub(crate) struct Setup {
    _pgs: TestSchema,
    _dir: tempfile::TempDir,
    pub(crate) url: String,
    pub(crate) cfg: PathBuf,
    pub(crate) a: PathBuf,
    pub(crate) b: PathBuf,
}

/// Two workspaces in one namespace, both indexed: A's MEMORY.md about the
/// quokka, B's note about the platypus.
pub(crate) fn setup(tag: &str) -> Option<Setup> {
    let (pgs, dir, cfg) = TestSchema::with_team_config(tag)?;
    let (a, b) = (dir.path().join("laptop"), dir.path().join("server"));
    std::fs::create_dir_all(a.join("memory")).unwrap();
    claw_testkit::write_tree(
        dir.path(),
        &[
            (
                "laptop/MEMORY.md",
                "# Memory\n\n## Travel\nThe quokka colony lives on Rottnest Island.\n",
            ),
            (
                "server/memory/wildlife.md",
                "# Wildlife\nThe platypus we saw hunts in the Derwent river near Hobart.\n",
            ),
        ],
    );
    let url = pgs.url.clone();
    for ws in [&a, &b] {
        let r = run_json(claw(ws, &cfg, &url), &["memory", "index", "--json"]);
        assert_eq!(r["files_changed"], 1, "{r}");
    }
    Some(Setup {
        _pgs: pgs,
        _dir: dir,
        url,
        cfg,
        a,
        b,
    })
}

#[test]
fn cli_and_watch_use_the_shared_index_with_the_sqlite_shapes() {
    let Some(s) = setup("surf_cli") else { return };
    let (url, cfg) = (s.url.as_str(), s.cfg.as_path());

    // The SQLite shapes, for comparison: a plain workspace of its own.
    let plain = s._dir.path().join("plain");
    std::fs::create_dir_all(plain.join("memory")).unwrap();
    std::fs::write(plain.join("MEMORY.md"), "# Memory\nplatypus\n").unwrap();
    let sq_index = run_json(claw_keyword_only(&plain), &["memory", "index", "--json"]);
    let sq_status = run_json(claw_keyword_only(&plain), &["memory", "status", "--json"]);
    let sq_search = run_json(
        claw_keyword_only(&plain),
        &["memory", "search", "platypus", "--json"],
    );
    let sq_get = run_json(
        claw_keyword_only(&plain),
        &["memory", "get", "MEMORY.md", "--json"],
    );
    assert_eq!(sq_status["backend"], "sqlite");

    // search: B's note, from A.
    let search = run_json(
        claw(&s.a, cfg, url),
        &["memory", "search", "platypus", "--json"],
    );
    assert_eq!(paths(&search), vec!["memory/wildlife.md"], "{search}");
    assert_eq!(keys(&search), keys(&sq_search));
    // get: B's file from A, served from the shared index.
    let get = run_json(
        claw(&s.a, cfg, url),
        &["memory", "get", "memory/wildlife.md", "--json"],
    );
    assert!(get["text"].as_str().unwrap().contains("Derwent"), "{get}");
    assert!(keys(&get).is_superset(&keys(&sq_get)), "{get} vs {sq_get}");
    // status: this workspace's rows, the same keys as SQLite's.
    let status = run_json(claw(&s.a, cfg, url), &["memory", "status", "--json"]);
    assert_eq!(status["backend"], "postgres");
    assert_eq!(status["files"], 1, "{status}");
    assert!(status["db_path"].as_str().unwrap().starts_with("postgres:"));
    assert_eq!(keys(&status), keys(&sq_status));
    let reindex = run_json(claw(&s.a, cfg, url), &["memory", "index", "--json"]);
    assert_eq!(keys(&reindex), keys(&sq_index));

    // Source validation is the library's: the reserved name is refused here too.
    let notes = s._dir.path().join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    let out = claw(&s.a, cfg, url)
        .args(["memory", "add"])
        .arg(&notes)
        .args(["--name", "memory"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reserved source name"), "{err}");
    // Positive control: a free name is accepted.
    claw_testkit::run_ok(
        claw(&s.a, cfg, url)
            .args(["memory", "add"])
            .arg(&notes)
            .args(["--name", "field-notes"]),
    );

    // watch: an edit in A reaches PostgreSQL; B finds it without syncing.
    let mut watch = claw(&s.a, cfg, url);
    watch.args(["memory", "watch", "--json"]);
    let w = LineChild::spawn(&mut watch);
    w.wait_json("started", Duration::from_secs(60), |v| {
        v["event"] == "started"
    });
    let before = run_json(
        claw(&s.b, cfg, url),
        &["memory", "search", "narwhal", "--json", "--no-sync"],
    );
    assert!(paths(&before).is_empty(), "{before}");
    std::fs::write(
        s.a.join("memory/arctic.md"),
        "# Arctic\nA narwhal surfaced beside the ferry near Tromsø.\n",
    )
    .unwrap();
    let synced = w.wait_json("a synced batch", Duration::from_secs(60), |v| {
        v["event"] == "synced"
            && v["reindexed"]
                .as_array()
                .is_some_and(|r| r.iter().any(|f| f["path"] == "memory/arctic.md"))
    });
    assert_eq!(synced["pending"], 0, "{synced}");
    let after = run_json(
        claw(&s.b, cfg, url),
        &["memory", "search", "narwhal", "--json", "--no-sync"],
    );
    assert_eq!(paths(&after), vec!["memory/arctic.md"], "{after}");
}

#[test]
fn gateway_and_mcp_search_the_shared_index() {
    let Some(s) = setup("surf_gw") else { return };
    let (url, cfg) = (s.url.as_str(), s.cfg.as_path());

    // claw mcp: memory_search from A finds B's note; memory_status says postgres.
    let mut mcp = claw(&s.a, cfg, url);
    mcp.arg("mcp");
    let mut m = LineChild::spawn(&mut mcp);
    m.send(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "pg-surfaces", "version": "0"}}})
        .to_string(),
    );
    m.wait_json("initialize", Duration::from_secs(30), |v| v["id"] == 1);
    m.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string());
    m.send(
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "memory_search", "arguments": {"query": "platypus"}}})
        .to_string(),
    );
    let r = m.wait_json("memory_search", Duration::from_secs(60), |v| v["id"] == 2);
    let found = &r["result"]["structuredContent"];
    assert_eq!(paths(found), vec!["memory/wildlife.md"], "{r}");
    m.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "memory_status", "arguments": {}}})
        .to_string(),
    );
    let r = m.wait_json("memory_status", Duration::from_secs(60), |v| v["id"] == 3);
    let st = &r["result"]["structuredContent"];
    assert_eq!(st["backend"], "postgres", "{r}");
    let cli_status = run_json(claw(&s.a, cfg, url), &["memory", "status", "--json"]);
    assert_eq!(keys(st), keys(&cli_status));
    drop(m);

    // claw gateway: the memory endpoints and a chat turn whose model searches.
    let llm = ScriptedServer::start([
        openai::tool_call("call_1", "memory_search", &[r#"{"query": "platypus"}"#]),
        openai::text(&["In the Derwent [memory/wildlife.md#L2]."]),
    ]);
    let mut cmd = claw(&s.a, cfg, url);
    cmd.openai_llm(llm.url(), "scripted");
    let mut gw = GatewayProc::spawn(cmd);
    let state = claw_testkit::state_dir(&s.a);
    let info = gw.wait_until("listening", Duration::from_secs(60), |p| {
        discovery::read_live(&state).filter(|i| i.pid == p.pid())
    });
    let token = std::fs::read_to_string(state.join("gateway.token")).unwrap();
    let mut client = Client::new(info, Token::new(token.trim()));
    client.timeout = Some(Duration::from_secs(60));

    let r = client
        .post_json("/v1/memory/search", &json!({"query": "platypus"}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let search: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(paths(&search), vec!["memory/wildlife.md"], "{search}");
    let r = client
        .post_json("/v1/memory/get", &json!({"path": "MEMORY.md"}))
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let get: Value = serde_json::from_slice(&r.body).unwrap();
    assert!(get["text"].as_str().unwrap().contains("Rottnest"), "{get}");
    // The Memory page's read-only endpoints: this workspace's own files, and
    // the status object with the CLI's keys.
    let r = client
        .request("GET", "/v1/memory/files?source=memory", None)
        .unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let files: Value = serde_json::from_slice(&r.body).unwrap();
    let listed: Vec<&str> = files["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["MEMORY.md"], "{files}");
    let r = client.request("GET", "/v1/memory/status", None).unwrap();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let gw_status: Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(gw_status["backend"], "postgres", "{gw_status}");
    assert_eq!(keys(&gw_status), keys(&cli_status));

    let body = json!({"model": "claw", "stream": false,
        "messages": [{"role": "user", "content": "where does the platypus hunt?"}]});
    let r = client
        .request(
            "POST",
            "/v1/chat/completions",
            Some(&serde_json::to_vec(&body).unwrap()),
        )
        .unwrap();
    assert_eq!(
        r.status,
        200,
        "{}\n{}",
        String::from_utf8_lossy(&r.body),
        gw.log()
    );
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{}", gw.log());
    let tool = reqs[1].json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .expect("the tool result reached the model");
    assert!(tool.contains("wildlife.md#L"), "{tool}");
    assert!(tool.contains("Derwent"), "{tool}");
    // The gateway kept no SQLite index of its own.
    assert!(
        !claw_testkit::db_path(&s.a).exists(),
        "the gateway opened a local SQLite index"
    );
}
