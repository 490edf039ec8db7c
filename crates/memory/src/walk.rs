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

/// Why a file was left out of the index, or indexed with a caveat: the typed
/// side of an issue (serialised as a `snake_case` string, e.g. `"non_utf8_name"`).
/// The binary turns reasons into advice; messages never name a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IssueReason {
    /// Larger than `memory.max_file_bytes` (remembered: re-examined when it changes).
    TooBig,
    /// Contains NUL bytes (remembered: re-examined when it changes).
    Binary,
    /// Content is not UTF-8: indexed with U+FFFD in place of the invalid bytes.
    NonUtf8Content,
    /// The file name is not UTF-8: it cannot be stored or cited; reported by
    /// its lossy name.
    NonUtf8Name,
    /// A symlink resolving outside the source root (not followed).
    SymlinkOutside,
    /// A symlink loop.
    SymlinkLoop,
    /// The file or directory could not be read or stat'ed.
    Unreadable,
    /// The embedder failed on the file's chunks (retried on the next run).
    EmbedFailed,
    /// A registered folder is missing.
    SourceMissing,
}

impl IssueReason {
    /// The `snake_case` name (as serialised and stored).
    pub fn as_str(self) -> &'static str {
        match self {
            IssueReason::TooBig => "too_big",
            IssueReason::Binary => "binary",
            IssueReason::NonUtf8Content => "non_utf8_content",
            IssueReason::NonUtf8Name => "non_utf8_name",
            IssueReason::SymlinkOutside => "symlink_outside",
            IssueReason::SymlinkLoop => "symlink_loop",
            IssueReason::Unreadable => "unreadable",
            IssueReason::EmbedFailed => "embed_failed",
            IssueReason::SourceMissing => "source_missing",
        }
    }

    /// The reason named `s` (see [`IssueReason::as_str`]): serde's name, the one
    /// the reason is serialised under.
    pub fn parse(s: &str) -> Option<IssueReason> {
        use serde::Deserialize;
        use serde::de::{IntoDeserializer, value::Error};
        IssueReason::deserialize(IntoDeserializer::<Error>::into_deserializer(s)).ok()
    }

    /// Whether a file skipped for this reason is remembered as skipped (with its
    /// stat) instead of being retried on every pass: the cause is in the file
    /// itself, so only a change to the file can lift it.
    pub fn is_remembered(self) -> bool {
        matches!(self, IssueReason::TooBig | IssueReason::Binary)
    }
}

/// A problem met while walking (counted, reported, never fatal).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WalkIssue {
    /// Path relative to the source root (lossy for a non-UTF-8 name).
    pub path: String,
    /// What went wrong.
    pub message: String,
    /// A file (or linked directory) was left out of the index because of it.
    pub skipped: bool,
    /// Why, typed.
    pub reason: IssueReason,
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
    let ends_with = |suffix: &str| {
        name.len() >= suffix.len()
            && name.as_bytes()[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
    };
    ends_with(".md") || ends_with(".markdown")
}

/// Whether a directory entry name is skipped during walks.
pub fn is_skipped_dir(name: &str) -> bool {
    name.starts_with('.') || name == "node_modules" || name == "target"
}

/// Whether `rel` (relative to the source root) belongs to the source.
/// Allocation-free: the freshness walk asks it once per file.
pub fn belongs(kind: SourceKind, rel: &str) -> bool {
    let (dirs, name) = match rel.rsplit_once('/') {
        Some((dirs, name)) => (Some(dirs), name),
        None => (None, rel),
    };
    // Empty parts and `..` are refused; `..` also starts with a dot.
    if name.is_empty() || name.starts_with('.') {
        return false;
    }
    if let Some(dirs) = dirs
        && dirs.split('/').any(|d| d.is_empty() || is_skipped_dir(d))
    {
        return false;
    }
    match kind {
        SourceKind::Workspace => match dirs {
            None => name == "MEMORY.md",
            Some(dirs) => dirs.split('/').next() == Some("memory") && is_markdown(name),
        },
        SourceKind::Sessions => dirs == Some("sessions") && name.ends_with(".jsonl"),
        SourceKind::Notes => is_markdown(name),
    }
}

