//! Where claw keeps what it trusts, and the move out of the workspace.
//!
//! The workspace is the assistant's playground: `write_file`, `edit_file` and every
//! `exec` may change anything in it, so nothing there may decide what claw indexes,
//! where it connects or what it runs. The *state directory* holds exactly those
//! things — the database (its `sources` table registers folders outside the
//! workspace), the source registry `memory.sources.json`, the workspace id, the
//! gateway's discovery file and bearer token, cron jobs, channel state, the
//! directory cache and the writer lock — and lives outside the workspace:
//! `<root>/<workspace key>/`, where the application picks the root
//! (`$XDG_STATE_HOME/claw` or `~/.claw/state`) and [`workspace_key`] names the
//! workspace (its directory name and a hash of its resolved path).
//!
//! Older claws kept it in `<workspace>/.claw/`. [`migrate_legacy`] moves that
//! directory's contents once (the database with its embedding cache, so nothing
//! is re-embedded); what a tool could have planted there and claw can rebuild
//! (the gateway's discovery file and token, the directory cache) is dropped
//! instead of trusted. A registered source carried over from there with a root
//! outside the workspace, or following symlinks out of its folder, is what only
//! the user's own `memory add` may register: it is unregistered (its rows go
//! too) and recorded in `untrusted-sources.json` ([`untrusted_sources`]) so
//! the user can be told and re-register it. [`check_private`] refuses a state
//! directory another user could write; [`inspect`] says whether it is private.
//!
//! Pure library code: no terminal I/O, no environment; the caller reports.

use sha2::{Digest, Sha256};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// The state directory of older claws, inside the workspace.
pub const LEGACY_DIR: &str = ".claw";

/// Files moved from a legacy state directory, the database last (its presence in
/// the new directory marks a finished move, so an interrupted one resumes).
const MOVED: &[&str] = &[
    "workspace-id",
    "memory.sources.json",
    "channels",
    "memory.sqlite-wal",
    "memory.sqlite-shm",
    "memory.sqlite",
];

/// Files of a legacy state directory that are not carried over: caches claw
/// rebuilds, and the gateway's discovery file and token (a tool could have
/// planted them; the gateway writes fresh ones on its next start).
const DROPPED: &[&str] = &[
    "memory.dirs",
    "memory.swap.lock",
    "memory.sqlite.rebuild",
    "memory.sqlite.swapping",
    "gateway.json",
    "gateway.token",
    "writer.lock",
];

/// Errors preparing the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state directory {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "state directory {path} is not private: {why} (claw trusts what it finds there, so \
         only its owner may write it)"
    )]
    NotPrivate { path: PathBuf, why: String },
    #[error(
        "the old state directory {path} is in use by pid {pid} ({what}); stop that claw \
         process so its state can move to {to}"
    )]
    LegacyInUse {
        path: PathBuf,
        to: PathBuf,
        pid: u32,
        what: String,
    },
    /// The sources registered in a database moved out of the workspace could
    /// not be checked: it is not used until they are.
    #[error(
        "cannot check the folders registered in {path}, moved from the workspace: {source} \
         (it is not used until they are checked)"
    )]
    Vet {
        path: PathBuf,
        source: crate::store::StoreError,
    },
    /// The record of sources not trusted could not be read or written.
    #[error("{path}: {source}")]
    Record {
        path: PathBuf,
        source: serde_json::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// `<directory name>-<16 hex digits of SHA-256 of the resolved absolute path>`:
/// stable for one workspace, distinct for two (`notes` in two places), readable in
/// a listing. Symlinks in the existing part of the path are resolved, so two
/// spellings of one workspace share one state directory.
pub fn workspace_key(workspace: &Path) -> String {
    let resolved = resolve_existing(workspace);
    let digest = Sha256::digest(resolved.as_os_str().as_encoded_bytes());
    let name: String = resolved
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    let name = name.trim_start_matches('.');
    let hex = hex::encode(&digest[..8]);
    if name.is_empty() {
        hex
    } else {
        format!("{name}-{hex}")
    }
}

/// The state directory of `workspace` under `root`.
pub fn state_dir_for(root: &Path, workspace: &Path) -> PathBuf {
    root.join(workspace_key(workspace))
}

/// `path` made absolute (against the current directory), `.`/`..` folded, and
/// the longest existing prefix resolved through symlinks.
pub fn resolve_existing(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut folded = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::ParentDir => {
                folded.pop();
            }
            Component::CurDir => {}
            other => folded.push(other),
        }
    }
    let mut existing = folded.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(existing) {
            let mut out = real;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return folded,
        }
    }
}

