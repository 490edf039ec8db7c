//! Scoring for hybrid retrieval: BM25 normalisation, vector score calibration,
//! weighted blend, the minimum-score filter, bounded temporal decay, MMR reranking
//! with near-duplicate deferral and the identifier pin. Pure: no database, no clock
//! (callers pass `now`).
//!
//! Invariants: a pinned candidate (verbatim match of a rare identifier query) is
//! never dropped and always ends in the top 3. The minimum score is a *relevance*
//! threshold: it is applied to the blend before decay, so age never hides a hit;
//! decay only reorders, and never takes more than [`MAX_RECENCY_PENALTY`] of a
//! hit's relevance.
#![warn(missing_docs)]

use crate::chunk::is_cjk;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

/// Seconds per day, for ages.
pub const DAY_SECS: f64 = 86_400.0;
/// Token-set Jaccard similarity at or above which a candidate counts as a near
/// duplicate of one already selected: MMR defers it behind every non-duplicate.
pub const DUPLICATE_JACCARD: f64 = 0.8;
/// At most this many pinned identifier matches are placed in the top 3.
pub const MAX_PINS: usize = 3;
/// The most temporal decay can take from a hit's relevance: a dated note of any
/// age keeps at least `1 − MAX_RECENCY_PENALTY` of it (see [`recency_factor`]).
/// At 0.25 a recent note outranks an older one unless the older one is more than
/// 1/0.75 ≈ 1.33 times as relevant. Chosen on the notes-garden (the decay sweep in
/// `git show 522d4fb:BENCHMARKS.md`, "Ranking: …"): with the model, a years-old
/// journal that matches a rare query exactly is typically 1.4–1.7 times as relevant
/// as the best unrelated hits, so penalties above ~0.3 push it out of the top 6 again.
pub const MAX_RECENCY_PENALTY: f64 = 0.25;

/// How FTS5 `bm25()` ranks (negative; more negative = better) become [0,1].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeywordNorm {
    /// `relevance / max relevance` with relevance = −rank: the best hit gets 1.0, the
    /// others keep their proportion (a weak hit stays weak but non-zero; one hit = 1.0).
    #[default]
    MaxScaled,
    /// `(r − min) / (max − min)` per query: spreads the candidates over [0,1] but
    /// puts the weakest keyword candidate at 0 (all equal = 1.0).
    MinMax,
}

/// Normalise a query's FTS5 `bm25()` ranks to [0,1], higher = better.
/// (OpenClaw's `1/(1+max(0,rank))` maps every negative rank to 1.0; this does not.)
pub fn normalize_bm25(ranks: &[f64], how: KeywordNorm) -> Vec<f64> {
    let rel: Vec<f64> = ranks
        .iter()
        .map(|r| if r.is_finite() { (-r).max(0.0) } else { 0.0 })
        .collect();
    let max = rel.iter().copied().fold(0.0f64, f64::max);
    match how {
        KeywordNorm::MaxScaled => rel
            .iter()
            .map(|r| if max > 0.0 { r / max } else { 1.0 })
            .collect(),
        KeywordNorm::MinMax => {
            let min = rel.iter().copied().fold(f64::INFINITY, f64::min);
            rel.iter()
                .map(|r| {
                    if max - min > 1e-12 {
                        (r - min) / (max - min)
                    } else {
                        1.0
                    }
                })
                .collect()
        }
    }
}

/// Keyword scores (max-scaled) scaled again against the best candidate that is
/// not an echo (`echoes[i]`: candidate `i` asks the query again,
/// `search::echo`) and holds as many of the query's terms as the echoes do
/// (`coverage[i]`, [`note_coverage`]; none = all), an echo's capped at 1: the
/// scores the hits would have without the echo. Unchanged without echoes among
/// the keyword hits, or without such another hit (a weaker match is not lifted
/// to the echo's place).
pub fn rescale_past_echoes(cands: &mut [Candidate], echoes: &[bool], coverage: &[Option<f64>]) {
    let is_echo = |i: usize| echoes.get(i).copied().unwrap_or(false);
    let cov = |i: usize| coverage.get(i).copied().flatten().unwrap_or(1.0);
    let hit = |c: &Candidate| c.keyword.filter(|k| k.is_finite() && *k > 0.0);
    let Some(echo_cov) = cands
        .iter()
        .enumerate()
        .filter(|(i, c)| is_echo(*i) && hit(c).is_some())
        .map(|(i, _)| cov(i))
        .reduce(f64::max)
    else {
        return;
    };
    let best = cands
        .iter()
        .enumerate()
        .filter(|(i, _)| !is_echo(*i) && cov(*i) >= echo_cov - 1e-9)
        .filter_map(|(_, c)| hit(c))
        .fold(0.0f64, f64::max);
    if best <= 0.0 {
        return;
    }
    for c in cands.iter_mut() {
        if let Some(k) = c.keyword.as_mut() {
            *k = (*k / best).min(1.0);
        }
    }
}

/// Scale positive raw relevances by their maximum (used for the short-CJK scan).
pub fn max_scale(raw: &[f64]) -> Vec<f64> {
    let max = raw.iter().copied().fold(0.0f64, f64::max);
    raw.iter()
        .map(|r| {
            if max > 0.0 {
                (r / max).clamp(0.0, 1.0)
            } else {
                0.0
            }
        })
        .collect()
}

/// Vector score from cosine similarity: clamped to [0,1] (negative = unrelated).
/// This is the raw score shown as `vector` in `--explain`; ranking uses
/// [`calibrated_vector_score`].
pub fn vector_score(cosine: f64) -> f64 {
    if cosine.is_finite() {
        cosine.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// A model's background similarity: mean and standard deviation of the cosine
/// between a query and an unrelated chunk (see [`background`] for how it is
/// measured). Calibration expresses a cosine as standard deviations above it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Background {
    /// Mean query-to-unrelated-chunk cosine.
    pub mean: f64,
    /// Its standard deviation.
    pub std: f64,
}

/// all-MiniLM-L6-v2 (fp32 ONNX, model.onnx sha256 98913551c075…), measured by
/// `tests/ranking_calibration.rs` (garden note titles × other garden notes; the
/// test fails if these constants drift from the measurement).
pub const MINILM_L6_V2_BACKGROUND: Background = Background {
    mean: 0.1008,
    std: 0.0775,
};

/// all-MiniLM-L6-v2's int8 graph (`model_int8.onnx` as `claw memory
/// install-model` quantizes it, per output channel, sha256 ceb1c9d4e432…),
/// measured by the same test.
pub const MINILM_L6_V2_INT8_BACKGROUND: Background = Background {
    mean: 0.1051,
    std: 0.0770,
};

/// Models whose background has been measured: (model id suffix, background). The
/// model id is `<dir>[:int8]@<sha256 prefix of the graph>`; the digest identifies
/// the graph.
pub const MEASURED_BACKGROUNDS: &[(&str, Background)] = &[
    ("@98913551c075", MINILM_L6_V2_BACKGROUND),
    ("@ceb1c9d4e432", MINILM_L6_V2_INT8_BACKGROUND),
];

/// How unusual a cosine must be for its model (standard deviations above the
/// background mean) for a vector-only hit to clear the default minimum score in
/// hybrid search. Chosen on `fixtures/paraphrase/` (the sweep is in
/// `git show 522d4fb:BENCHMARKS.md`, "Paraphrase fixture"): 2.25 keeps
/// should-find-nothing queries at their floor while admitting the most paraphrases.
pub const CLEAR_Z: f64 = 2.25;
/// The calibrated score at [`CLEAR_Z`]: a vector-only hit's relevance is
/// `0.7 × calibrated`, which meets the default minimum score 0.35 at 0.5.
pub const CLEAR_SCORE: f64 = 0.5;
/// Calibrated score per background standard deviation. Equal to MiniLM's own
/// spread, so with MiniLM calibration only shifts cosines: the hybrid ordering (and
/// the blend weights tuned on it) are unchanged; another model's cosines are
/// rescaled onto the same footing.
pub const CALIBRATED_SCORE_PER_STD: f64 = MINILM_L6_V2_BACKGROUND.std;
/// Calibrated score of a cosine at the background mean (z = 0).
pub const CALIBRATED_BACKGROUND_SCORE: f64 = CLEAR_SCORE - CALIBRATED_SCORE_PER_STD * CLEAR_Z;

/// The background for `model_id`: measured, or (until backgrounds are measured at
/// index time) MiniLM's as the reference for unmeasured models.
pub fn background_for(model_id: &str) -> Background {
    MEASURED_BACKGROUNDS
        .iter()
        .find(|(suffix, _)| model_id.ends_with(suffix))
        .map(|(_, b)| *b)
        .unwrap_or(MINILM_L6_V2_BACKGROUND)
}

/// Calibrated vector score in [0,1]: `CLEAR_SCORE + CALIBRATED_SCORE_PER_STD ×
/// (z − CLEAR_Z)` with `z = (cosine − mean) / std` against the model's background,
/// clamped; with MiniLM that is `cosine + 0.2248`. A cosine as unusual for its
/// model scores the same whatever the model; a degenerate background (std ≤ 0)
/// falls back to the raw clamped cosine.
pub fn calibrated_vector_score(cosine: f64, bg: &Background) -> f64 {
    calibrated_vector_score_at(cosine, bg, CLEAR_Z)
}

/// [`calibrated_vector_score`] with another clearing point `clear_z` (for the
/// sweep that chose [`CLEAR_Z`]).
pub fn calibrated_vector_score_at(cosine: f64, bg: &Background, clear_z: f64) -> f64 {
    if !cosine.is_finite() {
        return 0.0;
    }
    if !(bg.std.is_finite() && bg.std > 0.0 && bg.mean.is_finite()) {
        return vector_score(cosine);
    }
    let z = (cosine - bg.mean) / bg.std;
    (CLEAR_SCORE + CALIBRATED_SCORE_PER_STD * (z - clear_z)).clamp(0.0, 1.0)
}

/// The background of a model from its vectors: the mean and (population)
/// standard deviation of the cosine of every (query, passage) pair, where the
/// passages are unrelated to the queries (e.g. note titles against *other* notes).
/// `None` without pairs.
pub fn background(queries: &[Vec<f32>], passages: &[Vec<f32>]) -> Option<Background> {
    let (mut n, mut sum, mut sq) = (0usize, 0.0f64, 0.0f64);
    for q in queries {
        for p in passages {
            let c = cosine(q, p);
            n += 1;
            sum += c;
            sq += c * c;
        }
    }
    if n == 0 {
        return None;
    }
    let mean = sum / n as f64;
    let var = (sq / n as f64 - mean * mean).max(0.0);
    Some(Background {
        mean,
        std: var.sqrt(),
    })
}

/// Cosine similarity of two vectors (0 when either is zero or lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0.0f32, 0.0f32, 0.0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        (dot / (na.sqrt() * nb.sqrt())) as f64
    }
}

/// How many chunks a query's own background similarity is measured on
/// ([`QueryBackground`]): spread evenly over the index, so the same chunks for
/// every query of an unchanged index.
pub const QUERY_BACKGROUND_SAMPLE: usize = 256;

/// What [`SearchStorage::background_sample`](super::storage::SearchStorage::background_sample)
/// reads: sampled chunk vectors and how many chunks the index holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackgroundSample {
    /// Vectors of chunks spread evenly over the index.
    pub vectors: Vec<Vec<f32>>,
    /// How many chunks the index holds (approximately: the id range sampled).
    pub chunks: usize,
}
/// Fewest sampled vectors for a query's own background to count; below it (a
/// small index) the model's background stands for it.
pub const QUERY_BACKGROUND_MIN: usize = 16;

/// A query's own background similarity: the mean and standard deviation of its
/// cosine with chunks sampled over the whole index. The model's background
/// ([`Background`]) is an average over ordinary queries; a query can sit far from
/// it: a nonsense word (`zzqqxxnotaword`) is about as close to *every* note as to
/// its best hits, so its best cosine, unremarkable for that query, still clears the
/// model-wide bar. Measured per query in [`query_background`].
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct QueryBackground {
    /// Mean cosine of the query with the sampled chunks.
    pub mean: f64,
    /// Their (population) standard deviation.
    pub std: f64,
    /// How many chunks were sampled.
    pub n: usize,
}

