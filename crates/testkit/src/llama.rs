//! The real llama.cpp `llama-server` with the tiny test model
//! (`../shared/tools/local-llm`), started by its own script and stopped on drop.
//!
//! One server at a time on this machine: the start script keeps its pid in one
//! file per `LLM_DIR`, so two tests starting servers at once could read each
//! other's pid (and stop the wrong server), and two single-threaded servers on two
//! cores slow every turn past its deadline. `LlamaServer::start` therefore takes an
//! exclusive `flock` on `$LLM_DIR/test-server.lock`, held until the server is
//! dropped — across test threads and test binaries alike.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// A running server; stopping it releases the machine-wide lock.
pub struct LlamaServer {
    pid: i32,
    /// Its port on 127.0.0.1.
    pub port: u16,
    _lock: File,
}

/// `../shared/tools/local-llm` (the model's scripts).
pub fn tools_dir() -> PathBuf {
    crate::repo_root().join("../shared/tools/local-llm")
}

/// Where the server is built: `LLM_DIR`, or `~/.cache/claw-local-llm-noamx` (where
/// `scripts/test.sh` builds it without AMX; see there).
pub fn llm_dir() -> PathBuf {
    match std::env::var_os("LLM_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME"))
            .join(".cache/claw-local-llm-noamx"),
    }
}

impl LlamaServer {
    /// Waits for the machine-wide lock, then starts the server and waits for its
    /// `/health`. Panics with the command to build it when it is missing.
    pub fn start() -> LlamaServer {
        let dir = llm_dir();
        let bin = dir.join("build/bin/llama-server");
        let setup = tools_dir().join("setup-local-llm.sh");
        assert!(
            bin.is_file(),
            "this test needs llama-server at {}: build it with `bash {}` \
             (about 10 minutes the first time, cached afterwards)",
            bin.display(),
            setup.display()
        );
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("test-server.lock"))
            .expect("open the llama-server test lock");
        // SAFETY: flock on a descriptor we own; blocks until the lock is ours.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());

        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = Command::new("bash")
            .arg(tools_dir().join("start-local-llm.sh"))
            .env("LLM_PORT", port.to_string())
            .env("LLM_DIR", &dir)
            .output()
            .expect("run start-local-llm.sh");
        // Under the lock the pid file is this start's.
        let pid: i32 = std::fs::read_to_string(dir.join("server.pid"))
            .expect("server.pid")
            .trim()
            .parse()
            .expect("a pid");
        let server = LlamaServer {
            pid,
            port,
            _lock: lock,
        };
        assert!(
            out.status.success(),
            "start-local-llm.sh failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        server
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // SAFETY: signals to the server this value started.
        unsafe {
            libc::kill(self.pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && unsafe { libc::kill(self.pid, 0) } == 0 {
            std::thread::sleep(Duration::from_millis(50));
        }
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        // The lock is released when `_lock` closes, after the server is gone.
    }
}

/// A workspace at a fixed path for attempt `attempt` of test `name`, emptied
/// first; removed when the returned guard drops.
///
/// The tiny model runs at temperature 0 on one thread, so its answer is a
/// function of the prompt, which holds the workspace path (and the date, pinned
/// by `CLAW_NOW`). Fixed paths make a test's sequence of attempts the same on every
/// run instead of a lottery over random temp names; the machine-wide lock held by
/// the server makes the paths exclusive.
pub fn fixed_workspace(_server: &LlamaServer, name: &str, attempt: usize) -> FixedDir {
    let path = std::env::temp_dir().join(format!("claw-llm-{name}-{attempt}"));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).expect("create the test workspace");
    FixedDir(path)
}

/// A directory removed on drop.
pub struct FixedDir(PathBuf);

impl FixedDir {
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for FixedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
