//! The record of the scheduled consolidation (`claw memory consolidate`, the
//! gateway's daily run): what it promoted into MEMORY.md, what it updated and
//! what it skipped, with where each came from. It lives in the state directory,
//! beside the index it ranks its candidates with (the recall counts), never in
//! the workspace:
//!
//! - `<state>/consolidation/state.json` ([`Ledger`]): the last run's summary,
//!   the recent promotions (what the Memory page shows), and the candidates
//!   already consolidated (`seen`: a key per note block or user turn and its
//!   day), which makes a second run over the same material change nothing;
//! - `<state>/consolidation/reports/YYYY-MM-DD.md`: the readable report, one
//!   section per run of that day (the last [`REPORTS_KEPT`] days are kept).
//!
//! The status object's `consolidation` field ([`ConsolidationStatus`]) is read
//! from here; whether the job is on, and its schedule, the caller fills in (it
//! knows the configuration and whether an LLM is configured). Blocking I/O.
#![allow(missing_docs)] // the fields are documented where they are not obvious

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The directory of the record, inside the state directory.
pub const DIR: &str = "consolidation";
/// The ledger file, inside [`DIR`].
pub const STATE_FILE: &str = "state.json";
/// The reports' directory, inside [`DIR`].
pub const REPORTS_DIR: &str = "reports";
/// Daily reports kept (older ones are removed when a new day's is written).
pub const REPORTS_KEPT: usize = 30;
/// Recent promotions and updates kept in the ledger (newest first).
pub const RECENT_KEPT: usize = 20;
/// Items of one run kept in its summary (the report has them all).
pub const ITEMS_KEPT: usize = 50;
/// Format version of the ledger.
pub const VERSION: u32 = 1;

/// What a run did with one fact or candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A new fact added to MEMORY.md.
    Promoted,
    /// A fact that replaced the one it changes (the old value kept as history).
    Updated,
    /// Not written: already there, not recalled often enough, over the token
    /// budget, or no room left in MEMORY.md (`reason` says which).
    Skipped,
}

/// One line of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportItem {
    pub kind: ItemKind,
    /// The fact as written (promoted, updated, a duplicate), or the start of a
    /// candidate that was not sent to the model.
    pub text: String,
    /// Updated: the value it replaced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// Skipped: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Where it came from: a citation (`memory/2026-12-01.md#L3-L4`,
    /// `sessions/telegram_42.jsonl#L17`).
    pub from: String,
    /// The day of the run (local).
    pub day: NaiveDate,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// MEMORY.md changed.
    Changed,
    /// Nothing to change (nothing new, or nothing durable in it).
    Unchanged,
    /// The run failed (the model, the lock, a file); nothing was marked done.
    Failed,
}

/// The days a run read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub from: NaiveDate,
    pub to: NaiveDate,
}

/// One run, as `claw memory consolidate --json` prints it and status shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    /// When it ran.
    pub at: DateTime<Utc>,
    /// Its local day (the date of MEMORY.md's heading and history).
    pub day: NaiveDate,
    pub outcome: Outcome,
    /// One readable line: what it did, or why it did nothing.
    pub message: String,
    /// The days read (`None` when the run stopped before reading).
    pub window: Option<Window>,
    /// Daily notes and user turns read in the window.
    pub notes: usize,
    pub turns: usize,
    /// Candidates not consolidated before, and of those the ones sent to the model.
    pub candidates: usize,
    pub sent: usize,
    pub promoted: usize,
    pub updated: usize,
    pub skipped: usize,
    /// Estimated tokens of the model call (prompt + the reply's allowance),
    /// and the bound per run (`memory.consolidation.max_tokens`).
    pub tokens: u64,
    pub max_tokens: u64,
    /// The model that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The report file this run's section was written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<String>,
    /// What it did, fact by fact (at most [`ITEMS_KEPT`]).
    pub items: Vec<ReportItem>,
}

/// A candidate already consolidated: its key and its day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub key: String,
    pub day: NaiveDate,
}

