//! `uroce bench compare [--json]`: the comparison table of the README, measured on
//! this machine in one run. Four paths:
//!
//! * `tcp` — a TCP baseline over loopback (own implementation, `TCP_NODELAY`);
//! * `slow_path` — RDMA WRITEs where every post and every poll is a command round trip
//!   through the control plane (`post_send_cmd`, `poll_cmd`), one device;
//! * `fast_loopback` — the fast path (rings and doorbells) on one device;
//! * `fast_udp` — the fast path between two devices over UDP (`--pair`, default
//!   127.0.0.1,127.0.0.2).
//!
//! Per path, every figure is measured, none assumed:
//!
//! * `lat_1b_us`: half the median round trip of a 1-byte ping-pong. One application
//!   thread plays both ends (for TCP: write on one socket, read on the other; for RDMA:
//!   post a WRITE, spin on the target byte, then the reply the other way), so every path
//!   is measured by the same harness and TCP is measured at its best (the data is already
//!   there when `read` is called, so the thread never sleeps).
//! * `bw_64k_gbps`: 64 KiB messages for about a second: TCP with a sender and a receiver
//!   thread (the natural way to stream over TCP), RDMA with one thread keeping 64 WRITEs
//!   in flight (the responder needs no thread).
//! * `cpu_us_per_op`: CPU time of the whole process (`getrusage(RUSAGE_SELF)`: the
//!   application thread, the device's engine and control plane) during the ping-pong,
//!   per one-way message.
//! * `ctx_switches_per_s`: context switches of the application thread
//!   (`getrusage(RUSAGE_THREAD)`, voluntary + involuntary) during the ping-pong, per second.
//! * `syscalls_per_op`: system calls of the application thread per one-way message,
//!   counted by running the same ping-pong in a child process under `strace -f -ff`
//!   between two marker calls (`syscalls_per_op_all_threads` adds every other thread of
//!   the process in the same interval). Without `strace` these are `null` ("n/a").
//! * `copies_per_op`: payload copies per 64 KiB message in the bandwidth run. For the RDMA
//!   paths the devices count them: the bytes they copied into or out of registered memory
//!   and handed to or took from their UDP sockets (the kernel's copies), counters
//!   `mem_copy_bytes` + `socket_bytes`, over the payload bytes of the messages (datagram
//!   headers make a UDP copy count a little over 1). TCP's are derived (`send` and `recv`
//!   each copy once) and say so (`copies_source`).
//!
//! `-D SECS` sets the length of each timed workload (default 1 s), `-n N` the round trips
//! of each strace child (default 2000), `--pair ADDR1,ADDR2` the two devices of
//! `fast_udp`. The strace children run first: a device address can be bound by one
//! process at a time.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use serde::Serialize;
use uroce::pair::{connect, End, PairOpts, ALL_ACCESS};
use uroce::{AccessFlags, Device, MrBuf, RemoteMr, SendWr, Wc, WcStatus};

use super::sys::{usage, Usage, Who};
use super::util::Watchdog;
use super::{volatile, Args};

/// The paths, in table order.
const PATHS: [&str; 4] = ["tcp", "slow_path", "fast_loopback", "fast_udp"];
/// Ping-pong round trips in the syscall-counting child by default (strace slows every
/// call; `-n` changes it).
const STRACE_ITERS: u64 = 2000;
/// Warm-up iterations before any measurement.
const WARMUP: u64 = 200;
/// Bandwidth message size.
const BW_SIZE: usize = 64 * 1024;
/// RDMA WRITEs in flight in the bandwidth run, and completion moderation.
const BW_DEPTH: u64 = 64;
const BW_CQ_MOD: u64 = 16;
/// Marker paths the strace child `stat`s around its measured loop.
const MARK_BEGIN: &str = "/uroce-compare-begin";
const MARK_END: &str = "/uroce-compare-end";

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `tcp`, `slow_path`, `fast_loopback` or `fast_udp`.
    pub path: &'static str,
    /// One-way 1-byte latency, µs (half the median round trip).
    pub lat_1b_us: f64,
    /// 64 KiB message throughput, Gbit/s.
    pub bw_64k_gbps: f64,
    /// Process CPU time per one-way message in the ping-pong, µs.
    pub cpu_us_per_op: f64,
    /// Application-thread context switches per second in the ping-pong.
    pub ctx_switches_per_s: f64,
    /// Application-thread system calls per one-way message (`null`: not measurable).
    pub syscalls_per_op: Option<f64>,
    /// All threads' system calls per one-way message in the same interval.
    pub syscalls_per_op_all_threads: Option<f64>,
    /// Payload copies per 64 KiB message (`null`: a device this process does not run).
    pub copies_per_op: Option<f64>,
    /// How `copies_per_op` was obtained.
    pub copies_source: &'static str,
    /// Ping-pong round trips measured.
    pub lat_round_trips: u64,
    /// 64 KiB messages measured.
    pub bw_messages: u64,
}

