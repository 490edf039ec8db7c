//! The keyword stage: BM25 candidates from the FTS5 word and trigram indexes
//! (with the ranking work bounded by [`keyword_plan`]), the short-CJK substring
//! scan, and the verbatim matches of a rare identifier query (pins).
#![warn(missing_docs)]

use super::query::{ParsedQuery, TermPlan, contains_verbatim, plan_terms, quote};
use super::rows::approx_chunks;
use super::score::{self, KeywordNorm};
use super::types::SearchError;
use crate::store::Store;
use rusqlite::{OptionalExtension, params};
use std::collections::HashMap;

/// An identifier query is "rare" when it occurs verbatim in at most this many
/// chunks; then its verbatim matches are pinned into the top 3.
pub const RARE_IDENT_MAX: usize = 10;
/// The keyword stage ranks at most about this many rows per FTS5 index (see
/// [`keyword_plan`]).
pub const KEYWORD_RANK_BUDGET: usize = 4000;

/// Keyword candidates: rowid → normalised keyword score in [0,1]. Word index,
/// trigram index (CJK runs ≥ 3) and the short-CJK substring scan are each
/// normalised, then combined by the share of the query each covers.
pub fn keyword_candidates(
    store: &Store,
    pq: &ParsedQuery,
    k: usize,
    source: Option<&str>,
    norm: KeywordNorm,
) -> Result<HashMap<i64, f64>, SearchError> {
    keyword_candidates_within(store, pq, k, source, norm, KEYWORD_RANK_BUDGET)
}

/// [`keyword_candidates`] with another ranking budget (`usize::MAX`: exact BM25
/// whatever it costs; benchmarks compare the two).
pub fn keyword_candidates_within(
    store: &Store,
    pq: &ParsedQuery,
    k: usize,
    source: Option<&str>,
    norm: KeywordNorm,
    budget: usize,
) -> Result<HashMap<i64, f64>, SearchError> {
    let (sw, st, ss) = pq.stage_shares();
    let mut out: HashMap<i64, f64> = HashMap::new();
    let add = |hits: Vec<(i64, f64)>, share: f64, out: &mut HashMap<i64, f64>| {
        for (id, s) in hits {
            *out.entry(id).or_insert(0.0) += share * s;
        }
    };
    let words = pq.fts_terms();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    if !words.is_empty() {
        add(
            bm25_stage(store, "chunks_fts", &words, k, source, norm, budget)?,
            sw,
            &mut out,
        );
    }
    let grams = pq.trigram_terms();
    if !grams.is_empty() {
        let grams: Vec<&str> = grams.iter().map(String::as_str).collect();
        add(
            bm25_stage(store, "chunks_trigram", &grams, k, source, norm, budget)?,
            st,
            &mut out,
        );
    }
    if !pq.cjk_short.is_empty() {
        add(
            short_cjk_stage(store, &pq.cjk_short, k, source)?,
            ss,
            &mut out,
        );
    }
    for v in out.values_mut() {
        *v = v.clamp(0.0, 1.0);
    }
    Ok(out)
}

/// The plan the keyword stage chose for one FTS5 index (see [`keyword_plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeywordPlan {
    /// The `MATCH` expression ranked.
    pub match_expr: String,
    /// Only rows with `rowid >= min_rowid` are ranked (the newest rows of a query
    /// whose every term is too common to rank in full).
    pub min_rowid: Option<i64>,
    /// How the terms were chosen.
    pub terms: TermPlan,
}

