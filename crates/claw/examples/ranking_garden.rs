//! The notes-garden ranking figures with the real model (and keyword-only), for
//! BENCHMARKS.md: `cargo run --release -p claw --example ranking_garden`. Needs
//! `CLAW_EMBED_MODEL_DIR` and `ORT_DYLIB_PATH` (see `scripts/test.sh`) and
//! `../shared` beside the repository. Runs the same code as
//! `tests/ranking_garden.rs` (`tests/ranking_support/garden.rs`); indexing the garden
//! with the model takes about 80 s in release on an idle machine, too long for the
//! debug test suite. `ranking_garden WORKSPACE` measures an existing hybrid index
//! instead of building one: a workspace where the extracted tarball's root was
//! added (`claw memory add DIR --name garden`) and indexed with the model
//! (the last table adds session transcripts to it). With `CLAW_GARDEN_KEEP=DIR`
//! the garden and its hybrid index are kept in DIR, and only the last table runs.

#![allow(clippy::unwrap_used)]

#[path = "../tests/it/ranking_support/garden.rs"]
mod garden;
#[path = "../tests/it/ranking_support/queries.rs"]
mod queries;

use claw_memory::embed::{Embedder, LocalEmbedder};
use std::path::PathBuf;

fn main() {
    let var = |k: &str| -> PathBuf {
        std::env::var_os(k).map(PathBuf::from).unwrap_or_else(|| {
            panic!("{k} is not set: export CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH")
        })
    };
    let (dir, ort) = (var("CLAW_EMBED_MODEL_DIR"), var("ORT_DYLIB_PATH"));
    let e = LocalEmbedder::load(Some(&dir), Some(&ort), 1).expect("load the local model");
    // `CLAW_GARDEN_KEEP=DIR`: the garden and its hybrid index are kept in DIR
    // (made by the first run, reused by later ones) and only the last table is
    // measured, for looking at it query by query.
    if let Some(keep) = std::env::var_os("CLAW_GARDEN_KEEP").map(PathBuf::from) {
        let (garden_dir, ws) = (keep.join("garden"), keep.join("ws"));
        if !garden_dir.is_dir() {
            std::fs::create_dir_all(&garden_dir).unwrap();
            claw_testkit::extract_shared("notes-garden.tar.gz", &garden_dir);
            let took = garden::index_garden_at(&ws, &garden_dir, Some(&e));
            eprintln!(
                "indexed the garden into {} in {:.1} s",
                ws.display(),
                took.as_secs_f64()
            );
        }
        let e: Option<&dyn Embedder> = Some(&e);
        garden::print_with_transcripts("hybrid", &garden::with_transcripts(&ws, &garden_dir, e));
        return;
    }
    let g = garden::extract_garden();

    let (ws, took) = garden::index_garden(g.path(), None);
    eprintln!(
        "indexed the garden keyword-only in {:.1} s",
        took.as_secs_f64()
    );
    garden::print_table(
        "keyword-only index",
        &garden::measure(ws.path(), None, "keyword-only"),
    );
    garden::print_sweep("keyword-only", &garden::sweep(ws.path(), None));

    // An existing hybrid index of the garden (first argument), or a new one.
    let built: tempfile::TempDir;
    let ws: PathBuf = match std::env::args_os().nth(1) {
        Some(existing) => PathBuf::from(existing),
        None => {
            let (ws, took) = garden::index_garden(g.path(), Some(&e));
            eprintln!(
                "indexed the garden with {} in {:.1} s",
                e.model_id(),
                took.as_secs_f64()
            );
            built = ws;
            built.path().to_path_buf()
        }
    };
    let e: Option<&dyn Embedder> = Some(&e);
    garden::print_table(
        "hybrid, all-MiniLM-L6-v2",
        &garden::measure(&ws, e, "hybrid"),
    );
    garden::print_sweep("hybrid", &garden::sweep(&ws, e));
    garden::print_fusion_sweep("hybrid", &garden::fusion_sweep(&ws, e));
    garden::print_random_words("hybrid", &garden::random_words(&ws, e));
    // Last: it adds transcripts to the workspace.
    garden::print_with_transcripts("hybrid", &garden::with_transcripts(&ws, g.path(), e));
}
