//! `claw memory eval`.

use super::output::Exit;
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// BEIR dataset directory.
    #[arg(long)]
    pub beir: std::path::PathBuf,
}

pub fn run_eval(_settings: &Settings, _args: EvalArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("`claw memory eval` is not built yet")
}
