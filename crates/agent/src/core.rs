//! The agent core: a pure state machine. The driver feeds it [`Event`]s (user
//! input, model output or failure, tool results, cancel) and performs the
//! [`Effect`]s it returns (call the model, run a tool — the tools layer parses it
//! and asks its policy —, persist a record, show a notice, end the turn). It owns the conversation
//! history, the per-turn iteration budget, the tool-loop breaker and the
//! compaction flow (memory flush → consolidation into MEMORY.md → summary →
//! retry), and the user's housekeeping commands (`/remember`: consolidate now;
//! `/compact`: compact now).
//!
//! Invariant: no I/O and no clock — time comes in with each event; every tool call
//! the model made gets exactly one result in the history, even when the turn is
//! cancelled, fails or is stopped. The core never parses tool arguments and never
//! writes a tool result's text itself: its refusals are [`ToolError`]s rendered by
//! the tools layer ([`ToolError::render_refusal`]).

use crate::breaker::{Breaker, Verdict};
use crate::compaction::{self, CompactionPolicy, FLUSH_MAX_CALLS};
use crate::consolidate::{self, Merged};
use crate::message::{ChatRequest, ChatResponse, Message, Role, ToolCall, ToolSpec};
use crate::provider::ProviderError;
use crate::session::{
    CompactionRecord, ConsolidationMark, History, MAX_TOOL_RESULT_BYTES, Record, truncate_middle,
};
use crate::tools::ToolError;
use chrono::{DateTime, FixedOffset, Utc};
use std::collections::BTreeSet;

/// Default number of model calls in one turn.
pub const DEFAULT_MAX_ITERATIONS: usize = 30;
/// Context-overflow compactions tried within one turn before giving up.
const MAX_OVERFLOW_COMPACTIONS: usize = 2;

/// What the core needs to know about its environment.
#[derive(Debug, Clone)]
pub struct CoreConfig {
    /// Model calls allowed per user turn.
    pub max_iterations: usize,
    /// Output tokens requested per model call.
    pub max_tokens: u32,
    /// Tools offered to the model.
    pub tools: Vec<ToolSpec>,
    pub compaction: CompactionPolicy,
    /// Offset of the user's local time, for `memory/YYYY-MM-DD.md` names.
    pub utc_offset: FixedOffset,
    /// Bound of MEMORY.md in bytes for consolidation.
    pub memory_max_bytes: usize,
}

/// Why the model is being called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// The conversation itself: stream its text to the user.
    Answer,
    /// The pre-compaction memory flush turn (silent).
    MemoryFlush,
    /// The compaction summary (silent).
    Summary,
    /// Distilling durable facts for MEMORY.md (silent).
    Consolidate,
}

/// A classified model failure.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelFailure {
    /// The request did not fit the model's context window.
    ContextOverflow(String),
    /// The call was cancelled.
    Cancelled,
    /// Anything else (after the provider's own retries and failover).
    Other(ProviderError),
}

/// Input to the core.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    UserInput(String),
    ModelResponse(ChatResponse),
    ModelError(ModelFailure),
    /// The rendered outcome of one tool call (run, or refused by the tools layer).
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
    Cancel,
    /// `/remember`: consolidate the conversation into MEMORY.md now.
    Remember,
    /// `/compact`: compact the history now (flush, consolidation, summary).
    CompactNow,
    /// The content of MEMORY.md (empty when missing), or why it could not be read.
    MemoryFile(Result<String, String>),
    /// The facts merged into MEMORY.md as it was when written
    /// ([`Effect::MergeMemoryFile`]; `text` left empty), or why not.
    MemoryMerged(Result<Merged, String>),
}

/// Something for the driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    CallModel {
        purpose: Purpose,
        request: ChatRequest,
    },
    /// Run a call of an offered tool (the driver asks the tools layer's policy
    /// first) and answer with [`Event::ToolResult`].
    RunTool(ToolCall),
    /// Append to the session file.
    Persist(Record),
    /// A status line for the user (stderr).
    Notice(String),
    /// Read MEMORY.md and answer with [`Event::MemoryFile`].
    LoadMemoryFile,
    /// Merge `facts` into MEMORY.md as it is now, under its lock
    /// ([`crate::memory_file::MemoryFile::update`] with
    /// [`consolidate::merge_on`]`(current, facts, max_bytes, Some(day))`), write
    /// it when it changes, and answer with [`Event::MemoryMerged`]. The file
    /// read for the model's request may have changed meanwhile (a scheduled
    /// consolidation, `memory_append`): the merge is done again on what is there.
    MergeMemoryFile {
        facts: Vec<consolidate::Fact>,
        day: chrono::NaiveDate,
        max_bytes: usize,
    },
    /// Record in the session's metadata line how far it was consolidated.
    MarkConsolidated(ConsolidationMark),
    /// Run the user's hooks for a point of the loop (notifications: the driver
    /// logs their failures and feeds nothing back).
    Hook(HookEvent),
    EndTurn(TurnEnd),
}

/// A point of the loop where user hooks run ([`crate::hooks`]). The core emits
/// the notifications (`AfterToolCall`, `BeforeCompaction`, `AgentEnd`) as
/// [`Effect::Hook`]; the driver raises the ones whose answer shapes the turn
/// (`SessionStart`, `UserPrompt`, `BeforeToolCall`) itself, before the input or
/// call reaches the core's effects.
#[derive(Debug, Clone, PartialEq)]
pub enum HookEvent {
    SessionStart,
    UserPrompt {
        prompt: String,
    },
    BeforeToolCall {
        tool: String,
        /// The model's raw JSON arguments.
        arguments: String,
    },
    AfterToolCall {
        tool: String,
        arguments: String,
        result: String,
        is_error: bool,
    },
    BeforeCompaction {
        /// `manual`, `proactive` or `overflow`.
        reason: String,
        tokens_before: usize,
    },
    AgentEnd {
        /// `answered`, `max_iterations`, `cancelled`, `loop_broken`, `failed`, `done`.
        end: String,
        text: String,
    },
}

impl TurnEnd {
    /// The end's name as hooks and JSON see it, and its text.
    pub fn label(&self) -> (&'static str, &str) {
        match self {
            TurnEnd::Answered(t) => ("answered", t),
            TurnEnd::MaxIterations(t) => ("max_iterations", t),
            TurnEnd::Cancelled => ("cancelled", ""),
            TurnEnd::LoopBroken(t) => ("loop_broken", t),
            TurnEnd::Failed(t) => ("failed", t),
            TurnEnd::Done(t) => ("done", t),
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// The model answered in text.
    Answered(String),
    /// The iteration budget ran out; the text says so plainly.
    MaxIterations(String),
    Cancelled,
    /// The tool-loop breaker ended the turn.
    LoopBroken(String),
    /// The model could not be called.
    Failed(String),
    /// A housekeeping command (`/remember`, `/compact`) finished; what it did.
    Done(String),
}

impl TurnEnd {
    /// Whether the turn produced what the user asked for.
    pub fn is_success(&self) -> bool {
        matches!(self, TurnEnd::Answered(_))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Proactive,
    Overflow,
    /// `/compact`.
    Manual,
}

/// A housekeeping command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `/remember`.
    Remember,
    /// `/compact`.
    Compact,
}

/// What follows a consolidation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The compaction's summary.
    Summary,
    /// The end of the turn (`/remember`).
    End,
}

#[derive(Debug)]
struct Consolidation {
    then: Then,
    /// History index of the first message not yet consolidated.
    from: usize,
    /// The session's message count this consolidation covers (the mark).
    upto: usize,
    /// MEMORY.md as read.
    memory: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Flush,
    Summary,
}

#[derive(Debug)]
struct Compaction {
    reason: Reason,
    stage: Stage,
    /// The flush conversation (never part of the history).
    scratch: Vec<Message>,
    flush_calls: usize,
    flushed: bool,
    tokens_before: usize,
    split: usize,
}

#[derive(Debug)]
struct Slot {
    call: ToolCall,
    done: bool,
}

#[derive(Debug)]
enum Wait {
    Model(Purpose),
    Tools {
        purpose: Purpose,
        slots: Vec<Slot>,
    },
    /// MEMORY.md is being read for a consolidation.
    MemoryFile,
    /// The distilled facts are being merged into MEMORY.md.
    MemoryMerge,
}

#[derive(Debug)]
struct Turn {
    answer_calls: usize,
    breaker: Breaker,
    overflow_compactions: usize,
    /// Compaction already ran for the next answer call: don't start another.
    compacted: bool,
    wait: Wait,
    compaction: Option<Compaction>,
    consolidation: Option<Consolidation>,
}

/// The agent state machine of one session.
#[derive(Debug)]
pub struct Agent {
    config: CoreConfig,
    system_prompt: String,
    summary: Option<String>,
    history: Vec<Message>,
    turn: Option<Turn>,
    /// Message records of the session before `history[0]` (compacted away).
    offset: usize,
    /// Message records of the session already consolidated into MEMORY.md.
    consolidated: usize,
}

type Fx = Vec<Effect>;

impl Agent {
    /// A core over an existing history (from a session file), repaired so every
    /// tool call has a result.
    pub fn new(config: CoreConfig, system_prompt: String, history: History) -> Agent {
        Agent {
            config,
            system_prompt,
            summary: history.summary,
            history: repair_history(history.messages),
            turn: None,
            offset: history.offset,
            consolidated: history.last_consolidated.map_or(0, |m| m.messages),
        }
    }

