//! Retrieval metrics computed exactly as trec_eval / pytrec_eval do: nDCG@k
//! (`ndcg_cut`, linear graded gains, log2 discount, ideal DCG from the qrels),
//! Recall@k (`recall`), MRR@k (reciprocal rank of the first relevant document
//! within the cut). Pure: no I/O.
//!
//! Ranking: like trec_eval, a query's retrieved documents are ordered by score
//! descending, ties broken by document id descending (byte-wise string compare),
//! so equal scores never make the result depend on input order.
//! A document is relevant when its qrels grade is > 0; queries with no relevant
//! document are excluded from every mean (as trec_eval does, they have nothing
//! to find).
#![warn(missing_docs)]

use std::collections::{BTreeMap, HashMap};

/// Relevance judgements: query id -> (doc id -> grade).
pub type Qrels = BTreeMap<String, HashMap<String, i64>>;

/// A run: query id -> retrieved (doc id, score); order is irrelevant (see module doc).
pub type Run = BTreeMap<String, Vec<(String, f64)>>;

/// Metrics of one query.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct QueryMetrics {
    /// nDCG at the cut-off.
    pub ndcg: f64,
    /// Recall at the cut-off.
    pub recall: f64,
    /// Reciprocal rank at the cut-off.
    pub mrr: f64,
}

/// Cut-offs for each metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cutoffs {
    /// nDCG cut-off.
    pub ndcg: usize,
    /// Recall cut-off.
    pub recall: usize,
    /// MRR cut-off.
    pub mrr: usize,
}

impl Default for Cutoffs {
    /// nDCG@10, Recall@100, MRR@10 (the BEIR report).
    fn default() -> Self {
        Cutoffs {
            ndcg: 10,
            recall: 100,
            mrr: 10,
        }
    }
}

/// Means over the evaluated queries.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// Number of queries averaged (those with at least one relevant document).
    pub queries: usize,
    /// Mean nDCG.
    pub ndcg: f64,
    /// Mean recall.
    pub recall: f64,
    /// Mean reciprocal rank.
    pub mrr: f64,
}

/// Sort retrieved documents as trec_eval does: score desc, then doc id desc.
/// A document listed twice keeps its first occurrence (trec_eval rejects duplicates).
pub fn trec_order(retrieved: &[(String, f64)]) -> Vec<(String, f64)> {
    let mut seen = std::collections::HashSet::new();
    let mut v: Vec<(String, f64)> = retrieved
        .iter()
        .filter(|(d, _)| seen.insert(d.as_str()))
        .cloned()
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| b.0.cmp(&a.0)));
    v
}

/// Discounted cumulative gain of `gains` (in rank order) over the first `k`:
/// sum of gain_i / log2(i + 1) for ranks i = 1..=k.
pub fn dcg(gains: &[f64], k: usize) -> f64 {
    gains
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, g)| g / ((i + 2) as f64).log2())
        .sum()
}

/// Metrics of one query, or `None` when it has no relevant document.
pub fn evaluate_query(
    judged: &HashMap<String, i64>,
    retrieved: &[(String, f64)],
    cut: Cutoffs,
) -> Option<QueryMetrics> {
    let n_rel = judged.values().filter(|&&g| g > 0).count();
    if n_rel == 0 {
        return None;
    }
    let ranked = trec_order(retrieved);
    let grade = |d: &str| judged.get(d).copied().unwrap_or(0).max(0);

    let gains: Vec<f64> = ranked.iter().map(|(d, _)| grade(d) as f64).collect();
    let mut ideal: Vec<f64> = judged
        .values()
        .filter(|&&g| g > 0)
        .map(|&g| g as f64)
        .collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg = dcg(&ideal, cut.ndcg);
    let ndcg = if idcg > 0.0 {
        dcg(&gains, cut.ndcg) / idcg
    } else {
        0.0
    };

    let found = gains.iter().take(cut.recall).filter(|&&g| g > 0.0).count();
    let recall = found as f64 / n_rel as f64;

    let mrr = gains
        .iter()
        .take(cut.mrr)
        .position(|&g| g > 0.0)
        .map_or(0.0, |i| 1.0 / (i + 1) as f64);

    Some(QueryMetrics { ndcg, recall, mrr })
}

