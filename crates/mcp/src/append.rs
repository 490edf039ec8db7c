//! `memory_append`: adds a note to today's daily note (`memory/YYYY-MM-DD.md`,
//! the date in the user's time zone from claw's clock) or to `MEMORY.md`.
//!
//! The text goes through the redactor ([`claw_memory::redact`]) before it is
//! written, and the file is opened through the agent's file jail
//! ([`claw_agent::tools::jail::Jail`]) — the policy of `write_file`: beneath the
//! workspace, no symlink leading out, never through a hard link or a dangling
//! symlink. Only these two targets can be written; the model never names a path.

use chrono::{DateTime, FixedOffset, Utc};
use claw_agent::tools::ToolError;
use claw_agent::tools::jail::Jail;
use claw_memory::redact::redact;
use serde::Serialize;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

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
    #[error("`heading` must be one line")]
    BadHeading,
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
/// `jailed` follows `agent.jail_to_workspace`.
pub fn append(
    workspace: &Path,
    jailed: bool,
    rel: &str,
    text: &str,
    heading: Option<&str>,
) -> Result<Appended, AppendError> {
    let body = text.trim_end();
    if body.trim().is_empty() {
        return Err(AppendError::Empty);
    }
    let heading = heading.map(str::trim).filter(|h| !h.is_empty());
    if heading.is_some_and(|h| h.contains('\n') || h.contains('\r')) {
        return Err(AppendError::BadHeading);
    }
    let clean = redact(body);
    let redacted = clean.as_ref() != body;
    let heading_clean = heading.map(redact);
    let jail = Jail::new(workspace, jailed)?;
    let (opened, created) = jail.open_write(rel)?;
    let mut file = opened.handle;
    let io = |source| AppendError::Io {
        path: rel.to_string(),
        source,
    };
    // The open is write-only: read the existing text through a second open.
    let existing = if created {
        String::new()
    } else {
        let mut s = String::new();
        jail.open_read(rel)?
            .handle
            .read_to_string(&mut s)
            .map_err(io)?;
        s
    };
    let mut block = String::new();
    if created && rel.starts_with("memory/") {
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
        citation: claw_memory::search::citation(rel, start_line, end_line),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

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
        let a = append(ws, true, "memory/2026-11-05.md", "first fact", None).unwrap();
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
            append(ws, true, "MEMORY.md", "  \n", None),
            Err(AppendError::Empty)
        ));
        let m = append(ws, true, "MEMORY.md", "likes tea", None).unwrap();
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
        assert!(append(&ws, true, "MEMORY.md", "fact", None).is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "x");
    }
}
