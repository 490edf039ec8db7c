//! Old notes stay findable: the real 7,772-note digital garden
//! (`../shared/data/notes-garden.tar.gz`) indexed by the real `claw` binary, and the
//! committed query set `fixtures/garden-queries/queries.tsv` (rare word pairs, each
//! from one random note: years-old `YYYY-MM-DD.md` journals and undated notes;
//! regenerate with `fixtures/garden-queries/generate.py`). Each query is searched
//! with default settings at the tests' fixed "now"; the figure is how many expected
//! notes come back in the top 6, keyword-only and hybrid (real model).

mod ranking_support;
mod search_support;
mod support;

use claw::config::MemorySettings;
use claw::memory::embed::Embedder;
use claw::memory::search::engine::{self, Mode, SearchRequest};
use claw::memory::search::score;
use ranking_support::{NOW, Query, load_queries, rank_of, search};
use std::path::Path;
use std::time::Instant;

const QUERIES: &str = "fixtures/garden-queries/queries.tsv";

/// (found in top 6, total) per kind, printing misses.
fn measure(ws: &Path, e: Option<&dyn Embedder>, label: &str) -> Vec<(String, usize, usize, usize)> {
    let store = ranking_support::open_store(ws);
    let qs: Vec<Query> = load_queries(QUERIES);
    let mut out: Vec<(String, usize, usize, usize)> = Vec::new();
    for kind in ["dated", "undated"] {
        let (mut top6, mut any, mut n) = (0, 0, 0);
        for q in qs.iter().filter(|q| q.kind == kind) {
            n += 1;
            let r = search(&store, e, &q.text, Mode::Hybrid);
            let expected = q
                .expected
                .as_deref()
                .expect("garden queries name their note");
            match rank_of(&r, expected) {
                Some(_) => top6 += 1,
                None => eprintln!(
                    "  {label} miss ({kind}): {:?} -> {expected}: {} hits {:?}",
                    q.text,
                    r.results.len(),
                    r.results
                        .iter()
                        .map(|h| format!("{} {:.3}", h.path, h.score))
                        .collect::<Vec<_>>()
                ),
            }
            any += usize::from(!r.results.is_empty());
        }
        out.push((kind.to_string(), top6, n, any));
    }
    out
}

/// Decay variants compared in the sweep: (label, max penalty α; `None` = the old
/// unbounded exponential decay applied before the minimum score).
const SWEEP: &[(&str, Option<f64>)] = &[
    ("old: exponential decay, then min-score", None),
    ("no decay (α = 0)", Some(0.0)),
    ("α = 0.25", Some(0.25)),
    ("α = 0.5 (default)", Some(0.5)),
    ("α = 0.75", Some(0.75)),
    ("α = 1 (threshold before decay, unbounded)", Some(1.0)),
];

/// One [`SWEEP`] row: (label, dated found, dated total, undated found, undated total).
type SweepRow = (&'static str, usize, usize, usize, usize);

/// For each [`SWEEP`] variant, how many expected notes of each kind land in the
/// top 6 when the top-100 candidates (no minimum score, no MMR) are re-scored
/// with that decay and filtered with the default minimum score (in score order).
fn sweep(ws: &Path, e: Option<&dyn Embedder>) -> Vec<SweepRow> {
    let store = ranking_support::open_store(ws);
    let p = MemorySettings::default();
    let mut rows: Vec<SweepRow> = SWEEP.iter().map(|(l, _)| (*l, 0, 0, 0, 0)).collect();
    for q in &load_queries(QUERIES) {
        let req = SearchRequest {
            limit: 100,
            min_score: Some(f64::NEG_INFINITY),
            mmr: false,
            explain: true,
            ..SearchRequest::new(q.text.clone())
        };
        let r = engine::search(&store, e, &p, &req, NOW).expect("search");
        let dated = q.kind == "dated";
        for (row, (_, alpha)) in rows.iter_mut().zip(SWEEP) {
            let mut scored: Vec<(f64, &str)> = r
                .results
                .iter()
                .filter_map(|h| {
                    let x = h.explain.as_ref().expect("explain");
                    let (s, kept) = match alpha {
                        None => {
                            let s = x.relevance
                                * score::decay_factor(x.note_time, NOW, p.half_life_days);
                            (s, s >= p.min_score || x.pinned)
                        }
                        Some(a) => (
                            x.relevance
                                * score::recency_factor(x.note_time, NOW, p.half_life_days, *a),
                            x.relevance >= p.min_score || x.pinned,
                        ),
                    };
                    kept.then_some((s, h.path.as_str()))
                })
                .collect();
            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
            let hit = scored
                .iter()
                .take(6)
                .any(|(_, path)| Some(*path) == q.expected.as_deref());
            if dated {
                row.1 += usize::from(hit);
                row.2 += 1;
            } else {
                row.3 += usize::from(hit);
                row.4 += 1;
            }
        }
    }
    rows
}

fn print_sweep(label: &str, rows: &[SweepRow]) {
    println!(
        "| garden, {label}: decay variant (top-100 candidates, score order) | dated in top 6 | undated in top 6 |"
    );
    println!("|---|---:|---:|");
    for (l, d, nd, u, nu) in rows {
        println!("| {l} | {d}/{nd} | {u}/{nu} |");
    }
}

fn print_table(label: &str, rows: &[(String, usize, usize, usize)]) {
    println!(
        "| garden, {label} (default settings) | expected note in top 6 | queries with any hit |"
    );
    println!("|---|---:|---:|");
    for (kind, top6, n, any) in rows {
        println!("| {kind} notes | {top6}/{n} | {any}/{n} |");
    }
}

fn indexed_garden(with_model: bool) -> (tempfile::TempDir, tempfile::TempDir) {
    let garden = ranking_support::extract_garden();
    let ws = tempfile::tempdir().unwrap();
    let claw = |ws: &Path| {
        if with_model {
            support::claw(ws)
        } else {
            support::claw_keyword_only(ws)
        }
    };
    ranking_support::ok(
        claw(ws.path())
            .args(["memory", "add"])
            .arg(garden.path())
            .args(["--name", "garden"]),
    );
    let t = Instant::now();
    ranking_support::ok(claw(ws.path()).args(["memory", "index"]));
    eprintln!(
        "indexed the garden ({}) in {:.1} s",
        if with_model { "model" } else { "keyword-only" },
        t.elapsed().as_secs_f64()
    );
    (garden, ws)
}

#[test]
fn garden_keyword_only_top6() {
    let (_garden, ws) = indexed_garden(false);
    let rows = measure(ws.path(), None, "keyword-only");
    print_table("keyword-only index", &rows);
    print_sweep("keyword-only", &sweep(ws.path(), None));
    for (kind, top6, n, _) in &rows {
        assert!(*n >= 20, "{kind}: {n} queries");
        assert_eq!(top6, n, "{kind}: {top6}/{n} in the top 6");
    }
}

#[test]
fn garden_hybrid_top6() {
    let (_garden, ws) = indexed_garden(true);
    let e = search_support::embedder();
    let rows = measure(ws.path(), Some(&e), "hybrid");
    print_table("hybrid, all-MiniLM-L6-v2", &rows);
    print_sweep("hybrid", &sweep(ws.path(), Some(&e)));
    for (kind, top6, n, _) in &rows {
        assert!(*n >= 20, "{kind}: {n} queries");
        assert_eq!(top6, n, "{kind}: {top6}/{n} in the top 6");
    }
}
