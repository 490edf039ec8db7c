//! The interactive REPL runs the memory watcher while it is open: driven over
//! a stdin pipe against the scripted OpenAI-compatible server, a note written
//! from outside during the session is indexed by the REPL's own watcher (its
//! heartbeat row carries the REPL's pid), the assistant's `memory_search` finds
//! it without a stat walk (a `files` row tampered so that a walk would re-index
//! it stays untouched, and an outside search reports `{"status": "fresh",
//! "checked_ms": 0, "watcher": REPL_PID}`), appending to the REPL's own
//! transcript does not stop the vouching, and after `/exit` or Ctrl-D (end of
//! input) the heartbeat row is gone and the writer lock is free — also with the
//! workspace named through a symlink and a `..`. With a
//! `claw memory watch` already running, the REPL starts no watcher of its own.

use claw_testkit::LlmEnv;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use claw_testkit::watch_proc::{DEADLINE, WatchProc, count, db, fts};
use claw_testkit::{claw_keyword_only, write_tree};
use rusqlite::Connection;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The REPL as a child: stdin kept open, stdout/stderr collected on threads.
struct Repl {
    child: Child,
    stdin: Option<ChildStdin>,
    out: Option<std::thread::JoinHandle<String>>,
    err: Option<std::thread::JoinHandle<String>>,
}

impl Repl {
    fn start(ws: &Path, server: &ScriptedServer) -> Repl {
        Repl::start_as(claw_keyword_only(ws), server)
    }

    fn start_as(mut cmd: Command, server: &ScriptedServer) -> Repl {
        cmd.openai_llm(server.url(), "scripted")
            .env("TZ", "UTC")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn the claw REPL");
        let stdin = child.stdin.take();
        let (out, err) = claw_testkit::read_outputs(&mut child);
        Repl {
            child,
            stdin,
            out: Some(out),
            err: Some(err),
        }
    }

