//! The freshness walk's directory cache (`<state>/memory.dirs`): each directory's
//! `getdents64` listing as the last walk read it, with the directory's stat.
//! Without a watcher a search must stat every file (an edit in place changes
//! only the file), but it need not list a directory that has not changed: the
//! kernel sets a directory's ctime on every change to its entries (and a user
//! cannot set ctime), so a directory whose device, inode, size, mtime and
//! ctime are all as cached still has the cached entries. On the notes garden
//! the listing of its one big directory (6,844 entries) is most of the walk's
//! cost after the stats.
//!
//! Invariant: a listing is cached only when its directory's ctime is older than
//! the listing by [`SETTLE_NS`], so no later change can leave the ctime as it was
//! (timestamps are coarse: two changes in one clock tick share a ctime, and a
//! tick is far below a second on every Linux file system but FAT's 2 s). A
//! cache that cannot be read, or fails its checksum, is ignored; the walk then
//! lists every directory, as it does without a cache. Only local file systems
//! that keep ctimes as the kernel sets them use the cache (`rawdir::keeps_ctimes`:
//! not NFS, not FUSE). The cache holds names only (no contents), in a private
//! file (0600) beside the database.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How much older than its listing a directory's ctime must be for the listing
/// to be cached.
pub const SETTLE_NS: i64 = 3_000_000_000;

/// The cache file's name in the state directory.
pub const FILE_NAME: &str = "memory.dirs";

const MAGIC: &[u8; 16] = b"claw-dirs v1\n\0\0\0";

/// What identifies a directory's state: any change to its entries changes
/// the ctime (and usually mtime and size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirStamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl DirStamp {
    /// The stamp of a directory's `fstat`.
    pub fn of(st: &libc::stat) -> DirStamp {
        let ns = |s: i64, n: i64| s.saturating_mul(1_000_000_000).saturating_add(n);
        DirStamp {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime_ns: ns(st.st_mtime, st.st_mtime_nsec),
            ctime_ns: ns(st.st_ctime, st.st_ctime_nsec),
        }
    }

    fn fields(&self) -> [i64; 5] {
        [
            self.dev as i64,
            self.ino as i64,
            self.size,
            self.mtime_ns,
            self.ctime_ns,
        ]
    }

    fn from_fields(f: [i64; 5]) -> DirStamp {
        DirStamp {
            dev: f[0] as u64,
            ino: f[1] as u64,
            size: f[2],
            mtime_ns: f[3],
            ctime_ns: f[4],
        }
    }
}

/// The directory cache of one walk: read at its start, written at its end
/// when anything in it changed.
pub struct DirCache {
    file: Option<PathBuf>,
    settle_ns: i64,
    /// The file's bytes, and where each directory's record lies in them.
    old: Vec<u8>,
    old_dirs: HashMap<Vec<u8>, (DirStamp, std::ops::Range<usize>)>,
    /// What this walk saw: directories reused from `old` (their ranges) and
    /// directories listed anew and settled (their bytes).
    kept: Vec<(Vec<u8>, DirStamp, Kept)>,
    hits: usize,
}

enum Kept {
    Old(std::ops::Range<usize>),
    New(Vec<u8>),
}

impl DirCache {
    /// The cache kept in `state_dir` (an unreadable or damaged file reads as
    /// empty).
    pub fn load(state_dir: &Path) -> DirCache {
        let file = state_dir.join(FILE_NAME);
        let old = std::fs::read(&file).unwrap_or_default();
        let (old, old_dirs) = match parse(&old) {
            Some(dirs) => (old, dirs),
            None => (Vec::new(), HashMap::new()),
        };
        DirCache {
            file: Some(file),
            settle_ns: SETTLE_NS,
            old,
            old_dirs,
            kept: Vec::new(),
            hits: 0,
        }
    }

    /// Use the cache without writing it back: a walk of some sources only
    /// would drop the other sources' directories from the file.
    pub fn read_only(mut self) -> DirCache {
        self.file = None;
        self
    }

    /// Cache listings whose directory changed `settle_ns` before them or
    /// earlier (tests shorten [`SETTLE_NS`]).
    pub fn with_settle_ns(mut self, settle_ns: i64) -> DirCache {
        self.settle_ns = settle_ns;
        self
    }

    /// The cached listing of `dir` when its stamp is still `now`.
    pub fn reuse(&mut self, dir: &Path, now: &DirStamp) -> Option<&[u8]> {
        let key = dir.as_os_str().as_bytes();
        let (stamp, range) = self.old_dirs.get(key)?;
        if stamp != now {
            return None;
        }
        self.hits += 1;
        self.kept
            .push((key.to_vec(), *stamp, Kept::Old(range.clone())));
        self.old.get(range.clone())
    }

    /// `dir` was listed (its raw `getdents64` bytes), with `stamp` taken
    /// before the listing began at `listed_at_ns` (wall clock).
    pub fn record(&mut self, dir: &Path, stamp: DirStamp, listed_at_ns: i64, listing: &[u8]) {
        if stamp.ctime_ns.saturating_add(self.settle_ns) < listed_at_ns {
            let key = dir.as_os_str().as_bytes().to_vec();
            self.kept.push((key, stamp, Kept::New(listing.to_vec())));
        }
    }

    /// Directories whose cached listing served this walk.
    pub fn hits(&self) -> usize {
        self.hits
    }

