//! Context compaction decisions: estimate a request's size in tokens, decide when
//! it gets too close to the model's window, choose which older messages to replace
//! with a summary (never splitting a tool call from its results), and build the two
//! special model turns — the memory flush (write durable facts to
//! `memory/YYYY-MM-DD.md` first) and the summary request. Pure.
//!
//! Invariant: the kept suffix of the history never starts with a tool result whose
//! call was dropped.

use crate::message::{ChatRequest, Message, Role, ToolSpec};
use chrono::{DateTime, Utc};

/// Tools offered during the memory-flush turn (when the registry has them).
pub const FLUSH_TOOLS: &[&str] = &["read_file", "write_file", "edit_file"];
/// Model calls allowed in one memory-flush turn.
pub const FLUSH_MAX_CALLS: usize = 4;
/// The flush reply meaning "nothing to add".
pub const FLUSH_DONE: &str = "NO_REPLY";

/// When and how much to compact.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    /// The model's context window in tokens.
    pub context_window: usize,
    /// Compact when a request (plus the reserved output) passes this share of the window.
    pub trigger_ratio: f64,
    /// Keep recent messages worth up to this share of the window.
    pub keep_ratio: f64,
    /// Output tokens reserved for the answer.
    pub reserve_output: usize,
}

impl CompactionPolicy {
    pub fn new(context_window: usize, reserve_output: usize) -> CompactionPolicy {
        CompactionPolicy {
            context_window,
            trigger_ratio: 0.8,
            keep_ratio: 0.3,
            reserve_output,
        }
    }

    /// Token budget for the kept recent messages.
    pub fn keep_budget(&self) -> usize {
        (self.context_window as f64 * self.keep_ratio) as usize
    }

    /// Whether a request of `estimate` tokens should be compacted first.
    pub fn should_compact(&self, estimate: usize) -> bool {
        (estimate + self.reserve_output) as f64 > self.context_window as f64 * self.trigger_ratio
    }
}

