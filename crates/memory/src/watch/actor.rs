//! The watcher actor: one thread owns the OS watches, the debounce groups and the
//! heartbeat; a second thread does the blocking indexing work; a bounded channel
//! joins them (and the notify callback, which never blocks: a full queue becomes
//! a full rescan).

use super::classify::{self, Relevance, Target};
use super::debounce::{Group, Job};
use super::roots::{self, RootChange, Roots};
use super::status::clean_dead_rows;
use super::{ApplyChanges, WatchError, WatchEvent, WatchOptions};
use crate::config::MemoryConfig;
use crate::freshness::{self, FileRef, SyncError, SyncOutcome};
use crate::store::{Store, StoreError, WatcherRow, now_unix};
use crate::walk::{self, SourceRoot};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// What the actor's queue carries.
pub(crate) enum Msg {
    /// An OS event (or an OS watcher error).
    Fs(notify::Result<notify::Event>),
    /// The indexing thread finished a job: (outcome, was it a full rescan), time taken.
    Done(Box<Result<(SyncOutcome, bool), SyncError>>, Duration),
    /// The indexing thread closed the replaced database and opened the new one
    /// (a reopen job); the actor may open its own connection again.
    Reopened,
    /// Stop after the batch in flight.
    Stop,
}

pub(crate) struct Actor {
    settings: MemoryConfig,
    opts: WatchOptions,
    /// The actor's connection (heartbeat, sources); `None` from the moment the
    /// database is found replaced until the indexing thread has reopened it.
    store: Option<Store>,
    /// The database was found replaced: a reopen job is to be dispatched.
    db_replaced: bool,
    os: notify::RecommendedWatcher,
    overflow: Arc<AtomicBool>,
    events: Sender<WatchEvent>,
    sources: Vec<SourceRoot>,
    roots: Roots,
    notes: Group,
    sessions: Group,
    in_flight: usize,
    batches: u64,
    last_event: Option<i64>,
    last_sync: Option<i64>,
    started_at: i64,
    /// `pending` as last written to the heartbeat row: a search trusts the row
    /// (and skips its stat walk) only while it says 0, so the first event after
    /// an idle period is written at once, not at the next tick.
    reported_pending: std::cell::Cell<usize>,
    /// Files the owner writes itself (the REPL's own session transcript):
    /// waiting to index them does not count as pending in the heartbeat.
    own: BTreeSet<FileRef>,
    /// Files of the batch in flight that count as pending (not in `own`).
    in_flight_counted: usize,
}

impl Actor {
    pub(crate) fn new(
        settings: MemoryConfig,
        opts: WatchOptions,
        store: Store,
        os: notify::RecommendedWatcher,
        overflow: Arc<AtomicBool>,
        events: Sender<WatchEvent>,
        own: BTreeSet<FileRef>,
    ) -> Actor {
        Actor {
            settings,
            opts,
            store: Some(store),
            db_replaced: false,
            os,
            overflow,
            events,
            sources: Vec::new(),
            roots: Roots::default(),
            notes: Group::default(),
            sessions: Group::default(),
            in_flight: 0,
            batches: 0,
            last_event: None,
            last_sync: None,
            started_at: now_unix(),
            reported_pending: std::cell::Cell::new(usize::MAX),
            own,
            in_flight_counted: 0,
        }
    }

    fn emit(&self, e: WatchEvent) {
        let _ = self.events.send(e);
    }

    fn error(&self, message: String) {
        self.emit(WatchEvent::Error { message });
    }

