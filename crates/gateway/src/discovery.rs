//! How clients find a running gateway: it writes `gateway.json` (pid, port, bind
//! address, start time, workspace) into the state dir at mode 0600 once it listens,
//! and removes it on exit. A file whose pid is dead (a `kill -9`) is stale and
//! ignored; the next gateway overwrites it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// File name in the state dir.
pub const INFO_FILE: &str = "gateway.json";

/// What `gateway.json` says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GatewayInfo {
    pub pid: u32,
    pub port: u16,
    pub bind: IpAddr,
    pub started: DateTime<Utc>,
    pub workspace: PathBuf,
}

impl GatewayInfo {
    /// The base URL a local client uses (loopback when bound to every address).
    pub fn base_url(&self) -> String {
        let host = if self.bind.is_unspecified() {
            match self.bind {
                IpAddr::V4(_) => "127.0.0.1".to_string(),
                IpAddr::V6(_) => "[::1]".to_string(),
            }
        } else {
            match self.bind {
                IpAddr::V4(a) => a.to_string(),
                IpAddr::V6(a) => format!("[{a}]"),
            }
        };
        format!("http://{host}:{}", self.port)
    }
}

/// Errors writing the file.
#[derive(Debug, thiserror::Error)]
#[error("gateway info file {path}: {source}")]
pub struct DiscoveryError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// Path of the file in `state_dir`.
pub fn info_path(state_dir: &Path) -> PathBuf {
    state_dir.join(INFO_FILE)
}

/// Write the file atomically (temp file + rename), mode 0600.
pub fn write(state_dir: &Path, info: &GatewayInfo) -> Result<(), DiscoveryError> {
    let path = info_path(state_dir);
    let tmp = state_dir.join(format!(".{INFO_FILE}.{}", std::process::id()));
    let err = |source| DiscoveryError {
        path: path.clone(),
        source,
    };
    let body = serde_json::to_vec_pretty(info).map_err(|e| err(std::io::Error::other(e)))?;
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(&body)
        .and_then(|_| f.write_all(b"\n"))
        .and_then(|_| f.sync_all())
        .map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)
}

/// Remove the file if it is ours (`pid`).
pub fn remove(state_dir: &Path, pid: u32) {
    let path = info_path(state_dir);
    if let Some(info) = read_any(state_dir)
        && info.pid != pid
    {
        return;
    }
    let _ = std::fs::remove_file(path);
}

/// The file's content whether or not its process lives.
pub fn read_any(state_dir: &Path) -> Option<GatewayInfo> {
    let text = std::fs::read_to_string(info_path(state_dir)).ok()?;
    serde_json::from_str(&text).ok()
}

/// The running gateway of this state dir: the file exists, parses, and its pid is
/// a live process (stale files are ignored).
pub fn read_live(state_dir: &Path) -> Option<GatewayInfo> {
    read_any(state_dir).filter(|i| pid_alive(i.pid))
}

/// Whether `pid` is a running (not zombie) process, from `/proc`.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // "pid (comm) S ..." — the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn info(pid: u32) -> GatewayInfo {
        GatewayInfo {
            pid,
            port: 4242,
            bind: "127.0.0.1".parse().expect("ip"),
            started: Utc::now(),
            workspace: PathBuf::from("/w"),
        }
    }

    #[test]
    fn written_private_read_back_and_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let me = std::process::id();
        write(dir.path(), &info(me)).expect("write");
        let mode = std::fs::metadata(info_path(dir.path()))
            .expect("file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let got = read_live(dir.path()).expect("live");
        assert_eq!(got.port, 4242);
        assert_eq!(got.base_url(), "http://127.0.0.1:4242");
        remove(dir.path(), me + 1);
        assert!(read_any(dir.path()).is_some(), "someone else's file stays");
        remove(dir.path(), me);
        assert!(read_any(dir.path()).is_none());
    }

    #[test]
    fn dead_pid_is_stale() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        write(dir.path(), &info(pid)).expect("write");
        assert!(read_any(dir.path()).is_some());
        assert!(read_live(dir.path()).is_none());
    }
}
