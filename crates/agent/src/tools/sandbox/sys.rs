//! Linux side of the exec sandbox, in the parent: probing the kernel, reading
//! `/proc/self/mountinfo`, the per-command pids cgroup, the Landlock ruleset and
//! the [`ChildPlan`] the child applies.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::child::{
    ChildPlan, IdMaps, LandlockPlan, MountPlan, ProcView, RootEntry, STEP_DONE, STEP_NAMES,
    StepMarker,
};
use super::quota::{QuotaPlan, WriteWatch};
use super::{LandlockSupport, ProcessLimit, SandboxError, SandboxPolicy, SandboxStatus};

/// Read and execute: programs and their libraries.
const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];
/// Read only.
const READ_ONLY: &[&str] = &["/proc", "/sys/devices/system/cpu"];
/// Read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];
/// Entries of `/etc` commands may not read: credentials and private keys.
const ETC_DENY: &[&str] = &[
    "shadow",
    "shadow-",
    "gshadow",
    "gshadow-",
    "sudoers",
    "sudoers.d",
    "security",
    "credstore",
    "credstore.encrypted",
    "wireguard",
    "NetworkManager",
    "ipsec.secrets",
    "ipsec.d",
    "ppp",
    "krb5.keytab",
    "libvirt",
    "docker",
    "openvpn",
    "letsencrypt",
    "cups",
    "sssd",
    ".pwd.lock",
    "master.passwd",
];
/// Entries of `/etc/ssh` commands may read (not the host keys).
const ETC_SSH_ALLOW: &[&str] = &["ssh_config", "ssh_config.d", "ssh_known_hosts"];

// ---------------------------------------------------------------------------
// Probing

pub(super) fn landlock_support() -> LandlockSupport {
    // SAFETY: landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32,
        )
    };
    if v > 0 {
        return LandlockSupport::Available { abi: v as u32 };
    }
    match io::Error::last_os_error().raw_os_error() {
        Some(libc::EOPNOTSUPP) => LandlockSupport::NotEnabled,
        _ => LandlockSupport::NotImplemented,
    }
}

fn id_maps() -> IdMaps {
    // SAFETY: getters without preconditions.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    IdMaps {
        uid_map: format!("{uid} {uid} 1\n").into_bytes(),
        gid_map: format!("{gid} {gid} 1\n").into_bytes(),
    }
}

/// What [`probe_namespaces`] found.
struct Namespaces {
    user: bool,
    network: bool,
    mount: bool,
    pid: bool,
}

/// The [`ProcView`] of a command run as this process's user.
pub(super) fn proc_view() -> ProcView {
    // SAFETY: getter without preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    ProcView {
        id_maps: (!root).then(id_maps),
    }
}

