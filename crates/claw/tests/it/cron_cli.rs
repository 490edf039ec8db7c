//! `claw cron add/list/remove/run` as a user runs them: the `--json` shapes, the
//! text output, exit codes (2 for bad input, 1 for an unknown id), `claw cron run`
//! against the scripted LLM server, and the assistant's `cron` tool scheduling
//! "tomorrow at 9" through `claw -m` (and refused without confirmation).

use claw_testkit::LlmEnv;
use claw_testkit::scripted_server::{ScriptedServer, openai};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `claw` with a clean environment: workspace `ws`, no model, UTC, claw's clock at TEST_NOW.
fn claw(ws: &Path) -> Command {
    let mut c = claw_testkit::claw_utc(ws);
    c.stdin(Stdio::null());
    c
}

fn run(ws: &Path, args: &[&str]) -> Run {
    run_cmd(claw(ws).args(args))
}

fn run_cmd(c: &mut Command) -> Run {
    let out = c.output().expect("run claw");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json_of(r: &Run) -> Value {
    serde_json::from_str(r.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {:?}", r.stdout))
}

const JOB_KEYS: &[&str] = &[
    "created_at",
    "deliver_to",
    "id",
    "kind",
    "last_run",
    "message",
    "next_run",
    "runs",
    "session",
    "spec",
    "tz",
];

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(|s| s.as_str()).collect();
    k.sort();
    k
}

#[test]
fn add_list_remove_with_json_shapes() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();

    let r = run(
        ws,
        &[
            "cron",
            "add",
            "--every",
            "30s",
            "--message",
            "stretch",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let every = json_of(&r);
    assert_eq!(keys(&every), JOB_KEYS);
    let id = every["id"].as_str().unwrap().to_string();
    assert_eq!(id.len(), 8);
    assert_eq!(every["kind"], "every");
    assert_eq!(every["spec"], "30s");
    assert_eq!(every["tz"], Value::Null);
    assert_eq!(every["session"], format!("cron:{id}"));
    assert_eq!(every["deliver_to"], Value::Null);
    assert_eq!(every["last_run"], Value::Null);
    assert_eq!(every["runs"], 0);
    // claw's clock starts at TEST_NOW (12:00:00); the first run is one interval later.
    assert!(
        every["next_run"]
            .as_str()
            .unwrap()
            .starts_with("2026-11-05T12:00:3"),
        "{every}"
    );

    let r = run(
        ws,
        &[
            "cron",
            "add",
            "--at",
            "2026-12-01T09:00",
            "--tz",
            "Europe/Berlin",
            "-m",
            "dentist",
            "--session",
            "telegram:42",
            "--json",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let at = json_of(&r);
    assert_eq!(at["kind"], "at");
    assert_eq!(at["next_run"], "2026-12-01T08:00:00Z", "09:00 CET");
    assert_eq!(at["deliver_to"], "telegram:42");

    let r = run(
        ws,
        &[
            "cron",
            "add",
            "--cron",
            "0 9 * * 1-5",
            "--tz",
            "America/New_York",
            "-m",
            "standup",
        ],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cron_id = r.stdout.trim().to_string();
    assert_eq!(
        cron_id.len(),
        8,
        "text output is the id alone: {:?}",
        r.stdout
    );
    assert!(
        r.stderr.contains("next run 2026-11-05 09:00:00 -05:00"),
        "{}",
        r.stderr
    );

    let r = run(ws, &["cron", "list", "--json"]);
    assert_eq!(r.code, 0);
    let list = json_of(&r);
    assert_eq!(keys(&list), ["heartbeat", "jobs"]);
    assert_eq!(
        list["heartbeat"],
        json!({"enabled": true, "interval_minutes": 30, "active_hours": null, "actionable_lines": null})
    );
    let jobs = list["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[0], every);
    assert_eq!(jobs[1], at);
    assert_eq!(jobs[2]["id"], cron_id.as_str());
    assert_eq!(jobs[2]["tz"], "America/New_York");
    assert_eq!(jobs[2]["next_run"], "2026-11-05T14:00:00Z");

    let r = run(ws, &["cron", "list"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("ID"), "{}", r.stdout);
    for needle in [
        id.as_str(),
        "stretch",
        "dentist",
        "0 9 * * 1-5 (America/New_York)",
    ] {
        assert!(r.stdout.contains(needle), "{needle}: {}", r.stdout);
    }

    let r = run(ws, &["cron", "remove", &id]);
    assert_eq!(
        (r.code, r.stdout.trim()),
        (0, format!("removed {id}").as_str())
    );
    let r = run(ws, &["cron", "remove", &id]);
    assert_eq!(r.code, 1, "removing it twice: {}", r.stderr);
    assert!(r.stderr.contains("no job"), "{}", r.stderr);
    let r = run(ws, &["cron", "list", "--json"]);
    assert_eq!(json_of(&r)["jobs"].as_array().unwrap().len(), 2);

    // The file a gateway reads.
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(claw_testkit::state_dir(ws).join("cron/jobs.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file["version"], 1);
    assert_eq!(file["jobs"][0]["at"], "2026-12-01T08:00:00Z");
}

#[test]
fn bad_input_is_an_error_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--every", "30s", "--at", "2026-12-01T09:00"],
            "cannot be used with",
        ),
        (
            &["--cron", "* * * * *", "--every", "1m"],
            "cannot be used with",
        ),
        (&[], "required"),
        (&["--every", "0s"], "shorter than one second"),
        (&["--every", "5 minutes"], "not an interval"),
        (&["--at", "2026-11-05T11:00"], "in the past"),
        (&["--at", "next tuesday"], "not a time"),
        (&["--cron", "0 9 * *"], "not a 5-field cron expression"),
        (&["--cron", "0 0 9 * * 1"], "not a 5-field cron expression"),
        (
            &["--cron", "0 9 * * 1", "--tz", "Mars/Olympus"],
            "not a time zone",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["cron", "add", "-m", "x"];
        all.extend_from_slice(args);
        let r = run(ws, &all);
        assert_eq!(r.code, 2, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(needle), "{args:?}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
    // Under --json the error is also one object on stdout.
    let r = run(
        ws,
        &[
            "cron",
            "add",
            "--at",
            "2020-01-01T09:00",
            "-m",
            "x",
            "--json",
        ],
    );
    assert_eq!(r.code, 2);
    let e = json_of(&r);
    assert_eq!(e["error"]["kind"], "invalid-input");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in the past")
    );
    assert!(!e["error"]["hints"].as_array().unwrap().is_empty());
    assert!(
        !claw_testkit::state_dir(ws).join("cron/jobs.json").exists(),
        "nothing was written"
    );

    let r = run(ws, &["cron", "run", "deadbeef"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
}

#[test]
fn run_now_answers_in_the_jobs_session() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let r = run(
        ws,
        &[
            "cron",
            "add",
            "--every",
            "1h",
            "-m",
            "Summarise the week",
            "--json",
        ],
    );
    let id = json_of(&r)["id"].as_str().unwrap().to_string();

    let server = ScriptedServer::start([openai::text(&["Busy week: ", "three launches."])]);
    let r = run_cmd(
        claw(ws)
            .openai_llm(server.url(), "scripted")
            .args(["cron", "run", &id]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "Busy week: three launches.");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 1);
    let msgs = reqs[0].json["messages"].as_array().unwrap();
    assert_eq!(msgs.last().unwrap()["content"], "Summarise the week");
    let session = std::fs::read_to_string(ws.join(format!("sessions/cron_{id}.jsonl")))
        .expect("the turn is in session cron:<id>");
    assert!(session.contains("three launches"), "{session}");

    let r = run(ws, &["cron", "list", "--json"]);
    let job = &json_of(&r)["jobs"][0];
    assert_eq!(job["runs"], 1);
    assert!(
        job["last_run"]
            .as_str()
            .unwrap()
            .starts_with("2026-11-05T12:00")
    );
}

#[test]
fn the_assistant_schedules_a_reminder_with_the_cron_tool() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let args = json!({
        "action": "add",
        "at": "2026-11-06T09:00",
        "message": "Remind the user to call the dentist"
    })
    .to_string();
    let llm = |server: &ScriptedServer, yes: bool| {
        let mut c = claw(ws);
        c.openai_llm(server.url(), "scripted")
            .args(["-m", "remind me tomorrow at 9 to call the dentist"]);
        if yes {
            c.arg("--yes");
        }
        run_cmd(&mut c)
    };

    // Without a terminal or --yes, scheduling is a side effect that is refused.
    let server = ScriptedServer::start([
        openai::tool_call("c1", "cron", &[&args]),
        openai::text(&["I could not schedule it."]),
    ]);
    let r = llm(&server, false);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let offered: Vec<String> = server.requests()[0].json["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.contains(&"cron".to_string()), "{offered:?}");
    assert!(
        server.tool_result(1, "c1").contains("confirmation"),
        "{}",
        server.tool_result(1, "c1")
    );
    assert!(!claw_testkit::state_dir(ws).join("cron/jobs.json").exists());

    // With --yes it is scheduled for 09:00 in the user's zone (TZ=UTC), answering
    // into the session that asked.
    let server = ScriptedServer::start([
        openai::tool_call("c1", "cron", &[&args]),
        openai::text(&["Done: I will remind you tomorrow at 9."]),
    ]);
    let r = llm(&server, true);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let result = server.tool_result(1, "c1");
    assert!(result.starts_with("Scheduled job"), "{result}");
    assert!(
        result.contains("next run 2026-11-06 09:00 +00:00"),
        "{result}"
    );
    let r = run(ws, &["cron", "list", "--json"]);
    let jobs = json_of(&r)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["kind"], "at");
    assert_eq!(jobs[0]["next_run"], "2026-11-06T09:00:00Z");
    assert_eq!(jobs[0]["deliver_to"], "cli:default");
    assert_eq!(jobs[0]["message"], "Remind the user to call the dentist");
}

#[test]
fn list_shows_what_the_heartbeat_would_do() {
    let dir = claw_testkit::workspace(&[(
        "config.json",
        r#"{"heartbeat": {"interval_minutes": 15,
            "active_hours": {"start": "08:00", "end": "22:00", "tz": "Europe/Berlin"}}}"#,
    )]);
    let ws = dir.path();
    let config = ws.join("config.json");
    std::fs::write(
        ws.join("HEARTBEAT.md"),
        "# Checks\n- [ ]\n- [ ] water the plants on Fridays\n<!-- nothing -->\n",
    )
    .unwrap();
    let r = run_cmd(
        claw(ws)
            .env("CLAW_CONFIG", &config)
            .args(["cron", "list", "--json"]),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        json_of(&r)["heartbeat"],
        json!({
            "enabled": true,
            "interval_minutes": 15,
            "active_hours": {"start": "08:00", "end": "22:00", "tz": "Europe/Berlin"},
            "actionable_lines": 1
        })
    );
    let r = run_cmd(claw(ws).env("CLAW_CONFIG", &config).args(["cron", "list"]));
    assert!(
        r.stderr
            .contains("every 15 min, 08:00-22:00 Europe/Berlin; HEARTBEAT.md: 1 actionable line"),
        "{}",
        r.stderr
    );

    // A bad section is a config error for every command.
    std::fs::write(&config, r#"{"heartbeat": {"interval_minutes": 0}}"#).unwrap();
    let r = run_cmd(claw(ws).env("CLAW_CONFIG", &config).args(["cron", "list"]));
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("heartbeat"), "{}", r.stderr);
    std::fs::write(&config, r#"{"heartbeat": {"every": 5}}"#).unwrap();
    let r = run_cmd(claw(ws).env("CLAW_CONFIG", &config).args(["cron", "list"]));
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("every"), "{}", r.stderr);
}
