//! Matrix over the client-server API (v3): `/sync` long-poll with the `since`
//! token persisted (the first start skips history: only pending invites are
//! looked at), joins rooms on invite from allowed users (other invites are
//! declined), answers `m.room.message` text events with `m.text` messages (one
//! transaction id per message, reused on retry so a retried send is not
//! duplicated), and shows typing while a turn runs. Unencrypted rooms only.

use crate::config::MatrixSettings;
use crate::core::{Backoff, Core, Incoming, Polled, Transport};
use crate::{ChannelError, check, http_client};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Milliseconds one `/sync` waits for events.
pub const SYNC_TIMEOUT_MS: u64 = 30_000;

/// A Matrix client logged in as the bot.
pub struct Matrix {
    settings: MatrixSettings,
    http: reqwest::Client,
    txn: AtomicU64,
    txn_prefix: String,
}

/// Percent-encode one path segment (room ids hold `!` and `:`).
fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Matrix {
    pub fn new(settings: MatrixSettings) -> Result<Matrix, ChannelError> {
        let nanos = claw_base::Clock::System
            .system_time()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        Ok(Matrix {
            settings,
            http: http_client("matrix")?,
            txn: AtomicU64::new(0),
            txn_prefix: format!("claw{}x{nanos}", std::process::id()),
        })
    }

    pub fn user_id(&self) -> &str {
        &self.settings.user_id
    }

    fn url(&self, path: &str) -> String {
        format!("{}/_matrix/client/v3{path}", self.settings.homeserver)
    }

    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        timeout: Duration,
    ) -> Result<Value, ChannelError> {
        let mut req = self
            .http
            .request(method, self.url(path))
            .bearer_auth(&self.settings.access_token)
            .timeout(timeout);
        if let Some(b) = body {
            req = req.json(&b);
        }
        check("matrix", req.send().await).await
    }

    /// Whose token this is (`GET /account/whoami`).
    pub async fn whoami(&self, timeout: Duration) -> Result<String, ChannelError> {
        let v = self
            .request(reqwest::Method::GET, "/account/whoami", None, timeout)
            .await?;
        Ok(v["user_id"].as_str().unwrap_or_default().to_string())
    }

    /// One `/sync` (`timeout_ms` 0 returns at once).
    pub async fn sync(&self, since: Option<&str>, timeout_ms: u64) -> Result<Value, ChannelError> {
        let mut path = format!(
            "/sync?timeout={timeout_ms}&filter={}",
            enc(r#"{"room":{"timeline":{"limit":50},"state":{"lazy_load_members":true}}}"#)
        );
        if let Some(s) = since {
            path.push_str(&format!("&since={}", enc(s)));
        }
        self.request(
            reqwest::Method::GET,
            &path,
            None,
            Duration::from_millis(timeout_ms + 15_000),
        )
        .await
    }

    pub async fn join(&self, room: &str) -> Result<(), ChannelError> {
        self.post_empty(&format!("/join/{}", enc(room))).await
    }

    pub async fn leave(&self, room: &str) -> Result<(), ChannelError> {
        self.post_empty(&format!("/rooms/{}/leave", enc(room)))
            .await
    }

    /// POST `{}` to `path` (a room membership change), ignoring the answer's body.
    async fn post_empty(&self, path: &str) -> Result<(), ChannelError> {
        self.request(
            reqwest::Method::POST,
            path,
            Some(json!({})),
            Duration::from_secs(30),
        )
        .await
        .map(|_| ())
    }

    fn next_txn(&self) -> String {
        format!(
            "{}-{}",
            self.txn_prefix,
            self.txn.fetch_add(1, Ordering::SeqCst)
        )
    }
}

impl Transport for Matrix {
    fn name(&self) -> &'static str {
        "matrix"
    }

    fn send<'a>(&'a self, chat: &'a str, text: &'a str) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let txn = self.next_txn();
            let path = format!("/rooms/{}/send/m.room.message/{}", enc(chat), enc(&txn));
            let body = json!({"msgtype": "m.text", "body": text});
            let mut last = None;
            // The same transaction id on every attempt: the server de-duplicates.
            for attempt in 0..3u32 {
                match self
                    .request(
                        reqwest::Method::PUT,
                        &path,
                        Some(body.clone()),
                        Duration::from_secs(30),
                    )
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(e @ ChannelError::Network { .. }) => {
                        last = Some(e);
                        tokio::time::sleep(Duration::from_millis(500 << attempt)).await;
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(last.unwrap_or(ChannelError::Network {
                channel: "matrix",
                message: "send failed".into(),
            }))
        })
    }

    fn typing<'a>(&'a self, chat: &'a str, on: bool) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let path = format!(
                "/rooms/{}/typing/{}",
                enc(chat),
                enc(&self.settings.user_id)
            );
            let body = if on {
                json!({"typing": true, "timeout": 30_000})
            } else {
                json!({"typing": false})
            };
            self.request(
                reqwest::Method::PUT,
                &path,
                Some(body),
                Duration::from_secs(10),
            )
            .await
            .map(|_| ())
        })
    }

    fn limit(&self) -> usize {
        self.settings.max_message_chars
    }

    fn typing_refresh(&self) -> Duration {
        Duration::from_secs(20)
    }
}

