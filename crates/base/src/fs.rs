//! The atomic write-then-rename of a small private file: claw's one way to
//! replace a file that a crash must leave either fully old or fully new (the
//! jobs file, the gateway's discovery file, a channel's state, a session's
//! rewritten metadata, the index's sidecar, the directory cache).
//!
//! The bytes go to a temporary file beside the target (same directory, so the
//! rename is one `rename(2)`), created `0600` whatever the umask — everything
//! claw writes this way is the user's own — then the file is synced, renamed
//! over the target, and the directory synced so the rename itself survives a
//! power cut ([`Durability::Durable`]). A cache that is cheap to rebuild skips
//! both syncs ([`Durability::Cache`]). A failed write removes its temporary file.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of the files written here (and so of the target after the rename).
pub const PRIVATE_FILE_MODE: u32 = 0o600;

/// How hard to make the new contents stick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Sync the file before the rename and the directory after it.
    Durable,
    /// No syncs: a cache, which a crash may lose but never tears.
    Cache,
}

/// Replace `path` with `bytes` atomically (see the module doc). The target's
/// directory must exist.
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    let tmp = temp_path(path);
    let written = write_temp(&tmp, bytes, durability).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if durability == Durability::Durable {
        sync_parent(path);
    }
    Ok(())
}

/// `.<name>.<pid>.<n>.tmp` beside `path`: unique within the process, and hidden
/// from the walks that list notes or transcripts.
fn temp_path(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

fn write_temp(tmp: &Path, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    // A leftover of a crashed process with the same pid goes; `create_new`
    // then refuses anything planted in its place (a symlink included).
    let _ = std::fs::remove_file(tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(PRIVATE_FILE_MODE)
        .open(tmp)?;
    f.write_all(bytes)?;
    if durability == Durability::Durable {
        f.sync_all()?;
    }
    Ok(())
}

/// Sync `path`'s directory (best effort: some file systems cannot).
fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn replaces_the_file_privately_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("state.json");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        for d in [Durability::Durable, Durability::Cache] {
            write_atomic(&f, b"new", d).unwrap();
            assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
            assert_eq!(mode(&f), 0o600);
        }
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        // The target is a directory: the rename fails.
        let target = dir.path().join("taken");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("x"), "x").unwrap();
        assert!(write_atomic(&target, b"new", Durability::Durable).is_err());
        assert!(target.is_dir());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // A missing directory is an error, not a panic.
        let missing = dir.path().join("no/such/file");
        assert!(write_atomic(&missing, b"x", Durability::Durable).is_err());
    }
}
