//! The assistant's side of memory, end to end: `claw -m` against the scripted
//! OpenAI-compatible server on 127.0.0.1, the real embedding model and the real
//! SQLite index. `memory_search` syncs before it answers (a fact written with
//! `write_file` in the same turn is found), a never-indexed workspace is indexed
//! on first use, compaction consolidates durable facts into MEMORY.md once, and
//! `<think>` blocks never reach the answer, the transcript or the index.

use claw_testkit::LlmEnv;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use claw_testkit::{claw, workspace, write_tree};
use serde_json::Value;
use std::path::Path;
use std::process::Output;

fn run_claw(ws: &Path, server: &ScriptedServer, args: &[&str]) -> Output {
    claw(ws)
        .openai_llm(server.url(), "scripted")
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

#[test]
fn a_fact_written_in_a_turn_is_found_by_memory_search_in_the_same_turn() {
    let dir = workspace(&[(
        "MEMORY.md",
        "# Memory\n\n## People\n- Ada runs the payments team.\n",
    )]);
    let ws = dir.path();
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
    let written = server.tool_result(1, "w1");
    assert!(!written.starts_with("Error"), "{written}");
    let found = server.tool_result(2, "s1");
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
    assert!(!claw_testkit::db_path(ws).exists());

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
    let found = server.tool_result(1, "s1");
    assert!(found.contains("memory/2026-10-17.md#L"), "{found}");
    assert!(found.contains("Lake Vansj"), "{found}");
    assert!(!found.contains("no-vectors"), "{found}");
    assert!(!found.contains("note:"), "{found}");
}

fn session_text(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("sessions/cli_default.jsonl")).unwrap()
}

fn search_json(ws: &Path, query: &str) -> serde_json::Value {
    claw_testkit::stdout_json(claw(ws).args(["memory", "search", query, "--json", "--mode", "fts"]))
}

