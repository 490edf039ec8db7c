//! The committed query sets and the search the ranking measurements run: default
//! settings at the tests' fixed "now", through the library's `engine::search`.
//! Self-contained (no `support`), so `examples/ranking_garden.rs` can include it.
#![allow(dead_code)]

use claw_memory::config::MemorySettings;
use claw_memory::embed::Embedder;
use claw_memory::search::engine::{self, Mode, SearchRequest, SearchResponse};
use claw_memory::store::Store;
use std::path::{Path, PathBuf};

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

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
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

/// The workspace's store.
pub fn open_store(ws: &Path) -> Store {
    Store::open(&claw_testkit::db_path(ws)).expect("open the index")
}

/// One search with default settings (limit 6, min-score, MMR, decay) at [`NOW`].
pub fn search(store: &Store, e: Option<&dyn Embedder>, q: &str, mode: Mode) -> SearchResponse {
    let req = SearchRequest {
        mode,
        ..SearchRequest::new(q)
    };
    engine::search(store, e, &MemorySettings::default(), &req, NOW).expect("search")
}

/// [`search`] with other settings (the fusion sweeps).
pub fn search_with(
    store: &Store,
    e: Option<&dyn Embedder>,
    q: &str,
    mode: Mode,
    p: &MemorySettings,
) -> SearchResponse {
    let req = SearchRequest {
        mode,
        ..SearchRequest::new(q)
    };
    engine::search(store, e, p, &req, NOW).expect("search")
}

/// 1-based rank of `path` in the results, if present.
pub fn rank_of(r: &SearchResponse, path: &str) -> Option<usize> {
    r.results.iter().position(|h| h.path == path).map(|i| i + 1)
}
