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

/// The config of a real small-model run: a short answer in a small window, and
/// side-effect tools need a confirmation that never comes (no terminal), so
/// nonsense arguments can never write or run anything; file tools are jailed.
pub const SMALL_MODEL_CONFIG: &str = r#"{"agent": {"max_tokens": 256, "context_window": 4096, "max_iterations": 6,
                       "confirm_side_effects": true, "jail_to_workspace": true},
            "agents": {"max_subagents": 0}}"#;

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

    /// The CPU time the server has used so far (user + system, from
    /// `/proc/<pid>/stat`); zero when it cannot be read.
    pub fn cpu_time(&self) -> Duration {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) else {
            return Duration::ZERO;
        };
        // Fields after the `)` that ends the command name: state is field 3,
        // utime and stime are fields 14 and 15.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return Duration::ZERO;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = [11, 12]
            .iter()
            .filter_map(|i| f.get(*i).and_then(|v| v.parse::<u64>().ok()))
            .sum();
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        Duration::from_millis(ticks * 1000 / hz)
    }

    /// A budget for the work done on this server from now on: see [`Budget`].
    pub fn budget(&self, cpu: Duration, wall: Duration) -> Budget<'_> {
        Budget {
            server: self,
            cpu_at_start: self.cpu_time(),
            started: Instant::now(),
            cpu,
            wall,
        }
    }
}

/// What a real-model test may spend: the server's CPU time (what a model that
/// runs away, generating to its cap or calling tools again and again, burns),
/// and a wall-clock cap. CPU time does not grow when other work shares the
/// machine, so a loaded machine slows the test without failing it; a run-away
/// model fails it within `cpu` on any machine, and `wall` bounds the rest.
pub struct Budget<'a> {
    server: &'a LlamaServer,
    cpu_at_start: Duration,
    started: Instant,
    /// The server's CPU time allowed.
    pub cpu: Duration,
    /// The wall-clock time allowed.
    pub wall: Duration,
}

