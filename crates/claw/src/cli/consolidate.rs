//! `claw memory consolidate [--json]`: run the scheduled consolidation now
//! (`claw_agent::promote`): the durable facts of the daily notes and the
//! user's turns since the last run go into MEMORY.md under a dated heading,
//! with where each came from; a short report goes to the state directory.
//! Exit 0 when it ran (also when there was nothing new), 2 on an error — no
//! LLM configured included, with a hint.

use super::output::{Exit, print_json, sanitize};
use crate::config::Settings;
use claw_agent::promote::ConsolidationError;
use claw_memory_api::consolidation::{ItemKind, RunSummary};
use std::io::Write;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
pub struct ConsolidateArgs {
    /// Print the run's summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Run one consolidation now.
pub async fn run(settings: Settings, args: ConsolidateArgs) -> anyhow::Result<Exit> {
    let agent = crate::app::agent_settings(&settings)
        .map_err(|e| ConsolidationError::NoLlm(e.to_string()))?;
    let memory = {
        let settings = settings.clone();
        tokio::task::spawn_blocking(move || {
            let mut m = crate::app::open_memory(&settings)?;
            m.set_lock_holder("claw memory consolidate");
            anyhow::Ok(m)
        })
        .await??
    };
    let job = crate::app::consolidation_job(&settings, &agent, Arc::new(memory))?;
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    let summary = job.run(&cancel).await?;
    if args.json {
        print_json(&summary)?;
    } else {
        print_text(&summary)?;
    }
    Ok(Exit::Ok)
}

fn print_text(s: &RunSummary) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "consolidation: {}", sanitize(&s.message))?;
    if let Some(w) = &s.window {
        writeln!(
            out,
            "read:     {} daily note(s) and {} user turn(s) of {} to {}; {} new candidate(s), {} sent, ~{} of {} tokens",
            s.notes, s.turns, w.from, w.to, s.candidates, s.sent, s.tokens, s.max_tokens
        )?;
    }
    for i in &s.items {
        let label = match i.kind {
            ItemKind::Promoted => "promoted:",
            ItemKind::Updated => "updated: ",
            ItemKind::Skipped => "skipped: ",
        };
        let mut line = format!("{label} {}", i.text);
        if let Some(w) = &i.was {
            line.push_str(&format!(" (was {w})"));
        }
        if let Some(r) = &i.reason {
            line.push_str(&format!(" ({r})"));
        }
        line.push_str(&format!(" — from {}", i.from));
        writeln!(out, "{}", sanitize(&line))?;
    }
    if let Some(r) = &s.report {
        writeln!(out, "report:   {}", sanitize(r))?;
    }
    Ok(())
}
