//! The watcher: keeps the index fresh while `claw memory watch` (or the daemon)
//! runs, split by concern:
//!
//! - `actor.rs` — the actor thread, the bounded channel and batching;
//! - `debounce.rs` — debounce state (pure);
//! - `roots.rs` — watched roots, re-armed when created, removed or replaced;
//! - `classify.rs` — event classification (pure);
//! - `status.rs` — the heartbeat row read back as [`WatcherStatus`].
//!
//! The library emits typed [`WatchEvent`]s; rendering them (text or JSON Lines)
//! is the binary's job.
//!
//! Invariant: the notify callback never blocks (a full queue becomes a full
//! rescan), the actor never indexes, and nothing here runs on the async runtime.
//! When the database file is deleted or replaced, both connections to the old
//! file are closed before a new one is opened (SQLite deletes the `-wal` of the
//! last connection to close *by name*), the actor's first.

#![warn(missing_docs)]

mod actor;
mod classify;
mod debounce;
mod roots;
mod status;

pub use status::{HEARTBEAT_STALE_SECS, WatcherStatus, pid_alive, watcher_status};

use crate::config::MemoryConfig;
use crate::embed::Embedder;
use crate::freshness::{self, FileRef, SyncError, SyncOutcome};
use crate::lock::WriterLock;
use crate::store::{Store, StoreError};
use actor::{Actor, Msg};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Quiet period before changed notes are re-indexed.
pub const NOTES_DEBOUNCE: Duration = Duration::from_millis(1500);
/// Quiet period before appended session transcripts are re-indexed.
pub const SESSIONS_DEBOUNCE: Duration = Duration::from_secs(5);
/// A group of changes is flushed at the latest this long after its first event,
/// even if events keep coming.
pub const MAX_BATCH_DELAY: Duration = Duration::from_secs(10);
/// How often the heartbeat row is written and the watched roots re-checked.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// Capacity of the event queue between notify and the actor.
pub const EVENT_QUEUE: usize = 8192;

/// Errors starting or running the watcher.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The database could not be opened or read.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The OS file watcher could not be created.
    #[error("cannot start the file watcher: {0}")]
    Notify(#[from] notify::Error),
    /// A thread could not be spawned.
    #[error("cannot start a watcher thread: {0}")]
    Thread(std::io::Error),
    /// The actor or the indexing thread panicked.
    #[error("the watcher thread panicked")]
    Panicked,
}

/// Timing knobs (defaults are the constants above; tests and benches may shorten them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchOptions {
    /// Quiet period before changed notes are re-indexed.
    pub notes_debounce: Duration,
    /// Quiet period before appended transcripts are re-indexed.
    pub sessions_debounce: Duration,
    /// Cap on how long a group of changes may wait after its first event.
    pub max_batch_delay: Duration,
    /// How often the heartbeat row is written and the roots re-checked.
    pub heartbeat_every: Duration,
    /// Capacity of the event queue between notify and the actor; when it is full,
    /// events are dropped and a full rescan is scheduled instead.
    pub event_queue: usize,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            notes_debounce: NOTES_DEBOUNCE,
            sessions_debounce: SESSIONS_DEBOUNCE,
            max_batch_delay: MAX_BATCH_DELAY,
            heartbeat_every: HEARTBEAT_EVERY,
            event_queue: EVENT_QUEUE,
        }
    }
}

/// The indexing side of the watcher: re-index or remove the given files (each
/// as the disk says now). Implemented over the indexer's targeted entry point.
pub trait ApplyChanges: Send {
    /// Apply one batch.
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, SyncError>;
}

impl<F> ApplyChanges for F
where
    F: FnMut(&mut Store, &[FileRef]) -> Result<SyncOutcome, SyncError> + Send,
{
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, SyncError> {
        self(store, files)
    }
}

/// How long a watcher batch waits for another writer (e.g. a full index run).
pub const BATCH_LOCK_WAIT: Duration = Duration::from_secs(30);

/// The real indexing side: the indexer's targeted entry point, under the writer
/// lock taken per batch (so a full index run can go between batches).
pub struct IndexerSink {
    settings: MemoryConfig,
    embedder: Option<Box<dyn Embedder>>,
    holder: String,
}

/// What a watcher batch says it is doing in the writer lock, unless named.
pub const WATCH_HOLDER: &str = "memory watcher";

impl IndexerSink {
    /// A sink indexing `settings`' workspace with `embedder` (`None`: keyword only).
    pub fn new(settings: MemoryConfig, embedder: Option<Box<dyn Embedder>>) -> IndexerSink {
        IndexerSink {
            settings,
            embedder,
            holder: WATCH_HOLDER.to_string(),
        }
    }

    /// Name what a batch is doing in the writer lock (shown to another writer
    /// that finds it held), e.g. the command that runs the watcher.
    pub fn with_lock_holder(mut self, holder: impl Into<String>) -> IndexerSink {
        self.holder = holder.into();
        self
    }
}

