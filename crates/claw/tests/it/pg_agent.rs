//! The assistant's memory tools on `memory.backend: postgres`: `claw -m` against
//! the scripted OpenAI server asks for `memory_search` then `memory_get`; the
//! search answers from the shared PostgreSQL namespace (a note indexed by another
//! workspace is found, with its citation) and `get` reads this workspace's note.
//! Needs `CLAW_PG_URL`; under `CI=true` a missing server fails.

use crate::pg_surfaces::{claw, setup};
use claw_testkit::scripted_server::{ScriptedServer, openai};

#[test]
fn memory_tools_search_the_shared_postgres_namespace() {
    let Some(s) = setup("pgagent") else { return };

    let server = ScriptedServer::start([
        openai::tool_call(
            "call_1",
            "memory_search",
            &[r#"{"query": "platypus river"}"#],
        ),
        openai::tool_call(
            "call_2",
            "memory_get",
            &[r#"{"path": "MEMORY.md", "from": 3, "lines": 2}"#],
        ),
        openai::text(&["In the Derwent [memory/wildlife.md#L2]."]),
    ]);
    let out = claw(&s.a, &s.cfg, &s.url)
        .env("CLAW_LLM_API", "openai")
        .env("CLAW_LLM_BASE_URL", server.url())
        .env("CLAW_LLM_MODEL", "scripted")
        .args(["-m", "where does the platypus hunt?"])
        .output()
        .unwrap();
    let reqs = server.requests();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(reqs.len(), 3);
    // Found in the other workspace's note, through the shared namespace.
    let search = server.tool_result(1, "call_1");
    assert!(search.contains("wildlife.md#L"), "{search}");
    assert!(search.contains("Derwent"), "{search}");
    assert!(
        !search.contains("quokka"),
        "irrelevant note ranked: {search}"
    );
    let get = server.tool_result(2, "call_2");
    assert!(get.contains("Rottnest Island"), "{get}");
    assert!(!get.contains("# Memory"), "line range ignored: {get}");
}
