//! The freshness walk skipped when a live watcher vouches for the index: with an
//! idle `claw memory watch` running, `claw memory search` does no stat walk
//! (`"sync": {"status": "fresh", "checked_ms": 0, "watcher": PID}`); the watcher
//! stops vouching the moment a change arrives (its heartbeat row is written at
//! once), vouches again once the change is indexed, and without a watcher the
//! search walks the disk as before.

use claw_testkit::watch_proc::{WatchProc, count, db};
use claw_testkit::{claw_keyword_only, write_tree};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

fn search(ws: &Path, query: &str) -> Value {
    claw_testkit::stdout_json(claw_keyword_only(ws).args(["memory", "search", query, "--json"]))
}

fn paths(v: &Value) -> Vec<String> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_idle_watcher_vouches_for_the_index_and_search_skips_the_walk() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_tree(
        ws,
        &[("MEMORY.md", "# Memory\nThe vouchword lives here.\n")],
    );
    let out = claw_keyword_only(ws)
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert!(out.status.success());

    let mut w = WatchProc::start(ws);
    let pid = w.child.id() as i64;
    let idle =
        |c: &rusqlite::Connection| count(c, "SELECT count(*) FROM watcher WHERE pending = 0") == 1;
    w.wait_db("idle heartbeat", idle);
    let v = search(ws, "vouchword");
    assert_eq!(
        v["sync"],
        json!({"status": "fresh", "checked_ms": 0, "watcher": pid})
    );
    assert_eq!(paths(&v), ["MEMORY.md"]);

    // A change: the heartbeat says "pending" right away (not at the next
    // 2-second tick), so no search trusts the index while the batch waits.
    let wrote = Instant::now();
    write_tree(ws, &[("memory/new.md", "# New\nThe laterword arrives.\n")]);
    let busy = loop {
        let c = db(ws).unwrap();
        if count(&c, "SELECT count(*) FROM watcher WHERE pending > 0") == 1 {
            break wrote.elapsed();
        }
        assert!(
            wrote.elapsed() < Duration::from_secs(10),
            "the watcher never reported the change as pending"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(
        busy < Duration::from_millis(400),
        "pending reported after {busy:?}"
    );
    w.wait_db("change indexed, idle again", |c| {
        claw_testkit::watch_proc::fts(c, "laterword") == 1 && idle(c)
    });
    let v = search(ws, "laterword");
    assert_eq!(v["sync"]["watcher"], pid);
    assert_eq!(paths(&v), ["memory/new.md"]);

    // Without a watcher the search walks the disk (no `watcher` key).
    w.stop();
    let v = search(ws, "laterword");
    assert_eq!(v["sync"]["status"], "fresh");
    assert!(v["sync"].get("watcher").is_none(), "{}", v["sync"]);
    assert_eq!(paths(&v), ["memory/new.md"]);
}
