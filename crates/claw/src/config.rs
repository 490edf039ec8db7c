//! Settings: every environment variable claw reads, the config file format, and
//! their resolution (flags > environment > config file > defaults) into one typed
//! [`Settings`] value. Library code receives `Settings`; it never reads `$HOME`,
//! the environment or the terminal itself — only [`Settings::resolve`] does, and
//! it is handed the environment by the binary.

pub use claw_agent::config::{
    AgentConfig, AssistantConfig, ENV_LLM_API, ENV_LLM_API_KEY, ENV_LLM_BASE_URL, ENV_LLM_MODEL,
    ExecConfig, LlmEnv, WebConfig,
};
use claw_memory_api::Fusion;
use claw_memory_api::clock::Clock;
pub use claw_memory_api::config::{
    Backend, DayZone, ENV_EMBED_MODEL_DIR, ENV_ORT_DYLIB_PATH, EmbedProvider, LocalRuntime,
    MemoryConfig, MemorySettings, PgSettings, Precision,
};

/// The memory's day zone from `agent.timezone` (claw's one zone parser); the
/// machine's when it is unset (or not a zone: the assistant reports that one).
pub fn day_zone(timezone: Option<&str>) -> DayZone {
    match timezone.map(claw_schedule::Zone::parse) {
        Some(Ok(claw_schedule::Zone::Utc)) => DayZone::Fixed(chrono::Offset::fix(&chrono::Utc)),
        Some(Ok(claw_schedule::Zone::Named(tz))) => DayZone::Named(tz),
        Some(Ok(claw_schedule::Zone::Fixed(off))) => DayZone::Fixed(off),
        None | Some(Err(_)) => DayZone::Machine,
    }
}
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Workspace directory (MEMORY.md, memory/, sessions/, state dir).
pub const ENV_WORKSPACE: &str = "CLAW_WORKSPACE";
/// Path of the JSON config file (default `~/.claw/config.json`).
pub const ENV_CONFIG: &str = "CLAW_CONFIG";
/// Embedding backend: `local` (default), `openai` or `none`.
pub const ENV_EMBED_PROVIDER: &str = "CLAW_EMBED_PROVIDER";
/// ONNX Runtime intra-op threads for the local model (overrides `embedding.threads`).
pub const ENV_EMBED_THREADS: &str = "CLAW_EMBED_THREADS";
/// Test-only: the instant the process starts at (RFC 3339, `YYYY-MM-DD` or `@unix`);
/// the clock then advances from there. Drives decay, daily notes and timestamps.
pub const ENV_NOW: &str = "CLAW_NOW";
/// Bearer token of `claw gateway` (default: generated into the state dir).
pub const ENV_GATEWAY_TOKEN: &str = "CLAW_GATEWAY_TOKEN";
/// The state directory (default `$XDG_STATE_HOME/claw/<workspace key>`, else
/// `~/.claw/state/<workspace key>`): database, source registry, gateway token, cron jobs.
pub const ENV_STATE_DIR: &str = "CLAW_STATE_DIR";
/// The XDG base directory for state (`~/.local/state` by the spec's default; claw
/// uses `~/.claw/state` when it is unset).
pub const ENV_XDG_STATE_HOME: &str = "XDG_STATE_HOME";
/// Benchmark-only: `1` runs the gateway's model with ONNX Runtime's own defaults
/// (every core, arena on, spinning on) instead of claw's measured settings, so
/// `scripts/bench-gateway-rss.sh` can show the before and after in one build.
pub const ENV_ORT_DEFAULTS: &str = "CLAW_EMBED_ORT_DEFAULTS";
/// The user's time zone, when `agent.timezone` is not set.
pub const ENV_TZ: &str = "TZ";
/// Where `claw gateway install-service` puts the unit (`$XDG_CONFIG_HOME/systemd/user`).
pub const ENV_XDG_CONFIG_HOME: &str = "XDG_CONFIG_HOME";
/// What the logs on stderr show (`tracing`'s filter syntax; default `warn`).
pub const ENV_RUST_LOG: &str = "RUST_LOG";

/// Every variable above, for `--help` and the README.
pub const ALL_ENV: &[(&str, &str)] = &[
    (
        ENV_WORKSPACE,
        "workspace directory (default ~/.claw/workspace)",
    ),
    (ENV_CONFIG, "config file (default ~/.claw/config.json)"),
    (
        ENV_EMBED_MODEL_DIR,
        "local embedding model dir (model.onnx + tokenizer.json)",
    ),
    (
        ENV_EMBED_PROVIDER,
        "embedding backend: local | openai | none",
    ),
    (
        ENV_ORT_DYLIB_PATH,
        "path to libonnxruntime.so for the local model",
    ),
    (
        ENV_EMBED_THREADS,
        "ONNX Runtime threads for the local model (default: min(CPUs, 2))",
    ),
    (ENV_LLM_API, "LLM API: openai | anthropic"),
    (ENV_LLM_BASE_URL, "LLM API base URL"),
    (ENV_LLM_MODEL, "LLM model name"),
    (ENV_LLM_API_KEY, "LLM API key"),
    (
        ENV_NOW,
        "test-only: start the clock at this instant (RFC 3339)",
    ),
    (
        ENV_GATEWAY_TOKEN,
        "bearer token of `claw gateway` (default: gateway.token in the state dir)",
    ),
    (
        ENV_STATE_DIR,
        "state dir: index, sources, gateway token, cron jobs (default ~/.claw/state/<workspace>)",
    ),
    (
        ENV_RUST_LOG,
        "what the logs on stderr show (default warn; `claw gateway`: its own lines too)",
    ),
];

