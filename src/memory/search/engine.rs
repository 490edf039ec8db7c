//! The search engine: runs the keyword (FTS5 word + trigram indexes, short-CJK
//! scan) and vector (vec0 KNN, binary-quantised prefilter, or in-process cosine)
//! stages against the store, unions the candidates by chunk and hands them to the
//! pure ranking in `score`; also `memory get` (lines of an indexed file).
//!
//! Invariant: a missing embedder, a missing sqlite-vec extension or a keyword-only
//! index never makes a search fail — the stage is skipped (or done in-process) and
//! `fallback` says why. User text reaches SQL only as bound parameters and through
//! the `query` sanitiser.

use super::query::{ParsedQuery, TermPlan, contains_verbatim, plan_terms, quote};
use super::score::{self, Candidate, KeywordNorm, RankParams};
use super::snippet::{SNIPPET_CHARS, snippet};
use crate::config::{MemorySettings, Settings};
use crate::memory::embed::Embedder;
use crate::memory::store::{Store, StoreError, blob_to_vec};
use crate::memory::walk::{self, SOURCE_MEMORY, SOURCE_SESSIONS};
use rusqlite::{OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Component, Path};

/// Above this many chunks (by max rowid) and when `chunks_vec_bit` exists, the vector
/// stage prefilters with hamming distance over binary-quantised vectors and rescores
/// exactly; below, it runs exact float KNN.
pub const BIT_PREFILTER_MIN_CHUNKS: i64 = 20_000;
/// Prefilter oversampling: hamming candidates fetched per wanted neighbour.
pub const BIT_OVERSAMPLE: usize = 10;
/// Minimum prefilter candidate count.
pub const BIT_MIN_CANDIDATES: usize = 256;
/// An identifier query is "rare" when it occurs verbatim in at most this many
/// chunks; then its verbatim matches are pinned into the top 3.
pub const RARE_IDENT_MAX: usize = 10;
/// The keyword stage ranks at most about this many rows per FTS5 index (see
/// [`keyword_plan`]).
pub const KEYWORD_RANK_BUDGET: usize = 4000;
/// sqlite-vec refuses a KNN `k` above this.
pub const VEC0_MAX_K: usize = 4096;
/// Largest accepted `limit`.
pub const MAX_LIMIT: usize = 1000;
/// `memory get` defaults.
pub const GET_DEFAULT_LINES: usize = 120;
pub const GET_MAX_CHARS: usize = 12_000;

/// `fallback` values.
pub const FALLBACK_NO_EMBEDDER: &str = "no-embedder";
pub const FALLBACK_NO_VEC0: &str = "no-vec0";
/// The index was built keyword-only (meta `model` is empty): there are no vectors.
pub const FALLBACK_NO_VECTORS: &str = "no-vectors";
/// The index was built with another embedding model than the one loaded.
pub const FALLBACK_MODEL_MISMATCH: &str = "model-mismatch";
/// Embedding the query failed.
pub const FALLBACK_EMBED_FAILED: &str = "embed-failed";

/// Which stages to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Hybrid,
    Fts,
    Vector,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Fts => "fts",
            Mode::Vector => "vector",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "hybrid" => Ok(Mode::Hybrid),
            "fts" | "keyword" => Ok(Mode::Fts),
            "vector" => Ok(Mode::Vector),
            other => Err(format!("unknown mode `{other}` (hybrid, fts, vector)")),
        }
    }
}

/// Which sources to search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceFilter {
    All,
    Memory,
    Sessions,
    /// A registered notes folder (or a built-in by name).
    Named(String),
}

impl SourceFilter {
    /// `all`, `memory`, `sessions`, or any other name.
    pub fn parse(s: &str) -> SourceFilter {
        match s {
            "all" | "" => SourceFilter::All,
            SOURCE_MEMORY => SourceFilter::Memory,
            SOURCE_SESSIONS => SourceFilter::Sessions,
            other => SourceFilter::Named(other.to_string()),
        }
    }

    fn name(&self) -> Option<&str> {
        match self {
            SourceFilter::All => None,
            SourceFilter::Memory => Some(SOURCE_MEMORY),
            SourceFilter::Sessions => Some(SOURCE_SESSIONS),
            SourceFilter::Named(n) => Some(n),
        }
    }
}

/// One search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRequest {
    pub query: String,
    /// Results wanted (1..=[`MAX_LIMIT`]).
    pub limit: usize,
    /// Minimum score; `None` = `MemorySettings::min_score`; `Some(f64::NEG_INFINITY)`
    /// disables the filter.
    pub min_score: Option<f64>,
    pub mode: Mode,
    pub source: SourceFilter,
    /// Attach each hit's score components.
    pub explain: bool,
    /// MMR rerank (off = order by score).
    pub mmr: bool,
    /// BM25 normalisation (default [`KeywordNorm::MaxScaled`]).
    pub keyword_norm: KeywordNorm,
}

