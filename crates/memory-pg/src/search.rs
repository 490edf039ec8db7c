//! Candidate generation and row reads on PostgreSQL
//! (`claw_memory::search::storage::SearchStorage`): keyword candidates from the
//! word postings (`chunk_postings`, index-only; phrases from the `tsvector`'s
//! GIN index) ranked by FTS5's BM25 formula computed in SQL (term statistics
//! from the postings or tsvector positions and `chunk_stats`), CJK runs
//! and short terms by `pg_trgm`-indexed substring matches, vector candidates from
//! the per-dimension HNSW index (cosine). Scores are normalised exactly like
//! SQLite's (`score::normalize_bm25`, `score::max_scale`, the stage shares of
//! `ParsedQuery`), then ranking happens in `claw_memory`'s pure core.
//!
//! A search sees every workspace's rows in its configured namespaces.

use crate::store::{PgError, PgStore};
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::keyword::{KEYWORD_RANK_BUDGET, RARE_IDENT_MAX};
use claw_memory::search::query::{ParsedQuery, TermPlan, contains_verbatim, plan_terms};
use claw_memory::search::rows::ChunkRow;
use claw_memory::search::score::{self, KeywordNorm};
use claw_memory::search::storage::{ChunkId, SearchStorage};
use claw_memory::search::types::SearchError;
use claw_memory::search::vector::VectorHits;
use claw_memory::store::StoreError;
use pgvector::Vector;
use std::collections::HashMap;

/// The BM25 word stage (see `PgStore::word_stage`): `$1` the terms (raw), `$2` the
/// namespaces, `$3` the source filter, `$4` k, `$5` rank the conjunction of the terms
/// (else any term), `$6` the oldest rowid ranked (the bounded window), `$7` take each
/// term's document count from the whole index (else from the hits, which hold every
/// chunk with the term when neither bound applies). `claw_words` and `chunk_stats`
/// come from migration 0002, `chunk_postings` from 0006.
///
/// A one-word term (a single-node tsquery) reads its postings: (chunk, count,
/// chunk length) from `chunk_postings_word`, an index-only scan that reads no
/// chunk row. A phrase term (several tokens, as FTS5 treats `covid-19`) matches
/// `chunks.tsv` through the GIN index, and its tf is its rarest token's count
/// (only the phrase's lexemes are unnested: `setweight` marks them, `ts_filter`
/// keeps them). Read from the chunks, the stage visited one heap page per
/// candidate (~2,400 for three words at 100,000 chunks), most of a hybrid search.
/// `hit` and `df` are materialized: inlined, a nested loop may recount a term's
/// whole-index document count once per hit.
const BM25_SQL: &str = "
WITH t AS (
  SELECT i, phraseto_tsquery('simple', regexp_replace(w, '[^[:alnum:]]+', ' ', 'g')) AS tq,
         tsvector_to_array(claw_words(w)) AS lex
  FROM unnest($1::text[]) WITH ORDINALITY AS x(w, i)
), tt AS MATERIALIZED (
  SELECT i, tq, lex, numnode(tq) = 1 AS one FROM t WHERE numnode(tq) > 0),
st AS (SELECT coalesce(sum(n), 0)::float8 AS n, coalesce(sum(total_dl), 0)::float8 AS tot
       FROM chunk_stats WHERE namespace = ANY($2) AND ($3::text IS NULL OR source = $3)),
anyhit AS MATERIALIZED (
  SELECT p.rowid, p.dl, tt.i, p.tf::float8 AS tf
  FROM tt JOIN chunk_postings p ON p.lexeme = tt.lex[1]
  WHERE tt.one AND p.namespace = ANY($2) AND ($3::text IS NULL OR p.source = $3)
    AND p.rowid >= $6::bigint
  UNION ALL
  SELECT c.rowid, c.dl, tt.i,
         (SELECT min(coalesce(array_length(u.positions, 1), 1))
            FROM unnest(ts_filter(setweight(c.tsv, 'A', tt.lex), '{a}')) u)::float8
  FROM tt JOIN chunks c ON c.tsv @@ tt.tq
  WHERE NOT tt.one AND c.namespace = ANY($2) AND ($3::text IS NULL OR c.source = $3)
    AND c.rowid >= $6::bigint),
hit AS MATERIALIZED (
  SELECT * FROM anyhit WHERE NOT $5
  UNION ALL
  SELECT a.* FROM anyhit a
  WHERE $5 AND a.rowid IN (SELECT rowid FROM anyhit GROUP BY rowid
                           HAVING count(DISTINCT i) = (SELECT count(*) FROM tt))),
