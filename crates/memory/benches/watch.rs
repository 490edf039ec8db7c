//! Watcher benchmark (harness = false): event-to-searchable latency of a one-line
//! edit (p50/p95, default debounce included) and the time for the watcher to
//! absorb a burst of 1,000 new files, keyword-only and — when
//! `CLAW_EMBED_MODEL_DIR` and `ORT_DYLIB_PATH` are set — with the local model.
//! Prints a Markdown table.
//!
//! `cargo bench --bench watch` (env `CLAW_BENCH_EDITS`, default 20 edits).

#![allow(clippy::unwrap_used)]

use claw_memory::config::{EmbedProvider, MemoryConfig};
use claw_memory::embed::{self, Embedder, Loaded};
use claw_memory::watch::{self, IndexerSink, WatchEvent, WatchOptions};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(600);

fn wait_rescan(rx: &Receiver<WatchEvent>) {
    let end = Instant::now() + DEADLINE;
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(WatchEvent::Synced { rescan: true, .. }) => return,
            Ok(WatchEvent::Error { message }) => panic!("watcher error: {message}"),
            Ok(_) => {}
            Err(e) => panic!("no start-up sync: {e}"),
        }
    }
}

fn poll(db: &Path, sql: &str, want: i64) -> Instant {
    let c = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.busy_timeout(Duration::from_secs(5)).unwrap();
    let end = Instant::now() + DEADLINE;
    loop {
        let n: i64 = c.query_row(sql, [], |r| r.get(0)).unwrap_or(-1);
        if n == want {
            return Instant::now();
        }
        assert!(Instant::now() < end, "timed out polling {sql}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

struct Row {
    mode: String,
    p50: Duration,
    p95: Duration,
    work_p50_ms: u64,
    burst: Duration,
    batches: usize,
}

fn run(
    mode: &str,
    provider: EmbedProvider,
    embedder: Option<Box<dyn Embedder>>,
    edits: usize,
) -> Row {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().to_path_buf();
    let mem = ws.join("memory");
    std::fs::create_dir_all(mem.join("base")).unwrap();
    for i in 0..200 {
        std::fs::write(
            mem.join(format!("base/n{i:03}.md")),
            format!("# Base note {i}\n\nSome text about gardening and tools, item {i}.\n"),
        )
        .unwrap();
    }
    let settings = MemoryConfig::for_workspace(&ws, provider);
    let db: PathBuf = settings.db_path();
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = IndexerSink::new(settings.clone(), embedder);
    let w = watch::spawn(settings, WatchOptions::default(), Box::new(sink), tx).unwrap();
    wait_rescan(&rx);

    // One-line edits: append a unique word, time until FTS finds it.
    let mut lat = Vec::new();
    let mut work = Vec::new();
    for i in 0..edits {
        let f = mem.join(format!("base/n{:03}.md", i % 200));
        let mut text = std::fs::read_to_string(&f).unwrap();
        text.push_str(&format!("edit marker benchedit{i}\n"));
        let t0 = Instant::now();
        std::fs::write(&f, text).unwrap();
        let t1 = poll(
            &db,
            &format!("SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH 'benchedit{i}'"),
            1,
        );
        lat.push(t1 - t0);
        // Collect the batch's own processing time.
        let end = Instant::now() + DEADLINE;
        loop {
            match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
                Ok(WatchEvent::Synced {
                    elapsed_ms,
                    reindexed,
                    ..
                }) if !reindexed.is_empty() => {
                    work.push(elapsed_ms);
                    break;
                }
                Ok(_) => {}
                Err(e) => panic!("no sync event: {e}"),
            }
        }
    }
    lat.sort();
    work.sort();

    // Burst: 1,000 new files as fast as possible.
    std::fs::create_dir_all(mem.join("burst")).unwrap();
    while rx.try_recv().is_ok() {}
    let t0 = Instant::now();
    for i in 0..1000 {
        std::fs::write(
            mem.join(format!("burst/b{i:04}.md")),
            format!("# Burst {i}\n\nburstword entry number {i} with a little text.\n"),
        )
        .unwrap();
    }
    let t1 = poll(
        &db,
        "SELECT count(*) FROM files WHERE path LIKE 'memory/burst/%'",
        1000,
    );
    w.stop().unwrap();
    let events: Vec<WatchEvent> = rx.iter().collect();
    if std::env::var_os("CLAW_BENCH_DEBUG").is_some() {
        eprintln!("{events:#?}");
    }
    let batches = events
        .iter()
        .filter(|e| matches!(e, WatchEvent::Synced { reindexed, .. } if !reindexed.is_empty()))
        .count();
    Row {
        mode: mode.to_string(),
        p50: pct(&lat, 0.5),
        p95: pct(&lat, 0.95),
        work_p50_ms: work[work.len() / 2],
        burst: t1 - t0,
        batches,
    }
}

/// Median cost of the stat-level freshness check (what `claw memory search` runs
/// before answering) over the extracted notes garden, keyword-only index.
fn freshness_on_garden() -> Option<(usize, Duration)> {
    let tarball =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/notes-garden.tar.gz");
    if !tarball.is_file() {
        eprintln!(
            "{} missing: skipping the freshness figure",
            tarball.display()
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("memory");
    std::fs::create_dir_all(&mem).unwrap();
    let ok = std::process::Command::new("tar")
        .arg("xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&mem)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cannot extract the garden");
    let settings = MemoryConfig::for_workspace(dir.path(), EmbedProvider::None);
    let mut store = claw_memory::store::Store::open(&settings.db_path()).unwrap();
    let lock =
        claw_memory::lock::WriterLock::acquire(&settings.state_dir(), "bench", Duration::ZERO)
            .unwrap();
    claw_memory::indexer::run(
        &mut store,
        &settings,
        None,
        &claw_memory::indexer::IndexOptions::default(),
        &lock,
        &|_| {},
    )
    .unwrap();
    let mut times = Vec::new();
    let mut scanned = 0;
    for _ in 0..7 {
        let t = Instant::now();
        let st = claw_memory::freshness::check(&settings, &store).unwrap();
        times.push(t.elapsed());
        assert!(st.is_fresh());
        scanned = st.scanned;
    }
    times.sort();
    Some((scanned, times[times.len() / 2]))
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let edits: usize = claw_testkit::env_number("CLAW_BENCH_EDITS").unwrap_or(20);
    let mut rows = vec![run("keyword-only", EmbedProvider::None, None, edits)];
    let model_dir = std::env::var_os("CLAW_EMBED_MODEL_DIR").map(PathBuf::from);
    let ort = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
    if let (Some(model_dir), Some(ort)) = (model_dir, ort) {
        let provider = EmbedProvider::Local {
            model_dir: Some(model_dir),
            ort_dylib_path: Some(ort),
            runtime: Default::default(),
        };
        match embed::load(&provider, 8) {
            Loaded::Ready(e) => rows.push(run("local model (MiniLM-L6)", provider, Some(e), edits)),
            Loaded::Disabled => {}
            Loaded::Unavailable(e) => eprintln!("local model unavailable: {e}"),
        }
    } else {
        eprintln!("CLAW_EMBED_MODEL_DIR/ORT_DYLIB_PATH not set: keyword-only figures only");
    }
    println!(
        "\nWatcher ({edits} one-line edits into a 200-note workspace; debounce {} ms for notes)\n",
        watch::NOTES_DEBOUNCE.as_millis()
    );
    println!(
        "| mode | edit→searchable p50 | p95 | indexing work p50 | 1,000-file burst absorbed | sync batches |"
    );
    println!("|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} ms | {} ms | {} ms | {:.2} s | {} |",
            &r.mode,
            r.p50.as_millis(),
            r.p95.as_millis(),
            r.work_p50_ms,
            r.burst.as_secs_f64(),
            r.batches
        );
    }
    if let Some((n, t)) = freshness_on_garden() {
        println!(
            "\nStat-level freshness check (inline before `claw memory search`): {n} files in {:.1} ms (median of 7)",
            t.as_secs_f64() * 1000.0
        );
    }
}
