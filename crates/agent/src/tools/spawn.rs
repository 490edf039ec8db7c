//! The `spawn` tool: hands a task to a sub-agent ([`crate::subagents`]). The tool
//! only starts (or queues) the child and returns its id at once; the child's
//! result is announced into this session later, as a message that starts a turn.
//! Spawning is not read-only (the child acts), so the confirmation policy asks
//! first like any side effect.

use super::{ToolContext, ToolError, ToolOutput};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Arguments of `spawn` (names are a contract).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnArgs {
    pub task: String,
    #[serde(default)]
    pub label: Option<String>,
    /// Names of the tools the child may use (never `spawn`, `cron`, `message`).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// What `spawn` reports: the child's id, label and state (`queued`/`running`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spawned {
    pub id: String,
    pub label: String,
    pub state: String,
    pub session: String,
}

/// Whatever starts sub-agents (the [`crate::subagents::Subagents`] manager).
pub trait Spawner: Send + Sync {
    fn spawn(&self, args: SpawnArgs) -> Result<Spawned, String>;
}

/// The spawner of a context; without one `spawn` is not offered.
pub type SharedSpawner = Arc<dyn Spawner>;

pub fn run(ctx: &ToolContext, args: SpawnArgs) -> Result<ToolOutput, ToolError> {
    let Some(spawner) = &ctx.spawner else {
        return Err(ToolError::invalid(
            "spawn",
            "sub-agents are not available here",
        ));
    };
    if args.task.trim().is_empty() {
        return Err(ToolError::invalid("spawn", "`task` is empty"));
    }
    spawner
        .spawn(args)
        .map(ToolOutput::Spawned)
        .map_err(|message| ToolError::External {
            tool: "spawn".into(),
            message,
        })
}

/// Text for the model.
pub fn render(s: &Spawned) -> String {
    format!(
        "Sub-agent {} (\"{}\") is {} in session {}. Its result will be announced to you in a \
         later message when it finishes; do not wait or poll for it.",
        s.id, s.label, s.state, s.session
    )
}
