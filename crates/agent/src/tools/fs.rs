//! File tools: `read_file` (line ranges, size cap, where to continue),
//! `write_file` (creates parents), `edit_file` (exact, unique replacement; the
//! closest text on a miss) and `list_dir`. Blocking I/O: the registry runs these
//! on `spawn_blocking`.
//!
//! Invariants: a refused or failed `edit_file` never modifies the file; with the
//! jail on, no path outside the workspace is read or written: every path is
//! opened once through [`super::jail::Jail`] and used through that descriptor;
//! no file tool makes a file larger than [`MAX_WRITE_BYTES`] (`write_file`'s
//! content is refused over it before anything is opened; an `edit_file` whose
//! result is over it and larger than the file was is refused, nothing changed).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};

use serde::{Deserialize, Serialize};

use super::jail::{Jail, io_error};
use super::{ClosestMatch, ToolContext, ToolError, ToolOutput, ToolResult};
use claw_memory_api::beneath::{self, EntryType};

/// Lines returned by one `read_file` when the model does not say.
pub const DEFAULT_READ_LINES: usize = 500;
/// Most lines one `read_file` returns.
pub const MAX_READ_LINES: usize = 2_000;
/// Most characters one `read_file` returns.
pub const MAX_READ_CHARS: usize = 40_000;
/// Most entries one `list_dir` returns.
pub const MAX_DIR_ENTRIES: usize = 500;
/// Largest file `edit_file` works on.
pub const MAX_EDIT_BYTES: u64 = 8 * 1024 * 1024;
/// Most bytes `write_file` writes, and the most `edit_file` lets a file grow
/// to (the tool table's descriptions say "4 MiB"; a test ties them together).
pub const MAX_WRITE_BYTES: usize = 4 * 1024 * 1024;
/// Longest closest-match excerpt shown after a failed edit.
const MAX_CLOSEST_CHARS: usize = 2_000;

/// Arguments of `read_file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    pub path: String,
    #[serde(default)]
    pub start_line: Option<usize>,
    #[serde(default)]
    pub max_lines: Option<usize>,
}

/// Arguments of `write_file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteFileArgs {
    pub path: String,
    pub content: String,
}

/// Arguments of `edit_file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    pub path: String,
    pub old_text: String,
    pub new_text: String,
}

/// Arguments of `list_dir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    #[serde(default)]
    pub path: Option<String>,
}

/// What a directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of a `list_dir` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub kind: EntryKind,
    /// Size in bytes, for files.
    pub size: Option<u64>,
}

/// `read_file`: a window of lines, streamed so that large files cost no memory.
pub fn read_file(ctx: &ToolContext, args: &ReadFileArgs) -> ToolResult {
    read_file_in(&Jail::from_context(ctx)?, args)
}

/// [`read_file`] through a given jail.
pub fn read_file_in(jail: &Jail, args: &ReadFileArgs) -> ToolResult {
    let opened = jail.open_read(&args.path)?;
    let shown = opened.shown;
    let file = opened.handle;
    let start = args.start_line.unwrap_or(1).max(1);
    let max_lines = args
        .max_lines
        .unwrap_or(DEFAULT_READ_LINES)
        .clamp(1, MAX_READ_LINES);
    let mut reader = BufReader::new(file);
    let mut buf = Vec::new();
    let mut total = 0usize;
    let mut text = String::new();
    let mut chars = 0usize;
    let mut end = start.saturating_sub(1);
    let mut cut = false;
    loop {
        buf.clear();
        let n = reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| io_error(&shown, e))?;
        if n == 0 {
            break;
        }
        if total == 0 && buf.iter().take(8192).any(|b| *b == 0) {
            return Err(ToolError::Io {
                path: shown,
                message: "looks like a binary file (contains NUL bytes); not shown".into(),
            });
        }
        total += 1;
        if cut || total < start || total >= start + max_lines {
            continue;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        let len = line.chars().count() + 1;
        if chars + len > MAX_READ_CHARS {
            if total == start {
                // A single huge line: show its beginning.
                let room = MAX_READ_CHARS.saturating_sub(1);
                text.extend(line.chars().take(room));
                text.push('\n');
                end = total;
            }
            cut = true;
            continue;
        }
        text.push_str(line);
        text.push('\n');
        chars += len;
        end = total;
    }
    if total > 0 && start > total {
        return Err(ToolError::invalid(
            "read_file",
            format!("start_line {start} is past the end of {shown} ({total} lines)"),
        ));
    }
    if text.ends_with('\n') {
        text.pop();
    }
    Ok(ToolOutput::FileRead {
        path: shown,
        start_line: start.min(total.max(1)),
        end_line: end,
        total_lines: total,
        text,
        truncated: end < total,
    })
}

