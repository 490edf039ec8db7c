//! Agent settings resolved from [`AssistantConfig`]: iteration budget, output tokens,
//! context window, confirmation policy (on by default), file jail, exec timeout, Brave key, time
//! zone — and the provider profile list with the `--profile` / `--model` flags
//! applied on top of the config file and the `CLAW_LLM_*` variables. Pure: the
//! environment arrives as a lookup function.

use crate::config::{
    AssistantConfig, ENV_LLM_API, ENV_LLM_API_KEY, ENV_LLM_BASE_URL, ENV_LLM_MODEL,
};
use crate::core::DEFAULT_MAX_ITERATIONS;
use crate::provider::{Profile, ProfileError, apply_overrides, profiles_from_settings};
use crate::tools::sandbox::SandboxPolicy;
use chrono::FixedOffset;
use claw_base::Clock;
use claw_schedule::Zone;
use std::time::Duration;

/// Default output tokens per model call.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;
/// Default `exec` timeout.
pub const DEFAULT_EXEC_TIMEOUT_SECS: u64 = 60;

/// Errors resolving agent settings.
#[derive(Debug, thiserror::Error)]
pub enum AgentSettingsError {
    #[error(
        "no LLM is configured. Set {ENV_LLM_MODEL} (the model name), {ENV_LLM_BASE_URL} (e.g. \
         http://127.0.0.1:8089), {ENV_LLM_API} (openai or anthropic) and, if the server needs \
         one, {ENV_LLM_API_KEY}; or add `agent.profiles` to the config file"
    )]
    NoLlm,
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error("invalid value for {name}: {message}")]
    Invalid { name: String, message: String },
}

/// Command-line overrides.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--profile NAME`: use this profile first.
    pub profile: Option<String>,
    /// `--model NAME`: the model of the first profile.
    pub model: Option<String>,
}

/// Everything the assistant needs, resolved once.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// In failover order.
    pub profiles: Vec<Profile>,
    pub max_iterations: usize,
    pub max_tokens: u32,
    /// Context window of the first profile (or `agent.context_window`).
    pub context_window: usize,
    pub confirm_side_effects: bool,
    pub jail_to_workspace: bool,
    pub exec_timeout: Duration,
    pub brave_api_key: Option<String>,
    /// `web.allow_private`: `web_fetch` may reach non-public addresses.
    pub allow_private: bool,
    /// `agent.timezone` (an IANA name, UTC or an offset), if set.
    pub zone: Option<Zone>,
    /// The exec sandbox (`exec` section).
    pub sandbox: SandboxPolicy,
    /// Bound of MEMORY.md in bytes when consolidating (`agent.memory_max_bytes`).
    pub memory_max_bytes: usize,
    /// What claw trusts and the tools must not touch: the state directory and the
    /// config file. The file tools refuse them wherever they lie (also inside the
    /// workspace) and `exec`'s sandbox hides them (`sandbox.hidden`).
    pub protected: Vec<std::path::PathBuf>,
}

impl AgentSettings {
    /// The offset of the assistant's day now: `agent.timezone`'s (daylight saving
    /// included), else the machine's local zone's.
    pub fn utc_offset(&self, clock: &Clock) -> FixedOffset {
        match self.zone {
            Some(zone) => zone.offset_at(clock.now()),
            None => clock.local_offset(),
        }
    }

    /// Secrets that must never reach a session file.
    pub fn secrets(&self) -> Vec<String> {
        let mut s: Vec<String> = self
            .profiles
            .iter()
            .filter_map(|p| p.api_key.clone())
            .collect();
        s.extend(self.brave_api_key.clone());
        s.sort();
        s.dedup();
        s
    }
}

