//! Secrets never reach the index: a note and a session transcript holding every
//! kind of secret are indexed, and no secret can be found by any search path
//! (FTS words, trigram substrings, stored chunk text, `claw memory search`).

use claw_testkit as support;

use rusqlite::Connection;

const SECRETS: &[&str] = &[
    "sk-abcdefghijklmnopqrstuvwx12345678",
    "sk-ant-api03-QWERTYUIOPASDFGHJKLZXCVBNM0123",
    "sk-proj-ZZZZyyyyXXXXwwww1111222233334444",
    "ghp_0123456789abcdefghijABCDEFGHIJ0123",
    "gho_16C7e42F292c6912E7710c838347Ae178B4a",
    "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstu",
    "AKIAIOSFODNN7EXAMPLE",
    "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOp",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "MIIEpAIBAAKCAQEAsecretkeymaterial",
    "hunter2horse",
    "Tr0ub4dor3xyz",
];

fn secret_text() -> String {
    format!(
        "OpenAI key {} and Anthropic {} and project {}\n\
         GitHub {} oauth {} fine-grained {}\n\
         AWS {} Slack {}\n\
         curl -H 'Authorization: Bearer {}'\n\
         -----BEGIN RSA PRIVATE KEY-----\n{}\nmoreKeyLines\n-----END RSA PRIVATE KEY-----\n\
         password={} and db_password: {}\n",
        SECRETS[0],
        SECRETS[1],
        SECRETS[2],
        SECRETS[3],
        SECRETS[4],
        SECRETS[5],
        SECRETS[6],
        SECRETS[7],
        SECRETS[8],
        SECRETS[9],
        SECRETS[10],
        SECRETS[11],
    )
}

#[test]
fn no_secret_is_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let body = secret_text();
    let note = format!("# Credentials dump\nmarkerwordnote\n{body}");
    let mut transcript = serde_json::json!({"type": "session", "id": "s1"}).to_string() + "\n";
    transcript +=
        &(serde_json::json!({"role": "user", "content": format!("markerwordsession {body}"),
        "timestamp": "2026-03-01T10:00:00Z"})
        .to_string()
            + "\n");
    transcript += &(serde_json::json!({"role": "assistant",
        "content": [{"type": "text", "text": format!("noted. {body}")}],
        "timestamp": "2026-03-01T10:00:05Z"})
    .to_string()
        + "\n");
    support::write_tree(
        ws,
        &[
            ("memory/creds.md", note.as_str()),
            ("sessions/s1.jsonl", transcript.as_str()),
        ],
    );
    claw_testkit::index_keyword_only(ws);

    let c = Connection::open(claw_testkit::db_path(ws)).unwrap();
    // Both files were indexed (their ordinary words are searchable) ...
    for (word, source) in [
        ("markerwordnote", "memory"),
        ("markerwordsession", "sessions"),
    ] {
        let n: i64 = c
            .query_row(
                "SELECT count(*) FROM chunks_fts f JOIN chunks c ON c.rowid = f.rowid
                 WHERE chunks_fts MATCH ?1 AND c.source = ?2",
                [claw_memory::words::query_term(word).as_str(), source],
                |r| r.get(0),
            )
            .unwrap();
        assert!(n >= 1, "{word} not indexed");
    }
    let redacted: i64 = c
        .query_row(
            "SELECT count(*) FROM chunks WHERE text LIKE '%[REDACTED]%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(redacted >= 2);
    // ... and no secret is anywhere.
    let count =
        |sql: &str, param: &str| -> i64 { c.query_row(sql, [param], |r| r.get(0)).unwrap() };
    for s in SECRETS {
        let in_text = count("SELECT count(*) FROM chunks WHERE instr(text, ?1) > 0", s);
        assert_eq!(in_text, 0, "{s} stored in a chunk");
        let quoted = format!("\"{s}\"");
        let stemmed = format!("\"{}\"", claw_memory::words::query_term(s));
        let fts = count(
            "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?1",
            &stemmed,
        );
        assert_eq!(fts, 0, "{s} found by FTS");
        let tri = count(
            "SELECT count(*) FROM chunks_trigram WHERE chunks_trigram MATCH ?1",
            &quoted,
        );
        assert_eq!(tri, 0, "{s} found by trigram search");
        let v = support::stdout_json(
            support::claw_keyword_only(ws)
                .args([
                    "memory",
                    "search",
                    "--json",
                    "--no-sync",
                    "--min-score",
                    "0",
                ])
                .arg(s),
        );
        let results = v["results"].as_array().expect("results array").to_vec();
        let leaked = results.iter().any(|r| r.to_string().contains(s));
        assert!(!leaked, "`claw memory search {s}` returned it: {v}");
    }
}
