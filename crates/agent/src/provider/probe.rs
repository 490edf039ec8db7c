//! `claw doctor`'s LLM check: one bounded `GET /v1/models` per profile. It tells
//! whether the server answers, whether the key is accepted and whether it serves
//! the configured model, without spending a generation. Keys are sent as the
//! chat requests send them and never appear in the result.

use super::{Api, Profile};
use claw_base::http::HttpOptions;
use std::time::Duration;

/// What one profile's probe found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LlmProbe {
    /// The profile's name.
    pub profile: String,
    /// `openai` or `anthropic`.
    pub api: &'static str,
    /// The configured model.
    pub model: String,
    /// Reached, and the key (if any) accepted.
    pub ok: bool,
    /// Whether the server lists the model (None: it does not list models).
    pub model_listed: Option<bool>,
    /// What was found, or why it failed.
    pub detail: String,
    /// What went wrong, as a class the caller can act on (None: nothing).
    pub problem: Option<LlmProblem>,
}

/// Why an LLM probe failed (or found the model missing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LlmProblem {
    /// No HTTP client could be built, or the server could not be reached.
    Unreachable,
    /// HTTP 401/403: the key is missing or wrong.
    KeyRefused,
    /// Any other non-success answer.
    HttpError,
    /// Reached, but the configured model is not in `/v1/models`.
    ModelUnlisted,
}

/// `{base}/v1/models`, whether or not `base_url` ends in `/v1`.
fn models_url(profile: &Profile) -> String {
    let base = profile.base_url.trim_end_matches('/');
    if base.ends_with("/v1") {
        format!("{base}/models")
    } else {
        format!("{base}/v1/models")
    }
}

/// Probe one profile, bounded by `timeout` (connect included).
pub async fn probe(profile: &Profile, timeout: Duration) -> LlmProbe {
    let mut out = LlmProbe {
        profile: profile.name.clone(),
        api: profile.api.as_str(),
        model: profile.model.clone(),
        ok: false,
        model_listed: None,
        detail: String::new(),
        problem: None,
    };
    let client = match claw_base::http::builder(&HttpOptions {
        connect_timeout: timeout,
        timeout: Some(timeout),
        system_proxy: true,
        ..HttpOptions::default()
    })
    .build()
    {
        Ok(c) => c,
        Err(e) => {
            out.detail = claw_base::http::error_line(e);
            out.problem = Some(LlmProblem::Unreachable);
            return out;
        }
    };
    let mut req = client.get(models_url(profile));
    match (profile.api, &profile.api_key) {
        (Api::OpenAi, Some(k)) => req = req.bearer_auth(k),
        (Api::Anthropic, key) => {
            req = req.header("anthropic-version", super::anthropic::ANTHROPIC_VERSION);
            if let Some(k) = key {
                req = req.header("x-api-key", k);
            }
        }
        (Api::OpenAi, None) => {}
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) => {
            out.detail = format!(
                "cannot reach {}: {}",
                profile.base_url,
                claw_base::http::error_line(e)
            );
            out.problem = Some(LlmProblem::Unreachable);
            return out;
        }
    };
    let status = resp.status().as_u16();
    let body: serde_json::Value = resp.json().await.unwrap_or(serde_json::Value::Null);
    match status {
        200..=299 => {
            out.ok = true;
            let ids: Vec<&str> = body["data"]
                .as_array()
                .map(|a| a.iter().filter_map(|m| m["id"].as_str()).collect())
                .unwrap_or_default();
            let listed = ids.iter().any(|id| *id == profile.model);
            out.model_listed = Some(listed);
            if !listed {
                out.problem = Some(LlmProblem::ModelUnlisted);
            }
            out.detail = if listed {
                format!("{} answers and serves {}", profile.base_url, profile.model)
            } else {
                format!(
                    "{} answers, but does not list the model {} ({} model{} listed)",
                    profile.base_url,
                    profile.model,
                    ids.len(),
                    if ids.len() == 1 { "" } else { "s" }
                )
            };
        }
        401 | 403 => {
            out.problem = Some(LlmProblem::KeyRefused);
            out.detail = format!(
                "{} refused the key (HTTP {status}{})",
                profile.base_url,
                api_message(&body)
            );
        }
        404 | 405 => {
            // Reachable and not refusing us; it just does not list models.
            out.ok = true;
            out.detail = format!("{} answers (it does not list models)", profile.base_url);
        }
        _ => {
            out.problem = Some(LlmProblem::HttpError);
            out.detail = format!(
                "{} answered HTTP {status}{}",
                profile.base_url,
                api_message(&body)
            );
        }
    }
    out
}

/// `: message` from an OpenAI or Anthropic error body, capped.
fn api_message(body: &serde_json::Value) -> String {
    let m = body["error"]["message"]
        .as_str()
        .or_else(|| body["error"].as_str())
        .unwrap_or("");
    if m.is_empty() {
        String::new()
    } else {
        format!(": {}", m.chars().take(200).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_url_with_and_without_v1() {
        let mut p = Profile {
            name: "p".into(),
            api: Api::OpenAi,
            base_url: "http://h:1/v1/".into(),
            model: "m".into(),
            api_key: None,
            context_window: 1,
        };
        assert_eq!(models_url(&p), "http://h:1/v1/models");
        p.base_url = "http://h:1".into();
        assert_eq!(models_url(&p), "http://h:1/v1/models");
    }
}
