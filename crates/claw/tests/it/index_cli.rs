//! `claw memory index` end to end: the real binary, a real SQLite file, the real
//! embedding model. Counts, hashes, cache hits, cross-table consistency, and
//! bad input that must be skipped (counted) without losing what is indexed.

use claw_testkit as support;

use claw_memory::store::Store;
use rusqlite::Connection;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;

fn index_json(cmd: &mut std::process::Command) -> Value {
    support::run_json(cmd.args(["memory", "index", "--json"]))
}

fn db(ws: &Path) -> Connection {
    claw_memory::store::register_sqlite_vec();
    Connection::open(claw_testkit::db_path(ws)).unwrap()
}

fn count(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn consistent(ws: &Path) {
    let store = Store::open(&claw_testkit::db_path(ws)).unwrap();
    let problems = store.check_consistency().unwrap();
    assert!(problems.is_empty(), "inconsistent index: {problems:?}");
}

fn copy_fixture(ws: &Path) {
    let src = claw_testkit::repo_root().join("fixtures/notes");
    for entry in walkdir::WalkDir::new(&src) {
        let entry = entry.unwrap();
        let rel = entry.path().strip_prefix(&src).unwrap();
        let dst = ws.join(rel);
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
        } else {
            std::fs::copy(entry.path(), &dst).unwrap();
        }
    }
}

#[test]
fn incremental_index_with_the_real_model() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    copy_fixture(ws);
    let files_on_disk = 5; // MEMORY.md + memory/*.md (projects/ is not a workspace folder)

    // Full index: every chunk embedded, one vector per chunk.
    let r = index_json(&mut support::claw(ws));
    assert_eq!(r["files_scanned"], files_on_disk);
    assert_eq!(r["files_changed"], files_on_disk);
    assert_eq!(r["keyword_only"], Value::Null);
    let chunks = r["chunks_added"].as_u64().unwrap();
    assert!(chunks >= files_on_disk as u64);
    assert_eq!(r["embeddings_computed"].as_u64().unwrap(), chunks);
    let c = db(ws);
    assert_eq!(count(&c, "SELECT count(*) FROM chunks") as u64, chunks);
    assert_eq!(count(&c, "SELECT count(*) FROM chunks_vec") as u64, chunks);
    assert_eq!(
        count(&c, "SELECT count(*) FROM embedding_cache") as u64,
        chunks
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM chunks WHERE length(embedding) = 384 * 4"
        ) as u64,
        chunks
    );
    // Stored hashes are the files' sha256.
    let sha: String = c
        .query_row(
            "SELECT sha256 FROM files WHERE path = 'MEMORY.md'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let want = hex::encode(Sha256::digest(std::fs::read(ws.join("MEMORY.md")).unwrap()));
    assert_eq!(sha, want);
    consistent(ws);

    // No-op: nothing read, nothing embedded.
    let r = index_json(&mut support::claw(ws));
    assert_eq!(r["files_changed"], 0);
    assert_eq!(r["files_unchanged"], files_on_disk);
    assert_eq!(r["embeddings_computed"], 0);

    // Touch without change: hashed, not re-chunked.
    let p = ws.join("memory/gardening.md");
    let body = std::fs::read(&p).unwrap();
    std::fs::write(&p, &body).unwrap();
    let r = index_json(&mut support::claw(ws));
    assert_eq!(r["files_changed"], 0);
    assert_eq!(r["embeddings_computed"], 0);

    // One new paragraph: only the new chunk text is embedded.
    let mut text = String::from_utf8(body).unwrap();
    text.push_str("\n## Winter\nCover the raised beds with straw before the first frost.\n");
    std::fs::write(&p, &text).unwrap();
    let r = index_json(&mut support::claw(ws));
    assert_eq!(r["files_changed"], 1);
    let computed = r["embeddings_computed"].as_u64().unwrap();
    assert!(computed >= 1 && computed <= r["chunks_added"].as_u64().unwrap());
    consistent(ws);

    // Rename: the old path disappears, the new one costs no embedding (cache).
    std::fs::rename(
        ws.join("memory/2026-10-05.md"),
        ws.join("memory/2026-10-05-standup.md"),
    )
    .unwrap();
    let r = index_json(&mut support::claw(ws));
    assert_eq!(r["files_removed"], 1);
    assert_eq!(r["files_changed"], 1);
    assert_eq!(r["embeddings_computed"], 0);
    assert!(r["cache_hits"].as_u64().unwrap() >= 1);
    let c = db(ws);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM chunks WHERE path = 'memory/2026-10-05.md'"
        ),
        0
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM files WHERE path = 'memory/2026-10-05.md'"
        ),
        0
    );
    assert!(
        count(
            &c,
            "SELECT count(*) FROM chunks WHERE path = 'memory/2026-10-05-standup.md'"
        ) >= 1
    );
    // Dated file names carry their date for decay; evergreen files don't.
    assert!(
        count(
            &c,
            "SELECT count(*) FROM chunks WHERE path = 'memory/2026-10-05-standup.md' AND note_time IS NOT NULL"
        ) >= 1
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM chunks WHERE path = 'MEMORY.md' AND note_time IS NOT NULL"
        ),
        0
    );
    consistent(ws);

    // Delete: gone from every table.
    std::fs::remove_file(ws.join("memory/2026-11-02.md")).unwrap();
    let r = index_json(&mut support::claw(ws));
    assert_eq!(r["files_removed"], 1);
    let c = db(ws);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM chunks WHERE path = 'memory/2026-11-02.md'"
        ),
        0
    );
    assert_eq!(
        count(&c, &fts_sql("idempotency")),
        0,
        "deleted text still in FTS"
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM chunks_vec"),
        count(&c, "SELECT count(*) FROM chunks")
    );
    consistent(ws);

    // --force rebuilds but embeddings come from the cache.
    let out = support::claw(ws)
        .args(["memory", "index", "--force", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["rebuilt"], "--force");
    assert_eq!(r["embeddings_computed"], 0, "{r}");
    assert_eq!(r["cache_hits"], r["chunks_added"]);
    consistent(ws);
}

