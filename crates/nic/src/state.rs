//! A device's resource tables and the operations the control plane and the engine share:
//! writing CQEs (with overflow handling and completion events), async events, receive
//! queues over rings, and registered-memory access for the transport.
//!
//! One `DevState` per device lives behind the device's mutex. The control plane takes it
//! for each command; the engine takes it for each pass. Objects are stored in device-wide
//! slabs; a handle is the slab index and belongs to the context recorded in the object, so
//! every lookup on behalf of a command checks the caller's context (`*_of`).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use abi::doorbell::DoorbellReceiver;
use abi::fastpath::{Cqe, RecvWqe, RECV_WQE_HDR_BYTES};
use abi::ring::{Consumer, Producer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::{AsyncEventDesc, CompEventDesc, Sge as AbiSge, Wc};
use transport::wire::{Lkey, Qpn, Rkey};
use transport::{
    AtomicOp, Completion, MemError, Memory, Qp, QpState, RecvQueue, RecvWr, RemoteAccess, Service,
    SgeList, Time, WcStatus,
};
use zerocopy::IntoBytes;

use crate::config::DeviceConfig;
use crate::counters::EngineCounters;
use crate::dma::UserRange;
use crate::slab::Slab;
use crate::sys;

/// What a device needs of the engine that serves it: the engine's clock (the time base of
/// every transport deadline), its wake-up eventfd (each context's library gets a copy to
/// ring when the engine is parked), a kick, and a round of its work on the caller's thread
/// (`abi::doorbell::Progress`). The engine implements it (`crate::engine::EngineShared`);
/// the device and its state do not depend on how the engine runs.
pub(crate) trait EngineLink: abi::doorbell::Progress {
    /// The engine's time now.
    fn now(&self) -> Time;
    /// The engine's wake-up eventfd.
    fn wake_fd(&self) -> std::os::fd::BorrowedFd<'_>;
    /// Wake the engine (a command changed what it must watch).
    fn kick(&self);
    /// The engine's work for device `id` done on a library thread
    /// (`abi::doorbell::Progress`), if the engine offers it.
    fn progress_for(&self, id: u64) -> Option<std::sync::Arc<dyn abi::doorbell::Progress>>;
}

/// A context (one command connection), numbered device-wide.
pub(crate) type CtxId = u64;

/// `enum ib_event_type` values (include/rdma/ib_verbs.h), the `event_type` of
/// [`AsyncEventDesc`].
pub mod event {
    /// CQ overflow.
    pub const CQ_ERR: u32 = 0;
    /// The QP entered ERR because of an error the application did not request.
    pub const QP_FATAL: u32 = 1;
    /// SQD reached and drained.
    pub const SQ_DRAINED: u32 = 5;
    /// SRQ: fewer WQEs than the armed limit.
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    /// A QP on an SRQ entered ERR: it will produce no more receive completions.
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    /// The device stopped working (its daemon went away).
    pub const DEVICE_FATAL: u32 = 8;
}

/// Where packets for an address go: the device's own address (internal loopback) or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Dest {
    pub(crate) ip: IpAddr,
    pub(crate) flow_label: u32,
    pub(crate) traffic_class: u8,
    pub(crate) hop_limit: u8,
}

impl Dest {
    /// `ip` with the header values Linux uses for MADs: traffic class 0, hop limit 64.
    pub(crate) fn roce(ip: IpAddr) -> Dest {
        Dest {
            ip,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
        }
    }
}

/// The IP address a RoCE v2 GID stands for (IPv4-mapped or IPv6).
pub(crate) fn gid_to_ip(gid: [u8; 16]) -> IpAddr {
    let v6 = std::net::Ipv6Addr::from(gid);
    match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(v6),
    }
}

/// The RoCE v2 GID of an address (docs/wire.md §1.1).
pub(crate) fn ip_to_gid(ip: IpAddr) -> [u8; 16] {
    transport::wire::ip::gid_of_ip(ip)
}

/// One open context.
#[derive(Debug)]
pub(crate) struct Context {
    pub(crate) doorbells: DoorbellReceiver,
    /// Doorbell slot → QP index.
    pub(crate) db_slots: Vec<Option<u32>>,
    /// Our end of the async event socket (the library holds the other, `async_fd`).
    pub(crate) async_tx: OwnedFd,
    pub(crate) channels: u32,
}

#[derive(Debug)]
pub(crate) struct Pd {
    pub(crate) ctx: CtxId,
    /// MRs, QPs, SRQs and AHs using it (DEALLOC_PD is EBUSY while nonzero).
    pub(crate) users: u32,
}

#[derive(Debug)]
pub(crate) struct Mr {
    pub(crate) ctx: CtxId,
    pub(crate) pd: u32,
    pub(crate) key: u32,
    /// Where the region starts in the process (REG_MR's `start`).
    pub(crate) start: u64,
    pub(crate) iova: u64,
    pub(crate) length: u64,
    pub(crate) access: u32,
    pub(crate) range: UserRange,
}

#[derive(Debug)]
pub(crate) struct Chan {
    pub(crate) ctx: CtxId,
    /// Our end; the library reads [`CompEventDesc`]s from the other.
    pub(crate) tx: OwnedFd,
    /// The fd number the library was given (−1 once known stale).
    pub(crate) lib_fd: i32,
    pub(crate) users: u32,
}

/// CQ arming state (REQ_NOTIFY_CQ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arm {
    Off,
    Next,
    Solicited,
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub(crate) ctx: CtxId,
    pub(crate) user_handle: u64,
    pub(crate) mem: Arc<SharedMem>,
    pub(crate) layout: RingLayout,
    pub(crate) ring: Producer,
    pub(crate) chan: Option<u32>,
    pub(crate) arm: Arm,
    pub(crate) users: u32,
    pub(crate) comp_events: u32,
    pub(crate) async_events: u32,
    /// An overflow was reported and the ring has not had room since.
    pub(crate) overflowed: bool,
    /// Stamp each CQE with the wall-clock time (`UroceCreateCq::WALLCLOCK`).
    pub(crate) wallclock: bool,
    /// Completions lost because this CQ was full (summed over the device in
    /// `EngineCounters::cq_overflow`).
    pub(crate) lost_cqes: u64,
    /// Listed in `Resources::cq_watch`.
    pub(crate) watched: bool,
}

/// A library-produced queue of receive WQEs (RQ or SRQ ring).
#[derive(Debug)]
pub(crate) struct RecvRing {
    pub(crate) mem: Arc<SharedMem>,
    pub(crate) layout: RingLayout,
    pub(crate) ring: Consumer,
    pub(crate) max_sge: u32,
}

#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) ctx: CtxId,
    pub(crate) pd: u32,
    pub(crate) user_handle: u64,
    pub(crate) rq: RecvRing,
    /// Armed limit (0 = not armed).
    pub(crate) limit: u32,
    pub(crate) users: u32,
    pub(crate) events: u32,
    /// An XRC SRQ (IBTA XRC annex): its domain and the CQ its receives complete to.
    pub(crate) xrc: Option<SrqXrc>,
}

/// The handle an XRC target QP holds for its PD and CQs, which are its SRQs' (none).
pub(crate) const NO_HANDLE: u32 = u32::MAX;

