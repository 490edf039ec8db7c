//! Paraphrase recall and false positives on `fixtures/paraphrase/`, real model:
//! 50 notes, (query, note) pairs that share no content word, and queries that
//! should find nothing. The workspace is indexed by the real `claw` binary; each
//! query is searched with default settings (hybrid, limit 6, the configured minimum
//! score). Prints recall@3 of the paraphrases and the false-positive rate (share of
//! should-find-nothing queries that return any hit), then asserts them.

use crate::ranking_support;
use crate::search_support;
use claw_testkit as support;

use claw_memory::config::MemorySettings;
use claw_memory::embed::Embedder;
use claw_memory::search::engine::{self, Mode, SearchRequest};
use claw_memory::search::score;
use ranking_support::{NOW, Query, load_queries, rank_of, search};
use std::collections::BTreeSet;

const QUERIES: &str = "fixtures/paraphrase/queries.tsv";

/// Function words a paraphrase may share with its note (everything else must differ).
const STOP: &str = "a an the and or but if of to in on at by for with from as is are was were \
be been being do does did doing have has had i me my we our us you your he she her him his it \
its they them their this that these those what which who whom whose when where why how not no \
can could should would will shall may might must than then so too very just about into over \
under again each all any some such only own same other more most few both there here out up \
down off once per via";

fn content_words(text: &str) -> BTreeSet<String> {
    let stop: BTreeSet<&str> = STOP.split_whitespace().collect();
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !stop.contains(w))
        .map(str::to_string)
        .collect()
}

/// Same word, or one a prefix of the other (≥ 4 letters), or a shared 5-letter
/// prefix: `invoice`/`invoicing`, `flat`/`flats` count as shared.
fn related(a: &str, b: &str) -> bool {
    let (ca, cb) = (a.chars().count(), b.chars().count());
    let p5 = |s: &str| s.chars().take(5).collect::<String>();
    a == b
        || (ca >= 4 && cb >= 4 && (a.starts_with(b) || b.starts_with(a)))
        || (ca >= 5 && cb >= 5 && p5(a) == p5(b))
}

fn note_text(path: &str) -> String {
    std::fs::read_to_string(ranking_support::paraphrase_notes().join(path)).unwrap()
}

/// The fixture is what it claims: ≥ 20 pairs sharing no content word with their
/// note, ≥ 20 should-find-nothing queries sharing none with any note, ~50 notes.
#[test]
fn fixture_pairs_share_no_content_word() {
    let qs = load_queries(QUERIES);
    let notes: Vec<String> = walkdir::WalkDir::new(ranking_support::paraphrase_notes())
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(ranking_support::paraphrase_notes())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert!((40..=60).contains(&notes.len()), "{} notes", notes.len());
    let para: Vec<&Query> = qs.iter().filter(|q| q.kind == "paraphrase").collect();
    let none: Vec<&Query> = qs.iter().filter(|q| q.kind == "none").collect();
    assert!(para.len() >= 20 && none.len() >= 20);
    assert_eq!(para.len() + none.len(), qs.len(), "unknown kinds");
    let mut clashes = Vec::new();
    for q in &qs {
        let targets: Vec<String> = match &q.expected {
            Some(p) => vec![p.clone()],
            None => notes.clone(),
        };
        for t in targets {
            let nw = content_words(&note_text(&t));
            for a in content_words(&q.text) {
                if let Some(b) = nw.iter().find(|b| related(&a, b)) {
                    clashes.push(format!("{:?} ~ {t}: {a}/{b}", q.text));
                }
            }
        }
    }
    assert!(clashes.is_empty(), "{clashes:#?}");
    // The checker itself catches a shared stem.
    assert!(related("invoice", "invoicing") && related("flat", "flats"));
    assert!(!related("tooth", "molar"));
}

