//! The watched roots: which directories need an OS watch for a set of sources
//! ([`wanted`], pure), and keeping those watches armed as roots appear, vanish or
//! are replaced (deleted and re-created: same path, new inode) — [`Roots`].

use crate::walk::{SourceKind, SourceRoot};
use notify::RecursiveMode;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One directory the watcher keeps an OS watch on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Root {
    pub(crate) mode: RecursiveMode,
    /// Sources whose files live under it.
    pub(crate) sources: Vec<String>,
    /// (dev, inode) of the directory when armed.
    pub(crate) armed: Option<(u64, u64)>,
}

/// The directories to watch for `sources` of the workspace `ws`, each with its
/// mode (recursive wins when two sources share a directory) and its sources.
pub(crate) fn wanted(
    ws: &Path,
    sources: &[SourceRoot],
) -> BTreeMap<PathBuf, (RecursiveMode, Vec<String>)> {
    let mut want: BTreeMap<PathBuf, (RecursiveMode, Vec<String>)> = BTreeMap::new();
    for s in sources {
        let dirs = match s.kind {
            SourceKind::Workspace => vec![
                (ws.to_path_buf(), RecursiveMode::NonRecursive),
                (ws.join("memory"), RecursiveMode::Recursive),
            ],
            SourceKind::Sessions => vec![
                (ws.to_path_buf(), RecursiveMode::NonRecursive),
                (ws.join("sessions"), RecursiveMode::NonRecursive),
            ],
            SourceKind::Notes => vec![(s.root.clone(), RecursiveMode::Recursive)],
        };
        for (p, mode) in dirs {
            let e = want.entry(p).or_insert((mode, Vec::new()));
            if mode == RecursiveMode::Recursive {
                e.0 = mode;
            }
            e.1.push(s.name.clone());
        }
    }
    want
}

/// A root whose watch changed state.
#[derive(Debug)]
pub(crate) struct RootChange {
    pub(crate) root: PathBuf,
    /// Whether it is watched now.
    pub(crate) exists: bool,
    /// The sources to reconcile.
    pub(crate) sources: Vec<String>,
    /// Arming failed (the root exists but could not be watched).
    pub(crate) error: Option<notify::Error>,
}

/// The set of watched roots and their OS watches.
#[derive(Debug, Default)]
pub(crate) struct Roots {
    map: BTreeMap<PathBuf, Root>,
}

impl Roots {
    /// Whether `p` is one of the roots.
    pub(crate) fn contains(&self, p: &Path) -> bool {
        self.map.contains_key(p)
    }

    /// The roots currently armed.
    pub(crate) fn armed(&self) -> Vec<PathBuf> {
        self.map
            .iter()
            .filter(|(_, r)| r.armed.is_some())
            .map(|(p, _)| p.clone())
            .collect()
    }

    /// Replace the wanted set: unwatch roots no longer wanted; new roots start
    /// unarmed (the next [`Roots::check_all`] arms them).
    pub(crate) fn set_wanted(
        &mut self,
        want: BTreeMap<PathBuf, (RecursiveMode, Vec<String>)>,
        os: &mut dyn notify::Watcher,
    ) {
        let stale: Vec<PathBuf> = self
            .map
            .keys()
            .filter(|p| !want.contains_key(*p))
            .cloned()
            .collect();
        for p in stale {
            if let Some(r) = self.map.remove(&p)
                && r.armed.is_some()
            {
                let _ = os.unwatch(&p);
            }
        }
        for (p, (mode, srcs)) in want {
            let r = self.map.entry(p).or_insert(Root {
                mode,
                sources: Vec::new(),
                armed: None,
            });
            r.mode = mode;
            r.sources = srcs;
        }
    }

    /// Check every root; see [`Roots::check`].
    pub(crate) fn check_all(&mut self, os: &mut dyn notify::Watcher) -> Vec<RootChange> {
        let paths: Vec<PathBuf> = self.map.keys().cloned().collect();
        paths.iter().filter_map(|p| self.check(p, os)).collect()
    }

