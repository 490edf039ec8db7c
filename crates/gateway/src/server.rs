//! The gateway process, assembled: the warm memory engine and the watcher (its own
//! thread), the bus, the dispatcher and session workers, the HTTP server (`listen`:
//! header timeout, per-client connection cap) and the discovery file — and the one
//! shutdown signal (a [`CancellationToken`]):
//! stop taking messages, let running turns finish within the grace period, then
//! cancel them (a cancelled turn still leaves a consistent transcript), stop the
//! watcher (which releases the writer lock), remove `gateway.json`, return.

use crate::bus::{Bus, Outbound};
use crate::config::GatewayConfig;
use crate::discovery::{self, GatewayInfo};
use crate::http::{self, AppState};
use crate::memory::{HubBackend, MemoryHub};
use crate::token::Token;
use crate::worker::{self, AgentRuntime, WorkerContext};
use chrono::FixedOffset;
use claw_agent::driver::DriverOptions;
use claw_agent::provider::{ProviderChain, RetryPolicy};
use claw_agent::settings::AgentSettings;
use claw_agent::tools::cron::CronToolContext;
use claw_agent::tools::{ToolContext, ToolRegistry};
use claw_memory_api::config::MemoryConfig;
use claw_memory_api::watch::{self, WatchEvent};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Everything `claw gateway` resolved before starting.
pub struct GatewayOptions {
    pub mem: MemoryConfig,
    /// The assistant's settings, or why there is no LLM (chat is then refused,
    /// memory still served).
    pub agent: Result<AgentSettings, String>,
    pub gateway: GatewayConfig,
    pub token: Token,
    /// Time zone of the prompt and daily notes.
    pub utc_offset: FixedOffset,
    /// Run the memory watcher (default true).
    pub watch: bool,
    /// Cron jobs and the heartbeat (None: neither runs).
    pub schedule: Option<ScheduleOptions>,
    /// Chat channels to start (Matrix, Telegram), tokens resolved.
    pub channels: claw_channels::ChannelsSettings,
    /// Limits of the sessions' sub-agents (`agents` config section).
    pub subagents: claw_agent::subagents::SubagentConfig,
    /// The user's hooks (`hooks` config section, compiled by the binary).
    pub hooks: Option<Arc<claw_agent::hooks::Hooks>>,
    /// `mcp.read_only`: `/mcp` offers no `memory_append`.
    pub mcp_read_only: bool,
    /// The scheduled consolidation into MEMORY.md (`memory.consolidation`,
    /// resolved with the LLM): run on its schedule beside cron and the
    /// heartbeat when enabled. None: not run, not described.
    pub consolidation: Option<claw_agent::promote::ConsolidationSettings>,
}

/// What the scheduler and the heartbeat need.
pub struct ScheduleOptions {
    /// `<workspace>/cron/jobs.json`.
    pub jobs_path: std::path::PathBuf,
    pub clock: claw_schedule::Clock,
    /// The user's zone (cron expressions without one, the heartbeat prompt).
    pub zone: claw_schedule::Zone,
    pub heartbeat: claw_schedule::HeartbeatSettings,
}

/// Errors that stop the gateway from starting.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("a gateway already runs for this workspace (pid {pid}, port {port})")]
    AlreadyRunning { pid: u32, port: u16 },
    #[error("cannot create the state directory {path}: {source}")]
    StateDir {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryHubError),
    #[error("cannot start the watcher: {0}")]
    Watch(#[from] claw_memory_api::MemoryError),
    #[error(transparent)]
    Discovery(#[from] discovery::DiscoveryError),
    #[error("cannot set up the LLM client: {0}")]
    Llm(String),
    #[error("the HTTP server failed: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Channel(#[from] claw_channels::ChannelError),
    #[error("a background task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// One line of the gateway's log (`info`, target `claw_gateway`), through
/// `tracing`: the binary's subscriber puts it on stderr, as text or JSON.
pub fn log(line: &str) {
    tracing::info!(target: "claw_gateway", "{line}");
}

/// A line of the gateway's log about something that went wrong (`warn`).
pub fn warn(line: &str) {
    tracing::warn!(target: "claw_gateway", "{line}");
}

/// Cancel `stop` on SIGTERM or SIGINT.
pub fn cancel_on_signals(stop: CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => log("SIGTERM: shutting down"),
            _ = int.recv() => log("SIGINT: shutting down"),
            _ = stop.cancelled() => return,
        }
        stop.cancel();
    });
    Ok(())
}