df AS MATERIALIZED (
  SELECT i, count(*)::float8 AS df FROM hit WHERE NOT $7 GROUP BY i
  UNION ALL
  SELECT tt.i, (CASE WHEN tt.one THEN
      (SELECT count(*) FROM chunk_postings p WHERE p.lexeme = tt.lex[1]
         AND p.namespace = ANY($2) AND ($3::text IS NULL OR p.source = $3))
    ELSE
      (SELECT count(*) FROM chunks c WHERE c.tsv @@ tt.tq AND c.namespace = ANY($2)
         AND ($3::text IS NULL OR c.source = $3)) END)::float8
  FROM tt WHERE $7)
SELECT h.rowid,
  sum(greatest(ln((st.n - df.df + 0.5) / (df.df + 0.5)), 1e-6)
      * h.tf * 2.2 / (h.tf + 1.2 * (0.25 + 0.75 * h.dl / greatest(st.tot / greatest(st.n, 1), 1))))::float8
    AS score
FROM hit h JOIN df USING (i) CROSS JOIN st
GROUP BY h.rowid ORDER BY score DESC, h.rowid LIMIT $4";

/// The chunks (at most `$4`) matching the terms `$1` (raw, as in [`BM25_SQL`]);
/// `$5` true = every one of them (the conjunction). One one-word term counts its
/// postings (index only); otherwise the chunks matching the tsquery (GIN).
const CAPPED_COUNT_SQL: &str = "
WITH t AS (
  SELECT phraseto_tsquery('simple', regexp_replace(w, '[^[:alnum:]]+', ' ', 'g')) AS tq,
         tsvector_to_array(claw_words(w)) AS lex
  FROM unnest($1::text[]) AS x(w)
), tt AS MATERIALIZED (SELECT tq, lex FROM t WHERE numnode(tq) > 0),
q AS (SELECT string_agg('(' || tq::text || ')', CASE WHEN $5 THEN ' & ' ELSE ' | ' END)::tsquery AS q
      FROM tt)
SELECT CASE WHEN (SELECT count(*) = 1 AND bool_and(numnode(tq) = 1) FROM tt) THEN
  (SELECT count(*) FROM (SELECT 1 FROM chunk_postings p, tt WHERE p.lexeme = tt.lex[1]
     AND p.namespace = ANY($2) AND ($3::text IS NULL OR p.source = $3) LIMIT $4::bigint) x)
ELSE
  (SELECT count(*) FROM (SELECT 1 FROM chunks c, q WHERE c.tsv @@ q.q AND c.namespace = ANY($2)
     AND ($3::text IS NULL OR c.source = $3) LIMIT $4::bigint) x)
END";

/// The rowid of the `$4`-th newest chunk matching the terms `$1` (conjunction when `$5`).
const NEWEST_BOUND_SQL: &str = "
WITH q AS (
  SELECT string_agg('(' || tq::text || ')', CASE WHEN $5 THEN ' & ' ELSE ' | ' END)::tsquery AS q
  FROM (SELECT phraseto_tsquery('simple', regexp_replace(w, '[^[:alnum:]]+', ' ', 'g')) AS tq
        FROM unnest($1::text[]) AS x(w)) t WHERE numnode(tq) > 0)
SELECT c.rowid FROM chunks c, q WHERE c.tsv @@ q.q AND c.namespace = ANY($2)
  AND ($3::text IS NULL OR c.source = $3) ORDER BY c.rowid DESC OFFSET $4::bigint - 1 LIMIT 1";

/// How the word stage bounds its ranking work (as SQLite's `keyword::keyword_plan`).
#[derive(Debug, Clone, PartialEq)]
struct WordPlan {
    /// The terms ranked.
    terms: Vec<String>,
    /// Rank chunks with every term (else any).
    conjunction: bool,
    /// Rank only rows at or above this rowid (the newest `budget`).
    min_rowid: i64,
    /// Document counts from the whole index (the candidates are a window).
    exact_df: bool,
}

fn se(e: PgError) -> SearchError {
    SearchError::from(StoreError::from(e))
}

/// A LIKE pattern matching `needle` anywhere (`%`, `_` and `\` escaped).
fn like_anywhere(needle: &str) -> String {
    let mut s = String::from("%");
    for ch in needle.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            s.push('\\');
        }
        s.push(ch);
    }
    s.push('%');
    s
}

