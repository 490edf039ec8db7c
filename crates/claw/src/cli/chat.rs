//! The assistant's front end: `claw` (a REPL with line editing and a history file
//! in the state dir) and `claw -m "…"` (answer once; non-zero exit on failure).
//! Answer text streams to stdout; tool calls, retries and notices are short status
//! lines on stderr. Ctrl-C or `/stop` cancels the running turn and keeps the process.
//!
//! Side effects (write/edit/exec, `web_fetch` to a host not allowed yet) are
//! confirmed by default: `y` once, `a` always for this session, anything else
//! denies. `claw -m` without a terminal refuses them (the model gets the refusal
//! as the call's error, stderr a hint) unless `--yes` or
//! `agent.confirm_side_effects: false` allows them. Through a gateway the
//! questions are the gateway's approval requests, asked the same way and answered
//! with `POST /v1/approvals/{id}` (the REPL reads the answer from its input).

mod gateway_client;
mod repl_watch;

use super::output::Exit;
use crate::config::Settings;
use anyhow::Context;
use claw_agent::commands::{self, Command, Line, Surface};
use claw_agent::core::TurnEnd;
use claw_agent::driver::{ConfirmRequest, Driver, DriverOptions, Ui};
use claw_agent::memory_backend::EngineBackend;
use claw_agent::provider::{ProviderChain, RetryPolicy};
use claw_agent::settings::{self as agent_settings, Overrides};
use claw_agent::subagents::{ChildKit, Subagents};
use claw_agent::tools::{Answer, ToolRegistry};
use claw_memory_api::SyncReport;
use std::collections::VecDeque;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// Default session key.
pub const DEFAULT_SESSION: &str = "cli:default";

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// Answer one message and exit (non-zero exit status on failure).
    #[arg(short = 'm', long = "message", value_name = "TEXT")]
    pub message: Option<String>,
    /// Session key; the transcript is workspace/sessions/<key>.jsonl (`:` and other
    /// unsafe characters become `_`).
    #[arg(long, value_name = "KEY", default_value = DEFAULT_SESSION)]
    pub session: String,
    /// Model of the first provider profile (overrides config and CLAW_LLM_MODEL).
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// Provider profile to try first (by name, from agent.profiles).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Run side effects (write/edit/exec, web_fetch to new hosts) without asking.
    /// Without it, `claw -m` with no terminal refuses them.
    #[arg(long)]
    pub yes: bool,
    /// Run in this process even when a gateway runs for the workspace.
    #[arg(long)]
    pub local: bool,
}

/// What one REPL line asks the driver to do.
enum Job {
    Message(String),
    Remember,
    Compact,
}

/// The waiting indicator: a spinner on stderr (only when it is a terminal)
/// from the start of a turn until the first token of the answer.
struct Waiting {
    /// Whether the spinner runs, and whether its line is drawn.
    state: Mutex<(bool, bool)>,
}

impl Waiting {
    const FRAMES: [&'static str; 4] = ["·  ", "·· ", "···", " ··"];

    fn new() -> Arc<Waiting> {
        Arc::new(Waiting {
            state: Mutex::new((false, false)),
        })
    }

    /// Start the spinner thread (a no-op when it already runs).
    fn start(self: &Arc<Self>) {
        {
            let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if st.0 {
                return;
            }
            st.0 = true;
        }
        let me = self.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            for frame in Self::FRAMES.iter().cycle() {
                std::thread::sleep(std::time::Duration::from_millis(150));
                let mut st = me.state.lock().unwrap_or_else(|p| p.into_inner());
                if !st.0 {
                    return;
                }
                eprint!(
                    "\r\x1b[2m{frame} waiting for the model ({} s)\x1b[0m",
                    started.elapsed().as_secs()
                );
                let _ = std::io::stderr().flush();
                st.1 = true;
            }
        });
    }

    /// Clear the spinner's line (before other output); `stop` ends it.
    fn clear(&self, stop: bool) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.1 {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
            st.1 = false;
        }
        if stop {
            st.0 = false;
        }
    }
}

