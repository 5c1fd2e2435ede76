//! `uroced`: the daemon that shares uroce devices among every process of a host, as the
//! kernel shares `/dev/infiniband/uverbs0` (docs/daemon.md).
//!
//! ```text
//! UROCE_DEVICES=uroce0=127.0.0.1 uroced            # devices as everywhere else
//! uroced --device uroce0=10.0.0.1 --mtu 4096 --dir /run/uroce --mode 660 --group rdma
//! ```

use std::process::ExitCode;

use clap::Parser;

/// Share uroce devices among every process of this host.
#[derive(Parser, Debug)]
#[command(name = "uroced", version)]
struct Args {
    /// A device NAME=ADDRESS to serve (repeatable; default: UROCE_DEVICES, else
    /// uroce0=127.0.0.1).
    #[arg(long = "device", short = 'd')]
    devices: Vec<String>,
    /// Active MTU of the devices (256, 512, 1024, 2048 or 4096).
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// Directory of the device sockets (default: /run/uroce for root, else
    /// $XDG_RUNTIME_DIR/uroce or /tmp/uroce-UID; UROCE_DAEMON if set).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
    /// Mode of the device sockets, octal (default 660 for root, 600 otherwise).
    #[arg(long)]
    mode: Option<String>,
    /// Group of the device sockets (default for root: `rdma` if it exists).
    #[arg(long)]
    group: Option<String>,
    /// Serve Prometheus metrics at http://[ADDR:]PORT/metrics (a bare PORT binds 127.0.0.1):
    /// the daemon's counters and those of every uroce process `uroce stat` sees.
    #[arg(long, value_name = "[ADDR:]PORT")]
    metrics: Option<String>,
}

fn group_id(name: &str) -> Option<u32> {
    let text = std::fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.next()?;
        f.next()?.parse().ok()
    })
}

fn main() -> ExitCode {
    let a = Args::parse();
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uroced: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> Result<(), String> {
    let specs = if a.devices.is_empty() {
        abi::provider::parse_device_list(
            &std::env::var(abi::provider::DEVICES_ENV)
                .unwrap_or_else(|_| abi::provider::DEFAULT_DEVICES.to_string()),
        )
    } else {
        abi::provider::parse_device_list(&a.devices.join(","))
    }
    .map_err(|e| e.to_string())?;
    let devices = specs
        .iter()
        .map(|s| {
            let mut c = nic::DeviceConfig::from_spec(s);
            c.active_mtu = a.mtu;
            c
        })
        .collect();
    let root = std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false);
    let dir = match (&a.dir, std::env::var(abi::daemon::DAEMON_ENV)) {
        (Some(d), _) => d.clone(),
        (None, Ok(v)) if !abi::daemon::is_off(&v) => v.into(),
        _ => abi::daemon::default_dir(),
    };
    let mode = match &a.mode {
        Some(m) => u32::from_str_radix(m, 8).map_err(|_| format!("bad --mode {m}"))?,
        None if root => 0o660,
        None => 0o600,
    };
    let group = match &a.group {
        Some(g) => Some(
            g.parse()
                .ok()
                .or_else(|| group_id(g))
                .ok_or_else(|| format!("no group {g}"))?,
        ),
        None if root => group_id("rdma"),
        None => None,
    };
    // Signals are blocked before any thread starts, so only the daemon's signalfd sees them.
    let sig = nic::daemon::signals().map_err(|e| e.to_string())?;
    if let Some(at) = &a.metrics {
        let addr: std::net::SocketAddr = match at.parse::<u16>() {
            Ok(port) => (std::net::Ipv4Addr::LOCALHOST, port).into(),
            Err(_) => at
                .parse()
                .map_err(|_| format!("--metrics wants [ADDR:]PORT, got `{at}`"))?,
        };
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| format!("--metrics: cannot listen on {addr}: {e}"))?;
        eprintln!(
            "uroced: metrics at http://{}/metrics",
            listener.local_addr().map_err(|e| e.to_string())?
        );
        let dir = dir.clone();
        std::thread::spawn(move || {
            let _ = uroce::metrics::serve(&listener, || render_metrics(&dir));
        });
    }
    nic::daemon::run_with_signals(
        nic::daemon::DaemonConfig {
            devices,
            dir,
            mode,
            group,
        },
        sig,
    )
    .map_err(|e| e.to_string())
}

/// The daemon's own counters (asked of its device sockets, as `uroce stat` does) followed by
/// every uroce process's.
fn render_metrics(dir: &std::path::Path) -> String {
    let devices: Vec<(String, Vec<(String, u64)>)> = abi::daemon::devices_in(dir)
        .into_iter()
        .filter_map(
            |d| match abi::daemon::request(&d.socket, &abi::daemon::Msg::Stats) {
                Ok(abi::daemon::Msg::StatsText(t)) => Some((
                    d.dev.name,
                    abi::daemon::parse_stats(&t)
                        .into_iter()
                        .filter_map(|(k, v)| Some((k, v.parse::<u64>().ok()?)))
                        .collect(),
                )),
                _ => None,
            },
        )
        .collect();
    let c = uroce::stats::collect(std::time::Duration::from_secs(3));
    let mut out = uroce::metrics::daemon_exposition(&devices);
    out.push_str(&uroce::metrics::exposition(&c.processes));
    out
}
