//! Fixtures for the search tests: a real store filled through the `IndexStorage`
//! boundary (one chunk per document) with real embeddings from the local model.
//! They live in `claw_testkit::engine_suite` (shared with the PostgreSQL backend's
//! tests); this module re-exports them for the modules that `use` it.
#![allow(dead_code, unused_imports)]

pub use claw_testkit::engine_suite::{Doc, embedder, embedder_at, fill, write_files};
