//! The PostgreSQL store: connection pool (r2d2; each connection keeps its
//! prepared statements), timeouts, retry on transient errors, versioned
//! migrations from `migrations/postgres/` applied on connect (a newer schema is
//! refused), and the indexer's writes (`claw_memory::index_storage::IndexStorage`).
//!
//! Every write unit (one file, one removal, one cache batch, a reset) is its own
//! transaction, retried whole on a transient error; inside the indexer's write
//! group the files written are held and sent together — one transaction, one
//! statement per table — when the group commits, every [`GROUP_MAX_CHUNKS`]
//! chunks, or before a read of the rows (`PgStore::flush`). A transaction
//! writing a source takes the transaction-level advisory lock of its (namespace,
//! workspace, source), so two writers of the same source serialise and writers
//! of different sources run concurrently. A reset into an empty table drops the
//! search indexes and builds them once after the load ([`PgStore::finish_bulk`]).

use claw_memory::index_storage::IndexStorage;
use claw_memory::store::{
    FileRecord, NewChunk, RecallHit, RecallRow, SourceRecord, StoreError, WriteMode, now_unix,
};
use pgvector::Vector;
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement, Transaction};
use r2d2_postgres::PostgresConnectionManager;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// A pooled connection with its prepared statements (parsed and planned once per
/// connection, not per query: the search path's statements are few and fixed) and
/// the HNSW search settings it last set.
pub(crate) struct Conn {
    client: Client,
    statements: HashMap<String, Statement>,
    /// The session's `hnsw.ef_search`, once this connection set it.
    pub(crate) ef_search: Option<usize>,
}

impl Conn {
    /// The prepared statement for `sql`, prepared on first use on this connection.
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// `Client::query` with this connection's prepared statement for `sql`.
    pub(crate) fn query(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query(&s, params)
    }

    /// `Client::query_one` with this connection's prepared statement for `sql`.
    pub(crate) fn query_one(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_one(&s, params)
    }

