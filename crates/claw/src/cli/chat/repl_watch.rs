//! The interactive REPL's own memory watcher: while `claw` (not `claw -m`) is
//! open, the same watcher actor `claw memory watch` runs keeps the index fresh
//! on its own threads, indexing with the REPL's query embedder (the model is
//! loaded once per process, on first need), and its heartbeat vouches for the
//! index so the assistant's `memory_search` skips the stat walk.
//!
//! It does not start when another watcher is alive for the workspace (`claw
//! memory watch`, a gateway started with `--local` beside it) or another
//! process holds the writer lock: that process keeps the index fresh, and the
//! REPL says nothing. A watcher that fails to start, or reports an error, is
//! logged once; the REPL goes on (searches then check the disk themselves).
//! The REPL's own session transcript is indexed like any file, but appending
//! to it never stops the watcher vouching (the conversation is in the model's
//! context already).
//!
//! Blocking work (opening the database, joining threads) runs in
//! `spawn_blocking`.

use claw_agent::memory_backend::EngineBackend;
use claw_memory::freshness::{self, FileRef, SyncError, SyncOutcome};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use claw_memory::walk::SOURCE_SESSIONS;
use claw_memory::watch::{self, ApplyChanges, BATCH_LOCK_WAIT, WatchEvent, WatchOptions, Watcher};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What the REPL's watcher says it is doing in the writer lock.
pub const HOLDER: &str = "claw (REPL memory watcher)";

/// Where the watcher's one-time messages go (the REPL's status line).
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// A running REPL watcher; [`ReplWatcher::stop`] ends it (dropping it also does).
pub struct ReplWatcher {
    watcher: Watcher,
    logger: std::thread::JoinHandle<()>,
}

/// Why no watcher was started (the REPL stays silent about all of these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotStarted {
    /// Another process's watcher is alive (its heartbeat is recent).
    OtherWatcher { pid: i64 },
    /// Another process holds the writer lock right now.
    WriterBusy { pid: u32 },
}

/// The indexing side: the indexer's targeted entry point under the writer
/// lock (per batch, like `claw memory watch`), with the REPL's embedder.
struct ReplSink {
    backend: Arc<EngineBackend>,
}

impl ApplyChanges for ReplSink {
    fn apply(&mut self, store: &mut Store, files: &[FileRef]) -> Result<SyncOutcome, SyncError> {
        // The model loads here on the first batch that needs it (shared with
        // the REPL's searches); if it cannot load, `None` never rebuilds an
        // embedded index keyword-only: the identity check refuses first.
        let embedder = self.backend.index_embedder().ok().flatten();
        if let Some(mismatch) = freshness::identity_mismatch(store, embedder)? {
            return Err(SyncError::Identity(mismatch));
        }
        let settings = self.backend.settings();
        let lock = WriterLock::acquire(&settings.state_dir(), HOLDER, BATCH_LOCK_WAIT)?;
        freshness::apply_paths(store, settings, embedder, files, &lock)
    }
}

/// Whether another process keeps (or is updating) this workspace's index.
pub fn other_keeper(backend: &EngineBackend) -> Result<Option<NotStarted>, anyhow::Error> {
    let settings = backend.settings();
    let me = std::process::id();
    let store = Store::open(&settings.db_path())?;
    if let Some(w) = watch::watcher_status(&store)?
        && w.alive
        && w.pid != me as i64
    {
        return Ok(Some(NotStarted::OtherWatcher { pid: w.pid }));
    }
    if let Some(h) = WriterLock::holder(&settings.state_dir())?
        && h.pid != me
    {
        return Ok(Some(NotStarted::WriterBusy { pid: h.pid }));
    }
    Ok(None)
}

/// The session transcript as a file of the `sessions` source, if it lies in
/// the workspace. Both paths are canonicalised first (the transcript may not
/// exist yet: then its directory is), so a workspace reached through a symlink
/// or a `..` still finds its own transcript.
fn own_transcript(workspace: &Path, session_file: &Path) -> Option<FileRef> {
    let workspace = canonical(workspace);
    let session_file = match session_file.canonicalize() {
        Ok(p) => p,
        Err(_) => match (session_file.parent(), session_file.file_name()) {
            (Some(dir), Some(name)) => canonical(dir).join(name),
            _ => session_file.to_path_buf(),
        },
    };
    let rel = session_file.strip_prefix(&workspace).ok()?;
    let rel = rel
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect::<Option<Vec<_>>>()?
        .join("/");
    Some(FileRef::new(SOURCE_SESSIONS, rel))
}

