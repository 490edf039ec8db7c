//! The `cron` tool: the assistant schedules, lists and removes jobs in the
//! workspace's jobs file (`claw_schedule::JobStore`), with the same specs as
//! `claw cron add` — `every` (`30s`, `15m`, `1h`, `1d`), `at` (a local time such as
//! `2026-12-01T09:00`, or RFC 3339) and `cron` (5 fields) with an optional `tz` —
//! so "remind me tomorrow at 9" becomes a one-shot job. A job's answer is
//! delivered to the session that created it. Changing the schedule is a side
//! effect: the tool is not read-only, so the confirmation policy asks first.

use super::{ToolContext, ToolError, ToolOutput};
use claw_schedule::{Clock, JobStore, JobView, NewJob, Zone, schedule_from_parts};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What the `cron` tool needs: where the jobs live, who is asking, which zone
/// local times are in, and "now".
#[derive(Debug, Clone)]
pub struct CronToolContext {
    /// `<state dir>/cron/jobs.json` ([`claw_schedule::jobs_path`]).
    pub jobs_path: PathBuf,
    /// The session the tool runs in: jobs it adds deliver their answers there.
    pub session: Option<String>,
    /// Zone of local times and cron expressions without `tz`.
    pub zone: Zone,
    pub clock: Clock,
}

/// What the model asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CronAction {
    Add,
    List,
    Remove,
}

/// Arguments of `cron`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CronArgs {
    pub action: CronAction,
    #[serde(default)]
    pub every: Option<String>,
    #[serde(default)]
    pub at: Option<String>,
    #[serde(default)]
    pub cron: Option<String>,
    #[serde(default)]
    pub tz: Option<String>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub id: Option<String>,
}

/// What the tool did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum CronOutcome {
    Added { job: JobView },
    Listed { jobs: Vec<JobView> },
    Removed { job: JobView },
}

