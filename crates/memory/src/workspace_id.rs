//! The stable workspace id: a random-enough hex id created once in the
//! workspace's state dir (`.claw/workspace-id`, mode 0600) and read back ever
//! after. It is part of every row's owner on a shared backend (PostgreSQL), so
//! two machines (two workspaces) indexing into one namespace never overwrite
//! each other's `memory` and `sessions` sources; `memory status` shows it.

use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;

/// The file holding the id, inside the state dir.
pub const WORKSPACE_ID_FILE: &str = "workspace-id";

/// The workspace id kept in `state_dir`, created on first use. Two processes
/// racing to create it agree: the file is created exclusively, the loser reads
/// the winner's id.
pub fn workspace_id(state_dir: &Path) -> std::io::Result<String> {
    let path = state_dir.join(WORKSPACE_ID_FILE);
    if let Some(id) = read_id(&path)? {
        return Ok(id);
    }
    crate::private::create_dir_all(state_dir)?;
    let id = fresh_id(state_dir);
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => {
            f.write_all(format!("{id}\n").as_bytes())?;
            f.sync_all()?;
            Ok(id)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // Another process won the race; it may still be writing.
            for _ in 0..50 {
                if let Some(id) = read_id(&path)? {
                    return Ok(id);
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::io::Error::other(format!(
                "{} exists but holds no workspace id",
                path.display()
            )))
        }
        Err(e) => Err(e),
    }
}

/// The id kept in `state_dir` if one was ever created (reads only; a file that
/// holds no id counts as none).
pub fn existing_workspace_id(state_dir: &Path) -> std::io::Result<Option<String>> {
    read_id(&state_dir.join(WORKSPACE_ID_FILE))
}

fn read_id(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => {
            let id = s.trim();
            Ok(
                (id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()))
                    .then(|| id.to_string()),
            )
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// 16 hex digits from the state dir's path, the process, the time and a stack
/// address: unique per workspace in practice (not a secret).
fn fresh_id(state_dir: &Path) -> String {
    let nanos = crate::clock::Clock::System
        .system_time()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let marker = 0u8;
    let seed = format!(
        "{}:{}:{nanos}:{:p}",
        state_dir.display(),
        std::process::id(),
        &marker
    );
    hex::encode(&Sha256::digest(seed.as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_once_then_stable_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(".claw");
        let a = workspace_id(&state).unwrap();
        let b = workspace_id(&state).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 16);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state.join(WORKSPACE_ID_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(existing_workspace_id(&state).unwrap(), Some(a.clone()));
        let other = tempfile::tempdir().unwrap();
        assert_eq!(existing_workspace_id(other.path()).unwrap(), None);
        assert_ne!(a, workspace_id(other.path()).unwrap());
    }
}
