//! `uroce bench TEST [SERVER]`: perftest's `ib_<verb>_<bw|lat>` on uroce devices, and
//! `uroce bench compare`.
//!
//! TEST is `write_bw`, `write_lat`, `read_bw`, `read_lat`, `send_bw`, `send_lat`,
//! `atomic_bw` or `atomic_lat` (an `ib_` prefix is accepted). The options are perftest's
//! (`-d -i -x -s -n -a -D -f -I -e -l -q -t -r -b -m -p -c -o -A -Q -u -S -F -N
//! --report_gbits`, with perftest's defaults and derived values), the console output is
//! perftest's (`oob::console`), and three topologies run the same code:
//!
//! * `uroce bench TEST` serves and `uroce bench TEST SERVER` connects, with the
//!   out-of-band exchange over TCP port 18515 byte for byte as perftest 4.5-0.17 does it
//!   (`oob::perftest`), so either end may be the real perftest;
//! * `--loopback`: both ends in this process on one device (internal loopback);
//! * `--pair ADDR1,ADDR2`: both ends in this process on two devices bound to those
//!   addresses (RoCEv2 over UDP between them).
//!
//! In-process runs use the same exchange over a socketpair and print the client's output.
//! uroce additions: `--verify` (every payload checked end to end; a mismatch makes the
//! exit status 1), `--json` (one JSON object per result line instead of the text),
//! `--plot FILE.svg` (with `-a`: the sweep as a chart), `--timeout SECS` (give up when
//! nothing progresses for that long; perftest waits forever), and progress on stderr for
//! runs longer than a few seconds.

pub mod cm;
pub mod compare;
pub mod params;
pub mod plot;
pub mod ratios;
pub mod runs;
pub mod side;
pub mod sys;
pub mod util;
pub mod verify;
pub mod volatile;

use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, Context as _, Result};
use oob::console;
use oob::perftest::{self, Perftest, Role};
use uroce::Device;

use params::{Params, Topology};
use side::{Row, Side};

/// `uroce bench` options: perftest's, plus uroce's topology and checking options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// write_bw, write_lat, read_bw, read_lat, send_bw, send_lat, atomic_bw, atomic_lat,
    /// `compare` (the comparison table), or `ratios` (the figures against this machine's
    /// baselines and the project's goals).
    pub test: String,
    /// The server to connect to (without it, and without --loopback/--pair: serve).
    pub server: Option<String>,
    /// Listen on / connect to port PORT.
    #[arg(short = 'p', long = "port", default_value_t = perftest::DEFAULT_PORT)]
    pub port: u16,
    /// Use device NAME (default: the first of UROCE_DEVICES).
    #[arg(short = 'd', long = "ib-dev", value_name = "NAME")]
    pub device: Option<String>,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index of the source address (uroce devices have index 0).
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<i32>,
    /// Size of message to exchange (default 65536 for bw, 2 for lat, 8 for atomic).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Number of exchanges (at least 5; default 5000 for write_bw, 1000 otherwise).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run sizes from 2 up to 2^23 bytes.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Run the test for SECS seconds (duration mode).
    #[arg(short = 'D', long = "duration", value_name = "SECS")]
    pub duration: Option<u64>,
    /// Warm-up and cool-down margin of -D, in seconds (default: a quarter of -D).
    #[arg(short = 'f', long = "margin")]
    pub margin: Option<u64>,
    /// Max size of message to be sent inline.
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Sleep on CQ events (default poll).
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Post list of send WQEs of SIZE (one doorbell per list).
    #[arg(short = 'l', long = "post_list")]
    pub post_list: Option<u32>,
    /// Num of QPs running in the process (bw tests).
    #[arg(short = 'q', long = "qp")]
    pub qp: Option<usize>,
    /// Size of tx queue.
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Rx queue size (send tests).
    #[arg(short = 'r', long = "rx-depth")]
    pub rx_depth: Option<u32>,
    /// Measure bidirectional bandwidth.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// MTU size: 256 - 4096 (default: the port's active MTU).
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// Connection type RC/UC/UD.
    #[arg(short = 'c', long = "connection", default_value = "RC")]
    pub connection: String,
    /// Number of outstanding READs/atomics (read and atomic tests).
    #[arg(short = 'o', long = "outs")]
    pub outs: Option<u32>,
    /// Type of atomic operation: CMP_AND_SWAP or FETCH_AND_ADD.
    #[arg(short = 'A', long = "atomic_type")]
    pub atomic_type: Option<String>,
    /// Generate a completion every N operations.
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// QP timeout, 4.096 µs × 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    pub qp_timeout: u8,
    /// Service level.
    #[arg(short = 'S', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// Do not warn about CPU frequency scaling (accepted; uroce never warns).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Cancel peak-bandwidth calculation.
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Report bandwidth in Gbit/s instead of MiB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Skip the version exchange (perftest 6.06 then aborts, as here).
    #[arg(long = "dont_xchg_versions")]
    pub dont_xchg_versions: bool,
    /// Connect the QPs with rdma_cm and exchange the test's data over an rdma_cm
    /// connection instead of TCP (perftest's -R).
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// uroce: offer selective repeat to the peer (docs/perftest.md §10, docs/wire.md §5.6);
    /// the RC QPs use it when the peer is uroce and offered it too. Stock perftest never
    /// does: toward it the run is plain go-back-N.
    #[arg(long = "selective-repeat")]
    pub selective_repeat: bool,
    /// uroce: both ends in this process on one device.
    #[arg(long)]
    pub loopback: bool,
    /// uroce: both ends in this process on two devices bound to ADDR1 and ADDR2.
    #[arg(long, value_name = "ADDR1,ADDR2")]
    pub pair: Option<String>,
    /// uroce: check every payload end to end; exit status 1 on a mismatch.
    #[arg(long)]
    pub verify: bool,
    /// uroce: print results as JSON lines instead of perftest's text.
    #[arg(long)]
    pub json: bool,
    /// uroce: with -a, draw bandwidth (or latency) against message size into FILE.svg.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// uroce: give up after SECS without progress (perftest waits forever).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub timeout: u64,
    /// Internal: the `bench ratios` child that echoes UDP datagrams on 127.0.0.1:PORT.
    #[arg(long, hide = true, value_name = "PORT")]
    pub ratios_udp_echo: Option<u16>,
    /// Internal: the `bench compare` child whose system calls strace counts.
    #[arg(long, hide = true, value_name = "PATH")]
    pub compare_child: Option<String>,
}

