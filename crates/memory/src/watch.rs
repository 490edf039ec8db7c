//! The watcher: keeps the index fresh while `claw memory watch` (or the daemon)
//! runs. An actor thread owns the OS watches (notify) and the debounce state; a
//! second thread does the blocking indexing work; a bounded channel joins them.
//! Also owns the heartbeat row in the `watcher` table and [`watcher_status`].
//!
//! Invariant: the notify callback never blocks (a full queue becomes a full
//! rescan), the actor never indexes, and nothing here runs on the async runtime.

use crate::config::MemoryConfig;
use crate::embed::Embedder;
use crate::freshness::{self, FileRef, SyncOutcome};
use crate::lock::WriterLock;
use crate::store::{Store, StoreError, now_unix};
use crate::walk::{self, SourceKind, SourceRoot};
use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind, RemoveKind};
use notify::{RecursiveMode, Watcher as _};
use rusqlite::{OptionalExtension, params};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Quiet period before changed notes are re-indexed.
pub const NOTES_DEBOUNCE: Duration = Duration::from_millis(1500);
/// Quiet period before appended session transcripts are re-indexed.
pub const SESSIONS_DEBOUNCE: Duration = Duration::from_secs(5);
/// A group of changes is flushed at the latest this long after its first event,
/// even if events keep coming.
pub const MAX_BATCH_DELAY: Duration = Duration::from_secs(10);
/// How often the heartbeat row is written and the watched roots re-checked.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// A heartbeat older than this means the watcher is not alive.
pub const HEARTBEAT_STALE_SECS: i64 = 15;
/// Capacity of the event queue between notify and the actor.
pub const EVENT_QUEUE: usize = 8192;

/// Errors starting or running the watcher.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot start the file watcher: {0}")]
    Notify(#[from] notify::Error),
    #[error("cannot start a watcher thread: {0}")]
    Thread(std::io::Error),
    #[error("the watcher thread panicked")]
    Panicked,
}

/// Timing knobs (defaults are the constants above; tests and benches may shorten them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchOptions {
    pub notes_debounce: Duration,
    pub sessions_debounce: Duration,
    pub max_batch_delay: Duration,
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
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, String>;
}

impl<F> ApplyChanges for F
where
    F: FnMut(&mut Store, &[FileRef]) -> Result<SyncOutcome, String> + Send,
{
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, String> {
        self(store, files)
    }
}

/// How long a watcher batch waits for another writer (e.g. `claw memory index`).
pub const BATCH_LOCK_WAIT: Duration = Duration::from_secs(30);

/// The real indexing side: the indexer's targeted entry point, under the writer
/// lock taken per batch (so `claw memory index` can run between batches).
pub struct IndexerSink {
    settings: MemoryConfig,
    embedder: Option<Box<dyn Embedder>>,
}

impl IndexerSink {
    pub fn new(settings: MemoryConfig, embedder: Option<Box<dyn Embedder>>) -> IndexerSink {
        IndexerSink { settings, embedder }
    }
}

impl ApplyChanges for IndexerSink {
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, String> {
        let lock = WriterLock::acquire(
            &self.settings.state_dir(),
            "claw memory watch",
            BATCH_LOCK_WAIT,
        )
        .map_err(|e| e.to_string())?;
        freshness::apply_paths(
            store,
            &self.settings,
            self.embedder.as_deref(),
            files,
            &lock,
        )
    }
}

/// What the watcher reports as it runs (one JSON Line each with `--json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WatchEvent {
    Started {
        pid: u32,
        roots: Vec<PathBuf>,
    },
    /// A batch was applied.
    Synced {
        batch: u64,
        reindexed: Vec<FileRef>,
        removed: Vec<FileRef>,
        unchanged: usize,
        errors: Vec<String>,
        /// Set when the index had to be rebuilt (model or chunker changed).
        rebuilt: Option<crate::rebuild::RebuildReason>,
        /// Whether this batch was a full stat-level rescan (start-up, queue overflow).
        rescan: bool,
        elapsed_ms: u64,
        /// Files still waiting after this batch.
        pending: usize,
    },
    /// A watched root appeared, disappeared or was replaced, and was re-armed.
    Rearmed {
        root: PathBuf,
        exists: bool,
    },
    /// The OS event queue overflowed: a full rescan is scheduled.
    Overflow,
    /// A batch failed (it is retried with the next one).
    Error {
        message: String,
    },
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

