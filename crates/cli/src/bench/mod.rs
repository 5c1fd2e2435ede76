//! `uroce bench`.
pub mod util;

use std::process::ExitCode;

/// `uroce bench` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The test.
    test: String,
}

/// Runs `uroce bench`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("not yet: {}", args.test)
}
