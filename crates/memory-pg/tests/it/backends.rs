//! The engine's core search cases run on both backends (parameterised over
//! `SearchStorage`): a vector-only paraphrase, a pinned identifier, bounded
//! decay, CJK substring search, a keyword-only index, the source filter, and
//! `get` of an indexed file — the same assertions for SQLite and PostgreSQL.

use crate::support::{self, Doc, Schema};
use claw_memory::config::MemorySettings;
use claw_memory::embed::Embedder;
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::engine::{
    self, Fallback, GetRequest, Mode, SearchRequest, SourceFilter, get_lines_in, search_in,
};
use claw_memory::search::storage::SearchStorage;
use claw_memory::store::Store;
use claw_memory::walk::{SourceKind, SourceRoot};

/// 2026-12-01.
const NOW: i64 = 1_796_083_200;

const DOCS: &[Doc<'static>] = &[
    (
        "memory",
        "MEMORY.md",
        "Preferences: I drink my coffee black, no sugar.\nMy editor is Helix.",
    ),
    (
        "memory",
        "memory/projects.md",
        "The billing migration is tracked as ticket ZX-4471.\nIt moves invoices to the new ledger.",
    ),
    (
        "memory",
        "memory/ticket-a.md",
        "The billing export is tracked as ticket ZX-4417.\nIt moves invoices to the old ledger.",
    ),
    (
        "memory",
        "memory/2026-11-28.md",
        "Went hiking in the Alps with Marta on Saturday; the weather was clear.",
    ),
    (
        "memory",
        "memory/2026-06-01.md",
        "Dentist appointment moved to Thursday afternoon.",
    ),
    (
        "memory",
        "memory/dentist.md",
        "Dentist appointment moved to Thursday afternoon.",
    ),
    (
        "memory",
        "memory/rust.md",
        "Rust lifetimes: a reference must not outlive the data it borrows.",
    ),
    (
        "memory",
        "memory/db.md",
        "Postgres vacuum settings: autovacuum_vacuum_scale_factor 0.05 on large tables.",
    ),
    (
        "memory",
        "memory/zh.md",
        "我们在东京塔附近吃了拉面。猫很可爱。",
    ),
    (
        "sessions",
        "sessions/s1.jsonl",
        "{\"role\":\"user\",\"text\":\"remind me to renew the passport\"}",
    ),
];

fn req(q: &str) -> SearchRequest {
    SearchRequest {
        explain: true,
        ..SearchRequest::new(q)
    }
}

fn paths(r: &engine::SearchResponse) -> Vec<String> {
    r.results.iter().map(|h| h.path.clone()).collect()
}