impl SearchRequest {
    /// Defaults: limit 6, hybrid, all sources, configured min-score, MMR on.
    pub fn new(query: impl Into<String>) -> SearchRequest {
        SearchRequest {
            query: query.into(),
            limit: 6,
            min_score: None,
            mode: Mode::Hybrid,
            source: SourceFilter::All,
            explain: false,
            mmr: true,
            keyword_norm: KeywordNorm::default(),
        }
    }
}

/// A hit's score components (`--explain`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Explain {
    /// Cosine similarity clamped to [0,1]; null when the vector stage did not run.
    pub vector: Option<f64>,
    /// The vector score that enters the blend: the cosine calibrated against the
    /// model's background similarity (`score::calibrated_vector_score`); null when
    /// the vector stage did not run.
    pub vector_calibrated: Option<f64>,
    /// Normalised keyword score; null when not a keyword hit.
    pub keyword: Option<f64>,
    /// Weighted blend before decay.
    pub blended: f64,
    /// Relevance: the blend before decay, the value the minimum score is tested
    /// against (equal to `blended`; named for the threshold).
    pub relevance: f64,
    /// The hit's final score, `relevance × decay` (as in the hit's `score`).
    pub score: f64,
    /// Bounded recency factor applied to the relevance (1 = evergreen or today;
    /// never below `1 − score::MAX_RECENCY_PENALTY`).
    pub decay: f64,
    /// Position chosen by MMR (0-based); null when MMR is off or the hit was pinned in.
    pub mmr_rank: Option<usize>,
    /// Verbatim match of a rare identifier query (kept regardless of min-score).
    pub pinned: bool,
    /// Effective (vector, keyword) weights.
    pub weights: (f64, f64),
    /// Chunk time used for decay (unix seconds), null = evergreen.
    pub note_time: Option<i64>,
}

/// One result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SearchHit {
    /// Relative to the source root, '/'-separated.
    pub path: String,
    pub source: String,
    pub start_line: usize,
    pub end_line: usize,
    pub score: f64,
    pub snippet: String,
    /// `path#L12-L20`.
    pub citation: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
}

/// The answer (this JSON shape is a public contract).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SearchResponse {
    pub query: String,
    /// The mode requested (`hybrid`, `fts` or `vector`); `fallback` says when a
    /// stage was skipped or degraded.
    pub mode: Mode,
    /// Why a stage was skipped or degraded, e.g. `no-embedder`, `no-vec0`.
    pub fallback: Option<String>,
    pub results: Vec<SearchHit>,
}

/// Vector candidates (rowid, cosine similarity) and the fallback that applied, if any.
pub type VectorHits = (Vec<(i64, f64)>, Option<&'static str>);

/// Errors from search and get.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("unknown source `{name}` (known: {known})")]
    UnknownSource { name: String, known: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("refused path `{path}`: {reason}")]
    Refused { path: String, reason: String },
    #[error(
        "`{0}` is not an indexed file (run `claw memory index`, or check the path with `claw memory search`)"
    )]
    NotIndexed(String),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
}

/// A chunk row fetched for ranking.
struct Row {
    source: String,
    path: String,
    start_line: i64,
    end_line: i64,
    text: String,
    note_time: Option<i64>,
    embedding: Option<Vec<f32>>,
}