/// Forks a child that tries the namespaces (a PID namespace whose pid 1 mounts
/// a fresh proc, and a `pivot_root` into a tmpfs holding a read-only `/usr`).
fn probe_namespaces(usr_flags: libc::c_ulong) -> Namespaces {
    let maps = id_maps();
    // SAFETY: the child only makes raw system calls on data prepared above and
    // leaves with _exit; the parent waits for it.
    let pid = unsafe { libc::fork() };
    let none = Namespaces {
        user: false,
        network: false,
        mount: false,
        pid: false,
    };
    if pid < 0 {
        return none;
    }
    if pid == 0 {
        let mut bits = 0;
        // SAFETY: raw system calls only (see above).
        unsafe {
            if libc::unshare(libc::CLONE_NEWUSER) == 0
                && super::child::write_file(c"/proc/self/setgroups", b"deny").is_ok()
                && super::child::write_file(c"/proc/self/uid_map", &maps.uid_map).is_ok()
                && super::child::write_file(c"/proc/self/gid_map", &maps.gid_map).is_ok()
            {
                bits |= 1;
                if libc::unshare(libc::CLONE_NEWNET) == 0 {
                    bits |= 2;
                }
                let staged = libc::unshare(libc::CLONE_NEWNS) == 0
                    && libc::mount(
                        std::ptr::null(),
                        c"/".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REC | libc::MS_PRIVATE,
                        std::ptr::null(),
                    ) == 0
                    && libc::mount(
                        c"tmpfs".as_ptr(),
                        c"/tmp".as_ptr(),
                        c"tmpfs".as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        c"size=64k".as_ptr() as *const libc::c_void,
                    ) == 0
                    && libc::mkdir(c"/tmp/usr".as_ptr(), 0o755) == 0
                    && libc::mount(
                        c"/usr".as_ptr(),
                        c"/tmp/usr".as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) == 0
                    && libc::mount(
                        std::ptr::null(),
                        c"/tmp/usr".as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | usr_flags,
                        std::ptr::null(),
                    ) == 0;
                if staged {
                    // A fresh proc, mounted by pid 1 of a new PID namespace
                    // while the host's /proc is still visible (as the sandbox does).
                    if libc::unshare(libc::CLONE_NEWPID) == 0 {
                        let init = libc::fork();
                        if init == 0 {
                            let ok = libc::mkdir(c"/tmp/proc".as_ptr(), 0o755) == 0
                                && libc::mount(
                                    c"proc".as_ptr(),
                                    c"/tmp/proc".as_ptr(),
                                    c"proc".as_ptr(),
                                    libc::MS_NOSUID
                                        | libc::MS_NODEV
                                        | libc::MS_NOEXEC
                                        | libc::MS_RDONLY,
                                    std::ptr::null(),
                                ) == 0
                                && libc::getpid() == 1;
                            libc::_exit(if ok { 0 } else { 1 });
                        }
                        let mut st = 0;
                        if init > 0
                            && libc::waitpid(init, &mut st, 0) == init
                            && libc::WIFEXITED(st)
                            && libc::WEXITSTATUS(st) == 0
                        {
                            bits |= 8;
                        }
                    }
                }
                if staged
                    && libc::chdir(c"/tmp".as_ptr()) == 0
                    && libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) == 0
                    && libc::umount2(c".".as_ptr(), libc::MNT_DETACH) == 0
                {
                    bits |= 4;
                }
            }
            libc::_exit(bits);
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for the child forked above.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return none;
        }
    }
    if !libc::WIFEXITED(status) {
        return none;
    }
    let bits = libc::WEXITSTATUS(status);
    Namespaces {
        user: bits & 1 != 0,
        network: bits & 2 != 0,
        mount: bits & 4 != 0,
        pid: bits & 8 != 0,
    }
}

pub(super) fn probe() -> SandboxStatus {
    let landlock = landlock_support();
    let mounts = read_mountinfo().unwrap_or_default();
    let usr_flags = mount_of(&mounts, Path::new("/usr")).map_or(0, |m| mount_flags(&m.options));
    let ns = probe_namespaces(usr_flags);
    // SAFETY: getter without preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let process_limit = match find_pids_cgroup(&mounts) {
        Some((base, version)) => ProcessLimit::PidsCgroup { base, version },
        None if !root => ProcessLimit::Rlimit {
            per_sandbox: ns.user,
        },
        None => ProcessLimit::None,
    };
    SandboxStatus {
        landlock,
        user_namespace: ns.user,
        network_namespace: ns.network,
        mount_namespace: ns.mount,
        pid_namespace: ns.pid,
        process_limit,
        root,
    }
}

// ---------------------------------------------------------------------------
// mountinfo

#[derive(Debug, Clone, PartialEq)]
pub(super) struct MountEntry {
    /// Root of the mount within its file system.
    pub root: PathBuf,
    pub mount_point: PathBuf,
    /// Per-mount options (`rw,nosuid,relatime`).
    pub options: String,
    pub fstype: String,
    pub super_options: String,
}

/// Decodes the octal escapes (`\040`) of a mountinfo path.
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1] <= b'3'
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

pub(super) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if sep < 6 || fields.len() < sep + 4 {
            continue;
        }
        out.push(MountEntry {
            root: unescape(fields[3]),
            mount_point: unescape(fields[4]),
            options: fields[5].to_string(),
            fstype: fields[sep + 1].to_string(),
            super_options: fields[sep + 3].to_string(),
        });
    }
    out
}

