//! Hooks through the real `claw -m` binary against the scripted LLM server: a
//! `before_tool_call` hook blocks (JSON answer and exit 2) or rewrites a call,
//! `session_start` / `user_prompt` hooks add context to the prompt, hooks that
//! time out, crash or print invalid JSON are logged and ignored (fail open), the
//! notifications (`after_tool_call`, `agent_end`) get their JSON events on stdin,
//! and an environment secret reaches a hook only when its `env` lists it — nor
//! through `/proc/$PPID/environ`: a hook has a PID namespace and `/proc` of its own.

use claw_testkit::scripted_server::{Recorded, ScriptedServer, openai};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn claw(ws: &Path, llm: &str, config: &Value) -> Command {
    let mut c = claw_testkit::claw_scripted(ws, llm, config);
    c.stdin(Stdio::null());
    c
}

/// One `--yes -m` turn in which the model writes `note.md`; the run, the requests.
fn write_turn(ws: &Path, hooks: Value, envs: &[(&str, &str)]) -> (Output, Vec<Recorded>) {
    let llm = ScriptedServer::start(openai::write_note_turn());
    let mut cmd = claw(ws, &llm.url(), &json!({ "hooks": hooks }));
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["--yes", "-m", "write the note"])
        .output()
        .expect("run claw");
    let reqs = llm.requests();
    assert_eq!(
        reqs.len(),
        2,
        "two model calls: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out, reqs)
}

fn tool_result(reqs: &[Recorded]) -> String {
    reqs[1].last_tool_result().unwrap()
}

fn system_prompt(req: &Recorded) -> String {
    req.json["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_json_block_reaches_the_model_as_the_tools_error() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (out, reqs) = write_turn(
        ws,
        json!({"before_tool_call": [{
            "match": "exec|write_file",
            "command": "cat > seen.json; echo '{\"decision\":\"block\",\"reason\":\"notes are read-only today\"}'"
        }]}),
        &[],
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(!ws.join("note.md").exists(), "the blocked write never ran");
    let result = tool_result(&reqs);
    assert!(
        result.contains("blocked by a hook: notes are read-only today"),
        "{result}"
    );
    let seen: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("seen.json")).unwrap()).unwrap();
    assert_eq!(seen["event"], "before_tool_call");
    assert_eq!(seen["tool"], "write_file");
    assert_eq!(seen["session"], "cli:default");
    assert_eq!(seen["arguments"]["path"], "note.md");
}

#[test]
fn exit_2_blocks_with_stderr_and_a_non_matching_hook_does_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (_, reqs) = write_turn(
        ws,
        json!({"before_tool_call": [
            {"match": "exec", "command": "touch exec-hook-ran"},
            {"match": "write_.*", "command": "echo 'no writes in CI' >&2; exit 2"}
        ]}),
        &[],
    );
    assert!(!ws.join("note.md").exists());
    assert!(
        !ws.join("exec-hook-ran").exists(),
        "`exec` does not match write_file"
    );
    assert!(
        tool_result(&reqs).contains("blocked by a hook: no writes in CI"),
        "{}",
        tool_result(&reqs)
    );
}

#[test]
fn a_hook_rewrites_the_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (out, reqs) = write_turn(
        ws,
        json!({"before_tool_call": [{
            "match": "write_file",
            "command": "echo '{\"arguments\":{\"path\":\"inbox/note.md\",\"content\":\"rewritten\"}}'"
        }]}),
        &[],
    );
    assert!(
        !ws.join("note.md").exists(),
        "the original path was not written"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("inbox/note.md")).unwrap(),
        "rewritten"
    );
    assert!(!tool_result(&reqs).starts_with("Error"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("arguments rewritten by a hook"));
}

#[test]
fn failing_hooks_are_logged_and_the_call_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let started = std::time::Instant::now();
    let (out, reqs) = write_turn(
        ws,
        json!({"before_tool_call": [
            {"command": "sleep 30", "timeout_ms": 300},
            // A hook's shell is pid 1 of its own PID namespace, which ignores
            // signals sent from inside it: the child shell is what dies.
            {"command": "sh -c 'kill -9 $$'"},
            {"command": "echo 'this is not json'"},
            {"command": "echo boom >&2; exit 7"}
        ]}),
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(started.elapsed().as_secs() < 20, "the timeout was enforced");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(ws.join("note.md")).unwrap(),
        "written\n",
        "hooks fail open: the write ran"
    );
    assert!(!tool_result(&reqs).starts_with("Error"));
    for needle in [
        "timed out after 300 ms",
        "exited with status 137",
        "printed invalid JSON",
        "exited with status 7: boom",
    ] {
        assert!(stderr.contains(needle), "{needle}: {stderr}");
    }
}

