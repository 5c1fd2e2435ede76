//! `uroce bench compare`.
use std::process::ExitCode;

use anyhow::Result;

use super::Args;

/// Runs `uroce bench compare`.
pub fn run(_args: &Args) -> Result<ExitCode> {
    anyhow::bail!("compare: not yet")
}
