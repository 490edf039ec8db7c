//! `exec` against real processes: exit codes, workspace as cwd, output
//! truncation, the deny list (the command must not run), and the timeout /
//! cancellation killing the whole process group (a grandchild `sleep` included).
//! The sandbox gives commands a PID namespace, so a pid a command prints (`$!`)
//! is not the host's: the tests find their `sleep` on the host by its unique
//! duration ([`unique_sleep`]).

use std::path::Path;
use std::time::{Duration, Instant};

use claw_agent::message::ToolCall;
use claw_agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry};

fn call(args: serde_json::Value) -> ToolCall {
    ToolCall {
        id: "call-1".into(),
        name: "exec".into(),
        arguments: args.to_string(),
    }
}

fn registry(ws: &Path, timeout: Duration) -> ToolRegistry {
    let mut ctx = ToolContext::new(ws);
    ctx.exec_timeout = timeout;
    ToolRegistry::new(ctx)
}

/// Polls until `pid` is gone, with a deadline.
fn wait_dead(pid: i32) -> bool {
    claw_testkit::wait_process_gone(pid as u32, Duration::from_secs(10))
}

/// A `sleep` duration no other process of the machine has: 300.<pid><n> seconds.
fn unique_sleep() -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    format!(
        "300.{}{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

/// The host pid of the live `sleep DURATION`, if there is one.
fn sleep_pid(duration: &str) -> Option<i32> {
    let want = format!("sleep\0{duration}\0");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        (cmdline == want.as_bytes()).then_some(pid)
    })
}

/// Once `path` (written by the command after it started `sleep DURATION`)
/// exists: the host pid of that `sleep`, waiting for it to appear.
fn read_pid(path: &Path, duration: &str) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if std::fs::read_to_string(path).is_ok_and(|s| !s.trim().is_empty())
            && let Some(pid) = sleep_pid(duration)
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "pid file {path:?} or `sleep {duration}` never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// After the call: no `sleep DURATION` of the command is left (or it dies soon).
fn sleep_ended(path: &Path, duration: &str) -> bool {
    assert!(path.exists(), "the command never wrote {path:?}");
    std::thread::sleep(Duration::from_millis(200));
    sleep_pid(duration).is_none_or(wait_dead)
}

fn exec_outcome(out: ToolOutput) -> claw_agent::tools::ExecOutcome {
    match out {
        ToolOutput::Exec(o) => o,
        other => panic!("not an exec outcome: {other:?}"),
    }
}

#[tokio::test]
async fn runs_in_workspace_with_exit_code_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("here.txt"), "x").unwrap();
    let reg = registry(dir.path(), Duration::from_secs(30));
    let out = exec_outcome(
        reg.dispatch(&call(serde_json::json!({
            "command": "ls; echo to-stderr >&2; exit 3"
        })))
        .await
        .unwrap(),
    );
    assert_eq!(out.exit_code, Some(3));
    assert!(!out.timed_out);
    assert_eq!(out.stdout, "here.txt\n");
    assert_eq!(out.stderr, "to-stderr\n");
    let text = out.render();
    assert!(text.contains("exit code: 3"), "{text}");
    assert!(text.contains("stdout:\nhere.txt"), "{text}");
}

#[tokio::test]
async fn long_output_keeps_head_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), Duration::from_secs(30));
    // 20,000 lines "1".."20000": well over 10,000 characters; multibyte tail.
    let out = exec_outcome(
        reg.dispatch(&call(serde_json::json!({
            "command": "seq 1 20000; printf 'é%.0s' $(seq 1 3000)"
        })))
        .await
        .unwrap(),
    );
    assert!(out.truncated);
    assert!(out.stdout.starts_with("1\n2\n3\n"), "{}", &out.stdout[..20]);
    assert!(out.stdout.ends_with(&"é".repeat(3000)));
    // Over the in-memory capture: the marker also counts the bytes never kept.
    assert!(out.stdout.contains("further bytes omitted ...]"));
    let chars = out.stdout.chars().count();
    assert!(chars <= 10_000 + 100, "{chars}");

    // `seq 1 3000` prints 13,893 characters: exactly 3,893 are cut.
    let out = exec_outcome(
        reg.dispatch(&call(serde_json::json!({ "command": "seq 1 3000" })))
            .await
            .unwrap(),
    );
    assert!(out.truncated);
    assert!(
        out.stdout.contains("\n[... 3893 characters omitted ...]\n"),
        "marker missing"
    );
    assert!(out.stdout.ends_with("2999\n3000\n"));
    let (head, _) = out.stdout.split_once("\n[...").unwrap();
    assert_eq!(head.chars().count(), 5_000);
}

