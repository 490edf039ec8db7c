//! The `gateway` section of the config file and its resolved form: where the HTTP
//! server binds, how long shutdown waits for running turns, how many sessions run
//! turns at once, how deep the bus queues are, how often a quiet chat stream
//! sends an SSE keep-alive comment, how long a connection may take to send a
//! request head (or sit idle between requests) and how many connections one
//! client address may hold open, and how long an approval request waits for its
//! answer. Loopback only unless `bind` says otherwise.

use serde::Deserialize;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Default port of `claw gateway`.
pub const DEFAULT_PORT: u16 = 18790;
/// Default shutdown grace period.
pub const DEFAULT_GRACE_SECONDS: u64 = 10;
/// Default number of sessions running a turn at the same time.
pub const DEFAULT_MAX_CONCURRENT_SESSIONS: usize = 8;
/// Default capacity of the inbound and outbound queues.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1024;
/// Default seconds of silence before a chat stream sends `: keep-alive`.
pub const DEFAULT_SSE_KEEPALIVE_SECONDS: u64 = 15;
/// Default seconds a connection has to send a complete request head (request
/// line and headers); also how long a keep-alive connection may wait idle for
/// its next request. A response, streaming or not, is never cut by it.
pub const DEFAULT_HEADER_READ_TIMEOUT_SECONDS: u64 = 10;
/// Default number of connections one client address may hold open at once.
pub const DEFAULT_MAX_CONNECTIONS_PER_CLIENT: usize = 64;

/// `gateway` in `~/.claw/config.json`. Unknown keys are an error naming the key.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// Address to bind (default `127.0.0.1`). Anything but loopback must be
    /// written here explicitly.
    pub bind: Option<IpAddr>,
    /// Port (default 18790; `--port` overrides).
    pub port: Option<u16>,
    /// Seconds SIGTERM/SIGINT waits for running turns before cancelling them.
    pub grace_seconds: Option<u64>,
    /// Sessions running a turn at the same time (others queue).
    pub max_concurrent_sessions: Option<usize>,
    /// Capacity of the inbound and outbound message queues.
    pub queue_capacity: Option<usize>,
    /// Seconds of silence on a `/v1/chat/completions` stream before the gateway
    /// sends an SSE comment (`: keep-alive`) so proxies and clients keep waiting
    /// for a slow first token (default 15; 0 disables).
    pub sse_keepalive_seconds: Option<u64>,
    /// Seconds a connection has to send a complete request head, and the most a
    /// keep-alive connection waits idle for the next one; then it is closed
    /// (default 10; 0 counts as 1: it cannot be turned off).
    pub header_read_timeout_seconds: Option<u64>,
    /// Connections one client address may hold open; more are answered 503 and
    /// closed at once (default 64; 0 counts as 1).
    pub max_connections_per_client: Option<usize>,
    /// Seconds an approval request (a gated tool call of a streamed chat turn)
    /// waits for `POST /v1/approvals/{id}` before it counts as a denial
    /// (default 120; 0 counts as 1: the wait is always bounded).
    pub approval_timeout_seconds: Option<u64>,
}

/// The gateway's resolved settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    pub bind: IpAddr,
    pub port: u16,
    pub grace: Duration,
    pub max_concurrent_sessions: usize,
    pub queue_capacity: usize,
    /// None: no keep-alives.
    pub sse_keepalive: Option<Duration>,
    /// Time to send a request head; the idle limit between requests.
    pub header_read_timeout: Duration,
    pub max_connections_per_client: usize,
    /// How long an approval request waits before it counts as a denial.
    pub approval_timeout: Duration,
}

impl Default for GatewayConfig {
    fn default() -> GatewayConfig {
        GatewayConfig::from_section(&GatewaySection::default())
    }
}