/// The machine the table was measured on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Online CPUs.
    pub cpus: usize,
    /// `/proc/cpuinfo` model name.
    pub cpu_model: String,
    /// Kernel release.
    pub kernel: String,
    /// `release` or `debug` build of uroce.
    pub build: &'static str,
    /// Whether `strace` was available to count system calls.
    pub strace: bool,
    /// Seconds per timed workload.
    pub seconds_per_workload: f64,
}

/// `--json` output.
#[derive(Clone, Debug, Serialize)]
struct Table {
    rows: Vec<Row>,
    machine: Machine,
}

/// One end-to-end message path driven by one thread.
trait PingPong {
    /// Sends message `i` from end A to end B and waits until B has it.
    fn ping(&mut self, i: u64) -> Result<()>;
    /// Sends message `i` from B to A and waits until A has it.
    fn pong(&mut self, i: u64) -> Result<()>;
}

/// TCP over loopback: two connected sockets, no Nagle.
struct TcpPp {
    a: TcpStream,
    b: TcpStream,
}

impl TcpPp {
    fn new() -> Result<TcpPp> {
        let l = TcpListener::bind("127.0.0.1:0").context("binding the TCP baseline")?;
        let a = TcpStream::connect(l.local_addr()?).context("connecting the TCP baseline")?;
        let (b, _) = l.accept().context("accepting the TCP baseline")?;
        a.set_nodelay(true)?;
        b.set_nodelay(true)?;
        Ok(TcpPp { a, b })
    }
}

impl PingPong for TcpPp {
    fn ping(&mut self, i: u64) -> Result<()> {
        let mut got = [0u8; 1];
        self.a.write_all(&[i as u8])?;
        self.b.read_exact(&mut got)?;
        if got[0] != i as u8 {
            bail!("TCP ping-pong out of step");
        }
        Ok(())
    }

    fn pong(&mut self, i: u64) -> Result<()> {
        let mut got = [0u8; 1];
        self.b.write_all(&[i as u8])?;
        self.a.read_exact(&mut got)?;
        if got[0] != i as u8 {
            bail!("TCP ping-pong out of step");
        }
        Ok(())
    }
}

/// Two connected RC QPs; each end WRITEs one byte into the other's buffer.
struct RdmaPp {
    a: End,
    b: End,
    /// Each end's receive buffer (the peer WRITEs here) and source buffer.
    a_dst: MrBuf,
    b_dst: MrBuf,
    a_src: MrBuf,
    b_src: MrBuf,
    a_remote: RemoteMr,
    b_remote: RemoteMr,
    /// Every post and poll as a command (the slow path).
    slow: bool,
    /// Signalled WRITEs not yet reaped, per end.
    a_out: u64,
    b_out: u64,
    dog: Watchdog,
}

fn open_pair(a: &Device, b: &Device) -> Result<(End, End)> {
    let opts = PairOpts::default();
    connect(a, b, &opts).map_err(|e| anyhow!("connecting two QPs: {e}"))
}

