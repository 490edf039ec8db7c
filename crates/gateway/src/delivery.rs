//! Deliveries to sessions nobody holds a stream for (cron and heartbeat answers,
//! sub-agent announcements): each target session gets its own sender task with a
//! bounded queue, so a slow chat (a homeserver that stalls, Telegram retrying with
//! backoff) delays only its own session's deliveries, never another's. One
//! session's messages keep their order: its task sends them one after the other
//! (a send is never spawned on its own, which would reorder split answers).
//!
//! A sender task is created on a session's first delivery and ends after an idle
//! period; the router removes it from its map only when the task has handled every
//! message the router gave it, so a message is never lost between an idle task and
//! its removal, and a new task for the same session starts only after the old one
//! has nothing left to send. A session whose queue is full (a chat that fell
//! [`DeliveryOptions::capacity`] deliveries behind) loses the new delivery with a
//! log line rather than stalling every other session.

use futures_util::future::BoxFuture;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Sends one delivery (`session`, `content`) to wherever the session lives.
pub type Send = Arc<dyn Fn(String, String) -> BoxFuture<'static, ()> + std::marker::Send + Sync>;

/// Per-session queue bound and idle period.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryOptions {
    /// Deliveries waiting per session before new ones are dropped.
    pub capacity: usize,
    /// A session's sender task ends after this long without a delivery.
    pub idle: Duration,
}

impl Default for DeliveryOptions {
    fn default() -> Self {
        DeliveryOptions {
            capacity: 64,
            idle: Duration::from_secs(60),
        }
    }
}

/// A sender task's report that it waited `idle` with nothing to do, having
/// handled `handled` deliveries in all.
struct Idle {
    session: String,
    task: u64,
    handled: u64,
}

struct Entry {
    tx: mpsc::Sender<String>,
    task: u64,
    sent: u64,
}

/// Routes deliveries to per-session sender tasks (see the module doc).
pub struct Router {
    send: Send,
    opts: DeliveryOptions,
    senders: HashMap<String, Entry>,
    next_task: u64,
    idle_tx: mpsc::UnboundedSender<Idle>,
    idle_rx: mpsc::UnboundedReceiver<Idle>,
    log: Arc<dyn Fn(&str) + std::marker::Send + Sync>,
}

impl Router {
    pub fn new(
        send: Send,
        opts: DeliveryOptions,
        log: Arc<dyn Fn(&str) + std::marker::Send + Sync>,
    ) -> Router {
        let (idle_tx, idle_rx) = mpsc::unbounded_channel();
        Router {
            send,
            opts,
            senders: HashMap::new(),
            next_task: 0,
            idle_tx,
            idle_rx,
            log,
        }
    }

    /// Sessions with a live sender task.
    pub fn active(&self) -> usize {
        self.senders.len()
    }

    /// Queue `content` for `session`'s sender task (created when missing).
    /// Never waits for a send.
    pub fn route(&mut self, session: String, content: String) {
        let (send, idle, idle_tx, capacity) = (
            &self.send,
            self.opts.idle,
            &self.idle_tx,
            self.opts.capacity.max(1),
        );
        let next_task = &mut self.next_task;
        let entry = self.senders.entry(session.clone()).or_insert_with(|| {
            let (tx, rx) = mpsc::channel(capacity);
            *next_task += 1;
            tokio::spawn(sender(
                session.clone(),
                *next_task,
                rx,
                send.clone(),
                idle,
                idle_tx.clone(),
            ));
            Entry {
                tx,
                task: *next_task,
                sent: 0,
            }
        });
        match entry.tx.try_send(content) {
            Ok(()) => entry.sent += 1,
            Err(mpsc::error::TrySendError::Full(_)) => (self.log)(&format!(
                "cannot deliver to {session}: {} deliveries are still waiting for its chat; this one is dropped",
                self.opts.capacity
            )),
            Err(mpsc::error::TrySendError::Closed(content)) => {
                // The task is gone (it panicked): start over with a new one.
                self.senders.remove(&session);
                self.route(session, content);
            }
        }
    }

    /// An idle report: remove the task when it has handled all it was given
    /// (dropping the sender ends it). Deliveries routed after its report keep it.
    fn idle(&mut self, idle: Idle) {
        if let Some(e) = self.senders.get(&idle.session)
            && e.task == idle.task
            && e.sent == idle.handled
        {
            self.senders.remove(&idle.session);
        }
    }