/// `path` with symlinks and `..` resolved, or as given when it cannot be.
fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

/// Start the watcher unless another process keeps the index (`Ok(None)`);
/// an error starting it is said once through `say` and is not fatal.
/// Blocking.
pub fn start_blocking(
    backend: Arc<EngineBackend>,
    session_file: &Path,
    say: Say,
) -> Option<ReplWatcher> {
    // On a shared PostgreSQL index every search syncs inline (a batch of
    // stat-level checks against this workspace's rows): no REPL watcher.
    if !matches!(
        backend.settings().backend,
        claw_memory::config::Backend::Sqlite
    ) {
        return None;
    }
    match other_keeper(&backend) {
        Ok(Some(_)) => return None,
        Ok(None) => {}
        Err(e) => {
            say(&format!(
                "memory: the watcher did not start ({e:#}); searches check the disk instead"
            ));
            return None;
        }
    }
    let settings = backend.settings().clone();
    let own: BTreeSet<FileRef> = own_transcript(&settings.workspace, session_file)
        .into_iter()
        .collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = ReplSink { backend };
    let watcher = match watch::spawn_with_own_files(
        settings,
        WatchOptions::default(),
        Box::new(sink),
        tx,
        own,
    ) {
        Ok(w) => w,
        Err(e) => {
            say(&format!(
                "memory: the watcher did not start ({e}); searches check the disk instead"
            ));
            return None;
        }
    };
    // Events: silent, except the first error (then the watcher keeps retrying
    // quietly, or has ended; either way searches fall back to the walk).
    let logger = std::thread::spawn(move || {
        let mut said = false;
        for ev in rx {
            if let WatchEvent::Error { message } = ev
                && !said
            {
                said = true;
                say(&format!(
                    "memory watcher: {message} (further watcher errors are not shown; \
                     searches check the disk while it is behind)"
                ));
            }
        }
    });
    Some(ReplWatcher { watcher, logger })
}

/// [`start_blocking`] off the async runtime.
pub async fn start(
    backend: Arc<EngineBackend>,
    session_file: std::path::PathBuf,
    say: Say,
) -> Option<ReplWatcher> {
    let said = say.clone();
    match tokio::task::spawn_blocking(move || start_blocking(backend, &session_file, say)).await {
        Ok(w) => w,
        Err(e) => {
            said(&format!("memory: the watcher did not start ({e})"));
            None
        }
    }
}

impl ReplWatcher {
    /// Stop: finish the batch in flight, remove the heartbeat row, join the
    /// threads (the writer lock is free afterwards). Blocking.
    pub fn stop_blocking(self) {
        let _ = self.watcher.stop();
        let _ = self.logger.join();
    }

    /// [`ReplWatcher::stop_blocking`] off the async runtime.
    pub async fn stop(self) {
        let _ = tokio::task::spawn_blocking(move || self.stop_blocking()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transcript_is_a_file_of_the_sessions_source() {
        let ws = Path::new("/ws");
        assert_eq!(
            own_transcript(ws, Path::new("/ws/sessions/cli_default.jsonl")),
            Some(FileRef::new("sessions", "sessions/cli_default.jsonl"))
        );
        assert_eq!(own_transcript(ws, Path::new("/elsewhere/s.jsonl")), None);
    }

    #[test]
    fn a_symlinked_or_dotted_workspace_still_finds_its_transcript() {
        let dir = tempfile::tempdir().expect("tempdir");
        let real = dir.path().join("real");
        std::fs::create_dir_all(real.join("sessions")).expect("mkdir");
        std::fs::create_dir_all(real.join("sub")).expect("mkdir");
        std::os::unix::fs::symlink(&real, dir.path().join("link")).expect("symlink");
        let want = Some(FileRef::new("sessions", "sessions/cli_default.jsonl"));
        // The transcript named through the real path, the workspace through the link.
        let file = real.join("sessions/cli_default.jsonl");
        assert_eq!(own_transcript(&dir.path().join("link"), &file), want);
        // The other way round, with a `..`, and before the file exists.
        let ws = dir.path().join("link/sub/..");
        assert_eq!(
            own_transcript(&real, &ws.join("sessions/cli_default.jsonl")),
            want
        );
        std::fs::write(&file, "").expect("write");
        assert_eq!(own_transcript(&ws, &file), want);
    }
}