impl Budget<'_> {
    /// The server's CPU time spent since the budget started.
    pub fn cpu_spent(&self) -> Duration {
        self.server.cpu_time().saturating_sub(self.cpu_at_start)
    }

    /// When the wall-clock cap runs out.
    pub fn deadline(&self) -> Instant {
        self.started + self.wall
    }

    /// Why the budget is spent, if it is.
    pub fn exceeded(&self) -> Option<String> {
        let cpu = self.cpu_spent();
        let wall = self.started.elapsed();
        if cpu > self.cpu {
            Some(format!(
                "the server used {:.0} s of CPU, over the budget of {} s",
                cpu.as_secs_f64(),
                self.cpu.as_secs()
            ))
        } else if wall > self.wall {
            Some(format!(
                "{:.0} s passed, over the wall-clock cap of {} s (the server used {:.0} s of CPU)",
                wall.as_secs_f64(),
                self.wall.as_secs(),
                cpu.as_secs_f64()
            ))
        } else {
            None
        }
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

/// The test rig's bounds on the tiny model, applied by a relay between claw and
/// the server, so a real-model test takes the same few requests on every CPU.
///
/// The server forces one tool call on a fresh user turn, but the model's luck
/// still decided two things: how long the forced call's arguments ran (a string
/// may run past the token cap; the server then answers 500 "Failed to parse tool
/// call arguments"), and whether the turn after the tool result called tools
/// again until `max_iterations`. Which way it went depended on the logits, and
/// those differ between SIMD paths, so a test that retried until the model
/// behaved took 2 minutes on one CPU and over 17 on another. The relay removes
/// both: every string in the offered tools' schemas gets a `maxLength`, every
/// array a `maxItems`, every object `additionalProperties: false` (the server's
/// grammar then cannot produce a call longer than a few dozen tokens), and a
/// request that follows a tool result is sent without tools and with a small
/// `max_tokens` (the model must answer in text, briefly). OpenAI requests also get
/// a fixed `seed` (the server samples at temperature 0 anyway). Everything claw
/// sends and the server answers still crosses the wire unchanged otherwise: the
/// protocol under test (claw's request, the server's streamed tool call, claw's
/// tool result, the final answer) is the real one.
///
/// Every exchange is recorded; [`Relay::transcript`] is what a failing test
/// prints (the requests' shapes and the model's raw output).
pub struct Relay {
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// `max_tokens` of a request that follows a tool result (a short text answer).
pub const ANSWER_MAX_TOKENS: u64 = 48;
/// `maxLength` given to every string in a tool's schema.
pub const ARG_MAX_LENGTH: u64 = 16;
/// The fixed sampling seed sent with OpenAI requests.
pub const SEED: u64 = 42;

impl Relay {
    /// Starts a relay to the server on `127.0.0.1:upstream_port`.
    pub fn start(upstream_port: u16) -> Relay {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the relay");
        let port = listener.local_addr().expect("relay address").port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (l2, s2) = (log.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let log = l2.clone();
                std::thread::spawn(move || {
                    if let Err(e) = relay_one(conn, upstream_port, &log) {
                        log.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("relay error: {e}"));
                    }
                });
            }
        });
        Relay {
            port,
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every exchange so far: the request's path and bounds, the raw answer.
    pub fn transcript(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .join("\n---\n")
    }

    /// One line per exchange: the request line, the bounds applied, its time.
    pub fn summary(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|e| e.lines().next())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// How many requests reached the server.
    pub fn requests(&self) -> usize {
        self.log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|e| e.starts_with("POST ") || e.starts_with("GET "))
            .count()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wake the accept loop.
        let _ = std::net::TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Bounds a tool's JSON schema in place (see [`Relay`]).
pub fn bound_schema(s: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(obj) = s.as_object_mut() else { return };
    let ty = obj.get("type").cloned();
    let is = |t: &str| match &ty {
        Some(Value::String(x)) => x == t,
        Some(Value::Array(xs)) => xs.iter().any(|x| x == t),
        _ => false,
    };
    if is("string") && !obj.contains_key("enum") {
        let cap = obj
            .get("maxLength")
            .and_then(Value::as_u64)
            .map_or(ARG_MAX_LENGTH, |m| m.min(ARG_MAX_LENGTH));
        obj.insert("maxLength".into(), cap.into());
    }
    if is("array") {
        obj.insert("maxItems".into(), 2.into());
    }
    if is("object") || obj.contains_key("properties") {
        obj.insert("additionalProperties".into(), false.into());
    }
    for key in ["properties", "$defs", "definitions"] {
        if let Some(Value::Object(props)) = obj.get_mut(key) {
            for v in props.values_mut() {
                bound_schema(v);
            }
        }
    }
    if let Some(items) = obj.get_mut("items") {
        bound_schema(items);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(xs)) = obj.get_mut(key) {
            for v in xs {
                bound_schema(v);
            }
        }
    }
}

/// Applies the rig's bounds to one request body; returns what was done, for the log.
pub fn bound_request(path: &str, body: &mut serde_json::Value) -> String {
    use serde_json::Value;
    let anthropic = path.contains("/messages");
    let after_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|last| {
            last["role"] == "tool"
                || (last["role"] == "user"
                    && last["content"]
                        .as_array()
                        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result")))
        });
    let Some(obj) = body.as_object_mut() else {
        return "not a JSON object: sent as is".into();
    };
    if !anthropic {
        obj.insert("seed".into(), SEED.into());
    }
    if after_tool {
        obj.remove("tools");
        obj.remove("tool_choice");
        obj.insert("max_tokens".into(), ANSWER_MAX_TOKENS.into());
        return format!("after a tool result: tools dropped, max_tokens {ANSWER_MAX_TOKENS}");
    }
    let mut n = 0;
    if let Some(Value::Array(tools)) = obj.get_mut("tools") {
        for t in tools {
            let schema = if anthropic {
                t.get_mut("input_schema")
            } else {
                t.get_mut("function").and_then(|f| f.get_mut("parameters"))
            };
            if let Some(s) = schema {
                bound_schema(s);
                n += 1;
            }
        }
    }
    format!("{n} tool schema(s) bounded")
}

fn relay_one(
    mut client: std::net::TcpStream,
    upstream_port: u16,
    log: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    // The request head.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i + 4;
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(()); // the wake-up connection, or a client that gave up
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 1 << 20 {
            return Err(bad("request head over 1 MiB"));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let path = request_line.split(' ').nth(1).unwrap_or("/").to_string();
    let mut headers = Vec::new();
    let mut length = 0usize;
    let mut chunked = false;
    for l in lines.filter(|l| !l.is_empty()) {
        let Some((k, v)) = l.split_once(':') else {
            continue;
        };
        let key = k.trim().to_ascii_lowercase();
        match key.as_str() {
            "content-length" => length = v.trim().parse().map_err(|_| bad("content-length"))?,
            "transfer-encoding" => chunked = v.to_ascii_lowercase().contains("chunked"),
            "connection" | "host" | "keep-alive" => {}
            _ => headers.push(l.to_string()),
        }
    }
    let mut raw = buf[head_end..].to_vec();
    let body = if chunked {
        loop {
            if let Some(b) = dechunk(&raw) {
                break b;
            }
            let n = client.read(&mut chunk)?;
            if n == 0 {
                return Err(bad("request body cut short"));
            }
            raw.extend_from_slice(&chunk[..n]);
        }
    } else {
        while raw.len() < length {
            let n = client.read(&mut chunk)?;
            if n == 0 {
                return Err(bad("request body cut short"));
            }
            raw.extend_from_slice(&chunk[..n]);
        }
        raw.truncate(length);
        raw
    };
    let (body, what) = match serde_json::from_slice::<serde_json::Value>(&body) {
        Ok(mut v) => {
            let what = bound_request(&path, &mut v);
            (serde_json::to_vec(&v).unwrap_or(body), what)
        }
        Err(_) => (body, "no JSON body".to_string()),
    };

    let sent = Instant::now();
    let mut up = std::net::TcpStream::connect(("127.0.0.1", upstream_port))?;
    let mut out = format!("{request_line}\r\nHost: 127.0.0.1:{upstream_port}\r\n");
    for h in &headers {
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    up.write_all(out.as_bytes())?;
    up.write_all(&body)?;

    // The answer: its head with `Connection: close` (one exchange per connection),
    // then the body streamed through as it comes (SSE included).
    let mut resp = Vec::new();
    let resp_head_end = loop {
        if let Some(i) = find(&resp, b"\r\n\r\n") {
            break i + 4;
        }
        let n = up.read(&mut chunk)?;
        if n == 0 {
            return Err(bad("the server closed before answering"));
        }
        resp.extend_from_slice(&chunk[..n]);
    };
    let rhead = String::from_utf8_lossy(&resp[..resp_head_end]).to_string();
    let mut new_head = String::new();
    for l in rhead.split("\r\n").filter(|l| !l.is_empty()) {
        if !l.to_ascii_lowercase().starts_with("connection:") {
            new_head.push_str(l);
            new_head.push_str("\r\n");
        }
    }
    new_head.push_str("Connection: close\r\n\r\n");
    client.write_all(new_head.as_bytes())?;
    let mut answer = resp[resp_head_end..].to_vec();
    client.write_all(&answer)?;
    loop {
        let n = up.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        client.write_all(&chunk[..n])?;
        if answer.len() < 16 * 1024 {
            answer.extend_from_slice(&chunk[..n]);
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    let status = rhead.lines().next().unwrap_or_default().to_string();
    log.lock().unwrap_or_else(|p| p.into_inner()).push(format!(
        "{request_line} ({what}; {} bytes in, answered in {:.1} s)\n<- {status}\n{}",
        body.len(),
        sent.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&answer)
    ));
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The body of a complete chunked message, or `None` while it is incomplete.
fn dechunk(raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let line_end = at + find(&raw[at..], b"\r\n")?;
        let size_text = String::from_utf8_lossy(&raw[at..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        let start = line_end + 2;
        if size == 0 {
            return Some(out);
        }
        if raw.len() < start + size + 2 {
            return None;
        }
        out.extend_from_slice(&raw[start..start + size]);
        at = start + size + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn schemas_are_bounded_and_follow_ups_lose_their_tools() {
        let mut open = json!({
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "spawn", "parameters": {
                "type": "object",
                "properties": {"task": {"type": "string"}, "mode": {"type": "string", "enum": ["a"]},
                               "tools": {"type": "array", "items": {"type": "string"}}},
                "required": ["task"]}}}]
        });
        assert_eq!(
            bound_request("/v1/chat/completions", &mut open),
            "1 tool schema(s) bounded"
        );
        let p = &open["tools"][0]["function"]["parameters"];
        assert_eq!(p["additionalProperties"], false);
        assert_eq!(p["properties"]["task"]["maxLength"], ARG_MAX_LENGTH);
        assert!(p["properties"]["mode"].get("maxLength").is_none());
        assert_eq!(p["properties"]["tools"]["maxItems"], 2);
        assert_eq!(
            p["properties"]["tools"]["items"]["maxLength"],
            ARG_MAX_LENGTH
        );
        assert_eq!(open["seed"], SEED);

        let mut follow = json!({
            "max_tokens": 256,
            "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x"}]}],
            "tools": [{"name": "list_dir", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto"}
        });
        bound_request("/v1/messages", &mut follow);
        assert!(follow.get("tools").is_none() && follow.get("tool_choice").is_none());
        assert_eq!(follow["max_tokens"], ANSWER_MAX_TOKENS);
        assert!(follow.get("seed").is_none());
    }

    #[test]
    fn chunked_bodies_are_read_whole() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap(),
            b"abcde"
        );
        assert!(dechunk(b"3\r\nab").is_none());
    }
}
