//! The bulk path against the real server: files written inside a write group go
//! in one transaction per group (or per `GROUP_MAX_CHUNKS`), the keyword
//! statistics (`chunk_stats`) come out exactly as a row-by-row load leaves them,
//! a reset into an empty table builds its search indexes once after the load
//! (and not when other rows are there), reads inside a group see its writes, and
//! a rolled-back group leaves nothing.

use crate::support::{Schema, SchemaStore};
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::storage::SearchStorage;
use claw_memory::store::{FileRecord, NewChunk, WriteMode};
use claw_memory_pg::{GROUP_MAX_CHUNKS, PgStore};

const DIMS: usize = 8;
const MODEL: &str = "bulk-test";

fn file(path: &str, version: &str) -> FileRecord {
    claw_testkit::memory_file(path, version)
}

/// Chunk `i` of file `f` (version `v`): distinct words, a unit vector.
fn chunk(f: usize, i: usize, v: &str) -> NewChunk {
    let mut e = vec![0.1f32; DIMS];
    e[(f + i) % DIMS] = 1.0;
    claw_memory::embed::normalize(&mut e);
    NewChunk {
        id: format!("{f}-{i}-{v}"),
        start_line: i + 1,
        end_line: i + 1,
        hash: format!("h{f}-{i}-{v}"),
        text: format!(
            "file{f} chunk{i} {v} {}",
            "alpha beta gamma ".repeat(1 + (f * 7 + i) % 5)
        ),
        context: format!("Note {f}"),
        note_time: None,
        embedding: Some(e),
    }
}

/// The same sequence of writes — new files, a rewrite, an append, a removal —
/// inside write groups (`grouped`) or one transaction per file.
fn load(pg: &mut PgStore, grouped: bool) {
    pg.reset_index(MODEL, DIMS, "bulk").unwrap();
    if grouped {
        pg.begin_group().unwrap();
    }
    for f in 0..40 {
        let chunks: Vec<NewChunk> = (0..(1 + f % 4)).map(|i| chunk(f, i, "v1")).collect();
        pg.write_file(
            &file(&format!("memory/f{f:02}.md"), "v1"),
            &chunks,
            WriteMode::Replace,
            MODEL,
        )
        .unwrap();
    }
    // A file rewritten in the same group (fewer, other chunks).
    pg.write_file(
        &file("memory/f03.md", "v2"),
        &[chunk(3, 0, "v2")],
        WriteMode::Replace,
        MODEL,
    )
    .unwrap();
    // An append (transcripts).
    pg.write_file(
        &file("memory/f05.md", "v1b"),
        &[chunk(5, 9, "v1")],
        WriteMode::Append,
        MODEL,
    )
    .unwrap();
    // A removal inside the group.
    assert_eq!(pg.remove_file("memory", "memory/f07.md").unwrap(), 4);
    if grouped {
        pg.commit_group().unwrap();
    }
    pg.set_meta("last_index_at", "1").unwrap();
}