/// What makes an SRQ an XRC SRQ.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SrqXrc {
    /// The XRCD handle it was created with (its context's).
    pub(crate) xrcd: u32,
    /// The domain (`Xrcd::domain`): XRC target QPs of the same domain deliver into it.
    pub(crate) domain: u32,
    /// The CQ receive completions go to.
    pub(crate) cq: u32,
}

/// An open XRC domain (OPEN_XRCD): a context's handle on a domain. Opens of one file
/// share the domain (`Resources::xrc_files`).
#[derive(Debug)]
pub(crate) struct Xrcd {
    pub(crate) ctx: CtxId,
    /// Device-wide domain number.
    pub(crate) domain: u32,
    /// The file it was opened by (`st_dev`, `st_ino`), if any.
    pub(crate) file: Option<(u64, u64)>,
    /// XRC SRQs and XRC target QPs made with this handle.
    pub(crate) users: u32,
}

/// An XRC QP's role and, for a target, its domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum QpXrc {
    /// XRC_SEND.
    Initiator,
    /// XRC_RECV of `xrcd` (the handle), in `domain`.
    Target { xrcd: u32, domain: u32 },
}

#[derive(Debug)]
pub(crate) struct Ah {
    pub(crate) ctx: CtxId,
    pub(crate) pd: u32,
    pub(crate) dest: Dest,
}

/// Granted QP capabilities (CREATE_QP response, QUERY_QP).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Caps {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline: u32,
}

#[derive(Debug)]
pub(crate) struct QpObj {
    pub(crate) ctx: CtxId,
    pub(crate) pd: u32,
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    pub(crate) srq: Option<u32>,
    /// XRC QPs: the role (a target has no PD, CQs or receive queue of its own: each request
    /// names an XRC SRQ of its domain, whose PD and CQ it uses).
    pub(crate) xrc: Option<QpXrc>,
    pub(crate) user_handle: u64,
    pub(crate) qp: Qp,
    pub(crate) ty: Service,
    pub(crate) sq_mem: Arc<SharedMem>,
    pub(crate) sq_layout: RingLayout,
    pub(crate) sq: Consumer,
    /// SQ entries past the consumer index that the engine has taken (into the transport,
    /// or completed with an error itself). Released once complete, as rxe frees an SQ slot
    /// when the completer retires the WQE.
    pub(crate) sq_taken: u32,
    /// The QP's own receive queue; `None` with an SRQ.
    pub(crate) rq: Option<RecvRing>,
    pub(crate) caps: Caps,
    pub(crate) sq_sig_all: bool,
    pub(crate) db_slot: u32,
    pub(crate) av: Option<Dest>,
    pub(crate) events_reported: u32,
    pub(crate) in_ready: bool,
    pub(crate) timer: Option<Time>,
    /// Listed in `DevState::err_rqs`.
    pub(crate) in_err_list: bool,
    /// The newest send WQE taken from the ring was unsignaled: the application owes a
    /// signaled one (its unsignaled WQEs' slots are its own again only once a later
    /// completion is polled), so it is mid-stream, not idle. Counted in
    /// `Resources::owing_qps`.
    pub(crate) owes_signal: bool,
}

impl QpObj {
    /// Whether packets of this QP may leave through the socket.
    /// Whether the QP may send or receive through the socket: UD, a remote address, or
    /// — on a device attached to a daemon — a peer QP of another process (`own`: this
    /// process's QP-number window).
    pub(crate) fn remote_capable(&self, dev_ip: IpAddr, own: Option<(u32, u32)>) -> bool {
        self.ty == Service::Ud
            || self.av.is_some_and(|d| {
                d.ip != dev_ip || own.is_some_and(|w| !in_window(w, self.qp.dest_qpn().value()))
            })
    }
}

/// Everything but the QPs, so a QP and the tables it uses can be borrowed together.
#[derive(Debug)]
pub(crate) struct Resources {
    pub(crate) ctxs: HashMap<CtxId, Context>,
    pub(crate) pds: Slab<Pd>,
    pub(crate) mrs: crate::keys::MrTable,
    pub(crate) cqs: Slab<Cq>,
    pub(crate) srqs: Slab<Srq>,
    pub(crate) xrcds: Slab<Xrcd>,
    /// The next XRC domain number.
    pub(crate) next_xrc_domain: u32,
    pub(crate) ahs: Slab<Ah>,
    pub(crate) chans: Slab<Chan>,
    pub(crate) counters: EngineCounters,
    /// CQs the engine wrote completions into that the application may not have consumed
    /// yet (each at most once: `Cq::watched`); the engine's idle policy looks at them
    /// (`crate::spin`).
    pub(crate) cq_watch: Vec<u32>,
    /// QPs with `QpObj::owes_signal` set.
    pub(crate) owing_qps: u32,
    /// `wc.sl` of a UD receive completion: the RoCE L3 header type of the packet, as mlx5
    /// reports it there for UD over RoCE (2 IPv4, 1 IPv6: the CQE's `roce_pkt_type`, the
    /// kernel's `MLX5_CQE_ROCE_L3_HEADER_TYPE_*`). UCX 1.13's `ud_verbs` reads it to find
    /// the destination GID inside the 40-byte GRH area and drops packets otherwise
    /// (docs/compat.md §11). A device has one address, so every packet it receives is of
    /// that family.
    pub(crate) ud_recv_sl: u8,
    /// The device's name (fast-path trace events name it).
    pub(crate) dev_name: Arc<str>,
}

/// A device's state (behind its mutex).
#[derive(Debug)]
pub(crate) struct DevState {
    pub(crate) cfg: DeviceConfig,
    pub(crate) engine: Arc<dyn EngineLink>,
    pub(crate) res: Resources,
    pub(crate) qps: Slab<QpObj>,
    /// QPs the engine must look at (each at most once: `QpObj::in_ready`).
    pub(crate) ready: VecDeque<u32>,
    /// Transport deadlines: (time, QP index); stale entries are skipped.
    pub(crate) timers: BinaryHeap<Reverse<(Time, u32)>>,
    /// Counters of destroyed QPs, kept for the port totals.
    pub(crate) retired: transport::Counters,
    /// QPs that may send or receive through the socket (UD, or a remote AV).
    pub(crate) remote_qps: usize,
    /// QPs in ERR with their own RQ: receives the library posts to the ring now flush
    /// (docs/wire.md §6.3), and no doorbell announces them, so each awake pass looks.
    pub(crate) err_rqs: Vec<u32>,
    /// Where MR keys come from (`crate::keys`).
    pub(crate) keygen: crate::keys::KeyGen,
    /// How command addresses name memory (`dma::AddressSpace`).
    pub(crate) space: crate::dma::AddressSpace,
    /// The process's mappings as read for the command being executed, before the lock was
    /// taken (`ctrl::serve`); `None`: a range check reads them itself.
    pub(crate) maps: Option<crate::dma::Maps>,
    /// QP 1 and the Communication Manager.
    pub(crate) gsi: crate::gsi::Gsi,
    /// A sealed device (`crate::fuzzing`): nothing it transmits leaves it (packets to
    /// other addresses are dropped as unroutable), and with no context open its MR key
    /// sequence starts over, so every session sees the same handles and keys.
    pub(crate) hermetic: bool,
    /// IPv4 Identifications of the senders heard from, to judge solved ICRCs.
    pub(crate) idents: crate::ident::IdentGuard,
    /// On a device attached to a daemon: this process's QP numbers `(base, count)`; a
    /// packet to the device's own address takes the internal loopback only to these.
    pub(crate) own_qpns: Option<(u32, u32)>,
    /// The daemon this device is attached to, if any (`crate::daemon_client`).
    pub(crate) daemon: Option<Arc<crate::daemon_client::DaemonLink>>,
    /// Packet rings to other processes of the daemon's device, by their window slot
    /// (`crate::peer_ring`); made by the control plane when a QP is connected to theirs.
    pub(crate) peer_tx: HashMap<u32, crate::peer_ring::TxRing>,
    /// Packet rings from other processes, polled by the engine on every pass.
    pub(crate) peer_rx: Vec<crate::peer_ring::RxRing>,
}

