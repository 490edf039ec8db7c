//! `claw memory index|status|add|sources|remove|install-model`.

use super::output::Exit;
use crate::config::Settings;

#[derive(Debug, clap::Args)]
pub struct IndexArgs {
    /// Rebuild everything.
    #[arg(long)]
    pub force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// Folder of Markdown notes.
    pub path: std::path::PathBuf,
    /// Source name (default: the folder's name).
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct SourcesArgs {
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct RemoveArgs {
    /// Source name.
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct InstallModelArgs {
    /// Where to install (default ~/.claw/models).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

pub fn run_index(_s: &Settings, _a: IndexArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("not built yet")
}
pub fn run_status(_s: &Settings, _a: StatusArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("not built yet")
}
pub fn run_add(_s: &Settings, _a: AddArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("not built yet")
}
pub fn run_sources(_s: &Settings, _a: SourcesArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("not built yet")
}
pub fn run_remove(_s: &Settings, _a: RemoveArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("not built yet")
}
pub fn run_install_model(_s: &Settings, _a: InstallModelArgs) -> anyhow::Result<Exit> {
    anyhow::bail!("not built yet")
}
