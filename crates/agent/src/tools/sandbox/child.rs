//! The child side of the exec sandbox: a [`ChildPlan`] prepared in the parent
//! and applied in the forked child before `exec`.
//!
//! Invariant: [`ChildPlan::apply`] runs between `fork` and `exec` of a
//! multi-threaded process, so it only makes raw system calls on data prepared
//! beforehand — no allocation, no locks, no formatting, no panics (no indexing
//! that could fail). Errors are `io::Error::last_os_error()` (no allocation).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// Steps of [`ChildPlan::apply`], numbered from 1; `STEP_DONE` when all succeeded.
pub(super) const STEP_NAMES: &[&str] = &[
    "not started",
    "joining the pids cgroup",
    "setting RLIMIT_FSIZE/RLIMIT_CPU",
    "creating the user/mount/network namespaces",
    "writing the uid/gid maps",
    "setting RLIMIT_NPROC",
    "making the mounts private",
    "opening the paths to bind",
    "mounting the new root",
    "populating the new root (system directories, workspace, private /tmp)",
    "remounting the system directories read-only",
    "switching to the new root (pivot_root)",
    "dropping all capabilities",
    "entering the workspace",
    "adding the private /tmp and the new root to the Landlock ruleset",
    "setting no_new_privs",
    "enforcing the Landlock ruleset",
    "installing the seccomp filter (no Unix-domain sockets, no fallocate)",
    "starting the command as pid 1 of its PID namespace",
];
pub(super) const STEP_DONE: u32 = 1000;

const STEP_CGROUP: u32 = 1;
const STEP_RLIMITS: u32 = 2;
const STEP_UNSHARE: u32 = 3;
const STEP_IDMAP: u32 = 4;
const STEP_NPROC: u32 = 5;
const STEP_PRIVATE: u32 = 6;
const STEP_OPEN: u32 = 7;
const STEP_TMPFS: u32 = 8;
const STEP_BIND: u32 = 9;
const STEP_READONLY: u32 = 10;
const STEP_PIVOT: u32 = 11;
const STEP_CAPS: u32 = 12;
const STEP_CHDIR: u32 = 13;
const STEP_LANDLOCK_TMP: u32 = 14;
const STEP_NO_NEW_PRIVS: u32 = 15;
const STEP_LANDLOCK: u32 = 16;
const STEP_SECCOMP: u32 = 17;
const STEP_PID_NS: u32 = 18;

/// `AUDIT_ARCH_*` of the native system call ABI.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH_NATIVE: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH_NATIVE: u32 = 0xC000_00B7;
/// x32 system calls carry this bit in their number (x86_64 only; harmless elsewhere).
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// Load the 32-bit word at `offset` of `struct seccomp_data`.
const fn load(offset: u32) -> libc::sock_filter {
    stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, offset)
}

/// If the loaded word equals `k`, skip `jt` instructions, else `jf`.
const fn if_eq(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    jump(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, k, jt, jf)
}

/// If the loaded word is at least `k`, skip `jt` instructions, else `jf`.
const fn if_ge(k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    jump(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K, k, jt, jf)
}

/// End the filter: the call fails with `errno`.
const fn fail(errno: i32) -> libc::sock_filter {
    stmt(
        libc::BPF_RET | libc::BPF_K,
        libc::SECCOMP_RET_ERRNO | errno as u32,
    )
}

/// End the filter: the call runs.
const fn allow() -> libc::sock_filter {
    stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW)
}