impl ApplyChanges for IndexerSink {
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, SyncError> {
        let lock = WriterLock::acquire(&self.settings.state_dir(), &self.holder, BATCH_LOCK_WAIT)?;
        freshness::apply_paths(
            store,
            &self.settings,
            self.embedder.as_deref(),
            files,
            &lock,
        )
    }
}

/// What the watcher reports as it runs (the CLI prints one line, or one JSON
/// Line, each).
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// The watcher is running.
    Started {
        /// This process.
        pid: u32,
        /// The directories with an armed OS watch.
        roots: Vec<PathBuf>,
    },
    /// A batch was applied.
    Synced {
        /// 1-based batch number.
        batch: u64,
        /// Files re-read (their stat had moved).
        reindexed: Vec<FileRef>,
        /// Files removed from the index.
        removed: Vec<FileRef>,
        /// Files whose content was unchanged.
        unchanged: usize,
        /// Per-file problems (skipped files).
        errors: Vec<crate::indexer::IndexIssue>,
        /// Set when the index had to be rebuilt (model or chunker changed).
        rebuilt: Option<crate::indexer::RebuildReason>,
        /// Whether this batch was a full stat-level rescan (start-up, queue overflow).
        rescan: bool,
        /// Time the batch took.
        elapsed_ms: u64,
        /// Files still waiting after this batch.
        pending: usize,
    },
    /// A watched root appeared, disappeared or was replaced, and was re-armed.
    Rearmed {
        /// The root directory.
        root: PathBuf,
        /// Whether it exists (and is watched) now.
        exists: bool,
    },
    /// The OS event queue overflowed: a full rescan is scheduled.
    Overflow,
    /// The database file was deleted or replaced under the watcher (a
    /// dev+inode check per batch and per heartbeat): its connections are
    /// reopened on a new database, which gets the registered sources back
    /// from their sidecar, and a full rescan rebuilds the index.
    DatabaseReplaced {
        /// The database file.
        path: PathBuf,
    },
    /// A batch failed (it is retried with the next one), or a watch could not be
    /// armed, or the heartbeat could not be written.
    Error {
        /// What went wrong.
        message: String,
    },
    /// The watcher stopped cleanly.
    Stopped,
}

/// A running watcher. Dropping it without [`Watcher::stop`] also stops it.
pub struct Watcher {
    tx: SyncSender<Msg>,
    actor: Option<JoinHandle<Result<(), WatchError>>>,
}

impl Watcher {
    /// Stop cleanly: finish the batch in flight, remove the heartbeat row, join threads.
    pub fn stop(mut self) -> Result<(), WatchError> {
        self.shutdown()
    }

    /// Whether the actor has ended on its own (fatal error).
    pub fn is_finished(&self) -> bool {
        self.actor.as_ref().is_none_or(|h| h.is_finished())
    }

    fn shutdown(&mut self) -> Result<(), WatchError> {
        let _ = self.tx.send(Msg::Stop);
        match self.actor.take() {
            Some(h) => h.join().map_err(|_| WatchError::Panicked)?,
            None => Ok(()),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Start watching every source of `settings`' workspace. `apply` does the
/// indexing on a dedicated thread; `events` receives progress.
pub fn spawn(
    settings: MemoryConfig,
    opts: WatchOptions,
    apply: Box<dyn ApplyChanges>,
    events: Sender<WatchEvent>,
) -> Result<Watcher, WatchError> {
    spawn_with_own_files(settings, opts, apply, events, BTreeSet::new())
}

/// [`spawn`] for a watcher that runs inside a process which itself writes
/// `own` (the REPL and its session transcript, appended at every message):
/// those files are indexed like any other, but waiting for them does not
/// count as pending in the heartbeat, so the watcher keeps vouching for the
/// index while its owner writes them (the owner has their content at hand).
pub fn spawn_with_own_files(
    settings: MemoryConfig,
    opts: WatchOptions,
    apply: Box<dyn ApplyChanges>,
    events: Sender<WatchEvent>,
    own: BTreeSet<FileRef>,
) -> Result<Watcher, WatchError> {
    // Open once here so a broken database fails fast, before any thread starts.
    let store = Store::open(&settings.db_path())?;
    let (tx, rx) = mpsc::sync_channel::<Msg>(opts.event_queue.max(4));
    let overflow = Arc::new(AtomicBool::new(false));
    let notify_tx = tx.clone();
    let notify_overflow = overflow.clone();
    let os_watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        // Never block the notify thread: a full queue means "rescan everything".
        if let Err(TrySendError::Full(_)) = notify_tx.try_send(Msg::Fs(ev)) {
            notify_overflow.store(true, Ordering::SeqCst);
        }
    })?;
    let actor_tx = tx.clone();
    let actor = std::thread::Builder::new()
        .name("claw-watch".into())
        .spawn(move || {
            let mut actor = Actor::new(settings, opts, store, os_watcher, overflow, events, own);
            let r = actor.run(rx, actor_tx, apply);
            actor.finish();
            r
        })
        .map_err(WatchError::Thread)?;
    Ok(Watcher {
        tx,
        actor: Some(actor),
    })
}