    /// Arm a root that appeared, re-arm one that was replaced, disarm one that
    /// vanished. Returns the change, or `None` when the root is as it was armed.
    pub(crate) fn check(&mut self, p: &Path, os: &mut dyn notify::Watcher) -> Option<RootChange> {
        let root = self.map.get(p)?.clone();
        let now_id = dir_id(p);
        if now_id == root.armed {
            return None;
        }
        if root.armed.is_some() {
            let _ = os.unwatch(p);
        }
        let mut armed = None;
        let mut error = None;
        if now_id.is_some() {
            match os.watch(p, root.mode) {
                Ok(()) => armed = now_id,
                Err(e) => error = Some(e),
            }
        }
        if let Some(r) = self.map.get_mut(p) {
            r.armed = armed;
        }
        Some(RootChange {
            root: p.to_path_buf(),
            exists: armed.is_some(),
            sources: root.sources,
            error,
        })
    }
}

/// (dev, inode) of a directory, `None` when `p` is not one.
fn dir_id(p: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(p).ok()?;
    md.is_dir().then(|| (md.dev(), md.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(name: &str, root: &str, kind: SourceKind) -> SourceRoot {
        SourceRoot {
            name: name.into(),
            root: PathBuf::from(root),
            kind,
            follow_symlinks_outside: false,
        }
    }

    #[test]
    fn wanted_roots_merge_shared_directories() {
        let ws = Path::new("/ws");
        let w = wanted(
            ws,
            &[
                src("memory", "/ws", SourceKind::Workspace),
                src("sessions", "/ws", SourceKind::Sessions),
                src("notes", "/notes", SourceKind::Notes),
            ],
        );
        let keys: Vec<_> = w.keys().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(keys, ["/notes", "/ws", "/ws/memory", "/ws/sessions"]);
        assert_eq!(
            w[Path::new("/ws")],
            (
                RecursiveMode::NonRecursive,
                vec!["memory".to_string(), "sessions".to_string()]
            )
        );
        assert_eq!(w[Path::new("/ws/memory")].0, RecursiveMode::Recursive);
        assert_eq!(w[Path::new("/notes")].0, RecursiveMode::Recursive);
    }

    #[test]
    fn recursive_wins_for_a_shared_root() {
        let w = wanted(
            Path::new("/ws"),
            &[
                src("sessions", "/ws", SourceKind::Sessions),
                src("all", "/ws", SourceKind::Notes),
            ],
        );
        assert_eq!(w[Path::new("/ws")].0, RecursiveMode::Recursive);
        assert_eq!(w[Path::new("/ws")].1, ["sessions", "all"]);
    }

    #[test]
    fn roots_rearm_when_replaced_and_disarm_when_gone() {
        let dir = tempfile::tempdir().unwrap();
        let notes = dir.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        let mut os = notify::recommended_watcher(|_: notify::Result<notify::Event>| {}).unwrap();
        let mut roots = Roots::default();
        let mut want = BTreeMap::new();
        want.insert(
            notes.clone(),
            (RecursiveMode::Recursive, vec!["notes".to_string()]),
        );
        roots.set_wanted(want, &mut os);
        let first = roots.check_all(&mut os);
        assert_eq!(first.len(), 1);
        assert!(first[0].exists && first[0].error.is_none());
        assert_eq!(roots.armed(), vec![notes.clone()]);
        // Unchanged: nothing to report.
        assert!(roots.check(&notes, &mut os).is_none());
        // Replaced: re-armed.
        std::fs::remove_dir(&notes).unwrap();
        std::fs::create_dir(&notes).unwrap();
        let again = roots.check(&notes, &mut os);
        // (dev, inode) may be reused by the filesystem; when it differs, it is re-armed.
        if let Some(c) = again {
            assert!(c.exists);
            assert_eq!(c.sources, ["notes"]);
        }
        // Gone: disarmed, and its sources are named for reconciliation.
        std::fs::remove_dir(&notes).unwrap();
        let gone = roots
            .check(&notes, &mut os)
            .expect("a vanished root is a change");
        assert!(!gone.exists);
        assert_eq!(gone.sources, ["notes"]);
        assert!(roots.armed().is_empty());
        // No longer wanted: dropped.
        roots.set_wanted(BTreeMap::new(), &mut os);
        assert!(!roots.contains(&notes));
    }
}