    /// Replace the system prompt (rebuilt by the driver before each turn).
    pub fn set_system_prompt(&mut self, prompt: String) {
        self.system_prompt = prompt;
    }

    pub fn history(&self) -> &[Message] {
        &self.history
    }

    pub fn summary(&self) -> Option<&str> {
        self.summary.as_deref()
    }

    pub fn is_busy(&self) -> bool {
        self.turn.is_some()
    }

    /// Feed one event; get the effects to perform, in order.
    pub fn handle(&mut self, event: Event, now: DateTime<Utc>) -> Vec<Effect> {
        let mut fx = Vec::new();
        match event {
            Event::UserInput(text) => self.on_user_input(text, now, &mut fx),
            Event::ModelResponse(resp) => self.on_response(resp, now, &mut fx),
            Event::ModelError(ModelFailure::Cancelled) | Event::Cancel => {
                self.on_cancel(now, &mut fx)
            }
            Event::ModelError(f) => self.on_model_error(f, now, &mut fx),
            Event::ToolResult {
                call_id,
                content,
                is_error,
            } => self.complete_call(&call_id, content, is_error, now, &mut fx),
            Event::Remember => self.on_command(Kind::Remember, now, &mut fx),
            Event::CompactNow => self.on_command(Kind::Compact, now, &mut fx),
            Event::MemoryFile(content) => self.on_memory_file(content, now, &mut fx),
            Event::MemoryMerged(merged) => self.on_memory_written(merged, now, &mut fx),
        }
        fx
    }

    /// Messages of the history not consolidated into MEMORY.md yet.
    pub fn unconsolidated(&self) -> usize {
        self.history.len() - self.first_unconsolidated()
    }

    fn first_unconsolidated(&self) -> usize {
        self.consolidated
            .saturating_sub(self.offset)
            .min(self.history.len())
    }

    // ---- events ------------------------------------------------------------

    fn on_user_input(&mut self, text: String, now: DateTime<Utc>, fx: &mut Fx) {
        if self.turn.is_some() {
            fx.push(Effect::Notice(
                "a turn is already running: wait for it or cancel it".into(),
            ));
            return;
        }
        let msg = Message::user(text, now);
        self.push_history(msg, fx);
        self.turn = Some(new_turn());
        self.next_answer_call(now, fx);
    }

    fn on_command(&mut self, kind: Kind, now: DateTime<Utc>, fx: &mut Fx) {
        if self.turn.is_some() {
            fx.push(Effect::Notice(
                "a turn is already running: wait for it or cancel it".into(),
            ));
            return;
        }
        self.turn = Some(new_turn());
        match kind {
            Kind::Remember => self.start_consolidation(Then::End, now, fx),
            _ => self.start_compaction(Reason::Manual, now, fx),
        }
    }

    fn on_response(&mut self, mut resp: ChatResponse, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(turn) = &self.turn else { return };
        // Reasoning blocks never enter the history (nor the transcript, nor the index).
        resp.text = crate::think::strip(&resp.text);
        let Wait::Model(purpose) = turn.wait else {
            return;
        };
        let calls = normalise_calls(resp.tool_calls, self.history.len());
        let mut msg = Message::assistant(resp.text.clone(), calls.clone(), now);
        msg.usage = Some(resp.usage);
        match purpose {
            Purpose::Answer => {
                self.push_history(msg, fx);
                if calls.is_empty() {
                    self.end_turn(TurnEnd::Answered(resp.text), fx);
                } else {
                    self.start_batch(Purpose::Answer, calls, now, fx);
                }
            }
            Purpose::MemoryFlush => {
                let Some(c) = self.compaction_mut() else {
                    return;
                };
                c.scratch.push(msg);
                c.flush_calls += 1;
                c.flushed = true;
                let more = !calls.is_empty() && c.flush_calls < FLUSH_MAX_CALLS;
                if more {
                    self.start_batch(Purpose::MemoryFlush, calls, now, fx);
                } else {
                    self.start_consolidation(Then::Summary, now, fx);
                }
            }
            Purpose::Consolidate => self.on_distilled(&resp.text, now, fx),
            Purpose::Summary => {
                let text = resp.text.trim().to_string();
                self.finish_compaction((!text.is_empty()).then_some(text), now, fx);
            }
        }
    }

    fn on_model_error(&mut self, failure: ModelFailure, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(turn) = &mut self.turn else { return };
        let Wait::Model(purpose) = turn.wait else {
            return;
        };
        match (purpose, failure) {
            (Purpose::Answer, ModelFailure::ContextOverflow(msg)) => {
                if turn.overflow_compactions >= MAX_OVERFLOW_COMPACTIONS {
                    self.end_turn(
                        TurnEnd::Failed(format!(
                            "the conversation still does not fit the model's context window \
                             after compacting: {msg}"
                        )),
                        fx,
                    );
                    return;
                }
                turn.overflow_compactions += 1;
                // The retry does not count against the iteration budget.
                turn.answer_calls = turn.answer_calls.saturating_sub(1);
                fx.push(Effect::Notice(format!(
                    "the model reported a context overflow ({msg}); compacting and retrying"
                )));
                self.start_compaction(Reason::Overflow, now, fx);
            }
            (Purpose::Answer, ModelFailure::Other(e)) => {
                self.end_turn(TurnEnd::Failed(e.to_string()), fx);
            }
            (Purpose::MemoryFlush, f) => {
                fx.push(Effect::Notice(format!(
                    "memory flush skipped: {}",
                    failure_text(&f)
                )));
                self.start_consolidation(Then::Summary, now, fx);
            }
            (Purpose::Consolidate, f) => {
                fx.push(Effect::Notice(format!(
                    "MEMORY.md not updated: the consolidation failed ({})",
                    failure_text(&f)
                )));
                self.after_consolidation(now, fx);
            }
            (Purpose::Summary, f) => {
                let reason = self.compaction_mut().map(|c| c.reason);
                let overflow = matches!(f, ModelFailure::ContextOverflow(_));
                if reason == Some(Reason::Manual) {
                    if let Some(t) = &mut self.turn {
                        t.compaction = None;
                    }
                    self.end_turn(
                        TurnEnd::Done(format!(
                            "compaction skipped: the summary failed ({}); the history is kept",
                            failure_text(&f)
                        )),
                        fx,
                    );
                } else if reason == Some(Reason::Proactive) && !overflow {
                    // Nothing forces us to drop history yet: keep it, answer anyway.
                    fx.push(Effect::Notice(format!(
                        "compaction skipped: the summary failed ({})",
                        failure_text(&f)
                    )));
                    if let Some(t) = &mut self.turn {
                        t.compaction = None;
                        t.compacted = true;
                    }
                    self.next_answer_call(now, fx);
                } else {
                    fx.push(Effect::Notice(format!(
                        "the summary failed ({}); dropping older messages without one",
                        failure_text(&f)
                    )));
                    self.finish_compaction(None, now, fx);
                }
            }
            (_, ModelFailure::Cancelled) => self.on_cancel(now, fx),
        }
    }

    fn on_cancel(&mut self, now: DateTime<Utc>, fx: &mut Fx) {
        if self.turn.is_none() {
            return;
        }
        self.close_pending(ToolError::Cancelled, now, fx);
        self.end_turn(TurnEnd::Cancelled, fx);
    }

    // ---- the loop ----------------------------------------------------------

