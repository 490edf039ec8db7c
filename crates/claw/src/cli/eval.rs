//! `claw memory eval`: retrieval quality on a BEIR data set, or evidence recall on
//! conversations indexed as session transcripts (`--memorybank`, `--synthetic`,
//! [`conv_report_json`]), through the normal indexing and search path (see
//! `claw_memory_api::eval`), printed as a Markdown table or one JSON object whose
//! shape is a stable contract for scripts; for BEIR:
//! `{"dataset", "split", "queries", "modes": {"<mode>": {"ndcg@10", "recall@100",
//! "mrr@10", "p50_ms", "p95_ms"} | {"skipped": "<reason>"}}, "index_seconds", …}`.

use super::output::{Exit, Output, print_json, show_progress};
use crate::config::Settings;
use anyhow::Context;
use claw_memory_api::KeywordNorm;
use claw_memory_api::embed::{self, Loaded};
use claw_memory_api::eval::beir;
use claw_memory_api::eval::conversations::{
    self, CUTOFFS, ConvOptions, ConvOutcome, ConvReport, Expansion, REWRITE_SYSTEM, RecallRow,
    Rewriter,
};
use claw_memory_api::eval::runner::{EvalMode, EvalOptions, EvalProgress, EvalReport, ModeOutcome};
use claw_memory_api::eval::{self, EvalBackend};
use claw_memory_api::eval::{memorybank, synthetic};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
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
#[command(group(clap::ArgGroup::new("dataset").required(true).args(["beir", "memorybank", "synthetic"])))]
pub struct EvalArgs {
    /// BEIR dataset directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).
    #[arg(long, value_name = "DIR")]
    pub beir: Option<PathBuf>,
    /// MemoryBank-layout conversations (memory_bank_en.json, probing_questions_en.jsonl),
    /// indexed as session transcripts: evidence recall by kind of question. Needs `--evidence`.
    #[arg(long, value_name = "DIR", requires = "evidence")]
    pub memorybank: Option<PathBuf>,
    /// The evidence turns of each question (JSON lines; `fixtures/memorybank-en/evidence.jsonl`).
    #[arg(long, value_name = "FILE", requires = "memorybank")]
    pub evidence: Option<PathBuf>,
    /// The conversational set claw generates itself (facts planted in half a year of
    /// sessions, asked in paraphrase).
    #[arg(long)]
    pub synthetic: bool,
    /// Qrels split (default: test if qrels/test.tsv exists, else train).
    #[arg(long)]
    pub split: Option<String>,
    /// Retrieval mode(s) to evaluate.
    #[arg(long, value_enum, default_value_t = ModeArg::Hybrid)]
    pub mode: ModeArg,
    /// Results per query (also the Recall cut-off; default 100, 10 for conversations).
    #[arg(long, value_parser = clap::value_parser!(u16).range(10..))]
    pub limit: Option<u16>,
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
    /// Conversations only: a second-pass variant on top of every mode, to measure it
    /// (`prf`: pseudo-relevance feedback; `entities`: names from the first hits;
    /// `neighbours`: a hit spans its neighbouring exchanges; `spread`: hits spread
    /// across sessions; `rewrite`: the configured LLM rewrites each question, and
    /// its new words are searched beside it).
    #[arg(long, value_enum)]
    pub expand: Option<ExpandArg>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ExpandArg {
    Prf,
    Entities,
    Neighbours,
    Spread,
    Rewrite,
}

impl ExpandArg {
    fn expansion(self) -> Expansion {
        match self {
            ExpandArg::Prf => Expansion::Prf,
            ExpandArg::Entities => Expansion::Entities,
            ExpandArg::Neighbours => Expansion::Neighbours,
            ExpandArg::Spread => Expansion::Spread,
            ExpandArg::Rewrite => Expansion::Rewrite,
        }
    }
}

pub fn run_eval(settings: &Settings, args: EvalArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    let Some(beir_dir) = args.beir.clone() else {
        return run_conversations(settings, &args, output);
    };
    let split = args
        .split
        .clone()
        .unwrap_or_else(|| beir::default_split(&beir_dir));
    let data = beir::load(&beir_dir, &split)
        .with_context(|| format!("cannot load the BEIR data set {}", beir_dir.display()))?;
    let modes = args.mode.modes();

    // Load the model only when a mode needs it (fts-only runs index keyword-only).
    let loaded = load_model(settings, &modes, &args);
    let bar = progress_bar(output);
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
            limit: usize::from(args.limit.unwrap_or(100)),
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

/// The model, unless no mode needs it and no work dir is kept (fts-only runs
/// index keyword-only).
fn load_model(settings: &Settings, modes: &[EvalMode], args: &EvalArgs) -> Loaded {
    if modes.iter().any(|m| m.needs_embedder()) || args.work_dir.is_some() {
        embed::load(&settings.mem.embed, settings.mem.memory.embed_batch_size)
    } else {
        Loaded::Disabled
    }
}

/// A progress bar on stderr for text output on a terminal, else a hidden one.
fn progress_bar(output: Output) -> indicatif::ProgressBar {
    if !show_progress(output) {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec})",
    ) {
        b.set_style(style.progress_chars("=> "));
    }
    b.enable_steady_tick(Duration::from_millis(120));
    b
}

