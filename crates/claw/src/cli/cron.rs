//! `claw cron add | list | remove | run`: scheduled messages in the workspace's
//! jobs file (`<state dir>/cron/jobs.json`, see `claw_schedule`). A running gateway
//! picks edits up without a restart; `claw cron run ID` runs a job's turn now, in
//! this process, the way `claw -m` runs one (session `cron:<id>`).
//!
//! Local times (`--at 2026-12-01T09:00`) and cron expressions are read in `--tz`,
//! else `agent.timezone`, else `$TZ`, else the system's zone, else UTC; the zone is
//! stored with the job. Bad input (an unparseable spec, `--at` in the past, two
//! kinds at once) is an error (exit 2); `remove`/`run` of an unknown id exit 1.

use super::errors::{self, ErrorReport};
use super::output::{Exit, print_json, sanitize};
use crate::config::Settings;
use anyhow::Context;
use claw_agent::core::TurnEnd;
use claw_agent::driver::{Driver, Ui};
use claw_agent::provider::{ProviderChain, RetryPolicy};
use claw_agent::settings::{self as agent_settings, Overrides};
use claw_schedule::{JobStore, JobView, NewJob, SpecError, StoreError, Zone, schedule_from_parts};
use serde::Serialize;
use std::io::Write;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Subcommand)]
pub enum CronCommand {
    /// Schedule a message: --every 30s | --at 2026-12-01T09:00 | --cron "0 9 * * 1-5".
    Add(AddArgs),
    /// List the scheduled jobs.
    List(ListArgs),
    /// Remove a job (exit 1 when there is none with that id).
    Remove(RemoveArgs),
    /// Run a job's turn now, in this process, and print the answer.
    Run(RunArgs),
}

impl CronCommand {
    /// Whether the command asked for JSON output.
    pub fn json(&self) -> bool {
        match self {
            CronCommand::Add(a) => a.json,
            CronCommand::List(a) => a.json,
            CronCommand::Remove(_) | CronCommand::Run(_) => false,
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["every", "at", "cron"])))]
pub struct AddArgs {
    /// Repeat every INTERVAL: 2s, 15m, 1h, 1d, 1h30m (at least one second).
    #[arg(long, value_name = "INTERVAL")]
    pub every: Option<String>,
    /// Run once at TIME: 2026-12-01T09:00 (in --tz / your zone) or RFC 3339; removed after it runs.
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    /// A 5-field cron expression (minute hour day-of-month month day-of-week).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// Time zone of --at and --cron: an IANA name (Europe/Berlin), UTC or +02:00.
    #[arg(long, value_name = "ZONE")]
    pub tz: Option<String>,
    /// The message the job's turn starts with.
    #[arg(long, short = 'm', value_name = "TEXT")]
    pub message: String,
    /// Deliver the answer to this session (default: the gateway's most recently active one).
    #[arg(long, value_name = "KEY")]
    pub session: Option<String>,
    /// Print the job as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print `{"jobs": [...]}`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// The job's id (from `claw cron list`).
    pub id: String,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The job's id (from `claw cron list`).
    pub id: String,
    /// Run side effects (write/edit/exec, …) without asking.
    #[arg(long)]
    pub yes: bool,
}

/// Dispatch one `claw cron …` command.
pub async fn run(settings: Settings, command: CronCommand) -> anyhow::Result<Exit> {
    match command {
        CronCommand::Add(a) => blocking(move || add(&settings, a)).await,
        CronCommand::List(a) => blocking(move || list(&settings, a)).await,
        CronCommand::Remove(a) => blocking(move || remove(&settings, a)).await,
        CronCommand::Run(a) => run_now(settings, a).await,
    }
}

async fn blocking<F>(f: F) -> anyhow::Result<Exit>
where
    F: FnOnce() -> anyhow::Result<Exit> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await?
}

fn store(settings: &Settings) -> JobStore {
    JobStore::in_state_dir(&settings.state_dir())
}

/// Print a user error (exit 2) or pass a system error up.
fn fail(e: StoreError, json: bool) -> anyhow::Result<Exit> {
    let (hints, kind): (Vec<String>, &'static str) = match &e {
        StoreError::Spec(s) => (spec_hints(s), "invalid-input"),
        StoreError::EmptyMessage => (vec!["pass the text with --message".into()], "invalid-input"),
        StoreError::Corrupt { .. } | StoreError::NewerVersion { .. } => (
            vec!["fix or remove the jobs file; `claw cron add` writes a fresh one".into()],
            "invalid-input",
        ),
        StoreError::Io { .. } => return Err(e.into()),
    };
    errors::print(
        &ErrorReport {
            message: e.to_string(),
            hints,
            kind,
        },
        json,
    );
    Ok(Exit::Error)
}

