//! claw's scheduler: cron jobs and the heartbeat, for the gateway to run as agent
//! turns.
//!
//! - [`spec`] (pure): the three kinds of job — `at` (one-shot, removed after it
//!   runs), `every` (interval ≥ 1 s) and 5-field `cron` expressions with a time
//!   zone — their parsers and the next-run arithmetic (catch-up rule included).
//! - [`store`]: the jobs file `<workspace>/cron/jobs.json` (locked, atomic writes).
//! - [`scheduler`]: [`Scheduler::run`] fires due jobs as [`Fire`]s on a tokio
//!   channel, notices edits of the jobs file while running, runs a missed job once
//!   at start-up and skips a job whose previous run is still going.
//! - [`heartbeat`]: the `HEARTBEAT.md` heartbeat and [`is_heartbeat_ok`].
//! - [`clock`]: "now" as a value (tokio-driven in tests).
//!
//! This crate knows nothing of the agent: a [`Fire`] is a session key, a message
//! and where the answer goes; the gateway (or `claw cron run`) runs the turn.

pub mod clock;
pub mod heartbeat;
pub mod job;
pub mod scheduler;
pub mod spec;
pub mod store;

pub use clock::Clock;
pub use heartbeat::{
    HEARTBEAT_OK, Heartbeat, HeartbeatConfig, HeartbeatSettings, SkipReason, is_heartbeat_ok,
};
pub use job::{Job, JobView, NewJob};
pub use scheduler::{Event, Fire, FireKind, RunGuard, Scheduler};
pub use spec::{Schedule, SpecError, Zone, schedule_from_parts};
pub use store::{JobStore, StoreError, jobs_path};
