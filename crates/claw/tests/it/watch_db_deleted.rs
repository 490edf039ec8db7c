//! Deleting the database under a running `claw memory watch` (issue 12, item
//! 10): the watcher notices (a dev+inode check per batch and on its heartbeat),
//! says so (`database_replaced`), reopens a new database, rebuilds the index
//! from the disk and goes on watching; the registered sources survive because
//! they are kept in a sidecar beside the database. The real binary throughout.

use claw_testkit as support;
use claw_testkit::watch_proc::{self, WatchProc, fts, paths};

use claw_memory::store::Store;
use serde_json::Value;
use std::path::Path;

fn claw_json(ws: &Path, args: &[&str]) -> Value {
    claw_testkit::run_json(support::claw_keyword_only(ws).args(args))
}

fn delete_db(ws: &Path) {
    let db = claw_testkit::db_path(ws);
    for suffix in ["", "-wal", "-shm"] {
        match std::fs::remove_file(format!("{}{suffix}", db.display())) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn a_deleted_database_is_noticed_rebuilt_and_sources_survive() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let notes = tmp.path().join("notes");
    support::write_tree(&ws, &[("MEMORY.md", "# Memory\nevergreen aardvarkfact\n")]);
    support::write_tree(
        &notes,
        &[("garden.md", "# Garden\nthe quince fruits in April\n")],
    );
    claw_testkit::run_ok(
        support::claw_keyword_only(&ws)
            .args(["memory", "add"])
            .arg(&notes)
            .args(["--name", "garden"]),
    );

    let mut w = WatchProc::start(&ws);
    w.wait_db("both sources indexed at start-up", |c| {
        fts(c, "aardvarkfact") == 1 && fts(c, "quince") == 1
    });

    let t0 = std::time::Instant::now();
    delete_db(&ws);
    let ev = w.wait_event("the deletion noticed", |e| {
        e["event"] == "database_replaced"
    });
    let noticed = t0.elapsed();
    assert_eq!(ev["path"], claw_testkit::db_path(&ws).display().to_string());
    let ev = w.wait_event("the rebuild", |e| {
        e["event"] == "synced" && e["rebuilt"] == "new index"
    });
    assert_eq!(ev["rescan"], true, "{ev}");
    // The new database holds both sources again: the registered one came back
    // from the sidecar.
    w.wait_db("both sources indexed again", |c| {
        fts(c, "aardvarkfact") == 1 && fts(c, "quince") == 1
    });
    // The figure the report quotes (the heartbeat is every 2 s).
    eprintln!(
        "database deleted: noticed after {} ms, searchable again after {} ms",
        noticed.as_millis(),
        t0.elapsed().as_millis()
    );
    {
        let c = watch_proc::db(&ws).unwrap();
        assert_eq!(paths(&c, "garden"), ["garden.md"]);
    }
    let sources = claw_json(&ws, &["memory", "sources", "--json"]);
    let names = claw_testkit::strs(&sources, "/name");
    assert_eq!(names, ["memory", "sessions", "garden"], "{sources}");

    // It goes on watching: a new note in the registered folder, and the
    // heartbeat is back in the new database.
    support::write_tree(&notes, &[("pond.md", "# Pond\nnewts and a heron\n")]);
    w.wait_db("a note written after the rebuild", |c| fts(c, "heron") == 1);
    w.wait_db("the heartbeat in the new database", |c| {
        watch_proc::count(c, "SELECT count(*) FROM watcher") == 1
    });
    let status = claw_json(&ws, &["memory", "status", "--json"]);
    assert_eq!(status["watcher"]["alive"], true, "{status}");
    assert_eq!(
        status["changed_on_disk"],
        serde_json::json!({"new": 0, "modified": 0, "deleted": 0}),
        "{status}"
    );

    // A second deletion, of the main file alone (its -wal/-shm left behind,
    // still the old database's): handled the same way, and the stale WAL is
    // not replayed into the new database.
    std::fs::remove_file(claw_testkit::db_path(&ws)).unwrap();
    w.wait_event("the second deletion", |e| e["event"] == "database_replaced");
    w.wait_db("rebuilt again", |c| {
        fts(c, "heron") == 1 && fts(c, "aardvarkfact") == 1
    });

    let events = w.stop();
    assert!(
        !events.iter().any(|e| e["event"] == "error"),
        "no error events: {events:#?}"
    );
    let store = Store::open(&claw_testkit::db_path(&ws)).unwrap();
    let problems = store.check_consistency().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}
