//! Search latency over 100,000 chunks (synthetic clustered unit vectors of 384 dims
//! plus Zipfian text, written through `Store::write_file` into a workspace DB
//! cached at `target/claw-bench/ws-N/.claw/memory.sqlite`): hybrid / keyword-only /
//! vector-only p50 and p95, each stage on its own, the binary-prefilter recall
//! against exact KNN, how close the budgeted keyword ranking is to exact BM25, and
//! the wall time of a cold `target/release/claw memory search` process on the same
//! DB. Prints Markdown tables and the load average (the machine is shared: compare
//! rows with the exact-float baseline measured in the same run).
//!
//! `cargo build --release && cargo bench --bench search` (set
//! CLAW_EMBED_MODEL_DIR + ORT_DYLIB_PATH to include the real query embedding and
//! the cold process). CLAW_BENCH_CHUNKS overrides the size; CLAW_BENCH_MMAP=BYTES
//! sets `PRAGMA mmap_size` on the bench connection (an experiment, not the product).

#![allow(clippy::unwrap_used)]

use claw_memory::chunk::{ApproxCounter, TokenCounter};
use claw_memory::config::MemorySettings;
use claw_memory::embed::{EmbedError, Embedder, LocalEmbedder};
use claw_memory::search::engine::{
    self, BIT_MIN_CANDIDATES, BIT_OVERSAMPLE, KEYWORD_RANK_BUDGET, Mode, SearchRequest, VectorPlan,
    bit_knn, bit_knn_vec0, bit_scan, exact_knn, keyword_candidates, keyword_plan, vector_plan,
};
use claw_memory::search::query::{ParsedQuery, TermPlan};
use claw_memory::search::score::KeywordNorm;
use claw_memory::store::{NewChunk, Store, WriteMode};
use claw_testkit::Rng;
use std::path::PathBuf;
use std::time::Instant;

const DIMS: usize = 384;
const CLUSTERS: usize = 2000;
const PER_FILE: usize = 100;
const QUERIES: usize = 200;
/// The model id the DB is built with; replaced in `meta` by the real model's id
/// when it is loaded, so the cold CLI process runs its vector stage.
const MODEL: &str = "bench-synthetic";

/// A number in [-1, 1).
fn signed(rng: &mut Rng) -> f32 {
    rng.unit() * 2.0 - 1.0
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    claw_memory::embed::normalize(&mut v);
    v
}

fn near(rng: &mut Rng, c: &[f32], noise: f32) -> Vec<f32> {
    unit(c.iter().map(|x| x + noise * signed(rng)).collect())
}

/// A Zipf-ish vocabulary word.
fn word(rng: &mut Rng, vocab: &[String]) -> String {
    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let i = ((vocab.len() as f64).powf(u) - 1.0) as usize;
    vocab[i.min(vocab.len() - 1)].clone()
}

fn vocab(rng: &mut Rng) -> Vec<String> {
    let syll = [
        "ka", "to", "ri", "mon", "sel", "var", "qu", "ex", "lin", "dor", "pa", "ne", "sti", "ur",
        "gal", "fen",
    ];
    (0..8000)
        .map(|_| {
            let n = 2 + rng.below(3);
            (0..n).map(|_| syll[rng.below(syll.len())]).collect()
        })
        .collect()
}

