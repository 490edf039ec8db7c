//! Errors at the edge, jj-style: every failure becomes `error: <message>` plus zero
//! or more `hint: <hint>` lines on stderr (and, with `--json`, one
//! `{"error": {"message", "hints", "kind"}}` object on stdout). The typed library
//! errors are found by walking the anyhow chain; hints live only here, in the binary.
//! A closed stdout (broken pipe) is not an error at all: the caller exits 0 quietly.

use crate::config::ConfigError;
use claw_agent::provider::ProfileError;
use claw_memory_api::LockError;
use claw_memory_api::SearchError;
use claw_memory_api::SourceError;
use claw_memory_api::StoreError;
use claw_memory_api::embed::EmbedError;
use serde::Serialize;
use std::io::Write;

/// One error as the user sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorReport {
    /// The whole chain, outermost first, joined by `: ` (what `{:#}` prints).
    pub message: String,
    /// What to do about it (may be empty).
    pub hints: Vec<String>,
    /// A stable machine-readable class: `config`, `lock-held`, `busy`, `schema`,
    /// `unknown-source`, `refused-path`, `not-indexed`, `embedding`, `llm-config`,
    /// `invalid-input`, `usage`, `io`, `database`, `no-workspace`, `error`.
    pub kind: &'static str,
}

#[derive(Serialize)]
struct ErrorJson<'a> {
    error: &'a ErrorReport,
}

/// Map an error (and its causes) to a message, hints and a kind.
pub fn report(err: &anyhow::Error) -> ErrorReport {
    let message = format!("{err:#}");
    let (kind, hints) = err
        .chain()
        .find_map(classify)
        .unwrap_or(("error", Vec::new()));
    ErrorReport {
        message,
        hints,
        kind,
    }
}

/// A search error whose message carries the CLI's hint inline (`… (run …)`), the
/// form `claw memory get` has always printed; still classified by its inner error.
#[derive(Debug, thiserror::Error)]
#[error("{inner} ({hint})")]
pub struct WithHint {
    /// The library's error.
    pub inner: SearchError,
    /// What the user can do.
    pub hint: &'static str,
}