/// Run one search. `now_unix` drives temporal decay.
pub fn search(
    store: &Store,
    embedder: Option<&dyn Embedder>,
    params: &MemorySettings,
    req: &SearchRequest,
    now_unix: i64,
) -> Result<SearchResponse, SearchError> {
    let source = check_source(store, &req.source)?;
    let limit = req.limit.min(MAX_LIMIT);
    let k = limit.max(1) * params.candidate_multiplier.max(1);
    let pq = ParsedQuery::parse(&req.query);
    let mut fallback: Option<&str> = None;

    // Vector stage: the query embedding, if the mode, embedder and index allow.
    let mut qvec: Option<Vec<f32>> = None;
    // The loaded model's background similarity, for calibrating cosines.
    let background = embedder.map(|e| score::background_for(e.model_id()));
    if req.mode != Mode::Fts && !req.query.trim().is_empty() && limit > 0 {
        let index_model = store.meta("model")?.unwrap_or_default();
        match embedder {
            _ if index_model.is_empty() => fallback = Some(FALLBACK_NO_VECTORS),
            None => fallback = Some(FALLBACK_NO_EMBEDDER),
            Some(e) if e.model_id() != index_model => fallback = Some(FALLBACK_MODEL_MISMATCH),
            Some(e) => match e.embed_query(&req.query) {
                Ok(v) => qvec = Some(v),
                Err(err) => {
                    tracing::warn!("query embedding failed: {err}");
                    fallback = Some(FALLBACK_EMBED_FAILED)
                }
            },
        }
    }
    let vector_ran = qvec.is_some();
    // A vector-only request without vectors degrades to keywords rather than nothing.
    let want_keyword = req.mode != Mode::Vector || !vector_ran;
    let keyword_ran = want_keyword && !pq.is_empty() && limit > 0;

    let mut vec_scores: HashMap<i64, f64> = HashMap::new();
    if let Some(q) = &qvec {
        let (hits, fb) = vector_candidates(store, q, k, source)?;
        if fb.is_some() {
            fallback = fallback.or(fb);
        }
        vec_scores = hits.into_iter().collect();
    }
    let mut kw_scores: HashMap<i64, f64> = HashMap::new();
    if keyword_ran {
        kw_scores = keyword_candidates(store, &pq, k, source, req.keyword_norm)?;
    }
    // Identifier pins: verbatim matches of a rare identifier query.
    let mut pinned: Vec<i64> = Vec::new();
    if want_keyword && let Some((_, ident)) = &pq.identifier {
        pinned = verbatim_matches(store, ident, source)?;
    }

    // Union by rowid and fetch the rows.
    let mut ids: Vec<i64> = vec_scores.keys().chain(kw_scores.keys()).copied().collect();
    ids.extend(&pinned);
    ids.sort_unstable();
    ids.dedup();
    let rows = fetch_rows(store, &ids, vector_ran)?;
    let mut cands = Vec::with_capacity(rows.len());
    let mut cand_rows = Vec::with_capacity(rows.len());
    // Raw (clamped) cosines beside the calibrated scores in `cands`, for `explain`.
    let mut raw_vectors: Vec<Option<f64>> = Vec::with_capacity(rows.len());
    for (rowid, row) in rows {
        if let Some(s) = source
            && row.source != s
        {
            continue;
        }
        // The exact cosine for every candidate (keyword hits included).
        let cos = match (&qvec, &row.embedding) {
            (Some(q), Some(e)) => Some(score::cosine(q, e)),
            (Some(_), None) => None,
            _ => vec_scores.get(&rowid).copied(),
        };
        let (raw, vector) = match (cos, &qvec, &background) {
            (Some(c), Some(_), Some(bg)) => (
                Some(score::vector_score(c)),
                Some(score::calibrated_vector_score(c, bg)),
            ),
            (Some(c), _, _) => (Some(score::vector_score(c)), Some(score::vector_score(c))),
            // A chunk without a vector (written keyword-only) has no vector evidence.
            (None, Some(_), _) => (Some(0.0), Some(0.0)),
            (None, None, _) => (None, None),
        };
        raw_vectors.push(raw);
        cands.push(Candidate {
            vector,
            keyword: kw_scores.get(&rowid).copied(),
            note_time: row.note_time,
            tokens: score::token_set(&row.text),
            pinned: pinned.contains(&rowid),
        });
        cand_rows.push(row);
    }
    // Weights: when the vector stage ran, the configured blend, whatever the
    // keyword stage did (matched nothing, or was off in vector mode), so a
    // vector-only hit's relevance is `vector_weight × calibrated score` in every
    // mode and does not depend on whether some unrelated note shares a word with
    // the query. Without vectors the keyword score stands alone (weight 1).
    let weights = score::effective_weights(
        params.vector_weight,
        params.text_weight,
        vector_ran,
        keyword_ran || vector_ran,
    );
    let rp = RankParams {
        weights,
        half_life_days: params.half_life_days,
        mmr_lambda: req.mmr.then_some(params.mmr_lambda),
        min_score: req.min_score.unwrap_or(params.min_score),
        limit,
    };
    let ranked = score::rank(&cands, &rp, now_unix);
    let mut terms: Vec<&str> = pq.words.iter().map(String::as_str).collect();
    terms.extend(pq.cjk_long.iter().map(String::as_str));
    terms.extend(pq.cjk_short.iter().map(String::as_str));
    if let Some((_, ident)) = &pq.identifier {
        terms.insert(0, ident);
    }
    let results = ranked
        .into_iter()
        .map(|r| {
            let row = &cand_rows[r.index];
            let c = &cands[r.index];
            let raw_vector = raw_vectors[r.index];
            SearchHit {
                citation: format!("{}#L{}-L{}", row.path, row.start_line, row.end_line),
                path: row.path.clone(),
                source: row.source.clone(),
                start_line: row.start_line.max(0) as usize,
                end_line: row.end_line.max(0) as usize,
                score: round6(r.score),
                snippet: snippet(&row.text, &terms, SNIPPET_CHARS),
                explain: req.explain.then(|| Explain {
                    vector: raw_vector.map(round6),
                    vector_calibrated: c.vector.map(round6),
                    keyword: c.keyword.map(round6),
                    blended: round6(r.blended),
                    relevance: round6(r.blended),
                    score: round6(r.score),
                    decay: round6(r.decay),
                    mmr_rank: r.mmr_rank,
                    pinned: r.pinned,
                    weights,
                    note_time: c.note_time,
                }),
            }
        })
        .collect();
    Ok(SearchResponse {
        query: req.query.clone(),
        mode: req.mode,
        fallback: fallback.map(str::to_string),
        results,
    })
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Resolve the source filter to a name, refusing unknown names.
fn check_source<'a>(store: &Store, f: &'a SourceFilter) -> Result<Option<&'a str>, SearchError> {
    let Some(name) = f.name() else {
        return Ok(None);
    };
    if name == SOURCE_MEMORY || name == SOURCE_SESSIONS {
        return Ok(Some(name));
    }
    let mut known: Vec<String> = vec![SOURCE_MEMORY.into(), SOURCE_SESSIONS.into()];
    known.extend(store.sources()?.into_iter().map(|s| s.name));
    known.extend(store.indexed_sources()?);
    known.sort();
    known.dedup();
    if known.iter().any(|k| k == name) {
        Ok(Some(name))
    } else {
        Err(SearchError::UnknownSource {
            name: name.to_string(),
            known: known.join(", "),
        })
    }
}

