//! The warm model (harness = false): how the local model's ONNX Runtime settings
//! ([`LocalRuntime`]: intra-op threads, CPU arena, spinning) change what a
//! long-running process pays. Prints Markdown tables:
//!
//! 1. memory — a process indexes TWIR (long chunks) with the model, then stays up and
//!    embeds queries: peak RSS (`VmHWM`), RSS right after indexing and steady RSS
//!    after the queries (`VmRSS`), from `/proc/self/status`;
//! 2. contention — the garden indexed with the model quietly, then again with a CPU
//!    hog (one busy loop per CPU) running beside it;
//! 3. passages/s of every variant on both sets (the indexer's embeddings/s): the
//!    runtime settings, the int8 model (`int8`, `int8-t1`; `model_int8.onnx` must be
//!    installed) and batches of several texts sorted by length (`b8`, `b32`).
//!
//! Every scenario runs in its own child process (this binary re-invoked with
//! `--child`), variants back to back so they see the same machine load; the load
//! average (`/proc/loadavg`, 1 min) at the start of each run is printed beside it.
//! Env: `CLAW_EMBED_MODEL_DIR` + `ORT_DYLIB_PATH` (required); `CLAW_BENCH_FULL=1`
//! indexes the whole sets (default: every 8th file, like `CLAW_BENCH_QUICK`;
//! `CLAW_BENCH_STEP=N` samples every Nth);
//! `CLAW_BENCH_VARIANTS=before,after,…` picks variants (names below);
//! `CLAW_BENCH_SKIP=hog` skips the contention table.

#![allow(clippy::unwrap_used)]

use claw_memory::config::{
    ENV_EMBED_MODEL_DIR, ENV_ORT_DYLIB_PATH, EmbedProvider, LocalRuntime, MemoryConfig, Precision,
    available_cpus,
};
use claw_memory::embed::{Embedder, LocalEmbedder};
use claw_memory::indexer::{self, IndexOptions};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SOURCE: &str = "notes";

/// The variants: name, what it is, the runtime, the embedding batch size.
fn variants() -> Vec<(&'static str, &'static str, LocalRuntime, usize)> {
    let rt = |threads, cpu_arena, spinning| LocalRuntime {
        threads: Some(threads),
        cpu_arena,
        spinning,
        precision: Default::default(),
    };
    let cpus = available_cpus();
    let int8 = LocalRuntime {
        precision: Precision::Int8,
        ..LocalRuntime::default()
    };
    vec![
        (
            "before",
            "ORT defaults (all CPUs, arena, spinning)",
            LocalRuntime::ort_defaults(),
            1,
        ),
        ("after", "claw default", LocalRuntime::default(), 1),
        (
            "t1",
            "1 thread, no arena, no spinning",
            rt(1, false, false),
            1,
        ),
        (
            "arena-only-off",
            "all CPUs, no arena, spinning",
            rt(cpus, false, true),
            1,
        ),
        (
            "spin-only-off",
            "all CPUs, arena, no spinning",
            rt(cpus, true, false),
            1,
        ),
        (
            "b8",
            "claw default, batches of 8 texts sorted by length",
            LocalRuntime::default(),
            8,
        ),
        (
            "b32",
            "claw default, batches of 32 texts sorted by length",
            LocalRuntime::default(),
            32,
        ),
        ("int8", "claw default, int8 model", int8, 1),
        (
            "int8-t1",
            "int8 model, 1 thread",
            LocalRuntime {
                threads: Some(1),
                ..int8
            },
            1,
        ),
    ]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--hog") {
        hog();
    }
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let scenario = args[i + 1].as_str();
        let variant = args[i + 2].as_str();
        let dir = PathBuf::from(&args[i + 3]);
        let (runtime, batch) = variants()
            .into_iter()
            .find(|v| v.0 == variant)
            .map(|v| (v.2, v.3))
            .unwrap_or_else(|| panic!("unknown variant {variant}"));
        println!("RESULT {}", child(scenario, &runtime, batch, &dir));
        return;
    }
    parent();
}

