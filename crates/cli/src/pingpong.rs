//! `uroce pingpong [rc|ud|srq] [SERVER]`: rdma-core 44's `ibv_rc_pingpong`,
//! `ibv_ud_pingpong` and `ibv_srq_pingpong` (docs/perftest.md §7), so a
//! uroce process pairs with another uroce process or with the real tools.
//!
//! * Same options and defaults (`-p 18515`, `-s 4096` (ud: 1024), `-n 1000`, `-r 500`,
//!   `-m 1024`, `-q 16` for srq, `-l`, `-e`, `-g`, `-c`), one difference: without `-g`
//!   uroce uses GID index 0 (its device address) instead of the zero GID, because on RoCE
//!   a QP without a GID cannot reach RTR (the real tools fail there without `-g`).
//! * The TCP exchange is `oob::pingpong` (52-byte `"%04x:%06x:%06x:%s"` records and
//!   `done`); the server brings its QPs to RTR/RTS before answering, as the tools do.
//! * The traffic is the tools': the client posts the first SEND; each side posts its
//!   next SEND when both its previous SEND completed and a message arrived, until
//!   `-n` sends and `-n` receives (srq: totals over all QPs).
//! * Output: `  local address:  LID …, QPN …, PSN …, GID …`, the remote lines, then
//!   `N bytes in S seconds = M Mbit/sec` and `N iters in S seconds = U usec/iter`.
//!
//! The device comes from `-d` or is the first of `UROCE_DEVICES`; e.g. a server
//! `UROCE_DEVICES=uroce0=127.0.0.1 uroce pingpong` and a client
//! `UROCE_DEVICES=uroce1=127.0.0.2 uroce pingpong 127.0.0.1`.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use oob::pingpong::{self as pp, PpDest, Variant};
use uroce::{
    AccessFlags, Ah, AhAttr, CompChannel, Cq, Gid, GlobalRoute, MrBuf, Mtu, Qp, QpAttr, QpAttrMask,
    QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Srq, SrqAttr, Wc, WcStatus, GRH_BYTES,
};

use crate::bench::util::{random_psn, wait_cq, Watchdog};

/// wr_id of SEND work requests (rdma-core's `PINGPONG_SEND_WRID`).
const SEND_WRID: u64 = 1;
/// wr_id of receive work requests (`PINGPONG_RECV_WRID`).
const RECV_WRID: u64 = 2;

/// `uroce pingpong` options (those of `ibv_{rc,ud,srq}_pingpong`).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// `[rc|ud|srq] [SERVER]`: the variant (default rc), then the server to connect to
    /// (none: be the server).
    #[arg(value_name = "[rc|ud|srq] [SERVER]", num_args = 0..=2)]
    positional: Vec<String>,
    /// Listen on / connect to TCP port PORT.
    #[arg(short = 'p', long = "port", default_value_t = pp::DEFAULT_PORT)]
    port: u16,
    /// Use device NAME (default: the first of UROCE_DEVICES).
    #[arg(short = 'd', long = "ib-dev", value_name = "NAME")]
    device: Option<String>,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    ib_port: u8,
    /// Size of message to exchange (default 4096; ud: 1024).
    #[arg(short = 's', long = "size")]
    size: Option<u32>,
    /// Path MTU (rc, srq).
    #[arg(short = 'm', long = "mtu", default_value_t = 1024)]
    mtu: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    rx_depth: u32,
    /// Number of exchanges (srq: in total over all QPs).
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    iters: u32,
    /// Service level value.
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    sl: u8,
    /// Sleep on CQ events (default poll).
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Local port GID index (uroce default: 0, the device's address).
    #[arg(short = 'g', long = "gid-idx", default_value_t = 0)]
    gid_idx: u8,
    /// Validate the received buffer.
    #[arg(short = 'c', long = "chk")]
    chk: bool,
    /// Number of QPs (srq).
    #[arg(short = 'q', long = "num-qp", default_value_t = 16)]
    num_qp: u32,
    /// Use the new post send WR API (accepted; uroce has one post path).
    #[arg(short = 'N', long = "new_send")]
    new_send: bool,
    /// On-demand paging (not supported by uroce).
    #[arg(short = 'o', long = "odp")]
    odp: bool,
    /// Implicit on-demand paging (not supported by uroce).
    #[arg(short = 'O', long = "iodp")]
    iodp: bool,
    /// Prefetch an ODP MR (not supported by uroce).
    #[arg(short = 'P', long = "prefetch")]
    prefetch: bool,
    /// Completion timestamps (not supported by uroce).
    #[arg(short = 't', long = "ts")]
    ts: bool,
    /// Device memory (not supported by uroce).
    #[arg(short = 'j', long = "dm")]
    dm: bool,
    /// uroce: give up after this many seconds without a completion (the C tools wait
    /// forever).
    #[arg(long = "timeout", default_value_t = 60)]
    timeout: u64,
}

