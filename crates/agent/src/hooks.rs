//! Hooks: user-configured commands run at points of the agent loop, with a JSON
//! event on stdin and a JSON answer on stdout (the convention of terminal coding
//! agents). Config (`hooks` key of the config file, a contract):
//! `{"before_tool_call": [{"match": "exec|write_file", "command": "…", "timeout_ms": 5000, "env": ["NAME"]}]}`.
//!
//! Events: `session_start` and `user_prompt` (may add context to the prompt),
//! `before_tool_call` (may block with a reason or rewrite the arguments),
//! `after_tool_call`, `before_compaction`, `agent_end` (notifications).
//!
//! Answers ([`interpret`], pure): exit 0 with no output = no opinion; exit 0 with
//! `{"decision":"block","reason":…}`, `{"arguments":{…}}` or `{"context":…}`;
//! exit 2 = block with stderr as the reason. A hook that times out, crashes,
//! exits otherwise or prints invalid JSON is reported as a [`HookFailure`] and
//! counts as "no opinion": hooks fail open (see docs/hooks.md).
//!
//! A hook runs under `sh -c` in its own process group with the workspace as
//! cwd and a scrubbed environment: `exec`'s harmless base ([`claw_base::child_env`])
//! and only the variables its `env` list names (resolved once, from the
//! environment the caller hands over — this library never reads the process
//! environment). stdout and stderr are capped at
//! [`OUTPUT_CAP`] bytes each; on timeout the whole group is killed.
//!
//! The scrubbed environment would mean little if the hook could read claw's
//! own: `/proc/$PPID/environ` shows the environment block claw was started
//! with — API keys, the gateway token, a PostgreSQL URL — whatever claw unsets
//! later, and to root whatever `PR_SET_DUMPABLE` says. So a hook runs with a
//! process view of its own ([`crate::tools::sandbox::isolate_processes`]: a new
//! PID namespace with a fresh `/proc`), where claw and every other process of
//! the machine do not exist; its files, network and environment are unchanged.
//! Where the machine has no PID namespaces, hooks run as before and claw warns
//! once ([`Hooks::processes_isolated`] says which).
//!
//! `match` is a regex on the tool name, anchored at both ends (`exec` does not
//! match `exec_x`; MCP tools are named `mcp__<server>__<tool>` like any other).
//! For events without a tool it is ignored.

use crate::core::HookEvent;
use regex::Regex;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Bytes kept of a hook's stdout and of its stderr.
pub const OUTPUT_CAP: usize = 64 * 1024;
/// Default time limit of one hook run.
pub const DEFAULT_TIMEOUT_MS: u64 = 5000;

/// One configured hook.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// Regex on the tool name (tool events only); absent = every tool.
    #[serde(rename = "match", default)]
    pub matcher: Option<String>,
    pub command: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Names of environment variables passed to the hook (besides PATH, HOME, LANG).
    #[serde(default)]
    pub env: Vec<String>,
}

/// The `hooks` config section: hooks per event, run in order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    #[serde(default)]
    pub session_start: Vec<HookSpec>,
    #[serde(default)]
    pub user_prompt: Vec<HookSpec>,
    #[serde(default)]
    pub before_tool_call: Vec<HookSpec>,
    #[serde(default)]
    pub after_tool_call: Vec<HookSpec>,
    #[serde(default)]
    pub before_compaction: Vec<HookSpec>,
    #[serde(default)]
    pub agent_end: Vec<HookSpec>,
}

