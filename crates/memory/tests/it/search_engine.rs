//! Hybrid search on a small fixture with known answers, real model, real store:
//! vector-only paraphrase, keyword-only identifier, decay, fallbacks, CJK, get.

use crate::search_support;

use claw_memory::config::{EmbedProvider, MemoryConfig, MemorySettings};
use claw_memory::embed::Embedder;
use claw_memory::search::engine::{
    self, GetRequest, Mode, SearchError, SearchRequest, SourceFilter, get_lines, search,
};
use claw_memory::store::Store;
use search_support::Doc;

/// 2026-12-01, a fixed "now" (the fixture's dated notes are relative to it).
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
        "memory/ticket-b.md",
        "Invoice ledger cleanup is tracked as ticket ZX-7441.\nIt moves invoices to the new ledger.",
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

fn setup(with_vectors: bool) -> (tempfile::TempDir, Store, Option<Box<dyn Embedder>>) {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(&dir.path().join(".claw/memory.sqlite")).unwrap();
    let e: Option<Box<dyn Embedder>> = Some(Box::new(search_support::embedder()));
    search_support::fill(
        &mut store,
        DOCS,
        if with_vectors { e.as_deref() } else { None },
    );
    search_support::write_files(dir.path(), DOCS);
    (dir, store, e)
}

fn req(q: &str) -> SearchRequest {
    SearchRequest {
        explain: true,
        ..SearchRequest::new(q)
    }
}

fn paths(r: &engine::SearchResponse) -> Vec<&str> {
    r.results.iter().map(|h| h.path.as_str()).collect()
}

