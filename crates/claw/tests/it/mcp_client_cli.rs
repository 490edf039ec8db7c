//! `claw -m` with MCP servers configured (`mcp.servers`): npm's reference
//! servers' tools reach the model as `mcp__<server>__<tool>` with their
//! schemas, a call round-trips through the agent loop (the scripted LLM
//! server asks for it, the result goes back to the model), a tool without
//! `readOnlyHint: true` needs confirmation like `write_file`, a server that
//! does not start is a warning, not a failure; and `claw mcp list`.

use claw_testkit::LlmEnv;
use claw_testkit::mcp_peers;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn config(ws: &Path, fs_root: &Path) -> std::path::PathBuf {
    let (cmd, args) = mcp_peers::everything_server();
    let (fcmd, fargs) = mcp_peers::filesystem_server(fs_root);
    let cfg = json!({"mcp": {"servers": {
        "everything": {"command": cmd, "args": args},
        "fs": {"command": fcmd, "args": fargs},
        "ghost": {"command": "/nonexistent/mcp-server"}
    }}});
    let path = ws.join("config.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    path
}

fn claw(ws: &Path, config: &Path) -> Command {
    let mut c = claw_testkit::claw_utc(ws);
    c.env("CLAW_CONFIG", config);
    c
}

fn tool_message<'a>(req: &'a Value, id: &str) -> &'a str {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result for {id}"))
}

#[test]
fn mcp_tools_round_trip_through_the_agent_loop() {
    let (_dir, [ws, fs_root]) = claw_testkit::temp_dirs(["ws", "shared-files"]);
    std::fs::write(fs_root.join("plan.txt"), "launch on friday\n").unwrap();
    let cfg = config(&ws, &fs_root);
    let target = fs_root.join("new.txt").display().to_string();
    let plan = fs_root.join("plan.txt").display().to_string();
    let server = ScriptedServer::start([
        openai::tool_call(
            "call_1",
            "mcp__everything__echo",
            &[r#"{"message": "#, r#""ping from claw"}"#],
        ),
        openai::tool_call(
            "call_2",
            "mcp__fs__read_text_file",
            &[&json!({ "path": plan }).to_string()],
        ),
        openai::tool_call(
            "call_3",
            "mcp__fs__write_file",
            &[&json!({"path": target, "content": "x"}).to_string()],
        ),
        openai::text(&["done"]),
    ]);
    let out = claw(&ws, &cfg)
        .openai_llm(server.url(), "scripted-model")
        .args(["-m", "use the tools"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
    assert!(
        stderr.contains("MCP server `ghost` is not available"),
        "{stderr}"
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 4);
    let tools = reqs[0].json["tools"].as_array().unwrap();
    let echo = tools
        .iter()
        .find(|t| t["function"]["name"] == "mcp__everything__echo")
        .expect("the MCP tool is offered to the model");
    assert!(
        echo["function"]["parameters"]["properties"]["message"].is_object(),
        "{echo}"
    );
    let names: Vec<&str> = tools
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"read_file"), "built-ins stay: {names:?}");
    assert!(names.contains(&"mcp__fs__write_file"), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("mcp__ghost")));

    assert!(
        tool_message(&reqs[1].json, "call_1").contains("ping from claw"),
        "{}",
        reqs[1].json
    );
    assert!(tool_message(&reqs[2].json, "call_2").contains("launch on friday"));
    // write_file has no readOnlyHint: a side effect, refused without a terminal or --yes.
    let refused = tool_message(&reqs[3].json, "call_3");
    assert!(refused.contains("confirmation"), "{refused}");
    assert!(!fs_root.join("new.txt").exists());
}

#[test]
fn claw_mcp_list_shows_servers_state_and_tools() {
    let (dir, [ws]) = claw_testkit::temp_dirs(["ws"]);
    let cfg = config(&ws, dir.path());
    let out = claw(&ws, &cfg)
        .args(["mcp", "list", "--json"])
        .output()
        .unwrap();
    // A server that failed: exit 2, and the JSON still lists every server.
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = v["servers"].as_array().unwrap();
    let names: Vec<&str> = servers
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["everything", "fs", "ghost"]);
    assert_eq!(servers[0]["state"], "ready");
    assert!(
        servers[0]["transport"]
            .as_str()
            .unwrap()
            .starts_with("stdio: node")
    );
    let tools = servers[1]["tools"].as_array().unwrap();
    let write = tools
        .iter()
        .find(|t| t["name"] == "mcp__fs__write_file")
        .unwrap();
    assert_eq!(write["read_only"], false);
    assert_eq!(write["remote_name"], "write_file");
    assert_eq!(servers[2]["state"], "failed");
    assert!(
        servers[2]["error"]
            .as_str()
            .unwrap()
            .contains("cannot start"),
        "{}",
        servers[2]
    );
    let text = claw(&ws, &cfg).args(["mcp", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("everything  (stdio: node"), "{text}");
    assert!(
        text.contains("mcp__fs__write_file [side effects]"),
        "{text}"
    );
    assert!(
        text.contains("ghost") && text.contains("failed: cannot start"),
        "{text}"
    );
}
