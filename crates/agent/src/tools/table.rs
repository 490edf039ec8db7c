//! The tool table: the one place a tool is declared. Each entry gives the tool's
//! typed id and argument struct, its name, description and JSON Schema (as
//! offered to the model), whether it is read-only, what it can reach outside the
//! workspace, the argument a one-line preview shows, and when it is offered.
//!
//! Invariant: every field of an entry is mandatory (the macro accepts no
//! defaults), so a new tool cannot compile without saying whether it is
//! read-only — and the policy ([`super::policy`]) reads nothing but this table, so
//! no tool can silently skip confirmation. The enum [`ToolId`], the typed
//! [`Invocation`] and the parser are generated from the same entries, so the
//! dispatcher's `match` is exhaustive over exactly the declared tools.

use super::cron::CronArgs;
use super::exec::ExecArgs;
use super::fs::{EditFileArgs, ListDirArgs, ReadFileArgs, WriteFileArgs};
use super::memory::{MemoryGetArgs, MemorySearchArgs};
use super::message::MessageArgs;
use super::spawn::SpawnArgs;
use super::web::{WebFetchArgs, WebSearchArgs};
use super::{ToolError, parse_args};

/// What a tool can reach beyond the workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Files in the workspace (confined by the jail when it is on) or the memory index.
    Workspace,
    /// A program run by the shell: whatever the exec sandbox lets it reach.
    Process,
    /// A network host the model picks (the `preview_key` argument holds its URL);
    /// confirmed per host.
    AnyHost,
    /// A fixed service the user configured (its key is the user's consent).
    ConfiguredService,
}

impl Reach {
    /// True when the tool can reach anything outside the workspace.
    pub fn outside_workspace(self) -> bool {
        self != Reach::Workspace
    }
}

/// When a tool is offered to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    Always,
    /// Only with a Brave Search API key.
    WithBraveKey,
    /// Only with a memory backend.
    WithMemory,
    /// Only with a jobs file to schedule in (`ToolContext::cron`).
    WithCron,
    /// Only under the gateway with a chat channel (`ToolContext::messenger`).
    WithMessenger,
    /// Only with a sub-agent manager (`ToolContext::spawner`).
    WithSpawner,
}

/// One row of the tool table.
#[derive(Debug, Clone, Copy)]
pub struct ToolDescriptor {
    pub id: ToolId,
    pub name: &'static str,
    pub description: &'static str,
    /// The tool changes nothing (files, processes): it never needs confirmation
    /// for that reason.
    pub read_only: bool,
    pub reach: Reach,
    /// The argument a one-line preview of a call shows (`exec: cargo test`).
    pub preview_key: &'static str,
    pub offered: Offer,
    schema: fn() -> serde_json::Value,
}

impl ToolDescriptor {
    /// The JSON Schema of the arguments (an object schema, no extra properties).
    pub fn schema(&self) -> serde_json::Value {
        (self.schema)()
    }

    /// The spec offered to the model.
    pub fn spec(&self) -> crate::message::ToolSpec {
        crate::message::ToolSpec {
            name: self.name.to_string(),
            description: self.description.to_string(),
            parameters: self.schema(),
        }
    }
}

macro_rules! tool_table {
    ($(
        $id:ident($args:ty) {
            name: $name:literal,
            description: $desc:expr,
            read_only: $ro:expr,
            reach: $reach:expr,
            preview_key: $pk:literal,
            offered: $offered:expr,
            schema: $schema:tt,
        }
    )*) => {
        /// A tool's typed id (generated from the table).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum ToolId { $($id),* }

        /// A tool call with its arguments parsed into the tool's struct.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Invocation { $($id($args)),* }

        /// Every tool claw knows, in the order they are offered.
        pub static TOOLS: &[ToolDescriptor] = &[$(
            ToolDescriptor {
                id: ToolId::$id,
                name: $name,
                description: $desc,
                read_only: $ro,
                reach: $reach,
                preview_key: $pk,
                offered: $offered,
                schema: || serde_json::json!($schema),
            }
        ),*];

        impl Invocation {
            pub fn id(&self) -> ToolId {
                match self { $(Invocation::$id(_) => ToolId::$id),* }
            }

            /// Parses a model's raw JSON arguments for tool `id` (an empty string counts as `{}`).
            pub fn parse(id: ToolId, raw: &str) -> Result<Invocation, ToolError> {
                match id { $(ToolId::$id => parse_args::<$args>($name, raw).map(Invocation::$id)),* }
            }
        }

        /// Checks every entry's schema against its argument struct.
        #[cfg(test)]
        pub(crate) fn check_every_schema() -> usize {
            let mut n = 0;
            $(
                super::check_schema::<$args>(&ToolId::$id.descriptor().schema());
                n += 1;
            )*
            n
        }
    };
}

