//! `claw memory search` keeps itself fresh: a bounded stat-level check re-indexes
//! the few files that changed since the last index before answering (`sync` in
//! the JSON answer), skips it with `--no-sync`, and answers from the current
//! index, saying it is stale, when the backlog is too large to sync inline.
//! `claw memory status` says plainly when the index is behind the disk.

use claw_testkit as support;

use serde_json::Value;
use std::path::Path;

fn search(ws: &Path, args: &[&str]) -> (i32, Value) {
    let out = support::claw_keyword_only(ws)
        .args(["memory", "search", "--json"])
        .args(args)
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert_ne!(code, 2, "{}", String::from_utf8_lossy(&out.stderr));
    (code, serde_json::from_slice(&out.stdout).unwrap())
}

#[test]
fn search_syncs_a_few_dirty_files_and_reports_a_large_backlog() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    support::write_tree(
        ws,
        &[(
            "MEMORY.md",
            "# Memory\nThe first fact mentions aardvarks.\n",
        )],
    );
    let out = support::claw_keyword_only(ws)
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert!(out.status.success());

    // Fresh index: nothing to sync.
    let (code, r) = search(ws, &["aardvarks"]);
    assert_eq!(code, 0);
    assert_eq!(r["sync"]["status"], "fresh", "{r}");

    // One note written after the index: --no-sync does not see it...
    support::write_tree(
        ws,
        &[("memory/2026-11-29.md", "Met the zookeeper about okapis.\n")],
    );
    let (code, r) = search(ws, &["okapis", "--no-sync"]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["sync"]["status"], "skipped");
    // ...a normal search re-indexes it first and finds it.
    let (code, r) = search(ws, &["okapis"]);
    assert_eq!(code, 0, "{r}");
    assert_eq!(r["sync"]["status"], "synced", "{r}");
    assert_eq!(r["sync"]["reindexed"][0]["path"], "memory/2026-11-29.md");
    assert_eq!(r["results"][0]["path"], "memory/2026-11-29.md");

    // A deleted note disappears the same way.
    std::fs::remove_file(ws.join("memory/2026-11-29.md")).unwrap();
    let (code, r) = search(ws, &["okapis"]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["sync"]["removed"][0]["path"], "memory/2026-11-29.md");

    // A large backlog is not indexed inline: the answer says the index is stale.
    for i in 0..40 {
        support::write_tree(
            ws,
            &[(&format!("memory/bulk-{i}.md"), "pangolins everywhere\n")],
        );
    }
    let (code, r) = search(ws, &["pangolins"]);
    assert_eq!(code, 1, "{r}");
    assert_eq!(r["sync"]["status"], "stale", "{r}");
    assert_eq!(r["sync"]["pending"], 40);

    // Status says so plainly, and that no watcher is running.
    let out = support::claw_keyword_only(ws)
        .args(["memory", "status"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("BEHIND the disk: 40 new"), "{text}");
    assert!(text.contains("no watcher running"), "{text}");
    let out = support::claw_keyword_only(ws)
        .args(["memory", "status", "--json"])
        .output()
        .unwrap();
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(st["changed_on_disk"]["new"], 40);
    assert_eq!(st["watcher"], Value::Null);
}