impl CronOutcome {
    /// Text for the model.
    pub fn render(&self, zone: &Zone) -> String {
        let when = |v: &JobView| match v.next_run {
            Some(t) => zone.local(t).format("%Y-%m-%d %H:%M %:z").to_string(),
            None => "not scheduled".into(),
        };
        let line = |v: &JobView| {
            let tz =
                v.tz.as_deref()
                    .map(|z| format!(" ({z})"))
                    .unwrap_or_default();
            format!(
                "- {} [{} {}{tz}] next run {}: {}",
                v.id,
                v.kind,
                v.spec,
                when(v),
                v.message
            )
        };
        match self {
            CronOutcome::Added { job } => format!(
                "Scheduled job {} ({} {}); next run {}. It runs as its own turn with the \
                 message below and the answer is delivered to {}. Remove it with action \
                 remove, id {}.\nmessage: {}",
                job.id,
                job.kind,
                job.spec,
                when(job),
                job.deliver_to
                    .as_deref()
                    .unwrap_or("the most recently active session"),
                job.id,
                job.message
            ),
            CronOutcome::Listed { jobs } if jobs.is_empty() => "No scheduled jobs.".into(),
            CronOutcome::Listed { jobs } => {
                let mut s = format!("{} scheduled job(s):\n", jobs.len());
                for j in jobs {
                    s.push_str(&line(j));
                    s.push('\n');
                }
                s
            }
            CronOutcome::Removed { job } => format!("Removed job {}: {}", job.id, job.message),
        }
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::invalid("cron", message)
}

fn store_error(path: &std::path::Path, e: claw_schedule::StoreError) -> ToolError {
    match e {
        claw_schedule::StoreError::Spec(s) => invalid(s.to_string()),
        claw_schedule::StoreError::EmptyMessage => invalid("message is empty"),
        other => ToolError::Io {
            path: path.display().to_string(),
            message: other.to_string(),
        },
    }
}

/// Runs one `cron` call (blocking file I/O: call it off the runtime).
pub fn run(ctx: &ToolContext, args: &CronArgs) -> Result<ToolOutput, ToolError> {
    let Some(c) = &ctx.cron else {
        return Err(invalid("scheduling is not available in this session"));
    };
    let store = JobStore::new(&c.jobs_path);
    let outcome = match args.action {
        CronAction::Add => {
            let schedule = schedule_from_parts(
                args.every.as_deref(),
                args.at.as_deref(),
                args.cron.as_deref(),
                args.tz.as_deref(),
                c.zone,
            )
            .map_err(|e| invalid(e.to_string()))?;
            let message = args
                .message
                .clone()
                .filter(|m| !m.trim().is_empty())
                .ok_or_else(|| invalid("add needs a message: what the job's turn should do"))?;
            let job = store
                .add(
                    NewJob {
                        schedule,
                        message,
                        deliver_to: c.session.clone(),
                    },
                    c.clock.now(),
                )
                .map_err(|e| store_error(&c.jobs_path, e))?;
            CronOutcome::Added { job: job.view() }
        }
        CronAction::List => {
            let jobs = store.load().map_err(|e| store_error(&c.jobs_path, e))?;
            CronOutcome::Listed {
                jobs: jobs.iter().map(|j| j.view()).collect(),
            }
        }
        CronAction::Remove => {
            let id = args
                .id
                .as_deref()
                .ok_or_else(|| invalid("remove needs the job's id (see action list)"))?;
            match store.remove(id).map_err(|e| store_error(&c.jobs_path, e))? {
                Some(job) => CronOutcome::Removed { job: job.view() },
                None => {
                    return Err(invalid(format!(
                        "there is no job `{id}` (action list shows the jobs)"
                    )));
                }
            }
        }
    };
    Ok(ToolOutput::Cron {
        outcome,
        zone: c.zone.name(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn ctx(dir: &std::path::Path) -> ToolContext {
        let mut ctx = ToolContext::new(dir);
        let now = DateTime::parse_from_rfc3339("2026-11-05T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        ctx.cron = Some(CronToolContext {
            jobs_path: claw_schedule::jobs_path(dir),
            session: Some("cli:default".into()),
            zone: Zone::parse("Europe/Berlin").unwrap(),
            clock: Clock::starting_at(now),
        });
        ctx
    }

    fn args(action: CronAction) -> CronArgs {
        CronArgs {
            action,
            every: None,
            at: None,
            cron: None,
            tz: None,
            message: None,
            id: None,
        }
    }

    #[test]
    fn remind_me_tomorrow_at_nine_adds_a_one_shot_in_the_users_zone() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let out = run(
            &ctx,
            &CronArgs {
                at: Some("2026-11-06T09:00".into()),
                message: Some("Remind the user to call the dentist".into()),
                ..args(CronAction::Add)
            },
        )
        .unwrap();
        let ToolOutput::Cron {
            outcome: CronOutcome::Added { job },
            ..
        } = &out
        else {
            panic!("{out:?}")
        };
        assert_eq!(job.kind, "at");
        // 09:00 in Berlin (CET) is 08:00 UTC.
        assert_eq!(
            job.next_run.unwrap().to_rfc3339(),
            "2026-11-06T08:00:00+00:00"
        );
        assert_eq!(job.deliver_to.as_deref(), Some("cli:default"));
        let text = out.render();
        assert!(text.contains("next run 2026-11-06 09:00 +01:00"), "{text}");
        let stored = JobStore::new(claw_schedule::jobs_path(dir.path()))
            .load()
            .unwrap();
        assert_eq!(stored.len(), 1);

        let listed = run(&ctx, &args(CronAction::List)).unwrap().render();
        assert!(
            listed.contains(&job.id) && listed.contains("dentist"),
            "{listed}"
        );
        let removed = run(
            &ctx,
            &CronArgs {
                id: Some(job.id.clone()),
                ..args(CronAction::Remove)
            },
        )
        .unwrap()
        .render();
        assert!(removed.starts_with("Removed job"), "{removed}");
        let listed = run(&ctx, &args(CronAction::List)).unwrap().render();
        assert_eq!(listed, "No scheduled jobs.");
    }

    #[test]
    fn bad_requests_are_errors_for_the_model() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        let err = |a: CronArgs| run(&ctx, &a).unwrap_err().render();
        let e = err(CronArgs {
            message: Some("x".into()),
            ..args(CronAction::Add)
        });
        assert!(e.contains("say when"), "{e}");
        let e = err(CronArgs {
            every: Some("5m".into()),
            cron: Some("* * * * *".into()),
            message: Some("x".into()),
            ..args(CronAction::Add)
        });
        assert!(e.contains("only one of"), "{e}");
        let e = err(CronArgs {
            at: Some("2020-01-01T09:00".into()),
            message: Some("x".into()),
            ..args(CronAction::Add)
        });
        assert!(e.contains("in the past"), "{e}");
        let e = err(CronArgs {
            every: Some("5m".into()),
            ..args(CronAction::Add)
        });
        assert!(e.contains("needs a message"), "{e}");
        let e = err(CronArgs {
            id: Some("nope".into()),
            ..args(CronAction::Remove)
        });
        assert!(e.contains("no job `nope`"), "{e}");
        let none = ToolContext::new(dir.path());
        assert!(run(&none, &args(CronAction::List)).is_err());
    }
}
