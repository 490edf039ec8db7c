//! Session transcripts (JSONL) as a memory source: which lines are indexed (user
//! and assistant text, never tool payloads or system prompts), how they group into
//! chunks mapped back to JSONL line numbers, and their timestamps for decay. Pure.
//!
//! A chunk is one exchange — a user turn with its answer (the assistant messages up
//! to the next user turn) — when it fits the chunk budget, else each of its turns
//! on its own (a turn larger than the budget is cut into pieces of its line). Its
//! context, as headings are for a note, is the day it was said and who spoke
//! (`2023-05-04 Thursday, user and assistant`; [`turn_context`]): the word index
//! and the embedding see it before the text, and a hit carries it, so "when did I
//! …" finds the turn and the answer has the date.
//!
//! Invariant: only complete lines (ending in `\n`) are consumed; a torn last line
//! is left for the next pass and is never an error. Every text is redacted
//! ([`crate::redact`]) before it is chunked.

use crate::chunk::{ChunkParams, TokenCounter};
use crate::config::DayZone;
use crate::redact::redact;
use serde_json::Value;

/// A chunk of a transcript: 1-based JSONL line range, redacted text, time for decay.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptChunk {
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    /// Unix seconds of the newest message in the chunk, if any had a timestamp.
    pub time: Option<i64>,
    /// The day and the speakers ([`turn_context`]).
    pub context: String,
}

/// The result of reading complete lines of a transcript.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TranscriptRead {
    pub chunks: Vec<TranscriptChunk>,
    /// Bytes of complete lines consumed (a torn last line is left for the next pass).
    pub consumed_bytes: usize,
    /// Complete lines consumed.
    pub consumed_lines: usize,
    /// Complete lines that were not valid JSON objects (counted, skipped).
    pub skipped_lines: usize,
}

/// One indexed message: its JSONL line, `role: text` (redacted), time.
#[derive(Debug, Clone, PartialEq)]
pub struct TranscriptMessage {
    pub line: usize,
    pub text: String,
    pub time: Option<i64>,
    /// Said by the assistant (else by the user).
    pub assistant: bool,
}

/// What one complete JSONL line holds.
#[derive(Debug, Clone, PartialEq)]
pub enum LineKind {
    /// A user or assistant message with text.
    Message(TranscriptMessage),
    /// A valid line with nothing to index (metadata, system, tool results, empty text).
    Ignored,
    /// Not a JSON object.
    Invalid,
}

/// Read the complete lines of `bytes` (a transcript's content starting at a line
/// boundary), numbering lines from `first_line` (1-based); days in chunk contexts
/// are those of `zone`, with the offset in force when each turn was said.
pub fn read_transcript(
    bytes: &[u8],
    first_line: usize,
    params: &ChunkParams,
    counter: &dyn TokenCounter,
    zone: &DayZone,
) -> TranscriptRead {
    let mut read = TranscriptRead::default();
    let mut messages = Vec::new();
    let mut offset = 0usize;
    let mut line_no = first_line.max(1);
    while let Some(nl) = memchr_newline(&bytes[offset..]) {
        let line = &bytes[offset..offset + nl];
        match parse_line(line, line_no) {
            LineKind::Message(m) => messages.push(m),
            LineKind::Ignored => {}
            LineKind::Invalid => read.skipped_lines += 1,
        }
        offset += nl + 1;
        line_no += 1;
        read.consumed_lines += 1;
    }
    read.consumed_bytes = offset;
    read.chunks = group_messages(&messages, params, counter, zone);
    read
}

/// Where an incremental pass must start again so its chunks equal a whole-file
/// index's: when the first message of `appended` (the complete lines after the
/// indexed `prefix`) is the assistant's, it belongs to the exchange of the last
/// user message of `prefix`, which was chunked without it. Returns that user
/// line's byte offset in `prefix` and the number of lines before it; `None` when
/// nothing need be re-read (the new part opens with a user message or holds no
/// message, or `prefix` has no user message).
pub fn trailing_exchange(prefix: &[u8], appended: &[u8]) -> Option<(usize, usize)> {
    let mut offset = 0usize;
    let mut opens_with_answer = None;
    while let Some(nl) = memchr_newline(&appended[offset..]) {
        if let LineKind::Message(m) = parse_line(&appended[offset..offset + nl], 0) {
            opens_with_answer = Some(m.assistant);
            break;
        }
        offset += nl + 1;
    }
    if opens_with_answer != Some(true) {
        return None;
    }
    // Walk the prefix's complete lines backwards to its last user message.
    let mut end = prefix.len();
    while end > 0 {
        let body_end = if prefix[end - 1] == b'\n' {
            end - 1
        } else {
            end
        };
        let start = prefix[..body_end]
            .iter()
            .rposition(|&c| c == b'\n')
            .map_or(0, |i| i + 1);
        if let LineKind::Message(m) = parse_line(&prefix[start..body_end], 0)
            && !m.assistant
        {
            let lines = prefix[..start].iter().filter(|&&c| c == b'\n').count();
            return Some((start, lines));
        }
        end = start;
    }
    None
}

