//! `claw mcp` driven over stdio by a client claw did not write: the official
//! Python MCP SDK (PyPI `mcp`, installed by `scripts/setup-mcp.sh`), through
//! `mcp_python_client.py`. Initialize, list tools (schemas, annotations), search
//! an indexed fixture (the CLI's exact JSON as `structuredContent`), get lines,
//! bad arguments as JSON-RPC errors (the process lives on), concurrent calls,
//! status, append then search finds it, resources.

use claw_testkit::{claw, mcp_peers, write_tree};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const QUERY: &str = mcp_peers::MCP_QUERY;
const APPENDED: &str = "The quarterly offsite moved to Lisbon, decided by Priya";

fn fixture(ws: &Path) {
    write_tree(ws, mcp_peers::MCP_NOTES);
    let out = claw(ws).args(["memory", "index"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn cli_json(ws: &Path, args: &[&str]) -> Value {
    let out = claw(ws).args(args).output().unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// Runs the Python client against `claw mcp` in `ws`; its JSON report.
fn python_client(ws: &Path, extra: &[&str]) -> Value {
    let claw_cmd = claw(ws);
    let mut py = Command::new(mcp_peers::python());
    py.env_clear();
    for (k, v) in claw_cmd.get_envs() {
        if let Some(v) = v {
            py.env(k, v);
        }
    }
    py.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_python_client.py"))
        .arg(claw_cmd.get_program())
        .args([QUERY, APPENDED])
        .args(extra);
    let out = py.output().unwrap();
    assert!(
        out.status.success(),
        "python client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "python client printed no JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_python_sdk_drives_claw_mcp_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    fixture(ws);
    let cli_search = cli_json(ws, &["memory", "search", QUERY, "--json", "-n", "5"]);
    let r = python_client(ws, &[]);

    assert_eq!(r["server"]["name"], "claw");
    assert!(r["capabilities"]["tools"].is_object());
    assert!(r["capabilities"]["resources"].is_object());

    // Tools: names, schemas with descriptions, annotations.
    let tools = r["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "memory_search",
            "memory_get",
            "memory_status",
            "memory_append"
        ]
    );
    for t in tools {
        let schema = &t["inputSchema"];
        assert_eq!(schema["type"], "object", "{t}");
        assert_eq!(schema["additionalProperties"], false, "{t}");
        for (name, prop) in schema["properties"].as_object().unwrap() {
            assert!(
                prop["description"].as_str().is_some_and(|d| d.len() > 10),
                "{}.{name} has no description",
                t["name"]
            );
        }
        let read_only = t["name"] != "memory_append";
        assert_eq!(t["annotations"]["readOnlyHint"], read_only, "{t}");
        assert_eq!(t["annotations"]["destructiveHint"], false, "{t}");
    }
    let search_props = &tools[0]["inputSchema"]["properties"];
    for p in ["query", "limit", "min_score", "mode", "source"] {
        assert!(search_props.get(p).is_some(), "memory_search lacks {p}");
    }

    // memory_search: hits with citations, the CLI's JSON as structured content.
    let search = &r["search"];
    assert_eq!(search["isError"], false);
    let sc = &search["structuredContent"];
    let hits = sc["results"].as_array().unwrap();
    assert!(!hits.is_empty(), "{search}");
    assert_eq!(hits[0]["path"], "memory/2026-11-02.md", "{search}");
    assert_same_hits(&sc["results"], &cli_search["results"]);
    for k in ["query", "mode", "fallback"] {
        assert_eq!(sc[k], cli_search[k], "{k}");
    }
    let mut keys: Vec<&String> = sc.as_object().unwrap().keys().collect();
    let mut cli_keys: Vec<&String> = cli_search.as_object().unwrap().keys().collect();
    keys.sort();
    cli_keys.sort();
    assert_eq!(keys, cli_keys);
    let text = text_of(search);
    assert!(
        text.contains(hits[0]["citation"].as_str().unwrap()),
        "{text}"
    );
    assert!(text.contains("webhook"), "{text}");

    // memory_get: the window asked for, and where to continue.
    let get = &r["get"];
    assert_eq!(get["structuredContent"]["path"], "memory/2026-11-02.md");
    assert_eq!(get["structuredContent"]["from"], hits[0]["start_line"]);
    let got = get["structuredContent"]["text"].as_str().unwrap();
    assert_eq!(got.lines().count(), 3, "{got}");
    assert!(text_of(get).contains("continue with from="), "{get}");

    // Bad arguments: JSON-RPC invalid-params errors that say what is wrong.
    let errors = r["errors"].as_object().unwrap();
    let expect = [
        ("wrong_type", "expected a string"),
        ("unknown_field", "bogus"),
        ("bad_limit", "`limit` must be 1..=50"),
        ("bad_mode", "psychic"),
        ("missing_query", "missing field `query`"),
        ("not_indexed", "not an indexed file"),
        ("dotdot", "refused path"),
        ("unknown_tool", "unknown tool `memory_delete`"),
        ("bad_target", "`target` must be `today` or `MEMORY.md`"),
    ];
    for (case, needle) in expect {
        let e = &errors[case];
        assert_eq!(e["code"], -32602, "{case}: {e}");
        assert!(
            e["message"].as_str().unwrap().contains(needle),
            "{case}: {e}"
        );
    }
    assert!(!ws.join("etc").exists());

    // Concurrent calls after the bad ones: all answered, none failed.
    let c = &r["concurrent"];
    assert_eq!(c["n"], 8);
    assert_eq!(c["errors"], 0);
    assert_eq!(c["queries"][7], "webhook");

    // memory_status: the CLI's `memory status --json` object.
    let status = &r["status"]["structuredContent"];
    let cli_status = cli_json(ws, &["memory", "status", "--json"]);
    let mut keys: Vec<&String> = status.as_object().unwrap().keys().collect();
    let mut cli_keys: Vec<&String> = cli_status.as_object().unwrap().keys().collect();
    keys.sort();
    cli_keys.sort();
    assert_eq!(keys, cli_keys);
    for k in [
        "workspace",
        "db_path",
        "model",
        "dims",
        "sources",
        "fts_tokenizers",
        "vector_backend",
        "chunker_version",
    ] {
        assert_eq!(status[k], cli_status[k], "{k}");
    }
    assert_eq!(status["files"], 3);
    // Whether the scheduled consolidation runs: the same answer (off, no LLM),
    // not an unknown.
    assert_eq!(status["consolidation"]["enabled"], false, "{status}");
    assert_eq!(
        status["consolidation"]["enabled"],
        cli_status["consolidation"]["enabled"]
    );
    assert_eq!(
        status["consolidation"]["off_reason"],
        cli_status["consolidation"]["off_reason"]
    );

    // memory_append → today's note (CLAW_NOW), found by the next search.
    let appended = &r["append"]["structuredContent"];
    assert_eq!(appended["path"], "memory/2026-11-05.md", "{appended}");
    assert_eq!(appended["created"], true);
    let note = std::fs::read_to_string(ws.join("memory/2026-11-05.md")).unwrap();
    assert!(note.contains("## From MCP\n\n"), "{note}");
    assert!(note.contains(APPENDED), "{note}");
    let line = appended["start_line"].as_u64().unwrap() as usize;
    assert_eq!(note.lines().nth(line - 1), Some(APPENDED), "{note}");
    let after = &r["after_append"]["structuredContent"];
    assert_eq!(
        after["results"][0]["path"], "memory/2026-11-05.md",
        "{after}"
    );
    assert_eq!(after["sync"]["status"], "synced", "{after}");

    // Resources: MEMORY.md and the day's note, readable; nothing else.
    let uris = claw_testkit::strs(&r["resources"], "/uri");
    assert_eq!(
        uris,
        ["memory://MEMORY.md", "memory://memory/2026-11-05.md"]
    );
    assert_eq!(
        r["resource_texts"]["memory://MEMORY.md"][0],
        "# Memory\n\nAlice prefers green tea.\n"
    );
    assert!(
        r["resource_texts"]["memory://memory/2026-11-05.md"][0]
            .as_str()
            .unwrap()
            .contains(APPENDED)
    );
    assert_eq!(r["bad_resource"]["code"], -32002, "{}", r["bad_resource"]);
}

#[test]
fn read_only_serves_no_append() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    fixture(ws);
    std::fs::create_dir_all(ws.join("home/.claw")).unwrap();
    std::fs::write(
        ws.join("home/.claw/config.json"),
        r#"{"mcp": {"read_only": true}}"#,
    )
    .unwrap();
    let r = python_client(ws, &["readonly"]);
    let names = claw_testkit::strs(&r["tools"], "/name");
    assert_eq!(names, ["memory_search", "memory_get", "memory_status"]);
    let e = &r["append_error"];
    assert_eq!(e["code"], -32602, "{e}");
    assert!(e["message"].as_str().unwrap().contains("read-only"), "{e}");
    assert!(!ws.join("memory/2026-11-05.md").exists());
}

/// Two processes' hits for one query are the same: every field equal, the
/// scores within 1e-4 (each process embeds the query itself, and the model's
/// threaded sums may differ in the last float digits between runs).
fn assert_same_hits(mcp: &serde_json::Value, cli: &serde_json::Value) {
    let (a, b) = (mcp.as_array().unwrap(), cli.as_array().unwrap());
    assert_eq!(a.len(), b.len(), "MCP and CLI disagree:\n{mcp}\n{cli}");
    for (x, y) in a.iter().zip(b) {
        let score = |v: &serde_json::Value| v["score"].as_f64().unwrap();
        assert!(
            (score(x) - score(y)).abs() < 1e-4,
            "MCP and CLI disagree on a score:\n{x}\n{y}"
        );
        let (mut x, mut y) = (x.clone(), y.clone());
        x["score"] = serde_json::Value::Null;
        y["score"] = serde_json::Value::Null;
        assert_eq!(x, y, "MCP and CLI disagree");
    }
}
