//! A host for real device datapaths with no thread, socket or clock of its own: the
//! device's third driver, beside the engine thread and a daemon's clients
//! (docs/architecture.md §4, "Datapath and driver").
//!
//! A [`Host`] holds devices — each a real device state (`DevState`) with its command handlers, MR table
//! and DMA checks, rings, CQs and timers — and drives them the way the engine does, minus
//! the I/O: commands go through the same dispatch the control plane uses
//! (`DevState::execute`, uverbs bytes in, reply bytes out), each pass runs the datapath
//! (`crate::datapath`: doorbells, timers, the CM's MADs, ready QPs, the internal loopback)
//! at the host's virtual time, and what a device queues for its socket is carried by a
//! seeded wire — a fixed delay; loss, duplication, reordering and corruption at the rates
//! set — to the device bound to the destination address, whose datapath takes it through
//! `handle_datagram` as if a socket had read it (ICRC check included). A test may take a
//! hand in it: [`Host::fate`] decides per datagram (drop, duplicate, delay, or replace it with
//! forged bytes the wire seals with a correct ICRC), and [`Host::inject`] puts a forged one on
//! the wire. Time moves only when nothing is left to do now: to the next
//! transport deadline or the next arrival. So a run is reproducible from its seed, and a
//! test of retransmission after loss takes no wall time.
//!
//! Each device names memory as offsets into a window of its own ([`Host::window`] bytes,
//! `dma::AddressSpace::Window`): MRs, CQ rings and QP rings are carved from it by
//! [`Host::alloc`], and a test reads and writes application memory with
//! [`Host::read`] / [`Host::write`]. Completions are polled from the CQ rings in that
//! memory, as the library polls them.
//!
//! [`SimMemory`] is the device's MR table and DMA checks without the rest of the device:
//! registered memory for bare transport QPs, as `crates/sim`'s endpoints use it.

use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use abi::cmd::Reply;
use abi::doorbell::DoorbellLayout;
use abi::fastpath::{recv_wqe_size, send_wqe_size, Cqe, CQE_BYTES};
use abi::ring::{Consumer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::*;
use abi::{Errno, Request};
use transport::wire::icrc;
use transport::wire::{IpRepr, UdpRepr, ROCE_V2_PORT};
use transport::Time;
use zerocopy::{FromBytes, IntoBytes};

use crate::datapath::{
    check_err_rqs, drain_doorbells, fire_timers, handle_datagram, send_gsi, work, Queues,
};
use crate::state::{CtxId, DevState, EngineLink};
use crate::{DeviceConfig, Limits};

pub mod memory;
pub mod workload;

pub use memory::SimMemory;

/// Bytes of each device's memory window unless [`Host::window`] says otherwise.
pub const WINDOW: usize = 4 << 20;
/// Where the window's allocations start (offset 0 stays unused, as address 0 would).
const FIRST_ALLOC: u64 = 0x1000;
const DOORBELL_SLOTS: u32 = 64;
/// The user handle every CQ is created with (what its async events name).
pub const CQ_USER_HANDLE: u64 = 0xc0;
/// The user handle every QP is created with (what its async events name).
pub const QP_USER_HANDLE: u64 = 0x9000;

/// The virtual clock every device of a host reads (ns).
#[derive(Debug)]
struct SimLink {
    now: Arc<AtomicU64>,
    /// A real eventfd: a context hands the library a copy of the engine's wake fd.
    wake: OwnedFd,
}

impl abi::doorbell::Progress for SimLink {
    /// The host runs every pass itself: a caller never does the device's work.
    fn drive(&self) -> bool {
        false
    }
}

impl EngineLink for SimLink {
    fn now(&self) -> Time {
        Time(self.now.load(Ordering::Relaxed))
    }
    fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }
    /// Nothing to wake: the host's next pass sees what the command changed.
    fn kick(&self) {}
    /// The host runs every pass itself.
    fn progress_for(&self, _id: u64) -> Option<Arc<dyn abi::doorbell::Progress>> {
        None
    }
}

/// A device of a [`Host`].
#[derive(Debug)]
struct Dev {
    st: DevState,
    q: Queues,
    mem: Arc<SharedMem>,
    ctx: CtxId,
    addr: Ipv4Addr,
    /// The window's bump allocator (next free offset).
    next: u64,
    pd: u32,
    /// The library's end of the context's async event socket.
    async_fd: Option<OwnedFd>,
    /// The library's copy of the wake fd (unused: the host runs every pass itself).
    _wake_fd: Option<OwnedFd>,
    /// When this device's link is done sending what it was given (ns; [`Host::link_mbps`]).
    egress_free: u64,
}

impl Drop for Dev {
    /// The context closes, as a closed connection does.
    fn drop(&mut self) {
        self.st.destroy_context(self.ctx);
    }
}

/// A datagram on the virtual wire.
#[derive(Debug)]
struct InFlight {
    at: u64,
    to: IpAddr,
    from: SocketAddr,
    bytes: Vec<u8>,
    /// Marked Congestion Experienced on the way (by [`Bottleneck`]).
    ce: bool,
}

/// A switch port in front of one address: everything sent to `to` queues there and leaves
/// at `rate_mbps`; a datagram that finds more than `queue_bytes` queued is tail-dropped, one
/// that finds more than `mark_bytes` is marked CE (ECN, RFC 3168) — the bottleneck that
/// congestion control is for (docs/wire.md §11).
#[derive(Clone, Copy, Debug)]
pub struct Bottleneck {
    /// The address behind the port.
    pub to: Ipv4Addr,
    /// The port's rate (Mbit/s).
    pub rate_mbps: u64,
    /// Tail-drop threshold (bytes queued).
    pub queue_bytes: u64,
    /// CE-marking threshold (bytes queued).
    pub mark_bytes: u64,
}

