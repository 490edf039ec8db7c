//! `claw doctor [--json]`: what claw would use and whether it works — the config
//! file, the workspace, the database, the embedding model, the writer lock, the
//! watcher, the protections, the state directory (private or not), the notes
//! too big to index, the LLM (reachable, key accepted, model served) and the chat channels (reachable, token accepted, someone
//! allowed). The report is a list of independent sections (`name`, `status`,
//! `summary`, typed `details`), so a new check (e.g. the exec sandbox probe) is one
//! more function pushing one more [`Section`]; the JSON shape does not change.

use super::output::{Exit, print_json, sanitize};
use crate::config::{EmbedProvider, Settings};
use claw_memory_api::Status as MemoryStatus;
use claw_memory_api::WriterLock;
use claw_memory_api::embed::{self, Loaded};
use claw_memory_api::now_unix;
use serde::Serialize;
use serde_json::{Value, json};
use std::io::Write;

#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// Works in a degraded way, or not set up yet.
    Warn,
    /// Broken: claw cannot do this part of its job.
    Error,
}

/// One section of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    /// Stable id: `config`, `workspace`, `database`, `model`, `writer_lock`, `watcher`, …
    pub name: &'static str,
    pub status: Status,
    /// One line for humans.
    pub summary: String,
    /// Machine-readable facts of this check.
    pub details: Value,
}

/// `claw doctor --json`: `{"ok", "sections": [...]}`.
#[derive(Debug, Clone, Serialize)]
pub struct DoctorReport {
    /// No section is in `error`.
    pub ok: bool,
    pub sections: Vec<Section>,
}

impl DoctorReport {
    fn new(sections: Vec<Section>) -> DoctorReport {
        DoctorReport {
            ok: sections.iter().all(|s| s.status != Status::Error),
            sections,
        }
    }
}

/// The database section with the vector gap named (a warning: search is
/// keyword-only for those chunks until `claw memory index`), when there is one.
fn with_vector_gap(mut s: Section, st: &claw_memory_api::Status) -> Section {
    if let Some(g) = &st.vectors_missing {
        s.status = Status::Warn;
        s.summary = format!("{}; {}", s.summary, g.describe());
        if let Some(d) = s.details.as_object_mut() {
            d.insert("chunks_without_vectors".into(), json!(g.chunks));
            d.insert("available_model".into(), json!(g.model));
        }
    }
    s
}

fn section(name: &'static str, status: Status, summary: String, details: Value) -> Section {
    Section {
        name,
        status,
        summary,
        details,
    }
}

fn config(settings: &Settings) -> Section {
    match &settings.config_file {
        Some(p) => section(
            "config",
            Status::Ok,
            format!("using {}", p.display()),
            json!({"file": p.display().to_string()}),
        ),
        None => section(
            "config",
            Status::Ok,
            "no config file; defaults and environment".into(),
            json!({"file": null}),
        ),
    }
}

fn workspace(settings: &Settings) -> Section {
    let ws = &settings.mem.workspace;
    let details = json!({"path": ws.display().to_string(), "exists": ws.is_dir()});
    if ws.is_dir() {
        section("workspace", Status::Ok, ws.display().to_string(), details)
    } else {
        section(
            "workspace",
            Status::Warn,
            format!(
                "{} does not exist yet (created by `claw memory index`)",
                ws.display()
            ),
            details,
        )
    }
}

