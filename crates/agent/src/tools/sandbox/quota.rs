//! The total write quota of one sandboxed command (`exec.max_write_mb`): a
//! watcher thread in the parent that kills the command once it has written
//! more than the quota, in any number of files.
//!
//! Two measures, polled every [`POLL`]:
//!
//! 1. **What the command's processes wrote**: the sum of `write_bytes` in
//!    `/proc/<pid>/io` over the command's processes (the pids cgroup's
//!    `cgroup.procs`, or the process tree under the command's first process).
//!    The kernel counts a byte there when the process *dirties* the page-cache
//!    page (or submits an `O_DIRECT` write), not when writeback reaches the
//!    disk, so page-cache lag does not delay the count; and a child's count is
//!    folded into its parent's when the parent waits for it, so a shell loop or
//!    `xargs -P` of short-lived writers is counted whole. The watcher keeps the
//!    highest sum it saw.
//! 2. **A file-system backstop**: the growth of the used space (`statvfs`) of
//!    every file system the command may write (the workspace's and
//!    `exec.write_paths`'). It catches what (1) cannot see — the writes of a
//!    child reaped automatically between two samples (its parent ignores
//!    `SIGCHLD`, so no one folds its count), metadata floods — at
//!    `quota + max(quota, 1 GiB)`, because other processes of the machine
//!    writing to the same file system count here too. (`fallocate`, which
//!    reserves space faster than any poll, is refused by the seccomp filter.)
//!
//! The private `/tmp` is a tmpfs of its own, bounded by `exec.tmp_mb`, and
//! counted by neither.
//!
//! Overshoot: a command may write for one poll interval (10 ms, 2 ms past half
//! the quota) plus the time of one poll and of the kill past the quota — its
//! write rate × a few ms, more when the machine is so loaded that the watcher
//! thread waits for a CPU; measured in `sandbox_exec::the_write_quota_*`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::WriteReport;

/// How often the watcher samples…
const POLL: Duration = Duration::from_millis(10);
/// …and once the command has written half its quota.
const POLL_NEAR: Duration = Duration::from_millis(2);
/// Least slack of the file-system backstop above the quota.
const BACKSTOP_SLACK: u64 = 1 << 30;

/// What the watcher needs, prepared with the sandbox.
pub(super) struct QuotaPlan {
    pub max_write_bytes: u64,
    /// `cgroup.procs` of the command's pids cgroup, if it has one.
    pub cgroup_procs: Option<PathBuf>,
    /// One path on each file system the command may write.
    pub roots: Vec<PathBuf>,
}

/// A running watcher; [`WriteWatch::finish`] stops it and reports.
pub(super) struct WriteWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<WriteReport>>,
}

impl WriteWatch {
    /// Starts watching the command whose first process (and process group
    /// leader) is `pid`.
    pub(super) fn start(plan: &QuotaPlan, pid: u32) -> WriteWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let quota = plan.max_write_bytes;
        let backstop = quota.saturating_add(quota.max(BACKSTOP_SLACK));
        let procs = plan.cgroup_procs.clone();
        let roots: Vec<(CString, u64)> = plan
            .roots
            .iter()
            .filter_map(|r| {
                let c = CString::new(r.as_os_str().as_bytes()).ok()?;
                let used = used_bytes(&c)?;
                Some((c, used))
            })
            .collect();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("exec-write-quota".into())
            .spawn(move || {
                let mut report = WriteReport {
                    quota,
                    ..WriteReport::default()
                };
                loop {
                    let done = flag.load(Ordering::SeqCst);
                    let pids = match &procs {
                        Some(p) => cgroup_pids(p),
                        None => tree_pids(pid),
                    };
                    let written: u64 = pids.iter().map(|p| write_bytes(*p)).sum();
                    report.written = report.written.max(written);
                    for (root, start) in &roots {
                        if let Some(now) = used_bytes(root) {
                            report.fs_growth = report.fs_growth.max(now.saturating_sub(*start));
                        }
                    }
                    if report.written > quota || report.fs_growth > backstop {
                        report.exceeded = true;
                        // After the command ended (the last sample) there is
                        // nothing left to stop; leftovers die with the group.
                        report.killed = !done;
                        kill_all(pid, &pids, procs.as_deref());
                        return report;
                    }
                    if done {
                        return report;
                    }
                    std::thread::sleep(if report.written > quota / 2 {
                        POLL_NEAR
                    } else {
                        POLL
                    });
                }
            })
            .ok();
        if thread.is_none() {
            tracing::warn!("exec sandbox: could not start the write-quota watcher");
        }
        WriteWatch { stop, thread }
    }

    /// Stops the watcher after one last sample; blocking (at most one poll).
    pub(super) fn finish(mut self) -> WriteReport {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for WriteWatch {
    fn drop(&mut self) {
        // Cancelled: the thread ends at its next poll.
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Used bytes of the file system holding `path`.
fn used_bytes(path: &CString) -> Option<u64> {
    // SAFETY: statvfs into a zeroed local struct; the path is NUL-terminated.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_blocks.saturating_sub(s.f_bfree) as u64).saturating_mul(s.f_frsize as u64))
}

fn cgroup_pids(procs: &Path) -> Vec<u32> {
    std::fs::read_to_string(procs)
        .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// `pid` and its descendants, parents first (a child reaped between the reads
/// is then missed for one sample rather than counted twice).
fn tree_pids(pid: u32) -> Vec<u32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 65_536 {
        let p = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            if let Ok(children) = std::fs::read_to_string(t.path().join("children")) {
                out.extend(
                    children
                        .split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
    }
    out
}

/// `write_bytes` of a process (its threads, its dead threads and the children
/// it has waited for); 0 when unreadable or gone.
fn write_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/io"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn kill_all(group: u32, pids: &[u32], cgroup_procs: Option<&Path>) {
    if let Some(kill) = cgroup_procs
        .and_then(Path::parent)
        .map(|d| d.join("cgroup.kill"))
        .filter(|k| k.exists())
    {
        let _ = std::fs::write(kill, "1");
    }
    // SAFETY: kill/killpg have no memory-safety preconditions; the pids are the
    // command's (from its cgroup or its process tree, read just now).
    unsafe {
        if let Ok(g) = i32::try_from(group) {
            libc::killpg(g, libc::SIGKILL);
        }
        for p in pids {
            if let Ok(p) = i32::try_from(*p) {
                libc::kill(p, libc::SIGKILL);
            }
        }
    }
}