/// What a [`Bottleneck`] did.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortStats {
    /// Datagrams tail-dropped.
    pub tail_drops: u64,
    /// Datagrams marked CE.
    pub ce_marks: u64,
}

/// Bytes a datagram of `len` UDP payload bytes occupies on an Ethernet link: IPv4 and UDP
/// headers (28), Ethernet header, FCS, preamble and inter-frame gap (38).
fn wire_len(len: usize) -> u64 {
    len as u64 + 28 + 38
}

/// An index into a host's devices.
pub type DevId = usize;

/// A memory region: `addr` is its iova (= its window offset).
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    /// Handle.
    pub handle: u32,
    /// Start (iova and window offset).
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// A CQ and where its ring is.
#[derive(Debug)]
pub struct Cq {
    /// Handle.
    pub handle: u32,
    ring: Consumer,
    slots: u32,
}

impl Cq {
    /// Whether completions wait to be polled.
    pub fn pending(&mut self) -> bool {
        self.ring.available().is_ok_and(|n| n > 0)
    }

    /// CQEs the ring holds (the requested depth rounded up to a power of two).
    pub fn capacity(&self) -> u32 {
        self.slots
    }
}

/// The timers and retry counts of an RC connection ([`Host::connect_rc_with`]).
#[derive(Clone, Copy, Debug)]
pub struct RcOpts {
    /// Local ACK timeout exponent: 4.096 µs × 2^`timeout`.
    pub timeout: u8,
    /// Transport retries (7: the most).
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// The RNR NAK timer code this side's responder sends (IBTA Table 45).
    pub min_rnr_timer: u8,
    /// The first PSN of both directions (both ends of a connection must agree).
    pub psn: u32,
    /// Path MTU (perftest's default: 1024).
    pub path_mtu: abi::Mtu,
    /// Selective repeat instead of go-back-N (what the CM's ECE exchange agrees; both ends
    /// of a connection must agree).
    pub selective_repeat: bool,
    /// Initiator depth: READs and atomics this QP may have outstanding.
    pub max_rd_atomic: u8,
}

impl Default for RcOpts {
    fn default() -> RcOpts {
        RcOpts {
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            psn: 0x100,
            path_mtu: abi::Mtu::Mtu1024,
            selective_repeat: false,
            max_rd_atomic: 4,
        }
    }
}

/// A shared receive queue.
#[derive(Clone, Copy, Debug)]
pub struct Srq {
    /// Handle.
    pub handle: u32,
    /// SRQ number.
    pub srqn: u32,
}

/// A QP.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    /// Handle.
    pub handle: u32,
    /// QP number.
    pub qpn: u32,
}

/// What the wire does with one datagram, as a test's [`Host::fate`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Carry it (the wire's random rates still apply).
    Deliver,
    /// Lose it.
    Drop,
    /// Deliver it twice, the copy this many ns after the original.
    Duplicate(u64),
    /// Deliver it this many ns later than the wire's delay (later datagrams overtake it).
    Delay(u64),
    /// Deliver these bytes instead (BTH through pad, no ICRC): the wire seals them with
    /// a correct ICRC, as a forging peer would ([`Host::inject`]).
    Replace(Vec<u8>),
    /// Deliver it as if the sender's kernel had given it this IPv4 Identification and DF
    /// (the ICRC, which covers both, resealed for them): what a sender numbering its
    /// packets from a counter, such as Linux rxe, puts on the wire. The receiver's socket
    /// shows it neither.
    Numbered {
        /// The IPv4 Identification.
        ident: u16,
        /// The Don't Fragment bit.
        dont_frag: bool,
    },
}

/// A datagram on its way, as [`Host::fate`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// The sending device's address.
    pub from: IpAddr,
    /// The destination address.
    pub to: IpAddr,
    /// The UDP payload: BTH first, ICRC last.
    pub bytes: &'a [u8],
}

/// A test's per-datagram decision ([`Host::fate`]).
pub struct FateFn(pub Box<dyn FnMut(&Datagram<'_>) -> Fate + Send>);

impl core::fmt::Debug for FateFn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("FateFn")
    }
}

/// Devices, a virtual clock and a seeded lossy network (module docs).
#[derive(Debug)]
pub struct Host {
    clock: Arc<AtomicU64>,
    devs: Vec<Dev>,
    wire: VecDeque<InFlight>,
    rng: u64,
    /// One-way delay of every datagram (ns).
    pub delay_ns: u64,
    /// Probability that a datagram is lost.
    pub loss: f64,
    /// Probability that a datagram arrives twice.
    pub dup: f64,
    /// Probability that a datagram is held back by up to `reorder_ns` (others overtake it).
    pub reorder: f64,
    /// The longest extra delay of a held-back datagram (ns).
    pub reorder_ns: u64,
    /// Probability that one byte of a datagram is flipped on the way (the receiver's ICRC
    /// check must drop it).
    pub corrupt: f64,
    /// Datagrams lost so far.
    pub lost: u64,
    /// Datagrams delivered so far.
    pub delivered: u64,
    /// Bytes of memory window each device added from now on gets.
    pub window: usize,
    /// A time the driver of the host wants to act at (e.g. post a receive late):
    /// [`Host::run_until`] moves the clock to it as to any other event.
    pub alarm: Option<u64>,
    /// A test's hand on the wire: asked about every datagram before the random rates
    /// (drop this one, duplicate that one), as the conformance tests of a bare transport
    /// pair do with their pipe.
    pub fate: Option<FateFn>,
    /// Each device's own link rate (Mbit/s): what a device sends leaves one datagram after
    /// another at this rate (`None`: all at once).
    pub link_mbps: Option<u64>,
    /// A switch port in front of one address ([`Bottleneck`]); its doings in `port`.
    pub bottleneck: Option<Bottleneck>,
    /// What the bottleneck did so far.
    pub port: PortStats,
    /// When the bottleneck's port is done with what it holds (ns).
    port_free: u64,
}

