//! End to end through the real `claw` binary (keyword-only index, real SQLite): a session
//! transcript (`sessions/x.jsonl`) and a note hold secrets of the kinds that leaked before
//! (bare AWS secret keys, URL passwords, Stripe, Google, JWTs, npm, Hugging Face, GitLab,
//! "my password is …", private keys, …). `claw memory search` finds none of them, and
//! `claw memory get` — and the assistant's `memory_get` tool — print the redacted text,
//! line for line, never the secret.
use claw_testkit as support;

use claw_agent::memory_backend::EngineBackend;
use claw_agent::tools::memory::{MemoryBackend, MemoryGetArgs};
use claw_memory::config::EmbedProvider;
use serde_json::Value;
use std::path::Path;

/// Kinds taken from the corpus (the first secret of each).
const KINDS: &[&str] = &[
    "aws_secret_access_key",
    "url_password",
    "stripe_secret_key",
    "google_api_key",
    "jwt",
    "npm_token",
    "huggingface_token",
    "gitlab_pat",
    "password_phrase",
    "github_pat",
    "bearer_header",
    "generic_high_entropy",
    "gcp_service_account",
    "slack_token",
];

struct Row {
    kind: String,
    secret: String,
    line: String,
}

fn unescape(s: &str) -> String {
    s.replace("\\\\", "\u{0}")
        .replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace('\u{0}', "\\")
}

fn corpus_rows() -> Vec<Row> {
    // The repository's fixtures: the nearest ancestor of this package that has them.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("fixtures/secrets/secrets.tsv"))
        .find(|p| p.is_file())
        .expect("fixtures/secrets/secrets.tsv in the repository");
    let text = std::fs::read_to_string(path).expect("secrets.tsv");
    let all: Vec<Row> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let mut p = l.splitn(3, '\t');
            Some(Row {
                kind: p.next()?.to_string(),
                secret: unescape(p.next()?),
                line: unescape(p.next()?),
            })
        })
        .collect();
    KINDS
        .iter()
        .map(|k| {
            let r = all
                .iter()
                .find(|r| r.kind == *k)
                .unwrap_or_else(|| panic!("no {k} in the corpus"));
            Row {
                kind: r.kind.clone(),
                secret: r.secret.clone(),
                line: r.line.clone(),
            }
        })
        .collect()
}

/// Any 8-character piece of `secret` in `text`.
fn leaked_piece<'a>(text: &str, secret: &'a str) -> Option<&'a str> {
    crate::secrets_corpus::windows(secret)
        .into_iter()
        .find(|p| text.contains(p))
}

fn assert_clean(what: &str, text: &str, rows: &[Row]) {
    for r in rows {
        if let Some(p) = leaked_piece(text, &r.secret) {
            panic!(
                "{what}: {} secret piece {p:?} is in the output:\n{text}",
                r.kind
            );
        }
    }
}

