//! Dev-only helpers shared by every crate's integration tests: the real local
//! model's paths, the `claw` binary with a clean environment, temp workspaces, the
//! scripted LLM server and the watcher child process. A test that needs the model
//! fails loudly when it is missing — it never passes silently.
#![allow(
    dead_code,
    unsafe_code,
    clippy::unwrap_used,
    clippy::missing_panics_doc
)]

pub mod echo_llm;
pub mod engine_suite;
pub mod gateway_http;
pub mod gateway_proc;
pub mod llama;
pub mod loopback;
pub mod mcp_peers;
pub mod pg;
pub mod route_server;
pub mod scripted_server;
pub mod synapse;
pub mod telegram_api;
pub mod transcripts;
pub mod watch_proc;

use std::path::{Path, PathBuf};
use std::process::Command;

/// (model dir, ONNX Runtime library) from `CLAW_EMBED_MODEL_DIR` / `ORT_DYLIB_PATH`.
/// Panics with the command to run when they are not set: `.ci/run` sets them.
pub fn model_paths() -> (PathBuf, PathBuf) {
    let dir = std::env::var_os("CLAW_EMBED_MODEL_DIR").map(PathBuf::from);
    let ort = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
    match (dir, ort) {
        // Both graphs: int8 is the default, and a missing `model_int8.onnx`
        // would run fp32 in its place without failing anything.
        (Some(d), Some(o))
            if d.join("model.onnx").is_file()
                && d.join("model_int8.onnx").is_file()
                && o.is_file() =>
        {
            (d, o)
        }
        _ => panic!(
            "this test needs the real embedding model (model.onnx and model_int8.onnx): run \
             `claw memory install-model` (or `bash scripts/install-model.sh --int8-only DIR` for a model without \
             model_int8.onnx) and export CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH (or simply run `scripts/test.sh`, \
             which installs the model and exports both)"
        ),
    }
}

/// "Now" for every `claw` a test runs (`CLAW_NOW`): dated fixture notes are
/// written relative to it, so no test depends on the day it runs.
pub const TEST_NOW: &str = "2026-11-05T12:00:00Z";

/// The `claw` binary built for this test run: `CLAW_TEST_BIN` if set, else
/// `target/<profile>/claw` beside the running test executable (cargo builds it
/// for the `claw` crate's integration tests).
pub fn claw_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("CLAW_TEST_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current test executable");
    let dir = exe.parent().expect("deps dir");
    let dir = if dir.ends_with("deps") {
        dir.parent().expect("profile dir")
    } else {
        dir
    };
    let bin = dir.join("claw");
    assert!(
        bin.is_file(),
        "the claw binary is not built at {}: run the claw crate's tests (`cargo test -p claw`) or set CLAW_TEST_BIN",
        bin.display()
    );
    bin
}

/// A random test's seed: the number in the environment variable `var` (to replay a
/// run), else one from the clock (odd, never 0). Print it so a failure can be replayed.
pub fn seed_from_env(var: &str) -> u64 {
    env_number(var).unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            | 1
    })
}

/// The number in the environment variable `var` (a test's or a bench's knob,
/// such as `CLAW_SOAK_SECS`); `None` when it is unset or not a number.
pub fn env_number<T: std::str::FromStr>(var: &str) -> Option<T> {
    std::env::var(var).ok().and_then(|v| v.parse().ok())
}

/// The repository root (the workspace's top directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The state directory claw uses for `workspace` when `HOME` is `<workspace>/home`
/// (what every helper here sets): `<home>/.claw/state/<workspace key>`.
pub fn state_dir(workspace: impl AsRef<Path>) -> PathBuf {
    let workspace = workspace.as_ref();
    state_dir_in(&workspace.join("home"), workspace)
}

/// The state directory claw uses for `workspace` with `HOME=home` (no
/// `XDG_STATE_HOME`, no `CLAW_STATE_DIR`).
pub fn state_dir_in(home: &Path, workspace: &Path) -> PathBuf {
    claw_memory::state::state_dir_for(&home.join(".claw/state"), workspace)
}

/// The engine's configuration for a workspace the `claw` binary indexes with
/// `HOME=<workspace>/home`: defaults, and the state dir the binary uses.
pub fn cli_memory_config(
    workspace: &Path,
    embed: claw_memory::config::EmbedProvider,
) -> claw_memory::config::MemoryConfig {
    let mut c = claw_memory::config::MemoryConfig::for_workspace(workspace, embed);
    c.state_dir = state_dir(workspace);
    c
}

/// The SQLite index of `workspace` ([`state_dir`]`/memory.sqlite`).
pub fn db_path(workspace: impl AsRef<Path>) -> PathBuf {
    state_dir(workspace).join("memory.sqlite")
}

