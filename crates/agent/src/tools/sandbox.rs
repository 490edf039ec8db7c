//! The exec sandbox: confines every command the `exec` tool runs, so that a
//! command the deny list lets through (`eval rm -rf /`, `$(echo rm) -rf /`, a
//! fork bomb, `curl` to a local service …) still cannot hurt the machine.
//!
//! Layers, applied in the child between `fork` and `exec` (Linux only):
//!
//! 1. **pids cgroup** (when one is writable: root, or a delegated cgroup v2
//!    subtree) — the command and everything it starts join a fresh cgroup with
//!    `pids.max`; after the command it is emptied (SIGKILL) and removed, so
//!    processes that left the process group (`setsid`) die too.
//! 2. **User + mount + network namespaces** — the command loses every
//!    capability in the initial namespace (root included); with `exec.network`
//!    off (the default) it sees only a loopback interface that is down. In the
//!    mount namespace it gets a new root (a tmpfs, entered with `pivot_root`)
//!    holding only read-only binds of `/usr`, `/bin`, `/sbin`, `/lib*`, `/opt`,
//!    `/etc`, `/proc`, `/sys/devices/system/cpu`, `/dev/{null,zero,full,random,
//!    urandom}`, a fresh private `/tmp` (`TMPDIR=/tmp`) and read-write binds of
//!    the workspace and `exec.write_paths`. Everything else — home
//!    directories, `/run`, other users' files and the UNIX sockets of local
//!    daemons in them (Landlock below ABI 9 does not restrict `connect` to a
//!    socket file) — does not exist for the command, and what exists but is
//!    read-only cannot have its metadata changed either (`chmod`, `chown`,
//!    `utime`, xattrs: Landlock does not cover those).
//! 3. **Landlock** (best ABI the kernel has; ABI 7 here) — the same rules
//!    again, by inode, and the only layer when there are no namespaces: writes
//!    only inside the workspace, the private temp dir and `exec.write_paths`;
//!    reads and executes only the workspace, `/usr`, `/bin`, `/sbin`, `/lib*`,
//!    `/opt`, `/etc` minus its credential stores (`shadow`, `sudoers`, ssh host
//!    keys, TLS private keys …), `/proc`, a few `/dev` files and
//!    `exec.read_paths`;
//!    TCP bind/connect denied when the network is off (ABI ≥ 4); no signals to
//!    and no abstract-socket connections with processes outside the sandbox
//!    (ABI ≥ 6). Landlock also forbids mounting, so the namespace's
//!    capabilities cannot undo layer 2.
//! 4. **rlimits, capabilities, `no_new_privs`** — `RLIMIT_NPROC` (set after
//!    the user namespace exists, so it counts only the sandbox's processes; the
//!    kernel ignores it for root, hence layer 1), `RLIMIT_FSIZE`, `RLIMIT_CPU`,
//!    `RLIMIT_CORE` 0; every capability dropped (bounding, ambient, effective,
//!    permitted, inheritable sets), so even a root command without namespaces
//!    cannot `reboot(2)`, load modules or reconfigure the network.
//! 5. **seccomp** — `socket(AF_UNIX, …)` fails (`EACCES`): a Unix socket file in
//!    the workspace cannot lead to its host listener (the mount namespace hides
//!    every other socket file; Landlock scopes abstract ones); `io_uring_setup`
//!    and other system call ABIs (x32, 32-bit) fail with `ENOSYS`; `fallocate`
//!    fails with `EOPNOTSUPP`.
//! 6. **PID namespace** (with the mount namespace) — the command runs as pid 1
//!    of a new PID namespace (a proxy process stays outside, see
//!    `child::enter_pid_namespace`) with a fresh read-only `/proc`: it sees
//!    only its own processes, not the command lines of the host's
//!    (`--db-password=…`), and when its shell ends the kernel ends every
//!    process left in it. The shell being pid 1, it ignores signals sent from
//!    inside the namespace unless it handles them (`kill $$`); the timeout,
//!    the cgroup and the quota kill from outside, which works as before. (No
//!    init of claw's own is forked in there: it would be a copy of claw's
//!    memory and environment, readable through `/proc/1`.) Without namespaces host processes are visible, and
//!    the status and exec's first outcome say so.
//! 7. **total write quota** (`exec.max_write_mb`) — a watcher in the parent
//!    kills the command once its processes have written more than the quota
//!    over all files (see `quota`); `fallocate` is refused by the seccomp
//!    filter so that space cannot be reserved faster than the watcher polls.
//! 8. **hidden paths** — claw's state directory and config file
//!    ([`SandboxPolicy::hidden`]) are covered in the new root (an empty tmpfs, or
//!    `/dev/null` for a file) where they lie inside the workspace or a configured
//!    path, so a command can neither read the gateway token nor plant a source.
//!
//! Design choice — fork/exec: the Landlock ruleset, every path, every mount
//! target and every byte the child writes are prepared in the parent
//! ([`prepare`]); the `pre_exec` hook of the child (a copy of a multi-threaded
//! process, where only async-signal-safe calls are allowed) performs raw system
//! calls only (`open`/`write`/`close`, `unshare`, `mount`, `mkdir`, `chdir`,
//! `setrlimit`, `prctl`, `landlock_*`): no allocation, no locks, no
//! formatting. Each step records its number in a shared anonymous page, so a
//! failure is reported with the step that failed. The hook fails closed: any
//! required step failing makes the spawn fail and the command does not run.
//!
//! Where Landlock is unavailable (old kernel, Landlock not enabled, not Linux)
//! [`SandboxStatus::active`] is false; `exec` then runs commands unconfined,
//! says so once (an outcome notice, and [`SandboxStatus::warning`] for the
//! caller) and the registry asks for confirmation before each command.
//!
//! [`probe`] reports which protections this machine offers (`claw doctor`).
//! [`isolate_processes`] lends the PID namespace alone to commands that are
//! otherwise unconfined (hooks).

