//! The REPL's gateway-only pieces: Ctrl-C during a turn cancels the remote turn
//! (`POST /v1/sessions/{key}/cancel`: the gateway stops it, keeps what was said,
//! and the session takes the next message), and `/new` starts a fresh session
//! under a new key (the old transcript stays in the gateway, untouched).

use claw_gateway::client::Client;

/// While alive, Ctrl-C asks the gateway to cancel `session`'s running turn.
pub struct CancelOnCtrlC(Option<tokio::task::JoinHandle<()>>);

impl CancelOnCtrlC {
    /// Listens on the runtime this (blocking) thread belongs to; none: no listener.
    pub fn new(client: &Client, session: &str) -> CancelOnCtrlC {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return CancelOnCtrlC(None);
        };
        let client = client.clone();
        let path = cancel_path(session);
        CancelOnCtrlC(Some(rt.spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let cancel = client.clone();
                let path = path.clone();
                // The cancel runs beside the listener: a gateway that does not
                // answer must not leave Ctrl-C dead.
                tokio::task::spawn_blocking(move || cancel.request("POST", &path, None));
            }
            // A second Ctrl-C while the turn has not ended: leave now, as a
            // process interrupted by SIGINT does.
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        })))
    }
}

impl Drop for CancelOnCtrlC {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// Runs `turn` with Ctrl-C cancelling `session`'s remote turn.
pub fn with_cancel_on_ctrl_c<T>(client: &Client, session: &str, turn: impl FnOnce() -> T) -> T {
    let _ctrl_c = CancelOnCtrlC::new(client, session);
    turn()
}

/// `/stop` between turns: cancels the session's sub-agents in the gateway; the
/// status line to show.
pub fn stop(client: &Client, session: &str) -> String {
    match client.request("POST", &cancel_path(session), None) {
        Ok(r) if r.status == 200 => {
            let n = serde_json::from_slice::<serde_json::Value>(&r.body)
                .ok()
                .and_then(|v| v["subagents_cancelled"].as_u64())
                .unwrap_or(0);
            match n {
                0 => "nothing is running".to_string(),
                1 => "cancelled 1 sub-agent".to_string(),
                n => format!("cancelled {n} sub-agents"),
            }
        }
        Ok(r) => format!("the gateway refused /stop (HTTP {})", r.status),
        Err(e) => format!("could not reach the gateway: {e}"),
    }
}

/// `/v1/sessions/{key}/cancel` with the key percent-encoded.
pub fn cancel_path(session: &str) -> String {
    let mut key = String::new();
    for b in session.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            key.push(b as char);
        } else {
            key.push_str(&format!("%{b:02X}"));
        }
    }
    format!("/v1/sessions/{key}/cancel")
}

/// A fresh session key for `/new`: the base key (without an earlier `/new`'s
/// suffix) plus the time, so each `/new` gets a key of its own.
pub fn new_session_key(current: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let base = match current.rsplit_once('~') {
        Some((b, t)) if t.len() == 18 && t.starts_with('2') => b,
        _ => current,
    };
    format!("{base}~{}", now.format("%Y%m%dT%H%M%S%3f"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn cancel_path_encodes_the_key() {
        assert_eq!(
            cancel_path("cli:default"),
            "/v1/sessions/cli:default/cancel"
        );
        assert_eq!(cancel_path("a b/c"), "/v1/sessions/a%20b%2Fc/cancel");
    }

    #[test]
    fn new_keys_differ_and_do_not_pile_up_suffixes() {
        let t = chrono::Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap();
        let k1 = new_session_key("cli:default", t);
        assert_eq!(k1, "cli:default~20261130T090000000");
        let k2 = new_session_key(&k1, t + chrono::Duration::milliseconds(5));
        assert_eq!(k2, "cli:default~20261130T090000005");
    }
}