enum Msg {
    Fs(notify::Result<notify::Event>),
    Done(Box<Result<(SyncOutcome, bool), String>>, Duration),
    Stop,
}

/// A unit of work for the indexing thread.
#[derive(Debug, Default)]
struct Job {
    files: BTreeSet<FileRef>,
    /// Sources to reconcile by stat (directory events, re-armed roots).
    reconcile: BTreeSet<String>,
    /// Reconcile every source (start-up, overflow).
    full: bool,
}

impl Job {
    fn is_empty(&self) -> bool {
        self.files.is_empty() && self.reconcile.is_empty() && !self.full
    }

    fn absorb(&mut self, other: Job) {
        self.files.extend(other.files);
        self.reconcile.extend(other.reconcile);
        self.full |= other.full;
    }
}

/// Pending changes of one debounce class.
#[derive(Debug, Default)]
struct Group {
    job: Job,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Group {
    fn touch(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    fn due_at(&self, debounce: Duration, max_delay: Duration) -> Option<Instant> {
        if self.job.is_empty() {
            return None;
        }
        let (first, last) = (self.first?, self.last?);
        Some((last + debounce).min(first + max_delay))
    }

    fn take(&mut self) -> Job {
        self.first = None;
        self.last = None;
        std::mem::take(&mut self.job)
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
            let mut actor = Actor::new(settings, opts, store, os_watcher, overflow, events);
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

/// One directory the watcher keeps an OS watch on.
#[derive(Debug, Clone)]
struct Root {
    path: PathBuf,
    mode: RecursiveMode,
    /// Sources whose files live under it.
    sources: Vec<String>,
    /// (dev, inode) of the directory when armed.
    armed: Option<(u64, u64)>,
}

struct Actor {
    settings: MemoryConfig,
    opts: WatchOptions,
    store: Store,
    os: notify::RecommendedWatcher,
    overflow: Arc<AtomicBool>,
    events: Sender<WatchEvent>,
    sources: Vec<SourceRoot>,
    roots: BTreeMap<PathBuf, Root>,
    notes: Group,
    sessions: Group,
    in_flight: usize,
    batches: u64,
    last_event: Option<i64>,
    last_sync: Option<i64>,
    started_at: i64,
}

impl Actor {
    fn new(
        settings: MemoryConfig,
        opts: WatchOptions,
        store: Store,
        os: notify::RecommendedWatcher,
        overflow: Arc<AtomicBool>,
        events: Sender<WatchEvent>,
    ) -> Actor {
        Actor {
            settings,
            opts,
            store,
            os,
            overflow,
            events,
            sources: Vec::new(),
            roots: BTreeMap::new(),
            notes: Group::default(),
            sessions: Group::default(),
            in_flight: 0,
            batches: 0,
            last_event: None,
            last_sync: None,
            started_at: now_unix(),
        }
    }

    fn emit(&self, e: WatchEvent) {
        let _ = self.events.send(e);
    }

    fn run(
        &mut self,
        rx: Receiver<Msg>,
        tx: SyncSender<Msg>,
        apply: Box<dyn ApplyChanges>,
    ) -> Result<(), WatchError> {
        clean_dead_rows(&self.store)?;
        self.refresh_sources()?;
        self.check_roots(true);
        // Catch up with whatever changed while no watcher ran.
        self.notes.job.full = true;
        self.notes.touch(Instant::now() - self.opts.notes_debounce);
        self.emit(WatchEvent::Started {
            pid: std::process::id(),
            roots: self
                .roots
                .values()
                .filter(|r| r.armed.is_some())
                .map(|r| r.path.clone())
                .collect(),
        });
        self.heartbeat();

        let (job_tx, job_rx) = mpsc::sync_channel::<Job>(1);
        let settings = self.settings.clone();
        let worker = std::thread::Builder::new()
            .name("claw-watch-index".into())
            .spawn(move || index_worker(settings, apply, job_rx, tx))
            .map_err(WatchError::Thread)?;

        let mut next_tick = Instant::now() + self.opts.heartbeat_every;
        let result = loop {
            self.dispatch(&job_tx);
            let now = Instant::now();
            let mut deadline = next_tick;
            if self.in_flight == 0 {
                for d in [
                    self.notes
                        .due_at(self.opts.notes_debounce, self.opts.max_batch_delay),
                    self.sessions
                        .due_at(self.opts.sessions_debounce, self.opts.max_batch_delay),
                ]
                .into_iter()
                .flatten()
                {
                    deadline = deadline.min(d);
                }
            }
            let msg = rx.recv_timeout(deadline.saturating_duration_since(now));
            match msg {
                Ok(Msg::Fs(ev)) => self.on_fs(ev),
                Ok(Msg::Done(outcome, elapsed)) => self.on_done(*outcome, elapsed),
                Ok(Msg::Stop) => break Ok(()),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break Ok(()),
            }
            if self.overflow.swap(false, Ordering::SeqCst) {
                self.emit(WatchEvent::Overflow);
                self.notes.job.full = true;
                self.notes.touch(Instant::now());
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + self.opts.heartbeat_every;
                if let Err(e) = self.refresh_sources() {
                    self.emit(WatchEvent::Error {
                        message: e.to_string(),
                    });
                }
                self.check_roots(false);
                self.heartbeat();
                if worker.is_finished() {
                    break Err(WatchError::Panicked);
                }
            }
        };
        drop(job_tx);
        // Let the batch in flight finish so nothing is half-applied by us, and
        // report it.
        let _ = worker.join();
        while let Ok(msg) = rx.try_recv() {
            if let Msg::Done(outcome, elapsed) = msg {
                self.on_done(*outcome, elapsed);
            }
        }
        result
    }

    /// Remove the heartbeat row and say goodbye.
    fn finish(&mut self) {
        let _ = self.store.conn().execute(
            "DELETE FROM watcher WHERE pid = ?1",
            [std::process::id() as i64],
        );
        self.emit(WatchEvent::Stopped);
    }

    /// Send a due group to the indexing thread when it is idle.
    fn dispatch(&mut self, job_tx: &SyncSender<Job>) {
        if self.in_flight > 0 {
            return;
        }
        let now = Instant::now();
        let mut job = Job::default();
        let notes_due = self
            .notes
            .due_at(self.opts.notes_debounce, self.opts.max_batch_delay)
            .is_some_and(|d| d <= now);
        let sessions_due = self
            .sessions
            .due_at(self.opts.sessions_debounce, self.opts.max_batch_delay)
            .is_some_and(|d| d <= now);
        if notes_due {
            job.absorb(self.notes.take());
        }
        if sessions_due {
            job.absorb(self.sessions.take());
        }
        if job.is_empty() {
            return;
        }
        let n = job.files.len();
        match job_tx.try_send(job) {
            Ok(()) => self.in_flight = n.max(1),
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                self.notes.job.absorb(job);
                self.notes.touch(now);
            }
        }
    }

    fn on_done(&mut self, outcome: Result<(SyncOutcome, bool), String>, elapsed: Duration) {
        self.in_flight = 0;
        self.last_sync = Some(now_unix());
        self.batches += 1;
        match outcome {
            Ok((o, rescan)) => {
                self.emit(WatchEvent::Synced {
                    batch: self.batches,
                    reindexed: o.reindexed,
                    removed: o.removed,
                    unchanged: o.unchanged,
                    errors: o.errors,
                    rebuilt: o.rebuilt,
                    rescan,
                    elapsed_ms: elapsed.as_millis() as u64,
                    pending: self.pending(),
                });
            }
            Err(message) => {
                self.emit(WatchEvent::Error { message });
                // Retry everything by stat on the next batch.
                self.notes.job.full = true;
                self.notes.touch(Instant::now());
            }
        }
        self.heartbeat();
    }

    fn pending(&self) -> usize {
        let g = |g: &Group| g.job.files.len() + g.job.reconcile.len() + g.job.full as usize;
        g(&self.notes) + g(&self.sessions) + self.in_flight
    }

    fn refresh_sources(&mut self) -> Result<(), StoreError> {
        let sources = walk::sources(&self.settings, &self.store)?;
        if sources == self.sources {
            return Ok(());
        }
        let ws = self.settings.workspace.clone();
        let mut want: BTreeMap<PathBuf, (RecursiveMode, Vec<String>)> = BTreeMap::new();
        for s in &sources {
            let dirs = match s.kind {
                SourceKind::Workspace => vec![
                    (ws.clone(), RecursiveMode::NonRecursive),
                    (ws.join("memory"), RecursiveMode::Recursive),
                ],
                SourceKind::Sessions => vec![
                    (ws.clone(), RecursiveMode::NonRecursive),
                    (ws.join("sessions"), RecursiveMode::NonRecursive),
                ],
                SourceKind::Notes => vec![(s.root.clone(), RecursiveMode::Recursive)],
            };
            for (p, mode) in dirs {
                let e = want.entry(p).or_insert((mode, Vec::new()));
                if mode == RecursiveMode::Recursive {
                    e.0 = mode;
                }
                e.1.push(s.name.clone());
            }
        }
        // Unwatch roots no longer wanted (a source was removed).
        let stale: Vec<PathBuf> = self
            .roots
            .keys()
            .filter(|p| !want.contains_key(*p))
            .cloned()
            .collect();
        for p in stale {
            if let Some(r) = self.roots.remove(&p)
                && r.armed.is_some()
            {
                let _ = self.os.unwatch(&p);
            }
        }
        let added: Vec<String> = sources
            .iter()
            .filter(|s| !self.sources.iter().any(|o| o.name == s.name))
            .map(|s| s.name.clone())
            .collect();
        for (p, (mode, srcs)) in want {
            let r = self.roots.entry(p.clone()).or_insert(Root {
                path: p,
                mode,
                sources: Vec::new(),
                armed: None,
            });
            r.mode = mode;
            r.sources = srcs;
        }
        let removed_sources = self
            .sources
            .iter()
            .any(|o| !sources.iter().any(|s| s.name == o.name));
        self.sources = sources;
        if !added.is_empty() && !self.started_once() {
            // First load: the start-up rescan covers it.
        } else if !added.is_empty() || removed_sources {
            self.notes.job.full = true;
            self.notes.touch(Instant::now());
        }
        Ok(())
    }

    fn started_once(&self) -> bool {
        self.roots.values().any(|r| r.armed.is_some())
    }

    /// Arm roots that appeared, re-arm roots that were replaced (deleted and
    /// re-created), disarm roots that vanished; reconcile the affected sources.
    fn check_roots(&mut self, initial: bool) {
        let paths: Vec<PathBuf> = self.roots.keys().cloned().collect();
        for p in paths {
            self.check_root(&p, initial);
        }
    }

    fn check_root(&mut self, p: &Path, initial: bool) {
        let Some(root) = self.roots.get(p).cloned() else {
            return;
        };
        let now_id = dir_id(p);
        if now_id == root.armed {
            return;
        }
        if root.armed.is_some() {
            let _ = self.os.unwatch(p);
        }
        let mut armed = None;
        if now_id.is_some() {
            match self.os.watch(p, root.mode) {
                Ok(()) => armed = now_id,
                Err(e) => self.emit(WatchEvent::Error {
                    message: format!("cannot watch {}: {e}", p.display()),
                }),
            }
        }
        if let Some(r) = self.roots.get_mut(p) {
            r.armed = armed;
        }
        if !initial {
            self.emit(WatchEvent::Rearmed {
                root: p.to_path_buf(),
                exists: armed.is_some(),
            });
            let now = Instant::now();
            for s in &root.sources {
                self.group_for(s).job.reconcile.insert(s.clone());
            }
            for s in &root.sources {
                self.group_for(s).touch(now);
            }
        }
    }

    fn group_for(&mut self, source: &str) -> &mut Group {
        if source == walk::SOURCE_SESSIONS {
            &mut self.sessions
        } else {
            &mut self.notes
        }
    }

    fn on_fs(&mut self, ev: notify::Result<notify::Event>) {
        let ev = match ev {
            Ok(ev) => ev,
            Err(e) => {
                // Errors from the OS watcher (e.g. inotify limits): fall back to a rescan.
                self.emit(WatchEvent::Error {
                    message: format!("file watcher: {e}"),
                });
                self.notes.job.full = true;
                self.notes.touch(Instant::now());
                return;
            }
        };
        if ev.need_rescan() {
            self.emit(WatchEvent::Overflow);
            self.notes.job.full = true;
            self.notes.touch(Instant::now());
            return;
        }
        let relevant = match ev.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
            EventKind::Access(_) => false,
            EventKind::Modify(ModifyKind::Name(notify::event::RenameMode::Both)) => false, // From and To come separately
            _ => true,
        };
        if !relevant {
            return;
        }
        let dir_event = matches!(
            ev.kind,
            EventKind::Create(CreateKind::Folder)
                | EventKind::Remove(RemoveKind::Folder)
                | EventKind::Remove(RemoveKind::Other)
                | EventKind::Remove(RemoveKind::Any)
                | EventKind::Modify(ModifyKind::Name(_))
        );
        let now = Instant::now();
        let mut touched = false;
        for path in &ev.paths {
            if self.roots.contains_key(path) {
                // A watched root itself was created, removed or moved.
                self.check_root(&path.clone(), false);
                touched = true;
                continue;
            }
            for i in 0..self.sources.len() {
                let src = &self.sources[i];
                let Some(rel) = walk::relative(&src.root, path) else {
                    continue;
                };
                if walk::belongs(src.kind, &rel) {
                    let f = FileRef::new(src.name.clone(), rel);
                    let name = src.name.clone();
                    let g = self.group_for(&name);
                    g.job.files.insert(f);
                    g.touch(now);
                    touched = true;
                } else if dir_event && in_scope(src.kind, &rel) {
                    let name = src.name.clone();
                    let g = self.group_for(&name);
                    g.job.reconcile.insert(name);
                    g.touch(now);
                    touched = true;
                }
            }
        }
        if touched {
            self.last_event = Some(now_unix());
        }
    }

    fn heartbeat(&self) {
        let r = self.store.conn().execute(
            "INSERT INTO watcher (pid, started_at, heartbeat, last_event, last_sync, pending)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT(pid) DO UPDATE SET heartbeat = excluded.heartbeat,
               last_event = excluded.last_event, last_sync = excluded.last_sync,
               pending = excluded.pending",
            params![
                std::process::id() as i64,
                self.started_at,
                now_unix(),
                self.last_event,
                self.last_sync,
                self.pending() as i64
            ],
        );
        if let Err(e) = r {
            self.emit(WatchEvent::Error {
                message: format!("heartbeat: {e}"),
            });
        }
    }
}

/// Whether a non-file path could hide files of the source (a directory under it).
fn in_scope(kind: SourceKind, rel: &str) -> bool {
    let hidden = rel
        .split('/')
        .any(|p| p.starts_with('.') || walk::is_skipped_dir(p));
    if hidden {
        return false;
    }
    match kind {
        SourceKind::Workspace => rel == "memory" || rel.starts_with("memory/"),
        SourceKind::Sessions => rel == "sessions",
        SourceKind::Notes => true,
    }
}

fn dir_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(p).ok()?;
    md.is_dir().then(|| (md.dev(), md.ino()))
}

/// The indexing thread: expands reconcile requests by stat, then applies.
fn index_worker(
    settings: MemoryConfig,
    mut apply: Box<dyn ApplyChanges>,
    jobs: Receiver<Job>,
    done: SyncSender<Msg>,
) {
    let mut store = match Store::open(&settings.db_path()) {
        Ok(s) => s,
        Err(e) => {
            let _ = done.send(Msg::Done(Box::new(Err(e.to_string())), Duration::ZERO));
            return;
        }
    };
    while let Ok(job) = jobs.recv() {
        let start = Instant::now();
        let r = run_job(&settings, &mut store, apply.as_mut(), job);
        if done.send(Msg::Done(Box::new(r), start.elapsed())).is_err() {
            break;
        }
    }
}

fn run_job(
    settings: &MemoryConfig,
    store: &mut Store,
    apply: &mut dyn ApplyChanges,
    job: Job,
) -> Result<(SyncOutcome, bool), String> {
    let mut files = job.files;
    if job.full {
        let st = freshness::check(settings, store).map_err(|e| e.to_string())?;
        files.extend(st.dirty_files());
    } else if !job.reconcile.is_empty() {
        let sources = walk::sources(settings, store).map_err(|e| e.to_string())?;
        for src in sources.iter().filter(|s| job.reconcile.contains(&s.name)) {
            let st = freshness::check_source(src, store).map_err(|e| e.to_string())?;
            files.extend(st.dirty_files());
        }
        // Rows of a source whose root vanished entirely are covered by check_source
        // (an empty walk lists every stored file as deleted).
    }
    let files: Vec<FileRef> = files.into_iter().collect();
    let out = if files.is_empty() {
        SyncOutcome::default()
    } else {
        apply.apply(store, &files)?
    };
    Ok((out, job.full))
}

/// Remove heartbeat rows of watchers whose process is gone.
fn clean_dead_rows(store: &Store) -> Result<(), StoreError> {
    let mut stmt = store.conn().prepare("SELECT pid FROM watcher")?;
    let pids: Vec<i64> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for pid in pids {
        if !pid_alive(pid) || pid == std::process::id() as i64 {
            store
                .conn()
                .execute("DELETE FROM watcher WHERE pid = ?1", [pid])?;
        }
    }
    Ok(())
}

/// Whether a process with this pid exists (`kill(pid, 0)`).
#[allow(unsafe_code)] // one FFI call, justified below
pub fn pid_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission check.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The watcher's liveness as `claw memory status` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WatcherStatus {
    pub pid: i64,
    pub started_at: i64,
    pub heartbeat: i64,
    pub last_event: Option<i64>,
    pub last_sync: Option<i64>,
    /// Files waiting to be indexed at the last heartbeat.
    pub pending: i64,
    /// Heartbeat recent (within [`HEARTBEAT_STALE_SECS`]) and the process exists.
    pub alive: bool,
    /// Seconds since the last heartbeat.
    pub heartbeat_age_secs: i64,
}

