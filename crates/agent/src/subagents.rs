//! Sub-agents: the manager behind the `spawn` tool ([`crate::tools::spawn`]).
//! Each child runs its task as one turn of its own [`Driver`] in session
//! `subagent:<id>` (a transcript like any session, so it is indexed), with a
//! restricted registry ([`ToolRegistry::for_subagent`]: never `spawn`, `cron`,
//! `message`), its own iteration cap and a wall-clock budget. At most
//! `max_subagents` run at once per parent; more wait in a queue (a semaphore).
//!
//! Every child ends in exactly one [`Announcement`] on the parent's channel —
//! done, failed (an error, the iteration cap, the budget) or cancelled — so no
//! result is lost; the front end turns it into a parent turn.
//! [`Subagents::cancel_all`] (`/stop`) cancels the running and queued children.
//!
//! Bounded for a long-running gateway: when a child is spawned, finished children
//! older than [`FINISHED_KEEP`] are forgotten, and only the newest
//! [`MAX_FINISHED`] finished ones are kept (queued and running ones always stay);
//! the process-wide directory drops the entries of ended sessions whenever one
//! registers.

use crate::core::TurnEnd;
use crate::driver::{ConfirmRequest, Driver, DriverOptions, Model, Ui};
use crate::hooks::Hooks;
use crate::tools::{Answer, DynamicTools, SpawnArgs, Spawned, Spawner, ToolContext, ToolRegistry};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

/// The `agents` config section (key names are a contract).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubagentConfig {
    /// Children running at once per parent session; more are queued. 0 turns
    /// sub-agents off (the front ends then offer no `spawn` tool).
    pub max_subagents: usize,
    /// Model calls a child may make.
    pub subagent_max_iterations: usize,
    /// Wall-clock budget of a child, from the moment it starts running.
    pub subagent_timeout_secs: u64,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        SubagentConfig {
            max_subagents: 4,
            subagent_max_iterations: 20,
            subagent_timeout_secs: 300,
        }
    }
}

/// Where a child is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentState {
    Queued,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl SubagentState {
    pub fn as_str(self) -> &'static str {
        match self {
            SubagentState::Queued => "queued",
            SubagentState::Running => "running",
            SubagentState::Done => "done",
            SubagentState::Failed => "failed",
            SubagentState::Cancelled => "cancelled",
        }
    }

    pub fn is_finished(self) -> bool {
        !matches!(self, SubagentState::Queued | SubagentState::Running)
    }
}

/// One child, as `/agents` and the gateway list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubagentInfo {
    pub id: String,
    pub label: String,
    pub task: String,
    pub state: SubagentState,
    pub session: String,
    /// The answer, or why it failed (finished children only).
    pub result: Option<String>,
}

/// A finished child's report for the parent session.
#[derive(Debug, Clone, PartialEq)]
pub struct Announcement {
    pub id: String,
    pub label: String,
    pub state: SubagentState,
    pub text: String,
}

impl Announcement {
    /// The message that starts the parent's turn.
    pub fn message(&self) -> String {
        format!(
            "[system: sub-agent {} \"{}\" {}]\n{}\n(This is an automatic announcement, not a \
             message from the user: tell the user what came of the task.)",
            self.id,
            self.label,
            self.state.as_str(),
            self.text
        )
    }
}

/// Everything a child's driver is built from.
pub struct ChildKit<M: Model> {
    pub model: Arc<M>,
    /// The parent's tool context (its `cron` and `spawner` are dropped for children).
    pub tools: ToolContext,
    pub dynamic: Option<Arc<dyn DynamicTools>>,
    /// The parent's driver options (session key and iteration cap are replaced).
    pub options: DriverOptions,
    pub hooks: Option<Arc<Hooks>>,
}

struct ChildUi;

impl Ui for ChildUi {
    fn text(&self, _: &str) {}
    fn end_answer(&self) {}
    fn status(&self, _: &str) {}
    fn confirm(&self, _: &str) -> bool {
        false
    }
    fn ask(&self, _: &ConfirmRequest) -> Answer {
        Answer::Unavailable
    }
}

/// How long a finished child stays listed.
pub const FINISHED_KEEP: Duration = Duration::from_secs(6 * 3600);