/// The memory index, opened only if it exists (the doctor never creates a
/// SQLite file; a PostgreSQL backend is connected as this workspace). Every
/// section names its backend (`"backend": "sqlite" | "postgres"`).
fn database(settings: &Settings) -> (Section, Option<MemoryStatus>) {
    let path = settings.db_path();
    let postgres = matches!(settings.mem.backend, crate::config::Backend::Postgres(_));
    let p = path.display().to_string();
    if !postgres && !path.exists() {
        let s = section(
            "database",
            Status::Warn,
            format!("{p} not created yet (run `claw memory index`)"),
            json!({"backend": "sqlite", "path": p, "exists": false}),
        );
        return (s, None);
    }
    let opened = crate::app::open_memory(settings).and_then(|m| {
        let location = m.location();
        Ok((location, m.status()?))
    });
    match (opened, postgres) {
        (Ok((location, st)), true) => (
            with_vector_gap(
                section(
                    "database",
                    Status::Ok,
                    format!(
                        "{location}: {} files, {} chunks, {} vectors from this workspace; {} chunks visible",
                        st.files, st.chunks, st.vectors, st.visible_chunks
                    ),
                    json!({"backend": "postgres", "location": location, "exists": true,
                           "files": st.files, "chunks": st.chunks, "vectors": st.vectors,
                           "visible_chunks": st.visible_chunks, "index_model": st.model}),
                ),
                &st,
            ),
            Some(st),
        ),
        (Ok((_, st)), false) => (
            with_vector_gap(
                section(
                    "database",
                    Status::Ok,
                    format!(
                        "{p}: {} files, {} chunks, {} vectors",
                        st.files, st.chunks, st.vectors
                    ),
                    json!({"backend": "sqlite", "path": p, "exists": true, "files": st.files, "chunks": st.chunks,
                           "vectors": st.vectors, "index_model": st.model, "db_bytes": st.db_bytes}),
                ),
                &st,
            ),
            Some(st),
        ),
        (Err(e), true) => {
            let location = match &settings.mem.backend {
                crate::config::Backend::Postgres(pg) => pg.location(),
                crate::config::Backend::Sqlite => p,
            };
            (
                section(
                    "database",
                    Status::Error,
                    format!("{location}: {e:#}"),
                    json!({"backend": "postgres", "location": location, "error": format!("{e:#}")}),
                ),
                None,
            )
        }
        (Err(e), false) => (
            section(
                "database",
                Status::Error,
                format!("{p}: {e:#}"),
                json!({"backend": "sqlite", "path": p, "exists": true, "error": format!("{e:#}")}),
            ),
            None,
        ),
    }
}

fn model(settings: &Settings, index_model: Option<&str>) -> Section {
    let provider = match &settings.mem.embed {
        EmbedProvider::Local { .. } => "local",
        EmbedProvider::OpenAi { .. } => "openai",
        EmbedProvider::None => "none",
    };
    match embed::load(&settings.mem.embed, settings.mem.memory.embed_batch_size) {
        Loaded::Ready(e) => {
            let mismatch = index_model.is_some_and(|m| !m.is_empty() && m != e.model_id());
            let runtime = match &settings.mem.embed {
                EmbedProvider::Local { runtime, .. } => Some(*runtime),
                _ => None,
            };
            let threads = runtime
                .map(|r| format!(", {} ONNX Runtime threads", r.effective_threads()))
                .unwrap_or_default();
            let mut details = json!({"provider": provider, "found": true, "loaded": true,
                                     "model": e.model_id(), "dims": e.dims()});
            if let Some(r) = runtime {
                details["threads"] = json!(r.effective_threads());
                details["cpu_arena"] = json!(r.cpu_arena);
            }
            section(
                "model",
                if mismatch { Status::Warn } else { Status::Ok },
                if mismatch {
                    format!(
                        "{} loaded, but the index was built with {} (run `claw memory index`)",
                        e.model_id(),
                        index_model.unwrap_or_default()
                    )
                } else {
                    format!("{} loaded ({} dims{threads})", e.model_id(), e.dims())
                },
                details,
            )
        }
        Loaded::Disabled => section(
            "model",
            Status::Ok,
            "embedding provider is `none`: keyword-only".into(),
            json!({"provider": provider, "found": false, "loaded": false}),
        ),
        Loaded::Unavailable(e) => section(
            "model",
            Status::Warn,
            format!("not loaded, keyword-only: {e}"),
            json!({"provider": provider, "found": !matches!(e, embed::EmbedError::NoModelDir | embed::EmbedError::MissingFile(..)),
                   "loaded": false, "error": e.to_string()}),
        ),
    }
}

fn writer_lock(settings: &Settings) -> Section {
    match WriterLock::holder(&settings.state_dir()) {
        Ok(None) => section(
            "writer_lock",
            Status::Ok,
            "free".into(),
            json!({"held": false, "holder": null}),
        ),
        Ok(Some(h)) => section(
            "writer_lock",
            Status::Ok,
            format!("held by pid {} (`{}`)", h.pid, h.what),
            json!({"held": true, "holder": h}),
        ),
        Err(e) => section(
            "writer_lock",
            Status::Error,
            e.to_string(),
            json!({"held": null, "error": e.to_string()}),
        ),
    }
}

