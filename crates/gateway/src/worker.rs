//! Agent workers: the dispatcher reads the bus's inbound queue and hands each
//! message to its session's worker; a session worker runs one turn at a time, in
//! arrival order, holding a permit of a semaphore that caps how many sessions run a
//! turn at once (a busy session queues its messages, it never drops one). Each
//! worker keeps its session's [`Driver`] open between turns (history in memory,
//! transcript appended as records complete). Tool activity and answer text reach
//! the message's reply stream through a per-session sink. A turn whose caller
//! closed its reply stream is cancelled (or, still queued, never started).
//!
//! Commands: a message that is a chat command (`claw_agent::commands`, the table
//! the REPL uses too) is served by the session's worker: `/remember` and
//! `/compact` run as the driver's turns, `/help`, `/agents`, `/new` answer at
//! once, `/stop` is served by the dispatcher ahead of the queue.
//!
//! Approvals: a gated call of a turn whose caller answers approvals
//! ([`Inbound::approvals`]) is sent on its reply stream as an approval request and
//! waits (bounded) for `POST /v1/approvals/{id}` ([`crate::approvals`]); the
//! driver keeps the session's "always" answers, so they never cross sessions.
//! Chat channels answer through the chat (`server::BusRunner`). Callers that
//! cannot answer (cron, the heartbeat) are refused as having no one to ask.
//!
//! Shutdown: once `stop` fires, messages that have not started are answered
//! [`EndKind::Rejected`]; running turns finish, or are cancelled when `hard` fires.

use crate::approvals::Approvals;
use crate::bus::{
    ApprovalRequest, ApprovalResolved, BusStats, EndKind, Inbound, Outbound, ToolActivity,
    ToolStatus, TurnEvent, TurnReport,
};
use claw_agent::commands::{self, Command, Line, Surface};
use claw_agent::core::TurnEnd;
use claw_agent::driver::{
    AnswerFuture, Approver, ConfirmRequest, Driver, DriverOptions, Tools, Ui,
};
use claw_agent::message::{ToolCall, ToolSpec};
use claw_agent::provider::ProviderChain;
use claw_agent::subagents::{ChildKit, SubagentConfig, SubagentList, Subagents};
use claw_agent::tools::{Answer, Gate, ToolError, ToolRegistry, ToolResult, render_for_model};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Builds a session's tools: `(session key, yes)` → the registry (`yes`: side
/// effects allowed without confirmation).
pub type ToolsFactory = dyn Fn(&str, bool) -> ToolRegistry + Send + Sync;

/// What every session's driver is built from.
pub struct AgentRuntime {
    pub model: Arc<ProviderChain>,
    /// The tools of a session (per session: the `cron` tool knows who asks).
    pub tools: Box<ToolsFactory>,
    /// Driver options; `session_key` is replaced per session.
    pub options: DriverOptions,
    /// Limits of the sessions' sub-agents (`agents` config section).
    pub subagents: SubagentConfig,
    /// The user's hooks, run by every session's driver (and its children's).
    pub hooks: Option<Arc<claw_agent::hooks::Hooks>>,
}

/// Where the current turn's events go.
#[derive(Default)]
struct Sink(Mutex<Option<mpsc::UnboundedSender<TurnEvent>>>);

impl Sink {
    fn emit(&self, ev: TurnEvent) {
        if let Ok(g) = self.0.lock()
            && let Some(tx) = g.as_ref()
        {
            // A caller that went away still gets its transcript written.
            let _ = tx.send(ev);
        }
    }
    /// Whether the current turn has an open reply stream.
    fn is_open(&self) -> bool {
        self.0
            .lock()
            .ok()
            .is_some_and(|g| g.as_ref().is_some_and(|tx| !tx.is_closed()))
    }
    fn set(&self, tx: Option<mpsc::UnboundedSender<TurnEvent>>) {
        if let Ok(mut g) = self.0.lock() {
            *g = tx;
        }
    }
}

/// The driver's UI inside the gateway: everything goes to the sink; questions
/// go through [`SessionApprover`], never through the UI.
struct SinkUi(Arc<Sink>);

