//! Soak: random edits, creations, renames, atomic saves, folder moves, deletes
//! and transcript appends under a running `claw memory watch` for
//! `CLAW_SOAK_SECS` seconds (default 20; 600 for the full run). At the end the
//! index must equal a clean index of the final tree, and be consistent.

use claw_testkit as support;
use claw_testkit::watch_proc;

use claw_memory::store::Store;
use rusqlite::Connection;
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const WORDS: &[&str] = &[
    "apple", "river", "stone", "cloud", "ember", "maple", "quartz", "meadow", "harbor", "violet",
    "falcon", "copper", "lantern", "orchid", "tundra", "saffron",
];

fn text(rng: &mut Rng, lines: usize) -> String {
    let mut s = format!("# Note {}\n", rng.next() % 10_000);
    for _ in 0..lines {
        let n = 3 + rng.below(10);
        let words: Vec<&str> = (0..n).map(|_| WORDS[rng.below(WORDS.len())]).collect();
        s.push_str(&words.join(" "));
        s.push('\n');
    }
    s
}

fn md_files(root: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.into_path())
        .collect()
}

fn dirs(root: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_dir())
        .map(|e| e.into_path())
        .collect()
}

/// What must match a clean index: file rows, note chunks (ids are content
/// addressed), and the text of each transcript in line order (transcript chunk
/// boundaries legitimately differ between incremental appends and one pass).
#[derive(Debug, PartialEq)]
struct Snapshot {
    files: BTreeSet<(String, String, String)>,
    note_chunks: BTreeSet<(String, String)>,
    transcripts: BTreeSet<(String, String)>,
}

fn snapshot(ws: &Path) -> Option<Snapshot> {
    let c = Connection::open(claw_testkit::db_path(ws)).ok()?;
    c.busy_timeout(Duration::from_secs(5)).ok()?;
    let mut s = c.prepare("SELECT source, path, sha256 FROM files").ok()?;
    let files = s
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .ok()?
        .collect::<Result<_, _>>()
        .ok()?;
    // Two text columns a row, as a set.
    let pairs = |sql: &str| -> Option<BTreeSet<(String, String)>> {
        let mut s = c.prepare(sql).ok()?;
        s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .ok()?
            .collect::<Result<_, _>>()
            .ok()
    };
    let note_chunks = pairs("SELECT id, hash FROM chunks WHERE source <> 'sessions'")?;
    let transcripts = pairs(
        "SELECT path, group_concat(text, char(10)) FROM
           (SELECT path, text FROM chunks WHERE source = 'sessions' ORDER BY path, start_line, rowid)
         GROUP BY path",
    )?;
    Some(Snapshot {
        files,
        note_chunks,
        transcripts,
    })
}

fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from)
        .into_iter()
        .filter_map(Result::ok)
    {
        let rel = e.path().strip_prefix(from).unwrap();
        if rel
            .components()
            .next()
            .is_some_and(|c| c.as_os_str() == ".claw")
        {
            continue;
        }
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else if e.file_type().is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

#[test]
fn soak_random_changes_end_equal_to_a_clean_index() {
    let secs: u64 = claw_testkit::env_number("CLAW_SOAK_SECS").unwrap_or(20);
    let seed = claw_testkit::seed_from_env("CLAW_SOAK_SEED");
    eprintln!("soak: {secs} s, CLAW_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let mem = ws.join("memory");
    for i in 0..40 {
        let sub = if i % 3 == 0 { "sub/" } else { "" };
        let t = text(&mut rng, 5);
        support::write_tree(&ws, &[(&format!("memory/{sub}seed{i}.md"), t.as_str())]);
    }
    std::fs::create_dir_all(ws.join("sessions")).unwrap();
    let w = watch_proc::WatchProc::start(&ws);

    let end = Instant::now() + Duration::from_secs(secs);
    let mut ops = 0usize;
    let mut counter = 0usize;
    while Instant::now() < end {
        counter += 1;
        let files = md_files(&mem);
        let pick = |rng: &mut Rng| files.get(rng.below(files.len())).cloned();
        match rng.below(10) {
            0 | 1 => {
                let d = dirs(&mem);
                let parent = d[rng.below(d.len())].clone();
                let n = 1 + rng.below(8);
                let t = text(&mut rng, n);
                std::fs::write(parent.join(format!("new{counter}.md")), t).unwrap();
            }
            2 | 3 => {
                if let Some(f) = pick(&mut rng) {
                    let mut h = std::fs::OpenOptions::new().append(true).open(&f).unwrap();
                    writeln!(
                        h,
                        "appended line {counter} {}",
                        WORDS[rng.below(WORDS.len())]
                    )
                    .unwrap();
                }
            }
            4 => {
                if let Some(f) = pick(&mut rng) {
                    // Atomic save.
                    let tmp = f.with_extension("md.swp~");
                    std::fs::write(&tmp, text(&mut rng, 3)).unwrap();
                    std::fs::rename(&tmp, &f).unwrap();
                }
            }
            5 => {
                if let Some(f) = pick(&mut rng) {
                    let d = dirs(&mem);
                    let to = d[rng.below(d.len())].join(format!("moved{counter}.md"));
                    std::fs::rename(&f, to).unwrap();
                }
            }
            6 => {
                if files.len() > 10
                    && let Some(f) = pick(&mut rng)
                {
                    std::fs::remove_file(f).unwrap();
                }
            }
            7 => {
                // A new folder with files, or a folder renamed.
                let d = dirs(&mem);
                let p = d[rng.below(d.len())].clone();
                if p != mem && rng.below(2) == 0 {
                    let to = mem.join(format!("dir{counter}"));
                    if !p.starts_with(&to) {
                        let _ = std::fs::rename(&p, &to);
                    }
                } else {
                    let nd = p.join(format!("folder{counter}"));
                    std::fs::create_dir_all(&nd).unwrap();
                    std::fs::write(nd.join("inside.md"), text(&mut rng, 2)).unwrap();
                }
            }
            _ => {
                // A session transcript grows (sometimes a torn line completes later).
                let f = ws.join(format!("sessions/s{}.jsonl", rng.below(3)));
                let mut h = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&f)
                    .unwrap();
                let role = if rng.below(2) == 0 {
                    "user"
                } else {
                    "assistant"
                };
                let line = serde_json::json!({"role": role,
                    "content": format!("turn {counter} {}", WORDS[rng.below(WORDS.len())]),
                    "timestamp": 1767225600 + counter as i64});
                writeln!(h, "{line}").unwrap();
            }
        }
        ops += 1;
        std::thread::sleep(Duration::from_millis(5 + rng.below(60) as u64));
    }

    // A clean index of the final tree.
    let clean = dir.path().join("clean");
    copy_tree(&ws, &clean);
    claw_testkit::index_keyword_only(&clean);
    let want = snapshot(&clean).unwrap();
    assert!(!want.files.is_empty());

    // The watcher catches up within the deadline.
    let start = Instant::now();
    loop {
        let got = snapshot(&ws);
        if got.as_ref() == Some(&want) {
            break;
        }
        if start.elapsed() > watch_proc::DEADLINE {
            let got = got.unwrap();
            let missing: Vec<_> = want.files.difference(&got.files).collect();
            let extra: Vec<_> = got.files.difference(&want.files).collect();
            panic!(
                "index differs from a clean index after {ops} ops (seed {seed}):\n missing {missing:?}\n extra {extra:?}\n transcripts equal: {}",
                got.transcripts == want.transcripts
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    eprintln!(
        "soak: {ops} operations, {} files at the end, caught up {:?} after the last change",
        want.files.len(),
        start.elapsed()
    );
    let events = w.stop();
    let errors: Vec<_> = events.iter().filter(|e| e["event"] == "error").collect();
    assert!(errors.is_empty(), "{errors:?}");
    let store = Store::open(&claw_testkit::db_path(&ws)).unwrap();
    assert!(store.check_consistency().unwrap().is_empty());
}