#[cfg(target_os = "linux")]
mod child;
#[cfg(target_os = "linux")]
mod quota;
#[cfg(target_os = "linux")]
mod sys;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Default limit on the processes (and threads) of one command.
pub const DEFAULT_MAX_PROCESSES: u64 = 512;
/// Default limit on the size of a file a command writes.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 30;
/// Default CPU-time limit of one process of a command.
pub const DEFAULT_MAX_CPU_SECS: u64 = 600;
/// Default limit on one process's address space (`RLIMIT_AS`): a runaway
/// allocation fails inside the command instead of pushing the machine into swap
/// or the OOM killer. Generous, because runtimes reserve address space they never
/// touch (V8's pointer cage, Go's arenas).
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 8 << 30;
/// Default size of the private `/tmp`.
pub const DEFAULT_TMP_BYTES: u64 = 1 << 30;
/// Default total write quota of one command, over all its files.
pub const DEFAULT_MAX_WRITE_BYTES: u64 = 1 << 30;

/// How `exec` commands are confined. Built from the `exec` config section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// Confine commands (`exec.sandbox`, default true).
    pub enabled: bool,
    /// Allow network access (`exec.network`, default false).
    pub network: bool,
    /// Use the user, mount and network namespaces where the machine has them
    /// (default true). False leaves Landlock, the rlimits, the pids cgroup and
    /// the dropped capabilities (diagnostics, and the tests that measure the
    /// Landlock layer alone).
    pub namespaces: bool,
    /// Processes and threads of one command (`exec.max_processes`).
    pub max_processes: u64,
    /// Largest file a command may write, bytes (`exec.max_file_mb`).
    pub max_file_bytes: u64,
    /// Bytes one command may write in total, over all its files and processes
    /// (`exec.max_write_mb`; 0 = unlimited); see the `quota` module.
    pub max_write_bytes: u64,
    /// CPU seconds per process (`exec.max_cpu_secs`).
    pub max_cpu_secs: u64,
    /// Address space per process, bytes (`exec.max_memory_mb`; 0 = unlimited).
    pub max_memory_bytes: u64,
    /// Size of the private `/tmp`, bytes (`exec.tmp_mb`).
    pub tmp_bytes: u64,
    /// Extra directories commands may read and execute (`exec.read_paths`).
    pub read_paths: Vec<PathBuf>,
    /// Extra directories commands may write (`exec.write_paths`).
    pub write_paths: Vec<PathBuf>,
    /// Environment variables passed to commands beyond the harmless base set
    /// (`exec.env`). Applies with or without the sandbox: claw's own
    /// environment (API keys, tokens) never reaches a command unless named here.
    pub pass_env: Vec<String>,
    /// Where the private temp directory is created when there is no mount
    /// namespace (then `TMPDIR` points into it).
    pub tmp_root: PathBuf,
    /// Paths that do not exist for a command even where they lie inside the
    /// workspace or a `read_paths`/`write_paths` entry: claw's state directory
    /// and config file (an empty read-only tmpfs, or `/dev/null` for a file, is
    /// mounted over them in the sandbox's mount namespace).
    pub hidden: Vec<PathBuf>,
}