/// The figures: paraphrase recall@3 and the false-positive rate, default settings.
#[test]
fn paraphrase_recall_and_false_positives() {
    let ws = tempfile::tempdir().unwrap();
    ranking_support::copy_tree(&ranking_support::paraphrase_notes(), ws.path());
    ranking_support::ok(support::claw(ws.path()).args(["memory", "index"]));
    let store = ranking_support::open_store(ws.path());
    let e = search_support::embedder();
    let e: Option<&dyn Embedder> = Some(&e);

    let qs = load_queries(QUERIES);
    let (mut found3, mut found6, mut para) = (0, 0, 0);
    let (mut fp, mut none, mut fp_vector) = (0, 0, 0);
    let mut misses = Vec::new();
    for q in &qs {
        let r = search(&store, e, &q.text, Mode::Hybrid);
        assert_eq!(r.fallback, None, "{}", q.text);
        match &q.expected {
            Some(p) => {
                para += 1;
                let rank = rank_of(&r, p);
                found3 += usize::from(rank.is_some_and(|k| k <= 3));
                found6 += usize::from(rank.is_some());
                if rank.is_none_or(|k| k > 3) {
                    let got: Vec<String> = r
                        .results
                        .iter()
                        .map(|h| format!("{} {:.3}", h.path, h.score))
                        .collect();
                    misses.push(format!("  miss: {:?} -> {p}: {got:?}", q.text));
                }
            }
            None => {
                none += 1;
                let v = search(&store, e, &q.text, Mode::Vector);
                fp_vector += usize::from(!v.results.is_empty());
                if !r.results.is_empty() {
                    fp += 1;
                    let h = &r.results[0];
                    misses.push(format!(
                        "  false positive: {:?} -> {} {:.3} ({} hits)",
                        q.text,
                        h.path,
                        h.score,
                        r.results.len()
                    ));
                }
            }
        }
    }
    for m in &misses {
        eprintln!("{m}");
    }
    let recall3 = found3 as f64 / para as f64;
    let fp_rate = fp as f64 / none as f64;
    println!("| paraphrase fixture (default settings, hybrid) | value |");
    println!("|---|---:|");
    println!("| paraphrase recall@3 | {found3}/{para} = {recall3:.3} |");
    println!("| paraphrase found in top 6 | {found6}/{para} |");
    println!(
        "| should-find-nothing queries returning hits (false-positive rate) | {fp}/{none} = {fp_rate:.3} |"
    );
    println!(
        "| the same with `--mode vector` | {fp_vector}/{none} = {:.3} |",
        fp_vector as f64 / none as f64
    );
    print_clear_z_sweep(&store, e, &qs);
    print_query_clear_z_sweep(&store, e, &qs);
    assert!(recall3 >= 0.8, "paraphrase recall@3 {recall3:.3}");
    assert!(fp_rate <= 0.1, "false-positive rate {fp_rate:.3}");
}

/// The sweep behind `score::CLEAR_Z`: every query's hits (no minimum score, no MMR)
/// re-scored with the vector calibrated at another clearing point (`None` = the raw
/// cosine, as before calibration), filtered with the default minimum score and
/// ordered by score: paraphrase recall@3 and should-find-nothing queries with hits.
fn print_clear_z_sweep(store: &claw_memory::store::Store, e: Option<&dyn Embedder>, qs: &[Query]) {
    let p = MemorySettings::default();
    let bg = score::background_for(e.expect("model").model_id());
    let variants: [Option<f64>; 8] = [
        None,
        Some(1.75),
        Some(2.0),
        Some(2.25),
        Some(2.5),
        Some(2.75),
        Some(3.0),
        Some(3.5),
    ];
    let mut rows = vec![(0usize, 0usize, 0usize, 0usize); variants.len()];
    for q in qs {
        let r = explained_hits(store, e, &p, q);
        for (row, z) in rows.iter_mut().zip(variants) {
            let mut kept: Vec<(f64, &str)> = r
                .results
                .iter()
                .filter_map(|h| {
                    let x = h.explain.as_ref().expect("explain");
                    let cos = x.vector.unwrap_or(0.0);
                    let v = match z {
                        None => score::vector_score(cos),
                        Some(z) => score::calibrated_vector_score_at(cos, &bg, z),
                    };
                    let rel = x.weights.0 * v + x.weights.1 * x.keyword.unwrap_or(0.0);
                    (rel >= p.min_score || x.pinned).then_some((rel * x.decay, h.path.as_str()))
                })
                .collect();
            kept.sort_by(|a, b| b.0.total_cmp(&a.0));
            tally(
                row,
                q,
                |path| kept.iter().take(3).any(|(_, p)| *p == path),
                !kept.is_empty(),
            );
        }
    }
    print_sweep(
        "vector score (hybrid weights 0.7/0.3, min-score 0.35, score order)",
        &variants,
        rows,
        "raw cosine (no calibration)",
        score::CLEAR_Z,
        |z| format!("calibrated, clears at z = {z}"),
    );
}