fn classify(e: &(dyn std::error::Error + 'static)) -> Option<(&'static str, Vec<String>)> {
    if let Some(w) = e.downcast_ref::<WithHint>() {
        return classify(&w.inner);
    }
    // `ServiceError::Search` is transparent: the search error itself never shows up
    // in the source chain, so look inside.
    if let Some(claw_memory_api::ServiceError::Search(inner)) =
        e.downcast_ref::<claw_memory_api::ServiceError>()
    {
        return classify(inner);
    }
    // The memory service's transparent variants hide their inner error from
    // the chain in the same way.
    if let Some(m) = e.downcast_ref::<claw_memory_api::MemoryError>() {
        use claw_memory_api::MemoryError as M;
        let inner: Option<&(dyn std::error::Error + 'static)> = match m {
            M::Sqlite(x) => Some(x),
            M::Store(x) => Some(x),
            M::Search(x) => Some(x),
            M::Lock(x) => Some(x),
            M::Source(x) => Some(x),
            M::Watch(x) => Some(x),
            _ => None,
        };
        if let Some(found) = inner.and_then(classify) {
            return Some(found);
        }
        if let M::Open { .. } = m {
            return Some((
                "database",
                vec![
                    "check that PostgreSQL is running and that the URL in the variable memory.backend.url_env names is right".into(),
                    "`claw doctor` tests the connection".into(),
                ],
            ));
        }
    }
    if let Some(super::NoSuchWorkspace(_)) = e.downcast_ref::<super::NoSuchWorkspace>() {
        return Some((
            "no-workspace",
            vec![
                "check --workspace / CLAW_WORKSPACE for a typo".into(),
                "`claw memory index` or `claw memory add DIR` starts a new workspace".into(),
            ],
        ));
    }
    if let Some(e) = e.downcast_ref::<ConfigError>() {
        let hint = match e {
            ConfigError::NoHome => {
                "set CLAW_WORKSPACE, CLAW_CONFIG and CLAW_STATE_DIR, or HOME".to_string()
            }
            ConfigError::Read { .. } => {
                "check the --config flag / CLAW_CONFIG, or remove it to use the defaults".into()
            }
            ConfigError::Parse { .. } | ConfigError::Invalid { .. } => {
                "the config file format is described in docs/configuration.md".into()
            }
        };
        return Some(("config", vec![hint]));
    }
    if let Some(e) = e.downcast_ref::<claw_memory_api::state::StateError>() {
        use claw_memory_api::state::StateError;
        return Some(match e {
            StateError::NotPrivate { path, .. } => (
                "state-not-private",
                vec![
                    format!(
                        "make it yours and private: `chmod 700 {}` (as its owner), or remove it",
                        path.display()
                    ),
                    "or point CLAW_STATE_DIR at a directory only you can write".into(),
                ],
            ),
            StateError::LegacyInUse { pid, .. } => (
                "lock-held",
                vec![format!(
                    "stop process {pid} (an older claw's gateway or watcher), then run claw again"
                )],
            ),
            StateError::Vet { path, .. } => (
                "state-unchecked",
                vec![format!(
                    "move {} away (the index is rebuilt from your notes), then run claw again",
                    path.display()
                )],
            ),
            StateError::Io { .. } | StateError::Record { .. } => ("io", vec![]),
        });
    }
    if let Some(e) = e.downcast_ref::<LockError>() {
        return Some(match e {
            LockError::Held { pid, .. } => (
                "lock-held",
                vec![
                    format!("wait for process {pid} to finish, or stop it (`kill {pid}`)"),
                    "a running `claw memory watch` holds the lock while it syncs".into(),
                ],
            ),
            LockError::Io { .. } => ("io", vec![]),
        });
    }
    if let Some(e) = e.downcast_ref::<StoreError>() {
        return Some(match e {
            StoreError::Busy => ("busy", vec!["try again in a moment".into()]),
            StoreError::NewerSchema { .. } => ("schema", vec![NEWER_SCHEMA_HINT.into()]),
            StoreError::StateDir { .. } | StoreError::DbFile { .. } | StoreError::Io(_) => (
                "io",
                vec!["check that the workspace is writable (--workspace)".into()],
            ),
            StoreError::Sqlite(_) | StoreError::Backend(_) | StoreError::AsideBusy { .. } => {
                ("database", vec![])
            }
            StoreError::Sidecar { path, .. } => (
                "io",
                vec![format!(
                    "fix or move away {} (it lists the registered folders; `claw memory add` writes it again)",
                    path.display()
                )],
            ),
        });
    }
    if let Some(e) = e.downcast_ref::<SearchError>() {
        return Some(match e {
            SearchError::UnknownSource { .. } => (
                "unknown-source",
                vec!["list the sources with `claw memory sources`".into()],
            ),
            SearchError::Refused { .. } => (
                "refused-path",
                vec!["pass a path as printed by `claw memory search`".into()],
            ),
            SearchError::NotIndexed(_) => ("not-indexed", vec![]),
            SearchError::Read { .. } => ("io", vec![]),
            SearchError::Store(_) | SearchError::Sqlite(_) | SearchError::Storage(_) => {
                return None;
            }
        });
    }
    if let Some(err) = e.downcast_ref::<EmbedError>() {
        return Some((
            "embedding",
            embed_hint(err)
                .map(|h| vec![h.to_string()])
                .unwrap_or_default(),
        ));
    }
    if let Some(claw_agent::promote::ConsolidationError::NoLlm(_)) =
        e.downcast_ref::<claw_agent::promote::ConsolidationError>()
    {
        return Some((
            "llm-config",
            vec![
                "set CLAW_LLM_MODEL, CLAW_LLM_BASE_URL and CLAW_LLM_API (or add agent.profiles to the config file), then run `claw memory consolidate` again".into(),
            ],
        ));
    }
    if e.downcast_ref::<ProfileError>().is_some() {
        return Some((
            "llm-config",
            vec!["configure agent.profiles in the config file, or set CLAW_LLM_*".into()],
        ));
    }
    if let Some(e) = e.downcast_ref::<SourceError>() {
        let hint = match e {
            SourceError::InvalidName { .. } => {
                "use letters, digits, '-' or '_' (pass --name)".to_string()
            }
            SourceError::Reserved { .. } => "pass another name with --name".into(),
            SourceError::NoName => "pass --name".into(),
            SourceError::NoSuchFolder { .. } | SourceError::NotAFolder { .. } => {
                "give the path of an existing folder of notes".into()
            }
            SourceError::Duplicate { existing, .. } => {
                format!("remove it first with `claw memory remove {existing}`")
            }
            SourceError::Overlapping { existing, .. } => {
                format!("register one folder of the two (`claw memory remove {existing}`)")
            }
            SourceError::WorkspaceAsSource { .. } => {
                "put notes in the workspace's memory/ folder, or register another folder".into()
            }
        };
        return Some(("invalid-input", vec![hint]));
    }
    if e.downcast_ref::<std::io::Error>().is_some() {
        return Some(("io", vec![]));
    }
    None
}

/// Whether the error is a write to a closed stdout (`claw … | head -1`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || e.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

/// Print an error: text on stderr always; with `json`, also the JSON object on stdout.
/// Failures to print are ignored (there is nowhere left to report them).
pub fn print(report: &ErrorReport, json: bool) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {}", super::output::sanitize(&report.message));
    for h in &report.hints {
        let _ = writeln!(err, "hint: {}", super::output::sanitize(h));
    }
    if json {
        print_json_only(report);
    }
}