    /// Route every message of `rx` until it closes (the gateway's delivery loop).
    pub async fn run(mut self, mut rx: mpsc::Receiver<(String, String)>) {
        loop {
            tokio::select! {
                m = rx.recv() => match m {
                    Some((session, content)) => self.route(session, content),
                    None => break,
                },
                Some(idle) = self.idle_rx.recv() => self.idle(idle),
            }
        }
    }

    /// Serve idle reports until none is pending (for tests driving [`Router::route`]).
    #[cfg(test)]
    async fn settle(&mut self, wait: Duration) {
        while let Ok(Some(idle)) = tokio::time::timeout(wait, self.idle_rx.recv()).await {
            self.idle(idle);
        }
    }
}

async fn sender(
    session: String,
    task: u64,
    mut rx: mpsc::Receiver<String>,
    send: Send,
    idle: Duration,
    idle_tx: mpsc::UnboundedSender<Idle>,
) {
    let mut handled = 0u64;
    loop {
        tokio::select! {
            m = rx.recv() => match m {
                Some(content) => {
                    send(session.clone(), content).await;
                    handled += 1;
                }
                // The router removed this task.
                None => return,
            },
            _ = tokio::time::sleep(idle) => {
                let report = Idle { session: session.clone(), task, handled };
                if idle_tx.send(report).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tokio::time::Instant;

    type Seen = Arc<Mutex<Vec<(String, String, Instant)>>>;

    /// A sink that records each delivery and takes `slow` for session "slow".
    fn recorder(slow: Duration) -> (Send, Seen) {
        let seen: Seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let send: Send = Arc::new(move |session: String, content: String| {
            let s = s.clone();
            Box::pin(async move {
                if session == "slow" {
                    tokio::time::sleep(slow).await;
                }
                s.lock().unwrap().push((session, content, Instant::now()));
            })
        });
        (send, seen)
    }

    fn quiet() -> Arc<dyn Fn(&str) + std::marker::Send + Sync> {
        Arc::new(|_: &str| {})
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_session_does_not_delay_another_and_keeps_its_order() {
        let (send, seen) = recorder(Duration::from_secs(30));
        let mut r = Router::new(send, DeliveryOptions::default(), quiet());
        let t0 = Instant::now();
        for i in 0..3 {
            r.route("slow".into(), format!("s{i}"));
        }
        r.route("fast".into(), "f0".into());
        tokio::time::sleep(Duration::from_millis(10)).await;
        {
            let seen = seen.lock().unwrap();
            assert_eq!(seen.len(), 1, "{seen:?}");
            assert_eq!(seen[0].0, "fast");
            assert!(seen[0].2 - t0 < Duration::from_secs(1));
        }
        tokio::time::sleep(Duration::from_secs(100)).await;
        let slow: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.0 == "slow")
            .map(|s| s.1.clone())
            .collect();
        assert_eq!(slow, ["s0", "s1", "s2"]);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_tasks_end_and_are_removed_without_losing_a_delivery() {
        let (send, seen) = recorder(Duration::from_secs(1));
        let opts = DeliveryOptions {
            capacity: 8,
            idle: Duration::from_secs(5),
        };
        let mut r = Router::new(send, opts, quiet());
        r.route("a".into(), "1".into());
        r.route("slow".into(), "1".into());
        assert_eq!(r.active(), 2);
        r.settle(Duration::from_secs(20)).await;
        assert_eq!(r.active(), 0, "both tasks idled out and were removed");
        // A delivery after removal starts a new task that delivers it.
        r.route("slow".into(), "2".into());
        assert_eq!(r.active(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let got: Vec<(String, String)> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|s| (s.0.clone(), s.1.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), "1".to_string()),
                ("slow".to_string(), "1".to_string()),
                ("slow".to_string(), "2".to_string())
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_report_overtaken_by_a_new_delivery_keeps_the_task() {
        let (send, seen) = recorder(Duration::ZERO);
        let opts = DeliveryOptions {
            capacity: 8,
            idle: Duration::from_secs(5),
        };
        let mut r = Router::new(send, opts, quiet());
        r.route("a".into(), "1".into());
        // Let the task deliver and report idle, but route before the report is read.
        tokio::time::sleep(Duration::from_secs(6)).await;
        r.route("a".into(), "2".into());
        let report = r.idle_rx.recv().await.expect("idle report");
        r.idle(report);
        assert_eq!(r.active(), 1, "the stale report did not remove the task");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(seen.lock().unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_the_new_delivery_with_a_log_line() {
        let (send, seen) = recorder(Duration::from_secs(10));
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let l = lines.clone();
        let opts = DeliveryOptions {
            capacity: 2,
            idle: Duration::from_secs(60),
        };
        let mut r = Router::new(
            send,
            opts,
            Arc::new(move |s: &str| l.lock().unwrap().push(s.into())),
        );
        r.route("slow".into(), "0".into());
        // The task takes "0" and sleeps in its send; two more fill the queue.
        tokio::time::sleep(Duration::from_millis(1)).await;
        for i in 1..4 {
            r.route("slow".into(), i.to_string());
        }
        assert_eq!(
            lines.lock().unwrap().len(),
            1,
            "{:?}",
            lines.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_secs(60)).await;
        let got: Vec<String> = seen.lock().unwrap().iter().map(|s| s.1.clone()).collect();
        assert_eq!(got, ["0", "1", "2"]);
    }

    struct NoTurns;
    impl claw_channels::TurnRunner for NoTurns {
        fn run(&self, _: claw_channels::ChatTurn) -> BoxFuture<'static, Result<String, String>> {
            Box::pin(async { Err("no turns in this test".to_string()) })
        }
    }

    /// The real Telegram channel against the scripted Bot API, whose
    /// `sendMessage` to chat 111 stalls for 4 s: a delivery to chat 222 routed
    /// after one to 111 reaches its chat while 111's send is still waiting (the
    /// old inline loop made it wait the 4 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_chat_does_not_hold_back_another_chats_delivery() {
        use claw_testkit::telegram_api::FakeTelegram;
        let token = "7:delivery-test";
        let fake = FakeTelegram::start(token);
        fake.delay_sends_to(111, Duration::from_secs(4));
        let settings = claw_channels::ChannelsSettings {
            matrix: None,
            telegram: Some(claw_channels::config::TelegramSettings {
                token: token.to_string(),
                allow_from: vec![],
                base_url: fake.url(),
            }),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let stop = tokio_util::sync::CancellationToken::new();
        let channels = Arc::new(
            claw_channels::Channels::start(
                &settings,
                dir.path(),
                Arc::new(NoTurns),
                Arc::new(|_: String| {}),
                stop.clone(),
            )
            .expect("channels start"),
        );
        let done: Arc<Mutex<Vec<(String, std::time::Instant)>>> = Arc::default();
        let (ch, d) = (channels.clone(), done.clone());
        let send: Send = Arc::new(move |session: String, content: String| {
            let (ch, d) = (ch.clone(), d.clone());
            Box::pin(async move {
                let r = ch.deliver(&session, &content).await;
                assert!(matches!(r, Ok(Some(1))), "{r:?}");
                d.lock().unwrap().push((session, std::time::Instant::now()));
            })
        });
        let (tx, rx) = mpsc::channel(8);
        tokio::spawn(Router::new(send, DeliveryOptions::default(), quiet()).run(rx));
        let t0 = std::time::Instant::now();
        tx.send(("telegram:111".into(), "to the stalled chat".into()))
            .await
            .expect("route");
        tx.send(("telegram:222".into(), "to the quick chat".into()))
            .await
            .expect("route");
        let deadline = t0 + Duration::from_secs(10);
        let fast = loop {
            if let Some(t) = done
                .lock()
                .unwrap()
                .iter()
                .find(|(s, _)| s == "telegram:222")
                .map(|(_, t)| *t)
            {
                break t;
            }
            assert!(std::time::Instant::now() < deadline, "chat 222 got nothing");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(
            fast - t0 < Duration::from_secs(2),
            "chat 222 waited {:?} behind the stalled chat",
            fast - t0
        );
        assert!(
            !done
                .lock()
                .unwrap()
                .iter()
                .any(|(s, _)| s == "telegram:111"),
            "the stalled send was still in flight when 222's arrived"
        );
        while !done
            .lock()
            .unwrap()
            .iter()
            .any(|(s, _)| s == "telegram:111")
        {
            assert!(std::time::Instant::now() < deadline, "chat 111 got nothing");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut sent: Vec<String> = fake
            .sent()
            .iter()
            .map(|b| b["chat_id"].to_string())
            .collect();
        sent.sort();
        assert_eq!(sent, ["111", "222"], "each chat got its one message");
        stop.cancel();
    }
}
