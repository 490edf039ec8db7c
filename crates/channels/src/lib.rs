//! claw's chat channels. A channel adapter long-polls its network (Matrix
//! `/sync`, Telegram `getUpdates`), turns each allowed message into an assistant
//! turn in the chat's session (`<channel>:<chat id>`, through a [`TurnRunner`]
//! the gateway provides over its bus) and sends the answer back, split at the
//! network's limit, with a typing indicator while the turn runs. The shared
//! half (allow-list, de-duplication, persisted poll position, per-chat queues,
//! splitting) is [`core`]; the networks are [`matrix`] and [`telegram`].
//! [`Channels`] starts every configured channel and sends outbound messages
//! (cron and heartbeat deliveries, the `message` tool).
//!
//! Approvals: a turn that needs the user's approval for a tool call asks in the
//! chat ([`ChatAsker`], given to [`TurnRunner::run_asking`]); the allowed user
//! replies `yes`, `always` or `no`, and that reply answers the question instead of
//! queueing behind the waiting turn.
//!
//! Tokens come only from the environment variable the config names; they are
//! never logged.

pub mod config;
pub mod core;
pub mod matrix;
pub mod telegram;

pub use config::{ChannelsSection, ChannelsSettings, MatrixSection, TelegramSection};

use futures_util::future::BoxFuture;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// A log sink (the gateway passes its stderr logger).
pub type Log = Arc<dyn Fn(String) + Send + Sync>;

/// One user message for the assistant.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatTurn {
    /// `matrix`, `telegram`.
    pub channel: String,
    /// `<channel>:<chat id>`.
    pub session: String,
    pub sender: String,
    pub text: String,
}

/// A question a turn asks the chat before a gated tool call runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalQuestion {
    /// One line describing the call (`write_file: note.md`).
    pub preview: String,
    /// What it reaches (`workspace`, `process`, `host:<host>`…).
    pub reach: String,
    /// What "always" allows for the rest of the session.
    pub always: String,
    /// How long the question waits; then it counts as no.
    pub timeout: std::time::Duration,
}

/// The chat's answer to an [`ApprovalQuestion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatDecision {
    Once,
    Always,
    Deny,
}

impl ChatDecision {
    /// A reply that answers a question: `yes`/`y`/`once`/`approve`,
    /// `always`/`a`, `no`/`n`/`deny` (any case, surrounding whitespace and a
    /// final `.` or `!` ignored); anything else is a message.
    pub fn parse(reply: &str) -> Option<ChatDecision> {
        let r = reply
            .trim()
            .trim_end_matches(['.', '!'])
            .to_ascii_lowercase();
        match r.as_str() {
            "yes" | "y" | "once" | "approve" | "ok" => Some(ChatDecision::Once),
            "always" | "a" => Some(ChatDecision::Always),
            "no" | "n" | "deny" => Some(ChatDecision::Deny),
            _ => None,
        }
    }
}

/// Asks the chat a turn runs in.
pub trait ChatAsker: Send + Sync + 'static {
    /// Send `q` to the chat and wait for the reply; None when it could not be
    /// sent or was not answered within `q.timeout` (dropping the future
    /// withdraws the question).
    fn ask(&self, q: ApprovalQuestion) -> BoxFuture<'static, Option<ChatDecision>>;
}

/// Runs a turn and returns its answer (or why there is none).
pub trait TurnRunner: Send + Sync + 'static {
    fn run(&self, turn: ChatTurn) -> BoxFuture<'static, Result<String, String>>;
    /// As [`TurnRunner::run`], asking the chat through `asker` when a tool call
    /// needs approval. The default never asks.
    fn run_asking(
        &self,
        turn: ChatTurn,
        asker: Arc<dyn ChatAsker>,
    ) -> BoxFuture<'static, Result<String, String>> {
        let _ = asker;
        self.run(turn)
    }
}

/// Channel errors.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("channels.{channel}: the environment variable {var} (named by {key}) is not set")]
    MissingToken {
        channel: &'static str,
        key: &'static str,
        var: String,
    },
    #[error("channels.{channel}: {message}")]
    Config {
        channel: &'static str,
        message: String,
    },
    #[error("cannot reach {channel}: {message}")]
    Network {
        channel: &'static str,
        message: String,
    },
    #[error("{channel} refused the request ({status}): {message}")]
    Api {
        channel: &'static str,
        status: u16,
        message: String,
    },
    #[error("channel state {path}: {message}")]
    State { path: PathBuf, message: String },
    #[error("no channel named {0} is configured")]
    UnknownChannel(String),
    #[error("{channel}: chat {chat} is not one I may write to (only chats of allowed senders)")]
    NotAllowed { channel: String, chat: String },
}

