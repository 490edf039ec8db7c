//! The async driver: performs the effects of the pure [`Agent`] core — calls the
//! model (streaming answer text to the [`Ui`]), runs tools (in order; consecutive
//! read-only calls concurrently), asks for confirmation, appends every record to
//! the session file, and handles cancellation (a [`CancellationToken`] per turn:
//! cancelling ends the running turn, the driver stays usable).
//!
//! Invariant: every record the core emits is persisted before the next model call;
//! a cancelled turn still leaves a consistent session (each tool call answered).

use crate::core::{Agent, CoreConfig, Effect, Event, ModelFailure, Purpose, TurnEnd};
use crate::message::{ChatRequest, ChatResponse, StreamDelta, ToolCall, ToolSpec};
use crate::prompt::{self, PromptInputs};
use crate::session::{self, History, SessionError, SessionHandle};
use chrono::FixedOffset;
use claw_memory::clock::Clock;
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

/// The tool side: what is offered and how a call runs.
pub trait Tools: Send + Sync + 'static {
    fn specs(&self) -> Vec<ToolSpec>;
    fn needs_confirmation(&self, name: &str) -> bool;
    fn is_read_only(&self, name: &str) -> bool;
    /// A one-line description of a call (status lines, confirmation prompts).
    fn preview(&self, call: &ToolCall) -> String;
    /// Run the call; the rendered text for the model and whether it is an error.
    fn run(&self, call: &ToolCall) -> impl Future<Output = (String, bool)> + Send;
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
}

/// Errors that stop the driver (model and tool failures never do: they end the turn).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Session(#[from] SessionError),
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
    /// Records loaded from the session file that did not parse.
    pub skipped_on_load: usize,
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
        })
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
        let archived = tokio::task::spawn_blocking(move || session::archive(&path, now))
            .await
            .map_err(|e| SessionError::Task(e.to_string()))??;
        let (handle, _) = SessionHandle::open(
            self.opts.sessions_dir.clone(),
            self.opts.session_key.clone(),
            self.opts.secrets.clone(),
            self.opts.clock.now(),
        )
        .await?;
        self.session = handle;
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
        let system = self.system_prompt().await;
        self.agent.set_system_prompt(system);
        let mut queue: VecDeque<Effect> = self
            .agent
            .handle(Event::UserInput(input.to_string()), self.opts.clock.now())
            .into();
        let mut end = None;
        let mut model_calls = 0;
        let mut tool_calls = 0;
        let mut streamed = false;
        while let Some(effect) = queue.pop_front() {
            match effect {
                Effect::Persist(record) => self.session.append(record).await?,
                Effect::Notice(line) => self.ui.status(&line),
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
                Effect::Confirm(call) => {
                    let event = self.confirm(&call, cancel).await;
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
                    tool_calls += batch.len();
                    for event in self.run_tools(batch, cancel).await {
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
                _ => "summarising older messages",
            });
        }
        let (tx, mut rx) = unbounded_channel();
        let mut streamed = false;
        let mut on_delta = |d: StreamDelta| match d {
            StreamDelta::Text(t) if purpose == Purpose::Answer => {
                if !t.is_empty() {
                    streamed = true;
                    self.ui.text(&t);
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
        let event = match result {
            Ok(resp) => Event::ModelResponse(resp),
            Err(f) => Event::ModelError(f),
        };
        (event, streamed)
    }

    async fn confirm(&self, call: &ToolCall, cancel: &CancellationToken) -> Event {
        let question = format!("run {}?", self.tools.preview(call));
        let ui = self.ui.clone();
        let ask = tokio::task::spawn_blocking(move || ui.confirm(&question));
        let approved = tokio::select! {
            r = ask => r.unwrap_or(false),
            _ = cancel.cancelled() => return Event::Cancel,
        };
        Event::Confirmation {
            call_id: call.id.clone(),
            approved,
        }
    }

    /// Run a batch in order: consecutive read-only calls together, others one by one.
    async fn run_tools(&self, batch: Vec<ToolCall>, cancel: &CancellationToken) -> Vec<Event> {
        let mut events = Vec::new();
        let mut i = 0;
        while i < batch.len() {
            let mut j = i + 1;
            if self.tools.is_read_only(&batch[i].name) {
                while j < batch.len() && self.tools.is_read_only(&batch[j].name) {
                    j += 1;
                }
            }
            let group = &batch[i..j];
            for c in group {
                self.ui.status(&format!("→ {}", self.tools.preview(c)));
            }
            let runs = futures_util::future::join_all(group.iter().map(|c| self.tools.run(c)));
            let results = tokio::select! {
                r = runs => r,
                _ = cancel.cancelled() => {
                    events.push(Event::Cancel);
                    return events;
                }
            };
            for (c, (content, is_error)) in group.iter().zip(results) {
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
            i = j;
        }
        events
    }
}

fn core_config<T: Tools>(opts: &DriverOptions, tools: &T) -> CoreConfig {
    let specs = tools.specs();
    let confirm = specs
        .iter()
        .filter(|s| tools.needs_confirmation(&s.name))
        .map(|s| s.name.clone())
        .collect();
    CoreConfig {
        max_iterations: opts.max_iterations,
        max_tokens: opts.max_tokens,
        tools: specs,
        confirm,
        // Reserve room for the answer, but never most of a small window.
        compaction: crate::compaction::CompactionPolicy::new(
            opts.context_window,
            (opts.max_tokens as usize).min(opts.context_window / 4),
        ),
        utc_offset: opts.utc_offset,
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
            Err(e) => Err(ModelFailure::Other(e.to_string())),
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
    fn specs(&self) -> Vec<ToolSpec> {
        crate::tools::ToolRegistry::specs(self)
    }

    fn needs_confirmation(&self, name: &str) -> bool {
        crate::tools::ToolRegistry::needs_confirmation(self, name)
    }

    fn is_read_only(&self, name: &str) -> bool {
        crate::tools::ToolRegistry::is_read_only(self, name)
    }

    fn preview(&self, call: &ToolCall) -> String {
        crate::tools::ToolRegistry::preview(call)
    }

    async fn run(&self, call: &ToolCall) -> (String, bool) {
        let result = self.dispatch(call).await;
        crate::tools::render_for_model(&result)
    }
}
