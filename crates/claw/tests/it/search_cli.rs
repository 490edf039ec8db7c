//! `claw memory search` / `claw memory get` end to end: the real binary, an index
//! built by `claw memory index` with the real model, exit codes, text and JSON output,
//! the keyword-only fallback when the model is absent.

use claw_testkit as support;

use regex::Regex;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const NOTES: &[(&str, &str)] = &[
    (
        "MEMORY.md",
        "# About me\n\nI drink my coffee black, no sugar.\nMy editor is Helix.\n",
    ),
    (
        "memory/2026-11-02.md",
        "# Standup\n\nThe billing migration is tracked as ticket ZX-4471.\nDeploy is planned for Friday.\n",
    ),
    (
        "memory/travel.md",
        "# Travel\n\nWe ate ramen near Tokyo Tower.\n我们在东京塔附近吃了拉面。\n",
    ),
];

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn indexed_workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    support::write_tree(ws.path(), NOTES);
    let o = run(support::claw(ws.path()).args(["memory", "index"]));
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    ws
}

fn search(ws: &Path, args: &[&str]) -> Output {
    run(support::claw(ws).args(["memory", "search"]).args(args))
}

#[test]
fn search_and_get_end_to_end() {
    let ws = indexed_workspace();
    let ws = ws.path();

    // Text output: "0.812  path:12-20", snippet, blank line; exit 0.
    let o = search(ws, &["ticket ZX-4471"]);
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let text = stdout(&o);
    let head = Regex::new(r"^\d\.\d{3}  memory/2026-11-02\.md:\d+-\d+$").unwrap();
    let first = text.lines().next().unwrap();
    assert!(head.is_match(first), "{text}");
    assert!(text.lines().nth(1).unwrap().contains("ZX-4471") || text.contains("ZX-4471"));
    assert!(text.contains("\n\n"));

    // JSON contract.
    let o = search(ws, &["coffee", "--json"]);
    assert_eq!(code(&o), 0);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["query"], "coffee");
    assert_eq!(j["mode"], "hybrid");
    assert!(j["fallback"].is_null());
    let hit = &j["results"][0];
    assert_eq!(hit["path"], "MEMORY.md");
    assert_eq!(hit["source"], "memory");
    let (s, e) = (
        hit["start_line"].as_u64().unwrap(),
        hit["end_line"].as_u64().unwrap(),
    );
    assert_eq!(hit["citation"], format!("MEMORY.md#L{s}-L{e}"));
    assert!(hit["score"].as_f64().unwrap() > 0.0);
    assert!(hit.get("explain").is_none());
    let o = search(ws, &["coffee", "--json", "--explain"]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let x = &j["results"][0]["explain"];
    for k in ["vector", "keyword", "decay", "mmr_rank"] {
        assert!(x.get(k).is_some(), "{k}: {x}");
    }

    // Nothing found: "No matches.", exit 1.
    let o = search(ws, &["qwxzvjk", "--mode", "fts"]);
    assert_eq!(code(&o), 1);
    assert_eq!(stdout(&o), "No matches.\n");

    // Hostile query: never an error.
    for (i, q) in [r#""NEAR(a b) OR * ^:"#, "\"", "AND OR NOT", "*"]
        .iter()
        .enumerate()
    {
        // (The first in hybrid mode, the rest keyword-only to keep the test fast.)
        let mode = if i == 0 { "hybrid" } else { "fts" };
        let o = search(ws, &[q, "--mode", mode]);
        assert!(
            matches!(code(&o), 0 | 1),
            "{q}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    // CJK queries of 1, 2 and 4 characters.
    for q in ["塔", "拉面", "东京塔附"] {
        let o = search(ws, &[q, "--json", "--mode", "fts"]);
        assert_eq!(code(&o), 0, "{q}");
        let j: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(j["results"][0]["path"], "memory/travel.md", "{q}: {j}");
    }

    // Source filter; unknown source is an error (exit 2).
    let o = search(ws, &["coffee", "--source", "sessions", "--mode", "fts"]);
    assert_eq!(code(&o), 1);
    let o = search(ws, &["coffee", "--source", "nope"]);
    assert_eq!(code(&o), 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown source"));
    // --no-sync is accepted.
    assert_eq!(
        code(&search(
            ws,
            &["coffee", "--no-sync", "--limit", "1", "--mode", "fts"]
        )),
        0
    );

    // memory get.
    let o = run(support::claw(ws).args([
        "memory",
        "get",
        "memory/2026-11-02.md",
        "--from",
        "3",
        "--lines",
        "1",
    ]));
    assert_eq!(code(&o), 0);
    assert_eq!(
        stdout(&o),
        "The billing migration is tracked as ticket ZX-4471.\n"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("--from 4"));
    let o = run(support::claw(ws).args(["memory", "get", "MEMORY.md", "--json"]));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            j["from"].as_u64(),
            j["to"].as_u64(),
            j["next_from"].is_null()
        ),
        (Some(1), Some(4), true)
    );
    // Every citation form search prints is a path `memory get` takes, for exactly
    // the cited lines: the text output's `path:S-E` and the JSON's `path#LS-LE`.
    let o = search(ws, &["ticket ZX-4471", "--json", "--limit", "1"]);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let cited = j["results"][0]["citation"].as_str().unwrap().to_string();
    let printed = first.split_whitespace().nth(1).unwrap().to_string();
    let (s, e) = (
        j["results"][0]["start_line"].as_u64(),
        j["results"][0]["end_line"].as_u64(),
    );
    for c in [cited.as_str(), printed.as_str(), "memory/2026-11-02.md:3"] {
        let o = run(support::claw(ws).args(["memory", "get", c, "--json"]));
        assert_eq!(code(&o), 0, "{c}: {}", String::from_utf8_lossy(&o.stderr));
        let g: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(g["path"], "memory/2026-11-02.md", "{c}");
        let want = if c.ends_with(":3") {
            (Some(3), Some(3))
        } else {
            (s, e)
        };
        assert_eq!((g["from"].as_u64(), g["to"].as_u64()), want, "{c}: {g}");
        assert!(g["text"].as_str().unwrap().contains("ZX-4471"), "{c}: {g}");
    }
    // A citation of a file that is not indexed is still refused.
    let o = run(support::claw(ws).args(["memory", "get", "memory/missing.md#L1-L2"]));
    assert_eq!(code(&o), 2);
    for bad in ["../secret.md", "/etc/passwd", "memory/missing.md"] {
        let o = run(support::claw(ws).args(["memory", "get", bad]));
        assert_eq!(code(&o), 2, "{bad}");
        assert!(!String::from_utf8_lossy(&o.stderr).is_empty());
    }
}

#[test]
fn model_absent_falls_back_to_keywords() {
    let ws = indexed_workspace();
    let empty = tempfile::tempdir().unwrap();
    let o = run(support::claw(ws.path())
        .env("CLAW_EMBED_MODEL_DIR", empty.path())
        .args(["memory", "search", "coffee", "--json"]));
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["fallback"], "no-embedder");
    assert_eq!(j["mode"], "hybrid");
    assert_eq!(j["results"][0]["path"], "MEMORY.md");
    // Text mode says what to run, on stderr.
    let o = run(support::claw(ws.path())
        .env("CLAW_EMBED_MODEL_DIR", empty.path())
        .args(["memory", "search", "coffee"]));
    assert_eq!(code(&o), 0);
    assert!(String::from_utf8_lossy(&o.stderr).contains("claw memory install-model"));

    // A keyword-only index never loads the model and says there are no vectors.
    let kw = tempfile::tempdir().unwrap();
    support::write_tree(kw.path(), NOTES);
    assert_eq!(
        code(&run(
            support::claw_keyword_only(kw.path()).args(["memory", "index"])
        )),
        0
    );
    let o = run(support::claw(kw.path()).args(["memory", "search", "ZX-4471", "--json"]));
    assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["fallback"], "no-vectors");
    assert_eq!(j["results"][0]["path"], "memory/2026-11-02.md");
}
