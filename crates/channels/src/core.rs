//! What every channel shares: the persisted state (poll position, seen event
//! ids, refused senders, reachable chats), the allow-list check with its one-time
//! refusal, de-duplication of redelivered events, one queue (and one session,
//! `<channel>:<chat id>`) per chat, typing indicators while a turn runs, and long
//! answers split at the network's limit on paragraph or line boundaries; a
//! turn's approval question waits for the chat's `yes`/`always`/`no`, which is
//! taken out of the stream of messages (not queued behind the waiting turn).
//!
//! The state is written only when it changed, off the async runtime: a small
//! writer task coalesces the changes of a burst (a batch of updates, a refused
//! sender writing a hundred messages) into one atomic write (temp file + rename,
//! mode 0600) on a blocking thread. An accepted message is written at once (its
//! event id is on disk before its turn runs); [`Core::flush`] waits for the
//! writer (the poll loops flush when they stop) and a change still unwritten
//! when the core is dropped is written then. Nothing grows without bound: seen event ids keep the last
//! [`SEEN_CAPACITY`], refused senders the last [`REFUSED_CAPACITY`] (a sender
//! dropped from that list is told once more that it is not allowed, should it
//! write again), and a chat's queue ends after [`CHAT_IDLE`] without messages.

use crate::{ApprovalQuestion, ChannelError, ChatAsker, ChatDecision, ChatTurn, Log, TurnRunner};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How many delivered event ids are remembered per channel.
pub const SEEN_CAPACITY: usize = 2000;

/// How many refused senders are remembered per channel (oldest dropped first).
pub const REFUSED_CAPACITY: usize = 1000;

/// A chat's queue (and its worker task) ends after this long without a message.
pub const CHAT_IDLE: Duration = Duration::from_secs(300);

/// Changes within this window after the first are written together.
pub const WRITE_COALESCE: Duration = Duration::from_millis(200);

/// The network side of a channel: sending one message part, typing.
pub trait Transport: Send + Sync + 'static {
    /// `matrix`, `telegram`.
    fn name(&self) -> &'static str;
    /// Send one part (at most [`Transport::limit`] long).
    fn send<'a>(&'a self, chat: &'a str, text: &'a str) -> BoxFuture<'a, Result<(), ChannelError>>;
    /// Show (or stop showing) the typing indicator.
    fn typing<'a>(&'a self, chat: &'a str, on: bool) -> BoxFuture<'a, Result<(), ChannelError>>;
    /// The longest message the network takes, measured by [`Transport::measure`].
    fn limit(&self) -> usize;
    /// Length of a text as the network counts it (characters by default).
    fn measure(&self, text: &str) -> usize {
        text.chars().count()
    }
    /// How often the typing indicator is renewed while a turn runs.
    fn typing_refresh(&self) -> Duration;
}

/// What a channel remembers across restarts (`<state>/channels/<name>.json`).
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChannelState {
    /// Matrix `since` token / Telegram offset (as text).
    #[serde(default)]
    pub position: Option<String>,
    /// Event ids already accepted, oldest first.
    #[serde(default)]
    pub seen: VecDeque<String>,
    /// Senders already told they are not allowed.
    #[serde(default)]
    pub refused: Vec<String>,
    /// Chats an allowed sender wrote in (or invited the bot to): the `message`
    /// tool may send there.
    #[serde(default)]
    pub chats: Vec<String>,
}

impl ChannelState {
    pub fn path(state_dir: &Path, name: &str) -> PathBuf {
        state_dir.join("channels").join(format!("{name}.json"))
    }

    /// The saved state; a missing file is the empty state, a damaged one an error.
    pub fn load(path: &Path) -> Result<ChannelState, ChannelError> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| ChannelError::State {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ChannelState::default()),
            Err(e) => Err(ChannelError::State {
                path: path.to_path_buf(),
                message: e.to_string(),
            }),
        }
    }

    /// Write atomically (temp file + rename), mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), ChannelError> {
        let err = |e: std::io::Error| ChannelError::State {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ChannelError::State {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        claw_base::fs::write_atomic(path, &bytes, claw_base::fs::Durability::Durable).map_err(err)
    }

    /// Remember `sender` as refused; false when it already was. Keeps the last
    /// [`REFUSED_CAPACITY`].
    pub fn refuse(&mut self, sender: &str) -> bool {
        if self.refused.iter().any(|r| r == sender) {
            return false;
        }
        self.refused.push(sender.to_string());
        if self.refused.len() > REFUSED_CAPACITY {
            let excess = self.refused.len() - REFUSED_CAPACITY;
            self.refused.drain(..excess);
        }
        true
    }
}

