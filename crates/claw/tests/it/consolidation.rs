//! The scheduled consolidation end to end (`claw memory consolidate`) against
//! the scripted OpenAI-compatible model, over several days of daily notes and a
//! transcript, with the clock shifted (`CLAW_NOW`) from day to day:
//!
//! - the first run promotes the durable facts of the notes and the user's turns
//!   into MEMORY.md under a dated heading, with provenance, and a fact that
//!   changes one MEMORY.md holds replaces it with its history;
//! - the candidates the searches recalled most come first in the request;
//! - a second run the same day changes nothing and says so (no model call);
//! - the next day's run sends only the new material;
//! - the report in the state directory is readable, and `memory status` shows
//!   the last run (text and JSON);
//! - `min_recalls` holds back candidates the searches never returned;
//! - two runs at once write each fact once (the writer lock);
//! - without an LLM it is off, says so in the status, and the command exits 2
//!   with a hint.

use claw_testkit::scripted_server::{Reply, ScriptedServer, Step, openai};
use claw_testkit::{claw_llm, claw_utc, run_json, run_ok, state_dir, workspace};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const MEMORY: &str = "# Memory\n\n## Decisions\n- The renovation budget is capped at 12000 EUR.\n";

/// A transcript: the session line, then (role, content, time) messages.
fn transcript(key: &str, messages: &[(&str, &str, &str)]) -> String {
    let mut out = serde_json::json!({
        "type": "session", "key": key, "created": "2026-12-01T08:00:00Z", "version": 1
    })
    .to_string();
    out.push('\n');
    for (role, content, at) in messages {
        out.push_str(
            &serde_json::json!({"type": "message", "role": role, "content": content, "timestamp": at})
                .to_string(),
        );
        out.push('\n');
    }
    out
}

fn days_of_notes() -> tempfile::TempDir {
    let chat = transcript(
        "cli:default",
        &[
            (
                "user",
                "From now on, always answer me in English please.",
                "2026-12-02T09:00:00Z",
            ),
            (
                "assistant",
                "Understood, English it is.",
                "2026-12-02T09:00:05Z",
            ),
            ("user", "thanks", "2026-12-02T09:01:00Z"),
        ],
    );
    let heartbeat = transcript(
        "heartbeat",
        &[(
            "user",
            "This is a scheduled heartbeat check of the zebra checklist.",
            "2026-12-02T10:00:00Z",
        )],
    );
    workspace(&[
        ("MEMORY.md", MEMORY),
        (
            "memory/2026-12-01.md",
            "# Monday\n\nAda now leads the payments team.\n\nBought milk and eggs today.\n",
        ),
        (
            "memory/2026-12-02.md",
            "# Tuesday\n\nThe renovation budget is capped at 15000 EUR now.\n",
        ),
        // Older than the first run's lookback (7 days): never read.
        (
            "memory/2026-11-20.md",
            "# Old\n\nThe quokka colony moved to Rottnest.\n",
        ),
        ("sessions/cli_default.jsonl", chat.as_str()),
        ("sessions/heartbeat.jsonl", heartbeat.as_str()),
    ])
}

/// `claw memory consolidate --json` at `now` against `server`.
fn consolidate(ws: &Path, server: &ScriptedServer, now: &str) -> Value {
    run_json(claw_llm(ws, &server.url()).env("CLAW_NOW", now).args([
        "memory",
        "consolidate",
        "--json",
    ]))
}

/// The excerpts part of request `i`'s prompt (MEMORY.md, which carries
/// citations of its own, is left out).
fn excerpts(server: &ScriptedServer, i: usize) -> String {
    let req = &server.requests()[i].json;
    let user = req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "user")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    user.split_once("<excerpts>").unwrap().1.to_string()
}

fn memory_md(ws: &Path) -> String {
    std::fs::read_to_string(ws.join("MEMORY.md")).unwrap()
}

