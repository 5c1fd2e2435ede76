//! One end of a benchmark: its verbs objects, the perftest-side steps the out-of-band
//! exchange calls ([`BenchHooks`]), and the console output perftest prints at those
//! points (docs/perftest.md §6).
//!
//! The same `Side` runs in every topology: as a client or server process talking TCP to
//! its peer (which may be the real perftest), or as one of two threads of one process
//! (`--loopback`, `--pair`) talking over a socketpair. Only the device differs.
//!
//! # Buffers (per QP, perftest's layout where the peer can see it)
//!
//! * `dst`: the region the peer may access, advertised as VADDR/RKEY in the KEY
//!   message: `max(size, cycle_buffer)` bytes per QP, as perftest registers for its peer
//!   (docs/perftest.md §5). RDMA WRITEs and atomics land here, READs read from here, and
//!   `write_lat` polls its last message byte here.
//! * `src`: the local side of requests (WRITE/SEND payloads, READ destinations, atomic
//!   results). With `--verify` it holds one slot per outstanding operation, so no slot is
//!   reused before its operation completed and was checked.
//! * `rx`: receive buffers of send tests (+40 bytes of GRH area for UD); with `--verify`
//!   one slot per posted receive.

use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use oob::console::{self, HeaderInfo, PcieRelaxed, RESULT_LINE};
use oob::json::{BwResult, LatResult};
use oob::perftest::{
    BenchHooks, BwReport, Connection, HookError, KeyMessage, LocalSystem, Negotiated, Role,
    TestKind, Verb,
};
use uroce::{
    AccessFlags, Ah, AhAttr, CompChannel, Context, Cq, Device, Gid, GlobalRoute, MrBuf, Mtu, Pd,
    Qp, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr, GRH_BYTES,
};

use super::params::{inline_size, Params, MAX_SIZE};
use super::util::random_psn;
use super::verify;

/// perftest's UD Q_Key (`DEF_QKEY`).
pub const QKEY: u32 = 0x1111_1111;
/// Memory a `--verify` run may use for distinct per-operation slots, per QP and buffer.
const VERIFY_SLOT_BYTES: u64 = 16 << 20;
/// Hop limit perftest puts in its address vectors.
const HOP_LIMIT: u8 = 0xff;

/// One result, for `--json` and `--plot`.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(untagged)]
pub enum Row {
    /// A bandwidth line.
    Bw(BwResult),
    /// A latency line.
    Lat(LatResult),
}

/// The verbs objects of one side.
pub struct Res {
    pub pd: Pd,
    /// Send CQ (and receive CQ of non-send tests).
    pub scq: Cq,
    /// Receive CQ (send tests; otherwise the send CQ again).
    pub rcq: Cq,
    pub channel: Option<CompChannel>,
    pub qps: Vec<Qp>,
    /// UD address handles toward the peer's QPs.
    pub ahs: Vec<Ah>,
    pub src: MrBuf,
    pub dst: MrBuf,
    pub rx: Option<MrBuf>,
    pub src_slice: usize,
    pub dst_slice: usize,
    pub rx_slice: usize,
    pub local: Vec<KeyMessage>,
    pub remote: Vec<KeyMessage>,
    pub mtu: Mtu,
    pub cycle_buffer: u64,
    pub cache_line: u64,
    pub inline: u32,
    /// Receives posted per QP in the current run (send tests).
    pub rx_posted: Vec<u64>,
    /// Receive slots in the current run and the message size they were posted for.
    pub rx_slots: u64,
    pub rx_size: u64,
    /// What [`Side::add_qp`] makes QPs with.
    pub qp_type: QpType,
    pub qp_cap: QpCap,
    pub access: AccessFlags,
    pub gid: Gid,
    pub out_reads: u32,
    /// The Q_Key UD sends carry: perftest's [`QKEY`], or with `-R` rdma_cm's (the peer's
    /// QP was made by rdma_cm, `RDMA_UDP_QKEY`).
    pub qkey: u32,
    /// Both ends offered selective repeat (docs/perftest.md §10): the RC QPs use it.
    pub selective_repeat: bool,
}

