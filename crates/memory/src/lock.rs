//! The single-writer lock: one process at a time may write the memory database
//! (the watcher or `claw memory index`). An OS file lock (flock, via `std::fs::File::try_lock`) on
//! `<state>/writer.lock`, so it dies with its process; the file records the
//! holder's pid and command for the "who holds it" message.
//!
//! Invariant: the lock is never taken by deleting or creating files (no stale
//! lock files after a crash); only `flock` decides who holds it.

#![warn(missing_docs)]

use std::fs::TryLockError;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// File name of the lock inside the state directory.
pub const LOCK_FILE: &str = "writer.lock";

/// File name of the lock every writer of the workspace's `MEMORY.md` takes
/// (the scheduled consolidation, `/remember`, compaction, MCP `memory_append`)
/// around its read, merge and write, so no writer loses another's update.
/// Taken after [`LOCK_FILE`] by whoever holds both, never before it.
pub const MEMORY_FILE_LOCK: &str = "memory-file.lock";

/// Errors taking the writer lock.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another claw process (pid {pid}, `{what}`) is writing {target} (lock {path}); waited {waited:?}. Wait for it to finish or stop it"
    )]
    /// Another process holds the lock and did not release it in time.
    Held {
        /// What the lock guards (`the index`, `MEMORY.md`).
        target: &'static str,
        /// The lock file.
        path: PathBuf,
        /// The holder's pid.
        pid: u32,
        /// What the holder said it is doing.
        what: String,
        /// How long this process waited.
        waited: Duration,
    },
    #[error("cannot open lock file {path}: {source}")]
    /// The lock file could not be opened, read or written.
    Io {
        /// The lock file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Who holds the lock, as recorded in the lock file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LockHolder {
    /// 0 when the holder has not written its pid yet.
    pub pid: u32,
    /// What the holder said it is doing.
    pub what: String,
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
        Self::acquire_named(state_dir, LOCK_FILE, "the index", what, wait)
    }

    /// Take the lock `file` of the state directory, which guards `target`
    /// (for the messages), waiting up to `wait` ([`MEMORY_FILE_LOCK`]).
    pub fn acquire_named(
        state_dir: &Path,
        file: &str,
        target: &'static str,
        what: &str,
        wait: Duration,
    ) -> Result<WriterLock, LockError> {
        let path = state_dir.join(file);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        crate::private::create_dir_all(state_dir).map_err(io)?;
        let mut file = open_lock_file(&path).map_err(io)?;
        let start = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) => {
                    let waited = start.elapsed();
                    if waited >= wait {
                        let holder = read_holder(&path).unwrap_or(LockHolder {
                            pid: 0,
                            what: "unknown".into(),
                        });
                        return Err(LockError::Held {
                            target,
                            path,
                            pid: holder.pid,
                            what: holder.what,
                            waited,
                        });
                    }
                    std::thread::sleep(pause.min(wait - waited));
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(TryLockError::Error(e)) => return Err(io(e)),
            }
        }
        // We hold the lock: record who we are (one write, so readers see all or nothing
        // of the new record — they may see the empty file in between and retry).
        let record = format!("{}\n{}\n", std::process::id(), what.replace('\n', " "));
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(record.as_bytes()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(WriterLock { _file: file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who holds the lock right now, if anyone (does not take it).
    pub fn holder(state_dir: &Path) -> Result<Option<LockHolder>, LockError> {
        let path = state_dir.join(LOCK_FILE);
        let file = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(LockError::Io { path, source }),
        };
        match file.try_lock_shared() {
            Ok(()) => {
                let _ = file.unlock();
                Ok(None)
            }
            Err(TryLockError::WouldBlock) => Ok(Some(read_holder(&path).unwrap_or(LockHolder {
                pid: 0,
                what: "unknown".into(),
            }))),
            Err(TryLockError::Error(source)) => Err(LockError::Io { path, source }),
        }
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        // Clear the record before the lock is released (closing the file releases it).
        let _ = self._file.set_len(0);
        let _ = self._file.unlock();
    }
}

fn open_lock_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)
}

/// Parse the holder record, retrying briefly when it is being rewritten.
fn read_holder(path: &Path) -> Option<LockHolder> {
    for _ in 0..10 {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(path) {
            let _ = f.read_to_string(&mut s);
        }
        if let Some(h) = parse_holder(&s) {
            return Some(h);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn parse_holder(s: &str) -> Option<LockHolder> {
    let mut lines = s.lines();
    let pid = lines.next()?.trim().parse().ok()?;
    let what = lines.next().unwrap_or("").trim().to_string();
    Some(LockHolder { pid, what })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_open_file_conflicts_then_succeeds_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let first = WriterLock::acquire(dir.path(), "claw memory index", Duration::ZERO).unwrap();
        let holder = WriterLock::holder(dir.path()).unwrap().unwrap();
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.what, "claw memory index");

        // flock is per open file description: another thread's open conflicts.
        let d = dir.path().to_path_buf();
        let err = std::thread::spawn(move || {
            WriterLock::acquire(&d, "claw memory watch", Duration::from_millis(150)).unwrap_err()
        })
        .join()
        .unwrap();
        match &err {
            LockError::Held {
                pid, what, waited, ..
            } => {
                assert_eq!(*pid, std::process::id());
                assert_eq!(what, "claw memory index");
                assert!(*waited >= Duration::from_millis(150));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(err.to_string().contains("claw memory index"), "{err}");

        // A waiter gets the lock once the holder lets go.
        let d = dir.path().to_path_buf();
        let waiter = std::thread::spawn(move || {
            WriterLock::acquire(&d, "claw memory watch", Duration::from_secs(10))
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        let second = waiter.join().unwrap().unwrap();
        let holder = WriterLock::holder(dir.path()).unwrap().unwrap();
        assert_eq!(holder.what, "claw memory watch");
        drop(second);
        assert_eq!(WriterLock::holder(dir.path()).unwrap(), None);
    }

    #[test]
    fn parse_records() {
        assert_eq!(
            parse_holder("42\nclaw memory watch\n"),
            Some(LockHolder {
                pid: 42,
                what: "claw memory watch".into()
            })
        );
        assert_eq!(parse_holder(""), None);
        assert_eq!(parse_holder("x\n"), None);
    }
}
