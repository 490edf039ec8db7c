//! claw's own scheduled work (not a user's cron job, not in the jobs file): a
//! [`Routine`] fires on a schedule as a [`Fire`] of its kind on the same channel
//! as the cron jobs and the heartbeat, so the gateway runs it beside them — the
//! memory consolidation ([`FireKind::Consolidation`], `memory.consolidation`)
//! is one.
//!
//! - **When.** At each occurrence of its [`Schedule`] (a cron expression in the
//!   user's zone: `0 3 * * *` is daily at 03:00).
//! - **Catch-up.** An occurrence missed since its last run (the gateway was down
//!   at 03:00) fires ONCE at start-up, flagged `catch_up`; a routine that never
//!   ran waits for its first occurrence.
//! - **No overlap.** While the previous run's [`RunGuard`] lives, a due run is
//!   skipped ([`Event::SkippedOverlap`]).
//! - **Time** comes from the [`Clock`]; sleeps are capped at the poll interval,
//!   so a wall-clock jump is noticed and `tokio::time::pause()` drives it in tests.

use crate::clock::Clock;
use crate::scheduler::{DEFAULT_POLL, Event, Fire, FireKind, RunGuard};
use crate::spec::Schedule;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// One of claw's own scheduled jobs.
#[derive(Debug)]
pub struct Routine {
    kind: FireKind,
    id: String,
    schedule: Schedule,
    clock: Clock,
    last_run: Option<DateTime<Utc>>,
    poll: Duration,
    events: Option<mpsc::UnboundedSender<Event>>,
    running: Arc<Mutex<HashSet<String>>>,
}

impl Routine {
    /// A routine `id` firing `kind` on `schedule`; `last_run` is when it last
    /// ran (from its own record), for the catch-up rule.
    pub fn new(
        kind: FireKind,
        id: impl Into<String>,
        schedule: Schedule,
        clock: Clock,
        last_run: Option<DateTime<Utc>>,
    ) -> Routine {
        Routine {
            kind,
            id: id.into(),
            schedule,
            clock,
            last_run,
            poll: DEFAULT_POLL.max(Duration::from_secs(30)),
            events: None,
            running: Arc::new(Mutex::new(HashSet::new())),
        }
    }

    /// The longest sleep (a wall-clock jump is noticed within it).
    pub fn poll_interval(mut self, poll: Duration) -> Routine {
        self.poll = poll.max(Duration::from_millis(10));
        self
    }

    /// Where to report [`Event`]s.
    pub fn events(mut self, tx: mpsc::UnboundedSender<Event>) -> Routine {
        self.events = Some(tx);
        self
    }

    fn emit(&self, e: Event) {
        match &self.events {
            Some(tx) => {
                let _ = tx.send(e);
            }
            None => tracing::debug!("{}: {e:?}", self.id),
        }
    }

    /// The fire for a run due at `due`, or `None` (reported) when the previous
    /// run still goes.
    fn fire(&self, due: DateTime<Utc>, now: DateTime<Utc>, catch_up: bool) -> Option<Fire> {
        let Some(guard) = RunGuard::claim(&self.running, &self.id) else {
            self.emit(Event::SkippedOverlap {
                job_id: self.id.clone(),
                scheduled_for: due,
            });
            return None;
        };
        self.emit(Event::Fired {
            job_id: self.id.clone(),
            scheduled_for: due,
            catch_up,
        });
        Some(Fire {
            kind: self.kind,
            job_id: self.id.clone(),
            session: self.id.clone(),
            message: String::new(),
            deliver_to: None,
            scheduled_for: due,
            fired_at: now,
            catch_up,
            guard,
        })
    }

    /// Runs until `shutdown` is cancelled or `tx`'s receiver is dropped.
    pub async fn run(self, tx: mpsc::Sender<Fire>, shutdown: CancellationToken) {
        let now = self.clock.now();
        // The first occurrence after the last run: already past means missed.
        if let Some(last) = self.last_run
            && let Ok(due) = self.schedule.first_run_lenient(last)
            && due <= now
            && let Some(fire) = self.fire(due, now, true)
        {
            tokio::select! {
                sent = tx.send(fire) => if sent.is_err() { return },
                _ = shutdown.cancelled() => return,
            }
        }
        let mut next = match self.schedule.first_run_lenient(now) {
            Ok(t) => t,
            Err(e) => {
                self.emit(Event::Error {
                    message: format!("{}: {e}", self.id),
                });
                return;
            }
        };
        loop {
            let now = self.clock.now();
            if next <= now {
                if let Some(fire) = self.fire(next, now, false) {
                    tokio::select! {
                        sent = tx.send(fire) => if sent.is_err() { return },
                        _ = shutdown.cancelled() => return,
                    }
                }
                next = match self.schedule.next_after(next, self.clock.now()) {
                    Ok(Some(t)) => t,
                    Ok(None) => return,
                    Err(e) => {
                        self.emit(Event::Error {
                            message: format!("{}: {e}", self.id),
                        });
                        return;
                    }
                };
                continue;
            }
            let wait = (next - now).to_std().unwrap_or(self.poll).min(self.poll);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
