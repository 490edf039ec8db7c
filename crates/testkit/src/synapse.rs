//! A real Matrix homeserver for tests: Synapse (PyPI `matrix-synapse`, installed
//! by `scripts/setup-synapse.sh`, found through `CLAW_SYNAPSE_PYTHON`) started
//! per test in a temp dir on 127.0.0.1 on a free port, with SQLite, registration
//! by shared secret and rate limits raised out of the way. Stopped on drop.
//! Under `CI=true` a missing Synapse fails the test; elsewhere `start` returns
//! None with a loud message.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running homeserver (killed on drop).
pub struct Synapse {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// Its server name (user ids are `@name:localhost`).
    pub server_name: String,
    python: PathBuf,
    secret: String,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

const RC: &str = "{per_second: 1000, burst_count: 1000}";

impl Synapse {
    /// Start a fresh homeserver, or None (outside CI) when Synapse is not installed.
    pub fn start() -> Option<Synapse> {
        let python = std::env::var_os("CLAW_SYNAPSE_PYTHON").map(PathBuf::from);
        let python = match python {
            Some(p) if p.is_file() => p,
            _ => {
                let msg = "CLAW_SYNAPSE_PYTHON is not set: install Synapse with \
                           `. scripts/setup-synapse.sh` (scripts/test.sh does it)";
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("{msg}");
                }
                eprintln!("SKIPPED (not under CI): {msg}");
                return None;
            }
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path().display().to_string();
        let port = free_port();
        let secret = format!("claw-test-secret-{port}");
        let yaml = format!(
            r#"server_name: "localhost"
pid_file: "{d}/homeserver.pid"
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: "{d}/homeserver.db"
media_store_path: "{d}/media_store"
signing_key_path: "{d}/signing.key"
registration_shared_secret: "{secret}"
enable_registration: false
report_stats: false
trusted_key_servers: []
suppress_key_server_warning: true
presence:
  enabled: false
rc_message: {RC}
rc_registration: {RC}
rc_registration_token_validity: {RC}
rc_login:
  address: {RC}
  account: {RC}
  failed_attempts: {RC}
rc_joins:
  local: {RC}
  remote: {RC}
rc_joins_per_room: {RC}
rc_invites:
  per_room: {RC}
  per_user: {RC}
  per_issuer: {RC}
rc_room_creation: {RC}
rc_presence:
  per_user: {RC}
"#
        );
        let cfg = dir.path().join("homeserver.yaml");
        std::fs::write(&cfg, yaml).expect("write homeserver.yaml");
        let keys = Command::new(&python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(&cfg)
            .arg("--generate-keys")
            .current_dir(dir.path())
            .output()
            .expect("run synapse --generate-keys");
        assert!(
            keys.status.success(),
            "synapse --generate-keys failed: {}",
            String::from_utf8_lossy(&keys.stderr)
        );
        let log = std::fs::File::create(dir.path().join("stderr.log")).expect("log file");
        let child = Command::new(&python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(&cfg)
            .current_dir(dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start synapse");
        let mut s = Synapse {
            child,
            base_url: format!("http://127.0.0.1:{port}"),
            server_name: "localhost".into(),
            python,
            secret,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Ok(Some(status)) = s.child.try_wait() {
                panic!(
                    "synapse exited ({status}) before it was ready: {}",
                    s.log_tail()
                );
            }
            if ureq::get(&format!("{}/_matrix/client/versions", s.base_url))
                .call()
                .is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "synapse not ready after 90 s: {}",
                s.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Some(s)
    }

    /// A client-server API call as the user with `token` (`path` after
    /// `/_matrix/client/v3`); the JSON answer (panics on an error status).
    pub fn api(
        &self,
        token: &str,
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let url = format!("{}/_matrix/client/v3{path}", self.base_url);
        let auth = format!("Bearer {token}");
        let resp = match (method, body) {
            ("GET", _) => ureq::get(&url).header("Authorization", &auth).call(),
            ("POST", b) => ureq::post(&url)
                .header("Authorization", &auth)
                .send_json(b.unwrap_or(serde_json::json!({}))),
            ("PUT", b) => ureq::put(&url)
                .header("Authorization", &auth)
                .send_json(b.unwrap_or(serde_json::json!({}))),
            (m, _) => panic!("unsupported method {m}"),
        };
        let mut resp = resp.unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        resp.body_mut().read_json().expect("json answer")
    }

    /// The end of Synapse's log (for failure messages).
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Register `name` with the shared secret (`register_new_matrix_user`), log
    /// in, and return `(user id, access token)`.
    pub fn register(&self, name: &str, password: &str) -> (String, String) {
        let out = Command::new(&self.python)
            .args([
                "-m",
                "synapse._scripts.register_new_matrix_user",
                "-u",
                name,
                "-p",
                password,
                "--no-admin",
                "-k",
                &self.secret,
                &self.base_url,
            ])
            .output()
            .expect("run register_new_matrix_user");
        assert!(
            out.status.success(),
            "registering {name} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let body = serde_json::json!({
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": name},
            "password": password,
        });
        let mut resp = ureq::post(&format!("{}/_matrix/client/v3/login", self.base_url))
            .send_json(&body)
            .expect("login");
        let v: serde_json::Value = resp.body_mut().read_json().expect("login json");
        (
            v["user_id"].as_str().expect("user_id").to_string(),
            v["access_token"]
                .as_str()
                .expect("access_token")
                .to_string(),
        )
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
