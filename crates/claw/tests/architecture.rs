//! ARCHITECTURE.md's invariants, checked: this test fails when one breaks.
//!
//! 1. The crate graph (`cargo metadata`): each crate depends only on the claw
//!    crates below it; nothing above the memory crates names a storage backend
//!    (only `claw-memory-api` depends on `claw-memory-pg`), and nothing above
//!    the memory crates reaches the core `claw-memory` past the curated API
//!    `claw-memory-api` re-exports; the memory core has no async runtime and
//!    no CLI parser.
//! 2. SQL is written only in the store modules.
//! 3. The environment is read only by the binary's config module (and testkit).
//! 4. The wall clock is read only in the clock modules.
//! 5. No command module of the binary imports another (they share the
//!    composition root `app`, and the edge modules `output` and `errors`).
//!
//! Each check is a function over source text, so each has a planted violation
//! below as its positive control.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The library and binary sources of every crate: `crates/<c>/src/**.rs`, as
/// (`<c>/src/…` relative path, text). Tests, benches and examples are not
/// product code.
fn product_sources() -> Vec<(String, String)> {
    let crates = repo().join("crates");
    let mut out = Vec::new();
    for c in std::fs::read_dir(&crates).expect("crates/").flatten() {
        let src = c.path().join("src");
        for f in rust_files(&src) {
            let rel = f
                .strip_prefix(&crates)
                .expect("below crates/")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&f).expect("readable source");
            out.push((rel, text));
        }
    }
    out.sort();
    out
}

/// The code lines of a file: comments dropped (line comments and doc
/// comments; block comments are not used for prose here), and everything from
/// the first `#[cfg(test)]` on (unit tests are not product code).
fn code_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let end = text.find("#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l))
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
}

fn allowed(path: &str, allow: &[&str]) -> bool {
    allow.iter().any(|a| path == *a || path.starts_with(a))
}

/// Lines matching `re` in files outside `allow`: `path:line: text`.
fn scan(sources: &[(String, String)], re: &Regex, allow: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in sources {
        if allowed(path, allow) {
            continue;
        }
        for (n, line) in code_lines(text) {
            if re.is_match(line) {
                out.push(format!("{path}:{n}: {}", line.trim()));
            }
        }
    }
    out
}

// ---- 1. the crate graph ----------------------------------------------------

/// The claw crates each crate may depend on (normal dependencies). Above
/// the memory layer only `claw-memory-api` is allowed: it is the memory
/// library's curated public API, so the store, the indexer's internals and the
/// watcher actor of `claw-memory` are out of reach (tests may look deeper, as
/// dev-dependencies).
const LAYERS: &[(&str, &[&str])] = &[
    ("claw-base", &[]),
    ("claw-memory", &["claw-base"]),
    ("claw-memory-pg", &["claw-memory"]),
    ("claw-memory-api", &["claw-memory", "claw-memory-pg"]),
    ("claw-schedule", &["claw-base"]),
    ("claw-channels", &["claw-base"]),
    (
        "claw-agent",
        &["claw-base", "claw-memory-api", "claw-schedule"],
    ),
    ("claw-mcp", &["claw-agent", "claw-base", "claw-memory-api"]),
    (
        "claw-gateway",
        &[
            "claw-agent",
            "claw-base",
            "claw-channels",
            "claw-mcp",
            "claw-memory-api",
            "claw-schedule",
        ],
    ),
    (
        "claw",
        &[
            "claw-agent",
            "claw-base",
            "claw-channels",
            "claw-gateway",
            "claw-mcp",
            "claw-memory-api",
            "claw-schedule",
        ],
    ),
    ("claw-testkit", &["claw-memory"]),
];

