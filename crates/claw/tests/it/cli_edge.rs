//! The CLI's edges end to end (issue 12 points 8, 9, 13, 14): a closed stdout exits
//! 0 quietly, errors are `error:`/`hint:` lines (and a JSON object under `--json`),
//! terminal escapes in note text and file names are neutralised in text output but
//! kept in JSON, state and transcripts are private under umask 000, and the input
//! validations (empty workspace, control characters in source names, duplicate or
//! workspace sources, non-finite --min-score, unset embedding key variable).

use claw_testkit as support;
use claw_testkit::LlmEnv;
use claw_testkit::scripted_server::{ScriptedServer, openai};

use claw_testkit::wait_exit as wait;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const NOTES: &[(&str, &str)] = &[
    ("MEMORY.md", "# About me\n\nMy editor is Helix.\n"),
    (
        "memory/2026-11-02.md",
        "# Standup\n\nThe billing migration is ticket ZX-4471.\n",
    ),
];

fn indexed() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    support::write_tree(ws.path(), NOTES);
    let o = support::claw_keyword_only(ws.path())
        .args(["memory", "index"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    ws
}

fn claw(ws: &Path, args: &[&str]) -> Output {
    support::claw_keyword_only(ws).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `claw -m hi` (keyword-only memory, no stdin) with `server` as the LLM.
fn ask_hi(mut cmd: Command, server: &ScriptedServer) -> Output {
    cmd.openai_llm(server.url(), "scripted-model")
        .args(["-m", "hi"])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Run `claw args` with its stdout a pipe whose read end is closed before claw
/// writes anything; return the exit code and stderr.
fn with_closed_stdout(ws: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = support::claw_keyword_only(ws)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone: every write gets EPIPE
    let mut err = child.stderr.take().unwrap();
    let t = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut err, &mut s).ok();
        s
    });
    let status = wait(&mut child, 60);
    (status.code(), t.join().unwrap())
}

#[test]
fn a_closed_stdout_exits_0_quietly_everywhere() {
    let ws = indexed();
    let w = ws.path();
    let long = "A line about billing and ZX-4471.\n".repeat(4000);
    std::fs::write(w.join("memory/long.md"), long).unwrap();
    for args in [
        &["memory", "index"][..],
        &["memory", "index", "--json", "--force"],
        &["memory", "status"],
        &["memory", "status", "--json"],
        &["memory", "sources"],
        &["memory", "sources", "--json"],
        &["memory", "search", "billing"],
        &["memory", "search", "billing", "--json"],
        &["memory", "get", "memory/long.md", "--lines", "4000"],
        &["memory", "get", "memory/long.md", "--json"],
        &["doctor"],
        &["doctor", "--json"],
        &["--help"],
        &["completions", "bash"],
    ] {
        let (code, err) = with_closed_stdout(w, args);
        assert_eq!(code, Some(0), "{args:?}: stderr {err}");
        assert_eq!(err, "", "{args:?} printed on stderr");
    }
}

