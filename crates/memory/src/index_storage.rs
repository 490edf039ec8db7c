//! The storage boundary of indexing: the writes (and the few reads) the indexer
//! needs from an index — identity meta, file states, one file's chunks written
//! all-or-nothing, the embedding cache, registered sources and write groups. The
//! indexer (`indexer::run`, `indexer::run_paths`) sees only this trait, so another
//! backend (PostgreSQL + pgvector in the `claw-memory-pg` crate) indexes with the
//! same incremental logic. [`Store`] (SQLite) implements it by delegating to its
//! inherent methods; search has its own boundary, `search::storage::SearchStorage`.
#![warn(missing_docs)]

use crate::store::{
    FileRecord, NewChunk, SkippedRecord, SourceRecord, Store, StoreError, WriteMode,
};
use std::collections::HashMap;

/// Result of an index storage operation.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// The reads and writes the indexer needs from an index.
pub trait IndexStorage {
    /// Read an index meta value (`model`, `chunker_version`, `dims`, …).
    fn meta(&self, key: &str) -> Result<Option<String>>;
    /// Write an index meta value.
    fn set_meta(&self, key: &str, value: &str) -> Result<()>;
    /// The vector dimension the index was reset with, if any.
    fn vec_dims(&self) -> Result<Option<usize>>;
    /// Whether vectors can be indexed natively (SQLite: sqlite-vec loaded) —
    /// only then are missing vector tables a reason to rebuild.
    fn vector_index_available(&self) -> bool;
    /// Whether the native vector index exists (SQLite: the vec0 tables).
    fn has_vec_tables(&self) -> Result<bool>;
    /// Drop every indexed row this writer owns and set the index identity.
    fn reset_index(&mut self, model: &str, dims: usize, chunker_version: &str) -> Result<()>;
    /// Rebuild the index from scratch with this identity: `fill` runs the full
    /// indexing pass over the storage to fill. SQLite fills a new database
    /// beside the live one and swaps it in (`Store::rebuild_aside`), so a
    /// search or a kill never meets a half-built index; a backend without
    /// that may [`IndexStorage::reset_index`] and fill itself.
    fn rebuild(
        &mut self,
        model: &str,
        dims: usize,
        chunker_version: &str,
        fill: &mut dyn FnMut(&mut dyn IndexStorage) -> Result<()>,
    ) -> Result<()>;
    /// Remove what a rebuild killed before its swap left behind; whether there
    /// was something. Called by the indexer under the writer lock.
    fn discard_stale_rebuild(&self) -> Result<bool> {
        Ok(false)
    }
    /// Stored file states of one source, keyed by relative path.
    fn file_records(&self, source: &str) -> Result<HashMap<String, FileRecord>>;
    /// One stored file state.
    fn file_record(&self, source: &str, path: &str) -> Result<Option<FileRecord>>;
    /// Names of every source (of this writer) that has indexed files.
    fn indexed_sources(&self) -> Result<Vec<String>>;
    /// Write one file's new state and chunks, all-or-nothing.
    fn write_file(
        &mut self,
        file: &FileRecord,
        chunks: &[NewChunk],
        mode: WriteMode,
        model: &str,
    ) -> Result<()>;
    /// Update only the stat fields of a file whose content did not change.
    fn touch_file(&self, source: &str, path: &str, mtime_ns: i64, size: i64) -> Result<()>;
    /// Remove a file and all of its rows, all-or-nothing. Returns chunks removed.
    fn remove_file(&mut self, source: &str, path: &str) -> Result<usize>;
    /// Count the chunks a file currently has.
    fn chunk_count(&self, source: &str, path: &str) -> Result<usize>;
    /// Whether [`IndexStorage::remove_chunks_from`] works here; when it does not,
    /// a transcript whose last exchange must be re-chunked is rewritten whole.
    fn removes_chunks_from(&self) -> bool {
        false
    }
    /// Drop a file's chunks that start at or after 1-based `line` (a transcript's
    /// trailing exchange, re-chunked when its answer arrives); how many. Only
    /// called where [`IndexStorage::removes_chunks_from`].
    fn remove_chunks_from(&mut self, source: &str, path: &str, line: usize) -> Result<usize> {
        let _ = (source, path, line);
        Ok(0)
    }
    /// Cached embeddings by chunk-text hash.
    fn cached_embeddings(
        &self,
        provider: &str,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>>;
    /// Store embeddings in the cache.
    fn put_cache(
        &mut self,
        provider: &str,
        model: &str,
        entries: &[(String, Vec<f32>)],
    ) -> Result<()>;
    /// Keep at most `max` cache entries. Returns entries removed.
    fn prune_cache(&self, max: usize) -> Result<usize>;
    /// Registered notes folders.
    fn sources(&self) -> Result<Vec<SourceRecord>>;
    /// Start a write group (a backend may write each file in its own transaction
    /// instead and make groups no-ops).
    fn begin_group(&mut self) -> Result<()>;
    /// Commit the open write group, if any.
    fn commit_group(&mut self) -> Result<()>;
    /// Abandon the open write group, if any.
    fn rollback_group(&mut self);
    /// Remember a file skipped for cause (too big, binary) so it is not "new"
    /// on every walk. A backend without the table forgets (the default).
    fn mark_skipped(&self, _source: &str, _rec: &SkippedRecord) -> Result<()> {
        Ok(())
    }
    /// Forget a skipped file (it changed, or is gone). Whether one was recorded.
    fn forget_skipped(&self, _source: &str, _path: &str) -> Result<bool> {
        Ok(false)
    }
    /// The skipped files of one source, keyed by relative path.
    fn skipped_records(&self, _source: &str) -> Result<HashMap<String, SkippedRecord>> {
        Ok(HashMap::new())
    }
    /// One skipped file, if recorded.
    fn skipped_record(&self, _source: &str, _path: &str) -> Result<Option<SkippedRecord>> {
        Ok(None)
    }
}

impl IndexStorage for Store {
    fn removes_chunks_from(&self) -> bool {
        true
    }
    fn remove_chunks_from(&mut self, source: &str, path: &str, line: usize) -> Result<usize> {
        Store::remove_chunks_from(self, source, path, line)
    }
    fn mark_skipped(&self, source: &str, rec: &SkippedRecord) -> Result<()> {
        Store::mark_skipped(self, source, rec)
    }
    fn forget_skipped(&self, source: &str, path: &str) -> Result<bool> {
        Store::forget_skipped(self, source, path)
    }
    fn skipped_records(&self, source: &str) -> Result<HashMap<String, SkippedRecord>> {
        Store::skipped_records(self, source)
    }
    fn skipped_record(&self, source: &str, path: &str) -> Result<Option<SkippedRecord>> {
        Store::skipped_record(self, source, path)
    }
    fn meta(&self, key: &str) -> Result<Option<String>> {
        Store::meta(self, key)
    }
    fn set_meta(&self, key: &str, value: &str) -> Result<()> {
        Store::set_meta(self, key, value)
    }
    fn vec_dims(&self) -> Result<Option<usize>> {
        Store::vec_dims(self)
    }
    fn vector_index_available(&self) -> bool {
        self.vec_backend().is_loaded()
    }
    fn has_vec_tables(&self) -> Result<bool> {
        Store::has_vec_tables(self)
    }
    fn reset_index(&mut self, model: &str, dims: usize, chunker_version: &str) -> Result<()> {
        Store::reset_index(self, model, dims, chunker_version)
    }
    fn rebuild(
        &mut self,
        model: &str,
        dims: usize,
        chunker_version: &str,
        fill: &mut dyn FnMut(&mut dyn IndexStorage) -> Result<()>,
    ) -> Result<()> {
        Store::rebuild_aside(self, model, dims, chunker_version, fill)
    }
    fn discard_stale_rebuild(&self) -> Result<bool> {
        crate::rebuild::discard_aside(self.path())
    }
    fn file_records(&self, source: &str) -> Result<HashMap<String, FileRecord>> {
        Store::file_records(self, source)
    }
    fn file_record(&self, source: &str, path: &str) -> Result<Option<FileRecord>> {
        Store::file_record(self, source, path)
    }
    fn indexed_sources(&self) -> Result<Vec<String>> {
        Store::indexed_sources(self)
    }
    fn write_file(
        &mut self,
        file: &FileRecord,
        chunks: &[NewChunk],
        mode: WriteMode,
        model: &str,
    ) -> Result<()> {
        Store::write_file(self, file, chunks, mode, model)
    }
    fn touch_file(&self, source: &str, path: &str, mtime_ns: i64, size: i64) -> Result<()> {
        Store::touch_file(self, source, path, mtime_ns, size)
    }
    fn remove_file(&mut self, source: &str, path: &str) -> Result<usize> {
        Store::remove_file(self, source, path)
    }
    fn chunk_count(&self, source: &str, path: &str) -> Result<usize> {
        Store::chunk_count(self, source, path)
    }
    fn cached_embeddings(
        &self,
        provider: &str,
        model: &str,
        hashes: &[&str],
    ) -> Result<HashMap<String, Vec<f32>>> {
        Store::cached_embeddings(self, provider, model, hashes)
    }
    fn put_cache(
        &mut self,
        provider: &str,
        model: &str,
        entries: &[(String, Vec<f32>)],
    ) -> Result<()> {
        Store::put_cache(self, provider, model, entries)
    }
    fn prune_cache(&self, max: usize) -> Result<usize> {
        Store::prune_cache(self, max)
    }
    fn sources(&self) -> Result<Vec<SourceRecord>> {
        Store::sources(self)
    }
    fn begin_group(&mut self) -> Result<()> {
        Store::begin_group(self)
    }
    fn commit_group(&mut self) -> Result<()> {
        Store::commit_group(self)
    }
    fn rollback_group(&mut self) {
        Store::rollback_group(self)
    }
}

/// Every source of the workspace: the built-in ones plus the folders registered in
/// `store` (what `walk::sources` does for a SQLite [`Store`], for any backend).
pub fn source_roots(
    settings: &crate::config::MemoryConfig,
    store: &dyn IndexStorage,
) -> Result<Vec<crate::walk::SourceRoot>> {
    let mut out = crate::walk::builtin_sources(settings);
    for s in store.sources()? {
        out.push(crate::walk::SourceRoot {
            name: s.name,
            root: s.root,
            kind: crate::walk::SourceKind::Notes,
            follow_symlinks_outside: s.follow_symlinks_outside,
        });
    }
    Ok(out)
}