fn read_mountinfo() -> io::Result<Vec<MountEntry>> {
    Ok(parse_mountinfo(&std::fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// `MS_*` flags to keep when remounting a mount with these per-mount options
/// (locked flags must be repeated or the remount fails with EPERM).
pub(super) fn mount_flags(options: &str) -> libc::c_ulong {
    let mut flags = 0;
    let mut atime = false;
    for o in options.split(',') {
        match o {
            "nosuid" => flags |= libc::MS_NOSUID,
            "nodev" => flags |= libc::MS_NODEV,
            "noexec" => flags |= libc::MS_NOEXEC,
            "nodiratime" => flags |= libc::MS_NODIRATIME,
            "noatime" => {
                flags |= libc::MS_NOATIME;
                atime = true;
            }
            "relatime" => {
                flags |= libc::MS_RELATIME;
                atime = true;
            }
            _ => {}
        }
    }
    if !atime {
        flags |= libc::MS_STRICTATIME;
    }
    flags
}

/// The mount that holds `path`: the last listed entry with the longest mount point.
fn mount_of<'a>(mounts: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let mut best: Option<&MountEntry> = None;
    for m in mounts {
        if path.starts_with(&m.mount_point)
            && best.is_none_or(|b| {
                m.mount_point.components().count() >= b.mount_point.components().count()
            })
        {
            best = Some(m);
        }
    }
    best
}

// ---------------------------------------------------------------------------
// pids cgroup

static CGROUP_SEQ: AtomicU64 = AtomicU64::new(0);

fn cgroup_name(kind: &str) -> String {
    format!(
        "claw-{kind}-{}-{}",
        std::process::id(),
        CGROUP_SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A directory under which this process can create cgroups with a pids limit.
fn find_pids_cgroup(mounts: &[MountEntry]) -> Option<(PathBuf, u8)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut candidates = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = Path::new(path);
        if id == "0" && controllers.is_empty() {
            for m in mounts.iter().filter(|m| m.fstype == "cgroup2") {
                if let Ok(sub) = rel.strip_prefix(&m.root) {
                    let dir = m.mount_point.join(sub);
                    let enabled = std::fs::read_to_string(dir.join("cgroup.subtree_control"))
                        .is_ok_and(|s| s.split_whitespace().any(|c| c == "pids"));
                    if enabled {
                        candidates.push((dir, 2));
                    }
                }
            }
        } else if controllers.split(',').any(|c| c == "pids") {
            for m in mounts
                .iter()
                .filter(|m| m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == "pids"))
            {
                if let Ok(sub) = rel.strip_prefix(&m.root) {
                    candidates.push((m.mount_point.join(sub), 1));
                }
            }
        }
    }
    candidates.into_iter().find(|(dir, _)| {
        let probe = dir.join(cgroup_name("probe"));
        if std::fs::create_dir(&probe).is_err() {
            return false;
        }
        let ok = std::fs::write(probe.join("pids.max"), "64").is_ok();
        let _ = std::fs::remove_dir(&probe);
        ok
    })
}

/// The pids cgroup of one command: emptied (SIGKILL) and removed at the end.
pub(super) struct CgroupGuard {
    dir: Option<PathBuf>,
}

impl CgroupGuard {
    fn create(base: &Path, max_processes: u64) -> io::Result<CgroupGuard> {
        let dir = base.join(cgroup_name("exec"));
        std::fs::create_dir(&dir)?;
        if let Err(e) = std::fs::write(dir.join("pids.max"), max_processes.to_string()) {
            let _ = std::fs::remove_dir(&dir);
            return Err(e);
        }
        Ok(CgroupGuard { dir: Some(dir) })
    }

    fn procs(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("cgroup.procs"))
    }

    /// Kills every process in the cgroup, then removes it (up to 5 s).
    fn empty_and_remove(dir: &Path) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let kill_file = dir.join("cgroup.kill");
        while Instant::now() < deadline {
            let pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
                .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
                .unwrap_or_default();
            if pids.is_empty() {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    return;
                }
            } else if kill_file.exists() {
                let _ = std::fs::write(&kill_file, "1");
            } else {
                for pid in pids {
                    // SAFETY: kill has no memory-safety preconditions. A pid read from
                    // the cgroup may in theory be reused by the time it is signalled;
                    // the window is a few microseconds.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        tracing::warn!(
            "exec sandbox: could not remove the cgroup {}",
            dir.display()
        );
    }

    fn finish(&mut self) {
        if let Some(dir) = self.dir.take() {
            Self::empty_and_remove(&dir);
        }
    }
}

