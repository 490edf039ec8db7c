//! Session files: `workspace/sessions/<file>.jsonl`, one JSON record per line — a
//! `session` metadata line first, then `message` records (the [`Message`] type with a
//! `"type":"message"` field) and `compaction` records, appended and synced as each
//! message completes, so a crash loses at most the message in flight. Loading
//! tolerates a torn last line, unknown fields and unparsable lines (skipped and
//! counted).
//!
//! Key → file name: every character outside `[A-Za-z0-9._-]` becomes `_`, a leading
//! `.` becomes `_`, and the name is capped at 120 characters; so `cli:default` is
//! `cli_default.jsonl`. Different keys can map to the same name (`cli:a` and
//! `cli_a`): the metadata line records the real key and opening a file that belongs
//! to another key is an error, never a silent mix.
//!
//! Invariant: secrets given to the writer (API keys) are never written to a session
//! file; large tool results are stored truncated (head + tail).

use crate::message::{Message, Role};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Format version written in the metadata line.
pub const FORMAT_VERSION: u32 = 1;
/// Tool results longer than this (bytes) are kept as head + tail in history.
pub const MAX_TOOL_RESULT_BYTES: usize = 16 * 1024;
/// Replacement for secrets.
pub const REDACTED: &str = "[REDACTED]";

/// The first line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionMeta {
    pub key: String,
    pub created: DateTime<Utc>,
    pub version: u32,
    /// How far the conversation was consolidated into MEMORY.md (absent: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_consolidated: Option<ConsolidationMark>,
}

/// The `last_consolidated` value of the metadata line: the first `messages`
/// message records of the session file were distilled into MEMORY.md at `at`,
/// so they are never consolidated again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsolidationMark {
    pub at: DateTime<Utc>,
    pub messages: usize,
}

/// A compaction: the first `replaced` messages of the live history (after earlier
/// compactions) were replaced by `summary`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactionRecord {
    pub timestamp: DateTime<Utc>,
    pub summary: String,
    pub replaced: usize,
    /// Estimated context tokens before and after.
    #[serde(default)]
    pub tokens_before: usize,
    #[serde(default)]
    pub tokens_after: usize,
    /// Whether the model was given its memory-flush turn first.
    #[serde(default)]
    pub memory_flushed: bool,
}

/// One line of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    Session(SessionMeta),
    Message(Message),
    Compaction(CompactionRecord),
}

/// Errors of session files.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("session file {path} belongs to session `{found}`, not `{wanted}`")]
    KeyMismatch {
        path: PathBuf,
        found: String,
        wanted: String,
    },
    #[error("cannot encode a session record: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("session writer task failed: {0}")]
    Task(String),
}

/// The file name (without directory) of a session key.
pub fn file_name_for_key(key: &str) -> String {
    let mut name: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    if name.is_empty() || name.starts_with('.') {
        name.replace_range(0..0, "_");
    }
    format!("{name}.jsonl")
}

/// The path of a session file in `sessions_dir`.
pub fn session_path(sessions_dir: &Path, key: &str) -> PathBuf {
    sessions_dir.join(file_name_for_key(key))
}

/// What was read from a session file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Loaded {
    pub meta: Option<SessionMeta>,
    pub records: Vec<Record>,
    /// Complete lines that did not parse (skipped).
    pub skipped: usize,
    /// The last line had no newline and did not parse (a write cut short).
    pub torn_tail: bool,
}

/// The conversation state a session file describes: the summary of compacted
/// history and the messages after it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    pub summary: Option<String>,
    pub messages: Vec<Message>,
    /// Message records of the file before `messages[0]` (replaced by summaries).
    pub offset: usize,
    /// From the metadata line.
    pub last_consolidated: Option<ConsolidationMark>,
}

/// Parse a session file's content. Pure.
pub fn parse(text: &str) -> Loaded {
    let mut out = Loaded::default();
    let ends_with_newline = text.ends_with('\n');
    let lines: Vec<&str> = text.split('\n').collect();
    let n = lines.len();
    for (i, line) in lines.into_iter().enumerate() {
        let is_last_piece = i + 1 == n;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(Record::Session(meta)) if out.meta.is_none() => out.meta = Some(meta),
            Ok(Record::Session(_)) => out.skipped += 1,
            Ok(r) => out.records.push(r),
            Err(_) if is_last_piece && !ends_with_newline => out.torn_tail = true,
            Err(_) => out.skipped += 1,
        }
    }
    out
}

