//! The jobs file, `<workspace>/cron/jobs.json`: `{"version": 1, "jobs": [...]}`.
//!
//! Every change is a read-modify-write under an exclusive `flock` on
//! `cron/jobs.lock`, written atomically (a temp file in the same folder, fsync,
//! rename), so the CLI, the `cron` tool and a running scheduler never lose each
//! other's edits and a reader never sees half a file. Reads take no lock (a rename
//! is atomic). The folder is 0700 and the file 0600: messages are personal.
//!
//! [`FileStamp`] (inode, size, mtime) tells a running scheduler the file changed:
//! each atomic write makes a new inode, so no edit hides behind a coarse mtime.

use crate::job::{Job, NewJob};
use crate::spec::SpecError;
use chrono::{DateTime, Timelike, Utc};
use fs2::FileExt;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The jobs file's format version.
pub const FORMAT_VERSION: u32 = 1;

/// Why the jobs file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a valid jobs file: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("{} has format version {found}; this claw reads version {FORMAT_VERSION}", path.display())]
    NewerVersion { path: PathBuf, found: u32 },
    #[error("the job's message is empty")]
    EmptyMessage,
    #[error(transparent)]
    Spec(#[from] SpecError),
}

#[derive(Debug, Serialize, Deserialize)]
struct JobsFile {
    version: u32,
    #[serde(default)]
    jobs: Vec<Job>,
}

/// Identity of one version of the jobs file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

/// The jobs file of one workspace.
#[derive(Debug, Clone)]
pub struct JobStore {
    path: PathBuf,
}

impl JobStore {
    /// The store at `path` (any file name; its folder holds the lock file).
    pub fn new(path: impl Into<PathBuf>) -> JobStore {
        JobStore { path: path.into() }
    }

