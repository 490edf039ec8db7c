//! Sources and discovery: which roots are indexed (the workspace's `memory` and
//! `sessions`, plus registered notes folders) and which files on disk belong to
//! each, with their stat. Blocking directory walks; skips hidden directories,
//! `.git`, `node_modules` and symlink loops.
//!
//! Invariant: unless a source opts in (`follow_symlinks_outside`), no file is
//! listed, stat'ed or read through a symlink that resolves outside the source
//! root. The walk skips such links (a file, or a whole linked directory) with a
//! counted issue; [`stat_file`] and [`read_source_file`] resolve beneath the root
//! ([`crate::beneath`]) at the moment they run, so a file replaced by such
//! a link after the walk is neither re-indexed nor served.

#![warn(missing_docs)]

use crate::beneath::{self, Beneath};
use crate::config::MemoryConfig;
use crate::store::{Store, StoreError};
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Built-in source: `MEMORY.md` and `memory/**/*.md` in the workspace.
pub const SOURCE_MEMORY: &str = "memory";
/// Built-in source: `sessions/*.jsonl` in the workspace.
pub const SOURCE_SESSIONS: &str = "sessions";

/// What kind of files a source holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// The workspace memory: `MEMORY.md` + `memory/**`.
    Workspace,
    /// Session transcripts: `sessions/*.jsonl`.
    Sessions,
    /// A registered folder of Markdown notes.
    Notes,
}

/// One indexed root. File paths are stored relative to `root`, '/'-separated.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SourceRoot {
    /// Source name.
    pub name: String,
    /// The folder its paths are relative to.
    pub root: PathBuf,
    /// What kind of source it is.
    pub kind: SourceKind,
    /// Follow symlinks that resolve outside `root` (opt-in per registered source).
    pub follow_symlinks_outside: bool,
}

/// A file found on disk.
#[derive(Debug, Clone, PartialEq)]
pub struct DiskFile {
    /// Relative to the source root, '/'-separated.
    pub rel: String,
    /// Absolute path.
    pub abs: PathBuf,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Size in bytes.
    pub size: i64,
}

/// A problem met while walking (counted, reported, never fatal).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WalkIssue {
    /// Path relative to the source root.
    pub path: String,
    /// What went wrong.
    pub message: String,
    /// A file (or linked directory) was left out of the index because of it.
    pub skipped: bool,
}

/// Every source: the two built-ins, then registered folders.
pub fn sources(settings: &MemoryConfig, store: &Store) -> Result<Vec<SourceRoot>, StoreError> {
    let mut out = builtin_sources(settings);
    for s in store.sources()? {
        out.push(SourceRoot {
            name: s.name,
            root: s.root,
            kind: SourceKind::Notes,
            follow_symlinks_outside: s.follow_symlinks_outside,
        });
    }
    Ok(out)
}

/// The built-in sources of the workspace.
pub fn builtin_sources(settings: &MemoryConfig) -> Vec<SourceRoot> {
    vec![
        SourceRoot {
            name: SOURCE_MEMORY.into(),
            root: settings.workspace.clone(),
            kind: SourceKind::Workspace,
            follow_symlinks_outside: false,
        },
        SourceRoot {
            name: SOURCE_SESSIONS.into(),
            root: settings.workspace.clone(),
            kind: SourceKind::Sessions,
            follow_symlinks_outside: false,
        },
    ]
}

/// Whether a file name is indexed Markdown.
pub fn is_markdown(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.ends_with(".md") || lower.ends_with(".markdown")
}

/// Whether a directory entry name is skipped during walks.
pub fn is_skipped_dir(name: &str) -> bool {
    name.starts_with('.') || name == "node_modules" || name == "target"
}

/// Whether `rel` (relative to the source root) belongs to the source.
pub fn belongs(kind: SourceKind, rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts.iter().any(|p| p.is_empty() || *p == "..") {
        return false;
    }
    let (dirs, name) = parts.split_at(parts.len() - 1);
    let name = name[0];
    if dirs.iter().any(|d| is_skipped_dir(d)) || name.starts_with('.') {
        return false;
    }
    match kind {
        SourceKind::Workspace => {
            (dirs.is_empty() && name == "MEMORY.md")
                || (dirs.first() == Some(&"memory") && is_markdown(name))
        }
        SourceKind::Sessions => dirs == ["sessions"] && name.ends_with(".jsonl"),
        SourceKind::Notes => is_markdown(name),
    }
}

