//! What several of the driver tests build the same way.

use chrono::FixedOffset;
use claw_agent::driver::{Driver, DriverOptions, Ui};
use claw_agent::message::ToolCall;
use claw_agent::provider::{Api, Profile, ProviderChain, RetryPolicy};
use claw_agent::tools::{ToolContext, ToolError, ToolOutput, ToolRegistry};
use claw_testkit::scripted_server::ScriptedServer;
use std::path::Path;
use std::sync::Arc;

/// Driver options for a turn in `ws`, session `session_key`: UTC, 30
/// iterations, 512 tokens, a 32,000-token window.
pub fn driver_options(ws: &Path, session_key: &str) -> DriverOptions {
    DriverOptions {
        workspace: ws.to_path_buf(),
        sessions_dir: ws.join("sessions"),
        session_key: session_key.into(),
        secrets: vec![],
        max_iterations: 30,
        max_tokens: 512,
        context_window: 32_000,
        utc_offset: FixedOffset::east_opt(0).unwrap(),
        timezone: "UTC".into(),
        os: "test".into(),
        clock: Default::default(),
        memory_max_bytes: claw_agent::consolidate::DEFAULT_MAX_BYTES,
        state_dir: ws.join(".state"),
    }
}

/// One OpenAI-compatible profile, `scripted`, at the scripted server (model
/// `scripted-model`, a 32,000-token window).
pub fn scripted_chain(server: &ScriptedServer) -> ProviderChain {
    ProviderChain::new(
        vec![Profile {
            name: "scripted".into(),
            api: Api::OpenAi,
            base_url: server.url(),
            model: "scripted-model".into(),
            api_key: None,
            context_window: 32_000,
        }],
        RetryPolicy::default(),
    )
    .unwrap()
}

/// The driver of session `session_key` in `ws` ([`driver_options`]) over the
/// scripted server ([`scripted_chain`]) and the tools of `ctx`.
pub async fn open_driver(
    ws: &Path,
    session_key: &str,
    server: &ScriptedServer,
    ctx: ToolContext,
    ui: Arc<dyn Ui>,
) -> Driver<ProviderChain, ToolRegistry> {
    Driver::open(
        driver_options(ws, session_key),
        Arc::new(scripted_chain(server)),
        Arc::new(ToolRegistry::new(ctx)),
        ui,
    )
    .await
    .unwrap()
}

/// A `web_fetch` call of `url`.
pub fn fetch_call(url: &str) -> ToolCall {
    ToolCall {
        id: "w".into(),
        name: "web_fetch".into(),
        arguments: serde_json::json!({ "url": url }).to_string(),
    }
}

/// `web_fetch` of `url` through `reg`.
pub async fn fetch(reg: &ToolRegistry, url: &str) -> Result<ToolOutput, ToolError> {
    reg.dispatch(&fetch_call(url)).await
}

/// The final URL and title of a fetched page; panics on any other output.
pub fn page(out: ToolOutput) -> (String, Option<String>) {
    let ToolOutput::WebPage {
        final_url, title, ..
    } = out
    else {
        panic!("not a web page: {out:?}")
    };
    (final_url, title)
}
