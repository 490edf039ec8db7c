//! One integration-test binary for the PostgreSQL backend: the engine's core
//! search cases (the shared `claw_testkit::engine_suite`), the real indexer against PostgreSQL
//! (incremental, per-file all-or-nothing under kill -9), several writers with a
//! search loop, and the SQLite → PostgreSQL migration. Needs `CLAW_PG_URL`
//! (`. scripts/setup-postgres.sh`): under `CI=true` a missing server fails.
#![allow(clippy::unwrap_used)]

mod backends;
mod bm25;
mod bulk;
mod date_window;
mod indexing;
mod support;
