//! The cron scheduler: a tokio task that fires due jobs as [`Fire`] messages on a
//! bounded channel (the gateway runs each as an agent turn in session
//! `cron:<id>`), until its shutdown token is cancelled.
//!
//! - **The file is the truth.** The scheduler stats the jobs file every poll
//!   interval (1 s by default) and reloads it when it changed, so `claw cron add`,
//!   `remove` and hand edits reach a running scheduler without a restart. Firing is
//!   a locked read-modify-write of the file (`last_run`, `runs`, `next_run`
//!   updated; an `at` job removed), so a job edited or removed a moment before it
//!   falls due is honoured, and two schedulers on one workspace never both fire a run.
//! - **Catch-up.** A run that fell due while no scheduler was running (the gateway
//!   was down) fires ONCE at start-up, flagged `catch_up`; the next run is the
//!   first one after "now" (see [`crate::spec`]): missed occurrences are not replayed.
//! - **No overlap.** Each [`Fire`] carries a [`RunGuard`]; until it is dropped
//!   (the turn finished), the same job's next due run is skipped, logged and
//!   reported as [`Event::SkippedOverlap`], and its next run computed as usual.
//! - **Time** comes from a [`Clock`]; sleeps are tokio sleeps capped at the poll
//!   interval, so a wall-clock jump (suspend, NTP) is noticed within one poll and
//!   `tokio::time::pause()` drives the whole thing in tests.
//!
//! File I/O runs in `spawn_blocking`.

use crate::clock::Clock;
use crate::job::Job;
use crate::store::{FileStamp, JobStore, StoreError};
use chrono::{DateTime, Timelike, Utc};
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How often a running scheduler looks at the jobs file, by default.
pub const DEFAULT_POLL: Duration = Duration::from_secs(1);

/// What fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireKind {
    /// A cron job.
    Cron,
    /// The heartbeat (see [`crate::heartbeat`]).
    Heartbeat,
    /// The memory consolidation (a [`crate::Routine`]): no agent turn, no
    /// answer to deliver; the gateway runs the consolidation job.
    Consolidation,
}

/// One run to perform: an agent turn in `session` starting with `message`, its
/// answer delivered to `deliver_to`. Keep `guard` (or the whole `Fire`) alive
/// until the turn has finished: the same job does not fire again before.
#[derive(Debug)]
pub struct Fire {
    pub kind: FireKind,
    /// The job's id (`heartbeat` for the heartbeat).
    pub job_id: String,
    /// Session of the turn: `cron:<id>` (or `heartbeat`).
    pub session: String,
    pub message: String,
    /// Session/channel the answer goes to (None: the most recently active one).
    pub deliver_to: Option<String>,
    /// When the run was due.
    pub scheduled_for: DateTime<Utc>,
    /// When it was fired.
    pub fired_at: DateTime<Utc>,
    /// It fell due while no scheduler was running and is fired once at start-up.
    pub catch_up: bool,
    pub guard: RunGuard,
}

impl Fire {
    /// Where the answer of this run's turn goes, given the gateway's most recently
    /// active session: a cron job's `deliver_to` (else that session); a heartbeat's
    /// answer to that session, unless it is `HEARTBEAT_OK` ([`crate::is_heartbeat_ok`]),
    /// which is not delivered. `None`: deliver nothing.
    pub fn deliver_target(&self, answer: &str, most_recent: Option<&str>) -> Option<String> {
        match self.kind {
            FireKind::Cron => self
                .deliver_to
                .clone()
                .or_else(|| most_recent.map(str::to_string)),
            FireKind::Heartbeat if crate::heartbeat::is_heartbeat_ok(answer) => None,
            FireKind::Heartbeat => most_recent.map(str::to_string),
            FireKind::Consolidation => None,
        }
    }

    /// Marks the run finished (same as dropping the guard).
    pub fn finish(self) {
        drop(self.guard);
    }
}

/// Marks a job as running until dropped.
#[derive(Debug)]
pub struct RunGuard {
    id: String,
    running: Arc<Mutex<HashSet<String>>>,
}

impl RunGuard {
    /// Claims `id` in `running`; `None` when it is already running.
    pub(crate) fn claim(running: &Arc<Mutex<HashSet<String>>>, id: &str) -> Option<RunGuard> {
        let mut set = running.lock().unwrap_or_else(|p| p.into_inner());
        if !set.insert(id.to_string()) {
            return None;
        }
        Some(RunGuard {
            id: id.to_string(),
            running: running.clone(),
        })
    }

