//! Tool policy: which calls run freely and which need the user's consent (read
//! from the tool table's `read_only` and `reach` flags, never from a list of
//! names), the session's "always" answers, and the workspace jail that confines
//! file tools to the workspace.
//!
//! Invariant: with the jail on, a resolved path is never outside the canonical
//! workspace — neither through `..` nor through a symlink, dangling ones included
//! (checked on the canonical path of the nearest existing ancestor).
//! [`resolve_path`] returns a *path*, so it is only a check at one instant; the
//! file tools do not use it: they open through [`super::jail::Jail`], which
//! resolves beneath a workspace descriptor and works on what it opened.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use super::ToolError;
use super::table::{Invocation, Reach, ToolDescriptor, ToolId};

/// What an "always" answer allows for the rest of the session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Grant {
    /// Every call of a tool with side effects.
    Tool(ToolId),
    /// `web_fetch` (any tool reaching [`Reach::AnyHost`]) to one host.
    Host(String),
    /// Every call of a dynamic tool with side effects ([`super::dynamic`]), by name.
    External(String),
}

impl Grant {
    /// What the grant covers, for the question shown to the user.
    pub fn describe(&self) -> String {
        match self {
            Grant::Tool(id) => format!("every `{}` call", id.name()),
            Grant::Host(host) => format!("fetches from {host}"),
            Grant::External(name) => format!("every `{name}` call"),
        }
    }

    /// What a call under this grant reaches, as approval requests show it:
    /// `workspace`, `process` (a shell command), `network`, `service`,
    /// `host:<host>` (one host the model chose) or `external` (a dynamic tool).
    pub fn reach(&self) -> String {
        match self {
            Grant::Tool(id) => match id.descriptor().reach {
                Reach::Workspace => "workspace".into(),
                Reach::Process => "process".into(),
                Reach::AnyHost => "network".into(),
                Reach::ConfiguredService => "service".into(),
            },
            Grant::Host(host) => format!("host:{host}"),
            Grant::External(_) => "external".into(),
        }
    }
}

/// What must happen before a call runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Runs freely.
    Free,
    /// Needs the user's consent, unless the session already granted this.
    Confirm(Grant),
}

/// The user's answer to a confirmation question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Run this call.
    Once,
    /// Run it, and everything the same [`Grant`] covers, for the rest of the session.
    Always,
    Deny,
    /// There is no one to ask (no terminal): refused.
    Unavailable,
}

/// The "always" answers given in one session.
#[derive(Debug, Clone, Default)]
pub struct Grants(BTreeSet<Grant>);

impl Grants {
    pub fn covers(&self, grant: &Grant) -> bool {
        self.0.contains(grant)
    }