/// Returns the store, the centroids and the vocabulary.
fn build(n: usize) -> (Store, Vec<Vec<f32>>, Vec<String>) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let centroids: Vec<Vec<f32>> = (0..CLUSTERS)
        .map(|_| unit((0..DIMS).map(|_| signed(&mut rng)).collect()))
        .collect();
    let vocab = vocab(&mut rng);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/claw-bench");
    let db = workspace(n).join(".claw/memory.sqlite");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    // The same data was cached at another path before the cold-process row existed.
    let old = dir.join(format!("search-{n}-v1.sqlite"));
    if !db.exists() && old.exists() {
        std::fs::rename(&old, &db).unwrap();
    }
    let ready = db.exists()
        && Store::open(&db)
            .ok()
            .and_then(|s| s.meta("bench_complete").ok().flatten())
            .is_some();
    if ready {
        eprintln!("reusing {}", db.display());
        return (Store::open(&db).unwrap(), centroids, vocab);
    }
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
    }
    let mut store = Store::open(&db).unwrap();
    store.reset_index(MODEL, DIMS, "bench").unwrap();
    let t = Instant::now();
    let mut made = 0;
    let mut f = 0;
    while made < n {
        let path = format!("notes/{:05}.md", f);
        let chunks: Vec<NewChunk> = (0..PER_FILE.min(n - made))
            .map(|i| {
                let c = &centroids[rng.below(CLUSTERS)];
                let words = 40 + rng.below(30);
                let text: Vec<String> = (0..words).map(|_| word(&mut rng, &vocab)).collect();
                NewChunk {
                    id: format!("{path}:{i}"),
                    start_line: i * 5 + 1,
                    end_line: i * 5 + 5,
                    hash: format!("{f}-{i}"),
                    text: text.join(" "),
                    context: String::new(),
                    note_time: None,
                    embedding: Some(near(&mut rng, c, 0.08)),
                }
            })
            .collect();
        made += chunks.len();
        let file = claw_testkit::memory_file(&format!("memory/{path}"), &f.to_string());
        store
            .write_file(&file, &chunks, WriteMode::Replace, MODEL)
            .unwrap();
        f += 1;
    }
    store.set_meta("bench_complete", "1").unwrap();
    eprintln!("built {n} chunks in {:.1}s", t.elapsed().as_secs_f64());
    (store, centroids, vocab)
}

fn workspace(n: usize) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("../../target/claw-bench/ws-{n}"))
}

/// Returns a fixed vector; optionally runs the real model's query embedding first
/// (so "with embedding" timings include it).
struct BenchEmbedder {
    vector: std::sync::Mutex<Vec<f32>>,
    real: Option<LocalEmbedder>,
    model: String,
}

