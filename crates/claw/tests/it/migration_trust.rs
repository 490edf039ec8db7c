//! Migration trust (issue 25): an older claw kept its state in
//! `<workspace>/.claw/`, where the assistant's tools may write. A registered
//! source carried over from there with a folder outside the workspace (or
//! following symlinks out of its folder) is not trusted: it is not migrated,
//! its rows go, the user is told which and the command that registers it
//! again, and `claw memory sources` lists it as not trusted. A source inside
//! the workspace migrates as before. And `claw doctor` says where the state
//! directory is and whether it is private. The real binary throughout.

use claw_testkit::{run_json as json, run_ok};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

/// Its stdout and stderr, after asserting success.
fn ok(c: &mut Command) -> (String, String) {
    let out = run_ok(c);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn hits(ws: &Path, query: &str) -> Vec<String> {
    let v = claw_testkit::stdout_json(
        claw_testkit::claw_keyword_only(ws).args(["memory", "search", query, "--json"]),
    );
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r["source"].as_str().unwrap(),
                r["path"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn an_outside_source_from_the_old_state_dir_is_not_trusted() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let host = tmp.path().join("host files");
    claw_testkit::write_tree(
        &ws,
        &[
            ("MEMORY.md", "# Memory\nNothing here.\n"),
            ("notes/inside.md", "The kiwi orchard is inside.\n"),
        ],
    );
    claw_testkit::write_tree(&host, &[("secret.md", "The launch code is swordfish.\n")]);
    let legacy = ws.join(".claw");
    // The old layout: what an older claw (or a tool writing `.claw/`) left.
    let old = |args: &[&str]| {
        let mut c = claw_testkit::claw_keyword_only(&ws);
        c.env("CLAW_STATE_DIR", &legacy).args(args);
        c
    };
    ok(&mut old(&[
        "memory",
        "add",
        host.to_str().unwrap(),
        "--name",
        "host",
    ]));
    ok(&mut old(&[
        "memory",
        "add",
        ws.join("notes").to_str().unwrap(),
        "--name",
        "inside",
    ]));
    ok(&mut old(&["memory", "index"]));
    // Positive control: the old registry is obeyed, the outside file indexed.
    let (out, _) = ok(&mut old(&["memory", "search", "swordfish", "--json"]));
    assert!(out.contains("secret.md"), "control: {out}");

    // The new claw moves the state out, and leaves the outside source behind.
    let (_, err) = ok(claw_testkit::claw_keyword_only(&ws).args(["memory", "index"]));
    assert!(err.contains("moved the state directory"), "{err}");
    assert!(
        err.contains("NOT carried over: 1 registered folder"),
        "{err}"
    );
    let cmd = format!("claw memory add '{}' --name host", host.display());
    assert!(
        err.contains(&cmd),
        "the command to register it again: {err}"
    );
    assert!(!err.contains("--name inside"), "{err}");
    assert!(!legacy.exists());

    assert_eq!(hits(&ws, "swordfish"), Vec::<String>::new(), "not indexed");
    assert_eq!(
        hits(&ws, "kiwi"),
        ["inside:inside.md"],
        "the inside source migrated"
    );

    let list = json(claw_testkit::claw_keyword_only(&ws).args(["memory", "sources", "--json"]));
    let by_name = |n: &str| claw_testkit::named(&list, n);
    assert_eq!(by_name("inside")["trusted"], true, "{list}");
    assert_eq!(by_name("memory")["trusted"], true, "{list}");
    let h = by_name("host");
    assert_eq!(h["trusted"], false, "{h}");
    assert_eq!(h["untrusted_reason"], "its folder is outside the workspace");
    assert_eq!(h["register"], cmd.as_str());
    assert_eq!(h["root"], host.display().to_string());
    let (text, _) = ok(claw_testkit::claw_keyword_only(&ws).args(["memory", "sources"]));
    let line = text.lines().find(|l| l.starts_with("host")).unwrap();
    assert!(line.contains("NOT TRUSTED, not indexed"), "{line}");
    assert!(line.contains(&cmd), "{line}");
    let status = json(claw_testkit::claw_keyword_only(&ws).args(["memory", "status", "--json"]));
    let names: Vec<&str> = status["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["memory", "sessions", "inside"]);
    let doctor = json(claw_testkit::claw_keyword_only(&ws).args(["doctor", "--json"]));
    let state = section(&doctor, "state_dir");
    assert_eq!(
        state["details"]["untrusted_sources"][0]["name"], "host",
        "{state}"
    );
    eprintln!("attack class 'migrated outside source': 1 tried, 0 got through");

    // The user registers it again, with the command they were given: indexed,
    // and no longer listed as untrusted.
    ok(claw_testkit::claw_keyword_only(&ws).args([
        "memory",
        "add",
        host.to_str().unwrap(),
        "--name",
        "host",
    ]));
    ok(claw_testkit::claw_keyword_only(&ws).args(["memory", "index"]));
    assert_eq!(hits(&ws, "swordfish"), ["host:secret.md"]);
    let list = json(claw_testkit::claw_keyword_only(&ws).args(["memory", "sources", "--json"]));
    assert!(
        list.as_array()
            .unwrap()
            .iter()
            .all(|s| s["trusted"] == true),
        "{list}"
    );
}

fn section(doctor: &Value, name: &str) -> Value {
    claw_testkit::doctor_section(doctor, name)
}

#[test]
fn doctor_shows_the_state_dir_and_whether_it_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let home = tmp.path().join("home");
    claw_testkit::write_tree(&ws, &[("MEMORY.md", "# Memory\n")]);
    let claw = |home: &Path| {
        let mut c = claw_testkit::claw_keyword_only(&ws);
        c.env("HOME", home);
        c
    };
    ok(claw(&home).args(["memory", "index"]));
    let state = claw_testkit::state_dir_in(&home, &ws);
    let d = json(claw(&home).args(["doctor", "--json"]));
    assert!(d["sections"].is_array(), "{d}");
    let s = section(&d, "state_dir");
    assert_eq!(s["status"], "ok", "{s}");
    assert_eq!(s["details"]["path"], state.display().to_string());
    assert_eq!(s["details"]["private"], true);
    assert_eq!(s["details"]["mode"], "700");
    assert_eq!(s["details"]["inside_workspace"], false);
    assert_eq!(s["details"]["owner_uid"], s["details"]["user_uid"]);
    let (text, _) = ok(claw(&home).args(["doctor"]));
    let line = text.lines().find(|l| l.contains("state_dir")).unwrap();
    assert!(line.starts_with("ok "), "{line}");
    assert!(
        line.contains(&format!("{} (private", state.display())),
        "{line}"
    );

    // Readable by others: claw tightens it back to 0700 as it starts (nobody
    // else could write it), and the doctor sees it private again.
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = section(&json(claw(&home).args(["doctor", "--json"])), "state_dir");
    assert_eq!(s["details"]["mode"], "700", "{s}");
    assert_eq!(s["details"]["private"], true, "{s}");

    // Inside the workspace (HOME in it): not private either.
    let inner = ws.join("home");
    ok(claw(&inner).args(["memory", "index"]));
    let s = section(&json(claw(&inner).args(["doctor", "--json"])), "state_dir");
    assert_eq!(s["status"], "warn", "{s}");
    assert_eq!(s["details"]["inside_workspace"], true, "{s}");
    assert_eq!(s["details"]["private"], false);
}
