//! Hostile queries against a real index: the 7,772-note garden from `../shared`,
//! indexed keyword-only by the real `claw` binary, then searched in-process through
//! the engine with ~300 generated hostile queries in eleven classes (punctuation-
//! joined floods of 10 kB, thousands of distinct words, FTS5 operator soup, quote
//! floods, control and bidi characters, CJK floods, single 10 kB tokens, identifier
//! floods, SQL injection, whitespace floods, seeded random mixes).
//!
//! Asserts: no query errors or panics, every response is well formed, and a
//! hostile query is still answered through the binary with exit 0 or 1.
//! Prints p50/p99/max per class (the figures in BENCHMARKS.md, "Hostile queries");
//! no timing is asserted.
//!
//! Run: `cargo test -p claw --test it -- adversarial_queries --nocapture`

use claw_memory::config::MemorySettings;
use claw_memory::search::engine::{Mode, SearchRequest, search};
use claw_memory::store::Store;
use claw_testkit::Rng;
use std::path::Path;
use std::time::{Duration, Instant};

fn hostile_set() -> Vec<(&'static str, String)> {
    let mut out: Vec<(&'static str, String)> = Vec::new();
    // 1. Punctuation-joined floods: `a/a/a/…`, `ab.ab.ab…` up to 10 kB.
    for sep in [
        "/", ".", "-", "_", ":", ",", ";", "|", "\\", "+", "=", "@", "#", "~",
    ] {
        for tok in ["a", "ab", "x1", "的", "🦀"] {
            for len in [1_000usize, 10_000] {
                let mut q = String::new();
                while q.len() < len {
                    q.push_str(tok);
                    q.push_str(sep);
                }
                out.push(("punctuation flood", q));
            }
        }
    }
    // 2. Thousands of distinct words.
    for n in [100usize, 1_000, 2_000, 5_000] {
        let q: Vec<String> = (0..n).map(|i| format!("w{i}")).collect();
        out.push(("many distinct words", q.join(" ")));
        let q: Vec<String> = (0..n).map(|i| format!("garden{}", i % 97)).collect();
        out.push(("many repeated words", q.join(" ")));
    }
    // 3. FTS5 operator soup.
    for unit in [
        "NEAR(", "AND ", "OR ", "NOT ", "* ", "^", ":", "text:", "{a b}:", "\"", "(", ")",
    ] {
        for reps in [100usize, 2_000] {
            out.push(("fts operators", unit.repeat(reps)));
            out.push((
                "fts operators",
                format!("note {} garden", unit.repeat(reps)),
            ));
        }
    }
    // 4. Quote floods and unbalanced quotes.
    for q in ["\"", "'", "\"\"", "\"a", "a\"", "`"] {
        out.push(("quotes", q.repeat(3_000)));
    }
    // 5. Control, zero-width and bidi characters.
    for c in [
        '\0', '\u{7}', '\u{1b}', '\u{200b}', '\u{202e}', '\u{feff}', '\u{85}', '\u{2028}',
    ] {
        out.push((
            "control and bidi",
            format!("garden{}notes", c.to_string().repeat(2_000)),
        ));
        out.push(("control and bidi", c.to_string().repeat(5_000)));
    }
    // 6. CJK floods.
    let cjk = [
        '的', '是', '东', '京', '塔', '猫', '黑', '豹', '队', '防', '守',
    ];
    let mut rng = Rng(0x5eed_cafe);
    for len in [3usize, 50, 500, 3_000] {
        for _ in 0..4 {
            out.push((
                "cjk flood",
                (0..len).map(|_| *rng.pick(&cjk)).collect::<String>(),
            ));
        }
    }
    // 7. One huge token.
    for len in [1_000usize, 10_000] {
        out.push(("huge token", "a".repeat(len)));
        out.push(("huge token", "garden".repeat(len / 6)));
        out.push(("huge token", "7".repeat(len)));
    }
    // 8. Identifier floods.
    for q in [
        "ABC-123",
        "src/memory/store.rs",
        "vector_weight",
        "CamelCase",
        "3f9a2c1e",
    ] {
        out.push(("identifiers", q.repeat(500)));
        out.push(("identifiers", vec![q; 500].join(" ")));
    }
    // 9. SQL injection.
    for q in [
        "'; DROP TABLE chunks; --",
        "\" OR 1=1 --",
        "garden') UNION SELECT * FROM files --",
        "x\"; ATTACH DATABASE '/tmp/x' AS y; --",
        "%' OR '%'='",
        "_%_%_%_%_%_%_%_%",
    ] {
        out.push(("sql injection", q.to_string()));
        out.push(("sql injection", q.repeat(300)));
    }
    // 10. Whitespace floods.
    for ws in [" ", "\t", "\n", "\u{3000}", "\u{a0}"] {
        out.push(("whitespace", ws.repeat(10_000)));
        out.push((
            "whitespace",
            format!("{}garden{}", ws.repeat(5_000), ws.repeat(5_000)),
        ));
    }
    // 11. Seeded random mixes of everything above.
    let atoms = [
        "a/",
        "NEAR(",
        "\"",
        "的",
        "🦀",
        "\0",
        "ABC-123",
        " ",
        "OR",
        "*",
        "garden",
        "x1.",
        "\u{202e}",
        "(",
        "'",
        "%",
        "_",
        "东京塔",
    ];
    for _ in 0..60 {
        let n = 1 + (rng.next_u64() % 2_000) as usize;
        let q: String = (0..n).map(|_| *rng.pick(&atoms)).collect();
        out.push(("random mix", q));
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn garden(ws: &Path) -> std::path::PathBuf {
    let root = ws.join("garden");
    claw_testkit::extract_shared("notes-garden.tar.gz", &root);
    root
}

#[test]
fn hostile_queries_against_the_garden() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path();
    let notes = garden(ws);
    claw_testkit::run_ok(
        claw_testkit::claw_keyword_only(ws)
            .args(["memory", "add"])
            .arg(&notes)
            .args(["--name", "garden"]),
    );
    claw_testkit::run_ok(claw_testkit::claw_keyword_only(ws).args(["memory", "index"]));

    let store = Store::open(&claw_testkit::db_path(ws)).unwrap();
    let params = MemorySettings::default();
    let set = hostile_set();
    assert!(set.len() >= 250, "{} hostile queries", set.len());

    let mut by_class: Vec<(&str, Vec<Duration>)> = Vec::new();
    let mut all = Vec::new();
    for (class, q) in &set {
        let mut req = SearchRequest::new(q.clone());
        req.mode = Mode::Hybrid;
        let t = Instant::now();
        let resp = search(&store, None, &params, &req, 1_793_880_000);
        let took = t.elapsed();
        let resp =
            resp.unwrap_or_else(|e| panic!("{class}: query of {} bytes failed: {e}", q.len()));
        assert!(resp.results.len() <= req.limit, "{class}");
        for hit in &resp.results {
            assert!(
                hit.score.is_finite() && hit.start_line <= hit.end_line,
                "{class}: {hit:?}"
            );
        }
        match by_class.iter_mut().find(|(c, _)| c == class) {
            Some((_, v)) => v.push(took),
            None => by_class.push((class, vec![took])),
        }
        all.push(took);
    }

    println!(
        "\nHostile queries against the garden (keyword-only index, {} queries):\n",
        all.len()
    );
    println!("| class | queries | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for (class, v) in &mut by_class {
        v.sort();
        println!(
            "| {class} | {} | {} | {} | {} |",
            v.len(),
            ms(percentile(v, 0.5)),
            ms(percentile(v, 0.99)),
            ms(*v.last().unwrap())
        );
    }
    all.sort();
    println!(
        "| **all** | {} | {} | {} | {} |",
        all.len(),
        ms(percentile(&all, 0.5)),
        ms(percentile(&all, 0.99)),
        ms(*all.last().unwrap())
    );

    // The worst class through the real binary: answered, never an error.
    let flood = vec!["a"; 5_000].join("/");
    let o = claw_testkit::claw_keyword_only(ws)
        .args(["memory", "search", "--no-sync", "--json", &flood])
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "exit {code}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["results"].is_array(), "{j}");
}