impl RdmaPp {
    fn new(a: &Device, b: &Device, slow: bool) -> Result<RdmaPp> {
        let (ea, eb) = open_pair(a, b)?;
        let a_dst = ea.pd.alloc_mr(BW_SIZE, ALL_ACCESS)?;
        let b_dst = eb.pd.alloc_mr(BW_SIZE, ALL_ACCESS)?;
        let a_src = ea.pd.alloc_mr(BW_SIZE, AccessFlags::LOCAL_WRITE)?;
        let b_src = eb.pd.alloc_mr(BW_SIZE, AccessFlags::LOCAL_WRITE)?;
        let (a_remote, b_remote) = (a_dst.remote(), b_dst.remote());
        Ok(RdmaPp {
            a: ea,
            b: eb,
            a_dst,
            b_dst,
            a_src,
            b_src,
            a_remote,
            b_remote,
            slow,
            a_out: 0,
            b_out: 0,
            // Pure spinning: a sched_yield would be the harness's system call, not the
            // path's.
            dog: Watchdog::new(Duration::from_secs(30), false),
        })
    }

    /// Reaps completions of `end`: once without waiting, and until fewer than `keep`
    /// remain outstanding.
    fn reap(end: &End, slow: bool, out: &mut u64, keep: u64, dog: &mut Watchdog) -> Result<()> {
        let mut wc = [Wc::default(); 16];
        let mut first = true;
        while first || *out >= keep {
            first = false;
            let n = if slow {
                end.cq.poll_cmd(&mut wc)?
            } else {
                end.cq.poll(&mut wc)?
            };
            for w in wc.iter().take(n) {
                if w.status != WcStatus::Success {
                    bail!("WRITE failed: {}", w.status.as_str());
                }
            }
            *out = out.saturating_sub(n as u64);
            if n == 0 && *out >= keep {
                dog.idle(&|| "WRITE completions".to_string())?;
            } else if n > 0 {
                dog.progress();
            }
        }
        Ok(())
    }

    /// One 1-byte WRITE of `val` from `from` into `remote`, then spin on `dst` for it.
    #[allow(clippy::too_many_arguments)]
    fn one_way(
        from: &End,
        src: &mut MrBuf,
        remote: RemoteMr,
        dst: &MrBuf,
        val: u8,
        slow: bool,
        out: &mut u64,
        dog: &mut Watchdog,
    ) -> Result<()> {
        if slow {
            // The command path carries no inline data: the byte goes through the MR.
            if let Some(b) = src.first_mut() {
                *b = val;
            }
            let sge = [src.sge(0, 1)];
            from.qp
                .post_send_cmd(&[SendWr::write(0, &sge, remote.addr, remote.rkey).signaled()])?;
        } else {
            let data = [val];
            from.qp
                .post_send(&[SendWr::write(0, &[], remote.addr, remote.rkey)
                    .inline(&data)
                    .signaled()])?;
        }
        *out += 1;
        while volatile::load_u8(dst, 0) != Some(val) {
            dog.idle(&|| "the ping-pong byte".to_string())?;
        }
        dog.progress();
        Self::reap(from, slow, out, 32, dog)
    }
}

impl PingPong for RdmaPp {
    fn ping(&mut self, i: u64) -> Result<()> {
        let val = (i % 255) as u8 + 1;
        RdmaPp::one_way(
            &self.a,
            &mut self.a_src,
            self.b_remote,
            &self.b_dst,
            val,
            self.slow,
            &mut self.a_out,
            &mut self.dog,
        )
    }

    fn pong(&mut self, i: u64) -> Result<()> {
        let val = (i % 255) as u8 + 1;
        RdmaPp::one_way(
            &self.b,
            &mut self.b_src,
            self.a_remote,
            &self.a_dst,
            val,
            self.slow,
            &mut self.b_out,
            &mut self.dog,
        )
    }
}

/// A ping-pong measurement.
struct LatRun {
    /// Round trips, ns.
    rtts: Vec<u64>,
    elapsed: Duration,
    process: Usage,
    thread: Usage,
}