/// One end of a benchmark.
pub struct Side {
    pub p: Params,
    pub role: Role,
    pub dev: Device,
    ctx: Context,
    /// Print perftest's console text (off for the hidden server of in-process runs, and
    /// with `--json`).
    pub console: bool,
    /// Both ends run in this process: skip `ib_write_bw`'s 1 s pause.
    pub in_process: bool,
    /// Show progress on stderr for long runs.
    pub progress: bool,
    pub res: Option<Res>,
    /// Results, for `--json` and `--plot`.
    pub rows: Vec<Row>,
    /// `--verify` failures found on this side.
    pub failures: Vec<String>,
    /// The last size run (for the final target check).
    pub last_size: u64,
    sys: LocalSystem,
    /// `-R`: the rdma_cm side of the test's QPs.
    pub cm: Option<super::cm::WorkCm>,
}

impl Side {
    /// Opens the device and reads what the exchange needs before it starts (the MTU).
    pub fn new(
        p: Params,
        role: Role,
        dev: Device,
        console: bool,
        in_process: bool,
    ) -> Result<Side> {
        let ctx = dev
            .open()
            .with_context(|| format!("Couldn't get context for the device {}", dev.name()))?;
        let port = ctx
            .query_port(p.ib_port)
            .with_context(|| format!("Unable to query port {}", p.ib_port))?;
        let active = port.active_mtu.bytes();
        // perftest's set_mtu: -m if given, capped to the port's active MTU.
        let mtu_bytes = match p.mtu_req {
            None => active,
            Some(m) => {
                if Mtu::from_bytes(m).is_none() {
                    bail!(" Invalid MTU - {m} ");
                }
                m.min(active)
            }
        };
        let mtu = Mtu::from_bytes(mtu_bytes).unwrap_or(Mtu::Mtu1024);
        let sys = LocalSystem {
            page_size: 4096,
            cache_line: 64,
            mtu,
        };
        Ok(Side {
            progress: console,
            p,
            role,
            dev,
            ctx,
            console,
            in_process,
            res: None,
            rows: Vec::new(),
            failures: Vec::new(),
            last_size: 0,
            sys,
            cm: None,
        })
    }

    /// What M2–M4 advertise.
    pub fn local_system(&self) -> LocalSystem {
        self.sys
    }

    fn say(&self, text: &str) {
        if self.console {
            print!("{text}");
        }
    }

    /// Whether the peer's requests land in this side's memory and leave a state to check
    /// at the end: WRITE and atomic bandwidth targets (the server, or both with `-b`) and
    /// the `atomic_lat` server. (`write_lat` checks every message as it arrives.)
    fn target(&self) -> bool {
        let p = &self.p;
        let bw_target = p.cfg.kind == TestKind::Bw && (self.role == Role::Server || p.cfg.duplex());
        match p.cfg.verb {
            Verb::Write => bw_target,
            Verb::Atomic => bw_target || self.role == Role::Server,
            Verb::Read | Verb::Send => false,
        }
    }

    /// The largest message of the run.
    fn max_size(&self, n: &Negotiated) -> u64 {
        self.p
            .cfg
            .sweep_sizes(n.mtu, n.size)
            .into_iter()
            .max()
            .unwrap_or(n.size)
            .min(if self.p.cfg.run_all {
                MAX_SIZE
            } else {
                u64::MAX
            })
    }

    /// Makes later verbs objects on `ctx` (`-R`: the context of the rdma_cm IDs).
    pub fn set_context(&mut self, ctx: Context) {
        self.ctx = ctx;
    }

    fn create(&mut self, n: &Negotiated) -> Result<Vec<KeyMessage>> {
        if self.p.cfg.rdma_cm {
            return super::cm::connect_work(self, n);
        }
        self.create_res(n)?;
        for _ in 0..self.p.cfg.qps() {
            self.add_qp(None)?;
        }
        Ok(self.created(n))
    }

