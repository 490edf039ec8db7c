//! The conversational retrieval evaluation (`claw memory eval --memorybank DIR` and
//! `--synthetic`): dated user ↔ assistant histories become claw's own session
//! transcripts (one JSONL file per day under `sessions/`, in the format the
//! assistant writes), are indexed by the normal indexer as the built-in `sessions`
//! source, and every question is asked through the normal search engine with the
//! clock at the moment it was asked. A question counts at k when one of its
//! evidence turns lies inside one of the first k hits (*any*), or when each of its
//! evidence pieces does (*all*), reported by kind of question.
//!
//! Each conversation is one person's memory: its own workspace and index, so a
//! question is answered from that person's sessions only (as on a user's machine).
//!
//! Invariant: like the BEIR evaluation, only files under a fresh temporary
//! directory (or the kept `work_dir`) are written; the user's workspace and
//! database are never opened.
#![warn(missing_docs)]

use super::metrics::percentile;
use super::runner::{EvalError, EvalMode, EvalProgress, SearchOneError, search_hits};
use chrono::{DateTime, Duration as TimeDelta, NaiveDate, Utc};
use claw_memory::config::MemoryConfig;
use claw_memory::embed::Loaded;
use claw_memory::indexer::{self, IndexOptions};
use claw_memory::lock::WriterLock;
use claw_memory::search::expand::{
    ENTITY_TERMS, FEEDBACK_HITS, FEEDBACK_TERMS, REWRITE_TERMS, entity_terms, expanded_query,
    feedback_terms, rewrite_terms, rrf, spread,
};
pub use claw_memory::search::expand::{Expansion, REWRITE_SYSTEM};
use claw_memory::search::score::KeywordNorm;
use claw_memory::search::storage::SearchStorage;
use claw_memory::search::types::{SearchHit, SourceFilter};
use claw_memory::store::Store;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The recall cut-offs reported (hits per question).
pub const CUTOFFS: [usize; 3] = [1, 5, 10];

/// One user turn and the assistant's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// What the user said.
    pub user: String,
    /// What the assistant answered.
    pub assistant: String,
}

/// One day's conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The day it took place (its transcript is `sessions/<date>.jsonl`).
    pub date: NaiveDate,
    /// The exchanges, in order.
    pub exchanges: Vec<Exchange>,
}

/// One person's history with the assistant: their own memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// A file-name-safe id (`emily`, `john-zhang`).
    pub id: String,
    /// Sessions, one per day, oldest first.
    pub sessions: Vec<Session>,
    /// When the questions are asked: the search's clock.
    pub asked_at: DateTime<Utc>,
}

/// One turn of a conversation: the user's message of an exchange of a day, or
/// the assistant's answer to it. Written `2023-04-30#3.u` / `2023-04-30#3.a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TurnRef {
    /// The session's day.
    pub date: NaiveDate,
    /// The exchange within the day (0-based).
    pub exchange: usize,
    /// The assistant's answer (else the user's message).
    pub assistant: bool,
}

impl TurnRef {
    /// Parse `YYYY-MM-DD#N.u` or `YYYY-MM-DD#N.a`.
    pub fn parse(s: &str) -> Option<TurnRef> {
        let (date, rest) = s.split_once('#')?;
        let (n, who) = rest.split_once('.')?;
        Some(TurnRef {
            date: NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?,
            exchange: n.parse().ok()?,
            assistant: match who {
                "u" => false,
                "a" => true,
                _ => return None,
            },
        })
    }

    /// The transcript file holding the turn, relative to the workspace.
    pub fn path(&self) -> String {
        session_path(self.date)
    }

    /// Its 1-based line in the transcript (line 1 is the session metadata).
    pub fn line(&self) -> usize {
        2 + 2 * self.exchange + usize::from(self.assistant)
    }
}

impl std::fmt::Display for TurnRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = if self.assistant { "a" } else { "u" };
        write!(
            f,
            "{}#{}.{who}",
            self.date.format("%Y-%m-%d"),
            self.exchange
        )
    }
}