/// Tokens of a text: about four characters per token, rounded up.
pub fn estimate_text(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// Tokens of one message, with a small per-message overhead for roles and framing.
pub fn estimate_message(m: &Message) -> usize {
    let calls: usize = m
        .tool_calls
        .iter()
        .map(|c| estimate_text(&c.name) + estimate_text(&c.arguments) + 8)
        .sum();
    4 + estimate_text(&m.content) + calls
}

/// Tokens of a whole request: system prompt, messages and tool schemas.
pub fn estimate_request(req: &ChatRequest) -> usize {
    let tools: usize = req
        .tools
        .iter()
        .map(|t| {
            estimate_text(&t.name)
                + estimate_text(&t.description)
                + estimate_text(&t.parameters.to_string())
        })
        .sum();
    estimate_text(&req.system) + req.messages.iter().map(estimate_message).sum::<usize>() + tools
}

/// Where the kept history may start: at a user message, or at an assistant message
/// (the results of any earlier calls are then complete). Never at a tool result.
fn is_boundary(m: &Message) -> bool {
    matches!(m.role, Role::User | Role::Assistant)
}

/// Index of the first message to keep, so that `messages[..i]` is summarised.
/// Prefers keeping as much as fits in `keep_budget`, and starting at a user message;
/// always drops at least one message and keeps at least one. `None` when nothing
/// can be dropped.
pub fn split_point(messages: &[Message], keep_budget: usize) -> Option<usize> {
    if messages.len() < 2 {
        return None;
    }
    let mut suffix = vec![0usize; messages.len() + 1];
    for i in (0..messages.len()).rev() {
        suffix[i] = suffix[i + 1] + estimate_message(&messages[i]);
    }
    let candidates: Vec<usize> = (1..messages.len())
        .filter(|&i| is_boundary(&messages[i]))
        .collect();
    let fits = |i: &&usize| suffix[**i] <= keep_budget;
    candidates
        .iter()
        .filter(|i| messages[**i].role == Role::User)
        .find(fits)
        .or_else(|| candidates.iter().find(fits))
        .or_else(|| candidates.last())
        .copied()
}

/// The instruction of the memory-flush turn.
pub fn flush_instruction(now_local_date: &str) -> String {
    format!(
        "[memory flush] The conversation is about to be compacted: older messages will be \
         replaced by a short summary. Before that happens, write any durable facts worth \
         keeping — decisions, preferences, people, dates, open tasks — to \
         `memory/{now_local_date}.md` in the workspace (append with edit_file or write_file; \
         read it first if it exists, and keep what is there). Do not answer the user now. \
         When you are done, or if there is nothing worth saving, reply with exactly {FLUSH_DONE}."
    )
}

/// Tools for the flush turn: the file tools among those offered.
pub fn flush_tools(offered: &[ToolSpec]) -> Vec<ToolSpec> {
    offered
        .iter()
        .filter(|t| FLUSH_TOOLS.contains(&t.name.as_str()))
        .cloned()
        .collect()
}

const SUMMARY_SYSTEM: &str = "You compress conversations between a user and an AI assistant \
into a summary the assistant will read instead of the original messages. Keep: the user's goals \
and requests, decisions made, facts learned (names, paths, numbers, dates), what tools found, \
what is done and what is still open. Drop pleasantries and repetition. Write plain prose or \
terse bullet points, no preamble.";

/// Render messages as a plain transcript for the summariser, each message capped
/// at `per_message` characters, the whole thing capped at `total` characters
/// (keeping the most recent part).
pub fn render_transcript(messages: &[Message], per_message: usize, total: usize) -> String {
    let mut parts: Vec<String> = Vec::new();
    for m in messages {
        let who = match m.role {
            Role::User => "User".to_string(),
            Role::Assistant => "Assistant".to_string(),
            Role::System => "System".to_string(),
            Role::Tool => format!(
                "Tool result ({}{})",
                m.name.as_deref().unwrap_or("tool"),
                if m.is_error { ", error" } else { "" }
            ),
        };
        let mut text = cap_chars(&m.content, per_message);
        for c in &m.tool_calls {
            text.push_str(&format!(
                "\n[calls {}({})]",
                c.name,
                cap_chars(&c.arguments, 300)
            ));
        }
        parts.push(format!("{who}: {text}"));
    }
    let mut out = String::new();
    for p in parts.iter().rev() {
        if out.chars().count() + p.chars().count() + 2 > total {
            out.insert_str(0, "[… earlier messages omitted …]\n\n");
            break;
        }
        out.insert_str(0, &format!("{p}\n\n"));
    }
    out
}

fn cap_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max).collect();
    format!("{head} […]")
}