/// `claw completions SHELL` prints a script generated from the real command
/// definitions, also when the config file is broken (completion must not depend
/// on it); a shell it does not know is a usage error.
#[test]
fn completions_for_every_shell() {
    let ws = tempfile::tempdir().unwrap();
    let broken = ws.path().join("broken.json");
    std::fs::write(&broken, "{ not json").unwrap();
    for (shell, marker) in [
        ("bash", "_claw()"),
        ("zsh", "#compdef claw"),
        ("fish", "complete -c claw"),
        ("elvish", "edit:completion:arg-completer[claw]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let o = support::claw_keyword_only(ws.path())
            .env("CLAW_CONFIG", &broken)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = stdout(&o);
        assert!(script.contains(marker), "{shell}: {script}");
        // The real subcommands and flags are in it.
        for word in ["memory", "install-model", "workspace", "gateway"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    // Positive control for the broken config: other commands do refuse it.
    let o = support::claw_keyword_only(ws.path())
        .env("CLAW_CONFIG", &broken)
        .args(["memory", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    // bash parses the script it is given.
    let o = claw(ws.path(), &["completions", "bash"]);
    let file = ws.path().join("claw.bash");
    std::fs::write(&file, &o.stdout).unwrap();
    let check = Command::new("bash").arg("-n").arg(&file).output().unwrap();
    assert!(check.status.success(), "{}", stderr(&check));
    let o = claw(ws.path(), &["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("invalid value"), "{}", stderr(&o));
}

#[test]
fn watch_json_stops_quietly_when_its_reader_goes_away() {
    let ws = indexed();
    let w = ws.path();
    let mut child = support::claw_keyword_only(w)
        .args(["memory", "watch", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -1`: read the first event, then close the pipe.
    let mut lines = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    lines.read_line(&mut first).unwrap();
    assert!(first.contains(r#""event":"started""#), "{first}");
    drop(lines);
    // The next event (a sync) hits the closed pipe.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut n = 0;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "watch kept running with no reader"
        );
        std::fs::write(w.join(format!("memory/n{n}.md")), "# New\n\nfresh note\n").unwrap();
        n += 1;
        std::thread::sleep(Duration::from_millis(300));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(0), "stderr: {err}");
    assert!(!err.contains("panicked") && !err.contains("error"), "{err}");
}

#[test]
fn errors_are_error_and_hint_lines_and_json_on_stdout() {
    let ws = indexed();
    let w = ws.path();
    // Text: error + hint on stderr, nothing on stdout, exit 2.
    let o = claw(w, &["memory", "search", "billing", "--source", "nope"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("unknown source `nope`"), "{err}");
    assert!(
        err.contains("\nhint: list the sources with `claw memory sources`"),
        "{err}"
    );
    assert_eq!(stdout(&o), "");
    // --json: the same error as one JSON object on stdout as well.
    let o = claw(
        w,
        &["memory", "search", "billing", "--source", "nope", "--json"],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).starts_with("error: "));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "unknown-source", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("nope"),
        "{v}"
    );
    assert_eq!(v["error"]["hints"].as_array().unwrap().len(), 1, "{v}");

    let o = claw(w, &["memory", "get", "../etc/passwd", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "refused-path", "{v}");

    let o = claw(w, &["memory", "get", "memory/nothere.md", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "not-indexed", "{v}");

    // A config error (before any command runs) is JSON too.
    let cfg = w.join("bad.json");
    std::fs::write(&cfg, r#"{"workspace": ""}"#).unwrap();
    let o = support::claw_keyword_only(w)
        .env_remove("CLAW_WORKSPACE")
        .env("CLAW_CONFIG", &cfg)
        .args(["memory", "status", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "config", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("workspace"),
        "{v}"
    );
}

#[test]
fn invalid_inputs_are_refused() {
    let ws = indexed();
    let w = ws.path();
    for bad in ["NaN", "inf", "-inf"] {
        let flag = format!("--min-score={bad}");
        let o = claw(w, &["memory", "search", "billing", &flag]);
        assert_eq!(
            o.status.code(),
            Some(2),
            "--min-score {bad}: {}",
            stdout(&o)
        );
        assert!(stderr(&o).contains("finite"), "{}", stderr(&o));
    }
    let o = claw(
        w,
        &["memory", "search", "billing", "--min-score=NaN", "--json"],
    );
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "usage", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("finite"),
        "{v}"
    );
    let o = claw(w, &["memory", "search", "billing", "--min-score", "0.1"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let notes = tempfile::tempdir().unwrap();
    let n = notes.path().to_str().unwrap();
    let o = claw(w, &["memory", "add", n, "--name", "bad\x1b[2Jname"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("control characters"), "{}", stderr(&o));
    assert!(!stderr(&o).contains('\x1b'), "{}", stderr(&o));

    let o = claw(w, &["memory", "add", n, "--name", "notes"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The same folder again, under another name, or by another spelling.
    let o = claw(w, &["memory", "add", n, "--name", "again"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("already covers"), "{}", stderr(&o));
    let o = claw(w, &["memory", "add", &format!("{n}/."), "--name", "again"]);
    assert_eq!(o.status.code(), Some(2));
    // A folder inside it, and the workspace itself or its memory folder.
    std::fs::create_dir(notes.path().join("sub")).unwrap();
    let o = claw(w, &["memory", "add", &format!("{n}/sub"), "--name", "sub"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("overlaps"), "{}", stderr(&o));
    for (dir, name) in [(w.to_path_buf(), "ws"), (w.join("memory"), "mem")] {
        let o = claw(w, &["memory", "add", dir.to_str().unwrap(), "--name", name]);
        assert_eq!(o.status.code(), Some(2), "{}", dir.display());
        assert!(stderr(&o).contains("is the workspace"), "{}", stderr(&o));
        assert!(stderr(&o).contains("\nhint: "), "{}", stderr(&o));
    }
    let o = claw(w, &["memory", "sources", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 3, "{v}");

    // A named embedding key variable that is unset is an error, like for LLM profiles.
    let cfg = w.join("emb.json");
    std::fs::write(
        &cfg,
        r#"{"embedding": {"provider": "openai", "api_key_env": "EMBED_KEY_UNSET"}}"#,
    )
    .unwrap();
    let o = support::claw_keyword_only(w)
        .env_remove("CLAW_EMBED_PROVIDER")
        .env("CLAW_CONFIG", &cfg)
        .args(["memory", "status"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("EMBED_KEY_UNSET"), "{}", stderr(&o));
}

const HOSTILE: &str = "Clipboard \x1b]52;c;cm0gLXJmIH4=\x07 grab, \x1b[2J\x1b[H clear, \x1b[31mred\x1b[0m, \u{9b}1;1H c1, bell\x07, cr\rover, rtl\u{202e}gnp.exe zebrafish\n";

fn assert_neutral(what: &str, s: &str) {
    for c in ['\x1b', '\x07', '\r', '\u{9b}', '\u{202e}'] {
        assert!(
            !s.contains(c),
            "{what}: raw {c:?} reached the terminal: {s:?}"
        );
    }
}

/// The stdout of a command that succeeded, checked [neutral](assert_neutral).
fn neutral_stdout(what: &str, o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
    let out = stdout(o);
    assert_neutral(what, &out);
    out
}

#[test]
fn terminal_escapes_are_neutralised_in_text_and_kept_in_json() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let name = "memory/evil\x1b[2J\x1b]0;pwn\x07.md";
    support::write_tree(w, &[(name, HOSTILE), ("MEMORY.md", "plain\n")]);
    // A source folder with a hostile name.
    let src = w.join("src\x1b[31mred");
    support::write_tree(&src, &[("a.md", "zebrafish in the source\n")]);
    let o = claw(
        w,
        &["memory", "add", src.to_str().unwrap(), "--name", "hostile"],
    );
    neutral_stdout("add", &o);
    // A binary file with a hostile name is skipped and reported on stderr.
    std::fs::write(w.join("memory/bin\x1b[2J.md"), b"\x00\x01\x02binary\x00").unwrap();
    let o = claw(w, &["memory", "index"]);
    neutral_stdout("index stdout", &o);
    assert_neutral("index stderr", &stderr(&o));

    let text = neutral_stdout("search", &claw(w, &["memory", "search", "zebrafish"]));
    assert!(
        text.contains("\\x1b]52;c;"),
        "escapes shown visibly: {text}"
    );
    assert!(
        text.contains("memory/evil\\x1b[2J\\x1b]0;pwn\\x07.md"),
        "{text}"
    );

    // JSON is unchanged: the exact bytes, escaped by the JSON encoder.
    let o = claw(w, &["memory", "search", "zebrafish", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let hits = v["results"].as_array().unwrap();
    let hit = hits.iter().find(|h| h["source"] == "memory").unwrap();
    assert_eq!(hit["path"], name);
    assert!(
        hit["snippet"].as_str().unwrap().contains("\x1b]52;c;"),
        "{hit}"
    );

    let text = neutral_stdout("get", &claw(w, &["memory", "get", name]));
    assert!(text.contains("zebrafish\n"), "newlines kept");
    let o = claw(w, &["memory", "get", name, "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["text"], HOSTILE);

    for args in [
        &["memory", "status"][..],
        &["memory", "sources"],
        &["doctor"],
    ] {
        let o = claw(w, args);
        assert_neutral(&format!("{args:?}"), &stdout(&o));
        assert_neutral(&format!("{args:?} stderr"), &stderr(&o));
    }
    // Errors naming a hostile path are neutralised too.
    let o = claw(w, &["memory", "get", "memory/no\x1b[2J.md"]);
    assert_eq!(o.status.code(), Some(2));
    assert_neutral("error", &stderr(&o));
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn umask_000(mut c: Command) -> Command {
    // SAFETY: umask(2) is async-signal-safe and touches only the child's own state.
    unsafe {
        c.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    c
}

#[test]
fn state_and_transcripts_are_private_under_umask_000() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    support::write_tree(w, NOTES);
    let mut c = umask_000(support::claw_keyword_only(w));
    let o = c.args(["memory", "index"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let state = claw_testkit::state_dir(w);
    assert_eq!(mode(&state), 0o700, "state dir");
    let mut checked = 0;
    for e in std::fs::read_dir(&state).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            assert_eq!(mode(&p), 0o600, "{}", p.display());
            checked += 1;
        }
    }
    assert!(checked >= 2, "database and lock file at least");
    assert_eq!(mode(&state.join("memory.sqlite")), 0o600);

    // A database left world-readable by an older claw is tightened on open.
    std::fs::set_permissions(
        state.join("memory.sqlite"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = umask_000(support::claw_keyword_only(w))
        .args(["memory", "search", "billing"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(mode(&state.join("memory.sqlite")), 0o600);
    assert_eq!(mode(&state), 0o700);

    // A session transcript written by `claw -m`.
    let server = ScriptedServer::start([openai::text(&["ok"])]);
    let o = ask_hi(umask_000(support::claw_keyword_only(w)), &server);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let sessions = w.join("sessions");
    assert_eq!(mode(&sessions), 0o700, "sessions dir");
    let files: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!files.is_empty());
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

/// Channels are checked at load (a bad homeserver or allow_from entry is a
/// config error naming the key, for every command) and by the doctor: one
/// bounded request each, the token variable, an empty `allow_from`.
#[test]
fn channels_are_validated_at_load_and_probed_by_the_doctor() {
    use claw_testkit::telegram_api::FakeTelegram;
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let cfg = w.join("config.json");
    let doctor = |channels: Value, env: &[(&str, &str)]| -> (Option<i32>, Value, String) {
        std::fs::write(&cfg, serde_json::json!({"channels": channels}).to_string()).unwrap();
        let mut c = support::claw_keyword_only(w);
        c.env("CLAW_CONFIG", &cfg);
        for (k, v) in env {
            c.env(k, v);
        }
        let o = c.args(["doctor", "--json"]).output().unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
        (o.status.code(), v, stderr(&o))
    };
    let section = |v: &Value| claw_testkit::doctor_section(v, "channels");
    // Invalid at load: an error naming the key, exit 2 (positive control: a
    // valid section loads, below).
    for (bad, want) in [
        (
            serde_json::json!({"matrix": {"homeserver": "not a url", "user_id": "@c:x",
                "access_token_env": "MX", "allow_from": ["@me:x"]}}),
            "channels.matrix: homeserver \"not a url\" is not a URL",
        ),
        (
            serde_json::json!({"telegram": {"token_env": "TG", "allow_from": ["joe smith"]}}),
            "channels.telegram: allow_from entry \"joe smith\"",
        ),
    ] {
        // The doctor reports it as its failing `config` section.
        let (code, v, err) = doctor(bad.clone(), &[]);
        assert_eq!(code, Some(2), "{v} {err}");
        assert_eq!(v["sections"][0]["name"], "config", "{v}");
        assert_eq!(v["sections"][0]["status"], "error", "{v}");
        let msg = v["sections"][0]["details"]["error"]
            .as_str()
            .unwrap_or_default();
        assert!(msg.contains(want), "{v} {err}");
        // Every other command refuses it as a config error.
        std::fs::write(&cfg, serde_json::json!({"channels": bad}).to_string()).unwrap();
        let o = support::claw_keyword_only(w)
            .env("CLAW_CONFIG", &cfg)
            .args(["memory", "status", "--json"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["error"]["kind"], "config", "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(want),
            "{v}"
        );
    }
    // A reachable Bot API and a known token: ok.
    let tg = FakeTelegram::start("123:abc");
    let good = serde_json::json!({"telegram": {"token_env": "TG", "allow_from": ["42"], "base_url": tg.url()}});
    let (code, v, err) = doctor(good.clone(), &[("TG", "123:abc")]);
    assert_eq!(code, Some(0), "{v} {err}");
    let c = section(&v);
    assert_eq!(c["status"], "ok", "{c}");
    assert!(
        c["summary"].as_str().unwrap().contains("@claw_test_bot"),
        "{c}"
    );
    // A wrong token: error, the API's answer named, the token never shown.
    let (code, v, _) = doctor(good, &[("TG", "999:wrong")]);
    assert_eq!(code, Some(2));
    let c = section(&v);
    assert_eq!(c["status"], "error", "{c}");
    assert!(
        c["summary"].as_str().unwrap().contains("Unauthorized"),
        "{c}"
    );
    assert_eq!(c["details"]["probes"][0]["problem"], "token_refused", "{c}");
    assert!(
        c["hint"]
            .as_str()
            .unwrap()
            .contains("channels.telegram.token_env"),
        "{c}"
    );
    assert!(!v.to_string().contains("999:wrong"), "{v}");
    // Nobody listening: "Connection refused", fast.
    let port = claw_testkit::closed_port();
    let t0 = std::time::Instant::now();
    let (code, v, _) = doctor(
        serde_json::json!({"telegram": {"token_env": "TG", "allow_from": ["42"],
            "base_url": format!("http://127.0.0.1:{port}")}}),
        &[("TG", "123:abc")],
    );
    assert_eq!(code, Some(2));
    let c = section(&v);
    assert!(
        c["summary"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{c}"
    );
    assert!(
        c["hint"]
            .as_str()
            .unwrap()
            .contains("check channels.telegram.base_url"),
        "{c}"
    );
    assert!(!v.to_string().contains("123:abc"), "{v}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    // The token variable unset: error naming it. An empty allow_from: a warning.
    let (code, v, _) = doctor(
        serde_json::json!({"telegram": {"token_env": "TG_UNSET", "allow_from": ["42"]}}),
        &[],
    );
    assert_eq!(code, Some(2));
    assert!(
        section(&v)["summary"]
            .as_str()
            .unwrap()
            .contains("TG_UNSET"),
        "{v}"
    );
    let (code, v, _) = doctor(
        serde_json::json!({"telegram": {"token_env": "TG", "base_url": tg.url()}}),
        &[("TG", "123:abc")],
    );
    assert_eq!(code, Some(0));
    let c = section(&v);
    assert_eq!(c["status"], "warn", "{c}");
    assert!(
        c["summary"]
            .as_str()
            .unwrap()
            .contains("allow_from is empty"),
        "{c}"
    );
    assert!(c["hint"].as_str().unwrap().contains("allow_from"), "{c}");
}

/// The doctor's `llm` section: one bounded `GET /v1/models` against the real
/// configured endpoint (a scripted server here): served model ok, an unlisted
/// model a warning, a refused key and a closed port errors naming the cause,
/// the key never printed; no LLM at all is a warning.
#[test]
fn doctor_probes_the_llm() {
    use claw_testkit::scripted_server::Reply;
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let doctor = |url: &str, key: Option<&str>| -> (Option<i32>, Value) {
        let mut c = support::claw_keyword_only(w);
        c.openai_llm(url, "tiny-model");
        if let Some(k) = key {
            c.env("CLAW_LLM_API_KEY", k);
        }
        let o = c.args(["doctor", "--json"]).output().unwrap();
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let llm = claw_testkit::doctor_section(&v, "llm");
        assert!(!v.to_string().contains("sk-secret"), "{v}");
        (o.status.code(), llm)
    };
    let server = ScriptedServer::start([
        Reply::json(200, serde_json::json!({"data": [{"id": "tiny-model"}]})),
        Reply::json(200, serde_json::json!({"data": [{"id": "other"}]})),
        Reply::json(
            401,
            serde_json::json!({"error": {"message": "invalid api key"}}),
        ),
    ]);
    let (code, s) = doctor(&server.url(), Some("sk-secret"));
    assert_eq!((code, &s["status"]), (Some(0), &Value::from("ok")), "{s}");
    assert_eq!(s["details"]["probes"][0]["model_listed"], true, "{s}");
    let req = &server.requests()[0];
    assert_eq!(
        (req.method.as_str(), req.path.as_str()),
        ("GET", "/v1/models")
    );
    let (code, s) = doctor(&server.url(), Some("sk-secret"));
    assert_eq!((code, &s["status"]), (Some(0), &Value::from("warn")), "{s}");
    assert!(
        s["summary"]
            .as_str()
            .unwrap()
            .contains("does not list the model tiny-model"),
        "{s}"
    );
    assert!(
        s["hint"].as_str().unwrap().contains("CLAW_LLM_MODEL"),
        "{s}"
    );
    let (code, s) = doctor(&server.url(), Some("sk-secret"));
    assert_eq!(
        (code, &s["status"]),
        (Some(2), &Value::from("error")),
        "{s}"
    );
    assert!(
        s["summary"]
            .as_str()
            .unwrap()
            .contains("refused the key (HTTP 401: invalid api key)"),
        "{s}"
    );
    assert!(
        s["hint"].as_str().unwrap().contains("CLAW_LLM_API_KEY"),
        "{s}"
    );
    let port = claw_testkit::closed_port();
    let t0 = Instant::now();
    let (code, s) = doctor(&format!("http://127.0.0.1:{port}"), Some("sk-secret"));
    assert_eq!(code, Some(2), "{s}");
    assert!(
        s["summary"]
            .as_str()
            .unwrap()
            .contains("Connection refused"),
        "{s}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert!(
        s["hint"].as_str().unwrap().contains("CLAW_LLM_BASE_URL"),
        "{s}"
    );
    let o = claw(w, &["doctor", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = claw_testkit::doctor_section(&v, "llm");
    assert_eq!(s["status"], "warn", "{s}");
    assert_eq!(s["details"]["configured"], false, "{s}");
}

#[test]
fn doctor_reports_each_section_in_text_and_json() {
    let ws = indexed();
    let w = ws.path();
    let o = claw(w, &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true, "{v}");
    let names = claw_testkit::strs(&v["sections"], "/name");
    assert_eq!(
        names,
        [
            "config",
            "workspace",
            "database",
            "model",
            "writer_lock",
            "watcher",
            "protections",
            "state_dir",
            "too_big",
            "llm",
            "channels"
        ]
    );
    let p = &v["sections"][6]["details"];
    assert_eq!(p["exec_sandbox"]["enabled"], true, "{p}");
    assert_eq!(p["exec_sandbox"]["network"], false, "{p}");
    assert_eq!(p["file_jail"], true, "{p}");
    assert_eq!(p["confirm_side_effects"], true, "{p}");
    assert_eq!(p["web_allow_private"], false, "{p}");
    let db = &v["sections"][2];
    assert_eq!(db["details"]["files"], 2, "{db}");
    assert_eq!(v["sections"][3]["details"]["provider"], "none");
    assert_eq!(v["sections"][4]["details"]["held"], false);
    assert_eq!(v["sections"][5]["details"]["alive"], false);
    assert!(v["sections"][7]["details"]["path"].is_string(), "{v}");
    assert_eq!(
        v["sections"][8]["details"]["notes"],
        serde_json::json!([]),
        "{v}"
    );
    let o = claw(w, &["doctor"]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(
        text.contains("database") && text.contains("2 files"),
        "{text}"
    );

    // A fresh workspace: the doctor does not create the database.
    let empty = tempfile::tempdir().unwrap();
    let o = claw(empty.path(), &["doctor", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["sections"][2]["status"], "warn", "{v}");
    assert!(!claw_testkit::db_path(empty.path()).exists());

    // With the real model configured, the model section says it loaded.
    let o = support::claw(w)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["sections"][3]["details"]["loaded"], true, "{v}");
}

#[test]
fn the_assistants_answer_cannot_drive_the_terminal() {
    // A note could talk the model into echoing escapes: they are shown, not obeyed.
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let server = ScriptedServer::start([openai::text(&[
        "copied \x1b]52;c;",
        "cm0gLXJmIH4=\x07 and \x1b[2J cleared",
    ])]);
    let out = neutral_stdout("answer", &ask_hi(support::claw_keyword_only(w), &server));
    assert!(
        out.contains("copied \\x1b]52;c;cm0gLXJmIH4=\\x07 and \\x1b[2J cleared"),
        "{out:?}"
    );
}

/// A mistyped workspace (no directory, no state) is an error with a hint for
/// the commands that only read, and nothing is created for it; a workspace
/// that only has registered folders (`memory add` without a directory) is one.
#[test]
fn a_workspace_that_does_not_exist_is_refused_by_readers() {
    let tmp = tempfile::tempdir().unwrap();
    let typo = tmp.path().join("wrokspace");
    for args in [
        &["memory", "search", "hello"][..],
        &["memory", "get", "MEMORY.md"],
        &["memory", "sources"],
    ] {
        let o = claw(&typo, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(
            err.contains("does not exist") && err.contains("hint: "),
            "{err}"
        );
        let o = claw(&typo, &[args, &["--json"]].concat());
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["error"]["kind"], "no-workspace", "{v}");
    }
    assert!(!typo.exists());
    assert!(!claw_testkit::state_dir(&typo).exists());
    // Positive control: a workspace known only by its registered folder.
    let notes = tmp.path().join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("a.md"), "# A\nhello world\n").unwrap();
    let ws = tmp.path().join("ws-never-created");
    let o = claw(
        &ws,
        &["memory", "add", notes.to_str().unwrap(), "--name", "n"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = claw(&ws, &["memory", "search", "hello"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("a.md"), "{}", stdout(&o));
}

/// `memory index --progress json`: one JSON object per second on stderr and a
/// final one with everything done; `--progress lines` and `none` are accepted,
/// a bad mode is a usage error.
#[test]
fn index_progress_as_json() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    for i in 0..30 {
        std::fs::create_dir_all(w.join("memory")).unwrap();
        std::fs::write(
            w.join(format!("memory/n{i}.md")),
            format!("# Note {i}\nbody {i}\n"),
        )
        .unwrap();
    }
    let o = claw(w, &["memory", "index", "--progress", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let err = stderr(&o);
    let last: Value = serde_json::from_str(err.lines().last().unwrap_or("")).unwrap();
    assert_eq!(
        (
            &last["phase"],
            &last["done"],
            &last["total"],
            &last["eta_secs"]
        ),
        (
            &Value::from("indexing"),
            &Value::from(30),
            &Value::from(30),
            &Value::from(0)
        ),
        "{err}"
    );
    for mode in ["lines", "none", "bar"] {
        let o = claw(w, &["memory", "index", "--force", "--progress", mode]);
        assert_eq!(o.status.code(), Some(0), "{mode}: {}", stderr(&o));
    }
    let o = claw(w, &["memory", "index", "--progress", "loud"]);
    assert_eq!(o.status.code(), Some(2));
}

/// `claw doctor` names every problem of a config that does not load, not only
/// the first, in its `config` section (the first one still in `error`).
#[test]
fn doctor_names_every_config_problem() {
    let ws = tempfile::tempdir().unwrap();
    let w = ws.path();
    let cfg = w.join("config.json");
    std::fs::write(
        &cfg,
        r#"{"channels": {"matrix": {"homeserver": "not a url", "user_id": "@a:b", "access_token_env": "X"}},
            "heartbeat": {"interval_minutes": 0}, "memory": {"backend": {"kind": "mysql"}}}"#,
    )
    .unwrap();
    let o = support::claw_keyword_only(w)
        .env("CLAW_CONFIG", &cfg)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let c = &v["sections"][0];
    assert_eq!(
        (&c["name"], &c["status"]),
        (&Value::from("config"), &Value::from("error"))
    );
    let msgs = claw_testkit::strs(&c["details"]["errors"], "/message");
    assert_eq!(msgs.len(), 3, "{c}");
    for want in ["memory.backend.kind", "heartbeat", "channels.matrix"] {
        assert!(msgs.iter().any(|m| m.contains(want)), "{want}: {msgs:?}");
    }
    assert!(
        c["details"]["error"]
            .as_str()
            .unwrap()
            .contains("memory.backend.kind")
    );
    // Positive control: with the file fixed, the config section is ok.
    std::fs::write(&cfg, "{}").unwrap();
    let o = support::claw_keyword_only(w)
        .env("CLAW_CONFIG", &cfg)
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["sections"][0]["status"], "ok", "{v}");
}
