//! `claw memory watch`.

use super::output::Exit;
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Print events as JSON Lines.
    #[arg(long)]
    pub json: bool,
}

pub async fn run_watch(_settings: Settings, _args: WatchArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("`claw memory watch` is not built yet")
}