/// The query's own background over `sample` (chunk vectors), or `None` with fewer
/// than [`QUERY_BACKGROUND_MIN`] usable vectors.
pub fn query_background(q: &[f32], sample: &[Vec<f32>]) -> Option<QueryBackground> {
    let cos: Vec<f64> = sample
        .iter()
        .filter(|v| v.len() == q.len())
        .map(|v| cosine(q, v))
        .filter(|c| c.is_finite())
        .collect();
    if cos.len() < QUERY_BACKGROUND_MIN {
        return None;
    }
    let n = cos.len() as f64;
    let mean = cos.iter().sum::<f64>() / n;
    let var = (cos.iter().map(|c| c * c).sum::<f64>() / n - mean * mean).max(0.0);
    Some(QueryBackground {
        mean,
        std: var.sqrt(),
        n: cos.len(),
    })
}

/// How far a cosine stands above its query's own background, in the model's
/// background standard deviations: `(cosine − query mean) / model std`. Without a
/// query background the model's mean stands for it (then this is the model-wide z
/// that [`calibrated_vector_score`] uses). `None` for a degenerate model background.
/// (The query's own spread is not used: made-up words sit in a narrow band, which
/// would make their best hit look *more* unusual.)
pub fn query_z(cosine: f64, qbg: Option<&QueryBackground>, bg: &Background) -> Option<f64> {
    if !(cosine.is_finite() && bg.std.is_finite() && bg.std > 0.0) {
        return None;
    }
    let mean = qbg.map_or(bg.mean, |b| b.mean);
    Some((cosine - mean) / bg.std)
}

/// How far above the expected best background cosine ([`query_clear_z`]) the best
/// vector hit of a query without keyword evidence must stand for the query to have
/// found anything, in background standard deviations. Chosen on
/// `fixtures/paraphrase/` (every paraphrase found before is still found: the lowest
/// of them without keyword evidence stands at 3.55 over 50 chunks, bar 2.80 +
/// margin; 0.75 would also drop the one should-find-nothing hit, at 3.54, too close
/// to call) and on random-word queries against the notes garden (the highest of them
/// not caught as made-up words stands at ~4.6 over 12,295 chunks, bar 4.34 +
/// margin); the measurements are `ranking_paraphrase` (the gate sweep) and
/// `examples/ranking_garden` (random words).
pub const QUERY_CLEAR_MARGIN: f64 = 0.5;

/// The height ([`query_z`]) a vector hit must reach over an index of `chunks`
/// chunks for a query without keyword evidence to have found anything:
/// `√(2 ln chunks) + QUERY_CLEAR_MARGIN`. The best of `n` cosines drawn from a
/// query's background lands near `√(2 ln n)` standard deviations above its mean, so
/// the larger the index, the higher an unrelated best hit stands by chance alone
/// (2.9 for 60 chunks, 4.3 for 12,000).
pub fn query_clear_z(chunks: usize) -> f64 {
    let n = chunks.max(2) as f64;
    (2.0 * n.ln()).sqrt() + QUERY_CLEAR_MARGIN
}

/// Below this many characters per model token, a word is made up: the model's
/// tokenizer knows real words whole or in a few long pieces (`houseplants` =
/// house·plant·s, 3.7 characters a piece), while random letters fall apart into
/// one- and two-letter pieces (about 2: `rmsmkkrha` = rms·mk·kr·ha).
pub const MADE_UP_CHARS_PER_TOKEN: f64 = 3.0;

/// Whether `words` (a query's words) are all made up: no word with letters is one
/// model token or splits into pieces of [`MADE_UP_CHARS_PER_TOKEN`] characters or
/// more on average (`count` = the model's token count of one word). `false`
/// without words with letters. A query of made-up words with no keyword evidence
/// finds nothing, whatever its vector hits ([`nothing_relevant`] with an infinite
/// bar).
pub fn made_up_words(words: &[String], count: impl Fn(&str) -> usize) -> bool {
    let mut any = false;
    for w in words.iter().filter(|w| w.chars().any(char::is_alphabetic)) {
        any = true;
        let tokens = count(w).max(1);
        if tokens == 1 || w.chars().count() as f64 >= MADE_UP_CHARS_PER_TOKEN * tokens as f64 {
            return false;
        }
    }
    any
}

/// "Nothing relevant": true when no candidate has keyword evidence (a keyword
/// score or an identifier pin) and no candidate's vector stands at least
/// `clear_z` above the query's own background (`query_zs[i]` from [`query_z`],
/// `None` = no vector evidence). Such a query returns no results: its best hit is
/// what any note would score.
pub fn nothing_relevant(cands: &[Candidate], query_zs: &[Option<f64>], clear_z: f64) -> bool {
    let keyword = cands
        .iter()
        .any(|c| c.pinned || c.keyword.is_some_and(|k| k > 0.0));
    if keyword {
        return false;
    }
    !query_zs.iter().flatten().any(|z| *z >= clear_z)
}

/// The place of transcripts in the ranking: a hit from the session transcripts
/// (source `sessions`) scores this share of what a note (MEMORY.md, `memory/`, a
/// registered folder) of equal relevance scores. Notes are what the user wrote;
/// transcripts are what was said, often the assistant repeating a note. So without a
/// `source` filter a transcript outranks a note only when it is more than
/// 1/0.8 = 1.25 times as relevant. Like decay it only reorders: the minimum score
/// tests the relevance before it.
pub const TRANSCRIPT_FACTOR: f64 = 0.8;
/// The assistant's own words rank below the user's: a transcript chunk made only of
/// assistant turns scores this share of a user-turn chunk of equal relevance (a
/// mixed chunk in proportion to its assistant text), on top of
/// [`TRANSCRIPT_FACTOR`]. An assistant answer that repeats a note (the echo) must
/// be more than 1/(0.8 × 0.75) ≈ 1.67 times as relevant as the note to outrank it.
pub const ASSISTANT_FACTOR: f64 = 0.75;

/// The share of a transcript chunk's text in assistant turns. Transcript chunks
/// are `role: text` messages one after another (`transcript::parse_line`); a line
/// starting `assistant: ` or `user: ` opens a message, other lines continue the
/// one before. Text before any such line counts as the user's.
pub fn assistant_share(text: &str) -> f64 {
    let (mut assistant, mut total) = (0usize, 0usize);
    let mut in_assistant = false;
    for line in text.lines() {
        if line.starts_with("assistant: ") {
            in_assistant = true;
        } else if line.starts_with("user: ") {
            in_assistant = false;
        }
        let n = line.chars().count() + 1;
        total += n;
        if in_assistant {
            assistant += n;
        }
    }
    if total == 0 {
        0.0
    } else {
        assistant as f64 / total as f64
    }
}

/// The factor a hit's score is multiplied by for its source: 1 for notes;
/// [`TRANSCRIPT_FACTOR`] for transcript text of the user, down to
/// `TRANSCRIPT_FACTOR × ASSISTANT_FACTOR` for the assistant's ([`assistant_share`]).
pub fn source_factor(source: &str, text: &str) -> f64 {
    if source != crate::walk::SOURCE_SESSIONS {
        return 1.0;
    }
    let a = assistant_share(text);
    TRANSCRIPT_FACTOR * (1.0 - (1.0 - ASSISTANT_FACTOR) * a)
}

/// Blend weights actually applied: the configured weights of the stages that ran,
/// renormalised to sum 1 (so a keyword-only search is not capped at `text_weight`).
pub fn effective_weights(
    vector_weight: f64,
    text_weight: f64,
    vector_ran: bool,
    keyword_ran: bool,
) -> (f64, f64) {
    let v = if vector_ran {
        vector_weight.max(0.0)
    } else {
        0.0
    };
    let t = if keyword_ran {
        text_weight.max(0.0)
    } else {
        0.0
    };
    if v + t > 0.0 {
        (v / (v + t), t / (v + t))
    } else if vector_ran {
        (1.0, 0.0)
    } else if keyword_ran {
        (0.0, 1.0)
    } else {
        (0.0, 0.0)
    }
}

/// `w_v × vector + w_t × keyword`, a missing component counting 0.
pub fn blend(vector: Option<f64>, keyword: Option<f64>, weights: (f64, f64)) -> f64 {
    weights.0 * vector.unwrap_or(0.0) + weights.1 * keyword.unwrap_or(0.0)
}

/// How the two stages' scores become one relevance per candidate (`memory.fusion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fusion {
    /// The configured weights, re-weighted per query by how decisive each stage's
    /// own score distribution is ([`adaptive_weights`]).
    #[default]
    Adaptive,
    /// The configured weights as they are: `w_v × vector + w_t × keyword`.
    Linear,
    /// Reciprocal rank fusion, `Σ 1 / (RRF_K + rank)` over the stages, scaled so a
    /// candidate first in both stages scores 1 ([`rrf_scores`]).
    Rrf,
}

impl Fusion {
    /// The config / JSON name (`adaptive`, `linear`, `rrf`).
    pub fn name(self) -> &'static str {
        match self {
            Fusion::Adaptive => "adaptive",
            Fusion::Linear => "linear",
            Fusion::Rrf => "rrf",
        }
    }

    /// Parse a config name.
    pub fn parse(s: &str) -> Option<Fusion> {
        match s {
            "adaptive" => Some(Fusion::Adaptive),
            "linear" => Some(Fusion::Linear),
            "rrf" => Some(Fusion::Rrf),
            _ => None,
        }
    }
}

/// The `k` of reciprocal rank fusion (the usual 60).
pub const RRF_K: f64 = 60.0;
/// How many runner-up scores a stage's best score is compared with to judge how
/// decisive the stage is for a query ([`stage_decisiveness`]). Fixed (not the
/// candidate count), so the weights do not depend on the result limit.
pub const DECISIVE_WINDOW: usize = 5;
/// Adaptive fusion's gain: a stage's weight is multiplied by `1 + gain × d`, `d`
/// its decisiveness in [0,1], before the two weights are renormalised. 0 = linear.
/// Chosen on the notes-garden rare-pair set (`git show 522d4fb:BENCHMARKS.md`,
/// "Fusion: adaptive stage weights"): 4 is the smallest gain tried that finds all
/// 25 dated notes with default decay (linear 20, gain 2 23).
pub const ADAPTIVE_GAIN: f64 = 4.0;

/// How decisive one stage is for a query, in [0,1]: how far its best score stands
/// above the mean of the next [`DECISIVE_WINDOW`] scores, as a fraction of the best
/// score's height above `floor` (the score of no evidence: 0 for keywords, the
/// calibrated background for vectors). Missing runners-up count as `floor` (a
/// keyword stage with one hit is fully decisive); no score above `floor` = 0.
/// `scores` may be in any order; non-finite scores are ignored.
pub fn stage_decisiveness(scores: &[f64], floor: f64) -> f64 {
    let mut s: Vec<f64> = scores.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(|a, b| b.total_cmp(a));
    let Some(&top) = s.first() else {
        return 0.0;
    };
    if top <= floor {
        return 0.0;
    }
    let rest: f64 = (1..=DECISIVE_WINDOW)
        .map(|i| s.get(i).copied().unwrap_or(floor).max(floor))
        .sum::<f64>()
        / DECISIVE_WINDOW as f64;
    ((top - rest) / (top - floor)).clamp(0.0, 1.0)
}

/// The per-query weights of adaptive fusion: each stage's configured weight
/// (`weights` = effective (vector, keyword)) times `1 + gain × decisiveness`,
/// renormalised to the configured total. A stage without hits keeps decisiveness 0;
/// a stage with weight 0 stays at 0. Returns (weights, (vector, keyword)
/// decisiveness).
pub fn adaptive_weights(
    cands: &[Candidate],
    weights: (f64, f64),
    gain: f64,
) -> ((f64, f64), (f64, f64)) {
    let vs: Vec<f64> = cands.iter().filter_map(|c| c.vector).collect();
    let ks: Vec<f64> = cands.iter().filter_map(|c| c.keyword).collect();
    weights_from_stages(&vs, &ks, weights, gain)
}

