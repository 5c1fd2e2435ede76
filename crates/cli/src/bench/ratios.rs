//! `uroce bench ratios [--json]`: the performance figures of uroce against baselines of this
//! machine measured in the same run, beside the goals the project holds itself to
//! (docs/perftest.md §9):
//!
//! | figure | baseline | goal |
//! |---|---|---|
//! | same-device 64 KiB `write_bw --loopback` (MB/s) | memcpy of 64 KiB chunks on one core | ≥ 0.7 × |
//! | same-device 1 B `write_lat --loopback` t_typical | 1-byte UDP ping-pong between two processes, one way | ≤ 0.25 × |
//! | two devices 64 KiB `write_bw --pair` | TCP over loopback (iperf3 if installed, else uroce's own stream) | ≥ 1.0 × |
//! | two devices 1 B `write_lat --pair` t_typical | the UDP one-way time | ≤ 1.3 × |
//! | same-device 8 B `write_bw --loopback --post_list 32` | — | ≥ 5 Mpps |
//! | 1,000 QPs 64 KiB `write_bw --loopback -q 1000 -D SECS` | the same with one QP (beside it: memcpy between two 64 MiB buffers) | ≥ 0.8 × |
//! | an idle device's CPU time (`uroce pingpong` waiting for a peer, 5 × SECS) | — | ≤ 0.1 % |
//!
//! Every uroce figure is a `uroce bench ... --json` child process with perftest's defaults
//! (tx depth 128, MTU 1024; `-n N` sets every child's iterations); `-D SECS` sets the
//! baselines' measuring time (default 2 s);
//! `--pair A,B` the two devices (default 127.0.0.1,127.0.0.2); the same-device runs use the
//! first device of `UROCE_DEVICES`. Nothing here is asserted in a test: it is a benchmark.

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use serde::Serialize;

use super::Args;

/// One line of the table.
#[derive(Debug, Serialize)]
struct Figure {
    figure: &'static str,
    measured: f64,
    unit: &'static str,
    baseline: Option<f64>,
    baseline_name: &'static str,
    ratio: f64,
    goal: String,
    met: bool,
}

/// The baselines of the run.
#[derive(Debug, Serialize)]
struct Baselines {
    memcpy_mb_s: f64,
    /// Between two 64 MiB buffers: what one core copies with the 1,000-QP run's footprint
    /// (not the goal's baseline, which is one QP; shown beside it).
    memcpy_64mib_to_64mib_mb_s: f64,
    udp_one_way_us: f64,
    tcp_mb_s: f64,
    tcp_source: String,
}

#[derive(Debug, Serialize)]
struct Report {
    machine: String,
    baselines: Baselines,
    figures: Vec<Figure>,
    goals_met: usize,
}

/// Bytes per memcpy and per 64 KiB message.
const CHUNK: usize = 64 * 1024;

