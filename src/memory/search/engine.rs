//! The search engine: runs the keyword (FTS5 word + trigram indexes, short-CJK
//! scan) and vector (vec0 KNN, binary-quantised prefilter, or in-process cosine)
//! stages against the store, unions the candidates by chunk and hands them to the
//! pure ranking in `score`; also `memory get` (lines of an indexed file).
//!
//! Invariant: a missing embedder, a missing sqlite-vec extension or a keyword-only
//! index never makes a search fail — the stage is skipped (or done in-process) and
//! `fallback` says why. User text reaches SQL only as bound parameters and through
//! the `query` sanitiser.

use super::query::{ParsedQuery, contains_verbatim, quote};
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
    /// Normalised keyword score; null when not a keyword hit.
    pub keyword: Option<f64>,
    /// Weighted blend before decay.
    pub blended: f64,
    /// Temporal decay factor (1 = evergreen or today).
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
    /// The stages that actually ran: `hybrid`, `fts` or `vector`.
    pub mode: Mode,
    /// Why a stage was skipped or degraded, e.g. `no-embedder`, `no-vec0`.
    pub fallback: Option<String>,
    pub results: Vec<SearchHit>,
}

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
    if req.mode != Mode::Fts && !req.query.trim().is_empty() && limit > 0 {
        let index_model = store.meta("model")?.unwrap_or_default();
        match embedder {
            None => fallback = Some(FALLBACK_NO_EMBEDDER),
            Some(_) if index_model.is_empty() => fallback = Some(FALLBACK_NO_VECTORS),
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
    for (rowid, row) in rows {
        if let Some(s) = source
            && row.source != s
        {
            continue;
        }
        // The exact vector score for every candidate (keyword hits included).
        let vector = match (&qvec, &row.embedding) {
            (Some(q), Some(e)) => Some(score::vector_score(score::cosine(q, e))),
            (Some(_), None) => Some(0.0),
            _ => None,
        }
        .or_else(|| vec_scores.get(&rowid).copied());
        cands.push(Candidate {
            vector,
            keyword: kw_scores.get(&rowid).copied(),
            note_time: row.note_time,
            tokens: score::token_set(&row.text),
            pinned: pinned.contains(&rowid),
        });
        cand_rows.push(row);
    }
    let weights = score::effective_weights(
        params.vector_weight,
        params.text_weight,
        vector_ran,
        keyword_ran,
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
            SearchHit {
                citation: format!("{}#L{}-L{}", row.path, row.start_line, row.end_line),
                path: row.path.clone(),
                source: row.source.clone(),
                start_line: row.start_line.max(0) as usize,
                end_line: row.end_line.max(0) as usize,
                score: round6(r.score),
                snippet: snippet(&row.text, &terms, SNIPPET_CHARS),
                explain: req.explain.then(|| Explain {
                    vector: c.vector.map(round6),
                    keyword: c.keyword.map(round6),
                    blended: round6(r.blended),
                    decay: round6(r.decay),
                    mmr_rank: r.mmr_rank,
                    pinned: r.pinned,
                    weights,
                    note_time: c.note_time,
                }),
            }
        })
        .collect();
    let mode = match (vector_ran, keyword_ran) {
        (true, true) => Mode::Hybrid,
        (true, false) => Mode::Vector,
        (false, true) => Mode::Fts,
        (false, false) => req.mode,
    };
    Ok(SearchResponse {
        query: req.query.clone(),
        mode,
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
) -> Result<(Vec<(i64, f64)>, Option<&'static str>), SearchError> {
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
    let rows = stmt.query_map(params![blob, k as i64], |r| {
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
    let blob = crate::memory::store::vec_to_blob(q);
    let kb = (k * BIT_OVERSAMPLE).max(BIT_MIN_CANDIDATES);
    let ids: Vec<i64> = {
        let mut stmt = store.conn().prepare_cached(
            "SELECT rowid FROM chunks_vec_bit WHERE embedding MATCH vec_quantize_binary(?1) AND k = ?2",
        )?;
        let rows = stmt.query_map(params![blob, kb as i64], |r| r.get::<_, i64>(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let mut scored: Vec<(i64, f64)> = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let sql = format!(
            "SELECT rowid, embedding FROM chunks WHERE rowid IN ({})",
            chunk
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut stmt = store.conn().prepare(&sql)?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, Option<Vec<u8>>>(1)?))
        })?;
        for r in rows {
            let (id, b) = r?;
            if let Some(v) = b.as_deref().and_then(blob_to_vec) {
                scored.push((id, score::cosine(q, &v)));
            }
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
    let (sw, st, ss) = pq.stage_shares();
    let mut out: HashMap<i64, f64> = HashMap::new();
    let add = |hits: Vec<(i64, f64)>, share: f64, out: &mut HashMap<i64, f64>| {
        for (id, s) in hits {
            *out.entry(id).or_insert(0.0) += share * s;
        }
    };
    if let Some(m) = pq.fts_match() {
        add(
            bm25_stage(store, "chunks_fts", &m, k, source, norm)?,
            sw,
            &mut out,
        );
    }
    if let Some(m) = pq.trigram_match() {
        add(
            bm25_stage(store, "chunks_trigram", &m, k, source, norm)?,
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

/// One FTS5 index: `bm25()`-ranked top `k`, normalised.
fn bm25_stage(
    store: &Store,
    table: &str,
    match_expr: &str,
    k: usize,
    source: Option<&str>,
    norm: KeywordNorm,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let sql = if source.is_some() {
        format!(
            "SELECT f.rowid, bm25({table}) AS r FROM {table} f JOIN chunks c ON c.rowid = f.rowid
             WHERE {table} MATCH ?1 AND c.source = ?3 ORDER BY r LIMIT ?2"
        )
    } else {
        format!(
            "SELECT rowid, bm25({table}) AS r FROM {table}
             WHERE {table} MATCH ?1 AND ?3 IS NULL ORDER BY r LIMIT ?2"
        )
    };
    let mut stmt = store.conn().prepare_cached(&sql)?;
    let rows = stmt.query_map(params![match_expr, k as i64, source], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?))
    })?;
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

fn fetch_rows(
    store: &Store,
    ids: &[i64],
    with_embedding: bool,
) -> Result<Vec<(i64, Row)>, SearchError> {
    let mut out = Vec::with_capacity(ids.len());
    let emb = if with_embedding { "embedding" } else { "NULL" };
    for chunk in ids.chunks(500) {
        let sql = format!(
            "SELECT rowid, source, path, start_line, end_line, text, note_time, {emb}
             FROM chunks WHERE rowid IN ({}) ORDER BY rowid",
            chunk
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let mut stmt = store.conn().prepare(&sql)?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                Row {
                    source: r.get(1)?,
                    path: r.get(2)?,
                    start_line: r.get(3)?,
                    end_line: r.get(4)?,
                    text: r.get(5)?,
                    note_time: r.get(6)?,
                    embedding: r
                        .get::<_, Option<Vec<u8>>>(7)?
                        .as_deref()
                        .and_then(blob_to_vec),
                },
            ))
        })?;
        for r in rows {
            out.push(r?);
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
}
