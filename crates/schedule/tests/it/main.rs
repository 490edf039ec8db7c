//! One integration-test binary for the scheduler: cron firing, persistence,
//! catch-up, overlap and live edits, and the heartbeat — all on tokio's paused
//! clock (`start_paused`), so simulated hours take milliseconds and every
//! instant is exact.
#![allow(clippy::unwrap_used)]

mod heartbeat;
mod routine;
mod scheduler;
mod support;
