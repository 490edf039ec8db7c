//! The search engine's assembly: embeds the query (when the mode, the embedder
//! and the index allow), gathers keyword and vector candidates through a
//! [`SearchStorage`], unions them by chunk, fetches the rows and hands them to
//! the pure ranking in `score`. The stages live in `keyword` and `vector`, row
//! fetches in `rows`, `memory get` in `get`; this module re-exports them so
//! `search::engine::*` stays the one import for callers.
//!
//! Invariant: a missing embedder, a missing sqlite-vec extension or a keyword-only
//! index never makes a search fail — the stage is skipped (or done in-process) and
//! `fallback` says why. User text reaches SQL only as bound parameters and through
//! the `query` sanitiser.
#![warn(missing_docs)]

use super::query::ParsedQuery;
use super::rows::ChunkRow;
use super::score::{self, Candidate, RankParams};
use super::snippet::{SNIPPET_CHARS, snippet};
use super::storage::{ChunkId, SearchStorage};
use crate::config::{DayZone, MemorySettings};
use crate::embed::Embedder;
use crate::store::Store;
use crate::walk::{SOURCE_MEMORY, SOURCE_SESSIONS};
use std::collections::HashMap;

pub use super::get::{get_lines, get_lines_in, slice_lines, slice_transcript};
pub use super::keyword::{
    KEYWORD_RANK_BUDGET, KeywordPlan, RARE_IDENT_MAX, keyword_candidates,
    keyword_candidates_within, keyword_plan,
};
pub use super::types::{
    Explain, Fallback, GET_DEFAULT_LINES, GET_MAX_CHARS, GET_TURNS_AROUND, GetRequest, GetResponse,
    GetTurn, MAX_LIMIT, Mode, RefusedReason, SearchError, SearchHit, SearchRequest, SearchResponse,
    SourceFilter, citation,
};
pub use super::vector::{
    BIT_MIN_CANDIDATES, BIT_OVERSAMPLE, BIT_PREFILTER_MIN_CHUNKS, VEC0_MAX_K, VectorHits,
    VectorPlan, bit_knn, bit_knn_vec0, bit_scan, exact_knn, hamming, in_process_knn,
    vector_candidates, vector_plan,
};

/// Run one search on a SQLite store. `now_unix` drives temporal decay.
pub fn search(
    store: &Store,
    embedder: Option<&dyn Embedder>,
    params: &MemorySettings,
    req: &SearchRequest,
    now_unix: i64,
) -> Result<SearchResponse, SearchError> {
    search_in(store, embedder, params, req, now_unix)
}

/// Run one search over any [`SearchStorage`], with days judged in UTC (see
/// [`search_at`]).
pub fn search_in(
    storage: &dyn SearchStorage,
    embedder: Option<&dyn Embedder>,
    params: &MemorySettings,
    req: &SearchRequest,
    now_unix: i64,
) -> Result<SearchResponse, SearchError> {
    search_at(storage, embedder, params, req, now_unix, 0)
}

/// Most chunks dated inside a query's date window added to the candidates.
pub const WINDOW_CANDIDATES: usize = 200;

/// [`search_in`] for a user whose time zone is `utc_offset` seconds east of UTC:
/// a date or a relative time in the query (`search::when`) is a window of that
/// zone's days ending today; chunks dated inside it (up to [`WINDOW_CANDIDATES`]
/// of them, newest first, besides the keyword and vector candidates) rank before
/// all others. A query without one is searched exactly as before.
pub fn search_at(
    storage: &dyn SearchStorage,
    embedder: Option<&dyn Embedder>,
    params: &MemorySettings,
    req: &SearchRequest,
    now_unix: i64,
    utc_offset: i32,
) -> Result<SearchResponse, SearchError> {
    let zone = chrono::FixedOffset::east_opt(utc_offset).map_or(DayZone::Machine, DayZone::Fixed);
    search_in_zone(storage, embedder, params, req, now_unix, &zone)
}