#[test]
fn hybrid_behaviour_on_fixture() {
    let (_dir, store, e) = setup(true);
    let e = e.as_deref();
    let p = MemorySettings::default();

    // A paraphrase sharing no word with the note: found by the vector stage only.
    let q = "what did I do in the mountains at the weekend";
    let kw = search(
        &store,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req(q)
        },
        NOW,
    )
    .unwrap();
    assert!(!paths(&kw).contains(&"memory/2026-11-28.md"), "{kw:?}");
    let r = search(&store, e, &p, &req(q), NOW).unwrap();
    assert_eq!(r.mode, Mode::Hybrid);
    assert_eq!(r.fallback, None);
    assert_eq!(paths(&r).first(), Some(&"memory/2026-11-28.md"), "{r:#?}");
    let x = r.results[0].explain.as_ref().unwrap();
    assert!(x.keyword.is_none() && x.vector.unwrap() > 0.3, "{x:?}");

    // An identifier: found by keyword (vectors know nothing of ZX-4471), pinned to the top 3.
    let r = search(&store, e, &p, &req("ZX-4471"), NOW).unwrap();
    let pos = paths(&r).iter().position(|p| *p == "memory/projects.md");
    assert!(pos.is_some_and(|i| i < 3), "{r:#?}");
    let hit = &r.results[pos.unwrap()];
    assert!(hit.explain.as_ref().unwrap().pinned);
    assert_eq!(hit.citation, "memory/projects.md#L1-L2");
    let vonly = search(
        &store,
        e,
        &p,
        &SearchRequest {
            mode: Mode::Vector,
            ..req("ZX-4471")
        },
        NOW,
    )
    .unwrap();
    // The keyword stage alone singles it out among near-identical ticket notes;
    // the vector stage cannot tell them apart.
    assert_eq!(r.results[0].path, "memory/projects.md", "{r:#?}");
    assert_eq!(hit.explain.as_ref().unwrap().keyword, Some(1.0));
    let kw = search(
        &store,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Fts,
            ..req("ZX-4471")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(paths(&kw), vec!["memory/projects.md"]);
    let vs: Vec<f64> = vonly
        .results
        .iter()
        .filter(|h| h.path.starts_with("memory/ticket"))
        .map(|h| h.explain.as_ref().unwrap().vector.unwrap())
        .collect();
    let vp = vonly
        .results
        .iter()
        .find(|h| h.path == "memory/projects.md")
        .map(|h| h.explain.as_ref().unwrap().vector.unwrap())
        .unwrap_or(0.0);
    assert!(
        vs.iter().any(|v| (v - vp).abs() < 0.15 || *v > vp),
        "vectors alone separate the tickets? {vs:?} vs {vp}"
    );

    // Equal text, dated 6 months ago vs evergreen: the evergreen one ranks higher.
    let r = search(
        &store,
        e,
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
    let ever = paths(&r)
        .iter()
        .position(|p| *p == "memory/dentist.md")
        .unwrap();
    let old = paths(&r)
        .iter()
        .position(|p| *p == "memory/2026-06-01.md")
        .unwrap();
    assert!(ever < old, "{r:#?}");
    // Six months old: bounded decay takes nearly all of score::MAX_RECENCY_PENALTY.
    let d = r.results[old].explain.as_ref().unwrap().decay;
    let floor = 1.0 - claw_memory::search::score::MAX_RECENCY_PENALTY;
    assert!((floor..floor + 0.01).contains(&d), "decay {d}");
    assert_eq!(r.results[ever].explain.as_ref().unwrap().decay, 1.0);
    // With MMR on, the exact duplicate does not sit right under its twin in the top.
    let r = search(
        &store,
        e,
        &p,
        &SearchRequest {
            min_score: Some(0.0),
            ..req("dentist appointment")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(r.results[0].path, "memory/dentist.md");
    assert_ne!(
        r.results.get(1).map(|h| h.path.as_str()),
        Some("memory/2026-06-01.md"),
        "{r:#?}"
    );

    // Source filter.
    let r = search(
        &store,
        e,
        &p,
        &SearchRequest {
            source: SourceFilter::Sessions,
            min_score: Some(0.0),
            ..req("passport")
        },
        NOW,
    )
    .unwrap();
    assert!(!r.results.is_empty() && r.results.iter().all(|h| h.source == "sessions"));
    let err = search(
        &store,
        e,
        &p,
        &SearchRequest {
            source: SourceFilter::Named("nope".into()),
            ..req("x")
        },
        NOW,
    )
    .unwrap_err();
    assert!(matches!(err, SearchError::UnknownSource { .. }), "{err}");

    // CJK queries of 1, 2 and 4 characters find their chunk by keyword.
    for q in ["猫", "东京", "东京塔附"] {
        let r = search(
            &store,
            None,
            &p,
            &SearchRequest {
                mode: Mode::Fts,
                ..req(q)
            },
            NOW,
        )
        .unwrap();
        assert_eq!(paths(&r).first(), Some(&"memory/zh.md"), "{q}: {r:#?}");
    }

    // Large limits, no min-score, no MMR (the eval harness's settings).
    let r = search(
        &store,
        e,
        &p,
        &SearchRequest {
            limit: 100,
            min_score: Some(f64::NEG_INFINITY),
            mmr: false,
            ..req("coffee")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(r.results.len(), DOCS.len());
    assert_eq!(r.results[0].path, "MEMORY.md");
    let scores: Vec<f64> = r.results.iter().map(|h| h.score).collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");

    // JSON contract.
    let j = serde_json::to_value(&r).unwrap();
    for key in ["query", "mode", "fallback", "results"] {
        assert!(j.get(key).is_some(), "{key}");
    }
    for key in [
        "path",
        "source",
        "start_line",
        "end_line",
        "score",
        "snippet",
        "citation",
        "explain",
    ] {
        assert!(j["results"][0].get(key).is_some(), "{key}");
    }
    assert_eq!(j["mode"], "hybrid");
    let plain = search(&store, e, &p, &SearchRequest::new("coffee"), NOW).unwrap();
    assert!(
        serde_json::to_value(&plain).unwrap()["results"][0]
            .get("explain")
            .is_none()
    );
}

#[test]
fn fallbacks_never_fail() {
    let (dir, store, e) = setup(true);
    let p = MemorySettings::default();
    // No embedder: keyword-only, and says so.
    let r = search(&store, None, &p, &req("coffee"), NOW).unwrap();
    assert_eq!(
        (r.mode, r.fallback.map(|f| f.as_str())),
        (Mode::Hybrid, Some("no-embedder"))
    );
    assert_eq!(paths(&r).first(), Some(&"MEMORY.md"));
    // Keyword-only hits are not capped below min-score (weights renormalise).
    assert!(r.results[0].score >= 0.35, "{r:#?}");
    // Vector mode without an embedder degrades to keywords.
    let r = search(
        &store,
        None,
        &p,
        &SearchRequest {
            mode: Mode::Vector,
            ..req("coffee")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(
        (r.mode, r.fallback.map(|f| f.as_str())),
        (Mode::Vector, Some("no-embedder"))
    );
    assert!(!r.results.is_empty());
    let with_vec0 = search(
        &store,
        e.as_deref(),
        &p,
        &req("mountain trip at the weekend"),
        NOW,
    )
    .unwrap();
    drop(store);

    // Same file without sqlite-vec: exact in-process cosine, same answer.
    let store = Store::open_without_vec(&dir.path().join(".claw/memory.sqlite")).unwrap();
    let r = search(
        &store,
        e.as_deref(),
        &p,
        &req("mountain trip at the weekend"),
        NOW,
    )
    .unwrap();
    assert_eq!(r.fallback.map(|f| f.as_str()), Some("no-vec0"));
    assert_eq!(r.mode, Mode::Hybrid);
    assert_eq!(paths(&r), paths(&with_vec0));
    drop(store);

    // A keyword-only index with an embedder present: no vectors to search.
    let (_d2, store, e) = setup(false);
    let r = search(&store, e.as_deref(), &p, &req("coffee"), NOW).unwrap();
    assert_eq!(
        (r.mode, r.fallback.map(|f| f.as_str())),
        (Mode::Hybrid, Some("no-vectors"))
    );
    assert_eq!(paths(&r).first(), Some(&"MEMORY.md"));
}

#[test]
fn get_lines_only_serves_indexed_files() {
    let (dir, store, _e) = setup(false);
    let settings = MemoryConfig::for_workspace(dir.path(), EmbedProvider::None);
    let r = get_lines(&settings, &store, &GetRequest::new("memory/projects.md")).unwrap();
    assert_eq!(
        (r.source.as_str(), r.from, r.to, r.total_lines),
        ("memory", 1, 2, 2)
    );
    assert!(r.text.contains("ZX-4471"));
    let r = get_lines(
        &settings,
        &store,
        &GetRequest {
            from: 2,
            lines: 1,
            ..GetRequest::new("./memory/projects.md")
        },
    )
    .unwrap();
    assert_eq!(r.text, "It moves invoices to the new ledger.\n");
    let abs = dir.path().join("MEMORY.md");
    let r = get_lines(&settings, &store, &GetRequest::new(abs.to_str().unwrap())).unwrap();
    assert_eq!(r.path, "MEMORY.md");
    let r = get_lines(&settings, &store, &GetRequest::new("sessions/s1.jsonl")).unwrap();
    assert_eq!(r.source, "sessions");

    for bad in ["../etc/passwd", "memory/../MEMORY.md", "/etc/passwd"] {
        let err = get_lines(&settings, &store, &GetRequest::new(bad)).unwrap_err();
        assert!(matches!(err, SearchError::Refused { .. }), "{bad}: {err}");
    }
    // Present on disk but not indexed.
    std::fs::write(dir.path().join("memory/secret.md"), "x").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();
    for bad in ["memory/secret.md", "notes.txt", ".claw/memory.sqlite"] {
        let err = get_lines(&settings, &store, &GetRequest::new(bad)).unwrap_err();
        assert!(matches!(err, SearchError::NotIndexed(_)), "{bad}: {err}");
    }
}