impl Embedder for BenchEmbedder {
    fn provider(&self) -> &str {
        "bench"
    }
    fn model_id(&self) -> &str {
        &self.model
    }
    fn dims(&self) -> usize {
        DIMS
    }
    fn embed(&self, _texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(vec![self.vector.lock().unwrap().clone()])
    }
    fn embed_query(&self, q: &str) -> Result<Vec<f32>, EmbedError> {
        if let Some(r) = &self.real {
            r.embed_query(q)?;
        }
        Ok(self.vector.lock().unwrap().clone())
    }
    fn token_counter(&self) -> &dyn TokenCounter {
        &ApproxCounter
    }
    fn max_input_tokens(&self) -> usize {
        256
    }
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A bench query: its text and its (synthetic) query vector.
type Query = (String, Vec<f32>);

/// One cold process: the query, wall ms, what it returned.
type ColdRun = (String, f64, String);

/// Wall time of cold `claw memory search` processes on the bench workspace.
fn cold_cli(n: usize, queries: &[String]) -> Result<Vec<ColdRun>, String> {
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/release/claw");
    if !bin.exists() {
        return Err(format!(
            "{} is missing: run `cargo build --release` first",
            bin.display()
        ));
    }
    let mut out = Vec::new();
    for q in queries {
        let t = Instant::now();
        let o = std::process::Command::new(&bin)
            .args(["memory", "search", q, "--json"])
            .env("CLAW_WORKSPACE", workspace(n))
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).map_err(|e| {
            format!(
                "exit {:?}, bad JSON ({e}): {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            )
        })?;
        let fb = match &v["fallback"] {
            serde_json::Value::Null => "none".to_string(),
            f => f.to_string(),
        };
        let hits = v["results"].as_array().map_or(0, Vec::len);
        out.push((q.clone(), ms, format!("{hits} hits, fallback {fb}")));
    }
    Ok(out)
}

fn main() {
    let n: usize = std::env::var("CLAW_BENCH_CHUNKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let load_before = load_avg();
    let (store, centroids, vocab) = build(n);
    if let Some(bytes) = std::env::var("CLAW_BENCH_MMAP")
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
    {
        store.set_mmap_size(bytes).unwrap();
        eprintln!("PRAGMA mmap_size = {bytes} on the bench connection");
    }
    let real = match (
        std::env::var_os("CLAW_EMBED_MODEL_DIR"),
        std::env::var_os("ORT_DYLIB_PATH"),
    ) {
        (Some(d), Some(o)) => LocalEmbedder::load(Some(d.as_ref()), Some(o.as_ref()), 1).ok(),
        _ => None,
    };
    // With the real model, the DB claims its id so `claw memory search` runs the
    // vector stage (over the synthetic vectors: the timing is real, the ranking is not).
    let model = match &real {
        Some(r) => r.model_id().to_string(),
        None => MODEL.to_string(),
    };
    store.set_meta("model", &model).unwrap();
    let plan = vector_plan(&store).unwrap();
    let mut rng = Rng(42);
    let queries: Vec<(String, Vec<f32>)> = (0..QUERIES)
        .map(|_| {
            let c = &centroids[rng.below(CLUSTERS)];
            let q: Vec<String> = (0..3).map(|_| word(&mut rng, &vocab)).collect();
            (q.join(" "), near(&mut rng, c, 0.08))
        })
        .collect();
    let params = MemorySettings::default();
    let k = 6 * params.candidate_multiplier;
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    let mut time = |name: &str, f: &mut dyn FnMut(&Query)| {
        for q in queries.iter().take(10) {
            f(q); // warm-up
        }
        let mut t: Vec<f64> = queries
            .iter()
            .map(|q| {
                let s = Instant::now();
                f(q);
                s.elapsed().as_secs_f64() * 1e3
            })
            .collect();
        rows.push((name.to_string(), pct(&mut t, 0.5), pct(&mut t, 0.95)));
    };
    let fixed = BenchEmbedder {
        vector: Default::default(),
        real: None,
        model: model.clone(),
    };
    time("exact float KNN, vec0 (k=24): baseline", &mut |(_, v)| {
        exact_knn(&store, v, k).unwrap();
    });
    time("**hybrid search, excluding query embedding**", &mut |(
        q,
        v,
    )| {
        *fixed.vector.lock().unwrap() = v.clone();
        let r = engine::search(
            &store,
            Some(&fixed),
            &params,
            &SearchRequest::new(q.clone()),
            0,
        )
        .unwrap();
        assert!(r.fallback.is_none());
    });
    if let Some(real) = real {
        let with = BenchEmbedder {
            vector: Default::default(),
            real: Some(real),
            model: model.clone(),
        };
        time(
            "hybrid search, including query embedding (MiniLM)",
            &mut |(q, v)| {
                *with.vector.lock().unwrap() = v.clone();
                engine::search(
                    &store,
                    Some(&with),
                    &params,
                    &SearchRequest::new(q.clone()),
                    0,
                )
                .unwrap();
            },
        );
    } else {
        eprintln!("CLAW_EMBED_MODEL_DIR/ORT_DYLIB_PATH not set: skipping the with-embedding row");
    }
    time("keyword-only search (--mode fts)", &mut |(q, _)| {
        let req = SearchRequest {
            mode: Mode::Fts,
            ..SearchRequest::new(q.clone())
        };
        engine::search(&store, None, &params, &req, 0).unwrap();
    });
    time(
        "vector-only search (--mode vector), excl. embedding",
        &mut |(q, v)| {
            *fixed.vector.lock().unwrap() = v.clone();
            let req = SearchRequest {
                mode: Mode::Vector,
                ..SearchRequest::new(q.clone())
            };
            engine::search(&store, Some(&fixed), &params, &req, 0).unwrap();
        },
    );
    time("stage: keyword candidates (k=24)", &mut |(q, _)| {
        keyword_candidates(
            &store,
            &ParsedQuery::parse(q),
            k,
            None,
            KeywordNorm::default(),
        )
        .unwrap();
    });
    time(
        "stage: vector, bit prefilter + exact rescore (k=24)",
        &mut |(_, v)| {
            bit_knn(&store, v, k).unwrap();
        },
    );
    let kb = (k * BIT_OVERSAMPLE).max(BIT_MIN_CANDIDATES);
    time(
        &format!("stage: hamming scan of vec0 bit storage ({kb} candidates)"),
        &mut |(_, v)| {
            bit_scan(&store, v, kb).unwrap().unwrap();
        },
    );
    time(
        &format!("(before) vec0 bit KNN, k={kb}: sqlite-vec's own top-k"),
        &mut |(_, v)| {
            bit_knn_vec0(&store, v, kb).unwrap();
        },
    );
    // Prefilter recall@k against exact KNN.
    let mut recall = Vec::new();
    for kk in [6usize, 24, 100] {
        let mut hit = 0usize;
        for (_, v) in &queries {
            let exact: Vec<i64> = exact_knn(&store, v, kk)
                .unwrap()
                .into_iter()
                .map(|x| x.0)
                .collect();
            let approx: Vec<i64> = bit_knn(&store, v, kk)
                .unwrap()
                .into_iter()
                .map(|x| x.0)
                .collect();
            hit += exact.iter().filter(|id| approx.contains(id)).count();
        }
        recall.push((kk, hit as f64 / (kk * queries.len()) as f64));
    }
    // Budgeted keyword ranking against exact BM25 (the OR of every content term).
    let mut kinds = [0usize; 3];
    let mut kw_hit = 0usize;
    let mut kw_total = 0usize;
    let mut exact_ms = Vec::new();
    // The exhaustive reference ranking runs on a read-only second connection.
    let inspector = store.open_inspector().unwrap();
    for (q, _) in &queries {
        let pq = ParsedQuery::parse(q);
        let terms = pq.fts_terms();
        let terms: Vec<&str> = terms.iter().map(String::as_str).collect();
        match keyword_plan(&store, "chunks_fts", &terms, KEYWORD_RANK_BUDGET)
            .unwrap()
            .terms
        {
            TermPlan::All => kinds[0] += 1,
            TermPlan::Subset(_) => kinds[1] += 1,
            TermPlan::AllCommon => kinds[2] += 1,
        }
        let t = Instant::now();
        let exact: Vec<i64> = inspector
            .prepare_cached(
                "SELECT rowid FROM chunks_fts WHERE chunks_fts MATCH ?1 ORDER BY rank LIMIT ?2",
            )
            .unwrap()
            .query_map(rusqlite::params![pq.fts_match().unwrap(), k as i64], |r| {
                r.get(0)
            })
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        exact_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let got = keyword_candidates(&store, &pq, k, None, KeywordNorm::default()).unwrap();
        kw_total += exact.len();
        kw_hit += exact.iter().filter(|id| got.contains_key(id)).count();
    }
    // Keyword-stage latency by plan kind.
    let mut by_kind: [Vec<f64>; 3] = Default::default();
    for (q, _) in &queries {
        let pq = ParsedQuery::parse(q);
        let terms = pq.fts_terms();
        let terms: Vec<&str> = terms.iter().map(String::as_str).collect();
        let kind = match keyword_plan(&store, "chunks_fts", &terms, KEYWORD_RANK_BUDGET)
            .unwrap()
            .terms
        {
            TermPlan::All => 0,
            TermPlan::Subset(_) => 1,
            TermPlan::AllCommon => 2,
        };
        let t = Instant::now();
        keyword_candidates(&store, &pq, k, None, KeywordNorm::default()).unwrap();
        by_kind[kind].push(t.elapsed().as_secs_f64() * 1e3);
    }
    let scifact = scifact_quality();
    let cold = real_cold(n, &queries);
    let load_after = load_avg();

    println!(
        "\n### Search latency, {n} chunks, {QUERIES} queries (vector plan: {plan:?}; load average {load_before} before, {load_after} after)\n"
    );
    println!("| what | p50 ms | p95 ms |\n|---|---:|---:|");
    for (name, p50, p95) in &rows {
        println!("| {name} | {p50:.2} | {p95:.2} |");
    }
    let base = rows[0].1;
    println!(
        "\np50 relative to the exact-float baseline of this run: hybrid {:.3}× (the README measured the baseline at 44 ms on an idle machine, so an idle-machine hybrid p50 ≈ {:.1} ms)",
        rows[1].1 / base,
        rows[1].1 / base * 44.0
    );
    println!(
        "\n| bit prefilter ({kb}+ candidates, ×{BIT_OVERSAMPLE}) recall@k vs exact | recall |\n|---|---:|"
    );
    for (kk, r) in recall {
        println!("| k = {kk} | {r:.3} |");
    }
    exact_ms.sort_by(f64::total_cmp);
    println!(
        "\n| keyword stage vs exact BM25 (OR of all terms), budget {KEYWORD_RANK_BUDGET} rows | value |\n|---|---:|"
    );
    let p50 = |v: &mut Vec<f64>| if v.is_empty() { f64::NAN } else { pct(v, 0.5) };
    println!(
        "| queries ranked exactly (all terms): count, keyword-stage p50 ms | {}, {:.2} |",
        kinds[0],
        p50(&mut by_kind[0])
    );
    println!(
        "| queries ranked on their rarest terms: count, p50 ms | {}, {:.2} |",
        kinds[1],
        p50(&mut by_kind[1])
    );
    println!(
        "| queries whose every term is common: count, p50 ms | {}, {:.2} |",
        kinds[2],
        p50(&mut by_kind[2])
    );
    println!(
        "| recall of exact BM25 top-{k} in the keyword candidates | {:.3} |",
        kw_hit as f64 / kw_total.max(1) as f64
    );
    println!(
        "| exact BM25 query p50 / p95 ms (for comparison) | {:.2} / {:.2} |",
        exact_ms[exact_ms.len() / 2],
        exact_ms[(exact_ms.len() - 1) * 95 / 100]
    );
    match scifact {
        Ok(rows) => {
            println!(
                "\n| SciFact train (5,183 real abstracts, one chunk each; 809 queries), keyword-only | nDCG@10 |\n|---|---:|"
            );
            for (what, ndcg) in rows {
                println!("| {what} | {ndcg:.4} |");
            }
        }
        Err(note) => println!("\nSciFact keyword quality not measured: {note}"),
    }
    match cold {
        Ok(runs) => {
            println!(
                "\n| cold `claw memory search --json` process (start, open, model load, search) | wall ms | result |\n|---|---:|---|"
            );
            for (q, ms, what) in &runs {
                println!("| `{q}` | {ms:.0} | {what} |");
            }
            let mut ms: Vec<f64> = runs.iter().map(|r| r.1).collect();
            println!(
                "| **median of {}** | {:.0} | |",
                ms.len(),
                pct(&mut ms, 0.5)
            );
        }
        Err(note) => println!("\ncold `claw memory search` not measured: {note}"),
    }
    assert!(plan == VectorPlan::BitPrefilter || n < engine::BIT_PREFILTER_MIN_CHUNKS as usize);
}

fn real_cold(n: usize, queries: &[(String, Vec<f32>)]) -> Result<Vec<ColdRun>, String> {
    if std::env::var_os("CLAW_EMBED_MODEL_DIR").is_none() {
        return Err("CLAW_EMBED_MODEL_DIR/ORT_DYLIB_PATH not set".into());
    }
    let qs: Vec<String> = queries.iter().take(7).map(|q| q.0.clone()).collect();
    cold_cli(n, &qs)
}

/// Keyword-only nDCG@10 on SciFact (real text and relevance judgements), exact
/// BM25 against the budgeted ranking, on a keyword-only store cached under
/// `target/claw-bench/`.
fn scifact_quality() -> Result<Vec<(String, f64)>, String> {
    use std::collections::HashMap;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/scifact");
    let read = |p: &str| {
        std::fs::read_to_string(root.join(p))
            .map_err(|e| format!("{}: {e}", root.join(p).display()))
    };
    let corpus = read("corpus.jsonl")?;
    let queries = read("queries.jsonl")?;
    let qrels = read("qrels/train.tsv")?;
    let db =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/claw-bench/scifact-kw.sqlite");
    let ready = db.exists()
        && Store::open(&db)
            .ok()
            .and_then(|s| s.meta("bench_complete").ok().flatten())
            .is_some();
    if !ready {
        for ext in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
        }
    }
    let mut store = Store::open(&db).map_err(|e| e.to_string())?;
    if !ready {
        for (i, line) in corpus.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
            let id = v["_id"].as_str().unwrap_or_default().to_string();
            let text = format!(
                "{}\n{}",
                v["title"].as_str().unwrap_or_default(),
                v["text"].as_str().unwrap_or_default()
            );
            let file = claw_testkit::memory_file(&id, &i.to_string());
            let chunk = NewChunk {
                id: id.clone(),
                start_line: 1,
                end_line: 1,
                hash: format!("{i}"),
                text,
                context: String::new(),
                note_time: None,
                embedding: None,
            };
            store
                .write_file(&file, &[chunk], WriteMode::Replace, "")
                .map_err(|e| e.to_string())?;
        }
        store
            .set_meta("bench_complete", "1")
            .map_err(|e| e.to_string())?;
    }
    let doc_of: HashMap<i64, String> = store
        .open_inspector()
        .map_err(|e| e.to_string())?
        .prepare("SELECT rowid, path FROM chunks")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()
        })
        .map_err(|e| e.to_string())?;
    let mut rel: HashMap<String, HashMap<String, f64>> = HashMap::new();
    for line in qrels.lines().skip(1) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() >= 3 {
            rel.entry(f[0].to_string())
                .or_default()
                .insert(f[1].to_string(), f[2].trim().parse().unwrap_or(0.0));
        }
    }
    let qs: Vec<(String, String)> = queries
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            Some((
                v["_id"].as_str()?.to_string(),
                v["text"].as_str()?.to_string(),
            ))
        })
        .filter(|(id, _)| rel.contains_key(id))
        .collect();
    let mut out = Vec::new();
    for (what, budget) in [
        ("exact BM25 (no budget)".to_string(), usize::MAX),
        (
            format!("budget {KEYWORD_RANK_BUDGET} rows (the product)"),
            KEYWORD_RANK_BUDGET,
        ),
        ("budget 1000 rows".to_string(), 1000),
    ] {
        let mut sum = 0.0;
        for (qid, text) in &qs {
            let pq = ParsedQuery::parse(text);
            let hits = engine::keyword_candidates_within(
                &store,
                &pq,
                10,
                None,
                KeywordNorm::default(),
                budget,
            )
            .map_err(|e| e.to_string())?;
            let mut ranked: Vec<(i64, f64)> = hits.into_iter().collect();
            ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let judged = &rel[qid];
            let dcg: f64 = ranked
                .iter()
                .take(10)
                .enumerate()
                .map(|(i, (id, _))| {
                    judged.get(&doc_of[id]).copied().unwrap_or(0.0) / ((i + 2) as f64).log2()
                })
                .sum();
            let mut ideal: Vec<f64> = judged.values().copied().collect();
            ideal.sort_by(|a, b| b.total_cmp(a));
            let idcg: f64 = ideal
                .iter()
                .take(10)
                .enumerate()
                .map(|(i, r)| r / ((i + 2) as f64).log2())
                .sum();
            if idcg > 0.0 {
                sum += dcg / idcg;
            }
        }
        out.push((what, sum / qs.len().max(1) as f64));
    }
    Ok(out)
}
