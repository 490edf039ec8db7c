//! Paraphrase recall and false positives on `fixtures/paraphrase/`, real model:
//! 50 notes, (query, note) pairs that share no content word, and queries that
//! should find nothing. The workspace is indexed by the real `claw` binary; each
//! query is searched with default settings (hybrid, limit 6, the configured minimum
//! score). Prints recall@3 of the paraphrases and the false-positive rate (share of
//! should-find-nothing queries that return any hit), then asserts them: the
//! floors with fp32, and the int8 graph (the default) within one query of fp32.

use crate::ranking_support;
use crate::search_support;
use claw_testkit as support;

use claw_memory::config::{MemorySettings, Precision};
use claw_memory::embed::Embedder;
use claw_memory::search::engine::{self, Mode, SearchRequest};
use claw_memory::search::score;
use claw_memory::store::Store;
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

/// The paraphrase notes in a temporary workspace indexed by the `claw` binary,
/// and its index.
fn indexed_notes() -> (tempfile::TempDir, Store) {
    let ws = tempfile::tempdir().unwrap();
    ranking_support::copy_tree(&ranking_support::paraphrase_notes(), ws.path());
    ranking_support::ok(support::claw(ws.path()).args(["memory", "index"]));
    let store = ranking_support::open_store(ws.path());
    (ws, store)
}

/// The figures: paraphrase recall@3 and the false-positive rate, default
/// settings, with each graph of the model.
///
/// The floors (recall@3 ≥ 0.8, false positives ≤ 0.1) were set with fp32 and
/// guard the ranking: they are asserted for fp32. int8, the default since its
/// nDCG@10 on SciFact and XQuAD-zh is within 0.005 of fp32's (issue 30), is held
/// to fp32's own figures here: at most one paraphrase fewer in the top 3 and one
/// more query with hits (BENCHMARKS.md "Issue 30": 29/37 against 30/37).
#[test]
fn paraphrase_recall_and_false_positives() {
    let fp32 = paraphrase_figures(Precision::Fp32);
    assert!(fp32.recall3() >= 0.8, "fp32 recall@3 {:?}", fp32);
    assert!(fp32.fp_rate() <= 0.1, "fp32 false positives {:?}", fp32);
    let int8 = paraphrase_figures(Precision::Int8);
    assert!(
        int8.found3 + 1 >= fp32.found3 && int8.fp <= fp32.fp + 1,
        "int8 {int8:?} against fp32 {fp32:?}"
    );
    assert!(int8.fp_rate() <= 0.1, "int8 false positives {:?}", int8);
}

/// One precision's paraphrase figures.
#[derive(Debug, Clone, Copy)]
struct Figures {
    /// Paraphrases whose note is in the top 3, of `para`.
    found3: usize,
    para: usize,
    /// Should-find-nothing queries returning hits, of `none`.
    fp: usize,
    none: usize,
}

impl Figures {
    fn recall3(&self) -> f64 {
        self.found3 as f64 / self.para as f64
    }
    fn fp_rate(&self) -> f64 {
        self.fp as f64 / self.none as f64
    }
}

/// Index the fixture with the `claw` binary at `precision`, search every query
/// with default settings, print the tables and sweeps.
fn paraphrase_figures(precision: Precision) -> Figures {
    let ws = tempfile::tempdir().unwrap();
    ranking_support::copy_tree(&ranking_support::paraphrase_notes(), ws.path());
    let prec = precision.as_str();
    ranking_support::ok(support::claw_at(ws.path(), prec).args(["memory", "index"]));
    let store = ranking_support::open_store(ws.path());
    let e = search_support::embedder_at(precision);
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
        eprintln!("{prec}{m}");
    }
    let recall3 = found3 as f64 / para as f64;
    let fp_rate = fp as f64 / none as f64;
    println!("| paraphrase fixture ({prec}, default settings, hybrid) | value |");
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
    Figures {
        found3,
        para,
        fp,
        none,
    }
}

/// The sweep behind `score::CLEAR_Z`: every query's hits re-scored with the vector
/// calibrated at another clearing point (`None` = the raw cosine, as before
/// calibration) and filtered with the default minimum score.
fn print_clear_z_sweep(store: &Store, e: Option<&dyn Embedder>, qs: &[Query]) {
    let p = MemorySettings::default();
    let bg = score::background_for(e.expect("model").model_id());
    let variants = [
        None,
        Some(1.75),
        Some(2.0),
        Some(2.25),
        Some(2.5),
        Some(2.75),
        Some(3.0),
        Some(3.5),
    ];
    let sweep = Sweep {
        header: "vector score (hybrid weights 0.7/0.3, min-score 0.35, score order)",
        none: "raw cosine (no calibration)",
        default: score::CLEAR_Z,
        label: |z| format!("calibrated, clears at z = {z}"),
    };
    let kept_at = |r: &engine::SearchResponse, z: Option<f64>| -> Vec<(f64, String)> {
        r.results
            .iter()
            .filter_map(|h| {
                let x = h.explain.as_ref().expect("explain");
                let cos = x.vector.unwrap_or(0.0);
                let v = match z {
                    None => score::vector_score(cos),
                    Some(z) => score::calibrated_vector_score_at(cos, &bg, z),
                };
                let rel = x.weights.0 * v + x.weights.1 * x.keyword.unwrap_or(0.0);
                (rel >= p.min_score || x.pinned).then(|| (rel * x.decay, h.path.clone()))
            })
            .collect()
    };
    sweep.run(store, e, qs, &variants, |_, r| {
        variants.iter().map(|&z| kept_at(r, z)).collect()
    });
}