/// Runs ping-pongs for about `secs` (at most `max` round trips; `markers`: bracket the
/// loop with the strace markers).
fn measure_lat(pp: &mut dyn PingPong, secs: Duration, max: u64, markers: bool) -> Result<LatRun> {
    for i in 0..WARMUP {
        pp.ping(i)?;
        pp.pong(i)?;
    }
    // Allocated before the loop: growing it would make system calls.
    let mut rtts = Vec::with_capacity(max as usize);
    let p0 = usage(Who::Process).unwrap_or_default();
    let t0u = usage(Who::Thread).unwrap_or_default();
    if markers {
        let _ = std::fs::metadata(MARK_BEGIN);
    }
    let start = Instant::now();
    let mut i = WARMUP;
    while (rtts.len() as u64) < max {
        let t = Instant::now();
        pp.ping(i)?;
        pp.pong(i)?;
        let now = Instant::now();
        rtts.push(u64::try_from(now.duration_since(t).as_nanos()).unwrap_or(u64::MAX));
        i += 1;
        if now.duration_since(start) >= secs {
            break;
        }
    }
    let elapsed = start.elapsed();
    if markers {
        let _ = std::fs::metadata(MARK_END);
    }
    let t1u = usage(Who::Thread).unwrap_or_default();
    let p1 = usage(Who::Process).unwrap_or_default();
    Ok(LatRun {
        rtts,
        elapsed,
        process: p0.delta(&p1),
        thread: t0u.delta(&t1u),
    })
}

fn median(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v.get(n / 2).copied().unwrap_or(0) as f64,
        n => {
            let a = v.get(n / 2 - 1).copied().unwrap_or(0) as f64;
            let b = v.get(n / 2).copied().unwrap_or(0) as f64;
            (a + b) / 2.0
        }
    }
}

/// TCP streaming: a sender thread (this one) and a receiver thread.
pub(crate) fn bw_tcp(secs: Duration) -> Result<(f64, u64)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let mut tx = TcpStream::connect(l.local_addr()?)?;
    let (mut rx, _) = l.accept()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, Instant)> {
        let mut buf = vec![0u8; BW_SIZE];
        let mut total = 0u64;
        loop {
            let n = rx.read(&mut buf)?;
            if n == 0 {
                return Ok((total, Instant::now()));
            }
            total += n as u64;
        }
    });
    let msg = vec![0x5au8; BW_SIZE];
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed() < secs {
        tx.write_all(&msg)?;
        sent += 1;
    }
    tx.shutdown(std::net::Shutdown::Write)?;
    let (bytes, end) = receiver
        .join()
        .map_err(|_| anyhow!("TCP receiver panicked"))??;
    if bytes != sent * BW_SIZE as u64 {
        bail!(
            "TCP baseline: {bytes} bytes received of {}",
            sent * BW_SIZE as u64
        );
    }
    let secs = end.duration_since(start).as_secs_f64();
    Ok((bytes as f64 * 8.0 / secs / 1e9, sent))
}

