//! Reading session transcripts for the API: the list of sessions (key, message
//! count, last activity) and one session's user/assistant messages (for WebChat).
//! Archived transcripts (`/new` renames them `<name>.<timestamp>.jsonl`) are not
//! listed: only the file a key maps to is the live session.

use claw_agent::message::Role;
use claw_agent::session::{self, Record};
use serde::Serialize;
use std::path::Path;

/// One session in `GET /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionSummary {
    pub key: String,
    /// User and assistant messages with text.
    pub messages: usize,
    /// RFC 3339 time of the last message (or of creation).
    pub last_activity: Option<String>,
}

/// One message in `GET /v1/sessions/{key}/messages`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
    pub timestamp: String,
}

fn chat_messages(loaded: &session::Loaded) -> Vec<ChatMessage> {
    loaded
        .records
        .iter()
        .filter_map(|r| match r {
            Record::Message(m) if !m.content.is_empty() => match m.role {
                Role::User => Some(("user", m)),
                Role::Assistant => Some(("assistant", m)),
                _ => None,
            },
            _ => None,
        })
        .map(|(role, m)| ChatMessage {
            role,
            content: m.content.clone(),
            timestamp: m.timestamp.to_rfc3339(),
        })
        .collect()
}

/// Every live session in `dir`, most recently active first.
pub fn list(dir: &Path) -> std::io::Result<Vec<SessionSummary>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.ends_with(".jsonl") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let loaded = session::parse(&text);
        let Some(meta) = &loaded.meta else { continue };
        if session::file_name_for_key(&meta.key) != name {
            continue; // an archived transcript
        }
        let msgs = chat_messages(&loaded);
        out.push(SessionSummary {
            key: meta.key.clone(),
            messages: msgs.len(),
            last_activity: Some(
                msgs.last()
                    .map(|m| m.timestamp.clone())
                    .unwrap_or_else(|| meta.created.to_rfc3339()),
            ),
        });
    }
    out.sort_by(|a, b| {
        b.last_activity
            .cmp(&a.last_activity)
            .then_with(|| a.key.cmp(&b.key))
    });
    Ok(out)
}

/// The user/assistant messages of session `key` (None: no such session).
pub fn messages(dir: &Path, key: &str) -> std::io::Result<Option<Vec<ChatMessage>>> {
    let path = session::session_path(dir, key);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let loaded = session::parse(&text);
    if loaded.meta.as_ref().is_some_and(|m| m.key != key) {
        return Ok(None);
    }
    Ok(Some(chat_messages(&loaded)))
}
