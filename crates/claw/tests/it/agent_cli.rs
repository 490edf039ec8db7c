//! The real `claw -m` binary against the scripted OpenAI/Anthropic server (real
//! HTTP, real SSE): tool call → result → answer over both APIs, 429 then success,
//! 401 → the next profile, a malformed SSE line, invalid tool-argument JSON, the
//! loop breaker, compaction with the memory flush (proactive and on a context
//! overflow), the missing-LLM error, and the session file's shape.

use claw_testkit::scripted_server;

use scripted_server::{Reply, ScriptedServer, Step, anthropic, openai};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `claw` with a clean environment: workspace `ws`, no embedding model, and the
/// given extra variables.
fn claw(ws: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = claw_testkit::claw_utc(ws);
    c.envs(env.iter().copied());
    c
}

/// `claw args` with the extra variables `env`, run with a deadline ([`run`]).
fn ask(ws: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut c = claw(ws, env);
    c.args(args);
    run(c)
}

/// Run with a deadline (the child is killed if it hangs).
fn run(mut cmd: Command) -> Run {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn claw");
    let (t_out, t_err) = claw_testkit::read_outputs(&mut child);
    let status = claw_testkit::wait_exit(&mut child, 120);
    Run {
        code: status.code().unwrap_or(-1),
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

fn llm_env<'a>(api: &'a str, server: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CLAW_LLM_API", api),
        ("CLAW_LLM_BASE_URL", server),
        ("CLAW_LLM_MODEL", "scripted-model"),
    ]
}

fn session_lines(ws: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(ws.join("sessions/cli_default.jsonl")).expect("session file");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("every line is JSON"))
        .collect()
}

fn messages(lines: &[Value]) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["type"] == "message")
        .cloned()
        .collect()
}

#[test]
fn openai_tool_call_result_then_answer() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start([
        openai::tool_call(
            "call_1",
            "write_file",
            &[
                r#"{"path": "notes/hello.md", "#,
                r#""content": "hi from the model\n"}"#,
            ],
        ),
        openai::text(&["I wrote ", "the note."]),
    ]);
    let url = server.url();
    // No terminal to confirm the write: allow side effects.
    let r = ask(
        ws,
        &llm_env("openai", &url),
        &["--yes", "-m", "write a note"],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "I wrote the note.\n");
    assert!(
        r.stderr.contains("write_file: notes/hello.md"),
        "status line: {}",
        r.stderr
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/hello.md")).unwrap(),
        "hi from the model\n"
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    let body = &reqs[0].json;
    assert_eq!(body["stream"], true);
    assert_eq!(body["model"], "scripted-model");
    let sys = body["messages"][0]["content"].as_str().unwrap();
    assert!(
        sys.contains("You are claw") && sys.contains("write_file"),
        "{sys}"
    );
    let tool_names = claw_testkit::strs(&body["tools"], "/function/name");
    assert!(tool_names.contains(&"read_file") && tool_names.contains(&"exec"));
    let second = reqs[1].json["messages"].as_array().unwrap();
    let tool_msg = second
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent");
    assert_eq!(tool_msg["tool_call_id"], "call_1");

    let lines = session_lines(ws);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["key"], "cli:default");
    assert_eq!(lines[0]["version"], 1);
    let msgs = messages(&lines);
    let roles: Vec<&str> = msgs.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert_eq!(msgs[1]["tool_calls"][0]["name"], "write_file");
    assert_eq!(msgs[2]["tool_call_id"], "call_1");
    assert!(msgs[2].get("is_error").is_none());
    assert_eq!(msgs[3]["content"], "I wrote the note.");
    assert!(msgs[3]["usage"]["output_tokens"].as_u64().is_some());
    assert!(msgs.iter().all(|m| m["timestamp"].is_string()));
}