/// [`adaptive_weights`] from the two stages' scores.
fn weights_from_stages(
    vs: &[f64],
    ks: &[f64],
    weights: (f64, f64),
    gain: f64,
) -> ((f64, f64), (f64, f64)) {
    let dv = stage_decisiveness(vs, CALIBRATED_BACKGROUND_SCORE);
    let dk = stage_decisiveness(ks, 0.0);
    let g = if gain.is_finite() { gain.max(0.0) } else { 0.0 };
    let (wv, wt) = (weights.0 * (1.0 + g * dv), weights.1 * (1.0 + g * dk));
    let total = weights.0 + weights.1;
    let w = if wv + wt > 0.0 {
        (total * wv / (wv + wt), total * wt / (wv + wt))
    } else {
        weights
    };
    (w, (dv, dk))
}

/// Reciprocal rank fusion of the candidates: each stage ranks the candidates it
/// scored (best = rank 1, ties by input order); a candidate's score is
/// `Σ 1/(RRF_K + rank)` over the stages with a non-zero weight, divided by what
/// first place in all of them would give, so it lies in [0,1].
pub fn rrf_scores(cands: &[Candidate], weights: (f64, f64)) -> Vec<f64> {
    let mut out = vec![0.0f64; cands.len()];
    let mut stages = 0usize;
    let mut add = |get: &dyn Fn(&Candidate) -> Option<f64>| {
        let mut idx: Vec<(usize, f64)> = cands
            .iter()
            .enumerate()
            .filter_map(|(i, c)| get(c).filter(|x| x.is_finite()).map(|x| (i, x)))
            .collect();
        idx.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (rank, (i, _)) in idx.iter().enumerate() {
            out[*i] += 1.0 / (RRF_K + rank as f64 + 1.0);
        }
        stages += 1;
    };
    if weights.0 > 0.0 {
        add(&|c: &Candidate| c.vector);
    }
    if weights.1 > 0.0 {
        add(&|c: &Candidate| c.keyword);
    }
    let best = stages as f64 / (RRF_K + 1.0);
    if best > 0.0 {
        for x in &mut out {
            *x /= best;
        }
    }
    out
}

/// The fused scores of one query's candidates and the weights behind them.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// Per candidate (input order): the score results are ordered by, before decay.
    pub scores: Vec<f64>,
    /// The (vector, keyword) weights applied for this query (the configured ones for
    /// `linear`; the adaptive ones; for `rrf`, the configured ones, which only say
    /// which stages take part).
    pub weights: (f64, f64),
    /// How decisive each stage's score distribution was, (vector, keyword)
    /// ([`stage_decisiveness`]); computed for every fusion.
    pub decisiveness: (f64, f64),
}

/// Fuse the candidates' stage scores with `fusion` (`weights` = effective
/// configured weights; `gain` = adaptive gain, see [`ADAPTIVE_GAIN`]).
pub fn fuse(cands: &[Candidate], weights: (f64, f64), fusion: Fusion, gain: f64) -> Fused {
    fuse_judged(cands, &[], weights, fusion, gain)
}

/// [`fuse`] with the stages' decisiveness judged without the candidates marked
/// in `unjudged` (echoes of the query, `search::echo`: the query's own words,
/// which would make the vector stage look decisive and the keyword stage not).
pub fn fuse_judged(
    cands: &[Candidate],
    unjudged: &[bool],
    weights: (f64, f64),
    fusion: Fusion,
    gain: f64,
) -> Fused {
    let judged = || {
        cands
            .iter()
            .enumerate()
            .filter(|(i, _)| !unjudged.get(*i).copied().unwrap_or(false))
            .map(|(_, c)| c)
    };
    let vs: Vec<f64> = judged().filter_map(|c| c.vector).collect();
    let ks: Vec<f64> = judged().filter_map(|c| c.keyword).collect();
    let (adaptive, decisiveness) = weights_from_stages(&vs, &ks, weights, gain);
    let (scores, weights) = match fusion {
        Fusion::Linear => (
            cands
                .iter()
                .map(|c| blend(c.vector, c.keyword, weights))
                .collect(),
            weights,
        ),
        Fusion::Adaptive => (
            cands
                .iter()
                .map(|c| blend(c.vector, c.keyword, adaptive))
                .collect(),
            adaptive,
        ),
        Fusion::Rrf => (rrf_scores(cands, weights), weights),
    };
    Fused {
        scores,
        weights,
        decisiveness,
    }
}

/// Temporal decay factor `exp(−ln2 / half_life × age_days)` for a chunk dated
/// `note_time` (unix seconds). Evergreen (`None`) and future dates give 1; so does a
/// non-positive or non-finite half-life.
pub fn decay_factor(note_time: Option<i64>, now_unix: i64, half_life_days: f64) -> f64 {
    let Some(t) = note_time else {
        return 1.0;
    };
    if !(half_life_days.is_finite() && half_life_days > 0.0) {
        return 1.0;
    }
    let age_days = (now_unix as f64 - t as f64) / DAY_SECS;
    // Future dates (and NaN) never boost: factor 1.
    if age_days.is_nan() || age_days <= 0.0 {
        return 1.0;
    }
    (-(std::f64::consts::LN_2 / half_life_days) * age_days).exp()
}

/// Bounded recency preference for a chunk dated `note_time`:
/// `1 − max_penalty × (1 − decay_factor)`, i.e. 1 for evergreen notes and today,
/// `1 − max_penalty / 2` at one half-life, approaching `1 − max_penalty` (never 0)
/// for ancient notes. `max_penalty` is clamped to [0,1] (NaN = 0).
pub fn recency_factor(
    note_time: Option<i64>,
    now_unix: i64,
    half_life_days: f64,
    max_penalty: f64,
) -> f64 {
    let a = if max_penalty.is_nan() {
        0.0
    } else {
        max_penalty.clamp(0.0, 1.0)
    };
    1.0 - a * (1.0 - decay_factor(note_time, now_unix, half_life_days))
}

/// Which of a query's word terms a chunk holds, as a bit mask (bit `i` for
/// `terms[i]`; at most 64 terms, as `query::MAX_TERMS`): `terms` as the word index
/// holds them ([`crate::search::query::ParsedQuery::fts_terms`]: stems, a phrase's
/// tokens space-separated), `words` the chunk's word-index text
/// ([`crate::words::index_words`]). A phrase term counts when all its tokens are there.
pub fn terms_held(terms: &[String], words: &str) -> u64 {
    let held: std::collections::HashSet<&str> = words.split(' ').collect();
    let mut mask = 0u64;
    for (i, t) in terms.iter().take(64).enumerate() {
        if t.split(' ').all(|tok| held.contains(tok)) {
            mask |= 1 << i;
        }
    }
    mask
}

/// Term coverage per candidate, note-level: the share of the query's `n_terms`
/// word terms held by the candidate's note, i.e. by the union of `masks` (from
/// [`terms_held`]) over the candidates of the same note (`note[i]` identifies
/// candidate i's file). A rare pair whose words sit in two chunks of one note
/// covers the query fully, as the note does.
pub fn note_coverage<K: Eq + std::hash::Hash>(
    masks: &[u64],
    note: &[K],
    n_terms: usize,
) -> Vec<f64> {
    let mut by_note: HashMap<&K, u64> = HashMap::new();
    for (m, k) in masks.iter().zip(note) {
        *by_note.entry(k).or_insert(0) |= m;
    }
    let n = n_terms.clamp(1, 64) as f64;
    note.iter()
        .map(|k| by_note.get(k).map_or(0, |m| m.count_ones()) as f64 / n)
        .collect()
}

/// The default `memory.coverage`: the numerator of [`coverage_exponent`].
pub const COVERAGE_STRENGTH: f64 = 2.0;

/// How strongly term coverage re-weights a query's keyword scores: `strength /
/// n_terms`, at most 1 (with the default 2, a two-word query counts fully; the terms
/// of a long natural-language query matter less one by one and BM25's own sum is
/// left to weigh them), and not at all for a query with CJK text: its word terms are
/// then mostly fragments of CJK runs (`20世纪70年代` → `20`, `70`), which the trigram
/// stage searches whole. Measured on SciFact train, XQuAD-zh and the garden
/// rare-pair set (`git show 522d4fb:BENCHMARKS.md`, issue 17).
pub fn coverage_exponent(n_terms: usize, has_cjk: bool, strength: f64) -> f64 {
    if n_terms < 2 || has_cjk {
        return 0.0;
    }
    (strength / n_terms as f64).clamp(0.0, 1.0)
}

/// Keyword scores re-weighted by term coverage: `scores[i] × coverage[i]^exponent`
/// (see [`note_coverage`], [`coverage_exponent`]), then max-scaled again. Among the
/// keyword hits of a query with several terms, a chunk whose note has every term
/// outranks one that matched a single term very strongly (BM25 alone lets one
/// rare word in a short chunk beat a longer chunk with both words of a rare pair,
/// worse once stems make rare words commoner), while the best hit still scores 1,
/// so a query keeps its best keyword hit whatever its coverage; a hit holding
/// fewer of the terms than others may fall under the minimum score. `None` stays
/// `None`.
pub fn apply_coverage(scores: &mut [Option<f64>], coverage: &[f64], exponent: f64) {
    let mut max = 0.0f64;
    for (s, c) in scores.iter_mut().zip(coverage) {
        if let Some(v) = s {
            *v *= c.powf(exponent);
            max = max.max(*v);
        }
    }
    if max > 0.0 {
        for v in scores.iter_mut().flatten() {
            *v /= max;
        }
    }
}

/// The token set used for MMR similarity: lower-cased words (runs of letters and
/// digits outside CJK) plus CJK character bigrams (a lone CJK character counts as
/// itself), hashed, sorted, de-duplicated.
pub fn token_set(text: &str) -> Vec<u64> {
    fn h(s: &str) -> u64 {
        let mut hasher = DefaultHasher::new();
        s.hash(&mut hasher);
        hasher.finish()
    }
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk_run: Vec<char> = Vec::new();
    let flush_cjk = |run: &mut Vec<char>, out: &mut Vec<u64>| {
        if run.len() == 1 {
            out.push(h(&run[0].to_string()));
        }
        for w in run.windows(2) {
            out.push(h(&w.iter().collect::<String>()));
        }
        run.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                out.push(h(&word));
                word.clear();
            }
            cjk_run.push(c);
        } else {
            flush_cjk(&mut cjk_run, &mut out);
            if c.is_alphanumeric() {
                word.extend(c.to_lowercase());
            } else if !word.is_empty() {
                out.push(h(&word));
                word.clear();
            }
        }
    }
    if !word.is_empty() {
        out.push(h(&word));
    }
    flush_cjk(&mut cjk_run, &mut out);
    out.sort_unstable();
    out.dedup();
    out
}

/// The number of tokens two sorted, de-duplicated token sets share.
fn shared(a: &[u64], b: &[u64]) -> usize {
    let (mut i, mut j, mut inter) = (0, 0, 0usize);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter
}

/// Jaccard similarity of two sorted, de-duplicated token sets (two empty sets = 0).
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 0.0;
    }
    let inter = shared(a, b);
    inter as f64 / (a.len() + b.len() - inter) as f64
}

/// The share of `part`'s tokens that `whole` holds (sorted, de-duplicated token
/// sets; an empty `part` = 0).
pub fn containment(part: &[u64], whole: &[u64]) -> f64 {
    if part.is_empty() {
        return 0.0;
    }
    shared(part, whole) as f64 / part.len() as f64
}

/// A transcript chunk at least this share of whose tokens one kept note holds
/// (its kept chunks together) says nothing the note does not: it repeats it
/// (`cap_repeats_of_notes`).
pub const REPEAT_CONTAINMENT: f64 = 0.75;

/// A transcript chunk's tokens without its `user:` / `assistant:` labels (its
/// format, not what was said).
fn said_tokens(tokens: &[u64]) -> Vec<u64> {
    let labels = token_set("user assistant");
    tokens
        .iter()
        .copied()
        .filter(|t| !labels.contains(t))
        .collect()
}