fn tool_registry(
    mem: &MemoryConfig,
    a: &AgentSettings,
    hub: Option<&Arc<MemoryHub>>,
    cron: Option<CronToolContext>,
    messenger: Option<Arc<dyn claw_agent::tools::message::Messenger>>,
    yes: bool,
    session: &str,
) -> ToolRegistry {
    let mut ctx = ToolContext::from_settings(mem.workspace.clone(), a, yes);
    ctx.session = (!session.is_empty()).then(|| session.to_string());
    ctx.memory = hub.map(|h| {
        Arc::new(HubBackend::new(h.clone())) as Arc<dyn claw_agent::tools::memory::MemoryBackend>
    });
    ctx.cron = cron;
    ctx.messenger = messenger;
    ToolRegistry::new(ctx)
}

fn runtime(
    opts: &GatewayOptions,
    a: &AgentSettings,
    hub: Option<&Arc<MemoryHub>>,
    channels: &ChannelsCell,
) -> Result<AgentRuntime, GatewayError> {
    let chain = ProviderChain::new(a.profiles.clone(), RetryPolicy::default())
        .map_err(|e| GatewayError::Llm(e.to_string()))?;
    let (mem, agent, hub) = (opts.mem.clone(), a.clone(), hub.cloned());
    let cron = opts
        .schedule
        .as_ref()
        .map(|s| (s.jobs_path.clone(), s.zone, s.clock));
    let messenger = (!opts.channels.is_empty()).then(|| {
        Arc::new(ChannelMessenger(channels.clone()))
            as Arc<dyn claw_agent::tools::message::Messenger>
    });
    let tools = move |session: &str, yes: bool| {
        let cron = cron
            .clone()
            .map(|(jobs_path, zone, clock)| CronToolContext {
                jobs_path,
                session: Some(session.to_string()),
                zone,
                clock,
            });
        tool_registry(
            &mem,
            &agent,
            hub.as_ref(),
            cron,
            messenger.clone(),
            yes,
            session,
        )
    };
    Ok(AgentRuntime {
        model: Arc::new(chain),
        tools: Box::new(tools),
        options: DriverOptions {
            workspace: opts.mem.workspace.clone(),
            sessions_dir: opts.mem.sessions_dir(),
            session_key: String::new(),
            secrets: a.secrets(),
            max_iterations: a.max_iterations,
            max_tokens: a.max_tokens,
            context_window: a.context_window,
            utc_offset: opts.utc_offset,
            timezone: format!("UTC{}", opts.utc_offset),
            os: format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
            clock: opts.mem.clock,
            memory_max_bytes: a.memory_max_bytes,
            state_dir: opts.mem.state_dir(),
        },
        subagents: opts.subagents.clone(),
        hooks: opts.hooks.clone(),
    })
}

/// The scheduled consolidation over the warm memory, with its own client of
/// the configured LLM.
fn consolidation_job(
    opts: &GatewayOptions,
    a: &AgentSettings,
    settings: &claw_agent::promote::ConsolidationSettings,
    hub: &Arc<MemoryHub>,
) -> Result<claw_agent::promote::Job<ProviderChain>, GatewayError> {
    let chain = ProviderChain::new(a.profiles.clone(), RetryPolicy::default())
        .map_err(|e| GatewayError::Llm(e.to_string()))?;
    Ok(claw_agent::promote::Job {
        model: Arc::new(chain),
        memory: hub.service(),
        settings: settings.clone(),
        workspace: opts.mem.workspace.clone(),
        sessions_dir: opts.mem.sessions_dir(),
        state_dir: opts.mem.state_dir(),
        clock: opts.mem.clock,
        memory_max_bytes: a.memory_max_bytes,
        reply_tokens: a.max_tokens,
        context_window: a.context_window,
    })
}