impl Drop for CgroupGuard {
    fn drop(&mut self) {
        // Cancelled: clean up without blocking the caller.
        if let Some(dir) = self.dir.take() {
            std::thread::spawn(move || CgroupGuard::empty_and_remove(&dir));
        }
    }
}

// ---------------------------------------------------------------------------
// Preparation

fn cstring(path: &Path) -> Result<CString, SandboxError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| SandboxError::Path {
        path: path.to_path_buf(),
        message: "contains a NUL byte".into(),
    })
}

fn existing_canonical(paths: impl IntoIterator<Item = PathBuf>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = paths
        .into_iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The entries of `dir` that may be read, without `deny`, recursing (up to
/// `depth`) into directories that hold a denied name somewhere below.
fn readable_entries(dir: &Path, deny: &[&str], depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if deny.contains(&name.as_ref()) {
            continue;
        }
        let path = e.path();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && depth > 0 && holds_denied(&path, deny, depth) {
            readable_entries(&path, deny, depth - 1, out);
        } else {
            out.push(path);
        }
    }
}

fn holds_denied(dir: &Path, deny: &[&str], depth: usize) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        deny.contains(&name.to_string_lossy().as_ref())
            || (depth > 1
                && e.file_type().is_ok_and(|t| t.is_dir())
                && holds_denied(&e.path(), deny, depth - 1))
    })
}

/// `/etc` without its credential stores and private keys.
fn etc_entries() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/etc") else {
        return out;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let path = e.path();
        match name.as_ref() {
            n if ETC_DENY.contains(&n) => {}
            "ssh" => {
                for allowed in ETC_SSH_ALLOW {
                    out.push(path.join(allowed));
                }
            }
            "ssl" | "pki" => readable_entries(&path, &["private"], 2, &mut out),
            _ => out.push(path),
        }
    }
    out
}

fn build_ruleset(
    abi: u32,
    network: bool,
    full: &[PathBuf],
    read_exec: &[PathBuf],
    read_only: &[PathBuf],
    devices: &[PathBuf],
) -> Result<(OwnedFd, RuleMasks), SandboxError> {
    use landlock::{
        ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
        RulesetCreatedAttr, Scope, path_beneath_rules,
    };
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let v = ABI::from(abi as i32);
    let all = AccessFs::from_all(v);
    let read_exec_access = AccessFs::from_read(v);
    let read_access = (AccessFs::ReadFile | AccessFs::ReadDir) & all;
    let device_access =
        (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev) & all;
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(all)
        .map_err(err)?;
    if !network && abi >= 4 {
        rs = rs.handle_access(AccessNet::from_all(v)).map_err(err)?;
    }
    if abi >= 6 {
        rs = rs.scope(Scope::from_all(v)).map_err(err)?;
    }
    let created = rs
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(full, all))
        .map_err(err)?
        .add_rules(path_beneath_rules(read_exec, read_exec_access))
        .map_err(err)?
        .add_rules(path_beneath_rules(read_only, read_access))
        .map_err(err)?
        .add_rules(path_beneath_rules(devices, device_access))
        .map_err(err)?;
    let fd: Option<OwnedFd> = created.into();
    let fd = fd.ok_or_else(|| SandboxError::Landlock("the kernel returned no ruleset".into()))?;
    Ok((
        fd,
        RuleMasks {
            full: all.bits(),
            read_dir: (all & AccessFs::ReadDir).bits(),
            read: read_access.bits(),
        },
    ))
}

/// Landlock access masks for rules added in the child.
struct RuleMasks {
    full: u64,
    read_dir: u64,
    read: u64,
}

