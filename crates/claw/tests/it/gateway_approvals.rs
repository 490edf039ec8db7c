//! Approvals through a running `claw gateway` (a real process) against the
//! scripted OpenAI-compatible model, whose turn writes `note.md`: the REPL routed
//! to the gateway asks on its input exactly as the local REPL does (`y` runs the
//! write), `claw -m --yes` approves, and `claw -m` with no terminal refuses with
//! the local run's hint. The CLI has no LLM of its own here, so every answer
//! comes from the gateway. (The HTTP API's approvals are tested in-process in
//! `claw-gateway`.)

use super::gateway::{Gateway, claw, repl};
use claw_testkit::scripted_server::{ScriptedServer, openai};
use std::process::Stdio;

fn note_gateway() -> (tempfile::TempDir, ScriptedServer, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let llm = ScriptedServer::start(openai::write_note_turn());
    let gw = Gateway::start(dir.path(), Some(&llm.url()));
    (dir, llm, gw)
}

#[test]
fn the_repl_through_the_gateway_asks_on_its_input() {
    let (dir, llm, gw) = note_gateway();
    let ws = dir.path();
    let out = repl(ws, None, "repl:approve", b"write the note\ny\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", gw.log());
    assert!(stderr.contains("through the gateway"), "{stderr}");
    assert!(
        stderr.contains("run write_file: note.md? [y]es once / [a]lways (every `write_file` call this session) / [N]o"),
        "asked as the local REPL asks: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("note.md")).unwrap(),
        "written\n"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert!(
        !llm.requests()[1]
            .last_tool_result()
            .unwrap()
            .starts_with("Error")
    );
}

#[test]
fn claw_m_yes_through_the_gateway_approves() {
    let (dir, llm, gw) = note_gateway();
    let ws = dir.path();
    let out = claw(ws, None)
        .args(["--yes", "-m", "write the note"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{}", gw.log());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert_eq!(
        std::fs::read_to_string(ws.join("note.md")).unwrap(),
        "written\n"
    );
    assert!(!stderr.contains("refused"), "{stderr}");
    assert_eq!(llm.requests().len(), 2);
}

#[test]
fn claw_m_without_a_terminal_through_the_gateway_refuses_with_the_hint() {
    let (dir, llm, gw) = note_gateway();
    let ws = dir.path();
    let out = claw(ws, None)
        .args(["-m", "write the note"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{}", gw.log());
    assert!(!ws.join("note.md").exists(), "the write never ran");
    assert!(
        stderr.contains("refused write_file: note.md") && stderr.contains("pass --yes"),
        "{stderr}"
    );
    assert_eq!(
        llm.requests()[1].last_tool_result().unwrap(),
        "Error: the user declined to run `write_file`"
    );
}

/// `a` (always) in the REPL through the gateway covers the session's later
/// writes; after `/new` (a fresh session key) the next write is asked about
/// again, and `n` refuses it.
#[test]
fn always_in_the_gateway_repl_lasts_for_the_session_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = ScriptedServer::start(openai::write_file_turns(&[
        ("w1", "one.txt", "one"),
        ("w2", "two.txt", "two"),
        ("w3", "three.txt", "three"),
    ]));
    let gw = Gateway::start(ws, Some(&llm.url()));
    let out = repl(
        ws,
        None,
        "repl:always",
        b"write one\na\nwrite two\n/new\nwrite three\nn\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", gw.log());
    let asked: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("[y]es once"))
        .collect();
    assert_eq!(asked.len(), 2, "{stderr}");
    assert!(asked[0].contains("write_file: one.txt"), "{stderr}");
    assert!(asked[1].contains("write_file: three.txt"), "{stderr}");
    assert_eq!(std::fs::read_to_string(ws.join("one.txt")).unwrap(), "w1");
    assert_eq!(std::fs::read_to_string(ws.join("two.txt")).unwrap(), "w2");
    assert!(!ws.join("three.txt").exists());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "one\ntwo\nthree\n");
}
