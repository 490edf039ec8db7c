//! A cron job as stored in `<state dir>/cron/jobs.json` ([`Job`]), what a caller asks for
//! ([`NewJob`]) and the shape shown to users and the model ([`JobView`], the
//! `claw cron … --json` contract: fields may be added, never renamed or dropped).

use crate::spec::Schedule;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Prefix of the session a job's turn runs in (`cron:<id>`).
pub const SESSION_PREFIX: &str = "cron:";

/// One scheduled job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    /// Short random hex id (8 characters).
    pub id: String,
    #[serde(flatten)]
    pub schedule: Schedule,
    /// The message the job's turn starts with.
    pub message: String,
    /// Where the answer goes: the session that created the job (None: the
    /// gateway's most recently active session).
    #[serde(default)]
    pub deliver_to: Option<String>,
    pub created_at: DateTime<Utc>,
    /// When it runs next (None only for a hand-written job not yet seen by a
    /// scheduler: it is filled in at load).
    #[serde(default)]
    pub next_run: Option<DateTime<Utc>>,
    /// When it last fired.
    #[serde(default)]
    pub last_run: Option<DateTime<Utc>>,
    /// How many times it fired.
    #[serde(default)]
    pub runs: u64,
}

impl Job {
    /// The session its turn runs in: `cron:<id>`.
    pub fn session(&self) -> String {
        format!("{SESSION_PREFIX}{}", self.id)
    }

    /// The user-facing view.
    pub fn view(&self) -> JobView {
        JobView {
            id: self.id.clone(),
            kind: self.schedule.kind().to_string(),
            spec: self.schedule.spec(),
            tz: match &self.schedule {
                Schedule::Cron { tz, .. } => Some(tz.name()),
                _ => None,
            },
            message: self.message.clone(),
            session: self.session(),
            deliver_to: self.deliver_to.clone(),
            created_at: self.created_at,
            next_run: self.next_run,
            last_run: self.last_run,
            runs: self.runs,
        }
    }
}

/// What a caller asks to schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    pub schedule: Schedule,
    pub message: String,
    pub deliver_to: Option<String>,
}

/// A job as `claw cron add/list --json` and the `cron` tool show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobView {
    pub id: String,
    /// `at`, `every` or `cron`.
    pub kind: String,
    /// The schedule as typed: an RFC 3339 instant, an interval (`30s`, `1h30m`) or
    /// the cron expression.
    pub spec: String,
    /// The cron expression's time zone (null for `at` and `every`).
    pub tz: Option<String>,
    pub message: String,
    /// The session the job's turn runs in (`cron:<id>`).
    pub session: String,
    pub deliver_to: Option<String>,
    pub created_at: DateTime<Utc>,
    pub next_run: Option<DateTime<Utc>>,
    pub last_run: Option<DateTime<Utc>>,
    pub runs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Zone;

    #[test]
    fn job_round_trips_with_a_flat_kind() {
        let t = DateTime::parse_from_rfc3339("2026-11-05T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let job = Job {
            id: "ab12cd34".into(),
            schedule: Schedule::Cron {
                cron: "0 9 * * 1-5".into(),
                tz: Zone::parse("Europe/Berlin").unwrap(),
            },
            message: "standup".into(),
            deliver_to: Some("cli:default".into()),
            created_at: t,
            next_run: Some(t),
            last_run: None,
            runs: 0,
        };
        let v = serde_json::to_value(&job).unwrap();
        assert_eq!(v["kind"], "cron");
        assert_eq!(v["tz"], "Europe/Berlin");
        assert_eq!(serde_json::from_value::<Job>(v).unwrap(), job);
        let view = serde_json::to_value(job.view()).unwrap();
        assert_eq!(view["session"], "cron:ab12cd34");
        assert_eq!(view["spec"], "0 9 * * 1-5");
        assert_eq!(view["next_run"], "2026-11-05T12:00:00Z");
    }
}