    pub(crate) fn is_running(running: &Arc<Mutex<HashSet<String>>>, id: &str) -> bool {
        running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(id)
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// What the scheduler (and the heartbeat) did, for logs, status and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The jobs file was (re)loaded.
    Loaded { jobs: usize },
    /// A job fired.
    Fired {
        job_id: String,
        scheduled_for: DateTime<Utc>,
        catch_up: bool,
    },
    /// A due run was skipped: the previous run of the same job is still going.
    SkippedOverlap {
        job_id: String,
        scheduled_for: DateTime<Utc>,
    },
    /// An `at` job ran and was removed.
    Removed { job_id: String },
    /// The heartbeat ticked and did not call the model.
    HeartbeatSkipped {
        at: DateTime<Utc>,
        reason: crate::heartbeat::SkipReason,
    },
    /// The heartbeat ticked and fired.
    HeartbeatFired { at: DateTime<Utc> },
    /// Something failed (the jobs file unreadable, say); the scheduler goes on.
    Error { message: String },
}

/// The cron scheduler of one jobs file.
#[derive(Debug)]
pub struct Scheduler {
    store: JobStore,
    clock: Clock,
    poll: Duration,
    events: Option<mpsc::UnboundedSender<Event>>,
    running: Arc<Mutex<HashSet<String>>>,
}

impl Scheduler {
    /// Runs the scheduler of `jobs_path` until `shutdown` is cancelled (or the
    /// receiver of `tx` is gone), with the default poll interval and no events.
    pub async fn run(
        jobs_path: impl Into<PathBuf>,
        clock: Clock,
        tx: mpsc::Sender<Fire>,
        shutdown: CancellationToken,
    ) {
        Scheduler::new(jobs_path, clock).start(tx, shutdown).await
    }

