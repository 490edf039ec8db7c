//! LLM providers: profiles (which API, URL, model, key), the streaming clients for
//! OpenAI-compatible `/v1/chat/completions` (`openai`) and Anthropic `/v1/messages`
//! (`anthropic`) over SSE (`sse`), and the failover chain with retries, backoff and
//! cooldowns (`failover`).
//!
//! Invariant: never reads the process environment — keys come through the lookup
//! function handed to [`Profile::from_config`] / [`profiles_from_settings`].

pub mod anthropic;
pub mod failover;
mod http;
pub mod openai;
pub mod probe;
pub mod sse;

use std::time::Duration;

use crate::config::{AssistantConfig, LlmEnv, ProfileConfig};

pub use failover::{ProviderChain, RetryPolicy, Sleeper, backoff_delay, parse_retry_after};
pub use tokio_util::sync::CancellationToken;

/// Which wire protocol a profile speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI-compatible `/v1/chat/completions` (OpenAI, llama.cpp, Ollama, vLLM, ...).
    OpenAi,
    /// Anthropic `/v1/messages`.
    Anthropic,
}

impl Api {
    /// `openai` / `anthropic` (also accepts `openai-compatible`, `llamacpp`, `ollama`, `vllm`).
    pub fn parse(s: &str) -> Option<Api> {
        match s.trim().to_ascii_lowercase().as_str() {
            "openai" | "openai-compatible" | "openai_compatible" | "llamacpp" | "llama.cpp"
            | "ollama" | "vllm" => Some(Api::OpenAi),
            "anthropic" => Some(Api::Anthropic),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Api::OpenAi => "openai",
            Api::Anthropic => "anthropic",
        }
    }

    /// Base URL used when a profile names none.
    pub fn default_base_url(self) -> &'static str {
        match self {
            Api::OpenAi => "https://api.openai.com",
            Api::Anthropic => "https://api.anthropic.com",
        }
    }

    /// Context window assumed when neither the profile nor `agent.context_window` says.
    pub fn default_context_window(self) -> usize {
        match self {
            Api::OpenAi => 128_000,
            Api::Anthropic => 200_000,
        }
    }
}

/// One provider profile: everything needed to call one model.
#[derive(Clone, PartialEq)]
pub struct Profile {
    pub name: String,
    pub api: Api,
    /// With or without a trailing `/v1`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    pub context_window: usize,
}

impl std::fmt::Debug for Profile {
    // The key is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("name", &self.name)
            .field("api", &self.api)
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("context_window", &self.context_window)
            .finish()
    }
}

/// A profile could not be built from the settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error("profile `{profile}`: unknown api `{api}` (expected openai or anthropic)")]
    UnknownApi { profile: String, api: String },
    #[error(
        "profile `{profile}`: the API key variable {var} (api_key_env) is not set in the environment"
    )]
    MissingKey { profile: String, var: String },
    #[error("profile `{profile}`: no model given")]
    NoModel { profile: String },
    #[error("no profile named `{name}` (configured: {available})")]
    UnknownProfile { name: String, available: String },
    #[error(
        "no LLM configured: add agent.profiles to the config file or set CLAW_LLM_MODEL (and CLAW_LLM_BASE_URL / CLAW_LLM_API)"
    )]
    NoProfiles,
}