/// Log watcher events until the watcher drops its sender.
/// A keyword-only index whose model loads now gains its vectors on a
/// plain thread (a runtime shutdown does not wait for it; the rebuild is built
/// aside, so a stop mid-way loses nothing), with a progress line every 5 s.
fn catch_up_vectors(hub: Arc<MemoryHub>) {
    log(
        "embedding the notes: the index was built without the embedding model, which loads now (searches stay keyword-only until this finishes)",
    );
    std::thread::spawn(move || {
        let started = Instant::now();
        let state = std::sync::Mutex::new((0usize, 0usize, 0usize, Instant::now()));
        let progress = |p: claw_memory_api::Progress| {
            let Ok(mut st) = state.lock() else { return };
            match p {
                claw_memory_api::Progress::Planned { to_read, .. } => st.1 = to_read,
                claw_memory_api::Progress::File { chunks, .. } => {
                    st.0 += 1;
                    st.2 += chunks;
                }
            }
            if st.3.elapsed() >= Duration::from_secs(5) {
                st.3 = Instant::now();
                log(&format!(
                    "embedding the notes: {}/{} files, {} chunks",
                    st.0, st.1, st.2
                ));
            }
        };
        match hub.catch_up_vectors(Duration::from_secs(600), &progress) {
            Ok(None) => log("embedding the notes: nothing to embed (another process caught up)"),
            Ok(Some(r)) => log(&format!(
                "embedding the notes: done, {} chunks ({} embedded, {} from the cache) in {:.1} s; search is hybrid",
                r.chunks_added,
                r.embeddings_computed,
                r.cache_hits,
                started.elapsed().as_secs_f64()
            )),
            Err(e) => warn(&format!(
                "embedding the notes failed ({}); search stays keyword-only until `claw memory index`",
                claw_memory_api::error_chain(&e)
            )),
        }
    });
}

fn log_watch_events(rx: std::sync::mpsc::Receiver<WatchEvent>) {
    std::thread::spawn(move || {
        for ev in rx {
            match ev {
                WatchEvent::Started { roots, .. } => {
                    log(&format!("watching {} folder(s)", roots.len()))
                }
                WatchEvent::Synced {
                    reindexed,
                    removed,
                    elapsed_ms,
                    ..
                } if !reindexed.is_empty() || !removed.is_empty() => log(&format!(
                    "index: {} re-indexed, {} removed in {elapsed_ms} ms",
                    reindexed.len(),
                    removed.len()
                )),
                WatchEvent::Error { message } => warn(&format!("watcher error: {message}")),
                WatchEvent::Overflow => log("watcher: event overflow, rescanning"),
                _ => {}
            }
        }
    });
}