/// Approximate chunk count (max rowid: O(log n)).
fn approx_chunks(store: &Store) -> Result<i64, SearchError> {
    Ok(store
        .conn()
        .query_row("SELECT coalesce(max(rowid), 0) FROM chunks", [], |r| {
            r.get(0)
        })?)
}

fn table_exists(store: &Store, name: &str) -> Result<bool, SearchError> {
    Ok(store
        .conn()
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE name = ?1",
            [name],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// How the vector stage searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorPlan {
    /// Exact float KNN in vec0.
    Exact,
    /// Hamming prefilter over `chunks_vec_bit`, exact rescoring of the candidates.
    BitPrefilter,
    /// No vec0: cosine over `chunks.embedding` in process.
    InProcess,
}

/// The plan the vector stage will use on this store.
pub fn vector_plan(store: &Store) -> Result<VectorPlan, SearchError> {
    if !store.vec_backend().is_loaded() || !store.has_vec_tables()? {
        return Ok(VectorPlan::InProcess);
    }
    if approx_chunks(store)? >= BIT_PREFILTER_MIN_CHUNKS && table_exists(store, "chunks_vec_bit")? {
        Ok(VectorPlan::BitPrefilter)
    } else {
        Ok(VectorPlan::Exact)
    }
}

/// Vector KNN candidates as (rowid, vector score), plus a fallback note.
/// With a source filter the KNN is oversampled ×4 and filtered after the fetch.
pub fn vector_candidates(
    store: &Store,
    q: &[f32],
    k: usize,
    source: Option<&str>,
) -> Result<VectorHits, SearchError> {
    let want = if source.is_some() { k * 4 } else { k };
    match vector_plan(store)? {
        VectorPlan::InProcess => Ok((in_process_knn(store, q, k, source)?, Some(FALLBACK_NO_VEC0))),
        VectorPlan::Exact => Ok((exact_knn(store, q, want)?, None)),
        VectorPlan::BitPrefilter => Ok((bit_knn(store, q, want)?, None)),
    }
}

/// Exact float KNN through vec0 (cosine distance → similarity).
pub fn exact_knn(store: &Store, q: &[f32], k: usize) -> Result<Vec<(i64, f64)>, SearchError> {
    let blob = crate::memory::store::vec_to_blob(q);
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ?1 AND k = ?2",
    )?;
    let rows = stmt.query_map(params![blob, k.min(VEC0_MAX_K) as i64], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?))
    })?;
    let mut out = Vec::new();
    for r in rows {
        let (id, d) = r?;
        out.push((id, score::vector_score(1.0 - d)));
    }
    Ok(out)
}