#[test]
fn prompt_hooks_add_context_and_secrets_stay_out_unless_listed() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let (_, reqs) = write_turn(
        ws,
        json!({
            "session_start": [{"command": "echo '{\"context\":\"The user is on call this week.\"}'"}],
            "user_prompt": [
                {"command": "printf '{\"context\":\"secret=[%s] listed=[%s]\"}' \"$CLAW_T_SECRET\" \"$CLAW_T_LISTED\"",
                 "env": ["CLAW_T_LISTED"]},
                {"command": "cat > prompt.json"}
            ],
            "after_tool_call": [{"command": "cat > after.json"}],
            "agent_end": [{"command": "cat > end.json"}]
        }),
        &[("CLAW_T_SECRET", "hunter2"), ("CLAW_T_LISTED", "visible")],
    );
    let system = system_prompt(&reqs[0]);
    assert!(
        system.contains("The user is on call this week."),
        "{system}"
    );
    assert!(system.contains("secret=[] listed=[visible]"), "{system}");
    assert!(!system.contains("hunter2"));
    let read = |f: &str| -> Value {
        serde_json::from_str(&std::fs::read_to_string(ws.join(f)).unwrap()).unwrap()
    };
    assert_eq!(read("prompt.json")["prompt"], "write the note");
    let after = read("after.json");
    assert_eq!(after["event"], "after_tool_call");
    assert_eq!(after["tool"], "write_file");
    assert_eq!(after["is_error"], false);
    let end = read("end.json");
    assert_eq!(end["event"], "agent_end");
    assert_eq!(end["end"], "answered");
    assert_eq!(end["text"], "done");
}

#[test]
fn an_invalid_match_regex_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = ScriptedServer::start([openai::text(&["never"])]);
    let out = claw(
        ws,
        &llm.url(),
        &json!({"hooks": {"before_tool_call": [{"match": "(", "command": "true"}]}}),
    )
    .args(["-m", "hi"])
    .output()
    .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("hooks.before_tool_call[0].match"),
        "{stderr}"
    );
    assert!(llm.requests().is_empty());
}

#[test]
fn the_gateway_runs_hooks_in_its_session_workers() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    std::fs::write(
        ws.join("config.json"),
        json!({"hooks": {
            "before_tool_call": [{"match": "write_file", "command": "echo 'not through the gateway' >&2; exit 2"}],
            "agent_end": [{"command": "cat > end.json"}]
        }})
        .to_string(),
    )
    .unwrap();
    let llm = ScriptedServer::start(openai::write_note_turn());
    let gw = crate::gateway::Gateway::start(ws, Some(&llm.url()));
    let (end, why) = gw
        .client()
        .chat("api:hooks", "write the note", true, "http", |_| {})
        .expect("chat through the gateway");
    assert_eq!(end, "answered", "{why:?}");
    assert!(!ws.join("note.md").exists(), "the hook blocked the write");
    let reqs = llm.requests();
    assert!(
        tool_result(&reqs).contains("blocked by a hook: not through the gateway"),
        "{}",
        tool_result(&reqs)
    );
    let end: Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("end.json")).unwrap()).unwrap();
    assert_eq!(end["session"], "api:hooks");
    assert_eq!(end["end"], "answered");
}

/// A hook reads claw's environment through `/proc/$PPID/environ` (and every
/// other process's): claw was started with `CLAW_LLM_API_KEY` and a secret in
/// its environment block. The hook runs in a PID namespace of its own, so claw
/// does not exist for it; the positive control reads the same file from
/// outside, while the hook runs, and finds both.
#[test]
fn a_hook_cannot_read_claws_environment_through_proc() {
    let status = claw_agent::tools::sandbox::probe();
    assert!(
        status.hides_host_processes(),
        "no PID namespaces on this machine:\n{status}"
    );
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let llm = ScriptedServer::start(openai::write_note_turn());
    let secret = format!("hunter2-{}", std::process::id());
    let read = "sleep 1; { echo ppid=$PPID; cat /proc/$PPID/environ; cat /proc/[0-9]*/environ; \
                ls /proc; } 2>&1 | tr '\\0' '\\n' > leak.txt";
    let mut cmd = claw(
        ws,
        &llm.url(),
        &json!({ "hooks": {"user_prompt": [{"command": read, "timeout_ms": 10000}]} }),
    );
    cmd.env("CLAW_T_SECRET", &secret)
        .env("CLAW_LLM_API_KEY", &secret)
        .args(["--yes", "-m", "write the note"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("run claw");
    let pid = child.id();
    // Positive control: claw's environment block holds the secrets, and a
    // process outside the hook's namespace reads them at the same moment.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let environ = String::from_utf8_lossy(&environ);
    let out = child.wait_with_output().expect("claw ends");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        environ.contains(&secret) && environ.contains("CLAW_LLM_API_KEY="),
        "control: claw's environ does not hold the secrets"
    );
    let leak = std::fs::read_to_string(ws.join("leak.txt")).unwrap();
    assert!(leak.contains("ppid=0"), "{leak}");
    assert!(!leak.contains(&secret), "the hook read the secret: {leak}");
    assert!(!leak.contains("CLAW_LLM_API_KEY"), "{leak}");
    assert!(
        !leak.lines().any(|l| l.trim() == pid.to_string()),
        "claw's pid is in the hook's /proc: {leak}"
    );
}