    /// The PD, CQs and buffers of the test (no QPs yet).
    pub fn create_res(&mut self, n: &Negotiated) -> Result<()> {
        let p = &self.p;
        let verb = p.cfg.verb;
        let ctx = self.ctx.clone();
        let dattr = ctx.query_device().context("Couldn't query device")?;
        let out_reads = if verb == Verb::Read || verb == Verb::Atomic {
            p.out_reads_req
                .unwrap_or(dattr.max_qp_rd_atom)
                .min(dattr.max_qp_rd_atom)
                .clamp(1, 255)
        } else {
            1
        };
        let inline = inline_size(p, ctx.max_inline_data());
        let channel = if p.use_event {
            Some(
                ctx.create_comp_channel()
                    .context("Couldn't create completion channel")?,
            )
        } else {
            None
        };
        let pd = ctx.alloc_pd().context("Couldn't allocate PD")?;
        let q = p.cfg.qps();
        let is_send = verb == Verb::Send;
        let scq = ctx
            .create_cq(p.tx_depth * q as u32 + 16, channel.as_ref(), 0)
            .context("Couldn't create CQ")?;
        let rcq = if is_send {
            ctx.create_cq(p.rx_depth * q as u32 + 16, channel.as_ref(), 0)
                .context("Couldn't create CQ")?
        } else {
            scq.clone()
        };
        let ud = p.cfg.connection == Connection::Ud;
        let qp_type = match p.cfg.connection {
            Connection::Rc => QpType::Rc,
            Connection::Uc => QpType::Uc,
            Connection::Ud => QpType::Ud,
        };
        let cycle_buffer = u64::try_from(n.cycle_buffer.max(64)).unwrap_or(4096);
        let cache_line = u64::try_from(n.cache_line.max(8)).unwrap_or(64);
        let max_size = self.max_size(n);
        let round = |x: u64| x.div_ceil(cycle_buffer) * cycle_buffer;
        let base = round(max_size.max(cycle_buffer));
        let src_slice = if p.verify {
            let want = u64::from(p.tx_depth) * verify::inc(max_size, cache_line);
            base.max(round(want.min(VERIFY_SLOT_BYTES)))
        } else {
            base
        };
        let grh = if ud { GRH_BYTES as u64 } else { 0 };
        let rx_slice = if !is_send {
            0
        } else if p.verify {
            let want = u64::from(p.rx_depth) * verify::inc(max_size + grh, cache_line);
            let cap = if p.cfg.connection == Connection::Rc {
                VERIFY_SLOT_BYTES
            } else {
                // UD and UC lose a message that finds no receive: every receive needs
                // its own slot.
                if want > 256 << 20 {
                    bail!("--verify with UD/UC needs rx-depth × size ≤ 256 MiB per QP");
                }
                want
            };
            round((max_size + grh).max(cycle_buffer)).max(round(want.min(cap)))
        } else {
            round((max_size + grh).max(cycle_buffer))
        };
        let to_usize = |x: u64| usize::try_from(x).map_err(|_| anyhow!("buffer too large"));
        let (src_slice, dst_slice, rx_slice) =
            (to_usize(src_slice)?, to_usize(base)?, to_usize(rx_slice)?);
        let access = match p.cfg.connection {
            Connection::Uc => AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            _ => uroce::pair::ALL_ACCESS,
        };
        let src = pd
            .alloc_mr(src_slice * q, AccessFlags::LOCAL_WRITE)
            .context("Couldn't allocate MR")?;
        let mut dst = pd
            .alloc_mr(dst_slice * q, access)
            .context("Couldn't allocate MR")?;
        let rx = if is_send {
            Some(
                pd.alloc_mr(rx_slice * q, AccessFlags::LOCAL_WRITE)
                    .context("Couldn't allocate MR")?,
            )
        } else {
            None
        };
        if p.verify && verb == Verb::Read {
            for (i, chunk) in dst.chunks_mut(dst_slice).enumerate() {
                verify::fill_static(chunk, i);
            }
        }
        let cap = QpCap {
            max_send_wr: p.tx_depth.max(1),
            max_recv_wr: if is_send { p.rx_depth } else { 1 },
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: inline,
        };
        let gid = ctx
            .query_gid(p.ib_port, u32::from(p.gid_index))
            .context("Couldn't read the GID")?;
        if gid.is_zero() {
            bail!(" GID index {} is empty on this device", p.gid_index);
        }
        self.last_size = max_size;
        self.res = Some(Res {
            pd,
            scq,
            rcq,
            channel,
            qps: Vec::with_capacity(q),
            ahs: Vec::new(),
            src,
            dst,
            rx,
            src_slice,
            dst_slice,
            rx_slice,
            local: Vec::with_capacity(q),
            remote: Vec::new(),
            mtu: n.mtu,
            cycle_buffer,
            cache_line,
            inline,
            rx_posted: vec![0; q],
            rx_slots: 1,
            rx_size: 0,
            selective_repeat: n.selective_repeat && qp_type == QpType::Rc,
            qp_type,
            qp_cap: cap,
            access,
            gid,
            out_reads,
            qkey: QKEY,
        });
        if p.cfg.offer_selective_repeat {
            // uroce's own line, on stderr: perftest's console output stays as it is.
            eprintln!(
                " uroce: selective repeat {}",
                if self.res.as_ref().is_some_and(|r| r.selective_repeat) {
                    "on (both ends offered it)"
                } else {
                    "off (the peer did not offer it, or not RC)"
                }
            );
        }
        Ok(())
    }