/// One chat message from the network.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Network-unique id (Matrix event id, Telegram `update_id`).
    pub event_id: String,
    pub chat: String,
    pub sender: String,
    /// Other names of the sender an allow-list may use (a Telegram `@username`).
    pub aliases: Vec<String>,
    pub text: String,
}

/// What [`Core::accept`] did with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accepted {
    /// Queued for a turn.
    Queued,
    /// Seen before (a redelivery): ignored.
    Duplicate,
    /// The sender is not allowed; `replied` is true the first time.
    Refused { replied: bool },
}

/// True when `sender` is on the list (`*` allows everybody; empty allows nobody).
pub fn is_allowed(allow_from: &[String], sender: &str) -> bool {
    allow_from.iter().any(|a| a == "*" || a == sender)
}

/// The state and its writer's bookkeeping, shared by the core and the writer task.
struct Persisted {
    state: Mutex<ChannelState>,
    path: PathBuf,
    /// Changes made so far (each `persist` counts one).
    changes: AtomicU64,
    /// The change count the file reflects.
    written: watch::Sender<u64>,
    /// Files written (for tests and the log).
    writes: AtomicU64,
    log: Log,
}

impl Persisted {
    fn snapshot(&self) -> (u64, ChannelState) {
        let g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (self.changes.load(Ordering::SeqCst), g.clone())
    }

    fn dirty(&self) -> bool {
        self.changes.load(Ordering::SeqCst) != *self.written.borrow()
    }

    fn record(&self, upto: u64, r: Result<(), ChannelError>) {
        match r {
            Ok(()) => {
                self.writes.fetch_add(1, Ordering::SeqCst);
                self.written.send_if_modified(|w| {
                    let newer = upto > *w;
                    if newer {
                        *w = upto;
                    }
                    newer
                });
            }
            Err(e) => (self.log)(format!("channel state not saved: {e}")),
        }
    }

    /// Write the current state on a blocking thread (nothing when unchanged).
    async fn write(self: &Arc<Self>) {
        if !self.dirty() {
            return;
        }
        let (upto, snapshot) = self.snapshot();
        let me = self.clone();
        let r = tokio::task::spawn_blocking(move || snapshot.save(&me.path)).await;
        match r {
            Ok(r) => self.record(upto, r),
            Err(e) => (self.log)(format!("channel state not saved: {e}")),
        }
    }
}

