//! `uroce doctor`: the RoCE deployment checklist and troubleshooting table as checks of this
//! host, each PASS / INFO / WARN / FAIL with what was measured and the fix.
//!
//! The checks (`checks.rs`) are pure functions of a [`checks::Host`] snapshot; `host.rs`
//! measures the live system (files under `/proc` and `/sys` through a root directory a test
//! can replace); `firewall.rs` reads iptables / nftables listings. Exit status: 0 when
//! nothing needs attention, 1 when a check FAILs, 3 when the worst is a WARN (2 stays the
//! command's usage/internal error, as for every `uroce` command).

use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::{bail, Result};

pub mod checks;
pub mod firewall;
pub mod host;

use checks::{Finding, Status};

/// `uroce doctor` options.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 when every check passes (INFO lines included), \
    1 when any check FAILs, 3 when the worst is a WARN, 2 on a usage or internal error."
)]
pub struct Args {
    /// Check device NAME only (repeatable; default: every device in UROCE_DEVICES).
    #[arg(short = 'd', long = "ib-dev", value_name = "NAME")]
    devices: Vec<String>,
    /// Memory the application will register (e.g. 1G, 512M): compared with RLIMIT_MEMLOCK
    /// (FAIL below it) and, with --hugepages, with the free huge pages.
    #[arg(long, value_name = "SIZE", value_parser = host::parse_size)]
    mr_size: Option<u64>,
    /// Check that the free huge pages hold --mr-size.
    #[arg(long)]
    hugepages: bool,
    /// One JSON array of {check, device, status, value, detail, fix}.
    #[arg(long)]
    json: bool,
    /// Also print why each check decided as it did.
    #[arg(short, long)]
    verbose: bool,
}

/// The exit status for a set of findings: 1 on any FAIL, 3 on WARNs only, else 0.
pub fn exit_status(findings: &[Finding]) -> u8 {
    match findings.iter().map(|f| f.status).max() {
        Some(Status::Fail) => 1,
        Some(Status::Warn) => 3,
        _ => 0,
    }
}

/// Runs `uroce doctor`.
pub fn run(args: Args) -> Result<ExitCode> {
    let specs = uroce_devices()?;
    for n in &args.devices {
        if !specs.iter().any(|(name, _)| name == n) {
            bail!(
                "device '{n}' is not configured (UROCE_DEVICES lists {})",
                specs
                    .iter()
                    .map(|s| s.0.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    let devices = specs
        .into_iter()
        .filter(|(n, _)| args.devices.is_empty() || args.devices.contains(n))
        .map(|(name, addr)| {
            let mtu = nic::DeviceConfig::new(name.clone(), addr).active_mtu;
            (name, addr, mtu)
        })
        .collect();
    let want = host::Want {
        devices,
        only: args.devices.clone(),
        mr_size: args.mr_size,
        hugepages: args.hugepages,
    };
    let h = host::measure(&want);
    let findings = checks::all(&h);
    let text = if args.json {
        serde_json::to_string_pretty(&findings)? + "\n"
    } else {
        render(&findings, args.verbose)
    };
    // A closed pipe (`uroce doctor | head`) is not an error of the checks.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    Ok(ExitCode::from(exit_status(&findings)))
}

/// The configured devices (`UROCE_DEVICES`, default `uroce0=127.0.0.1`), without starting
/// them: the doctor must not take the port it checks.
fn uroce_devices() -> Result<Vec<(String, IpAddr)>> {
    let specs = abi::provider::devices_from_env()?;
    Ok(specs.into_iter().map(|s| (s.name, s.addr)).collect())
}

/// Text output: one line per finding, the fix indented below it.
pub fn render(findings: &[Finding], verbose: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = findings.iter().map(|f| label(f).len()).max().unwrap_or(0);
    for f in findings {
        let _ = writeln!(
            out,
            "{}  {:width$}  {}",
            f.status.label(),
            label(f),
            f.value
        );
        if verbose && !f.detail.is_empty() {
            let _ = writeln!(out, "      why: {}", f.detail);
        }
        if !f.fix.is_empty() && f.status >= Status::Warn {
            let _ = writeln!(out, "      fix: {}", f.fix);
        }
    }
    let count = |s: Status| findings.iter().filter(|f| f.status == s).count();
    let _ = writeln!(
        out,
        "{} pass, {} info, {} warn, {} fail",
        count(Status::Pass),
        count(Status::Info),
        count(Status::Warn),
        count(Status::Fail)
    );
    out
}

fn label(f: &Finding) -> String {
    match &f.device {
        Some(d) => format!("{} {d}", f.check),
        None => f.check.to_string(),
    }
}
