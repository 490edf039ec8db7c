//! The tool layer: the tool table ([`table`], the one place a tool is declared),
//! typed outcomes ([`ToolOutput`]) and errors ([`ToolError`]), and the
//! [`ToolRegistry`] the driver uses to offer tools (`specs`), parse a model's call
//! into a typed [`Invocation`] and ask the policy about it (`prepare`), and run it
//! (`execute`; `dispatch` does both without the policy).
//!
//! Invariant: nothing here panics or fails the loop: an unknown tool, invalid JSON,
//! arguments that do not match the schema, a refusal (declined, no one to confirm,
//! cancelled, stopped by the loop guard) become a [`ToolError`] rendered back to
//! the model. Text for the model is produced only by [`ToolOutput::render`] /
//! [`ToolError::render`] / [`render_for_model`].

pub mod cron;
pub mod dynamic;
#[allow(unsafe_code)] // process groups and rlimits (libc); each block carries its SAFETY note
pub mod exec;
pub mod fs;
pub mod jail;
pub mod memory;
pub mod message;
pub mod netguard;
pub mod policy;
#[allow(unsafe_code)]
// fork/exec confinement: namespaces, pivot_root, Landlock, rlimits (raw syscalls); SAFETY notes inline
pub mod sandbox;
pub mod spawn;
pub mod table;
pub mod web;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::message::{ToolCall, ToolSpec};

pub use cron::{CronAction, CronArgs, CronOutcome, CronToolContext};
pub use dynamic::{DynamicTools, Prepared};
pub use exec::{ExecArgs, ExecOutcome};
pub use fs::{DirEntry, EditFileArgs, EntryKind, ListDirArgs, ReadFileArgs, WriteFileArgs};
pub use memory::{
    MemoryBackend, MemoryBackendError, MemoryGetArgs, MemoryGetResponse, MemorySearchArgs,
    MemorySearchResponse, RenderForModel,
};
pub use policy::{Answer, Gate, Grant, Grants, is_read_only, resolve_path};
pub use spawn::{SharedSpawner, SpawnArgs, Spawned, Spawner};
pub use table::{Invocation, Offer, Reach, TOOLS, ToolDescriptor, ToolId};
pub use web::{SearchHit, WebFetchArgs, WebSearchArgs};

/// Default timeout of `exec`.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time limit of one `web_fetch` / `web_search` request.
pub const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(30);
/// Default limit on the bytes `web_fetch` downloads.
pub const DEFAULT_FETCH_MAX_BYTES: usize = 2 * 1024 * 1024;
/// The Brave Search web endpoint.
pub const BRAVE_SEARCH_URL: &str = "https://api.search.brave.com/res/v1/web/search";

/// Everything the tools need to know about their environment. Built once by the
/// driver from the resolved settings; library code never reads the environment.
#[derive(Clone)]
pub struct ToolContext {
    /// Working directory of `exec` and base of relative paths.
    pub workspace: PathBuf,
    /// Confine file tools to the workspace.
    pub jail: bool,
    /// Timeout of `exec` (the model may ask for less, never for more).
    pub exec_timeout: Duration,
    /// Brave Search API key; without it `web_search` is not offered.
    pub brave_api_key: Option<String>,
    /// Endpoint of the Brave web search API (overridable for tests).
    pub brave_endpoint: String,
    /// Tools with side effects need the user's confirmation.
    pub confirm_side_effects: bool,
    /// The memory engine; without it `memory_search`/`memory_get` are not offered.
    pub memory: Option<Arc<dyn MemoryBackend>>,
    /// Time limit of one web request.
    pub fetch_timeout: Duration,
    /// Size limit of one `web_fetch` download.
    pub fetch_max_bytes: usize,
    /// Which addresses `web_fetch` may reach (`web.allow_private`).
    pub net: netguard::NetPolicy,
    /// How `exec` confines commands (on by default, network off).
    pub sandbox: sandbox::SandboxPolicy,
    /// The jobs file and the asking session; without it `cron` is not offered.
    pub cron: Option<CronToolContext>,
    /// The gateway's chat channels; without them `message` is not offered.
    pub messenger: Option<Arc<dyn message::Messenger>>,
    /// Starts sub-agents; without it `spawn` is not offered.
    pub spawner: Option<SharedSpawner>,
    /// Paths the file tools refuse even inside the workspace (claw's state
    /// directory and config file: [`crate::settings::AgentSettings::protected`]).
    pub protected: Vec<PathBuf>,
    /// The key of the session the tools run in (`cli:default`): `memory_search`
    /// never returns that session's own transcript turns (it has them in context).
    pub session: Option<String>,
}

