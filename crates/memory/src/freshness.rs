//! Freshness: a cheap, stat-level comparison of the disk (walk + stat, never a
//! hash) with the `files` table (and the files remembered as skipped), and the
//! bounded inline sync a search runs before answering.
//!
//! Invariant: a backlog larger than the caller's limit is never re-indexed
//! inline; the answer says the index is stale instead. The inline sync never
//! waits for another writer.

#![warn(missing_docs)]

use crate::config::MemoryConfig;
use crate::dircache::DirCache;
use crate::embed::Embedder;
use crate::indexer;
use crate::lock::{LockError, WriterLock};
use crate::store::{FileRecord, SkippedRecord, Store, StoreError};
use crate::walk::{self, SourceRoot};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One file of one source.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct FileRef {
    /// Source name.
    pub source: String,
    /// Path relative to the source root, `/`-separated.
    pub path: String,
}

impl FileRef {
    /// A reference to `path` of `source`.
    pub fn new(source: impl Into<String>, path: impl Into<String>) -> FileRef {
        FileRef {
            source: source.into(),
            path: path.into(),
        }
    }
}

/// How the disk differs from the index, by stat only.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Staleness {
    /// On disk, not indexed.
    pub new: Vec<FileRef>,
    /// Indexed, but the size or mtime differs.
    pub changed: Vec<FileRef>,
    /// Indexed, gone from disk (or its source is gone).
    pub deleted: Vec<FileRef>,
    /// Files seen on disk.
    pub scanned: usize,
    /// Time taken, in milliseconds.
    pub elapsed_ms: u64,
}

impl Staleness {
    /// Number of files that need work.
    pub fn dirty(&self) -> usize {
        self.new.len() + self.changed.len() + self.deleted.len()
    }

    /// Whether the disk matches the index.
    pub fn is_fresh(&self) -> bool {
        self.dirty() == 0
    }

    /// Every dirty file (new, changed, deleted), sorted.
    pub fn dirty_files(&self) -> Vec<FileRef> {
        let set: BTreeSet<FileRef> = self
            .new
            .iter()
            .chain(&self.changed)
            .chain(&self.deleted)
            .cloned()
            .collect();
        set.into_iter().collect()
    }

    fn merge(&mut self, other: Staleness) {
        self.new.extend(other.new);
        self.changed.extend(other.changed);
        self.deleted.extend(other.deleted);
        self.scanned += other.scanned;
    }
}

/// The pid of a live watcher whose heartbeat vouches for the index: alive
/// (recent heartbeat, process exists) and idle (nothing pending at its last
/// heartbeat, which it writes as soon as an event arrives after an idle
/// period). Such a watcher has applied every change it was told about, so a
/// search may skip the stat walk; the window left is the OS's event latency.
pub fn vouching_watcher(store: &Store) -> Result<Option<i64>, StoreError> {
    Ok(crate::watch::watcher_status(store)?
        .filter(|w| w.alive && w.row.pending == 0)
        .map(|w| w.row.pid))
}

/// Compare every source (built-ins and registered folders) with the index
/// ([`start_check`] then [`PendingCheck::finish`], with nothing in between).
pub fn check(settings: &MemoryConfig, store: &Store) -> Result<Staleness, StoreError> {
    start_check(settings, store)?.finish(store)
}

/// Compare one source with the index. Files remembered as skipped (too big,
/// binary) with an unchanged stat are not dirty.
///
/// The cheap path walks with [`walk::walk_stamps`] (one stat per listed file,
/// relative to its directory) in a helper thread while this one reads the
/// index's stat listing ([`Store::stamp_listing`]), then merges them
/// ([`compare_sorted`]); a source holding symbolic links is compared by the
/// full walk and [`diff`] instead. Both give the same answer.
pub fn check_source(
    settings: &MemoryConfig,
    src: &SourceRoot,
    store: &Store,
) -> Result<Staleness, StoreError> {
    PendingCheck::start(settings, store, vec![src.clone()], false)?.finish(store)
}

