//! `claw memory eval`: retrieval quality on a BEIR data set through the normal
//! indexing and search path (see `claw_memory_api::eval`), printed as a Markdown table or
//! one JSON object whose shape is a stable contract for scripts:
//! `{"dataset", "split", "queries", "modes": {"<mode>": {"ndcg@10", "recall@100",
//! "mrr@10", "p50_ms", "p95_ms"} | {"skipped": "<reason>"}}, "index_seconds", …}`.

use super::output::{Exit, Output, print_json, show_progress};
use crate::config::Settings;
use anyhow::Context;
use claw_memory_api::KeywordNorm;
use claw_memory_api::embed::{self, Loaded};
use claw_memory_api::eval::beir;
use claw_memory_api::eval::runner::{EvalMode, EvalOptions, EvalProgress, EvalReport, ModeOutcome};
use claw_memory_api::eval::{self, EvalBackend};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `--backend`: the storage an evaluation runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendArg {
    Sqlite,
    Postgres,
}

/// Which modes to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Hybrid,
    Fts,
    Vector,
    /// Hybrid with MMR off.
    #[value(name = "hybrid-nommr")]
    HybridNoMmr,
    /// fts, vector, hybrid and hybrid-nommr on one index.
    All,
}

impl ModeArg {
    fn modes(self) -> Vec<EvalMode> {
        match self {
            ModeArg::Hybrid => vec![EvalMode::Hybrid],
            ModeArg::Fts => vec![EvalMode::Fts],
            ModeArg::Vector => vec![EvalMode::Vector],
            ModeArg::HybridNoMmr => vec![EvalMode::HybridNoMmr],
            ModeArg::All => EvalMode::ALL.to_vec(),
        }
    }
}

