//! claw's scheduler: cron jobs and the heartbeat, for the gateway to run as agent
//! turns.
//!
//! - [`spec`] (pure): the three kinds of job — `at` (one-shot, removed after it
//!   runs), `every` (interval ≥ 1 s) and 5-field `cron` expressions with a time
//!   zone — their parsers and the next-run arithmetic (catch-up rule included).
//! - [`store`]: the jobs file `<state dir>/cron/jobs.json` (locked, atomic writes).
//! - [`scheduler`]: [`Scheduler::run`] fires due jobs as [`Fire`]s on a tokio
//!   channel, notices edits of the jobs file while running, runs a missed job once
//!   at start-up and skips a job whose previous run is still going.
//! - [`heartbeat`]: the `HEARTBEAT.md` heartbeat and [`is_heartbeat_ok`].
//! - [`routine`]: claw's own scheduled work on the same channel (the daily
//!   memory consolidation), with the cron scheduler's catch-up and overlap rules.
//! - [`clock`]: "now" as a value, claw's one clock (tokio-driven in tests).
//!
//! This crate knows nothing of the agent: a [`Fire`] is a session key, a message
//! and where the answer goes; the gateway (or `claw cron run`) runs the turn.
//!
//! How a gateway wires it up (one receiver for cron and heartbeat fires):
//!
//! ```no_run
//! use claw_schedule::{Clock, Heartbeat, HeartbeatConfig, Scheduler, Zone, jobs_path};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn gateway(workspace: std::path::PathBuf, state_dir: std::path::PathBuf, config: HeartbeatConfig, zone: Zone)
//! #     -> Result<(), Box<dyn std::error::Error>> {
//! let clock = Clock::system();
//! let shutdown = CancellationToken::new();
//! let (tx, mut fires) = tokio::sync::mpsc::channel(64);
//! tokio::spawn(Scheduler::run(jobs_path(&state_dir), clock, tx.clone(), shutdown.clone()));
//! let heartbeat = Heartbeat::new(&workspace, config.resolve(zone)?, zone, clock);
//! tokio::spawn(heartbeat.run(tx, shutdown.clone()));
//! while let Some(fire) = fires.recv().await {
//!     tokio::spawn(async move {
//!         // Run an agent turn in `fire.session` with `fire.message`, then:
//!         let answer = String::from("…");
//!         let most_recent: Option<&str> = None; // the gateway's latest active session
//!         if let Some(to) = fire.deliver_target(&answer, most_recent) {
//!             let _ = to; // deliver `answer` there
//!         }
//!         drop(fire); // the turn is over: this job may fire again
//!     });
//! }
//! # Ok(())
//! # }
//! ```

/// "Now" as a value: claw's one clock ([`claw_base::clock`]).
pub use claw_base::clock;
pub mod heartbeat;
pub mod job;
pub mod routine;
pub mod scheduler;
pub mod spec;
pub mod store;

pub use clock::Clock;
pub use heartbeat::{
    HEARTBEAT_OK, Heartbeat, HeartbeatConfig, HeartbeatSettings, SkipReason, is_heartbeat_ok,
};
pub use job::{Job, JobView, NewJob};
pub use routine::Routine;
pub use scheduler::{Event, Fire, FireKind, RunGuard, Scheduler};
pub use spec::{Schedule, SpecError, Zone, schedule_from_parts};
pub use store::{JobStore, StoreError, jobs_path};
