//! Session transcripts are indexed incrementally: an append adds chunks for the
//! new lines only (old chunk rows untouched), a torn last line waits for the next
//! pass, and only user/assistant text is indexed, mapped to JSONL line numbers.

use claw_testkit as support;
use claw_testkit::watch_proc;

use rusqlite::Connection;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

fn msg(role: &str, text: &str, ts: i64) -> String {
    serde_json::json!({"role": role, "content": text, "timestamp": ts}).to_string() + "\n"
}

/// chunk id -> (rowid, start_line, end_line) of the session file.
fn chunks(c: &Connection) -> BTreeMap<String, (i64, i64, i64)> {
    let mut s = c
        .prepare("SELECT id, rowid, start_line, end_line FROM chunks WHERE source = 'sessions'")
        .unwrap();
    s.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?))))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// The one integer `sql` selects.
fn int(c: &Connection, sql: &str) -> i64 {
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn indexed(c: &Connection) -> (i64, i64) {
    c.query_row(
        "SELECT indexed_bytes, indexed_lines FROM files WHERE source = 'sessions'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

fn index(ws: &Path) {
    claw_testkit::index_keyword_only(ws);
}

fn append(path: &Path, s: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(s.as_bytes()).unwrap();
}

#[test]
fn appends_are_indexed_from_the_last_offset() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let file = ws.join("sessions/cli_default.jsonl");
    let first = serde_json::json!({"type": "session", "key": "cli:default"}).to_string()
        + "\n"
        + &msg("system", "SYSTEMPROMPT be helpful", 1767225600)
        + &msg("user", "where did I plant the quince", 1767225601)
        + &serde_json::json!({"role": "tool", "content": "TOOLPAYLOAD", "timestamp": 1767225602})
            .to_string()
        + "\n"
        + &msg("assistant", "the quince is by the shed", 1767225603);
    support::write_tree(ws, &[("sessions/cli_default.jsonl", first.as_str())]);
    index(ws);
    let c = Connection::open(claw_testkit::db_path(ws)).unwrap();
    let before = chunks(&c);
    assert_eq!(before.len(), 1);
    let (_, (_, start, end)) = before.iter().next().unwrap();
    assert_eq!((*start, *end), (3, 5));
    assert_eq!(indexed(&c), (first.len() as i64, 5));
    let text: String = c
        .query_row("SELECT text FROM chunks WHERE source='sessions'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(
        !text.contains("SYSTEMPROMPT") && !text.contains("TOOLPAYLOAD"),
        "{text}"
    );
    let note_time = int(&c, "SELECT note_time FROM chunks WHERE source='sessions'");
    assert_eq!(note_time, 1767225603);

    // Append two messages and a torn (half-written) line.
    let more = msg("user", "and the medlar tree", 1767225700)
        + &msg("assistant", "medlar is near the pond", 1767225701);
    let torn = "{\"role\":\"user\",\"content\":\"half writ";
    append(&file, &(more.clone() + torn));
    index(ws);
    let after = chunks(&c);
    // Old rows untouched (same ids and rowids), new chunk only covers the new lines.
    for (id, v) in &before {
        assert_eq!(after.get(id), Some(v), "old chunk {id} was rewritten");
    }
    let new: Vec<_> = after
        .iter()
        .filter(|(id, _)| !before.contains_key(*id))
        .collect();
    assert_eq!(new.len(), 1, "{after:?}");
    assert_eq!((new[0].1.1, new[0].1.2), (6, 7));
    assert_eq!(indexed(&c), ((first.len() + more.len()) as i64, 7));
    let torn_hits = int(
        &c,
        "SELECT count(*) FROM chunks WHERE text LIKE '%half writ%'",
    );
    assert_eq!(torn_hits, 0);

    // The torn line completes: it is indexed on the next pass, nothing else changes.
    append(&file, "ten\",\"timestamp\":1767225800}\n");
    index(ws);
    let last = chunks(&c);
    assert_eq!(last.len(), after.len() + 1);
    for (id, v) in &after {
        assert_eq!(last.get(id), Some(v));
    }
    assert_eq!(indexed(&c).1, 8);
    let done = int(
        &c,
        "SELECT count(*) FROM chunks WHERE text LIKE '%half written%'",
    );
    assert_eq!(done, 1);
}

#[test]
fn watcher_indexes_appends_incrementally() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let file = ws.join("sessions/s.jsonl");
    let first = msg("user", "firstturn about apricots", 1767225600)
        + &msg("assistant", "apricots like sun", 1767225601);
    support::write_tree(ws, &[("sessions/s.jsonl", first.as_str())]);
    let mut w = watch_proc::WatchProc::start(ws);
    w.wait_db("transcript indexed at start-up", |c| {
        watch_proc::fts(c, "apricots") == 1
    });
    let c = watch_proc::db(ws).unwrap();
    let before = chunks(&c);
    for i in 0..3 {
        append(
            &file,
            &msg(
                "user",
                &format!("appendturn{i} about plums"),
                1767225700 + i,
            ),
        );
    }
    w.wait_db("appended lines indexed", |c| {
        watch_proc::fts(c, "plums") >= 1
    });
    w.wait_db("all three appends", |c| indexed(c).1 == 5);
    let after = chunks(&c);
    for (id, v) in &before {
        assert_eq!(after.get(id), Some(v), "old chunk {id} was rewritten");
    }
    for (id, (_, start, _)) in &after {
        if !before.contains_key(id) {
            assert!(*start >= 3, "new chunk starts at line {start}");
        }
    }
    w.stop();
}