    pub(crate) fn run(
        &mut self,
        rx: Receiver<Msg>,
        tx: SyncSender<Msg>,
        apply: Box<dyn ApplyChanges>,
    ) -> Result<(), WatchError> {
        if let Some(store) = &self.store {
            clean_dead_rows(store)?;
        }
        self.refresh_sources()?;
        self.check_roots(true);
        // Catch up with whatever changed while no watcher ran.
        self.notes.rescan(Instant::now() - self.opts.notes_debounce);
        self.emit(WatchEvent::Started {
            pid: std::process::id(),
            roots: self.roots.armed(),
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
                Ok(Msg::Reopened) => self.on_reopened(),
                Ok(Msg::Stop) => break Ok(()),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break Ok(()),
            }
            if self.overflow.swap(false, Ordering::SeqCst) {
                self.emit(WatchEvent::Overflow);
                self.notes.rescan(Instant::now());
            }
            if self.pending_counted() > 0 && self.reported_pending.get() == 0 {
                // No longer idle: stop vouching for the index right away.
                self.heartbeat();
            }
            if Instant::now() >= next_tick {
                next_tick = Instant::now() + self.opts.heartbeat_every;
                if self.store.as_ref().is_some_and(Store::is_replaced) {
                    self.on_db_replaced();
                }
                if let Err(e) = self.refresh_sources() {
                    self.error(e.to_string());
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
            match msg {
                Msg::Done(outcome, elapsed) => self.on_done(*outcome, elapsed),
                Msg::Reopened => self.on_reopened(),
                _ => {}
            }
        }
        result
    }

    /// The database file is not the one we opened: say so, close our
    /// connection now (the indexing thread's, still open, keeps SQLite from
    /// deleting anything by name), and have the indexing thread reopen it with
    /// a full rescan as soon as it is idle.
    fn on_db_replaced(&mut self) {
        if self.store.is_none() && !self.db_replaced {
            return; // already being reopened
        }
        if self.store.take().is_some() {
            self.emit(WatchEvent::DatabaseReplaced {
                path: self.settings.db_path(),
            });
        }
        self.db_replaced = true;
    }

    /// The indexing thread opened the new database: open ours again.
    fn on_reopened(&mut self) {
        if self.store.is_some() {
            return;
        }
        match Store::open(&self.settings.db_path()) {
            Ok(s) => {
                self.store = Some(s);
                // Sources come back from the sidecar: watch them again.
                self.sources.clear();
                if let Err(e) = self.refresh_sources() {
                    self.error(e.to_string());
                }
                self.heartbeat();
            }
            Err(e) => self.error(format!("reopening the database: {e}")),
        }
    }

    /// Remove the heartbeat row and say goodbye.
    pub(crate) fn finish(&mut self) {
        if let Some(store) = &self.store {
            let _ = store.delete_watcher(std::process::id() as i64);
        }
        self.emit(WatchEvent::Stopped);
    }

    /// Send a due group to the indexing thread when it is idle.
    fn dispatch(&mut self, job_tx: &SyncSender<Job>) {
        if self.in_flight > 0 {
            return;
        }
        let now = Instant::now();
        let mut job = Job::default();
        if self.db_replaced {
            // Everything pending rides along: the full rescan covers it.
            job.reopen = true;
            job.full = true;
            job.absorb(self.notes.take());
            job.absorb(self.sessions.take());
            match job_tx.try_send(job) {
                Ok(()) => {
                    self.in_flight = 1;
                    self.in_flight_counted = 1;
                    self.db_replaced = false;
                }
                Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                    self.notes.job.absorb(job);
                    self.notes.touch(now);
                }
            }
            return;
        }
        let o = self.opts;
        if self.notes.is_due(o.notes_debounce, o.max_batch_delay, now) {
            job.absorb(self.notes.take());
        }
        if self
            .sessions
            .is_due(o.sessions_debounce, o.max_batch_delay, now)
        {
            job.absorb(self.sessions.take());
        }
        if job.is_empty() {
            return;
        }
        let n = job.files.len();
        let counted = job.pending_except(&self.own);
        match job_tx.try_send(job) {
            Ok(()) => {
                self.in_flight = n.max(1);
                self.in_flight_counted = counted;
            }
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                self.notes.job.absorb(job);
                self.notes.touch(now);
            }
        }
    }

