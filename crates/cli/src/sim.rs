//! `uroce sim`: run a checked workload between two endpoints in the deterministic simulator.
//!
//! By default the endpoints are two real device datapaths (`nic::simhost::workload`); with
//! `--transport`, two bare transport QPs (`sim::workload`). Every byte delivered and every
//! completion is verified. The human output ends with a verdict line; `--json` prints one
//! object. Exit status 1 on any integrity violation, 0 otherwise.
//!
//! JSON keys (devices): `seed`, `passed`, `device` (true), `messages_posted`,
//! `messages_completed`, `bytes_verified`, `retransmissions`, `timeouts`, `rnr_naks`,
//! `status_counts`, `violations`, `violation_details`, `virtual_time_ms`, `network` (object:
//! `frames_delivered`, `dropped`, `icrc_errors`).
//!
//! JSON keys (`--transport`): `seed`, `messages_posted`, `messages_completed`, `bytes_verified`,
//! `payload_packets`, `retransmissions`, `rto_probes`, `timeouts`, `naks` (object: `seq`,
//! `rnr`, `invalid_request`, `remote_access`, `remote_op`), `duplicates_received`, `status_counts` (object keyed by the
//! completion status text of rdma-core's `ibv_wc_status_str`, e.g. `"success"`,
//! `"transport retry counter exceeded"`, `"Work Request Flushed Error"`), `violations`
//! (integer), `violation_details` (array of strings), `virtual_time_ms`, `last_completion_ms`,
//! `final_qp_states`, `network` (object of frame counters), `passed`.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};
use serde_json::json;
use sim::transport::{Mtu, Time};
use sim::workload::{self, Op, Report, WorkloadConfig};
use sim::LinkConfig;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seed for every random choice (network faults, workload); default: from the clock.
    #[arg(long)]
    seed: Option<u64>,
    /// Work requests to run (split over both directions).
    #[arg(long, default_value_t = 10_000)]
    messages: u64,
    /// Message size range in bytes, `MIN..MAX` (or a single size).
    #[arg(long, default_value = "1..4096")]
    size: String,
    /// Operation mix: comma list of send, write, read, atomic.
    #[arg(long, default_value = "send,write,read,atomic")]
    ops: String,
    /// Probability a frame is lost (0–1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Probability a frame is duplicated (0–1).
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Probability a frame is delayed past later ones (0–1).
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// A reordered frame is held back a uniform extra time up to this many virtual µs
    /// (default: up to ten propagation delays plus 1 µs). A user-space impairer such as
    /// netfault holds packets up to 2,000 µs.
    #[arg(long)]
    reorder_us: Option<f64>,
    /// Probability 1–3 bits of a frame are flipped (0–1).
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024)]
    mtu: u32,
    /// Cut every link for good at this virtual time (milliseconds).
    #[arg(long, value_name = "MS")]
    partition_at: Option<f64>,
    /// Transport retry count 0–7 (default: 7 — retry forever, as Linux rxe — or 3 with
    /// --partition-at, so the partition ends in "transport retry counter exceeded").
    #[arg(long)]
    retry_cnt: Option<u8>,
    /// RNR retry count 0–7 (7 = forever).
    #[arg(long, default_value_t = 7)]
    rnr_retry: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^N).
    #[arg(long, default_value_t = 8)]
    timeout: u8,
    /// Work requests outstanding per direction.
    #[arg(long, default_value_t = 32)]
    window: u32,
    /// The requesters' limit on unacknowledged PSNs (the NIC's default is 128, as rxe).
    #[arg(long, default_value_t = 16)]
    max_unacked_psns: u32,
    /// Receive WQEs each side keeps posted.
    #[arg(long, default_value_t = 128)]
    recv_depth: u32,
    /// Re-post consumed receive WQEs only after this many virtual µs (exercises RNR NAKs).
    #[arg(long, default_value_t = 0)]
    recv_delay_us: u64,
    /// One-way propagation delay (virtual µs).
    #[arg(long, default_value_t = 1.0)]
    delay_us: f64,
    /// Line rate in Gbit/s (0 = infinitely fast; --transport only).
    #[arg(long, default_value_t = 10)]
    rate_gbps: u64,
    /// Traffic in one direction only (default: both QPs send and respond).
    #[arg(long)]
    one_way: bool,
    /// Selective repeat (docs/wire.md §5.6) on both QPs, as two uroce peers that agreed to
    /// it run (default: IBTA go-back-N).
    #[arg(long)]
    selective_repeat: bool,
    /// Run the workload on two real device datapaths — the NIC's command handlers, rings,
    /// MR table and DMA checks, CQs and timers, driven on the virtual clock
    /// (`nic::simhost`) — on a wire with --loss/--dup/--reorder/--reorder-us/--corrupt/
    /// --delay-us and --partition-at. This is the default; the flag remains for scripts
    /// that name it.
    #[arg(long, conflicts_with = "transport")]
    device: bool,
    /// Run the workload on two bare transport QPs (`crates/sim`: the transport alone, its
    /// memory checked by the NIC's MR table) instead of two device datapaths: what adds
    /// --rate-gbps and --max-unacked-psns, and reports frame, NAK and RTO counters.
    #[arg(long)]
    transport: bool,
    /// Print one JSON object instead of the human summary.
    #[arg(long)]
    json: bool,
}

