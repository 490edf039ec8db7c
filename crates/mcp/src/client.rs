//! The MCP servers the user configured (`mcp.servers`) as claw's tools.
//!
//! [`McpClients::start`] connects to every server in parallel (stdio: spawns the
//! command; `url`: streamable HTTP), each within the start-up timeout, and lists
//! its tools. They are offered to the model as `mcp__<server>__<tool>` with the
//! server's own input schemas, through the agent's dynamic-tool extension point
//! ([`DynamicTools`]). A tool whose annotations do not say `readOnlyHint: true`
//! is a side effect for the confirmation policy.
//!
//! Invariants: a call never takes longer than the call timeout; a server that
//! crashes (its transport closes) or times out makes that call a tool error, and
//! is restarted once per session (a second failure leaves it down, and its tools
//! answer with an error saying so); a server that failed to start is reported by
//! `claw mcp list` and its tools are not offered. Nothing here panics or ends
//! the agent.

use crate::config::{McpConfig, Transport};
use claw_agent::message::ToolSpec;
use claw_agent::tools::dynamic::{DynamicFuture, DynamicTools};
use claw_agent::tools::{ToolError, ToolOutput};
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{Peer, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceError, ServiceExt};
use serde::Serialize;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

/// Most characters of a model-visible tool name.
const MAX_NAME: usize = 64;

/// A server's state, as `claw mcp list` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ServerState {
    /// Connected; its tools are offered.
    Ready,
    /// It did not start (or its configuration is unusable): not offered.
    Failed { error: String },
    /// It crashed or timed out after its one restart: its tools answer with an error.
    Down { error: String },
}

/// One remote tool and the name the model sees.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RemoteTool {
    /// `mcp__<server>__<tool>`.
    pub name: String,
    /// The tool's name on its server.
    pub remote_name: String,
    pub description: String,
    /// `readOnlyHint: true`: calls need no confirmation.
    pub read_only: bool,
    #[serde(skip)]
    pub schema: serde_json::Value,
}

/// A server's summary (`claw mcp list --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerSummary {
    pub name: String,
    /// `stdio: <command> <args…>` or `http: <url>`.
    pub transport: String,
    #[serde(flatten)]
    pub state: ServerState,
    /// The process id of a running stdio server.
    pub pid: Option<u32>,
    /// Restarts after a crash or timeout (at most 1).
    pub restarts: u32,
    pub tools: Vec<RemoteTool>,
}

/// A live connection.
struct Conn {
    service: RunningService<RoleClient, ()>,
    /// Bumped at each (re)connection, so a failure is acted on once.
    generation: u64,
}

struct Server {
    name: String,
    transport: Result<Transport, String>,
    /// The connection (async: held across the reconnect).
    conn: tokio::sync::Mutex<Option<Conn>>,
    /// What `specs`/`is_read_only`/`list` read without waiting.
    snapshot: std::sync::Mutex<Snapshot>,
}

#[derive(Clone)]
struct Snapshot {
    state: ServerState,
    pid: Option<u32>,
    restarts: u32,
    generation: u64,
    tools: Vec<RemoteTool>,
}

/// The configured MCP servers of one session.
pub struct McpClients {
    servers: Vec<Arc<Server>>,
    startup_timeout: Duration,
    call_timeout: Duration,
}

impl std::fmt::Debug for McpClients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClients")
            .field(
                "servers",
                &self.servers.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Why connecting failed.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("cannot start `{command}`: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("initialisation failed: {0}")]
    Init(String),
    #[error("listing tools failed: {0}")]
    List(ServiceError),
    #[error("did not start within {0:?}")]
    Timeout(Duration),
}

fn describe(t: &Result<Transport, String>) -> String {
    match t {
        Ok(Transport::Stdio { command, args, .. }) => {
            let mut s = format!("stdio: {command}");
            for a in args {
                s.push(' ');
                s.push_str(a);
            }
            s
        }
        Ok(Transport::Http { url }) => format!("http: {url}"),
        Err(_) => "invalid".into(),
    }
}

/// `mcp__<server>__<tool>`, with characters a model API refuses replaced by `_`
/// and cut to 64 characters.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = format!("mcp__{server}__{clean}");
    name.truncate(MAX_NAME);
    name
}