/// [`search_at`] for a user in `zone`: today is `zone`'s date now, and each day
/// of a date window is bounded with the offset in force on it (daylight saving).
pub fn search_in_zone(
    storage: &dyn SearchStorage,
    embedder: Option<&dyn Embedder>,
    params: &MemorySettings,
    req: &SearchRequest,
    now_unix: i64,
    zone: &DayZone,
) -> Result<SearchResponse, SearchError> {
    let source = check_source(storage, &req.source)?;
    let window = super::when::date_window(&req.query, zone.date_at(now_unix));
    let limit = req.limit.min(MAX_LIMIT);
    let k = limit.max(1) * params.candidate_multiplier.max(1);
    let pq = ParsedQuery::parse(&req.query);

    let (qvec, mut fallback) = if req.mode != Mode::Fts && limit > 0 {
        query_vector(storage, embedder, &req.query)?
    } else {
        (None, None)
    };
    let vector_ran = qvec.is_some();
    // A vector-only request without vectors degrades to keywords rather than nothing.
    let want_keyword = req.mode != Mode::Vector || !vector_ran;
    let keyword_ran = want_keyword && !pq.is_empty() && limit > 0;

    let mut vec_scores: HashMap<ChunkId, f64> = HashMap::new();
    if let Some(q) = &qvec {
        let (hits, fb) = storage.vector_candidates(q, k, source)?;
        fallback = fallback.or(fb);
        vec_scores = hits.into_iter().collect();
    }
    let kw_scores = if keyword_ran {
        storage.keyword_candidates(&pq, k, source, req.keyword_norm)?
    } else {
        HashMap::new()
    };
    // Identifier pins: verbatim matches of a rare identifier query.
    let pinned = match &pq.identifier {
        Some((_, ident)) if want_keyword => storage.verbatim_matches(ident, source)?,
        _ => Vec::new(),
    };

    // Union by id, fetch the rows, score each candidate.
    let mut ids: Vec<ChunkId> = vec_scores.keys().chain(kw_scores.keys()).copied().collect();
    ids.extend(&pinned);
    if let Some(w) = &window
        && limit > 0
    {
        let (start, end) = w.span_in(zone);
        ids.extend(storage.dated_between(start, end, source, WINDOW_CANDIDATES)?);
    }
    ids.sort_unstable();
    ids.dedup();
    let mut cands = Vec::with_capacity(ids.len());
    let mut cand_rows = Vec::with_capacity(ids.len());
    // The loaded model's background similarity, for calibrating cosines.
    let background = embedder.map(|e| score::background_for(e.model_id()));
    // The query's own background similarity (over a fixed sample of the index).
    let sample = match &qvec {
        Some(_) => storage.background_sample(score::QUERY_BACKGROUND_SAMPLE)?,
        None => score::BackgroundSample::default(),
    };
    let query_bg = qvec
        .as_ref()
        .and_then(|q| score::query_background(q, &sample.vectors));
    // Raw (clamped) cosines beside the calibrated scores in `cands`, for `explain`.
    let mut raw_vectors: Vec<Option<f64>> = Vec::with_capacity(ids.len());
    // Each cosine's height above the query's own background (`score::query_z`).
    let mut query_zs: Vec<Option<f64>> = Vec::with_capacity(ids.len());
    // Which candidates ask the query again (`echo::echo_factor`).
    let mut echoes: Vec<bool> = Vec::with_capacity(ids.len());
    // One id per note file among the candidates (`Candidate::note`).
    let mut note_ids: HashMap<(String, String), usize> = HashMap::new();
    for (id, row) in storage.rows(&ids, vector_ran)? {
        if source.is_some_and(|s| row.source != s) {
            continue;
        }
        // The asking session's own turns: it has them in context already.
        if is_asking_session(&row, req.exclude_session.as_deref()) {
            continue;
        }
        // The exact cosine for every candidate (keyword hits included).
        let cos = match (&qvec, &row.embedding) {
            (Some(q), Some(e)) => Some(score::cosine(q, e)),
            (Some(_), None) => None,
            _ => vec_scores.get(&id).copied(),
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
        query_zs.push(match (cos, &qvec, &background) {
            (Some(c), Some(_), Some(bg)) => score::query_z(c, query_bg.as_ref(), bg),
            _ => None,
        });
        let echo = super::echo::echo_factor(&req.query, &row.source, &row.text);
        echoes.push(echo < 1.0);
        // An echoing chunk is weighed by what it says besides the question.
        let tokens = if echo < 1.0 {
            score::token_set(&super::echo::without_echoes(&req.query, &row.text))
        } else {
            score::token_set(&row.text)
        };
        cands.push(Candidate {
            vector,
            keyword: kw_scores.get(&id).copied(),
            note_time: row.note_time,
            tokens,
            pinned: pinned.contains(&id),
            source_factor: score::source_factor(&row.source, &row.text) * echo,
            note: (row.source != SOURCE_SESSIONS).then(|| {
                let next = note_ids.len();
                *note_ids
                    .entry((row.source.clone(), row.path.clone()))
                    .or_insert(next)
            }),
        });
        cand_rows.push(row);
    }
    // Term coverage: with several word terms, keyword hits whose note holds more
    // of them come first (see `score::note_coverage`, `score::apply_coverage`).
    let word_terms = if keyword_ran {
        pq.fts_terms()
    } else {
        Vec::new()
    };
    let has_cjk = !pq.cjk_long.is_empty() || !pq.cjk_short.is_empty();
    let exponent = score::coverage_exponent(word_terms.len(), has_cjk, params.coverage);
    let mut coverage: Vec<Option<f64>> = vec![None; cands.len()];
    if exponent > 0.0 {
        let mut kw: Vec<Option<f64>> = cands.iter().map(|c| c.keyword).collect();
        let matcher = crate::words::TermMatcher::new(&word_terms);
        let masks: Vec<u64> = cand_rows
            .iter()
            .zip(&kw)
            .map(|(row, k)| match (k, &matcher) {
                (None, _) => 0,
                (Some(_), Some(m)) => m.held(&row.context, &row.text),
                (Some(_), None) => score::terms_held(
                    &word_terms,
                    &crate::words::index_words(&row.context, &row.text),
                ),
            })
            .collect();
        let notes: Vec<(&str, &str)> = cand_rows
            .iter()
            .map(|r| (r.source.as_str(), r.path.as_str()))
            .collect();
        let cov = score::note_coverage(&masks, &notes, word_terms.len());
        score::apply_coverage(&mut kw, &cov, exponent);
        for ((c, k), (slot, v)) in cands.iter_mut().zip(kw).zip(coverage.iter_mut().zip(cov)) {
            if c.keyword.is_some() {
                *slot = Some(v);
            }
            c.keyword = k;
        }
    }
    // A question asked before is not evidence of its answer: its words are the
    // query's own, so its keyword score would be the best and every note's,
    // scaled against it, would fall. The keyword scores are scaled against the
    // best hit that is not an echo and holds as many of the query's terms
    // (an echo's capped at 1); a weaker match is not lifted in its place.
    if req.keyword_norm == score::KeywordNorm::MaxScaled {
        score::rescale_past_echoes(&mut cands, &echoes, &coverage);
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
    // Nothing relevant is an answer: no keyword evidence and no vector hit above
    // what this query scores against any note → no results (unless the filter is
    // off). Only where the keyword stage ran: `--mode vector` asks for the nearest
    // chunks, keyword evidence or not. A query of made-up words (`zzqqxxnotaword`: the model's tokenizer cuts them
    // into short pieces) without keyword evidence has no footing at all; its vector
    // hits are sub-word coincidences (`rmsmkkrha` ~ a note titled `rms`), however
    // high they stand.
    let made_up = !has_cjk
        && embedder
            .is_some_and(|e| score::made_up_words(&pq.words, |w| e.token_counter().count(w)));
    if vector_ran
        && keyword_ran
        && rp.min_score > 0.0
        && score::nothing_relevant(
            &cands,
            &query_zs,
            if made_up {
                f64::INFINITY
            } else {
                score::query_clear_z(sample.chunks)
            },
        )
    {
        cands.clear();
        cand_rows.clear();
        echoes.clear();
    }
    // The stages' decisiveness is judged without the echoes.
    let fused = score::fuse_judged(&cands, &echoes, weights, params.fusion, params.fusion_gain);
    let terms = highlight_terms(&pq);
    // Inside the query's date window: dated there and with some evidence.
    let first: Vec<bool> = match &window {
        Some(w) => cands
            .iter()
            .map(|c| {
                c.note_time.is_some_and(|t| w.holds_in(t, zone))
                    && (c.pinned
                        || c.keyword.is_some_and(|k| k > 0.0)
                        || c.vector.is_some_and(|v| v > 0.0))
            })
            .collect(),
        None => Vec::new(),
    };
    let results = score::rank_fused_first(&cands, &rp, &fused.scores, now_unix, &first)
        .into_iter()
        .map(|r| {
            let (row, c) = (&cand_rows[r.index], &cands[r.index]);
            let raw_vector = raw_vectors[r.index];
            let mut hit = to_hit(row, round6(r.score), &terms);
            hit.explain = req.explain.then(|| Explain {
                vector: raw_vector.map(round6),
                vector_calibrated: c.vector.map(round6),
                vector_query_z: query_zs[r.index].map(round6),
                keyword: c.keyword.map(round6),
                coverage: coverage[r.index].map(round6),
                blended: round6(r.blended),
                relevance: round6(r.relevance),
                score: round6(r.score),
                decay: round6(r.decay),
                source_factor: round6(r.source_factor),
                mmr_rank: r.mmr_rank,
                pinned: r.pinned,
                keyword_best: r.keyword_best,
                repeats_note: r.repeats_note,
                repeated_by_transcript: r.repeated_by_transcript,
                weights,
                note_time: c.note_time,
                fusion: params.fusion,
                fusion_weights: (round6(fused.weights.0), round6(fused.weights.1)),
                decisiveness: (round6(fused.decisiveness.0), round6(fused.decisiveness.1)),
            });
            hit
        })
        .collect();
    Ok(SearchResponse {
        query: req.query.clone(),
        mode: req.mode,
        fallback,
        results,
    })
}

/// The query's embedding, or why the vector stage cannot run.
fn query_vector(
    storage: &dyn SearchStorage,
    embedder: Option<&dyn Embedder>,
    query: &str,
) -> Result<(Option<Vec<f32>>, Option<Fallback>), SearchError> {
    // The query is read as the chunks are (`crate::readable`): a pasted link or
    // a `[[wiki link]]` meets the vectors on the same terms, and a query that is
    // only an address (`file:///…`) leaves the model nothing to read.
    let query = crate::readable::readable(query);
    if query.trim().is_empty() {
        return Ok((None, None));
    }
    let index_model = storage.index_model()?.unwrap_or_default();
    Ok(match embedder {
        _ if index_model.is_empty() => (None, Some(Fallback::NoVectors)),
        None => (None, Some(Fallback::NoEmbedder)),
        Some(e) if e.model_id() != index_model => (None, Some(Fallback::ModelMismatch)),
        Some(e) => match e.embed_query(&query) {
            Ok(v) => (Some(v), None),
            Err(err) => {
                tracing::warn!("query embedding failed: {err}");
                (None, Some(Fallback::EmbedFailed))
            }
        },
    })
}

/// Whether `row` is a turn of the asking session: source `sessions`, file
/// `sessions/<exclude>` (the session's transcript file name).
fn is_asking_session(row: &ChunkRow, exclude: Option<&str>) -> bool {
    let Some(name) = exclude.filter(|n| !n.is_empty()) else {
        return false;
    };
    row.source == SOURCE_SESSIONS
        && row
            .path
            .strip_prefix("sessions/")
            .is_some_and(|file| file == name)
}

/// The terms a snippet is centred on: the identifier first, then words and CJK runs.
fn highlight_terms(pq: &ParsedQuery) -> Vec<&str> {
    let mut terms: Vec<&str> = pq.words.iter().map(String::as_str).collect();
    terms.extend(pq.cjk_long.iter().map(String::as_str));
    terms.extend(pq.cjk_short.iter().map(String::as_str));
    if let Some((_, ident)) = &pq.identifier {
        terms.insert(0, ident);
    }
    terms
}

/// A ranked row as a hit (without `explain`).
fn to_hit(row: &ChunkRow, score: f64, terms: &[&str]) -> SearchHit {
    let (start_line, end_line) = (row.start_line.max(0) as usize, row.end_line.max(0) as usize);
    SearchHit {
        citation: citation(&row.path, start_line, end_line),
        path: row.path.clone(),
        source: row.source.clone(),
        start_line,
        end_line,
        score,
        snippet: snippet(&row.text, terms, SNIPPET_CHARS),
        context: (row.source == SOURCE_SESSIONS && !row.context.is_empty())
            .then(|| row.context.clone()),
        explain: None,
    }
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

/// Resolve the source filter to a name, refusing unknown names.
fn check_source<'a>(
    storage: &dyn SearchStorage,
    f: &'a SourceFilter,
) -> Result<Option<&'a str>, SearchError> {
    let Some(name) = f.name() else {
        return Ok(None);
    };
    if name == SOURCE_MEMORY || name == SOURCE_SESSIONS {
        return Ok(Some(name));
    }
    let mut known: Vec<String> = vec![SOURCE_MEMORY.into(), SOURCE_SESSIONS.into()];
    known.extend(storage.known_sources()?);
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
