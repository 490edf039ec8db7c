//! `claw doctor [--json]`: what claw would use and whether it works — the config
//! file, the workspace, the database, the embedding model, the writer lock, the
//! watcher, the protections, the state directory (private or not), the notes
//! too big to index, the LLM (reachable, key accepted, model served) and the chat channels (reachable, token accepted, someone
//! allowed). The report is a list of independent sections (`name`, `status`,
//! `summary`, `hint`, typed `details`), so a new check (e.g. the exec sandbox probe) is one
//! more function pushing one more [`Section`]; the JSON shape does not change.
//! Every section that is not `ok` says what to do about it in `hint` (the
//! library reports typed causes; the advice lives here, at the edge).

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
    /// What to do about a `warn` or `error` (null when `ok`).
    pub hint: Option<String>,
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
        s.hint = Some(format!("{RUN_INDEX}: it embeds the chunks without vectors"));
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
        hint: None,
        details,
    }
}

impl Section {
    /// The same section with advice for the user.
    fn hint(mut self, hint: impl Into<String>) -> Section {
        self.hint = Some(hint.into());
        self
    }
}

/// The CLI's own hints for an error (the ones `error:` would print), joined.
fn hints_of(e: &anyhow::Error) -> Option<String> {
    let r = super::errors::report(e);
    (!r.hints.is_empty()).then(|| r.hints.join("; "))
}

const RUN_INDEX: &str = "run `claw memory index`";

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
        .hint(format!(
            "{RUN_INDEX} to start it, or check --workspace / CLAW_WORKSPACE for a typo"
        ))
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
        )
        .hint(format!("{RUN_INDEX} to index the workspace's notes"));
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
            let hint = hints_of(&e).unwrap_or_else(|| {
                "check that PostgreSQL is running and that the URL memory.backend.url_env names is right".into()
            });
            (
                section(
                    "database",
                    Status::Error,
                    format!("{location}: {e:#}"),
                    json!({"backend": "postgres", "location": location, "error": format!("{e:#}")}),
                )
                .hint(hint),
                None,
            )
        }
        (Err(e), false) => {
            let hint = hints_of(&e).unwrap_or_else(|| {
                format!("move {p} away and {RUN_INDEX}: the index is rebuilt from your notes")
            });
            (
                section(
                    "database",
                    Status::Error,
                    format!("{p}: {e:#}"),
                    json!({"backend": "sqlite", "path": p, "exists": true, "error": format!("{e:#}")}),
                )
                .hint(hint),
                None,
            )
        }
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
            // `embedding.precision: int8` without `model_int8.onnx` runs fp32.
            let fallback = embed::precision_fallback(&settings.mem.embed);
            if let Some(f) = &fallback {
                details["precision_fallback"] = json!(f);
            }
            let s = section(
                "model",
                if mismatch || fallback.is_some() {
                    Status::Warn
                } else {
                    Status::Ok
                },
                if mismatch {
                    format!(
                        "{} loaded, but the index was built with {} (run `claw memory index`)",
                        e.model_id(),
                        index_model.unwrap_or_default()
                    )
                } else if let Some(f) = &fallback {
                    format!("{} loaded ({} dims{threads}), but {f}", e.model_id(), e.dims())
                } else {
                    format!("{} loaded ({} dims{threads})", e.model_id(), e.dims())
                },
                details,
            );
            if mismatch {
                s.hint(format!("{RUN_INDEX}: it re-embeds the notes with the loaded model"))
            } else if fallback.is_some() {
                s.hint(
                    "`claw memory install-model` makes model_int8.onnx beside model.onnx \
                     (or set embedding.precision: fp32)",
                )
            } else {
                s
            }
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
        )
        .hint(super::errors::embed_hint(&e).unwrap_or(
            "`claw memory install-model` installs the local model; set CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH as it prints, or embedding.provider: none for keyword-only",
        )),
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
        )
        .hint(format!(
            "check that {} is yours and writable",
            settings.state_dir().display()
        )),
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
    let (status, summary, hint) = if !sandbox_on {
        (
            Status::Warn,
            "exec sandbox turned off in the config (exec.sandbox: false)".to_string(),
            Some("remove `exec.sandbox: false` from the config (docs/security.md)".to_string()),
        )
    } else if let Some(w) = probe.warning() {
        (
            Status::Warn,
            w,
            Some("run claw on Linux 5.13 or later with Landlock enabled; until then every exec asks first (docs/security.md)".to_string()),
        )
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
            None,
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
    let mut s = section(
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
    );
    s.hint = hint;
    s
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
    let (status, mut summary, mut hint) = if info.private {
        (
            Status::Ok,
            format!("{path} (private: 0700, yours, outside the workspace)"),
            None,
        )
    } else if !info.exists {
        (
            Status::Warn,
            format!("{path} not created yet (created on first use, 0700)"),
            Some(format!("{RUN_INDEX} creates it")),
        )
    } else {
        (
            Status::Warn,
            format!("{path} is NOT private: {}", info.problems.join("; ")),
            Some(if info.inside_workspace {
                "point CLAW_STATE_DIR at a directory outside the workspace, only yours (docs/security.md)".to_string()
            } else {
                format!(
                    "make it yours and private (`chmod 700 {path}` as its owner), or point CLAW_STATE_DIR at a directory only you can write"
                )
            }),
        )
    };
    let status = match untrusted {
        Ok(list) if !list.is_empty() => {
            summary.push_str(&format!(
                "; {} source(s) from the old .claw/ not trusted (see `claw memory sources`)",
                list.len()
            ));
            details["untrusted_sources"] = json!(list);
            hint.get_or_insert_with(|| {
                "review them with `claw memory sources`; `claw memory add DIR` registers the ones you trust".into()
            });
            Status::Warn
        }
        Ok(_) => status,
        Err(e) => {
            summary.push_str(&format!("; {e}"));
            details["untrusted_sources_error"] = json!(e.to_string());
            hint.get_or_insert_with(|| format!("check that {path} is readable"));
            Status::Warn
        }
    };
    let mut s = section("state_dir", status, summary, details);
    s.hint = hint;
    s
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
    .hint("split them into smaller notes, or raise memory.max_file_bytes in the config")
}