/// Whether `qpn` is in the window `(base, count)`.
pub(crate) fn in_window(w: (u32, u32), qpn: u32) -> bool {
    qpn.wrapping_sub(w.0) < w.1
}

impl DevState {
    /// The port counters: every QP's transport counters (live and destroyed) summed, and
    /// the engine's, with the payload bytes copied that the MR table counts.
    pub(crate) fn port_counters(&self) -> crate::PortCounters {
        let mut transport = self.retired;
        for (_, q) in self.qps.iter() {
            transport.accumulate(q.qp.counters());
        }
        let mut engine = self.res.counters;
        engine.mem_copy_bytes = self.res.mrs.copied();
        crate::PortCounters { transport, engine }
    }

    pub(crate) fn new(cfg: DeviceConfig, engine: Arc<dyn EngineLink>) -> DevState {
        let gsi = crate::gsi::Gsi::new(abi::provider::node_guid(cfg.addr), crate::gsi::id_seed());
        let ud_recv_sl = if cfg.addr.is_ipv4() { 2 } else { 1 };
        let dev_name: Arc<str> = Arc::from(cfg.name.as_str());
        DevState {
            cfg,
            engine,
            res: Resources {
                dev_name,
                ctxs: HashMap::new(),
                pds: Slab::new(1),
                mrs: crate::keys::MrTable::new(),
                cqs: Slab::new(1),
                srqs: Slab::new(1),
                xrcds: Slab::new(1),
                next_xrc_domain: 1,
                ahs: Slab::new(1),
                chans: Slab::new(1),
                counters: EngineCounters::default(),
                cq_watch: Vec::new(),
                owing_qps: 0,
                ud_recv_sl,
            },
            qps: Slab::new(16),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            retired: transport::Counters::default(),
            remote_qps: 0,
            err_rqs: Vec::new(),
            keygen: crate::keys::KeyGen::default(),
            space: crate::dma::AddressSpace::Process,
            maps: None,
            gsi,
            hermetic: false,
            idents: crate::ident::IdentGuard::default(),
            own_qpns: None,
            daemon: None,
            peer_tx: HashMap::new(),
            peer_rx: Vec::new(),
        }
    }

    /// This device is a daemon's client (`crate::daemon_client`): QP numbers from the
    /// granted window, CM IDs with the granted prefix.
    pub(crate) fn attach_to_daemon(&mut self, link: Arc<crate::daemon_client::DaemonLink>) {
        let g = link.grant;
        self.daemon = Some(link);
        self.qps = Slab::new(g.qpn_base);
        self.own_qpns = Some((g.qpn_base, g.qpn_count));
        self.gsi
            .set_id_prefix(u8::try_from(g.id_prefix_bits).unwrap_or(0), g.id_prefix);
    }

    /// Publish what is staged in every peer ring, ACKs held back for company included
    /// (`peer_ring::TxRing::publish_or_hold`): before a QP changes state or goes away, when
    /// a context closes, at process exit (docs/daemon.md §2.1). An ACK held past such a
    /// point could be the last one its peer waits for.
    pub(crate) fn publish_peer_rings(&mut self) {
        for tx in self.peer_tx.values_mut() {
            tx.publish();
        }
    }

    /// On a daemon's device: make sure a packet ring leads to the process that owns QP
    /// `dest_qpn` at this device's own address, if another process owns it (asked of the
    /// daemon once per peer process; without a ring, packets go through the daemon).
    /// Returns whether packets to it go through a ring.
    pub(crate) fn ensure_peer_ring(&mut self, dest_ip: IpAddr, dest_qpn: u32) -> bool {
        let (Some(link), Some(own)) = (&self.daemon, self.own_qpns) else {
            return false;
        };
        if dest_ip != self.cfg.addr || in_window(own, dest_qpn) {
            return false;
        }
        let slot = dest_qpn >> crate::daemon::WINDOW_BITS;
        // Asked at every connection: the slot may have changed hands since the ring we hold
        // was made (the daemon keeps one ring per pair of live clients).
        // No ring (the peer went away, or the daemon refused): the daemon forwards.
        if let Ok((ring, wake)) = link.peer(slot) {
            if self
                .peer_tx
                .get(&slot)
                .is_some_and(|t| t.same_memory(&ring))
            {
                return true;
            }
            match crate::peer_ring::TxRing::attach(&ring, wake) {
                Ok(tx) => {
                    self.peer_tx.insert(slot, tx);
                    return true;
                }
                Err(e) => eprintln!("uroce: {}: peer ring to slot {slot}: {e}", self.cfg.name),
            }
        }
        false
    }