impl ToolContext {
    /// A context with defaults: no jail, 60 s exec timeout, no web search, no
    /// confirmation, no memory backend.
    pub fn new(workspace: impl Into<PathBuf>) -> ToolContext {
        ToolContext {
            workspace: workspace.into(),
            jail: false,
            exec_timeout: DEFAULT_EXEC_TIMEOUT,
            brave_api_key: None,
            brave_endpoint: BRAVE_SEARCH_URL.to_string(),
            confirm_side_effects: false,
            memory: None,
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            fetch_max_bytes: DEFAULT_FETCH_MAX_BYTES,
            net: netguard::NetPolicy::default(),
            sandbox: sandbox::SandboxPolicy::default(),
            cron: None,
            messenger: None,
            spawner: None,
            protected: Vec::new(),
            session: None,
        }
    }
}

impl ToolContext {
    /// The context every surface (CLI, REPL, cron, gateway) builds its tools from:
    /// the assistant's jail, timeouts, confirmation policy (`yes` skips it), web
    /// policy, sandbox and protected paths. One place, so a new protection reaches
    /// every surface; the caller adds memory, cron, channels and sub-agents.
    pub fn from_settings(
        workspace: impl Into<PathBuf>,
        a: &crate::settings::AgentSettings,
        yes: bool,
    ) -> ToolContext {
        let mut ctx = ToolContext::new(workspace);
        ctx.jail = a.jail_to_workspace;
        ctx.exec_timeout = a.exec_timeout;
        ctx.brave_api_key = a.brave_api_key.clone();
        ctx.confirm_side_effects = a.confirm_side_effects && !yes;
        ctx.net.allow_private = a.allow_private;
        ctx.sandbox = a.sandbox.clone();
        ctx.protected = a.protected.clone();
        ctx
    }
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("workspace", &self.workspace)
            .field("jail", &self.jail)
            .field("exec_timeout", &self.exec_timeout)
            .field(
                "brave_api_key",
                &self.brave_api_key.as_ref().map(|_| "<set>"),
            )
            .field("brave_endpoint", &self.brave_endpoint)
            .field("confirm_side_effects", &self.confirm_side_effects)
            .field("memory", &self.memory.is_some())
            .field("fetch_timeout", &self.fetch_timeout)
            .field("fetch_max_bytes", &self.fetch_max_bytes)
            .field("net", &self.net)
            .field("sandbox", &self.sandbox)
            .field("cron", &self.cron)
            .field("messenger", &self.messenger.is_some())
            .field("spawner", &self.spawner.is_some())
            .field("protected", &self.protected)
            .finish()
    }
}

