//! Helpers: the server URL (failing under CI when missing), a private schema
//! per test (dropped at the end), and the PostgreSQL factory for the shared
//! engine suite (whose fixtures — docs, `fill`, the model — live in
//! `claw_testkit::engine_suite`).
#![allow(dead_code)]

use claw_memory_pg::{PgConfig, PgStore};
pub use claw_testkit::engine_suite::{Doc, Fixture, embedder, fill};

/// `CLAW_PG_URL`, or None (with a loud message) outside CI; under `CI=true` a
/// missing server is a failure, never a silent skip.
pub fn pg_url() -> Option<String> {
    match std::env::var("CLAW_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            let msg = "CLAW_PG_URL is not set: start PostgreSQL with `. scripts/setup-postgres.sh` \
                       (scripts/test.sh does) to run the PostgreSQL backend tests";
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("{msg}");
            }
            eprintln!("NOT RUN: {msg}");
            None
        }
    }
}

/// A schema private to one test, dropped when the guard goes.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new(tag: &str) -> Option<Schema> {
        let url = pg_url()?;
        let name = format!("t_{}_{}", tag, std::process::id());
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .unwrap();
        Some(Schema { url, name })
    }

    pub fn config(&self, namespace: &str, workspace: &str) -> PgConfig {
        let mut cfg = PgConfig::new(&self.url, namespace, workspace);
        cfg.schema = self.name.clone();
        cfg
    }

    pub fn store(&self, namespace: &str, workspace: &str) -> PgStore {
        PgStore::connect(self.config(namespace, workspace)).unwrap()
    }

    pub fn client(&self) -> postgres::Client {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.batch_execute(&format!("SET search_path = {}, public", self.name))
            .unwrap();
        c
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
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