    /// Whether the device is dead because its daemon went away.
    pub(crate) fn fatal(&self) -> bool {
        self.daemon
            .as_ref()
            .is_some_and(|l| l.fatal.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Give back to the daemon the service IDs of `before` no listener of this device is
    /// on any more (after a CM ID or a context went away).
    pub(crate) fn release_listens(&self, before: &[transport::wire::cm::ServiceId]) {
        if let Some(l) = &self.daemon {
            for sid in before {
                if !self.gsi.cm.is_listening(*sid) {
                    l.unlisten(sid.0);
                }
            }
        }
    }

    /// Whether the CM has anything going (a listener, a connection, a lookup): then the
    /// socket must be read even when no QP talks to another device.
    pub(crate) fn gsi_live(&self) -> bool {
        self.gsi.cm.live_ids() > 0
    }

    /// Queue the CM's next deadline in the timer heap (if earlier than the one queued).
    pub(crate) fn arm_gsi(&mut self) {
        if let Some(t) = self.gsi.arm() {
            self.timers
                .push(std::cmp::Reverse((t, crate::gsi::GSI_TIMER)));
        }
    }

    /// The address space command addresses are checked in, with the mappings read for the
    /// current command if any.
    pub(crate) fn mem_space(&self) -> crate::dma::Space<'_> {
        crate::dma::Space::new(self.space, self.maps.as_ref())
    }

    pub(crate) fn dev_ip(&self) -> IpAddr {
        self.cfg.addr
    }

    /// Queue QP `idx` for the engine.
    pub(crate) fn make_ready(&mut self, idx: u32) {
        make_ready(&mut self.qps, &mut self.ready, idx);
    }

    /// What a device with no context open still holds that a context should have taken
    /// with it (empty when everything was reclaimed).
    pub(crate) fn leftovers(&self) -> Vec<String> {
        let r = &self.res;
        let counts = [
            ("contexts", r.ctxs.len()),
            ("pds", r.pds.len()),
            ("mrs", r.mrs.len()),
            ("cqs", r.cqs.len()),
            ("srqs", r.srqs.len()),
            ("ahs", r.ahs.len()),
            ("comp_channels", r.chans.len()),
            ("qps", self.qps.len()),
            ("owing_qps", r.owing_qps as usize),
            ("cm_ids", self.gsi.owners.len()),
            ("cm_channels", self.gsi.chans.len()),
        ];
        counts
            .iter()
            .filter(|(_, n)| *n != 0)
            .map(|(what, n)| format!("{n} {what}"))
            .collect()
    }

    pub(crate) fn recount_remote(&mut self) {
        let (ip, own, rings) = (self.cfg.addr, self.own_qpns, &self.peer_tx);
        // A peer process reached through a packet ring needs no socket.
        let ringed = |q: &QpObj| {
            q.av.is_some_and(|d| {
                d.ip == ip
                    && rings.contains_key(&(q.qp.dest_qpn().value() >> crate::daemon::WINDOW_BITS))
            })
        };
        self.remote_qps = self
            .qps
            .iter()
            .filter(|(_, q)| q.remote_capable(ip, own) && !ringed(q))
            .count();
    }
}

pub(crate) fn make_ready(qps: &mut Slab<QpObj>, ready: &mut VecDeque<u32>, idx: u32) {
    if let Some(q) = qps.get_mut(idx) {
        if !q.in_ready {
            q.in_ready = true;
            ready.push_back(idx);
        }
    }
}

/// [`make_ready`] for a QP a packet just reached: at the head of the queue, since what it
/// owes now — an acknowledgement, a READ response, completions — is what other QPs' round
/// trips wait for. At the tail, behind every QP with data to send, an ACK waits a whole
/// round of the queue: with a thousand busy QPs longer than the requester's timeout.
pub(crate) fn make_ready_first(qps: &mut Slab<QpObj>, ready: &mut VecDeque<u32>, idx: u32) {
    if let Some(q) = qps.get_mut(idx) {
        if !q.in_ready {
            q.in_ready = true;
            ready.push_front(idx);
        }
    }
}

/// A transport completion as the CQE's `ibv_wc` (docs/wire.md §7.5; flags in libibverbs values).
pub(crate) fn to_wc(c: &Completion) -> Wc {
    let mut wc = Wc {
        wr_id: c.wr_id,
        status: c.status as u32,
        opcode: c.opcode as u32,
        vendor_err: c.vendor_err,
        byte_len: c.byte_len,
        ex: 0,
        qp_num: c.qp_num.value(),
        src_qp: c.src_qp.value(),
        wc_flags: c.wc_flags.0,
        pkey_index: 0,
        slid: 0,
        sl: 0,
        dlid_path_bits: 0,
        port_num: 1,
        reserved: 0,
    };
    if let Some(imm) = c.imm_data {
        wc.set_imm_data(imm);
    } else if let Some(rkey) = c.invalidated_rkey {
        wc.ex = rkey.0;
    }
    wc
}

/// Why a CQE could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

impl Resources {
    /// Post an async event on a context's async fd.
    pub(crate) fn post_async(&mut self, ctx: CtxId, element: u64, event_type: u32) {
        let Some(c) = self.ctxs.get(&ctx) else {
            return;
        };
        let ev = AsyncEventDesc {
            element,
            event_type,
            reserved: 0,
        };
        if sys::send_message(c.async_tx.as_fd(), ev.as_bytes()).is_err() {
            self.counters.event_drops += 1;
        }
    }

    /// Record whether QP `q`'s newest taken send WQE leaves the application owing a
    /// signaled one (`QpObj::owes_signal`).
    pub(crate) fn set_owes_signal(&mut self, q: &mut QpObj, owes: bool) {
        if q.owes_signal != owes {
            q.owes_signal = owes;
            if owes {
                self.owing_qps += 1;
            } else {
                self.owing_qps = self.owing_qps.saturating_sub(1);
            }
        }
    }

    /// Whether an application of this device is mid-work (`crate::spin`): some QP's newest
    /// send WQE was unsignaled, or some CQ holds completions it has not consumed yet.
    pub(crate) fn app_mid_work(&mut self) -> bool {
        self.owing_qps > 0 || self.app_has_unpolled()
    }

    /// Whether some CQ holds completions the application has not consumed yet: it has work
    /// in hand and will be back (`crate::spin`). CQs found drained leave the watch list, so
    /// the cost is the number of CQs with unconsumed completions.
    pub(crate) fn app_has_unpolled(&mut self) -> bool {
        while let Some(&idx) = self.cq_watch.last() {
            let pending = match self.cqs.get_mut(idx) {
                Some(cq) => {
                    let slots = cq.layout.slots();
                    let pending = cq.ring.free().is_ok_and(|f| f < slots);
                    cq.watched = pending;
                    pending
                }
                None => false,
            };
            if pending {
                return true;
            }
            self.cq_watch.pop();
        }
        false
    }

    /// Write one completion into CQ `cq` and raise its completion event if armed
    /// (`solicited` says whether a solicited-only arming fires). On a full ring the CQE is
    /// dropped — never overwriting one the library has not consumed — and the CQ reports
    /// IBV_EVENT_CQ_ERR (once per overflow episode); the caller moves the QP to ERR.
    pub(crate) fn push_cqe(
        &mut self,
        cq_idx: u32,
        wc: &Wc,
        solicited: bool,
    ) -> Result<(), Overflow> {
        if crate::trace::fast_on() {
            crate::trace::fast(&self.dev_name, || {
                let status = transport::WcStatus::from_raw(wc.status)
                    .map_or("?", transport::WcStatus::as_str);
                format!(
                    "CQE cq={cq_idx} qpn={:#x} wr_id={} opcode={} byte_len={} status={} ({status})",
                    wc.qp_num, wc.wr_id, wc.opcode, wc.byte_len, wc.status
                )
            });
        }
        let Some(cq) = self.cqs.get_mut(cq_idx) else {
            return Err(Overflow);
        };
        let stamp = if cq.wallclock {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        } else {
            0
        };
        let cqe = Cqe {
            wc: *wc,
            reserved: [stamp, 0],
        };
        match cq.ring.stage_struct(&cqe) {
            Ok(()) => {
                let _ = cq.ring.publish();
                cq.overflowed = false;
                if !cq.watched {
                    cq.watched = true;
                    self.cq_watch.push(cq_idx);
                }
            }
            Err(e) => {
                self.counters.cq_overflow += 1;
                cq.lost_cqes += 1;
                if matches!(e, abi::AbiError::RingCorrupt { .. }) {
                    self.counters.ring_corrupt += 1;
                }
                if !cq.overflowed {
                    cq.overflowed = true;
                    cq.async_events = cq.async_events.wrapping_add(1);
                    let (ctx, h) = (cq.ctx, cq.user_handle);
                    self.post_async(ctx, h, event::CQ_ERR);
                }
                return Err(Overflow);
            }
        }
        let fire = match cq.arm {
            Arm::Off => false,
            Arm::Next => true,
            Arm::Solicited => solicited,
        };
        if fire {
            cq.arm = Arm::Off;
            cq.comp_events = cq.comp_events.wrapping_add(1);
            let desc = CompEventDesc {
                cq_handle: cq.user_handle,
            };
            if let Some(ch) = cq.chan.and_then(|c| self.chans.get(c)) {
                if sys::send_message(ch.tx.as_fd(), desc.as_bytes()).is_err() {
                    self.counters.event_drops += 1;
                }
            }
        }
        Ok(())
    }
}

/// A receive queue over a ring the library fills, handed to the transport when a request
/// needs a receive WQE (rxe: the responder reads the RQ ring directly).
pub(crate) struct RingRecvQueue<'a> {
    pub(crate) rq: &'a mut RecvRing,
    pub(crate) corrupt: bool,
}