#[test]
fn consolidation_over_several_days_promotes_updates_and_is_idempotent() {
    let dir = days_of_notes();
    let ws = dir.path();
    // Searches recall Tuesday's budget note twice before the first run.
    for _ in 0..2 {
        run_ok(claw_utc(ws).env("CLAW_NOW", "2026-12-02T18:00:00Z").args([
            "memory",
            "search",
            "renovation budget",
        ]));
    }
    let server = ScriptedServer::start([openai::text(&[
        "## Decisions\n- The renovation budget is capped at 15000 EUR. [1]\n\n## People\n- Ada leads the payments team. [2]\n\n",
        "## Standing instructions\n- Always answer in English. [4]\n",
    ])]);

    // Day 1, 03:00.
    let run = consolidate(ws, &server, "2026-12-03T03:00:00Z");
    assert_eq!(run["outcome"], "changed", "{run:#}");
    assert_eq!(
        (run["promoted"].as_u64(), run["updated"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(run["window"]["from"], "2026-11-27");
    assert_eq!(run["window"]["to"], "2026-12-03");
    assert_eq!(
        (run["notes"].as_u64(), run["turns"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(run["candidates"].as_u64(), Some(4), "{run:#}");
    let sent = excerpts(&server, 0);
    // The recalled note first (otherwise the oldest note would be), the user's
    // turn last; the heartbeat's "user" and the old note never.
    let pos = |s: &str| sent.find(s).unwrap_or_else(|| panic!("no {s} in {sent}"));
    assert!(pos("[1] memory/2026-12-02.md#L3-L3") < pos("[2] memory/2026-12-01.md#L3-L3"));
    assert!(sent.contains("recalled by 2 search(es)"), "{sent}");
    assert!(pos("[3] memory/2026-12-01.md#L5-L5") < pos("[4] sessions/cli_default.jsonl#L2-L2"));
    assert!(!sent.contains("zebra"), "{sent}");
    assert!(!sent.contains("quokka"), "{sent}");
    assert!(!sent.contains("thanks"), "{sent}");
    assert_eq!(
        memory_md(ws),
        "# Memory\n\n## Decisions\n- The renovation budget is capped at 15000 EUR. (since 2026-12-03; was 12000 EUR) — from memory/2026-12-02.md#L3-L3\n\n## Consolidated on 2026-12-03\n- Ada leads the payments team. — from memory/2026-12-01.md#L3-L3\n- Always answer in English. — from sessions/cli_default.jsonl#L2-L2\n"
    );
    // The report: readable, with provenance.
    let report_path = run["report"].as_str().unwrap().to_string();
    assert!(report_path.starts_with(&state_dir(ws).display().to_string()));
    let report = std::fs::read_to_string(&report_path).unwrap();
    for line in [
        "# Memory consolidation, 2026-12-03",
        "## 03:00 (UTC): promoted 2, updated 1, skipped 0 from 4 new candidate(s)",
        "Read 2 daily note(s) and 1 user turn(s) of 2026-11-27 to 2026-12-03",
        "Promoted into MEMORY.md (## Consolidated on 2026-12-03):",
        "- Ada leads the payments team. — from memory/2026-12-01.md#L3-L3",
        "Updated (the old value kept as history):",
        "- The renovation budget is capped at 15000 EUR. (was 12000 EUR) — from memory/2026-12-02.md#L3-L3",
    ] {
        assert!(report.contains(line), "no {line:?} in\n{report}");
    }

    // Day 1, 10:00: nothing new, nothing asked, nothing changed — and said so.
    let before = memory_md(ws);
    let again = consolidate(ws, &server, "2026-12-03T10:00:00Z");
    assert_eq!(again["outcome"], "unchanged", "{again:#}");
    assert_eq!(
        again["message"],
        "nothing new since the last run (2026-12-03 03:00); MEMORY.md unchanged"
    );
    assert_eq!(again["sent"].as_u64(), Some(0));
    assert_eq!(server.requests().len(), 1);
    assert_eq!(memory_md(ws), before);
    let report = std::fs::read_to_string(&report_path).unwrap();
    assert!(
        report.contains("## 10:00 (UTC): nothing new since the last run"),
        "{report}"
    );
    // The text output says it too.
    let out = run_ok(
        claw_llm(ws, &server.url())
            .env("CLAW_NOW", "2026-12-03T11:00:00Z")
            .args(["memory", "consolidate"]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("consolidation: nothing new since the last run"),
        "{text}"
    );
    assert!(text.contains("report:   "), "{text}");

    // The status shows the last run and what was promoted recently.
    let st = run_json(
        claw_llm(ws, &server.url())
            .env("CLAW_NOW", "2026-12-03T12:00:00Z")
            .args(["memory", "status", "--json"]),
    );
    let c = &st["consolidation"];
    assert_eq!(c["enabled"], true, "{c:#}");
    assert_eq!(c["schedule"], "daily at 03:00 (UTC)");
    assert!(
        c["last_run"]["message"]
            .as_str()
            .unwrap()
            .starts_with("nothing new")
    );
    let recent: Vec<&str> = c["recent"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap())
        .collect();
    assert_eq!(recent.len(), 3, "{c:#}");
    assert!(recent.contains(&"Ada leads the payments team."));
    let out = run_ok(
        claw_llm(ws, &server.url())
            .env("CLAW_NOW", "2026-12-03T12:00:00Z")
            .args(["memory", "status"]),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("consolidation: on, daily at 03:00 (UTC)"),
        "{text}"
    );
    assert!(
        text.contains("last consolidation: 2026-12-03 11:00 UTC — nothing new"),
        "{text}"
    );
    assert!(
        text.contains(
            "2026-12-03 promoted: Ada leads the payments team. — from memory/2026-12-01.md#L3-L3"
        ),
        "{text}"
    );
    assert!(text.contains("in a running `claw gateway`"), "{text}");
    // The doctor: fine the same day; days later, nothing has been running
    // the schedule (only a gateway does), which it says.
    let idle = ScriptedServer::start([]);
    let doctor = |now: &str| {
        let out = claw_llm(ws, &idle.url())
            .env("CLAW_NOW", now)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        claw_testkit::doctor_section(&report, "consolidation")
    };
    let s = doctor("2026-12-03T12:00:00Z");
    assert_eq!(s["status"], "ok", "{s}");
    let s = doctor("2026-12-06T12:00:00Z");
    assert_eq!(s["status"], "warn", "{s}");
    assert!(
        s["summary"].as_str().unwrap().ends_with("— 3 days ago"),
        "{s}"
    );
    assert!(s["hint"].as_str().unwrap().contains("claw gateway"), "{s}");

    // Day 2: a new note; only it is sent.
    std::fs::write(
        ws.join("memory/2026-12-04.md"),
        "# Thursday\n\nGrace joined the platform team in May.\n",
    )
    .unwrap();
    server.push(openai::text(&[
        "## People\n- Grace joined the platform team in May. [1]\n",
    ]));
    let day2 = consolidate(ws, &server, "2026-12-04T03:00:00Z");
    assert_eq!(day2["outcome"], "changed", "{day2:#}");
    assert_eq!(day2["window"]["from"], "2026-12-03");
    assert_eq!(day2["candidates"].as_u64(), Some(1), "{day2:#}");
    let sent = excerpts(&server, 1);
    assert!(sent.contains("[1] memory/2026-12-04.md#L3-L3"), "{sent}");
    for old in ["Ada now leads", "milk", "always answer", "15000"] {
        assert!(!sent.contains(old), "{old} sent again: {sent}");
    }
    assert!(
        memory_md(ws).ends_with(
            "\n## Consolidated on 2026-12-04\n- Grace joined the platform team in May. — from memory/2026-12-04.md#L3-L3\n"
        ),
        "{}",
        memory_md(ws)
    );
}

#[test]
fn min_recalls_holds_back_what_searches_never_returned() {
    let dir = days_of_notes();
    let ws = dir.path();
    std::fs::write(
        ws.join("config.json"),
        r#"{"memory": {"consolidation": {"min_recalls": 1}}}"#,
    )
    .unwrap();
    run_ok(
        claw_utc(ws)
            .env("CLAW_CONFIG", ws.join("config.json"))
            .args(["memory", "search", "renovation budget"]),
    );
    let server = ScriptedServer::start([openai::text(&[
        "## Decisions\n- The renovation budget is capped at 15000 EUR. [1]\n",
    ])]);
    let run = run_json(
        claw_llm(ws, &server.url())
            .env("CLAW_CONFIG", ws.join("config.json"))
            .env("CLAW_NOW", "2026-12-03T03:00:00Z")
            .args(["memory", "consolidate", "--json"]),
    );
    assert_eq!(run["sent"].as_u64(), Some(1), "{run:#}");
    assert_eq!(run["updated"].as_u64(), Some(1));
    let sent = excerpts(&server, 0);
    assert!(sent.contains("memory/2026-12-02.md"), "{sent}");
    assert!(!sent.contains("Ada"), "{sent}");
    let held: Vec<&Value> = run["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["kind"] == "skipped")
        .collect();
    assert_eq!(held.len(), 3, "{run:#}");
    assert!(
        held.iter()
            .all(|i| i["reason"].as_str().unwrap().starts_with(
                "recalled 0 time(s), fewer than memory.consolidation.min_recalls (1)"
            )),
        "{run:#}"
    );
}

#[test]
fn two_runs_at_once_write_each_fact_once() {
    let dir = days_of_notes();
    let ws = dir.path();
    let reply = || {
        let mut steps = vec![Step::delay_ms(1500)];
        steps.extend(openai::text_steps(&[
            "## People\n- Ada leads the payments team. [2]\n",
        ]));
        Reply::sse(steps)
    };
    let server = ScriptedServer::start([reply(), reply()]);
    let start = || -> std::process::Child {
        claw_llm(ws, &server.url())
            .env("CLAW_NOW", "2026-12-03T03:00:00Z")
            .args(["memory", "consolidate", "--json"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (start(), start());
    let outs: Vec<Value> = [a, b]
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{out:?}");
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    let changed = outs.iter().filter(|o| o["outcome"] == "changed").count();
    assert_eq!(changed, 1, "{outs:#?}");
    let md = memory_md(ws);
    assert_eq!(md.matches("Ada leads the payments team").count(), 1, "{md}");
    // Both asked the model (it answers after 1.5 s; on a machine so loaded
    // that the second started after the first ended, it found nothing new):
    // the one that came second to the lock found the material done.
    if server.requests().len() == 2 {
        assert!(
            outs.iter().any(|o| o["message"]
                .as_str()
                .unwrap()
                .contains("another run consolidated this material meanwhile")),
            "{outs:#?}"
        );
    }
}

#[test]
fn without_an_llm_it_is_off_and_says_so() {
    let dir = days_of_notes();
    let ws = dir.path();
    let mut cmd: Command = claw_utc(ws);
    let out = cmd.args(["memory", "consolidate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: memory consolidation needs an LLM: no LLM is configured"),
        "{err}"
    );
    assert!(err.contains("hint: set CLAW_LLM_MODEL"), "{err}");
    let out = claw_utc(ws)
        .args(["memory", "consolidate", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "llm-config");
    assert_eq!(memory_md(ws), MEMORY);
    let st = run_json(claw_utc(ws).args(["memory", "status", "--json"]));
    assert_eq!(st["consolidation"]["enabled"], false);
    assert_eq!(st["consolidation"]["off_reason"], "no LLM is configured");
    assert_eq!(st["consolidation"]["last_run"], Value::Null);
    let out = run_ok(claw_utc(ws).args(["memory", "status"]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("consolidation: off (no LLM is configured)"),
        "{text}"
    );
}

/// `claw gateway` at `now` (keyword-only, UTC) against `server`, listening.
fn gateway_at(
    ws: &Path,
    server: &ScriptedServer,
    now: &str,
) -> (
    claw_testkit::gateway_proc::GatewayProc,
    claw_gateway::client::Client,
) {
    let mut cmd = claw_llm(ws, &server.url());
    cmd.env("CLAW_NOW", now);
    let mut proc = claw_testkit::gateway_proc::GatewayProc::spawn(cmd);
    let state = state_dir(ws);
    let info = proc.wait_until("listening", Duration::from_secs(60), |p| {
        claw_gateway::discovery::read_live(&state).filter(|i| i.pid == p.pid())
    });
    let token = std::fs::read_to_string(state.join("gateway.token")).unwrap();
    let mut client =
        claw_gateway::client::Client::new(info, claw_gateway::token::Token::new(token.trim()));
    client.timeout = Some(Duration::from_secs(60));
    (proc, client)
}

fn memory_status(client: &claw_gateway::client::Client) -> Value {
    let resp = client.request("GET", "/v1/memory/status", None).unwrap();
    assert_eq!(resp.status, 200);
    serde_json::from_slice(&resp.body).unwrap()
}

/// The gateway runs the consolidation through its scheduler: at 03:00 (the
/// default schedule), and once at start-up for a run missed while it was down;
/// `GET /v1/memory/status` shows the last run and what it promoted.
#[test]
fn the_gateway_consolidates_on_its_schedule_and_catches_up_a_missed_run() {
    let dir = days_of_notes();
    let ws = dir.path();
    let server = ScriptedServer::start([openai::text(&[
        "## People\n- Ada leads the payments team. [1]\n",
    ])]);
    // Ten seconds before 03:00.
    let (mut gw, client) = gateway_at(ws, &server, "2026-12-03T02:59:50Z");
    gw.wait_log(
        "memory consolidation: daily at 03:00 (UTC)",
        Duration::from_secs(30),
    );
    let st = memory_status(&client);
    assert_eq!(st["consolidation"]["enabled"], true);
    assert_eq!(st["consolidation"]["last_run"], Value::Null);
    gw.wait_log("memory consolidation: promoted 1", Duration::from_secs(60));
    assert!(!gw.log().contains("catching up"), "{}", gw.log());
    assert!(
        memory_md(ws).contains(
            "## Consolidated on 2026-12-03\n- Ada leads the payments team. — from memory/2026-12-01.md#L3-L3\n"
        ),
        "{}",
        memory_md(ws)
    );
    let st = memory_status(&client);
    let c = &st["consolidation"];
    assert_eq!(c["last_run"]["outcome"], "changed", "{c:#}");
    assert_eq!(c["schedule"], "daily at 03:00 (UTC)");
    assert_eq!(c["recent"][0]["text"], "Ada leads the payments team.");
    assert_eq!(c["recent"][0]["from"], "memory/2026-12-01.md#L3-L3");
    gw.stop();

    // Down over the runs of the 4th and the 5th: one run at start-up.
    std::fs::write(
        ws.join("memory/2026-12-04.md"),
        "# Thursday\n\nGrace joined the platform team in May.\n",
    )
    .unwrap();
    server.push(openai::text(&[
        "## People\n- Grace joined the platform team in May. [1]\n",
    ]));
    let (mut gw, client) = gateway_at(ws, &server, "2026-12-05T12:00:00Z");
    gw.wait_log(
        "memory consolidation: due (missed run, catching up)",
        Duration::from_secs(30),
    );
    gw.wait_log("memory consolidation: promoted 1", Duration::from_secs(60));
    assert_eq!(server.requests().len(), 2);
    let st = memory_status(&client);
    assert_eq!(
        st["consolidation"]["recent"][0]["text"],
        "Grace joined the platform team in May."
    );
    assert!(memory_md(ws).contains("## Consolidated on 2026-12-05\n- Grace joined"));
    gw.stop();
}

/// On PostgreSQL too: the searches' recall counts live in the shared database
/// (this workspace's rows) and rank the candidates.
#[test]
fn on_postgres_recalls_rank_the_candidates_too() {
    let Some((pgs, cfg_dir, cfg)) = claw_testkit::pg::TestSchema::with_team_config("consol") else {
        return;
    };
    let dir = days_of_notes();
    let ws = dir.path();
    let with_pg = |c: &mut Command| {
        c.env("CLAW_CONFIG", &cfg).env("CLAW_PG_URL", &pgs.url);
    };
    for _ in 0..3 {
        let mut c = claw_utc(ws);
        with_pg(&mut c);
        run_ok(c.args(["memory", "search", "renovation budget"]));
    }
    let server = ScriptedServer::start([openai::text(&["NO_REPLY"])]);
    let mut c = claw_llm(ws, &server.url());
    with_pg(&mut c);
    let run = run_json(c.env("CLAW_NOW", "2026-12-03T03:00:00Z").args([
        "memory",
        "consolidate",
        "--json",
    ]));
    assert_eq!(run["outcome"], "unchanged", "{run:#}");
    assert_eq!(run["sent"].as_u64(), Some(4));
    let sent = excerpts(&server, 0);
    assert!(
        sent.trim_start().starts_with("[1] memory/2026-12-02.md#L3-L3 (note, 2026-12-02, under \"Tuesday\", recalled by 3 search(es))"),
        "{sent}"
    );
    assert_eq!(memory_md(ws), MEMORY);
    drop(cfg_dir);
}

/// `claw doctor` names the consolidation: off without an LLM (no fault), and a
/// warning with a hint once a run failed (the model refused the request).
#[test]
fn the_doctor_shows_the_consolidation_and_warns_after_a_failed_run() {
    let dir = days_of_notes();
    let ws = dir.path();
    let out = claw_utc(ws).args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = claw_testkit::doctor_section(&report, "consolidation");
    assert_eq!(s["status"], "ok", "{s}");
    assert_eq!(s["summary"], "off (no LLM is configured)", "{s}");
    assert_eq!(s["details"]["enabled"], false, "{s}");

    // A 400 is not retried: the run fails and is recorded as failed.
    let server = ScriptedServer::start([Reply::json(
        400,
        serde_json::json!({"error": {"message": "model overloaded"}}),
    )]);
    let out = claw_llm(ws, &server.url())
        .env("CLAW_NOW", "2026-12-03T09:00:00Z")
        .args(["memory", "consolidate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(memory_md(ws), MEMORY);
    let out = claw_llm(ws, &server.url())
        .env("CLAW_NOW", "2026-12-03T09:05:00Z")
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = claw_testkit::doctor_section(&report, "consolidation");
    assert_eq!(s["status"], "warn", "{s}");
    let summary = s["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(
            "on, daily at 03:00 (UTC) in a running `claw gateway`; last run 2026-12-03 09:00 UTC"
        ),
        "{s}"
    );
    assert!(summary.contains("failed"), "{s}");
    assert!(
        s["hint"]
            .as_str()
            .unwrap()
            .contains("claw memory consolidate"),
        "{s}"
    );
    assert_eq!(s["details"]["last_run"]["outcome"], "failed", "{s}");

    // A run that fails before the model call is recorded too: here MEMORY.md
    // is a link out of the workspace (never read or written through).
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("shadow"), "root:SECRET-HASH\n").unwrap();
    std::fs::remove_file(ws.join("MEMORY.md")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("shadow"), ws.join("MEMORY.md")).unwrap();
    let out = claw_llm(ws, &server.url())
        .env("CLAW_NOW", "2026-12-03T10:00:00Z")
        .args(["memory", "consolidate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let st = run_json(
        claw_llm(ws, &server.url())
            .env("CLAW_NOW", "2026-12-03T10:05:00Z")
            .args(["memory", "status", "--json"]),
    );
    let last = &st["consolidation"]["last_run"];
    assert_eq!(last["outcome"], "failed", "{last:#}");
    assert!(
        last["message"].as_str().unwrap().contains("symbolic link"),
        "{last:#}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("shadow")).unwrap(),
        "root:SECRET-HASH\n"
    );
}

/// What a run sends the model: secrets redacted everywhere (a note's heading,
/// a turn with a key past the cut), and nothing from outside the workspace
/// through a `memory/` a tool replaced with a symlink. Positive control: the
/// same notes as a real folder are sent.
#[test]
fn secrets_and_symlinked_folders_never_reach_the_model() {
    let key = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD";
    // The key starts 12 characters before the 1,500-character cut of a turn.
    let long_turn = format!("{}my key: {key}", "word ".repeat(296));
    let chat = transcript(
        "cli:default",
        &[("user", long_turn.as_str(), "2026-12-02T09:00:00Z")],
    );
    let heading_note = format!("# Deploy {key}\n\nThe deploy pipeline runs on Fridays now.\n");
    let dir = workspace(&[
        ("MEMORY.md", MEMORY),
        ("memory/2026-12-01.md", heading_note.as_str()),
        ("sessions/cli_default.jsonl", chat.as_str()),
    ]);
    let ws = dir.path();
    let server = ScriptedServer::start([openai::text(&["NO_REPLY"])]);
    consolidate(ws, &server, "2026-12-03T09:00:00Z");
    let sent = server.requests()[0].json.to_string();
    assert!(sent.contains("deploy pipeline runs on Fridays"), "{sent}");
    assert!(sent.contains("REDACTED"), "{sent}");
    assert!(!sent.contains("sk-proj-ab"), "{sent}");

    // `memory/` is a link to a folder outside the workspace: not read.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("2026-12-01.md"),
        "# Outside\n\nThe quokka colony plans to move in spring.\n",
    )
    .unwrap();
    let linked = workspace(&[("MEMORY.md", MEMORY)]);
    std::os::unix::fs::symlink(outside.path(), linked.path().join("memory")).unwrap();
    let server = ScriptedServer::start([openai::text(&["NO_REPLY"])]);
    consolidate(linked.path(), &server, "2026-12-03T09:00:00Z");
    assert!(
        server
            .requests()
            .iter()
            .all(|r| !r.json.to_string().contains("quokka")),
        "a symlinked memory/ was read"
    );
    // Control: the same note in a real folder is read and sent.
    let real = workspace(&[
        ("MEMORY.md", MEMORY),
        (
            "memory/2026-12-01.md",
            "# Outside\n\nThe quokka colony plans to move in spring.\n",
        ),
    ]);
    let server = ScriptedServer::start([openai::text(&["NO_REPLY"])]);
    consolidate(real.path(), &server, "2026-12-03T09:00:00Z");
    assert!(
        server.requests()[0].json.to_string().contains("quokka"),
        "the control note was not sent"
    );
}
