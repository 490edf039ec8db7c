//! The async driver: performs the effects of the pure [`Agent`] core — calls the
//! model (streaming answer text to the [`Ui`]), runs tools (in order; consecutive
//! calls that run freely concurrently), asks the user when the tools layer's policy
//! says so (allow once / always for this session / deny), appends every record to
//! the session file, and handles cancellation (a [`CancellationToken`] per turn:
//! cancelling ends the running turn, the driver stays usable).
//!
//! Invariant: every record the core emits is persisted before the next model call;
//! a cancelled turn still leaves a consistent session (each tool call answered);
//! a call the policy gates never runs without a yes (or an "always" of this
//! session) — with no one to ask it is refused, and the refusal reaches the model
//! as the call's error result.

use crate::core::{Agent, CoreConfig, Effect, Event, HookEvent, ModelFailure, Purpose, TurnEnd};
use crate::hooks::{HookAnswer, HookRun, Hooks};
use crate::message::{ChatRequest, ChatResponse, StreamDelta, ToolCall, ToolSpec};
use crate::prompt::{self, PromptInputs};
use crate::session::{self, History, SessionError, SessionHandle};
use crate::think::ThinkFilter;
use crate::tools::{Answer, Gate, Grant, Grants, ToolError, ToolResult, render_for_model};
use chrono::FixedOffset;
use claw_memory_api::clock::Clock;
use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

/// The model side, as the driver sees it: one streamed completion.
pub trait Model: Send + Sync + 'static {
    /// Complete `req`, sending deltas as they arrive; failures are classified.
    fn complete(
        &self,
        req: &ChatRequest,
        deltas: &UnboundedSender<StreamDelta>,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Result<ChatResponse, ModelFailure>> + Send;
    /// The model name to show in the system prompt.
    fn label(&self) -> String;
}

/// The tool side: what is offered, what a call needs before it runs, and how it runs.
pub trait Tools: Send + Sync + 'static {
    /// A call parsed into its typed arguments.
    type Prepared: Send;
    fn specs(&self) -> Vec<ToolSpec>;
    /// True for a tool that changes nothing (its calls may run concurrently).
    fn is_read_only(&self, name: &str) -> bool;
    /// A one-line description of a call (status lines, confirmation prompts).
    fn preview(&self, call: &ToolCall) -> String;
    /// Parse a call and ask the policy about it (`housekeeping`: claw's own
    /// memory flush). An unknown tool or bad arguments are the call's error.
    fn prepare(
        &self,
        call: &ToolCall,
        housekeeping: bool,
    ) -> Result<(Self::Prepared, Gate), ToolError>;
    /// Run a prepared call.
    fn run(&self, call: Self::Prepared) -> impl Future<Output = ToolResult> + Send;
}

/// A question for the user before a gated call runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmRequest {
    /// The tool's name.
    pub tool: String,
    /// A one-line preview of the call (`exec: cargo test`).
    pub preview: String,
    /// The call's raw JSON arguments (as the hooks left them).
    pub arguments: String,
    /// What "always" would allow for the rest of the session.
    pub grant: Grant,
    /// What the call reaches ([`Grant::reach`]: `workspace`, `process`, `host:<host>`…).
    pub reach: String,
}

impl ConfirmRequest {
    /// The question as one line.
    pub fn question(&self) -> String {
        format!("run {}?", self.preview)
    }
}

/// Where the driver shows things. Implementations must be cheap and non-blocking,
/// except [`Ui::confirm`], which is called on a blocking thread.
pub trait Ui: Send + Sync + 'static {
    /// A piece of the answer text, as it streams.
    fn text(&self, delta: &str);
    /// The answer is complete (e.g. print a newline).
    fn end_answer(&self);
    /// A status line (tool calls, retries, compaction, warnings).
    fn status(&self, line: &str);
    /// Ask the user a yes/no question (blocking).
    fn confirm(&self, question: &str) -> bool;
    /// Ask before a gated call runs (blocking): allow once, always for this
    /// session (what [`ConfirmRequest::grant`] covers), deny — or
    /// [`Answer::Unavailable`] when there is no one to ask. The default asks
    /// [`Ui::confirm`] (yes = once).
    fn ask(&self, request: &ConfirmRequest) -> Answer {
        if self.confirm(&request.question()) {
            Answer::Once
        } else {
            Answer::Deny
        }
    }
}

