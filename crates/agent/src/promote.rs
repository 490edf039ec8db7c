//! The scheduled consolidation: once a day (`memory.consolidation.schedule`,
//! the gateway's [`claw_schedule::Routine`]) or now (`claw memory consolidate`),
//! the configured LLM reads what was written and said since the last run — the
//! daily notes (`memory/YYYY-MM-DD*.md`, block by block) and the user's turns
//! of the session transcripts — and the durable facts in it are promoted into
//! MEMORY.md under a dated heading (`## Consolidated on 2026-12-03`), each with
//! where it came from (`— from memory/2026-12-01.md#L3-L4`), through the merge
//! `/remember` uses ([`crate::consolidate::merge_on`]): a fact that changes one
//! MEMORY.md holds replaces it and keeps the old value as dated history.
//!
//! - **Candidates** are the blocks and turns of the window (the days since the
//!   last run, at most `max_days`) not consolidated before. They are ranked by
//!   how often searches recalled them (the index's recall counts, see
//!   `claw_memory_api::Memory::recalls`), then notes before transcripts, oldest
//!   first; with `min_recalls` set, the ones recalled fewer times wait.
//! - **Bounded**: one model call per run, its prompt and reply allowance within
//!   `max_tokens`; candidates that do not fit wait for the next run.
//! - **Idempotent**: the candidates a run sent are recorded in the ledger
//!   (`claw_memory_api::consolidation`), so a second run over the same material
//!   changes nothing and says so.
//! - **Safe under concurrent writers**: the model is asked without any lock;
//!   MEMORY.md is then re-read, merged and written, and the ledger updated,
//!   under the workspace's writer lock. A run that finds its material already
//!   consolidated by another (they raced) writes nothing.
//! - **Readable**: each run appends a short section (promoted, updated,
//!   skipped, with provenance) to the day's report in the state directory;
//!   `claw memory status` and `GET /v1/memory/status` show the last run.
//!
//! Off when no LLM is configured (the status says so).

use crate::consolidate::{self, FactOutcome};
use crate::core::ModelFailure;
use crate::driver::Model;
use crate::message::{ChatRequest, Message, Role};
use chrono::{DateTime, Days, NaiveDate, Utc};
use claw_base::Clock;
use claw_memory_api::Memory;
use claw_memory_api::consolidation::{
    self as record, ConsolidationStatus, ItemKind, Ledger, Outcome, ReportItem, RunSummary, Seen,
    Window,
};
use claw_schedule::{Schedule, Zone};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The routine's id (the gateway's log, its fire).
pub const ROUTINE_ID: &str = "memory-consolidation";
/// Default schedule: daily at 03:00 in the user's zone.
pub const DEFAULT_SCHEDULE: &str = "0 3 * * *";
/// Default bound of one run in tokens (prompt + reply allowance).
pub const DEFAULT_MAX_TOKENS: u64 = 8000;
/// Default lookback in days (a first run, or after a long pause).
pub const DEFAULT_MAX_DAYS: u32 = 7;
/// How long a run waits for another writer of the workspace.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Recall counts not refreshed for this long are forgotten by a run.
pub const RECALL_RETENTION_DAYS: i64 = 90;
/// What the writer lock says a run is doing.
pub const LOCK_HOLDER: &str = "memory consolidation";
/// At most this many characters of one candidate are sent.
const CANDIDATE_CHARS: usize = 1500;
/// A user turn or note block with fewer words says nothing durable.
const MIN_WORDS: usize = 3;

/// The `memory.consolidation` section of the config file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsolidationConfig {
    /// Run on the schedule (default: when an LLM is configured).
    pub enabled: Option<bool>,
    /// When: a 5-field cron expression or a daily `HH:MM`, in the user's zone
    /// (default `0 3 * * *`).
    pub schedule: Option<String>,
    /// Bound of one run in tokens: prompt (instructions, MEMORY.md, the
    /// candidates) plus the reply's allowance (default 8000).
    pub max_tokens: Option<u64>,
    /// Candidates recalled by searches fewer times than this wait (default 0:
    /// every new candidate is considered, the most recalled first).
    pub min_recalls: Option<u64>,
    /// How far back a run reads at most, in days (default 7).
    pub max_days: Option<u32>,
}

impl ConsolidationConfig {
    /// The schedule expression (a daily `HH:MM` becomes `M H * * *`).
    fn cron(&self) -> Result<String, String> {
        let raw = self
            .schedule
            .as_deref()
            .map(str::trim)
            .unwrap_or(DEFAULT_SCHEDULE);
        if let Some((h, m)) = raw.split_once(':')
            && !raw.contains(' ')
        {
            let (h, m) = match (h.parse::<u32>(), m.parse::<u32>()) {
                (Ok(hh), Ok(mm)) if hh < 24 && mm < 60 && m.len() == 2 && h.len() <= 2 => (hh, mm),
                _ => return Err(format!("schedule: `{raw}` is not a time of day (HH:MM)")),
            };
            return Ok(format!("{m} {h} * * *"));
        }
        Ok(raw.to_string())
    }

    /// Check the section (every command refuses a bad one).
    pub fn check(&self) -> Result<(), String> {
        let cron = self.cron()?;
        Schedule::Cron {
            cron: cron.clone(),
            tz: Zone::Utc,
        }
        .validate()
        .map_err(|e| format!("schedule: {e}"))?;
        if self.max_tokens.is_some_and(|t| t < 512) {
            return Err("max_tokens must be at least 512".into());
        }
        if self.max_days == Some(0) {
            return Err("max_days must be at least 1".into());
        }
        Ok(())
    }