fn memchr_newline(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// Classify one JSONL line (without its newline).
pub fn parse_line(line: &[u8], line_no: usize) -> LineKind {
    let Ok(s) = std::str::from_utf8(line) else {
        return LineKind::Invalid;
    };
    let s = s.trim();
    if s.is_empty() {
        return LineKind::Ignored;
    }
    let Ok(Value::Object(outer)) = serde_json::from_str::<Value>(s) else {
        return LineKind::Invalid;
    };
    // Wrapped formats (`{"type":"message","message":{...}}`) carry the message inside.
    let inner = outer.get("message").and_then(Value::as_object);
    let msg = inner.unwrap_or(&outer);
    let role = msg
        .get("role")
        .or_else(|| outer.get("role"))
        .and_then(Value::as_str);
    let role = match role {
        Some(r) if r.eq_ignore_ascii_case("user") => "user",
        Some(r) if r.eq_ignore_ascii_case("assistant") => "assistant",
        _ => return LineKind::Ignored,
    };
    let text = msg.get("content").map(content_text).unwrap_or_default();
    let text = text.trim();
    if text.is_empty() {
        return LineKind::Ignored;
    }
    let time = ["timestamp", "ts", "time", "created_at"]
        .iter()
        .find_map(|k| msg.get(*k).or_else(|| outer.get(*k)))
        .and_then(parse_time);
    LineKind::Message(TranscriptMessage {
        line: line_no,
        text: format!("{role}: {}", redact(text)),
        time,
        assistant: role == "assistant",
    })
}

/// The text of a message's `content`: a string, or the `text` blocks of an array
/// of content blocks (tool calls, tool results, images are skipped).
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let parts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| match b {
                    Value::String(s) => Some(s.as_str()),
                    Value::Object(o) => {
                        let ty = o.get("type").and_then(Value::as_str).unwrap_or("text");
                        matches!(ty, "text" | "input_text" | "output_text")
                            .then(|| o.get("text").and_then(Value::as_str))
                            .flatten()
                    }
                    _ => None,
                })
                .collect();
            parts.join("\n")
        }
        Value::Object(o) => o
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// RFC 3339 text, or unix seconds / milliseconds as a number or numeric string.
pub fn parse_time(v: &Value) -> Option<i64> {
    let from_num = |n: f64| -> Option<i64> {
        if !n.is_finite() || n < 0.0 {
            return None;
        }
        // Anything past year ~5138 in seconds is taken as milliseconds.
        Some(if n >= 1e11 {
            (n / 1000.0) as i64
        } else {
            n as i64
        })
    };
    match v {
        Value::Number(n) => n.as_f64().and_then(from_num),
        Value::String(s) => {
            let s = s.trim();
            chrono::DateTime::parse_from_rfc3339(s)
                .map(|d| d.timestamp())
                .ok()
                .or_else(|| s.parse::<f64>().ok().and_then(from_num))
        }
        _ => None,
    }
}

/// The context of a transcript chunk: the day it was said in a time zone
/// `zone` (with the offset in force then), with its weekday, then who spoke —
/// `2023-05-04 Thursday, user`, `… , assistant`, `… , user and assistant`; only the
/// speakers without a time.
pub fn turn_context(time: Option<i64>, user: bool, assistant: bool, zone: &DayZone) -> String {
    let who = match (user, assistant) {
        (true, true) => "user and assistant",
        (false, true) => "assistant",
        _ => "user",
    };
    let day = time
        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
        .zip(time.and_then(|t| chrono::FixedOffset::east_opt(zone.offset_at(t))))
        .map(|(t, z)| t.with_timezone(&z).format("%Y-%m-%d %A").to_string());
    match day {
        Some(d) => format!("{d}, {who}"),
        None => who.to_string(),
    }
}

