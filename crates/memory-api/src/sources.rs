//! Registering a notes folder as a source, checked the same way on every
//! backend: a usable name (not a built-in one), a real folder, and no overlap
//! with the workspace or with a folder already registered (each note must be
//! indexed once). The messages name no command: the CLI adds its hints.

use claw_memory::walk;
use std::path::{Path, PathBuf};

/// Why a folder cannot be registered as a source.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The path does not exist (or cannot be resolved).
    #[error("cannot add {}: no such folder", path.display())]
    NoSuchFolder {
        /// The path as given.
        path: PathBuf,
        /// Why it could not be resolved.
        #[source]
        source: std::io::Error,
    },
    /// The path is a file, not a folder.
    #[error("cannot add {}: not a folder", path.display())]
    NotAFolder {
        /// The resolved path.
        path: PathBuf,
    },
    /// No name given and none derivable from the path (`/`).
    #[error("cannot derive a source name from the path; pass a name")]
    NoName,
    /// The name has characters a source name may not have.
    #[error("invalid source name `{name}`: {reason}")]
    InvalidName {
        /// The name, with control characters shown escaped.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `memory`, `sessions` and `all` name built-in sources (or every source).
    #[error("`{name}` is a reserved source name")]
    Reserved {
        /// The name.
        name: String,
    },
    /// A source of that name or folder is registered already.
    #[error("a source `{existing}` already covers {}", root.display())]
    Duplicate {
        /// The registered source.
        existing: String,
        /// Its folder.
        root: PathBuf,
    },
    /// The folder contains, or lies inside, a registered source.
    #[error("{} overlaps the source `{existing}` ({})", root.display(), existing_root.display())]
    Overlapping {
        /// The folder being added.
        root: PathBuf,
        /// The registered source it overlaps.
        existing: String,
        /// That source's folder.
        existing_root: PathBuf,
    },
    /// The folder is the workspace (or contains it, or lies in its built-in
    /// folders), which is indexed already.
    #[error("{} is the workspace (or contains it, or lies in its memory/sessions folders); it is indexed already", root.display())]
    WorkspaceAsSource {
        /// The folder being added.
        root: PathBuf,
    },
}

/// A folder checked for registration: its canonical path and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSource {
    /// Source name.
    pub name: String,
    /// Canonical folder.
    pub root: PathBuf,
}

/// Resolve `path` (must be a folder) and the source's name (`name`, else the
/// folder's own name), and check the name.
pub fn resolve(path: &Path, name: Option<&str>) -> Result<NewSource, SourceError> {
    let root = path
        .canonicalize()
        .map_err(|source| SourceError::NoSuchFolder {
            path: path.to_path_buf(),
            source,
        })?;
    if !root.is_dir() {
        return Err(SourceError::NotAFolder { path: root });
    }
    let name = match name {
        Some(n) => n.to_string(),
        None => root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or(SourceError::NoName)?,
    };
    check_name(&name)?;
    Ok(NewSource { name, root })
}

/// A source name: non-empty, no `/`, `:`, leading `.` or control characters,
/// and not a built-in name.
pub fn check_name(name: &str) -> Result<(), SourceError> {
    let invalid = |reason| SourceError::InvalidName {
        name: name.escape_debug().to_string(),
        reason,
    };
    if name.chars().any(char::is_control) {
        return Err(invalid("control characters are not allowed"));
    }
    if name.is_empty() || name.contains('/') || name.contains(':') || name.starts_with('.') {
        return Err(invalid("use letters, digits, '-' or '_'"));
    }
    if name == walk::SOURCE_MEMORY || name == walk::SOURCE_SESSIONS || name == "all" {
        return Err(SourceError::Reserved {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Refuse a folder that would index notes twice: one already registered (by
/// name or folder), the workspace itself (or a folder containing it, or its
/// `memory/` / `sessions/` folders), or a folder that contains or lies inside
/// a registered source. `new.root` is canonical.
pub fn check_new(
    workspace: &Path,
    new: &NewSource,
    existing: &[(String, PathBuf)],
) -> Result<(), SourceError> {
    if let Some((name, root)) = existing
        .iter()
        .find(|(n, r)| *n == new.name || *r == new.root)
    {
        return Err(SourceError::Duplicate {
            existing: name.clone(),
            root: root.clone(),
        });
    }
    let root = &new.root;
    let ws = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    if ws.starts_with(root)
        || root.starts_with(ws.join("memory"))
        || root.starts_with(ws.join("sessions"))
    {
        return Err(SourceError::WorkspaceAsSource { root: root.clone() });
    }
    for (name, er) in existing {
        if root.starts_with(er) || er.starts_with(root) {
            return Err(SourceError::Overlapping {
                root: root.clone(),
                existing: name.clone(),
                existing_root: er.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_before_anything_is_written() {
        assert!(check_name("notes-2").is_ok());
        for bad in ["", "a/b", "a:b", ".hidden", "a\u{1b}[31m"] {
            assert!(
                matches!(check_name(bad), Err(SourceError::InvalidName { .. })),
                "{bad:?}"
            );
        }
        for reserved in ["memory", "sessions", "all"] {
            assert!(matches!(
                check_name(reserved),
                Err(SourceError::Reserved { .. })
            ));
        }
    }

    #[test]
    fn overlaps_and_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let notes = dir.path().join("notes");
        std::fs::create_dir_all(ws.join("memory/sub")).unwrap();
        std::fs::create_dir_all(notes.join("inner")).unwrap();
        let notes = notes.canonicalize().unwrap();
        let existing = vec![("notes".to_string(), notes.clone())];
        let new = |p: &Path, n: &str| NewSource {
            name: n.into(),
            root: p.canonicalize().unwrap(),
        };
        assert!(matches!(
            check_new(&ws, &new(&notes.join("inner"), "inner"), &existing),
            Err(SourceError::Overlapping { .. })
        ));
        assert!(matches!(
            check_new(&ws, &new(&ws.join("memory/sub"), "sub"), &existing),
            Err(SourceError::WorkspaceAsSource { .. })
        ));
        assert!(matches!(
            check_new(&ws, &new(dir.path(), "top"), &existing),
            Err(SourceError::WorkspaceAsSource { .. })
        ));
        assert!(matches!(
            check_new(&ws, &new(&notes, "other"), &existing),
            Err(SourceError::Duplicate { .. })
        ));
        // Positive control: a disjoint folder passes.
        let free = dir.path().join("free");
        std::fs::create_dir(&free).unwrap();
        assert!(check_new(&ws, &new(&free, "free"), &existing).is_ok());
    }
}