/// A question about a conversation and where its answer was said.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvQuestion {
    /// Question id (`emily-3`).
    pub id: String,
    /// The [`Conversation::id`] it is asked of.
    pub conversation: String,
    /// The question as asked.
    pub text: String,
    /// Kind of question (`fact`, `temporal`, `multi`, `inference`, …).
    pub kind: String,
    /// Evidence pieces: each is satisfied by any one of its turns (the same thing
    /// said twice); *all evidence* needs every piece. Empty: unanswerable from the
    /// history (reported, not scored).
    pub evidence: Vec<Vec<TurnRef>>,
}

/// A set of conversations and questions.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvDataset {
    /// Name for reports.
    pub name: String,
    /// The conversations.
    pub conversations: Vec<Conversation>,
    /// The questions, in order.
    pub questions: Vec<ConvQuestion>,
}

impl ConvDataset {
    /// Every evidence turn names an existing turn of its conversation, every
    /// question an existing conversation, and no conversation has two sessions on
    /// one day. `Err` names the first problem.
    pub fn check(&self) -> Result<(), String> {
        for c in &self.conversations {
            let mut dates: Vec<NaiveDate> = c.sessions.iter().map(|s| s.date).collect();
            dates.sort();
            if let Some(w) = dates.windows(2).find(|w| w[0] == w[1]) {
                return Err(format!("{}: two sessions on {}", c.id, w[0]));
            }
        }
        for q in &self.questions {
            let Some(c) = self.conversations.iter().find(|c| c.id == q.conversation) else {
                return Err(format!("{}: no conversation `{}`", q.id, q.conversation));
            };
            for t in q.evidence.iter().flatten() {
                let ok = c
                    .sessions
                    .iter()
                    .find(|s| s.date == t.date)
                    .is_some_and(|s| t.exchange < s.exchanges.len());
                if !ok {
                    return Err(format!("{}: evidence {t} is not a turn of {}", q.id, c.id));
                }
            }
            if q.evidence.iter().any(Vec::is_empty) {
                return Err(format!("{}: an evidence piece with no turn", q.id));
            }
        }
        Ok(())
    }

    /// All turns (two per exchange).
    pub fn turns(&self) -> usize {
        self.conversations
            .iter()
            .flat_map(|c| &c.sessions)
            .map(|s| 2 * s.exchanges.len())
            .sum()
    }
}

/// `sessions/<date>.jsonl`.
pub fn session_path(date: NaiveDate) -> String {
    format!("sessions/{}.jsonl", date.format("%Y-%m-%d"))
}

/// When a session's first message was sent: noon UTC of its day (so its date is
/// the same in every time zone from UTC−11 to UTC+11); each further message one
/// minute later.
pub fn session_start(date: NaiveDate) -> DateTime<Utc> {
    date.and_hms_opt(12, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or_default()
}

/// A session as claw's own transcript: the `session` metadata line (as
/// `claw_agent::session` writes it), then one `message` line per turn.
pub fn transcript(conversation: &str, s: &Session) -> String {
    let start = session_start(s.date);
    let mut out = serde_json::json!({
        "type": "session",
        "key": format!("eval:{conversation}:{}", s.date.format("%Y-%m-%d")),
        "created": start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "version": 1,
    })
    .to_string();
    out.push('\n');
    let mut minute = 0i64;
    for ex in &s.exchanges {
        for (role, text) in [("user", &ex.user), ("assistant", &ex.assistant)] {
            let t = start + TimeDelta::minutes(minute);
            minute += 1;
            out.push_str(
                &serde_json::json!({
                    "type": "message",
                    "role": role,
                    "content": text,
                    "timestamp": t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                })
                .to_string(),
            );
            out.push('\n');
        }
    }
    out
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ConvOptions {
    /// Modes to evaluate.
    pub modes: Vec<EvalMode>,
    /// Hits asked for per question (the largest cut-off, 10, by default).
    pub limit: usize,
    /// BM25 normalisation handed to the engine.
    pub keyword_norm: KeywordNorm,
    /// Keep the transcripts and indexes here (reused by the next run); `None`: a
    /// temporary directory removed afterwards.
    pub work_dir: Option<PathBuf>,
    /// A second-pass variant measured on top of every mode (`None`: the engine's
    /// ranking as it is).
    pub expand: Option<Expansion>,
    /// The model call of [`Expansion::Rewrite`] (required by it, unused otherwise).
    pub rewriter: Option<Rewriter>,
}

/// A model that rewrites a question as a search query: the reply to
/// [`claw_memory::search::expand::REWRITE_SYSTEM`] with the question as the
/// user message, or why it failed.
#[derive(Clone)]
pub struct Rewriter(pub Arc<RewriteFn>);

/// The call behind a [`Rewriter`]: the question in, the model's reply (or why
/// it failed) out.
pub type RewriteFn = dyn Fn(&str) -> Result<String, String> + Send + Sync;

impl std::fmt::Debug for Rewriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rewriter")
    }
}

