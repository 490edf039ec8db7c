//! The OpenAI-compatible embeddings backend against a real HTTP server on
//! 127.0.0.1 (scripted `/v1/embeddings` replies): indexing stores its vectors,
//! sends the key from the variable the config names, and search embeds the query
//! through it; an endpoint error falls back to keyword-only with a message.

use claw_testkit::scripted_server;

use scripted_server::{Reply, ScriptedServer};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn claw(ws: &Path, config: &Path) -> Command {
    let mut c = Command::new(claw_testkit::claw_bin());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", ws.join("home"))
        .env("CLAW_WORKSPACE", ws)
        .env("CLAW_CONFIG", config)
        .env("CLAW_NOW", "2026-11-05T12:00:00Z")
        .env("EMBED_KEY", "sk-test-embeddings");
    c
}

fn embeddings(vectors: &[[f32; 4]]) -> Reply {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(i, v)| json!({"object": "embedding", "index": i, "embedding": v}))
        .collect();
    Reply::json(
        200,
        json!({"object": "list", "data": data, "model": "tiny-embed"}),
    )
}

#[test]
fn openai_compatible_embeddings_index_and_search() {
    let dir = claw_testkit::workspace(&[
        ("MEMORY.md", "The ferry to the island leaves at nine.\n"),
        ("memory/cats.md", "Our cat sleeps on the radiator.\n"),
    ]);
    let ws = dir.path();
    // One request per file (MEMORY.md first), then one for the query.
    let server = ScriptedServer::start([
        embeddings(&[[1.0, 0.0, 0.0, 0.0]]),
        embeddings(&[[0.0, 1.0, 0.0, 0.0]]),
        embeddings(&[[0.1, 0.9, 0.0, 0.0]]),
    ]);
    let config = ws.join("config.json");
    std::fs::write(
        &config,
        json!({"embedding": {"provider": "openai", "base_url": server.url(), "model": "tiny-embed",
               "api_key_env": "EMBED_KEY", "dims": 4}})
        .to_string(),
    )
    .unwrap();

    let out = claw_testkit::run_ok(claw(ws, &config).args(["memory", "index", "--json"]));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["model"], "openai:tiny-embed");
    assert_eq!(r["embeddings_computed"], 2, "{r}");
    let reqs = server.requests();
    assert_eq!(reqs[0].path, "/v1/embeddings");
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-test-embeddings")
    );
    assert_eq!(reqs[0].json["model"], "tiny-embed");
    // Chunks are embedded behind their context: the file's title (here its name).
    assert_eq!(
        reqs[0].json["input"][0],
        "MEMORY\n\nThe ferry to the island leaves at nine."
    );

    // A query with no shared words: only the vector stage (via the endpoint) finds it.
    let out = claw_testkit::run_ok(claw(ws, &config).args([
        "memory",
        "search",
        "--json",
        "--mode",
        "vector",
        "pet resting spot",
    ]));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["fallback"], Value::Null, "{s}");
    assert_eq!(s["results"][0]["path"], "memory/cats.md", "{s}");
    assert_eq!(server.requests()[2].json["input"][0], "pet resting spot");

    // The endpoint failing: keyword-only search that says so, never an error.
    server.push(Reply::json(
        500,
        json!({"error": {"message": "overloaded"}}),
    ));
    let out = claw_testkit::run_ok(claw(ws, &config).args(["memory", "search", "--json", "ferry"]));
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["fallback"].is_string(), "{s}");
    assert_eq!(s["results"][0]["path"], "MEMORY.md");
}