    /// The settings, given whether an LLM is configured (`Err`: why not) and
    /// the user's zone.
    pub fn resolve(&self, llm: Result<(), &str>, zone: Zone) -> ConsolidationSettings {
        let cron = self.cron().unwrap_or_else(|_| DEFAULT_SCHEDULE.into());
        let (enabled, off_reason) = match (self.enabled, llm) {
            (Some(false), _) => (
                false,
                Some("memory.consolidation.enabled is false".to_string()),
            ),
            (_, Err(why)) => {
                let first = why.split(". ").next().unwrap_or(why).trim_end_matches('.');
                let why = if first.to_ascii_lowercase().starts_with("no llm") {
                    first.to_string()
                } else {
                    format!("no usable LLM: {first}")
                };
                (false, Some(why))
            }
            (_, Ok(())) => (true, None),
        };
        ConsolidationSettings {
            enabled,
            off_reason,
            schedule: Schedule::Cron {
                cron: cron.clone(),
                tz: zone,
            },
            schedule_text: describe_schedule(&cron, &zone),
            max_tokens: self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            min_recalls: self.min_recalls.unwrap_or(0),
            max_days: self.max_days.unwrap_or(DEFAULT_MAX_DAYS).max(1),
            zone,
        }
    }
}

/// `daily at 03:00 (Europe/Berlin)`, or the expression.
fn describe_schedule(cron: &str, zone: &Zone) -> String {
    let f: Vec<&str> = cron.split_whitespace().collect();
    if let [m, h, "*", "*", "*"] = f.as_slice()
        && let (Ok(m), Ok(h)) = (m.parse::<u32>(), h.parse::<u32>())
    {
        return format!("daily at {h:02}:{m:02} ({})", zone.name());
    }
    format!("`{cron}` ({})", zone.name())
}

/// `memory.consolidation`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsolidationSettings {
    /// Whether the scheduled job runs.
    pub enabled: bool,
    /// Why it does not.
    pub off_reason: Option<String>,
    /// When it runs.
    pub schedule: Schedule,
    /// The schedule in words.
    pub schedule_text: String,
    pub max_tokens: u64,
    pub min_recalls: u64,
    pub max_days: u32,
    /// The user's zone: the days of notes and turns, MEMORY.md's dates.
    pub zone: Zone,
}

impl ConsolidationSettings {
    /// Fill in what the status object cannot know: on or off, when, why not.
    pub fn describe(&self, st: &mut ConsolidationStatus) {
        st.enabled = Some(self.enabled);
        st.schedule = self.enabled.then(|| self.schedule_text.clone());
        st.off_reason = self.off_reason.clone();
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum ConsolidationError {
    /// No LLM is configured: the consolidation needs one.
    #[error("memory consolidation needs an LLM: {0}")]
    NoLlm(String),
    /// Taking the writer lock, or reading the recall counts.
    #[error(transparent)]
    Memory(#[from] claw_memory_api::MemoryError),
    /// Reading notes or transcripts, writing MEMORY.md, the ledger or the report.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Reading or writing MEMORY.md (a symbolic link is refused), or its lock.
    #[error(transparent)]
    MemoryFile(#[from] crate::memory_file::MemoryFileError),
    /// The bound cannot hold the instructions, MEMORY.md and one candidate.
    #[error(
        "memory.consolidation.max_tokens ({max}) cannot hold the instructions and MEMORY.md (~{needed} tokens) and a reply"
    )]
    Budget { max: u64, needed: u64 },
    /// The model call failed.
    #[error("the model call failed: {0}")]
    Model(String),
    /// Cancelled (shutdown).
    #[error("cancelled")]
    Cancelled,
    #[error("a background task failed: {0}")]
    Task(String),
}

/// Everything one run needs.
pub struct Job<M: Model> {
    pub model: Arc<M>,
    pub memory: Arc<Memory>,
    pub settings: ConsolidationSettings,
    pub workspace: PathBuf,
    pub sessions_dir: PathBuf,
    pub state_dir: PathBuf,
    pub clock: Clock,
    /// Bound of MEMORY.md in bytes (`agent.memory_max_bytes`).
    pub memory_max_bytes: usize,
    /// Output tokens of a model call (`agent.max_tokens`).
    pub reply_tokens: u32,
    /// The model's context window (the run's bound never exceeds it).
    pub context_window: usize,
}

/// Where a candidate comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// A block of a daily note (first: what the user wrote).
    Note,
    /// A user turn of a transcript.
    Turn,
}

/// One piece of new material.
#[derive(Debug, Clone)]
struct Candidate {
    kind: Kind,
    /// The index's source (`memory`, `sessions`) and path (workspace-relative).
    source: &'static str,
    path: String,
    start: usize,
    end: usize,
    day: NaiveDate,
    /// The heading it is under (notes).
    context: String,
    text: String,
    key: String,
    recalls: i64,
}

impl Candidate {
    fn citation(&self) -> String {
        claw_memory_api::citation(&self.path, self.start, self.end)
    }