    /// Creates the next QP — on the rdma_cm ID `id` with `-R` (which moves it to INIT), else
    /// on the PD and moved to INIT (UD: to RTS) here — and its KEY message.
    pub fn add_qp(&mut self, id: Option<&uroce::rdma_cm::RdmaCmId>) -> Result<()> {
        let p = &self.p;
        let res = self
            .res
            .as_mut()
            .ok_or_else(|| anyhow!("QP before setup"))?;
        let i = res.qps.len();
        let mut init = QpInitAttr::new(res.qp_type, &res.scq, res.qp_cap);
        init.recv_cq = &res.rcq;
        init.selective_repeat = res.selective_repeat;
        let psn = random_psn();
        let qp = match id {
            Some(id) => id
                .create_qp(&res.pd, &init)
                .context("Failed to create QP on the rdma_cm ID")?,
            None => {
                let qp = res.pd.create_qp(&init).context("Couldn't create QP")?;
                if res.qp_type == QpType::Ud {
                    qp.ready_ud(p.ib_port, QKEY, psn)
                        .context("Failed to modify UD QP to RTS")?;
                } else {
                    let a = QpAttr {
                        qp_state: QpState::Init,
                        pkey_index: 0,
                        port_num: p.ib_port,
                        qp_access_flags: res.access & !AccessFlags::LOCAL_WRITE,
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
                qp
            }
        };
        res.local.push(KeyMessage {
            lid: 0,
            out_reads: res.out_reads as u16,
            qpn: qp.qp_num(),
            psn,
            rkey: res.dst.rkey(),
            vaddr: res.dst.addr() + (i * res.dst_slice) as u64,
            gid: res.gid.0,
            srqn: 0,
        });
        res.qps.push(qp);
        Ok(())
    }

    /// The QPs are made: print the header block (and perftest's UD size note), and return
    /// the KEY messages.
    pub fn created(&mut self, n: &Negotiated) -> Vec<KeyMessage> {
        let Some(res) = self.res.as_ref() else {
            return Vec::new();
        };
        let keys = res.local.clone();
        let header = self.header(n.mtu, res.inline, res.out_reads);
        self.say(&header);
        // perftest's stderr note on the UD size clamp (once per run, not from the hidden
        // server of an in-process run).
        if let Some(note) = &n.notice {
            if self.console || !self.in_process {
                eprint!("{note}");
            }
        }
        keys
    }

    fn header(&self, mtu: Mtu, inline: u32, out_reads: u32) -> String {
        let p = &self.p;
        let mut h = HeaderInfo::for_test(&p.cfg, self.role, self.dev.name(), mtu);
        h.atomic_type = p.atomic;
        h.post_list = p.post_list;
        h.use_event = p.use_event;
        h.pcie_relaxed = PcieRelaxed::Unsupported;
        h.tx_depth = p.tx_depth;
        h.rx_depth = p.rx_depth;
        h.cq_mod = p.cq_mod;
        h.gid_index = Some(i32::from(p.gid_index));
        h.inline_size = inline;
        h.out_reads = out_reads;
        console::header_block(&h)
    }

    fn connect_qps(&mut self, remote: &[KeyMessage]) -> Result<()> {
        let p = &self.p;
        let res = self
            .res
            .as_mut()
            .ok_or_else(|| anyhow!("connect before setup"))?;
        if remote.len() != res.qps.len() {
            bail!(
                "the peer sent {} QP addresses, this side has {} QPs",
                remote.len(),
                res.qps.len()
            );
        }
        let ud = p.cfg.connection == Connection::Ud;
        let to_rts = p.cfg.kind == TestKind::Lat || self.role == Role::Client || p.cfg.duplex();
        for ((qp, me), rem) in res.qps.iter().zip(&res.local).zip(remote) {
            let av = AhAttr {
                grh: GlobalRoute {
                    dgid: Gid(rem.gid),
                    flow_label: 0,
                    sgid_index: p.gid_index,
                    hop_limit: HOP_LIMIT,
                    traffic_class: 0,
                },
                dlid: rem.lid,
                sl: p.sl,
                src_path_bits: 0,
                static_rate: 0,
                is_global: true,
                port_num: p.ib_port,
            };
            if ud {
                if to_rts {
                    res.ahs
                        .push(res.pd.create_ah(&av).context("Failed to create AH")?);
                }
                continue;
            }
            let rc = p.cfg.connection == Connection::Rc;
            let mut a = QpAttr {
                qp_state: QpState::Rtr,
                path_mtu: res.mtu,
                dest_qp_num: rem.qpn,
                rq_psn: rem.psn,
                ah_attr: av,
                max_dest_rd_atomic: me.out_reads.min(255) as u8,
                min_rnr_timer: 12,
                ..QpAttr::default()
            };
            let mut mask = QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN;
            if rc {
                mask |= QpAttrMask::MIN_RNR_TIMER | QpAttrMask::MAX_DEST_RD_ATOMIC;
            }
            qp.modify(&a, mask)
                .with_context(|| format!("Failed to modify QP {} to RTR", qp.qp_num()))?;
            if !to_rts {
                continue;
            }
            a.qp_state = QpState::Rts;
            a.sq_psn = me.psn;
            a.timeout = p.qp_timeout;
            a.retry_cnt = 7;
            a.rnr_retry = 7;
            a.max_rd_atomic = rem.out_reads.clamp(1, 255) as u8;
            let mut mask = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
            if rc {
                mask |= QpAttrMask::TIMEOUT
                    | QpAttrMask::RETRY_CNT
                    | QpAttrMask::RNR_RETRY
                    | QpAttrMask::MAX_QP_RD_ATOMIC;
            }
            qp.modify(&a, mask).context("Failed to modify QP to RTS")?;
        }
        res.remote = remote.to_vec();
        Ok(())
    }

    /// Send tests: post this side's receives for a run of `size`-byte messages (perftest's
    /// `ctx_set_recv_wqes`), before the SYNC that lets the peer send.
    fn post_receives(&mut self, size: u64) -> Result<()> {
        let p = &self.p;
        let res = self
            .res
            .as_mut()
            .ok_or_else(|| anyhow!("prepare before setup"))?;
        let Some(rx) = res.rx.as_ref() else {
            return Ok(());
        };
        let receiving = p.cfg.verb == Verb::Send
            && (self.role == Role::Server || p.cfg.duplex() || p.cfg.kind == TestKind::Lat);
        if !receiving {
            return Ok(());
        }
        let grh = if p.cfg.connection == Connection::Ud {
            GRH_BYTES as u64
        } else {
            0
        };
        let len = size + grh;
        let inc = verify::inc(len, res.cache_line);
        let slots = if p.verify {
            (res.rx_slice as u64 / inc).clamp(1, u64::from(p.rx_depth))
        } else {
            verify::cycle_slots(len, inc, res.cycle_buffer)
        };
        let depth = if p.verify {
            u64::from(p.rx_depth).min(slots)
        } else {
            u64::from(p.rx_depth)
        };
        let total = if p.duration.is_some() {
            u64::MAX
        } else {
            p.iters
        };
        res.rx_slots = slots;
        res.rx_size = size;
        for (i, qp) in res.qps.iter().enumerate() {
            let want = depth.min(total);
            for k in 0..want {
                let off = i * res.rx_slice + ((k % slots) * inc) as usize;
                let sge = [rx.sge(off, len as u32)];
                qp.post_recv(&[RecvWr::new(rx_wr_id(i, k % slots), &sge)])
                    .map_err(|e| anyhow!("Couldn't post recv: {e}"))?;
            }
            if let Some(c) = res.rx_posted.get_mut(i) {
                *c = want;
            }
        }
        Ok(())
    }

    /// After the exchange: the target-side `--verify` checks and perftest's last line.
    pub fn finish(&mut self) {
        if self.p.verify && self.target() && self.p.duration.is_none() {
            if let Err(e) = self.check_target() {
                self.failures.push(format!("{e:#}"));
            }
        }
        self.say(RESULT_LINE);
    }

    /// The peer's WRITEs or atomics of the last run left a known state in `dst`.
    fn check_target(&self) -> Result<()> {
        let p = &self.p;
        let res = self.res.as_ref().ok_or_else(|| anyhow!("no resources"))?;
        let size = self.last_size;
        if size == 0 {
            return Ok(());
        }
        let inc = verify::inc(size, res.cache_line);
        let slots = if p.cfg.kind == TestKind::Lat {
            1
        } else {
            verify::cycle_slots(size, inc, res.cycle_buffer)
        };
        let dst = res.dst.as_slice();
        for i in 0..res.qps.len() {
            for s in 0..slots {
                let off = i * res.dst_slice + (s * inc) as usize;
                match p.cfg.verb {
                    Verb::Write => {
                        let Some(k) = verify::last_writer(p.iters, slots, s) else {
                            continue;
                        };
                        let got = dst.get(off..off + size as usize).unwrap_or(&[]);
                        if !verify::check_op(got, i, k, false) {
                            bail!("verify: QP {i} target slot {s} does not hold WRITE {k} of {size} bytes");
                        }
                    }
                    Verb::Atomic => {
                        let want = match p.atomic {
                            console::AtomicType::FetchAndAdd => verify::hits(p.iters, slots, s),
                            console::AtomicType::CmpAndSwap => 0,
                        };
                        let got = dst
                            .get(off..off + 8)
                            .and_then(|b| <[u8; 8]>::try_from(b).ok())
                            .map(u64::from_ne_bytes);
                        if got != Some(want) {
                            bail!("verify: QP {i} atomic slot {s} holds {got:?}, expected {want}");
                        }
                    }
                    Verb::Read | Verb::Send => {}
                }
            }
        }
        Ok(())
    }

    fn push_bw(&mut self, mine: &BwReport, peer: Option<&BwReport>) {
        self.say(&format!("{}\n", console::bw_line(mine, peer, self.p.units)));
        self.rows.push(Row::Bw(BwResult::new(
            &self.p.tool(),
            self.role,
            self.p.units,
            mine,
            peer,
        )));
    }

    /// Records and prints a latency result.
    pub fn push_lat(&mut self, r: &console::LatReport) {
        self.say(&format!("{}\n", console::lat_line(r)));
        self.rows
            .push(Row::Lat(LatResult::new(&self.p.tool(), self.role, r)));
    }

    /// Records and prints a `-D` latency result.
    pub fn push_lat_duration(&mut self, size: u64, iters: u64, t_avg: f64, tps: f64) {
        self.say(&format!(
            "{}\n",
            console::lat_duration_line(size, iters, t_avg, tps)
        ));
        let r = console::LatReport {
            size,
            iters,
            t_min: t_avg,
            t_max: t_avg,
            t_typical: t_avg,
            t_avg,
            t_stdev: 0.0,
            p99: t_avg,
            p999: t_avg,
        };
        self.rows
            .push(Row::Lat(LatResult::new(&self.p.tool(), self.role, &r)));
    }

    /// The watchdog limit.
    pub fn stall(&self) -> Duration {
        self.p.stall
    }
}

/// wr_id of receive `slot` of QP `qp`.
pub fn rx_wr_id(qp: usize, slot: u64) -> u64 {
    ((qp as u64) << 40) | slot
}

/// wr_id of send operation `seq` of QP `qp`.
pub fn tx_wr_id(qp: usize, seq: u64) -> u64 {
    ((qp as u64) << 40) | seq
}

/// Splits a wr_id into (QP index, number).
pub fn split_wr_id(id: u64) -> (usize, u64) {
    ((id >> 40) as usize, id & ((1 << 40) - 1))
}

fn hook_err(e: anyhow::Error) -> HookError {
    format!("{e:#}").into()
}

impl BenchHooks for Side {
    fn sleep(&mut self, duration: Duration) {
        if !self.in_process {
            std::thread::sleep(duration);
        }
    }

    fn negotiated(&mut self, n: &Negotiated) -> Result<Vec<KeyMessage>, HookError> {
        self.create(n).map_err(hook_err)
    }

    fn connect(&mut self, remote: &[KeyMessage]) -> Result<(), HookError> {
        self.connect_qps(remote).map_err(hook_err)
    }

    fn addresses(&mut self, local: &[KeyMessage], remote: &[KeyMessage]) {
        if self.p.cfg.rdma_cm {
            // rdma_cm connected the QPs (no Connect event): the KEYs give the peer's
            // buffers.
            if let Some(res) = self.res.as_mut() {
                res.remote = remote.to_vec();
            }
        }
        let p = &self.p;
        let mut text = console::address_block(p.cfg.verb, local, remote, true);
        let passive_lat_server = p.cfg.kind == TestKind::Lat
            && matches!(p.cfg.verb, Verb::Read | Verb::Atomic)
            && self.role == Role::Server;
        if !passive_lat_server {
            match (p.cfg.kind, p.duration.is_some()) {
                (TestKind::Bw, _) => text.push_str(&console::bw_table_header(p.units, false)),
                (TestKind::Lat, false) => text.push_str(&console::lat_table_header()),
                (TestKind::Lat, true) => {
                    text.push_str(RESULT_LINE);
                    text.push_str(console::LAT_DURATION_COLUMNS);
                    text.push('\n');
                }
            }
        }
        self.say(&text);
    }

    fn prepare(&mut self, size: u64) -> Result<(), HookError> {
        self.post_receives(size).map_err(hook_err)
    }

    fn run(&mut self, size: u64) -> Result<Option<BwReport>, HookError> {
        self.last_size = size;
        let report = super::runs::run(self, size).map_err(hook_err)?;
        if let Some(r) = &report {
            if !self.p.cfg.duplex() {
                let r = *r;
                self.push_bw(&r, None);
            }
        }
        Ok(report)
    }

    fn report(&mut self, mine: Option<&BwReport>, peer: &BwReport) {
        match mine {
            // -b: own size and iterations, both sides' rates.
            Some(m) => {
                let m = *m;
                let peer = *peer;
                self.push_bw(&m, Some(&peer));
            }
            // Unidirectional server: the client's line, verbatim.
            None => {
                let peer = *peer;
                self.push_bw(&peer, None);
            }
        }
    }
}