#[tokio::test]
async fn denied_commands_do_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), Duration::from_secs(30));
    for cmd in [
        "mkfs.ext4 ./no-such-disk; touch marker",
        "touch marker && dd if=/dev/zero of=./x bs=1 count=1",
        "touch marker; sh -c 'shutdown -h now'",
    ] {
        let err = reg
            .dispatch(&call(serde_json::json!({ "command": cmd })))
            .await
            .unwrap_err();
        assert!(
            matches!(err, ToolError::CommandDenied { .. }),
            "{cmd}: {err:?}"
        );
        assert!(err.render().contains("deny list"), "{}", err.render());
        assert!(!dir.path().join("marker").exists(), "{cmd} ran");
    }
    // Not denied: removing a build directory inside the workspace.
    std::fs::create_dir_all(dir.path().join("build/sub")).unwrap();
    let out = exec_outcome(
        reg.dispatch(&call(
            serde_json::json!({ "command": "rm -rf ./build && echo shutdown-notes" }),
        ))
        .await
        .unwrap(),
    );
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "shutdown-notes\n");
    assert!(!dir.path().join("build").exists());
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), Duration::from_secs(30));
    // The shell starts a child shell which starts a grandchild `sleep`.
    let sleep = unique_sleep();
    let command = format!("sh -c 'sleep {sleep} & echo $! > grandchild.pid; wait'; echo never");
    let out = exec_outcome(
        reg.dispatch(&call(
            serde_json::json!({ "command": command, "timeout_secs": 1 }),
        ))
        .await
        .unwrap(),
    );
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None);
    assert!(!out.stdout.contains("never"));
    assert!(out.render().contains("timed out"), "{}", out.render());
    assert!(
        sleep_ended(&dir.path().join("grandchild.pid"), &sleep),
        "grandchild sleep survived the timeout"
    );
}

#[tokio::test]
async fn configured_timeout_caps_the_models_request() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), Duration::from_secs(1));
    let out = exec_outcome(
        reg.dispatch(&call(
            serde_json::json!({ "command": "sleep 300", "timeout_secs": 600 }),
        ))
        .await
        .unwrap(),
    );
    assert!(out.timed_out);
}

#[tokio::test]
async fn background_jobs_are_ended_when_the_command_exits() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), Duration::from_secs(60));
    let sleep = unique_sleep();
    let out = exec_outcome(
        reg.dispatch(&call(serde_json::json!({
            "command": format!("sleep {sleep} & echo $! > bg.pid; echo started")
        })))
        .await
        .unwrap(),
    );
    assert!(!out.timed_out);
    assert_eq!(out.exit_code, Some(0));
    assert_eq!(out.stdout, "started\n");
    assert!(
        sleep_ended(&dir.path().join("bg.pid"), &sleep),
        "background sleep was left running"
    );
}

#[tokio::test]
async fn cancelling_the_call_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let reg = registry(dir.path(), Duration::from_secs(60));
    let sleep = unique_sleep();
    let c =
        call(serde_json::json!({ "command": format!("sleep {sleep} & echo $! > c.pid; wait") }));
    let pid_file = dir.path().join("c.pid");
    let mut run = Box::pin(reg.dispatch(&c));
    // Drive the command until the grandchild has written its pid, then drop the future
    // (what the driver does on /stop).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        tokio::select! {
            r = &mut run => panic!("command finished early: {r:?}"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        if std::fs::read_to_string(&pid_file).is_ok_and(|s| !s.trim().is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "pid file never appeared");
    }
    let pid = read_pid(&pid_file, &sleep);
    assert!(claw_testkit::process_alive(pid as u32));
    drop(run);
    assert!(wait_dead(pid), "sleep {pid} survived cancellation");
}
