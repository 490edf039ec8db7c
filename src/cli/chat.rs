//! The assistant's front end: `claw` (REPL) and `claw -m "…"` (one answer).

use super::output::Exit;
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// Answer one message and exit.
    #[arg(short = 'm', long = "message", value_name = "TEXT")]
    pub message: Option<String>,
}

pub async fn run(_settings: Settings, _args: ChatArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("the assistant is not built yet")
}