impl Ui for SinkUi {
    fn text(&self, delta: &str) {
        self.0.emit(TurnEvent::Text(delta.to_string()));
    }
    fn end_answer(&self) {
        self.0.emit(TurnEvent::EndAnswer);
    }
    fn status(&self, line: &str) {
        // Tool start/failure lines are sent as tool activity instead.
        if !line.starts_with('→') && !line.starts_with("  ") {
            self.0.emit(TurnEvent::Status(line.to_string()));
        } else if line.contains(" not run: ") {
            self.0
                .emit(TurnEvent::Status(line.trim_start().to_string()));
        }
    }
    fn confirm(&self, _question: &str) -> bool {
        false
    }
    fn ask(&self, _request: &ConfirmRequest) -> Answer {
        Answer::Unavailable
    }
}

/// Asks the caller of the running turn about gated calls: an approval request on
/// its stream, answered through `POST /v1/approvals/{id}` or denied after the
/// registry's timeout. A caller that does not answer approvals gets the old
/// refusal (no one to ask).
struct SessionApprover {
    session: String,
    sink: Arc<Sink>,
    approvals: Arc<Approvals>,
    /// The running turn's caller answers approvals.
    asks: AtomicBool,
}

impl Approver for SessionApprover {
    fn approve(&self, request: ConfirmRequest) -> AnswerFuture {
        if !self.asks.load(Ordering::SeqCst) || !self.sink.is_open() {
            return Box::pin(std::future::ready(Answer::Unavailable));
        }
        let pending = self.approvals.ask(&self.session);
        let id = pending.id.clone();
        self.sink.emit(TurnEvent::Approval(ApprovalRequest {
            id: id.clone(),
            session: self.session.clone(),
            tool: request.tool.clone(),
            preview: request.preview.clone(),
            arguments: request.arguments.clone(),
            reach: request.reach.clone(),
            always: request.grant.describe(),
            timeout_seconds: self.approvals.timeout.as_secs(),
        }));
        let sink = self.sink.clone();
        let timeout = self.approvals.timeout.as_secs();
        Box::pin(async move {
            let resolution = pending.wait().await;
            if resolution == crate::approvals::Resolution::TimedOut {
                sink.emit(TurnEvent::Status(format!(
                    "{} was not approved within {timeout} s: denied",
                    request.preview
                )));
            }
            sink.emit(TurnEvent::ApprovalResolved(ApprovalResolved {
                id,
                decision: resolution.label().to_string(),
            }));
            resolution.answer()
        })
    }
}

/// The tools of one session, reporting each call to the sink.
struct ObservedTools {
    confirm: Arc<ToolRegistry>,
    yes: Arc<ToolRegistry>,
    /// The running turn was sent with `yes`.
    allow: AtomicBool,
    sink: Arc<Sink>,
}

impl ObservedTools {
    fn current(&self) -> &ToolRegistry {
        if self.allow.load(Ordering::SeqCst) {
            &self.yes
        } else {
            &self.confirm
        }
    }
}

/// A call ready to run, with what the stream shows about it.
struct Observed {
    call: ToolCall,
    preview: String,
    inner: claw_agent::tools::Invocation,
}

impl Tools for ObservedTools {
    type Prepared = Observed;

    fn specs(&self) -> Vec<ToolSpec> {
        self.current().specs()
    }

    fn is_read_only(&self, name: &str) -> bool {
        self.current().is_read_only(name)
    }

    fn preview(&self, call: &ToolCall) -> String {
        ToolRegistry::preview(call)
    }

    fn prepare(&self, call: &ToolCall, housekeeping: bool) -> Result<(Observed, Gate), ToolError> {
        let preview = ToolRegistry::preview(call);
        match self.current().prepare(call, housekeeping) {
            Ok((inner, gate)) => Ok((
                Observed {
                    call: call.clone(),
                    preview,
                    inner,
                },
                gate,
            )),
            Err(e) => {
                self.sink.emit(TurnEvent::Tool(ToolActivity {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    status: ToolStatus::Error,
                    preview: e.to_string(),
                }));
                Err(e)
            }
        }
    }

