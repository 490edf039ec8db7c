//! `memory get`: resolves a path to an indexed file of a source (refusing `..`,
//! paths outside every source and files that are not indexed), reads it again
//! beneath its source root, and cuts the requested window of lines.
#![warn(missing_docs)]

use super::storage::SearchStorage;
use super::types::{GetRequest, GetResponse, GetTurn, RefusedReason, SearchError};
use crate::config::MemoryConfig;
use crate::store::Store;
use crate::walk;
use std::path::{Component, Path};

/// Return lines of an indexed file. Refuses paths with `..`, absolute paths outside
/// every source, and files that are not in the `files` table.
pub fn get_lines(
    settings: &MemoryConfig,
    store: &Store,
    req: &GetRequest,
) -> Result<GetResponse, SearchError> {
    let sources = walk::sources(settings, store)?;
    get_lines_in(store, &sources, req)
}

/// [`get_lines`] over any [`SearchStorage`], with the sources already resolved.
pub fn get_lines_in(
    storage: &dyn SearchStorage,
    sources: &[walk::SourceRoot],
    req: &GetRequest,
) -> Result<GetResponse, SearchError> {
    let refused = |reason: RefusedReason| SearchError::Refused {
        path: req.path.clone(),
        reason,
    };
    let raw = req.path.trim();
    if raw.is_empty() || raw.contains('\0') {
        return Err(refused(RefusedReason::Invalid));
    }
    let p = Path::new(raw);
    if p.components().any(|c| matches!(c, Component::ParentDir)) {
        return Err(refused(RefusedReason::ParentDir));
    }
    let mut candidates: Vec<(&walk::SourceRoot, String)> = Vec::new();
    if p.is_absolute() {
        for s in sources {
            if let Some(rel) = walk::relative(&s.root, p) {
                candidates.push((s, rel));
            }
        }
        if candidates.is_empty() {
            return Err(refused(RefusedReason::OutsideSources));
        }
    } else {
        let rel: Vec<String> = p
            .components()
            .filter_map(|c| match c {
                Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                _ => None,
            })
            .collect();
        let rel = rel.join("/");
        for s in sources {
            candidates.push((s, rel.clone()));
        }
    }
    let mut found = None;
    for (s, rel) in candidates {
        if walk::belongs(s.kind, &rel) && storage.is_indexed(&s.name, &rel)? {
            found = Some((s, rel));
            break;
        }
    }
    let Some((src, rel)) = found else {
        return Err(SearchError::NotIndexed(req.path.clone()));
    };
    let abs = src.root.join(&rel);
    // Resolved again beneath the source root now: a file swapped for a symlink
    // out of it since indexing is refused, not served.
    let text = walk::read_source_file(src, &rel).map_err(|source| SearchError::Read {
        path: abs.display().to_string(),
        source,
    })?;
    let text = String::from_utf8_lossy(&text);
    // Served text goes through the same redactor as indexed text (the whole file, so a
    // multi-line private key is seen whole; redaction keeps the line numbers).
    let text = crate::redact::redact(&text);
    if src.kind != walk::SourceKind::Sessions {
        return Ok(slice_lines(&text, &rel, &src.name, req));
    }
    Ok(slice_transcript(&text, &rel, &src.name, req))
}