/// The environment variables the config file names, sorted and deduplicated.
fn named_env(file: &ConfigFile) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    names.extend(
        file.agent
            .profiles
            .iter()
            .filter_map(|p| p.api_key_env.clone()),
    );
    names.extend(file.agent.brave_api_key_env.clone());
    names.extend(file.embedding.api_key_env.clone());
    if let Some(b) = &file.memory.backend
        && b.kind == "postgres"
    {
        names.push(b.url_env.clone().unwrap_or_else(|| ENV_PG_URL.to_string()));
    }
    if let Some(m) = &file.channels.matrix {
        names.push(m.access_token_env.clone());
    }
    if let Some(t) = &file.channels.telegram {
        names.push(t.token_env.clone());
    }
    let h = &file.hooks;
    for spec in [
        &h.session_start,
        &h.user_prompt,
        &h.before_tool_call,
        &h.after_tool_call,
        &h.before_compaction,
        &h.agent_end,
    ]
    .into_iter()
    .flatten()
    {
        names.extend(spec.env.iter().cloned());
    }
    names.retain(|n| !n.trim().is_empty());
    names.sort();
    names.dedup();
    names
}

/// What a service (`claw gateway install-service`) must be given to run as
/// this shell does: claw's own variables (but the workspace and config, which
/// the unit passes as flags, and the test-only clock) and every variable the
/// config file names, with their current values. Unset ones are left out.
pub fn service_env(settings: &Settings) -> Vec<(String, String)> {
    let mut names: Vec<&str> = ALL_ENV
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| ![ENV_WORKSPACE, ENV_CONFIG, ENV_NOW].contains(n))
        .collect();
    // Where the state dir is, and the time zone the user sees.
    names.extend([ENV_XDG_STATE_HOME, ENV_TZ]);
    names.extend(settings.named_env.iter().map(String::as_str));
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .filter_map(|n| settings.env.get(n).map(|v| (n.to_string(), v)))
        .collect()
}

/// Errors while resolving settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid value for {name}: {message}")]
    Invalid { name: String, message: String },
    #[error("no home directory: set {ENV_WORKSPACE}, {ENV_CONFIG} and {ENV_STATE_DIR}")]
    NoHome,
}

/// The config file, `~/.claw/config.json`. Unknown keys are an error naming the key.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub workspace: Option<PathBuf>,
    #[serde(default)]
    pub memory: MemorySection,
    #[serde(default)]
    pub embedding: EmbeddingConfig,
    #[serde(default)]
    pub agent: AgentConfig,
    #[serde(default)]
    pub web: WebConfig,
    #[serde(default)]
    pub exec: ExecConfig,
    #[serde(default)]
    pub gateway: claw_gateway::config::GatewaySection,
    /// The gateway's heartbeat (`enabled`, `interval_minutes`, `active_hours`).
    #[serde(default)]
    pub heartbeat: claw_schedule::HeartbeatConfig,
    /// `claw mcp` (read-only switch) and the MCP servers offered as tools.
    #[serde(default)]
    pub mcp: claw_mcp::McpConfig,
    /// Chat channels the gateway starts (`channels.matrix`, `channels.telegram`).
    #[serde(default)]
    pub channels: claw_channels::ChannelsSection,
    /// User hooks per event of the agent loop (`claw_agent::hooks`).
    #[serde(default)]
    pub hooks: claw_agent::hooks::HooksConfig,
    /// Sub-agents: `max_subagents`, `subagent_max_iterations`, `subagent_timeout_secs`.
    #[serde(default)]
    pub agents: claw_agent::subagents::SubagentConfig,
}

/// `memory` section of the config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySection {
    pub vector_weight: Option<f64>,
    pub text_weight: Option<f64>,
    pub half_life_days: Option<f64>,
    pub mmr_lambda: Option<f64>,
    pub min_score: Option<f64>,
    pub candidate_multiplier: Option<usize>,
    pub cache_max_entries: Option<usize>,
    pub max_file_bytes: Option<u64>,
    pub chunk_tokens: Option<usize>,
    pub chunk_overlap_tokens: Option<usize>,
    /// How the keyword and vector stages are fused: `adaptive` (default),
    /// `linear` or `rrf`.
    pub fusion: Option<String>,
    /// Adaptive fusion's gain (default `score::ADAPTIVE_GAIN`; 0 = linear).
    pub fusion_gain: Option<f64>,
    /// How much term coverage re-weights keyword hits (default
    /// `score::COVERAGE_STRENGTH`; 0 = off).
    pub coverage: Option<f64>,
    /// Where the index lives: `{"kind": "sqlite"}` (default) or
    /// `{"kind": "postgres", "url_env": "CLAW_PG_URL", "namespace": "team"}`.
    pub backend: Option<BackendSection>,
    /// The scheduled consolidation into MEMORY.md (`enabled`, `schedule`,
    /// `max_tokens`, `min_recalls`, `max_days`).
    #[serde(default)]
    pub consolidation: claw_agent::promote::ConsolidationConfig,
}

/// `memory.backend` in the config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackendSection {
    /// `sqlite` or `postgres`.
    pub kind: String,
    /// The environment variable holding the connection URL (default `CLAW_PG_URL`).
    pub url_env: Option<String>,
    /// The namespace this workspace writes into (default `default`).
    pub namespace: Option<String>,
    /// More namespaces a search sees (the write namespace always is).
    pub search_namespaces: Option<Vec<String>>,
    /// The PostgreSQL schema holding claw's tables (default `claw`).
    pub schema: Option<String>,
}

/// The default variable naming the PostgreSQL URL.
pub const ENV_PG_URL: &str = "CLAW_PG_URL";

