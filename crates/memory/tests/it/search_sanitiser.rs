//! Property test: 10,000 random queries (quotes, FTS5 operators, emoji, NUL, CJK)
//! run through the real keyword stage against real FTS5 tables never produce an
//! SQLite error.

use crate::search_support;

use claw_memory::config::MemorySettings;
use claw_memory::search::engine::{Mode, SearchRequest, search};
use claw_memory::search::query::ParsedQuery;
use claw_memory::store::Store;
use proptest::prelude::*;

fn atom() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("\"".to_string()),
        Just("\"\"".to_string()),
        Just("'".to_string()),
        Just("(".to_string()),
        Just(")".to_string()),
        Just("*".to_string()),
        Just("^".to_string()),
        Just(":".to_string()),
        Just("-".to_string()),
        Just("+".to_string()),
        Just("{".to_string()),
        Just("}".to_string()),
        Just("NEAR".to_string()),
        Just("NEAR(".to_string()),
        Just("AND".to_string()),
        Just("OR".to_string()),
        Just("NOT".to_string()),
        Just("text:".to_string()),
        Just("\0".to_string()),
        Just("🦀".to_string()),
        Just("👨‍👩‍👧".to_string()),
        Just("东京".to_string()),
        Just("猫".to_string()),
        Just("黑豹队的防守".to_string()),
        Just("カタカナ".to_string()),
        Just("한국어".to_string()),
        Just("é\u{301}".to_string()),
        Just("\u{200b}".to_string()),
        Just("ABC-123".to_string()),
        Just("snake_case".to_string()),
        Just(" ".to_string()),
        Just("\t\n".to_string()),
        "[a-z]{1,8}",
        "\\PC{1,4}",
        any::<char>().prop_map(|c| c.to_string()),
    ]
}

fn query() -> impl Strategy<Value = String> {
    prop::collection::vec(atom(), 0..12).prop_map(|v| v.concat())
}

/// A fresh store holding `docs`, keyword-only (no vectors).
fn keyword_store(docs: &[search_support::Doc<'_>]) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join("m.sqlite")).unwrap();
    search_support::fill(&mut store, docs, None);
    (dir, store)
}

#[test]
fn random_queries_never_error() {
    let (_dir, store) = keyword_store(&[
        (
            "memory",
            "memory/a.md",
            "the quick brown fox and ABC-123 NEAR the river",
        ),
        (
            "memory",
            "memory/b.md",
            "黑豹队的防守只丢了 308分 东京塔 猫",
        ),
        (
            "memory",
            "MEMORY.md",
            "snake_case names and \"quoted\" text (with parens) *stars*",
        ),
    ]);
    let params = MemorySettings::default();
    // A read-only second connection: the FTS5 tables are virtual tables of the
    // same file, so MATCH parses exactly as on the store's own connection.
    let inspector = store.open_inspector().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&query(), |q| {
            // The raw MATCH expressions are valid FTS5 on their own...
            let pq = ParsedQuery::parse(&q);
            for (table, m) in [
                ("chunks_fts", pq.fts_match()),
                ("chunks_trigram", pq.trigram_match()),
            ] {
                if let Some(m) = m {
                    let sql = format!("SELECT count(*) FROM {table} WHERE {table} MATCH ?1");
                    let r: Result<i64, _> = inspector.query_row(&sql, [&m], |r| r.get(0));
                    prop_assert!(r.is_ok(), "{table} MATCH {m:?} (from {q:?}): {r:?}");
                }
            }
            // ...and the whole keyword search never fails.
            let req = SearchRequest {
                mode: Mode::Fts,
                ..SearchRequest::new(q.clone())
            };
            let r = search(&store, None, &params, &req, 0);
            prop_assert!(r.is_ok(), "{q:?}: {:?}", r.err());
            Ok(())
        })
        .unwrap();
}

#[test]
fn known_hostile_queries() {
    let (_dir, store) =
        keyword_store(&[("memory", "memory/a.md", "NEAR is a word here, and so is OR")]);
    let params = MemorySettings::default();
    for q in [
        r#""NEAR(a b) OR * ^:"#,
        "\"",
        "AND",
        "OR OR OR",
        "NOT",
        "*",
        "text:near",
        "a\0b",
        "NEAR(near, 2)",
        "{text}: x",
    ] {
        let req = SearchRequest {
            mode: Mode::Fts,
            ..SearchRequest::new(q)
        };
        let r = search(&store, None, &params, &req, 0);
        assert!(r.is_ok(), "{q:?}: {:?}", r.err());
    }
    // Operator words are searchable as plain words.
    let req = SearchRequest {
        mode: Mode::Fts,
        min_score: Some(0.0),
        ..SearchRequest::new("NEAR")
    };
    assert_eq!(
        search(&store, None, &params, &req, 0)
            .unwrap()
            .results
            .len(),
        1
    );
}
