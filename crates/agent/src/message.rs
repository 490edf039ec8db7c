//! Conversation data shared by the agent core, the providers, the tools and the
//! session files: messages, tool calls, usage, and the provider request/response
//! boundary. Plain data, serde-serialisable, no I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// A tool invocation requested by the model. `arguments` is the raw JSON text the
/// model produced: it may be invalid, and the tool layer reports that back to the
/// model as an error result instead of failing the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Token usage of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One message of a conversation, as stored in a session file (one JSON object per line).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    /// Text content (for `Tool` messages: the rendered tool result).
    #[serde(default)]
    pub content: String,
    /// Tool calls requested by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Tool` messages: the id of the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `Tool` messages: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// For `Tool` messages: whether the result is an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    pub timestamp: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

impl Message {
    fn new(role: Role, content: impl Into<String>, timestamp: DateTime<Utc>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            name: None,
            is_error: false,
            timestamp,
            usage: None,
        }
    }

    pub fn user(content: impl Into<String>, timestamp: DateTime<Utc>) -> Message {
        Message::new(Role::User, content, timestamp)
    }

    pub fn system(content: impl Into<String>, timestamp: DateTime<Utc>) -> Message {
        Message::new(Role::System, content, timestamp)
    }

    pub fn assistant(
        content: impl Into<String>,
        tool_calls: Vec<ToolCall>,
        timestamp: DateTime<Utc>,
    ) -> Message {
        Message {
            tool_calls,
            ..Message::new(Role::Assistant, content, timestamp)
        }
    }

    pub fn tool_result(
        call: &ToolCall,
        content: impl Into<String>,
        is_error: bool,
        timestamp: DateTime<Utc>,
    ) -> Message {
        Message {
            tool_call_id: Some(call.id.clone()),
            name: Some(call.name.clone()),
            is_error,
            ..Message::new(Role::Tool, content, timestamp)
        }
    }
}

/// A tool as offered to the model: name, description, JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Finished its answer.
    EndTurn,
    /// Wants tools run.
    ToolUse,
    /// Hit the output token limit.
    MaxTokens,
    /// Anything else the provider reported.
    Other,
}

/// What is sent to a provider for one model call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub system: String,
    /// History without the system prompt.
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
}

/// A complete model answer (after the stream has been assembled).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    pub stop: Option<StopReason>,
    /// The profile/model that produced it (after failover).
    pub model: String,
}

/// Incremental output while a response streams.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamDelta {
    /// Text to show the user as it arrives.
    Text(String),
    /// A tool call has been fully assembled (shown as a status line).
    ToolCall(ToolCall),
    /// The provider failed and the next attempt or profile is being tried.
    Retry { attempt: u32, reason: String },
}