pub fn run(args: &Args) -> Result<ExitCode> {
    if let Some(port) = args.ratios_udp_echo {
        return udp_echo(port);
    }
    let secs = Duration::from_secs(args.duration.unwrap_or(2));
    let pair = args
        .pair
        .clone()
        .unwrap_or_else(|| "127.0.0.1,127.0.0.2".to_string());
    let say = |what: &str| {
        if !args.json {
            eprintln!("uroce bench ratios: {what} ...");
        }
    };
    say("memcpy of 64 KiB chunks");
    let memcpy = memcpy_mb_s(secs, CHUNK);
    say("memcpy of 64 KiB chunks between two 64 MiB buffers");
    let memcpy_spread = memcpy_mb_s(secs, 64 << 20);
    say("1-byte UDP ping-pong between two processes");
    let udp = udp_one_way_us(secs)?;
    say("TCP over loopback");
    let (tcp, tcp_source) = tcp_mb_s(secs)?;
    // Iterations of each uroce run: -n N for all, else enough for about a second each here.
    let n = |default: u64| args.iters.unwrap_or(default).to_string();
    say("uroce bench write_bw --loopback -s 65536");
    let lb_bw = bench(&["write_bw", "--loopback", "-s", "65536", "-n", &n(20_000)])?;
    say("uroce bench write_lat --loopback -s 1");
    let lb_lat = bench(&["write_lat", "--loopback", "-s", "1", "-n", &n(20_000)])?;
    say("uroce bench write_bw --pair -s 65536");
    let pr_bw = bench(&["write_bw", "--pair", &pair, "-s", "65536", "-n", &n(5_000)])?;
    say("uroce bench write_lat --pair -s 1");
    let pr_lat = bench(&["write_lat", "--pair", &pair, "-s", "1", "-n", &n(20_000)])?;
    say("uroce bench write_bw --loopback -s 8 --post_list 32");
    // perftest wants the iterations a multiple of the post list.
    let n32 = (args.iters.unwrap_or(400_000).max(32) / 32 * 32).to_string();
    let rate = bench(&["write_bw", "--loopback", "-s", "8", "-l", "32", "-n", &n32])?;
    let d = secs.as_secs().max(1).to_string();
    say("uroce bench write_bw --loopback -s 65536 -q 1 and -q 1000");
    let one_qp = bench(&["write_bw", "--loopback", "-s", "65536", "-D", &d])?;
    let many_qps = bench(&[
        "write_bw",
        "--loopback",
        "-s",
        "65536",
        "-q",
        "1000",
        "-D",
        &d,
    ])?;
    let idle_span = secs * 5;
    say("an idle device (uroce pingpong waiting for a peer)");
    let idle = idle_cpu_percent(idle_span)?;

    let field = |v: &serde_json::Value, k: &str| -> Result<f64> {
        v[k].as_f64()
            .ok_or_else(|| anyhow!("uroce bench --json gave no {k}: {v}"))
    };
    let mb = |v: &serde_json::Value| field(v, "bw_average");
    let ratio_fig =
        |figure, measured: f64, unit, base: f64, base_name, goal_le: bool, goal: f64| {
            let ratio = measured / base;
            Figure {
                figure,
                measured,
                unit,
                baseline: Some(base),
                baseline_name: base_name,
                ratio,
                goal: format!("{} {goal}", if goal_le { "<=" } else { ">=" }),
                met: if goal_le {
                    ratio <= goal
                } else {
                    ratio >= goal
                },
            }
        };
    let mut figures = vec![
        ratio_fig(
            "same-device 64 KiB write_bw --loopback / memcpy",
            mb(&lb_bw)?,
            "MB/s",
            memcpy,
            "memcpy MB/s",
            false,
            0.7,
        ),
        ratio_fig(
            "same-device 1 B write_lat --loopback t_typical / UDP one-way",
            field(&lb_lat, "t_typical_us")?,
            "us",
            udp,
            "UDP one-way us",
            true,
            0.25,
        ),
        ratio_fig(
            "two devices 64 KiB write_bw --pair / TCP",
            mb(&pr_bw)?,
            "MB/s",
            tcp,
            "TCP MB/s",
            false,
            1.0,
        ),
        ratio_fig(
            "two devices 1 B write_lat --pair t_typical / UDP one-way",
            field(&pr_lat, "t_typical_us")?,
            "us",
            udp,
            "UDP one-way us",
            true,
            1.3,
        ),
    ];
    figures.push(ratio_fig(
        "1,000 QPs 64 KiB write_bw --loopback -q 1000 / one QP",
        mb(&many_qps)?,
        "MB/s",
        mb(&one_qp)?,
        "one QP MB/s",
        false,
        0.8,
    ));
    let mpps = field(&rate, "msg_rate_mpps")?;
    figures.push(Figure {
        figure: "same-device 8 B write_bw --loopback --post_list 32 message rate",
        measured: mpps,
        unit: "Mpps",
        baseline: None,
        baseline_name: "-",
        ratio: mpps,
        goal: ">= 5 Mpps".into(),
        met: mpps >= 5.0,
    });
    figures.push(Figure {
        figure: "an idle device's CPU time, % of one CPU",
        measured: idle,
        unit: "%",
        baseline: None,
        baseline_name: "-",
        ratio: idle,
        goal: "<= 0.1 %".into(),
        met: idle <= 0.1,
    });
    let report = Report {
        machine: super::compare::machine_line(),
        baselines: Baselines {
            memcpy_mb_s: memcpy,
            memcpy_64mib_to_64mib_mb_s: memcpy_spread,
            udp_one_way_us: udp,
            tcp_mb_s: tcp,
            tcp_source,
        },
        goals_met: figures.iter().filter(|f| f.met).count(),
        figures,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{}", table(&report));
    }
    Ok(ExitCode::SUCCESS)
}

