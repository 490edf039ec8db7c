//! Rebuilding the index from scratch without ever blinding it: why a rebuild
//! happens ([`RebuildReason`]), and the file side of building the new SQLite
//! database aside and swapping it in (the SQL side — copying the embedding
//! cache and the sources, the connections — is `Store::rebuild_aside`).
//!
//! A `--force` run, or a new model, chunker or dimension, used to clear the
//! tables in place and re-index: a kill in between left an empty index until
//! the next full run. Now the new database is built next to the live one
//! (`memory.sqlite.rebuild`, same directory, 0600) by the normal indexer,
//! starting with the live one's embedding cache and registered sources, and
//! replaces it with one `rename(2)`. Searches meanwhile read the old file. A
//! kill before the rename leaves the old database untouched (the half-built
//! aside is discarded by the next index run, under the writer lock); after
//! it, the new one is complete (checkpointed and fsync'ed before the rename).
//! A first index (`NewIndex`: nothing to protect) is still built in place.
//!
//! # The `-wal` and `-shm` files
//!
//! SQLite in WAL mode keeps two files *named after* the database,
//! `memory.sqlite-wal` and `-shm`, and finds them by name. Renaming a new
//! file over a database other processes hold open (a search, the watcher,
//! the gateway) would otherwise corrupt it, in three ways, each closed here:
//!
//! 1. The aside file must stand alone: it is built in WAL mode like the live
//!    one, then `PRAGMA wal_checkpoint(TRUNCATE)` and its only connection is
//!    closed (which deletes its own `-wal`/`-shm`), then it is fsync'ed. Its
//!    header still says WAL, so the first opener after the swap starts a
//!    fresh WAL.
//! 2. The old database's `-wal`/`-shm` must not be read as the new one's:
//!    their frames are pages of the *old* file. Right after the rename the
//!    swap unlinks both names; the old file's connections keep theirs open
//!    (unlinked), the new file's openers create new ones. For that to be
//!    atomic, every `Store::open` holds the *swap gate* (`<stem>.swap.lock`,
//!    an flock) shared while it opens, and the swap holds it exclusive from
//!    the rename to the unlinks. A kill between the rename and the unlinks is
//!    covered by the *marker* `memory.sqlite.swapping`, written (fsync'ed)
//!    before the rename with the new file's (device, inode): an opener that
//!    finds it takes the gate exclusive and finishes the job — when the live
//!    file is the marked one, its `-wal`/`-shm` are the old file's and go —
//!    before anyone opens the new file.
//! 3. The *last* connection to a file checkpoints it and deletes `-wal` and
//!    `-shm` **by name** when it closes. A connection of the old file closing
//!    after the swap would delete the new file's. SQLite skips that when a
//!    `stat` of the path shows the file moved (`SQLITE_FCNTL_HAS_MOVED`), but
//!    a swap could land between its `stat` and the unlinks. So a `Store`
//!    closes under the gate shared, and one whose file was replaced closes
//!    with `SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE` (no checkpoint into a dead
//!    file, no deletion) without relying on SQLite's own check.
//!
//! The same rule makes a *created* database safe: a `-wal`/`-shm` found
//! beside a database file that does not exist yet belong to a deleted one,
//! and are unlinked (gate exclusive) before SQLite opens the new file.
//!
//! Readers notice the swap as they notice a deleted database: the file at
//! the path is not the (device, inode) they opened (`Store::is_replaced`).
//! The watcher reopens (`SyncError::DatabaseReplaced`), a `MemoryService`
//! (the gateway, MCP, the REPL) reopens before its next call, a writer that
//! waited for the writer lock writes nothing into the replaced file
//! (`freshness::apply_paths`), and a search already running finishes on the
//! old file.
//!
//! What this cannot guard: a SQLite client that is not claw (the `sqlite3`
//! shell, a browser) holding the database open across a swap follows none of
//! these rules, as when the file is deleted by hand.

#![warn(missing_docs)]