#[test]
fn anthropic_tool_call_result_then_answer_and_history_is_reloaded() {
    let dir = claw_testkit::workspace(&[("MEMORY.md", "The project codename is BLUEFIN.\n")]);
    let ws = dir.path();
    let server = ScriptedServer::start([
        anthropic::tool_use("toolu_1", "read_file", &[r#"{"path":"#, r#" "MEMORY.md"}"#]),
        anthropic::text(&["The codename ", "is BLUEFIN."]),
        anthropic::text(&["Still BLUEFIN."]),
    ]);
    let url = server.url();
    let r = ask(
        ws,
        &llm_env("anthropic", &url),
        &["-m", "what is the codename?"],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "The codename is BLUEFIN.\n");
    let reqs = server.requests();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert!(
        reqs[0].json["system"].as_str().unwrap().contains("BLUEFIN"),
        "MEMORY.md is in the prompt"
    );
    let second = reqs[1].json.to_string();
    assert!(second.contains("tool_result") && second.contains("toolu_1"));
    assert!(
        second.contains("The project codename is BLUEFIN."),
        "the file content went back"
    );

    // A second run continues the same session: the history is sent again.
    let r = ask(ws, &llm_env("anthropic", &url), &["-m", "and now?"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let third = &server.requests()[2].json;
    let msgs = third["messages"].as_array().unwrap();
    assert_eq!(
        msgs.len(),
        5,
        "user, assistant(tool_use), user(tool_result), assistant, user: {third}"
    );
    assert_eq!(messages(&session_lines(ws)).len(), 6);
}

#[test]
fn rate_limited_then_success() {
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([
        openai::error(429, "slow down", None).header("retry-after", "0"),
        openai::text(&["ok"]),
    ]);
    let url = server.url();
    let r = ask(dir.path(), &llm_env("openai", &url), &["-m", "hi"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "ok\n");
    assert_eq!(server.requests().len(), 2);
    assert!(r.stderr.contains("retrying"), "{}", r.stderr);
}

#[test]
fn unauthorized_moves_to_the_next_profile() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let bad = ScriptedServer::start([openai::error(401, "invalid api key", None)]);
    let good = ScriptedServer::start([anthropic::text(&["from the backup"])]);
    let config = ws.join("config.json");
    std::fs::write(
        &config,
        json!({"agent": {"profiles": [
            {"name": "primary", "api": "openai", "base_url": bad.url(), "model": "m1", "api_key_env": "PRIMARY_KEY"},
            {"name": "backup", "api": "anthropic", "base_url": good.url(), "model": "m2", "api_key_env": "BACKUP_KEY"}
        ]}})
        .to_string(),
    )
    .unwrap();
    let r = run({
        let mut c = claw(
            ws,
            &[
                ("CLAW_CONFIG", config.to_str().unwrap()),
                ("PRIMARY_KEY", "sk-primary-SECRET-1111"),
                ("BACKUP_KEY", "sk-backup-SECRET-2222"),
            ],
        );
        c.args(["-m", "hello"]);
        c
    });
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "from the backup\n");
    assert_eq!(
        bad.requests().len(),
        1,
        "401 is not retried on the same profile"
    );
    assert_eq!(good.requests().len(), 1);
    assert_eq!(
        good.requests()[0].header("x-api-key"),
        Some("sk-backup-SECRET-2222")
    );
    let session = std::fs::read_to_string(ws.join("sessions/cli_default.jsonl")).unwrap();
    assert!(!session.contains("SECRET"), "no key in the session file");
}

#[test]
fn all_profiles_failing_exits_non_zero_and_says_what_was_tried() {
    let dir = tempfile::tempdir().unwrap();
    let server = ScriptedServer::start([openai::error(403, "forbidden", None)]);
    let url = server.url();
    let r = ask(dir.path(), &llm_env("openai", &url), &["-m", "hi"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("403") && r.stderr.contains("forbidden"),
        "{}",
        r.stderr
    );
}

#[test]
fn malformed_sse_line_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut steps = vec![openai::chunk(
        json!({"role": "assistant", "content": "Hel"}),
        None,
    )];
    steps.push(Step::raw(
        "data: {\"choices\": [{\"delta\": {\"content\": \n\n",
    ));
    steps.extend(openai::text_steps(&["lo"]));
    let server = ScriptedServer::start([Reply::sse(steps)]);
    let url = server.url();
    let r = ask(dir.path(), &llm_env("openai", &url), &["-m", "hi"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "Hello\n");
}

#[test]
fn invalid_tool_argument_json_goes_back_to_the_model_as_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start([
        openai::tool_call(
            "call_bad",
            "write_file",
            &[r#"{"path": "x.md", "content": "#],
        ),
        openai::text(&["Sorry, my arguments were broken."]),
    ]);
    let url = server.url();
    let r = ask(ws, &llm_env("openai", &url), &["-m", "write x"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(!ws.join("x.md").exists(), "the tool never ran");
    let second = &server.requests()[1].json;
    let tool_msg = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert!(
        tool_msg["content"]
            .as_str()
            .unwrap()
            .contains("invalid arguments"),
        "{tool_msg}"
    );
    let msgs = messages(&session_lines(ws));
    assert_eq!(msgs[2]["is_error"], true);
}

#[test]
fn loop_breaker_ends_a_runaway_turn() {
    let dir = claw_testkit::workspace(&[("status.txt", "pending\n")]);
    let ws = dir.path();
    let replies: Vec<Reply> = (0..40)
        .map(|i| {
            openai::tool_call(
                &format!("c{i}"),
                "read_file",
                &[r#"{"path": "status.txt"}"#],
            )
        })
        .collect();
    let server = ScriptedServer::start(replies);
    let url = server.url();
    let r = ask(ws, &llm_env("openai", &url), &["-m", "wait until done"]);
    assert_eq!(r.code, 2, "stdout: {} stderr: {}", r.stdout, r.stderr);
    assert!(r.stderr.contains("stopped"), "{}", r.stderr);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 30, "the 30th identical call ends the turn");
    let last_tool = |i: usize| {
        reqs[i].json["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(!last_tool(9).contains("loop guard"));
    assert!(
        last_tool(10).contains("[loop guard] Warning"),
        "{}",
        last_tool(10)
    );
    assert!(
        last_tool(20).contains("[loop guard] STOP"),
        "{}",
        last_tool(20)
    );
    let msgs = messages(&session_lines(ws));
    let last = msgs.last().unwrap();
    assert_eq!(last["role"], "assistant");
    assert!(last["content"].as_str().unwrap().contains("I stopped"));
}

#[test]
fn max_iterations_is_said_plainly() {
    let dir = claw_testkit::workspace(&[("config.json", r#"{"agent": {"max_iterations": 3}}"#)]);
    let ws = dir.path();
    let config = ws.join("config.json");
    let replies: Vec<Reply> = (0..5)
        .map(|i| {
            openai::tool_call(
                &format!("c{i}"),
                "list_dir",
                &[&format!(r#"{{"path": ".", "n": {i}}}"#)],
            )
        })
        .collect();
    let server = ScriptedServer::start(replies);
    let url = server.url();
    let mut env = llm_env("openai", &url);
    env.push(("CLAW_CONFIG", config.to_str().unwrap()));
    let r = ask(ws, &env, &["-m", "explore"]);
    assert_eq!(r.code, 2);
    assert_eq!(server.requests().len(), 3);
    assert!(r.stdout.contains("max_iterations = 3"), "{}", r.stdout);
}

fn long_history_session(ws: &Path) {
    let mut lines = vec![
        json!({"type": "session", "key": "cli:default", "created": "2024-05-01T08:00:00Z", "version": 1}),
    ];
    for i in 0..8 {
        lines.push(
            json!({"type": "message", "role": "user", "timestamp": "2024-05-01T08:00:00Z",
            "content": format!("old question {i}: {}", "lorem ipsum ".repeat(70))}),
        );
        lines.push(
            json!({"type": "message", "role": "assistant", "timestamp": "2024-05-01T08:00:01Z",
            "content": format!("old answer {i}: {}", "dolor sit amet ".repeat(60))}),
        );
    }
    std::fs::create_dir_all(ws.join("sessions")).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(ws.join("sessions/cli_default.jsonl"), text).unwrap();
}

#[test]
fn compaction_flushes_memory_then_summarises_then_answers() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    long_history_session(ws);
    let config = ws.join("config.json");
    std::fs::write(
        &config,
        r#"{"agent": {"context_window": 4096, "max_tokens": 512, "timezone": "UTC"}}"#,
    )
    .unwrap();
    let today = &claw_testkit::TEST_NOW[..10];
    let mem_path = format!("memory/{today}.md");
    let server = ScriptedServer::start([
        openai::tool_call(
            "f1",
            "write_file",
            &[
                &json!({"path": mem_path, "content": "- durable fact: the sky is green\n"})
                    .to_string(),
            ],
        ),
        openai::text(&["NO_REPLY"]),
        // The consolidation into MEMORY.md: nothing durable.
        openai::text(&["NO_REPLY"]),
        openai::text(&["SUMMARY-XYZ: the user asked eight old questions."]),
        openai::text(&["final answer"]),
    ]);
    let url = server.url();
    let mut env = llm_env("openai", &url);
    env.push(("CLAW_CONFIG", config.to_str().unwrap()));
    let r = ask(ws, &env, &["-m", "new question"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(
        r.stdout, "final answer\n",
        "flush and summary text are not shown"
    );
    assert!(r.stderr.contains("compact"), "{}", r.stderr);
    assert_eq!(
        std::fs::read_to_string(ws.join(&mem_path)).unwrap(),
        "- durable fact: the sky is green\n"
    );

    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    let tools_of = |i: usize| -> Vec<String> {
        reqs[i].json["tools"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        tools_of(0),
        ["read_file", "write_file", "edit_file"],
        "flush: file tools only"
    );
    let flush_msgs = reqs[0].json["messages"].as_array().unwrap();
    assert!(
        flush_msgs.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains(&mem_path)
    );
    assert!(
        tools_of(2).is_empty(),
        "the consolidation call offers no tools"
    );
    assert!(tools_of(3).is_empty(), "the summary call offers no tools");
    let sreq = reqs[3].json.to_string();
    assert!(sreq.contains("old question 0"), "{sreq}");
    let answer = &reqs[4].json["messages"];
    assert!(
        answer[0]["content"]
            .as_str()
            .unwrap()
            .contains("SUMMARY-XYZ"),
        "summary in the system prompt"
    );
    assert!(
        !answer.to_string().contains("old question 0"),
        "old turns replaced"
    );
    assert!(
        !answer.to_string().contains("NO_REPLY"),
        "flush turn not in history"
    );
    assert_eq!(
        answer.as_array().unwrap().last().unwrap()["content"],
        "new question"
    );

    let lines = session_lines(ws);
    let comp = lines
        .iter()
        .find(|l| l["type"] == "compaction")
        .expect("compaction record");
    assert_eq!(comp["memory_flushed"], true);
    assert!(comp["replaced"].as_u64().unwrap() >= 2);
    assert!(comp["summary"].as_str().unwrap().starts_with("SUMMARY-XYZ"));
    assert!(comp["tokens_after"].as_u64() < comp["tokens_before"].as_u64());
    // The full transcript stays in the file (for the memory index).
    assert_eq!(
        messages(&lines)
            .iter()
            .filter(|m| m["role"] == "user")
            .count(),
        9
    );
}

#[test]
fn context_overflow_error_compacts_and_retries() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    long_history_session(ws);
    let server = ScriptedServer::start([
        openai::error(
            400,
            "This model's maximum context length is 4096 tokens.",
            Some("context_length_exceeded"),
        ),
        openai::text(&["NO_REPLY"]),
        // The consolidation into MEMORY.md: nothing durable.
        openai::text(&["NO_REPLY"]),
        openai::text(&["SUMMARY-OVERFLOW"]),
        openai::text(&["answer after retry"]),
    ]);
    let url = server.url();
    let r = ask(ws, &llm_env("openai", &url), &["-m", "new question"]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert_eq!(r.stdout, "answer after retry\n");
    let reqs = server.requests();
    assert_eq!(reqs.len(), 5);
    assert!(
        reqs[4].json["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("SUMMARY-OVERFLOW")
    );
    let lines = session_lines(ws);
    assert!(lines.iter().any(|l| l["type"] == "compaction"));
}

#[test]
fn missing_llm_configuration_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = ask(dir.path(), &[], &["-m", "hi"]);
    assert_eq!(r.code, 2);
    for var in ["CLAW_LLM_MODEL", "CLAW_LLM_BASE_URL", "CLAW_LLM_API"] {
        assert!(r.stderr.contains(var), "{}", r.stderr);
    }
}

#[test]
fn session_flag_picks_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start([openai::text(&["ok"])]);
    let url = server.url();
    let r = ask(
        ws,
        &llm_env("openai", &url),
        &["--session", "work:proj/a", "-m", "hi"],
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let text = std::fs::read_to_string(ws.join("sessions/work_proj_a.jsonl")).unwrap();
    assert!(
        text.starts_with(r#"{"type":"session","key":"work:proj/a""#),
        "{text}"
    );
}

#[test]
fn repl_commands_over_a_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let server = ScriptedServer::start([openai::text(&["first"]), openai::text(&["second"])]);
    let url = server.url();
    let mut cmd = claw(ws, &llm_env("openai", &url));
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"/help\nhello\n/new\nagain\n/bogus\n/exit\n")
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "REPL did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("/stop") && stdout.contains("/new"),
        "help: {stdout}"
    );
    assert!(
        stdout.contains("first\n") && stdout.contains("second\n"),
        "{stdout}"
    );
    assert!(stderr.contains("unknown command /bogus"), "{stderr}");
    // /new archived the first session: the second request has no old history.
    let second = &server.requests()[1].json["messages"];
    assert_eq!(
        second.as_array().unwrap().len(),
        2,
        "system + the new message: {second}"
    );
    let files: Vec<String> = std::fs::read_dir(ws.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
}