impl PgStore {
    /// The word stage: FTS5's BM25 (k1 1.2, b 0.75) computed in SQL over the
    /// chunks matching any term (GIN): Σ over the query's terms of
    /// `idf · tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))` with FTS5's
    /// `idf = ln((N − df + ½)/(df + ½))` (floored at 10⁻⁶), `tf` from the tsvector's
    /// positions (a phrase term counts its rarest token), `dl` the chunk's token count
    /// and `N`/avgdl from `chunk_stats`. Tokenisation is FTS5 `unicode61`'s (runs of
    /// letters and digits) on both sides, so a term that is a phrase there is one here.
    fn word_stage(
        &self,
        terms: &[&str],
        k: usize,
        source: Option<&str>,
        norm: KeywordNorm,
    ) -> Result<Vec<(i64, f64)>, PgError> {
        let plan = self.word_plan(terms, source, KEYWORD_RANK_BUDGET)?;
        let rows = self.with_client(|c| {
            Ok(c.query(
                BM25_SQL,
                &[
                    &plan.terms,
                    &self.namespaces,
                    &source,
                    &(k as i64),
                    &plan.conjunction,
                    &plan.min_rowid,
                    &plan.exact_df,
                ],
            )?)
        })?;
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        // normalize_bm25 takes FTS5-style ranks (lower = better).
        let ranks: Vec<f64> = rows.iter().map(|r| -r.get::<_, f64>(1)).collect();
        Ok(ids
            .into_iter()
            .zip(score::normalize_bm25(&ranks, norm))
            .collect())
    }

    /// Bound the BM25 work as SQLite does (`claw_memory::search::keyword::keyword_plan`,
    /// [`KEYWORD_RANK_BUDGET`] rows): an index or a query within the budget is ranked
    /// exactly; else the rarest terms whose document counts fit it together (the most
    /// frequent act as stop words); when every term is common, the conjunction (when
    /// no chunk has every term, any term), only its newest `budget` rows when it
    /// matches more. `budget == usize::MAX`: always exact.
    fn word_plan(
        &self,
        terms: &[&str],
        source: Option<&str>,
        budget: usize,
    ) -> Result<WordPlan, PgError> {
        let all: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
        let exact = |terms: Vec<String>| WordPlan {
            terms,
            conjunction: false,
            min_rowid: i64::MIN,
            exact_df: false,
        };
        if budget == usize::MAX || self.visible_chunk_count(source)? <= budget as i64 {
            return Ok(exact(all));
        }
        let cap = budget as i64 + 1;
        let count = |ts: &[String], conj: bool| -> Result<usize, PgError> {
            let n: i64 = self.with_client(|c| {
                Ok(c.query_one(
                    CAPPED_COUNT_SQL,
                    &[&ts, &self.namespaces, &source, &cap, &conj],
                )?
                .get(0))
            })?;
            Ok(n.max(0) as usize)
        };
        let mut counts = Vec::with_capacity(all.len());
        for t in &all {
            counts.push(count(std::slice::from_ref(t), false)?);
        }
        Ok(match plan_terms(&counts, budget) {
            TermPlan::All => exact(all),
            TermPlan::Subset(keep) => exact(keep.iter().map(|&i| all[i].clone()).collect()),
            TermPlan::AllCommon => {
                let both = count(&all, true)?;
                let conjunction = both > 0;
                let min_rowid = if conjunction && both <= budget {
                    i64::MIN
                } else {
                    self.with_client(|c| {
                        Ok(c.query_opt(
                            NEWEST_BOUND_SQL,
                            &[
                                &all,
                                &self.namespaces,
                                &source,
                                &(budget as i64),
                                &conjunction,
                            ],
                        )?
                        .map(|r| r.get::<_, i64>(0)))
                    })?
                    .unwrap_or(i64::MIN)
                };
                WordPlan {
                    terms: all,
                    conjunction,
                    min_rowid,
                    exact_df: true,
                }
            }
        })
    }

    /// Chunks a search sees (from `chunk_stats`: no scan).
    fn visible_chunk_count(&self, source: Option<&str>) -> Result<i64, PgError> {
        self.with_client(|c| {
            Ok(c.query_one(
                "SELECT coalesce(sum(n), 0)::bigint FROM chunk_stats
                 WHERE namespace = ANY($1) AND ($2::text IS NULL OR source = $2)",
                &[&self.namespaces, &source],
            )?
            .get(0))
        })
    }