/// Whether `path` is `dir` or beneath it, both resolved ([`resolve_existing`]).
pub fn is_within(path: &Path, dir: &Path) -> bool {
    resolve_existing(path).starts_with(resolve_existing(dir))
}

/// Refuses a state directory that is not a directory owned by this user, or that
/// its group or others may write (ssh's rule for `~/.ssh`). Missing is fine: claw
/// creates it 0700.
pub fn check_private(state_dir: &Path) -> Result<(), StateError> {
    let meta = match std::fs::symlink_metadata(state_dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(state_dir)(e)),
    };
    let not_private = |why: String| StateError::NotPrivate {
        path: state_dir.to_path_buf(),
        why,
    };
    if meta.file_type().is_symlink() {
        return Err(not_private("it is a symlink".into()));
    }
    if !meta.is_dir() {
        return Err(not_private("it is not a directory".into()));
    }
    // The kernel gives `/proc/self` this process's effective uid.
    let me = std::fs::metadata("/proc/self")
        .map_err(io(Path::new("/proc/self")))?
        .uid();
    if meta.uid() != me {
        return Err(not_private(format!(
            "it is owned by uid {}, not by this user (uid {me})",
            meta.uid()
        )));
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(not_private(format!(
            "its mode is {mode:o}: group or others may write it (chmod 700 it)"
        )));
    }
    Ok(())
}

/// Whether a state directory is private, as `claw doctor` reports it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StateDirInfo {
    /// The state directory.
    pub path: PathBuf,
    /// It exists (claw creates it on first use).
    pub exists: bool,
    /// Its owner's uid, when it exists.
    pub owner_uid: Option<u32>,
    /// This process's uid.
    pub user_uid: Option<u32>,
    /// Its permission bits in octal (`"700"`), when it exists.
    pub mode: Option<String>,
    /// It is the workspace or lies beneath it (resolved).
    pub inside_workspace: bool,
    /// A real directory (no symlink), owned by this user, mode 0700 (no
    /// access for group or others), outside the workspace.
    pub private: bool,
    /// Why it is not private, one phrase each.
    pub problems: Vec<String>,
}

/// Whether `state_dir` is private ([`StateDirInfo::private`]), and why not.
pub fn inspect(state_dir: &Path, workspace: &Path) -> StateDirInfo {
    let mut info = StateDirInfo {
        path: state_dir.to_path_buf(),
        exists: false,
        owner_uid: None,
        user_uid: std::fs::metadata("/proc/self").ok().map(|m| m.uid()),
        mode: None,
        inside_workspace: is_within(state_dir, workspace),
        private: false,
        problems: Vec::new(),
    };
    if info.inside_workspace {
        info.problems
            .push("it is inside the workspace: only the file jail and the exec sandbox keep the assistant's tools out of it".into());
    }
    match std::fs::symlink_metadata(state_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            info.problems.push("it does not exist yet".into());
        }
        Err(e) => info.problems.push(format!("it cannot be read: {e}")),
        Ok(meta) => {
            info.exists = true;
            info.owner_uid = Some(meta.uid());
            let mode = meta.permissions().mode() & 0o7777;
            info.mode = Some(format!("{mode:o}"));
            if meta.file_type().is_symlink() {
                info.problems.push("it is a symlink".into());
            } else if !meta.is_dir() {
                info.problems.push("it is not a directory".into());
            }
            if info.user_uid.is_some_and(|me| me != meta.uid()) {
                info.problems.push(format!(
                    "it is owned by uid {}, not by this user",
                    meta.uid()
                ));
            }
            if mode & 0o077 != 0 {
                info.problems.push(format!(
                    "its mode is {mode:o}: group or others have access (chmod 700 it)"
                ));
            }
        }
    }
    info.private = info.problems.is_empty();
    info
}

/// What [`migrate_legacy`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The legacy directory (`<workspace>/.claw`).
    pub from: PathBuf,
    /// The state directory it moved to.
    pub to: PathBuf,
    /// Entries moved, by name (`cron/jobs.json` for the workspace's jobs file).
    pub moved: Vec<String>,
    /// Entries left behind and removed (rebuilt or regenerated by claw).
    pub dropped: Vec<String>,
    /// Whether the legacy directory was removed (false: it held other files).
    pub removed_legacy: bool,
    /// Registered sources not carried over: a tool could have registered them
    /// (also kept in `untrusted-sources.json`, see [`untrusted_sources`]).
    pub untrusted: Vec<UntrustedSource>,
}

