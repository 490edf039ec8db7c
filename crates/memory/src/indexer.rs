//! Incremental indexing: walk every source, plan against the store, and for each
//! new or changed file read → hash → redact → chunk → embed (cache first) → write
//! in one transaction. Unchanged files cost a stat (and a hash when the stat
//! moved); only chunk texts missing from the embedding cache are embedded.
//! A rebuild from scratch (`--force`, another model, chunker or dimension) runs
//! the same pass over a new database the storage builds aside and swaps in
//! ([`IndexStorage::rebuild`], `crate::rebuild`); a never-built index is filled
//! in place.
//!
//! Invariant: blocking work only (SQLite, file reads, embedding); the caller runs
//! it on a dedicated thread or `spawn_blocking`, and must hold the [`WriterLock`].

#![warn(missing_docs)]

use crate::chunk::{self, ApproxCounter, CHUNKER_VERSION, ChunkParams, TokenCounter};
use crate::config::MemoryConfig;
use crate::dates::note_time_from_path;
use crate::embed::{Embedder, KEYWORD_ONLY_MODEL};
use crate::index_storage::IndexStorage;
use crate::lock::WriterLock;
use crate::plan::plan_with_skipped;
pub use crate::rebuild::RebuildReason;
use std::borrow::Cow;

use crate::redact::redact;
use crate::store::{FileRecord, NewChunk, SkippedRecord, StoreError, WriteMode};
use crate::transcript::{read_transcript, trailing_exchange};
use crate::walk::{self, DiskFile, IssueReason, SourceKind, SourceRoot};
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::Instant;

/// Errors that stop an index run (per-file problems are counted in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    /// The database failed.
    Store(#[from] StoreError),
}

/// Options of a full pass.
#[derive(Debug, Clone, Default)]
pub struct IndexOptions {
    /// Re-read every file and rebuild the index from scratch.
    pub force: bool,
}

/// A per-file problem: the file was skipped (or indexed with a caveat).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexIssue {
    /// Source name.
    pub source: String,
    /// Path relative to the source root.
    pub path: String,
    /// What went wrong (never advice naming a command: the binary adds that
    /// from `reason`).
    pub message: String,
    /// Whether the file was left out of the index.
    pub skipped: bool,
    /// Why, typed (serialised as its `snake_case` name, e.g. `"too_big"`).
    pub reason: IssueReason,
}

/// What an index run did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IndexReport {
    /// Files found on disk.
    pub files_scanned: usize,
    /// New or modified files re-chunked.
    pub files_changed: usize,
    /// Files whose stat or content was unchanged.
    pub files_unchanged: usize,
    /// Files gone from disk, removed from the index.
    pub files_removed: usize,
    /// Files left out (too big, unreadable, outside their source).
    pub files_skipped: usize,
    /// Chunks written.
    pub chunks_added: usize,
    /// Chunks deleted.
    pub chunks_removed: usize,
    /// Chunk texts embedded by the model (cache misses).
    pub embeddings_computed: usize,
    /// Chunk texts found in the embedding cache.
    pub cache_hits: usize,
    /// Wall time of the run, in milliseconds.
    pub elapsed_ms: u64,
    /// Embedding model id; empty when keyword-only.
    pub model: String,
    /// Why the index was rebuilt from scratch, if it was.
    pub rebuilt: Option<RebuildReason>,
    /// Per-file problems.
    pub issues: Vec<IndexIssue>,
    /// Notes left out because they are over the size limit, by path and
    /// size (each is also one of `issues`, reason `too_big`).
    pub too_big: Vec<OversizedNote>,
}

/// A note left out of the index because it is larger than the limit
/// (`memory.max_file_bytes`): never silently dropped, every surface that says
/// what the index holds (index, search, status, doctor) lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OversizedNote {
    /// Source name.
    pub source: String,
    /// Path relative to the source root.
    pub path: String,
    /// Its size on disk, in bytes, when it was left out.
    pub size: u64,
    /// The limit it is over, in bytes.
    pub limit: u64,
}

impl OversizedNote {
    /// `source:path (12.0 MiB, over the 16.0 MiB limit)`.
    pub fn describe(&self) -> String {
        format!(
            "{}:{} ({}, over the {} limit)",
            self.source,
            self.path,
            human_bytes(self.size),
            human_bytes(self.limit)
        )
    }
}

/// One command-free line naming the notes a search cannot find for their size
/// (None when there are none); front ends add what to do about it.
pub fn describe_oversized(notes: &[OversizedNote]) -> Option<String> {
    if notes.is_empty() {
        return None;
    }
    let list: Vec<String> = notes.iter().map(OversizedNote::describe).collect();
    Some(format!(
        "{} note(s) not searchable, over the index's size limit: {}",
        notes.len(),
        list.join(", ")
    ))
}

/// `n` bytes for a reader: `16.0 MiB`, `1.5 KiB`, `980 B`.
pub fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} B"),
    }
}

