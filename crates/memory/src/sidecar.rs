//! The registered sources, kept beside the database in a sidecar file
//! (`<db stem>.sources.json`, e.g. `.claw/memory.sources.json`, mode 0600) so
//! they survive the database: deleting `memory.sqlite*` (by hand, or under a
//! running watcher) loses the index, which is rebuilt from the disk, but not the
//! list of folders to index.
//!
//! Invariant: the `sources` table is the truth while the database lives; the
//! store rewrites this file after every change to it, and reads it back only
//! into a database it has just created. Rows are written by `store` alone.

use crate::store::{SourceRecord, Store, StoreError};
use std::path::{Path, PathBuf};

/// The sidecar's contents.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SidecarFile {
    /// Format version.
    version: u32,
    /// The registered folders.
    sources: Vec<SidecarSource>,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SidecarSource {
    name: String,
    root: PathBuf,
    added_at: i64,
    #[serde(default)]
    follow_symlinks_outside: bool,
}

/// The sidecar file of the database at `db`.
pub fn path_for(db: &Path) -> PathBuf {
    let stem = db
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "memory".into());
    db.with_file_name(format!("{stem}.sources.json"))
}

/// Write the store's registered sources to its sidecar (atomically: a
/// temporary file renamed over it).
pub(crate) fn save(store: &Store) -> Result<(), StoreError> {
    write(&path_for(store.path()), store.sources()?)
}

/// Write `sources` to the sidecar at `path` atomically (a temporary file
/// renamed over it).
fn write(path: &Path, sources: Vec<SourceRecord>) -> Result<(), StoreError> {
    let file = SidecarFile {
        version: 1,
        sources: sources
            .into_iter()
            .map(|s| SidecarSource {
                name: s.name,
                root: s.root,
                added_at: s.added_at,
                follow_symlinks_outside: s.follow_symlinks_outside,
            })
            .collect(),
    };
    let mut json = serde_json::to_vec_pretty(&file).map_err(|e| StoreError::Sidecar {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    json.push(b'\n');
    claw_base::fs::write_atomic(path, &json, claw_base::fs::Durability::Durable).map_err(|source| {
        StoreError::Sidecar {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// Read the sidecar of the database at `db`; `None` when there is none.
fn load(db: &Path) -> Result<Option<Vec<SourceRecord>>, StoreError> {
    let path = path_for(db);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Sidecar { path, source }),
    };
    let file: SidecarFile = serde_json::from_slice(&bytes).map_err(|e| StoreError::Sidecar {
        path: path.clone(),
        source: e.into(),
    })?;
    Ok(Some(
        file.sources
            .into_iter()
            .map(|s| SourceRecord {
                name: s.name,
                root: s.root,
                added_at: s.added_at,
                follow_symlinks_outside: s.follow_symlinks_outside,
            })
            .collect(),
    ))
}

/// Keep only the sources of the sidecar of the database at `db` that `keep`
/// accepts (rewritten atomically when one goes) and return those dropped; no
/// sidecar drops nothing. For a sidecar that was not the store's to write (one
/// carried over from a tool-writable directory), before any database reads it.
pub(crate) fn retain(
    db: &Path,
    keep: impl Fn(&SourceRecord) -> bool,
) -> Result<Vec<SourceRecord>, StoreError> {
    let Some(sources) = load(db)? else {
        return Ok(Vec::new());
    };
    let (kept, dropped): (Vec<_>, Vec<_>) = sources.into_iter().partition(|s| keep(s));
    if dropped.is_empty() {
        return Ok(dropped);
    }
    write(&path_for(db), kept)?;
    Ok(dropped)
}

/// At open: a database just created takes its sources from the sidecar; an
/// existing one with sources but no sidecar (made by an older claw) writes it.
pub(crate) fn reconcile(store: &Store, created: bool) -> Result<(), StoreError> {
    if created {
        if let Some(sources) = load(store.path())? {
            store.restore_sources(&sources)?;
        }
        return Ok(());
    }
    if !path_for(store.path()).exists() && !store.sources()?.is_empty() {
        save(store)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sidecar_sits_beside_the_database_outside_its_glob() {
        let p = path_for(Path::new("/ws/.claw/memory.sqlite"));
        assert_eq!(p, Path::new("/ws/.claw/memory.sources.json"));
        // `rm memory.sqlite*` must not take it along.
        assert!(!p.to_string_lossy().contains("memory.sqlite"));
    }

    #[test]
    fn sources_survive_a_deleted_database() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.sqlite");
        let notes = dir.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        let s = Store::open(&db).unwrap();
        s.add_source("notes", &notes).unwrap();
        s.set_source_follow_symlinks_outside("notes", true).unwrap();
        drop(s);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let s = Store::open(&db).unwrap();
        let got = s.sources().unwrap();
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].name, "notes");
        assert_eq!(got[0].root, notes);
        assert!(got[0].follow_symlinks_outside);
        // Removing the source removes it from the sidecar too.
        let mut s = s;
        s.remove_source("notes").unwrap();
        drop(s);
        std::fs::remove_file(&db).unwrap();
        let s = Store::open(&db).unwrap();
        assert!(s.sources().unwrap().is_empty());
    }

    #[test]
    fn an_older_database_writes_its_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.sqlite");
        let s = Store::open(&db).unwrap();
        s.add_source("n", dir.path()).unwrap();
        drop(s);
        std::fs::remove_file(path_for(&db)).unwrap();
        drop(Store::open(&db).unwrap());
        let text = std::fs::read_to_string(path_for(&db)).unwrap();
        assert!(text.contains("\"name\": \"n\""), "{text}");
    }

    #[test]
    fn a_corrupt_sidecar_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("memory.sqlite");
        std::fs::write(path_for(&db), "{not json").unwrap();
        let err = Store::open(&db).err().expect("must refuse");
        assert!(matches!(err, StoreError::Sidecar { .. }), "{err}");
        assert!(err.to_string().contains("memory.sources.json"), "{err}");
    }
}
