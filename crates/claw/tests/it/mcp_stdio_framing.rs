//! `claw mcp`'s stdio framing, driven with raw lines through the real binary: a
//! line that is not JSON gets a `-32700` reply, a 20 MB line gets a `-32600`
//! reply within seconds without the server holding it in memory, and in both
//! cases the next request is answered (the server stays up). And `memory_append`
//! through the same raw client: at most 64 KiB per call (`-32602` over it), and
//! never past `memory.max_file_bytes` (a tool error; nothing written).

use claw_testkit::{LineChild, claw_keyword_only};
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `claw mcp` with its stdout read line by line on a thread.
struct Server {
    p: LineChild,
}

impl Server {
    fn start(ws: &std::path::Path) -> Server {
        let mut cmd: Command = claw_keyword_only(ws);
        cmd.arg("mcp").stderr(Stdio::null());
        Server {
            p: LineChild::spawn(&mut cmd),
        }
    }

    fn send(&mut self, line: &str) {
        self.p.send(line);
    }

    /// The next line the server writes, as JSON.
    fn reply(&self, within: Duration) -> Value {
        self.p.wait_json("reply", within, |_| true)
    }

    fn initialize(&mut self) {
        self.send(
            &json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "0"}
                }
            })
            .to_string(),
        );
        let r = self.reply(Duration::from_secs(30));
        assert_eq!(r["id"], 1, "{r}");
        assert_eq!(r["result"]["serverInfo"]["name"], "claw", "{r}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    }

    fn tools_list(&mut self, id: u64) -> Vec<String> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string());
        let r = self.reply(Duration::from_secs(30));
        assert_eq!(r["id"], id, "{r}");
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// Peak resident memory (VmHWM), in KiB.
    fn peak_rss_kib(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.p.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// Closes stdin; the server must exit on its own, successfully.
    fn finish(mut self) {
        drop(self.p.stdin.take());
        let start = Instant::now();
        loop {
            if let Some(status) = self.p.child.try_wait().unwrap() {
                assert!(status.success(), "claw mcp exited with {status}");
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "claw mcp did not exit after stdin closed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn assert_parse_error(e: &Value) {
    assert_eq!(e["jsonrpc"], "2.0", "{e}");
    assert!(e.as_object().unwrap().contains_key("id"), "{e}");
    assert_eq!(e["id"], Value::Null, "{e}");
    assert_eq!(e["error"]["code"], -32700, "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.starts_with("Parse error"), "{e}");
}

#[test]
fn a_line_that_is_not_json_gets_a_parse_error_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path());
    // Before the handshake, and again after it.
    s.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize""#);
    assert_parse_error(&s.reply(Duration::from_secs(30)));
    s.initialize();
    s.send("this is not JSON at all");
    assert_parse_error(&s.reply(Duration::from_secs(10)));
    s.send("{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"x\":\"\u{1}\"}");
    assert_parse_error(&s.reply(Duration::from_secs(10)));
    let tools = s.tools_list(3);
    assert!(tools.contains(&"memory_search".to_string()), "{tools:?}");
    // Valid JSON that is not a JSON-RPC request: -32600 with its id.
    s.send(r#"{"jsonrpc":"2.0","id":4,"method":42}"#);
    let e = s.reply(Duration::from_secs(10));
    assert_eq!(
        (e["id"].clone(), e["error"]["code"].clone()),
        (json!(4), json!(-32600)),
        "{e}"
    );
    assert_eq!(s.tools_list(5), tools);
    s.finish();
}

#[test]
fn a_20_mb_line_gets_an_error_within_seconds_and_the_server_goes_on() {
    const BIG: usize = 20 * 1000 * 1000;
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(dir.path());
    s.initialize();
    let tools = s.tools_list(2);
    let rss_before = s.peak_rss_kib();

    // One request whose argument is 20 MB, written on its own thread (the
    // server answers before the line ends), then a normal request.
    let mut stdin = s.p.stdin.take().unwrap();
    let started = Instant::now();
    let writer = std::thread::spawn(move || {
        stdin
            .write_all(br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"memory_append","arguments":{"text":""#)
            .unwrap();
        let chunk = vec![b'a'; 1 << 20];
        let mut sent = 0;
        while sent < BIG {
            stdin.write_all(&chunk).unwrap();
            sent += chunk.len();
        }
        stdin.write_all(b"\"}}}\n").unwrap();
        stdin
            .write_all(
                json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        stdin
    });
    let e = s.reply(Duration::from_secs(20));
    let replied = started.elapsed();
    assert_eq!(e["id"], Value::Null, "{e}");
    assert_eq!(e["error"]["code"], -32600, "{e}");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("4194304 bytes"), "{msg}");
    let after = s.reply(Duration::from_secs(30));
    let answered = started.elapsed();
    assert_eq!(after["id"], 4, "{after}");
    assert_eq!(
        after["result"]["tools"].as_array().unwrap().len(),
        tools.len()
    );
    s.p.stdin = Some(writer.join().unwrap());
    eprintln!(
        "20 MB line: error reply after {replied:?}, next request answered after {answered:?}"
    );
    assert!(replied < Duration::from_secs(10), "{replied:?}");

    // Nothing of the line was appended, and the server did not hold it: its peak
    // memory grew by less than the 20 MB it was sent.
    assert!(!dir.path().join("memory").exists());
    let grown = s.peak_rss_kib().saturating_sub(rss_before);
    eprintln!("peak RSS grew by {grown} KiB");
    assert!(grown < 12 * 1024, "peak RSS grew by {grown} KiB");
    assert_eq!(s.tools_list(5), tools);
    s.finish();
}

/// `n` bytes of plain prose (nothing the redactor touches), ending in a letter.
fn prose(n: usize) -> String {
    let mut s = "note ".repeat(n / 5 + 1);
    s.truncate(n - 1);
    s.push('x');
    s
}

#[test]
fn memory_append_is_bounded_per_call_and_by_the_index_file_limit() {
    const LIMIT: u64 = 200_000;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::create_dir_all(ws.join("home/.claw")).unwrap();
    std::fs::write(
        ws.join("home/.claw/config.json"),
        json!({"memory": {"max_file_bytes": LIMIT}}).to_string(),
    )
    .unwrap();
    let mut s = Server::start(ws);
    s.initialize();
    let mut id = 1;
    let mut append = |s: &mut Server, text: &str| -> Value {
        id += 1;
        s.send(
            &json!({
                "jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "memory_append", "arguments": {"text": text}}
            })
            .to_string(),
        );
        let r = s.reply(Duration::from_secs(30));
        assert_eq!(r["id"], id, "{r}");
        r
    };
    // 64 KiB exactly: written.
    let r = append(&mut s, &prose(64 * 1024));
    assert_eq!(r["result"]["isError"], false, "{r}");
    let note = ws.join(r["result"]["structuredContent"]["path"].as_str().unwrap());
    let size = || std::fs::metadata(&note).unwrap().len();
    let first = size();
    // One byte more: refused as a bad argument naming the limit; nothing written.
    let r = append(&mut s, &prose(64 * 1024 + 1));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let msg = r["error"]["message"].as_str().unwrap();
    assert!(msg.contains("65536 bytes (64 KiB)"), "{msg}");
    assert_eq!(size(), first);
    // Two more fit under the 200,000-byte limit, the fourth would not.
    for _ in 0..2 {
        let r = append(&mut s, &prose(64 * 1024));
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
    let full = size();
    assert!(full <= LIMIT && full + 64 * 1024 > LIMIT, "{full}");
    let r = append(&mut s, &prose(64 * 1024));
    assert_eq!(r["result"]["isError"], true, "{r}");
    let msg = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        msg.contains("limit of 200000 bytes per file (memory.max_file_bytes)"),
        "{msg}"
    );
    assert!(msg.contains("start a new note"), "{msg}");
    assert_eq!(size(), full);
    // A short one still fits.
    let r = append(&mut s, "short fact");
    assert_eq!(r["result"]["isError"], false, "{r}");
    s.finish();
}

/// `memory_append` to MEMORY.md takes MEMORY.md's lock, like every other writer
/// of it: a writer that read the file, merged and rewrites it under the lock
/// (the scheduled consolidation) does not drop the appended line. Without the
/// lock the append lands at once and the rewrite from the stale copy loses it.
#[test]
fn memory_append_to_memory_md_waits_for_its_lock() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(ws.join("MEMORY.md"), "# Memory\n\n- Ada runs payments.\n").unwrap();
    let mut s = Server::start(ws);
    s.initialize();
    // Warm up: the first append opens what it needs.
    s.send(
        &json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "memory_append", "arguments": {"text": "warm up"}}
        })
        .to_string(),
    );
    let r = s.reply(Duration::from_secs(30));
    assert_eq!(r["result"]["isError"], false, "{r}");
    let state = claw_testkit::state_dir(ws);
    std::fs::create_dir_all(&state).unwrap();
    // The other writer: takes the lock, reads, (asks its model), rewrites.
    let lock = claw_memory::lock::WriterLock::acquire_named(
        &state,
        claw_memory::lock::MEMORY_FILE_LOCK,
        "MEMORY.md",
        "test consolidation",
        Duration::ZERO,
    )
    .unwrap();
    let read = std::fs::read_to_string(ws.join("MEMORY.md")).unwrap();
    s.send(
        &json!({
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "memory_append",
                       "arguments": {"text": "- Bo joined payments.", "target": "MEMORY.md"}}
        })
        .to_string(),
    );
    // Without the lock the line would land now; give it every chance to.
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end
        && !std::fs::read_to_string(ws.join("MEMORY.md"))
            .unwrap()
            .contains("Bo joined")
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    claw_base::fs::write_atomic(
        &ws.join("MEMORY.md"),
        format!("{read}- We ship on Tuesdays.\n").as_bytes(),
        claw_base::fs::Durability::Durable,
    )
    .unwrap();
    drop(lock);
    let r = s.reply(Duration::from_secs(30));
    assert_eq!(r["id"], 2, "{r}");
    assert_eq!(r["result"]["isError"], false, "{r}");
    let md = std::fs::read_to_string(ws.join("MEMORY.md")).unwrap();
    assert!(md.contains("- We ship on Tuesdays."), "{md}");
    assert!(md.contains("- Bo joined payments."), "{md}");
    assert!(md.contains("- Ada runs payments."), "{md}");
    s.finish();
}