use crate::store::StoreError;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why an index was rebuilt from scratch. Serialised (and displayed) as the
/// sentence the `rebuilt` JSON fields have always carried, e.g.
/// `"embedding model changed (keyword-only -> all-MiniLM-L6-v2)"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebuildReason {
    /// The caller asked for a rebuild (shown as `--force`, as it always was).
    Forced,
    /// The database had never been indexed.
    NewIndex,
    /// The embedding model changed (`""` = keyword-only).
    ModelChanged {
        /// The model the index was built with.
        from: String,
        /// The model of this run.
        to: String,
    },
    /// The chunker version changed.
    ChunkerChanged {
        /// The stored version, if any.
        from: Option<String>,
        /// This build's version.
        to: String,
    },
    /// The vector dimension changed.
    DimensionChanged {
        /// Stored dimension.
        from: usize,
        /// This run's dimension.
        to: usize,
    },
    /// The vec0 tables are missing although vectors are expected.
    VectorTablesMissing,
}

impl RebuildReason {
    /// Whether the rebuild replaces an index that searches may be using (built
    /// aside and swapped in); a never-built index is built in place.
    pub fn replaces_an_index(&self) -> bool {
        !matches!(self, RebuildReason::NewIndex)
    }
}

/// A model name as messages show it: the empty name is a keyword-only index.
pub(crate) fn model_label(m: &str) -> &str {
    if m.is_empty() { "keyword-only" } else { m }
}

impl std::fmt::Display for RebuildReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RebuildReason::Forced => f.write_str("--force"),
            RebuildReason::NewIndex => f.write_str("new index"),
            RebuildReason::ModelChanged { from, to } => {
                write!(
                    f,
                    "embedding model changed ({} -> {})",
                    model_label(from),
                    model_label(to)
                )
            }
            RebuildReason::ChunkerChanged { from, to } => write!(
                f,
                "chunker or word index changed ({} -> {to})",
                from.as_deref().unwrap_or("none")
            ),
            RebuildReason::DimensionChanged { from, to } => {
                write!(f, "dimension changed ({from} -> {to})")
            }
            RebuildReason::VectorTablesMissing => f.write_str("vector tables missing"),
        }
    }
}

impl serde::Serialize for RebuildReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `db` with `suffix` appended to its file name (`memory.sqlite` + `-wal`).
pub(crate) fn with_suffix(db: &Path, suffix: &str) -> PathBuf {
    let mut s = db.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Where the rebuild of the database `db` is built: `<db>.rebuild`.
pub fn aside_path(db: &Path) -> PathBuf {
    with_suffix(db, ".rebuild")
}

/// The marker of a swap in progress: `<db>.swapping`.
pub fn marker_path(db: &Path) -> PathBuf {
    with_suffix(db, ".swapping")
}

/// The swap gate of the database `db`: `<db stem>.swap.lock` beside it (like
/// the sources sidecar, outside the `memory.sqlite*` glob, so deleting the
/// database by hand does not delete a lock someone may hold).
pub fn gate_path(db: &Path) -> PathBuf {
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "memory".into());
    db.with_file_name(format!("{stem}.swap.lock"))
}

/// The swap gate held (an flock on [`gate_path`]): shared while a database
/// is opened or closed, exclusive while a swap replaces it. Released on drop.
///
/// Invariant: a thread never asks for the gate while it holds it (flock locks
/// of two descriptors conflict even within one process).
#[derive(Debug)]
pub(crate) struct Gate {
    _file: std::fs::File,
}

impl Gate {
    fn open(db: &Path) -> std::io::Result<std::fs::File> {
        crate::private::file_options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(gate_path(db))
    }

    /// Take the gate shared (an open, a close), waiting for a swap to finish.
    pub(crate) fn shared(db: &Path) -> std::io::Result<Gate> {
        let file = Self::open(db)?;
        file.lock_shared()?;
        Ok(Gate { _file: file })
    }

