//! The index plan: diff what is on disk (paths + stat) against what the store
//! recorded, deciding per file: skip (stat unchanged), check (stat changed: hash
//! it, re-chunk only if the hash changed), add (new) or remove (gone). Files
//! remembered as skipped for cause stay skipped while their stat is unchanged.
//! Pure.

use crate::store::{FileRecord, SkippedRecord};
use crate::walk::DiskFile;
use std::collections::{HashMap, HashSet};

/// What to do with the files of one source.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Stat (mtime, size) equal to the stored record: nothing to do.
    pub unchanged: usize,
    /// Known files whose stat changed: hash, and re-index if the content changed.
    pub check: Vec<DiskFile>,
    /// Files not in the store yet.
    pub add: Vec<DiskFile>,
    /// Stored paths no longer on disk.
    pub remove: Vec<String>,
    /// Files remembered as skipped whose stat is unchanged: still skipped,
    /// not read again.
    pub skipped: Vec<String>,
    /// Skipped-file records whose file is gone from disk.
    pub forget: Vec<String>,
}

impl Plan {
    /// Number of files that need reading.
    pub fn to_read(&self) -> usize {
        self.check.len() + self.add.len()
    }
}

/// Diff `disk` against `stored`. With `force`, every file on disk is re-read.
pub fn plan(disk: &[DiskFile], stored: &HashMap<String, FileRecord>, force: bool) -> Plan {
    plan_with_skipped(disk, stored, &HashMap::new(), force)
}

/// [`plan`], also given the files remembered as skipped: one whose stat is
/// unchanged stays skipped (not new, not read); a changed one is re-examined
/// (planned as new). With `force`, every file on disk is re-read.
pub fn plan_with_skipped(
    disk: &[DiskFile],
    stored: &HashMap<String, FileRecord>,
    skipped: &HashMap<String, SkippedRecord>,
    force: bool,
) -> Plan {
    let mut p = Plan::default();
    let mut seen: HashSet<&str> = HashSet::with_capacity(disk.len());
    for f in disk {
        seen.insert(f.rel.as_str());
        match stored.get(&f.rel) {
            None => match skipped.get(&f.rel) {
                Some(s) if !force && s.mtime_ns == f.mtime_ns && s.size == f.size => {
                    p.skipped.push(f.rel.clone());
                }
                _ => p.add.push(f.clone()),
            },
            Some(r) if !force && r.mtime_ns == f.mtime_ns && r.size == f.size => p.unchanged += 1,
            Some(_) => p.check.push(f.clone()),
        }
    }
    p.remove = unseen(stored.keys(), &seen);
    p.forget = unseen(skipped.keys(), &seen);
    p
}

/// The recorded paths `keys` the walk did not see, sorted.
fn unseen<'a>(keys: impl Iterator<Item = &'a String>, seen: &HashSet<&str>) -> Vec<String> {
    let mut v: Vec<String> = keys
        .filter(|k| !seen.contains(k.as_str()))
        .cloned()
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn disk(rel: &str, mtime: i64, size: i64) -> DiskFile {
        DiskFile {
            rel: rel.into(),
            abs: PathBuf::from("/x").join(rel),
            mtime_ns: mtime,
            size,
        }
    }

    fn rec(rel: &str, mtime: i64, size: i64) -> (String, FileRecord) {
        (
            rel.into(),
            FileRecord {
                source: "s".into(),
                path: rel.into(),
                sha256: "h".into(),
                mtime_ns: mtime,
                size,
                indexed_bytes: size,
                indexed_lines: 0,
            },
        )
    }

    #[test]
    fn diff() {
        let stored: HashMap<_, _> = [
            rec("same.md", 1, 10),
            rec("touched.md", 1, 10),
            rec("gone.md", 1, 1),
        ]
        .into_iter()
        .collect();
        let d = vec![
            disk("same.md", 1, 10),
            disk("touched.md", 2, 10),
            disk("new.md", 5, 5),
        ];
        let p = plan(&d, &stored, false);
        assert_eq!(p.unchanged, 1);
        assert_eq!(
            p.check.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(),
            ["touched.md"]
        );
        assert_eq!(
            p.add.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(),
            ["new.md"]
        );
        assert_eq!(p.remove, ["gone.md"]);
        assert_eq!(p.to_read(), 2);
    }

    #[test]
    fn force_rereads_everything() {
        let stored: HashMap<_, _> = [rec("a.md", 1, 10)].into_iter().collect();
        let p = plan(&[disk("a.md", 1, 10)], &stored, true);
        assert_eq!((p.unchanged, p.check.len()), (0, 1));
    }

    #[test]
    fn rename_is_remove_plus_add() {
        let stored: HashMap<_, _> = [rec("old.md", 1, 10)].into_iter().collect();
        let p = plan(&[disk("new.md", 1, 10)], &stored, false);
        assert_eq!(p.remove, ["old.md"]);
        assert_eq!(p.add.len(), 1);
    }

    #[test]
    fn skipped_files_stay_skipped_until_their_stat_moves() {
        let skip = |rel: &str, mtime: i64, size: i64| {
            (
                rel.to_string(),
                SkippedRecord {
                    path: rel.into(),
                    mtime_ns: mtime,
                    size,
                    reason: "binary".into(),
                    message: "skipped: binary file".into(),
                },
            )
        };
        let skipped: HashMap<_, _> = [
            skip("big.md", 1, 10),
            skip("bin.md", 1, 5),
            skip("gone.md", 1, 1),
        ]
        .into_iter()
        .collect();
        let d = vec![disk("big.md", 1, 10), disk("bin.md", 2, 5)];
        let p = plan_with_skipped(&d, &HashMap::new(), &skipped, false);
        assert_eq!(p.skipped, ["big.md"]);
        assert_eq!(
            p.add.iter().map(|f| f.rel.as_str()).collect::<Vec<_>>(),
            ["bin.md"],
            "a changed skipped file is re-examined"
        );
        assert_eq!(p.forget, ["gone.md"]);
        assert!(p.remove.is_empty());
        // --force re-examines them all.
        let p = plan_with_skipped(&d, &HashMap::new(), &skipped, true);
        assert!(p.skipped.is_empty());
        assert_eq!(p.add.len(), 2);
    }
}
