//! Keeping a memory fresh while files change (`claw memory watch`, the
//! gateway's watcher, the REPL's own watcher), on either backend, with one
//! event stream ([`WatchEvent`]).
//!
//! - SQLite: the memory crate's watcher actor (per-file batches, heartbeat
//!   rows that let searches skip their stat walk, database-replacement
//!   checks), indexing through [`MemorySink`] with the memory's own embedder
//!   (loaded once per process, shared with its searches).
//! - PostgreSQL: an actor of its own, fed by the same OS notifications: after
//!   a quiet period (or at most every few seconds while events keep coming) it
//!   re-indexes every file that differs from this workspace's rows, under the
//!   writer lock and the per-source advisory locks `claw memory index` uses.
//!   The event queue is bounded; an overflow schedules a full rescan.
//!
//! A process that searches and writes files of its own (the REPL appends its
//! transcript at every message) starts its watcher with [`spawn_in_process`]:
//! only where no other process keeps the index, and its own files never stop
//! the heartbeat vouching for the index.

use crate::{Memory, MemoryError};
use claw_memory::freshness::{self, FileRef, SyncError, SyncOutcome};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use claw_memory::walk::SOURCE_SESSIONS;
use claw_memory::watch::{self as sqlite_watch, ApplyChanges, BATCH_LOCK_WAIT, WatchOptions};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use claw_memory::store::WatcherRow;
pub use claw_memory::watch::{WATCH_HOLDER, WatchError, WatchEvent, WatcherStatus};

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

