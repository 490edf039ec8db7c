//! The vector stage: KNN candidates for a query embedding, by the cheapest plan
//! the store allows — exact float KNN in vec0, a hamming prefilter over the
//! binary-quantised vectors (read straight from sqlite-vec's private storage
//! tables, the "bit scan") with exact rescoring, or an in-process cosine scan
//! when sqlite-vec is unavailable.
#![warn(missing_docs)]

use super::rows::{approx_chunks, table_exists};
use super::score;
use super::types::{Fallback, SearchError};
use crate::store::{Store, blob_to_vec};
use rusqlite::{OptionalExtension, params};

/// Above this many chunks (by max rowid) and when `chunks_vec_bit` exists, the vector
/// stage prefilters with hamming distance over binary-quantised vectors and rescores
/// exactly; below, it runs exact float KNN.
pub const BIT_PREFILTER_MIN_CHUNKS: i64 = 20_000;
/// Prefilter oversampling: hamming candidates fetched per wanted neighbour.
pub const BIT_OVERSAMPLE: usize = 10;
/// Minimum prefilter candidate count.
pub const BIT_MIN_CANDIDATES: usize = 256;
/// sqlite-vec refuses a KNN `k` above this.
pub const VEC0_MAX_K: usize = 4096;

/// Vector candidates (rowid, cosine similarity) and the fallback that applied, if any.
pub type VectorHits = (Vec<(i64, f64)>, Option<Fallback>);

/// How the vector stage searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorPlan {
    /// Exact float KNN in vec0.
    Exact,
    /// Hamming prefilter over `chunks_vec_bit`, exact rescoring of the candidates.
    BitPrefilter,
    /// No vec0: cosine over `chunks.embedding` in process.
    InProcess,
}

/// The plan the vector stage will use on this store.
pub fn vector_plan(store: &Store) -> Result<VectorPlan, SearchError> {
    if !store.vec_backend().is_loaded() || !store.has_vec_tables()? {
        return Ok(VectorPlan::InProcess);
    }
    if approx_chunks(store)? >= BIT_PREFILTER_MIN_CHUNKS && table_exists(store, "chunks_vec_bit")? {
        Ok(VectorPlan::BitPrefilter)
    } else {
        Ok(VectorPlan::Exact)
    }
}

/// Vector KNN candidates as (rowid, vector score), plus a fallback note.
/// With a source filter the KNN is oversampled ×4 and filtered after the fetch.
pub fn vector_candidates(
    store: &Store,
    q: &[f32],
    k: usize,
    source: Option<&str>,
) -> Result<VectorHits, SearchError> {
    let want = if source.is_some() { k * 4 } else { k };
    match vector_plan(store)? {
        VectorPlan::InProcess => Ok((in_process_knn(store, q, k, source)?, Some(Fallback::NoVec0))),
        VectorPlan::Exact => Ok((exact_knn(store, q, want)?, None)),
        VectorPlan::BitPrefilter => Ok((bit_knn(store, q, want)?, None)),
    }
}

/// Exact float KNN through vec0 (cosine distance → similarity).
pub fn exact_knn(store: &Store, q: &[f32], k: usize) -> Result<Vec<(i64, f64)>, SearchError> {
    let blob = crate::store::vec_to_blob(q);
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid, distance FROM chunks_vec WHERE embedding MATCH ?1 AND k = ?2",
    )?;
    let rows = stmt.query_map(params![blob, k.min(VEC0_MAX_K) as i64], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?))
    })?;
    let mut out = Vec::new();
    for r in rows {
        let (id, d) = r?;
        out.push((id, score::vector_score(1.0 - d)));
    }
    Ok(out)
}

/// Binary-quantised prefilter (hamming over `chunks_vec_bit`) of
/// `max(k × BIT_OVERSAMPLE, BIT_MIN_CANDIDATES)` candidates, rescored exactly from
/// `chunks.embedding`; the best `k`.
pub fn bit_knn(store: &Store, q: &[f32], k: usize) -> Result<Vec<(i64, f64)>, SearchError> {
    let kb = (k * BIT_OVERSAMPLE).max(BIT_MIN_CANDIDATES);
    let ids = match bit_scan(store, q, kb)? {
        Some(ids) => ids,
        None => bit_knn_vec0(store, q, kb)?,
    };
    rescore(store, q, &ids, k)
}