/// What the positional arguments say.
fn split_positional(pos: &[String]) -> Result<(Variant, Option<String>)> {
    let variant_of = |s: &str| match s {
        "rc" => Some(Variant::Rc),
        "ud" => Some(Variant::Ud),
        "srq" => Some(Variant::Srq),
        _ => None,
    };
    match pos {
        [] => Ok((Variant::Rc, None)),
        [a] => Ok(match variant_of(a) {
            Some(v) => (v, None),
            None => (Variant::Rc, Some(a.clone())),
        }),
        [a, b] => {
            let v = variant_of(a).ok_or_else(|| anyhow!("unknown variant `{a}` (rc, ud, srq)"))?;
            Ok((v, Some(b.clone())))
        }
        _ => bail!("at most two positional arguments: [rc|ud|srq] [SERVER]"),
    }
}

/// The options after defaults and the tools' checks.
#[derive(Debug)]
struct Opts {
    variant: Variant,
    server: Option<String>,
    size: usize,
    mtu: Mtu,
    rx_depth: u32,
    iters: u32,
    num_qp: usize,
}

fn check(args: &Args) -> Result<Opts> {
    let (variant, server) = split_positional(&args.positional)?;
    for (on, what) in [
        (args.odp, "-o/--odp"),
        (args.iodp, "-O/--iodp"),
        (args.prefetch, "-P/--prefetch"),
        (args.ts, "-t/--ts"),
        (args.dm, "-j/--dm"),
    ] {
        if on {
            bail!("{what} is not supported by uroce devices");
        }
    }
    let size = args.size.unwrap_or(match variant {
        Variant::Ud => 1024,
        Variant::Rc | Variant::Srq => 4096,
    }) as usize;
    if size == 0 {
        bail!("size must be at least 1");
    }
    let mtu = Mtu::from_bytes(args.mtu).ok_or_else(|| anyhow!("Invalid MTU {}", args.mtu))?;
    if args.iters == 0 || args.rx_depth == 0 {
        bail!("iters and rx-depth must be positive");
    }
    let num_qp = match variant {
        Variant::Srq => {
            let q = args.num_qp as usize;
            if q == 0 || q > pp::SRQ_MAX_QPS {
                bail!("num-qp must be 1..={}", pp::SRQ_MAX_QPS);
            }
            if args.rx_depth < args.num_qp {
                bail!(
                    "rx_depth {} is too small for {} QPs -- must have at least one receive per QP.",
                    args.rx_depth,
                    args.num_qp
                );
            }
            q
        }
        Variant::Rc | Variant::Ud => 1,
    };
    Ok(Opts {
        variant,
        server,
        size,
        mtu,
        rx_depth: args.rx_depth,
        iters: args.iters,
        num_qp,
    })
}

/// One side's verbs objects. Fields drop in declaration order, which is rdma-core's
/// `pp_close_ctx` order: QPs, SRQ, AH, CQ, channel, and the MR last. With several QPs
/// (srq) the peer may send one message more than `-n` (sends are posted while fewer than
/// `-n` have *completed*), and it can arrive after this side's loop ended: it must find
/// no QP (dropped, as on rxe) rather than a live QP whose receive buffer was just
/// deregistered (a local protection error, NAKed as a remote operational error that
/// fails the peer).
struct Ctx {
    qps: Vec<Qp>,
    srq: Option<Srq>,
    ah: Option<Ah>,
    cq: Cq,
    channel: Option<CompChannel>,
    buf: MrBuf,
    gid: Gid,
    /// Receive buffer bytes (ud: size + 40).
    recv_len: usize,
    /// Send payload offset in `buf` (ud: 40, after the GRH area).
    send_off: usize,
}

