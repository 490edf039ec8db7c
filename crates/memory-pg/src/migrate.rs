//! `claw memory migrate --to postgres`: copy a SQLite index (files, chunks with
//! their vectors, the embedding cache, registered sources, recall counts, the index identity)
//! into this workspace's rows of a PostgreSQL namespace — no re-embedding. Each
//! file is copied in its own transaction; the identity is written first (which
//! drops this workspace's previous rows in the namespace), so an interrupted
//! copy is finished by running it again or by `claw memory index`.

use crate::store::{PgError, PgStore};
use claw_memory::index_storage::IndexStorage;
use claw_memory::store::{
    FileRecord, NewChunk, Store, StoreError, blob_to_vec, now_unix, row_to_file,
};
use pgvector::Vector;
use rusqlite::OptionalExtension;

/// What a migration copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrateReport {
    /// Files copied.
    pub files: usize,
    /// Chunks copied.
    pub chunks: usize,
    /// Of which with a vector.
    pub vectors: usize,
    /// Embedding cache entries copied.
    pub cache_entries: usize,
    /// Registered sources copied.
    pub sources: usize,
    /// The index's embedding model ("" = keyword-only).
    pub model: String,
}

fn sq(e: rusqlite::Error) -> StoreError {
    StoreError::Sqlite(e)
}

/// Copy the SQLite index `src` into `dst` (this workspace's rows of its namespace).
pub fn copy_sqlite(src: &Store, dst: &mut PgStore) -> Result<MigrateReport, StoreError> {
    let conn = src.open_inspector()?;
    let meta = |k: &str| -> Result<Option<String>, StoreError> {
        conn.query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get(0))
            .optional()
            .map_err(sq)
    };
    let model = meta("model")?.unwrap_or_default();
    let dims: usize = meta("dims")?.and_then(|d| d.parse().ok()).unwrap_or(0);
    let chunker = meta("chunker_version")?.unwrap_or_default();
    let mut report = MigrateReport {
        model: model.clone(),
        ..Default::default()
    };
    dst.reset_index(&model, dims, &chunker)?;

    // Registered sources (replacing this workspace's registrations of the same name).
    let mut stmt = conn
        .prepare("SELECT name, root, added_at, follow_symlinks_outside FROM sources")
        .map_err(sq)?;
    let sources: Vec<(String, String, i64, bool)> = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get::<_, i64>(3)? != 0))
        })
        .map_err(sq)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sq)?;
    let (ns, ws) = (
        dst.config().namespace.clone(),
        dst.config().workspace.clone(),
    );
    dst.with_tx(|tx| {
        for (name, root, added_at, follow) in &sources {
            tx.execute(
                "INSERT INTO sources (namespace, workspace, name, root, added_at, follow_symlinks_outside)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (namespace, workspace, name) DO UPDATE SET root = excluded.root,
                   added_at = excluded.added_at, follow_symlinks_outside = excluded.follow_symlinks_outside",
                &[&ns, &ws, name, root, added_at, follow],
            )?;
        }
        Ok(())
    })?;
    report.sources = sources.len();

    // Files, each with its chunks in one transaction.
    let mut fstmt = conn
        .prepare(
            "SELECT source, path, sha256, mtime, size, indexed_bytes, indexed_lines FROM files
             ORDER BY source, path",
        )
        .map_err(sq)?;
    let files: Vec<FileRecord> = fstmt
        .query_map([], row_to_file)
        .map_err(sq)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sq)?;
    let mut cstmt = conn
        .prepare(
            "SELECT id, start_line, end_line, hash, model, text, note_time, embedding, context
             FROM chunks WHERE source = ?1 AND path = ?2 ORDER BY rowid",
        )
        .map_err(sq)?;
    let now = now_unix();
    for f in &files {
        let chunks: Vec<(NewChunk, String)> = cstmt
            .query_map([&f.source, &f.path], |r| {
                let emb: Option<Vec<u8>> = r.get(7)?;
                Ok((
                    NewChunk {
                        id: r.get(0)?,
                        start_line: r.get::<_, i64>(1)?.max(0) as usize,
                        end_line: r.get::<_, i64>(2)?.max(0) as usize,
                        hash: r.get(3)?,
                        text: r.get(5)?,
                        context: r.get(8)?,
                        note_time: r.get(6)?,
                        embedding: emb.as_deref().and_then(blob_to_vec),
                    },
                    r.get::<_, String>(4)?,
                ))
            })
            .map_err(sq)?
            .collect::<rusqlite::Result<_>>()
            .map_err(sq)?;
        dst.with_tx(|tx| {
            dst.lock_source(tx, &f.source)?;
            PgStore::upsert_file(tx, &ns, &ws, f, now)?;
            tx.execute(
                "DELETE FROM chunks WHERE namespace = $1 AND workspace = $2 AND source = $3 AND path = $4",
                &[&ns, &ws, &f.source, &f.path],
            )?;
            let refs: Vec<&NewChunk> = chunks.iter().map(|(c, _)| c).collect();
            let models: Vec<&str> = chunks.iter().map(|(_, m)| m.as_str()).collect();
            PgStore::insert_chunks(tx, &ns, &ws, f, &refs, &models, now)
        })?;
        report.files += 1;
        report.chunks += chunks.len();
        report.vectors += chunks.iter().filter(|(c, _)| c.embedding.is_some()).count();
    }

    // The search indexes a reset into an empty table left to build once, now.
    dst.finish_bulk()?;

    // The embedding cache, in batches.
    let mut estmt = conn
        .prepare("SELECT provider, model, hash, embedding, updated_at FROM embedding_cache")
        .map_err(sq)?;
    let entries: Vec<(String, String, String, Vec<f32>, i64)> = estmt
        .query_map([], |r| {
            let b: Vec<u8> = r.get(3)?;
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                blob_to_vec(&b).unwrap_or_default(),
                r.get(4)?,
            ))
        })
        .map_err(sq)?
        .collect::<rusqlite::Result<_>>()
        .map_err(sq)?;
    for batch in entries.chunks(1000) {
        dst.with_tx(|tx| {
            let stmt = tx.prepare(
                "INSERT INTO embedding_cache (namespace, provider, model, hash, embedding, dims, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (namespace, provider, model, hash) DO NOTHING",
            )?;
            for (p, m, h, v, at) in batch {
                if v.is_empty() {
                    return Err(PgError::Corrupt(format!("cache entry {h} has no vector")));
                }
                tx.execute(
                    &stmt,
                    &[&ns, p, m, h, &Vector::from(v.clone()), &(v.len() as i32), at],
                )?;
            }
            Ok(())
        })?;
        report.cache_entries += batch.len();
    }
    // How often searches recalled each chunk (the consolidation's ranking).
    let mut sources: Vec<String> = files.iter().map(|f| f.source.clone()).collect();
    sources.sort();
    sources.dedup();
    for source in sources {
        let rows = src.recall_rows(&source, &[])?;
        for r in rows {
            // Counted once per row at its first time, then the rest at its latest.
            dst.record_recalls(&[(r.hit.clone(), 1)], r.first_at)?;
            if r.count > 1 {
                dst.record_recalls(&[(r.hit, r.count - 1)], r.last_at)?;
            }
        }
    }
    if let Some(last) = meta("last_index_at")? {
        dst.set_meta("last_index_at", &last)?;
    }
    Ok(report)
}
