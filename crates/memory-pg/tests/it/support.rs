//! Helpers: the server URL and a private schema per test
//! (`claw_testkit::pg`), its PostgreSQL store, and the PostgreSQL factory for the shared
//! engine suite (whose fixtures — docs, `fill`, the model — live in
//! `claw_testkit::engine_suite`).
#![allow(dead_code)]

use claw_memory_pg::{PgConfig, PgStore};
pub use claw_testkit::engine_suite::{Doc, Fixture, embedder, fill};

pub use claw_testkit::pg::TestSchema as Schema;

/// The PostgreSQL side of a test schema: a backend config and store in it.
pub trait SchemaStore {
    fn config(&self, namespace: &str, workspace: &str) -> PgConfig;
    fn store(&self, namespace: &str, workspace: &str) -> PgStore;
}

impl SchemaStore for Schema {
    fn config(&self, namespace: &str, workspace: &str) -> PgConfig {
        let mut cfg = PgConfig::new(&self.url, namespace, workspace);
        cfg.schema = self.name.clone();
        cfg
    }

    fn store(&self, namespace: &str, workspace: &str) -> PgStore {
        PgStore::connect(self.config(namespace, workspace)).unwrap()
    }
}

/// The PostgreSQL backend for the shared engine suite (`claw_testkit::engine_suite`):
/// an empty store in a private schema (dropped after the store), namespace `suite`.
pub fn postgres(tag: &str) -> Option<Fixture> {
    let schema = Schema::new(&format!("s_{tag}"))?;
    let store = schema.store("suite", "ws-a");
    Some(Fixture {
        backend: "postgres",
        store: Box::new(store),
        dir: tempfile::tempdir().unwrap(),
        guard: Some(Box::new(schema)),
    })
}
