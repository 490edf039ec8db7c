//! The REPL through a running `claw gateway` (`claw_testkit::echo_llm`): `/new`
//! moves to a fresh session key, leaving the old transcript as it was; every
//! other command of the table works too. (The
//! cancel endpoint the REPL's Ctrl-C uses, and `/stop`, are tested in-process in
//! `claw-gateway`.)

use super::gateway::{Gateway, echo_gateway, repl};
use claw_testkit::echo_llm::{EchoLlm, answer_for};
use std::path::Path;
use tempfile::TempDir;

/// (role, content) of a transcript's messages.
fn messages(ws: &Path, key: &str) -> Vec<(String, String)> {
    claw_testkit::gateway_http::pairs(
        &ws.join("sessions")
            .join(claw_agent::session::file_name_for_key(key)),
    )
}

/// The REPL of `session` through a fresh echo gateway (`echo_gateway`), fed
/// `input`: it succeeds and says it goes through the gateway. Its stdout and
/// stderr come after the workspace, the LLM and the gateway.
fn echo_repl(session: &str, input: &[u8]) -> (TempDir, EchoLlm, Gateway, String, String) {
    let (dir, llm, gw) = echo_gateway();
    let out = repl(dir.path(), Some(&llm.url()), session, input);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("through the gateway"), "{stderr}");
    (dir, llm, gw, stdout, stderr)
}

#[test]
fn new_in_the_repl_starts_a_fresh_session_key() {
    let (dir, _llm, _gw, _, stderr) = echo_repl("repl:new", b"hello there\n/new\nagain please\n");
    let ws = dir.path();
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

/// Every command of the table through the gateway: `/help` prints the list,
/// `/agents`, `/remember` and `/compact` are served by the gateway's session (not
/// "unknown", never sent to the model as messages), an unknown command says so,
/// and bare `quit` leaves (the line after it is never sent).
#[test]
fn every_repl_command_works_through_the_gateway() {
    let (dir, llm, _gw, stdout, stderr) = echo_repl(
        "repl:cmds",
        b"hello there\n/help\n/agents\n/remember\n/compact\n/bogus\nquit\nnever sent\n",
    );
    let ws = dir.path();
    assert!(
        stdout.contains(&claw_agent::commands::help()),
        "/help prints the table: {stdout}"
    );
    assert!(stderr.contains("no sub-agents in this session"), "{stderr}");
    for cmd in ["/agents", "/remember", "/compact"] {
        assert!(
            !stderr.contains(&format!("unknown command {cmd}")),
            "{cmd}: {stderr}"
        );
    }
    assert!(
        stderr.contains("unknown command /bogus; /help lists them"),
        "{stderr}"
    );
    let inputs: Vec<String> = llm.served().into_iter().map(|s| s.input).collect();
    for line in ["/remember", "/compact", "/agents", "quit", "never sent"] {
        assert!(!inputs.iter().any(|i| i == line), "{line}: {inputs:?}");
    }
    assert_eq!(
        messages(ws, "repl:cmds")
            .into_iter()
            .filter(|(role, _)| role == "user")
            .map(|(_, t)| t)
            .collect::<Vec<_>>(),
        ["hello there"]
    );
}
