//! The search contract: the request, response, hit and `get` types that the CLI
//! (`claw memory search|get --json`), the assistant's `memory_search` /
//! `memory_get` tools and the evaluation all share, the typed [`Fallback`] and
//! [`SearchError`], and the one [`citation`] format. Their JSON shapes are public:
//! fields may be added, never renamed or removed.
#![warn(missing_docs)]

use super::score::KeywordNorm;
use crate::store::StoreError;
use crate::walk::{SOURCE_MEMORY, SOURCE_SESSIONS};

/// Largest accepted `limit`.
pub const MAX_LIMIT: usize = 1000;
/// `memory get`: lines returned by default.
pub const GET_DEFAULT_LINES: usize = 120;
/// `memory get`: most characters returned by default.
pub const GET_MAX_CHARS: usize = 12_000;

/// Which stages to run. Parsed from and shown as `hybrid`, `fts` (alias
/// `keyword`) and `vector`, in JSON and on the command line alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Vector and keyword candidates, blended.
    Hybrid,
    /// Keyword (FTS5) candidates only (`keyword` is accepted too).
    #[serde(alias = "keyword")]
    Fts,
    /// Vector candidates only (keyword when there are no vectors).
    Vector,
}

impl Mode {
    /// Every mode, in the order they are documented.
    pub const ALL: [Mode; 3] = [Mode::Hybrid, Mode::Fts, Mode::Vector];

    /// The mode's name: `hybrid`, `fts` or `vector`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Hybrid => "hybrid",
            Mode::Fts => "fts",
            Mode::Vector => "vector",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown mode name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{0}` (hybrid, fts, vector)")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Mode, UnknownMode> {
        match s {
            "hybrid" => Ok(Mode::Hybrid),
            "fts" | "keyword" => Ok(Mode::Fts),
            "vector" => Ok(Mode::Vector),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

/// Why a stage was skipped or degraded; serialised as the `fallback` string of
/// `claw memory search --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fallback {
    /// No embedding model: keyword only (`no-embedder`).
    NoEmbedder,
    /// sqlite-vec unavailable: exact in-process vector scan (`no-vec0`).
    NoVec0,
    /// The index was built keyword-only: there are no vectors (`no-vectors`).
    NoVectors,
    /// The index was built with another embedding model (`model-mismatch`).
    ModelMismatch,
    /// The query could not be embedded: keyword only (`embed-failed`).
    EmbedFailed,
}

impl Fallback {
    /// The JSON string.
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::NoEmbedder => "no-embedder",
            Fallback::NoVec0 => "no-vec0",
            Fallback::NoVectors => "no-vectors",
            Fallback::ModelMismatch => "model-mismatch",
            Fallback::EmbedFailed => "embed-failed",
        }
    }
}

impl std::fmt::Display for Fallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which sources to search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceFilter {
    /// Every source.
    All,
    /// The workspace's notes (`MEMORY.md`, `memory/**`).
    Memory,
    /// The session transcripts.
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

    /// The source's name; `None` for all sources.
    pub fn name(&self) -> Option<&str> {
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
    /// The user's text.
    pub query: String,
    /// Results wanted (1..=[`MAX_LIMIT`]).
    pub limit: usize,
    /// Minimum score; `None` = `MemorySettings::min_score`; `Some(f64::NEG_INFINITY)`
    /// disables the filter.
    pub min_score: Option<f64>,
    /// Which stages to run.
    pub mode: Mode,
    /// Which sources to search.
    pub source: SourceFilter,
    /// Attach each hit's score components.
    pub explain: bool,
    /// MMR rerank (off = order by score).
    pub mmr: bool,
    /// BM25 normalisation (default [`KeywordNorm::MaxScaled`]).
    pub keyword_norm: KeywordNorm,
    /// The transcript file of the session that is asking (`cli_default.jsonl`, a
    /// file of `sessions/`): its turns are never returned, the session has them in
    /// context already. `None` (the CLI, MCP without a session) excludes nothing.
    pub exclude_session: Option<String>,
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
            exclude_session: None,
        }
    }
}