    async fn run(&self, call: Observed) -> ToolResult {
        let activity = |status, preview: String| {
            TurnEvent::Tool(ToolActivity {
                id: call.call.id.clone(),
                name: call.call.name.clone(),
                arguments: call.call.arguments.clone(),
                status,
                preview,
            })
        };
        self.sink
            .emit(activity(ToolStatus::Started, call.preview.clone()));
        let result = self.current().execute(call.inner).await;
        let (content, is_error) = render_for_model(&result);
        let ev = if is_error {
            activity(
                ToolStatus::Error,
                content.lines().next().unwrap_or("").to_string(),
            )
        } else {
            activity(ToolStatus::Done, call.preview.clone())
        };
        self.sink.emit(ev);
        result
    }
}

/// Answer a command that is not a turn (`/help`, `/agents`, `/new`, `/exit`, an
/// unknown one): lists go out as answer text (a REPL prints them on stdout),
/// the rest as a status line; the report carries the same text (what a chat
/// channel posts).
async fn answer_command(
    key: &str,
    line: &Line,
    d: &mut Driver<ProviderChain, ObservedTools>,
    sink: &Sink,
) -> TurnReport {
    let (text, is_list) = match line {
        Line::Command(Command::Help) => (commands::help(), true),
        Line::Command(Command::Agents) => {
            let list = claw_agent::subagents::listed(key).unwrap_or_default();
            if list.is_empty() {
                ("no sub-agents in this session".to_string(), false)
            } else {
                let rows: Vec<String> = list
                    .iter()
                    .map(|i| {
                        format!(
                            "{}  {:<9}  {}  ({})",
                            i.id,
                            i.state.as_str(),
                            i.label,
                            i.session
                        )
                    })
                    .collect();
                (rows.join("\n"), true)
            }
        }
        Line::Command(Command::New) => match d.new_session().await {
            Ok(Some(old)) => (
                format!("new session (previous kept as {})", old.display()),
                false,
            ),
            Ok(None) => ("new session".to_string(), false),
            Err(e) => {
                return TurnReport {
                    end: EndKind::Failed,
                    answer: String::new(),
                    message: Some(format!("cannot start a new session: {e}")),
                };
            }
        },
        Line::Command(Command::Exit) => (
            "/exit and /quit leave a terminal REPL; there is nothing to leave here".to_string(),
            false,
        ),
        Line::Unknown(cmd) => (commands::unknown(cmd), false),
        // Turns and `/stop` never get here.
        _ => (String::new(), false),
    };
    if is_list {
        sink.emit(TurnEvent::Text(text.clone()));
        sink.emit(TurnEvent::EndAnswer);
    } else {
        sink.emit(TurnEvent::Status(text.clone()));
    }
    TurnReport {
        end: EndKind::Answered,
        answer: text,
        message: None,
    }
}

/// The report of a finished turn.
fn report(end: &TurnEnd) -> TurnReport {
    match end {
        TurnEnd::Answered(t) | TurnEnd::Done(t) => TurnReport {
            end: EndKind::Answered,
            answer: t.clone(),
            message: None,
        },
        TurnEnd::MaxIterations(t) => TurnReport {
            end: EndKind::MaxIterations,
            answer: t.clone(),
            message: Some("the iteration budget ran out".into()),
        },
        TurnEnd::Cancelled => TurnReport {
            end: EndKind::Cancelled,
            answer: String::new(),
            message: Some("cancelled".into()),
        },
        TurnEnd::LoopBroken(w) => TurnReport {
            end: EndKind::LoopBroken,
            answer: String::new(),
            message: Some(w.clone()),
        },
        TurnEnd::Failed(w) => TurnReport {
            end: EndKind::Failed,
            answer: String::new(),
            message: Some(w.clone()),
        },
    }
}

fn finish(msg: &Inbound, r: TurnReport) {
    if let Some(tx) = &msg.reply {
        let _ = tx.send(TurnEvent::Finished(r));
    }
}