    /// The substring stage (CJK runs, short terms): how many of the runs a chunk
    /// contains, max-scaled; candidates come from the pg_trgm GIN index.
    fn substring_stage(
        &self,
        runs: &[String],
        k: usize,
        source: Option<&str>,
    ) -> Result<Vec<(i64, f64)>, PgError> {
        let pats: Vec<String> = runs.iter().map(|r| like_anywhere(r)).collect();
        let rows = self.with_client(|c| {
            Ok(c.query(
                "SELECT rowid, (SELECT count(*) FROM unnest($1::text[]) p WHERE text LIKE p)::float8 AS n
                 FROM chunks
                 WHERE text LIKE ANY($1) AND namespace = ANY($2) AND ($3::text IS NULL OR source = $3)
                 ORDER BY n DESC, rowid DESC LIMIT $4",
                &[&pats, &self.namespaces, &source, &(k as i64)],
            )?)
        })?;
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        let raw: Vec<f64> = rows.iter().map(|r| r.get(1)).collect();
        Ok(ids.into_iter().zip(score::max_scale(&raw)).collect())
    }
}

impl SearchStorage for PgStore {
    fn index_model(&self) -> Result<Option<String>, SearchError> {
        Ok(IndexStorage::meta(self, "model")?)
    }

    fn known_sources(&self) -> Result<Vec<String>, SearchError> {
        self.with_client(|c| {
            Ok(c.query(
                "SELECT name FROM sources WHERE namespace = ANY($1)
                 UNION SELECT DISTINCT source FROM files WHERE namespace = ANY($1)",
                &[&self.namespaces],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
        })
        .map_err(se)
    }

    fn keyword_candidates(
        &self,
        pq: &ParsedQuery,
        k: usize,
        source: Option<&str>,
        norm: KeywordNorm,
    ) -> Result<HashMap<ChunkId, f64>, SearchError> {
        let (sw, st, ss) = pq.stage_shares();
        let mut out: HashMap<i64, f64> = HashMap::new();
        let mut add = |hits: Vec<(i64, f64)>, share: f64| {
            for (id, s) in hits {
                *out.entry(id).or_insert(0.0) += share * s;
            }
        };
        let words = pq.fts_terms();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        if !words.is_empty() {
            add(self.word_stage(&words, k, source, norm).map_err(se)?, sw);
        }
        // SQLite splits CJK runs into a trigram index (runs of 3+) and a scan (1–2
        // characters); both are substring matches here, on one pg_trgm index.
        if !pq.cjk_long.is_empty() {
            add(
                self.substring_stage(&pq.cjk_long, k, source).map_err(se)?,
                st,
            );
        }
        if !pq.cjk_short.is_empty() {
            add(
                self.substring_stage(&pq.cjk_short, k, source).map_err(se)?,
                ss,
            );
        }
        for v in out.values_mut() {
            *v = v.clamp(0.0, 1.0);
        }
        Ok(out)
    }

    fn verbatim_matches(
        &self,
        ident: &str,
        source: Option<&str>,
    ) -> Result<Vec<ChunkId>, SearchError> {
        let cap = (RARE_IDENT_MAX * 5) as i64;
        let pat = like_anywhere(ident);
        let rows = self
            .with_client(|c| {
                Ok(c.query(
                    "SELECT rowid, text FROM chunks
                     WHERE text ILIKE $1 AND namespace = ANY($2) AND ($3::text IS NULL OR source = $3)
                     LIMIT $4",
                    &[&pat, &self.namespaces, &source, &cap],
                )?)
            })
            .map_err(se)?;
        let hits: Vec<i64> = rows
            .iter()
            .filter(|r| contains_verbatim(r.get::<_, &str>(1), ident))
            .map(|r| r.get(0))
            .collect();
        if hits.len() > RARE_IDENT_MAX {
            return Ok(Vec::new());
        }
        Ok(hits)
    }

    fn vector_candidates(
        &self,
        q: &[f32],
        k: usize,
        source: Option<&str>,
    ) -> Result<VectorHits, SearchError> {
        let dims = q.len();
        let qv = Vector::from(q.to_vec());
        let ef = k.max(self.cfg.ef_search);
        // The expression must match the partial HNSW index of this dimension.
        let sql = format!(
            "SELECT rowid, 1 - (embedding::vector({dims}) <=> $1) FROM chunks
             WHERE dims = {dims} AND namespace = ANY($2) AND ($3::text IS NULL OR source = $3)
             ORDER BY embedding::vector({dims}) <=> $1 LIMIT $4"
        );
        let hits = self
            .with_client(|c| {
                // Session settings of this pooled connection, sent when they change.
                if c.ef_search != Some(ef) {
                    c.batch_execute(&format!(
                        "SET hnsw.ef_search = {ef}; SET hnsw.iterative_scan = relaxed_order"
                    ))?;
                    c.ef_search = Some(ef);
                }
                Ok(
                    c.query(&sql, &[&qv, &self.namespaces, &source, &(k as i64)])?
                        .iter()
                        .map(|r| (r.get::<_, i64>(0), r.get::<_, f64>(1)))
                        .collect::<Vec<_>>(),
                )
            })
            .map_err(se)?;
        Ok((hits, None))
    }

    fn rows(
        &self,
        ids: &[ChunkId],
        with_embedding: bool,
    ) -> Result<Vec<(ChunkId, ChunkRow)>, SearchError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids_v: Vec<i64> = ids.to_vec();
        let rows = self
            .with_client(|c| {
                Ok(c.query(
                    "SELECT rowid, source, path, start_line, end_line, text, note_time,
                            CASE WHEN $2 THEN embedding END, context
                     FROM chunks WHERE rowid = ANY($1) AND namespace = ANY($3)",
                    &[&ids_v, &with_embedding, &self.namespaces],
                )?)
            })
            .map_err(se)?;
        let mut by_id: HashMap<i64, ChunkRow> = HashMap::with_capacity(rows.len());
        for r in rows {
            let emb: Option<Vector> = r.get(7);
            by_id.insert(
                r.get(0),
                ChunkRow {
                    source: r.get(1),
                    path: r.get(2),
                    start_line: r.get::<_, i32>(3) as i64,
                    end_line: r.get::<_, i32>(4) as i64,
                    text: r.get(5),
                    context: r.get(8),
                    note_time: r.get(6),
                    embedding: emb.map(|v| v.to_vec()),
                },
            );
        }
        Ok(ids
            .iter()
            .filter_map(|id| by_id.remove(id).map(|row| (*id, row)))
            .collect())
    }

    fn is_indexed(&self, source: &str, path: &str) -> Result<bool, SearchError> {
        Ok(IndexStorage::file_record(self, source, path)?.is_some())
    }

    /// Reused while the rowid range and the visible chunk count are those it was
    /// read at (one small query instead of reading `n` vectors per search).
    fn background_sample(&self, n: usize) -> Result<score::BackgroundSample, SearchError> {
        // The same spread as SQLite's, over this namespace set's rowid range.
        let (lo, hi, count): (i64, i64, i64) = self
            .with_client(|c| {
                let r = c.query_one(
                    "SELECT coalesce(min(rowid), 1)::int8, coalesce(max(rowid), 0)::int8,
                            (SELECT coalesce(sum(n), 0)::int8 FROM chunk_stats
                              WHERE namespace = ANY($1))
                     FROM chunks WHERE namespace = ANY($1)",
                    &[&self.namespaces],
                )?;
                Ok((r.get(0), r.get(1), r.get(2)))
            })
            .map_err(se)?;
        let key = (lo, hi, count, n);
        let cache = || match self.sample_cache.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some((k, sample)) = cache().as_ref()
            && *k == key
        {
            return Ok(sample.clone());
        }
        let ids = claw_memory::search::storage::sample_ids(lo, hi, n);
        let sample = score::BackgroundSample {
            vectors: self
                .rows(&ids, true)?
                .into_iter()
                .filter_map(|(_, r)| r.embedding)
                .collect(),
            chunks: usize::try_from(hi - lo + 1).unwrap_or(0),
        };
        *cache() = Some((key, sample.clone()));
        Ok(sample)
    }

    fn dated_between(
        &self,
        start: i64,
        end: i64,
        source: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ChunkId>, SearchError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .with_client(|c| {
                Ok(c.query(
                    "SELECT rowid FROM chunks
                     WHERE namespace = ANY($1) AND note_time >= $2 AND note_time < $3
                       AND ($4::text IS NULL OR source = $4)
                     ORDER BY note_time DESC LIMIT $5",
                    &[&self.namespaces, &start, &end, &source, &limit],
                )?)
            })
            .map_err(se)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(like_anywhere("50%_x\\"), "%50\\%\\_x\\\\%");
    }
}