impl Profile {
    /// Build a profile from one config-file entry. `env` looks up environment
    /// variables (the key is read from `api_key_env`); `default_context_window` is
    /// `agent.context_window` if set.
    pub fn from_config(
        cfg: &ProfileConfig,
        index: usize,
        default_context_window: Option<usize>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Profile, ProfileError> {
        let name = cfg
            .name
            .clone()
            .unwrap_or_else(|| format!("{}-{}", cfg.api, index + 1));
        let api = Api::parse(&cfg.api).ok_or_else(|| ProfileError::UnknownApi {
            profile: name.clone(),
            api: cfg.api.clone(),
        })?;
        if cfg.model.trim().is_empty() {
            return Err(ProfileError::NoModel { profile: name });
        }
        let api_key = match &cfg.api_key_env {
            Some(var) => Some(env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
                ProfileError::MissingKey {
                    profile: name.clone(),
                    var: var.clone(),
                }
            })?),
            None => None,
        };
        Ok(Profile {
            api,
            base_url: cfg
                .base_url
                .clone()
                .unwrap_or_else(|| api.default_base_url().to_string()),
            model: cfg.model.clone(),
            api_key,
            context_window: cfg
                .context_window
                .or(default_context_window)
                .unwrap_or_else(|| api.default_context_window()),
            name,
        })
    }

    /// Apply `CLAW_LLM_*` overrides to `base` (the first configured profile, if
    /// any). Returns `None` when no `CLAW_LLM_*` variable is set. Without a base
    /// profile, `CLAW_LLM_MODEL` is required; the API defaults to `openai`.
    pub fn from_llm_env(
        llm: &LlmEnv,
        base: Option<&Profile>,
        default_context_window: Option<usize>,
    ) -> Option<Result<Profile, ProfileError>> {
        if llm.api.is_none()
            && llm.base_url.is_none()
            && llm.model.is_none()
            && llm.api_key.is_none()
        {
            return None;
        }
        let name = base
            .map(|b| b.name.clone())
            .unwrap_or_else(|| "env".to_string());
        let api = match &llm.api {
            Some(a) => match Api::parse(a) {
                Some(api) => api,
                None => {
                    return Some(Err(ProfileError::UnknownApi {
                        profile: name,
                        api: a.clone(),
                    }));
                }
            },
            None => base.map(|b| b.api).unwrap_or(Api::OpenAi),
        };
        let api_changed = base.is_some_and(|b| b.api != api);
        let model = match (&llm.model, base) {
            (Some(m), _) => m.clone(),
            (None, Some(b)) if !api_changed => b.model.clone(),
            _ => return Some(Err(ProfileError::NoModel { profile: name })),
        };
        let base_url = llm
            .base_url
            .clone()
            .or_else(|| base.filter(|_| !api_changed).map(|b| b.base_url.clone()))
            .unwrap_or_else(|| api.default_base_url().to_string());
        // A key configured for another server is not sent to an overridden URL.
        let api_key = llm.api_key.clone().or_else(|| {
            base.filter(|b| !api_changed && b.base_url == base_url)
                .and_then(|b| b.api_key.clone())
        });
        let context_window = base
            .map(|b| b.context_window)
            .or(default_context_window)
            .unwrap_or_else(|| api.default_context_window());
        Some(Ok(Profile {
            name,
            api,
            base_url,
            model,
            api_key,
            context_window,
        }))
    }

    /// The endpoint URL for this profile's API, whether or not `base_url` ends in `/v1`.
    pub fn endpoint(&self) -> String {
        let path = match self.api {
            Api::OpenAi => "chat/completions",
            Api::Anthropic => "messages",
        };
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/{path}")
        } else {
            format!("{base}/v1/{path}")
        }
    }

    /// `name (api model)` for messages.
    pub fn label(&self) -> String {
        format!("{} ({} {})", self.name, self.api.as_str(), self.model)
    }
}

/// All profiles, in failover order: the config file's `agent.profiles`, with the
/// `CLAW_LLM_*` variables overriding the first one (or forming the only one).
/// `env` looks up the variables named by `api_key_env`.
pub fn profiles_from_settings(
    settings: &AssistantConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Profile>, ProfileError> {
    let cw = settings.agent.context_window;
    let mut profiles = settings
        .agent
        .profiles
        .iter()
        .enumerate()
        .map(|(i, c)| Profile::from_config(c, i, cw, env))
        .collect::<Result<Vec<_>, _>>()?;
    if let Some(p) = Profile::from_llm_env(&settings.llm_env, profiles.first(), cw) {
        let p = p?;
        if profiles.is_empty() {
            profiles.push(p);
        } else {
            profiles[0] = p;
        }
    }
    if profiles.is_empty() {
        return Err(ProfileError::NoProfiles);
    }
    Ok(profiles)
}

/// Apply the `--profile NAME` and `--model MODEL` flags: the named profile moves
/// to the front (the others stay behind it as failover), then `model` replaces
/// the front profile's model.
pub fn apply_overrides(
    mut profiles: Vec<Profile>,
    profile: Option<&str>,
    model: Option<&str>,
) -> Result<Vec<Profile>, ProfileError> {
    if let Some(name) = profile {
        let pos = profiles
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| ProfileError::UnknownProfile {
                name: name.to_string(),
                available: profiles
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let chosen = profiles.remove(pos);
        profiles.insert(0, chosen);
    }
    if let Some(m) = model.filter(|m| !m.trim().is_empty())
        && let Some(first) = profiles.first_mut()
    {
        first.model = m.to_string();
    }
    if profiles.is_empty() {
        return Err(ProfileError::NoProfiles);
    }
    Ok(profiles)
}

/// Why one attempt against one profile failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttemptError {
    /// The server answered with an error status.
    #[error("HTTP {status}: {message}")]
    Http {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// No answer (or no next chunk) in time.
    #[error("timed out {0}")]
    Timeout(String),
    /// Connection-level failure.
    #[error("network error: {0}")]
    Network(String),
    /// The stream broke the protocol, ended early, or carried an error event.
    #[error("stream error: {message}")]
    Stream { message: String, retryable: bool },
    /// The request does not fit the model's context window.
    #[error("context window exceeded: {0}")]
    ContextOverflow(String),
    /// The profile was not tried because it is cooling down after failures.
    #[error("skipped: cooling down for {0:?} more")]
    CoolingDown(Duration),
    #[error("cancelled")]
    Cancelled,
}

/// How the chain reacts to an [`AttemptError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry this profile after a backoff (or this long, from `Retry-After`).
    Retryable(Option<Duration>),
    /// Bad credentials: cooldown this profile, go to the next.
    Auth,
    /// Will not succeed on retry with this profile (e.g. 400): go to the next.
    Fatal,
    /// Hand back to the caller to compact and retry.
    ContextOverflow,
    Cancelled,
}

impl AttemptError {
    pub fn class(&self) -> ErrorClass {
        match self {
            AttemptError::Http {
                status,
                retry_after,
                ..
            } => match status {
                401 | 403 => ErrorClass::Auth,
                408 | 409 | 425 | 429 | 500..=599 => ErrorClass::Retryable(*retry_after),
                _ => ErrorClass::Fatal,
            },
            AttemptError::Timeout(_) | AttemptError::Network(_) => ErrorClass::Retryable(None),
            AttemptError::Stream { retryable, .. } => {
                if *retryable {
                    ErrorClass::Retryable(None)
                } else {
                    ErrorClass::Fatal
                }
            }
            AttemptError::ContextOverflow(_) => ErrorClass::ContextOverflow,
            AttemptError::CoolingDown(_) => ErrorClass::Fatal,
            AttemptError::Cancelled => ErrorClass::Cancelled,
        }
    }
}

/// One line of the "what was tried" list.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// `name (api model)` of the profile.
    pub profile: String,
    /// 1-based attempt number on that profile (0 for a skipped profile).
    pub attempt: u32,
    pub error: AttemptError,
}

