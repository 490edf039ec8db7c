//! `claw gateway` as a child process for integration tests: started on a free
//! port (`--port 0`) from a prepared `claw` command, its stderr collected on a
//! thread (the log tests wait on and print when something fails), signals, the
//! exit waited for within a limit, and killed when dropped. The tests' own
//! wrappers add what they need on top (the discovery file and token, a client).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `claw gateway`; killed when dropped.
pub struct GatewayProc {
    pub child: Child,
    stderr: Arc<Mutex<String>>,
}

impl GatewayProc {
    /// Spawn `cmd gateway --port 0` (stdin and stdout closed, stderr collected).
    /// Returns at once: wait for readiness with [`GatewayProc::wait_log`] or
    /// [`GatewayProc::wait_until`].
    pub fn spawn(mut cmd: Command) -> GatewayProc {
        let mut child = cmd
            .args(["gateway", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn claw gateway");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().expect("piped stderr");
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        GatewayProc { child, stderr }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the gateway wrote to stderr so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Poll `ready` every 20 ms until it answers; panics with the log when the
    /// gateway exits first or `limit` passes.
    pub fn wait_until<T>(
        &mut self,
        what: &str,
        limit: Duration,
        mut ready: impl FnMut(&GatewayProc) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(v) = ready(self) {
                return v;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the gateway exited ({status}) before {what}: {}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the gateway did not get to {what} within {limit:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until the log contains `needle` (panics with the log after `limit`).
    pub fn wait_log(&self, needle: &str, limit: Duration) {
        crate::wait_log("the gateway", || self.log(), needle, limit)
    }

    /// Send `sig` to the gateway.
    pub fn signal(&self, sig: i32) {
        // SAFETY: a signal to the child this test started.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Wait for the process to exit; its status code (-1 for a signal) and how
    /// long it took. Panics with the log after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> (i32, Duration) {
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return (s.code().unwrap_or(-1), t.elapsed());
            }
            assert!(
                t.elapsed() < limit,
                "the gateway did not exit within {limit:?}: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then wait (30 s at most) for the exit.
    pub fn stop(&mut self) -> (i32, Duration) {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(30))
    }

    /// The exit status, if the gateway has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }
}

impl Drop for GatewayProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
