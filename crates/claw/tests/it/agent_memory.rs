//! The assistant's memory tools over the real engine: `claw -m` against the
//! scripted OpenAI server, which asks for `memory_search` then `memory_get`; the
//! results the model receives carry citations from the indexed workspace.

use claw_testkit as support;
use claw_testkit::LlmEnv;
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
    claw_testkit::index_keyword_only(ws);

    let server = search_then_get(
        "where does the quokka colony live",
        "On Rottnest Island [MEMORY.md#L3-L4].",
    );
    claw_testkit::run_ok(
        claw(ws)
            .openai_llm(server.url(), "scripted")
            .args(["-m", "where do quokkas live?"]),
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 3);
    let tools = claw_testkit::strs(&reqs[0].json["tools"], "/function/name");
    assert!(tools.contains(&"memory_search") && tools.contains(&"memory_get"));
    assert_search_then_get(&server, "MEMORY.md#L", "Rottnest", "marsupials");
}

/// A model that calls `memory_search` for `query` (`call_1`), then `memory_get`
/// of MEMORY.md from line 3, two lines (`call_2`), then answers `answer`.
pub(crate) fn search_then_get(query: &str, answer: &str) -> ScriptedServer {
    ScriptedServer::start([
        openai::tool_call(
            "call_1",
            "memory_search",
            &[&serde_json::json!({ "query": query }).to_string()],
        ),
        openai::tool_call(
            "call_2",
            "memory_get",
            &[r#"{"path": "MEMORY.md", "from": 3, "lines": 2}"#],
        ),
        openai::text(&[answer]),
    ])
}

/// What the model got in a turn of `memory_search` (`call_1`) then `memory_get`
/// of MEMORY.md from line 3, two lines (`call_2`): the search cites `cited` and
/// finds `found`, not the irrelevant `unrelated`; the get serves only the range.
pub(crate) fn assert_search_then_get(
    server: &ScriptedServer,
    cited: &str,
    found: &str,
    unrelated: &str,
) {
    let search = server.tool_result(1, "call_1");
    assert!(search.contains(cited), "{search}");
    assert!(search.contains(found), "{search}");
    assert!(
        !search.contains(unrelated),
        "irrelevant note ranked: {search}"
    );
    let get = server.tool_result(2, "call_2");
    assert!(get.contains("Rottnest Island"), "{get}");
    assert!(!get.contains("# Memory"), "line range ignored: {get}");
}