fn watcher(status: Option<&MemoryStatus>) -> Section {
    let Some(status) = status else {
        return section(
            "watcher",
            Status::Ok,
            "no database, no watcher".into(),
            json!({"alive": false, "status": null}),
        );
    };
    let st = status.watcher.as_ref();
    section(
        "watcher",
        Status::Ok,
        super::output::describe_watcher(st, now_unix()),
        json!({"alive": st.is_some_and(|s| s.alive), "status": st}),
    )
}

/// Which of claw's protections are active: the exec sandbox (probed on this
/// machine), the file jail, confirmation of side effects, the SSRF guard.
fn protections(settings: &Settings) -> Section {
    let probe = claw_agent::tools::sandbox::probe();
    let a = &settings.assistant;
    let sandbox_on = a.exec.sandbox.unwrap_or(true);
    let jail = a.agent.jail_to_workspace.unwrap_or(true);
    let confirm = a.agent.confirm_side_effects.unwrap_or(true);
    let allow_private = a.web.allow_private.unwrap_or(false);
    let (status, summary) = if !sandbox_on {
        (
            Status::Warn,
            "exec sandbox turned off in the config (exec.sandbox: false)".to_string(),
        )
    } else if let Some(w) = probe.warning() {
        (Status::Warn, w)
    } else {
        let abi = probe.landlock_abi().unwrap_or(0);
        (
            Status::Ok,
            format!(
                "exec sandboxed (Landlock ABI {abi}{}{}{}); file jail {}; confirmation {}; private addresses {}",
                if probe.user_namespace {
                    ", namespaces"
                } else {
                    ""
                },
                if probe.hides_host_processes() {
                    ", own /proc"
                } else {
                    ", host processes VISIBLE"
                },
                if probe.limits_processes() {
                    ", process limit"
                } else {
                    ""
                },
                if jail { "on" } else { "OFF" },
                if confirm { "on" } else { "off" },
                if allow_private { "ALLOWED" } else { "refused" },
            ),
        )
    };
    let process_limit = match &probe.process_limit {
        claw_agent::tools::sandbox::ProcessLimit::PidsCgroup { version, .. } => {
            format!("pids cgroup v{version}")
        }
        claw_agent::tools::sandbox::ProcessLimit::Rlimit { per_sandbox } => if *per_sandbox {
            "RLIMIT_NPROC (per sandbox)"
        } else {
            "RLIMIT_NPROC"
        }
        .to_string(),
        claw_agent::tools::sandbox::ProcessLimit::None => "none".to_string(),
    };
    section(
        "protections",
        status,
        summary,
        json!({
            "exec_sandbox": {
                "enabled": sandbox_on,
                "active": sandbox_on && probe.active(),
                "landlock_abi": probe.landlock_abi(),
                "user_namespace": probe.user_namespace,
                "network_namespace": probe.network_namespace,
                "mount_namespace": probe.mount_namespace,
                "pid_namespace": probe.pid_namespace,
                "hides_host_processes": probe.hides_host_processes(),
                "process_limit": process_limit,
                // The total a command may write (0: unlimited).
                "max_write_mb": a.exec.max_write_mb.unwrap_or(
                    claw_agent::tools::sandbox::DEFAULT_MAX_WRITE_BYTES / (1024 * 1024)
                ),
                "network": a.exec.network.unwrap_or(false),
            },
            "file_jail": jail,
            "confirm_side_effects": confirm,
            "web_allow_private": allow_private,
        }),
    )
}

