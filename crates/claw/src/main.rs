//! The `claw` binary: parse arguments, resolve settings once, dispatch to
//! `claw::cli`, and turn the outcome into an exit code (0 ok, 1 nothing found, 2 error).

use clap::Parser;
mod cli;
mod config;

use cli::{Cli, output::Exit};
use config::{ResolveInput, Settings};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let input = ResolveInput::from_process(cli.workspace.clone(), cli.config.clone());
    let settings = match Settings::resolve(&input) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(Exit::Error.code());
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(Exit::Error.code());
        }
    };
    match runtime.block_on(cli::dispatch(cli, settings)) {
        Ok(exit) => ExitCode::from(exit.code()),
        Err(e) => {
            eprintln!("error: {e:#}");
            if let Some(hint) = cli::index::hint_for(&e) {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(Exit::Error.code())
        }
    }
}
