//! Facts that change (issue 27 item 2): of two notes that state the same fact
//! with different values, at equal relevance the newer statement ranks first,
//! keyword-only and hybrid. The control swaps the values between the dates:
//! the newer date still wins, so the order comes from the dates, not from the
//! words.

use claw_testkit as support;
use serde_json::Value;
use std::path::Path;

const OLD: &str = "memory/2026-08-03.md";
const NEW: &str = "memory/2026-11-02.md";

fn write(ws: &Path, old_value: &str, new_value: &str) {
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    for (path, value) in [(OLD, old_value), (NEW, new_value)] {
        std::fs::write(
            ws.join(path),
            format!("# Renovation\n\nThe renovation budget cap is {value} EUR.\n"),
        )
        .unwrap();
    }
}

/// The paths of the hits for the budget question, best first.
fn ranked(ws: &Path, mode: &str, with_model: bool) -> Vec<String> {
    let mut cmd = if with_model {
        support::claw(ws)
    } else {
        support::claw_keyword_only(ws)
    };
    let v: Value = support::run_json(cmd.args([
        "memory",
        "search",
        "what is the renovation budget cap",
        "--mode",
        mode,
        "--json",
    ]));
    assert!(v["fallback"].is_null(), "{v}");
    support::strs(&v["results"], "/path")
        .into_iter()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_newer_of_two_conflicting_statements_ranks_first() {
    for (old_value, new_value) in [("12000", "15000"), ("15000", "12000")] {
        let ws = tempfile::tempdir().unwrap();
        write(ws.path(), old_value, new_value);
        let r = support::run_json(support::claw(ws.path()).args(["memory", "index", "--json"]));
        assert!(r["model"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        for mode in ["fts", "vector", "hybrid"] {
            let hits = ranked(ws.path(), mode, true);
            assert!(hits.len() >= 2, "{mode}: {hits:?}");
            assert!(
                hits[0].ends_with("2026-11-02.md") && hits[1].ends_with("2026-08-03.md"),
                "{mode} ({old_value} then {new_value}): {hits:?}"
            );
        }
    }
}
