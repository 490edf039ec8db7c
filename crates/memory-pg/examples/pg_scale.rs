//! Scale figures for the PostgreSQL backend (BENCHMARKS.md): write N synthetic
//! chunks (clustered 384-d unit vectors, text from a 5,000-word vocabulary)
//! through `IndexStorage` as the indexer does a full index (a reset, then
//! `write_file` per file of 100 chunks inside write groups, then
//! `PgStore::finish_bulk`), then measure HNSW recall@10 against exact search and
//! the vector query's latency at several `ef_search`, and the latency of a full
//! hybrid `search_in` with 1 and 8 concurrent clients sharing one store (one
//! pool, as the gateway holds it).
//!
//! `CLAW_PG_URL=… cargo run --release -p claw-memory-pg --example pg_scale -- 100000 [--keep|--reuse]`
#![allow(clippy::unwrap_used)]

use claw_memory::chunk::{ApproxCounter, TokenCounter};
use claw_memory::config::MemorySettings;
use claw_memory::embed::{EmbedError, Embedder};
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::engine::{SearchRequest, search_in};
use claw_memory::search::storage::SearchStorage;
use claw_memory::store::{NewChunk, WriteMode};
use claw_memory_pg::{PgConfig, PgStore};
use claw_testkit::Rng;
use std::time::Instant;

const DIMS: usize = 384;
const MODEL: &str = "synthetic-384";