/// `--memorybank DIR --evidence FILE` or `--synthetic`: evidence recall on
/// conversations indexed as session transcripts (`eval::conversations`).
fn run_conversations(settings: &Settings, args: &EvalArgs, output: Output) -> anyhow::Result<Exit> {
    let data = match (&args.memorybank, &args.evidence) {
        (Some(dir), Some(evidence)) => memorybank::load(dir, evidence)
            .with_context(|| format!("cannot load the MemoryBank data set {}", dir.display()))?,
        _ => synthetic::generate(),
    };
    let modes = args.mode.modes();
    let rewriter = match args.expand {
        Some(ExpandArg::Rewrite) => Some(llm_rewriter(settings)?),
        _ => None,
    };
    let loaded = load_model(settings, &modes, args);
    let bar = progress_bar(output);
    let on_progress = |p: EvalProgress| match p {
        EvalProgress::Writing { docs } => bar.set_message(format!("writing {docs} sessions")),
        EvalProgress::Indexing { done, total } => {
            bar.set_message("indexing conversations");
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
        EvalProgress::Querying { mode, done, total } => {
            bar.set_message(format!("asking ({})", mode.name()));
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    };
    let report = conversations::run(
        &data,
        &settings.mem,
        &loaded,
        &ConvOptions {
            modes,
            limit: args.limit.map_or(10, usize::from),
            keyword_norm: match args.keyword_norm {
                None => KeywordNorm::default(),
                Some(NormArg::MaxScaled) => KeywordNorm::MaxScaled,
                Some(NormArg::MinMax) => KeywordNorm::MinMax,
            },
            work_dir: args.work_dir.clone(),
            expand: args.expand.map(ExpandArg::expansion),
            rewriter,
        },
        &on_progress,
    )
    .context("evaluation failed")?;
    bar.finish_and_clear();
    match output {
        Output::Json => print_json(&conv_report_json(&report, embedder_name(&loaded)))?,
        Output::Text => print!(
            "{}",
            super::output::sanitize(&conv_report_table(
                &report,
                embedder_name(&loaded).as_deref()
            ))
        ),
    }
    let ran = report
        .modes
        .iter()
        .any(|(_, o)| matches!(o, ConvOutcome::Ran(_)));
    Ok(if ran { Exit::Ok } else { Exit::Error })
}

/// `--expand rewrite`'s model: the configured LLM (`CLAW_LLM_*` or the
/// configuration's profiles, with their failover) asked [`REWRITE_SYSTEM`] for
/// each question, once per question (the modes share the reply). Runs on the
/// blocking thread of the evaluation, through the process's runtime.
fn llm_rewriter(settings: &Settings) -> anyhow::Result<Rewriter> {
    use claw_agent::message::{ChatRequest, Message};
    let agent = crate::app::agent_settings(settings)
        .context("`--expand rewrite` needs an LLM (set CLAW_LLM_API and CLAW_LLM_MODEL)")?;
    let chain = claw_agent::provider::ProviderChain::new(
        agent.profiles.clone(),
        claw_agent::provider::RetryPolicy::default(),
    )
    .context("cannot set up the LLM client")?;
    let runtime = tokio::runtime::Handle::try_current()
        .context("`--expand rewrite` runs inside the CLI's runtime")?;
    let clock = settings.mem.clock;
    let replies: Mutex<HashMap<String, String>> = Mutex::new(HashMap::new());
    Ok(Rewriter(Arc::new(move |query: &str| {
        if let Some(r) = replies.lock().unwrap_or_else(|p| p.into_inner()).get(query) {
            return Ok(r.clone());
        }
        let req = ChatRequest {
            system: REWRITE_SYSTEM.to_string(),
            messages: vec![Message::user(query, clock.now())],
            tools: Vec::new(),
            max_tokens: 64,
        };
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let cancel = tokio_util::sync::CancellationToken::new();
        let reply = runtime
            .block_on(chain.complete(&req, &tx, &cancel))
            .map_err(|e| e.to_string())?;
        replies
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(query.to_string(), reply.text.clone());
        Ok(reply.text)
    })))
}

/// One recall row as JSON: `questions`, `recall_any@1` … `recall_all@10`.
fn recall_json(row: &RecallRow) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    m.insert("questions".into(), row.questions.into());
    for (i, k) in CUTOFFS.iter().enumerate() {
        m.insert(format!("recall_any@{k}"), round(row.any[i], 4).into());
    }
    for (i, k) in CUTOFFS.iter().enumerate() {
        m.insert(format!("recall_all@{k}"), round(row.all[i], 4).into());
    }
    serde_json::Value::Object(m)
}

/// The conversational report as one JSON object: `{"dataset", "conversations",
/// "sessions", "turns", "questions", "unanswerable", "chunks", "model", "limit",
/// "modes": {"<mode>": {"questions", "recall_any@1|5|10", "recall_all@1|5|10",
/// "lines_per_hit", "p50_ms", "p95_ms", "by_kind": {"<kind>": {…}}, "missed": [ids],
/// "per_question": [{"id", "kind", "any_rank", "all_rank", "hits": [citations]}]}
/// | {"skipped"}}, "index_seconds", "embeddings_computed"}`.
pub fn conv_report_json(r: &ConvReport, model: Option<String>) -> serde_json::Value {
    let mut modes = serde_json::Map::new();
    for (mode, outcome) in &r.modes {
        let v = match outcome {
            ConvOutcome::Ran(m) => {
                let mut v = recall_json(&m.overall);
                let o = v.as_object_mut().expect("an object");
                o.insert("lines_per_hit".into(), round(m.lines_per_hit, 2).into());
                o.insert("p50_ms".into(), round(m.p50_ms, 2).into());
                o.insert("p95_ms".into(), round(m.p95_ms, 2).into());
                let by_kind: serde_json::Map<String, serde_json::Value> = m
                    .by_kind
                    .iter()
                    .map(|(k, row)| (k.clone(), recall_json(row)))
                    .collect();
                o.insert("by_kind".into(), by_kind.into());
                let missed: Vec<&str> = m
                    .per_question
                    .iter()
                    .filter(|q| q.any_rank.is_none())
                    .map(|q| q.id.as_str())
                    .collect();
                o.insert("missed".into(), missed.into());
                let per: Vec<serde_json::Value> = m
                    .per_question
                    .iter()
                    .map(|q| {
                        serde_json::json!({
                            "id": q.id, "kind": q.kind, "any_rank": q.any_rank,
                            "all_rank": q.all_rank, "hits": q.hits,
                        })
                    })
                    .collect();
                o.insert("per_question".into(), per.into());
                v
            }
            ConvOutcome::Skipped { reason } => serde_json::json!({ "skipped": reason }),
        };
        modes.insert(mode.name().to_string(), v);
    }
    serde_json::json!({
        "dataset": r.dataset,
        "conversations": r.conversations,
        "sessions": r.sessions,
        "turns": r.turns,
        "questions": r.questions,
        "unanswerable": r.unanswerable,
        "chunks": r.chunks,
        "model": model,
        "limit": r.limit,
        "modes": modes,
        "index_seconds": round(r.index_seconds, 2),
        "embeddings_computed": r.embeddings_computed,
        "expand": r.expand.map(|e| e.name()),
    })
}

/// The conversational report as a Markdown table: a row per mode and kind.
pub fn conv_report_table(r: &ConvReport, model: Option<&str>) -> String {
    let mut s = format!(
        "{}: {} conversations, {} sessions, {} turns, {} questions{}, {} chunks; indexed in {:.1} s ({})

",
        r.dataset,
        r.conversations,
        r.sessions,
        r.turns,
        r.questions,
        if r.unanswerable > 0 {
            format!(" (+{} without evidence in the history, not scored)", r.unanswerable)
        } else {
            String::new()
        },
        r.chunks,
        r.index_seconds,
        model.map_or_else(|| "keyword-only".to_string(), |m| format!("model {m}")),
    );
    if let Some(e) = r.expand {
        s.push_str(&format!("second pass: `--expand {}`\n\n", e.name()));
    }
    s.push_str(
        "| mode | questions | any@1 | any@5 | any@10 | all@1 | all@5 | all@10 | lines/hit | p50 ms |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let row = |label: &str, q: &RecallRow, tail: &str| {
        format!(
            "| {label} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |{tail}\n",
            q.questions, q.any[0], q.any[1], q.any[2], q.all[0], q.all[1], q.all[2]
        )
    };
    for (mode, outcome) in &r.modes {
        match outcome {
            ConvOutcome::Ran(m) => {
                s.push_str(&row(
                    &format!("**{}**", mode.name()),
                    &m.overall,
                    &format!(" {:.2} | {:.1} |", m.lines_per_hit, m.p50_ms),
                ));
                for (kind, q) in &m.by_kind {
                    s.push_str(&row(&format!("{} · {kind}", mode.name()), q, " | |"));
                }
            }
            ConvOutcome::Skipped { reason } => s.push_str(&format!(
                "| {} | skipped: {} | | | | | | | | |\n",
                mode.name(),
                reason.replace('|', "/")
            )),
        }
    }
    s
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
