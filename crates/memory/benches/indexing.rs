//! Indexing benchmark (harness = false): full index keyword-only and with the
//! local model, no-op re-index, one-file change, peak RSS, on the public note
//! sets in `../shared/data` (notes-garden, notes-twir). Prints a Markdown table.
//!
//! Each scenario group runs in a child process (this binary re-invoked with
//! `--child`) so its peak RSS (getrusage `ru_maxrss`) is its own.
//! Env: `CLAW_EMBED_MODEL_DIR` + `ORT_DYLIB_PATH` for the model runs (they are
//! reported as skipped without them); `CLAW_BENCH_QUICK=1` indexes a sample
//! (every 8th file) in the model runs; `CLAW_BENCH_SETS=garden,twir` picks sets.

#![allow(clippy::unwrap_used)]

use claw_memory::config::{ENV_EMBED_MODEL_DIR, ENV_ORT_DYLIB_PATH, EmbedProvider, MemoryConfig};
use claw_memory::embed::{self, Embedder, Loaded};
use claw_memory::indexer::{self, IndexOptions, IndexReport};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SOURCE: &str = "notes";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let group = &args[i + 1];
        let dir = PathBuf::from(&args[i + 2]);
        let out = match group.as_str() {
            "keyword" => keyword_group(&dir),
            "model" => model_group(&dir),
            other => panic!("unknown group {other}"),
        };
        println!("RESULT {out}");
        return;
    }
    parent();
}

fn quick() -> bool {
    std::env::var("CLAW_BENCH_QUICK").is_ok_and(|v| v == "1")
}