fn resolve_backend(
    input: &ResolveInput,
    b: Option<&BackendSection>,
) -> Result<Backend, ConfigError> {
    let Some(b) = b else {
        return Ok(Backend::Sqlite);
    };
    match b.kind.as_str() {
        "sqlite" => Ok(Backend::Sqlite),
        "postgres" => {
            let var = b.url_env.clone().unwrap_or_else(|| ENV_PG_URL.to_string());
            let url = input.var(&var).ok_or_else(|| ConfigError::Invalid {
                name: "memory.backend.url_env".into(),
                message: format!("names {var}, which is not set"),
            })?;
            Ok(Backend::Postgres(PgSettings {
                url,
                namespace: b.namespace.clone().unwrap_or_else(|| "default".into()),
                search_namespaces: b.search_namespaces.clone().unwrap_or_default(),
                schema: b.schema.clone().unwrap_or_else(|| "claw".into()),
            }))
        }
        other => Err(ConfigError::Invalid {
            name: "memory.backend.kind".into(),
            message: format!("{other:?} (expected \"sqlite\" or \"postgres\")"),
        }),
    }
}

/// `embedding` section of the config file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingConfig {
    /// `local`, `openai` or `none`.
    pub provider: Option<String>,
    pub model_dir: Option<PathBuf>,
    pub ort_dylib_path: Option<PathBuf>,
    pub batch_size: Option<usize>,
    /// ONNX Runtime intra-op threads for the local model (default: the CPUs this
    /// process may use, at most [`LocalRuntime::DEFAULT_MAX_THREADS`]).
    pub threads: Option<usize>,
    /// `int8` (`model_int8.onnx`) or `fp32` (`model.onnx`) for the local model
    /// (default: [`claw_memory_api::config::Precision::default`]); a missing
    /// `model_int8.onnx` falls back to fp32, and `claw memory status` says so.
    pub precision: Option<String>,
    /// OpenAI-compatible backend.
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// Name of the environment variable holding the API key (never the key itself).
    pub api_key_env: Option<String>,
    pub dims: Option<usize>,
}

/// Everything resolved once at start-up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The memory engine's configuration: workspace, embedding backend, retrieval
    /// parameters and the clock (`CLAW_NOW` pins it for tests).
    pub mem: MemoryConfig,
    /// The assistant's configuration: the `agent` section and `CLAW_LLM_*`.
    pub assistant: AssistantConfig,
    /// Where `claw memory install-model` puts the model by default (`~/.claw/models`),
    /// and where the local backend looks when nothing is configured.
    pub models_dir: Option<PathBuf>,
    /// The config file that was read (None: no file, defaults and environment only).
    pub config_file: Option<PathBuf>,
    /// `claw gateway`: bind address, port, grace period, worker cap.
    pub gateway: claw_gateway::config::GatewayConfig,
    /// The `heartbeat` section (checked; `resolve` it with the user's zone).
    pub heartbeat: claw_schedule::HeartbeatConfig,
    /// `memory.consolidation` (checked; `resolve` it with the LLM and the zone).
    pub consolidation: claw_agent::promote::ConsolidationConfig,
    /// The `mcp` section: `claw mcp` read-only, the MCP servers offered as tools.
    pub mcp: claw_mcp::McpConfig,
    /// The `channels` section (tokens are read from the environment when the
    /// gateway starts).
    pub channels: claw_channels::ChannelsSection,
    /// The `hooks` section (compiled per session by `cli::chat::build_hooks`).
    pub hooks: claw_agent::hooks::HooksConfig,
    /// The `agents` section (sub-agents).
    pub agents: claw_agent::subagents::SubagentConfig,
    /// `CLAW_GATEWAY_TOKEN`, when set and not empty.
    pub gateway_token: Option<String>,
    /// `CLAW_EMBED_ORT_DEFAULTS=1`.
    pub ort_defaults: bool,
    /// `$TZ` (without POSIX's leading `:`), when set and not empty.
    pub tz: Option<String>,
    /// The user's configuration directory: `$XDG_CONFIG_HOME`, else `~/.config`.
    pub config_home: Option<PathBuf>,
    /// The environment as read at start-up, for the variables a config value
    /// names (`api_key_env`, `hooks.*.env`, channel tokens) and what child
    /// processes inherit.
    pub env: ProcessEnv,
    /// Every variable the config file names (keys, tokens, URLs, hook
    /// variables), sorted: what a service must be given to run like this shell.
    pub named_env: Vec<String>,
}

/// A snapshot of the process environment, taken once by [`ResolveInput::from_process`]:
/// commands look variables up here instead of reading the environment.
#[derive(Clone, Default)]
pub struct ProcessEnv(std::sync::Arc<BTreeMap<String, String>>);

impl ProcessEnv {
    /// The value of `name` as it was set (empty included), like `std::env::var(name).ok()`.
    pub fn get(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }

    /// Every variable.
    pub fn vars(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

impl std::fmt::Debug for ProcessEnv {
    // Values may be secrets: only how many there are.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcessEnv({} variables)", self.0.len())
    }
}

/// Inputs to resolution, gathered by the binary (so library code never reads the process environment).
#[derive(Debug, Clone, Default)]
pub struct ResolveInput {
    /// The user's home directory, if known.
    pub home: Option<PathBuf>,
    /// A snapshot of the environment.
    pub env: BTreeMap<String, String>,
    /// `--workspace` flag.
    pub workspace_flag: Option<PathBuf>,
    /// `--config` flag.
    pub config_flag: Option<PathBuf>,
}

impl ResolveInput {
    /// Snapshot the real process environment. Only the binary should call this.
    pub fn from_process(workspace_flag: Option<PathBuf>, config_flag: Option<PathBuf>) -> Self {
        ResolveInput {
            home: std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(PathBuf::from),
            env: std::env::vars().collect(),
            workspace_flag,
            config_flag,
        }
    }