impl Ctx {
    fn new(args: &Args, o: &Opts) -> Result<Ctx> {
        let ctx = uroce::open_device(args.device.as_deref()).with_context(|| {
            format!(
                "Couldn't get context for {}",
                args.device.as_deref().unwrap_or("the first device")
            )
        })?;
        let port = ctx
            .query_port(args.ib_port)
            .context("Couldn't get port info")?;
        if o.variant == Variant::Ud {
            let active = port.active_mtu.bytes() as usize;
            if o.size > active {
                bail!("Requested size larger than port MTU ({active})");
            }
        }
        let channel = if args.events {
            Some(
                ctx.create_comp_channel()
                    .context("Couldn't create completion channel")?,
            )
        } else {
            None
        };
        let pd = ctx.alloc_pd().context("Couldn't allocate PD")?;
        let (recv_len, send_off) = match o.variant {
            Variant::Ud => (o.size + GRH_BYTES, GRH_BYTES),
            Variant::Rc | Variant::Srq => (o.size, 0),
        };
        let mut buf = pd
            .alloc_mr(recv_len, AccessFlags::LOCAL_WRITE)
            .context("Couldn't register MR")?;
        // As rdma-core's rc/ud pp_init_ctx: the buffer starts as 0x7b bytes, and under
        // --chk the first byte of every page is its page index (mod 1, so 0), which the
        // run must preserve; srq_pingpong's buffer starts zeroed.
        if o.variant != Variant::Srq {
            let data = buf.as_mut_slice();
            data.fill(0x7b);
            if args.chk {
                for chunk in data
                    .get_mut(send_off..)
                    .unwrap_or(&mut [])
                    .chunks_mut(uroce::PAGE_SIZE)
                {
                    if let Some(b) = chunk.first_mut() {
                        *b = 0;
                    }
                }
            }
        }
        let cqe = o.rx_depth + o.num_qp as u32;
        let cq = ctx
            .create_cq(cqe, channel.as_ref(), 0)
            .context("Couldn't create CQ")?;
        let srq = if o.variant == Variant::Srq {
            Some(
                pd.create_srq(&SrqAttr {
                    max_wr: o.rx_depth,
                    max_sge: 1,
                    srq_limit: 0,
                })
                .context("Couldn't create SRQ")?,
            )
        } else {
            None
        };
        let qp_type = if o.variant == Variant::Ud {
            QpType::Ud
        } else {
            QpType::Rc
        };
        let mut qps = Vec::with_capacity(o.num_qp);
        for _ in 0..o.num_qp {
            let mut init = QpInitAttr::new(
                qp_type,
                &cq,
                QpCap {
                    max_send_wr: 1,
                    max_recv_wr: o.rx_depth,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
            );
            init.srq = srq.as_ref();
            let qp = pd.create_qp(&init).context("Couldn't create QP")?;
            if o.variant == Variant::Ud {
                qp.ready_ud(args.ib_port, pp::UD_QKEY, 0)
                    .context("Failed to modify QP to INIT/RTR/RTS")?;
            } else {
                let a = QpAttr {
                    qp_state: QpState::Init,
                    pkey_index: 0,
                    port_num: args.ib_port,
                    qp_access_flags: AccessFlags::EMPTY,
                    ..QpAttr::default()
                };
                qp.modify(
                    &a,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::PORT
                        | QpAttrMask::ACCESS_FLAGS,
                )
                .context("Failed to modify QP to INIT")?;
            }
            qps.push(qp);
        }
        let gid = ctx
            .query_gid(args.ib_port, u32::from(args.gid_idx))
            .with_context(|| format!("can't read sgid of index {}", args.gid_idx))?;
        Ok(Ctx {
            buf,
            cq,
            channel,
            qps,
            srq,
            ah: None,
            gid,
            recv_len,
            send_off,
        })
    }

    /// Posts `n` receives (to the QP, or the SRQ); returns how many were posted.
    fn post_recv(&self, n: u32) -> Result<u32> {
        let sge = [self.buf.sge(0, self.recv_len as u32)];
        for i in 0..n {
            let wr = [RecvWr::new(RECV_WRID, &sge)];
            let posted = match (&self.srq, self.qps.first()) {
                (Some(srq), _) => srq.post_recv(&wr),
                (None, Some(qp)) => qp.post_recv(&wr),
                (None, None) => return Ok(i),
            };
            if posted.is_err() {
                return Ok(i);
            }
        }
        Ok(n)
    }

    fn post_send(&self, qp_index: usize, size: usize, remote: Option<&PpDest>) -> Result<()> {
        let qp = self
            .qps
            .get(qp_index)
            .ok_or_else(|| anyhow!("no QP {qp_index}"))?;
        // rdma-core: INLINE when the granted `max_inline_data` covers the message.
        let inline = size as u32 <= qp.cap().max_inline_data;
        let sge = [self.buf.sge(self.send_off, size as u32)];
        let data = self
            .buf
            .get(self.send_off..self.send_off + size)
            .unwrap_or(&[]);
        let wr = match (&self.ah, remote) {
            (Some(ah), Some(r)) => SendWr::ud_send(SEND_WRID, &sge, ah, r.qpn, pp::UD_QKEY),
            _ => SendWr::send(SEND_WRID, &sge),
        };
        let wr = if inline { wr.inline(data) } else { wr }.signaled();
        qp.post_send(&[wr])
            .map_err(|e| anyhow!("Couldn't post send: {e}"))
    }
}

/// rdma-core's `pp_connect_ctx` for RC (and each srq QP): RTR toward `rem`, then RTS.
fn connect_rc(qp: &Qp, args: &Args, mtu: Mtu, my_psn: u32, rem: &PpDest) -> Result<()> {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: rem.qpn,
        rq_psn: rem.psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: ah_for(args, rem),
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .context("Failed to modify QP to RTR")?;
    a.qp_state = QpState::Rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    qp.modify(
        &a,
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .context("Failed to modify QP to RTS")
}

/// The address vector toward `rem`: global (GRH) only when the peer's GID has an
/// interface id, hop limit 1, as the tools build it (docs/perftest.md §7.1).
fn ah_for(args: &Args, rem: &PpDest) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: Gid(rem.gid),
            flow_label: 0,
            sgid_index: args.gid_idx,
            hop_limit: 1,
            traffic_class: 0,
        },
        dlid: rem.lid,
        sl: args.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: rem.needs_grh(),
        port_num: args.ib_port,
    }
}

