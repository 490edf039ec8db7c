//! The cheap freshness walk (`walk::walk_stamps` compared against
//! `Store::file_stamps`) against the full one it replaces
//! (`walk::walk_source` + `Store::file_records` + `freshness::diff`): on a
//! real indexed workspace and notes folder, through new, changed-in-place,
//! deleted, renamed, skipped-for-cause, hidden and non-UTF-8 files, both give
//! the same answer, also in a directory large enough to be stat'ed by two
//! threads; a source with symbolic links takes the full walk. The directory
//! cache (`dircache`) changes the cost of a walk, never its answer.

use claw_memory::config::{EmbedProvider, MemoryConfig};
use claw_memory::dircache::DirCache;
use claw_memory::freshness::{self, FileRef, Staleness};
use claw_memory::indexer::{self, IndexOptions};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use claw_memory::walk::{self, StampWalk};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

fn write(path: &Path, text: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn index(store: &mut Store, settings: &MemoryConfig) {
    let lock = WriterLock::acquire(&settings.state_dir(), "test", Duration::ZERO).unwrap();
    indexer::run(
        store,
        settings,
        None,
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .unwrap();
}

/// The freshness check as it was before the cheap walk: the full walk of
/// every source diffed against full `files` rows.
fn full_walk_check(settings: &MemoryConfig, store: &Store) -> Staleness {
    let mut out = Staleness::default();
    for src in walk::sources(settings, store).unwrap() {
        let (disk, _issues) = walk::walk_source(&src);
        let records = store.file_records(&src.name).unwrap();
        let skipped =
            indexer::skipped_records(store, &src.name, settings.memory.max_file_bytes).unwrap();
        let st = freshness::diff(&src.name, &disk, &records, &skipped);
        out.new.extend(st.new);
        out.changed.extend(st.changed);
        out.deleted.extend(st.deleted);
        out.scanned += st.scanned;
    }
    out
}

/// `freshness::check`, asserted equal to the full walk's answer.
fn check(settings: &MemoryConfig, store: &Store) -> Staleness {
    let mut st = freshness::check(settings, store).unwrap();
    st.elapsed_ms = 0;
    assert_eq!(st, full_walk_check(settings, store));
    st
}

fn set_mtime(path: &Path, t: SystemTime) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(t).unwrap();
}

fn notes(store: &Store, settings: &MemoryConfig) -> walk::SourceRoot {
    walk::sources(settings, store)
        .unwrap()
        .into_iter()
        .find(|s| s.name == "notes")
        .unwrap()
}

#[test]
fn the_cheap_walk_finds_what_the_full_walk_finds() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let garden = dir.path().join("garden");
    write(&ws.join("MEMORY.md"), b"# Memory\nprefers tea\n");
    write(&ws.join("memory/2026-01-01.md"), b"# Day\nmet Ana\n");
    write(&ws.join("memory/.git/x.md"), b"hidden\n");
    write(&ws.join("sessions/cli_default.jsonl"), b"");
    for i in 0..40 {
        write(
            &garden.join(format!("d{}/n{i:02}.md", i % 4)),
            format!("# Note {i}\nbody {i}\n").as_bytes(),
        );
    }
    write(&garden.join("top.markdown"), b"# Top\n");
    write(&garden.join("d0/deep/er/leaf.MD"), b"# Leaf\n");
    write(&garden.join("node_modules/pkg/readme.md"), b"# no\n");
    write(&garden.join(".obsidian/x.md"), b"# no\n");
    write(&garden.join("d1/.hidden.md"), b"# no\n");
    write(&garden.join("d1/image.png"), b"\x89PNG");
    write(&garden.join("d2/binary.md"), b"# bin\n\0\0\0");
    write(
        &garden.join(OsStr::from_bytes(b"caf\xe9.md")),
        b"# latin1\n",
    );
    write(
        &garden.join(OsStr::from_bytes(b"d\xff/inside.md")),
        b"# under a latin1 dir\n",
    );
    let settings = MemoryConfig::for_workspace(&ws, EmbedProvider::None);
    let mut store = Store::open(&settings.db_path()).unwrap();
    store.add_source("notes", &garden).unwrap();
    index(&mut store, &settings);
    assert_eq!(
        walk::walk_stamps(&notes(&store, &settings), |_, _| {}),
        StampWalk::Complete
    );

    // Fresh: every listed file seen (40 + top + leaf + the binary one), nothing dirty.
    let st = check(&settings, &store);
    assert!(st.is_fresh(), "{st:?}");
    assert_eq!(st.scanned, 2 + 1 + 43, "{st:?}");

    // New (nested), changed in place (same size, mtime 1 ns later), deleted,
    // renamed, the skipped binary touched.
    write(&garden.join("d3/new/fresh.md"), b"# Fresh\n");
    let inplace = garden.join("d1/n01.md");
    let before = std::fs::metadata(&inplace).unwrap().modified().unwrap();
    let size = std::fs::metadata(&inplace).unwrap().len();
    std::fs::write(&inplace, b"# Note 1\nBODY 1\n").unwrap();
    assert_eq!(std::fs::metadata(&inplace).unwrap().len(), size);
    set_mtime(&inplace, before + Duration::from_nanos(1));
    std::fs::remove_file(garden.join("d2/n02.md")).unwrap();
    std::fs::rename(garden.join("d3/n03.md"), garden.join("d0/moved.md")).unwrap();
    std::fs::rename(ws.join("MEMORY.md"), ws.join("memory/MEMORY-old.md")).unwrap();
    let bin = garden.join("d2/binary.md");
    let bin_mtime = std::fs::metadata(&bin).unwrap().modified().unwrap();
    set_mtime(&bin, bin_mtime + Duration::from_secs(1));
    // Not listed by either walk: hidden, ignored folders, non-Markdown, non-UTF-8.
    write(&garden.join(".obsidian/y.md"), b"# no\n");
    write(&garden.join("node_modules/z.md"), b"# no\n");
    write(&garden.join("d1/.also-hidden.md"), b"# no\n");
    write(&garden.join("d1/notes.txt"), b"no\n");
    write(&garden.join(OsStr::from_bytes(b"na\xefve.md")), b"# no\n");

    let st = check(&settings, &store);
    let n = |p: &str| FileRef::new("notes", p);
    assert_eq!(
        st.new,
        [
            FileRef::new("memory", "memory/MEMORY-old.md"),
            n("d0/moved.md"),
            n("d2/binary.md"),
            n("d3/new/fresh.md"),
        ]
    );
    assert_eq!(st.changed, [n("d1/n01.md")]);
    assert_eq!(
        st.deleted,
        [
            FileRef::new("memory", "MEMORY.md"),
            n("d2/n02.md"),
            n("d3/n03.md")
        ]
    );

    // Indexed again: fresh; the binary file is remembered as skipped again.
    index(&mut store, &settings);
    assert!(check(&settings, &store).is_fresh());

    // A source unregistered behind the index's back: all its rows are deleted.
    rusqlite::Connection::open(settings.db_path())
        .unwrap()
        .execute("DELETE FROM sources WHERE name = 'notes'", [])
        .unwrap();
    let st = freshness::check(&settings, &store).unwrap();
    assert!(st.new.is_empty() && st.changed.is_empty());
    // 40 notes, one deleted, one added, top and leaf (the binary file is
    // remembered as skipped, not indexed).
    assert_eq!(st.deleted.len(), 42, "{st:?}");
    assert!(st.deleted.iter().all(|f| f.source == "notes"));
    assert!(st.deleted.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn a_source_with_symlinks_takes_the_full_walk() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let garden = dir.path().join("garden");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    write(&garden.join("a.md"), b"# A\n");
    write(&garden.join("sub/b.md"), b"# B\n");
    write(&outside.join("secret.md"), b"# outside the root\n");
    std::os::unix::fs::symlink(garden.join("sub/b.md"), garden.join("link-in.md")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.md"), garden.join("link-out.md")).unwrap();
    std::os::unix::fs::symlink(&outside, garden.join("linked-dir")).unwrap();
    // A dot-named link lists nothing; on its own it would not need the full walk.
    std::os::unix::fs::symlink(&outside, garden.join(".hidden-link")).unwrap();
    let settings = MemoryConfig::for_workspace(&ws, EmbedProvider::None);
    let mut store = Store::open(&settings.db_path()).unwrap();
    store.add_source("notes", &garden).unwrap();
    index(&mut store, &settings);
    let src = notes(&store, &settings);
    assert_eq!(walk::walk_stamps(&src, |_, _| {}), StampWalk::NeedsFullWalk);
    let st = check(&settings, &store);
    assert!(st.is_fresh(), "{st:?}");
    assert_eq!(st.scanned, 3, "a.md, link-in.md, sub/b.md: {st:?}");

    // Changes behind links are found; the links out of the root stay skipped.
    std::fs::write(garden.join("sub/b.md"), b"# B, longer now\n").unwrap();
    write(&outside.join("more.md"), b"# more outside\n");
    let st = check(&settings, &store);
    let n = |p: &str| FileRef::new("notes", p);
    assert_eq!(st.changed, [n("link-in.md"), n("sub/b.md")]);
    assert!(st.new.is_empty() && st.deleted.is_empty(), "{st:?}");

    // Without the links that matter, the cheap walk runs (and agrees).
    for l in ["link-in.md", "link-out.md", "linked-dir"] {
        std::fs::remove_file(garden.join(l)).unwrap();
    }
    assert_eq!(walk::walk_stamps(&src, |_, _| {}), StampWalk::Complete);
    let st = check(&settings, &store);
    assert_eq!(st.changed, [n("sub/b.md")]);
    assert_eq!(st.deleted, [n("link-in.md")]);
}

#[test]
fn a_large_directory_is_stat_by_two_threads_and_nothing_is_missed() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let garden = dir.path().join("garden");
    std::fs::create_dir_all(&ws).unwrap();
    // Over the two-thread threshold (512 files to stat in one directory).
    for i in 0..700 {
        write(
            &garden.join(format!("n{i:03}.md")),
            format!("# {i}\n").as_bytes(),
        );
    }
    let settings = MemoryConfig::for_workspace(&ws, EmbedProvider::None);
    let mut store = Store::open(&settings.db_path()).unwrap();
    store.add_source("notes", &garden).unwrap();
    index(&mut store, &settings);
    let st = check(&settings, &store);
    assert!(st.is_fresh(), "{st:?}");
    assert_eq!(st.scanned, 700);

    // One change in each half of the directory, one deletion, one new file.
    std::fs::write(garden.join("n010.md"), b"# ten, edited\n").unwrap();
    std::fs::write(garden.join("n650.md"), b"# six fifty, edited\n").unwrap();
    std::fs::remove_file(garden.join("n699.md")).unwrap();
    write(&garden.join("n999.md"), b"# new\n");
    let st = check(&settings, &store);
    let n = |p: &str| FileRef::new("notes", p);
    assert_eq!(st.changed, [n("n010.md"), n("n650.md")]);
    assert_eq!(st.new, [n("n999.md")]);
    assert_eq!(st.deleted, [n("n699.md")]);
    assert_eq!(st.scanned, 700);
}

#[test]
fn the_directory_cache_lists_only_changed_directories_and_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (garden, state) = (dir.path().join("garden"), dir.path().join("state"));
    std::fs::create_dir_all(&state).unwrap();
    for i in 0..40 {
        write(
            &garden.join(format!("d{}/n{i:02}.md", i % 4)),
            format!("# Note {i}\nbody {i}\n").as_bytes(),
        );
    }
    let src = walk::SourceRoot {
        name: "notes".into(),
        root: garden.clone(),
        kind: walk::SourceKind::Notes,
        follow_symlinks_outside: false,
    };
    let plain = || {
        let mut out = Vec::new();
        let walked = walk::walk_stamps(&src, |rel, st| out.push((rel.to_string(), st)));
        assert_eq!(walked, StampWalk::Complete);
        out
    };
    // Every listing cached whatever its age (the real cache waits until a
    // directory's ctime is `SETTLE_NS` old; here the test sleeps past a clock
    // tick between a listing and the next change instead).
    let walk_cached = || {
        let mut cache = DirCache::load(&state).with_settle_ns(-1_000_000_000_000);
        let mut out = Vec::new();
        let walked = walk::walk_stamps_with(&src, Some(&mut cache), |rel, st| {
            out.push((rel.to_string(), st))
        });
        assert_eq!(walked, StampWalk::Complete);
        let hits = cache.hits();
        cache.save();
        std::thread::sleep(Duration::from_millis(50));
        (out, hits)
    };
    let (first, hits) = walk_cached();
    assert_eq!((first.len(), hits), (40, 0));
    assert_eq!(first, plain());
    let (second, hits) = walk_cached();
    assert_eq!(hits, 5, "the root and d0..d3, none listed again");
    assert_eq!(second, plain());

    // New, deleted, a new subdirectory, and an edit in place (its directory is
    // unchanged: the cached listing serves and the file's own stat shows it).
    write(&garden.join("d2/new.md"), b"# New\n");
    std::fs::remove_file(garden.join("d1/n01.md")).unwrap();
    write(&garden.join("d3/sub/deep.md"), b"# Deep\n");
    let edited = garden.join("d0/n00.md");
    std::fs::write(&edited, b"# Note 0\nedited in place, longer\n").unwrap();
    let (third, hits) = walk_cached();
    assert_eq!(
        hits, 2,
        "the root and d0 reused; d1, d2, d3 (and d3/sub) listed"
    );
    assert_eq!(third, plain());
    let names: Vec<&str> = third.iter().map(|(r, _)| r.as_str()).collect();
    assert!(names.contains(&"d2/new.md") && names.contains(&"d3/sub/deep.md"));
    assert!(!names.contains(&"d1/n01.md"));
    let size = |list: &[(String, walk::Stamp)]| {
        list.iter()
            .find(|(r, _)| r == "d0/n00.md")
            .map(|(_, st)| st.size)
    };
    assert_ne!(size(&third), size(&second));

    // A directory replaced by another of the same name (a new inode): listed anew.
    std::fs::rename(garden.join("d0"), dir.path().join("old-d0")).unwrap();
    write(&garden.join("d0/other.md"), b"# Other\n");
    let (fourth, _) = walk_cached();
    assert_eq!(fourth, plain());
    assert!(fourth.iter().any(|(r, _)| r == "d0/other.md"));

    // With the real settle time a fresh tree is never cached: every walk lists.
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    for _ in 0..2 {
        let mut cache = DirCache::load(&elsewhere);
        let walked = walk::walk_stamps_with(&src, Some(&mut cache), |_, _| {});
        assert_eq!((walked, cache.hits()), (StampWalk::Complete, 0));
        cache.save();
    }
}