fn reject(msg: &Inbound, stats: &BusStats) {
    stats.queued.fetch_sub(1, Ordering::SeqCst);
    finish(
        msg,
        TurnReport {
            end: EndKind::Rejected,
            answer: String::new(),
            message: Some("the gateway is shutting down".into()),
        },
    );
}

/// Shared by the dispatcher and the session workers.
#[derive(Clone)]
pub struct WorkerContext {
    pub runtime: Arc<AgentRuntime>,
    pub stats: Arc<BusStats>,
    pub outbound: mpsc::Sender<Outbound>,
    /// Caps sessions running a turn at once.
    pub permits: Arc<Semaphore>,
    /// Stop taking messages.
    pub stop: CancellationToken,
    /// Cancel running turns (the grace period is over).
    pub hard: CancellationToken,
    /// Approval requests waiting for `POST /v1/approvals/{id}`.
    pub approvals: Arc<Approvals>,
}

/// Route inbound messages to session workers until `stop`; then answer what is
/// still queued as rejected and wait for every worker to end.
pub async fn dispatch(mut inbound: mpsc::Receiver<Inbound>, ctx: WorkerContext) {
    let mut sessions: HashMap<String, mpsc::UnboundedSender<Inbound>> = HashMap::new();
    let mut turns: HashMap<String, RunningTurn> = HashMap::new();
    let mut workers = JoinSet::new();
    loop {
        let msg = tokio::select! {
            biased;
            _ = ctx.stop.cancelled() => break,
            m = inbound.recv() => match m {
                Some(m) => m,
                None => break,
            },
        };
        if commands::parse(&msg.content, Surface::Chat) == Line::Command(Command::Stop) {
            // Not queued behind the turn it is meant to stop.
            stop_session(&msg, turns.get(&msg.session), &ctx).await;
            continue;
        }
        let tx = sessions.entry(msg.session.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            ctx.stats.sessions.fetch_add(1, Ordering::SeqCst);
            let running = RunningTurn::default();
            turns.insert(msg.session.clone(), running.clone());
            workers.spawn(session_worker(
                msg.session.clone(),
                rx,
                ctx.clone(),
                running,
            ));
            tx
        });
        if let Err(mpsc::error::SendError(msg)) = tx.send(msg) {
            // The worker died (a panic): answer, never drop silently.
            finish(
                &msg,
                TurnReport {
                    end: EndKind::Failed,
                    answer: String::new(),
                    message: Some("the session's worker stopped".into()),
                },
            );
            ctx.stats.queued.fetch_sub(1, Ordering::SeqCst);
            sessions.remove(&msg.session);
        }
        // Reap finished workers (panicked ones) without waiting.
        while let Some(Some(_)) = futures_util::FutureExt::now_or_never(workers.join_next()) {}
    }
    inbound.close();
    while let Ok(m) = inbound.try_recv() {
        reject(&m, &ctx.stats);
    }
    drop(sessions);
    while workers.join_next().await.is_some() {}
}

/// A message that is a command, not a turn: cancel the session's running turn
/// and its sub-agents (from any channel, the HTTP API or WebChat).
pub const STOP: &str = "/stop";

/// The cancel token of a session's running turn, shared by its worker (which
/// sets it while a turn runs) and the dispatcher (which serves `/stop`).
#[derive(Clone, Default)]
struct RunningTurn(Arc<std::sync::Mutex<Option<CancellationToken>>>);

impl RunningTurn {
    fn set(&self, token: Option<CancellationToken>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = token;
    }

    /// Cancels the running turn; whether there was one.
    fn cancel(&self) -> bool {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            Some(t) if !t.is_cancelled() => {
                t.cancel();
                true
            }
            _ => false,
        }
    }
}

