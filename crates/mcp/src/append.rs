//! `memory_append`: adds a note to today's daily note (`memory/YYYY-MM-DD.md`,
//! the date in the user's time zone from claw's clock) or to `MEMORY.md`.
//!
//! The text goes through the redactor ([`claw_memory_api::redact`]) before it is
//! written, and the file is opened through the agent's file jail
//! ([`claw_agent::tools::jail::Jail`]) — the policy of `write_file`: beneath the
//! workspace, no symlink leading out, never through a hard link or a dangling
//! symlink. Only these two targets can be written; the model never names a path.
//!
//! Bounded: one append takes at most [`MAX_APPEND_BYTES`] (text and heading),
//! and an append that would take the note past the index's per-file limit
//! (`memory.max_file_bytes`, passed in) is refused — such a note would silently
//! drop out of search. A refused append writes nothing and creates nothing.

use chrono::{DateTime, FixedOffset, Utc};
use claw_agent::tools::ToolError;
use claw_agent::tools::jail::Jail;
use claw_memory_api::redact::redact;
use serde::Serialize;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Most bytes one `memory_append` takes: its text and heading together.
pub const MAX_APPEND_BYTES: usize = 64 * 1024;

/// Where `memory_append` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `memory/YYYY-MM-DD.md` (default).
    Today,
    /// `MEMORY.md`.
    MemoryMd,
}

impl Target {
    /// `today` or `MEMORY.md`.
    pub fn parse(s: &str) -> Option<Target> {
        match s {
            "today" => Some(Target::Today),
            "MEMORY.md" => Some(Target::MemoryMd),
            _ => None,
        }
    }

    /// The workspace-relative path for `now` in `offset`.
    pub fn path(self, now: DateTime<Utc>, offset: FixedOffset) -> String {
        match self {
            Target::Today => daily_note(now, offset),
            Target::MemoryMd => "MEMORY.md".to_string(),
        }
    }
}

/// `memory/YYYY-MM-DD.md` for `now` in `offset`.
pub fn daily_note(now: DateTime<Utc>, offset: FixedOffset) -> String {
    format!(
        "memory/{}.md",
        now.with_timezone(&offset).format("%Y-%m-%d")
    )
}

