//! The single-writer lock: one process at a time may write the memory database
//! (the watcher or `claw memory index`). An OS file lock (flock) on
//! `<state>/writer.lock`, so it dies with its process; the file records the
//! holder's pid and command for the "who holds it" message.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Errors taking the writer lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another claw process (pid {pid}, `{what}`) is writing the index at {path}; waited {waited:?}. Wait for it to finish or stop it"
    )]
    Held {
        path: PathBuf,
        pid: u32,
        what: String,
        waited: Duration,
    },
    #[error("cannot open lock file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Holds the writer lock until dropped.
#[derive(Debug)]
pub struct WriterLock {
    _file: std::fs::File,
    path: PathBuf,
}

impl WriterLock {
    /// Take the lock, waiting up to `wait` for another writer to finish.
    pub fn acquire(state_dir: &Path, what: &str, wait: Duration) -> Result<WriterLock, LockError> {
        // Placeholder until the real lock lands: no locking.
        let _ = (what, wait);
        let path = state_dir.join("writer.lock");
        std::fs::create_dir_all(state_dir).map_err(|source| LockError::Io {
            path: path.clone(),
            source,
        })?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| LockError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(WriterLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}