    fn next_answer_call(&mut self, now: DateTime<Utc>, fx: &mut Fx) {
        let max = self.config.max_iterations;
        let request = self.build_request(Purpose::Answer, now);
        let estimate = compaction::estimate_request(&request);
        let Some(turn) = &mut self.turn else { return };
        if turn.answer_calls >= max {
            let text = format!(
                "I stopped without a final answer: this request used all {max} model calls \
                 allowed for one turn (max_iterations = {max}). The work so far is in the \
                 conversation above; ask me to continue, or raise agent.max_iterations."
            );
            self.push_history(Message::assistant(text.clone(), Vec::new(), now), fx);
            self.end_turn(TurnEnd::MaxIterations(text), fx);
            return;
        }
        if !turn.compacted && self.config.compaction.should_compact(estimate) {
            self.start_compaction(Reason::Proactive, now, fx);
            return;
        }
        turn.compacted = false;
        turn.answer_calls += 1;
        turn.wait = Wait::Model(Purpose::Answer);
        fx.push(Effect::CallModel {
            purpose: Purpose::Answer,
            request,
        });
    }

    fn start_batch(
        &mut self,
        purpose: Purpose,
        calls: Vec<ToolCall>,
        now: DateTime<Utc>,
        fx: &mut Fx,
    ) {
        let offered: Vec<ToolSpec> = match purpose {
            Purpose::MemoryFlush => compaction::flush_tools(&self.config.tools),
            _ => self.config.tools.clone(),
        };
        let mut immediate = Vec::new();
        for call in &calls {
            if offered.iter().any(|t| t.name == call.name) {
                fx.push(Effect::RunTool(call.clone()));
            } else {
                let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
                let refusal = ToolError::UnknownTool {
                    name: call.name.clone(),
                    available: names.join(", "),
                };
                immediate.push((call.id.clone(), refusal));
            }
        }
        if let Some(turn) = &mut self.turn {
            turn.wait = Wait::Tools {
                purpose,
                slots: calls
                    .into_iter()
                    .map(|call| Slot { call, done: false })
                    .collect(),
            };
        }
        for (id, refusal) in immediate {
            let (text, is_error) = refusal.render_refusal();
            self.complete_call(&id, text, is_error, now, fx);
        }
    }

    /// True while the running tool batch is claw's own memory flush (the tools
    /// layer lets it write memory notes without asking).
    pub fn housekeeping(&self) -> bool {
        matches!(
            self.turn.as_ref().map(|t| &t.wait),
            Some(Wait::Tools {
                purpose: Purpose::MemoryFlush,
                ..
            })
        )
    }

    fn complete_call(
        &mut self,
        call_id: &str,
        content: String,
        is_error: bool,
        now: DateTime<Utc>,
        fx: &mut Fx,
    ) {
        let Some(turn) = &mut self.turn else { return };
        let Wait::Tools { purpose, slots } = &mut turn.wait else {
            return;
        };
        let purpose = *purpose;
        let Some(slot) = slots.iter_mut().find(|s| !s.done && s.call.id == call_id) else {
            return;
        };
        slot.done = true;
        let call = slot.call.clone();
        let all_done = slots.iter().all(|s| s.done);
        let mut content = truncate_middle(&content, MAX_TOOL_RESULT_BYTES).into_owned();

        if purpose == Purpose::MemoryFlush {
            if let Some(c) = &mut turn.compaction {
                c.scratch
                    .push(Message::tool_result(&call, content, is_error, now));
            }
            if all_done {
                self.call_flush(now, fx);
            }
            return;
        }

        fx.push(Effect::Hook(HookEvent::AfterToolCall {
            tool: call.name.clone(),
            arguments: call.arguments.clone(),
            result: content.clone(),
            is_error,
        }));
        let verdict = turn.breaker.observe(&call.name, &call.arguments, &content);
        match &verdict {
            Verdict::Ok => {}
            Verdict::Warn(m) | Verdict::Stop(m) => {
                content.push_str("\n\n");
                content.push_str(m);
                fx.push(Effect::Notice(m.clone()));
            }
            Verdict::Break(_) => {}
        }
        self.push_history(Message::tool_result(&call, content, is_error, now), fx);
        if let Verdict::Break(why) = verdict {
            self.close_pending(ToolError::StoppedByLoopGuard, now, fx);
            let text = format!("I stopped: {why}. Tell me how you'd like to proceed.");
            self.push_history(Message::assistant(text, Vec::new(), now), fx);
            self.end_turn(TurnEnd::LoopBroken(why), fx);
            return;
        }
        if all_done {
            self.next_answer_call(now, fx);
        }
    }

    /// Give every unanswered tool call of the current batch an error result.
    fn close_pending(&mut self, why: ToolError, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(turn) = &mut self.turn else { return };
        let Wait::Tools { purpose, slots } = &mut turn.wait else {
            return;
        };
        if *purpose != Purpose::Answer {
            return;
        }
        let open: Vec<ToolCall> = slots
            .iter_mut()
            .filter(|s| !s.done)
            .map(|s| {
                s.done = true;
                s.call.clone()
            })
            .collect();
        let (text, is_error) = why.render_refusal();
        for call in open {
            self.push_history(Message::tool_result(&call, &text, is_error, now), fx);
        }
    }

    fn end_turn(&mut self, end: TurnEnd, fx: &mut Fx) {
        self.turn = None;
        let (label, text) = end.label();
        fx.push(Effect::Hook(HookEvent::AgentEnd {
            end: label.to_string(),
            text: text.to_string(),
        }));
        fx.push(Effect::EndTurn(end));
    }

    fn push_history(&mut self, msg: Message, fx: &mut Fx) {
        fx.push(Effect::Persist(Record::Message(msg.clone())));
        self.history.push(msg);
    }

    // ---- compaction ----------------------------------------------------------

    fn compaction_mut(&mut self) -> Option<&mut Compaction> {
        self.turn.as_mut()?.compaction.as_mut()
    }

    fn start_compaction(&mut self, reason: Reason, now: DateTime<Utc>, fx: &mut Fx) {
        let tokens_before = compaction::estimate_request(&self.build_request(Purpose::Answer, now));
        let window = self.config.compaction.context_window;
        // `/compact` keeps only the latest exchange.
        let keep = match reason {
            Reason::Manual => 0,
            _ => self.config.compaction.keep_budget(),
        };
        let Some(split) = compaction::split_point(&self.history, keep) else {
            match reason {
                Reason::Manual => {
                    self.end_turn(TurnEnd::Done("nothing to compact yet".into()), fx);
                }
                Reason::Proactive => {
                    if let Some(t) = &mut self.turn {
                        t.compacted = true;
                    }
                    self.next_answer_call(now, fx);
                }
                Reason::Overflow => self.end_turn(
                    TurnEnd::Failed(format!(
                        "the request does not fit the model's context window (~{tokens_before} \
                         tokens estimated, window {window}) and there is no older history to compact"
                    )),
                    fx,
                ),
            }
            return;
        };
        fx.push(Effect::Hook(HookEvent::BeforeCompaction {
            reason: match reason {
                Reason::Manual => "manual",
                Reason::Proactive => "proactive",
                Reason::Overflow => "overflow",
            }
            .to_string(),
            tokens_before,
        }));
        fx.push(Effect::Notice(if reason == Reason::Manual {
            format!(
                "compacting now (context ~{tokens_before} of {window} tokens): saving durable \
                 facts to memory first"
            )
        } else {
            format!(
                "context ~{tokens_before} of {window} tokens: saving durable facts to memory, then compacting"
            )
        }));
        let flush_possible = !compaction::flush_tools(&self.config.tools).is_empty();
        let date = now
            .with_timezone(&self.config.utc_offset)
            .format("%Y-%m-%d")
            .to_string();
        let Some(turn) = &mut self.turn else { return };
        turn.compaction = Some(Compaction {
            reason,
            stage: Stage::Flush,
            scratch: vec![Message::user(compaction::flush_instruction(&date), now)],
            flush_calls: 0,
            flushed: false,
            tokens_before,
            split,
        });
        if flush_possible {
            self.call_flush(now, fx);
        } else {
            self.start_consolidation(Then::Summary, now, fx);
        }
    }

    fn call_flush(&mut self, now: DateTime<Utc>, fx: &mut Fx) {
        let request = self.build_request(Purpose::MemoryFlush, now);
        if let Some(turn) = &mut self.turn {
            turn.wait = Wait::Model(Purpose::MemoryFlush);
        }
        fx.push(Effect::CallModel {
            purpose: Purpose::MemoryFlush,
            request,
        });
    }