/// The JSON error object alone on stdout (the text went to stderr already).
pub fn print_json_only(report: &ErrorReport) {
    let mut out = std::io::stdout().lock();
    if serde_json::to_writer(&mut out, &ErrorJson { error: report }).is_ok() {
        let _ = writeln!(out);
    }
}

/// A clap usage error (unknown flag, invalid value) as a report of kind `usage`:
/// the first line of clap's message, its `tip:` lines as hints.
pub fn usage_report(e: &clap::Error) -> ErrorReport {
    let text = e.render().to_string();
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let message = lines
        .next()
        .unwrap_or("invalid arguments")
        .trim_start_matches("error: ")
        .to_string();
    let mut hints: Vec<String> = lines
        .filter_map(|l| l.strip_prefix("tip: "))
        .map(str::to_string)
        .collect();
    hints.push("see `claw --help`".into());
    ErrorReport {
        message,
        hints,
        kind: "usage",
    }
}

/// A panic hook in front of the default one: a `println!` to a closed stdout (or
/// stderr) ends the process quietly with 0 instead of a panic message.
pub fn install_broken_pipe_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if payload.starts_with("failed printing to std") && payload.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
}

// ---- hints the memory commands share ----

/// How to get the local model, attached to the errors that installing it fixes.
pub const INSTALL_HINT: &str =
    "run `claw memory install-model` (or set CLAW_EMBED_MODEL_DIR and ORT_DYLIB_PATH)";

/// What to do about a database written by a newer claw.
pub const NEWER_SCHEMA_HINT: &str =
    "upgrade claw, or move the file away and run `claw memory index` to rebuild";

/// The hint line for an embedding error, if one helps.
pub fn embed_hint(e: &EmbedError) -> Option<&'static str> {
    e.is_missing_model().then_some(INSTALL_HINT)
}

/// An embedding error with its hint, in one sentence (`message; hint`): the form
/// the `keyword_only` JSON field has always carried.
pub fn embed_error_with_hint(e: &EmbedError) -> String {
    match embed_hint(e) {
        Some(h) => format!("{e}; {h}"),
        None => e.to_string(),
    }
}

/// What the user can do about a file the indexer left out, when the CLI has
/// something to say (the library's messages name no command or setting).
pub fn issue_hint(reason: claw_memory_api::IssueReason) -> Option<&'static str> {
    match reason {
        claw_memory_api::IssueReason::SymlinkOutside => Some(
            "register the folder with `claw memory add --follow-symlinks-outside` to index such links",
        ),
        claw_memory_api::IssueReason::TooBig => {
            Some("raise memory.max_file_bytes in the config to index it")
        }
        _ => None,
    }
}

/// An issue's message as printed and in `--json`: the library's sentence with
/// the hint in parentheses, the form these messages have always had.
pub fn issue_message(i: &claw_memory_api::IndexIssue) -> String {
    match issue_hint(i.reason) {
        Some(h) => format!("{} ({h})", i.message),
        None => i.message.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_errors_get_kinds_and_hints() {
        let e = anyhow::Error::new(SearchError::UnknownSource {
            name: "x".into(),
            known: "memory".into(),
        })
        .context("search failed");
        let r = report(&e);
        assert_eq!(r.kind, "unknown-source");
        assert_eq!(
            r.message,
            "search failed: unknown source `x` (known: memory)"
        );
        assert_eq!(r.hints.len(), 1);
        let r = report(&anyhow::anyhow!("plain"));
        assert_eq!((r.kind, r.hints.len()), ("error", 0));
    }

    #[test]
    fn broken_pipe_is_found_through_context_and_serde() {
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        assert!(is_broken_pipe(&anyhow::Error::new(io).context("printing")));
        let j = serde_json::Error::io(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&anyhow::Error::new(j)));
        let other = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(!is_broken_pipe(&anyhow::Error::new(other)));
    }
}