    fn pid(&self) -> i64 {
        self.child.id() as i64
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Close stdin (Ctrl-D over a pipe).
    fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Wait for the exit (within the deadline); (success, stdout, stderr).
    fn wait(mut self) -> (bool, String, String) {
        let end = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < end, "the REPL did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let out = self.out.take().unwrap().join().unwrap();
        let err = self.err.take().unwrap().join().unwrap();
        (status.success(), out, err)
    }
}

impl Drop for Repl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll the database until `cond` holds.
fn wait_db(ws: &Path, what: &str, cond: impl Fn(&Connection) -> bool) {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(c) = db(ws)
            && cond(&c)
        {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

fn watcher_rows(c: &Connection, pid: i64, pending_zero: bool) -> i64 {
    let sql = if pending_zero {
        format!("SELECT count(*) FROM watcher WHERE pid = {pid} AND pending = 0")
    } else {
        format!("SELECT count(*) FROM watcher WHERE pid = {pid}")
    };
    count(c, &sql)
}

fn indexed_mtime(c: &Connection, path: &str) -> i64 {
    c.query_row(
        "SELECT mtime FROM files WHERE source = 'memory' AND path = ?1",
        [path],
        |r| r.get(0),
    )
    .unwrap()
}

fn wait_requests(server: &ScriptedServer, n: usize) {
    let end = Instant::now() + DEADLINE;
    while server.requests().len() < n {
        assert!(Instant::now() < end, "the model got no request {n}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn search_json(ws: &Path, query: &str) -> Value {
    claw_testkit::stdout_json(claw_keyword_only(ws).args(["memory", "search", query, "--json"]))
}

fn writer_lock_is_free(ws: &Path) -> bool {
    claw_memory::lock::WriterLock::acquire(&claw_testkit::state_dir(ws), "test", Duration::ZERO)
        .is_ok()
}

fn indexed_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    index_workspace(dir.path());
    dir
}

fn index_workspace(ws: &Path) {
    write_tree(
        ws,
        &[
            ("MEMORY.md", "# Memory\nThe anchorword lives here.\n"),
            ("memory/old.md", "# Old\nThe tamperword note.\n"),
        ],
    );
    let out = claw_keyword_only(ws)
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn the_repl_watcher_keeps_memory_fresh_and_search_skips_the_walk() {
    let dir = indexed_workspace();
    fresh_and_vouching(dir.path());
}

/// The workspace reached through a symlink and a `..`: the REPL's own
/// transcript appends are still its own (the watcher keeps vouching, the
/// assistant's search walks nothing).
#[test]
fn through_a_symlinked_workspace_the_repls_own_transcript_is_still_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join("sub")).unwrap();
    index_workspace(&real);
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    fresh_and_vouching(&dir.path().join("link/sub/.."));
}

fn fresh_and_vouching(ws: &Path) {
    let server = ScriptedServer::start([
        openai::tool_call("s1", "memory_search", &[r#"{"query": "freshword"}"#]),
        openai::text(&["It is in memory/new.md."]),
    ]);
    let mut repl = Repl::start(ws, &server);
    let pid = repl.pid();
    wait_db(ws, "the REPL's watcher idle", |c| {
        watcher_rows(c, pid, true) == 1
    });

    // A note written from outside during the session: the REPL's watcher indexes it.
    write_tree(
        ws,
        &[(
            "memory/new.md",
            "# New\nThe freshword arrives during the session.\n",
        )],
    );
    wait_db(ws, "the note indexed, the watcher idle again", |c| {
        fts(c, "freshword") == 1 && watcher_rows(c, pid, true) == 1
    });
    // The REPL's heartbeat vouches for the index: an outside search skips its walk.
    let v = search_json(ws, "freshword");
    assert_eq!(
        v["sync"],
        json!({"status": "fresh", "checked_ms": 0, "watcher": pid})
    );

    // Make a stat walk observable: a `files` row whose mtime no longer matches
    // the disk is re-indexed by any walk (restoring the mtime), never by the
    // watcher (no file event).
    let tampered = {
        let c = Connection::open(claw_testkit::db_path(ws)).unwrap();
        c.busy_timeout(Duration::from_secs(10)).unwrap();
        c.execute(
            "UPDATE files SET mtime = mtime - 1000000000 \
             WHERE source = 'memory' AND path = 'memory/old.md'",
            [],
        )
        .unwrap();
        indexed_mtime(&c, "memory/old.md")
    };

    repl.send("where is the fresh note?");
    wait_requests(&server, 2);
    let found = server.tool_result(1, "s1");
    assert!(found.contains("memory/new.md#L"), "{found}");
    assert!(found.contains("freshword arrives"), "{found}");
    assert!(!found.contains("note:"), "{found}");
    // No walk: the tampered row is as the test left it...
    let c = db(ws).unwrap();
    assert_eq!(indexed_mtime(&c, "memory/old.md"), tampered);
    // ...and the turn's own transcript appends did not stop the vouching.
    wait_db(ws, "the transcript indexed", |c| {
        count(c, "SELECT count(*) FROM files WHERE source = 'sessions'") == 1
    });
    drop(c);

    repl.send("/exit");
    let (ok, stdout, stderr) = repl.wait();
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("It is in memory/new.md."), "{stdout}");
    assert!(!stderr.contains("watcher"), "{stderr}");
    let c = db(ws).unwrap();
    assert_eq!(watcher_rows(&c, pid, false), 0, "heartbeat row left behind");
    assert!(writer_lock_is_free(ws));
    // Without the REPL, searches walk again (and the walk repairs the row).
    let v = search_json(ws, "tamperword");
    assert_eq!(v["sync"]["status"], "synced", "{}", v["sync"]);
    assert!(v["sync"].get("watcher").is_none(), "{}", v["sync"]);
}

#[test]
fn end_of_input_stops_the_repl_watcher_and_frees_the_writer_lock() {
    let dir = indexed_workspace();
    let ws = dir.path();
    let server = ScriptedServer::start([]);
    let mut repl = Repl::start(ws, &server);
    let pid = repl.pid();
    wait_db(ws, "the REPL's watcher idle", |c| {
        watcher_rows(c, pid, true) == 1
    });
    repl.close_stdin();
    let (ok, stdout, stderr) = repl.wait();
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    let c = db(ws).unwrap();
    assert_eq!(watcher_rows(&c, pid, false), 0, "heartbeat row left behind");
    assert!(writer_lock_is_free(ws));
    assert!(server.requests().is_empty());
}

#[test]
fn with_a_running_memory_watch_the_repl_starts_no_watcher() {
    let dir = indexed_workspace();
    let ws = dir.path();
    let mut w = WatchProc::start(ws);
    let watch_pid = w.child.id() as i64;
    w.wait_db("the watch's heartbeat idle", |c| {
        watcher_rows(c, watch_pid, true) == 1
    });
    let server = ScriptedServer::start([]);
    let mut repl = Repl::start(ws, &server);
    let pid = repl.pid();
    // The REPL is up (its session-start sync ran) when its greeting is out;
    // give a would-be watcher several heartbeats to show up.
    std::thread::sleep(Duration::from_secs(3));
    let c = db(ws).unwrap();
    assert_eq!(
        watcher_rows(&c, pid, false),
        0,
        "the REPL started a watcher"
    );
    assert_eq!(count(&c, "SELECT count(*) FROM watcher"), 1);
    drop(c);
    // A note written now is indexed by the running `claw memory watch`.
    write_tree(ws, &[("memory/late.md", "# Late\nThe lateword.\n")]);
    w.wait_db("indexed by claw memory watch", |c| fts(c, "lateword") == 1);
    repl.send("/exit");
    let (ok, stdout, stderr) = repl.wait();
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stderr.contains("watcher"), "it said nothing: {stderr}");
    w.stop();
}

/// A workspace indexed without the model, opened in the REPL with the model
/// available (issue 27 item 4): the REPL names the chunks without vectors
/// once, embeds them in the background (the index gains the model's vectors,
/// with a closing line), starts its watcher after, and its own
/// `memory_search` is hybrid after the swap (no `fallback: no-vectors`).
/// Control: with the index embedded, the next REPL says nothing of the kind.
#[test]
fn the_repl_embeds_chunks_without_vectors_when_the_model_loads() {
    let dir = indexed_workspace();
    let ws = dir.path();
    let model_of = |c: &Connection| -> Option<String> {
        c.query_row("SELECT value FROM meta WHERE key = 'model'", [], |r| {
            r.get(0)
        })
        .ok()
    };
    assert_eq!(
        db(ws).and_then(|c| model_of(&c)).as_deref(),
        Some(""),
        "indexed keyword-only"
    );
    let server = ScriptedServer::start([
        openai::tool_call("s1", "memory_search", &[r#"{"query": "anchorword"}"#]),
        openai::text(&["It is in MEMORY.md."]),
    ]);
    let mut repl = Repl::start_as(claw_testkit::claw(ws), &server);
    let pid = repl.pid();
    wait_db(ws, "the notes embedded", |c| {
        model_of(c).is_some_and(|m| m.contains("MiniLM"))
    });
    wait_db(ws, "the REPL's watcher, started after the catch-up", |c| {
        watcher_rows(c, pid, true) == 1
    });
    repl.send("where is the anchorword?");
    wait_requests(&server, 2);
    let result = server.requests()[1]
        .last_tool_result()
        .expect("the memory_search result");
    assert!(result.contains("anchorword"), "{result}");
    assert!(
        !result.contains("fallback"),
        "hybrid after the swap: {result}"
    );
    repl.close_stdin();
    let (ok, stdout, stderr) = repl.wait();
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(
        stderr.matches("chunks without vectors").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("embedding them in the background"),
        "{stderr}"
    );
    assert!(
        stderr.contains("memory: embedded the notes: 2 chunks"),
        "{stderr}"
    );

    let quiet = ScriptedServer::start([]);
    let mut repl = Repl::start_as(claw_testkit::claw(ws), &quiet);
    repl.close_stdin();
    let (ok, stdout, stderr) = repl.wait();
    assert!(ok, "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stderr.contains("without vectors"), "{stderr}");
    assert!(!stderr.contains("embedded the notes"), "{stderr}");
}