/// Resolve. `env` looks up the variables named in the config (`api_key_env`,
/// `brave_api_key_env`).
pub fn resolve(
    settings: &AssistantConfig,
    overrides: &Overrides,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<AgentSettings, AgentSettingsError> {
    let a = &settings.agent;
    let profiles = match profiles_from_settings(settings, env) {
        Ok(p) => p,
        Err(ProfileError::NoProfiles) => return Err(AgentSettingsError::NoLlm),
        Err(e) => return Err(e.into()),
    };
    if overrides
        .model
        .as_deref()
        .is_some_and(|m| m.trim().is_empty())
    {
        return Err(AgentSettingsError::Invalid {
            name: "--model".into(),
            message: "empty".into(),
        });
    }
    let profiles = apply_overrides(
        profiles,
        overrides.profile.as_deref(),
        overrides.model.as_deref(),
    )?;
    let max_iterations = a.max_iterations.unwrap_or(DEFAULT_MAX_ITERATIONS);
    if max_iterations == 0 {
        return Err(AgentSettingsError::Invalid {
            name: "agent.max_iterations".into(),
            message: "must be at least 1".into(),
        });
    }
    let max_tokens = a.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens < 16 {
        return Err(AgentSettingsError::Invalid {
            name: "agent.max_tokens".into(),
            message: "must be at least 16".into(),
        });
    }
    let context_window = profiles[0].context_window;
    if context_window < 1024 {
        return Err(AgentSettingsError::Invalid {
            name: "context_window".into(),
            message: format!("{context_window} tokens is too small (at least 1024)"),
        });
    }
    let brave_api_key = a
        .brave_api_key_env
        .as_deref()
        .and_then(env)
        .filter(|k| !k.is_empty());
    let zone = match &a.timezone {
        Some(tz) => Some(Zone::parse(tz).map_err(|e| AgentSettingsError::Invalid {
            name: "agent.timezone".into(),
            message: e.to_string(),
        })?),
        None => None,
    };
    Ok(AgentSettings {
        profiles,
        max_iterations,
        max_tokens,
        context_window,
        confirm_side_effects: a.confirm_side_effects.unwrap_or(true),
        jail_to_workspace: a.jail_to_workspace.unwrap_or(true),
        exec_timeout: Duration::from_secs(
            a.exec_timeout_secs
                .unwrap_or(DEFAULT_EXEC_TIMEOUT_SECS)
                .max(1),
        ),
        brave_api_key,
        allow_private: settings.web.allow_private.unwrap_or(false),
        zone,
        sandbox: SandboxPolicy {
            hidden: settings.protected.clone(),
            ..sandbox_policy(&settings.exec)?
        },
        protected: settings.protected.clone(),
        memory_max_bytes: a
            .memory_max_bytes
            .unwrap_or(crate::consolidate::DEFAULT_MAX_BYTES)
            .max(512),
    })
}

/// The exec sandbox policy from the `exec` config section.
pub fn sandbox_policy(e: &crate::config::ExecConfig) -> Result<SandboxPolicy, AgentSettingsError> {
    let d = SandboxPolicy::default();
    let at_least = |name: &str, v: Option<u64>, min: u64, default: u64| match v {
        Some(v) if v < min => Err(AgentSettingsError::Invalid {
            name: format!("exec.{name}"),
            message: format!("must be at least {min}"),
        }),
        Some(v) => Ok(v),
        None => Ok(default),
    };
    const MB: u64 = 1024 * 1024;
    for p in e.read_paths.iter().chain(&e.write_paths) {
        if !p.is_absolute() {
            return Err(AgentSettingsError::Invalid {
                name: "exec.read_paths/exec.write_paths".into(),
                message: format!("`{}` is not an absolute path", p.display()),
            });
        }
    }
    Ok(SandboxPolicy {
        enabled: e.sandbox.unwrap_or(d.enabled),
        network: e.network.unwrap_or(d.network),
        max_processes: at_least("max_processes", e.max_processes, 8, d.max_processes)?,
        max_file_bytes: at_least("max_file_mb", e.max_file_mb, 1, d.max_file_bytes / MB)?
            .saturating_mul(MB),
        max_write_bytes: match e.max_write_mb {
            Some(0) => 0,
            v => at_least("max_write_mb", v, 1, d.max_write_bytes / MB)?.saturating_mul(MB),
        },
        max_cpu_secs: at_least("max_cpu_secs", e.max_cpu_secs, 1, d.max_cpu_secs)?,
        max_memory_bytes: match e.max_memory_mb {
            Some(0) => 0,
            v => at_least("max_memory_mb", v, 64, d.max_memory_bytes / MB)?.saturating_mul(MB),
        },
        tmp_bytes: at_least("tmp_mb", e.tmp_mb, 1, d.tmp_bytes / MB)?.saturating_mul(MB),
        read_paths: e.read_paths.clone(),
        write_paths: e.write_paths.clone(),
        pass_env: e.env.clone(),
        ..d
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{LlmEnv, ProfileConfig};

    fn settings() -> AssistantConfig {
        AssistantConfig::default()
    }

    /// Settings with an OpenAI-compatible LLM from the environment (`CLAW_LLM_*`).
    fn openai_settings() -> AssistantConfig {
        let mut s = settings();
        s.llm_env = LlmEnv {
            api: Some("openai".into()),
            base_url: Some("http://127.0.0.1:9".into()),
            model: Some("m".into()),
            api_key: None,
        };
        s
    }

    /// `s` resolved without flags or environment.
    fn resolved(s: &AssistantConfig) -> AgentSettings {
        resolve(s, &Overrides::default(), &no_env).unwrap()
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn missing_llm_names_the_variables() {
        let err = resolve(&settings(), &Overrides::default(), &no_env).unwrap_err();
        let msg = err.to_string();
        for v in [
            ENV_LLM_MODEL,
            ENV_LLM_BASE_URL,
            ENV_LLM_API,
            ENV_LLM_API_KEY,
        ] {
            assert!(msg.contains(v), "{msg}");
        }
    }

    #[test]
    fn env_defines_the_profile_and_flags_override() {
        let mut s = settings();
        s.llm_env = LlmEnv {
            api: Some("anthropic".into()),
            base_url: Some("http://127.0.0.1:9".into()),
            model: Some("m-env".into()),
            api_key: Some("sk-secret-key".into()),
        };
        let a = resolved(&s);
        assert_eq!(a.profiles.len(), 1);
        assert_eq!(a.profiles[0].model, "m-env");
        assert_eq!(a.max_iterations, 30);
        assert_eq!(a.secrets(), vec!["sk-secret-key".to_string()]);
        let a = resolve(
            &s,
            &Overrides {
                model: Some("m-flag".into()),
                profile: None,
            },
            &no_env,
        )
        .unwrap();
        assert_eq!(a.profiles[0].model, "m-flag");
    }

    #[test]
    fn file_jail_is_on_by_default() {
        let mut s = openai_settings();
        assert!(resolved(&s).jail_to_workspace);
        s.agent.jail_to_workspace = Some(false);
        assert!(!resolved(&s).jail_to_workspace);
    }

    #[test]
    fn confirmation_of_side_effects_is_on_by_default() {
        let mut s = openai_settings();
        assert!(resolved(&s).confirm_side_effects);
        s.agent.confirm_side_effects = Some(false);
        assert!(!resolved(&s).confirm_side_effects);
        s.agent.confirm_side_effects = Some(true);
        assert!(resolved(&s).confirm_side_effects);
    }

    #[test]
    fn profile_flag_reorders_and_unknown_is_an_error() {
        let mut s = settings();
        let p = |name: &str| ProfileConfig {
            name: Some(name.into()),
            api: "openai".into(),
            base_url: Some("http://127.0.0.1:1".into()),
            model: format!("model-{name}"),
            api_key_env: Some("KEY_VAR".into()),
            context_window: Some(8192),
        };
        s.agent.profiles = vec![p("a"), p("b")];
        s.agent.max_iterations = Some(7);
        s.agent.brave_api_key_env = Some("BRAVE".into());
        s.agent.timezone = Some("+02:00".into());
        let env = |k: &str| match k {
            "KEY_VAR" => Some("key-from-env".to_string()),
            "BRAVE" => Some("brave-key".to_string()),
            _ => None,
        };
        let a = resolve(
            &s,
            &Overrides {
                profile: Some("b".into()),
                model: None,
            },
            &env,
        )
        .unwrap();
        let names: Vec<&str> = a.profiles.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(a.max_iterations, 7);
        assert_eq!(a.context_window, 8192);
        assert_eq!(a.brave_api_key.as_deref(), Some("brave-key"));
        assert_eq!(a.zone, Zone::parse("+02:00").ok());
        assert_eq!(
            a.utc_offset(&Clock::System),
            FixedOffset::east_opt(7200).unwrap()
        );
        assert!(a.secrets().contains(&"key-from-env".to_string()));
        let err = resolve(
            &s,
            &Overrides {
                profile: Some("zzz".into()),
                model: None,
            },
            &env,
        )
        .unwrap_err();
        assert!(err.to_string().contains("zzz") && err.to_string().contains("a, b"));
    }

    #[test]
    fn bad_values_are_named() {
        let mut s = settings();
        s.llm_env.model = Some("m".into());
        s.agent.max_iterations = Some(0);
        assert!(
            resolve(&s, &Overrides::default(), &no_env)
                .unwrap_err()
                .to_string()
                .contains("agent.max_iterations")
        );
        s.agent.max_iterations = None;
        s.agent.timezone = Some("Mars/Olympus".into());
        let err = resolve(&s, &Overrides::default(), &no_env)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("agent.timezone") && err.contains("`Mars/Olympus` is not a time zone"),
            "{err}"
        );
        // IANA names are time zones like any other.
        s.agent.timezone = Some("Europe/Berlin".into());
        let a = resolved(&s);
        assert_eq!(a.zone.map(|z| z.name()).as_deref(), Some("Europe/Berlin"));
    }

    #[test]
    fn exec_section_builds_the_sandbox_policy() {
        use crate::config::ExecConfig;
        let exec: ExecConfig = serde_json::from_str(
            r#"{"network": true, "max_processes": 64, "max_file_mb": 2, "max_write_mb": 3,
                "read_paths": ["/opt/tools"], "write_paths": ["/srv/cache"]}"#,
        )
        .unwrap();
        let p = sandbox_policy(&exec).unwrap();
        assert!(p.enabled && p.network);
        assert_eq!(p.max_processes, 64);
        assert_eq!(p.max_file_bytes, 2 * 1024 * 1024);
        assert_eq!(p.max_write_bytes, 3 * 1024 * 1024);
        let off: ExecConfig = serde_json::from_str(r#"{"max_write_mb": 0}"#).unwrap();
        assert_eq!(sandbox_policy(&off).unwrap().max_write_bytes, 0);
        assert_eq!(p.read_paths, vec![std::path::PathBuf::from("/opt/tools")]);
        assert_eq!(p.write_paths, vec![std::path::PathBuf::from("/srv/cache")]);
        // Defaults: sandbox on, network off.
        let d = sandbox_policy(&ExecConfig::default()).unwrap();
        assert!(d.enabled && !d.network);
        assert_eq!(d, SandboxPolicy::default());
        // Bad values are named; unknown keys are refused.
        let exec: ExecConfig = serde_json::from_str(r#"{"max_processes": 2}"#).unwrap();
        let e = sandbox_policy(&exec).unwrap_err().to_string();
        assert!(e.contains("exec.max_processes"), "{e}");
        let exec: ExecConfig = serde_json::from_str(r#"{"read_paths": ["relative/dir"]}"#).unwrap();
        assert!(sandbox_policy(&exec).is_err());
        let e = serde_json::from_str::<ExecConfig>(r#"{"netwrok": true}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("netwrok"), "{e}");
    }
}