/// The scheduled consolidation: on or off (and why), and how its last run
/// went. Off is no fault (the `llm` section says when no LLM is configured);
/// a last run that failed is a warning.
fn consolidation(settings: &Settings, status: Option<&MemoryStatus>) -> Section {
    let llm = crate::app::agent_settings(settings).map_err(|e| e.to_string());
    let c = crate::app::consolidation_settings(settings, llm.as_ref().map_err(String::as_str));
    let last = status.and_then(|s| s.consolidation.last_run.as_ref());
    let details = json!({
        "enabled": c.enabled,
        "schedule": c.enabled.then(|| c.schedule_text.clone()),
        "off_reason": c.off_reason,
        "last_run": last,
    });
    if !c.enabled {
        let why = c.off_reason.as_deref().unwrap_or("turned off");
        return section("consolidation", Status::Ok, format!("off ({why})"), details);
    }
    let Some(run) = last else {
        return section(
            "consolidation",
            Status::Ok,
            format!(
                "on, {} in a running `claw gateway`; it has not run yet",
                c.schedule_text
            ),
            details,
        );
    };
    let summary = format!(
        "on, {} in a running `claw gateway`; last run {} ({}): {}",
        c.schedule_text,
        run.at.format("%Y-%m-%d %H:%M UTC"),
        run.day,
        run.message
    );
    if run.outcome == claw_memory_api::consolidation::Outcome::Failed {
        return section("consolidation", Status::Warn, summary, details).hint(
            "`claw memory consolidate` runs it now and prints the error; the report is in the state dir's consolidation/ folder",
        );
    }
    // Only a running gateway runs the schedule: a last run days old means
    // none has been running.
    let age = settings.mem.clock.now() - run.at;
    if age > chrono::Duration::days(STALE_CONSOLIDATION_DAYS) {
        return section(
            "consolidation",
            Status::Warn,
            format!("{summary} — {} days ago", age.num_days()),
            details,
        )
        .hint(
            "the schedule runs only while `claw gateway` runs: keep one running, or run `claw memory consolidate` (e.g. from your own cron)",
        );
    }
    section("consolidation", Status::Ok, summary, details)
}