    fn start_summary(&mut self, now: DateTime<Utc>, fx: &mut Fx) {
        let manual = self
            .compaction_mut()
            .is_some_and(|c| c.reason == Reason::Manual);
        let keep = if manual {
            0
        } else {
            self.config.compaction.keep_budget()
        };
        let Some(split) = compaction::split_point(&self.history, keep) else {
            return;
        };
        let request = compaction::summary_request(
            self.summary.as_deref(),
            &self.history[..split],
            &self.config.compaction,
            self.config.max_tokens,
            now,
        );
        let Some(turn) = &mut self.turn else { return };
        let Some(c) = &mut turn.compaction else {
            return;
        };
        c.stage = Stage::Summary;
        c.split = split;
        c.scratch.clear();
        turn.wait = Wait::Model(Purpose::Summary);
        fx.push(Effect::CallModel {
            purpose: Purpose::Summary,
            request,
        });
    }

    fn finish_compaction(&mut self, summary: Option<String>, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(turn) = &mut self.turn else { return };
        let Some(c) = turn.compaction.take() else {
            return;
        };
        debug_assert_eq!(c.stage, Stage::Summary);
        turn.compacted = true;
        let split = c.split.min(self.history.len());
        self.history.drain(..split);
        self.offset += split;
        let summary = match summary {
            Some(s) => s,
            None => {
                let mut s = self.summary.clone().unwrap_or_default();
                if !s.is_empty() {
                    s.push_str("\n\n");
                }
                s.push_str(&format!(
                    "[{split} earlier messages were dropped without a summary; search memory \
                     or the session transcript for details]"
                ));
                s
            }
        };
        self.summary = Some(summary.clone());
        let tokens_after = compaction::estimate_request(&self.build_request(Purpose::Answer, now));
        fx.push(Effect::Persist(Record::Compaction(CompactionRecord {
            timestamp: now,
            summary,
            replaced: split,
            tokens_before: c.tokens_before,
            tokens_after,
            memory_flushed: c.flushed,
        })));
        let done = format!(
            "compacted {split} messages into a summary (~{} → ~{tokens_after} tokens)",
            c.tokens_before
        );
        if c.reason == Reason::Manual {
            self.end_turn(TurnEnd::Done(done), fx);
            return;
        }
        fx.push(Effect::Notice(done));
        self.next_answer_call(now, fx);
    }

    // ---- consolidation into MEMORY.md -----------------------------------------

    /// Distil the messages not consolidated yet into MEMORY.md (read it first),
    /// then go on with `then`. Skipped when there is nothing new or no
    /// `write_file` tool to write with.
    fn start_consolidation(&mut self, then: Then, now: DateTime<Utc>, fx: &mut Fx) {
        let from = self.first_unconsolidated();
        let upto = self.offset + self.history.len();
        let has_text = self.history[from..].iter().any(|m| {
            matches!(m.role, Role::User | Role::Assistant) && !m.content.trim().is_empty()
        });
        let can_write = self.config.tools.iter().any(|t| t.name == "write_file");
        let Some(turn) = &mut self.turn else { return };
        turn.consolidation = Some(Consolidation {
            then,
            from,
            upto,
            memory: String::new(),
        });
        if !has_text || !can_write {
            let why = if has_text {
                "MEMORY.md not updated: the write_file tool is not available"
            } else {
                "nothing new to remember"
            };
            if then == Then::End || has_text {
                fx.push(Effect::Notice(why.into()));
            }
            self.after_consolidation(now, fx);
            return;
        }
        turn.wait = Wait::MemoryFile;
        fx.push(Effect::LoadMemoryFile);
    }

    fn on_memory_file(&mut self, content: Result<String, String>, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(turn) = &mut self.turn else { return };
        if !matches!(turn.wait, Wait::MemoryFile) {
            return;
        }
        let text = match content {
            Ok(t) => t,
            Err(e) => {
                fx.push(Effect::Notice(format!(
                    "MEMORY.md not updated: it could not be read ({e})"
                )));
                self.after_consolidation(now, fx);
                return;
            }
        };
        let Some(c) = &mut turn.consolidation else {
            return;
        };
        let from = c.from.min(self.history.len());
        let request = consolidate::request(&text, &self.history[from..], self.config.max_tokens);
        c.memory = text;
        turn.wait = Wait::Model(Purpose::Consolidate);
        fx.push(Effect::CallModel {
            purpose: Purpose::Consolidate,
            request,
        });
    }

    /// The model's distilled facts: merge them and write MEMORY.md if it changes.
    fn on_distilled(&mut self, reply: &str, now: DateTime<Utc>, fx: &mut Fx) {
        let max = self.config.memory_max_bytes;
        let Some(turn) = &mut self.turn else { return };
        let Some(c) = &mut turn.consolidation else {
            return;
        };
        let facts = consolidate::parse_reply(reply);
        let today = now.with_timezone(&self.config.utc_offset).date_naive();
        let merged = consolidate::merge_on(&c.memory, &facts, max, Some(today));
        if !merged.changed() {
            fx.push(Effect::Notice(if merged.dropped > 0 {
                format!(
                    "MEMORY.md is full ({max} bytes): {} new fact(s) left out",
                    merged.dropped
                )
            } else {
                "nothing new to remember".to_string()
            }));
            self.mark_consolidated(now, fx);
            self.after_consolidation(now, fx);
            return;
        }
        turn.wait = Wait::MemoryMerge;
        fx.push(Effect::MergeMemoryFile {
            facts,
            day: today,
            max_bytes: max,
        });
    }

    /// The result of merging the facts into MEMORY.md.
    fn on_memory_written(
        &mut self,
        merged: Result<Merged, String>,
        now: DateTime<Utc>,
        fx: &mut Fx,
    ) {
        let Some(turn) = &mut self.turn else { return };
        if !matches!(turn.wait, Wait::MemoryMerge) {
            return;
        }
        match merged {
            Err(e) => {
                let first = e.lines().next().unwrap_or("");
                fx.push(Effect::Notice(format!("MEMORY.md not updated: {first}")));
            }
            Ok(m) if !m.changed() => {
                // Another writer put these facts there meanwhile.
                fx.push(Effect::Notice("nothing new to remember".to_string()));
                self.mark_consolidated(now, fx);
            }
            Ok(m) => {
                let mut line = format!("MEMORY.md: remembered {} new fact(s)", m.added);
                if m.updated > 0 {
                    line.push_str(&format!(
                        ", updated {} (the old value kept as history)",
                        m.updated
                    ));
                }
                if m.duplicates > 0 {
                    line.push_str(&format!(", {} already there", m.duplicates));
                }
                if m.condensed > 0 {
                    line.push_str(&format!(
                        ", {} older entr{} shortened to stay within {} bytes",
                        m.condensed,
                        if m.condensed == 1 { "y" } else { "ies" },
                        self.config.memory_max_bytes
                    ));
                }
                if m.dropped > 0 {
                    line.push_str(&format!(", {} left out (full)", m.dropped));
                }
                fx.push(Effect::Notice(line));
                self.mark_consolidated(now, fx);
            }
        }
        self.after_consolidation(now, fx);
    }

    fn mark_consolidated(&mut self, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(upto) = self
            .turn
            .as_ref()
            .and_then(|t| t.consolidation.as_ref())
            .map(|c| c.upto)
        else {
            return;
        };
        self.consolidated = self.consolidated.max(upto);
        fx.push(Effect::MarkConsolidated(ConsolidationMark {
            at: now,
            messages: self.consolidated,
        }));
    }

    fn after_consolidation(&mut self, now: DateTime<Utc>, fx: &mut Fx) {
        let Some(turn) = &mut self.turn else { return };
        let then = turn.consolidation.take().map_or(Then::End, |c| c.then);
        match then {
            Then::Summary => self.start_summary(now, fx),
            Then::End => {
                // The last notice says what happened: it becomes the result.
                let done = match fx.iter().rposition(|e| matches!(e, Effect::Notice(_))) {
                    Some(i) => match fx.remove(i) {
                        Effect::Notice(line) => line,
                        _ => String::new(),
                    },
                    None => "MEMORY.md is up to date".to_string(),
                };
                self.end_turn(TurnEnd::Done(done), fx);
            }
        }
    }

    // ---- requests ------------------------------------------------------------

