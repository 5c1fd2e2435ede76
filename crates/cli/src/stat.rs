//! `uroce stat [-d NAME] [--qp N|all] [--watch SECS [-c N]] [--json | --prometheus]
//! [--serve [ADDR:]PORT]`: port and per-QP counters of every running uroce process, like
//! iproute2's `rdma statistic show` and the sysfs `hw_counters` of a Linux RDMA device
//! (docs/architecture.md §4).
//!
//! uroce devices run inside their applications, so the counters come from the stats
//! endpoint each uroce process publishes ([`uroce::stats`]: one Unix socket per process,
//! one JSON snapshot per connection). Sockets left behind by processes that died are
//! removed on the way. This process's own devices are not listed (it has none).
//!
//! Output, one line per port in `rdma stat show`'s `link DEV/PORT name value ...` form,
//! under a line naming the process:
//!
//! ```text
//! pid 4242 uroce: uroce bench write_bw --loopback -D 10
//! link uroce0/1 addr 127.0.0.1 sent_pkts 180225 rcvd_pkts 180225 duplicate_request 0 ...
//! ```
//!
//! `--qp N` prints that QP's counters instead, in `rdma stat show qp`'s shape
//! (`link uroce0/1 lqpn 17 pid 4242 comm uroce sent_pkts ...`, with `selective_repeat`
//! after the command name for a QP that runs it, docs/wire.md §5.6); `--qp all` every QP's.
//! `--watch SECS` repeats every SECS seconds; after the first report it prints, per port
//! or QP, only the counters that changed: the total, then the change over the interval and
//! its rate per second (`sent_pkts 1005 (+1000, 1000/s)`). `--json` prints
//! one object `{"dirs", "daemons", "processes": [snapshot, ...], "removed_stale", "unanswered"}` (one
//! per report with `--watch`), the snapshots as published, filtered by `-d` and `--qp`.
//! `--exited` adds the last snapshots that processes run with `UROCE_STATS_KEEP=1` left at
//! exit (`<pid>.exit.json` beside the sockets; marked `exited`), so the counters of a run
//! that is over can still be read whole.
//!
//! `--prometheus` prints the Prometheus text exposition (version 0.0.4) instead
//! ([`uroce::metrics`]: `uroce_<rxe name>_total{device,port,pid,process}`, per QP
//! `uroce_qp_<name>_total{...,qp}`). `--serve [ADDR:]PORT` serves that exposition at
//! `GET /metrics` (a bare PORT binds 127.0.0.1), collecting afresh for every scrape; it says
//! where it listens on stderr.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use uroce::metrics;
use uroce::stats::{self, Collected, CounterSet, Snapshot};

/// How long to wait for one process's answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest `--watch` interval accepted (a day).
const WATCH_SECS_MAX: f64 = 86_400.0;

/// Which QPs `--qp` selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpSel {
    /// Every QP.
    All,
    /// One QP number.
    One(u32),
}

fn parse_qp(s: &str) -> Result<QpSel, String> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("all") {
        return Ok(QpSel::All);
    }
    let n = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|_| format!("`{s}` is not a QP number (decimal, 0x-hex) or `all`"))?;
    if n >= 1 << 24 {
        return Err(format!("QP number {n} does not fit in 24 bits"));
    }
    Ok(QpSel::One(n))
}

/// `uroce stat` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only the device NAME (every process's device of that name).
    #[arg(
        short = 'd',
        long = "ib-dev",
        visible_alias = "dev",
        value_name = "NAME"
    )]
    device: Option<String>,
    /// Per-QP counters: of QP number N (decimal or 0x-hex), or of every QP (`all`).
    #[arg(long, value_name = "N|all", value_parser = parse_qp)]
    qp: Option<QpSel>,
    /// Report again every SECS seconds, showing the counters that changed since the
    /// previous report with the change and its rate per second.
    #[arg(short = 'w', long, value_name = "SECS")]
    watch: Option<f64>,
    /// With --watch: stop after N reports (default: until interrupted).
    #[arg(short = 'c', long, value_name = "N", requires = "watch")]
    count: Option<u64>,
    /// Print one JSON object (one per report with --watch).
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the Prometheus text exposition format (version 0.0.4).
    #[arg(long)]
    prometheus: bool,
    /// Serve the Prometheus exposition over HTTP (GET /metrics) on [ADDR:]PORT; a bare
    /// PORT listens on 127.0.0.1 only.
    #[arg(long, value_name = "[ADDR:]PORT", conflicts_with_all = ["json", "watch"])]
    serve: Option<String>,
    /// Also the processes that have exited, from the snapshot each left at exit when run
    /// with UROCE_STATS_KEEP=1.
    #[arg(long)]
    exited: bool,
}

