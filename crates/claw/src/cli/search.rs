//! `claw memory search` and `claw memory get`: argument parsing, opening the store
//! and (only when needed) the embedding model, and rendering results as text or JSON.

use super::output::{Exit, Output, print_json, sanitize};
use crate::config::{EmbedProvider, Settings};
use claw_memory_api::OversizedNote;
use claw_memory_api::{
    Fallback, FileRef, GET_DEFAULT_LINES, GET_MAX_CHARS, GetRequest, GetResponse, Memory,
    MemoryError, Mode, SearchError, SearchOutcome, SearchRequest, SearchResponse, SourceFilter,
    StaleReason, SyncPolicy, SyncReport,
};
use serde::Serialize;
use std::io::Write;

/// `--mode`: the engine's one [`Mode`], offered to clap by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeArg(pub Mode);

impl clap::ValueEnum for ModeArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[
            ModeArg(Mode::Hybrid),
            ModeArg(Mode::Fts),
            ModeArg(Mode::Vector),
        ]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}

impl std::fmt::Display for ModeArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
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
    #[arg(long, value_name = "X", allow_negative_numbers = true, value_parser = super::output::finite_f64)]
    pub min_score: Option<f64>,
    /// Which stages to run.
    #[arg(long, value_enum, default_value_t = ModeArg(Mode::Hybrid))]
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
    /// Search in this process even when a gateway runs for the workspace.
    #[arg(long)]
    pub local: bool,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Path of an indexed file (as printed by `claw memory search`).
    pub path: String,
    /// First line to print (1-based).
    #[arg(long, default_value_t = 1, value_name = "LINE")]
    pub from: usize,
    /// Most lines to print.
    #[arg(long, default_value_t = GET_DEFAULT_LINES, value_name = "N")]
    pub lines: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Read in this process even when a gateway runs for the workspace.
    #[arg(long)]
    pub local: bool,
    /// `memory.backend: postgres` only: the file as the workspace with this id
    /// (another machine sharing the namespace) indexed it; `claw memory status` prints the id.
    #[arg(long, value_name = "ID")]
    pub workspace_id: Option<String>,
}

/// Ask the running gateway (if any) for `path` with `body`: its JSON bytes and
/// headers on success; None when there is no gateway, it cannot be reached or it
/// answered an error (the local run then produces the exact error output).
fn via_gateway(
    settings: &Settings,
    path: &str,
    body: serde_json::Value,
) -> Option<claw_gateway::client::HttpResponse> {
    let client = crate::app::running_gateway(settings)?;
    let resp = client.post_json(path, &body).ok()?;
    (resp.status == 200).then_some(resp)
}

/// The same search through the gateway: the outcome parsed back (for text) and
/// the exact bytes it serialised (for `--json`), plus why its model did not load.
fn search_via_gateway(
    settings: &Settings,
    args: &SearchArgs,
) -> Option<(SearchOutcome, Vec<u8>, Option<String>)> {
    let body = serde_json::json!({
        "query": args.query,
        "limit": args.limit,
        "min_score": args.min_score,
        "mode": args.mode.0.as_str(),
        "source": args.source,
        "explain": args.explain,
        "no_sync": args.no_sync,
    });
    let resp = via_gateway(settings, "/v1/memory/search", body)?;
    let value: serde_json::Value = serde_json::from_slice(&resp.body).ok()?;
    let response = serde_json::from_value(value.clone()).ok()?;
    let sync = serde_json::from_value(value.get("sync")?.clone()).ok()?;
    let too_big = match value.get("too_big") {
        Some(v) => serde_json::from_value(v.clone()).ok()?,
        None => Vec::new(),
    };
    let embedder_error = resp
        .header(claw_gateway::http::EMBEDDER_ERROR_HEADER)
        .map(str::to_string);
    let outcome = SearchOutcome {
        response,
        sync,
        too_big,
    };
    Some((outcome, resp.body, embedder_error))
}