/// The summary model call over `to_summarise`, folding in an earlier summary.
pub fn summary_request(
    previous: Option<&str>,
    to_summarise: &[Message],
    policy: &CompactionPolicy,
    max_tokens: u32,
    now: DateTime<Utc>,
) -> ChatRequest {
    // Leave room for the output and the framing: half the window, in characters.
    let budget_chars = (policy.context_window.saturating_sub(max_tokens as usize) / 2).max(256) * 4;
    // Every replaced message is represented: shorten each rather than drop the oldest.
    // (minus room for the role label and separators of each message)
    let per_message = (budget_chars / to_summarise.len().max(1))
        .saturating_sub(48)
        .clamp(200, 4000);
    let transcript = render_transcript(to_summarise, per_message, budget_chars);
    let mut prompt = String::new();
    if let Some(p) = previous {
        prompt.push_str("Summary of the conversation before this part:\n");
        prompt.push_str(p);
        prompt.push_str("\n\n");
    }
    prompt.push_str("Conversation to summarise:\n\n");
    prompt.push_str(&transcript);
    prompt.push_str(
        "\nWrite the updated summary of everything above (including the earlier summary, if any).",
    );
    ChatRequest {
        system: SUMMARY_SYSTEM.to_string(),
        messages: vec![Message::user(prompt, now)],
        tools: Vec::new(),
        max_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolCall;
    use chrono::TimeZone;

    fn t() -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000, 0).unwrap()
    }

    fn convo(turns: usize, size: usize) -> Vec<Message> {
        let mut v = Vec::new();
        for i in 0..turns {
            let call = ToolCall {
                id: format!("c{i}"),
                name: "read_file".into(),
                arguments: "{}".into(),
            };
            v.push(Message::user(format!("q{i} {}", "x".repeat(size)), t()));
            v.push(Message::assistant("", vec![call.clone()], t()));
            v.push(Message::tool_result(&call, "y".repeat(size), false, t()));
            v.push(Message::assistant(format!("a{i}"), vec![], t()));
        }
        v
    }

    #[test]
    fn estimates_are_about_chars_over_four() {
        assert_eq!(estimate_text(""), 0);
        assert_eq!(estimate_text("abcd"), 1);
        assert_eq!(estimate_text("abcde"), 2);
        let m = Message::user("x".repeat(400), t());
        assert_eq!(estimate_message(&m), 104);
        let req = ChatRequest {
            system: "s".repeat(40),
            messages: vec![m],
            tools: vec![],
            max_tokens: 10,
        };
        assert_eq!(estimate_request(&req), 114);
    }

    #[test]
    fn trigger_includes_reserved_output() {
        let p = CompactionPolicy::new(1000, 200);
        assert!(!p.should_compact(600));
        assert!(p.should_compact(601));
    }

    #[test]
    fn split_keeps_recent_turns_at_a_user_message() {
        let msgs = convo(5, 400); // each turn ≈ 4+101 + 4+1+8 + 4+100 + 4+1 ≈ 227 tokens
        let i = split_point(&msgs, 500).unwrap();
        assert_eq!(msgs[i].role, Role::User);
        assert_eq!(i, 12, "keeps the last two turns");
        let kept: usize = msgs[i..].iter().map(estimate_message).sum();
        assert!(kept <= 500);
    }

    #[test]
    fn split_never_starts_at_a_tool_result() {
        let msgs = convo(1, 4000); // one huge turn: no user boundary fits
        let i = split_point(&msgs, 10).unwrap();
        assert_ne!(msgs[i].role, Role::Tool);
        assert!(i >= 1);
        for budget in [0, 5, 50, 1000, 5000] {
            let i = split_point(&msgs, budget).unwrap();
            assert_ne!(msgs[i].role, Role::Tool, "budget {budget}");
        }
    }

    #[test]
    fn nothing_to_drop() {
        assert_eq!(split_point(&convo(0, 1), 100), None);
        assert_eq!(split_point(&[Message::user("only", t())], 100), None);
    }

    #[test]
    fn flush_offers_only_file_tools() {
        let spec = |n: &str| ToolSpec {
            name: n.into(),
            description: String::new(),
            parameters: serde_json::json!({}),
        };
        let got = flush_tools(&[
            spec("exec"),
            spec("write_file"),
            spec("edit_file"),
            spec("web_fetch"),
        ]);
        let names: Vec<_> = got.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["write_file", "edit_file"]);
        let text = flush_instruction("2024-05-01");
        assert!(text.contains("memory/2024-05-01.md") && text.contains(FLUSH_DONE));
    }

    #[test]
    fn summary_request_folds_previous_summary_and_is_bounded() {
        let msgs = convo(50, 2000);
        let p = CompactionPolicy::new(4096, 512);
        let req = summary_request(Some("EARLIER"), &msgs, &p, 512, t());
        assert!(req.tools.is_empty());
        let text = &req.messages[0].content;
        assert!(text.contains("EARLIER"));
        assert!(text.contains("omitted"), "200 messages cannot all fit");
        assert!(text.contains("a49"), "most recent kept");
        // A dozen long messages all fit, each shortened.
        let req = summary_request(None, &convo(3, 2000), &p, 512, t());
        let text = &req.messages[0].content;
        assert!(text.contains("q0 ") && text.contains("a2"), "{text}");
        assert!(!text.contains("earlier messages omitted"));
        assert!(estimate_request(&req) + 512 < 4096);
    }
}
