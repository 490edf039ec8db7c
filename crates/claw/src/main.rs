//! The `claw` binary: parse arguments, resolve settings once, dispatch to
//! `claw::cli`, and turn the outcome into an exit code (0 ok, 1 nothing found, 2 error).
//! Errors are rendered here, at the edge (`cli::errors`): `error:` and `hint:` lines
//! on stderr, plus a JSON object on stdout under `--json`; a closed stdout exits 0.

use clap::Parser;
mod app;
mod cli;
mod config;
mod logging;

use cli::{Cli, errors, output::Exit};
use config::{ResolveInput, Settings};
use std::process::ExitCode;

fn main() -> ExitCode {
    errors::install_broken_pipe_hook();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            // A usage error under --json is also the JSON error object on stdout.
            if e.use_stderr() && std::env::args_os().any(|a| a == "--json") {
                errors::print_json_only(&errors::usage_report(&e));
            }
            return ExitCode::from(code);
        }
    };
    // Completions need no workspace, config or state: a broken config must not
    // keep a shell from completing `claw`.
    if let Some(cli::Command::Completions(a)) = &cli.command {
        return match cli::completions::run(a) {
            Ok(exit) => ExitCode::from(exit.code()),
            Err(e) if errors::is_broken_pipe(&e) => ExitCode::from(Exit::Ok.code()),
            Err(e) => {
                errors::print(&errors::report(&e), false);
                ExitCode::from(Exit::Error.code())
            }
        };
    }
    let json = cli.wants_json();
    let fail = |e: anyhow::Error| {
        if errors::is_broken_pipe(&e) {
            return ExitCode::from(Exit::Ok.code());
        }
        errors::print(&errors::report(&e), json);
        ExitCode::from(Exit::Error.code())
    };
    let input = ResolveInput::from_process(cli.workspace.clone(), cli.config.clone());
    let (gateway, format) = match &cli.command {
        Some(cli::Command::Gateway(a)) if a.command.is_none() => (true, a.log_format),
        _ => (false, logging::LogFormat::Text),
    };
    logging::install(input.rust_log().as_deref(), gateway, format);
    let settings = match Settings::resolve(&input) {
        Ok(s) => s,
        // The doctor reports a bad config as its failing `config` section (the
        // `sections` shape stays), with the error's hints.
        Err(e) => {
            if let Some(cli::Command::Doctor(a)) = &cli.command {
                // Every problem, not only the first.
                let mut all: Vec<_> = config::config_problems(&input)
                    .into_iter()
                    .map(|p| errors::report(&anyhow::Error::new(p)))
                    .collect();
                if all.is_empty() {
                    all.push(errors::report(&anyhow::Error::new(e)));
                }
                return match cli::doctor::run_config_failed(&all, a) {
                    Ok(exit) => ExitCode::from(exit.code()),
                    Err(e) => fail(e),
                };
            }
            return fail(e.into());
        }
    };
    if let Err(e) = cli::state::prepare(&settings) {
        return fail(e);
    }
    let mut builder = if cli.is_one_blocking_request() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            return fail(anyhow::Error::new(e).context("cannot start the async runtime"));
        }
    };
    match runtime.block_on(cli::dispatch(cli, settings)) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => fail(e),
    }
}