/// The notes of the candidates `chunks` (indices into `cands`; transcript
/// chunks are skipped): each note's id, its chunks' tokens together (sorted,
/// de-duplicated) and its chunks among `chunks`.
fn notes_of(
    cands: &[Candidate],
    chunks: impl Iterator<Item = usize>,
) -> Vec<(usize, Vec<u64>, Vec<usize>)> {
    let mut notes: Vec<(usize, Vec<u64>, Vec<usize>)> = Vec::new();
    for i in chunks {
        let Some(id) = cands[i].note else { continue };
        match notes.iter_mut().find(|(n, _, _)| *n == id) {
            Some((_, toks, idx)) => {
                toks.extend_from_slice(&cands[i].tokens);
                idx.push(i);
            }
            None => notes.push((id, cands[i].tokens.clone(), vec![i])),
        }
    }
    for (_, toks, _) in &mut notes {
        toks.sort_unstable();
        toks.dedup();
    }
    notes
}

/// A kept transcript chunk that repeats a note the minimum score left out (its
/// tokens at least [`REPEAT_CONTAINMENT`] contained in the note's candidate
/// chunks) lends that note its relevance: the note's best chunk is kept with
/// the transcript's relevance and fused score where they are higher than its
/// own. The exchange says nothing the note does not, so what made it relevant
/// (the question it answered, or a denser wording) points at the note; the note
/// then ranks first and the repeat below it ([`cap_repeats_of_notes`]). Without
/// this, an earlier answer stands in for the note it repeats whenever the
/// note's own wording is too far from the query.
fn lend_to_repeated_notes(cands: &[Candidate], scored: &mut [Ranked], kept: &mut Vec<usize>) {
    let kept_notes: Vec<usize> = kept.iter().filter_map(|&i| cands[i].note).collect();
    let left_out = notes_of(
        cands,
        (0..cands.len()).filter(|&i| cands[i].note.is_some_and(|n| !kept_notes.contains(&n))),
    );
    if left_out.is_empty() {
        return;
    }
    let mut lent: Vec<(usize, usize)> = Vec::new();
    for &i in kept.iter() {
        if cands[i].note.is_some() {
            continue;
        }
        let said = said_tokens(&cands[i].tokens);
        for (_, toks, chunks) in &left_out {
            if containment(&said, toks) < REPEAT_CONTAINMENT {
                continue;
            }
            // The note's chunk that holds most of what the transcript says.
            let best = chunks.iter().copied().max_by(|&a, &b| {
                containment(&said, &cands[a].tokens)
                    .total_cmp(&containment(&said, &cands[b].tokens))
                    .then(scored[a].relevance.total_cmp(&scored[b].relevance))
            });
            if let Some(j) = best {
                lent.push((j, i));
            }
        }
    }
    for (j, i) in lent {
        let (relevance, blended) = (scored[i].relevance, scored[i].blended);
        let r = &mut scored[j];
        r.relevance = r.relevance.max(relevance);
        r.blended = r.blended.max(blended);
        r.score = r.blended * r.decay * r.source_factor;
        r.repeated_by_transcript = true;
        if !kept.contains(&j) {
            kept.push(j);
        }
    }
}

/// A transcript chunk that repeats a note (its tokens at least
/// [`REPEAT_CONTAINMENT`] contained in the union of that note's kept chunks) is
/// not more relevant than the note, whatever its own scores say: a session
/// holds the note's densest lines in one short chunk, which outscores the longer
/// note chunk. Its score is capped at the note's best score × its own source
/// factor, so the note ranks first and MMR defers the repeat, not the note.
/// A transcript that adds to the note (under the containment) keeps its score;
/// with the note not among `kept` nothing is capped.
fn cap_repeats_of_notes(cands: &[Candidate], scored: &mut [Ranked], kept: &[usize]) {
    // The kept notes: their chunks' tokens together, and their best score.
    let notes: Vec<(Vec<u64>, f64)> = notes_of(cands, kept.iter().copied())
        .into_iter()
        .map(|(_, toks, chunks)| {
            let best = chunks
                .iter()
                .map(|&c| scored[c].score)
                .fold(f64::NEG_INFINITY, f64::max);
            (toks, best)
        })
        .collect();
    for &i in kept {
        if cands[i].note.is_some() {
            continue;
        }
        let said = said_tokens(&cands[i].tokens);
        let cap = notes
            .iter()
            .filter(|(toks, _)| containment(&said, toks) >= REPEAT_CONTAINMENT)
            .map(|(_, best)| best * scored[i].source_factor)
            .fold(f64::INFINITY, f64::min);
        if scored[i].score > cap {
            scored[i].score = cap;
            scored[i].repeats_note = true;
        }
    }
}

/// Min-max normalise to [0,1] (all equal = 1.0).
pub fn min_max(xs: &[f64]) -> Vec<f64> {
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    xs.iter()
        .map(|x| {
            if max - min > 1e-12 {
                (x - min) / (max - min)
            } else {
                1.0
            }
        })
        .collect()
}

/// Maximal marginal relevance: select up to `k` indices greedily by
/// `λ·rel − (1−λ)·max_sim(selected)`, relevance min-max normalised, similarity =
/// Jaccard over [`token_set`]s. A candidate whose similarity to a selected one is at
/// least [`DUPLICATE_JACCARD`] is deferred until no other candidate is left, so
/// near-duplicates never fill the results. Ties keep the input order.
pub fn mmr_select(relevance: &[f64], tokens: &[Vec<u64>], lambda: f64, k: usize) -> Vec<usize> {
    let n = relevance.len().min(tokens.len());
    let rel = min_max(&relevance[..n]);
    let mut max_sim = vec![0.0f64; n];
    let mut taken = vec![false; n];
    let mut out = Vec::with_capacity(k.min(n));
    while out.len() < k.min(n) {
        let mut best: Option<(usize, bool, f64)> = None;
        for i in 0..n {
            if taken[i] {
                continue;
            }
            let dup = max_sim[i] >= DUPLICATE_JACCARD;
            let v = lambda * rel[i] - (1.0 - lambda) * max_sim[i];
            let better = match best {
                None => true,
                Some((_, bdup, bv)) => (bdup && !dup) || (bdup == dup && v > bv),
            };
            if better {
                best = Some((i, dup, v));
            }
        }
        let Some((pick, _, _)) = best else { break };
        taken[pick] = true;
        out.push(pick);
        for i in 0..n {
            if !taken[i] {
                let s = jaccard(&tokens[i], &tokens[pick]);
                if s > max_sim[i] {
                    max_sim[i] = s;
                }
            }
        }
    }
    out
}

/// Move `pins` (indices that must appear in the first `slots` places, normally
/// [`MAX_PINS`]) into `order`: a pin already high enough keeps its place; others are
/// inserted so every pin lands within the first `slots` places. Pins beyond `slots`
/// are ignored. Returns the new order (longer by the pins not yet present).
pub fn place_pins(order: &[usize], pins: &[usize], slots: usize) -> Vec<usize> {
    let pins: Vec<usize> = pins.iter().copied().take(slots).collect();
    if pins.is_empty() {
        return order.to_vec();
    }
    // Position of each pin in the current order (absent = end).
    let mut with_pos: Vec<(usize, usize)> = pins
        .iter()
        .map(|p| (order.iter().position(|o| o == p).unwrap_or(usize::MAX), *p))
        .collect();
    with_pos.sort();
    let mut rest: Vec<usize> = order
        .iter()
        .copied()
        .filter(|o| !pins.contains(o))
        .collect();
    let np = with_pos.len();
    for (k, (pos, pin)) in with_pos.into_iter().enumerate() {
        let target = pos.min(slots - np + k).min(rest.len());
        rest.insert(target, pin);
    }
    rest
}

/// One candidate chunk entering the ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// Vector score in [0,1], `None` if the vector stage did not produce one.
    pub vector: Option<f64>,
    /// Normalised keyword score in [0,1], `None` if not a keyword hit.
    pub keyword: Option<f64>,
    /// Unix seconds for decay; `None` = evergreen.
    pub note_time: Option<i64>,
    /// [`token_set`] of the chunk text (a transcript chunk's without its
    /// lines that ask the query again, `echo::without_echoes`).
    pub tokens: Vec<u64>,
    /// Verbatim match of a rare identifier query: never dropped, top 3.
    pub pinned: bool,
    /// The source's place in the ranking ([`source_factor`]; 1 for notes).
    pub source_factor: f64,
    /// For a note chunk, the note it belongs to (one id for all the chunks of a
    /// file); `None` for a transcript chunk. A transcript chunk that repeats a
    /// kept note ranks below it ([`cap_repeats_of_notes`]).
    pub note: Option<usize>,
}

/// Parameters of [`rank`].
#[derive(Debug, Clone, PartialEq)]
pub struct RankParams {
    /// Effective (vector, keyword) weights, see [`effective_weights`].
    pub weights: (f64, f64),
    /// Half-life of the temporal decay of dated notes (days).
    pub half_life_days: f64,
    /// MMR λ; `None` disables MMR (order by score).
    pub mmr_lambda: Option<f64>,
    /// Candidates whose relevance (the blend, before decay) is below are dropped
    /// (pinned ones excepted).
    pub min_score: f64,
    /// Most results.
    pub limit: usize,
}

/// A ranked candidate: index into the input plus its score components.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranked {
    /// Index of the candidate in the input.
    pub index: usize,
    /// `blended × decay × source factor`: the final score results are ordered by.
    pub score: f64,
    /// The fused score before decay ([`fuse`]; with linear fusion, the weighted
    /// blend, equal to `relevance`).
    pub blended: f64,
    /// The relevance: the blend with the configured weights, before decay (what
    /// `min_score` tests, whatever the fusion).
    pub relevance: f64,
    /// The bounded recency factor applied ([`recency_factor`]; 1 = evergreen).
    pub decay: f64,
    /// The source factor applied ([`source_factor`]; 1 for notes).
    pub source_factor: f64,
    /// Position chosen by MMR (0-based), `None` when MMR is off or the hit was pinned in.
    pub mmr_rank: Option<usize>,
    /// Kept as a verbatim match of a rare identifier query.
    pub pinned: bool,
    /// The keyword stage's best hit ([`keyword_best`]), kept in the results
    /// whatever its fused rank (see [`rank_fused`]).
    pub keyword_best: bool,
    /// A transcript chunk whose score was capped as a repeat of a note
    /// ([`cap_repeats_of_notes`]).
    pub repeats_note: bool,
    /// A note kept on the relevance of a kept transcript chunk that repeats it
    /// ([`lend_to_repeated_notes`]).
    pub repeated_by_transcript: bool,
}

/// The keyword stage's best hit: the candidate with the highest keyword score
/// (after coverage), ties going to the higher final score; `None` without keyword
/// hits.
pub fn keyword_best(cands: &[Candidate], scored: &[Ranked]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, c) in cands.iter().enumerate() {
        let Some(k) = c.keyword.filter(|k| k.is_finite() && *k > 0.0) else {
            continue;
        };
        best = match best {
            None => Some(i),
            Some(b) => {
                let kb = cands[b].keyword.unwrap_or(0.0);
                if k > kb || (k == kb && scored[i].score > scored[b].score) {
                    Some(i)
                } else {
                    Some(b)
                }
            }
        };
    }
    best
}

/// The whole pure pipeline with linear fusion: blend (relevance) → min-score filter
/// on relevance → bounded decay → MMR (or score order) → identifier pins into the
/// top 3 (or else the keyword stage's best hit into the results) → truncate to `limit`.
pub fn rank(cands: &[Candidate], p: &RankParams, now_unix: i64) -> Vec<Ranked> {
    let linear: Vec<f64> = cands
        .iter()
        .map(|c| blend(c.vector, c.keyword, p.weights))
        .collect();
    rank_fused(cands, p, &linear, now_unix)
}

