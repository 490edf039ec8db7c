//! The assistant's memory tools on `memory.backend: postgres`: `claw -m` against
//! the scripted OpenAI server asks for `memory_search` then `memory_get`; the
//! search answers from the shared PostgreSQL namespace (a note indexed by another
//! workspace is found, with its citation) and `get` reads this workspace's note.
//! Needs `CLAW_PG_URL`; under `CI=true` a missing server fails.

use claw_testkit::claw_keyword_only as claw;
use claw_testkit::pg::TestSchema;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use std::path::Path;

fn index(ws: &Path, cfg: &Path, url: &str) {
    let out = claw(ws)
        .env("CLAW_PG_URL", url)
        .env("CLAW_CONFIG", cfg)
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn memory_tools_search_the_shared_postgres_namespace() {
    let Some(pgs) = TestSchema::new("pgagent") else {
        return;
    };
    let url = pgs.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let cfg = pgs.claw_config(dir.path(), "team");
    let (a, b) = (dir.path().join("laptop"), dir.path().join("server"));
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws.join("memory")).unwrap();
    }
    std::fs::write(
        a.join("MEMORY.md"),
        "# Memory\n\n## Travel\nThe quokka colony lives on Rottnest Island, a ferry ride from Fremantle.\n",
    )
    .unwrap();
    std::fs::write(
        b.join("memory/wildlife.md"),
        "# Wildlife\nThe platypus we saw hunts in the Derwent river near Hobart.\n",
    )
    .unwrap();
    index(&a, &cfg, &url);
    index(&b, &cfg, &url);

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
    let out = claw(&a)
        .env("CLAW_PG_URL", &url)
        .env("CLAW_CONFIG", &cfg)
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
    let tool_text = |req: usize, id: &str| -> String {
        reqs[req].json["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
            .map(|m| m["content"].as_str().unwrap().to_string())
            .expect("tool result sent to the model")
    };
    // Found in the other workspace's note, through the shared namespace.
    let search = tool_text(1, "call_1");
    assert!(search.contains("wildlife.md#L"), "{search}");
    assert!(search.contains("Derwent"), "{search}");
    assert!(
        !search.contains("quokka"),
        "irrelevant note ranked: {search}"
    );
    let get = tool_text(2, "call_2");
    assert!(get.contains("Rottnest Island"), "{get}");
    assert!(!get.contains("# Memory"), "line range ignored: {get}");
}
