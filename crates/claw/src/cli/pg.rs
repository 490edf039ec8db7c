//! `memory.backend: postgres`: the memory commands on a shared PostgreSQL +
//! pgvector index (`claw-memory-pg`) — index, search (with the same bounded
//! inline sync and the same JSON), get, status, add — and
//! `claw memory migrate --to postgres`, which copies the workspace's SQLite index
//! (vectors included) into its rows of the configured namespace.

use super::index::{IndexArgs, StatusArgs, open_store};
use super::output::{Exit, Output, print_json, sanitize};
use super::search::{GetArgs, SearchArgs};
use crate::config::{PgBackend, Settings};
use anyhow::Context;
use claw_mcp::status::{ChangedOnDisk, StatusJson};
use claw_memory::embed::Loaded;
use claw_memory::freshness::{FileRef, StaleReason, SyncReport};
use claw_memory::index_storage::{IndexStorage, source_roots};
use claw_memory::indexer;
use claw_memory::lock::WriterLock;
use claw_memory::search::engine::{self, search_in};
use claw_memory::search::{GetRequest, Mode, SearchError, SearchRequest, SourceFilter};
use claw_memory::service::SearchOutcome;
use claw_memory_pg::{PgConfig, PgStore};
use serde::Serialize;
use std::io::Write;
use std::time::{Duration, Instant};

