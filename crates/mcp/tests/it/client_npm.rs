//! claw's MCP client ([`McpClients`]) against npm's reference servers
//! `@modelcontextprotocol/server-everything` and `server-filesystem` (installed
//! by `scripts/setup-mcp.sh`): tools listed with their schemas and read-only
//! hints, calls round-trip, a killed server is reported and restarted once, a
//! call that outlives the timeout is an error (and restarts the server), and a
//! second crash leaves the server down — never a panic.

use claw_agent::tools::{DynamicTools, ToolError, ToolOutput};
use claw_mcp::{McpClients, McpConfig, ServerSpec, ServerState};
use claw_testkit::mcp_peers;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::Path;

fn config(fs_root: &Path, call_timeout_secs: u64) -> McpConfig {
    let (cmd, args) = mcp_peers::everything_server();
    let (fcmd, fargs) = mcp_peers::filesystem_server(fs_root);
    let mut servers = BTreeMap::new();
    servers.insert(
        "everything".to_string(),
        ServerSpec {
            command: Some(cmd),
            args,
            ..Default::default()
        },
    );
    servers.insert(
        "fs".to_string(),
        ServerSpec {
            command: Some(fcmd),
            args: fargs,
            ..Default::default()
        },
    );
    McpConfig {
        startup_timeout_secs: Some(30),
        call_timeout_secs: Some(call_timeout_secs),
        servers,
        ..Default::default()
    }
}

fn text(out: ToolOutput) -> String {
    match out {
        ToolOutput::External { text, .. } => text,
        other => panic!("not an external result: {other:?}"),
    }
}

fn pid_of(clients: &McpClients, name: &str) -> u32 {
    clients
        .summaries()
        .into_iter()
        .find(|s| s.name == name)
        .and_then(|s| s.pid)
        .expect("a running stdio server has a pid")
}

fn kill(pid: u32) {
    let st = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_listed_and_calls_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("hello.txt"), "hello from the fs server\n").unwrap();
    let clients = McpClients::start(&config(dir.path(), 30)).await;
    let summaries = clients.summaries();
    for s in &summaries {
        assert_eq!(s.state, ServerState::Ready, "{s:?}");
    }
    let specs = clients.specs();
    let echo = specs
        .iter()
        .find(|s| s.name == "mcp__everything__echo")
        .expect("echo offered");
    assert_eq!(echo.parameters["type"], "object");
    assert!(
        echo.parameters["properties"]["message"].is_object(),
        "{}",
        echo.parameters
    );
    assert!(echo.description.contains("MCP server `everything`"));
    for n in [
        "mcp__fs__read_text_file",
        "mcp__fs__write_file",
        "mcp__fs__list_directory",
    ] {
        assert!(specs.iter().any(|s| s.name == n), "{n} not offered");
    }
    // readOnlyHint drives the policy: reads are free, writes are side effects.
    assert_eq!(clients.is_read_only("mcp__fs__read_text_file"), Some(true));
    assert_eq!(clients.is_read_only("mcp__fs__write_file"), Some(false));
    assert_eq!(clients.is_read_only("mcp__fs__no_such_tool"), None);

    let out = clients
        .call_tool(
            "mcp__everything__echo",
            json!({"message": "ping from claw"}),
        )
        .await
        .unwrap();
    assert!(text(out).contains("ping from claw"));
    let out = clients
        .call_tool("mcp__everything__get-sum", json!({"a": 2, "b": 40}))
        .await
        .unwrap();
    assert!(text(out).contains("42"));
    let path = dir.path().join("hello.txt").display().to_string();
    let out = clients
        .call_tool("mcp__fs__read_text_file", json!({"path": path}))
        .await
        .unwrap();
    assert_eq!(text(out).trim(), "hello from the fs server");
    // Outside the server's allowed directory: the server's error, as a tool error.
    let e = clients
        .call_tool("mcp__fs__read_text_file", json!({"path": "/etc/hostname"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::External { .. }), "{e:?}");
    // Bad arguments are the server's error too, and the server stays up.
    let e = clients
        .call_tool("mcp__everything__get-sum", json!({"a": "two"}))
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::External { .. }), "{e:?}");
    assert_eq!(clients.summaries()[0].restarts, 0);
    // Concurrent calls on one connection.
    let calls = (0..6)
        .map(|i| clients.call_tool("mcp__everything__echo", json!({"message": format!("n{i}")})));
    let results = futures_util::future::join_all(calls).await;
    for (i, r) in results.into_iter().enumerate() {
        assert!(text(r.unwrap()).contains(&format!("n{i}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_reported_restarted_once_then_down() {
    let dir = tempfile::tempdir().unwrap();
    let clients = McpClients::start(&config(dir.path(), 30)).await;
    let first = pid_of(&clients, "everything");
    kill(first);
    let e = clients
        .call_tool("mcp__everything__echo", json!({"message": "after kill"}))
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("crashed"), "{msg}");
    assert!(msg.contains("restarted"), "{msg}");
    let s = &clients.summaries()[0];
    assert_eq!(s.state, ServerState::Ready);
    assert_eq!(s.restarts, 1);
    let second = pid_of(&clients, "everything");
    assert_ne!(first, second);
    let out = clients
        .call_tool("mcp__everything__echo", json!({"message": "back again"}))
        .await
        .unwrap();
    assert!(text(out).contains("back again"));
    // The other server never noticed.
    assert_eq!(clients.summaries()[1].restarts, 0);

    // A second crash: not restarted again; the server is down and says so.
    kill(second);
    let e = clients
        .call_tool("mcp__everything__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("down"), "{e}");
    assert!(matches!(
        clients.summaries()[0].state,
        ServerState::Down { .. }
    ));
    let e = clients
        .call_tool("mcp__everything__echo", json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is down"), "{e}");
    // The filesystem server still works.
    let out = clients
        .call_tool("mcp__fs__list_allowed_directories", json!({}))
        .await
        .unwrap();
    assert!(!text(out).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_timeout_is_an_error_and_the_server_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clients = McpClients::start(&config(dir.path(), 2)).await;
    let before = pid_of(&clients, "everything");
    let t = std::time::Instant::now();
    let e = clients
        .call_tool(
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 30, "steps": 3}),
        )
        .await
        .unwrap_err();
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    let msg = e.to_string();
    assert!(msg.contains("did not answer within 2s"), "{msg}");
    assert!(msg.contains("restarted"), "{msg}");
    assert_ne!(pid_of(&clients, "everything"), before);
    let out = clients
        .call_tool("mcp__everything__echo", json!({"message": "still here"}))
        .await
        .unwrap();
    assert!(text(out).contains("still here"));
}
