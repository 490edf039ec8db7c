//! claw's own state and config are out of every tool's reach, also where they lie
//! inside the workspace (a state dir under a `HOME` inside it, a config file the
//! user keeps there). Each attack runs twice: against a registry whose context
//! protects the paths (it must be refused and change nothing), and against the
//! same registry without the protection (the positive control: the attack works,
//! so the refusal is the defence's doing, not an accident of the fixture).
//!
//! Attacks: `read_file` of the gateway token; `write_file` of the source registry
//! (new file), of a file in a new subdirectory of the state dir, through a symlink
//! to the state dir, through `..`, by absolute path; `edit_file` of the config
//! file; `list_dir` of the state dir; and `exec` (in the sandbox) reading the
//! token, listing the state dir, planting a file in it and rewriting the config.

use std::path::{Path, PathBuf};
use std::time::Duration;

use claw_agent::message::ToolCall;
use claw_agent::tools::{ToolContext, ToolOutput, ToolRegistry};
use serde_json::{Value, json};

const TOKEN: &str = "0123456789abcdef-token";
const CONFIG: &str = "{\"agent\": {}}\n";

struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
    config: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let state = ws.join("home/.claw/state/ws-1");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("gateway.token"), TOKEN).unwrap();
    std::fs::write(state.join("memory.sqlite"), "db").unwrap();
    let config = ws.join("config.json");
    std::fs::write(&config, CONFIG).unwrap();
    std::os::unix::fs::symlink("home/.claw/state/ws-1", ws.join("st")).unwrap();
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        state,
        config,
    }
}

fn registry(f: &Fixture, protect: bool, jail: bool) -> ToolRegistry {
    let mut ctx = ToolContext::new(&f.ws);
    ctx.jail = jail;
    ctx.exec_timeout = Duration::from_secs(30);
    if protect {
        ctx.protected = vec![f.state.clone(), f.config.clone()];
        ctx.sandbox.hidden = ctx.protected.clone();
    }
    ToolRegistry::new(ctx)
}

async fn run(reg: &ToolRegistry, tool: &str, args: Value) -> Result<String, String> {
    let call = ToolCall {
        id: "c1".into(),
        name: tool.into(),
        arguments: args.to_string(),
    };
    match reg.dispatch(&call).await {
        Ok(ToolOutput::Exec(o)) => {
            if o.exit_code == Some(0) {
                Ok(o.stdout)
            } else {
                Err(format!("exit {:?}: {}{}", o.exit_code, o.stdout, o.stderr))
            }
        }
        Ok(other) => Ok(other.render()),
        Err(e) => Err(e.to_string()),
    }
}

/// Everything under the state dir and the config file, to prove nothing changed.
fn snapshot(f: &Fixture) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = vec![(f.config.clone(), std::fs::read(&f.config).unwrap())];
    for e in walkdir(&f.state) {
        out.push((e.clone(), std::fs::read(&e).unwrap_or_default()));
    }
    out
}