fn stats(c: &mut postgres::Client, ns: &str) -> Vec<(String, i64, i64)> {
    c.query(
        "SELECT source, n, total_dl FROM chunk_stats WHERE namespace = $1 ORDER BY source",
        &[&ns],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

fn recount(c: &mut postgres::Client, ns: &str) -> Vec<(String, i64, i64)> {
    c.query(
        "SELECT source, count(*), sum(dl)::int8 FROM chunks WHERE namespace = $1
         GROUP BY source ORDER BY source",
        &[&ns],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
    .collect()
}

/// Each chunk's id, file, words and length, in id order.
fn rows(c: &mut postgres::Client, ns: &str) -> Vec<(String, String, String, i32)> {
    c.query(
        "SELECT id, path, tsv::text, dl FROM chunks WHERE namespace = $1 ORDER BY id",
        &[&ns],
    )
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
    .collect()
}

fn indexes(c: &mut postgres::Client, schema: &str) -> Vec<String> {
    c.query(
        "SELECT indexname FROM pg_indexes WHERE schemaname = $1
           AND indexname IN ('chunks_tsv', 'chunks_trgm', 'chunks_hnsw_8', 'chunk_postings_word',
                             'chunk_postings_rowid') ORDER BY indexname",
        &[&schema],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

#[test]
fn bulk_load_keeps_the_statistics_exactly_as_a_row_by_row_load() {
    let Some(schema) = Schema::new("bulkstats") else {
        return;
    };
    let mut c = schema.client();
    let mut bulk = schema.store("bulk", "ws");
    load(&mut bulk, true);
    let mut rowwise = schema.store("rows", "ws");
    load(&mut rowwise, false);

    let (b, r) = (stats(&mut c, "bulk"), stats(&mut c, "rows"));
    assert_eq!(b, r, "chunk_stats after a bulk load vs row by row");
    assert_eq!(b, recount(&mut c, "bulk"), "chunk_stats vs the chunks");
    // 40 files of 1..4 chunks (100), f03 rewritten to 1 (-3), f05 +1, f07 removed (-4).
    assert_eq!(b[0].1, 94, "{b:?}");
    assert_eq!(rows(&mut c, "bulk"), rows(&mut c, "rows"));
    assert!(bulk.check_consistency().unwrap().is_empty());

    // Incremental single-file writes after the bulk load keep the stats in step.
    bulk.write_file(
        &file("memory/f00.md", "v3"),
        &[chunk(0, 0, "v3"), chunk(0, 1, "v3")],
        WriteMode::Replace,
        MODEL,
    )
    .unwrap();
    assert_eq!(stats(&mut c, "bulk")[0].1, 95);
    assert_eq!(stats(&mut c, "bulk"), recount(&mut c, "bulk"));
    assert!(bulk.check_consistency().unwrap().is_empty());
}

#[test]
fn reset_into_an_empty_table_builds_the_search_indexes_after_the_load() {
    let Some(schema) = Schema::new("bulkidx") else {
        return;
    };
    let mut c = schema.client();
    let mut pg = schema.store("a", "ws");
    pg.reset_index(MODEL, DIMS, "bulk").unwrap();
    assert!(
        indexes(&mut c, &schema.name).is_empty(),
        "dropped for the load"
    );
    pg.begin_group().unwrap();
    for f in 0..10 {
        let chunks: Vec<NewChunk> = (0..3).map(|i| chunk(f, i, "v1")).collect();
        pg.write_file(
            &file(&format!("memory/f{f:02}.md"), "v1"),
            &chunks,
            WriteMode::Replace,
            MODEL,
        )
        .unwrap();
    }
    pg.commit_group().unwrap();
    // The indexer's pass ends by stamping last_index_at: the indexes are built then.
    pg.set_meta("last_index_at", "1").unwrap();
    assert_eq!(
        indexes(&mut c, &schema.name),
        [
            "chunk_postings_rowid",
            "chunk_postings_word",
            "chunks_hnsw_8",
            "chunks_trgm",
            "chunks_tsv"
        ]
    );
    // The postings were loaded without their btrees, then vacuumed (the word
    // stage's index-only scans need their pages marked all-visible; whether a
    // vacuum can mark them depends on the server's other open transactions, so
    // the test checks the vacuum ran).
    assert!(pg.check_consistency().unwrap().is_empty());
    let mut vacuumed = || -> bool {
        c.query_one(
            "SELECT last_vacuum IS NOT NULL FROM pg_stat_user_tables
             WHERE schemaname = $1 AND relname = 'chunk_postings'",
            &[&schema.name],
        )
        .unwrap()
        .get(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !vacuumed() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(vacuumed(), "finish_bulk vacuums the postings");
    assert!(pg.has_vec_tables().unwrap());
    // The vector search uses the HNSW index and finds the nearest chunk.
    let q = chunk(4, 0, "v1").embedding.unwrap();
    let (hits, _) = pg.vector_candidates(&q, 3, None).unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits[0].1 > 0.999, "{hits:?}");

    // A reset while other rows are in the table keeps every index.
    let mut other = schema.store("b", "ws");
    other.reset_index(MODEL, DIMS, "bulk").unwrap();
    assert_eq!(indexes(&mut c, &schema.name).len(), 5);
    // A rebuild of the only namespace (its rows deleted: an empty table again)
    // builds them once after its fill.
    other.drop_namespace().unwrap();
    pg.rebuild(MODEL, DIMS, "bulk", &mut |s| {
        s.begin_group()?;
        s.write_file(
            &file("memory/f00.md", "v2"),
            &[chunk(0, 0, "v2")],
            WriteMode::Replace,
            MODEL,
        )?;
        s.commit_group()
    })
    .unwrap();
    assert_eq!(indexes(&mut c, &schema.name).len(), 5);
    let n: i64 = c
        .query_one("SELECT count(*) FROM chunks", &[])
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[test]
fn reads_inside_a_group_see_its_writes_and_a_rollback_drops_the_rest() {
    let Some(schema) = Schema::new("bulkread") else {
        return;
    };
    let mut pg = schema.store("a", "ws");
    pg.reset_index(MODEL, DIMS, "bulk").unwrap();
    pg.begin_group().unwrap();
    let f0 = file("memory/f00.md", "v1");
    pg.write_file(
        &f0,
        &[chunk(0, 0, "v1"), chunk(0, 1, "v1")],
        WriteMode::Replace,
        MODEL,
    )
    .unwrap();
    assert_eq!(pg.file_record("memory", "memory/f00.md").unwrap(), Some(f0));
    assert_eq!(pg.chunk_count("memory", "memory/f00.md").unwrap(), 2);
    // Written, not yet sent: a rollback drops it; what was sent stays.
    pg.write_file(
        &file("memory/f01.md", "v1"),
        &[chunk(1, 0, "v1")],
        WriteMode::Replace,
        MODEL,
    )
    .unwrap();
    pg.rollback_group();
    assert!(pg.file_record("memory", "memory/f01.md").unwrap().is_none());
    assert_eq!(pg.chunk_count("memory", "memory/f00.md").unwrap(), 2);

    // A group over GROUP_MAX_CHUNKS is sent in parts, each whole.
    pg.begin_group().unwrap();
    let per = 100;
    let files = GROUP_MAX_CHUNKS / per + 3;
    for f in 0..files {
        let chunks: Vec<NewChunk> = (0..per).map(|i| chunk(100 + f, i, "v1")).collect();
        pg.write_file(
            &file(&format!("memory/g{f:03}.md"), "v1"),
            &chunks,
            WriteMode::Replace,
            MODEL,
        )
        .unwrap();
    }
    let mut c = schema.client();
    let sent: i64 = c
        .query_one(
            "SELECT count(*) FROM chunks WHERE path LIKE 'memory/g%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(sent as usize, GROUP_MAX_CHUNKS, "the first part was sent");
    pg.commit_group().unwrap();
    let all: i64 = c
        .query_one(
            "SELECT count(*) FROM chunks WHERE path LIKE 'memory/g%'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(all as usize, files * per);
}

/// Two namespaces reset into the empty table before either writes: both defer
/// the search indexes, load, and build them at the same moment. The builds are
/// serialised (the first builds, the second finds them there) — concurrent
/// `CREATE INDEX IF NOT EXISTS` twins fail on the catalog's unique name (how
/// two workspaces indexing one namespace failed in CI), or, in one transaction
/// each, deadlock against each other's ANALYZE (a retry after the server's
/// deadlock timeout): neither may happen.
#[test]
fn two_bulk_loads_into_the_empty_table_build_the_indexes_once() {
    let Some(schema) = Schema::new("bulktwin") else {
        return;
    };
    let mut c = schema.client();
    for round in 0..6 {
        let mut stores: Vec<PgStore> = ["a", "b"].iter().map(|ns| schema.store(ns, "ws")).collect();
        for pg in &mut stores {
            pg.reset_index(MODEL, DIMS, "bulk").unwrap();
        }
        assert!(indexes(&mut c, &schema.name).is_empty(), "round {round}");
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let built: Vec<_> = stores
            .into_iter()
            .enumerate()
            .map(|(k, mut pg)| {
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    pg.begin_group().unwrap();
                    for f in 0..200 {
                        let chunks: Vec<NewChunk> =
                            (0..3).map(|i| chunk(f, i, &format!("{k}"))).collect();
                        pg.write_file(
                            &file(&format!("memory/f{f:02}.md"), "v1"),
                            &chunks,
                            WriteMode::Replace,
                            MODEL,
                        )
                        .unwrap();
                    }
                    pg.commit_group().unwrap();
                    barrier.wait();
                    let r = pg.finish_bulk().map_err(|e| e.to_string());
                    (pg, r)
                })
            })
            .collect::<Vec<_>>() // both spawned before either is joined
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(pg, r)| {
                assert_eq!(r, Ok(()), "round {round}");
                assert_eq!(
                    pg.deadlock_retries(),
                    0,
                    "round {round}: the builds deadlocked"
                );
                pg
            })
            .collect();
        assert_eq!(
            indexes(&mut c, &schema.name),
            [
                "chunk_postings_rowid",
                "chunk_postings_word",
                "chunks_hnsw_8",
                "chunks_trgm",
                "chunks_tsv"
            ],
            "round {round}"
        );
        for pg in built {
            pg.drop_namespace().unwrap();
        }
    }
}
