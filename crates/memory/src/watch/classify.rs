//! Event classification (pure): which OS events matter, whether an event may hide
//! files (a directory appeared, vanished or moved), and which source files or
//! sources a changed path stands for. No I/O: paths are compared as strings.

use crate::freshness::FileRef;
use crate::walk::{self, SourceKind, SourceRoot};
use notify::event::{AccessKind, AccessMode, CreateKind, EventKind, ModifyKind, RemoveKind};
use std::path::Path;

/// What an OS event kind means for the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relevance {
    /// Nothing changed on disk (reads, opens; a rename's combined event, whose
    /// `From` and `To` halves arrive separately).
    Ignore,
    /// A file's content or existence may have changed.
    File,
    /// A directory may have appeared, vanished or moved: the files under it
    /// must be reconciled by stat.
    Directory,
}

/// Classify an event kind.
pub(crate) fn relevance(kind: &EventKind) -> Relevance {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => Relevance::File,
        EventKind::Access(_) => Relevance::Ignore,
        EventKind::Modify(ModifyKind::Name(notify::event::RenameMode::Both)) => Relevance::Ignore,
        EventKind::Create(CreateKind::Folder)
        | EventKind::Remove(RemoveKind::Folder)
        | EventKind::Remove(RemoveKind::Other)
        | EventKind::Remove(RemoveKind::Any)
        | EventKind::Modify(ModifyKind::Name(_)) => Relevance::Directory,
        _ => Relevance::File,
    }
}

/// What a changed path asks of the indexer for one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// Re-index (or remove) this file.
    File(FileRef),
    /// Reconcile this source by stat.
    Reconcile(String),
}

/// The targets a changed `path` stands for, across `sources`.
pub(crate) fn targets(sources: &[SourceRoot], path: &Path, relevance: Relevance) -> Vec<Target> {
    let mut out = Vec::new();
    if relevance == Relevance::Ignore {
        return out;
    }
    for src in sources {
        let Some(rel) = walk::relative(&src.root, path) else {
            continue;
        };
        if walk::belongs(src.kind, &rel) {
            out.push(Target::File(FileRef::new(src.name.clone(), rel)));
        } else if relevance == Relevance::Directory && in_scope(src.kind, &rel) {
            out.push(Target::Reconcile(src.name.clone()));
        }
    }
    out
}

/// Whether a non-file path could hide files of the source (a directory under it).
pub(crate) fn in_scope(kind: SourceKind, rel: &str) -> bool {
    let hidden = rel
        .split('/')
        .any(|p| p.starts_with('.') || walk::is_skipped_dir(p));
    if hidden {
        return false;
    }
    match kind {
        SourceKind::Workspace => rel == "memory" || rel.starts_with("memory/"),
        SourceKind::Sessions => rel == "sessions",
        SourceKind::Notes => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{DataChange, ModifyKind, RenameMode};
    use std::path::PathBuf;

    #[test]
    fn scope_of_directory_events() {
        assert!(in_scope(SourceKind::Workspace, "memory"));
        assert!(in_scope(SourceKind::Workspace, "memory/sub"));
        assert!(!in_scope(SourceKind::Workspace, "other"));
        assert!(!in_scope(SourceKind::Workspace, ".claw"));
        assert!(in_scope(SourceKind::Sessions, "sessions"));
        assert!(!in_scope(SourceKind::Notes, "a/.git/x"));
        assert!(in_scope(SourceKind::Notes, "a/b"));
    }

    #[test]
    fn event_kinds() {
        use Relevance::*;
        let cases = [
            (
                EventKind::Access(AccessKind::Close(AccessMode::Write)),
                File,
            ),
            (
                EventKind::Access(AccessKind::Close(AccessMode::Read)),
                Ignore,
            ),
            (EventKind::Access(AccessKind::Open(AccessMode::Any)), Ignore),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                Ignore,
            ),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::From)),
                Directory,
            ),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                Directory,
            ),
            (EventKind::Create(CreateKind::Folder), Directory),
            (EventKind::Remove(RemoveKind::Folder), Directory),
            (EventKind::Remove(RemoveKind::Any), Directory),
            (EventKind::Create(CreateKind::File), File),
            (EventKind::Remove(RemoveKind::File), File),
            (
                EventKind::Modify(ModifyKind::Data(DataChange::Content)),
                File,
            ),
            (EventKind::Any, File),
        ];
        for (kind, want) in cases {
            assert_eq!(relevance(&kind), want, "{kind:?}");
        }
    }

    fn sources() -> Vec<SourceRoot> {
        let ws = PathBuf::from("/ws");
        vec![
            SourceRoot {
                name: walk::SOURCE_MEMORY.into(),
                root: ws.clone(),
                kind: SourceKind::Workspace,
                follow_symlinks_outside: false,
            },
            SourceRoot {
                name: walk::SOURCE_SESSIONS.into(),
                root: ws,
                kind: SourceKind::Sessions,
                follow_symlinks_outside: false,
            },
            SourceRoot {
                name: "notes".into(),
                root: PathBuf::from("/notes"),
                kind: SourceKind::Notes,
                follow_symlinks_outside: false,
            },
        ]
    }

    #[test]
    fn paths_map_to_files_of_their_source() {
        let s = sources();
        let t = |p: &str, r| targets(&s, Path::new(p), r);
        for (path, source, rel) in [
            ("/ws/memory/2026-11-02.md", "memory", "memory/2026-11-02.md"),
            ("/ws/sessions/a.jsonl", "sessions", "sessions/a.jsonl"),
            ("/notes/x/y.md", "notes", "x/y.md"),
        ] {
            assert_eq!(
                t(path, Relevance::File),
                [Target::File(FileRef::new(source, rel))],
                "{path}"
            );
        }
        // Not a file of any source: a state file, a foreign extension, another tree.
        assert!(t("/ws/.claw/memory.sqlite", Relevance::File).is_empty());
        assert!(t("/ws/memory/a.png", Relevance::File).is_empty());
        assert!(t("/elsewhere/a.md", Relevance::File).is_empty());
        // Ignored kinds never target anything.
        assert!(t("/ws/memory/a.md", Relevance::Ignore).is_empty());
    }

    #[test]
    fn directory_events_reconcile_their_sources() {
        let s = sources();
        let t = |p: &str, r| targets(&s, Path::new(p), r);
        for (path, source) in [
            ("/ws/memory/2026", "memory"),
            ("/ws/sessions", "sessions"),
            ("/notes/sub", "notes"),
        ] {
            assert_eq!(
                t(path, Relevance::Directory),
                [Target::Reconcile(source.into())],
                "{path}"
            );
        }
        // A plain file event on a directory path reconciles nothing.
        assert!(t("/notes/sub", Relevance::File).is_empty());
        // Hidden and skipped directories hide nothing.
        assert!(t("/notes/.git", Relevance::Directory).is_empty());
    }
}
