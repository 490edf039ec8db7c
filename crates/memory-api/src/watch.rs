//! Keeping a memory fresh while files change (`claw memory watch`, the
//! gateway's watcher), on either backend, with one event stream
//! ([`WatchEvent`]).
//!
//! - SQLite: the memory crate's watcher actor (per-file batches, heartbeat
//!   rows that let searches skip their stat walk, database-replacement
//!   checks), indexing through `IndexerSink`.
//! - PostgreSQL: an actor of its own, fed by the same OS notifications: after
//!   a quiet period (or at most every few seconds while events keep coming) it
//!   re-indexes every file that differs from this workspace's rows, under the
//!   writer lock and the per-source advisory locks `claw memory index` uses.
//!   The event queue is bounded; an overflow schedules a full rescan.

use crate::{Memory, MemoryError};
use claw_memory::embed::Embedder;
use claw_memory::watch::{self as sqlite_watch, BATCH_LOCK_WAIT, IndexerSink, WatchOptions};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use claw_memory::watch::{WATCH_HOLDER, WatchError, WatchEvent};

/// How long the PostgreSQL watcher waits for quiet after an event.
const QUIET: Duration = Duration::from_millis(300);
/// The longest it lets events pile up before a batch.
const MAX_DELAY: Duration = Duration::from_secs(3);
/// How often it looks for sources added or removed meanwhile.
const SOURCES_EVERY: Duration = Duration::from_secs(10);
/// Bounded queue between the OS notifications and the actor.
const QUEUE: usize = 1024;

/// A running watcher. Dropping it without [`MemoryWatcher::stop`] also stops it.
pub struct MemoryWatcher {
    inner: Inner,
}

enum Inner {
    Sqlite(sqlite_watch::Watcher),
    Postgres(PgWatcher),
}

impl MemoryWatcher {
    /// Stop cleanly: finish the batch in flight, join the threads.
    pub fn stop(self) -> Result<(), MemoryError> {
        match self.inner {
            Inner::Sqlite(w) => w.stop().map_err(MemoryError::from),
            Inner::Postgres(w) => w.stop(),
        }
    }

    /// Whether the watcher has ended on its own (a fatal error).
    pub fn is_finished(&self) -> bool {
        match &self.inner {
            Inner::Sqlite(w) => w.is_finished(),
            Inner::Postgres(w) => w.actor.as_ref().is_none_or(|h| h.is_finished()),
        }
    }
}

impl From<WatchError> for MemoryError {
    fn from(e: WatchError) -> MemoryError {
        MemoryError::Watch(e)
    }
}

/// Start watching every source of `memory`'s workspace. `embedder` indexes
/// on SQLite (the one the process already loaded: `None` is keyword-only);
/// on PostgreSQL the memory's own embedder does. `holder` names the writer
/// in the lock; `events` receives progress.
pub fn spawn(
    memory: Arc<Memory>,
    embedder: Option<Box<dyn Embedder>>,
    holder: &str,
    events: Sender<WatchEvent>,
) -> Result<MemoryWatcher, MemoryError> {
    let inner = match &memory.inner {
        crate::Inner::Sqlite(_) => {
            let settings = memory.settings().clone();
            let sink = IndexerSink::new(settings.clone(), embedder).with_lock_holder(holder);
            Inner::Sqlite(sqlite_watch::spawn(
                settings,
                WatchOptions::default(),
                Box::new(sink),
                events,
            )?)
        }
        crate::Inner::Postgres(_) => Inner::Postgres(PgWatcher::spawn(memory, holder, events)?),
    };
    Ok(MemoryWatcher { inner })
}

enum Msg {
    Fs,
    Stop,
}

struct PgWatcher {
    tx: SyncSender<Msg>,
    actor: Option<JoinHandle<Result<(), MemoryError>>>,
}

impl PgWatcher {
    fn spawn(
        memory: Arc<Memory>,
        holder: &str,
        events: Sender<WatchEvent>,
    ) -> Result<PgWatcher, MemoryError> {
        let (tx, rx) = mpsc::sync_channel::<Msg>(QUEUE);
        let overflow = Arc::new(AtomicBool::new(false));
        let notify_tx = tx.clone();
        let notify_overflow = overflow.clone();
        let os = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            // Only content events matter; never block the notify thread.
            if let Ok(ev) = &ev
                && ev.kind.is_access()
            {
                return;
            }
            if let Err(TrySendError::Full(_)) = notify_tx.try_send(Msg::Fs) {
                notify_overflow.store(true, Ordering::SeqCst);
            }
        })
        .map_err(|e| MemoryError::Watch(WatchError::from(e)))?;
        let holder = holder.to_string();
        let actor = std::thread::Builder::new()
            .name("claw-watch-pg".into())
            .spawn(move || {
                let mut a = PgActor {
                    memory,
                    holder,
                    events,
                    os,
                    armed: BTreeSet::new(),
                    batch: 0,
                    overflow,
                };
                let r = a.run(rx);
                a.emit(WatchEvent::Stopped);
                r
            })
            .map_err(|e| MemoryError::Watch(WatchError::Thread(e)))?;
        Ok(PgWatcher {
            tx,
            actor: Some(actor),
        })
    }

    fn stop(mut self) -> Result<(), MemoryError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), MemoryError> {
        // The queue may be full of events: the stop must still get through.
        let _ = self.tx.send(Msg::Stop);
        match self.actor.take() {
            Some(h) => h
                .join()
                .map_err(|_| MemoryError::Watch(WatchError::Panicked))?,
            None => Ok(()),
        }
    }
}

