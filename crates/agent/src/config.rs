//! The assistant's configuration as the application hands it over: the config
//! file's `agent` section (deserialised by the application, interpreted by
//! [`crate::settings`]) and the `CLAW_LLM_*` overrides, already read from the
//! environment by the binary. Nothing here reads the environment.

use serde::Deserialize;
use std::path::PathBuf;

/// LLM API flavour: `openai` or `anthropic`.
pub const ENV_LLM_API: &str = "CLAW_LLM_API";
/// Base URL of the LLM API (e.g. `http://127.0.0.1:8089`).
pub const ENV_LLM_BASE_URL: &str = "CLAW_LLM_BASE_URL";
/// Model name sent to the LLM API.
pub const ENV_LLM_MODEL: &str = "CLAW_LLM_MODEL";
/// API key for the LLM API.
pub const ENV_LLM_API_KEY: &str = "CLAW_LLM_API_KEY";

/// `agent` section of the config file; its contents are interpreted by [`crate::settings`].
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Provider profiles tried in order (failover).
    #[serde(default)]
    pub profiles: Vec<ProfileConfig>,
    pub max_iterations: Option<usize>,
    pub context_window: Option<usize>,
    pub max_tokens: Option<u32>,
    /// Ask before running tools with side effects.
    pub confirm_side_effects: Option<bool>,
    /// Confine file tools to the workspace (default true; `false` lets them
    /// follow any path and link).
    pub jail_to_workspace: Option<bool>,
    pub exec_timeout_secs: Option<u64>,
    /// Name of the environment variable holding a Brave Search API key.
    pub brave_api_key_env: Option<String>,
    pub timezone: Option<String>,
    /// Bound of MEMORY.md in bytes when consolidating (default 8192).
    pub memory_max_bytes: Option<usize>,
}

/// One provider profile of the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    pub name: Option<String>,
    /// `openai` or `anthropic`.
    pub api: String,
    pub base_url: Option<String>,
    pub model: String,
    /// Name of the environment variable holding the key.
    pub api_key_env: Option<String>,
    pub context_window: Option<usize>,
}

/// `CLAW_LLM_*` values, if set.
#[derive(Debug, Clone, Default)]
pub struct LlmEnv {
    pub api: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key: Option<String>,
}

/// What the assistant is configured with: the config file's `agent` section and
/// the `CLAW_LLM_*` overrides (flags are applied later, as [`crate::settings::Overrides`]).
#[derive(Debug, Clone, Default)]
pub struct AssistantConfig {
    /// The config file's `agent` section.
    pub agent: AgentConfig,
    /// The config file's `web` section.
    pub web: WebConfig,
    /// The config file's `exec` section (paths already `~`-expanded).
    pub exec: ExecConfig,
    /// `CLAW_LLM_*` from the environment.
    pub llm_env: LlmEnv,
    /// Paths no tool may read or write, even inside the workspace: claw's state
    /// directory and its config file (the application fills this in; see
    /// [`crate::settings::AgentSettings::protected`]).
    pub protected: Vec<std::path::PathBuf>,
}

/// `web` section of the config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Let `web_fetch` reach loopback, private, link-local and other non-public
    /// addresses (off by default: SSRF protection).
    pub allow_private: Option<bool>,
}

/// `exec` section of the config file: the exec tool's sandbox; interpreted by
/// [`crate::settings`] (defaults in [`crate::tools::sandbox`]).
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecConfig {
    /// Confine commands (default true).
    pub sandbox: Option<bool>,
    /// Allow network access (default false).
    pub network: Option<bool>,
    pub max_processes: Option<u64>,
    pub max_file_mb: Option<u64>,
    /// Total bytes one command may write, in MiB (default 1024; 0 = unlimited).
    pub max_write_mb: Option<u64>,
    pub max_cpu_secs: Option<u64>,
    /// Address space per process in MiB (default 8192; 0 = unlimited).
    pub max_memory_mb: Option<u64>,
    pub tmp_mb: Option<u64>,
    /// Extra directories commands may read and execute (`~` expanded).
    #[serde(default)]
    pub read_paths: Vec<PathBuf>,
    /// Extra directories commands may write (`~` expanded).
    #[serde(default)]
    pub write_paths: Vec<PathBuf>,
    /// Environment variables commands inherit beyond the base set (PATH, HOME,
    /// locale, TERM, TZ, USER); everything else claw has — API keys included — is
    /// withheld.
    #[serde(default)]
    pub env: Vec<String>,
}
