//! Symlinks can't pull outside files into memory — the real `claw` binary
//! (keyword-only, no model needed) on real folders: `passwd.md -> /etc/passwd`,
//! a symlinked directory, a relative link climbing out and the same in the
//! workspace's own `memory/` are skipped with counted issues, neither indexed
//! nor searchable nor served by `get`; links that stay inside are indexed; a note
//! (or its parent directory) swapped for a link after indexing is refused by
//! `get` at read time and dropped by the next index; a source registered with
//! `--follow-symlinks-outside` indexes and serves such links.

use claw_testkit as support;

use serde_json::Value;
use std::path::Path;
use std::process::Output;

const SECRET: &str = "OUTSIDETOKEN";

fn run(ws: &Path, args: &[&str]) -> Output {
    support::claw_keyword_only(ws).args(args).output().unwrap()
}

/// The source called `name` in `memory sources --json` output.
fn source_named(sources: &Value, name: &str) -> Value {
    claw_testkit::named(sources, name)
}

fn ok_json(ws: &Path, args: &[&str]) -> Value {
    support::run_json(support::claw_keyword_only(ws).args(args))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Issues of an index report whose message says the link leads outside.
fn outside_issues(report: &Value) -> Vec<(String, String, bool)> {
    report["issues"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| {
            i["message"]
                .as_str()
                .unwrap()
                .contains("outside the source root")
        })
        .map(|i| {
            (
                i["source"].as_str().unwrap().to_string(),
                i["path"].as_str().unwrap().to_string(),
                i["skipped"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// `tmp/ws` (workspace), `tmp/notes` (to register) and `tmp/outside` (a secret note).
fn layout() -> (
    tempfile::TempDir,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let notes = tmp.path().join("notes");
    let outside = tmp.path().join("outside");
    support::write_tree(&ws, &[("MEMORY.md", "# Memory\nworkspace note\n")]);
    support::write_tree(
        &outside,
        &[("leak.md", &format!("# Leak\n{SECRET} from outside\n"))],
    );
    std::fs::create_dir_all(&notes).unwrap();
    (tmp, ws, notes, outside)
}

#[test]
fn links_out_of_a_source_are_skipped_counted_and_never_served() {
    let (_tmp, ws, notes, outside) = layout();
    support::write_tree(&notes, &[("real.md", "# Real\nbanana bread recipe\n")]);
    let link = |t: &Path, l: &Path| std::os::unix::fs::symlink(t, l).unwrap();
    link(Path::new("/etc/passwd"), &notes.join("passwd.md"));
    link(&outside, &notes.join("ext"));
    link(Path::new("../outside/leak.md"), &notes.join("leak.md"));
    link(Path::new("real.md"), &notes.join("alias.md"));
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    link(Path::new("/etc/passwd"), &ws.join("memory/passwd.md"));
    link(&outside, &ws.join("memory/linked"));

    let out = run(
        &ws,
        &["memory", "add", notes.to_str().unwrap(), "--name", "notes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = ok_json(&ws, &["memory", "index", "--json"]);
    let mut got = outside_issues(&r);
    got.sort();
    let want: Vec<(String, String, bool)> = [
        ("memory", "memory/linked"),
        ("memory", "memory/passwd.md"),
        ("notes", "ext"),
        ("notes", "leak.md"),
        ("notes", "passwd.md"),
    ]
    .iter()
    .map(|(s, p)| (s.to_string(), p.to_string(), true))
    .collect();
    assert_eq!(got, want, "{r:#}");
    println!(
        "links out of a source: {} tried, {} skipped with an issue (files_skipped {})",
        want.len(),
        got.iter().filter(|(_, _, skipped)| *skipped).count(),
        r["files_skipped"]
    );
    assert!(r["files_skipped"].as_u64().unwrap() >= 5, "{r:#}");
    // MEMORY.md, real.md and the inside alias.
    assert_eq!(r["files_scanned"], 3, "{r:#}");

    let gets = [
        "passwd.md",
        "ext/leak.md",
        "leak.md",
        "memory/passwd.md",
        "memory/linked/leak.md",
    ];
    let mut served = 0;
    for path in gets {
        let out = run(&ws, &["memory", "get", path]);
        served += usize::from(out.status.success());
        assert_eq!(
            out.status.code(),
            Some(2),
            "get {path}: {}",
            text(&out.stdout)
        );
        let stdout = text(&out.stdout);
        assert!(
            !stdout.contains("root:") && !stdout.contains(SECRET),
            "{path}: {stdout}"
        );
        assert!(
            text(&out.stderr).contains("not an indexed file"),
            "{path}: {}",
            text(&out.stderr)
        );
    }
    println!("get of those links: {} tried, {served} served", gets.len());
    for q in [SECRET, "root"] {
        let out = run(&ws, &["memory", "search", q, "--json"]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "search {q}: {}",
            text(&out.stdout)
        );
    }
    // A link that stays inside the folder is indexed and served.
    let got = ok_json(&ws, &["memory", "get", "alias.md", "--json"]);
    assert!(got["text"].as_str().unwrap().contains("banana"), "{got}");
    let sources = ok_json(&ws, &["memory", "sources", "--json"]);
    let notes_src = source_named(&sources, "notes");
    assert_eq!(notes_src["follow_symlinks_outside"], false);
}

#[test]
fn a_note_swapped_for_a_link_after_indexing_is_refused_then_dropped() {
    let (_tmp, ws, notes, outside) = layout();
    support::write_tree(
        &notes,
        &[
            ("a.md", "# A\nalpha note\n"),
            ("sub/b.md", "# B\nbeta note\n"),
        ],
    );
    support::write_tree(&ws, &[("memory/m.md", "# M\nmemory note\n")]);
    support::write_tree(
        &outside,
        &[("dir/b.md", &format!("# B\n{SECRET} in a dir\n"))],
    );
    let out = run(
        &ws,
        &["memory", "add", notes.to_str().unwrap(), "--name", "notes"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = ok_json(&ws, &["memory", "index", "--json"]);
    assert_eq!(r["files_changed"], 4, "{r:#}");
    for p in ["a.md", "sub/b.md", "memory/m.md"] {
        ok_json(&ws, &["memory", "get", p, "--json"]);
    }

    // Swap: a file for a link, a parent directory for a link, a workspace note for a link.
    std::fs::remove_file(notes.join("a.md")).unwrap();
    std::os::unix::fs::symlink(outside.join("leak.md"), notes.join("a.md")).unwrap();
    std::fs::rename(notes.join("sub"), notes.join("old-sub")).unwrap();
    std::os::unix::fs::symlink(outside.join("dir"), notes.join("sub")).unwrap();
    std::fs::remove_file(ws.join("memory/m.md")).unwrap();
    std::os::unix::fs::symlink(outside.join("leak.md"), ws.join("memory/m.md")).unwrap();

    let mut served = 0;
    for p in ["a.md", "sub/b.md", "memory/m.md"] {
        let out = run(&ws, &["memory", "get", p]);
        served += usize::from(out.status.success());
        assert_eq!(out.status.code(), Some(2), "get {p}: {}", text(&out.stdout));
        assert!(!text(&out.stdout).contains(SECRET), "{p}");
        assert!(
            text(&out.stderr).contains("resolves outside"),
            "{p}: {}",
            text(&out.stderr)
        );
    }
    println!("notes swapped for outside links after indexing: 3 tried, {served} served by get");
    // The search's inline sync does not index the links either.
    let out = run(&ws, &["memory", "search", SECRET, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    // The next index drops them, with an issue each.
    let r = ok_json(&ws, &["memory", "index", "--json"]);
    let mut got: Vec<String> = outside_issues(&r).into_iter().map(|(_, p, _)| p).collect();
    got.sort();
    assert_eq!(got, ["a.md", "memory/m.md", "sub"], "{r:#}");
    let out = run(&ws, &["memory", "get", "a.md"]);
    assert!(
        text(&out.stderr).contains("not an indexed file"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn follow_symlinks_outside_is_an_explicit_per_source_opt_in() {
    let (_tmp, ws, notes, outside) = layout();
    support::write_tree(&notes, &[("real.md", "# Real\nbanana\n")]);
    std::os::unix::fs::symlink(outside.join("leak.md"), notes.join("linked.md")).unwrap();
    std::os::unix::fs::symlink(&outside, notes.join("ext")).unwrap();
    let out = run(
        &ws,
        &[
            "memory",
            "add",
            notes.to_str().unwrap(),
            "--name",
            "linked",
            "--follow-symlinks-outside",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("following symlinks outside"),
        "{}",
        text(&out.stdout)
    );
    let r = ok_json(&ws, &["memory", "index", "--json"]);
    assert!(outside_issues(&r).is_empty(), "{r:#}");
    assert_eq!(
        r["files_scanned"], 4,
        "MEMORY.md, real.md, linked.md, ext/leak.md: {r:#}"
    );
    for p in ["linked.md", "ext/leak.md"] {
        let got = ok_json(&ws, &["memory", "get", p, "--json"]);
        assert!(got["text"].as_str().unwrap().contains(SECRET), "{got}");
    }
    let sources = ok_json(&ws, &["memory", "sources", "--json"]);
    let s = source_named(&sources, "linked");
    assert_eq!(s["follow_symlinks_outside"], true);
}