    fn preview(&self) -> String {
        let first = self.text.lines().next().unwrap_or("").trim();
        let mut out: String = first.chars().take(80).collect();
        if first.chars().count() > 80 || self.text.lines().count() > 1 {
            out.push('…');
        }
        out
    }
}

/// What was gathered for a run.
struct Gathered {
    window: Window,
    notes: usize,
    turns: usize,
    candidates: Vec<Candidate>,
}

/// A run's plan: the request and what it holds.
struct Plan {
    request: ChatRequest,
    sent: Vec<Candidate>,
    waiting: Vec<(Candidate, String)>,
    tokens: u64,
}

const SYSTEM: &str = "You maintain MEMORY.md, the long-term memory of a personal AI \
assistant. Below are the user's recent daily notes and what the user said in recent \
conversations, as numbered excerpts. Extract only durable facts worth remembering for \
months: people (who they are, roles, relationships), decisions (what was decided, and \
why), preferences (how the user likes things done), standing instructions (rules the user \
wants always followed), and facts about the user's life and projects that stay true. Leave \
out what MEMORY.md already says unchanged, one-off tasks and plans for a single day, small \
talk, questions, and anything secret (passwords, keys, tokens). When an excerpt changes a \
fact MEMORY.md holds (same subject, new value, or a correction), write the new fact and end \
its bullet with `(replaces: <the old fact as MEMORY.md words it>)`. End every bullet with \
the number of the excerpt it comes from in brackets, e.g. `[2]`. Reply with Markdown only: \
the headings `## People`, `## Decisions`, `## Preferences`, `## Standing instructions`, \
`## Facts`, each followed by `- ` bullets, one short self-contained fact per bullet; omit \
empty headings. If there is nothing durable, reply exactly NO_REPLY.";

impl<M: Model> Job<M> {
    /// Run once now. `Ok` also when there was nothing to do (the summary says
    /// so); every outcome, failures included, is recorded in the ledger and
    /// the day's report when it can be.
    pub async fn run(&self, cancel: &CancellationToken) -> Result<RunSummary, ConsolidationError> {
        let now = self.clock.now();
        let day = self.settings.zone.local(now).date_naive();
        // Every failure is recorded (the ledger, the day's report), so the
        // status and the doctor see it, also one before anything was read.
        let bare = || self.bare_summary(now, day);
        let ledger = match self.blocking(|j| j.load_ledger()).await.and_then(|r| r) {
            Ok(l) => l,
            Err(e) => return self.fail(bare(), e).await,
        };
        let window = self.window(&ledger, day);
        let gathered = {
            let (ledger, window) = (ledger.clone(), window);
            match self
                .blocking(move |j| j.gather(&ledger, window))
                .await
                .and_then(|r| r)
            {
                Ok(g) => g,
                Err(e) => return self.fail(bare(), e).await,
            }
        };
        let memory_md = match self.blocking(|j| j.read_memory()).await.and_then(|r| r) {
            Ok(m) => m,
            Err(e) => return self.fail(bare(), e).await,
        };
        let (eligible, mut waiting): (Vec<Candidate>, Vec<Candidate>) = gathered
            .candidates
            .iter()
            .cloned()
            .partition(|c| c.recalls >= self.settings.min_recalls as i64);
        let min = self.settings.min_recalls;
        let mut waiting: Vec<(Candidate, String)> = waiting
            .drain(..)
            .map(|c| {
                let why = format!(
                    "recalled {} time(s), fewer than memory.consolidation.min_recalls ({min})",
                    c.recalls
                );
                (c, why)
            })
            .collect();
        let mut summary = RunSummary {
            window: Some(gathered.window),
            notes: gathered.notes,
            turns: gathered.turns,
            candidates: gathered.candidates.len(),
            ..bare()
        };
        if eligible.is_empty() {
            summary.message = nothing_message(&ledger, &gathered, &waiting, &self.settings.zone);
            summary.items = waiting_items(&waiting, day);
            summary.skipped = summary.items.len();
            let pending = pending_since(&waiting);
            return self
                .finish_or_fail(summary, None, Vec::new(), pending, false)
                .await;
        }
        let plan = match self.plan(&memory_md, eligible) {
            Ok(p) => p,
            Err(e) => return self.fail(summary, e).await,
        };
        waiting.extend(plan.waiting);
        summary.sent = plan.sent.len();
        summary.tokens = plan.tokens;
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let reply = match self.model.complete(&plan.request, &tx, cancel).await {
            Ok(r) => r,
            Err(ModelFailure::Cancelled) => {
                return self.fail(summary, ConsolidationError::Cancelled).await;
            }
            Err(ModelFailure::ContextOverflow(m)) => {
                let e = ConsolidationError::Model(format!(
                    "the request did not fit the model's context window ({m}); lower memory.consolidation.max_tokens"
                ));
                return self.fail(summary, e).await;
            }
            Err(ModelFailure::Other(e)) => {
                return self
                    .fail(summary, ConsolidationError::Model(e.to_string()))
                    .await;
            }
        };
        summary.model = (!reply.model.is_empty()).then(|| reply.model.clone());
        let used = reply.usage.input_tokens + reply.usage.output_tokens;
        if used > 0 {
            summary.tokens = used;
        }
        let facts = facts_of(&reply.text, &plan.sent, day);
        let pending = pending_since(&waiting);
        summary.items = waiting_items(&waiting, day);
        self.finish_or_fail(summary, Some(facts), plan.sent, pending, true)
            .await
    }

    /// [`Job::finish`]; a failure in it (MEMORY.md's lock, a link, the disk)
    /// is recorded like any other.
    async fn finish_or_fail(
        &self,
        summary: RunSummary,
        facts: Option<Vec<(consolidate::Fact, String)>>,
        sent: Vec<Candidate>,
        pending: Option<NaiveDate>,
        asked: bool,
    ) -> Result<RunSummary, ConsolidationError> {
        let kept = summary.clone();
        match self.finish(summary, facts, sent, pending, asked).await {
            Ok(s) => Ok(s),
            Err(e) => self.fail(kept, e).await,
        }
    }

    /// The summary of a run that stopped before it read anything.
    fn bare_summary(&self, now: DateTime<Utc>, day: NaiveDate) -> RunSummary {
        RunSummary {
            at: now,
            day,
            outcome: Outcome::Unchanged,
            message: String::new(),
            window: None,
            notes: 0,
            turns: 0,
            candidates: 0,
            sent: 0,
            promoted: 0,
            updated: 0,
            skipped: 0,
            tokens: 0,
            max_tokens: self.max_tokens(),
            model: None,
            report: None,
            items: Vec::new(),
        }
    }

