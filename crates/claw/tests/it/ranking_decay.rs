//! Decay ranks but never hides, end to end: the real `claw` binary with the real
//! model and the clock pinned (`CLAW_NOW`, see `support::TEST_NOW`). An exact match
//! in a 400-day-old (and a two-year-old) dated note is returned in the top 3 with
//! its relevance above the minimum score and its score decayed by at most
//! `score::MAX_RECENCY_PENALTY`; two notes of equal relevance, one fresh and
//! one old, come back fresh-first; `--explain` shows relevance beside the score.

use claw_testkit as support;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use std::path::Path;

/// `memory/YYYY-MM-DD.md` for the day `days` before the tests' fixed now.
fn dated(days: i64) -> String {
    let now: DateTime<Utc> = support::TEST_NOW.parse().unwrap();
    format!(
        "memory/{}.md",
        (now - Duration::days(days)).format("%Y-%m-%d")
    )
}

fn search_json(ws: &Path, q: &str) -> Value {
    support::run_json(support::claw(ws).args(["memory", "search", q, "--json", "--explain"]))
}

fn paths(j: &Value) -> Vec<String> {
    j["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap().to_string())
        .collect()
}

fn hit<'a>(j: &'a Value, path: &str) -> &'a Value {
    j["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {j:#}"))
}

#[test]
fn old_notes_rank_but_are_never_hidden() {
    let ws = tempfile::tempdir().unwrap();
    let old400 = dated(400);
    let old730 = dated(730);
    let fresh = dated(1);
    let old_twin = dated(420);
    let files: Vec<(String, &str)> = vec![
        (
            old400.clone(),
            "# Standup\n\nThe carburettor on the Vespa was rebuilt by Giulio in Modena.\n",
        ),
        (
            old730.clone(),
            "# Notes\n\nOur wifi password rotation policy: every quarter, announced in the team channel.\n",
        ),
        (
            fresh.clone(),
            "# Reminder\n\nWater the olive tree on the balcony every Saturday morning.\n",
        ),
        (
            old_twin.clone(),
            "# Reminder\n\nWater the olive tree on the balcony every Saturday morning.\n",
        ),
        (
            "memory/scooters.md".into(),
            "# Scooters\n\nScooter maintenance: check tyre pressure monthly.\n",
        ),
        (
            "memory/modena.md".into(),
            "# Modena\n\nModena is known for balsamic vinegar.\n",
        ),
        (
            "memory/team.md".into(),
            "# Team\n\nThe team channel is #platform on Slack.\n",
        ),
        (
            "MEMORY.md".into(),
            "# About me\n\nI live in Berlin and ride a bicycle.\n",
        ),
    ];
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), *t)).collect();
    support::write_tree(ws.path(), &refs);
    claw_testkit::run_ok(support::claw(ws.path()).args(["memory", "index"]));

    // An exact match in a 400-day-old note: top 3, relevance above the cut, the
    // final score decayed by (nearly) the maximum penalty.
    let j = search_json(ws.path(), "carburettor on the Vespa rebuilt by Giulio");
    let top3: Vec<String> = paths(&j).into_iter().take(3).collect();
    assert!(top3.contains(&old400), "{j:#}");
    let x = &hit(&j, &old400)["explain"];
    let (rel, score, decay) = (
        x["relevance"].as_f64().unwrap(),
        hit(&j, &old400)["score"].as_f64().unwrap(),
        x["decay"].as_f64().unwrap(),
    );
    assert!(rel >= 0.35, "{x}");
    let floor = 1.0 - claw_memory::search::score::MAX_RECENCY_PENALTY;
    assert!((floor..floor + 0.01).contains(&decay), "{x}");
    // The score is the fused score (`blended`) decayed; the threshold tests `relevance`.
    let blended = x["blended"].as_f64().unwrap();
    assert!((score - blended * decay).abs() < 1e-5, "{x}");
    assert_eq!(x["score"].as_f64(), Some(score));

    // Two years old: still returned.
    let j = search_json(ws.path(), "wifi password rotation policy");
    assert_eq!(paths(&j).first(), Some(&old730), "{j:#}");

    // Equal relevance (identical text): the fresh note first, the old one kept
    // below it (limit 20 so MMR's deferral of the exact duplicate cannot drop it).
    let o = support::claw(ws.path())
        .args([
            "memory",
            "search",
            "water the olive tree",
            "--json",
            "--explain",
            "-n",
            "20",
        ])
        .output()
        .unwrap();
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = paths(&j);
    let f = p
        .iter()
        .position(|x| *x == fresh)
        .expect("fresh note returned");
    let o = p
        .iter()
        .position(|x| *x == old_twin)
        .expect("old twin returned");
    assert!(f == 0 && f < o, "{j:#}");
    let rel = |path: &str| hit(&j, path)["explain"]["relevance"].as_f64().unwrap();
    assert!((rel(&fresh) - rel(&old_twin)).abs() < 1e-6, "{j:#}");

    // The text rendering shows relevance beside the score.
    let o = support::claw(ws.path())
        .args(["memory", "search", "carburettor Vespa Giulio", "--explain"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("[relevance 0."), "{text}");
    // A keyword hit of a query with several words shows its term coverage.
    assert!(text.contains("(coverage 1.00)"), "{text}");
    let floor = 1.0 - claw_memory::search::score::MAX_RECENCY_PENALTY;
    assert!(text.contains(&format!("decay {floor:.2}")), "{text}");
}