/// A normally distributed number (Box-Muller).
fn gauss(rng: &mut Rng) -> f32 {
    let (u, v) = (rng.unit().max(1e-9), rng.unit());
    (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos()
}

fn normed(mut v: Vec<f32>) -> Vec<f32> {
    claw_memory::embed::normalize(&mut v);
    v
}

/// Returns the query vector it was built with (the example sets it per query).
struct FixedEmbedder(std::sync::Mutex<Vec<f32>>);
impl Embedder for FixedEmbedder {
    fn provider(&self) -> &str {
        "synthetic"
    }
    fn model_id(&self) -> &str {
        MODEL
    }
    fn dims(&self) -> usize {
        DIMS
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|_| self.0.lock().unwrap().clone())
            .collect())
    }
    fn token_counter(&self) -> &dyn TokenCounter {
        &ApproxCounter
    }
    fn max_input_tokens(&self) -> usize {
        512
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p / 100.0).round() as usize]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let url = std::env::var("CLAW_PG_URL").expect("CLAW_PG_URL");
    let schema = format!("scale_{n}");
    // `--reuse`: search the schema a `--keep` run left (the same data), no load.
    let reuse = std::env::args().any(|a| a == "--reuse");
    if !reuse {
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .unwrap();
    }
    let cfg = |ws: &str| {
        let mut c = PgConfig::new(&url, "scale", ws);
        c.schema = schema.clone();
        c.pool_size = 8;
        c
    };
    let mut pg = PgStore::connect(cfg("w")).unwrap();
    if !reuse {
        pg.reset_index(MODEL, DIMS, "bench").unwrap();
    }

    let mut rng = Rng(0x9e3779b97f4a7c15);
    let vocab: Vec<String> = (0..5000)
        .map(|i| format!("w{}{}", i, ["a", "e", "o", "u"][i % 4]))
        .collect();
    let centers: Vec<Vec<f32>> = (0..200)
        .map(|_| normed((0..DIMS).map(|_| gauss(&mut rng)).collect()))
        .collect();
    let mut sample_vecs = Vec::new();
    let started = Instant::now();
    pg.begin_group().unwrap();
    let per_file = 100;
    for f in 0..n.div_ceil(per_file) {
        let chunks: Vec<NewChunk> = (0..per_file.min(n - f * per_file))
            .map(|i| {
                let c = &centers[rng.next_u64() as usize % centers.len()];
                let v = normed(c.iter().map(|x| x + 0.08 * gauss(&mut rng)).collect());
                if (f * per_file + i) % 500 == 0 {
                    sample_vecs.push(v.clone());
                }
                let text: Vec<&str> = (0..40)
                    .map(|_| vocab[(rng.next_u64() % 5000) as usize].as_str())
                    .collect();
                NewChunk {
                    id: format!("{f}-{i}"),
                    start_line: i + 1,
                    end_line: i + 1,
                    hash: format!("h{f}-{i}"),
                    text: text.join(" "),
                    context: String::new(),
                    note_time: None,
                    embedding: Some(v),
                }
            })
            .collect();
        let file = claw_testkit::memory_file(&format!("memory/f{f:05}.md"), &f.to_string());
        if !reuse {
            pg.write_file(&file, &chunks, WriteMode::Replace, MODEL)
                .unwrap();
        }
    }
    pg.commit_group().unwrap();
    let load_s = started.elapsed().as_secs_f64();
    pg.finish_bulk().unwrap();
    let index_s = started.elapsed().as_secs_f64();
    println!(
        "index: {n} chunks in {index_s:.1} s ({:.0} chunks/s): rows {load_s:.1} s, \
         search indexes built after {:.1} s (HNSW m {}, ef_construction {})",
        n as f64 / index_s,
        index_s - load_s,
        claw_memory_pg::HNSW_M,
        claw_memory_pg::HNSW_EF_CONSTRUCTION,
    );

    // Recall@10 of the HNSW index against an exact scan, by ef_search.
    let queries: Vec<Vec<f32>> = sample_vecs
        .iter()
        .take(100)
        .map(|v| normed(v.iter().map(|x| x + 0.05 * gauss(&mut rng)).collect()))
        .collect();
    let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    c.batch_execute(&format!("SET search_path = {schema}, public"))
        .unwrap();
    let mut exact_ms = Vec::new();
    let exact: Vec<Vec<i64>> = queries
        .iter()
        .map(|q| {
            let t = Instant::now();
            let ids = c
                .query(
                    "SELECT rowid FROM chunks ORDER BY embedding <=> $1 LIMIT 10",
                    &[&pgvector::Vector::from(q.clone())],
                )
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            exact_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            ids
        })
        .collect();
    exact_ms.sort_by(f64::total_cmp);
    println!(
        "exact scan (no index) p50 {:.1} ms over {} queries",
        pct(&exact_ms, 50.0),
        queries.len()
    );
    println!("ef_search | recall@10 vs exact | vector query p50 | p95");
    for ef in [40usize, 64, 100, 200] {
        let mut cfg = cfg("recall");
        cfg.ef_search = ef;
        let store = PgStore::connect(cfg).unwrap();
        // Warm the connection (prepared statement, session settings).
        store.vector_candidates(&queries[0], 10, None).unwrap();
        let (mut hit, mut total) = (0usize, 0usize);
        let mut ms = Vec::new();
        for (q, exact) in queries.iter().zip(&exact) {
            let t = Instant::now();
            let (approx, _) = store.vector_candidates(q, 10, None).unwrap();
            ms.push(t.elapsed().as_secs_f64() * 1000.0);
            total += exact.len();
            hit += approx.iter().filter(|(id, _)| exact.contains(id)).count();
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "{ef:>9} | {:>18.3} | {:>13.2} ms | {:.2} ms{}",
            hit as f64 / total as f64,
            pct(&ms, 50.0),
            pct(&ms, 95.0),
            if ef == claw_memory_pg::DEFAULT_EF_SEARCH {
                " (default)"
            } else {
                ""
            }
        );
    }

    // Full hybrid searches, 1 and 8 concurrent clients on one store (one pool).
    let store = PgStore::connect(cfg("r")).unwrap();
    for clients in [1usize, 8] {
        let per = 400 / clients;
        let lat = std::sync::Mutex::new(Vec::new());
        let t0 = Instant::now();
        std::thread::scope(|s| {
            for t in 0..clients {
                let (queries, vocab, lat, store) = (&queries, &vocab, &lat, &store);
                s.spawn(move || {
                    let e = FixedEmbedder(std::sync::Mutex::new(Vec::new()));
                    let mut r = Rng(0x1234 + t as u64);
                    for i in 0..per {
                        *e.0.lock().unwrap() = queries[(i + t) % queries.len()].clone();
                        let q = format!(
                            "{} {} {}",
                            vocab[(r.next_u64() % 5000) as usize],
                            vocab[(r.next_u64() % 5000) as usize],
                            vocab[(r.next_u64() % 5000) as usize]
                        );
                        let t = Instant::now();
                        let resp = search_in(
                            store,
                            Some(&e),
                            &MemorySettings::default(),
                            &SearchRequest::new(q),
                            0,
                        )
                        .unwrap();
                        assert!(resp.fallback.is_none());
                        lat.lock().unwrap().push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                });
            }
        });
        let mut l = lat.into_inner().unwrap();
        l.sort_by(f64::total_cmp);
        println!(
            "hybrid search, {clients} client(s): p50 {:.1} ms, p95 {:.1} ms, {:.0} queries/s",
            pct(&l, 50.0),
            pct(&l, 95.0),
            l.len() as f64 / t0.elapsed().as_secs_f64()
        );
    }
    let sz: i64 = c
        .query_one("SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relkind = 'r'", &[&schema])
        .unwrap()
        .get(0);
    println!("database size of the schema: {} MB", sz / 1_000_000);
    // `--keep`: leave the schema for EXPLAIN ANALYZE and `--reuse`.
    if !std::env::args().any(|a| a == "--keep" || a == "--reuse") {
        c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .unwrap();
    }
}
