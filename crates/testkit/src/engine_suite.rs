//! One search-engine test-suite for every storage backend: the fixture corpus
//! (dated notes, near-identical tickets, CJK, a session transcript), the helpers
//! that fill a store through the `IndexStorage` boundary with real embeddings,
//! and the engine cases themselves, written once over `&dyn SearchStorage`.
//! A backend's test module runs them all with one line,
//! `claw_testkit::engine_suite!(factory);` — SQLite in `claw-memory`'s tests,
//! PostgreSQL in `claw-memory-pg`'s — so a case added here runs on both.

use claw_memory::config::{EmbedProvider, LocalRuntime, MemoryConfig, MemorySettings, Precision};
use claw_memory::dates::note_time_from_path;
use claw_memory::embed::{Embedder, LocalEmbedder};
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::engine::{
    self, Fallback, GetRequest, Mode, SearchError, SearchRequest, SourceFilter, get_lines_in,
    search_in,
};
use claw_memory::search::storage::SearchStorage;
use claw_memory::store::{FileRecord, NewChunk, Store, WriteMode};
use claw_memory::walk;
use std::path::Path;

/// 2026-12-01, the suite's fixed "now" (the fixture's dated notes are relative to it).
pub const NOW: i64 = 1_796_083_200;

/// One indexed document: (source, path, text). Each becomes one chunk covering all its lines.
pub type Doc<'a> = (&'a str, &'a str, &'a str);

/// The engine fixture: known answers for paraphrase, identifier, decay, MMR, CJK, sources.
pub const DOCS: &[Doc<'static>] = &[
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

/// A store both written (`IndexStorage`) and searched (`SearchStorage`).
pub trait EngineStore: IndexStorage + SearchStorage {}
impl<T: IndexStorage + SearchStorage + ?Sized> EngineStore for T {}

/// An empty store of one backend, in a fresh temp workspace.
pub struct Fixture {
    /// "sqlite", "postgres": named in every assertion message.
    pub backend: &'static str,
    pub store: Box<dyn EngineStore>,
    /// The workspace root: the fixture's files are written here (for `get`).
    pub dir: tempfile::TempDir,
    /// Whatever must outlive the store (e.g. a private PostgreSQL schema); dropped last.
    pub guard: Option<Box<dyn std::any::Any>>,
}

impl Fixture {
    pub fn search(&self) -> &dyn SearchStorage {
        &*self.store
    }
    pub fn index(&mut self) -> &mut dyn IndexStorage {
        &mut *self.store
    }
}

/// Opens an empty store for a test named `tag`; `None` = the backend is not
/// available here (the factory says so loudly, and fails under `CI=true`).
pub type Factory = fn(tag: &str) -> Option<Fixture>;

/// The SQLite backend: `.claw/memory.sqlite` in a fresh temp workspace.
pub fn sqlite(_tag: &str) -> Option<Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join(".claw/memory.sqlite")).unwrap();
    Some(Fixture {
        backend: "sqlite",
        store: Box::new(store),
        dir,
        guard: None,
    })
}

/// Load the real local model at the default precision (panics with
/// instructions when missing).
pub fn embedder() -> LocalEmbedder {
    let (dir, ort) = crate::model_paths();
    LocalEmbedder::load(Some(&dir), Some(&ort), 8).expect("load the local model")
}

/// [`embedder`] at `precision`; asserts that graph is the one that runs.
pub fn embedder_at(precision: Precision) -> LocalEmbedder {
    let (dir, ort) = crate::model_paths();
    let runtime = LocalRuntime {
        precision,
        ..LocalRuntime::default()
    };
    let e = LocalEmbedder::load_with(Some(&dir), Some(&ort), 8, &runtime)
        .expect("load the local model");
    assert_eq!(e.precision(), precision, "the {precision:?} graph runs");
    e
}