impl ToolId {
    /// This tool's row of the table.
    pub fn descriptor(self) -> &'static ToolDescriptor {
        &TOOLS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.descriptor().name
    }

    /// The tool called `name`, if there is one.
    pub fn parse(name: &str) -> Option<ToolId> {
        TOOLS.iter().find(|d| d.name == name).map(|d| d.id)
    }
}

tool_table! {
    ReadFile(ReadFileArgs) {
        name: "read_file",
        description: "Read a text file. Returns lines start_line.. (1-based, \
default 1) up to max_lines (default 500, at most 2000) and at most 40000 characters, with the \
file's total line count and the start_line to continue from when more remains.",
        read_only: true,
        reach: Reach::Workspace,
        preview_key: "path",
        offered: Offer::Always,
        schema: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                "start_line": {"type": "integer", "minimum": 1, "description": "First line to return (1-based). Default 1."},
                "max_lines": {"type": "integer", "minimum": 1, "description": "Most lines to return. Default 500, at most 2000."}
            },
            "required": ["path"],
            "additionalProperties": false
        },
    }
    WriteFile(WriteFileArgs) {
        name: "write_file",
        description: "Write a text file, replacing it if it exists; missing \
parent directories are created. The content is at most 4 MiB (4194304 bytes).",
        read_only: false,
        reach: Reach::Workspace,
        preview_key: "path",
        offered: Offer::Always,
        schema: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                "content": {"type": "string", "description": "The complete new content of the file."}
            },
            "required": ["path", "content"],
            "additionalProperties": false
        },
    }
    EditFile(EditFileArgs) {
        name: "edit_file",
        description: "Replace old_text with new_text in a file. old_text must \
occur exactly once (whitespace included); otherwise nothing changes and the error shows the \
closest text or where the duplicates are. An edit may not grow a file past 4 MiB (4194304 \
bytes).",
        read_only: false,
        reach: Reach::Workspace,
        preview_key: "path",
        offered: Offer::Always,
        schema: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                "old_text": {"type": "string", "description": "Exact text to replace; must occur exactly once in the file."},
                "new_text": {"type": "string", "description": "Replacement text."}
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": false
        },
    }
    ListDir(ListDirArgs) {
        name: "list_dir",
        description: "List a directory (default: the workspace): names, kinds \
(directories end with /) and file sizes.",
        read_only: true,
        reach: Reach::Workspace,
        preview_key: "path",
        offered: Offer::Always,
        schema: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory, relative to the workspace or absolute. Default: the workspace."}
            },
            "required": [],
            "additionalProperties": false
        },
    }
    Exec(ExecArgs) {
        name: "exec",
        description: "Run a shell command with `sh -c` in the workspace and return \
its exit code, stdout and stderr. Non-interactive (stdin is empty). Default timeout 60 s; the \
whole process group is killed on timeout and when the command exits, so do not start background \
servers. Output over 10000 characters keeps the first and last 5000. Destructive commands \
(rm -rf /, mkfs, dd, shutdown, …) are refused. Commands run in a sandbox: they can write only \
inside the workspace and $TMPDIR (a private /tmp, which is also $HOME), read only the \
workspace and system directories, and have no network access unless it was enabled in the \
configuration.",
        read_only: false,
        reach: Reach::Process,
        preview_key: "command",
        offered: Offer::Always,
        schema: {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "Shell command, run with sh -c in the workspace."},
                "timeout_secs": {"type": "integer", "minimum": 1, "description": "Timeout in seconds (at most the configured limit, default 60)."}
            },
            "required": ["command"],
            "additionalProperties": false
        },
    }
    WebFetch(WebFetchArgs) {
        name: "web_fetch",
        description: "Fetch an http(s) URL. HTML is returned as readable text \
(title, headings, paragraphs, list items, link text; scripts, styles and navigation dropped); \
JSON and plain text as they are. At most max_chars characters (default 20000).",
        read_only: true,
        reach: Reach::AnyHost,
        preview_key: "url",
        offered: Offer::Always,
        schema: {
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "http:// or https:// URL."},
                "max_chars": {"type": "integer", "minimum": 100, "description": "Most characters of text to return (default 20000, at most 100000)."}
            },
            "required": ["url"],
            "additionalProperties": false
        },
    }
    WebSearch(WebSearchArgs) {
        name: "web_search",
        description: "Search the web (Brave Search). Returns titles, URLs and descriptions.",
        read_only: true,
        reach: Reach::ConfiguredService,
        preview_key: "query",
        offered: Offer::WithBraveKey,
        schema: {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Search query."},
                "count": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Number of results (default 5)."}
            },
            "required": ["query"],
            "additionalProperties": false
        },
    }
    MemorySearch(MemorySearchArgs) {
        name: "memory_search",
        description: "Search memory (notes in MEMORY.md and memory/*.md, \
and past session transcripts: what was said in earlier conversations) by meaning and keywords. \
Use it before answering any question about the past, the user's preferences or earlier \
decisions, people or dates. A date or a relative time in the query (\"on May 4th\", \"last \
week\") ranks what was said then first. Returns snippets with citations path#Lstart-Lend (a \
conversation's hit also says its day and speaker); cite them in your answer.",
        read_only: true,
        reach: Reach::Workspace,
        preview_key: "query",
        offered: Offer::WithMemory,
        schema: {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to look for (a question, words, an identifier)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "Most results (default 6)."},
                "min_score": {"type": "number", "minimum": 0, "maximum": 1, "description": "Drop hits scoring below this (default 0.35)."},
                "mode": {"type": "string", "enum": ["hybrid", "fts", "vector"], "description": "Retrieval mode (default hybrid)."},
                "source": {"type": "string", "description": "memory, sessions, all (default) or a source name."}
            },
            "required": ["query"],
            "additionalProperties": false
        },
    }
    MemoryGet(MemoryGetArgs) {
        name: "memory_get",
        description: "Read lines of an indexed memory file (a path from \
memory_search results), from line `from` (default 1), `lines` lines (default 120). Given a \
citation (path#Lstart-Lend) it reads those lines; a past conversation's citation comes with \
the turns around it.",
        read_only: true,
        reach: Reach::Workspace,
        preview_key: "path",
        offered: Offer::WithMemory,
        schema: {
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Path of an indexed file, or a citation path#Lstart-Lend, as shown in memory_search results."},
                "from": {"type": "integer", "minimum": 1, "description": "First line (1-based, default 1)."},
                "lines": {"type": "integer", "minimum": 1, "description": "Number of lines (default 120)."}
            },
            "required": ["path"],
            "additionalProperties": false
        },
    }
    Cron(CronArgs) {
        name: "cron",
        description: "Schedule messages to yourself: reminders and recurring checks. \
action add creates a job that later runs as its own turn with `message` as the prompt (write it \
as an instruction to yourself, e.g. \"Remind the user to call the dentist\"), and the answer is \
delivered to this session. Give exactly one of: at (one time, local YYYY-MM-DDTHH:MM in the \
user's time zone or RFC 3339; for \"tomorrow at 9\" compute the date from the current time), every \
(an interval: 30s, 15m, 1h, 1d, 1h30m) or cron (5 fields: minute hour day-of-month month \
day-of-week, e.g. \"0 9 * * 1-5\"), with tz (IANA name such as Europe/Berlin) when it is not the \
user's zone. action list shows the jobs with their ids and next runs; action remove deletes \
the job `id`.",
        read_only: false,
        reach: Reach::Workspace,
        preview_key: "message",
        offered: Offer::WithCron,
        schema: {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["add", "list", "remove"], "description": "add, list or remove."},
                "every": {"type": "string", "description": "add: repeat interval (30s, 15m, 1h, 1d; at least 1s)."},
                "at": {"type": "string", "description": "add: one-shot time, YYYY-MM-DDTHH:MM (local) or RFC 3339; must be in the future."},
                "cron": {"type": "string", "description": "add: 5-field cron expression."},
                "tz": {"type": "string", "description": "add: IANA time zone for at/cron (default: the user's)."},
                "message": {"type": "string", "description": "add: the prompt the job's turn starts with."},
                "id": {"type": "string", "description": "remove: the job's id."}
            },
            "required": ["action"],
            "additionalProperties": false
        },
    }
    Message(MessageArgs) {
        name: "message",
        description: "Send a text message to a chat on a chat channel (matrix or telegram): \
channel is the network, chat_id the Matrix room id (!abc:server) or Telegram chat id. Only chats \
where an allowed user talked to you can be reached; the session key of a chat is \
<channel>:<chat_id>. Long texts are split automatically.",
        read_only: false,
        reach: Reach::ConfiguredService,
        preview_key: "chat_id",
        offered: Offer::WithMessenger,
        schema: {
            "type": "object",
            "properties": {
                "channel": {"type": "string", "enum": ["matrix", "telegram"], "description": "The chat network."},
                "chat_id": {"type": "string", "description": "Matrix room id or Telegram chat id."},
                "text": {"type": "string", "description": "The message."}
            },
            "required": ["channel", "chat_id", "text"],
            "additionalProperties": false
        },
    }
    Spawn(SpawnArgs) {
        name: "spawn",
        description: "Hand a self-contained task to a sub-agent that works on it in the \
background with its own session and a restricted tool set (it cannot spawn, schedule or send \
messages). Returns the sub-agent's id at once; its result is announced to you later in a message, \
so tell the user it is under way and do not wait for it. Give a complete task description: the \
sub-agent does not see this conversation.",
        read_only: false,
        reach: Reach::Process,
        preview_key: "task",
        offered: Offer::WithSpawner,
        schema: {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What the sub-agent should do, with all the context it needs."},
                "label": {"type": "string", "description": "A short name for the task (shown in /agents)."},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "Only these tools (default: every tool allowed to sub-agents)."}
            },
            "required": ["task"],
            "additionalProperties": false
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_schema_matches_its_args_struct() {
        assert_eq!(check_every_schema(), TOOLS.len());
    }

    #[test]
    fn ids_index_the_table_and_names_are_unique() {
        for (i, d) in TOOLS.iter().enumerate() {
            assert_eq!(d.id as usize, i);
            assert_eq!(ToolId::parse(d.name), Some(d.id));
            assert_eq!(d.id.descriptor().name, d.name);
            assert!(!d.description.is_empty());
            let schema = d.schema();
            assert!(
                schema["properties"].get(d.preview_key).is_some(),
                "{}: the preview key `{}` is not an argument",
                d.name,
                d.preview_key
            );
            assert_eq!(d.spec().name, d.name);
        }
        assert_eq!(ToolId::parse("rm_everything"), None);
    }

    #[test]
    fn the_file_tools_state_the_write_limit() {
        let limit = super::super::fs::MAX_WRITE_BYTES;
        assert_eq!(limit, 4 << 20, "the descriptions say 4 MiB");
        for id in [ToolId::WriteFile, ToolId::EditFile] {
            let d = id.descriptor().description;
            assert!(
                d.contains(&format!("({limit} bytes)")),
                "{}: {d}",
                id.name()
            );
        }
    }

    #[test]
    fn outside_reach_is_declared_where_it_is_true() {
        let outside: Vec<&str> = TOOLS
            .iter()
            .filter(|d| d.reach.outside_workspace())
            .map(|d| d.name)
            .collect();
        assert_eq!(
            outside,
            ["exec", "web_fetch", "web_search", "message", "spawn"]
        );
    }
}