/// Runs `uroce stat`. Exit status 0, also when no uroce process is running (it says so);
/// 1 when processes run but none has the device or QP asked for (without `--watch`).
pub fn run(args: Args) -> Result<ExitCode> {
    let interval = match args.watch {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s <= WATCH_SECS_MAX => {
            Some(Duration::from_secs_f64(s))
        }
        Some(s) => bail!("--watch wants seconds in (0, {WATCH_SECS_MAX}], got {s}"),
    };
    if args.count == Some(0) {
        bail!("--count must be at least 1");
    }
    let collect = || {
        let mut c = stats::collect(ANSWER_TIMEOUT);
        if args.exited {
            let (snaps, bad) = stats::exited_in(&c.dirs);
            c.processes.extend(snaps);
            c.processes.sort_by_key(|s| s.pid);
            c.unanswered.extend(bad);
        }
        c
    };
    if let Some(at) = &args.serve {
        let addr: std::net::SocketAddr = match at.parse::<u16>() {
            Ok(port) => (std::net::Ipv4Addr::LOCALHOST, port).into(),
            Err(_) => at
                .parse()
                .with_context(|| format!("--serve wants [ADDR:]PORT, got `{at}`"))?,
        };
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("--serve: cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("uroce stat: serving http://{local}/metrics");
        metrics::serve(&listener, || {
            let c = collect();
            for u in &c.unanswered {
                eprintln!(
                    "uroce stat: {} (pid {}) did not answer: {}",
                    u.path.display(),
                    u.pid,
                    u.reason
                );
            }
            metrics::exposition(&select(&c.processes, &args))
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let Some(interval) = interval else {
        let c = collect();
        let code = report(&args, &c, None);
        return Ok(code);
    };
    let start = Instant::now();
    let mut prev: Option<Prev> = None;
    let mut n = 0u64;
    loop {
        let c = collect();
        if !args.json && !args.prometheus && prev.is_some() {
            print_out(&format!("--- +{:.2} s\n", start.elapsed().as_secs_f64()));
        }
        report(&args, &c, prev.as_ref());
        prev = Some(Prev::of(&select(&c.processes, &args)));
        n += 1;
        if args.count.is_some_and(|max| n >= max) {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(interval);
    }
}

/// The processes, keeping only the devices (and QPs) `args` asks for; processes left
/// with no device are dropped when a filter is given.
fn select(processes: &[Snapshot], args: &Args) -> Vec<Snapshot> {
    let filtered = args.device.is_some() || args.qp.is_some();
    processes
        .iter()
        .filter_map(|p| {
            let mut p = p.clone();
            if let Some(name) = &args.device {
                p.devices.retain(|d| &d.name == name);
            }
            if let Some(QpSel::One(qpn)) = args.qp {
                for d in &mut p.devices {
                    d.qps.retain(|q| q.qpn == qpn);
                }
                p.devices.retain(|d| !d.qps.is_empty());
            }
            (!filtered || !p.devices.is_empty()).then_some(p)
        })
        .collect()
}

/// One device a running `uroced` serves, and what it says of itself (`STATS`).
#[derive(Debug, serde::Serialize)]
struct DaemonDev {
    socket: String,
    device: String,
    /// `key value` pairs other than clients.
    counters: Vec<(String, String)>,
    /// One line per attached client process.
    clients: Vec<String>,
}

/// The devices the running daemon serves (`-d` filters), with their counters.
fn daemon_devices(args: &Args) -> Vec<DaemonDev> {
    abi::daemon::find()
        .into_iter()
        .filter(|d| args.device.as_ref().is_none_or(|n| *n == d.dev.name))
        .filter_map(|d| {
            let text = match abi::daemon::request(&d.socket, &abi::daemon::Msg::Stats) {
                Ok(abi::daemon::Msg::StatsText(t)) => t,
                Ok(_) => return None,
                Err(e) => {
                    eprintln!("uroce stat: {}: {e}", d.socket.display());
                    return None;
                }
            };
            let mut counters = Vec::new();
            let mut clients = Vec::new();
            for (k, v) in abi::daemon::parse_stats(&text) {
                match k.as_str() {
                    "client" => clients.push(v),
                    "device" | "addr" => {}
                    _ => counters.push((k, v)),
                }
            }
            Some(DaemonDev {
                socket: d.socket.display().to_string(),
                device: d.dev.name,
                counters,
                clients,
            })
        })
        .collect()
}

fn daemon_text(devs: &[DaemonDev]) -> String {
    let mut out = String::new();
    for d in devs {
        let kv: Vec<String> = d.counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(out, "daemon {} {} {}", d.device, d.socket, kv.join(" "));
        for c in &d.clients {
            let _ = writeln!(out, "  client {c}");
        }
    }
    out
}

/// Print one report; returns the exit status it deserves.
fn report(args: &Args, c: &Collected, prev: Option<&Prev>) -> ExitCode {
    let chosen = select(&c.processes, args);
    let daemons = if args.qp.is_none() {
        daemon_devices(args)
    } else {
        Vec::new()
    };
    for u in &c.unanswered {
        eprintln!(
            "uroce stat: {} (pid {}) did not answer: {}",
            u.path.display(),
            u.pid,
            u.reason
        );
    }
    let dirs: Vec<String> = c.dirs.iter().map(|d| d.display().to_string()).collect();
    let nothing = if c.processes.is_empty() {
        Some(format!(
            "no running uroce process publishes counters (looked in {})",
            dirs.join(", ")
        ))
    } else if chosen.is_empty() {
        Some(match (&args.device, args.qp) {
            (Some(d), Some(QpSel::One(q))) => {
                format!("no QP {q} on a device {d} in the running uroce processes")
            }
            (None, Some(QpSel::One(q))) => format!("no QP {q} in the running uroce processes"),
            (Some(d), _) => format!("no device {d} in the running uroce processes"),
            (None, _) => "no devices".to_string(),
        })
    } else {
        None
    };
    let mut out = String::new();
    if args.json {
        let obj = JsonReport {
            dirs: &dirs,
            daemons: &daemons,
            processes: &chosen,
            removed_stale: c.removed.iter().map(|p| p.display().to_string()).collect(),
            unanswered: c
                .unanswered
                .iter()
                .map(|u| JsonUnanswered {
                    pid: u.pid,
                    path: u.path.display().to_string(),
                    reason: &u.reason,
                })
                .collect(),
        };
        // Serialized straight from the structs, so the counters keep their order.
        match serde_json::to_string(&obj) {
            Ok(j) => {
                out.push_str(&j);
                out.push('\n');
            }
            Err(e) => eprintln!("uroce stat: {e}"),
        }
        print_out(&out);
        // The JSON stays one object on stdout; the explanation goes to stderr.
        if let Some(msg) = &nothing {
            eprintln!("uroce stat: {msg}");
        }
    } else if args.prometheus {
        print_out(&metrics::exposition(&chosen));
        if let Some(msg) = &nothing {
            eprintln!("uroce stat: {msg}");
        }
    } else {
        out.push_str(&daemon_text(&daemons));
        if let Some(msg) = &nothing {
            out.push_str(msg);
            out.push('\n');
        }
        out.push_str(&text(&chosen, args.qp, prev));
        print_out(&out);
    }
    match nothing {
        Some(_) if !c.processes.is_empty() && args.watch.is_none() => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// The `--json` object.
#[derive(Debug, serde::Serialize)]
struct JsonReport<'a> {
    dirs: &'a [String],
    daemons: &'a [DaemonDev],
    processes: &'a [Snapshot],
    removed_stale: Vec<String>,
    unanswered: Vec<JsonUnanswered<'a>>,
}

/// A process that did not answer, in `--json`.
#[derive(Debug, serde::Serialize)]
struct JsonUnanswered<'a> {
    pid: u32,
    path: String,
    reason: &'a str,
}

/// Write to stdout; a closed pipe (`uroce stat | head`) ends the program quietly.
fn print_out(s: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(s.as_bytes()).and_then(|()| stdout.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("uroce stat: writing the report: {e}");
    }
}

/// Key of one port or QP across reports.
type Key = (u32, String, Option<u32>);

/// The previous report's counters, for deltas.
#[derive(Debug, Default)]
struct Prev {
    at_ms: HashMap<u32, u64>,
    counters: HashMap<Key, CounterSet>,
}

impl Prev {
    fn of(processes: &[Snapshot]) -> Prev {
        let mut p = Prev::default();
        for s in processes {
            p.at_ms.insert(s.pid, s.time_ms);
            for d in &s.devices {
                p.counters
                    .insert((s.pid, d.name.clone(), None), d.counters.clone());
                for q in &d.qps {
                    p.counters
                        .insert((s.pid, d.name.clone(), Some(q.qpn)), q.counters.clone());
                }
            }
        }
        p
    }
}

/// `name value` pairs, or with a previous set only the changed ones as
/// `name value (+delta, rate/s)` (the rate when the interval `secs` is known and not 0).
fn counters_text(now: &CounterSet, before: Option<&CounterSet>, secs: Option<f64>) -> String {
    let mut s = String::new();
    match before {
        None => {
            for (n, v) in now.iter() {
                let _ = write!(s, " {n} {v}");
            }
        }
        Some(b) => {
            for (n, v) in now.iter() {
                let old = b.get(n).unwrap_or(0);
                if v != old {
                    let d = i128::from(v) - i128::from(old);
                    match secs.filter(|t| *t > 0.0) {
                        Some(t) => {
                            let _ = write!(s, " {n} {v} ({d:+}, {}/s)", rate(d as f64 / t));
                        }
                        None => {
                            let _ = write!(s, " {n} {v} ({d:+})");
                        }
                    }
                }
            }
            if s.is_empty() {
                s.push_str(" (no change)");
            }
        }
    }
    s
}

/// A rate for people: whole numbers when large, three significant digits when small.
fn rate(r: f64) -> String {
    if r.abs() >= 100.0 {
        format!("{r:.0}")
    } else if r.abs() >= 1.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.3}")
    }
}

/// The text report: per process a `pid` line and a `link` line per port, or with `--qp`
/// one `link ... lqpn` line per QP. With `prev`, counters print as changes (a port or QP
/// not in `prev` prints whole, marked `new`).
fn text(processes: &[Snapshot], qp: Option<QpSel>, prev: Option<&Prev>) -> String {
    let mut out = String::new();
    for s in processes {
        let interval = prev
            .and_then(|p| p.at_ms.get(&s.pid))
            .map(|t| s.time_ms.saturating_sub(*t) as f64 / 1000.0);
        let lookup = |key: Key| prev.and_then(|p| p.counters.get(&key));
        let delta_tag = |before: Option<&CounterSet>| match (prev, before, interval) {
            (None, _, _) => String::new(),
            (Some(_), Some(_), Some(secs)) => format!(" over {secs:.2}s"),
            (Some(_), _, _) => " new".to_string(),
        };
        if qp.is_none() {
            let cmd = if s.cmdline.is_empty() {
                String::new()
            } else {
                format!(": {}", s.cmdline.join(" "))
            };
            let gone = if s.exited { " (exited)" } else { "" };
            let _ = writeln!(out, "pid {} {}{gone}{cmd}", s.pid, s.program);
            if s.devices.is_empty() {
                let _ = writeln!(out, "  (no devices)");
            }
            for d in &s.devices {
                let before = lookup((s.pid, d.name.clone(), None));
                let _ = writeln!(
                    out,
                    "link {}/{} addr {}{}{}",
                    d.name,
                    d.port,
                    d.addr,
                    delta_tag(before),
                    counters_text(&d.counters, before, interval)
                );
            }
            continue;
        }
        for d in &s.devices {
            for q in &d.qps {
                let before = lookup((s.pid, d.name.clone(), Some(q.qpn)));
                let _ = writeln!(
                    out,
                    "link {}/{} lqpn {} pid {} comm {}{}{}{}",
                    d.name,
                    d.port,
                    q.qpn,
                    s.pid,
                    s.program,
                    if q.selective_repeat {
                        " selective_repeat"
                    } else {
                        ""
                    },
                    delta_tag(before),
                    counters_text(&q.counters, before, interval)
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce::stats::{DeviceSnapshot, ObjectCounts, QpSnapshot};

    fn snap(pid: u32, sent: u64) -> Snapshot {
        let counters = CounterSet::from_pairs([("sent_pkts", sent), ("rcvd_pkts", 7)]);
        Snapshot {
            version: 1,
            pid,
            program: "uroce".into(),
            cmdline: vec!["uroce".into(), "bench".into()],
            time_ms: 1_000 + sent,
            devices: vec![
                DeviceSnapshot {
                    name: "uroce0".into(),
                    addr: "127.0.0.1".parse().unwrap(),
                    port: 1,
                    counters: counters.clone(),
                    objects: ObjectCounts::default(),
                    qps: vec![
                        QpSnapshot {
                            qpn: 17,
                            counters: counters.clone(),
                            selective_repeat: false,
                        },
                        QpSnapshot {
                            qpn: 18,
                            counters: counters.clone(),
                            selective_repeat: false,
                        },
                    ],
                    cqs: vec![],
                },
                DeviceSnapshot {
                    name: "uroce1".into(),
                    addr: "127.0.0.2".parse().unwrap(),
                    port: 1,
                    counters,
                    objects: ObjectCounts::default(),
                    qps: vec![],
                    cqs: vec![],
                },
            ],
            exited: false,
        }
    }

    fn args(device: Option<&str>, qp: Option<QpSel>) -> Args {
        Args {
            device: device.map(str::to_string),
            qp,
            watch: None,
            count: None,
            json: false,
            prometheus: false,
            serve: None,
            exited: false,
        }
    }

    #[test]
    fn qp_argument() {
        assert_eq!(parse_qp("17"), Ok(QpSel::One(17)));
        assert_eq!(parse_qp("0x11"), Ok(QpSel::One(17)));
        assert_eq!(parse_qp("ALL"), Ok(QpSel::All));
        assert!(parse_qp("0x1000000").is_err());
        assert!(parse_qp("-1").is_err());
        assert!(parse_qp("q").is_err());
    }

    #[test]
    fn filters() {
        let ps = vec![snap(10, 5), snap(11, 6)];
        let all = select(&ps, &args(None, None));
        assert_eq!(all, ps);
        let one = select(&ps, &args(Some("uroce1"), None));
        assert_eq!(one.len(), 2);
        assert!(one
            .iter()
            .all(|p| p.devices.len() == 1 && p.devices[0].name == "uroce1"));
        assert!(select(&ps, &args(Some("nope"), None)).is_empty());
        let q = select(&ps, &args(None, Some(QpSel::One(18))));
        assert!(q
            .iter()
            .all(|p| p.devices.len() == 1 && p.devices[0].qps.len() == 1));
        assert!(select(&ps, &args(Some("uroce1"), Some(QpSel::One(18)))).is_empty());
        let every = select(&ps, &args(None, Some(QpSel::All)));
        assert_eq!(every, ps);
    }

    #[test]
    fn text_lines_and_deltas() {
        let first = vec![snap(10, 5)];
        let t = text(&first, None, None);
        assert_eq!(
            t,
            "pid 10 uroce: uroce bench\n\
             link uroce0/1 addr 127.0.0.1 sent_pkts 5 rcvd_pkts 7\n\
             link uroce1/1 addr 127.0.0.2 sent_pkts 5 rcvd_pkts 7\n"
        );
        let q = text(&first, Some(QpSel::One(17)), None);
        assert!(q.starts_with("link uroce0/1 lqpn 17 pid 10 comm uroce sent_pkts 5 rcvd_pkts 7\n"));
        let prev = Prev::of(&first);
        let second = vec![snap(10, 1005), snap(12, 1)];
        let t = text(&second, None, Some(&prev));
        assert!(
            t.contains("link uroce0/1 addr 127.0.0.1 over 1.00s sent_pkts 1005 (+1000, 1000/s)\n"),
            "{t}"
        );
        assert!(t.contains("pid 12 uroce"), "{t}");
        assert!(
            t.contains("link uroce0/1 addr 127.0.0.1 new sent_pkts 1 rcvd_pkts 7\n"),
            "{t}"
        );
        let same = text(&first, None, Some(&Prev::of(&first)));
        assert!(same.contains("(no change)"), "{same}");
    }
}