/// A typed tool outcome. Rendered to text only at the model boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "tool", rename_all = "snake_case")]
pub enum ToolOutput {
    /// Lines `start_line..=end_line` (1-based) of a file with `total_lines` lines.
    FileRead {
        path: String,
        start_line: usize,
        end_line: usize,
        total_lines: usize,
        text: String,
        /// More lines follow `end_line` (cut by the line or character limit).
        truncated: bool,
    },
    FileWritten {
        path: String,
        bytes: usize,
        /// The file did not exist before.
        created: bool,
    },
    FileEdited {
        path: String,
        /// First line of the replaced text (1-based).
        line: usize,
        removed_lines: usize,
        added_lines: usize,
    },
    DirListing {
        path: String,
        entries: Vec<DirEntry>,
        /// More entries exist than were listed.
        truncated: bool,
    },
    Exec(ExecOutcome),
    WebPage {
        url: String,
        /// URL after redirects.
        final_url: String,
        status: u16,
        content_type: String,
        title: Option<String>,
        text: String,
        /// The body or the text was cut at a limit.
        truncated: bool,
    },
    WebSearch {
        query: String,
        results: Vec<SearchHit>,
    },
    MemorySearch(MemorySearchResponse),
    MemoryGet(MemoryGetResponse),
    /// The `cron` tool's result; `zone` is the zone its times are shown in.
    Cron {
        outcome: CronOutcome,
        zone: String,
    },
    /// `message` sent `parts` messages to `chat_id` on `channel`.
    MessageSent {
        channel: String,
        chat_id: String,
        parts: usize,
    },
    /// A sub-agent was started or queued ([`spawn`]).
    Spawned(Spawned),
    /// The text result of a dynamic tool ([`dynamic::DynamicTools`]).
    External {
        name: String,
        text: String,
    },
}

impl ToolOutput {
    /// Text shown to the model.
    pub fn render(&self) -> String {
        match self {
            ToolOutput::FileRead { .. }
            | ToolOutput::FileWritten { .. }
            | ToolOutput::FileEdited { .. }
            | ToolOutput::DirListing { .. } => fs::render(self),
            ToolOutput::Exec(outcome) => outcome.render(),
            ToolOutput::WebPage { .. } | ToolOutput::WebSearch { .. } => web::render(self),
            ToolOutput::MemorySearch(r) => r.render(),
            ToolOutput::MemoryGet(r) => r.render(),
            ToolOutput::Cron { outcome, zone } => outcome
                .render(&claw_schedule::Zone::parse(zone).unwrap_or(claw_schedule::Zone::Utc)),
            ToolOutput::MessageSent {
                channel,
                chat_id,
                parts,
            } => format!("sent to {channel} chat {chat_id} ({parts} message(s))"),
            ToolOutput::External { text, .. } => text.clone(),
            ToolOutput::Spawned(s) => spawn::render(s),
        }
    }
}

/// The closest text to a failed `edit_file` search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosestMatch {
    pub start_line: usize,
    pub end_line: usize,
    /// Similarity in [0, 1].
    pub similarity: f64,
    pub text: String,
}

/// Why a tool call failed. Rendered to the model as an error result.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum ToolError {
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool { name: String, available: String },
    #[error(
        "invalid arguments for `{tool}`: not valid JSON ({message}); send a JSON object matching the tool's schema"
    )]
    InvalidJson { tool: String, message: String },
    #[error("invalid arguments for `{tool}`: {message}")]
    InvalidArguments { tool: String, message: String },
    #[error("`{path}` is outside the workspace {workspace} (file tools are confined to it)")]
    OutsideWorkspace { path: String, workspace: String },
    #[error("`{path}` does not exist")]
    NotFound { path: String },
    #[error(
        "`{path}` is claw's own state or configuration ({what}); the assistant's tools may not read or change it"
    )]
    Protected { path: String, what: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{}", render_no_match(.path, .closest))]
    EditNoMatch {
        path: String,
        closest: Option<ClosestMatch>,
    },
    #[error(
        "old_text occurs {count} times in {path} (at lines {lines:?}); nothing was changed. Include more surrounding context so it matches exactly once"
    )]
    EditAmbiguous {
        path: String,
        count: usize,
        lines: Vec<usize>,
    },
    #[error("command refused by the deny list ({reason}): {command}")]
    CommandDenied { command: String, reason: String },
    #[error("could not start the command: {message}")]
    Spawn { message: String },
    #[error("refused URL {url}: {reason}")]
    UrlRefused { url: String, reason: String },
    #[error("fetching {url} failed: {message}")]
    Fetch { url: String, message: String },
    #[error("{url} answered HTTP {status}{}", if .body.is_empty() { String::new() } else { format!(": {}", .body) })]
    HttpStatus {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} returned content of type `{content_type}`, which cannot be shown as text")]
    UnsupportedContent { url: String, content_type: String },
    #[error("memory: {message}")]
    Memory { message: String },
    #[error("the user declined to run `{tool}`")]
    Declined { tool: String },
    #[error(
        "`{tool}` was not run: it needs the user's confirmation ({why}) and there is no \
         terminal to ask; this non-interactive run does not allow it. Tell the user what you \
         wanted to do and why"
    )]
    NoConfirmation { tool: String, why: String },
    #[error("not run: cancelled by the user")]
    Cancelled,
    #[error("not run: the turn was stopped by the loop guard")]
    StoppedByLoopGuard,
    #[error("no result was recorded (the run was interrupted)")]
    Interrupted,
    /// A dynamic tool failed (its server crashed, timed out or reported an error).
    #[error("`{tool}` failed: {message}")]
    External { tool: String, message: String },
    /// A `before_tool_call` hook blocked the call ([`crate::hooks`]).
    #[error("`{tool}` was not run: blocked by a hook: {reason}")]
    Blocked { tool: String, reason: String },
}