/// The sweep behind `score::QUERY_CLEAR_MARGIN`: every query's hits filtered with
/// the default minimum score, then emptied when no hit has keyword evidence and
/// the best hit's height above the query's own background is under the clearing
/// point. Also prints each should-find-nothing query's best height, and that of
/// each paraphrase found in the top 3.
fn print_query_clear_z_sweep(store: &Store, e: Option<&dyn Embedder>, qs: &[Query]) {
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
    let sweep = Sweep {
        header: "nothing-relevant gate (best hit above the query's own background)",
        none: "no gate",
        default: score::QUERY_CLEAR_MARGIN,
        label: |m| format!("margin {m}"),
    };
    sweep.run(store, e, qs, &variants, |q, r| {
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
        let kept: Vec<(f64, String)> = xs
            .iter()
            .filter(|(_, x)| x.relevance >= p.min_score || x.pinned)
            .map(|(h, x)| (x.score, h.path.clone()))
            .collect();
        let kept = best_first(kept);
        match &q.expected {
            Some(path) if in_top3(&kept, path) => eprintln!(
                "  paraphrase found, best query z {best_z:.2}, keyword {keyword}: {:?}",
                q.text
            ),
            None if !kept.is_empty() => eprintln!(
                "  should-find-nothing with hits, best query z {best_z:.2}, keyword {keyword}: {:?}",
                q.text
            ),
            _ => {}
        }
        variants
            .iter()
            .map(|z| {
                let gated = z.is_some_and(|m| !keyword && best_z < bar(m));
                if gated { Vec::new() } else { kept.clone() }
            })
            .collect()
    });
}

/// Every hit of `q` (up to 100) with its explanation: no minimum score, so no
/// "nothing relevant" gate, and no MMR.
fn explained_hits(
    store: &Store,
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

/// Hits as (score, path), best first.
fn best_first(mut hits: Vec<(f64, String)>) -> Vec<(f64, String)> {
    hits.sort_by(|a, b| b.0.total_cmp(&a.0));
    hits
}

/// Whether `path` is among the first three of `ranked`.
fn in_top3(ranked: &[(f64, String)], path: &str) -> bool {
    ranked.iter().take(3).any(|(_, p)| p == path)
}

/// A sweep of one setting over the paraphrase queries: each variant's
/// paraphrase recall@3 and should-find-nothing queries with hits, printed as a
/// table under `header` with one line a variant, labelled `none` (no variant)
/// or by `label`, "(default)" added to the `default` one.
struct Sweep<'a> {
    header: &'a str,
    none: &'a str,
    default: f64,
    label: fn(f64) -> String,
}

impl Sweep<'_> {
    /// Runs every query once ([`explained_hits`]); `kept(q, hits)` gives what
    /// each of `variants` returns of them, in that order: (score, path), in any
    /// order, none when the variant answers "nothing relevant".
    fn run(
        &self,
        store: &Store,
        e: Option<&dyn Embedder>,
        qs: &[Query],
        variants: &[Option<f64>],
        mut kept: impl FnMut(&Query, &engine::SearchResponse) -> Vec<Vec<(f64, String)>>,
    ) {
        let p = MemorySettings::default();
        // Per variant: (paraphrases found in the top 3, paraphrases,
        // should-find-nothing queries with hits, should-find-nothing queries).
        let mut rows = vec![(0usize, 0usize, 0usize, 0usize); variants.len()];
        for q in qs {
            let r = explained_hits(store, e, &p, q);
            let lists = kept(q, &r);
            assert_eq!(lists.len(), variants.len(), "one list a variant");
            for (row, list) in rows.iter_mut().zip(lists) {
                let ranked = best_first(list);
                match &q.expected {
                    Some(path) => {
                        row.0 += usize::from(in_top3(&ranked, path));
                        row.1 += 1;
                    }
                    None => {
                        row.2 += usize::from(!ranked.is_empty());
                        row.3 += 1;
                    }
                }
            }
        }
        println!(
            "| {} | paraphrase recall@3 | should-find-nothing with hits |",
            self.header
        );
        println!("|---|---:|---:|");
        for (z, (f3, n, fp, nn)) in variants.iter().zip(rows) {
            let label = match *z {
                None => self.none.to_string(),
                Some(z) if (z - self.default).abs() < 1e-9 => {
                    format!("{} (default)", (self.label)(z))
                }
                Some(z) => (self.label)(z),
            };
            println!("| {label} | {f3}/{n} | {fp}/{nn} |");
        }
    }
}

/// "Nothing relevant" is an answer (issue 27): made-up words find nothing, through
/// the engine and through the CLI (exit 1), while the same searches with the gate
/// off (minimum score 0) do return hits (so the gate, not an empty index, empties
/// them) and a real paraphrase still finds its note.
#[test]
fn made_up_words_find_nothing() {
    let (ws, store) = indexed_notes();
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