/// Start the freshness check of every source: the disk walk runs on a helper
/// thread from here on, while this thread reads the index's stat listings
/// (before returning) and may then do other work with the store — a search
/// answers its query meanwhile. [`PendingCheck::finish`] waits for the walk
/// and compares; the answer is [`check`]'s.
pub fn start_check(settings: &MemoryConfig, store: &Store) -> Result<PendingCheck, StoreError> {
    let sources = walk::sources(settings, store)?;
    PendingCheck::start(settings, store, sources, true)
}

/// What the walk thread hands back: per source, its stamps in walk order (or
/// `None`: the source needs the full walk), and when it was done.
type WalkResult = (Vec<Option<walk::StampList>>, Instant);

/// A freshness check under way (see [`start_check`]).
pub struct PendingCheck {
    start: Instant,
    sources: Vec<SourceRoot>,
    walker: Option<std::thread::JoinHandle<WalkResult>>,
    /// Per source: the files remembered as skipped, the index's stat listing.
    listings: Vec<(HashMap<String, SkippedRecord>, walk::StampList)>,
    /// Rows of sources that no longer exist (unregistered behind our back).
    orphans: Vec<FileRef>,
    listed_at: Instant,
    /// Where the directory cache is kept (for a walk on the caller's thread).
    state_dir: PathBuf,
    /// Every source is checked (not `check_source`'s one).
    all: bool,
}

/// Walk `sources`, listing directories through the state directory's
/// directory cache (`dircache`); when they are all the sources (`all`), the
/// cache is saved before returning if the walk changed it.
fn walk_all(sources: &[SourceRoot], state_dir: &Path, all: bool) -> WalkResult {
    let mut cache = DirCache::load(state_dir);
    if !all {
        cache = cache.read_only();
    }
    let disk = sources
        .iter()
        .map(|src| stamps_on_disk(src, &mut cache))
        .collect();
    let walked = Instant::now();
    cache.save();
    (disk, walked)
}

impl PendingCheck {
    fn start(
        settings: &MemoryConfig,
        store: &Store,
        sources: Vec<SourceRoot>,
        all: bool,
    ) -> Result<PendingCheck, StoreError> {
        let start = Instant::now();
        let for_walk = sources.clone();
        let state_dir = settings.state_dir();
        let walk_dir = state_dir.clone();
        // No thread to be had: `finish` walks on the caller's thread.
        let walker = std::thread::Builder::new()
            .name("claw-walk".into())
            .spawn(move || walk_all(&for_walk, &walk_dir, all))
            .ok();
        let mut listings = Vec::with_capacity(sources.len());
        for src in &sources {
            let skipped =
                indexer::skipped_records(store, &src.name, settings.memory.max_file_bytes)?;
            listings.push((skipped, store.stamp_listing(&src.name)?));
        }
        let mut gone = Vec::new();
        // Every source is checked: rows of sources gone from the list are deleted.
        if all {
            let known: BTreeSet<&str> = sources.iter().map(|s| s.name.as_str()).collect();
            for name in store.indexed_sources()? {
                if !known.contains(name.as_str()) {
                    let listing = store.stamp_listing(&name)?;
                    gone.extend(listing.iter().map(|(p, _)| FileRef::new(name.clone(), p)));
                }
            }
        }
        Ok(PendingCheck {
            start,
            sources,
            walker,
            listings,
            orphans: gone,
            listed_at: Instant::now(),
            state_dir,
            all,
        })
    }

    /// Wait for the walk and compare it with the listings read at the start.
    /// `elapsed_ms` is the check's own latency: from the start until both the
    /// walk and the listings were done, plus the comparison (work the caller
    /// did in between on its own thread is not counted).
    pub fn finish(mut self, store: &Store) -> Result<Staleness, StoreError> {
        let (disk, walked_at) = match self.walker.take() {
            Some(h) => h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            None => walk_all(&self.sources, &self.state_dir, self.all),
        };
        let compared = Instant::now();
        let ready = walked_at.max(self.listed_at);
        let mut out = Staleness::default();
        for ((src, (skipped, listing)), disk) in self.sources.iter().zip(&self.listings).zip(disk) {
            out.merge(match disk {
                Some(disk) => compare_sorted(&src.name, &disk, listing, skipped),
                None => {
                    let (disk, _issues) = walk::walk_source(src);
                    let records = store.file_records(&src.name)?;
                    diff(&src.name, &disk, &records, skipped)
                }
            });
        }
        out.deleted.append(&mut self.orphans);
        let waited = ready.saturating_duration_since(self.start);
        out.elapsed_ms = (waited + compared.elapsed()).as_millis() as u64;
        Ok(out)
    }
}

