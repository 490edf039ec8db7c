//! The watcher's liveness: its heartbeat row (written through the store) read
//! back as a [`WatcherStatus`], and clean-up of rows left by dead watchers.
//! Rendering the status for people is the CLI's job.

use crate::store::{Store, StoreError, WatcherRow, now_unix};

/// A heartbeat older than this means the watcher is not alive.
pub const HEARTBEAT_STALE_SECS: i64 = 15;

/// The watcher's liveness as `claw memory status` reports it: its last
/// heartbeat row (`pid`, `started_at`, `heartbeat`, `last_event`, `last_sync`,
/// `pending`, serialised as fields of this object) and what that row means now.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct WatcherStatus {
    /// The heartbeat row as the watcher last wrote it.
    #[serde(flatten)]
    pub row: WatcherRow,
    /// Heartbeat recent (within [`HEARTBEAT_STALE_SECS`]) and the process exists.
    pub alive: bool,
    /// Seconds since the last heartbeat.
    pub heartbeat_age_secs: i64,
}

/// The most recent watcher heartbeat, if any watcher ever registered (a crashed
/// watcher leaves its row behind: it is reported with `alive: false`).
pub fn watcher_status(store: &Store) -> Result<Option<WatcherStatus>, StoreError> {
    Ok(store.latest_watcher()?.map(|row| {
        let age = now_unix() - row.heartbeat;
        WatcherStatus {
            alive: age <= HEARTBEAT_STALE_SECS && pid_alive(row.pid),
            heartbeat_age_secs: age,
            row,
        }
    }))
}

/// Remove heartbeat rows of watchers whose process is gone (and this process's
/// own, left by an earlier watcher with the same pid).
pub(crate) fn clean_dead_rows(store: &Store) -> Result<(), StoreError> {
    for pid in store.watcher_pids()? {
        if !pid_alive(pid) || pid == std::process::id() as i64 {
            store.delete_watcher(pid)?;
        }
    }
    Ok(())
}

/// Whether a process with this pid exists (`kill(pid, 0)`).
#[allow(unsafe_code)] // one FFI call, justified below
pub fn pid_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission check.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(pid: i64, heartbeat: i64, pending: i64) -> WatcherRow {
        WatcherRow {
            pid,
            started_at: heartbeat,
            heartbeat,
            last_event: None,
            last_sync: None,
            pending,
        }
    }

    #[test]
    fn status_reports_dead_and_live_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("m.sqlite")).unwrap();
        assert_eq!(watcher_status(&store).unwrap(), None);
        let now = now_unix();
        let me = std::process::id() as i64;
        store.upsert_watcher(&row(me, now, 3)).unwrap();
        let s = watcher_status(&store).unwrap().unwrap();
        assert!(s.alive);
        assert_eq!(s.row.pending, 3);
        // An old heartbeat is not alive even if the pid exists (the upsert
        // refreshes heartbeat and counters, never started_at).
        store.upsert_watcher(&row(me, now - 60, 3)).unwrap();
        let old = watcher_status(&store).unwrap().unwrap();
        assert!(!old.alive);
        assert_eq!(old.row.started_at, now);
        // A dead pid with a fresh heartbeat is not alive either.
        assert!(store.delete_watcher(me).unwrap());
        assert!(!store.delete_watcher(me).unwrap());
        store
            .upsert_watcher(&row(i32::MAX as i64 - 7, now, 0))
            .unwrap();
        let dead = watcher_status(&store).unwrap().unwrap();
        assert!(!dead.alive);
        // The JSON `claw memory status` prints: the row's fields, then the verdict.
        let json = serde_json::to_string(&dead).unwrap();
        let want = format!(
            r#"{{"pid":{},"started_at":{now},"heartbeat":{now},"last_event":null,"last_sync":null,"pending":0,"alive":false,"heartbeat_age_secs":{}}}"#,
            i32::MAX as i64 - 7,
            dead.heartbeat_age_secs
        );
        assert_eq!(json, want);
        clean_dead_rows(&store).unwrap();
        assert_eq!(watcher_status(&store).unwrap(), None);
        assert!(store.watcher_pids().unwrap().is_empty());
    }
}