/// The seccomp filter every sandboxed command runs under: `socket(AF_UNIX, …)`
/// fails with `EACCES`, so a command cannot reach a host listener through a socket
/// file in the workspace or a `write_paths` directory (the mount namespace hides
/// the rest, Landlock's scoping covers abstract sockets; `socketpair` stays
/// allowed: it reaches nobody). `io_uring_setup` fails with `ENOSYS` (its
/// `IORING_OP_SOCKET` would bypass the filter), and so does every call of another
/// ABI (x32, 32-bit compat), whose numbers and multiplexed `socketcall` this
/// filter does not parse. `fallocate` fails with `EOPNOTSUPP`: it reserves
/// gigabytes in microseconds without writing a byte, past the write quota's
/// count and faster than its watcher polls (glibc's `posix_fallocate` then
/// writes the blocks instead, which the quota counts). Offsets are `struct seccomp_data`'s: `nr` 0, `arch` 4,
/// `args[0]` 16 (its low word, little-endian).
static SECCOMP_FILTER: [libc::sock_filter; 15] = [
    /* 0 */ load(4),
    /* 1 */ if_eq(AUDIT_ARCH_NATIVE, 1, 0),
    /* 2 */ fail(libc::ENOSYS),
    /* 3 */ load(0),
    /* 4 */ if_ge(X32_SYSCALL_BIT, 0, 1),
    /* 5 */ fail(libc::ENOSYS),
    /* 6 */ if_eq(libc::SYS_io_uring_setup as u32, 0, 1),
    /* 7 */ fail(libc::ENOSYS),
    /* 8 */ if_eq(libc::SYS_fallocate as u32, 0, 1),
    /* 9 */ fail(libc::EOPNOTSUPP),
    /* 10 */ if_eq(libc::SYS_socket as u32, 0, 3),
    /* 11 */ load(16),
    /* 12 */ if_eq(libc::AF_UNIX as u32, 0, 1),
    /* 13 */ fail(libc::EACCES),
    /* 14 */ allow(),
];

/// One `u32` in a shared anonymous mapping: the child writes the step it is
/// in; the parent reads it when the spawn failed.
pub(super) struct StepMarker {
    ptr: *mut AtomicU32,
}

// SAFETY: the pointer refers to a MAP_SHARED mapping owned by this value and only
// accessed through the atomic.
unsafe impl Send for StepMarker {}
unsafe impl Sync for StepMarker {}

impl StepMarker {
    pub(super) fn new() -> io::Result<StepMarker> {
        // SAFETY: anonymous shared mapping of one page; checked for MAP_FAILED.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(StepMarker {
            ptr: ptr as *mut AtomicU32,
        })
    }

    fn set(&self, step: u32) {
        // SAFETY: the mapping lives as long as self; AtomicU32 is valid for zeroed memory.
        unsafe { (*self.ptr).store(step, Ordering::SeqCst) }
    }

    pub(super) fn get(&self) -> u32 {
        // SAFETY: as in `set`.
        unsafe { (*self.ptr).load(Ordering::SeqCst) }
    }
}

impl Drop for StepMarker {
    fn drop(&mut self) {
        // SAFETY: unmaps the page mapped in `new`.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, 4096);
        }
    }
}

/// One entry of the sandbox's root file system, created under the staging
/// directory (all paths below are already prefixed with it).
pub(super) enum RootEntry {
    /// A path bind-mounted from the real file system.
    Bind {
        /// The real path, opened (O_PATH) in the child's mount namespace before
        /// the staging tmpfs hides it (a descriptor from the parent's namespace
        /// cannot be the source of a bind mount).
        source: CString,
        fd: AtomicI32,
        /// Directories to create first.
        mkdirs: Vec<CString>,
        /// The source is not a directory: create an empty file to mount on.
        file: bool,
        target: CString,
        /// Flags of the read-only remount (the source mount's locked flags);
        /// `None` keeps it writable.
        readonly: Option<libc::c_ulong>,
        /// Mounts below the source (copied by the recursive bind) to remount
        /// read-only as well, best effort (`/etc/hosts` in a container).
        sub_readonly: Vec<(CString, libc::c_ulong)>,
    },
    /// A symbolic link (`/bin -> usr/bin`, `/dev/fd -> /proc/self/fd`).
    Symlink {
        mkdirs: Vec<CString>,
        contents: CString,
        target: CString,
    },
    /// A fresh, read-only proc file system of the command's own PID namespace
    /// (mounted by pid 1 of that namespace while the host's `/proc` is still
    /// visible: the kernel refuses a new proc in a user namespace otherwise).
    Proc {
        mkdirs: Vec<CString>,
        target: CString,
    },
    /// A fresh writable tmpfs (the private /tmp).
    Tmpfs {
        mkdirs: Vec<CString>,
        target: CString,
        data: CString,
    },
}