    pub fn allow(&mut self, grant: Grant) {
        self.0.insert(grant);
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

/// True for a known tool that changes nothing (the table's `read_only`). Unknown
/// names are not read-only.
pub fn is_read_only(name: &str) -> bool {
    ToolId::parse(name).is_some_and(|id| id.descriptor().read_only)
}

/// True when every call of the tool needs confirmation, whatever its arguments:
/// confirmation is on and the tool is not read-only.
pub fn always_confirms(tool: &ToolDescriptor, confirm: bool) -> bool {
    confirm && !tool.read_only
}

/// The policy for one parsed call, from the table's flags only: with
/// confirmation on, a tool that is not read-only needs the user's consent (an
/// "always" covers the tool), and a tool reaching a host the model chose needs it
/// per host. Everything else — read-only tools in the workspace, the configured
/// search service — runs freely. `housekeeping` (claw's own memory flush) lets
/// `write_file`/`edit_file` of a memory note (`MEMORY.md`, `memory/…`) run freely.
pub fn gate(call: &Invocation, confirm: bool, housekeeping: bool) -> Gate {
    let tool = call.id().descriptor();
    if !confirm {
        return Gate::Free;
    }
    if housekeeping {
        let note = match call {
            Invocation::WriteFile(a) => Some(a.path.as_str()),
            Invocation::EditFile(a) => Some(a.path.as_str()),
            _ => None,
        };
        if note.is_some_and(is_memory_note) {
            return Gate::Free;
        }
    }
    if always_confirms(tool, confirm) {
        return Gate::Confirm(Grant::Tool(tool.id));
    }
    if tool.reach == Reach::AnyHost {
        let url = match call {
            Invocation::WebFetch(a) => Some(a.url.as_str()),
            _ => None,
        };
        // An unparsable URL never reaches the network: the tool refuses it.
        if let Some(host) = url.and_then(host_of) {
            return Gate::Confirm(Grant::Host(host));
        }
    }
    Gate::Free
}

/// The host (and port, when not the scheme's default) of a URL, lower-cased.
pub fn host_of(url: &str) -> Option<String> {
    let u = reqwest::Url::parse(url.trim()).ok()?;
    let host = u.host_str()?.to_ascii_lowercase();
    Some(match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host,
    })
}

/// A workspace-relative path to `MEMORY.md` or a Markdown file under `memory/`,
/// without `..` or an absolute root.
pub fn is_memory_note(path: &str) -> bool {
    let p = Path::new(path.trim());
    let plain = p
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    let mut normal = p.components().filter(|c| matches!(c, Component::Normal(_)));
    let first = normal.next().and_then(|c| c.as_os_str().to_str());
    let md = p.extension().is_some_and(|e| e == "md");
    plain
        && md
        && match first {
            Some("MEMORY.md") => normal.next().is_none(),
            Some("memory") => normal.next().is_some(),
            _ => false,
        }
}

/// Resolves a path given by the model against the workspace.
///
/// Relative paths are taken from `workspace`. Without the jail the joined path is
/// returned as is. With the jail, the path is canonicalised (for a path that does
/// not exist yet: its nearest existing ancestor is canonicalised and the rest
/// appended, which must not contain `..`) and must lie inside the canonical
/// workspace, otherwise [`ToolError::OutsideWorkspace`].
pub fn resolve_path(workspace: &Path, jail: bool, raw: &str) -> Result<PathBuf, ToolError> {
    let joined = join_model_path(workspace, raw)?;
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

/// Checks a path given by the model (not empty, no NUL byte) and takes a
/// relative one from `workspace`; nothing is resolved on the file system.
pub(crate) fn join_model_path(workspace: &Path, raw: &str) -> Result<PathBuf, ToolError> {
    if raw.trim().is_empty() {
        return Err(ToolError::invalid("", "`path` must not be empty"));
    }
    if raw.contains('\0') {
        return Err(ToolError::invalid("", "`path` contains a NUL byte"));
    }
    Ok(workspace.join(raw))
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

    fn inv(name: &str, args: &str) -> Invocation {
        Invocation::parse(ToolId::parse(name).unwrap(), args).unwrap()
    }

    #[test]
    fn policy_of_every_tool_follows_its_flags() {
        use super::super::table::TOOLS;
        let args = |name: &str| match name {
            "read_file" | "memory_get" => r#"{"path":"a.md"}"#,
            "write_file" => r#"{"path":"a.md","content":"x"}"#,
            "edit_file" => r#"{"path":"a.md","old_text":"a","new_text":"b"}"#,
            "list_dir" => "{}",
            "exec" => r#"{"command":"ls"}"#,
            "web_fetch" => r#"{"url":"https://Example.org/x"}"#,
            "web_search" | "memory_search" => r#"{"query":"q"}"#,
            "cron" => r#"{"action":"add","every":"1h","message":"stretch"}"#,
            "message" => r#"{"channel":"telegram","chat_id":"42","text":"hi"}"#,
            "spawn" => r#"{"task":"summarise the notes"}"#,
            other => panic!("a new tool `{other}`: add it to this test"),
        };
        let mut seen = Vec::new();
        for d in TOOLS {
            let call = inv(d.name, args(d.name));
            let expected = match d.name {
                "write_file" | "edit_file" | "exec" | "cron" | "message" | "spawn" => {
                    Gate::Confirm(Grant::Tool(d.id))
                }
                "web_fetch" => Gate::Confirm(Grant::Host("example.org".into())),
                _ => Gate::Free,
            };
            assert_eq!(gate(&call, true, false), expected, "{}", d.name);
            assert_eq!(gate(&call, false, false), Gate::Free, "{}", d.name);
            assert_eq!(is_read_only(d.name), d.read_only);
            assert_eq!(always_confirms(d, true), !d.read_only, "{}", d.name);
            seen.push(d.name);
        }
        assert_eq!(seen.len(), 12);
        assert!(!is_read_only("no_such_tool"));
    }

    #[test]
    fn hosts_are_per_host_and_port() {
        for (url, host) in [
            ("https://EXAMPLE.org/a?b", Some("example.org")),
            ("http://example.org:8080/", Some("example.org:8080")),
            ("http://127.0.0.1:80/", Some("127.0.0.1")),
            ("not a url", None),
        ] {
            assert_eq!(host_of(url).as_deref(), host, "{url}");
        }
        let g = gate(&inv("web_fetch", r#"{"url":"nonsense"}"#), true, false);
        assert_eq!(g, Gate::Free, "the tool refuses an unparsable URL itself");
        let mut grants = Grants::default();
        grants.allow(Grant::Host("example.org".into()));
        assert!(grants.covers(&Grant::Host("example.org".into())));
        assert!(!grants.covers(&Grant::Host("example.org:8080".into())));
        assert!(!grants.covers(&Grant::Tool(ToolId::Exec)));
    }

    #[test]
    fn housekeeping_writes_only_memory_notes_freely() {
        for ok in ["memory/2026-11-05.md", "./memory/a/b.md", "MEMORY.md"] {
            assert!(is_memory_note(ok), "{ok}");
            let w = inv("write_file", &format!(r#"{{"path":"{ok}","content":"x"}}"#));
            assert_eq!(gate(&w, true, true), Gate::Free, "{ok}");
            assert_eq!(
                gate(&w, true, false),
                Gate::Confirm(Grant::Tool(ToolId::WriteFile))
            );
        }
        for bad in [
            "memory/../x.md",
            "/abs/memory/a.md",
            "memory",
            "memory/a.sh",
            "notes/a.md",
            "MEMORY.md/x.md",
            "../memory/a.md",
        ] {
            assert!(!is_memory_note(bad), "{bad}");
            let w = inv(
                "write_file",
                &format!(r#"{{"path":"{bad}","content":"x"}}"#),
            );
            assert_ne!(gate(&w, true, true), Gate::Free, "{bad}");
        }
        let e = inv("exec", r#"{"command":"ls"}"#);
        assert_ne!(gate(&e, true, true), Gate::Free);
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
        let (_dir, [ws, outside]) = claw_testkit::temp_dirs(["ws", "outside"]);
        std::fs::write(outside.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("link")).unwrap();
        let refused = |raw: &str| {
            matches!(
                resolve_path(&ws, true, raw),
                Err(ToolError::OutsideWorkspace { .. })
            )
        };
        assert!(refused("link/secret.txt"));
        assert!(refused("link/new-file.txt"));
        assert!(resolve_path(&ws, false, "link/secret.txt").is_ok());
        // A dangling symlink (its target outside) is refused, not appended to.
        std::os::unix::fs::symlink(outside.join("new"), ws.join("dangling")).unwrap();
        assert!(refused("dangling"));
        assert!(refused("dangling/x"));
    }
}