/// A pending answer to a [`ConfirmRequest`].
pub type AnswerFuture = std::pin::Pin<Box<dyn Future<Output = Answer> + Send>>;

/// Who answers gated calls when it is not the [`Ui`] on a blocking thread: the
/// gateway's session worker sends the request on the caller's stream and waits
/// (bounded) for the answer through its API. The driver drops the future when
/// the turn is cancelled, so an approver must clean up on drop.
pub trait Approver: Send + Sync + 'static {
    /// Ask about one gated call; [`Answer::Unavailable`] when no one can answer.
    fn approve(&self, request: ConfirmRequest) -> AnswerFuture;
}

/// Errors that stop the driver (model and tool failures never do: they end the turn).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("a background task of the driver failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Everything the driver needs besides the model, tools and UI.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    pub workspace: PathBuf,
    pub sessions_dir: PathBuf,
    pub session_key: String,
    /// Values never written to session files (API keys).
    pub secrets: Vec<String>,
    pub max_iterations: usize,
    pub max_tokens: u32,
    /// The model's context window in tokens.
    pub context_window: usize,
    pub utc_offset: FixedOffset,
    /// Label of the time zone for the prompt.
    pub timezone: String,
    pub os: String,
    /// "Now" for timestamps, the prompt and the daily note.
    pub clock: Clock,
    /// Bound of MEMORY.md in bytes when consolidating (`agent.memory_max_bytes`).
    pub memory_max_bytes: usize,
    /// claw's state directory for the workspace: where MEMORY.md's lock lives
    /// ([`crate::memory_file`]), shared with every other writer of the file.
    pub state_dir: PathBuf,
}

/// What a finished turn reports.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub end: TurnEnd,
    /// Model calls made (all purposes).
    pub model_calls: usize,
    /// Tool calls run.
    pub tool_calls: usize,
}

/// One session's driver.
pub struct Driver<M: Model, T: Tools> {
    agent: Agent,
    model: Arc<M>,
    tools: Arc<T>,
    ui: Arc<dyn Ui>,
    session: SessionHandle,
    opts: DriverOptions,
    /// The "always" answers of this session.
    grants: Grants,
    /// Records loaded from the session file that did not parse.
    pub skipped_on_load: usize,
    /// The user's hooks ([`crate::hooks`]); none by default.
    hooks: Option<Arc<Hooks>>,
    /// Whether `session_start` hooks ran, and the context they added.
    session_started: bool,
    session_context: Vec<String>,
    /// Context the `user_prompt` hooks added to the running turn.
    turn_context: Vec<String>,
    /// Answers gated calls instead of [`Ui::ask`] (None: the UI asks).
    approver: Option<Arc<dyn Approver>>,
}

impl<M: Model, T: Tools> Driver<M, T> {
    /// Open (or create) the session and build the core over its history.
    pub async fn open(
        opts: DriverOptions,
        model: Arc<M>,
        tools: Arc<T>,
        ui: Arc<dyn Ui>,
    ) -> Result<Driver<M, T>, DriverError> {
        let (session, loaded) = SessionHandle::open(
            opts.sessions_dir.clone(),
            opts.session_key.clone(),
            opts.secrets.clone(),
            opts.clock.now(),
        )
        .await?;
        if loaded.skipped > 0 || loaded.torn_tail {
            ui.status(&format!(
                "session {}: skipped {} unreadable line(s){}",
                session.path().display(),
                loaded.skipped,
                if loaded.torn_tail {
                    " and a torn last line"
                } else {
                    ""
                }
            ));
        }
        let config = core_config(&opts, tools.as_ref());
        let agent = Agent::new(config, String::new(), loaded.history());
        Ok(Driver {
            agent,
            model,
            tools,
            ui,
            session,
            skipped_on_load: loaded.skipped,
            opts,
            grants: Grants::default(),
            hooks: None,
            session_started: false,
            session_context: Vec::new(),
            turn_context: Vec::new(),
            approver: None,
        })
    }

