//! The assistant's memory tools on `memory.backend: postgres`: `claw -m` against
//! the scripted OpenAI server asks for `memory_search` then `memory_get`; the
//! search answers from the shared PostgreSQL namespace (a note indexed by another
//! workspace is found, with its citation) and `get` reads this workspace's note.
//! Needs `CLAW_PG_URL`; under `CI=true` a missing server fails.

use crate::agent_memory::search_then_get;
use crate::pg_surfaces::{claw, setup};
use claw_testkit::LlmEnv;

#[test]
fn memory_tools_search_the_shared_postgres_namespace() {
    let Some(s) = setup("pgagent") else { return };

    let server = search_then_get("platypus river", "In the Derwent [memory/wildlife.md#L2].");
    claw_testkit::run_ok(
        claw(&s.a, &s.cfg, &s.url)
            .openai_llm(server.url(), "scripted")
            .args(["-m", "where does the platypus hunt?"]),
    );
    assert_eq!(server.requests().len(), 3);
    // Found in the other workspace's note, through the shared namespace.
    crate::agent_memory::assert_search_then_get(&server, "wildlife.md#L", "Derwent", "quokka");
}