fn remote_tools(server: &str, tools: Vec<Tool>) -> Vec<RemoteTool> {
    let mut out: Vec<RemoteTool> = Vec::new();
    for t in tools {
        let name = exposed_name(server, &t.name);
        if out.iter().any(|o| o.name == name) {
            tracing::warn!(
                "mcp server {server}: tool `{}` skipped (name clash)",
                t.name
            );
            continue;
        }
        let mut schema = serde_json::Value::Object((*t.input_schema).clone());
        if schema.get("type").is_none() {
            schema["type"] = "object".into();
        }
        out.push(RemoteTool {
            name,
            remote_name: t.name.to_string(),
            description: t.description.as_deref().unwrap_or("").to_string(),
            read_only: t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
            schema,
        });
    }
    out
}

/// A live connection: the service, the child's pid (stdio) and the server's tools.
type Connected = (RunningService<RoleClient, ()>, Option<u32>, Vec<RemoteTool>);

async fn connect(name: &str, transport: &Transport) -> Result<Connected, ConnectError> {
    let (service, pid) = match transport {
        Transport::Stdio { command, args, env } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env);
            let (proc, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|source| ConnectError::Spawn {
                    command: command.clone(),
                    source,
                })?;
            let pid = proc.id();
            let service = ().serve(proc).await.map_err(|e| ConnectError::Init(e.to_string()))?;
            (service, pid)
        }
        Transport::Http { url } => {
            let t = StreamableHttpClientTransport::from_uri(url.as_str());
            let service = ().serve(t).await.map_err(|e| ConnectError::Init(e.to_string()))?;
            (service, None)
        }
    };
    let tools = service
        .peer()
        .list_all_tools()
        .await
        .map_err(ConnectError::List)?;
    Ok((service, pid, remote_tools(name, tools)))
}

/// The model-visible text of a tool result: text blocks as they are, other
/// content described; structured content when there is no text.
fn result_text(r: &CallToolResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    for block in &r.content {
        match serde_json::to_value(block) {
            Ok(v) => match v.get("type").and_then(|t| t.as_str()) {
                Some("text") => {
                    parts.push(v["text"].as_str().unwrap_or_default().to_string());
                }
                Some("image") | Some("audio") => parts.push(format!(
                    "[{} content, {}]",
                    v["type"].as_str().unwrap_or_default(),
                    v["mimeType"].as_str().unwrap_or("unknown type")
                )),
                Some("resource_link") => parts.push(format!(
                    "[resource {}]",
                    v["uri"].as_str().unwrap_or_default()
                )),
                Some("resource") => {
                    let res = &v["resource"];
                    match res.get("text").and_then(|t| t.as_str()) {
                        Some(t) => parts.push(t.to_string()),
                        None => parts.push(format!(
                            "[resource {}]",
                            res["uri"].as_str().unwrap_or_default()
                        )),
                    }
                }
                _ => parts.push(v.to_string()),
            },
            Err(_) => parts.push(format!("{block:?}")),
        }
    }
    if parts.is_empty()
        && let Some(s) = &r.structured_content
    {
        parts.push(s.to_string());
    }
    parts.join("\n")
}

