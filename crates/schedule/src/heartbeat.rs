//! The heartbeat: every `heartbeat.interval_minutes` (default 30) inside the
//! active hours, read `HEARTBEAT.md` from the workspace; when it has something to
//! act on, fire a turn asking the model to check it and to reply exactly
//! `HEARTBEAT_OK` when nothing needs attention.
//!
//! A tick is skipped WITHOUT calling the model when the file is missing or has no
//! actionable line ([`actionable_lines`]: blank lines, headings, HTML comments,
//! horizontal rules, checkboxes with no text and ticked `- [x]` items do not count),
//! outside the active hours, or while the previous heartbeat turn still runs.
//!
//! The gateway suppresses an answer for which [`is_heartbeat_ok`] holds and
//! delivers any other answer to the most recently active session.

use crate::clock::Clock;
use crate::scheduler::{Event, Fire, FireKind, RunGuard, blocking};
use crate::spec::{SpecError, Zone};
use chrono::{DateTime, NaiveTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The answer that means "nothing needs attention".
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";
/// The file the heartbeat reads, in the workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";
/// The session heartbeat turns run in.
pub const HEARTBEAT_SESSION: &str = "heartbeat";
/// Default interval.
pub const DEFAULT_INTERVAL_MINUTES: u64 = 30;

/// The `heartbeat` section of the config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Default true (under the gateway).
    pub enabled: bool,
    /// Minutes between ticks (default 30, at least 1).
    pub interval_minutes: u64,
    /// Only tick inside this window (default: always).
    pub active_hours: Option<ActiveHoursConfig>,
}

impl Default for HeartbeatConfig {
    fn default() -> HeartbeatConfig {
        HeartbeatConfig {
            enabled: true,
            interval_minutes: DEFAULT_INTERVAL_MINUTES,
            active_hours: None,
        }
    }
}

/// `{"start": "08:00", "end": "22:00", "tz": "Europe/Berlin"}`; `end` before
/// `start` wraps past midnight; `tz` defaults to the caller's zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActiveHoursConfig {
    pub start: String,
    pub end: String,
    #[serde(default)]
    pub tz: Option<String>,
}

/// Why a heartbeat configuration is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatConfigError {
    #[error("heartbeat.interval_minutes must be at least 1")]
    ZeroInterval,
    #[error("heartbeat.active_hours.{field}: `{value}` is not a time of day (HH:MM)")]
    BadTimeOfDay { field: &'static str, value: String },
    #[error("heartbeat.active_hours.tz: {0}")]
    Zone(#[from] SpecError),
}

/// The validated heartbeat settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatSettings {
    pub enabled: bool,
    pub interval: Duration,
    pub active_hours: Option<ActiveHours>,
}

impl HeartbeatConfig {
    /// Validates the section; `default_zone` is used when `active_hours.tz` is absent.
    pub fn resolve(&self, default_zone: Zone) -> Result<HeartbeatSettings, HeartbeatConfigError> {
        if self.interval_minutes == 0 {
            return Err(HeartbeatConfigError::ZeroInterval);
        }
        let active_hours = match &self.active_hours {
            None => None,
            Some(a) => Some(ActiveHours {
                start: parse_time_of_day("start", &a.start)?,
                end: parse_time_of_day("end", &a.end)?,
                zone: match &a.tz {
                    Some(tz) => Zone::parse(tz)?,
                    None => default_zone,
                },
            }),
        };
        Ok(HeartbeatSettings {
            enabled: self.enabled,
            interval: Duration::from_secs(self.interval_minutes.saturating_mul(60)),
            active_hours,
        })
    }
}

fn parse_time_of_day(field: &'static str, value: &str) -> Result<NaiveTime, HeartbeatConfigError> {
    let v = value.trim();
    if v == "24:00" {
        return NaiveTime::from_hms_opt(23, 59, 59).ok_or(HeartbeatConfigError::BadTimeOfDay {
            field,
            value: value.to_string(),
        });
    }
    NaiveTime::parse_from_str(v, "%H:%M").map_err(|_| HeartbeatConfigError::BadTimeOfDay {
        field,
        value: value.to_string(),
    })
}

/// A daily window of local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActiveHours {
    pub start: NaiveTime,
    pub end: NaiveTime,
    pub zone: Zone,
}