/// List the files of a source with their stat.
pub fn walk_source(src: &SourceRoot) -> (Vec<DiskFile>, Vec<WalkIssue>) {
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
            reason: IssueReason::SourceMissing,
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
                    let (message, reason) = if e.loop_ancestor().is_some() {
                        ("symlink loop skipped".to_string(), IssueReason::SymlinkLoop)
                    } else {
                        (e.to_string(), IssueReason::Unreadable)
                    };
                    issues.push(WalkIssue {
                        path,
                        message,
                        skipped: false,
                        reason,
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
                // A name that is not UTF-8 cannot be stored or cited: report it
                // (by its lossy name) instead of dropping it silently.
                if let Some(shown) = relative_lossy(&src.root, entry.path())
                    && belongs(src.kind, &shown)
                {
                    issues.push(WalkIssue {
                        path: shown,
                        message: "skipped: the file name is not valid UTF-8".into(),
                        skipped: true,
                        reason: IssueReason::NonUtf8Name,
                    });
                }
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
                    reason: IssueReason::Unreadable,
                }),
            }
        }
    }
    (files, issues)
}

/// A file's stat as the freshness check compares it with the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Size in bytes.
    pub size: i64,
}

impl Stamp {
    fn of(md: &std::fs::Metadata) -> Stamp {
        Stamp {
            mtime_ns: mtime_ns(md),
            size: md.len() as i64,
        }
    }
}

/// A list of `(relative path, stamp)` kept in one string buffer (no
/// allocation per file): what the freshness check's walk produced, or the
/// index's stat listing of a source ([`Store::stamp_listing`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StampList {
    text: String,
    rows: Vec<(u32, u32, Stamp)>,
}

impl StampList {
    /// An empty list.
    pub fn new() -> StampList {
        StampList::default()
    }

    /// Append `rel` with its stamp.
    pub fn push(&mut self, rel: &str, stamp: Stamp) {
        let start = self.text.len();
        self.text.push_str(rel);
        // Paths are far below 4 GiB in total; saturate rather than wrap.
        let at = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.rows.push((at(start), at(self.text.len()), stamp));
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Entry `i`: its relative path and stamp.
    pub fn get(&self, i: usize) -> (&str, Stamp) {
        let (start, end, stamp) = self.rows[i];
        (&self.text[start as usize..end as usize], stamp)
    }

    /// Every entry, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Stamp)> + '_ {
        (0..self.rows.len()).map(|i| self.get(i))
    }

    /// Whether the paths are in strictly ascending byte order.
    pub fn is_sorted_by_path(&self) -> bool {
        (1..self.rows.len()).all(|i| self.get(i - 1).0 < self.get(i).0)
    }

    /// Sort by path (byte order).
    pub fn sort_by_path(&mut self) {
        let text = &self.text;
        self.rows.sort_by(|a, b| {
            text[a.0 as usize..a.1 as usize].cmp(&text[b.0 as usize..b.1 as usize])
        });
    }
}

/// How [`walk_stamps`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum StampWalk {
    /// Every file [`walk_source`] lists was visited, in the same order, with
    /// the same stat.
    Complete,
    /// A symbolic link was met that the full walk would have to judge (follow
    /// it, check that it stays beneath the root, detect a loop): the visits
    /// so far are incomplete; use [`walk_source`] instead.
    NeedsFullWalk,
}

/// The freshness check's walk: calls `visit(rel, stamp)` for every file
/// [`walk_source`] lists, in its order and with its stat, but cheaply: each
/// directory read whole with `getdents64`, one `fstatat` per listed file
/// relative to its directory's descriptor (no absolute path is built or
/// resolved per file), names checked without allocating, files that do not
/// belong never stat'ed; the stats of a large tree are shared with a helper
/// thread while the listing goes on (`stampwalk`). Nothing is visited until
/// the whole tree is listed and stat'ed.
///
/// It handles trees of plain directories and files only. A symbolic link
/// that could list a file (any link whose name is UTF-8 and does not start
/// with a dot, or a top-level link such as a linked source root) ends it with
/// [`StampWalk::NeedsFullWalk`]: links are [`walk_source`]'s to follow, check
/// against the root and loop-detect, so the two walks never disagree.
/// Unreadable directories and files are left out, as [`walk_source`] leaves
/// them out of its listing (it also reports them; this walk does not).
pub fn walk_stamps(src: &SourceRoot, visit: impl FnMut(&str, Stamp)) -> StampWalk {
    walk_stamps_with(src, None, visit)
}