/// Runs `uroce bench`.
pub fn run(args: Args) -> Result<ExitCode> {
    if args.test == "compare" {
        return compare::run(&args);
    }
    if args.test == "ratios" {
        return ratios::run(&args);
    }
    let p = params::from_args(&args)?;
    if p.post_list_notice && !p.json {
        print!("{}", console::POST_LIST_NOTICE);
    }
    let outcome = match p.topology.clone() {
        Topology::Loopback => {
            let dev = uroce::open_device(p.device.as_deref())
                .context("opening the device")?
                .device()
                .clone();
            in_process(&p, dev.clone(), dev)?
        }
        Topology::Pair(list) => {
            let (a, b) = uroce::pair_devices(Some(&list)).map_err(|e| anyhow!("{e}"))?;
            in_process(&p, a, b)?
        }
        Topology::Client(host) if p.cfg.rdma_cm => {
            let mut comm = cm::Comm::connect(&host, p.port, &p)
                .context("Unable to perform rdma_client function")?;
            let dev = cm::device_of(&comm)?;
            let mut side = Side::new(p.clone(), Role::Client, dev, !p.json, false)?;
            side.cm = Some(cm::WorkCm::new(&comm, Role::Client));
            let mut ex = Perftest::new(p.cfg.clone(), Role::Client, side.local_system());
            let r = perftest::run_exchange(&mut comm, &mut ex, &mut side);
            if let Some(w) = side.cm.take() {
                w.teardown();
            }
            comm.close();
            r.map_err(|e| anyhow!("{e}"))?;
            side.finish();
            Outcome::from(side)
        }
        Topology::Server if p.cfg.rdma_cm => {
            let ud = p.cfg.connection == oob::perftest::Connection::Ud;
            let (chan, listener, ud_listener) = cm::Comm::listen(p.port, ud)?;
            if p.json {
                eprint!("{}", console::WAITING_BANNER);
            } else {
                print!("{}", console::WAITING_BANNER);
            }
            let mut comm = cm::Comm::accept(chan, listener, ud_listener, &p)
                .context("Unable to perform rdma_server function")?;
            let dev = cm::device_of(&comm)?;
            let mut side = Side::new(p.clone(), Role::Server, dev, !p.json, false)?;
            side.cm = Some(cm::WorkCm::new(&comm, Role::Server));
            let mut ex = Perftest::new(p.cfg.clone(), Role::Server, side.local_system());
            let r = perftest::run_exchange(&mut comm, &mut ex, &mut side);
            if let Some(w) = side.cm.take() {
                w.teardown();
            }
            comm.close();
            r.map_err(|e| anyhow!("{e}"))?;
            side.finish();
            Outcome::from(side)
        }
        Topology::Client(host) => {
            let dev = device(&p)?;
            let mut side = Side::new(p.clone(), Role::Client, dev, !p.json, false)?;
            let mut stream = perftest::connect(&host, p.port).map_err(|e| anyhow!("{e}"))?;
            let mut ex = Perftest::new(p.cfg.clone(), Role::Client, side.local_system());
            perftest::run_exchange(&mut stream, &mut ex, &mut side).map_err(|e| anyhow!("{e}"))?;
            drop(stream);
            side.finish();
            Outcome::from(side)
        }
        Topology::Server => {
            let dev = device(&p)?;
            let mut side = Side::new(p.clone(), Role::Server, dev, !p.json, false)?;
            let listener = perftest::listen(None, p.port)
                .with_context(|| format!("Couldn't listen on port {}", p.port))?;
            // With --json stdout carries only JSON: the banner goes to stderr.
            if p.json {
                eprint!("{}", console::WAITING_BANNER);
            } else {
                print!("{}", console::WAITING_BANNER);
            }
            let (mut stream, _) = perftest::accept_one(listener).context("accepting the client")?;
            let mut ex = Perftest::new(p.cfg.clone(), Role::Server, side.local_system());
            perftest::run_exchange(&mut stream, &mut ex, &mut side).map_err(|e| anyhow!("{e}"))?;
            drop(stream);
            side.finish();
            Outcome::from(side)
        }
    };
    report(&p, &outcome)
}

