//! The freshness walk's engine (`walk::walk_stamps`): the tree is listed
//! depth-first on the calling thread (each directory read whole with
//! `getdents64`, see [`crate::rawdir`]) while the stats of the files already
//! listed run on a helper thread, in chunks queued as a directory's entries
//! are read; when the listing is done the calling thread stats too, until the
//! queue is empty. Only then are the files visited, in the full walk's order
//! (name order, depth first). The stat is most of the cost and it is kernel
//! time: this keeps both cores busy from the first directory on, also when
//! the files are spread over many small directories.
//!
//! Invariant: a directory's descriptor stays open only while stats of its
//! files are queued or running, and the queue is bounded, so a tree of many
//! directories never holds many descriptors.

use crate::dircache::DirCache;
use crate::rawdir::{self, RawDir};
use crate::walk::{SourceKind, Stamp, StampWalk, belongs, is_skipped_dir};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Files stat'ed per queued chunk.
const CHUNK: usize = 128;

/// Once this many files are queued, a helper thread is started (below, the
/// calling thread stats them alone: a thread costs more than it saves).
pub(crate) const PARALLEL_STAT_MIN: usize = 512;

/// Chunks queued before the lister stops to stat one itself (bounds the
/// open directory descriptors).
const MAX_QUEUED: usize = 32;

/// Files of one directory to stat: `(offset of the name in the listing, index
/// of the file in the walk)`.
struct Job {
    dir: Arc<RawDir>,
    files: Vec<(usize, usize)>,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    running: usize,
    closed: bool,
    /// `(file index, stamp)` of each stat that succeeded.
    stamps: Vec<(usize, Stamp)>,
}