/// Choose what one FTS5 index ranks for `terms` (unquoted) so that BM25 scores at
/// most about `budget` rows (normally [`KEYWORD_RANK_BUDGET`]): FTS5 computes `bm25()` for every row
/// the expression matches before it sorts, so an OR with a word that occurs in
/// most chunks costs tens of milliseconds at 100,000 chunks whatever the `LIMIT`.
/// Document counts come from cheap capped probes (the doclist is read in rowid
/// order and the probe stops after `budget + 1` rows). On an index with no more
/// rows than the budget, or a query whose terms fit it, the ranking is exact.
/// When every term is common, the conjunction is ranked (only its newest `budget`
/// rows when it matches more); that case still pays FTS5's per-phrase document
/// count inside `bm25()` (a full doclist scan per term, a few ms at 100,000 chunks).
pub fn keyword_plan(
    store: &Store,
    table: &str,
    terms: &[&str],
    budget: usize,
) -> Result<KeywordPlan, SearchError> {
    let quoted: Vec<String> = terms.iter().map(|t| quote(t)).collect();
    let or_all = quoted.join(" OR ");
    let exact = |terms| KeywordPlan {
        match_expr: or_all.clone(),
        min_rowid: None,
        terms,
    };
    if budget == usize::MAX || approx_chunks(store)? <= budget as i64 {
        return Ok(exact(TermPlan::All));
    }
    let mut counts = Vec::with_capacity(quoted.len());
    for q in &quoted {
        counts.push(capped_count(store, table, q, budget + 1)?);
    }
    Ok(match plan_terms(&counts, budget) {
        TermPlan::All => exact(TermPlan::All),
        TermPlan::Subset(keep) => KeywordPlan {
            match_expr: keep
                .iter()
                .map(|&i| quoted[i].as_str())
                .collect::<Vec<_>>()
                .join(" OR "),
            min_rowid: None,
            terms: TermPlan::Subset(keep),
        },
        TermPlan::AllCommon => {
            // Chunks with every term; when there are none, any term.
            let and_all = quoted.join(" AND ");
            let both = capped_count(store, table, &and_all, budget + 1)?;
            let expr = if both > 0 { and_all } else { or_all.clone() };
            let min_rowid = if both > 0 && both <= budget {
                None
            } else {
                newest_rowid_bound(store, table, &expr, budget)?
            };
            KeywordPlan {
                match_expr: expr,
                min_rowid,
                terms: TermPlan::AllCommon,
            }
        }
    })
}

/// How many rows `match_expr` matches, counting at most `cap`.
fn capped_count(
    store: &Store,
    table: &str,
    match_expr: &str,
    cap: usize,
) -> Result<usize, SearchError> {
    let sql =
        format!("SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {table} MATCH ?1 LIMIT ?2)");
    let mut stmt = store.conn().prepare_cached(&sql)?;
    let n: i64 = stmt.query_row(params![match_expr, cap as i64], |r| r.get(0))?;
    Ok(n.max(0) as usize)
}

/// The rowid of the `n`-th newest row `match_expr` matches (None: fewer rows).
fn newest_rowid_bound(
    store: &Store,
    table: &str,
    match_expr: &str,
    n: usize,
) -> Result<Option<i64>, SearchError> {
    let sql = format!(
        "SELECT rowid FROM {table} WHERE {table} MATCH ?1 ORDER BY rowid DESC LIMIT 1 OFFSET ?2"
    );
    let mut stmt = store.conn().prepare_cached(&sql)?;
    Ok(stmt
        .query_row(params![match_expr, n.saturating_sub(1) as i64], |r| {
            r.get(0)
        })
        .optional()?)
}

/// One FTS5 index: the BM25-ranked top `k` for `terms` (unquoted, OR-ed; see
/// [`keyword_plan`] for how the work is bounded), normalised.
fn bm25_stage(
    store: &Store,
    table: &str,
    terms: &[&str],
    k: usize,
    source: Option<&str>,
    norm: KeywordNorm,
    budget: usize,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let plan = keyword_plan(store, table, terms, budget)?;
    // `ORDER BY rank` lets FTS5 sort by its built-in bm25 rank internally.
    let sql = if source.is_some() {
        format!(
            "SELECT f.rowid, f.rank FROM {table} f JOIN chunks c ON c.rowid = f.rowid
             WHERE {table} MATCH ?1 AND f.rowid >= ?4 AND c.source = ?3 ORDER BY f.rank LIMIT ?2"
        )
    } else {
        format!(
            "SELECT rowid, rank FROM {table}
             WHERE {table} MATCH ?1 AND rowid >= ?4 AND ?3 IS NULL ORDER BY rank LIMIT ?2"
        )
    };
    let mut stmt = store.conn().prepare_cached(&sql)?;
    let rows = stmt.query_map(
        params![
            plan.match_expr,
            k as i64,
            source,
            plan.min_rowid.unwrap_or(i64::MIN)
        ],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?)),
    )?;
    let hits: Vec<(i64, f64)> = rows.collect::<rusqlite::Result<_>>()?;
    let ranks: Vec<f64> = hits.iter().map(|h| h.1).collect();
    let normed = score::normalize_bm25(&ranks, norm);
    Ok(hits.iter().map(|h| h.0).zip(normed).collect())
}