/// A registered source found in a moved legacy state directory that claw does
/// not trust: its folder is outside the workspace, or it follows symlinks out
/// of its folder. Only the user registers such a source, with their own command.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UntrustedSource {
    /// The source's name.
    pub name: String,
    /// Its folder as registered.
    pub root: PathBuf,
    /// Whether it followed symlinks outside its folder.
    pub follow_symlinks_outside: bool,
    /// Why it is not trusted, one sentence.
    pub reason: String,
    /// Where it was found (the legacy database or source registry).
    pub found_in: PathBuf,
}

/// `untrusted-sources.json` in the state directory.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct UntrustedFile {
    version: u32,
    sources: Vec<UntrustedSource>,
}

/// The file recording the sources not carried over by a migration.
pub const UNTRUSTED_FILE: &str = "untrusted-sources.json";

/// Why a source carried over from the workspace is not trusted, or `None`
/// when it is (a folder inside the workspace, links not followed out of it).
pub fn distrust_reason(workspace: &Path, root: &Path, follow_outside: bool) -> Option<String> {
    let outside = !is_within(root, workspace);
    match (outside, follow_outside) {
        (false, false) => None,
        (true, false) => Some("its folder is outside the workspace".into()),
        (false, true) => Some("it follows symlinks outside its folder".into()),
        (true, true) => {
            Some("its folder is outside the workspace and it follows symlinks outside it".into())
        }
    }
}

/// The sources a migration did not carry over ([`Migration::untrusted`]) and
/// the user has not registered again since; empty when there is no record.
pub fn untrusted_sources(state_dir: &Path) -> Result<Vec<UntrustedSource>, StateError> {
    let path = state_dir.join(UNTRUSTED_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&path)(e)),
    };
    let file: UntrustedFile =
        serde_json::from_slice(&bytes).map_err(|source| StateError::Record { path, source })?;
    Ok(file.sources)
}

/// Drop `name` from the record of untrusted sources (the user registered it
/// again, or removed it); whether it was there.
pub fn forget_untrusted(state_dir: &Path, name: &str) -> Result<bool, StateError> {
    let mut list = untrusted_sources(state_dir)?;
    let before = list.len();
    list.retain(|s| s.name != name);
    if list.len() == before {
        return Ok(false);
    }
    save_untrusted(state_dir, list)?;
    Ok(true)
}

fn save_untrusted(state_dir: &Path, sources: Vec<UntrustedSource>) -> Result<(), StateError> {
    let path = state_dir.join(UNTRUSTED_FILE);
    if sources.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(&path)(e)),
            _ => Ok(()),
        };
    }
    let file = UntrustedFile {
        version: 1,
        sources,
    };
    let mut json = serde_json::to_vec_pretty(&file).map_err(|source| StateError::Record {
        path: path.clone(),
        source,
    })?;
    json.push(b'\n');
    claw_base::fs::write_atomic(&path, &json, claw_base::fs::Durability::Durable)
        .map_err(io(&path))?;
    crate::private::set_mode(&path, crate::private::FILE_MODE).map_err(io(&path))
}

/// Unregister the sources of the registry and database just moved into
/// `state_dir` that a tool could have planted ([`distrust_reason`]): the
/// registry file first (a database created later would read it back), then
/// the database, whose rows of such a source go with it. Each is recorded in
/// [`UNTRUSTED_FILE`].
fn distrust_moved_sources(
    workspace: &Path,
    state_dir: &Path,
    legacy: &Path,
) -> Result<Vec<UntrustedSource>, StateError> {
    use crate::store::{SourceRecord, Store};
    let db = state_dir.join("memory.sqlite");
    let vet = |source| StateError::Vet {
        path: db.clone(),
        source,
    };
    let untrusted = |s: &SourceRecord, found_in: &str| {
        distrust_reason(workspace, &s.root, s.follow_symlinks_outside).map(|reason| {
            UntrustedSource {
                name: s.name.clone(),
                root: s.root.clone(),
                follow_symlinks_outside: s.follow_symlinks_outside,
                reason,
                found_in: legacy.join(found_in),
            }
        })
    };
    let mut found: Vec<UntrustedSource> =
        crate::sidecar::retain(&db, |s| untrusted(s, "").is_none())
            .map_err(vet)?
            .iter()
            .filter_map(|s| untrusted(s, "memory.sources.json"))
            .collect();
    if std::fs::symlink_metadata(&db).is_ok() {
        let mut store = Store::open(&db).map_err(vet)?;
        for s in store.sources().map_err(vet)? {
            if let Some(u) = untrusted(&s, "memory.sqlite") {
                store.remove_source(&s.name).map_err(vet)?;
                found.retain(|f| f.name != u.name);
                found.push(u);
            }
        }
    }
    if !found.is_empty() {
        let mut record = untrusted_sources(state_dir)?;
        record.retain(|r| !found.iter().any(|f| f.name == r.name));
        record.extend(found.iter().cloned());
        save_untrusted(state_dir, record)?;
    }
    Ok(found)
}