/// The running channels.
pub struct Channels {
    cores: BTreeMap<String, Arc<core::Core>>,
    /// The poll loops, awaited by [`Channels::stopped`].
    loops: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channels")
            .field("channels", &self.cores.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Channels {
    /// Start every configured channel (their poll loops run until `stop`).
    pub fn start(
        settings: &ChannelsSettings,
        state_dir: &Path,
        runner: Arc<dyn TurnRunner>,
        log: Log,
        stop: CancellationToken,
    ) -> Result<Channels, ChannelError> {
        let mut cores = BTreeMap::new();
        let mut loops = Vec::new();
        // The channel's core (allow list, state, turns) over `transport`, kept by name.
        let mut core_for =
            |name: &str, transport: Arc<dyn core::Transport>, allow_from: &[String]| {
                let core = core::Core::new(
                    transport,
                    allow_from.to_vec(),
                    state_dir,
                    runner.clone(),
                    log.clone(),
                    core::CHAT_IDLE,
                )?;
                cores.insert(name.to_string(), core.clone());
                Ok::<_, ChannelError>(core)
            };
        if let Some(m) = &settings.matrix {
            let transport = Arc::new(matrix::Matrix::new(m.clone())?);
            let core = core_for("matrix", transport.clone(), &m.allow_from)?;
            loops.push(tokio::spawn(matrix::run(transport, core, stop.clone())));
        }
        if let Some(t) = &settings.telegram {
            let transport = Arc::new(telegram::Telegram::new(t.clone())?);
            let core = core_for("telegram", transport.clone(), &t.allow_from)?;
            loops.push(tokio::spawn(telegram::run(transport, core, stop.clone())));
        }
        for name in cores.keys() {
            log(format!("channel {name} started"));
        }
        Ok(Channels {
            cores,
            loops: std::sync::Mutex::new(loops),
        })
    }

    /// Wait until every poll loop has ended (once the `stop` token given to
    /// [`Channels::start`] is cancelled), each having written its last state
    /// (poll position, handled events) to the state directory: after this, a
    /// new `start` on the same state directory resumes where these left off.
    pub async fn stopped(&self) {
        let loops = std::mem::take(&mut *self.loops.lock().unwrap_or_else(|p| p.into_inner()));
        for l in loops {
            let _ = l.await;
        }
    }

    /// Names of the running channels.
    pub fn names(&self) -> Vec<String> {
        self.cores.keys().cloned().collect()
    }

    /// Deliver `text` to the chat of session `session` when it is a channel
    /// session (`<channel>:<chat>`); `Ok(None)` when it is not one.
    pub async fn deliver(&self, session: &str, text: &str) -> Result<Option<usize>, ChannelError> {
        let Some((name, chat)) = session.split_once(':') else {
            return Ok(None);
        };
        let Some(core) = self.cores.get(name) else {
            return Ok(None);
        };
        core.send_text(chat, text).await.map(Some)
    }

    /// The `message` tool: send to a chat an allowed sender wrote in.
    pub async fn message(
        &self,
        channel: &str,
        chat: &str,
        text: &str,
    ) -> Result<usize, ChannelError> {
        let core = self
            .cores
            .get(channel)
            .ok_or_else(|| ChannelError::UnknownChannel(channel.to_string()))?;
        if !core.may_reach(chat) {
            return Err(ChannelError::NotAllowed {
                channel: channel.to_string(),
                chat: chat.to_string(),
            });
        }
        core.send_text(chat, text).await
    }
}

/// What `claw doctor` learned about one configured channel.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    /// `matrix` or `telegram`.
    pub channel: &'static str,
    /// Reached, and the token was accepted.
    pub ok: bool,
    /// Who the token belongs to, or why the probe failed.
    pub detail: String,
    /// Why it failed, as a class the caller can act on (None: it worked).
    pub problem: Option<ProbeProblem>,
}

/// Why a channel probe failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeProblem {
    /// The server could not be reached.
    Unreachable,
    /// The server refused the token (HTTP 401/403, or Telegram's 404 for a bad token).
    TokenRefused,
    /// The token works, but belongs to another user than the configured `user_id`.
    WrongUser,
    /// Any other refusal or a configuration the client cannot use.
    Other,
}