/// What the user can do about a service error, when there is something: the
/// library's errors name no command, the CLI adds the hint.
fn hint(e: &SearchError) -> Option<&'static str> {
    match e {
        SearchError::NotIndexed(_) => {
            Some("run `claw memory index`, or check the path with `claw memory search`")
        }
        _ => None,
    }
}

/// A memory error as the CLI reports it (`error: …` with its causes).
fn report(e: MemoryError, what: &'static str) -> anyhow::Error {
    match e.into_search_error() {
        Ok(inner) => match hint(&inner) {
            Some(h) => anyhow::Error::new(super::errors::WithHint { inner, hint: h }),
            None => match inner {
                e @ SearchError::UnknownSource { .. } => anyhow::anyhow!(e),
                e if what.is_empty() => anyhow::Error::new(e),
                e => anyhow::Error::new(e).context(what),
            },
        },
        Err(other) => anyhow::Error::new(other),
    }
}

/// A stale reason as the CLI says it: the library's sentence, plus what to run
/// when only a full index helps (the form the JSON `reason` has always had).
pub fn stale_reason(r: &StaleReason) -> String {
    match r {
        StaleReason::Identity(_) => format!("{r}; run `claw memory index`"),
        _ => r.to_string(),
    }
}

/// One `note:` line for the text output about the inline sync (None when there
/// is nothing worth saying).
pub fn describe_sync(r: &SyncReport) -> Option<String> {
    let note = r.note()?;
    Some(match r {
        SyncReport::Stale { reason, .. } => {
            // The engine's note names no command; the CLI says which one helps
            // (inside the reason for a changed model, after it in every case).
            let note = match reason {
                StaleReason::Identity(_) => note.replacen(
                    &format!("({reason})"),
                    &format!("({})", stale_reason(reason)),
                    1,
                ),
                _ => note,
            };
            format!("{note}; run `claw memory index` or `claw memory watch`")
        }
        _ => note,
    })
}

/// One `note:` line naming the notes a search cannot find because they are
/// over the index's size limit (None when there are none).
pub fn describe_too_big(too_big: &[OversizedNote]) -> Option<String> {
    claw_memory_api::describe_oversized(too_big)
        .map(|line| format!("{line} (split them, or raise memory.max_file_bytes in the config)"))
}

/// `claw memory search --json`: the engine's response flattened beside `sync`
/// (and `too_big` when notes are left out for their size).
#[derive(serde::Serialize)]
struct SearchJson<'a> {
    #[serde(flatten)]
    response: &'a SearchResponse,
    sync: SyncJson<'a>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    too_big: &'a [OversizedNote],
}

/// The `sync` object, fields in the order the contract has always had.
#[derive(serde::Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum SyncJson<'a> {
    Fresh {
        checked_ms: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        watcher: Option<i64>,
    },
    Synced {
        reindexed: &'a [FileRef],
        removed: &'a [FileRef],
        elapsed_ms: u64,
    },
    Stale {
        pending: usize,
        reason: String,
        sample: &'a [FileRef],
    },
    Skipped,
}

impl<'a> From<&'a SyncReport> for SyncJson<'a> {
    fn from(r: &'a SyncReport) -> SyncJson<'a> {
        match r {
            SyncReport::Fresh {
                checked_ms,
                watcher,
            } => SyncJson::Fresh {
                checked_ms: *checked_ms,
                watcher: *watcher,
            },
            SyncReport::Synced {
                reindexed,
                removed,
                elapsed_ms,
            } => SyncJson::Synced {
                reindexed,
                removed,
                elapsed_ms: *elapsed_ms,
            },
            SyncReport::Stale {
                pending,
                reason,
                sample,
            } => SyncJson::Stale {
                pending: *pending,
                reason: stale_reason(reason),
                sample,
            },
            SyncReport::Skipped => SyncJson::Skipped,
        }
    }
}