    /// `RUST_LOG`: what the log subscriber shows (read before the settings).
    pub fn rust_log(&self) -> Option<String> {
        self.var(ENV_RUST_LOG)
    }

    fn var(&self, name: &str) -> Option<String> {
        self.env.get(name).filter(|v| !v.is_empty()).cloned()
    }
}

impl Settings {
    /// Resolve flags > environment > config file > defaults.
    pub fn resolve(input: &ResolveInput) -> Result<Settings, ConfigError> {
        let (file, config_file) = load_config(input)?;
        // An empty workspace would silently mean the current directory.
        if file
            .workspace
            .as_ref()
            .is_some_and(|w| w.as_os_str().is_empty())
        {
            return Err(ConfigError::Invalid {
                name: "workspace".into(),
                message: "is empty (remove the key for the default ~/.claw/workspace)".into(),
            });
        }
        if input
            .workspace_flag
            .as_ref()
            .is_some_and(|w| w.as_os_str().is_empty())
        {
            return Err(ConfigError::Invalid {
                name: "--workspace".into(),
                message: "is empty".into(),
            });
        }

        let workspace = input
            .workspace_flag
            .clone()
            .or_else(|| input.var(ENV_WORKSPACE).map(PathBuf::from))
            .or_else(|| file.workspace.clone())
            .or_else(|| input.home.as_ref().map(|h| h.join(".claw/workspace")))
            .ok_or(ConfigError::NoHome)?;
        let workspace = expand_tilde(&workspace, input.home.as_deref());
        let state_dir = match input.var(ENV_STATE_DIR) {
            Some(d) => expand_tilde(Path::new(&d), input.home.as_deref()),
            None => {
                let root = match input.var(ENV_XDG_STATE_HOME).map(PathBuf::from) {
                    // The spec ignores relative values.
                    Some(x) if x.is_absolute() => x.join("claw"),
                    _ => input
                        .home
                        .as_ref()
                        .map(|h| h.join(".claw/state"))
                        .ok_or(ConfigError::NoHome)?,
                };
                claw_memory_api::state::state_dir_for(&root, &workspace)
            }
        };
        // What no tool may touch: the state directory, and the config file when
        // there is one (it names hooks, MCP servers and the sandbox's settings).
        let mut protected = vec![state_dir.clone()];
        protected.extend(config_file.clone());

        let named_env = named_env(&file);
        let embed = resolve_embed(input, &file.embedding)?;
        let memory = resolve_memory(&file.memory, &file.embedding)?;
        let backend = resolve_backend(input, file.memory.backend.as_ref())?;
        let llm_env = LlmEnv {
            api: input.var(ENV_LLM_API),
            base_url: input.var(ENV_LLM_BASE_URL),
            model: input.var(ENV_LLM_MODEL),
            api_key: input.var(ENV_LLM_API_KEY),
        };
        let clock = match input.var(ENV_NOW) {
            None => Clock::System,
            Some(v) => Clock::parse_start(&v).map_err(|e| ConfigError::Invalid {
                name: ENV_NOW.to_string(),
                message: e.to_string(),
            })?,
        };
        // Checked here so a bad section fails every command, not only the gateway.
        check_heartbeat(&file)?;
        check_channels(&file)?;
        check_consolidation(&file)?;
        Ok(Settings {
            heartbeat: file.heartbeat.clone(),
            consolidation: file.memory.consolidation.clone(),
            mem: MemoryConfig {
                workspace,
                state_dir,
                embed,
                memory,
                clock,
                zone: day_zone(file.agent.timezone.as_deref()),
                backend,
            },
            assistant: AssistantConfig {
                agent: file.agent,
                web: file.web,
                exec: ExecConfig {
                    read_paths: file
                        .exec
                        .read_paths
                        .iter()
                        .map(|p| expand_tilde(p, input.home.as_deref()))
                        .collect(),
                    write_paths: file
                        .exec
                        .write_paths
                        .iter()
                        .map(|p| expand_tilde(p, input.home.as_deref()))
                        .collect(),
                    ..file.exec
                },
                llm_env,
                protected,
            },
            models_dir: input.home.as_ref().map(|h| h.join(".claw/models")),
            config_file,
            gateway: claw_gateway::config::GatewayConfig::from_section(&file.gateway),
            mcp: file.mcp,
            named_env,
            channels: file.channels,
            hooks: file.hooks,
            agents: file.agents,
            gateway_token: input.var(ENV_GATEWAY_TOKEN),
            ort_defaults: input.env.get(ENV_ORT_DEFAULTS).is_some_and(|v| v == "1"),
            tz: input
                .var(ENV_TZ)
                .map(|tz| tz.trim_start_matches(':').to_string()),
            config_home: input
                .var(ENV_XDG_CONFIG_HOME)
                .map(PathBuf::from)
                .or_else(|| input.home.as_ref().map(|h| h.join(".config"))),
            env: ProcessEnv(std::sync::Arc::new(input.env.clone())),
        })
    }

    /// The state directory (database, locks, token, cron jobs), outside the workspace.
    pub fn state_dir(&self) -> PathBuf {
        self.mem.state_dir()
    }

    /// Path of the memory database.
    pub fn db_path(&self) -> PathBuf {
        self.mem.db_path()
    }