/// The files [`walk::walk_stamps`] lists, or `None` when the source needs the
/// full walk (it holds symbolic links).
fn stamps_on_disk(src: &SourceRoot, cache: &mut DirCache) -> Option<walk::StampList> {
    let mut disk = walk::StampList::new();
    let walked = walk::walk_stamps_with(src, Some(cache), |rel, stamp| disk.push(rel, stamp));
    (walked == walk::StampWalk::Complete).then_some(disk)
}

/// [`diff`] for the cheap walk, by merging: `disk` (walk order) against the
/// index's stat listing `listing` (sorted by path) and the files remembered
/// as skipped. New and changed files come in walk order, deleted ones sorted
/// (as [`compare_stamps`] gives them); nothing is allocated per unchanged file.
pub fn compare_sorted(
    source: &str,
    disk: &walk::StampList,
    listing: &walk::StampList,
    skipped: &HashMap<String, SkippedRecord>,
) -> Staleness {
    let mut out = Staleness {
        scanned: disk.len(),
        ..Staleness::default()
    };
    // The walk lists each directory in name order, so this is nearly sorted
    // already (a stable sort finds the runs).
    let mut order: Vec<u32> = (0..disk.len() as u32).collect();
    order.sort_by(|&a, &b| disk.get(a as usize).0.cmp(disk.get(b as usize).0));
    let mut new: Vec<u32> = Vec::new();
    let mut changed: Vec<u32> = Vec::new();
    let is_new = |rel: &str, on_disk: walk::Stamp| match skipped.get(rel) {
        Some(s) => !(s.mtime_ns == on_disk.mtime_ns && s.size == on_disk.size),
        None => true,
    };
    let (mut i, mut j) = (0, 0);
    while i < order.len() || j < listing.len() {
        let d = order.get(i).map(|&k| (k, disk.get(k as usize)));
        let l = (j < listing.len()).then(|| listing.get(j));
        match (d, l) {
            (Some((k, (rel, on_disk))), Some((path, stored))) => match rel.cmp(path) {
                std::cmp::Ordering::Less => {
                    if is_new(rel, on_disk) {
                        new.push(k);
                    }
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    out.deleted.push(FileRef::new(source, path));
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    if stored != on_disk {
                        changed.push(k);
                    }
                    i += 1;
                    j += 1;
                }
            },
            (Some((k, (rel, on_disk))), None) => {
                if is_new(rel, on_disk) {
                    new.push(k);
                }
                i += 1;
            }
            (None, Some((path, _))) => {
                out.deleted.push(FileRef::new(source, path));
                j += 1;
            }
            (None, None) => break,
        }
    }
    let refs = |mut ks: Vec<u32>| -> Vec<FileRef> {
        ks.sort_unstable();
        ks.into_iter()
            .map(|k| FileRef::new(source, disk.get(k as usize).0))
            .collect()
    };
    out.new = refs(new);
    out.changed = refs(changed);
    out
}

/// [`diff`] for the cheap walk: `disk` (walk order) against the index's stat
/// listing `stamps` and the files remembered as skipped. Each file on disk is
/// taken out of `stamps` by its relative path; what is left was deleted.
pub fn compare_stamps(
    source: &str,
    disk: Vec<(String, walk::Stamp)>,
    mut stamps: HashMap<String, walk::Stamp>,
    skipped: &HashMap<String, SkippedRecord>,
) -> Staleness {
    let mut out = Staleness {
        scanned: disk.len(),
        ..Staleness::default()
    };
    for (rel, on_disk) in disk {
        match stamps.remove(&rel) {
            Some(stored) if stored == on_disk => {}
            Some(_) => out.changed.push(FileRef::new(source, rel)),
            None => match skipped.get(&rel) {
                Some(s) if s.mtime_ns == on_disk.mtime_ns && s.size == on_disk.size => {}
                _ => out.new.push(FileRef::new(source, rel)),
            },
        }
    }
    let mut gone: Vec<String> = stamps.into_keys().collect();
    gone.sort_unstable();
    out.deleted = gone.into_iter().map(|p| FileRef::new(source, p)).collect();
    out
}

