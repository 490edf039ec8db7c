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
use super::score::KeywordNorm;
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
}
