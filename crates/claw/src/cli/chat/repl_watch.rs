//! The interactive REPL's own memory watcher: while `claw` (not `claw -m`) is
//! open, the memory's watcher keeps the index fresh on its own threads,
//! indexing with the REPL's query embedder (the model is loaded once per
//! process, on first need), and its heartbeat vouches for the index so the
//! assistant's `memory_search` skips the stat walk.
//!
//! It does not start when another process keeps the index (`claw memory
//! watch`, a gateway started with `--local` beside it, a writer holding the
//! lock) or none is needed (a shared index syncs inline): the REPL says
//! nothing. A watcher that fails to start, or reports an error, is said once;
//! the REPL goes on (searches then check the disk themselves). The REPL's own
//! session transcript is indexed like any file, but appending to it never
//! stops the watcher vouching (the conversation is in the model's context
//! already). The rules live in `claw_memory_api::watch::spawn_in_process`;
//! this module is the REPL's side: its status line and its blocking threads.
//!
//! A keyword-only index whose model loads now is named once on the status
//! line (the chunks without vectors, and what embeds them).
//!
//! Blocking work (opening the database, joining threads) runs in
//! `spawn_blocking`.

use claw_agent::memory_backend::EngineBackend;
use claw_memory_api::watch::{self, MemoryWatcher, WatchEvent};
use std::path::Path;
use std::sync::Arc;

/// What the REPL's watcher says it is doing in the writer lock.
pub const HOLDER: &str = "claw (REPL memory watcher)";

/// Where the watcher's one-time messages go (the REPL's status line).
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// A running REPL watcher; [`ReplWatcher::stop`] ends it (dropping it also does).
pub struct ReplWatcher {
    watcher: MemoryWatcher,
    logger: std::thread::JoinHandle<()>,
}

/// Start the watcher unless another process keeps the index (`None`);
/// an error starting it is said once through `say` and is not fatal.
/// Blocking.
pub fn start_blocking(
    backend: Arc<EngineBackend>,
    session_file: &Path,
    say: Say,
) -> Option<ReplWatcher> {
    let (tx, rx) = std::sync::mpsc::channel();
    let memory = backend.memory().map_err(anyhow::Error::from);
    if let Ok(m) = &memory {
        say_vector_gap(m, &say);
    }
    let started = memory.and_then(|memory| {
        watch::spawn_in_process(memory, HOLDER, &[session_file.to_path_buf()], tx)
            .map_err(anyhow::Error::from)
    });
    let watcher = match started {
        Ok(Ok(w)) => w,
        Ok(Err(_not_needed)) => return None,
        Err(e) => {
            say(&format!(
                "memory: the watcher did not start ({e:#}); searches check the disk instead"
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

/// A keyword-only index while the model loads now (installed after
/// indexing): said once on the status line. Learning it loads the model, which
/// happens only when chunks lack vectors. The REPL does not re-embed the notes
/// itself (its searches load no model for a keyword-only index): `claw memory
/// index`, `claw memory watch` or a gateway does. Blocking.
fn say_vector_gap(memory: &claw_memory_api::Memory, say: &Say) {
    if let Ok(Some(gap)) = memory.vector_gap() {
        say(&format!(
            "memory: {} (or keep `claw memory watch` or a gateway running: they embed them)",
            gap.describe()
        ));
    }
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