#[test]
fn search_and_get_never_return_a_secret() {
    let rows = corpus_rows();
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();

    // The transcript: a header, then one message per secret, alternating roles and
    // content shapes (plain string, content blocks).
    let mut transcript = serde_json::json!({"type": "session", "id": "x"}).to_string() + "\n";
    for (i, r) in rows.iter().enumerate() {
        let text = format!("zebracode{i} {}", r.line);
        let msg = if i % 2 == 0 {
            serde_json::json!({"role": "user", "content": text, "timestamp": "2026-11-02T10:00:00Z"})
        } else {
            serde_json::json!({"role": "assistant", "content": [{"type": "text", "text": text}],
                "timestamp": "2026-11-02T10:00:05Z"})
        };
        transcript.push_str(&(msg.to_string() + "\n"));
    }
    // The note: a private key block in the middle (4 body lines) and a marker after it,
    // to check that `get` keeps the file's line numbers.
    let mut note = String::from("# Server access\n\nzebranote before the key\n");
    note.push_str("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACDmQx1Lr5nLzY0K5p7vQ8cJ3xw2bqk9n1XgU4c6m0hWZgAAAJhBzE3nQcxN\n5wAAAAtzc2gtZWQyNTUxOQAAACDmQx1Lr5nLzY0K5p7vQ8cJ3xw2bqk9n1XgU4c6m0hWZg\n-----END OPENSSH PRIVATE KEY-----\n");
    let marker_line = note.lines().count() + 1;
    note.push_str("zebramarker line after the key\n\n");
    for r in &rows {
        note.push_str(&format!("- {}\n", r.line));
    }
    support::write_tree(
        ws,
        &[
            ("sessions/x.jsonl", transcript.as_str()),
            ("memory/access.md", note.as_str()),
        ],
    );
    let key_piece = "QyNTUxOQAAACDmQx1Lr5nLzY0K5p7vQ8cJ3xw2bqk9n1XgU4c6m0hWZgAAAJhBzE3nQcxN";

    claw_testkit::index_keyword_only(ws);

    // Search: ordinary words still find both files, with markers where the secrets were ...
    let search = |q: &str| -> Value {
        support::stdout_json(
            support::claw_keyword_only(ws)
                .args(["memory", "search", "--json", "--no-sync"])
                .args(["--min-score", "0", "--limit", "50"])
                .arg(q),
        )
    };
    let v = search("zebracode0 zebracode1 zebramarker");
    let results = v["results"].as_array().expect("results");
    let paths: Vec<&str> = results.iter().filter_map(|r| r["path"].as_str()).collect();
    assert!(
        paths.contains(&"sessions/x.jsonl") && paths.contains(&"memory/access.md"),
        "{v}"
    );
    assert!(v.to_string().contains("[REDACTED]"), "{v}");
    // ... and no secret finds anything that contains it.
    for r in &rows {
        let v = search(&r.secret);
        assert_clean(
            &format!("search for the {} secret", r.kind),
            &v["results"].to_string(),
            &rows,
        );
    }
    let v = search(key_piece);
    assert!(
        !v["results"].to_string().contains("b3BlbnNzaC1rZXkt"),
        "{v}"
    );

    // Get: the whole transcript, redacted, still one JSON object per line.
    let out = claw_testkit::run_ok(support::claw_keyword_only(ws).args([
        "memory",
        "get",
        "sessions/x.jsonl",
        "--lines",
        "1000",
    ]));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert_clean("claw memory get sessions/x.jsonl", &text, &rows);
    assert!(text.contains("[REDACTED]"), "{text}");
    assert_eq!(text.lines().count(), transcript.lines().count());
    for (i, line) in text.lines().enumerate() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("line {} is no longer JSON ({e}): {line}", i + 1));
        if i > 0 {
            assert!(
                line.contains(&format!("zebracode{}", i - 1)),
                "line {}: {line}",
                i + 1
            );
        }
    }

    // Get --json on the note: no key material, the file's line numbers kept.
    let out = support::claw_keyword_only(ws)
        .args([
            "memory",
            "get",
            "memory/access.md",
            "--json",
            "--lines",
            "1000",
        ])
        .output()
        .expect("run claw memory get --json");
    let j: Value = serde_json::from_slice(&out.stdout).expect("get --json");
    let text = j["text"].as_str().expect("text");
    assert_clean("claw memory get memory/access.md", text, &rows);
    assert!(
        !text.contains("b3BlbnNzaC1rZXkt") && !text.contains(key_piece),
        "{text}"
    );
    assert_eq!(
        j["total_lines"].as_u64(),
        Some(note.lines().count() as u64),
        "{j}"
    );
    let out = support::claw_keyword_only(ws)
        .args(["memory", "get", "memory/access.md", "--lines", "1"])
        .arg("--from")
        .arg(marker_line.to_string())
        .output()
        .expect("run claw memory get --from");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "zebramarker line after the key\n"
    );

    // The assistant's memory_get tool goes through the same engine.
    let backend = EngineBackend::new(claw_testkit::cli_memory_config(ws, EmbedProvider::None));
    for path in ["sessions/x.jsonl", "memory/access.md"] {
        let resp = backend
            .get(
                &MemoryGetArgs {
                    path: path.to_string(),
                    from: None,
                    lines: Some(1000),
                }
                .to_request(),
            )
            .expect("memory_get");
        assert_clean(&format!("memory_get {path}"), &resp.text, &rows);
        assert!(resp.text.contains("[REDACTED]"), "{}", resp.text);
        assert!(!resp.text.contains("b3BlbnNzaC1rZXkt"));
    }
}