/// How many finished children stay listed per parent (the newest).
pub const MAX_FINISHED: usize = 200;

#[derive(Default)]
struct Table {
    next: usize,
    list: Vec<SubagentInfo>,
    /// When each finished child finished (by id).
    finished_at: std::collections::HashMap<String, Instant>,
}

impl Table {
    /// Mark `id` finished at `now`.
    fn finish(&mut self, id: &str, state: SubagentState, text: String, now: Instant) {
        if let Some(i) = self.list.iter_mut().find(|i| i.id == id) {
            i.state = state;
            i.result = Some(text);
            self.finished_at.insert(id.to_string(), now);
        }
    }

    /// Forget finished children older than `keep`, then all but the newest
    /// `max` finished ones. Unfinished children are never dropped.
    fn prune(&mut self, now: Instant, keep: Duration, max: usize) {
        let at = &self.finished_at;
        let fresh = |i: &SubagentInfo| {
            !i.state.is_finished()
                || at
                    .get(&i.id)
                    .is_none_or(|t| now.saturating_duration_since(*t) <= keep)
        };
        self.list.retain(fresh);
        let mut finished: Vec<(Instant, String)> = self
            .list
            .iter()
            .filter(|i| i.state.is_finished())
            .map(|i| (at.get(&i.id).copied().unwrap_or(now), i.id.clone()))
            .collect();
        if finished.len() > max {
            let excess = finished.len() - max;
            finished.sort();
            let drop: std::collections::HashSet<String> = finished
                .into_iter()
                .take(excess)
                .map(|(_, id)| id)
                .collect();
            self.list.retain(|i| !drop.contains(&i.id));
        }
        let ids: std::collections::HashSet<&str> =
            self.list.iter().map(|i| i.id.as_str()).collect();
        self.finished_at.retain(|id, _| ids.contains(id.as_str()));
    }
}

/// The sub-agents of one parent session.
pub struct Subagents<M: Model> {
    kit: Arc<ChildKit<M>>,
    config: SubagentConfig,
    table: Arc<Mutex<Table>>,
    permits: Arc<Semaphore>,
    announce: UnboundedSender<Announcement>,
    /// Parent of every child's token; replaced after `cancel_all`.
    cancel: Mutex<CancellationToken>,
}

impl<M: Model> Subagents<M> {
    /// The manager and the channel its announcements arrive on.
    pub fn new(
        kit: ChildKit<M>,
        config: SubagentConfig,
    ) -> (Arc<Subagents<M>>, UnboundedReceiver<Announcement>) {
        let (tx, rx) = unbounded_channel();
        let permits = Arc::new(Semaphore::new(config.max_subagents.max(1)));
        (
            Arc::new(Subagents {
                kit: Arc::new(kit),
                config,
                table: Arc::new(Mutex::new(Table::default())),
                permits,
                announce: tx,
                cancel: Mutex::new(CancellationToken::new()),
            }),
            rx,
        )
    }

    /// Every child of this parent, oldest first.
    pub fn list(&self) -> Vec<SubagentInfo> {
        lock(&self.table).list.clone()
    }

    /// Children queued or running.
    pub fn outstanding(&self) -> usize {
        lock(&self.table)
            .list
            .iter()
            .filter(|i| !i.state.is_finished())
            .count()
    }

    /// `/stop`: cancels every running and queued child (each is announced as
    /// cancelled). Children spawned afterwards run normally.
    pub fn cancel_all(&self) {
        let mut token = self.cancel.lock().unwrap_or_else(|p| p.into_inner());
        token.cancel();
        *token = CancellationToken::new();
    }
}

fn lock(t: &Mutex<Table>) -> std::sync::MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

fn set_running(table: &Mutex<Table>, id: &str) {
    if let Some(i) = lock(table).list.iter_mut().find(|i| i.id == id) {
        i.state = SubagentState::Running;
    }
}