    /// `Client::query_opt` with this connection's prepared statement for `sql`.
    pub(crate) fn query_opt(
        &mut self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, postgres::Error> {
        let s = self.statement(sql)?;
        self.client.query_opt(&s, params)
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

/// The pool's manager: `r2d2_postgres`'s connections, each with a statement cache.
#[derive(Debug)]
pub(crate) struct Manager(PostgresConnectionManager<NoTls>);

impl r2d2::ManageConnection for Manager {
    type Connection = Conn;
    type Error = postgres::Error;

    fn connect(&self) -> Result<Conn, postgres::Error> {
        Ok(Conn {
            client: self.0.connect()?,
            statements: HashMap::new(),
            ef_search: None,
        })
    }

    fn is_valid(&self, conn: &mut Conn) -> Result<(), postgres::Error> {
        self.0.is_valid(&mut conn.client)
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        self.0.has_broken(&mut conn.client)
    }
}

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
    (
        5,
        include_str!("../../../migrations/postgres/0005_note_time.sql"),
    ),
    (
        6,
        include_str!("../../../migrations/postgres/0006_postings.sql"),
    ),
];

/// The search indexes a bulk load into an empty table builds once after the load
/// (name, statement), besides the HNSW index of the index's dimension. They must
/// match the migrations' definitions.
const SEARCH_INDEXES: &[(&str, &str)] = &[
    (
        "chunks_tsv",
        "CREATE INDEX IF NOT EXISTS chunks_tsv ON chunks USING gin (tsv)",
    ),
    (
        "chunks_trgm",
        "CREATE INDEX IF NOT EXISTS chunks_trgm ON chunks USING gin (text gin_trgm_ops)",
    ),
    (
        "chunk_postings_word",
        "CREATE INDEX IF NOT EXISTS chunk_postings_word ON chunk_postings
           (lexeme, namespace, rowid) INCLUDE (tf, dl, source)",
    ),
    (
        "chunk_postings_rowid",
        "CREATE INDEX IF NOT EXISTS chunk_postings_rowid ON chunk_postings (rowid)",
    ),
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS[MIGRATIONS.len() - 1].0;

/// A write group sends its files when it holds this many chunks (one statement's
/// arrays: ~2 KB a chunk with a 384-d vector).
pub const GROUP_MAX_CHUNKS: usize = 2_000;

/// The default [`PgConfig::ef_search`]; chosen by `examples/pg_scale.rs`
/// (recall@10 against exact search and latency, BENCHMARKS.md).
pub const DEFAULT_EF_SEARCH: usize = 200;

/// HNSW build parameters (pgvector's defaults are m 16, ef_construction 64);
/// chosen by `examples/pg_scale.rs` (BENCHMARKS.md).
pub const HNSW_M: usize = 16;
/// See [`HNSW_M`].
pub const HNSW_EF_CONSTRUCTION: usize = 64;

/// `maintenance_work_mem` for building the deferred indexes (an HNSW graph that
/// fits builds in memory, several times faster).
const BULK_MAINTENANCE_WORK_MEM: &str = "1GB";

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
    /// `hnsw.ef_search` of a vector search (raised to its `k` when larger): the
    /// HNSW candidate list, recall against latency.
    pub ef_search: usize,
}

impl PgConfig {
    /// Defaults: schema `claw`, pool of 8 (a gateway serves several clients at
    /// once), 5 s connect timeout, 60 s statements,
    /// [`DEFAULT_EF_SEARCH`].
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
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(60),
            ef_search: DEFAULT_EF_SEARCH,
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
    /// The server aborted the transaction to break a deadlock (SQLSTATE 40P01).
    pub fn is_deadlock(&self) -> bool {
        matches!(self, PgError::Postgres(e) if e.code().is_some_and(|c| c.code() == "40P01"))
    }

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
/// second handle for a writer beside readers; a write group and deferred
/// indexes belong to the handle that opened them).
pub struct PgStore {
    pub(crate) pool: r2d2::Pool<Manager>,
    pub(crate) cfg: PgConfig,
    pub(crate) namespaces: Vec<String>,
    /// This handle's open write group (see [`PgStore::flush`]).
    group: Group,
    /// Search indexes dropped for a bulk load into an empty table (their
    /// statements), built by [`PgStore::finish_bulk`].
    deferred: Mutex<Vec<String>>,
    /// The last background sample read, by what it was read at (shared by clones).
    pub(crate) sample_cache: std::sync::Arc<Mutex<Option<SampleCache>>>,
    /// Units of work retried after the server broke a deadlock (shared by
    /// clones): a deadlock costs the server's `deadlock_timeout` and a retry.
    deadlocks: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

/// A background sample and the index state it was read at: the rowid range
/// (which fixes the sampled ids) and the visible chunk count (which any delete
/// changes). A search reuses it while both are unchanged.
pub(crate) type SampleCache = (
    (i64, i64, i64, usize),
    claw_memory::search::score::BackgroundSample,
);

impl Clone for PgStore {
    /// Shares the pool; the clone has no open write group and no deferred index.
    fn clone(&self) -> PgStore {
        PgStore {
            pool: self.pool.clone(),
            cfg: self.cfg.clone(),
            namespaces: self.namespaces.clone(),
            group: Group::default(),
            deferred: Mutex::default(),
            sample_cache: self.sample_cache.clone(),
            deadlocks: self.deadlocks.clone(),
        }
    }
}

/// One file written inside a write group, not yet sent.
struct PendingFile {
    file: FileRecord,
    chunks: Vec<NewChunk>,
    mode: WriteMode,
    model: String,
}

/// The files a write group holds until it sends them in one transaction.
#[derive(Default)]
struct Group {
    open: bool,
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    files: Vec<PendingFile>,
    chunks: usize,
    /// (source, path) of the pending files: a second write of one sends the first.
    paths: HashSet<(String, String)>,
    /// Chunk ids pending: one statement may not upsert a row twice.
    ids: HashSet<String>,
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
        let manager = Manager(PostgresConnectionManager::new(pg, NoTls));
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
            group: Group::default(),
            deferred: Mutex::default(),
            sample_cache: Default::default(),
            deadlocks: Default::default(),
        };
        store.migrate()?;
        Ok(store)
    }

    /// How many units of work were retried after the server broke a deadlock
    /// since this handle's pool was opened.
    pub fn deadlock_retries(&self) -> u64 {
        self.deadlocks.load(std::sync::atomic::Ordering::Relaxed)
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
        mut f: impl FnMut(&mut Conn) -> Result<T, PgError>,
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
                    if e.is_deadlock() {
                        self.deadlocks
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
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
    /// the index's dimension, the word postings equal to the chunks' words.
    /// Returns problems (empty = ok).
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
            // The postings are exactly the chunks' tsvectors (a full comparison:
            // for tests and checks, not the search path).
            let drift: i64 = c
                .query_one(
                    "WITH want AS (
                       SELECT u.lexeme, c.namespace, c.rowid,
                              coalesce(array_length(u.positions, 1), 1) AS tf,
                              coalesce(c.dl, 0) AS dl, c.source
                       FROM chunks c, unnest(c.tsv) u),
                     have AS (SELECT lexeme, namespace, rowid, tf, dl, source FROM chunk_postings)
                     SELECT (SELECT count(*) FROM (SELECT * FROM want EXCEPT ALL SELECT * FROM have) a)
                          + (SELECT count(*) FROM (SELECT * FROM have EXCEPT ALL SELECT * FROM want) b)",
                    &[],
                )?
                .get(0);
            if drift > 0 {
                problems.push(format!(
                    "{drift} word postings differ from the chunks' words"
                ));
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

    /// The statement creating the HNSW index of `dims` (partial: this dimension's rows).
    fn hnsw_ddl(dims: usize) -> String {
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON chunks USING hnsw ((embedding::vector({dims})) vector_cosine_ops)
             WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION}) WHERE dims = {dims}",
            Self::hnsw_name(dims)
        )
    }

    fn ensure_hnsw(tx: &mut Transaction<'_>, dims: usize) -> Result<(), PgError> {
        tx.batch_execute(&Self::hnsw_ddl(dims))?;
        Ok(())
    }

    /// Build the search indexes a reset dropped for a bulk load into an empty
    /// table (the HNSW of the index's dimension, the word and trigram GIN
    /// indexes, the postings' btrees): built once over every row, not
    /// maintained row by row, then vacuum the postings. Sends the
    /// open write group first. Idempotent; a handle that deferred nothing does
    /// nothing. Until it runs, searches scan (correct, slower); a process killed
    /// before it leaves the HNSW index missing, which the next index run sees
    /// (`has_vec_tables`) and rebuilds.
    pub fn finish_bulk(&self) -> Result<(), StoreError> {
        self.flush()?;
        let mut deferred = match self.deferred.lock() {
            Ok(d) => d,
            Err(poisoned) => poisoned.into_inner(),
        };
        if deferred.is_empty() {
            return Ok(());
        }
        let ddl = deferred.clone();
        self.with_tx(|tx| {
            // One transaction under the lock a reset takes: two workspaces that
            // both loaded into the empty table both deferred the same indexes,
            // and `CREATE INDEX IF NOT EXISTS` is not safe against a concurrent
            // twin (the loser fails on the catalog's unique name). Serialised,
            // the second finds them built and skips them. A build over every row
            // may outlast a query's statement timeout (SET LOCAL: this
            // transaction only).
            tx.batch_execute(&format!(
                "LOCK TABLE chunks IN SHARE ROW EXCLUSIVE MODE;
                 SET LOCAL maintenance_work_mem = '{BULK_MAINTENANCE_WORK_MEM}';
                 SET LOCAL statement_timeout = 0"
            ))?;
            for d in &ddl {
                let t = std::time::Instant::now();
                tx.batch_execute(d)?;
                tracing::debug!("postgres: built in {:?}: {d}", t.elapsed());
            }
            tx.batch_execute("ANALYZE chunks")?;
            Ok(())
        })?;
        deferred.clear();
        // The word stage reads the postings by index only, which needs their
        // pages marked all-visible: a vacuum now, not when autovacuum gets to the
        // freshly loaded table (until then each posting is re-read from the heap).
        // VACUUM runs outside a transaction, each statement on its own.
        self.with_client(|c| {
            c.batch_execute("SET statement_timeout = 0")?;
            let vacuumed = c.batch_execute("VACUUM (ANALYZE) chunk_postings");
            c.batch_execute("RESET statement_timeout")?;
            Ok(vacuumed?)
        })?;
        Ok(())
    }

    /// Whether a bulk load from here would find the chunks table empty (every
    /// namespace, every workspace): then a reset drops its search indexes.
    fn drop_search_indexes_if_empty(
        tx: &mut Transaction<'_>,
        dims: usize,
    ) -> Result<Vec<String>, PgError> {
        // Serialise with other resets and writers' deferred builds.
        tx.execute("LOCK TABLE chunks IN SHARE ROW EXCLUSIVE MODE", &[])?;
        if tx.query_opt("SELECT 1 FROM chunks LIMIT 1", &[])?.is_some() {
            return Ok(Vec::new());
        }
        let mut ddl: Vec<String> = SEARCH_INDEXES.iter().map(|(_, d)| d.to_string()).collect();
        for (name, _) in SEARCH_INDEXES {
            tx.batch_execute(&format!("DROP INDEX IF EXISTS {name}"))?;
        }
        if dims > 0 {
            tx.batch_execute(&format!("DROP INDEX IF EXISTS {}", Self::hnsw_name(dims)))?;
            ddl.push(Self::hnsw_ddl(dims));
        }
        Ok(ddl)
    }

    /// Insert a file's chunks in one statement; `models[i]` is chunk i's model.
    pub(crate) fn insert_chunks(
        tx: &mut Transaction<'_>,
        ns: &str,
        ws: &str,
        file: &FileRecord,
        chunks: &[&NewChunk],
        models: &[&str],
        now: i64,
    ) -> Result<(), PgError> {
        let rows: Vec<(&FileRecord, &NewChunk, &str)> = chunks
            .iter()
            .zip(models)
            .map(|(c, m)| (file, *c, *m))
            .collect();
        Self::insert_chunk_rows(tx, ns, ws, &rows, now)
    }

    /// Insert chunks of any number of files in one statement (`unnest` of column
    /// arrays: one round trip, one firing of the statistics triggers): each row is
    /// (its file, the chunk, its model). No two rows may share a chunk id.
    pub(crate) fn insert_chunk_rows(
        tx: &mut Transaction<'_>,
        ns: &str,
        ws: &str,
        rows: &[(&FileRecord, &NewChunk, &str)],
        now: i64,
    ) -> Result<(), PgError> {
        if rows.is_empty() {
            return Ok(());
        }
        let sources: Vec<&str> = rows.iter().map(|(f, _, _)| f.source.as_str()).collect();
        let paths: Vec<&str> = rows.iter().map(|(f, _, _)| f.path.as_str()).collect();
        let models: Vec<&str> = rows.iter().map(|(_, _, m)| *m).collect();
        let chunks: Vec<&NewChunk> = rows.iter().map(|(_, c, _)| *c).collect();
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
             SELECT $1, $2, u.source, u.path, u.id, u.sl, u.el, u.hash, u.model, u.text, $3, u.nt,
                    u.dims, u.emb, u.ctx, w.tsv, claw_tsv_tokens(w.tsv)
             FROM unnest($4::text[], $5::text[], $6::text[], $7::int4[], $8::int4[], $9::text[],
                         $10::text[], $11::text[], $12::int8[], $13::int4[], $14::vector[],
                         $15::text[], $16::text[])
                  AS u(source, path, id, sl, el, hash, model, text, nt, dims, emb, ctx, words),
                  LATERAL (SELECT claw_words(u.words) AS tsv) w
             ON CONFLICT (namespace, workspace, id) DO UPDATE SET
               source = excluded.source, path = excluded.path, start_line = excluded.start_line,
               end_line = excluded.end_line, hash = excluded.hash, model = excluded.model,
               text = excluded.text, updated_at = excluded.updated_at,
               note_time = excluded.note_time, dims = excluded.dims, embedding = excluded.embedding,
               context = excluded.context, tsv = excluded.tsv, dl = excluded.dl",
            &[
                &ns, &ws, &now, &sources, &paths, &ids, &starts, &ends, &hashes, &models, &texts,
                &times, &dims, &embs, &contexts, &words,
            ],
        )?;
        Ok(())
    }

