//! What an `exec` command inherits: claw's own environment (LLM API keys, tokens)
//! never reaches a command unless `exec.env` names it, with or without the
//! sandbox. Driven end to end: the real `claw -m` against a scripted model that
//! asks for `env`, the command's output read from the tool result sent back.

use claw_testkit::scripted_server::{ScriptedServer, openai};
use serde_json::json;
use std::path::Path;
use std::process::{Command, Stdio};

const KEY: &str = "plainkeyvalue4217";
const OTHER: &str = "otherprovidervalue8831";
const LISTED: &str = "listedvalue5520";

/// The `env` output the model received as the tool result, and claw's exit code.
fn env_seen_by_command(ws: &Path, exec_config: serde_json::Value) -> String {
    std::fs::write(
        ws.join("config.json"),
        json!({ "exec": exec_config }).to_string(),
    )
    .unwrap();
    let server = ScriptedServer::start([
        openai::tool_call("call_1", "exec", &[r#"{"command": "env"}"#]),
        openai::text(&["done"]),
    ]);
    let out = Command::new(claw_testkit::claw_bin())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", ws.join("home"))
        .env("CLAW_WORKSPACE", ws)
        .env("CLAW_CONFIG", ws.join("config.json"))
        .env("CLAW_NOW", claw_testkit::TEST_NOW)
        .env("CLAW_EMBED_PROVIDER", "none")
        .env("CLAW_LLM_API", "openai")
        .env("CLAW_LLM_BASE_URL", server.url())
        .env("CLAW_LLM_MODEL", "scripted-model")
        .env("CLAW_LLM_API_KEY", KEY)
        .env("ANTHROPIC_API_KEY", OTHER)
        .env("MY_TOOL_VAR", LISTED)
        .args(["--yes", "-m", "show the environment"])
        .stdin(Stdio::null())
        .output()
        .expect("run claw");
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2, "the model was asked twice");
    let msgs = reqs[1].json["messages"].as_array().unwrap().clone();
    let tool = msgs
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the exec result went back to the model");
    let content = tool["content"].as_str().unwrap().to_string();
    assert!(
        content.contains("PATH="),
        "the command ran and printed its environment: {content}"
    );
    content
}

#[test]
fn api_keys_never_reach_a_command_and_exec_env_passes_named_variables() {
    for sandbox in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let seen = env_seen_by_command(ws, json!({ "sandbox": sandbox }));
        assert!(
            !seen.contains(KEY),
            "[sandbox {sandbox}] API key leaked: {seen}"
        );
        assert!(!seen.contains(OTHER), "[sandbox {sandbox}] leaked: {seen}");
        assert!(
            !seen.contains(LISTED),
            "[sandbox {sandbox}] unlisted var: {seen}"
        );

        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let seen = env_seen_by_command(ws, json!({ "sandbox": sandbox, "env": ["MY_TOOL_VAR"] }));
        assert!(
            seen.contains(&format!("MY_TOOL_VAR={LISTED}")),
            "[sandbox {sandbox}] a listed variable is passed: {seen}"
        );
        assert!(
            !seen.contains(KEY),
            "[sandbox {sandbox}] API key leaked: {seen}"
        );
    }
}
