//! A rebuild never blinds the memory (issue 25): `claw memory index --force`
//! builds the new index beside the live one and swaps it in with one rename,
//! so `kill -9` at any moment of it leaves the full old index or the full new
//! one — never an empty or half-built one — and a search while it runs
//! answers from the old database. A leftover half-built database is
//! discarded by the next index run.
//!
//! The real binary throughout, keyword-only, over a few thousand generated
//! notes. The database is found through `claw memory status --json`'s
//! `db_path` (its directory is not this test's business). `CLAW_REBUILD_SEED`
//! replays a run's kill moments.

use super::crash_index::Rng;
use claw_memory::store::Store;
use claw_testkit as support;
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Generated notes: enough that a debug-build rebuild takes a second or more
/// (about 2 s on two loaded cores), so kills land inside it.
const NOTES: usize = 2000;
/// Kills of a running `--force` rebuild.
const KILLS: usize = 20;

fn claw_json(ws: &Path, args: &[&str]) -> Value {
    claw_testkit::run_json(support::claw_keyword_only(ws).args(args))
}

/// (files, chunks) as `claw memory status --json` reports them.
fn counts(status: &Value) -> (i64, i64) {
    (
        status["files"].as_i64().unwrap(),
        status["chunks"].as_i64().unwrap(),
    )
}

/// The inode of the live database: a rebuild that got through its swap
/// leaves a new one.
fn inode(db: &Path) -> u64 {
    std::fs::metadata(db).unwrap().ino()
}