/// What goes into the sandbox's root.
enum Item {
    Bind {
        path: PathBuf,
        writable: bool,
    },
    Symlink {
        path: PathBuf,
        contents: PathBuf,
    },
    Tmpfs {
        path: PathBuf,
        data: String,
    },
    /// A hidden file: `/dev/null` bound over it.
    HideFile {
        path: PathBuf,
    },
    /// A fresh proc of the command's PID namespace.
    Proc {
        path: PathBuf,
    },
}

impl Item {
    fn path(&self) -> &Path {
        match self {
            Item::Bind { path, .. }
            | Item::Symlink { path, .. }
            | Item::Tmpfs { path, .. }
            | Item::HideFile { path }
            | Item::Proc { path } => path,
        }
    }
}

/// Plans the new root: read-only system directories, `/etc`, `/proc`, a few
/// devices, the private `/tmp`, and the workspace and configured paths, with the
/// `hidden` paths (claw's state directory and config file; canonical) that lie
/// inside any of them covered: an empty tmpfs over a directory, `/dev/null` over a
/// file. With `fresh_proc` (a PID namespace) `/proc` is a new proc of the
/// command's own namespace instead of a bind of the host's.
#[allow(clippy::too_many_arguments)]
fn plan_root(
    mounts: &[MountEntry],
    ws: &Path,
    write_paths: &[PathBuf],
    read_paths: &[PathBuf],
    etc: &[PathBuf],
    tmp_bytes: u64,
    hidden: &[PathBuf],
    fresh_proc: bool,
) -> Result<MountPlan, SandboxError> {
    let staging = Path::new("/tmp");
    if !staging.is_dir() {
        return Err(SandboxError::Path {
            path: staging.to_path_buf(),
            message: "the staging directory of the sandbox's root does not exist".into(),
        });
    }
    let mut items: Vec<Item> = Vec::new();
    let mut ro: Vec<PathBuf> = Vec::new();
    for d in SYSTEM_DIRS.iter().chain(["/etc"].iter()) {
        let p = Path::new(d);
        let Ok(meta) = p.symlink_metadata() else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let contents = std::fs::read_link(p).map_err(|source| SandboxError::Io {
                what: format!("reading the link {d}"),
                source,
            })?;
            items.push(Item::Symlink {
                path: p.to_path_buf(),
                contents,
            });
            ro.extend(p.canonicalize().ok());
        } else {
            ro.push(p.to_path_buf());
        }
    }
    ro.extend(
        READ_ONLY
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists() && !(fresh_proc && p == Path::new("/proc"))),
    );
    ro.extend(read_paths.iter().cloned());
    if fresh_proc {
        items.push(Item::Proc {
            path: PathBuf::from("/proc"),
        });
    }
    // /etc entries that link elsewhere (resolv.conf -> /run/...).
    for e in etc {
        if e.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
            && let Ok(target) = e.canonicalize()
            && !target.starts_with("/proc")
        {
            ro.push(target);
        }
    }
    let mut rw: Vec<PathBuf> = vec![ws.to_path_buf()];
    rw.extend(write_paths.iter().cloned());
    ro.sort();
    ro.dedup();
    // A read-only path under another bound path is already there.
    for p in &ro {
        if !ro
            .iter()
            .chain(rw.iter())
            .any(|q| q != p && p.starts_with(q))
        {
            items.push(Item::Bind {
                path: p.clone(),
                writable: false,
            });
        }
    }
    for p in &rw {
        items.push(Item::Bind {
            path: p.clone(),
            writable: true,
        });
    }
    for d in DEVICES {
        if Path::new(d).exists() {
            items.push(Item::Bind {
                path: PathBuf::from(d),
                writable: true,
            });
        }
    }
    for (link, contents) in [
        ("/dev/fd", "/proc/self/fd"),
        ("/dev/stdin", "/proc/self/fd/0"),
        ("/dev/stdout", "/proc/self/fd/1"),
        ("/dev/stderr", "/proc/self/fd/2"),
    ] {
        items.push(Item::Symlink {
            path: PathBuf::from(link),
            contents: PathBuf::from(contents),
        });
    }
    items.push(Item::Tmpfs {
        path: PathBuf::from("/tmp"),
        data: format!("size={},mode=1777", tmp_bytes.max(4096)),
    });
    for h in hidden {
        let bound = items.iter().any(|i| match i {
            Item::Bind { path, .. } => h.starts_with(path),
            _ => false,
        });
        if !bound {
            continue; // not in the sandbox's view at all
        }
        if h.is_dir() {
            items.push(Item::Tmpfs {
                path: h.clone(),
                data: "size=4k,mode=700".into(),
            });
        } else {
            items.push(Item::HideFile { path: h.clone() });
        }
    }
    // Parents before children (a stable sort keeps /usr before the workspace in it).
    items.sort_by_key(|i| i.path().components().count());

    let staged = |p: &Path| -> Result<CString, SandboxError> {
        cstring(&staging.join(p.strip_prefix("/").unwrap_or(p)))
    };
    let parents = |p: &Path| -> Result<Vec<CString>, SandboxError> {
        let mut out = Vec::new();
        let mut anc: Vec<&Path> = p.ancestors().skip(1).collect();
        anc.reverse();
        for a in anc {
            if a != Path::new("/") {
                out.push(staged(a)?);
            }
        }
        Ok(out)
    };
    let mut entries = Vec::new();
    for item in &items {
        entries.push(match item {
            Item::Bind { path, writable } => RootEntry::Bind {
                source: cstring(path)?,
                fd: AtomicI32::new(-1),
                mkdirs: parents(path)?,
                file: !path.is_dir(),
                target: staged(path)?,
                readonly: if *writable {
                    None
                } else {
                    Some(mount_of(mounts, path).map_or(0, |m| mount_flags(&m.options)))
                },
                sub_readonly: if *writable {
                    Vec::new()
                } else {
                    let mut subs = Vec::new();
                    for m in mounts {
                        if m.mount_point != *path && m.mount_point.starts_with(path) {
                            subs.push((staged(&m.mount_point)?, mount_flags(&m.options)));
                        }
                    }
                    subs
                },
            },
            Item::Symlink { path, contents } => RootEntry::Symlink {
                mkdirs: parents(path)?,
                contents: cstring(contents)?,
                target: staged(path)?,
            },
            Item::HideFile { path } => RootEntry::Bind {
                source: c"/dev/null".to_owned(),
                fd: AtomicI32::new(-1),
                mkdirs: parents(path)?,
                file: true,
                target: staged(path)?,
                readonly: None,
                sub_readonly: Vec::new(),
            },
            Item::Proc { path } => RootEntry::Proc {
                mkdirs: parents(path)?,
                target: staged(path)?,
            },
            Item::Tmpfs { path, data } => RootEntry::Tmpfs {
                mkdirs: parents(path)?,
                target: staged(path)?,
                data: CString::new(data.as_str()).map_err(|_| SandboxError::Path {
                    path: path.clone(),
                    message: "tmpfs options contain a NUL byte".into(),
                })?,
            },
        });
    }
    Ok(MountPlan {
        staging: cstring(staging)?,
        root_data: c"size=1m,mode=755".to_owned(),
        entries,
    })
}