    /// Upsert many files' rows in one statement (no (source, path) twice).
    fn upsert_files(
        tx: &mut Transaction<'_>,
        ns: &str,
        ws: &str,
        files: &[&FileRecord],
        now: i64,
    ) -> Result<(), PgError> {
        let col = |f: fn(&FileRecord) -> &str| files.iter().map(|r| f(r)).collect::<Vec<&str>>();
        let num = |f: fn(&FileRecord) -> i64| files.iter().map(|r| f(r)).collect::<Vec<i64>>();
        tx.execute(
            "INSERT INTO files (namespace, workspace, source, path, sha256, mtime, size, indexed_at,
                                indexed_bytes, indexed_lines)
             SELECT $1, $2, u.source, u.path, u.sha, u.mtime, u.size, $3, u.ib, u.il
             FROM unnest($4::text[], $5::text[], $6::text[], $7::int8[], $8::int8[], $9::int8[],
                         $10::int8[]) AS u(source, path, sha, mtime, size, ib, il)
             ON CONFLICT (namespace, workspace, source, path) DO UPDATE SET
               sha256 = excluded.sha256, mtime = excluded.mtime, size = excluded.size,
               indexed_at = excluded.indexed_at, indexed_bytes = excluded.indexed_bytes,
               indexed_lines = excluded.indexed_lines",
            &[
                &ns,
                &ws,
                &now,
                &col(|f| &f.source),
                &col(|f| &f.path),
                &col(|f| &f.sha256),
                &num(|f| f.mtime_ns),
                &num(|f| f.size),
                &num(|f| f.indexed_bytes),
                &num(|f| f.indexed_lines),
            ],
        )?;
        Ok(())
    }

    /// Send the open write group's pending files in one transaction: the
    /// sources' advisory locks (in key order), one upsert of every file row, one
    /// delete of the replaced files' old chunks, one insert of every chunk.
    /// Retried whole on a transient error (the files are still in hand).
    pub(crate) fn flush(&self) -> Result<(), PgError> {
        let mut pending = self.pending();
        if pending.files.is_empty() {
            return Ok(());
        }
        let now = now_unix();
        let (ns, ws) = (self.ns(), self.ws());
        let mut keys: Vec<i64> = pending
            .files
            .iter()
            .map(|p| self.source_lock_key(&p.file.source))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let files: Vec<&FileRecord> = pending.files.iter().map(|p| &p.file).collect();
        let replaced: Vec<&FileRecord> = pending
            .files
            .iter()
            .filter(|p| p.mode == WriteMode::Replace)
            .map(|p| &p.file)
            .collect();
        let rows: Vec<(&FileRecord, &NewChunk, &str)> = pending
            .files
            .iter()
            .flat_map(|p| p.chunks.iter().map(move |c| (&p.file, c, p.model.as_str())))
            .collect();
        self.with_tx(|tx| {
            for k in &keys {
                tx.execute("SELECT pg_advisory_xact_lock($1)", &[k])?;
            }
            Self::upsert_files(tx, ns, ws, &files, now)?;
            if !replaced.is_empty() {
                let s: Vec<&str> = replaced.iter().map(|f| f.source.as_str()).collect();
                let p: Vec<&str> = replaced.iter().map(|f| f.path.as_str()).collect();
                tx.execute(
                    "DELETE FROM chunks c USING unnest($3::text[], $4::text[]) AS u(source, path)
                     WHERE c.namespace = $1 AND c.workspace = $2 AND c.source = u.source
                       AND c.path = u.path",
                    &[&ns, &ws, &s, &p],
                )?;
            }
            Self::insert_chunk_rows(tx, ns, ws, &rows, now)
        })?;
        drop(rows);
        drop(files);
        drop(replaced);
        *pending = Pending::default();
        Ok(())
    }

    /// Hold one file's write in the open group; sends the group first when the
    /// file is already pending or shares a chunk id with it, and after it when the
    /// group holds [`GROUP_MAX_CHUNKS`] chunks.
    fn buffer(
        &self,
        file: &FileRecord,
        chunks: &[NewChunk],
        mode: WriteMode,
        model: &str,
    ) -> Result<(), PgError> {
        let key = (file.source.clone(), file.path.clone());
        let clash = {
            let p = self.pending();
            p.paths.contains(&key) || chunks.iter().any(|c| p.ids.contains(&c.id))
        };
        if clash {
            self.flush()?;
        }
        let full = {
            let mut p = self.pending();
            p.paths.insert(key);
            p.ids.extend(chunks.iter().map(|c| c.id.clone()));
            p.chunks += chunks.len();
            p.files.push(PendingFile {
                file: file.clone(),
                chunks: chunks.to_vec(),
                mode,
                model: model.to_string(),
            });
            p.chunks >= GROUP_MAX_CHUNKS
        };
        if full {
            self.flush()?;
        }
        Ok(())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        match self.group.pending.lock() {
            Ok(p) => p,
            Err(poisoned) => poisoned.into_inner(),
        }
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

    /// The indexer's pass ends by setting `last_index_at`: the search indexes a
    /// reset deferred are built then ([`PgStore::finish_bulk`]), before the stamp.
    fn set_meta(&self, key: &str, value: &str) -> Result<(), StoreError> {
        if key == "last_index_at" {
            self.finish_bulk()?;
        }
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
        self.flush()?;
        let deferred = self.with_tx(|tx| {
            tx.execute(
                "DELETE FROM files WHERE namespace = $1 AND workspace = $2",
                &[&self.ns(), &self.ws()],
            )?;
            let deferred = Self::drop_search_indexes_if_empty(tx, dims)?;
            if dims > 0 && deferred.is_empty() {
                Self::ensure_hnsw(tx, dims)?;
            }
            for (k, v) in [
                ("model", model.to_string()),
                ("dims", dims.to_string()),
                ("chunker_version", chunker_version.to_string()),
            ] {
                tx.execute(UPSERT_META, &[&self.ns(), &k, &v])?;
            }
            Ok(deferred)
        })?;
        let mut pending = match self.deferred.lock() {
            Ok(d) => d,
            Err(poisoned) => poisoned.into_inner(),
        };
        for d in deferred {
            if !pending.contains(&d) {
                pending.push(d);
            }
        }
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
        let filled = fill(self);
        let built = self.finish_bulk();
        filled.and(built)
    }

    fn file_records(&self, source: &str) -> Result<HashMap<String, FileRecord>, StoreError> {
        self.flush()?;
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
        self.flush()?;
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
        self.flush()?;
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
        if self.group.open {
            return Ok(self.buffer(file, chunks, mode, model)?);
        }
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
        self.flush()?;
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
        self.flush()?;
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

    fn removes_chunks_from(&self) -> bool {
        true
    }

    fn remove_chunks_from(
        &mut self,
        source: &str,
        path: &str,
        line: usize,
    ) -> Result<usize, StoreError> {
        self.flush()?;
        // `start_line` is an INTEGER column.
        let line = i32::try_from(line).unwrap_or(i32::MAX);
        Ok(self.with_tx(|tx| {
            self.lock_source(tx, source)?;
            let n = tx.execute(
                "DELETE FROM chunks WHERE namespace = $1 AND workspace = $2 AND source = $3
                   AND path = $4 AND start_line >= $5",
                &[&self.ns(), &self.ws(), &source, &path, &line],
            )?;
            Ok(n as usize)
        })?)
    }

    fn chunk_count(&self, source: &str, path: &str) -> Result<usize, StoreError> {
        self.flush()?;
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
        self.flush()?;
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

    /// Files written until [`IndexStorage::commit_group`] are sent together
    /// (see [`PgStore::flush`]), at the latest every [`GROUP_MAX_CHUNKS`] chunks
    /// and before any read of the index's rows.
    fn begin_group(&mut self) -> Result<(), StoreError> {
        self.flush()?;
        self.group.open = true;
        Ok(())
    }

    fn commit_group(&mut self) -> Result<(), StoreError> {
        self.flush()?;
        self.group.open = false;
        Ok(())
    }

    /// The files not yet sent are dropped; those sent stay (each send is its
    /// own transaction).
    fn rollback_group(&mut self) {
        self.group.open = false;
        *self
            .group
            .pending
            .get_mut()
            .unwrap_or_else(|p| p.into_inner()) = Pending::default();
    }
}
