//! The storage boundary of search: the narrow set of reads the engine needs from
//! an index — keyword candidates, vector candidates, identifier pins, chunk rows
//! by id, the index's model and sources, and whether a file is indexed. The
//! ranking (`score`) and the assembly (`engine::search_in`) see only this trait,
//! so another backend (PostgreSQL + pgvector, say) can implement it without
//! touching them. [`Store`] (SQLite: FTS5 + sqlite-vec) is the implementation.
#![warn(missing_docs)]

use super::keyword;
use super::query::ParsedQuery;
use super::rows::{self, ChunkRow};
use super::score::{BackgroundSample, KeywordNorm};
use super::types::SearchError;
use super::vector::{self, VectorHits};
use crate::store::Store;
use std::collections::HashMap;

/// A chunk's id in the index (SQLite: the `chunks` rowid).
pub type ChunkId = i64;

/// The reads search and get need from an index.
pub trait SearchStorage {
    /// The embedding model the index was built with: `None` = never built,
    /// `Some("")` = keyword-only (no vectors).
    fn index_model(&self) -> Result<Option<String>, SearchError>;

    /// Every source name known to the index (registered or with indexed files).
    fn known_sources(&self) -> Result<Vec<String>, SearchError>;

    /// Keyword candidates: id → normalised keyword score in [0,1], at most about
    /// `k` per index, optionally restricted to one source.
    fn keyword_candidates(
        &self,
        pq: &ParsedQuery,
        k: usize,
        source: Option<&str>,
        norm: KeywordNorm,
    ) -> Result<HashMap<ChunkId, f64>, SearchError>;

    /// Chunks containing the identifier verbatim, when it is rare; empty otherwise.
    fn verbatim_matches(
        &self,
        ident: &str,
        source: Option<&str>,
    ) -> Result<Vec<ChunkId>, SearchError>;

    /// The `k` nearest chunks to `q` as (id, vector score), and the fallback that
    /// applied (e.g. an exact in-process scan). With `source`, rows of other
    /// sources may still be returned: callers filter the fetched rows.
    fn vector_candidates(
        &self,
        q: &[f32],
        k: usize,
        source: Option<&str>,
    ) -> Result<VectorHits, SearchError>;

    /// The rows for `ids` in the order given (missing ones skipped), with their
    /// vectors when `with_embedding`.
    fn rows(
        &self,
        ids: &[ChunkId],
        with_embedding: bool,
    ) -> Result<Vec<(ChunkId, ChunkRow)>, SearchError>;

    /// Whether `path` (relative to the source's root) is an indexed file of `source`.
    fn is_indexed(&self, source: &str, path: &str) -> Result<bool, SearchError>;

    /// The vectors of about `n` chunks spread evenly over the index (every source),
    /// the same ones for every query while the index is unchanged: the sample a
    /// query's own background similarity is measured on
    /// ([`score::QueryBackground`](super::score::QueryBackground)). Fewer (or none)
    /// on a small or keyword-only index.
    fn background_sample(&self, n: usize) -> Result<BackgroundSample, SearchError>;

    /// Up to `limit` chunks dated in `[start, end)` (unix seconds; their
    /// `note_time`), newest first, optionally of one source: the candidates a
    /// query's date window adds. A backend without it returns none (the window
    /// then only reorders the other candidates).
    fn dated_between(
        &self,
        start: i64,
        end: i64,
        source: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ChunkId>, SearchError> {
        let _ = (start, end, source, limit);
        Ok(Vec::new())
    }
}

/// The chunk ids [`SearchStorage::background_sample`] reads: `n` ids spread evenly
/// over `lo..=hi` (all of them when there are at most `n`; none when `hi < lo`).
pub fn sample_ids(lo: ChunkId, hi: ChunkId, n: usize) -> Vec<ChunkId> {
    if hi < lo || n == 0 {
        return Vec::new();
    }
    let (n, span) = (n as i64, hi - lo + 1);
    if span <= n {
        return (lo..=hi).collect();
    }
    let mut ids: Vec<ChunkId> = (0..n).map(|i| lo + i * span / n).collect();
    ids.dedup();
    ids
}

impl SearchStorage for Store {
    fn index_model(&self) -> Result<Option<String>, SearchError> {
        Ok(self.meta("model")?)
    }

    fn known_sources(&self) -> Result<Vec<String>, SearchError> {
        let mut known: Vec<String> = self.sources()?.into_iter().map(|s| s.name).collect();
        known.extend(self.indexed_sources()?);
        Ok(known)
    }

    fn keyword_candidates(
        &self,
        pq: &ParsedQuery,
        k: usize,
        source: Option<&str>,
        norm: KeywordNorm,
    ) -> Result<HashMap<ChunkId, f64>, SearchError> {
        keyword::keyword_candidates(self, pq, k, source, norm)
    }

    fn verbatim_matches(
        &self,
        ident: &str,
        source: Option<&str>,
    ) -> Result<Vec<ChunkId>, SearchError> {
        keyword::verbatim_matches(self, ident, source)
    }

    fn vector_candidates(
        &self,
        q: &[f32],
        k: usize,
        source: Option<&str>,
    ) -> Result<VectorHits, SearchError> {
        vector::vector_candidates(self, q, k, source)
    }

    fn rows(
        &self,
        ids: &[ChunkId],
        with_embedding: bool,
    ) -> Result<Vec<(ChunkId, ChunkRow)>, SearchError> {
        rows::fetch_rows(self, ids, with_embedding)
    }

    fn is_indexed(&self, source: &str, path: &str) -> Result<bool, SearchError> {
        Ok(self.file_record(source, path)?.is_some())
    }

    fn dated_between(
        &self,
        start: i64,
        end: i64,
        source: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ChunkId>, SearchError> {
        rows::dated_between(self, start, end, source, limit)
    }

    fn background_sample(&self, n: usize) -> Result<BackgroundSample, SearchError> {
        let max = rows::approx_chunks(self)?;
        let ids = sample_ids(1, max, n);
        Ok(BackgroundSample {
            vectors: rows::fetch_rows(self, &ids, true)?
                .into_iter()
                .filter_map(|(_, r)| r.embedding)
                .collect(),
            chunks: usize::try_from(max).unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::sample_ids;

    #[test]
    fn sample_ids_spread_over_the_index() {
        assert!(sample_ids(1, 0, 10).is_empty());
        assert!(sample_ids(1, 100, 0).is_empty());
        assert_eq!(sample_ids(1, 3, 10), vec![1, 2, 3]);
        assert_eq!(sample_ids(51, 53, 10), vec![51, 52, 53]);
        let ids = sample_ids(1, 1000, 10);
        assert_eq!(ids.len(), 10);
        assert_eq!(ids[0], 1);
        assert_eq!(ids[9], 901);
        assert!(ids.windows(2).all(|w| w[1] - w[0] == 100));
        assert!(ids.iter().all(|&i| (1..=1000).contains(&i)));
    }
}