    /// Directory of session transcripts.
    pub fn sessions_dir(&self) -> PathBuf {
        self.mem.sessions_dir()
    }
}

/// The config file as flags > env > `~/.claw/config.json` name it (defaults when
/// there is none and none was named), and its path.
fn load_config(input: &ResolveInput) -> Result<(ConfigFile, Option<PathBuf>), ConfigError> {
    let config_path = input
        .config_flag
        .clone()
        .or_else(|| input.var(ENV_CONFIG).map(PathBuf::from))
        .or_else(|| input.home.as_ref().map(|h| h.join(".claw/config.json")));
    let explicit_config = input.config_flag.is_some() || input.var(ENV_CONFIG).is_some();
    Ok(match &config_path {
        Some(p) if p.exists() || explicit_config => (load_config_file(p)?, Some(p.clone())),
        _ => (ConfigFile::default(), None),
    })
}

fn check_heartbeat(file: &ConfigFile) -> Result<(), ConfigError> {
    file.heartbeat
        .resolve(claw_schedule::Zone::Utc)
        .map(|_| ())
        .map_err(|e| ConfigError::Invalid {
            name: "heartbeat".into(),
            message: e.to_string(),
        })
}

fn check_consolidation(file: &ConfigFile) -> Result<(), ConfigError> {
    file.memory
        .consolidation
        .check()
        .map_err(|message| ConfigError::Invalid {
            name: "memory.consolidation".into(),
            message,
        })
}

fn check_channels(file: &ConfigFile) -> Result<(), ConfigError> {
    file.channels.validate().map_err(|e| match e {
        claw_channels::ChannelError::Config { channel, message } => ConfigError::Invalid {
            name: format!("channels.{channel}"),
            message,
        },
        other => ConfigError::Invalid {
            name: "channels".into(),
            message: other.to_string(),
        },
    })
}

/// Every problem of the configuration, not only the first (`claw doctor`): a
/// file that does not parse is one problem; past that, each section is
/// checked on its own. Empty when [`Settings::resolve`] would succeed on it.
pub fn config_problems(input: &ResolveInput) -> Vec<ConfigError> {
    let file = match load_config(input) {
        Ok((file, _)) => file,
        Err(e) => return vec![e],
    };
    let mut out = Vec::new();
    if file
        .workspace
        .as_ref()
        .is_some_and(|w| w.as_os_str().is_empty())
    {
        out.push(ConfigError::Invalid {
            name: "workspace".into(),
            message: "is empty (remove the key for the default ~/.claw/workspace)".into(),
        });
    }
    out.extend(resolve_embed(input, &file.embedding).err());
    out.extend(resolve_memory(&file.memory, &file.embedding).err());
    out.extend(resolve_backend(input, file.memory.backend.as_ref()).err());
    if let Some(v) = input.var(ENV_NOW)
        && let Err(e) = Clock::parse_start(&v)
    {
        out.push(ConfigError::Invalid {
            name: ENV_NOW.to_string(),
            message: e.to_string(),
        });
    }
    out.extend(check_heartbeat(&file).err());
    out.extend(check_channels(&file).err());
    out.extend(check_consolidation(&file).err());
    if out.is_empty()
        && let Err(e) = Settings::resolve(input)
    {
        out.push(e);
    }
    out
}

fn load_config_file(path: &Path) -> Result<ConfigFile, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn expand_tilde(p: &Path, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~"), home) {
        (Ok(rest), Some(h)) => h.join(rest),
        _ => p.to_path_buf(),
    }
}

fn resolve_embed(
    input: &ResolveInput,
    cfg: &EmbeddingConfig,
) -> Result<EmbedProvider, ConfigError> {
    let provider = input
        .var(ENV_EMBED_PROVIDER)
        .or_else(|| cfg.provider.clone())
        .unwrap_or_else(|| "local".to_string());
    match provider.as_str() {
        "local" => Ok(EmbedProvider::Local {
            model_dir: input
                .var(ENV_EMBED_MODEL_DIR)
                .map(PathBuf::from)
                .or_else(|| cfg.model_dir.clone())
                .map(|p| expand_tilde(&p, input.home.as_deref()))
                .or_else(|| {
                    input
                        .home
                        .as_ref()
                        .map(|h| h.join(".claw/models/all-MiniLM-L6-v2"))
                        .filter(|p| p.join("model.onnx").exists())
                }),
            ort_dylib_path: input
                .var(ENV_ORT_DYLIB_PATH)
                .map(PathBuf::from)
                .or_else(|| cfg.ort_dylib_path.clone())
                .map(|p| expand_tilde(&p, input.home.as_deref()))
                .or_else(|| {
                    input
                        .home
                        .as_ref()
                        .map(|h| h.join(".claw/models/ort/libonnxruntime.so.1.24.4"))
                        .filter(|p| p.exists())
                }),
            runtime: resolve_runtime(input, cfg)?,
        }),
        "openai" => Ok(EmbedProvider::OpenAi {
            api_key: match cfg.api_key_env.as_deref() {
                None => None,
                // Like an LLM profile: a named variable that is unset is an error.
                Some(name) => Some(input.var(name).ok_or_else(|| ConfigError::Invalid {
                    name: "embedding.api_key_env".into(),
                    message: format!("the variable {name} is not set in the environment"),
                })?),
            },
            base_url: cfg
                .base_url
                .clone()
                .unwrap_or_else(|| "https://api.openai.com".to_string()),
            model: cfg
                .model
                .clone()
                .unwrap_or_else(|| "text-embedding-3-small".to_string()),
            dims: cfg.dims,
        }),
        "none" => Ok(EmbedProvider::None),
        other => Err(ConfigError::Invalid {
            name: "embedding.provider".into(),
            message: format!("`{other}` (expected local, openai or none)"),
        }),
    }
}