/// The sweep behind `score::QUERY_CLEAR_MARGIN`: every query's hits (no minimum score,
/// so no "nothing relevant" gate, no MMR) filtered with the default minimum score,
/// then emptied when no hit has keyword evidence and the best hit's height above
/// the query's own background is under the clearing point: paraphrase recall@3 and
/// should-find-nothing queries with hits. Also each should-find-nothing query's best
/// height, and the lowest best height of a paraphrase found in the top 3.
fn print_query_clear_z_sweep(
    store: &claw_memory::store::Store,
    e: Option<&dyn Embedder>,
    qs: &[Query],
) {
    let p = MemorySettings::default();
    use claw_memory::search::storage::SearchStorage;
    let chunks = store.background_sample(0).expect("index size").chunks;
    let bar = |margin: f64| score::query_clear_z(chunks) - score::QUERY_CLEAR_MARGIN + margin;
    println!(
        "(gate bar over {chunks} chunks: √(2 ln n) + margin = {:.2} + margin)",
        bar(0.0)
    );
    let variants = [
        None,
        Some(0.0),
        Some(0.25),
        Some(0.5),
        Some(0.75),
        Some(1.0),
        Some(1.5),
    ];
    let mut rows = vec![(0usize, 0usize, 0usize, 0usize); variants.len()];
    for q in qs {
        let r = explained_hits(store, e, &p, q);
        let xs: Vec<_> = r
            .results
            .iter()
            .map(|h| (h, h.explain.as_ref().expect("explain")))
            .collect();
        let keyword = xs
            .iter()
            .any(|(_, x)| x.pinned || x.keyword.is_some_and(|k| k > 0.0));
        let best_z = xs
            .iter()
            .filter_map(|(_, x)| x.vector_query_z)
            .fold(f64::NEG_INFINITY, f64::max);
        let mut kept: Vec<(f64, &str)> = xs
            .iter()
            .filter(|(_, x)| x.relevance >= p.min_score || x.pinned)
            .map(|(h, x)| (x.score, h.path.as_str()))
            .collect();
        kept.sort_by(|a, b| b.0.total_cmp(&a.0));
        let top3 = |path: &str| kept.iter().take(3).any(|(_, p)| *p == path);
        match &q.expected {
            Some(path) if top3(path) => eprintln!(
                "  paraphrase found, best query z {best_z:.2}, keyword {keyword}: {:?}",
                q.text
            ),
            None if !kept.is_empty() => eprintln!(
                "  should-find-nothing with hits, best query z {best_z:.2}, keyword {keyword}: {:?}",
                q.text
            ),
            _ => {}
        }
        for (row, z) in rows.iter_mut().zip(variants) {
            let gated = z.is_some_and(|m| !keyword && best_z < bar(m));
            tally(
                row,
                q,
                |path| !gated && top3(path),
                !gated && !kept.is_empty(),
            );
        }
    }
    print_sweep(
        "nothing-relevant gate (best hit above the query's own background)",
        &variants,
        rows,
        "no gate",
        score::QUERY_CLEAR_MARGIN,
        |m| format!("margin {m}"),
    );
}