/// Files a search re-indexes inline at most (as on SQLite).
const SYNC_LIMIT: usize = claw_memory::freshness::DEFAULT_SYNC_LIMIT;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MigrateTarget {
    Postgres,
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The backend to copy the SQLite index to (configured in `memory.backend`).
    #[arg(long, value_enum)]
    pub to: MigrateTarget,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

fn backend(settings: &Settings) -> anyhow::Result<&PgBackend> {
    settings.pg.as_ref().ok_or_else(|| {
        anyhow::anyhow!(
            "no PostgreSQL backend is configured: set \"memory\": {{\"backend\": {{\"kind\": \"postgres\", \"url_env\": \"CLAW_PG_URL\", \"namespace\": \"team\"}}}} in the config file"
        )
    })
}

/// Connect to the configured PostgreSQL index as this workspace.
pub fn open_pg(settings: &Settings) -> anyhow::Result<PgStore> {
    let b = backend(settings)?;
    let id = claw_memory_pg::workspace_id(&settings.state_dir()).with_context(|| {
        format!(
            "cannot read or create the workspace id in {}",
            settings.state_dir().display()
        )
    })?;
    let mut cfg = PgConfig::new(&b.url, &b.namespace, id);
    cfg.schema = b.schema.clone();
    cfg.search_namespaces = b.search_namespaces.clone();
    PgStore::connect(cfg).context("cannot open the PostgreSQL memory index (memory.backend)")
}

/// `postgres:<schema>/<namespace>` of the configured backend (empty without one).
pub fn location(settings: &Settings) -> String {
    settings
        .pg
        .as_ref()
        .map(|b| format!("postgres:{}/{}", b.schema, b.namespace))
        .unwrap_or_default()
}

/// `claw memory index` on PostgreSQL: the shared path (`index::index_into`) over
/// this workspace's rows. The local writer lock keeps one writer per workspace;
/// rows are serialised per source by PostgreSQL advisory locks.
pub fn run_index(settings: &Settings, args: IndexArgs) -> anyhow::Result<Exit> {
    let mut pg = open_pg(settings)?;
    let loc = location(settings);
    super::index::index_into(
        settings,
        args,
        &mut pg,
        &loc,
        Some(&format!("index: {loc}")),
    )
}

/// Where this workspace's sources differ from its rows (stat-level, as the
/// SQLite freshness check): `(source, path)` of new and modified files, and
/// the files gone from disk.
struct Behind {
    new: Vec<(String, String)>,
    modified: Vec<(String, String)>,
    removed: Vec<FileRef>,
}

fn behind_disk(settings: &Settings, pg: &PgStore) -> anyhow::Result<Behind> {
    let mut b = Behind {
        new: Vec::new(),
        modified: Vec::new(),
        removed: Vec::new(),
    };
    for src in source_roots(&settings.mem, pg)? {
        let (disk, _) = claw_memory::walk::walk_source(&src);
        let stored = pg.file_records(&src.name)?;
        let p = claw_memory::plan::plan(&disk, &stored, false);
        let named = |f: &claw_memory::walk::DiskFile| (src.name.clone(), f.rel.clone());
        b.new.extend(p.add.iter().map(named));
        b.modified.extend(p.check.iter().map(named));
        b.removed.extend(p.remove.into_iter().map(|path| FileRef {
            source: src.name.clone(),
            path,
        }));
    }
    Ok(b)
}

/// The bounded inline sync before a search, as on SQLite: stat the sources,
/// re-index up to [`SYNC_LIMIT`] changed files without waiting for the writer
/// lock, else answer from the index and say it is stale.
fn sync(
    settings: &Settings,
    pg: &mut PgStore,
    embedder: Option<&dyn claw_memory::embed::Embedder>,
) -> anyhow::Result<SyncReport> {
    let started = Instant::now();
    let behind = behind_disk(settings, pg)?;
    let gone = behind.removed;
    let mut dirty = behind.new;
    dirty.extend(behind.modified);
    dirty.extend(gone.iter().map(|g| (g.source.clone(), g.path.clone())));
    if dirty.is_empty() {
        return Ok(SyncReport::Fresh {
            checked_ms: started.elapsed().as_millis() as u64,
            watcher: None,
        });
    }
    let sample = || {
        dirty
            .iter()
            .take(5)
            .map(|(s, p)| FileRef {
                source: s.clone(),
                path: p.clone(),
            })
            .collect()
    };
    if dirty.len() > SYNC_LIMIT {
        return Ok(SyncReport::Stale {
            pending: dirty.len(),
            reason: StaleReason::Backlog { limit: SYNC_LIMIT },
            sample: sample(),
        });
    }
    let lock =
        match WriterLock::acquire(&settings.state_dir(), "claw memory search", Duration::ZERO) {
            Ok(lock) => lock,
            Err(e) => {
                let reason = match e {
                    claw_memory::lock::LockError::Held { pid, what, .. } => {
                        StaleReason::Busy { pid, what }
                    }
                    other => StaleReason::Failed {
                        message: other.to_string(),
                    },
                };
                return Ok(SyncReport::Stale {
                    pending: dirty.len(),
                    reason,
                    sample: sample(),
                });
            }
        };
    indexer::run_paths(pg, &settings.mem, embedder, &dirty, &lock, &|_| {})
        .context("syncing changed files before the search")?;
    let reindexed = dirty
        .iter()
        .filter(|(s, p)| !gone.iter().any(|g| &g.source == s && &g.path == p))
        .map(|(s, p)| FileRef {
            source: s.clone(),
            path: p.clone(),
        })
        .collect();
    Ok(SyncReport::Synced {
        reindexed,
        removed: gone,
        elapsed_ms: started.elapsed().as_millis() as u64,
    })
}

pub fn run_search(settings: &Settings, args: SearchArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    let mut pg = open_pg(settings)?;
    let keyword_only_index = pg.meta("model")?.is_some_and(|m| m.is_empty());
    let loaded = if args.mode.0 != Mode::Fts && !keyword_only_index || !args.no_sync {
        claw_memory::embed::load(&settings.mem.embed, settings.mem.memory.embed_batch_size)
    } else {
        Loaded::Disabled
    };
    let sync_report = if args.no_sync {
        SyncReport::Skipped
    } else {
        sync(settings, &mut pg, loaded.embedder())?
    };
    let req = SearchRequest {
        query: args.query,
        limit: args.limit,
        min_score: args.min_score,
        mode: args.mode.0,
        source: SourceFilter::parse(&args.source),
        explain: args.explain,
        mmr: true,
        keyword_norm: Default::default(),
    };
    let query_embedder = if req.mode == Mode::Fts {
        None
    } else {
        loaded.embedder()
    };
    let response = search_in(
        &pg,
        query_embedder,
        &settings.mem.memory,
        &req,
        settings.mem.clock.now_unix(),
    )
    .context("search failed")?;
    let outcome = SearchOutcome {
        response,
        sync: sync_report,
    };
    super::search::render_search(&outcome, None, output, args.explain)
}

/// `claw memory get --json` of another workspace's file: the usual object plus
/// the owning workspace's id (`workspace_id`, as in `memory status --json`)
/// and `from_index: true` (served from the stored chunks).
#[derive(Serialize)]
struct SharedGetJson<'a> {
    #[serde(flatten)]
    resp: &'a claw_memory::search::GetResponse,
    workspace_id: &'a str,
    from_index: bool,
}

