//! One integration-test binary for the gateway library: the server started
//! in-process on 127.0.0.1 (`common`) against scripted LLM servers, a scripted
//! Telegram Bot API server and headless Chromium.
#![allow(clippy::unwrap_used)]
#![allow(unsafe_code)] // killpg(2) on the browser's process group the WebChat test starts

mod approvals;
mod cancel;
mod channels;
mod client_support;
mod commands;
mod common;
mod http;
mod hygiene;
mod memory_browser;
mod webchat_browser;