fn spec_hints(e: &SpecError) -> Vec<String> {
    match e {
        SpecError::BadInterval { .. } | SpecError::IntervalTooShort { .. } => {
            vec!["--every takes 2s, 15m, 1h, 1d or combinations such as 1h30m".into()]
        }
        SpecError::BadTime { .. } | SpecError::NonexistentLocalTime { .. } => {
            vec!["--at takes 2026-12-01T09:00 (read in --tz or your zone) or 2026-12-01T09:00:00+01:00".into()]
        }
        SpecError::InPast { .. } => vec!["give a time in the future".into()],
        SpecError::BadCron { .. } | SpecError::NoNextOccurrence { .. } => vec![
            "five fields: minute hour day-of-month month day-of-week, e.g. \"0 9 * * 1-5\"".into(),
        ],
        SpecError::BadZone { .. } => {
            vec!["--tz takes an IANA name such as Europe/Berlin, UTC or +02:00".into()]
        }
        SpecError::NoKind | SpecError::TwoKinds { .. } => {
            vec!["give exactly one of --every, --at and --cron".into()]
        }
    }
}

fn add(settings: &Settings, a: AddArgs) -> anyhow::Result<Exit> {
    let zone = crate::app::user_zone(settings);
    let schedule = match schedule_from_parts(
        a.every.as_deref(),
        a.at.as_deref(),
        a.cron.as_deref(),
        a.tz.as_deref(),
        zone,
    ) {
        Ok(s) => s,
        Err(e) => return fail(e.into(), a.json),
    };
    let new = NewJob {
        schedule,
        message: a.message,
        deliver_to: a.session,
    };
    let job = match store(settings).add(new, crate::app::clock(settings).now()) {
        Ok(j) => j,
        Err(e) => return fail(e, a.json),
    };
    let view = job.view();
    if a.json {
        print_json(&view)?;
    } else {
        println!("{}", view.id);
        eprintln!(
            "scheduled {} {}{}; next run {} (session {})",
            view.kind,
            sanitize(&view.spec),
            view.tz
                .as_deref()
                .map(|z| format!(" ({z})"))
                .unwrap_or_default(),
            next_run_text(&view, &zone),
            view.session
        );
    }
    Ok(Exit::Ok)
}

fn next_run_text(v: &JobView, zone: &Zone) -> String {
    let z =
        v.tz.as_deref()
            .and_then(|t| Zone::parse(t).ok())
            .unwrap_or(*zone);
    match v.next_run {
        Some(t) => z.local(t).format("%Y-%m-%d %H:%M:%S %:z").to_string(),
        None => "-".into(),
    }
}

#[derive(Serialize)]
struct ListJson {
    jobs: Vec<JobView>,
    heartbeat: HeartbeatJson,
}

/// What the gateway's heartbeat would do with the current config and HEARTBEAT.md.
#[derive(Serialize)]
struct HeartbeatJson {
    enabled: bool,
    interval_minutes: u64,
    active_hours: Option<ActiveHoursJson>,
    /// Actionable lines in HEARTBEAT.md (0: ticks are skipped without the model;
    /// null: the file is missing).
    actionable_lines: Option<usize>,
}

#[derive(Serialize)]
struct ActiveHoursJson {
    start: String,
    end: String,
    tz: String,
}

fn heartbeat_json(settings: &Settings) -> anyhow::Result<HeartbeatJson> {
    let hb = settings
        .heartbeat
        .resolve(crate::app::user_zone(settings))?;
    let file = settings
        .mem
        .workspace
        .join(claw_schedule::heartbeat::HEARTBEAT_FILE);
    let actionable_lines = std::fs::read_to_string(file)
        .ok()
        .map(|t| claw_schedule::heartbeat::actionable_lines(&t).len());
    Ok(HeartbeatJson {
        enabled: hb.enabled,
        interval_minutes: hb.interval.as_secs() / 60,
        active_hours: hb.active_hours.map(|a| ActiveHoursJson {
            start: a.start.format("%H:%M").to_string(),
            end: a.end.format("%H:%M").to_string(),
            tz: a.zone.name(),
        }),
        actionable_lines,
    })
}

