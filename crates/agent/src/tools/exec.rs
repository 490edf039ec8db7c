//! The `exec` tool: `sh -c COMMAND` in the workspace, in its own process group,
//! with a deny list for destructive commands, a timeout that kills the whole
//! group, and head+tail truncation of long output.
//!
//! Invariant: exec never leaves processes behind — on timeout, on cancellation
//! (the future dropped) and after the shell exits, the command's process group is
//! killed (and, when the sandbox has a pids cgroup, everything in that cgroup).
//! The deny list is a guard-rail against model mistakes, not a sandbox: it is
//! the first filter; the command itself then runs confined by
//! [`super::sandbox`] (Landlock, namespaces, rlimits) unless `exec.sandbox` is
//! off. Where the sandbox is unavailable, commands run unconfined, the first
//! outcome says so, and the registry asks for confirmation before each one.
//!
//! Deny-list decisions: commands are checked by *command word* (after `sudo`,
//! `env`, `nohup`, `timeout`, … and `VAR=value` prefixes), in every segment split
//! at `;`, `&&`, `||`, `|`, `&`, newlines, `(`/`)`, `$( )`, backticks and braces;
//! quoted text is checked as a command only when it is the argument of `-c` or
//! `eval` (`sh -c "rm -rf /"`). So `echo shutdown-notes`, `echo reboot`, `grep -r
//! mkfs docs/`, `rm -rf ./build` and `rm -rf /tmp/x` run, while `rm -rf /`,
//! `rm -fr /*`, `rm -rf ~`, `rm -r /usr` (any top-level directory) and `rm
//! --no-preserve-root` are refused. `dd` is refused whenever it has `if=`;
//! redirections/`of=` to `/dev/*` are refused except `/dev/null`, `/dev/zero`,
//! `/dev/stdout`, `/dev/stderr`, `/dev/tty` and `/dev/fd/*`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use regex::Regex;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncReadExt;

use super::sandbox::{self, SandboxError};
use super::{ToolContext, ToolError};

/// Output longer than this (in characters, per stream) is cut in the middle.
pub const MAX_OUTPUT_CHARS: usize = 10_000;
/// Characters kept at each end of cut output.
pub const KEEP_CHARS: usize = 5_000;
/// Bytes of each stream kept in memory at each end while the command runs.
const CAPTURE_BYTES: usize = 32 * 1024;
/// How long to wait for the output pipes to close after the group was killed.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// Arguments of `exec`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecArgs {
    pub command: String,
    /// Seconds; may shorten the configured timeout, never lengthen it.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecOutcome {
    pub command: String,
    /// Exit status; `None` when killed by a signal.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// stdout or stderr was cut in the middle.
    pub truncated: bool,
    pub duration_ms: u64,
    /// The command ran inside the sandbox.
    #[serde(default)]
    pub sandboxed: bool,
    /// A one-time note for the user and the model (the sandbox is unavailable,
    /// or commands can see the host's processes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    /// Why the sandbox killed the command (its total write quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<String>,
}

impl ExecOutcome {
    pub fn render(&self) -> String {
        let mut out = format!("$ {}\n", self.command);
        if let Some(notice) = &self.notice {
            out.push_str(&format!("note: {notice}\n"));
        }
        if let Some(why) = &self.killed {
            out.push_str(&format!("{why}\n"));
        } else if self.timed_out {
            out.push_str(&format!(
                "timed out after {:.1} s; the process group was killed\n",
                self.duration_ms as f64 / 1000.0
            ));
        } else if let Some(code) = self.exit_code {
            out.push_str(&format!("exit code: {code}\n"));
        } else if let Some(sig) = self.signal {
            out.push_str(&format!("killed by signal {sig}\n"));
        }
        if self.stdout.is_empty() && self.stderr.is_empty() {
            out.push_str("(no output)");
        }
        if !self.stdout.is_empty() {
            out.push_str("stdout:\n");
            out.push_str(&self.stdout);
            if !self.stdout.ends_with('\n') {
                out.push('\n');
            }
        }
        if !self.stderr.is_empty() {
            out.push_str("stderr:\n");
            out.push_str(&self.stderr);
        }
        out.trim_end().to_string()
    }
}

/// Why a command is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    RecursiveDeleteOfRoot,
    Mkfs,
    DdInput,
    ForkBomb,
    RawDeviceWrite,
    RecursivePermissionsOfRoot,
    PowerState,
}

