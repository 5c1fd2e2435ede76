//! From the command line to one run's parameters, with perftest 4.5-0.17's defaults and
//! derived values (`init_perftest_params` and `force_dependecies` in
//! `src/perftest_parameters.c`; docs/perftest.md §3 and §6.1).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use oob::console::{AtomicType, BwUnits};
use oob::perftest::{BenchConfig, Connection, OptionCheck, TestKind, Verb};

use super::Args;

/// perftest's `MAX_SIZE`: the largest `-a` size, and the buffer size with `-a`.
pub const MAX_SIZE: u64 = 8_388_608;
/// perftest's `MSG_SIZE_CQ_MOD_LIMIT`: above it CQ moderation is off by default.
const MSG_SIZE_CQ_MOD_LIMIT: u64 = 8192;
/// Default CQ moderation (`DEF_CQ_MOD`).
const DEF_CQ_MOD: u32 = 100;
/// Default TX depths (`DEF_TX_BW`, `DEF_TX_LAT`).
const DEF_TX_BW: u32 = 128;
const DEF_TX_LAT: u32 = 1;
/// Default RX depth of send tests (`DEF_RX_SEND`) and of the others (`DEF_RX_RDMA`).
const DEF_RX_SEND: u32 = 512;
const DEF_RX_RDMA: u32 = 1;
/// UD/UC receive depth cap (`UC_MAX_RX`).
const UC_MAX_RX: u64 = 16000;
/// Iteration limits (`MIN_ITER`, `MAX_ITER`).
const MIN_ITER: u64 = 5;
const MAX_ITER: u64 = 100_000_000;
/// Default inline sizes of latency tests on a recognised device (`DEF_INLINE_WRITE`,
/// `DEF_INLINE_SEND_RC_UC`, `DEF_INLINE_SEND_UD`).
const DEF_INLINE_WRITE: u32 = 220;
const DEF_INLINE_SEND_RC_UC: u32 = 236;
const DEF_INLINE_SEND_UD: u32 = 188;
/// perftest's limits on `-t`, `-r` and `-q` (`MAX_TX`, `MAX_RX`, `MAX_QP_NUM`).
const MAX_TX: u32 = 15000;
const MAX_RX: u32 = 16384;
const MAX_QP_NUM: usize = 16384;
/// Above this many iterations perftest stops recording per-operation times (no peak).
const NO_PEAK_ITERS: u64 = 20_000;

/// Where the two ends run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// Both ends in this process on one device (internal loopback).
    Loopback,
    /// Both ends in this process on two devices bound to these addresses (RoCEv2 over UDP).
    Pair(String),
    /// This process is the client of the server at this address.
    Client(String),
    /// This process is the server.
    Server,
}

/// Everything one side needs to run a test.
#[derive(Clone, Debug)]
pub struct Params {
    /// What the exchange needs (verb, kind, -c, -q, -b, -a, -s, -D ...).
    pub cfg: BenchConfig,
    /// `-A`.
    pub atomic: AtomicType,
    /// `-n` (0 in duration mode).
    pub iters: u64,
    /// `-D` seconds and the `-f` margin, in duration mode.
    pub duration: Option<(Duration, Duration)>,
    /// `-t`, after the clamp to the iterations.
    pub tx_depth: u32,
    /// `-r`, after the clamps (send tests; 1 otherwise).
    pub rx_depth: u32,
    /// `-Q` after the rules.
    pub cq_mod: u32,
    /// `-l`.
    pub post_list: u32,
    /// `-I` as given (`None`: perftest's default for the test).
    pub inline_req: Option<u32>,
    /// `-e`.
    pub use_event: bool,
    /// `-m` in bytes.
    pub mtu_req: Option<u32>,
    /// `-x`.
    pub gid_index: u8,
    /// `-o`.
    pub out_reads_req: Option<u32>,
    /// `-u`.
    pub qp_timeout: u8,
    /// `-S`.
    pub sl: u8,
    /// Peak bandwidth not computed (`-N`, `-D`, many iterations).
    pub no_peak: bool,
    /// `--report_gbits`.
    pub units: BwUnits,
    /// `-p`.
    pub port: u16,
    /// `-i`.
    pub ib_port: u8,
    /// `-d`.
    pub device: Option<String>,
    /// Where the ends run.
    pub topology: Topology,
    /// `--verify`.
    pub verify: bool,
    /// `--json`.
    pub json: bool,
    /// `--plot FILE`.
    pub plot: Option<PathBuf>,
    /// `--timeout`: give up after this long without progress.
    pub stall: Duration,
    /// Print the post-list notice (perftest prints it when `-l` > 1 sets the CQ moderation).
    pub post_list_notice: bool,
}

