//! The evaluation run: writes the corpus as Markdown notes into a temporary
//! registered source, indexes it with the normal indexer, runs every query
//! through the normal search engine per mode, and scores the rankings.
//!
//! Invariant: all files live under a fresh temporary directory (removed on drop);
//! the user's workspace and database are never opened.
#![warn(missing_docs)]

use super::beir::Dataset;
use super::metrics::{self, Cutoffs, QueryMetrics, Run, Summary};
use super::{EVAL_SOURCE, doc_file_name, doc_markdown};
use claw_memory::config::DayZone;
use claw_memory::config::MemoryConfig;
use claw_memory::config::MemorySettings;
use claw_memory::embed::Embedder;
use claw_memory::embed::Loaded;
use claw_memory::index_storage::IndexStorage;
use claw_memory::indexer::{self, IndexError, IndexOptions};
use claw_memory::lock::{LockError, WriterLock};
use claw_memory::search::engine::search_in_zone;
use claw_memory::search::score::KeywordNorm;
use claw_memory::search::storage::SearchStorage;
use claw_memory::search::types::{Fallback, Mode, SearchHit, SearchRequest, SourceFilter};
use claw_memory::service::ServiceError;

use claw_memory::store::{Store, StoreError};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Errors that stop an evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("cannot write the temporary corpus at {path}: {source}")]
    /// The temporary corpus could not be written.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    #[error(transparent)]
    /// The temporary database.
    Store(#[from] StoreError),
    #[error(transparent)]
    /// The writer lock of the temporary index.
    Lock(#[from] LockError),
    #[error("indexing the corpus failed: {0}")]
    /// Indexing the corpus.
    Index(#[from] IndexError),
    #[error("search failed for query `{query}` in mode {mode}: {source}")]
    /// A query failed.
    Search {
        /// The variant (`hybrid`, `fts@vw0.50`, …).
        mode: String,
        /// The query id.
        query: String,
        /// Why.
        source: Box<ServiceError>,
    },
    #[error("the engine fell back ({fallback}) instead of running {mode} for query `{query}`")]
    /// The engine skipped a stage the mode needs: its figures would be mislabelled.
    FellBack {
        /// The variant.
        mode: String,
        /// The query id.
        query: String,
        /// The fallback the engine reported.
        fallback: Fallback,
    },
    #[error("split `{split}` of {dataset} has no queries")]
    /// Nothing to evaluate.
    NoQueries {
        /// The split asked for.
        split: String,
        /// The data set's name.
        dataset: String,
    },
    #[error("the indexer skipped {path} ({message}); the evaluation would be wrong")]
    /// The indexer left a document out: the figures would be wrong.
    DocumentSkipped {
        /// The document's path in the evaluation index.
        path: String,
        /// The indexer's message.
        message: String,
    },
    #[error("the query rewrite failed for query `{query}`: {reason}")]
    /// `--expand rewrite`: the model call failed (or none is configured).
    Rewrite {
        /// The query id.
        query: String,
        /// Why.
        reason: String,
    },
}

/// A retrieval configuration evaluated on the shared index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EvalMode {
    /// Keyword only (FTS5 BM25).
    Fts,
    /// Vector only.
    Vector,
    /// The default: vector + keyword blended, MMR on.
    Hybrid,
    /// Hybrid with MMR off.
    HybridNoMmr,
}

impl EvalMode {
    /// Every mode, in report order.
    pub const ALL: [EvalMode; 4] = [
        EvalMode::Fts,
        EvalMode::Vector,
        EvalMode::Hybrid,
        EvalMode::HybridNoMmr,
    ];

    /// The name used in reports and JSON keys.
    pub fn name(self) -> &'static str {
        match self {
            EvalMode::Fts => "fts",
            EvalMode::Vector => "vector",
            EvalMode::Hybrid => "hybrid",
            EvalMode::HybridNoMmr => "hybrid-nommr",
        }
    }

    /// Whether the mode needs an embedding model.
    pub fn needs_embedder(self) -> bool {
        self != EvalMode::Fts
    }
}

/// One evaluated configuration: a mode, optionally with the hybrid blend's vector
/// weight overridden (text weight = 1 − w), so one index serves a weight sweep.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Variant {
    /// The retrieval mode.
    pub mode: EvalMode,
    /// Vector weight of the blend (`None`: the configured one).
    pub vector_weight: Option<f64>,
}