/// A busy loop until killed: the CPU hog.
fn hog() -> ! {
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn full() -> bool {
    std::env::var("CLAW_BENCH_FULL").is_ok_and(|v| v == "1")
}

/// Sample every STEP-th Markdown file (`CLAW_BENCH_STEP`, default 8).
fn step() -> usize {
    claw_testkit::env_number("CLAW_BENCH_STEP")
        .unwrap_or(8)
        .max(1)
}

fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// `VmHWM` and `VmRSS` from `/proc/self/status`, in MiB.
fn rss_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// Extract `notes-SET.tar.gz` into `tmp/SET`, or a sample of it (every
/// `CLAW_BENCH_STEP`-th Markdown file, paths kept) unless `CLAW_BENCH_FULL=1`.
fn extract(set: &str, tmp: &Path) -> PathBuf {
    let dest = tmp.join(format!("{set}-all"));
    claw_testkit::extract_shared(&format!("notes-{set}.tar.gz"), &dest);
    if full() {
        return dest;
    }
    let sample = tmp.join(set);
    claw_testkit::sample_markdown(&dest, &sample, step());
    sample
}

fn run_child(scenario: &str, variant: &str, dir: &Path) -> Value {
    eprintln!("warm_model bench: {scenario} / {variant} …");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--child", scenario, variant])
        .arg(dir)
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) {
        Some(l) if out.status.success() => serde_json::from_str(l).unwrap(),
        _ => panic!(
            "child {scenario}/{variant} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

struct Hog(Vec<Child>);

impl Hog {
    fn start() -> Hog {
        let exe = std::env::current_exe().unwrap();
        Hog((0..available_cpus())
            .map(|_| {
                Command::new(&exe)
                    .arg("--hog")
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("start hog")
            })
            .collect())
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn parent() {
    assert!(
        std::env::var_os(ENV_EMBED_MODEL_DIR).is_some()
            && std::env::var_os(ENV_ORT_DYLIB_PATH).is_some(),
        "the warm-model bench needs {ENV_EMBED_MODEL_DIR} and {ENV_ORT_DYLIB_PATH}"
    );
    let all = variants();
    let picked: Vec<_> = match std::env::var("CLAW_BENCH_VARIANTS") {
        Ok(list) => list
            .split(',')
            .map(|n| {
                *all.iter()
                    .find(|v| v.0 == n)
                    .unwrap_or_else(|| panic!("unknown variant {n}"))
            })
            .collect(),
        Err(_) => all.clone(),
    };
    let skip_hog = std::env::var("CLAW_BENCH_SKIP").is_ok_and(|v| v.contains("hog"));
    let tmp = tempfile::tempdir().expect("temp dir");
    let twir = extract("twir", tmp.path());
    let garden = extract("garden", tmp.path());
    let sample = if full() {
        "whole set".to_string()
    } else {
        format!("every {}th file", step())
    };

    let mut twir_rows = Vec::new();
    let mut garden_rows = Vec::new();
    for (name, ..) in &picked {
        twir_rows.push(run_child("twir", name, &twir));
    }
    for (name, ..) in &picked {
        garden_rows.push(run_child("garden", name, &garden));
    }
    let mut hog_rows = Vec::new();
    if !skip_hog {
        for (name, ..) in picked
            .iter()
            .filter(|v| ["before", "after", "t1"].contains(&v.0))
        {
            let _hog = Hog::start();
            std::thread::sleep(Duration::from_millis(500));
            hog_rows.push((*name, run_child("garden", name, &garden)));
        }
    }

    println!(
        "\nMemory: TWIR ({sample}) indexed with the model by one process, which then embeds 50 queries\n"
    );
    println!(
        "| variant | threads | arena | spinning | chunks | index s | peak RSS after indexing | peak RSS after re-embedding all chunks in one call | RSS after indexing | steady RSS after 50 queries | load avg |"
    );
    println!("|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for ((name, _, rt, _), v) in picked.iter().zip(&twir_rows) {
        println!(
            "| {name} | {} | {} | {} | {} | {:.1} | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.0} MiB | {:.1} |",
            rt.effective_threads(),
            on(rt.cpu_arena),
            on(rt.spinning),
            v["chunks"],
            f(v, "index_s"),
            f(v, "hwm_after_index_mib"),
            f(v, "hwm_after_one_call_mib"),
            f(v, "rss_after_index_mib"),
            f(v, "rss_steady_mib"),
            f(v, "load1"),
        );
    }
    println!("\nPassages/s (the indexer's embeddings/s), quiet machine apart from its load\n");
    println!(
        "| variant | what | precision | batch | garden passages/s | TWIR passages/s | load avg (garden, TWIR) |"
    );
    println!("|---|---|---|---:|---:|---:|---:|");
    for (((name, what, rt, batch), g), t) in picked.iter().zip(&garden_rows).zip(&twir_rows) {
        println!(
            "| {name} | {what} | {} | {batch} | {:.1} | {:.1} | {:.1}, {:.1} |",
            rt.precision.as_str(),
            f(g, "eps"),
            f(t, "eps"),
            f(g, "load1"),
            f(t, "load1"),
        );
    }
    if !hog_rows.is_empty() {
        println!(
            "\nContention: the garden ({sample}) indexed with the model, quiet vs with {} busy loops beside it\n",
            available_cpus()
        );
        println!(
            "| variant | chunks | quiet index s | with hog index s | slowdown | passages/s with hog | load avg (quiet, hog) |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (name, h) in &hog_rows {
            let q = picked
                .iter()
                .zip(&garden_rows)
                .find(|(v, _)| v.0 == *name)
                .map(|(_, g)| g)
                .unwrap();
            println!(
                "| {name} | {} | {:.1} | {:.1} | {:.1}× | {:.1} | {:.1}, {:.1} |",
                h["chunks"],
                f(q, "index_s"),
                f(h, "index_s"),
                f(h, "index_s") / f(q, "index_s"),
                f(h, "eps"),
                f(q, "load1"),
                f(h, "load1"),
            );
        }
    }
}

fn on(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}

/// One scenario in this process: index `root` with the model under `runtime`.
fn child(scenario: &str, runtime: &LocalRuntime, batch: usize, root: &Path) -> Value {
    let load = load1();
    let dir = PathBuf::from(std::env::var_os(ENV_EMBED_MODEL_DIR).unwrap());
    let ort = PathBuf::from(std::env::var_os(ENV_ORT_DYLIB_PATH).unwrap());
    let e = LocalEmbedder::load_with(Some(&dir), Some(&ort), batch, runtime).unwrap();
    assert!(
        e.precision_fallback().is_none(),
        "{} is missing from {}: install the model again (`claw memory install-model`)",
        runtime.precision.file_name(),
        dir.display()
    );
    let tmp = tempfile::tempdir().unwrap();
    let provider = EmbedProvider::Local {
        model_dir: Some(dir),
        ort_dylib_path: Some(ort),
        runtime: *runtime,
    };
    let settings = MemoryConfig::for_workspace(tmp.path().join("ws"), provider);
    std::fs::create_dir_all(settings.state_dir()).unwrap();
    let mut store = Store::open(&settings.db_path()).unwrap();
    store.add_source(SOURCE, root).unwrap();
    let lock = WriterLock::acquire(&settings.state_dir(), "bench", Duration::from_secs(5)).unwrap();
    let t = Instant::now();
    let r = indexer::run(
        &mut store,
        &settings,
        Some(&e as &dyn Embedder),
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .unwrap();
    let index_s = t.elapsed().as_secs_f64();
    assert!(r.embeddings_computed > 0, "nothing embedded");
    let (hwm_after_index, rss_after_index) = rss_mib();
    let mut out = json!({
        "scenario": scenario,
        "load1": load,
        "chunks": store.stats().unwrap().chunks,
        "embeddings": r.embeddings_computed,
        "index_s": index_s,
        "eps": r.embeddings_computed as f64 / index_s,
        "hwm_after_index_mib": hwm_after_index,
        "rss_after_index_mib": rss_after_index,
    });
    if scenario == "twir" {
        // Re-embed every chunk in one call (what the indexing bench's bare-model pass
        // did when it peaked at 1 GiB): the peak must stay bounded.
        let texts = claw_testkit::chunk_texts(&store);
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        assert_eq!(e.embed(&refs).unwrap().len(), refs.len());
        out["hwm_after_one_call_mib"] = json!(rss_mib().0);
        // The process stays up: queries keep the model warm; memory should settle.
        for i in 0..50 {
            let v = e
                .embed_query(&format!("what changed in rust async traits, week {i}"))
                .unwrap();
            assert_eq!(v.len(), e.dims());
        }
        std::thread::sleep(Duration::from_secs(1));
        out["rss_steady_mib"] = json!(rss_mib().1);
    }
    out
}
