//! Harness for the ranking measurements (`tests/ranking_*.rs`): the committed query
//! sets (`fixtures/paraphrase/`, `fixtures/garden-queries/`), workspaces indexed by
//! the real indexer, and searches through the library's `engine::search` with
//! default settings at the tests' fixed "now" (so one embedder load serves every
//! query). The figures are printed as Markdown tables before anything is asserted.
#![allow(dead_code)]

pub mod garden;
pub mod queries;

pub use queries::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The paraphrase fixture's notes folder.
pub fn paraphrase_notes() -> PathBuf {
    repo().join("fixtures/paraphrase/notes")
}

/// Copy a directory tree (files only).
pub fn copy_tree(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let rel = e.path().strip_prefix(from).unwrap();
        let dest = to.join(rel);
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Run a `claw` command and insist on exit 0.
pub fn ok(cmd: &mut Command) -> std::process::Output {
    let o = cmd.output().expect("run claw");
    assert!(
        o.status.success(),
        "{:?} failed: {}\n{}",
        cmd,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}
