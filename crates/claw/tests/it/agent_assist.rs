//! The assistant's side of memory, end to end: `claw -m` against the scripted
//! OpenAI-compatible server on 127.0.0.1, the real embedding model and the real
//! SQLite index. `memory_search` syncs before it answers (a fact written with
//! `write_file` in the same turn is found), a never-indexed workspace is indexed
//! on first use, compaction consolidates durable facts into MEMORY.md once, and
//! `<think>` blocks never reach the answer, the transcript or the index.

use claw_testkit::scripted_server::{ScriptedServer, openai};
use claw_testkit::{claw, write_tree};
use std::path::Path;
use std::process::Output;

fn run_claw(ws: &Path, server: &ScriptedServer, args: &[&str]) -> Output {
    claw(ws)
        .env("CLAW_LLM_API", "openai")
        .env("CLAW_LLM_BASE_URL", server.url())
        .env("CLAW_LLM_MODEL", "scripted")
        .args(args)
        .output()
        .expect("run claw")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The content of the tool result for `id` the model received in request `req`.
fn tool_result(server: &ScriptedServer, req: usize, id: &str) -> String {
    let reqs = server.requests();
    reqs[req].json["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool result {id} in request {req}"))
        .to_string()
}

#[test]
fn a_fact_written_in_a_turn_is_found_by_memory_search_in_the_same_turn() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_tree(
        ws,
        &[(
            "MEMORY.md",
            "# Memory\n\n## People\n- Ada runs the payments team.\n",
        )],
    );
    ok(&claw(ws).args(["memory", "index"]).output().unwrap());

    let server = ScriptedServer::start([
        openai::tool_call(
            "w1",
            "write_file",
            &[
                r#"{"path": "memory/2026-11-05.md", "#,
                r#""content": "The zorblax launch moved to Thursday the 12th.\n"}"#,
            ],
        ),
        openai::tool_call(
            "s1",
            "memory_search",
            &[r#"{"query": "when is the zorblax launch"}"#],
        ),
        openai::text(&["Thursday the 12th [memory/2026-11-05.md#L1-L1]."]),
    ]);
    let out = run_claw(
        ws,
        &server,
        &["--yes", "-m", "note that the zorblax launch moved"],
    );
    ok(&out);
    assert_eq!(server.requests().len(), 3);
    let written = tool_result(&server, 1, "w1");
    assert!(!written.starts_with("Error"), "{written}");
    let found = tool_result(&server, 2, "s1");
    assert!(found.contains("memory/2026-11-05.md#L1"), "{found}");
    assert!(found.contains("zorblax launch moved"), "{found}");
    assert!(!found.contains("note:"), "{found}");
}

#[test]
fn a_never_indexed_workspace_is_indexed_on_first_use() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    // More files than the inline sync re-indexes (20): only a first full index
    // finds them (30 notes and the session's own transcript).
    let mut files: Vec<(String, String)> = (1..=30)
        .filter(|i| *i != 17)
        .map(|i| {
            (
                format!("memory/2026-10-{i:02}.md"),
                format!("# Day {i}\nRoutine standup notes, item {i}.\n"),
            )
        })
        .collect();
    files.push((
        "memory/2026-10-17.md".into(),
        "# Day 17\nThe heron migration survey starts at Lake Vansjø in March.\n".into(),
    ));
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    write_tree(ws, &refs);
    assert!(!ws.join(".claw/memory.sqlite").exists());

    let server = ScriptedServer::start([
        openai::tool_call(
            "s1",
            "memory_search",
            &[r#"{"query": "heron migration survey"}"#],
        ),
        openai::text(&["In March at Lake Vansjø."]),
    ]);
    let out = run_claw(ws, &server, &["-m", "when does the heron survey start?"]);
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("indexing this workspace for the first time (31 files)"),
        "{stderr}"
    );
    let found = tool_result(&server, 1, "s1");
    assert!(found.contains("memory/2026-10-17.md#L"), "{found}");
    assert!(found.contains("Lake Vansj"), "{found}");
    assert!(!found.contains("no-vectors"), "{found}");
    assert!(!found.contains("note:"), "{found}");
}

fn session_text(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("sessions/cli_default.jsonl")).unwrap()
}

fn search_json(ws: &Path, query: &str) -> serde_json::Value {
    let out = claw(ws)
        .args(["memory", "search", query, "--json", "--mode", "fts"])
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn think_blocks_in_a_streamed_answer_are_never_shown_stored_or_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    write_tree(ws, &[("MEMORY.md", "# Memory\n")]);
    let server = ScriptedServer::start([
        // Tags cut across chunk boundaries, mixed case, a blank line after the block.
        openai::text(&[
            "<thi",
            "nk>the user wants the zebrafish quota; ",
            "recall quaggamussel</th",
            "INK>\n\nThe kumquat ",
            "quota is 42.",
        ]),
        // A second turn whose reasoning block never closes before the stream ends.
        openai::text(&[
            "Noted the ",
            "kumquat reorder. <thinking>secret ",
            "ocelotpanda",
        ]),
    ]);
    let out = run_claw(ws, &server, &["-m", "what is the kumquat quota?"]);
    ok(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The kumquat quota is 42.\n"
    );
    let out = run_claw(ws, &server, &["-m", "reorder kumquats"]);
    ok(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Noted the kumquat reorder. \n"
    );

    let transcript = session_text(ws);
    for hidden in [
        "zebrafish",
        "quaggamussel",
        "ocelotpanda",
        "<think",
        "<thinking",
    ] {
        assert!(!transcript.contains(hidden), "{hidden} in {transcript}");
    }
    assert!(
        transcript.contains("The kumquat quota is 42."),
        "{transcript}"
    );
    // The second turn's request carried the first answer without its reasoning.
    let history = server.requests()[1].json["messages"].to_string();
    assert!(history.contains("The kumquat quota is 42."), "{history}");
    assert!(!history.contains("zebrafish"), "{history}");

    ok(&claw(ws).args(["memory", "index"]).output().unwrap());
    let seen = search_json(ws, "kumquat quota");
    assert!(
        seen["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["source"] == "sessions"),
        "{seen}"
    );
    for hidden in ["zebrafish", "quaggamussel", "ocelotpanda"] {
        let v = search_json(ws, hidden);
        assert_eq!(v["results"], serde_json::json!([]), "{hidden}: {v}");
    }
}
