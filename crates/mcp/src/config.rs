//! The `mcp` section of the config file:
//!
//! ```json
//! "mcp": {
//!   "read_only": false,
//!   "startup_timeout_secs": 10,
//!   "call_timeout_secs": 60,
//!   "servers": {
//!     "fs":   {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/notes"], "env": {}},
//!     "docs": {"url": "http://127.0.0.1:8931/mcp"}
//!   }
//! }
//! ```
//!
//! `read_only` disables `memory_append` in `claw mcp`; `servers` are the MCP
//! servers whose tools claw offers to its model (stdio with `command`, streamable
//! HTTP with `url`, exactly one of the two). Unknown keys are an error.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Default time a server has to start, initialise and list its tools.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Default time limit of one tool call.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// `mcp` in the config file.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// `claw mcp` serves no write tool (`memory_append` is not offered).
    #[serde(default)]
    pub read_only: bool,
    /// Seconds a configured server has to start and list its tools.
    pub startup_timeout_secs: Option<u64>,
    /// Seconds one call of a server's tool may take.
    pub call_timeout_secs: Option<u64>,
    /// The MCP servers whose tools claw offers to its model, by name.
    #[serde(default)]
    pub servers: BTreeMap<String, ServerSpec>,
}

impl McpConfig {
    /// The start-up timeout (at least 1 s).
    pub fn startup_timeout(&self) -> Duration {
        self.startup_timeout_secs
            .map(|s| Duration::from_secs(s.max(1)))
            .unwrap_or(DEFAULT_STARTUP_TIMEOUT)
    }

    /// The call timeout (at least 1 s).
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout_secs
            .map(|s| Duration::from_secs(s.max(1)))
            .unwrap_or(DEFAULT_CALL_TIMEOUT)
    }
}

/// One configured server: a command speaking MCP on stdio, or a streamable-HTTP URL.
#[derive(Debug, Default, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// The program (found on `PATH`) for a stdio server.
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables for it.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The endpoint of a streamable-HTTP server.
    pub url: Option<String>,
}

/// How a server is reached, once checked.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    Http {
        url: String,
    },
}

/// A configured server that cannot be used as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "mcp.servers.{name}: give either `command` (stdio) or `url` (streamable HTTP), not both"
    )]
    Both { name: String },
    #[error("mcp.servers.{name}: give `command` (stdio) or `url` (streamable HTTP)")]
    Neither { name: String },
    #[error("mcp.servers.{name}: `url` must start with http:// or https://")]
    BadUrl { name: String },
    #[error(
        "mcp.servers: `{name}` is not a usable server name (letters, digits, `-` and `_`, and no `__`)"
    )]
    BadName { name: String },
}

impl ServerSpec {
    /// The transport this spec describes.
    pub fn transport(&self, name: &str) -> Result<Transport, SpecError> {
        if !valid_server_name(name) {
            return Err(SpecError::BadName { name: name.into() });
        }
        match (&self.command, &self.url) {
            (Some(_), Some(_)) => Err(SpecError::Both { name: name.into() }),
            (None, None) => Err(SpecError::Neither { name: name.into() }),
            (Some(c), None) if c.trim().is_empty() => Err(SpecError::Neither { name: name.into() }),
            (Some(c), None) => Ok(Transport::Stdio {
                command: c.clone(),
                args: self.args.clone(),
                env: self.env.clone(),
            }),
            (None, Some(u)) => {
                if u.starts_with("http://") || u.starts_with("https://") {
                    Ok(Transport::Http { url: u.clone() })
                } else {
                    Err(SpecError::BadUrl { name: name.into() })
                }
            }
        }
    }
}

/// A server name usable inside `mcp__<server>__<tool>`.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 32
        && !name.contains("__")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_kinds_and_refuses_unknown_keys() {
        let c: McpConfig = serde_json::from_str(
            r#"{"read_only": true, "servers": {
                "fs": {"command": "node", "args": ["x.js"], "env": {"A": "1"}},
                "web": {"url": "http://127.0.0.1:9/mcp"}}}"#,
        )
        .unwrap();
        assert!(c.read_only);
        assert_eq!(
            c.servers["fs"].transport("fs").unwrap(),
            Transport::Stdio {
                command: "node".into(),
                args: vec!["x.js".into()],
                env: [("A".to_string(), "1".to_string())].into()
            }
        );
        assert_eq!(
            c.servers["web"].transport("web").unwrap(),
            Transport::Http {
                url: "http://127.0.0.1:9/mcp".into()
            }
        );
        assert_eq!(c.call_timeout(), DEFAULT_CALL_TIMEOUT);
        let e = serde_json::from_str::<McpConfig>(r#"{"servers": {"a": {"cmd": "x"}}}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cmd"), "{e}");
        assert!(serde_json::from_str::<McpConfig>(r#"{"readonly": true}"#).is_err());
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let both = ServerSpec {
            command: Some("x".into()),
            url: Some("http://h/".into()),
            ..Default::default()
        };
        assert!(matches!(both.transport("a"), Err(SpecError::Both { .. })));
        assert!(matches!(
            ServerSpec::default().transport("a"),
            Err(SpecError::Neither { .. })
        ));
        let ftp = ServerSpec {
            url: Some("ftp://h/".into()),
            ..Default::default()
        };
        assert!(matches!(ftp.transport("a"), Err(SpecError::BadUrl { .. })));
        let ok = ServerSpec {
            command: Some("x".into()),
            ..Default::default()
        };
        for bad in ["", "a__b", "a b", "a/b"] {
            assert!(
                matches!(ok.transport(bad), Err(SpecError::BadName { .. })),
                "{bad}"
            );
        }
        assert!(ok.transport("my-fs_2").is_ok());
    }
}
