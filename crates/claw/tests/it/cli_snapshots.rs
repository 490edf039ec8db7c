//! Insta snapshots of the CLI's text and `--json` outputs (`memory index`, `status`,
//! `search`, `get`) on a deterministic keyword-only fixture with a pinned `CLAW_NOW`.
//! The JSON snapshots are the raw stdout bytes (only volatile values — temp paths,
//! durations, timestamps, sizes — are replaced by filters), so they prove the
//! `--json` contracts stay byte-for-byte identical through refactors.

use claw_testkit as support;

use std::path::Path;

const NOTES: &[(&str, &str)] = &[
    (
        "MEMORY.md",
        "# About me\n\nI drink my coffee black, no sugar.\nMy editor is Helix.\n",
    ),
    (
        "memory/2026-11-02.md",
        "# Standup\n\nThe billing migration is tracked as ticket ZX-4471.\nDeploy is planned for Friday.\nThe billing dashboard moved to Grafana.\n",
    ),
    (
        "memory/travel.md",
        "# Travel\n\nWe ate ramen near Tokyo Tower.\nThe billing for the hotel was in yen.\n",
    ),
];

/// Run `claw` keyword-only in `ws` and render exit code, stdout and stderr as one
/// snapshot string.
fn run(ws: &Path, args: &[&str]) -> String {
    let o: std::process::Output = support::claw_keyword_only(ws).args(args).output().unwrap();
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Filters for the values that change from run to run; never the output itself.
fn settings(ws: &Path) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    s.set_prepend_module_to_snapshot(false);
    s.set_snapshot_path("snapshots");
    // The state dir first: it lies under `[WS]/home` and its name ends in a hash
    // of the (temporary) workspace path.
    let state = claw_testkit::state_dir(ws).display().to_string();
    s.add_filter(&regex::escape(&state), "[STATE]");
    let ws = ws.display().to_string();
    s.add_filter(&regex::escape(&ws), "[WS]");
    s.add_filter(r#""elapsed_ms":\d+"#, r#""elapsed_ms":[MS]"#);
    s.add_filter(r#""checked_ms":\d+"#, r#""checked_ms":[MS]"#);
    // A version string bumped by design when the chunker or redaction rules change.
    s.add_filter(
        r#""chunker_version":"[^"]*""#,
        r#""chunker_version":"[VERSION]""#,
    );
    s.add_filter(r#""db_bytes":\d+"#, r#""db_bytes":[BYTES]"#);
    s.add_filter(r#""last_index_at":\d+"#, r#""last_index_at":[UNIX]"#);
    s.add_filter(r"elapsed: \d+\.\d+s", "elapsed: [SECS]s");
    s.add_filter(r"\(\d+(\.\d)? (B|KiB|MiB)\)", "([SIZE])");
    s.add_filter(
        r"last index: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
        "last index: [TIME]",
    );
    s
}

fn fixture() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    support::write_tree(ws.path(), NOTES);
    ws
}

#[test]
fn index_text_and_json() {
    let ws = fixture();
    let w = ws.path();
    settings(w).bind(|| {
        insta::assert_snapshot!("index_text", run(w, &["memory", "index"]));
        std::fs::write(w.join("memory/new.md"), "# New\n\nA new note.\n").unwrap();
        insta::assert_snapshot!("index_json", run(w, &["memory", "index", "--json"]));
    });
}

#[test]
fn status_text_and_json() {
    let ws = fixture();
    let w = ws.path();
    run(w, &["memory", "index"]);
    settings(w).bind(|| {
        insta::assert_snapshot!("status_text", run(w, &["memory", "status"]));
        insta::assert_snapshot!("status_json", run(w, &["memory", "status", "--json"]));
    });
}

#[test]
fn search_text_and_json() {
    let ws = fixture();
    let w = ws.path();
    run(w, &["memory", "index"]);
    settings(w).bind(|| {
        insta::assert_snapshot!("search_text", run(w, &["memory", "search", "billing"]));
        insta::assert_snapshot!(
            "search_json",
            run(w, &["memory", "search", "billing", "--json"])
        );
        insta::assert_snapshot!(
            "search_explain_json",
            run(w, &["memory", "search", "ZX-4471", "--json", "--explain"])
        );
        insta::assert_snapshot!(
            "search_none_text",
            run(w, &["memory", "search", "zeppelin"])
        );
        insta::assert_snapshot!(
            "search_none_json",
            run(w, &["memory", "search", "zeppelin", "--json"])
        );
        // A changed file is synced inline before answering.
        std::fs::write(
            w.join("memory/travel.md"),
            "# Travel\n\nThe billing for the ryokan was in yen.\n",
        )
        .unwrap();
        insta::assert_snapshot!(
            "search_synced_json",
            run(w, &["memory", "search", "ryokan", "--json"])
        );
    });
}

#[test]
fn get_text_and_json() {
    let ws = fixture();
    let w = ws.path();
    run(w, &["memory", "index"]);
    settings(w).bind(|| {
        insta::assert_snapshot!(
            "get_text",
            run(w, &["memory", "get", "memory/2026-11-02.md"])
        );
        insta::assert_snapshot!(
            "get_json",
            run(
                w,
                &[
                    "memory",
                    "get",
                    "memory/2026-11-02.md",
                    "--from",
                    "3",
                    "--lines",
                    "2",
                    "--json"
                ]
            )
        );
        insta::assert_snapshot!(
            "get_text_paged",
            run(
                w,
                &["memory", "get", "MEMORY.md", "--from", "2", "--lines", "2"]
            )
        );
    });
}

#[test]
fn errors_text_and_json() {
    let ws = fixture();
    let w = ws.path();
    run(w, &["memory", "index"]);
    settings(w).bind(|| {
        insta::assert_snapshot!(
            "error_unknown_source_text",
            run(w, &["memory", "search", "billing", "--source", "nope"])
        );
        insta::assert_snapshot!(
            "error_refused_path_json",
            run(w, &["memory", "get", "../outside.md", "--json"])
        );
        insta::assert_snapshot!(
            "error_not_indexed_json",
            run(w, &["memory", "get", "memory/missing.md", "--json"])
        );
    });
}

#[test]
fn doctor_text_and_json() {
    let ws = fixture();
    let w = ws.path();
    run(w, &["memory", "index"]);
    let mut s = settings(w);
    s.add_filter(r"\d+ files, \d+ chunks", "[N] files, [N] chunks");
    // What the exec sandbox can use depends on the machine's kernel (probed live).
    s.add_filter(r"exec sandboxed \([^)]*\)", "exec sandboxed ([PROBE])");
    s.add_filter(r#""exec_sandbox":\{[^}]*\}"#, r#""exec_sandbox":{[PROBE]}"#);
    // Whose the state directory is depends on who runs the tests.
    s.add_filter(r#""(owner|user)_uid":\d+"#, r#""${1}_uid":[UID]"#);
    s.bind(|| {
        insta::assert_snapshot!("doctor_text", run(w, &["doctor"]));
        insta::assert_snapshot!("doctor_json", run(w, &["doctor", "--json"]));
    });
}
