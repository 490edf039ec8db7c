//! `claw memory search` and `claw memory get`.

use super::output::Exit;
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct SearchArgs {
    /// What to look for.
    pub query: String,
}

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Path of an indexed file.
    pub path: String,
}

pub fn run_search(_settings: &Settings, _args: SearchArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("`claw memory search` is not built yet")
}

pub fn run_get(_settings: &Settings, _args: GetArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("`claw memory get` is not built yet")
}