/// `req.path` as a path relative to a source root (`./` and repeated `/` dropped),
/// or None when it cannot name another workspace's file (absolute, `..`).
fn relative_request_path(raw: &str) -> Option<String> {
    let p = std::path::Path::new(raw.trim());
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            std::path::Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            std::path::Component::CurDir => {}
            _ => return None,
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// `get` of a file that is not this workspace's: another workspace sharing the
/// namespace indexed it (a search here can return it). Served from its stored
/// chunks, redacted at index time, reassembled by line range. `Ok(None)` when no
/// other workspace has it either.
fn get_from_shared_index(
    pg: &PgStore,
    req: &GetRequest,
    workspace: Option<&str>,
) -> Result<Option<(claw_memory::search::GetResponse, String)>, claw_memory::store::StoreError> {
    let Some(rel) = relative_request_path(&req.path) else {
        return Ok(None);
    };
    Ok(pg.indexed_file(&rel, workspace)?.map(|f| {
        (
            engine::slice_lines(&f.text, &f.path, &f.source, req),
            f.workspace,
        )
    }))
}

/// This workspace's file from disk, else another workspace's from the index
/// (with the owning workspace's id). `workspace` names another workspace to
/// read from (its file even when this workspace has one of the same path).
fn get_here_or_shared(
    pg: &PgStore,
    sources: &[claw_memory::walk::SourceRoot],
    req: &GetRequest,
    workspace: Option<&str>,
) -> Result<(claw_memory::search::GetResponse, Option<String>), SearchError> {
    let workspace = workspace.filter(|w| *w != pg.config().workspace);
    let here = match workspace {
        None => engine::get_lines_in(pg, sources, req),
        Some(_) => Err(SearchError::NotIndexed(req.path.clone())),
    };
    match here {
        Ok(r) => Ok((r, None)),
        Err(SearchError::NotIndexed(p)) => match get_from_shared_index(pg, req, workspace)? {
            Some((r, ws)) => Ok((r, Some(ws))),
            None => Err(SearchError::NotIndexed(p)),
        },
        Err(e) => Err(e),
    }
}

pub fn run_get(settings: &Settings, args: GetArgs) -> anyhow::Result<Exit> {
    let pg = open_pg(settings)?;
    let sources = source_roots(&settings.mem, &pg)?;
    let req = GetRequest {
        path: args.path,
        from: args.from.max(1),
        lines: args.lines.max(1),
        max_chars: engine::GET_MAX_CHARS,
    };
    let (resp, owner) = get_here_or_shared(&pg, &sources, &req, args.workspace_id.as_deref())?;
    if args.json {
        match &owner {
            None => print_json(&resp)?,
            Some(ws) => print_json(&SharedGetJson {
                resp: &resp,
                workspace_id: ws,
                from_index: true,
            })?,
        }
    } else {
        if let Some(ws) = &owner {
            eprintln!(
                "note: {} is not a file of this workspace: served from the shared index as workspace {} indexed it (secrets redacted; lines between chunks may be blank)",
                sanitize(&resp.path),
                sanitize(ws)
            );
        }
        std::io::stdout()
            .lock()
            .write_all(sanitize(&resp.text).as_bytes())?;
    }
    Ok(if resp.to >= resp.from {
        Exit::Ok
    } else {
        Exit::NoMatch
    })
}

/// `claw memory status` on PostgreSQL: the SQLite status's JSON object (one
/// struct, so the shapes cannot drift), filled from this workspace's rows.
pub fn run_status(settings: &Settings, args: StatusArgs) -> anyhow::Result<Exit> {
    let pg = open_pg(settings)?;
    let st = pg.stats()?;
    let behind = behind_disk(settings, &pg)?;
    let loc = location(settings);
    let status = StatusJson {
        backend: "postgres",
        workspace: settings.mem.workspace.display().to_string(),
        db_path: loc.clone(),
        db_bytes: u64::try_from(st.db_bytes).unwrap_or(0),
        files: st.files,
        chunks: st.chunks,
        vectors: st.vectors,
        model: IndexStorage::meta(&pg, "model")?.unwrap_or_default(),
        dims: pg.vec_dims()?.unwrap_or(0),
        cache_entries: st.cache_entries,
        vector_backend: format!("pgvector {} (HNSW, cosine)", st.pgvector),
        fts_tokenizers: vec!["tsvector simple (stems)", "pg_trgm"],
        chunker_version: IndexStorage::meta(&pg, "chunker_version")?,
        last_index_at: IndexStorage::meta(&pg, "last_index_at")?.and_then(|v| v.parse().ok()),
        changed_on_disk: ChangedOnDisk {
            new: behind.new.len(),
            modified: behind.modified.len(),
            deleted: behind.removed.len(),
        },
        sources: source_roots(&settings.mem, &pg)?,
        // `claw memory watch` is SQLite's; skipped files are re-examined by each index run.
        watcher: None,
        skipped_files: 0,
        location: loc,
        namespaces: pg.namespaces().to_vec(),
        visible_chunks: st.visible_chunks,
        workspace_id: Some(pg.config().workspace.clone()),
    };
    super::index::print_status(&status, args.json)
}

#[derive(Serialize)]
struct MigrateJson {
    from: String,
    to: String,
    files: usize,
    chunks: usize,
    vectors: usize,
    cache_entries: usize,
    sources: usize,
    model: String,
    elapsed_ms: u64,
}

pub fn run_migrate(settings: &Settings, args: MigrateArgs) -> anyhow::Result<Exit> {
    let MigrateTarget::Postgres = args.to;
    let started = Instant::now();
    let sqlite = open_store(settings)?;
    let mut pg = open_pg(settings)?;
    let lock = WriterLock::acquire(
        &settings.state_dir(),
        "claw memory migrate",
        Duration::from_secs(5),
    )?;
    let r = claw_memory_pg::copy_sqlite(&sqlite, &mut pg).context("migration failed")?;
    drop(lock);
    let j = MigrateJson {
        from: settings.db_path().display().to_string(),
        to: location(settings),
        files: r.files,
        chunks: r.chunks,
        vectors: r.vectors,
        cache_entries: r.cache_entries,
        sources: r.sources,
        model: r.model,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    if args.json {
        print_json(&j)?;
    } else {
        println!(
            "copied {} files, {} chunks ({} vectors, no re-embedding), {} cache entries, {} sources into {} in {} ms",
            j.files, j.chunks, j.vectors, j.cache_entries, j.sources, j.to, j.elapsed_ms
        );
    }
    Ok(Exit::Ok)
}

/// `claw memory add` on PostgreSQL: register a folder as a source of this workspace.
pub fn run_add(settings: &Settings, args: super::index::AddArgs) -> anyhow::Result<Exit> {
    anyhow::ensure!(
        !args.follow_symlinks_outside,
        "--follow-symlinks-outside is not supported with the PostgreSQL backend yet"
    );
    let root = args
        .path
        .canonicalize()
        .with_context(|| format!("cannot add {}: no such folder", args.path.display()))?;
    anyhow::ensure!(root.is_dir(), "cannot add {}: not a folder", root.display());
    let name = match args.name {
        Some(n) => n,
        None => root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .context("cannot derive a source name from the path; pass --name")?,
    };
    let pg = open_pg(settings)?;
    let existing: Vec<(String, std::path::PathBuf)> = pg
        .sources()?
        .into_iter()
        .map(|s| (s.name, s.root))
        .collect();
    anyhow::ensure!(
        !existing.iter().any(|(n, r)| n == &name || r == &root),
        "a source with that name or folder is already registered"
    );
    super::errors::check_new_source_root(&settings.mem.workspace, &root, &existing)?;
    pg.add_source(&name, &root)?;
    println!(
        "added source `{}` to {}; run `claw memory index` to index it",
        sanitize(&name),
        location(settings)
    );
    Ok(Exit::Ok)
}

/// The backend `claw memory eval` indexes and searches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EvalBackend {
    Sqlite,
    Postgres,
}

/// Run the evaluation on `backend`: SQLite through `memory::eval::runner`, or
/// PostgreSQL with the same steps (one note per document, the real indexer, the
/// same search requests through `search_in`, the same metrics) in a throw-away
/// namespace of the configured `memory.backend`, dropped afterwards. With
/// `--work-dir` holding a SQLite index of the corpus, PostgreSQL starts from a
/// copy of it (vectors included: nothing is embedded again).
#[allow(clippy::too_many_arguments)]
pub fn eval_run(
    backend: EvalBackend,
    settings: &Settings,
    data: &claw_memory::eval::beir::Dataset,
    mem: &claw_memory::config::MemoryConfig,
    loaded: &Loaded,
    opts: &claw_memory::eval::runner::EvalOptions,
    progress: &dyn Fn(claw_memory::eval::runner::EvalProgress),
) -> anyhow::Result<claw_memory::eval::runner::EvalReport> {
    match backend {
        EvalBackend::Sqlite => Ok(claw_memory::eval::runner::run(
            data, mem, loaded, opts, progress,
        )?),
        EvalBackend::Postgres => eval_postgres(settings, data, mem, loaded, opts, progress),
    }
}

fn eval_postgres(
    settings: &Settings,
    data: &claw_memory::eval::beir::Dataset,
    mem: &claw_memory::config::MemoryConfig,
    loaded: &Loaded,
    opts: &claw_memory::eval::runner::EvalOptions,
    progress: &dyn Fn(claw_memory::eval::runner::EvalProgress),
) -> anyhow::Result<claw_memory::eval::runner::EvalReport> {
    use claw_memory::eval::runner::{prepare_corpus, run_on};
    let b = backend(settings)?;
    // The same corpus, indexer, engine and metrics as SQLite (`runner::run_on`); only
    // the storage differs: a fresh namespace, dropped afterwards.
    let corpus = prepare_corpus(data, mem, opts, progress)?;
    let namespace = format!(
        "eval-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let mut cfg = PgConfig::new(&b.url, &namespace, "eval");
    cfg.schema = b.schema.clone();
    let mut pg = PgStore::connect(cfg).context("cannot open the PostgreSQL memory index")?;
    // A kept work dir holding a SQLite index of this corpus (a `--work-dir` run on
    // SQLite): copy it, vectors and embedding cache included, so the indexer below
    // finds every note unchanged and nothing is embedded again.
    let kept = corpus.settings.db_path();
    let seeded = if opts.work_dir.is_some() && kept.is_file() {
        let sqlite = claw_memory::store::Store::open(&kept)
            .with_context(|| format!("cannot open the kept index {}", kept.display()))?;
        // (A moved or copied kept dir names its old corpus root: `run_on`
        // re-roots the `eval` source before indexing.)
        Some(claw_memory_pg::copy_sqlite(&sqlite, &mut pg))
    } else {
        None
    };
    let result = match seeded {
        Some(Err(e)) => Err(e.into()),
        _ => run_on(&mut pg, &corpus, data, loaded, opts, progress),
    };
    pg.drop_namespace()
        .context("dropping the evaluation namespace")?;
    Ok(result?)
}

/// `claw memory sources` on PostgreSQL: this workspace's built-in and registered sources.
pub fn run_sources(settings: &Settings, args: super::index::SourcesArgs) -> anyhow::Result<Exit> {
    let pg = open_pg(settings)?;
    let sources = source_roots(&settings.mem, &pg)?;
    if args.json {
        print_json(&sources)?;
    } else {
        let mut out = std::io::stdout().lock();
        for s in &sources {
            writeln!(
                out,
                "{:<12} {:<10} {}",
                sanitize(&s.name),
                format!("{:?}", s.kind).to_lowercase(),
                sanitize(&s.root.display().to_string())
            )?;
        }
    }
    Ok(Exit::Ok)
}

/// `claw memory remove` on PostgreSQL: drop one of this workspace's sources and its rows.
pub fn run_remove(settings: &Settings, args: super::index::RemoveArgs) -> anyhow::Result<Exit> {
    let pg = open_pg(settings)?;
    match pg.remove_source(&args.name)? {
        Some((files, chunks)) => {
            println!(
                "removed source `{}` ({files} files, {chunks} chunks)",
                sanitize(&args.name)
            );
            Ok(Exit::Ok)
        }
        None => {
            eprintln!("no source named `{}`", sanitize(&args.name));
            Ok(Exit::NoMatch)
        }
    }
}

/// `claw memory watch` is not wired to PostgreSQL yet: refuse rather than
/// silently keep the local SQLite file fresh.
pub fn refuse_watch() -> anyhow::Result<Exit> {
    anyhow::bail!(
        "`claw memory watch` does not support memory.backend postgres yet; run `claw memory index` (searches sync changed files inline)"
    )
}

/// The assistant's `memory_search` / `memory_get` on the configured PostgreSQL
/// index (`claw -m`, the REPL): the same engine (`search_in`, `get_lines_in`) over
/// `PgStore`. Connects on first use; no inline sync (indexing is `claw memory
/// index`'s / the other machines' job), so the outcome's sync is `skipped`.
pub struct PgMemory {
    settings: Settings,
    backend: PgBackend,
    store: std::sync::OnceLock<PgStore>,
    loaded: std::sync::OnceLock<Loaded>,
}

impl PgMemory {
    /// The backend for `settings` when its `memory.backend` is PostgreSQL.
    pub fn for_settings(settings: &Settings) -> Option<PgMemory> {
        settings.pg.as_ref().map(|b| PgMemory {
            settings: settings.clone(),
            backend: b.clone(),
            store: std::sync::OnceLock::new(),
            loaded: std::sync::OnceLock::new(),
        })
    }

    fn store(&self) -> Result<&PgStore, claw_agent::tools::memory::MemoryBackendError> {
        use claw_memory::service::ServiceError;
        if let Some(s) = self.store.get() {
            return Ok(s);
        }
        let open = || -> Result<PgStore, claw_memory::store::StoreError> {
            let b = &self.backend;
            let state = self.settings.state_dir();
            let id = claw_memory_pg::workspace_id(&state).map_err(|source| {
                claw_memory::store::StoreError::StateDir {
                    path: state.clone(),
                    source,
                }
            })?;
            let mut cfg = PgConfig::new(&b.url, &b.namespace, id);
            cfg.schema = b.schema.clone();
            cfg.search_namespaces = b.search_namespaces.clone();
            PgStore::connect(cfg)
        };
        let store = open().map_err(|source| {
            claw_agent::tools::memory::MemoryBackendError::Open(ServiceError::Open {
                path: std::path::PathBuf::from(location(&self.settings)),
                source,
            })
        })?;
        Ok(self.store.get_or_init(|| store))
    }
}

/// Run `f` on its own thread: the blocking `postgres` client drives its own
/// runtime and panics when called from a tokio worker (where the agent's tools run).
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

impl Drop for PgMemory {
    /// The pool's connections close off the runtime too (closing one blocks on it).
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            off_runtime(move || drop(store));
        }
    }
}

