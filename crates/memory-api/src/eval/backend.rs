//! The evaluation on either backend (`claw memory eval --backend`): SQLite
//! through [`runner::run`], or PostgreSQL with the same steps (one note per
//! document, the real indexer, the same search requests, the same metrics) in a
//! throw-away namespace of the configured `memory.backend`, dropped afterwards.

use super::beir::Dataset;
use super::runner::{
    self, EvalError, EvalOptions, EvalProgress, EvalReport, EvalStorage, prepare_corpus, run_on,
};
use crate::MemoryError;
use crate::pg::off_runtime;
use claw_memory::config::{Backend, MemoryConfig};
use claw_memory::embed::Loaded;
use claw_memory::store::StoreError;
use claw_memory_pg::{PgConfig, PgStore};
use std::path::Path;

/// Which storage an evaluation indexes and searches on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalBackend {
    /// A temporary SQLite file.
    Sqlite,
    /// A throw-away namespace of the configured PostgreSQL backend.
    Postgres,
}

/// Why an evaluation stopped.
#[derive(Debug, thiserror::Error)]
pub enum EvalRunError {
    /// The evaluation itself.
    #[error(transparent)]
    Eval(#[from] EvalError),
    /// The PostgreSQL backend (configuration, connection, namespace).
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// Dropping the evaluation's namespace afterwards.
    #[error("dropping the evaluation namespace")]
    Cleanup(#[source] StoreError),
}

/// Run the evaluation on `backend`. `mem` supplies the retrieval settings and,
/// for PostgreSQL, the connection (`mem.backend`). With `opts.work_dir` holding
/// a SQLite index of the corpus, PostgreSQL starts from a copy of it (vectors
/// included: nothing is embedded again).
pub fn run(
    backend: EvalBackend,
    data: &Dataset,
    mem: &MemoryConfig,
    loaded: &Loaded,
    opts: &EvalOptions,
    progress: &(dyn Fn(EvalProgress) + Sync),
) -> Result<EvalReport, EvalRunError> {
    match backend {
        EvalBackend::Sqlite => Ok(runner::run(data, mem, loaded, opts, progress)?),
        EvalBackend::Postgres => off_runtime(|| run_postgres(data, mem, loaded, opts, progress)),
    }
}

fn run_postgres(
    data: &Dataset,
    mem: &MemoryConfig,
    loaded: &Loaded,
    opts: &EvalOptions,
    progress: &(dyn Fn(EvalProgress) + Sync),
) -> Result<EvalReport, EvalRunError> {
    let Backend::Postgres(b) = &mem.backend else {
        return Err(MemoryError::NoPostgres.into());
    };
    let corpus = prepare_corpus(data, mem, opts, progress)?;
    let namespace = format!(
        "eval-{}-{}",
        std::process::id(),
        mem.clock.now().timestamp_millis()
    );
    let mut cfg = PgConfig::new(&b.url, &namespace, "eval");
    cfg.schema = b.schema.clone();
    let mut pg = PgStore::connect(cfg).map_err(|source| MemoryError::Open {
        location: format!("postgres:{}/{namespace}", b.schema),
        source,
    })?;
    // A kept work dir holding a SQLite index of this corpus: copy it, vectors
    // and embedding cache included, so the indexer finds every note unchanged.
    // (A moved or copied kept dir names its old corpus root: `run_on` re-roots
    // the source before indexing.)
    let kept = corpus.settings.db_path();
    let seeded = if opts.work_dir.is_some() && kept.is_file() {
        Some(
            claw_memory::store::Store::open(&kept)
                .and_then(|sqlite| claw_memory_pg::copy_sqlite(&sqlite, &mut pg)),
        )
    } else {
        None
    };
    let result = match seeded {
        Some(Err(e)) => Err(EvalRunError::Eval(EvalError::Store(e))),
        _ => run_on(&mut pg, &corpus, data, loaded, opts, progress).map_err(EvalRunError::from),
    };
    pg.drop_namespace().map_err(EvalRunError::Cleanup)?;
    result
}

/// The PostgreSQL store as the evaluation's storage.
impl EvalStorage for PgStore {
    fn add_source_root(&mut self, name: &str, root: &Path) -> Result<(), StoreError> {
        self.add_source(name, root)
    }

    fn move_source_root(&mut self, name: &str, root: &Path) -> Result<(), StoreError> {
        self.set_source_root(name, root).map(|_| ())
    }

    fn chunk_total(&self) -> Result<usize, StoreError> {
        Ok(self.stats()?.chunks as usize)
    }
}
