//! The memory database: one SQLite file (`memory.sqlite`) owning files, chunks,
//! the FTS5 indexes, the sqlite-vec `vec0` indexes, the embedding cache and meta.
//! Schema comes from numbered files in `migrations/`; every write that touches a
//! file's rows is one transaction across all of those tables. A rebuild from
//! scratch is built in a second file and swapped in (`Store::rebuild_aside`;
//! the file steps and the `-wal`/`-shm` rules are `rebuild`'s): every open and
//! close of the database goes through that module's swap gate.
//!
//! Invariant: this module is blocking I/O. Call it from a dedicated thread or
//! `spawn_blocking`, never from an async task directly.

#![warn(missing_docs)]

use crate::index_storage::IndexStorage;
use crate::rebuild::file_id;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

/// Numbered migrations, applied in order; `PRAGMA user_version` records the last applied.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_init.sql")),
    (2, include_str!("../migrations/0002_source_symlinks.sql")),
    (3, include_str!("../migrations/0003_skipped_files.sql")),
    (4, include_str!("../migrations/0004_word_index.sql")),
    (5, include_str!("../migrations/0005_file_stamps.sql")),
    (6, include_str!("../migrations/0006_recalls.sql")),
    (7, include_str!("../migrations/0007_note_time.sql")),
];

/// A source's stat listing (`Store::stamp_listing`): read from the covering
/// index `files_stamps` alone (schema version 5), in path order.
const STAMP_LISTING: &str = "SELECT path, mtime, size FROM files WHERE source = ?1 ORDER BY path";

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// How long a statement waits for another connection's lock.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long recording recalls waits for another writer ([`Store::record_recalls`]):
/// a search never stalls behind an index run for its bookkeeping.
pub const RECALL_BUSY_TIMEOUT: Duration = Duration::from_millis(50);

/// Errors from the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "database {path} has schema version {found}, newer than this claw supports ({supported})"
    )]
    /// The file was written by a newer claw (higher `user_version`).
    NewerSchema {
        /// The file or directory concerned.
        path: PathBuf,
        /// The file's schema version.
        found: i64,
        /// This build's schema version.
        supported: i64,
    },
    #[error("cannot create state directory {path}: {source}")]
    /// The state directory could not be created.
    StateDir {
        /// The file or directory concerned.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error("cannot read or write the registered sources file {path}: {source}")]
    /// The sidecar keeping the registered sources beside the database
    /// (see `sidecar`) could not be read, parsed or written.
    Sidecar {
        /// The sidecar file.
        path: PathBuf,
        /// The I/O (or parse) error.
        source: std::io::Error,
    },
    #[error("cannot open, create or replace the database file {path}: {source}")]
    /// A file operation on the database itself failed: creating it, the swap
    /// gate, or swapping a rebuilt database in (see `rebuild`).
    DbFile {
        /// The file concerned.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error("the rebuilt database {path} could not be checkpointed (busy)")]
    /// The aside database of a rebuild still had WAL frames after its final
    /// checkpoint (it has one connection, so this means a bug).
    AsideBusy {
        /// The aside database.
        path: PathBuf,
    },
    #[error("database is busy (another process holds a write lock); try again in a moment")]
    /// Another connection holds a write lock past the busy timeout.
    Busy,
    #[error("sqlite: {0}")]
    /// Any other SQLite error.
    Sqlite(#[from] rusqlite::Error),
    #[error("io: {0}")]
    /// Any other I/O error.
    Io(#[from] std::io::Error),
    #[error("{0}")]
    /// An error of another storage backend (e.g. PostgreSQL, `claw-memory-pg`).
    Backend(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl StoreError {
    fn from_sqlite(e: rusqlite::Error) -> StoreError {
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy) | Some(rusqlite::ErrorCode::DatabaseLocked) => {
                StoreError::Busy
            }
            _ => StoreError::Sqlite(e),
        }
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Whether the sqlite-vec extension is usable on this connection.
#[derive(Debug, Clone, PartialEq)]
pub enum VecBackend {
    /// vec0 loaded; `version` is `vec_version()`.
    Vec0 {
        /// `vec_version()`.
        version: String,
    },
    /// vec0 could not be loaded; vectors are scanned in-process from `chunks.embedding`.
    Unavailable {
        /// Why it did not load.
        reason: String,
    },
}

impl VecBackend {
    /// Whether vec0 is usable.
    pub fn is_loaded(&self) -> bool {
        matches!(self, VecBackend::Vec0 { .. })
    }
}

/// The stored state of one indexed file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileRecord {
    /// The I/O error.
    pub source: String,
    /// The file or directory concerned.
    pub path: String,
    /// SHA-256 of the content, hex.
    pub sha256: String,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Size in bytes.
    pub size: i64,
    /// Transcripts: bytes and lines already indexed (0 for notes).
    pub indexed_bytes: i64,
    /// Transcripts: lines already indexed.
    pub indexed_lines: i64,
}

/// A chunk ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct NewChunk {
    /// Stable chunk id.
    pub id: String,
    /// First line, 1-based.
    pub start_line: usize,
    /// Last line, inclusive.
    pub end_line: usize,
    /// SHA-256 of the text embedded for the chunk (`chunk::embed_text`: its context,
    /// then its text); the embedding cache key.
    pub hash: String,
    /// The (redacted) chunk text.
    pub text: String,
    /// Where the chunk is: file title › heading path (`chunk::contexts`); empty for
    /// transcripts. The word index holds it before the text.
    pub context: String,
    /// Unix seconds used for temporal decay; `None` = evergreen.
    pub note_time: Option<i64>,
    /// Its vector, when embedded.
    pub embedding: Option<Vec<f32>>,
}

/// How a file's chunks are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Drop the file's old chunks and write the new ones.
    Replace,
    /// Keep the old chunks and add these (transcript appends).
    Append,
}

/// A registered notes folder.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SourceRecord {
    /// Source name.
    pub name: String,
    /// The folder.
    pub root: PathBuf,
    /// When it was registered (unix seconds).
    pub added_at: i64,
    /// Index files whose symlinks resolve outside `root` (off by default).
    pub follow_symlinks_outside: bool,
}

/// A file left out of the index for a cause in the file itself (table
/// `skipped_files`), with the stat it had then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedRecord {
    /// Path relative to the source root.
    pub path: String,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Size in bytes.
    pub size: i64,
    /// Why (`walk::IssueReason` as its name).
    pub reason: String,
    /// What the index report said.
    pub message: String,
}

/// A chunk a search returned, by its place (table `recalls`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct RecallHit {
    /// The source's name.
    pub source: String,
    /// Relative to the source root, '/'-separated.
    pub path: String,
    /// First line, 1-based.
    pub start_line: usize,
    /// Last line, inclusive.
    pub end_line: usize,
}

/// How often searches returned one chunk ([`Store::recall_rows`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecallRow {
    /// The chunk.
    #[serde(flatten)]
    pub hit: RecallHit,
    /// Searches that returned it.
    pub count: i64,
    /// Unix seconds of the first.
    pub first_at: i64,
    /// Unix seconds of the latest.
    pub last_at: i64,
}