impl Params {
    /// The tool this run imitates (`ib_write_bw`, ...).
    pub fn tool(&self) -> String {
        self.cfg.tool_name()
    }
}

/// Parses `write_bw` etc.
pub fn parse_test(name: &str) -> Result<(Verb, TestKind)> {
    let name = name.strip_prefix("ib_").unwrap_or(name);
    let (verb, kind) = name
        .split_once('_')
        .ok_or_else(|| anyhow!("unknown test `{name}`"))?;
    let verb = match verb {
        "write" => Verb::Write,
        "read" => Verb::Read,
        "send" => Verb::Send,
        "atomic" => Verb::Atomic,
        _ => bail!("unknown test `{name}` (write|read|send|atomic _bw|_lat, or compare)"),
    };
    let kind = match kind {
        "bw" => TestKind::Bw,
        "lat" => TestKind::Lat,
        _ => bail!("unknown test `{name}` (write|read|send|atomic _bw|_lat, or compare)"),
    };
    Ok((verb, kind))
}

fn parse_connection(s: &str, verb: Verb) -> Result<Connection> {
    match s {
        "RC" => Ok(Connection::Rc),
        "UC" => {
            if verb == Verb::Read || verb == Verb::Atomic {
                bail!(" UC connection not possible in READ/ATOMIC verbs");
            }
            Ok(Connection::Uc)
        }
        "UD" => Ok(Connection::Ud),
        "RawEth" | "XRC" | "DC" | "SRD" => bail!(" Connection type {s} is not supported by uroce"),
        _ => bail!(" Invalid Connection type. Please choose from {{RC,UC,UD,XRC,DC,SRD}}"),
    }
}

fn parse_atomic(s: Option<&str>) -> Result<AtomicType> {
    match s {
        None | Some("FETCH_AND_ADD") => Ok(AtomicType::FetchAndAdd),
        Some("CMP_AND_SWAP") => Ok(AtomicType::CmpAndSwap),
        Some(other) => {
            bail!(" Invalid Atomic type {other}. Please choose from {{CMP_AND_SWAP,FETCH_AND_ADD}}")
        }
    }
}