/// Moves the state of an older claw from `<workspace>/.claw/` to `state_dir`, when
/// there is one to move and `state_dir` does not exist yet (the first run of a
/// claw with this layout: a `.claw/` a tool plants later is never imported);
/// `None` when there is nothing to do. The cron jobs file moves too (`<workspace>/cron/jobs.json`
/// to `<state_dir>/cron/jobs.json`).
///
/// Refused while a claw process holds the old directory's writer lock (a running
/// gateway or watcher of an older claw). A symlinked `.claw` is not followed (a
/// tool may have made it). Renames within a file system; across file systems,
/// copies (synced) and then removes the original. An interrupted move resumes on
/// the next call: the database moves last. Registered sources a tool could have
/// planted are not carried over ([`Migration::untrusted`]); the move is not
/// finished (it resumes) until they are checked.
pub fn migrate_legacy(workspace: &Path, state_dir: &Path) -> Result<Option<Migration>, StateError> {
    let legacy = workspace.join(LEGACY_DIR);
    if resolve_existing(&legacy) == resolve_existing(state_dir) {
        return Ok(None); // the state dir was configured to be the old place
    }
    let legacy_dir = match std::fs::symlink_metadata(&legacy) {
        Ok(m) => m.is_dir() && !m.file_type().is_symlink(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(io(&legacy)(e)),
    };
    // An interrupted move (the marker is still there) resumes, also when
    // everything moved but the check of the moved sources had not finished.
    let resume = resuming(state_dir);
    if !resume {
        let has = |name: &str| std::fs::symlink_metadata(legacy.join(name)).is_ok();
        if !legacy_dir || !MOVED.iter().any(|n| has(n)) {
            return Ok(None);
        }
        if std::fs::symlink_metadata(state_dir).is_ok() {
            return Ok(None); // moved already, or this layout was in use before: leave both alone
        }
    }
    if legacy_dir && let Ok(Some(h)) = crate::lock::WriterLock::holder(&legacy) {
        return Err(StateError::LegacyInUse {
            path: legacy,
            to: state_dir.to_path_buf(),
            pid: h.pid,
            what: h.what,
        });
    }
    crate::private::create_dir_all(state_dir).map_err(io(state_dir))?;
    std::fs::write(state_dir.join(MARKER), b"").map_err(io(state_dir))?;
    let mut moved = Vec::new();
    let mut dropped = Vec::new();
    if legacy_dir {
        for name in MOVED {
            let from = legacy.join(name);
            match std::fs::symlink_metadata(&from) {
                Ok(m) if m.file_type().is_symlink() => {
                    // Never carried over: a link could point anywhere.
                    std::fs::remove_file(&from).map_err(io(&from))?;
                }
                Ok(_) => {
                    move_entry(&from, &state_dir.join(name))?;
                    moved.push((*name).to_string());
                }
                Err(_) => {}
            }
        }
    }
    let jobs = workspace.join("cron").join("jobs.json");
    if let Ok(m) = std::fs::symlink_metadata(&jobs)
        && m.is_file()
    {
        let to = state_dir.join("cron").join("jobs.json");
        if std::fs::symlink_metadata(&to).is_err() {
            crate::private::create_dir_all(&state_dir.join("cron")).map_err(io(state_dir))?;
            move_entry(&jobs, &to)?;
            moved.push("cron/jobs.json".into());
            let _ = std::fs::remove_file(workspace.join("cron").join("jobs.lock"));
            let _ = std::fs::remove_dir(workspace.join("cron"));
        }
    }
    if legacy_dir {
        for name in DROPPED {
            let p = legacy.join(name);
            if std::fs::symlink_metadata(&p).is_ok() && std::fs::remove_file(&p).is_ok() {
                dropped.push((*name).to_string());
            }
        }
    }
    // Before the marker goes: a failure here leaves the move to resume.
    let untrusted = distrust_moved_sources(workspace, state_dir, &legacy)?;
    let removed_legacy = legacy_dir && std::fs::remove_dir(&legacy).is_ok();
    std::fs::remove_file(state_dir.join(MARKER)).map_err(io(state_dir))?;
    Ok(Some(Migration {
        from: legacy,
        to: state_dir.to_path_buf(),
        moved,
        dropped,
        removed_legacy,
        untrusted,
    }))
}

/// Whether `state_dir` holds an interrupted migration (moved entries, no database
/// yet): the marker file is written first and removed last.
fn resuming(state_dir: &Path) -> bool {
    std::fs::symlink_metadata(state_dir.join(MARKER)).is_ok()
}

/// Marks a migration in progress in the new state directory.
const MARKER: &str = ".migrating";

/// Renames `from` to `to`; across file systems copies (files synced, directories
/// recursively) and removes the original.
fn move_entry(from: &Path, to: &Path) -> Result<(), StateError> {
    match std::fs::rename(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_tree(from, to)?;
            let meta = std::fs::symlink_metadata(from).map_err(io(from))?;
            if meta.is_dir() {
                std::fs::remove_dir_all(from).map_err(io(from))
            } else {
                std::fs::remove_file(from).map_err(io(from))
            }
        }
        Err(e) => Err(io(from)(e)),
    }
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), StateError> {
    let meta = std::fs::symlink_metadata(from).map_err(io(from))?;
    if meta.file_type().is_symlink() {
        return Ok(()); // links are never carried over
    }
    if meta.is_dir() {
        crate::private::create_dir_all(to).map_err(io(to))?;
        for entry in std::fs::read_dir(from).map_err(io(from))? {
            let entry = entry.map_err(io(from))?;
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    let tmp = to.with_extension("migrating");
    std::fs::copy(from, &tmp).map_err(io(&tmp))?;
    crate::private::set_mode(&tmp, crate::private::FILE_MODE).map_err(io(&tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, to).map_err(io(to))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn keys_are_stable_distinct_and_readable() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("one/notes");
        let b = tmp.path().join("two/notes");
        std::fs::create_dir_all(&a).unwrap();
        let ka = workspace_key(&a);
        assert!(
            ka.starts_with("notes-") && ka.len() == "notes-".len() + 16,
            "{ka}"
        );
        assert_eq!(ka, workspace_key(&a), "stable");
        assert_ne!(ka, workspace_key(&b), "two workspaces of one name differ");
        // Spellings of one place share a key: `..`, a symlink, a missing tail.
        assert_eq!(ka, workspace_key(&tmp.path().join("one/x/../notes")));
        symlink(tmp.path().join("one"), tmp.path().join("link")).unwrap();
        assert_eq!(ka, workspace_key(&tmp.path().join("link/notes")));
        let missing = tmp.path().join("one/notes/later");
        let key_before = workspace_key(&missing);
        std::fs::create_dir_all(&missing).unwrap();
        assert_eq!(
            key_before,
            workspace_key(&missing),
            "same before and after creation"
        );
        assert!(is_within(&tmp.path().join("link/notes/x"), &a));
        assert!(!is_within(&b, &a));
    }

    #[test]
    fn a_state_dir_others_may_write_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let s = tmp.path().join("state");
        check_private(&s).expect("missing is fine");
        std::fs::create_dir(&s).unwrap();
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o700)).unwrap();
        check_private(&s).expect("0700 is private");
        std::fs::set_permissions(&s, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check_private(&s).unwrap_err().to_string();
        assert!(e.contains("not private") && e.contains("777"), "{e}");
        let l = tmp.path().join("link");
        symlink(&s, &l).unwrap();
        assert!(
            check_private(&l)
                .unwrap_err()
                .to_string()
                .contains("symlink")
        );
    }

    /// A database at `db` with `marker` in its meta (so a test can tell two apart).
    fn database(db: &Path, marker: &str) {
        let s = crate::store::Store::open(db).unwrap();
        s.set_meta("marker", marker).unwrap();
    }

    fn marker(db: &Path) -> Option<String> {
        crate::store::Store::open(db)
            .unwrap()
            .meta("marker")
            .unwrap()
    }

    #[test]
    fn the_legacy_state_moves_once_and_planted_files_are_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let legacy = ws.join(LEGACY_DIR);
        std::fs::create_dir_all(legacy.join("channels")).unwrap();
        database(&legacy.join("memory.sqlite"), "db");
        std::fs::remove_file(legacy.join("memory.sources.json")).ok();
        std::fs::write(legacy.join("workspace-id"), b"0123456789abcdef\n").unwrap();
        std::fs::write(legacy.join("channels/matrix.json"), b"{}").unwrap();
        std::fs::write(legacy.join("gateway.json"), b"{\"pid\":1}").unwrap();
        std::fs::write(legacy.join("gateway.token"), b"planted").unwrap();
        symlink("/etc/passwd", legacy.join("memory.sources.json")).unwrap();
        std::fs::create_dir_all(ws.join("cron")).unwrap();
        std::fs::write(ws.join("cron/jobs.json"), b"[]").unwrap();
        let state = tmp.path().join("state/ws-1");

        let m = migrate_legacy(&ws, &state).unwrap().expect("a migration");
        assert_eq!(
            m.moved,
            [
                "workspace-id",
                "channels",
                "memory.sqlite",
                "cron/jobs.json"
            ]
        );
        // (The swap lock is the database's own, left by opening it.)
        assert_eq!(
            m.dropped,
            ["memory.swap.lock", "gateway.json", "gateway.token"]
        );
        assert!(m.removed_legacy);
        assert_eq!(m.untrusted, []);
        assert_eq!(marker(&state.join("memory.sqlite")).as_deref(), Some("db"));
        assert_eq!(std::fs::read(state.join("cron/jobs.json")).unwrap(), b"[]");
        assert!(state.join("channels/matrix.json").is_file());
        assert!(
            !std::fs::read_to_string(state.join("memory.sources.json"))
                .unwrap_or_default()
                .contains("passwd"),
            "a link is never carried over"
        );
        assert!(!state.join("gateway.token").exists());
        assert!(!legacy.exists() && !ws.join("cron").exists());
        assert_eq!(
            std::fs::metadata(&state).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(!state.join(MARKER).exists());
        // Once only: a later `.claw` in the workspace is just a folder, also when
        // the database was deleted since (a planted one is never imported).
        std::fs::create_dir_all(&legacy).unwrap();
        database(&legacy.join("memory.sqlite"), "planted");
        assert_eq!(migrate_legacy(&ws, &state).unwrap(), None);
        assert_eq!(marker(&state.join("memory.sqlite")).as_deref(), Some("db"));
        std::fs::remove_file(state.join("memory.sqlite")).unwrap();
        assert_eq!(migrate_legacy(&ws, &state).unwrap(), None);
        assert!(!state.join("memory.sqlite").exists());
        // An interrupted move resumes.
        let state2 = tmp.path().join("state/ws-2");
        std::fs::create_dir_all(&state2).unwrap();
        std::fs::write(state2.join(MARKER), b"").unwrap();
        let m = migrate_legacy(&ws, &state2).unwrap().expect("resumed");
        assert!(m.moved.contains(&"memory.sqlite".to_string()), "{m:?}");
        assert_eq!(
            marker(&state2.join("memory.sqlite")).as_deref(),
            Some("planted")
        );
    }

    #[test]
    fn sources_outside_the_workspace_are_not_carried_over() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let legacy = ws.join(LEGACY_DIR);
        let inside = ws.join("notes");
        let outside = tmp.path().join("host");
        for d in [&legacy, &inside, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        {
            let s = crate::store::Store::open(&legacy.join("memory.sqlite")).unwrap();
            s.add_source("inside", &inside).unwrap();
            s.add_source("host", &outside).unwrap();
            s.add_source("links", &ws.join("memory")).unwrap();
            s.set_source_follow_symlinks_outside("links", true).unwrap();
        }
        let state = tmp.path().join("state/ws");
        let m = migrate_legacy(&ws, &state).unwrap().expect("a migration");
        let names: Vec<&str> = m.untrusted.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, ["host", "links"]);
        assert_eq!(m.untrusted[0].root, outside);
        assert_eq!(m.untrusted[0].reason, "its folder is outside the workspace");
        assert!(m.untrusted[1].follow_symlinks_outside);
        assert_eq!(m.untrusted[1].found_in, legacy.join("memory.sqlite"));
        let db = state.join("memory.sqlite");
        let kept: Vec<String> = crate::store::Store::open(&db)
            .unwrap()
            .sources()
            .unwrap()
            .into_iter()
            .map(|s| s.name)
            .collect();
        assert_eq!(kept, ["inside"], "the inside source migrates as before");
        assert_eq!(untrusted_sources(&state).unwrap(), m.untrusted);
        // The registry beside the database says the same: a rebuilt index
        // does not bring them back.
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
        let rebuilt = crate::store::Store::open(&db).unwrap().sources().unwrap();
        assert_eq!(rebuilt.len(), 1, "{rebuilt:?}");
        assert!(forget_untrusted(&state, "host").unwrap());
        assert!(!forget_untrusted(&state, "host").unwrap());
        assert_eq!(untrusted_sources(&state).unwrap().len(), 1);
        assert!(forget_untrusted(&state, "links").unwrap());
        assert!(!state.join(UNTRUSTED_FILE).exists());

        // The registry alone (the database deleted by a tool) is checked too.
        let ws2 = tmp.path().join("ws2");
        std::fs::create_dir_all(ws2.join(LEGACY_DIR)).unwrap();
        let sidecar = serde_json::json!({"version": 1, "sources": [
            {"name": "pw", "root": "/etc", "added_at": 0, "follow_symlinks_outside": true}
        ]});
        std::fs::write(ws2.join(".claw/memory.sources.json"), sidecar.to_string()).unwrap();
        let state2 = tmp.path().join("state/ws2");
        let m = migrate_legacy(&ws2, &state2).unwrap().expect("a migration");
        assert_eq!(m.untrusted.len(), 1);
        assert_eq!(m.untrusted[0].root, Path::new("/etc"));
        let db2 = state2.join("memory.sqlite");
        assert!(!db2.exists());
        assert!(
            crate::store::Store::open(&db2)
                .unwrap()
                .sources()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_check_that_fails_leaves_the_move_to_resume() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join(LEGACY_DIR)).unwrap();
        std::fs::write(ws.join(".claw/memory.sqlite"), b"not a database").unwrap();
        let state = tmp.path().join("state");
        let e = migrate_legacy(&ws, &state).unwrap_err();
        assert!(matches!(e, StateError::Vet { .. }), "{e}");
        assert!(state.join(MARKER).exists(), "to resume");
        // The user moves the database away: the move finishes.
        std::fs::remove_file(state.join("memory.sqlite")).unwrap();
        let m = migrate_legacy(&ws, &state).unwrap().expect("resumed");
        assert!(m.untrusted.is_empty());
        assert!(!state.join(MARKER).exists());
    }

    #[test]
    fn a_private_state_dir_is_0700_owned_and_outside_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let state = tmp.path().join("state");
        let i = inspect(&state, &ws);
        assert!(!i.exists && !i.private, "{i:?}");
        crate::private::create_dir_all(&state).unwrap();
        let i = inspect(&state, &ws);
        assert!(i.private, "{i:?}");
        assert_eq!(i.mode.as_deref(), Some("700"));
        assert_eq!(i.owner_uid, i.user_uid);
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
        let i = inspect(&state, &ws);
        assert!(!i.private && i.problems[0].contains("755"), "{i:?}");
        let inside = ws.join(".state");
        crate::private::create_dir_all(&inside).unwrap();
        let i = inspect(&inside, &ws);
        assert!(i.inside_workspace && !i.private, "{i:?}");
    }

    #[test]
    fn nothing_to_move_and_symlinked_legacy_dirs_are_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let state = tmp.path().join("state");
        assert_eq!(migrate_legacy(&ws, &state).unwrap(), None);
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("memory.sqlite"), b"x").unwrap();
        symlink(&elsewhere, ws.join(LEGACY_DIR)).unwrap();
        assert_eq!(migrate_legacy(&ws, &state).unwrap(), None);
        assert!(!state.exists());
        // The state dir configured as the old place: nothing moves.
        std::fs::remove_file(ws.join(LEGACY_DIR)).unwrap();
        std::fs::create_dir_all(ws.join(LEGACY_DIR)).unwrap();
        std::fs::write(ws.join(".claw/memory.sqlite"), b"x").unwrap();
        assert_eq!(migrate_legacy(&ws, &ws.join(".claw")).unwrap(), None);
    }
}