/// A sub-agent id unique across this process's sessions and across restarts:
/// the process's start time (ms) and pid, then a process-wide counter. Ids name
/// transcript files (`subagent:<id>`), so two sessions' children — or a restarted
/// gateway's, even under the same pid — never share one.
fn next_id() -> String {
    static START: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let start = START.get_or_init(|| {
        claw_base::Clock::System
            .system_time()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    });
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
    format!("{start:x}-{}-{n}", std::process::id())
}

impl<M: Model> Spawner for Subagents<M> {
    fn spawn(&self, args: SpawnArgs) -> Result<Spawned, String> {
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| "no async runtime to run the sub-agent on".to_string())?;
        let (id, label, session, state) = {
            let mut t = lock(&self.table);
            t.prune(Instant::now(), FINISHED_KEEP, MAX_FINISHED);
            t.next += 1;
            let id = next_id();
            let label = args
                .label
                .clone()
                .filter(|l| !l.trim().is_empty())
                .unwrap_or_else(|| args.task.chars().take(40).collect());
            let session = format!("subagent:{id}");
            let running = t.list.iter().filter(|i| !i.state.is_finished()).count();
            let state = if running < self.config.max_subagents.max(1) {
                SubagentState::Running
            } else {
                SubagentState::Queued
            };
            t.list.push(SubagentInfo {
                id: id.clone(),
                label: label.clone(),
                task: args.task.clone(),
                state: SubagentState::Queued,
                session: session.clone(),
                result: None,
            });
            (id, label, session, state)
        };
        let token = self
            .cancel
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .child_token();
        let job = Job {
            id: id.clone(),
            label: label.clone(),
            session: session.clone(),
            args,
            token,
            kit: self.kit.clone(),
            table: self.table.clone(),
            permits: self.permits.clone(),
            announce: self.announce.clone(),
            max_iterations: self.config.subagent_max_iterations,
            budget: Duration::from_secs(self.config.subagent_timeout_secs.max(1)),
        };
        runtime.spawn(job.run());
        Ok(Spawned {
            id,
            label,
            state: state.as_str().to_string(),
            session,
        })
    }
}

struct Job<M: Model> {
    id: String,
    label: String,
    session: String,
    args: SpawnArgs,
    token: CancellationToken,
    kit: Arc<ChildKit<M>>,
    table: Arc<Mutex<Table>>,
    permits: Arc<Semaphore>,
    announce: UnboundedSender<Announcement>,
    max_iterations: usize,
    budget: Duration,
}

impl<M: Model> Job<M> {
    async fn run(self) {
        let (state, text) = self.outcome().await;
        // One step under the lock: whoever sees the child finished finds its
        // announcement already on the channel.
        let mut t = lock(&self.table);
        t.finish(&self.id, state, text.clone(), Instant::now());
        let _ = self.announce.send(Announcement {
            id: self.id.clone(),
            label: self.label.clone(),
            state,
            text,
        });
    }

    async fn outcome(&self) -> (SubagentState, String) {
        let permit = tokio::select! {
            p = self.permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return (SubagentState::Failed, "the sub-agent pool is closed".into()),
            },
            _ = self.token.cancelled() => {
                return (SubagentState::Cancelled, "cancelled before it started".into());
            }
        };
        set_running(&self.table, &self.id);
        let run = self.drive();
        tokio::pin!(run);
        let result = tokio::select! {
            r = &mut run => r,
            _ = tokio::time::sleep(self.budget) => {
                // End the turn cleanly (its transcript stays consistent), then report.
                self.token.cancel();
                let _ = run.await;
                Err(format!("timed out after {} s", self.budget.as_secs()))
            }
        };
        drop(permit);
        match result {
            Ok(TurnEnd::Answered(t)) | Ok(TurnEnd::Done(t)) => (SubagentState::Done, t),
            Ok(TurnEnd::Cancelled) => (SubagentState::Cancelled, "cancelled".into()),
            Ok(TurnEnd::MaxIterations(t)) => (
                SubagentState::Failed,
                format!(
                    "stopped at its iteration cap ({}): {t}",
                    self.max_iterations
                ),
            ),
            Ok(TurnEnd::LoopBroken(why)) => (SubagentState::Failed, format!("stopped: {why}")),
            Ok(TurnEnd::Failed(why)) => (SubagentState::Failed, why),
            Err(why) => (SubagentState::Failed, why),
        }
    }

    async fn drive(&self) -> Result<TurnEnd, String> {
        let kit = &self.kit;
        let mut ctx = kit.tools.clone();
        ctx.cron = None;
        ctx.spawner = None;
        let mut tools = ToolRegistry::new(ctx);
        if let Some(d) = &kit.dynamic {
            tools = tools.with_dynamic(d.clone());
        }
        let tools = tools.for_subagent(self.args.tools.as_deref());
        let mut opts = kit.options.clone();
        opts.session_key = self.session.clone();
        opts.max_iterations = self.max_iterations.max(1);
        let mut driver = Driver::open(opts, kit.model.clone(), Arc::new(tools), Arc::new(ChildUi))
            .await
            .map_err(|e| format!("could not open the session: {e}"))?;
        if let Some(h) = &kit.hooks {
            driver = driver.with_hooks(h.clone());
        }
        driver
            .run_turn(&self.args.task, &self.token)
            .await
            .map(|o| o.end)
            .map_err(|e| e.to_string())
    }
}

