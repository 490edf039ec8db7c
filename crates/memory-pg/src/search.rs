//! Candidate generation and row reads on PostgreSQL
//! (`claw_memory::search::storage::SearchStorage`): keyword candidates from the
//! `tsvector` (GIN) ranked BM25-like (Σ idf(t) · length-normalised `ts_rank` per
//! term), CJK runs
//! and short terms by `pg_trgm`-indexed substring matches, vector candidates from
//! the per-dimension HNSW index (cosine). Scores are normalised exactly like
//! SQLite's (`score::normalize_bm25`, `score::max_scale`, the stage shares of
//! `ParsedQuery`), then ranking happens in `claw_memory`'s pure core.
//!
//! A search sees every workspace's rows in its configured namespaces.

use crate::store::{PgError, PgStore};
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::keyword::RARE_IDENT_MAX;
use claw_memory::search::query::{ParsedQuery, contains_verbatim};
use claw_memory::search::rows::ChunkRow;
use claw_memory::search::score::{self, KeywordNorm};
use claw_memory::search::storage::{ChunkId, SearchStorage};
use claw_memory::search::types::SearchError;
use claw_memory::search::vector::VectorHits;
use claw_memory::store::StoreError;
use pgvector::Vector;
use std::collections::HashMap;

/// pgvector's default `hnsw.ef_search`; raised per query to at least `k`.
pub const DEFAULT_EF_SEARCH: usize = 40;

fn se(e: PgError) -> SearchError {
    SearchError::from(StoreError::from(e))
}

/// A tsquery lexeme quoted for `to_tsquery` (quotes and backslashes escaped).
fn ts_quote(term: &str) -> String {
    let mut s = String::with_capacity(term.len() + 2);
    s.push('\'');
    for ch in term.chars() {
        match ch {
            '\'' => s.push_str("''"),
            '\\' => s.push_str("\\\\"),
            _ => s.push(ch),
        }
    }
    s.push('\'');
    s
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
    /// The word stage, BM25-like: Σ over the query's terms of
    /// `idf(t) · ts_rank(tsv, t, 1)` (term frequency, length-normalised, weighted by
    /// the term's rarity among the searched chunks: `ln(1 + (N − df + ½)/(df + ½))`),
    /// over the chunks matching any term.
    fn word_stage(
        &self,
        terms: &[&str],
        k: usize,
        source: Option<&str>,
        norm: KeywordNorm,
    ) -> Result<Vec<(i64, f64)>, PgError> {
        let quoted: Vec<String> = terms.iter().map(|t| ts_quote(t)).collect();
        let q = quoted.join(" | ");
        let rows = self.with_client(|c| {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM chunks WHERE namespace = ANY($1) AND ($2::text IS NULL OR source = $2)",
                    &[&self.namespaces, &source],
                )?
                .get(0);
            let mut weighted: Vec<(f64, &String)> = Vec::new();
            for t in &quoted {
                let df: i64 = c
                    .query_one(
                        "SELECT count(*) FROM chunks WHERE tsv @@ to_tsquery('simple', $1)
                         AND namespace = ANY($2) AND ($3::text IS NULL OR source = $3)",
                        &[t, &self.namespaces, &source],
                    )?
                    .get(0);
                if df > 0 {
                    let idf = (1.0 + ((n - df) as f64 + 0.5) / (df as f64 + 0.5)).ln();
                    weighted.push((idf, t));
                }
            }
            if weighted.is_empty() {
                return Ok(Vec::new());
            }
            let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> =
                vec![&q, &self.namespaces, &source];
            let k64 = k as i64;
            params.push(&k64);
            let mut expr = Vec::new();
            for (idf, t) in &weighted {
                params.push(*t);
                expr.push(format!(
                    "{idf:.6} * ts_rank(tsv, to_tsquery('simple', ${}), 1)",
                    params.len()
                ));
            }
            let sql = format!(
                "SELECT rowid, ({})::float8 AS r
                 FROM chunks, to_tsquery('simple', $1) q
                 WHERE tsv @@ q AND namespace = ANY($2) AND ($3::text IS NULL OR source = $3)
                 ORDER BY r DESC, rowid LIMIT $4",
                expr.join(" + ")
            );
            Ok(c.query(&sql, &params)?)
        })?;
        let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        // normalize_bm25 takes FTS5-style ranks (lower = better).
        let ranks: Vec<f64> = rows.iter().map(|r| -r.get::<_, f64>(1)).collect();
        Ok(ids
            .into_iter()
            .zip(score::normalize_bm25(&ranks, norm))
            .collect())
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
        let ef = k.max(DEFAULT_EF_SEARCH);
        // The expression must match the partial HNSW index of this dimension.
        let sql = format!(
            "SELECT rowid, 1 - (embedding::vector({dims}) <=> $1) FROM chunks
             WHERE dims = {dims} AND namespace = ANY($2) AND ($3::text IS NULL OR source = $3)
             ORDER BY embedding::vector({dims}) <=> $1 LIMIT $4"
        );
        let hits = self
            .with_tx(|tx| {
                tx.batch_execute(&format!(
                    "SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.iterative_scan = relaxed_order"
                ))?;
                Ok(tx
                    .query(&sql, &[&qv, &self.namespaces, &source, &(k as i64)])?
                    .iter()
                    .map(|r| (r.get::<_, i64>(0), r.get::<_, f64>(1)))
                    .collect::<Vec<_>>())
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
                            CASE WHEN $2 THEN embedding END
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(ts_quote("it's"), "'it''s'");
        assert_eq!(ts_quote("a\\b"), "'a\\\\b'");
        assert_eq!(like_anywhere("50%_x\\"), "%50\\%\\_x\\\\%");
    }
}
