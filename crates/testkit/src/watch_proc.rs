//! Helpers for watcher tests: a `claw memory watch --json` child process with its
//! event stream, and polling the database with a deadline (never fixed sleeps).

use rusqlite::{Connection, OpenFlags};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// How long any single condition may take to become true on a loaded machine.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct WatchProc {
    pub child: Child,
    pub workspace: PathBuf,
    rx: Receiver<Value>,
    /// Every event received so far.
    pub events: Vec<Value>,
}

impl WatchProc {
    /// Start a keyword-only watcher on `workspace` and wait until its start-up
    /// rescan has been applied.
    pub fn start(workspace: &Path) -> WatchProc {
        let mut child = crate::claw_keyword_only(workspace)
            .args(["memory", "watch", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn claw memory watch");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        if tx.send(v).is_err() {
                            break;
                        }
                    }
                    Err(e) => panic!("watch printed a non-JSON line {line:?}: {e}"),
                }
            }
        });
        let mut w = WatchProc {
            child,
            workspace: workspace.to_path_buf(),
            rx,
            events: Vec::new(),
        };
        w.wait_event("start-up rescan", |e| {
            e["event"] == "synced" && e["rescan"] == true
        });
        w
    }

    /// Collect events until one matches `pred` (panics after [`DEADLINE`]).
    pub fn wait_event(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(v) => {
                    self.events.push(v.clone());
                    if v["event"] == "error" {
                        eprintln!("watcher error event: {v}");
                    }
                    if pred(&v) {
                        return v;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("timed out waiting for {what}; events: {:#?}", self.events)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "watcher exited while waiting for {what}; events: {:#?}",
                        self.events
                    )
                }
            }
        }
    }

    /// Take events that arrived without waiting.
    pub fn drain(&mut self) {
        while let Ok(v) = self.rx.try_recv() {
            self.events.push(v);
        }
    }

    /// Poll the database until `cond` holds (panics after [`DEADLINE`]).
    pub fn wait_db(&mut self, what: &str, cond: impl Fn(&Connection) -> bool) {
        let end = Instant::now() + DEADLINE;
        let mut pause = Duration::from_millis(20);
        loop {
            if let Some(c) = db(&self.workspace)
                && cond(&c)
            {
                self.drain();
                return;
            }
            if Instant::now() > end {
                self.drain();
                panic!("timed out waiting for {what}; events: {:#?}", self.events);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(mut self) -> Vec<Value> {
        // SAFETY: plain kill(2) on our own child.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
        let status = self.child.wait().unwrap();
        while let Ok(v) = self.rx.recv_timeout(Duration::from_secs(5)) {
            self.events.push(v);
        }
        assert!(status.success(), "watch exited with {status}");
        std::mem::take(&mut self.events)
    }
}

impl Drop for WatchProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A read-only connection to the workspace's database, if it exists yet.
pub fn db(workspace: &Path) -> Option<Connection> {
    let p = crate::db_path(workspace);
    let c = Connection::open_with_flags(&p, OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    c.busy_timeout(Duration::from_secs(5)).ok()?;
    Some(c)
}

/// Number of chunks whose FTS5 word index matches `term` (looked up as a query
/// would be: stemmed, see `claw_memory::words`).
pub fn fts(c: &Connection, term: &str) -> i64 {
    c.query_row(
        "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?1",
        [format!("\"{}\"", claw_memory::words::query_term(term))],
        |r| r.get(0),
    )
    .unwrap_or(-1)
}

/// Indexed paths of a source, sorted.
pub fn paths(c: &Connection, source: &str) -> Vec<String> {
    let mut s = c
        .prepare("SELECT path FROM files WHERE source = ?1 ORDER BY path")
        .unwrap();
    s.query_map([source], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Count of rows of a query with no parameters.
pub fn count(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap_or(-1)
}