    /// Write what this walk saw, unless it is what the file holds already
    /// (atomically: a temporary file renamed over it). A cache is an
    /// optimisation: a failure to write it is not an error of the walk.
    pub fn save(self) {
        let Some(file) = &self.file else {
            return;
        };
        let unchanged = self.hits == self.old_dirs.len()
            && self.kept.iter().all(|k| matches!(k.2, Kept::Old(_)));
        if unchanged {
            return;
        }
        let mut out = Vec::with_capacity(self.old.len().max(4096));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(self.kept.len() as u64).to_le_bytes());
        for (dir, stamp, listing) in &self.kept {
            let bytes: &[u8] = match listing {
                Kept::Old(range) => &self.old[range.clone()],
                Kept::New(bytes) => bytes,
            };
            out.extend_from_slice(&(dir.len() as u64).to_le_bytes());
            out.extend_from_slice(dir);
            for f in stamp.fields() {
                out.extend_from_slice(&f.to_le_bytes());
            }
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        let sum = checksum(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        // A cache: a failed write only costs the next walk its listings.
        let _ = claw_base::fs::write_atomic(file, &out, claw_base::fs::Durability::Cache);
    }
}

/// FNV-1a over 8-byte words (a torn or damaged file must not pass for a cache).
fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h ^= u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in words.remainder() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

type Dirs = HashMap<Vec<u8>, (DirStamp, std::ops::Range<usize>)>;

/// The records of a cache file; `None` when it is not one, whole.
fn parse(bytes: &[u8]) -> Option<Dirs> {
    let body_len = bytes.len().checked_sub(8)?;
    let (body, sum) = bytes.split_at(body_len);
    if body.get(..MAGIC.len())? != MAGIC
        || checksum(body) != u64::from_le_bytes(sum.try_into().ok()?)
    {
        return None;
    }
    let mut at = MAGIC.len();
    let u64_at = |at: &mut usize| -> Option<u64> {
        let v = u64::from_le_bytes(body.get(*at..*at + 8)?.try_into().ok()?);
        *at += 8;
        Some(v)
    };
    let count = u64_at(&mut at)?;
    let mut dirs = HashMap::new();
    for _ in 0..count {
        let len = usize::try_from(u64_at(&mut at)?).ok()?;
        let dir = body.get(at..at.checked_add(len)?)?.to_vec();
        at += len;
        let mut f = [0i64; 5];
        for v in &mut f {
            *v = u64_at(&mut at)? as i64;
        }
        let len = usize::try_from(u64_at(&mut at)?).ok()?;
        let end = at.checked_add(len)?;
        body.get(at..end)?;
        dirs.insert(dir, (DirStamp::from_fields(f), at..end));
        at = end;
    }
    (at == body.len()).then_some(dirs)
}

/// The wall clock in nanoseconds since the epoch (what file times are in).
pub fn wall_clock_ns() -> i64 {
    crate::clock::Clock::System
        .system_time()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(ctime_ns: i64) -> DirStamp {
        DirStamp {
            dev: 1,
            ino: 2,
            size: 4096,
            mtime_ns: ctime_ns,
            ctime_ns,
        }
    }

    #[test]
    fn a_settled_listing_round_trips_and_an_unsettled_one_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let now = 100 * 1_000_000_000;
        // Read only (a walk of some sources): nothing is written.
        let mut c = DirCache::load(dir.path()).read_only();
        c.record(Path::new("/a"), stamp(1), now, b"listing a");
        c.save();
        assert!(!dir.path().join(FILE_NAME).exists());
        let mut c = DirCache::load(dir.path());
        assert!(c.reuse(Path::new("/a"), &stamp(1)).is_none());
        c.record(Path::new("/a"), stamp(1), now, b"listing a");
        // Changed 1 s before its listing: a change in the same tick could follow.
        c.record(
            Path::new("/b"),
            stamp(now - 1_000_000_000),
            now,
            b"listing b",
        );
        c.save();
        let mut c = DirCache::load(dir.path());
        assert_eq!(c.reuse(Path::new("/a"), &stamp(1)), Some(&b"listing a"[..]));
        assert!(
            c.reuse(Path::new("/b"), &stamp(now - 1_000_000_000))
                .is_none()
        );
        // Any field of the stamp that differs: listed anew.
        let mut moved = stamp(1);
        moved.ino = 3;
        assert!(c.reuse(Path::new("/a"), &moved).is_none());
        assert!(c.reuse(Path::new("/a"), &stamp(2)).is_none());
        assert_eq!(c.hits(), 1);
    }

    #[test]
    fn an_unchanged_cache_is_not_rewritten_and_a_damaged_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(FILE_NAME);
        let mut c = DirCache::load(dir.path());
        c.record(Path::new("/a"), stamp(1), i64::MAX, b"listing a");
        c.save();
        let written = std::fs::metadata(&file).unwrap().modified().unwrap();
        let mut c = DirCache::load(dir.path());
        assert!(c.reuse(Path::new("/a"), &stamp(1)).is_some());
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.save();
        assert_eq!(
            std::fs::metadata(&file).unwrap().modified().unwrap(),
            written
        );
        // A directory no longer walked drops out of the file.
        DirCache::load(dir.path()).save();
        assert!(DirCache::load(dir.path()).old_dirs.is_empty());
        // Damage: one byte flipped, or the file cut short.
        let mut c = DirCache::load(dir.path());
        c.record(Path::new("/a"), stamp(1), i64::MAX, b"listing a");
        c.save();
        let good = std::fs::read(&file).unwrap();
        for bad in [
            {
                let mut b = good.clone();
                b[30] ^= 1;
                b
            },
            good[..good.len() - 3].to_vec(),
            Vec::new(),
        ] {
            std::fs::write(&file, &bad).unwrap();
            let mut c = DirCache::load(dir.path());
            assert!(c.reuse(Path::new("/a"), &stamp(1)).is_none());
        }
    }
}