/// Serves `/stop`: answers at once with what was stopped.
async fn stop_session(msg: &Inbound, turn: Option<&RunningTurn>, ctx: &WorkerContext) {
    ctx.stats.queued.fetch_sub(1, Ordering::SeqCst);
    let turn = turn.is_some_and(RunningTurn::cancel);
    let children = claw_agent::subagents::cancel_children(&msg.session);
    let answer = match (turn, children) {
        (false, 0) => "Nothing is running.".to_string(),
        (true, 0) => "Stopped the running turn.".to_string(),
        (false, n) => format!("Stopped {n} sub-agent(s)."),
        (true, n) => format!("Stopped the running turn and {n} sub-agent(s)."),
    };
    let _ = ctx
        .outbound
        .send(Outbound {
            channel: msg.channel.clone(),
            session: msg.session.clone(),
            content: answer.clone(),
            end: EndKind::Answered,
        })
        .await;
    if let Some(tx) = &msg.reply {
        let _ = tx.send(TurnEvent::Text(answer.clone()));
        let _ = tx.send(TurnEvent::EndAnswer);
    }
    finish(
        msg,
        TurnReport {
            end: EndKind::Answered,
            answer,
            message: None,
        },
    );
}

async fn session_worker(
    key: String,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
    ctx: WorkerContext,
    running: RunningTurn,
) {
    let sink = Arc::new(Sink::default());
    // Sub-agents of this session: children run through the same model and the
    // session's confirming tool context (no one can confirm for them, so side
    // effects stay refused unless the configuration allows them).
    let confirm = (ctx.runtime.tools)(&key, false);
    let yes = (ctx.runtime.tools)(&key, true);
    let (subagents, mut announcements) = Subagents::new(
        ChildKit {
            model: ctx.runtime.model.clone(),
            tools: confirm.context().clone(),
            dynamic: None,
            options: ctx.runtime.options.clone(),
            hooks: ctx.runtime.hooks.clone(),
        },
        ctx.runtime.subagents.clone(),
    );
    let listed: Arc<dyn SubagentList> = subagents.clone();
    claw_agent::subagents::register(&key, &listed);
    let with_spawner = |r: &ToolRegistry| {
        let mut c = r.context().clone();
        // `agents.max_subagents: 0` turns sub-agents off (no `spawn` tool).
        if ctx.runtime.subagents.max_subagents > 0 {
            c.spawner = Some(subagents.clone());
        }
        ToolRegistry::new(c)
    };
    let tools = Arc::new(ObservedTools {
        confirm: Arc::new(with_spawner(&confirm)),
        yes: Arc::new(with_spawner(&yes)),
        allow: AtomicBool::new(false),
        sink: sink.clone(),
    });
    let approver = Arc::new(SessionApprover {
        session: key.clone(),
        sink: sink.clone(),
        approvals: ctx.approvals.clone(),
        asks: AtomicBool::new(false),
    });
    let mut driver: Option<Driver<ProviderChain, ObservedTools>> = None;
    loop {
        let msg = tokio::select! {
            m = rx.recv() => match m {
                Some(m) => m,
                None => break,
            },
            Some(a) = announcements.recv() => {
                // A finished child: a turn of the parent, queued like any message.
                ctx.stats.queued.fetch_add(1, Ordering::SeqCst);
                // Nobody holds a reply stream for it: its answer is a delivery
                // to the session (sent into the chat for `<channel>:<chat>`).
                Inbound {
                    channel: crate::server::DELIVERY_CHANNEL.to_string(),
                    session: key.clone(),
                    sender: format!("subagent:{}", a.id),
                    content: a.message(),
                    yes: false,
                    approvals: false,
                    reply: None,
                    accepted: std::time::Instant::now(),
                }
            }
        };
        if ctx.stop.is_cancelled() {
            reject(&msg, &ctx.stats);
            continue;
        }
        let permit = tokio::select! {
            p = ctx.permits.clone().acquire_owned() => p,
            _ = ctx.stop.cancelled() => { reject(&msg, &ctx.stats); continue; }
        };
        let Ok(_permit) = permit else {
            reject(&msg, &ctx.stats);
            continue;
        };
        ctx.stats.queued.fetch_sub(1, Ordering::SeqCst);
        ctx.stats.running.fetch_add(1, Ordering::SeqCst);
        approver.asks.store(msg.approvals, Ordering::SeqCst);
        let r = run_one(
            &key,
            &msg,
            &ctx,
            &sink,
            &tools,
            &approver,
            &mut driver,
            &running,
        )
        .await;
        running.set(None);
        ctx.stats.running.fetch_sub(1, Ordering::SeqCst);
        ctx.stats.finished.fetch_add(1, Ordering::SeqCst);
        let _ = ctx
            .outbound
            .send(Outbound {
                channel: msg.channel.clone(),
                session: msg.session.clone(),
                content: r.answer.clone(),
                end: r.end,
            })
            .await;
        finish(&msg, r);
    }
    subagents.cancel_all();
}

