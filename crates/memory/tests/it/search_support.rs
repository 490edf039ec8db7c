//! Fixtures for the search tests: a real Store filled through `Store::write_file`
//! (one chunk per document) with real embeddings from the local model.
#![allow(dead_code)]

use claw_memory::dates::note_time_from_path;
use claw_memory::embed::{Embedder, LocalEmbedder};
use claw_memory::store::{FileRecord, NewChunk, Store, WriteMode};
use std::path::Path;

/// Load the real local model (panics with instructions when missing).
pub fn embedder() -> LocalEmbedder {
    let (dir, ort) = claw_testkit::model_paths();
    LocalEmbedder::load(Some(&dir), Some(&ort), 8).expect("load the local model")
}

/// One indexed document: (source, path, text). Each becomes one chunk covering all its lines.
pub type Doc<'a> = (&'a str, &'a str, &'a str);

/// Reset the store's index for `embedder` (keyword-only when `None`) and write `docs`.
pub fn fill(store: &mut Store, docs: &[Doc<'_>], embedder: Option<&dyn Embedder>) {
    let (model, dims) = match embedder {
        Some(e) => (e.model_id().to_string(), e.dims()),
        None => (String::new(), 0),
    };
    store.reset_index(&model, dims, "test").unwrap();
    let vectors: Vec<Option<Vec<f32>>> = match embedder {
        Some(e) => {
            let texts: Vec<&str> = docs.iter().map(|d| d.2).collect();
            e.embed(&texts).unwrap().into_iter().map(Some).collect()
        }
        None => vec![None; docs.len()],
    };
    for ((source, path, text), emb) in docs.iter().zip(vectors) {
        let lines = text.lines().count().max(1);
        let file = FileRecord {
            source: source.to_string(),
            path: path.to_string(),
            sha256: format!("sha-{path}"),
            mtime_ns: 1,
            size: text.len() as i64,
            indexed_bytes: 0,
            indexed_lines: 0,
        };
        let chunk = NewChunk {
            id: format!("{source}:{path}"),
            start_line: 1,
            end_line: lines,
            hash: format!("h-{source}-{path}"),
            text: text.to_string(),
            note_time: note_time_from_path(path),
            embedding: emb,
        };
        store
            .write_file(&file, &[chunk], WriteMode::Replace, &model)
            .unwrap();
    }
}

/// Write the documents' files under `root` too (for `memory get`).
pub fn write_files(root: &Path, docs: &[Doc<'_>]) {
    for (_, path, text) in docs {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}
