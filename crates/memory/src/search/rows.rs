//! Row fetches for ranking: chunk rows by id, the approximate index size and
//! table probes the stages use to pick a plan.
#![warn(missing_docs)]

use super::types::SearchError;
use crate::store::{Store, blob_to_vec};
use rusqlite::OptionalExtension;

/// A chunk row fetched for ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkRow {
    /// The source's name.
    pub source: String,
    /// Relative to the source root.
    pub path: String,
    /// First line (1-based).
    pub start_line: i64,
    /// Last line (inclusive).
    pub end_line: i64,
    /// The chunk's text.
    pub text: String,
    /// Where the chunk is (file title › heading path; empty for transcripts).
    pub context: String,
    /// The chunk's time for decay (unix seconds); `None` = evergreen.
    pub note_time: Option<i64>,
    /// The chunk's vector, when asked for and present.
    pub embedding: Option<Vec<f32>>,
}

/// Approximate chunk count (max rowid: O(log n)).
pub fn approx_chunks(store: &Store) -> Result<i64, SearchError> {
    Ok(store
        .conn()
        .query_row("SELECT coalesce(max(rowid), 0) FROM chunks", [], |r| {
            r.get(0)
        })?)
}

/// Whether a table (or any schema object) named `name` exists.
pub fn table_exists(store: &Store, name: &str) -> Result<bool, SearchError> {
    Ok(store
        .conn()
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE name = ?1",
            [name],
            |_| Ok(()),
        )
        .optional()?
        .is_some())
}

/// The rows for `ids` (in the order given; missing rows are skipped), one cached
/// statement per row rather than a freshly prepared `IN (…)` list.
pub fn fetch_rows(
    store: &Store,
    ids: &[i64],
    with_embedding: bool,
) -> Result<Vec<(i64, ChunkRow)>, SearchError> {
    let mut out = Vec::with_capacity(ids.len());
    let sql = if with_embedding {
        "SELECT source, path, start_line, end_line, text, note_time, embedding, context
         FROM chunks WHERE rowid = ?1"
    } else {
        "SELECT source, path, start_line, end_line, text, note_time, NULL, context
         FROM chunks WHERE rowid = ?1"
    };
    let mut stmt = store.conn().prepare_cached(sql)?;
    for &id in ids {
        let row = stmt
            .query_row([id], |r| {
                Ok(ChunkRow {
                    source: r.get(0)?,
                    path: r.get(1)?,
                    start_line: r.get(2)?,
                    end_line: r.get(3)?,
                    text: r.get(4)?,
                    context: r.get(7)?,
                    note_time: r.get(5)?,
                    embedding: match r.get_ref(6)? {
                        rusqlite::types::ValueRef::Blob(b) => blob_to_vec(b),
                        _ => None,
                    },
                })
            })
            .optional()?;
        if let Some(row) = row {
            out.push((id, row));
        }
    }
    Ok(out)
}

/// Up to `limit` chunk ids dated in `[start, end)`, newest first, optionally of one
/// source (`SearchStorage::dated_between`).
pub fn dated_between(
    store: &Store,
    start: i64,
    end: i64,
    source: Option<&str>,
    limit: usize,
) -> Result<Vec<i64>, SearchError> {
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid FROM chunks
         WHERE note_time >= ?1 AND note_time < ?2 AND (?3 IS NULL OR source = ?3)
         ORDER BY note_time DESC LIMIT ?4",
    )?;
    let ids = stmt
        .query_map(
            rusqlite::params![start, end, source, i64::try_from(limit).unwrap_or(i64::MAX)],
            |r| r.get(0),
        )?
        .collect::<Result<Vec<i64>, _>>()?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use crate::store::Store;

    /// The plan SQLite picks for [`super::dated_between`]'s query.
    fn plan(store: &Store) -> String {
        let mut st = store
            .conn()
            .prepare(
                "EXPLAIN QUERY PLAN SELECT rowid FROM chunks
                 WHERE note_time >= ?1 AND note_time < ?2 AND (?3 IS NULL OR source = ?3)
                 ORDER BY note_time DESC LIMIT ?4",
            )
            .unwrap();
        let rows = st
            .query_map(rusqlite::params![0i64, 1i64, None::<String>, 50i64], |r| {
                r.get::<_, String>(3)
            })
            .unwrap();
        rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
    }

    /// A dated query (a date window) reads the dated chunks through their index
    /// (schema 7) instead of scanning every chunk.
    #[test]
    fn a_date_window_reads_the_note_time_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("index.sqlite")).unwrap();
        let p = plan(&store);
        assert!(p.contains("chunks_by_note_time"), "{p}");
        // Control: without the index SQLite scans the chunks.
        store
            .conn()
            .execute_batch("DROP INDEX chunks_by_note_time")
            .unwrap();
        let p = plan(&store);
        assert!(
            !p.contains("chunks_by_note_time") && p.contains("SCAN"),
            "{p}"
        );
    }
}