#[allow(clippy::too_many_arguments)]
async fn run_one(
    key: &str,
    msg: &Inbound,
    ctx: &WorkerContext,
    sink: &Arc<Sink>,
    tools: &Arc<ObservedTools>,
    approver: &Arc<SessionApprover>,
    driver: &mut Option<Driver<ProviderChain, ObservedTools>>,
    running: &RunningTurn,
) -> TurnReport {
    if msg.reply.as_ref().is_some_and(|tx| tx.is_closed()) {
        // Cancelled while queued: never started.
        return TurnReport {
            end: EndKind::Cancelled,
            answer: String::new(),
            message: Some("cancelled before it started".into()),
        };
    }
    // Registered before the session opens: a `/stop` arriving while the driver
    // opens still finds the turn (it then ends cancelled at its first step).
    let cancel = ctx.hard.child_token();
    running.set(Some(cancel.clone()));
    sink.set(msg.reply.clone());
    tools.allow.store(msg.yes, Ordering::SeqCst);
    if driver.is_none() {
        let mut opts = ctx.runtime.options.clone();
        opts.session_key = key.to_string();
        match Driver::open(
            opts,
            ctx.runtime.model.clone(),
            tools.clone(),
            Arc::new(SinkUi(sink.clone())),
        )
        .await
        {
            Ok(d) => {
                let d = d.with_approver(approver.clone());
                *driver = Some(match &ctx.runtime.hooks {
                    Some(h) => d.with_hooks(h.clone()),
                    None => d,
                })
            }
            Err(e) => {
                sink.set(None);
                return TurnReport {
                    end: EndKind::Failed,
                    answer: String::new(),
                    message: Some(format!("cannot open the session: {e}")),
                };
            }
        }
    }
    let Some(d) = driver.as_mut() else {
        return TurnReport {
            end: EndKind::Failed,
            answer: String::new(),
            message: Some("no session".into()),
        };
    };
    // The caller went away (closed its stream, or `POST /v1/sessions/{key}/cancel`):
    // cancel the turn; the driver keeps what was said and the session goes on.
    let gone = msg.reply.clone().map(|tx| {
        let c = cancel.clone();
        tokio::spawn(async move {
            tx.closed().await;
            c.cancel();
        })
    });
    // The command table every surface shares: `/remember` and `/compact` are
    // turns of the driver; the others answer at once (`/stop` is served by the
    // dispatcher before it reaches the session's queue).
    let outcome = match commands::parse(&msg.content, Surface::Chat) {
        Line::Command(Command::Remember) => d.remember(&cancel).await,
        Line::Command(Command::Compact) => d.compact(&cancel).await,
        Line::Empty | Line::Message => d.run_turn(&msg.content, &cancel).await,
        line => {
            let r = answer_command(key, &line, d, sink).await;
            if let Some(g) = gone {
                g.abort();
            }
            sink.set(None);
            return r;
        }
    };
    if let Ok(o) = &outcome
        && let TurnEnd::Done(what) = &o.end
    {
        // What `/remember` or `/compact` did: a status line, as in the local REPL.
        sink.emit(TurnEvent::Status(what.clone()));
    }
    if let Some(g) = gone {
        g.abort();
    }
    sink.set(None);
    match outcome {
        Ok(o) => report(&o.end),
        Err(e) => {
            // The session file could not be written: reopen it next time.
            *driver = None;
            TurnReport {
                end: EndKind::Failed,
                answer: String::new(),
                message: Some(format!("the session file could not be written: {e}")),
            }
        }
    }
}