impl SandboxPolicy {
    /// Whether commands cannot reach the [`SandboxPolicy::hidden`] paths here:
    /// the sandbox's mount namespace covers them, or none of them lies inside
    /// the workspace or a configured path (Landlock alone cannot take a path
    /// out of a directory it grants). When this is false, `exec` asks for
    /// confirmation: a command could otherwise write claw's state.
    pub fn hides_protected_paths(&self, workspace: &Path) -> bool {
        let st = status();
        if self.namespaces && st.user_namespace && st.mount_namespace {
            return true;
        }
        let canonical = |p: &Path| p.canonicalize().ok();
        let reach: Vec<PathBuf> = std::iter::once(workspace)
            .chain(self.write_paths.iter().map(PathBuf::as_path))
            .chain(self.read_paths.iter().map(PathBuf::as_path))
            .filter_map(canonical)
            .collect();
        !self
            .hidden
            .iter()
            .filter_map(|h| canonical(h))
            .any(|h| reach.iter().any(|r| h.starts_with(r)))
    }
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        SandboxPolicy {
            enabled: true,
            network: false,
            namespaces: true,
            max_processes: DEFAULT_MAX_PROCESSES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            max_write_bytes: DEFAULT_MAX_WRITE_BYTES,
            max_cpu_secs: DEFAULT_MAX_CPU_SECS,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            tmp_bytes: DEFAULT_TMP_BYTES,
            read_paths: Vec::new(),
            write_paths: Vec::new(),
            pass_env: Vec::new(),
            tmp_root: PathBuf::from("/tmp"),
            hidden: Vec::new(),
        }
    }
}

/// Errors preparing or entering the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("the exec sandbox is not available: {0}")]
    Unavailable(String),
    #[error("cannot sandbox the workspace {path}: {message}")]
    Workspace { path: PathBuf, message: String },
    #[error("invalid sandbox path {path}: {message}")]
    Path { path: PathBuf, message: String },
    #[error("Landlock ruleset: {0}")]
    Landlock(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the sandbox could not be set up ({step}): {source}; the command did not run")]
    Setup {
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Whether and how Landlock is available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandlockSupport {
    /// Supported, with this ABI version.
    Available { abi: u32 },
    /// Built into the kernel but not enabled at boot (`lsm=`).
    NotEnabled,
    /// Not built into the kernel.
    NotImplemented,
    /// Not Linux.
    Unsupported,
}

/// What keeps a fork bomb from exhausting the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessLimit {
    /// A fresh cgroup with `pids.max` under this directory (v1 or v2).
    PidsCgroup { base: PathBuf, version: u8 },
    /// `RLIMIT_NPROC` (per sandbox when `per_sandbox`, i.e. in a user namespace).
    Rlimit { per_sandbox: bool },
    /// Nothing: running as root (which `RLIMIT_NPROC` ignores) without a writable pids cgroup.
    None,
}

/// Which protections this machine offers the exec sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    pub landlock: LandlockSupport,
    /// Unprivileged user namespaces work (all capabilities dropped in the initial namespace).
    pub user_namespace: bool,
    /// A network namespace can be created in the user namespace.
    pub network_namespace: bool,
    /// A mount namespace can be created and `/` remounted read-only in it.
    pub mount_namespace: bool,
    /// A PID namespace can be created in the user namespace, and its pid 1 can
    /// mount a fresh proc: a command sees only its own processes.
    pub pid_namespace: bool,
    pub process_limit: ProcessLimit,
    /// The process runs as root (uid 0).
    pub root: bool,
}