impl Default for ConvOptions {
    fn default() -> ConvOptions {
        ConvOptions {
            modes: vec![EvalMode::Hybrid],
            limit: 10,
            keyword_norm: KeywordNorm::default(),
            work_dir: None,
            expand: None,
            rewriter: None,
        }
    }
}

/// Recall of one group of questions at [`CUTOFFS`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RecallRow {
    /// Questions in the group.
    pub questions: usize,
    /// Share with any evidence turn inside the first k hits, per cut-off.
    pub any: [f64; 3],
    /// Share with every evidence piece inside the first k hits, per cut-off.
    pub all: [f64; 3],
}

/// How one question went.
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionOutcome {
    /// Question id.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// 1-based rank of the first hit holding an evidence turn.
    pub any_rank: Option<usize>,
    /// 1-based rank by which every evidence piece has appeared.
    pub all_rank: Option<usize>,
    /// The hits, as citations (`sessions/2023-05-02.jsonl#L4-L5`).
    pub hits: Vec<String>,
}

/// The figures of one mode.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvModeResult {
    /// Every scored question.
    pub overall: RecallRow,
    /// Per kind of question.
    pub by_kind: BTreeMap<String, RecallRow>,
    /// Mean transcript lines a hit spans (1 = one turn).
    pub lines_per_hit: f64,
    /// Median query latency (ms).
    pub p50_ms: f64,
    /// 95th-percentile query latency (ms).
    pub p95_ms: f64,
    /// Per question, in data set order.
    pub per_question: Vec<QuestionOutcome>,
}

/// The outcome of one mode.
#[derive(Debug, Clone, PartialEq)]
pub enum ConvOutcome {
    /// The mode ran.
    Ran(ConvModeResult),
    /// The mode could not run (no embedding model).
    Skipped {
        /// Why.
        reason: String,
    },
}

/// The whole report.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvReport {
    /// Data set name.
    pub dataset: String,
    /// Conversations (one index each).
    pub conversations: usize,
    /// Sessions (transcript files).
    pub sessions: usize,
    /// Turns (messages).
    pub turns: usize,
    /// Questions scored (those with evidence).
    pub questions: usize,
    /// Questions without evidence in the history (not scored).
    pub unanswerable: usize,
    /// Chunks indexed.
    pub chunks: usize,
    /// Indexing time of all conversations (s).
    pub index_seconds: f64,
    /// Chunk embeddings computed while indexing.
    pub embeddings_computed: usize,
    /// Hits asked for per question.
    pub limit: usize,
    /// Each mode and its outcome, in the order asked.
    pub modes: Vec<(EvalMode, ConvOutcome)>,
    /// The second-pass variant measured, if any.
    pub expand: Option<Expansion>,
}

/// Whether a hit (a file and its line span) holds a turn.
fn covers(hit: &Hit, t: &TurnRef) -> bool {
    hit.path == t.path() && (hit.start..=hit.end).contains(&t.line())
}

/// One hit of a question.
#[derive(Debug, Clone, PartialEq)]
struct Hit {
    path: String,
    start: usize,
    end: usize,
}

/// A mode's search of `n` hits for a text.
type Ask<'a> = dyn Fn(&str, usize) -> Result<Vec<SearchHit>, SearchOneError> + 'a;