/// List the files of a source with their stat.
pub fn walk_source(src: &SourceRoot) -> (Vec<DiskFile>, Vec<WalkIssue>) {
    if let Some(files) = fast_walk(src) {
        return (files, Vec::new());
    }
    slow_walk(src)
}

/// The walk of a tree without symlinks: one `getdents` per directory and one
/// `fstatat` per file relative to its directory (std's `DirEntry::metadata`),
/// instead of two full-path `stat`s per entry. `None` — the caller then runs
/// the general walk, which follows and checks links — as soon as it meets a
/// symlink, an unknown entry type or any error, so both give the same answer.
fn fast_walk(src: &SourceRoot) -> Option<Vec<DiskFile>> {
    if src.kind == SourceKind::Notes && !src.root.is_dir() {
        return None;
    }
    let (start, max_depth): (Vec<PathBuf>, usize) = match src.kind {
        SourceKind::Workspace => (
            vec![src.root.join("MEMORY.md"), src.root.join("memory")],
            usize::MAX,
        ),
        SourceKind::Sessions => (vec![src.root.join("sessions")], 1),
        SourceKind::Notes => (vec![src.root.clone()], usize::MAX),
    };
    let mut files = Vec::new();
    for top in start {
        let md = match std::fs::symlink_metadata(&top) {
            Ok(md) => md,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(_) => return None,
        };
        if md.file_type().is_symlink() {
            return None;
        }
        if md.is_file() {
            let rel = relative(&src.root, &top)?;
            if belongs(src.kind, &rel) {
                files.push(DiskFile {
                    rel,
                    mtime_ns: mtime_ns(&md),
                    size: md.len() as i64,
                    abs: top,
                });
            }
        } else if md.is_dir() {
            fast_dir(src, &top, 1, max_depth, &mut files)?;
        }
    }
    Some(files)
}

fn fast_dir(
    src: &SourceRoot,
    dir: &Path,
    depth: usize,
    max_depth: usize,
    files: &mut Vec<DiskFile>,
) -> Option<()> {
    if depth > max_depth {
        return Some(());
    }
    let mut entries: Vec<std::fs::DirEntry> = std::fs::read_dir(dir)
        .ok()?
        .collect::<Result<_, _>>()
        .ok()?;
    // The order of the general walk (walkdir's `sort_by_file_name`).
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let ty = entry.file_type().ok()?;
        if ty.is_symlink() {
            return None;
        }
        let path = entry.path();
        if ty.is_dir() {
            if !is_skipped_dir(&entry.file_name().to_string_lossy()) {
                fast_dir(src, &path, depth + 1, max_depth, files)?;
            }
            continue;
        }
        if !ty.is_file() {
            continue;
        }
        let Some(rel) = relative(&src.root, &path) else {
            continue;
        };
        if !belongs(src.kind, &rel) {
            continue;
        }
        let md = entry.metadata().ok()?;
        files.push(DiskFile {
            rel,
            abs: path,
            mtime_ns: mtime_ns(&md),
            size: md.len() as i64,
        });
    }
    Some(())
}

