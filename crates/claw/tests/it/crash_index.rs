//! Crash safety: `claw memory index` is killed with SIGKILL at random points of a
//! full index of the notes-garden data set. After every kill the database passes
//! `PRAGMA integrity_check` and the cross-table checks, every file row carries
//! exactly the chunks a clean index gives that file, and the next index completes
//! and equals a clean index of the same files.
//!
//! Scale: `CLAW_CRASH_POINTS` kills that land mid-run (default 20) over `CLAW_CRASH_FILES`
//! files of the garden (default 1000 so the test stays well under a minute in a
//! debug build; `CLAW_CRASH_FILES=all` for the whole 7,772-file garden).
//! `CLAW_CRASH_SEED` replays a run.

use claw_testkit as support;

use claw_memory::store::Store;
use rusqlite::Connection;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

type Files = BTreeSet<(String, String, String)>;
/// path -> chunk (id, hash) set
type Chunks = BTreeMap<String, BTreeSet<(String, String)>>;

fn snapshot(ws: &Path) -> (Files, Chunks) {
    let c = Connection::open(claw_testkit::db_path(ws)).unwrap();
    let mut s = c.prepare("SELECT source, path, sha256 FROM files").unwrap();
    let files = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut chunks: Chunks = BTreeMap::new();
    let mut s = c
        .prepare("SELECT source || '/' || path, id, hash FROM chunks")
        .unwrap();
    let rows = s
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?)))
        .unwrap();
    for r in rows {
        let (p, id, h) = r.unwrap();
        chunks.entry(p).or_default().insert((id, h));
    }
    (files, chunks)
}

fn index_to_completion(ws: &Path) -> Duration {
    let start = Instant::now();
    claw_testkit::index_keyword_only(ws);
    start.elapsed()
}

fn consistent(ws: &Path) {
    let store = Store::open(&claw_testkit::db_path(ws)).unwrap();
    let problems = store.check_consistency().unwrap();
    assert!(
        problems.is_empty(),
        "inconsistent after crash: {problems:?}"
    );
}

/// xorshift64*: deterministic from the seed, no dependency on the rand API
/// (also drives `rebuild_crash`'s kills).
pub(crate) struct Rng(pub(crate) u64);
impl Rng {
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Extract the garden and keep the first `limit` Markdown files (sorted by path).
fn garden(dest: &Path, limit: Option<usize>) {
    support::extract_shared("notes-garden.tar.gz", dest);
    let Some(limit) = limit else { return };
    let mut all: Vec<_> = walkdir::WalkDir::new(dest)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect();
    all.sort();
    for p in all.into_iter().skip(limit) {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn kill_9_at_random_points_never_corrupts_the_index() {
    let points: usize = claw_testkit::env_number("CLAW_CRASH_POINTS").unwrap_or(20);
    let limit = match std::env::var("CLAW_CRASH_FILES").ok().as_deref() {
        Some("all") => None,
        Some(n) => Some(n.parse().expect("CLAW_CRASH_FILES: a number or `all`")),
        None => Some(1000),
    };
    let seed = claw_testkit::seed_from_env("CLAW_CRASH_SEED");
    eprintln!("crash test: {points} points, files {limit:?}, CLAW_CRASH_SEED={seed}");
    let mut rng = Rng(seed);

    // The reference: a clean, uninterrupted index of the same files.
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference");
    garden(&reference.join("memory"), limit);
    let full = index_to_completion(&reference);
    // A no-op pass: process start, walk, plan (the floor of any run).
    let noop = index_to_completion(&reference);
    let (ref_files, ref_chunks) = snapshot(&reference);
    assert!(
        ref_files.len() > 100,
        "garden too small: {}",
        ref_files.len()
    );

    let ws = dir.path().join("crash");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::rename(reference.join("memory"), ws.join("memory")).unwrap();
    // Same relative paths, so chunk ids (sha of source:path:lines:hash:model) compare.

    // Kill points land inside a run by timing, and the machine's speed moves
    // under a parallel test suite: a run that ends before its kill shortens the
    // estimate and starts a new cycle, until `points` kills have landed
    // mid-run (at most 4 × `points` runs).
    let per_cycle = 5;
    let mut estimate = full;
    let mut killed_mid_run = 0;
    let mut runs = 0;
    while killed_mid_run < points && runs < points * 4 {
        // A cycle starts from an empty index, then is killed repeatedly.
        let _ = std::fs::remove_dir_all(claw_testkit::state_dir(&ws));
        // Estimated run time left for this cycle's next run: aim inside it.
        let mut left = estimate;
        for _ in 0..per_cycle {
            let delay = left.mul_f64(0.05 + 0.85 * rng.next_f64());
            let mut child = support::claw_keyword_only(&ws)
                .args(["memory", "index", "--json"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let finished = support::exited_within(&mut child, delay, Duration::from_millis(5));
            if !finished {
                child.kill().unwrap(); // SIGKILL
                killed_mid_run += 1;
            }
            child.wait().unwrap();
            runs += 1;

            if claw_testkit::db_path(&ws).exists() {
                consistent(&ws);
                // Every file row that exists carries exactly its reference chunks.
                let (files, chunks) = snapshot(&ws);
                for f in &files {
                    assert!(
                        ref_files.contains(f),
                        "file row {f:?} differs from the clean index"
                    );
                    let key = format!("{}/{}", f.0, f.1);
                    assert_eq!(
                        chunks.get(&key),
                        ref_chunks.get(&key),
                        "chunks of {key} differ after a crash (seed {seed})"
                    );
                }
                for key in chunks.keys() {
                    assert!(
                        files.iter().any(|f| format!("{}/{}", f.0, f.1) == *key),
                        "chunks without a file row: {key}"
                    );
                }
            }
            if finished {
                // The index is complete: this cycle has nothing left to kill.
                estimate = estimate.mul_f64(0.7).max(noop.mul_f64(2.0));
                break;
            }
            left = (left.saturating_sub(delay) + noop).max(noop.mul_f64(1.5));
            if killed_mid_run >= points {
                break;
            }
        }
        // The next index completes and equals the clean index.
        index_to_completion(&ws);
        consistent(&ws);
        let (files, chunks) = snapshot(&ws);
        assert_eq!(
            files, ref_files,
            "files differ from a clean index (seed {seed})"
        );
        assert_eq!(
            chunks, ref_chunks,
            "chunks differ from a clean index (seed {seed})"
        );
    }
    eprintln!(
        "crash test: {killed_mid_run} kills landed mid-run in {runs} runs (full index {full:?}, no-op {noop:?})"
    );
    assert!(
        killed_mid_run * 2 >= points,
        "only {killed_mid_run} of {runs} runs were interrupted by a kill (wanted {points})"
    );
}