fn render_no_match(path: &str, closest: &Option<ClosestMatch>) -> String {
    match closest {
        Some(c) => format!(
            "old_text was not found in {path}; nothing was changed. The closest text \
             (lines {}-{}, {:.0}% similar) is:\n{}\nCopy the exact text (whitespace included) into old_text.",
            c.start_line,
            c.end_line,
            c.similarity * 100.0,
            c.text
        ),
        None => {
            format!("old_text was not found in {path}; nothing was changed (the file is empty).")
        }
    }
}

impl ToolError {
    /// [`ToolError::InvalidArguments`] for `tool` (empty: filled in by the
    /// registry with the name of the tool that was called).
    pub fn invalid(tool: &str, message: impl Into<String>) -> ToolError {
        ToolError::InvalidArguments {
            tool: tool.to_string(),
            message: message.into(),
        }
    }

    /// Text shown to the model.
    pub fn render(&self) -> String {
        format!("Error: {self}")
    }

    /// The rendered error result of a call that was not run (the core's refusals).
    pub fn render_refusal(self) -> (String, bool) {
        render_for_model(&Err(self))
    }

    fn with_tool(self, tool: &str) -> ToolError {
        match self {
            ToolError::InvalidArguments { tool: t, message } if t.is_empty() => {
                ToolError::InvalidArguments {
                    tool: tool.to_string(),
                    message,
                }
            }
            other => other,
        }
    }
}

/// The result of one tool call.
pub type ToolResult = Result<ToolOutput, ToolError>;

/// The text that goes back to the model for a tool result (and whether it is an error).
pub fn render_for_model(result: &ToolResult) -> (String, bool) {
    match result {
        Ok(output) => (output.render(), false),
        Err(error) => (error.render(), true),
    }
}

/// Parses a model's raw JSON arguments into a tool's typed arguments. An empty
/// string counts as `{}` (some models send nothing for argument-less calls).
pub fn parse_args<T: DeserializeOwned>(tool: &str, raw: &str) -> Result<T, ToolError> {
    let value = parse_object(tool, raw)?;
    serde_json::from_value(value).map_err(|e| ToolError::invalid(tool, e.to_string()))
}

/// Parses a model's raw JSON arguments, which must be a JSON object; an empty
/// string counts as `{}`.
pub fn parse_object(tool: &str, raw: &str) -> Result<serde_json::Value, ToolError> {
    let raw = if raw.trim().is_empty() { "{}" } else { raw };
    let value: serde_json::Value =
        serde_json::from_str(raw).map_err(|e| ToolError::InvalidJson {
            tool: tool.to_string(),
            message: e.to_string(),
        })?;
    if !value.is_object() {
        return Err(ToolError::invalid(
            tool,
            "the arguments must be a JSON object",
        ));
    }
    Ok(value)
}

