//! Tool policy: which tools are read-only (run freely), which have side effects
//! (may need the user's confirmation), and the workspace jail that confines file
//! tools to the workspace.
//!
//! Invariant: with the jail on, a resolved path is never outside the canonical
//! workspace — neither through `..` nor through a symlink, dangling ones included
//! (checked on the canonical path of the nearest existing ancestor).
//! [`resolve_path`] returns a *path*, so it is only a check at one instant; the
//! file tools do not use it: they open through [`super::jail::Jail`], which
//! resolves beneath a workspace descriptor and works on what it opened.

use std::path::{Component, Path, PathBuf};

use super::ToolError;

/// Names of the tools that never change anything; they always run without confirmation.
pub const READ_ONLY_TOOLS: &[&str] = &[
    "read_file",
    "list_dir",
    "web_fetch",
    "web_search",
    "memory_search",
    "memory_get",
];

/// Names of the tools with side effects (files written, commands run).
pub const SIDE_EFFECT_TOOLS: &[&str] = &["write_file", "edit_file", "exec"];

/// True for a known tool that changes nothing. Unknown names are not read-only.
pub fn is_read_only(name: &str) -> bool {
    READ_ONLY_TOOLS.contains(&name)
}

/// True when the tool `name` must be confirmed by the user before it runs:
/// confirmation is configured and the tool is a known tool with side effects.
pub fn needs_confirmation(name: &str, confirm_side_effects: bool) -> bool {
    confirm_side_effects && SIDE_EFFECT_TOOLS.contains(&name)
}

/// Resolves a path given by the model against the workspace.
///
/// Relative paths are taken from `workspace`. Without the jail the joined path is
/// returned as is. With the jail, the path is canonicalised (for a path that does
/// not exist yet: its nearest existing ancestor is canonicalised and the rest
/// appended, which must not contain `..`) and must lie inside the canonical
/// workspace, otherwise [`ToolError::OutsideWorkspace`].
pub fn resolve_path(workspace: &Path, jail: bool, raw: &str) -> Result<PathBuf, ToolError> {
    if raw.trim().is_empty() {
        return Err(ToolError::InvalidArguments {
            tool: String::new(),
            message: "`path` must not be empty".into(),
        });
    }
    if raw.contains('\0') {
        return Err(ToolError::InvalidArguments {
            tool: String::new(),
            message: "`path` contains a NUL byte".into(),
        });
    }
    let given = Path::new(raw);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        workspace.join(given)
    };
    if !jail {
        return Ok(joined);
    }
    let root = workspace.canonicalize().map_err(|e| ToolError::Io {
        path: workspace.display().to_string(),
        message: format!("cannot resolve the workspace: {e}"),
    })?;
    let resolved = canonicalize_lenient(&joined).map_err(|_| ToolError::OutsideWorkspace {
        path: raw.to_string(),
        workspace: root.display().to_string(),
    })?;
    if resolved.starts_with(&root) {
        Ok(resolved)
    } else {
        Err(ToolError::OutsideWorkspace {
            path: raw.to_string(),
            workspace: root.display().to_string(),
        })
    }
}

/// Canonicalises `path`; when it does not exist, canonicalises the nearest
/// existing ancestor and appends the missing components. Missing components may
/// not contain `..` (they cannot be resolved safely) — that is an error. So is a
/// component that exists but cannot be canonicalised (a dangling symlink: writing
/// through it would create its target, wherever that is).
fn canonicalize_lenient(path: &Path) -> Result<PathBuf, ()> {
    for ancestor in path.ancestors() {
        let Ok(base) = ancestor.canonicalize() else {
            if ancestor.symlink_metadata().is_ok() {
                return Err(());
            }
            continue;
        };
        let rest = path.strip_prefix(ancestor).map_err(|_| ())?;
        if rest
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(());
        }
        if rest.as_os_str().is_empty() {
            return Ok(base);
        }
        return Ok(base.join(rest));
    }
    Err(())
}

/// Shows `path` relative to the workspace when it is inside it, else in full.
pub fn display_path(workspace: &Path, path: &Path) -> String {
    let root = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    for base in [root.as_path(), workspace] {
        if let Ok(rel) = path.strip_prefix(base) {
            let s = rel.display().to_string();
            return if s.is_empty() { ".".into() } else { s };
        }
    }
    path.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_and_confirmation() {
        assert!(is_read_only("read_file"));
        assert!(is_read_only("memory_get"));
        assert!(!is_read_only("exec"));
        assert!(!is_read_only("no_such_tool"));
        assert!(needs_confirmation("exec", true));
        assert!(needs_confirmation("write_file", true));
        assert!(!needs_confirmation("exec", false));
        assert!(!needs_confirmation("read_file", true));
        assert!(!needs_confirmation("no_such_tool", true));
    }

    #[test]
    fn jail_refuses_dotdot_and_allows_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        std::fs::write(ws.join("sub/a.txt"), "x").unwrap();
        let ok = resolve_path(&ws, true, "sub/a.txt").unwrap();
        assert_eq!(
            ok.as_os_str(),
            ws.canonicalize().unwrap().join("sub/a.txt").as_os_str()
        );
        assert!(std::fs::metadata(&ok).unwrap().is_file());
        // Not yet existing, nested.
        let new = resolve_path(&ws, true, "sub/new/deeper/b.txt").unwrap();
        assert!(new.starts_with(ws.canonicalize().unwrap()));
        // `..` that stays inside is fine.
        assert!(resolve_path(&ws, true, "sub/../sub/a.txt").is_ok());
        for bad in [
            "../x.txt",
            "sub/../../x.txt",
            "/etc/passwd",
            "missing/../../x",
            "..",
        ] {
            assert!(
                matches!(
                    resolve_path(&ws, true, bad),
                    Err(ToolError::OutsideWorkspace { .. })
                ),
                "{bad} should be refused"
            );
        }
        // Without the jail the same paths resolve.
        assert!(resolve_path(&ws, false, "../x.txt").is_ok());
        assert!(resolve_path(&ws, true, "").is_err());
    }

    #[test]
    fn jail_refuses_symlink_escape() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        assert!(matches!(
            resolve_path(&ws, true, "link/secret.txt"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            resolve_path(&ws, true, "link/new-file.txt"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        assert!(resolve_path(&ws, false, "link/secret.txt").is_ok());
        // A dangling symlink (its target outside) is refused, not appended to.
        std::os::unix::fs::symlink(outside.join("new"), ws.join("dangling")).unwrap();
        assert!(matches!(
            resolve_path(&ws, true, "dangling"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
        assert!(matches!(
            resolve_path(&ws, true, "dangling/x"),
            Err(ToolError::OutsideWorkspace { .. })
        ));
    }
}