impl Variant {
    /// Report label: the mode name, plus `@vw0.50` for a weight override.
    pub fn name(&self) -> String {
        match self.vector_weight {
            Some(w) => format!("{}@vw{w:.2}", self.mode.name()),
            None => self.mode.name().to_string(),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Modes to evaluate.
    pub modes: Vec<EvalMode>,
    /// Extra vector weights to evaluate the hybrid modes at (besides the configured one).
    pub vector_weights: Vec<f64>,
    /// Results requested per query (also the Recall cut-off).
    pub limit: usize,
    /// BM25 normalisation handed to the engine (a tuning knob).
    pub keyword_norm: KeywordNorm,
    /// Keep the corpus and index in this directory instead of a temporary one, so a
    /// later run reuses them: unchanged notes cost a hash, and the embedding cache
    /// answers every chunk text already embedded (variants of the keyword stage or
    /// of the fusion are then measured without re-embedding the corpus). `None`: a
    /// temporary directory removed afterwards.
    pub work_dir: Option<PathBuf>,
}

/// Progress notifications for a UI.
#[derive(Debug, Clone, PartialEq)]
pub enum EvalProgress {
    /// Writing the corpus notes.
    /// Writing the corpus notes (`docs` documents).
    Writing {
        /// Documents to write.
        docs: usize,
    },
    /// Indexing: `done` of `total` files.
    Indexing {
        /// Files indexed so far.
        done: usize,
        /// Files to index.
        total: usize,
    },
    /// Querying one mode: `done` of `total` queries.
    Querying {
        /// The mode.
        mode: EvalMode,
        /// Queries run so far.
        done: usize,
        /// Queries of the split.
        total: usize,
    },
}

/// The outcome of one mode.
#[derive(Debug, Clone)]
pub enum ModeOutcome {
    /// The mode ran.
    Ran(ModeResult),
    /// The mode could not run (no embedding model).
    Skipped {
        /// Why.
        reason: String,
    },
}

/// Scores and latency of one mode.
#[derive(Debug, Clone)]
pub struct ModeResult {
    /// Mean metrics.
    pub summary: Summary,
    /// Median query latency (ms).
    pub p50_ms: f64,
    /// 95th-percentile query latency (ms).
    pub p95_ms: f64,
    /// Metrics per query id.
    pub per_query: BTreeMap<String, QueryMetrics>,
    /// The evaluated rankings, for export as a TREC run.
    pub run: Run,
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct EvalReport {
    /// Data set name.
    pub dataset: String,
    /// The split evaluated.
    pub split: String,
    /// Queries of the split (those run).
    pub queries: usize,
    /// Documents in the corpus.
    pub documents: usize,
    /// Chunks indexed.
    pub chunks: usize,
    /// Indexing time (s).
    pub index_seconds: f64,
    /// Chunk embeddings the model computed while indexing (0 when a kept work
    /// dir, or its copy on another backend, already held every vector).
    pub embeddings_computed: usize,
    /// Metric cut-offs.
    pub cutoffs: Cutoffs,
    /// Each variant and its outcome, in report order.
    pub modes: Vec<(Variant, ModeOutcome)>,
}

/// Run the evaluation with the configured embedder as loaded (modes needing one
/// are reported as skipped, with the reason, when there is none).
pub fn run(
    data: &Dataset,
    settings: &MemoryConfig,
    embedder: &Loaded,
    opts: &EvalOptions,
    progress: &dyn Fn(EvalProgress),
) -> Result<EvalReport, EvalError> {
    let corpus = prepare_corpus(data, settings, opts, progress)?;
    let mut store = Store::open(&corpus.settings.db_path())?;
    run_on(&mut store, &corpus, data, embedder, opts, progress)
}

/// The corpus of an evaluation written as notes (one per document), and the
/// throw-away workspace settings to index it with.
pub struct PreparedCorpus {
    /// Holds the temporary root alive (None with a kept `work_dir`).
    _tmp: Option<tempfile::TempDir>,
    /// The folder of notes, registered as the `eval` source.
    pub corpus_dir: PathBuf,
    /// Settings whose workspace is the evaluation's own.
    pub settings: MemoryConfig,
    /// Note file name → document id.
    pub by_file: HashMap<String, String>,
}

/// The storage an evaluation indexes into and searches: both boundaries plus the
/// inherent operations it needs (SQLite's `Store`, PostgreSQL's `PgStore`).
pub trait EvalStorage: IndexStorage + SearchStorage {
    /// Register a source rooted at `root`.
    fn add_source_root(&mut self, name: &str, root: &Path) -> Result<(), StoreError>;
    /// Point the registered source `name` at `root`.
    fn move_source_root(&mut self, name: &str, root: &Path) -> Result<(), StoreError>;
    /// How many chunks the index holds.
    fn chunk_total(&self) -> Result<usize, StoreError>;

    /// Register `root` as the `eval` source unless it already is (re-rooting an
    /// `eval` source registered elsewhere: a moved or copied work dir).
    fn ensure_eval_source(&mut self, root: &Path) -> Result<(), StoreError> {
        match self.sources()?.iter().find(|s| s.name == EVAL_SOURCE) {
            Some(s) if s.root == root => Ok(()),
            Some(_) => self.move_source_root(EVAL_SOURCE, root),
            None => self.add_source_root(EVAL_SOURCE, root),
        }
    }
}

impl EvalStorage for Store {
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

/// Write the corpus as notes under `opts.work_dir` (or a fresh temporary
/// directory) and derive the evaluation's workspace settings.
pub fn prepare_corpus(
    data: &Dataset,
    settings: &MemoryConfig,
    opts: &EvalOptions,
    progress: &dyn Fn(EvalProgress),
) -> Result<PreparedCorpus, EvalError> {
    if data.queries.is_empty() {
        return Err(EvalError::NoQueries {
            split: data.split.clone(),
            dataset: data.name.clone(),
        });
    }
    let mut tmp = None;
    let root: PathBuf = match &opts.work_dir {
        Some(dir) => dir.clone(),
        None => {
            let t = tempfile::Builder::new()
                .prefix("claw-eval-")
                .tempdir()
                .map_err(|source| EvalError::Io {
                    path: std::env::temp_dir(),
                    source,
                })?;
            let path = t.path().to_path_buf();
            tmp = Some(t);
            path
        }
    };
    // One corpus directory per data set, so a kept work dir can hold several.
    let set = file_safe(&data.name);
    let corpus_dir = root.join("corpus").join(&set);
    let workspace = root.join("workspace").join(&set);
    let mut settings = settings.clone();
    settings.workspace = workspace.clone();
    // Its own throw-away state too: never the user's database or lock.
    settings.state_dir = workspace.join(claw_memory::state::LEGACY_DIR);
    for dir in [&corpus_dir, &settings.state_dir()] {
        std::fs::create_dir_all(dir).map_err(|source| EvalError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
    }

    // One note per document; remember which file is which id.
    progress(EvalProgress::Writing {
        docs: data.corpus.len(),
    });
    let mut by_file: HashMap<String, String> = HashMap::with_capacity(data.corpus.len());
    for doc in &data.corpus {
        let name = doc_file_name(&doc.id);
        let path = corpus_dir.join(&name);
        let text = doc_markdown(&doc.title, &doc.text);
        // A kept work dir: leave an identical note alone (its stat stays unchanged).
        if std::fs::read(&path).ok().as_deref() != Some(text.as_bytes()) {
            std::fs::write(&path, text).map_err(|source| EvalError::Io { path, source })?;
        }
        by_file.insert(name, doc.id.clone());
    }

    Ok(PreparedCorpus {
        _tmp: tmp,
        corpus_dir,
        settings,
        by_file,
    })
}

/// `name` with every character outside `[A-Za-z0-9-]` replaced by `_`: a
/// directory name for a data set or a conversation.
pub(crate) fn file_safe(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Index the prepared corpus into `store` with the normal indexer, run every
/// query through the normal search engine (`search_in` over `store`) per mode,
/// and score the rankings. Any backend: SQLite or PostgreSQL.
pub fn run_on(
    store: &mut dyn EvalStorage,
    corpus: &PreparedCorpus,
    data: &Dataset,
    embedder: &Loaded,
    opts: &EvalOptions,
    progress: &dyn Fn(EvalProgress),
) -> Result<EvalReport, EvalError> {
    let settings = &corpus.settings;
    let by_file = &corpus.by_file;
    let model = embedder.embedder();
    let no_model_reason = match embedder {
        Loaded::Ready(_) => None,
        Loaded::Disabled => Some("no embedding model (embedding provider is `none`)".to_string()),
        Loaded::Unavailable(e) => Some(e.to_string()),
    };
    store.ensure_eval_source(&corpus.corpus_dir)?;
    let lock = WriterLock::acquire(&settings.state_dir(), "eval", Duration::from_secs(5))?;
    let started = Instant::now();
    let total = data.corpus.len();
    let done = std::cell::Cell::new(0usize);
    let report = indexer::run(
        store,
        settings,
        model,
        &IndexOptions::default(),
        &lock,
        &|p| {
            if let indexer::Progress::File { .. } = p {
                done.set(done.get() + 1);
                progress(EvalProgress::Indexing {
                    done: done.get(),
                    total,
                });
            }
        },
    )?;
    let index_seconds = started.elapsed().as_secs_f64();
    drop(lock);
    let chunks = store.chunk_total()?;
    if let Some(issue) = report.issues.iter().find(|i| i.skipped) {
        return Err(EvalError::DocumentSkipped {
            path: issue.path.clone(),
            message: issue.message.clone(),
        });
    }

    let cutoffs = Cutoffs {
        recall: opts.limit,
        ..Cutoffs::default()
    };
    let base = settings.memory.clone();
    let now = settings.clock.now_unix();
    let storage: &dyn SearchStorage = store;
    let mut modes = Vec::new();
    let mut variants = Vec::new();
    for &mode in &opts.modes {
        variants.push(Variant {
            mode,
            vector_weight: None,
        });
        if matches!(mode, EvalMode::Hybrid | EvalMode::HybridNoMmr) {
            for &w in &opts.vector_weights {
                variants.push(Variant {
                    mode,
                    vector_weight: Some(w.clamp(0.0, 1.0)),
                });
            }
        }
    }
    for variant in variants {
        let mode = variant.mode;
        let mut params = base.clone();
        if let Some(w) = variant.vector_weight {
            params.vector_weight = w;
            params.text_weight = 1.0 - w;
        }
        if mode.needs_embedder()
            && let Some(reason) = &no_model_reason
        {
            modes.push((
                variant,
                ModeOutcome::Skipped {
                    reason: reason.clone(),
                },
            ));
            continue;
        }
        let mut run = Run::new();
        let mut latencies = Vec::with_capacity(data.queries.len());
        for (i, q) in data.queries.iter().enumerate() {
            let t = Instant::now();
            let hits = search_one(
                storage,
                model,
                &params,
                now,
                mode,
                opts.keyword_norm,
                &q.text,
                opts.limit,
            )
            .map_err(|e| e.for_query(&variant.name(), &q.id))?;
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            run.insert(q.id.clone(), ranking_to_run(&hits, by_file));
            progress(EvalProgress::Querying {
                mode,
                done: i + 1,
                total: data.queries.len(),
            });
        }
        latencies.sort_by(f64::total_cmp);
        let per_query = metrics::evaluate(&data.qrels, &run, cutoffs);
        modes.push((
            variant,
            ModeOutcome::Ran(ModeResult {
                summary: metrics::summarize(&per_query),
                p50_ms: metrics::percentile(&latencies, 50.0),
                p95_ms: metrics::percentile(&latencies, 95.0),
                per_query,
                run,
            }),
        ));
    }

    Ok(EvalReport {
        dataset: data.name.clone(),
        split: data.split.clone(),
        queries: data.queries.len(),
        documents: data.corpus.len(),
        chunks,
        index_seconds,
        embeddings_computed: report.embeddings_computed,
        cutoffs,
        modes,
    })
}

/// Turn the engine's ranked hits (source-relative paths, best first) into a
/// document ranking: a document ranks where its best chunk first appears
/// (later chunks of it are dropped); hits outside the corpus are ignored.
/// The ranking handed to the metrics is exactly the engine's order, expressed as
/// strictly decreasing scores `n, n-1, …` so trec_eval's score sort keeps it.
pub fn ranking_to_run(
    hit_paths: &[String],
    by_file: &HashMap<String, String>,
) -> Vec<(String, f64)> {
    let mut seen = std::collections::HashSet::new();
    let ids: Vec<&String> = hit_paths
        .iter()
        .filter_map(|p| by_file.get(p.rsplit('/').next().unwrap_or(p)))
        .filter(|id| seen.insert(id.as_str()))
        .collect();
    let n = ids.len();
    ids.into_iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), (n - i) as f64))
        .collect()
}

/// Why one evaluation query produced no ranking.
pub(crate) enum SearchOneError {
    Service(ServiceError),
    FellBack(Fallback),
    /// The model call of a query rewrite.
    Rewrite(String),
}

impl SearchOneError {
    /// The evaluation's error for query `query` of mode (variant) `mode`.
    pub(crate) fn for_query(self, mode: &str, query: &str) -> EvalError {
        match self {
            SearchOneError::Service(source) => EvalError::Search {
                mode: mode.to_string(),
                query: query.to_string(),
                source: Box::new(source),
            },
            SearchOneError::FellBack(fallback) => EvalError::FellBack {
                mode: mode.to_string(),
                query: query.to_string(),
                fallback,
            },
            SearchOneError::Rewrite(reason) => EvalError::Rewrite {
                query: query.to_string(),
                reason,
            },
        }
    }
}

/// One query through the normal search path (`search_in` over the evaluation's
/// storage, without a sync: the index was just built); returns hit paths, best
/// first. A silent fallback (e.g. vector mode answered by keywords) is an error:
/// the mode's figures would be mislabelled.
#[allow(clippy::too_many_arguments)]
fn search_one(
    storage: &dyn SearchStorage,
    model: Option<&dyn Embedder>,
    params: &MemorySettings,
    now: i64,
    mode: EvalMode,
    keyword_norm: KeywordNorm,
    query: &str,
    limit: usize,
) -> Result<Vec<String>, SearchOneError> {
    let source = SourceFilter::Named(EVAL_SOURCE.to_string());
    Ok(search_hits(
        storage,
        model,
        params,
        now,
        mode,
        keyword_norm,
        query,
        limit,
        source,
        &DayZone::Fixed(chrono::Offset::fix(&chrono::Utc)),
    )?
    .into_iter()
    .map(|h| h.path)
    .collect())
}

/// [`search_one`]'s search over `source`, returning the hits themselves.
#[allow(clippy::too_many_arguments)]
pub(crate) fn search_hits(
    storage: &dyn SearchStorage,
    model: Option<&dyn Embedder>,
    params: &MemorySettings,
    now: i64,
    mode: EvalMode,
    keyword_norm: KeywordNorm,
    query: &str,
    limit: usize,
    source: SourceFilter,
    zone: &DayZone,
) -> Result<Vec<SearchHit>, SearchOneError> {
    let mut req = SearchRequest::new(query);
    req.limit = limit;
    req.min_score = Some(f64::NEG_INFINITY);
    req.source = source;
    req.keyword_norm = keyword_norm;
    (req.mode, req.mmr) = match mode {
        EvalMode::Fts => (Mode::Fts, true),
        EvalMode::Vector => (Mode::Vector, true),
        EvalMode::Hybrid => (Mode::Hybrid, true),
        EvalMode::HybridNoMmr => (Mode::Hybrid, false),
    };
    let query_embedder = if mode == EvalMode::Fts { None } else { model };
    let response = search_in_zone(storage, query_embedder, params, &req, now, zone)
        .map_err(|e| SearchOneError::Service(ServiceError::from(e)))?;
    if let Some(fb) = response.fallback {
        return Err(SearchOneError::FellBack(fb));
    }
    Ok(response.results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranking_keeps_first_occurrence_and_engine_order() {
        let by_file: HashMap<String, String> =
            [("doc-a.md", "a"), ("doc-b.md", "b"), ("doc-c.md", "c")]
                .iter()
                .map(|(f, d)| (f.to_string(), d.to_string()))
                .collect();
        let hits: Vec<String> = ["doc-b.md", "doc-a.md", "doc-b.md", "other.md", "doc-c.md"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let run = ranking_to_run(&hits, &by_file);
        assert_eq!(
            run,
            vec![
                ("b".to_string(), 3.0),
                ("a".to_string(), 2.0),
                ("c".to_string(), 1.0)
            ]
        );
        // trec ordering reproduces the engine's order.
        let ids: Vec<String> = metrics::trec_order(&run)
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        assert_eq!(ids, vec!["b", "a", "c"]);
    }
}