/// Group messages into chunks within `params.max_tokens`: an exchange (a user
/// message and the assistant messages after it, up to the next user message) is
/// one chunk when it fits; otherwise, and for assistant messages before any user
/// message, each message is its own chunk, and a message larger than the budget is
/// split into several chunks of its own line.
pub fn group_messages(
    messages: &[TranscriptMessage],
    params: &ChunkParams,
    counter: &dyn TokenCounter,
    zone: &DayZone,
) -> Vec<TranscriptChunk> {
    let budget = params.max_tokens.max(1);
    // Exchanges: index ranges into `messages`.
    let mut units: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match units.last_mut() {
            Some(u) if m.assistant && !messages[u.start].assistant => u.end = i + 1,
            _ => units.push(i..i + 1),
        }
    }
    let mut out = Vec::new();
    for u in units {
        let ms = &messages[u];
        let counts: Vec<usize> = ms.iter().map(|m| counter.count(&m.text)).collect();
        let first_time = ms.iter().find_map(|m| m.time);
        if ms.len() > 1 && counts.iter().sum::<usize>() <= budget {
            out.push(TranscriptChunk {
                start_line: ms[0].line,
                end_line: ms[ms.len() - 1].line,
                text: ms
                    .iter()
                    .map(|m| m.text.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                time: ms.iter().fold(None, |t, m| max_time(t, m.time)),
                context: turn_context(first_time, true, true, zone),
            });
            continue;
        }
        for (m, tokens) in ms.iter().zip(counts) {
            let context = turn_context(m.time, !m.assistant, m.assistant, zone);
            if tokens <= budget {
                out.push(TranscriptChunk {
                    start_line: m.line,
                    end_line: m.line,
                    text: m.text.clone(),
                    time: m.time,
                    context,
                });
                continue;
            }
            for piece in split_text(&m.text, budget, counter) {
                out.push(TranscriptChunk {
                    start_line: m.line,
                    end_line: m.line,
                    text: piece,
                    time: m.time,
                    context: context.clone(),
                });
            }
        }
    }
    out
}

