//! `claw memory watch [--json]`: run the watcher in the foreground until Ctrl-C
//! (or SIGTERM), printing one line per sync (text) or one JSON Line per event.

use super::index::{load_embedder, open_store};
use super::output::{Exit, Output, sanitize, sanitize_path};
use crate::config::Settings;
use anyhow::Context;
use claw_memory::embed::Loaded;
use claw_memory::freshness::FileRef;
use claw_memory::watch::{self, IndexerSink, WatchEvent, WatchOptions};
use std::io::Write;

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
        let store = open_store(&s)?;
        let index_model = store.meta("model")?.unwrap_or_default();
        drop(store);
        let embedder = match load_embedder(&s, output) {
            Loaded::Ready(e) => Some(e),
            Loaded::Disabled => None,
            // Falling back to keyword-only here would make the first sync rebuild an
            // embedded index without its vectors: refuse, and say what to fix.
            Loaded::Unavailable(e) if !index_model.is_empty() => anyhow::bail!(
                "the index was built with {index_model}, but the model does not load: {e}"
            ),
            Loaded::Unavailable(_) => None,
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = IndexerSink::new(s.mem.clone(), embedder);
        let w = watch::spawn(s.mem, WatchOptions::default(), Box::new(sink), tx)
            .context("cannot start the watcher")?;
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

fn print_event(ev: &WatchEvent, output: Output) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match output {
        Output::Json => {
            serde_json::to_writer(&mut out, ev)?;
            writeln!(out)?;
        }
        Output::Text => match ev {
            WatchEvent::Started { pid, roots } => {
                writeln!(
                    out,
                    "watching {} folder(s) (pid {pid}); Ctrl-C to stop",
                    roots.len()
                )?;
                for r in roots {
                    writeln!(out, "  {}", sanitize_path(r))?;
                }
            }
            WatchEvent::Synced {
                reindexed,
                removed,
                unchanged,
                errors,
                rebuilt,
                rescan,
                elapsed_ms,
                pending,
                ..
            } => {
                if reindexed.is_empty() && removed.is_empty() && errors.is_empty() && !rescan {
                    return Ok(());
                }
                let what = if *rescan { "rescan" } else { "sync" };
                write!(
                    out,
                    "{what}: {} re-indexed, {} removed, {unchanged} unchanged in {elapsed_ms} ms",
                    reindexed.len(),
                    removed.len()
                )?;
                if *pending > 0 {
                    write!(out, ", {pending} pending")?;
                }
                writeln!(out, "{}", sanitize(&sample(reindexed, removed)))?;
                if let Some(r) = rebuilt {
                    writeln!(out, "  index rebuilt: {}", sanitize(r))?;
                }
                for e in errors {
                    writeln!(out, "  skipped {}", sanitize(&e.to_string()))?;
                }
            }
            WatchEvent::Rearmed { root, exists } => {
                let state = if *exists { "watching again" } else { "gone" };
                writeln!(out, "{}: {state}", sanitize_path(root))?;
            }
            WatchEvent::Overflow => {
                writeln!(out, "event queue overflowed: full rescan scheduled")?;
            }
            WatchEvent::Error { message } => eprintln!("error: {}", sanitize(message)),
            WatchEvent::Stopped => writeln!(out, "stopped")?,
        },
    }
    out.flush()
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