impl std::fmt::Display for DenyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DenyReason::RecursiveDeleteOfRoot => {
                "recursive delete of /, a top-level directory or the home directory"
            }
            DenyReason::Mkfs => "creating a file system",
            DenyReason::DdInput => "dd with if=",
            DenyReason::ForkBomb => "fork bomb",
            DenyReason::RawDeviceWrite => "write to a device under /dev",
            DenyReason::RecursivePermissionsOfRoot => {
                "recursive permission/ownership change of / or a top-level directory"
            }
            DenyReason::PowerState => "shutdown/reboot/halt/poweroff",
        })
    }
}

/// Checks `command` against the deny list. Pure.
pub fn check_command(command: &str) -> Result<(), DenyReason> {
    if is_fork_bomb(command) {
        return Err(DenyReason::ForkBomb);
    }
    if writes_raw_device(command) {
        return Err(DenyReason::RawDeviceWrite);
    }
    for words in segments(command) {
        check_segment(&words)?;
    }
    Ok(())
}

fn is_fork_bomb(command: &str) -> bool {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r"([^\s(){};|&]+)\(\)\{([^}]*)\}").unwrap_or_else(|_| unreachable!())
    });
    let compact: String = command.chars().filter(|c| !c.is_whitespace()).collect();
    re.captures_iter(&compact).any(|c| {
        let name = &c[1];
        let body = &c[2];
        body.contains(&format!("{name}|{name}"))
    })
}

fn writes_raw_device(command: &str) -> bool {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(r#"(?:>\|?|\bof=)\s*["']?/dev/([^\s;|&)"']*)"#)
            .unwrap_or_else(|_| unreachable!())
    });
    re.captures_iter(command).any(|c| {
        let dev = &c[1];
        !(matches!(dev, "null" | "zero" | "stdout" | "stderr" | "tty") || dev.starts_with("fd/"))
    })
}

/// Splits a command line into simple commands (lists of words), shell-like:
/// see the module doc for what separates commands and how quotes are treated.
fn segments(command: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut chars = command.chars().peekable();
    fn flush_word(cur: &mut String, words: &mut Vec<String>) {
        if !cur.is_empty() {
            words.push(std::mem::take(cur));
        }
    }
    fn flush_seg(words: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if !words.is_empty() {
            out.push(std::mem::take(words));
        }
    }
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let mut quoted = String::new();
                while let Some(q) = chars.next() {
                    if q == c {
                        break;
                    }
                    if q == '\\' && c == '"' {
                        if let Some(n) = chars.next() {
                            quoted.push(n);
                        }
                        continue;
                    }
                    quoted.push(q);
                }
                let runs_as_command = cur.is_empty()
                    && words
                        .last()
                        .is_some_and(|w| w == "-c" || w == "eval" || w.ends_with("-c"));
                if runs_as_command {
                    out.extend(segments(&quoted));
                }
                cur.push_str(&quoted);
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '$' if chars.peek() == Some(&'{') => {
                cur.push('$');
                for n in chars.by_ref() {
                    cur.push(n);
                    if n == '}' {
                        break;
                    }
                }
            }
            ';' | '&' | '|' | '\n' | '(' | ')' | '`' | '{' | '}' => {
                flush_word(&mut cur, &mut words);
                flush_seg(&mut words, &mut out);
            }
            '>' | '<' => {
                flush_word(&mut cur, &mut words);
                words.push(c.to_string());
            }
            c if c.is_whitespace() => flush_word(&mut cur, &mut words),
            c => cur.push(c),
        }
    }
    flush_word(&mut cur, &mut words);
    flush_seg(&mut words, &mut out);
    out
}

/// Skips `VAR=value` prefixes and wrapper commands; returns the command word
/// (basename) and its arguments.
fn command_and_args(words: &[String]) -> Option<(String, &[String])> {
    const WRAPPERS: &[&str] = &[
        "sudo", "doas", "env", "nohup", "exec", "time", "nice", "ionice", "command", "builtin",
        "stdbuf", "timeout", "xargs", "busybox",
    ];
    let mut i = 0;
    let mut after_timeout = false;
    while i < words.len() {
        let w = &words[i];
        let is_assignment = w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_')
        });
        let base = w.rsplit('/').next().unwrap_or(w);
        if is_assignment || w.starts_with('-') {
            i += 1;
        } else if WRAPPERS.contains(&base) {
            after_timeout = base == "timeout";
            i += 1;
        } else if after_timeout {
            // timeout's duration argument.
            after_timeout = false;
            i += 1;
        } else {
            return Some((base.to_string(), &words[i + 1..]));
        }
    }
    None
}