/// Offers the configured tools to the driver, checks a call against the policy and runs it.
pub struct ToolRegistry {
    ctx: ToolContext,
    http: reqwest::Client,
    enabled: Vec<ToolId>,
    /// Tools known at run time, consulted for names the table does not know.
    dynamic: Option<Arc<dyn DynamicTools>>,
    /// Names offered at all (built-in and dynamic); `None` = every tool.
    only: Option<Vec<String>>,
    /// Names never offered ([`ToolRegistry::for_subagent`]).
    excluded: Vec<String>,
}

/// Tools a sub-agent never gets, whether or not they exist in this build.
pub const SUBAGENT_EXCLUDED: [&str; 3] = ["spawn", "cron", "message"];

impl ToolRegistry {
    /// Builds the registry: `web_search` is offered only with a Brave key, the
    /// memory tools only with a memory backend.
    pub fn new(ctx: ToolContext) -> ToolRegistry {
        let enabled = TOOLS
            .iter()
            .filter(|d| match d.offered {
                Offer::Always => true,
                Offer::WithBraveKey => ctx.brave_api_key.is_some(),
                Offer::WithMemory => ctx.memory.is_some(),
                Offer::WithCron => ctx.cron.is_some(),
                Offer::WithMessenger => ctx.messenger.is_some(),
                Offer::WithSpawner => ctx.spawner.is_some(),
            })
            .map(|d| d.id)
            .collect();
        let http = web::build_client(ctx.fetch_timeout);
        ToolRegistry {
            ctx,
            http,
            enabled,
            dynamic: None,
            only: None,
            excluded: Vec::new(),
        }
    }

    /// The registry of a sub-agent: never [`SUBAGENT_EXCLUDED`] (by name, also a
    /// dynamic tool of that name), and with `allow` only the tools it lists.
    pub fn for_subagent(mut self, allow: Option<&[String]>) -> ToolRegistry {
        self.excluded = SUBAGENT_EXCLUDED.iter().map(|s| s.to_string()).collect();
        self.only = allow.map(|a| a.to_vec());
        let keep = |name: &str| self.offers_name(name);
        let enabled: Vec<ToolId> = self
            .enabled
            .iter()
            .copied()
            .filter(|t| keep(t.name()))
            .collect();
        self.enabled = enabled;
        self
    }

    /// Whether the allow/deny lists let `name` be offered.
    fn offers_name(&self, name: &str) -> bool {
        !self.excluded.iter().any(|e| e == name)
            && self
                .only
                .as_ref()
                .is_none_or(|only| only.iter().any(|o| o == name))
    }

    /// Adds run-time tools ([`dynamic`]): offered after the built-in ones, asked
    /// only about names the table does not know.
    pub fn with_dynamic(mut self, dynamic: Arc<dyn DynamicTools>) -> ToolRegistry {
        self.dynamic = Some(dynamic);
        self
    }

    /// The dynamic tool called `name`, with its read-only flag.
    fn dynamic_tool(&self, name: &str) -> Option<(&Arc<dyn DynamicTools>, bool)> {
        if ToolId::parse(name).is_some() || !self.offers_name(name) {
            return None;
        }
        let d = self.dynamic.as_ref()?;
        d.is_read_only(name).map(|ro| (d, ro))
    }

    pub fn context(&self) -> &ToolContext {
        &self.ctx
    }

