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

/// A config file in `ws` for the `openai` backend at `server` (4 dimensions).
fn config(ws: &Path, server: &ScriptedServer) -> std::path::PathBuf {
    let config = ws.join("config.json");
    std::fs::write(
        &config,
        json!({"embedding": {"provider": "openai", "base_url": server.url(), "model": "tiny-embed",
               "api_key_env": "EMBED_KEY", "dims": 4}})
        .to_string(),
    )
    .unwrap();
    config
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

/// `claw memory index --json` against `server`: the report, and the number of
/// texts in each embeddings request, in order.
fn index_counting_inputs(ws: &Path, server: &ScriptedServer) -> (Value, Vec<usize>) {
    let config = config(ws, server);
    let out = claw(ws, &config)
        .args(["memory", "index", "--json"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let inputs = server
        .requests()
        .iter()
        .map(|q| q.json["input"].as_array().map_or(0, Vec::len))
        .collect();
    (r, inputs)
}

#[test]
fn openai_compatible_embeddings_index_and_search() {
    let dir = claw_testkit::workspace(&[
        ("MEMORY.md", "The ferry to the island leaves at nine.\n"),
        ("memory/cats.md", "Our cat sleeps on the radiator.\n"),
    ]);
    let ws = dir.path();
    // One request for both files (the indexer embeds consecutive files' chunks
    // together, MEMORY.md first), then one for the query.
    let server = ScriptedServer::start([
        embeddings(&[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]),
        embeddings(&[[0.1, 0.9, 0.0, 0.0]]),
    ]);
    let config = config(ws, &server);

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
    assert_eq!(
        reqs[0].json["input"][1],
        "cats\n\nOur cat sleeps on the radiator."
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
    assert_eq!(server.requests()[1].json["input"][0], "pet resting spot");

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

/// The indexer embeds consecutive files' chunks in one request (here three
/// one-chunk notes); when that request fails, each file is embedded on its own,
/// so the failure is the issue of the one file whose request failed and the
/// others are indexed with their vectors.
#[test]
fn consecutive_files_share_a_request_and_a_failure_is_one_files_issue() {
    let dir = claw_testkit::workspace(&[
        ("memory/a.md", "Apples ripen in the cellar.\n"),
        ("memory/b.md", "Bees swarm in late spring.\n"),
        ("memory/c.md", "Cedar smells of pencils.\n"),
    ]);
    let ws = dir.path();
    let overloaded = || Reply::json(500, json!({"error": {"message": "overloaded"}}));
    let server = ScriptedServer::start([
        overloaded(),                        // a, b and c together
        embeddings(&[[1.0, 0.0, 0.0, 0.0]]), // a alone
        overloaded(),                        // b alone
        embeddings(&[[0.0, 0.0, 1.0, 0.0]]), // c alone
    ]);
    let (r, inputs) = index_counting_inputs(ws, &server);
    assert_eq!(inputs, [3, 1, 1, 1], "{r}");
    assert_eq!(r["embeddings_computed"], 2, "{r}");
    let issues = r["issues"].as_array().unwrap();
    assert_eq!(issues.len(), 1, "{r}");
    assert_eq!(issues[0]["path"], "memory/b.md", "{r}");
    // a and c are searchable by their vectors; b is not indexed.
    let rows = |sql: &str| -> Vec<String> {
        let c = rusqlite::Connection::open(r["db_path"].as_str().unwrap()).unwrap();
        let mut st = c.prepare(sql).unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    assert_eq!(
        rows("SELECT path FROM chunks WHERE embedding IS NOT NULL ORDER BY path"),
        ["memory/a.md", "memory/c.md"]
    );
    assert_eq!(
        rows("SELECT path FROM files ORDER BY path"),
        ["memory/a.md", "memory/c.md"]
    );
}

/// The model runs on its own thread while the indexer reads the next files: a
/// batch of `EMBED_AHEAD` texts is sent, the next files queue meanwhile, and a
/// text the batch in flight already carries is not sent again when the next
/// batch goes (it is found as in the cache). Every file ends with its vectors.
#[test]
fn the_next_batch_queues_while_one_embeds_and_repeats_none_of_its_texts() {
    let ahead = claw_memory::indexer::EMBED_AHEAD;
    let mut files: Vec<(String, String)> = (0..ahead)
        .map(|i| {
            (
                format!("memory/n{i:02}.md"),
                format!("# Note {i}\n\nThe {i}th fact is about item {i}.\n"),
            )
        })
        .collect();
    // After the first batch: two new texts, and two files with the very text
    // of files in that batch (same title, same body).
    files.push((format!("memory/n{ahead:02}.md"), files[0].1.clone()));
    files.push((format!("memory/n{:02}.md", ahead + 1), files[1].1.clone()));
    for i in ahead + 2..ahead + 4 {
        files.push((
            format!("memory/n{i:02}.md"),
            format!("# Note {i}\n\nA later fact about item {i}.\n"),
        ));
    }
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    let dir = claw_testkit::workspace(&refs);
    let ws = dir.path();
    let server = ScriptedServer::start([
        embeddings(&vec![[1.0, 0.0, 0.0, 0.0]; ahead]),
        embeddings(&[[0.0, 1.0, 0.0, 0.0]; 2]),
    ]);
    let (r, inputs) = index_counting_inputs(ws, &server);
    assert_eq!(inputs, [ahead, 2], "{r}");
    let requests = server.requests();
    let second: Vec<&str> = requests[1].json["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        second.iter().all(|t| t.contains("later fact")),
        "only the new texts: {second:?}"
    );
    assert_eq!(r["embeddings_computed"], ahead + 2, "{r}");
    assert_eq!(r["cache_hits"], 2, "{r}");
    assert!(r["issues"].as_array().unwrap().is_empty(), "{r}");
    let c = rusqlite::Connection::open(r["db_path"].as_str().unwrap()).unwrap();
    let with_vectors: i64 = c
        .query_row(
            "SELECT count(DISTINCT path) FROM chunks WHERE embedding IS NOT NULL",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(with_vectors as usize, ahead + 4, "{r}");
}

/// The model reads a note as its reader does: a link's label without its
/// destination, a bare URL as its host (`claw_memory::readable`), and a query
/// the same way. The stored chunk and the word index keep every URL: a keyword
/// search for words of a link's path still finds the note, and its snippet
/// shows the whole link.
#[test]
fn the_model_reads_links_without_their_destinations_and_keywords_keep_them() {
    let dir = claw_testkit::workspace(&[(
        "memory/links.md",
        "Read [the rollout plan](https://wiki.example.org/eng/rollout-q3?rev=1187) first.\n\
         Ticket: https://tracker.example.com/browse/OPS-4411 (open)\n",
    )]);
    let ws = dir.path();
    let server = ScriptedServer::start([embeddings(&[[1.0, 0.0, 0.0, 0.0]])]);
    let (r, inputs) = index_counting_inputs(ws, &server);
    assert_eq!(inputs, [1], "{r}");
    assert_eq!(
        server.requests()[0].json["input"][0],
        "links\n\nRead the rollout plan first.\nTicket: tracker.example.com (open)"
    );
    // Control: the keyword index holds the destination's words and the snippet
    // the whole link (no model call: `--mode fts`).
    let config = ws.join("config.json");
    let search = |mode: &str, query: &str| -> Value {
        let out = claw_testkit::run_ok(
            claw(ws, &config).args(["memory", "search", "--json", "--mode", mode, query]),
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let s = search("fts", "rollout-q3 OPS-4411");
    assert_eq!(s["results"][0]["path"], "memory/links.md", "{s}");
    let snippet = s["results"][0]["snippet"].as_str().unwrap_or_default();
    assert!(
        snippet.contains("https://wiki.example.org/eng/rollout-q3?rev=1187"),
        "{snippet}"
    );
    assert_eq!(server.requests().len(), 1, "keyword search embeds no query");
    // A query is read as the chunks are: a pasted link meets the vectors on
    // the same terms.
    server.push(embeddings(&[[1.0, 0.0, 0.0, 0.0]]));
    let s = search(
        "vector",
        "what does [[rollout plan]] say about https://tracker.example.com/browse/OPS-4411",
    );
    assert_eq!(s["results"][0]["path"], "memory/links.md", "{s}");
    assert_eq!(
        server.requests()[1].json["input"][0],
        "what does rollout plan say about tracker.example.com"
    );
}