/// Terminal UI: text on stdout, status on stderr, confirmations from the REPL
/// reader (or directly from the terminal in `-m` mode).
struct TerminalUi {
    color: bool,
    /// In the REPL, confirmation answers arrive through this channel.
    answers: Option<Mutex<std::sync::mpsc::Receiver<String>>>,
    awaiting_answer: Arc<AtomicBool>,
    /// `--yes` was given (a call still asked about is `exec` without its sandbox).
    yes: bool,
    /// The `--yes` hint was printed (once per run).
    hinted: AtomicBool,
    /// The waiting indicator (drawn only when stderr is a terminal).
    waiting: Arc<Waiting>,
    /// The REPL through a gateway reads its lines from stdin itself: answers
    /// come from there too, terminal or not (as the local REPL's reader does).
    stdin_answers: bool,
}

impl TerminalUi {
    fn new(
        color: bool,
        answers: Option<Mutex<std::sync::mpsc::Receiver<String>>>,
        yes: bool,
    ) -> TerminalUi {
        TerminalUi {
            color,
            answers,
            yes,
            awaiting_answer: Arc::new(AtomicBool::new(false)),
            hinted: AtomicBool::new(false),
            waiting: Waiting::new(),
            stdin_answers: false,
        }
    }

    /// Show the waiting indicator until the first token (stderr a terminal only).
    fn start_waiting(&self) {
        if self.color {
            self.waiting.start();
        }
    }

    fn stop_waiting(&self) {
        self.waiting.clear(true);
    }

    /// One line from the REPL reader or, in `-m` mode, the terminal; `None`
    /// when there is no one to ask.
    fn read_answer(&self) -> Option<String> {
        match &self.answers {
            Some(rx) => {
                self.awaiting_answer.store(true, Ordering::SeqCst);
                let a = rx.lock().ok().and_then(|rx| rx.recv().ok());
                self.awaiting_answer.store(false, Ordering::SeqCst);
                a
            }
            None if self.stdin_answers || std::io::stdin().is_terminal() => {
                let mut s = String::new();
                std::io::stdin().lock().read_line(&mut s).ok().map(|_| s)
            }
            None => None,
        }
    }

    fn has_someone_to_ask(&self) -> bool {
        self.answers.is_some() || self.stdin_answers || std::io::stdin().is_terminal()
    }
}

impl Ui for TerminalUi {
    fn text(&self, delta: &str) {
        self.stop_waiting();
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(super::output::sanitize(delta).as_bytes());
        let _ = out.flush();
    }

    fn end_answer(&self) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }

    fn status(&self, line: &str) {
        // Keep waiting after a status line, on a fresh line.
        self.waiting.clear(false);
        let line = super::output::sanitize(line);
        if self.color {
            eprintln!("\x1b[2m{line}\x1b[0m");
        } else {
            eprintln!("{line}");
        }
    }

    fn confirm(&self, question: &str) -> bool {
        self.stop_waiting();
        if !self.has_someone_to_ask() {
            eprintln!(
                "{} (no terminal to ask: refused)",
                super::output::sanitize(question)
            );
            return false;
        }
        eprint!("{} [y/N] ", super::output::sanitize(question));
        let _ = std::io::stderr().flush();
        matches!(parse_answer(self.read_answer().as_deref()), Answer::Once)
    }

    fn ask(&self, request: &ConfirmRequest) -> Answer {
        self.ask_about(&request.preview, &request.grant.describe())
    }
}

impl TerminalUi {
    /// The question before a gated call (`preview`; "always" allows `always`
    /// for this session), asked the same way for a local turn and for a
    /// gateway's approval request.
    fn ask_about(&self, preview: &str, always: &str) -> Answer {
        self.stop_waiting();
        if !self.has_someone_to_ask() {
            eprintln!(
                "refused {}: it needs confirmation and there is no terminal to ask",
                super::output::sanitize(preview)
            );
            if !self.hinted.swap(true, Ordering::SeqCst) {
                if self.yes {
                    eprintln!(
                        "hint: the exec sandbox is unavailable on this machine, so commands \
                         need confirmation even with --yes: run claw in a terminal, or set \
                         \"exec\": {{\"sandbox\": false}} to run them unconfined"
                    );
                } else {
                    eprintln!(
                        "hint: pass --yes to allow side effects in `claw -m` (or set \
                         \"agent\": {{\"confirm_side_effects\": false}} in the config)"
                    );
                }
            }
            return Answer::Unavailable;
        }
        eprint!(
            "run {}? [y]es once / [a]lways ({} this session) / [N]o ",
            super::output::sanitize(preview),
            super::output::sanitize(always)
        );
        let _ = std::io::stderr().flush();
        parse_answer(self.read_answer().as_deref())
    }
}

