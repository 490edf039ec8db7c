//! `MemoryService`, the one assembly of search: the inline sync under each
//! `SyncPolicy` (never-built index, a dirty file, a backlog over the limit),
//! status, get, and the typed fallback of a keyword-only index.

use claw_memory::config::{EmbedProvider, MemoryConfig};
use claw_memory::freshness::SyncReport;
use claw_memory::lock::WriterLock;
use claw_memory::search::{Fallback, GetRequest, Mode, SearchRequest};
use claw_memory::service::{FirstIndex, MemoryService, SyncPolicy};
use std::time::Duration;

fn req(q: &str, mode: Mode) -> SearchRequest {
    SearchRequest {
        mode,
        min_score: Some(f64::NEG_INFINITY),
        ..SearchRequest::new(q)
    }
}

#[test]
fn search_syncs_by_policy_and_reports_status() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    claw_testkit::write_tree(
        ws,
        &[
            (
                "MEMORY.md",
                "# Memory\nThe wombat burrow is behind the shed.\n",
            ),
            ("memory/garden.md", "# Garden\nTomatoes need staking.\n"),
        ],
    );
    let service =
        MemoryService::open(MemoryConfig::for_workspace(ws, EmbedProvider::None)).unwrap();

    // A never-built index: the inline sync indexes both files, then answers.
    let out = service
        .search(&req("wombat", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    match &out.sync {
        SyncReport::Synced {
            reindexed, removed, ..
        } => {
            assert_eq!((reindexed.len(), removed.len()), (2, 0), "{:?}", out.sync)
        }
        other => panic!("expected a sync, got {other:?}"),
    }
    assert_eq!(out.response.results[0].path, "MEMORY.md");
    assert_eq!(out.response.results[0].citation, "MEMORY.md#L1-L2");
    assert_eq!(out.response.fallback, None);
    // Hybrid on a keyword-only index: answered by keywords, and says why.
    let out = service
        .search(&req("wombat", Mode::Hybrid), SyncPolicy::Skip)
        .unwrap();
    assert_eq!(out.response.fallback, Some(Fallback::NoVectors));
    assert_eq!(out.response.results.len(), 1);
    assert_eq!(out.sync, SyncReport::Skipped);
    let status = service.status().unwrap();
    assert_eq!(status.model.as_deref(), Some(""));
    assert_eq!((status.stats.files, status.staleness.dirty()), (2, 0));

    // A file changes on disk.
    std::fs::write(
        ws.join("memory/garden.md"),
        "# Garden\nTomatoes need staking.\nThe quince tree fruits in April.\n",
    )
    .unwrap();
    assert_eq!(service.status().unwrap().staleness.changed.len(), 1);
    // Skip: the index is answered as it is.
    let out = service
        .search(&req("quince", Mode::Fts), SyncPolicy::Skip)
        .unwrap();
    assert!(out.response.results.is_empty());
    // A limit below the backlog: stale, nothing re-indexed.
    let out = service
        .search(&req("quince", Mode::Fts), SyncPolicy::Inline { limit: 0 })
        .unwrap();
    assert!(
        matches!(out.sync, SyncReport::Stale { pending: 1, .. }),
        "{:?}",
        out.sync
    );
    assert!(out.response.results.is_empty());
    // Within the limit: synced, then found.
    let out = service
        .search(&req("quince", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    assert!(
        matches!(out.sync, SyncReport::Synced { .. }),
        "{:?}",
        out.sync
    );
    assert_eq!(out.response.results[0].citation, "memory/garden.md#L1-L3");
    assert_eq!(service.status().unwrap().staleness.dirty(), 0);

    // The CLI's JSON: the response flattened beside `sync`.
    let json = serde_json::to_string(&out).unwrap();
    assert!(
        json.starts_with(r#"{"query":"quince","mode":"fts","fallback":null,"results":[{"path":"memory/garden.md","source":"memory","start_line":1,"end_line":3,"#),
        "{json}"
    );
    assert!(json.contains(r#"],"sync":{"status":"synced","reindexed":[{"source":"memory","path":"memory/garden.md"}]"#), "{json}");

    let got = service
        .get(&GetRequest {
            from: 3,
            ..GetRequest::new("memory/garden.md")
        })
        .unwrap();
    assert_eq!(
        (got.from, got.to, got.total_lines, got.text.as_str()),
        (3, 3, 3, "The quince tree fruits in April.\n")
    );
}

/// The search answers its query while the stat walk runs: when the walk finds
/// the index fresh, that answer stands; when it finds an edit (in place, same
/// size, only the content and mtime moved), a new file or a deletion, the
/// answer is the one given after the inline sync, as if the sync ran first.
#[test]
fn a_first_build_reports_another_writer_instead_of_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    claw_testkit::write_tree(ws, &[("MEMORY.md", "# Memory\nBees on the roof.\n")]);
    let cfg = MemoryConfig::for_workspace(ws, EmbedProvider::None);
    let service = MemoryService::open(cfg.clone()).unwrap();
    let held = WriterLock::acquire(&cfg.state_dir(), "another writer", Duration::ZERO).unwrap();
    let first = service
        .build_if_never_indexed("first use", &|_| {})
        .unwrap();
    assert_eq!(
        first,
        FirstIndex::Busy {
            pid: std::process::id(),
            what: "another writer".into()
        }
    );
    drop(held);
    match service
        .build_if_never_indexed("first use", &|_| {})
        .unwrap()
    {
        FirstIndex::Built(r) => assert_eq!(r.files_changed, 1, "{r:?}"),
        other => panic!("expected a build, got {other:?}"),
    }
    let again = service
        .build_if_never_indexed("first use", &|_| {})
        .unwrap();
    assert_eq!(again, FirstIndex::AlreadyBuilt);
}

#[test]
fn the_overlapped_search_answers_as_syncing_first_would() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    let note = ws.join("memory/animals.md");
    std::fs::write(&note, "# Animals\nThe wombat digs at night.\n").unwrap();
    std::fs::write(ws.join("memory/plants.md"), "# Plants\nQuince in April.\n").unwrap();
    let service =
        MemoryService::open(MemoryConfig::for_workspace(ws, EmbedProvider::None)).unwrap();
    let first = service
        .search(&req("wombat", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    assert!(matches!(first.sync, SyncReport::Synced { .. }), "{first:?}");

    // Fresh: the answer given during the walk is the answer.
    let fresh = service
        .search(&req("wombat", Mode::Hybrid), SyncPolicy::DEFAULT)
        .unwrap();
    assert!(
        matches!(fresh.sync, SyncReport::Fresh { watcher: None, .. }),
        "{:?}",
        fresh.sync
    );
    let skipped = service
        .search(&req("wombat", Mode::Hybrid), SyncPolicy::Skip)
        .unwrap();
    assert_eq!(fresh.response, skipped.response);
    assert_eq!(fresh.response.results[0].path, "memory/animals.md");

    // In place, same size: only the content and the mtime change.
    let before = std::fs::metadata(&note).unwrap();
    std::fs::write(&note, "# Animals\nThe numbat digs at night.\n").unwrap();
    assert_eq!(std::fs::metadata(&note).unwrap().len(), before.len());
    let later = before.modified().unwrap() + std::time::Duration::from_millis(3);
    std::fs::File::options()
        .write(true)
        .open(&note)
        .unwrap()
        .set_modified(later)
        .unwrap();
    // A backlog over the limit: stale, answered from the index as it is.
    let stale = service
        .search(&req("wombat", Mode::Fts), SyncPolicy::Inline { limit: 0 })
        .unwrap();
    assert!(
        matches!(stale.sync, SyncReport::Stale { pending: 1, .. }),
        "{:?}",
        stale.sync
    );
    assert_eq!(stale.response.results[0].path, "memory/animals.md");
    // Within the limit: the old word is gone, the new one found.
    let gone = service
        .search(&req("wombat", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    match &gone.sync {
        SyncReport::Synced { reindexed, .. } => {
            assert_eq!(reindexed.len(), 1);
            assert_eq!(reindexed[0].path, "memory/animals.md");
        }
        other => panic!("expected a sync, got {other:?}"),
    }
    assert!(gone.response.results.is_empty(), "{:?}", gone.response);
    let found = service
        .search(&req("numbat", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    assert!(matches!(found.sync, SyncReport::Fresh { .. }), "{found:?}");
    assert_eq!(found.response.results[0].path, "memory/animals.md");

    // A new file and a deleted one, in one search.
    std::fs::write(ws.join("memory/new.md"), "# New\nA quokka smiles.\n").unwrap();
    std::fs::remove_file(ws.join("memory/plants.md")).unwrap();
    let out = service
        .search(&req("quokka", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    match &out.sync {
        SyncReport::Synced {
            reindexed, removed, ..
        } => {
            assert_eq!(reindexed[0].path, "memory/new.md");
            assert_eq!(removed[0].path, "memory/plants.md");
        }
        other => panic!("expected a sync, got {other:?}"),
    }
    assert_eq!(out.response.results[0].path, "memory/new.md");
    let out = service
        .search(&req("quince", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    assert!(out.response.results.is_empty(), "{:?}", out.response);
}

/// `claw memory index --force` in another process swaps a new database in
/// (`claw_memory::rebuild`): a long-lived service (the gateway, MCP) follows
/// it on its next call, and a writer whose connection is the old file's writes
/// nothing into it once it has the writer lock.
#[test]
fn a_service_follows_a_rebuild_swapped_in() {
    use claw_memory::freshness::{self, FileRef, SyncError};
    use claw_memory::indexer::{self, IndexOptions};
    use claw_memory::lock::WriterLock;
    use claw_memory::store::Store;

    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("MEMORY.md"), "# Memory\nThe wombat burrow.\n").unwrap();
    let settings = MemoryConfig::for_workspace(ws, EmbedProvider::None);
    let service = MemoryService::open(settings.clone()).unwrap();
    let out = service
        .search(&req("wombat", Mode::Fts), SyncPolicy::DEFAULT)
        .unwrap();
    assert_eq!(out.response.results.len(), 1);
    // A watcher batch's connection, opened before the rebuild.
    let mut waiting = Store::open(&settings.db_path()).unwrap();

    std::fs::write(ws.join("MEMORY.md"), "# Memory\nThe quokka nest.\n").unwrap();
    {
        let lock = WriterLock::acquire(&settings.state_dir(), "test", Default::default()).unwrap();
        let mut writer = Store::open(&settings.db_path()).unwrap();
        let force = IndexOptions { force: true };
        let r = indexer::run(&mut writer, &settings, None, &force, &lock, &|_| {}).unwrap();
        assert_eq!(r.files_changed, 1);
    }
    // No inline sync: the answer is the new file's.
    let out = service
        .search(&req("quokka", Mode::Fts), SyncPolicy::Skip)
        .unwrap();
    assert_eq!(out.response.results.len(), 1, "{out:?}");
    let out = service
        .search(&req("wombat", Mode::Fts), SyncPolicy::Skip)
        .unwrap();
    assert!(out.response.results.is_empty(), "{out:?}");

    assert!(waiting.is_replaced());
    let lock = WriterLock::acquire(&settings.state_dir(), "test", Default::default()).unwrap();
    let file = FileRef {
        source: "memory".into(),
        path: "MEMORY.md".into(),
    };
    let err = freshness::apply_paths(&mut waiting, &settings, None, &[file], &lock)
        .expect_err("the old file is not written");
    assert!(matches!(err, SyncError::DatabaseReplaced { .. }), "{err}");
}