    /// The run's bound: `max_tokens`, never past the model's context window.
    fn max_tokens(&self) -> u64 {
        let window = self.context_window as u64;
        if window > 0 {
            self.settings.max_tokens.min(window)
        } else {
            self.settings.max_tokens
        }
    }

    /// The days to read: since the last run's day (or the oldest day with
    /// candidates left waiting), at most `max_days` back.
    fn window(&self, ledger: &Ledger, day: NaiveDate) -> Window {
        let earliest = day - Days::new(u64::from(self.settings.max_days - 1));
        let since_last = ledger
            .last_success()
            .map(|t| self.settings.zone.local(t).date_naive());
        let from = match (since_last, ledger.pending_since) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, _) => earliest,
        };
        Window {
            from: from.max(earliest).min(day),
            to: day,
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&BlockingJob) -> T + Send + 'static,
    ) -> Result<T, ConsolidationError> {
        let b = BlockingJob {
            memory: self.memory.clone(),
            workspace: self.workspace.clone(),
            sessions_dir: self.sessions_dir.clone(),
            state_dir: self.state_dir.clone(),
            zone: self.settings.zone,
        };
        tokio::task::spawn_blocking(move || f(&b))
            .await
            .map_err(|e| ConsolidationError::Task(e.to_string()))
    }

    /// The request: instructions, MEMORY.md, then the candidates in rank order
    /// while the bound holds (the rest wait).
    fn plan(
        &self,
        memory_md: &str,
        mut candidates: Vec<Candidate>,
    ) -> Result<Plan, ConsolidationError> {
        candidates.sort_by(|a, b| {
            b.recalls
                .cmp(&a.recalls)
                .then(a.kind.cmp(&b.kind))
                .then(a.day.cmp(&b.day))
                .then(a.path.cmp(&b.path))
                .then(a.start.cmp(&b.start))
        });
        let max = self.max_tokens();
        let reply = u64::from(self.reply_tokens).min((max / 4).max(256));
        let current = if memory_md.trim().is_empty() {
            "(empty)".to_string()
        } else {
            memory_md.to_string()
        };
        let head = format!(
            "Current MEMORY.md:\n<memory>\n{current}\n</memory>\n\nExcerpts, the most often recalled first:\n<excerpts>\n"
        );
        let tail = "</excerpts>\n";
        let build = |body: &str| ChatRequest {
            system: SYSTEM.into(),
            messages: vec![Message::user(
                format!("{head}{body}{tail}"),
                DateTime::<Utc>::UNIX_EPOCH,
            )],
            tools: Vec::new(),
            max_tokens: reply as u32,
        };
        let base = crate::compaction::estimate_request(&build("")) as u64;
        if base + reply >= max {
            return Err(ConsolidationError::Budget {
                max,
                needed: base + reply,
            });
        }
        let mut body = String::new();
        let mut sent: Vec<Candidate> = Vec::new();
        let mut waiting = Vec::new();
        let mut used = base;
        for c in candidates {
            let entry = render_candidate(sent.len() + 1, &c);
            let cost = crate::compaction::estimate_text(&entry) as u64;
            if used + cost + reply <= max {
                used += cost;
                body.push_str(&entry);
                sent.push(c);
            } else {
                waiting.push((
                    c,
                    format!("over the token budget ({max} per run): next run"),
                ));
            }
        }
        if sent.is_empty() {
            return Err(ConsolidationError::Budget {
                max,
                needed: used + reply + 1,
            });
        }
        Ok(Plan {
            request: build(&body),
            sent,
            waiting,
            tokens: used + reply,
        })
    }

    /// Record a failed run (best effort) and return the error.
    async fn fail(
        &self,
        mut summary: RunSummary,
        e: ConsolidationError,
    ) -> Result<RunSummary, ConsolidationError> {
        summary.outcome = Outcome::Failed;
        summary.message = format!("failed: {e}");
        summary.items.clear();
        let day = summary.day;
        let section = report_section(&summary, &self.settings.zone);
        let _ = self
            .blocking(move |j| -> Result<(), ConsolidationError> {
                let memory = j.memory.clone();
                let _lock = memory.writer_lock(LOCK_HOLDER, LOCK_WAIT)?;
                let mut ledger = j.load_ledger()?;
                let path =
                    record::append_report(&j.state_dir, day, &section).map_err(|source| {
                        j.io("cannot write the report", day_report(j, day), source)
                    })?;
                summary.report = Some(path.display().to_string());
                ledger.record(&summary);
                record::save(&j.state_dir, &ledger).map_err(|source| {
                    j.io("cannot write", record::ledger_path(&j.state_dir), source)
                })
            })
            .await;
        Err(e)
    }

    /// Under the writer lock: merge the facts into MEMORY.md as it is now,
    /// write it when it changes, mark the sent candidates done, record the run
    /// and append its report.
    async fn finish(
        &self,
        mut summary: RunSummary,
        facts: Option<Vec<(consolidate::Fact, String)>>,
        sent: Vec<Candidate>,
        pending: Option<NaiveDate>,
        asked: bool,
    ) -> Result<RunSummary, ConsolidationError> {
        let max_bytes = self.memory_max_bytes;
        let zone = self.settings.zone;
        let max_days = self.settings.max_days;
        let now = summary.at;
        self.blocking(move |j| -> Result<RunSummary, ConsolidationError> {
            let memory = j.memory.clone();
            let _lock = memory.writer_lock(LOCK_HOLDER, LOCK_WAIT)?;
            let mut ledger = j.load_ledger()?;
            let seen: HashSet<String> = ledger.seen.iter().map(|s| s.key.clone()).collect();
            let raced = asked && !sent.is_empty() && sent.iter().all(|c| seen.contains(&c.key));
            let day = summary.day;
            if raced {
                summary.message =
                    "nothing new: another run consolidated this material meanwhile; MEMORY.md unchanged"
                        .into();
            } else if let Some(facts) = facts {
                let (plain, from): (Vec<consolidate::Fact>, Vec<String>) = facts.into_iter().unzip();
                // Merged onto MEMORY.md as it is now, under its lock: a
                // `/remember` or `memory_append` meanwhile is kept.
                let merged = j.memory_file().update(LOCK_HOLDER, LOCK_WAIT, |current| {
                    let mut merged = consolidate::merge_on(current, &plain, max_bytes, Some(day));
                    let text = merged.changed().then(|| std::mem::take(&mut merged.text));
                    (text, merged)
                })?;
                let mut fact_items = Vec::new();
                for ((fact, cite), outcome) in plain.iter().zip(&from).zip(&merged.outcomes) {
                    // The report and the status show what MEMORY.md got: redacted.
                    let text = claw_memory_api::redact::redact(&split_marker(&fact.text)).into_owned();
                    let item = |kind, was, reason: Option<String>| ReportItem {
                        kind,
                        text: text.clone(),
                        was,
                        reason,
                        from: cite.clone(),
                        day,
                    };
                    match outcome {
                        FactOutcome::Added => fact_items.push(item(ItemKind::Promoted, None, None)),
                        FactOutcome::Updated { was } => {
                            fact_items.push(item(ItemKind::Updated, Some(was.clone()), None))
                        }
                        FactOutcome::Duplicate => fact_items.push(item(
                            ItemKind::Skipped,
                            None,
                            Some("already in MEMORY.md".into()),
                        )),
                        FactOutcome::Dropped => fact_items.push(item(
                            ItemKind::Skipped,
                            None,
                            Some(format!("MEMORY.md is full ({max_bytes} bytes)")),
                        )),
                        FactOutcome::Empty => {}
                    }
                }
                if merged.changed() {
                    summary.outcome = Outcome::Changed;
                }
                summary.promoted = merged.added;
                summary.updated = merged.updated;
                fact_items.append(&mut summary.items);
                summary.items = fact_items;
                summary.message = changed_message(&summary, sent.len());
            }
            summary.skipped = summary
                .items
                .iter()
                .filter(|i| i.kind == ItemKind::Skipped)
                .count();
            if !raced {
                for c in &sent {
                    if !seen.contains(&c.key) {
                        ledger.seen.push(Seen {
                            key: c.key.clone(),
                            day: c.day,
                        });
                    }
                }
                ledger.pending_since = pending;
            }
            let keep_from = day - Days::new(u64::from(max_days));
            ledger.seen.retain(|s| s.day >= keep_from);
            let section = report_section(&summary, &zone);
            let path = record::append_report(&j.state_dir, day, &section)
                .map_err(|source| j.io("cannot write the report", day_report(j, day), source))?;
            summary.report = Some(path.display().to_string());
            ledger.record(&summary);
            record::save(&j.state_dir, &ledger).map_err(|source| {
                j.io("cannot write", record::ledger_path(&j.state_dir), source)
            })?;
            // Counts nobody refreshed for months rank nothing any more.
            let _ = memory.prune_recalls(now.timestamp() - RECALL_RETENTION_DAYS * 86_400);
            Ok(summary)
        })
        .await?
    }
}