impl SandboxStatus {
    /// Commands are confined (Landlock works). Without it `exec` falls back to
    /// asking for confirmation.
    pub fn active(&self) -> bool {
        matches!(self.landlock, LandlockSupport::Available { .. })
    }

    /// The Landlock ABI, if available.
    pub fn landlock_abi(&self) -> Option<u32> {
        match self.landlock {
            LandlockSupport::Available { abi } => Some(abi),
            _ => None,
        }
    }

    /// A fork bomb is stopped by a process limit.
    pub fn limits_processes(&self) -> bool {
        !matches!(self.process_limit, ProcessLimit::None)
    }

    /// Commands get their own PID namespace and `/proc` (with the namespaces
    /// on): otherwise they see every process of the machine, command lines included.
    pub fn hides_host_processes(&self) -> bool {
        self.user_namespace && self.mount_namespace && self.pid_namespace
    }

    /// The network can be cut off (network namespace, or Landlock TCP rules).
    pub fn isolates_network(&self) -> bool {
        (self.user_namespace && self.network_namespace) || self.landlock_abi().unwrap_or(0) >= 4
    }

    /// What the user should be told once when commands are not confined.
    pub fn warning(&self) -> Option<String> {
        if self.active() {
            return None;
        }
        let why = match self.landlock {
            LandlockSupport::NotEnabled => {
                "Landlock is not enabled in this kernel (boot with lsm=…,landlock)"
            }
            LandlockSupport::NotImplemented => {
                "this kernel has no Landlock (Linux 5.13 or later is needed)"
            }
            LandlockSupport::Unsupported => "the exec sandbox needs Linux",
            LandlockSupport::Available { .. } => return None,
        };
        Some(format!(
            "exec is not sandboxed: {why}; every command needs your confirmation"
        ))
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl fmt::Display for SandboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.landlock {
            LandlockSupport::Available { abi } => {
                writeln!(f, "exec sandbox: active")?;
                let mut extra = Vec::new();
                if abi >= 4 {
                    extra.push("TCP bind/connect");
                }
                if abi >= 6 {
                    extra.push("signal and abstract-socket scoping");
                }
                write!(f, "  landlock: ABI {abi} (file system")?;
                for e in extra {
                    write!(f, ", {e}")?;
                }
                writeln!(f, ")")?;
            }
            _ => {
                writeln!(
                    f,
                    "exec sandbox: NOT active — {}",
                    self.warning().unwrap_or_default()
                )?;
                let state = match self.landlock {
                    LandlockSupport::NotEnabled => "not enabled",
                    LandlockSupport::NotImplemented => "not in this kernel",
                    _ => "unsupported on this OS",
                };
                writeln!(f, "  landlock: {state}")?;
            }
        }
        writeln!(
            f,
            "  namespaces: user {}, network {}, mount {}, pid {}",
            yes_no(self.user_namespace),
            yes_no(self.user_namespace && self.network_namespace),
            yes_no(self.user_namespace && self.mount_namespace),
            yes_no(self.hides_host_processes())
        )?;
        writeln!(
            f,
            "  processes visible: {}",
            if self.hides_host_processes() {
                "only the command's own (PID namespace with its own /proc)"
            } else {
                "ALL of the host's, command lines included (no PID namespace)"
            }
        )?;
        if self.user_namespace && self.mount_namespace {
            writeln!(
                f,
                "  mounts: new root with read-only system directories, the workspace and a private /tmp"
            )?;
        }
        writeln!(
            f,
            "  network off by default: {}",
            match (
                self.user_namespace && self.network_namespace,
                self.landlock_abi().unwrap_or(0) >= 4
            ) {
                (true, true) => "network namespace + Landlock TCP rules",
                (true, false) => "network namespace",
                (false, true) => "Landlock TCP rules (UDP not covered)",
                (false, false) => "NOT isolated",
            }
        )?;
        let procs = match &self.process_limit {
            ProcessLimit::PidsCgroup { base, version } => {
                format!("pids cgroup v{version} under {}", base.display())
            }
            ProcessLimit::Rlimit { per_sandbox: true } => "RLIMIT_NPROC (per sandbox)".into(),
            ProcessLimit::Rlimit { per_sandbox: false } => {
                "RLIMIT_NPROC (shared with your other processes)".into()
            }
            ProcessLimit::None => {
                "NOT limited (root ignores RLIMIT_NPROC and no pids cgroup is writable)".into()
            }
        };
        writeln!(f, "  processes: {procs}")?;
        write!(
            f,
            "  rlimits: NPROC{}, FSIZE, CPU, AS (memory); no_new_privs{}",
            if self.root { " (ignored for root)" } else { "" },
            if self.root { "; running as root" } else { "" }
        )
    }
}