/// `y`/`yes` → once, `a`/`always` → always for the session, anything else denies.
fn parse_answer(line: Option<&str>) -> Answer {
    match line.map(|a| a.trim().to_ascii_lowercase()).as_deref() {
        Some("y" | "yes") => Answer::Once,
        Some("a" | "always") => Answer::Always,
        _ => Answer::Deny,
    }
}

/// The session-start sync: a never-indexed workspace is indexed (progress on
/// stderr), else the bounded inline sync runs; never waits for another writer.
async fn sync_memory(memory: Arc<EngineBackend>, ui: &dyn Ui) {
    let report = tokio::task::spawn_blocking(move || memory.sync()).await;
    match report {
        Ok(Ok(SyncReport::Synced {
            reindexed, removed, ..
        })) if !(reindexed.is_empty() && removed.is_empty()) => ui.status(&format!(
            "memory: re-indexed {} changed and removed {} file(s)",
            reindexed.len(),
            removed.len()
        )),
        Ok(Ok(SyncReport::Stale {
            pending, reason, ..
        })) => ui.status(&format!(
            "memory: the index is behind the disk by {pending} file(s) ({reason}); \
             searches answer from it as it is"
        )),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => ui.status(&format!("memory: {}", e.message())),
        Err(e) => ui.status(&format!("memory: the sync task failed: {e}")),
    }
}

/// `claw` / `claw -m`.
pub async fn run(settings: Settings, args: ChatArgs) -> anyhow::Result<Exit> {
    // A running gateway owns the sessions: send the work there (`--model` and
    // `--profile` pick a model the gateway does not run, so they stay local).
    if !args.local
        && args.model.is_none()
        && args.profile.is_none()
        && let Some(client) = crate::app::running_gateway(&settings)
    {
        let s = settings.clone();
        let color = std::io::stderr().is_terminal();
        let a = ChatArgs {
            message: args.message.clone(),
            session: args.session.clone(),
            model: None,
            profile: None,
            yes: args.yes,
            local: false,
        };
        let history = s.state_dir().join("chat_history.txt");
        let clock = s.mem.clock;
        match tokio::task::spawn_blocking(move || via_gateway(&client, a, color, history, clock))
            .await?
        {
            Routed::Done(exit) => return exit,
            // The gateway went away between discovery and connect: run here.
            Routed::Unreachable => {}
        }
    }
    run_local(settings, args).await
}

/// What sending work to the gateway came to.
enum Routed {
    Done(anyhow::Result<Exit>),
    Unreachable,
}

