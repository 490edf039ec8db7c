//! One search contract: the assistant's `memory_search` / `memory_get` tools and
//! `claw memory search|get --json` answer the same request with the same JSON
//! (the backend syncs under the same policy as the CLI: here `--no-sync` and
//! `SyncPolicy::Skip`, so even the `sync` object is identical). Real
//! index, real model, the real binary and the agent's real engine backend.

use claw_agent::memory_backend::EngineBackend;
use claw_agent::tools::{MemoryBackend, MemoryGetArgs, MemorySearchArgs, ToolOutput};
use claw_memory::config::EmbedProvider;
use claw_memory::service::SyncPolicy;
use claw_testkit::{claw, model_paths};
use serde_json::Value;
use std::path::Path;

/// Undated notes only: decay is 1 whatever the clock, so the in-process backend
/// (system clock) and the CLI (pinned `CLAW_NOW`) score alike.
fn workspace(ws: &Path) {
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    std::fs::write(
        ws.join("MEMORY.md"),
        "# Memory\n\n## Travel\nThe quokka colony lives on Rottnest Island, a ferry ride from Fremantle.\n\n\
         ## Work\nThe payment webhook retried forever because the handler returned 500 on duplicates.\n",
    )
    .unwrap();
    let long: String = (1..=200)
        .map(|i| format!("line {i}: the ferry timetable changes in winter\n"))
        .collect();
    std::fs::write(ws.join("memory/ferries.md"), long).unwrap();
    std::fs::write(
        ws.join("memory/webhooks.md"),
        "# Webhooks\nRetries back off exponentially; ERR_DUP_4417 marks a duplicate delivery.\n",
    )
    .unwrap();
}

fn cli_json(ws: &Path, args: &[&str]) -> Value {
    let out = claw(ws).args(args).output().unwrap();
    assert!(
        out.status.code() == Some(0) || out.status.code() == Some(1),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn tools_answer_with_the_cli_json() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    workspace(ws);
    let out = claw(ws).args(["memory", "index"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (model_dir, ort) = model_paths();
    let backend = EngineBackend::new(claw_testkit::cli_memory_config(
        ws,
        EmbedProvider::Local {
            model_dir: Some(model_dir),
            ort_dylib_path: Some(ort),
            runtime: Default::default(),
        },
    ))
    .with_sync_policy(SyncPolicy::Skip);

    let searches: [(&str, &[&str]); 5] = [
        (r#"{"query":"where do quokkas live"}"#, &[]),
        (
            r#"{"query":"webhook retries","mode":"fts","limit":3}"#,
            &["--mode", "fts", "-n", "3"],
        ),
        (
            r#"{"query":"ferry timetable","mode":"vector","source":"memory"}"#,
            &["--mode", "vector", "--source", "memory"],
        ),
        (
            r#"{"query":"ERR_DUP_4417","min_score":0.9}"#,
            &["--min-score", "0.9"],
        ),
        (r#"{"query":"zzqx nothing matches this"}"#, &[]),
    ];
    let mut non_empty = 0;
    for (tool_args, flags) in searches {
        let args: MemorySearchArgs = serde_json::from_str(tool_args).unwrap();
        let mut cli_args = vec![
            "memory",
            "search",
            args.query.as_str(),
            "--json",
            "--no-sync",
        ];
        cli_args.extend_from_slice(flags);
        let cli = cli_json(ws, &cli_args);
        assert_eq!(cli["sync"], serde_json::json!({"status": "skipped"}));

        let resp = backend.search(&args.to_request()).unwrap();
        let tool = serde_json::to_value(&resp).unwrap();
        assert_eq!(tool, cli, "{tool_args}");
        // What the tool hands the driver is that object, tagged with the tool.
        let mut tagged = serde_json::to_value(ToolOutput::MemorySearch(resp)).unwrap();
        assert_eq!(tagged["tool"], "memory_search");
        tagged.as_object_mut().unwrap().remove("tool");
        assert_eq!(tagged, cli);
        if !cli["results"].as_array().unwrap().is_empty() {
            non_empty += 1;
            assert!(
                cli["results"][0]["citation"]
                    .as_str()
                    .unwrap()
                    .contains("#L")
            );
        }
    }
    assert!(non_empty >= 3, "the comparison must cover real hits");

    let gets: [(&str, &[&str]); 3] = [
        (
            r#"{"path":"MEMORY.md","from":3,"lines":2}"#,
            &["--from", "3", "--lines", "2"],
        ),
        (r#"{"path":"memory/ferries.md"}"#, &[]),
        (
            r#"{"path":"memory/ferries.md","from":190,"lines":50}"#,
            &["--from", "190", "--lines", "50"],
        ),
    ];
    for (tool_args, flags) in gets {
        let args: MemoryGetArgs = serde_json::from_str(tool_args).unwrap();
        let mut cli_args = vec!["memory", "get", args.path.as_str(), "--json"];
        cli_args.extend_from_slice(flags);
        let cli = cli_json(ws, &cli_args);
        let resp = backend.get(&args.to_request()).unwrap();
        assert_eq!(serde_json::to_value(&resp).unwrap(), cli, "{tool_args}");
        for key in ["from", "to", "source", "truncated", "next_from"] {
            assert!(cli.get(key).is_some(), "{key} missing from {cli}");
        }
    }

    // Refusals are errors on both sides.
    let err = backend
        .get(
            &MemoryGetArgs {
                path: "../etc/passwd".into(),
                from: None,
                lines: None,
            }
            .to_request(),
        )
        .unwrap_err();
    assert!(err.message().contains("`..`"), "{}", err.message());
    let out = claw(ws)
        .args(["memory", "get", "../etc/passwd", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
