//! Library-level watcher tests with the real indexer: an overflowing event queue
//! falls back to a full rescan (nothing is lost), and the freshness check and
//! inline sync used by `claw memory search`.

use claw_memory::config::{EmbedProvider, MemoryConfig};
use claw_memory::freshness::{self, FileRef, IdentityMismatch, StaleReason, SyncReport};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use claw_memory::watch::{self, IndexerSink, WatchEvent, WatchOptions};
use std::time::{Duration, Instant};

fn files(store: &Store) -> i64 {
    store
        .open_inspector()
        .unwrap()
        .query_row("SELECT count(*) FROM files", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn queue_overflow_becomes_a_full_rescan() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    let settings = MemoryConfig::for_workspace(ws, EmbedProvider::None);
    let (tx, rx) = std::sync::mpsc::channel();
    let opts = WatchOptions {
        event_queue: 4,
        notes_debounce: Duration::from_millis(300),
        ..WatchOptions::default()
    };
    let sink = IndexerSink::new(settings.clone(), None);
    let w = watch::spawn(settings.clone(), opts, Box::new(sink), tx).unwrap();
    // Wait for the start-up rescan so the burst below is seen by the watches.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ev = rx
            .recv_timeout(deadline - Instant::now())
            .expect("start-up sync");
        if matches!(ev, WatchEvent::Synced { rescan: true, .. }) {
            break;
        }
    }
    for i in 0..300 {
        std::fs::write(
            ws.join(format!("memory/f{i}.md")),
            format!("# F{i}\nflood{i}\n"),
        )
        .unwrap();
    }
    let mut overflowed = false;
    let mut rescanned_after = false;
    let store = Store::open(&settings.db_path()).unwrap();
    while files(&store) < 300 || !rescanned_after {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(WatchEvent::Overflow) => overflowed = true,
            Ok(WatchEvent::Synced { rescan: true, .. }) if overflowed => rescanned_after = true,
            Ok(WatchEvent::Error { message }) => panic!("watcher error: {message}"),
            Ok(_) => {}
            Err(e) => panic!(
                "timed out ({e}); overflowed={overflowed} files={}",
                files(&store)
            ),
        }
    }
    assert!(overflowed);
    assert_eq!(files(&store), 300);
    w.stop().unwrap();
    assert!(store.check_consistency().unwrap().is_empty());
    assert_eq!(watch::watcher_status(&store).unwrap(), None);
}

#[test]
fn inline_sync_is_bounded_and_never_waits_for_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    for n in ["a", "b", "c"] {
        std::fs::create_dir_all(ws.join("memory")).unwrap();
        std::fs::write(
            ws.join(format!("memory/{n}.md")),
            format!("# {n}\nword{n}\n"),
        )
        .unwrap();
    }
    let settings = MemoryConfig::for_workspace(ws, EmbedProvider::None);
    let mut store = Store::open(&settings.db_path()).unwrap();
    // First sync indexes the three new files.
    let r = freshness::sync_small(&mut store, &settings, None, 20).unwrap();
    assert!(
        matches!(&r, SyncReport::Synced { reindexed, .. } if reindexed.len() == 3),
        "{r:?}"
    );
    assert!(matches!(
        freshness::sync_small(&mut store, &settings, None, 20).unwrap(),
        SyncReport::Fresh { .. }
    ));

    // One new, one changed, one deleted.
    std::fs::write(ws.join("memory/d.md"), "# d\nwordd\n").unwrap();
    std::fs::write(ws.join("memory/a.md"), "# a\nchanged text here\n").unwrap();
    std::fs::remove_file(ws.join("memory/c.md")).unwrap();
    let st = freshness::check(&settings, &store).unwrap();
    assert_eq!(st.new, [FileRef::new("memory", "memory/d.md")]);
    assert_eq!(st.changed, [FileRef::new("memory", "memory/a.md")]);
    assert_eq!(st.deleted, [FileRef::new("memory", "memory/c.md")]);

    // Another writer holds the lock: the sync does not wait, it reports stale.
    let lock =
        WriterLock::acquire(&settings.state_dir(), "claw memory index", Duration::ZERO).unwrap();
    let d = settings.clone();
    let r = std::thread::spawn(move || {
        let mut store = Store::open(&d.db_path()).unwrap();
        let start = Instant::now();
        let r = freshness::sync_small(&mut store, &d, None, 20).unwrap();
        (r, start.elapsed())
    })
    .join()
    .unwrap();
    match &r.0 {
        SyncReport::Stale {
            pending, reason, ..
        } => {
            assert_eq!(*pending, 3);
            assert!(
                matches!(reason, StaleReason::Busy { what, .. } if what == "claw memory index"),
                "{reason:?}"
            );
        }
        other => panic!("expected stale, got {other:?}"),
    }
    assert!(r.1 < Duration::from_secs(5));
    drop(lock);

    let r = freshness::sync_small(&mut store, &settings, None, 20).unwrap();
    match &r {
        SyncReport::Synced {
            reindexed, removed, ..
        } => {
            assert_eq!(reindexed.len(), 2, "{r:?}");
            assert_eq!(removed, &[FileRef::new("memory", "memory/c.md")]);
        }
        other => panic!("{other:?}"),
    }
    assert!(freshness::check(&settings, &store).unwrap().is_fresh());

    // A backlog over the limit is never indexed inline.
    for i in 0..30 {
        std::fs::write(ws.join(format!("memory/bulk{i}.md")), "# bulk\n").unwrap();
    }
    let r = freshness::sync_small(&mut store, &settings, None, 20).unwrap();
    assert!(matches!(r, SyncReport::Stale { pending: 30, .. }), "{r:?}");
    assert_eq!(files(&store), 3);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["status"], "stale");

    // An inline sync never rebuilds an index made with another model.
    for i in 0..30 {
        std::fs::remove_file(ws.join(format!("memory/bulk{i}.md"))).unwrap();
    }
    store.set_meta("model", "some-other-model").unwrap();
    std::fs::write(
        ws.join("memory/e.md"),
        "# e
",
    )
    .unwrap();
    let r = freshness::sync_small(&mut store, &settings, None, 20).unwrap();
    match &r {
        SyncReport::Stale {
            pending, reason, ..
        } => {
            assert_eq!(*pending, 1);
            assert!(
                matches!(
                    reason,
                    StaleReason::Identity(IdentityMismatch::Model { indexed, .. })
                        if indexed == "some-other-model"
                ),
                "{reason:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(files(&store), 3);
}