/// RDMA WRITE streaming from A into B with `BW_DEPTH` in flight.
fn bw_rdma(pp: &mut RdmaPp, secs: Duration) -> Result<(f64, u64)> {
    let sge = [pp.a_src.sge(0, BW_SIZE as u32)];
    let remote = pp.b_remote;
    let mut wc = [Wc::default(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    let mut stop = false;
    while !stop || done < posted {
        while !stop && posted - done < BW_DEPTH {
            let mut wr = SendWr::write(posted, &sge, remote.addr, remote.rkey);
            if (posted + 1) % BW_CQ_MOD == 0 {
                wr = wr.signaled();
            }
            if pp.slow {
                pp.a.qp.post_send_cmd(&[wr])?;
            } else {
                pp.a.qp.post_send(&[wr])?;
            }
            posted += 1;
            if posted % BW_CQ_MOD == 0 && start.elapsed() >= secs {
                stop = true;
            }
        }
        let n = if pp.slow {
            pp.a.cq.poll_cmd(&mut wc)?
        } else {
            pp.a.cq.poll(&mut wc)?
        };
        for w in wc.iter().take(n) {
            if w.status != WcStatus::Success {
                bail!("WRITE failed: {}", w.status.as_str());
            }
            done = done.max(w.wr_id + 1);
        }
        if n == 0 {
            pp.dog.idle(&|| "64 KiB WRITE completions".to_string())?;
        } else {
            pp.dog.progress();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Drain the completions of the A end before the ping-pong reuses it.
    pp.a_out = 0;
    Ok((done as f64 * BW_SIZE as f64 * 8.0 / secs / 1e9, done))
}

/// The devices of a path: (A, B). One-device paths use the first configured device;
/// `fast_udp` uses two devices on the `--pair` addresses, reusing the configured device
/// when it owns the first address (an address can be bound by one device only).
fn devices(path: &str, pair: &str) -> Result<(Device, Device)> {
    let first = uroce::open_device(None)
        .context("opening the first device")?
        .device()
        .clone();
    if path != "fast_udp" {
        return Ok((first.clone(), first));
    }
    let (a, b) = pair
        .split_once(',')
        .ok_or_else(|| anyhow!("--pair wants ADDR1,ADDR2, got `{pair}`"))?;
    let parse = |s: &str| -> Result<std::net::IpAddr> {
        s.trim()
            .parse()
            .map_err(|_| anyhow!("bad address `{s}` in --pair"))
    };
    let (a, b) = (parse(a)?, parse(b)?);
    if a == b {
        bail!("--pair needs two different addresses");
    }
    let dev_a = if first.addr() == a {
        first.clone()
    } else {
        uroce::device("compare-a", a)
    };
    let dev_b = if first.addr() == b {
        first
    } else {
        uroce::device("compare-b", b)
    };
    Ok((dev_a, dev_b))
}

fn ping_pong_for(path: &str, pair: &str) -> Result<Box<dyn PingPong>> {
    Ok(match path {
        "tcp" => Box::new(TcpPp::new()?),
        "slow_path" | "fast_loopback" | "fast_udp" => {
            let (a, b) = devices(path, pair)?;
            Box::new(RdmaPp::new(&a, &b, path == "slow_path")?)
        }
        _ => bail!("unknown path {path}"),
    })
}

/// TCP's payload copies per message: `send` copies into the socket buffer, `recv` out of it.
const TCP_COPIES: f64 = 2.0;

/// What the devices `devs` (by name; one counted once) have copied so far: bytes into or
/// out of registered memory plus bytes through their sockets. `None` for a device this
/// process does not run (one attached to `uroced`).
fn copied_bytes(devs: &[&Device]) -> Option<u64> {
    let mut names: Vec<&str> = devs.iter().map(|d| d.name()).collect();
    names.sort_unstable();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            nic::device(n).map(|h| {
                let c = h.port_counters().engine;
                c.mem_copy_bytes + c.socket_bytes
            })
        })
        .sum()
}

/// The syscall counts of one path from a child under strace: (application thread,
/// all threads) per one-way message. `None` when strace is missing or fails.
fn strace_counts(path: &str, pair: &str, iters: u64, strace: &Path) -> Option<(f64, f64)> {
    let exe = std::env::current_exe().ok()?;
    let dir = std::env::temp_dir().join(format!("uroce-compare-{}-{path}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).ok()?;
    let prefix = dir.join("t");
    let out = Command::new(strace)
        .args(["-f", "-ff", "-ttt", "-qq", "-o"])
        .arg(&prefix)
        .arg("--")
        .arg(&exe)
        .args(["bench", "compare", "--compare-child", path, "--pair", pair])
        .args(["-n", &iters.to_string()])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tid: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("app_tid="))
        .and_then(|t| t.trim().parse().ok())?;
    let result = count_trace(&dir, tid);
    let _ = std::fs::remove_dir_all(&dir);
    let (app, all) = result?;
    let msgs = (2 * iters) as f64;
    Some((app as f64 / msgs, all as f64 / msgs))
}

/// A syscall line of `strace -ttt`: (timestamp, text) — `None` for signals, exits and
/// continuation lines.
fn syscall_line(line: &str) -> Option<(f64, &str)> {
    let (ts, rest) = line.split_once(' ')?;
    let ts: f64 = ts.parse().ok()?;
    if rest.starts_with("+++") || rest.starts_with("---") || rest.starts_with("<...") {
        return None;
    }
    Some((ts, rest))
}

/// Counts the application thread's syscalls strictly between the two markers, and every
/// thread's in the same time interval.
fn count_trace(dir: &Path, tid: u64) -> Option<(u64, u64)> {
    let app = std::fs::read_to_string(dir.join(format!("t.{tid}"))).ok()?;
    let (mut begin, mut end) = (None, None);
    let mut app_count = 0u64;
    for line in app.lines() {
        let Some((ts, text)) = syscall_line(line) else {
            continue;
        };
        if text.contains(MARK_BEGIN) {
            begin = Some(ts);
            continue;
        }
        if text.contains(MARK_END) {
            end = Some(ts);
            break;
        }
        if begin.is_some() {
            app_count += 1;
        }
    }
    let (begin, end) = (begin?, end?);
    let mut all = app_count;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name();
        if name.to_string_lossy() == format!("t.{tid}") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).ok()?;
        all += text
            .lines()
            .filter_map(syscall_line)
            .filter(|(ts, _)| *ts > begin && *ts < end)
            .count() as u64;
    }
    Some((app_count, all))
}

fn find_strace() -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join("strace"))
        .find(|p| p.is_file())
}