/// `state.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(default)]
    pub version: u32,
    /// The latest run (failed ones included).
    #[serde(default)]
    pub last_run: Option<RunSummary>,
    /// The latest run that changed MEMORY.md.
    #[serde(default)]
    pub last_change: Option<DateTime<Utc>>,
    /// Recent promotions and updates, newest first (at most [`RECENT_KEPT`]).
    #[serde(default)]
    pub recent: Vec<ReportItem>,
    /// Candidates consolidated already (the ones of the last days that a
    /// window can still reach).
    #[serde(default)]
    pub seen: Vec<Seen>,
    /// The oldest day with candidates left for a later run (over the token
    /// budget, or not recalled often enough yet): the next window starts there.
    #[serde(default)]
    pub pending_since: Option<NaiveDate>,
}

impl Ledger {
    /// When the last successful run happened.
    pub fn last_success(&self) -> Option<DateTime<Utc>> {
        self.last_run
            .as_ref()
            .filter(|r| r.outcome != Outcome::Failed)
            .map(|r| r.at)
    }

    /// Record a run: its summary, its promotions and updates at the front of
    /// the recent list.
    pub fn record(&mut self, run: &RunSummary) {
        let mut fresh: Vec<ReportItem> = run
            .items
            .iter()
            .filter(|i| i.kind != ItemKind::Skipped)
            .cloned()
            .collect();
        if !fresh.is_empty() {
            fresh.append(&mut self.recent);
            fresh.truncate(RECENT_KEPT);
            self.recent = fresh;
        }
        if run.outcome == Outcome::Changed {
            self.last_change = Some(run.at);
        }
        let mut run = run.clone();
        run.items.truncate(ITEMS_KEPT);
        self.last_run = Some(run);
        self.version = VERSION;
    }
}

/// The status object's `consolidation` field.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConsolidationStatus {
    /// Whether the scheduled job runs (null when the caller did not pass the
    /// configuration: the index alone cannot know).
    pub enabled: Option<bool>,
    /// When it runs (`memory.consolidation.schedule`), when on.
    pub schedule: Option<String>,
    /// Why it is off (no LLM configured, or turned off), when off.
    pub off_reason: Option<String>,
    /// The latest run.
    pub last_run: Option<RunSummary>,
    /// Recent promotions and updates, newest first.
    pub recent: Vec<ReportItem>,
    /// Where the reports are.
    pub reports_dir: String,
}

impl ConsolidationStatus {
    /// Readable lines for `claw memory status`.
    pub fn render(&self) -> Vec<String> {
        let mut out = Vec::new();
        match (self.enabled, &self.schedule, &self.off_reason) {
            (Some(true), Some(s), _) => out.push(format!(
                "consolidation: on, {s}, in a running `claw gateway` (`claw memory consolidate` runs it now)"
            )),
            (Some(true), None, _) => out.push("consolidation: on".to_string()),
            (Some(false), _, Some(why)) => out.push(format!("consolidation: off ({why})")),
            (Some(false), _, None) => out.push("consolidation: off".to_string()),
            (None, _, _) => {}
        }
        match &self.last_run {
            None => out.push("last consolidation: never".to_string()),
            Some(r) => {
                out.push(format!(
                    "last consolidation: {} — {}",
                    r.at.format("%Y-%m-%d %H:%M UTC"),
                    r.message
                ));
                if let Some(p) = &r.report {
                    out.push(format!("report: {p}"));
                }
            }
        }
        for i in self.recent.iter().take(5) {
            let what = match i.kind {
                ItemKind::Updated => "updated",
                _ => "promoted",
            };
            out.push(format!("  {} {what}: {} — from {}", i.day, i.text, i.from));
        }
        out
    }
}

/// `<state>/consolidation`.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR)
}

/// `<state>/consolidation/state.json`.
pub fn ledger_path(state_dir: &Path) -> PathBuf {
    dir(state_dir).join(STATE_FILE)
}

/// `<state>/consolidation/reports/<day>.md`.
pub fn report_path(state_dir: &Path, day: NaiveDate) -> PathBuf {
    dir(state_dir)
        .join(REPORTS_DIR)
        .join(format!("{}.md", day.format("%Y-%m-%d")))
}

/// Read the ledger (the default when there is none yet).
pub fn load(state_dir: &Path) -> std::io::Result<Ledger> {
    let path = ledger_path(state_dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: {e}", path.display()),
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Ledger::default()),
        Err(e) => Err(e),
    }
}

/// Replace the ledger atomically (0600, in a 0700 directory).
pub fn save(state_dir: &Path, ledger: &Ledger) -> std::io::Result<()> {
    let d = dir(state_dir);
    claw_memory::private::create_dir_all(&d)?;
    let bytes = serde_json::to_vec_pretty(ledger).map_err(std::io::Error::other)?;
    write_atomic(&ledger_path(state_dir), &bytes)
}

