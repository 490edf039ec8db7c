//! `embedding.precision` (issue 30): the index records which graph made its
//! vectors (`:int8` in the model id), so switching fp32 → int8 is named by
//! `claw memory status` (`model_change` in `--json`, an `embedding:` line) and
//! the next `claw memory index` re-embeds every chunk through the rebuild; an
//! int8 precision without `model_int8.onnx` runs fp32 and says so
//! (`precision_fallback`) without rebuilding anything.

use claw_testkit as support;
use std::path::Path;

fn write_notes(ws: &Path) {
    support::write_tree(
        ws,
        &[
            (
                "MEMORY.md",
                "# Memory\n\nThe billing database is PostgreSQL.\n",
            ),
            (
                "memory/dentist.md",
                "# Dentist\n\nThe crown on the upper molar is fitted on Tuesday.\n",
            ),
        ],
    );
}

fn claw_with(ws: &Path, cfg: &Path, model_dir: Option<&Path>) -> std::process::Command {
    let mut c = support::claw(ws);
    c.env("CLAW_CONFIG", cfg);
    if let Some(d) = model_dir {
        c.env("CLAW_EMBED_MODEL_DIR", d);
    }
    c
}

#[test]
fn changing_the_precision_is_named_then_re_embeds() {
    let (model_dir, _) = support::model_paths();
    assert!(
        model_dir.join("model_int8.onnx").is_file(),
        "this test needs model_int8.onnx: run `bash scripts/install-model.sh --int8-only {}`",
        model_dir.display()
    );
    let ws = tempfile::tempdir().unwrap();
    write_notes(ws.path());
    let (fp32, int8) = (
        support::precision_config(ws.path(), "fp32"),
        support::precision_config(ws.path(), "int8"),
    );

    let r =
        support::run_json(claw_with(ws.path(), &fp32, None).args(["memory", "index", "--json"]));
    let fp32_model = r["model"].as_str().unwrap().to_string();
    assert!(!fp32_model.contains(":int8"), "{r}");
    let st =
        support::run_json(claw_with(ws.path(), &fp32, None).args(["memory", "status", "--json"]));
    assert!(st["model_change"].is_null(), "{st}");
    assert!(st["precision_fallback"].is_null(), "{st}");

    // Configured int8, index still fp32: status names the pending re-embedding.
    let st =
        support::run_json(claw_with(ws.path(), &int8, None).args(["memory", "status", "--json"]));
    assert_eq!(st["model_change"]["index"], fp32_model.as_str(), "{st}");
    let configured = st["model_change"]["configured"].as_str().unwrap();
    assert!(configured.ends_with(":int8"), "{st}");
    let out = claw_with(ws.path(), &int8, None)
        .args(["memory", "status"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("re-embeds every chunk") && text.contains(configured),
        "{text}"
    );

    // The next index rebuilds with the int8 graph; then nothing is pending.
    let r =
        support::run_json(claw_with(ws.path(), &int8, None).args(["memory", "index", "--json"]));
    assert!(
        r["rebuilt"]
            .as_str()
            .unwrap_or("")
            .contains("model changed"),
        "{r}"
    );
    let int8_model = r["model"].as_str().unwrap();
    assert!(int8_model.starts_with(&format!("{configured}@")), "{r}");
    let st =
        support::run_json(claw_with(ws.path(), &int8, None).args(["memory", "status", "--json"]));
    assert!(st["model_change"].is_null(), "{st}");
    assert_eq!(st["model"], int8_model, "{st}");
    assert_eq!(st["vectors"], st["chunks"], "{st}");
    let json = support::run_json(claw_with(ws.path(), &int8, None).args([
        "memory",
        "search",
        "billing database",
        "--json",
    ]));
    assert!(json["fallback"].is_null(), "vector search on: {json}");
    // No precision configured is int8 (the default): nothing to re-embed.
    let st = support::run_json(support::claw(ws.path()).args(["memory", "status", "--json"]));
    assert!(st["model_change"].is_null(), "{st}");
    assert_eq!(st["model"], int8_model, "{st}");
}

#[test]
fn int8_without_its_file_runs_fp32_and_says_so() {
    let (model_dir, _) = support::model_paths();
    let ws = tempfile::tempdir().unwrap();
    write_notes(ws.path());
    // The model as installed before int8 existed: no model_int8.onnx.
    let old = ws
        .path()
        .join("home/models")
        .join(model_dir.file_name().unwrap());
    std::fs::create_dir_all(&old).unwrap();
    for f in [
        "model.onnx",
        "tokenizer.json",
        "config.json",
        "special_tokens_map.json",
        "tokenizer_config.json",
    ] {
        std::os::unix::fs::symlink(model_dir.join(f), old.join(f)).unwrap();
    }
    let (fp32, int8) = (
        support::precision_config(ws.path(), "fp32"),
        support::precision_config(ws.path(), "int8"),
    );
    let r = support::run_json(
        claw_with(ws.path(), &fp32, Some(&old)).args(["memory", "index", "--json"]),
    );
    let fp32_model = r["model"].as_str().unwrap().to_string();

    let st = support::run_json(
        claw_with(ws.path(), &int8, Some(&old)).args(["memory", "status", "--json"]),
    );
    assert_eq!(st["precision_fallback"]["configured"], "int8", "{st}");
    assert_eq!(st["precision_fallback"]["used"], "fp32", "{st}");
    assert!(st["model_change"].is_null(), "fp32 runs: no rebuild: {st}");
    let out = claw_with(ws.path(), &int8, Some(&old))
        .args(["memory", "status"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("precision:") && text.contains("model_int8.onnx"),
        "{text}"
    );
    let r = support::run_json(
        claw_with(ws.path(), &int8, Some(&old)).args(["memory", "index", "--json"]),
    );
    assert!(r["rebuilt"].is_null(), "{r}");
    assert_eq!(r["model"], fp32_model.as_str(), "{r}");
    // Upgrading with no precision configured (int8 is the default): the same
    // fallback, and the index made before stays as it is.
    let mut cmd = support::claw(ws.path());
    cmd.env("CLAW_EMBED_MODEL_DIR", &old);
    let r = support::run_json(cmd.args(["memory", "index", "--json"]));
    assert!(r["rebuilt"].is_null(), "{r}");
    assert_eq!(r["model"], fp32_model.as_str(), "{r}");
    let mut cmd = support::claw(ws.path());
    cmd.env("CLAW_EMBED_MODEL_DIR", &old);
    let st = support::run_json(cmd.args(["memory", "status", "--json"]));
    assert_eq!(st["precision_fallback"]["configured"], "int8", "{st}");
    // The doctor warns too, with the way out.
    let model_section = |cfg: &Path| {
        let out = claw_with(ws.path(), cfg, Some(&old))
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        d["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "model" || s["name"] == "model")
            .cloned()
            .unwrap_or_else(|| panic!("no model section: {d}"))
    };
    let m = model_section(&int8);
    assert_eq!(m["status"], "warn", "{m}");
    assert_eq!(m["details"]["precision_fallback"]["used"], "fp32", "{m}");
    assert!(
        m["hint"].as_str().unwrap_or("").contains("install-model"),
        "{m}"
    );
    // Control: asked for fp32, the same directory is fine.
    let m = model_section(&fp32);
    assert_eq!(m["status"], "ok", "{m}");
    assert!(m["details"]["precision_fallback"].is_null(), "{m}");
}