    /// `<state_dir>/cron/jobs.json`.
    pub fn in_state_dir(state_dir: &Path) -> JobStore {
        JobStore::new(jobs_path(state_dir))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    fn io(&self, action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> StoreError {
        let path = path.to_path_buf();
        move |source| StoreError::Io {
            action,
            path,
            source,
        }
    }

    /// The jobs (none when the file does not exist).
    pub fn load(&self) -> Result<Vec<Job>, StoreError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(self.io("read", &self.path)(e)),
        };
        if text.trim().is_empty() {
            return Ok(Vec::new());
        }
        let file: JobsFile = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        if file.version > FORMAT_VERSION {
            return Err(StoreError::NewerVersion {
                path: self.path.clone(),
                found: file.version,
            });
        }
        for job in &file.jobs {
            job.schedule.validate().map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                message: format!("job {}: {e}", job.id),
            })?;
        }
        Ok(file.jobs)
    }

    /// The job with this id.
    pub fn get(&self, id: &str) -> Result<Option<Job>, StoreError> {
        Ok(self.load()?.into_iter().find(|j| j.id == id))
    }

    /// The file's current identity (None when it does not exist).
    pub fn stamp(&self) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(&self.path).ok()?;
        Some(FileStamp {
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }

    /// Runs `f` on the jobs under the lock and writes the result back atomically
    /// (only when `f` changed something). Returns `f`'s value and the jobs as written.
    pub fn update<R>(
        &self,
        f: impl FnOnce(&mut Vec<Job>) -> R,
    ) -> Result<(R, Vec<Job>), StoreError> {
        self.update_stamped(f).map(|(r, jobs, _)| (r, jobs))
    }

    /// [`JobStore::update`], also returning the file's stamp taken under the lock
    /// (so a watcher of the file can tell its own write from a later one).
    pub fn update_stamped<R>(
        &self,
        f: impl FnOnce(&mut Vec<Job>) -> R,
    ) -> Result<(R, Vec<Job>, Option<FileStamp>), StoreError> {
        let _lock = self.lock()?;
        let mut jobs = self.load()?;
        let before = jobs.clone();
        let r = f(&mut jobs);
        if jobs != before {
            self.write(&jobs)?;
        }
        Ok((r, jobs, self.stamp()))
    }

    /// Adds a job created at `now` (its first run computed; an `at` in the past is refused).
    pub fn add(&self, new: NewJob, now: DateTime<Utc>) -> Result<Job, StoreError> {
        if new.message.trim().is_empty() {
            return Err(StoreError::EmptyMessage);
        }
        new.schedule.validate()?;
        // Whole seconds: `every` runs keep a readable phase.
        let now = now.with_nanosecond(0).unwrap_or(now);
        let next = new.schedule.first_run(now)?;
        let (job, _) = self.update(|jobs| {
            let id = fresh_id(jobs);
            let job = Job {
                id,
                schedule: new.schedule,
                message: new.message,
                deliver_to: new.deliver_to,
                created_at: now,
                next_run: Some(next),
                last_run: None,
                runs: 0,
            };
            jobs.push(job.clone());
            job
        })?;
        Ok(job)
    }

    /// Removes a job; `None` when there is no job with that id.
    pub fn remove(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let (removed, _) = self.update(|jobs| {
            let i = jobs.iter().position(|j| j.id == id)?;
            Some(jobs.remove(i))
        })?;
        Ok(removed)
    }

    /// Records a run at `now` outside the scheduler (`claw cron run`): `last_run`
    /// and `runs` change, the schedule does not. `false` when the job is gone.
    pub fn record_manual_run(&self, id: &str, now: DateTime<Utc>) -> Result<bool, StoreError> {
        let (found, _) = self.update(|jobs| match jobs.iter_mut().find(|j| j.id == id) {
            Some(j) => {
                j.last_run = Some(now);
                j.runs += 1;
                true
            }
            None => false,
        })?;
        Ok(found)
    }

    fn lock(&self) -> Result<std::fs::File, StoreError> {
        self.ensure_dir()?;
        let lock_path = self.dir().join("jobs.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(self.io("open", &lock_path))?;
        file.lock_exclusive().map_err(self.io("lock", &lock_path))?;
        Ok(file)
    }

    fn ensure_dir(&self) -> Result<(), StoreError> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.dir();
        if !dir.is_dir() {
            std::fs::create_dir_all(dir).map_err(self.io("create", dir))?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(self.io("set permissions of", dir))?;
        }
        Ok(())
    }

    fn write(&self, jobs: &[Job]) -> Result<(), StoreError> {
        let file = JobsFile {
            version: FORMAT_VERSION,
            jobs: jobs.to_vec(),
        };
        let mut text = serde_json::to_string_pretty(&file).map_err(|e| StoreError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        text.push('\n');
        claw_base::fs::write_atomic(
            &self.path,
            text.as_bytes(),
            claw_base::fs::Durability::Durable,
        )
        .map_err(self.io("replace", &self.path))
    }
}

/// `<state_dir>/cron/jobs.json`: in claw's state directory, outside the
/// workspace, since a planted job would run unattended (`claw_memory::state`).
pub fn jobs_path(state_dir: &Path) -> PathBuf {
    state_dir.join("cron").join("jobs.json")
}

fn fresh_id(jobs: &[Job]) -> String {
    loop {
        let id = format!("{:08x}", rand::random::<u32>());
        if !jobs.iter().any(|j| j.id == id) {
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Schedule;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-05T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn every(n: u64) -> NewJob {
        NewJob {
            schedule: Schedule::Every { every_secs: n },
            message: "ping".into(),
            deliver_to: None,
        }
    }

    #[test]
    fn add_list_remove_persist_in_a_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::in_state_dir(dir.path());
        assert!(store.load().unwrap().is_empty());
        let a = store.add(every(30), now()).unwrap();
        let b = store.add(every(60), now()).unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(a.next_run, Some(now() + chrono::TimeDelta::seconds(30)));
        let again = JobStore::in_state_dir(dir.path());
        assert_eq!(again.load().unwrap(), vec![a.clone(), b.clone()]);
        let mode = std::fs::metadata(store.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mode = std::fs::metadata(dir.path().join("cron"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700);
        assert_eq!(store.remove(&a.id).unwrap(), Some(a));
        assert_eq!(store.remove("nope").unwrap(), None);
        assert_eq!(store.load().unwrap(), vec![b]);
    }

    #[test]
    fn refuses_bad_jobs_and_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::in_state_dir(dir.path());
        let past = NewJob {
            schedule: Schedule::At {
                at: now() - chrono::TimeDelta::seconds(1),
            },
            message: "late".into(),
            deliver_to: None,
        };
        assert!(matches!(
            store.add(past, now()),
            Err(StoreError::Spec(SpecError::InPast { .. }))
        ));
        let mut empty = every(5);
        empty.message = "  ".into();
        assert!(matches!(
            store.add(empty, now()),
            Err(StoreError::EmptyMessage)
        ));
        std::fs::create_dir_all(store.path().parent().unwrap()).unwrap();
        std::fs::write(store.path(), "{not json").unwrap();
        assert!(matches!(store.load(), Err(StoreError::Corrupt { .. })));
        std::fs::write(
            store.path(),
            r#"{"version": 1, "jobs": [{"id": "bad", "kind": "cron", "cron": "0 9 * *",
                "tz": "UTC", "message": "x", "created_at": "2026-11-05T12:00:00Z"}]}"#,
        )
        .unwrap();
        match store.load() {
            Err(StoreError::Corrupt { message, .. }) => {
                assert!(message.starts_with("job bad:"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.add(every(5), now()),
            Err(StoreError::Corrupt { .. })
        ));
        std::fs::write(store.path(), r#"{"version": 9, "jobs": []}"#).unwrap();
        assert!(matches!(
            store.load(),
            Err(StoreError::NewerVersion { found: 9, .. })
        ));
    }

    #[test]
    fn every_write_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let store = JobStore::in_state_dir(dir.path());
        assert_eq!(store.stamp(), None);
        let a = store.add(every(30), now()).unwrap();
        let s1 = store.stamp().unwrap();
        store.record_manual_run(&a.id, now()).unwrap();
        let s2 = store.stamp().unwrap();
        assert_ne!(s1, s2);
        // An update that changes nothing does not write.
        store.update(|_| ()).unwrap();
        assert_eq!(store.stamp().unwrap(), s2);
    }

    #[test]
    fn concurrent_adders_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = jobs_path(dir.path());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let p = path.clone();
                std::thread::spawn(move || {
                    let s = JobStore::new(p);
                    for _ in 0..10 {
                        s.add(every(60), now()).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(JobStore::new(path).load().unwrap().len(), 80);
    }
}