impl Drop for Persisted {
    /// A change the writer did not get to (the runtime shut down first) is
    /// written here, once, at the very end.
    fn drop(&mut self) {
        if self.dirty() {
            let (upto, snapshot) = self.snapshot();
            let r = snapshot.save(&self.path);
            self.record(upto, r);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    Changed,
    Flush,
}

/// The writer task: waits for a change, lets the burst settle for
/// [`WRITE_COALESCE`] (or less when a flush is asked for), writes once.
async fn state_writer(p: Arc<Persisted>, mut rx: mpsc::UnboundedReceiver<Wake>) {
    while let Some(first) = rx.recv().await {
        if first == Wake::Changed {
            let settle = tokio::time::sleep(WRITE_COALESCE);
            tokio::pin!(settle);
            loop {
                tokio::select! {
                    _ = &mut settle => break,
                    w = rx.recv() => match w {
                        Some(Wake::Changed) => {}
                        Some(Wake::Flush) | None => break,
                    },
                }
            }
        }
        while rx.try_recv().is_ok() {}
        p.write().await;
    }
    // The core is gone: write what is left.
    p.write().await;
}

/// One chat's queue: its sender and the id of the worker reading it.
struct ChatQueue {
    tx: mpsc::UnboundedSender<Incoming>,
    worker: u64,
}

/// The shared half of a channel (see the module doc).
pub struct Core {
    pub transport: Arc<dyn Transport>,
    allow_from: Vec<String>,
    persisted: Arc<Persisted>,
    /// Wakes the writer task (None outside a runtime: writes happen inline).
    wake: Option<mpsc::UnboundedSender<Wake>>,
    runner: Arc<dyn TurnRunner>,
    pub log: Log,
    queues: Mutex<HashMap<String, ChatQueue>>,
    next_worker: AtomicU64,
    chat_idle: Duration,
    /// Approval questions waiting for their chat's reply: chat → (question
    /// number, where the answer goes).
    questions: Mutex<HashMap<String, (u64, tokio::sync::oneshot::Sender<ChatDecision>)>>,
    next_question: AtomicU64,
}

impl Core {
    /// The core of the channel over `transport`, its state kept in `state_dir`;
    /// a chat's queue ends after `chat_idle` without messages ([`CHAT_IDLE`]).
    pub fn new(
        transport: Arc<dyn Transport>,
        allow_from: Vec<String>,
        state_dir: &Path,
        runner: Arc<dyn TurnRunner>,
        log: Log,
        chat_idle: Duration,
    ) -> Result<Arc<Core>, ChannelError> {
        let state_path = ChannelState::path(state_dir, transport.name());
        let state = ChannelState::load(&state_path)?;
        let persisted = Arc::new(Persisted {
            state: Mutex::new(state),
            path: state_path,
            changes: AtomicU64::new(0),
            written: watch::channel(0).0,
            writes: AtomicU64::new(0),
            log: log.clone(),
        });
        let wake = tokio::runtime::Handle::try_current().ok().map(|rt| {
            let (tx, rx) = mpsc::unbounded_channel();
            rt.spawn(state_writer(persisted.clone(), rx));
            tx
        });
        Ok(Arc::new(Core {
            transport,
            allow_from,
            persisted,
            wake,
            runner,
            log,
            queues: Mutex::new(HashMap::new()),
            next_worker: AtomicU64::new(0),
            chat_idle,
            questions: Mutex::new(HashMap::new()),
            next_question: AtomicU64::new(0),
        }))
    }

    pub fn name(&self) -> &'static str {
        self.transport.name()
    }

    pub fn is_allowed(&self, sender: &str) -> bool {
        is_allowed(&self.allow_from, sender)
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut ChannelState) -> T) -> T {
        let mut g = self
            .persisted
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// Note a change of the state: the writer task saves it soon (coalescing a
    /// burst of changes into one write).
    fn persist(&self) {
        self.persist_as(Wake::Changed)
    }

    /// Note a change and have it written now (still off the runtime, without
    /// waiting): an accepted message's event id is on disk before its turn runs,
    /// so a crash during the turn does not answer it twice after a restart.
    fn persist_now(&self) {
        self.persist_as(Wake::Flush)
    }

    fn persist_as(&self, wake: Wake) {
        self.persisted.changes.fetch_add(1, Ordering::SeqCst);
        match &self.wake {
            Some(tx) if tx.send(wake).is_ok() => {}
            _ => {
                let (upto, snapshot) = self.persisted.snapshot();
                let r = snapshot.save(&self.persisted.path);
                self.persisted.record(upto, r);
            }
        }
    }

    /// Wait until every change so far is on disk (or its write failed and was logged).
    pub async fn flush(&self) {
        let target = self.persisted.changes.load(Ordering::SeqCst);
        let mut written = self.persisted.written.subscribe();
        let Some(tx) = &self.wake else { return };
        if *written.borrow() >= target {
            return;
        }
        if tx.send(Wake::Flush).is_err() {
            return;
        }
        // A failed write is logged and not retried until the next change: give up
        // waiting after a while rather than hang a shutdown.
        let _ =
            tokio::time::timeout(Duration::from_secs(10), written.wait_for(|w| *w >= target)).await;
    }

    /// How many times the state file was written (for tests).
    pub fn state_writes(&self) -> u64 {
        self.persisted.writes.load(Ordering::SeqCst)
    }

    /// A copy of the state as it is in memory.
    pub fn state(&self) -> ChannelState {
        self.with_state(|s| s.clone())
    }

    /// Chats with a live queue (a worker waiting for or running their turns).
    pub fn queued_chats(&self) -> usize {
        self.queues.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The saved poll position (`since` / offset).
    pub fn position(&self) -> Option<String> {
        self.with_state(|s| s.position.clone())
    }

    /// Remember the poll position (saved soon when it changed).
    pub fn set_position(&self, position: String) {
        let changed = self.with_state(|s| {
            if s.position.as_deref() == Some(position.as_str()) {
                false
            } else {
                s.position = Some(position);
                true
            }
        });
        if changed {
            self.persist();
        }
    }

    /// Record `chat` as reachable by the `message` tool.
    pub fn add_chat(&self, chat: &str) {
        let added = self.with_state(|s| {
            if s.chats.iter().any(|c| c == chat) {
                false
            } else {
                s.chats.push(chat.to_string());
                true
            }
        });
        if added {
            self.persist();
        }
    }

    /// True when the `message` tool may send to `chat`.
    pub fn may_reach(&self, chat: &str) -> bool {
        self.with_state(|s| s.chats.iter().any(|c| c == chat))
    }

    /// De-duplicate, check the sender, and queue the message for its chat's
    /// worker (one turn at a time per chat, in arrival order).
    pub async fn accept(self: &Arc<Self>, msg: Incoming) -> Accepted {
        let duplicate = self.with_state(|s| {
            if s.seen.iter().any(|id| id == &msg.event_id) {
                return true;
            }
            s.seen.push_back(msg.event_id.clone());
            while s.seen.len() > SEEN_CAPACITY {
                s.seen.pop_front();
            }
            false
        });
        if !duplicate {
            // The seen list changed (this also covers the refusal and the chat
            // list below: one change, written once with the rest of the burst).
            self.persist();
        }
        if duplicate {
            (self.log)(format!(
                "{}: event {} delivered again; already handled",
                self.name(),
                msg.event_id
            ));
            return Accepted::Duplicate;
        }
        if !self.is_allowed(&msg.sender) && !msg.aliases.iter().any(|a| self.is_allowed(a)) {
            let first = self.with_state(|s| s.refuse(&msg.sender));
            (self.log)(format!(
                "{}: refused a message from {} (not in allow_from)",
                self.name(),
                msg.sender
            ));
            if first {
                let text = format!(
                    "Sorry, I only answer people on my allow list, and {} is not on it. \
                     My owner can add it to channels.{}.allow_from.",
                    msg.sender,
                    self.name()
                );
                if let Err(e) = self.send_text(&msg.chat, &text).await {
                    (self.log)(format!("{}: cannot send the refusal: {e}", self.name()));
                }
            }
            return Accepted::Refused { replied: first };
        }
        self.add_chat(&msg.chat);
        self.persist_now();
        if let Some(decision) = ChatDecision::parse(&msg.text) {
            let waiting = self
                .questions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&msg.chat);
            if let Some((_, tx)) = waiting
                && tx.send(decision).is_ok()
            {
                return Accepted::Queued;
            }
        }
        if msg.text.trim() == STOP_COMMAND {
            // Not queued behind the turn it is meant to stop: straight to the
            // runner (the gateway serves it at once), answer in the chat.
            let core = self.clone();
            let turn = ChatTurn {
                channel: self.name().to_string(),
                session: session_key(self.name(), &msg.chat),
                sender: msg.sender.clone(),
                text: msg.text.clone(),
            };
            let chat = msg.chat.clone();
            tokio::spawn(async move {
                let text = match core.runner.run(turn).await {
                    Ok(answer) => answer,
                    Err(why) => format!("Sorry, I could not stop it: {why}"),
                };
                if !text.trim().is_empty()
                    && let Err(e) = core.send_text(&chat, &text).await
                {
                    (core.log)(format!("{}: cannot answer in {chat}: {e}", core.name()));
                }
            });
            return Accepted::Queued;
        }
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let msg = match queues.get(&msg.chat) {
            Some(q) => match q.tx.send(msg) {
                Ok(()) => return Accepted::Queued,
                // Its worker is gone (it panicked): start a new one below.
                Err(mpsc::error::SendError(m)) => m,
            },
            None => msg,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = self.next_worker.fetch_add(1, Ordering::SeqCst);
        let chat = msg.chat.clone();
        let _ = tx.send(msg);
        tokio::spawn(chat_worker(self.clone(), chat.clone(), worker, rx));
        queues.insert(chat, ChatQueue { tx, worker });
        Accepted::Queued
    }

    /// A chat worker idle for [`CHAT_IDLE`] asks to end: granted (its queue
    /// removed) when nothing is waiting in it. Decided under the queues' lock,
    /// which `accept` holds while queueing, so no message can slip in between.
    fn retire(&self, chat: &str, worker: u64, rx: &mpsc::UnboundedReceiver<Incoming>) -> bool {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        if !rx.is_empty() {
            return false;
        }
        if queues.get(chat).is_some_and(|q| q.worker == worker) {
            queues.remove(chat);
        }
        true
    }

    /// Send `text` to `chat`, split at the network's limit. Returns the parts sent.
    pub async fn send_text(&self, chat: &str, text: &str) -> Result<usize, ChannelError> {
        let t = &self.transport;
        let parts = split_message(text, t.limit(), |s| t.measure(s));
        for p in &parts {
            t.send(chat, p).await?;
        }
        Ok(parts.len())
    }
}

/// Asks one chat: sends the question, waits for the reply [`Core::accept`] takes
/// out of the chat's messages.
struct Questioner {
    core: Arc<Core>,
    chat: String,
}

/// Withdraws a chat's question when its wait ends (answered, timed out, dropped).
struct Withdraw {
    core: Arc<Core>,
    chat: String,
    n: u64,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let mut q = self
            .core
            .questions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if q.get(&self.chat).is_some_and(|(n, _)| *n == self.n) {
            q.remove(&self.chat);
        }
    }
}

impl ChatAsker for Questioner {
    fn ask(&self, q: ApprovalQuestion) -> BoxFuture<'static, Option<ChatDecision>> {
        let core = self.core.clone();
        let chat = self.chat.clone();
        Box::pin(async move {
            let n = core.next_question.fetch_add(1, Ordering::SeqCst);
            let (tx, rx) = tokio::sync::oneshot::channel();
            core.questions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(chat.clone(), (n, tx));
            let _withdraw = Withdraw {
                core: core.clone(),
                chat: chat.clone(),
                n,
            };
            let text = format!(
                "May I run {}? It reaches {}. Reply yes (this once), always ({} in this chat) \
                 or no. No reply within {} s counts as no.",
                q.preview,
                q.reach,
                q.always,
                q.timeout.as_secs()
            );
            if let Err(e) = core.send_text(&chat, &text).await {
                (core.log)(format!("{}: cannot ask in {chat}: {e}", core.name()));
                return None;
            }
            match tokio::time::timeout(q.timeout, rx).await {
                Ok(Ok(d)) => Some(d),
                _ => None,
            }
        })
    }
}