/// `CLAW_EMBED_THREADS` > `embedding.threads` > the library default; 0 or a
/// non-number is an error naming where it came from.
fn resolve_runtime(
    input: &ResolveInput,
    cfg: &EmbeddingConfig,
) -> Result<LocalRuntime, ConfigError> {
    let threads = match input.var(ENV_EMBED_THREADS) {
        Some(v) => Some((ENV_EMBED_THREADS, v.trim().parse::<usize>().ok(), v)),
        None => cfg
            .threads
            .map(|n| ("embedding.threads", Some(n), n.to_string())),
    };
    let mut runtime = LocalRuntime::default();
    if let Some(p) = cfg.precision.as_deref() {
        runtime.precision = Precision::parse(p).ok_or_else(|| ConfigError::Invalid {
            name: "embedding.precision".into(),
            message: format!("`{p}` (expected int8 or fp32)"),
        })?;
    }
    if let Some((name, parsed, raw)) = threads {
        match parsed {
            Some(n) if (1..=256).contains(&n) => runtime.threads = Some(n),
            _ => {
                return Err(ConfigError::Invalid {
                    name: name.into(),
                    message: format!("{raw:?} is not a thread count from 1 to 256"),
                });
            }
        }
    }
    Ok(runtime)
}

fn resolve_memory(
    cfg: &MemorySection,
    emb: &EmbeddingConfig,
) -> Result<MemorySettings, ConfigError> {
    let d = MemorySettings::default();
    let vw = cfg.vector_weight.unwrap_or(d.vector_weight);
    let tw = cfg.text_weight.unwrap_or(d.text_weight);
    if !(vw >= 0.0 && tw >= 0.0 && vw + tw > 0.0) {
        return Err(ConfigError::Invalid {
            name: "memory.vector_weight/text_weight".into(),
            message: "weights must be non-negative and not both zero".into(),
        });
    }
    let half_life = cfg.half_life_days.unwrap_or(d.half_life_days);
    if half_life.is_nan() || half_life <= 0.0 {
        return Err(ConfigError::Invalid {
            name: "memory.half_life_days".into(),
            message: "must be > 0".into(),
        });
    }
    let fusion = match cfg.fusion.as_deref() {
        None => d.fusion,
        Some(name) => Fusion::parse(name).ok_or_else(|| ConfigError::Invalid {
            name: "memory.fusion".into(),
            message: format!("{name:?} is not one of adaptive, linear, rrf"),
        })?,
    };
    let fusion_gain = cfg.fusion_gain.unwrap_or(d.fusion_gain);
    if !(fusion_gain.is_finite() && fusion_gain >= 0.0) {
        return Err(ConfigError::Invalid {
            name: "memory.fusion_gain".into(),
            message: "must be a number ≥ 0".into(),
        });
    }
    let coverage = cfg.coverage.unwrap_or(d.coverage);
    if !(coverage.is_finite() && coverage >= 0.0) {
        return Err(ConfigError::Invalid {
            name: "memory.coverage".into(),
            message: "must be a number ≥ 0".into(),
        });
    }
    Ok(MemorySettings {
        fusion,
        fusion_gain,
        coverage,
        // Normalised to sum 1.
        vector_weight: vw / (vw + tw),
        text_weight: tw / (vw + tw),
        half_life_days: half_life,
        mmr_lambda: cfg.mmr_lambda.unwrap_or(d.mmr_lambda).clamp(0.0, 1.0),
        min_score: cfg.min_score.unwrap_or(d.min_score),
        candidate_multiplier: cfg
            .candidate_multiplier
            .unwrap_or(d.candidate_multiplier)
            .max(4),
        cache_max_entries: cfg.cache_max_entries.unwrap_or(d.cache_max_entries),
        max_file_bytes: cfg.max_file_bytes.unwrap_or(d.max_file_bytes),
        chunk_tokens: cfg.chunk_tokens.unwrap_or(d.chunk_tokens).clamp(16, 4096),
        chunk_overlap_tokens: cfg.chunk_overlap_tokens.unwrap_or(d.chunk_overlap_tokens),
        embed_batch_size: emb.batch_size.unwrap_or(d.embed_batch_size).max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(env: &[(&str, &str)]) -> ResolveInput {
        ResolveInput {
            home: Some(PathBuf::from("/home/u")),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_variables_commands_need_are_read_here() {
        let s = Settings::resolve(&input(&[])).unwrap();
        assert_eq!(s.gateway_token, None);
        assert!(!s.ort_defaults);
        assert_eq!(s.tz, None);
        assert_eq!(s.config_home, Some(PathBuf::from("/home/u/.config")));
        let s = Settings::resolve(&input(&[
            (ENV_GATEWAY_TOKEN, "tok"),
            (ENV_ORT_DEFAULTS, "1"),
            (ENV_TZ, ":Europe/Berlin"),
            (ENV_XDG_CONFIG_HOME, "/xdg"),
            ("SOME_KEY", ""),
        ]))
        .unwrap();
        assert_eq!(s.gateway_token.as_deref(), Some("tok"));
        assert!(s.ort_defaults);
        assert_eq!(s.tz.as_deref(), Some("Europe/Berlin"));
        assert_eq!(s.config_home, Some(PathBuf::from("/xdg")));
        assert_eq!(s.env.get("SOME_KEY").as_deref(), Some(""));
        assert_eq!(s.env.get("MISSING"), None);
        assert!(
            !format!("{:?}", s.env).contains("tok"),
            "no values in Debug"
        );
        // An empty token is no token.
        let s = Settings::resolve(&input(&[(ENV_GATEWAY_TOKEN, "")])).unwrap();
        assert_eq!(s.gateway_token, None);
    }

    #[test]
    fn defaults_use_home() {
        let s = Settings::resolve(&input(&[])).unwrap();
        assert_eq!(s.mem.workspace, PathBuf::from("/home/u/.claw/workspace"));
        // The state lives outside the workspace, keyed by it.
        let state = claw_memory_api::state::state_dir_for(
            Path::new("/home/u/.claw/state"),
            Path::new("/home/u/.claw/workspace"),
        );
        assert!(
            state
                .to_string_lossy()
                .starts_with("/home/u/.claw/state/workspace-"),
            "{state:?}"
        );
        assert_eq!(s.db_path(), state.join("memory.sqlite"));
        assert!(!s.db_path().starts_with(&s.mem.workspace));
        assert_eq!(s.assistant.protected, vec![state]);
        assert!((s.mem.memory.vector_weight - 0.7).abs() < 1e-12);
    }

    #[test]
    fn the_state_dir_follows_xdg_and_claw_state_dir() {
        let s = Settings::resolve(&input(&[("XDG_STATE_HOME", "/xdg")])).unwrap();
        assert!(
            s.state_dir()
                .to_string_lossy()
                .starts_with("/xdg/claw/workspace-"),
            "{:?}",
            s.state_dir()
        );
        // A relative XDG value is ignored (the spec says so).
        let s = Settings::resolve(&input(&[("XDG_STATE_HOME", "rel")])).unwrap();
        assert!(s.state_dir().starts_with("/home/u/.claw/state/"));
        let s = Settings::resolve(&input(&[
            ("CLAW_STATE_DIR", "~/st"),
            ("XDG_STATE_HOME", "/xdg"),
        ]))
        .unwrap();
        assert_eq!(s.state_dir(), PathBuf::from("/home/u/st"));
        // Two workspaces, two state dirs.
        let a = Settings::resolve(&input(&[("CLAW_WORKSPACE", "/w/a")])).unwrap();
        let b = Settings::resolve(&input(&[("CLAW_WORKSPACE", "/w/b")])).unwrap();
        assert_ne!(a.state_dir(), b.state_dir());
    }

    #[test]
    fn flag_beats_env_beats_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.json");
        std::fs::write(&cfg, r#"{"workspace": "/from/file"}"#).unwrap();
        let mut i = input(&[(ENV_CONFIG, cfg.to_str().unwrap())]);
        assert_eq!(
            Settings::resolve(&i).unwrap().mem.workspace,
            PathBuf::from("/from/file")
        );
        i.env.insert(ENV_WORKSPACE.into(), "/from/env".into());
        assert_eq!(
            Settings::resolve(&i).unwrap().mem.workspace,
            PathBuf::from("/from/env")
        );
        i.workspace_flag = Some(PathBuf::from("/from/flag"));
        assert_eq!(
            Settings::resolve(&i).unwrap().mem.workspace,
            PathBuf::from("/from/flag")
        );
    }

    #[test]
    fn unknown_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.json");
        std::fs::write(&cfg, r#"{"memory": {"vector_weigth": 0.5}}"#).unwrap();
        let err = Settings::resolve(&input(&[(ENV_CONFIG, cfg.to_str().unwrap())])).unwrap_err();
        assert!(err.to_string().contains("vector_weigth"), "{err}");
    }

    fn resolve_with(config: &str, env: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.json");
        std::fs::write(&cfg, config).unwrap();
        let mut i = input(env);
        i.env
            .insert(ENV_CONFIG.into(), cfg.to_str().unwrap().into());
        Settings::resolve(&i)
    }

    #[test]
    fn the_consolidation_section_is_read_and_checked() {
        let s = resolve_with(
            r#"{"memory": {"consolidation": {"schedule": "21:30", "min_recalls": 2}}}"#,
            &[],
        )
        .unwrap();
        assert_eq!(s.consolidation.schedule.as_deref(), Some("21:30"));
        assert_eq!(s.consolidation.min_recalls, Some(2));
        let err = resolve_with(
            r#"{"memory": {"consolidation": {"schedule": "25:99"}}}"#,
            &[],
        )
        .unwrap_err();
        assert!(err.to_string().contains("memory.consolidation"), "{err}");
        let err =
            resolve_with(r#"{"memory": {"consolidation": {"when": "daily"}}}"#, &[]).unwrap_err();
        assert!(err.to_string().contains("when"), "{err}");
    }

    #[test]
    fn empty_workspace_is_an_error() {
        let err = resolve_with(r#"{"workspace": ""}"#, &[]).unwrap_err();
        assert!(err.to_string().contains("workspace"), "{err}");
        let s = resolve_with(r#"{"workspace": "/w"}"#, &[]).unwrap();
        assert_eq!(s.mem.workspace, PathBuf::from("/w"));
        assert!(s.config_file.is_some());
        let mut i = input(&[]);
        i.workspace_flag = Some(PathBuf::new());
        assert!(Settings::resolve(&i).is_err());
    }

    fn runtime(s: &Settings) -> LocalRuntime {
        match &s.mem.embed {
            EmbedProvider::Local { runtime, .. } => *runtime,
            other => panic!("not local: {other:?}"),
        }
    }

    #[test]
    fn embedding_threads_env_over_file_over_default() {
        let d = runtime(&resolve_with("{}", &[]).unwrap());
        assert_eq!(d, LocalRuntime::default());
        assert!(!d.cpu_arena && !d.spinning, "arena and spinning off");
        let f = resolve_with(r#"{"embedding": {"threads": 3}}"#, &[]).unwrap();
        assert_eq!(runtime(&f).threads, Some(3));
        assert_eq!(runtime(&f).effective_threads(), 3);
        let e = resolve_with(
            r#"{"embedding": {"threads": 3}}"#,
            &[(ENV_EMBED_THREADS, "1")],
        )
        .unwrap();
        assert_eq!(runtime(&e).threads, Some(1));
        for (cfg, env, name) in [
            (
                r#"{"embedding": {"threads": 0}}"#,
                None,
                "embedding.threads",
            ),
            ("{}", Some("0"), ENV_EMBED_THREADS),
            ("{}", Some("two"), ENV_EMBED_THREADS),
            ("{}", Some("-1"), ENV_EMBED_THREADS),
        ] {
            let env: Vec<(&str, &str)> = env.map(|v| (ENV_EMBED_THREADS, v)).into_iter().collect();
            let err = resolve_with(cfg, &env).unwrap_err();
            assert!(err.to_string().contains(name), "{cfg} {env:?}: {err}");
        }
    }

    #[test]
    fn embedding_precision_selects_the_graph() {
        // Unset is int8 (issue 30's rule: within 0.005 nDCG@10 of fp32).
        assert_eq!(
            runtime(&resolve_with("{}", &[]).unwrap()).precision,
            Precision::Int8
        );
        for (p, want) in [("int8", Precision::Int8), ("fp32", Precision::Fp32)] {
            let cfg = format!(r#"{{"embedding": {{"precision": "{p}"}}}}"#);
            let r = runtime(&resolve_with(&cfg, &[]).unwrap());
            assert_eq!(r.precision, want, "{p}");
            assert_eq!(r.threads, None, "threads untouched");
        }
        let err = resolve_with(r#"{"embedding": {"precision": "fp16"}}"#, &[]).unwrap_err();
        assert!(
            err.to_string().contains("embedding.precision") && err.to_string().contains("fp16"),
            "{err}"
        );
    }

    #[test]
    fn missing_embedding_key_variable_is_an_error() {
        let cfg = r#"{"embedding": {"provider": "openai", "api_key_env": "EMB_KEY"}}"#;
        let err = resolve_with(cfg, &[]).unwrap_err();
        assert!(err.to_string().contains("EMB_KEY"), "{err}");
        let s = resolve_with(cfg, &[("EMB_KEY", "sk-1")]).unwrap();
        assert!(
            matches!(s.mem.embed, EmbedProvider::OpenAi { api_key: Some(ref k), .. } if k == "sk-1")
        );
        // No api_key_env at all (a local server) stays fine.
        assert!(resolve_with(r#"{"embedding": {"provider": "openai"}}"#, &[]).is_ok());
    }

    #[test]
    fn weights_are_normalised() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.json");
        std::fs::write(
            &cfg,
            r#"{"memory": {"vector_weight": 3, "text_weight": 1}}"#,
        )
        .unwrap();
        let s = Settings::resolve(&input(&[(ENV_CONFIG, cfg.to_str().unwrap())])).unwrap();
        assert!((s.mem.memory.vector_weight - 0.75).abs() < 1e-12);
        assert!((s.mem.memory.text_weight - 0.25).abs() < 1e-12);
    }

    #[test]
    fn fusion_is_configurable() {
        let s = resolve_with("{}", &[]).unwrap();
        assert_eq!(s.mem.memory.fusion, Fusion::default());
        for (name, f) in [
            ("adaptive", Fusion::Adaptive),
            ("linear", Fusion::Linear),
            ("rrf", Fusion::Rrf),
        ] {
            let cfg = format!(r#"{{"memory": {{"fusion": "{name}", "fusion_gain": 1.5}}}}"#);
            let s = resolve_with(&cfg, &[]).unwrap();
            assert_eq!(s.mem.memory.fusion, f);
            assert_eq!(s.mem.memory.fusion_gain, 1.5);
        }
        let err = resolve_with(r#"{"memory": {"fusion": "max"}}"#, &[]).unwrap_err();
        assert!(err.to_string().contains("memory.fusion"), "{err}");
        assert!(resolve_with(r#"{"memory": {"fusion_gain": -1}}"#, &[]).is_err());
        assert!(resolve_with(r#"{"memory": {"coverage": -1}}"#, &[]).is_err());
        let s = resolve_with(r#"{"memory": {"coverage": 0}}"#, &[]).unwrap();
        assert_eq!(s.mem.memory.coverage, 0.0);
    }

    #[test]
    fn postgres_backend_reads_its_url_from_the_named_variable() {
        let s = resolve_with("{}", &[]).unwrap();
        assert_eq!(s.mem.backend, Backend::Sqlite);
        let cfg = r#"{"memory": {"backend": {"kind": "postgres", "url_env": "TEAM_PG", "namespace": "team"}}}"#;
        let s = resolve_with(cfg, &[("TEAM_PG", "postgresql://u@127.0.0.1:5/db")]).unwrap();
        let Backend::Postgres(pg) = s.mem.backend else {
            panic!("postgres expected")
        };
        assert_eq!(pg.url, "postgresql://u@127.0.0.1:5/db");
        assert_eq!(
            (pg.namespace.as_str(), pg.schema.as_str()),
            ("team", "claw")
        );
        let err = resolve_with(cfg, &[]).unwrap_err();
        assert!(err.to_string().contains("TEAM_PG"), "{err}");
        let err = resolve_with(r#"{"memory": {"backend": {"kind": "mysql"}}}"#, &[]).unwrap_err();
        assert!(err.to_string().contains("mysql"), "{err}");
        let s = resolve_with(r#"{"memory": {"backend": {"kind": "sqlite"}}}"#, &[]).unwrap();
        assert_eq!(s.mem.backend, Backend::Sqlite);
    }
}