impl ActiveHours {
    /// Whether `t` falls in the window (`start` inclusive, `end` exclusive; a
    /// window whose end is before its start wraps past midnight; equal bounds
    /// mean all day).
    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        let local = self.zone.local(t).time();
        if self.start == self.end {
            true
        } else if self.start < self.end {
            self.start <= local && local < self.end
        } else {
            local >= self.start || local < self.end
        }
    }
}

/// Why a heartbeat tick did not call the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// `HEARTBEAT.md` does not exist (or cannot be read).
    Missing,
    /// Only headings, comments, empty or ticked checkboxes, blank lines.
    NothingActionable,
    /// Outside `heartbeat.active_hours`.
    OutsideActiveHours,
    /// The previous heartbeat turn is still running.
    Busy,
}

/// The lines of a HEARTBEAT.md that ask for something: everything except blank
/// lines, headings, HTML comments (one or several lines), horizontal rules,
/// list items or checkboxes with no text (`- [ ]`, `-`), and ticked checkboxes
/// (`- [x] done`).
pub fn actionable_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut in_comment = false;
    for line in text.lines() {
        let mut rest = line.trim();
        // Strip comments, which may open and close on one line or span several.
        let mut visible = String::new();
        loop {
            if in_comment {
                match rest.find("-->") {
                    Some(i) => {
                        rest = &rest[i + 3..];
                        in_comment = false;
                    }
                    None => {
                        rest = "";
                        break;
                    }
                }
            } else {
                match rest.find("<!--") {
                    Some(i) => {
                        visible.push_str(&rest[..i]);
                        rest = &rest[i + 4..];
                        in_comment = true;
                    }
                    None => {
                        visible.push_str(rest);
                        break;
                    }
                }
            }
        }
        let v = visible.trim();
        if v.is_empty() || v.starts_with('#') || is_rule(v) || is_empty_item(v) {
            continue;
        }
        out.push(line);
    }
    out
}

fn is_rule(v: &str) -> bool {
    let c: Vec<char> = v.chars().filter(|c| !c.is_whitespace()).collect();
    c.len() >= 3
        && (c.iter().all(|&x| x == '-')
            || c.iter().all(|&x| x == '*')
            || c.iter().all(|&x| x == '_'))
}

/// `-`, `*`, `+`, `1.`, `- [ ]`, `- [x] anything`.
fn is_empty_item(v: &str) -> bool {
    let rest = if let Some(r) = v
        .strip_prefix("- ")
        .or_else(|| v.strip_prefix("* "))
        .or_else(|| v.strip_prefix("+ "))
    {
        r.trim()
    } else if matches!(v, "-" | "*" | "+") {
        return true;
    } else {
        let digits = v.chars().take_while(|c| c.is_ascii_digit()).count();
        match v[digits..]
            .strip_prefix('.')
            .or_else(|| v[digits..].strip_prefix(')'))
        {
            Some(r) if digits > 0 => r.trim(),
            _ => return false,
        }
    };
    if rest.is_empty() {
        return true;
    }
    let lower = rest.to_ascii_lowercase();
    if lower.starts_with("[x]") {
        return true;
    }
    match rest.strip_prefix("[ ]").or_else(|| rest.strip_prefix("[]")) {
        Some(text) => text.trim().is_empty(),
        None => false,
    }
}

/// The message of a heartbeat turn: the instructions, the local time, the file.
pub fn heartbeat_prompt(content: &str, now: DateTime<Utc>, zone: &Zone) -> String {
    let local = zone.local(now);
    format!(
        "This is a scheduled heartbeat check ({} {}). Below is HEARTBEAT.md from the \
         workspace: the user's standing checklist. Go through it and act on anything that \
         needs attention now; your answer is delivered to the user. If nothing needs \
         attention, reply exactly {HEARTBEAT_OK} and nothing else.\n\n--- HEARTBEAT.md ---\n{}",
        local.format("%Y-%m-%d %H:%M"),
        zone.name(),
        content.trim_end()
    )
}