/// The number of processes of this user (for `RLIMIT_NPROC` without a user namespace).
fn user_process_count() -> u64 {
    // SAFETY: getter without preconditions.
    let uid = unsafe { libc::getuid() }.to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).is_ok_and(|s| {
                s.lines().any(|l| {
                    l.strip_prefix("Uid:")
                        .and_then(|r| r.split_whitespace().next())
                        .is_some_and(|u| u == uid)
                })
            })
        })
        .count() as u64
}

pub(super) struct PreparedLinux {
    plan: Arc<ChildPlan>,
    tmpdir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    cgroup: Option<CgroupGuard>,
    quota: Option<QuotaPlan>,
}

impl PreparedLinux {
    pub(super) fn configure(&self, cmd: &mut tokio::process::Command) {
        // HOME too: the real one is invisible (namespaces) or unreadable
        // (Landlock), and tools that read or cache there (git, pip) should
        // find an empty, writable home rather than fail.
        cmd.env("TMPDIR", &self.tmpdir)
            .env("TMP", &self.tmpdir)
            .env("TEMP", &self.tmpdir)
            .env("HOME", &self.tmpdir);
        let plan = self.plan.clone();
        // SAFETY: `apply` only makes async-signal-safe system calls on data
        // prepared before the fork (see `child`).
        unsafe {
            cmd.pre_exec(move || plan.apply());
        }
    }