impl std::fmt::Debug for RingRecvQueue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingRecvQueue").finish_non_exhaustive()
    }
}

/// Largest receive WQE the engine reads (header + [`abi::fastpath::MAX_SGE`] SGEs).
pub(crate) const RECV_WQE_MAX: usize = RECV_WQE_HDR_BYTES + 32 * AbiSge::SIZE;

impl RecvRing {
    /// Bytes of a slot worth reading.
    fn read_len(&self) -> usize {
        (RECV_WQE_HDR_BYTES + self.max_sge as usize * AbiSge::SIZE)
            .min(self.layout.elem_size() as usize)
            .min(RECV_WQE_MAX)
    }

    /// Refresh the producer index; `Err` if the library broke the ring protocol.
    pub(crate) fn refresh(&mut self) -> Result<u32, abi::AbiError> {
        self.ring.available()
    }

    /// Parse entry `i` (0 = oldest) into a transport receive WR. A malformed WQE becomes a
    /// WR whose single SGE has an invalid key, so it completes with a protection error
    /// instead of vanishing.
    pub(crate) fn peek(&self, i: u32) -> Option<RecvWr> {
        let mut buf = [0u8; RECV_WQE_MAX];
        let n = self.read_len();
        let slot = buf.get_mut(..n)?;
        self.ring.read(i, 0, slot).ok()?;
        match RecvWqe::parse(slot, self.max_sge) {
            Ok((hdr, sges)) => {
                let mut list = SgeList::new();
                for s in sges.chunks_exact(AbiSge::SIZE) {
                    let addr = u64::from_ne_bytes(s[0..8].try_into().ok()?);
                    let length = u32::from_ne_bytes(s[8..12].try_into().ok()?);
                    let lkey = u32::from_ne_bytes(s[12..16].try_into().ok()?);
                    list.push(transport::Sge {
                        addr,
                        length,
                        lkey: Lkey(lkey),
                    });
                }
                Some(RecvWr {
                    wr_id: hdr.wr_id,
                    sges: list,
                })
            }
            Err(_) => {
                let wr_id = u64::from_ne_bytes(slot.get(0..8)?.try_into().ok()?);
                Some(RecvWr {
                    wr_id,
                    sges: SgeList::single(transport::Sge {
                        addr: 0,
                        length: u32::MAX,
                        lkey: Lkey(0),
                    }),
                })
            }
        }
    }

    /// Take the oldest entry.
    pub(crate) fn pop(&mut self) -> Option<RecvWr> {
        if self.ring.cached_available() == 0 {
            match self.ring.available() {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
        let wr = self.peek(0);
        let _ = self.ring.release(1);
        wr
    }

    /// Drop every posted entry without completions (RESET).
    pub(crate) fn discard_all(&mut self) {
        if let Ok(n) = self.ring.available() {
            let _ = self.ring.release(n);
        }
    }
}

impl RecvQueue for RingRecvQueue<'_> {
    fn pop(&mut self) -> Option<RecvWr> {
        if self.rq.ring.cached_available() == 0 && self.rq.refresh().is_err() {
            self.corrupt = true;
        }
        self.rq.pop()
    }

    fn len(&self) -> usize {
        self.rq.ring.cached_available() as usize
    }
}

/// Most payload pieces one packet leaves to be fetched at delivery; further pieces of a
/// many-SGE gather are copied into the packet at once.
const DEFER_MAX: usize = 4;

/// A payload range a packet was built without: bytes `at..at + len` of the packet buffer
/// are bytes `off..off + len` of the MR with key `key` — checked (key, PD, bounds, access)
/// when the packet was built, and re-resolved by key when the bytes are needed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Deferred {
    at: usize,
    len: usize,
    off: u64,
    key: u32,
}

/// The deferred payload ranges of one packet, in buffer order (same-device DMA: a packet
/// that stays on the device carries descriptors of its payload, not the bytes, and the
/// receiving side copies straight from the source MR into the destination — one copy, as
/// a NIC's DMA engine moves loopback data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct DeferList {
    n: u8,
    items: [Deferred; DEFER_MAX],
    /// `MrTable::removals` when the list was made ([`DeferList::stamp`]).
    removals: u64,
}

impl DeferList {
    fn items(&self) -> &[Deferred] {
        self.items.get(..usize::from(self.n)).unwrap_or(&[])
    }

    /// Append a range after the last one; `false` if full or out of order.
    fn push(&mut self, d: Deferred) -> bool {
        if usize::from(self.n) >= DEFER_MAX
            || self.items().last().is_some_and(|l| l.at + l.len > d.at)
        {
            return false;
        }
        if let Some(slot) = self.items.get_mut(usize::from(self.n)) {
            *slot = d;
            self.n += 1;
            return true;
        }
        false
    }

    /// Forget every range.
    pub(crate) fn clear(&mut self) {
        self.n = 0;
    }

    /// Whether no payload is deferred.
    pub(crate) fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Note the MR table's removals as the list is made (its keys were looked up then).
    pub(crate) fn stamp(&mut self, mrs: &crate::keys::MrTable) {
        self.removals = mrs.removals();
    }

    /// Whether every MR the deferred bytes come from is still registered (the packet is
    /// delivered in a later pass, after commands may have deregistered it: then it is
    /// dropped like a lost packet, and the sender's retry finds the key gone). With no MR
    /// removed since [`DeferList::stamp`], all are.
    pub(crate) fn sources_valid(&self, mrs: &crate::keys::MrTable) -> bool {
        self.n == 0
            || mrs.removals() == self.removals
            || self.items().iter().all(|d| source(mrs, d.key).is_some())
    }

    /// Copy the deferred bytes into the packet (it leaves through a socket); `false` if a
    /// source is gone or a range is outside `buf`.
    pub(crate) fn materialize(&self, mrs: &crate::keys::MrTable, buf: &mut [u8]) -> bool {
        self.items().iter().all(|d| {
            let (Some(mr), Some(dst)) = (source(mrs, d.key), buf.get_mut(d.at..d.at + d.len))
            else {
                return false;
            };
            let ok = mr.range.read(d.off, dst);
            if ok {
                mrs.count_copy(d.len);
            }
            ok
        })
    }