/// Whether a heartbeat answer means "nothing needs attention" (and is not
/// delivered): `HEARTBEAT_OK` alone, in any case, possibly in Markdown emphasis,
/// quotes or code and with trailing punctuation — or `HEARTBEAT_OK` at the start or
/// end of a short answer (at most 40 other characters, one line), which models add.
pub fn is_heartbeat_ok(answer: &str) -> bool {
    let strip = |s: &str| -> String {
        s.trim()
            .trim_matches(|c: char| matches!(c, '*' | '_' | '`' | '"' | '\'' | '“' | '”'))
            .trim_end_matches(['.', '!'])
            .trim()
            .to_string()
    };
    let a = strip(answer);
    if a.eq_ignore_ascii_case(HEARTBEAT_OK) {
        return true;
    }
    if a.contains('\n') {
        return false;
    }
    let upper = a.to_ascii_uppercase();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let (rest, standalone) = if let Some(r) = upper.strip_prefix(HEARTBEAT_OK) {
        (r, !r.starts_with(word))
    } else if let Some(r) = upper.strip_suffix(HEARTBEAT_OK) {
        (r, !r.ends_with(word))
    } else {
        return false;
    };
    standalone && rest.trim().chars().count() <= 40
}

/// The heartbeat task of one workspace.
#[derive(Debug)]
pub struct Heartbeat {
    file: PathBuf,
    settings: HeartbeatSettings,
    /// Zone of the local time shown in the prompt.
    zone: Zone,
    clock: Clock,
    events: Option<mpsc::UnboundedSender<Event>>,
    running: Arc<Mutex<HashSet<String>>>,
}

