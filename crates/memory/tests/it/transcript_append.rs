//! A transcript indexed while it grows (live use: the user's line is indexed
//! before the answer arrives) ends with the chunks of indexing the finished file
//! once: the trailing exchange is read again when its answer is appended.

use claw_memory::config::{EmbedProvider, MemoryConfig};
use claw_memory::indexer::{self, IndexOptions};
use claw_memory::lock::WriterLock;
use claw_memory::store::Store;
use claw_testkit::transcripts::{self, append};
use std::path::Path;
use std::time::Duration;

fn index(store: &mut Store, settings: &MemoryConfig) -> indexer::IndexReport {
    let lock = WriterLock::acquire(&settings.state_dir(), "test", Duration::ZERO).unwrap();
    indexer::run(
        store,
        settings,
        None,
        &IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .unwrap()
}

/// Every chunk of the sessions source: (start, end, context, text, id).
fn chunks(store: &Store) -> Vec<(i64, i64, String, String, String)> {
    let c = store.open_inspector().unwrap();
    let mut st = c
        .prepare(
            "SELECT start_line, end_line, context, text, id FROM chunks
             WHERE source = 'sessions' ORDER BY start_line, end_line, id",
        )
        .unwrap();
    st.query_map([], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn workspace(dir: &Path) -> (MemoryConfig, Store, std::path::PathBuf) {
    let settings = MemoryConfig::for_workspace(dir, EmbedProvider::None);
    std::fs::create_dir_all(dir.join("sessions")).unwrap();
    let store = Store::open(&settings.db_path()).unwrap();
    (settings, store, dir.join("sessions/cli_default.jsonl"))
}

#[test]
fn an_answer_appended_after_its_question_was_indexed_joins_its_exchange() {
    let (meta, steps) = (transcripts::META, transcripts::growing_exchange());

    // Live: each line indexed as it arrives.
    let live = tempfile::tempdir().unwrap();
    let (settings, mut store, path) = workspace(live.path());
    std::fs::write(&path, meta).unwrap();
    index(&mut store, &settings);
    let mut after_question = None;
    for (i, l) in steps.iter().enumerate() {
        append(&path, l);
        index(&mut store, &settings);
        if i == 2 {
            after_question = Some(chunks(&store));
        }
    }
    // The control: the question alone was its own chunk before its answer came.
    let alone = after_question.unwrap();
    assert!(
        alone.iter().any(|c| c.0 == 4 && c.1 == 4),
        "the question indexed alone first: {alone:?}"
    );

    // Whole: the finished file indexed once.
    let whole = tempfile::tempdir().unwrap();
    let (settings2, mut store2, path2) = workspace(whole.path());
    std::fs::write(&path2, format!("{meta}{}", steps.concat())).unwrap();
    index(&mut store2, &settings2);

    let (got, want) = (chunks(&store), chunks(&store2));
    assert_eq!(got, want);
    // The exchanges are whole: the second question with both answers.
    assert!(
        want.iter()
            .any(|c| c.0 == 4 && c.1 == 7 && c.3.contains("Ottilie") && c.3.contains("Friday")),
        "{want:?}"
    );
    assert_eq!(want.len(), 3, "{want:?}");
    // And searchable as such: the word index holds one row per chunk.
    let c = store.open_inspector().unwrap();
    let fts: i64 = c
        .query_row("SELECT count(*) FROM chunks_fts", [], |r| r.get(0))
        .unwrap();
    assert_eq!(fts, 3);
}

/// A transcript's chunks name their day in the user's zone: when the zone
/// changes (`agent.timezone`, or the machine's), the next pass chunks every
/// transcript again in the new one; a pass in an unchanged zone reads nothing.
#[test]
fn a_change_of_zone_redates_the_transcript_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let (mut settings, mut store, path) = workspace(dir.path());
    // 20:30 UTC on 2 March: still the 2nd in UTC, already the 3rd at +10:00.
    std::fs::write(
        &path,
        "{\"type\":\"message\",\"role\":\"user\",\"content\":\"Book the ferry to Tamsin.\",\"timestamp\":\"2026-03-02T20:30:00Z\"}\n\
         {\"type\":\"message\",\"role\":\"assistant\",\"content\":\"Booked for Friday.\",\"timestamp\":\"2026-03-02T20:31:00Z\"}\n",
    )
    .unwrap();
    // A note beside it, which no zone concerns.
    std::fs::create_dir_all(dir.path().join("memory")).unwrap();
    std::fs::write(
        dir.path().join("memory/ferry.md"),
        "# Ferry\nTamsin, Fridays.\n",
    )
    .unwrap();
    let utc = chrono::FixedOffset::east_opt(0).unwrap();
    let east = chrono::FixedOffset::east_opt(10 * 3600).unwrap();
    settings.zone = claw_memory::config::DayZone::Fixed(utc);
    index(&mut store, &settings);
    let before = chunks(&store);
    assert_eq!(before.len(), 1, "{before:?}");
    assert!(before[0].2.contains("2026-03-02"), "{before:?}");
    // Control: the same zone again reads nothing.
    let r = index(&mut store, &settings);
    assert_eq!((r.files_changed, r.files_unchanged), (0, 2), "{r:?}");

    settings.zone = claw_memory::config::DayZone::Fixed(east);
    let r = index(&mut store, &settings);
    assert_eq!(r.files_changed, 1, "only the transcript: {r:?}");
    let after = chunks(&store);
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(
        after[0].2.contains("2026-03-03") && !after[0].2.contains("2026-03-02"),
        "{after:?}"
    );
    // And it is recorded: the next pass in that zone reads nothing.
    let r = index(&mut store, &settings);
    assert_eq!((r.files_changed, r.files_unchanged), (0, 2), "{r:?}");
}