    /// Fill `dst` with bytes `from..from + dst.len()` of a packet buffer `buf`: those
    /// deferred from their source MRs, the rest from `buf` itself. `false` if a source is
    /// gone or the range is outside `buf`.
    pub(crate) fn materialize_range(
        &self,
        mrs: &crate::keys::MrTable,
        buf: &[u8],
        from: usize,
        dst: &mut [u8],
    ) -> bool {
        let to = from + dst.len();
        let mut at = from;
        for d in self.items() {
            let (s, e) = (d.at.max(at), (d.at + d.len).min(to));
            if s >= e {
                continue;
            }
            let (Some(gap), Some(out)) = (buf.get(at..s), dst.get_mut(at - from..s - from)) else {
                return false;
            };
            out.copy_from_slice(gap);
            let (Some(mr), Some(out)) = (source(mrs, d.key), dst.get_mut(s - from..e - from))
            else {
                return false;
            };
            if !mr.range.read(d.off + (s - d.at) as u64, out) {
                return false;
            }
            mrs.count_copy(e - s);
            at = e;
        }
        match (buf.get(at..to), dst.get_mut(at - from..)) {
            (Some(rest), Some(out)) => {
                out.copy_from_slice(rest);
                true
            }
            _ => false,
        }
    }
}

fn source(mrs: &crate::keys::MrTable, key: u32) -> Option<&Mr> {
    mrs.by_key(key)
}

/// What a [`DmaView`] does with packet payload — the bytes the transport moves through
/// `Memory`'s `*_to_packet` / `*_from_packet` methods, which name their place in the packet.
#[derive(Debug, Default)]
pub(crate) enum Payload<'a> {
    /// Copy bytes in and out (packets from the socket; packets built for it).
    #[default]
    Copy,
    /// Building a packet that may stay on the device: payload read into it is recorded in
    /// the list (where it comes from, where in the packet it goes) instead of copied.
    Defer(&'a mut DeferList),
    /// Delivering a packet built that way: its payload is copied from the recorded sources
    /// straight into the destination.
    Resolve(&'a DeferList),
}

impl<'a> Payload<'a> {
    /// Resolve payload writes from a packet built with [`Payload::Defer`] and `list`.
    pub(crate) fn resolve(list: &'a DeferList) -> Payload<'a> {
        if list.is_empty() {
            Payload::Copy
        } else {
            Payload::Resolve(list)
        }
    }
}

/// Registered memory as one QP sees it: keys resolve in the device's MR table, and the MR
/// must belong to the QP's PD (docs/architecture.md §4, the NIC's MTT). Every failure is an error
/// the transport turns into the prescribed completion status or NAK.
pub(crate) struct DmaView<'a> {
    pub(crate) mrs: &'a crate::keys::MrTable,
    pub(crate) pd: u32,
    /// The QP's number (a type 2 window answers only the QP it is bound to).
    pub(crate) qpn: u32,
    pub(crate) payload: Payload<'a>,
}

impl std::fmt::Debug for DmaView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaView").field("pd", &self.pd).finish()
    }
}

impl<'a> DmaView<'a> {
    fn lookup(&self, key: u32, addr: u64, len: u64) -> Result<(&'a Mr, u64), MemError> {
        let mr = self.mrs.by_key(key).ok_or(MemError::InvalidKey)?;
        self.within(mr, addr, len)
    }

    /// [`DmaView::lookup`] for an MR already found by its key: same PD, `[addr, addr +
    /// len)` inside it.
    fn within(&self, mr: &'a Mr, addr: u64, len: u64) -> Result<(&'a Mr, u64), MemError> {
        if mr.pd != self.pd {
            return Err(MemError::InvalidKey);
        }
        let off = addr.checked_sub(mr.iova).ok_or(MemError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > mr.length {
            return Err(MemError::OutOfBounds);
        }
        Ok((mr, off))
    }

    /// [`DmaView::lookup`] for a local write: the MR must grant LOCAL_WRITE.
    fn local_writable(&self, lkey: Lkey, addr: u64, len: usize) -> Result<(&'a Mr, u64), MemError> {
        let (mr, off) = self.lookup(lkey.0, addr, len as u64)?;
        if mr.access & abi::AccessFlags::LOCAL_WRITE.0 == 0 {
            return Err(MemError::AccessDenied);
        }
        Ok((mr, off))
    }

    fn remote(
        &self,
        rkey: Rkey,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(&'a Mr, u64), MemError> {
        use abi::AccessFlags as A;
        let need = match access {
            RemoteAccess::Read => A::REMOTE_READ,
            RemoteAccess::Write => A::REMOTE_WRITE,
            RemoteAccess::Atomic => A::REMOTE_ATOMIC,
        };
        let Some(mr) = self.mrs.by_key(rkey.0) else {
            return match self.mrs.mw_by_key(rkey.0) {
                Some(mw) => self.through_window(mw, va, len, need.0),
                None => Err(MemError::InvalidKey),
            };
        };
        let (mr, off) = self.within(mr, va, len)?;
        if mr.access & need.0 == 0 {
            return Err(MemError::AccessDenied);
        }
        Ok((mr, off))
    }

    /// Remote access through a memory window's rkey (IBTA Vol 1 §10.6.7.2, o10-37.2.x): the
    /// window is bound, in the QP's PD, bound to this QP if it is of type 2, and grants
    /// `need` over `[va, va + len)`; then the bytes are the MR's.
    fn through_window(
        &self,
        mw: &crate::keys::Mw,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(&'a Mr, u64), MemError> {
        let b = mw.binding.get().ok_or(MemError::InvalidKey)?;
        if mw.pd != self.pd || (mw.ty == 2 && b.qpn != self.qpn) {
            return Err(MemError::InvalidKey);
        }
        let off = va.checked_sub(b.addr).ok_or(MemError::OutOfBounds)?;
        if off.checked_add(len).is_none_or(|end| end > b.len) {
            return Err(MemError::OutOfBounds);
        }
        if b.access & need == 0 {
            return Err(MemError::AccessDenied);
        }
        let mr = self.mrs.by_key(b.mr_key).ok_or(MemError::InvalidKey)?;
        let off = va.checked_sub(mr.iova).ok_or(MemError::OutOfBounds)?;
        if off.checked_add(len).is_none_or(|end| end > mr.length) {
            return Err(MemError::OutOfBounds);
        }
        Ok((mr, off))
    }

    /// Copy bytes `off..` of `mr` (checked) into `dst`, counted in the MR table.
    fn fetch(&self, mr: &Mr, off: u64, dst: &mut [u8]) -> Result<(), MemError> {
        if !mr.range.read(off, dst) {
            return Err(MemError::OutOfBounds);
        }
        self.mrs.count_copy(dst.len());
        Ok(())
    }

    /// Copy `src` to bytes `off..` of `mr` (checked), counted in the MR table.
    fn place(&self, mr: &Mr, off: u64, src: &[u8]) -> Result<(), MemError> {
        if !mr.range.write(off, src) {
            return Err(MemError::OutOfBounds);
        }
        self.mrs.count_copy(src.len());
        Ok(())
    }

    /// Fill `dst` (checked: bytes `off..` of `mr`), which is bytes `at..` of the packet
    /// being built — or, while building one that may stay on the device, record where its
    /// bytes are (`dst` is then left as it is).
    fn fetch_to_packet(
        &mut self,
        mr: &Mr,
        off: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        if let Payload::Defer(list) = &mut self.payload {
            let d = Deferred {
                at,
                len: dst.len(),
                key: mr.key,
                off,
            };
            if list.push(d) {
                return Ok(());
            }
        }
        self.fetch(mr, off, dst)
    }

    /// Store `src` — bytes `s0..` of the packet being delivered — at bytes `off..` of `mr`
    /// (checked), taking the deferred payload ranges straight from their source MRs.
    fn place_from_packet(&self, mr: &Mr, off: u64, src: &[u8], s0: usize) -> Result<(), MemError> {
        let Payload::Resolve(list) = &self.payload else {
            return self.place(mr, off, src);
        };
        let s1 = s0 + src.len();
        // Bytes s0..s1 of the packet go to `off..`: literal bytes from `src`, deferred
        // ones from their source MR.
        let literal = |from: usize, to: usize| {
            let bytes = src.get(from - s0..to - s0).ok_or(MemError::OutOfBounds)?;
            self.place(mr, off + (from - s0) as u64, bytes)
        };
        let mut pos = s0;
        for d in list.items() {
            let (a0, a1) = (d.at, d.at + d.len);
            if a1 <= pos || a0 >= s1 {
                continue;
            }
            if a0 > pos {
                literal(pos, a0)?;
                pos = a0;
            }
            let end = a1.min(s1);
            let from = source(self.mrs, d.key).ok_or(MemError::InvalidKey)?;
            let n = end - pos;
            if !mr.range.copy_from(
                off + (pos - s0) as u64,
                &from.range,
                d.off + (pos - a0) as u64,
                n,
            ) {
                return Err(MemError::OutOfBounds);
            }
            self.mrs.count_copy(n);
            pos = end;
        }
        if pos < s1 {
            literal(pos, s1)?;
        }
        Ok(())
    }
}

impl Memory for DmaView<'_> {
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (mr, off) = self.lookup(lkey.0, addr, dst.len() as u64)?;
        self.fetch(mr, off, dst)
    }

    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let (mr, off) = self.local_writable(lkey, addr, src.len())?;
        self.place(mr, off, src)
    }

