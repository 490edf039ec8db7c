//! The chunker against the real model tokenizer (all-MiniLM-L6-v2 word pieces) on a real
//! corpus (This Week in Rust): no chunk exceeds the budget as the model counts it, and
//! every non-blank line is covered.
use claw_testkit as support;

use claw_memory::chunk::{ChunkParams, TokenCounter, chunk_markdown, split_lines};
use claw_memory::embed::HfTokenCounter;
use std::path::PathBuf;

/// The model accepts 256 tokens including [CLS] and [SEP].
const BUDGET: usize = 254;

fn extract_twir(dest: &std::path::Path) -> Vec<PathBuf> {
    support::extract_shared("notes-twir.tar.gz", dest);
    support::markdown_files(dest)
}

#[test]
fn twir_chunks_fit_the_model_budget_and_cover_every_line() {
    let (model_dir, _ort) = support::model_paths();
    let counter = HfTokenCounter::from_file(&model_dir.join("tokenizer.json")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let files = extract_twir(tmp.path());
    assert!(
        files.len() > 600,
        "expected the 621 TWIR files, found {}",
        files.len()
    );

    let params = ChunkParams {
        max_tokens: BUDGET,
        overlap_tokens: 32,
    };
    // Every 5th file keeps this under ~20 s in a debug build (the tokenizer is slow there).
    let sample: Vec<&PathBuf> = files.iter().step_by(5).collect();
    let (mut chunks_total, mut max_seen, mut full) = (0usize, 0usize, 0usize);
    for path in &sample {
        let text = std::fs::read_to_string(path).unwrap();
        let lines = split_lines(&text);
        let chunks = chunk_markdown(&text, &params, &counter);
        let mut covered = vec![false; lines.len()];
        for c in &chunks {
            assert!(1 <= c.start_line && c.start_line <= c.end_line && c.end_line <= lines.len());
            // Counted on the joined text, as the model will see it.
            let n = counter.count(&c.text);
            assert!(
                n <= BUDGET,
                "{}: chunk {}..{} has {n} tokens > {BUDGET}",
                path.display(),
                c.start_line,
                c.end_line
            );
            max_seen = max_seen.max(n);
            if n > BUDGET / 2 {
                full += 1;
            }
            covered[c.start_line - 1..c.end_line]
                .iter_mut()
                .for_each(|x| *x = true);
        }
        for (i, line) in lines.iter().enumerate() {
            assert!(
                line.trim().is_empty() || covered[i],
                "{}: line {} not covered",
                path.display(),
                i + 1
            );
        }
        chunks_total += chunks.len();
    }
    eprintln!(
        "{} files, {chunks_total} chunks, largest {max_seen} tokens, {full} over half full",
        sample.len()
    );
    assert!(
        chunks_total > sample.len(),
        "too few chunks: {chunks_total}"
    );
    // The budget is used: chunks are not needlessly tiny.
    assert!(
        max_seen > BUDGET * 3 / 4,
        "largest chunk only {max_seen} tokens"
    );
    assert!(
        full * 3 > chunks_total,
        "only {full} of {chunks_total} chunks over half full"
    );
}
