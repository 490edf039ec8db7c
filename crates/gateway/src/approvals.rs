//! Approvals as part of the protocol: when a gateway session's turn reaches a
//! call the tool policy gates (a write, a command, a fetch from a new host), the
//! session worker registers an approval here and sends an approval request on the
//! caller's stream ([`crate::bus::TurnEvent::Approval`]); `POST /v1/approvals/{id}`
//! answers it (once, always for this session, deny). An unanswered request is
//! denied after a bounded wait (`gateway.approval_timeout_seconds`).
//!
//! Invariants: ids are random (128 bits from the kernel, hex), each names one
//! waiting call of one session, and an answer reaches only that call; "always" is
//! recorded in that session's driver (its grants), so approvals never cross
//! sessions. A request whose turn ends (cancelled, the caller went away) is
//! removed with it: answering it then is "unknown" (404), never a late grant.

use claw_agent::tools::Answer;
use std::collections::HashMap;
use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;

/// Default seconds an approval request waits for its answer before it is denied.
pub const DEFAULT_APPROVAL_TIMEOUT_SECONDS: u64 = 120;

/// The answer `POST /v1/approvals/{id}` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Run this call.
    Once,
    /// Run it, and what the same grant covers, for the rest of this session.
    Always,
    /// Do not run it (the model is told the user declined).
    Deny,
}

impl Decision {
    /// `once`, `always` or `deny`.
    pub fn parse(s: &str) -> Option<Decision> {
        match s {
            "once" => Some(Decision::Once),
            "always" => Some(Decision::Always),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Once => "once",
            Decision::Always => "always",
            Decision::Deny => "deny",
        }
    }

    fn answer(self) -> Answer {
        match self {
            Decision::Once => Answer::Once,
            Decision::Always => Answer::Always,
            Decision::Deny => Answer::Deny,
        }
    }
}

/// No approval of that id is waiting (never was, answered, timed out, or its
/// turn ended).
#[derive(Debug, thiserror::Error)]
#[error("no approval request `{0}` is waiting (it was answered, timed out, or its turn ended)")]
pub struct UnknownApproval(pub String);

struct Waiting {
    session: String,
    tx: oneshot::Sender<Answer>,
}

/// The approval requests waiting for an answer, shared by the session workers
/// (which ask) and the HTTP API (which answers).
pub struct Approvals {
    waiting: Mutex<HashMap<String, Waiting>>,
    /// How long a request waits before it counts as a denial.
    pub timeout: Duration,
    /// Fallback for ids when the kernel's random source cannot be read.
    counter: AtomicU64,
}

impl Approvals {
    /// A registry whose requests wait at most `timeout` (at least one second).
    pub fn new(timeout: Duration) -> Arc<Approvals> {
        Arc::new(Approvals {
            waiting: Mutex::new(HashMap::new()),
            timeout: timeout.max(Duration::from_secs(1)),
            counter: AtomicU64::new(1),
        })
    }

    fn new_id(&self) -> String {
        let mut bytes = [0u8; 16];
        let random = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .is_ok();
        if random {
            format!("appr-{}", hex::encode(bytes))
        } else {
            let n = self.counter.fetch_add(1, Ordering::SeqCst);
            format!("appr-{}-{n}", std::process::id())
        }
    }

    /// Register a request of `session`; the answer arrives on the returned
    /// [`Pending`] (dropping it withdraws the request).
    pub fn ask(self: &Arc<Self>, session: &str) -> Pending {
        let id = self.new_id();
        let (tx, rx) = oneshot::channel();
        if let Ok(mut w) = self.waiting.lock() {
            w.insert(
                id.clone(),
                Waiting {
                    session: session.to_string(),
                    tx,
                },
            );
        }
        Pending {
            id,
            rx,
            approvals: self.clone(),
        }
    }

    /// Answer request `id`; the session it belonged to.
    pub fn answer(&self, id: &str, decision: Decision) -> Result<String, UnknownApproval> {
        let waiting = self.waiting.lock().ok().and_then(|mut w| w.remove(id));
        // A receiver gone (its turn ended a moment ago) counts as not waiting.
        match waiting.map(|w| (w.session, w.tx.send(decision.answer()))) {
            Some((session, Ok(()))) => Ok(session),
            _ => Err(UnknownApproval(id.to_string())),
        }
    }

    /// Requests waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting.lock().map(|w| w.len()).unwrap_or(0)
    }
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    Answered(Answer),
    /// Nobody answered within the timeout: a denial.
    TimedOut,
}

impl Resolution {
    /// The driver's answer (a timeout denies).
    pub fn answer(self) -> Answer {
        match self {
            Resolution::Answered(a) => a,
            Resolution::TimedOut => Answer::Deny,
        }
    }

    /// `once`, `always`, `deny` or `timeout`, as the stream reports it.
    pub fn label(self) -> &'static str {
        match self {
            Resolution::Answered(Answer::Once) => "once",
            Resolution::Answered(Answer::Always) => "always",
            Resolution::Answered(_) => "deny",
            Resolution::TimedOut => "timeout",
        }
    }
}

/// One registered request; withdrawn when dropped.
pub struct Pending {
    pub id: String,
    rx: oneshot::Receiver<Answer>,
    approvals: Arc<Approvals>,
}

impl Pending {
    /// Wait for the answer, at most the registry's timeout.
    pub async fn wait(mut self) -> Resolution {
        let timeout = self.approvals.timeout;
        match tokio::time::timeout(timeout, &mut self.rx).await {
            Ok(Ok(a)) => Resolution::Answered(a),
            Ok(Err(_)) | Err(_) => Resolution::TimedOut,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Ok(mut w) = self.approvals.waiting.lock() {
            w.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_reaches_its_request_once() {
        let a = Approvals::new(Duration::from_secs(60));
        let p = a.ask("s1");
        let id = p.id.clone();
        assert!(id.starts_with("appr-") && id.len() > 20, "{id}");
        assert_eq!(a.waiting(), 1);
        assert_eq!(a.answer(&id, Decision::Always).expect("waiting"), "s1");
        assert_eq!(p.wait().await, Resolution::Answered(Answer::Always));
        assert!(a.answer(&id, Decision::Once).is_err(), "answered already");
        assert_eq!(a.waiting(), 0);
        assert!(a.answer("appr-nope", Decision::Deny).is_err());
    }

    /// The bounded wait, on a paused clock: no answer within the timeout is a
    /// denial, and the request is gone (a late answer is unknown).
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_request_times_out_as_a_denial() {
        let a = Approvals::new(Duration::from_secs(30));
        let p = a.ask("s1");
        let id = p.id.clone();
        let t0 = tokio::time::Instant::now();
        let r = p.wait().await;
        assert_eq!(r, Resolution::TimedOut);
        assert_eq!(r.answer(), Answer::Deny);
        assert_eq!(t0.elapsed(), Duration::from_secs(30));
        assert_eq!(a.waiting(), 0);
        assert!(a.answer(&id, Decision::Once).is_err());
    }

    #[test]
    fn dropping_a_request_withdraws_it_and_ids_differ() {
        let a = Approvals::new(Duration::from_secs(60));
        let p1 = a.ask("s1");
        let p2 = a.ask("s2");
        assert_ne!(p1.id, p2.id);
        let id = p1.id.clone();
        drop(p1);
        assert!(a.answer(&id, Decision::Once).is_err());
        assert_eq!(a.waiting(), 1);
        assert_eq!(Decision::parse("always"), Some(Decision::Always));
        assert_eq!(Decision::parse("yes"), None);
    }
}