/// Pure comparison of a source's disk listing with its stored records and
/// skipped files (the indexer's own plan, by stat only).
pub fn diff(
    source: &str,
    disk: &[walk::DiskFile],
    records: &HashMap<String, FileRecord>,
    skipped: &HashMap<String, SkippedRecord>,
) -> Staleness {
    let p = crate::plan::plan_with_skipped(disk, records, skipped, false);
    let refs = |files: &[walk::DiskFile]| -> Vec<FileRef> {
        files.iter().map(|f| FileRef::new(source, &f.rel)).collect()
    };
    Staleness {
        new: refs(&p.add),
        changed: refs(&p.check),
        deleted: p
            .remove
            .into_iter()
            .map(|r| FileRef::new(source, r))
            .collect(),
        scanned: disk.len(),
        elapsed_ms: 0,
    }
}

/// What the inline sync before a search did (the `sync` object of the search
/// JSON; the binary renders `reason`, see [`StaleReason`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum SyncReport {
    /// The index matched the disk; nothing to do.
    Fresh {
        /// How long the stat-level check took.
        checked_ms: u64,
        /// The pid of the live, idle watcher whose heartbeat vouched for the
        /// index (no stat walk was done); absent when the disk was walked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        watcher: Option<i64>,
    },
    /// The few dirty files were re-indexed before answering.
    Synced {
        /// Files re-indexed.
        reindexed: Vec<FileRef>,
        /// Files removed from the index.
        removed: Vec<FileRef>,
        /// Time taken, in milliseconds.
        elapsed_ms: u64,
    },
    /// Too many dirty files (or another writer is busy): answered from the
    /// current index, which is behind the disk by `pending` files.
    Stale {
        /// Files changed on disk and not indexed yet.
        pending: usize,
        /// Why they were not indexed inline.
        reason: StaleReason,
        /// A few of the dirty files, for the message.
        sample: Vec<FileRef>,
    },
    /// `--no-sync`: not checked.
    Skipped,
}

impl SyncReport {
    /// One command-free line about what the inline sync did, for readable
    /// output (None when there is nothing worth saying: fresh or skipped).
    /// Front ends append their own hint (which command fixes a stale index).
    pub fn note(&self) -> Option<String> {
        match self {
            SyncReport::Fresh { .. } | SyncReport::Skipped => None,
            SyncReport::Synced {
                reindexed,
                removed,
                elapsed_ms,
            } => Some(format!(
                "synced {} changed and {} removed file(s) before searching ({elapsed_ms} ms)",
                reindexed.len(),
                removed.len()
            )),
            SyncReport::Stale {
                pending, reason, ..
            } => Some(format!(
                "index is stale: {pending} file(s) changed on disk are not indexed yet ({reason})"
            )),
        }
    }
}

/// Why an inline sync left the index stale. `Display` says what happened and
/// names no command; serialised as that sentence. What to do about it (run the
/// indexer, the watcher) is the binary's to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaleReason {
    /// More dirty files than the inline limit.
    Backlog {
        /// The limit.
        limit: usize,
    },
    /// Another process holds the writer lock (the sync never waits).
    Busy {
        /// The holder's pid.
        pid: u32,
        /// What the holder said it is doing.
        what: String,
    },
    /// The index was built with another model or chunker: syncing would rebuild it.
    Identity(IdentityMismatch),
    /// The targeted re-index failed (the error's message).
    Failed {
        /// The error, rendered.
        message: String,
    },
}

impl std::fmt::Display for StaleReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StaleReason::Backlog { limit } => {
                write!(f, "more than {limit} files to re-index; not done inline")
            }
            StaleReason::Busy { pid, what } => {
                write!(
                    f,
                    "another writer (pid {pid}, `{what}`) is updating the index"
                )
            }
            StaleReason::Identity(m) => m.fmt(f),
            StaleReason::Failed { message } => f.write_str(message),
        }
    }
}

