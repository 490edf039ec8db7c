//! `claw memory watch [--json]`: run the watcher in the foreground until Ctrl-C
//! (or SIGTERM), printing one line per sync (text) or one JSON Line per event.

use super::output::{Exit, Output, sanitize, sanitize_path};
use crate::app::{load_embedder, open_memory, open_memory_with};
use crate::config::Settings;
use anyhow::Context;
use claw_memory_api::FileRef;
use claw_memory_api::IndexIssue;
use claw_memory_api::embed::Loaded;
use claw_memory_api::watch::{self, WatchEvent};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Print events as JSON Lines.
    #[arg(long)]
    pub json: bool,
}

pub async fn run_watch(settings: Settings, args: WatchArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    // Loading the model and opening the database are blocking work.
    let s = settings.clone();
    let (watcher, rx) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let index_model = open_memory(&s)?.index_model()?;
        let embedder = match load_embedder(&s, output) {
            Loaded::Ready(e) => Some(Arc::from(e)),
            Loaded::Disabled => None,
            // Falling back to keyword-only here would make the first sync rebuild an
            // embedded index without its vectors: refuse, and say what to fix.
            Loaded::Unavailable(e) if !index_model.is_empty() => anyhow::bail!(
                "the index was built with {index_model}, but the model does not load: {}",
                super::errors::embed_error_with_hint(&e)
            ),
            Loaded::Unavailable(_) => None,
        };
        // The watcher indexes with the model loaded here, on either backend.
        let memory = Arc::new(open_memory_with(&s, embedder)?);
        catch_up_vectors(&memory, output)?;
        let (tx, rx) = std::sync::mpsc::channel();
        let w =
            watch::spawn(memory, "claw memory watch", tx).context("cannot start the watcher")?;
        Ok((w, rx))
    })
    .await??;

    // Print events on a plain thread; it ends when the watcher drops its sender.
    let printer = std::thread::spawn(move || {
        let mut failed = false;
        for ev in rx {
            if matches!(ev, WatchEvent::Error { .. }) {
                failed = true;
            }
            if print_event(&ev, output).is_err() {
                break; // stdout closed
            }
        }
        failed
    });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install the SIGTERM handler")?;
    let mut poll = tokio::time::interval(std::time::Duration::from_millis(500));
    let died = loop {
        tokio::select! {
            r = tokio::signal::ctrl_c() => { r.context("cannot listen for Ctrl-C")?; break false; }
            _ = term.recv() => break false,
            _ = poll.tick() => {
                if watcher.is_finished() { break true; }
                // The printer ends only when stdout is closed (`| head -1`): stop quietly.
                if printer.is_finished() { break false; }
            },
        }
    };
    let stopped = tokio::task::spawn_blocking(move || watcher.stop()).await?;
    let _ = tokio::task::spawn_blocking(move || printer.join()).await?;
    stopped.context("the watcher failed")?;
    if died {
        anyhow::bail!("the watcher stopped unexpectedly");
    }
    Ok(Exit::Ok)
}

