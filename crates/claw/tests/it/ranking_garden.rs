//! Old notes stay findable, keyword-only: the real 7,772-note digital garden indexed
//! by the real indexer and the committed rare-word-pair query set (see
//! `ranking_support::garden`); every expected note, dated years ago or undated, must
//! come back in the top 6 with default settings. Prints the figures and a decay
//! sweep. The hybrid figures (real model, ~80 s of indexing in release) come from
//! `cargo run --release --example ranking_garden`, which runs the same code.

use crate::ranking_support;

use ranking_support::garden;

#[test]
fn garden_keyword_only_top6() {
    let g = garden::extract_garden();
    let (ws, took) = garden::index_garden(g.path(), None);
    eprintln!(
        "indexed the garden keyword-only in {:.1} s",
        took.as_secs_f64()
    );
    let rows = garden::measure(ws.path(), None, "keyword-only");
    garden::print_table("keyword-only index", &rows);
    // Made-up words find nothing (keyword-only, no vector stage to fool).
    let random = garden::random_words(ws.path(), None);
    garden::print_random_words("keyword-only", &random);
    assert_eq!(random.0, 50);
    assert_eq!(random.1, 0, "random-word queries with hits");
    let sweep = garden::sweep(ws.path(), None);
    garden::print_sweep("keyword-only", &sweep);
    for (kind, top6, n, _) in &rows {
        assert!(*n >= 20, "{kind}: {n} queries");
        assert_eq!(top6, n, "{kind}: {top6}/{n} in the top 6");
    }
    // The sweep's default row agrees with the engine's own ranking on dated notes.
    let default = sweep.iter().find(|r| r.0.contains("default")).unwrap();
    assert_eq!(default.1, default.2, "{default:?}");
}