/// Binary-quantised prefilter (hamming over `chunks_vec_bit`) of
/// `max(k × BIT_OVERSAMPLE, BIT_MIN_CANDIDATES)` candidates, rescored exactly from
/// `chunks.embedding`; the best `k`.
pub fn bit_knn(store: &Store, q: &[f32], k: usize) -> Result<Vec<(i64, f64)>, SearchError> {
    let kb = (k * BIT_OVERSAMPLE).max(BIT_MIN_CANDIDATES);
    let ids = match bit_scan(store, q, kb)? {
        Some(ids) => ids,
        None => bit_knn_vec0(store, q, kb)?,
    };
    rescore(store, q, &ids, k)
}

/// The hamming prefilter through vec0's own KNN (`MATCH … AND k = ?`). Correct on
/// any sqlite-vec version, but sqlite-vec 0.1.x selects each chunk's top k by
/// repeated linear scans (O(chunk_size × k)), so k in the hundreds costs tens of
/// milliseconds at 100,000 rows; [`bit_scan`] is preferred.
pub fn bit_knn_vec0(store: &Store, q: &[f32], n: usize) -> Result<Vec<i64>, SearchError> {
    let blob = crate::memory::store::vec_to_blob(q);
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid FROM chunks_vec_bit WHERE embedding MATCH vec_quantize_binary(?1) AND k = ?2",
    )?;
    let n = n.min(VEC0_MAX_K);
    let rows = stmt.query_map(params![blob, n as i64], |r| r.get::<_, i64>(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The `n` rowids nearest to `q` by hamming distance over the binary-quantised
/// vectors, read straight from `chunks_vec_bit`'s storage tables (sqlite-vec
/// 0.1.x layout: `_chunks(chunk_id, size, validity, rowids)` and
/// `_vector_chunks00(rowid, vectors)`), with an O(rows) selection. Ties are broken
/// by rowid. `None` when the storage does not have that layout (another
/// sqlite-vec version): the caller then uses [`bit_knn_vec0`].
pub fn bit_scan(store: &Store, q: &[f32], n: usize) -> Result<Option<Vec<i64>>, SearchError> {
    use rusqlite::types::ValueRef;
    let conn = store.conn();
    let blob = crate::memory::store::vec_to_blob(q);
    let qbits: Vec<u8> = conn
        .prepare_cached("SELECT vec_quantize_binary(?1)")?
        .query_row([blob], |r| r.get(0))?;
    let nb = qbits.len();
    let Ok(mut stmt) = conn.prepare_cached(
        "SELECT c.validity, c.rowids, v.vectors FROM chunks_vec_bit_chunks c
         JOIN chunks_vec_bit_vector_chunks00 v ON v._rowid_ = c.chunk_id",
    ) else {
        return Ok(None);
    };
    if nb == 0 {
        return Ok(None);
    }
    let mut all: Vec<(u32, i64)> = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (ValueRef::Blob(valid), ValueRef::Blob(rowids), ValueRef::Blob(vecs)) =
            (r.get_ref(0)?, r.get_ref(1)?, r.get_ref(2)?)
        else {
            return Ok(None);
        };
        let slots = valid.len() * 8;
        if rowids.len() != slots * 8 || vecs.len() != slots * nb {
            return Ok(None);
        }
        for (i, v) in vecs.chunks_exact(nb).enumerate() {
            if (valid[i / 8] >> (i % 8)) & 1 == 0 {
                continue;
            }
            let mut id = [0u8; 8];
            id.copy_from_slice(&rowids[i * 8..i * 8 + 8]);
            all.push((hamming(&qbits, v), i64::from_ne_bytes(id)));
        }
    }
    if all.len() > n && n > 0 {
        all.select_nth_unstable(n - 1);
        all.truncate(n);
    }
    all.sort_unstable();
    all.truncate(n);
    Ok(Some(all.into_iter().map(|(_, id)| id).collect()))
}

/// Hamming distance between two equal-length bit strings. Pure.
pub fn hamming(a: &[u8], b: &[u8]) -> u32 {
    let mut d = 0u32;
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        let mut xa = [0u8; 8];
        let mut ya = [0u8; 8];
        xa.copy_from_slice(x);
        ya.copy_from_slice(y);
        d += (u64::from_ne_bytes(xa) ^ u64::from_ne_bytes(ya)).count_ones();
    }
    for (x, y) in ar.iter().zip(br) {
        d += (x ^ y).count_ones();
    }
    d
}