/// Reset the store's index for `embedder` (keyword-only when `None`) and write `docs`.
pub fn fill(store: &mut dyn IndexStorage, docs: &[Doc<'_>], embedder: Option<&dyn Embedder>) {
    let (model, dims) = match embedder {
        Some(e) => (e.model_id().to_string(), e.dims()),
        None => (String::new(), 0),
    };
    store.reset_index(&model, dims, "test").unwrap();
    let vectors: Vec<Option<Vec<f32>>> = match embedder {
        Some(e) => {
            let texts: Vec<&str> = docs.iter().map(|d| d.2).collect();
            e.embed(&texts).unwrap().into_iter().map(Some).collect()
        }
        None => vec![None; docs.len()],
    };
    for ((source, path, text), emb) in docs.iter().zip(vectors) {
        let file = FileRecord {
            source: source.to_string(),
            path: path.to_string(),
            sha256: format!("sha-{path}"),
            mtime_ns: 1,
            size: text.len() as i64,
            indexed_bytes: 0,
            indexed_lines: 0,
        };
        let chunk = NewChunk {
            id: format!("{source}:{path}"),
            start_line: 1,
            end_line: text.lines().count().max(1),
            hash: format!("h-{source}-{path}"),
            text: text.to_string(),
            context: String::new(),
            note_time: note_time_from_path(path),
            embedding: emb,
        };
        store
            .write_file(&file, &[chunk], WriteMode::Replace, &model)
            .unwrap();
    }
}

/// Write the documents' files under `root` too (for `memory get`).
pub fn write_files(root: &Path, docs: &[Doc<'_>]) {
    for (_, path, text) in docs {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// A fresh store of `factory`'s backend holding [`DOCS`] (with vectors or keyword-only),
/// the files on disk, and the model.
pub fn setup(factory: Factory, tag: &str, with_vectors: bool) -> Option<(Fixture, LocalEmbedder)> {
    let mut fx = factory(tag)?;
    let e = embedder();
    fill(
        fx.index(),
        DOCS,
        if with_vectors {
            Some(&e as &dyn Embedder)
        } else {
            None
        },
    );
    write_files(fx.dir.path(), DOCS);
    Some((fx, e))
}

/// A request with `explain` on.
pub fn req(q: &str) -> SearchRequest {
    SearchRequest {
        explain: true,
        ..SearchRequest::new(q)
    }
}

/// The hits' paths, best first.
pub fn paths(r: &engine::SearchResponse) -> Vec<&str> {
    r.results.iter().map(|h| h.path.as_str()).collect()
}

/// Keyword-only (`Mode::Fts`, no embedder) search.
pub fn fts(s: &dyn SearchStorage, q: &str) -> engine::SearchResponse {
    let p = MemorySettings::default();
    let r = SearchRequest {
        mode: Mode::Fts,
        ..req(q)
    };
    search_in(s, None, &p, &r, NOW).unwrap()
}

/// Run every engine case of [`crate::engine_suite`] as one `#[test]` each, on the
/// backend `$factory` (a [`Factory`]) opens.
#[macro_export]
macro_rules! engine_suite {
    ($factory:expr) => {
        #[test]
        fn hybrid_behaviour_on_fixture() {
            $crate::engine_suite::hybrid_behaviour_on_fixture($factory);
        }
        #[test]
        fn keyword_stage_finds_identifiers_cjk_and_mid_note_words() {
            $crate::engine_suite::keyword_stage_cases($factory);
        }
        #[test]
        fn fallbacks_never_fail() {
            $crate::engine_suite::fallbacks_never_fail($factory);
        }
        #[test]
        fn get_lines_only_serves_indexed_files() {
            $crate::engine_suite::get_lines_only_serves_indexed_files($factory);
        }
    };
}

/// Vector-only paraphrase, pinned identifier, bounded decay, MMR, source filter,
/// CJK, large limits, the JSON contract.
pub fn hybrid_behaviour_on_fixture(factory: Factory) {
    let Some((fx, e)) = setup(factory, "hybrid", true) else {
        return;
    };
    let (name, store) = (fx.backend, fx.search());
    let e = Some(&e as &dyn Embedder);
    let p = MemorySettings::default();

    // A paraphrase sharing no word with the note: found by the vector stage only.
    let q = "what did I do in the mountains at the weekend";
    let kw = fts(store, q);
    assert!(
        !paths(&kw).contains(&"memory/2026-11-28.md"),
        "{name}: {kw:?}"
    );
    let r = search_in(store, e, &p, &req(q), NOW).unwrap();
    assert_eq!(r.mode, Mode::Hybrid, "{name}");
    assert_eq!(r.fallback, None, "{name}");
    assert_eq!(
        paths(&r).first(),
        Some(&"memory/2026-11-28.md"),
        "{name}: {r:#?}"
    );
    let x = r.results[0].explain.as_ref().unwrap();
    assert!(
        x.keyword.is_none() && x.vector.unwrap() > 0.3,
        "{name}: {x:?}"
    );

    // An identifier: found by keyword (vectors know nothing of ZX-4471), pinned to the top 3.
    let r = search_in(store, e, &p, &req("ZX-4471"), NOW).unwrap();
    let pos = paths(&r).iter().position(|p| *p == "memory/projects.md");
    assert!(pos.is_some_and(|i| i < 3), "{name}: {r:#?}");
    let hit = &r.results[pos.unwrap()];
    assert!(hit.explain.as_ref().unwrap().pinned, "{name}");
    assert_eq!(hit.citation, "memory/projects.md#L1-L2", "{name}");
    let vonly = search_in(
        store,
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
    assert_eq!(r.results[0].path, "memory/projects.md", "{name}: {r:#?}");
    assert_eq!(hit.explain.as_ref().unwrap().keyword, Some(1.0), "{name}");
    let kw = fts(store, "ZX-4471");
    assert_eq!(paths(&kw), vec!["memory/projects.md"], "{name}");
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
        "{name}: vectors alone separate the tickets? {vs:?} vs {vp}"
    );

    // Equal text, dated 6 months ago vs evergreen: the evergreen one ranks higher.
    let r = search_in(
        store,
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
    assert!(ever < old, "{name}: {r:#?}");
    // Six months old: bounded decay takes nearly all of score::MAX_RECENCY_PENALTY.
    let d = r.results[old].explain.as_ref().unwrap().decay;
    let floor = 1.0 - claw_memory::search::score::MAX_RECENCY_PENALTY;
    assert!((floor..floor + 0.01).contains(&d), "{name}: decay {d}");
    assert_eq!(
        r.results[ever].explain.as_ref().unwrap().decay,
        1.0,
        "{name}"
    );
    // With MMR on, the exact duplicate does not sit right under its twin in the top.
    let r = search_in(
        store,
        e,
        &p,
        &SearchRequest {
            min_score: Some(0.0),
            ..req("dentist appointment")
        },
        NOW,
    )
    .unwrap();
    assert_eq!(r.results[0].path, "memory/dentist.md", "{name}");
    assert_ne!(
        r.results.get(1).map(|h| h.path.as_str()),
        Some("memory/2026-06-01.md"),
        "{name}: {r:#?}"
    );

    // Source filter.
    let r = search_in(
        store,
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
    assert!(
        !r.results.is_empty() && r.results.iter().all(|h| h.source == "sessions"),
        "{name}: {r:#?}"
    );
    let err = search_in(
        store,
        e,
        &p,
        &SearchRequest {
            source: SourceFilter::Named("nope".into()),
            ..req("x")
        },
        NOW,
    )
    .unwrap_err();
    assert!(
        matches!(err, SearchError::UnknownSource { .. }),
        "{name}: {err}"
    );

    // CJK queries of 1, 2 and 4 characters find their chunk by keyword.
    for q in ["猫", "东京", "东京塔附"] {
        let r = fts(store, q);
        assert_eq!(
            paths(&r).first(),
            Some(&"memory/zh.md"),
            "{name}: {q}: {r:#?}"
        );
    }

    // Large limits, no min-score, no MMR (the eval harness's settings).
    let r = search_in(
        store,
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
    assert_eq!(r.results.len(), DOCS.len(), "{name}");
    assert_eq!(r.results[0].path, "MEMORY.md", "{name}");
    let scores: Vec<f64> = r.results.iter().map(|h| h.score).collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "{name}: {scores:?}"
    );

    // JSON contract.
    let j = serde_json::to_value(&r).unwrap();
    for key in ["query", "mode", "fallback", "results"] {
        assert!(j.get(key).is_some(), "{name}: {key}");
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
        assert!(j["results"][0].get(key).is_some(), "{name}: {key}");
    }
    assert_eq!(j["mode"], "hybrid", "{name}");
    let plain = search_in(store, e, &p, &SearchRequest::new("coffee"), NOW).unwrap();
    assert!(
        serde_json::to_value(&plain).unwrap()["results"][0]
            .get("explain")
            .is_none(),
        "{name}"
    );
}

/// The keyword stage alone: CJK substrings, a word from the middle of a note, an
/// identifier among near-identical ones.
pub fn keyword_stage_cases(factory: Factory) {
    let Some((fx, _e)) = setup(factory, "keyword", false) else {
        return;
    };
    let (name, store) = (fx.backend, fx.search());
    for q in ["拉面", "东京塔"] {
        assert_eq!(paths(&fts(store, q)), vec!["memory/zh.md"], "{name}: {q}");
    }
    let r = fts(store, "autovacuum_vacuum_scale_factor");
    assert_eq!(paths(&r).first(), Some(&"memory/db.md"), "{name}: {r:#?}");
    assert_eq!(
        paths(&fts(store, "ZX-7441")),
        vec!["memory/ticket-b.md"],
        "{name}"
    );
    assert!(fts(store, "ZX-9999").results.is_empty(), "{name}");
}

/// No embedder, vector mode without an embedder, a keyword-only index: each
/// degrades to keywords and says so.
pub fn fallbacks_never_fail(factory: Factory) {
    let Some((fx, e)) = setup(factory, "fallback", true) else {
        return;
    };
    let (name, store) = (fx.backend, fx.search());
    let p = MemorySettings::default();
    // No embedder: keyword-only, and says so.
    let r = search_in(store, None, &p, &req("coffee"), NOW).unwrap();
    assert_eq!(
        (r.mode, r.fallback.map(|f| f.as_str())),
        (Mode::Hybrid, Some("no-embedder")),
        "{name}"
    );
    assert_eq!(paths(&r).first(), Some(&"MEMORY.md"), "{name}");
    // Keyword-only hits are not capped below min-score (weights renormalise).
    assert!(r.results[0].score >= 0.35, "{name}: {r:#?}");
    // Vector mode without an embedder degrades to keywords.
    let r = search_in(
        store,
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
        (Mode::Vector, Some("no-embedder")),
        "{name}"
    );
    assert!(!r.results.is_empty(), "{name}");
    drop(fx);

    // A keyword-only index with an embedder present: no vectors to search.
    let Some((fx, _)) = setup(factory, "kwonly", false) else {
        return;
    };
    let (name, store) = (fx.backend, fx.search());
    assert_eq!(store.index_model().unwrap().as_deref(), Some(""), "{name}");
    let r = search_in(store, Some(&e), &p, &req("coffee"), NOW).unwrap();
    assert_eq!(
        (r.mode, r.fallback.map(|f| f.as_str())),
        (Mode::Hybrid, Some("no-vectors")),
        "{name}"
    );
    assert_eq!(paths(&r).first(), Some(&"MEMORY.md"), "{name}");
    let r = search_in(store, Some(&e), &p, &req("hiking Alps"), NOW).unwrap();
    assert_eq!(r.fallback, Some(Fallback::NoVectors), "{name}");
    assert_eq!(r.results[0].path, "memory/2026-11-28.md", "{name}");
}

/// `get` serves lines of indexed files only: relative, `./`, absolute paths; refuses
/// `..` and paths outside every source; a file on disk but not indexed is `NotIndexed`.
pub fn get_lines_only_serves_indexed_files(factory: Factory) {
    let Some((fx, _e)) = setup(factory, "get", false) else {
        return;
    };
    let (name, store, dir) = (fx.backend, fx.search(), fx.dir.path());
    let roots = walk::builtin_sources(&MemoryConfig::for_workspace(dir, EmbedProvider::None));
    let get = |r: &GetRequest| get_lines_in(store, &roots, r);
    let r = get(&GetRequest::new("memory/projects.md")).unwrap();
    assert_eq!(
        (r.source.as_str(), r.from, r.to, r.total_lines),
        ("memory", 1, 2, 2),
        "{name}"
    );
    assert!(r.text.contains("ZX-4471"), "{name}");
    let r = get(&GetRequest {
        from: 2,
        lines: 1,
        ..GetRequest::new("./memory/projects.md")
    })
    .unwrap();
    assert_eq!(r.text, "It moves invoices to the new ledger.\n", "{name}");
    let abs = dir.join("MEMORY.md");
    let r = get(&GetRequest::new(abs.to_str().unwrap())).unwrap();
    assert_eq!(r.path, "MEMORY.md", "{name}");
    let r = get(&GetRequest::new("sessions/s1.jsonl")).unwrap();
    assert_eq!(r.source, "sessions", "{name}");

    for bad in ["../etc/passwd", "memory/../MEMORY.md", "/etc/passwd"] {
        let err = get(&GetRequest::new(bad)).unwrap_err();
        assert!(
            matches!(err, SearchError::Refused { .. }),
            "{name}: {bad}: {err}"
        );
    }
    // Present on disk but not indexed.
    std::fs::write(dir.join("memory/secret.md"), "x").unwrap();
    std::fs::write(dir.join("notes.txt"), "x").unwrap();
    for bad in ["memory/secret.md", "notes.txt", ".claw/memory.sqlite"] {
        let err = get(&GetRequest::new(bad)).unwrap_err();
        assert!(
            matches!(err, SearchError::NotIndexed(_)),
            "{name}: {bad}: {err}"
        );
    }
}