/// The cases every backend must pass.
fn core_cases(name: &str, s: &dyn SearchStorage, e: &dyn Embedder) {
    let p = MemorySettings::default();
    // A paraphrase sharing no word: vector stage only.
    let q = "what did I do in the mountains at the weekend";
    let kw = search_in(
        s,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req(q)
        },
        NOW,
    )
    .unwrap();
    assert!(
        !paths(&kw).contains(&"memory/2026-11-28.md".to_string()),
        "{name}: {kw:?}"
    );
    let r = search_in(s, Some(e), &p, &req(q), NOW).unwrap();
    assert_eq!(r.fallback, None, "{name}");
    assert_eq!(
        paths(&r).first().map(String::as_str),
        Some("memory/2026-11-28.md"),
        "{name}: {r:#?}"
    );
    let x = r.results[0].explain.as_ref().unwrap();
    assert!(
        x.keyword.is_none() && x.vector.unwrap() > 0.3,
        "{name}: {x:?}"
    );

    // An identifier: keyword stage, pinned, first, keyword score 1.
    let r = search_in(s, Some(e), &p, &req("ZX-4471"), NOW).unwrap();
    assert_eq!(r.results[0].path, "memory/projects.md", "{name}: {r:#?}");
    let x = r.results[0].explain.as_ref().unwrap();
    assert!(x.pinned, "{name}");
    assert_eq!(x.keyword, Some(1.0), "{name}");
    assert_eq!(r.results[0].citation, "memory/projects.md#L1-L2");
    let kw = search_in(
        s,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req("ZX-4471")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(paths(&kw), vec!["memory/projects.md"], "{name}");

    // Same text, six months old vs evergreen: the evergreen one ranks higher.
    let r = search_in(
        s,
        Some(e),
        &p,
        &SearchRequest {
            limit: 20,
            min_score: Some(0.0),
            mmr: false,
            ..req("dentist appointment")
        },
        NOW,
    )
    .unwrap();
    let pos = |f: &str| paths(&r).iter().position(|p| p == f).unwrap();
    assert!(
        pos("memory/dentist.md") < pos("memory/2026-06-01.md"),
        "{name}: {r:#?}"
    );

    // CJK: a two-character run found by substring.
    let r = search_in(
        s,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req("拉面")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(paths(&r), vec!["memory/zh.md"], "{name}");
    let r = search_in(
        s,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req("东京塔")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(paths(&r), vec!["memory/zh.md"], "{name}");

    // Source filter: sessions only; an unknown source is refused.
    let r = search_in(
        s,
        Some(e),
        &p,
        &SearchRequest {
            source: SourceFilter::parse("sessions"),
            min_score: Some(0.0),
            ..req("passport")
        },
        NOW,
    )
    .unwrap();
    assert!(!r.results.is_empty(), "{name}");
    assert!(
        r.results.iter().all(|h| h.source == "sessions"),
        "{name}: {r:#?}"
    );
    let err = search_in(
        s,
        Some(e),
        &p,
        &SearchRequest {
            source: SourceFilter::parse("nope"),
            ..req("passport")
        },
        NOW,
    );
    assert!(err.is_err(), "{name}");

    // Keyword-only words with a word from the middle of a note.
    let r = search_in(
        s,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req("autovacuum_vacuum_scale_factor")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(
        paths(&r).first().map(String::as_str),
        Some("memory/db.md"),
        "{name}"
    );
}

#[test]
fn core_search_cases_on_both_backends() {
    let Some(schema) = Schema::new("core") else {
        return;
    };
    let e = support::embedder();
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = Store::open(&dir.path().join(".claw/memory.sqlite")).unwrap();
    support::fill(&mut sqlite, DOCS, Some(&e));
    core_cases("sqlite", &sqlite, &e);
    let mut pg = schema.store("core", "ws-a");
    support::fill(&mut pg, DOCS, Some(&e));
    core_cases("postgres", &pg, &e);
    assert!(pg.check_consistency().unwrap().is_empty());

    // The same hybrid scores on both backends (scoring is the shared pure core).
    let p = MemorySettings::default();
    for q in [
        "coffee preferences",
        "ledger invoices",
        "borrow checker rules",
    ] {
        let a = search_in(&sqlite, Some(&e), &p, &req(q), NOW).unwrap();
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

    // get serves lines of an indexed file; an unindexed one is refused.
    support::fill(&mut pg, DOCS, Some(&e));
    for (_, path, text) in DOCS {
        let f = dir.path().join(path);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, text).unwrap();
    }
    let roots = vec![SourceRoot {
        name: "memory".into(),
        root: dir.path().to_path_buf(),
        kind: SourceKind::Workspace,
        follow_symlinks_outside: false,
    }];
    let g = get_lines_in(&pg, &roots, &GetRequest::new("memory/rust.md")).unwrap();
    assert!(g.text.contains("lifetimes"), "{g:?}");
    std::fs::write(dir.path().join("memory/other.md"), "x").unwrap();
    assert!(get_lines_in(&pg, &roots, &GetRequest::new("memory/other.md")).is_err());
}

#[test]
fn keyword_only_index_falls_back_on_postgres() {
    let Some(schema) = Schema::new("kwonly") else {
        return;
    };
    let e = support::embedder();
    let mut pg = schema.store("kw", "ws-a");
    support::fill(&mut pg, DOCS, None);
    assert_eq!(pg.meta("model").unwrap().as_deref(), Some(""));
    let r = search_in(
        &pg,
        Some(&e),
        &MemorySettings::default(),
        &req("hiking Alps"),
        NOW,
    )
    .unwrap();
    assert_eq!(r.fallback, Some(Fallback::NoVectors));
    assert_eq!(r.results[0].path, "memory/2026-11-28.md");
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
    let file = claw_memory::store::FileRecord {
        source: "memory".into(),
        path: "a.md".into(),
        sha256: "s".into(),
        mtime_ns: 1,
        size: 1,
        indexed_bytes: 0,
        indexed_lines: 0,
    };
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