/// Where claw keeps what it trusts, and whether it is private: a 0700
/// directory owned by the user, outside the workspace (the assistant's tools
/// write the workspace). Also lists the sources a migration did not carry over.
fn state_dir(settings: &Settings) -> Section {
    let info = claw_memory_api::state::inspect(&settings.state_dir(), &settings.mem.workspace);
    let path = info.path.display().to_string();
    let untrusted = claw_memory_api::state::untrusted_sources(&info.path);
    let mut details = json!({
        "path": path,
        "exists": info.exists,
        "private": info.private,
        "mode": info.mode,
        "owner_uid": info.owner_uid,
        "user_uid": info.user_uid,
        "inside_workspace": info.inside_workspace,
        "problems": info.problems,
    });
    let (status, mut summary) = if info.private {
        (
            Status::Ok,
            format!("{path} (private: 0700, yours, outside the workspace)"),
        )
    } else if !info.exists {
        (
            Status::Warn,
            format!("{path} not created yet (created on first use, 0700)"),
        )
    } else {
        (
            Status::Warn,
            format!("{path} is NOT private: {}", info.problems.join("; ")),
        )
    };
    let status = match untrusted {
        Ok(list) if !list.is_empty() => {
            summary.push_str(&format!(
                "; {} source(s) from the old .claw/ not trusted (see `claw memory sources`)",
                list.len()
            ));
            details["untrusted_sources"] = json!(list);
            Status::Warn
        }
        Ok(_) => status,
        Err(e) => {
            summary.push_str(&format!("; {e}"));
            details["untrusted_sources_error"] = json!(e.to_string());
            Status::Warn
        }
    };
    section("state_dir", status, summary, details)
}

/// Notes left out of the index for their size: never silently dropped.
fn too_big(settings: &Settings, status: Option<&MemoryStatus>) -> Section {
    let limit = settings.mem.memory.max_file_bytes;
    let notes = status.map(|s| s.too_big.as_slice()).unwrap_or_default();
    let details = json!({"max_file_bytes": limit, "notes": notes});
    if notes.is_empty() {
        return section(
            "too_big",
            Status::Ok,
            format!(
                "no note is over the index's size limit ({})",
                claw_memory_api::human_bytes(limit)
            ),
            details,
        );
    }
    let list: Vec<String> = notes.iter().map(|n| n.describe()).collect();
    section(
        "too_big",
        Status::Warn,
        format!(
            "{} note(s) not indexed, over the size limit: {} (split them, or raise memory.max_file_bytes)",
            notes.len(),
            list.join(", ")
        ),
        details,
    )
}

/// Bound of each LLM probe.
const LLM_PROBE: std::time::Duration = std::time::Duration::from_secs(5);

/// The LLM profiles: configured at all, and one bounded `GET /v1/models` each
/// (reachable, key accepted, model served).
fn llm(settings: &Settings) -> Section {
    use claw_agent::provider::{ProfileError, probe, profiles_from_settings};
    let env = |name: &str| settings.env.get(name);
    let profiles = match profiles_from_settings(&settings.assistant, &env) {
        Ok(p) => p,
        Err(ProfileError::NoProfiles) => {
            return section(
                "llm",
                Status::Warn,
                "no LLM configured: the assistant and the gateway's chat are off (set CLAW_LLM_API, CLAW_LLM_BASE_URL and CLAW_LLM_MODEL, or agent.profiles)".into(),
                json!({"configured": false, "probes": []}),
            );
        }
        Err(e) => {
            return section(
                "llm",
                Status::Error,
                e.to_string(),
                json!({"configured": true, "probes": [], "error": e.to_string()}),
            );
        }
    };
    // The doctor runs on a blocking thread of the CLI's runtime.
    let probes: Vec<probe::LlmProbe> = match tokio::runtime::Handle::try_current() {
        Ok(h) => h.block_on(async {
            let mut out = Vec::new();
            for p in &profiles {
                out.push(probe::probe(p, LLM_PROBE).await);
            }
            out
        }),
        Err(_) => Vec::new(),
    };
    let failed = probes.iter().filter(|p| !p.ok).count();
    let unlisted = probes.iter().any(|p| p.model_listed == Some(false));
    let status = if failed == probes.len() && failed > 0 {
        Status::Error
    } else if failed > 0 || unlisted {
        Status::Warn
    } else {
        Status::Ok
    };
    let summary = probes
        .iter()
        .map(|p| format!("{} ({} {}): {}", p.profile, p.api, p.model, p.detail))
        .collect::<Vec<_>>()
        .join("; ");
    section(
        "llm",
        status,
        summary,
        json!({"configured": true, "probes": probes}),
    )
}

/// Bound of each channel probe.
const CHANNEL_PROBE: std::time::Duration = std::time::Duration::from_secs(5);