    /// Take the gate exclusive (a swap, finishing one, creating the file).
    pub(crate) fn exclusive(db: &Path) -> std::io::Result<Gate> {
        let file = Self::open(db)?;
        file.lock()?;
        Ok(Gate { _file: file })
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::DbFile {
        path: path.to_path_buf(),
        source,
    }
}

/// Make the directory entries of `dir` durable.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn parent(db: &Path) -> &Path {
    db.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn remove_if_present(p: &Path) -> std::io::Result<bool> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// (device, inode) of `path`, `None` when it cannot be stat'ed.
pub(crate) fn file_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Remove what a rebuild of `db` left behind when it was killed before its
/// swap (the aside database and its journal files). Returns whether there was
/// one. Call it only under the writer lock: a running rebuild holds it.
pub fn discard_aside(db: &Path) -> Result<bool, StoreError> {
    let aside = aside_path(db);
    let mut found = false;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let p = with_suffix(&aside, suffix);
        found |= remove_if_present(&p).map_err(io_err(&p))?;
    }
    Ok(found)
}

/// The gate an open of `db` holds: shared, or exclusive when the open first
/// has to finish an interrupted swap or create the database file (see the
/// module doc). The file exists (0600) when this returns.
pub(crate) fn open_gate(db: &Path) -> Result<Gate, StoreError> {
    let gate = Gate::shared(db).map_err(io_err(db))?;
    if db.exists() && !marker_path(db).exists() {
        return Ok(gate);
    }
    drop(gate);
    let gate = Gate::exclusive(db).map_err(io_err(db))?;
    finish_swap(db)?;
    if create_private(db).map_err(io_err(db))? {
        // Any `-wal`/`-shm` here belong to a database deleted from under them.
        for suffix in ["-wal", "-shm"] {
            let p = with_suffix(db, suffix);
            remove_if_present(&p).map_err(io_err(&p))?;
        }
    }
    Ok(gate)
}

/// Create the database file with mode 0600 if it does not exist yet; whether
/// it was created.
fn create_private(path: &Path) -> std::io::Result<bool> {
    match crate::private::file_options()
        .write(true)
        .create_new(true)
        .open(path)
    {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Finish a swap a killed process left half done (gate held exclusive): when
/// the file at `db` is the one the marker names, the rename happened and the
/// `-wal`/`-shm` beside it are the old file's: unlink them. Otherwise the
/// rename did not happen and they are the live file's. The marker goes either
/// way.
fn finish_swap(db: &Path) -> Result<(), StoreError> {
    let marker = marker_path(db);
    let text = match std::fs::read_to_string(&marker) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(&marker)(e)),
    };
    let marked = parse_marker(&text);
    if marked.is_some() && file_id(db) == marked {
        drop_old_journal(db)?;
    }
    remove_if_present(&marker).map_err(io_err(&marker))?;
    sync_dir(parent(db)).map_err(io_err(db))
}

fn parse_marker(text: &str) -> Option<(u64, u64)> {
    let mut it = text.split_whitespace().map(str::parse::<u64>);
    match (it.next(), it.next(), it.next()) {
        (Some(Ok(dev)), Some(Ok(ino)), None) => Some((dev, ino)),
        _ => None,
    }
}

/// Unlink the `-wal` and `-shm` names of `db` (they are a replaced file's).
fn drop_old_journal(db: &Path) -> Result<(), StoreError> {
    for suffix in ["-wal", "-shm"] {
        let p = with_suffix(db, suffix);
        remove_if_present(&p).map_err(io_err(&p))?;
    }
    Ok(())
}

/// Make the finished aside database durable before it is renamed in.
pub(crate) fn sync_aside(aside: &Path) -> Result<(), StoreError> {
    for suffix in ["-wal", "-shm"] {
        // Its only connection closed after a full checkpoint: nothing in them.
        let p = with_suffix(aside, suffix);
        remove_if_present(&p).map_err(io_err(&p))?;
    }
    std::fs::File::open(aside)
        .and_then(|f| f.sync_all())
        .map_err(io_err(aside))
}

