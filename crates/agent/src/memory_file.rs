//! MEMORY.md's one write path. Every writer of the workspace's `MEMORY.md` —
//! the scheduled consolidation ([`crate::promote`]), `/remember` and compaction
//! (the driver performs the core's [`crate::core::Effect::MergeMemoryFile`]),
//! and MCP `memory_append` — goes through [`MemoryFile::update`]: it takes the
//! memory-file lock in claw's state directory
//! ([`claw_memory_api::lock::MEMORY_FILE_LOCK`], an OS file lock that dies with
//! its process), reads the file as it is *now*, computes the new text from that
//! and writes it atomically. So a writer never merges onto a stale copy and
//! drops what another wrote meanwhile (the lost update between a `/remember`'s
//! model call and a scheduled run's write).
//!
//! MEMORY.md sits in the workspace, which a tool can write: a symlinked
//! MEMORY.md is refused, never read or written through, and the write replaces
//! the file by rename (a hard link's other names keep their old content).

pub use crate::consolidate::MEMORY_FILE;
use crate::tools::ToolError;
use crate::tools::jail::Jail;
use claw_memory_api::{LockError, WriterLock};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a writer waits for another to finish with MEMORY.md.
pub const LOCK_WAIT: Duration = Duration::from_secs(30);

/// Reading, locking or writing MEMORY.md failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryFileError {
    /// MEMORY.md is a symbolic link: not read or written through.
    #[error("{} is a symbolic link; claw does not read or write MEMORY.md through a link", .0.display())]
    Symlinked(PathBuf),
    /// Another writer held the lock past the wait, or the lock file failed.
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

fn jail_error(path: &Path, e: ToolError) -> MemoryFileError {
    MemoryFileError::Io {
        what: "read",
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    }
}

/// The workspace's MEMORY.md and where its lock lives.
#[derive(Debug, Clone)]
pub struct MemoryFile {
    workspace: PathBuf,
    lock_dir: PathBuf,
}

impl MemoryFile {
    /// MEMORY.md of `workspace`, locked in `lock_dir` (claw's state directory
    /// for that workspace: never inside the workspace).
    pub fn new(workspace: &Path, lock_dir: &Path) -> MemoryFile {
        MemoryFile {
            workspace: workspace.to_path_buf(),
            lock_dir: lock_dir.to_path_buf(),
        }
    }

    /// The file's path.
    pub fn path(&self) -> PathBuf {
        self.workspace.join(MEMORY_FILE)
    }

    /// The file's content now (empty when missing), without the lock: for
    /// what only reads (a prompt, a request to the model).
    pub fn read(&self) -> Result<String, MemoryFileError> {
        let path = self.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(MemoryFileError::Symlinked(path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
            _ => {}
        }
        // Through the jail: a link swapped in after the check above still
        // cannot lead the read out of the workspace.
        let jail = Jail::new(&self.workspace, true).map_err(|e| jail_error(&path, e))?;
        let mut file = match jail.open_read(MEMORY_FILE) {
            Ok(opened) => opened.handle,
            Err(ToolError::NotFound { .. }) => return Ok(String::new()),
            Err(e) => return Err(jail_error(&path, e)),
        };
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).map_err(|source| {
            MemoryFileError::Io {
                what: "read",
                path,
                source,
            }
        })?;
        Ok(text)
    }

    /// Under the memory-file lock (`holder` names this writer to a waiting
    /// one; waits up to `wait`): read the file as it is now, let `change`
    /// compute the new text from it (`None`: leave the file as it is), and
    /// write that atomically. Returns what `change` returned besides the text.
    /// Blocking.
    pub fn update<R>(
        &self,
        holder: &str,
        wait: Duration,
        change: impl FnOnce(&str) -> (Option<String>, R),
    ) -> Result<R, MemoryFileError> {
        let _lock = WriterLock::acquire_named(
            &self.lock_dir,
            claw_memory_api::lock::MEMORY_FILE_LOCK,
            "MEMORY.md",
            holder,
            wait,
        )?;
        let current = self.read()?;
        let (text, out) = change(&current);
        if let Some(text) = text
            && text != current
        {
            let path = self.path();
            // Checked again right before the rename: a link made meanwhile is
            // replaced by the rename, never written through, but say so.
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(MemoryFileError::Symlinked(path));
            }
            claw_base::fs::write_atomic(&path, text.as_bytes(), claw_base::fs::Durability::Durable)
                .map_err(|source| MemoryFileError::Io {
                    what: "write",
                    path,
                    source,
                })?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_merges_onto_what_another_writer_wrote_meanwhile() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let file = MemoryFile::new(ws.path(), state.path());
        std::fs::write(file.path(), "# Memory\n- a\n").unwrap();
        // Two writers that each append a line to what they read: both lines
        // survive however their runs interleave.
        let threads: Vec<_> = ["- b", "- c"]
            .into_iter()
            .map(|line| {
                let f = file.clone();
                std::thread::spawn(move || {
                    f.update("test", LOCK_WAIT, |cur| {
                        std::thread::sleep(Duration::from_millis(50));
                        (Some(format!("{cur}{line}\n")), ())
                    })
                    .unwrap()
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(
            text.contains("- a\n") && text.contains("- b\n") && text.contains("- c\n"),
            "{text}"
        );
        // Nothing to change: the file is not rewritten.
        let before = std::fs::metadata(file.path()).unwrap().modified().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        file.update("test", LOCK_WAIT, |_| (None, ())).unwrap();
        assert_eq!(
            std::fs::metadata(file.path()).unwrap().modified().unwrap(),
            before
        );
    }

    #[test]
    fn a_symlinked_memory_file_is_neither_read_nor_written() {
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("secret.md");
        std::fs::write(&target, "outside").unwrap();
        std::os::unix::fs::symlink(&target, ws.path().join(MEMORY_FILE)).unwrap();
        let file = MemoryFile::new(ws.path(), state.path());
        assert!(matches!(file.read(), Err(MemoryFileError::Symlinked(_))));
        let err = file
            .update("test", LOCK_WAIT, |_| (Some("x".into()), ()))
            .unwrap_err();
        assert!(matches!(err, MemoryFileError::Symlinked(_)), "{err}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "outside");
        // Control: a real file is written.
        std::fs::remove_file(ws.path().join(MEMORY_FILE)).unwrap();
        file.update("test", LOCK_WAIT, |_| (Some("x".into()), ()))
            .unwrap();
        assert_eq!(std::fs::read_to_string(file.path()).unwrap(), "x");
    }
}
