//! The state directory at start-up: refuse one another user could write, and move
//! an older claw's `<workspace>/.claw/` out of the workspace once
//! ([`claw_memory_api::state`]), saying on stderr what moved and what to check.

use super::output::{register_command, sanitize};
use crate::config::Settings;

/// Runs before every command that reads settings.
pub fn prepare(settings: &Settings) -> anyhow::Result<()> {
    let state = settings.state_dir();
    claw_memory_api::state::check_private(&state)?;
    let Some(m) = claw_memory_api::state::migrate_legacy(&settings.mem.workspace, &state)? else {
        return Ok(());
    };
    eprintln!(
        "claw: moved the state directory out of the workspace (tools may write anything \
         there): {} -> {}",
        sanitize(&m.from.display().to_string()),
        sanitize(&m.to.display().to_string())
    );
    eprintln!("claw:   moved: {}", m.moved.join(", "));
    if !m.dropped.is_empty() {
        eprintln!(
            "claw:   not carried over (rebuilt or regenerated): {}",
            m.dropped.join(", ")
        );
    }
    if !m.untrusted.is_empty() {
        eprintln!(
            "claw:   NOT carried over: {} registered folder(s) that a tool could have \
             registered there (outside the workspace, or following symlinks out of it); \
             if you registered them yourself, register them again:",
            m.untrusted.len()
        );
        for u in &m.untrusted {
            eprintln!(
                "claw:     {} ({}; {}): {}",
                sanitize(&u.name),
                sanitize(&u.root.display().to_string()),
                sanitize(&u.reason),
                sanitize(&register_command(u))
            );
        }
    }
    if m.moved.iter().any(|n| n == "memory.sqlite") {
        eprintln!(
            "claw:   the old directory was writable by the assistant's tools: check the \
             registered folders with `claw memory sources`"
        );
    }
    if m.moved.iter().any(|n| n == "cron/jobs.json") {
        eprintln!("claw:   and the scheduled jobs with `claw cron list`");
    }
    if !m.removed_legacy {
        eprintln!(
            "claw:   {} still holds other files; claw no longer reads it",
            sanitize(&m.from.display().to_string())
        );
    }
    Ok(())
}