/// A hit's score components (`--explain`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Explain {
    /// Cosine similarity clamped to [0,1]; null when the vector stage did not run.
    pub vector: Option<f64>,
    /// The vector score that enters the blend: the cosine calibrated against the
    /// model's background similarity (`score::calibrated_vector_score`); null when
    /// the vector stage did not run.
    pub vector_calibrated: Option<f64>,
    /// How far the cosine stands above the query's own background similarity (its
    /// mean cosine with a fixed sample of the index), in the model's background
    /// standard deviations (`score::query_z`); null when the vector stage did not
    /// run. A query none of whose hits has keyword evidence or reaches
    /// `score::query_clear_z` (which rises with the index's size) finds nothing.
    #[serde(default)]
    pub vector_query_z: Option<f64>,
    /// Normalised keyword score (after the coverage re-weighting); null when not a
    /// keyword hit.
    pub keyword: Option<f64>,
    /// The share of the query's word terms the chunk holds, when the query has two
    /// or more, held by its note's candidate chunks (`score::note_coverage`); null otherwise.
    #[serde(default)]
    pub coverage: Option<f64>,
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
    /// The source's place in the ranking (`score::source_factor`): 1 for notes,
    /// less for transcripts, least for the assistant's own turns, halved for
    /// an earlier asking of the query itself (`echo::echo_factor`). `score` is
    /// `blended × decay × source_factor`.
    #[serde(default = "one")]
    pub source_factor: f64,
    /// Position chosen by MMR (0-based); null when MMR is off or the hit was pinned in.
    pub mmr_rank: Option<usize>,
    /// Verbatim match of a rare identifier query (kept regardless of min-score).
    pub pinned: bool,
    /// The keyword stage's best hit: kept in the results (in the last place if the
    /// fused order left it out) when it passes the minimum score and no identifier
    /// pin holds the top places.
    #[serde(default)]
    pub keyword_best: bool,
    /// A transcript chunk that repeats a note among the hits: its score is
    /// capped at that note's × its source factor (`score::cap_repeats_of_notes`).
    #[serde(default)]
    pub repeats_note: bool,
    /// A note kept on the relevance of a transcript chunk among the hits that
    /// repeats it (`score::lend_to_repeated_notes`).
    #[serde(default)]
    pub repeated_by_transcript: bool,
    /// Effective (vector, keyword) weights.
    pub weights: (f64, f64),
    /// Chunk time used for decay (unix seconds), null = evergreen.
    pub note_time: Option<i64>,
    /// How the stages were fused (`memory.fusion`: `adaptive`, `linear`, `rrf`);
    /// `blended` is the fused score, `relevance` the blend with `weights`.
    #[serde(default)]
    pub fusion: super::score::Fusion,
    /// The (vector, keyword) weights applied to this query's fused score: the
    /// adaptive ones (`score::adaptive_weights`), else equal to `weights`.
    #[serde(default)]
    pub fusion_weights: (f64, f64),
    /// How decisive each stage's score distribution was for this query, (vector,
    /// keyword) in [0,1] (`score::stage_decisiveness`).
    #[serde(default)]
    pub decisiveness: (f64, f64),
}

fn one() -> f64 {
    1.0
}

/// `path#L12-L20`: how a hit (or a span of lines) is cited everywhere — in the
/// CLI's JSON, to the model, in answers.
pub fn citation(path: &str, start_line: usize, end_line: usize) -> String {
    format!("{path}#L{start_line}-L{end_line}")
}

/// Split a citation as search prints it into the path and its line span:
/// `path#L12-L20`, `path#L12-20`, `path#L12`, `path:12-20` (the text output) or
/// `path:12`. None when `s` ends in no such span (or the span is backwards or
/// starts at 0).
pub fn parse_citation(s: &str) -> Option<(&str, usize, usize)> {
    let num = |t: &str| -> Option<usize> {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse().ok())
            .flatten()
    };
    let (path, span, hash) = match s.rfind("#L") {
        Some(i) => (&s[..i], &s[i + 2..], true),
        None => {
            let i = s.rfind(':')?;
            (&s[..i], &s[i + 1..], false)
        }
    };
    let (a, b) = match span.split_once('-') {
        Some((a, b)) => {
            let b = if hash {
                b.strip_prefix('L').unwrap_or(b)
            } else {
                b
            };
            (num(a)?, num(b)?)
        }
        None => (num(span)?, num(span)?),
    };
    (!path.is_empty() && a >= 1 && b >= a).then_some((path, a, b))
}