/// Per-query metrics for every query of `qrels` with a relevant document; a
/// query absent from `run` retrieved nothing and scores 0.
pub fn evaluate(qrels: &Qrels, run: &Run, cut: Cutoffs) -> BTreeMap<String, QueryMetrics> {
    let empty = Vec::new();
    qrels
        .iter()
        .filter_map(|(q, judged)| {
            let retrieved = run.get(q).unwrap_or(&empty);
            evaluate_query(judged, retrieved, cut).map(|m| (q.clone(), m))
        })
        .collect()
}

/// Mean of per-query metrics (0 for an empty set).
pub fn summarize(per_query: &BTreeMap<String, QueryMetrics>) -> Summary {
    let n = per_query.len();
    let mean = |f: fn(&QueryMetrics) -> f64| {
        if n == 0 {
            0.0
        } else {
            per_query.values().map(f).sum::<f64>() / n as f64
        }
    };
    Summary {
        queries: n,
        ndcg: mean(|m| m.ndcg),
        recall: mean(|m| m.recall),
        mrr: mean(|m| m.mrr),
    }
}

/// The `p`-th percentile (0..=100) by nearest rank on sorted values; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
        pairs.iter().map(|(d, g)| (d.to_string(), *g)).collect()
    }

    /// Ranked list with strictly decreasing scores, in the given order.
    fn ranked(docs: &[&str]) -> Vec<(String, f64)> {
        docs.iter()
            .enumerate()
            .map(|(i, d)| (d.to_string(), 100.0 - i as f64))
            .collect()
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-12, "{a} != {b}");
    }

    #[test]
    fn perfect_ranking_is_one() {
        let j = judged(&[("a", 2), ("b", 1), ("c", 1)]);
        let m =
            evaluate_query(&j, &ranked(&["a", "b", "c", "x", "y"]), Cutoffs::default()).unwrap();
        close(m.ndcg, 1.0);
        close(m.recall, 1.0);
        close(m.mrr, 1.0);
    }

    #[test]
    fn known_permutation_binary() {
        // Relevant: a, b (grade 1). Ranking: x, a, y, b.
        // DCG  = 1/log2(3) + 1/log2(5) = 0.630929753571 + 0.430676558073 = 1.061606311645
        // IDCG = 1/log2(2) + 1/log2(3) = 1 + 0.630929753571 = 1.630929753571
        // nDCG@10 = 1.061606311645 / 1.630929753571 = 0.650920930...
        // MRR@10 = 1/2; Recall@100 = 2/2.
        let j = judged(&[("a", 1), ("b", 1), ("z", 0)]);
        let m = evaluate_query(&j, &ranked(&["x", "a", "y", "b"]), Cutoffs::default()).unwrap();
        let expected = (1.0 / 3f64.log2() + 1.0 / 5f64.log2()) / (1.0 + 1.0 / 3f64.log2());
        close(m.ndcg, expected);
        assert!((m.ndcg - 0.650_921).abs() < 1e-6, "{}", m.ndcg);
        close(m.mrr, 0.5);
        close(m.recall, 1.0);
    }

    #[test]
    fn graded_gains_are_linear_and_ideal_comes_from_qrels() {
        // Grades: a=2, b=1, c=1 (c never retrieved). Ranking: b, a.
        // DCG  = 1/log2(2) + 2/log2(3) = 1 + 1.261859507 = 2.261859507
        // IDCG = 2/log2(2) + 1/log2(3) + 1/log2(4) = 2 + 0.630929754 + 0.5 = 3.130929754
        // nDCG = 2.261859507 / 3.130929754 = 0.722424227; Recall = 2/3; MRR = 1.
        let j = judged(&[("a", 2), ("b", 1), ("c", 1)]);
        let m = evaluate_query(&j, &ranked(&["b", "a"]), Cutoffs::default()).unwrap();
        let expected = (1.0 + 2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2() + 0.5);
        close(m.ndcg, expected);
        assert!((m.ndcg - 0.722_424).abs() < 1e-6, "{}", m.ndcg);
        close(m.recall, 2.0 / 3.0);
        close(m.mrr, 1.0);
    }

    #[test]
    fn cutoffs_apply() {
        // The only relevant doc at rank 3: nDCG@2 = 0, MRR@2 = 0, Recall@2 = 0;
        // with cut 3: nDCG = (1/log2(4)) / 1 = 0.5, MRR = 1/3, Recall = 1.
        let j = judged(&[("r", 1)]);
        let run = ranked(&["x", "y", "r"]);
        let two = Cutoffs {
            ndcg: 2,
            recall: 2,
            mrr: 2,
        };
        let m = evaluate_query(&j, &run, two).unwrap();
        close(m.ndcg, 0.0);
        close(m.mrr, 0.0);
        close(m.recall, 0.0);
        let three = Cutoffs {
            ndcg: 3,
            recall: 3,
            mrr: 3,
        };
        let m = evaluate_query(&j, &run, three).unwrap();
        close(m.ndcg, 0.5);
        close(m.mrr, 1.0 / 3.0);
        close(m.recall, 1.0);
    }

    #[test]
    fn query_without_relevant_documents_is_excluded() {
        let mut qrels = Qrels::new();
        qrels.insert("q1".into(), judged(&[("a", 1)]));
        qrels.insert("q2".into(), judged(&[("b", 0)]));
        let mut run = Run::new();
        run.insert("q1".into(), ranked(&["a"]));
        run.insert("q2".into(), ranked(&["b"]));
        let per = evaluate(&qrels, &run, Cutoffs::default());
        assert_eq!(per.keys().collect::<Vec<_>>(), vec!["q1"]);
        let s = summarize(&per);
        assert_eq!(s.queries, 1);
        close(s.ndcg, 1.0);
    }

    #[test]
    fn query_missing_from_run_scores_zero() {
        let mut qrels = Qrels::new();
        qrels.insert("q1".into(), judged(&[("a", 1)]));
        qrels.insert("q2".into(), judged(&[("b", 1)]));
        let mut run = Run::new();
        run.insert("q1".into(), ranked(&["a"]));
        let s = summarize(&evaluate(&qrels, &run, Cutoffs::default()));
        assert_eq!(s.queries, 2);
        close(s.ndcg, 0.5);
        close(s.mrr, 0.5);
        close(s.recall, 0.5);
    }

    #[test]
    fn ties_break_by_doc_id_descending() {
        // Equal scores: trec_eval orders "b" before "a" (doc id descending),
        // whatever the input order. Relevant "a" is then at rank 2.
        let j = judged(&[("a", 1)]);
        let one = vec![("a".to_string(), 1.0), ("b".to_string(), 1.0)];
        let two = vec![("b".to_string(), 1.0), ("a".to_string(), 1.0)];
        let m1 = evaluate_query(&j, &one, Cutoffs::default()).unwrap();
        let m2 = evaluate_query(&j, &two, Cutoffs::default()).unwrap();
        assert_eq!(m1, m2);
        close(m1.mrr, 0.5);
        close(m1.ndcg, 1.0 / 3f64.log2());
    }

    #[test]
    fn scores_not_input_order_decide_rank() {
        let j = judged(&[("a", 1)]);
        let run = vec![("x".to_string(), 0.1), ("a".to_string(), 0.9)];
        close(
            evaluate_query(&j, &run, Cutoffs::default()).unwrap().mrr,
            1.0,
        );
    }

    #[test]
    fn duplicate_doc_keeps_first_occurrence() {
        let j = judged(&[("a", 1)]);
        let run = vec![
            ("x".to_string(), 0.8),
            ("a".to_string(), 0.5),
            ("x".to_string(), 0.1),
        ];
        assert_eq!(trec_order(&run).len(), 2);
        close(
            evaluate_query(&j, &run, Cutoffs::default()).unwrap().mrr,
            0.5,
        );
    }

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        close(percentile(&v, 50.0), 10.0);
        close(percentile(&v, 95.0), 19.0);
        close(percentile(&v, 100.0), 20.0);
        close(percentile(&[], 50.0), 0.0);
        close(percentile(&[3.0], 95.0), 3.0);
    }
}