/// Start watching every source of `memory`'s workspace, indexing with the
/// memory's own embedder (the one its searches use: loaded on the first batch
/// that needs it, or shared at open with [`Memory::open_shared`]). `holder`
/// names the writer in the lock; `events` receives progress.
///
/// A model change (the index built with another model) rebuilds the index
/// with the running one; callers that must not degrade an embedded index to
/// keyword-only check [`Memory::index_embedder`] first (`claw memory watch`
/// and the gateway refuse to start then).
pub fn spawn(
    memory: Arc<Memory>,
    holder: &str,
    events: Sender<WatchEvent>,
) -> Result<MemoryWatcher, MemoryError> {
    let inner = match &memory.inner {
        crate::Inner::Sqlite(_) => {
            let settings = memory.settings().clone();
            let sink = MemorySink {
                memory,
                holder: holder.to_string(),
                rebuild: true,
            };
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

/// Why [`spawn_in_process`] started no watcher: someone else keeps the index
/// fresh, or nobody needs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStarted {
    /// Another process's watcher is alive (its heartbeat is recent).
    OtherWatcher {
        /// Its process id.
        pid: i64,
    },
    /// Another process holds the writer lock right now.
    WriterBusy {
        /// Its process id.
        pid: u32,
    },
    /// A shared (PostgreSQL) index: every search syncs this workspace's
    /// changed files inline, so no watcher is needed.
    InlineSync,
}

/// Whether another process keeps (or is updating) this memory's index, or
/// none is needed; `None` when this process should keep it.
pub fn other_keeper(memory: &Memory) -> Result<Option<NotStarted>, MemoryError> {
    let crate::Inner::Sqlite(service) = &memory.inner else {
        return Ok(Some(NotStarted::InlineSync));
    };
    let me = std::process::id();
    let watcher = service
        .on_store(|store| sqlite_watch::watcher_status(store))
        .map_err(MemoryError::Status)?;
    if let Some(w) = watcher
        && w.alive
        && w.row.pid != me as i64
    {
        return Ok(Some(NotStarted::OtherWatcher { pid: w.row.pid }));
    }
    if let Some(h) = WriterLock::holder(&memory.settings().state_dir())?
        && h.pid != me
    {
        return Ok(Some(NotStarted::WriterBusy { pid: h.pid }));
    }
    Ok(None)
}

/// The watcher of a process that searches this memory and writes `own_files`
/// itself (the REPL and its session transcript): started only when
/// [`other_keeper`] finds no other keeper (else `Ok(Err(why))`). Those files
/// are indexed like any other, but waiting for them never stops the watcher
/// vouching for the index (the process has their content already). It never
/// rebuilds the index: a batch that would (another model, or no model for an
/// embedded index) fails with an error event instead.
pub fn spawn_in_process(
    memory: Arc<Memory>,
    holder: &str,
    own_files: &[PathBuf],
    events: Sender<WatchEvent>,
) -> Result<Result<MemoryWatcher, NotStarted>, MemoryError> {
    if let Some(why) = other_keeper(&memory)? {
        return Ok(Err(why));
    }
    let settings = memory.settings().clone();
    let own: BTreeSet<FileRef> = own_files
        .iter()
        .filter_map(|f| session_file_ref(&settings.workspace, f))
        .collect();
    let sink = MemorySink {
        memory,
        holder: holder.to_string(),
        rebuild: false,
    };
    let w = sqlite_watch::spawn_with_own_files(
        settings,
        WatchOptions::default(),
        Box::new(sink),
        events,
        own,
    )?;
    Ok(Ok(MemoryWatcher {
        inner: Inner::Sqlite(w),
    }))
}

/// The indexing side of a SQLite watcher: the indexer's targeted entry point
/// under the writer lock (per batch, like `claw memory index`), with the
/// memory's own embedder.
struct MemorySink {
    memory: Arc<Memory>,
    holder: String,
    /// Whether a batch may rebuild the index (model or chunker changed).
    rebuild: bool,
}

impl ApplyChanges for MemorySink {
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, SyncError> {
        // The model loads here on the first batch that needs it, shared with
        // the process's searches. One that cannot load is `None`: keyword-only
        // for a keyword-only index, and refused below for an embedded one.
        let embedder = self.memory.index_embedder().ok().flatten();
        if let Some(mismatch) = freshness::identity_mismatch(store, embedder)?
            && (!self.rebuild || embedder.is_none())
        {
            return Err(SyncError::Identity(mismatch));
        }
        let settings = self.memory.settings();
        let lock = WriterLock::acquire(&settings.state_dir(), &self.holder, BATCH_LOCK_WAIT)?;
        freshness::apply_paths(store, settings, embedder, files, &lock)
    }
}

/// A file as a file of the `sessions` source, if it lies in the workspace.
/// Both paths are canonicalised first (the file may not exist yet: then its
/// directory is), so a workspace reached through a symlink or a `..` still
/// finds its own transcript.
fn session_file_ref(workspace: &Path, file: &Path) -> Option<FileRef> {
    let workspace = canonical(workspace);
    let file = match file.canonicalize() {
        Ok(p) => p,
        Err(_) => match (file.parent(), file.file_name()) {
            (Some(dir), Some(name)) => canonical(dir).join(name),
            _ => file.to_path_buf(),
        },
    };
    let rel = file.strip_prefix(&workspace).ok()?;
    let rel = rel
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect::<Option<Vec<_>>>()?
        .join("/");
    Some(FileRef::new(SOURCE_SESSIONS, rel))
}

/// `path` with symlinks and `..` resolved, or as given when it cannot be.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
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
                    message: format!("reading the sources: {}", claw_memory::error_chain(&e)),
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
            Err(e) => self.emit(WatchEvent::Error {
                message: claw_memory::error_chain(&e),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transcript_is_a_file_of_the_sessions_source() {
        let ws = Path::new("/ws");
        assert_eq!(
            session_file_ref(ws, Path::new("/ws/sessions/cli_default.jsonl")),
            Some(FileRef::new("sessions", "sessions/cli_default.jsonl"))
        );
        assert_eq!(session_file_ref(ws, Path::new("/elsewhere/s.jsonl")), None);
    }

    #[test]
    fn a_symlinked_or_dotted_workspace_still_finds_its_transcript() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sessions")).expect("mkdir");
        std::fs::create_dir_all(real.join("sub")).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        let want = Some(FileRef::new("sessions", "sessions/cli_default.jsonl"));
        // The transcript named through the real path, the workspace through the link.
        let file = real.join("sessions/cli_default.jsonl");
        assert_eq!(session_file_ref(&dir.path().join("link"), &file), want);
        // The other way round, with a `..`, and before the file exists.
        let ws = dir.path().join("link/sub/..");
        assert_eq!(
            session_file_ref(&real, &ws.join("sessions/cli_default.jsonl")),
            want
        );
        std::fs::write(&file, "").expect("write");
        assert_eq!(session_file_ref(&ws, &file), want);
    }
}