/// CJK runs of one or two characters: a substring scan over `chunks.text` (the
/// trigram index cannot match fewer than three characters), scored
/// Σ ln(1+tf)·ln(1+N/df), max-scaled.
fn short_cjk_stage(
    store: &Store,
    runs: &[String],
    k: usize,
    source: Option<&str>,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let n = approx_chunks(store)?.max(1) as f64;
    let mut acc: HashMap<i64, f64> = HashMap::new();
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid, (length(text) - length(replace(text, ?1, ''))) / length(?1) FROM chunks
         WHERE instr(text, ?1) > 0 AND (?2 IS NULL OR source = ?2)",
    )?;
    for run in runs {
        let hits: Vec<(i64, i64)> = stmt
            .query_map(params![run, source], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let df = hits.len().max(1) as f64;
        let idf = (1.0 + n / df).ln();
        for (id, tf) in hits {
            *acc.entry(id).or_insert(0.0) += (1.0 + tf.max(1) as f64).ln() * idf;
        }
    }
    let mut v: Vec<(i64, f64)> = acc.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
    let raw: Vec<f64> = v.iter().map(|x| x.1).collect();
    Ok(v.iter().map(|x| x.0).zip(score::max_scale(&raw)).collect())
}

/// Chunks containing the identifier verbatim (case-sensitive, whole token), if it
/// is rare (≤ [`RARE_IDENT_MAX`] chunks); empty otherwise.
pub fn verbatim_matches(
    store: &Store,
    ident: &str,
    source: Option<&str>,
) -> Result<Vec<i64>, SearchError> {
    let cap = (RARE_IDENT_MAX * 5) as i64;
    let rows: Vec<(i64, String)> = if ident.chars().count() >= 3 {
        // Substring candidates from the trigram index (case-insensitive), verified below.
        let mut stmt = store.conn().prepare_cached(
            "SELECT c.rowid, c.text FROM chunks_trigram t JOIN chunks c ON c.rowid = t.rowid
             WHERE chunks_trigram MATCH ?1 AND (?2 IS NULL OR c.source = ?2) LIMIT ?3",
        )?;
        stmt.query_map(params![quote(ident), source, cap], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?
        .collect::<rusqlite::Result<_>>()?
    } else {
        let mut stmt = store.conn().prepare_cached(
            "SELECT rowid, text FROM chunks
             WHERE instr(text, ?1) > 0 AND (?2 IS NULL OR source = ?2) LIMIT ?3",
        )?;
        stmt.query_map(params![ident, source, cap], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    let hits: Vec<i64> = rows
        .into_iter()
        .filter(|(_, t)| contains_verbatim(t, ident))
        .map(|(id, _)| id)
        .collect();
    if hits.len() > RARE_IDENT_MAX {
        return Ok(Vec::new());
    }
    Ok(hits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Above the budget the keyword stage ranks the rarest terms (the common one
    /// acts as a stop word), a query of common terms ranks a bounded window, and
    /// both still find what exact BM25 puts first.
    #[test]
    fn keyword_plan_bounds_work_on_a_large_index() {
        use crate::store::{FileRecord, NewChunk, WriteMode};
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.sqlite")).unwrap();
        let n = KEYWORD_RANK_BUDGET + 500;
        let chunks: Vec<NewChunk> = (0..n)
            .map(|i| {
                let mut text = format!("common filler{} words", i % 50);
                if i % 2 == 0 {
                    text.push_str(" often");
                }
                if i % 1500 == 7 {
                    text.push_str(" zanzibar zanzibar");
                }
                NewChunk {
                    id: format!("c{i}"),
                    start_line: i + 1,
                    end_line: i + 1,
                    hash: format!("{i}"),
                    text,
                    context: String::new(),
                    note_time: None,
                    embedding: None,
                }
            })
            .collect();
        let rec = FileRecord {
            source: "memory".into(),
            path: "memory/big.md".into(),
            sha256: "x".into(),
            mtime_ns: 1,
            size: 1,
            indexed_bytes: 0,
            indexed_lines: 0,
        };
        store
            .write_file(&rec, &chunks, WriteMode::Replace, "")
            .unwrap();
        let zanzibar: Vec<i64> = store
            .conn()
            .prepare("SELECT rowid FROM chunks WHERE text LIKE '%zanzibar%'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(zanzibar.len(), 3);

        let plan = keyword_plan(
            &store,
            "chunks_fts",
            &["common", "zanzibar"],
            KEYWORD_RANK_BUDGET,
        )
        .unwrap();
        assert_eq!(plan.terms, TermPlan::Subset(vec![1]));
        assert_eq!(plan.match_expr, "\"zanzibar\"");
        let pq = ParsedQuery::parse("common zanzibar");
        let got = keyword_candidates(&store, &pq, 10, None, KeywordNorm::default()).unwrap();
        let exact =
            keyword_candidates_within(&store, &pq, 10, None, KeywordNorm::default(), usize::MAX)
                .unwrap();
        let mut ids: Vec<i64> = got.keys().copied().collect();
        ids.sort_unstable();
        assert_eq!(ids, zanzibar);
        // Exact BM25 ranks the same three chunks first.
        let mut top: Vec<(i64, f64)> = exact.into_iter().collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut top3: Vec<i64> = top.iter().take(3).map(|x| x.0).collect();
        top3.sort_unstable();
        assert_eq!(top3, zanzibar);

        // A frequent term that fits the budget alone is ranked exactly.
        let plan = keyword_plan(
            &store,
            "chunks_fts",
            &["common", "often"],
            KEYWORD_RANK_BUDGET,
        )
        .unwrap();
        assert_eq!(plan.terms, TermPlan::Subset(vec![1]));
        // Every term common: the conjunction, over a bounded window of newest rows.
        let max: i64 = store
            .conn()
            .query_row("SELECT max(rowid) FROM chunks", [], |r| r.get(0))
            .unwrap();
        // (`keyword_plan` takes the index's terms: "words" is held as its stem.)
        let plan = keyword_plan(
            &store,
            "chunks_fts",
            &["common", "word"],
            KEYWORD_RANK_BUDGET,
        )
        .unwrap();
        assert_eq!(plan.terms, TermPlan::AllCommon);
        assert_eq!(plan.match_expr, "\"common\" AND \"word\"");
        assert_eq!(plan.min_rowid, Some(max - KEYWORD_RANK_BUDGET as i64 + 1));
        let plan = keyword_plan(&store, "chunks_fts", &["common"], KEYWORD_RANK_BUDGET).unwrap();
        assert_eq!(plan.terms, TermPlan::AllCommon);
        assert_eq!(plan.min_rowid, Some(max - KEYWORD_RANK_BUDGET as i64 + 1));
        let pq = ParsedQuery::parse("common");
        let got = keyword_candidates(&store, &pq, 10, None, KeywordNorm::default()).unwrap();
        assert_eq!(got.len(), 10);
        // A small budget or none: the plan is exact on indexes no larger than it.
        let plan = keyword_plan(&store, "chunks_fts", &["common", "zanzibar"], usize::MAX).unwrap();
        assert_eq!(plan.terms, TermPlan::All);
    }
}