#[test]
fn model_change_rebuilds_and_keyword_only_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    copy_fixture(ws);
    let r = index_json(&mut support::claw_keyword_only(ws));
    assert_eq!(r["model"], "");
    assert!(r["keyword_only"].as_str().unwrap().contains("none"));
    assert_eq!(r["embeddings_computed"], 0);
    assert_eq!(
        count(
            &db(ws),
            "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL"
        ),
        0
    );

    // Now with the model: the index is rebuilt with vectors.
    let r = index_json(&mut support::claw(ws));
    assert!(
        r["rebuilt"].as_str().unwrap().contains("model changed"),
        "{r}"
    );
    assert_eq!(r["embeddings_computed"], r["chunks_added"]);
    consistent(ws);

    // A missing model falls back to keyword-only with a message naming the installer.
    let out = support::claw(ws)
        .env("CLAW_EMBED_MODEL_DIR", ws.join("no-such-model"))
        .args(["memory", "index", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r["keyword_only"]
            .as_str()
            .unwrap()
            .contains("claw memory install-model"),
        "{r}"
    );
}

#[test]
fn bad_input_is_skipped_and_counted_without_losing_anything() {
    let tmp = support::workspace(&[(
        "MEMORY.md",
        "# Memory\nThe quokka lives on Rottnest Island.\n",
    )]);
    let ws = tmp.path();
    let r = index_json(&mut support::claw_keyword_only(ws));
    assert_eq!(r["files_changed"], 1);

    let mem = ws.join("memory");
    std::fs::create_dir_all(&mem).unwrap();
    // Non-UTF-8 (Latin-1) text: indexed, with a warning.
    std::fs::write(
        mem.join("latin1.md"),
        b"Caf\xe9 cr\xe8me recipe with zanzibar vanilla\n",
    )
    .unwrap();
    // A binary file named .md: skipped.
    std::fs::write(mem.join("image.md"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0").unwrap();
    // Empty file: indexed with no chunks.
    std::fs::write(mem.join("empty.md"), b"").unwrap();
    // 50 MB file: over the default limit, skipped with the setting to raise.
    let big = "lorem ipsum dolor sit amet ".repeat(50 * 1024 * 1024 / 27 + 1);
    std::fs::write(mem.join("huge.md"), big).unwrap();
    // Symlink loop and a dangling link.
    std::os::unix::fs::symlink(&mem, mem.join("loop")).unwrap();
    std::os::unix::fs::symlink(ws.join("nowhere.md"), mem.join("dangling.md")).unwrap();

    let r = index_json(&mut support::claw_keyword_only(ws));
    let issues = r["issues"].as_array().unwrap();
    let msg = |path: &str| -> String {
        issues
            .iter()
            .filter(|i| i["path"].as_str().unwrap().contains(path))
            .map(|i| i["message"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join("; ")
    };
    assert!(msg("image.md").contains("binary"), "{issues:?}");
    assert!(msg("huge.md").contains("max_file_bytes"), "{issues:?}");
    assert!(msg("latin1.md").contains("UTF-8"), "{issues:?}");
    assert!(msg("loop").contains("loop"), "{issues:?}");
    assert!(!msg("dangling.md").is_empty(), "{issues:?}");
    assert_eq!(r["files_skipped"], 2, "{issues:?}");

    let c = db(ws);
    // What was indexed before is still there; the Latin-1 note is searchable.
    assert_eq!(count(&c, &fts_sql("quokka")), 1);
    assert_eq!(count(&c, &fts_sql("zanzibar")), 1);
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM files WHERE path = 'memory/empty.md'"
        ),
        1
    );
    assert_eq!(
        count(
            &c,
            "SELECT count(*) FROM files WHERE path = 'memory/huge.md'"
        ),
        0
    );
    consistent(ws);
}

#[test]
fn newer_schema_is_refused_with_exit_2() {
    let tmp = support::workspace(&[("MEMORY.md", "hello\n")]);
    let ws = tmp.path();
    index_json(&mut support::claw_keyword_only(ws));
    db(ws).pragma_update(None, "user_version", 999).unwrap();
    let out = support::claw_keyword_only(ws)
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("newer") && err.contains("upgrade claw"),
        "{err}"
    );
}

#[test]
fn files_deleted_while_indexing_leave_a_consistent_index() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().to_path_buf();
    let mem = ws.join("memory");
    std::fs::create_dir_all(&mem).unwrap();
    for i in 0..1500 {
        std::fs::write(
            mem.join(format!("n{i:04}.md")),
            format!("# Note {i}\nbody text number {i}\n"),
        )
        .unwrap();
    }
    let child = support::claw_keyword_only(&ws)
        .args(["memory", "index", "--json"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Delete every other file while the indexer runs.
    for i in (0..1500).step_by(2) {
        let _ = std::fs::remove_file(mem.join(format!("n{i:04}.md")));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The next pass reconciles, and the result is exactly the surviving files.
    index_json(&mut support::claw_keyword_only(&ws));
    let c = db(&ws);
    assert_eq!(count(&c, "SELECT count(*) FROM files"), 750);
    assert_eq!(count(&c, "SELECT count(*) FROM chunks"), 750);
    consistent(&ws);
}

#[test]
fn sources_add_list_remove() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let notes = tmp.path().join("my-notes");
    support::write_tree(
        &notes,
        &[
            ("a.md", "alpha note about narwhals\n"),
            ("sub/b.markdown", "beta\n"),
            ("c.txt", "not markdown\n"),
        ],
    );
    let ok = |c: &mut std::process::Command| {
        let o = c.output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    ok(support::claw_keyword_only(&ws)
        .args(["memory", "add"])
        .arg(&notes));
    // Same folder twice is refused.
    let o = support::claw_keyword_only(&ws)
        .args(["memory", "add"])
        .arg(&notes)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let list: Value = serde_json::from_str(&ok(
        support::claw_keyword_only(&ws).args(["memory", "sources", "--json"])
    ))
    .unwrap();
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "my-notes")
    );
    let r = index_json(&mut support::claw_keyword_only(&ws));
    assert_eq!(r["files_changed"], 2);
    assert_eq!(
        count(
            &db(&ws),
            "SELECT count(*) FROM files WHERE source = 'my-notes'"
        ),
        2
    );
    ok(support::claw_keyword_only(&ws).args(["memory", "remove", "my-notes"]));
    let c = db(&ws);
    assert_eq!(
        count(&c, "SELECT count(*) FROM files WHERE source = 'my-notes'"),
        0
    );
    assert_eq!(
        count(&c, "SELECT count(*) FROM chunks WHERE source = 'my-notes'"),
        0
    );
    assert_eq!(count(&c, &fts_sql("narwhals")), 0);
    let o = support::claw_keyword_only(&ws)
        .args(["memory", "remove", "my-notes"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn a_second_writer_waits_then_says_who_holds_the_lock() {
    let tmp = support::workspace(&[("MEMORY.md", "# Memory\nThe wombat fact.\n")]);
    let ws = tmp.path();
    index_json(&mut support::claw_keyword_only(ws));
    support::write_tree(ws, &[("memory/new.md", "A note about echidnas.\n")]);

    // Another writer (this test process) holds the lock.
    let lock = claw_memory::lock::WriterLock::acquire(
        &claw_testkit::state_dir(ws),
        "test holder",
        std::time::Duration::ZERO,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = support::claw_keyword_only(ws)
        .args(["memory", "index", "--lock-timeout", "1"])
        .output()
        .unwrap();
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "did not wait"
    );
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&std::process::id().to_string()) && err.contains("test holder"),
        "{err}"
    );
    // Nothing was lost, and searches still work while the lock is held.
    assert_eq!(count(&db(ws), &fts_sql("wombat")), 1);
    let out = support::claw_keyword_only(ws)
        .args(["memory", "search", "wombat", "--no-sync"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));

    // Once released, the next index picks the new note up.
    drop(lock);
    let r = index_json(&mut support::claw_keyword_only(ws));
    assert_eq!(r["files_changed"], 1);
    assert_eq!(count(&db(ws), &fts_sql("echidnas")), 1);
}

/// The count query for chunks whose word index holds `word` (as the index holds
/// it: stemmed, see `claw_memory::words`).
fn fts_sql(word: &str) -> String {
    format!(
        "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH '\"{}\"'",
        claw_memory::words::query_term(word)
    )
}
