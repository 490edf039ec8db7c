//! `claw memory search` and `claw memory get`: argument parsing, opening the store
//! and (only when needed) the embedding model, and rendering results as text or JSON.

use super::output::{Exit, Output, print_json};
use crate::config::{EmbedProvider, Settings};
use crate::memory::embed::{self, Loaded};
use crate::memory::freshness::{self, SyncReport};
use crate::memory::search::engine::SearchResponse;
use crate::memory::search::engine::{
    self, GetRequest, Mode, SearchError, SearchRequest, SourceFilter,
};
use crate::memory::service::query_embedder;
use crate::memory::store::Store;
use anyhow::Context;
use std::io::Write;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Hybrid,
    Fts,
    Vector,
}

impl From<ModeArg> for Mode {
    fn from(m: ModeArg) -> Mode {
        match m {
            ModeArg::Hybrid => Mode::Hybrid,
            ModeArg::Fts => Mode::Fts,
            ModeArg::Vector => Mode::Vector,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// What to look for.
    pub query: String,
    /// Most results to return.
    #[arg(long, short = 'n', default_value_t = 6)]
    pub limit: usize,
    /// Drop results scoring below this (default from config, 0.35).
    #[arg(long, value_name = "X", allow_negative_numbers = true)]
    pub min_score: Option<f64>,
    /// Which stages to run.
    #[arg(long, value_enum, default_value_t = ModeArg::Hybrid)]
    pub mode: ModeArg,
    /// memory, sessions, all, or a registered source name.
    #[arg(long, default_value = "all", value_name = "SOURCE")]
    pub source: String,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Show each hit's score components.
    #[arg(long)]
    pub explain: bool,
    /// Do not sync changed files before searching.
    #[arg(long)]
    pub no_sync: bool,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Path of an indexed file (as printed by `claw memory search`).
    pub path: String,
    /// First line to print (1-based).
    #[arg(long, default_value_t = 1, value_name = "LINE")]
    pub from: usize,
    /// Most lines to print.
    #[arg(long, default_value_t = engine::GET_DEFAULT_LINES, value_name = "N")]
    pub lines: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `claw memory search --json`: the engine's response plus what the inline sync did.
#[derive(serde::Serialize)]
struct SearchJson<'a> {
    #[serde(flatten)]
    response: &'a SearchResponse,
    /// `{"status": "fresh" | "synced" | "stale" | "skipped", ...}`.
    sync: &'a SyncReport,
}

pub fn run_search(settings: &Settings, args: SearchArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    let db = settings.db_path();
    let mut store = Store::open(&db).with_context(|| format!("opening {}", db.display()))?;
    let mode: Mode = args.mode.into();
    // A cheap stat-level staleness check first: it decides whether the model is
    // needed even for a keyword-only search (to re-index the few dirty files).
    let staleness = if args.no_sync {
        None
    } else {
        Some(freshness::check(settings, &store).context("checking freshness")?)
    };
    let dirty = staleness.as_ref().is_some_and(|s| !s.is_fresh());
    // Load the model only when vectors are needed and the index has some.
    let loaded = query_embedder(settings, &store, if dirty { Mode::Hybrid } else { mode })?;
    if let Loaded::Unavailable(err) = &loaded
        && output == Output::Text
    {
        let hint = match &settings.embed {
            EmbedProvider::Local { .. } => embed::INSTALL_HINT.to_string(),
            _ => "check the embedding settings in the config file".to_string(),
        };
        eprintln!("note: keyword-only search, the embedding model did not load ({err}); {hint}");
    }
    let sync = match staleness {
        None => SyncReport::Skipped,
        Some(st) => freshness::sync_checked(
            &mut store,
            settings,
            loaded.embedder(),
            freshness::DEFAULT_SYNC_LIMIT,
            st,
        )
        .context("syncing changed files before the search")?,
    };
    if output == Output::Text
        && let Some(line) = sync.describe()
    {
        eprintln!("note: {line}");
    }
    let req = SearchRequest {
        query: args.query,
        limit: args.limit,
        min_score: args.min_score,
        mode,
        source: SourceFilter::parse(&args.source),
        explain: args.explain,
        mmr: true,
        keyword_norm: Default::default(),
    };
    let query_embedder = if mode == Mode::Fts {
        None
    } else {
        loaded.embedder()
    };
    let resp = engine::search(
        &store,
        query_embedder,
        &settings.memory,
        &req,
        settings.clock.now_unix(),
    )
    .map_err(|e| match e {
        SearchError::UnknownSource { .. } => anyhow::anyhow!(e),
        other => anyhow::Error::new(other).context("search failed"),
    })?;
    match output {
        Output::Json => print_json(&SearchJson {
            response: &resp,
            sync: &sync,
        })?,
        Output::Text => {
            let mut out = std::io::stdout().lock();
            if resp.results.is_empty() {
                writeln!(out, "No matches.")?;
            }
            for hit in &resp.results {
                writeln!(
                    out,
                    "{:.3}  {}:{}-{}",
                    hit.score, hit.path, hit.start_line, hit.end_line
                )?;
                writeln!(out, "{}", hit.snippet)?;
                if let Some(x) = &hit.explain {
                    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
                    // score = relevance × decay; the minimum score tests relevance.
                    writeln!(
                        out,
                        "  [relevance {:.3}  vector {} (calibrated {})  keyword {}  decay {:.3}  mmr {}{}]",
                        x.relevance,
                        f(x.vector),
                        f(x.vector_calibrated),
                        f(x.keyword),
                        x.decay,
                        x.mmr_rank.map_or("-".to_string(), |r| (r + 1).to_string()),
                        if x.pinned { "  pinned" } else { "" }
                    )?;
                }
                writeln!(out)?;
            }
            if args.explain
                && let Some(fb) = &resp.fallback
            {
                eprintln!("fallback: {fb}");
            }
        }
    }
    Ok(if resp.results.is_empty() {
        Exit::NoMatch
    } else {
        Exit::Ok
    })
}

pub fn run_get(settings: &Settings, args: GetArgs) -> anyhow::Result<Exit> {
    let db = settings.db_path();
    let store = Store::open(&db).with_context(|| format!("opening {}", db.display()))?;
    let req = GetRequest {
        path: args.path,
        from: args.from.max(1),
        lines: args.lines.max(1),
        max_chars: engine::GET_MAX_CHARS,
    };
    let resp = engine::get_lines(settings, &store, &req)?;
    if args.json {
        print_json(&resp)?;
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(resp.text.as_bytes())?;
        if let Some(next) = resp.next_from {
            eprintln!(
                "-- lines {}-{} of {}; continue with --from {next}",
                resp.from, resp.to, resp.total_lines
            );
        }
    }
    Ok(if resp.to >= resp.from {
        Exit::Ok
    } else {
        Exit::NoMatch
    })
}
