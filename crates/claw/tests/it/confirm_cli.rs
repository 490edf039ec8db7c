//! Confirmation of side effects through the real `claw -m` binary without a
//! terminal (stdin is not a TTY) against the scripted LLM server: a write is
//! refused — the model gets the refusal as the call's error, stderr tells the user
//! to pass `--yes` — and `--yes` or `agent.confirm_side_effects: false` allow it;
//! read-only tools run without either.

use claw_testkit::scripted_server::{ScriptedServer, openai};

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn claw(ws: &Path, llm: &str) -> Command {
    let mut c = claw_testkit::claw_llm(ws, llm);
    c.stdin(Stdio::null());
    c
}

/// One `-m` turn in which the model writes `note.md`; the run and the tool
/// result the model got.
fn write_turn(ws: &Path, extra: &[&str], config: Option<&Path>) -> (Output, String) {
    let llm = ScriptedServer::start(openai::write_note_turn());
    let mut cmd = claw(ws, &llm.url());
    if let Some(cfg) = config {
        cmd.env("CLAW_CONFIG", cfg);
    }
    let out = cmd
        .args(extra)
        .args(["-m", "write the note"])
        .output()
        .expect("run claw");
    let reqs = llm.requests();
    assert_eq!(reqs.len(), 2, "{}", String::from_utf8_lossy(&out.stderr));
    let result = reqs[1].last_tool_result().unwrap();
    (out, result)
}

#[test]
fn without_a_terminal_a_write_is_refused_and_yes_allows_it() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();

    let (out, result) = write_turn(ws, &[], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "the model still answers: {stderr}"
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert!(!ws.join("note.md").exists(), "the write never ran");
    assert!(
        result.starts_with("Error: `write_file` was not run")
            && result.contains("side effects")
            && result.contains("no terminal"),
        "tool result: {result}"
    );
    assert!(
        stderr.contains("refused write_file: note.md") && stderr.contains("pass --yes"),
        "{stderr}"
    );

    let (out, result) = write_turn(ws, &["--yes"], None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(ws.join("note.md")).unwrap(),
        "written\n"
    );
    assert!(!result.starts_with("Error"), "{result}");
    assert!(!stderr.contains("--yes"), "no hint when allowed: {stderr}");
}

#[test]
fn config_can_turn_confirmation_off() {
    let dir = claw_testkit::workspace(&[(
        "config.json",
        r#"{"agent": {"confirm_side_effects": false}}"#,
    )]);
    let ws = dir.path();
    let cfg = ws.join("config.json");
    let (out, result) = write_turn(ws, &[], Some(&cfg));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("note.md")).unwrap(),
        "written\n"
    );
    assert!(!result.starts_with("Error"), "{result}");

    // `true` in the config is the default: refused without a terminal.
    std::fs::remove_file(ws.join("note.md")).unwrap();
    std::fs::write(&cfg, r#"{"agent": {"confirm_side_effects": true}}"#).unwrap();
    let (_, result) = write_turn(ws, &[], Some(&cfg));
    assert!(result.contains("was not run"), "{result}");
    assert!(!ws.join("note.md").exists());
}

#[test]
fn read_only_tools_run_without_yes() {
    let dir = claw_testkit::workspace(&[("facts.md", "the sky is green\n")]);
    let ws = dir.path();
    let llm = ScriptedServer::start([
        openai::tool_call("r1", "read_file", &[r#"{"path": "facts.md"}"#]),
        openai::tool_call("l1", "list_dir", &["{}"]),
        openai::text(&["green"]),
    ]);
    let out = claw(ws, &llm.url())
        .args(["-m", "what colour is the sky?"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    let last = llm.requests()[2].json["messages"].to_string();
    assert!(
        last.contains("the sky is green") && last.contains("facts.md"),
        "{last}"
    );
}