impl ProbeProblem {
    fn of(e: &ChannelError) -> ProbeProblem {
        match e {
            ChannelError::Network { .. } => ProbeProblem::Unreachable,
            ChannelError::Api {
                status: 401 | 403 | 404,
                ..
            } => ProbeProblem::TokenRefused,
            _ => ProbeProblem::Other,
        }
    }
}

/// One bounded request per configured channel: Matrix `whoami` (the homeserver
/// answers and the token is the configured user's), Telegram `getMe`.
pub async fn probe(settings: &ChannelsSettings, timeout: std::time::Duration) -> Vec<Probe> {
    let mut out = Vec::new();
    if let Some(m) = &settings.matrix {
        let r = match matrix::Matrix::new(m.clone()) {
            Ok(mx) => mx.whoami(timeout).await,
            Err(e) => Err(e),
        };
        out.push(match r {
            Ok(who) if who == m.user_id => Probe {
                channel: "matrix",
                ok: true,
                detail: format!("{} answers; the token is {who}'s", m.homeserver),
                problem: None,
            },
            Ok(who) => Probe {
                channel: "matrix",
                ok: false,
                detail: format!(
                    "the token belongs to {who}, not to the configured user_id {}",
                    m.user_id
                ),
                problem: Some(ProbeProblem::WrongUser),
            },
            Err(e) => Probe {
                channel: "matrix",
                ok: false,
                problem: Some(ProbeProblem::of(&e)),
                detail: e.to_string(),
            },
        });
    }
    if let Some(t) = &settings.telegram {
        let r = match telegram::Telegram::new(t.clone()) {
            Ok(tg) => tg.get_me(timeout).await,
            Err(e) => Err(e),
        };
        out.push(match r {
            Ok(name) => Probe {
                channel: "telegram",
                ok: true,
                detail: format!("the Bot API answers; the token is @{name}'s"),
                problem: None,
            },
            Err(e) => Probe {
                channel: "telegram",
                ok: false,
                problem: Some(ProbeProblem::of(&e)),
                detail: e.to_string(),
            },
        });
    }
    out
}

/// A reqwest client for long polls (no overall timeout; each request sets its own).
pub(crate) fn http_client(channel: &'static str) -> Result<reqwest::Client, ChannelError> {
    claw_base::http::builder(&claw_base::http::HttpOptions {
        connect_timeout: std::time::Duration::from_secs(10),
        timeout: None,
        redirects: claw_base::http::Redirects::Default,
        system_proxy: true,
    })
    .build()
    .map_err(|e| ChannelError::Network {
        channel,
        message: e.to_string(),
    })
}

/// The error of a response that is not a success, with the server's message.
pub(crate) async fn check(
    channel: &'static str,
    resp: Result<reqwest::Response, reqwest::Error>,
) -> Result<serde_json::Value, ChannelError> {
    let resp = resp.map_err(|e| ChannelError::Network {
        channel,
        message: claw_base::http::error_line(e),
    })?;
    let status = resp.status();
    let body: serde_json::Value = resp.json().await.map_err(|e| ChannelError::Network {
        channel,
        message: e.without_url().to_string(),
    })?;
    if !status.is_success() {
        let message = body
            .get("error")
            .or_else(|| body.get("description"))
            .and_then(|v| v.as_str())
            .unwrap_or("no message")
            .to_string();
        return Err(ChannelError::Api {
            channel,
            status: status.as_u16(),
            message,
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_that_answer_an_approval_question() {
        for (reply, d) in [
            ("yes", Some(ChatDecision::Once)),
            (" Y ", Some(ChatDecision::Once)),
            ("ok!", Some(ChatDecision::Once)),
            ("Always.", Some(ChatDecision::Always)),
            ("no", Some(ChatDecision::Deny)),
            ("Deny", Some(ChatDecision::Deny)),
            ("yes please write it", None),
            ("", None),
        ] {
            assert_eq!(ChatDecision::parse(reply), d, "{reply:?}");
        }
    }
}