/// Probes this machine now (forks a short-lived child to try the namespaces).
pub fn probe() -> SandboxStatus {
    #[cfg(target_os = "linux")]
    {
        sys::probe()
    }
    #[cfg(not(target_os = "linux"))]
    {
        SandboxStatus {
            landlock: LandlockSupport::Unsupported,
            user_namespace: false,
            network_namespace: false,
            mount_namespace: false,
            pid_namespace: false,
            process_limit: ProcessLimit::None,
            root: false,
        }
    }
}

/// [`probe`], once per process.
pub fn status() -> &'static SandboxStatus {
    static STATUS: OnceLock<SandboxStatus> = OnceLock::new();
    STATUS.get_or_init(probe)
}

/// What the write-quota watcher saw of one command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// The quota, bytes.
    pub quota: u64,
    /// Bytes the command's processes wrote (dirtied in the page cache or sent
    /// with `O_DIRECT`), the highest sum seen.
    pub written: u64,
    /// The largest growth of the used space of a file system it may write.
    pub fs_growth: u64,
    /// Over the quota.
    pub exceeded: bool,
    /// …noticed while the command ran: it was killed (otherwise the last
    /// sample, after it ended, found it over).
    pub killed: bool,
}

impl WriteReport {
    /// The line for the user and the model when the command was killed.
    pub fn message(&self) -> Option<String> {
        const MIB: f64 = 1024.0 * 1024.0;
        self.exceeded.then(|| {
            format!(
                "{}: over the write quota of {:.0} MiB per command (exec.max_write_mb): \
                 {:.0} MiB written by its processes, the file system {:.0} MiB fuller",
                if self.killed { "killed" } else { "ended" },
                self.quota as f64 / MIB,
                self.written as f64 / MIB,
                self.fs_growth as f64 / MIB
            )
        })
    }
}

/// The write-quota watcher of one running command.
pub struct WriteWatch {
    #[cfg(target_os = "linux")]
    inner: quota::WriteWatch,
}

impl WriteWatch {
    /// Stops watching and reports (blocking, at most one poll: ~10 ms).
    pub fn finish(self) -> WriteReport {
        #[cfg(target_os = "linux")]
        {
            self.inner.finish()
        }
        #[cfg(not(target_os = "linux"))]
        {
            WriteReport::default()
        }
    }
}

/// Gives `cmd` (a hook: a command that is otherwise not confined) a process
/// view of its own: a new PID namespace with a fresh `/proc` in a private mount
/// namespace. It then sees only its own processes — not claw's
/// `/proc/<pid>/environ` (whose initial block still holds every secret claw was
/// started with: `unsetenv` does not change it) nor any other process of the
/// machine — and keeps the file system, the network and its environment.
/// Not root: a user namespace mapping only the user's own uid and gid (files
/// of other users show as `nobody`; permissions are unchanged) and no
/// capabilities; root: no user namespace, capabilities kept, the host's
/// `/proc` detached beneath the fresh one.
///
/// Returns false, changing nothing, where this machine has no PID namespaces
/// ([`SandboxStatus::hides_host_processes`]).
pub fn isolate_processes(cmd: &mut tokio::process::Command) -> bool {
    #[cfg(target_os = "linux")]
    {
        if !status().hides_host_processes() {
            return false;
        }
        let view = sys::proc_view();
        // SAFETY: `apply` only makes async-signal-safe system calls on data
        // prepared before the fork (see `child`).
        unsafe {
            cmd.pre_exec(move || view.apply());
        }
        true
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cmd;
        false
    }
}

