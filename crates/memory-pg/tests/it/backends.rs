//! The shared engine suite (`claw_testkit::engine_suite`, the same cases
//! `claw-memory`'s tests run on SQLite) on PostgreSQL, plus what needs both
//! backends at once (the same hybrid scores for the same chunks) or only
//! PostgreSQL (schema versions, a dropped connection retried).

use crate::support::{self, Schema, SchemaStore};
use claw_memory::config::MemorySettings;
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::engine::search_in;
use claw_testkit::engine_suite::{self, DOCS, NOW, paths, req};

claw_testkit::engine_suite!(support::postgres);

#[test]
fn same_hybrid_scores_as_sqlite() {
    let Some(schema) = Schema::new("core") else {
        return;
    };
    let (sqlite, e) = engine_suite::setup(engine_suite::sqlite, "core", true).unwrap();
    let mut pg = schema.store("core", "ws-a");
    engine_suite::fill(&mut pg, DOCS, Some(&e));
    assert!(pg.check_consistency().unwrap().is_empty());

    // The same hybrid scores on both backends (scoring is the shared pure core).
    let p = MemorySettings::default();
    for q in [
        "coffee preferences",
        "ledger invoices",
        "borrow checker rules",
        "dentist appointment",
        "ZX-4471",
    ] {
        let a = search_in(sqlite.search(), Some(&e), &p, &req(q), NOW).unwrap();
        let b = search_in(&pg, Some(&e), &p, &req(q), NOW).unwrap();
        assert_eq!(paths(&a), paths(&b), "{q}");
        for (x, y) in a.results.iter().zip(&b.results) {
            assert!(
                (x.score - y.score).abs() < 0.02,
                "{q}: {} vs {}",
                x.score,
                y.score
            );
        }
    }
    // Rewriting every file leaves the index consistent.
    engine_suite::fill(&mut pg, DOCS, Some(&e));
    assert!(pg.check_consistency().unwrap().is_empty());
    assert_eq!(pg.stats().unwrap().files, DOCS.len() as i64);
}

/// An index written before the word postings (schema 5) gets them from its
/// chunks when a newer claw connects (migration 0006), and its keyword search
/// then reads them.
#[test]
fn upgrading_to_the_postings_fills_them_from_the_chunks() {
    use claw_memory::search::query::ParsedQuery;
    use claw_memory::search::score::KeywordNorm;
    use claw_memory::search::storage::SearchStorage;
    let Some(schema) = Schema::new("upgrade6") else {
        return;
    };
    let mut pg = schema.store("up", "ws-a");
    engine_suite::fill(&mut pg, DOCS, None);
    let words = |pg: &claw_memory_pg::PgStore| {
        let mut ids: Vec<i64> = pg
            .keyword_candidates(
                &ParsedQuery::parse("coffee"),
                50,
                None,
                KeywordNorm::MaxScaled,
            )
            .unwrap()
            .into_keys()
            .collect();
        ids.sort_unstable();
        ids
    };
    let before = words(&pg);
    assert!(!before.is_empty());
    drop(pg);
    // Back to schema 5: no postings table, no triggers.
    let mut c = schema.client();
    c.batch_execute(
        "DROP TABLE chunk_postings; DROP FUNCTION claw_chunk_postings_apply() CASCADE;
         DELETE FROM claw_schema WHERE version = 6",
    )
    .unwrap();
    let pg = schema.store("up", "ws-a");
    let n: i64 = c
        .query_one("SELECT count(*) FROM chunk_postings", &[])
        .unwrap()
        .get(0);
    assert!(n > 0);
    assert!(pg.check_consistency().unwrap().is_empty());
    assert_eq!(words(&pg), before);
}

#[test]
fn newer_schema_is_refused_and_migrations_are_idempotent() {
    let Some(schema) = Schema::new("ver") else {
        return;
    };
    drop(schema.store("a", "w"));
    drop(schema.store("a", "w")); // applying again is a no-op
    let mut c = schema.client();
    let n: i64 = c
        .query_one("SELECT count(*) FROM claw_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, claw_memory_pg::SCHEMA_VERSION);
    c.execute("INSERT INTO claw_schema (version) VALUES (99)", &[])
        .unwrap();
    let err = claw_memory_pg::PgStore::connect(schema.config("a", "w")).unwrap_err();
    assert!(err.to_string().contains("newer"), "{err}");
}

#[test]
fn a_dropped_connection_is_retried_on_a_fresh_one() {
    let Some(schema) = Schema::new("retry") else {
        return;
    };
    let mut pg = schema.store("r", "w");
    pg.set_meta("k", "v1").unwrap();
    // The server ends every pooled connection of claw's (a restart, a failover, an idle kill).
    let mut admin = schema.client();
    let killed: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'claw' AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(killed >= 1);
    // The next units find a dead pooled connection, and succeed on a fresh one.
    pg.set_meta("k", "v2").unwrap();
    assert_eq!(pg.meta("k").unwrap().as_deref(), Some("v2"));
    let file = claw_testkit::memory_file("a.md", "s");
    admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = 'claw' AND pid <> pg_backend_pid()",
            &[],
        )
        .unwrap();
    pg.write_file(&file, &[], claw_memory::store::WriteMode::Replace, "")
        .unwrap();
    assert!(pg.file_record("memory", "a.md").unwrap().is_some());
}

/// Recall counts (schema version 4): per workspace, added up, filtered by path,
/// pruned by age, kept by a reset, gone with the namespace.
#[test]
fn recall_counts_are_per_workspace_and_survive_a_reset() {
    use claw_memory::store::RecallHit;
    let Some(schema) = Schema::new("recalls") else {
        return;
    };
    let mut a = schema.store("team", "ws-a");
    let b = schema.store("team", "ws-b");
    let hit = |path: &str, s: usize, e: usize| RecallHit {
        source: "memory".into(),
        path: path.into(),
        start_line: s,
        end_line: e,
    };
    a.record_recalls(
        &[(hit("memory/x.md", 1, 4), 1), (hit("memory/y.md", 2, 2), 1)],
        100,
    )
    .unwrap();
    a.record_recalls(&[(hit("memory/x.md", 1, 4), 2)], 300)
        .unwrap();
    b.record_recalls(&[(hit("memory/x.md", 1, 4), 7)], 200)
        .unwrap();
    let rows = a.recall_rows("memory", &[]).unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(
        (
            rows[0].hit.path.as_str(),
            rows[0].count,
            rows[0].first_at,
            rows[0].last_at
        ),
        ("memory/x.md", 3, 100, 300)
    );
    assert_eq!(
        a.recall_rows("memory", &["memory/y.md".into()])
            .unwrap()
            .len(),
        1
    );
    assert_eq!(b.recall_rows("memory", &[]).unwrap()[0].count, 7);
    a.reset_index("", 0, "v").unwrap();
    assert_eq!(a.recall_rows("memory", &[]).unwrap().len(), 2);
    assert_eq!(a.prune_recalls(200).unwrap(), 1);
    assert_eq!(a.recall_rows("memory", &[]).unwrap().len(), 1);
    a.drop_namespace().unwrap();
    assert!(b.recall_rows("memory", &[]).unwrap().is_empty());
}