impl serde::Serialize for StaleReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read back from JSON (a tool result parsed again): the sentence is all the
/// JSON keeps, so it comes back as [`StaleReason::Failed`] carrying that text;
/// rendering it again gives the same sentence.
impl<'de> serde::Deserialize<'de> for StaleReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let message = <String as serde::Deserialize>::deserialize(d)?;
        Ok(StaleReason::Failed { message })
    }
}

impl From<SyncError> for StaleReason {
    fn from(e: SyncError) -> StaleReason {
        match e {
            SyncError::Busy { pid, what } => StaleReason::Busy { pid, what },
            SyncError::Identity(m) => StaleReason::Identity(m),
            other => StaleReason::Failed {
                message: other.to_string(),
            },
        }
    }
}

/// Why the index cannot be updated in place with the running embedder: it
/// was built with another model, or another chunker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityMismatch {
    /// Built with `indexed`, searched with `running` (`""`: keyword-only).
    Model {
        /// The model of the index.
        indexed: String,
        /// The model of this process.
        running: String,
    },
    /// The chunker changed since the last index.
    Chunker,
}

impl std::fmt::Display for IdentityMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdentityMismatch::Model { indexed, running } => write!(
                f,
                "the index was built with {} but this search runs with {}",
                crate::rebuild::model_label(indexed),
                crate::rebuild::model_label(running)
            ),
            IdentityMismatch::Chunker => {
                f.write_str("the chunker or the word index changed since the last index")
            }
        }
    }
}

/// Default: at most this many dirty files are re-indexed inline before a search.
pub const DEFAULT_SYNC_LIMIT: usize = 20;

/// How the inline sync re-indexes files: the indexer's targeted entry point.
/// Returns (re-indexed, removed).
pub type ReindexFn<'a> =
    dyn FnMut(&mut Store, &[FileRef]) -> Result<(Vec<FileRef>, Vec<FileRef>), SyncError> + 'a;

/// Why a targeted re-index (the inline sync, a watcher batch) did not happen.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// Another process holds the writer lock and the caller would not wait.
    #[error("another writer (pid {pid}, `{what}`) is updating the index")]
    Busy {
        /// The holder's pid.
        pid: u32,
        /// What the holder said it is doing.
        what: String,
    },
    /// Taking the writer lock failed.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Reading or writing the database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The indexer failed.
    #[error(transparent)]
    Index(#[from] indexer::IndexError),
    /// Applying the files with this embedder would rebuild the index (it was
    /// built with another model or chunker): nothing was written.
    #[error("{0}")]
    Identity(IdentityMismatch),
    /// The database file was deleted or replaced since this connection opened
    /// it: nothing was written; reopen it first.
    #[error("the database {} was deleted or replaced", path.display())]
    DatabaseReplaced {
        /// The database file.
        path: std::path::PathBuf,
    },
}

/// Check freshness and, when at most `limit` files are dirty, re-index them via
/// `reindex` (which takes the writer lock without waiting). A larger backlog, or
/// a busy writer, yields [`SyncReport::Stale`] and leaves the index alone.
pub fn sync_small_with(
    store: &mut Store,
    st: Staleness,
    limit: usize,
    reindex: &mut ReindexFn<'_>,
) -> Result<SyncReport, StoreError> {
    let start = Instant::now();
    if st.is_fresh() {
        return Ok(SyncReport::Fresh {
            checked_ms: st.elapsed_ms,
            watcher: None,
        });
    }
    let dirty = st.dirty_files();
    if dirty.len() > limit {
        return Ok(SyncReport::Stale {
            pending: dirty.len(),
            reason: StaleReason::Backlog { limit },
            sample: dirty.into_iter().take(5).collect(),
        });
    }
    match reindex(store, &dirty) {
        Ok((reindexed, removed)) => Ok(SyncReport::Synced {
            reindexed,
            removed,
            elapsed_ms: start.elapsed().as_millis() as u64,
        }),
        Err(e) => Ok(SyncReport::Stale {
            pending: dirty.len(),
            reason: e.into(),
            sample: dirty.into_iter().take(5).collect(),
        }),
    }
}