fn max_time(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Split one long text into pieces of at most `budget` tokens: by lines, and
/// lines that are too long by words (and words that are too long by characters).
fn split_text(text: &str, budget: usize, counter: &dyn TokenCounter) -> Vec<String> {
    let mut units: Vec<(String, usize)> = Vec::new();
    for line in text.split('\n') {
        let n = counter.count(line);
        if n <= budget {
            units.push((format!("{line}\n"), n));
            continue;
        }
        for word in line.split_inclusive(char::is_whitespace) {
            let n = counter.count(word);
            if n <= budget {
                units.push((word.to_string(), n));
            } else {
                // A single enormous "word" (base64, minified JSON): cut by characters.
                let chars: Vec<char> = word.chars().collect();
                let per = (chars.len() / n.max(1) * budget).max(1);
                for part in chars.chunks(per) {
                    let s: String = part.iter().collect();
                    let n = counter.count(&s);
                    units.push((s, n));
                }
            }
        }
        // Units carry their own separators: the line's last unit ends it.
        if let Some(last) = units.last_mut() {
            last.0.push('\n');
        }
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut used = 0usize;
    for (u, n) in units {
        if used + n > budget && !cur.trim().is_empty() {
            out.push(std::mem::take(&mut cur));
            used = 0;
        }
        cur.push_str(&u);
        used += n;
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out.into_iter()
        .map(|s| s.trim_end().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::ApproxCounter;

    const UTC: DayZone = DayZone::Fixed(chrono::FixedOffset::east_opt(0).unwrap());

    fn fixed(secs: i32) -> DayZone {
        DayZone::Fixed(chrono::FixedOffset::east_opt(secs).unwrap())
    }

    #[test]
    fn turns_are_dated_with_the_offset_in_force_when_said() {
        // New York: UTC−5 in winter, UTC−4 in summer. 03:30 UTC is the evening
        // before in both, but 04:30 UTC is the same day in summer (00:30 EDT)
        // and the day before in winter (23:30 EST).
        let ny = DayZone::Named(chrono_tz::America::New_York);
        let summer = 1_783_139_400; // 2026-07-04T04:30:00Z (00:30 EDT, Saturday)
        let winter = 1_768_451_400; // 2026-01-15T04:30:00Z (23:30 EST, Wednesday the 14th)
        assert_eq!(
            turn_context(Some(summer), true, false, &ny),
            "2026-07-04 Saturday, user"
        );
        assert_eq!(
            turn_context(Some(winter), true, false, &ny),
            "2026-01-14 Wednesday, user"
        );
        // The control: one offset (today's, winter) for both dates the summer
        // turn on the wrong day.
        assert_eq!(
            turn_context(Some(summer), true, false, &fixed(-5 * 3600)),
            "2026-07-03 Friday, user"
        );
    }

    #[test]
    fn an_answer_after_the_indexed_part_reopens_its_exchange() {
        let meta = "{\"type\":\"session\"}\n";
        let u = line("user", "where is the kayak", "2026-03-02T10:00:00Z");
        let a = line("assistant", "at the boathouse", "2026-03-02T10:01:00Z");
        let tool = "{\"type\":\"tool_result\",\"content\":\"x\"}\n";
        let prefix = format!("{meta}{u}{tool}");
        // The answer opens the new part: read again from the question (line 2).
        assert_eq!(
            trailing_exchange(prefix.as_bytes(), a.as_bytes()),
            Some((meta.len(), 1))
        );
        // A new question (or nothing but ignored lines) closes nothing.
        assert_eq!(trailing_exchange(prefix.as_bytes(), u.as_bytes()), None);
        assert_eq!(trailing_exchange(prefix.as_bytes(), tool.as_bytes()), None);
        // No question before it: the answer stands alone either way.
        assert_eq!(trailing_exchange(meta.as_bytes(), a.as_bytes()), None);
        // A torn answer is not yet there.
        assert_eq!(
            trailing_exchange(prefix.as_bytes(), &a.as_bytes()[..a.len() - 1]),
            None
        );
    }

    /// One token per whitespace-separated word: easy budgets to reason about.
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
    }

    fn params(max: usize) -> ChunkParams {
        ChunkParams {
            max_tokens: max,
            overlap_tokens: 0,
        }
    }

    fn line(role: &str, content: &str, ts: &str) -> String {
        serde_json::json!({"role": role, "content": content, "timestamp": ts}).to_string() + "\n"
    }

    #[test]
    fn user_and_assistant_only() {
        let mut t = String::new();
        t.push_str("{\"type\":\"session\",\"id\":\"abc\",\"version\":1}\n");
        t.push_str(&line("system", "you are a bot", "2026-01-01T00:00:00Z"));
        t.push_str(&line(
            "user",
            "where is the kiwi planted",
            "2026-01-01T00:00:01Z",
        ));
        t.push_str(
            &(serde_json::json!({"role":"assistant","content":"","tool_calls":[{"id":"1","name":"read","arguments":"{\"path\":\"secret-plan.md\"}"}],"timestamp":"2026-01-01T00:00:02Z"}).to_string() + "\n"),
        );
        t.push_str(
            &(serde_json::json!({"role":"tool","content":"TOOL OUTPUT","tool_call_id":"1","timestamp":"2026-01-01T00:00:03Z"}).to_string() + "\n"),
        );
        t.push_str(&line(
            "assistant",
            "by the south fence",
            "2026-01-01T00:00:04Z",
        ));
        let r = read_transcript(t.as_bytes(), 1, &params(100), &Words, &UTC);
        assert_eq!(r.consumed_lines, 6);
        assert_eq!(r.consumed_bytes, t.len());
        assert_eq!(r.skipped_lines, 0);
        assert_eq!(r.chunks.len(), 1);
        let c = &r.chunks[0];
        assert_eq!(
            c.text,
            "user: where is the kiwi planted\nassistant: by the south fence"
        );
        assert_eq!((c.start_line, c.end_line), (3, 6));
        assert_eq!(c.time, Some(1767225604));
        assert!(!c.text.contains("TOOL OUTPUT") && !c.text.contains("secret-plan"));
    }

    #[test]
    fn content_blocks_take_text_only() {
        let t = serde_json::json!({
            "role": "assistant",
            "content": [
                {"type": "text", "text": "first part"},
                {"type": "tool_use", "id": "x", "name": "exec", "input": {"cmd": "rm -rf"}},
                {"type": "text", "text": "second part"}
            ],
            "timestamp": 1767225600,
            "unknown_field": {"nested": true}
        })
        .to_string()
            + "\n"
            + &serde_json::json!({
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "x", "content": "RESULT"}],
                "timestamp": 1767225601000i64
            })
            .to_string()
            + "\n";
        let r = read_transcript(t.as_bytes(), 1, &params(100), &Words, &UTC);
        assert_eq!(r.chunks.len(), 1);
        assert_eq!(r.chunks[0].text, "assistant: first part\nsecond part");
        assert_eq!(r.chunks[0].time, Some(1767225600));
        assert_eq!(r.consumed_lines, 2);
    }

    #[test]
    fn wrapped_messages_and_time_formats() {
        let t = "{\"type\":\"message\",\"timestamp\":\"2026-02-01T10:00:00+01:00\",\"message\":{\"role\":\"user\",\"content\":\"hello there\"}}\n";
        let r = read_transcript(t.as_bytes(), 1, &params(100), &Words, &UTC);
        assert_eq!(r.chunks[0].text, "user: hello there");
        assert_eq!(r.chunks[0].time, Some(1769936400));
        assert_eq!(
            parse_time(&serde_json::json!(1767225601000i64)),
            Some(1767225601)
        );
        assert_eq!(
            parse_time(&serde_json::json!("1767225601")),
            Some(1767225601)
        );
        assert_eq!(parse_time(&serde_json::json!("yesterday")), None);
    }

    #[test]
    fn torn_last_line_is_left_and_invalid_lines_are_counted() {
        let mut t = line("user", "one", "2026-01-01T00:00:00Z");
        t.push_str("this is not json\n");
        t.push_str("[1,2,3]\n");
        t.push('\n');
        let complete = t.len();
        t.push_str("{\"role\":\"user\",\"content\":\"half wri");
        let r = read_transcript(t.as_bytes(), 1, &params(100), &Words, &UTC);
        assert_eq!(r.consumed_bytes, complete);
        assert_eq!(r.consumed_lines, 4);
        assert_eq!(r.skipped_lines, 2);
        assert_eq!(r.chunks.len(), 1);
        assert!(!r.chunks.iter().any(|c| c.text.contains("half")));
        // Non-UTF-8 bytes on a complete line: skipped, not an error.
        let r = read_transcript(b"\xff\xfe\n", 1, &params(100), &Words, &UTC);
        assert_eq!((r.consumed_lines, r.skipped_lines), (1, 1));
        // Nothing complete at all.
        let r = read_transcript(b"{\"role\":", 1, &params(100), &Words, &UTC);
        assert_eq!(r, TranscriptRead::default());
    }

    #[test]
    fn append_continues_line_numbers() {
        let first = line("user", "alpha", "2026-01-01T00:00:00Z")
            + &line("assistant", "beta", "2026-01-01T00:00:01Z");
        let more = line("user", "gamma", "2026-01-01T00:00:02Z");
        let all = first.clone() + &more;
        let r1 = read_transcript(first.as_bytes(), 1, &params(100), &Words, &UTC);
        let r2 = read_transcript(
            &all.as_bytes()[r1.consumed_bytes..],
            1 + r1.consumed_lines,
            &params(100),
            &Words,
            &UTC,
        );
        assert_eq!(r2.chunks.len(), 1);
        assert_eq!(r2.chunks[0].text, "user: gamma");
        assert_eq!((r2.chunks[0].start_line, r2.chunks[0].end_line), (3, 3));
        assert_eq!(r1.consumed_bytes + r2.consumed_bytes, all.len());
    }

    #[test]
    fn an_exchange_is_a_chunk_when_it_fits_else_each_turn() {
        let mut t = String::new();
        // Two exchanges of 4 + 4 words, then a user turn without an answer.
        t.push_str(&line("user", "m0 x y", "2026-01-01T10:00:00Z"));
        t.push_str(&line("assistant", "a0 x y", "2026-01-01T10:00:01Z"));
        t.push_str(&line("user", "m1 x y", "2026-01-01T10:00:02Z"));
        t.push_str(&line("assistant", "a1 x y", "2026-01-01T10:00:03Z"));
        t.push_str(&line("user", "m2 x y", "2026-01-01T10:00:04Z"));
        t.push_str(&line("user", "m3 x y", "2026-01-01T10:00:05Z"));
        let r = read_transcript(t.as_bytes(), 1, &params(8), &Words, &UTC);
        let spans: Vec<(usize, usize)> = r
            .chunks
            .iter()
            .map(|c| (c.start_line, c.end_line))
            .collect();
        assert_eq!(spans, vec![(1, 2), (3, 4), (5, 5), (6, 6)]);
        assert_eq!(r.chunks[0].text, "user: m0 x y\nassistant: a0 x y");
        assert_eq!(
            r.chunks[0].context,
            "2026-01-01 Thursday, user and assistant"
        );
        assert_eq!(r.chunks[2].context, "2026-01-01 Thursday, user");
        // A budget one exchange does not fit: each turn on its own.
        let r = read_transcript(t.as_bytes(), 1, &params(7), &Words, &UTC);
        assert_eq!(r.chunks.len(), 6);
        for (i, c) in r.chunks.iter().enumerate() {
            assert!(Words.count(&c.text) <= 7, "{c:?}");
            assert_eq!((c.start_line, c.end_line), (i + 1, i + 1));
        }
        assert_eq!(r.chunks[1].context, "2026-01-01 Thursday, assistant");
        // An assistant turn before any user turn is a chunk of its own, and an
        // answer spread over several assistant messages (a tool call between)
        // stays with its question.
        let mut t = line("assistant", "welcome back", "2026-01-01T10:00:00Z");
        t.push_str(&line("user", "where is it", "2026-01-01T10:00:01Z"));
        t.push_str(&line("assistant", "let me look", "2026-01-01T10:00:02Z"));
        t.push_str(
            &(serde_json::json!({"role":"tool","content":"RESULT","tool_call_id":"1"}).to_string()
                + "\n"),
        );
        t.push_str(&line("assistant", "in the shed", "2026-01-01T10:00:03Z"));
        let r = read_transcript(t.as_bytes(), 1, &params(100), &Words, &UTC);
        let spans: Vec<(usize, usize)> = r
            .chunks
            .iter()
            .map(|c| (c.start_line, c.end_line))
            .collect();
        assert_eq!(spans, vec![(1, 1), (2, 5)]);
        assert_eq!(
            r.chunks[1].text,
            "user: where is it\nassistant: let me look\nassistant: in the shed"
        );
    }

    #[test]
    fn contexts_carry_the_local_day_and_the_speakers() {
        // 23:30 UTC on a Thursday is Friday two hours east of UTC.
        let t = 1_767_310_200; // 2026-01-01T23:30:00Z
        assert_eq!(
            turn_context(Some(t), true, false, &UTC),
            "2026-01-01 Thursday, user"
        );
        assert_eq!(
            turn_context(Some(t), false, true, &fixed(7200)),
            "2026-01-02 Friday, assistant"
        );
        assert_eq!(turn_context(None, true, true, &UTC), "user and assistant");
    }

    #[test]
    fn huge_message_splits_on_its_own_line() {
        let body: Vec<String> = (0..50).map(|i| format!("word{i}")).collect();
        let mut t = line("user", "short", "2026-01-01T00:00:00Z");
        t.push_str(&line("assistant", &body.join(" "), "2026-01-01T00:00:05Z"));
        t.push_str(&line("user", "after", "2026-01-01T00:00:09Z"));
        let r = read_transcript(t.as_bytes(), 1, &params(10), &Words, &UTC);
        let on_two: Vec<_> = r.chunks.iter().filter(|c| c.start_line == 2).collect();
        assert!(on_two.len() >= 5, "{:?}", r.chunks);
        for c in &on_two {
            assert_eq!(c.end_line, 2);
            assert!(Words.count(&c.text) <= 10, "{c:?}");
        }
        let joined: String = on_two
            .iter()
            .map(|c| c.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        for w in &body {
            assert!(joined.contains(w.as_str()), "lost {w}");
        }
        assert_eq!(r.chunks.first().unwrap().text, "user: short");
        assert_eq!(r.chunks.last().unwrap().text, "user: after");
        // A single unbroken blob is cut by characters and still fits.
        let blob = "x".repeat(5000);
        let t = line("user", &blob, "2026-01-01T00:00:00Z");
        let r = read_transcript(t.as_bytes(), 1, &params(50), &ApproxCounter, &UTC);
        assert!(r.chunks.len() > 1);
        for c in &r.chunks {
            assert!(ApproxCounter.count(&c.text) <= 50, "{}", c.text.len());
        }
        let total: usize = r.chunks.iter().map(|c| c.text.matches('x').count()).sum();
        assert_eq!(total, 5000);
    }

    #[test]
    fn secrets_are_redacted_before_chunking() {
        let t = line(
            "user",
            "my key is sk-ant-api03-AAAABBBBCCCCDDDDEEEE and password=hunter2",
            "2026-01-01T00:00:00Z",
        );
        let r = read_transcript(t.as_bytes(), 1, &params(100), &Words, &UTC);
        let text = &r.chunks[0].text;
        assert!(
            !text.contains("AAAABBBB") && !text.contains("hunter2"),
            "{text}"
        );
        assert!(text.contains("password=[REDACTED]"));
    }
}