    fn read_local_to_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        let (mr, off) = self.lookup(lkey.0, addr, dst.len() as u64)?;
        self.fetch_to_packet(mr, off, dst, at)
    }

    fn write_local_from_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        let (mr, off) = self.local_writable(lkey, addr, src.len())?;
        self.place_from_packet(mr, off, src, at)
    }

    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), MemError> {
        self.remote(rkey, va, len, access).map(|_| ())
    }

    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (mr, off) = self.remote(rkey, va, dst.len() as u64, RemoteAccess::Read)?;
        self.fetch(mr, off, dst)
    }

    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError> {
        let (mr, off) = self.remote(rkey, va, src.len() as u64, RemoteAccess::Write)?;
        self.place(mr, off, src)
    }

    fn read_remote_to_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        let (mr, off) = self.remote(rkey, va, dst.len() as u64, RemoteAccess::Read)?;
        self.fetch_to_packet(mr, off, dst, at)
    }

    fn write_remote_from_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        let (mr, off) = self.remote(rkey, va, src.len() as u64, RemoteAccess::Write)?;
        self.place_from_packet(mr, off, src, at)
    }

    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if va % 8 != 0 {
            return Err(MemError::Misaligned);
        }
        let (mr, off) = self.remote(rkey, va, 8, RemoteAccess::Atomic)?;
        mr.range.atomic(off, op).ok_or(MemError::Misaligned)
    }

    fn invalidate(&mut self, rkey: Rkey) -> Result<(), MemError> {
        // SEND_WITH_INV: only a type 2 window of this QP's PD, bound to this QP (IBTA Vol 1
        // §10.6.7.2.2; user MRs cannot be invalidated, and there are no FRMRs).
        let mw = self
            .mrs
            .mw_by_key(rkey.0)
            .ok_or(MemError::InvalidateDenied)?;
        let bound_here = mw.binding.get().is_none_or(|b| b.qpn == self.qpn);
        if mw.ty != 2 || mw.pd != self.pd || !bound_here {
            return Err(MemError::InvalidateDenied);
        }
        mw.binding.set(None);
        Ok(())
    }

    fn invalidate_local(&mut self, _qpn: Qpn, rkey: Rkey) -> Result<(), MemError> {
        // LOCAL_INV: a type 2 window of the QP's PD (rxe `rxe_check_invalidate_mw`).
        let mw = self
            .mrs
            .mw_by_key(rkey.0)
            .ok_or(MemError::InvalidateDenied)?;
        if mw.ty != 2 || mw.pd != self.pd {
            return Err(MemError::InvalidateDenied);
        }
        mw.binding.set(None);
        Ok(())
    }

    fn bind_mw(&mut self, qpn: Qpn, b: &transport::MwBind) -> Result<(), MemError> {
        use abi::AccessFlags as A;
        // IBTA Vol 1 §10.6.7.2 (and rxe `rxe_check_bind_mw`): the window is the QP's PD's,
        // keeps its index bits, a type 2 window is not bound yet and gets a length; the MR
        // is of the same PD, allows MW_BIND, holds the window, and has LOCAL_WRITE if the
        // window grants remote writes or atomics; windows are not zero based here.
        // The window is named by its index bits: providers differ on whether `mw->rkey`
        // follows a WR bind (irdma updates it, rxe's leaves it to the application).
        let mw = self
            .mrs
            .mw_by_index(b.mw_rkey.0)
            .ok_or(MemError::InvalidKey)?;
        if mw.pd != self.pd || (b.new_rkey.0 ^ b.mw_rkey.0) & !0xff != 0 {
            return Err(MemError::InvalidKey);
        }
        // LOCAL_WRITE means nothing for a window and is tolerated (rdma-core's tests pass
        // it); ZERO_BASED and anything else are not offered.
        let remote = A::REMOTE_READ.0 | A::REMOTE_WRITE.0 | A::REMOTE_ATOMIC.0 | A::LOCAL_WRITE.0;
        if b.access & !remote != 0 {
            return Err(MemError::AccessDenied);
        }
        if mw.ty == 2 && (mw.binding.get().is_some() || b.length == 0) {
            return Err(MemError::InvalidKey);
        }
        if b.length == 0 {
            mw.binding.set(None);
            mw.rkey.set(b.new_rkey.0);
            return Ok(());
        }
        let mr = self
            .mrs
            .by_key(b.mr_lkey.0)
            .filter(|m| m.pd == self.pd)
            .ok_or(MemError::InvalidKey)?;
        if mr.access & A::MW_BIND.0 == 0 {
            return Err(MemError::AccessDenied);
        }
        let writes = A::REMOTE_WRITE.0 | A::REMOTE_ATOMIC.0;
        if b.access & writes != 0 && mr.access & A::LOCAL_WRITE.0 == 0 {
            return Err(MemError::AccessDenied);
        }
        let off = b.addr.checked_sub(mr.iova).ok_or(MemError::OutOfBounds)?;
        if off.checked_add(b.length).is_none_or(|end| end > mr.length) {
            return Err(MemError::OutOfBounds);
        }
        mw.binding.set(Some(crate::keys::MwBinding {
            mr_key: mr.key,
            addr: b.addr,
            len: b.length,
            access: b.access,
            qpn: qpn.value(),
        }));
        mw.rkey.set(b.new_rkey.0);
        Ok(())
    }
}