fn list(settings: &Settings, a: ListArgs) -> anyhow::Result<Exit> {
    let jobs = match store(settings).load() {
        Ok(j) => j,
        Err(e) => return fail(e, a.json),
    };
    let views: Vec<JobView> = jobs.iter().map(|j| j.view()).collect();
    let heartbeat = heartbeat_json(settings)?;
    if a.json {
        print_json(&ListJson {
            jobs: views,
            heartbeat,
        })?;
        return Ok(Exit::Ok);
    }
    eprintln!("{}", heartbeat_line(&heartbeat));
    if views.is_empty() {
        eprintln!("no scheduled jobs (add one with `claw cron add`)");
        return Ok(Exit::Ok);
    }
    let zone = crate::app::user_zone(settings);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{:<8}  {:<5}  {:<26}  {:<25}  MESSAGE",
        "ID", "KIND", "SCHEDULE", "NEXT RUN"
    )?;
    for v in &views {
        let spec = match &v.tz {
            Some(z) => format!("{} ({z})", v.spec),
            None => v.spec.clone(),
        };
        let message: String = v
            .message
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(60)
            .collect();
        writeln!(
            out,
            "{:<8}  {:<5}  {:<26}  {:<25}  {}",
            v.id,
            v.kind,
            sanitize(&spec),
            next_run_text(v, &zone),
            sanitize(&message)
        )?;
    }
    Ok(Exit::Ok)
}

fn heartbeat_line(h: &HeartbeatJson) -> String {
    if !h.enabled {
        return "heartbeat: off (heartbeat.enabled)".into();
    }
    let hours = match &h.active_hours {
        Some(a) => format!(", {}-{} {}", a.start, a.end, a.tz),
        None => String::new(),
    };
    let file = match h.actionable_lines {
        None => "no HEARTBEAT.md: ticks are skipped".to_string(),
        Some(0) => "HEARTBEAT.md has nothing actionable: ticks are skipped".to_string(),
        Some(n) => format!("HEARTBEAT.md: {n} actionable line(s)"),
    };
    format!(
        "heartbeat (under the gateway): every {} min{hours}; {file}",
        h.interval_minutes
    )
}

fn not_found(id: &str) -> Exit {
    eprintln!("error: no job `{}`", sanitize(id));
    eprintln!("hint: `claw cron list` shows the jobs");
    Exit::NoMatch
}

fn remove(settings: &Settings, a: RemoveArgs) -> anyhow::Result<Exit> {
    match store(settings).remove(&a.id) {
        Ok(Some(job)) => {
            println!("removed {}", job.id);
            Ok(Exit::Ok)
        }
        Ok(None) => Ok(not_found(&a.id)),
        Err(e) => fail(e, false),
    }
}

/// Streams the answer to stdout, status to stderr; refuses what needs a confirmation.
struct RunUi;

impl Ui for RunUi {
    fn text(&self, delta: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(sanitize(delta).as_bytes());
        let _ = out.flush();
    }

    fn end_answer(&self) {
        println!();
    }

    fn status(&self, line: &str) {
        eprintln!("{}", sanitize(line));
    }

    fn confirm(&self, question: &str) -> bool {
        eprintln!(
            "{} (refused: `claw cron run` does not ask; pass --yes to allow side effects)",
            sanitize(question)
        );
        false
    }
}

async fn run_now(settings: Settings, a: RunArgs) -> anyhow::Result<Exit> {
    let st = store(&settings);
    let id = a.id.clone();
    let job = {
        let st = st.clone();
        tokio::task::spawn_blocking(move || st.get(&id)).await?
    };
    let job = match job {
        Ok(Some(j)) => j,
        Ok(None) => return Ok(not_found(&a.id)),
        Err(e) => return fail(e, false),
    };
    let env = |name: &str| settings.env.get(name);
    let agent = agent_settings::resolve(&settings.assistant, &Overrides::default(), &env)?;
    let chain = ProviderChain::new(agent.profiles.clone(), RetryPolicy::default())
        .context("cannot set up the LLM client")?;
    let session = job.session();
    let (tools, _memory) = crate::app::build_tools(&settings, &agent, a.yes, &session);
    let opts = crate::app::driver_options(&settings, &agent, &session);
    let mut driver = Driver::open(opts, Arc::new(chain), Arc::new(tools), Arc::new(RunUi))
        .await
        .context("cannot open the session")?;
    if let Some(h) = crate::app::build_hooks(&settings)? {
        driver = driver.with_hooks(h);
    }
    let cancel = CancellationToken::new();
    let outcome = driver
        .run_turn(&job.message, &cancel)
        .await
        .context("the session file could not be written")?;
    let now = crate::app::clock(&settings).now();
    let job_id = job.id.clone();
    tokio::task::spawn_blocking(move || st.record_manual_run(&job_id, now)).await??;
    Ok(match outcome.end {
        TurnEnd::Answered(_) | TurnEnd::Done(_) => Exit::Ok,
        TurnEnd::MaxIterations(_) => Exit::Error,
        TurnEnd::Cancelled => {
            eprintln!("cancelled");
            Exit::Error
        }
        TurnEnd::LoopBroken(why) => {
            eprintln!("stopped: {}", sanitize(&why));
            Exit::Error
        }
        TurnEnd::Failed(why) => {
            eprintln!("error: {}", sanitize(&why));
            Exit::Error
        }
    })
}
