//! The notes-garden measurement: the real 7,772-note digital garden
//! (`../shared/data/notes-garden.tar.gz`) indexed by the real indexer
//! (`indexer::run`, what `claw memory index` runs), and the committed query set
//! `fixtures/garden-queries/queries.tsv` (rare word pairs from random notes: years-old
//! `YYYY-MM-DD.md` journals and undated notes). The figure is how many expected
//! notes come back in the top 6 with default settings; [`sweep`] re-scores wide
//! candidate lists with other decay functions. Self-contained (uses only
//! `super::queries`), so `examples/ranking_garden.rs` includes it for the release
//! hybrid run.
#![allow(dead_code)]

use super::queries::{NOW, load_queries, open_store, rank_of, search, search_with};
use claw_memory::config::{EmbedProvider, MemoryConfig as Settings, MemorySettings};
use claw_memory::embed::Embedder;
use claw_memory::indexer::{self, IndexOptions};
use claw_memory::lock::WriterLock;
use claw_memory::search::engine::{self, Mode, SearchRequest};
use claw_memory::search::score;
use claw_memory::store::Store;
use std::path::Path;
use std::time::{Duration, Instant};

pub const QUERIES: &str = "fixtures/garden-queries/queries.tsv";

/// Extract `../shared/data/notes-garden.tar.gz` into a new temp dir (with `tar`).
pub fn extract_garden() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    claw_testkit::extract_shared("notes-garden.tar.gz", dir.path());
    dir
}

/// A new workspace with `garden` registered as source `garden`, indexed with `e`
/// (keyword-only when `None`). Returns the workspace and the indexing time.
pub fn index_garden(garden: &Path, e: Option<&dyn Embedder>) -> (tempfile::TempDir, Duration) {
    let ws = tempfile::tempdir().unwrap();
    let took = index_garden_at(ws.path(), garden, e);
    (ws, took)
}