/// A message that stops the chat's running turn and its sub-agents: served
/// beside the chat's queue, never behind it (the gateway's dispatcher answers
/// it at once).
pub const STOP_COMMAND: &str = "/stop";

/// The session key of a chat.
pub fn session_key(channel: &str, chat: &str) -> String {
    format!("{channel}:{chat}")
}

async fn chat_worker(
    core: Arc<Core>,
    chat: String,
    worker: u64,
    mut rx: mpsc::UnboundedReceiver<Incoming>,
) {
    loop {
        let msg = tokio::select! {
            m = rx.recv() => match m {
                Some(m) => m,
                None => return,
            },
            _ = tokio::time::sleep(core.chat_idle) => {
                if core.retire(&chat, worker, &rx) {
                    return;
                }
                continue;
            }
        };
        let started = std::time::Instant::now();
        let turn = ChatTurn {
            channel: core.name().to_string(),
            session: session_key(core.name(), &chat),
            sender: msg.sender.clone(),
            text: msg.text.clone(),
        };
        let asker: Arc<dyn ChatAsker> = Arc::new(Questioner {
            core: core.clone(),
            chat: chat.clone(),
        });
        let run = core.runner.run_asking(turn, asker);
        tokio::pin!(run);
        let refresh = core.transport.typing_refresh();
        let result = loop {
            if let Err(e) = core.transport.typing(&chat, true).await {
                (core.log)(format!("{}: typing indicator: {e}", core.name()));
            }
            tokio::select! {
                r = &mut run => break r,
                _ = tokio::time::sleep(refresh) => {}
            }
        };
        let _ = core.transport.typing(&chat, false).await;
        let text = match result {
            Ok(answer) if answer.trim().is_empty() => continue,
            Ok(answer) => answer,
            Err(why) => format!("Sorry, I could not answer that: {why}"),
        };
        match core.send_text(&chat, &text).await {
            Ok(n) => (core.log)(format!(
                "{}: answered in {chat} ({n} message{}) in {} ms",
                core.name(),
                if n == 1 { "" } else { "s" },
                started.elapsed().as_millis()
            )),
            Err(e) => (core.log)(format!("{}: cannot answer in {chat}: {e}", core.name())),
        }
    }
}

