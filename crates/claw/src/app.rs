//! The composition root: what the commands are built from, assembled from the
//! settings in one place — the memory (whichever backend), the assistant's
//! tools, hooks and driver options, the scheduler's clock and zone, the MCP
//! clients, the running gateway. Command modules (`cli::*`) take what they
//! need from here and never import each other (checked by
//! `tests/architecture.rs`); the terminal UI stays in the commands.

use crate::cli::output::{Output, sanitize};
use crate::config::Settings;
use anyhow::Context;
use claw_agent::driver::DriverOptions;
use claw_agent::memory_backend::EngineBackend;
use claw_agent::settings::AgentSettings;
use claw_agent::tools::{CronToolContext, ToolContext, ToolRegistry};
use claw_gateway::client::Client;
use claw_mcp::{McpClients, ServerState};
use claw_memory_api::Memory;
use claw_memory_api::embed::{self, Embedder, Loaded};
use claw_schedule::{Clock, Zone};
use std::sync::Arc;

// ---- memory ------------------------------------------------------------------

/// Open the workspace's memory on its configured backend (`memory.backend`);
/// the model loads on first need.
pub fn open_memory(settings: &Settings) -> anyhow::Result<Memory> {
    Memory::open(settings.mem.clone()).with_context(|| open_context(settings))
}

/// [`open_memory`] with the model this process already loaded (`None`:
/// keyword-only), so a watcher and the searches share one copy.
pub fn open_memory_with(
    settings: &Settings,
    embedder: Option<Arc<dyn Embedder>>,
) -> anyhow::Result<Memory> {
    Memory::open_shared(settings.mem.clone(), embedder).with_context(|| open_context(settings))
}

fn open_context(settings: &Settings) -> String {
    match &settings.mem.backend {
        crate::config::Backend::Sqlite => format!(
            "cannot open the memory database {}",
            settings.db_path().display()
        ),
        crate::config::Backend::Postgres(_) => {
            "cannot open the PostgreSQL memory index (memory.backend)".to_string()
        }
    }
}

/// Load the configured embedder, describing a fallback on stderr (text mode).
pub fn load_embedder(settings: &Settings, output: Output) -> Loaded {
    let loaded = embed::load(&settings.mem.embed, settings.mem.memory.embed_batch_size);
    if let Loaded::Unavailable(e) = &loaded
        && output == Output::Text
    {
        eprintln!(
            "note: keyword-only (no embeddings): {}",
            sanitize(&e.to_string())
        );
        if let Some(h) = crate::cli::errors::embed_hint(e) {
            eprintln!("hint: {h}");
        }
    }
    loaded
}

// ---- the assistant -------------------------------------------------------------

pub fn build_tools(
    settings: &Settings,
    a: &AgentSettings,
    yes: bool,
    session: &str,
) -> (ToolRegistry, Arc<EngineBackend>) {
    let mut ctx = ToolContext::from_settings(settings.mem.workspace.clone(), a, yes);
    let progress: claw_agent::memory_backend::ProgressSink =
        Arc::new(|line: &str| eprintln!("{}", sanitize(line)));
    // One memory service whichever `memory.backend` is (claw-memory-api).
    let memory = Arc::new(EngineBackend::new(settings.mem.clone()).with_progress(progress));
    ctx.memory = Some(memory.clone());
    ctx.cron = Some(cron_tool_context(settings, session));
    ctx.session = Some(session.to_string());
    (ToolRegistry::new(ctx), memory)
}

/// The `hooks` section compiled for a session (variables from the process
/// environment, resolved now); `None` without hooks.
pub fn build_hooks(settings: &Settings) -> anyhow::Result<Option<Arc<claw_agent::hooks::Hooks>>> {
    if settings.hooks.is_empty() {
        return Ok(None);
    }
    let env = settings.env.vars();
    let hooks = claw_agent::hooks::Hooks::new(&settings.hooks, settings.mem.workspace.clone(), env)
        .context("invalid `hooks` configuration")?;
    Ok(Some(Arc::new(hooks)))
}

pub fn driver_options(settings: &Settings, a: &AgentSettings, key: &str) -> DriverOptions {
    let offset = a.utc_offset(&settings.mem.clock);
    DriverOptions {
        workspace: settings.mem.workspace.clone(),
        sessions_dir: settings.sessions_dir(),
        session_key: key.to_string(),
        secrets: a.secrets(),
        max_iterations: a.max_iterations,
        max_tokens: a.max_tokens,
        context_window: a.context_window,
        utc_offset: offset,
        timezone: format!("UTC{offset}"),
        os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        clock: settings.mem.clock,
        memory_max_bytes: a.memory_max_bytes,
        state_dir: settings.state_dir(),
    }
}