/// [`slice_lines`] for a session transcript: the window widened by
/// `req.turns_around` messages on either side, and its messages as turns.
/// (The text is redacted already; each line is parsed again for its message.)
pub fn slice_transcript(text: &str, path: &str, source: &str, req: &GetRequest) -> GetResponse {
    use crate::transcript::{LineKind, parse_line};
    let messages: Vec<(usize, crate::transcript::TranscriptMessage)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| match parse_line(l.as_bytes(), i + 1) {
            LineKind::Message(m) => Some((i + 1, m)),
            _ => None,
        })
        .collect();
    let mut req = req.clone();
    let from = req.from.max(1);
    let to = from.saturating_add(req.lines.max(1) - 1);
    if req.turns_around > 0 {
        let inside: Vec<usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, (l, _))| (from..=to).contains(l))
            .map(|(i, _)| i)
            .collect();
        // The window's messages, or where it would sit among them.
        let (first, last) = match (inside.first(), inside.last()) {
            (Some(&a), Some(&b)) => (a, b),
            _ => {
                let at = messages.partition_point(|(l, _)| *l < from);
                (at, at.saturating_sub(1))
            }
        };
        let a = first.saturating_sub(req.turns_around);
        let b = (last + req.turns_around).min(messages.len().saturating_sub(1));
        if let (Some((la, _)), Some((lb, _))) = (messages.get(a), messages.get(b)) {
            // The turns before count against the budget before the cited lines do:
            // start at the earliest of them from which the cited lines still fit
            // (a huge tool result just before a cited turn never pushes it out).
            let all: Vec<&str> = text.lines().collect();
            let cited_end = to.min(all.len());
            let chars_from = |l: usize| -> usize {
                all.get(l.saturating_sub(1)..cited_end)
                    .map_or(0, |ls| ls.iter().map(|s| s.chars().count() + 1).sum())
            };
            let start = messages[a..]
                .iter()
                .map(|(l, _)| *l)
                .take_while(|&l| l < from && l >= *la)
                .find(|&l| chars_from(l) <= req.max_chars)
                .unwrap_or(from);
            let (new_from, new_to) = (start.min(from), (*lb).max(to));
            req.from = new_from;
            req.lines = new_to - new_from + 1;
        }
    }
    let mut r = slice_lines(text, path, source, &req);
    r.turns = messages
        .into_iter()
        .filter(|(l, _)| (r.from..=r.to).contains(l))
        .map(|(line, m)| {
            let (role, said) = m
                .text
                .split_once(": ")
                .map_or(("user", m.text.as_str()), |(r, t)| (r, t));
            GetTurn {
                line,
                role: role.to_string(),
                text: said.to_string(),
                time: m
                    .time
                    .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            }
        })
        .collect();
    r
}

