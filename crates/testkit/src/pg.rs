//! The PostgreSQL server the `memory.backend: postgres` tests run against
//! (`. scripts/setup-postgres.sh` starts one and exports `CLAW_PG_URL`): its
//! URL — a failure under `CI=true` when missing, never a silent skip — and a
//! schema private to one test, dropped when its guard goes (also when the test
//! panics), with the `claw` config file that selects it.

use std::path::{Path, PathBuf};

/// `CLAW_PG_URL`, or None (with a loud message) outside CI; under `CI=true` a
/// missing server is a failure.
pub fn pg_url() -> Option<String> {
    match std::env::var("CLAW_PG_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            let msg = "CLAW_PG_URL is not set: start PostgreSQL with `. scripts/setup-postgres.sh` \
                       (scripts/test.sh does) to run the PostgreSQL backend tests";
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{msg}");
            eprintln!("NOT RUN: {msg}");
            None
        }
    }
}

/// A schema private to one test (`t_<tag>_<pid>`), emptied on creation and
/// dropped when the guard goes.
pub struct TestSchema {
    /// The server's URL.
    pub url: String,
    /// The schema's name.
    pub name: String,
}

impl TestSchema {
    /// A fresh schema, or None when no server is configured (outside CI).
    pub fn new(tag: &str) -> Option<TestSchema> {
        let url = pg_url()?;
        let name = format!("t_{}_{}", tag, std::process::id());
        let mut c = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        c.batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
            .unwrap();
        Some(TestSchema { url, name })
    }

    /// A fresh schema ([`TestSchema::new`]), a temporary directory, and in it the
    /// config file selecting the schema with the namespace `team`
    /// ([`TestSchema::claw_config`]).
    pub fn with_team_config(tag: &str) -> Option<(TestSchema, tempfile::TempDir, PathBuf)> {
        let pgs = TestSchema::new(tag)?;
        let dir = tempfile::tempdir().unwrap();
        let cfg = pgs.claw_config(dir.path(), "team");
        Some((pgs, dir, cfg))
    }

    /// A client whose `search_path` is this schema.
    pub fn client(&self) -> postgres::Client {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls).unwrap();
        c.batch_execute(&format!("SET search_path = {}, public", self.name))
            .unwrap();
        c
    }

    /// Writes `<dir>/config.json` selecting this schema as `memory.backend`
    /// (`url_env: CLAW_PG_URL`, the given namespace) and returns its path.
    pub fn claw_config(&self, dir: &Path, namespace: &str) -> PathBuf {
        let p = dir.join("config.json");
        let cfg = serde_json::json!({"memory": {"backend": {
            "kind": "postgres", "url_env": "CLAW_PG_URL",
            "namespace": namespace, "schema": self.name,
        }}});
        std::fs::write(&p, cfg.to_string()).unwrap();
        p
    }
}

impl Drop for TestSchema {
    fn drop(&mut self) {
        if let Ok(mut c) = postgres::Client::connect(&self.url, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}