/// The hamming prefilter through vec0's own KNN (`MATCH … AND k = ?`). Correct on
/// any sqlite-vec version, but sqlite-vec 0.1.x selects each chunk's top k by
/// repeated linear scans (O(chunk_size × k)), so k in the hundreds costs tens of
/// milliseconds at 100,000 rows; [`bit_scan`] is preferred.
pub fn bit_knn_vec0(store: &Store, q: &[f32], n: usize) -> Result<Vec<i64>, SearchError> {
    let blob = crate::store::vec_to_blob(q);
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid FROM chunks_vec_bit WHERE embedding MATCH vec_quantize_binary(?1) AND k = ?2",
    )?;
    let n = n.min(VEC0_MAX_K);
    let rows = stmt.query_map(params![blob, n as i64], |r| r.get::<_, i64>(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The `n` rowids nearest to `q` by hamming distance over the binary-quantised
/// vectors, read straight from `chunks_vec_bit`'s storage tables (sqlite-vec
/// 0.1.x layout: `_chunks(chunk_id, size, validity, rowids)` and
/// `_vector_chunks00(rowid, vectors)`), with an O(rows) selection. Ties are broken
/// by rowid. `None` when the storage does not have that layout (another
/// sqlite-vec version): the caller then uses [`bit_knn_vec0`].
pub fn bit_scan(store: &Store, q: &[f32], n: usize) -> Result<Option<Vec<i64>>, SearchError> {
    use rusqlite::types::ValueRef;
    let conn = store.conn();
    let blob = crate::store::vec_to_blob(q);
    let qbits: Vec<u8> = conn
        .prepare_cached("SELECT vec_quantize_binary(?1)")?
        .query_row([blob], |r| r.get(0))?;
    let nb = qbits.len();
    let Ok(mut stmt) = conn.prepare_cached(
        "SELECT c.validity, c.rowids, v.vectors FROM chunks_vec_bit_chunks c
         JOIN chunks_vec_bit_vector_chunks00 v ON v._rowid_ = c.chunk_id",
    ) else {
        return Ok(None);
    };
    if nb == 0 {
        return Ok(None);
    }
    let mut all: Vec<(u32, i64)> = Vec::new();
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        let (ValueRef::Blob(valid), ValueRef::Blob(rowids), ValueRef::Blob(vecs)) =
            (r.get_ref(0)?, r.get_ref(1)?, r.get_ref(2)?)
        else {
            return Ok(None);
        };
        let slots = valid.len() * 8;
        if rowids.len() != slots * 8 || vecs.len() != slots * nb {
            return Ok(None);
        }
        for (i, v) in vecs.chunks_exact(nb).enumerate() {
            if (valid[i / 8] >> (i % 8)) & 1 == 0 {
                continue;
            }
            let mut id = [0u8; 8];
            id.copy_from_slice(&rowids[i * 8..i * 8 + 8]);
            all.push((hamming(&qbits, v), i64::from_ne_bytes(id)));
        }
    }
    if all.len() > n && n > 0 {
        all.select_nth_unstable(n - 1);
        all.truncate(n);
    }
    all.sort_unstable();
    all.truncate(n);
    Ok(Some(all.into_iter().map(|(_, id)| id).collect()))
}

/// Hamming distance between two equal-length bit strings. Pure.
pub fn hamming(a: &[u8], b: &[u8]) -> u32 {
    let mut d = 0u32;
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (a8.remainder(), b8.remainder());
    for (x, y) in a8.zip(b8) {
        let mut xa = [0u8; 8];
        let mut ya = [0u8; 8];
        xa.copy_from_slice(x);
        ya.copy_from_slice(y);
        d += (u64::from_ne_bytes(xa) ^ u64::from_ne_bytes(ya)).count_ones();
    }
    for (x, y) in ar.iter().zip(br) {
        d += (x ^ y).count_ones();
    }
    d
}

/// Exact cosine for `ids` from `chunks.embedding`; the best `k`.
fn rescore(
    store: &Store,
    q: &[f32],
    ids: &[i64],
    k: usize,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let mut scored: Vec<(i64, f64)> = Vec::with_capacity(ids.len());
    let mut stmt = store
        .conn()
        .prepare_cached("SELECT embedding FROM chunks WHERE rowid = ?1")?;
    for &id in ids {
        let v = stmt
            .query_row([id], |r| {
                Ok(match r.get_ref(0)? {
                    rusqlite::types::ValueRef::Blob(b) => blob_to_vec(b),
                    _ => None,
                })
            })
            .optional()?
            .flatten();
        if let Some(v) = v {
            scored.push((id, score::cosine(q, &v)));
        }
    }
    Ok(top_k(scored, k))
}

/// Exact cosine over `chunks.embedding` in process (no vec0).
pub fn in_process_knn(
    store: &Store,
    q: &[f32],
    k: usize,
    source: Option<&str>,
) -> Result<Vec<(i64, f64)>, SearchError> {
    let mut stmt = store.conn().prepare_cached(
        "SELECT rowid, embedding FROM chunks
         WHERE embedding IS NOT NULL AND (?1 IS NULL OR source = ?1)",
    )?;
    let rows = stmt.query_map([source], |r| {
        Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
    })?;
    let mut scored = Vec::new();
    for r in rows {
        let (id, b) = r?;
        if let Some(v) = blob_to_vec(&b) {
            scored.push((id, score::cosine(q, &v)));
        }
    }
    Ok(top_k(scored, k))
}

fn top_k(mut scored: Vec<(i64, f64)>, k: usize) -> Vec<(i64, f64)> {
    let by = |a: &(i64, f64), b: &(i64, f64)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if scored.len() > k && k > 0 {
        scored.select_nth_unstable_by(k - 1, by);
        scored.truncate(k);
    }
    scored.sort_by(by);
    scored.truncate(k);
    scored
        .into_iter()
        .map(|(id, c)| (id, score::vector_score(c)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn top_k_orders_and_clamps() {
        let v = top_k(vec![(1, 0.2), (2, 0.9), (3, -0.5), (4, 0.5)], 3);
        assert_eq!(v, vec![(2, 0.9), (4, 0.5), (1, 0.2)]);
    }

    #[test]
    fn hamming_counts_differing_bits() {
        assert_eq!(hamming(&[0u8; 48], &[0u8; 48]), 0);
        assert_eq!(hamming(&[0xFFu8; 48], &[0u8; 48]), 384);
        let mut a = [0u8; 11];
        a[10] = 0b1010_0001;
        a[0] = 1;
        assert_eq!(hamming(&a, &[0u8; 11]), 4);
    }

    /// The direct scan of vec0's storage agrees with vec0's own hamming KNN, with
    /// deleted rows (cleared validity bits) and several storage chunks. Fails when
    /// a sqlite-vec upgrade changes the layout in a way the shape checks miss.
    #[test]
    fn bit_scan_matches_vec0_knn() {
        use crate::store::{FileRecord, NewChunk, WriteMode};
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("m.sqlite")).unwrap();
        assert!(store.vec_backend().is_loaded());
        let dims = 64;
        store.reset_index("t", dims, "v").unwrap();
        let mut seed = 0x1234_5678_9abc_def1u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        };
        for f in 0..25 {
            let path = format!("memory/{f}.md");
            let chunks: Vec<NewChunk> = (0..100)
                .map(|i| NewChunk {
                    id: format!("{path}:{i}"),
                    start_line: i + 1,
                    end_line: i + 1,
                    hash: format!("{f}-{i}"),
                    text: format!("chunk {f} {i}"),
                    context: String::new(),
                    note_time: None,
                    embedding: Some((0..dims).map(|_| rnd()).collect()),
                })
                .collect();
            let rec = FileRecord {
                source: "memory".into(),
                path: path.clone(),
                sha256: format!("{f}"),
                mtime_ns: 1,
                size: 1,
                indexed_bytes: 0,
                indexed_lines: 0,
            };
            store
                .write_file(&rec, &chunks, WriteMode::Replace, "t")
                .unwrap();
        }
        for f in [3, 11, 12] {
            store
                .remove_file("memory", &format!("memory/{f}.md"))
                .unwrap();
        }
        let q: Vec<f32> = (0..dims).map(|_| rnd()).collect();
        let blob = crate::store::vec_to_blob(&q);
        // vec0's full ranking: rowid -> hamming distance.
        let dist: HashMap<i64, f64> = store
            .conn()
            .prepare(
                "SELECT rowid, distance FROM chunks_vec_bit
                 WHERE embedding MATCH vec_quantize_binary(?1) AND k = 4000",
            )
            .unwrap()
            .query_map([&blob], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(dist.len(), 2200);
        for n in [1usize, 24, 256, 2200, 5000] {
            let scan = bit_scan(&store, &q, n).unwrap().expect("sqlite-vec layout");
            // (vec0's KNN refuses k > 4096; the wrapper clamps.)
            let knn = bit_knn_vec0(&store, &q, n).unwrap();
            assert_eq!(scan.len(), knn.len());
            let d = |ids: &[i64]| -> Vec<f64> { ids.iter().map(|i| dist[i]).collect() };
            // Same distances in the same order (ids may differ only among ties).
            let (ds, dk) = (d(&scan), d(&knn));
            assert_eq!(ds, dk, "n = {n}");
            assert!(ds.windows(2).all(|w| w[0] <= w[1]));
        }
        // Removed rows are never returned.
        let all = bit_scan(&store, &q, 5000).unwrap().unwrap();
        let removed: Vec<i64> = all
            .iter()
            .copied()
            .filter(|i| !dist.contains_key(i))
            .collect();
        assert!(removed.is_empty(), "{removed:?}");
        // bit_knn rescoring returns exact cosine order.
        let top = bit_knn(&store, &q, 10).unwrap();
        assert_eq!(top.len(), 10);
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1));
    }
}