/// The wire's xorshift64 state for `seed`: one SplitMix64 step, so that neighbouring seeds
/// give unrelated draws (and never the all-zero state xorshift cannot leave).
fn rng_state(seed: u64) -> u64 {
    let mut s = seed;
    crate::keys::splitmix64(&mut s).max(1)
}

/// A command the device refused, with its errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refused(pub Errno);

impl Host {
    /// An empty host whose network draws its losses from `seed`.
    pub fn new(seed: u64) -> Host {
        Host {
            clock: Arc::new(AtomicU64::new(1)),
            devs: Vec::new(),
            wire: VecDeque::new(),
            rng: rng_state(seed),
            delay_ns: 5_000,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            reorder_ns: 50_000,
            corrupt: 0.0,
            lost: 0,
            delivered: 0,
            window: WINDOW,
            alarm: None,
            fate: None,
            link_mbps: None,
            bottleneck: None,
            port: PortStats::default(),
            port_free: 0,
        }
    }

    /// The host's time (ns).
    pub fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    /// A device bound to `addr` with `limits`, with a context open and a PD allocated.
    pub fn add_device(&mut self, addr: Ipv4Addr, limits: Limits) -> Result<DevId, Refused> {
        self.add_device_with(addr, limits, |_| {})
    }

    /// [`Host::add_device`] with its configuration adjusted by `configure` first (ECN and
    /// DCQCN's parameters, say).
    pub fn add_device_with(
        &mut self,
        addr: Ipv4Addr,
        limits: Limits,
        configure: impl FnOnce(&mut DeviceConfig),
    ) -> Result<DevId, Refused> {
        let len = self.window;
        let mem = Arc::new(SharedMem::new_zeroed(len).map_err(|_| Refused(Errno::ENOMEM))?);
        let mut cfg = DeviceConfig::new(format!("sim{}", self.devs.len()), IpAddr::V4(addr));
        cfg.limits = limits;
        configure(&mut cfg);
        let wake = crate::sys::eventfd().map_err(|_| Refused(Errno::ENOMEM))?;
        let link = Arc::new(SimLink {
            now: self.clock.clone(),
            wake,
        });
        let mut st = DevState::new(cfg, link);
        st.space = crate::dma::AddressSpace::Window {
            base: mem.addr() as usize,
            len,
        };
        let tap = crate::tap::for_device(&st.cfg.name, st.cfg.addr, false);
        self.devs.push(Dev {
            st,
            q: Queues::new(tap),
            mem,
            ctx: 1,
            addr,
            next: FIRST_ALLOC,
            pd: 0,
            async_fd: None,
            _wake_fd: None,
            egress_free: 0,
        });
        let id = self.devs.len() - 1;
        let db = DoorbellLayout::new(DOORBELL_SLOTS).map_err(|_| Refused(Errno::EINVAL))?;
        let db_at = self.alloc(id, db.bytes() as u64);
        let resp = self.command(
            id,
            &Request::GetContext(
                GetContext::default(),
                UroceGetContext {
                    abi_version: UROCE_ABI_VERSION,
                    doorbell_slots: db.slots(),
                    doorbell_addr: db_at,
                    doorbell_len: db.bytes() as u64,
                },
            ),
        )?;
        // The library's ends of the context's descriptors, closed with the host.
        if let (Ok((g, rest)), Some(d)) = (
            GetContextResp::read_from_prefix(&resp),
            self.devs.get_mut(id),
        ) {
            let u = UroceGetContextResp::read_from_prefix(rest).map(|(u, _)| u.wake_fd);
            d.async_fd = crate::sys::adopt_handed_fd(g.async_fd as i32);
            d._wake_fd = u.ok().and_then(crate::sys::adopt_handed_fd);
        }
        let pd = self.command(id, &Request::AllocPd(AllocPd::default()))?;
        let pd = AllocPdResp::read_from_prefix(&pd)
            .map_err(|_| Refused(Errno::EIO))?
            .0
            .pd_handle;
        if let Some(d) = self.devs.get_mut(id) {
            d.pd = pd;
        }
        Ok(id)
    }

    fn dev(&mut self, id: DevId) -> &mut Dev {
        self.devs
            .get_mut(id)
            .unwrap_or_else(|| panic!("no device {id}"))
    }

    /// Execute one command on device `id` as the control plane does; its response bytes.
    pub fn command(&mut self, id: DevId, req: &Request<'_>) -> Result<Vec<u8>, Refused> {
        let mut msg = Vec::new();
        req.encode(&mut msg).map_err(|e| Refused(e.errno()))?;
        let d = self.dev(id);
        let mut out = Vec::new();
        d.st.execute(d.ctx, &msg, &mut out);
        let r = Reply::parse(&out).map_err(|_| Refused(Errno::EIO))?;
        r.result.map(<[u8]>::to_vec).map_err(Refused)
    }

    /// `len` bytes of device `id`'s window (4 KiB aligned), zeroed; their offset.
    pub fn alloc(&mut self, id: DevId, len: u64) -> u64 {
        let d = self.dev(id);
        let at = d.next;
        d.next = (at + len).next_multiple_of(0x1000);
        assert!(d.next <= d.mem.len() as u64, "device {id}'s window is full");
        at
    }

    /// Write `bytes` at window offset `at` of device `id` (any alignment).
    pub fn write(&mut self, id: DevId, at: u64, bytes: &[u8]) {
        let start = at & !7;
        let mut span = self.read(id, start, (at - start) as usize + bytes.len());
        span[(at - start) as usize..].copy_from_slice(bytes);
        self.dev(id)
            .mem
            .write(start as usize, &span)
            .expect("inside the window");
    }

