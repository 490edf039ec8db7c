//! Directory listing and stat at the system-call level, for the freshness
//! walk (`walk::walk_stamps`): a directory is read whole with `getdents64`
//! into one buffer (no allocation per entry, names borrowed from it) and its
//! entries are stat'ed relative to its descriptor. The unsafe blocks are the
//! two system calls and the buffer they fill; each carries a SAFETY note.

use crate::dircache::{DirCache, DirStamp};
use std::os::fd::AsRawFd;
use std::path::Path;

/// A directory read whole with `getdents64` into one buffer, kept open for
/// stat'ing its entries relative to its fd.
pub struct RawDir {
    dir: std::fs::File,
    buf: Vec<u8>,
}

/// Offset of `d_name` in a `linux_dirent64` record (after `d_ino`, `d_off`,
/// `d_reclen`, `d_type`).
const DIRENT_NAME: usize = 19;

impl RawDir {
    /// Every entry of `path` (`None` when it cannot be opened; an error
    /// midway ends the listing there, as `read_dir` ends).
    pub fn read(path: &Path) -> Option<RawDir> {
        RawDir::read_with(path, None)
    }

    /// [`RawDir::read`] through the walk's directory cache: the cached listing
    /// when the directory's stamp is the cached one, else a fresh listing,
    /// which the cache keeps if it can (see `dircache`).
    pub fn read_with(path: &Path, mut cache: Option<&mut DirCache>) -> Option<RawDir> {
        use std::os::unix::fs::OpenOptionsExt;
        // Before the stat: the listing is at least this recent.
        let listed_at = cache.as_ref().map(|_| crate::dircache::wall_clock_ns());
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(path)
            .ok()?;
        let st = crate::beneath::fstat(dir.as_raw_fd()).ok();
        // Only where the file system keeps directory ctimes as the kernel sets them.
        if cache.is_some() && !keeps_ctimes(dir.as_raw_fd()) {
            cache = None;
        }
        let stamp = st.as_ref().map(DirStamp::of);
        if let (Some(cache), Some(stamp)) = (cache.as_deref_mut(), &stamp)
            && let Some(listing) = cache.reuse(path, stamp)
        {
            return Some(RawDir {
                dir,
                buf: listing.to_vec(),
            });
        }
        // A directory's size (ext4: the bytes of its entries' blocks) is close
        // to what `getdents64` returns for it: one allocation, no regrowth.
        let hint = st
            .map(|st| st.st_size.clamp(0, 64 << 20) as usize)
            .unwrap_or(0);
        let mut buf: Vec<u8> = Vec::with_capacity(hint.max(32 * 1024) + 32 * 1024);
        loop {
            if buf.capacity() - buf.len() < 32 * 1024 {
                buf.reserve(buf.capacity());
            }
            let spare = buf.spare_capacity_mut();
            // SAFETY: the kernel writes at most `spare.len()` bytes of whole
            // records into the spare capacity and returns how many.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    dir.as_raw_fd(),
                    spare.as_mut_ptr(),
                    spare.len(),
                )
            };
            if n <= 0 {
                break;
            }
            // SAFETY: the first `n` bytes of the spare capacity were written.
            unsafe { buf.set_len(buf.len() + n as usize) };
        }
        if let (Some(cache), Some(stamp), Some(at)) = (cache, stamp, listed_at) {
            cache.record(path, stamp, at, &buf);
        }
        Some(RawDir { dir, buf })
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> std::os::fd::RawFd {
        self.dir.as_raw_fd()
    }

    /// `(offset, name, d_type)` of every entry but `.` and `..` (the offset
    /// finds the name again: [`RawDir::name_at`]).
    pub fn entries(&self) -> impl Iterator<Item = (usize, &std::ffi::CStr, u8)> + '_ {
        let buf = &self.buf;
        let mut at = 0usize;
        std::iter::from_fn(move || {
            loop {
                let header = buf.get(at..at + DIRENT_NAME)?;
                let reclen = u16::from_ne_bytes([header[16], header[17]]) as usize;
                let d_type = header[18];
                let record = buf.get(at..at + reclen)?;
                if reclen <= DIRENT_NAME {
                    return None;
                }
                at += reclen;
                let name = std::ffi::CStr::from_bytes_until_nul(&record[DIRENT_NAME..]).ok()?;
                if name.to_bytes() != b"." && name.to_bytes() != b".." {
                    return Some((at - reclen + DIRENT_NAME, name, d_type));
                }
            }
        })
    }

    /// The name at `offset` (as [`RawDir::entries`] gave it).
    pub fn name_at(&self, offset: usize) -> Option<&std::ffi::CStr> {
        std::ffi::CStr::from_bytes_until_nul(self.buf.get(offset..)?).ok()
    }

    /// The entry's type: its `d_type`, or (a file system that does not fill
    /// it in) its `lstat`; `None` when that fails.
    pub fn file_type(&self, name: &std::ffi::CStr, d_type: u8) -> Option<u8> {
        if d_type != libc::DT_UNKNOWN {
            return Some(d_type);
        }
        let st = stat_at(self.fd(), name)?;
        Some(match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => libc::DT_REG,
            libc::S_IFDIR => libc::DT_DIR,
            libc::S_IFLNK => libc::DT_LNK,
            _ => libc::DT_UNKNOWN,
        })
    }
}

