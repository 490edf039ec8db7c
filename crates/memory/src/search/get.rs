//! `memory get`: resolves a path to an indexed file of a source (refusing `..`,
//! paths outside every source and files that are not indexed), reads it again
//! beneath its source root, and cuts the requested window of lines.
#![warn(missing_docs)]

use super::storage::SearchStorage;
use super::types::{GetRequest, GetResponse, RefusedReason, SearchError};
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
    Ok(slice_lines(&text, &rel, &src.name, req))
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::types::GET_MAX_CHARS;

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