fn split_flags(args: &[String]) -> (Vec<&str>, Vec<&str>) {
    let mut flags = Vec::new();
    let mut targets = Vec::new();
    let mut end_of_flags = false;
    for a in args {
        if a == ">" || a == "<" {
            break;
        }
        if !end_of_flags && a == "--" {
            end_of_flags = true;
        } else if !end_of_flags && a.starts_with('-') && a.len() > 1 {
            flags.push(a.as_str());
        } else {
            targets.push(a.as_str());
        }
    }
    (flags, targets)
}

fn has_recursive_flag(flags: &[&str]) -> bool {
    flags.iter().any(|f| {
        *f == "--recursive"
            || (!f.starts_with("--") && f[1..].chars().any(|c| c == 'r' || c == 'R'))
    })
}

/// `/`, `/*`, `/.`, a top-level directory (`/usr`, `/etc/`), `~`, `~/`, `~/*`, `$HOME`…
fn is_critical_target(target: &str) -> bool {
    let t = target.trim_end_matches('*').trim_end_matches("/.");
    let home = ["~", "$HOME", "${HOME}"];
    if home
        .iter()
        .any(|h| t == *h || t.strip_prefix(h) == Some("/"))
    {
        return true;
    }
    if !target.starts_with('/') {
        return false;
    }
    // Lexically resolve `.` and `..`: `/tmp/..` is `/`.
    let mut parts: Vec<&str> = Vec::new();
    for p in target.split('/') {
        match p {
            "" | "." | "*" => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.len() <= 1
}

fn check_segment(words: &[String]) -> Result<(), DenyReason> {
    let Some((cmd, args)) = command_and_args(words) else {
        return Ok(());
    };
    let (flags, targets) = split_flags(args);
    let recursive_on_critical =
        || has_recursive_flag(&flags) && targets.iter().any(|t| is_critical_target(t));
    match cmd.as_str() {
        "rm" if flags.contains(&"--no-preserve-root") || recursive_on_critical() => {
            Err(DenyReason::RecursiveDeleteOfRoot)
        }
        "chmod" | "chown" | "chgrp" if recursive_on_critical() => {
            Err(DenyReason::RecursivePermissionsOfRoot)
        }
        "dd" if args.iter().any(|a| a.starts_with("if=")) => Err(DenyReason::DdInput),
        c if c.starts_with("mkfs") || c == "mke2fs" || c == "wipefs" => Err(DenyReason::Mkfs),
        "shutdown" | "reboot" | "halt" | "poweroff" => Err(DenyReason::PowerState),
        "systemctl"
            if targets
                .iter()
                .any(|t| matches!(*t, "poweroff" | "reboot" | "halt" | "kexec")) =>
        {
            Err(DenyReason::PowerState)
        }
        "init" | "telinit" if targets.iter().any(|t| matches!(*t, "0" | "6")) => {
            Err(DenyReason::PowerState)
        }
        _ => Ok(()),
    }
}

/// Cuts `text` longer than `max` characters to its first and last `keep`
/// characters with a marker saying how many were cut. Char-boundary safe.
pub fn truncate_middle(text: &str, max: usize, keep: usize) -> (String, bool) {
    let total = text.chars().count();
    if total <= max {
        return (text.to_string(), false);
    }
    let head: String = text.chars().take(keep).collect();
    let tail: String = text.chars().skip(total - keep).collect();
    let omitted = total - 2 * keep;
    (
        format!("{head}\n[... {omitted} characters omitted ...]\n{tail}"),
        true,
    )
}

/// First and last bytes of a stream, and how many bytes were dropped between.
#[derive(Debug, Default)]
struct Capture {
    head: Vec<u8>,
    tail: Vec<u8>,
    dropped: u64,
}

impl Capture {
    fn push(&mut self, mut data: &[u8]) {
        if self.head.len() < CAPTURE_BYTES {
            let n = (CAPTURE_BYTES - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        self.tail.extend_from_slice(data);
        if self.tail.len() > 2 * CAPTURE_BYTES {
            let cut = self.tail.len() - CAPTURE_BYTES;
            self.tail.drain(..cut);
            self.dropped += cut as u64;
        }
    }

    /// The captured text, cut to `MAX_OUTPUT_CHARS` with a marker.
    fn finish(&self) -> (String, bool) {
        if self.dropped == 0 {
            let mut all = self.head.clone();
            all.extend_from_slice(&self.tail);
            return truncate_middle(&String::from_utf8_lossy(&all), MAX_OUTPUT_CHARS, KEEP_CHARS);
        }
        let head = String::from_utf8_lossy(&self.head);
        let tail = String::from_utf8_lossy(&self.tail);
        let tail = tail.trim_start_matches('\u{FFFD}');
        let head_chars = head.chars().count();
        let tail_chars = tail.chars().count();
        let head_kept: String = head.chars().take(KEEP_CHARS).collect();
        let tail_kept: String = tail
            .chars()
            .skip(tail_chars.saturating_sub(KEEP_CHARS))
            .collect();
        let omitted_chars =
            head_chars.saturating_sub(KEEP_CHARS) + tail_chars.saturating_sub(KEEP_CHARS);
        (
            format!(
                "{head_kept}\n[... {omitted_chars} characters and {} further bytes omitted ...]\n{tail_kept}",
                self.dropped
            ),
            true,
        )
    }
}

/// Kills the process group when dropped (timeout, cancellation, normal end).
struct GroupGuard {
    pgid: i32,
}

impl GroupGuard {
    fn kill(&self) {
        // SAFETY: killpg has no memory-safety preconditions; errors (ESRCH when
        // the group is already gone) are ignored on purpose.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn read_stream<R: tokio::io::AsyncRead + Unpin>(mut r: R, sink: Arc<Mutex<Capture>>) {
    let mut buf = vec![0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if let Ok(mut c) = sink.lock() {
                    c.push(&buf[..n]);
                }
            }
        }
    }
}

/// True when commands must be confirmed because the sandbox is configured on
/// but this machine cannot provide it (no Landlock), or cannot keep commands
/// out of claw's state directory (it lies inside the workspace, and there is
/// no mount namespace to hide it).
pub fn unconfined_fallback(ctx: &ToolContext) -> bool {
    ctx.sandbox.enabled
        && (!sandbox::status().active() || !ctx.sandbox.hides_protected_paths(&ctx.workspace))
}

/// The notice for the first unconfined command of this process.
fn fallback_notice() -> Option<String> {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let warning = sandbox::status().warning()?;
    (!SAID.swap(true, std::sync::atomic::Ordering::SeqCst)).then_some(warning)
}

/// The notice for the first sandboxed command of this process that can see
/// the host's processes (no PID namespace: namespaces off or unavailable).
fn host_processes_notice(policy: &sandbox::SandboxPolicy) -> Option<String> {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if policy.namespaces && sandbox::status().hides_host_processes() {
        return None;
    }
    (!SAID.swap(true, std::sync::atomic::Ordering::SeqCst)).then(|| {
        "commands run without a PID namespace here: they can see every process of this \
         machine and its command line (`ls /proc`, `ps`)"
            .to_string()
    })
}

fn sandbox_error(e: SandboxError) -> ToolError {
    ToolError::Spawn {
        message: format!("exec sandbox: {e}"),
    }
}

/// Runs the command (after the deny list) and waits for it within the timeout.
pub async fn run(ctx: &ToolContext, args: &ExecArgs) -> Result<ExecOutcome, ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::InvalidArguments {
            tool: "exec".into(),
            message: "`command` must not be empty".into(),
        });
    }
    check_command(&args.command).map_err(|reason| ToolError::CommandDenied {
        command: args.command.clone(),
        reason: reason.to_string(),
    })?;
    let timeout = args
        .timeout_secs
        .map(|s| Duration::from_secs(s.max(1)).min(ctx.exec_timeout))
        .unwrap_or(ctx.exec_timeout);
    let started = Instant::now();
    let confine = ctx.sandbox.enabled && sandbox::status().active();
    let notice = if ctx.sandbox.enabled && !confine {
        fallback_notice()
    } else if confine {
        host_processes_notice(&ctx.sandbox)
    } else {
        None
    };
    let prepared = if confine {
        let policy = ctx.sandbox.clone();
        let workspace = ctx.workspace.clone();
        let prepared = tokio::task::spawn_blocking(move || {
            sandbox::prepare(&policy, &workspace, sandbox::status())
        })
        .await
        .map_err(|e| ToolError::Spawn {
            message: format!("exec sandbox: the preparation task failed: {e}"),
        })?
        .map_err(sandbox_error)?;
        Some(prepared)
    } else {
        None
    };
    let mut command = tokio::process::Command::new("sh");
    command.env_clear();
    for (name, value) in claw_base::child_env::from_process(&ctx.sandbox.pass_env) {
        command.env(name, value);
    }
    command
        .arg("-c")
        .arg(&args.command)
        .current_dir(&ctx.workspace)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(p) = &prepared {
        p.configure(&mut command);
    }
    let spawned = command.spawn();
    // The hook (and its copy of the plan) is not needed once the child exists.
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let e = match &prepared {
                Some(p) => p.spawn_error(e).map_err(sandbox_error)?,
                None => e,
            };
            return Err(ToolError::Spawn {
                message: format!("sh -c in {}: {e}", ctx.workspace.display()),
            });
        }
    };
    let pgid = child
        .id()
        .map(|id| id as i32)
        .ok_or_else(|| ToolError::Spawn {
            message: "the shell exited before it could be tracked".into(),
        })?;
    let guard = GroupGuard { pgid };
    let writes = prepared.as_ref().and_then(|p| p.watch_writes(pgid as u32));
    let out = Arc::new(Mutex::new(Capture::default()));
    let err = Arc::new(Mutex::new(Capture::default()));
    let mut readers = Vec::new();
    if let Some(s) = child.stdout.take() {
        readers.push(tokio::spawn(read_stream(s, out.clone())));
    }
    if let Some(s) = child.stderr.take() {
        readers.push(tokio::spawn(read_stream(s, err.clone())));
    }
    let (status, timed_out) = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(status) => (status.ok(), false),
        Err(_) => {
            guard.kill();
            (child.wait().await.ok(), true)
        }
    };
    // Background jobs left by the command would hold the pipes open: end them.
    guard.kill();
    let grace = tokio::time::sleep(PIPE_GRACE);
    tokio::pin!(grace);
    for mut reader in readers {
        tokio::select! {
            _ = &mut reader => {}
            _ = &mut grace => reader.abort(),
        }
    }
    let report = match writes {
        Some(w) => tokio::task::spawn_blocking(move || w.finish())
            .await
            .unwrap_or_default(),
        None => sandbox::WriteReport::default(),
    };
    if let Some(p) = prepared {
        // Empties and removes the command's cgroup (setsid escapees included).
        let _ = tokio::task::spawn_blocking(move || p.finish()).await;
    }
    use std::os::unix::process::ExitStatusExt;
    let (stdout, t1) = out.lock().map(|c| c.finish()).unwrap_or_default();
    let (stderr, t2) = err.lock().map(|c| c.finish()).unwrap_or_default();
    Ok(ExecOutcome {
        command: args.command.clone(),
        exit_code: if timed_out {
            None
        } else {
            status.and_then(|s| s.code())
        },
        signal: status.and_then(|s| s.signal()),
        stdout,
        stderr,
        timed_out,
        truncated: t1 || t2,
        duration_ms: started.elapsed().as_millis() as u64,
        sandboxed: confine,
        notice,
        killed: report.message(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denies_destructive_commands() {
        let denied = [
            ("rm -rf /", DenyReason::RecursiveDeleteOfRoot),
            ("rm -fr /", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf /*", DenyReason::RecursiveDeleteOfRoot),
            ("rm -r -f /", DenyReason::RecursiveDeleteOfRoot),
            (
                "rm --recursive --force /",
                DenyReason::RecursiveDeleteOfRoot,
            ),
            ("rm -rf ~", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf ~/", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf $HOME", DenyReason::RecursiveDeleteOfRoot),
            ("rm -Rf /usr", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf //", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf /.", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf \"/\"", DenyReason::RecursiveDeleteOfRoot),
            ("sudo rm -rf /", DenyReason::RecursiveDeleteOfRoot),
            ("/bin/rm -rf /", DenyReason::RecursiveDeleteOfRoot),
            ("cd /tmp && rm -rf /", DenyReason::RecursiveDeleteOfRoot),
            ("echo hi; rm -rf / ", DenyReason::RecursiveDeleteOfRoot),
            ("echo $(rm -rf /)", DenyReason::RecursiveDeleteOfRoot),
            ("sh -c 'rm -rf /'", DenyReason::RecursiveDeleteOfRoot),
            (
                "bash -c \"sudo rm -rf ~\"",
                DenyReason::RecursiveDeleteOfRoot,
            ),
            (
                "rm --no-preserve-root -r x",
                DenyReason::RecursiveDeleteOfRoot,
            ),
            ("FOO=1 rm -rf /", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf -- /", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf \"$HOME\"", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf ~/*", DenyReason::RecursiveDeleteOfRoot),
            ("rm -rf /tmp/..", DenyReason::RecursiveDeleteOfRoot),
            (
                "rm -rf / --no-preserve-root",
                DenyReason::RecursiveDeleteOfRoot,
            ),
            ("timeout 5 rm -rf /", DenyReason::RecursiveDeleteOfRoot),
            ("mkfs.ext4 /dev/sda1", DenyReason::Mkfs),
            ("sudo mkfs -t ext4 /dev/sdb", DenyReason::Mkfs),
            (
                "dd if=/dev/zero of=disk.img bs=1M count=1",
                DenyReason::DdInput,
            ),
            ("dd if=/dev/urandom of=/dev/sda", DenyReason::RawDeviceWrite),
            (":(){ :|:& };:", DenyReason::ForkBomb),
            (":(){:|:&};:", DenyReason::ForkBomb),
            ("bomb() { bomb | bomb & }; bomb", DenyReason::ForkBomb),
            ("echo x > /dev/sda", DenyReason::RawDeviceWrite),
            ("cat img >/dev/nvme0n1", DenyReason::RawDeviceWrite),
            ("dd of=/dev/sdb", DenyReason::RawDeviceWrite),
            ("chmod -R 777 /", DenyReason::RecursivePermissionsOfRoot),
            ("chown -R me /", DenyReason::RecursivePermissionsOfRoot),
            ("shutdown -h now", DenyReason::PowerState),
            ("sudo reboot", DenyReason::PowerState),
            ("halt", DenyReason::PowerState),
            ("poweroff", DenyReason::PowerState),
            ("systemctl reboot", DenyReason::PowerState),
            ("echo ok && shutdown now", DenyReason::PowerState),
        ];
        for (cmd, reason) in denied {
            assert_eq!(check_command(cmd), Err(reason), "{cmd}");
        }
    }

    #[test]
    fn allows_ordinary_commands() {
        let allowed = [
            "rm -rf ./build",
            "rm -rf build/ target",
            "rm -rf /tmp/claw-test",
            "rm -f /tmp/x.txt",
            "rm -r ~/project/build",
            "echo shutdown-notes",
            "echo reboot",
            "echo 'rm -rf /'",
            "git commit -m \"halt the release\"",
            "grep -rn mkfs docs/",
            "ls -la /",
            "cargo test 2>&1 | tail -n 20",
            "cmd > /dev/null 2>&1",
            "cat /dev/null > out.txt",
            "echo hi >&2",
            "chmod -R 755 ./scripts",
            "chmod 644 /tmp/x",
            "f() { echo hi; }; f",
            "find . -name '*.rs' | xargs wc -l",
            "ddrescue --help",
            "systemctl status nginx",
        ];
        for cmd in allowed {
            assert_eq!(check_command(cmd), Ok(()), "{cmd}");
        }
    }

    #[test]
    fn truncation_keeps_head_and_tail_char_safe() {
        let text: String = "é".repeat(6_000) + &"ß".repeat(6_000);
        let (out, cut) = truncate_middle(&text, MAX_OUTPUT_CHARS, KEEP_CHARS);
        assert!(cut);
        assert!(out.starts_with(&"é".repeat(5_000)));
        assert!(out.ends_with(&"ß".repeat(5_000)));
        assert!(out.contains("[... 2000 characters omitted ...]"));
        let (same, cut) = truncate_middle("short", MAX_OUTPUT_CHARS, KEEP_CHARS);
        assert_eq!((same.as_str(), cut), ("short", false));
        let exact = "a".repeat(MAX_OUTPUT_CHARS);
        assert!(!truncate_middle(&exact, MAX_OUTPUT_CHARS, KEEP_CHARS).1);
    }

    #[test]
    fn capture_drops_middle_of_huge_output() {
        let mut c = Capture::default();
        for i in 0..100 {
            c.push(format!("{i:07}\n").repeat(1000).as_bytes());
        }
        let (text, cut) = c.finish();
        assert!(cut);
        assert!(text.starts_with("0000000\n"));
        assert!(text.ends_with("0000099\n"));
        assert!(text.contains("further bytes omitted"));
        assert!(text.chars().count() < 2 * KEEP_CHARS + 200);
    }
}