#[derive(Default)]
struct Pool {
    state: Mutex<State>,
    /// A job was queued, or the queue was closed.
    work: Condvar,
    /// A running job finished.
    done: Condvar,
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, job: Job) -> usize {
        let mut st = self.lock();
        st.jobs.push_back(job);
        self.work.notify_one();
        st.jobs.len()
    }

    fn run(&self, job: Job, out: &mut Vec<(usize, Stamp)>) {
        for &(offset, index) in &job.files {
            if let Some(st) = job
                .dir
                .name_at(offset)
                .and_then(|n| rawdir::stat_at(job.dir.fd(), n))
            {
                out.push((index, rawdir::stamp_of(&st)));
            }
        }
        drop(job);
        let mut st = self.lock();
        st.stamps.append(out);
        st.running -= 1;
        self.done.notify_all();
    }

    /// Take the next job (`wait`: until one is queued or the queue closes).
    fn take(&self, wait: bool) -> Option<Job> {
        let mut st = self.lock();
        loop {
            if let Some(job) = st.jobs.pop_front() {
                st.running += 1;
                return Some(job);
            }
            if st.closed || !wait {
                return None;
            }
            st = self.work.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The helper thread: stat queued jobs until the queue is closed and empty.
    fn serve(&self) {
        let mut out = Vec::with_capacity(CHUNK);
        while let Some(job) = self.take(true) {
            self.run(job, &mut out);
        }
    }

    /// Close the queue, stat what is left, wait for the helper's running
    /// jobs; every stamp, by file index.
    fn finish(&self, files: usize) -> Vec<Option<Stamp>> {
        self.lock().closed = true;
        self.work.notify_all();
        let mut out = Vec::with_capacity(CHUNK);
        while let Some(job) = self.take(false) {
            self.run(job, &mut out);
        }
        let mut st = self.lock();
        while st.running > 0 {
            st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        let mut stamps = vec![None; files];
        for (i, stamp) in st.stamps.drain(..) {
            stamps[i] = Some(stamp);
        }
        stamps
    }
}

/// One listed directory: its entries in name order.
struct Node {
    items: Vec<(Name, Item)>,
}

/// A name kept in the walk's string arena: `(start, end)`.
type Name = (usize, usize);

enum Item {
    /// A listed file: its index in the walk (its stamp is found by it).
    File(usize),
    /// A subdirectory: its node.
    Dir(usize),
}

/// Where the walk starts: a top-level file (stat'ed already) or directory.
pub(crate) enum Top<'a> {
    /// A file at the top (its relative path and stamp).
    File(&'a str, Stamp),
    /// A directory at the top: its path on disk and relative path with a
    /// trailing `/` (empty for the source root).
    Dir(&'a Path, &'a str),
}

struct Lister<'s, 'e, 'c> {
    kind: SourceKind,
    cache: Option<&'c mut DirCache>,
    max_depth: usize,
    pool: &'s Pool,
    scope: &'s std::thread::Scope<'s, 'e>,
    helper: bool,
    names: String,
    nodes: Vec<Node>,
    files: usize,
    queued: usize,
}

impl<'s, 'e, 'c> Lister<'s, 'e, 'c> {
    /// List `dir` (its entries at `depth`; `rel` its relative path with a
    /// trailing `/`) and everything under it; its node, or `None` when a link
    /// needs the full walk.
    fn list(&mut self, dir: &Path, rel: &mut String, depth: usize) -> Option<Option<usize>> {
        let base = rel.len();
        let Some(listing) = RawDir::read_with(dir, self.cache.as_deref_mut()) else {
            // Unreadable: left out, as the full walk leaves it out.
            return Some(None);
        };
        // Shared with the stat jobs, which are queued as the entries are read
        // (the helper starts on a big directory's first chunks, not after it).
        let listing = Arc::new(listing);
        let mut items: Vec<(Name, Item)> = Vec::new();
        let mut to_stat: Vec<(usize, usize)> = Vec::with_capacity(CHUNK);
        let mut subdirs: Vec<usize> = Vec::new();
        for (offset, name, d_type) in listing.entries() {
            // A name that is not UTF-8 lists no file, nor does anything under it.
            let Ok(utf8) = std::str::from_utf8(name.to_bytes()) else {
                continue;
            };
            let Some(ft) = listing.file_type(name, d_type) else {
                continue;
            };
            if ft == libc::DT_LNK {
                // A dot-named link lists nothing (a hidden file, or a skipped
                // directory); any other is the full walk's to judge.
                if utf8.starts_with('.') {
                    continue;
                }
                return None;
            }
            let item = if ft == libc::DT_DIR {
                if depth >= self.max_depth || is_skipped_dir(utf8) {
                    continue;
                }
                subdirs.push(items.len());
                Item::Dir(usize::MAX)
            } else if ft == libc::DT_REG {
                rel.push_str(utf8);
                let listed = belongs(self.kind, rel);
                rel.truncate(base);
                if !listed {
                    continue;
                }
                let index = self.files;
                self.files += 1;
                to_stat.push((offset, index));
                if to_stat.len() == CHUNK {
                    self.queue(Job {
                        dir: Arc::clone(&listing),
                        files: std::mem::replace(&mut to_stat, Vec::with_capacity(CHUNK)),
                    });
                }
                Item::File(index)
            } else {
                continue;
            };
            let start = self.names.len();
            self.names.push_str(utf8);
            items.push(((start, self.names.len()), item));
        }
        if !to_stat.is_empty() {
            self.queue(Job {
                dir: Arc::clone(&listing),
                files: to_stat,
            });
        }
        // Only the queued jobs keep the descriptor open from here on.
        drop(listing);
        for i in subdirs {
            let (start, end) = items[i].0;
            let name = self.names[start..end].to_string();
            rel.push_str(&name);
            rel.push('/');
            let child = self.list(&dir.join(&name), rel, depth + 1);
            rel.truncate(base);
            match child? {
                Some(node) => items[i].1 = Item::Dir(node),
                // Unreadable: left out.
                None => items[i].1 = Item::Dir(usize::MAX),
            }
        }
        let names = &self.names;
        items.sort_unstable_by(|a, b| names[a.0.0..a.0.1].cmp(&names[b.0.0..b.0.1]));
        self.nodes.push(Node { items });
        Some(Some(self.nodes.len() - 1))
    }

    fn queue(&mut self, job: Job) {
        self.queued += job.files.len();
        let queued_jobs = self.pool.push(job);
        if !self.helper && self.queued >= PARALLEL_STAT_MIN {
            self.helper = true;
            let pool = self.pool;
            // No thread to be had: this one stats everything in `finish`.
            let _ = std::thread::Builder::new()
                .name("claw-stat".into())
                .spawn_scoped(self.scope, move || pool.serve());
        }
        if queued_jobs > MAX_QUEUED {
            let mut out = Vec::with_capacity(CHUNK);
            if let Some(job) = self.pool.take(false) {
                self.pool.run(job, &mut out);
            }
        }
    }
}

/// Walk `tops` (in order) and visit every listed file with its stamp, in
/// the full walk's order; [`StampWalk::NeedsFullWalk`] (and no visit) when a
/// symbolic link needs the full walk. Directories are listed through `cache`
/// when there is one.
pub(crate) fn walk(
    tops: &[Top<'_>],
    kind: SourceKind,
    max_depth: usize,
    cache: Option<&mut DirCache>,
    visit: &mut dyn FnMut(&str, Stamp),
) -> StampWalk {
    let pool = Pool::default();
    let listed = std::thread::scope(|scope| {
        let mut lister = Lister {
            kind,
            cache,
            max_depth,
            pool: &pool,
            scope,
            helper: false,
            names: String::new(),
            nodes: Vec::new(),
            files: 0,
            queued: 0,
        };
        let mut roots = Vec::with_capacity(tops.len());
        let mut complete = true;
        for top in tops {
            match top {
                Top::File(..) => roots.push(None),
                Top::Dir(path, rel) => {
                    let mut rel = rel.to_string();
                    match lister.list(path, &mut rel, 1) {
                        Some(node) => roots.push(node),
                        None => {
                            complete = false;
                            break;
                        }
                    }
                }
            }
        }
        if !complete {
            // The full walk takes over: what is queued need not be stat'ed.
            pool.lock().jobs.clear();
        }
        // Always close the queue, so the helper ends with the scope.
        let stamps = pool.finish(lister.files);
        complete.then_some((lister.names, lister.nodes, roots, stamps))
    });
    let Some((names, nodes, roots, stamps)) = listed else {
        return StampWalk::NeedsFullWalk;
    };
    let mut rel = String::with_capacity(256);
    for (top, root) in tops.iter().zip(roots) {
        match (top, root) {
            (Top::File(path, stamp), _) => visit(path, *stamp),
            (Top::Dir(_, prefix), Some(node)) => {
                rel.clear();
                rel.push_str(prefix);
                emit(&nodes, node, &names, &stamps, &mut rel, visit);
            }
            (Top::Dir(..), None) => {}
        }
    }
    StampWalk::Complete
}

/// Visit the files of `node` and below in order (`rel`: its relative path
/// with a trailing `/`).
fn emit(
    nodes: &[Node],
    node: usize,
    names: &str,
    stamps: &[Option<Stamp>],
    rel: &mut String,
    visit: &mut dyn FnMut(&str, Stamp),
) {
    let base = rel.len();
    for ((start, end), item) in &nodes[node].items {
        rel.push_str(&names[*start..*end]);
        match item {
            Item::File(i) => {
                // A failed stat leaves the file out.
                if let Some(stamp) = stamps[*i] {
                    visit(rel, stamp);
                }
            }
            Item::Dir(child) if *child != usize::MAX => {
                rel.push('/');
                emit(nodes, *child, names, stamps, rel, visit);
            }
            Item::Dir(_) => {}
        }
        rel.truncate(base);
    }
}