/// The blocking side of a run (file reads and writes, the memory service).
struct BlockingJob {
    memory: Arc<Memory>,
    workspace: PathBuf,
    sessions_dir: PathBuf,
    state_dir: PathBuf,
    zone: Zone,
}

fn day_report(j: &BlockingJob, day: NaiveDate) -> PathBuf {
    record::report_path(&j.state_dir, day)
}

impl BlockingJob {
    fn io(&self, what: &'static str, path: PathBuf, source: std::io::Error) -> ConsolidationError {
        ConsolidationError::Io { what, path, source }
    }

    fn load_ledger(&self) -> Result<Ledger, ConsolidationError> {
        record::load(&self.state_dir)
            .map_err(|source| self.io("cannot read", record::ledger_path(&self.state_dir), source))
    }

    fn memory_file(&self) -> crate::memory_file::MemoryFile {
        crate::memory_file::MemoryFile::new(&self.workspace, &self.state_dir)
    }

    /// MEMORY.md as it is ("" when there is none); a symlink is refused.
    fn read_memory(&self) -> Result<String, ConsolidationError> {
        Ok(self.memory_file().read()?)
    }

    /// The candidates of `window` not consolidated yet, with their recall counts.
    fn gather(&self, ledger: &Ledger, window: Window) -> Result<Gathered, ConsolidationError> {
        let seen: HashSet<&str> = ledger.seen.iter().map(|s| s.key.as_str()).collect();
        let max_bytes = self.memory.settings().memory.max_file_bytes;
        let (notes, mut note_cands) = self.note_candidates(window, max_bytes)?;
        let (turns, mut turn_cands) = self.turn_candidates(window, max_bytes)?;
        note_cands.retain(|c| !seen.contains(c.key.as_str()));
        turn_cands.retain(|c| !seen.contains(c.key.as_str()));
        let mut candidates = note_cands;
        candidates.append(&mut turn_cands);
        // Recall counts: the most recalled chunk overlapping each candidate.
        let mut by_source: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for c in &candidates {
            by_source.entry(c.source).or_default().push(c.path.clone());
        }
        for (source, mut paths) in by_source {
            paths.sort();
            paths.dedup();
            let rows = self.memory.recalls(source, &paths)?;
            for c in candidates.iter_mut().filter(|c| c.source == source) {
                c.recalls = rows
                    .iter()
                    .filter(|r| {
                        r.hit.path == c.path
                            && r.hit.start_line <= c.end
                            && r.hit.end_line >= c.start
                    })
                    .map(|r| r.count)
                    .max()
                    .unwrap_or(0);
            }
        }
        Ok(Gathered {
            window,
            notes,
            turns,
            candidates,
        })
    }

