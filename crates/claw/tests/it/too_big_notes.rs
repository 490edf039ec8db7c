//! A note that outgrows the index's size limit (`memory.max_file_bytes`) by an
//! editor or `exec` — not `memory_append`, which refuses — is never silently
//! dropped (issue 25): `claw memory search` (its inline sync), `claw memory
//! status`, `claw memory index` and `claw doctor` name it with its size, in
//! text and JSON, on SQLite and on PostgreSQL alike. The real binary throughout.

use claw_testkit::pg::TestSchema;
use claw_testkit::stdout_json;
use serde_json::{Value, json};
use std::path::Path;

const LIMIT: u64 = 1000;
const NOTE: &str = "memory/2026-11-30.md";

/// `claw` keyword-only with `config` (which sets the 1000-byte limit).
fn claw(ws: &Path, config: &Path, pg_url: Option<&str>) -> std::process::Command {
    let mut c = claw_testkit::claw_keyword_only(ws);
    c.env("CLAW_CONFIG", config);
    if let Some(url) = pg_url {
        c.env("CLAW_PG_URL", url);
    }
    c
}

/// Its stdout and stderr, after asserting it exited 0 or 1 (no match).
fn run(c: &mut std::process::Command) -> (String, String) {
    let out = c.output().unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "exit {:?}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The whole story on one backend; returns what each surface said of the
/// note, for comparing backends.
fn story(ws: &Path, config: &Path, pg_url: Option<&str>) -> Vec<Value> {
    let cmd = |args: &[&str]| {
        let mut c = claw(ws, config, pg_url);
        c.args(args);
        c
    };
    claw_testkit::write_tree(
        ws,
        &[
            ("MEMORY.md", "# Memory\nThe quokka lives on Rottnest.\n"),
            (NOTE, "A numbat eats termites.\n"),
        ],
    );
    let r = stdout_json(&mut cmd(&["memory", "index", "--json"]));
    assert_eq!(r["files_changed"], 2, "{r}");
    assert_eq!(r["too_big"], json!([]), "{r}");
    let q = stdout_json(&mut cmd(&["memory", "search", "--json", "numbat"]));
    assert_eq!(q["results"][0]["path"], NOTE, "{q}");
    assert!(q.get("too_big").is_none(), "absent when none: {q}");

    // An editor (or `exec`) grows the note past the limit.
    let big = "A numbat eats termites all day long. ".repeat(80);
    std::fs::write(ws.join(NOTE), &big).unwrap();
    let want = json!([{"source": "memory", "path": NOTE, "size": big.len(), "limit": LIMIT}]);

    // The search's inline sync drops it from the index and says so.
    let q = stdout_json(&mut cmd(&["memory", "search", "--json", "numbat"]));
    assert_eq!(q["sync"]["status"], "synced", "{q}");
    assert_eq!(q["sync"]["reindexed"], json!([]), "not re-indexed: {q}");
    assert_eq!(q["too_big"], want, "{q}");
    assert_eq!(q["results"], json!([]), "{q}");
    // And on every later search, though the index is fresh.
    let q2 = stdout_json(&mut cmd(&["memory", "search", "--json", "quokka"]));
    assert_eq!(q2["sync"]["status"], "fresh", "{q2}");
    assert_eq!(q2["too_big"], want, "{q2}");
    let (_, err) = run(&mut cmd(&["memory", "search", "quokka"]));
    assert!(
        err.contains(&format!(
            "note: 1 note(s) not searchable, over the index's size limit: memory:{NOTE} (2.9 KiB, over the 1000 B limit)"
        )),
        "{err}"
    );

    // Status, text and JSON (an added field: every old one is still there).
    let s = stdout_json(&mut cmd(&["memory", "status", "--json"]));
    assert_eq!(s["too_big"], want, "{s}");
    assert_eq!(s["skipped_files"], 1, "{s}");
    assert_eq!(s["changed_on_disk"]["modified"], 0, "{s}");
    let (t, _) = run(&mut cmd(&["memory", "status"]));
    assert!(
        t.contains(&format!(
            "too big:    memory:{NOTE} (2.9 KiB, over the 1000 B limit) is not searchable"
        )),
        "{t}"
    );

    // The index run lists it too.
    let r = stdout_json(&mut cmd(&["memory", "index", "--json"]));
    assert_eq!(r["too_big"], want, "{r}");
    let (t, _) = run(&mut cmd(&["memory", "index"]));
    assert!(
        t.contains(&format!("not indexed, too big: memory:{NOTE}")),
        "{t}"
    );

    // The doctor warns.
    let d = stdout_json(&mut cmd(&["doctor", "--json"]));
    let sec = claw_testkit::doctor_section(&d, "too_big");
    assert_eq!(sec["status"], "warn", "{sec}");
    assert_eq!(sec["details"]["notes"], want, "{sec}");
    let (t, _) = run(&mut cmd(&["doctor"]));
    assert!(
        t.lines()
            .any(|l| l.starts_with("warn  too_big") && l.contains(NOTE)),
        "{t}"
    );

    // Shrunk again: indexed, and no longer listed.
    std::fs::write(ws.join(NOTE), "A numbat eats termites.\n").unwrap();
    let q = stdout_json(&mut cmd(&["memory", "search", "--json", "numbat"]));
    assert_eq!(q["results"][0]["path"], NOTE, "{q}");
    assert!(q.get("too_big").is_none(), "{q}");
    let s = stdout_json(&mut cmd(&["memory", "status", "--json"]));
    assert_eq!(s["too_big"], json!([]), "{s}");
    vec![
        q2["too_big"].clone(),
        s["too_big"].clone(),
        sec["details"].clone(),
    ]
}

fn config(dir: &Path, base: Value) -> std::path::PathBuf {
    let mut cfg = base;
    cfg["memory"]["max_file_bytes"] = json!(LIMIT);
    let p = dir.join("limit.json");
    std::fs::write(&p, cfg.to_string()).unwrap();
    p
}

#[test]
fn a_note_over_the_limit_is_reported_on_every_surface() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let cfg = config(tmp.path(), json!({"memory": {}}));
    story(&ws, &cfg, None);
}

#[test]
fn postgres_reports_a_note_over_the_limit_as_sqlite_does() {
    let Some(pgs) = TestSchema::new("toobig") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let base: Value =
        serde_json::from_slice(&std::fs::read(pgs.claw_config(tmp.path(), "big")).unwrap())
            .unwrap();
    let pg_cfg = config(tmp.path(), base);
    let pg = story(&tmp.path().join("pg"), &pg_cfg, Some(&pgs.url));
    let sq_dir = tmp.path().join("sqlite");
    std::fs::create_dir_all(&sq_dir).unwrap();
    let sq_cfg = config(&sq_dir, json!({"memory": {}}));
    let sqlite = story(&sq_dir.join("ws"), &sq_cfg, None);
    // The same note at the same size, whichever backend.
    assert_eq!(pg, sqlite);
}