/// One message through the gateway, rendered exactly as a local turn is.
fn gateway_turn(
    client: &claw_gateway::client::Client,
    ui: &TerminalUi,
    session: &str,
    message: &str,
    yes: bool,
) -> Result<Exit, claw_gateway::client::ClientError> {
    use claw_gateway::client::ChatEvent;
    let (end, why) = client.chat(session, message, yes, "cli", |ev| match ev {
        ChatEvent::Text(t) => ui.text(t),
        ChatEvent::EndAnswer => ui.end_answer(),
        ChatEvent::Status(line) => ui.status(line),
        ChatEvent::Tool(t) => {
            let name = t["name"].as_str().unwrap_or("");
            let preview = t["preview"].as_str().unwrap_or("");
            match t["status"].as_str() {
                Some("started") => ui.status(&format!("→ {preview}")),
                Some("error") => ui.status(&format!("  {name} failed: {preview}")),
                _ => {}
            }
        }
        ChatEvent::Approval(a) => {
            // Asked exactly as a local turn asks; the answer goes back to the
            // gateway while its stream waits.
            let preview = a["preview"].as_str().unwrap_or("");
            let always = a["always"].as_str().unwrap_or("");
            let decision = match ui.ask_about(preview, always) {
                Answer::Once => "once",
                Answer::Always => "always",
                Answer::Deny | Answer::Unavailable => "deny",
            };
            if let Err(e) = client.answer_approval(a["id"].as_str().unwrap_or(""), decision) {
                ui.status(&format!("the gateway did not take the answer: {e}"));
            }
        }
        // The gateway's status lines say what an answer or a timeout did.
        ChatEvent::ApprovalResolved(_) | ChatEvent::End { .. } => {}
    })?;
    let why = why.unwrap_or_default();
    Ok(match end.as_str() {
        "answered" => Exit::Ok,
        "max_iterations" => Exit::Error,
        "cancelled" => {
            eprintln!("cancelled");
            Exit::Error
        }
        "loop_broken" => {
            eprintln!("stopped: {why}");
            Exit::Error
        }
        _ => {
            eprintln!("error: {why}");
            Exit::Error
        }
    })
}

fn via_gateway(
    client: &claw_gateway::client::Client,
    args: ChatArgs,
    color: bool,
    history: std::path::PathBuf,
    clock: claw_memory_api::clock::Clock,
) -> Routed {
    use claw_gateway::client::ClientError;
    let mut ui = TerminalUi::new(color, None, args.yes);
    let routed = |r: Result<Exit, ClientError>| match r {
        // Unreachable, shutting down or without an LLM: the local run says what it says.
        Err(ClientError::Connect { .. }) | Err(ClientError::Status { status: 503, .. }) => {
            Routed::Unreachable
        }
        Err(e) => Routed::Done(Err(anyhow::Error::new(e))),
        Ok(exit) => Routed::Done(Ok(exit)),
    };
    if let Some(message) = &args.message {
        let _ctrl_c = gateway_client::CancelOnCtrlC::new(client, &args.session);
        return routed(gateway_turn(client, &ui, &args.session, message, args.yes));
    }
    // The REPL: each line is a turn of the gateway's session; approval answers
    // are read from the same input.
    ui.stdin_answers = true;
    let mut session = args.session.clone();
    if client.request("GET", "/healthz", None).is_err() {
        return Routed::Unreachable;
    }
    ui.status(&format!(
        "claw — session {} through the gateway (pid {}). /help for commands, Ctrl-D to quit.",
        args.session, client.info.pid
    ));
    let mut input = LineInput::open(history);
    loop {
        let line = match input.read(true) {
            ReadLine::Line(l) => l,
            ReadLine::Interrupted => continue,
            ReadLine::Eof => break,
        };
        let text = line.trim();
        match commands::parse(text, Surface::Repl) {
            Line::Empty => {}
            Line::Command(Command::Exit) => break,
            Line::Command(Command::Help) => println!("{}", commands::help()),
            // No turn runs between prompts, but the session's sub-agents may.
            Line::Command(Command::Stop) => ui.status(&gateway_client::stop(client, &session)),
            Line::Command(Command::New) => {
                session = gateway_client::new_session_key(&session, clock.now());
                ui.status(&format!("new session {session}"));
            }
            Line::Unknown(cmd) => ui.status(&commands::unknown(&cmd)),
            // A message, or a command the gateway's session runs (`/remember`,
            // `/compact`, `/agents`): a turn of the gateway's session.
            Line::Message
            | Line::Command(Command::Remember | Command::Compact | Command::Agents) => {
                match gateway_client::with_cancel_on_ctrl_c(client, &session, || {
                    gateway_turn(client, &ui, &session, text, args.yes)
                }) {
                    Ok(_) => {}
                    Err(ClientError::Connect { .. }) => {
                        ui.status("error: the gateway is gone; restart claw to continue");
                        return Routed::Done(Ok(Exit::Error));
                    }
                    Err(e) => ui.status(&format!("error: {e}")),
                }
            }
        }
    }
    Routed::Done(Ok(Exit::Ok))
}