/// `write_file`: replaces the file, creating parent directories.
pub fn write_file(ctx: &ToolContext, args: &WriteFileArgs) -> ToolResult {
    write_file_in(&Jail::from_context(ctx)?, args)
}

/// [`write_file`] through a given jail: the file is opened (or created) once
/// and written through that descriptor.
pub fn write_file_in(jail: &Jail, args: &WriteFileArgs) -> ToolResult {
    if args.content.len() > MAX_WRITE_BYTES {
        return Err(ToolError::invalid(
            "write_file",
            format!(
                "`content` is {} bytes, over the limit of {MAX_WRITE_BYTES} bytes (4 MiB) one \
                 write_file may write; nothing was written. Write less, or split the content \
                 over several files",
                args.content.len()
            ),
        ));
    }
    let (opened, created) = jail.open_write(&args.path)?;
    let mut file = opened.handle;
    let shown = opened.shown;
    file.set_len(0)
        .and_then(|()| file.write_all(args.content.as_bytes()))
        .map_err(|e| io_error(&shown, e))?;
    Ok(ToolOutput::FileWritten {
        path: shown,
        bytes: args.content.len(),
        created,
    })
}

/// `edit_file`: replaces the single occurrence of `old_text`.
pub fn edit_file(ctx: &ToolContext, args: &EditFileArgs) -> ToolResult {
    edit_file_in(&Jail::from_context(ctx)?, args)
}

/// [`edit_file`] through a given jail: the file is opened read-write once; it is
/// read and rewritten through that descriptor.
pub fn edit_file_in(jail: &Jail, args: &EditFileArgs) -> ToolResult {
    if args.old_text.is_empty() {
        return Err(ToolError::invalid(
            "edit_file",
            "old_text must not be empty (use write_file to create a file)",
        ));
    }
    let (opened, size) = jail.open_edit(&args.path)?;
    let shown = opened.shown;
    let mut file = opened.handle;
    if size > MAX_EDIT_BYTES {
        return Err(ToolError::Io {
            path: shown,
            message: format!("is larger than {MAX_EDIT_BYTES} bytes; not edited"),
        });
    }
    let mut content = String::new();
    file.read_to_string(&mut content)
        .map_err(|e| io_error(&shown, e))?;
    let positions: Vec<usize> = content
        .match_indices(args.old_text.as_str())
        .map(|(i, _)| i)
        .collect();
    match positions.len() {
        0 => Err(ToolError::EditNoMatch {
            path: shown,
            closest: closest_match(&content, &args.old_text),
        }),
        1 => {
            let at = positions[0];
            let mut updated = String::with_capacity(content.len() + args.new_text.len());
            updated.push_str(&content[..at]);
            updated.push_str(&args.new_text);
            updated.push_str(&content[at + args.old_text.len()..]);
            // Shrinking or same-size edits of a big file stay possible.
            if updated.len() > MAX_WRITE_BYTES && updated.len() > content.len() {
                return Err(ToolError::Io {
                    path: shown,
                    message: format!(
                        "the edit would make it {} bytes, over the limit of {MAX_WRITE_BYTES} \
                         bytes (4 MiB) a file tool may grow a file to; nothing was changed. \
                         Make a smaller edit, or split the file",
                        updated.len()
                    ),
                });
            }
            std::os::unix::fs::FileExt::write_all_at(&file, updated.as_bytes(), 0)
                .and_then(|()| file.set_len(updated.len() as u64))
                .map_err(|e| io_error(&shown, e))?;
            Ok(ToolOutput::FileEdited {
                path: shown,
                line: line_of(&content, at),
                removed_lines: args.old_text.lines().count().max(1),
                added_lines: args.new_text.lines().count(),
            })
        }
        count => Err(ToolError::EditAmbiguous {
            path: shown,
            count,
            lines: positions.iter().map(|&i| line_of(&content, i)).collect(),
        }),
    }
}