/// What the inline sync says it is doing in the writer lock (seen by another
/// writer that finds it held) unless the caller names itself.
pub const SYNC_HOLDER: &str = "inline sync before a search";

/// How long the inline sync waits for the writer lock (it never queues behind a
/// long index run: the watcher or that run will bring the index up to date).
pub const SYNC_LOCK_WAIT: Duration = Duration::from_millis(0);

/// The inline sync a search runs before answering: at most `limit`
/// dirty files are re-indexed (with the writer lock, never waiting for it);
/// otherwise the report says the index is stale.
pub fn sync_small(
    store: &mut Store,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    limit: usize,
) -> Result<SyncReport, StoreError> {
    let st = check(settings, store)?;
    sync_checked(store, settings, embedder, limit, st, SYNC_HOLDER)
}

/// [`sync_small`] for a caller that already ran [`check`] (to decide, say, whether
/// the embedder is worth loading); `holder` is what the writer lock says it is
/// doing while the sync holds it.
pub fn sync_checked(
    store: &mut Store,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    limit: usize,
    st: Staleness,
    holder: &str,
) -> Result<SyncReport, StoreError> {
    // Never let an inline sync rebuild the index (a different model or chunker
    // would reset every row): that is a full index run's job.
    if let Some(mismatch) = identity_mismatch(store, embedder)? {
        if st.is_fresh() {
            return Ok(SyncReport::Fresh {
                checked_ms: st.elapsed_ms,
                watcher: None,
            });
        }
        let dirty = st.dirty_files();
        return Ok(SyncReport::Stale {
            pending: dirty.len(),
            reason: StaleReason::Identity(mismatch),
            sample: dirty.into_iter().take(5).collect(),
        });
    }
    let mut reindex = |store: &mut Store, files: &[FileRef]| {
        let lock = WriterLock::acquire(&settings.state_dir(), holder, SYNC_LOCK_WAIT).map_err(
            |e| match e {
                LockError::Held { pid, what, .. } => SyncError::Busy { pid, what },
                other => SyncError::Lock(other),
            },
        )?;
        apply_paths(store, settings, embedder, files, &lock).map(|o| (o.reindexed, o.removed))
    };
    sync_small_with(store, st, limit, &mut reindex)
}

/// Why a targeted re-index with `embedder` would have to rebuild the index, if it would.
/// A database never indexed has no identity yet: building it is allowed.
pub fn identity_mismatch(
    store: &Store,
    embedder: Option<&dyn Embedder>,
) -> Result<Option<IdentityMismatch>, StoreError> {
    let Some(stored) = store.meta("model")? else {
        return Ok(None);
    };
    let model = embedder.map(|e| e.model_id()).unwrap_or("");
    if stored != model {
        return Ok(Some(IdentityMismatch::Model {
            indexed: stored,
            running: model.to_string(),
        }));
    }
    if store.meta("chunker_version")?.as_deref() != Some(crate::chunk::CHUNKER_VERSION) {
        return Ok(Some(IdentityMismatch::Chunker));
    }
    Ok(None)
}