/// The general walk: follows symlinks, checking that they stay beneath the
/// source root (unless the source opted out), and reports what it skips.
fn slow_walk(src: &SourceRoot) -> (Vec<DiskFile>, Vec<WalkIssue>) {
    let mut files = Vec::new();
    let mut issues = Vec::new();
    let start: Vec<PathBuf> = match src.kind {
        SourceKind::Workspace => vec![src.root.join("MEMORY.md"), src.root.join("memory")],
        SourceKind::Sessions => vec![src.root.join("sessions")],
        SourceKind::Notes => vec![src.root.clone()],
    };
    if src.kind == SourceKind::Notes && !src.root.is_dir() {
        issues.push(WalkIssue {
            path: src.root.display().to_string(),
            message: "source folder is missing".into(),
            skipped: false,
        });
        return (files, issues);
    }
    // Held open for the whole walk: symlinks are checked beneath this root.
    let guard = if src.follow_symlinks_outside {
        None
    } else {
        Some(Beneath::open(&src.root))
    };
    for top in start {
        if !top.exists() {
            continue;
        }
        let max_depth = if src.kind == SourceKind::Sessions {
            1
        } else {
            usize::MAX
        };
        let walker = walkdir::WalkDir::new(&top)
            .follow_links(true)
            .max_depth(max_depth)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                e.depth() == 0
                    || !(e.file_type().is_dir() && is_skipped_dir(&e.file_name().to_string_lossy()))
            });
        let mut walker = walker;
        while let Some(entry) = walker.next() {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    // Symlink loops and unreadable directories: counted, never fatal.
                    let path = e
                        .path()
                        .map(|p| p.display().to_string())
                        .unwrap_or_else(|| top.display().to_string());
                    let message = if e.loop_ancestor().is_some() {
                        "symlink loop skipped".to_string()
                    } else {
                        e.to_string()
                    };
                    issues.push(WalkIssue {
                        path,
                        message,
                        skipped: false,
                    });
                    continue;
                }
            };
            if let Some(guard) = &guard
                && entry.path_is_symlink()
            {
                let is_dir = entry.file_type().is_dir();
                let rel = relative(&src.root, entry.path()).unwrap_or_default();
                // Only links that would be indexed (or could hold indexed files) matter.
                if is_dir || belongs(src.kind, &rel) {
                    if let Some(issue) = outside_link(guard, entry.path(), &rel) {
                        issues.push(issue);
                        if is_dir {
                            walker.skip_current_dir();
                        }
                        continue;
                    }
                } else {
                    continue;
                }
            }
            if !entry.file_type().is_file() {
                continue;
            }
            let Some(rel) = relative(&src.root, entry.path()) else {
                continue;
            };
            if !belongs(src.kind, &rel) {
                continue;
            }
            match entry.metadata() {
                Ok(md) => files.push(DiskFile {
                    rel,
                    abs: entry.path().to_path_buf(),
                    mtime_ns: mtime_ns(&md),
                    size: md.len() as i64,
                }),
                Err(e) => issues.push(WalkIssue {
                    path: entry.path().display().to_string(),
                    message: e.to_string(),
                    skipped: false,
                }),
            }
        }
    }
    (files, issues)
}

/// Stat one file of a source (for targeted re-index by the watcher and search sync).
pub fn stat_file(src: &SourceRoot, rel: &str) -> Option<DiskFile> {
    if !belongs(src.kind, rel) {
        return None;
    }
    let abs = src.root.join(rel);
    let md = if src.follow_symlinks_outside {
        std::fs::metadata(&abs).ok()?
    } else {
        // Stat what resolves beneath the root: a link out of it reads as missing.
        Beneath::open(&src.root)
            .ok()?
            .open_file(Path::new(rel), libc::O_PATH)
            .ok()?
            .metadata()
            .ok()?
    };
    md.is_file().then(|| DiskFile {
        rel: rel.to_string(),
        abs,
        mtime_ns: mtime_ns(&md),
        size: md.len() as i64,
    })
}

/// Why the symlink at `path` (`rel` in its source) is skipped, or `None` when it
/// resolves beneath the source root.
fn outside_link(guard: &std::io::Result<Beneath>, path: &Path, rel: &str) -> Option<WalkIssue> {
    let shown = if rel.is_empty() {
        path.display().to_string()
    } else {
        rel.to_string()
    };
    let target = std::fs::read_link(path)
        .map(|t| t.display().to_string())
        .unwrap_or_else(|_| "?".into());
    let message = match guard {
        Ok(b) => match b.contains(Path::new(rel)) {
            Ok(true) => return None,
            Ok(false) => format!(
                "skipped: symlink to {target} resolves outside the source root (register the \
                 folder with `claw memory add --follow-symlinks-outside` to index such links)"
            ),
            Err(e) => format!("skipped: symlink to {target} cannot be checked: {e}"),
        },
        Err(e) => format!("skipped: symlink to {target}: cannot open the source root: {e}"),
    };
    Some(WalkIssue {
        path: shown,
        message,
        skipped: true,
    })
}

