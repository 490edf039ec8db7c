//! `claw completions <shell>`: the shell completion script, generated from the
//! same clap definitions the binary parses (clap_complete), so it never drifts
//! from the real commands and flags. Needs no workspace, config or state.

use super::Cli;
use super::output::Exit;
use clap::CommandFactory;
use std::io::Write;

/// `claw completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Write the script to stdout. Generated into memory first: clap_complete
/// panics on a failed write, and a closed pipe must exit quietly instead.
pub fn run(args: &CompletionsArgs) -> anyhow::Result<Exit> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut Cli::command(), "claw", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(Exit::Ok)
}