/// [`rank`] with the order taken from `fused` (one score per candidate, e.g.
/// [`fuse`]'s): the minimum score still tests the relevance (the blend with
/// `p.weights`, before decay), so the fusion reorders hits but never changes which
/// pass the threshold; the final score is `fused × decay`. A missing fused score
/// counts as the relevance.
pub fn rank_fused(
    cands: &[Candidate],
    p: &RankParams,
    fused: &[f64],
    now_unix: i64,
) -> Vec<Ranked> {
    rank_fused_first(cands, p, fused, now_unix, &[])
}

/// [`rank_fused`] where the candidates marked in `first` (a query's date window
/// holds them, `search::when`) rank before all others: each group is ordered
/// (and MMR-selected) on its own, the marked group first. Pins and the keyword
/// stage's best hit are placed as in [`rank_fused`]. With nothing marked (or
/// `first` empty) it is exactly [`rank_fused`].
pub fn rank_fused_first(
    cands: &[Candidate],
    p: &RankParams,
    fused: &[f64],
    now_unix: i64,
    first: &[bool],
) -> Vec<Ranked> {
    let mut scored: Vec<Ranked> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let relevance = blend(c.vector, c.keyword, p.weights);
            let blended = fused
                .get(i)
                .copied()
                .filter(|x| x.is_finite())
                .unwrap_or(relevance);
            let decay =
                recency_factor(c.note_time, now_unix, p.half_life_days, MAX_RECENCY_PENALTY);
            let source_factor = if c.source_factor.is_finite() {
                c.source_factor.clamp(0.0, 1.0)
            } else {
                1.0
            };
            Ranked {
                index: i,
                score: blended * decay * source_factor,
                blended,
                relevance,
                decay,
                source_factor,
                mmr_rank: None,
                pinned: c.pinned,
                keyword_best: false,
                repeats_note: false,
                repeated_by_transcript: false,
            }
        })
        .collect();
    // Filter on relevance (before decay: age never hides a hit), then order by the
    // decayed score (stable on input order for ties).
    let mut kept: Vec<usize> = (0..scored.len())
        .filter(|&i| scored[i].pinned || scored[i].relevance >= p.min_score)
        .collect();
    lend_to_repeated_notes(cands, &mut scored, &mut kept);
    cap_repeats_of_notes(cands, &mut scored, &kept);
    kept.sort_by(|&a, &b| scored[b].score.total_cmp(&scored[a].score));
    let select = |group: &[usize], k: usize| -> Vec<usize> {
        match p.mmr_lambda {
            Some(lambda) if group.len() > 1 => {
                let rel: Vec<f64> = group.iter().map(|&i| scored[i].score).collect();
                let toks: Vec<Vec<u64>> = group.iter().map(|&i| cands[i].tokens.clone()).collect();
                mmr_select(&rel, &toks, lambda, k)
                    .into_iter()
                    .map(|j| group[j])
                    .collect()
            }
            _ => group.iter().copied().take(k).collect(),
        }
    };
    let is_first = |i: usize| first.get(i).copied().unwrap_or(false);
    let order: Vec<usize> = if kept.iter().any(|&i| is_first(i)) {
        let (inside, outside): (Vec<usize>, Vec<usize>) =
            kept.iter().copied().partition(|&i| is_first(i));
        let mut order = select(&inside, p.limit);
        let rest = p.limit.saturating_sub(order.len());
        order.extend(select(&outside, rest));
        order
    } else {
        select(&kept, p.limit)
    };
    let mmr_on = p.mmr_lambda.is_some();
    let mut pins: Vec<usize> = kept.iter().copied().filter(|&i| scored[i].pinned).collect();
    let slots = MAX_PINS.min(p.limit);
    pins.truncate(slots);
    let mut placed = place_pins(&order, &pins, slots);
    // The keyword stage's best hit is never lost to the fusion: when it passed the
    // minimum score but the fused order (a decisive-looking vector stage, decay)
    // left it out, it takes the last place. Identifier pins already keep the
    // keyword evidence that matters most, so they are left alone.
    let best = keyword_best(cands, &scored);
    if let Some(b) = best
        && pins.is_empty()
        && p.limit > 0
        && kept.contains(&b)
    {
        placed = place_pins(&placed, &[b], p.limit);
    }
    let mut out: Vec<Ranked> = placed
        .into_iter()
        .map(|i| {
            let mut r = scored[i].clone();
            r.keyword_best = Some(i) == best;
            r.mmr_rank = if mmr_on {
                order.iter().position(|&o| o == i)
            } else {
                None
            };
            r
        })
        .collect();
    out.truncate(p.limit);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    #[test]
    fn bm25_normalisation() {
        let ranks = [-8.0, -4.0, -2.0];
        assert_eq!(
            normalize_bm25(&ranks, KeywordNorm::MaxScaled),
            vec![1.0, 0.5, 0.25]
        );
        let mm = normalize_bm25(&ranks, KeywordNorm::MinMax);
        assert_eq!(mm[0], 1.0);
        assert_eq!(mm[2], 0.0);
        assert!((mm[1] - 1.0 / 3.0).abs() < 1e-12);
        // One hit, or all equal: 1.0 (not 0, not NaN).
        assert_eq!(normalize_bm25(&[-3.0], KeywordNorm::MinMax), vec![1.0]);
        assert_eq!(normalize_bm25(&[-3.0], KeywordNorm::MaxScaled), vec![1.0]);
        // OpenClaw's formula gave 1.0 for everything; ours discriminates.
        let v = normalize_bm25(&[-10.0, -1.0], KeywordNorm::MaxScaled);
        assert!(v[0] > v[1]);
        // Degenerate input never yields NaN.
        let v = normalize_bm25(&[0.0, f64::NAN, -0.0], KeywordNorm::MaxScaled);
        assert!(v.iter().all(|x| x.is_finite() && (0.0..=1.0).contains(x)));
        assert!(normalize_bm25(&[], KeywordNorm::MinMax).is_empty());
    }

    #[test]
    fn blend_and_weights() {
        let w = effective_weights(0.7, 0.3, true, true);
        assert!((blend(Some(0.8), Some(0.5), w) - (0.56 + 0.15)).abs() < 1e-12);
        assert!((blend(Some(0.8), None, w) - 0.56).abs() < 1e-12);
        assert!((blend(None, Some(1.0), w) - 0.3).abs() < 1e-12);
        // Keyword-only search: keyword weight becomes 1, so hits are not capped at 0.3.
        let w = effective_weights(0.7, 0.3, false, true);
        assert_eq!(w, (0.0, 1.0));
        assert_eq!(blend(None, Some(0.9), w), 0.9);
        assert_eq!(effective_weights(0.7, 0.3, true, false), (1.0, 0.0));
        assert_eq!(effective_weights(0.0, 0.0, true, true), (1.0, 0.0));
    }

    #[test]
    fn decay_dated_vs_evergreen() {
        let day = DAY_SECS as i64;
        assert_eq!(decay_factor(None, NOW, 30.0), 1.0);
        assert!((decay_factor(Some(NOW - 30 * day), NOW, 30.0) - 0.5).abs() < 1e-9);
        assert!((decay_factor(Some(NOW - 60 * day), NOW, 30.0) - 0.25).abs() < 1e-9);
        assert_eq!(decay_factor(Some(NOW), NOW, 30.0), 1.0);
        // Future dates never boost.
        assert_eq!(decay_factor(Some(NOW + 10 * day), NOW, 30.0), 1.0);
        // Configurable half-life.
        assert!((decay_factor(Some(NOW - 7 * day), NOW, 7.0) - 0.5).abs() < 1e-9);
        // Bad half-life: no decay, no NaN.
        assert_eq!(decay_factor(Some(NOW - day), NOW, 0.0), 1.0);
        assert_eq!(decay_factor(Some(NOW - day), NOW, f64::NAN), 1.0);
        // Ancient dates: tiny but finite and non-negative.
        let f = decay_factor(Some(i64::MIN / 2), NOW, 30.0);
        assert!(f.is_finite() && f >= 0.0);
    }

    #[test]
    fn malformed_dates_are_evergreen() {
        use crate::dates::note_time_from_path;
        for p in [
            "memory/2026-13-45.md",
            "memory/2026-02-30.md",
            "memory/20261102.md",
        ] {
            assert_eq!(decay_factor(note_time_from_path(p), NOW, 30.0), 1.0, "{p}");
        }
        let dated = note_time_from_path("memory/2020-01-01.md");
        assert!(decay_factor(dated, NOW, 30.0) < 0.01);
    }

    #[test]
    fn tokens_and_jaccard() {
        let a = token_set("Hello, World! hello");
        assert_eq!(a.len(), 2);
        assert_eq!(jaccard(&a, &token_set("world HELLO")), 1.0);
        assert_eq!(jaccard(&a, &token_set("other words")), 0.0);
        // CJK bigrams: 东京塔 -> {东京, 京塔}; 东京 -> {东京}.
        let c = token_set("东京塔");
        assert_eq!(c.len(), 2);
        assert!((jaccard(&c, &token_set("东京")) - 0.5).abs() < 1e-12);
        assert_eq!(token_set("猫").len(), 1);
        assert_eq!(jaccard(&[], &[]), 0.0);
    }

    #[test]
    fn mmr_demotes_a_duplicate() {
        let texts = [
            "the deploy runbook for the payments service uses blue green",
            "the deploy runbook for the payments service uses blue green", // exact duplicate
            "database backups run nightly at three",
            "payments service deploy checklist and rollback plan",
        ];
        let toks: Vec<Vec<u64>> = texts.iter().map(|t| token_set(t)).collect();
        let rel = [0.95, 0.94, 0.60, 0.70];
        let order = mmr_select(&rel, &toks, 0.7, 4);
        assert_eq!(order[0], 0);
        assert_eq!(
            *order.last().unwrap(),
            1,
            "duplicate must be last: {order:?}"
        );
        // Without diversity (λ = 1) the duplicate would be second... except it is deferred.
        let k2 = mmr_select(&rel, &toks, 0.7, 2);
        assert!(!k2.contains(&1), "{k2:?}");
        // Distinct items keep relevance order with λ = 1.
        let distinct = [toks[0].clone(), toks[2].clone(), toks[3].clone()];
        assert_eq!(
            mmr_select(&[0.2, 0.9, 0.5], &distinct, 1.0, 3),
            vec![1, 2, 0]
        );
    }

    fn order_of(x: &[usize]) -> Vec<usize> {
        x.to_vec()
    }

    #[test]
    fn pins_land_in_top_three() {
        let order = vec![10, 11, 12, 13, 14, 15];
        assert_eq!(place_pins(&order, &[14], 3), vec![10, 11, 14, 12, 13, 15]);
        assert_eq!(place_pins(&order, &[11], 3), order);
        let two = place_pins(&order, &[15, 13], 3);
        assert_eq!(&two[..3], &[10, 13, 15]);
        let absent = place_pins(&order, &[99], 3);
        assert_eq!(absent.len(), 7);
        assert_eq!(absent[2], 99);
        assert_eq!(place_pins(&[], &[5], 3), vec![5]);
    }

    fn cand(v: Option<f64>, k: Option<f64>, t: Option<i64>, text: &str, pinned: bool) -> Candidate {
        Candidate {
            vector: v,
            keyword: k,
            note_time: t,
            tokens: token_set(text),
            pinned,
            source_factor: 1.0,
            // A note's chunk (all of one note unless a test says otherwise).
            note: Some(0),
        }
    }

    #[test]
    fn transcripts_and_the_assistant_rank_below_notes() {
        assert_eq!(assistant_share(""), 0.0);
        assert_eq!(assistant_share("user: hi\nmore of it"), 0.0);
        assert_eq!(assistant_share("assistant: yes\nand more"), 1.0);
        let mixed = assistant_share("user: abc\nassistant: abc");
        assert!((mixed - 0.5).abs() < 0.2, "{mixed}");
        assert_eq!(source_factor("memory", "assistant: x"), 1.0);
        assert_eq!(source_factor("garden", "x"), 1.0);
        let user = source_factor("sessions", "user: does foam detect orphans");
        let asst = source_factor("sessions", "assistant: foam detects orphans");
        assert!((user - TRANSCRIPT_FACTOR).abs() < 1e-12);
        assert!((asst - TRANSCRIPT_FACTOR * ASSISTANT_FACTOR).abs() < 1e-12);
        // Ranking: an equally relevant note first; a transcript first only when it is
        // more than 1/factor times as relevant. The threshold still sees relevance.
        let mut note = cand(None, Some(0.6), None, "alpha beta", false);
        let mut echo = cand(None, Some(0.7), None, "gamma delta", false);
        note.source_factor = source_factor("memory", "");
        echo.source_factor = asst;
        echo.note = None;
        let p = RankParams {
            weights: (0.0, 1.0),
            half_life_days: 30.0,
            mmr_lambda: None,
            min_score: 0.55,
            limit: 6,
        };
        let r = rank(&[note.clone(), echo.clone()], &p, NOW);
        assert_eq!(r.iter().map(|x| x.index).collect::<Vec<_>>(), vec![0, 1]);
        assert!((r[1].relevance - 0.7).abs() < 1e-12 && r[1].source_factor == asst);
        // Positive control: without the factor the transcript would be first.
        echo.source_factor = 1.0;
        let r = rank(&[note.clone(), echo.clone()], &p, NOW);
        assert_eq!(r[0].index, 1);
        // Clearly more relevant (over 1/0.6 here): the assistant's turn wins.
        let strong = Candidate {
            keyword: Some(1.0),
            source_factor: asst,
            ..echo.clone()
        };
        let weak_note = Candidate {
            keyword: Some(0.56),
            ..note.clone()
        };
        let r = rank(&[weak_note, strong], &p, NOW);
        assert_eq!(r[0].index, 1);
    }

    #[test]
    fn a_session_that_repeats_a_note_ranks_below_it_and_mmr_defers_the_repeat() {
        let note_text = "# UPS\nThe UPS in the rack lasts about 40 minutes on battery. \
                         It powers the NAS and the router. Replace the battery every 3 years.";
        let asst = source_factor("sessions", "assistant: x");
        // The session: the user's question, the assistant saying the note again in a
        // short, dense chunk that outscores the note by more than its factor.
        let repeat_text = "user: what did I write about the UPS?\nassistant: The UPS in the \
                           rack lasts about 40 minutes on battery. It powers the NAS and the \
                           router. Replace the battery every 3 years.";
        let note = cand(Some(0.6), Some(0.5), None, note_text, false);
        let repeat = Candidate {
            note: None,
            source_factor: asst,
            ..cand(Some(0.95), Some(0.9), None, repeat_text, false)
        };
        // Another note and a session that adds something the note does not say.
        let other = Candidate {
            note: Some(1),
            ..cand(
                Some(0.4),
                None,
                None,
                "rack inventory: switch, NAS, router",
                false,
            )
        };
        let adds = Candidate {
            note: None,
            source_factor: asst,
            ..cand(
                Some(0.95),
                Some(0.9),
                None,
                "user: and the UPS?\nassistant: I swapped its battery for a LiFePO4 pack \
                 yesterday; now it runs two hours with the fridge plugged in too",
                false,
            )
        };
        let p = RankParams {
            weights: (0.5, 0.5),
            half_life_days: 30.0,
            mmr_lambda: Some(0.7),
            min_score: 0.1,
            limit: 6,
        };
        assert!(containment(&adds.tokens, &note.tokens) < REPEAT_CONTAINMENT);
        let cands = [repeat.clone(), other.clone(), note.clone(), adds.clone()];
        let r = rank(&cands, &p, NOW);
        let order: Vec<usize> = r.iter().map(|x| x.index).collect();
        // The session that adds to the note keeps its (higher) place; the note
        // comes before its repeat, which scores at most note × its factor.
        assert_eq!(order[0], 3, "{r:?}");
        let at = |i: usize| order.iter().position(|&o| o == i).unwrap();
        assert!(at(2) < at(0), "{r:?}");
        let (n, rep) = (&r[at(2)], &r[at(0)]);
        assert!(rep.score <= n.score * asst + 1e-12, "{r:?}");
        assert!(rep.repeats_note && !r[at(3)].repeats_note, "{r:?}");
        // Positive control: without the cap (the session counted as a note of its
        // own) the repeat outranks the note.
        let uncapped = [
            Candidate {
                note: Some(7),
                ..repeat.clone()
            },
            other,
            note,
            adds,
        ];
        let r = rank(&uncapped, &p, NOW);
        let order: Vec<usize> = r.iter().map(|x| x.index).collect();
        let at = |i: usize| order.iter().position(|&o| o == i).unwrap();
        assert!(at(0) < at(2), "{r:?}");
    }

    #[test]
    fn a_kept_session_that_repeats_a_left_out_note_lends_it_its_relevance() {
        let note_text = "The timing belt must be replaced at 120,000 km. The garage on \
                         Hauptstrasse quoted 480 euros for the job, parts included.";
        let asst = source_factor("sessions", "assistant: x");
        let p = RankParams {
            weights: (0.6, 0.4),
            half_life_days: 30.0,
            mmr_lambda: Some(0.7),
            min_score: 0.35,
            limit: 6,
        };
        // The note's own wording is far from the query: under the minimum score.
        let note = cand(Some(0.3), None, None, note_text, false);
        // An earlier exchange that answered the query's question with the note.
        let repeat = Candidate {
            note: None,
            source_factor: asst,
            ..cand(
                Some(0.6),
                Some(0.5),
                None,
                &format!("user: how much will the car service cost\nassistant: {note_text}"),
                false,
            )
        };
        // Another note, under the minimum score, that the exchange does not repeat.
        let other = Candidate {
            note: Some(1),
            ..cand(
                Some(0.3),
                None,
                None,
                "the bike needs new brake pads",
                false,
            )
        };
        let cands = [repeat.clone(), note.clone(), other.clone()];
        let r = rank(&cands, &p, NOW);
        let order: Vec<usize> = r.iter().map(|x| x.index).collect();
        assert_eq!(order, vec![1, 0], "{r:?}");
        let (n, rep) = (&r[0], &r[1]);
        assert!(
            n.repeated_by_transcript && !rep.repeated_by_transcript,
            "{r:?}"
        );
        assert!((n.relevance - blend(Some(0.6), Some(0.5), p.weights)).abs() < 1e-12);
        assert!(rep.score <= n.score * asst + 1e-12, "{r:?}");
        // Controls: an exchange that adds to the note lends nothing; without
        // the exchange the note stays out.
        let adds = Candidate {
            tokens: token_set(
                "user: and the car?\nassistant: I sold it last spring and bought a \
                 bicycle; the garage kept the winter tyres for a month",
            ),
            ..repeat
        };
        let r = rank(&[adds, note.clone(), other.clone()], &p, NOW);
        assert_eq!(
            r.iter().map(|x| x.index).collect::<Vec<_>>(),
            vec![0],
            "{r:?}"
        );
        assert!(rank(&[note, other], &p, NOW).is_empty());
    }

    #[test]
    fn keyword_scores_are_scaled_past_an_echo() {
        let mut cands = vec![
            cand(None, Some(1.0), None, "user: topoi marinov", false),
            cand(None, Some(0.5), None, "topoi and marinov, at length", false),
            cand(None, Some(0.25), None, "marinov", false),
            cand(Some(0.4), None, None, "no keyword", false),
        ];
        let echoes = [true, false, false, false];
        let coverage = [Some(1.0), Some(1.0), Some(0.5), None];
        let before = cands.clone();
        rescale_past_echoes(&mut cands, &echoes, &coverage);
        let k: Vec<Option<f64>> = cands.iter().map(|c| c.keyword).collect();
        assert_eq!(k, vec![Some(1.0), Some(1.0), Some(0.5), None]);
        // A weaker match (fewer of the query's terms) is not lifted to the
        // echo's place.
        let mut weak = before.clone();
        let thin = [Some(1.0), Some(0.5), Some(0.5), None];
        rescale_past_echoes(&mut weak, &echoes, &thin);
        assert_eq!(weak, before);
        // Controls: no echo, or an echo alone, changes nothing.
        let mut plain = vec![
            cand(None, Some(1.0), None, "a", false),
            cand(None, Some(0.5), None, "b", false),
        ];
        rescale_past_echoes(&mut plain, &[false, false], &[]);
        assert_eq!(plain[1].keyword, Some(0.5));
        let mut alone = vec![cand(None, Some(1.0), None, "a", false)];
        rescale_past_echoes(&mut alone, &[true], &[]);
        assert_eq!(alone[0].keyword, Some(1.0));
    }

    #[test]
    fn nothing_relevant_needs_neither_keyword_nor_height() {
        let c = |k: Option<f64>, pinned: bool| Candidate {
            keyword: k,
            pinned,
            ..cand(Some(0.5), None, None, "x", false)
        };
        // No keyword evidence, best height under the bar: nothing.
        assert!(nothing_relevant(
            &[c(None, false), c(None, false)],
            &[Some(1.0), Some(2.0)],
            2.25
        ));
        assert!(nothing_relevant(&[c(None, false)], &[None], 2.25));
        // One hit at the bar: something.
        assert!(!nothing_relevant(
            &[c(None, false), c(None, false)],
            &[Some(1.0), Some(2.25)],
            2.25
        ));
        // Keyword evidence or a pin: something, whatever the vectors say.
        assert!(!nothing_relevant(
            &[c(Some(0.4), false)],
            &[Some(0.0)],
            2.25
        ));
        assert!(!nothing_relevant(&[c(None, true)], &[Some(0.0)], 2.25));
        // A query's own background: a query close to everything stands low.
        let bg = MINILM_L6_V2_BACKGROUND;
        let sample: Vec<Vec<f32>> = (0..20).map(|i| vec![1.0, 0.1 * (i % 3) as f32]).collect();
        let qbg = query_background(&[1.0, 0.0], &sample).expect("20 vectors");
        assert!(qbg.mean > 0.95 && qbg.n == 20);
        let z_own = query_z(0.99, Some(&qbg), &bg).unwrap();
        let z_model = query_z(0.99, None, &bg).unwrap();
        assert!(z_own < 1.0 && z_model > 10.0, "{z_own} {z_model}");
        assert!(query_background(&[1.0, 0.0], &sample[..5]).is_none());
        // Made-up words: short pieces per word; real words: long ones.
        let w = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let pieces = |n: usize| move |x: &str| x.chars().count().div_ceil(n);
        assert!(made_up_words(&w(&["zzqqxxnotaword"]), pieces(2)));
        assert!(!made_up_words(
            &w(&["tips", "against", "insomnia"]),
            pieces(5)
        ));
        assert!(!made_up_words(&w(&["42", "!!"]), pieces(1)));
        assert!(!made_up_words(&[], pieces(1)));
        // The bar rises with the index: the best of more unrelated chunks stands higher.
        assert!(query_clear_z(60) < 3.5 && query_clear_z(12_000) > 4.5);
        assert!(query_clear_z(0).is_finite() && query_clear_z(1) == query_clear_z(2));
    }

    #[test]
    fn rank_pipeline() {
        let day = DAY_SECS as i64;
        let cands = vec![
            cand(
                Some(0.8),
                Some(0.6),
                Some(NOW - 90 * day),
                "old dated note about rust",
                false,
            ),
            cand(
                Some(0.8),
                Some(0.6),
                None,
                "evergreen note about rust",
                false,
            ),
            cand(Some(0.3), None, None, "weak vector hit", false),
            cand(None, Some(0.2), None, "ticket ABC-123 mentioned once", true),
        ];
        let p = RankParams {
            weights: (0.7, 0.3),
            half_life_days: 30.0,
            mmr_lambda: Some(0.7),
            min_score: 0.35,
            limit: 10,
        };
        let r = rank(&cands, &p, NOW);
        let idx: Vec<usize> = r.iter().map(|x| x.index).collect();
        // Evergreen first; the 90-day-old note keeps its relevance (0.74 ≥ 0.35) and
        // comes second, decayed by 1 − α × (1 − 1/8); the weak hit (relevance
        // 0.21) is dropped; the pinned identifier hit survives below min-score.
        let d90 = 1.0 - MAX_RECENCY_PENALTY * (1.0 - 0.125);
        assert_eq!(idx, vec![1, 0, 3]);
        assert!(r[2].pinned && r[2].score < 0.35);
        assert!((r[0].score - 0.74).abs() < 1e-9);
        assert!((r[1].blended - 0.74).abs() < 1e-9);
        assert!((r[1].decay - d90).abs() < 1e-9);
        assert!((r[1].score - 0.74 * d90).abs() < 1e-9);
        // No min-score: the old note is there but below the evergreen one.
        let p2 = RankParams {
            min_score: f64::NEG_INFINITY,
            mmr_lambda: None,
            ..p.clone()
        };
        let r2 = rank(&cands, &p2, NOW);
        let pos = |i| r2.iter().position(|x| x.index == i).unwrap();
        assert!(pos(1) < pos(0));
        assert!((r2[pos(0)].decay - d90).abs() < 1e-9);
        assert_eq!(r2.len(), 4);
        // Limit applies after pins, and a pin survives even a limit of 1.
        let p3 = RankParams { limit: 1, ..p2 };
        let r3 = rank(&cands, &p3, NOW);
        assert_eq!(r3.len(), 1);
        assert_eq!(r3[0].index, 3);
        assert_eq!(place_pins(&order_of(&[1, 2, 3]), &[3], 1), vec![3, 1, 2]);
    }

    fn params(min_score: f64) -> RankParams {
        RankParams {
            weights: (0.7, 0.3),
            half_life_days: 30.0,
            mmr_lambda: None,
            min_score,
            limit: 10,
        }
    }

    #[test]
    fn a_date_window_puts_its_candidates_first_and_nothing_else_moves() {
        let day = DAY_SECS as i64;
        let cands = vec![
            cand(Some(0.80), None, Some(NOW - 40 * day), "alpha one", false),
            cand(Some(0.78), None, Some(NOW - 3 * day), "beta two", false),
            cand(Some(0.60), None, Some(NOW - 3 * day), "gamma three", false),
            cand(Some(0.76), None, None, "delta four", false),
        ];
        let linear: Vec<f64> = cands
            .iter()
            .map(|c| blend(c.vector, c.keyword, params(0.35).weights))
            .collect();
        let p = params(0.35);
        let plain = rank_fused(&cands, &p, &linear, NOW);
        let order = |r: &[Ranked]| r.iter().map(|x| x.index).collect::<Vec<usize>>();
        // Nothing marked (or no marks at all): exactly the plain ranking.
        assert_eq!(
            rank_fused_first(&cands, &p, &linear, NOW, &[false; 4]),
            plain
        );
        assert_eq!(rank_fused_first(&cands, &p, &linear, NOW, &[]), plain);
        // The two chunks of three days ago first, in their own order, then the rest.
        let first = [false, true, true, false];
        let r = rank_fused_first(&cands, &p, &linear, NOW, &first);
        assert_eq!(order(&r)[..2], [1, 2], "{r:?}");
        assert_eq!(
            order(&r)[2..],
            order(&plain)
                .into_iter()
                .filter(|i| !first[*i])
                .collect::<Vec<_>>()[..]
        );
        // Marked candidates under the minimum score are still dropped.
        let r = rank_fused_first(&cands, &params(0.5), &linear, NOW, &first);
        assert!(r.iter().all(|x| x.index != 2), "{r:?}");
        // The limit holds.
        let r = rank_fused_first(
            &cands,
            &RankParams {
                limit: 1,
                ..params(0.35)
            },
            &linear,
            NOW,
            &first,
        );
        assert_eq!(order(&r), [1]);
    }

    #[test]
    fn the_keyword_best_hit_is_never_lost() {
        let day = DAY_SECS as i64;
        // Three undated vector-only hits, then an old note holding the rare words
        // (keyword 1.0) with a weak vector score: decay sinks it below the others.
        let mut cands = vec![
            cand(Some(0.80), None, None, "alpha one", false),
            cand(Some(0.78), None, None, "beta two", false),
            cand(Some(0.76), None, None, "gamma three", false),
            cand(
                Some(0.30),
                Some(1.0),
                Some(NOW - 900 * day),
                "rare pair",
                false,
            ),
            cand(Some(0.50), Some(0.4), None, "delta four", false),
        ];
        let p = RankParams {
            limit: 3,
            ..params(0.35)
        };
        let r = rank(&cands, &p, NOW);
        let order: Vec<usize> = r.iter().map(|x| x.index).collect();
        assert_eq!(order, [0, 1, 3], "{r:?}");
        assert!(r[2].keyword_best && !r[0].keyword_best);
        // Already in the results: it keeps its place, the others theirs.
        let wide = rank(&cands, &params(0.35), NOW);
        let order: Vec<usize> = wide.iter().map(|x| x.index).collect();
        assert_eq!(order, [0, 1, 2, 4, 3], "{wide:?}");
        // Under the minimum score it is not brought back.
        cands[3].vector = Some(0.0);
        let r = rank(
            &cands,
            &RankParams {
                limit: 3,
                ..params(0.35)
            },
            NOW,
        );
        assert!(r.iter().all(|x| x.index != 3), "{r:?}");
        // Without keyword hits nothing moves.
        let no_kw: Vec<Candidate> = cands
            .iter()
            .cloned()
            .map(|c| Candidate { keyword: None, ..c })
            .collect();
        let r = rank(
            &no_kw,
            &RankParams {
                limit: 3,
                ..params(0.35)
            },
            NOW,
        );
        assert!(r.iter().all(|x| !x.keyword_best));
        assert_eq!(r.iter().map(|x| x.index).collect::<Vec<_>>(), [0, 1, 2]);
    }

    #[test]
    fn recency_is_bounded_and_monotone() {
        let day = DAY_SECS as i64;
        let a = MAX_RECENCY_PENALTY;
        assert_eq!(recency_factor(None, NOW, 30.0, a), 1.0);
        assert_eq!(recency_factor(Some(NOW), NOW, 30.0, a), 1.0);
        assert_eq!(recency_factor(Some(NOW + 9 * day), NOW, 30.0, a), 1.0);
        // One half-life takes half of the maximum penalty.
        let f30 = recency_factor(Some(NOW - 30 * day), NOW, 30.0, a);
        assert!((f30 - (1.0 - a / 2.0)).abs() < 1e-12, "{f30}");
        // Never below 1 − penalty, however old; non-increasing with age.
        let mut last = 1.0;
        for days in [1, 7, 30, 45, 90, 400, 730, 3650, 36500] {
            let f = recency_factor(Some(NOW - days * day), NOW, 30.0, a);
            assert!(f >= 1.0 - a && f <= last, "{days} d: {f}");
            last = f;
        }
        assert!(recency_factor(Some(i64::MIN / 2), NOW, 30.0, a) >= 1.0 - a);
        // The penalty is clamped; 0 = no decay; a bad half-life = no decay.
        assert_eq!(recency_factor(Some(NOW - 99 * day), NOW, 30.0, 0.0), 1.0);
        assert_eq!(
            recency_factor(Some(NOW - 99 * day), NOW, 30.0, f64::NAN),
            1.0
        );
        assert!(recency_factor(Some(NOW - 9999 * day), NOW, 30.0, 7.0) >= 0.0);
        assert_eq!(recency_factor(Some(NOW - 99 * day), NOW, f64::NAN, a), 1.0);
    }

    // Decay never takes more than half of a hit's relevance (checked at compile time).
    const _: () = assert!(MAX_RECENCY_PENALTY > 0.0 && MAX_RECENCY_PENALTY <= 0.5);

    /// The minimum score tests relevance before decay: an exact match in a
    /// two-year-old note is returned although its decayed score is below the cut.
    #[test]
    fn threshold_applies_before_decay() {
        let day = DAY_SECS as i64;
        let two_years = Some(NOW - 730 * day);
        let cands = vec![
            cand(
                Some(0.2),
                Some(1.0),
                two_years,
                "exact match two years old",
                false,
            ),
            cand(Some(0.3), None, None, "weak evergreen", false),
        ];
        let r = rank(&cands, &params(0.35), NOW);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].index, 0);
        assert!((r[0].blended - 0.44).abs() < 1e-9);
        assert!(r[0].score < 0.35 && r[0].score >= 0.44 * (1.0 - MAX_RECENCY_PENALTY));
        // Relevance below the cut is dropped whatever the age (fresh included).
        let fresh_weak = vec![cand(Some(0.4), None, Some(NOW), "fresh weak", false)];
        assert!(rank(&fresh_weak, &params(0.35), NOW).is_empty());
    }

    /// Fresh beats old at equal or near-equal relevance; an old note more than
    /// 1 / (1 − MAX_RECENCY_PENALTY) ≈ 1.33 times as relevant beats a weak recent one.
    #[test]
    fn recency_orders_but_does_not_hide() {
        let day = DAY_SECS as i64;
        let old = Some(NOW - 400 * day);
        let fresh = Some(NOW - day);
        let order = |rel_old: f64, rel_fresh: f64| -> Vec<usize> {
            let cands = vec![
                cand(None, Some(rel_old), old, "old note", false),
                cand(None, Some(rel_fresh), fresh, "fresh note", false),
            ];
            let p = RankParams {
                weights: (0.0, 1.0),
                ..params(0.35)
            };
            rank(&cands, &p, NOW).iter().map(|r| r.index).collect()
        };
        assert_eq!(order(0.8, 0.8), vec![1, 0], "equal relevance: fresh first");
        assert_eq!(order(0.9, 0.8), vec![1, 0], "nearly equal: fresh first");
        assert_eq!(order(0.6, 0.5), vec![1, 0], "1.2 times: fresh first");
        assert_eq!(order(0.9, 0.6), vec![0, 1], "1.5 times: the old note wins");
        assert_eq!(
            order(0.9, 0.4),
            vec![0, 1],
            "clearly more relevant old note wins"
        );
        // And both are kept (both relevances ≥ 0.35).
        assert_eq!(order(0.4, 0.9).len(), 2);
    }

    #[test]
    fn calibration_maps_backgrounds_onto_one_scale() {
        let mini = MINILM_L6_V2_BACKGROUND;
        assert!(mini.std > 0.0 && mini.mean.abs() < 0.5);
        // The background mean scores CALIBRATED_BACKGROUND_SCORE; monotone; [0,1].
        let at_mean = calibrated_vector_score(mini.mean, &mini);
        assert!((at_mean - CALIBRATED_BACKGROUND_SCORE).abs() < 1e-12);
        let mut last = -1.0;
        for i in -20..=20 {
            let c = i as f64 / 20.0;
            let v = calibrated_vector_score(c, &mini);
            assert!((0.0..=1.0).contains(&v) && v >= last, "{c}: {v}");
            last = v;
        }
        // With MiniLM the calibration is a shift of the cosine (slope 1), so the
        // hybrid ordering tuned on MiniLM cosines is unchanged.
        let (a, b) = (0.30, 0.42);
        let d = calibrated_vector_score(b, &mini) - calibrated_vector_score(a, &mini);
        assert!((d - (b - a)).abs() < 1e-9, "{d}");
        // Another model, same z above its own background: same calibrated score.
        let other = Background {
            mean: 0.25,
            std: 0.05,
        };
        for z in [1.0, 2.5, 4.0] {
            let v1 = calibrated_vector_score(mini.mean + z * mini.std, &mini);
            let v2 = calibrated_vector_score(other.mean + z * other.std, &other);
            assert!((v1 - v2).abs() < 1e-9, "z {z}: {v1} vs {v2}");
        }
        // Degenerate inputs: no NaN; a zero-spread background falls back to the cosine.
        assert_eq!(calibrated_vector_score(f64::NAN, &mini), 0.0);
        let flat = Background {
            mean: 0.1,
            std: 0.0,
        };
        assert_eq!(calibrated_vector_score(0.4, &flat), 0.4);
        // Unknown models use MiniLM's background; the measured one is found by digest.
        assert_eq!(background_for("openai:text-embedding-3-small"), mini);
        assert_eq!(background_for("all-MiniLM-L6-v2@98913551c075"), mini);
    }

    /// A best-match paraphrase (cosine well above the background) clears the
    /// default minimum score as a vector-only hit in hybrid search; a cosine near
    /// the background does not.
    #[test]
    fn calibrated_paraphrase_clears_the_threshold() {
        let mini = MINILM_L6_V2_BACKGROUND;
        let hit = |cos: f64| {
            let v = calibrated_vector_score(cos, &mini);
            rank(
                &[cand(Some(v), None, None, "vector-only hit", false)],
                &params(0.35),
                NOW,
            )
        };
        // Paraphrase cosines of the fixture sit around 0.3–0.5 with MiniLM.
        assert_eq!(hit(0.35).len(), 1);
        assert_eq!(hit(mini.mean + CLEAR_Z * mini.std + 1e-6).len(), 1);
        assert!(hit(mini.mean + (CLEAR_Z - 0.1) * mini.std).is_empty());
        assert!(hit(mini.mean + 2.0 * mini.std).is_empty());
        assert!(hit(mini.mean).is_empty());
    }

    #[test]
    fn background_is_the_mean_and_std_of_pair_cosines() {
        let q = vec![vec![1.0f32, 0.0]];
        let p = vec![
            vec![1.0f32, 0.0],
            vec![0.0, 1.0],
            vec![-1.0, 0.0],
            vec![0.0, -1.0],
        ];
        // Cosines 1, 0, −1, 0: mean 0, std sqrt(0.5).
        let b = background(&q, &p).unwrap();
        assert!(b.mean.abs() < 1e-12);
        assert!((b.std - 0.5f64.sqrt()).abs() < 1e-12);
        assert!(background(&q, &[]).is_none());
    }
    #[test]
    fn decisiveness_of_a_stage() {
        // One keyword hit: nothing else comes close.
        assert_eq!(stage_decisiveness(&[0.9], 0.0), 1.0);
        // A flat list: not decisive at all.
        assert_eq!(stage_decisiveness(&[1.0; 8], 0.0), 0.0);
        // A rare pair: the note with both words scores twice the notes with one.
        let pair = [0.5, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5];
        assert!((stage_decisiveness(&pair, 0.0) - 0.5).abs() < 1e-12);
        // Heights count above the floor: a vector list near the background is
        // judged on what stands above it; nothing above it = 0.
        let bg = CALIBRATED_BACKGROUND_SCORE;
        assert_eq!(stage_decisiveness(&[bg, bg - 0.1], bg), 0.0);
        let v = [bg + 0.4, bg + 0.1, bg + 0.1, bg + 0.1, bg + 0.1, bg + 0.1];
        assert!((stage_decisiveness(&v, bg) - 0.75).abs() < 1e-9);
        // Only the next DECISIVE_WINDOW scores count (not the list length).
        let mut long = vec![1.0, 0.5, 0.5, 0.5, 0.5, 0.5];
        long.extend(std::iter::repeat_n(0.0, 500));
        assert!((stage_decisiveness(&long, 0.0) - 0.5).abs() < 1e-12);
        // Degenerate input: no NaN.
        assert_eq!(stage_decisiveness(&[], 0.0), 0.0);
        assert_eq!(stage_decisiveness(&[f64::NAN, 1.0], 0.0), 1.0);
    }

    #[test]
    fn adaptive_weights_follow_the_decisive_stage() {
        let c = |v: f64, k: Option<f64>| cand(Some(v), k, None, "x", false);
        // Keyword decisive (one clear hit), vector flat: keyword gains weight.
        let mut cands = vec![c(0.40, Some(1.0))];
        cands.extend((0..8).map(|i| c(0.70 - 0.001 * i as f64, Some(0.3))));
        let ((wv, wt), (dv, dk)) = adaptive_weights(&cands, (0.7, 0.3), 2.0);
        assert!(dk > 0.6 && dv < 0.05, "{dv} {dk}");
        assert!(wt > 0.45 && (wv + wt - 1.0).abs() < 1e-12, "{wv} {wt}");
        // Vector decisive, keyword flat: vector keeps (and gains) its lead.
        let mut cands = vec![c(0.90, Some(1.0))];
        cands.extend((0..8).map(|_| c(0.40, Some(1.0))));
        let ((wv, wt), _) = adaptive_weights(&cands, (0.7, 0.3), 2.0);
        assert!(wv > 0.7 && wt < 0.3, "{wv} {wt}");
        // Gain 0 (or nonsense) = the configured weights; weights 0 stay 0.
        assert_eq!(adaptive_weights(&cands, (0.7, 0.3), 0.0).0, (0.7, 0.3));
        assert_eq!(adaptive_weights(&cands, (0.7, 0.3), f64::NAN).0, (0.7, 0.3));
        assert_eq!(adaptive_weights(&cands, (0.0, 1.0), 2.0).0, (0.0, 1.0));
        // No keyword hits: keyword decisiveness 0, weights still sum to the total.
        let only_v: Vec<Candidate> = (0..5).map(|i| c(0.5 + 0.1 * i as f64, None)).collect();
        let ((wv, wt), (_, dk)) = adaptive_weights(&only_v, (0.7, 0.3), 2.0);
        assert_eq!(dk, 0.0);
        assert!((wv + wt - 1.0).abs() < 1e-12 && wv > 0.7);
    }

    /// Issue 11/17: a rare-word-pair note (both words, so far ahead in BM25) with
    /// a weak vector score loses to unrelated strong vector hits under the fixed
    /// 0.7/0.3 blend, and wins under adaptive fusion; the threshold is unchanged.
    #[test]
    fn adaptive_fusion_keeps_a_decisive_keyword_match() {
        let mut cands = vec![cand(Some(0.35), Some(1.0), None, "rare pair note", false)];
        for i in 0..6 {
            cands.push(cand(
                Some(0.79 - 0.005 * i as f64),
                None,
                None,
                &format!("unrelated vector hit {i}"),
                false,
            ));
        }
        for i in 0..5 {
            cands.push(cand(
                Some(0.33),
                Some(0.4),
                None,
                &format!("one of the words {i}"),
                false,
            ));
        }
        // A limit above the candidate count, so only the threshold decides the set.
        let p = RankParams {
            limit: 20,
            ..params(0.35)
        };
        let linear = rank(&cands, &p, NOW);
        assert_ne!(linear[0].index, 0, "{linear:?}");
        let f = fuse(&cands, p.weights, Fusion::Adaptive, ADAPTIVE_GAIN);
        let adaptive = rank_fused(&cands, &p, &f.scores, NOW);
        assert_eq!(adaptive[0].index, 0, "{adaptive:?}");
        // The same hits pass the threshold (it tests the configured blend).
        let set = |r: &[Ranked]| {
            let mut v: Vec<usize> = r.iter().map(|x| x.index).collect();
            v.sort_unstable();
            v
        };
        assert_eq!(set(&linear), set(&adaptive));
        assert!(adaptive.iter().all(|r| {
            (r.relevance - blend(cands[r.index].vector, cands[r.index].keyword, p.weights)).abs()
                < 1e-12
        }));
        // Linear fusion through `fuse` is exactly `rank`.
        let fl = fuse(&cands, p.weights, Fusion::Linear, ADAPTIVE_GAIN);
        assert_eq!(rank_fused(&cands, &p, &fl.scores, NOW), linear);
        assert_eq!(fl.weights, p.weights);
    }

    #[test]
    fn rrf_scores_by_rank() {
        let cands = vec![
            cand(Some(0.9), Some(1.0), None, "a", false), // first in both
            cand(Some(0.8), None, None, "b", false),      // second in vector only
            cand(Some(0.1), Some(0.5), None, "c", false), // last vector, second keyword
        ];
        let s = rrf_scores(&cands, (0.7, 0.3));
        assert!((s[0] - 1.0).abs() < 1e-12);
        let half = |r: f64| 1.0 / (RRF_K + r) / (2.0 / (RRF_K + 1.0));
        assert!((s[1] - half(2.0)).abs() < 1e-12);
        assert!((s[2] - (half(3.0) + half(2.0))).abs() < 1e-12);
        assert!(s[2] > s[1]);
        // One stage only: first place = 1.
        let s = rrf_scores(&cands, (0.0, 1.0));
        assert!((s[0] - 1.0).abs() < 1e-12 && s[1] == 0.0);
        assert!(rrf_scores(&[], (0.7, 0.3)).is_empty());
        assert_eq!(Fusion::parse("rrf"), Some(Fusion::Rrf));
        assert_eq!(
            Fusion::parse(Fusion::Adaptive.name()),
            Some(Fusion::Adaptive)
        );
        assert_eq!(Fusion::parse("max"), None);
    }

    #[test]
    fn terms_held_and_note_coverage() {
        let terms: Vec<String> = ["park", "fibonacci", "infra 4127"]
            .iter()
            .map(|t| t.to_string())
            .collect();
        let a = crate::words::index_words("2022 07 10", "We parked the car.");
        let b = crate::words::index_words("2022 07 10", "Fibonacci numbers, INFRA-4127");
        let c = crate::words::index_words("benford", "fibonacci and 4127 infra");
        assert_eq!(terms_held(&terms, &a), 0b001);
        assert_eq!(terms_held(&terms, &b), 0b110);
        // A phrase term counts when all its tokens are held.
        assert_eq!(terms_held(&terms, &c), 0b110);
        assert_eq!(terms_held(&terms, ""), 0);
        // Two chunks of one note cover the query together; another note does not.
        let cov = note_coverage(&[0b001, 0b110, 0b010], &["n1", "n1", "n2"], 3);
        assert_eq!(cov, vec![1.0, 1.0, 1.0 / 3.0]);
    }

    #[test]
    fn coverage_reorders_keyword_hits_and_keeps_the_best_at_one() {
        assert_eq!(coverage_exponent(1, false, 2.0), 0.0);
        assert_eq!(coverage_exponent(2, false, 2.0), 1.0);
        assert_eq!(coverage_exponent(8, false, 2.0), 0.25);
        assert_eq!(coverage_exponent(3, true, 2.0), 0.0);
        assert_eq!(coverage_exponent(3, false, 0.0), 0.0);
        // A single strong term (1.0, half the query) against both terms (0.7).
        let mut s = vec![Some(1.0), Some(0.7), None];
        apply_coverage(&mut s, &[0.5, 1.0, 1.0], 1.0);
        assert_eq!(s[1], Some(1.0));
        assert!((s[0].unwrap() - 0.5 / 0.7).abs() < 1e-12);
        assert_eq!(s[2], None);
        // Exponent 0: unchanged.
        let mut s = vec![Some(1.0), Some(0.7)];
        apply_coverage(&mut s, &[0.5, 1.0], 0.0);
        assert_eq!(s, vec![Some(1.0), Some(0.7)]);
    }

    #[test]
    fn an_echo_is_left_out_of_the_stages_decisiveness() {
        let echo = cand(
            Some(0.95),
            Some(1.0),
            None,
            "user: what is my dentist called",
            false,
        );
        let others = vec![
            cand(Some(0.62), Some(0.31), None, "dentist appointment", false),
            cand(Some(0.58), Some(0.29), None, "Dr Lee moved the slot", false),
            cand(Some(0.55), Some(0.12), None, "teeth", false),
        ];
        let mut all = vec![echo];
        all.extend(others.iter().cloned());
        let mask = [true, false, false, false];
        let w = (0.6, 0.4);
        let judged = fuse_judged(&all, &mask, w, Fusion::Adaptive, ADAPTIVE_GAIN);
        let (weights, decisiveness) = adaptive_weights(&others, w, ADAPTIVE_GAIN);
        assert_eq!(judged.decisiveness, decisiveness);
        assert_eq!(judged.weights, weights);
        // Every candidate is still scored, the echo included.
        assert_eq!(judged.scores.len(), all.len());
        // Control: judged with the echo, the stages look otherwise.
        let plain = fuse_judged(&all, &[], w, Fusion::Adaptive, ADAPTIVE_GAIN);
        assert_ne!(plain.decisiveness, decisiveness);
    }
}