/// Step 1 of the swap (gate held exclusive): record, durably, which file is
/// about to become `db`.
pub(crate) fn write_marker(db: &Path, new_id: (u64, u64)) -> Result<(), StoreError> {
    let marker = marker_path(db);
    let write = || -> std::io::Result<()> {
        let mut f = crate::private::file_options()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&marker)?;
        writeln!(f, "{} {}", new_id.0, new_id.1)?;
        f.sync_all()?;
        sync_dir(parent(db))
    };
    write().map_err(io_err(&marker))
}

/// Step 2 (gate held exclusive, the caller's own connection to the old file
/// closed): the one `rename(2)` that swaps the new database in, made durable.
pub(crate) fn rename_in(aside: &Path, db: &Path) -> Result<(), StoreError> {
    std::fs::rename(aside, db).map_err(io_err(db))?;
    sync_dir(parent(db)).map_err(io_err(db))
}

/// Step 3 (gate held exclusive): the old file's `-wal`/`-shm` names go, then
/// the marker, durably — before anyone opens the new file.
pub(crate) fn finish_rename(db: &Path) -> Result<(), StoreError> {
    drop_old_journal(db)?;
    let marker = marker_path(db);
    remove_if_present(&marker).map_err(io_err(&marker))?;
    sync_dir(parent(db)).map_err(io_err(db))
}