/// Append `section` to the report of `day` (created with a title), keep the
/// last [`REPORTS_KEPT`] days; the report's path.
pub fn append_report(state_dir: &Path, day: NaiveDate, section: &str) -> std::io::Result<PathBuf> {
    let reports = dir(state_dir).join(REPORTS_DIR);
    claw_memory::private::create_dir_all(&reports)?;
    let path = report_path(state_dir, day);
    let mut text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("# Memory consolidation, {}\n", day.format("%Y-%m-%d"))
        }
        Err(e) => return Err(e),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text.push_str(section.trim_end());
    text.push('\n');
    write_atomic(&path, text.as_bytes())?;
    let mut days: Vec<PathBuf> = std::fs::read_dir(&reports)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    days.sort();
    if days.len() > REPORTS_KEPT {
        for old in &days[..days.len() - REPORTS_KEPT] {
            let _ = std::fs::remove_file(old);
        }
    }
    Ok(path)
}

/// The status field from the ledger in `state_dir` (`enabled`, `schedule` and
/// `off_reason` unknown: the caller fills them). A ledger that cannot be read
/// is reported as never run.
pub fn status(state_dir: &Path) -> ConsolidationStatus {
    let ledger = load(state_dir).unwrap_or_default();
    ConsolidationStatus {
        enabled: None,
        schedule: None,
        off_reason: None,
        last_run: ledger.last_run,
        recent: ledger.recent,
        reports_dir: dir(state_dir).join(REPORTS_DIR).display().to_string(),
    }
}

/// Write `bytes` to a temporary file beside `path` (0600), sync it, rename it
/// over `path`.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new()
        .prefix(".consolidation")
        .suffix(".tmp")
        .tempfile_in(parent)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: ItemKind, text: &str) -> ReportItem {
        ReportItem {
            kind,
            text: text.into(),
            was: None,
            reason: None,
            from: "memory/2026-12-01.md#L1-L1".into(),
            day: "2026-12-02".parse().unwrap(),
        }
    }

    fn run(items: Vec<ReportItem>) -> RunSummary {
        RunSummary {
            at: "2026-12-02T03:00:00Z".parse().unwrap(),
            day: "2026-12-02".parse().unwrap(),
            outcome: Outcome::Changed,
            message: "promoted 1".into(),
            window: None,
            notes: 1,
            turns: 0,
            candidates: 1,
            sent: 1,
            promoted: 1,
            updated: 0,
            skipped: 1,
            tokens: 10,
            max_tokens: 100,
            model: None,
            report: None,
            items,
        }
    }

    #[test]
    fn the_ledger_round_trips_and_keeps_recent_promotions_first() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = load(dir.path()).unwrap();
        assert_eq!(l, Ledger::default());
        l.record(&run(vec![
            item(ItemKind::Promoted, "a"),
            item(ItemKind::Skipped, "b"),
        ]));
        l.record(&run(vec![item(ItemKind::Updated, "c")]));
        save(dir.path(), &l).unwrap();
        let back = load(dir.path()).unwrap();
        assert_eq!(back, l);
        let texts: Vec<&str> = back.recent.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, ["c", "a"]);
        let st = status(dir.path());
        assert!(st.last_run.is_some());
        assert!(st.render().iter().any(|l| l.contains("updated: c")));
    }

    #[test]
    fn reports_append_per_day_and_old_days_go() {
        let dir = tempfile::tempdir().unwrap();
        let d = |s: &str| s.parse::<NaiveDate>().unwrap();
        let p = append_report(dir.path(), d("2026-12-02"), "## 03:00\nfirst").unwrap();
        append_report(dir.path(), d("2026-12-02"), "## 10:00\nsecond").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            text,
            "# Memory consolidation, 2026-12-02\n\n## 03:00\nfirst\n\n## 10:00\nsecond\n"
        );
        for i in 0..REPORTS_KEPT + 3 {
            let day = d("2027-01-01") + chrono::Days::new(i as u64);
            append_report(dir.path(), day, "x").unwrap();
        }
        let n = std::fs::read_dir(p.parent().unwrap()).unwrap().count();
        assert_eq!(n, REPORTS_KEPT);
    }
}