impl GatewayConfig {
    /// Defaults filled in; zero capacities and a zero header timeout become 1.
    pub fn from_section(s: &GatewaySection) -> GatewayConfig {
        GatewayConfig {
            bind: s.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port: s.port.unwrap_or(DEFAULT_PORT),
            grace: Duration::from_secs(s.grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS)),
            max_concurrent_sessions: s
                .max_concurrent_sessions
                .unwrap_or(DEFAULT_MAX_CONCURRENT_SESSIONS)
                .max(1),
            queue_capacity: s.queue_capacity.unwrap_or(DEFAULT_QUEUE_CAPACITY).max(1),
            sse_keepalive: match s
                .sse_keepalive_seconds
                .unwrap_or(DEFAULT_SSE_KEEPALIVE_SECONDS)
            {
                0 => None,
                n => Some(Duration::from_secs(n)),
            },
            header_read_timeout: Duration::from_secs(
                s.header_read_timeout_seconds
                    .unwrap_or(DEFAULT_HEADER_READ_TIMEOUT_SECONDS)
                    .max(1),
            ),
            max_connections_per_client: s
                .max_connections_per_client
                .unwrap_or(DEFAULT_MAX_CONNECTIONS_PER_CLIENT)
                .max(1),
            approval_timeout: Duration::from_secs(
                s.approval_timeout_seconds
                    .unwrap_or(crate::approvals::DEFAULT_APPROVAL_TIMEOUT_SECONDS)
                    .max(1),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_loopback_18790() {
        let c = GatewayConfig::default();
        assert!(c.bind.is_loopback());
        assert_eq!(c.port, DEFAULT_PORT);
        assert_eq!(c.grace, Duration::from_secs(10));
        assert_eq!(c.sse_keepalive, Some(Duration::from_secs(15)));
        assert_eq!(c.header_read_timeout, Duration::from_secs(10));
        assert_eq!(c.max_connections_per_client, 64);
        assert_eq!(c.approval_timeout, Duration::from_secs(120));
        let s: GatewaySection =
            serde_json::from_str(r#"{"approval_timeout_seconds": 0}"#).expect("valid");
        assert_eq!(
            GatewayConfig::from_section(&s).approval_timeout,
            Duration::from_secs(1),
            "the wait is always bounded"
        );
    }

    #[test]
    fn connection_limits_are_configurable_and_never_off() {
        for (json, secs, conns) in [
            (
                r#"{"header_read_timeout_seconds": 2, "max_connections_per_client": 4}"#,
                2,
                4,
            ),
            // 0 would turn the limit off: it is raised to 1.
            (
                r#"{"header_read_timeout_seconds": 0, "max_connections_per_client": 0}"#,
                1,
                1,
            ),
        ] {
            let s: GatewaySection = serde_json::from_str(json).expect("valid");
            let c = GatewayConfig::from_section(&s);
            assert_eq!(c.header_read_timeout, Duration::from_secs(secs), "{json}");
            assert_eq!(c.max_connections_per_client, conns, "{json}");
        }
    }

    #[test]
    fn keepalive_is_configurable_and_zero_disables_it() {
        let s: GatewaySection =
            serde_json::from_str(r#"{"sse_keepalive_seconds": 2}"#).expect("valid");
        assert_eq!(
            GatewayConfig::from_section(&s).sse_keepalive,
            Some(Duration::from_secs(2))
        );
        let s: GatewaySection =
            serde_json::from_str(r#"{"sse_keepalive_seconds": 0}"#).expect("valid");
        assert_eq!(GatewayConfig::from_section(&s).sse_keepalive, None);
    }

    #[test]
    fn section_parses_and_rejects_unknown_keys() {
        let s: GatewaySection = serde_json::from_str(
            r#"{"bind": "0.0.0.0", "grace_seconds": 3, "max_concurrent_sessions": 0}"#,
        )
        .expect("valid section");
        let c = GatewayConfig::from_section(&s);
        assert!(!c.bind.is_loopback());
        assert_eq!(c.grace, Duration::from_secs(3));
        assert_eq!(c.max_concurrent_sessions, 1);
        let err = serde_json::from_str::<GatewaySection>(r#"{"bnd": "0.0.0.0"}"#)
            .expect_err("unknown key");
        assert!(err.to_string().contains("bnd"), "{err}");
    }
}