fn parse_size(s: &str) -> anyhow::Result<(u32, u32)> {
    let parse = |x: &str| {
        x.trim()
            .parse::<u32>()
            .with_context(|| format!("bad size {x:?}"))
    };
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (parse(a)?, parse(b.trim_start_matches('='))?),
        None => {
            let v = parse(s)?;
            (v, v)
        }
    };
    if lo > hi {
        bail!("--size: MIN must not exceed MAX");
    }
    if hi > 1 << 20 {
        bail!("--size: at most 1 MiB per message in the simulator");
    }
    Ok((lo, hi))
}

fn probability(name: &str, p: f64) -> anyhow::Result<f64> {
    if !(0.0..=1.0).contains(&p) {
        bail!("--{name} must be between 0 and 1");
    }
    Ok(p)
}

fn config(args: &Args, seed: u64) -> anyhow::Result<WorkloadConfig> {
    let (size_min, size_max) = parse_size(&args.size)?;
    let mut ops = Vec::new();
    for o in args.ops.split(',').filter(|s| !s.trim().is_empty()) {
        let op = Op::parse(o).with_context(|| format!("--ops: unknown operation {o:?}"))?;
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    if ops.is_empty() {
        bail!("--ops: need at least one of send, write, read, atomic");
    }
    let mtu = Mtu::from_bytes(args.mtu).context("--mtu must be 256, 512, 1024, 2048 or 4096")?;
    if args.retry_cnt.is_some_and(|r| r > 7) || args.rnr_retry > 7 {
        bail!("--retry-cnt and --rnr-retry are 3-bit values (0-7)");
    }
    if args.timeout == 0 || args.timeout > 31 {
        bail!("--timeout must be 1-31 (0 would disable the ACK timer)");
    }
    let partition_at = match args.partition_at {
        Some(ms) if !(0.0..=1e9).contains(&ms) => bail!("--partition-at out of range"),
        Some(ms) => Some(Time::from_nanos((ms * 1e6) as u64)),
        None => None,
    };
    if !(0.0..=1e6).contains(&args.delay_us) {
        bail!("--delay-us out of range");
    }
    let delay_ns = (args.delay_us * 1e3) as u64;
    let link = LinkConfig {
        loss: probability("loss", args.loss)?,
        dup: probability("dup", args.dup)?,
        reorder: probability("reorder", args.reorder)?,
        corrupt: probability("corrupt", args.corrupt)?,
        delay_ns,
        jitter_ns: delay_ns / 5,
        reorder_delay_ns: match args.reorder_us {
            Some(us) if (0.0..=1e7).contains(&us) => (delay_ns, delay_ns + (us * 1e3) as u64 + 1),
            Some(_) => bail!("--reorder-us must be 0..10000000"),
            None => (delay_ns, delay_ns * 10 + 1_000),
        },
        rate_gbps: args.rate_gbps,
        partition_at,
        bottleneck: None,
    };
    Ok(WorkloadConfig {
        seed,
        messages: args.messages,
        size_min,
        size_max,
        ops,
        link,
        mtu,
        retry_cnt: args.retry_cnt,
        rnr_retry: args.rnr_retry,
        timeout: args.timeout,
        window: args.window.max(1),
        recv_depth: args.recv_depth.max(1),
        recv_delay_ns: args.recv_delay_us.saturating_mul(1_000),
        bidirectional: !args.one_way,
        max_unacked_psns: args.max_unacked_psns.max(1),
        selective_repeat: [args.selective_repeat; 2],
        ..WorkloadConfig::default()
    })
}

fn report_json(r: &Report) -> serde_json::Value {
    let n = &r.net;
    json!({
        "seed": r.seed,
        "passed": r.passed(),
        "messages_posted": r.messages_posted,
        "messages_completed": r.messages_completed,
        "bytes_verified": r.bytes_verified,
        "payload_packets": r.payload_packets,
        "retransmissions": r.retransmissions,
        "rto_probes": r.rto_probes,
        "timeouts": r.timeouts,
        "naks": {
            "seq": r.naks.seq,
            "rnr": r.naks.rnr,
            "invalid_request": r.naks.invalid_request,
            "remote_access": r.naks.remote_access,
            "remote_op": r.naks.remote_op,
        },
        "duplicates_received": r.duplicates_received,
        "status_counts": r.status_counts,
        "violations": r.violations,
        "violation_details": r.violation_details,
        "virtual_time_ms": r.virtual_time_ns as f64 / 1e6,
        "last_completion_ms": r.last_completion_ns as f64 / 1e6,
        "final_qp_states": [r.final_states[0].name(), r.final_states[1].name()],
        "network": {
            "frames_sent": n.frames_sent,
            "frames_delivered": n.frames_delivered,
            "dropped": n.dropped,
            "duplicated": n.duplicated,
            "reordered": n.reordered,
            "corrupted": n.corrupted,
            "corrupt_detected": n.corrupt_detected,
            "corrupt_masked_delivered": n.corrupt_masked_delivered,
            "undetected_corruption": n.undetected_corruption,
            "partition_drops": n.partition_drops,
        },
    })
}

fn print_human(r: &Report, args: &Args, wall_s: f64) {
    let n = &r.net;
    println!(
        "uroce sim --transport: seed {} — two transport QPs, {} messages, sizes {}, ops {}, mtu {}",
        r.seed, args.messages, args.size, args.ops, args.mtu
    );
    println!(
        "  link: loss {} dup {} reorder {} corrupt {}{}{}",
        args.loss,
        args.dup,
        args.reorder,
        args.corrupt,
        args.partition_at
            .map(|p| format!(", partition at {p} ms"))
            .unwrap_or_default(),
        if args.selective_repeat {
            "; selective repeat"
        } else {
            ""
        }
    );
    println!(
        "  completed {} of {} work requests, {} bytes verified, {:.3} virtual ms ({:.2} s wall)",
        r.messages_completed,
        r.messages_posted,
        r.bytes_verified,
        r.virtual_time_ns as f64 / 1e6,
        wall_s
    );
    println!(
        "  last completion at {:.3} virtual ms: {:.1} MB/s verified",
        r.last_completion_ns as f64 / 1e6,
        r.bytes_verified as f64 / (r.last_completion_ns.max(1) as f64 / 1e3)
    );
    println!(
        "  frames: {} sent, {} delivered, {} dropped, {} duplicated, {} reordered, {} corrupted ({} caught by ICRC/checksum, {} harmless)",
        n.frames_sent, n.frames_delivered, n.dropped, n.duplicated, n.reordered, n.corrupted, n.corrupt_detected, n.corrupt_masked_delivered
    );
    println!(
        "  transport: {} retransmissions, {} timeouts, {} RTO probes, NAKs seq {} rnr {} inv-req {} rem-access {} rem-op {}, {} duplicates received",
        r.retransmissions, r.timeouts, r.rto_probes, r.naks.seq, r.naks.rnr, r.naks.invalid_request, r.naks.remote_access, r.naks.remote_op, r.duplicates_received
    );
    let per = |x: u64| x as f64 / r.payload_packets.max(1) as f64;
    println!(
        "  per payload packet ({}): {:.3} frames on the wire, {:.3} request retransmissions",
        r.payload_packets,
        per(n.frames_sent),
        per(r.retransmissions)
    );
    let statuses: Vec<String> = r
        .status_counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    println!("  completions: {}", statuses.join(", "));
    println!(
        "  final QP states: {} / {}",
        r.final_states[0], r.final_states[1]
    );
    for v in &r.violation_details {
        println!("  VIOLATION {v}");
    }
    if r.passed() {
        println!("verdict: PASS — 0 violations (seed {})", r.seed);
    } else {
        println!(
            "verdict: FAIL — {} violation(s); replay with: uroce sim --transport --seed {} (same flags)",
            r.violations, r.seed
        );
    }
}

/// `--device`: the workload on two real device datapaths (`nic::simhost::workload`).
fn run_device(args: &Args, seed: u64) -> anyhow::Result<ExitCode> {
    use nic::simhost::workload::{self as dw, RunConfig};
    // Options of the transport-only simulator are refused, not ignored.
    if args.rate_gbps != 10 || args.max_unacked_psns != 16 {
        bail!("--rate-gbps and --max-unacked-psns are options of the transport simulator (--transport)");
    }
    // The same flags, checked and converted the same way as for the transport simulator.
    let w = config(args, seed)?;
    let mut ops = [false; 4];
    for op in &w.ops {
        ops[*op as usize] = true;
    }
    let link = &w.link;
    let cfg = RunConfig {
        seed,
        messages: w.messages,
        size_min: w.size_min,
        size_max: w.size_max,
        ops,
        loss: link.loss,
        dup: link.dup,
        reorder: link.reorder,
        // The transport simulator's bounds are whole delays; the device wire's is the extra.
        reorder_ns: link.reorder_delay_ns.1.saturating_sub(link.delay_ns).max(1),
        corrupt: link.corrupt,
        delay_ns: link.delay_ns,
        window: w.window.clamp(1, 64),
        partition_at_ns: link.partition_at.map(|t| t.as_nanos()),
        retry_cnt: w
            .retry_cnt
            .unwrap_or(if link.partition_at.is_some() { 3 } else { 7 }),
        timeout: w.timeout,
        rnr_retry: w.rnr_retry,
        path_mtu: w.mtu,
        selective_repeat: w.selective_repeat,
        recv_depth: w.recv_depth,
        recv_delay_ns: w.recv_delay_ns,
        two_way: w.bidirectional,
        ..RunConfig::default()
    };
    let started = Instant::now();
    let r = dw::run(&cfg);
    let wall_s = started.elapsed().as_secs_f64();
    let statuses: BTreeMap<String, u64> = r
        .statuses
        .iter()
        .map(|(k, v)| (wc_status_text(*k).to_string(), *v))
        .collect();
    if args.json {
        println!(
            "{}",
            json!({
                "seed": r.seed,
                "passed": r.passed(),
                "device": true,
                "messages_posted": r.posted,
                "messages_completed": r.completed,
                "bytes_verified": r.bytes_verified,
                "retransmissions": r.retransmissions,
                "timeouts": r.timeouts,
                "rnr_naks": r.rnr_naks,
                "status_counts": statuses,
                "violations": r.violations,
                "violation_details": r.details,
                "virtual_time_ms": r.virtual_time_ns as f64 / 1e6,
                "network": {
                    "frames_delivered": r.delivered,
                    "dropped": r.lost,
                    "icrc_errors": r.icrc_errors,
                },
            })
        );
    } else {
        println!(
            "uroce sim: seed {} — two devices, {} messages {}, sizes {}, ops {}, mtu {}{}",
            r.seed,
            args.messages,
            if args.one_way { "A→B" } else { "A⇄B" },
            args.size,
            args.ops,
            args.mtu,
            if args.selective_repeat {
                ", selective repeat"
            } else {
                ""
            }
        );
        println!(
            "  wire: loss {} dup {} reorder {} corrupt {}{}",
            args.loss,
            args.dup,
            args.reorder,
            args.corrupt,
            args.partition_at
                .map(|p| format!(", cut at {p} ms"))
                .unwrap_or_default()
        );
        println!(
            "  completed {} of {} work requests, {} bytes verified, {:.3} virtual ms ({:.2} s wall)",
            r.completed,
            r.posted,
            r.bytes_verified,
            r.virtual_time_ns as f64 / 1e6,
            wall_s
        );
        println!(
            "  datagrams: {} delivered, {} lost, {} dropped by the ICRC check; {} retransmissions, {} ACK timeouts, {} RNR NAKs",
            r.delivered, r.lost, r.icrc_errors, r.retransmissions, r.timeouts, r.rnr_naks
        );
        let list: Vec<String> = statuses.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        println!("  completions: {}", list.join(", "));
        for v in &r.details {
            println!("  VIOLATION {v}");
        }
        if r.passed() {
            println!("verdict: PASS — 0 violations (seed {})", r.seed);
        } else {
            println!(
                "verdict: FAIL — {} violation(s); replay with: uroce sim --seed {} (same flags)",
                r.violations, r.seed
            );
        }
    }
    if !r.passed() {
        eprintln!("uroce sim: FAILED with seed {}", r.seed);
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// rdma-core's `ibv_wc_status_str` text of a status value.
fn wc_status_text(status: u32) -> &'static str {
    sim::transport::WcStatus::str_of_raw(status)
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let seed = args.seed.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut s = t;
        sim::rng::splitmix64(&mut s)
    });
    if !args.transport {
        return run_device(&args, seed);
    }
    let cfg = config(&args, seed)?;
    let started = Instant::now();
    let report = workload::run(cfg);
    let wall_s = started.elapsed().as_secs_f64();
    if args.json {
        println!("{}", report_json(&report));
    } else {
        print_human(&report, &args, wall_s);
    }
    if !report.passed() {
        eprintln!("uroce sim: FAILED with seed {}", report.seed);
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