/// Re-index or remove `files` through the indexer's targeted entry point and
/// say, per file, what happened. The caller holds the writer lock. A database
/// replaced since `store` opened it (a rebuild swapped in while the caller
/// waited for the lock) is [`SyncError::DatabaseReplaced`]: nothing written.
pub fn apply_paths(
    store: &mut Store,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    files: &[FileRef],
    lock: &WriterLock,
) -> Result<SyncOutcome, SyncError> {
    // With the writer lock held no rebuild can swap the file now; one may have
    // while we waited for the lock: then this connection is the old file's,
    // and nothing is written into it.
    if store.is_replaced() {
        return Err(SyncError::DatabaseReplaced {
            path: store.path().to_path_buf(),
        });
    }
    let sources = walk::sources(settings, store)?;
    // Classify first (the indexer reports counts, the caller wants names).
    let mut will_index = Vec::new();
    let mut will_remove = Vec::new();
    for f in files {
        let Some(src) = sources.iter().find(|s| s.name == f.source) else {
            // An unregistered source: its rows are dropped by the indexer's full pass.
            continue;
        };
        let stored = store.file_record(&f.source, &f.path)?;
        match walk::stat_file(src, &f.path) {
            Some(d) => {
                let same = stored
                    .as_ref()
                    .is_some_and(|r| r.mtime_ns == d.mtime_ns && r.size == d.size);
                if !same {
                    will_index.push(f.clone());
                }
            }
            None if stored.is_some() => will_remove.push(f.clone()),
            None => {}
        }
    }
    let targets: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.source.clone(), f.path.clone()))
        .collect();
    let report = indexer::run_paths(store, settings, embedder, &targets, lock, &|_| {})?;
    let skipped: BTreeSet<(&str, &str)> = report
        .issues
        .iter()
        .filter(|i| i.skipped)
        .map(|i| (i.source.as_str(), i.path.as_str()))
        .collect();
    let reindexed: Vec<FileRef> = will_index
        .into_iter()
        .filter(|f| !skipped.contains(&(f.source.as_str(), f.path.as_str())))
        .collect();
    Ok(SyncOutcome {
        unchanged: report.files_unchanged,
        reindexed,
        removed: will_remove,
        errors: report.issues.clone(),
        rebuilt: report.rebuilt.clone(),
    })
}