/// What was appended (`memory_append`'s structured result).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Appended {
    /// Workspace-relative path of the note.
    pub path: String,
    /// The note did not exist before.
    pub created: bool,
    /// Bytes written.
    pub bytes: usize,
    /// Secrets were replaced with `[REDACTED]` markers.
    pub redacted: bool,
    /// First and last line of the appended text (1-based).
    pub start_line: usize,
    pub end_line: usize,
    /// `path#Lstart-Lend`.
    pub citation: String,
}

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error("`text` must not be empty")]
    Empty,
    /// Another writer of MEMORY.md (a consolidation) held its lock too long.
    #[error(transparent)]
    Busy(#[from] claw_memory_api::LockError),
    #[error("`heading` must be one line")]
    BadHeading,
    #[error(
        "the note is {bytes} bytes; one memory_append takes at most {MAX_APPEND_BYTES} bytes \
(64 KiB). Nothing was written: save a shorter note (the facts worth keeping), or split it \
over several appends"
    )]
    TooLarge { bytes: usize },
    #[error(
        "{path} would grow to {would_be} bytes, over the memory index's limit of {limit} bytes \
per file (memory.max_file_bytes): the whole note would drop out of search. Nothing was \
written: start a new note (a new file under memory/), or save this to the other target"
    )]
    NoteFull {
        path: String,
        would_be: u64,
        limit: u64,
    },
    #[error(transparent)]
    File(#[from] ToolError),
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Appends `text` (under `## heading` when given) to `rel` beneath `workspace`.
/// `jailed` follows `agent.jail_to_workspace`; `max_file_bytes` is the index's
/// per-file limit (`memory.max_file_bytes`): the note never grows past it.
pub fn append(
    workspace: &Path,
    jailed: bool,
    rel: &str,
    text: &str,
    heading: Option<&str>,
    max_file_bytes: u64,
) -> Result<Appended, AppendError> {
    let body = text.trim_end();
    if body.trim().is_empty() {
        return Err(AppendError::Empty);
    }
    let heading = heading.map(str::trim).filter(|h| !h.is_empty());
    if heading.is_some_and(|h| h.contains('\n') || h.contains('\r')) {
        return Err(AppendError::BadHeading);
    }
    let bytes = text.len() + heading.map_or(0, str::len);
    if bytes > MAX_APPEND_BYTES {
        return Err(AppendError::TooLarge { bytes });
    }
    let clean = redact(body);
    let redacted = clean.as_ref() != body;
    let heading_clean = heading.map(redact);
    let jail = Jail::new(workspace, jailed)?;
    let io = |source| AppendError::Io {
        path: rel.to_string(),
        source,
    };
    let full = |would_be: u64| AppendError::NoteFull {
        path: rel.to_string(),
        would_be,
        limit: max_file_bytes,
    };
    // The note as it is, read before anything is opened for writing (a
    // refused append must not even create the file); `None`: it is new. A
    // note already past the limit is not read whole.
    let existing = match jail.open_read(rel) {
        Ok(opened) => {
            let file = opened.handle;
            let size = file.metadata().map_err(io)?.len();
            if size > max_file_bytes {
                return Err(full(size.saturating_add(clean.len() as u64 + 1)));
            }
            // Bounded even if the note grows meanwhile (checked below).
            let mut raw = Vec::new();
            file.take(max_file_bytes.saturating_add(1))
                .read_to_end(&mut raw)
                .map_err(io)?;
            let text = String::from_utf8(raw)
                .map_err(|e| io(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
            Some(text)
        }
        Err(ToolError::NotFound { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    let is_new = existing.is_none();
    let existing = existing.unwrap_or_default();
    let mut block = String::new();
    if is_new && rel.starts_with("memory/") {
        let date = rel
            .trim_start_matches("memory/")
            .trim_end_matches(".md")
            .to_string();
        block.push_str(&format!("# {date}\n"));
    }
    if !existing.is_empty() && !existing.ends_with('\n') {
        block.push('\n');
    }
    if !existing.is_empty() || !block.is_empty() {
        block.push('\n');
    }
    if let Some(h) = &heading_clean {
        block.push_str(&format!("## {h}\n\n"));
    }
    // Everything before the text ends in a newline, so its line count is the
    // line above the text.
    let start_line = format!("{existing}{block}").lines().count() + 1;
    block.push_str(&clean);
    block.push('\n');
    let end_line = start_line + clean.lines().count().max(1) - 1;
    let would_be = (existing.len() + block.len()) as u64;
    if would_be > max_file_bytes {
        return Err(full(would_be));
    }
    let (opened, created) = jail.open_write(rel)?;
    let mut file = opened.handle;
    file.seek(SeekFrom::End(0)).map_err(io)?;
    file.write_all(block.as_bytes()).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(Appended {
        path: rel.to_string(),
        created,
        bytes: block.len(),
        redacted,
        start_line,
        end_line,
        citation: claw_memory_api::citation(rel, start_line, end_line),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// The index's default per-file limit.
    const MIB16: u64 = 16 * 1024 * 1024;
    const NOTE: &str = "memory/2026-11-05.md";

    /// `n` bytes of plain prose (nothing the redactor touches), ending in a letter.
    fn prose(n: usize) -> String {
        let mut s = "note ".repeat(n / 5 + 1);
        s.truncate(n - 1);
        s.push('x');
        s
    }

    #[test]
    fn one_append_is_at_most_64_kib_with_its_heading() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let a = append(ws, true, NOTE, &prose(MAX_APPEND_BYTES), None, MIB16).unwrap();
        assert!(!a.redacted);
        let before = std::fs::read(ws.join(NOTE)).unwrap();
        assert!(before.len() > MAX_APPEND_BYTES);

        let over = append(ws, true, NOTE, &prose(MAX_APPEND_BYTES + 1), None, MIB16);
        let Err(e @ AppendError::TooLarge { bytes }) = over else {
            panic!("{over:?}")
        };
        assert_eq!(bytes, MAX_APPEND_BYTES + 1);
        let msg = e.to_string();
        assert!(msg.contains("65536 bytes (64 KiB)"), "{msg}");
        assert!(msg.contains("Nothing was written"), "{msg}");
        // The heading counts: 5 bytes of heading leave 5 fewer for the text.
        let text = prose(MAX_APPEND_BYTES - 5);
        assert!(matches!(
            append(ws, true, NOTE, &format!("{text}y"), Some("Title"), MIB16),
            Err(AppendError::TooLarge { .. })
        ));
        // Four 4 MiB appends: every one refused, the note untouched.
        for _ in 0..4 {
            assert!(matches!(
                append(ws, true, NOTE, &prose(4 << 20), None, MIB16),
                Err(AppendError::TooLarge { .. })
            ));
        }
        assert_eq!(std::fs::read(ws.join(NOTE)).unwrap(), before);
        append(ws, true, NOTE, &text, Some("Title"), MIB16).unwrap();
        assert!(std::fs::read(ws.join(NOTE)).unwrap().len() > before.len() + text.len());
    }

    #[test]
    fn the_note_never_outgrows_the_index_limit() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        const LIMIT: u64 = 1000;
        append(ws, true, NOTE, "first fact", None, LIMIT).unwrap();
        let size = std::fs::metadata(ws.join(NOTE)).unwrap().len() as usize;
        // An append to a note ending in a newline adds a blank line, the text
        // and its newline: this one ends exactly at the limit.
        let fits = prose(LIMIT as usize - size - 2);
        let a = append(ws, true, NOTE, &fits, None, LIMIT).unwrap();
        assert_eq!(a.bytes, fits.len() + 2);
        let full = std::fs::read(ws.join(NOTE)).unwrap();
        assert_eq!(full.len() as u64, LIMIT);

        let over = append(ws, true, NOTE, "x", None, LIMIT);
        let Err(
            e @ AppendError::NoteFull {
                would_be, limit, ..
            },
        ) = over
        else {
            panic!("{over:?}")
        };
        assert_eq!((would_be, limit), (LIMIT + 3, LIMIT));
        let msg = e.to_string();
        assert!(
            msg.contains("memory/2026-11-05.md would grow to 1003 bytes"),
            "{msg}"
        );
        assert!(
            msg.contains("limit of 1000 bytes per file (memory.max_file_bytes)"),
            "{msg}"
        );
        assert!(msg.contains("start a new note"), "{msg}");
        assert_eq!(std::fs::read(ws.join(NOTE)).unwrap(), full);

        // A note already over the limit (written by hand) is refused unread.
        std::fs::write(ws.join("MEMORY.md"), prose(2000)).unwrap();
        assert!(matches!(
            append(ws, true, "MEMORY.md", "x", None, LIMIT),
            Err(AppendError::NoteFull { would_be: 2002, .. })
        ));
        assert_eq!(
            std::fs::read(ws.join("MEMORY.md")).unwrap(),
            prose(2000).as_bytes()
        );

        // A new note that would not fit is not even created.
        let other = "memory/2026-11-06.md";
        assert!(matches!(
            append(ws, true, other, &prose(990), None, LIMIT),
            Err(AppendError::NoteFull { .. })
        ));
        assert!(!ws.join(other).exists());
    }

    #[test]
    fn daily_note_follows_the_offset() {
        let now = Utc.with_ymd_and_hms(2026, 11, 5, 23, 30, 0).unwrap();
        let utc = FixedOffset::east_opt(0).unwrap();
        let plus2 = FixedOffset::east_opt(7200).unwrap();
        assert_eq!(daily_note(now, utc), "memory/2026-11-05.md");
        assert_eq!(daily_note(now, plus2), "memory/2026-11-06.md");
        assert_eq!(Target::parse("MEMORY.md"), Some(Target::MemoryMd));
        assert_eq!(Target::parse("memory.md"), None);
    }

    #[test]
    fn appends_redacted_text_with_lines_that_cite_it() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        let a = append(ws, true, "memory/2026-11-05.md", "first fact", None, MIB16).unwrap();
        assert!(a.created);
        let text = std::fs::read_to_string(ws.join("memory/2026-11-05.md")).unwrap();
        assert_eq!(text, "# 2026-11-05\n\nfirst fact\n");
        assert_eq!((a.start_line, a.end_line), (3, 3), "{text}");
        let key = "sk-proj-Abc123Def456Ghi789Jkl012Mno345Pqr678Stu901";
        let b = append(
            ws,
            true,
            "memory/2026-11-05.md",
            &format!("the key is {key}\nsecond line"),
            Some("Keys"),
            MIB16,
        )
        .unwrap();
        assert!(!b.created);
        assert!(b.redacted);
        let text = std::fs::read_to_string(ws.join("memory/2026-11-05.md")).unwrap();
        assert!(!text.contains(key), "{text}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[b.start_line - 2], "", "{text}");
        assert_eq!(lines[b.start_line - 3], "## Keys", "{text}");
        assert!(lines[b.start_line - 1].starts_with("the key is"), "{text}");
        assert_eq!(lines[b.end_line - 1], "second line");
        assert_eq!(b.end_line, lines.len());
        assert!(matches!(
            append(ws, true, "MEMORY.md", "  \n", None, MIB16),
            Err(AppendError::Empty)
        ));
        let m = append(ws, true, "MEMORY.md", "likes tea", None, MIB16).unwrap();
        assert_eq!((m.start_line, m.end_line), (1, 1));
        assert_eq!(
            std::fs::read_to_string(ws.join("MEMORY.md")).unwrap(),
            "likes tea\n"
        );
    }

    #[test]
    fn refuses_a_note_that_links_out_of_the_workspace() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside.md");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(&outside, "x").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("MEMORY.md")).unwrap();
        assert!(append(&ws, true, "MEMORY.md", "fact", None, MIB16).is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "x");
    }
}