/// Split `text` into parts of at most `limit` (as `measure` counts), cutting
/// at a paragraph break, else a line break, else a space, else anywhere (on a
/// character boundary). Parts are trimmed of the whitespace at the cut.
pub fn split_message(text: &str, limit: usize, measure: impl Fn(&str) -> usize) -> Vec<String> {
    let limit = limit.max(1);
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if measure(rest) <= limit {
            parts.push(rest.to_string());
            break;
        }
        // The longest prefix (in bytes) that fits.
        let mut fit = 0;
        let mut acc = 0;
        for (i, c) in rest.char_indices() {
            let mut buf = [0u8; 4];
            acc += measure(c.encode_utf8(&mut buf));
            if acc > limit {
                break;
            }
            fit = i + c.len_utf8();
        }
        if fit == 0 {
            // One character longer than the limit: send it alone.
            fit = rest
                .chars()
                .next()
                .map(char::len_utf8)
                .unwrap_or(rest.len());
        }
        let window = &rest[..fit];
        let cut = [window.rfind("\n\n"), window.rfind('\n'), window.rfind(' ')]
            .into_iter()
            .flatten()
            .find(|&i| i > 0)
            .unwrap_or(fit);
        let (head, tail) = rest.split_at(cut);
        let head = head.trim_end();
        if head.is_empty() {
            let (h, t) = rest.split_at(fit);
            parts.push(h.to_string());
            rest = t.trim_start();
        } else {
            parts.push(head.to_string());
            rest = tail.trim_start();
        }
    }
    parts
}