/// One watcher process's heartbeat row (table `watcher`); times are unix seconds.
/// Serialised as the leading fields of a [`crate::watch::WatcherStatus`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WatcherRow {
    /// The watcher's process id.
    pub pid: i64,
    /// When it started.
    pub started_at: i64,
    /// Its last heartbeat.
    pub heartbeat: i64,
    /// When it last saw a relevant file event.
    pub last_event: Option<i64>,
    /// When it last finished a batch.
    pub last_sync: Option<i64>,
    /// Files waiting to be indexed at that heartbeat.
    pub pending: i64,
}

/// Counts for `claw memory status`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StoreStats {
    /// Indexed files.
    pub files: i64,
    /// Chunks.
    pub chunks: i64,
    /// Stored vectors.
    pub vectors: i64,
    /// Embedding cache entries.
    pub cache_entries: i64,
    /// Database plus WAL size in bytes.
    pub db_bytes: u64,
}

static REGISTER_VEC: Once = Once::new();

/// Register sqlite-vec (statically linked) as an auto-extension for every connection
/// this process opens.
#[allow(unsafe_code)] // one FFI call, justified below
pub fn register_sqlite_vec() {
    REGISTER_VEC.call_once(|| {
        // SAFETY: sqlite3_vec_init has the signature SQLite expects of an extension
        // entry point; sqlite3_auto_extension only stores the pointer.
        unsafe {
            rusqlite::ffi::sqlite3_auto_extension(Some(std::mem::transmute::<
                *const (),
                unsafe extern "C" fn(
                    *mut rusqlite::ffi::sqlite3,
                    *mut *mut std::os::raw::c_char,
                    *const rusqlite::ffi::sqlite3_api_routines,
                ) -> std::os::raw::c_int,
            >(
                sqlite_vec::sqlite3_vec_init as *const (),
            )));
        }
    });
}

/// Encode a vector as little-endian f32 bytes.
pub fn vec_to_blob(v: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len() * 4);
    for x in v {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Decode little-endian f32 bytes; `None` if the length is not a multiple of 4.
pub fn blob_to_vec(b: &[u8]) -> Option<Vec<f32>> {
    if !b.len().is_multiple_of(4) {
        return None;
    }
    Some(
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// Current unix time in seconds.
pub fn now_unix() -> i64 {
    crate::clock::Clock::System.now_unix()
}

/// A write unit: its own IMMEDIATE transaction, or — inside an open group (see
/// [`Store::begin_group`]) — the group's transaction itself. No savepoint per file:
/// FTS5 flushes its pending terms at every savepoint, which made small-file
/// indexing several times slower. A failed write inside a group aborts the whole
/// run, whose group is rolled back, so every file still ends fully old or new.
enum WriteTx<'a> {
    Transaction(rusqlite::Transaction<'a>),
    InGroup(&'a Connection),
}

impl std::ops::Deref for WriteTx<'_> {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        match self {
            WriteTx::Transaction(t) => t,
            WriteTx::InGroup(c) => c,
        }
    }
}

impl WriteTx<'_> {
    fn commit(self) -> rusqlite::Result<()> {
        match self {
            WriteTx::Transaction(t) => t.commit(),
            WriteTx::InGroup(_) => Ok(()),
        }
    }
}

/// The memory database.
pub struct Store {
    conn: Connection,
    path: PathBuf,
    vec: VecBackend,
    /// (device, inode) of the database file when it was opened.
    file_id: Option<(u64, u64)>,
    /// Whether sqlite-vec was asked for (a reopen asks the same).
    load_vec: bool,
    /// Whether `conn` closes under the swap gate (see `Drop`): the live
    /// database once opened; not a rebuild's aside copy, which is private to
    /// its writer, nor a store whose open failed while it held the gate.
    gated_close: bool,
    /// The swap gate held while `conn` closes. Declared after `conn`: fields
    /// drop in order, so the connection closes first.
    closing: Option<crate::rebuild::Gate>,
}

impl Drop for Store {
    /// Close under the swap gate (shared), so no swap runs between the check
    /// and the close; a replaced (or deleted) file closes without its final
    /// checkpoint, which would delete the `-wal`/`-shm` *names*, now perhaps
    /// the new file's (see `rebuild`).
    fn drop(&mut self) {
        if !self.gated_close {
            return;
        }
        self.closing = crate::rebuild::Gate::shared(&self.path).ok();
        if self.is_replaced() {
            let _ = self
                .conn
                .set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true);
        }
    }
}