impl std::fmt::Display for AttemptRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.attempt == 0 {
            write!(f, "{}: {}", self.profile, self.error)
        } else {
            write!(
                f,
                "{} attempt {}: {}",
                self.profile, self.attempt, self.error
            )
        }
    }
}

/// What [`ProviderChain::complete`] can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    /// The prompt is too long for the model: compact the history and call again.
    /// Never retried by the chain.
    #[error("context window exceeded on {profile}: {message}")]
    ContextOverflow { profile: String, message: String },
    /// The cancellation token fired.
    #[error("cancelled")]
    Cancelled,
    /// Every profile failed; `attempts` lists what was tried, in order.
    #[error("{}", render_attempts(attempts))]
    AllFailed { attempts: Vec<AttemptRecord> },
    #[error("no LLM profiles configured")]
    NoProfiles,
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

fn render_attempts(attempts: &[AttemptRecord]) -> String {
    let n = attempts.iter().filter(|a| a.attempt > 0).count();
    let mut s = format!("all LLM providers failed after {n} attempt(s):");
    for a in attempts {
        s.push_str("\n  - ");
        s.push_str(&a.to_string());
    }
    s
}

/// Does this error text say the prompt does not fit the context window?
/// Covers OpenAI (`context_length_exceeded`, "maximum context length"), vLLM,
/// llama.cpp (`exceed_context_size_error`, "exceeds the available context size"),
/// Anthropic ("prompt is too long") and similar phrasings.
pub fn is_context_overflow_text(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "exceed_context_size",
        "context length",
        "context_length",
        "context window",
        "context size",
        "maximum context",
        "too many tokens",
        "prompt is too long",
        "prompt too long",
        "input is too long",
        "reduce the length",
    ]
    .iter()
    .any(|p| t.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(api: &str, key_env: Option<&str>) -> ProfileConfig {
        ProfileConfig {
            name: None,
            api: api.into(),
            base_url: None,
            model: "m1".into(),
            api_key_env: key_env.map(String::from),
            context_window: None,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn endpoint_with_and_without_v1() {
        let mut p = Profile::from_config(&cfg("openai", None), 0, None, &no_env).unwrap();
        for (base, want) in [
            ("http://h:1", "http://h:1/v1/chat/completions"),
            ("http://h:1/", "http://h:1/v1/chat/completions"),
            ("http://h:1/v1", "http://h:1/v1/chat/completions"),
            ("http://h:1/v1/", "http://h:1/v1/chat/completions"),
            ("http://h:1/proxy", "http://h:1/proxy/v1/chat/completions"),
        ] {
            p.base_url = base.into();
            assert_eq!(p.endpoint(), want);
        }
        p.api = Api::Anthropic;
        p.base_url = "https://api.anthropic.com".into();
        assert_eq!(p.endpoint(), "https://api.anthropic.com/v1/messages");
    }

    #[test]
    fn from_config_reads_key_and_defaults() {
        let env = |k: &str| (k == "MY_KEY").then(|| "sk-1".to_string());
        let p = Profile::from_config(&cfg("anthropic", Some("MY_KEY")), 1, None, &env).unwrap();
        assert_eq!(p.name, "anthropic-2");
        assert_eq!(p.api, Api::Anthropic);
        assert_eq!(p.api_key.as_deref(), Some("sk-1"));
        assert_eq!(p.base_url, "https://api.anthropic.com");
        assert_eq!(p.context_window, 200_000);
        assert!(!format!("{p:?}").contains("sk-1"), "key never printed");

        let err = Profile::from_config(&cfg("openai", Some("NOPE")), 0, None, &env).unwrap_err();
        assert!(err.to_string().contains("NOPE"), "{err}");
        let err = Profile::from_config(&cfg("gemini", None), 0, None, &env).unwrap_err();
        assert!(err.to_string().contains("gemini"), "{err}");
        let p = Profile::from_config(&cfg("openai", None), 0, Some(4096), &env).unwrap();
        assert_eq!(p.context_window, 4096);
    }

    #[test]
    fn env_overrides_first_profile() {
        let mut s = AssistantConfig::default();
        assert_eq!(
            profiles_from_settings(&s, &no_env),
            Err(ProfileError::NoProfiles)
        );
        s.llm_env.model = Some("qwen".into());
        s.llm_env.base_url = Some("http://127.0.0.1:8089".into());
        let ps = profiles_from_settings(&s, &no_env).unwrap();
        assert_eq!(ps.len(), 1);
        assert_eq!(ps[0].api, Api::OpenAi);
        assert_eq!(ps[0].model, "qwen");
        assert_eq!(
            ps[0].endpoint(),
            "http://127.0.0.1:8089/v1/chat/completions"
        );

        s.agent.profiles = vec![cfg("openai", None), cfg("anthropic", None)];
        s.llm_env = LlmEnv {
            model: Some("other".into()),
            ..Default::default()
        };
        let ps = profiles_from_settings(&s, &no_env).unwrap();
        assert_eq!(ps.len(), 2);
        assert_eq!(ps[0].model, "other");
        assert_eq!(ps[0].base_url, "https://api.openai.com");
        assert_eq!(ps[1].api, Api::Anthropic);

        s.llm_env = LlmEnv {
            api: Some("anthropic".into()),
            ..Default::default()
        };
        assert!(matches!(
            profiles_from_settings(&s, &no_env),
            Err(ProfileError::NoModel { .. })
        ));
    }

    #[test]
    fn flag_overrides() {
        let mk = |n: &str| Profile {
            name: n.into(),
            ..Profile::from_config(&cfg("openai", None), 0, None, &no_env).unwrap()
        };
        let ps = vec![mk("a"), mk("b"), mk("c")];
        let out = apply_overrides(ps.clone(), Some("b"), Some("big")).unwrap();
        let names: Vec<_> = out.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["b", "a", "c"]);
        assert_eq!(out[0].model, "big");
        assert_eq!(out[1].model, "m1");
        let err = apply_overrides(ps.clone(), Some("zz"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no profile named `zz` (configured: a, b, c)"
        );
        assert_eq!(apply_overrides(ps.clone(), None, None).unwrap(), ps);
    }

    #[test]
    fn overflow_texts() {
        for t in [
            "This model's maximum context length is 4096 tokens. However, you requested 5000",
            "the request exceeds the available context size, try increasing it",
            "prompt is too long: 210000 tokens > 200000 maximum",
            "context_length_exceeded",
        ] {
            assert!(is_context_overflow_text(t), "{t}");
        }
        assert!(!is_context_overflow_text("invalid api key"));
        assert!(!is_context_overflow_text("rate limit exceeded"));
    }

    #[test]
    fn classes() {
        let http = |status| AttemptError::Http {
            status,
            message: String::new(),
            retry_after: None,
        };
        assert_eq!(http(429).class(), ErrorClass::Retryable(None));
        assert_eq!(http(503).class(), ErrorClass::Retryable(None));
        assert_eq!(http(529).class(), ErrorClass::Retryable(None));
        assert_eq!(http(401).class(), ErrorClass::Auth);
        assert_eq!(http(403).class(), ErrorClass::Auth);
        assert_eq!(http(400).class(), ErrorClass::Fatal);
        assert_eq!(http(404).class(), ErrorClass::Fatal);
    }
}
