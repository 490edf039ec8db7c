//! The file jail is on by default: the real `claw -m` binary, with no
//! `jail_to_workspace` anywhere in its configuration, driven by the scripted
//! OpenAI-compatible server on 127.0.0.1 through a read of a symlink to
//! /etc/passwd, a write through a dangling symlink and an edit of a hard link to
//! an outside file. Each comes back to the model as an error and nothing outside
//! the workspace is read or changed; `"jail_to_workspace": false` turns it off.

use claw_testkit::scripted_server;

use scripted_server::{ScriptedServer, openai};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const SECRET: &str = "TOP SECRET\n";

fn claw(ws: &Path, home: &Path, server: &str) -> Command {
    let mut c = claw_testkit::claw_llm(ws, server);
    c.env("HOME", home).stdin(Stdio::null());
    c
}

/// `tmp/ws` with hostile links into `tmp/outside`, and a config file in
/// `tmp/home/.claw/config.json` holding `agent` (side effects allowed without a
/// prompt, so only the jail decides).
fn setup(agent: &str) -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(home.join(".claw")).unwrap();
    std::fs::write(
        home.join(".claw/config.json"),
        format!(r#"{{"agent": {agent}}}"#),
    )
    .unwrap();
    std::fs::write(outside.join("target.txt"), SECRET).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ws.join("passwd-link")).unwrap();
    std::os::unix::fs::symlink(outside.join("created.txt"), ws.join("dangling")).unwrap();
    std::fs::hard_link(outside.join("target.txt"), ws.join("hard.txt")).unwrap();
    (tmp, ws, outside, home)
}

fn script() -> ScriptedServer {
    ScriptedServer::start([
        openai::tool_call("c1", "read_file", &[r#"{"path": "passwd-link"}"#]),
        openai::tool_call(
            "c2",
            "write_file",
            &[r#"{"path": "dangling", "content": "pwned\n"}"#],
        ),
        openai::tool_call(
            "c3",
            "edit_file",
            &[r#"{"path": "hard.txt", "old_text": "TOP", "new_text": "NOT"}"#],
        ),
        openai::text(&["done"]),
    ])
}

/// The tool results the model received, in order.
fn tool_results(server: &ScriptedServer) -> Vec<String> {
    server.last_tool_results()
}

#[test]
fn the_jail_is_on_by_default_for_the_assistant() {
    let (_tmp, ws, outside, home) = setup(r#"{"confirm_side_effects": false}"#);
    let server = script();
    let out = claw(&ws, &home, &server.url())
        .args(["-m", "try to escape"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    let results = tool_results(&server);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].contains("outside the workspace"),
        "{}",
        results[0]
    );
    assert!(!results[0].contains("root:"), "{}", results[0]);
    assert!(
        results[1].contains("outside the workspace"),
        "{}",
        results[1]
    );
    assert!(results[2].contains("hard link"), "{}", results[2]);
    assert!(!outside.join("created.txt").exists());
    assert_eq!(
        std::fs::read_to_string(outside.join("target.txt")).unwrap(),
        SECRET
    );
    let session = std::fs::read_to_string(ws.join("sessions/cli_default.jsonl")).unwrap();
    assert!(
        !session.contains("root:x:0"),
        "the transcript holds no outside text"
    );
}

#[test]
fn jail_to_workspace_false_turns_it_off() {
    let (_tmp, ws, outside, home) =
        setup(r#"{"confirm_side_effects": false, "jail_to_workspace": false}"#);
    let server = script();
    claw_testkit::run_ok(claw(&ws, &home, &server.url()).args(["-m", "try to escape"]));
    let results = tool_results(&server);
    assert!(results[0].contains("root:"), "{}", results[0]);
    assert_eq!(
        std::fs::read_to_string(outside.join("created.txt")).unwrap(),
        "pwned\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("target.txt")).unwrap(),
        "NOT SECRET\n"
    );
}
