//! Gateway figures for BENCHMARKS.md, with the debug or release `claw` binary
//! beside this example (or `CLAW_TEST_BIN`):
//!
//! - `gateway_bench load [SESSIONS] [MESSAGES] [LLM_MS] [CAP]` — concurrent sessions
//!   through a fresh gateway to an echoing LLM server (`claw_testkit::echo_llm`);
//!   prints throughput, latency and the gateway's overhead (client time minus the
//!   LLM server's own) p50/p95. The same code as the `gateway::load_…` test.
//! - `gateway_bench search WORKSPACE [ROUNDS]` — `claw memory search QUERY
//!   --json` (hybrid) as a whole CLI call, through a gateway started on WORKSPACE
//!   (an index built with the model), vs `--local`; queries from
//!   `fixtures/garden-queries/queries.tsv`. Needs `CLAW_EMBED_MODEL_DIR` and
//!   `ORT_DYLIB_PATH`.

#![allow(clippy::unwrap_used, dead_code, unused_imports, unsafe_code)]

#[path = "../tests/it/gateway.rs"]
mod gateway;

use std::path::PathBuf;
use std::time::Instant;

fn arg<T: std::str::FromStr>(i: usize, default: T) -> T {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn queries() -> Vec<String> {
    let text = std::fs::read_to_string(
        claw_testkit::repo_root().join("fixtures/garden-queries/queries.tsv"),
    )
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split('\t').nth(1).map(str::to_string))
        .collect()
}

fn time_calls(ws: &std::path::Path, qs: &[String], rounds: usize, local: bool) -> Vec<f64> {
    let mut ms = Vec::new();
    for _ in 0..rounds {
        for q in qs {
            let mut c = gateway::claw_env(ws, None, true);
            c.args(["memory", "search", q, "--json"]);
            if local {
                c.arg("--local");
            }
            let t = Instant::now();
            let out = c.output().unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert_ne!(out.status.code(), Some(2), "{q}: {out:?}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["mode"], "hybrid");
            assert!(v["fallback"].is_null(), "{q}: the model must be used: {v}");
        }
    }
    ms.sort_by(f64::total_cmp);
    ms
}

fn main() {
    if std::env::var_os("CLAW_TEST_BIN").is_none() {
        let exe = std::env::current_exe().unwrap();
        let bin = exe.parent().unwrap().parent().unwrap().join("claw");
        // SAFETY: single-threaded at this point.
        unsafe { std::env::set_var("CLAW_TEST_BIN", bin) };
    }
    match std::env::args().nth(1).as_deref() {
        Some("load") => {
            let (s, m, llm, cap) = (arg(2, 50), arg(3, 5), arg(4, 20u64), arg(5, 64));
            let f = gateway::load_run(s, m, llm, cap);
            println!("{}", f.line(s, m, llm));
        }
        Some("search") => {
            let ws = PathBuf::from(std::env::args().nth(2).expect("WORKSPACE"));
            let rounds = arg(3, 4);
            let qs = queries();
            let gw = gateway::Gateway::start_with(&ws, None, true);
            // Warm-up: the first call may sync changed files.
            time_calls(&ws, &qs[..1], 1, false);
            let via = time_calls(&ws, &qs, rounds, false);
            drop(gw);
            let local = time_calls(&ws, &qs[..qs.len().min(10)], 1, true);
            let p = gateway::percentile;
            println!(
                "claw memory search --json (hybrid), whole CLI call, {} queries: through the gateway p50 {:.1} ms p95 {:.1} ms (n={}); --local p50 {:.1} ms p95 {:.1} ms (n={})",
                qs.len(),
                p(&via, 0.5),
                p(&via, 0.95),
                via.len(),
                p(&local, 0.5),
                p(&local, 0.95),
                local.len()
            );
        }
        _ => eprintln!(
            "usage: gateway_bench load [SESSIONS] [MESSAGES] [LLM_MS] [CAP] | search WORKSPACE [ROUNDS]"
        ),
    }
}