/// Exact cosine for `ids` from `chunks.embedding`; the best `k`.
fn rescore(
    store: &Store,
    q: &[f32],
    ids: &[i64],
    k: usize,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let mut scored: Vec<(i64, f64)> = Vec::with_capacity(ids.len());
    let mut stmt = store
        .conn()
        .prepare_cached("SELECT embedding FROM chunks WHERE rowid = ?1")?;
    for &id in ids {
        let v = stmt
            .query_row([id], |r| {
                Ok(match r.get_ref(0)? {
                    rusqlite::types::ValueRef::Blob(b) => blob_to_vec(b),
                    _ => None,
                })
            })
            .optional()?
            .flatten();
        if let Some(v) = v {
            scored.push((id, score::cosine(q, &v)));
        }
    }
    Ok(top_k(scored, k))
}

/// Exact cosine over `chunks.embedding` in process (no vec0).
pub fn in_process_knn(
    store: &Store,
    q: &[f32],
    k: usize,
    source: Option<&str>,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid, embedding FROM chunks
         WHERE embedding IS NOT NULL AND (?1 IS NULL OR source = ?1)",
    )?;
    let rows = stmt.query_map([source], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
    })?;
    let mut scored = Vec::new();
    for r in rows {
        let (id, b) = r?;
        if let Some(v) = blob_to_vec(&b) {
            scored.push((id, score::cosine(q, &v)));
        }
    }
    Ok(top_k(scored, k))
}

fn top_k(mut scored: Vec<(i64, f64)>, k: usize) -> Vec<(i64, f64)> {
    let by = |a: &(i64, f64), b: &(i64, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, by);
        scored.truncate(k);
    }
    scored.sort_by(by);
    scored.truncate(k);
    scored
        .into_iter()
        .map(|(id, c)| (id, score::vector_score(c)))
        .collect()
}

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
fn verbatim_matches(
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

/// The rows for `ids` (in the order given; missing rows are skipped), one cached
/// statement per row rather than a freshly prepared `IN (…)` list.
fn fetch_rows(
    store: &Store,
    ids: &[i64],
    with_embedding: bool,
) -> Result<Vec<(i64, Row)>, SearchError> {
    let mut out = Vec::with_capacity(ids.len());
    let sql = if with_embedding {
        "SELECT source, path, start_line, end_line, text, note_time, embedding
         FROM chunks WHERE rowid = ?1"
    } else {
        "SELECT source, path, start_line, end_line, text, note_time, NULL
         FROM chunks WHERE rowid = ?1"
    };
    let mut stmt = store.conn().prepare_cached(sql)?;
    for &id in ids {
        let row = stmt
            .query_row([id], |r| {
                Ok(Row {
                    source: r.get(0)?,
                    path: r.get(1)?,
                    start_line: r.get(2)?,
                    end_line: r.get(3)?,
                    text: r.get(4)?,
                    note_time: r.get(5)?,
                    embedding: match r.get_ref(6)? {
                        rusqlite::types::ValueRef::Blob(b) => blob_to_vec(b),
                        _ => None,
                    },
                })
            })
            .optional()?;
        if let Some(row) = row {
            out.push((id, row));
        }
    }
    Ok(out)
}

/// A `memory get` request.
#[derive(Debug, Clone, PartialEq)]
pub struct GetRequest {
    /// Path relative to its source root (`memory/2026-11-02.md`, `MEMORY.md`,
    /// `sessions/x.jsonl`, or relative to a registered folder), or absolute inside a source.
    pub path: String,
    /// First line, 1-based.
    pub from: usize,
    /// Most lines returned.
    pub lines: usize,
    /// Most characters returned.
    pub max_chars: usize,
}

impl GetRequest {
    /// Defaults: from line 1, [`GET_DEFAULT_LINES`] lines, [`GET_MAX_CHARS`] characters.
    pub fn new(path: impl Into<String>) -> GetRequest {
        GetRequest {
            path: path.into(),
            from: 1,
            lines: GET_DEFAULT_LINES,
            max_chars: GET_MAX_CHARS,
        }
    }
}

/// Lines of an indexed file.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GetResponse {
    pub path: String,
    pub source: String,
    /// First line returned (1-based).
    pub from: usize,
    /// Last line returned (inclusive; `from − 1` when none).
    pub to: usize,
    pub total_lines: usize,
    pub text: String,
    /// Where to continue (`--from`), null at the end of the file.
    pub next_from: Option<usize>,
    /// The last line was cut to fit the character budget.
    pub truncated: bool,
}