/// `claw` / `claw -m` in this process.
async fn run_local(settings: Settings, args: ChatArgs) -> anyhow::Result<Exit> {
    let overrides = Overrides {
        profile: args.profile.clone(),
        model: args.model.clone(),
    };
    let env = |name: &str| settings.env.get(name);
    let a = agent_settings::resolve(&settings.assistant, &overrides, &env)?;
    std::fs::create_dir_all(&settings.mem.workspace).with_context(|| {
        format!(
            "cannot create the workspace {}",
            settings.mem.workspace.display()
        )
    })?;
    let chain = Arc::new(
        ProviderChain::new(a.profiles.clone(), RetryPolicy::default())
            .context("cannot set up the LLM client")?,
    );
    let (tools, memory) = crate::app::build_tools(&settings, &a, args.yes, &args.session);
    let dynamic: Option<Arc<dyn claw_agent::tools::DynamicTools>> =
        if settings.mcp.servers.is_empty() {
            None
        } else {
            Some(crate::app::start_clients(&settings).await)
        };
    let opts = crate::app::driver_options(&settings, &a, &args.session);
    let hooks = crate::app::build_hooks(&settings)?;
    // Sub-agents: children get the parent's context minus `spawn`/`cron`/`message`.
    let (subagents, announcements) = Subagents::new(
        ChildKit {
            model: chain.clone(),
            tools: tools.context().clone(),
            dynamic: dynamic.clone(),
            options: opts.clone(),
            hooks: hooks.clone(),
        },
        settings.agents.clone(),
    );
    let mut ctx = tools.context().clone();
    // `agents.max_subagents: 0` turns sub-agents off (no `spawn` tool).
    if settings.agents.max_subagents > 0 {
        ctx.spawner = Some(subagents.clone());
    }
    let mut tools = ToolRegistry::new(ctx);
    if let Some(d) = dynamic {
        tools = tools.with_dynamic(d);
    }
    let color = std::io::stderr().is_terminal();
    match args.message {
        Some(message) => {
            let ui = Arc::new(TerminalUi::new(color, None, args.yes));
            let mut driver = Driver::open(opts, chain, Arc::new(tools), ui.clone())
                .await
                .context("cannot open the session")?;
            if let Some(h) = hooks {
                driver = driver.with_hooks(h);
            }
            sync_memory(memory, ui.as_ref()).await;
            ui.start_waiting();
            let mut exit = one_shot(&mut driver, &message).await;
            // `claw -m` waits for its sub-agents; their announcements start
            // parent turns until nothing is left.
            let mut announcements = announcements;
            while exit.is_ok() {
                let batch = settle(&subagents, &mut announcements, ui.as_ref()).await;
                if batch.is_empty() {
                    break;
                }
                exit = one_shot(&mut driver, &batch).await;
            }
            ui.stop_waiting();
            exit
        }
        None => {
            let history = settings.state_dir().join("chat_history.txt");
            let sub = (subagents, announcements);
            repl(
                opts, chain, tools, memory, color, history, args.yes, hooks, sub,
            )
            .await
        }
    }
}

/// The sub-agent manager of a local session and its announcements.
type Subs = (
    Arc<Subagents<ProviderChain>>,
    tokio::sync::mpsc::UnboundedReceiver<claw_agent::subagents::Announcement>,
);

/// Waits until no sub-agent is queued or running (Ctrl-C cancels them) and
/// returns their announcements as one message ("" when there is none).
async fn settle(
    subagents: &Subagents<ProviderChain>,
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<claw_agent::subagents::Announcement>,
    ui: &dyn Ui,
) -> String {
    let mut got = Vec::new();
    if subagents.outstanding() > 0 {
        ui.status(&format!(
            "waiting for {} sub-agent(s) (Ctrl-C cancels them)",
            subagents.outstanding()
        ));
    }
    loop {
        while let Ok(a) = rx.try_recv() {
            got.push(a);
        }
        if subagents.outstanding() == 0 {
            break;
        }
        tokio::select! {
            a = rx.recv() => match a {
                Some(a) => got.push(a),
                None => break,
            },
            _ = tokio::signal::ctrl_c() => subagents.cancel_all(),
        }
    }
    for a in &got {
        ui.status(&format!(
            "sub-agent {} ({}): {}",
            a.id,
            a.label,
            a.state.as_str()
        ));
    }
    got.iter()
        .map(|a| a.message())
        .collect::<Vec<_>>()
        .join("\n\n")
}