/// Pending invites in a sync response: `(room, inviter)`.
pub fn invites(sync: &Value, me: &str) -> Vec<(String, String)> {
    let Some(rooms) = sync.pointer("/rooms/invite").and_then(|v| v.as_object()) else {
        return Vec::new();
    };
    rooms
        .iter()
        .map(|(room, r)| {
            let inviter = r
                .pointer("/invite_state/events")
                .and_then(|e| e.as_array())
                .and_then(|events| {
                    events.iter().find(|e| {
                        e["type"] == "m.room.member"
                            && e["state_key"] == me
                            && e.pointer("/content/membership") == Some(&json!("invite"))
                    })
                })
                .and_then(|e| e["sender"].as_str())
                .unwrap_or("")
                .to_string();
            (room.clone(), inviter)
        })
        .collect()
}

/// Text messages from others in joined rooms' timelines, in order.
pub fn messages(sync: &Value, me: &str) -> Vec<Incoming> {
    let Some(rooms) = sync.pointer("/rooms/join").and_then(|v| v.as_object()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (room, r) in rooms {
        let Some(events) = r.pointer("/timeline/events").and_then(|e| e.as_array()) else {
            continue;
        };
        for e in events {
            if e["type"] != "m.room.message" || e["sender"] == me {
                continue;
            }
            let (Some(id), Some(sender), Some(body)) = (
                e["event_id"].as_str(),
                e["sender"].as_str(),
                e.pointer("/content/body").and_then(|b| b.as_str()),
            ) else {
                continue;
            };
            // Edits (`m.replace`) are not new messages.
            if e.pointer("/content/m.relates_to/rel_type") == Some(&json!("m.replace")) {
                continue;
            }
            // Not `m.notice`: that is what bots send, and answering it lets two
            // bots talk to each other forever.
            let msgtype = e.pointer("/content/msgtype").and_then(|m| m.as_str());
            if !matches!(msgtype, Some("m.text") | Some("m.emote")) {
                continue;
            }
            out.push(Incoming {
                event_id: id.to_string(),
                chat: room.clone(),
                sender: sender.to_string(),
                aliases: Vec::new(),
                text: body.to_string(),
            });
        }
    }
    out
}

async fn handle_invites(mx: &Matrix, core: &Arc<Core>, sync: &Value) {
    for (room, inviter) in invites(sync, mx.user_id()) {
        if core.is_allowed(&inviter) {
            match mx.join(&room).await {
                Ok(()) => {
                    core.add_chat(&room);
                    (core.log)(format!("matrix: joined {room} (invited by {inviter})"));
                }
                Err(e) => (core.log)(format!("matrix: cannot join {room}: {e}")),
            }
        } else {
            (core.log)(format!(
                "matrix: declined an invite to {room} from {inviter} (not in allow_from)"
            ));
            if let Err(e) = mx.leave(&room).await {
                (core.log)(format!("matrix: cannot decline the invite to {room}: {e}"));
            }
        }
    }
}

/// Sync until `stop`. The first start (no saved token) skips the history and
/// only answers invites; afterwards every batch is handled, then its
/// `next_batch` saved.
pub async fn run(mx: Arc<Matrix>, core: Arc<Core>, stop: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        let since = core.position();
        let timeout = if since.is_some() { SYNC_TIMEOUT_MS } else { 0 };
        let res = tokio::select! {
            _ = stop.cancelled() => break,
            r = mx.sync(since.as_deref(), timeout) => r,
        };
        let sync = match backoff.settle(res, "matrix: sync", &core.log, &stop).await {
            Polled::Got(s) => s,
            Polled::Retry => continue,
            Polled::Stop => break,
        };
        handle_invites(&mx, &core, &sync).await;
        if since.is_some() {
            for msg in messages(&sync, mx.user_id()) {
                core.accept(msg).await;
            }
        } else {
            (core.log)("matrix: first start: history skipped".into());
        }
        match sync["next_batch"].as_str() {
            Some(next) => core.set_position(next.to_string()),
            None => (core.log)("matrix: sync answer without next_batch".into()),
        }
    }
    // Stopping: whatever the last batch changed is written before the task ends.
    core.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_ids_are_encoded() {
        assert_eq!(enc("!abc:localhost"), "%21abc%3Alocalhost");
    }

    #[test]
    fn sync_parsing_finds_invites_and_messages() {
        let sync = json!({"next_batch": "s1", "rooms": {
        "invite": {"!r:x": {"invite_state": {"events": [
            {"type": "m.room.member", "state_key": "@bot:x", "sender": "@me:x",
             "content": {"membership": "invite"}}]}}},
        "join": {"!j:x": {"timeline": {"events": [
            {"type": "m.room.message", "event_id": "$1", "sender": "@me:x",
             "content": {"msgtype": "m.text", "body": "hello"}},
            {"type": "m.room.message", "event_id": "$2", "sender": "@bot:x",
             "content": {"msgtype": "m.text", "body": "mine"}},
            {"type": "m.room.message", "event_id": "$3", "sender": "@me:x",
             "content": {"msgtype": "m.image", "body": "a.png"}},
            {"type": "m.room.member", "event_id": "$4", "sender": "@me:x", "content": {}}
        ]}}}}});
        assert_eq!(
            invites(&sync, "@bot:x"),
            [("!r:x".to_string(), "@me:x".to_string())]
        );
        let m = messages(&sync, "@bot:x");
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].event_id.as_str(), m[0].text.as_str()),
            ("$1", "hello")
        );
    }
}