/// Abandon a swap whose rename failed (gate held exclusive): the live file is
/// still the old one, only the marker goes.
pub(crate) fn abandon_swap(db: &Path) -> Result<(), StoreError> {
    let marker = marker_path(db);
    remove_if_present(&marker).map_err(io_err(&marker))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebuild_reasons_serialise_as_their_sentence() {
        let cases = [
            (RebuildReason::Forced, "--force"),
            (RebuildReason::NewIndex, "new index"),
            (
                RebuildReason::ModelChanged {
                    from: String::new(),
                    to: "all-MiniLM-L6-v2".into(),
                },
                "embedding model changed (keyword-only -> all-MiniLM-L6-v2)",
            ),
            (
                RebuildReason::ChunkerChanged {
                    from: None,
                    to: "3".into(),
                },
                "chunker or word index changed (none -> 3)",
            ),
            (
                RebuildReason::DimensionChanged { from: 8, to: 384 },
                "dimension changed (8 -> 384)",
            ),
            (RebuildReason::VectorTablesMissing, "vector tables missing"),
        ];
        for (r, want) in cases {
            assert_eq!(r.to_string(), want);
            assert_eq!(serde_json::to_string(&r).unwrap(), format!("\"{want}\""));
        }
        let report = crate::indexer::IndexReport {
            rebuilt: Some(RebuildReason::NewIndex),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&report).unwrap()["rebuilt"],
            "new index"
        );
    }

    #[test]
    fn the_files_sit_beside_the_database() {
        let db = Path::new("/ws/.claw/memory.sqlite");
        assert_eq!(aside_path(db), Path::new("/ws/.claw/memory.sqlite.rebuild"));
        assert_eq!(
            marker_path(db),
            Path::new("/ws/.claw/memory.sqlite.swapping")
        );
        // The gate is outside the `memory.sqlite*` glob.
        assert_eq!(gate_path(db), Path::new("/ws/.claw/memory.swap.lock"));
    }

    use crate::index_storage::IndexStorage;
    use crate::store::{FileRecord, NewChunk, Store, WriteMode};

    fn record(path: &str) -> FileRecord {
        FileRecord {
            source: "memory".into(),
            path: path.into(),
            sha256: format!("sha-{path}"),
            mtime_ns: 1,
            size: 2,
            indexed_bytes: 0,
            indexed_lines: 0,
        }
    }

    fn write(s: &mut dyn IndexStorage, path: &str, text: &str) {
        let chunk = NewChunk {
            id: format!("id-{path}"),
            start_line: 1,
            end_line: 1,
            hash: format!("h-{path}"),
            text: text.into(),
            context: String::new(),
            note_time: None,
            embedding: None,
        };
        s.write_file(&record(path), &[chunk], WriteMode::Replace, "")
            .unwrap();
    }

    fn paths(s: &Store) -> Vec<String> {
        s.open_inspector()
            .unwrap()
            .prepare("SELECT path FROM files ORDER BY path")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    fn words(s: &Store, word: &str) -> i64 {
        s.read()
            .query_row(
                "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?1",
                [word],
                |r| r.get(0),
            )
            .unwrap()
    }

    /// A live index of `old.md` (searchable as "quince"), with one cached
    /// embedding and a registered source.
    fn live(dir: &Path) -> (PathBuf, Store) {
        let db = dir.join("state/memory.sqlite");
        let mut s = Store::open(&db).unwrap();
        s.reset_index("", 0, "v1").unwrap();
        write(&mut s, "old.md", "the quince is ripe");
        s.put_cache("p", "m", &[("h1".into(), vec![0.25, 0.5])])
            .unwrap();
        s.add_source("garden", dir).unwrap();
        (db, s)
    }

    #[test]
    fn the_rebuilt_database_is_swapped_in_and_served() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut s) = live(dir.path());
        let before = file_id(&db).unwrap();
        // A reader opened before the rebuild (a search, the watcher).
        let reader = Store::open(&db).unwrap();
        s.rebuild_aside("", 0, "v2", &mut |fresh| {
            // Mid-build: the live file is untouched and still answers.
            assert_eq!(paths(&reader), ["old.md"]);
            assert_eq!(words(&reader, "quinc"), 1);
            assert!(aside_path(&db).exists());
            write(fresh, "new.md", "the medlar is bletted");
            Ok(())
        })
        .unwrap();
        // One rename: a new file at the path, nothing left beside it.
        assert_ne!(file_id(&db).unwrap(), before);
        assert!(!aside_path(&db).exists());
        assert!(!marker_path(&db).exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // The rebuilding store serves the new index, and so does a new open.
        assert_eq!(paths(&s), ["new.md"]);
        assert_eq!(words(&s, "medlar"), 1);
        assert_eq!(words(&s, "quinc"), 0);
        assert_eq!(s.meta("chunker_version").unwrap().as_deref(), Some("v2"));
        assert!(!s.is_replaced());
        let again = Store::open(&db).unwrap();
        assert_eq!(paths(&again), ["new.md"]);
        assert!(again.check_consistency().unwrap().is_empty());
        // The old reader notices, still reads its file, and follows on reopen.
        assert!(reader.is_replaced());
        assert_eq!(words(&reader, "quinc"), 1);
        assert_eq!(paths(&reader.reopen().unwrap()), ["new.md"]);
        drop(again);
        // The new file's WAL holds a write no checkpoint has moved yet...
        s.set_meta("after", "swap").unwrap();
        assert!(with_suffix(&db, "-wal").exists());
        // ...and the old file's last connection, closing, deletes neither
        // `-wal` nor `-shm` by name: they are the new file's now.
        let ino = |p: &Path| file_id(p);
        eprintln!(
            "before: wal {:?} shm {:?}",
            ino(&with_suffix(&db, "-wal")),
            ino(&with_suffix(&db, "-shm"))
        );
        drop(reader);
        eprintln!(
            "after: wal {:?} shm {:?}",
            ino(&with_suffix(&db, "-wal")),
            ino(&with_suffix(&db, "-shm"))
        );
        assert!(with_suffix(&db, "-wal").exists());
        assert!(with_suffix(&db, "-shm").exists());
        let fresh = Store::open(&db).unwrap();
        assert_eq!(fresh.meta("after").unwrap().as_deref(), Some("swap"));
        assert!(fresh.check_consistency().unwrap().is_empty());
    }

    #[test]
    fn the_cache_and_the_sources_are_carried_over() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut s) = live(dir.path());
        let sidecar = std::fs::read(crate::sidecar::path_for(&db)).unwrap();
        s.rebuild_aside("", 0, "v2", &mut |fresh| {
            // The pass already finds them in the new database.
            let hit = fresh.cached_embeddings("p", "m", &["h1"]).unwrap();
            assert_eq!(hit.get("h1"), Some(&vec![0.25, 0.5]));
            assert_eq!(fresh.sources().unwrap().len(), 1);
            Ok(())
        })
        .unwrap();
        let s = Store::open(&db).unwrap();
        let hit = s.cached_embeddings("p", "m", &["h1"]).unwrap();
        assert_eq!(hit.get("h1"), Some(&vec![0.25, 0.5]));
        assert_eq!(s.stats().unwrap().cache_entries, 1);
        let sources = s.sources().unwrap();
        assert_eq!(sources.len(), 1);
        assert_eq!(sources[0].name, "garden");
        assert_eq!(sources[0].root, dir.path());
        assert_eq!(
            std::fs::read(crate::sidecar::path_for(&db)).unwrap(),
            sidecar,
            "the sidecar is left as it was"
        );
    }

    #[test]
    fn a_source_registered_during_the_rebuild_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut s) = live(dir.path());
        let other = Store::open(&db).unwrap();
        let notes = dir.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        s.rebuild_aside("", 0, "v2", &mut |_| {
            other.add_source("notes", &notes).unwrap();
            Ok(())
        })
        .unwrap();
        let names: Vec<String> = s.sources().unwrap().into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["garden", "notes"]);
    }

    #[test]
    fn a_failed_rebuild_leaves_the_live_index_and_no_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut s) = live(dir.path());
        let before = file_id(&db);
        let err = s
            .rebuild_aside("", 0, "v2", &mut |fresh| {
                write(fresh, "new.md", "half built");
                Err(StoreError::Busy)
            })
            .expect_err("the fill failed");
        assert!(matches!(err, StoreError::Busy), "{err}");
        assert_eq!(file_id(&db), before);
        assert!(!aside_path(&db).exists());
        assert!(!with_suffix(&aside_path(&db), "-wal").exists());
        assert_eq!(paths(&s), ["old.md"]);
        assert_eq!(s.meta("chunker_version").unwrap().as_deref(), Some("v1"));
    }

    #[test]
    fn a_stale_rebuild_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut s) = live(dir.path());
        // What a kill during a rebuild leaves: the half-built file and its WAL.
        let aside = aside_path(&db);
        std::fs::write(&aside, b"half a database").unwrap();
        std::fs::write(with_suffix(&aside, "-wal"), b"frames").unwrap();
        assert!(s.discard_stale_rebuild().unwrap());
        assert!(!aside.exists());
        assert!(!with_suffix(&aside, "-wal").exists());
        assert!(!s.discard_stale_rebuild().unwrap());
        // A rebuild starts by removing one too.
        std::fs::write(&aside, b"half a database").unwrap();
        s.rebuild_aside("", 0, "v2", &mut |_| Ok(())).unwrap();
        assert!(!aside.exists());
        assert!(
            Store::open(&db)
                .unwrap()
                .check_consistency()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn the_indexer_removes_a_stale_rebuild_and_rebuilds_aside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        std::fs::write(ws.join("MEMORY.md"), "# Memory\nthe quince is ripe\n").unwrap();
        let settings =
            crate::config::MemoryConfig::for_workspace(ws, crate::config::EmbedProvider::None);
        let db = settings.db_path();
        let lock = crate::lock::WriterLock::acquire(
            &settings.state_dir(),
            "test",
            std::time::Duration::ZERO,
        )
        .unwrap();
        let mut s = Store::open(&db).unwrap();
        let opts = crate::indexer::IndexOptions::default();
        let first = crate::indexer::run(&mut s, &settings, None, &opts, &lock, &|_| {}).unwrap();
        assert_eq!(first.rebuilt, Some(RebuildReason::NewIndex));
        std::fs::write(aside_path(&db), b"left by a kill").unwrap();
        // An ordinary run discards it.
        let r = crate::indexer::run(&mut s, &settings, None, &opts, &lock, &|_| {}).unwrap();
        assert_eq!(r.rebuilt, None);
        assert!(!aside_path(&db).exists());
        // A forced one builds aside and swaps.
        let before = file_id(&db);
        let force = crate::indexer::IndexOptions { force: true };
        let r = crate::indexer::run(&mut s, &settings, None, &force, &lock, &|_| {}).unwrap();
        assert_eq!(r.rebuilt, Some(RebuildReason::Forced));
        assert_eq!((r.files_changed, r.chunks_added), (1, 1));
        assert_ne!(file_id(&db), before);
        assert_eq!(words(&s, "quinc"), 1);
        assert_eq!(s.stats().unwrap().files, 1);
    }

    #[test]
    fn an_interrupted_swap_is_finished_by_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let (db, s) = live(dir.path());
        drop(s);
        // Killed after the rename, before the old `-wal`/`-shm` went: the
        // marker names the file now at the path, and beside it lie another
        // file's WAL frames (uncheckpointed) that must never be replayed.
        let other = dir.path().join("other/memory.sqlite");
        let mut o = Store::open(&other).unwrap();
        o.reset_index("m", 0, "other").unwrap();
        for i in 0..50 {
            write(&mut o, &format!("other-{i}.md"), "pages of another file");
        }
        std::fs::copy(with_suffix(&other, "-wal"), with_suffix(&db, "-wal")).unwrap();
        std::fs::copy(with_suffix(&other, "-shm"), with_suffix(&db, "-shm")).unwrap();
        std::mem::forget(o); // as a kill: its WAL stays uncheckpointed
        let (dev, ino) = file_id(&db).unwrap();
        std::fs::write(marker_path(&db), format!("{dev} {ino}\n")).unwrap();
        let s = Store::open(&db).unwrap();
        assert!(!marker_path(&db).exists());
        assert_eq!(paths(&s), ["old.md"]);
        assert!(s.check_consistency().unwrap().is_empty());
        drop(s);
        // Killed before the rename: the marker names another file, and the
        // `-wal` is the live file's own: kept (and replayed).
        let mut s = Store::open(&db).unwrap();
        write(&mut s, "second.md", "in the wal");
        let wal = std::fs::read(with_suffix(&db, "-wal")).unwrap();
        let shm = std::fs::read(with_suffix(&db, "-shm")).unwrap();
        std::mem::forget(s); // as a kill: no checkpoint, no cleanup
        std::fs::write(marker_path(&db), format!("{dev} {}\n", ino + 1)).unwrap();
        let copy = dir.path().join("copy");
        std::fs::create_dir(&copy).unwrap();
        let db2 = copy.join("memory.sqlite");
        std::fs::copy(&db, &db2).unwrap();
        std::fs::write(with_suffix(&db2, "-wal"), wal).unwrap();
        std::fs::write(with_suffix(&db2, "-shm"), shm).unwrap();
        let (dev2, ino2) = file_id(&db2).unwrap();
        std::fs::write(marker_path(&db2), format!("{dev2} {}\n", ino2 + 1)).unwrap();
        let s2 = Store::open(&db2).unwrap();
        assert!(!marker_path(&db2).exists());
        assert_eq!(paths(&s2), ["old.md", "second.md"]);
    }

    #[test]
    fn a_new_database_ignores_a_deleted_ones_wal() {
        let dir = tempfile::tempdir().unwrap();
        let (db, mut s) = live(dir.path());
        write(&mut s, "more.md", "uncheckpointed");
        // The main file alone is deleted under an open connection.
        std::fs::remove_file(&db).unwrap();
        assert!(s.is_replaced());
        let mut fresh = Store::open(&db).unwrap();
        assert!(paths(&fresh).is_empty());
        fresh.reset_index("", 0, "v1").unwrap();
        write(&mut fresh, "new.md", "a new file");
        // The old connection closes without touching the new file's WAL.
        drop(s);
        assert!(with_suffix(&db, "-wal").exists());
        let again = Store::open(&db).unwrap();
        assert_eq!(paths(&again), ["new.md"]);
        assert!(again.check_consistency().unwrap().is_empty());
    }

    #[test]
    fn a_marker_is_read_back_or_ignored() {
        assert_eq!(parse_marker("12 345\n"), Some((12, 345)));
        assert_eq!(parse_marker("12"), None);
        assert_eq!(parse_marker("12 x"), None);
        assert_eq!(parse_marker("1 2 3"), None);
    }
}