    pub fn new(jobs_path: impl Into<PathBuf>, clock: Clock) -> Scheduler {
        Scheduler {
            store: JobStore::new(jobs_path),
            clock,
            poll: DEFAULT_POLL,
            events: None,
            running: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// How often the jobs file is checked for edits (and the longest sleep).
    pub fn poll_interval(mut self, poll: Duration) -> Scheduler {
        self.poll = poll.max(Duration::from_millis(10));
        self
    }

    /// Where to report [`Event`]s.
    pub fn events(mut self, tx: mpsc::UnboundedSender<Event>) -> Scheduler {
        self.events = Some(tx);
        self
    }

    /// Report `e` to the events receiver, or — when nobody listens — log it.
    fn emit(&self, e: Event) {
        if let Some(tx) = &self.events {
            let _ = tx.send(e);
            return;
        }
        match &e {
            Event::SkippedOverlap { job_id, .. } => tracing::warn!(
                job = %job_id,
                "cron: skipped a run: the previous run of this job is still going"
            ),
            Event::Error { message } => tracing::warn!("cron: {message}"),
            Event::Fired {
                job_id, catch_up, ..
            } => tracing::info!(job = %job_id, catch_up, "cron: fired"),
            _ => tracing::debug!("cron: {e:?}"),
        }
    }

    /// Runs until `shutdown` is cancelled or `tx`'s receiver is dropped.
    pub async fn start(self, tx: mpsc::Sender<Fire>, shutdown: CancellationToken) {
        let started = self.clock.now();
        let mut stamp: Option<Option<FileStamp>> = None;
        let mut jobs: Vec<Job> = Vec::new();
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            let store = self.store.clone();
            let current = blocking(move || store.stamp()).await.flatten();
            if stamp != Some(current) {
                let store = self.store.clone();
                match blocking(move || store.load()).await {
                    Some(Ok(loaded)) => {
                        jobs = loaded;
                        self.emit(Event::Loaded { jobs: jobs.len() });
                    }
                    Some(Err(e)) => self.emit(Event::Error {
                        message: format!("{e} (keeping the jobs loaded before)"),
                    }),
                    None => {}
                }
                stamp = Some(current);
            }
            let now = self.clock.now();
            let needs_work = jobs.iter().any(|j| j.next_run.is_none_or(|t| t <= now));
            if needs_work {
                match self.fire_due(&jobs, now, started).await {
                    Ok((fires, written, written_stamp)) => {
                        jobs = written;
                        if let Some(s) = written_stamp {
                            stamp = Some(s);
                        }
                        for fire in fires {
                            tokio::select! {
                                sent = tx.send(fire) => if sent.is_err() { return },
                                _ = shutdown.cancelled() => return,
                            }
                        }
                    }
                    Err(e) => self.emit(Event::Error {
                        message: e.to_string(),
                    }),
                }
            }
            let now = self.clock.now();
            let next = jobs.iter().filter_map(|j| j.next_run).min();
            let wait = match next {
                Some(t) if t > now => (t - now).to_std().unwrap_or(self.poll).min(self.poll),
                // Overdue yet not fired (an error above): retry after a poll.
                Some(_) => self.poll,
                None => self.poll,
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// Under the file lock: fill in missing next runs, fire what is due at `now`
    /// (skipping jobs still running), advance or remove them, write the file.
    /// When the file cannot be parsed (a broken hand edit), the jobs loaded
    /// before run from memory and the file is left alone for the user to fix.
    async fn fire_due(
        &self,
        jobs: &[Job],
        now: DateTime<Utc>,
        started: DateTime<Utc>,
    ) -> Result<(Vec<Fire>, Vec<Job>, Option<Option<FileStamp>>), StoreError> {
        let store = self.store.clone();
        let running = self.running.clone();
        let result =
            blocking(move || store.update_stamped(|jobs| advance(jobs, now, started, &running)))
                .await
                .ok_or_else(|| StoreError::Io {
                    action: "update",
                    path: self.store.path().to_path_buf(),
                    source: std::io::Error::other("the blocking task failed"),
                })?;
        let (outcome, written, written_stamp) = match result {
            Ok((outcome, jobs, stamp)) => (outcome, jobs, Some(stamp)),
            Err(
                e @ (StoreError::Corrupt { .. }
                | StoreError::NewerVersion { .. }
                | StoreError::Spec(_)),
            ) => {
                self.emit(Event::Error {
                    message: format!(
                        "{e} (running the jobs loaded before; the file is left as it is)"
                    ),
                });
                let mut jobs = jobs.to_vec();
                let outcome = advance(&mut jobs, now, started, &self.running);
                (outcome, jobs, None)
            }
            Err(e) => return Err(e),
        };
        let Advanced {
            fired,
            skipped,
            removed,
            errors,
        } = outcome;
        for message in errors {
            self.emit(Event::Error { message });
        }
        for (job_id, scheduled_for) in skipped {
            self.emit(Event::SkippedOverlap {
                job_id,
                scheduled_for,
            });
        }
        let mut fires = Vec::with_capacity(fired.len());
        for (job, due, catch_up, guard) in fired {
            self.emit(Event::Fired {
                job_id: job.id.clone(),
                scheduled_for: due,
                catch_up,
            });
            fires.push(Fire {
                kind: FireKind::Cron,
                session: job.session(),
                job_id: job.id,
                message: job.message,
                deliver_to: job.deliver_to,
                scheduled_for: due,
                fired_at: now,
                catch_up,
                guard,
            });
        }
        for job_id in removed {
            self.emit(Event::Removed { job_id });
        }
        Ok((fires, written, written_stamp))
    }
}

/// What one pass over the jobs did.
struct Advanced {
    fired: Vec<(Job, DateTime<Utc>, bool, RunGuard)>,
    skipped: Vec<(String, DateTime<Utc>)>,
    removed: Vec<String>,
    errors: Vec<String>,
}

/// Fills in missing next runs and fires what is due at `now`: a job still
/// running is skipped (its next run advanced all the same), a fired one gets
/// `last_run`, `runs` and its next run, an `at` job is dropped.
fn advance(
    jobs: &mut Vec<Job>,
    now: DateTime<Utc>,
    started: DateTime<Utc>,
    running: &Arc<Mutex<HashSet<String>>>,
) -> Advanced {
    let mut out = Advanced {
        fired: Vec::new(),
        skipped: Vec::new(),
        removed: Vec::new(),
        errors: Vec::new(),
    };
    let mut keep = Vec::with_capacity(jobs.len());
    for mut job in jobs.drain(..) {
        let due = match job.next_run {
            Some(t) => t,
            None => match job.schedule.first_run_lenient(now) {
                Ok(t) => {
                    job.next_run = Some(t);
                    t
                }
                Err(e) => {
                    out.errors.push(format!("job {}: {e}", job.id));
                    keep.push(job);
                    continue;
                }
            },
        };
        if due > now {
            keep.push(job);
            continue;
        }
        let next = match job.schedule.next_after(due, now) {
            Ok(n) => n,
            Err(e) => {
                out.errors.push(format!("job {}: {e}", job.id));
                None
            }
        };
        job.next_run = next;
        match RunGuard::claim(running, &job.id) {
            None => out.skipped.push((job.id.clone(), due)),
            Some(guard) => {
                job.last_run = Some(now.with_nanosecond(0).unwrap_or(now));
                job.runs += 1;
                out.fired.push((job.clone(), due, due < started, guard));
            }
        }
        if next.is_some() {
            keep.push(job);
        } else {
            out.removed.push(job.id.clone());
        }
    }
    *jobs = keep;
    out
}

/// Runs blocking file work off the runtime; `None` if the task panicked.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}