fn table(r: &Report) -> String {
    let mut s = format!(
        "baselines: memcpy {:.0} MB/s (between two 64 MiB buffers {:.0} MB/s), UDP one-way \
         {:.2} us, TCP {:.0} MB/s ({})\n",
        r.baselines.memcpy_mb_s,
        r.baselines.memcpy_64mib_to_64mib_mb_s,
        r.baselines.udp_one_way_us,
        r.baselines.tcp_mb_s,
        r.baselines.tcp_source
    );
    s.push_str(&format!(
        "{:<64} {:>12} {:>8} {:>10} {:>6}\n",
        "figure", "measured", "ratio", "goal", "met"
    ));
    for f in &r.figures {
        s.push_str(&format!(
            "{:<64} {:>7.2} {:<4} {:>8.3} {:>10} {:>6}\n",
            f.figure,
            f.measured,
            f.unit,
            f.ratio,
            f.goal,
            if f.met { "yes" } else { "no" }
        ));
    }
    s.push_str(&format!(
        "{} of {} goals met ({})\n",
        r.goals_met,
        r.figures.len(),
        r.machine
    ));
    s
}

/// One `uroce bench` child with `--json`: its last JSON line.
fn bench(args: &[&str]) -> Result<serde_json::Value> {
    let exe = std::env::current_exe().context("finding the uroce executable")?;
    let out = Command::new(exe)
        .arg("bench")
        .args(args)
        .args(["--json", "--timeout", "120"])
        .stdin(Stdio::null())
        .output()
        .context("running uroce bench")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "uroce bench {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow!("uroce bench {} printed no JSON", args.join(" ")))?;
    Ok(serde_json::from_str(line)?)
}

/// memcpy bandwidth on one core: a 64 MiB source copied into a `dst_bytes` destination in
/// 64 KiB chunks, MB/s. With one chunk's destination the source streams from memory, as an
/// RDMA payload does; with 64 MiB the destination does too, as the buffers of 1,000 QPs of
/// perftest's 64 KiB (one per QP on each side) do.
fn memcpy_mb_s(secs: Duration, dst_bytes: usize) -> f64 {
    let src = vec![0x5au8; 64 << 20];
    let mut dst = vec![0u8; dst_bytes.max(CHUNK)];
    let start = Instant::now();
    let mut bytes = 0u64;
    let mut at = 0;
    while start.elapsed() < secs {
        for c in src.chunks_exact(CHUNK) {
            if at + CHUNK > dst.len() {
                at = 0;
            }
            if let Some(d) = dst.get_mut(at..at + CHUNK) {
                d.copy_from_slice(c);
            }
            at += CHUNK;
            std::hint::black_box(&mut dst);
            bytes += CHUNK as u64;
        }
    }
    bytes as f64 / start.elapsed().as_secs_f64() / 1e6
}

/// The child: echo every datagram on 127.0.0.1:`port` back to its sender until a 0-byte one.
fn udp_echo(port: u16) -> Result<ExitCode> {
    let s = UdpSocket::bind(("127.0.0.1", port))?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut b = [0u8; 16];
    loop {
        let (n, from) = s.recv_from(&mut b)?;
        if n == 0 {
            return Ok(ExitCode::SUCCESS);
        }
        s.send_to(&b[..n], from)?;
    }
}