/// Brings every local QP to its connected state with the peer's addresses (srq: QP i
/// with record i, but the GID of record 0 for all, as `ibv_srq_pingpong` does).
fn connect_all(c: &mut Ctx, args: &Args, o: &Opts, mine: &[PpDest], rem: &[PpDest]) -> Result<()> {
    match o.variant {
        Variant::Ud => {
            let r = rem.first().ok_or_else(|| anyhow!("no remote address"))?;
            let pd = c
                .qps
                .first()
                .and_then(|q| q.pd().cloned())
                .ok_or_else(|| anyhow!("no QP"))?;
            c.ah = Some(
                pd.create_ah(&ah_for(args, r))
                    .context("Failed to create AH")?,
            );
        }
        Variant::Rc | Variant::Srq => {
            let gid0 = rem.first().map(|r| r.gid).unwrap_or_default();
            for ((qp, me), r) in c.qps.iter().zip(mine).zip(rem) {
                let r = PpDest { gid: gid0, ..*r };
                connect_rc(qp, args, o.mtu, me.psn, &r)?;
            }
        }
    }
    Ok(())
}

/// Runs `uroce pingpong`.
pub fn run(args: Args) -> Result<ExitCode> {
    let o = check(&args)?;
    let mut c = Ctx::new(&args, &o)?;
    let mut routs = c.post_recv(o.rx_depth)?;
    if routs < o.rx_depth {
        bail!("Couldn't post receive ({routs})");
    }
    let mine: Vec<PpDest> = c
        .qps
        .iter()
        .map(|qp| PpDest {
            lid: 0,
            qpn: qp.qp_num(),
            psn: random_psn(),
            gid: c.gid.0,
        })
        .collect();
    // The server listens before it prints its address, so that the line tells a script
    // (or a test) the client may connect now; the output is the tools'.
    let listener = match &o.server {
        Some(_) => None,
        None => {
            let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, args.port));
            Some(
                TcpListener::bind(addr)
                    .with_context(|| format!("Couldn't listen to port {}", args.port))?,
            )
        }
    };
    for d in &mine {
        println!("{}", pp::local_line(o.variant, d));
    }
    let rem = match (&o.server, listener) {
        (Some(host), _) => {
            let mut s = pp::connect(host, args.port).map_err(|e| anyhow!("{e}"))?;
            let rem = pp::client_exchange(&mut s, o.variant, &mine)
                .map_err(|e| anyhow!("{e}"))
                .context("Couldn't get remote LID")?;
            drop(s);
            connect_all(&mut c, &args, &o, &mine, &rem)?;
            rem
        }
        (None, Some(listener)) => {
            // One connection, then the listener closes (the tools' pp_server_exch_dest).
            let (mut s, _) = listener.accept().context("accept() failed")?;
            drop(listener);
            let mut connected: Result<()> = Ok(());
            let rem = pp::server_exchange(&mut s, o.variant, &mine, |rem| {
                connected = connect_all(&mut c, &args, &o, &mine, rem);
                match &connected {
                    Ok(()) => Ok(()),
                    Err(e) => Err(format!("{e:#}").into()),
                }
            })
            .map_err(|e| anyhow!("{e}"))
            .context("Couldn't get remote LID")?;
            connected?;
            rem
        }
        (None, None) => bail!("no listener"),
    };
    for d in &rem {
        println!("{}", pp::remote_line(d));
    }
    let elapsed = traffic(&c, &o, &rem, &mut routs, args.timeout)?;
    let [bytes, per_iter] = pp::result_lines(
        o.size as u64,
        o.iters,
        i64::try_from(elapsed.as_micros()).unwrap_or(i64::MAX),
    );
    println!("{bytes}");
    println!("{per_iter}");
    if args.chk {
        // rdma-core's check: the first byte of every page holds (page index % sizeof(char)),
        // i.e. zero, after the run.
        let data = c.buf.get(c.send_off..).unwrap_or(&[]);
        for (page, chunk) in data.chunks(uroce::PAGE_SIZE).enumerate() {
            if chunk.first().is_some_and(|&b| b != 0) {
                println!("invalid data in page {page}");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The ping-pong loop (rdma-core's main loop with `parse_single_wc`); returns the time
/// from the first post to the last completion.
fn traffic(c: &Ctx, o: &Opts, rem: &[PpDest], routs: &mut u32, timeout: u64) -> Result<Duration> {
    let n = c.qps.len();
    let mut pending = vec![RECV_WRID; n];
    let ud_remote = if o.variant == Variant::Ud {
        rem.first()
    } else {
        None
    };
    if o.server.is_some() {
        for (i, p) in pending.iter_mut().enumerate() {
            c.post_send(i, o.size, ud_remote)?;
            *p |= SEND_WRID;
        }
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wc = [Wc::default(); 16];
    let mut dog = Watchdog::new(Duration::from_secs(timeout), true);
    let iters = o.iters;
    let refill_at = if o.variant == Variant::Srq {
        n as u32
    } else {
        1
    };
    while rcnt < iters || scnt < iters {
        let what = || format!("completions ({scnt} sent, {rcnt} received of {iters})");
        let k = wait_cq(&c.cq, c.channel.as_ref(), &mut wc, &mut dog, &what)?;
        for w in wc.iter().take(k) {
            if w.status != WcStatus::Success {
                bail!(
                    "Failed status {} ({}) for wr_id {}",
                    w.status.as_str(),
                    w.status.raw(),
                    w.wr_id
                );
            }
            let qi = c
                .qps
                .iter()
                .position(|q| q.qp_num() == w.qp_num)
                .ok_or_else(|| anyhow!("completion for unknown QP {:#x}", w.qp_num))?;
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    *routs = routs.saturating_sub(1);
                    if *routs <= refill_at {
                        *routs += c.post_recv(o.rx_depth - *routs)?;
                        if *routs < o.rx_depth {
                            bail!("Couldn't post receive ({routs})");
                        }
                    }
                    rcnt += 1;
                }
                other => bail!("Completion for unknown wr_id {other}"),
            }
            if let Some(p) = pending.get_mut(qi) {
                *p &= !w.wr_id;
                if scnt < iters && *p == 0 {
                    c.post_send(qi, o.size, ud_remote)?;
                    *p = RECV_WRID | SEND_WRID;
                }
            }
        }
    }
    Ok(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positional_forms() {
        let s = |v: &[&str]| split_positional(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert!(matches!(s(&[]), Ok((Variant::Rc, None))));
        assert!(matches!(s(&["ud"]), Ok((Variant::Ud, None))));
        let (v, h) = s(&["127.0.0.1"]).expect("rc client");
        assert_eq!((v, h.as_deref()), (Variant::Rc, Some("127.0.0.1")));
        let (v, h) = s(&["srq", "host"]).expect("srq client");
        assert_eq!((v, h.as_deref()), (Variant::Srq, Some("host")));
        assert!(s(&["xx", "host"]).is_err());
    }
}