impl Store {
    /// A connection to `path` as a `Store`, before migrations (not gated on close).
    fn unmigrated(path: &Path, load_vec: bool) -> Result<Store, StoreError> {
        let (conn, vec) = open_conn(path, load_vec)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            vec,
            file_id: file_id(path),
            load_vec,
            gated_close: false,
            closing: None,
        })
    }

    /// Open (creating if needed) the database at `path`, apply migrations, check vec0.
    pub fn open(path: &Path) -> Result<Store> {
        Self::open_with(path, true)
    }

    /// Open without loading sqlite-vec (to exercise the in-process fallback).
    pub fn open_without_vec(path: &Path) -> Result<Store> {
        Self::open_with(path, false)
    }

    fn open_with(path: &Path, load_vec: bool) -> Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            crate::private::create_dir_all(dir).map_err(|source| StoreError::StateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        // Held until the store is ready: no swap replaces the file meanwhile,
        // and an interrupted one is finished first (creates the file, 0600).
        let gate = crate::rebuild::open_gate(path)?;
        // An older claw (or a wide umask) may have left these readable by others.
        for suffix in ["", "-wal", "-shm"] {
            crate::private::tighten_file(&crate::rebuild::with_suffix(path, suffix))?;
        }
        // Not gated while this thread holds the gate: an error below drops it.
        let mut store = Store::unmigrated(path, load_vec)?;
        let before = store.migrate()?;
        crate::sidecar::reconcile(&store, before == 0)?;
        drop(gate);
        store.gated_close = true;
        Ok(store)
    }

    /// Open the database at the same path again, as it was opened (after
    /// [`Store::is_replaced`]: a rebuild swapped a new file in).
    pub fn reopen(&self) -> Result<Store> {
        Self::open_with(&self.path, self.load_vec)
    }

    /// Whether the database file at [`Store::path`] is no longer the one this
    /// connection opened (deleted, or replaced by another file): a dev+inode
    /// check, one `stat`.
    pub fn is_replaced(&self) -> bool {
        self.file_id.is_none() || file_id(&self.path) != self.file_id
    }

    /// Apply pending migrations; returns the schema version found before.
    fn migrate(&mut self) -> Result<i64> {
        let current: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if current > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: current,
                supported: SCHEMA_VERSION,
            });
        }
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
            let tx = self
                .conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(StoreError::from_sqlite)?;
            // Another process may have migrated while we waited for the lock.
            let now: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
            if now >= *version {
                continue;
            }
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", version)?;
            tx.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)",
                [version.to_string()],
            )?;
            tx.commit()?;
        }
        Ok(current)
    }

    /// The connection, for READ-ONLY queries by the search storage code
    /// (`search::engine`). Every statement that changes rows lives in this module:
    /// never `execute` an INSERT/UPDATE/DELETE through this handle.
    pub(crate) fn read(&self) -> &Connection {
        &self.conn
    }

    /// Alias of [`Store::read`] kept while `search/` moves over to it; read-only too.
    pub(crate) fn conn(&self) -> &Connection {
        self.read()
    }

    /// A second connection to the same file, opened `SQLITE_OPEN_READ_ONLY`, for
    /// inspection by tests, benches and diagnostics: SQLite itself refuses any
    /// write through it. It sees what is committed (WAL), not an open group.
    pub fn open_inspector(&self) -> Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        Ok(conn)
    }

    /// Set `PRAGMA mmap_size` on this connection (benches measure its effect on the
    /// vector scan; it changes no rows and no durability).
    pub fn set_mmap_size(&self, bytes: i64) -> Result<()> {
        self.conn.pragma_update(None, "mmap_size", bytes)?;
        Ok(())
    }

    /// Write (insert or refresh) the heartbeat row of the watcher `row.pid`.
    pub fn upsert_watcher(&self, row: &WatcherRow) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO watcher (pid, started_at, heartbeat, last_event, last_sync, pending)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(pid) DO UPDATE SET heartbeat = excluded.heartbeat,
                   last_event = excluded.last_event, last_sync = excluded.last_sync,
                   pending = excluded.pending",
                params![
                    row.pid,
                    row.started_at,
                    row.heartbeat,
                    row.last_event,
                    row.last_sync,
                    row.pending
                ],
            )
            .map_err(StoreError::from_sqlite)?;
        Ok(())
    }

    /// Remove the heartbeat row of watcher `pid`; returns whether one existed.
    pub fn delete_watcher(&self, pid: i64) -> Result<bool> {
        let n = self
            .conn
            .execute("DELETE FROM watcher WHERE pid = ?1", [pid])
            .map_err(StoreError::from_sqlite)?;
        Ok(n > 0)
    }

    /// The pids of every watcher heartbeat row.
    pub fn watcher_pids(&self) -> Result<Vec<i64>> {
        let mut stmt = self.conn.prepare("SELECT pid FROM watcher")?;
        let pids = stmt
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(pids)
    }

    /// The most recent watcher heartbeat row, if any.
    pub fn latest_watcher(&self) -> Result<Option<WatcherRow>> {
        Ok(self
            .conn
            .query_row(
                "SELECT pid, started_at, heartbeat, last_event, last_sync, pending
                 FROM watcher ORDER BY heartbeat DESC LIMIT 1",
                [],
                |r| {
                    Ok(WatcherRow {
                        pid: r.get(0)?,
                        started_at: r.get(1)?,
                        heartbeat: r.get(2)?,
                        last_event: r.get(3)?,
                        last_sync: r.get(4)?,
                        pending: r.get(5)?,
                    })
                },
            )
            .optional()?)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether sqlite-vec is usable on this connection.
    pub fn vec_backend(&self) -> &VecBackend {
        &self.vec
    }

    /// Start a group: the following file writes share one transaction until
    /// [`Store::commit_group`]. A crash (or an error, after [`Store::rollback_group`])
    /// before the commit leaves every file of the group fully old.
    pub fn begin_group(&mut self) -> Result<()> {
        if self.conn.is_autocommit() {
            self.conn
                .execute_batch("BEGIN IMMEDIATE")
                .map_err(StoreError::from_sqlite)?;
        }
        Ok(())
    }

    /// Commit the open group, if any.
    pub fn commit_group(&mut self) -> Result<()> {
        if !self.conn.is_autocommit() {
            self.conn.execute_batch("COMMIT")?;
        }
        Ok(())
    }

    /// Abandon the open group, if any (its files stay as they were before it).
    pub fn rollback_group(&mut self) {
        if !self.conn.is_autocommit() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }

    fn begin_write(&mut self) -> Result<WriteTx<'_>> {
        if self.conn.is_autocommit() {
            Ok(WriteTx::Transaction(
                self.conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(StoreError::from_sqlite)?,
            ))
        } else {
            Ok(WriteTx::InGroup(&self.conn))
        }
    }

    /// Read a meta value.
    pub fn meta(&self, key: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
            .optional()?)
    }

    /// Write a meta value.
    pub fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?1, ?2)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            params![key, value],
        )?;
        Ok(())
    }

    /// Dimension of the vec0 tables, if created.
    pub fn vec_dims(&self) -> Result<Option<usize>> {
        Ok(self
            .meta("dims")?
            .and_then(|d| d.parse().ok())
            .filter(|d| *d > 0))
    }

    /// Whether the vec0 tables exist in this file.
    pub fn has_vec_tables(&self) -> Result<bool> {
        Ok(self
            .conn
            .query_row(
                "SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'",
                [],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    /// Drop every indexed row (files, chunks, FTS, vectors) and set the index identity
    /// (model, dims, chunker version) — used when it changed or on `--force`.
    /// The embedding cache survives: it is keyed by model.
    pub fn reset_index(&mut self, model: &str, dims: usize, chunker_version: &str) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from_sqlite)?;
        tx.execute_batch(
            "DROP TRIGGER IF EXISTS chunks_vec_ad;
             DROP TABLE IF EXISTS chunks_vec;
             DROP TABLE IF EXISTS chunks_vec_bit;
             DELETE FROM chunks;
             DELETE FROM files;
             DELETE FROM skipped_files;
             INSERT INTO chunks_fts (chunks_fts) VALUES ('delete-all');
             INSERT INTO chunks_trigram (chunks_trigram) VALUES ('rebuild');",
        )?;
        if dims > 0 && self.vec.is_loaded() {
            create_vec_tables(&tx, dims)?;
        }
        for (k, v) in [
            ("model", model.to_string()),
            ("dims", dims.to_string()),
            ("chunker_version", chunker_version.to_string()),
        ] {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES (?1, ?2)
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                params![k, v],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Rebuild the index from scratch beside the live database and swap it in
    /// (the design, and why readers stay safe, is in `rebuild`'s doc). A new
    /// database at `<db>.rebuild` (0600) starts with this one's embedding
    /// cache and registered sources and the identity (`model`, `dims`,
    /// `chunker_version`); `fill` runs the full indexing pass over it; then one
    /// `rename(2)` puts it in place of the live file and this store is
    /// connected to it. When `fill` fails, the aside database is removed and
    /// the live one was never written. The caller holds the writer lock.
    pub fn rebuild_aside(
        &mut self,
        model: &str,
        dims: usize,
        chunker_version: &str,
        fill: &mut dyn FnMut(&mut dyn IndexStorage) -> Result<()>,
    ) -> Result<()> {
        let aside_path = crate::rebuild::aside_path(&self.path);
        crate::rebuild::discard_aside(&self.path)?;
        let mut aside = Store::create_aside(&aside_path, self.load_vec)?;
        let live = &self.conn;
        let built = (|| {
            aside.copy_cache_from(live)?;
            aside.copy_sources_from(live)?;
            aside.reset_index(model, dims, chunker_version)?;
            fill(&mut aside)?;
            // Folders registered or removed while the pass ran.
            aside.copy_sources_from(live)?;
            // Usage data survives the rebuild (recalls counted during the
            // swap itself are lost: they are a ranking hint, not a record).
            aside.copy_recalls_from(live)?;
            aside.checkpoint_for_swap()
        })();
        // Its last connection closes: SQLite removes its `-wal`/`-shm`.
        drop(aside);
        if let Err(e) = built {
            let _ = crate::rebuild::discard_aside(&self.path);
            return Err(e);
        }
        self.swap_in(&aside_path)
    }

    /// A rebuild's aside database at `path`, created here (fails when the file
    /// exists: stale ones are discarded first).
    fn create_aside(path: &Path, load_vec: bool) -> Result<Store> {
        let file_err = |source| StoreError::DbFile {
            path: path.to_path_buf(),
            source,
        };
        crate::private::file_options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(file_err)?;
        let mut store = Store::unmigrated(path, load_vec)?;
        store.migrate()?;
        Ok(store)
    }

    /// Copy the embedding cache of the database `live` into this (new) one, so
    /// a rebuild with the same model embeds nothing the cache had.
    fn copy_cache_from(&mut self, live: &Connection) -> Result<usize> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from_sqlite)?;
        let mut copied = 0;
        {
            let mut read = live.prepare(
                "SELECT provider, model, hash, embedding, dims, updated_at FROM embedding_cache",
            )?;
            let mut ins = tx.prepare(
                "INSERT OR IGNORE INTO embedding_cache
                   (provider, model, hash, embedding, dims, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            let mut rows = read.query([])?;
            while let Some(r) = rows.next()? {
                copied += ins.execute(params![
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, Vec<u8>>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?
                ])?;
            }
        }
        tx.commit()?;
        Ok(copied)
    }

    /// Make this (new) database's registered sources those of `live`.
    fn copy_sources_from(&mut self, live: &Connection) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from_sqlite)?;
        tx.execute("DELETE FROM sources", [])?;
        {
            let mut read =
                live.prepare("SELECT name, root, added_at, follow_symlinks_outside FROM sources")?;
            let mut ins = tx.prepare(
                "INSERT INTO sources (name, root, added_at, follow_symlinks_outside)
                 VALUES (?1, ?2, ?3, ?4)",
            )?;
            let mut rows = read.query([])?;
            while let Some(r) = rows.next()? {
                ins.execute(params![
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Make this (new) database's recall counts those of `live`.
    fn copy_recalls_from(&mut self, live: &Connection) -> Result<()> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from_sqlite)?;
        tx.execute("DELETE FROM recalls", [])?;
        {
            let mut read = live.prepare(
                "SELECT source, path, start_line, end_line, count, first_at, last_at FROM recalls",
            )?;
            let mut ins = tx.prepare(
                "INSERT INTO recalls (source, path, start_line, end_line, count, first_at, last_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            let mut rows = read.query([])?;
            while let Some(r) = rows.next()? {
                ins.execute(params![
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                    r.get::<_, i64>(6)?
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Move every WAL frame of this (aside) database into its file and empty
    /// the WAL, so the file stands alone once its connection closes.
    fn checkpoint_for_swap(&self) -> Result<()> {
        let busy: i64 = self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
        if busy != 0 {
            return Err(StoreError::AsideBusy {
                path: self.path.clone(),
            });
        }
        Ok(())
    }

    /// Put the finished aside database `aside` in place of this store's file
    /// and connect to it (the steps and their order: `rebuild`'s doc).
    fn swap_in(&mut self, aside: &Path) -> Result<()> {
        use crate::rebuild;
        rebuild::sync_aside(aside)?;
        let new_id = file_id(aside).ok_or_else(|| StoreError::DbFile {
            path: aside.to_path_buf(),
            source: std::io::ErrorKind::NotFound.into(),
        })?;
        let _gate = rebuild::Gate::exclusive(&self.path).map_err(|source| StoreError::DbFile {
            path: rebuild::gate_path(&self.path),
            source,
        })?;
        rebuild::write_marker(&self.path, new_id)?;
        // Our connection to the old file closes first: were it that file's
        // last, SQLite deletes the old `-wal`/`-shm` names now, while they are
        // still the old file's.
        let placeholder = Connection::open_in_memory()?;
        drop(std::mem::replace(&mut self.conn, placeholder));
        if let Err(e) = rebuild::rename_in(aside, &self.path) {
            // Nothing was swapped: back to the live file.
            rebuild::abandon_swap(&self.path)?;
            let (conn, vec) = open_conn(&self.path, self.load_vec)?;
            self.conn = conn;
            self.vec = vec;
            return Err(e);
        }
        rebuild::finish_rename(&self.path)?;
        let (conn, vec) = open_conn(&self.path, self.load_vec)?;
        self.conn = conn;
        self.vec = vec;
        self.file_id = file_id(&self.path);
        Ok(())
    }

    /// Stored file states of one source, keyed by relative path.
    pub fn file_records(&self, source: &str) -> Result<HashMap<String, FileRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT source, path, sha256, mtime, size, indexed_bytes, indexed_lines
             FROM files WHERE source = ?1",
        )?;
        let rows = stmt.query_map([source], row_to_file)?;
        let mut out = HashMap::new();
        for r in rows {
            let r = r?;
            out.insert(r.path.clone(), r);
        }
        Ok(out)
    }

    /// The stat of every stored file of one source, keyed by relative path:
    /// the lean listing the freshness check compares the disk with (no hash,
    /// no per-row source string).
    pub fn file_stamps(&self, source: &str) -> Result<HashMap<String, crate::walk::Stamp>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT path, mtime, size FROM files WHERE source = ?1")?;
        let mut rows = stmt.query([source])?;
        let mut out = HashMap::new();
        while let Some(r) = rows.next()? {
            let path = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            let stamp = crate::walk::Stamp {
                mtime_ns: r.get(1)?,
                size: r.get(2)?,
            };
            out.insert(path.to_owned(), stamp);
        }
        Ok(out)
    }

    /// [`Store::file_stamps`] as one buffer, sorted by path (the primary key's
    /// order): no allocation per row, for the freshness check's merge.
    pub fn stamp_listing(&self, source: &str) -> Result<crate::walk::StampList> {
        let mut stmt = self.conn.prepare_cached(STAMP_LISTING)?;
        let mut rows = stmt.query([source])?;
        let mut out = crate::walk::StampList::new();
        while let Some(r) = rows.next()? {
            let path = r.get_ref(0)?.as_str().map_err(rusqlite::Error::from)?;
            let stamp = crate::walk::Stamp {
                mtime_ns: r.get(1)?,
                size: r.get(2)?,
            };
            out.push(path, stamp);
        }
        // SQLite orders TEXT by its bytes, as `str` does; make sure of it.
        if !out.is_sorted_by_path() {
            out.sort_by_path();
        }
        Ok(out)
    }

    /// One stored file state.
    pub fn file_record(&self, source: &str, path: &str) -> Result<Option<FileRecord>> {
        Ok(self
            .conn
            .query_row(
                "SELECT source, path, sha256, mtime, size, indexed_bytes, indexed_lines
                 FROM files WHERE source = ?1 AND path = ?2",
                params![source, path],
                row_to_file,
            )
            .optional()?)
    }

    /// Names of every source that has indexed files.
    pub fn indexed_sources(&self) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare("SELECT DISTINCT source FROM files")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Write one file's new state and chunks in one transaction.
    pub fn write_file(
        &mut self,
        file: &FileRecord,
        chunks: &[NewChunk],
        mode: WriteMode,
        model: &str,
    ) -> Result<()> {
        let now = now_unix();
        let has_vec = self.vec.is_loaded() && self.has_vec_tables()?;
        let has_bit = has_vec && self.vec_dims()?.is_some_and(|d| d.is_multiple_of(8));
        let tx = self.begin_write()?;
        if mode == WriteMode::Replace {
            tx.execute(
                "DELETE FROM chunks WHERE source = ?1 AND path = ?2",
                params![file.source, file.path],
            )?;
        }
        {
            let mut ins = tx.prepare_cached(
                "INSERT OR REPLACE INTO chunks
                 (id, source, path, start_line, end_line, hash, model, text, updated_at, note_time,
                  embedding, context)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?;
            // The word index is contentless: its text is made here (see `crate::words`).
            let mut ins_words =
                tx.prepare_cached("INSERT INTO chunks_fts (rowid, words) VALUES (?1, ?2)")?;
            let mut ins_vec = if has_vec {
                Some(
                    tx.prepare_cached("INSERT INTO chunks_vec (rowid, embedding) VALUES (?1, ?2)")?,
                )
            } else {
                None
            };
            let mut ins_bit = if has_bit {
                Some(tx.prepare_cached(
                    "INSERT INTO chunks_vec_bit (rowid, embedding) VALUES (?1, vec_quantize_binary(?2))",
                )?)
            } else {
                None
            };
            for c in chunks {
                let blob = c.embedding.as_deref().map(vec_to_blob);
                ins.execute(params![
                    c.id,
                    file.source,
                    file.path,
                    c.start_line as i64,
                    c.end_line as i64,
                    c.hash,
                    model,
                    c.text,
                    now,
                    c.note_time,
                    blob,
                    c.context
                ])?;
                let rowid = tx.last_insert_rowid();
                ins_words.execute(params![
                    rowid,
                    crate::words::index_words(&c.context, &c.text)
                ])?;
                if let Some(blob) = &blob {
                    if let Some(s) = ins_vec.as_mut() {
                        s.execute(params![rowid, blob])?;
                    }
                    if let Some(s) = ins_bit.as_mut() {
                        s.execute(params![rowid, blob])?;
                    }
                }
            }
        }
        tx.execute(
            "INSERT INTO files (source, path, sha256, mtime, size, indexed_at, indexed_bytes, indexed_lines)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT(source, path) DO UPDATE SET sha256 = excluded.sha256, mtime = excluded.mtime,
               size = excluded.size, indexed_at = excluded.indexed_at,
               indexed_bytes = excluded.indexed_bytes, indexed_lines = excluded.indexed_lines",
            params![
                file.source,
                file.path,
                file.sha256,
                file.mtime_ns,
                file.size,
                now,
                file.indexed_bytes,
                file.indexed_lines
            ],
        )?;
        tx.execute(
            "DELETE FROM skipped_files WHERE source = ?1 AND path = ?2",
            params![file.source, file.path],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Remember that a file was skipped for a cause in the file itself, with its
    /// stat (replacing an earlier record).
    pub fn mark_skipped(&self, source: &str, rec: &SkippedRecord) -> Result<()> {
        self.conn.execute(
            "INSERT INTO skipped_files (source, path, mtime, size, reason, message, skipped_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT(source, path) DO UPDATE SET mtime = excluded.mtime,
               size = excluded.size, reason = excluded.reason, message = excluded.message,
               skipped_at = excluded.skipped_at",
            params![
                source,
                rec.path,
                rec.mtime_ns,
                rec.size,
                rec.reason,
                rec.message,
                now_unix()
            ],
        )?;
        Ok(())
    }

    /// Forget a skipped file (gone from disk). Returns whether a record existed.
    pub fn forget_skipped(&self, source: &str, path: &str) -> Result<bool> {
        let n = self.conn.execute(
            "DELETE FROM skipped_files WHERE source = ?1 AND path = ?2",
            params![source, path],
        )?;
        Ok(n > 0)
    }

    /// The skipped files of one source, keyed by relative path.
    pub fn skipped_records(&self, source: &str) -> Result<HashMap<String, SkippedRecord>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT path, mtime, size, reason, message FROM skipped_files WHERE source = ?1",
        )?;
        let rows = stmt.query_map([source], row_to_skipped)?;
        let mut out = HashMap::new();
        for r in rows {
            let r = r?;
            out.insert(r.path.clone(), r);
        }
        Ok(out)
    }

    /// One skipped file's record.
    pub fn skipped_record(&self, source: &str, path: &str) -> Result<Option<SkippedRecord>> {
        Ok(self
            .conn
            .query_row(
                "SELECT path, mtime, size, reason, message FROM skipped_files
                 WHERE source = ?1 AND path = ?2",
                params![source, path],
                row_to_skipped,
            )
            .optional()?)
    }

    /// How many files are remembered as skipped.
    pub fn skipped_count(&self) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM skipped_files", [], |r| r.get(0))?)
    }

    /// Update only the stat fields of a file whose content hash did not change.
    pub fn touch_file(&self, source: &str, path: &str, mtime_ns: i64, size: i64) -> Result<()> {
        self.conn.execute(
            "UPDATE files SET mtime = ?3, size = ?4 WHERE source = ?1 AND path = ?2",
            params![source, path, mtime_ns, size],
        )?;
        Ok(())
    }

    /// Remove a file and all of its rows, in one transaction. Returns chunks removed.
    pub fn remove_file(&mut self, source: &str, path: &str) -> Result<usize> {
        let tx = self.begin_write()?;
        let n = tx.execute(
            "DELETE FROM chunks WHERE source = ?1 AND path = ?2",
            params![source, path],
        )?;
        tx.execute(
            "DELETE FROM files WHERE source = ?1 AND path = ?2",
            params![source, path],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// Drop a file's chunks that start at or after 1-based `line`. Returns how many.
    pub fn remove_chunks_from(&mut self, source: &str, path: &str, line: usize) -> Result<usize> {
        let tx = self.begin_write()?;
        let n = tx.execute(
            "DELETE FROM chunks WHERE source = ?1 AND path = ?2 AND start_line >= ?3",
            params![source, path, line as i64],
        )?;
        tx.commit()?;
        Ok(n)
    }

    /// Count the chunks a file currently has.
    pub fn chunk_count(&self, source: &str, path: &str) -> Result<usize> {
        let n: i64 = self.conn.query_row(
            "SELECT count(*) FROM chunks WHERE source = ?1 AND path = ?2",
            params![source, path],
            |r| r.get(0),
        )?;
        Ok(n as usize)
    }

    /// Look up cached embeddings by text hash: first the cache table, then chunks
    /// already stored with the same text and model. Returns hash -> vector.
    pub fn cached_embeddings(
        &self,
        provider: &str,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>> {
        let mut out = HashMap::new();
        let mut q = self.conn.prepare_cached(
            "SELECT embedding FROM embedding_cache WHERE provider = ?1 AND model = ?2 AND hash = ?3",
        )?;
        let mut q2 = self.conn.prepare_cached(
            "SELECT embedding FROM chunks WHERE hash = ?1 AND model = ?2 AND embedding IS NOT NULL LIMIT 1",
        )?;
        for h in hashes {
            if out.contains_key(*h) {
                continue;
            }
            let blob: Option<Vec<u8>> = q
                .query_row(params![provider, model, h], |r| r.get(0))
                .optional()?;
            let blob = match blob {
                Some(b) => Some(b),
                None => q2.query_row(params![h, model], |r| r.get(0)).optional()?,
            };
            if let Some(v) = blob.as_deref().and_then(blob_to_vec) {
                out.insert(h.to_string(), v);
            }
        }
        Ok(out)
    }

    /// Store embeddings in the cache (hash -> vector).
    pub fn put_cache(
        &mut self,
        provider: &str,
        model: &str,
        entries: &[(String, Vec<f32>)],
    ) -> Result<()> {
        let now = now_unix();
        let tx = self.begin_write()?;
        {
            let mut ins = tx.prepare_cached(
                "INSERT INTO embedding_cache (provider, model, hash, embedding, dims, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT(provider, model, hash) DO UPDATE SET updated_at = excluded.updated_at",
            )?;
            for (h, v) in entries {
                ins.execute(params![
                    provider,
                    model,
                    h,
                    vec_to_blob(v),
                    v.len() as i64,
                    now
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Keep at most `max` cache entries, dropping the oldest. Returns entries removed.
    pub fn prune_cache(&self, max: usize) -> Result<usize> {
        let n: i64 = self
            .conn
            .query_row("SELECT count(*) FROM embedding_cache", [], |r| r.get(0))?;
        let excess = n - max as i64;
        if excess <= 0 {
            return Ok(0);
        }
        Ok(self.conn.execute(
            "DELETE FROM embedding_cache WHERE (provider, model, hash) IN (
                 SELECT provider, model, hash FROM embedding_cache ORDER BY updated_at ASC LIMIT ?1)",
            [excess],
        )?)
    }

    /// Register a notes folder.
    pub fn add_source(&self, name: &str, root: &Path) -> Result<()> {
        self.conn.execute(
            "INSERT INTO sources (name, root, added_at) VALUES (?1, ?2, ?3)",
            params![name, root.to_string_lossy(), now_unix()],
        )?;
        crate::sidecar::save(self)?;
        Ok(())
    }

    /// Point a registered source at another folder (its files' paths are
    /// relative to the root, so they stay valid when the folder moved).
    /// Returns false when no source has that name.
    pub fn set_source_root(&self, name: &str, root: &Path) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE sources SET root = ?2 WHERE name = ?1",
            params![name, root.to_string_lossy()],
        )?;
        crate::sidecar::save(self)?;
        Ok(n > 0)
    }

    /// Let a registered source follow symlinks that resolve outside its root.
    /// Returns false when no source has that name.
    pub fn set_source_follow_symlinks_outside(&self, name: &str, follow: bool) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE sources SET follow_symlinks_outside = ?2 WHERE name = ?1",
            params![name, follow as i64],
        )?;
        crate::sidecar::save(self)?;
        Ok(n > 0)
    }

    /// Put sources read back from the sidecar into a database just created
    /// (names or roots already present are left alone).
    pub(crate) fn restore_sources(&self, sources: &[SourceRecord]) -> Result<()> {
        for s in sources {
            self.conn.execute(
                "INSERT OR IGNORE INTO sources (name, root, added_at, follow_symlinks_outside)
                 VALUES (?1, ?2, ?3, ?4)",
                params![
                    s.name,
                    s.root.to_string_lossy(),
                    s.added_at,
                    s.follow_symlinks_outside as i64
                ],
            )?;
        }
        Ok(())
    }

    /// Registered notes folders, by name.
    pub fn sources(&self) -> Result<Vec<SourceRecord>> {
        let mut stmt = self.conn.prepare(
            "SELECT name, root, added_at, follow_symlinks_outside FROM sources ORDER BY name",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok(SourceRecord {
                name: r.get(0)?,
                root: PathBuf::from(r.get::<_, String>(1)?),
                added_at: r.get(2)?,
                follow_symlinks_outside: r.get::<_, i64>(3)? != 0,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Drop a source and all of its rows. Returns (files, chunks) removed, or None if unknown.
    pub fn remove_source(&mut self, name: &str) -> Result<Option<(usize, usize)>> {
        let tx = self
            .conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(StoreError::from_sqlite)?;
        let n = tx.execute("DELETE FROM sources WHERE name = ?1", [name])?;
        if n == 0 {
            return Ok(None);
        }
        let chunks = tx.execute("DELETE FROM chunks WHERE source = ?1", [name])?;
        let files = tx.execute("DELETE FROM files WHERE source = ?1", [name])?;
        tx.execute("DELETE FROM skipped_files WHERE source = ?1", [name])?;
        tx.commit()?;
        crate::sidecar::save(self)?;
        Ok(Some((files, chunks)))
    }

    /// Count one recall of each of `hits` at `at` (unix seconds), in one
    /// transaction that waits at most [`RECALL_BUSY_TIMEOUT`] for another
    /// writer ([`StoreError::Busy`] then: the caller keeps them for later).
    pub fn record_recalls(&self, hits: &[(RecallHit, i64)], at: i64) -> Result<()> {
        if hits.is_empty() {
            return Ok(());
        }
        self.conn.busy_timeout(RECALL_BUSY_TIMEOUT)?;
        let res = (|| -> Result<()> {
            let tx = rusqlite::Transaction::new_unchecked(
                &self.conn,
                rusqlite::TransactionBehavior::Immediate,
            )
            .map_err(StoreError::from_sqlite)?;
            {
                let mut up = tx.prepare_cached(
                    "INSERT INTO recalls (source, path, start_line, end_line, count, first_at, last_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
                     ON CONFLICT (source, path, start_line, end_line) DO UPDATE SET
                       count = count + excluded.count,
                       last_at = max(last_at, excluded.last_at)",
                )?;
                for (h, n) in hits {
                    up.execute(params![
                        h.source,
                        h.path,
                        h.start_line as i64,
                        h.end_line as i64,
                        n,
                        at
                    ])
                    .map_err(StoreError::from_sqlite)?;
                }
            }
            tx.commit().map_err(StoreError::from_sqlite)
        })();
        self.conn.busy_timeout(BUSY_TIMEOUT)?;
        res
    }

    /// The recall counts of the chunks of `paths` in `source` (every file of it
    /// when `paths` is empty), by path and line.
    pub fn recall_rows(&self, source: &str, paths: &[String]) -> Result<Vec<RecallRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT source, path, start_line, end_line, count, first_at, last_at
             FROM recalls WHERE source = ?1 ORDER BY path, start_line, end_line",
        )?;
        let rows = stmt.query_map([source], |r| {
            Ok(RecallRow {
                hit: RecallHit {
                    source: r.get(0)?,
                    path: r.get(1)?,
                    start_line: r.get::<_, i64>(2)?.max(0) as usize,
                    end_line: r.get::<_, i64>(3)?.max(0) as usize,
                },
                count: r.get(4)?,
                first_at: r.get(5)?,
                last_at: r.get(6)?,
            })
        })?;
        let mut out = Vec::new();
        for r in rows {
            let r = r?;
            if paths.is_empty() || paths.contains(&r.hit.path) {
                out.push(r);
            }
        }
        Ok(out)
    }

    /// Forget the recalls last seen before `before` (unix seconds); how many.
    pub fn prune_recalls(&self, before: i64) -> Result<usize> {
        self.conn
            .execute("DELETE FROM recalls WHERE last_at < ?1", [before])
            .map_err(StoreError::from_sqlite)
    }

    /// Row counts and file size.
    pub fn stats(&self) -> Result<StoreStats> {
        let count = |sql: &str| -> Result<i64> { Ok(self.conn.query_row(sql, [], |r| r.get(0))?) };
        let vectors = if self.vec.is_loaded() && self.has_vec_tables()? {
            count("SELECT count(*) FROM chunks_vec")?
        } else {
            count("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL")?
        };
        let db_bytes = [self.path.clone(), wal_path(&self.path)]
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        Ok(StoreStats {
            files: count("SELECT count(*) FROM files")?,
            chunks: count("SELECT count(*) FROM chunks")?,
            vectors,
            cache_entries: count("SELECT count(*) FROM embedding_cache")?,
            db_bytes,
        })
    }

    /// `PRAGMA integrity_check` plus the cross-table invariants: every chunk has its
    /// FTS rows and (when embedded and vec0 exists) its vector rows, and no
    /// chunk exists without a file row. Returns a list of problems (empty = ok).
    pub fn check_consistency(&self) -> Result<Vec<String>> {
        let mut problems = Vec::new();
        let ic: String = self
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if ic != "ok" {
            problems.push(format!("integrity_check: {ic}"));
        }
        let count = |sql: &str| -> Result<i64> { Ok(self.conn.query_row(sql, [], |r| r.get(0))?) };
        let orphans = count(
            "SELECT count(*) FROM chunks c WHERE NOT EXISTS
               (SELECT 1 FROM files f WHERE f.source = c.source AND f.path = c.path)",
        )?;
        if orphans > 0 {
            problems.push(format!("{orphans} chunks without a file row"));
        }
        // FTS5 integrity: 'integrity-check' checks the index's own structures and, for the
        // external-content trigram index, compares it with `chunks`; the contentless word
        // index must hold one row per chunk.
        let chunk_rows = count("SELECT count(*) FROM chunks")?;
        let word_rows = count("SELECT count(*) FROM chunks_fts")?;
        if word_rows != chunk_rows {
            problems.push(format!(
                "chunks_fts: {word_rows} rows for {chunk_rows} chunks"
            ));
        }
        for t in ["chunks_fts", "chunks_trigram"] {
            if let Err(e) = self.conn.execute(
                &format!("INSERT INTO {t} ({t}, rank) VALUES ('integrity-check', 1)"),
                [],
            ) {
                problems.push(format!("{t}: {e}"));
            }
        }
        if self.vec.is_loaded() && self.has_vec_tables()? {
            let embedded = count("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL")?;
            let vecs = count("SELECT count(*) FROM chunks_vec")?;
            if vecs != embedded {
                problems.push(format!("{vecs} vectors for {embedded} embedded chunks"));
            }
            let missing = count(
                "SELECT count(*) FROM chunks c WHERE c.embedding IS NOT NULL AND NOT EXISTS
                   (SELECT 1 FROM chunks_vec v WHERE v.rowid = c.rowid)",
            )?;
            if missing > 0 {
                problems.push(format!("{missing} embedded chunks without a vec0 row"));
            }
        }
        Ok(problems)
    }
}

fn row_to_skipped(r: &rusqlite::Row<'_>) -> rusqlite::Result<SkippedRecord> {
    Ok(SkippedRecord {
        path: r.get(0)?,
        mtime_ns: r.get(1)?,
        size: r.get(2)?,
        reason: r.get(3)?,
        message: r.get(4)?,
    })
}

/// A `files` row read as `source, path, sha256, mtime, size, indexed_bytes,
/// indexed_lines` (also how the PostgreSQL migration reads an SQLite index).
pub fn row_to_file(r: &rusqlite::Row<'_>) -> rusqlite::Result<FileRecord> {
    Ok(FileRecord {
        source: r.get(0)?,
        path: r.get(1)?,
        sha256: r.get(2)?,
        mtime_ns: r.get(3)?,
        size: r.get(4)?,
        indexed_bytes: r.get(5)?,
        indexed_lines: r.get(6)?,
    })
}

fn create_vec_tables(conn: &Connection, dims: usize) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec USING vec0 (
             embedding float[{dims}] distance_metric=cosine
         );"
    ))?;
    let mut trigger = String::from(
        "CREATE TRIGGER IF NOT EXISTS chunks_vec_ad AFTER DELETE ON chunks BEGIN
             DELETE FROM chunks_vec WHERE rowid = old.rowid;",
    );
    if dims.is_multiple_of(8) {
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_vec_bit USING vec0 (embedding bit[{dims}]);"
        ))?;
        trigger.push_str(" DELETE FROM chunks_vec_bit WHERE rowid = old.rowid;");
    }
    trigger.push_str(" END;");
    conn.execute_batch(&trigger)
}

fn wal_path(db: &Path) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// A connection to the (existing) database file at `path` with the store's
/// settings: WAL, `synchronous = NORMAL`, mmap reads, foreign keys, and
/// sqlite-vec when `load_vec` (and it loads).
fn open_conn(path: &Path, load_vec: bool) -> Result<(Connection, VecBackend)> {
    if load_vec {
        register_sqlite_vec();
    }
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(StoreError::from_sqlite)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Memory-mapped reads: measured to speed up the vector scan (benches/search.rs,
    // CLAW_BENCH_MMAP) without changing durability (writes still go through WAL).
    conn.pragma_update(None, "mmap_size", 256 * 1024 * 1024)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    let vec = if load_vec {
        match conn.query_row("SELECT vec_version()", [], |r| r.get::<_, String>(0)) {
            Ok(version) => VecBackend::Vec0 { version },
            Err(e) => VecBackend::Unavailable {
                reason: e.to_string(),
            },
        }
    } else {
        VecBackend::Unavailable {
            reason: "sqlite-vec disabled".into(),
        }
    };
    Ok((conn, vec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: &str, text: &str, emb: Option<Vec<f32>>) -> NewChunk {
        NewChunk {
            id: id.into(),
            start_line: 1,
            end_line: 1,
            hash: format!("h-{text}"),
            text: text.into(),
            context: String::new(),
            note_time: None,
            embedding: emb,
        }
    }

    fn file(path: &str) -> FileRecord {
        FileRecord {
            source: "memory".into(),
            path: path.into(),
            sha256: "abc".into(),
            mtime_ns: 1,
            size: 2,
            indexed_bytes: 0,
            indexed_lines: 0,
        }
    }

    #[test]
    fn open_migrate_write_remove() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("state/memory.sqlite");
        let mut s = Store::open(&db).unwrap();
        assert!(s.vec_backend().is_loaded());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&db).unwrap().permissions().mode() & 0o777,
            0o600
        );
        s.reset_index("m", 8, "1").unwrap();
        let e = vec![1.0f32, 0., 0., 0., 0., 0., 0., 0.];
        s.write_file(
            &file("a.md"),
            &[
                chunk("1", "hello world", Some(e.clone())),
                chunk("2", "other", Some(e)),
            ],
            WriteMode::Replace,
            "m",
        )
        .unwrap();
        let st = s.stats().unwrap();
        assert_eq!((st.files, st.chunks, st.vectors), (1, 2, 2));
        assert!(s.check_consistency().unwrap().is_empty());
        let fts: i64 = s
            .open_inspector()
            .unwrap()
            .query_row(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'hello'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(fts, 1);
        assert_eq!(s.remove_file("memory", "a.md").unwrap(), 2);
        let st = s.stats().unwrap();
        assert_eq!((st.files, st.chunks, st.vectors), (0, 0, 0));
        assert!(s.check_consistency().unwrap().is_empty());
    }

    #[test]
    fn inspector_is_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("m.sqlite")).unwrap();
        s.set_meta("k", "v").unwrap();
        let c = s.open_inspector().unwrap();
        let v: String = c
            .query_row("SELECT value FROM meta WHERE key = 'k'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, "v");
        let err = c
            .execute("DELETE FROM meta", [])
            .expect_err("a read-only connection refuses writes");
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::ReadOnly),
            "{err}"
        );
        assert_eq!(s.meta("k").unwrap().as_deref(), Some("v"));
    }

    #[test]
    fn the_stamp_listing_reads_the_covering_index_alone() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(&dir.path().join("memory.sqlite")).unwrap();
        let plan: Vec<String> = s
            .conn()
            .prepare(&format!("EXPLAIN QUERY PLAN {STAMP_LISTING}"))
            .unwrap()
            .query_map(["garden"], |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(
            plan,
            ["SEARCH files USING COVERING INDEX files_stamps (source=?)"],
            "no table lookups and no sort step"
        );
    }

    #[test]
    fn a_schema_3_index_migrates_to_the_contentless_word_index() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.sqlite");
        {
            let c = Connection::open(&db).unwrap();
            for (_, sql) in &MIGRATIONS[..3] {
                c.execute_batch(sql).unwrap();
            }
            c.pragma_update(None, "user_version", 3).unwrap();
            c.execute_batch(
                "INSERT INTO files (source, path, sha256, mtime, size, indexed_at)
                   VALUES ('memory', 'MEMORY.md', 'x', 1, 1, 1);
                 INSERT INTO chunks (id, source, path, start_line, end_line, hash, model, text, updated_at)
                   VALUES ('c1', 'memory', 'MEMORY.md', 1, 1, 'h', '', 'Deployments went fine', 1);
                 INSERT INTO meta (key, value) VALUES ('model', ''), ('chunker_version', 'md-2/redact-2');",
            )
            .unwrap();
        }
        let mut s = Store::open(&db).unwrap();
        let n = |s: &Store, q: &str| -> i64 {
            s.conn()
                .query_row(
                    "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?1",
                    [q],
                    |r| r.get(0),
                )
                .unwrap()
        };
        // The old chunk stays findable by its words (unstemmed) until the rebuild.
        assert_eq!(n(&s, "deployments"), 1);
        // New writes hold stems; removing a file's chunks removes their word rows.
        s.write_file(
            &file("MEMORY.md"),
            &[chunk("c2", "Deployments went fine", None)],
            WriteMode::Replace,
            "",
        )
        .unwrap();
        assert_eq!(n(&s, "deployments"), 0);
        assert_eq!(n(&s, "deploy"), 1);
        let rows: i64 = s
            .conn()
            .query_row("SELECT count(*) FROM chunks_fts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 1);
        assert_eq!(s.check_consistency().unwrap(), Vec::<String>::new());
        s.reset_index("", 0, "v").unwrap();
        assert_eq!(n(&s, "deploy"), 0);
        assert_eq!(s.check_consistency().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.sqlite");
        drop(Store::open(&db).unwrap());
        let c = Connection::open(&db).unwrap();
        c.pragma_update(None, "user_version", 99).unwrap();
        drop(c);
        let err = Store::open(&db).err().expect("must refuse");
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn cache_roundtrip_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("m.sqlite")).unwrap();
        let entries: Vec<_> = (0..10)
            .map(|i| (format!("h{i}"), vec![i as f32, 0.5]))
            .collect();
        s.put_cache("p", "m", &entries).unwrap();
        let got = s.cached_embeddings("p", "m", &["h3", "zz"]).unwrap();
        assert_eq!(got.get("h3"), Some(&vec![3.0, 0.5]));
        assert!(!got.contains_key("zz"));
        assert_eq!(s.prune_cache(4).unwrap(), 6);
        assert_eq!(s.stats().unwrap().cache_entries, 4);
    }

    #[test]
    fn recalls_count_survive_a_reset_and_a_rebuild_and_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("m.sqlite")).unwrap();
        let hit = |path: &str, a: usize, b: usize| RecallHit {
            source: "memory".into(),
            path: path.into(),
            start_line: a,
            end_line: b,
        };
        s.record_recalls(
            &[(hit("memory/a.md", 1, 3), 1), (hit("memory/b.md", 2, 2), 1)],
            100,
        )
        .unwrap();
        s.record_recalls(&[(hit("memory/a.md", 1, 3), 2)], 200)
            .unwrap();
        let rows = s.recall_rows("memory", &[]).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (
                rows[0].hit.path.as_str(),
                rows[0].count,
                rows[0].first_at,
                rows[0].last_at
            ),
            ("memory/a.md", 3, 100, 200)
        );
        let only_b = s.recall_rows("memory", &["memory/b.md".into()]).unwrap();
        assert_eq!(only_b.len(), 1);
        assert!(s.recall_rows("sessions", &[]).unwrap().is_empty());
        s.reset_index("", 0, "v").unwrap();
        assert_eq!(s.recall_rows("memory", &[]).unwrap().len(), 2);
        s.rebuild_aside("", 0, "v", &mut |_| Ok(())).unwrap();
        assert_eq!(s.recall_rows("memory", &[]).unwrap()[0].count, 3);
        assert_eq!(s.prune_recalls(150).unwrap(), 1);
        assert_eq!(s.recall_rows("memory", &[]).unwrap().len(), 1);
    }

    #[test]
    fn blob_roundtrip() {
        let v = vec![1.5f32, -2.0, 0.0];
        assert_eq!(blob_to_vec(&vec_to_blob(&v)).unwrap(), v);
        assert!(blob_to_vec(&[1, 2, 3]).is_none());
    }
}