/// Reads a file of a source, resolving `rel` beneath the source root at the
/// moment of reading (unless the source follows links outside). A link out of
/// the root is an error of kind `PermissionDenied` carrying
/// [`beneath::BeneathError::Outside`]; devices and FIFOs are refused.
pub fn read_source_file(src: &SourceRoot, rel: &str) -> std::io::Result<Vec<u8>> {
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    let mut file = if src.follow_symlinks_outside {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(src.root.join(rel))?
    } else {
        Beneath::open(&src.root)?
            .open_file(Path::new(rel), flags)
            .map_err(beneath::BeneathError::into_io)?
    };
    let st = beneath::fstat(file.as_raw_fd())?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{rel} is not a regular file"),
        ));
    }
    let mut bytes = Vec::with_capacity(st.st_size.max(0) as usize);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `path` relative to `root`, '/'-separated; `None` if outside or not UTF-8.
pub fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    let parts = parts?;
    if parts.is_empty() {
        return None;
    }
    Some(parts.join("/"))
}

/// Modification time in nanoseconds since the epoch.
pub fn mtime_ns(md: &std::fs::Metadata) -> i64 {
    md.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership() {
        use SourceKind::*;
        assert!(belongs(Workspace, "MEMORY.md"));
        assert!(belongs(Workspace, "memory/2026-01-01.md"));
        assert!(belongs(Workspace, "memory/sub/x.markdown"));
        assert!(!belongs(Workspace, "notes/x.md"));
        assert!(!belongs(Workspace, "memory/.git/x.md"));
        assert!(!belongs(Workspace, "memory/node_modules/x.md"));
        assert!(!belongs(Workspace, "memory/x.txt"));
        assert!(belongs(Sessions, "sessions/cli_default.jsonl"));
        assert!(!belongs(Sessions, "sessions/a/b.jsonl"));
        assert!(belongs(Notes, "a/b/c.md"));
        assert!(!belongs(Notes, "a/../c.md"));
        assert!(!belongs(Notes, ".hidden/c.md"));
    }

    #[test]
    fn walk_skips_hidden_and_loops() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [
            "a.md",
            "sub/b.md",
            ".git/c.md",
            "node_modules/d.md",
            "e.txt",
            "sub/.f.md",
        ] {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, "x").unwrap();
        }
        std::os::unix::fs::symlink(root, root.join("sub/loop")).unwrap();
        let src = SourceRoot {
            name: "n".into(),
            root: root.to_path_buf(),
            kind: SourceKind::Notes,
            follow_symlinks_outside: false,
        };
        let (files, issues) = walk_source(&src);
        let rels: Vec<_> = files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, vec!["a.md", "sub/b.md"]);
        assert!(
            issues.iter().any(|i| i.message.contains("loop")),
            "{issues:?}"
        );
    }

    #[test]
    fn the_fast_walk_sees_what_the_general_walk_sees() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for p in [
            "MEMORY.md",
            "memory/2026-01-02.md",
            "memory/b/z.md",
            "memory/b/a.markdown",
            "memory/a-b.md",
            "memory/.hidden/x.md",
            "memory/node_modules/y.md",
            "memory/notes.txt",
            "sessions/cli_default.jsonl",
            "sessions/old/deep.jsonl",
            "other/ignored.md",
        ] {
            let f = root.join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, p).unwrap();
        }
        for kind in [
            SourceKind::Workspace,
            SourceKind::Sessions,
            SourceKind::Notes,
        ] {
            let src = SourceRoot {
                name: "s".into(),
                root: root.to_path_buf(),
                kind,
                follow_symlinks_outside: false,
            };
            let fast = fast_walk(&src).expect("no symlinks: the fast walk answers");
            let (slow, issues) = slow_walk(&src);
            assert!(issues.is_empty(), "{issues:?}");
            assert_eq!(fast, slow, "{kind:?}");
            assert!(!fast.is_empty());
        }
        // A symlink anywhere hands the source to the general walk.
        std::os::unix::fs::symlink(root.join("MEMORY.md"), root.join("memory/link.md")).unwrap();
        let src = SourceRoot {
            name: "s".into(),
            root: root.to_path_buf(),
            kind: SourceKind::Workspace,
            follow_symlinks_outside: false,
        };
        assert_eq!(fast_walk(&src), None);
        let (files, _) = walk_source(&src);
        assert!(files.iter().any(|f| f.rel == "memory/link.md"));
    }
}
