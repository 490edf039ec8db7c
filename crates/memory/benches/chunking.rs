//! Chunking throughput (MB/s) over the This Week in Rust corpus (`../shared/data/notes-twir.tar.gz`,
//! 621 files, 11.6 MB), each file chunked on its own as the indexer does: with `ApproxCounter`
//! (keyword-only indexing) and, when `CLAW_EMBED_MODEL_DIR` is set, with the model's own
//! tokenizer (`HfTokenCounter`). Falls back to a synthetic corpus when `../shared` is missing.
//!
//! Run: `cargo bench --bench chunking`

#![allow(clippy::unwrap_used)]

use claw_memory::chunk::{ApproxCounter, ChunkParams, TokenCounter, chunk_markdown};
use claw_memory::embed::HfTokenCounter;
use criterion::{Criterion, Throughput};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

const PARAMS: ChunkParams = ChunkParams {
    max_tokens: 254,
    overlap_tokens: 32,
};

fn twir_corpus() -> Option<(Vec<String>, &'static str)> {
    let archive =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/notes-twir.tar.gz");
    if !archive.is_file() {
        return None;
    }
    let tmp = tempfile::tempdir().ok()?;
    let ok = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(tmp.path())
        .status()
        .ok()?
        .success();
    if !ok {
        return None;
    }
    let mut paths: Vec<PathBuf> = walkdir::WalkDir::new(tmp.path())
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file() && e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.into_path())
        .collect();
    paths.sort();
    let docs = paths
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    Some((docs, "twir"))
}

/// ~10 MB of Markdown-like text: headings, paragraphs, lists, code fences.
fn synthetic_corpus() -> (Vec<String>, &'static str) {
    let mut docs = Vec::new();
    for d in 0..600 {
        let mut s = format!("---\ntitle: doc {d}\n---\n# Document {d}\n\n");
        for sec in 0..12 {
            s.push_str(&format!("## Section {sec}\n\n"));
            for l in 0..8 {
                let words: Vec<String> = (0..14)
                    .map(|w| format!("word{}", (d * 31 + sec * 7 + l * 3 + w) % 997))
                    .collect();
                s.push_str(&format!("- {}\n", words.join(" ")));
            }
            s.push_str("\n```rust\nfn main() { println!(\"hello\"); }\n```\n\n");
        }
        docs.push(s);
    }
    (docs, "synthetic")
}

fn bench_with(c: &mut Criterion, name: &str, docs: &[String], counter: &dyn TokenCounter) {
    let bytes: usize = docs.iter().map(String::len).sum();
    let chunks: usize = docs
        .iter()
        .map(|d| chunk_markdown(d, &PARAMS, counter).len())
        .sum();
    eprintln!(
        "{name}: {} files, {:.1} MB, {chunks} chunks",
        docs.len(),
        bytes as f64 / 1e6
    );
    let mut group = c.benchmark_group("chunking");
    group.throughput(Throughput::Bytes(bytes as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.bench_function(name, |b| {
        b.iter(|| {
            let mut n = 0usize;
            for d in docs {
                n += chunk_markdown(black_box(d), &PARAMS, counter).len();
            }
            black_box(n)
        })
    });
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let (docs, corpus) = twir_corpus().unwrap_or_else(synthetic_corpus);
    bench_with(&mut c, &format!("{corpus}/approx"), &docs, &ApproxCounter);
    match std::env::var_os("CLAW_EMBED_MODEL_DIR") {
        Some(dir) => match HfTokenCounter::from_file(&PathBuf::from(dir).join("tokenizer.json")) {
            Ok(counter) => bench_with(&mut c, &format!("{corpus}/hf-tokenizer"), &docs, &counter),
            Err(e) => eprintln!("skipping the tokenizer benchmark: {e}"),
        },
        None => eprintln!("CLAW_EMBED_MODEL_DIR not set: skipping the tokenizer benchmark"),
    }
    c.final_summary();
}