impl Drop for PgWatcher {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

struct PgActor {
    memory: Arc<Memory>,
    holder: String,
    events: Sender<WatchEvent>,
    os: notify::RecommendedWatcher,
    armed: BTreeSet<PathBuf>,
    batch: u64,
    overflow: Arc<AtomicBool>,
}

impl PgActor {
    fn emit(&self, e: WatchEvent) {
        let _ = self.events.send(e);
    }

    /// Arm a recursive OS watch on every source root not armed yet (and
    /// disarm the ones gone); a root that cannot be armed is reported.
    fn arm(&mut self) {
        use notify::Watcher;
        let roots: BTreeSet<PathBuf> = match self.memory.sources() {
            Ok(s) => s
                .into_iter()
                .map(|s| s.root)
                .filter(|r| r.is_dir())
                .collect(),
            Err(e) => {
                self.emit(WatchEvent::Error {
                    message: format!("reading the sources: {}", chain(&e)),
                });
                return;
            }
        };
        for gone in self.armed.difference(&roots).cloned().collect::<Vec<_>>() {
            let _ = self.os.unwatch(&gone);
            self.armed.remove(&gone);
        }
        for root in roots.difference(&self.armed.clone()) {
            match self.os.watch(root, notify::RecursiveMode::Recursive) {
                Ok(()) => {
                    self.armed.insert(root.clone());
                }
                Err(e) => self.emit(WatchEvent::Error {
                    message: format!("cannot watch {}: {e}", root.display()),
                }),
            }
        }
    }

    fn run(&mut self, rx: mpsc::Receiver<Msg>) -> Result<(), MemoryError> {
        self.arm();
        self.emit(WatchEvent::Started {
            pid: std::process::id(),
            roots: self.armed.iter().cloned().collect(),
        });
        // Catch up with what changed while nobody watched.
        self.apply(true);
        let mut due: Option<(Instant, Instant)> = None; // (first event, last event)
        let mut sources_checked = Instant::now();
        loop {
            let wait = match due {
                Some((first, last)) => {
                    let at = (last + QUIET).min(first + MAX_DELAY);
                    at.saturating_duration_since(Instant::now())
                }
                None => SOURCES_EVERY,
            };
            match rx.recv_timeout(wait) {
                Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Ok(Msg::Fs) => {
                    let now = Instant::now();
                    due = Some(match due {
                        Some((first, _)) => (first, now),
                        None => (now, now),
                    });
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            if sources_checked.elapsed() >= SOURCES_EVERY {
                sources_checked = Instant::now();
                let before = self.armed.clone();
                self.arm();
                if before != self.armed {
                    due.get_or_insert((Instant::now(), Instant::now()));
                }
            }
            if let Some((first, last)) = due
                && (last.elapsed() >= QUIET || first.elapsed() >= MAX_DELAY)
            {
                due = None;
                let rescan = self.overflow.swap(false, Ordering::SeqCst);
                if rescan {
                    self.emit(WatchEvent::Overflow);
                }
                self.apply(rescan);
            }
        }
    }

    /// One batch: re-index what differs from the rows (a failure is
    /// reported and retried with the next batch).
    fn apply(&mut self, rescan: bool) {
        let started = Instant::now();
        let Some(pg) = self.memory.postgres() else {
            return;
        };
        match pg.apply_changes(&self.holder, BATCH_LOCK_WAIT) {
            Ok((_, reindexed, removed)) if reindexed.is_empty() && removed.is_empty() => {}
            Ok((report, reindexed, removed)) => {
                self.batch += 1;
                self.emit(WatchEvent::Synced {
                    batch: self.batch,
                    unchanged: report.files_unchanged,
                    reindexed,
                    removed,
                    errors: report.issues,
                    rebuilt: report.rebuilt,
                    rescan,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    pending: 0,
                });
            }
            Err(e) => self.emit(WatchEvent::Error { message: chain(&e) }),
        }
    }
}

/// An error with its causes, `a: b: c`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
