//! One integration-test binary for the memory library: chunker, search engine on a real model, sanitiser, XQuAD, the writer lock across processes, watcher overflow.
#![allow(clippy::unwrap_used)]

mod chunk_model;
mod embed_runtime;
mod fresh_walk;
mod lock_process;
mod search_engine;
mod search_sanitiser;
mod search_support;
mod search_xquad;
mod secrets_realtext;
mod service;
mod transcript_append;
mod watch_overflow;