/// Run the gateway until `stop` is cancelled (wire it to signals with
/// [`cancel_on_signals`]). `ready` receives the discovery info once it listens.
pub async fn run(
    opts: GatewayOptions,
    stop: CancellationToken,
    ready: impl FnOnce(&GatewayInfo) + Send,
) -> Result<(), GatewayError> {
    let state_dir = opts.mem.state_dir();
    claw_memory_api::private::create_dir_all(&state_dir).map_err(|source| {
        GatewayError::StateDir {
            path: state_dir.clone(),
            source,
        }
    })?;
    claw_memory_api::private::create_dir_all(&opts.mem.sessions_dir()).map_err(|source| {
        GatewayError::StateDir {
            path: opts.mem.sessions_dir(),
            source,
        }
    })?;
    if let Some(other) = discovery::read_live(&state_dir)
        && other.pid != std::process::id()
    {
        return Err(GatewayError::AlreadyRunning {
            pid: other.pid,
            port: other.port,
        });
    }
    let addr = SocketAddr::new(opts.gateway.bind, opts.gateway.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| GatewayError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| GatewayError::Bind { addr, source })?;

    // The warm engine: database + model, loaded once (blocking work).
    let started_load = Instant::now();
    let mem = opts.mem.clone();
    let hub = tokio::task::spawn_blocking(move || MemoryHub::open(mem)).await??;
    let hub = Arc::new(hub.with_consolidation(opts.consolidation.clone()));
    if let Some(e) = hub.embedder_error() {
        warn(&format!(
            "keyword-only: the embedding model did not load ({e})"
        ));
    }
    log(&format!(
        "memory engine ready in {} ms",
        started_load.elapsed().as_millis()
    ));
    let watcher = if opts.watch {
        if hub.embedder_error().is_some() && !hub.index_model().is_empty() {
            log(&format!(
                "not watching: the index was built with {}, but the model does not load",
                hub.index_model()
            ));
            None
        } else {
            let (tx, rx) = std::sync::mpsc::channel();
            // The watcher indexes with the hub's model (shared at open).
            let memory = hub.service();
            let w =
                tokio::task::spawn_blocking(move || watch::spawn(memory, watch::WATCH_HOLDER, tx))
                    .await??;
            log_watch_events(rx);
            Some(w)
        }
    } else {
        None
    };

    if hub.needs_vectors() {
        catch_up_vectors(hub.clone());
    }

    let (bus, receivers) = Bus::new(opts.gateway.queue_capacity);
    let hard = CancellationToken::new();
    let approvals = crate::approvals::Approvals::new(opts.gateway.approval_timeout);
    let channels_cell: ChannelsCell = Arc::new(std::sync::OnceLock::new());
    let (chat_enabled, dispatcher) = match &opts.agent {
        Ok(a) => {
            let rt = Arc::new(runtime(&opts, a, Some(&hub), &channels_cell)?);
            let ctx = WorkerContext {
                runtime: rt,
                stats: bus.stats.clone(),
                outbound: bus.outbound(),
                permits: Arc::new(Semaphore::new(opts.gateway.max_concurrent_sessions)),
                stop: stop.clone(),
                hard: hard.clone(),
                approvals: approvals.clone(),
            };
            let label = a
                .profiles
                .first()
                .map(|p| p.model.clone())
                .unwrap_or_default();
            (
                Some(label),
                Some(tokio::spawn(worker::dispatch(receivers.inbound, ctx))),
            )
        }
        Err(why) => {
            warn(&format!("chat disabled: {why}"));
            (None, None)
        }
    };
    // Chat channels: each allowed message becomes a turn on the bus.
    if !opts.channels.is_empty() {
        if dispatcher.is_some() {
            let runner = Arc::new(BusRunner(bus.clone(), approvals.clone()));
            let channels = claw_channels::Channels::start(
                &opts.channels,
                &state_dir,
                runner,
                Arc::new(|line: String| log(&line)),
                stop.clone(),
            )?;
            let _ = channels_cell.set(Arc::new(channels));
        } else {
            warn("channels not started: chat is disabled");
        }
    } else {
        log(
            "no chat channels configured (channels.matrix, channels.telegram): HTTP and WebChat only",
        );
    }
    // Deliveries: HTTP callers read their own stream; answers of cron jobs, the
    // heartbeat and sub-agent announcements arrive here as `delivery` messages
    // for their target session (sent to the chat when the session is a channel's
    // `<channel>:<chat>`; logged and listed in the status). Each session has its
    // own sender task (`delivery`), so a slow chat delays only itself.
    let sched = Arc::new(std::sync::Mutex::new(ScheduleState::default()));
    let mut outbound = receivers.outbound;
    let sched_d = sched.clone();
    let channels_d = channels_cell.clone();
    let send: crate::delivery::Send = Arc::new(move |session: String, content: String| {
        let channels = channels_d.get().cloned();
        Box::pin(async move {
            match channels {
                Some(ch) => match ch.deliver(&session, &content).await {
                    Ok(Some(n)) => log(&format!(
                        "delivered an answer to session {session} (sent to the chat, {n} message(s))"
                    )),
                    Ok(None) => log(&format!("delivered an answer to session {session}")),
                    Err(e) => warn(&format!("cannot deliver to {session}: {e}")),
                },
                None => log(&format!("delivered an answer to session {session}")),
            }
        })
    });
    let (route_tx, route_rx) = tokio::sync::mpsc::channel(opts.gateway.queue_capacity.max(1));
    let router = crate::delivery::Router::new(
        send,
        crate::delivery::DeliveryOptions::default(),
        Arc::new(|line: &str| log(line)),
    );
    let routing = tokio::spawn(router.run(route_rx));
    let delivery = tokio::spawn(async move {
        while let Some(Outbound {
            channel,
            session,
            content,
            ..
        }) = outbound.recv().await
        {
            if channel != DELIVERY_CHANNEL {
                continue;
            }
            if let Ok(mut st) = sched_d.lock() {
                st.deliveries
                    .push(json!({"session": session, "content": content}));
                let n = st.deliveries.len();
                if n > 20 {
                    st.deliveries.drain(..n - 20);
                }
            }
            if route_tx.send((session, content)).await.is_err() {
                break;
            }
        }
        drop(route_tx);
        let _ = routing.await;
    });

    let started = opts.mem.clock.now();
    let info = GatewayInfo {
        pid: std::process::id(),
        port: local.port(),
        bind: local.ip(),
        started,
        workspace: opts.mem.workspace.clone(),
    };
    let status_info = info.clone();
    let chat_on = chat_enabled.is_some();
    let jobs_path = opts.schedule.as_ref().map(|s| s.jobs_path.clone());
    // Without an LLM neither cron nor the heartbeat runs.
    let heartbeat_cfg = opts.schedule.as_ref().filter(|_| chat_on).map(|s| {
        json!({"enabled": s.heartbeat.enabled,
               "interval_minutes": s.heartbeat.interval.as_secs() / 60})
    });
    let sched_s = sched.clone();
    let boot = Instant::now();
    let max_sessions = opts.gateway.max_concurrent_sessions;
    let grace = opts.gateway.grace;
    let limits = crate::listen::ServeOptions {
        header_read_timeout: opts.gateway.header_read_timeout,
        max_connections_per_client: opts.gateway.max_connections_per_client,
    };
    let conn_stats = Arc::new(crate::listen::ConnStats::default());
    let conn_stats_s = conn_stats.clone();
    let status = Box::new(move || {
        json!({
            "pid": status_info.pid,
            "port": status_info.port,
            "bind": status_info.bind,
            "started": status_info.started,
            "uptime_seconds": boot.elapsed().as_secs(),
            "workspace": status_info.workspace,
            "max_concurrent_sessions": max_sessions,
            "grace_seconds": grace.as_secs(),
            "header_read_timeout_seconds": limits.header_read_timeout.as_secs(),
            "max_connections_per_client": limits.max_connections_per_client,
            "connections": conn_stats_s.json(),
            "heartbeat": heartbeat_status(heartbeat_cfg.as_ref(), &sched_s),
            "cron": cron_status(jobs_path.as_deref(), &sched_s),
        })
    });
    let state = AppState::new(
        opts.token.clone(),
        bus.clone(),
        chat_enabled,
        Some(hub.clone()),
        opts.mem.sessions_dir(),
        stop.clone(),
        status,
        opts.mem.clock,
    )
    .with_mcp(claw_mcp::ServerOptions {
        mem: opts.mem.clone(),
        read_only: opts.mcp_read_only,
        jail: opts.agent.as_ref().map_or(true, |a| a.jail_to_workspace),
        utc_offset: opts.utc_offset,
        consolidation: opts.consolidation.clone(),
    })
    .with_sse_keepalive(opts.gateway.sse_keepalive)
    .with_approvals(approvals);
    let recent = state.recent.clone();
    let app = http::router(Arc::new(state));
    if let (Some(sch), true) = (&opts.schedule, chat_on) {
        let consolidation = match (&opts.agent, &opts.consolidation) {
            (Ok(a), Some(c)) if c.enabled => Some(Arc::new(consolidation_job(&opts, a, c, &hub)?)),
            (_, Some(c)) => {
                log(&format!(
                    "memory consolidation off: {}",
                    c.off_reason.as_deref().unwrap_or("disabled")
                ));
                None
            }
            _ => None,
        };
        start_schedule(
            sch,
            &opts.mem.workspace,
            &bus,
            recent,
            sched.clone(),
            opts.gateway.queue_capacity,
            &stop,
            consolidation,
        );
    }
    let server_stop = stop.clone();
    let server = tokio::spawn(crate::listen::serve(
        listener,
        app,
        limits,
        conn_stats,
        server_stop,
        Arc::new(|line: &str| log(line)),
    ));
    discovery::write(&state_dir, &info)?;
    log(&format!(
        "listening on {} (pid {}, workspace {})",
        info.base_url(),
        info.pid,
        info.workspace.display()
    ));
    ready(&info);

    stop.cancelled().await;
    let shutdown_started = Instant::now();
    log(&format!(
        "not taking messages; waiting up to {} s for running turns",
        grace.as_secs()
    ));
    // Running turns finish within the grace period, or are cancelled.
    if let Some(mut d) = dispatcher
        && tokio::time::timeout(grace, &mut d).await.is_err()
    {
        log("grace period over: cancelling running turns");
        hard.cancel();
        if tokio::time::timeout(Duration::from_secs(5), &mut d)
            .await
            .is_err()
        {
            warn("turns did not stop after cancellation; exiting anyway");
            d.abort();
        }
    }
    hard.cancel();
    // Streams end with their turns; give slow readers a moment, then stop serving.
    let mut server = server;
    if tokio::time::timeout(Duration::from_secs(2), &mut server)
        .await
        .is_err()
    {
        server.abort();
    }
    drop(bus);
    delivery.abort();
    if let Some(w) = watcher {
        // Stopping the watcher finishes its batch and releases the writer lock.
        match tokio::task::spawn_blocking(move || w.stop()).await? {
            Ok(()) => {}
            Err(e) => warn(&format!("watcher: {e}")),
        }
    }
    discovery::remove(&state_dir, info.pid);
    log(&format!(
        "stopped in {} ms",
        shutdown_started.elapsed().as_millis()
    ));
    Ok(())
}