/// Whether the file system of `fd` is a local one whose directory ctimes the
/// kernel sets on every change of their entries (ext2/3/4, XFS, Btrfs, tmpfs,
/// F2FS, ZFS, bcachefs, overlayfs). Network and FUSE file systems may cache or
/// invent times; the directory cache is not used there (`dircache`).
pub fn keeps_ctimes(fd: std::os::fd::RawFd) -> bool {
    const LOCAL: [i64; 8] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // XFS
        0x9123_683E, // Btrfs
        0x0102_1994, // tmpfs
        0xF2F5_2010, // F2FS
        0x2FC1_2FC1, // ZFS
        0xCA45_1A4E, // bcachefs
        0x794C_7630, // overlayfs
    ];
    let mut sf = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `sf` is written on success and read only then.
    let rc = unsafe { libc::fstatfs(fd, sf.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: `fstatfs` returned 0: `sf` is initialised.
    let f_type = unsafe { sf.assume_init() }.f_type;
    #[allow(clippy::unnecessary_cast)] // `f_type`'s type differs between architectures
    let f_type = f_type as i64;
    LOCAL.contains(&f_type)
}

/// `lstat` of `name` relative to the directory `fd`.
pub fn stat_at(fd: std::os::fd::RawFd, name: &std::ffi::CStr) -> Option<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `name` is NUL-terminated and `st` is written on success.
    let rc = unsafe {
        libc::fstatat(
            fd,
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: `fstatat` returned 0: `st` is initialised.
    (rc == 0).then(|| unsafe { st.assume_init() })
}

/// The stamp of a stat, as `walk::mtime_ns` reads it from `Metadata`.
pub fn stamp_of(st: &libc::stat) -> crate::walk::Stamp {
    // A modification time before the epoch reads as 0, as `mtime_ns` has it.
    let mtime_ns = if st.st_mtime < 0 {
        0
    } else {
        (st.st_mtime as u128 * 1_000_000_000 + st.st_mtime_nsec as u128) as i64
    };
    crate::walk::Stamp {
        mtime_ns,
        size: st.st_size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_and_types_match_std_and_lstat() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("f.md"), "x").unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink("f.md", root.join("l")).unwrap();
        let raw = RawDir::read(root).unwrap();
        let mut got: Vec<(String, u8)> = raw
            .entries()
            .map(|(off, n, t)| {
                assert_eq!(raw.name_at(off), Some(n));
                (n.to_str().unwrap().to_string(), t)
            })
            .collect();
        got.sort();
        let want = [
            ("d".to_string(), libc::DT_DIR),
            ("f.md".to_string(), libc::DT_REG),
            ("l".to_string(), libc::DT_LNK),
        ];
        assert_eq!(got, want);
        // A file system that leaves `d_type` unknown: the type comes from lstat.
        for (name, t) in &want {
            let c = std::ffi::CString::new(name.as_str()).unwrap();
            assert_eq!(raw.file_type(&c, libc::DT_UNKNOWN), Some(*t), "{name}");
        }
        let c = std::ffi::CString::new("gone").unwrap();
        assert_eq!(raw.file_type(&c, libc::DT_UNKNOWN), None);
        let st = stat_at(raw.fd(), c"f.md").unwrap();
        assert_eq!(st.st_size, 1);
        // /proc is not a file system whose directory times the cache trusts.
        let proc_dir = std::fs::File::open("/proc").unwrap();
        assert!(!keeps_ctimes(proc_dir.as_raw_fd()));
        assert!(RawDir::read(&root.join("f.md")).is_none());
        assert!(RawDir::read(&root.join("missing")).is_none());
    }
}
