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
//! A keyword-only index whose model loads now (installed after indexing) is
//! named once on the status line, then embedded on a thread of its own
//! ([`claw_memory_api::Memory::catch_up_vectors`]: rebuilt aside and swapped
//! in, so the REPL's searches go on, keyword-only until the swap), with a
//! progress line every few seconds; the watcher starts once it is done (its
//! batches would only wait for the catch-up's writer lock). The REPL's
//! searches load the model on their first call after the swap.
//!
//! Blocking work (opening the database, joining threads) runs in
//! `spawn_blocking`.

use claw_agent::memory_backend::EngineBackend;
use claw_memory_api::watch::{self, MemoryWatcher, WatchEvent};
use claw_memory_api::{Memory, Progress};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the REPL's watcher says it is doing in the writer lock.
pub const HOLDER: &str = "claw (REPL memory watcher)";

/// What the REPL's catch-up says it is doing in the writer lock.
const HOLDER_CATCH_UP: &str = "claw (REPL, embedding the notes)";

/// Where the watcher's one-time messages go (the REPL's status line).
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// A running REPL watcher; [`ReplWatcher::stop`] ends it (dropping it also does).
pub struct ReplWatcher {
    slot: Arc<Mutex<Slot>>,
}

/// The watcher once it runs (at once, or after the catch-up).
#[derive(Default)]
struct Slot {
    /// The REPL is closing: a catch-up that ends now starts no watcher.
    stopping: bool,
    running: Option<Running>,
}

struct Running {
    watcher: MemoryWatcher,
    logger: std::thread::JoinHandle<()>,
}

/// How long the catch-up waits for another writer before it gives up.
const CATCH_UP_LOCK_WAIT: Duration = Duration::from_secs(600);

/// How often the catch-up says how far it got.
const CATCH_UP_EVERY: Duration = Duration::from_secs(10);

/// Start the watcher unless another process keeps the index (`None`);
/// an error starting it is said once through `say` and is not fatal. A
/// keyword-only index whose model loads now is embedded first, on a thread
/// of its own (this returns at once). Blocking.
pub fn start_blocking(
    backend: Arc<EngineBackend>,
    session_file: &Path,
    say: Say,
) -> Option<ReplWatcher> {
    let memory = match backend.memory() {
        Ok(m) => m,
        Err(e) => {
            say(&format!(
                "memory: the watcher did not start ({e:#}); searches check the disk instead"
            ));
            return None;
        }
    };
    let slot = Arc::new(Mutex::new(Slot::default()));
    let own = session_file.to_path_buf();
    match memory.vector_gap() {
        Ok(Some(gap)) => {
            say(&format!(
                "memory: {} chunks without vectors: the embedding model {} loads now; \
                 embedding them in the background (search is keyword-only for them until then)",
                gap.chunks, gap.model
            ));
            let later = slot.clone();
            let spawned = std::thread::Builder::new()
                .name("claw-repl-catch-up".into())
                .spawn(move || {
                    catch_up(&memory, &say);
                    let running = watch_blocking(memory, &own, &say);
                    let mut slot = later.lock().unwrap_or_else(|p| p.into_inner());
                    if slot.stopping {
                        drop(slot);
                        if let Some(r) = running {
                            r.stop();
                        }
                    } else {
                        slot.running = running;
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!("cannot start the catch-up thread: {e}");
                return None;
            }
        }
        _ => {
            let running = watch_blocking(memory, &own, &say)?;
            slot.lock().unwrap_or_else(|p| p.into_inner()).running = Some(running);
        }
    }
    Some(ReplWatcher { slot })
}

/// Start the watcher itself (see [`start_blocking`]).
fn watch_blocking(memory: Arc<Memory>, session_file: &Path, say: &Say) -> Option<Running> {
    let (tx, rx) = std::sync::mpsc::channel();
    let started = watch::spawn_in_process(memory, HOLDER, &[session_file.to_path_buf()], tx);
    let watcher = match started {
        Ok(Ok(w)) => w,
        Ok(Err(_not_needed)) => return None,
        Err(e) => {
            say(&format!(
                "memory: the watcher did not start ({:#}); searches check the disk instead",
                anyhow::Error::from(e)
            ));
            return None;
        }
    };
    // Events: silent, except the first error (then the watcher keeps retrying
    // quietly, or has ended; either way searches fall back to the walk).
    let say = say.clone();
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
    Some(Running { watcher, logger })
}

/// Embed a keyword-only index's chunks with the model that loads now (under
/// the writer lock, rebuilt aside), saying how far it got every
/// [`CATCH_UP_EVERY`] and how it ended. Blocking, and long on a big workspace.
fn catch_up(memory: &Memory, say: &Say) {
    let started = Instant::now();
    let files = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let last = Mutex::new(Instant::now());
    let progress = |p: Progress| match p {
        Progress::Planned { to_read, .. } => files.store(to_read, Ordering::Relaxed),
        Progress::File { .. } => {
            let n = done.fetch_add(1, Ordering::Relaxed) + 1;
            let mut at = last.lock().unwrap_or_else(|p| p.into_inner());
            if at.elapsed() >= CATCH_UP_EVERY {
                *at = Instant::now();
                say(&format!(
                    "memory: embedding the notes: {n}/{} files",
                    files.load(Ordering::Relaxed)
                ));
            }
        }
    };
    match memory.catch_up_vectors(HOLDER_CATCH_UP, CATCH_UP_LOCK_WAIT, &progress) {
        Ok(Some(r)) => say(&format!(
            "memory: embedded the notes: {} chunks ({} embedded, {} from the cache) in {:.1} s; search is hybrid",
            r.chunks_added,
            r.embeddings_computed,
            r.cache_hits,
            started.elapsed().as_secs_f64()
        )),
        // Another writer embedded them meanwhile, or the model went away.
        Ok(None) => {}
        Err(e) => say(&format!(
            "memory: the notes were not embedded ({}); run `claw memory index`",
            claw_memory_api::error_chain(&e)
        )),
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

impl Running {
    fn stop(self) {
        let _ = self.watcher.stop();
        let _ = self.logger.join();
    }
}

impl ReplWatcher {
    /// Stop: finish the batch in flight, remove the heartbeat row, join the
    /// threads (the writer lock is free afterwards). A catch-up still running
    /// is not waited for: its index is built aside, and the process's exit
    /// drops it (the next start embeds again). Blocking.
    pub fn stop_blocking(self) {
        let running = {
            let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            slot.stopping = true;
            slot.running.take()
        };
        if let Some(r) = running {
            r.stop();
        }
    }

    /// [`ReplWatcher::stop_blocking`] off the async runtime.
    pub async fn stop(self) {
        let _ = tokio::task::spawn_blocking(move || self.stop_blocking()).await;
    }
}
