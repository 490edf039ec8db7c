//! Harness for the ranking measurements (`tests/ranking_*.rs`): the committed query
//! sets (`fixtures/paraphrase/`, `fixtures/garden-queries/`), a workspace indexed by
//! the real `claw` binary, and searches through the library's `engine::search` with
//! default settings at the tests' fixed "now" (so one embedder load serves every
//! query). The figures are printed as Markdown tables before anything is asserted.
#![allow(dead_code)]

use claw::config::MemorySettings;
use claw::memory::embed::Embedder;
use claw::memory::search::engine::{self, Mode, SearchRequest, SearchResponse};
use claw::memory::store::Store;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `support::TEST_NOW` (2026-11-05T12:00:00Z) in unix seconds.
pub const NOW: i64 = 1_793_880_000;

/// One query of a committed set.
#[derive(Debug, Clone)]
pub struct Query {
    /// `paraphrase` / `none` (paraphrase set) or `dated` / `undated` (garden set).
    pub kind: String,
    pub text: String,
    /// Expected path; `None` for should-find-nothing queries.
    pub expected: Option<String>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Parse a `kind<TAB>query<TAB>path` file (`#` comments; `-` = no expected path).
pub fn load_queries(rel: &str) -> Vec<Query> {
    let p = repo().join(rel);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "bad line in {rel}: {l:?}");
            Query {
                kind: f[0].to_string(),
                text: f[1].to_string(),
                expected: (f[2] != "-").then(|| f[2].to_string()),
            }
        })
        .collect()
}

/// The paraphrase fixture's notes folder.
pub fn paraphrase_notes() -> PathBuf {
    repo().join("fixtures/paraphrase/notes")
}

/// Copy a directory tree (files only).
pub fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Run a `claw` command and insist on exit 0.
pub fn ok(cmd: &mut Command) -> std::process::Output {
    let o = cmd.output().expect("run claw");
    assert!(
        o.status.success(),
        "{:?} failed: {}\n{}",
        cmd,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Extract `../shared/data/notes-garden.tar.gz` into a new temp dir (with `tar`).
pub fn extract_garden() -> tempfile::TempDir {
    let tarball = crate::support::shared_dir().join("data/notes-garden.tar.gz");
    assert!(tarball.is_file(), "{} is missing", tarball.display());
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dir.path())
        .output()
        .expect("run tar");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    dir
}

/// The workspace's store.
pub fn open_store(ws: &Path) -> Store {
    Store::open(&ws.join(".claw/memory.sqlite")).expect("open the index")
}

/// One search with default settings (limit 6, min-score, MMR, decay) at [`NOW`].
pub fn search(store: &Store, e: Option<&dyn Embedder>, q: &str, mode: Mode) -> SearchResponse {
    let req = SearchRequest {
        mode,
        ..SearchRequest::new(q)
    };
    engine::search(store, e, &MemorySettings::default(), &req, NOW).expect("search")
}

/// 1-based rank of `path` in the results, if present.
pub fn rank_of(r: &SearchResponse, path: &str) -> Option<usize> {
    r.results.iter().position(|h| h.path == path).map(|i| i + 1)
}
