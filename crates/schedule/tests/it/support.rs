//! Shared helpers: instants, a scheduler on a temp workspace with its channels.

use chrono::{DateTime, Utc};
use claw_schedule::{Clock, Event, Fire, JobStore, Scheduler};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// A running scheduler and what it sends.
pub struct Running {
    pub fires: mpsc::Receiver<Fire>,
    pub events: mpsc::UnboundedReceiver<Event>,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
    pub clock: Clock,
}

impl Running {
    /// Starts a scheduler on `store` whose clock reads `at` now.
    pub fn start(store: &JobStore, at: DateTime<Utc>, poll: Duration) -> Running {
        let clock = Clock::tokio_at(at);
        let (tx, fires) = mpsc::channel(16);
        let (etx, events) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(
            Scheduler::new(store.path(), clock)
                .poll_interval(poll)
                .events(etx)
                .start(tx, shutdown.clone()),
        );
        Running {
            fires,
            events,
            shutdown,
            task,
            clock,
        }
    }

    /// The next fire, or None when none comes within `within` (simulated time).
    pub async fn next_fire(&mut self, within: Duration) -> Option<Fire> {
        tokio::time::timeout(within, self.fires.recv())
            .await
            .ok()
            .flatten()
    }

    /// Every event reported so far.
    pub fn drain_events(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.try_recv() {
            out.push(e);
        }
        out
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .expect("the scheduler stops when cancelled")
            .unwrap();
    }
}

/// Runs blocking store work the way the scheduler does.
pub async fn on_store<T: Send + 'static>(
    store: &JobStore,
    f: impl FnOnce(JobStore) -> T + Send + 'static,
) -> T {
    let s = store.clone();
    tokio::task::spawn_blocking(move || f(s)).await.unwrap()
}