    /// Gated calls are asked through `approver` instead of [`Ui::ask`].
    pub fn with_approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = Some(approver);
        self
    }

    /// Runs the user's hooks at the points of the loop ([`crate::hooks`]).
    pub fn with_hooks(mut self, hooks: Arc<Hooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    /// Runs the hooks of `event` (when any is configured), logs failures as
    /// status lines, and returns the runs and the event as the hooks left it.
    async fn raise(&self, event: HookEvent) -> (Vec<HookRun>, HookEvent) {
        let Some(hooks) = self.hooks.as_ref().filter(|h| h.wants(&event)) else {
            return (Vec::new(), event);
        };
        let name = crate::hooks::payload(&event, "")["event"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let (runs, event) = hooks.run(event, &self.opts.session_key).await;
        for run in &runs {
            if let Err(e) = &run.result {
                self.ui.status(&format!(
                    "hook {name} `{}` failed: {e} (ignored: no opinion)",
                    run.command
                ));
            }
        }
        (runs, event)
    }

    /// The context the hooks of `event` added.
    async fn raise_for_context(&self, event: HookEvent) -> Vec<String> {
        let (runs, _) = self.raise(event).await;
        runs.into_iter()
            .filter_map(|r| match r.result {
                Ok(HookAnswer::Context(c)) if !c.trim().is_empty() => Some(c),
                _ => None,
            })
            .collect()
    }

    /// `before_tool_call`: the call as the hooks rewrote it, or the block's reason.
    async fn before_tool_call(&self, mut call: ToolCall) -> Result<ToolCall, (ToolCall, String)> {
        let event = HookEvent::BeforeToolCall {
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
        };
        let (runs, event) = self.raise(event).await;
        if let Some(reason) = runs.into_iter().find_map(|r| match r.result {
            Ok(HookAnswer::Block(reason)) => Some(reason),
            _ => None,
        }) {
            return Err((call, reason));
        }
        if let HookEvent::BeforeToolCall { arguments, .. } = event
            && arguments != call.arguments
        {
            self.ui
                .status(&format!("  {}: arguments rewritten by a hook", call.name));
            call.arguments = arguments;
        }
        Ok(call)
    }

    pub fn session_path(&self) -> PathBuf {
        self.session.path().to_path_buf()
    }

    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Start a fresh session under the same key: the current file is kept,
    /// renamed to `<name>.<timestamp>.jsonl`, and the history is emptied.
    pub async fn new_session(&mut self) -> Result<Option<PathBuf>, DriverError> {
        let path = self.session.path().to_path_buf();
        let now = self.opts.clock.now();
        let archived = tokio::task::spawn_blocking(move || session::archive(&path, now)).await??;
        let (handle, _) = SessionHandle::open(
            self.opts.sessions_dir.clone(),
            self.opts.session_key.clone(),
            self.opts.secrets.clone(),
            self.opts.clock.now(),
        )
        .await?;
        self.session = handle;
        self.grants.clear();
        self.session_started = false;
        self.session_context.clear();
        self.agent = Agent::new(
            core_config(&self.opts, self.tools.as_ref()),
            String::new(),
            History::default(),
        );
        Ok(archived)
    }

    /// Run one user turn to its end. `cancel` stops it (the driver stays usable).
    pub async fn run_turn(
        &mut self,
        input: &str,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, DriverError> {
        self.turn_context = self
            .raise_for_context(HookEvent::UserPrompt {
                prompt: input.to_string(),
            })
            .await;
        let outcome = self
            .drive(Event::UserInput(input.to_string()), cancel)
            .await;
        self.turn_context.clear();
        outcome
    }

    /// `/remember`: distil the conversation not consolidated yet into MEMORY.md.
    /// Ends with [`TurnEnd::Done`] saying what happened.
    pub async fn remember(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, DriverError> {
        self.drive(Event::Remember, cancel).await
    }

    /// `/compact`: compact the history now (memory flush, consolidation into
    /// MEMORY.md, summary). Ends with [`TurnEnd::Done`].
    pub async fn compact(
        &mut self,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, DriverError> {
        self.drive(Event::CompactNow, cancel).await
    }

    /// Feed `first` to the core and perform effects until the turn ends.
    async fn drive(
        &mut self,
        first: Event,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, DriverError> {
        if !self.session_started {
            self.session_started = true;
            self.session_context = self.raise_for_context(HookEvent::SessionStart).await;
        }
        let mut system = self.system_prompt().await;
        let context: Vec<&String> = self
            .session_context
            .iter()
            .chain(self.turn_context.iter())
            .collect();
        if !context.is_empty() {
            system.push_str("\n\n## Context from the user's hooks\n");
            for c in context {
                system.push('\n');
                system.push_str(c.trim());
                system.push('\n');
            }
        }
        self.agent.set_system_prompt(system);
        let mut queue: VecDeque<Effect> = self.agent.handle(first, self.opts.clock.now()).into();
        let mut end = None;
        let mut model_calls = 0;
        let mut tool_calls = 0;
        let mut streamed = false;
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Persist(record) => self.session.append(record).await?,
                Effect::Notice(line) => self.ui.status(&line),
                Effect::Hook(event) => {
                    self.raise(event).await;
                }
                Effect::MarkConsolidated(mark) => self.session.mark_consolidated(mark).await?,
                Effect::LoadMemoryFile => {
                    // Never through a link: a tool could point MEMORY.md
                    // at any file the user can read.
                    let file = crate::memory_file::MemoryFile::new(
                        &self.opts.workspace,
                        &self.opts.state_dir,
                    );
                    let read = tokio::task::spawn_blocking(move || {
                        file.read().map_err(|e| claw_memory_api::error_chain(&e))
                    })
                    .await?;
                    queue.extend(
                        self.agent
                            .handle(Event::MemoryFile(read), self.opts.clock.now()),
                    );
                }
                Effect::MergeMemoryFile {
                    facts,
                    day,
                    max_bytes,
                } => {
                    let file = crate::memory_file::MemoryFile::new(
                        &self.opts.workspace,
                        &self.opts.state_dir,
                    );
                    let merged = tokio::task::spawn_blocking(move || {
                        file.update(
                            "remembering (/remember or compaction)",
                            crate::memory_file::LOCK_WAIT,
                            |current| {
                                let mut m = crate::consolidate::merge_on(
                                    current,
                                    &facts,
                                    max_bytes,
                                    Some(day),
                                );
                                let text = m.changed().then(|| std::mem::take(&mut m.text));
                                (text, m)
                            },
                        )
                        .map_err(|e| claw_memory_api::error_chain(&e))
                    })
                    .await?;
                    queue.extend(
                        self.agent
                            .handle(Event::MemoryMerged(merged), self.opts.clock.now()),
                    );
                }
                Effect::EndTurn(e) => {
                    if let TurnEnd::Answered(text) = &e
                        && !streamed
                    {
                        self.ui.text(text);
                    }
                    match &e {
                        TurnEnd::Answered(_) => self.ui.end_answer(),
                        TurnEnd::MaxIterations(text) => {
                            if streamed {
                                self.ui.end_answer();
                            }
                            self.ui.text(text);
                            self.ui.end_answer();
                        }
                        _ => {
                            if streamed {
                                self.ui.end_answer();
                            }
                        }
                    }
                    end = Some(e);
                }
                Effect::CallModel { purpose, request } => {
                    model_calls += 1;
                    let (event, did_stream) = self.call_model(purpose, &request, cancel).await;
                    if purpose == Purpose::Answer {
                        streamed = did_stream;
                    }
                    queue.extend(self.agent.handle(event, self.opts.clock.now()));
                }
                Effect::RunTool(call) => {
                    // Take the whole batch of runnable calls queued right now.
                    let mut batch = vec![call];
                    while let Some(Effect::RunTool(_)) = queue.front() {
                        if let Some(Effect::RunTool(c)) = queue.pop_front() {
                            batch.push(c);
                        }
                    }
                    if streamed {
                        // Text streamed before the tool calls: end the line.
                        self.ui.end_answer();
                        streamed = false;
                    }
                    let housekeeping = self.agent.housekeeping();
                    let (events, ran) = self.run_tools(batch, housekeeping, cancel).await;
                    tool_calls += ran;
                    for event in events {
                        queue.extend(self.agent.handle(event, self.opts.clock.now()));
                    }
                }
            }
        }
        let end = end.unwrap_or_else(|| TurnEnd::Failed("the turn ended without a result".into()));
        Ok(TurnOutcome {
            end,
            model_calls,
            tool_calls,
        })
    }

    async fn system_prompt(&self) -> String {
        let ws = self.opts.workspace.clone();
        let files = tokio::task::spawn_blocking(move || prompt::read_workspace_files(&ws))
            .await
            .unwrap_or_default();
        let specs = self.tools.specs();
        prompt::build(&PromptInputs {
            now: self.opts.clock.now().with_timezone(&self.opts.utc_offset),
            timezone: self.opts.timezone.clone(),
            os: self.opts.os.clone(),
            model: self.model.label(),
            workspace: &self.opts.workspace,
            files: &files,
            tools: &specs,
        })
    }

    /// One model call; returns the event for the core and whether answer text was streamed.
    async fn call_model(
        &self,
        purpose: Purpose,
        request: &ChatRequest,
        cancel: &CancellationToken,
    ) -> (Event, bool) {
        if purpose != Purpose::Answer {
            self.ui.status(match purpose {
                Purpose::MemoryFlush => "memory flush: the model saves durable facts",
                Purpose::Consolidate => "consolidating durable facts into MEMORY.md",
                _ => "summarising older messages",
            });
        }
        let (tx, mut rx) = unbounded_channel();
        let mut streamed = false;
        // `<think>` blocks are cut out of the stream, even across chunks.
        let mut think = ThinkFilter::new();
        let mut on_delta = |d: StreamDelta| match d {
            StreamDelta::Text(t) if purpose == Purpose::Answer => {
                let visible = think.push(&t);
                if !visible.is_empty() {
                    streamed = true;
                    self.ui.text(&visible);
                }
            }
            StreamDelta::Text(_) | StreamDelta::ToolCall(_) => {}
            StreamDelta::Retry { attempt, reason } => {
                self.ui
                    .status(&format!("retrying (attempt {attempt}): {reason}"));
            }
        };
        let result = {
            let fut = self.model.complete(request, &tx, cancel);
            tokio::pin!(fut);
            loop {
                tokio::select! {
                    r = &mut fut => break r,
                    Some(d) = rx.recv() => on_delta(d),
                }
            }
        };
        drop(tx);
        while let Ok(d) = rx.try_recv() {
            on_delta(d);
        }
        let rest = think.finish();
        if purpose == Purpose::Answer && !rest.is_empty() {
            streamed = true;
            self.ui.text(&rest);
        }
        let event = match result {
            Ok(resp) => Event::ModelResponse(resp),
            Err(f) => Event::ModelError(f),
        };
        (event, streamed)
    }

    /// Ask the user about a gated call (unless the session already granted it).
    /// `None` when the turn was cancelled while asking.
    async fn authorize(
        &mut self,
        call: &ToolCall,
        grant: Grant,
        cancel: &CancellationToken,
    ) -> Option<Result<(), ToolError>> {
        if self.grants.covers(&grant) {
            return Some(Ok(()));
        }
        let request = ConfirmRequest {
            tool: call.name.clone(),
            preview: self.tools.preview(call),
            arguments: call.arguments.clone(),
            reach: grant.reach(),
            grant: grant.clone(),
        };
        let answer = match &self.approver {
            Some(approver) => {
                let ask = approver.approve(request);
                tokio::select! {
                    a = ask => a,
                    _ = cancel.cancelled() => return None,
                }
            }
            None => {
                let ui = self.ui.clone();
                let ask = tokio::task::spawn_blocking(move || ui.ask(&request));
                tokio::select! {
                    r = ask => r.unwrap_or(Answer::Deny),
                    _ = cancel.cancelled() => return None,
                }
            }
        };
        Some(match answer {
            Answer::Once => Ok(()),
            Answer::Always => {
                self.ui
                    .status(&format!("allowed {} for this session", grant.describe()));
                self.grants.allow(grant);
                Ok(())
            }
            Answer::Deny => Err(ToolError::Declined {
                tool: call.name.clone(),
            }),
            Answer::Unavailable => Err(ToolError::NoConfirmation {
                tool: call.name.clone(),
                why: match &grant {
                    Grant::Tool(_) | Grant::External(_) => "it has side effects".into(),
                    Grant::Host(h) => format!("it reaches {h}, a host not allowed yet"),
                },
            }),
        })
    }

    /// Run a batch in order: each call is parsed and checked by the tools layer;
    /// gated calls are asked about just before they run; consecutive calls that
    /// run freely run together. Returns the events and how many calls ran.
    async fn run_tools(
        &mut self,
        batch: Vec<ToolCall>,
        housekeeping: bool,
        cancel: &CancellationToken,
    ) -> (Vec<Event>, usize) {
        let mut events = Vec::new();
        let mut ran = 0;
        let mut group: Vec<(ToolCall, T::Prepared)> = Vec::new();
        for call in batch {
            let call = match self.before_tool_call(call).await {
                Ok(call) => call,
                Err((call, reason)) => {
                    ran += self.run_group(&mut group, &mut events, cancel).await;
                    if events.last() == Some(&Event::Cancel) {
                        return (events, ran);
                    }
                    events.push(self.refused(
                        &call,
                        ToolError::Blocked {
                            tool: call.name.clone(),
                            reason,
                        },
                    ));
                    continue;
                }
            };
            let (prepared, gate) = match self.tools.prepare(&call, housekeeping) {
                Ok(p) => p,
                Err(e) => {
                    // Answer in order: what is ready runs first.
                    ran += self.run_group(&mut group, &mut events, cancel).await;
                    if events.last() == Some(&Event::Cancel) {
                        return (events, ran);
                    }
                    events.push(self.refused(&call, e));
                    continue;
                }
            };
            if gate == Gate::Free && self.tools.is_read_only(&call.name) {
                group.push((call, prepared));
                continue;
            }
            // A call with side effects runs alone, after what came before it.
            ran += self.run_group(&mut group, &mut events, cancel).await;
            if events.last() == Some(&Event::Cancel) {
                return (events, ran);
            }
            match gate {
                Gate::Free => {
                    let mut one = vec![(call, prepared)];
                    ran += self.run_group(&mut one, &mut events, cancel).await;
                    if events.last() == Some(&Event::Cancel) {
                        return (events, ran);
                    }
                }
                Gate::Confirm(grant) => match self.authorize(&call, grant, cancel).await {
                    None => {
                        events.push(Event::Cancel);
                        return (events, ran);
                    }
                    Some(Err(refusal)) => events.push(self.refused(&call, refusal)),
                    Some(Ok(())) => {
                        let mut one = vec![(call, prepared)];
                        ran += self.run_group(&mut one, &mut events, cancel).await;
                        if events.last() == Some(&Event::Cancel) {
                            return (events, ran);
                        }
                    }
                },
            }
        }
        ran += self.run_group(&mut group, &mut events, cancel).await;
        (events, ran)
    }

    /// The error result of a call that was not run.
    fn refused(&self, call: &ToolCall, refusal: ToolError) -> Event {
        self.ui.status(&format!(
            "  {} not run: {refusal}",
            self.tools.preview(call)
        ));
        let (content, is_error) = render_for_model(&Err(refusal));
        Event::ToolResult {
            call_id: call.id.clone(),
            content,
            is_error,
        }
    }

    /// Run a group of allowed calls concurrently; appends their results (or
    /// `Event::Cancel`) in order and empties the group.
    async fn run_group(
        &self,
        group: &mut Vec<(ToolCall, T::Prepared)>,
        events: &mut Vec<Event>,
        cancel: &CancellationToken,
    ) -> usize {
        if group.is_empty() {
            return 0;
        }
        let (calls, prepared): (Vec<ToolCall>, Vec<T::Prepared>) = group.drain(..).unzip();
        for c in &calls {
            self.ui.status(&format!("→ {}", self.tools.preview(c)));
        }
        let runs = futures_util::future::join_all(prepared.into_iter().map(|p| self.tools.run(p)));
        let results = tokio::select! {
            r = runs => r,
            _ = cancel.cancelled() => {
                events.push(Event::Cancel);
                return calls.len();
            }
        };
        for (c, result) in calls.iter().zip(results) {
            let (content, is_error) = render_for_model(&result);
            if is_error {
                let first = content.lines().next().unwrap_or("");
                self.ui.status(&format!("  {} failed: {first}", c.name));
            }
            events.push(Event::ToolResult {
                call_id: c.id.clone(),
                content,
                is_error,
            });
        }
        calls.len()
    }
}

fn core_config<T: Tools>(opts: &DriverOptions, tools: &T) -> CoreConfig {
    CoreConfig {
        max_iterations: opts.max_iterations,
        max_tokens: opts.max_tokens,
        tools: tools.specs(),
        // Reserve room for the answer, but never most of a small window.
        compaction: crate::compaction::CompactionPolicy::new(
            opts.context_window,
            (opts.max_tokens as usize).min(opts.context_window / 4),
        ),
        utc_offset: opts.utc_offset,
        memory_max_bytes: opts.memory_max_bytes,
    }
}

// ---- the real model and tools -------------------------------------------------

impl Model for crate::provider::ProviderChain {
    async fn complete(
        &self,
        req: &ChatRequest,
        deltas: &UnboundedSender<StreamDelta>,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, ModelFailure> {
        use crate::provider::ProviderError;
        match crate::provider::ProviderChain::complete(self, req, deltas, cancel).await {
            Ok(r) => Ok(r),
            Err(ProviderError::ContextOverflow { profile, message }) => Err(
                ModelFailure::ContextOverflow(format!("{profile}: {message}")),
            ),
            Err(ProviderError::Cancelled) => Err(ModelFailure::Cancelled),
            Err(e) => Err(ModelFailure::Other(e)),
        }
    }

    fn label(&self) -> String {
        self.profiles()
            .first()
            .map(|p| p.model.clone())
            .unwrap_or_default()
    }
}

impl Tools for crate::tools::ToolRegistry {
    type Prepared = crate::tools::Prepared;

    fn specs(&self) -> Vec<ToolSpec> {
        crate::tools::ToolRegistry::specs(self)
    }

    fn is_read_only(&self, name: &str) -> bool {
        crate::tools::ToolRegistry::is_read_only(self, name)
    }

    fn preview(&self, call: &ToolCall) -> String {
        crate::tools::ToolRegistry::preview(call)
    }

    fn prepare(
        &self,
        call: &ToolCall,
        housekeeping: bool,
    ) -> Result<(Self::Prepared, Gate), ToolError> {
        crate::tools::ToolRegistry::prepare_any(self, call, housekeeping)
    }

    async fn run(&self, call: Self::Prepared) -> ToolResult {
        self.execute_any(call).await
    }
}
