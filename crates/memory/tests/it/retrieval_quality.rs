//! Retrieval-quality mechanisms of the keyword stage on a real store (keyword-only,
//! no model): Porter stemming in the word index, identifiers still matched
//! verbatim, and an index written by an older schema migrated to the stemmed one.

use crate::search_support::{self, Doc};

use claw_memory::config::MemorySettings;
use claw_memory::search::engine::{Mode, SearchRequest, search};
use claw_memory::store::Store;

/// 2026-12-01, a fixed "now".
const NOW: i64 = 1_796_083_200;

const DOCS: &[Doc<'static>] = &[
    (
        "memory",
        "memory/webhook.md",
        "The payment webhook retried forever because the handler returned 500.",
    ),
    (
        "memory",
        "memory/deploys.md",
        "Deployments of the infra stack are tracked as INFRA-4127 and INFRA-4172.",
    ),
    (
        "memory",
        "memory/garden.md",
        "Planted tomatoes and basil in the raised bed; watering every morning.",
    ),
    (
        "memory",
        "memory/other.md",
        "INFRA-4172 was closed as a duplicate; nothing else happened that week.",
    ),
];

fn setup() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join(".claw/memory.sqlite")).unwrap();
    search_support::fill(&mut store, DOCS, None);
    (dir, store)
}

fn keyword(store: &Store, q: &str) -> Vec<String> {
    let req = SearchRequest {
        mode: Mode::Fts,
        explain: true,
        ..SearchRequest::new(q)
    };
    search(store, None, &MemorySettings::default(), &req, NOW)
        .unwrap()
        .results
        .into_iter()
        .map(|h| h.path)
        .collect()
}

#[test]
fn inflections_meet_in_the_stemmed_word_index() {
    let (_dir, store) = setup();
    // "retrying"/"retries" and "webhooks" share no surface form with the note's
    // "retried"/"webhook": only stemming matches them.
    for q in ["retrying webhooks", "retries", "plant tomato", "watered"] {
        let got = keyword(&store, q);
        let want = if q.contains("webhook") || q == "retries" {
            "memory/webhook.md"
        } else {
            "memory/garden.md"
        };
        assert_eq!(got.first().map(String::as_str), Some(want), "{q}: {got:?}");
    }
}

#[test]
fn identifiers_still_match_verbatim() {
    let (_dir, store) = setup();
    // The ticket is pinned first; its sibling number (same tokens, other order)
    // does not outrank it.
    let got = keyword(&store, "INFRA-4127");
    assert_eq!(got.first().map(String::as_str), Some("memory/deploys.md"));
    let got = keyword(&store, "INFRA-4172");
    assert!(
        got.iter().take(2).any(|p| p == "memory/other.md"),
        "{got:?}"
    );
    assert!(!keyword(&store, "INFRA-4127").contains(&"memory/other.md".to_string()));
}

#[test]
fn an_unstemmed_index_is_migrated_to_the_stemmed_tokenizer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memory.sqlite");
    {
        // A schema-2 database as the previous release wrote it, with one chunk.
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(include_str!("../../migrations/0001_init.sql"))
            .unwrap();
        c.execute_batch(include_str!("../../migrations/0002_source_symlinks.sql"))
            .unwrap();
        c.pragma_update(None, "user_version", 2).unwrap();
        c.execute(
            "INSERT INTO files (source, path, sha256, mtime, size, indexed_at)
             VALUES ('memory', 'memory/a.md', 'h', 1, 1, 0)",
            [],
        )
        .unwrap();
        c.execute(
            "INSERT INTO chunks (id, source, path, start_line, end_line, hash, model, text, updated_at)
             VALUES ('c1', 'memory', 'memory/a.md', 1, 1, 'h', '', 'the webhook retried forever', 0)",
            [],
        )
        .unwrap();
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'retrying'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(n, 0, "the old word index does not stem");
    }
    let store = Store::open(&path).unwrap();
    let c = store.open_inspector().unwrap();
    let n: i64 = c
        .query_row(
            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'retrying'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 1, "the migrated word index stems the existing rows");
    assert!(store.check_consistency().unwrap().is_empty());
}