/// Exponential backoff for reconnects: 1 s, 2 s, 4 s … capped at `max`.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    base: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(base: Duration, max: Duration) -> Backoff {
        Backoff {
            next: base,
            base,
            max,
        }
    }
    /// The delay before the next attempt (doubling each time).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }
    pub fn reset(&mut self) {
        self.next = self.base;
    }

    /// One poll's result in a poll loop: a success resets the backoff and is
    /// handed on; a failure is logged (`<what> failed (<error>); retrying in N s`)
    /// and waited out, unless `stop` comes first.
    pub async fn settle<T, E: std::fmt::Display>(
        &mut self,
        res: Result<T, E>,
        what: &str,
        log: &Log,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Polled<T> {
        match res {
            Ok(v) => {
                self.reset();
                Polled::Got(v)
            }
            Err(e) => {
                let wait = self.next_delay();
                log(format!(
                    "{what} failed ({e}); retrying in {} s",
                    wait.as_secs()
                ));
                tokio::select! {
                    _ = stop.cancelled() => Polled::Stop,
                    _ = tokio::time::sleep(wait) => Polled::Retry,
                }
            }
        }
    }
}

/// What a poll loop does next ([`Backoff::settle`]).
pub enum Polled<T> {
    /// Handle this answer.
    Got(T),
    /// Poll again (the failure was waited out).
    Retry,
    /// Stop was asked for.
    Stop,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    #[test]
    fn split_prefers_paragraphs_then_lines() {
        let text = format!(
            "{}\n\n{}\n{}",
            "a".repeat(30),
            "b".repeat(20),
            "c".repeat(20)
        );
        let parts = split_message(&text, 45, chars);
        assert_eq!(
            parts,
            vec![
                "a".repeat(30),
                format!("{}\n{}", "b".repeat(20), "c".repeat(20))
            ]
        );
        let parts = split_message(&text, 35, chars);
        assert_eq!(parts, vec!["a".repeat(30), "b".repeat(20), "c".repeat(20)]);
    }