impl claw_agent::tools::memory::MemoryBackend for PgMemory {
    fn search(
        &self,
        req: &SearchRequest,
    ) -> Result<SearchOutcome, claw_agent::tools::memory::MemoryBackendError> {
        off_runtime(|| self.search_now(req))
    }

    fn get(
        &self,
        req: &GetRequest,
    ) -> Result<claw_memory::search::GetResponse, claw_agent::tools::memory::MemoryBackendError>
    {
        off_runtime(|| self.get_now(req))
    }
}

impl PgMemory {
    fn search_now(
        &self,
        req: &SearchRequest,
    ) -> Result<SearchOutcome, claw_agent::tools::memory::MemoryBackendError> {
        let pg = self.store()?;
        let keyword_only_index = IndexStorage::meta(pg, "model")
            .map_err(claw_memory::search::types::SearchError::from)
            .map_err(claw_memory::service::ServiceError::from)?
            .is_some_and(|m| m.is_empty());
        let embedder = if req.mode == Mode::Fts || keyword_only_index {
            None
        } else {
            self.loaded
                .get_or_init(|| {
                    claw_memory::embed::load(
                        &self.settings.mem.embed,
                        self.settings.mem.memory.embed_batch_size,
                    )
                })
                .embedder()
        };
        let response = search_in(
            pg,
            embedder,
            &self.settings.mem.memory,
            req,
            self.settings.mem.clock.now_unix(),
        )
        .map_err(claw_memory::service::ServiceError::from)?;
        Ok(SearchOutcome {
            response,
            sync: SyncReport::Skipped,
        })
    }

    fn get_now(
        &self,
        req: &GetRequest,
    ) -> Result<claw_memory::search::GetResponse, claw_agent::tools::memory::MemoryBackendError>
    {
        let pg = self.store()?;
        let sources = source_roots(&self.settings.mem, pg)
            .map_err(claw_memory::search::types::SearchError::from)
            .map_err(claw_memory::service::ServiceError::from)?;
        // Another workspace's file (a search here can return it) comes from the index.
        Ok(get_here_or_shared(pg, &sources, req, None)
            .map(|(r, _)| r)
            .map_err(claw_memory::service::ServiceError::from)?)
    }
}