/// What one targeted re-index did, per file.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SyncOutcome {
    /// Files whose stat had moved and were re-read (content may still be unchanged).
    pub reindexed: Vec<FileRef>,
    /// Files removed from the index.
    pub removed: Vec<FileRef>,
    /// Files whose content hash was unchanged.
    pub unchanged: usize,
    /// Per-file problems (counted skips), never fatal.
    pub errors: Vec<indexer::IndexIssue>,
    /// Set when the index had to be rebuilt (model or chunker changed).
    pub rebuilt: Option<indexer::RebuildReason>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn sync_notes_name_no_command() {
        use super::{StaleReason, SyncReport};
        assert_eq!(SyncReport::Skipped.note(), None);
        let synced = SyncReport::Synced {
            reindexed: vec![],
            removed: vec![],
            elapsed_ms: 7,
        };
        assert_eq!(
            synced.note().as_deref(),
            Some("synced 0 changed and 0 removed file(s) before searching (7 ms)")
        );
        let reason = StaleReason::Backlog { limit: 20 };
        let stale = SyncReport::Stale {
            pending: 42,
            reason: reason.clone(),
            sample: vec![],
        };
        let note = stale.note().expect("a stale index is worth a note");
        assert_eq!(
            note,
            format!("index is stale: 42 file(s) changed on disk are not indexed yet ({reason})")
        );
        assert!(!note.contains("claw "), "{note}");
    }

    use super::*;
    use crate::walk::DiskFile;

    fn disk(rel: &str, mtime: i64, size: i64) -> DiskFile {
        DiskFile {
            rel: rel.into(),
            abs: rel.into(),
            mtime_ns: mtime,
            size,
        }
    }

    fn rec(path: &str, mtime: i64, size: i64) -> (String, FileRecord) {
        (
            path.into(),
            FileRecord {
                source: "memory".into(),
                path: path.into(),
                sha256: "x".into(),
                mtime_ns: mtime,
                size,
                indexed_bytes: 0,
                indexed_lines: 0,
            },
        )
    }

    #[test]
    fn diff_classifies_by_stat() {
        let on_disk = [
            disk("same.md", 1, 10),
            disk("touched.md", 2, 10),
            disk("grown.md", 1, 11),
            disk("new.md", 1, 1),
        ];
        let records: HashMap<_, _> = [
            rec("same.md", 1, 10),
            rec("touched.md", 1, 10),
            rec("grown.md", 1, 10),
            rec("gone.md", 1, 1),
        ]
        .into_iter()
        .collect();
        let st = diff("memory", &on_disk, &records, &HashMap::new());
        let names = |v: &[FileRef]| v.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(names(&st.new), ["new.md"]);
        assert_eq!(names(&st.changed), ["touched.md", "grown.md"]);
        assert_eq!(names(&st.deleted), ["gone.md"]);
        assert_eq!(st.dirty(), 4);
        assert_eq!(st.scanned, 4);
    }

    #[test]
    fn the_merge_gives_what_the_hash_compare_gives() {
        use crate::walk::{Stamp, StampList};
        let st = |m, s| Stamp {
            mtime_ns: m,
            size: s,
        };
        // Walk order (a directory before a name that sorts after it byte-wise).
        let disk_rows = [
            ("a/z.md", st(1, 1)),
            ("a.md", st(2, 1)),
            ("b.md", st(1, 2)),
            ("big.md", st(5, 5)),
            ("bin.md", st(6, 6)),
            ("new/x.md", st(1, 1)),
            ("same.md", st(1, 1)),
        ];
        let stored_rows = [
            ("a.md", st(1, 1)),
            ("a/z.md", st(1, 1)),
            ("b.md", st(1, 1)),
            ("gone.md", st(1, 1)),
            ("same.md", st(1, 1)),
            ("zz/gone.md", st(1, 1)),
        ];
        let skipped: HashMap<String, SkippedRecord> = [("big.md", 5), ("bin.md", 7)]
            .into_iter()
            .map(|(p, m)| {
                let r = SkippedRecord {
                    path: p.to_string(),
                    mtime_ns: m,
                    size: m,
                    reason: "binary".into(),
                    message: String::new(),
                };
                (p.to_string(), r)
            })
            .collect();
        let mut disk = StampList::new();
        disk_rows.iter().for_each(|(p, s)| disk.push(p, *s));
        let mut listing = StampList::new();
        stored_rows.iter().for_each(|(p, s)| listing.push(p, *s));
        let merged = compare_sorted("n", &disk, &listing, &skipped);
        let hashed = compare_stamps(
            "n",
            disk_rows.iter().map(|(p, s)| (p.to_string(), *s)).collect(),
            stored_rows
                .iter()
                .map(|(p, s)| (p.to_string(), *s))
                .collect(),
            &skipped,
        );
        assert_eq!(merged, hashed);
        let names = |v: &[FileRef]| v.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
        assert_eq!(names(&merged.new), ["bin.md", "new/x.md"]);
        assert_eq!(names(&merged.changed), ["a.md", "b.md"]);
        assert_eq!(names(&merged.deleted), ["gone.md", "zz/gone.md"]);
        assert_eq!(merged.scanned, 7);
        // Either side empty.
        let none = StampList::new();
        assert_eq!(
            compare_sorted("n", &none, &listing, &skipped).deleted.len(),
            6
        );
        assert_eq!(compare_sorted("n", &disk, &none, &skipped).new.len(), 6);
    }

    #[test]
    fn sync_report_json_shape() {
        let r = SyncReport::Stale {
            pending: 30,
            reason: StaleReason::Backlog { limit: 20 },
            sample: vec![FileRef::new("memory", "a.md")],
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["status"], "stale");
        assert_eq!(v["pending"], 30);
        assert_eq!(
            v["reason"],
            "more than 20 files to re-index; not done inline"
        );
        assert_eq!(v["sample"][0]["path"], "a.md");
        let v = serde_json::to_value(SyncReport::Fresh {
            checked_ms: 3,
            watcher: None,
        })
        .unwrap();
        assert_eq!(v["status"], "fresh");
    }

    #[test]
    fn stale_reasons_name_no_command() {
        let reasons = [
            StaleReason::Backlog { limit: 20 },
            StaleReason::Busy {
                pid: 7,
                what: "indexing".into(),
            },
            StaleReason::Identity(IdentityMismatch::Model {
                indexed: "m1".into(),
                running: String::new(),
            }),
            StaleReason::Identity(IdentityMismatch::Chunker),
        ];
        for r in reasons {
            let text = r.to_string();
            assert!(!text.contains("claw "), "{text}");
            assert!(!text.contains("run `"), "{text}");
        }
        assert_eq!(
            StaleReason::Identity(IdentityMismatch::Model {
                indexed: "m1".into(),
                running: String::new(),
            })
            .to_string(),
            "the index was built with m1 but this search runs with keyword-only"
        );
    }
}