    /// The tools offered to the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.enabled.iter().map(|t| t.descriptor().spec()).collect();
        if let Some(d) = &self.dynamic {
            specs.extend(
                d.specs()
                    .into_iter()
                    .filter(|s| ToolId::parse(&s.name).is_none() && self.offers_name(&s.name)),
            );
        }
        specs
    }

    /// Names of the built-in tools offered to the model.
    pub fn names(&self) -> Vec<&'static str> {
        self.enabled.iter().map(|t| t.name()).collect()
    }

    /// True when every call of `name` needs the user's confirmation, whatever its
    /// arguments: a tool that is not read-only while confirmation is on, and `exec`
    /// whenever its sandbox is on but unavailable on this machine. (`web_fetch`
    /// needs it per host: see [`ToolRegistry::prepare`].)
    pub fn needs_confirmation(&self, name: &str) -> bool {
        let Some(id) = ToolId::parse(name) else {
            return self
                .dynamic_tool(name)
                .is_some_and(|(_, ro)| self.ctx.confirm_side_effects && !ro);
        };
        policy::always_confirms(id.descriptor(), self.confirm_for(id))
    }

    /// True for a tool that changes nothing (a dynamic tool: what it declares).
    pub fn is_read_only(&self, name: &str) -> bool {
        policy::is_read_only(name) || self.dynamic_tool(name).is_some_and(|(_, ro)| ro)
    }

    /// Whether side effects of `id` need confirmation in this context.
    fn confirm_for(&self, id: ToolId) -> bool {
        self.ctx.confirm_side_effects
            || (id == ToolId::Exec && exec::unconfined_fallback(&self.ctx))
    }

    /// A one-line summary of a call for a confirmation prompt or a status line,
    /// e.g. `exec: cargo test` or `write_file: notes/a.md` (the table's preview key).
    pub fn preview(call: &ToolCall) -> String {
        let value: serde_json::Value =
            serde_json::from_str(&call.arguments).unwrap_or(serde_json::Value::Null);
        let key = ToolId::parse(&call.name).map(|id| id.descriptor().preview_key);
        let detail = key
            .and_then(|k| value.get(k))
            .and_then(|v| v.as_str())
            .map(|s| s.to_string())
            .unwrap_or_else(|| call.arguments.clone());
        let detail: String = if detail.chars().count() > 200 {
            detail.chars().take(200).collect::<String>() + "…"
        } else {
            detail
        };
        format!("{}: {}", call.name, detail)
    }

    /// Parses a model's call into a typed [`Invocation`] of an offered tool and
    /// asks the policy what must happen before it runs. `housekeeping` is true for
    /// claw's own memory-flush turn (writes to memory notes need no confirmation).
    pub fn prepare(
        &self,
        call: &ToolCall,
        housekeeping: bool,
    ) -> Result<(Invocation, Gate), ToolError> {
        let Some(id) = ToolId::parse(&call.name).filter(|t| self.enabled.contains(t)) else {
            return Err(ToolError::UnknownTool {
                name: call.name.clone(),
                available: self.names().join(", "),
            });
        };
        let invocation = Invocation::parse(id, &call.arguments)?;
        let gate = policy::gate(&invocation, self.confirm_for(id), housekeeping);
        Ok((invocation, gate))
    }

    /// [`ToolRegistry::prepare`] for built-in and dynamic tools alike: a name the
    /// table does not know goes to the dynamic tools ([`dynamic::prepare`]).
    pub fn prepare_any(
        &self,
        call: &ToolCall,
        housekeeping: bool,
    ) -> Result<(Prepared, Gate), ToolError> {
        if let Some((_, read_only)) = self.dynamic_tool(&call.name) {
            return dynamic::prepare(
                &call.name,
                read_only,
                &call.arguments,
                self.ctx.confirm_side_effects,
            );
        }
        self.prepare(call, housekeeping)
            .map(|(inv, gate)| (Prepared::Builtin(inv), gate))
    }

    /// Runs a call prepared by [`ToolRegistry::prepare_any`].
    pub async fn execute_any(&self, prepared: Prepared) -> ToolResult {
        match prepared {
            Prepared::Builtin(invocation) => self.execute(invocation).await,
            Prepared::Dynamic { name, arguments } => match self.dynamic_tool(&name) {
                Some((d, _)) => d.call(&name, arguments).await,
                None => Err(ToolError::UnknownTool {
                    name,
                    available: self.names().join(", "),
                }),
            },
        }
    }

    /// Runs one tool call without asking the policy (tests, and callers that
    /// already did). Never panics; every failure is an `Err` for the model.
    pub async fn dispatch(&self, call: &ToolCall) -> ToolResult {
        let (prepared, _) = self.prepare_any(call, false)?;
        self.execute_any(prepared).await
    }

    /// Runs a parsed call. Never panics; every failure is an `Err` for the model.
    pub async fn execute(&self, invocation: Invocation) -> ToolResult {
        let name = invocation.id().name();
        let writes = matches!(
            invocation,
            Invocation::WriteFile(_) | Invocation::EditFile(_) | Invocation::Exec(_)
        );
        let result = match invocation {
            Invocation::ReadFile(args) => {
                blocking(self.ctx.clone(), move |ctx| fs::read_file(&ctx, &args)).await
            }
            Invocation::WriteFile(args) => {
                blocking(self.ctx.clone(), move |ctx| fs::write_file(&ctx, &args)).await
            }
            Invocation::EditFile(args) => {
                blocking(self.ctx.clone(), move |ctx| fs::edit_file(&ctx, &args)).await
            }
            Invocation::ListDir(args) => {
                blocking(self.ctx.clone(), move |ctx| fs::list_dir(&ctx, &args)).await
            }
            Invocation::Exec(args) => exec::run(&self.ctx, &args).await.map(ToolOutput::Exec),
            Invocation::WebFetch(args) => web::fetch(&self.ctx, &args).await,
            Invocation::WebSearch(args) => web::search(&self.http, &self.ctx, &args).await,
            Invocation::MemorySearch(args) => memory::search(&self.ctx, args).await,
            Invocation::MemoryGet(args) => memory::get(&self.ctx, args).await,
            Invocation::Cron(args) => {
                blocking(self.ctx.clone(), move |ctx| cron::run(&ctx, &args)).await
            }
            Invocation::Message(args) => message::run(&self.ctx, &args).await,
            Invocation::Spawn(args) => spawn::run(&self.ctx, args),
        };
        // Even a failed command may have written something: the next memory
        // search looks at the disk itself.
        if writes && let Some(memory) = &self.ctx.memory {
            memory.note_write();
        }
        result.map_err(|e| e.with_tool(name))
    }
}

