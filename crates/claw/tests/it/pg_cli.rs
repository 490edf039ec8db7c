//! `memory.backend: postgres` end to end through the `claw` binary: index and
//! search with the same JSON as SQLite, two workspaces sharing one namespace
//! (each keeps its own MEMORY.md, a search sees both), and
//! `claw memory migrate --to postgres` (vectors copied, nothing re-embedded).
//! Needs `CLAW_PG_URL` (`. scripts/setup-postgres.sh`); under `CI=true` a
//! missing server fails.

use claw_testkit::pg::TestSchema;
use claw_testkit::{claw, write_tree};
use serde_json::Value;
use std::path::Path;

fn run_json(ws: &Path, cfg: Option<&Path>, url: &str, args: &[&str]) -> Value {
    let mut c = claw(ws);
    c.env("CLAW_PG_URL", url);
    if let Some(cfg) = cfg {
        c.env("CLAW_CONFIG", cfg);
    }
    let out = c.args(args).output().unwrap();
    assert!(
        out.status.code() == Some(0),
        "{args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn two_workspaces_share_a_namespace_and_migrate_copies_vectors() {
    let Some(pgs) = TestSchema::new("cli") else {
        return;
    };
    let (url, schema) = (pgs.url.clone(), pgs.name.clone());
    let tmp = tempfile::tempdir().unwrap();
    let cfg = pgs.claw_config(tmp.path(), "team");
    let (wa, wb, wc) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    write_tree(
        &wa,
        &[(
            "MEMORY.md",
            "# A\nLaptop notes: the kiwi deploy key lives in the vault.\n",
        )],
    );
    write_tree(
        &wb,
        &[(
            "MEMORY.md",
            "# B\nServer notes: the kiwi gateway restarts at midnight.\n",
        )],
    );

    let r = run_json(&wa, Some(&cfg), &url, &["memory", "index", "--json"]);
    assert_eq!(r["files_changed"], 1);
    assert_eq!(r["db_path"], format!("postgres:{schema}/team"));
    assert_eq!(r["rebuilt"], "new index");
    let r = run_json(&wb, Some(&cfg), &url, &["memory", "index", "--json"]);
    assert_eq!(r["files_changed"], 1);

    // Same JSON contract as SQLite; both machines' MEMORY.md are visible.
    let s = run_json(
        &wa,
        Some(&cfg),
        &url,
        &["memory", "search", "kiwi", "--json", "--min-score", "0"],
    );
    assert_eq!(s["mode"], "hybrid");
    assert_eq!(s["fallback"], Value::Null);
    assert_eq!(s["sync"]["status"], "fresh");
    let hits = s["results"].as_array().unwrap();
    assert_eq!(hits.len(), 2, "{s}");
    assert!(
        hits.iter()
            .all(|h| h["path"] == "MEMORY.md" && h["source"] == "memory")
    );
    let snippets: Vec<&str> = hits
        .iter()
        .map(|h| h["snippet"].as_str().unwrap())
        .collect();
    assert!(
        snippets.iter().any(|t| t.contains("vault"))
            && snippets.iter().any(|t| t.contains("midnight"))
    );

    // An edit is synced inline before the search, as on SQLite.
    write_tree(
        &wa,
        &[(
            "memory/new.md",
            "# New\nThe pelican report is due Friday.\n",
        )],
    );
    let s = run_json(
        &wa,
        Some(&cfg),
        &url,
        &["memory", "search", "pelican report", "--json"],
    );
    assert_eq!(s["sync"]["status"], "synced", "{s}");
    assert_eq!(s["results"][0]["path"], "memory/new.md");

    // migrate: a workspace indexed on SQLite, copied with its vectors.
    write_tree(
        &wc,
        &[(
            "memory/trip.md",
            "# Trip\nWent hiking in the Alps with Marta.\n",
        )],
    );
    let r = run_json(&wc, None, &url, &["memory", "index", "--json"]);
    assert_eq!(r["embeddings_computed"], 1);
    let m = run_json(
        &wc,
        Some(&cfg),
        &url,
        &["memory", "migrate", "--to", "postgres", "--json"],
    );
    assert_eq!(m["files"], 1);
    assert_eq!(m["vectors"], m["chunks"]);
    let r = run_json(&wc, Some(&cfg), &url, &["memory", "index", "--json"]);
    assert_eq!(
        (
            r["files_changed"].as_u64(),
            r["embeddings_computed"].as_u64()
        ),
        (Some(0), Some(0)),
        "{r}"
    );
    assert_eq!(r["rebuilt"], Value::Null);
    let s = run_json(
        &wc,
        Some(&cfg),
        &url,
        &["memory", "search", "mountain walk with a friend", "--json"],
    );
    assert_eq!(s["results"][0]["path"], "memory/trip.md", "{s}");

    // `memory status --json`: one shape on both backends (same keys, same
    // types), and the same figures for the same copied index.
    let lite = run_json(&wc, None, &url, &["memory", "status", "--json"]);
    let pg = run_json(&wc, Some(&cfg), &url, &["memory", "status", "--json"]);
    let (lo, po) = (lite.as_object().unwrap(), pg.as_object().unwrap());
    assert_eq!(
        lo.keys().collect::<Vec<_>>(),
        po.keys().collect::<Vec<_>>(),
        "{lite}\n{pg}"
    );
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    for (k, v) in lo {
        if !v.is_null() && !po[k].is_null() {
            assert_eq!(kind(v), kind(&po[k]), "{k}: {v} vs {}", po[k]);
        }
    }
    assert_eq!(
        (lite["backend"].as_str(), pg["backend"].as_str()),
        (Some("sqlite"), Some("postgres"))
    );
    for k in [
        "workspace",
        "files",
        "chunks",
        "vectors",
        "model",
        "dims",
        "changed_on_disk",
        "chunker_version",
    ] {
        assert_eq!(lite[k], pg[k], "{k}");
    }
    assert_eq!(pg["changed_on_disk"]["new"], 0, "{pg}");
    assert_eq!(pg["db_path"], format!("postgres:{schema}/team"));
    assert_eq!(pg["namespaces"], serde_json::json!(["team"]));
    assert!(pg["db_bytes"].as_u64().unwrap() > 0, "{pg}");
    assert!(
        pg["vector_backend"]
            .as_str()
            .unwrap()
            .starts_with("pgvector 0."),
        "{pg}"
    );
    // The id the PostgreSQL backend created is the workspace's, on both.
    assert!(
        pg["workspace_id"].as_str().is_some_and(|id| id.len() == 16),
        "{pg}"
    );
    assert_eq!(lite["workspace_id"], pg["workspace_id"]);
    // A new file is behind the disk on PostgreSQL as on SQLite.
    write_tree(
        &wc,
        &[(
            "memory/more.md",
            "# More
A new page.\n",
        )],
    );
    let lite = run_json(&wc, None, &url, &["memory", "status", "--json"]);
    let pg = run_json(&wc, Some(&cfg), &url, &["memory", "status", "--json"]);
    assert_eq!(pg["changed_on_disk"]["new"], 1, "{pg}");
    assert_eq!(lite["changed_on_disk"], pg["changed_on_disk"]);
}

/// Runs `claw` and returns (exit code, stdout, stderr).
fn run(ws: &Path, cfg: &Path, url: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let out = claw(ws)
        .env("CLAW_PG_URL", url)
        .env("CLAW_CONFIG", cfg)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn get_serves_another_workspaces_file_from_the_shared_index() {
    let Some((pgs, tmp, cfg)) = TestSchema::with_team_config("cliget") else {
        return;
    };
    let url = pgs.url.clone();
    let (wa, wb) = (tmp.path().join("a"), tmp.path().join("b"));
    // Long enough for several chunks (200 tokens, 32 of overlap), with a secret.
    let mut notes: String = (1..=40)
        .map(|i| {
            format!(
                "Orchard log line {i}: the kiwi vines on terrace {i} were pruned and tied to the wire.\n"
            )
        })
        .collect();
    notes.push_str("deploy token sk-ant-abcdefghijklmnopqrstuvwxyz0123 for the orchard bot\n");
    write_tree(&wa, &[("MEMORY.md", "# A\nLaptop: the kiwi vault key.\n")]);
    write_tree(
        &wb,
        &[
            ("MEMORY.md", "# B\nServer: the kiwi gateway restarts.\n"),
            ("memory/orchard.md", &notes),
        ],
    );
    run_json(&wa, Some(&cfg), &url, &["memory", "index", "--json"]);
    run_json(&wb, Some(&cfg), &url, &["memory", "index", "--json"]);
    let wb_id = run_json(&wb, Some(&cfg), &url, &["memory", "status", "--json"])["workspace_id"]
        .as_str()
        .unwrap()
        .to_string();
    let wa_id = run_json(&wa, Some(&cfg), &url, &["memory", "status", "--json"])["workspace_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!wb_id.is_empty() && wb_id != wa_id);

    // A search in a finds b's notes; get serves them from the index, naming b.
    let s = run_json(
        &wa,
        Some(&cfg),
        &url,
        &["memory", "search", "kiwi vines terrace pruned", "--json"],
    );
    assert_eq!(s["results"][0]["path"], "memory/orchard.md", "{s}");
    let g = run_json(
        &wa,
        Some(&cfg),
        &url,
        &["memory", "get", "memory/orchard.md", "--json"],
    );
    assert_eq!(g["workspace_id"], wb_id.as_str(), "{g}");
    assert_eq!(g["from_index"], true);
    assert_eq!(g["source"], "memory");
    assert_eq!(
        (g["from"].as_u64(), g["total_lines"].as_u64()),
        (Some(1), Some(41))
    );
    let text = g["text"].as_str().unwrap();
    // Every line once (chunk overlap is not repeated), secrets redacted as indexed.
    let want: Vec<&str> = notes.lines().take(40).collect();
    let got: Vec<&str> = text.lines().collect();
    assert_eq!(&got[..40], &want[..], "{text}");
    assert_eq!(got.len(), 41);
    assert!(
        got[40].starts_with("deploy token ") && !text.contains("sk-ant-abcdef"),
        "{text}"
    );
    // A window, as for a local file.
    let g = run_json(
        &wa,
        Some(&cfg),
        &url,
        &[
            "memory",
            "get",
            "./memory/orchard.md",
            "--from",
            "7",
            "--lines",
            "2",
            "--json",
        ],
    );
    assert_eq!(g["text"], format!("{}\n{}\n", want[6], want[7]));
    assert_eq!(g["next_from"], 9);

    // Both machines have a MEMORY.md: this workspace's own by default (the JSON
    // unchanged), b's with --workspace-id.
    let g = run_json(
        &wa,
        Some(&cfg),
        &url,
        &["memory", "get", "MEMORY.md", "--json"],
    );
    assert!(g["text"].as_str().unwrap().contains("Laptop"), "{g}");
    assert!(
        g.get("workspace").is_none() && g.get("from_index").is_none(),
        "{g}"
    );
    let g = run_json(
        &wa,
        Some(&cfg),
        &url,
        &[
            "memory",
            "get",
            "MEMORY.md",
            "--workspace-id",
            &wb_id,
            "--json",
        ],
    );
    assert!(g["text"].as_str().unwrap().contains("Server"), "{g}");
    assert_eq!(g["workspace_id"], wb_id.as_str());

    // Text mode says where the lines come from.
    let (code, out, err) = run(
        &wa,
        &cfg,
        &url,
        &["memory", "get", "memory/orchard.md", "--lines", "1"],
    );
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{}\n", want[0]));
    assert!(
        err.contains("served from the shared index") && err.contains(&wb_id),
        "{err}"
    );
    // A file no workspace indexed is still refused.
    let (code, _, err) = run(&wa, &cfg, &url, &["memory", "get", "memory/none.md"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("not an indexed file") || err.contains("not indexed"),
        "{err}"
    );
}

/// An unreachable server is said as such, fast: a closed port is "connection
/// refused" within seconds (not the pool's 40 s of retries ending in "timed
/// out"), with a hint, in `memory status` and in `claw doctor --json`. Needs no
/// server.
#[test]
fn an_unreachable_server_fails_fast_with_its_cause() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cfg = tmp.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"memory": {"backend": {"kind": "postgres", "url_env": "CLAW_PG_URL", "namespace": "team"}}}"#,
    )
    .unwrap();
    // A port that was just free: nothing listens there.
    let port = claw_testkit::closed_port();
    let url = format!("postgresql://nobody@127.0.0.1:{port}/db");
    let run = |args: &[&str]| {
        let t0 = std::time::Instant::now();
        let out = claw_testkit::claw_keyword_only(&ws)
            .env("CLAW_PG_URL", &url)
            .env("CLAW_CONFIG", &cfg)
            .args(args)
            .output()
            .unwrap();
        (out, t0.elapsed())
    };
    let (out, took) = run(&["memory", "status"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("Connection refused"), "{err}");
    assert!(!err.contains("timed out"), "{err}");
    assert!(err.contains("hint: "), "{err}");
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    let (out, took) = run(&["doctor", "--json"]);
    assert_eq!(out.status.code(), Some(2));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    let db = claw_testkit::doctor_section(&j, "database");
    assert_eq!(db["status"], "error", "{db}");
    assert!(
        db["summary"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{db}"
    );
    // The same advice as the CLI's `hint:` line.
    assert!(
        db["hint"]
            .as_str()
            .unwrap()
            .contains("PostgreSQL is running"),
        "{db}"
    );
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}