impl HooksConfig {
    pub fn is_empty(&self) -> bool {
        self.session_start.is_empty()
            && self.user_prompt.is_empty()
            && self.before_tool_call.is_empty()
            && self.after_tool_call.is_empty()
            && self.before_compaction.is_empty()
            && self.agent_end.is_empty()
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HookConfigError {
    #[error("hooks.{event}[{index}].match is not a valid regex: {message}")]
    BadRegex {
        event: &'static str,
        index: usize,
        message: String,
    },
    #[error("hooks.{event}[{index}].command is empty")]
    EmptyCommand { event: &'static str, index: usize },
}

/// What a hook said.
#[derive(Debug, Clone, PartialEq)]
pub enum HookAnswer {
    NoOpinion,
    Block(String),
    /// New arguments for the tool call (a JSON object).
    Rewrite(Value),
    /// Text added to the prompt.
    Context(String),
}

/// Why a hook's answer was ignored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HookFailure {
    #[error("timed out after {0} ms")]
    Timeout(u64),
    #[error("could not start: {0}")]
    Spawn(String),
    #[error("killed by signal {0}")]
    Signal(i32),
    #[error("exited with status {code}{}", if .stderr.is_empty() { String::new() } else { format!(": {}", .stderr) })]
    Exit { code: i32, stderr: String },
    #[error("printed invalid JSON: {0}")]
    InvalidJson(String),
}

/// Pure: a finished hook's exit code (`None`: killed by a signal), stdout and
/// stderr → its answer.
pub fn interpret(
    code: Option<i32>,
    signal: Option<i32>,
    stdout: &str,
    stderr: &str,
) -> Result<HookAnswer, HookFailure> {
    match code {
        Some(0) => {}
        Some(2) => {
            let reason = stderr.trim();
            return Ok(HookAnswer::Block(if reason.is_empty() {
                "blocked by a hook (exit status 2)".into()
            } else {
                reason.to_string()
            }));
        }
        Some(code) => {
            return Err(HookFailure::Exit {
                code,
                stderr: first_line(stderr),
            });
        }
        None => return Err(HookFailure::Signal(signal.unwrap_or(0))),
    }
    let out = stdout.trim();
    if out.is_empty() {
        return Ok(HookAnswer::NoOpinion);
    }
    let value: Value =
        serde_json::from_str(out).map_err(|e| HookFailure::InvalidJson(e.to_string()))?;
    let Some(obj) = value.as_object() else {
        return Err(HookFailure::InvalidJson(
            "the answer is not a JSON object".into(),
        ));
    };
    if obj.get("decision").and_then(Value::as_str) == Some("block") {
        let reason = obj
            .get("reason")
            .and_then(Value::as_str)
            .filter(|r| !r.trim().is_empty())
            .unwrap_or("blocked by a hook");
        return Ok(HookAnswer::Block(reason.to_string()));
    }
    if let Some(args) = obj.get("arguments") {
        if !args.is_object() {
            return Err(HookFailure::InvalidJson(
                "`arguments` must be a JSON object".into(),
            ));
        }
        return Ok(HookAnswer::Rewrite(args.clone()));
    }
    if let Some(ctx) = obj.get("context").and_then(Value::as_str) {
        return Ok(HookAnswer::Context(ctx.to_string()));
    }
    Ok(HookAnswer::NoOpinion)
}

fn first_line(s: &str) -> String {
    let line = s.trim().lines().next().unwrap_or("");
    line.chars().take(300).collect()
}

/// Pure: the JSON a hook gets on stdin.
pub fn payload(event: &HookEvent, session: &str) -> Value {
    match event {
        HookEvent::SessionStart => json!({"event": "session_start", "session": session}),
        HookEvent::UserPrompt { prompt } => {
            json!({"event": "user_prompt", "session": session, "prompt": prompt})
        }
        HookEvent::BeforeToolCall { tool, arguments } => json!({
            "event": "before_tool_call", "session": session, "tool": tool,
            "arguments": args_value(arguments),
        }),
        HookEvent::AfterToolCall {
            tool,
            arguments,
            result,
            is_error,
        } => json!({
            "event": "after_tool_call", "session": session, "tool": tool,
            "arguments": args_value(arguments), "result": result, "is_error": is_error,
        }),
        HookEvent::BeforeCompaction {
            reason,
            tokens_before,
        } => json!({
            "event": "before_compaction", "session": session, "reason": reason,
            "tokens_before": tokens_before,
        }),
        HookEvent::AgentEnd { end, text } => {
            json!({"event": "agent_end", "session": session, "end": end, "text": text})
        }
    }
}

/// The model's raw arguments as JSON (the raw string when they do not parse).
fn args_value(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

struct Compiled {
    matcher: Option<Regex>,
    command: String,
    timeout: Duration,
    env: Vec<(String, String)>,
}

/// The hooks of one session, ready to run.
pub struct Hooks {
    by_event: [Vec<Compiled>; 6],
    workspace: PathBuf,
    /// Run hooks with their own PID namespace and `/proc` (where available).
    private_proc: bool,
}

/// One hook run's report, for the caller's log.
#[derive(Debug, Clone, PartialEq)]
pub struct HookRun {
    pub command: String,
    pub result: Result<HookAnswer, HookFailure>,
}

fn index_of(event: &HookEvent) -> usize {
    match event {
        HookEvent::SessionStart => 0,
        HookEvent::UserPrompt { .. } => 1,
        HookEvent::BeforeToolCall { .. } => 2,
        HookEvent::AfterToolCall { .. } => 3,
        HookEvent::BeforeCompaction { .. } => 4,
        HookEvent::AgentEnd { .. } => 5,
    }
}

fn tool_of(event: &HookEvent) -> Option<&str> {
    match event {
        HookEvent::BeforeToolCall { tool, .. } | HookEvent::AfterToolCall { tool, .. } => {
            Some(tool)
        }
        _ => None,
    }
}

impl Hooks {
    /// Compiles the config. `env` is the environment (the binary passes its
    /// snapshot of the process's); each hook gets the part of it that
    /// [`claw_base::child_env`] passes plus its own `env` names, resolved once, here.
    pub fn new(
        config: &HooksConfig,
        workspace: PathBuf,
        env: &BTreeMap<String, String>,
    ) -> Result<Hooks, HookConfigError> {
        let compile = |event: &'static str, specs: &[HookSpec]| {
            specs
                .iter()
                .enumerate()
                .map(|(index, s)| {
                    if s.command.trim().is_empty() {
                        return Err(HookConfigError::EmptyCommand { event, index });
                    }
                    let matcher = match &s.matcher {
                        Some(m) => Some(Regex::new(&format!("^(?:{m})$")).map_err(|e| {
                            HookConfigError::BadRegex {
                                event,
                                index,
                                message: e.to_string(),
                            }
                        })?),
                        None => None,
                    };
                    let env = claw_base::child_env::child_env(
                        env.iter().map(|(k, v)| (k.clone(), v.clone())),
                        &s.env,
                    );
                    Ok(Compiled {
                        matcher,
                        command: s.command.clone(),
                        timeout: Duration::from_millis(s.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)),
                        env,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Hooks {
            by_event: [
                compile("session_start", &config.session_start)?,
                compile("user_prompt", &config.user_prompt)?,
                compile("before_tool_call", &config.before_tool_call)?,
                compile("after_tool_call", &config.after_tool_call)?,
                compile("before_compaction", &config.before_compaction)?,
                compile("agent_end", &config.agent_end)?,
            ],
            workspace,
            private_proc: true,
        })
    }

    /// Whether hooks run with their own PID namespace and `/proc` here (false
    /// where this machine has no PID namespaces: they can then read claw's
    /// environment through `/proc/$PPID/environ`).
    pub fn processes_isolated(&self) -> bool {
        self.private_proc && crate::tools::sandbox::status().hides_host_processes()
    }

    /// Turns the process view of its own off (on by default). For the tests'
    /// positive control and diagnostics only: the hooks can then read claw's
    /// environment.
    pub fn set_private_proc(&mut self, on: bool) {
        self.private_proc = on;
    }

    /// True when some hook is configured for `event`'s kind.
    pub fn wants(&self, event: &HookEvent) -> bool {
        !self.by_event[index_of(event)].is_empty()
    }

    /// Runs the hooks of `event` whose `match` fits, in order. For
    /// `before_tool_call` a block stops the chain and a rewrite is what the next
    /// hook sees (and what the returned event carries).
    pub async fn run(&self, mut event: HookEvent, session: &str) -> (Vec<HookRun>, HookEvent) {
        let mut runs = Vec::new();
        for hook in &self.by_event[index_of(&event)] {
            if let (Some(re), Some(tool)) = (&hook.matcher, tool_of(&event))
                && !re.is_match(tool)
            {
                continue;
            }
            let input = payload(&event, session);
            let result = self.run_one(hook, &input).await;
            let stop = matches!(result, Ok(HookAnswer::Block(_)));
            if let (Ok(HookAnswer::Rewrite(args)), HookEvent::BeforeToolCall { arguments, .. }) =
                (&result, &mut event)
            {
                *arguments = args.to_string();
            }
            runs.push(HookRun {
                command: hook.command.clone(),
                result,
            });
            if stop {
                break;
            }
        }
        (runs, event)
    }

    async fn run_one(&self, hook: &Compiled, input: &Value) -> Result<HookAnswer, HookFailure> {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(&hook.command)
            .current_dir(&self.workspace)
            .env_clear()
            .envs(hook.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        if self.private_proc && !crate::tools::sandbox::isolate_processes(&mut cmd) {
            warn_shared_proc();
        }
        let mut child = cmd.spawn().map_err(|e| HookFailure::Spawn(e.to_string()))?;
        let pid = child.id();
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let body = input.to_string();
        // Readers run on their own, so the answer is the shell's exit, not the
        // pipes closing: a hook that leaves a background process (`notify … &`)
        // holding stdout must not run into its timeout.
        let out_task = tokio::spawn(read_capped(stdout));
        let err_task = tokio::spawn(read_capped(stderr));
        let work = async {
            let write = async {
                if let Some(mut w) = stdin.take() {
                    // A hook that does not read its stdin is fine (broken pipe).
                    let _ = w.write_all(body.as_bytes()).await;
                    let _ = w.shutdown().await;
                }
            };
            let (_, status) = tokio::join!(write, child.wait());
            status
        };
        let timeout_ms = hook.timeout.as_millis() as u64;
        let status = match tokio::time::timeout(hook.timeout, work).await {
            Ok(r) => r,
            Err(_) => {
                kill_group(pid);
                out_task.abort();
                err_task.abort();
                return Err(HookFailure::Timeout(timeout_ms));
            }
        };
        // The group may outlive `sh` (background children): end it, which closes
        // the pipes; what the shell wrote is still in them for the readers.
        kill_group(pid);
        let collect = async { (out_task.await, err_task.await) };
        let (out, err) = match tokio::time::timeout(PIPE_GRACE, collect).await {
            Ok((o, e)) => (o.unwrap_or_default(), e.unwrap_or_default()),
            Err(_) => (Vec::new(), Vec::new()),
        };
        let status = status.map_err(|e| HookFailure::Spawn(e.to_string()))?;
        use std::os::unix::process::ExitStatusExt;
        interpret(
            status.code(),
            status.signal(),
            &String::from_utf8_lossy(&out),
            &String::from_utf8_lossy(&err),
        )
    }
}

/// Says once per process that hooks see the host's processes.
fn warn_shared_proc() {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::SeqCst) {
        tracing::warn!(
            "hooks run without a PID namespace here: they can read claw's environment \
             through /proc/$PPID/environ"
        );
    }
}

/// Kills the process group led by `pid` (the hook was started as its leader).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: killpg only sends a signal; the group id is the one the child
        // was started with (`process_group(0)`), and a stale id fails with ESRCH.
        #[allow(unsafe_code)]
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
    }
}

/// Reads everything, keeping the first [`OUTPUT_CAP`] bytes.
/// How long the output readers may take once the hook's group is gone.
const PIPE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>) -> Vec<u8> {
    let mut kept = Vec::new();
    let Some(mut r) = reader else { return kept };
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs of a `user_prompt` event "hi" in session "s".
    async fn prompt_hi(hooks: &Hooks) -> Vec<HookRun> {
        let event = HookEvent::UserPrompt {
            prompt: "hi".into(),
        };
        hooks.run(event, "s").await.0
    }

    #[test]
    fn empty_output_and_exit_zero_is_no_opinion() {
        assert_eq!(
            interpret(Some(0), None, "  \n", ""),
            Ok(HookAnswer::NoOpinion)
        );
        assert_eq!(
            interpret(Some(0), None, "{}", ""),
            Ok(HookAnswer::NoOpinion)
        );
    }

    #[test]
    fn answers_are_parsed() {
        assert_eq!(
            interpret(
                Some(0),
                None,
                r#"{"decision":"block","reason":"no rm"}"#,
                ""
            ),
            Ok(HookAnswer::Block("no rm".into()))
        );
        assert_eq!(
            interpret(Some(0), None, r#"{"arguments":{"command":"ls"}}"#, ""),
            Ok(HookAnswer::Rewrite(json!({"command": "ls"})))
        );
        assert_eq!(
            interpret(Some(0), None, r#"{"context":"it is Tuesday"}"#, ""),
            Ok(HookAnswer::Context("it is Tuesday".into()))
        );
        assert_eq!(
            interpret(Some(2), None, "", "not in prod\n"),
            Ok(HookAnswer::Block("not in prod".into()))
        );
    }

    #[test]
    fn failures_are_typed() {
        assert!(matches!(
            interpret(Some(0), None, "nope", ""),
            Err(HookFailure::InvalidJson(_))
        ));
        assert!(matches!(
            interpret(Some(0), None, r#"{"arguments":"x"}"#, ""),
            Err(HookFailure::InvalidJson(_))
        ));
        assert_eq!(
            interpret(Some(1), None, "", "boom\nmore"),
            Err(HookFailure::Exit {
                code: 1,
                stderr: "boom".into()
            })
        );
        assert_eq!(
            interpret(None, Some(9), "", ""),
            Err(HookFailure::Signal(9))
        );
    }

    #[test]
    fn config_keys_are_the_contract() {
        let c: HooksConfig = serde_json::from_value(json!({
            "before_tool_call": [{"match": "exec|write_file", "command": "x", "timeout_ms": 100, "env": ["A"]}],
            "agent_end": [{"command": "y"}]
        }))
        .expect("parses");
        assert_eq!(
            c.before_tool_call[0].matcher.as_deref(),
            Some("exec|write_file")
        );
        assert_eq!(c.before_tool_call[0].timeout_ms, Some(100));
        assert!(serde_json::from_value::<HooksConfig>(json!({"on_boot": []})).is_err());
        let bad = HooksConfig {
            before_tool_call: vec![HookSpec {
                matcher: Some("(".into()),
                command: "x".into(),
                timeout_ms: None,
                env: vec![],
            }],
            ..Default::default()
        };
        assert!(matches!(
            Hooks::new(&bad, PathBuf::from("/"), &BTreeMap::new()),
            Err(HookConfigError::BadRegex { index: 0, .. })
        ));
    }

    #[tokio::test]
    async fn match_is_anchored_and_rewrites_chain() {
        let dir = std::env::temp_dir();
        let config: HooksConfig = serde_json::from_value(json!({
            "before_tool_call": [
                {"match": "exec", "command": "echo '{\"arguments\":{\"command\":\"ls\"}}'"},
                {"match": "exe", "command": "echo '{\"decision\":\"block\"}'"}
            ]
        }))
        .expect("parses");
        let hooks = Hooks::new(&config, dir, &std::env::vars().collect()).expect("compiles");
        let (runs, ev) = hooks
            .run(
                HookEvent::BeforeToolCall {
                    tool: "exec".into(),
                    arguments: r#"{"command":"rm -rf x"}"#.into(),
                },
                "s",
            )
            .await;
        assert_eq!(runs.len(), 1, "`exe` must not match `exec`");
        assert_eq!(
            ev,
            HookEvent::BeforeToolCall {
                tool: "exec".into(),
                arguments: r#"{"command":"ls"}"#.into()
            }
        );
    }

    #[tokio::test]
    async fn mcp_tools_are_matched_like_any_tool() {
        let config: HooksConfig = serde_json::from_value(json!({
            "before_tool_call": [{"match": "mcp__files__.*", "command": "exit 2"}]
        }))
        .expect("parses");
        let hooks = Hooks::new(&config, std::env::temp_dir(), &std::env::vars().collect())
            .expect("compiles");
        let call = |tool: &str| HookEvent::BeforeToolCall {
            tool: tool.into(),
            arguments: "{}".into(),
        };
        let (runs, _) = hooks.run(call("mcp__files__read"), "s").await;
        assert!(matches!(
            runs[..],
            [HookRun {
                result: Ok(HookAnswer::Block(_)),
                ..
            }]
        ));
        let (runs, _) = hooks.run(call("mcp__web__fetch"), "s").await;
        assert!(runs.is_empty());
    }

    #[tokio::test]
    async fn timeout_kills_and_env_is_scrubbed() {
        let dir = std::env::temp_dir();
        let config: HooksConfig = serde_json::from_value(json!({
            "user_prompt": [
                {"command": "sleep 5", "timeout_ms": 200},
                {"command": "printf '{\"context\":\"%s|%s\"}' \"$CLAW_T_SECRET\" \"$CLAW_T_OK\"", "env": ["CLAW_T_OK"]}
            ]
        }))
        .expect("parses");
        let env = [("CLAW_T_SECRET", "s3cret"), ("CLAW_T_OK", "fine")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
        let hooks = Hooks::new(&config, dir, &env).expect("compiles");
        let started = std::time::Instant::now();
        let runs = prompt_hi(&hooks).await;
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(runs[0].result, Err(HookFailure::Timeout(200)));
        assert_eq!(runs[1].result, Ok(HookAnswer::Context("|fine".into())));
    }

    #[tokio::test]
    async fn a_background_process_holding_the_pipes_does_not_time_the_hook_out() {
        let config: HooksConfig = serde_json::from_value(json!({
            "user_prompt": [{
                "command": "sleep 30 & printf '{\"context\":\"answered\"}'",
                "timeout_ms": 5000
            }]
        }))
        .expect("parses");
        let hooks = Hooks::new(&config, std::env::temp_dir(), &BTreeMap::new()).expect("compiles");
        let started = std::time::Instant::now();
        let runs = prompt_hi(&hooks).await;
        assert_eq!(runs[0].result, Ok(HookAnswer::Context("answered".into())));
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "waited for the background process: {:?}",
            started.elapsed()
        );
    }
}