/// The configured device `-d` (or the first).
fn device(p: &Params) -> Result<Device> {
    Ok(uroce::open_device(p.device.as_deref())
        .with_context(|| {
            format!(
                "Couldn't get context for {}",
                p.device.as_deref().unwrap_or("the first device")
            )
        })?
        .device()
        .clone())
}

/// What a run leaves for the final report.
struct Outcome {
    rows: Vec<Row>,
    failures: Vec<String>,
}

impl From<Side> for Outcome {
    fn from(s: Side) -> Outcome {
        Outcome {
            rows: s.rows,
            failures: s.failures,
        }
    }
}

/// Both ends in this process: the server side on a thread (quiet), the client here
/// (printing), the exchange over a socketpair.
fn in_process(p: &Params, client_dev: Device, server_dev: Device) -> Result<Outcome> {
    let (mut cs, mut ss) = UnixStream::pair().context("socketpair")?;
    let sp = p.clone();
    let server = std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || -> Result<Outcome> {
            let mut side = Side::new(sp.clone(), Role::Server, server_dev, false, true)?;
            let mut ex = Perftest::new(sp.cfg.clone(), Role::Server, side.local_system());
            let r = perftest::run_exchange(&mut ss, &mut ex, &mut side).map_err(|e| anyhow!("{e}"));
            drop(ss);
            r?;
            side.finish();
            Ok(Outcome::from(side))
        })
        .context("spawning the server thread")?;
    let client = (|| -> Result<Outcome> {
        let mut side = Side::new(p.clone(), Role::Client, client_dev, !p.json, true)?;
        let mut ex = Perftest::new(p.cfg.clone(), Role::Client, side.local_system());
        let r = perftest::run_exchange(&mut cs, &mut ex, &mut side).map_err(|e| anyhow!("{e}"));
        drop(cs);
        r?;
        side.finish();
        Ok(Outcome::from(side))
    })();
    let server = server
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))?;
    match (client, server) {
        (Ok(mut c), Ok(s)) => {
            c.failures
                .extend(s.failures.into_iter().map(|f| format!("server: {f}")));
            Ok(c)
        }
        (Err(c), Ok(_)) => Err(c.context("client side")),
        (Ok(_), Err(s)) => Err(s.context("server side")),
        // The first failure usually makes the other side fail too: say both.
        (Err(c), Err(s)) => Err(anyhow!("client side: {c:#}\nserver side: {s:#}")),
    }
}

/// `--json`, `--plot`, the verification verdict and the exit status.
fn report(p: &Params, o: &Outcome) -> Result<ExitCode> {
    if p.json {
        for r in &o.rows {
            println!("{}", oob::json::to_line(r));
        }
    }
    if let Some(path) = &p.plot {
        let svg = plot::svg(&p.tool(), &o.rows, p.units);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("uroce bench: plot written to {}", path.display());
    }
    if p.verify {
        if o.failures.is_empty() {
            eprintln!("uroce bench: --verify: every payload checked matched");
        } else {
            for f in &o.failures {
                eprintln!("uroce bench: {f}");
            }
            return Ok(ExitCode::from(1));
        }
    }
    Ok(ExitCode::SUCCESS)
}