impl Server {
    fn snapshot(&self) -> Snapshot {
        self.snapshot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set(&self, f: impl FnOnce(&mut Snapshot)) {
        f(&mut self.snapshot.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Keeps a fresh connection as generation `generation` and marks the server ready.
    fn install(&self, conn: &mut Option<Conn>, connected: Connected, generation: u64) {
        let (service, pid, tools) = connected;
        *conn = Some(Conn {
            service,
            generation,
        });
        self.set(|s| {
            s.state = ServerState::Ready;
            s.pid = pid;
            s.generation = generation;
            s.tools = tools;
        });
    }

    async fn start(&self, timeout: Duration) {
        let t = match &self.transport {
            Ok(t) => t.clone(),
            Err(e) => {
                let e = e.clone();
                self.set(|s| s.state = ServerState::Failed { error: e });
                return;
            }
        };
        let mut conn = self.conn.lock().await;
        match tokio::time::timeout(timeout, connect(&self.name, &t)).await {
            Ok(Ok(connected)) => {
                let generation = self.snapshot().generation + 1;
                self.install(&mut conn, connected, generation);
            }
            Ok(Err(e)) => {
                let error = e.to_string();
                self.set(|s| s.state = ServerState::Failed { error });
            }
            Err(_) => {
                let error = ConnectError::Timeout(timeout).to_string();
                self.set(|s| s.state = ServerState::Failed { error });
            }
        }
    }

    fn summary(&self) -> ServerSummary {
        let s = self.snapshot();
        ServerSummary {
            name: self.name.clone(),
            transport: describe(&self.transport),
            state: s.state,
            pid: s.pid,
            restarts: s.restarts,
            tools: s.tools,
        }
    }

    /// The failure of generation `generation`: restart once, or mark the server down.
    /// Returns what to tell the model about the server.
    async fn failed(&self, generation: u64, why: &str, timeout: Duration) -> String {
        let mut conn = self.conn.lock().await;
        let current = conn.as_ref().map(|c| c.generation);
        if current != Some(generation) {
            // Another call already handled this failure.
            return match self.snapshot().state {
                ServerState::Ready => "the server was restarted; you may retry".into(),
                _ => "the server is down".into(),
            };
        }
        // Dropping the old service closes the transport and ends the child.
        drop(conn.take());
        let snap = self.snapshot();
        if snap.restarts >= 1 {
            let down = self.down(format!("{why} again after its restart"));
            return format!("{down}; it is not restarted again this session");
        }
        self.set(|s| s.restarts += 1);
        let t = match &self.transport {
            Ok(t) => t.clone(),
            Err(e) => return e.clone(),
        };
        match tokio::time::timeout(timeout, connect(&self.name, &t)).await {
            Ok(Ok(connected)) => {
                self.install(&mut conn, connected, snap.generation + 1);
                "the server was restarted; you may retry the call".into()
            }
            Ok(Err(e)) => self.down(format!("{why}; the restart failed: {e}")),
            Err(_) => self.down(format!(
                "{why}; the restart did not finish within {timeout:?}"
            )),
        }
    }

    /// Marks the server down for the session after `error`; what to tell the model.
    fn down(&self, error: String) -> String {
        self.set(|s| {
            s.state = ServerState::Down {
                error: error.clone(),
            };
            s.pid = None;
        });
        format!("the server is down ({error})")
    }

    async fn peer(&self) -> Option<(Peer<RoleClient>, u64)> {
        let conn = self.conn.lock().await;
        conn.as_ref()
            .map(|c| (c.service.peer().clone(), c.generation))
    }
}

impl McpClients {
    /// Connects to every configured server in parallel (each within the
    /// start-up timeout) and lists their tools. Never fails: a server that does
    /// not start is [`ServerState::Failed`].
    pub async fn start(config: &McpConfig) -> McpClients {
        let servers: Vec<Arc<Server>> = config
            .servers
            .iter()
            .map(|(name, spec)| {
                Arc::new(Server {
                    name: name.clone(),
                    transport: spec.transport(name).map_err(|e| e.to_string()),
                    conn: tokio::sync::Mutex::new(None),
                    snapshot: std::sync::Mutex::new(Snapshot {
                        state: ServerState::Failed {
                            error: "not started".into(),
                        },
                        pid: None,
                        restarts: 0,
                        generation: 0,
                        tools: Vec::new(),
                    }),
                })
            })
            .collect();
        let clients = McpClients {
            servers,
            startup_timeout: config.startup_timeout(),
            call_timeout: config.call_timeout(),
        };
        futures_util::future::join_all(
            clients
                .servers
                .iter()
                .map(|s| s.start(clients.startup_timeout)),
        )
        .await;
        clients
    }

    /// No servers configured.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Every configured server: state, process, tools.
    pub fn summaries(&self) -> Vec<ServerSummary> {
        self.servers.iter().map(|s| s.summary()).collect()
    }

    /// The server and remote tool behind an exposed name.
    fn lookup(&self, name: &str) -> Option<(&Arc<Server>, RemoteTool)> {
        self.servers.iter().find_map(|s| {
            s.snapshot()
                .tools
                .into_iter()
                .find(|t| t.name == name)
                .map(|t| (s, t))
        })
    }

    /// Calls a tool by its exposed name (`mcp__<server>__<tool>`).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<ToolOutput, ToolError> {
        let err = |message: String| ToolError::External {
            tool: name.to_string(),
            message,
        };
        let Some((server, tool)) = self.lookup(name) else {
            return Err(ToolError::UnknownTool {
                name: name.to_string(),
                available: self
                    .servers
                    .iter()
                    .flat_map(|s| s.snapshot().tools.into_iter().map(|t| t.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let Some((peer, generation)) = server.peer().await else {
            let why = match server.snapshot().state {
                ServerState::Down { error } | ServerState::Failed { error } => error,
                ServerState::Ready => "not connected".into(),
            };
            return Err(err(format!("MCP server `{}` is down: {why}", server.name)));
        };
        let mut params = CallToolRequestParams::new(tool.remote_name.clone());
        if let serde_json::Value::Object(m) = arguments {
            params = params.with_arguments(m);
        }
        let failure = match tokio::time::timeout(self.call_timeout, peer.call_tool(params)).await {
            Ok(Ok(result)) => {
                let text = result_text(&result);
                return if result.is_error == Some(true) {
                    Err(err(if text.is_empty() {
                        "the server reported an error".into()
                    } else {
                        text
                    }))
                } else {
                    Ok(ToolOutput::External {
                        name: name.to_string(),
                        text,
                    })
                };
            }
            // The server answered with a JSON-RPC error: it is alive.
            Ok(Err(ServiceError::McpError(e))) => {
                return Err(err(format!("the server refused the call: {}", e.message)));
            }
            Ok(Err(e)) => format!("crashed ({e})"),
            Err(_) => format!("did not answer within {:?}", self.call_timeout),
        };
        let what = server
            .failed(generation, &failure, self.startup_timeout)
            .await;
        Err(err(format!(
            "MCP server `{}` {failure}; {what}",
            server.name
        )))
    }
}

impl DynamicTools for McpClients {
    fn specs(&self) -> Vec<ToolSpec> {
        self.servers
            .iter()
            .flat_map(|s| {
                let name = s.name.clone();
                s.snapshot().tools.into_iter().map(move |t| ToolSpec {
                    description: if t.description.is_empty() {
                        format!("`{}` of the MCP server `{name}`.", t.remote_name)
                    } else {
                        format!("{} (MCP server `{name}`)", t.description)
                    },
                    name: t.name,
                    parameters: t.schema,
                })
            })
            .collect()
    }

    fn is_read_only(&self, name: &str) -> Option<bool> {
        self.lookup(name).map(|(_, t)| t.read_only)
    }

    fn call<'a>(&'a self, name: &'a str, arguments: serde_json::Value) -> DynamicFuture<'a> {
        Box::pin(self.call_tool(name, arguments))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_are_safe_for_model_apis() {
        assert_eq!(exposed_name("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(exposed_name("fs", "a.b/c d"), "mcp__fs__a_b_c_d");
        assert_eq!(exposed_name("s", &"x".repeat(100)).len(), 64);
    }

    #[tokio::test]
    async fn a_server_that_cannot_start_is_failed_not_fatal() {
        let config: McpConfig = serde_json::from_str(
            r#"{"startup_timeout_secs": 2, "servers": {
                "ghost": {"command": "/nonexistent/mcp-server"},
                "bad": {"url": "ftp://x/"}}}"#,
        )
        .unwrap();
        let clients = McpClients::start(&config).await;
        let s = clients.summaries();
        assert_eq!(s.len(), 2);
        for summary in &s {
            assert!(
                matches!(summary.state, ServerState::Failed { .. }),
                "{summary:?}"
            );
            assert!(summary.tools.is_empty());
        }
        let ServerState::Failed { error } = &s[1].state else {
            unreachable!()
        };
        assert!(error.contains("cannot start"), "{error}");
        assert!(clients.specs().is_empty());
        let e = clients
            .call_tool("mcp__ghost__x", serde_json::json!({}))
            .await
            .unwrap_err();
        assert!(matches!(e, ToolError::UnknownTool { .. }), "{e:?}");
    }
}