    fn build_request(&self, purpose: Purpose, now: DateTime<Utc>) -> ChatRequest {
        let mut system = self.system_prompt.clone();
        if let Some(s) = &self.summary {
            system.push_str("\n\n# Summary of the earlier conversation\n\n");
            system.push_str(s);
        }
        let mut messages = Vec::with_capacity(self.history.len() + 1);
        if self.history.first().is_some_and(|m| m.role != Role::User) {
            messages.push(Message::user(
                "(The earlier conversation is summarised in the system prompt.)",
                now,
            ));
        }
        messages.extend(self.history.iter().cloned());
        let tools = match purpose {
            Purpose::MemoryFlush => {
                if let Some(c) = self.turn.as_ref().and_then(|t| t.compaction.as_ref()) {
                    messages.extend(c.scratch.iter().cloned());
                }
                compaction::flush_tools(&self.config.tools)
            }
            _ => self.config.tools.clone(),
        };
        ChatRequest {
            system,
            messages,
            tools,
            max_tokens: self.config.max_tokens,
        }
    }
}

fn new_turn() -> Turn {
    Turn {
        answer_calls: 0,
        breaker: Breaker::new(),
        overflow_compactions: 0,
        compacted: false,
        wait: Wait::Model(Purpose::Answer),
        compaction: None,
        consolidation: None,
    }
}

fn failure_text(f: &ModelFailure) -> String {
    match f {
        ModelFailure::ContextOverflow(m) => format!("context overflow: {m}"),
        ModelFailure::Cancelled => "cancelled".into(),
        ModelFailure::Other(e) => e.to_string(),
    }
}

/// Give calls without an id (or with duplicate ids) a unique one.
fn normalise_calls(calls: Vec<ToolCall>, salt: usize) -> Vec<ToolCall> {
    let mut seen = BTreeSet::new();
    calls
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            if c.id.is_empty() || !seen.insert(c.id.clone()) {
                c.id = format!("call_{salt}_{i}");
                seen.insert(c.id.clone());
            }
            c
        })
        .collect()
}

