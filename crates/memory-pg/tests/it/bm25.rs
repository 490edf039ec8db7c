//! The keyword stage on PostgreSQL is FTS5's BM25: the same chunks written to both
//! backends give the same normalised keyword scores (same tokenisation, same
//! k1/b/idf, same document lengths and average), and `chunk_stats` (the count
//! and total length BM25 needs) and `chunk_postings` (each chunk's words), kept
//! by triggers, follow every write, rewrite and delete.

use crate::support::{self, Doc, Schema, SchemaStore};
use claw_memory::index_storage::IndexStorage;
use claw_memory::search::query::ParsedQuery;
use claw_memory::search::score::KeywordNorm;
use claw_memory::search::storage::SearchStorage;
use claw_memory::store::{FileRecord, NewChunk, Store, WriteMode};
use std::collections::BTreeMap;

const DOCS: &[Doc<'static>] = &[
    (
        "memory",
        "a.md",
        "The cat sat on the mat. The cat was black.",
    ),
    (
        "memory",
        "b.md",
        "A dog chased the cat across the garden, then the dog slept.",
    ),
    (
        "memory",
        "c.md",
        "COVID-19 vaccines reduce IL-6 levels in most patients; covid trials continue.",
    ),
    (
        "memory",
        "d.md",
        "Interleukin IL-6 and TNF-alpha are cytokines measured in the trial.",
    ),
    (
        "memory",
        "e.md",
        "Garden notes: tomatoes, basil, and a very long list of other plants that grow in the garden every summer when the weather is warm enough for them.",
    ),
    (
        "memory",
        "f.md",
        "Black coffee, no sugar; the mat by the door is black too.",
    ),
    (
        "notes",
        "g.md",
        "Trial registry: NCT-0042 enrolled 19 patients with covid.",
    ),
    (
        "notes",
        "h.md",
        "The dog's name is Rex; Rex is a black dog.",
    ),
];

/// keyword_candidates by path: normalised score.
fn by_path(s: &dyn SearchStorage, q: &str, norm: KeywordNorm) -> BTreeMap<String, f64> {
    let pq = ParsedQuery::parse(q);
    let hits = s.keyword_candidates(&pq, 50, None, norm).unwrap();
    let ids: Vec<i64> = hits.keys().copied().collect();
    s.rows(&ids, false)
        .unwrap()
        .into_iter()
        .map(|(id, row)| (row.path, hits[&id]))
        .collect()
}

#[test]
fn keyword_scores_equal_fts5_bm25() {
    let Some(schema) = Schema::new("bm25") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = Store::open(&dir.path().join(".claw/memory.sqlite")).unwrap();
    support::fill(&mut sqlite, DOCS, None);
    let mut pg = schema.store("bm25", "ws-a");
    support::fill(&mut pg, DOCS, None);
    for q in [
        "black cat",
        "dog garden",
        "covid-19 il-6",
        "trial patients covid",
        "the mat",
        "cytokines",
        "nothing-matches-this",
    ] {
        for norm in [KeywordNorm::MaxScaled, KeywordNorm::MinMax] {
            let a = by_path(&sqlite, q, norm);
            let b = by_path(&pg, q, norm);
            assert_eq!(
                a.keys().collect::<Vec<_>>(),
                b.keys().collect::<Vec<_>>(),
                "{q}: the same chunks match"
            );
            for (path, sa) in &a {
                let sb = b[path];
                assert!(
                    (sa - sb).abs() < 1e-9,
                    "{q} {path} {norm:?}: sqlite {sa} vs postgres {sb}"
                );
            }
        }
    }
    // A query with scores that differ between chunks (the test is not vacuous).
    let s = by_path(&pg, "black cat", KeywordNorm::MaxScaled);
    assert!(s.len() >= 3 && s.values().any(|v| *v < 0.99), "{s:?}");
}

/// (source, chunks, total tokens) rows.
type StatRows = Vec<(String, i64, i64)>;