/// Cut `text` to the requested window. Pure.
pub fn slice_lines(text: &str, path: &str, source: &str, req: &GetRequest) -> GetResponse {
    let all: Vec<&str> = text.lines().collect();
    let from = req.from.max(1);
    let mut out = String::new();
    let mut chars = 0usize;
    let mut to = from - 1;
    let mut truncated = false;
    for (i, line) in all.iter().enumerate().skip(from - 1).take(req.lines.max(1)) {
        let n = line.chars().count() + 1;
        if chars + n > req.max_chars {
            if to < from {
                // A single line longer than the budget: cut it.
                out.extend(line.chars().take(req.max_chars));
                out.push('\n');
                to = i + 1;
                truncated = true;
            }
            break;
        }
        out.push_str(line);
        out.push('\n');
        chars += n;
        to = i + 1;
    }
    GetResponse {
        path: path.to_string(),
        source: source.to_string(),
        from,
        to,
        total_lines: all.len(),
        text: out,
        next_from: (to < all.len() && to >= from).then_some(to + 1),
        truncated,
        turns: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::types::GET_MAX_CHARS;

    #[test]
    fn a_cited_transcript_turn_comes_with_its_surroundings() {
        let mut t = String::from("{\"type\":\"session\",\"key\":\"k\"}\n");
        for i in 0..6 {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            t.push_str(
                &(serde_json::json!({"type":"message","role":role,"content":format!("m{i}"),
                    "timestamp":format!("2026-01-01T10:00:0{i}Z")})
                .to_string()
                    + "\n"),
            );
            if i == 2 {
                t.push_str("{\"type\":\"message\",\"role\":\"tool\",\"content\":\"R\"}\n");
            }
        }
        // Lines: 1 meta, 2 m0, 3 m1, 4 m2, 5 tool, 6 m3, 7 m4, 8 m5. Cite m3 (line 6).
        let r = slice_transcript(
            &t,
            "sessions/k.jsonl",
            "sessions",
            &GetRequest::new("sessions/k.jsonl#L6-L6").cited().unwrap(),
        );
        assert_eq!(
            (r.from, r.to),
            (3, 8),
            "two messages either side, the tool line between kept"
        );
        let said: Vec<(usize, &str, &str)> = r
            .turns
            .iter()
            .map(|t| (t.line, t.role.as_str(), t.text.as_str()))
            .collect();
        assert_eq!(
            said,
            vec![
                (3, "assistant", "m1"),
                (4, "user", "m2"),
                (6, "assistant", "m3"),
                (7, "user", "m4"),
                (8, "assistant", "m5")
            ]
        );
        assert_eq!(r.turns[0].time.as_deref(), Some("2026-01-01T10:00:01Z"));
        // Without turns around: exactly the lines asked for, with their turns.
        let r = slice_transcript(
            &t,
            "sessions/k.jsonl",
            "sessions",
            &GetRequest {
                from: 2,
                lines: 2,
                ..GetRequest::new("sessions/k.jsonl")
            },
        );
        assert_eq!((r.from, r.to, r.turns.len()), (2, 3, 2));
    }

    #[test]
    fn a_huge_tool_result_before_a_cited_turn_never_pushes_it_out() {
        let msg = |role: &str, text: &str| {
            serde_json::json!({"type":"message","role":role,"content":text}).to_string() + "\n"
        };
        let huge = serde_json::json!({"type":"message","role":"tool","content":"R".repeat(3 * GET_MAX_CHARS)})
            .to_string()
            + "\n";
        // Lines: 1 meta, 2 user, 3 assistant, 4 tool (huge), 5 user (cited), 6 assistant.
        let t = format!(
            "{{\"type\":\"session\"}}\n{}{}{huge}{}{}",
            msg("user", "before"),
            msg("assistant", "noted"),
            msg("user", "the cited turn"),
            msg("assistant", "the answer")
        );
        let req = GetRequest::new("sessions/k.jsonl#L5-L5").cited().unwrap();
        let r = slice_transcript(&t, "sessions/k.jsonl", "sessions", &req);
        assert!(r.text.contains("the cited turn"), "{:?}", (r.from, r.to));
        assert!(r.turns.iter().any(|t| t.line == 5), "{:?}", r.turns);
        assert_eq!((r.from, r.to), (5, 6), "the turn after still fits");
        // The control: the old window (two messages before) starts at line 2 and
        // its budget ends inside the tool result.
        let old = slice_lines(
            &t,
            "sessions/k.jsonl",
            "sessions",
            &GetRequest {
                from: 2,
                lines: 5,
                ..req.clone()
            },
        );
        assert!(!old.text.contains("the cited turn"));
        // Without the huge line the two messages before are kept as before.
        let small = t.replace(&"R".repeat(3 * GET_MAX_CHARS), "R");
        let r = slice_transcript(&small, "sessions/k.jsonl", "sessions", &req);
        assert_eq!((r.from, r.to), (2, 6));
    }

    #[test]
    fn slicing_pages_through_a_file() {
        let text: String = (1..=300).map(|i| format!("line {i}\n")).collect();
        let r = slice_lines(&text, "a.md", "memory", &GetRequest::new("a.md"));
        assert_eq!(
            (r.from, r.to, r.total_lines, r.next_from),
            (1, 120, 300, Some(121))
        );
        assert!(r.text.starts_with("line 1\n") && r.text.ends_with("line 120\n"));
        let r = slice_lines(
            &text,
            "a.md",
            "memory",
            &GetRequest {
                from: 281,
                ..GetRequest::new("a.md")
            },
        );
        assert_eq!((r.to, r.next_from), (300, None));
        // Character budget.
        let r = slice_lines(
            &text,
            "a.md",
            "memory",
            &GetRequest {
                max_chars: 20,
                ..GetRequest::new("a.md")
            },
        );
        assert_eq!((r.to, r.next_from), (2, Some(3)));
        // One huge line is cut, and paging continues after it.
        let huge = format!("{}\nnext\n", "x".repeat(50_000));
        let r = slice_lines(&huge, "a.md", "memory", &GetRequest::new("a.md"));
        assert!(r.truncated && r.text.chars().count() == GET_MAX_CHARS + 1);
        assert_eq!(r.next_from, Some(2));
        // Past the end: nothing.
        let r = slice_lines(
            "a\n",
            "a.md",
            "memory",
            &GetRequest {
                from: 5,
                ..GetRequest::new("a.md")
            },
        );
        assert_eq!((r.text.as_str(), r.next_from), ("", None));
    }
}