/// The run's parameters, or perftest's refusal text.
pub fn from_args(a: &Args) -> Result<Params> {
    let (verb, kind) = parse_test(&a.test)?;
    let connection = parse_connection(&a.connection, verb)?;
    let atomic = parse_atomic(a.atomic_type.as_deref())?;
    if a.atomic_type.is_some() && verb != Verb::Atomic {
        bail!(" Atomic type is only valid for atomic tests");
    }
    let iters_given = a.iters;
    let iters = iters_given.unwrap_or(if verb == Verb::Write && kind == TestKind::Bw {
        5000
    } else {
        1000
    });
    if !(MIN_ITER..=MAX_ITER).contains(&iters) {
        bail!(" Iterations must be between {MIN_ITER} and {MAX_ITER}");
    }
    let post_list = a.post_list.unwrap_or(1);
    if post_list == 0 {
        bail!(" Post list size must be at least 1");
    }
    let num_qps = a.qp.unwrap_or(1);
    if !(1..=MAX_QP_NUM).contains(&num_qps) {
        bail!(" Number of QPs must be 1..={MAX_QP_NUM}");
    }
    OptionCheck {
        verb,
        kind,
        connection,
        num_qps,
        bidirectional: a.bidirectional,
        use_event: a.events,
        iters,
        post_list: u64::from(post_list),
        size_explicit: a.size.is_some(),
    }
    .check()
    .map_err(|e| anyhow!("{e}"))?;
    if post_list > 1 && kind == TestKind::Lat {
        bail!("Post list is supported in BW tests only");
    }
    let mut cfg = BenchConfig::new(verb, kind);
    cfg.connection = connection;
    cfg.num_qps = num_qps;
    cfg.bidirectional = a.bidirectional;
    cfg.run_all = a.all;
    cfg.dont_xchg_versions = a.dont_xchg_versions;
    cfg.rdma_cm = a.rdma_cm;
    cfg.offer_selective_repeat = a.selective_repeat;
    if a.rdma_cm {
        // perftest's own refusals first (perftest_parameters.c), then uroce's.
        if cfg.connection == Connection::Uc {
            bail!(" UC is not supported in librdmacm");
        }
        if a.loopback || a.pair.is_some() {
            bail!(" -R needs two processes: a server (no SERVER argument) and a client");
        }
    }
    if let Some(s) = a.size {
        if s == 0 || s > u64::from(u32::MAX) {
            bail!(" Message size must be 1..=4294967295");
        }
        cfg.size = s;
        cfg.size_explicit = true;
    }
    let duration = match a.duration {
        None => None,
        Some(d) => {
            if d == 0 {
                bail!(" Duration must be at least 1 second");
            }
            if a.events {
                bail!("Duration mode doesn't work with events.");
            }
            if a.all {
                bail!("Duration mode currently doesn't support running on all sizes.");
            }
            if a.verify {
                bail!("--verify needs a fixed number of iterations (not -D)");
            }
            // perftest: the margin defaults to a quarter of the duration.
            let margin = a.margin.unwrap_or(d / 4);
            if 2 * margin >= d {
                bail!(" Margin must be less than half the duration");
            }
            cfg.duration = true;
            Some((Duration::from_secs(d), Duration::from_secs(margin)))
        }
    };
    let eff_iters = if duration.is_some() { u64::MAX } else { iters };
    let mut tx_depth = a.tx_depth.unwrap_or(if kind == TestKind::Bw {
        DEF_TX_BW
    } else {
        DEF_TX_LAT
    });
    if !(1..=MAX_TX).contains(&tx_depth) {
        bail!(" Tx depth must be 1..={MAX_TX}");
    }
    if u64::from(tx_depth) > eff_iters {
        tx_depth = eff_iters as u32;
    }
    let rx_default = if verb == Verb::Send {
        DEF_RX_SEND
    } else {
        DEF_RX_RDMA
    };
    let mut rx_depth = a.rx_depth.unwrap_or(rx_default);
    if !(1..=MAX_RX).contains(&rx_depth) {
        bail!(" Rx depth must be 1..={MAX_RX}");
    }
    if verb != Verb::Send && rx_depth > DEF_RX_RDMA {
        bail!(" On RDMA verbs rx depth can be only 1");
    }
    if verb == Verb::Send {
        if duration.is_none() && u64::from(rx_depth) > iters {
            rx_depth = iters as u32;
        }
        if matches!(connection, Connection::Ud | Connection::Uc) && rx_depth == DEF_RX_SEND {
            // UD and UC cannot recover a message that finds no receive: post them all.
            rx_depth = iters.min(UC_MAX_RX) as u32;
        }
        if rx_depth % 2 == 1 && !a.all && duration.is_none() {
            rx_depth += 1;
        }
    }
    let req_cq_mod = a.cq_mod.is_some();
    let mut cq_mod = a.cq_mod.unwrap_or(DEF_CQ_MOD);
    if !(1..=1024).contains(&cq_mod) {
        bail!(" CQ moderation must be 1..=1024");
    }
    let size_for_rule = if a.all { MAX_SIZE } else { cfg.size };
    if size_for_rule > MSG_SIZE_CQ_MOD_LIMIT
        && connection != Connection::Ud
        && !a.all
        && !a.events
        && !req_cq_mod
    {
        cq_mod = 1;
    }
    if cq_mod > tx_depth {
        cq_mod = tx_depth;
    }
    let mut post_list_notice = false;
    if post_list > 1 {
        if !req_cq_mod {
            cq_mod = post_list;
            post_list_notice = true;
        } else if post_list % cq_mod != 0 {
            bail!("Post list size must be a multiple of CQ moderation");
        }
        if post_list > tx_depth {
            bail!(" Post list size must not exceed the TX depth ({tx_depth})");
        }
    }
    let no_peak = a.no_peak || duration.is_some() || iters > NO_PEAK_ITERS;
    let topology = match (&a.loopback, &a.pair, &a.server) {
        (true, None, None) => Topology::Loopback,
        (false, Some(p), None) => Topology::Pair(p.clone()),
        (false, None, Some(s)) => Topology::Client(s.clone()),
        (false, None, None) => Topology::Server,
        _ => bail!("choose one of --loopback, --pair ADDR1,ADDR2 or a SERVER argument"),
    };
    if a.plot.is_some() && !a.all {
        bail!("--plot draws a size sweep: add -a");
    }
    let gid_index = match a.gid_index {
        None => 0,
        Some(x) => u8::try_from(x).map_err(|_| anyhow!(" Invalid GID index {x}"))?,
    };
    Ok(Params {
        cfg,
        atomic,
        iters: if duration.is_some() { 0 } else { iters },
        duration,
        tx_depth,
        rx_depth,
        cq_mod,
        post_list,
        inline_req: a.inline_size,
        use_event: a.events,
        mtu_req: a.mtu,
        gid_index,
        out_reads_req: a.outs,
        qp_timeout: a.qp_timeout,
        sl: a.sl,
        no_peak,
        units: if a.report_gbits {
            BwUnits::Gbps
        } else {
            BwUnits::MiBps
        },
        port: a.port,
        ib_port: a.ib_port,
        device: a.device.clone(),
        topology,
        verify: a.verify,
        json: a.json,
        plot: a.plot.clone(),
        stall: Duration::from_secs(a.timeout),
        post_list_notice,
    })
}

