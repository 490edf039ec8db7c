//! The `channels` section of the config file (`channels.matrix`,
//! `channels.telegram`) and its resolved form. Tokens are never written in the
//! file: the section names an environment variable, read once at resolution.

use crate::ChannelError;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Telegram's limit on one message (UTF-16 code units of the text).
pub const TELEGRAM_LIMIT: usize = 4096;
/// Default longest Matrix message claw sends, in characters. (An event may hold
/// up to 64 KiB; long walls of text are split earlier so clients show them well.)
pub const MATRIX_DEFAULT_LIMIT: usize = 4000;
/// The Telegram Bot API.
pub const TELEGRAM_BASE_URL: &str = "https://api.telegram.org";

/// `channels` in `~/.claw/config.json`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelsSection {
    pub matrix: Option<MatrixSection>,
    pub telegram: Option<TelegramSection>,
}

/// `channels.matrix`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixSection {
    /// e.g. `https://matrix.example.org`.
    pub homeserver: String,
    /// The bot's user id, e.g. `@claw:example.org`.
    pub user_id: String,
    /// Name of the environment variable that holds the access token.
    pub access_token_env: String,
    /// User ids allowed to talk to the assistant (empty: nobody).
    #[serde(default)]
    pub allow_from: Vec<String>,
    /// Longest message sent (characters; default 4000).
    pub max_message_chars: Option<usize>,
}

/// `channels.telegram`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramSection {
    /// Name of the environment variable that holds the bot token.
    pub token_env: String,
    /// User ids (numbers, as text) or `@usernames` allowed (empty: nobody).
    #[serde(default)]
    pub allow_from: Vec<String>,
    /// The Bot API server (default `https://api.telegram.org`).
    pub base_url: Option<String>,
}

/// Matrix, resolved.
#[derive(Clone)]
pub struct MatrixSettings {
    pub homeserver: String,
    pub user_id: String,
    pub access_token: String,
    pub allow_from: Vec<String>,
    pub max_message_chars: usize,
}

/// Telegram, resolved.
#[derive(Clone)]
pub struct TelegramSettings {
    pub token: String,
    pub allow_from: Vec<String>,
    pub base_url: String,
}

impl std::fmt::Debug for MatrixSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixSettings")
            .field("homeserver", &self.homeserver)
            .field("user_id", &self.user_id)
            .field("access_token", &"<set>")
            .field("allow_from", &self.allow_from)
            .finish()
    }
}

impl std::fmt::Debug for TelegramSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramSettings")
            .field("token", &"<set>")
            .field("allow_from", &self.allow_from)
            .field("base_url", &self.base_url)
            .finish()
    }
}

/// Every configured channel, resolved.
#[derive(Debug, Clone, Default)]
pub struct ChannelsSettings {
    pub matrix: Option<MatrixSettings>,
    pub telegram: Option<TelegramSettings>,
}

impl ChannelsSettings {
    pub fn is_empty(&self) -> bool {
        self.matrix.is_none() && self.telegram.is_none()
    }
}

fn token(
    env: &BTreeMap<String, String>,
    channel: &'static str,
    key: &'static str,
    var: &str,
) -> Result<String, ChannelError> {
    env.get(var)
        .filter(|t| !t.trim().is_empty())
        .map(|t| t.trim().to_string())
        .ok_or_else(|| ChannelError::MissingToken {
            channel,
            key,
            var: var.to_string(),
        })
}

/// A Matrix user id: `@name:server`, with both parts non-empty and no spaces.
fn is_matrix_user(id: &str) -> bool {
    id.strip_prefix('@')
        .and_then(|rest| rest.split_once(':'))
        .is_some_and(|(name, server)| {
            !name.is_empty() && !server.is_empty() && !id.contains(char::is_whitespace)
        })
}