/// External crates a crate must not depend on.
const FORBIDDEN: &[(&str, &[&str])] = &[
    // The leaf everything shares: no runtime, parser or storage.
    ("claw-base", &["clap", "postgres", "rusqlite", "axum"]),
    // The memory core is blocking and has no CLI: no runtime, no parser, no
    // PostgreSQL client (that is claw-memory-pg's).
    (
        "claw-memory",
        &["tokio", "clap", "postgres", "axum", "reqwest"],
    ),
    ("claw-memory-api", &["tokio", "clap", "axum"]),
    ("claw-agent", &["clap", "postgres", "rusqlite"]),
    ("claw-gateway", &["clap", "postgres", "rusqlite"]),
    ("claw-mcp", &["clap", "postgres", "rusqlite"]),
    ("claw-channels", &["clap", "postgres", "rusqlite"]),
    ("claw-schedule", &["clap", "postgres", "rusqlite"]),
];

/// Features of a claw dependency a crate must not turn on: the memory core
/// stays without an async runtime (`claw-base`'s `tokio` clock is for the
/// crates that have one).
const FORBIDDEN_FEATURES: &[(&str, &str, &str)] = &[
    ("claw-memory", "claw-base", "tokio"),
    ("claw-memory", "claw-base", "http"),
];

/// A crate's normal dependencies, each with the features it turns on.
type Deps = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Violations of [`LAYERS`], [`FORBIDDEN`] and [`FORBIDDEN_FEATURES`] in `deps`.
fn graph_violations(deps: &Deps) -> Vec<String> {
    let mut out = Vec::new();
    for (krate, dep_features) in deps {
        for (k, d, f) in FORBIDDEN_FEATURES {
            if k == krate && dep_features.get(*d).is_some_and(|fs| fs.contains(*f)) {
                out.push(format!("{krate} turns on {d}'s `{f}` feature"));
            }
        }
        let ds: BTreeSet<&String> = dep_features.keys().collect();
        let Some((_, allowed)) = LAYERS.iter().find(|(n, _)| n == krate) else {
            out.push(format!(
                "{krate}: a crate ARCHITECTURE.md does not place (add it to LAYERS)"
            ));
            continue;
        };
        for d in ds.iter().filter(|d| d.starts_with("claw")) {
            if !allowed.contains(&d.as_str()) {
                out.push(format!("{krate} depends on {d}, which is not below it"));
            }
        }
        if let Some((_, bad)) = FORBIDDEN.iter().find(|(n, _)| n == krate) {
            for d in ds.iter().filter(|d| bad.contains(&d.as_str())) {
                out.push(format!("{krate} depends on {d}"));
            }
        }
    }
    out
}