/// BM25 normalisation choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum NormArg {
    MaxScaled,
    MinMax,
}

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
    #[arg(long, value_name = "DIR")]
    pub beir: PathBuf,
    /// Qrels split (default: test if qrels/test.tsv exists, else train).
    #[arg(long)]
    pub split: Option<String>,
    /// Retrieval mode(s) to evaluate.
    #[arg(long, value_enum, default_value_t = ModeArg::Hybrid)]
    pub mode: ModeArg,
    /// Results per query (also the Recall cut-off).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(10..))]
    pub limit: u16,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Also evaluate the hybrid modes at these vector weights (comma-separated,
    /// text weight = 1 − w), on the same index: a tuning sweep.
    #[arg(long, value_delimiter = ',', value_name = "W,...")]
    pub vector_weights: Vec<f64>,
    /// BM25 normalisation (a tuning knob; default: the engine's).
    #[arg(long, value_enum)]
    pub keyword_norm: Option<NormArg>,
    /// Also write each mode's ranking as a TREC run file (`<DIR>/<mode>.run`), for trec_eval.
    #[arg(long, value_name = "DIR")]
    pub save_run: Option<PathBuf>,
    /// Index and search on this backend (`postgres`: the configured
    /// `memory.backend`, in a throw-away namespace).
    #[arg(long, value_enum, default_value_t = BackendArg::Sqlite)]
    pub backend: BackendArg,
    /// Keep the corpus and index in DIR (created if needed) and reuse them on the next
    /// run: only changed notes are re-indexed and the embedding cache answers chunk
    /// texts already embedded. The model is loaded whatever the mode, so an fts-only
    /// run evaluates the same index as the others.
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

pub fn run_eval(settings: &Settings, args: EvalArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    let split = args
        .split
        .clone()
        .unwrap_or_else(|| beir::default_split(&args.beir));
    let data = beir::load(&args.beir, &split)
        .with_context(|| format!("cannot load the BEIR data set {}", args.beir.display()))?;
    let modes = args.mode.modes();

    // Load the model only when a mode needs it (fts-only runs index keyword-only).
    let loaded = if modes.iter().any(|m| m.needs_embedder()) || args.work_dir.is_some() {
        embed::load(&settings.mem.embed, settings.mem.memory.embed_batch_size)
    } else {
        Loaded::Disabled
    };

    let bar = if show_progress(output) {
        let b = indicatif::ProgressBar::new(0);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec})",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b.enable_steady_tick(Duration::from_millis(120));
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let on_progress = |p: EvalProgress| match p {
        EvalProgress::Writing { docs } => {
            bar.set_message(format!("writing {docs} documents"));
        }
        EvalProgress::Indexing { done, total } => {
            bar.set_message("indexing");
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
        EvalProgress::Querying { mode, done, total } => {
            bar.set_message(format!("querying ({})", mode.name()));
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    };
    let backend = match args.backend {
        BackendArg::Sqlite => EvalBackend::Sqlite,
        BackendArg::Postgres => EvalBackend::Postgres,
    };
    let report = eval::backend::run(
        backend,
        &data,
        &settings.mem,
        &loaded,
        &EvalOptions {
            modes,
            limit: usize::from(args.limit),
            vector_weights: args.vector_weights.clone(),
            keyword_norm: match args.keyword_norm {
                None => KeywordNorm::default(),
                Some(NormArg::MaxScaled) => KeywordNorm::MaxScaled,
                Some(NormArg::MinMax) => KeywordNorm::MinMax,
            },
            work_dir: args.work_dir.clone(),
        },
        &on_progress,
    )
    .context("evaluation failed")?;
    bar.finish_and_clear();

    if let Some(dir) = &args.save_run {
        save_runs(dir, &report)?;
    }
    match output {
        Output::Json => print_json(&report_json(&report, embedder_name(&loaded)))?,
        Output::Text => print!(
            "{}",
            super::output::sanitize(&report_table(&report, embedder_name(&loaded).as_deref()))
        ),
    }
    let ran = report
        .modes
        .iter()
        .any(|(_, o)| matches!(o, ModeOutcome::Ran(_)));
    Ok(if ran { Exit::Ok } else { Exit::Error })
}

fn embedder_name(loaded: &Loaded) -> Option<String> {
    loaded.embedder().map(|e| e.model_id().to_string())
}

/// Four decimals for metrics, as BEIR tables print them.
fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// The stable JSON contract.
pub fn report_json(r: &EvalReport, model: Option<String>) -> serde_json::Value {
    let mut modes = serde_json::Map::new();
    for (mode, outcome) in &r.modes {
        let v = match outcome {
            ModeOutcome::Ran(m) => serde_json::json!({
                format!("ndcg@{}", r.cutoffs.ndcg): round(m.summary.ndcg, 4),
                format!("recall@{}", r.cutoffs.recall): round(m.summary.recall, 4),
                format!("mrr@{}", r.cutoffs.mrr): round(m.summary.mrr, 4),
                "p50_ms": round(m.p50_ms, 2),
                "p95_ms": round(m.p95_ms, 2),
                "evaluated_queries": m.summary.queries,
            }),
            ModeOutcome::Skipped { reason } => serde_json::json!({ "skipped": reason }),
        };
        modes.insert(mode.name(), v);
    }
    serde_json::json!({
        "dataset": r.dataset,
        "split": r.split,
        "queries": r.queries,
        "documents": r.documents,
        "chunks": r.chunks,
        "model": model,
        "modes": modes,
        "index_seconds": round(r.index_seconds, 2),
        "embeddings_computed": r.embeddings_computed,
    })
}

/// A Markdown table (readable as plain text too).
pub fn report_table(r: &EvalReport, model: Option<&str>) -> String {
    let c = r.cutoffs;
    let mut s = format!(
        "{} ({} split): {} queries, {} documents, {} chunks; indexed in {:.1} s ({})\n\n",
        r.dataset,
        r.split,
        r.queries,
        r.documents,
        r.chunks,
        r.index_seconds,
        model.map_or_else(|| "keyword-only".to_string(), |m| format!("model {m}")),
    );
    s.push_str(&format!(
        "| mode | nDCG@{} | Recall@{} | MRR@{} | p50 ms | p95 ms |\n|---|---:|---:|---:|---:|---:|\n",
        c.ndcg, c.recall, c.mrr
    ));
    for (mode, outcome) in &r.modes {
        match outcome {
            ModeOutcome::Ran(m) => s.push_str(&format!(
                "| {} | {:.4} | {:.4} | {:.4} | {:.1} | {:.1} |\n",
                mode.name(),
                m.summary.ndcg,
                m.summary.recall,
                m.summary.mrr,
                m.p50_ms,
                m.p95_ms
            )),
            ModeOutcome::Skipped { reason } => s.push_str(&format!(
                "| {} | skipped: {} | | | | |\n",
                mode.name(),
                reason.replace('|', "/")
            )),
        }
    }
    s
}

/// TREC run format: `qid Q0 docid rank score tag`.
fn save_runs(dir: &Path, r: &EvalReport) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    for (mode, outcome) in &r.modes {
        let ModeOutcome::Ran(m) = outcome else {
            continue;
        };
        let path = dir.join(format!("{}.run", mode.name()));
        let file = std::fs::File::create(&path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        let mut w = std::io::BufWriter::new(file);
        for (q, docs) in &m.run {
            for (i, (d, score)) in docs.iter().enumerate() {
                writeln!(w, "{q} Q0 {d} {} {score} claw-{}", i + 1, mode.name())
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
        }
        w.flush()
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}