fn parent() {
    let sets = std::env::var("CLAW_BENCH_SETS").unwrap_or_else(|_| "garden,twir".into());
    let tmp = tempfile::tempdir().expect("temp dir");
    let mut rows = Vec::new();
    for set in sets.split(',').filter(|s| !s.is_empty()) {
        let dest = tmp.path().join(set);
        claw_testkit::extract_shared(&format!("notes-{set}.tar.gz"), &dest);
        for group in ["keyword", "model"] {
            eprintln!("indexing bench: {set} / {group} …");
            let out = Command::new(std::env::current_exe().unwrap())
                .args(["--child", group])
                .arg(&dest)
                .output()
                .expect("run child");
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout.lines().find_map(|l| l.strip_prefix("RESULT "));
            match line {
                Some(l) if out.status.success() => rows.push((
                    set.to_string(),
                    group,
                    serde_json::from_str::<Value>(l).unwrap(),
                )),
                _ => panic!(
                    "child {set}/{group} failed: {}\n{}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }
    }
    print_tables(&rows);
}

fn print_tables(rows: &[(String, &str, Value)]) {
    println!(
        "| set | files | chunks | keyword-only full index | no-op re-index | one-file change (full pass) | one-file change (targeted) | peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (set, group, v) in rows.iter().filter(|r| r.1 == "keyword") {
        let _ = group;
        println!(
            "| {set} | {} | {} | {:.3} s | {:.3} s | {:.1} ms | {:.1} ms | {:.0} MiB |",
            v["files"],
            v["chunks"],
            f(v, "full_s"),
            f(v, "noop_s"),
            f(v, "one_file_ms"),
            f(v, "one_file_targeted_ms"),
            v["rss_mib"].as_f64().unwrap_or(0.0)
        );
    }
    println!();
    println!(
        "| set | files indexed | chunks | full index with model | embeddings/s (indexer) | embeddings/s (bare model, same texts) | indexer / bare | no-op re-index | one-file change (embeddings) | peak RSS |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (set, _, v) in rows.iter().filter(|r| r.1 == "model") {
        if let Some(reason) = v.get("skipped") {
            println!(
                "| {set} | skipped: {} | | | | | | | | |",
                reason.as_str().unwrap_or("")
            );
            continue;
        }
        println!(
            "| {set}{} | {} | {} | {:.1} s | {:.1} | {:.1} | {:.0} % | {:.3} s | {:.1} ms ({}) | {:.0} MiB |",
            if v["sampled"].as_bool() == Some(true) {
                " (sample)"
            } else {
                ""
            },
            v["files"],
            v["chunks"],
            f(v, "full_s"),
            f(v, "index_eps"),
            f(v, "bare_eps"),
            100.0 * f(v, "index_eps") / f(v, "bare_eps"),
            f(v, "noop_s"),
            f(v, "one_file_ms"),
            v["one_file_embeddings"],
            v["rss_mib"].as_f64().unwrap_or(0.0)
        );
    }
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

#[allow(unsafe_code)] // getrusage(2)
fn peak_rss_mib() -> f64 {
    // SAFETY: getrusage only writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss as f64 / 1024.0
}

struct Env {
    _tmp: tempfile::TempDir,
    settings: MemoryConfig,
    store: Store,
    root: PathBuf,
}

/// A fresh workspace with `root` registered as a source.
fn setup(root: &Path, embed: EmbedProvider) -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let settings = MemoryConfig::for_workspace(tmp.path().join("ws"), embed);
    std::fs::create_dir_all(settings.state_dir()).unwrap();
    let store = Store::open(&settings.db_path()).unwrap();
    store.add_source(SOURCE, root).unwrap();
    Env {
        _tmp: tmp,
        settings,
        store,
        root: root.to_path_buf(),
    }
}

fn index(env: &mut Env, e: Option<&dyn Embedder>) -> (IndexReport, Duration) {
    let lock =
        WriterLock::acquire(&env.settings.state_dir(), "bench", Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    let r = indexer::run(
        &mut env.store,
        &env.settings,
        e,
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .unwrap();
    let d = t.elapsed();
    assert!(
        r.issues.iter().all(|i| !i.skipped),
        "skipped files: {:?}",
        &r.issues[..r.issues.len().min(3)]
    );
    (r, d)
}

/// The file edited by the one-file scenarios: the median-size Markdown file.
fn pick_file(root: &Path) -> (String, PathBuf) {
    let mut files: Vec<(u64, PathBuf)> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "md"))
        .filter(|e| {
            let rel = e.path().strip_prefix(root).unwrap();
            !rel.components()
                .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
        })
        .map(|e| (e.metadata().unwrap().len(), e.path().to_path_buf()))
        .collect();
    files.sort();
    let p = files[files.len() / 2].1.clone();
    let rel = p
        .strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/");
    (rel, p)
}

fn edit(path: &Path, n: usize) {
    let mut s = std::fs::read_to_string(path).unwrap();
    s.push_str(&format!(
        "\n\nA new paragraph added by the benchmark, edit {n}, about sqlite and retrieval.\n"
    ));
    std::fs::write(path, s).unwrap();
}

fn keyword_group(root: &Path) -> Value {
    let mut env = setup(root, EmbedProvider::None);
    let (r, full) = index(&mut env, None);
    let (_, noop) = index(&mut env, None);
    let (rel, path) = pick_file(&env.root);
    edit(&path, 1);
    let (r1, one) = index(&mut env, None);
    assert_eq!(r1.files_changed, 1, "one file changed");
    edit(&path, 2);
    let lock =
        WriterLock::acquire(&env.settings.state_dir(), "bench", Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    indexer::run_paths(
        &mut env.store,
        &env.settings,
        None,
        &[(SOURCE.to_string(), rel)],
        &lock,
        &|_| {},
    )
    .unwrap();
    let targeted = t.elapsed();
    json!({
        "files": r.files_scanned,
        "chunks": env.store.stats().unwrap().chunks,
        "full_s": full.as_secs_f64(),
        "noop_s": noop.as_secs_f64(),
        "one_file_ms": one.as_secs_f64() * 1000.0,
        "one_file_targeted_ms": targeted.as_secs_f64() * 1000.0,
        "rss_mib": peak_rss_mib(),
    })
}

fn model_group(root: &Path) -> Value {
    let (Some(dir), Some(ort)) = (
        std::env::var_os(ENV_EMBED_MODEL_DIR),
        std::env::var_os(ENV_ORT_DYLIB_PATH),
    ) else {
        return json!({"skipped": format!("{ENV_EMBED_MODEL_DIR} / {ENV_ORT_DYLIB_PATH} not set")});
    };
    let provider = EmbedProvider::Local {
        model_dir: Some(dir.into()),
        ort_dylib_path: Some(ort.into()),
        runtime: Default::default(),
    };
    // In quick mode, index a sample: every 8th Markdown file, copied with its path.
    let sample_tmp = tempfile::tempdir().unwrap();
    let root = if quick() {
        claw_testkit::sample_markdown(root, sample_tmp.path(), 8);
        sample_tmp.path().to_path_buf()
    } else {
        root.to_path_buf()
    };
    let mut env = setup(&root, provider.clone());
    let loaded = embed::load(&provider, env.settings.memory.embed_batch_size);
    let Loaded::Ready(e) = loaded else {
        return json!({"skipped": "the local model failed to load"});
    };
    let (r, full) = index(&mut env, Some(e.as_ref()));
    let index_eps = r.embeddings_computed as f64 / full.as_secs_f64();

    // The bare model on the same chunk texts, same batch size, same process.
    let texts = claw_testkit::chunk_texts(&env.store);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t = Instant::now();
    let vs = e.embed(&refs).unwrap();
    let bare = t.elapsed();
    assert_eq!(vs.len(), refs.len());
    let bare_eps = refs.len() as f64 / bare.as_secs_f64();

    let (_, noop) = index(&mut env, Some(e.as_ref()));
    let (_, path) = pick_file(&env.root);
    edit(&path, 1);
    let (r1, one) = index(&mut env, Some(e.as_ref()));
    json!({
        "sampled": quick(),
        "files": r.files_scanned,
        "chunks": texts.len(),
        "embeddings": r.embeddings_computed,
        "full_s": full.as_secs_f64(),
        "index_eps": index_eps,
        "bare_eps": bare_eps,
        "noop_s": noop.as_secs_f64(),
        "one_file_ms": one.as_secs_f64() * 1000.0,
        "one_file_embeddings": r1.embeddings_computed,
        "rss_mib": peak_rss_mib(),
    })
}
