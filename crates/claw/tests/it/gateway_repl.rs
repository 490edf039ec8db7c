//! The REPL through a running `claw gateway` (`claw_testkit::echo_llm`): `/new`
//! moves to a fresh session key, leaving the old transcript as it was. (The
//! cancel endpoint the REPL's Ctrl-C uses, and `/stop`, are tested in-process in
//! `claw-gateway`.)

use super::gateway::{claw, echo_gateway};
use claw_testkit::echo_llm::answer_for;
use std::io::Write;
use std::path::Path;
use std::process::Stdio;

/// (role, content) of a transcript's messages.
fn messages(ws: &Path, key: &str) -> Vec<(String, String)> {
    claw_testkit::gateway_http::pairs(
        &ws.join("sessions")
            .join(claw_agent::session::file_name_for_key(key)),
    )
}

#[test]
fn new_in_the_repl_starts_a_fresh_session_key() {
    let (dir, llm, _gw) = echo_gateway();
    let ws = dir.path();
    let mut child = claw(ws, Some(&llm.url()))
        .args(["--session", "repl:new"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello there\n/new\nagain please\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("through the gateway"), "{stderr}");
    let new_key = stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("new session "))
        .unwrap_or_else(|| panic!("no new session line: {stderr}"))
        .trim()
        .to_string();
    assert!(new_key.starts_with("repl:new~"), "{new_key}");
    assert_eq!(
        messages(ws, "repl:new"),
        [
            ("user".to_string(), "hello there".to_string()),
            ("assistant".to_string(), answer_for("hello there")),
        ]
    );
    assert_eq!(
        messages(ws, &new_key),
        [
            ("user".to_string(), "again please".to_string()),
            ("assistant".to_string(), answer_for("again please")),
        ]
    );
}
