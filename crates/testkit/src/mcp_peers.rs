//! The MCP peers claw is tested against, installed by `scripts/setup-mcp.sh`
//! (cached in `~/.cache/claw-mcp`): the official Python SDK's interpreter and
//! the npm reference servers. A test that needs one fails with the command to
//! run when it is missing — it never skips.

use std::path::PathBuf;

/// The notes both MCP suites (stdio `claw mcp` and the gateway's `/mcp`)
/// index and search: a dated incident note that answers [`MCP_QUERY`], a
/// dated budget note and MEMORY.md.
pub const MCP_NOTES: &[(&str, &str)] = &[
    (
        "memory/2026-11-02.md",
        "# 2026-11-02\n\n## Payments incident\n\nThe payment webhook kept retrying \
         because the handler returned HTTP 500 on duplicate events.\nWe fixed it by \
         returning 200 and queueing the event for the worker.\n",
    ),
    (
        "memory/2026-10-20.md",
        "# 2026-10-20\n\nBudget review: the offsite budget is capped at 12k.\n",
    ),
    ("MEMORY.md", "# Memory\n\nAlice prefers green tea.\n"),
];

/// The query whose best hit is the incident note of [`MCP_NOTES`].
pub const MCP_QUERY: &str = "why did the payment webhook keep retrying";

const SETUP: &str = "run `source scripts/setup-mcp.sh` (scripts/test.sh does it)";

fn home_cache() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/claw-mcp"))
}

/// The Python interpreter with PyPI `mcp` (`CLAW_MCP_PYTHON`, else the setup
/// script's cached venv).
pub fn python() -> PathBuf {
    let p = std::env::var_os("CLAW_MCP_PYTHON")
        .map(PathBuf::from)
        .or_else(|| home_cache().map(|c| c.join("venv/bin/python")))
        .filter(|p| p.is_file());
    p.unwrap_or_else(|| panic!("this test needs the Python MCP SDK: {SETUP}"))
}

/// `node_modules` holding `@modelcontextprotocol/server-everything` and
/// `server-filesystem` (`CLAW_MCP_NODE_MODULES`, else the setup script's cache).
pub fn node_modules() -> PathBuf {
    let found = std::env::var_os("CLAW_MCP_NODE_MODULES")
        .map(PathBuf::from)
        .or_else(|| {
            let cache = home_cache()?;
            let mut dirs: Vec<PathBuf> = std::fs::read_dir(&cache)
                .ok()?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("npm-"))
                })
                .collect();
            dirs.sort();
            dirs.pop().map(|d| d.join("node_modules"))
        })
        .filter(|p| {
            p.join("@modelcontextprotocol/server-everything/dist/index.js")
                .is_file()
                && p.join("@modelcontextprotocol/server-filesystem/dist/index.js")
                    .is_file()
        });
    found.unwrap_or_else(|| panic!("this test needs the npm MCP servers: {SETUP}"))
}

/// `node <server-everything> stdio` as (command, args).
pub fn everything_server() -> (String, Vec<String>) {
    let js = node_modules().join("@modelcontextprotocol/server-everything/dist/index.js");
    (
        "node".into(),
        vec![js.display().to_string(), "stdio".into()],
    )
}

/// `node <server-filesystem> <dir>` as (command, args).
pub fn filesystem_server(dir: &std::path::Path) -> (String, Vec<String>) {
    let js = node_modules().join("@modelcontextprotocol/server-filesystem/dist/index.js");
    (
        "node".into(),
        vec![js.display().to_string(), dir.display().to_string()],
    )
}