/// The chat channels: token variables set, `allow_from` not empty, and one
/// bounded request each (Matrix `whoami`, Telegram `getMe`).
fn channels(settings: &Settings) -> Section {
    let sec = &settings.channels;
    let configured: Vec<&str> = [
        sec.matrix.as_ref().map(|_| "matrix"),
        sec.telegram.as_ref().map(|_| "telegram"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if configured.is_empty() {
        return section(
            "channels",
            Status::Ok,
            "no chat channels configured".into(),
            json!({"configured": configured, "probes": [], "warnings": []}),
        );
    }
    let warnings = sec.warnings();
    let resolved = match sec.resolve(settings.env.vars()) {
        Ok(r) => r,
        Err(e) => {
            return section(
                "channels",
                Status::Error,
                e.to_string(),
                json!({"configured": configured, "probes": [], "warnings": warnings, "error": e.to_string()}),
            );
        }
    };
    // The doctor runs on a blocking thread of the CLI's runtime.
    let probes = match tokio::runtime::Handle::try_current() {
        Ok(h) => h.block_on(claw_channels::probe(&resolved, CHANNEL_PROBE)),
        Err(_) => Vec::new(),
    };
    let failed: Vec<String> = probes
        .iter()
        .filter(|p| !p.ok)
        .map(|p| format!("{}: {}", p.channel, p.detail))
        .collect();
    let (status, summary) = if !failed.is_empty() {
        (Status::Error, failed.join("; "))
    } else if !warnings.is_empty() {
        (Status::Warn, warnings.join("; "))
    } else {
        (
            Status::Ok,
            probes
                .iter()
                .map(|p| format!("{}: {}", p.channel, p.detail))
                .collect::<Vec<_>>()
                .join("; "),
        )
    };
    section(
        "channels",
        status,
        summary,
        json!({"configured": configured, "probes": probes, "warnings": warnings}),
    )
}

/// Run every check.
pub fn diagnose(settings: &Settings) -> DoctorReport {
    let (db, status) = database(settings);
    let index_model = status
        .as_ref()
        .map(|s| s.model.clone())
        .filter(|_| status.as_ref().is_some_and(|s| s.last_index_at.is_some()));
    let sections = vec![
        config(settings),
        workspace(settings),
        db,
        model(settings, index_model.as_deref()),
        writer_lock(settings),
        watcher(status.as_ref()),
        protections(settings),
        state_dir(settings),
        too_big(settings, status.as_ref()),
        llm(settings),
        channels(settings),
    ];
    DoctorReport::new(sections)
}

/// The doctor when the config does not load: one failing `config` section
/// naming every problem found (message and hints of each; `error`, `hints` and
/// `kind` of the first, as before), nothing else can be checked without it. Exit 2.
pub fn run_config_failed(
    errs: &[super::errors::ErrorReport],
    args: &DoctorArgs,
) -> anyhow::Result<Exit> {
    let line = |e: &super::errors::ErrorReport| match e.hints.first() {
        Some(h) => format!("{} ({h})", e.message),
        None => e.message.clone(),
    };
    let summary = match errs {
        [one] => line(one),
        many => format!(
            "{} problems: {}",
            many.len(),
            many.iter().map(line).collect::<Vec<_>>().join("; ")
        ),
    };
    let first = errs.first();
    let report = DoctorReport::new(vec![section(
        "config",
        Status::Error,
        summary,
        json!({
            "error": first.map(|e| e.message.clone()),
            "hints": first.map(|e| e.hints.clone()).unwrap_or_default(),
            "kind": first.map(|e| e.kind),
            "errors": errs,
        }),
    )]);
    print_report(&report, args.json)
}

pub fn run_doctor(settings: &Settings, args: DoctorArgs) -> anyhow::Result<Exit> {
    print_report(&diagnose(settings), args.json)
}

fn print_report(report: &DoctorReport, json: bool) -> anyhow::Result<Exit> {
    let args = DoctorArgs { json };
    if args.json {
        print_json(report)?;
    } else {
        let mut out = std::io::stdout().lock();
        for s in &report.sections {
            let mark = match s.status {
                Status::Ok => "ok",
                Status::Warn => "warn",
                Status::Error => "ERROR",
            };
            writeln!(out, "{mark:<5} {:<12} {}", s.name, sanitize(&s.summary))?;
        }
    }
    Ok(if report.ok { Exit::Ok } else { Exit::Error })
}
