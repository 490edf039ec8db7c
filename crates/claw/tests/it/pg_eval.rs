//! `claw memory eval --backend postgres` is the same evaluation as SQLite's (one
//! runner, `claw_memory::eval::runner::run_on`, over either storage): on the
//! committed `fixtures/beir-mini`, keyword-only, both backends report the same
//! corpus, chunk count and queries, nDCG@10 within 0.01 (the parity target; the
//! keyword stage is FTS5's BM25 on both), and the PostgreSQL run leaves no
//! evaluation namespace behind; with the model, `--work-dir` holding a SQLite
//! index of the corpus (or a copy of that dir, moved elsewhere) is copied into
//! PostgreSQL vectors included, so nothing is embedded again and every mode
//! scores the same. `claw doctor --json` names the backend of its database
//! section. Needs `CLAW_PG_URL`; under `CI=true` a missing
//! server fails.

use claw_testkit::pg::TestSchema;
use serde_json::Value;
use std::path::Path;

/// `claw memory eval --json --beir fixtures/beir-mini` run by `c` (keyword-only
/// or with the model), with `extra` after the data set.
fn eval_json(mut c: std::process::Command, url: &str, cfg: Option<&Path>, extra: &[&str]) -> Value {
    c.env("CLAW_PG_URL", url);
    if let Some(cfg) = cfg {
        c.env("CLAW_CONFIG", cfg);
    }
    let out = c
        .args(["memory", "eval", "--json", "--beir"])
        .arg(claw_testkit::repo_root().join("fixtures/beir-mini"))
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{extra:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A keyword-only `eval --mode fts` in `ws`.
fn eval_fts(ws: &Path, url: &str, cfg: Option<&Path>, extra: &[&str]) -> Value {
    let mut args = vec!["--mode", "fts"];
    args.extend_from_slice(extra);
    eval_json(claw_testkit::claw_keyword_only(ws), url, cfg, &args)
}

/// `eval --mode all` in `ws` with the model.
fn eval_model(ws: &Path, url: &str, cfg: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--mode", "all"];
    args.extend_from_slice(extra);
    eval_json(claw_testkit::claw(ws), url, Some(cfg), &args)
}

#[test]
fn eval_on_postgres_matches_sqlite_and_drops_its_namespace() {
    let Some((pgs, ws, cfg)) = TestSchema::with_team_config("pgeval") else {
        return;
    };
    let (url, schema) = (pgs.url.clone(), pgs.name.clone());
    let sqlite = eval_fts(&ws.path().join("a"), &url, None, &[]);
    let pg = eval_fts(
        &ws.path().join("b"),
        &url,
        Some(&cfg),
        &["--backend", "postgres"],
    );
    for key in ["documents", "queries", "chunks", "split"] {
        assert_eq!(sqlite[key], pg[key], "{key}");
    }
    assert!(pg["chunks"].as_u64().unwrap() >= 40);
    let (a, b) = (&sqlite["modes"]["fts"], &pg["modes"]["fts"]);
    assert_eq!(a["evaluated_queries"], b["evaluated_queries"]);
    let nd = |v: &Value| v["ndcg@10"].as_f64().unwrap();
    assert!(nd(a) > 0.3, "{a}");
    assert!((nd(a) - nd(b)).abs() <= 0.01, "sqlite {a} vs postgres {b}");

    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let left: i64 = c
        .query_one(
            &format!("SELECT count(*) FROM {schema}.chunks WHERE namespace LIKE 'eval-%'"),
            &[],
        )
        .unwrap()
        .get(0);
    let stats: i64 = c
        .query_one(&format!("SELECT count(*) FROM {schema}.chunk_stats"), &[])
        .unwrap()
        .get(0);
    assert_eq!((left, stats), (0, 0), "the evaluation namespace is dropped");
}

#[test]
fn eval_on_postgres_from_a_kept_work_dir_embeds_nothing_again() {
    let Some((pgs, tmp, cfg)) = TestSchema::with_team_config("pgevalwd") else {
        return;
    };
    let url = pgs.url.clone();
    let ws = tmp.path().join("ws");
    let kept = tmp.path().join("kept");
    let kept = kept.to_str().unwrap();
    // SQLite builds the kept index (the model embeds every chunk) ...
    let sqlite = eval_model(&ws, &url, &cfg, &["--work-dir", kept]);
    let computed = sqlite["embeddings_computed"].as_u64().unwrap();
    assert!(computed >= 40, "{sqlite}");
    assert_eq!(sqlite["embeddings_computed"], sqlite["chunks"]);
    // ... PostgreSQL starts from a copy of it: nothing embedded, same scores.
    let pg = eval_model(
        &ws,
        &url,
        &cfg,
        &["--work-dir", kept, "--backend", "postgres"],
    );
    // The kept dir moved elsewhere (its corpus root is no longer the stored one).
    let moved = tmp.path().join("moved");
    std::fs::rename(kept, &moved).unwrap();
    let pg_moved = eval_model(
        &ws,
        &url,
        &cfg,
        &[
            "--work-dir",
            moved.to_str().unwrap(),
            "--backend",
            "postgres",
        ],
    );
    // SQLite re-roots the moved dir's `eval` source too (it used to fail on it).
    let sqlite_moved = eval_model(&ws, &url, &cfg, &["--work-dir", moved.to_str().unwrap()]);
    for run in [&pg, &pg_moved, &sqlite_moved] {
        assert_eq!(run["embeddings_computed"], 0, "{run}");
        assert_eq!(run["chunks"], sqlite["chunks"], "{run}");
        for mode in ["fts", "vector", "hybrid"] {
            let nd = |v: &Value| v["modes"][mode]["ndcg@10"].as_f64().unwrap();
            assert!(nd(&sqlite) > 0.3, "{mode}: {sqlite}");
            assert!(
                (nd(&sqlite) - nd(run)).abs() <= 0.01,
                "{mode}: sqlite {sqlite} vs postgres {run}"
            );
        }
    }
}

#[test]
fn doctor_names_the_backend() {
    let Some(pgs) = TestSchema::new("pgdoctor") else {
        return;
    };
    let (url, schema) = (pgs.url.clone(), pgs.name.clone());
    let ws = tempfile::tempdir().unwrap();
    let cfg = pgs.claw_config(ws.path(), "team");
    let db = |cfg: Option<&Path>| -> Value {
        let mut c = claw_testkit::claw_keyword_only(ws.path());
        c.env("CLAW_PG_URL", &url);
        if let Some(cfg) = cfg {
            c.env("CLAW_CONFIG", cfg);
        }
        let out = c.args(["doctor", "--json"]).output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        claw_testkit::doctor_section(&v, "database")
    };
    let sqlite = db(None);
    let pg = db(Some(&cfg));
    assert_eq!(sqlite["details"]["backend"], "sqlite", "{sqlite}");
    assert_eq!(pg["details"]["backend"], "postgres", "{pg}");
    assert_eq!(pg["status"], "ok", "{pg}");
    assert_eq!(pg["details"]["location"], format!("postgres:{schema}/team"));
    assert_eq!(pg["details"]["chunks"], 0);
}
