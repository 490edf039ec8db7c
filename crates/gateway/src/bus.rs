//! The message bus: typed messages in (channel, session key, sender, content) on a
//! bounded queue, answers out on a bounded queue, plus the per-message event stream
//! a caller reads while its turn runs (answer text, tool activity, the end). A full
//! inbound queue makes senders wait: a message is never dropped. Counters for
//! `claw gateway status` live in [`BusStats`].

use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::mpsc;

/// One message for the assistant.
#[derive(Debug)]
pub struct Inbound {
    /// Where it came from (`http`, `cli`, `cron`, `heartbeat`, `webchat`…).
    pub channel: String,
    /// The session whose transcript it joins (one turn at a time per session).
    pub session: String,
    /// Who sent it (free-form, for logs).
    pub sender: String,
    /// The user's text.
    pub content: String,
    /// Run side effects without confirmation (the sender said `--yes`).
    pub yes: bool,
    /// The caller answers approval requests (`POST /v1/approvals/{id}`): gated
    /// calls are sent on the reply stream as [`TurnEvent::Approval`]. Without it
    /// they are refused as having no one to ask (cron, the heartbeat).
    pub approvals: bool,
    /// Where the turn's events go (None: fire and forget, the answer still goes
    /// to the outbound queue).
    pub reply: Option<mpsc::UnboundedSender<TurnEvent>>,
    /// When the bus accepted it.
    pub accepted: Instant,
}

impl Inbound {
    /// A message with a reply stream; returns the receiving end too.
    pub fn with_reply(
        channel: &str,
        session: &str,
        sender: &str,
        content: &str,
    ) -> (Inbound, mpsc::UnboundedReceiver<TurnEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Inbound {
                channel: channel.to_string(),
                session: session.to_string(),
                sender: sender.to_string(),
                content: content.to_string(),
                yes: false,
                approvals: false,
                reply: Some(tx),
                accepted: Instant::now(),
            },
            rx,
        )
    }
}

/// Status of one tool call in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    Started,
    Done,
    Error,
}

/// A tool call as it happens.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolActivity {
    pub id: String,
    pub name: String,
    /// The raw JSON arguments the model produced.
    pub arguments: String,
    pub status: ToolStatus,
    /// One line describing the call (`read_file MEMORY.md`), or the first line
    /// of the error.
    pub preview: String,
}

/// A gated call waiting for the caller's decision (`POST /v1/approvals/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalRequest {
    /// The request's id (answer at `/v1/approvals/{id}`).
    pub id: String,
    /// The session that asks (an answer applies to it only).
    pub session: String,
    /// The tool's name.
    pub tool: String,
    /// One line describing the call (`write_file: note.md`).
    pub preview: String,
    /// The call's raw JSON arguments.
    pub arguments: String,
    /// What it reaches: `workspace`, `process`, `network`, `service`,
    /// `host:<host>` or `external`.
    pub reach: String,
    /// What "always" allows for the rest of the session (`every `write_file` call`).
    pub always: String,
    /// Seconds until an unanswered request counts as a denial.
    pub timeout_seconds: u64,
}

/// How an approval request ended: `once`, `always`, `deny` or `timeout`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalResolved {
    pub id: String,
    pub decision: String,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndKind {
    Answered,
    MaxIterations,
    Cancelled,
    LoopBroken,
    Failed,
    /// Never started: the gateway is shutting down.
    Rejected,
}

impl EndKind {
    /// Whether the turn produced what the user asked for.
    pub fn is_success(self) -> bool {
        self == EndKind::Answered
    }
}

/// The end of a turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TurnReport {
    pub end: EndKind,
    /// The answer (or the max-iterations text); empty otherwise.
    pub answer: String,
    /// Why it did not answer.
    pub message: Option<String>,
}

/// What a caller sees while its turn runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// A piece of answer text.
    Text(String),
    /// The answer text so far is complete (a newline in a terminal).
    EndAnswer,
    /// A status line (retries, compaction, refusals).
    Status(String),
    /// Tool activity.
    Tool(ToolActivity),
    /// A gated call waits for the caller's decision.
    Approval(ApprovalRequest),
    /// An approval request was answered or timed out.
    ApprovalResolved(ApprovalResolved),
    /// The turn is over (always the last event).
    Finished(TurnReport),
}

/// An answer leaving the gateway (delivery to channels; cron and the heartbeat
/// use the session/channel it names).
#[derive(Debug, Clone, PartialEq)]
pub struct Outbound {
    pub channel: String,
    pub session: String,
    pub content: String,
    pub end: EndKind,
}

