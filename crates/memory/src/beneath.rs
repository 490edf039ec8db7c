//! Opening paths *beneath* a directory without ever resolving outside it: the
//! primitive behind the agent's file jail (`agent::tools::jail`) and the memory
//! engine's symlink checks (`walk`, `memory get`).
//!
//! Every path is resolved relative to a directory file descriptor held for the
//! root, one component at a time, by the kernel: `openat2(2)` with
//! `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`. Where `openat2` is missing
//! (`ENOSYS`: kernels before 5.6, some seccomp filters) an equivalent walk in
//! user space opens each component with `O_PATH | O_NOFOLLOW`, reads symlinks
//! itself and keeps its own stack of directory descriptors for `..`.
//!
//! Semantics (both resolvers):
//! - `..` may not climb above the root; absolute paths and absolute symlinks are
//!   not resolved from `/`;
//! - symlinks are followed only while they stay beneath the root. A symlink whose
//!   target is written as an absolute path (or climbs out with `..` and comes back)
//!   is accepted when its canonical target is inside the root: that target is then
//!   re-opened from the root with `RESOLVE_NO_SYMLINKS`, so what is opened is
//!   always beneath the root, whatever changed on disk in between;
//! - what is opened is used through its descriptor: callers read, write and stat
//!   the fd, never the path again.
//!
//! Invariant: no function here returns a descriptor for an inode reached through
//! a path component outside the root. Known limit of the user-space walk only: a
//! directory renamed out of the root *while* a walk is inside it can let that one
//! walk finish outside (openat2 detects this race; the walk cannot).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// Most symlinks followed in one resolution (the kernel's limit too).
pub const MAX_SYMLINKS: usize = 40;
/// Times an `openat2` that reported a concurrent rename (`EAGAIN`) is retried.
const EAGAIN_RETRIES: usize = 16;

/// How paths are resolved beneath the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Resolver {
    /// The kernel's `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`.
    Openat2,
    /// The user-space walk with `O_PATH | O_NOFOLLOW` per component.
    Walk,
}

/// Errors opening beneath a root.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The path, or a symlink on the way, leads outside the root.
    #[error("`{path}` resolves outside {}", .root.display())]
    Outside { path: String, root: PathBuf },
    /// Creating a file where a symlink already stands (its target is missing):
    /// files are never created through a symlink.
    #[error(
        "`{path}` is a symlink whose target does not exist; no file is created through a symlink"
    )]
    DanglingSymlink { path: String },
    /// Any other failure (not found, permission, not a directory, ...).
    #[error("`{path}`: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
}