#[test]
fn think_blocks_in_a_streamed_answer_are_never_shown_stored_or_indexed() {
    let dir = workspace(&[("MEMORY.md", "# Memory\n")]);
    let ws = dir.path();
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

/// The REPL with `lines` on stdin (no terminal), against `server`.
fn run_repl(ws: &Path, server: &ScriptedServer, lines: &str) -> Output {
    run_repl_with(ws, server, lines, &[])
}

/// [`run_repl`] with more environment (e.g. `CLAW_NOW`).
fn run_repl_with(ws: &Path, server: &ScriptedServer, lines: &str, env: &[(&str, &str)]) -> Output {
    use std::io::Write;
    let mut child = claw(ws)
        .openai_llm(server.url(), "scripted")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the REPL");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The first user message of a request.
fn first_user(req: &Value) -> String {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

/// The conversation part of a consolidation request.
fn conversation_of(req: &Value) -> String {
    let text = first_user(req);
    text.split("<conversation>")
        .nth(1)
        .unwrap_or("")
        .to_string()
}

fn is_consolidation(req: &Value) -> bool {
    first_user(req).starts_with("Current MEMORY.md:")
}

#[test]
fn compaction_consolidates_into_memory_md_once() {
    let dir = workspace(&[(
        "MEMORY.md",
        "# Memory\n\nMy own notes, untouched.\n\n## People\n- Ada runs the payments team.\n",
    )]);
    let ws = dir.path();
    let first_facts = "## People\n- Grace reviews every schema change.\n- Ada runs the payments team.\n\
        ## Decisions\n- The billing service uses PostgreSQL 16.\n\
        - The staging key is sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD.\n";
    // The second consolidation repeats what is there and adds one preference.
    let second_facts = "## Decisions\n- The billing service uses PostgreSQL 16.\n\
        ## People\n- Grace reviews every schema change.\n\
        ## Preferences\n- The user prefers short answers.\n";
    let server = ScriptedServer::start([
        openai::text(&["Noted: PostgreSQL 16, Grace reviews schemas."]),
        // /compact: flush, consolidation, summary.
        openai::text(&["NO_REPLY"]),
        openai::text(&[first_facts]),
        openai::text(&["The user chose PostgreSQL 16 for billing."]),
        openai::text(&["Short answers it is."]),
        // /compact again.
        openai::text(&["NO_REPLY"]),
        openai::text(&[second_facts]),
        openai::text(&["Billing on PostgreSQL 16; short answers preferred."]),
    ]);
    let out = run_repl(
        ws,
        &server,
        "We decided the billing service uses PostgreSQL 16; Grace reviews schema changes.\n\
         /compact\n\
         Also, I prefer short answers.\n\
         /compact\n\
         exit\n",
    );
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let reqs: Vec<Value> = server.requests().into_iter().map(|r| r.json).collect();
    assert_eq!(reqs.len(), 8, "{stderr}");
    assert!(
        is_consolidation(&reqs[2]) && is_consolidation(&reqs[6]),
        "{stderr}"
    );

    let memory = std::fs::read_to_string(ws.join("MEMORY.md")).unwrap();
    assert_eq!(
        memory,
        "# Memory\n\nMy own notes, untouched.\n\n## People\n- Ada runs the payments team.\n\
         - Grace reviews every schema change.\n\n## Decisions\n\
         - The billing service uses PostgreSQL 16.\n- The staging key is [REDACTED].\n\n\
         ## Preferences\n- The user prefers short answers.\n",
        "{stderr}"
    );
    assert!(
        stderr.contains("MEMORY.md: remembered 3 new fact(s), 1 already there"),
        "{stderr}"
    );
    assert!(
        stderr.contains("MEMORY.md: remembered 1 new fact(s), 2 already there"),
        "{stderr}"
    );
    // Written by claw under MEMORY.md's lock (merged onto the file as it is
    // then), not through the model's write_file tool: no approval asked.
    assert!(!stderr.contains("run write_file"), "{stderr}");

    // The second consolidation saw only what the first had not.
    let first = conversation_of(&reqs[2]);
    assert!(first.contains("PostgreSQL 16"), "{first}");
    let second = conversation_of(&reqs[6]);
    assert!(second.contains("short answers"), "{second}");
    assert!(!second.contains("Grace"), "consolidated twice: {second}");
    assert!(!second.contains("Noted:"), "consolidated twice: {second}");

    // The metadata line records how far the session was consolidated.
    let transcript = session_text(ws);
    let meta: Value = serde_json::from_str(transcript.lines().next().unwrap()).unwrap();
    assert_eq!(meta["type"], "session");
    assert_eq!(meta["last_consolidated"]["messages"], 4, "{meta}");
    assert!(!transcript.contains("sk-proj-abcdef"));
}

#[test]
fn remember_in_the_repl_consolidates_without_compacting() {
    let dir = workspace(&[("MEMORY.md", "# Memory\n")]);
    let ws = dir.path();
    let server = ScriptedServer::start([
        openai::text(&["Got it: never deploy on Fridays."]),
        openai::text(&["## Standing instructions\n- Never deploy on Fridays.\n"]),
    ]);
    let out = run_repl(
        ws,
        &server,
        "Rule: never deploy on Fridays.\n/remember\n/remember\nquit\nnot sent\n",
    );
    ok(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The second /remember has nothing new: no model call; `quit` leaves.
    assert_eq!(server.requests().len(), 2, "{stderr}");
    assert!(stderr.contains("nothing new to remember"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(ws.join("MEMORY.md")).unwrap(),
        "# Memory\n\n## Standing instructions\n- Never deploy on Fridays.\n"
    );
    // No compaction happened: the history is whole.
    assert!(!session_text(ws).contains("\"type\":\"compaction\""));
}

/// A fact that changes (issue 27 item 2): MEMORY.md says 12000 EUR, the user
/// says it is 15000 now, `/remember` runs against the scripted model. The file
/// keeps exactly one current value, with the old one as dated history; then a
/// contradiction the model marks `(replaces: …)`, an exact duplicate and a
/// paraphrase change nothing more.
#[test]
fn remember_updates_a_changed_fact_instead_of_dropping_it() {
    let dir = workspace(&[(
        "MEMORY.md",
        "# Memory\n\n## Decisions\n- The renovation budget is capped at 12000 EUR.\n\n## Preferences\n- Prefers tea in the morning.\n",
    )]);
    let ws = dir.path();
    let server = ScriptedServer::start([
        openai::text(&["Noted: the cap is 15000 EUR now, and coffee it is."]),
        openai::text(&[
            "## Decisions\n- Renovation budget cap is now 15000 EUR.\n- The renovation budget is capped at 15000 EUR.\n\n## Preferences\n- Prefers coffee in the morning (replaces: Prefers tea in the morning.)\n- prefers coffee in the morning\n",
        ]),
    ]);
    let out = run_repl_with(
        ws,
        &server,
        "The budget cap is 15000 EUR now. And I switched to coffee.\n/remember\nquit\n",
        &[("CLAW_NOW", "2026-12-02T10:00:00Z")],
    );
    ok(&out);
    let md = std::fs::read_to_string(ws.join("MEMORY.md")).unwrap();
    assert_eq!(
        md,
        "# Memory\n\n## Decisions\n- Renovation budget cap is now 15000 EUR. (since 2026-12-02; was 12000 EUR)\n\n## Preferences\n- Prefers coffee in the morning (since 2026-12-02; was tea)\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("updated 2"), "{stderr}");
}