/// A `claw` command with a clean environment pointing at `workspace`, with the
/// real local model configured.
pub fn claw(workspace: &Path) -> Command {
    let (dir, ort) = model_paths();
    let mut c = claw_clean(workspace);
    c.env("CLAW_EMBED_MODEL_DIR", dir)
        .env("ORT_DYLIB_PATH", ort);
    c
}

/// A config file in the workspace's home that selects the local model's
/// `precision` (`"int8"` or `"fp32"`), for `CLAW_CONFIG`.
pub fn precision_config(workspace: &Path, precision: &str) -> PathBuf {
    let dir = workspace.join("home");
    std::fs::create_dir_all(&dir).expect("create the test home");
    let path = dir.join(format!("config-{precision}.json"));
    std::fs::write(
        &path,
        format!(r#"{{"embedding": {{"precision": "{precision}"}}}}"#),
    )
    .expect("write the test config");
    path
}

/// [`claw`] with the local model at `precision` (`"int8"` or `"fp32"`) through a
/// config file ([`precision_config`]).
pub fn claw_at(workspace: &Path, precision: &str) -> Command {
    let mut c = claw(workspace);
    c.env("CLAW_CONFIG", precision_config(workspace, precision));
    c
}

/// A `claw` command with keyword-only indexing (no model).
pub fn claw_keyword_only(workspace: &Path) -> Command {
    let mut c = claw_clean(workspace);
    c.env("CLAW_EMBED_PROVIDER", "none");
    c
}

/// The `claw` binary with only `PATH` kept from the environment, `HOME` at
/// `<workspace>/home`, the workspace and the test's "now" set.
fn claw_clean(workspace: &Path) -> Command {
    let mut c = Command::new(claw_bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", workspace.join("home"))
        .env("CLAW_WORKSPACE", workspace)
        .env("CLAW_NOW", TEST_NOW);
    c
}

/// Index `workspace` keyword-only (`claw memory index --json`), asserting success;
/// the index report.
#[track_caller]
pub fn index_keyword_only(workspace: &Path) -> serde_json::Value {
    run_json(claw_keyword_only(workspace).args(["memory", "index", "--json"]))
}

/// A keyword-only `claw` ([`claw_keyword_only`]) with `TZ=UTC`.
pub fn claw_utc(workspace: &Path) -> Command {
    let mut c = claw_keyword_only(workspace);
    c.env("TZ", "UTC");
    c
}

/// [`claw_utc`] talking to the OpenAI-compatible server at `llm` (model
/// `scripted-model`).
pub fn claw_llm(workspace: &Path, llm: &str) -> Command {
    let mut c = claw_utc(workspace);
    c.openai_llm(llm, "scripted-model");
    c
}

/// Environment for a `claw` command: the LLM settings (`CLAW_LLM_*`).
pub trait LlmEnv {
    /// Talk to the OpenAI-compatible server at `base_url` with model `model`.
    fn openai_llm(&mut self, base_url: impl AsRef<std::ffi::OsStr>, model: &str) -> &mut Self;
}

impl LlmEnv for Command {
    fn openai_llm(&mut self, base_url: impl AsRef<std::ffi::OsStr>, model: &str) -> &mut Self {
        self.env("CLAW_LLM_API", "openai")
            .env("CLAW_LLM_BASE_URL", base_url)
            .env("CLAW_LLM_MODEL", model)
    }
}

/// [`claw_llm`] with `config` written to `<ws>/config.json` and named by
/// `CLAW_CONFIG`.
pub fn claw_scripted(workspace: &Path, llm: &str, config: &serde_json::Value) -> Command {
    let cfg = workspace.join("config.json");
    std::fs::write(&cfg, config.to_string()).unwrap();
    let mut c = claw_llm(workspace, llm);
    c.env("CLAW_CONFIG", &cfg);
    c
}

/// Wait until `log()` contains `needle`, polling every 20 ms; panics with the
/// log (`whose`: "the gateway", "the channel") after `limit`.
#[track_caller]
pub fn wait_log(whose: &str, log: impl Fn() -> String, needle: &str, limit: std::time::Duration) {
    let t = std::time::Instant::now();
    loop {
        let l = log();
        if l.contains(needle) {
            return;
        }
        assert!(t.elapsed() < limit, "no `{needle}` in {whose}'s log: {l}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Run `cmd` to its end and assert that it succeeded (its stdout and stderr are
/// the failure's message); its output.
#[track_caller]
pub fn run_ok(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run the command");
    assert!(
        out.status.success(),
        "{:?} failed ({}): {}\n{}",
        cmd.get_args().collect::<Vec<_>>(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Wait at most `secs` seconds for `child` to exit (polling every 20 ms); kill
/// it and fail the test when it hangs.
#[track_caller]
pub fn wait_exit(child: &mut std::process::Child, secs: u64) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if std::time::Instant::now() > deadline {
            child.kill().ok();
            panic!("the child did not exit within {secs}s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// [`run_ok`], its standard output parsed as JSON.
#[track_caller]
pub fn run_json(cmd: &mut Command) -> serde_json::Value {
    serde_json::from_slice(&run_ok(cmd).stdout).expect("the command printed JSON")
}

/// Run `cmd` to its end (whatever its exit code) and parse its standard output
/// as JSON; panics with both outputs when it is not JSON.
#[track_caller]
pub fn stdout_json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().expect("run the command");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// True while process `pid` exists and is not a zombie (`/proc/<pid>/stat`).
pub fn process_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("X");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// Poll (every 20 ms) until process `pid` is gone, at most `within`; whether it is.
pub fn wait_process_gone(pid: u32, within: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if !process_alive(pid) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    !process_alive(pid)
}

/// The repository's `../shared` directory (data sets and tools).
pub fn shared_dir() -> PathBuf {
    let p = repo_root().join("../shared");
    assert!(p.is_dir(), "../shared is missing beside the repository");
    p
}

/// Extract `../shared/data/<archive>` (a `.tar.gz`) into `dest` (created if
/// missing) with `tar`.
pub fn extract_shared(archive: &str, dest: &Path) {
    let tarball = shared_dir().join("data").join(archive);
    assert!(tarball.is_file(), "{} is missing", tarball.display());
    std::fs::create_dir_all(dest).unwrap();
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(dest)
        .status()
        .expect("run tar");
    assert!(st.success(), "cannot extract {}", tarball.display());
}

/// Every Markdown (`.md`) file beneath `dir` (links not followed), sorted by path.
pub fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let kind = e.file_type().unwrap();
            if kind.is_dir() {
                dirs.push(e.path());
            } else if kind.is_file() && e.path().extension().is_some_and(|x| x == "md") {
                files.push(e.path());
            }
        }
    }
    files.sort();
    files
}

/// Copy every `step`-th of [`markdown_files`]`(from)` to its relative path
/// beneath `to`: a sample of a corpus.
pub fn sample_markdown(from: &Path, to: &Path, step: usize) {
    for p in markdown_files(from).iter().step_by(step) {
        let dest = to.join(p.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(p, dest).unwrap();
    }
}

/// A file of the `memory` source for chunks written straight into a store
/// (benchmarks, backend tests): `path`, content hash `sha256`, a stat of 1.
pub fn memory_file(path: &str, sha256: &str) -> claw_memory::store::FileRecord {
    claw_memory::store::FileRecord {
        source: "memory".into(),
        path: path.into(),
        sha256: sha256.into(),
        mtime_ns: 1,
        size: 1,
        indexed_bytes: 0,
        indexed_lines: 0,
    }
}

/// Every chunk's text in `store`'s index, in the order they were written.
pub fn chunk_texts(store: &claw_memory::store::Store) -> Vec<String> {
    let inspector = store.open_inspector().unwrap();
    let mut st = inspector
        .prepare("SELECT text FROM chunks ORDER BY rowid")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Write `files` (relative path, content) under `root`.
pub fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (rel, content) in files {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

/// A fresh temporary workspace holding `files` ([`write_tree`]); it is removed
/// when the returned directory is dropped.
pub fn workspace(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path(), files);
    dir
}

/// A port on 127.0.0.1 that was free a moment ago and that nothing listens
/// on: connecting to it is refused (tests of "connection refused" errors).
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port on 127.0.0.1: {e}"))
}

/// The element of the JSON array `array` whose `"name"` is `name` (a source of
/// `memory sources --json`, a section of `claw doctor --json`'s `sections`);
/// panics, showing the array, when there is none.
#[track_caller]
pub fn named(array: &serde_json::Value, name: &str) -> serde_json::Value {
    array
        .as_array()
        .unwrap_or_else(|| panic!("not a JSON array: {array}"))
        .iter()
        .find(|x| x["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("nothing named {name} in {array}"))
}

/// The section `name` of a `claw doctor --json` report. Also checks the
/// doctor's promise for every section of the report: one that is not `ok` says
/// what to do in a non-empty `hint`, and an `ok` one has `hint: null`.
#[track_caller]
pub fn doctor_section(report: &serde_json::Value, name: &str) -> serde_json::Value {
    for s in report["sections"].as_array().into_iter().flatten() {
        match (s["status"].as_str(), &s["hint"]) {
            (Some("ok"), serde_json::Value::Null) => {}
            (Some("warn" | "error"), serde_json::Value::String(h)) if !h.trim().is_empty() => {}
            _ => panic!("doctor section without a fitting hint: {s}"),
        }
    }
    named(&report["sections"], name)
}

/// The string at JSON `pointer` (`"/name"`, `"/function/name"`) in each element of
/// the JSON array `array`; panics when `array` is not an array or an element has no
/// string there.
#[track_caller]
pub fn strs<'a>(array: &'a serde_json::Value, pointer: &str) -> Vec<&'a str> {
    array
        .as_array()
        .unwrap_or_else(|| panic!("not a JSON array: {array}"))
        .iter()
        .map(|x| {
            x.pointer(pointer)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_else(|| panic!("no string at {pointer} in {x}"))
        })
        .collect()
}

/// Take `child`'s piped standard output and error and read each to its end on a
/// thread of its own (so neither pipe can fill and stall the child); join the
/// handles for the text.
pub fn read_outputs(
    child: &mut std::process::Child,
) -> (
    std::thread::JoinHandle<String>,
    std::thread::JoinHandle<String>,
) {
    fn reader(mut r: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).ok();
            s
        })
    }
    let out = child.stdout.take().expect("stdout is piped");
    let err = child.stderr.take().expect("stderr is piped");
    (reader(out), reader(err))
}

/// A fresh temporary directory with the empty subfolders `names` (say a
/// workspace `ws` and a folder `outside` it), and their paths in that order.
pub fn temp_dirs<const N: usize>(names: [&str; N]) -> (tempfile::TempDir, [PathBuf; N]) {
    let dir = tempfile::tempdir().unwrap();
    let paths = names.map(|n| {
        let p = dir.path().join(n);
        std::fs::create_dir_all(&p).unwrap();
        p
    });
    (dir, paths)
}

/// A small deterministic random source for fixtures and benches (xorshift64:
/// the same seed gives the same sequence on every machine). The seed must not be 0.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in [0, 1) with 24 random bits.
    pub fn unit(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// A number in [0, n) (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// One of `items`, which must not be empty.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The lines `r` gives (a child's stdout), read on a thread of their own and
/// received in order; the channel ends with the stream (or a read error).
pub fn line_channel(r: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Whether `child` exits within `within`, checked every `poll` (it is left
/// running when it does not).
pub fn exited_within(
    child: &mut std::process::Child,
    within: std::time::Duration,
    poll: std::time::Duration,
) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if child.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(poll);
    }
    false
}

/// A child with piped stdin and stdout whose output lines are read on a thread
/// ([`line_channel`]), such as `claw mcp` or `claw memory watch --json`; killed
/// when dropped.
pub struct LineChild {
    pub child: std::process::Child,
    /// Its stdin, until taken to close it.
    pub stdin: Option<std::process::ChildStdin>,
    /// Its stdout, line by line.
    pub lines: std::sync::mpsc::Receiver<String>,
}

impl LineChild {
    /// Spawn `cmd` (its stderr as set on it) with stdin and stdout piped.
    pub fn spawn(cmd: &mut Command) -> LineChild {
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the child");
        let lines = line_channel(child.stdout.take().unwrap());
        LineChild {
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    /// Write `line` and a newline to its stdin.
    pub fn send(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next line satisfying `pred` within `limit`, as JSON (other lines are
    /// skipped); `what` names it in the failure.
    #[track_caller]
    pub fn wait_json(
        &self,
        what: &str,
        limit: std::time::Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let end = std::time::Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no {what} within {limit:?}: {e}"));
            let v: serde_json::Value =
                serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
            if pred(&v) {
                return v;
            }
        }
    }
}

impl Drop for LineChild {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The permission bits (`mode & 0o777`) of the file at `path`.
#[track_caller]
pub fn file_mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    fn report(status: &str, hint: serde_json::Value) -> serde_json::Value {
        json!({"ok": true, "sections": [
            {"name": "a", "status": "ok", "hint": null},
            {"name": "b", "status": status, "hint": hint},
        ]})
    }

    #[test]
    fn doctor_section_accepts_hinted_problems() {
        let r = report("warn", json!("run this"));
        assert_eq!(super::doctor_section(&r, "b")["hint"], "run this");
    }

    #[test]
    #[should_panic(expected = "without a fitting hint")]
    fn doctor_section_refuses_a_problem_without_a_hint() {
        super::doctor_section(&report("error", json!(null)), "a");
    }

    #[test]
    #[should_panic(expected = "without a fitting hint")]
    fn doctor_section_refuses_an_empty_hint() {
        super::doctor_section(&report("warn", json!(" ")), "a");
    }
}