impl BeneathError {
    /// The OS error number of an `Io` error.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            BeneathError::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// True for a missing file or directory.
    pub fn is_not_found(&self) -> bool {
        matches!(self, BeneathError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// As an `io::Error` (escapes become `PermissionDenied` carrying this error).
    pub fn into_io(self) -> io::Error {
        match self {
            BeneathError::Io { source, .. } => source,
            other => io::Error::new(io::ErrorKind::PermissionDenied, other),
        }
    }
}

const PROBE_UNKNOWN: u8 = 0;
const PROBE_YES: u8 = 1;
const PROBE_NO: u8 = 2;
static OPENAT2: AtomicU8 = AtomicU8::new(PROBE_UNKNOWN);

/// The resolver this process uses: `Openat2` unless probing it said `ENOSYS`
/// (or `EPERM`, what older seccomp profiles answer for syscalls they do not know).
pub fn default_resolver() -> Resolver {
    if OPENAT2.load(Ordering::Relaxed) == PROBE_UNKNOWN {
        let dot = c".";
        let r = sys_openat2(libc::AT_FDCWD, dot, libc::O_PATH, 0, libc::RESOLVE_BENEATH);
        let state = match r {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => PROBE_NO,
            _ => PROBE_YES,
        };
        OPENAT2.store(state, Ordering::Relaxed);
    }
    if OPENAT2.load(Ordering::Relaxed) == PROBE_NO {
        Resolver::Walk
    } else {
        Resolver::Openat2
    }
}

/// `struct open_how` of linux/openat2.h (libc's is `non_exhaustive`).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn sys_openat2(
    dirfd: RawFd,
    path: &std::ffi::CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
    resolve: u64,
) -> io::Result<OwnedFd> {
    let flags = flags | libc::O_CLOEXEC;
    let how = OpenHow {
        flags: flags as u32 as u64,
        mode: if flags & (libc::O_CREAT | libc::O_TMPFILE) != 0 {
            u64::from(mode)
        } else {
            0
        },
        resolve,
    };
    loop {
        // SAFETY: `path` is a valid NUL-terminated string and `how` a valid
        // `open_how` of the size passed; the kernel only reads both.
        let r = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                path.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if r >= 0 {
            // SAFETY: the syscall returned a new descriptor that nothing else owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn sys_openat(
    dirfd: RawFd,
    name: &OsStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let c = cstring(name)?;
    loop {
        // SAFETY: valid NUL-terminated path; the mode argument is read only with O_CREAT.
        let r = unsafe {
            libc::openat(
                dirfd,
                c.as_ptr(),
                flags | libc::O_CLOEXEC,
                libc::c_uint::from(mode),
            )
        };
        if r >= 0 {
            // SAFETY: a new descriptor owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(r) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

fn sys_readlinkat(dirfd: RawFd, name: &OsStr) -> io::Result<OsString> {
    use std::os::unix::ffi::OsStringExt;
    let c = cstring(name)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: `buf` is writable for `buf.len()` bytes.
    let n = unsafe {
        libc::readlinkat(
            dirfd,
            c.as_ptr(),
            buf.as_mut_ptr() as *mut libc::c_char,
            buf.len(),
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n >= buf.len() {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    buf.truncate(n);
    Ok(OsString::from_vec(buf))
}

/// `fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW)`.
pub fn lstat_at(dirfd: RawFd, name: &OsStr) -> io::Result<libc::stat> {
    let c = cstring(name)?;
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and a writable `stat`.
    let r = unsafe { libc::fstatat(dirfd, c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `fstat(fd)`.
pub fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a writable `stat`; a bad fd is reported as EBADF.
    let r = unsafe { libc::fstat(fd, &mut st) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

fn is_type(st: &libc::stat, t: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == t
}

/// The kind of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryType {
    File,
    Dir,
    Symlink,
    Other,
}

/// One entry of [`read_dir`]: name, kind (not following symlinks), size of regular files.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub name: OsString,
    pub kind: EntryType,
    pub size: Option<u64>,
}

/// Lists the directory open at `dir` (any descriptor of a directory, `O_PATH`
/// included), without `.` and `..`. Entries are stat'ed relative to the
/// descriptor, never by path.
pub fn read_dir(dir: &OwnedFd) -> io::Result<Vec<Entry>> {
    let fd = sys_openat(
        dir.as_raw_fd(),
        OsStr::new("."),
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    )?;
    let raw = fd.as_raw_fd();
    // SAFETY: `raw` is an open directory descriptor; on success `fdopendir` owns it
    // (released by `closedir` below), so `fd` must not close it as well.
    let stream = unsafe { libc::fdopendir(raw) };
    if stream.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(fd);
    let mut out = Vec::new();
    let result = loop {
        // SAFETY: clearing errno distinguishes the end of the stream from an error.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is a valid DIR* until closedir.
        let ent = unsafe { libc::readdir(stream) };
        if ent.is_null() {
            let e = io::Error::last_os_error();
            break match e.raw_os_error() {
                Some(0) | None => Ok(()),
                _ => Err(e),
            };
        }
        // SAFETY: `d_name` is NUL-terminated within the dirent readdir returned.
        let name = unsafe { std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()) };
        let name = OsStr::from_bytes(name.to_bytes());
        if name == "." || name == ".." {
            continue;
        }
        let (kind, size) = match lstat_at(raw, name) {
            Ok(st) if is_type(&st, libc::S_IFLNK) => (EntryType::Symlink, None),
            Ok(st) if is_type(&st, libc::S_IFDIR) => (EntryType::Dir, None),
            Ok(st) if is_type(&st, libc::S_IFREG) => (EntryType::File, Some(st.st_size as u64)),
            _ => (EntryType::Other, None),
        };
        out.push(Entry {
            name: name.to_os_string(),
            kind,
            size,
        });
    };
    // SAFETY: `stream` came from fdopendir and is closed once.
    unsafe { libc::closedir(stream) };
    result.map(|()| out)
}

/// A directory held open; every path is opened beneath it.
#[derive(Debug)]
pub struct Beneath {
    dir: OwnedFd,
    root: PathBuf,
    resolver: Resolver,
}

impl Beneath {
    /// Holds `root` open with the process's [`default_resolver`].
    pub fn open(root: &Path) -> io::Result<Beneath> {
        Self::open_with(root, default_resolver())
    }

    /// Holds `root` open with the given resolver (tests exercise both).
    pub fn open_with(root: &Path, resolver: Resolver) -> io::Result<Beneath> {
        let canonical = root.canonicalize()?;
        let dir = sys_openat(
            libc::AT_FDCWD,
            canonical.as_os_str(),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )?;
        Ok(Beneath {
            dir,
            root: canonical,
            resolver,
        })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    fn outside(&self, rel: &Path) -> BeneathError {
        BeneathError::Outside {
            path: rel.display().to_string(),
            root: self.root.clone(),
        }
    }

    fn io(&self, rel: &Path, source: io::Error) -> BeneathError {
        BeneathError::Io {
            path: rel.display().to_string(),
            source,
        }
    }

    /// Opens `rel` (relative to the root; `..` and symlinks allowed while they
    /// stay beneath it) with `open(2)` `flags`. Returns [`BeneathError::Outside`]
    /// for anything that leaves the root.
    pub fn open_fd(&self, rel: &Path, flags: libc::c_int) -> Result<OwnedFd, BeneathError> {
        match self.resolve(rel, flags, false) {
            Err(BeneathError::Outside { .. }) => {
                // An absolute symlink, or `..` out and back in, may still land
                // inside: re-open its canonical target without following any link.
                let Some(inner) = self.canonical_inside(rel) else {
                    return Err(self.outside(rel));
                };
                self.resolve(&inner, flags, true).map_err(|e| {
                    if e.raw_os_error() == Some(libc::ELOOP) {
                        self.outside(rel)
                    } else {
                        e
                    }
                })
            }
            other => other,
        }
    }

    /// [`Beneath::open_fd`] as a `File`.
    pub fn open_file(&self, rel: &Path, flags: libc::c_int) -> Result<File, BeneathError> {
        self.open_fd(rel, flags).map(File::from)
    }

    /// True when `rel` exists and resolves beneath the root (what a later
    /// [`Beneath::open_fd`] would accept).
    pub fn contains(&self, rel: &Path) -> Result<bool, BeneathError> {
        match self.open_fd(rel, libc::O_PATH) {
            Ok(_) => Ok(true),
            Err(BeneathError::Outside { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn canonical_inside(&self, rel: &Path) -> Option<PathBuf> {
        if rel.is_absolute() {
            return None;
        }
        let canonical = self.root.join(rel).canonicalize().ok()?;
        canonical
            .strip_prefix(&self.root)
            .ok()
            .map(Path::to_path_buf)
    }

    fn resolve(
        &self,
        rel: &Path,
        flags: libc::c_int,
        no_symlinks: bool,
    ) -> Result<OwnedFd, BeneathError> {
        if rel.is_absolute() {
            return Err(self.outside(rel));
        }
        if self.resolver == Resolver::Openat2 {
            let path = if rel.as_os_str().is_empty() {
                Path::new(".")
            } else {
                rel
            };
            let c = cstring(path.as_os_str()).map_err(|e| self.io(rel, e))?;
            let mut resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_MAGICLINKS;
            if no_symlinks {
                resolve |= libc::RESOLVE_NO_SYMLINKS;
            }
            for _ in 0..EAGAIN_RETRIES {
                match sys_openat2(self.dir.as_raw_fd(), &c, flags, 0, resolve) {
                    Ok(fd) => return Ok(fd),
                    Err(e) => match e.raw_os_error() {
                        Some(libc::EXDEV) => return Err(self.outside(rel)),
                        Some(libc::EAGAIN) => continue,
                        Some(libc::ENOSYS) => {
                            OPENAT2.store(PROBE_NO, Ordering::Relaxed);
                            return self.walk(rel, flags, no_symlinks);
                        }
                        _ => return Err(self.io(rel, e)),
                    },
                }
            }
            return Err(self.io(rel, io::Error::from_raw_os_error(libc::EAGAIN)));
        }
        self.walk(rel, flags, no_symlinks)
    }

    /// The user-space resolver: one component at a time, `O_PATH | O_NOFOLLOW`,
    /// symlinks read and expanded here, `..` popping our own descriptor stack.
    fn walk(
        &self,
        rel: &Path,
        flags: libc::c_int,
        no_symlinks: bool,
    ) -> Result<OwnedFd, BeneathError> {
        let mut pending: std::collections::VecDeque<OsString> = std::collections::VecDeque::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => pending.push_back(n.to_os_string()),
                Component::ParentDir => pending.push_back(OsString::from("..")),
                Component::CurDir => {}
                Component::RootDir | Component::Prefix(_) => return Err(self.outside(rel)),
            }
        }
        let err = |e: io::Error| self.io(rel, e);
        let root = sys_openat(
            self.dir.as_raw_fd(),
            OsStr::new("."),
            libc::O_PATH | libc::O_DIRECTORY,
            0,
        )
        .map_err(err)?;
        let mut stack: Vec<OwnedFd> = vec![root];
        let mut links = 0usize;
        while let Some(name) = pending.pop_front() {
            let cur = stack.last().map(|f| f.as_raw_fd()).unwrap_or(-1);
            if name == ".." {
                if stack.len() == 1 {
                    return Err(self.outside(rel));
                }
                stack.pop();
                continue;
            }
            let last = pending.is_empty();
            let probe = sys_openat(cur, &name, libc::O_PATH | libc::O_NOFOLLOW, 0).map_err(err)?;
            let st = fstat(probe.as_raw_fd()).map_err(err)?;
            if is_type(&st, libc::S_IFLNK) {
                let final_nofollow = last && flags & libc::O_NOFOLLOW != 0;
                if no_symlinks || final_nofollow {
                    return Err(err(io::Error::from_raw_os_error(libc::ELOOP)));
                }
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(err(io::Error::from_raw_os_error(libc::ELOOP)));
                }
                let target = sys_readlinkat(cur, &name).map_err(err)?;
                let target = Path::new(&target);
                if target.has_root() {
                    return Err(self.outside(rel));
                }
                let mut parts: Vec<OsString> = Vec::new();
                for c in target.components() {
                    match c {
                        Component::Normal(n) => parts.push(n.to_os_string()),
                        Component::ParentDir => parts.push(OsString::from("..")),
                        Component::CurDir => {}
                        Component::RootDir | Component::Prefix(_) => {
                            return Err(self.outside(rel));
                        }
                    }
                }
                for p in parts.into_iter().rev() {
                    pending.push_front(p);
                }
                continue;
            }
            if last {
                if flags & libc::O_PATH != 0 && flags & libc::O_DIRECTORY == 0 {
                    return Ok(probe);
                }
                // O_NOFOLLOW: if it was swapped for a symlink since the probe, fail.
                return sys_openat(cur, &name, flags | libc::O_NOFOLLOW, 0).map_err(err);
            }
            if !is_type(&st, libc::S_IFDIR) {
                return Err(err(io::Error::from_raw_os_error(libc::ENOTDIR)));
            }
            stack.push(probe);
        }
        // The path ended on a directory (empty, `.` or `..` last).
        let top = stack.last().map(|f| f.as_raw_fd()).unwrap_or(-1);
        sys_openat(top, OsStr::new("."), flags, 0).map_err(err)
    }

    /// Opens the directory `rel`, creating missing directories beneath the root
    /// (each with `mkdirat` in a directory already resolved beneath it, so a
    /// symlink is never created through). Returns an `O_PATH` descriptor.
    pub fn create_dir_all(&self, rel: &Path) -> Result<OwnedFd, BeneathError> {
        let dir_flags = libc::O_PATH | libc::O_DIRECTORY;
        match self.open_fd(rel, dir_flags) {
            Err(e) if e.is_not_found() => {
                let Some(Component::Normal(name)) = rel.components().next_back() else {
                    return Err(e);
                };
                let parent = rel.parent().unwrap_or(Path::new(""));
                let parent_fd = self.create_dir_all(parent)?;
                let c = cstring(name).map_err(|e| self.io(rel, e))?;
                // SAFETY: valid descriptor and NUL-terminated name.
                let r = unsafe { libc::mkdirat(parent_fd.as_raw_fd(), c.as_ptr(), 0o777) };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.raw_os_error() != Some(libc::EEXIST) {
                        return Err(self.io(rel, e));
                    }
                }
                self.open_fd(rel, dir_flags)
            }
            other => other,
        }
    }

    /// Creates the new regular file `rel` (missing parents too) and opens it for
    /// writing: `O_CREAT | O_EXCL | O_NOFOLLOW` in its parent's descriptor, so it
    /// fails if anything — a dangling symlink included — already stands there.
    pub fn create_new(&self, rel: &Path, mode: libc::mode_t) -> Result<File, BeneathError> {
        let Some(Component::Normal(name)) = rel.components().next_back() else {
            return Err(self.io(rel, io::Error::from_raw_os_error(libc::EISDIR)));
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        let parent_fd = self.create_dir_all(parent)?;
        match sys_openat(
            parent_fd.as_raw_fd(),
            name,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NOCTTY,
            mode,
        ) {
            Ok(fd) => Ok(File::from(fd)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                match lstat_at(parent_fd.as_raw_fd(), name) {
                    Ok(st) if is_type(&st, libc::S_IFLNK) => Err(BeneathError::DanglingSymlink {
                        path: rel.display().to_string(),
                    }),
                    _ => Err(self.io(rel, e)),
                }
            }
            Err(e) => Err(self.io(rel, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("sub/deep")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("sub/a.txt"), "inside").unwrap();
        std::fs::write(outside.join("secret"), "secret").unwrap();
        (dir, root, outside)
    }

    fn read(b: &Beneath, rel: &str) -> Result<String, BeneathError> {
        use std::io::Read;
        let mut f = b.open_file(Path::new(rel), libc::O_RDONLY)?;
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        Ok(s)
    }

    #[test]
    fn both_resolvers_agree() {
        let (_d, root, outside) = setup();
        let sym = |t: &Path, l: &str| std::os::unix::fs::symlink(t, root.join(l)).unwrap();
        sym(&outside, "out-dir");
        sym(&outside.join("secret"), "out-abs");
        sym(Path::new("../outside/secret"), "out-rel");
        sym(Path::new("sub/a.txt"), "in-rel");
        sym(&root.join("sub/a.txt"), "in-abs");
        sym(Path::new("../../sub/a.txt"), "sub/deep/up");
        sym(Path::new("loop1"), "loop2");
        sym(Path::new("loop2"), "loop1");
        for resolver in [Resolver::Openat2, Resolver::Walk] {
            let b = Beneath::open_with(&root, resolver).unwrap();
            for ok in [
                "sub/a.txt",
                "in-rel",
                "in-abs",
                "sub/deep/up",
                "sub/../sub/a.txt",
            ] {
                assert_eq!(read(&b, ok).unwrap(), "inside", "{resolver:?} {ok}");
            }
            for bad in [
                "out-dir/secret",
                "out-abs",
                "out-rel",
                "../outside/secret",
                "sub/../../outside/secret",
                "/etc/passwd",
            ] {
                assert!(
                    matches!(read(&b, bad), Err(BeneathError::Outside { .. })),
                    "{resolver:?} {bad}"
                );
            }
            assert_eq!(
                read(&b, "loop1").unwrap_err().raw_os_error(),
                Some(libc::ELOOP),
                "{resolver:?}"
            );
            assert!(read(&b, "missing").unwrap_err().is_not_found());
            assert!(b.contains(Path::new("in-abs")).unwrap());
            assert!(!b.contains(Path::new("out-dir")).unwrap());
        }
    }

    #[test]
    fn create_never_goes_through_a_symlink() {
        let (_d, root, outside) = setup();
        std::os::unix::fs::symlink(outside.join("new"), root.join("dangling")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out-dir")).unwrap();
        for resolver in [Resolver::Openat2, Resolver::Walk] {
            let b = Beneath::open_with(&root, resolver).unwrap();
            assert!(matches!(
                b.create_new(Path::new("dangling"), 0o644),
                Err(BeneathError::DanglingSymlink { .. })
            ));
            assert!(matches!(
                b.create_new(Path::new("out-dir/x/y"), 0o644),
                Err(BeneathError::Outside { .. })
            ));
            assert!(!outside.join("new").exists() && !outside.join("x").exists());
            let name = format!("made/{resolver:?}/f.txt");
            b.create_new(Path::new(&name), 0o644).unwrap();
            assert!(root.join(&name).is_file());
        }
    }

    #[test]
    fn read_dir_lists_kinds_without_following() {
        let (_d, root, outside) = setup();
        std::os::unix::fs::symlink(&outside, root.join("sub/link")).unwrap();
        let b = Beneath::open(&root).unwrap();
        let fd = b.open_fd(Path::new("sub"), libc::O_PATH).unwrap();
        let mut entries = read_dir(&fd).unwrap();
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let got: Vec<(String, EntryType, Option<u64>)> = entries
            .into_iter()
            .map(|e| (e.name.to_string_lossy().into_owned(), e.kind, e.size))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a.txt".into(), EntryType::File, Some(6)),
                ("deep".into(), EntryType::Dir, None),
                ("link".into(), EntryType::Symlink, None),
            ]
        );
    }
}