async fn one_shot(
    driver: &mut Driver<ProviderChain, ToolRegistry>,
    message: &str,
) -> anyhow::Result<Exit> {
    let cancel = CancellationToken::new();
    let ctrlc = spawn_ctrl_c(cancel.clone());
    let outcome = driver.run_turn(message, &cancel).await;
    ctrlc.abort();
    let outcome = outcome.context("the session file could not be written")?;
    Ok(report_end(&outcome.end))
}

/// Print why a turn did not answer; the exit status for `-m`.
fn report_end(end: &TurnEnd) -> Exit {
    match end {
        TurnEnd::Answered(_) => Exit::Ok,
        TurnEnd::MaxIterations(_) => Exit::Error,
        TurnEnd::Cancelled => {
            eprintln!("cancelled");
            Exit::Error
        }
        TurnEnd::LoopBroken(why) => {
            eprintln!("stopped: {why}");
            Exit::Error
        }
        TurnEnd::Failed(why) => {
            eprintln!("error: {why}");
            Exit::Error
        }
        TurnEnd::Done(what) => {
            eprintln!("{}", super::output::sanitize(what));
            Exit::Ok
        }
    }
}

fn spawn_ctrl_c(cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    })
}

/// What the input thread delivers.
enum Input {
    Line(String),
    Eof,
}

/// How the input thread should read its next line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadMode {
    /// With the line editor and a prompt (between turns).
    Prompt,
    /// A plain line read (while a turn runs: `/stop`, confirmations).
    Plain,
    Quit,
}

/// Stdin for both REPLs: the line editor (with the history file) on a terminal,
/// plain line reads otherwise.
struct LineInput {
    editor: Option<rustyline::DefaultEditor>,
    history: std::path::PathBuf,
}

/// What one read of [`LineInput`] got.
enum ReadLine {
    /// A line, without its line ending.
    Line(String),
    /// Ctrl-C at the prompt: nothing was entered.
    Interrupted,
    /// End of input (Ctrl-D, a closed stdin) or an unreadable terminal.
    Eof,
}

impl LineInput {
    fn open(history: std::path::PathBuf) -> LineInput {
        let mut editor = if std::io::stdin().is_terminal() {
            rustyline::DefaultEditor::new().ok()
        } else {
            None
        };
        if let Some(ed) = &mut editor {
            let _ = ed.load_history(&history);
        }
        LineInput { editor, history }
    }

    /// One line: through the editor at the `› ` prompt when there is one and
    /// `prompt` is set (a non-empty line goes to the history file), else a plain
    /// read (e.g. the answer to a confirmation).
    fn read(&mut self, prompt: bool) -> ReadLine {
        match self.editor.as_mut() {
            Some(ed) if prompt => match ed.readline("› ") {
                Ok(l) => {
                    if !l.trim().is_empty() {
                        let _ = ed.add_history_entry(l.as_str());
                        if let Some(dir) = self.history.parent() {
                            let _ = std::fs::create_dir_all(dir);
                        }
                        let _ = ed.save_history(&self.history);
                    }
                    ReadLine::Line(l)
                }
                Err(rustyline::error::ReadlineError::Interrupted) => ReadLine::Interrupted,
                Err(_) => ReadLine::Eof,
            },
            _ => {
                let mut s = String::new();
                match std::io::stdin().lock().read_line(&mut s) {
                    Ok(0) | Err(_) => ReadLine::Eof,
                    Ok(_) => ReadLine::Line(s.trim_end_matches(['\n', '\r']).to_string()),
                }
            }
        }
    }
}