    fn on_done(&mut self, outcome: Result<(SyncOutcome, bool), SyncError>, elapsed: Duration) {
        self.in_flight = 0;
        self.in_flight_counted = 0;
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
            Err(SyncError::DatabaseReplaced { .. }) => self.on_db_replaced(),
            Err(e) => {
                self.error(e.to_string());
                // Retry everything by stat on the next batch.
                self.notes.rescan(Instant::now());
            }
        }
        self.heartbeat();
    }

    fn pending(&self) -> usize {
        self.notes.job.pending() + self.sessions.job.pending() + self.in_flight
    }

    /// What the heartbeat reports as pending: [`Actor::pending`] without the
    /// owner's own files (a search may skip its walk while this is 0).
    fn pending_counted(&self) -> usize {
        self.notes.job.pending_except(&self.own)
            + self.sessions.job.pending_except(&self.own)
            + self.in_flight_counted
    }

    fn refresh_sources(&mut self) -> Result<(), StoreError> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let sources = walk::sources(&self.settings, store)?;
        if sources == self.sources {
            return Ok(());
        }
        self.roots.set_wanted(
            roots::wanted(&self.settings.workspace, &sources),
            &mut self.os,
        );
        let started_once = !self.roots.armed().is_empty();
        let added = sources
            .iter()
            .any(|s| !self.sources.iter().any(|o| o.name == s.name));
        let removed = self
            .sources
            .iter()
            .any(|o| !sources.iter().any(|s| s.name == o.name));
        self.sources = sources;
        // On the first load the start-up rescan covers new sources.
        if (added && started_once) || (!added && removed) {
            self.notes.rescan(Instant::now());
        }
        Ok(())
    }

    /// Arm roots that appeared, re-arm roots that were replaced, disarm roots
    /// that vanished; reconcile the affected sources (except at start-up).
    fn check_roots(&mut self, initial: bool) {
        let changes = self.roots.check_all(&mut self.os);
        for c in changes {
            self.on_root_change(c, initial);
        }
    }

    fn on_root_change(&mut self, c: RootChange, initial: bool) {
        if let Some(e) = &c.error {
            self.error(format!("cannot watch {}: {e}", c.root.display()));
        }
        if initial {
            return;
        }
        self.emit(WatchEvent::Rearmed {
            root: c.root,
            exists: c.exists,
        });
        let now = Instant::now();
        for s in &c.sources {
            let g = self.group_for(s);
            g.job.reconcile.insert(s.clone());
            g.touch(now);
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
                self.error(format!("file watcher: {e}"));
                self.notes.rescan(Instant::now());
                return;
            }
        };
        if ev.need_rescan() {
            self.emit(WatchEvent::Overflow);
            self.notes.rescan(Instant::now());
            return;
        }
        let relevance = classify::relevance(&ev.kind);
        if relevance == Relevance::Ignore {
            return;
        }
        let now = Instant::now();
        let mut touched = false;
        for path in &ev.paths {
            if self.roots.contains(path) {
                // A watched root itself was created, removed or moved.
                if let Some(c) = self.roots.check(path, &mut self.os) {
                    self.on_root_change(c, false);
                }
                touched = true;
                continue;
            }
            for t in classify::targets(&self.sources, path, relevance) {
                match t {
                    Target::File(f) => {
                        let g = self.group_for(&f.source.clone());
                        g.job.files.insert(f);
                        g.touch(now);
                    }
                    Target::Reconcile(name) => {
                        let g = self.group_for(&name);
                        g.job.reconcile.insert(name.clone());
                        g.touch(now);
                    }
                }
                touched = true;
            }
        }
        if touched {
            self.last_event = Some(now_unix());
        }
    }

    fn heartbeat(&self) {
        let pending = self.pending_counted();
        let row = WatcherRow {
            pid: std::process::id() as i64,
            started_at: self.started_at,
            heartbeat: now_unix(),
            last_event: self.last_event,
            last_sync: self.last_sync,
            pending: pending as i64,
        };
        let Some(store) = &self.store else {
            return; // being reopened
        };
        match store.upsert_watcher(&row) {
            Ok(()) => self.reported_pending.set(pending),
            Err(e) => {
                // Not written: make the next event try again.
                self.reported_pending.set(0);
                self.error(format!("heartbeat: {e}"));
            }
        }
    }
}

/// The indexing thread: expands reconcile requests by stat, then applies.
pub(crate) fn index_worker(
    settings: MemoryConfig,
    mut apply: Box<dyn ApplyChanges>,
    jobs: Receiver<Job>,
    done: SyncSender<Msg>,
) {
    let mut store = match Store::open(&settings.db_path()) {
        Ok(s) => Some(s),
        Err(e) => {
            let _ = done.send(Msg::Done(Box::new(Err(e.into())), Duration::ZERO));
            return;
        }
    };
    while let Ok(job) = jobs.recv() {
        let start = Instant::now();
        if job.reopen {
            // Close the replaced file first: this is the last connection to it,
            // so SQLite checkpoints into it and removes its `-wal`/`-shm` names
            // before the new database creates its own.
            drop(store.take());
        }
        if store.is_none() {
            match Store::open(&settings.db_path()) {
                Ok(s) => {
                    store = Some(s);
                    if done.send(Msg::Reopened).is_err() {
                        break;
                    }
                }
                Err(e) => {
                    let r = Err(e.into());
                    if done.send(Msg::Done(Box::new(r), start.elapsed())).is_err() {
                        break;
                    }
                    continue;
                }
            }
        }
        let Some(s) = store.as_mut() else { continue };
        let r = run_job(&settings, s, apply.as_mut(), job);
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
) -> Result<(SyncOutcome, bool), SyncError> {
    // Never write into a database that was deleted under us (per batch).
    if store.is_replaced() {
        return Err(SyncError::DatabaseReplaced {
            path: store.path().to_path_buf(),
        });
    }
    let mut files = job.files;
    if job.full {
        let st = freshness::check(settings, store)?;
        files.extend(st.dirty_files());
    } else if !job.reconcile.is_empty() {
        let sources = walk::sources(settings, store)?;
        for src in sources.iter().filter(|s| job.reconcile.contains(&s.name)) {
            let st = freshness::check_source(settings, src, store)?;
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
