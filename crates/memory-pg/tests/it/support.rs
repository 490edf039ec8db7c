//! Helpers: the server URL (failing under CI when missing), a private schema
//! per test (dropped at the end), the real embedding model, the fixture docs.
#![allow(dead_code)]

use claw_memory::dates::note_time_from_path;
use claw_memory::embed::{Embedder, LocalEmbedder};
use claw_memory::index_storage::IndexStorage;
use claw_memory::store::{FileRecord, NewChunk, WriteMode};
use claw_memory_pg::{PgConfig, PgStore};

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

/// The real local model.
pub fn embedder() -> LocalEmbedder {
    let (dir, ort) = claw_testkit::model_paths();
    LocalEmbedder::load(Some(&dir), Some(&ort), 8).expect("load the local model")
}

/// One indexed document: (source, path, text), one chunk each.
pub type Doc<'a> = (&'a str, &'a str, &'a str);

/// Reset the index for `embedder` and write `docs` through the IndexStorage boundary.
pub fn fill(store: &mut dyn IndexStorage, docs: &[Doc<'_>], embedder: Option<&dyn Embedder>) {
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
            end_line: text.lines().count().max(1),
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
