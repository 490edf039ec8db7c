//! The `message` tool: send a text to a chat on a channel (`matrix`,
//! `telegram`) through the gateway's running channels ([`Messenger`]). Offered
//! only under the gateway with a channel configured; the channel side refuses
//! chats no allowed sender wrote in, and that refusal reaches the model as the
//! tool's error.

use super::{ToolContext, ToolError, ToolOutput, ToolResult};
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

/// Sends to a chat: `Ok(parts sent)` or why not.
pub trait Messenger: Send + Sync {
    fn send<'a>(
        &'a self,
        channel: &'a str,
        chat_id: &'a str,
        text: &'a str,
    ) -> BoxFuture<'a, Result<usize, String>>;
}

/// Arguments of `message`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MessageArgs {
    /// `matrix` or `telegram`.
    pub channel: String,
    /// Matrix room id or Telegram chat id.
    pub chat_id: String,
    pub text: String,
}

/// Send it.
pub async fn run(ctx: &ToolContext, args: &MessageArgs) -> ToolResult {
    let Some(m) = ctx.messenger.as_ref() else {
        return Err(ToolError::invalid("message", "no chat channel is running"));
    };
    if args.text.trim().is_empty() {
        return Err(ToolError::invalid("message", "text is empty"));
    }
    match m.send(&args.channel, &args.chat_id, &args.text).await {
        Ok(parts) => Ok(ToolOutput::MessageSent {
            channel: args.channel.clone(),
            chat_id: args.chat_id.clone(),
            parts,
        }),
        Err(message) => Err(ToolError::invalid("message", message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    struct Fake(Mutex<Vec<String>>);
    impl Messenger for Fake {
        fn send<'a>(
            &'a self,
            channel: &'a str,
            chat_id: &'a str,
            text: &'a str,
        ) -> BoxFuture<'a, Result<usize, String>> {
            Box::pin(async move {
                if chat_id != "allowed" {
                    return Err(format!(
                        "{channel}: chat {chat_id} is not one I may write to"
                    ));
                }
                self.0.lock().expect("lock").push(text.to_string());
                Ok(1)
            })
        }
    }

    #[tokio::test]
    async fn sends_to_allowed_chats_and_reports_refusals() {
        let fake = Arc::new(Fake(Mutex::new(Vec::new())));
        let mut ctx = ToolContext::new("/tmp");
        ctx.messenger = Some(fake.clone());
        let reg = super::super::ToolRegistry::new(ctx);
        assert!(reg.names().contains(&"message"));
        let ok = run(
            reg.context(),
            &MessageArgs {
                channel: "telegram".into(),
                chat_id: "allowed".into(),
                text: "hi".into(),
            },
        )
        .await
        .expect("sent");
        assert!(ok.render().contains("telegram"), "{}", ok.render());
        let err = run(
            reg.context(),
            &MessageArgs {
                channel: "telegram".into(),
                chat_id: "other".into(),
                text: "hi".into(),
            },
        )
        .await
        .expect_err("refused");
        assert!(err.to_string().contains("not one I may write to"), "{err}");
        assert_eq!(*fake.0.lock().expect("lock"), ["hi"]);
        let none = super::super::ToolRegistry::new(ToolContext::new("/tmp"));
        assert!(
            !none.names().contains(&"message"),
            "offered only with channels"
        );
    }
}