fn machine(strace: bool, secs: f64) -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_model,
        kernel,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        strace,
        seconds_per_workload: secs,
    }
}

/// The machine in one line, for reports: CPUs, model, kernel, build, load average.
pub(crate) fn machine_line() -> String {
    let m = machine(false, 0.0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    format!(
        "{} CPUs, {}, kernel {}, {} build, load average {load}",
        m.cpus, m.cpu_model, m.kernel, m.build
    )
}

/// The strace child: the ping-pong of one path between markers, its thread id first.
fn child(path: &str, pair: &str, iters: u64) -> Result<ExitCode> {
    let tid = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| {
            p.file_name()
                .and_then(|f| f.to_str())
                .and_then(|t| t.parse::<u64>().ok())
        })
        .ok_or_else(|| anyhow!("cannot read this thread's id"))?;
    println!("app_tid={tid}");
    let mut pp = ping_pong_for(path, pair)?;
    measure_lat(pp.as_mut(), Duration::from_secs(3600), iters, true)?;
    Ok(ExitCode::SUCCESS)
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| oob::cfmt::fixed(x, prec))
}

/// Runs `uroce bench compare`.
pub fn run(args: &Args) -> Result<ExitCode> {
    let pair = args
        .pair
        .clone()
        .unwrap_or_else(|| "127.0.0.1,127.0.0.2".to_string());
    let strace_iters = args.iters.unwrap_or(STRACE_ITERS).max(1);
    if let Some(path) = &args.compare_child {
        return child(path, &pair, strace_iters);
    }
    let secs = Duration::from_secs(args.duration.unwrap_or(1));
    let strace = find_strace();
    // The strace children first: a device address can be bound by one process only, so
    // they must run before this process starts its own devices.
    let mut counts = Vec::new();
    for path in PATHS {
        if !args.json {
            eprintln!("uroce bench compare: counting system calls of {path} under strace ...");
        }
        counts.push(
            strace
                .as_deref()
                .and_then(|s| strace_counts(path, &pair, strace_iters, s)),
        );
    }
    let mut rows = Vec::new();
    for (path, sys) in PATHS.into_iter().zip(counts) {
        if !args.json {
            eprintln!("uroce bench compare: measuring {path} ...");
        }
        let mut run = {
            let mut pp = ping_pong_for(path, &pair)?;
            measure_lat(pp.as_mut(), secs, 50_000_000, false)?
        };
        let (bw, msgs, copies) = if path == "tcp" {
            let (bw, msgs) = bw_tcp(secs)?;
            (bw, msgs, Some(TCP_COPIES))
        } else {
            let (a, b) = devices(path, &pair)?;
            let mut pp = RdmaPp::new(&a, &b, path == "slow_path")?;
            let before = copied_bytes(&[&a, &b]);
            let (bw, msgs) = bw_rdma(&mut pp, secs)?;
            let payload = (msgs * BW_SIZE as u64).max(1) as f64;
            let copies = before
                .zip(copied_bytes(&[&a, &b]))
                .map(|(x, y)| y.saturating_sub(x) as f64 / payload);
            (bw, msgs, copies)
        };
        let n = run.rtts.len() as u64;
        let messages = (2 * n) as f64;
        rows.push(Row {
            path,
            lat_1b_us: median(&mut run.rtts) / 2.0 / 1000.0,
            bw_64k_gbps: bw,
            cpu_us_per_op: run.process.cpu.as_secs_f64() * 1e6 / messages.max(1.0),
            ctx_switches_per_s: run.thread.ctx_switches as f64
                / run.elapsed.as_secs_f64().max(1e-9),
            syscalls_per_op: sys.map(|s| s.0),
            syscalls_per_op_all_threads: sys.map(|s| s.1),
            copies_per_op: copies,
            copies_source: match (path, copies) {
                ("tcp", _) => "derived: send() and recv() each copy once",
                (_, Some(_)) => {
                    "counted by the devices (mem_copy_bytes + socket_bytes over payload bytes)"
                }
                (_, None) => "not counted: a device of uroced, not of this process",
            },
            lat_round_trips: n,
            bw_messages: msgs,
        });
    }
    let m = machine(strace.is_some(), secs.as_secs_f64());
    if args.json {
        let t = Table { rows, machine: m };
        println!("{}", serde_json::to_string(&t)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<14} {:>10} {:>12} {:>14} {:>19} {:>16} {:>14}",
        "path",
        "lat_1b_us",
        "bw_64k_gbps",
        "cpu_us_per_op",
        "ctx_switches_per_s",
        "syscalls_per_op",
        "copies_per_op"
    );
    for r in &rows {
        println!(
            "{:<14} {:>10} {:>12} {:>14} {:>19} {:>16} {:>14}",
            r.path,
            oob::cfmt::fixed(r.lat_1b_us, 2),
            oob::cfmt::fixed(r.bw_64k_gbps, 2),
            oob::cfmt::fixed(r.cpu_us_per_op, 2),
            oob::cfmt::fixed(r.ctx_switches_per_s, 1),
            fmt_opt(r.syscalls_per_op, 2),
            match r.copies_per_op {
                Some(c) if r.path == "tcp" => format!("{c}*"),
                c => fmt_opt(c, 2),
            },
        );
    }
    println!(
        "machine: {} CPUs, {}, Linux {}, {} build; {} s per workload",
        m.cpus, m.cpu_model, m.kernel, m.build, m.seconds_per_workload
    );
    println!(
        "lat: half the median 1-byte round trip, one thread playing both ends; bw: 64 KiB messages"
    );
    println!("cpu: whole process per one-way message; ctx switches: application thread");
    println!(
        "syscalls: application thread per one-way message, counted under strace{}",
        if m.strace {
            ""
        } else {
            " (not installed: n/a)"
        }
    );
    println!(
        "copies: counted by the devices (bytes into or out of registered memory and through \
         their sockets, per payload byte); * derived (TCP: send and recv each copy once)"
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strace_lines_and_markers() {
        let dir = std::env::temp_dir().join(format!("uroce-compare-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("tmp dir");
        std::fs::write(
            dir.join("t.10"),
            "1.0 read(3, \"\", 1) = 0\n\
             2.0 statx(AT_FDCWD, \"/uroce-compare-begin\", ...) = -1 ENOENT\n\
             2.1 write(4, \"x\", 1) = 1\n\
             2.2 --- SIGCHLD {si_signo=SIGCHLD} ---\n\
             2.3 read(5, \"x\", 1) = 1\n\
             3.0 statx(AT_FDCWD, \"/uroce-compare-end\", ...) = -1 ENOENT\n\
             3.1 exit_group(0) = ?\n",
        )
        .expect("write");
        std::fs::write(
            dir.join("t.11"),
            "1.5 epoll_wait(3, [], 1, 1) = 0\n2.5 sendmmsg(4, ...) = 1\n2.6 <... recvmmsg resumed>) = 1\n3.5 futex(...) = 0\n",
        )
        .expect("write");
        assert_eq!(count_trace(&dir, 10), Some((2, 3)));
        assert_eq!(count_trace(&dir, 12), None);
        let _ = std::fs::remove_dir_all(&dir);
        let mut v = vec![5, 1, 3, 2];
        assert_eq!(median(&mut v), 2.5);
    }

    #[test]
    fn tcp_ping_pong_moves_bytes() {
        let mut pp = TcpPp::new().expect("loopback TCP");
        let r = measure_lat(&mut pp, Duration::from_millis(50), 100, false).expect("runs");
        assert!(!r.rtts.is_empty() && r.rtts.len() <= 100);
    }
}