/// The notes of `sources` remembered as skipped for being over the limit
/// that still are (a file the limit now admits is not listed), sorted.
pub fn oversized_notes(
    store: &dyn IndexStorage,
    sources: &[SourceRoot],
    max_file_bytes: u64,
) -> Result<Vec<OversizedNote>, StoreError> {
    let mut out = Vec::new();
    for src in sources {
        for r in skipped_records(store, &src.name, max_file_bytes)?.into_values() {
            if r.reason == IssueReason::TooBig.as_str() {
                out.push(OversizedNote {
                    source: src.name.clone(),
                    path: r.path,
                    size: r.size.max(0) as u64,
                    limit: max_file_bytes,
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.source, &a.path).cmp(&(&b.source, &b.path)));
    Ok(out)
}

/// Progress notifications for a UI.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// Discovery finished: `files` on disk, `to_read` need reading.
    Planned {
        /// Files on disk.
        files: usize,
        /// Files that need reading.
        to_read: usize,
    },
    /// One file processed.
    File {
        /// Chunks written for it.
        chunks: usize,
        /// Of which embedded by the model (cache misses).
        embedded: usize,
    },
}

/// Chunk budget for an embedder: the configured size, capped so the model never truncates.
pub fn chunk_params(settings: &MemoryConfig, embedder: Option<&dyn Embedder>) -> ChunkParams {
    let mut max = settings.memory.chunk_tokens;
    if let Some(e) = embedder {
        // Two special tokens ([CLS], [SEP]) are added by the model.
        max = max.min(e.max_input_tokens().saturating_sub(2)).max(8);
    }
    ChunkParams {
        max_tokens: max,
        overlap_tokens: settings.memory.chunk_overlap_tokens.min(max / 2),
    }
}

/// Content-addressed chunk id: sha256 of `source:path:start:end:chunk-hash:model`.
pub fn chunk_id(
    source: &str,
    path: &str,
    start: usize,
    end: usize,
    hash: &str,
    model: &str,
) -> String {
    sha256_hex(format!("{source}:{path}:{start}:{end}:{hash}:{model}").as_bytes())
}

/// Lower-case hex sha256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The files of `source` remembered as skipped that still are: a file skipped
/// as too big is re-examined once the limit (`max_file_bytes`) admits it.
pub fn skipped_records(
    store: &dyn IndexStorage,
    source: &str,
    max_file_bytes: u64,
) -> Result<HashMap<String, SkippedRecord>, StoreError> {
    let mut records = store.skipped_records(source)?;
    records.retain(|_, r| still_skipped(r, max_file_bytes));
    Ok(records)
}

fn still_skipped(r: &SkippedRecord, max_file_bytes: u64) -> bool {
    !(r.reason == IssueReason::TooBig.as_str() && r.size.max(0) as u64 <= max_file_bytes)
}

/// Whether the stored index must be rebuilt from scratch for this embedder
/// (another model, chunker or dimension, missing vector tables), or because
/// the caller `force`s it; `None` when it can be updated in place.
pub fn rebuild_reason(
    store: &dyn IndexStorage,
    embedder: Option<&dyn Embedder>,
    force: bool,
) -> Result<Option<RebuildReason>, StoreError> {
    let (model, dims) = identity(embedder);
    let stored_model = store.meta("model")?;
    let stored_chunker = store.meta("chunker_version")?;
    let stored_dims = store.vec_dims()?.unwrap_or(0);
    Ok(if force {
        Some(RebuildReason::Forced)
    } else if stored_model.is_none() {
        Some(RebuildReason::NewIndex)
    } else if stored_model.as_deref() != Some(model) {
        Some(RebuildReason::ModelChanged {
            from: stored_model.unwrap_or_default(),
            to: model.to_string(),
        })
    } else if stored_chunker.as_deref() != Some(CHUNKER_VERSION) {
        Some(RebuildReason::ChunkerChanged {
            from: stored_chunker,
            to: CHUNKER_VERSION.to_string(),
        })
    } else if stored_dims != dims {
        Some(RebuildReason::DimensionChanged {
            from: stored_dims,
            to: dims,
        })
    } else if dims > 0 && store.vector_index_available() && !store.has_vec_tables()? {
        Some(RebuildReason::VectorTablesMissing)
    } else {
        None
    })
}

/// The index identity of an embedder: (model id, dimension); keyword-only is
/// `("", 0)`.
fn identity(embedder: Option<&dyn Embedder>) -> (&str, usize) {
    (
        embedder.map(|e| e.model_id()).unwrap_or(KEYWORD_ONLY_MODEL),
        embedder.map(|e| e.dims()).unwrap_or(0),
    )
}

/// Rebuild the index from scratch for `reason` and fill it with a full pass.
/// An index that searches may be using is rebuilt through
/// [`IndexStorage::rebuild`] (SQLite: built aside, swapped in; see
/// `crate::rebuild`); a never-built one is simply filled in place.
fn rebuild(
    store: &mut dyn IndexStorage,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    reason: RebuildReason,
    progress: &dyn Fn(Progress),
    started: Instant,
) -> Result<IndexReport, IndexError> {
    let (model, dims) = identity(embedder);
    let mut report = if reason.replaces_an_index() {
        let mut report = IndexReport::default();
        store.rebuild(model, dims, CHUNKER_VERSION, &mut |fresh| {
            report = pass(fresh, settings, embedder, progress, started)
                .map_err(|IndexError::Store(e)| e)?;
            Ok(())
        })?;
        report
    } else {
        store.reset_index(model, dims, CHUNKER_VERSION)?;
        pass(store, settings, embedder, progress, started)?
    };
    report.rebuilt = Some(reason);
    // The pass's clock started before the rebuild's set-up and swap.
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// One chunk of a file on its way to the store.
struct Piece {
    start: usize,
    end: usize,
    text: String,
    /// File title › heading path (`chunk::contexts`); for transcripts the day and
    /// the speakers (`transcript::turn_context`).
    context: String,
    note_time: Option<i64>,
}

/// One indexing session over a store: holds the embedder, chunk budget and report.
struct Run<'a> {
    store: &'a mut dyn IndexStorage,
    settings: &'a MemoryConfig,
    embedder: Option<&'a dyn Embedder>,
    params: ChunkParams,
    model: String,
    report: IndexReport,
    progress: &'a dyn Fn(Progress),
    /// When the open write group started (see [`GROUP_COMMIT_INTERVAL`]).
    group_started: Instant,
    /// Files whose chunks wait for their embeddings ([`EMBED_AHEAD`]), in order.
    pending: Vec<PendingWrite>,
    /// Texts the pending files still need embedded.
    pending_texts: usize,
    /// The thread that runs the model for this run (none when keyword-only).
    worker: Option<EmbedWorker>,
    /// The files before `pending`, whose texts the worker is embedding.
    in_flight: Option<InFlight>,
}

/// The model's thread for one run ([`with_embed_worker`]): it embeds one batch
/// of files' texts while the run reads and chunks the next files and writes the
/// batch before. On two cores that keeps both busy: the run's own work (reading,
/// chunking, SQLite) no longer leaves the model's sessions waiting.
struct EmbedWorker {
    texts: std::sync::mpsc::SyncSender<Vec<String>>,
    vectors: std::sync::mpsc::Receiver<Result<Vec<Vec<f32>>, crate::embed::EmbedError>>,
}

/// Run `f` with an [`EmbedWorker`] for `embedder` (`None` without one). The
/// worker stops when `f` is done with it (its channel closes); at most the
/// batch it holds is finished first.
fn with_embed_worker<T>(
    embedder: Option<&dyn Embedder>,
    f: impl FnOnce(Option<EmbedWorker>) -> T,
) -> T {
    let Some(e) = embedder else { return f(None) };
    std::thread::scope(|s| {
        let (texts, inbox) = std::sync::mpsc::sync_channel::<Vec<String>>(1);
        let (outbox, vectors) = std::sync::mpsc::sync_channel(1);
        s.spawn(move || {
            for batch in inbox {
                let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
                if outbox.send(e.embed(&refs)).is_err() {
                    break;
                }
            }
        });
        f(Some(EmbedWorker { texts, vectors }))
    })
}

/// A batch that landed: its files with the vectors each computed, and the
/// vectors by text hash (for the batch after it).
#[derive(Default)]
struct Landed {
    files: Vec<(PendingWrite, usize)>,
    fresh: HashMap<String, Vec<f32>>,
}

/// A batch of files whose texts the worker is embedding.
struct InFlight {
    files: Vec<PendingWrite>,
    /// The distinct texts' hashes, in the order the texts were sent.
    hashes: Vec<String>,
}

/// The indexer embeds the chunks of consecutive files in one call, up to about
/// this many texts: most notes are one or two chunks, and a call of many
/// batches runs the model's sessions side by side (`embed::LocalEmbedder`).
/// Each file is still written in its own savepoint, in order, once its vectors
/// are in; at most this many files wait, a file is never pending twice, and a
/// removal waits for the writes before it.
pub const EMBED_AHEAD: usize = 32;

/// A file's chunks with their cached vectors, waiting for the rest.
struct PendingWrite {
    source: String,
    record: FileRecord,
    pieces: Vec<Piece>,
    hashes: Vec<String>,
    /// (hash, text) of the chunks the cache did not have (distinct).
    missing: Vec<(String, String)>,
    vectors: HashMap<String, Vec<f32>>,
    mode: WriteMode,
    rechunk_from: Option<usize>,
}

/// File writes are grouped into one SQLite transaction for at most this long:
/// each file is still all-or-nothing (a savepoint), a crash loses at most this
/// much work, and small files stop paying one commit each.
pub const GROUP_COMMIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(1000);

impl Drop for Run<'_> {
    fn drop(&mut self) {
        // An error unwound the run: its open group is abandoned (files stay as
        // they were before it). After `finish` there is no open group.
        self.store.rollback_group();
    }
}

/// A full incremental pass over every source (a rebuild from scratch first
/// when [`rebuild_reason`] says so, or `opts.force`).
pub fn run(
    store: &mut dyn IndexStorage,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    opts: &IndexOptions,
    _lock: &WriterLock,
    progress: &dyn Fn(Progress),
) -> Result<IndexReport, IndexError> {
    let started = Instant::now();
    store.discard_stale_rebuild()?;
    match rebuild_reason(&*store, embedder, opts.force)? {
        Some(reason) => rebuild(store, settings, embedder, reason, progress, started),
        None => pass(store, settings, embedder, progress, started),
    }
}

/// The incremental pass of [`run`] over `store` as it is.
fn pass(
    store: &mut dyn IndexStorage,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    progress: &dyn Fn(Progress),
    started: Instant,
) -> Result<IndexReport, IndexError> {
    with_embed_worker(embedder, |worker| {
        pass_with(store, settings, embedder, progress, started, worker)
    })
}

/// [`pass`] with the run's model thread.
fn pass_with(
    store: &mut dyn IndexStorage,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    progress: &dyn Fn(Progress),
    started: Instant,
    worker: Option<EmbedWorker>,
) -> Result<IndexReport, IndexError> {
    let sources = crate::index_storage::source_roots(settings, &*store)?;
    // Transcript chunks name their day in the user's zone: after a change of
    // zone every transcript is chunked again (the embeddings of chunks whose
    // day did not change come from the cache).
    let zone = settings.zone.key();
    let rezone = zone_changed(&*store, &zone)?;
    let mut run = Run::new(store, settings, embedder, progress, worker)?;

    // Discover and plan every source first, so progress knows the total.
    let mut plans = Vec::new();
    for src in &sources {
        let (disk, issues) = walk::walk_source(src);
        for i in issues {
            run.issue(&src.name, &i.path, &i.message, i.skipped, i.reason);
        }
        let mut stored = run.store.file_records(&src.name)?;
        let skipped = skipped_records(run.store, &src.name, settings.memory.max_file_bytes)?;
        run.report.files_scanned += disk.len();
        let redate = rezone && src.kind == SourceKind::Sessions;
        let p = plan_with_skipped(&disk, &stored, &skipped, redate);
        if redate {
            // Read as new: rewritten whole, not appended to.
            let on_disk: std::collections::HashSet<&str> =
                disk.iter().map(|f| f.rel.as_str()).collect();
            stored.retain(|rel, _| !on_disk.contains(rel.as_str()));
        }
        run.report.files_unchanged += p.unchanged;
        for rel in &p.skipped {
            if let Some(r) = skipped.get(rel) {
                run.still_skipped(&src.name, r);
            }
        }
        for rel in &p.forget {
            run.store.forget_skipped(&src.name, rel)?;
        }
        plans.push((src, p, stored));
    }
    // Sources that are no longer registered.
    let known: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
    for name in run.store.indexed_sources()? {
        if !known.contains(&name.as_str()) {
            for path in run.store.file_records(&name)?.into_keys() {
                run.remove(&name, &path)?;
                run.tick()?;
            }
        }
    }
    let to_read = plans.iter().map(|(_, p, _)| p.to_read()).sum();
    (run.progress)(Progress::Planned {
        files: run.report.files_scanned,
        to_read,
    });
    for (src, p, stored) in plans {
        for f in p.add.iter().chain(p.check.iter()) {
            run.file(src, f, stored.get(&f.rel))?;
            run.tick()?;
        }
        // Removals last, so a renamed file's chunks can reuse the old rows' embeddings.
        for path in &p.remove {
            run.remove(&src.name, path)?;
            run.tick()?;
        }
    }
    if rezone {
        run.store.set_meta(TRANSCRIPT_ZONE, &zone)?;
    }
    run.finish(started)
}

/// The index meta key recording the zone transcripts were chunked in
/// (`DayZone::key`).
pub const TRANSCRIPT_ZONE: &str = "transcript_zone";

/// Whether the transcripts in `store` were chunked in another zone than `zone`
/// (or before the zone was recorded).
fn zone_changed(store: &dyn IndexStorage, zone: &str) -> Result<bool, StoreError> {
    Ok(store.meta(TRANSCRIPT_ZONE)?.as_deref() != Some(zone))
}

/// Re-index (or remove) specific files: `(source name, relative path)` pairs, as
/// reported by the watcher. Files that vanished are removed; unknown sources ignored.
pub fn run_paths(
    store: &mut dyn IndexStorage,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    targets: &[(String, String)],
    _lock: &WriterLock,
    progress: &dyn Fn(Progress),
) -> Result<IndexReport, IndexError> {
    let started = Instant::now();
    store.discard_stale_rebuild()?;
    if let Some(reason) = rebuild_reason(&*store, embedder, false)? {
        // The whole index is rebuilt: a targeted pass is not enough.
        return rebuild(store, settings, embedder, reason, progress, started);
    }
    if zone_changed(&*store, &settings.zone.key())? {
        // Every transcript is chunked again: a targeted pass is not enough.
        return pass(store, settings, embedder, progress, started);
    }
    with_embed_worker(embedder, |worker| {
        paths_with(
            store, settings, embedder, targets, progress, started, worker,
        )
    })
}

/// The targeted pass of [`run_paths`], with the run's model thread.
fn paths_with(
    store: &mut dyn IndexStorage,
    settings: &MemoryConfig,
    embedder: Option<&dyn Embedder>,
    targets: &[(String, String)],
    progress: &dyn Fn(Progress),
    started: Instant,
    worker: Option<EmbedWorker>,
) -> Result<IndexReport, IndexError> {
    let sources = crate::index_storage::source_roots(settings, &*store)?;
    let mut run = Run::new(store, settings, embedder, progress, worker)?;
    (run.progress)(Progress::Planned {
        files: targets.len(),
        to_read: targets.len(),
    });
    for (source, rel) in targets {
        let Some(src) = sources.iter().find(|s| &s.name == source) else {
            continue;
        };
        run.report.files_scanned += 1;
        let stored = run.store.file_record(source, rel)?;
        let skipped = match &stored {
            Some(_) => None,
            None => run
                .store
                .skipped_record(source, rel)?
                .filter(|r| still_skipped(r, settings.memory.max_file_bytes)),
        };
        match walk::stat_file(src, rel) {
            Some(f) => {
                let same_stat = stored
                    .as_ref()
                    .is_some_and(|r| r.mtime_ns == f.mtime_ns && r.size == f.size);
                let still_skipped = skipped
                    .as_ref()
                    .filter(|r| r.mtime_ns == f.mtime_ns && r.size == f.size);
                if same_stat {
                    run.report.files_unchanged += 1;
                } else if let Some(r) = still_skipped {
                    run.still_skipped(source, r);
                } else {
                    run.file(src, &f, stored.as_ref())?;
                }
            }
            None => {
                if stored.is_some() {
                    run.remove(source, rel)?;
                }
                run.store.forget_skipped(source, rel)?;
            }
        }
        run.tick()?;
    }
    run.finish(started)
}

impl<'a> Run<'a> {
    fn new(
        store: &'a mut dyn IndexStorage,
        settings: &'a MemoryConfig,
        embedder: Option<&'a dyn Embedder>,
        progress: &'a dyn Fn(Progress),
        worker: Option<EmbedWorker>,
    ) -> Result<Run<'a>, IndexError> {
        let model = embedder
            .map(|e| e.model_id().to_string())
            .unwrap_or_default();
        store.begin_group()?;
        Ok(Run {
            params: chunk_params(settings, embedder),
            store,
            settings,
            embedder,
            report: IndexReport {
                model: model.clone(),
                ..Default::default()
            },
            model,
            progress,
            group_started: Instant::now(),
            pending: Vec::new(),
            pending_texts: 0,
            worker,
            in_flight: None,
        })
    }

    /// Commit the open write group when it has been open long enough.
    fn tick(&mut self) -> Result<(), IndexError> {
        if self.group_started.elapsed() >= GROUP_COMMIT_INTERVAL {
            self.store.commit_group()?;
            self.store.begin_group()?;
            self.group_started = Instant::now();
        }
        Ok(())
    }

    fn finish(mut self, started: Instant) -> Result<IndexReport, IndexError> {
        self.settle()?;
        self.store
            .prune_cache(self.settings.memory.cache_max_entries)?;
        self.store
            .set_meta("last_index_at", &crate::store::now_unix().to_string())?;
        self.store.commit_group()?;
        self.report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(std::mem::take(&mut self.report))
    }

    fn issue(
        &mut self,
        source: &str,
        path: &str,
        message: &str,
        skipped: bool,
        reason: IssueReason,
    ) {
        if skipped {
            self.report.files_skipped += 1;
        }
        self.report.issues.push(IndexIssue {
            source: source.to_string(),
            path: path.to_string(),
            message: message.to_string(),
            skipped,
            reason,
        });
    }

    /// A file remembered as skipped, unchanged since: reported again, not read.
    fn still_skipped(&mut self, source: &str, r: &SkippedRecord) {
        let reason = IssueReason::parse(&r.reason).unwrap_or(IssueReason::Unreadable);
        self.issue(source, &r.path, &r.message, true, reason);
        if reason == IssueReason::TooBig {
            self.too_big(source, &r.path, r.size);
        }
    }

    /// Report a note left out for its size.
    fn too_big(&mut self, source: &str, path: &str, size: i64) {
        self.report.too_big.push(OversizedNote {
            source: source.to_string(),
            path: path.to_string(),
            size: size.max(0) as u64,
            limit: self.settings.memory.max_file_bytes,
        });
    }

    /// Leave a file out for a cause in the file itself and remember it with its
    /// stat (so it is not "new" again until it changes). What an earlier
    /// version of it put in the index goes: it no longer says what the file holds.
    fn skip_for_cause(
        &mut self,
        src: &SourceRoot,
        f: &DiskFile,
        stored: Option<&FileRecord>,
        reason: IssueReason,
        message: String,
    ) -> Result<(), IndexError> {
        self.issue(&src.name, &f.rel, &message, true, reason);
        if stored.is_some() {
            self.remove(&src.name, &f.rel)?;
        }
        self.store.mark_skipped(
            &src.name,
            &SkippedRecord {
                path: f.rel.clone(),
                mtime_ns: f.mtime_ns,
                size: f.size,
                reason: reason.as_str().to_string(),
                message,
            },
        )?;
        Ok(())
    }

    fn counter(&self) -> &dyn TokenCounter {
        match self.embedder {
            Some(e) => e.token_counter(),
            None => &ApproxCounter,
        }
    }

    fn remove(&mut self, source: &str, path: &str) -> Result<(), IndexError> {
        self.settle()?;
        let n = self.store.remove_file(source, path)?;
        self.report.files_removed += 1;
        self.report.chunks_removed += n;
        Ok(())
    }

    /// Index one new or changed file.
    fn file(
        &mut self,
        src: &SourceRoot,
        f: &DiskFile,
        stored: Option<&FileRecord>,
    ) -> Result<(), IndexError> {
        // A file is read against its stored record: one still pending is written first.
        let waiting = |p: &PendingWrite| p.source == src.name && p.record.path == f.rel;
        if self.pending.iter().any(waiting)
            || self
                .in_flight
                .as_ref()
                .is_some_and(|b| b.files.iter().any(waiting))
        {
            self.settle()?;
        }
        if f.size as u64 > self.settings.memory.max_file_bytes {
            let msg = format!(
                "skipped: {} is over the {} limit",
                human_bytes(f.size.max(0) as u64),
                human_bytes(self.settings.memory.max_file_bytes)
            );
            self.too_big(&src.name, &f.rel, f.size);
            return self.skip_for_cause(src, f, stored, IssueReason::TooBig, msg);
        }
        let bytes = match walk::read_source_file(src, &f.rel) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Deleted while we were indexing: it is gone, so drop what we had.
                if stored.is_some() {
                    self.remove(&src.name, &f.rel)?;
                }
                return Ok(());
            }
            Err(e) => {
                self.issue(
                    &src.name,
                    &f.rel,
                    &format!("skipped: cannot read: {e}"),
                    true,
                    IssueReason::Unreadable,
                );
                return Ok(());
            }
        };
        if src.kind == SourceKind::Sessions {
            return self.transcript(src, f, stored, &bytes);
        }
        let sha = sha256_hex(&bytes);
        if let Some(r) = stored
            && r.sha256 == sha
        {
            self.store
                .touch_file(&src.name, &f.rel, f.mtime_ns, f.size)?;
            self.report.files_unchanged += 1;
            return Ok(());
        }
        if bytes[..bytes.len().min(8192)].contains(&0) {
            return self.skip_for_cause(
                src,
                f,
                stored,
                IssueReason::Binary,
                "skipped: binary file (contains NUL bytes)".into(),
            );
        }
        let text = match std::str::from_utf8(&bytes) {
            Ok(t) => std::borrow::Cow::Borrowed(t),
            Err(_) => {
                self.issue(
                    &src.name,
                    &f.rel,
                    "not valid UTF-8: invalid bytes were replaced with U+FFFD",
                    false,
                    IssueReason::NonUtf8Content,
                );
                String::from_utf8_lossy(&bytes)
            }
        };
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        let text = redact(text);
        let chunks = chunk::chunk_markdown(&text, &self.params, self.counter());
        let note_time = note_time_from_path(&f.rel);
        let name = f.rel.rsplit('/').next().unwrap_or(&f.rel);
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        let contexts = chunk::contexts(&text, stem, &chunks);
        let pieces: Vec<Piece> = chunks
            .into_iter()
            .zip(contexts)
            .map(|(c, context)| Piece {
                start: c.start_line,
                end: c.end_line,
                text: c.text,
                context,
                note_time,
            })
            .collect();
        let record = FileRecord {
            source: src.name.clone(),
            path: f.rel.clone(),
            sha256: sha,
            mtime_ns: f.mtime_ns,
            size: f.size,
            indexed_bytes: f.size,
            indexed_lines: text.lines().count() as i64,
        };
        self.write(src, &record, pieces, WriteMode::Replace)
    }

    /// Index a session transcript: append-only from the last indexed offset when the
    /// already-indexed prefix is unchanged, else from scratch.
    fn transcript(
        &mut self,
        src: &SourceRoot,
        f: &DiskFile,
        stored: Option<&FileRecord>,
        bytes: &[u8],
    ) -> Result<(), IndexError> {
        let (mut from_byte, mut from_line, mut mode) = match stored {
            Some(r)
                if r.indexed_bytes as usize <= bytes.len()
                    && sha256_hex(&bytes[..r.indexed_bytes as usize]) == r.sha256 =>
            {
                (
                    r.indexed_bytes as usize,
                    r.indexed_lines as usize,
                    WriteMode::Append,
                )
            }
            _ => (0, 0, WriteMode::Replace),
        };
        // An answer after the indexed part completes the last exchange there,
        // chunked without it (live use: the user's line is indexed before the
        // answer arrives): that exchange is read again, so the chunks equal a
        // whole-file index's.
        let mut rechunk_from = None;
        if mode == WriteMode::Append
            && let Some((at, lines)) = trailing_exchange(&bytes[..from_byte], &bytes[from_byte..])
        {
            if self.store.removes_chunks_from() {
                rechunk_from = Some(lines + 1);
                (from_byte, from_line) = (at, lines);
            } else {
                (from_byte, from_line, mode) = (0, 0, WriteMode::Replace);
            }
        }
        let read = read_transcript(
            &bytes[from_byte..],
            from_line + 1,
            &self.params,
            self.counter(),
            &self.settings.zone,
        );
        if mode == WriteMode::Append && read.consumed_bytes == 0 {
            // Nothing new but a torn last line: just remember the stat.
            if stored.is_some() {
                self.store
                    .touch_file(&src.name, &f.rel, f.mtime_ns, f.size)?;
            }
            self.report.files_unchanged += 1;
            return Ok(());
        }
        let end = from_byte + read.consumed_bytes;
        let record = FileRecord {
            source: src.name.clone(),
            path: f.rel.clone(),
            sha256: sha256_hex(&bytes[..end]),
            mtime_ns: f.mtime_ns,
            size: f.size,
            indexed_bytes: end as i64,
            indexed_lines: (from_line + read.consumed_lines) as i64,
        };
        let pieces = read
            .chunks
            .into_iter()
            .map(|c| Piece {
                start: c.start_line,
                end: c.end_line,
                text: c.text,
                context: c.context,
                note_time: c.time,
            })
            .collect();
        self.write_from(src, &record, pieces, mode, rechunk_from)
    }

    /// Embed (cache first) and write one file's chunks in one transaction.
    fn write(
        &mut self,
        src: &SourceRoot,
        record: &FileRecord,
        pieces: Vec<Piece>,
        mode: WriteMode,
    ) -> Result<(), IndexError> {
        self.write_from(src, record, pieces, mode, None)
    }

    /// [`Self::write`], first dropping the file's chunks from line `rechunk_from`
    /// on (an appended transcript's trailing exchange, read again) once the new
    /// chunks are embedded. The chunks the cache lacks wait with the file for
    /// the next call of the model ([`EMBED_AHEAD`]).
    fn write_from(
        &mut self,
        src: &SourceRoot,
        record: &FileRecord,
        pieces: Vec<Piece>,
        mode: WriteMode,
        rechunk_from: Option<usize>,
    ) -> Result<(), IndexError> {
        // Chunks are embedded behind their context (the stored and shown text is
        // the chunk's own); the cache and the chunk id follow the embedded text.
        let embed_texts: Vec<Cow<'_, str>> = pieces
            .iter()
            .map(|p| chunk::embed_text(&p.context, &p.text))
            .collect();
        let hashes: Vec<String> = embed_texts
            .iter()
            .map(|t| sha256_hex(t.as_bytes()))
            .collect();
        let mut vectors: HashMap<String, Vec<f32>> = HashMap::new();
        let mut missing: Vec<(String, String)> = Vec::new();
        if let Some(e) = self.embedder {
            let refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
            vectors = self
                .store
                .cached_embeddings(e.provider(), e.model_id(), &refs)?;
            for (h, t) in hashes.iter().zip(&embed_texts) {
                if !vectors.contains_key(h) && !missing.iter().any(|(m, _)| m == h) {
                    missing.push((h.clone(), t.to_string()));
                }
            }
            self.report.cache_hits += hashes.len() - missing.len();
        }
        drop(embed_texts);
        let write = PendingWrite {
            source: src.name.clone(),
            record: record.clone(),
            pieces,
            hashes,
            missing,
            vectors,
            mode,
            rechunk_from,
        };
        if write.missing.is_empty() && self.pending.is_empty() && self.in_flight.is_none() {
            // Nothing to wait for (every vector cached, or keyword-only).
            return self.write_pending(write, 0);
        }
        self.pending_texts += write.missing.len();
        self.pending.push(write);
        // Bounded in texts and in files (files whose vectors are all cached
        // wait behind one that is not).
        if self.pending_texts >= EMBED_AHEAD || self.pending.len() >= EMBED_AHEAD {
            self.flush_writes()?;
        }
        Ok(())
    }

    /// Send the pending files' missing texts to the model (each distinct text
    /// once) and go on: the worker embeds them while this thread reads the next
    /// files. The batch sent before lands first: its vectors are awaited, and
    /// it is written while the new batch embeds. Files are written in order.
    fn flush_writes(&mut self) -> Result<(), IndexError> {
        let mut queued = std::mem::take(&mut self.pending);
        self.pending_texts = 0;
        let landed = match self.in_flight.take() {
            Some(batch) => self.land(batch)?,
            None => Landed::default(),
        };
        // A text the landed batch embedded is not embedded again: the file
        // finds it as in the cache.
        for p in &mut queued {
            let before = p.missing.len();
            p.missing.retain(|(h, _)| match landed.fresh.get(h) {
                Some(v) => {
                    p.vectors.insert(h.clone(), v.clone());
                    false
                }
                None => true,
            });
            self.report.cache_hits += before - p.missing.len();
        }
        let mut seen = std::collections::HashSet::new();
        let (hashes, texts): (Vec<String>, Vec<String>) = queued
            .iter()
            .flat_map(|p| p.missing.iter())
            .filter(|(h, _)| seen.insert(h.as_str()))
            .map(|(h, t)| (h.clone(), t.clone()))
            .unzip();
        let sent = match &self.worker {
            Some(w) if !texts.is_empty() => w.texts.send(texts).is_ok(),
            _ => false,
        };
        if sent {
            self.in_flight = Some(InFlight {
                files: queued,
                hashes,
            });
            queued = Vec::new();
        } else if !hashes.is_empty() {
            // No worker to take them (it stopped): embedded here, file by file.
            let fallback = self.embed_alone(queued)?;
            for (p, embedded) in landed.files.into_iter().chain(fallback) {
                self.write_pending(p, embedded)?;
            }
            return Ok(());
        }
        for (p, embedded) in landed.files {
            self.write_pending(p, embedded)?;
        }
        // Nothing to embed (keyword-only, or every vector found).
        for p in queued {
            self.write_pending(p, 0)?;
        }
        Ok(())
    }

    /// Write everything pending and in flight (before a removal, a file read
    /// again, or the end of the run).
    fn settle(&mut self) -> Result<(), IndexError> {
        self.flush_writes()?;
        if let Some(batch) = self.in_flight.take() {
            let landed = self.land(batch)?;
            for (p, embedded) in landed.files {
                self.write_pending(p, embedded)?;
            }
        }
        Ok(())
    }

    /// Await the worker's vectors for `batch` and give each file its own (the
    /// first file to need a text embedded it; later ones found it in the cache,
    /// as when each file was embedded on its own). When the call failed, each
    /// file is embedded on its own, so the failure is the issue of the files it
    /// belongs to and the others are written.
    fn land(&mut self, batch: InFlight) -> Result<Landed, IndexError> {
        let InFlight { files, hashes } = batch;
        let received = match &self.worker {
            Some(w) => w.vectors.recv().unwrap_or_else(|_| {
                Err(crate::embed::EmbedError::Inference(
                    "the embedding thread stopped".into(),
                ))
            }),
            None => Err(crate::embed::EmbedError::Inference(
                "no embedding thread".into(),
            )),
        };
        let (e, vs) = match (self.embedder, received) {
            (Some(e), Ok(vs)) if vs.len() == hashes.len() => (e, vs),
            _ => {
                return Ok(Landed {
                    files: self.embed_alone(files)?,
                    fresh: HashMap::new(),
                });
            }
        };
        let fresh: Vec<(String, Vec<f32>)> = hashes.into_iter().zip(vs).collect();
        self.store.put_cache(e.provider(), e.model_id(), &fresh)?;
        let fresh: HashMap<String, Vec<f32>> = fresh.into_iter().collect();
        let mut counted = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(files.len());
        for mut p in files {
            let mut embedded = 0;
            for (h, _) in &p.missing {
                if let Some(v) = fresh.get(h) {
                    p.vectors.insert(h.clone(), v.clone());
                }
                if counted.insert(h.clone()) {
                    embedded += 1;
                } else {
                    self.report.cache_hits += 1;
                }
            }
            out.push((p, embedded));
        }
        Ok(Landed { files: out, fresh })
    }

    /// Embed each file's missing texts in a call of its own, on this thread:
    /// the files whose call worked, with their counts; a failure is its file's
    /// issue (the file is skipped).
    fn embed_alone(
        &mut self,
        files: Vec<PendingWrite>,
    ) -> Result<Vec<(PendingWrite, usize)>, IndexError> {
        let mut out = Vec::new();
        let Some(e) = self.embedder else {
            return Ok(files.into_iter().map(|p| (p, 0)).collect());
        };
        for mut p in files {
            let (hashes, texts): (Vec<&str>, Vec<&str>) = p
                .missing
                .iter()
                .map(|(h, t)| (h.as_str(), t.as_str()))
                .unzip();
            let failure = match e.embed(&texts) {
                Ok(vs) if vs.len() == texts.len() => {
                    let fresh: Vec<(String, Vec<f32>)> =
                        hashes.iter().map(|h| h.to_string()).zip(vs).collect();
                    self.store.put_cache(e.provider(), e.model_id(), &fresh)?;
                    let embedded = fresh.len();
                    p.vectors.extend(fresh);
                    out.push((p, embedded));
                    continue;
                }
                Ok(vs) => format!(
                    "skipped: embedder returned {} vectors for {} texts",
                    vs.len(),
                    texts.len()
                ),
                Err(err) => format!("skipped: {err}"),
            };
            self.issue(
                &p.source,
                &p.record.path,
                &failure,
                true,
                IssueReason::EmbedFailed,
            );
        }
        Ok(out)
    }

    /// Write one file whose vectors are in (`embedded` of them computed for it).
    fn write_pending(&mut self, p: PendingWrite, embedded: usize) -> Result<(), IndexError> {
        let PendingWrite {
            source,
            record,
            pieces,
            hashes,
            vectors,
            mode,
            rechunk_from,
            ..
        } = p;
        let chunks: Vec<NewChunk> = pieces
            .into_iter()
            .zip(hashes)
            .map(|(p, hash)| NewChunk {
                id: chunk_id(&source, &record.path, p.start, p.end, &hash, &self.model),
                start_line: p.start,
                end_line: p.end,
                embedding: vectors.get(&hash).cloned(),
                hash,
                text: p.text,
                context: p.context,
                note_time: p.note_time,
            })
            .collect();
        let removed = match (mode, rechunk_from) {
            (WriteMode::Replace, _) => self.store.chunk_count(&source, &record.path)?,
            (WriteMode::Append, Some(line)) => {
                self.store.remove_chunks_from(&source, &record.path, line)?
            }
            (WriteMode::Append, None) => 0,
        };
        self.store.write_file(&record, &chunks, mode, &self.model)?;
        self.report.files_changed += 1;
        self.report.chunks_added += chunks.len();
        self.report.chunks_removed += removed;
        self.report.embeddings_computed += embedded;
        (self.progress)(Progress::File {
            chunks: chunks.len(),
            embedded,
        });
        Ok(())
    }
}