/// perftest's default inline size for this test on a device it recognises
/// (`ctx_set_max_inline`), limited to what the device offers.
pub fn inline_size(p: &Params, device_max: u32) -> u32 {
    let verb = p.cfg.verb;
    if verb == Verb::Read || verb == Verb::Atomic {
        return 0;
    }
    let want = match p.inline_req {
        Some(i) => i,
        None => match (p.cfg.kind, verb) {
            (TestKind::Lat, Verb::Write) => DEF_INLINE_WRITE,
            (TestKind::Lat, Verb::Send) if p.cfg.connection == Connection::Ud => DEF_INLINE_SEND_UD,
            (TestKind::Lat, Verb::Send) => DEF_INLINE_SEND_RC_UC,
            _ => 0,
        },
    };
    want.min(device_max)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn params(argv: &[&str]) -> Result<Params> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(argv.iter().copied()))
            .map_err(|e| anyhow!("{e}"))?;
        from_args(&cli.args)
    }

    #[test]
    fn perftest_defaults() {
        let p = params(&["write_bw", "--loopback"]).expect("valid");
        assert_eq!(
            (p.iters, p.tx_depth, p.cq_mod, p.cfg.size),
            (5000, 128, 1, 65536)
        );
        let p = params(&["write_bw", "--loopback", "-s", "64"]).expect("valid");
        assert_eq!(p.cq_mod, 100);
        let p = params(&["send_bw", "-n", "5"]).expect("valid");
        assert_eq!((p.tx_depth, p.rx_depth, p.cq_mod), (5, 6, 1));
        assert_eq!(p.topology, Topology::Server);
        let p = params(&["send_lat", "host"]).expect("valid");
        assert_eq!((p.iters, p.tx_depth, p.cfg.size), (1000, 1, 2));
        assert_eq!(p.topology, Topology::Client("host".into()));
        let p = params(&["send_bw", "-c", "UD", "-n", "100"]).expect("valid");
        assert_eq!(p.rx_depth, 100);
        let p = params(&["write_bw", "-n", "5", "-l", "5"]).expect("valid");
        assert_eq!((p.cq_mod, p.post_list_notice), (5, true));
        assert_eq!(inline_size(&p, 256), 0);
        let p = params(&["write_lat"]).expect("valid");
        assert_eq!(inline_size(&p, 256), 220);
        assert_eq!(inline_size(&p, 64), 64);
        let p = params(&["atomic_bw", "-n", "5"]).expect("valid");
        assert_eq!(p.cfg.size, 8);
    }

    #[test]
    fn perftest_refusals() {
        let err = |v: &[&str]| params(v).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(&["write_bw", "-e"]).contains("Events feature not available on WRITE verb"));
        assert!(err(&["write_lat", "-b"]).contains("Bidirectional is only available in BW test"));
        assert!(err(&["read_bw", "-c", "UD"]).contains("UD connection only possible"));
        assert!(err(&["read_bw", "-c", "UC"]).contains("UC connection not possible"));
        assert!(err(&["write_bw", "-n", "7", "-l", "2"]).contains("multiple of post list"));
        assert!(err(&["atomic_bw", "-s", "16"]).contains("cannot be changed for Atomic"));
        assert!(err(&["nope_bw"]).contains("unknown test"));
        assert!(err(&["write_bw", "--loopback", "host"]).contains("choose one of"));
        assert!(err(&["write_bw", "-n", "3"]).contains("Iterations"));
        assert!(err(&["write_bw", "-D", "2", "--verify"]).contains("--verify"));
    }
}
