//! Telegram over the Bot API: `getUpdates` long-poll with the offset persisted
//! (a restart neither loses nor replays updates), `sendMessage` with MarkdownV2
//! escaping (the answer shows exactly as written) split at 4,096 characters
//! (UTF-16 code units, as Telegram counts), and `sendChatAction` (`typing`,
//! renewed every 4 s: Telegram shows it for 5 s). Network errors are logged and
//! retried with backoff.

use crate::config::{TELEGRAM_LIMIT, TelegramSettings};
use crate::core::{Backoff, Core, Incoming, Polled, Transport};
use crate::{ChannelError, check, http_client};
use futures_util::future::BoxFuture;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Seconds one `getUpdates` call waits for updates.
pub const POLL_TIMEOUT_SECS: u64 = 25;

/// The Bot API client.
pub struct Telegram {
    settings: TelegramSettings,
    http: reqwest::Client,
}

/// Escape `text` for `parse_mode: MarkdownV2` so it shows literally.
pub fn escape_markdown_v2(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for c in text.chars() {
        if matches!(
            c,
            '_' | '*'
                | '['
                | ']'
                | '('
                | ')'
                | '~'
                | '`'
                | '>'
                | '#'
                | '+'
                | '-'
                | '='
                | '|'
                | '{'
                | '}'
                | '.'
                | '!'
                | '\\'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl Telegram {
    pub fn new(settings: TelegramSettings) -> Result<Telegram, ChannelError> {
        Ok(Telegram {
            settings,
            http: http_client("telegram")?,
        })
    }

    fn url(&self, method: &str) -> String {
        format!(
            "{}/bot{}/{method}",
            self.settings.base_url, self.settings.token
        )
    }

    async fn call(
        &self,
        method: &str,
        body: Value,
        timeout: Duration,
    ) -> Result<Value, ChannelError> {
        let resp = self
            .http
            .post(self.url(method))
            .json(&body)
            .timeout(timeout)
            .send()
            .await;
        let v = check("telegram", resp).await?;
        if v["ok"] != Value::Bool(true) {
            return Err(ChannelError::Api {
                channel: "telegram",
                status: 200,
                message: v["description"].as_str().unwrap_or("not ok").to_string(),
            });
        }
        Ok(v["result"].clone())
    }

    /// The bot's username (`getMe`).
    pub async fn get_me(&self, timeout: Duration) -> Result<String, ChannelError> {
        let v = self.call("getMe", json!({}), timeout).await?;
        Ok(v["username"].as_str().unwrap_or_default().to_string())
    }

    /// One long poll from `offset`.
    pub async fn get_updates(&self, offset: Option<i64>) -> Result<Vec<Value>, ChannelError> {
        let mut body = json!({"timeout": POLL_TIMEOUT_SECS, "allowed_updates": ["message"]});
        if let Some(o) = offset {
            body["offset"] = json!(o);
        }
        let r = self
            .call(
                "getUpdates",
                body,
                Duration::from_secs(POLL_TIMEOUT_SECS + 15),
            )
            .await?;
        Ok(r.as_array().cloned().unwrap_or_default())
    }
}

fn chat_id_value(chat: &str) -> Value {
    chat.parse::<i64>()
        .map(Value::from)
        .unwrap_or_else(|_| Value::from(chat))
}

impl Transport for Telegram {
    fn name(&self) -> &'static str {
        "telegram"
    }

    fn send<'a>(&'a self, chat: &'a str, text: &'a str) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            let body = json!({
                "chat_id": chat_id_value(chat),
                "text": escape_markdown_v2(text),
                "parse_mode": "MarkdownV2",
            });
            self.call("sendMessage", body, Duration::from_secs(30))
                .await
                .map(|_| ())
        })
    }

    fn typing<'a>(&'a self, chat: &'a str, on: bool) -> BoxFuture<'a, Result<(), ChannelError>> {
        Box::pin(async move {
            if !on {
                // Telegram has no "stop typing": the indicator ends with the answer.
                return Ok(());
            }
            let body = json!({"chat_id": chat_id_value(chat), "action": "typing"});
            self.call("sendChatAction", body, Duration::from_secs(10))
                .await
                .map(|_| ())
        })
    }

    fn limit(&self) -> usize {
        TELEGRAM_LIMIT
    }

    fn measure(&self, text: &str) -> usize {
        text.encode_utf16().count()
    }

    fn typing_refresh(&self) -> Duration {
        Duration::from_secs(4)
    }
}