/// `chunk_stats` as kept, and as counted from `chunks`.
fn stats(schema: &Schema) -> (StatRows, StatRows) {
    let mut c = schema.client();
    let kept = c
        .query(
            "SELECT source, n, total_dl FROM chunk_stats ORDER BY source",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let counted = c
        .query(
            "SELECT source, count(*), sum(dl)::int8 FROM chunks GROUP BY source ORDER BY source",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    (kept, counted)
}

#[test]
fn chunk_stats_follow_writes_rewrites_and_deletes() {
    let Some(schema) = Schema::new("bm25stats") else {
        return;
    };
    let mut pg = schema.store("st", "ws-a");
    support::fill(&mut pg, DOCS, None);
    let (kept, counted) = stats(&schema);
    assert_eq!(kept, counted);
    assert_eq!(kept.iter().map(|r| r.1).sum::<i64>(), DOCS.len() as i64);
    // "The cat sat on the mat. The cat was black." is 10 tokens.
    let mut c = schema.client();
    let dl: i32 = c
        .query_one("SELECT dl FROM chunks WHERE path = 'a.md'", &[])
        .unwrap()
        .get(0);
    assert_eq!(dl, 10);

    // Append to one file, rewriting its chunk in place (`ON CONFLICT DO UPDATE`)
    // and adding one; remove another file.
    let file = FileRecord {
        source: "memory".into(),
        path: "a.md".into(),
        sha256: "sha-a2".into(),
        mtime_ns: 2,
        size: 10,
        indexed_bytes: 0,
        indexed_lines: 0,
    };
    let chunk = |id: &str, text: &str| NewChunk {
        id: id.into(),
        start_line: 1,
        end_line: 1,
        hash: format!("h-{id}"),
        text: text.into(),
        context: String::new(),
        note_time: None,
        embedding: None,
    };
    pg.write_file(
        &file,
        &[
            chunk("memory:a.md", "one two three"),
            chunk("memory:a.md#2", "four"),
        ],
        WriteMode::Append,
        "",
    )
    .unwrap();
    assert_eq!(pg.remove_file("notes", "g.md").unwrap(), 1);
    let (kept, counted) = stats(&schema);
    assert_eq!(kept, counted);
    assert_eq!(kept.iter().map(|r| r.1).sum::<i64>(), DOCS.len() as i64);
    // The word postings followed the rewrite, the new chunk and the removal.
    assert!(pg.check_consistency().unwrap().is_empty());
    let postings = |c: &mut postgres::Client, word: &str| -> Vec<(String, i32)> {
        c.query(
            "SELECT c.path, p.tf FROM chunk_postings p JOIN chunks c USING (rowid)
             WHERE p.lexeme = $1 ORDER BY c.path, c.start_line, p.tf",
            &[&word],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    };
    assert_eq!(postings(&mut c, "two"), vec![("a.md".to_string(), 1)]);
    assert!(postings(&mut c, "sat").is_empty(), "a.md's old words went");
    assert!(postings(&mut c, "nct").is_empty(), "g.md's words went");
    // Control: the check sees a posting the chunks do not have.
    c.execute(
        "INSERT INTO chunk_postings (lexeme, namespace, rowid, tf, dl, source)
         SELECT 'stray', namespace, rowid, 1, dl, source FROM chunks LIMIT 1",
        &[],
    )
    .unwrap();
    assert_eq!(
        pg.check_consistency().unwrap(),
        vec!["1 word postings differ from the chunks' words".to_string()]
    );
    c.execute("DELETE FROM chunk_postings WHERE lexeme = 'stray'", &[])
        .unwrap();
    let memory = kept.iter().find(|r| r.0 == "memory").unwrap();
    // 6 chunks of "memory" before; a.md's 10 tokens became 3, plus 1 new chunk of 1.
    let before: i64 = DOCS.iter().filter(|d| d.0 == "memory").count() as i64;
    assert_eq!(memory.1, before + 1);

    // Dropping the namespace leaves no statistics and no postings behind.
    pg.drop_namespace().unwrap();
    let (kept, counted) = stats(&schema);
    assert!(kept.is_empty() && counted.is_empty(), "{kept:?}");
    let left: i64 = c
        .query_one("SELECT count(*) FROM chunk_postings", &[])
        .unwrap()
        .get(0);
    assert_eq!(left, 0);
}

/// keyword_candidates by start line (one file of many one-line chunks): score.
fn by_line(s: &dyn SearchStorage, q: &str) -> BTreeMap<i64, f64> {
    let pq = ParsedQuery::parse(q);
    let hits = s
        .keyword_candidates(&pq, 50, None, KeywordNorm::MaxScaled)
        .unwrap();
    let ids: Vec<i64> = hits.keys().copied().collect();
    s.rows(&ids, false)
        .unwrap()
        .into_iter()
        .map(|(id, row)| (row.start_line, hits[&id]))
        .collect()
}

/// Above `KEYWORD_RANK_BUDGET` rows PostgreSQL bounds the ranking as SQLite does:
/// the rarest terms are ranked (a common one acts as a stop word), a query of
/// common terms ranks the conjunction's newest window — the same chunks and
/// scores on both backends.
#[test]
fn keyword_ranking_is_bounded_like_sqlite() {
    use claw_memory::search::keyword::KEYWORD_RANK_BUDGET;
    let Some(schema) = Schema::new("bm25bound") else {
        return;
    };
    let n = KEYWORD_RANK_BUDGET + 500;
    let chunks: Vec<NewChunk> = (0..n)
        .map(|i| {
            let mut text = format!("common filler{} words", i % 50);
            if i % 2 == 0 {
                text.push_str(" often");
            }
            if i % 1500 == 7 {
                text.push_str(" zanzibar zanzibar");
            }
            NewChunk {
                id: format!("c{i}"),
                start_line: i + 1,
                end_line: i + 1,
                hash: format!("{i}"),
                text,
                context: String::new(),
                note_time: None,
                embedding: None,
            }
        })
        .collect();
    let file = claw_testkit::memory_file("memory/big.md", "x");
    let dir = tempfile::tempdir().unwrap();
    let mut sqlite = Store::open(&dir.path().join(".claw/memory.sqlite")).unwrap();
    let mut pg = schema.store("bound", "ws-a");
    for s in [&mut sqlite as &mut dyn IndexStorage, &mut pg] {
        s.reset_index("", 0, "test").unwrap();
        s.write_file(&file, &chunks, WriteMode::Replace, "")
            .unwrap();
    }
    // A common term beside a rare one: only the rare one is ranked.
    let b = by_line(&pg, "common zanzibar");
    assert_eq!(b.keys().copied().collect::<Vec<_>>(), vec![8, 1508, 3008]);
    // Every term common: the conjunction's newest rows only.
    let w = by_line(&pg, "common words");
    assert_eq!(w.len(), 50);
    assert!(w.keys().all(|l| *l > 500), "{w:?}");
    // Many chunks tie on score (equal lengths): compare the scores ranked, and the
    // chunks where the scores single them out.
    for q in [
        "common zanzibar",
        "common words",
        "often common",
        "often zanzibar",
        "words",
    ] {
        let a = by_line(&sqlite, q);
        let b = by_line(&pg, q);
        let ranked = |m: &BTreeMap<i64, f64>| {
            let mut v: Vec<f64> = m.values().copied().collect();
            v.sort_by(|x, y| y.total_cmp(x));
            v
        };
        let (ra, rb) = (ranked(&a), ranked(&b));
        assert_eq!(ra.len(), rb.len(), "{q}");
        for (x, y) in ra.iter().zip(&rb) {
            assert!((x - y).abs() < 1e-9, "{q}: {ra:?} vs {rb:?}");
        }
        if q.contains("zanzibar") {
            let top3 = |m: &BTreeMap<i64, f64>| {
                let mut v: Vec<(i64, f64)> = m.iter().map(|(l, s)| (*l, *s)).collect();
                v.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
                let mut top: Vec<i64> = v.iter().take(3).map(|x| x.0).collect();
                top.sort_unstable();
                top
            };
            assert_eq!(top3(&a), vec![8, 1508, 3008], "{q}");
            assert_eq!(top3(&b), top3(&a), "{q}");
        }
    }
}