impl Loaded {
    /// Replay messages and compactions into the live history.
    pub fn history(&self) -> History {
        let mut h = History {
            last_consolidated: self.meta.as_ref().and_then(|m| m.last_consolidated),
            ..History::default()
        };
        for r in &self.records {
            match r {
                Record::Message(m) => h.messages.push(m.clone()),
                Record::Compaction(c) => {
                    let n = c.replaced.min(h.messages.len());
                    h.messages.drain(..n);
                    h.offset += n;
                    h.summary = Some(c.summary.clone());
                }
                Record::Session(_) => {}
            }
        }
        h
    }
}

/// Keep the head and tail of `text` when it is longer than `max` bytes, with a
/// marker saying how much was left out. Cuts on character boundaries.
pub fn truncate_middle(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let half = max / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let omitted = tail_start - head_end;
    Cow::Owned(format!(
        "{}\n[… {omitted} bytes omitted …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    ))
}

/// Remove secrets from text: exact known secret values, then the memory redactor's patterns.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    let mut s = text.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        if s.contains(secret.as_str()) {
            s = s.replace(secret.as_str(), REDACTED);
        }
    }
    claw_memory_api::redact::redact(&s).into_owned()
}

/// Prepare a message for the session file: scrub secrets, truncate large tool results.
pub fn scrub_message(m: &Message, secrets: &[String]) -> Message {
    let mut m = m.clone();
    if m.role == Role::Tool {
        m.content = truncate_middle(&m.content, MAX_TOOL_RESULT_BYTES).into_owned();
    }
    m.content = scrub(&m.content, secrets);
    for c in &mut m.tool_calls {
        c.arguments = scrub(&c.arguments, secrets);
    }
    m
}

/// An open session file, appending records. Blocking I/O: call from a blocking
/// thread (see [`SessionHandle`] for the async wrapper).
#[derive(Debug)]
pub struct SessionWriter {
    path: PathBuf,
    file: std::fs::File,
    secrets: Vec<String>,
}