/// Return lines of an indexed file. Refuses paths with `..`, absolute paths outside
/// every source, and files that are not in the `files` table.
pub fn get_lines(
    settings: &Settings,
    store: &Store,
    req: &GetRequest,
) -> Result<GetResponse, SearchError> {
    let refused = |reason: &str| SearchError::Refused {
        path: req.path.clone(),
        reason: reason.to_string(),
    };
    let raw = req.path.trim();
    if raw.is_empty() || raw.contains('\0') {
        return Err(refused("empty or invalid path"));
    }
    let p = Path::new(raw);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(refused("paths with `..` are not allowed"));
    }
    let sources = walk::sources(settings, store)?;
    let mut candidates: Vec<(&walk::SourceRoot, String)> = Vec::new();
    if p.is_absolute() {
        for s in &sources {
            if let Some(rel) = walk::relative(&s.root, p) {
                candidates.push((s, rel));
            }
        }
        if candidates.is_empty() {
            return Err(refused("outside the indexed sources"));
        }
    } else {
        let rel: Vec<String> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let rel = rel.join("/");
        for s in &sources {
            candidates.push((s, rel.clone()));
        }
    }
    let mut found = None;
    for (s, rel) in candidates {
        if walk::belongs(s.kind, &rel) && store.file_record(&s.name, &rel)?.is_some() {
            found = Some((s, rel));
            break;
        }
    }
    let Some((src, rel)) = found else {
        return Err(SearchError::NotIndexed(req.path.clone()));
    };
    let abs = src.root.join(&rel);
    let text = std::fs::read(&abs).map_err(|source| SearchError::Read {
        path: abs.display().to_string(),
        source,
    })?;
    let text = String::from_utf8_lossy(&text);
    Ok(slice_lines(&text, &rel, &src.name, req))
}