/// The running channels, once started (the tools are built before them).
type ChannelsCell = Arc<std::sync::OnceLock<Arc<claw_channels::Channels>>>;

/// Channel turns go through the bus like every other message; their approval
/// requests are asked in the chat (`yes` / `always` / `no`) and answered in the
/// approval registry.
struct BusRunner(Bus, Arc<crate::approvals::Approvals>);

impl BusRunner {
    fn turn(
        &self,
        turn: claw_channels::ChatTurn,
        asker: Option<Arc<dyn claw_channels::ChatAsker>>,
    ) -> futures_util::future::BoxFuture<'static, Result<String, String>> {
        let bus = self.0.clone();
        let approvals = self.1.clone();
        Box::pin(async move {
            let (mut msg, mut rx) = crate::bus::Inbound::with_reply(
                &turn.channel,
                &turn.session,
                &turn.sender,
                &turn.text,
            );
            msg.approvals = asker.is_some();
            bus.submit(msg).await.map_err(|e| e.to_string())?;
            // The question being asked in the chat (aborted, i.e. withdrawn,
            // once the request is resolved some other way or the turn ends).
            let mut asking: Option<tokio::task::JoinHandle<()>> = None;
            let result = loop {
                let Some(ev) = rx.recv().await else {
                    break Err("the turn ended without an answer".into());
                };
                match ev {
                    crate::bus::TurnEvent::Approval(a) => {
                        let Some(asker) = asker.clone() else { continue };
                        if let Some(h) = asking.take() {
                            h.abort();
                        }
                        let approvals = approvals.clone();
                        asking = Some(tokio::spawn(async move {
                            let q = claw_channels::ApprovalQuestion {
                                preview: a.preview.clone(),
                                reach: a.reach.clone(),
                                always: a.always.clone(),
                                timeout: approvals.timeout,
                            };
                            let decision = match asker.ask(q).await {
                                Some(claw_channels::ChatDecision::Once) => {
                                    crate::approvals::Decision::Once
                                }
                                Some(claw_channels::ChatDecision::Always) => {
                                    crate::approvals::Decision::Always
                                }
                                Some(claw_channels::ChatDecision::Deny) => {
                                    crate::approvals::Decision::Deny
                                }
                                // Unanswered: the registry's timeout denies it.
                                None => return,
                            };
                            let _ = approvals.answer(&a.id, decision);
                        }));
                    }
                    crate::bus::TurnEvent::ApprovalResolved(_) => {
                        if let Some(h) = asking.take() {
                            h.abort();
                        }
                    }
                    crate::bus::TurnEvent::Finished(r) => {
                        break match r.end {
                            crate::bus::EndKind::Answered | crate::bus::EndKind::MaxIterations => {
                                Ok(r.answer)
                            }
                            // Stopped on purpose (`/stop`, which answers for itself):
                            // nothing more to say in the chat.
                            crate::bus::EndKind::Cancelled => Ok(String::new()),
                            _ => Err(r
                                .message
                                .unwrap_or_else(|| format!("the turn ended: {:?}", r.end))),
                        };
                    }
                    _ => {}
                }
            };
            if let Some(h) = asking {
                h.abort();
            }
            result
        })
    }
}