/// Runs blocking file work off the async runtime.
async fn blocking<F>(ctx: ToolContext, f: F) -> ToolResult
where
    F: FnOnce(ToolContext) -> ToolResult + Send + 'static,
{
    match tokio::task::spawn_blocking(move || f(ctx)).await {
        Ok(result) => result,
        Err(e) => Err(ToolError::Io {
            path: String::new(),
            message: format!("the tool task failed: {e}"),
        }),
    }
}

/// Test helper shared by the tool modules: checks a hand-written schema against
/// the serde struct it describes. A value built from the schema's properties
/// must deserialise (with `deny_unknown_fields`, so every property is a field of
/// the right type); serialising it back must give exactly the schema's
/// properties (so every field is in the schema); dropping a required property
/// must fail and dropping an optional one must succeed.
#[cfg(test)]
pub(crate) fn check_schema<T: DeserializeOwned + Serialize>(schema: &serde_json::Value) {
    use serde_json::{Map, Value};
    assert_eq!(schema["type"], "object", "schema must describe an object");
    assert_eq!(schema["additionalProperties"], false);
    let props = schema["properties"]
        .as_object()
        .expect("schema has properties");
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().expect("string")).collect())
        .unwrap_or_default();
    for r in &required {
        assert!(props.contains_key(*r), "required `{r}` is not a property");
    }
    let example = |p: &Value| -> Value {
        if let Some(e) = p.get("enum").and_then(|e| e.as_array()) {
            return e[0].clone();
        }
        match p["type"].as_str() {
            Some("string") => Value::from("x"),
            Some("integer") => Value::from(p.get("minimum").and_then(|m| m.as_u64()).unwrap_or(1)),
            Some("number") => Value::from(0.5),
            Some("boolean") => Value::from(true),
            Some("array") => Value::from(vec![Value::from("x")]),
            other => panic!("unsupported schema type {other:?}"),
        }
    };
    let full: Map<String, Value> = props.iter().map(|(k, p)| (k.clone(), example(p))).collect();
    let parsed: T = serde_json::from_value(Value::Object(full.clone()))
        .unwrap_or_else(|e| panic!("example from schema does not deserialise: {e}"));
    let back = serde_json::to_value(&parsed).unwrap();
    let mut back_keys: Vec<&String> = back.as_object().unwrap().keys().collect();
    let mut schema_keys: Vec<&String> = props.keys().collect();
    back_keys.sort();
    schema_keys.sort();
    assert_eq!(
        back_keys, schema_keys,
        "struct fields and schema properties differ"
    );
    for key in props.keys() {
        let mut partial = full.clone();
        partial.remove(key);
        let ok = serde_json::from_value::<T>(Value::Object(partial)).is_ok();
        if required.contains(&key.as_str()) {
            assert!(
                !ok,
                "`{key}` is required by the schema but optional in the struct"
            );
        } else {
            assert!(
                ok,
                "`{key}` is optional in the schema but required by the struct"
            );
        }
    }
    let mut extra = full.clone();
    extra.insert("no_such_field".into(), Value::from(1));
    assert!(
        serde_json::from_value::<T>(Value::Object(extra)).is_err(),
        "unknown fields must be rejected"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_args_reports_json_and_schema_errors() {
        let e = parse_args::<ReadFileArgs>("read_file", "{not json").unwrap_err();
        assert!(matches!(e, ToolError::InvalidJson { .. }), "{e:?}");
        let e = parse_args::<ReadFileArgs>("read_file", "[1,2]").unwrap_err();
        assert!(matches!(e, ToolError::InvalidArguments { .. }), "{e:?}");
        let e = parse_args::<ReadFileArgs>("read_file", r#"{"path": 3}"#).unwrap_err();
        assert!(
            e.render().contains("invalid arguments for `read_file`"),
            "{}",
            e.render()
        );
        let e = parse_args::<ReadFileArgs>("read_file", r#"{"path":"a","bogus":1}"#).unwrap_err();
        assert!(e.render().contains("bogus"), "{}", e.render());
        let ok: ReadFileArgs = parse_args("read_file", r#"{"path":"a"}"#).unwrap();
        assert_eq!(ok.path, "a");
        let e = parse_args::<ReadFileArgs>("read_file", "").unwrap_err();
        assert!(e.render().contains("path"), "{}", e.render());
    }

    #[test]
    fn every_spec_is_an_object_schema_with_a_description() {
        for d in TOOLS {
            let spec = d.spec();
            assert_eq!(spec.name, d.name);
            assert!(!spec.description.is_empty());
            assert_eq!(spec.parameters["type"], "object");
        }
    }

    #[test]
    fn registry_offers_optional_tools_only_when_configured() {
        let ctx = ToolContext::new("/tmp");
        let reg = ToolRegistry::new(ctx.clone());
        let names = reg.names();
        assert!(names.contains(&"exec"));
        assert!(!names.contains(&"web_search"));
        assert!(!names.contains(&"memory_search"));
        let reg = ToolRegistry::new(ToolContext {
            brave_api_key: Some("k".into()),
            ..ctx
        });
        assert!(reg.names().contains(&"web_search"));
    }

    #[test]
    fn preview_shows_the_key_argument() {
        let call = ToolCall {
            id: "1".into(),
            name: "exec".into(),
            arguments: r#"{"command":"cargo test"}"#.into(),
        };
        assert_eq!(ToolRegistry::preview(&call), "exec: cargo test");
        let call = ToolCall {
            id: "1".into(),
            name: "write_file".into(),
            arguments: "garbage".into(),
        };
        assert_eq!(ToolRegistry::preview(&call), "write_file: garbage");
    }

    #[test]
    fn errors_render_with_prefix() {
        let (text, is_err) = render_for_model(&Err(ToolError::EditAmbiguous {
            path: "a.txt".into(),
            count: 2,
            lines: vec![1, 5],
        }));
        assert!(is_err);
        assert!(text.starts_with("Error: old_text occurs 2 times"), "{text}");
    }
}