pub fn run_search(settings: &Settings, args: SearchArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    if !args.local
        && let Some((outcome, bytes, embedder_error)) = search_via_gateway(settings, &args)
    {
        if let Some(err) = embedder_error
            && output == Output::Text
        {
            print_embedder_note(settings, &err);
        }
        return render_search(&outcome, Some(&bytes), output, args.explain);
    }
    let mut service = Memory::open(settings.mem.clone()).map_err(|e| report(e, ""))?;
    service.set_lock_holder("claw memory search (sync)");
    let req = SearchRequest {
        limit: args.limit,
        min_score: args.min_score,
        mode: args.mode.0,
        source: SourceFilter::parse(&args.source),
        explain: args.explain,
        ..SearchRequest::new(args.query)
    };
    let policy = SyncPolicy::skip_if(args.no_sync);
    let result = service.search(&req, policy);
    if let Some(err) = service.embedder_error()
        && output == Output::Text
    {
        print_embedder_note(settings, &err.to_string());
    }
    let outcome = result.map_err(|e| report(e, "search failed"))?;
    // Keyword-only for want of vectors while a model is available: say so.
    if output == Output::Text
        && matches!(
            outcome.response.fallback,
            Some(Fallback::NoVectors | Fallback::ModelMismatch)
        )
        && let Ok(Some(g)) = service.vector_gap()
    {
        eprintln!("note: keyword-only search: {}", sanitize(&g.describe()));
    }
    let exit = render_search(&outcome, None, output, args.explain);
    // The process exits next: the model need not be freed.
    service.finish_for_exit();
    exit
}

fn print_embedder_note(settings: &Settings, err: &str) {
    let hint = match &settings.mem.embed {
        EmbedProvider::Local { .. } => super::errors::INSTALL_HINT.to_string(),
        _ => "check the embedding settings in the config file".to_string(),
    };
    let note = format!("keyword-only search, the embedding model did not load ({err}); {hint}");
    eprintln!("note: {}", sanitize(&note));
}