// ---- the scheduled consolidation --------------------------------------------------

/// The assistant's settings, or why there are none (no LLM configured).
pub fn agent_settings(
    settings: &Settings,
) -> Result<AgentSettings, claw_agent::settings::AgentSettingsError> {
    let env = |name: &str| settings.env.get(name);
    claw_agent::settings::resolve(
        &settings.assistant,
        &claw_agent::settings::Overrides::default(),
        &env,
    )
}

/// `memory.consolidation` resolved: on when an LLM is configured (and not
/// turned off), in the user's zone.
pub fn consolidation_settings(
    settings: &Settings,
    agent: Result<&AgentSettings, &str>,
) -> claw_agent::promote::ConsolidationSettings {
    settings
        .consolidation
        .resolve(agent.map(|_| ()), user_zone(settings))
}

/// One consolidation run over `memory` with the configured LLM.
pub fn consolidation_job(
    settings: &Settings,
    agent: &AgentSettings,
    memory: Arc<Memory>,
) -> anyhow::Result<claw_agent::promote::Job<claw_agent::provider::ProviderChain>> {
    let chain = claw_agent::provider::ProviderChain::new(
        agent.profiles.clone(),
        claw_agent::provider::RetryPolicy::default(),
    )
    .context("cannot set up the LLM client")?;
    Ok(claw_agent::promote::Job {
        model: Arc::new(chain),
        memory,
        settings: consolidation_settings(settings, Ok(agent)),
        workspace: settings.mem.workspace.clone(),
        sessions_dir: settings.sessions_dir(),
        state_dir: settings.state_dir(),
        clock: settings.mem.clock,
        memory_max_bytes: agent.memory_max_bytes,
        reply_tokens: agent.max_tokens,
        context_window: agent.context_window,
    })
}

// ---- the scheduler -------------------------------------------------------------

/// The scheduler's clock: claw's clock (`CLAW_NOW` shifts it).
pub fn clock(settings: &Settings) -> Clock {
    settings.mem.clock
}

/// The user's zone: `agent.timezone`, else `$TZ`, else the system zone, else UTC.
pub fn user_zone(settings: &Settings) -> Zone {
    if let Ok(Some(z)) = agent_zone(settings) {
        return z;
    }
    if let Some(z) = settings.tz.as_deref().and_then(|tz| Zone::parse(tz).ok()) {
        return z;
    }
    iana_time_zone::get_timezone()
        .ok()
        .and_then(|tz| Zone::parse(&tz).ok())
        .unwrap_or(Zone::Utc)
}

/// `agent.timezone`, parsed by claw's one zone parser ([`Zone::parse`]: IANA
/// names, UTC, offsets); `None` when it is not set.
pub fn agent_zone(settings: &Settings) -> anyhow::Result<Option<Zone>> {
    settings
        .assistant
        .agent
        .timezone
        .as_deref()
        .map(|tz| Zone::parse(tz).map_err(|e| anyhow::anyhow!("invalid agent.timezone: {e}")))
        .transpose()
}

/// The offset of the assistant's day now: `agent.timezone`'s, else the
/// machine's local zone's; an error when `agent.timezone` is not a zone.
pub fn agent_offset(settings: &Settings) -> anyhow::Result<chrono::FixedOffset> {
    let clock = settings.mem.clock;
    Ok(match agent_zone(settings)? {
        Some(zone) => zone.offset_at(clock.now()),
        None => clock.local_offset(),
    })
}

/// What the `cron` tool needs in a session with key `session`.
pub fn cron_tool_context(settings: &Settings, session: &str) -> CronToolContext {
    CronToolContext {
        jobs_path: claw_schedule::jobs_path(&settings.state_dir()),
        session: Some(session.to_string()),
        zone: user_zone(settings),
        clock: clock(settings),
    }
}

// ---- MCP and the gateway ---------------------------------------------------------

/// The configured MCP servers for a chat session, started in parallel; a server
/// that did not start is reported on stderr and its tools are not offered.
pub async fn start_clients(settings: &Settings) -> Arc<McpClients> {
    let clients = McpClients::start(&settings.mcp).await;
    for s in clients.summaries() {
        if let ServerState::Failed { error } = &s.state {
            eprintln!(
                "warning: MCP server `{}` is not available: {}",
                sanitize(&s.name),
                sanitize(error)
            );
        }
    }
    Arc::new(clients)
}

/// The running gateway of this workspace, if any (a stale `gateway.json` is ignored).
pub fn running_gateway(settings: &Settings) -> Option<Client> {
    Client::discover(
        &settings.state_dir(),
        &settings.mem.workspace,
        settings.gateway_token.as_deref(),
    )
}
