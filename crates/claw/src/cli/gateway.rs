//! `claw gateway [--port N]` (run the always-on gateway in the foreground, logs on
//! stderr), `claw gateway status [--json]` (is one running for this workspace:
//! pid, port, uptime, sessions, queue depths) and `claw gateway install-service`
//! (write a systemd user unit and say how to enable it). Also the CLI's side of
//! routing work through a running gateway ([`running`]).

use super::output::{Exit, print_json, sanitize, sanitize_path};
use crate::config::Settings;
use anyhow::Context;
use claw_agent::settings::{self as agent_settings, Overrides};
use claw_gateway::server::{self, GatewayOptions, ScheduleOptions};
use claw_gateway::token;
use std::io::Write;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct GatewayArgs {
    #[command(subcommand)]
    pub command: Option<GatewayCommand>,
    /// Port to listen on (default 18790, or `gateway.port`; 0 picks a free one).
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,
    /// Do not run the memory watcher.
    #[arg(long)]
    pub no_watch: bool,
    /// How the gateway's log lines on stderr are written: text or json.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t)]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Debug, clap::Subcommand)]
pub enum GatewayCommand {
    /// Whether a gateway runs for this workspace (pid, port, uptime, sessions, queues).
    Status(StatusArgs),
    /// Write a systemd user unit running `claw gateway` and print how to enable it.
    InstallService(InstallArgs),
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct InstallArgs {
    /// Where to write the unit (default ~/.config/systemd/user/claw-gateway.service).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

impl GatewayArgs {
    pub fn wants_json(&self) -> bool {
        matches!(&self.command, Some(GatewayCommand::Status(a)) if a.json)
    }
}

pub async fn run(settings: Settings, args: GatewayArgs) -> anyhow::Result<Exit> {
    match args.command {
        Some(GatewayCommand::Status(a)) => {
            tokio::task::spawn_blocking(move || run_status(&settings, a)).await?
        }
        Some(GatewayCommand::InstallService(a)) => run_install(&settings, a),
        None => run_gateway(settings, args.port, !args.no_watch).await,
    }
}

async fn run_gateway(
    mut settings: Settings,
    port: Option<u16>,
    watch: bool,
) -> anyhow::Result<Exit> {
    if settings.ort_defaults
        && let claw_memory_api::config::EmbedProvider::Local { runtime, .. } =
            &mut settings.mem.embed
    {
        *runtime = claw_memory_api::config::LocalRuntime {
            precision: runtime.precision,
            ..claw_memory_api::config::LocalRuntime::ort_defaults()
        };
        server::log(
            "benchmark: the model runs with ONNX Runtime's defaults (CLAW_EMBED_ORT_DEFAULTS=1)",
        );
    }
    let env = |name: &str| settings.env.get(name);
    let agent = agent_settings::resolve(&settings.assistant, &Overrides::default(), &env)
        .map_err(|e| e.to_string());
    let a = agent.as_ref().ok();
    let clock = settings.mem.clock;
    let utc_offset = a.map_or_else(|| clock.local_offset(), |a| a.utc_offset(&clock));
    std::fs::create_dir_all(&settings.mem.workspace).with_context(|| {
        format!(
            "cannot create the workspace {}",
            settings.mem.workspace.display()
        )
    })?;
    claw_memory_api::private::create_dir_all(&settings.state_dir())
        .with_context(|| format!("cannot create {}", settings.state_dir().display()))?;
    let token = match settings.gateway_token.clone() {
        Some(t) => token::Token::new(t),
        None => token::load_or_create(&settings.state_dir())?,
    };
    let mut gateway = settings.gateway.clone();
    if let Some(p) = port {
        gateway.port = p;
    }
    let zone = crate::app::user_zone(&settings);
    let heartbeat = settings
        .heartbeat
        .resolve(zone)
        .map_err(|e| anyhow::anyhow!("invalid heartbeat section: {e}"))?;
    let schedule = ScheduleOptions {
        jobs_path: claw_schedule::jobs_path(&settings.state_dir()),
        clock: crate::app::clock(&settings),
        zone,
        heartbeat,
    };
    for w in settings.channels.warnings() {
        tracing::warn!("{w}");
    }
    let channels = settings
        .channels
        .resolve(settings.env.vars())
        .map_err(|e| anyhow::anyhow!("{e} (export it before starting the gateway)"))?;
    let consolidation =
        crate::app::consolidation_settings(&settings, agent.as_ref().map_err(String::as_str));
    let opts = GatewayOptions {
        mem: settings.mem.clone(),
        agent,
        gateway,
        token,
        utc_offset,
        watch,
        schedule: Some(schedule),
        channels,
        subagents: settings.agents.clone(),
        hooks: crate::app::build_hooks(&settings)?,
        mcp_read_only: settings.mcp.read_only,
        consolidation: Some(consolidation),
    };
    let stop = CancellationToken::new();
    server::cancel_on_signals(stop.clone()).context("cannot install signal handlers")?;
    server::run(opts, stop, |_| {}).await?;
    Ok(Exit::Ok)
}

fn run_status(settings: &Settings, args: StatusArgs) -> anyhow::Result<Exit> {
    let Some(client) = crate::app::running_gateway(settings) else {
        if args.json {
            print_json(&serde_json::json!({
                "running": false,
                "workspace": settings.mem.workspace,
            }))?;
        } else {
            println!(
                "no gateway is running for {}",
                sanitize_path(&settings.mem.workspace)
            );
        }
        return Ok(Exit::NoMatch);
    };
    let resp = client.request("GET", "/v1/status", None)?;
    if resp.status != 200 {
        anyhow::bail!(
            "the gateway (pid {}) answered {}: {}",
            client.info.pid,
            resp.status,
            resp.error_message()
        );
    }
    let mut v: serde_json::Value =
        serde_json::from_slice(&resp.body).context("the gateway's status is not JSON")?;
    if let serde_json::Value::Object(m) = &mut v {
        m.insert("running".into(), serde_json::Value::Bool(true));
    }
    if args.json {
        print_json(&v)?;
        return Ok(Exit::Ok);
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "gateway running: pid {}, {} (up {} s)",
        v["pid"],
        sanitize(&client.info.base_url()),
        v["uptime_seconds"]
    )?;
    writeln!(out, "workspace: {}", sanitize_path(&client.info.workspace))?;
    writeln!(
        out,
        "sessions: {}; turns running {}, waiting {}; queues inbound {}, outbound {}",
        v["sessions"],
        v["queues"]["running"],
        v["queues"]["waiting"],
        v["queues"]["inbound"],
        v["queues"]["outbound"]
    )?;
    writeln!(
        out,
        "turns: {} accepted, {} finished",
        v["turns"]["accepted"], v["turns"]["finished"]
    )?;
    let hb = &v["heartbeat"];
    if !hb.is_null() {
        let last = &hb["last"];
        let last = if last.is_null() {
            "none yet".to_string()
        } else if last["fired"] == true {
            format!("{} (ran a turn)", last["at"].as_str().unwrap_or("?"))
        } else {
            format!(
                "{} (skipped: {})",
                last["at"].as_str().unwrap_or("?"),
                last["skipped"].as_str().unwrap_or("?")
            )
        };
        writeln!(
            out,
            "heartbeat: {}, every {} min; last: {}",
            if hb["enabled"] == true { "on" } else { "off" },
            hb["interval_minutes"],
            sanitize(&last)
        )?;
    }
    let cron = &v["cron"];
    if !cron.is_null() {
        writeln!(out, "cron: {} job(s)", cron["jobs"])?;
        for r in cron["next_runs"].as_array().into_iter().flatten() {
            writeln!(
                out,
                "  next: {} at {}",
                sanitize(r["id"].as_str().unwrap_or("?")),
                sanitize(r["next_run"].as_str().unwrap_or("?"))
            )?;
        }
    }
    Ok(Exit::Ok)
}

/// The systemd user unit for `claw gateway` with this workspace and config.
/// `KEY="value"` lines for systemd's `EnvironmentFile=` (backslashes and
/// quotes escaped). A value with a line break cannot be written there: it is
/// left out and named in the second list.
fn env_file_text(vars: &[(String, String)]) -> (String, Vec<String>) {
    let mut text = String::from(
        "# Written by `claw gateway install-service`: the environment the gateway runs with.\n\
         # It holds secrets (mode 0600). Run install-service again after changing them.\n",
    );
    let mut skipped = Vec::new();
    for (k, v) in vars {
        if v.contains(['\n', '\r']) {
            skipped.push(k.clone());
            continue;
        }
        let v = v.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str(&format!("{k}=\"{v}\"\n"));
    }
    (text, skipped)
}

fn unit_text(
    exe: &std::path::Path,
    settings: &Settings,
    env_file: Option<&std::path::Path>,
) -> String {
    let q = |p: &std::path::Path| format!("\"{}\"", p.display().to_string().replace('"', "\\\""));
    let mut exec = format!(
        "{} gateway --workspace {}",
        q(exe),
        q(&settings.mem.workspace)
    );
    if let Some(c) = &settings.config_file {
        exec.push_str(&format!(" --config {}", q(c)));
    }
    format!(
        "[Unit]\n\
         Description=claw gateway (memory-centric assistant)\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         {env}\
         ExecStart={exec}\n\
         Restart=on-failure\n\
         RestartSec=5\n\
         KillSignal=SIGTERM\n\
         TimeoutStopSec={}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        settings.gateway.grace.as_secs() + 10,
        env = env_file
            // A path, not a command line: no quotes; a space is `\x20`.
            .map(|p| format!(
                "EnvironmentFile={}\n",
                p.display().to_string().replace(' ', "\\x20")
            ))
            .unwrap_or_default(),
    )
}

fn run_install(settings: &Settings, args: InstallArgs) -> anyhow::Result<Exit> {
    let exe = std::env::current_exe().context("cannot find the claw executable")?;
    let path = match args.output {
        Some(p) => p,
        None => {
            let base = settings
                .config_home
                .clone()
                .context("no home directory: pass --output FILE")?;
            base.join("systemd/user/claw-gateway.service")
        }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    // The environment beside the unit, private: without it the service would
    // start without the LLM, the model or the tokens this shell has.
    let env_path = path.with_extension("env");
    let vars = crate::config::service_env(settings);
    let (env_text, skipped) = env_file_text(&vars);
    claw_base::fs::write_atomic(
        &env_path,
        env_text.as_bytes(),
        claw_base::fs::Durability::Durable,
    )
    .with_context(|| format!("cannot write {}", env_path.display()))?;
    std::fs::write(&path, unit_text(&exe, settings, Some(&env_path)))
        .with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", sanitize_path(&path));
    println!(
        "wrote {} (mode 0600): {}",
        sanitize_path(&env_path),
        if vars.is_empty() {
            "no variables set".to_string()
        } else {
            vars.iter()
                .map(|(k, _)| k.as_str())
                .filter(|k| !skipped.iter().any(|s| s == k))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    for k in &skipped {
        eprintln!(
            "warning: {k} holds a line break and cannot go into an EnvironmentFile; set it in the unit by hand"
        );
    }
    let env = |name: &str| settings.env.get(name);
    if let Err(claw_agent::provider::ProfileError::NoProfiles) =
        claw_agent::provider::profiles_from_settings(&settings.assistant, &env)
    {
        eprintln!(
            "note: no LLM is configured in this shell (CLAW_LLM_* or agent.profiles): the service's chat will be off"
        );
    }
    println!("enable and start it with:");
    println!("  systemctl --user daemon-reload");
    println!("  systemctl --user enable --now claw-gateway.service");
    println!("keep it running after you log out with:");
    println!("  loginctl enable-linger \"$USER\"");
    println!("logs: journalctl --user -u claw-gateway -f");
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use claw_gateway::discovery;

    #[test]
    fn unit_runs_this_workspace_and_waits_for_the_grace_period() {
        let input = crate::config::ResolveInput {
            home: Some(PathBuf::from("/home/u")),
            ..Default::default()
        };
        let s = Settings::resolve(&input).expect("settings");
        let unit = unit_text(std::path::Path::new("/usr/bin/claw"), &s, None);
        assert!(
            unit.contains(
                "ExecStart=\"/usr/bin/claw\" gateway --workspace \"/home/u/.claw/workspace\""
            ),
            "{unit}"
        );
        assert!(unit.contains("TimeoutStopSec=20"), "{unit}");
        assert!(unit.contains("WantedBy=default.target"));
    }

    #[test]
    fn stale_info_is_not_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let input = crate::config::ResolveInput {
            home: Some(PathBuf::from("/home/u")),
            workspace_flag: Some(dir.path().to_path_buf()),
            ..Default::default()
        };
        let s = Settings::resolve(&input).expect("settings");
        std::fs::create_dir_all(s.state_dir()).expect("state dir");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        child.wait().expect("wait");
        discovery::write(
            &s.state_dir(),
            &discovery::GatewayInfo {
                pid,
                port: 1,
                bind: "127.0.0.1".parse().expect("ip"),
                started: chrono::Utc::now(),
                workspace: dir.path().to_path_buf(),
            },
        )
        .expect("write");
        token::load_or_create(&s.state_dir()).expect("token");
        assert!(crate::app::running_gateway(&s).is_none());
    }
}