/// Flush every receive WQE still in a QP's own RQ ring with WR_FLUSH_ERR (the QP is in
/// ERR: docs/wire.md §6.3 rule 3). Returns how many.
pub(crate) fn flush_rq_ring(res: &mut Resources, rq: &mut RecvRing, qpn: u32, recv_cq: u32) -> u32 {
    let mut n = 0;
    if rq.refresh().is_err() {
        res.counters.ring_corrupt += 1;
        return 0;
    }
    while let Some(wr) = rq.pop() {
        let wc = Wc {
            wr_id: wr.wr_id,
            status: WcStatus::WrFlushErr as u32,
            opcode: transport::WcOpcode::Recv as u32,
            qp_num: qpn,
            port_num: 1,
            ..Wc::default()
        };
        let _ = res.push_cqe(recv_cq, &wc, true);
        n += 1;
    }
    n
}

/// Whether the QP is in a state whose posted receives flush at once.
pub(crate) fn flushes_receives(s: QpState) -> bool {
    s == QpState::Err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dma::{user_range, AddressSpace};

    fn mr(buf: &mut [u8], key: u32, pd: u32) -> Mr {
        let addr = buf.as_mut_ptr() as u64;
        Mr {
            ctx: 1,
            pd,
            key,
            start: addr,
            iova: 0x1000,
            length: buf.len() as u64,
            access: abi::AccessFlags::LOCAL_WRITE.0 | abi::AccessFlags::REMOTE_WRITE.0,
            range: user_range(AddressSpace::Process, addr, buf.len() as u64, true).unwrap(),
        }
    }

    #[test]
    fn remembered_key_lookups_never_outlive_their_mr() {
        let mut bufs = vec![vec![0u8; 16]; 4];
        let mut mrs = crate::keys::MrTable::new();
        // Four keys of one set of remembered lookups (it has two ways).
        let set = crate::keys::recent_set(0x1111_1104);
        let keys: Vec<u32> = (0x1111_1104u32..)
            .step_by(0x100)
            .filter(|&k| crate::keys::recent_set(k) == set)
            .take(4)
            .collect();
        let (k1, k2) = (keys[0], keys[1]);
        let mut it = bufs.iter_mut();
        let h1 = mrs.insert(mr(it.next().unwrap(), k1, 7), 8).unwrap();
        assert_eq!(mrs.by_key(k1).map(|m| m.key), Some(k1));
        assert_eq!(mrs.by_key(k1).map(|m| m.key), Some(k1), "remembered");
        // Gone: its remembered slot must not answer.
        mrs.remove(h1);
        assert!(mrs.by_key(k1).is_none());
        // The slot reused by another key: the old key still finds nothing.
        let h2 = mrs.insert(mr(it.next().unwrap(), k2, 7), 8).unwrap();
        assert_eq!(h2, h1, "the slab reuses the slot");
        assert!(mrs.by_key(k1).is_none());
        assert_eq!(mrs.by_key(k2).map(|m| m.key), Some(k2));
        assert!(mrs.by_key(k1).is_none());
        // More keys of the set than it has ways, in turn: each still finds its own MR.
        for (&k, b) in keys[2..].iter().zip(it) {
            mrs.insert(mr(b, k, 7), 8).unwrap();
        }
        for _ in 0..3 {
            for &k in &keys[1..] {
                assert_eq!(mrs.by_key(k).map(|m| m.key), Some(k));
            }
        }
        // An unknown key never answers, remembered neighbour or not.
        assert!(mrs.by_key(k1).is_none());
        assert!(mrs.by_key(k2 ^ 0x1).is_none());
        drop(bufs);
    }

    #[test]
    fn deferred_payload_goes_from_source_to_destination_in_one_copy() {
        let mut src: Vec<u8> = (0..64).collect();
        let mut dst = vec![0xeeu8; 64];
        let mut mrs = crate::keys::MrTable::new();
        let (ka, kb) = (0x5eed_0001, 0x0bad_cafe);
        let a = mrs.insert(mr(&mut src, ka, 7), 8).unwrap();
        mrs.insert(mr(&mut dst, kb, 7), 8).unwrap();
        // Build: two payload pieces read into the packet are recorded, not copied.
        let mut pkt = vec![0x55u8; 64];
        let mut list = DeferList::default();
        let mut view = DmaView {
            mrs: &mrs,
            pd: 7,
            qpn: 16,
            payload: Payload::Defer(&mut list),
        };
        view.read_local_to_packet(Lkey(ka), 0x1000 + 8, &mut pkt[10..20], 10)
            .unwrap();
        view.read_local_to_packet(Lkey(ka), 0x1000 + 40, &mut pkt[30..40], 30)
            .unwrap();
        // Checks still happen at build time.
        assert_eq!(
            view.read_local_to_packet(Lkey(ka), 0x1000 + 60, &mut pkt[40..50], 40),
            Err(MemError::OutOfBounds)
        );
        // A plain read (not packet payload) is never deferred.
        let mut plain = [0u8; 4];
        view.read_local(Lkey(ka), 0x1000 + 2, &mut plain).unwrap();
        assert_eq!(plain, [2, 3, 4, 5]);
        assert_eq!(pkt[10..20], [0x55; 10]);
        list.stamp(&mrs);
        assert!(list.sources_valid(&mrs));
        // Deliver bytes 5..45 of the packet to dst+0: literal, deferred, literal,
        // deferred, literal.
        let mut rx = DmaView {
            mrs: &mrs,
            pd: 7,
            qpn: 17,
            payload: Payload::resolve(&list),
        };
        rx.write_remote_from_packet(Rkey(kb), 0x1000, &pkt[5..45], 5)
            .unwrap();
        let mut want = [0x55u8; 40];
        want[5..15].copy_from_slice(&src[8..18]);
        want[25..35].copy_from_slice(&src[40..50]);
        assert_eq!(dst[..40], want[..]);
        assert_eq!(dst[40..], [0xee; 24]);
        // A packet that leaves gets its bytes; a vanished source fails both ways.
        let mut out = pkt.clone();
        assert!(list.materialize(&mrs, &mut out));
        assert_eq!(out[10..20], src[8..18]);
        assert_eq!(out[30..40], src[40..50]);
        // Another MR removed: the list's own sources are still there.
        let mut other = vec![0u8; 8];
        let o = mrs.insert(mr(&mut other, 0x0123_4567, 7), 8).unwrap();
        mrs.remove(o);
        assert!(list.sources_valid(&mrs));
        mrs.remove(a);
        assert!(!list.sources_valid(&mrs));
        assert!(!list.materialize(&mrs, &mut out));
        drop((src, dst, other));
    }

    #[test]
    fn defer_lists_stay_ordered_and_bounded() {
        let mut l = DeferList::default();
        let d = |at, len| Deferred {
            at,
            len,
            key: 1,
            off: 0,
        };
        assert!(l.push(d(0, 4)));
        assert!(!l.push(d(2, 4)), "overlapping or out of order");
        assert!(l.push(d(4, 4)));
        assert!(l.push(d(10, 1)));
        assert!(l.push(d(20, 1)));
        assert!(!l.push(d(30, 1)), "full");
        assert_eq!(l.items().len(), DEFER_MAX);
    }
}