/// [`walk_stamps`] listing directories through the walk's directory cache
/// (`dircache`): a directory unchanged since a settled listing is not listed
/// again. The answer is [`walk_stamps`]'s.
pub fn walk_stamps_with(
    src: &SourceRoot,
    cache: Option<&mut crate::dircache::DirCache>,
    mut visit: impl FnMut(&str, Stamp),
) -> StampWalk {
    let (tops, max_depth): (&[&str], usize) = match src.kind {
        SourceKind::Workspace => (&["MEMORY.md", "memory"], usize::MAX),
        SourceKind::Sessions => (&["sessions"], 1),
        SourceKind::Notes => (&[""], usize::MAX),
    };
    let mut found: Vec<(PathBuf, String, Option<Stamp>)> = Vec::with_capacity(tops.len());
    for top in tops {
        let path = if top.is_empty() {
            src.root.clone()
        } else {
            src.root.join(top)
        };
        let Ok(md) = std::fs::symlink_metadata(&path) else {
            // Missing (a missing notes root is an issue of the full walk, with no files).
            continue;
        };
        if md.file_type().is_symlink() {
            return StampWalk::NeedsFullWalk;
        }
        let mut rel = top.to_string();
        if md.is_file() {
            if belongs(src.kind, &rel) {
                found.push((path, rel, Some(Stamp::of(&md))));
            }
        } else if md.is_dir() {
            if !rel.is_empty() {
                rel.push('/');
            }
            found.push((path, rel, None));
        }
    }
    let tops: Vec<crate::stampwalk::Top<'_>> = found
        .iter()
        .map(|(path, rel, stamp)| match stamp {
            Some(stamp) => crate::stampwalk::Top::File(rel, *stamp),
            None => crate::stampwalk::Top::Dir(path, rel),
        })
        .collect();
    crate::stampwalk::walk(&tops, src.kind, max_depth, cache, &mut visit)
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
    let (message, reason) = match guard {
        Ok(b) => match b.contains(Path::new(rel)) {
            Ok(true) => return None,
            Ok(false) => (
                format!("skipped: symlink to {target} resolves outside the source root"),
                IssueReason::SymlinkOutside,
            ),
            Err(e) => (
                format!("skipped: symlink to {target} cannot be checked: {e}"),
                IssueReason::Unreadable,
            ),
        },
        Err(e) => (
            format!("skipped: symlink to {target}: cannot open the source root: {e}"),
            IssueReason::Unreadable,
        ),
    };
    Some(WalkIssue {
        path: shown,
        message,
        skipped: true,
        reason,
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

/// `path` relative to `root`, '/'-separated, with invalid UTF-8 replaced by
/// U+FFFD (for reporting a name [`relative`] refuses); `None` if outside.
pub fn relative_lossy(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
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

    /// The walk tests' tree, each file holding its own path: a workspace
    /// (`MEMORY.md`, `memory/`, `sessions/`) and a notes folder `n/`, each with
    /// what a walk leaves out (hidden and tool directories, dot files, other
    /// kinds of file, nested sessions); no links (a test adds its own).
    fn fixture() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for p in [
            "MEMORY.md",
            "notes.md",
            "memory/b.md",
            "memory/a/z.md",
            "memory/a.md",
            "memory/A.markdown",
            "memory/x.txt",
            "memory/.git/h.md",
            "memory/target/t.md",
            "sessions/s1.jsonl",
            "sessions/s0.jsonl",
            "sessions/sub/deeper.jsonl",
            "sessions/.tmp.jsonl",
            "n/Z.md",
            "n/a b/c.MD",
            "n/a-b.md",
            "n/node_modules/m.md",
            "n/sub/b.md",
            "n/sub/.f.md",
            "n/.git/c.md",
            "n/e.txt",
        ] {
            let f = dir.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, p).unwrap();
        }
        dir
    }

    /// A source of `kind` rooted at `root`, links checked beneath it.
    fn src(kind: SourceKind, root: &Path) -> SourceRoot {
        SourceRoot {
            name: "n".into(),
            root: root.to_path_buf(),
            kind,
            follow_symlinks_outside: false,
        }
    }

    /// The full walk's listing as (path, stamp), what the stamp walk must visit.
    fn full_stamps(files: &[DiskFile]) -> Vec<(String, Stamp)> {
        let stamp = |f: &DiskFile| Stamp {
            mtime_ns: f.mtime_ns,
            size: f.size,
        };
        files.iter().map(|f| (f.rel.clone(), stamp(f))).collect()
    }

    /// What the stamp walk visits, in order; it must complete.
    fn stamp_walk(src: &SourceRoot) -> Vec<(String, Stamp)> {
        let mut cheap = Vec::new();
        let walked = walk_stamps(src, |rel, st| cheap.push((rel.to_string(), st)));
        assert_eq!(walked, StampWalk::Complete, "{:?}", src.kind);
        cheap
    }

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
        let dir = fixture();
        let notes = dir.path().join("n");
        std::os::unix::fs::symlink(&notes, notes.join("sub/loop")).unwrap();
        let (files, issues) = walk_source(&src(SourceKind::Notes, &notes));
        let rels: Vec<_> = files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(rels, ["Z.md", "a b/c.MD", "a-b.md", "sub/b.md"]);
        assert!(
            issues.iter().any(|i| i.message.contains("loop")),
            "{issues:?}"
        );
    }

    #[test]
    fn the_stamp_walk_lists_what_the_full_walk_lists() {
        use std::os::unix::ffi::OsStrExt;
        let dir = fixture();
        let root = dir.path();
        std::fs::write(
            root.join(std::ffi::OsStr::from_bytes(b"memory/\xff.md")),
            "x",
        )
        .unwrap();
        // A dot-named link lists nothing: the stamp walk passes it by.
        std::os::unix::fs::symlink(root, root.join("memory/.loop")).unwrap();
        let notes = root.join("n");
        for s in [
            src(SourceKind::Workspace, root),
            src(SourceKind::Sessions, root),
            src(SourceKind::Notes, &notes),
            src(SourceKind::Notes, &root.join("missing")),
        ] {
            let (files, _) = walk_source(&s);
            assert_eq!(stamp_walk(&s), full_stamps(&files), "{:?}", s.kind);
        }
        let (ws, _) = walk_source(&src(SourceKind::Workspace, root));
        let rels: Vec<_> = ws.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(
            rels,
            [
                "MEMORY.md",
                "memory/A.markdown",
                "memory/a/z.md",
                "memory/a.md",
                "memory/b.md"
            ]
        );
        // Any other link is the full walk's to judge.
        std::os::unix::fs::symlink(notes.join("Z.md"), notes.join("a b/link.md")).unwrap();
        let walked = walk_stamps(&src(SourceKind::Notes, &notes), |_, _| {});
        assert_eq!(walked, StampWalk::NeedsFullWalk);
    }

    #[test]
    fn a_directory_larger_than_one_getdents_buffer_is_listed_whole() {
        // 1,500 names of ~200 bytes: ~330 KB of directory records, several
        // `getdents64` calls and buffer growths, and over the two-thread stat
        // threshold; a subdirectory sorts between files ('.' < '/' < '0').
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pad = "x".repeat(190);
        for i in 0..1500 {
            std::fs::write(root.join(format!("{pad}{i:04}.md")), format!("{i}")).unwrap();
        }
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        for p in ["a.md", "a/z.md", "a/b/c.md", "a0.md", "a-.md", "a/b.md"] {
            std::fs::write(root.join(p), p).unwrap();
        }
        let src = src(SourceKind::Notes, root);
        let (files, _) = walk_source(&src);
        assert_eq!(files.len(), 1506);
        let full = full_stamps(&files);
        let mut cheap = StampList::new();
        assert_eq!(
            walk_stamps(&src, |rel, st| cheap.push(rel, st)),
            StampWalk::Complete
        );
        let cheap: Vec<(String, Stamp)> = cheap.iter().map(|(r, s)| (r.to_string(), s)).collect();
        assert_eq!(cheap, full);
        assert!(full.iter().all(|(_, s)| s.mtime_ns > 0 && s.size > 0));
    }

    #[test]
    fn many_directories_stat_by_two_threads_give_the_full_walks_listing() {
        // 3,000 files in 150 directories over three levels: far more queued
        // chunks than the queue holds (the lister stats some itself), a
        // helper thread, unreadable and skipped directories left out.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in 0..150 {
            let sub = root.join(format!("d{}/e{}/f{d}", d % 3, d % 7));
            std::fs::create_dir_all(&sub).unwrap();
            for i in 0..20 {
                std::fs::write(sub.join(format!("n{i}.md")), format!("{d} {i}")).unwrap();
            }
            std::fs::write(sub.join("skip.txt"), "no").unwrap();
        }
        std::fs::create_dir_all(root.join("d0/node_modules")).unwrap();
        std::fs::write(root.join("d0/node_modules/x.md"), "no").unwrap();
        std::fs::write(root.join("d0.md"), "top").unwrap();
        let src = src(SourceKind::Notes, root);
        let (files, _) = walk_source(&src);
        assert_eq!(files.len(), 3001);
        let full = full_stamps(&files);
        for _ in 0..3 {
            assert_eq!(stamp_walk(&src), full);
        }
        // A link deep in the tree: the full walk's, and nothing visited.
        std::os::unix::fs::symlink(root.join("d0.md"), root.join("d2/e5/f26/link.md")).unwrap();
        let mut visited = 0;
        assert_eq!(
            walk_stamps(&src, |_, _| visited += 1),
            StampWalk::NeedsFullWalk
        );
        assert_eq!(visited, 0);
    }

    #[test]
    fn a_stamp_list_keeps_its_entries_and_sorts_by_bytes() {
        let mut l = StampList::new();
        assert!(l.is_empty() && l.is_sorted_by_path());
        let st = |n| Stamp {
            mtime_ns: n,
            size: n,
        };
        for (i, p) in ["b.md", "a/z.md", "a.md", "\u{e9}.md", "A.md"]
            .iter()
            .enumerate()
        {
            l.push(p, st(i as i64));
        }
        assert_eq!(l.len(), 5);
        assert_eq!(l.get(1), ("a/z.md", st(1)));
        assert!(!l.is_sorted_by_path());
        l.sort_by_path();
        assert!(l.is_sorted_by_path());
        let paths: Vec<&str> = l.iter().map(|(p, _)| p).collect();
        assert_eq!(paths, ["A.md", "a.md", "a/z.md", "b.md", "\u{e9}.md"]);
        assert_eq!(l.get(2), ("a/z.md", st(1)));
    }

    #[test]
    fn names_that_are_not_utf8_are_reported_by_a_lossy_name() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("ok.md"), "x").unwrap();
        std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md")), "x").unwrap();
        std::fs::write(root.join(std::ffi::OsStr::from_bytes(b"img\xff.png")), "x").unwrap();
        let (files, issues) = walk_source(&src(SourceKind::Notes, root));
        assert_eq!(files.len(), 1);
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].path, "caf\u{FFFD}.md");
        assert_eq!(issues[0].reason, IssueReason::NonUtf8Name);
        assert!(issues[0].skipped);
        assert_eq!(
            serde_json::to_value(IssueReason::NonUtf8Name).unwrap(),
            "non_utf8_name"
        );
        for r in [
            IssueReason::TooBig,
            IssueReason::SymlinkOutside,
            IssueReason::NonUtf8Name,
        ] {
            assert_eq!(IssueReason::parse(r.as_str()), Some(r));
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
    }
}
