//! The assistant's memory tools over the real engine: `claw -m` against the
//! scripted OpenAI server, which asks for `memory_search` then `memory_get`; the
//! results the model receives carry citations from the indexed workspace.

use claw_testkit as support;
use claw_testkit::scripted_server;

use scripted_server::{ScriptedServer, openai};

use support::claw_keyword_only as claw;

#[test]
fn memory_search_and_get_reach_the_model_with_citations() {
    let dir = claw_testkit::workspace(&[
        (
            "MEMORY.md",
            "# Memory\n\n## Travel\nThe quokka colony lives on Rottnest Island, a ferry ride from Fremantle.\n",
        ),
        (
            "memory/2026-11-02.md",
            "# Standup\nNothing about marsupials.\n",
        ),
    ]);
    let ws = dir.path();
    let out = claw(ws).args(["memory", "index"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let server = ScriptedServer::start([
        openai::tool_call(
            "call_1",
            "memory_search",
            &[r#"{"query": "where does the quokka colony live"}"#],
        ),
        openai::tool_call(
            "call_2",
            "memory_get",
            &[r#"{"path": "MEMORY.md", "from": 3, "lines": 2}"#],
        ),
        openai::text(&["On Rottnest Island [MEMORY.md#L3-L4]."]),
    ]);
    claw_testkit::run_ok(
        claw(ws)
            .env("CLAW_LLM_API", "openai")
            .env("CLAW_LLM_BASE_URL", server.url())
            .env("CLAW_LLM_MODEL", "scripted")
            .args(["-m", "where do quokkas live?"]),
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    let tools = claw_testkit::strs(&reqs[0].json["tools"], "/function/name");
    assert!(tools.contains(&"memory_search") && tools.contains(&"memory_get"));
    let search = server.tool_result(1, "call_1");
    assert!(search.contains("MEMORY.md#L"), "{search}");
    assert!(search.contains("Rottnest"), "{search}");
    assert!(
        !search.contains("marsupials"),
        "irrelevant note ranked: {search}"
    );
    let get = server.tool_result(2, "call_2");
    assert!(get.contains("Rottnest Island"), "{get}");
    assert!(!get.contains("# Memory"), "line range ignored: {get}");
}