fn metadata_deps() -> Deps {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(repo())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let mut deps = BTreeMap::new();
    for p in v["packages"].as_array().expect("packages") {
        let name = p["name"].as_str().expect("name").to_string();
        let normal = p["dependencies"]
            .as_array()
            .expect("dependencies")
            .iter()
            // Normal dependencies; an optional one only matters once turned on.
            .filter(|d| d["kind"].is_null() && d["optional"] != true)
            .map(|d| {
                let features = d["features"]
                    .as_array()
                    .map(|fs| {
                        fs.iter()
                            .filter_map(|f| f.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                (d["name"].as_str().expect("dep name").to_string(), features)
            })
            .collect();
        deps.insert(name, normal);
    }
    deps
}

// ---- 2–4. where SQL, the environment and the clock are touched -------------

/// SQL statements (upper-case keywords, as this code base writes them).
fn sql_re() -> Regex {
    Regex::new(
        r"\b(SELECT\s.*\bFROM\b|INSERT\s+(OR\s+\w+\s+)?INTO\b|DELETE\s+FROM\b|UPDATE\s+\w+\s+SET\b|CREATE\s+(TABLE|INDEX|UNIQUE|VIRTUAL|TRIGGER|SCHEMA|EXTENSION)\b|DROP\s+(TABLE|INDEX|SCHEMA)\b|ALTER\s+TABLE\b|PRAGMA\s+\w+)",
    )
    .expect("regex")
}

/// The modules that own a storage: SQLite's store, its rebuild-aside and the
/// search stages' queries; the whole PostgreSQL crate; testkit's helpers.
const SQL_HOMES: &[&str] = &[
    "memory/src/store.rs",
    "memory/src/rebuild.rs",
    "memory/src/search/keyword.rs",
    "memory/src/search/rows.rs",
    "memory/src/search/vector.rs",
    "memory-pg/src/",
    "testkit/src/",
];

fn env_re() -> Regex {
    Regex::new(r"\benv::(var|var_os|vars|vars_os)\s*\(").expect("regex")
}

/// The binary's config module reads the environment (once, into settings);
/// testkit reads what the test harness exports.
const ENV_HOMES: &[&str] = &[
    "claw/src/config.rs",
    // `exec` hands a child the current values of the variables its
    // configuration names, read when the command starts (the one read in a library).
    "base/src/child_env.rs",
    "testkit/src/",
];

fn clock_re() -> Regex {
    Regex::new(r"\b(SystemTime::now|Utc::now|Local::now)\s*\(").expect("regex")
}

/// The clock modules (and testkit).
const CLOCK_HOMES: &[&str] = &["base/src/clock.rs", "testkit/src/"];

// ---- 5. command modules ----------------------------------------------------

/// Modules of `claw/src/cli/` every command may use: the edge (rendering,
/// errors and hints, progress) and the module root.
const CLI_SHARED: &[&str] = &["mod", "output", "errors", "progress"];

/// `(from, to)` imports between command modules, from the files of the cli
/// directory (`name` → text).
fn command_imports(files: &BTreeMap<String, String>) -> Vec<String> {
    let single = Regex::new(r"\b(?:super|crate::cli)::([a-z_]+)").expect("regex");
    let group = Regex::new(r"\b(?:super|crate::cli)::\{([^}]*)\}").expect("regex");
    let mut out = Vec::new();
    for (name, text) in files {
        if CLI_SHARED.contains(&name.as_str()) {
            continue;
        }
        let mut to = BTreeSet::new();
        for (_, line) in code_lines(text) {
            for c in single.captures_iter(line) {
                to.insert(c[1].to_string());
            }
            for c in group.captures_iter(line) {
                for part in c[1].split(',') {
                    let m = part.trim().split("::").next().unwrap_or("").trim();
                    if !m.is_empty() {
                        to.insert(m.to_string());
                    }
                }
            }
        }
        for t in to {
            if t != *name && files.contains_key(&t) && !CLI_SHARED.contains(&t.as_str()) {
                out.push(format!(
                    "cli/{name}.rs imports the command module cli/{t}.rs"
                ));
            }
        }
    }
    out
}

fn cli_files() -> BTreeMap<String, String> {
    let dir = repo().join("crates/claw/src/cli");
    // Product code only, file by file (a unit-test module ends a file's code).
    let code = |f: &Path| {
        let text = std::fs::read_to_string(f).expect("readable");
        code_lines(&text)
            .map(|(_, l)| l.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(&dir).expect("cli/").flatten() {
        let p = e.path();
        let name = p
            .file_stem()
            .expect("file name")
            .to_string_lossy()
            .into_owned();
        let text = if p.is_dir() {
            // A command's own submodules (cli/chat/…) belong to it.
            rust_files(&p)
                .iter()
                .map(|f| code(f))
                .collect::<Vec<_>>()
                .join("\n")
        } else {
            code(&p)
        };
        let entry: &mut String = out.entry(name).or_default();
        entry.push_str(&text);
        entry.push('\n');
    }
    out
}

// ---- the checks ------------------------------------------------------------

fn fail_if_any(what: &str, v: Vec<String>) {
    assert!(
        v.is_empty(),
        "{what} (ARCHITECTURE.md, Invariants):\n  {}",
        v.join("\n  ")
    );
}

#[test]
fn crates_depend_only_on_the_layers_below() {
    fail_if_any("the crate graph", graph_violations(&metadata_deps()));
}

#[test]
fn sql_lives_in_the_store_modules() {
    fail_if_any(
        "SQL outside the store modules",
        scan(&product_sources(), &sql_re(), SQL_HOMES),
    );
}

#[test]
fn only_the_config_module_reads_the_environment() {
    fail_if_any(
        "environment reads outside the config module",
        scan(&product_sources(), &env_re(), ENV_HOMES),
    );
}

#[test]
fn only_the_clock_modules_read_the_wall_clock() {
    fail_if_any(
        "wall-clock reads outside the clock modules",
        scan(&product_sources(), &clock_re(), CLOCK_HOMES),
    );
}

#[test]
fn command_modules_do_not_import_each_other() {
    fail_if_any(
        "imports between command modules",
        command_imports(&cli_files()),
    );
}

// ---- positive controls: each check catches a planted violation --------------

#[test]
fn each_check_catches_a_planted_violation() {
    let planted = |path: &str, text: &str| vec![(path.to_string(), text.to_string())];
    let sql = planted(
        "gateway/src/http.rs",
        "fn f() { c.execute(\"DELETE FROM chunks WHERE id = ?1\", [1]); }\n",
    );
    assert_eq!(scan(&sql, &sql_re(), SQL_HOMES).len(), 1);
    // … but not in a store module, nor in a comment or a unit test.
    let home = planted("memory/src/store.rs", "\"SELECT id FROM chunks\"\n");
    assert!(scan(&home, &sql_re(), SQL_HOMES).is_empty());
    let prose = planted(
        "agent/src/core.rs",
        "// SELECT the best FROM them\nfn f() {}\n#[cfg(test)]\nmod t { \"SELECT x FROM y\"; }\n",
    );
    assert!(scan(&prose, &sql_re(), SQL_HOMES).is_empty());

    let env = planted(
        "claw/src/cli/chat.rs",
        "let k = std::env::var(\"CLAW_LLM_API_KEY\");\n",
    );
    assert_eq!(scan(&env, &env_re(), ENV_HOMES).len(), 1);
    let env_home = planted("claw/src/config.rs", "std::env::vars()\n");
    assert!(scan(&env_home, &env_re(), ENV_HOMES).is_empty());

    let clock = planted("memory/src/freshness.rs", "let now = chrono::Utc::now();\n");
    assert_eq!(scan(&clock, &clock_re(), CLOCK_HOMES).len(), 1);
    let mono = planted("memory/src/freshness.rs", "let t = Instant::now();\n");
    assert!(scan(&mono, &clock_re(), CLOCK_HOMES).is_empty());

    let mut cli = BTreeMap::new();
    cli.insert("output".to_string(), String::new());
    cli.insert("cron".to_string(), "use super::output::Exit;\n".to_string());
    cli.insert(
        "gateway".to_string(),
        "use super::{output, cron::user_zone};\n".to_string(),
    );
    cli.insert(
        "search".to_string(),
        "let c = crate::cli::gateway::running(s);\n".to_string(),
    );
    let v = command_imports(&cli);
    assert_eq!(v.len(), 2, "{v:?}");

    let dep = |n: &str, fs: &[&str]| (n.to_string(), fs.iter().map(|f| f.to_string()).collect());
    let mut deps = Deps::new();
    deps.insert(
        "claw-mcp".to_string(),
        BTreeMap::from([
            dep("claw-memory-pg", &[]),
            dep("rusqlite", &[]),
            // Past the curated API, into the engine's internals.
            dep("claw-memory", &[]),
        ]),
    );
    deps.insert(
        "claw-memory".to_string(),
        BTreeMap::from([dep("tokio", &[]), dep("claw-base", &["tokio"])]),
    );
    let v = graph_violations(&deps);
    assert_eq!(v.len(), 5, "{v:?}");
    assert!(
        v.iter()
            .any(|x| x == "claw-mcp depends on claw-memory, which is not below it"),
        "{v:?}"
    );
}