/// The new root: a tmpfs at `staging` holding only the entries, then made the
/// root with `pivot_root`.
pub(super) struct MountPlan {
    pub staging: CString,
    pub root_data: CString,
    pub entries: Vec<RootEntry>,
}

pub(super) struct IdMaps {
    pub uid_map: Vec<u8>,
    pub gid_map: Vec<u8>,
}

pub(super) struct LandlockPlan {
    pub ruleset: OwnedFd,
    /// Rules on directories that only exist in the child (the private /tmp,
    /// the new root): path and access mask.
    pub child_rules: Vec<(CString, u64)>,
}

/// Everything the child does, prepared by the parent.
pub(super) struct ChildPlan {
    pub marker: StepMarker,
    /// `cgroup.procs` of the command's pids cgroup.
    pub cgroup_procs: Option<CString>,
    pub max_file_bytes: u64,
    pub max_cpu_secs: u64,
    /// `RLIMIT_AS`, if set.
    pub max_memory_bytes: Option<u64>,
    /// `RLIMIT_NPROC`, if set.
    pub nproc: Option<u64>,
    /// `CLONE_NEW*` flags (with `CLONE_NEWUSER`); 0 for none. With
    /// `CLONE_NEWPID` the child forks once more (see [`enter_pid_namespace`]).
    pub unshare_flags: libc::c_int,
    pub id_maps: Option<IdMaps>,
    pub mounts: Option<MountPlan>,
    /// The workspace (chdir after the mounts).
    pub workspace: CString,
    pub landlock: Option<LandlockPlan>,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empties the bounding and ambient sets (best effort: needs CAP_SETPCAP, which
/// only a privileged or namespaced process has) and the effective, permitted
/// and inheritable sets (always allowed). A root command then has no
/// capability — not even after `execve`, which grants root only what the
/// bounding set holds.
fn drop_capabilities() -> io::Result<()> {
    for cap in 0..64 {
        // SAFETY: plain prctl; EINVAL past the last capability and EPERM without
        // CAP_SETPCAP are expected and ignored.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: plain prctl; fails harmlessly on kernels without ambient capabilities.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset(&header, data) with a version-3 header and two data structs.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn mkdirs(dirs: &[CString]) -> io::Result<()> {
    for d in dirs {
        // SAFETY: NUL-terminated path.
        if unsafe { libc::mkdir(d.as_ptr(), 0o755) } < 0 && errno() != libc::EEXIST {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn cvt(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Opens `path` for writing and writes `data` in one call.
pub(super) fn write_file(path: &CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: valid fd and buffer.
    let n = unsafe { libc::write(fd, data.as_ptr() as *const libc::c_void, data.len()) };
    let result = if n < 0 || n as usize != data.len() {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: closes the fd opened above.
    unsafe { libc::close(fd) };
    result
}

fn setrlimit(resource: libc::__rlimit_resource_t, soft: u64, hard: u64) -> io::Result<()> {
    let lim = libc::rlimit {
        rlim_cur: soft as libc::rlim_t,
        rlim_max: hard as libc::rlim_t,
    };
    // SAFETY: valid pointer to a local struct.
    cvt(unsafe { libc::setrlimit(resource, &lim) })
}

fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    // SAFETY: all pointers are NUL-terminated strings or null.
    cvt(unsafe {
        libc::mount(
            source.map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.map_or(std::ptr::null(), |d| d.as_ptr() as *const libc::c_void),
        )
    })
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

const LANDLOCK_RULE_PATH_BENEATH: libc::c_int = 1;

impl ChildPlan {
    /// Enters the sandbox. Runs in the forked child; see the module invariant.
    pub(super) fn apply(&self) -> io::Result<()> {
        let m = &self.marker;
        if let Some(procs) = &self.cgroup_procs {
            m.set(STEP_CGROUP);
            write_file(procs, b"0")?;
        }
        m.set(STEP_RLIMITS);
        setrlimit(libc::RLIMIT_FSIZE, self.max_file_bytes, self.max_file_bytes)?;
        setrlimit(
            libc::RLIMIT_CPU,
            self.max_cpu_secs,
            self.max_cpu_secs.saturating_add(5),
        )?;
        if let Some(bytes) = self.max_memory_bytes {
            setrlimit(libc::RLIMIT_AS, bytes, bytes)?;
        }
        // Core dumps of sandboxed programs would be written outside the sandbox's view.
        setrlimit(libc::RLIMIT_CORE, 0, 0)?;
        if self.unshare_flags != 0 {
            m.set(STEP_UNSHARE);
            // SAFETY: plain system call.
            cvt(unsafe { libc::unshare(self.unshare_flags) })?;
        }
        if let Some(maps) = &self.id_maps {
            m.set(STEP_IDMAP);
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &maps.uid_map)?;
            write_file(c"/proc/self/gid_map", &maps.gid_map)?;
        }
        if let Some(n) = self.nproc {
            m.set(STEP_NPROC);
            setrlimit(libc::RLIMIT_NPROC, n, n)?;
        }
        if self.unshare_flags & libc::CLONE_NEWPID != 0 {
            m.set(STEP_PID_NS);
            enter_pid_namespace()?;
        }
        if let Some(mounts) = &self.mounts {
            self.apply_mounts(mounts)?;
        }
        m.set(STEP_CAPS);
        drop_capabilities()?;
        m.set(STEP_CHDIR);
        // SAFETY: NUL-terminated path.
        cvt(unsafe { libc::chdir(self.workspace.as_ptr()) })?;
        if let Some(ll) = &self.landlock
            && !ll.child_rules.is_empty()
        {
            m.set(STEP_LANDLOCK_TMP);
            for (dir, access) in &ll.child_rules {
                // SAFETY: NUL-terminated path.
                let fd = unsafe {
                    libc::open(
                        dir.as_ptr(),
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                let attr = PathBeneathAttr {
                    allowed_access: *access,
                    parent_fd: fd,
                };
                // SAFETY: landlock_add_rule(ruleset, PATH_BENEATH, &attr, 0).
                let r = unsafe {
                    libc::syscall(
                        libc::SYS_landlock_add_rule,
                        ll.ruleset.as_raw_fd(),
                        LANDLOCK_RULE_PATH_BENEATH,
                        &attr as *const PathBeneathAttr,
                        0u32,
                    )
                };
                let err = errno();
                // SAFETY: closes the fd opened above.
                unsafe { libc::close(fd) };
                if r < 0 {
                    return Err(io::Error::from_raw_os_error(err));
                }
            }
        }
        m.set(STEP_NO_NEW_PRIVS);
        // SAFETY: plain prctl.
        cvt(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) })?;
        if let Some(ll) = &self.landlock {
            m.set(STEP_LANDLOCK);
            // SAFETY: landlock_restrict_self(ruleset, 0).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_landlock_restrict_self,
                    ll.ruleset.as_raw_fd(),
                    0u32,
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        m.set(STEP_SECCOMP);
        let prog = libc::sock_fprog {
            len: SECCOMP_FILTER.len() as u16,
            filter: SECCOMP_FILTER.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: the program is a static array that outlives the call; the
        // kernel copies it. no_new_privs is set above, as an unprivileged
        // process's filter requires.
        cvt(unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER as libc::c_ulong,
                &prog as *const libc::sock_fprog as libc::c_ulong,
                0,
                0,
            )
        })?;
        m.set(STEP_DONE);
        Ok(())
    }

    fn apply_mounts(&self, plan: &MountPlan) -> io::Result<()> {
        let m = &self.marker;
        m.set(STEP_PRIVATE);
        // SAFETY (all calls below): NUL-terminated paths or null pointers.
        cvt(unsafe {
            libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        })?;
        m.set(STEP_OPEN);
        for e in &plan.entries {
            if let RootEntry::Bind { source, fd, .. } = e {
                let f = unsafe { libc::open(source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
                if f < 0 {
                    return Err(io::Error::last_os_error());
                }
                fd.store(f, Ordering::SeqCst);
            }
        }
        m.set(STEP_TMPFS);
        mount(
            Some(c"tmpfs"),
            &plan.staging,
            Some(c"tmpfs"),
            libc::MS_NOSUID | libc::MS_NODEV,
            Some(&plan.root_data),
        )?;
        m.set(STEP_BIND);
        for e in &plan.entries {
            match e {
                RootEntry::Bind {
                    fd,
                    mkdirs: dirs,
                    file,
                    target,
                    ..
                } => {
                    mkdirs(dirs)?;
                    if *file {
                        let f = unsafe {
                            libc::open(
                                target.as_ptr(),
                                libc::O_WRONLY | libc::O_CREAT | libc::O_CLOEXEC,
                                0o644 as libc::c_uint,
                            )
                        };
                        if f < 0 {
                            return Err(io::Error::last_os_error());
                        }
                        unsafe { libc::close(f) };
                    } else {
                        mkdirs(std::slice::from_ref(target))?;
                    }
                    let f = fd.load(Ordering::SeqCst);
                    let source = FdPath::new(f);
                    cvt(unsafe {
                        libc::mount(
                            source.as_ptr(),
                            target.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        )
                    })?;
                    unsafe { libc::close(f) };
                }
                RootEntry::Symlink {
                    mkdirs: dirs,
                    contents,
                    target,
                } => {
                    mkdirs(dirs)?;
                    if unsafe { libc::symlink(contents.as_ptr(), target.as_ptr()) } < 0
                        && errno() != libc::EEXIST
                    {
                        return Err(io::Error::last_os_error());
                    }
                }
                RootEntry::Proc {
                    mkdirs: dirs,
                    target,
                } => {
                    mkdirs(dirs)?;
                    mkdirs(std::slice::from_ref(target))?;
                    mount(
                        Some(c"proc"),
                        target,
                        Some(c"proc"),
                        libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
                        None,
                    )?;
                }
                RootEntry::Tmpfs {
                    mkdirs: dirs,
                    target,
                    data,
                } => {
                    mkdirs(dirs)?;
                    mkdirs(std::slice::from_ref(target))?;
                    mount(
                        Some(c"tmpfs"),
                        target,
                        Some(c"tmpfs"),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        Some(data),
                    )?;
                }
            }
        }
        m.set(STEP_READONLY);
        for e in &plan.entries {
            if let RootEntry::Bind {
                target,
                readonly: Some(flags),
                sub_readonly,
                ..
            } = e
            {
                mount(
                    None,
                    target,
                    None,
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                    None,
                )?;
                for (sub, flags) in sub_readonly {
                    let _ = mount(
                        None,
                        sub,
                        None,
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                        None,
                    );
                }
            }
        }
        m.set(STEP_PIVOT);
        cvt(unsafe { libc::chdir(plan.staging.as_ptr()) })?;
        let r = unsafe { libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // The old root is stacked on the new one: detach it.
        cvt(unsafe { libc::umount2(c".".as_ptr(), libc::MNT_DETACH) })?;
        cvt(unsafe { libc::chdir(c"/".as_ptr()) })?;
        mount(
            None,
            c"/",
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            None,
        )?;
        Ok(())
    }
}

/// A process view of its own for a command that is otherwise not confined (a
/// hook): a new PID namespace whose pid 1 mounts a fresh proc on `/proc` in a
/// private mount namespace, so the command sees only its own processes — not
/// claw's `/proc/<pid>/environ` nor any other process of the host — and keeps
/// the file system, the network and its environment.
pub(super) struct ProcView {
    /// Not root: a user namespace is needed, with these maps (own uid and gid
    /// only). After the mounts every capability is dropped, so the command
    /// cannot unmount the fresh proc and uncover the host's beneath it.
    /// Root (`None`): no user namespace (root keeps its capabilities and its
    /// access to every file); the host's `/proc` is detached before the fresh
    /// one is mounted, so there is nothing beneath to uncover.
    pub id_maps: Option<IdMaps>,
}

impl ProcView {
    /// Runs between `fork` and `exec`: raw system calls only.
    pub(super) fn apply(&self) -> io::Result<()> {
        match &self.id_maps {
            Some(maps) => {
                // SAFETY: plain system call.
                cvt(unsafe {
                    libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID)
                })?;
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &maps.uid_map)?;
                write_file(c"/proc/self/gid_map", &maps.gid_map)?;
            }
            // SAFETY: plain system call.
            None => cvt(unsafe { libc::unshare(libc::CLONE_NEWNS | libc::CLONE_NEWPID) })?,
        }
        enter_pid_namespace()?;
        mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)?;
        if self.id_maps.is_none() {
            // SAFETY: NUL-terminated path; EINVAL (nothing mounted) is fine.
            if unsafe { libc::umount2(c"/proc".as_ptr(), libc::MNT_DETACH) } < 0
                && errno() != libc::EINVAL
            {
                return Err(io::Error::last_os_error());
            }
        }
        mount(
            Some(c"proc"),
            c"/proc",
            Some(c"proc"),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None,
        )?;
        if self.id_maps.is_some() {
            drop_capabilities()?;
        }
        Ok(())
    }
}

/// Makes the calling process (just after `unshare(CLONE_NEWPID)`) a proxy and
/// returns in its child, which is pid 1 of the new PID namespace: a process
/// does not enter the PID namespace it creates, only its children do.
///
/// The proxy stays outside: it closes every descriptor it inherited (the
/// output pipes and `std`'s exec-error pipe belong to the child now, so the
/// spawn reports the child's exec and the pipes close when the command's
/// processes are gone), waits for the child and ends the way it ended (same
/// exit code, or the same signal), so the caller's process and its group
/// behave as before. The child dies with the proxy (`PR_SET_PDEATHSIG`), and
/// when pid 1 ends the kernel kills every process left in its namespace — a
/// `setsid` escapee cannot outlive the command even without a pids cgroup.
///
/// Runs between `fork` and `exec`: raw system calls only.
pub(super) fn enter_pid_namespace() -> io::Result<()> {
    // SAFETY: fork in a single-threaded child; both sides only make raw system calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: plain prctl.
        cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) })?;
        return Ok(());
    }
    proxy(pid)
}

/// The proxy's side of [`enter_pid_namespace`]: never returns.
fn proxy(child: libc::pid_t) -> ! {
    // SAFETY (whole function): raw system calls on local data; ends with _exit
    // or a fatal signal.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) < 0 {
            for fd in 0..1024 {
                libc::close(fd);
            }
        }
        let mut status = 0;
        loop {
            let r = libc::waitpid(child, &mut status, 0);
            if r == child {
                break;
            }
            if r < 0 && errno() != libc::EINTR {
                libc::_exit(127);
            }
        }
        if libc::WIFEXITED(status) {
            libc::_exit(libc::WEXITSTATUS(status));
        }
        let sig = libc::WTERMSIG(status);
        // End by the same signal: default action, unblocked, raised.
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &act, std::ptr::null_mut());
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
}

/// `/proc/self/fd/N` formatted on the stack (no allocation).
struct FdPath {
    buf: [u8; 32],
}

impl FdPath {
    fn new(fd: i32) -> FdPath {
        const PREFIX: &[u8] = b"/proc/self/fd/";
        let mut buf = [0u8; 32];
        buf[..PREFIX.len()].copy_from_slice(PREFIX);
        let mut digits = [0u8; 10];
        let mut n = fd.max(0) as u32;
        let mut len = 0;
        loop {
            digits[len] = b'0' + (n % 10) as u8;
            len += 1;
            n /= 10;
            if n == 0 || len == digits.len() {
                break;
            }
        }
        for i in 0..len {
            buf[PREFIX.len() + i] = digits[len - 1 - i];
        }
        FdPath { buf }
    }

    fn as_ptr(&self) -> *const libc::c_char {
        self.buf.as_ptr() as *const libc::c_char
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_formatted_without_allocation() {
        for (fd, text) in [
            (0, "/proc/self/fd/0"),
            (7, "/proc/self/fd/7"),
            (1234567, "/proc/self/fd/1234567"),
        ] {
            let p = FdPath::new(fd);
            // SAFETY: the buffer is NUL-terminated (32 bytes, at most 24 used).
            let s = unsafe { CStr::from_ptr(p.as_ptr()) };
            assert_eq!(s.to_str().unwrap(), text);
        }
    }
}