impl Heartbeat {
    pub fn new(
        workspace: impl Into<PathBuf>,
        settings: HeartbeatSettings,
        zone: Zone,
        clock: Clock,
    ) -> Heartbeat {
        Heartbeat {
            file: workspace.into().join(HEARTBEAT_FILE),
            settings,
            zone,
            clock,
            events: None,
            running: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// Where to report [`Event`]s.
    pub fn events(mut self, tx: mpsc::UnboundedSender<Event>) -> Heartbeat {
        self.events = Some(tx);
        self
    }

    fn emit(&self, e: Event) {
        tracing::debug!("heartbeat: {e:?}");
        if let Some(tx) = &self.events {
            let _ = tx.send(e);
        }
    }

    /// One tick at `now`: the [`Fire`] to send, or why not.
    pub async fn tick(&self, now: DateTime<Utc>) -> Result<Fire, SkipReason> {
        if let Some(a) = &self.settings.active_hours
            && !a.contains(now)
        {
            return Err(SkipReason::OutsideActiveHours);
        }
        if RunGuard::is_running(&self.running, HEARTBEAT_SESSION) {
            return Err(SkipReason::Busy);
        }
        let file = self.file.clone();
        let content = blocking(move || std::fs::read_to_string(file).ok())
            .await
            .flatten()
            .ok_or(SkipReason::Missing)?;
        if actionable_lines(&content).is_empty() {
            return Err(SkipReason::NothingActionable);
        }
        let guard = RunGuard::claim(&self.running, HEARTBEAT_SESSION).ok_or(SkipReason::Busy)?;
        Ok(Fire {
            kind: FireKind::Heartbeat,
            job_id: HEARTBEAT_SESSION.into(),
            session: HEARTBEAT_SESSION.into(),
            message: heartbeat_prompt(&content, now, &self.zone),
            deliver_to: None,
            scheduled_for: now,
            fired_at: now,
            catch_up: false,
            guard,
        })
    }

    /// Ticks every interval (the first one interval after the start) until
    /// `shutdown` is cancelled or `tx`'s receiver is dropped. Does nothing when
    /// the heartbeat is disabled.
    pub async fn run(self, tx: mpsc::Sender<Fire>, shutdown: CancellationToken) {
        if !self.settings.enabled {
            return;
        }
        let interval = self.settings.interval.max(Duration::from_secs(1));
        let mut next = tokio::time::Instant::now() + interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = shutdown.cancelled() => return,
            }
            let now = self.clock.now();
            match self.tick(now).await {
                Ok(fire) => {
                    self.emit(Event::HeartbeatFired { at: now });
                    tokio::select! {
                        sent = tx.send(fire) => if sent.is_err() { return },
                        _ = shutdown.cancelled() => return,
                    }
                }
                Err(reason) => self.emit(Event::HeartbeatSkipped { at: now, reason }),
            }
            next += interval;
            let t = tokio::time::Instant::now();
            if next <= t {
                next = t + interval;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_real_lines_are_actionable() {
        let empty = "# Heartbeat\n\n## Daily\n- [ ]\n* [ ]   \n-\n1.\n---\n<!-- check the mail -->\n\
                     <!--\n- [ ] pay the rent\n-->\n- [x] renewed the passport\n";
        assert!(
            actionable_lines(empty).is_empty(),
            "{:?}",
            actionable_lines(empty)
        );
        assert!(actionable_lines("").is_empty());
        let some = "# Heartbeat\n- [ ] call mum if it is Sunday\n<!-- x -->Check the build\n";
        assert_eq!(
            actionable_lines(some),
            vec![
                "- [ ] call mum if it is Sunday",
                "<!-- x -->Check the build"
            ]
        );
        assert_eq!(
            actionable_lines("Remind me to water the plants"),
            vec!["Remind me to water the plants"]
        );
        assert_eq!(actionable_lines("1. stretch"), vec!["1. stretch"]);
    }

    #[test]
    fn heartbeat_ok_is_recognised_and_nothing_else() {
        for ok in [
            "HEARTBEAT_OK",
            "  HEARTBEAT_OK\n",
            "**HEARTBEAT_OK**",
            "`HEARTBEAT_OK`",
            "heartbeat_ok.",
            "HEARTBEAT_OK — nothing to do",
            "All quiet. HEARTBEAT_OK",
        ] {
            assert!(is_heartbeat_ok(ok), "{ok:?}");
        }
        for not in [
            "",
            "HEARTBEAT_OKAY",
            "Your passport expires tomorrow: renew it today.",
            "HEARTBEAT_OK but also: the build is red and the rent is due, please pay it today",
            "HEARTBEAT_OK\nBut the rent is due.",
            "HEARTBEAT_OK_X",
        ] {
            assert!(!is_heartbeat_ok(not), "{not:?}");
        }
    }

    #[test]
    fn active_hours_wrap_past_midnight() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let day = HeartbeatConfig {
            active_hours: Some(ActiveHoursConfig {
                start: "08:00".into(),
                end: "22:00".into(),
                tz: Some("Europe/Berlin".into()),
            }),
            ..HeartbeatConfig::default()
        }
        .resolve(Zone::Utc)
        .unwrap()
        .active_hours
        .unwrap();
        // 07:30 UTC = 08:30 Berlin (CET).
        assert!(day.contains(t("2026-11-05T07:30:00Z")));
        assert!(!day.contains(t("2026-11-05T06:30:00Z")));
        assert!(!day.contains(t("2026-11-05T21:00:00Z")));
        let night = ActiveHours {
            start: NaiveTime::from_hms_opt(22, 0, 0).unwrap(),
            end: NaiveTime::from_hms_opt(6, 0, 0).unwrap(),
            zone: Zone::Utc,
        };
        assert!(night.contains(t("2026-11-05T23:00:00Z")));
        assert!(night.contains(t("2026-11-05T05:59:00Z")));
        assert!(!night.contains(t("2026-11-05T12:00:00Z")));
    }

    #[test]
    fn config_defaults_and_errors() {
        let c: HeartbeatConfig = serde_json::from_str("{}").unwrap();
        assert!(c.enabled);
        assert_eq!(c.interval_minutes, 30);
        let s = c.resolve(Zone::Utc).unwrap();
        assert_eq!(s.interval, Duration::from_secs(1800));
        assert!(serde_json::from_str::<HeartbeatConfig>(r#"{"interval": 5}"#).is_err());
        let zero = HeartbeatConfig {
            interval_minutes: 0,
            ..HeartbeatConfig::default()
        };
        assert_eq!(
            zero.resolve(Zone::Utc),
            Err(HeartbeatConfigError::ZeroInterval)
        );
        let bad = HeartbeatConfig {
            active_hours: Some(ActiveHoursConfig {
                start: "8am".into(),
                end: "22:00".into(),
                tz: None,
            }),
            ..HeartbeatConfig::default()
        };
        assert!(matches!(
            bad.resolve(Zone::Utc),
            Err(HeartbeatConfigError::BadTimeOfDay { field: "start", .. })
        ));
    }
}