    /// The dated notes under `memory/` of the window, block by block. Links
    /// are not followed (the workspace is not trusted).
    fn note_candidates(
        &self,
        window: Window,
        max_bytes: u64,
    ) -> Result<(usize, Vec<Candidate>), ConsolidationError> {
        let root = self.workspace.join("memory");
        let mut files = Vec::new();
        // A symlinked `memory/` (which a tool can make) would bring notes
        // from outside the workspace into MEMORY.md: not followed.
        if is_real_dir(&root) {
            collect_notes(&root, "memory", &mut files);
        }
        files.sort();
        let mut count = 0;
        let mut out = Vec::new();
        for (rel, path) in files {
            let Some(day) = claw_memory_api::dates::note_time_from_path(&rel)
                .and_then(|t| DateTime::from_timestamp(t, 0))
                .map(|t| t.date_naive())
            else {
                continue;
            };
            if day < window.from || day > window.to {
                continue;
            }
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.is_file() || meta.len() > max_bytes {
                continue;
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidData => continue,
                Err(source) => return Err(self.io("cannot read", path, source)),
            };
            count += 1;
            // Redacted whole, before it is cut into blocks and blocks are cut
            // short: a secret across lines or at a cut is still caught, and
            // the headings are redacted too (lines are kept, so citations hold).
            let text = claw_memory_api::redact::redact(&text).into_owned();
            for b in blocks(&text) {
                let body = b.text.clone();
                out.push(Candidate {
                    kind: Kind::Note,
                    source: "memory",
                    key: key(&["note", &rel, &normalize(&b.text)]),
                    path: rel.clone(),
                    start: b.start,
                    end: b.end,
                    day,
                    context: b.heading,
                    text: body,
                    recalls: 0,
                });
            }
        }
        Ok((count, out))
    }

    /// The user's turns in the window, from every session transcript but the
    /// scheduler's and sub-agents' (their "user" is claw itself).
    fn turn_candidates(
        &self,
        window: Window,
        max_bytes: u64,
    ) -> Result<(usize, Vec<Candidate>), ConsolidationError> {
        let dir = &self.sessions_dir;
        if !is_real_dir(dir) {
            // Missing, or a symlink a tool made: nothing read through it.
            return Ok((0, Vec::new()));
        }
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.path())
                .filter(|p| {
                    p.extension().is_some_and(|x| x == "jsonl")
                        && !p
                            .file_name()
                            .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(self.io("cannot list", dir.clone(), source)),
        };
        files.sort();
        let rel_dir = dir
            .strip_prefix(&self.workspace)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_else(|_| "sessions".into());
        let mut out = Vec::new();
        let mut count = 0;
        for path in files {
            // Over the index's size limit: left out, as the index leaves it out.
            if std::fs::symlink_metadata(&path).map_or(true, |m| m.len() > max_bytes) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let rel = format!("{rel_dir}/{name}");
            for (i, line) in text.lines().enumerate() {
                if i == 0 {
                    if let Ok(meta) = serde_json::from_str::<serde_json::Value>(line)
                        && meta["type"] == "session"
                        && let Some(k) = meta["key"].as_str()
                        && is_claws_own_session(k)
                    {
                        break;
                    }
                    continue;
                }
                if !line.contains("\"user\"") {
                    continue;
                }
                let Ok(crate::session::Record::Message(m)) =
                    serde_json::from_str::<crate::session::Record>(line)
                else {
                    continue;
                };
                if m.role != Role::User {
                    continue;
                }
                let day = self.zone.local(m.timestamp).date_naive();
                if day < window.from || day > window.to {
                    continue;
                }
                let content = m.content.trim();
                if content.starts_with('/') || content.split_whitespace().count() < MIN_WORDS {
                    continue;
                }
                count += 1;
                // Redacted before it is cut short (a secret at the cut is caught).
                let redacted = claw_memory_api::redact::redact(content);
                let text: String = redacted.chars().take(CANDIDATE_CHARS).collect();
                out.push(Candidate {
                    kind: Kind::Turn,
                    source: claw_memory_api::SOURCE_SESSIONS,
                    key: key(&["turn", &rel, &(i + 1).to_string(), &normalize(content)]),
                    path: rel.clone(),
                    start: i + 1,
                    end: i + 1,
                    day,
                    context: String::new(),
                    text,
                    recalls: 0,
                });
            }
        }
        Ok((count, out))
    }
}

/// Sessions whose user turns are claw's own words: cron jobs, the heartbeat,
/// sub-agents.
fn is_claws_own_session(key: &str) -> bool {
    key.starts_with("cron:")
        || key == claw_schedule::heartbeat::HEARTBEAT_SESSION
        || key.starts_with("subagent:")
}

/// Markdown files under `dir` (`rel`: its workspace-relative path), without
/// following links or entering hidden folders.
/// `path` is a directory itself, not a symlink to one.
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

fn collect_notes(dir: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let Ok(t) = e.file_type() else { continue };
        let child = format!("{rel}/{name}");
        if t.is_dir() {
            collect_notes(&e.path(), &child, out);
        } else if t.is_file() && (name.ends_with(".md") || name.ends_with(".markdown")) {
            out.push((child, e.path()));
        }
    }
}

/// A block of a note: consecutive lines of one paragraph or one list item,
/// with the heading it is under.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    start: usize,
    end: usize,
    heading: String,
    text: String,
}