    pub(super) fn spawn_error(&self, error: io::Error) -> Result<io::Error, SandboxError> {
        let step = self.plan.marker.get();
        if step == 0 || step == STEP_DONE {
            return Ok(error);
        }
        Err(SandboxError::Setup {
            step: STEP_NAMES
                .get(step as usize)
                .copied()
                .unwrap_or("unknown step"),
            source: error,
        })
    }

    pub(super) fn tmpdir(&self) -> &Path {
        &self.tmpdir
    }

    pub(super) fn watch_writes(&self, pid: u32) -> Option<WriteWatch> {
        self.quota.as_ref().map(|q| WriteWatch::start(q, pid))
    }

    pub(super) fn finish(mut self) {
        if let Some(mut cg) = self.cgroup.take() {
            cg.finish();
        }
    }
}

pub(super) fn prepare(
    policy: &SandboxPolicy,
    workspace: &Path,
    status: &SandboxStatus,
) -> Result<PreparedLinux, SandboxError> {
    let abi = status
        .landlock_abi()
        .ok_or_else(|| SandboxError::Unavailable(status.warning().unwrap_or_default()))?;
    let ws = workspace
        .canonicalize()
        .map_err(|e| SandboxError::Workspace {
            path: workspace.to_path_buf(),
            message: e.to_string(),
        })?;
    if ws == Path::new("/") {
        return Err(SandboxError::Workspace {
            path: ws,
            message: "it is the root directory".into(),
        });
    }
    let userns = status.user_namespace && policy.namespaces;
    let netns = userns && status.network_namespace && !policy.network;
    let mountns = userns && status.mount_namespace;
    // A PID namespace only helps with its own /proc, which needs the mount namespace.
    let pidns = mountns && status.pid_namespace;

    let write_paths = existing_canonical(policy.write_paths.iter().cloned());
    let read_paths = existing_canonical(policy.read_paths.iter().cloned());
    let system = existing_canonical(SYSTEM_DIRS.iter().map(PathBuf::from));
    let etc = etc_entries();

    let (tmpdir, tmp_guard) = if mountns {
        (PathBuf::from("/tmp"), None)
    } else {
        let t = tempfile::Builder::new()
            .prefix("claw-exec-")
            .tempdir_in(&policy.tmp_root)
            .map_err(|source| SandboxError::Io {
                what: format!("private temp dir in {}", policy.tmp_root.display()),
                source,
            })?;
        (t.path().to_path_buf(), Some(t))
    };

    let mut full = vec![ws.clone()];
    full.extend(write_paths.iter().cloned());
    full.extend(tmp_guard.as_ref().map(|t| t.path().to_path_buf()));
    let mut read_exec = system.clone();
    read_exec.extend(read_paths.iter().cloned());
    let mut read_only = etc.clone();
    read_only.extend(READ_ONLY.iter().map(PathBuf::from));
    let devices: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
    let (ruleset, masks) =
        build_ruleset(abi, policy.network, &full, &read_exec, &read_only, &devices)?;

    let mounts = if mountns {
        let entries = read_mountinfo().map_err(|source| SandboxError::Io {
            what: "/proc/self/mountinfo".into(),
            source,
        })?;
        Some(plan_root(
            &entries,
            &ws,
            &write_paths,
            &read_paths,
            &etc,
            policy.tmp_bytes,
            &existing_canonical(policy.hidden.iter().cloned()),
            pidns,
        )?)
    } else {
        None
    };

    let cgroup = match &status.process_limit {
        ProcessLimit::PidsCgroup { base, .. } => Some(
            CgroupGuard::create(base, policy.max_processes.max(1)).map_err(|source| {
                SandboxError::Io {
                    what: format!("creating a pids cgroup under {}", base.display()),
                    source,
                }
            })?,
        ),
        _ => None,
    };
    let nproc = if userns {
        Some(policy.max_processes.max(1))
    } else if !status.root {
        Some(user_process_count() + policy.max_processes.max(1))
    } else {
        None
    };
    let mut unshare_flags = 0;
    if userns {
        unshare_flags |= libc::CLONE_NEWUSER;
        if mountns {
            unshare_flags |= libc::CLONE_NEWNS;
        }
        if netns {
            unshare_flags |= libc::CLONE_NEWNET;
        }
        if pidns {
            unshare_flags |= libc::CLONE_NEWPID;
        }
    }
    let plan = ChildPlan {
        marker: StepMarker::new().map_err(|source| SandboxError::Io {
            what: "mapping the step marker".into(),
            source,
        })?,
        cgroup_procs: match cgroup.as_ref().and_then(|c| c.procs()) {
            Some(p) => Some(cstring(&p)?),
            None => None,
        },
        max_file_bytes: policy.max_file_bytes.max(1),
        max_cpu_secs: policy.max_cpu_secs.max(1),
        max_memory_bytes: (policy.max_memory_bytes > 0).then_some(policy.max_memory_bytes),
        nproc,
        unshare_flags,
        id_maps: userns.then(id_maps),
        mounts,
        workspace: cstring(&ws)?,
        landlock: Some(LandlockPlan {
            ruleset,
            child_rules: if mountns {
                let mut rules = vec![
                    (c"/tmp".to_owned(), masks.full),
                    (c"/".to_owned(), masks.read_dir),
                ];
                if pidns {
                    rules.push((c"/proc".to_owned(), masks.read));
                }
                rules
            } else {
                Vec::new()
            },
        }),
    };
    let quota = (policy.max_write_bytes > 0).then(|| {
        let mut roots = vec![ws.clone()];
        roots.extend(write_paths.iter().cloned());
        QuotaPlan {
            max_write_bytes: policy.max_write_bytes,
            cgroup_procs: cgroup.as_ref().and_then(|c| c.procs()),
            roots,
        }
    });
    Ok(PreparedLinux {
        plan: Arc::new(plan),
        tmpdir,
        _tmp: tmp_guard,
        cgroup,
        quota,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse_with_escapes_and_optional_fields() {
        let text = "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                    39 31 0:36 / /sys/fs/cgroup/pids rw,nosuid shared:5 master:1 - cgroup cgroup rw,pids\n\
                    50 27 0:40 /sub /mnt/with\\040space ro,nosuid,nodev,noexec - tmpfs none ro\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].mount_point, Path::new("/"));
        assert_eq!(m[1].fstype, "cgroup");
        assert_eq!(m[1].super_options, "rw,pids");
        assert_eq!(m[2].mount_point, Path::new("/mnt/with space"));
        assert_eq!(m[2].root, Path::new("/sub"));
        assert_eq!(
            mount_flags(&m[2].options),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_STRICTATIME
        );
        assert_eq!(mount_flags("rw,relatime"), libc::MS_RELATIME);
        assert_eq!(
            mount_of(&m, Path::new("/mnt/with space/x")).map(|e| e.fstype.as_str()),
            Some("tmpfs")
        );
        assert_eq!(
            mount_of(&m, Path::new("/usr")).map(|e| e.fstype.as_str()),
            Some("ext4")
        );
    }

    #[test]
    fn etc_entries_leave_out_credentials() {
        let etc = etc_entries();
        assert!(etc.iter().any(|p| p == Path::new("/etc/passwd")));
        for secret in [
            "/etc/shadow",
            "/etc/gshadow",
            "/etc/sudoers",
            "/etc/ssl/private",
        ] {
            assert!(
                !etc.iter().any(|p| p == Path::new(secret)),
                "{secret} must not be readable"
            );
        }
        assert!(!etc.iter().any(|p| p.starts_with("/etc/ssh")
            && !ETC_SSH_ALLOW.iter().any(|a| p.ends_with(a))));
    }
}
