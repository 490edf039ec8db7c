//! The gateway in-process: [`Gateway::start`] runs [`claw_gateway::server::run`]
//! on its own runtime, configured as `claw gateway --port 0` would be for the
//! workspace — keyword-only memory with the state directory the binary uses
//! (`claw_testkit::state_dir`), the clock at `claw_testkit::TEST_NOW`, UTC, the
//! token from the state directory, the `gateway`, `agent`, `agents` and
//! `channels` sections of `<workspace>/config.json` when there is one, and the
//! LLM (an OpenAI-compatible server, model `echo`) given by the test. Stopped
//! (the same cancellation as SIGTERM) when dropped.

use claw_gateway::client::Client;
use claw_gateway::config::{GatewayConfig, GatewaySection};
use claw_gateway::discovery::GatewayInfo;
use claw_gateway::server::{self, GatewayOptions};
use claw_gateway::token::{self, Token};
use claw_testkit::echo_llm::EchoLlm;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A fresh workspace, the echo LLM ([`EchoLlm::start`] with these timings) and
/// the gateway over both, for tests that need nothing else in the workspace.
pub fn echo_gateway(
    first: Duration,
    between: Duration,
    pieces: usize,
) -> (tempfile::TempDir, EchoLlm, Gateway) {
    let dir = tempfile::tempdir().unwrap();
    let llm = EchoLlm::start(first, between, pieces);
    let gw = Gateway::start(dir.path(), Some(&llm.url()));
    (dir, llm, gw)
}

/// A running in-process gateway; stopped when dropped.
pub struct Gateway {
    pub info: GatewayInfo,
    pub token: String,
    stop: CancellationToken,
    thread: Option<std::thread::JoinHandle<Result<(), String>>>,
}

impl Gateway {
    /// The gateway for `ws`, talking to the LLM at `llm` (none: chat disabled).
    pub fn start(ws: &Path, llm: Option<&str>) -> Gateway {
        Gateway::start_with_env(ws, llm, &[])
    }

    /// As [`Gateway::start`], with `env` as the environment the config's
    /// `*_env` keys (channel tokens) are looked up in.
    pub fn start_with_env(ws: &Path, llm: Option<&str>, env: &[(&str, &str)]) -> Gateway {
        let opts = options(ws, llm, env);
        let stop = CancellationToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let run_stop = stop.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(server::run(opts, run_stop, move |info| {
                let _ = tx.send(info.clone());
            }))
            .map_err(|e| e.to_string())
        });
        let info = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(info) => info,
            Err(_) if thread.is_finished() => {
                panic!("the gateway did not start: {:?}", thread.join().unwrap())
            }
            Err(_) => panic!("the gateway did not listen within 60 s"),
        };
        let token = std::fs::read_to_string(token::token_path(&claw_testkit::state_dir(ws)))
            .unwrap()
            .trim()
            .to_string();
        Gateway {
            info,
            token,
            stop,
            thread: Some(thread),
        }
    }

    pub fn client(&self) -> Client {
        let mut c = Client::new(self.info.clone(), Token::new(self.token.clone()));
        c.timeout = Some(Duration::from_secs(60));
        c
    }

    pub fn client_with(&self, token: &str) -> Client {
        Client::new(self.info.clone(), Token::new(token))
    }

    /// Shut down as on SIGTERM; how it ended.
    pub fn stop(&mut self) -> Result<(), String> {
        self.stop.cancel();
        match self.thread.take() {
            Some(t) => t.join().unwrap(),
            None => Ok(()),
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop.cancel();
        if !std::thread::panicking()
            && let Some(t) = self.thread.take()
        {
            let _ = t.join();
        }
    }
}

/// What `claw gateway --port 0` resolves for `ws` (see the module doc).
fn options(ws: &Path, llm: Option<&str>, env: &[(&str, &str)]) -> GatewayOptions {
    let config: Value = match std::fs::read(ws.join("config.json")) {
        Ok(b) => serde_json::from_slice(&b).unwrap(),
        Err(_) => json!({}),
    };
    let section = |name: &str| config.get(name).cloned().unwrap_or_else(|| json!({}));
    let mut mem = claw_testkit::cli_memory_config(ws, claw_memory::config::EmbedProvider::None);
    mem.clock = claw_memory::clock::Clock::parse_start(claw_testkit::TEST_NOW).unwrap();
    let state_dir = mem.state_dir();
    claw_memory::private::create_dir_all(&state_dir).unwrap();
    let assistant = claw_agent::config::AssistantConfig {
        agent: serde_json::from_value(section("agent")).unwrap(),
        llm_env: claw_agent::config::LlmEnv {
            api: llm.map(|_| "openai".to_string()),
            base_url: llm.map(str::to_string),
            model: llm.map(|_| "echo".to_string()),
            api_key: None,
        },
        protected: vec![state_dir.clone()],
        ..Default::default()
    };
    let lookup = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let agent = claw_agent::settings::resolve(
        &assistant,
        &claw_agent::settings::Overrides::default(),
        &lookup,
    )
    .map_err(|e| e.to_string());
    let mut gateway = GatewayConfig::from_section(
        &serde_json::from_value::<GatewaySection>(section("gateway")).unwrap(),
    );
    gateway.port = 0;
    let env: std::collections::BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let channels = serde_json::from_value::<claw_channels::ChannelsSection>(section("channels"))
        .unwrap()
        .resolve(&env)
        .unwrap();
    GatewayOptions {
        token: token::load_or_create(&state_dir).unwrap(),
        mem,
        agent,
        gateway,
        utc_offset: chrono::FixedOffset::east_opt(0).unwrap(),
        watch: true,
        schedule: None,
        channels,
        subagents: serde_json::from_value(section("agents")).unwrap(),
        hooks: None,
        mcp_read_only: false,
        consolidation: None,
    }
}

/// (role, content) of the user/assistant messages of session `key`'s transcript.
pub fn pairs(ws: &Path, key: &str) -> Vec<(String, String)> {
    claw_testkit::gateway_http::pairs(&transcript_path(ws, key))
}

/// The transcript file of session `key`.
pub fn transcript_path(ws: &Path, key: &str) -> std::path::PathBuf {
    ws.join("sessions")
        .join(claw_agent::session::file_name_for_key(key))
}