/// Half the median round trip of a 1-byte UDP ping-pong with an echoing child process, µs.
fn udp_one_way_us(secs: Duration) -> Result<f64> {
    let probe = UdpSocket::bind("127.0.0.1:0")?;
    let port = probe.local_addr()?.port();
    drop(probe);
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["bench", "ratios", "--ratios-udp-echo", &port.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut ready = [0u8; 6];
    child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no child stdout"))?
        .read_exact(&mut ready)?;
    let s = UdpSocket::bind("127.0.0.1:0")?;
    s.connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut rtts = Vec::new();
    let mut b = [0u8; 16];
    let start = Instant::now();
    while start.elapsed() < secs {
        let t = Instant::now();
        s.send(&[1])?;
        s.recv(&mut b)?;
        rtts.push(t.elapsed().as_nanos() as u64);
    }
    let _ = s.send(&[]);
    let _ = child.wait();
    rtts.sort_unstable();
    let med = rtts
        .get(rtts.len() / 2)
        .copied()
        .ok_or_else(|| anyhow!("no UDP round trip"))?;
    Ok(med as f64 / 2.0 / 1000.0)
}

/// What an idle device costs: `uroce pingpong` (a device of `UROCE_DEVICES`, its engine, a
/// context, CQ and QP) waiting for a peer that never comes; its threads' time on a CPU over
/// `span` (the first field of `/proc/PID/task/*/schedstat`), in % of one CPU.
fn idle_cpu_percent(span: Duration) -> Result<f64> {
    let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = probe.local_addr()?.port();
    drop(probe);
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["pingpong", "-p", &port.to_string(), "--timeout", "600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting uroce pingpong")?;
    // Its setup done (device, QP), it waits in accept.
    std::thread::sleep(Duration::from_secs(1));
    let cpu = |pid: u32| -> Result<u64> {
        let mut ns = 0;
        for t in std::fs::read_dir(format!("/proc/{pid}/task"))? {
            let stat = std::fs::read_to_string(t?.path().join("schedstat"))?;
            ns += stat
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
                .ok_or_else(|| anyhow!("unreadable schedstat: {stat}"))?;
        }
        Ok(ns)
    };
    let measured = (|| {
        let before = cpu(child.id())?;
        let t = Instant::now();
        std::thread::sleep(span);
        let after = cpu(child.id())?;
        if child.try_wait()?.is_some() {
            bail!("uroce pingpong ended while it was measured");
        }
        Ok(after.saturating_sub(before) as f64 / t.elapsed().as_nanos() as f64 * 100.0)
    })();
    let _ = child.kill();
    let _ = child.wait();
    measured
}

/// TCP throughput over loopback, MB/s: iperf3 (-t SECS, one stream) when installed, else
/// uroce's own two-thread stream (`bench compare`'s TCP baseline).
fn tcp_mb_s(secs: Duration) -> Result<(f64, String)> {
    if let Some(v) = iperf3(secs) {
        return Ok((v, "iperf3".into()));
    }
    let (gbps, _) = super::compare::bw_tcp(secs)?;
    Ok((
        gbps * 1e9 / 8.0 / 1e6,
        "uroce's own TCP stream: iperf3 is not installed".into(),
    ))
}

fn iperf3(secs: Duration) -> Option<f64> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    let port = l.local_addr().ok()?.port();
    drop(l);
    let mut server = Command::new("iperf3")
        .args(["-s", "-1", "-B", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300));
    let out = Command::new("iperf3")
        .args(["-c", "127.0.0.1", "-p", &port.to_string(), "-J", "-t"])
        .arg(secs.as_secs().max(1).to_string())
        .output()
        .ok();
    let _ = server.kill();
    let _ = server.wait();
    let v: serde_json::Value = serde_json::from_slice(&out?.stdout).ok()?;
    v["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .map(|b| b / 8.0 / 1e6)
}