/// 1-based line number of byte offset `at`.
fn line_of(content: &str, at: usize) -> usize {
    content.as_bytes()[..at]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

/// The window of lines (as many as `needle` has) most similar to `needle`, by
/// the Dice coefficient over character bigrams of whitespace-collapsed text.
pub fn closest_match(haystack: &str, needle: &str) -> Option<ClosestMatch> {
    let lines: Vec<&str> = haystack.lines().collect();
    if lines.is_empty() {
        return None;
    }
    let window = needle.lines().count().clamp(1, lines.len());
    let target = bigrams(needle);
    let mut best: Option<(f64, usize)> = None;
    for start in 0..=(lines.len() - window) {
        let candidate = lines[start..start + window].join("\n");
        let score = dice(&target, &bigrams(&candidate));
        if best.is_none_or(|(s, _)| score > s) {
            best = Some((score, start));
        }
    }
    let (similarity, start) = best?;
    let mut text = lines[start..start + window].join("\n");
    if text.chars().count() > MAX_CLOSEST_CHARS {
        text = text.chars().take(MAX_CLOSEST_CHARS).collect::<String>() + "…";
    }
    Some(ClosestMatch {
        start_line: start + 1,
        end_line: start + window,
        similarity,
        text,
    })
}

fn bigrams(text: &str) -> HashMap<(char, char), usize> {
    let collapsed: Vec<char> = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .collect();
    let mut map = HashMap::new();
    for pair in collapsed.windows(2) {
        *map.entry((pair[0], pair[1])).or_insert(0) += 1;
    }
    map
}

fn dice(a: &HashMap<(char, char), usize>, b: &HashMap<(char, char), usize>) -> f64 {
    let total: usize = a.values().sum::<usize>() + b.values().sum::<usize>();
    if total == 0 {
        return 0.0;
    }
    let common: usize = a
        .iter()
        .map(|(k, n)| (*n).min(b.get(k).copied().unwrap_or(0)))
        .sum();
    2.0 * common as f64 / total as f64
}

/// `list_dir`: entries sorted with directories first, then by name.
pub fn list_dir(ctx: &ToolContext, args: &ListDirArgs) -> ToolResult {
    list_dir_in(&Jail::from_context(ctx)?, args)
}

/// [`list_dir`] through a given jail: the directory is opened once and listed
/// through that descriptor (entries are not followed).
pub fn list_dir_in(jail: &Jail, args: &ListDirArgs) -> ToolResult {
    let raw = args.path.as_deref().unwrap_or(".");
    let opened = jail.open_dir(raw)?;
    let shown = opened.shown;
    let listed = beneath::read_dir(&opened.handle).map_err(|e| io_error(&shown, e))?;
    let mut entries: Vec<DirEntry> = listed
        .into_iter()
        .map(|e| DirEntry {
            name: e.name.to_string_lossy().into_owned(),
            kind: match e.kind {
                EntryType::File => EntryKind::File,
                EntryType::Dir => EntryKind::Dir,
                EntryType::Symlink => EntryKind::Symlink,
                EntryType::Other => EntryKind::Other,
            },
            size: e.size,
        })
        .collect();
    entries.sort_by(|a, b| {
        (a.kind != EntryKind::Dir)
            .cmp(&(b.kind != EntryKind::Dir))
            .then_with(|| a.name.cmp(&b.name))
    });
    let truncated = entries.len() > MAX_DIR_ENTRIES;
    entries.truncate(MAX_DIR_ENTRIES);
    Ok(ToolOutput::DirListing {
        path: shown,
        entries,
        truncated,
    })
}

/// Renders the file tools' outputs for the model.
pub(super) fn render(output: &ToolOutput) -> String {
    match output {
        ToolOutput::FileRead {
            path,
            start_line,
            end_line,
            total_lines,
            text,
            truncated,
        } => {
            if *total_lines == 0 {
                return format!("{path} is empty (0 lines).");
            }
            let mut out =
                format!("{path} (lines {start_line}-{end_line} of {total_lines})\n{text}");
            if *truncated {
                out.push_str(&format!(
                    "\n[{} more lines; continue with start_line={}]",
                    total_lines - end_line,
                    end_line + 1
                ));
            }
            out
        }
        ToolOutput::FileWritten {
            path,
            bytes,
            created,
        } => format!(
            "{} {path} ({bytes} bytes).",
            if *created { "Created" } else { "Overwrote" }
        ),
        ToolOutput::FileEdited {
            path,
            line,
            removed_lines,
            added_lines,
        } => format!(
            "Edited {path} at line {line}: replaced {removed_lines} line(s) with {added_lines} line(s)."
        ),
        ToolOutput::DirListing {
            path,
            entries,
            truncated,
        } => {
            let mut out = format!("{path}/ ({} entries)", entries.len());
            for e in entries {
                out.push('\n');
                match (e.kind, e.size) {
                    (EntryKind::Dir, _) => out.push_str(&format!("{}/", e.name)),
                    (EntryKind::Symlink, _) => out.push_str(&format!("{}@", e.name)),
                    (_, Some(size)) => out.push_str(&format!("{} ({size} bytes)", e.name)),
                    (_, None) => out.push_str(&e.name),
                }
            }
            if *truncated {
                out.push_str(&format!("\n[listing cut at {MAX_DIR_ENTRIES} entries]"));
            }
            out
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ctx(dir: &Path) -> ToolContext {
        ToolContext::new(dir)
    }

    /// `edit_file` of `path`: `old` becomes `new`.
    fn edit_in(c: &ToolContext, path: &str, old: &str, new: &str) -> ToolResult {
        edit_file(
            c,
            &EditFileArgs {
                path: path.into(),
                old_text: old.into(),
                new_text: new.into(),
            },
        )
    }

    #[test]
    fn read_window_and_continuation() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        std::fs::write(dir.path().join("a.txt"), body).unwrap();
        let out = read_file(
            &ctx(dir.path()),
            &ReadFileArgs {
                path: "a.txt".into(),
                start_line: Some(3),
                max_lines: Some(4),
            },
        )
        .unwrap();
        let ToolOutput::FileRead {
            start_line,
            end_line,
            total_lines,
            ref text,
            truncated,
            ..
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!(
            (start_line, end_line, total_lines, truncated),
            (3, 6, 10, true)
        );
        assert_eq!(text, "line 3\nline 4\nline 5\nline 6");
        let shown = out.render();
        assert!(shown.contains("continue with start_line=7"), "{shown}");
        assert!(shown.starts_with("a.txt (lines 3-6 of 10)"), "{shown}");
    }

    #[test]
    fn read_respects_char_cap() {
        let dir = tempfile::tempdir().unwrap();
        let line = "x".repeat(999);
        let body: String = (0..100).map(|_| format!("{line}\n")).collect();
        std::fs::write(dir.path().join("big.txt"), body).unwrap();
        let out = read_file(
            &ctx(dir.path()),
            &ReadFileArgs {
                path: "big.txt".into(),
                start_line: None,
                max_lines: None,
            },
        )
        .unwrap();
        let ToolOutput::FileRead {
            end_line,
            total_lines,
            text,
            truncated,
            ..
        } = out
        else {
            panic!()
        };
        assert_eq!(total_lines, 100);
        assert_eq!(end_line, MAX_READ_CHARS / 1000);
        assert!(truncated);
        assert!(text.chars().count() <= MAX_READ_CHARS);
    }

    #[test]
    fn read_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\n").unwrap();
        std::fs::write(dir.path().join("bin"), b"\x00\x01\x02").unwrap();
        let c = ctx(dir.path());
        let args = |p: &str, s: Option<usize>| ReadFileArgs {
            path: p.into(),
            start_line: s,
            max_lines: None,
        };
        assert!(matches!(
            read_file(&c, &args("nope.txt", None)),
            Err(ToolError::NotFound { .. })
        ));
        assert!(
            read_file(&c, &args("a.txt", Some(5)))
                .unwrap_err()
                .render()
                .contains("past the end")
        );
        assert!(
            read_file(&c, &args("bin", None))
                .unwrap_err()
                .render()
                .contains("binary")
        );
        assert!(
            read_file(&c, &args(".", None))
                .unwrap_err()
                .render()
                .contains("list_dir")
        );
    }

    #[test]
    fn edit_unique_ambiguous_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.rs");
        std::fs::write(
            &p,
            "fn a() {\n    let x = 1;\n}\nfn b() {\n    let x = 1;\n}\n",
        )
        .unwrap();
        let c = ctx(dir.path());
        let edit = |old: &str, new: &str| edit_in(&c, "f.rs", old, new);
        let before = std::fs::read_to_string(&p).unwrap();
        let err = edit("let x = 1;", "let x = 2;").unwrap_err();
        assert_eq!(
            err,
            ToolError::EditAmbiguous {
                path: "f.rs".into(),
                count: 2,
                lines: vec![2, 5]
            }
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), before);

        let err = edit("fn b() {\n  let x = 1;", "x").unwrap_err();
        let ToolError::EditNoMatch {
            closest: Some(ref m),
            ..
        } = err
        else {
            panic!("{err:?}")
        };
        assert_eq!((m.start_line, m.end_line), (4, 5));
        assert!(m.similarity > 0.9, "{m:?}");
        assert!(
            err.render().contains("fn b() {\n    let x = 1;"),
            "{}",
            err.render()
        );
        assert_eq!(std::fs::read_to_string(&p).unwrap(), before);

        let out = edit(
            "fn b() {\n    let x = 1;",
            "fn b() {\n    let x = 3;\n    let y = 4;",
        )
        .unwrap();
        assert_eq!(
            out,
            ToolOutput::FileEdited {
                path: "f.rs".into(),
                line: 4,
                removed_lines: 2,
                added_lines: 3
            }
        );
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "fn a() {\n    let x = 1;\n}\nfn b() {\n    let x = 3;\n    let y = 4;\n}\n"
        );
        assert!(matches!(
            edit("", "x"),
            Err(ToolError::InvalidArguments { .. })
        ));
    }

    #[test]
    fn write_file_is_capped_and_a_refusal_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let write = |path: &str, n: usize| {
            write_file(
                &c,
                &WriteFileArgs {
                    path: path.into(),
                    content: "a".repeat(n),
                },
            )
        };
        let out = write("big.txt", MAX_WRITE_BYTES).unwrap();
        assert!(matches!(out, ToolOutput::FileWritten { bytes, .. } if bytes == MAX_WRITE_BYTES));
        let err = write("big.txt", MAX_WRITE_BYTES + 1).unwrap_err();
        let msg = err.render();
        assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err:?}");
        assert!(msg.contains("4194304 bytes (4 MiB)"), "{msg}");
        assert!(msg.contains("nothing was written"), "{msg}");
        assert_eq!(
            std::fs::metadata(dir.path().join("big.txt")).unwrap().len(),
            MAX_WRITE_BYTES as u64
        );
        // Refused before anything is opened: no file, no parent directory.
        assert!(write("new/dir/f.txt", MAX_WRITE_BYTES + 1).is_err());
        assert!(!dir.path().join("new").exists());
    }

    #[test]
    fn edit_file_may_not_grow_a_file_past_the_write_cap() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.txt");
        let c = ctx(dir.path());
        let edit = |old: &str, new: &str| edit_in(&c, "f.txt", old, new);
        // Ten bytes under the cap; growing it by exactly ten is fine.
        let body = format!("MARK\n{}", "a".repeat(MAX_WRITE_BYTES - 15));
        std::fs::write(&p, &body).unwrap();
        edit("MARK", "MARK0123456789").unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().len(), MAX_WRITE_BYTES as u64);
        // One byte more is refused and changes nothing.
        let before = std::fs::read(&p).unwrap();
        let err = edit("MARK0123456789", "MARK0123456789!").unwrap_err();
        let msg = err.render();
        assert!(msg.contains("4194304 bytes (4 MiB)"), "{msg}");
        assert!(msg.contains("nothing was changed"), "{msg}");
        assert_eq!(std::fs::read(&p).unwrap(), before);
        // A file already over the cap (written by other means) can still shrink.
        std::fs::write(&p, format!("MARK\n{}", "a".repeat(MAX_WRITE_BYTES + 100))).unwrap();
        edit("MARK\n", "").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().len(),
            MAX_WRITE_BYTES as u64 + 100
        );
    }

    #[test]
    fn closest_match_picks_most_similar_window() {
        let hay = "alpha beta\ngamma delta\nepsilon zeta\n";
        let m = closest_match(hay, "gamma  delt").unwrap();
        assert_eq!(m.start_line, 2);
        assert_eq!(m.text, "gamma delta");
        assert!(closest_match("", "x").is_none());
    }

    #[test]
    fn write_creates_parents_and_list_dir() {
        let dir = tempfile::tempdir().unwrap();
        let c = ctx(dir.path());
        let out = write_file(
            &c,
            &WriteFileArgs {
                path: "a/b/c.txt".into(),
                content: "hi".into(),
            },
        )
        .unwrap();
        assert_eq!(
            out,
            ToolOutput::FileWritten {
                path: "a/b/c.txt".into(),
                bytes: 2,
                created: true
            }
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "hi"
        );
        std::fs::write(dir.path().join("z.txt"), "12345").unwrap();
        let out = list_dir(&c, &ListDirArgs { path: None }).unwrap();
        let ToolOutput::DirListing { ref entries, .. } = out else {
            panic!()
        };
        assert_eq!(entries[0].name, "a");
        assert_eq!(entries[0].kind, EntryKind::Dir);
        assert_eq!(entries[1].size, Some(5));
        assert!(
            out.render().contains("a/\nz.txt (5 bytes)"),
            "{}",
            out.render()
        );
    }
}