/// Give every tool call in a loaded history a result (a crash or kill can leave a
/// call without one; providers reject such histories).
pub fn repair_history(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut open: Vec<ToolCall> = Vec::new();
    let (text, is_error) = ToolError::Interrupted.render_refusal();
    let close = |out: &mut Vec<Message>, open: &mut Vec<ToolCall>| {
        for call in open.drain(..) {
            let ts = out.last().map(|m| m.timestamp).unwrap_or_default();
            out.push(Message::tool_result(&call, &text, is_error, ts));
        }
    };
    for m in messages {
        match m.role {
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let Some(pos) = open.iter().position(|c| c.id == id) else {
                    // A result for no known call: providers reject it; drop it.
                    continue;
                };
                open.remove(pos);
                out.push(m);
            }
            _ => {
                close(&mut out, &mut open);
                open = m.tool_calls.clone();
                out.push(m);
            }
        }
    }
    close(&mut out, &mut open);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Usage;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.timestamp_opt(1_714_550_400, 0).unwrap() // 2024-05-01T08:00:00Z
    }

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("the {name} tool"),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    fn config() -> CoreConfig {
        CoreConfig {
            max_iterations: DEFAULT_MAX_ITERATIONS,
            max_tokens: 256,
            tools: [
                "read_file",
                "write_file",
                "edit_file",
                "exec",
                "memory_search",
            ]
            .into_iter()
            .map(spec)
            .collect(),
            compaction: CompactionPolicy::new(100_000, 256),
            utc_offset: FixedOffset::east_opt(0).unwrap(),
            memory_max_bytes: crate::consolidate::DEFAULT_MAX_BYTES,
        }
    }

    fn agent(config: CoreConfig) -> Agent {
        Agent::new(config, "SYSTEM".into(), History::default())
    }

    /// An agent (default config) in a turn: asked `input`, waiting for the model.
    fn asked(input: &str) -> Agent {
        let mut a = agent(config());
        a.handle(Event::UserInput(input.into()), now());
        a
    }

    /// An agent asked "x" whose model called `calls`: waiting for their results.
    fn calling(calls: Vec<ToolCall>) -> Agent {
        let mut a = asked("x");
        a.handle(tools(calls), now());
        a
    }

    fn call(id: &str, name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args.into(),
        }
    }

    fn text(t: &str) -> Event {
        Event::ModelResponse(ChatResponse {
            text: t.into(),
            usage: Usage {
                input_tokens: 5,
                output_tokens: 2,
            },
            ..Default::default()
        })
    }

    fn tools(calls: Vec<ToolCall>) -> Event {
        Event::ModelResponse(ChatResponse {
            tool_calls: calls,
            ..Default::default()
        })
    }

    fn result(id: &str, content: &str) -> Event {
        Event::ToolResult {
            call_id: id.into(),
            content: content.into(),
            is_error: false,
        }
    }

    /// What `pick` takes from each effect, in order.
    fn effects<T>(fx: &[Effect], pick: impl Fn(&Effect) -> Option<T>) -> Vec<T> {
        fx.iter().filter_map(pick).collect()
    }

    fn model_calls(fx: &[Effect]) -> Vec<(Purpose, ChatRequest)> {
        effects(fx, |e| match e {
            Effect::CallModel { purpose, request } => Some((*purpose, request.clone())),
            _ => None,
        })
    }

    /// The payloads of `fx`'s effects of one tuple variant, cloned, in order.
    macro_rules! payloads {
        ($fx:expr, $variant:path) => {
            effects($fx, |e| match e {
                $variant(x) => Some(x.clone()),
                _ => None,
            })
        };
    }

    fn runs(fx: &[Effect]) -> Vec<ToolCall> {
        payloads!(fx, Effect::RunTool)
    }

    /// The driver's side of [`Effect::MergeMemoryFile`]: merge onto `current`
    /// (MEMORY.md as it is when written); the new text, and the event.
    fn merge_into(current: &str, fx: &[Effect]) -> (String, Event) {
        let (facts, day, max) = fx
            .iter()
            .find_map(|e| match e {
                Effect::MergeMemoryFile {
                    facts,
                    day,
                    max_bytes,
                } => Some((facts.clone(), *day, *max_bytes)),
                _ => None,
            })
            .expect("a MergeMemoryFile effect");
        let mut m = consolidate::merge_on(current, &facts, max, Some(day));
        let text = std::mem::take(&mut m.text);
        (text, Event::MemoryMerged(Ok(m)))
    }

    fn end(fx: &[Effect]) -> Option<TurnEnd> {
        fx.iter().find_map(|e| match e {
            Effect::EndTurn(t) => Some(t.clone()),
            _ => None,
        })
    }

    fn hooks(fx: &[Effect]) -> Vec<HookEvent> {
        payloads!(fx, Effect::Hook)
    }

    #[test]
    fn after_tool_call_and_agent_end_are_hook_effects() {
        let mut a = calling(vec![call("c1", "exec", r#"{"command":"ls"}"#)]);
        let fx = a.handle(result("c1", "a.txt"), now());
        assert_eq!(
            hooks(&fx),
            vec![HookEvent::AfterToolCall {
                tool: "exec".into(),
                arguments: r#"{"command":"ls"}"#.into(),
                result: "a.txt".into(),
                is_error: false,
            }]
        );
        let fx = a.handle(text("done"), now());
        assert_eq!(
            hooks(&fx),
            vec![HookEvent::AgentEnd {
                end: "answered".into(),
                text: "done".into()
            }]
        );
        // The hook comes before the end, so the driver runs it inside the turn.
        let h = fx.iter().position(|e| matches!(e, Effect::Hook(_)));
        let e = fx.iter().position(|e| matches!(e, Effect::EndTurn(_)));
        assert!(h < e);
    }

    #[test]
    fn a_cancelled_turn_still_raises_agent_end() {
        let mut a = asked("x");
        let fx = a.handle(Event::Cancel, now());
        assert_eq!(
            hooks(&fx),
            vec![HookEvent::AgentEnd {
                end: "cancelled".into(),
                text: String::new()
            }]
        );
    }

    fn persisted(fx: &[Effect]) -> Vec<Record> {
        payloads!(fx, Effect::Persist)
    }

    #[test]
    fn plain_answer() {
        let mut a = agent(config());
        let fx = a.handle(Event::UserInput("hi".into()), now());
        let calls = model_calls(&fx);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, Purpose::Answer);
        assert_eq!(calls[0].1.system, "SYSTEM");
        assert_eq!(calls[0].1.messages.len(), 1);
        assert_eq!(calls[0].1.tools.len(), 5);
        assert_eq!(
            persisted(&fx).len(),
            1,
            "the user message is persisted first"
        );
        let fx = a.handle(text("hello!"), now());
        assert_eq!(end(&fx), Some(TurnEnd::Answered("hello!".into())));
        assert_eq!(persisted(&fx).len(), 1);
        assert!(!a.is_busy());
        assert_eq!(a.history().len(), 2);
        assert_eq!(a.history()[1].usage.unwrap().input_tokens, 5);
    }

    #[test]
    fn tool_call_result_then_answer() {
        let mut a = asked("read it");
        let fx = a.handle(
            tools(vec![call("c1", "read_file", r#"{"path":"MEMORY.md"}"#)]),
            now(),
        );
        assert_eq!(
            runs(&fx),
            vec![call("c1", "read_file", r#"{"path":"MEMORY.md"}"#)]
        );
        assert!(model_calls(&fx).is_empty());
        let fx = a.handle(result("c1", "the memory"), now());
        let calls = model_calls(&fx);
        assert_eq!(calls.len(), 1);
        let msgs = &calls[0].1.messages;
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[2].role, Role::Tool);
        assert_eq!(msgs[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(msgs[2].content, "the memory");
        let fx = a.handle(text("it says: the memory"), now());
        assert!(matches!(end(&fx), Some(TurnEnd::Answered(_))));
        let roles: Vec<Role> = a.history().iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::User, Role::Assistant, Role::Tool, Role::Assistant]
        );
    }

    #[test]
    fn parallel_calls_wait_for_all_results() {
        let mut a = asked("x");
        let fx = a.handle(
            tools(vec![call("a", "read_file", "{}"), call("b", "exec", "{}")]),
            now(),
        );
        assert_eq!(runs(&fx).len(), 2);
        let fx = a.handle(result("b", "B"), now());
        assert!(model_calls(&fx).is_empty(), "still waiting for a");
        // A stale or unknown id is ignored.
        assert!(a.handle(result("zzz", "?"), now()).is_empty());
        let fx = a.handle(result("a", "A"), now());
        assert_eq!(model_calls(&fx).len(), 1);
    }

    #[test]
    fn tool_error_goes_back_to_the_model() {
        let mut a = calling(vec![call("c1", "read_file", r#"{"path":"nope"}"#)]);
        let fx = a.handle(
            Event::ToolResult {
                call_id: "c1".into(),
                content: "error: no such file".into(),
                is_error: true,
            },
            now(),
        );
        let calls = model_calls(&fx);
        let last = calls[0].1.messages.last().unwrap().clone();
        assert!(last.is_error);
        assert_eq!(last.content, "error: no such file");
        assert!(end(&fx).is_none(), "the loop goes on");
    }

    #[test]
    fn unknown_tools_never_run_and_arguments_are_left_to_the_tools_layer() {
        let mut a = asked("x");
        let fx = a.handle(
            tools(vec![
                call("bad", "read_file", r#"{"path": "a"#),
                call("ghost", "rm_everything", "{}"),
                call("ok", "read_file", ""),
            ]),
            now(),
        );
        // The core does not parse arguments: both calls of an offered tool go to
        // the driver, whose tools layer parses them (and refuses the broken one).
        assert_eq!(
            runs(&fx),
            vec![
                call("bad", "read_file", r#"{"path": "a"#),
                call("ok", "read_file", "")
            ]
        );
        assert!(model_calls(&fx).is_empty());
        let (refusal, _) = ToolError::InvalidJson {
            tool: "read_file".into(),
            message: "EOF".into(),
        }
        .render_refusal();
        a.handle(
            Event::ToolResult {
                call_id: "bad".into(),
                content: refusal,
                is_error: true,
            },
            now(),
        );
        let fx = a.handle(result("ok", "fine"), now());
        let req = &model_calls(&fx)[0].1;
        let results: Vec<&Message> = req
            .messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .collect();
        assert_eq!(results.len(), 3);
        let by_id = |id: &str| {
            results
                .iter()
                .find(|m| m.tool_call_id.as_deref() == Some(id))
                .unwrap()
        };
        assert!(by_id("bad").is_error && by_id("bad").content.contains("not valid JSON"));
        let ghost = by_id("ghost");
        assert!(ghost.is_error);
        assert!(
            ghost
                .content
                .starts_with("Error: unknown tool `rm_everything`"),
            "rendered by the tools layer: {}",
            ghost.content
        );
        assert!(ghost.content.contains("read_file"));
        assert!(!by_id("ok").is_error);
    }

    #[test]
    fn all_calls_unknown_calls_the_model_right_away() {
        let mut a = asked("x");
        let fx = a.handle(tools(vec![call("bad", "nope", "{oops")]), now());
        assert!(runs(&fx).is_empty());
        assert_eq!(model_calls(&fx).len(), 1);
    }

    #[test]
    fn max_iterations_says_so_plainly() {
        let mut cfg = config();
        cfg.max_iterations = 3;
        let mut a = agent(cfg);
        let mut fx = a.handle(Event::UserInput("loop".into()), now());
        let mut model_calls_seen = model_calls(&fx).len();
        for i in 0..3 {
            a.handle(
                tools(vec![call(
                    &format!("c{i}"),
                    "read_file",
                    &format!(r#"{{"i":{i}}}"#),
                )]),
                now(),
            );
            fx = a.handle(result(&format!("c{i}"), &format!("r{i}")), now());
            model_calls_seen += model_calls(&fx).len();
        }
        assert_eq!(model_calls_seen, 3);
        match end(&fx) {
            Some(TurnEnd::MaxIterations(t)) => {
                assert!(t.contains("max_iterations = 3"), "{t}");
            }
            other => panic!("{other:?}"),
        }
        let last = a.history().last().unwrap();
        assert_eq!(last.role, Role::Assistant);
        assert!(last.content.contains("stopped"));
        assert!(!a.is_busy());
    }

    #[test]
    fn cancel_while_tools_run_closes_every_call() {
        let mut a = calling(vec![
            call("a", "exec", "{}"),
            call("b", "exec", r#"{"x":1}"#),
        ]);
        a.handle(result("a", "done"), now());
        let fx = a.handle(Event::Cancel, now());
        assert_eq!(end(&fx), Some(TurnEnd::Cancelled));
        let recs = persisted(&fx);
        assert_eq!(recs.len(), 1);
        match &recs[0] {
            Record::Message(m) => {
                assert_eq!(m.tool_call_id.as_deref(), Some("b"));
                assert!(m.is_error && m.content.contains("cancelled"));
            }
            r => panic!("{r:?}"),
        }
        // Late results after cancel are ignored; a new turn works.
        assert!(a.handle(result("b", "late"), now()).is_empty());
        let fx = a.handle(Event::UserInput("again".into()), now());
        assert_eq!(model_calls(&fx).len(), 1);
    }

    #[test]
    fn cancel_while_streaming() {
        let mut a = asked("x");
        let fx = a.handle(Event::ModelError(ModelFailure::Cancelled), now());
        assert_eq!(end(&fx), Some(TurnEnd::Cancelled));
        assert!(a.handle(text("too late"), now()).is_empty());
        assert_eq!(a.history().len(), 1);
    }

    #[test]
    fn model_failure_ends_the_turn_with_the_reason() {
        let mut a = asked("x");
        let fx = a.handle(
            Event::ModelError(ModelFailure::Other(ProviderError::NoProfiles)),
            now(),
        );
        assert_eq!(
            end(&fx),
            Some(TurnEnd::Failed("no LLM profiles configured".into()))
        );
        assert!(!a.is_busy());
    }

    #[test]
    fn side_effect_calls_go_to_the_driver_and_a_refusal_is_a_result() {
        let mut a = asked("x");
        let fx = a.handle(
            tools(vec![
                call("e1", "exec", r#"{"command":"rm x"}"#),
                call("r1", "read_file", "{}"),
            ]),
            now(),
        );
        assert_eq!(runs(&fx).len(), 2, "the policy lives in the tools layer");
        assert!(!a.housekeeping());
        let (text, is_error) = ToolError::Declined {
            tool: "exec".into(),
        }
        .render_refusal();
        a.handle(
            Event::ToolResult {
                call_id: "e1".into(),
                content: text,
                is_error,
            },
            now(),
        );
        let fx = a.handle(result("r1", "text"), now());
        let req = &model_calls(&fx)[0].1;
        let refused = req
            .messages
            .iter()
            .find(|m| m.tool_call_id.as_deref() == Some("e1"))
            .unwrap();
        assert!(refused.is_error);
        assert_eq!(refused.content, "Error: the user declined to run `exec`");
    }

    #[test]
    fn loop_breaker_warns_stops_and_ends_the_turn() {
        let mut a = asked("poll");
        let mut warned_in_result = None;
        let mut stop_in_result = None;
        let mut ended = None;
        for i in 0..40 {
            let id = format!("c{i}");
            a.handle(
                tools(vec![call(&id, "exec", r#"{"command":"cat status"}"#)]),
                now(),
            );
            let fx = a.handle(result(&id, "pending"), now());
            if let Some(e) = end(&fx) {
                ended = Some((i + 1, e));
                break;
            }
            let req = &model_calls(&fx)[0].1;
            let last = &req.messages.last().unwrap().content;
            if last.contains("Warning") && warned_in_result.is_none() {
                warned_in_result = Some(i + 1);
            }
            if last.contains("STOP") && stop_in_result.is_none() {
                stop_in_result = Some(i + 1);
            }
        }
        assert_eq!(warned_in_result, Some(10));
        assert_eq!(stop_in_result, Some(20));
        let (n, e) = ended.unwrap();
        assert_eq!(n, 30);
        assert!(matches!(e, TurnEnd::LoopBroken(_)), "{e:?}");
        assert_eq!(a.history().last().unwrap().role, Role::Assistant);
        // Breaker state is per turn.
        let fx = a.handle(Event::UserInput("again".into()), now());
        assert_eq!(model_calls(&fx).len(), 1);
    }

    #[test]
    fn loop_break_closes_other_calls_of_the_batch() {
        let mut a = asked("poll");
        for i in 0..29 {
            let id = format!("c{i}");
            a.handle(tools(vec![call(&id, "exec", "{}")]), now());
            a.handle(result(&id, "same"), now());
        }
        a.handle(
            tools(vec![
                call("last", "exec", "{}"),
                call("other", "read_file", "{}"),
            ]),
            now(),
        );
        let fx = a.handle(result("last", "same"), now());
        assert!(matches!(end(&fx), Some(TurnEnd::LoopBroken(_))));
        let h = a.history();
        assert!(
            h.iter()
                .any(|m| m.tool_call_id.as_deref() == Some("other") && m.is_error)
        );
        assert_eq!(
            repair_history(h.to_vec()),
            h.to_vec(),
            "history is already consistent"
        );
    }

    fn small_window() -> CoreConfig {
        let mut cfg = config();
        cfg.compaction = CompactionPolicy::new(2000, 256);
        cfg
    }

    /// Fill the history with `n` finished turns of ~`size` chars each.
    fn with_history(cfg: CoreConfig, n: usize, size: usize) -> Agent {
        let mut msgs = Vec::new();
        for i in 0..n {
            msgs.push(Message::user(
                format!("question {i}: {}", "q".repeat(size)),
                now(),
            ));
            msgs.push(Message::assistant(
                format!("answer {i}: {}", "a".repeat(size)),
                vec![],
                now(),
            ));
        }
        Agent::new(
            cfg,
            "SYSTEM".into(),
            History {
                summary: None,
                messages: msgs,
                ..History::default()
            },
        )
    }

    /// A consolidation step that finds nothing new: MEMORY.md is read, the
    /// model says NO_REPLY; returns the effects after it.
    fn consolidate_nothing(a: &mut Agent, fx: &[Effect]) -> Vec<Effect> {
        if !fx.contains(&Effect::LoadMemoryFile) {
            return fx.to_vec();
        }
        let fx = a.handle(Event::MemoryFile(Ok(String::new())), now());
        assert_eq!(model_calls(&fx)[0].0, Purpose::Consolidate);
        let fx = a.handle(text("NO_REPLY"), now());
        assert!(
            fx.iter().any(|e| matches!(e, Effect::MarkConsolidated(_))),
            "{fx:?}"
        );
        fx
    }

    #[test]
    fn proactive_compaction_flushes_memory_then_summarises_then_answers() {
        let mut a = with_history(small_window(), 6, 600); // ~6*2*155 tokens > 0.8*2000-256
        let fx = a.handle(Event::UserInput("what now?".into()), now());
        let calls = model_calls(&fx);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, Purpose::MemoryFlush);
        let flush = &calls[0].1;
        let names: Vec<&str> = flush.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["read_file", "write_file", "edit_file"]);
        let instr = &flush.messages.last().unwrap().content;
        assert!(instr.contains("memory/2024-05-01.md"), "{instr}");

        // The model writes a memory file…
        let fx = a.handle(
            tools(vec![call(
                "w1",
                "write_file",
                r#"{"path":"memory/2024-05-01.md","content":"facts"}"#,
            )]),
            now(),
        );
        assert_eq!(runs(&fx).len(), 1);
        assert!(
            a.housekeeping(),
            "the flush batch is claw's own housekeeping"
        );
        // … an exec during the flush is refused (not offered).
        let fx = a.handle(result("w1", "wrote 5 bytes"), now());
        assert!(!a.housekeeping());
        let calls = model_calls(&fx);
        assert_eq!(calls[0].0, Purpose::MemoryFlush);
        let fx = a.handle(text("NO_REPLY"), now());
        // Then the conversation is distilled into MEMORY.md …
        assert_eq!(fx, vec![Effect::LoadMemoryFile]);
        let fx = a.handle(
            Event::MemoryFile(Ok("# Memory\n\n## People\n- Ada runs payments.\n".into())),
            now(),
        );
        let calls = model_calls(&fx);
        assert_eq!(calls[0].0, Purpose::Consolidate);
        assert!(calls[0].1.tools.is_empty());
        let ask = &calls[0].1.messages[0].content;
        assert!(
            ask.contains("Ada runs payments") && ask.contains("question 0"),
            "{ask}"
        );
        let fx = a.handle(
            text("## Decisions\n- We ship on Tuesdays.\n## People\n- Ada runs payments."),
            now(),
        );
        // … merged by the driver into MEMORY.md as it is when written (under
        // its lock): a line another writer added meanwhile is kept.
        assert!(runs(&fx).is_empty());
        assert!(!a.housekeeping());
        let (written, event) = merge_into(
            "# Memory\n\n## People\n- Ada runs payments.\n- Bo joined.\n",
            &fx,
        );
        assert_eq!(
            written,
            "# Memory\n\n## People\n- Ada runs payments.\n- Bo joined.\n\n## Decisions\n- We ship on Tuesdays.\n"
        );
        let fx = a.handle(event, now());
        let mark = fx.iter().find_map(|e| match e {
            Effect::MarkConsolidated(m) => Some(*m),
            _ => None,
        });
        assert_eq!(
            mark.map(|m| m.messages),
            Some(13),
            "12 earlier messages + the question"
        );
        assert!(fx.contains(&Effect::Notice(
            "MEMORY.md: remembered 1 new fact(s), 1 already there".into()
        )));
        let calls = model_calls(&fx);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, Purpose::Summary);
        assert!(calls[0].1.tools.is_empty());
        assert!(calls[0].1.messages[0].content.contains("question "));

        let fx = a.handle(text("SUMMARY OF EARLIER"), now());
        let recs = persisted(&fx);
        let comp = recs
            .iter()
            .find_map(|r| match r {
                Record::Compaction(c) => Some(c.clone()),
                _ => None,
            })
            .expect("a compaction record");
        assert!(comp.memory_flushed);
        assert!(comp.replaced > 0);
        assert!(comp.tokens_after < comp.tokens_before);
        let calls = model_calls(&fx);
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, Purpose::Answer);
        let req = &calls[0].1;
        assert!(req.system.contains("SUMMARY OF EARLIER"));
        assert_eq!(req.messages.last().unwrap().content, "what now?");
        assert!(
            !req.messages.iter().any(|m| m.content.contains("NO_REPLY")),
            "flush turn not in history"
        );
        assert!(
            !req.messages
                .iter()
                .any(|m| m.content.contains("memory flush"))
        );
        let fx = a.handle(text("answer"), now());
        assert!(matches!(end(&fx), Some(TurnEnd::Answered(_))));
        // Replaying the persisted records gives the same live history.
        assert_eq!(a.summary(), Some("SUMMARY OF EARLIER"));
    }

    #[test]
    fn context_overflow_compacts_and_retries() {
        let mut a = with_history(config(), 4, 100); // well under the proactive threshold
        let fx = a.handle(Event::UserInput("q".into()), now());
        assert_eq!(model_calls(&fx)[0].0, Purpose::Answer);
        let fx = a.handle(
            Event::ModelError(ModelFailure::ContextOverflow("too long".into())),
            now(),
        );
        assert_eq!(model_calls(&fx)[0].0, Purpose::MemoryFlush);
        // The flush overflows too: skip to the consolidation, then the summary.
        let fx = a.handle(
            Event::ModelError(ModelFailure::ContextOverflow("too long".into())),
            now(),
        );
        let fx = consolidate_nothing(&mut a, &fx);
        assert_eq!(model_calls(&fx)[0].0, Purpose::Summary);
        let fx = a.handle(text("S"), now());
        let recs = persisted(&fx);
        assert!(
            recs.iter()
                .any(|r| matches!(r, Record::Compaction(c) if !c.memory_flushed))
        );
        let calls = model_calls(&fx);
        assert_eq!(calls[0].0, Purpose::Answer, "the retry");
        let fx = a.handle(text("ok"), now());
        assert_eq!(end(&fx), Some(TurnEnd::Answered("ok".into())));
    }

    #[test]
    fn repeated_overflow_gives_up() {
        let mut a = with_history(config(), 8, 100);
        a.handle(Event::UserInput("q".into()), now());
        let mut last = Vec::new();
        for _ in 0..20 {
            last = a.handle(
                Event::ModelError(ModelFailure::ContextOverflow("no".into())),
                now(),
            );
            if end(&last).is_some() {
                break;
            }
            last = consolidate_nothing(&mut a, &last);
            if model_calls(&last)[0].0 == Purpose::Summary {
                last = a.handle(text("S"), now());
            }
        }
        assert!(matches!(end(&last), Some(TurnEnd::Failed(m)) if m.contains("context window")));
    }

    #[test]
    fn overflow_with_nothing_to_compact_fails_clearly() {
        let mut a = asked("huge");
        let fx = a.handle(
            Event::ModelError(ModelFailure::ContextOverflow("413".into())),
            now(),
        );
        assert!(matches!(end(&fx), Some(TurnEnd::Failed(m)) if m.contains("no older history")));
    }

    #[test]
    fn summary_failure_when_proactive_keeps_history() {
        let mut a = with_history(small_window(), 6, 600);
        let before = a.history().len();
        a.handle(Event::UserInput("q".into()), now());
        let fx = a.handle(text("NO_REPLY"), now());
        consolidate_nothing(&mut a, &fx);
        let fx = a.handle(
            Event::ModelError(ModelFailure::Other(ProviderError::Client("503".into()))),
            now(),
        );
        assert_eq!(model_calls(&fx)[0].0, Purpose::Answer);
        assert_eq!(a.history().len(), before + 1);
        assert!(persisted(&fx).is_empty());
    }

    #[test]
    fn repair_gives_interrupted_calls_a_result() {
        let c = call("x", "exec", "{}");
        let msgs = vec![
            Message::user("u", now()),
            Message::assistant("", vec![c.clone(), call("y", "exec", "{}")], now()),
            Message::tool_result(&c, "ok", false, now()),
            Message::user("u2", now()),
            Message::tool_result(&call("orphan", "exec", "{}"), "?", false, now()),
        ];
        let fixed = repair_history(msgs);
        let roles: Vec<Role> = fixed.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::Tool,
                Role::User
            ]
        );
        assert_eq!(fixed[3].tool_call_id.as_deref(), Some("y"));
        assert!(fixed[3].is_error);
    }

    #[test]
    fn calls_without_ids_get_unique_ones() {
        let mut a = asked("x");
        let fx = a.handle(
            tools(vec![call("", "exec", "{}"), call("", "exec", r#"{"a":1}"#)]),
            now(),
        );
        let ids: Vec<String> = runs(&fx).into_iter().map(|c| c.id).collect();
        assert_eq!(ids.len(), 2);
        assert!(!ids[0].is_empty() && ids[0] != ids[1]);
    }

    #[test]
    fn input_while_busy_is_refused() {
        let mut a = asked("x");
        let fx = a.handle(Event::UserInput("y".into()), now());
        assert!(matches!(&fx[..], [Effect::Notice(_)]));
        assert_eq!(a.history().len(), 1);
    }

    #[test]
    fn remember_consolidates_only_what_is_new_and_ends_the_turn() {
        let mut a = with_history(config(), 2, 20);
        // Nothing running: a consolidation turn starts by reading MEMORY.md.
        let fx = a.handle(Event::Remember, now());
        assert_eq!(fx, vec![Effect::LoadMemoryFile]);
        assert!(a.is_busy());
        let fx = a.handle(Event::MemoryFile(Ok(String::new())), now());
        let ask = &model_calls(&fx)[0].1.messages[0].content;
        assert!(
            ask.contains("question 0") && ask.contains("answer 1"),
            "{ask}"
        );
        let fx = a.handle(text("## Preferences\n- Tea, not coffee."), now());
        let (_, event) = merge_into("", &fx);
        let fx = a.handle(event, now());
        assert_eq!(
            fx.iter()
                .filter_map(|e| match e {
                    Effect::MarkConsolidated(m) => Some(m.messages),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            [4]
        );
        assert_eq!(
            end(&fx),
            Some(TurnEnd::Done("MEMORY.md: remembered 1 new fact(s)".into()))
        );
        assert_eq!(a.history().len(), 4, "no compaction, nothing added");
        assert_eq!(a.unconsolidated(), 0);
        // Again with nothing new: no model call at all.
        let fx = a.handle(Event::Remember, now());
        assert!(model_calls(&fx).is_empty());
        assert_eq!(
            end(&fx),
            Some(TurnEnd::Done("nothing new to remember".into()))
        );
        // A failed write is said, and not marked (the next consolidation retries).
        a.handle(Event::UserInput("I moved to Lisbon".into()), now());
        a.handle(text("noted"), now());
        assert_eq!(a.unconsolidated(), 2);
        a.handle(Event::Remember, now());
        let fx = a.handle(Event::MemoryFile(Ok("# Memory\n".into())), now());
        let ask = &model_calls(&fx)[0].1.messages[0].content;
        assert!(
            ask.contains("Lisbon") && !ask.contains("question 0"),
            "{ask}"
        );
        let fx = a.handle(text("## People\n- The user lives in Lisbon."), now());
        // Another writer put the same fact there meanwhile: nothing to write,
        // and the conversation counts as consolidated.
        let (_, event) = merge_into("# Memory\n\n## People\n- The user lives in Lisbon.\n", &fx);
        let fx = a.handle(event, now());
        assert_eq!(
            end(&fx),
            Some(TurnEnd::Done("nothing new to remember".into()))
        );
        assert_eq!(a.unconsolidated(), 0);
        a.handle(Event::UserInput("I moved to Porto".into()), now());
        a.handle(text("noted"), now());
        a.handle(Event::Remember, now());
        a.handle(Event::MemoryFile(Ok("# Memory\n".into())), now());
        let fx = a.handle(text("## People\n- The user lives in Porto."), now());
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::MergeMemoryFile { .. }))
        );
        let fx = a.handle(
            Event::MemoryMerged(Err("another claw process holds MEMORY.md".into())),
            now(),
        );
        assert!(!fx.iter().any(|e| matches!(e, Effect::MarkConsolidated(_))));
        assert_eq!(
            end(&fx),
            Some(TurnEnd::Done(
                "MEMORY.md not updated: another claw process holds MEMORY.md".into()
            ))
        );
        assert_eq!(a.unconsolidated(), 2);
    }

    #[test]
    fn compact_now_flushes_consolidates_summarises_and_ends() {
        let mut a = with_history(config(), 3, 20);
        let fx = a.handle(Event::CompactNow, now());
        assert_eq!(model_calls(&fx)[0].0, Purpose::MemoryFlush);
        assert!(matches!(
            &hooks(&fx)[..],
            [HookEvent::BeforeCompaction { reason, tokens_before }]
                if reason == "manual" && *tokens_before > 0
        ));
        let fx = a.handle(text("NO_REPLY"), now());
        let fx = consolidate_nothing(&mut a, &fx);
        assert_eq!(model_calls(&fx)[0].0, Purpose::Summary);
        let fx = a.handle(text("S"), now());
        assert!(
            matches!(end(&fx), Some(TurnEnd::Done(m)) if m.starts_with("compacted 5 messages"))
        );
        assert!(model_calls(&fx).is_empty(), "no answer call after /compact");
        assert_eq!(a.history().len(), 1, "only the latest message is kept");
        // Nothing left to compact.
        let fx = a.handle(Event::CompactNow, now());
        assert_eq!(
            end(&fx),
            Some(TurnEnd::Done("nothing to compact yet".into()))
        );
        // Commands wait for a running turn.
        a.handle(Event::UserInput("x".into()), now());
        let fx = a.handle(Event::Remember, now());
        assert!(matches!(&fx[..], [Effect::Notice(_)]));
    }
}