/// Listing a parent's children without knowing its model type (the gateway's
/// `GET /v1/sessions/<key>/subagents`).
pub trait SubagentList: Send + Sync {
    fn list(&self) -> Vec<SubagentInfo>;
    /// Cancel every queued and running child (the gateway's `/stop`).
    fn cancel_all(&self);
}

impl<M: Model> SubagentList for Subagents<M> {
    fn list(&self) -> Vec<SubagentInfo> {
        Subagents::list(self)
    }
    fn cancel_all(&self) {
        Subagents::cancel_all(self)
    }
}

type Directory = Mutex<std::collections::HashMap<String, std::sync::Weak<dyn SubagentList>>>;

/// The managers of this process's sessions, by parent session key (weak: a
/// session's manager lives as long as its worker).
fn directory() -> &'static Directory {
    static DIR: std::sync::OnceLock<Directory> = std::sync::OnceLock::new();
    DIR.get_or_init(Default::default)
}

/// Makes `manager` the one listed for `session` (and forgets the sessions
/// whose manager is gone).
pub fn register(session: &str, manager: &Arc<dyn SubagentList>) {
    register_in(directory(), session, manager);
}

fn register_in(dir: &Directory, session: &str, manager: &Arc<dyn SubagentList>) {
    let mut dir = dir.lock().unwrap_or_else(|p| p.into_inner());
    dir.retain(|_, w| w.strong_count() > 0);
    dir.insert(session.to_string(), Arc::downgrade(manager));
}

/// The children of `session`, when a live manager is registered for it.
pub fn listed(session: &str) -> Option<Vec<SubagentInfo>> {
    let dir = directory().lock().unwrap_or_else(|p| p.into_inner());
    dir.get(session).and_then(|w| w.upgrade()).map(|m| m.list())
}

