//! What every channel shares: the persisted state (poll position, seen event
//! ids, refused senders, reachable chats), the allow-list check with its one-time
//! refusal, de-duplication of redelivered events, one queue (and one session,
//! `<channel>:<chat id>`) per chat, typing indicators while a turn runs, and long
//! answers split at the network's limit on paragraph or line boundaries.

use crate::{ChannelError, ChatTurn, Log, TurnRunner};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// How many delivered event ids are remembered per channel.
pub const SEEN_CAPACITY: usize = 2000;

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

    /// Write atomically (temp file + rename).
    pub fn save(&self, path: &Path) -> Result<(), ChannelError> {
        let err = |e: std::io::Error| ChannelError::State {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let tmp = path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| ChannelError::State {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        std::fs::write(&tmp, bytes).map_err(err)?;
        std::fs::rename(&tmp, path).map_err(err)
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

/// The shared half of a channel (see the module doc).
pub struct Core {
    pub transport: Arc<dyn Transport>,
    allow_from: Vec<String>,
    state: Mutex<ChannelState>,
    state_path: PathBuf,
    runner: Arc<dyn TurnRunner>,
    pub log: Log,
    queues: Mutex<HashMap<String, mpsc::UnboundedSender<Incoming>>>,
}

impl Core {
    pub fn new(
        transport: Arc<dyn Transport>,
        allow_from: Vec<String>,
        state_dir: &Path,
        runner: Arc<dyn TurnRunner>,
        log: Log,
    ) -> Result<Arc<Core>, ChannelError> {
        let state_path = ChannelState::path(state_dir, transport.name());
        let state = ChannelState::load(&state_path)?;
        Ok(Arc::new(Core {
            transport,
            allow_from,
            state: Mutex::new(state),
            state_path,
            runner,
            log,
            queues: Mutex::new(HashMap::new()),
        }))
    }

    pub fn name(&self) -> &'static str {
        self.transport.name()
    }

    pub fn is_allowed(&self, sender: &str) -> bool {
        is_allowed(&self.allow_from, sender)
    }

    fn with_state<T>(&self, f: impl FnOnce(&mut ChannelState) -> T) -> T {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    fn persist(&self) {
        let snapshot = self.with_state(|s| s.clone());
        if let Err(e) = snapshot.save(&self.state_path) {
            (self.log)(format!("{}: {e}", self.name()));
        }
    }

    /// The saved poll position (`since` / offset).
    pub fn position(&self) -> Option<String> {
        self.with_state(|s| s.position.clone())
    }

    /// Remember the poll position (persisted at once).
    pub fn set_position(&self, position: String) {
        self.with_state(|s| s.position = Some(position));
        self.persist();
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
        if duplicate {
            (self.log)(format!(
                "{}: event {} delivered again; already handled",
                self.name(),
                msg.event_id
            ));
            return Accepted::Duplicate;
        }
        if !self.is_allowed(&msg.sender) && !msg.aliases.iter().any(|a| self.is_allowed(a)) {
            let first = self.with_state(|s| {
                if s.refused.contains(&msg.sender) {
                    false
                } else {
                    s.refused.push(msg.sender.clone());
                    true
                }
            });
            self.persist();
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
        self.persist();
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
        let tx = queues.entry(msg.chat.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(chat_worker(self.clone(), msg.chat.clone(), rx));
            tx
        });
        if let Err(mpsc::error::SendError(m)) = tx.send(msg) {
            let (tx, rx) = mpsc::unbounded_channel();
            let chat = m.chat.clone();
            let _ = tx.send(m);
            tokio::spawn(chat_worker(self.clone(), chat.clone(), rx));
            queues.insert(chat, tx);
        }
        Accepted::Queued
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

/// A message that stops the chat's running turn and its sub-agents: served
/// beside the chat's queue, never behind it (the gateway's dispatcher answers
/// it at once).
pub const STOP_COMMAND: &str = "/stop";

/// The session key of a chat.
pub fn session_key(channel: &str, chat: &str) -> String {
    format!("{channel}:{chat}")
}

async fn chat_worker(core: Arc<Core>, chat: String, mut rx: mpsc::UnboundedReceiver<Incoming>) {
    while let Some(msg) = rx.recv().await {
        let started = std::time::Instant::now();
        let turn = ChatTurn {
            channel: core.name().to_string(),
            session: session_key(core.name(), &chat),
            sender: msg.sender.clone(),
            text: msg.text.clone(),
        };
        let run = core.runner.run(turn);
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

    #[test]
    fn backoff_doubles_and_caps() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let d: Vec<u64> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 5, 5]);
        b.reset();
        assert_eq!(b.next_delay().as_secs(), 1);
    }
}