/// The blocks of a note: a blank line, a heading or a new top-level list item
/// ends one; blocks of fewer than [`MIN_WORDS`] words are left out; a block is
/// cut at [`CANDIDATE_CHARS`].
fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut cur: Option<Block> = None;
    let mut in_code = false;
    let flush = |cur: &mut Option<Block>, out: &mut Vec<Block>| {
        if let Some(b) = cur.take()
            && b.text.split_whitespace().count() >= MIN_WORDS
        {
            let mut b = b;
            if b.text.chars().count() > CANDIDATE_CHARS {
                b.text = b.text.chars().take(CANDIDATE_CHARS).collect::<String>() + "…";
            }
            out.push(b);
        }
    };
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let t = line.trim();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_code = !in_code;
        }
        if !in_code && t.starts_with('#') {
            flush(&mut cur, &mut out);
            heading = t.trim_start_matches('#').trim().to_string();
            continue;
        }
        if t.is_empty() && !in_code {
            flush(&mut cur, &mut out);
            continue;
        }
        let item = !in_code && !line.starts_with([' ', '\t']) && is_item(t);
        if item {
            flush(&mut cur, &mut out);
        }
        match &mut cur {
            Some(b) => {
                b.end = n;
                b.text.push('\n');
                b.text.push_str(line);
            }
            None => {
                cur = Some(Block {
                    start: n,
                    end: n,
                    heading: heading.clone(),
                    text: line.to_string(),
                })
            }
        }
    }
    flush(&mut cur, &mut out);
    out
}

fn is_item(t: &str) -> bool {
    if t.starts_with("- ") || t.starts_with("* ") || t.starts_with("+ ") {
        return true;
    }
    let digits = t.chars().take_while(|c| c.is_ascii_digit()).count();
    digits > 0 && (t[digits..].starts_with(". ") || t[digits..].starts_with(") "))
}

/// Whitespace collapsed, for keys that survive re-wrapping.
fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A stable key of a candidate.
fn key(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    h.finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// One numbered excerpt of the request.
fn render_candidate(n: usize, c: &Candidate) -> String {
    let what = match c.kind {
        Kind::Note => "note",
        Kind::Turn => "the user said",
    };
    let recalled = if c.recalls > 0 {
        format!(", recalled by {} search(es)", c.recalls)
    } else {
        String::new()
    };
    let under = if c.context.is_empty() {
        String::new()
    } else {
        format!(", under \"{}\"", c.context)
    };
    format!(
        "[{n}] {} ({what}, {}{under}{recalled})\n{}\n\n",
        c.citation(),
        c.day.format("%Y-%m-%d"),
        c.text.trim_end()
    )
}

/// The facts of the reply, each under the run's dated heading with the
/// citation of the excerpt it names (`[n]`), or else of the sent excerpt it
/// shares most words with.
fn facts_of(reply: &str, sent: &[Candidate], day: NaiveDate) -> Vec<(consolidate::Fact, String)> {
    let heading = consolidate::dated_heading(day);
    consolidate::parse_reply(reply)
        .into_iter()
        .filter_map(|f| {
            let (text, refs) = strip_refs(&f.text);
            if text.is_empty() {
                return None;
            }
            let picked = refs
                .iter()
                .find_map(|n| n.checked_sub(1).and_then(|i| sent.get(i)))
                .or_else(|| best_match(&text, sent))?;
            let cite = picked.citation();
            Some((
                consolidate::Fact {
                    heading: heading.clone(),
                    text,
                    source: Some(cite.clone()),
                },
                cite,
            ))
        })
        .collect()
}

/// `[2]`, `[1, 3]` markers taken out of a fact; the numbers.
fn strip_refs(text: &str) -> (String, Vec<usize>) {
    let mut out = String::new();
    let mut refs = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        let inner = &after[..close];
        let nums: Option<Vec<usize>> = inner
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| s.trim().parse().ok())
            .collect();
        match nums {
            Some(n) if !n.is_empty() => {
                out.push_str(&rest[..open]);
                refs.extend(n);
            }
            _ => out.push_str(&rest[..open + 1 + close + 1]),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    let cleaned = out.split_whitespace().collect::<Vec<_>>().join(" ");
    let cleaned = cleaned.replace(" .", ".").replace(" )", ")");
    (cleaned.trim().to_string(), refs)
}

/// The sent candidate sharing the most words with `fact`.
fn best_match<'a>(fact: &str, sent: &'a [Candidate]) -> Option<&'a Candidate> {
    let words = |s: &str| -> HashSet<String> {
        s.split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.len() > 2)
            .map(str::to_lowercase)
            .collect()
    };
    let f = words(fact);
    sent.iter()
        .map(|c| (words(&c.text).intersection(&f).count(), c))
        .max_by_key(|(n, _)| *n)
        .map(|(_, c)| c)
}

/// A fact's text without its `(replaces: …)` marker (what the report shows).
fn split_marker(text: &str) -> String {
    match text.to_ascii_lowercase().rfind("(replaces:") {
        Some(i) => text[..i].trim_end().to_string(),
        None => text.to_string(),
    }
}

fn pending_since(waiting: &[(Candidate, String)]) -> Option<NaiveDate> {
    waiting.iter().map(|(c, _)| c.day).min()
}

fn waiting_items(waiting: &[(Candidate, String)], day: NaiveDate) -> Vec<ReportItem> {
    waiting
        .iter()
        .map(|(c, why)| ReportItem {
            kind: ItemKind::Skipped,
            text: c.preview(),
            was: None,
            reason: Some(why.clone()),
            from: c.citation(),
            day,
        })
        .collect()
}

