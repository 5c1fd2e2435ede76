//! Running a command under `uroce capture` / `uroce trace`: the child gets the environment
//! variable that switches the tool on in every uroce device it starts (docs/operations.md).

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::Context;

/// Run `argv` with `env` added and wait for it; the exit code to pass on (the child's, or
/// 128 + the signal that ended it, as a shell reports it).
pub fn run(argv: &[OsString], env: &[(&str, OsString)]) -> anyhow::Result<ExitCode> {
    let (prog, args) = argv.split_first().context("no command given after --")?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {}", prog.to_string_lossy()))?;
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)))
}

/// Empty `path` before CMD runs (its processes append to it), unless it is a template
/// (`%p`, `%d`), which names a file per process or device.
pub fn empty_unless_templated(path: &Path) -> anyhow::Result<()> {
    if !path.to_string_lossy().contains('%') {
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    }
    Ok(())
}