/// Print a search outcome; `json_bytes` are the gateway's bytes of the same
/// object (printed verbatim, so the output is identical either way). Every
/// backend prints through it (`cli/pg.rs` too).
pub fn render_search(
    outcome: &SearchOutcome,
    json_bytes: Option<&[u8]>,
    output: Output,
    explain: bool,
) -> anyhow::Result<Exit> {
    let resp = &outcome.response;
    if output == Output::Text {
        let notes = [
            describe_sync(&outcome.sync),
            describe_too_big(&outcome.too_big),
        ];
        for line in notes.into_iter().flatten() {
            eprintln!("note: {}", sanitize(&line));
        }
    }
    match (output, json_bytes) {
        (Output::Json, Some(bytes)) => {
            let mut out = std::io::stdout().lock();
            out.write_all(bytes)?;
            writeln!(out)?;
        }
        (Output::Json, None) => print_json(&SearchJson {
            response: resp,
            sync: (&outcome.sync).into(),
            too_big: &outcome.too_big,
        })?,
        (Output::Text, _) => {
            let mut out = std::io::stdout().lock();
            if resp.results.is_empty() {
                writeln!(out, "No matches.")?;
            }
            for hit in &resp.results {
                writeln!(
                    out,
                    "{:.3}  {}:{}-{}",
                    hit.score,
                    sanitize(&hit.path),
                    hit.start_line,
                    hit.end_line
                )?;
                writeln!(out, "{}", sanitize(&hit.snippet))?;
                if let Some(x) = &hit.explain {
                    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
                    // score = fused × decay; the minimum score tests relevance.
                    writeln!(
                        out,
                        "  [relevance {:.3}  fused {:.3} ({} {:.2}/{:.2})  vector {} (calibrated {})  keyword {}{}  decay {:.3}  mmr {}{}]",
                        x.relevance,
                        x.blended,
                        x.fusion.name(),
                        x.fusion_weights.0,
                        x.fusion_weights.1,
                        f(x.vector),
                        f(x.vector_calibrated),
                        f(x.keyword),
                        x.coverage
                            .map_or(String::new(), |c| format!(" (coverage {c:.2})")),
                        x.decay,
                        x.mmr_rank.map_or("-".to_string(), |r| (r + 1).to_string()),
                        if x.pinned { "  pinned" } else { "" }
                    )?;
                }
                writeln!(out)?;
            }
            if explain && let Some(fb) = &resp.fallback {
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

/// `claw memory get --json` of another workspace's file (shared index): the
/// usual object plus the owning workspace's id (`workspace_id`, as in `memory
/// status --json`) and `from_index: true` (served from the stored chunks).
#[derive(Serialize)]
struct SharedGetJson<'a> {
    #[serde(flatten)]
    resp: &'a GetResponse,
    workspace_id: &'a str,
    from_index: bool,
}

pub fn run_get(settings: &Settings, args: GetArgs) -> anyhow::Result<Exit> {
    // Another workspace's file is the shared index's: never the gateway's.
    let routed = if args.local || args.workspace_id.is_some() {
        None
    } else {
        let body = serde_json::json!({"path": args.path, "from": args.from, "lines": args.lines});
        via_gateway(settings, "/v1/memory/get", body).and_then(|r| {
            let resp: GetResponse = serde_json::from_slice(&r.body).ok()?;
            Some((resp, r.body))
        })
    };
    let (resp, bytes, owner) = match routed {
        Some((resp, bytes)) => (resp, Some(bytes), None),
        None => {
            let service = Memory::open(settings.mem.clone()).map_err(|e| report(e, ""))?;
            let req = GetRequest {
                path: args.path,
                from: args.from.max(1),
                lines: args.lines.max(1),
                max_chars: GET_MAX_CHARS,
                turns_around: 0,
            };
            let answer = service
                .get(&req, args.workspace_id.as_deref())
                .map_err(|e| report(e, ""))?;
            (answer.response, None, answer.workspace_id)
        }
    };
    if args.json {
        match (bytes, &owner) {
            (Some(b), _) => {
                let mut out = std::io::stdout().lock();
                out.write_all(&b)?;
                writeln!(out)?;
            }
            (None, None) => print_json(&resp)?,
            (None, Some(ws)) => print_json(&SharedGetJson {
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
        let mut out = std::io::stdout().lock();
        out.write_all(sanitize(&resp.text).as_bytes())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use claw_memory_api::IdentityMismatch;

    #[test]
    fn sync_json_is_the_library_shape_with_cli_reasons() {
        let f = |p: &str| FileRef::new("memory", p);
        let reports = [
            SyncReport::Fresh {
                checked_ms: 3,
                watcher: None,
            },
            SyncReport::Synced {
                reindexed: vec![f("a.md")],
                removed: vec![f("b.md")],
                elapsed_ms: 14,
            },
            SyncReport::Stale {
                pending: 30,
                reason: StaleReason::Backlog { limit: 20 },
                sample: vec![f("a.md")],
            },
            SyncReport::Skipped,
        ];
        // Without a command to add, the CLI's JSON is the library's, byte for byte.
        for r in &reports {
            assert_eq!(
                serde_json::to_string(&SyncJson::from(r)).unwrap(),
                serde_json::to_string(r).unwrap()
            );
        }
        let stale = SyncReport::Stale {
            pending: 1,
            reason: StaleReason::Identity(IdentityMismatch::Model {
                indexed: "some-other-model".into(),
                running: String::new(),
            }),
            sample: vec![f("e.md")],
        };
        assert_eq!(
            serde_json::to_string(&SyncJson::from(&stale)).unwrap(),
            r#"{"status":"stale","pending":1,"reason":"the index was built with some-other-model but this search runs with keyword-only; run `claw memory index`","sample":[{"source":"memory","path":"e.md"}]}"#
        );
        assert_eq!(
            stale_reason(&StaleReason::Identity(IdentityMismatch::Chunker)),
            "the chunker or the word index changed since the last index; run `claw memory index`"
        );
        let line = describe_sync(&reports[2]).unwrap();
        assert!(line.starts_with("index is stale: 30 file(s)"), "{line}");
        assert!(
            line.ends_with("run `claw memory index` or `claw memory watch`"),
            "{line}"
        );
        assert_eq!(describe_sync(&reports[0]), None);
    }
}
