//! One integration-test binary for the `claw` binary end to end: index, search, get, watch, transcripts, the assistant against scripted and real LLM servers.
#![allow(clippy::unwrap_used)]
#![allow(unsafe_code)] // kill(2)/killpg(2) on child processes the tests start

mod adversarial_queries;
mod adversarial_state;
mod agent_assist;
mod agent_cli;
mod agent_memory;
mod agent_write_search;
mod cli_edge;
mod cli_snapshots;
mod confirm_cli;
mod crash_index;
mod cron_cli;
mod e2e_local_llm;
mod embed_openai;
mod eval_smoke;
mod exec_env;
mod gateway;
mod gateway_hygiene;
mod gateway_mcp;
mod gateway_repl;
mod hooks_cli;
mod index_cli;
mod jail_agent_cli;
mod jail_memory_cli;
mod mcp_client_cli;
mod mcp_server;
mod mcp_stdio_framing;
mod memory_contract;
mod pg_agent;
mod pg_cli;
mod pg_eval;
mod pg_surfaces;
mod ranking_calibration;
mod ranking_decay;
mod ranking_garden;
mod ranking_paraphrase;
mod ranking_support;
mod rebuild_crash;
mod repl_watch;
mod sandbox_exec;
mod search_cli;
#[path = "../../../memory/tests/it/search_support.rs"]
mod search_support;
mod search_sync;
mod search_vouch;
mod secrets_cli;
mod secrets_corpus;
mod skipped_files;
mod soak_watch;
mod ssrf_cli;
mod subagents_cli;
mod transcript_incremental;
mod transcript_secrets;
mod watch_db_deleted;
mod watch_events;