/// One line for `claw memory status`: whether a watcher keeps the index fresh.
pub fn describe_watcher(status: Option<&WatcherStatus>, now: i64) -> String {
    let ago = |t: Option<i64>| match t {
        Some(t) => format!("{}s ago", (now - t).max(0)),
        None => "never".to_string(),
    };
    match status {
        None => "no watcher running (run `claw memory watch` to keep the index fresh)".into(),
        Some(s) if s.alive => format!(
            "watching (pid {}), last event {}, last sync {}, {} pending",
            s.pid,
            ago(s.last_event),
            ago(s.last_sync),
            s.pending
        ),
        Some(s) => format!(
            "NOT RUNNING: watcher pid {} stopped answering (last heartbeat {}); the index may be behind the disk",
            s.pid,
            ago(Some(s.heartbeat))
        ),
    }
}

/// The most recent watcher heartbeat, if any watcher ever registered (a crashed
/// watcher leaves its row behind: it is reported with `alive: false`).
pub fn watcher_status(store: &Store) -> Result<Option<WatcherStatus>, StoreError> {
    let row = store
        .conn()
        .query_row(
            "SELECT pid, started_at, heartbeat, last_event, last_sync, pending
             FROM watcher ORDER BY heartbeat DESC LIMIT 1",
            [],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, Option<i64>>(3)?,
                    r.get::<_, Option<i64>>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            },
        )
        .optional()?;
    Ok(row.map(
        |(pid, started_at, heartbeat, last_event, last_sync, pending)| {
            let age = now_unix() - heartbeat;
            WatcherStatus {
                pid,
                started_at,
                heartbeat,
                last_event,
                last_sync,
                pending,
                alive: age <= HEARTBEAT_STALE_SECS && pid_alive(pid),
                heartbeat_age_secs: age,
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_debounce_and_cap() {
        let t0 = Instant::now();
        let mut g = Group::default();
        assert_eq!(
            g.due_at(Duration::from_secs(1), Duration::from_secs(10)),
            None
        );
        g.job.files.insert(FileRef::new("memory", "a.md"));
        g.touch(t0);
        assert_eq!(
            g.due_at(Duration::from_secs(1), Duration::from_secs(10)),
            Some(t0 + Duration::from_secs(1))
        );
        // Events keep coming: the deadline moves, but never past first + cap.
        g.touch(t0 + Duration::from_secs(9));
        assert_eq!(
            g.due_at(Duration::from_secs(1), Duration::from_secs(10)),
            Some(t0 + Duration::from_secs(10))
        );
        let job = g.take();
        assert_eq!(job.files.len(), 1);
        assert_eq!(
            g.due_at(Duration::from_secs(1), Duration::from_secs(10)),
            None
        );
    }

    #[test]
    fn scope_of_directory_events() {
        assert!(in_scope(SourceKind::Workspace, "memory"));
        assert!(in_scope(SourceKind::Workspace, "memory/sub"));
        assert!(!in_scope(SourceKind::Workspace, "other"));
        assert!(!in_scope(SourceKind::Workspace, ".claw"));
        assert!(in_scope(SourceKind::Sessions, "sessions"));
        assert!(!in_scope(SourceKind::Notes, "a/.git/x"));
        assert!(in_scope(SourceKind::Notes, "a/b"));
    }

    #[test]
    fn status_reports_dead_and_live_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("m.sqlite")).unwrap();
        assert_eq!(watcher_status(&store).unwrap(), None);
        let now = now_unix();
        store
            .conn()
            .execute(
                "INSERT INTO watcher (pid, started_at, heartbeat, pending) VALUES (?1, ?2, ?2, 3)",
                params![std::process::id() as i64, now],
            )
            .unwrap();
        let s = watcher_status(&store).unwrap().unwrap();
        assert!(s.alive);
        assert_eq!(s.pending, 3);
        // An old heartbeat is not alive even if the pid exists.
        store
            .conn()
            .execute("UPDATE watcher SET heartbeat = ?1", [now - 60])
            .unwrap();
        assert!(!watcher_status(&store).unwrap().unwrap().alive);
        // A dead pid with a fresh heartbeat is not alive either.
        store.conn().execute("DELETE FROM watcher", []).unwrap();
        store
            .conn()
            .execute(
                "INSERT INTO watcher (pid, started_at, heartbeat, pending) VALUES (?1, ?2, ?2, 0)",
                params![i32::MAX as i64 - 7, now],
            )
            .unwrap();
        let dead = watcher_status(&store).unwrap().unwrap();
        assert!(!dead.alive);
        assert!(describe_watcher(Some(&dead), now).contains("NOT RUNNING"));
        assert!(describe_watcher(None, now).contains("no watcher"));
        clean_dead_rows(&store).unwrap();
        assert_eq!(watcher_status(&store).unwrap(), None);
    }
}
