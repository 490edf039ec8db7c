//! The PostgreSQL store: connection pool (r2d2), timeouts, retry on transient
//! errors, versioned migrations from `migrations/postgres/` applied on connect
//! (a newer schema is refused), and the indexer's writes
//! (`claw_memory::index_storage::IndexStorage`).
//!
//! Every write unit (one file, one removal, one cache batch, a reset) is its own
//! transaction, retried whole on a transient error; each file's transaction takes
//! the transaction-level advisory lock of its (namespace, workspace, source), so
//! two writers of the same source serialise and writers of different sources run
//! concurrently. Group calls from the indexer are no-ops.

use claw_memory::index_storage::IndexStorage;
use claw_memory::store::{
    FileRecord, NewChunk, RecallHit, RecallRow, SourceRecord, StoreError, WriteMode, now_unix,
};
use pgvector::Vector;
use postgres::{Client, NoTls, Transaction};
use r2d2_postgres::PostgresConnectionManager;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

/// Sets one `meta` value of a namespace: `($1 namespace, $2 key, $3 value)`.
const UPSERT_META: &str = "INSERT INTO meta (namespace, key, value) VALUES ($1, $2, $3)
     ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value";

/// Numbered migrations, applied in order; `claw_schema.version` records the last applied.
const MIGRATIONS: &[(i64, &str)] = &[
    (
        1,
        include_str!("../../../migrations/postgres/0001_init.sql"),
    ),
    (
        2,
        include_str!("../../../migrations/postgres/0002_bm25.sql"),
    ),
    (
        3,
        include_str!("../../../migrations/postgres/0003_word_index.sql"),
    ),
    (
        4,
        include_str!("../../../migrations/postgres/0004_recalls.sql"),
    ),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// Attempts of one write or read unit before a transient error is returned.
const ATTEMPTS: u32 = 4;

/// Where and as whom to store.
#[derive(Debug, Clone)]
pub struct PgConfig {
    /// libpq-style URL or key=value string.
    pub url: String,
    /// The PostgreSQL schema holding claw's tables (created if missing).
    pub schema: String,
    /// The namespace this workspace writes into.
    pub namespace: String,
    /// The namespaces a search sees (the write namespace is always included).
    pub search_namespaces: Vec<String>,
    /// The stable id of the writing workspace (see [`crate::workspace_id`]).
    pub workspace: String,
    /// Most pooled connections.
    pub pool_size: u32,
    /// Connecting (and waiting for a pooled connection) gives up after this long.
    pub connect_timeout: Duration,
    /// Server-side `statement_timeout`.
    pub statement_timeout: Duration,
}

impl PgConfig {
    /// Defaults: schema `claw`, pool of 4, 5 s connect timeout, 60 s statements.
    pub fn new(
        url: impl Into<String>,
        namespace: impl Into<String>,
        workspace: impl Into<String>,
    ) -> PgConfig {
        PgConfig {
            url: url.into(),
            schema: "claw".into(),
            namespace: namespace.into(),
            search_namespaces: Vec::new(),
            workspace: workspace.into(),
            pool_size: 4,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(60),
        }
    }

    fn namespaces(&self) -> Vec<String> {
        let mut ns = vec![self.namespace.clone()];
        for n in &self.search_namespaces {
            if !ns.contains(n) {
                ns.push(n.clone());
            }
        }
        ns
    }
}

/// Errors of the PostgreSQL backend.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// The URL did not parse.
    #[error("invalid PostgreSQL connection string: {0}")]
    Config(#[source] postgres::Error),
    /// No pooled connection could be had (server down, timeout).
    #[error("cannot connect to PostgreSQL: {0}")]
    Pool(#[from] r2d2::Error),
    /// The first connection failed: the server's (or the network's) own answer,
    /// e.g. "connection refused", an unknown host, a rejected password.
    #[error("cannot connect to PostgreSQL: {0}")]
    Connect(String),
    /// A statement failed.
    #[error("postgres: {0}")]
    Postgres(#[from] postgres::Error),
    /// The schema name is not a plain identifier.
    #[error("invalid schema name {0:?} (letters, digits and _ only)")]
    SchemaName(String),
    /// A stored vector or value did not have the expected shape.
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

impl PgError {
    /// Whether retrying the unit on a fresh connection may succeed: a lost or
    /// refused connection, a serialisation failure or deadlock, a server shutdown,
    /// too many connections.
    pub fn is_transient(&self) -> bool {
        match self {
            PgError::Pool(_) => true,
            PgError::Postgres(e) => {
                if e.is_closed() {
                    return true;
                }
                match e.code() {
                    Some(c) => {
                        let c = c.code();
                        c.starts_with("08")
                            || matches!(
                                c,
                                "40001" | "40P01" | "57P01" | "57P02" | "57P03" | "53300"
                            )
                    }
                    // No SQLSTATE: an I/O error talking to the server.
                    None => e.as_db_error().is_none(),
                }
            }
            _ => false,
        }
    }
}

impl From<PgError> for StoreError {
    fn from(e: PgError) -> StoreError {
        StoreError::Backend(Box::new(e))
    }
}

/// Row counts for `claw memory status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PgStats {
    /// Files of this workspace in its namespace.
    pub files: i64,
    /// Chunks of this workspace.
    pub chunks: i64,
    /// Chunks of this workspace with a vector.
    pub vectors: i64,
    /// Chunks in every searched namespace (all workspaces).
    pub visible_chunks: i64,
    /// Embedding-cache entries of this namespace.
    pub cache_entries: i64,
    /// On-disk size of the schema's tables and indexes (every namespace).
    pub db_bytes: i64,
    /// The installed pgvector version (`extversion`).
    pub pgvector: String,
}

/// The memory index in a PostgreSQL database. A clone shares the pool (a
/// second handle for a writer beside readers; the store keeps no other state).
#[derive(Clone)]
pub struct PgStore {
    pub(crate) pool: r2d2::Pool<PostgresConnectionManager<NoTls>>,
    pub(crate) cfg: PgConfig,
    pub(crate) namespaces: Vec<String>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("schema", &self.cfg.schema)
            .field("namespace", &self.cfg.namespace)
            .field("workspace", &self.cfg.workspace)
            .finish()
    }
}

fn valid_ident(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
}

impl PgStore {
    /// Connect (pool), create the schema and extensions if needed, apply pending
    /// migrations, refuse a schema newer than this build.
    pub fn connect(cfg: PgConfig) -> Result<PgStore, StoreError> {
        if !valid_ident(&cfg.schema) {
            return Err(PgError::SchemaName(cfg.schema.clone()).into());
        }
        let mut pg: postgres::Config = cfg.url.parse().map_err(PgError::Config)?;
        // A URL's own `application_name` wins (operators name their connections).
        if pg.get_application_name().is_none() {
            pg.application_name("claw");
        }
        pg.connect_timeout(cfg.connect_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(30))
            .options(&format!(
                "-c search_path={},public -c statement_timeout={} -c lock_timeout={}",
                cfg.schema,
                cfg.statement_timeout.as_millis(),
                cfg.statement_timeout.as_millis()
            ));
        // One direct connection first: an unreachable server fails within the
        // connect timeout with its real cause, not after the pool's retries as
        // "timed out waiting for connection".
        pg.connect(NoTls)
            .map_err(|e| PgError::Connect(claw_memory::error_chain(&e)))?;
        let manager = PostgresConnectionManager::new(pg, NoTls);
        let pool = r2d2::Pool::builder()
            .max_size(cfg.pool_size.max(1))
            .min_idle(Some(0))
            .connection_timeout(cfg.connect_timeout)
            .test_on_check_out(false)
            .build(manager)
            .map_err(PgError::Pool)?;
        let store = PgStore {
            namespaces: cfg.namespaces(),
            pool,
            cfg,
        };
        store.migrate()?;
        Ok(store)
    }

    /// The configuration it runs with.
    pub fn config(&self) -> &PgConfig {
        &self.cfg
    }

    /// The namespaces a search sees.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let schema = self.cfg.schema.clone();
        let found = self.with_tx(|tx| {
            // One migrator at a time across every process.
            tx.execute(
                "SELECT pg_advisory_xact_lock(hashtext('claw-memory-migrate'))",
                &[],
            )?;
            tx.batch_execute(&format!(
                "CREATE EXTENSION IF NOT EXISTS vector WITH SCHEMA public;
                 CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
                 CREATE SCHEMA IF NOT EXISTS {schema};
                 CREATE TABLE IF NOT EXISTS {schema}.claw_schema (version BIGINT NOT NULL);"
            ))?;
            let current: Option<i64> = tx
                .query_opt(
                    &format!("SELECT max(version) FROM {schema}.claw_schema"),
                    &[],
                )?
                .and_then(|r| r.get(0));
            let current = current.unwrap_or(0);
            if current > SCHEMA_VERSION {
                return Ok(current);
            }
            for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
                tx.batch_execute(sql)?;
                tx.execute(
                    &format!("INSERT INTO {schema}.claw_schema (version) VALUES ($1)"),
                    &[version],
                )?;
            }
            Ok(current)
        })?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: PathBuf::from(format!("postgres schema {schema}")),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// Run `f` on a pooled connection, retrying transient failures on a fresh one.
    pub(crate) fn with_client<T>(
        &self,
        mut f: impl FnMut(&mut Client) -> Result<T, PgError>,
    ) -> Result<T, PgError> {
        let mut attempt = 0;
        loop {
            let res = self
                .pool
                .get()
                .map_err(PgError::Pool)
                .and_then(|mut c| f(&mut c));
            match res {
                Err(e) if e.is_transient() && attempt + 1 < ATTEMPTS => {
                    attempt += 1;
                    tracing::warn!("postgres: transient error, retry {attempt}: {e}");
                    std::thread::sleep(Duration::from_millis(100 << attempt));
                }
                other => return other,
            }
        }
    }

    /// Run `f` in one transaction (committed when it returns Ok), retried whole
    /// on a transient error: the unit is all-or-nothing.
    pub(crate) fn with_tx<T>(
        &self,
        mut f: impl FnMut(&mut Transaction<'_>) -> Result<T, PgError>,
    ) -> Result<T, PgError> {
        self.with_client(|c| {
            let mut tx = c.transaction()?;
            let out = f(&mut tx)?;
            tx.commit()?;
            Ok(out)
        })
    }

    fn ns(&self) -> &str {
        &self.cfg.namespace
    }

    fn ws(&self) -> &str {
        &self.cfg.workspace
    }

    /// Register a notes folder for this workspace.
    pub fn add_source(&self, name: &str, root: &std::path::Path) -> Result<(), StoreError> {
        let root = root.to_string_lossy().to_string();
        self.with_client(|c| {
            c.execute(
                "INSERT INTO sources (namespace, workspace, name, root, added_at) VALUES ($1, $2, $3, $4, $5)",
                &[&self.ns(), &self.ws(), &name, &root, &now_unix()],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    /// Point this workspace's source `name` at `root` (a folder moved or copied:
    /// its files' rows are relative to the root and stay). False when unknown.
    pub fn set_source_root(&self, name: &str, root: &std::path::Path) -> Result<bool, StoreError> {
        let root = root.to_string_lossy().to_string();
        Ok(self.with_client(|c| {
            Ok(c.execute(
                "UPDATE sources SET root = $4 WHERE namespace = $1 AND workspace = $2 AND name = $3",
                &[&self.ns(), &self.ws(), &name, &root],
            )? > 0)
        })?)
    }

    /// Drop one of this workspace's sources and its rows. Returns (files, chunks)
    /// removed, or None when unknown.
    pub fn remove_source(&self, name: &str) -> Result<Option<(usize, usize)>, StoreError> {
        Ok(self.with_tx(|tx| {
            let n = tx.execute(
                "DELETE FROM sources WHERE namespace = $1 AND workspace = $2 AND name = $3",
                &[&self.ns(), &self.ws(), &name],
            )?;
            if n == 0 {
                return Ok(None);
            }
            let chunks = tx.execute(
                "DELETE FROM chunks WHERE namespace = $1 AND workspace = $2 AND source = $3",
                &[&self.ns(), &self.ws(), &name],
            )?;
            let files = tx.execute(
                "DELETE FROM files WHERE namespace = $1 AND workspace = $2 AND source = $3",
                &[&self.ns(), &self.ws(), &name],
            )?;
            Ok(Some((files as usize, chunks as usize)))
        })?)
    }

    /// Delete every row of this store's namespace (all workspaces): files,
    /// chunks, sources, meta, embedding cache. For throw-away namespaces (eval).
    pub fn drop_namespace(&self) -> Result<(), StoreError> {
        self.with_tx(|tx| {
            for t in [
                "chunks",
                "files",
                "sources",
                "meta",
                "embedding_cache",
                "recalls",
            ] {
                tx.execute(
                    &format!("DELETE FROM {t} WHERE namespace = $1"),
                    &[&self.ns()],
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Count one recall (`n` of them) of each hit at `at` (unix seconds), as
    /// this workspace's, in one transaction.
    pub fn record_recalls(&self, hits: &[(RecallHit, i64)], at: i64) -> Result<(), StoreError> {
        if hits.is_empty() {
            return Ok(());
        }
        self.with_tx(|tx| {
            let up = tx.prepare(
                "INSERT INTO recalls (namespace, workspace, source, path, start_line, end_line,
                                      count, first_at, last_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8)
                 ON CONFLICT (namespace, workspace, source, path, start_line, end_line)
                 DO UPDATE SET count = recalls.count + excluded.count,
                   last_at = greatest(recalls.last_at, excluded.last_at)",
            )?;
            for (h, n) in hits {
                let (a, b) = (h.start_line as i32, h.end_line as i32);
                tx.execute(
                    &up,
                    &[&self.ns(), &self.ws(), &h.source, &h.path, &a, &b, n, &at],
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// This workspace's recall counts of the chunks of `paths` in `source`
    /// (every file of it when `paths` is empty), by path and line.
    pub fn recall_rows(
        &self,
        source: &str,
        paths: &[String],
    ) -> Result<Vec<RecallRow>, StoreError> {
        Ok(self.with_client(|c| {
            let rows = c.query(
                "SELECT source, path, start_line, end_line, count, first_at, last_at FROM recalls
                 WHERE namespace = $1 AND workspace = $2 AND source = $3
                   AND (cardinality($4::text[]) = 0 OR path = ANY($4))
                 ORDER BY path, start_line, end_line",
                &[&self.ns(), &self.ws(), &source, &paths],
            )?;
            Ok(rows
                .iter()
                .map(|r| RecallRow {
                    hit: RecallHit {
                        source: r.get(0),
                        path: r.get(1),
                        start_line: r.get::<_, i32>(2).max(0) as usize,
                        end_line: r.get::<_, i32>(3).max(0) as usize,
                    },
                    count: r.get(4),
                    first_at: r.get(5),
                    last_at: r.get(6),
                })
                .collect())
        })?)
    }

    /// Forget this workspace's recalls last seen before `before`; how many.
    pub fn prune_recalls(&self, before: i64) -> Result<usize, StoreError> {
        Ok(self.with_client(|c| {
            Ok(c.execute(
                "DELETE FROM recalls WHERE namespace = $1 AND workspace = $2 AND last_at < $3",
                &[&self.ns(), &self.ws(), &before],
            )? as usize)
        })?)
    }

    /// Row counts.
    pub fn stats(&self) -> Result<PgStats, StoreError> {
        Ok(self.with_client(|c| {
            let r = c.query_one(
                "SELECT (SELECT count(*) FROM files WHERE namespace = $1 AND workspace = $2),
                        (SELECT count(*) FROM chunks WHERE namespace = $1 AND workspace = $2),
                        (SELECT count(*) FROM chunks WHERE namespace = $1 AND workspace = $2
                            AND embedding IS NOT NULL),
                        (SELECT count(*) FROM chunks WHERE namespace = ANY($3)),
                        (SELECT count(*) FROM embedding_cache WHERE namespace = $1),
                        (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
                           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                          WHERE n.nspname = current_schema() AND c.relkind = 'r'),
                        (SELECT coalesce(extversion, '') FROM pg_extension WHERE extname = 'vector')",
                &[&self.ns(), &self.ws(), &self.namespaces],
            )?;
            Ok(PgStats {
                files: r.get(0),
                chunks: r.get(1),
                vectors: r.get(2),
                visible_chunks: r.get(3),
                cache_entries: r.get(4),
                db_bytes: r.get(5),
                pgvector: r.get::<_, Option<String>>(6).unwrap_or_default(),
            })
        })?)
    }

    /// Cross-table invariants: no chunk without its file row, every vector of
    /// the index's dimension. Returns problems (empty = ok).
    pub fn check_consistency(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.with_client(|c| {
            let mut problems = Vec::new();
            let orphans: i64 = c
                .query_one(
                    "SELECT count(*) FROM chunks ch WHERE NOT EXISTS (SELECT 1 FROM files f
                       WHERE f.namespace = ch.namespace AND f.workspace = ch.workspace
                         AND f.source = ch.source AND f.path = ch.path)",
                    &[],
                )?
                .get(0);
            if orphans > 0 {
                problems.push(format!("{orphans} chunks without a file row"));
            }
            let bad: i64 = c
                .query_one(
                    "SELECT count(*) FROM chunks WHERE embedding IS NOT NULL
                       AND vector_dims(embedding) <> dims",
                    &[],
                )?
                .get(0);
            if bad > 0 {
                problems.push(format!("{bad} vectors of the wrong dimension"));
            }
            Ok(problems)
        })?)
    }

    /// The advisory-lock key of one source of this workspace.
    fn source_lock_key(&self, source: &str) -> i64 {
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(format!("{}\0{}\0{source}", self.ns(), self.ws()).as_bytes());
        i64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
    }

    /// The HNSW index name for vectors of `dims` dimensions.
    pub(crate) fn hnsw_name(dims: usize) -> String {
        format!("chunks_hnsw_{dims}")
    }

    fn ensure_hnsw(tx: &mut Transaction<'_>, dims: usize) -> Result<(), PgError> {
        tx.batch_execute(&format!(
            "CREATE INDEX IF NOT EXISTS {} ON chunks USING hnsw ((embedding::vector({dims})) vector_cosine_ops)
             WHERE dims = {dims}",
            Self::hnsw_name(dims)
        ))?;
        Ok(())
    }

    /// Insert a file's chunks in one statement (`unnest` of column arrays: one
    /// round trip per file, not per chunk); `models[i]` is chunk i's model.
    pub(crate) fn insert_chunks(
        tx: &mut Transaction<'_>,
        ns: &str,
        ws: &str,
        file: &FileRecord,
        chunks: &[&NewChunk],
        models: &[&str],
        now: i64,
    ) -> Result<(), PgError> {
        if chunks.is_empty() {
            return Ok(());
        }
        let ids: Vec<&str> = chunks.iter().map(|c| c.id.as_str()).collect();
        let starts: Vec<i32> = chunks.iter().map(|c| c.start_line as i32).collect();
        let ends: Vec<i32> = chunks.iter().map(|c| c.end_line as i32).collect();
        let hashes: Vec<&str> = chunks.iter().map(|c| c.hash.as_str()).collect();
        let texts: Vec<&str> = chunks.iter().map(|c| c.text.as_str()).collect();
        let contexts: Vec<&str> = chunks.iter().map(|c| c.context.as_str()).collect();
        // The word index's text, as SQLite's `chunks_fts` receives it.
        let words: Vec<String> = chunks
            .iter()
            .map(|c| claw_memory::words::index_words(&c.context, &c.text))
            .collect();
        let times: Vec<Option<i64>> = chunks.iter().map(|c| c.note_time).collect();
        let dims: Vec<Option<i32>> = chunks
            .iter()
            .map(|c| c.embedding.as_ref().map(|e| e.len() as i32))
            .collect();
        let embs: Vec<Option<Vector>> = chunks
            .iter()
            .map(|c| c.embedding.clone().map(Vector::from))
            .collect();
        tx.execute(
            "INSERT INTO chunks
               (namespace, workspace, source, path, id, start_line, end_line, hash, model, text,
                updated_at, note_time, dims, embedding, context, tsv, dl)
             SELECT $1, $2, $3, $4, u.id, u.sl, u.el, u.hash, u.model, u.text, $5, u.nt, u.dims, u.emb,
                    u.ctx, claw_words(u.words), claw_tsv_tokens(claw_words(u.words))
             FROM unnest($6::text[], $7::int4[], $8::int4[], $9::text[], $10::text[], $11::text[],
                         $12::int8[], $13::int4[], $14::vector[], $15::text[], $16::text[])
                  AS u(id, sl, el, hash, model, text, nt, dims, emb, ctx, words)
             ON CONFLICT (namespace, workspace, id) DO UPDATE SET
               source = excluded.source, path = excluded.path, start_line = excluded.start_line,
               end_line = excluded.end_line, hash = excluded.hash, model = excluded.model,
               text = excluded.text, updated_at = excluded.updated_at,
               note_time = excluded.note_time, dims = excluded.dims, embedding = excluded.embedding,
               context = excluded.context, tsv = excluded.tsv, dl = excluded.dl",
            &[
                &ns,
                &ws,
                &file.source,
                &file.path,
                &now,
                &ids,
                &starts,
                &ends,
                &hashes,
                &models,
                &texts,
                &times,
                &dims,
                &embs,
                &contexts,
                &words,
            ],
        )?;
        Ok(())
    }

    pub(crate) fn upsert_file(
        tx: &mut Transaction<'_>,
        ns: &str,
        ws: &str,
        file: &FileRecord,
        now: i64,
    ) -> Result<(), PgError> {
        tx.execute(
            "INSERT INTO files (namespace, workspace, source, path, sha256, mtime, size, indexed_at,
                                indexed_bytes, indexed_lines)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
             ON CONFLICT (namespace, workspace, source, path) DO UPDATE SET
               sha256 = excluded.sha256, mtime = excluded.mtime, size = excluded.size,
               indexed_at = excluded.indexed_at, indexed_bytes = excluded.indexed_bytes,
               indexed_lines = excluded.indexed_lines",
            &[
                &ns,
                &ws,
                &file.source,
                &file.path,
                &file.sha256,
                &file.mtime_ns,
                &file.size,
                &now,
                &file.indexed_bytes,
                &file.indexed_lines,
            ],
        )?;
        Ok(())
    }

    /// Lock one source of this workspace for the rest of the transaction.
    pub(crate) fn lock_source(
        &self,
        tx: &mut Transaction<'_>,
        source: &str,
    ) -> Result<(), PgError> {
        tx.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&self.source_lock_key(source)],
        )?;
        Ok(())
    }
}

fn row_to_file(r: &postgres::Row) -> FileRecord {
    FileRecord {
        source: r.get(0),
        path: r.get(1),
        sha256: r.get(2),
        mtime_ns: r.get(3),
        size: r.get(4),
        indexed_bytes: r.get(5),
        indexed_lines: r.get(6),
    }
}

const FILE_COLS: &str = "source, path, sha256, mtime, size, indexed_bytes, indexed_lines";

impl IndexStorage for PgStore {
    fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        Ok(self.with_client(|c| {
            Ok(c.query_opt(
                "SELECT value FROM meta WHERE namespace = $1 AND key = $2",
                &[&self.ns(), &key],
            )?
            .map(|r| r.get(0)))
        })?)
    }

    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        self.with_client(|c| {
            c.execute(UPSERT_META, &[&self.ns(), &key, &value])?;
            Ok(())
        })?;
        Ok(())
    }

    fn vec_dims(&self) -> Result<Option<usize>, StoreError> {
        Ok(self
            .meta("dims")?
            .and_then(|d| d.parse().ok())
            .filter(|d| *d > 0))
    }

    fn vector_index_available(&self) -> bool {
        true
    }

    fn has_vec_tables(&self) -> Result<bool, StoreError> {
        let Some(dims) = self.vec_dims()? else {
            return Ok(false);
        };
        let name = Self::hnsw_name(dims);
        Ok(self.with_client(|c| {
            Ok(c.query_opt(
                "SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = $2",
                &[&self.cfg.schema, &name],
            )?
            .is_some())
        })?)
    }

    /// Drops only this workspace's rows in the namespace: other writers keep theirs.
    fn reset_index(
        &mut self,
        model: &str,
        dims: usize,
        chunker_version: &str,
    ) -> Result<(), StoreError> {
        self.with_tx(|tx| {
            tx.execute(
                "DELETE FROM files WHERE namespace = $1 AND workspace = $2",
                &[&self.ns(), &self.ws()],
            )?;
            if dims > 0 {
                Self::ensure_hnsw(tx, dims)?;
            }
            for (k, v) in [
                ("model", model.to_string()),
                ("dims", dims.to_string()),
                ("chunker_version", chunker_version.to_string()),
            ] {
                tx.execute(UPSERT_META, &[&self.ns(), &k, &v])?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// In place: the reset and the pass are this writer's own rows, each file
    /// its own transaction (a kill leaves the files written so far).
    fn rebuild(
        &mut self,
        model: &str,
        dims: usize,
        chunker_version: &str,
        fill: &mut dyn FnMut(&mut dyn IndexStorage) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.reset_index(model, dims, chunker_version)?;
        fill(self)
    }

    fn file_records(&self, source: &str) -> Result<HashMap<String, FileRecord>, StoreError> {
        Ok(self.with_client(|c| {
            let rows = c.query(
                &format!(
                    "SELECT {FILE_COLS} FROM files WHERE namespace = $1 AND workspace = $2 AND source = $3"
                ),
                &[&self.ns(), &self.ws(), &source],
            )?;
            Ok(rows
                .iter()
                .map(row_to_file)
                .map(|f| (f.path.clone(), f))
                .collect())
        })?)
    }

    fn file_record(&self, source: &str, path: &str) -> Result<Option<FileRecord>, StoreError> {
        Ok(self.with_client(|c| {
            Ok(c.query_opt(
                &format!(
                    "SELECT {FILE_COLS} FROM files
                     WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4"
                ),
                &[&self.ns(), &self.ws(), &source, &path],
            )?
            .as_ref()
            .map(row_to_file))
        })?)
    }

    fn indexed_sources(&self) -> Result<Vec<String>, StoreError> {
        Ok(self.with_client(|c| {
            Ok(c.query(
                "SELECT DISTINCT source FROM files WHERE namespace = $1 AND workspace = $2",
                &[&self.ns(), &self.ws()],
            )?
            .iter()
            .map(|r| r.get(0))
            .collect())
        })?)
    }

    fn write_file(
        &mut self,
        file: &FileRecord,
        chunks: &[NewChunk],
        mode: WriteMode,
        model: &str,
    ) -> Result<(), StoreError> {
        let now = now_unix();
        self.with_tx(|tx| {
            self.lock_source(tx, &file.source)?;
            Self::upsert_file(tx, self.ns(), self.ws(), file, now)?;
            if mode == WriteMode::Replace {
                tx.execute(
                    "DELETE FROM chunks WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4",
                    &[&self.ns(), &self.ws(), &file.source, &file.path],
                )?;
            }
            let refs: Vec<&NewChunk> = chunks.iter().collect();
            let models = vec![model; chunks.len()];
            Self::insert_chunks(tx, self.ns(), self.ws(), file, &refs, &models, now)
        })?;
        Ok(())
    }

    fn touch_file(
        &self,
        source: &str,
        path: &str,
        mtime_ns: i64,
        size: i64,
    ) -> Result<(), StoreError> {
        self.with_client(|c| {
            c.execute(
                "UPDATE files SET mtime = $5, size = $6
                 WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4",
                &[&self.ns(), &self.ws(), &source, &path, &mtime_ns, &size],
            )?;
            Ok(())
        })?;
        Ok(())
    }

    fn remove_file(&mut self, source: &str, path: &str) -> Result<usize, StoreError> {
        Ok(self.with_tx(|tx| {
            self.lock_source(tx, source)?;
            let n = tx.execute(
                "DELETE FROM chunks WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4",
                &[&self.ns(), &self.ws(), &source, &path],
            )?;
            tx.execute(
                "DELETE FROM files WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4",
                &[&self.ns(), &self.ws(), &source, &path],
            )?;
            Ok(n as usize)
        })?)
    }

    fn chunk_count(&self, source: &str, path: &str) -> Result<usize, StoreError> {
        Ok(self.with_client(|c| {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM chunks
                     WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4",
                    &[&self.ns(), &self.ws(), &source, &path],
                )?
                .get(0);
            Ok(n as usize)
        })?)
    }

    fn cached_embeddings(
        &self,
        provider: &str,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>, StoreError> {
        if hashes.is_empty() {
            return Ok(HashMap::new());
        }
        let hashes: Vec<&str> = hashes.to_vec();
        Ok(self.with_client(|c| {
            let mut out = HashMap::new();
            for r in c.query(
                "SELECT hash, embedding FROM embedding_cache
                 WHERE namespace = $1 AND provider = $2 AND model = $3 AND hash = ANY($4)",
                &[&self.ns(), &provider, &model, &hashes],
            )? {
                let v: Vector = r.get(1);
                out.insert(r.get::<_, String>(0), v.to_vec());
            }
            let missing: Vec<&str> = hashes
                .iter()
                .copied()
                .filter(|h| !out.contains_key(*h))
                .collect();
            if !missing.is_empty() {
                for r in c.query(
                    "SELECT DISTINCT ON (hash) hash, embedding FROM chunks
                     WHERE namespace = $1 AND model = $2 AND hash = ANY($3) AND embedding IS NOT NULL",
                    &[&self.ns(), &model, &missing],
                )? {
                    let v: Vector = r.get(1);
                    out.insert(r.get::<_, String>(0), v.to_vec());
                }
            }
            Ok(out)
        })?)
    }

    fn put_cache(
        &mut self,
        provider: &str,
        model: &str,
        entries: &[(String, Vec<f32>)],
    ) -> Result<(), StoreError> {
        let now = now_unix();
        self.with_tx(|tx| {
            let stmt = tx.prepare(
                "INSERT INTO embedding_cache (namespace, provider, model, hash, embedding, dims, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (namespace, provider, model, hash) DO UPDATE SET updated_at = excluded.updated_at",
            )?;
            for (h, v) in entries {
                tx.execute(
                    &stmt,
                    &[
                        &self.ns(),
                        &provider,
                        &model,
                        h,
                        &Vector::from(v.clone()),
                        &(v.len() as i32),
                        &now,
                    ],
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }

    fn prune_cache(&self, max: usize) -> Result<usize, StoreError> {
        Ok(self.with_client(|c| {
            let n: i64 = c
                .query_one(
                    "SELECT count(*) FROM embedding_cache WHERE namespace = $1",
                    &[&self.ns()],
                )?
                .get(0);
            let excess = n - max as i64;
            if excess <= 0 {
                return Ok(0);
            }
            Ok(c.execute(
                "DELETE FROM embedding_cache WHERE (namespace, provider, model, hash) IN (
                   SELECT namespace, provider, model, hash FROM embedding_cache
                   WHERE namespace = $1 ORDER BY updated_at ASC LIMIT $2)",
                &[&self.ns(), &excess],
            )? as usize)
        })?)
    }

    fn sources(&self) -> Result<Vec<SourceRecord>, StoreError> {
        Ok(self.with_client(|c| {
            Ok(c.query(
                "SELECT name, root, added_at, follow_symlinks_outside FROM sources
                 WHERE namespace = $1 AND workspace = $2 ORDER BY name",
                &[&self.ns(), &self.ws()],
            )?
            .iter()
            .map(|r| SourceRecord {
                name: r.get(0),
                root: PathBuf::from(r.get::<_, String>(1)),
                added_at: r.get(2),
                follow_symlinks_outside: r.get(3),
            })
            .collect())
        })?)
    }

    fn begin_group(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn commit_group(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn rollback_group(&mut self) {}
}