/// One result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchHit {
    /// Relative to the source root, '/'-separated.
    pub path: String,
    /// The source's name (`memory`, `sessions` or a registered folder).
    pub source: String,
    /// First line of the chunk (1-based).
    pub start_line: usize,
    /// Last line of the chunk (inclusive).
    pub end_line: usize,
    /// Final score (rounded to 6 decimals).
    pub score: f64,
    /// At most 700 characters around the query's terms, cut at a word.
    pub snippet: String,
    /// [`citation`]: `path#L12-L20`.
    pub citation: String,
    /// For a session transcript hit: the day it was said and who spoke
    /// (`2023-05-04 Thursday, user and assistant`); absent for notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// Score components, with `explain` requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
}

/// The answer (this JSON shape is a public contract).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchResponse {
    /// The query as given.
    pub query: String,
    /// The mode requested (`hybrid`, `fts` or `vector`); `fallback` says when a
    /// stage was skipped or degraded.
    pub mode: Mode,
    /// Why a stage was skipped or degraded, e.g. `no-embedder`, `no-vec0`.
    pub fallback: Option<Fallback>,
    /// Best first.
    pub results: Vec<SearchHit>,
}

/// Why `get` refused a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedReason {
    /// Empty, or with a NUL byte.
    Invalid,
    /// Contains a `..` component.
    ParentDir,
    /// Absolute, and beneath no indexed source.
    OutsideSources,
}

impl std::fmt::Display for RefusedReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusedReason::Invalid => "empty or invalid path",
            RefusedReason::ParentDir => "paths with `..` are not allowed",
            RefusedReason::OutsideSources => "outside the indexed sources",
        })
    }
}

/// Errors from search and get.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The source filter names no known source.
    #[error("unknown source `{name}` (known: {known})")]
    UnknownSource {
        /// The name asked for.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// The database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A query failed.
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Another [`SearchStorage`](super::storage::SearchStorage) backend failed.
    #[error("storage: {0}")]
    Storage(Box<dyn std::error::Error + Send + Sync>),
    /// `get` refused the path.
    #[error("refused path `{path}`: {reason}")]
    Refused {
        /// The path asked for.
        path: String,
        /// Why.
        reason: RefusedReason,
    },
    /// `get`: the path is not an indexed file.
    #[error("`{0}` is not an indexed file")]
    NotIndexed(String),
    /// `get`: the file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file's absolute path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
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
    /// In a session transcript, also this many turns (messages) before and after
    /// the window (a cited hit comes with its surroundings); 0 for notes or none.
    pub turns_around: usize,
}

/// Turns before and after a cited transcript hit that `get` adds.
pub const GET_TURNS_AROUND: usize = 2;

impl GetRequest {
    /// Defaults: from line 1, [`GET_DEFAULT_LINES`] lines, [`GET_MAX_CHARS`] characters.
    pub fn new(path: impl Into<String>) -> GetRequest {
        GetRequest {
            path: path.into(),
            from: 1,
            lines: GET_DEFAULT_LINES,
            max_chars: GET_MAX_CHARS,
            turns_around: 0,
        }
    }

    /// The request a citation names, when `path` is one ([`parse_citation`]):
    /// its path and exactly its lines (still bounded by `max_chars`), and in a
    /// session transcript the [`GET_TURNS_AROUND`] turns on either side.
    pub fn cited(&self) -> Option<GetRequest> {
        let (path, start, end) = parse_citation(&self.path)?;
        Some(GetRequest {
            path: path.to_string(),
            from: start,
            lines: end - start + 1,
            max_chars: self.max_chars,
            turns_around: GET_TURNS_AROUND,
        })
    }
}

