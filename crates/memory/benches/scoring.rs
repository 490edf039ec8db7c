//! Criterion benches of the pure search pipeline: blend + decay + MMR + pins over
//! 200 candidates, and the FTS query sanitiser. `cargo bench --bench scoring`.

#![allow(clippy::unwrap_used)]

use claw_memory::search::query::ParsedQuery;
use claw_memory::search::score::{Candidate, RankParams, rank, token_set};
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn candidates(n: usize) -> Vec<Candidate> {
    let words = [
        "deploy", "billing", "ledger", "rust", "coffee", "invoice", "tokio", "sqlite", "vector",
        "memory", "note", "trip",
    ];
    (0..n)
        .map(|i| {
            let text: Vec<&str> = (0..60)
                .map(|j| words[(i * 7 + j * 3 + j * j) % words.len()])
                .collect();
            Candidate {
                vector: Some(((i * 37) % 100) as f64 / 100.0),
                keyword: (i % 3 == 0).then(|| ((i * 13) % 100) as f64 / 100.0),
                note_time: (i % 2 == 0).then(|| 1_790_000_000 - (i as i64) * 86_400),
                tokens: token_set(&format!("{} {}", text.join(" "), i)),
                pinned: i == 150,
                source_factor: if i % 5 == 0 { 0.8 } else { 1.0 },
                note: (i % 5 != 0).then_some(i / 10),
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let cands = candidates(200);
    let p = RankParams {
        weights: (0.7, 0.3),
        half_life_days: 30.0,
        mmr_lambda: Some(0.7),
        min_score: 0.0,
        limit: 6,
    };
    c.bench_function("rank 200 candidates (blend+decay+MMR, limit 6)", |b| {
        b.iter(|| rank(black_box(&cands), &p, 1_800_000_000))
    });
    let p100 = RankParams {
        limit: 100,
        ..p.clone()
    };
    c.bench_function("rank 200 candidates (limit 100)", |b| {
        b.iter(|| rank(black_box(&cands), &p100, 1_800_000_000))
    });
    let text =
        "The billing migration is tracked as ticket ZX-4471; it moves invoices to the new ledger. "
            .repeat(8);
    c.bench_function("token_set of a 700-char chunk", |b| {
        b.iter(|| token_set(black_box(&text)))
    });
    for q in [
        r#"what did "we" decide about NEAR(deploy) OR * ^rollback:"#,
        "黑豹队的防守丢了多少分？",
        "ZX-4471",
    ] {
        c.bench_function(&format!("sanitise {q:?}"), |b| {
            b.iter(|| {
                let pq = ParsedQuery::parse(black_box(q));
                (pq.fts_match(), pq.trigram_match())
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