/// Why a run had nothing to send.
fn nothing_message(
    ledger: &Ledger,
    g: &Gathered,
    waiting: &[(Candidate, String)],
    zone: &Zone,
) -> String {
    let since = match ledger.last_success() {
        Some(t) => format!(
            "since the last run ({})",
            zone.local(t).format("%Y-%m-%d %H:%M")
        ),
        None => format!(
            "in the notes and conversations of {} to {}",
            g.window.from, g.window.to
        ),
    };
    if waiting.is_empty() {
        format!("nothing new {since}; MEMORY.md unchanged")
    } else {
        format!(
            "nothing new to consolidate {since}: {} candidate(s) wait (not recalled often enough); MEMORY.md unchanged",
            waiting.len()
        )
    }
}

/// What a run that asked the model did, in one line.
fn changed_message(s: &RunSummary, sent: usize) -> String {
    let skipped = s
        .items
        .iter()
        .filter(|i| i.kind == ItemKind::Skipped)
        .count();
    if s.promoted + s.updated == 0 {
        let mut m = format!("nothing durable to add from {sent} new candidate(s)");
        if skipped > 0 {
            m.push_str(&format!(", {skipped} skipped"));
        }
        m.push_str("; MEMORY.md unchanged");
        return m;
    }
    format!(
        "promoted {}, updated {}, skipped {} from {sent} new candidate(s)",
        s.promoted, s.updated, skipped
    )
}

/// The run's section of the day's report.
fn report_section(s: &RunSummary, zone: &Zone) -> String {
    let mut out = format!(
        "## {} ({}): {}\n\n",
        zone.local(s.at).format("%H:%M"),
        zone.name(),
        s.message
    );
    if let Some(w) = &s.window {
        out.push_str(&format!(
            "Read {} daily note(s) and {} user turn(s) of {} to {}; {} new candidate(s), {} sent; ~{} of {} tokens.\n",
            s.notes, s.turns, w.from, w.to, s.candidates, s.sent, s.tokens, s.max_tokens
        ));
    }
    let section = |kind: ItemKind, title: &str, out: &mut String| {
        let items: Vec<&ReportItem> = s.items.iter().filter(|i| i.kind == kind).collect();
        if items.is_empty() {
            return;
        }
        out.push_str(&format!("\n{title}:\n"));
        for i in items {
            let mut line = format!("- {}", i.text);
            if let Some(w) = &i.was {
                line.push_str(&format!(" (was {w})"));
            }
            if let Some(r) = &i.reason {
                line.push_str(&format!(" ({r})"));
            }
            line.push_str(&format!(" — from {}\n", i.from));
            out.push_str(&line);
        }
    };
    section(
        ItemKind::Promoted,
        &format!(
            "Promoted into MEMORY.md (## {})",
            consolidate::dated_heading(s.day)
        ),
        &mut out,
    );
    section(
        ItemKind::Updated,
        "Updated (the old value kept as history)",
        &mut out,
    );
    section(ItemKind::Skipped, "Skipped", &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_split_into_blocks_under_their_headings() {
        let note = "# Monday\n\nThe budget cap is 15000 EUR now.\nSigned off by Ada.\n\n## People\n- Ada leads payments now.\n- Grace joined\n  the platform team in May.\n- ok\n\n```\n# not a heading\n```\n";
        let b = blocks(note);
        let got: Vec<(usize, usize, &str, &str)> = b
            .iter()
            .map(|b| (b.start, b.end, b.heading.as_str(), b.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    3,
                    4,
                    "Monday",
                    "The budget cap is 15000 EUR now.\nSigned off by Ada."
                ),
                (7, 7, "People", "- Ada leads payments now."),
                (
                    8,
                    9,
                    "People",
                    "- Grace joined\n  the platform team in May."
                ),
                (12, 14, "People", "```\n# not a heading\n```"),
            ]
        );
    }

    #[test]
    fn refs_are_taken_out_of_facts() {
        assert_eq!(
            strip_refs("Budget cap is 15000 EUR [2]."),
            ("Budget cap is 15000 EUR.".to_string(), vec![2])
        );
        assert_eq!(
            strip_refs("Coffee now (replaces: Tea) [1, 3]"),
            ("Coffee now (replaces: Tea)".to_string(), vec![1, 3])
        );
        assert_eq!(
            strip_refs("Uses [brackets] in text"),
            ("Uses [brackets] in text".to_string(), vec![])
        );
    }

    #[test]
    fn the_config_resolves_with_defaults_and_is_off_without_an_llm() {
        let c = ConsolidationConfig::default();
        c.check().unwrap();
        let on = c.resolve(Ok(()), Zone::Utc);
        assert!(on.enabled);
        assert_eq!(on.schedule_text, "daily at 03:00 (UTC)");
        assert_eq!((on.max_tokens, on.min_recalls, on.max_days), (8000, 0, 7));
        let off = c.resolve(Err("no LLM is configured. Set CLAW_LLM_MODEL"), Zone::Utc);
        assert!(!off.enabled);
        assert_eq!(off.off_reason.as_deref(), Some("no LLM is configured"));
        let at = ConsolidationConfig {
            schedule: Some("21:30".into()),
            ..Default::default()
        };
        assert_eq!(at.cron().unwrap(), "30 21 * * *");
        assert_eq!(
            at.resolve(Ok(()), Zone::Utc).schedule_text,
            "daily at 21:30 (UTC)"
        );
        for bad in ["25:00", "every day", "* * *"] {
            let c = ConsolidationConfig {
                schedule: Some(bad.into()),
                ..Default::default()
            };
            assert!(c.check().is_err(), "{bad}");
        }
        let off = ConsolidationConfig {
            enabled: Some(false),
            ..Default::default()
        };
        assert!(!off.resolve(Ok(()), Zone::Utc).enabled);
        assert!(
            ConsolidationConfig {
                max_tokens: Some(10),
                ..Default::default()
            }
            .check()
            .is_err()
        );
    }
}