/// One question's search under `expand` ([`Expansion`]): the hits as citations
/// and spans. `ask(text, n)` is the mode's search of `n` hits.
fn expanded_search(
    ask: &Ask<'_>,
    query: &str,
    limit: usize,
    expand: Option<Expansion>,
    rewriter: Option<&Rewriter>,
) -> Result<(Vec<String>, Vec<Hit>), SearchOneError> {
    let span = |h: &SearchHit| Hit {
        path: h.path.clone(),
        start: h.start_line,
        end: h.end_line,
    };
    let plain = |found: Vec<SearchHit>| {
        let hits = found.iter().map(span).collect();
        (found.into_iter().map(|h| h.citation).collect(), hits)
    };
    let Some(expand) = expand else {
        return Ok(plain(ask(query, limit)?));
    };
    match expand {
        Expansion::Prf | Expansion::Entities | Expansion::Rewrite => {
            let first = ask(query, limit)?;
            let texts: Vec<&str> = first
                .iter()
                .take(FEEDBACK_HITS)
                .map(|h| h.snippet.as_str())
                .collect();
            let terms = match expand {
                Expansion::Prf => feedback_terms(query, &texts, FEEDBACK_TERMS),
                Expansion::Entities => entity_terms(query, &texts, ENTITY_TERMS),
                _ => {
                    let rewriter = rewriter.ok_or_else(|| {
                        SearchOneError::Rewrite("no model to rewrite with".into())
                    })?;
                    let reply = (rewriter.0)(query).map_err(SearchOneError::Rewrite)?;
                    rewrite_terms(query, &reply, REWRITE_TERMS)
                }
            };
            if terms.is_empty() {
                return Ok(plain(first));
            }
            let second = ask(&expanded_query(query, &terms), limit)?;
            let a: Vec<String> = first.iter().map(|h| h.citation.clone()).collect();
            let b: Vec<String> = second.iter().map(|h| h.citation.clone()).collect();
            let fused = rrf(&a, &b, limit);
            let mut by: BTreeMap<String, SearchHit> = BTreeMap::new();
            for h in first.into_iter().chain(second) {
                by.entry(h.citation.clone()).or_insert(h);
            }
            Ok(plain(fused.iter().filter_map(|c| by.remove(c)).collect()))
        }
        Expansion::Neighbours => {
            // The neighbouring exchange on each side (two turn lines each; line 1
            // is the session's metadata line).
            let found = ask(query, limit)?;
            let hits = found
                .iter()
                .map(|h| Hit {
                    path: h.path.clone(),
                    start: h.start_line.saturating_sub(2).max(2),
                    end: h.end_line + 2,
                })
                .collect();
            Ok((found.into_iter().map(|h| h.citation).collect(), hits))
        }
        Expansion::Spread => {
            let pool = ask(query, limit * SPREAD_POOL)?;
            let sessions: Vec<&str> = pool.iter().map(|h| h.path.as_str()).collect();
            let order = spread(&sessions, SPREAD_PENALTY, limit);
            let mut slots: Vec<Option<SearchHit>> = pool.into_iter().map(Some).collect();
            Ok(plain(
                order.into_iter().filter_map(|i| slots[i].take()).collect(),
            ))
        }
    }
}

/// Hits fetched per hit kept by [`Expansion::Spread`].
const SPREAD_POOL: usize = 3;
/// [`spread`]'s penalty for a session already chosen.
const SPREAD_PENALTY: f64 = 0.5;

/// 1-based ranks at which any / every evidence piece is first covered by `hits`.
fn evidence_ranks(evidence: &[Vec<TurnRef>], hits: &[Hit]) -> (Option<usize>, Option<usize>) {
    let firsts: Vec<Option<usize>> = evidence
        .iter()
        .map(|piece| {
            hits.iter()
                .position(|h| piece.iter().any(|t| covers(h, t)))
                .map(|i| i + 1)
        })
        .collect();
    let any = firsts.iter().flatten().min().copied();
    let all = if firsts.iter().all(Option::is_some) && !firsts.is_empty() {
        firsts.iter().flatten().max().copied()
    } else {
        None
    };
    (any, all)
}