fn walkdir(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.push(p.clone());
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn file_attacks(f: &Fixture) -> Vec<(&'static str, &'static str, Value)> {
    let abs = f.state.join("abs.txt").display().to_string();
    vec![
        (
            "read the token",
            "read_file",
            json!({"path": "home/.claw/state/ws-1/gateway.token"}),
        ),
        (
            "read the token through a link",
            "read_file",
            json!({"path": "st/gateway.token"}),
        ),
        (
            "plant a source registry",
            "write_file",
            json!({"path": "home/.claw/state/ws-1/memory.sources.json", "content": "[]"}),
        ),
        (
            "plant in a new subdirectory",
            "write_file",
            json!({"path": "st/cron/deep/jobs.json", "content": "[]"}),
        ),
        (
            "plant through ..",
            "write_file",
            json!({"path": "notes/../home/.claw/state/ws-1/x.txt", "content": "x"}),
        ),
        (
            "plant by absolute path",
            "write_file",
            json!({"path": abs, "content": "x"}),
        ),
        (
            "overwrite the database",
            "write_file",
            json!({"path": "st/memory.sqlite", "content": "pwned"}),
        ),
        (
            "edit the config",
            "edit_file",
            json!({"path": "config.json", "old_text": "{}", "new_text": "{\"jail_to_workspace\": false}"}),
        ),
        ("list the state dir", "list_dir", json!({"path": "st"})),
    ]
}

#[tokio::test]
async fn file_tools_never_reach_protected_paths_jailed_or_not() {
    for jail in [true, false] {
        let mut got_through = Vec::new();
        let mut control_failed = Vec::new();
        let attacks = {
            let f = fixture();
            file_attacks(&f).len()
        };
        for i in 0..attacks {
            // Defended: refused, nothing changed.
            let f = fixture();
            let (name, tool, args) = file_attacks(&f).swap_remove(i);
            let before = snapshot(&f);
            let r = run(&registry(&f, true, jail), tool, args.clone()).await;
            let changed = snapshot(&f) != before;
            match &r {
                Err(e) if e.contains("claw's own state") && !changed => {}
                _ => got_through.push(format!("{name}: {r:?} (changed: {changed})")),
            }
            // Positive control: the same call without the protection works.
            let f = fixture();
            let (_, tool, args) = file_attacks(&f).swap_remove(i);
            let before = snapshot(&f);
            let r = run(&registry(&f, false, jail), tool, args).await;
            let leaked = r
                .as_ref()
                .is_ok_and(|t| t.contains(TOKEN) || t.contains("gateway.token"));
            if r.is_err() || !(snapshot(&f) != before || leaked) {
                control_failed.push(format!("{name}: {r:?}"));
            }
        }
        eprintln!(
            "protected paths (jail {jail}): {attacks} file attacks tried, {} got through, {} controls failed",
            got_through.len(),
            control_failed.len()
        );
        assert!(got_through.is_empty(), "jail {jail}: {got_through:#?}");
        assert!(
            control_failed.is_empty(),
            "jail {jail}: {control_failed:#?}"
        );
    }
}

#[tokio::test]
async fn ordinary_files_beside_the_protected_ones_still_work() {
    let f = fixture();
    let reg = registry(&f, true, true);
    run(
        &reg,
        "write_file",
        json!({"path": "notes/a.md", "content": "hello"}),
    )
    .await
    .unwrap();
    let text = run(&reg, "read_file", json!({"path": "notes/a.md"}))
        .await
        .unwrap();
    assert!(text.contains("hello"), "{text}");
    // A sibling whose name starts like the state dir's is not protected.
    run(
        &reg,
        "write_file",
        json!({"path": "home/.claw/state/ws-10/x.md", "content": "x"}),
    )
    .await
    .unwrap();
    let listing = run(&reg, "list_dir", json!({"path": "home/.claw/state"}))
        .await
        .unwrap();
    assert!(listing.contains("ws-1"), "{listing}");
}

/// Whether `exec` runs in a mount namespace here (the hiding needs one).
fn sandbox_has_mount_namespace() -> bool {
    claw_agent::tools::sandbox::probe().mount_namespace
}

#[tokio::test]
async fn exec_in_the_sandbox_sees_neither_the_state_dir_nor_the_config() {
    if !sandbox_has_mount_namespace() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the sandbox with a mount namespace"
        );
        eprintln!("skipped: no mount namespace for the sandbox on this machine");
        return;
    }
    let attacks = [
        ("read the token", "cat home/.claw/state/ws-1/gateway.token"),
        ("list the state dir", "ls -A st/ | grep -q . && ls -A st/"),
        (
            "plant a file",
            "echo '[]' > home/.claw/state/ws-1/memory.sources.json && cat home/.claw/state/ws-1/memory.sources.json",
        ),
        (
            "rewrite the config",
            "printf '{\"exec\": {\"sandbox\": false}}' > config.json && cat config.json",
        ),
    ];
    let mut got_through = Vec::new();
    for (name, cmd) in attacks {
        let f = fixture();
        let before = snapshot(&f);
        let r = run(&registry(&f, true, true), "exec", json!({"command": cmd})).await;
        let leaked = r.as_ref().is_ok_and(|t| {
            t.contains(TOKEN) || t.contains("memory.sqlite") || t.contains("sandbox")
        });
        if leaked || snapshot(&f) != before {
            got_through.push(format!("{name}: {r:?}"));
        }
        // Positive control: without hiding, the command reaches the real files.
        let f = fixture();
        let before = snapshot(&f);
        let r = run(&registry(&f, false, true), "exec", json!({"command": cmd})).await;
        let leaked = r.as_ref().is_ok_and(|t| {
            t.contains(TOKEN) || t.contains("memory.sqlite") || t.contains("sandbox")
        });
        assert!(
            leaked || snapshot(&f) != before,
            "control {name}: the attack should work without the hiding: {r:?}"
        );
    }
    eprintln!(
        "protected paths (exec sandbox): {} attacks tried, {} got through",
        attacks.len(),
        got_through.len()
    );
    assert!(got_through.is_empty(), "{got_through:#?}");
    // The rest of the workspace is still there and writable.
    let f = fixture();
    let out = run(
        &registry(&f, true, true),
        "exec",
        json!({"command": "echo hi > notes/x.md && cat notes/x.md && ls home/.claw/state"}),
    )
    .await
    .unwrap();
    assert!(out.contains("hi"), "{out}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("notes/x.md")).unwrap(),
        "hi\n"
    );
}

#[tokio::test]
async fn exec_cannot_reach_a_host_listener_through_a_socket_file() {
    if !claw_agent::tools::sandbox::probe().active() {
        assert!(std::env::var_os("CI").is_none(), "CI must run the sandbox");
        eprintln!("skipped: no sandbox on this machine");
        return;
    }
    let f = fixture();
    let sock = f.ws.join("app.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let accepted = || {
        let mut n = 0;
        while listener.accept().is_ok() {
            n += 1;
        }
        n
    };
    // python3 (Debian's, under /usr) connects to the socket file; curl as a fallback.
    let cmd = "if command -v python3 >/dev/null; then \
               python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('app.sock'); print('connected')\"; \
               else curl -s --unix-socket app.sock http://x/ && echo connected; fi";
    let r = run(&registry(&f, true, true), "exec", json!({ "command": cmd })).await;
    assert!(
        r.as_ref().is_err_and(|e| e.contains("ermission denied")
            || e.contains("EACCES")
            || e.contains("Errno 13")),
        "the sandboxed command must not connect: {r:?}"
    );
    assert_eq!(accepted(), 0, "no connection reached the host listener");
    // socketpair is still allowed (it reaches nobody).
    let r = run(
        &registry(&f, true, true),
        "exec",
        json!({"command": "python3 -c 'import socket; a,b=socket.socketpair(); a.send(b\"x\"); print(b.recv(1))'"}),
    )
    .await;
    if let Ok(out) = &r {
        assert!(out.contains("b'x'"), "{out}");
    }
    // Positive control: unconfined, the same command reaches the listener.
    let mut ctx = ToolContext::new(&f.ws);
    ctx.sandbox.enabled = false;
    let reg = ToolRegistry::new(ctx);
    let r = run(&reg, "exec", json!({ "command": cmd })).await;
    assert!(
        r.as_ref().is_ok_and(|o| o.contains("connected")),
        "control: {r:?}"
    );
    assert_eq!(accepted(), 1);
    eprintln!("unix socket to a host listener: 1 tried, 0 got through (control connected)");
}