/// A daily consolidation whose last run is older than this many days has
/// not been running (no gateway).
const STALE_CONSOLIDATION_DAYS: i64 = 2;

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
            )
            .hint("set CLAW_LLM_API, CLAW_LLM_BASE_URL and CLAW_LLM_MODEL (and CLAW_LLM_API_KEY if the server needs one), or agent.profiles in the config (docs/assistant.md)");
        }
        Err(e) => {
            return section(
                "llm",
                Status::Error,
                e.to_string(),
                json!({"configured": true, "probes": [], "error": e.to_string()}),
            )
            .hint("fix agent.profiles in the config, or the CLAW_LLM_* variables (docs/configuration.md)");
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
    let hints: Vec<String> = probes
        .iter()
        .filter_map(|p| {
            use probe::LlmProblem as P;
            let what = match p.problem? {
                P::Unreachable => format!(
                    "start the server of profile {} or fix its base URL (CLAW_LLM_BASE_URL / base_url)",
                    p.profile
                ),
                P::KeyRefused => format!(
                    "check the API key of profile {} (CLAW_LLM_API_KEY / api_key_env)",
                    p.profile
                ),
                P::HttpError => format!(
                    "check that profile {}'s base URL is an {} API",
                    p.profile, p.api
                ),
                P::ModelUnlisted => format!(
                    "set profile {}'s model (CLAW_LLM_MODEL / model) to one the server lists",
                    p.profile
                ),
            };
            Some(what)
        })
        .collect();
    let mut s = section(
        "llm",
        status,
        summary,
        json!({"configured": true, "probes": probes}),
    );
    if status != Status::Ok && !hints.is_empty() {
        s.hint = Some(hints.join("; "));
    }
    s
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
            )
            .hint("export the variable the config names with the bot's token (docs/channels.md)");
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
    let probe_hints: Vec<String> = probes
        .iter()
        .filter_map(|p| {
            use claw_channels::ProbeProblem as P;
            let key = if p.channel == "matrix" {
                "homeserver"
            } else {
                "base_url"
            };
            Some(match p.problem? {
                P::Unreachable => format!(
                    "check channels.{}.{key} and that the server is up",
                    p.channel
                ),
                P::TokenRefused => format!(
                    "the {} token is wrong or revoked: export a valid one in the variable channels.{}.{} names",
                    p.channel,
                    p.channel,
                    if p.channel == "matrix" {
                        "access_token_env"
                    } else {
                        "token_env"
                    }
                ),
                P::WrongUser => format!(
                    "set channels.{}.user_id to the token's user, or use that user's token",
                    p.channel
                ),
                P::Other => format!("check channels.{} (docs/channels.md)", p.channel),
            })
        })
        .collect();
    let (status, summary, hint) = if !failed.is_empty() {
        (
            Status::Error,
            failed.join("; "),
            Some(probe_hints.join("; ")),
        )
    } else if !warnings.is_empty() {
        (
            Status::Warn,
            warnings.join("; "),
            Some("list who may talk to claw in allow_from (user ids, or `*` for anyone) (docs/channels.md)".to_string()),
        )
    } else {
        (
            Status::Ok,
            probes
                .iter()
                .map(|p| format!("{}: {}", p.channel, p.detail))
                .collect::<Vec<_>>()
                .join("; "),
            None,
        )
    };
    let mut s = section(
        "channels",
        status,
        summary,
        json!({"configured": configured, "probes": probes, "warnings": warnings}),
    );
    s.hint = hint.filter(|h| !h.is_empty());
    s
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
        consolidation(settings, status.as_ref()),
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
    let mut hints: Vec<&str> = Vec::new();
    for h in errs.iter().flat_map(|e| &e.hints) {
        if !hints.contains(&h.as_str()) {
            hints.push(h);
        }
    }
    let hint = hints.join("; ");
    let hint = if hint.is_empty() {
        "fix the config file (docs/configuration.md), or unset CLAW_CONFIG to use the defaults"
            .to_string()
    } else {
        hint
    };
    let report = DoctorReport::new(vec![
        section(
            "config",
            Status::Error,
            summary,
            json!({
                "error": first.map(|e| e.message.clone()),
                "hints": first.map(|e| e.hints.clone()).unwrap_or_default(),
                "kind": first.map(|e| e.kind),
                "errors": errs,
            }),
        )
        .hint(hint),
    ]);
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
            if let Some(h) = &s.hint {
                writeln!(out, "{:<18} hint: {}", "", sanitize(h))?;
            }
        }
    }
    Ok(if report.ok { Exit::Ok } else { Exit::Error })
}