/// Recall at [`CUTOFFS`] over `outcomes`.
pub fn recall_row<'a>(outcomes: impl Iterator<Item = &'a QuestionOutcome>) -> RecallRow {
    let mut row = RecallRow::default();
    let (mut any, mut all) = ([0usize; 3], [0usize; 3]);
    for o in outcomes {
        row.questions += 1;
        for (i, k) in CUTOFFS.iter().enumerate() {
            any[i] += usize::from(o.any_rank.is_some_and(|r| r <= *k));
            all[i] += usize::from(o.all_rank.is_some_and(|r| r <= *k));
        }
    }
    if row.questions > 0 {
        let n = row.questions as f64;
        for i in 0..3 {
            row.any[i] = any[i] as f64 / n;
            row.all[i] = all[i] as f64 / n;
        }
    }
    row
}

/// Write each conversation's transcripts into its own workspace under
/// `opts.work_dir` (or a temporary directory), index each with the normal indexer,
/// ask every question through the normal search engine per mode (sessions only,
/// no minimum score, the clock at the conversation's `asked_at`), and score.
pub fn run(
    data: &ConvDataset,
    settings: &MemoryConfig,
    embedder: &Loaded,
    opts: &ConvOptions,
    progress: &dyn Fn(EvalProgress),
) -> Result<ConvReport, EvalError> {
    let scored: Vec<&ConvQuestion> = data
        .questions
        .iter()
        .filter(|q| !q.evidence.is_empty())
        .collect();
    if scored.is_empty() {
        return Err(EvalError::NoQueries {
            split: "questions".into(),
            dataset: data.name.clone(),
        });
    }
    let mut tmp = None;
    let root: PathBuf = match &opts.work_dir {
        Some(dir) => dir.clone(),
        None => {
            let t = tempfile::Builder::new()
                .prefix("claw-eval-conv-")
                .tempdir()
                .map_err(|source| EvalError::Io {
                    path: std::env::temp_dir(),
                    source,
                })?;
            let p = t.path().to_path_buf();
            tmp = Some(t);
            p
        }
    };
    let set = super::runner::file_safe(&data.name);
    let model = embedder.embedder();
    let no_model_reason = match embedder {
        Loaded::Ready(_) => None,
        Loaded::Disabled => Some("no embedding model (embedding provider is `none`)".to_string()),
        Loaded::Unavailable(e) => Some(e.to_string()),
    };

    // Write and index every conversation (one workspace and database each).
    progress(EvalProgress::Writing {
        docs: data.conversations.iter().map(|c| c.sessions.len()).sum(),
    });
    let mut workspaces: Vec<(String, MemoryConfig)> = Vec::new();
    let mut index_seconds = 0.0;
    let mut embeddings_computed = 0;
    let mut chunks = 0;
    let total = data.conversations.len();
    for (i, c) in data.conversations.iter().enumerate() {
        let ws = root
            .join("workspace")
            .join(&set)
            .join(super::runner::file_safe(&c.id));
        let mut cfg = settings.clone();
        cfg.workspace = ws.clone();
        cfg.state_dir = ws.join(claw_memory::state::LEGACY_DIR);
        let sessions_dir = ws.join("sessions");
        for dir in [&sessions_dir, &cfg.state_dir()] {
            std::fs::create_dir_all(dir).map_err(|source| EvalError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        write_transcripts(&ws, c)?;
        let mut store = Store::open(&cfg.db_path())?;
        let lock = WriterLock::acquire(&cfg.state_dir(), "eval", Duration::from_secs(5))?;
        let started = Instant::now();
        let report = indexer::run(
            &mut store,
            &cfg,
            model,
            &IndexOptions::default(),
            &lock,
            &|_| {},
        )?;
        index_seconds += started.elapsed().as_secs_f64();
        drop(lock);
        if let Some(issue) = report.issues.iter().find(|i| i.skipped) {
            return Err(EvalError::DocumentSkipped {
                path: issue.path.clone(),
                message: issue.message.clone(),
            });
        }
        embeddings_computed += report.embeddings_computed;
        chunks += store.stats()?.chunks as usize;
        progress(EvalProgress::Indexing { done: i + 1, total });
        workspaces.push((c.id.clone(), cfg));
    }

    let mut modes = Vec::new();
    for &mode in &opts.modes {
        if mode.needs_embedder()
            && let Some(reason) = &no_model_reason
        {
            modes.push((
                mode,
                ConvOutcome::Skipped {
                    reason: reason.clone(),
                },
            ));
            continue;
        }
        let mut latencies = Vec::with_capacity(scored.len());
        let mut per_question = Vec::with_capacity(scored.len());
        let (mut lines, mut hits_n) = (0usize, 0usize);
        let mut done = 0;
        for (cid, cfg) in &workspaces {
            let conv = data
                .conversations
                .iter()
                .find(|c| &c.id == cid)
                .expect("a workspace per conversation");
            let store = Store::open(&cfg.db_path())?;
            let storage: &dyn SearchStorage = &store;
            let now = conv.asked_at.timestamp();
            for q in scored.iter().filter(|q| &q.conversation == cid) {
                let t = Instant::now();
                let ask = |text: &str, n: usize| {
                    search_hits(
                        storage,
                        model,
                        &cfg.memory,
                        now,
                        mode,
                        opts.keyword_norm,
                        text,
                        n,
                        SourceFilter::Sessions,
                        &cfg.zone,
                    )
                };
                let (found, hits) = expanded_search(
                    &ask,
                    &q.text,
                    opts.limit,
                    opts.expand,
                    opts.rewriter.as_ref(),
                )
                .map_err(|e| e.for_query(mode.name(), &q.id))?;
                latencies.push(t.elapsed().as_secs_f64() * 1000.0);
                for h in &hits {
                    lines += h.end + 1 - h.start.min(h.end);
                    hits_n += 1;
                }
                let (any_rank, all_rank) = evidence_ranks(&q.evidence, &hits);
                per_question.push(QuestionOutcome {
                    id: q.id.clone(),
                    kind: q.kind.clone(),
                    any_rank,
                    all_rank,
                    hits: found,
                });
                done += 1;
                progress(EvalProgress::Querying {
                    mode,
                    done,
                    total: scored.len(),
                });
            }
        }
        // Data set order.
        let order: BTreeMap<&str, usize> = scored
            .iter()
            .enumerate()
            .map(|(i, q)| (q.id.as_str(), i))
            .collect();
        per_question.sort_by_key(|o| order.get(o.id.as_str()).copied());
        latencies.sort_by(f64::total_cmp);
        let mut kinds: Vec<&str> = per_question.iter().map(|o| o.kind.as_str()).collect();
        kinds.sort();
        kinds.dedup();
        let by_kind = kinds
            .iter()
            .map(|k| {
                (
                    k.to_string(),
                    recall_row(per_question.iter().filter(|o| o.kind == *k)),
                )
            })
            .collect();
        modes.push((
            mode,
            ConvOutcome::Ran(ConvModeResult {
                overall: recall_row(per_question.iter()),
                by_kind,
                lines_per_hit: if hits_n > 0 {
                    lines as f64 / hits_n as f64
                } else {
                    0.0
                },
                p50_ms: percentile(&latencies, 50.0),
                p95_ms: percentile(&latencies, 95.0),
                per_question,
            }),
        ));
    }
    drop(tmp);
    Ok(ConvReport {
        dataset: data.name.clone(),
        conversations: data.conversations.len(),
        sessions: data.conversations.iter().map(|c| c.sessions.len()).sum(),
        turns: data.turns(),
        questions: scored.len(),
        unanswerable: data.questions.len() - scored.len(),
        chunks,
        index_seconds,
        embeddings_computed,
        limit: opts.limit,
        modes,
        expand: opts.expand,
    })
}

/// Write a conversation's transcripts under `ws/sessions/`, leaving identical
/// files alone (a kept work dir is then re-indexed for nothing) and removing
/// transcripts of days the conversation no longer has.
fn write_transcripts(ws: &Path, c: &Conversation) -> Result<(), EvalError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EvalError::Io { path, source }
    };
    let mut wanted = std::collections::HashSet::new();
    for s in &c.sessions {
        let rel = session_path(s.date);
        let path = ws.join(&rel);
        let text = transcript(&c.id, s);
        if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            std::fs::write(&path, text).map_err(io(&path))?;
        }
        wanted.insert(path);
    }
    let dir = ws.join("sessions");
    for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
        let path = entry.map_err(io(&dir))?.path();
        if !wanted.contains(&path) {
            std::fs::remove_file(&path).map_err(io(&path))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap()
    }

    #[test]
    fn turn_refs_parse_print_and_find_their_line() {
        let t = TurnRef::parse("2023-04-30#3.a").unwrap();
        assert_eq!(
            (t.date, t.exchange, t.assistant),
            (d("2023-04-30"), 3, true)
        );
        assert_eq!(t.to_string(), "2023-04-30#3.a");
        assert_eq!(t.path(), "sessions/2023-04-30.jsonl");
        assert_eq!(t.line(), 9);
        assert_eq!(TurnRef::parse("2023-04-30#0.u").unwrap().line(), 2);
        for bad in [
            "2023-04-30#3",
            "2023-04-30#x.u",
            "2023-13-01#0.u",
            "x#0.a",
            "2023-04-30#1.b",
        ] {
            assert_eq!(TurnRef::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn transcripts_are_claws_own_format_one_line_per_turn() {
        let s = Session {
            date: d("2023-05-02"),
            exchanges: vec![
                Exchange {
                    user: "I went to the museum".into(),
                    assistant: "Which exhibition?".into(),
                },
                Exchange {
                    user: "Old silk".into(),
                    assistant: "Lovely".into(),
                },
            ],
        };
        let t = transcript("emily", &s);
        let lines: Vec<serde_json::Value> = t
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0]["type"], "session");
        assert_eq!(lines[0]["key"], "eval:emily:2023-05-02");
        let r = TurnRef::parse("2023-05-02#1.u").unwrap();
        assert_eq!(lines[r.line() - 1]["content"], "Old silk");
        assert_eq!(lines[r.line() - 1]["role"], "user");
        assert_eq!(lines[4]["role"], "assistant");
        assert_eq!(lines[4]["timestamp"], "2023-05-02T12:03:00Z");
        // The indexer reads every turn as a message with its time.
        for (i, l) in t.lines().enumerate().skip(1) {
            assert!(matches!(
                claw_memory::transcript::parse_line(l.as_bytes(), i + 1),
                claw_memory::transcript::LineKind::Message(m) if m.time.is_some()
            ));
        }
    }

    #[test]
    fn evidence_ranks_any_and_all() {
        let hit = |path: &str, a: usize, b: usize| Hit {
            path: path.into(),
            start: a,
            end: b,
        };
        let e = |s: &str| TurnRef::parse(s).unwrap();
        let hits = vec![
            hit("sessions/2023-05-01.jsonl", 2, 3),
            hit("sessions/2023-05-02.jsonl", 4, 4),
            hit("sessions/2023-05-02.jsonl", 6, 7),
        ];
        // One piece, found at rank 2 (line 4 = exchange 1, user).
        assert_eq!(
            evidence_ranks(&[vec![e("2023-05-02#1.u")]], &hits),
            (Some(2), Some(2))
        );
        // Alternatives: either turn satisfies the piece.
        assert_eq!(
            evidence_ranks(&[vec![e("2023-05-09#0.u"), e("2023-05-01#0.a")]], &hits),
            (Some(1), Some(1))
        );
        // Two pieces at ranks 1 and 3.
        assert_eq!(
            evidence_ranks(
                &[vec![e("2023-05-01#0.u")], vec![e("2023-05-02#2.a")]],
                &hits
            ),
            (Some(1), Some(3))
        );
        // A piece never found: any still counts, all does not.
        assert_eq!(
            evidence_ranks(
                &[vec![e("2023-05-01#0.u")], vec![e("2023-05-03#0.u")]],
                &hits
            ),
            (Some(1), None)
        );
        let outcomes = [
            QuestionOutcome {
                id: "a".into(),
                kind: "fact".into(),
                any_rank: Some(1),
                all_rank: Some(6),
                hits: vec![],
            },
            QuestionOutcome {
                id: "b".into(),
                kind: "fact".into(),
                any_rank: Some(7),
                all_rank: None,
                hits: vec![],
            },
        ];
        let row = recall_row(outcomes.iter());
        assert_eq!(row.questions, 2);
        assert_eq!(row.any, [0.5, 0.5, 1.0]);
        assert_eq!(row.all, [0.0, 0.0, 0.5]);
    }
}