/// Cut `text` to the requested window. Pure.
pub fn slice_lines(text: &str, path: &str, source: &str, req: &GetRequest) -> GetResponse {
    let all: Vec<&str> = text.lines().collect();
    let from = req.from.max(1);
    let mut out = String::new();
    let mut chars = 0usize;
    let mut to = from - 1;
    let mut truncated = false;
    for (i, line) in all.iter().enumerate().skip(from - 1).take(req.lines.max(1)) {
        let n = line.chars().count() + 1;
        if chars + n > req.max_chars {
            if to < from {
                // A single line longer than the budget: cut it.
                out.extend(line.chars().take(req.max_chars));
                out.push('\n');
                to = i + 1;
                truncated = true;
            }
            break;
        }
        out.push_str(line);
        out.push('\n');
        chars += n;
        to = i + 1;
    }
    GetResponse {
        path: path.to_string(),
        source: source.to_string(),
        from,
        to,
        total_lines: all.len(),
        text: out,
        next_from: (to < all.len() && to >= from).then_some(to + 1),
        truncated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slicing_pages_through_a_file() {
        let text: String = (1..=300).map(|i| format!("line {i}\n")).collect();
        let r = slice_lines(&text, "a.md", "memory", &GetRequest::new("a.md"));
        assert_eq!(
            (r.from, r.to, r.total_lines, r.next_from),
            (1, 120, 300, Some(121))
        );
        assert!(r.text.starts_with("line 1\n") && r.text.ends_with("line 120\n"));
        let r = slice_lines(
            &text,
            "a.md",
            "memory",
            &GetRequest {
                from: 281,
                ..GetRequest::new("a.md")
            },
        );
        assert_eq!((r.to, r.next_from), (300, None));
        // Character budget.
        let r = slice_lines(
            &text,
            "a.md",
            "memory",
            &GetRequest {
                max_chars: 20,
                ..GetRequest::new("a.md")
            },
        );
        assert_eq!((r.to, r.next_from), (2, Some(3)));
        // One huge line is cut, and paging continues after it.
        let huge = format!("{}\nnext\n", "x".repeat(50_000));
        let r = slice_lines(&huge, "a.md", "memory", &GetRequest::new("a.md"));
        assert!(r.truncated && r.text.chars().count() == GET_MAX_CHARS + 1);
        assert_eq!(r.next_from, Some(2));
        // Past the end: nothing.
        let r = slice_lines(
            "a\n",
            "a.md",
            "memory",
            &GetRequest {
                from: 5,
                ..GetRequest::new("a.md")
            },
        );
        assert_eq!((r.text.as_str(), r.next_from), ("", None));
    }

    #[test]
    fn mode_and_source_parsing() {
        assert_eq!("fts".parse::<Mode>().unwrap(), Mode::Fts);
        assert!("bogus".parse::<Mode>().is_err());
        assert_eq!(SourceFilter::parse("all"), SourceFilter::All);
        assert_eq!(SourceFilter::parse("sessions"), SourceFilter::Sessions);
        assert_eq!(
            SourceFilter::parse("garden"),
            SourceFilter::Named("garden".into())
        );
    }

    #[test]
    fn top_k_orders_and_clamps() {
        let v = top_k(vec![(1, 0.2), (2, 0.9), (3, -0.5), (4, 0.5)], 3);
        assert_eq!(v, vec![(2, 0.9), (4, 0.5), (1, 0.2)]);
    }

    #[test]
    fn hamming_counts_differing_bits() {
        assert_eq!(hamming(&[0u8; 48], &[0u8; 48]), 0);
        assert_eq!(hamming(&[0xFFu8; 48], &[0u8; 48]), 384);
        let mut a = [0u8; 11];
        a[10] = 0b1010_0001;
        a[0] = 1;
        assert_eq!(hamming(&a, &[0u8; 11]), 4);
    }

    /// The direct scan of vec0's storage agrees with vec0's own hamming KNN, with
    /// deleted rows (cleared validity bits) and several storage chunks. Fails when
    /// a sqlite-vec upgrade changes the layout in a way the shape checks miss.
    #[test]
    fn bit_scan_matches_vec0_knn() {
        use crate::memory::store::{FileRecord, NewChunk, WriteMode};
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.sqlite")).unwrap();
        assert!(store.vec_backend().is_loaded());
        let dims = 64;
        store.reset_index("t", dims, "v").unwrap();
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        for f in 0..25 {
            let path = format!("memory/{f}.md");
            let chunks: Vec<NewChunk> = (0..100)
                .map(|i| NewChunk {
                    id: format!("{path}:{i}"),
                    start_line: i + 1,
                    end_line: i + 1,
                    hash: format!("{f}-{i}"),
                    text: format!("chunk {f} {i}"),
                    note_time: None,
                    embedding: Some((0..dims).map(|_| rnd()).collect()),
                })
                .collect();
            let rec = FileRecord {
                source: "memory".into(),
                path: path.clone(),
                sha256: format!("{f}"),
                mtime_ns: 1,
                size: 1,
                indexed_bytes: 0,
                indexed_lines: 0,
            };
            store
                .write_file(&rec, &chunks, WriteMode::Replace, "t")
                .unwrap();
        }
        for f in [3, 11, 12] {
            store
                .remove_file("memory", &format!("memory/{f}.md"))
                .unwrap();
        }
        let q: Vec<f32> = (0..dims).map(|_| rnd()).collect();
        let blob = crate::memory::store::vec_to_blob(&q);
        // vec0's full ranking: rowid -> hamming distance.
        let dist: HashMap<i64, f64> = store
            .conn()
            .prepare(
                "SELECT rowid, distance FROM chunks_vec_bit
                 WHERE embedding MATCH vec_quantize_binary(?1) AND k = 4000",
            )
            .unwrap()
            .query_map([&blob], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(dist.len(), 2200);
        for n in [1usize, 24, 256, 2200, 5000] {
            let scan = bit_scan(&store, &q, n).unwrap().expect("sqlite-vec layout");
            // (vec0's KNN refuses k > 4096; the wrapper clamps.)
            let knn = bit_knn_vec0(&store, &q, n).unwrap();
            assert_eq!(scan.len(), knn.len());
            let d = |ids: &[i64]| -> Vec<f64> { ids.iter().map(|i| dist[i]).collect() };
            // Same distances in the same order (ids may differ only among ties).
            let (ds, dk) = (d(&scan), d(&knn));
            assert_eq!(ds, dk, "n = {n}");
            assert!(ds.windows(2).all(|w| w[0] <= w[1]));
        }
        // Removed rows are never returned.
        let all = bit_scan(&store, &q, 5000).unwrap().unwrap();
        let removed: Vec<i64> = all
            .iter()
            .copied()
            .filter(|i| !dist.contains_key(i))
            .collect();
        assert!(removed.is_empty(), "{removed:?}");
        // bit_knn rescoring returns exact cosine order.
        let top = bit_knn(&store, &q, 10).unwrap();
        assert_eq!(top.len(), 10);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
    }

    /// Above the budget the keyword stage ranks the rarest terms (the common one
    /// acts as a stop word), a query of common terms ranks a bounded window, and
    /// both still find what exact BM25 puts first.
    #[test]
    fn keyword_plan_bounds_work_on_a_large_index() {
        use crate::memory::store::{FileRecord, NewChunk, WriteMode};
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
        let plan = keyword_plan(
            &store,
            "chunks_fts",
            &["common", "words"],
            KEYWORD_RANK_BUDGET,
        )
        .unwrap();
        assert_eq!(plan.terms, TermPlan::AllCommon);
        assert_eq!(plan.match_expr, "\"common\" AND \"words\"");
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