/// Cancels the unfinished children of `session`; how many there were.
pub fn cancel_children(session: &str) -> usize {
    let manager = {
        let dir = directory().lock().unwrap_or_else(|p| p.into_inner());
        dir.get(session).and_then(|w| w.upgrade())
    };
    match manager {
        Some(m) => {
            let open = m.list().iter().filter(|c| !c.state.is_finished()).count();
            m.cancel_all();
            open
        }
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_and_defaults_are_the_contract() {
        let c: SubagentConfig = serde_json::from_str(r#"{"max_subagents": 2}"#).expect("parses");
        assert_eq!(c.max_subagents, 2);
        assert_eq!(c.subagent_max_iterations, 20);
        assert_eq!(c.subagent_timeout_secs, 300);
        assert_eq!(SubagentConfig::default().max_subagents, 4);
        assert!(serde_json::from_str::<SubagentConfig>(r#"{"max_children": 2}"#).is_err());
    }

    #[test]
    fn states_serialise_lowercase_and_only_two_are_unfinished() {
        let all = [
            SubagentState::Queued,
            SubagentState::Running,
            SubagentState::Done,
            SubagentState::Failed,
            SubagentState::Cancelled,
        ];
        for s in all {
            assert_eq!(
                serde_json::to_value(s).expect("serialises"),
                serde_json::Value::from(s.as_str())
            );
        }
        let unfinished: Vec<_> = all.iter().filter(|s| !s.is_finished()).collect();
        assert_eq!(
            unfinished,
            [&SubagentState::Queued, &SubagentState::Running]
        );
    }

    #[test]
    fn an_announcement_names_the_child_and_its_state() {
        let a = Announcement {
            id: "7-1".into(),
            label: "notes".into(),
            state: SubagentState::Failed,
            text: "timed out after 3 s".into(),
        };
        let m = a.message();
        assert!(m.starts_with("[system: sub-agent 7-1 \"notes\" failed]\ntimed out after 3 s"));
        assert!(m.contains("not a message from the user"));
    }

    fn info(id: &str, state: SubagentState) -> SubagentInfo {
        SubagentInfo {
            id: id.into(),
            label: id.into(),
            task: "t".into(),
            state,
            session: format!("subagent:{id}"),
            result: None,
        }
    }

    #[test]
    fn finished_children_are_forgotten_after_a_while_and_beyond_the_cap() {
        let t0 = Instant::now();
        let mut t = Table::default();
        for i in 0..6 {
            t.list.push(info(&format!("c{i}"), SubagentState::Running));
        }
        t.list.push(info("q", SubagentState::Queued));
        // c0 finished long ago; c1..c5 recently, one second apart.
        t.finish("c0", SubagentState::Done, "old".into(), t0);
        for i in 1..6 {
            t.finish(
                &format!("c{i}"),
                SubagentState::Failed,
                "x".into(),
                t0 + Duration::from_secs(3600 + i),
            );
        }
        let now = t0 + Duration::from_secs(3600 + 10);
        t.prune(now, Duration::from_secs(1800), 3);
        let ids: Vec<&str> = t.list.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(
            ids,
            ["c3", "c4", "c5", "q"],
            "too old: c0; beyond 3 finished: c1, c2"
        );
        assert_eq!(t.finished_at.len(), 3);
        // Unfinished children stay however many there are.
        let mut u = Table::default();
        for i in 0..10 {
            u.list.push(info(&format!("r{i}"), SubagentState::Running));
        }
        u.prune(now, Duration::ZERO, 0);
        assert_eq!(u.list.len(), 10);
    }

    struct Empty;
    impl SubagentList for Empty {
        fn list(&self) -> Vec<SubagentInfo> {
            vec![]
        }
        fn cancel_all(&self) {}
    }

    #[test]
    fn the_directory_drops_ended_sessions_when_one_registers() {
        let dir: Directory = Default::default();
        let gone: Arc<dyn SubagentList> = Arc::new(Empty);
        register_in(&dir, "old", &gone);
        drop(gone);
        let live: Arc<dyn SubagentList> = Arc::new(Empty);
        register_in(&dir, "new", &live);
        let keys: Vec<String> = dir.lock().expect("lock").keys().cloned().collect();
        assert_eq!(keys, ["new"]);
    }

    struct NoSpawn;
    impl Spawner for NoSpawn {
        fn spawn(&self, _: SpawnArgs) -> Result<Spawned, String> {
            Err("no".into())
        }
    }

    #[test]
    fn a_child_registry_never_offers_spawn_and_honours_the_allow_list() {
        let mut ctx = ToolContext::new(std::env::temp_dir());
        ctx.spawner = Some(Arc::new(NoSpawn));
        let names = |r: &ToolRegistry| r.specs().into_iter().map(|s| s.name).collect::<Vec<_>>();
        let parent = ToolRegistry::new(ctx.clone());
        assert!(names(&parent).contains(&"spawn".to_string()));
        let child = ToolRegistry::new(ctx.clone()).for_subagent(None);
        let n = names(&child);
        assert!(n.contains(&"exec".to_string()), "{n:?}");
        for banned in crate::tools::SUBAGENT_EXCLUDED {
            assert!(!n.iter().any(|t| t == banned), "{banned} offered: {n:?}");
        }
        let allow = vec!["read_file".to_string(), "spawn".to_string()];
        let only = ToolRegistry::new(ctx).for_subagent(Some(&allow));
        assert_eq!(names(&only), ["read_file"]);
    }
}