/// A keyword-only index whose model loads now (installed or configured after
/// indexing) gains its vectors before the watching starts, with the indexer's
/// progress on stderr (a bar on a terminal, a line every few seconds off it).
/// Blocking.
fn catch_up_vectors(memory: &claw_memory_api::Memory, output: Output) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    let progress = super::progress::IndexProgress::new(super::progress::Reporter::new(
        super::progress::ProgressMode::Auto,
        Output::Text,
        "embedding",
        "files",
    ));
    let report = memory.catch_up_vectors(
        "claw memory watch (embedding the notes)",
        std::time::Duration::from_secs(600),
        &|p| {
            if output == Output::Text {
                progress.on(p)
            }
        },
    );
    progress.finish();
    let Some(r) = report.context("cannot embed the notes that lack vectors")? else {
        return Ok(());
    };
    eprintln!(
        "embedded the notes: the index was built without the embedding model, which loads now: {} chunks ({} embedded, {} from the cache) in {:.1} s; search is hybrid",
        r.chunks_added,
        r.embeddings_computed,
        r.cache_hits,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_event(ev: &WatchEvent, output: Output) -> std::io::Result<()> {
    write_event(&mut std::io::stdout().lock(), ev, output)
}

/// [`print_event`] into `out` (errors of the text form go to stderr).
fn write_event(out: &mut impl Write, ev: &WatchEvent, output: Output) -> std::io::Result<()> {
    // Both outputs render one view of the event (problems and rebuild reasons
    // already worded), so the fields are unpacked in one place.
    let ev = event_json(ev);
    match output {
        Output::Json => {
            writeln!(out, "{}", json_line(&ev))?;
        }
        Output::Text => match ev {
            EventJson::Started { pid, roots } => {
                writeln!(
                    out,
                    "watching {} folder(s) (pid {pid}); Ctrl-C to stop",
                    roots.len()
                )?;
                for r in roots {
                    writeln!(out, "  {}", sanitize_path(r))?;
                }
            }
            EventJson::Synced(b) => {
                let quiet = b.reindexed.is_empty() && b.removed.is_empty() && b.errors.is_empty();
                if quiet && !b.rescan {
                    return Ok(());
                }
                let what = if b.rescan { "rescan" } else { "sync" };
                write!(
                    out,
                    "{what}: {} re-indexed, {} removed, {} unchanged in {} ms",
                    b.reindexed.len(),
                    b.removed.len(),
                    b.unchanged,
                    b.elapsed_ms
                )?;
                if b.pending > 0 {
                    write!(out, ", {} pending", b.pending)?;
                }
                writeln!(out, "{}", sanitize(&sample(b.reindexed, b.removed)))?;
                if let Some(r) = &b.rebuilt {
                    writeln!(out, "  index rebuilt: {}", sanitize(r))?;
                }
                for e in &b.errors {
                    writeln!(out, "  skipped {}", sanitize(e))?;
                }
            }
            EventJson::Rearmed { root, exists } => {
                let state = if exists { "watching again" } else { "gone" };
                writeln!(out, "{}: {state}", sanitize_path(root))?;
            }
            EventJson::Overflow => {
                writeln!(out, "event queue overflowed: full rescan scheduled")?;
            }
            EventJson::DatabaseReplaced { path } => {
                writeln!(
                    out,
                    "the database {} was deleted or replaced: reopening it and rebuilding the index from the disk (registered sources are kept)",
                    sanitize_path(path)
                )?;
            }
            EventJson::Error { message } => eprintln!("error: {}", sanitize(message)),
            EventJson::Stopped => writeln!(out, "stopped")?,
        },
    }
    out.flush()
}

/// One `--json` line (without the newline) for a watcher event: the contract
/// `{"event": "started" | "synced" | "rearmed" | "overflow" | "database_replaced" | "error" | "stopped", ...}`,
/// fields in this order. Add fields freely; never rename or drop one.
#[derive(serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
enum EventJson<'a> {
    Started { pid: u32, roots: &'a [PathBuf] },
    Synced(SyncedJson<'a>),
    Rearmed { root: &'a Path, exists: bool },
    Overflow,
    DatabaseReplaced { path: &'a Path },
    Error { message: &'a str },
    Stopped,
}

/// The fields of a `synced` event (its problems and rebuild reason worded).
#[derive(serde::Serialize)]
struct SyncedJson<'a> {
    batch: u64,
    reindexed: &'a [FileRef],
    removed: &'a [FileRef],
    unchanged: usize,
    errors: Vec<String>,
    rebuilt: Option<String>,
    rescan: bool,
    elapsed_ms: u64,
    pending: usize,
}

/// The view of a watcher event both outputs print.
fn event_json(ev: &WatchEvent) -> EventJson<'_> {
    match ev {
        WatchEvent::Started { pid, roots } => EventJson::Started { pid: *pid, roots },
        WatchEvent::Synced {
            batch,
            reindexed,
            removed,
            unchanged,
            errors,
            rebuilt,
            rescan,
            elapsed_ms,
            pending,
        } => EventJson::Synced(SyncedJson {
            batch: *batch,
            reindexed,
            removed,
            unchanged: *unchanged,
            errors: errors.iter().map(error_line).collect(),
            rebuilt: rebuilt.as_ref().map(|r| r.to_string()),
            rescan: *rescan,
            elapsed_ms: *elapsed_ms,
            pending: *pending,
        }),
        WatchEvent::Rearmed { root, exists } => EventJson::Rearmed {
            root,
            exists: *exists,
        },
        WatchEvent::Overflow => EventJson::Overflow,
        WatchEvent::DatabaseReplaced { path } => EventJson::DatabaseReplaced { path },
        WatchEvent::Error { message } => EventJson::Error { message },
        WatchEvent::Stopped => EventJson::Stopped,
    }
}

fn json_line(j: &EventJson) -> String {
    // Serialising borrowed strings, numbers and paths into a String cannot fail
    // except for a non-UTF-8 path, which serde_json refuses: say so in the line.
    serde_json::to_string(j).unwrap_or_else(|e| {
        serde_json::json!({"event": "error", "message": format!("cannot print event: {e}")})
            .to_string()
    })
}

/// `source/path: message (hint)`: one per-file problem of a batch, as the
/// `errors` strings of the JSON Lines have always read.
fn error_line(i: &IndexIssue) -> String {
    format!(
        "{}/{}: {}",
        i.source,
        i.path,
        super::errors::issue_message(i)
    )
}

/// ` (a.md, b.md, …)` for short lists.
fn sample(reindexed: &[FileRef], removed: &[FileRef]) -> String {
    let names: Vec<&str> = reindexed
        .iter()
        .chain(removed)
        .map(|f| f.path.as_str())
        .collect();
    match names.len() {
        0 => String::new(),
        1..=3 => format!(" ({})", names.join(", ")),
        n => format!(" ({}, … {} more)", names[..3].join(", "), n - 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use claw_memory_api::RebuildReason;

    /// A rescan that re-indexed, removed, skipped and rebuilt.
    fn synced() -> WatchEvent {
        let f = |p: &str| FileRef::new("memory", p);
        WatchEvent::Synced {
            batch: 2,
            reindexed: vec![f("a.md")],
            removed: vec![f("b.md")],
            unchanged: 1,
            errors: vec![IndexIssue {
                source: "memory".into(),
                path: "c.md".into(),
                message: "skipped: 12 MB is over the 10 MB limit".into(),
                skipped: true,
                reason: claw_memory_api::IssueReason::TooBig,
            }],
            rebuilt: Some(RebuildReason::ModelChanged {
                from: String::new(),
                to: "m".into(),
            }),
            rescan: true,
            elapsed_ms: 12,
            pending: 3,
        }
    }

    fn text(ev: &WatchEvent) -> String {
        let mut out = Vec::new();
        write_event(&mut out, ev, Output::Text).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn text_lines_say_what_a_sync_did() {
        assert_eq!(
            text(&synced()),
            "rescan: 1 re-indexed, 1 removed, 1 unchanged in 12 ms, 3 pending (a.md, b.md)\n  \
             index rebuilt: embedding model changed (keyword-only -> m)\n  \
             skipped memory/c.md: skipped: 12 MB is over the 10 MB limit (raise memory.max_file_bytes in the config to index it)\n"
        );
        // A batch that found nothing to do prints nothing.
        let quiet = WatchEvent::Synced {
            batch: 3,
            reindexed: vec![],
            removed: vec![],
            unchanged: 4,
            errors: vec![],
            rebuilt: None,
            rescan: false,
            elapsed_ms: 1,
            pending: 0,
        };
        assert_eq!(text(&quiet), "");
        let gone = WatchEvent::Rearmed {
            root: PathBuf::from("/notes"),
            exists: false,
        };
        assert_eq!(text(&gone), "/notes: gone\n");
    }

    #[test]
    fn json_lines_keep_their_shape() {
        let cases = [
            (
                WatchEvent::Started {
                    pid: 7,
                    roots: vec![PathBuf::from("/ws"), PathBuf::from("/ws/memory")],
                },
                r#"{"event":"started","pid":7,"roots":["/ws","/ws/memory"]}"#,
            ),
            (
                synced(),
                r#"{"event":"synced","batch":2,"reindexed":[{"source":"memory","path":"a.md"}],"removed":[{"source":"memory","path":"b.md"}],"unchanged":1,"errors":["memory/c.md: skipped: 12 MB is over the 10 MB limit (raise memory.max_file_bytes in the config to index it)"],"rebuilt":"embedding model changed (keyword-only -> m)","rescan":true,"elapsed_ms":12,"pending":3}"#,
            ),
            (
                WatchEvent::Synced {
                    batch: 1,
                    reindexed: vec![],
                    removed: vec![],
                    unchanged: 0,
                    errors: vec![],
                    rebuilt: None,
                    rescan: false,
                    elapsed_ms: 0,
                    pending: 0,
                },
                r#"{"event":"synced","batch":1,"reindexed":[],"removed":[],"unchanged":0,"errors":[],"rebuilt":null,"rescan":false,"elapsed_ms":0,"pending":0}"#,
            ),
            (
                WatchEvent::Rearmed {
                    root: PathBuf::from("/notes"),
                    exists: false,
                },
                r#"{"event":"rearmed","root":"/notes","exists":false}"#,
            ),
            (WatchEvent::Overflow, r#"{"event":"overflow"}"#),
            (
                WatchEvent::DatabaseReplaced {
                    path: PathBuf::from("/ws/.claw/memory.sqlite"),
                },
                r#"{"event":"database_replaced","path":"/ws/.claw/memory.sqlite"}"#,
            ),
            (
                WatchEvent::Error {
                    message: "heartbeat: busy".into(),
                },
                r#"{"event":"error","message":"heartbeat: busy"}"#,
            ),
            (WatchEvent::Stopped, r#"{"event":"stopped"}"#),
        ];
        for (ev, want) in cases {
            assert_eq!(json_line(&event_json(&ev)), want);
        }
    }

    #[test]
    fn samples_are_short() {
        let f = |p: &str| FileRef::new("memory", p);
        assert_eq!(sample(&[], &[]), "");
        assert_eq!(sample(&[f("a.md")], &[f("b.md")]), " (a.md, b.md)");
        let many: Vec<_> = ["a", "b", "c", "d", "e"].iter().map(|p| f(p)).collect();
        assert_eq!(sample(&many, &[]), " (a, b, c, … 2 more)");
    }
}