impl claw_channels::TurnRunner for BusRunner {
    fn run(
        &self,
        turn: claw_channels::ChatTurn,
    ) -> futures_util::future::BoxFuture<'static, Result<String, String>> {
        self.turn(turn, None)
    }

    fn run_asking(
        &self,
        turn: claw_channels::ChatTurn,
        asker: Arc<dyn claw_channels::ChatAsker>,
    ) -> futures_util::future::BoxFuture<'static, Result<String, String>> {
        self.turn(turn, Some(asker))
    }
}

/// The `message` tool's way out: the running channels.
struct ChannelMessenger(ChannelsCell);

impl claw_agent::tools::message::Messenger for ChannelMessenger {
    fn send<'a>(
        &'a self,
        channel: &'a str,
        chat_id: &'a str,
        text: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<usize, String>> {
        Box::pin(async move {
            let Some(ch) = self.0.get() else {
                return Err("no chat channel is running".to_string());
            };
            ch.message(channel, chat_id, text)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Channel name of answers delivered to a session by cron or the heartbeat.
pub const DELIVERY_CHANNEL: &str = "delivery";

/// What the scheduler and the heartbeat did lately (for `/v1/status`).
#[derive(Debug, Default)]
struct ScheduleState {
    last_heartbeat: Option<serde_json::Value>,
    deliveries: Vec<serde_json::Value>,
}

fn heartbeat_status(
    cfg: Option<&serde_json::Value>,
    st: &std::sync::Mutex<ScheduleState>,
) -> serde_json::Value {
    let Some(cfg) = cfg else {
        return serde_json::Value::Null;
    };
    let mut v = cfg.clone();
    if let (serde_json::Value::Object(m), Ok(st)) = (&mut v, st.lock()) {
        m.insert(
            "last".into(),
            st.last_heartbeat.clone().unwrap_or(serde_json::Value::Null),
        );
    }
    v
}

fn cron_status(
    jobs_path: Option<&std::path::Path>,
    st: &std::sync::Mutex<ScheduleState>,
) -> serde_json::Value {
    let Some(path) = jobs_path else {
        return serde_json::Value::Null;
    };
    let jobs = claw_schedule::JobStore::new(path).load();
    let (count, next) = match &jobs {
        Ok(jobs) => {
            let mut next: Vec<(String, String)> = jobs
                .iter()
                .filter_map(|j| {
                    let v = serde_json::to_value(j.view()).ok()?;
                    Some((v["next_run"].as_str()?.to_string(), j.id.clone()))
                })
                .collect();
            next.sort();
            next.truncate(5);
            (jobs.len(), next)
        }
        Err(_) => (0, Vec::new()),
    };
    let deliveries = st.lock().map(|s| s.deliveries.clone()).unwrap_or_default();
    json!({
        "jobs": count,
        "next_runs": next.iter().map(|(at, id)| json!({"id": id, "next_run": at})).collect::<Vec<_>>(),
        "error": jobs.err().map(|e| e.to_string()),
        "deliveries": deliveries,
    })
}

/// Run the cron scheduler, the heartbeat and the memory consolidation: each
/// cron or heartbeat `Fire` becomes a message on the bus (session `cron:<id>`
/// or `heartbeat`); its answer is delivered to the target the fire names
/// (`HEARTBEAT_OK` is not delivered). A consolidation fire runs the job. The
/// fire's guard is held until the run ends, so a job never overlaps itself.
#[allow(clippy::too_many_arguments)]
fn start_schedule(
    sch: &ScheduleOptions,
    workspace: &std::path::Path,
    bus: &Bus,
    recent: Arc<std::sync::Mutex<Option<String>>>,
    state: Arc<std::sync::Mutex<ScheduleState>>,
    capacity: usize,
    stop: &CancellationToken,
    consolidation: Option<Arc<claw_agent::promote::Job<ProviderChain>>>,
) {
    use claw_schedule::{Event, Fire, FireKind, Heartbeat, Routine, Scheduler};
    let (fire_tx, mut fire_rx) = tokio::sync::mpsc::channel::<Fire>(capacity.max(1));
    let (ev_tx, mut ev_rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
    tokio::spawn(
        Scheduler::new(sch.jobs_path.clone(), sch.clock)
            .events(ev_tx.clone())
            .start(fire_tx.clone(), stop.clone()),
    );
    if let Some(job) = &consolidation {
        // The last run, for the catch-up of one missed while the gateway was down.
        let last = claw_memory_api::consolidation::load(&job.state_dir)
            .ok()
            .and_then(|l| l.last_success());
        log(&format!(
            "memory consolidation: {}",
            job.settings.schedule_text
        ));
        tokio::spawn(
            Routine::new(
                FireKind::Consolidation,
                claw_agent::promote::ROUTINE_ID,
                job.settings.schedule.clone(),
                sch.clock,
                last,
            )
            .events(ev_tx.clone())
            .run(fire_tx.clone(), stop.clone()),
        );
    }
    tokio::spawn(
        Heartbeat::new(workspace, sch.heartbeat.clone(), sch.zone, sch.clock)
            .events(ev_tx)
            .run(fire_tx, stop.clone()),
    );
    let st = state.clone();
    tokio::spawn(async move {
        while let Some(ev) = ev_rx.recv().await {
            match &ev {
                Event::Fired {
                    job_id, catch_up, ..
                } if job_id == claw_agent::promote::ROUTINE_ID => log(&format!(
                    "memory consolidation: due{}",
                    if *catch_up {
                        " (missed run, catching up)"
                    } else {
                        ""
                    }
                )),
                Event::Fired {
                    job_id, catch_up, ..
                } => log(&format!(
                    "cron: job {job_id} fired{}",
                    if *catch_up {
                        " (missed run, catching up)"
                    } else {
                        ""
                    }
                )),
                Event::SkippedOverlap { job_id, .. } => log(&format!(
                    "cron: job {job_id} skipped: its previous run is still going"
                )),
                Event::Removed { job_id } => log(&format!("cron: one-shot job {job_id} removed")),
                Event::Error { message } => warn(&format!("cron: {message}")),
                Event::HeartbeatSkipped { at, reason } => {
                    if let Ok(mut s) = st.lock() {
                        s.last_heartbeat = Some(
                            json!({"at": at, "fired": false, "skipped": format!("{reason:?}")}),
                        );
                    }
                }
                Event::HeartbeatFired { at } => {
                    log("heartbeat: running a turn");
                    if let Ok(mut s) = st.lock() {
                        s.last_heartbeat = Some(json!({"at": at, "fired": true}));
                    }
                }
                Event::Loaded { .. } => {}
            }
        }
    });
    let bus = bus.clone();
    let stop = stop.clone();
    tokio::spawn(async move {
        while let Some(fire) = fire_rx.recv().await {
            let channel = match fire.kind {
                FireKind::Cron => "cron",
                FireKind::Heartbeat => "heartbeat",
                FireKind::Consolidation => {
                    let Some(job) = consolidation.clone() else {
                        continue;
                    };
                    let stop = stop.clone();
                    tokio::spawn(async move {
                        log("memory consolidation: running");
                        match job.run(&stop).await {
                            Ok(s) => log(&format!(
                                "memory consolidation: {}{}",
                                s.message,
                                s.report
                                    .as_deref()
                                    .map(|r| format!(" (report: {r})"))
                                    .unwrap_or_default()
                            )),
                            Err(e) => warn(&format!("memory consolidation failed: {e}")),
                        }
                        fire.finish();
                    });
                    continue;
                }
            };
            let (msg, mut rx) =
                crate::bus::Inbound::with_reply(channel, &fire.session, channel, &fire.message);
            if bus.submit(msg).await.is_err() {
                break;
            }
            let (recent, outbound) = (recent.clone(), bus.outbound());
            tokio::spawn(async move {
                let report = loop {
                    match rx.recv().await {
                        Some(crate::bus::TurnEvent::Finished(r)) => break Some(r),
                        Some(_) => {}
                        None => break None,
                    }
                };
                if let Some(r) = report.filter(|r| r.end.is_success()) {
                    let most_recent = recent.lock().ok().and_then(|g| g.clone());
                    match fire.deliver_target(&r.answer, most_recent.as_deref()) {
                        Some(target) => {
                            let _ = outbound
                                .send(Outbound {
                                    channel: DELIVERY_CHANNEL.into(),
                                    session: target,
                                    content: r.answer,
                                    end: r.end,
                                })
                                .await;
                        }
                        None if fire.kind == FireKind::Heartbeat => {
                            log("heartbeat: nothing needs attention (HEARTBEAT_OK, not delivered)")
                        }
                        None => log("cron: no session to deliver the answer to"),
                    }
                }
                fire.finish();
            });
        }
    });
}
