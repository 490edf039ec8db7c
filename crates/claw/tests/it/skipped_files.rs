//! Files skipped for cause are remembered, not retried forever (issue 12, item
//! 12): a file too big for `memory.max_file_bytes` or binary is recorded with
//! its stat, so `claw memory status` is not BEHIND the disk forever and a search
//! reports `fresh`; a changed skipped file is re-examined (and indexed once it
//! is fine); a file whose *name* is not UTF-8 is reported by a lossy name with
//! reason `non_utf8_name`, never dropped silently. The real binary throughout.

use claw_testkit as support;

use serde_json::Value;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A keyword-only `claw` with a config file setting a 1 kB file limit.
fn claw(ws: &Path) -> std::process::Command {
    let config = ws.join("home/config.json");
    if !config.exists() {
        std::fs::create_dir_all(config.parent().unwrap()).unwrap();
        std::fs::write(&config, r#"{"memory": {"max_file_bytes": 1000}}"#).unwrap();
    }
    let mut c = support::claw_keyword_only(ws);
    c.env("CLAW_CONFIG", config);
    c
}

fn json(ws: &Path, args: &[&str]) -> (i32, Value) {
    let out = claw(ws).args(args).output().unwrap();
    let code = out.status.code().unwrap();
    assert_ne!(code, 2, "{}", String::from_utf8_lossy(&out.stderr));
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    (code, v)
}

fn text(ws: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&support::run_ok(claw(ws).args(args)).stdout).into_owned()
}

fn issue<'a>(report: &'a Value, path: &str) -> Option<&'a Value> {
    report["issues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["path"] == path)
}

#[test]
fn skipped_files_are_remembered_so_the_index_is_not_behind_forever() {
    let tmp = support::workspace(&[
        (
            "MEMORY.md",
            "# Memory\nThe quokka lives on Rottnest Island.\n",
        ),
        ("memory/big.md", &"wombat burrows are deep. ".repeat(80)),
    ]);
    let ws = tmp.path();
    std::fs::write(
        ws.join("memory/blob.md"),
        b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0",
    )
    .unwrap();

    let (_, r) = json(ws, &["memory", "index", "--json"]);
    assert_eq!(r["files_skipped"], 2, "{r}");
    let big = issue(&r, "memory/big.md").expect("big.md reported");
    assert_eq!(big["reason"], "too_big", "{r}");
    assert_eq!(big["skipped"], true);
    // The setting to raise is the CLI's hint, in the message as it always was.
    assert!(
        big["message"]
            .as_str()
            .unwrap()
            .ends_with("(raise memory.max_file_bytes in the config to index it)"),
        "{big}"
    );
    assert_eq!(issue(&r, "memory/blob.md").unwrap()["reason"], "binary");

    // Not behind the disk: status is up to date and counts the skipped files...
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(
        s["changed_on_disk"],
        serde_json::json!({"new": 0, "modified": 0, "deleted": 0}),
        "{s}"
    );
    assert_eq!(s["skipped_files"], 2, "{s}");
    let t = text(ws, &["memory", "status"]);
    assert!(t.contains("freshness:  up to date with the disk"), "{t}");
    assert!(t.contains("skipped:    2 file(s)"), "{t}");
    // ...a search says `fresh` (it used to re-read them before every answer)...
    let (code, q) = json(ws, &["memory", "search", "--json", "quokka"]);
    assert_eq!(code, 0);
    assert_eq!(q["sync"]["status"], "fresh", "{q}");
    // ...and a second index run reads nothing, still reporting what it left out.
    let (_, r) = json(ws, &["memory", "index", "--json"]);
    assert_eq!(r["files_changed"], 0, "{r}");
    assert_eq!(r["files_skipped"], 2, "{r}");
    assert_eq!(issue(&r, "memory/big.md").unwrap()["reason"], "too_big");

    // A skipped file that changes is re-examined: the binary file becomes text
    // and a search syncs it in and finds it.
    std::fs::write(ws.join("memory/blob.md"), "Now a note about numbats.\n").unwrap();
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["changed_on_disk"]["new"], 1, "{s}");
    let (code, q) = json(ws, &["memory", "search", "--json", "numbats"]);
    assert_eq!(code, 0, "{q}");
    assert_eq!(q["sync"]["status"], "synced", "{q}");
    assert_eq!(q["results"][0]["path"], "memory/blob.md");
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["skipped_files"], 1, "{s}");

    // An indexed file that grows past the limit leaves the index (its old text
    // no longer says what the file holds) and is remembered as skipped.
    std::fs::write(ws.join("MEMORY.md"), "quokka ".repeat(400)).unwrap();
    let (_, r) = json(ws, &["memory", "index", "--json"]);
    assert_eq!(issue(&r, "MEMORY.md").unwrap()["reason"], "too_big", "{r}");
    let (code, _) = json(ws, &["memory", "search", "--json", "quokka"]);
    assert_eq!(code, 1, "the oversized file's old chunks are gone");
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["skipped_files"], 2, "{s}");
    assert_eq!(s["changed_on_disk"]["modified"], 0, "{s}");

    // A skipped file deleted from disk is forgotten.
    std::fs::remove_file(ws.join("memory/big.md")).unwrap();
    json(ws, &["memory", "index", "--json"]);
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["skipped_files"], 1, "{s}");

    // Raising the limit re-examines a file skipped as too big.
    std::fs::write(
        ws.join("home/config.json"),
        r#"{"memory": {"max_file_bytes": 100000}}"#,
    )
    .unwrap();
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["changed_on_disk"]["new"], 1, "{s}");
    let (_, r) = json(ws, &["memory", "index", "--json"]);
    assert_eq!(r["files_changed"], 1, "{r}");
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["skipped_files"], 0, "{s}");
    let (code, _) = json(ws, &["memory", "search", "--json", "quokka"]);
    assert_eq!(code, 0);
}

#[test]
fn a_file_name_that_is_not_utf8_is_reported_not_dropped() {
    let tmp = support::workspace(&[("MEMORY.md", "# Memory\nplain note\n")]);
    let ws = tmp.path();
    std::fs::create_dir(ws.join("memory")).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.md");
    std::fs::write(ws.join("memory").join(name), "Latin-1 named note.\n").unwrap();
    // Not Markdown: not ours to report.
    std::fs::write(
        ws.join("memory")
            .join(std::ffi::OsStr::from_bytes(b"x\xff.png")),
        "x",
    )
    .unwrap();

    let (_, r) = json(ws, &["memory", "index", "--json"]);
    let issues = r["issues"].as_array().unwrap();
    assert_eq!(issues.len(), 1, "{r}");
    let i = &issues[0];
    assert_eq!(i["path"], "memory/caf\u{FFFD}.md", "{r}");
    assert_eq!(i["reason"], "non_utf8_name");
    assert_eq!(i["skipped"], true);
    assert_eq!(i["source"], "memory");
    assert_eq!(r["files_skipped"], 1);
    assert_eq!(r["files_scanned"], 1, "only MEMORY.md can be indexed");

    // The text output says it too (on stderr, like every issue).
    let out = claw(ws).args(["memory", "index"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "skipped: memory:memory/caf\u{FFFD}.md: skipped: the file name is not valid UTF-8"
        ),
        "{err}"
    );
    // It cannot be indexed, and it does not make the index look behind.
    let (_, s) = json(ws, &["memory", "status", "--json"]);
    assert_eq!(s["changed_on_disk"]["new"], 0, "{s}");
}