/// One message of a transcript window (`memory get` of a session file): the
/// conversation as it reads, beside the raw JSON lines.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GetTurn {
    /// Its line in the file (1-based).
    pub line: usize,
    /// `user` or `assistant`.
    pub role: String,
    /// What was said (redacted).
    pub text: String,
    /// When (RFC 3339, UTC), if the line has a time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// Lines of an indexed file (`claw memory get --json`, the `memory_get` tool).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GetResponse {
    /// Relative to the source root.
    pub path: String,
    /// The source's name.
    pub source: String,
    /// First line returned (1-based).
    pub from: usize,
    /// Last line returned (inclusive; `from − 1` when none).
    pub to: usize,
    /// Lines in the file.
    pub total_lines: usize,
    /// The lines, each ending in `\n`.
    pub text: String,
    /// Where to continue (`--from`), null at the end of the file.
    pub next_from: Option<usize>,
    /// The last line was cut to fit the character budget.
    pub truncated: bool,
    /// For a session transcript: its user and assistant messages among the lines
    /// returned, in order (absent for notes).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<GetTurn>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_and_source_parsing() {
        assert_eq!("fts".parse::<Mode>().unwrap(), Mode::Fts);
        assert!("bogus".parse::<Mode>().is_err() && "keyword".parse::<Mode>() == Ok(Mode::Fts));
        assert_eq!(SourceFilter::parse("all"), SourceFilter::All);
        assert_eq!(SourceFilter::parse("sessions"), SourceFilter::Sessions);
        assert_eq!(
            SourceFilter::parse("garden"),
            SourceFilter::Named("garden".into())
        );
    }

    #[test]
    fn fallback_and_mode_strings_are_the_json_ones() {
        for (f, s) in [
            (Fallback::NoEmbedder, "no-embedder"),
            (Fallback::NoVec0, "no-vec0"),
            (Fallback::NoVectors, "no-vectors"),
            (Fallback::ModelMismatch, "model-mismatch"),
            (Fallback::EmbedFailed, "embed-failed"),
        ] {
            assert_eq!(serde_json::to_value(f).unwrap(), serde_json::json!(s));
            assert_eq!(f.to_string(), s);
        }
        for m in Mode::ALL {
            assert_eq!(
                serde_json::to_value(m).unwrap(),
                serde_json::json!(m.as_str())
            );
            assert_eq!(m.to_string().parse::<Mode>(), Ok(m));
        }
        assert_eq!(citation("a.md", 3, 3), "a.md#L3-L3");
        // Every form search prints (and a few a person types) round-trips.
        for (s, want) in [
            ("memory/a.md#L12-L20", Some(("memory/a.md", 12, 20))),
            ("memory/a.md#L12-20", Some(("memory/a.md", 12, 20))),
            ("memory/a.md#L7", Some(("memory/a.md", 7, 7))),
            ("memory/a.md:1-5", Some(("memory/a.md", 1, 5))),
            ("memory/a.md:3", Some(("memory/a.md", 3, 3))),
            ("c:/x.md#L2-L3", Some(("c:/x.md", 2, 3))),
        ] {
            assert_eq!(parse_citation(s), want, "{s}");
        }
        let c = citation("x/y z.md", 4, 9);
        assert_eq!(parse_citation(&c), Some(("x/y z.md", 4, 9)));
        // Not citations: no span, a backwards or zero span, words.
        for s in [
            "memory/a.md",
            "a.md#L",
            "a.md#L5-L2",
            "a.md:0",
            "a.md:x-3",
            "notes:draft",
            ":3",
            "a.md#L1-L2-L3",
        ] {
            assert_eq!(parse_citation(s), None, "{s}");
        }
        let r = GetRequest::new("MEMORY.md#L3-L4").cited().unwrap();
        assert_eq!((r.path.as_str(), r.from, r.lines), ("MEMORY.md", 3, 2));
        assert_eq!(r.turns_around, GET_TURNS_AROUND);
        assert!(GetRequest::new("MEMORY.md").cited().is_none());
        let m: Mode = serde_json::from_str("\"keyword\"").unwrap();
        assert_eq!(m, Mode::Fts);
    }
}
