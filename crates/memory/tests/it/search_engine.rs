//! Hybrid search on a small fixture with known answers, real model, real store:
//! the shared engine suite (`claw_testkit::engine_suite`: vector-only paraphrase,
//! keyword-only identifier, decay, fallbacks, CJK, get) on SQLite, plus what only
//! SQLite has (the exact in-process fallback when sqlite-vec is missing).
//! `claw-memory-pg`'s tests run the same suite on PostgreSQL.

use claw_memory::config::MemorySettings;
use claw_memory::search::engine::search;
use claw_memory::store::Store;
use claw_testkit::engine_suite::{self, NOW, paths, req};

claw_testkit::engine_suite!(engine_suite::sqlite);

#[test]
fn without_vec0_the_exact_fallback_gives_the_same_answer() {
    let (fx, e) = engine_suite::setup(engine_suite::sqlite, "novec", true).unwrap();
    let p = MemorySettings::default();
    let q = req("mountain trip at the weekend");
    let with_vec0 =
        claw_memory::search::engine::search_in(fx.search(), Some(&e), &p, &q, NOW).unwrap();
    assert_eq!(with_vec0.fallback, None);
    let engine_suite::Fixture { store, dir, .. } = fx;
    drop(store);

    // Same file without sqlite-vec: exact in-process cosine, same answer.
    let store = Store::open_without_vec(&dir.path().join(".claw/memory.sqlite")).unwrap();
    let r = search(&store, Some(&e), &p, &q, NOW).unwrap();
    assert_eq!(r.fallback.map(|f| f.as_str()), Some("no-vec0"));
    assert_eq!(r.mode, with_vec0.mode);
    assert_eq!(paths(&r), paths(&with_vec0));
}
