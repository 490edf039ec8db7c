//! `claw memory watch` end to end on a real workspace: every kind of file change
//! becomes searchable (or unsearchable) through the watcher alone.

use claw_testkit as support;
use claw_testkit::watch_proc;

use claw_memory::store::Store;
use watch_proc::{WatchProc, count, fts, paths};

fn consistent(ws: &std::path::Path) {
    let store = Store::open(&claw_testkit::db_path(ws)).unwrap();
    let problems = store.check_consistency().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn create_modify_rename_atomic_save_move_and_delete() {
    let dir = support::workspace(&[("MEMORY.md", "# Memory\nevergreen zebrafact\n")]);
    let ws = dir.path();
    let mut w = WatchProc::start(ws);
    w.wait_db("MEMORY.md indexed at start-up", |c| {
        fts(c, "zebrafact") == 1
    });

    // Create (the memory/ folder does not exist yet: it is armed when created).
    support::write_tree(ws, &[("memory/a.md", "# A\nalphaword here\n")]);
    w.wait_db("created file searchable", |c| fts(c, "alphaword") == 1);

    // Modify.
    std::fs::write(ws.join("memory/a.md"), "# A\nbetaword now\n").unwrap();
    w.wait_db("modified file re-indexed", |c| {
        fts(c, "betaword") == 1 && fts(c, "alphaword") == 0
    });

    // Rename.
    std::fs::rename(ws.join("memory/a.md"), ws.join("memory/b.md")).unwrap();
    w.wait_db("renamed", |c| {
        paths(c, "memory") == ["MEMORY.md", "memory/b.md"]
    });

    // Editor-style atomic save: write a temp file, rename it over the original.
    std::fs::write(ws.join("memory/b.md.tmp~"), "# B\ngammaword saved\n").unwrap();
    std::fs::rename(ws.join("memory/b.md.tmp~"), ws.join("memory/b.md")).unwrap();
    w.wait_db("atomic save re-indexed", |c| {
        fts(c, "gammaword") == 1 && fts(c, "betaword") == 0
    });

    // A subfolder created after the watcher started, two levels deep.
    support::write_tree(ws, &[("memory/new/deep/c.md", "# C\ndeltaword deep\n")]);
    w.wait_db("new subfolder watched", |c| fts(c, "deltaword") == 1);
    std::fs::write(ws.join("memory/new/deep/c.md"), "# C\nepsilonword deep\n").unwrap();
    w.wait_db("edit inside the new subfolder", |c| {
        fts(c, "epsilonword") == 1 && fts(c, "deltaword") == 0
    });

    // Move out of the watched tree (a file and a whole folder).
    std::fs::rename(ws.join("memory/b.md"), ws.join("outside-b.md")).unwrap();
    std::fs::rename(ws.join("memory/new"), ws.join("outside-new")).unwrap();
    w.wait_db("moved out", |c| {
        fts(c, "gammaword") == 0 && fts(c, "epsilonword") == 0
    });

    // Move a folder in.
    std::fs::rename(ws.join("outside-new"), ws.join("memory/back")).unwrap();
    w.wait_db("folder moved in", |c| {
        paths(c, "memory") == ["MEMORY.md", "memory/back/deep/c.md"]
    });

    // Delete.
    std::fs::remove_file(ws.join("memory/back/deep/c.md")).unwrap();
    std::fs::remove_file(ws.join("MEMORY.md")).unwrap();
    w.wait_db("deleted", |c| count(c, "SELECT count(*) FROM files") == 0);
    w.wait_db("no chunks left", |c| {
        count(c, "SELECT count(*) FROM chunks") == 0
    });

    // Status sees a live watcher while it runs.
    {
        let store = Store::open(&claw_testkit::db_path(ws)).unwrap();
        let st = claw_memory::watch::watcher_status(&store).unwrap().unwrap();
        assert!(st.alive, "{st:?}");
        assert_eq!(st.row.pid, w.child.id() as i64);
    }
    let events = w.stop();
    assert_eq!(events.last().unwrap()["event"], "stopped");
    consistent(ws);
    let store = Store::open(&claw_testkit::db_path(ws)).unwrap();
    assert_eq!(claw_memory::watch::watcher_status(&store).unwrap(), None);
}

#[test]
fn watched_directory_deleted_and_recreated() {
    let dir = support::workspace(&[("memory/x.md", "# X\nkeepword one\n")]);
    let ws = dir.path();
    let mut w = WatchProc::start(ws);
    w.wait_db("initial", |c| fts(c, "keepword") == 1);

    std::fs::remove_dir_all(ws.join("memory")).unwrap();
    w.wait_db("folder deletion removes rows", |c| {
        count(c, "SELECT count(*) FROM files") == 0
    });
    std::fs::create_dir(ws.join("memory")).unwrap();
    std::fs::write(ws.join("memory/y.md"), "# Y\nreborn word\n").unwrap();
    w.wait_db("re-created folder is watched", |c| fts(c, "reborn") == 1);
    // And keeps being watched after re-arming.
    std::fs::write(ws.join("memory/y.md"), "# Y\nsecondlife word\n").unwrap();
    w.wait_db("edit after re-arm", |c| {
        fts(c, "secondlife") == 1 && fts(c, "reborn") == 0
    });

    // A registered notes folder deleted and re-created under the same name.
    let notes = ws.join("garden");
    support::write_tree(&notes, &[("n.md", "# N\nnotesword\n")]);
    let status = support::claw_keyword_only(ws)
        .args(["memory", "add"])
        .arg(&notes)
        .status()
        .unwrap();
    assert!(status.success());
    w.wait_db("registered source picked up", |c| fts(c, "notesword") == 1);
    std::fs::remove_dir_all(&notes).unwrap();
    w.wait_db("source folder gone", |c| fts(c, "notesword") == 0);
    support::write_tree(&notes, &[("m.md", "# M\nreturnword\n")]);
    w.wait_db("source folder back", |c| fts(c, "returnword") == 1);
    w.stop();
    consistent(ws);
}

#[test]
fn burst_of_a_thousand_files_is_batched() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("memory/burst")).unwrap();
    let mut w = WatchProc::start(ws);
    let before = w.events.len();
    for i in 0..1000 {
        std::fs::write(
            ws.join(format!("memory/burst/n{i:04}.md")),
            format!("# Note {i}\nburstword number{i}\n"),
        )
        .unwrap();
    }
    w.wait_db("all 1000 indexed", |c| {
        count(c, "SELECT count(*) FROM files") == 1000
    });
    let events = w.stop();
    let after: Vec<_> = events.iter().skip(before).collect();
    assert_eq!(
        after.iter().filter(|e| e["event"] == "error").count(),
        0,
        "{after:#?}"
    );
    // The burst is absorbed in a few batches, not one per file.
    let batches: Vec<usize> = after
        .iter()
        .filter(|e| e["event"] == "synced")
        .map(|e| e["reindexed"].as_array().map_or(0, |a| a.len()))
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(batches.iter().sum::<usize>(), 1000, "{batches:?}");
    assert!(batches.len() <= 5, "too many batches: {batches:?}");
    let c = watch_proc::db(ws).unwrap();
    assert_eq!(fts(&c, "burstword"), 1000);
    drop(c);
    consistent(ws);
}