    /// Read `len` bytes at window offset `at` of device `id` (any alignment).
    pub fn read(&mut self, id: DevId, at: u64, len: usize) -> Vec<u8> {
        let start = at & !7;
        let skip = (at - start) as usize;
        let mut v = vec![0; skip + len];
        self.dev(id)
            .mem
            .read(start as usize, &mut v)
            .expect("inside the window");
        v.split_off(skip)
    }

    /// Register `len` fresh bytes of device `id`'s window with `access` (`ibv_access_flags`).
    pub fn reg_mr(&mut self, id: DevId, len: u64, access: u32) -> Result<Mr, Refused> {
        let at = self.alloc(id, len);
        self.reg_mr_at(id, at, len, access)
    }

    /// Register window bytes `at..at + len` of device `id`.
    pub fn reg_mr_at(&mut self, id: DevId, at: u64, len: u64, access: u32) -> Result<Mr, Refused> {
        let pd = self.dev(id).pd;
        let r = self.command(
            id,
            &Request::RegMr(RegMr {
                start: at,
                length: len,
                hca_va: at,
                pd_handle: pd,
                access_flags: access,
                ..RegMr::default()
            }),
        )?;
        let (m, _) = RegMrResp::read_from_prefix(&r).map_err(|_| Refused(Errno::EIO))?;
        Ok(Mr {
            handle: m.mr_handle,
            addr: at,
            len,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }

    /// Deregister an MR.
    pub fn dereg_mr(&mut self, id: DevId, mr: &Mr) -> Result<(), Refused> {
        self.command(
            id,
            &Request::DeregMr(DeregMr {
                mr_handle: mr.handle,
            }),
        )
        .map(|_| ())
    }

    /// A CQ of at least `depth` entries.
    pub fn create_cq(&mut self, id: DevId, depth: u32) -> Result<Cq, Refused> {
        let layout = RingLayout::for_depth(depth, CQE_BYTES).map_err(|e| Refused(e.errno()))?;
        let at = self.alloc(id, layout.bytes() as u64);
        let r = self.command(
            id,
            &Request::CreateCq(
                CreateCq {
                    user_handle: CQ_USER_HANDLE,
                    cqe: depth,
                    comp_channel: -1,
                    ..CreateCq::default()
                },
                UroceCreateCq {
                    ring: layout.desc(at),
                    ..Default::default()
                },
            ),
        )?;
        let (c, _) = CreateCqResp::read_from_prefix(&r).map_err(|_| Refused(Errno::EIO))?;
        let mem = self.dev(id).mem.clone();
        let ring = Consumer::attach(mem, at as usize, layout).map_err(|e| Refused(e.errno()))?;
        Ok(Cq {
            handle: c.cq_handle,
            ring,
            slots: layout.slots(),
        })
    }

    /// Take up to `max` completions from `cq`, as `ibv_poll_cq` does.
    pub fn poll_cq(&mut self, cq: &mut Cq, max: usize) -> Vec<Wc> {
        let n = cq.ring.available().map_or(0, |n| n as usize).min(max);
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            if let Ok(c) = cq.ring.read_struct::<Cqe>(i as u32) {
                v.push(c.wc);
            }
        }
        let _ = cq.ring.release(n as u32);
        v
    }

    /// An RC QP on device `id` with `depth` send and receive WRs (4 SGEs, 64 inline bytes).
    pub fn create_rc_qp(
        &mut self,
        id: DevId,
        send_cq: &Cq,
        recv_cq: &Cq,
        depth: u32,
    ) -> Result<Qp, Refused> {
        self.create_rc_qp_on(id, send_cq, recv_cq, depth, None)
    }

    /// [`Host::create_rc_qp`], its receives taken from `srq` if given.
    pub fn create_rc_qp_on(
        &mut self,
        id: DevId,
        send_cq: &Cq,
        recv_cq: &Cq,
        depth: u32,
        srq: Option<Srq>,
    ) -> Result<Qp, Refused> {
        self.create_qp(id, abi::QpType::Rc, send_cq, recv_cq, depth, srq)
    }

    /// A QP of type `ty` (RC, UC or UD) on device `id` with `depth` send and receive WRs
    /// (4 SGEs, 64 inline bytes), its receives taken from `srq` if given; in RESET.
    pub fn create_qp(
        &mut self,
        id: DevId,
        ty: abi::QpType,
        send_cq: &Cq,
        recv_cq: &Cq,
        depth: u32,
        srq: Option<Srq>,
    ) -> Result<Qp, Refused> {
        let sq = RingLayout::for_depth(depth, send_wqe_size(4, 64).unwrap_or(512))
            .map_err(|e| Refused(e.errno()))?;
        let rq = RingLayout::for_depth(depth, recv_wqe_size(4).unwrap_or(128))
            .map_err(|e| Refused(e.errno()))?;
        let sq_at = self.alloc(id, sq.bytes() as u64);
        let rq_at = self.alloc(id, rq.bytes() as u64);
        let pd = self.dev(id).pd;
        let r = self.command(
            id,
            &Request::CreateQp(
                CreateQp {
                    user_handle: QP_USER_HANDLE,
                    pd_handle: pd,
                    send_cq_handle: send_cq.handle,
                    recv_cq_handle: recv_cq.handle,
                    srq_handle: srq.map_or(0, |q| q.handle),
                    max_send_wr: depth,
                    max_recv_wr: if srq.is_some() { 0 } else { depth },
                    max_send_sge: 4,
                    max_recv_sge: if srq.is_some() { 0 } else { 4 },
                    max_inline_data: 64,
                    qp_type: ty.raw() as u8,
                    is_srq: u8::from(srq.is_some()),
                    ..CreateQp::default()
                },
                UroceCreateQp {
                    sq: sq.desc(sq_at),
                    rq: if srq.is_some() {
                        RingDesc::default()
                    } else {
                        rq.desc(rq_at)
                    },
                    ..UroceCreateQp::default()
                },
            ),
        )?;
        let (q, _) = CreateQpResp::read_from_prefix(&r).map_err(|_| Refused(Errno::EIO))?;
        Ok(Qp {
            handle: q.qp_handle,
            qpn: q.qpn,
        })
    }

    /// A UD QP on device `id` with `depth` send and receive WRs, brought to RTS with `qkey`.
    pub fn create_ud_qp(
        &mut self,
        id: DevId,
        cq: &Cq,
        depth: u32,
        qkey: u32,
    ) -> Result<Qp, Refused> {
        let qp = self.create_qp(id, abi::QpType::Ud, cq, cq, depth, None)?;
        for (state, mask) in rts_steps(transport::Service::Ud) {
            self.command(
                id,
                &Request::ModifyQp(ModifyQp {
                    qp_handle: qp.handle,
                    attr_mask: mask,
                    qp_state: state,
                    qkey,
                    port_num: 1,
                    sq_psn: 0x100,
                    ..ModifyQp::default()
                }),
            )?;
        }
        Ok(qp)
    }

    /// An address handle on device `id` for device `dest` (its GID; hop limit 64).
    pub fn create_ah(&mut self, id: DevId, dest: DevId) -> Result<u32, Refused> {
        let dgid = self.dev(dest).addr.to_ipv6_mapped().octets();
        let pd = self.dev(id).pd;
        let r = self.command(
            id,
            &Request::CreateAh(CreateAh {
                user_handle: 0xa4,
                pd_handle: pd,
                attr: AhAttr {
                    grh: GlobalRoute {
                        dgid,
                        hop_limit: 64,
                        ..GlobalRoute::default()
                    },
                    is_global: 1,
                    port_num: 1,
                    ..AhAttr::default()
                },
                ..CreateAh::default()
            }),
        )?;
        let (a, _) = CreateAhResp::read_from_prefix(&r).map_err(|_| Refused(Errno::EIO))?;
        Ok(a.ah_handle)
    }

    /// Destroy a QP (whatever it has outstanding).
    pub fn destroy_qp(&mut self, id: DevId, qp: Qp) -> Result<(), Refused> {
        self.command(
            id,
            &Request::DestroyQp(DestroyQp {
                qp_handle: qp.handle,
                ..DestroyQp::default()
            }),
        )
        .map(|_| ())
    }

    /// Move RC QP `qp` of device `id` through INIT and RTR to RTS toward `dest_qpn` on
    /// device `dest` (path MTU 1024, perftest's default; go-back-N; ACK timeout 4.096 µs ×
    /// 2^`timeout`; `retry_cnt` as given, RNR retries forever).
    pub fn connect_rc(
        &mut self,
        id: DevId,
        qp: Qp,
        dest: DevId,
        dest_qpn: u32,
        timeout: u8,
        retry_cnt: u8,
    ) -> Result<(), Refused> {
        let opts = RcOpts {
            timeout,
            retry_cnt,
            ..RcOpts::default()
        };
        self.connect_rc_with(id, qp, dest, dest_qpn, opts)
    }

    /// [`Host::connect_rc`] with every timer and retry count given.
    pub fn connect_rc_with(
        &mut self,
        id: DevId,
        qp: Qp,
        dest: DevId,
        dest_qpn: u32,
        o: RcOpts,
    ) -> Result<(), Refused> {
        self.connect_with(id, qp, transport::Service::Rc, dest, dest_qpn, o)
    }

    /// Move connected QP `qp` (of service RC or UC) of device `id` through INIT and RTR to
    /// RTS toward `dest_qpn` on device `dest`, with the attributes its transitions take
    /// from `o` (a UC QP takes no timers, retry counts or READ/atomic depths).
    pub fn connect_with(
        &mut self,
        id: DevId,
        qp: Qp,
        service: transport::Service,
        dest: DevId,
        dest_qpn: u32,
        o: RcOpts,
    ) -> Result<(), Refused> {
        let gid = abi::Gid(self.dev(dest).addr.to_ipv6_mapped().octets());
        for (state, mask) in rts_steps(service) {
            let attr = abi::QpAttr {
                qp_state: abi::QpState::from_raw(state.into()).unwrap_or_default(),
                qp_access_flags: abi::AccessFlags(all_access()),
                port_num: 1,
                path_mtu: o.path_mtu,
                dest_qp_num: dest_qpn,
                rq_psn: o.psn,
                sq_psn: o.psn,
                max_dest_rd_atomic: 4,
                max_rd_atomic: o.max_rd_atomic,
                min_rnr_timer: o.min_rnr_timer,
                timeout: o.timeout,
                retry_cnt: o.retry_cnt,
                rnr_retry: o.rnr_retry,
                ah_attr: abi::AhAttr::roce(gid, 0, 1),
                ..abi::QpAttr::default()
            };
            let flags = if o.selective_repeat && attr.qp_state == abi::QpState::Rtr {
                abi::uverbs::MODIFY_QP_SELECTIVE_REPEAT
            } else {
                0
            };
            let q = ModifyQp::new(qp.handle, &attr, abi::QpAttrMask(mask), flags);
            self.command(id, &Request::ModifyQp(q))?;
        }
        Ok(())
    }

    /// Move a QP to `state` (an `ibv_qp_state`, e.g. 6 = ERR) with nothing else changed.
    pub fn modify_state(&mut self, id: DevId, qp: Qp, state: u8) -> Result<(), Refused> {
        self.command(
            id,
            &Request::ModifyQp(ModifyQp {
                qp_handle: qp.handle,
                attr_mask: abi::QpAttrMask::STATE.0,
                qp_state: state,
                ..ModifyQp::default()
            }),
        )
        .map(|_| ())
    }

    /// Post send WRs (each with its SGEs, in order) through POST_SEND.
    pub fn post_send(
        &mut self,
        id: DevId,
        qp: Qp,
        wrs: &[(SendWr, Vec<Sge>)],
    ) -> Result<(), Refused> {
        let mut w = Vec::new();
        let mut s = Vec::new();
        for (wr, sges) in wrs {
            let mut wr = *wr;
            wr.num_sge = sges.len() as u32;
            w.extend_from_slice(wr.as_bytes());
            for sg in sges {
                s.extend_from_slice(sg.as_bytes());
            }
        }
        let sge_count = wrs.iter().map(|(_, s)| s.len() as u32).sum();
        self.command(
            id,
            &Request::PostSend(
                PostSend {
                    qp_handle: qp.handle,
                    wr_count: wrs.len() as u32,
                    sge_count,
                    wqe_size: SendWr::SIZE as u32,
                    ..PostSend::default()
                },
                WrList {
                    wrs: &w,
                    sges: &s,
                    wqe_size: SendWr::SIZE,
                },
            ),
        )
        .map(|_| ())
    }

    /// Post receive WRs (`wr_id`, one SGE each) through POST_RECV.
    pub fn post_recv(&mut self, id: DevId, qp: Qp, wrs: &[(u64, Sge)]) -> Result<(), Refused> {
        let wrs: Vec<(u64, Vec<Sge>)> = wrs.iter().map(|(i, s)| (*i, vec![*s])).collect();
        self.post_recv_sges(id, qp, &wrs)
    }

    /// Post receive WRs, each with its list of SGEs (a scatter), through POST_RECV.
    pub fn post_recv_sges(
        &mut self,
        id: DevId,
        qp: Qp,
        wrs: &[(u64, Vec<Sge>)],
    ) -> Result<(), Refused> {
        let (w, s) = recv_lists(wrs);
        let sge_count = wrs.iter().map(|(_, s)| s.len() as u32).sum();
        self.command(
            id,
            &Request::PostRecv(
                PostRecv {
                    qp_handle: qp.handle,
                    wr_count: wrs.len() as u32,
                    sge_count,
                    wqe_size: RecvWr::SIZE as u32,
                    ..PostRecv::default()
                },
                WrList {
                    wrs: &w,
                    sges: &s,
                    wqe_size: RecvWr::SIZE,
                },
            ),
        )
        .map(|_| ())
    }

    /// The port counters of device `id`: the engine's, and the transport's summed over
    /// its live and destroyed QPs.
    pub fn port_counters(&mut self, id: DevId) -> crate::PortCounters {
        self.dev(id).st.port_counters()
    }

    /// What device `id` holds, as counts ("2 qps"); only kinds with some are listed.
    pub fn objects(&mut self, id: DevId) -> Vec<String> {
        self.dev(id).st.leftovers()
    }

    /// The async events device `id` sent its context since the last call, as the library
    /// reads them from `async_fd`: (`ib_event_type`, element — a CQ's, QP's or SRQ's
    /// user handle or QPN).
    pub fn async_events(&mut self, id: DevId) -> Vec<(u32, u64)> {
        let mut v = Vec::new();
        let Some(fd) = self.dev(id).async_fd.as_ref() else {
            return v;
        };
        let mut buf = [0u8; AsyncEventDesc::SIZE];
        while let Ok(n) = crate::sys::recv_message_nowait(fd.as_fd(), &mut buf) {
            match AsyncEventDesc::read_from_bytes(buf.get(..n).unwrap_or(&[])) {
                Ok(e) => v.push((e.event_type, e.element)),
                Err(_) => break,
            }
        }
        v
    }

    /// An SRQ of `depth` receive WQEs (4 SGEs each) with limit `limit` (0: not armed);
    /// `user_handle` is what its async events name.
    pub fn create_srq(
        &mut self,
        id: DevId,
        depth: u32,
        limit: u32,
        user_handle: u64,
    ) -> Result<Srq, Refused> {
        let layout = RingLayout::for_depth(depth, recv_wqe_size(4).unwrap_or(128))
            .map_err(|e| Refused(e.errno()))?;
        let at = self.alloc(id, layout.bytes() as u64);
        let pd = self.dev(id).pd;
        let r = self.command(
            id,
            &Request::CreateSrq(
                CreateSrq {
                    user_handle,
                    pd_handle: pd,
                    max_wr: depth,
                    max_sge: 4,
                    srq_limit: limit,
                    ..CreateSrq::default()
                },
                UroceCreateSrq {
                    ring: layout.desc(at),
                },
            ),
        )?;
        let (c, _) = CreateSrqResp::read_from_prefix(&r).map_err(|_| Refused(Errno::EIO))?;
        Ok(Srq {
            handle: c.srq_handle,
            srqn: c.srqn,
        })
    }

    /// Arm an SRQ's limit event at `limit` WQEs (MODIFY_SRQ with IBV_SRQ_LIMIT).
    pub fn arm_srq(&mut self, id: DevId, srq: Srq, limit: u32) -> Result<(), Refused> {
        self.command(
            id,
            &Request::ModifySrq(ModifySrq {
                srq_handle: srq.handle,
                attr_mask: abi::SrqAttrMask::LIMIT.0,
                srq_limit: limit,
                ..ModifySrq::default()
            }),
        )
        .map(|_| ())
    }

    /// Post receive WRs to an SRQ (POST_SRQ_RECV).
    pub fn post_srq_recv(
        &mut self,
        id: DevId,
        srq: Srq,
        wrs: &[(u64, Sge)],
    ) -> Result<(), Refused> {
        let wrs: Vec<(u64, Vec<Sge>)> = wrs.iter().map(|(i, s)| (*i, vec![*s])).collect();
        let (w, s) = recv_lists(&wrs);
        self.command(
            id,
            &Request::PostSrqRecv(
                PostSrqRecv {
                    srq_handle: srq.handle,
                    wr_count: wrs.len() as u32,
                    sge_count: wrs.len() as u32,
                    wqe_size: RecvWr::SIZE as u32,
                    ..PostSrqRecv::default()
                },
                WrList {
                    wrs: &w,
                    sges: &s,
                    wqe_size: RecvWr::SIZE,
                },
            ),
        )
        .map(|_| ())
    }

    /// IBV_EVENT_CQ_ERR events device `id` raised on CQ `cq` so far.
    pub fn cq_errors(&mut self, id: DevId, cq: &Cq) -> u32 {
        let st = &self.dev(id).st;
        st.res.cqs.get(cq.handle).map_or(0, |c| c.async_events)
    }

    /// One pass over every device at the current time, then the wire's due arrivals;
    /// whether anything happened.
    pub fn pass(&mut self) -> bool {
        let now = Time(self.now());
        let mut progress = false;
        let mut sent = Vec::new();
        for d in self.devs.iter_mut() {
            let st = &mut d.st;
            progress |= drain_doorbells(st);
            progress |= fire_timers(st, now);
            progress |= send_gsi(st, &mut d.q);
            check_err_rqs(st);
            progress |= work(st, &mut d.q, || now);
            progress |= send_gsi(st, &mut d.q);
            let from = SocketAddr::new(IpAddr::V4(d.addr), ROCE_V2_PORT);
            while let Some(dg) = d.q.txq.pop_front() {
                progress = true;
                let bytes = dg.bytes().to_vec();
                d.q.put_buf(dg.buf);
                sent.push((dg.dst.ip(), from, bytes));
            }
        }
        for (to, from, bytes) in sent {
            self.transmit(now.0, to, from, bytes);
        }
        while self.wire.front().is_some_and(|f| f.at <= now.0) {
            let Some(f) = self.wire.pop_front() else {
                break;
            };
            progress = true;
            if let Some(d) = self.devs.iter_mut().find(|d| IpAddr::V4(d.addr) == f.to) {
                self.delivered += 1;
                handle_datagram(&mut d.st, None, &f.bytes, f.from, 0, f.ce, now);
            } else {
                self.lost += 1;
            }
        }
        progress
    }

    /// A uniform draw from [0, 1) (xorshift64).
    fn draw(&mut self) -> f64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        (self.rng >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Put a datagram on the wire at `now`: lost, corrupted, duplicated or held back as the
    /// wire's rates say; the wire stays ordered by arrival time.
    fn transmit(&mut self, now: u64, to: IpAddr, from: SocketAddr, mut bytes: Vec<u8>) {
        let fate = self.fate.as_mut().map_or(Fate::Deliver, |f| {
            (f.0)(&Datagram {
                from: from.ip(),
                to,
                bytes: &bytes,
            })
        });
        if fate == Fate::Drop || self.draw() < self.loss {
            self.lost += 1;
            return;
        }
        let resealed = match &fate {
            Fate::Replace(forged) => Some(sealed(from.ip(), to, forged, 0, true)),
            Fate::Numbered { ident, dont_frag } => Some(sealed(
                from.ip(),
                to,
                &bytes[..bytes.len().saturating_sub(icrc::ICRC_LEN)],
                *ident,
                *dont_frag,
            )),
            _ => None,
        };
        match resealed {
            Some(Some(b)) => bytes = b,
            Some(None) => {
                self.lost += 1;
                return;
            }
            None => {}
        }
        let held = match fate {
            Fate::Delay(ns) => ns,
            _ => 0,
        };
        let len = wire_len(bytes.len());
        // Out of the sender's own link, one datagram after another at its rate.
        let mut depart = now + self.delay_ns;
        if let Some(rate) = self.link_mbps {
            if let Some(d) = self
                .devs
                .iter_mut()
                .find(|d| IpAddr::V4(d.addr) == from.ip())
            {
                d.egress_free = d.egress_free.max(now) + len * 8_000 / rate.max(1);
                depart = d.egress_free + self.delay_ns;
            }
        }
        // Through the bottleneck's port (FIFO: datagrams reach it in the order they are
        // sent): queue, mark, drop.
        let mut ce = false;
        if let Some(b) = self.bottleneck.filter(|b| IpAddr::V4(b.to) == to) {
            let reach = depart;
            let rate = b.rate_mbps.max(1);
            let queued = self.port_free.saturating_sub(reach) * rate / 8_000;
            if queued + len > b.queue_bytes {
                self.port.tail_drops += 1;
                self.lost += 1;
                return;
            }
            if queued > b.mark_bytes {
                self.port.ce_marks += 1;
                ce = true;
            }
            self.port_free = self.port_free.max(reach) + len * 8_000 / rate;
            depart = self.port_free;
        }
        if self.draw() < self.corrupt && !bytes.is_empty() {
            let i = (self.draw() * bytes.len() as f64) as usize;
            if let Some(b) = bytes.get_mut(i) {
                *b ^= 1 << (self.draw() * 8.0) as u32;
            }
        }
        let (copies, copy_after) = match fate {
            Fate::Duplicate(ns) => (2, ns),
            _ if self.draw() < self.dup => (2, 0),
            _ => (1, 0),
        };
        for copy in 0..copies {
            let held = if copy == 1 { held + copy_after } else { held };
            let late = if self.draw() < self.reorder {
                (self.draw() * self.reorder_ns as f64) as u64
            } else {
                0
            };
            let at = depart + late + held;
            let pos = self.wire.partition_point(|f| f.at <= at);
            self.wire.insert(
                pos,
                InFlight {
                    at,
                    to,
                    from,
                    bytes: bytes.clone(),
                    ce,
                },
            );
        }
    }

    /// Put a forged datagram from `from` to `to` on the wire now: `transport` is BTH through
    /// pad, sealed here with a correct ICRC (a peer that misbehaves, not a corrupted
    /// packet). It skips [`Host::fate`] but not the wire's random rates.
    pub fn inject(&mut self, from: Ipv4Addr, to: Ipv4Addr, transport: &[u8]) {
        let now = self.now();
        let from = IpAddr::V4(from);
        if let Some(b) = sealed(from, IpAddr::V4(to), transport, 0, true) {
            let fate = self.fate.take();
            self.transmit(now, IpAddr::V4(to), SocketAddr::new(from, ROCE_V2_PORT), b);
            self.fate = fate;
        }
    }

    /// When something is next due: a transport deadline, an arrival or the alarm.
    fn next_event(&self) -> Option<u64> {
        let timers = self
            .devs
            .iter()
            .filter_map(|d| d.st.timers.peek().map(|r| (r.0).0 .0));
        let arrivals = self.wire.front().map(|f| f.at);
        timers
            .chain(arrivals)
            .chain(self.alarm.filter(|&t| t > self.now()))
            .min()
    }

    /// Run passes until `done` holds, moving the clock to the next event whenever a pass
    /// finds nothing to do now; `false` if `limit_ns` of virtual time passed first or
    /// nothing is left to happen.
    pub fn run_until(&mut self, limit_ns: u64, mut done: impl FnMut(&mut Host) -> bool) -> bool {
        let end = self.now().saturating_add(limit_ns);
        loop {
            if done(self) {
                return true;
            }
            if self.pass() {
                continue;
            }
            let Some(t) = self.next_event() else {
                return done(self);
            };
            if t > end {
                return false;
            }
            let t = t.max(self.now() + 1);
            self.clock.store(t, Ordering::Relaxed);
        }
    }
}

/// `transport` (BTH through pad) followed by the ICRC a sender at `from` sending to `to`
/// with IPv4 Identification `ident` and DF `dont_frag` would append (IPv4 only, as the
/// host's devices are; a device sends Identification 0 with DF).
fn sealed(
    from: IpAddr,
    to: IpAddr,
    transport: &[u8],
    ident: u16,
    dont_frag: bool,
) -> Option<Vec<u8>> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (from, to) else {
        return None;
    };
    let ip = IpRepr::V4 {
        src,
        dst,
        dscp_ecn: 0,
        ttl: 64,
        ident,
        dont_frag,
    };
    let crc = icrc::compute_for(&ip, &UdpRepr::roce(ROCE_V2_PORT), transport).ok()?;
    let mut b = transport.to_vec();
    b.extend_from_slice(&icrc::icrc_wire_bytes(crc));
    Some(b)
}

/// RESET → INIT → RTR → RTS of a QP of type `ty`: each step's `ibv_qp_state` and the
/// attributes it must set (the transport's transition table,
/// `transport::state::transition_masks`).
pub fn rts_steps(ty: transport::Service) -> [(u8, u32); 3] {
    use transport::{QpAttrMask, QpState as S};
    [(S::Reset, S::Init), (S::Init, S::Rtr), (S::Rtr, S::Rts)].map(|(from, to)| {
        let required = transport::state::transition_masks(from, to, ty).map_or(0, |t| t.required.0);
        (to as u8, required | QpAttrMask::STATE.0)
    })
}

/// The WR and SGE arrays of a receive post.
fn recv_lists(wrs: &[(u64, Vec<Sge>)]) -> (Vec<u8>, Vec<u8>) {
    let mut w = Vec::new();
    let mut s = Vec::new();
    for (wr_id, sges) in wrs {
        let wr = RecvWr {
            wr_id: *wr_id,
            num_sge: sges.len() as u32,
            reserved: 0,
        };
        w.extend_from_slice(wr.as_bytes());
        for sg in sges {
            s.extend_from_slice(sg.as_bytes());
        }
    }
    (w, s)
}

/// Every `ibv_access_flags` right a test MR or QP may need.
pub fn all_access() -> u32 {
    use abi::AccessFlags as A;
    A::LOCAL_WRITE.0 | A::REMOTE_WRITE.0 | A::REMOTE_READ.0 | A::REMOTE_ATOMIC.0
}

/// A send WR of `op` (an `ibv_wr_opcode`) with `flags` (`ibv_send_flags`).
pub fn send_wr(wr_id: u64, op: abi::WrOpcode, flags: u32) -> SendWr {
    SendWr {
        wr_id,
        opcode: op.raw(),
        send_flags: flags,
        ..SendWr::default()
    }
}

/// [`send_wr`] for an RDMA WRITE or READ at `remote_addr` with `rkey`.
pub fn rdma_wr(wr_id: u64, op: abi::WrOpcode, flags: u32, remote_addr: u64, rkey: u32) -> SendWr {
    let mut w = send_wr(wr_id, op, flags);
    w.set_rdma(RdmaWr {
        remote_addr,
        rkey,
        reserved: 0,
    });
    w
}

/// A UD send WR to `remote_qpn` through address handle `ah`.
pub fn ud_wr(wr_id: u64, flags: u32, ah: u32, remote_qpn: u32, qkey: u32) -> SendWr {
    let mut w = send_wr(wr_id, abi::WrOpcode::Send, flags);
    w.set_ud(UdWr {
        ah,
        remote_qpn,
        remote_qkey: qkey,
        reserved: 0,
    });
    w
}

/// One SGE: `len` bytes at `off` into `mr`.
pub fn sge(mr: &Mr, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}
