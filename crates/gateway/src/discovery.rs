//! How clients find a running gateway: it writes `gateway.json` (pid, port, bind
//! address, start time, workspace) into the state dir at mode 0600 once it listens,
//! and removes it on exit. A file whose pid is dead (a `kill -9`) is stale and
//! ignored; the next gateway overwrites it.
//!
//! Clients send the user's messages and the bearer token to what the file names,
//! so it is checked where it is used ([`verify`]), not only trusted for where it
//! lies (the state dir, outside the workspace): the address must be loopback, and
//! the pid a live process of this user whose executable is claw.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
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
    let err = |source| DiscoveryError {
        path: path.clone(),
        source,
    };
    let mut body = serde_json::to_vec_pretty(info).map_err(|e| err(std::io::Error::other(e)))?;
    body.push(b'\n');
    claw_base::fs::write_atomic(&path, &body, claw_base::fs::Durability::Durable).map_err(err)
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

/// The running gateway of this state dir: the file exists, parses, and passes
/// [`verify`] (stale or foreign files are ignored).
pub fn read_live(state_dir: &Path) -> Option<GatewayInfo> {
    read_any(state_dir).filter(|i| verify(i).is_ok())
}

/// Why a discovery file is not to be used: the address is not loopback, the pid is
/// dead, owned by another user, or not a claw executable.
pub fn verify(info: &GatewayInfo) -> Result<(), String> {
    if !(info.bind.is_loopback() || info.bind.is_unspecified()) {
        return Err(format!(
            "the gateway address {} is not a loopback address",
            info.bind
        ));
    }
    if info.pid <= 1 || !pid_alive(info.pid) {
        return Err(format!("pid {} is not a running gateway", info.pid));
    }
    let proc_dir = PathBuf::from(format!("/proc/{}", info.pid));
    let owner = std::fs::metadata(&proc_dir)
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .map_err(|e| format!("pid {}: {e}", info.pid))?;
    // The kernel gives `/proc/self` this process's effective uid.
    let me = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .map_err(|e| format!("/proc/self: {e}"))?;
    if owner != me {
        return Err(format!(
            "pid {} belongs to uid {owner}, not to this user (uid {me})",
            info.pid
        ));
    }
    let exe = std::fs::read_link(proc_dir.join("exe"))
        .map_err(|e| format!("pid {}: cannot read its executable: {e}", info.pid))?;
    if !is_claw_executable(&exe) {
        return Err(format!("pid {} runs {}, not claw", info.pid, exe.display()));
    }
    Ok(())
}

/// Whether `exe` (a `/proc/<pid>/exe` target) is a claw binary: this process's own
/// executable, or a file named `claw` (a rebuilt binary reads `claw (deleted)`).
pub fn is_claw_executable(exe: &Path) -> bool {
    if std::env::current_exe().is_ok_and(|me| me == exe) {
        return true;
    }
    exe.file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.strip_suffix(" (deleted)").unwrap_or(n))
        .is_some_and(|n| n == "claw")
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
        assert_eq!(claw_testkit::file_mode(&info_path(dir.path())), 0o600);
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

    #[test]
    fn a_planted_file_is_refused_and_a_real_one_accepted() {
        // This test process stands for the gateway (its own executable counts).
        let me = std::process::id();
        assert_eq!(verify(&info(me)), Ok(()), "positive control");
        // Pid 1 (init, another executable), a non-loopback address, a dead pid.
        let e = verify(&info(1)).unwrap_err();
        assert!(e.contains("pid 1"), "{e}");
        let mut far = info(me);
        far.bind = "192.0.2.7".parse().expect("ip");
        assert!(verify(&far).unwrap_err().contains("not a loopback"));
        // A live process of this user that is not claw.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn");
        let e = verify(&info(sleeper.id())).unwrap_err();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        assert!(e.contains("not claw"), "{e}");
        assert!(is_claw_executable(Path::new(
            "/usr/local/bin/claw (deleted)"
        )));
        assert!(!is_claw_executable(Path::new("/usr/bin/python3")));
    }
}