/// A sandbox prepared for one command: apply it to the command with
/// [`Prepared::configure`], then call [`Prepared::finish`] when it has ended.
pub struct Prepared {
    #[cfg(target_os = "linux")]
    inner: sys::PreparedLinux,
}

impl Prepared {
    /// Sets `TMPDIR` and installs the `pre_exec` hook that enters the sandbox.
    pub fn configure(&self, cmd: &mut tokio::process::Command) {
        #[cfg(target_os = "linux")]
        self.inner.configure(cmd);
        #[cfg(not(target_os = "linux"))]
        let _ = cmd;
    }

    /// Turns a spawn error into the sandbox step that failed, if one did.
    pub fn spawn_error(&self, error: std::io::Error) -> Result<std::io::Error, SandboxError> {
        #[cfg(target_os = "linux")]
        {
            self.inner.spawn_error(error)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Ok(error)
        }
    }

    /// The private temp directory the command sees as `TMPDIR`.
    pub fn tmpdir(&self) -> &Path {
        #[cfg(target_os = "linux")]
        {
            self.inner.tmpdir()
        }
        #[cfg(not(target_os = "linux"))]
        {
            Path::new("/tmp")
        }
    }

    /// Starts the write-quota watcher for the spawned command (its first
    /// process `pid`); `None` when the quota is off.
    pub fn watch_writes(&self, pid: u32) -> Option<WriteWatch> {
        #[cfg(target_os = "linux")]
        {
            self.inner
                .watch_writes(pid)
                .map(|inner| WriteWatch { inner })
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = pid;
            None
        }
    }

    /// Kills whatever is left in the command's cgroup and removes it, and
    /// removes the private temp directory. Blocking (a few milliseconds).
    pub fn finish(self) {
        #[cfg(target_os = "linux")]
        self.inner.finish();
    }
}

/// Prepares the sandbox for one command run in `workspace` (blocking: reads
/// `/proc/self/mountinfo`, opens the rule paths, creates the cgroup).
pub fn prepare(
    policy: &SandboxPolicy,
    workspace: &Path,
    status: &SandboxStatus,
) -> Result<Prepared, SandboxError> {
    #[cfg(target_os = "linux")]
    {
        Ok(Prepared {
            inner: sys::prepare(policy, workspace, status)?,
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (policy, workspace, status);
        Err(SandboxError::Unavailable("not Linux".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_display_names_every_layer() {
        let s = SandboxStatus {
            landlock: LandlockSupport::Available { abi: 7 },
            user_namespace: true,
            network_namespace: true,
            mount_namespace: true,
            pid_namespace: true,
            process_limit: ProcessLimit::PidsCgroup {
                base: PathBuf::from("/sys/fs/cgroup/pids"),
                version: 1,
            },
            root: true,
        };
        let text = s.to_string();
        for needle in [
            "exec sandbox: active",
            "ABI 7",
            "TCP bind/connect",
            "user yes, network yes, mount yes, pid yes",
            "processes visible: only the command's own",
            "pids cgroup v1",
            "FSIZE, CPU",
        ] {
            assert!(text.contains(needle), "{needle} missing from:\n{text}");
        }
        assert!(s.active());
        assert!(s.warning().is_none());
        assert!(s.isolates_network());
    }

    #[test]
    fn without_landlock_the_status_warns() {
        let s = SandboxStatus {
            landlock: LandlockSupport::NotEnabled,
            user_namespace: false,
            network_namespace: false,
            mount_namespace: false,
            pid_namespace: false,
            process_limit: ProcessLimit::None,
            root: true,
        };
        assert!(!s.active());
        let w = s.warning().unwrap();
        assert!(
            w.contains("not sandboxed") && w.contains("confirmation"),
            "{w}"
        );
        let text = s.to_string();
        assert!(text.contains("NOT active"), "{text}");
        assert!(text.contains("processes: NOT limited"), "{text}");
        assert!(
            text.contains("network off by default: NOT isolated"),
            "{text}"
        );
        assert!(
            text.contains("processes visible: ALL of the host's"),
            "{text}"
        );
        assert!(!s.isolates_network());
    }
}
