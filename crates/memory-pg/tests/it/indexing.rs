//! The real indexer (`claw_memory::indexer`) against PostgreSQL: incremental
//! passes, a kill -9 in the middle of a pass (every file fully old or fully new),
//! two workspaces indexing one namespace concurrently under a search loop, and
//! the SQLite → PostgreSQL copy (vectors included, no re-embedding).

use crate::support::{self, Schema, SchemaStore};
use claw_memory::config::{EmbedProvider, MemoryConfig, MemorySettings};
use claw_memory::embed::Embedder;
use claw_memory::index_storage::IndexStorage;
use claw_memory::indexer::{self, IndexOptions};
use claw_memory::lock::WriterLock;
use claw_memory::search::engine::{Mode, SearchRequest, search_in};
use claw_memory::search::storage::SearchStorage;
use claw_memory::store::Store;
use claw_testkit::transcripts::{self, append};
use std::path::Path;
use std::time::Duration;

const NOW: i64 = 1_796_083_200;

fn index(ws: &Path, store: &mut dyn IndexStorage) -> indexer::IndexReport {
    index_with(ws, store, None)
}

/// One index pass of `ws` into `store` (holding the writer lock for it),
/// embedding with `embedder` when given.
fn index_with(
    ws: &Path,
    store: &mut dyn IndexStorage,
    embedder: Option<&dyn Embedder>,
) -> indexer::IndexReport {
    let cfg = MemoryConfig::for_workspace(ws, EmbedProvider::None);
    let lock = WriterLock::acquire(&cfg.state_dir(), "test", Duration::from_secs(5)).unwrap();
    indexer::run(
        store,
        &cfg,
        embedder,
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .unwrap()
}

fn fts(s: &dyn SearchStorage, q: &str) -> Vec<(String, String)> {
    let r = search_in(
        s,
        None,
        &MemorySettings::default(),
        &SearchRequest {
            mode: Mode::Fts,
            limit: 50,
            min_score: Some(0.0),
            ..SearchRequest::new(q)
        },
        NOW,
    )
    .unwrap();
    r.results.into_iter().map(|h| (h.source, h.path)).collect()
}

#[test]
fn incremental_passes_on_postgres() {
    let Some(schema) = Schema::new("incr") else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    claw_testkit::write_tree(
        ws.path(),
        &[
            ("MEMORY.md", "# Me\nI keep bees on the roof.\n"),
            ("memory/a.md", "# A\nThe quarterly offsite is in Lisbon.\n"),
            ("memory/b.md", "# B\nThe router password was rotated.\n"),
        ],
    );
    let id = claw_memory_pg::workspace_id(&ws.path().join(".claw")).unwrap();
    let mut pg = schema.store("team", &id);
    let r = index(ws.path(), &mut pg);
    assert_eq!((r.files_changed, r.files_unchanged), (3, 0), "{r:?}");
    let r = index(ws.path(), &mut pg);
    assert_eq!((r.files_changed, r.files_unchanged), (0, 3), "{r:?}");
    std::fs::write(
        ws.path().join("memory/a.md"),
        "# A\nThe offsite moved to Porto.\n",
    )
    .unwrap();
    std::fs::remove_file(ws.path().join("memory/b.md")).unwrap();
    let r = index(ws.path(), &mut pg);
    assert_eq!((r.files_changed, r.files_removed), (1, 1), "{r:?}");
    assert_eq!(
        fts(&pg, "Porto"),
        vec![("memory".into(), "memory/a.md".into())]
    );
    assert!(fts(&pg, "Lisbon").is_empty());
    assert!(fts(&pg, "router").is_empty());
    assert!(pg.check_consistency().unwrap().is_empty());
    assert_eq!(pg.stats().unwrap().files, 2);
}

/// Every chunk of a workspace's sessions source: (start, end, context, text, id).
fn session_chunks(c: &mut postgres::Client, ws: &str) -> Vec<(i32, i32, String, String, String)> {
    c.query(
        "SELECT start_line, end_line, coalesce(context, ''), text, id FROM chunks
         WHERE workspace = $1 AND source = 'sessions' ORDER BY start_line, end_line, id",
        &[&ws],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

/// Live use on PostgreSQL: the user's line is indexed before its answer
/// arrives, and the answer's pass re-chunks that trailing exchange in place
/// (`IndexStorage::remove_chunks_from`) instead of rewriting the whole
/// transcript, ending with the chunks of indexing the finished file once.
#[test]
fn an_answer_appended_after_its_question_joins_its_exchange_on_postgres() {
    let Some(schema) = Schema::new("trail") else {
        return;
    };
    let (meta, steps) = (transcripts::META, transcripts::growing_exchange());
    // Live: each line indexed as it arrives.
    let live = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(live.path().join("sessions")).unwrap();
    let path = live.path().join("sessions/cli_default.jsonl");
    std::fs::write(&path, meta).unwrap();
    let mut pg = schema.store("team", "live");
    index(live.path(), &mut pg);
    let mut c = schema.client();
    let (mut removed, mut added) = (0, 0);
    for (i, l) in steps.iter().enumerate() {
        append(&path, l);
        let r = index(live.path(), &mut pg);
        if i == 2 {
            // The control: the question alone is its own chunk before its answer.
            let alone = session_chunks(&mut c, "live");
            assert!(alone.iter().any(|c| c.0 == 4 && c.1 == 4), "{alone:?}");
        }
        if i == 4 {
            // The answer's pass dropped the lone question and wrote the
            // exchange: not the whole file again (its first exchange stays).
            (removed, added) = (r.chunks_removed, r.chunks_added);
        }
    }
    assert_eq!(
        (removed, added),
        (1, 1),
        "the answer's pass re-chunked one exchange"
    );
    assert_eq!(fts(&pg, "Ottilie Friday").len(), 1);
    // Whole: the finished file indexed once, in another workspace.
    let whole = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(whole.path().join("sessions")).unwrap();
    std::fs::write(
        whole.path().join("sessions/cli_default.jsonl"),
        format!("{meta}{}", steps.concat()),
    )
    .unwrap();
    let mut pg2 = schema.store("team", "whole");
    index(whole.path(), &mut pg2);
    let (got, want) = (
        session_chunks(&mut c, "live"),
        session_chunks(&mut c, "whole"),
    );
    assert_eq!(got, want);
    assert!(
        want.iter()
            .any(|c| c.0 == 4 && c.1 == 7 && c.3.contains("Ottilie") && c.3.contains("Friday")),
        "{want:?}"
    );
    assert_eq!(want.len(), 3, "{want:?}");
    assert!(pg.check_consistency().unwrap().is_empty());
}

fn crash_app(schema: &str) -> String {
    format!("claw_crash_{schema}")
}

/// Child half of the crash test: index the workspace named by the environment
/// until killed. Does nothing in a normal run.
#[test]
fn crash_child() {
    let (Ok(ws), Ok(schema), Ok(url)) = (
        std::env::var("CLAW_PG_CRASH_WS"),
        std::env::var("CLAW_PG_CRASH_SCHEMA"),
        std::env::var("CLAW_PG_URL"),
    ) else {
        return;
    };
    let id = claw_memory_pg::workspace_id(&Path::new(&ws).join(".claw")).unwrap();
    // Named, so the parent can wait for this backend to be gone after the kill.
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}application_name={}", crash_app(&schema));
    let mut cfg = claw_memory_pg::PgConfig::new(url, "crash", id);
    cfg.schema = schema;
    let mut pg = claw_memory_pg::PgStore::connect(cfg).unwrap();
    index(Path::new(&ws), &mut pg);
    // Reached only if the parent was too slow to kill us: say so.
    println!("CHILD FINISHED");
}

#[test]
fn kill_9_mid_index_leaves_every_file_old_or_new() {
    let Some(schema) = Schema::new("crash") else {
        return;
    };
    let ws = tempfile::tempdir().unwrap();
    let n = 400;
    let body = |v: &str, i: usize| -> String {
        // v1: 1 section; v2: many sections (more chunks), each marked with its version.
        let sections = if v == "v1" { 1 } else { 6 };
        (0..sections)
            .map(|s| {
                format!(
                    "# Part {s}\n{v}marker note {i} section {s}. {}\n\n",
                    "lorem ipsum dolor ".repeat(40)
                )
            })
            .collect()
    };
    for i in 0..n {
        let p = ws.path().join(format!("memory/n{i:04}.md"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, body("v1", i)).unwrap();
    }
    let id = claw_memory_pg::workspace_id(&ws.path().join(".claw")).unwrap();
    let mut pg = schema.store("crash", &id);
    assert_eq!(index(ws.path(), &mut pg).files_changed, n);
    for i in 0..n {
        std::fs::write(ws.path().join(format!("memory/n{i:04}.md")), body("v2", i)).unwrap();
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "indexing::crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CLAW_PG_CRASH_WS", ws.path())
        .env("CLAW_PG_CRASH_SCHEMA", &schema.name)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Kill it once some, but not all, files are new.
    let mut c = schema.client();
    let v2 = |c: &mut postgres::Client| -> i64 {
        c.query_one(
            "SELECT count(DISTINCT path) FROM chunks WHERE namespace = 'crash' AND text LIKE '%v2marker%'",
            &[],
        )
        .unwrap()
        .get(0)
    };
    let t0 = std::time::Instant::now();
    while v2(&mut c) < 20 && t0.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL
    let out = child.wait_with_output().unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("CHILD FINISHED"),
        "child finished before the kill"
    );
    // The server may still be executing a COMMIT the child sent just before it
    // died: count only once the child's backend is gone.
    let t0 = std::time::Instant::now();
    while c
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
            &[&crash_app(&schema.name)],
        )
        .unwrap()
        .get::<_, i64>(0)
        > 0
        && t0.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let done = v2(&mut c);
    assert!(
        done > 0 && (done as usize) < n,
        "killed mid-index: {done} of {n} files new"
    );

    // Every file: its file row and all its chunks are one version.
    let rows = c
        .query(
            "SELECT f.path, f.sha256,
                    count(ch.rowid) FILTER (WHERE ch.text LIKE '%v1marker%'),
                    count(ch.rowid) FILTER (WHERE ch.text LIKE '%v2marker%')
             FROM files f LEFT JOIN chunks ch USING (namespace, workspace, source, path)
             WHERE f.namespace = 'crash' GROUP BY f.path, f.sha256",
            &[],
        )
        .unwrap();
    assert_eq!(rows.len(), n);
    use sha2::Digest;
    for r in rows {
        let (path, sha, old, new): (String, String, i64, i64) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        let i: usize = path[8..12].parse().unwrap();
        let want = |v| hex::encode(sha2::Sha256::digest(body(v, i).as_bytes()));
        if sha == want("v1") {
            assert!(
                old > 0 && new == 0,
                "{path}: old file row with {old} old / {new} new chunks"
            );
        } else {
            assert_eq!(sha, want("v2"), "{path}");
            assert!(
                new >= 6 && old == 0,
                "{path}: new file row with {old} old / {new} new chunks"
            );
        }
    }
    assert!(pg.check_consistency().unwrap().is_empty());
    // The next pass finishes the job.
    let r = index(ws.path(), &mut pg);
    assert_eq!(r.files_changed as i64, n as i64 - done, "{r:?}");
    assert_eq!(v2(&mut c), n as i64);
}

#[test]
fn two_workspaces_index_one_namespace_under_a_search_loop() {
    let Some(schema) = Schema::new("conc") else {
        return;
    };
    let mk = |who: &str| {
        let ws = tempfile::tempdir().unwrap();
        let mut files = vec![(
            "MEMORY.md".to_string(),
            format!("# {who}\nThe {who} machine owns the kiwi{who} key.\n"),
        )];
        for i in 0..60 {
            files.push((
                format!("memory/{who}-{i}.md"),
                format!("# {who} {i}\nnote {i} of {who}: shared pelican topic.\n"),
            ));
        }
        let refs: Vec<(&str, &str)> = files
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        claw_testkit::write_tree(ws.path(), &refs);
        ws
    };
    let (wa, wb) = (mk("alpha"), mk("beta"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let searcher = {
        let cfg = schema.config("team", "searcher");
        let stop = stop.clone();
        std::thread::spawn(move || {
            let pg = claw_memory_pg::PgStore::connect(cfg).unwrap();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let hits = fts(&pg, "pelican");
                assert!(hits.len() <= 50);
                n += 1;
            }
            n
        })
    };
    // Both workspaces migrate and write at the same time.
    let handles: Vec<_> = [&wa, &wb]
        .into_iter()
        .map(|ws| {
            let path = ws.path().to_path_buf();
            let schema_name = schema.name.clone();
            let url = schema.url.clone();
            std::thread::spawn(move || {
                let id = claw_memory_pg::workspace_id(&path.join(".claw")).unwrap();
                let mut cfg = claw_memory_pg::PgConfig::new(url, "team", id);
                cfg.schema = schema_name;
                let mut pg = claw_memory_pg::PgStore::connect(cfg).unwrap();
                index(&path, &mut pg)
            })
        })
        .collect();
    for h in handles {
        let r = h.join().unwrap();
        assert_eq!(r.files_changed, 61, "{r:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(searcher.join().unwrap() > 0);
    // A search in the namespace sees both machines' MEMORY.md, each its own.
    let pg = schema.store("team", "reader");
    let a = fts(&pg, "kiwialpha");
    let b = fts(&pg, "kiwibeta");
    assert_eq!(a, vec![("memory".into(), "MEMORY.md".into())]);
    assert_eq!(b, vec![("memory".into(), "MEMORY.md".into())]);
    assert_eq!(fts(&pg, "pelican").len(), 50);
    let mut c = schema.client();
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM files WHERE namespace = 'team' AND path = 'MEMORY.md'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 2);
    // Another namespace sees none of it.
    let other = schema.store("elsewhere", "reader");
    assert!(fts(&other, "pelican").is_empty());
    // Re-indexing one workspace leaves the other's rows alone.
    let id_a = claw_memory_pg::workspace_id(&wa.path().join(".claw")).unwrap();
    let mut pa = schema.store("team", &id_a);
    std::fs::remove_file(wa.path().join("MEMORY.md")).unwrap();
    assert_eq!(index(wa.path(), &mut pa).files_removed, 1);
    assert!(fts(&pg, "kiwialpha").is_empty());
    assert_eq!(fts(&pg, "kiwibeta").len(), 1);
}

#[test]
fn migrate_copies_sqlite_with_vectors_and_no_reembedding() {
    let Some(schema) = Schema::new("mig") else {
        return;
    };
    let e = support::embedder();
    let ws = tempfile::tempdir().unwrap();
    claw_testkit::write_tree(
        ws.path(),
        &[
            (
                "MEMORY.md",
                "# Me\nI keep bees on the roof of the garage.\n",
            ),
            (
                "memory/trip.md",
                "# Trip\nWent hiking in the Alps with Marta.\n",
            ),
        ],
    );
    let cfg = MemoryConfig::for_workspace(ws.path(), EmbedProvider::None);
    let mut sqlite = Store::open(&cfg.db_path()).unwrap();
    let r = index_with(ws.path(), &mut sqlite, Some(&e));
    assert!(r.embeddings_computed > 0);

    let id = claw_memory_pg::workspace_id(&cfg.state_dir()).unwrap();
    let mut pg = schema.store("team", &id);
    let rep = claw_memory_pg::copy_sqlite(&sqlite, &mut pg).unwrap();
    assert_eq!(rep.files, 2);
    assert_eq!(rep.vectors, rep.chunks);
    assert!(rep.cache_entries >= rep.chunks);
    assert_eq!(pg.meta("model").unwrap().as_deref(), Some(e.model_id()));
    // The copied index answers a vector query, and an index pass finds nothing to do.
    let r = search_in(
        &pg,
        Some(&e),
        &MemorySettings::default(),
        &SearchRequest::new("mountain walk with a friend"),
        NOW,
    )
    .unwrap();
    assert_eq!(r.fallback, None);
    assert_eq!(r.results[0].path, "memory/trip.md");
    let r = index_with(ws.path(), &mut pg, Some(&e));
    assert_eq!(
        (r.files_changed, r.embeddings_computed, r.rebuilt.clone()),
        (0, 0, None),
        "{r:?}"
    );
    // Vectors are bit-identical to SQLite's.
    let conn = sqlite.open_inspector().unwrap();
    let blob: Vec<u8> = conn
        .query_row(
            "SELECT embedding FROM chunks WHERE path = 'memory/trip.md' LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let want = claw_memory::store::blob_to_vec(&blob).unwrap();
    let mut c = schema.client();
    let got: pgvector::Vector = c
        .query_one(
            "SELECT embedding FROM chunks WHERE path = 'memory/trip.md' LIMIT 1",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(got.to_vec(), want);
}