/// The input thread: one reader of stdin, switching between the line editor and
/// plain reads as the main loop tells it after each line.
fn spawn_reader(
    history: std::path::PathBuf,
    tx: tokio::sync::mpsc::UnboundedSender<Input>,
    mode_rx: std::sync::mpsc::Receiver<ReadMode>,
) {
    std::thread::spawn(move || {
        let mut input = LineInput::open(history);
        let mut mode = ReadMode::Prompt;
        loop {
            if mode == ReadMode::Quit {
                return;
            }
            let line = match input.read(mode == ReadMode::Prompt) {
                ReadLine::Line(l) => l,
                ReadLine::Interrupted => continue,
                ReadLine::Eof => {
                    let _ = tx.send(Input::Eof);
                    return;
                }
            };
            if tx.send(Input::Line(line)).is_err() {
                return;
            }
            match mode_rx.recv() {
                Ok(m) => mode = m,
                Err(_) => return,
            }
        }
    });
}

#[allow(clippy::too_many_arguments)] // the REPL's parts, built once by `run_local`
async fn repl(
    opts: DriverOptions,
    chain: Arc<ProviderChain>,
    tools: ToolRegistry,
    memory: Arc<EngineBackend>,
    color: bool,
    history: std::path::PathBuf,
    yes: bool,
    hooks: Option<Arc<claw_agent::hooks::Hooks>>,
    subs: Subs,
) -> anyhow::Result<Exit> {
    let (subagents, mut announcements) = subs;
    let (answer_tx, answer_rx) = std::sync::mpsc::channel::<String>();
    let ui = Arc::new(TerminalUi::new(color, Some(Mutex::new(answer_rx)), yes));
    let awaiting = ui.awaiting_answer.clone();
    let mut driver = Driver::open(opts, chain, Arc::new(tools), ui.clone())
        .await
        .context("cannot open the session")?;
    if let Some(h) = hooks {
        driver = driver.with_hooks(h);
    }
    ui.status(&format!(
        "claw — session {} ({} messages). /help for commands, Ctrl-D to quit.",
        driver.session_path().display(),
        driver.agent().history().len()
    ));
    sync_memory(memory.clone(), ui.as_ref()).await;
    // The memory watcher runs while the REPL is open (cli/chat/repl_watch.rs).
    let say_ui = ui.clone();
    let say: repl_watch::Say = Arc::new(move |line: &str| say_ui.status(line));
    let watcher = repl_watch::start(memory, driver.session_path(), say).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (mode_tx, mode_rx) = std::sync::mpsc::channel();
    spawn_reader(history, tx, mode_rx);
    let interactive = std::io::stdin().is_terminal();
    // Lines typed (or piped) while a turn runs, handled after it.
    let mut queued: VecDeque<String> = VecDeque::new();
    loop {
        // The reader waits for a mode after each line it sends; queued lines
        // already got theirs (Plain) while the turn ran.
        let (line, from_reader) = match queued.pop_front() {
            Some(l) => (l, false),
            None => tokio::select! {
                input = rx.recv() => match input {
                    Some(Input::Line(l)) => (l, true),
                    _ => break,
                },
                // A finished sub-agent starts a turn of its own.
                Some(a) = announcements.recv() => {
                    ui.status(&format!("sub-agent {} ({}): {}", a.id, a.label, a.state.as_str()));
                    (a.message(), false)
                }
            },
        };
        let text = line.trim();
        let next = match commands::parse(text, Surface::Repl) {
            Line::Empty => ReadMode::Prompt,
            Line::Command(Command::Exit) => break,
            Line::Command(Command::Help) => {
                println!("{}", commands::help());
                ReadMode::Prompt
            }
            Line::Command(Command::Stop) => {
                if subagents.outstanding() > 0 {
                    subagents.cancel_all();
                    ui.status("cancelling the running sub-agents");
                } else {
                    ui.status("nothing is running");
                }
                ReadMode::Prompt
            }
            Line::Command(Command::Agents) => {
                let list = subagents.list();
                if list.is_empty() {
                    ui.status("no sub-agents in this session");
                }
                for i in list {
                    println!(
                        "{}  {:<9}  {}  ({})",
                        i.id,
                        i.state.as_str(),
                        super::output::sanitize(&i.label),
                        i.session
                    );
                }
                ReadMode::Prompt
            }
            Line::Command(Command::New) => {
                match driver.new_session().await {
                    Ok(Some(old)) => {
                        ui.status(&format!("new session (previous kept as {})", old.display()))
                    }
                    Ok(None) => ui.status("new session"),
                    Err(e) => ui.status(&format!("error: {e}")),
                }
                ReadMode::Prompt
            }
            Line::Unknown(cmd) => {
                ui.status(&commands::unknown(&cmd));
                ReadMode::Prompt
            }
            parsed => {
                let job = match parsed {
                    Line::Command(Command::Remember) => Job::Remember,
                    Line::Command(Command::Compact) => Job::Compact,
                    _ => Job::Message(text.to_string()),
                };
                if from_reader {
                    let _ = mode_tx.send(ReadMode::Plain);
                }
                let cancel = CancellationToken::new();
                let ctrlc = spawn_ctrl_c(cancel.clone());
                let mut eof = false;
                ui.start_waiting();
                let result = {
                    let turn: std::pin::Pin<Box<dyn std::future::Future<Output = _>>> = match &job {
                        Job::Message(m) => Box::pin(driver.run_turn(m, &cancel)),
                        Job::Remember => Box::pin(driver.remember(&cancel)),
                        Job::Compact => Box::pin(driver.compact(&cancel)),
                    };
                    tokio::pin!(turn);
                    loop {
                        tokio::select! {
                            r = &mut turn => break r,
                            input = rx.recv(), if !eof => {
                                match input {
                                    Some(Input::Line(l)) if awaiting.load(Ordering::SeqCst) => {
                                        let _ = answer_tx.send(l);
                                    }
                                    Some(Input::Line(l)) if l.trim() == "/stop" => {
                                        cancel.cancel();
                                        subagents.cancel_all();
                                    }
                                    Some(Input::Line(l)) if l.trim().is_empty() => {}
                                    Some(Input::Line(l)) => {
                                        if interactive {
                                            ui.status("queued until this turn ends (/stop or Ctrl-C cancels it)");
                                        }
                                        queued.push_back(l);
                                    }
                                    Some(Input::Eof) | None => {
                                        // End of input: let the turn finish, then quit.
                                        eof = true;
                                        continue;
                                    }
                                }
                                let _ = mode_tx.send(ReadMode::Plain);
                            }
                        }
                    }
                };
                ctrlc.abort();
                ui.stop_waiting();
                match result {
                    Ok(outcome) => match &outcome.end {
                        TurnEnd::Answered(_) | TurnEnd::MaxIterations(_) => {}
                        TurnEnd::Cancelled => ui.status("cancelled"),
                        TurnEnd::LoopBroken(why) => ui.status(&format!("stopped: {why}")),
                        TurnEnd::Failed(why) => ui.status(&format!("error: {why}")),
                        TurnEnd::Done(what) => ui.status(what),
                    },
                    Err(e) => ui.status(&format!("error: {e}")),
                }
                if eof {
                    queued.push_back("/exit".into());
                }
                // The reader is already waiting for a plain line: show a prompt for it.
                if interactive && queued.is_empty() {
                    print!("› ");
                    let _ = std::io::stdout().flush();
                }
                continue;
            }
        };
        if from_reader && mode_tx.send(next).is_err() {
            break;
        }
    }
    let _ = mode_tx.send(ReadMode::Quit);
    if let Some(w) = watcher {
        w.stop().await;
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_once_always_deny() {
        assert_eq!(parse_answer(Some("y\n")), Answer::Once);
        assert_eq!(parse_answer(Some(" YES ")), Answer::Once);
        assert_eq!(parse_answer(Some("a")), Answer::Always);
        assert_eq!(parse_answer(Some("always\n")), Answer::Always);
        for no in ["", "n", "no", "sure", "ya"] {
            assert_eq!(parse_answer(Some(no)), Answer::Deny, "{no:?}");
        }
        assert_eq!(parse_answer(None), Answer::Deny);
    }
}
