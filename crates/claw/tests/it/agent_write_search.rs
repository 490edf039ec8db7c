//! A fact the assistant writes is found by its next `memory_search`, even while
//! a live watcher vouches for the index and has not been told about the write
//! yet (the REPL runs one). The registry's own write tools tell the backend, and
//! the next search walks the disk instead of trusting the vouch. A file written
//! behind the assistant's back, in contrast, is left to the watcher: the control
//! below shows the vouch really is trusted, so the first assertion could fail.

use claw_agent::memory_backend::EngineBackend;
use claw_agent::message::ToolCall;
use claw_agent::tools::{ToolContext, ToolOutput, ToolRegistry};
use claw_memory::config::EmbedProvider;
use claw_testkit::{claw_keyword_only, workspace, write_tree};
use rusqlite::Connection;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;

fn call(id: &str, name: &str, args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: args.to_string(),
    }
}

async fn search(reg: &ToolRegistry, query: &str) -> (Vec<String>, String) {
    match reg
        .dispatch(&call(
            "s",
            "memory_search",
            json!({"query": query, "mode": "fts"}),
        ))
        .await
    {
        Ok(ToolOutput::MemorySearch(o)) => (
            o.response.results.iter().map(|h| h.path.clone()).collect(),
            serde_json::to_value(&o.sync).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_string(),
        ),
        other => panic!("memory_search: {other:?}"),
    }
}

/// A heartbeat row for a live process, idle: the index is vouched for.
fn vouch(ws: &Path, pid: u32) {
    let c = Connection::open(claw_testkit::db_path(ws)).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    c.execute(
        "INSERT OR REPLACE INTO watcher (pid, started_at, heartbeat, pending) VALUES (?1, ?2, ?2, 0)",
        rusqlite::params![pid as i64, now],
    )
    .unwrap();
}

#[tokio::test]
async fn a_written_fact_is_found_in_the_same_turn_despite_a_vouching_watcher() {
    let dir = workspace(&[("MEMORY.md", "# Memory\nThe anchorword.\n")]);
    let ws = dir.path();
    let out = claw_keyword_only(ws)
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // A live process stands in for the watcher (the REPL's or a `memory watch`).
    let mut stand_in = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    vouch(ws, stand_in.id());

    let backend = Arc::new(EngineBackend::new(claw_testkit::cli_memory_config(
        ws,
        EmbedProvider::None,
    )));
    let mut ctx = ToolContext::new(ws);
    ctx.memory = Some(backend);
    let reg = ToolRegistry::new(ctx);

    // Control: a note written behind the assistant's back is not seen while the
    // watcher vouches (the walk is skipped), so the case below tests something.
    write_tree(ws, &[("memory/outside.md", "# Outside\nThe quillword.\n")]);
    // (The heartbeat is refreshed before each search that expects the vouch: a
    // row older than 15 s would no longer count as a live watcher.)
    vouch(ws, stand_in.id());
    let (hits, sync) = search(&reg, "quillword").await;
    assert_eq!(sync, "fresh");
    assert!(hits.is_empty(), "the vouch was not trusted: {hits:?}");

    // The assistant writes a fact, then searches for it in the same turn.
    match reg
        .dispatch(&call(
            "w",
            "write_file",
            json!({"path": "memory/fact.md", "content": "# Fact\nThe zephyrword is kept here.\n"}),
        ))
        .await
    {
        Ok(ToolOutput::FileWritten { .. }) => {}
        other => panic!("write_file: {other:?}"),
    }
    let (hits, sync) = search(&reg, "zephyrword").await;
    assert_eq!(hits, ["memory/fact.md"]);
    assert_eq!(sync, "synced");
    // The walk that found it also picked up the outside note.
    let (hits, _) = search(&reg, "quillword").await;
    assert_eq!(hits, ["memory/outside.md"]);
    // Back to trusting the watcher once the write is accounted for.
    vouch(ws, stand_in.id());
    let (_, sync) = search(&reg, "anchorword").await;
    assert_eq!(sync, "fresh");

    stand_in.kill().ok();
    stand_in.wait().ok();
}
