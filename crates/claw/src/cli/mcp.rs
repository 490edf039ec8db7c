//! `claw mcp` (serve claw's memory over MCP on stdin/stdout) and `claw mcp list`
//! (connect to the configured `mcp.servers` and show their state and tools);
//! also the chat's start-up of those servers as dynamic tools.

use super::output::{Exit, print_json, sanitize};
use crate::config::Settings;
use anyhow::Context;
use claw_mcp::{McpClients, MemoryServer, ServerOptions, ServerState};
use std::io::Write;

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: Option<McpCommand>,
}

#[derive(Debug, clap::Subcommand)]
pub enum McpCommand {
    /// Serve claw's memory as an MCP server on stdin/stdout (the default).
    Serve,
    /// Connect to the configured MCP servers (`mcp.servers`) and show their state and tools.
    List(ListArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

impl McpArgs {
    pub fn wants_json(&self) -> bool {
        matches!(&self.command, Some(McpCommand::List(a)) if a.json)
    }
}

/// The server's options from the settings: `mcp.read_only`, the agent's jail
/// and time zone (the day's note is the user's day).
pub fn server_options(settings: &Settings) -> anyhow::Result<ServerOptions> {
    let agent = &settings.assistant.agent;
    let utc_offset = crate::app::agent_offset(settings)?;
    let llm = crate::app::agent_settings(settings).map_err(|e| e.to_string());
    let consolidation =
        crate::app::consolidation_settings(settings, llm.as_ref().map_err(String::as_str));
    Ok(ServerOptions {
        mem: settings.mem.clone(),
        read_only: settings.mcp.read_only,
        jail: agent.jail_to_workspace.unwrap_or(true),
        utc_offset,
        consolidation: Some(consolidation),
    })
}

pub async fn run(settings: Settings, args: McpArgs) -> anyhow::Result<Exit> {
    match args.command {
        None | Some(McpCommand::Serve) => {
            let server = MemoryServer::new(server_options(&settings)?);
            claw_mcp::serve_stdio(server)
                .await
                .context("the MCP stdio session failed")?;
            Ok(Exit::Ok)
        }
        Some(McpCommand::List(a)) => list(&settings, a).await,
    }
}

async fn list(settings: &Settings, args: ListArgs) -> anyhow::Result<Exit> {
    let clients = McpClients::start(&settings.mcp).await;
    let servers = clients.summaries();
    if args.json {
        print_json(&serde_json::json!({ "servers": servers }))?;
    } else {
        let mut out = std::io::stdout().lock();
        if servers.is_empty() {
            writeln!(
                out,
                "No MCP servers configured (add \"mcp\": {{\"servers\": {{…}}}} to the config file)."
            )?;
        }
        for s in &servers {
            let state = match &s.state {
                ServerState::Ready => format!("ready, {} tools", s.tools.len()),
                ServerState::Failed { error } => format!("failed: {error}"),
                ServerState::Down { error } => format!("down: {error}"),
            };
            writeln!(
                out,
                "{}  ({})  {}",
                sanitize(&s.name),
                sanitize(&s.transport),
                sanitize(&state)
            )?;
            for t in &s.tools {
                let first = t.description.lines().next().unwrap_or("");
                writeln!(
                    out,
                    "  {}{}  {}",
                    sanitize(&t.name),
                    if t.read_only { "" } else { " [side effects]" },
                    sanitize(first)
                )?;
            }
        }
    }
    let failed = servers
        .iter()
        .any(|s| !matches!(s.state, ServerState::Ready));
    Ok(if failed { Exit::Error } else { Exit::Ok })
}