/// [`index_garden`] into the workspace `ws` (made if missing).
pub fn index_garden_at(ws: &Path, garden: &Path, e: Option<&dyn Embedder>) -> Duration {
    std::fs::create_dir_all(ws).unwrap();
    let mut settings = Settings::for_workspace(ws, EmbedProvider::None);
    // Where the binary would keep it, so `open_store` finds it.
    settings.state_dir = claw_testkit::state_dir(ws);
    std::fs::create_dir_all(settings.state_dir()).unwrap();
    let mut store = Store::open(&settings.db_path()).unwrap();
    store.add_source("garden", garden).unwrap();
    let lock = WriterLock::acquire(&settings.state_dir(), "ranking", Duration::from_secs(5))
        .expect("writer lock");
    let t = Instant::now();
    let r = indexer::run(
        &mut store,
        &settings,
        e,
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .expect("index the garden");
    assert!(r.files_scanned >= 7000, "{} files", r.files_scanned);
    t.elapsed()
}

/// Per kind (`dated`, `undated`): (kind, expected note in the top 6, queries,
/// queries with any hit). Misses go to stderr.
pub type Row = (String, usize, usize, usize);

pub fn measure(ws: &Path, e: Option<&dyn Embedder>, label: &str) -> Vec<Row> {
    let store = open_store(ws);
    let qs = load_queries(QUERIES);
    let mut out = Vec::new();
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

pub fn print_table(label: &str, rows: &[Row]) {
    println!(
        "| garden, {label} (default settings) | expected note in top 6 | queries with any hit |"
    );
    println!("|---|---:|---:|");
    for (kind, top6, n, any) in rows {
        println!("| {kind} notes | {top6}/{n} | {any}/{n} |");
    }
}

/// Decay variants compared by [`sweep`]: (label, max penalty α; `None` = the old
/// unbounded exponential decay applied before the minimum score).
pub const SWEEP: &[(&str, Option<f64>)] = &[
    ("old: exponential decay, then min-score", None),
    ("no decay (α = 0)", Some(0.0)),
    ("α = 0.1", Some(0.1)),
    ("α = 0.2", Some(0.2)),
    ("α = 0.25 (default)", Some(0.25)),
    ("α = 0.3", Some(0.3)),
    ("α = 0.4", Some(0.4)),
    ("α = 0.5", Some(0.5)),
    ("α = 1 (threshold before decay, unbounded)", Some(1.0)),
];

/// One [`SWEEP`] row: (label, dated found, dated total, undated found, undated total).
pub type SweepRow = (&'static str, usize, usize, usize, usize);

/// For each [`SWEEP`] variant, how many expected notes of each kind land in the
/// top 6 when the engine's first 1,000 hits (no minimum score, no MMR) are
/// re-scored with that decay and filtered with the default minimum score (in score
/// order; the relevance, calibration included, is the current one in every row).
pub fn sweep(ws: &Path, e: Option<&dyn Embedder>) -> Vec<SweepRow> {
    let store = open_store(ws);
    let p = MemorySettings::default();
    let mut rows: Vec<SweepRow> = SWEEP.iter().map(|(l, _)| (*l, 0, 0, 0, 0)).collect();
    for q in &load_queries(QUERIES) {
        let req = SearchRequest {
            limit: engine::MAX_LIMIT,
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
                    // `blended` is the fused score results are ordered by;
                    // `relevance` what the minimum score tests.
                    let (s, kept) = match alpha {
                        None => {
                            let s = x.relevance
                                * score::decay_factor(x.note_time, NOW, p.half_life_days);
                            (s, s >= p.min_score || x.pinned)
                        }
                        Some(a) => (
                            x.blended
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

pub fn print_sweep(label: &str, rows: &[SweepRow]) {
    println!(
        "| garden, {label}: decay variant (first 1,000 hits re-scored, score order) | dated in top 6 | undated in top 6 |"
    );
    println!("|---|---:|---:|");
    for (l, d, nd, u, nu) in rows {
        println!("| {l} | {d}/{nd} | {u}/{nu} |");
    }
}

/// Fusion variants compared by [`fusion_sweep`]: (label, fusion, adaptive gain).
pub const FUSIONS: &[(&str, score::Fusion, f64)] = &[
    ("linear 0.7/0.3", score::Fusion::Linear, 0.0),
    ("rrf (k = 60)", score::Fusion::Rrf, 0.0),
    ("adaptive, gain 1", score::Fusion::Adaptive, 1.0),
    ("adaptive, gain 2", score::Fusion::Adaptive, 2.0),
    ("adaptive, gain 3", score::Fusion::Adaptive, 3.0),
    ("adaptive, gain 4", score::Fusion::Adaptive, 4.0),
];

/// One [`fusion_sweep`] row: (label, dated found with default decay, undated
/// found with default decay, dated found without decay, undated found without
/// decay, queries per kind).
pub type FusionRow = (&'static str, usize, usize, usize, usize, usize);

/// For each [`FUSIONS`] variant, the expected notes in the top 6 through the
/// engine itself (default settings but the fusion; decay default and off).
pub fn fusion_sweep(ws: &Path, e: Option<&dyn Embedder>) -> Vec<FusionRow> {
    let store = open_store(ws);
    let qs = load_queries(QUERIES);
    let n = qs.iter().filter(|q| q.kind == "dated").count();
    FUSIONS
        .iter()
        .map(|(label, fusion, gain)| {
            let mut row = (*label, 0, 0, 0, 0, n);
            for (decay_on, half_life) in [
                (true, MemorySettings::default().half_life_days),
                (false, f64::INFINITY),
            ] {
                let p = MemorySettings {
                    fusion: *fusion,
                    fusion_gain: *gain,
                    half_life_days: half_life,
                    ..MemorySettings::default()
                };
                for q in &qs {
                    let r = search_with(&store, e, &q.text, Mode::Hybrid, &p);
                    let hit = rank_of(&r, q.expected.as_deref().unwrap_or("-")).is_some();
                    let slot = match (decay_on, q.kind == "dated") {
                        (true, true) => &mut row.1,
                        (true, false) => &mut row.2,
                        (false, true) => &mut row.3,
                        (false, false) => &mut row.4,
                    };
                    *slot += usize::from(hit);
                }
            }
            row
        })
        .collect()
}

pub fn print_fusion_sweep(label: &str, rows: &[FusionRow]) {
    println!(
        "| garden, {label}: fusion | dated, default decay | undated, default decay | dated, decay off | undated, decay off |"
    );
    println!("|---|---:|---:|---:|---:|");
    for (l, d, u, d0, u0, n) in rows {
        println!("| {l} | {d}/{n} | {u}/{n} | {d0}/{n} | {u0}/{n} |");
    }
}

/// The random-word queries (`fixtures/garden-queries/random-words.txt`, made-up
/// words no note is about; `random_words.py` regenerates them).
pub const RANDOM_WORDS: &str = "fixtures/garden-queries/random-words.txt";

/// The random-word queries against the garden, default settings: (queries, queries
/// with any hit, each query's best height above its own background, the
/// `vector_query_z` of its best hit with no minimum score; `None` without vectors).
/// Queries with hits go to stderr.
pub fn random_words(ws: &Path, e: Option<&dyn Embedder>) -> (usize, usize, Vec<Option<f64>>) {
    let store = open_store(ws);
    let path = super::queries::repo().join(RANDOM_WORDS);
    let text = std::fs::read_to_string(&path).expect("random-word queries");
    let (mut n, mut with_hits, mut best) = (0, 0, Vec::new());
    for q in text.lines().filter(|l| !l.trim().is_empty()) {
        n += 1;
        let r = search(&store, e, q, Mode::Hybrid);
        if !r.results.is_empty() {
            with_hits += 1;
            eprintln!(
                "  random words with hits: {q:?}: {:?}",
                r.results
                    .iter()
                    .map(|h| format!("{} {:.3}", h.path, h.score))
                    .collect::<Vec<_>>()
            );
        }
        let req = SearchRequest {
            min_score: Some(f64::NEG_INFINITY),
            explain: true,
            ..SearchRequest::new(q)
        };
        let all = engine::search(&store, e, &MemorySettings::default(), &req, NOW).expect("search");
        best.push(
            all.results
                .iter()
                .filter_map(|h| h.explain.as_ref().and_then(|x| x.vector_query_z))
                .reduce(f64::max),
        );
    }
    (n, with_hits, best)
}

/// Prints [`random_words`]'s figures.
pub fn print_random_words(label: &str, (n, with_hits, best): &(usize, usize, Vec<Option<f64>>)) {
    let zs: Vec<f64> = best.iter().flatten().copied().collect();
    let max = zs.iter().copied().reduce(f64::max);
    println!(
        "| garden, {label}: random-word queries | returning hits | highest best-hit height above the query's background |"
    );
    println!("|---|---:|---:|");
    println!(
        "| `{RANDOM_WORDS}` | {with_hits}/{n} | {} |",
        max.map_or("—".to_string(), |m| format!("{m:.2}"))
    );
}

/// Issue 27 item 1 on the garden: the queries' notes against a transcript
/// history that repeats them. Per query: (note first, note in the top 6)
/// before the history, then after 2 earlier sessions per query are indexed
/// (with `e`) into the workspace's `sessions/`: one where the user asked about
/// the note by its title, one where the user asked the query itself, each
/// answered by the assistant with the note's own text (its first 600
/// characters) — the echo, at its strongest. Also the transcript hits in the
/// top 6 and the queries whose first hit is a transcript.
pub struct EchoRow {
    pub queries: usize,
    pub first_before: usize,
    pub top6_before: usize,
    pub first_after: usize,
    pub top6_after: usize,
    pub transcript_first: usize,
    pub transcript_hits: usize,
}

pub fn with_transcripts(ws: &Path, garden: &Path, e: Option<&dyn Embedder>) -> EchoRow {
    let qs = load_queries(QUERIES);
    let first_top6 = |store: &Store, when: &str| -> (usize, usize) {
        let (mut first, mut top6) = (0, 0);
        for q in &qs {
            let r = search(store, e, &q.text, Mode::Hybrid);
            let expected = q.expected.as_deref().unwrap();
            let rank = rank_of(&r, expected);
            first += usize::from(rank == Some(1));
            top6 += usize::from(rank.is_some());
            // Misses go to stderr, with the hits that led.
            if rank != Some(1) {
                eprintln!(
                    "{when} the transcripts, {:?} → {expected} at {rank:?}:",
                    q.text
                );
                for h in &r.results {
                    eprintln!("  {:.4} {}:{}", h.score, h.source, h.citation);
                }
            }
        }
        (first, top6)
    };
    // A workspace kept from an earlier run (`CLAW_GARDEN_KEEP`) drops its
    // transcripts first.
    if ws.join("sessions").exists() {
        std::fs::remove_dir_all(ws.join("sessions")).unwrap();
        index_sessions(ws, e);
    }
    let (first_before, top6_before) = first_top6(&open_store(ws), "before");

    let sessions = ws.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let turn = |role: &str, text: &str| {
        serde_json::json!({"role": role, "content": text}).to_string() + "\n"
    };
    for (i, q) in qs.iter().enumerate() {
        let text = std::fs::read_to_string(garden.join(q.expected.as_deref().unwrap()))
            .unwrap_or_default();
        let title = text
            .lines()
            .find_map(|l| l.strip_prefix("# "))
            .map(str::to_string)
            .unwrap_or_else(|| q.expected.clone().unwrap_or_default());
        let answer: String = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(" ")
            .chars()
            .take(600)
            .collect();
        std::fs::write(
            sessions.join(format!("title_{i}.jsonl")),
            turn("user", &format!("what did I write about {title}?")) + &turn("assistant", &answer),
        )
        .unwrap();
        std::fs::write(
            sessions.join(format!("verbatim_{i}.jsonl")),
            turn("user", &q.text) + &turn("assistant", &answer),
        )
        .unwrap();
    }
    index_sessions(ws, e);

    let store = open_store(ws);
    let (first_after, top6_after) = first_top6(&store, "after");
    let (mut transcript_first, mut transcript_hits) = (0, 0);
    for q in &qs {
        let r = search(&store, e, &q.text, Mode::Hybrid);
        transcript_first += usize::from(r.results.first().is_some_and(|h| h.source == "sessions"));
        transcript_hits += r.results.iter().filter(|h| h.source == "sessions").count();
    }
    EchoRow {
        queries: qs.len(),
        first_before,
        top6_before,
        first_after,
        top6_after,
        transcript_first,
        transcript_hits,
    }
}

/// An index pass over `ws` (its sessions folder as it now is).
fn index_sessions(ws: &Path, e: Option<&dyn Embedder>) {
    let mut settings = Settings::for_workspace(ws, EmbedProvider::None);
    settings.state_dir = claw_testkit::state_dir(ws);
    let mut store = Store::open(&settings.db_path()).unwrap();
    let lock = WriterLock::acquire(&settings.state_dir(), "ranking", Duration::from_secs(5))
        .expect("writer lock");
    indexer::run(
        &mut store,
        &settings,
        e,
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .expect("index the sessions");
}

pub fn print_with_transcripts(label: &str, r: &EchoRow) {
    let n = r.queries;
    println!(
        "| garden, {label}: notes against a transcript history that repeats them | before the history | after |"
    );
    println!("|---|---:|---:|");
    println!(
        "| the query's note first | {}/{n} | {}/{n} |",
        r.first_before, r.first_after
    );
    println!(
        "| the query's note in the top 6 | {}/{n} | {}/{n} |",
        r.top6_before, r.top6_after
    );
    println!(
        "| a transcript first | 0/{n} | {}/{n} |",
        r.transcript_first
    );
    println!(
        "| transcript hits in the top 6 (of up to 6 × {n}) | 0 | {} |",
        r.transcript_hits
    );
}
