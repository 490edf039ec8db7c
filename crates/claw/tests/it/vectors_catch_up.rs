//! Vectors catch up (issue 27 item 4): a workspace indexed without the model, then
//! searched with the model available, says so — a stderr note from `memory search`
//! (not only `fallback` in `--json`), the gap named by `memory status` (text and
//! `vectors_missing` in `--json`) and a `doctor` warning — and the next `claw
//! memory index` embeds every chunk, after which the notes are gone.

use claw_testkit as support;

fn write_notes(ws: &std::path::Path) {
    support::write_tree(
        ws,
        &[
            (
                "MEMORY.md",
                "# Memory\n\nThe billing database is PostgreSQL.\n",
            ),
            (
                "memory/dentist.md",
                "# Dentist\n\nThe crown on the upper molar is fitted on Tuesday.\n",
            ),
        ],
    );
}

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `claw memory search "billing database"` (with the model), which succeeds;
/// its stderr.
fn search_stderr(ws: &std::path::Path) -> String {
    let out = support::claw(ws)
        .args(["memory", "search", "billing database"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    stderr
}

/// Every chunk has its vector, no gap is named, and a search for `query`
/// (`--json`, returned) is not a keyword-only fallback.
fn assert_caught_up(ws: &std::path::Path, query: &str) -> serde_json::Value {
    let st = support::run_json(support::claw(ws).args(["memory", "status", "--json"]));
    assert!(st["chunks"].as_i64() > Some(0), "{st}");
    assert_eq!(st["vectors"], st["chunks"], "{st}");
    assert!(st["vectors_missing"].is_null(), "{st}");
    let json = support::run_json(support::claw(ws).args(["memory", "search", query, "--json"]));
    assert!(json["fallback"].is_null(), "{json}");
    json
}

#[test]
fn a_model_installed_after_indexing_is_named_then_used() {
    let ws = tempfile::tempdir().unwrap();
    write_notes(ws.path());
    let report = support::index_keyword_only(ws.path());
    assert_eq!(report["model"], "", "{report}");

    // Before: the gap is named everywhere.
    let stderr = search_stderr(ws.path());
    assert!(
        stderr.contains("chunks without vectors — run `claw memory index`"),
        "{stderr}"
    );
    let json = support::run_json(support::claw(ws.path()).args([
        "memory",
        "search",
        "billing database",
        "--json",
    ]));
    assert_eq!(json["fallback"], "no-vectors", "{json}");
    let st = support::run_json(support::claw(ws.path()).args(["memory", "status", "--json"]));
    let chunks = st["chunks"].as_i64().unwrap();
    assert!(chunks >= 2, "{st}");
    assert_eq!(st["vectors_missing"]["chunks"], chunks, "{st}");
    let out = support::claw(ws.path())
        .args(["memory", "status"])
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains(&format!(
            "{chunks} chunks without vectors — run `claw memory index`"
        )),
        "{stdout}"
    );
    let out = support::claw(ws.path()).args(["doctor"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    let db = stdout
        .lines()
        .find(|l| l.contains("database"))
        .unwrap_or_else(|| panic!("{stdout}{stderr}"));
    assert!(db.starts_with("warn"), "{db}");
    assert!(db.contains("chunks without vectors"), "{db}");
    // Positive control: keyword-only (no model available) has no gap to name.
    let st = support::run_json(
        support::claw_keyword_only(ws.path()).args(["memory", "status", "--json"]),
    );
    assert!(st["vectors_missing"].is_null(), "{st}");
    let out = support::claw_keyword_only(ws.path())
        .args(["memory", "search", "billing database"])
        .output()
        .unwrap();
    assert!(!text(&out).1.contains("without vectors"), "{out:?}");

    // The next index embeds every chunk; the notes are gone.
    let report = support::run_json(support::claw(ws.path()).args(["memory", "index", "--json"]));
    assert!(
        report["model"].as_str().is_some_and(|m| !m.is_empty()),
        "{report}"
    );
    let stderr = search_stderr(ws.path());
    assert!(!stderr.contains("without vectors"), "{stderr}");
    assert_caught_up(ws.path(), "billing database");
    let out = support::claw(ws.path()).args(["doctor"]).output().unwrap();
    let (stdout, _) = text(&out);
    let db = stdout.lines().find(|l| l.contains("database")).unwrap();
    assert!(db.starts_with("ok"), "{db}");
}

/// A gateway started with the model over a workspace indexed without it embeds
/// the notes by itself, in the background, saying so in its log; then searches
/// (through the gateway) are hybrid and the gap is gone. Positive control: the
/// gap is there before the gateway starts.
#[test]
fn a_gateway_embeds_a_keyword_only_index_when_the_model_loads() {
    let ws = tempfile::tempdir().unwrap();
    write_notes(ws.path());
    support::index_keyword_only(ws.path());
    let st = support::run_json(support::claw(ws.path()).args(["memory", "status", "--json"]));
    assert_eq!(st["vectors"], 0, "{st}");
    assert!(st["vectors_missing"]["chunks"].as_i64() > Some(0), "{st}");

    let gw = crate::gateway::Gateway::start_with(ws.path(), None, true);
    gw.wait_log(
        "embedding the notes: done",
        std::time::Duration::from_secs(120),
    );
    assert!(
        gw.log()
            .contains("the index was built without the embedding model"),
        "{}",
        gw.log()
    );
    let json = assert_caught_up(ws.path(), "where is the crown fitted");
    assert!(
        json["results"][0]["path"]
            .as_str()
            .is_some_and(|p| p.contains("dentist")),
        "{json}"
    );
    drop(gw);
}

/// `claw memory watch` started with the model over a workspace indexed
/// without it embeds the notes before it watches, saying so on stderr; then
/// the gap is gone and search is hybrid. Positive control: the gap is there
/// before the watcher starts.
#[test]
fn memory_watch_embeds_a_keyword_only_index_before_watching() {
    use std::io::BufRead;
    let ws = tempfile::tempdir().unwrap();
    write_notes(ws.path());
    support::index_keyword_only(ws.path());
    let st = support::run_json(support::claw(ws.path()).args(["memory", "status", "--json"]));
    assert!(st["vectors_missing"]["chunks"].as_i64() > Some(0), "{st}");

    let mut child = support::claw(ws.path())
        .args(["memory", "watch"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut seen = Vec::new();
    let done = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("embedded the notes:") => break line,
            Ok(line) => seen.push(line),
            Err(e) => panic!("no catch-up line ({e}); stderr so far: {seen:?}"),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        done.contains("built without the embedding model") && done.contains("search is hybrid"),
        "{done}"
    );
    let json = assert_caught_up(ws.path(), "where is the crown fitted");
    assert!(
        json["results"][0]["path"]
            .as_str()
            .is_some_and(|p| p.contains("dentist")),
        "{json}"
    );
}
