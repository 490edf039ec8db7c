//! A date or a relative time in the query on PostgreSQL (issue 29): the chunks
//! dated inside the window (`SearchStorage::dated_between`, PostgreSQL's own SQL)
//! join the candidates and rank first, even with none of the query's words; the
//! same query without a date ranks by its words; both as on SQLite.

use crate::support::{Doc, Schema, SchemaStore};
use claw_memory::config::MemorySettings;
use claw_memory::search::engine::{SearchResponse, search_at};
use claw_memory::search::storage::SearchStorage;
use claw_memory::search::types::{Mode, SearchRequest};
use claw_testkit::engine_suite::{self, NOW, fill, paths};

/// Three dated notes: the September one shares one word with the garage
/// questions, the October ones are about the garage throughout.
const DATED: &[Doc<'_>] = &[
    (
        "memory",
        "memory/2026-09-03.md",
        "The repairman Tomasz looked at the door and comes back on Friday.",
    ),
    (
        "memory",
        "memory/2026-10-20.md",
        "Garage: the garage door jammed again; the garage opener got a new battery.",
    ),
    (
        "memory",
        "memory/2026-10-28.md",
        "Garage tidy-up: sorted the tools in the garage, swept the floor.",
    ),
];

fn search(s: &dyn SearchStorage, q: &str, mode: Mode) -> SearchResponse {
    let req = SearchRequest {
        mode,
        min_score: Some(0.0),
        ..SearchRequest::new(q)
    };
    // The clock: 2026-12-01 00:00 UTC, in UTC.
    search_at(s, None, &MemorySettings::default(), &req, NOW, 0).unwrap()
}

#[test]
fn a_date_in_the_query_ranks_that_days_chunks_first_on_postgres() {
    let Some(schema) = Schema::new("dates") else {
        return;
    };
    let mut pg = schema.store("dates", "ws-a");
    fill(&mut pg, DATED, None);
    let mut sqlite = engine_suite::sqlite("dates").unwrap();
    fill(sqlite.index(), DATED, None);

    for mode in [Mode::Hybrid, Mode::Fts] {
        // Control: no date, the garage notes first.
        let r = search(&pg, "garage door", mode);
        assert_eq!(
            paths(&r).first().copied(),
            Some("memory/2026-10-20.md"),
            "{mode:?}: {:?}",
            paths(&r)
        );
        // The same words with a date: that day's note first.
        let r = search(&pg, "garage door on September 3rd", mode);
        assert_eq!(
            paths(&r).first().copied(),
            Some("memory/2026-09-03.md"),
            "{mode:?}: {:?}",
            paths(&r)
        );
        // A date and no word of the note: only the window brings it in.
        let r = search(&pg, "what happened on September 3rd?", mode);
        assert_eq!(
            paths(&r),
            vec!["memory/2026-09-03.md"],
            "{mode:?}: the in-window chunk is the one hit"
        );
        let r = search(&pg, "what happened on September 3rd?", mode);
        let s = search(sqlite.search(), "what happened on September 3rd?", mode);
        assert_eq!(paths(&r), paths(&s), "{mode:?}: as on SQLite");
        // A month: the October note with a word of the query before the
        // September one with more of them; the window alone (no word, no
        // vector) does not lift the other October note.
        let r = search(&pg, "Tomasz and the door", mode);
        assert_eq!(
            paths(&r).first().copied(),
            Some("memory/2026-09-03.md"),
            "{mode:?}"
        );
        let r = search(&pg, "Tomasz and the door in October", mode);
        let s = search(sqlite.search(), "Tomasz and the door in October", mode);
        assert_eq!(
            paths(&r),
            vec![
                "memory/2026-10-20.md",
                "memory/2026-09-03.md",
                "memory/2026-10-28.md"
            ],
            "{mode:?}"
        );
        assert_eq!(paths(&r), paths(&s), "{mode:?}: as on SQLite");
    }
}

/// The plan of `dated_between`'s query (`namespace = ANY(...)` and a note_time
/// range) under `EXPLAIN` in a session that refuses sequential scans.
fn dated_plan(c: &mut postgres::Client) -> String {
    c.batch_execute("SET enable_seqscan = off").unwrap();
    let plan: Vec<String> = c
        .query(
            "EXPLAIN SELECT rowid FROM chunks
             WHERE namespace = ANY(ARRAY['dates']) AND note_time >= 1788000000
               AND note_time < 1789000000 AND (NULL::text IS NULL OR source = NULL::text)
             ORDER BY note_time DESC LIMIT 50",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    plan.join("\n")
}

/// A dated query reads the dated chunks through their index (schema 5,
/// `chunks_note_time`) instead of scanning every chunk.
#[test]
fn a_date_window_reads_the_note_time_index() {
    let Some(schema) = Schema::new("dates_ix") else {
        return;
    };
    let mut pg = schema.store("dates", "ws-a");
    fill(&mut pg, DATED, None);
    let mut c = schema.client();
    let plan = dated_plan(&mut c);
    assert!(plan.contains("chunks_note_time"), "{plan}");
    // Control: without the index the same query has no such path.
    c.batch_execute("DROP INDEX chunks_note_time").unwrap();
    let plan = dated_plan(&mut c);
    assert!(!plan.contains("chunks_note_time"), "{plan}");
}