/// The message in an update, as an [`Incoming`] (None: not a text message).
pub fn incoming(update: &Value) -> Option<Incoming> {
    let m = update.get("message")?;
    let text = m.get("text")?.as_str()?;
    let chat = m.pointer("/chat/id")?.as_i64()?.to_string();
    let from = m.get("from")?;
    let sender = from.get("id")?.as_i64()?.to_string();
    let aliases = from
        .get("username")
        .and_then(|u| u.as_str())
        .map(|u| vec![format!("@{u}"), u.to_string()])
        .unwrap_or_default();
    let message_id = m.get("message_id")?.as_i64()?;
    Some(Incoming {
        event_id: format!("{chat}/{message_id}"),
        chat,
        sender,
        aliases,
        text: text.to_string(),
    })
}

/// Poll until `stop`: each batch is handed to the core, then the offset past it
/// is saved (the state is flushed when it stops).
pub async fn run(tg: Arc<Telegram>, core: Arc<Core>, stop: CancellationToken) {
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        let offset = core.position().and_then(|p| p.parse::<i64>().ok());
        let batch = tokio::select! {
            _ = stop.cancelled() => break,
            b = tg.get_updates(offset) => b,
        };
        let updates = match backoff
            .settle(batch, "telegram: getUpdates", &core.log, &stop)
            .await
        {
            Polled::Got(u) => u,
            Polled::Retry => continue,
            Polled::Stop => break,
        };
        let mut next = offset;
        for u in &updates {
            if let Some(id) = u.get("update_id").and_then(|v| v.as_i64()) {
                next = Some(next.map_or(id + 1, |n| n.max(id + 1)));
            }
            match incoming(u) {
                Some(msg) => {
                    core.accept(msg).await;
                }
                None => (core.log)("telegram: ignored an update without text".into()),
            }
        }
        if let Some(n) = next
            && next != offset
        {
            core.set_position(n.to_string());
        }
    }
    // Stopping: whatever the last batch changed is written before the task ends.
    core.flush().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_v2_escapes_every_reserved_character() {
        assert_eq!(
            escape_markdown_v2("a_b*c [x](y) ~`>#+-=|{}.! \\ é"),
            "a\\_b\\*c \\[x\\]\\(y\\) \\~\\`\\>\\#\\+\\-\\=\\|\\{\\}\\.\\! \\\\ é"
        );
    }

    #[test]
    fn updates_become_incoming_messages() {
        let u = json!({"update_id": 7, "message": {"message_id": 3, "date": 0,
            "from": {"id": 42, "is_bot": false, "first_name": "A", "username": "ann"},
            "chat": {"id": 42, "type": "private"}, "text": "hi"}});
        let m = incoming(&u).expect("text message");
        assert_eq!(
            (m.chat.as_str(), m.sender.as_str(), m.text.as_str()),
            ("42", "42", "hi")
        );
        assert_eq!(m.aliases, ["@ann", "ann"]);
        assert_eq!(m.event_id, "42/3");
        let sticker = json!({"update_id": 8, "message": {"message_id": 4, "date": 0,
            "from": {"id": 42, "is_bot": false, "first_name": "A"},
            "chat": {"id": 42, "type": "private"}, "sticker": {}}});
        assert!(incoming(&sticker).is_none());
    }
}