/// A Telegram sender: a numeric user id (as text) or an `@username`.
fn is_telegram_user(id: &str) -> bool {
    let digits = id.strip_prefix('-').unwrap_or(id);
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        || id.strip_prefix('@').is_some_and(|u| {
            !u.is_empty() && u.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
}

/// An `http(s)://host…` URL, or why not.
fn check_url(channel: &'static str, key: &str, url: &str) -> Result<(), ChannelError> {
    let bad = |why: &str| ChannelError::Config {
        channel,
        message: format!("{key} {url:?} {why}"),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&format!("is not a URL ({e})")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("is not an http:// or https:// URL"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("has no host"));
    }
    Ok(())
}

impl ChannelsSection {
    /// Check the section as loaded (no environment needed): URLs, user ids and
    /// `allow_from` entries. Every command runs it when it reads the config, so
    /// a mistake is an error naming the key instead of a gateway that retries
    /// forever.
    pub fn validate(&self) -> Result<(), ChannelError> {
        if let Some(m) = &self.matrix {
            check_url("matrix", "homeserver", &m.homeserver)?;
            if !is_matrix_user(&m.user_id) {
                return Err(ChannelError::Config {
                    channel: "matrix",
                    message: format!(
                        "user_id {:?} is not a Matrix user id (@name:server)",
                        m.user_id
                    ),
                });
            }
            if let Some(bad) = m
                .allow_from
                .iter()
                .find(|a| *a != "*" && !is_matrix_user(a))
            {
                return Err(ChannelError::Config {
                    channel: "matrix",
                    message: format!(
                        "allow_from entry {bad:?} is not a Matrix user id (@name:server) or \"*\""
                    ),
                });
            }
        }
        if let Some(t) = &self.telegram {
            if let Some(url) = &t.base_url {
                check_url("telegram", "base_url", url)?;
            }
            if let Some(bad) = t
                .allow_from
                .iter()
                .find(|a| *a != "*" && !is_telegram_user(a))
            {
                return Err(ChannelError::Config {
                    channel: "telegram",
                    message: format!(
                        "allow_from entry {bad:?} is not a numeric user id, an @username or \"*\""
                    ),
                });
            }
        }
        Ok(())
    }

    /// What is valid but probably not meant: a channel nobody may talk to.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self
            .matrix
            .as_ref()
            .is_some_and(|m| m.allow_from.is_empty())
        {
            out.push(
                "channels.matrix.allow_from is empty: nobody can talk to the assistant on Matrix \
                 (add your user id, e.g. \"@you:example.org\")"
                    .to_string(),
            );
        }
        if self
            .telegram
            .as_ref()
            .is_some_and(|t| t.allow_from.is_empty())
        {
            out.push(
                "channels.telegram.allow_from is empty: nobody can talk to the assistant on \
                 Telegram (add your numeric user id or @username)"
                    .to_string(),
            );
        }
        out
    }

    /// Validate ([`ChannelsSection::validate`]), read the tokens from `env` and
    /// fill in defaults.
    pub fn resolve(
        &self,
        env: &BTreeMap<String, String>,
    ) -> Result<ChannelsSettings, ChannelError> {
        self.validate()?;
        let matrix = match &self.matrix {
            None => None,
            Some(m) => Some(MatrixSettings {
                homeserver: m.homeserver.trim_end_matches('/').to_string(),
                user_id: m.user_id.clone(),
                access_token: token(env, "matrix", "access_token_env", &m.access_token_env)?,
                allow_from: m.allow_from.clone(),
                max_message_chars: m.max_message_chars.unwrap_or(MATRIX_DEFAULT_LIMIT).max(16),
            }),
        };
        let telegram = match &self.telegram {
            None => None,
            Some(t) => Some(TelegramSettings {
                token: token(env, "telegram", "token_env", &t.token_env)?,
                allow_from: t.allow_from.clone(),
                base_url: t
                    .base_url
                    .as_deref()
                    .unwrap_or(TELEGRAM_BASE_URL)
                    .trim_end_matches('/')
                    .to_string(),
            }),
        };
        Ok(ChannelsSettings { matrix, telegram })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_come_from_the_named_variable() {
        let s: ChannelsSection = serde_json::from_str(
            r#"{"matrix": {"homeserver": "http://127.0.0.1:8008/", "user_id": "@claw:localhost",
                "access_token_env": "CLAW_MATRIX_TOKEN", "allow_from": ["@me:localhost"]},
                "telegram": {"token_env": "TG", "allow_from": ["42"]}}"#,
        )
        .expect("parses");
        let err = s.resolve(&BTreeMap::new()).expect_err("no token");
        assert!(err.to_string().contains("CLAW_MATRIX_TOKEN"), "{err}");
        let env: BTreeMap<String, String> = [
            ("CLAW_MATRIX_TOKEN".to_string(), "syt_secret".to_string()),
            ("TG".to_string(), "123:abc".to_string()),
        ]
        .into();
        let r = s.resolve(&env).expect("resolves");
        let m = r.matrix.as_ref().expect("matrix");
        assert_eq!(m.homeserver, "http://127.0.0.1:8008");
        assert_eq!(m.access_token, "syt_secret");
        assert!(
            !format!("{r:?}").contains("syt_secret"),
            "tokens never in Debug"
        );
        assert_eq!(r.telegram.as_ref().expect("tg").base_url, TELEGRAM_BASE_URL);
    }

    #[test]
    fn bad_urls_ids_and_allow_lists_are_refused_at_load() {
        let load = |j: &str| serde_json::from_str::<ChannelsSection>(j).expect("parses");
        let ok = load(
            r#"{"matrix": {"homeserver": "https://m.example.org", "user_id": "@claw:example.org",
                "access_token_env": "T", "allow_from": ["@me:example.org", "*"]},
                "telegram": {"token_env": "TG", "allow_from": ["42", "-100123", "@some_user"],
                "base_url": "http://127.0.0.1:9000"}}"#,
        );
        assert!(ok.validate().is_ok());
        assert!(ok.warnings().is_empty());
        for (json, want) in [
            (
                r#"{"matrix": {"homeserver": "not a url", "user_id": "@c:x", "access_token_env": "T"}}"#,
                "homeserver \"not a url\" is not a URL",
            ),
            (
                r#"{"matrix": {"homeserver": "ftp://x.org", "user_id": "@c:x", "access_token_env": "T"}}"#,
                "not an http:// or https:// URL",
            ),
            (
                r#"{"matrix": {"homeserver": "https://x.org", "user_id": "claw", "access_token_env": "T"}}"#,
                "not a Matrix user id",
            ),
            (
                r#"{"matrix": {"homeserver": "https://x.org", "user_id": "@c:x", "access_token_env": "T",
                    "allow_from": ["me"]}}"#,
                "allow_from entry \"me\"",
            ),
            (
                r#"{"telegram": {"token_env": "TG", "allow_from": ["joe smith"]}}"#,
                "allow_from entry \"joe smith\"",
            ),
            (
                r#"{"telegram": {"token_env": "TG", "base_url": "api.telegram.org"}}"#,
                "base_url",
            ),
        ] {
            let err = load(json).validate().expect_err(json).to_string();
            assert!(err.contains(want), "{json}: {err}");
            // resolve refuses it too, before looking for tokens.
            let err = load(json)
                .resolve(&BTreeMap::new())
                .expect_err(json)
                .to_string();
            assert!(err.contains(want), "{json}: {err}");
        }
        let empty = load(
            r#"{"matrix": {"homeserver": "https://x.org", "user_id": "@c:x", "access_token_env": "T"},
                "telegram": {"token_env": "TG"}}"#,
        );
        assert!(empty.validate().is_ok());
        let w = empty.warnings();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].contains("channels.matrix.allow_from is empty"),
            "{w:?}"
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = serde_json::from_str::<ChannelsSection>(
            r#"{"telegram": {"token": "123:abc", "token_env": "X"}}"#,
        )
        .expect_err("a token in the file is not a key");
        assert!(err.to_string().contains("token"), "{err}");
    }
}