impl SessionWriter {
    /// Open (creating the directory and the metadata line if new) the session `key`
    /// in `dir`, returning the writer and what the file already held.
    pub fn open(
        dir: &Path,
        key: &str,
        secrets: Vec<String>,
        now: DateTime<Utc>,
    ) -> Result<(SessionWriter, Loaded), SessionError> {
        let path = session_path(dir, key);
        let io = |source| SessionError::Io {
            path: path.clone(),
            source,
        };
        claw_memory_api::private::create_dir_all(dir).map_err(io)?;
        let existing = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let mut file = claw_memory_api::private::file_options()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        claw_memory_api::private::tighten_file(&path).map_err(io)?;
        let loaded = match existing {
            Some(bytes) if !bytes.is_empty() => {
                let text = String::from_utf8_lossy(&bytes);
                let loaded = parse(&text);
                if let Some(meta) = &loaded.meta
                    && meta.key != key
                {
                    return Err(SessionError::KeyMismatch {
                        path,
                        found: meta.key.clone(),
                        wanted: key.to_string(),
                    });
                }
                // A torn last line: end it so the next record starts on a fresh line.
                if !bytes.ends_with(b"\n") {
                    file.write_all(b"\n").map_err(io)?;
                }
                loaded
            }
            _ => Loaded::default(),
        };
        let mut w = SessionWriter {
            path,
            file,
            secrets,
        };
        if loaded.meta.is_none() {
            w.append(&Record::Session(SessionMeta {
                key: key.to_string(),
                created: now,
                version: FORMAT_VERSION,
                last_consolidated: None,
            }))?;
        }
        Ok((w, loaded))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Record `mark` as `last_consolidated` in the metadata line. The file is
    /// rewritten beside itself and renamed over (a crash leaves the old or the
    /// new file, never a mix); unknown fields of the line are kept.
    pub fn mark_consolidated(&mut self, mark: ConsolidationMark) -> Result<(), SessionError> {
        let io = |source| SessionError::Io {
            path: self.path.clone(),
            source,
        };
        let text = std::fs::read_to_string(&self.path).map_err(io)?;
        let (first, rest) = text.split_once('\n').unwrap_or((text.as_str(), ""));
        let mut meta: serde_json::Value = serde_json::from_str(first)?;
        let Some(obj) = meta.as_object_mut().filter(|o| o["type"] == "session") else {
            return Err(SessionError::Task(
                "the first line of the session file is not its metadata".into(),
            ));
        };
        obj.insert("last_consolidated".into(), serde_json::to_value(mark)?);
        let mut out = serde_json::to_vec(&meta)?;
        out.push(b'\n');
        out.extend_from_slice(rest.as_bytes());
        claw_base::fs::write_atomic(&self.path, &out, claw_base::fs::Durability::Durable)
            .map_err(io)?;
        self.file = claw_memory_api::private::file_options()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(io)?;
        Ok(())
    }

    /// Append one record as one line and sync it to disk.
    pub fn append(&mut self, record: &Record) -> Result<(), SessionError> {
        let record = match record {
            Record::Message(m) => Record::Message(scrub_message(m, &self.secrets)),
            Record::Compaction(c) => Record::Compaction(CompactionRecord {
                summary: scrub(&c.summary, &self.secrets),
                ..c.clone()
            }),
            other => other.clone(),
        };
        let mut line = serde_json::to_vec(&record)?;
        line.push(b'\n');
        let io = |source| SessionError::Io {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(&line).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

/// Keep a finished session under a new name, `<name>.<YYYYmmddTHHMMSSZ>.jsonl`
/// next to it (still indexed as a transcript), so the key starts fresh. Returns
/// the new path, or `None` when there was no file. Blocking.
pub fn archive(path: &Path, now: DateTime<Utc>) -> Result<Option<PathBuf>, SessionError> {
    if !path.exists() {
        return Ok(None);
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stamp = now.format("%Y%m%dT%H%M%SZ");
    let mut target = path.with_file_name(format!("{stem}.{stamp}.jsonl"));
    let mut n = 1;
    while target.exists() {
        target = path.with_file_name(format!("{stem}.{stamp}-{n}.jsonl"));
        n += 1;
    }
    std::fs::rename(path, &target).map_err(|source| SessionError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(Some(target))
}

/// Async wrapper: each append runs on the blocking pool.
#[derive(Debug)]
pub struct SessionHandle {
    writer: Option<SessionWriter>,
    path: PathBuf,
}

impl SessionHandle {
    /// Open a session on the blocking pool.
    pub async fn open(
        dir: PathBuf,
        key: String,
        secrets: Vec<String>,
        now: DateTime<Utc>,
    ) -> Result<(SessionHandle, Loaded), SessionError> {
        let (w, loaded) =
            tokio::task::spawn_blocking(move || SessionWriter::open(&dir, &key, secrets, now))
                .await
                .map_err(|e| SessionError::Task(e.to_string()))??;
        let path = w.path().to_path_buf();
        Ok((
            SessionHandle {
                writer: Some(w),
                path,
            },
            loaded,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`SessionWriter::mark_consolidated`] without blocking the runtime.
    pub async fn mark_consolidated(&mut self, mark: ConsolidationMark) -> Result<(), SessionError> {
        let mut w = self.writer.take().ok_or_else(|| {
            SessionError::Task("session writer lost by an earlier failure".into())
        })?;
        let (w, res) = tokio::task::spawn_blocking(move || {
            let r = w.mark_consolidated(mark);
            (w, r)
        })
        .await
        .map_err(|e| SessionError::Task(e.to_string()))?;
        self.writer = Some(w);
        res
    }

    /// Append one record (synced) without blocking the runtime.
    pub async fn append(&mut self, record: Record) -> Result<(), SessionError> {
        let mut w = self.writer.take().ok_or_else(|| {
            SessionError::Task("session writer lost by an earlier failure".into())
        })?;
        let (w, res) = tokio::task::spawn_blocking(move || {
            let r = w.append(&record);
            (w, r)
        })
        .await
        .map_err(|e| SessionError::Task(e.to_string()))?;
        self.writer = Some(w);
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolCall, Usage};
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
    }

    fn sample() -> Vec<Message> {
        let call = ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"MEMORY.md"}"#.into(),
        };
        let mut a = Message::assistant("", vec![call.clone()], t(1));
        a.usage = Some(Usage {
            input_tokens: 10,
            output_tokens: 3,
        });
        vec![
            Message::user("hello", t(0)),
            a,
            Message::tool_result(&call, "file text", false, t(2)),
            Message::assistant("done", vec![], t(3)),
        ]
    }

    #[test]
    fn key_mapping() {
        assert_eq!(file_name_for_key("cli:default"), "cli_default.jsonl");
        assert_eq!(file_name_for_key("tg/123 x"), "tg_123_x.jsonl");
        assert_eq!(file_name_for_key("../etc"), "_.._etc.jsonl");
        assert_eq!(file_name_for_key(""), "_.jsonl");
        assert_eq!(file_name_for_key(&"k".repeat(500)).len(), 120 + 6);
    }

    #[test]
    fn reload_equals_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, loaded) = SessionWriter::open(dir.path(), "cli:default", vec![], t(0)).unwrap();
        assert!(loaded.records.is_empty());
        for m in sample() {
            w.append(&Record::Message(m)).unwrap();
        }
        drop(w);
        let text = std::fs::read_to_string(dir.path().join("cli_default.jsonl")).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["type"], "session");
        assert_eq!(first["key"], "cli:default");
        assert_eq!(first["version"], 1);
        let second: serde_json::Value = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        assert_eq!(second["type"], "message");
        assert_eq!(second["role"], "user");
        let (_, loaded) = SessionWriter::open(dir.path(), "cli:default", vec![], t(9)).unwrap();
        assert_eq!(loaded.skipped, 0);
        assert_eq!(loaded.meta.as_ref().unwrap().created, t(0));
        assert_eq!(loaded.history().messages, sample());
    }

    /// Session `k` in `dir`, created at t(0) and holding the [`sample`] messages.
    fn sample_session(dir: &Path) -> SessionWriter {
        let (mut w, _) = SessionWriter::open(dir, "k", vec![], t(0)).unwrap();
        for m in sample() {
            w.append(&Record::Message(m)).unwrap();
        }
        w
    }

    #[test]
    fn torn_last_line_is_tolerated_and_later_appends_are_readable() {
        let dir = tempfile::tempdir().unwrap();
        let w = sample_session(dir.path());
        drop(w);
        let path = dir.path().join("k.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"type":"message","role":"assistant","content":"half"#)
            .unwrap();
        drop(f);
        let (mut w, loaded) = SessionWriter::open(dir.path(), "k", vec![], t(5)).unwrap();
        assert!(loaded.torn_tail);
        assert_eq!(loaded.history().messages.len(), 4);
        w.append(&Record::Message(Message::user("after", t(6))))
            .unwrap();
        drop(w);
        let text = std::fs::read_to_string(&path).unwrap();
        let again = parse(&text);
        assert!(!again.torn_tail);
        assert_eq!(again.skipped, 1, "the torn line is now a complete bad line");
        let msgs = again.history().messages;
        assert_eq!(msgs.len(), 5);
        assert_eq!(msgs[4].content, "after");
    }

    #[test]
    fn unknown_fields_and_bad_lines() {
        let text = concat!(
            r#"{"type":"session","key":"k","created":"2024-01-01T00:00:00Z","version":1,"extra":true}"#,
            "\n",
            r#"{"type":"message","role":"user","content":"hi","timestamp":"2024-01-01T00:00:01Z","mood":"x"}"#,
            "\n",
            "not json\n",
            r#"{"type":"future_thing","x":1}"#,
            "\n",
            r#"{"type":"message","role":"assistant","content":"yo","timestamp":"2024-01-01T00:00:02Z"}"#,
            "\n",
        );
        let l = parse(text);
        assert_eq!(l.meta.as_ref().unwrap().key, "k");
        assert_eq!(l.skipped, 2);
        assert!(!l.torn_tail);
        let h = l.history();
        assert_eq!(h.messages.len(), 2);
        assert_eq!(h.messages[1].content, "yo");
    }

    #[test]
    fn compaction_record_replays() {
        let mut records: Vec<Record> = sample().into_iter().map(Record::Message).collect();
        records.push(Record::Compaction(CompactionRecord {
            timestamp: t(4),
            summary: "they said hello".into(),
            replaced: 3,
            tokens_before: 100,
            tokens_after: 20,
            memory_flushed: true,
        }));
        records.push(Record::Message(Message::user("next", t(5))));
        let l = Loaded {
            records,
            ..Default::default()
        };
        let h = l.history();
        assert_eq!(h.summary.as_deref(), Some("they said hello"));
        assert_eq!(
            h.messages
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>(),
            ["done", "next"]
        );
    }

    #[test]
    fn secrets_are_never_written_and_big_results_truncated() {
        let dir = tempfile::tempdir().unwrap();
        let secret = "sk-test-SECRET-1234567890".to_string();
        let (mut w, _) = SessionWriter::open(dir.path(), "k", vec![secret.clone()], t(0)).unwrap();
        let call = ToolCall {
            id: "c".into(),
            name: "exec".into(),
            arguments: format!(r#"{{"command":"echo {secret}"}}"#),
        };
        w.append(&Record::Message(Message::assistant(
            "",
            vec![call.clone()],
            t(1),
        )))
        .unwrap();
        let big = format!("HEAD{}{}TAIL", secret, "x".repeat(100_000));
        w.append(&Record::Message(Message::tool_result(
            &call,
            big,
            false,
            t(2),
        )))
        .unwrap();
        drop(w);
        let text = std::fs::read_to_string(dir.path().join("k.jsonl")).unwrap();
        assert!(!text.contains(&secret));
        assert!(text.contains(REDACTED));
        let h = parse(&text).history();
        let result = &h.messages[1].content;
        assert!(
            result.len() < MAX_TOOL_RESULT_BYTES + 200,
            "{}",
            result.len()
        );
        assert!(result.starts_with("HEAD") && result.ends_with("TAIL"));
        assert!(result.contains("bytes omitted"));
    }

    #[test]
    fn archive_moves_the_file_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, _) = SessionWriter::open(dir.path(), "cli:default", vec![], t(0)).unwrap();
        w.append(&Record::Message(Message::user("old", t(1))))
            .unwrap();
        drop(w);
        let path = dir.path().join("cli_default.jsonl");
        let moved = archive(&path, t(2)).unwrap().unwrap();
        assert!(!path.exists());
        assert!(
            moved
                .file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("cli_default.2023")
        );
        let (_, loaded) = SessionWriter::open(dir.path(), "cli:default", vec![], t(3)).unwrap();
        assert!(loaded.records.is_empty());
        assert_eq!(archive(&dir.path().join("none.jsonl"), t(4)).unwrap(), None);
    }

    #[test]
    fn last_consolidated_is_kept_in_the_metadata_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = sample_session(dir.path());
        let mark = ConsolidationMark {
            at: t(5),
            messages: 4,
        };
        w.mark_consolidated(mark).unwrap();
        // Appends after the rewrite land in the new file.
        w.append(&Record::Message(Message::user("later", t(6))))
            .unwrap();
        drop(w);
        let text = std::fs::read_to_string(dir.path().join("k.jsonl")).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["type"], "session");
        assert_eq!(first["last_consolidated"]["messages"], 4);
        assert_eq!(text.lines().count(), 6);
        let (_, loaded) = SessionWriter::open(dir.path(), "k", vec![], t(9)).unwrap();
        assert_eq!(loaded.skipped, 0);
        let h = loaded.history();
        assert_eq!(h.last_consolidated, Some(mark));
        assert_eq!(h.messages.len(), 5);
        assert_eq!(h.offset, 0);
    }

    #[test]
    fn other_keys_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        SessionWriter::open(dir.path(), "cli:a", vec![], t(0)).unwrap();
        let err = SessionWriter::open(dir.path(), "cli_a", vec![], t(0)).unwrap_err();
        assert!(matches!(err, SessionError::KeyMismatch { .. }), "{err}");
    }

    #[test]
    fn truncate_middle_respects_char_boundaries() {
        let s = "é".repeat(1000);
        let t = truncate_middle(&s, 101);
        assert!(t.contains("omitted"));
        assert!(t.starts_with('é') && t.ends_with('é'));
        assert_eq!(truncate_middle("short", 100), "short");
    }
}
