//! Search latency over 100,000 chunks (synthetic clustered unit vectors of 384 dims
//! plus real-ish Zipfian text, written through `Store::write_file` into a temp-ish
//! DB cached under `target/claw-bench/`), and the binary-prefilter recall against
//! exact KNN. Prints a Markdown table.
//!
//! `cargo bench --bench search` (set CLAW_EMBED_MODEL_DIR + ORT_DYLIB_PATH to
//! include the real query embedding). CLAW_BENCH_CHUNKS overrides the size.

use claw::config::MemorySettings;
use claw::memory::chunk::{ApproxCounter, TokenCounter};
use claw::memory::embed::{EmbedError, Embedder, LocalEmbedder};
use claw::memory::search::engine::{
    self, Mode, SearchRequest, VectorPlan, bit_knn, exact_knn, vector_plan,
};
use claw::memory::store::{FileRecord, NewChunk, Store, WriteMode};
use std::path::PathBuf;
use std::time::Instant;

const DIMS: usize = 384;
const CLUSTERS: usize = 2000;
const PER_FILE: usize = 100;
const QUERIES: usize = 200;
const MODEL: &str = "bench-synthetic";

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn f(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    claw::memory::embed::normalize(&mut v);
    v
}

fn near(rng: &mut Rng, c: &[f32], noise: f32) -> Vec<f32> {
    unit(c.iter().map(|x| x + noise * rng.f()).collect())
}

/// A Zipf-ish vocabulary word.
fn word(rng: &mut Rng, vocab: &[String]) -> String {
    let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
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
        .map(|_| unit((0..DIMS).map(|_| rng.f()).collect()))
        .collect();
    let vocab = vocab(&mut rng);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/claw-bench");
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join(format!("search-{n}-v1.sqlite"));
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
                    note_time: None,
                    embedding: Some(near(&mut rng, c, 0.08)),
                }
            })
            .collect();
        made += chunks.len();
        let file = FileRecord {
            source: "memory".into(),
            path: format!("memory/{path}"),
            sha256: format!("{f}"),
            mtime_ns: 1,
            size: 1,
            indexed_bytes: 0,
            indexed_lines: 0,
        };
        store
            .write_file(&file, &chunks, WriteMode::Replace, MODEL)
            .unwrap();
        f += 1;
    }
    store.set_meta("bench_complete", "1").unwrap();
    eprintln!("built {n} chunks in {:.1}s", t.elapsed().as_secs_f64());
    (store, centroids, vocab)
}

/// Returns a fixed vector; optionally runs the real model's query embedding first
/// (so "with embedding" timings include it).
struct BenchEmbedder {
    vector: std::sync::Mutex<Vec<f32>>,
    real: Option<LocalEmbedder>,
}

impl Embedder for BenchEmbedder {
    fn provider(&self) -> &str {
        "bench"
    }
    fn model_id(&self) -> &str {
        MODEL
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

fn main() {
    let n: usize = std::env::var("CLAW_BENCH_CHUNKS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let (store, centroids, vocab) = build(n);
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
    let real = match (
        std::env::var_os("CLAW_EMBED_MODEL_DIR"),
        std::env::var_os("ORT_DYLIB_PATH"),
    ) {
        (Some(d), Some(o)) => LocalEmbedder::load(Some(d.as_ref()), Some(o.as_ref()), 1).ok(),
        _ => None,
    };
    let mut rows: Vec<(String, f64, f64)> = Vec::new();
    let mut time = |name: &str, f: &mut dyn FnMut(&(String, Vec<f32>))| {
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
    };
    time("hybrid search, excluding query embedding", &mut |(q, v)| {
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
    time("fts-only search", &mut |(q, _)| {
        let req = SearchRequest {
            mode: Mode::Fts,
            ..SearchRequest::new(q.clone())
        };
        engine::search(&store, None, &params, &req, 0).unwrap();
    });
    time(
        "vector stage: bit prefilter + exact rescore (k=24)",
        &mut |(_, v)| {
            bit_knn(&store, v, 24).unwrap();
        },
    );
    time("vector stage: exact float KNN (k=24)", &mut |(_, v)| {
        exact_knn(&store, v, 24).unwrap();
    });
    if let Some(real) = real {
        let with = BenchEmbedder {
            vector: Default::default(),
            real: Some(real),
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
    // Prefilter recall@k against exact KNN.
    let mut recall = Vec::new();
    for k in [6usize, 24, 100] {
        let mut hit = 0usize;
        for (_, v) in &queries {
            let exact: Vec<i64> = exact_knn(&store, v, k)
                .unwrap()
                .into_iter()
                .map(|x| x.0)
                .collect();
            let approx: Vec<i64> = bit_knn(&store, v, k)
                .unwrap()
                .into_iter()
                .map(|x| x.0)
                .collect();
            hit += exact.iter().filter(|id| approx.contains(id)).count();
        }
        recall.push((k, hit as f64 / (k * queries.len()) as f64));
    }
    println!("\n### Search latency, {n} chunks, {QUERIES} queries (vector plan: {plan:?})\n");
    println!("| what | p50 ms | p95 ms |\n|---|---:|---:|");
    for (name, p50, p95) in &rows {
        println!("| {name} | {p50:.2} | {p95:.2} |");
    }
    println!("\n| bit prefilter recall@k vs exact | recall |\n|---|---:|");
    for (k, r) in recall {
        println!("| k = {k} | {r:.3} |");
    }
    assert!(plan == VectorPlan::BitPrefilter || n < engine::BIT_PREFILTER_MIN_CHUNKS as usize);
}
