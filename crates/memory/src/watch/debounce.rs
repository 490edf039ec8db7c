//! Debounce state of the watcher (pure: no I/O, no clock reads — callers pass
//! `Instant`s in). A [`Group`] collects the changes of one debounce class (notes
//! or session transcripts) and says when they are due: after a quiet period,
//! but never later than a cap after the first change.

use crate::freshness::FileRef;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A unit of work for the indexing thread.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Job {
    /// Files to re-index or remove, each as the disk says when the job runs.
    pub(crate) files: BTreeSet<FileRef>,
    /// Sources to reconcile by stat (directory events, re-armed roots).
    pub(crate) reconcile: BTreeSet<String>,
    /// Reconcile every source (start-up, overflow).
    pub(crate) full: bool,
    /// Close the indexing thread's connection and open the database again
    /// first (it was deleted or replaced under the watcher).
    pub(crate) reopen: bool,
}

impl Job {
    /// Nothing to do.
    pub(crate) fn is_empty(&self) -> bool {
        self.files.is_empty() && self.reconcile.is_empty() && !self.full
    }

    /// Merge another job into this one.
    pub(crate) fn absorb(&mut self, other: Job) {
        self.files.extend(other.files);
        self.reconcile.extend(other.reconcile);
        self.full |= other.full;
        self.reopen |= other.reopen;
    }

    /// How many units of work are waiting (files, sources, a full rescan).
    pub(crate) fn pending(&self) -> usize {
        self.files.len() + self.reconcile.len() + self.full as usize
    }

    /// [`Job::pending`] without the files in `own` (files the watcher's owner
    /// writes itself, which never stop it vouching for the index).
    pub(crate) fn pending_except(&self, own: &BTreeSet<FileRef>) -> usize {
        self.pending() - self.files.iter().filter(|f| own.contains(*f)).count()
    }
}

/// Pending changes of one debounce class.
#[derive(Debug, Default)]
pub(crate) struct Group {
    pub(crate) job: Job,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Group {
    /// Record that a change arrived at `now`.
    pub(crate) fn touch(&mut self, now: Instant) {
        self.first.get_or_insert(now);
        self.last = Some(now);
    }

    /// Schedule a full rescan, due as if a change arrived at `now`.
    pub(crate) fn rescan(&mut self, now: Instant) {
        self.job.full = true;
        self.touch(now);
    }

    /// When the group should be flushed: `debounce` after the last change, capped
    /// at `max_delay` after the first; `None` when it holds nothing.
    pub(crate) fn due_at(&self, debounce: Duration, max_delay: Duration) -> Option<Instant> {
        if self.job.is_empty() {
            return None;
        }
        let (first, last) = (self.first?, self.last?);
        Some((last + debounce).min(first + max_delay))
    }

    /// Whether the group is due at `now`.
    pub(crate) fn is_due(&self, debounce: Duration, max_delay: Duration, now: Instant) -> bool {
        self.due_at(debounce, max_delay).is_some_and(|d| d <= now)
    }

    /// Take the pending job, resetting the timers.
    pub(crate) fn take(&mut self) -> Job {
        self.first = None;
        self.last = None;
        std::mem::take(&mut self.job)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S1: Duration = Duration::from_secs(1);
    const S10: Duration = Duration::from_secs(10);

    #[test]
    fn group_debounce_and_cap() {
        let t0 = Instant::now();
        let mut g = Group::default();
        assert_eq!(g.due_at(S1, S10), None);
        g.job.files.insert(FileRef::new("memory", "a.md"));
        g.touch(t0);
        assert_eq!(g.due_at(S1, S10), Some(t0 + S1));
        // Events keep coming: the deadline moves, but never past first + cap.
        g.touch(t0 + Duration::from_secs(9));
        assert_eq!(g.due_at(S1, S10), Some(t0 + S10));
        let job = g.take();
        assert_eq!(job.files.len(), 1);
        assert_eq!(g.due_at(S1, S10), None);
    }

    #[test]
    fn touched_but_empty_group_is_never_due() {
        let t0 = Instant::now();
        let mut g = Group::default();
        g.touch(t0);
        assert_eq!(g.due_at(S1, S10), None);
        assert!(!g.is_due(S1, S10, t0 + Duration::from_secs(60)));
    }

    #[test]
    fn is_due_only_after_the_quiet_period() {
        let t0 = Instant::now();
        let mut g = Group::default();
        g.job.reconcile.insert("notes".into());
        g.touch(t0);
        assert!(!g.is_due(S1, S10, t0 + Duration::from_millis(999)));
        assert!(g.is_due(S1, S10, t0 + S1));
    }

    #[test]
    fn take_resets_the_cap_window() {
        let t0 = Instant::now();
        let mut g = Group::default();
        g.rescan(t0);
        assert!(g.job.full);
        let _ = g.take();
        // A change long after the previous batch starts a fresh window.
        let t1 = t0 + Duration::from_secs(100);
        g.job.files.insert(FileRef::new("memory", "b.md"));
        g.touch(t1);
        assert_eq!(g.due_at(S1, S10), Some(t1 + S1));
    }

    #[test]
    fn jobs_absorb_and_count() {
        let mut a = Job::default();
        assert!(a.is_empty());
        assert_eq!(a.pending(), 0);
        a.files.insert(FileRef::new("memory", "a.md"));
        let mut b = Job {
            full: true,
            ..Job::default()
        };
        b.files.insert(FileRef::new("memory", "a.md"));
        b.files.insert(FileRef::new("memory", "b.md"));
        b.reconcile.insert("sessions".into());
        a.absorb(b);
        assert!(a.full);
        assert_eq!(a.files.len(), 2, "duplicates merge");
        assert_eq!(a.pending(), 4);
    }
}