/// Every hit of `q` (up to 100) with its explanation: no minimum score, so no
/// "nothing relevant" gate, and no MMR.
fn explained_hits(
    store: &claw_memory::store::Store,
    e: Option<&dyn Embedder>,
    p: &MemorySettings,
    q: &Query,
) -> engine::SearchResponse {
    let req = SearchRequest {
        limit: 100,
        min_score: Some(f64::NEG_INFINITY),
        mmr: false,
        explain: true,
        ..SearchRequest::new(q.text.clone())
    };
    engine::search(store, e, p, &req, NOW).expect("search")
}

/// A sweep row: (paraphrases found in the top 3, paraphrases,
/// should-find-nothing queries with hits, should-find-nothing queries).
type SweepRow = (usize, usize, usize, usize);

/// Counts query `q` into `row`: `found(path)` for a paraphrase of `path`,
/// `hits` for a should-find-nothing query.
fn tally(row: &mut SweepRow, q: &Query, found: impl FnOnce(&str) -> bool, hits: bool) {
    match &q.expected {
        Some(path) => {
            row.0 += usize::from(found(path));
            row.1 += 1;
        }
        None => {
            row.2 += usize::from(hits);
            row.3 += 1;
        }
    }
}

/// A sweep's table: one line a variant, labelled `none` (no variant) or by
/// `label`, "(default)" added to the `default` one.
fn print_sweep(
    header: &str,
    variants: &[Option<f64>],
    rows: Vec<SweepRow>,
    none: &str,
    default: f64,
    label: impl Fn(f64) -> String,
) {
    println!("| {header} | paraphrase recall@3 | should-find-nothing with hits |");
    println!("|---|---:|---:|");
    for (z, (f3, n, fp, nn)) in variants.iter().zip(rows) {
        let label = match *z {
            None => none.to_string(),
            Some(z) if (z - default).abs() < 1e-9 => format!("{} (default)", label(z)),
            Some(z) => label(z),
        };
        println!("| {label} | {f3}/{n} | {fp}/{nn} |");
    }
}

/// "Nothing relevant" is an answer (issue 27): made-up words find nothing, through
/// the engine and through the CLI (exit 1), while the same searches with the gate
/// off (minimum score 0) do return hits (so the gate, not an empty index, empties
/// them) and a real paraphrase still finds its note.
#[test]
fn made_up_words_find_nothing() {
    let ws = tempfile::tempdir().unwrap();
    ranking_support::copy_tree(&ranking_support::paraphrase_notes(), ws.path());
    ranking_support::ok(support::claw(ws.path()).args(["memory", "index"]));
    let store = ranking_support::open_store(ws.path());
    let e = search_support::embedder();
    let e: Option<&dyn Embedder> = Some(&e);
    let text = std::fs::read_to_string(
        ranking_support::queries::repo().join("fixtures/garden-queries/random-words.txt"),
    )
    .unwrap();
    let mut queries: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    queries.push("zzqqxxnotaword");
    assert_eq!(queries.len(), 51);
    let (mut with_hits, mut ungated_hits) = (0, 0);
    for q in &queries {
        let r = search(&store, e, q, Mode::Hybrid);
        assert_eq!(r.fallback, None);
        with_hits += usize::from(!r.results.is_empty());
        let all = SearchRequest {
            min_score: Some(0.0),
            ..SearchRequest::new(*q)
        };
        let all = engine::search(&store, e, &MemorySettings::default(), &all, NOW).unwrap();
        ungated_hits += usize::from(!all.results.is_empty());
    }
    assert_eq!(with_hits, 0, "made-up queries with hits");
    assert_eq!(
        ungated_hits,
        queries.len(),
        "positive control: hits without the gate"
    );
    let r = search(&store, e, "tips against insomnia", Mode::Hybrid);
    assert!(
        rank_of(&r, "memory/falling-asleep.md").is_some_and(|k| k <= 3),
        "{r:?}"
    );
    // The CLI: exit 1, "nothing found".
    let out = support::claw(ws.path())
        .args(["memory", "search", "zzqqxxnotaword"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = support::claw(ws.path())
        .args(["memory", "search", "tips against insomnia"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