    #[test]
    fn split_hard_cuts_long_words_on_char_boundaries() {
        let text = "é".repeat(25);
        let parts = split_message(&text, 10, chars);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| chars(p) <= 10));
        assert_eq!(parts.concat(), text);
    }

    #[test]
    fn split_keeps_everything_under_the_limit() {
        let text: String = (0..2000).map(|i| format!("word{i} ")).collect();
        let parts = split_message(&text, 4096, chars);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| chars(p) <= 4096));
        let words: usize = parts.iter().map(|p| p.split_whitespace().count()).sum();
        assert_eq!(words, 2000);
    }

    #[test]
    fn allow_list_empty_means_nobody() {
        assert!(!is_allowed(&[], "@me:x"));
        assert!(is_allowed(&["@me:x".into()], "@me:x"));
        assert!(!is_allowed(&["@me:x".into()], "@you:x"));
        assert!(is_allowed(&["*".into()], "@you:x"));
    }

    #[test]
    fn state_round_trips_and_missing_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = ChannelState::path(dir.path(), "telegram");
        assert_eq!(
            ChannelState::load(&p).expect("empty"),
            ChannelState::default()
        );
        let s = ChannelState {
            position: Some("42".into()),
            seen: ["1".to_string()].into(),
            refused: vec!["x".into()],
            chats: vec!["7".into()],
        };
        s.save(&p).expect("save");
        assert_eq!(ChannelState::load(&p).expect("load"), s);
        std::fs::write(&p, "{not json").expect("write");
        assert!(ChannelState::load(&p).is_err());
    }

    /// A network that records what is sent.
    #[derive(Default)]
    struct FakeNet {
        sent: Mutex<Vec<(String, String)>>,
    }

    impl Transport for FakeNet {
        fn name(&self) -> &'static str {
            "fake"
        }
        fn send<'a>(
            &'a self,
            chat: &'a str,
            text: &'a str,
        ) -> BoxFuture<'a, Result<(), ChannelError>> {
            self.sent
                .lock()
                .unwrap()
                .push((chat.to_string(), text.to_string()));
            Box::pin(async { Ok(()) })
        }
        fn typing<'a>(&'a self, _: &'a str, _: bool) -> BoxFuture<'a, Result<(), ChannelError>> {
            Box::pin(async { Ok(()) })
        }
        fn limit(&self) -> usize {
            1000
        }
        fn typing_refresh(&self) -> Duration {
            Duration::from_secs(4)
        }
    }

    /// Answers each turn with "re: <text>".
    struct Echo;
    impl TurnRunner for Echo {
        fn run(&self, turn: ChatTurn) -> BoxFuture<'static, Result<String, String>> {
            Box::pin(async move { Ok(format!("re: {}", turn.text)) })
        }
    }

    fn core(dir: &Path, chat_idle: Duration) -> (Arc<Core>, Arc<FakeNet>) {
        let net = Arc::new(FakeNet::default());
        let core = Core::new(
            net.clone(),
            vec!["owner".into()],
            dir,
            Arc::new(Echo),
            Arc::new(|_: String| {}),
            chat_idle,
        )
        .expect("core");
        (core, net)
    }

    fn msg(id: usize, chat: &str, sender: &str) -> Incoming {
        Incoming {
            event_id: format!("e{id}"),
            chat: chat.into(),
            sender: sender.into(),
            aliases: vec![],
            text: format!("hello {id}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_sender_writing_100_messages_causes_one_state_write() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (core, net) = core(dir.path(), CHAT_IDLE);
        for i in 0..100 {
            let r = core.accept(msg(i, "c1", "stranger")).await;
            assert_eq!(r, Accepted::Refused { replied: i == 0 });
        }
        core.flush().await;
        assert_eq!(core.state_writes(), 1, "one write for the whole burst");
        assert_eq!(net.sent.lock().unwrap().len(), 1, "refused once");
        let path = ChannelState::path(dir.path(), "fake");
        let saved = ChannelState::load(&path).expect("saved");
        assert_eq!(saved.refused, ["stranger"]);
        assert_eq!(saved.seen.len(), 100);
        let mode = std::fs::metadata(&path).expect("meta").permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        // Nothing changed: no write. The same position again: no write either.
        core.flush().await;
        core.set_position("9".into());
        core.flush().await;
        core.set_position("9".into());
        core.flush().await;
        assert_eq!(core.state_writes(), 2);
        // A redelivered event changes nothing.
        assert_eq!(
            core.accept(msg(5, "c1", "stranger")).await,
            Accepted::Duplicate
        );
        core.flush().await;
        assert_eq!(core.state_writes(), 2);
    }

    /// Never answers (a turn still running).
    struct Stuck;
    impl TurnRunner for Stuck {
        fn run(&self, _: ChatTurn) -> BoxFuture<'static, Result<String, String>> {
            Box::pin(std::future::pending())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_accepted_message_is_on_disk_before_its_turn_ends() {
        let dir = tempfile::tempdir().expect("tempdir");
        let core = Core::new(
            Arc::new(FakeNet::default()),
            vec!["owner".into()],
            dir.path(),
            Arc::new(Stuck),
            Arc::new(|_: String| {}),
            CHAT_IDLE,
        )
        .expect("core");
        assert_eq!(core.accept(msg(1, "c", "owner")).await, Accepted::Queued);
        // Well inside the coalescing window: written without waiting for it.
        for _ in 0..10 {
            if core.state_writes() == 1 {
                break;
            }
            tokio::time::sleep(WRITE_COALESCE / 20).await;
        }
        assert_eq!(core.state_writes(), 1);
        let saved = ChannelState::load(&ChannelState::path(dir.path(), "fake")).expect("load");
        assert_eq!(saved.seen, ["e1"]);
        assert_eq!(saved.chats, ["c"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_change_left_unwritten_is_saved_when_the_core_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (core, _net) = core(dir.path(), CHAT_IDLE);
        core.set_position("41".into());
        drop(core);
        // The writer task ends with its final write.
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tokio::task::yield_now().await;
        }
        let saved = ChannelState::load(&ChannelState::path(dir.path(), "fake")).expect("load");
        assert_eq!(saved.position.as_deref(), Some("41"));
    }

    #[test]
    fn the_refused_list_keeps_the_last_thousand() {
        let mut s = ChannelState::default();
        for i in 0..REFUSED_CAPACITY + 5 {
            assert!(s.refuse(&format!("u{i}")));
        }
        assert_eq!(s.refused.len(), REFUSED_CAPACITY);
        assert_eq!(s.refused[0], "u5", "the oldest five were dropped");
        assert!(
            !s.refuse(&format!("u{}", REFUSED_CAPACITY + 4)),
            "still known"
        );
        assert!(
            s.refuse("u0"),
            "a dropped sender is refused (and told) again"
        );
        assert_eq!(s.refused.len(), REFUSED_CAPACITY);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_chat_queues_end_and_a_new_message_starts_another() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (core, net) = core(dir.path(), Duration::from_secs(60));
        for (i, chat) in ["a", "b", "a"].iter().enumerate() {
            assert_eq!(core.accept(msg(i, chat, "owner")).await, Accepted::Queued);
        }
        assert_eq!(core.queued_chats(), 2);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(net.sent.lock().unwrap().len(), 3, "all answered");
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(core.queued_chats(), 0, "idle queues are gone");
        assert_eq!(core.accept(msg(9, "a", "owner")).await, Accepted::Queued);
        assert_eq!(core.queued_chats(), 1);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let sent = net.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 4);
        assert_eq!(sent[3], ("a".to_string(), "re: hello 9".to_string()));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let d: Vec<u64> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 5, 5]);
        b.reset();
        assert_eq!(b.next_delay().as_secs(), 1);
    }
}