fn rebuild(ws: &Path) -> Child {
    support::claw_keyword_only(ws)
        .args(["memory", "index", "--force", "--json"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Files beside the database whose name starts with its own plus `.rebuild`
/// (the aside database and its journal files).
fn leftovers(db: &Path) -> Vec<PathBuf> {
    let name = format!("{}.rebuild", db.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(db.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&name))
        .collect()
}

fn consistent(db: &Path) {
    let problems = Store::open(db).unwrap().check_consistency().unwrap();
    assert!(problems.is_empty(), "{problems:?}");
}

#[test]
fn kill_9_during_a_forced_rebuild_leaves_the_full_old_or_the_full_new_index() {
    let seed = claw_testkit::seed_from_env("CLAW_REBUILD_SEED");
    let mut rng = Rng(seed);
    let test_start = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let notes: Vec<(String, String)> = (0..NOTES)
        .map(|i| {
            let word = if i % 10 == 0 { "lighthouse" } else { "harbour" };
            (
                format!("memory/n{:02}/note-{i:05}.md", i % 50),
                format!("# Note {i}\nThe {word} log, entry {i}: tide {}.\n", i * 7),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = notes
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    support::write_tree(ws, &refs);

    let first = claw_json(ws, &["memory", "index", "--json"]);
    let db = PathBuf::from(first["db_path"].as_str().unwrap());
    let status = claw_json(ws, &["memory", "status", "--json"]);
    assert_eq!(PathBuf::from(status["db_path"].as_str().unwrap()), db);
    let full = counts(&status);
    assert_eq!(full.0, NOTES as i64, "{status}");
    assert!(full.1 >= full.0, "{status}");

    // How long a forced rebuild runs, and when its swap happens (the inode
    // at the path changes), to spread the kills over it: the fastest of three
    // runs, so that a run slowed by a busy machine does not place the kills
    // after the end of the others.
    let (mut duration, mut swapped_at) = (Duration::MAX, Duration::MAX);
    for _ in 0..3 {
        let before = inode(&db);
        let t = Instant::now();
        let mut child = rebuild(ws);
        let mut swap = None;
        while child.try_wait().unwrap().is_none() {
            if swap.is_none() && inode(&db) != before {
                swap = Some(t.elapsed());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = t.elapsed();
        assert!(child.wait().unwrap().success());
        assert_ne!(inode(&db), before, "a forced rebuild swaps a new file in");
        assert_eq!(
            counts(&claw_json(ws, &["memory", "status", "--json"])),
            full
        );
        if took < duration {
            (duration, swapped_at) = (took, swap.unwrap_or(took));
        }
    }

    let (mut old, mut new, mut finished) = (0, 0, 0);
    let mut aside_left = 0;
    for kill in 0..KILLS {
        let before = inode(&db);
        // Most kills anywhere in the run; every fourth around the swap.
        let delay = if kill % 4 == 3 {
            swapped_at.mul_f64(0.95 + 0.1 * rng.next_f64())
        } else {
            duration.mul_f64(0.02 + 0.96 * rng.next_f64())
        };
        let mut child = rebuild(ws);
        let done = claw_testkit::exited_within(&mut child, delay, Duration::from_millis(2));
        if done {
            finished += 1;
        } else {
            child.kill().unwrap(); // SIGKILL
        }
        child.wait().unwrap();
        let status = claw_json(ws, &["memory", "status", "--json"]);
        assert_eq!(
            counts(&status),
            full,
            "kill {kill} at {delay:?}: not a complete index (seed {seed}): {status}"
        );
        if inode(&db) == before {
            old += 1;
        } else {
            new += 1;
        }
        if !leftovers(&db).is_empty() {
            aside_left += 1;
        }
        consistent(&db);
    }
    eprintln!(
        "rebuild kills: {KILLS} over a {duration:?} rebuild (swap at {swapped_at:?}) of {} files / {} chunks: \
         {old} left the old index, {new} the new one ({finished} had finished), \
         {aside_left} left a half-built aside (CLAW_REBUILD_SEED={seed})",
        full.0, full.1
    );
    // The swap is the last step of a run, so most kills land before it.
    assert!(
        old > 0 && (KILLS - finished) * 2 >= KILLS,
        "only {} of {KILLS} kills interrupted a rebuild (seed {seed})",
        KILLS - finished
    );

    // A search while a rebuild runs answers from the old database.
    let mut answered = None;
    for attempt in 0..3 {
        let mut child = rebuild(ws);
        std::thread::sleep(duration.mul_f64(0.2 / (attempt + 1) as f64));
        let running_before = child.try_wait().unwrap().is_none();
        let t = Instant::now();
        let search = claw_json(ws, &["memory", "search", "lighthouse", "--json"]);
        let took = t.elapsed();
        let running_after = child.try_wait().unwrap().is_none();
        assert!(child.wait().unwrap().success());
        if running_before && running_after {
            answered = Some((search, took));
            break;
        }
    }
    let (search, took) = answered.expect("no search ran inside a rebuild in 3 tries");
    let hits = search["results"].as_array().unwrap();
    assert!(!hits.is_empty(), "no results during a rebuild: {search}");
    assert!(
        hits.iter()
            .all(|h| h["snippet"].as_str().unwrap().contains("lighthouse")),
        "{search}"
    );
    eprintln!(
        "search during a rebuild: {} results in {took:?}, sync {}",
        hits.len(),
        search["sync"]
    );

    // A half-built aside from a kill is gone after the next index run.
    for attempt in 0..5 {
        let mut child = rebuild(ws);
        std::thread::sleep(duration.mul_f64(0.3 + 0.1 * attempt as f64));
        child.kill().unwrap();
        child.wait().unwrap();
        if !leftovers(&db).is_empty() {
            break;
        }
    }
    assert!(
        !leftovers(&db).is_empty(),
        "no kill left a half-built aside"
    );
    assert_eq!(
        counts(&claw_json(ws, &["memory", "status", "--json"])),
        full
    );
    claw_json(ws, &["memory", "index", "--json"]);
    assert_eq!(leftovers(&db), Vec::<PathBuf>::new());
    assert_eq!(
        counts(&claw_json(ws, &["memory", "status", "--json"])),
        full
    );
    consistent(&db);
    eprintln!("rebuild crash test: {:?} in all", test_start.elapsed());
}