/// Counters shared by the bus, the workers and `/v1/status`.
#[derive(Debug, Default)]
pub struct BusStats {
    /// Messages waiting (bus queue + session queues), not yet started.
    pub queued: AtomicUsize,
    /// Turns running now.
    pub running: AtomicUsize,
    /// Turns finished since start.
    pub finished: AtomicU64,
    /// Messages accepted since start.
    pub accepted: AtomicU64,
    /// Sessions with a live worker.
    pub sessions: AtomicUsize,
}

impl BusStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            queued: self.queued.load(Ordering::SeqCst),
            running: self.running.load(Ordering::SeqCst),
            finished: self.finished.load(Ordering::SeqCst),
            accepted: self.accepted.load(Ordering::SeqCst),
            sessions: self.sessions.load(Ordering::SeqCst),
        }
    }
}

/// A copy of [`BusStats`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StatsSnapshot {
    pub queued: usize,
    pub running: usize,
    pub finished: u64,
    pub accepted: u64,
    pub sessions: usize,
}

/// The bus is closed (the gateway is shutting down).
#[derive(Debug, thiserror::Error)]
#[error("the gateway is shutting down and takes no new messages")]
pub struct Closed;

/// The sending side of the bus, cheap to clone.
#[derive(Debug, Clone)]
pub struct Bus {
    inbound: mpsc::Sender<Inbound>,
    outbound: mpsc::Sender<Outbound>,
    pub stats: Arc<BusStats>,
}

/// The receiving ends, for the workers and the delivery task.
#[derive(Debug)]
pub struct BusReceivers {
    pub inbound: mpsc::Receiver<Inbound>,
    pub outbound: mpsc::Receiver<Outbound>,
}

impl Bus {
    /// A bus whose queues hold `capacity` messages each.
    pub fn new(capacity: usize) -> (Bus, BusReceivers) {
        let (itx, irx) = mpsc::channel(capacity.max(1));
        let (otx, orx) = mpsc::channel(capacity.max(1));
        (
            Bus {
                inbound: itx,
                outbound: otx,
                stats: Arc::new(BusStats::default()),
            },
            BusReceivers {
                inbound: irx,
                outbound: orx,
            },
        )
    }

    /// Queue a message, waiting while the queue is full.
    pub async fn submit(&self, msg: Inbound) -> Result<(), Closed> {
        self.stats.queued.fetch_add(1, Ordering::SeqCst);
        match self.inbound.send(msg).await {
            Ok(()) => {
                self.stats.accepted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            Err(_) => {
                self.stats.queued.fetch_sub(1, Ordering::SeqCst);
                Err(Closed)
            }
        }
    }

    /// The outbound sender (workers push answers here).
    pub fn outbound(&self) -> mpsc::Sender<Outbound> {
        self.outbound.clone()
    }

    /// Messages waiting in the inbound queue itself.
    pub fn inbound_depth(&self) -> usize {
        self.inbound.max_capacity() - self.inbound.capacity()
    }

    /// Answers waiting in the outbound queue.
    pub fn outbound_depth(&self) -> usize {
        self.outbound.max_capacity() - self.outbound.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn full_queue_waits_instead_of_dropping() {
        let (bus, mut rx) = Bus::new(2);
        let mut replies = Vec::new();
        for i in 0..2 {
            let (m, r) = Inbound::with_reply("test", "s", "me", &format!("m{i}"));
            bus.submit(m).await.expect("queued");
            replies.push(r);
        }
        assert_eq!(bus.inbound_depth(), 2);
        let (m, _r) = Inbound::with_reply("test", "s", "me", "m2");
        let b2 = bus.clone();
        let third = tokio::spawn(async move { b2.submit(m).await });
        tokio::task::yield_now().await;
        assert!(!third.is_finished(), "a full queue makes the sender wait");
        let first = rx.inbound.recv().await.expect("first");
        assert_eq!(first.content, "m0");
        third
            .await
            .expect("join")
            .expect("queued after room was made");
        let rest: Vec<String> = [
            rx.inbound.recv().await.expect("m1"),
            rx.inbound.recv().await.expect("m2"),
        ]
        .into_iter()
        .map(|m| m.content)
        .collect();
        assert_eq!(rest, ["m1", "m2"]);
        assert_eq!(bus.stats.snapshot().accepted, 3);
    }

    #[tokio::test]
    async fn closed_bus_refuses() {
        let (bus, rx) = Bus::new(1);
        drop(rx);
        let (m, _r) = Inbound::with_reply("test", "s", "me", "x");
        assert!(bus.submit(m).await.is_err());
        assert_eq!(bus.stats.snapshot().queued, 0);
    }
}
