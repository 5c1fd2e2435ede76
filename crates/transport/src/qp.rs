//! The queue pair: configuration, state machine, posting, polling, and the error/flush rules.
//!
//! A [`Qp`] owns the three rxe roles as separate modules — the requester
//! ([`crate::requester`]: WQEs → request packets, retry), the completer
//! ([`crate::completer`]: ACKs/NAKs/responses → completions) and the responder
//! ([`crate::responder`]: requests → memory operations, receive completions, responses) — and
//! is driven only by its entry points:
//!
//! * inputs: [`Qp::post_send`], [`Qp::post_recv`], [`Qp::handle_packet`],
//!   [`Qp::handle_timeout`], [`Qp::modify`];
//! * outputs: [`Qp::poll_transmit`], [`Qp::poll_completion`], [`Qp::poll_timeout`],
//!   [`Qp::poll_event`].
//!
//! It never reads a clock, touches a socket or allocates per packet. The order in which a
//! driver makes these calls is written on [`Qp`].
//!
//! # Which role holds which state
//!
//! State is grouped by the role that owns it, as rxe groups it (rxe_verbs.h `struct
//! rxe_req_info`, `rxe_comp_info`, `rxe_resp_info`): the requester's in `qp.req`
//! ([`crate::requester::Requester`]), the completer's in `qp.comp`
//! ([`crate::completer::Completer`]), the responder's in `qp.resp`
//! ([`crate::responder::Responder`]), each defined at the top of its role's file. The rule,
//! applied field by field:
//!
//! 1. A field with an rxe counterpart sits where rxe keeps it. So the oldest unacknowledged
//!    PSN (rxe `comp.psn`) and the retry budgets (`comp.retry_cnt`, `comp.rnr_retry`,
//!    `comp.started_retry`) are the completer's although the requester reads them, and the
//!    count of outstanding READ/ATOMICs (rxe counts the complement, `req.rd_atomic`) is the
//!    requester's although the completer lowers it.
//! 2. A field without one belongs to the role that writes it (the AETH credit limit: the
//!    completer; the highest PSN sent: the requester). Selective repeat's state follows the
//!    side it serves: the resend list with the requester, the reassembly store with the
//!    responder.
//! 3. What rxe keeps on the QP itself — the send and receive queues, the retransmission and
//!    RNR timers — and what several roles share with no rxe counterpart — attributes,
//!    configuration, loss recovery ([`crate::recovery::Recovery`]), completions, events,
//!    counters, congestion control — stays on [`Qp`].
//!
//! Any role may read another's state: the role files are `impl Qp` blocks, and none of
//! these structs is visible outside the crate.

use std::collections::VecDeque;

use wire::{Msn, Opcode, Psn, Qpn, RocePacketRepr, Transport};

use crate::completer::Completer;
use crate::dcqcn::{CnpGate, Dcqcn};
use crate::error::TransportError;
use crate::mem::Memory;
use crate::recovery::Recovery;
use crate::requester::Requester;
use crate::responder::Responder;
use crate::sq::{Retired, SendRing};
use crate::state::{check_modify, Mtu, QpAttr, QpAttrMask, QpState, Service};
use crate::{
    Completion, Counters, PostError, RecvWr, SendFlags, SendWr, Time, WcFlags, WcOpcode, WcStatus,
    WrOpcode,
};
use abi::AttrLimits;

/// Largest RDMA message (IBTA: 2^31 bytes; docs/wire.md §1.6).
pub const MAX_MSG_LEN: u64 = 1 << 31;
/// Largest `max_rd_atomic` / `max_dest_rd_atomic` accepted (rxe device cap).
pub const MAX_RD_ATOMIC: u8 = 128;

/// The bounds a modify's values are checked against ([`QpAttr::check`]): [`MAX_RD_ATOMIC`]
/// and one P_Key (index 0, the default P_Key 0xFFFF, as rxe).
pub const ATTR_LIMITS: AttrLimits = AttrLimits {
    max_rd_atomic: MAX_RD_ATOMIC as u32,
    pkey_tbl_len: 1,
};
/// Bytes of the GRH area at the start of a UD receive buffer (docs/wire.md §1.6).
pub const GRH_LEN: usize = 40;
/// Longest header any packet this transport sends carries (BTH + XRCETH + AtomicETH = 44;
/// BTH + XRCETH + RETH + ImmDt = 36), plus the largest pad. A transmit buffer of `path MTU +
/// MAX_HEADER_LEN` bytes always suffices.
pub const MAX_HEADER_LEN: usize = 48;

/// Queue sizes and limits fixed at creation (`ibv_qp_init_attr.cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth (WRs posted and not yet polled as completions).
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline payload bytes per send WR.
    pub max_inline_data: u32,
    /// Every send WR generates a completion (`sq_sig_all`).
    pub sq_sig_all: bool,
}

impl Default for QpCaps {
    fn default() -> QpCaps {
        QpCaps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 256,
            sq_sig_all: false,
        }
    }
}

/// Everything fixed at QP creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// This QP's number.
    pub qpn: Qpn,
    /// RC, UC or UD.
    pub service: Service,
    /// Queue limits.
    pub caps: QpCaps,
    /// Receive WQEs come from a shared receive queue passed to
    /// [`Qp::handle_packet`] instead of the QP's own queue.
    pub uses_srq: bool,
    /// P_Key written into every BTH (the caller resolves `pkey_index`).
    pub pkey: u16,
    /// At most this many PSNs outstanding (sent, not acknowledged); rxe uses 128.
    pub max_unacked_psns: u32,
    /// Set AckReq on a middle packet after this many packets without one (rxe: 64).
    pub max_pkts_per_ack: u32,
    /// Treat `retry_cnt == 7` as "retry forever", as Linux rxe does (docs/wire.md §5.2). IBTA
    /// reads 7 as seven retries; set `false` for that.
    pub retry_cnt_7_infinite: bool,
    /// Lower bound of the RC requester's round-trip-estimated retransmission timer, which
    /// resends from the oldest unacknowledged PSN after a lost tail, NAK or resend without
    /// waiting for the local ACK timeout (and without using a retry); 0 turns it off. The
    /// timer is at most a sixteenth of the local ACK timeout before backoff (perftest's
    /// 67 ms: 4.2 ms).
    pub min_rto_ns: u64,
    /// The RC requester's congestion window (at most `max_unacked_psns` packets) is halved
    /// once per loss episode (sequence NAK, implied NAK, probe), not below half the smoothed
    /// distance between losses and not below this; a local ACK timeout restarts it from one
    /// packet.
    pub min_window: u32,
    /// ECN congestion control (docs/wire.md §11): `Some` makes this QP a DCQCN reaction
    /// point (a CNP cuts its request rate, applied by a pacer) and a notification point (a
    /// CE-marked packet makes it send its peer a CNP, at most one per
    /// `min_time_between_cnps_ns`). `None`: CNPs are counted and ignored, CE marks too.
    pub cc: Option<crate::dcqcn::DcqcnParams>,
    /// An XRC QP (IBTA XRC annex), of service RC: its requests use the XRC opcodes with an
    /// XRCETH naming the responder's SRQ ([`SendWr::xrc_srqn`]), its responses the XRC
    /// opcodes, and it accepts only XRC packets. As a responder (an XRC target) the SRQ the
    /// XRCETH names is the one passed to [`Qp::handle_packet`]; `None` there means the
    /// number named no SRQ of the QP's XRC domain: the request is NAKed Invalid Request.
    pub xrc: Option<crate::state::XrcRole>,
    /// Selective repeat (docs/wire.md §5.6) for an RC QP (not XRC): the responder keeps
    /// requests that arrive ahead of ePSN and NAKs each missing PSN; the requester reads a
    /// sequence NAK as "resend this one PSN". Both ends must have agreed to it (a peer
    /// without it reads such a NAK as go-back-N's cumulative one), so it is off by default;
    /// [`Qp::set_selective_repeat`] changes it before the QP is connected.
    pub selective_repeat: bool,
}

impl QpConfig {
    /// Defaults for a QP of transport service `service` numbered `qpn`.
    pub fn new(qpn: Qpn, service: Service) -> QpConfig {
        QpConfig {
            qpn,
            service,
            caps: QpCaps::default(),
            uses_srq: false,
            pkey: wire::bth::DEFAULT_PKEY,
            max_unacked_psns: 128,
            max_pkts_per_ack: 64,
            retry_cnt_7_infinite: true,
            min_rto_ns: 1_000_000,
            min_window: 8,
            cc: None,
            xrc: None,
            selective_repeat: false,
        }
    }
}

/// The IP header facts of a received packet, for the UD GRH area (docs/wire.md §1.6): the raw
/// IPv4 (20 bytes) or IPv6 (40 bytes) header as received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grh {
    /// IPv4 header bytes; the GRH area is 20 zero bytes followed by these.
    V4([u8; 20]),
    /// IPv6 header bytes; the GRH area is exactly these.
    V6([u8; 40]),
}

impl Grh {
    /// The 40-byte GRH area as RoCE delivers it.
    pub fn area(&self) -> [u8; GRH_LEN] {
        let mut a = [0u8; GRH_LEN];
        match self {
            Grh::V4(h) => a[20..].copy_from_slice(h),
            Grh::V6(h) => a.copy_from_slice(h),
        }
        a
    }
}

/// Facts about a received packet that are not in the transport headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxMeta {
    /// The IP header (for UD receives).
    pub grh: Grh,
    /// The IP header's ECN field was CE (congestion experienced, RFC 3168).
    pub ce: bool,
}

impl Default for RxMeta {
    fn default() -> RxMeta {
        RxMeta {
            grh: Grh::V4([0; 20]),
            ce: false,
        }
    }
}

/// A packet [`Qp::poll_transmit`] wrote into the caller's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Bytes written: BTH through the last pad byte (the caller appends the ICRC).
    pub len: usize,
    /// UD: the address handle of the WR; connected QPs: `None` (send to the QP's peer).
    pub ah: Option<u32>,
    /// Destination QPN (as in the BTH).
    pub dest_qpn: Qpn,
    /// `Some` when the buffer holds a run of request packets ([`Qp::poll_transmit_run`]).
    pub run: Option<Run>,
    /// A request built for [`Qp::set_headers_only`]: its headers, which the buffer then
    /// does not hold — only the payload, where it would follow them. `None`: the buffer
    /// holds the whole packet.
    pub hdr: Option<ReqHeaders>,
}

/// The headers of a request built for [`Qp::set_headers_only`]: its BTH (pad count set) and
/// the RETH of a WRITE's first packet or a READ, the immediate data of a last packet —
/// what WRITEs, SENDs and READs carry. A request with another extension header (an
/// atomic's, an invalidation, XRC's, UD's) is built as bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqHeaders {
    pub bth: wire::BthRepr,
    pub reth: Option<wire::RethRepr>,
    pub immdt: Option<wire::ImmDt>,
}

impl ReqHeaders {
    /// The headers of `r`, if it has no extension header but a RETH and immediate data.
    pub(crate) fn of(r: &RocePacketRepr<'_>) -> Option<ReqHeaders> {
        (r.xrceth.is_none()
            && r.deth.is_none()
            && r.atomic_eth.is_none()
            && r.aeth.is_none()
            && r.atomic_ack.is_none()
            && r.ieth.is_none())
        .then_some(ReqHeaders {
            bth: r.bth,
            reth: r.reth,
            immdt: r.immdt,
        })
    }

    /// The packet as its parser would give it, with `payload`.
    #[inline]
    pub fn repr<'a>(&self, payload: &'a [u8]) -> RocePacketRepr<'a> {
        let mut r = RocePacketRepr::new(self.bth, payload);
        r.reth = self.reth;
        r.immdt = self.immdt;
        r
    }

    /// Bytes of the headers (BTH and the opcode's extension headers).
    #[inline]
    pub fn header_len(&self) -> usize {
        crate::packet::header_len(self.bth.opcode)
    }

    /// Bytes of the payload of a packet of `len` bytes (headers through pad).
    #[inline]
    pub fn payload_len(&self, len: usize) -> usize {
        len.saturating_sub(self.header_len() + usize::from(self.bth.pad_count))
    }
}

impl Transmit {
    /// Packets the buffer stands for: 1, or its run's.
    pub fn pkts(&self) -> u32 {
        Run::pkts_of(self.run)
    }

    /// The bytes its packets take as UDP payloads, ICRCs included ([`Run::wire_len`]).
    pub fn wire_len(&self) -> usize {
        Run::wire_len(self.len, self.run)
    }
}

/// Consecutive request packets of one RC message that one buffer stands for: what
/// [`Qp::poll_transmit_run`] builds with the transport's work per packet done once
/// (docs/architecture.md §4). The buffer holds the first packet's headers (FIRST or
/// MIDDLE) followed by the payload of all of them: every packet but the last carries one
/// path MTU. On the same device, where no wire needs them cut, [`Qp::handle_run`] takes it
/// as the packets one by one, with the same outcome (PSNs, ACKs, errors, completions), and
/// moves the payload at once; toward a wire, [`Run::packet`] cuts it into those packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Packets (PSNs) the run covers, at least 2.
    pub pkts: u32,
    /// Whether its last packet is the message's LAST (never one with immediate data, an
    /// invalidation or the solicited bit: such a packet is sent alone).
    pub ends_message: bool,
    /// Whether any of the packets would have asked for an ACK: the responder then
    /// acknowledges the run's last PSN.
    pub ack_req: bool,
}

impl Run {
    /// Packets a buffer with this run (`None`: none) stands for.
    pub fn pkts_of(run: Option<Run>) -> u32 {
        run.map_or(1, |r| r.pkts)
    }

    /// The bytes that a buffer of `len` bytes (BTH .. last pad byte) with this run takes as
    /// UDP payloads, ICRCs included: a run's packets after the first each carry a BTH of
    /// their own (never an extended header: they are MIDDLE or LAST packets of a plain
    /// WRITE or SEND).
    pub fn wire_len(len: usize, run: Option<Run>) -> usize {
        let more = Run::pkts_of(run) as usize - 1;
        len + more * wire::bth::HEADER_LEN + (more + 1) * wire::icrc::ICRC_LEN
    }

    /// Packet `i` of this run, whose buffer parses as `pkt` (the first packet's headers and
    /// the payload of all of them), as a packet of its own: the run's headers for the first,
    /// a MIDDLE (or, ending the message, a LAST) for the others; the ACK request on the
    /// last; the payload its slice of `pkt`'s. `None` if `pkt` is not what a run starts
    /// with (an RC WRITE or SEND, FIRST or MIDDLE). These are the packets the transport
    /// would have built one by one (a run ends where one of them asks for an ACK).
    pub fn packet<'a>(
        self,
        pkt: &RocePacketRepr<'a>,
        i: u32,
        mtu: usize,
    ) -> Option<RocePacketRepr<'a>> {
        let write = match pkt.bth.opcode {
            Opcode::RC_RDMA_WRITE_FIRST | Opcode::RC_RDMA_WRITE_MIDDLE => true,
            Opcode::RC_SEND_FIRST | Opcode::RC_SEND_MIDDLE => false,
            _ => return None,
        };
        let from = (i as usize).saturating_mul(mtu);
        let end = if i + 1 == self.pkts {
            pkt.payload.len()
        } else {
            from.saturating_add(mtu)
        };
        let payload = pkt
            .payload
            .get(from.min(pkt.payload.len())..end.min(pkt.payload.len()))
            .unwrap_or(&[]);
        let mut p = if i == 0 {
            *pkt
        } else {
            let last = i + 1 == self.pkts && self.ends_message;
            let opcode = match (write, last) {
                (true, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
                (true, true) => Opcode::RC_RDMA_WRITE_LAST,
                (false, false) => Opcode::RC_SEND_MIDDLE,
                (false, true) => Opcode::RC_SEND_LAST,
            };
            let mut bth = pkt.bth;
            bth.opcode = opcode;
            bth.psn = pkt.bth.psn.add(i);
            RocePacketRepr::new(bth, payload)
        };
        p.payload = payload;
        p.bth.ack_req = i + 1 == self.pkts && self.ack_req;
        Some(p)
    }
}

/// Asynchronous events (`ibv_event_type` subset).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// The QP entered ERR because of a transport or local error (IBV_EVENT_QP_FATAL).
    Fatal,
    /// SQD drained (IBV_EVENT_SQ_DRAINED), if `en_sqd_async_notify` was set.
    SqDrained,
    /// A QP on an SRQ entered ERR: no more receive completions (IBV_EVENT_QP_LAST_WQE_REACHED).
    LastWqeReached,
}

/// A source of receive WQEs: the QP's own queue, or a shared receive queue the caller passes
/// to [`Qp::handle_packet`] (several QPs may draw from one).
pub trait RecvQueue {
    /// Take the next receive WQE.
    fn pop(&mut self) -> Option<RecvWr>;
    /// WQEs available (for the AETH credit count).
    fn len(&self) -> usize;
    /// Whether no WQE is available.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A simple shared receive queue.
#[derive(Debug, Default)]
pub struct Srq {
    wqes: VecDeque<RecvWr>,
    max_wr: usize,
    max_sge: usize,
}

impl Srq {
    /// An SRQ holding at most `max_wr` WQEs of at most `max_sge` SGEs.
    pub fn new(max_wr: u32, max_sge: u32) -> Srq {
        Srq {
            wqes: VecDeque::with_capacity(max_wr as usize),
            max_wr: max_wr as usize,
            max_sge: max_sge as usize,
        }
    }

    /// `ibv_post_srq_recv` for one WR.
    pub fn post(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if wr.sges.len() > self.max_sge {
            return Err(PostError::TooManySge);
        }
        if self.wqes.len() >= self.max_wr {
            return Err(PostError::QueueFull);
        }
        self.wqes.push_back(wr);
        Ok(())
    }
}

impl RecvQueue for Srq {
    fn pop(&mut self) -> Option<RecvWr> {
        self.wqes.pop_front()
    }
    fn len(&self) -> usize {
        self.wqes.len()
    }
}

impl RecvQueue for VecDeque<RecvWr> {
    fn pop(&mut self) -> Option<RecvWr> {
        self.pop_front()
    }
    fn len(&self) -> usize {
        VecDeque::len(self)
    }
}

/// A send WQE as the requester and completer track it.
#[derive(Debug)]
pub(crate) struct SendWqe {
    pub(crate) wr: SendWr,
    pub(crate) len: u32,
    pub(crate) signaled: bool,
    /// Assigned PSNs (valid once `started`).
    pub(crate) started: bool,
    pub(crate) first_psn: Psn,
    pub(crate) last_psn: Psn,
    /// Send sequence number (for end-to-end credits).
    pub(crate) ssn: Msn,
}

impl SendWqe {
    /// PSNs the message occupies: max(1, ceil(len / mtu)); READ reserves one per response
    /// packet, atomics one (docs/wire.md §1.6).
    pub(crate) fn npkts(&self, mtu: u32) -> u32 {
        if self.wr.opcode.is_atomic() {
            1
        } else {
            self.len.div_ceil(mtu).max(1)
        }
    }
}

/// Where a queued completion's slot is accounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Send,
    Recv,
    /// SRQ receive: the slot belongs to the SRQ, not this QP.
    None,
}

/// A receive WQE taken by the responder and where it came from.
#[derive(Debug)]
pub(crate) struct HeldRecv {
    pub(crate) wr: RecvWr,
    pub(crate) from_srq: bool,
}

/// A queue pair.
///
/// # Call-order contract
///
/// A `Qp` never reads a clock or does I/O; a driver (the device engine in
/// crates/nic/src/datapath.rs, the simulator in crates/sim) feeds it inputs and drains its
/// outputs. Every call takes effect at once and leaves the QP consistent, so any order is
/// safe; the contract is about what the driver must do after each call so that nothing
/// the QP produced is left waiting:
///
/// * [`Qp::modify`] (and [`Qp::set_selective_repeat`] / [`Qp::set_port_mtu`] before
///   connecting) moves the state machine. Entering ERR queues flush completions and
///   possibly [`QpEvent`]s; SQD may queue [`QpEvent::SqDrained`].
/// * [`Qp::post_send`] / [`Qp::post_recv`] queue work. A send WR may need a packet: call
///   [`Qp::poll_transmit`] afterwards. In ERR/SQE a WR completes at once (flushed): poll
///   completions. [`Qp::fail_send`] reports a WR the driver could not decode; it queues
///   completions and an event.
/// * [`Qp::handle_packet`] consumes one received packet (ICRC checked, demultiplexed to
///   this QP; the receive queue to use passed in for an SRQ or XRC target). It may queue
///   responses and CNPs to transmit, unblock requests (an ACK opens the window), queue
///   completions and events, and move deadlines. Afterwards call [`Qp::poll_transmit`]
///   until it returns `None`, drain [`Qp::poll_completion`] and [`Qp::poll_event`], and
///   re-read [`Qp::poll_timeout`].
/// * [`Qp::poll_transmit`] writes at most one packet into the caller's buffer (at least
///   [`Qp::max_packet_len`] bytes): a CNP first, then a response (responses release the
///   peer's resources), then a request (retransmissions before new packets). `None` means
///   nothing may go now: nothing queued, the window or credits are closed, an RNR wait
///   runs, or the DCQCN pacer holds the next packet (then [`Qp::poll_timeout`] names when).
///   Sending a request may complete an unreliable WR or fail one locally, so drain
///   completions after a transmit burst too. [`Qp::request_ack_next`], called just before
///   the last `poll_transmit` of a burst, sets AckReq on that packet.
/// * [`Qp::poll_timeout`] is the earliest instant [`Qp::handle_timeout`] has work: the
///   local ACK timeout, the retransmission (probe) timer, the end of an RNR wait, or the
///   pacer's next departure (that one is for [`Qp::poll_transmit`]: the driver calls it
///   after `handle_timeout`, as after any input). It changes after every other call, so the driver re-reads it
///   after each; a deadline it armed earlier may be stale (later or gone), so on firing it
///   checks `poll_timeout() <= now` before calling `handle_timeout`.
/// * [`Qp::handle_timeout`] fires the timers due at `now` (one not yet due is left
///   alone). It may start a retry — then [`Qp::poll_transmit`] has packets — or exhaust
///   the retry count, failing the front WR and entering ERR: drain completions and events.
/// * [`Qp::poll_completion`] yields send and receive completions in one ordered stream
///   ([`crate::Completion::is_recv`] says which CQ); each polled completion frees its queue
///   slot, so a full send or receive queue accepts posts again only after polling.
///
/// Every `now` comes from the driver's one monotonic clock.
#[derive(Debug)]
pub struct Qp {
    pub(crate) cfg: QpConfig,
    pub(crate) attr: QpAttr,

    /// Send queue: WQEs posted and not yet completed (rxe `qp->sq`). The requester walks it
    /// from [`Requester::cursor`], the completer retires it from the front.
    pub(crate) sq: SendRing,
    /// Receive queue (rxe `qp->rq`): filled by [`Qp::post_recv`], drained by the responder.
    pub(crate) rq: VecDeque<RecvWr>,
    /// Requester state (rxe `qp->req`).
    pub(crate) req: Requester,
    /// Completer state (rxe `qp->comp`).
    pub(crate) comp: Completer,
    /// Responder state (rxe `qp->resp`).
    pub(crate) resp: Responder,

    // ---- timers and loss recovery, armed by the requester, reloaded by the completer ----
    /// Congestion window, round-trip estimate and retransmission timer.
    pub(crate) rec: Recovery,
    /// Local ACK timeout (rxe `qp->retrans_timer`).
    pub(crate) retrans_deadline: Option<Time>,
    /// End of an RNR wait (rxe `qp->rnr_nak_timer`): the requester is stopped until then.
    pub(crate) rnr_until: Option<Time>,

    // ---- outputs ----
    pub(crate) completions: VecDeque<(Completion, Slot)>,
    pub(crate) send_slots_pending: usize,
    pub(crate) recv_slots_pending: usize,
    pub(crate) events: VecDeque<QpEvent>,
    /// SQD: the drain has been reported (or found complete).
    pub(crate) drain_reported: bool,
    pub(crate) counters: Counters,

    // ---- congestion control (dcqcn.rs) ----
    /// Reaction point: rate and pacer (`cfg.cc` set).
    pub(crate) cc: Option<Dcqcn>,
    /// The requester stopped for the pacer: its next departure is a deadline.
    pub(crate) paced: bool,
    /// Notification point: when the last CNP went, and whether one is due.
    pub(crate) cnp_gate: CnpGate,
    pub(crate) cnp_due: bool,
}

impl Qp {
    /// A QP in RESET.
    pub fn new(cfg: QpConfig) -> Qp {
        let caps = cfg.caps;
        let completions_max = caps.max_send_wr as usize + caps.max_recv_wr as usize + 1;
        let mut qp = Qp {
            cfg,
            attr: QpAttr::default(),
            sq: SendRing::with_capacity(caps.max_send_wr as usize),
            rq: VecDeque::with_capacity(caps.max_recv_wr as usize),
            req: Requester::default(),
            comp: Completer::default(),
            resp: Responder::default(),
            rec: Recovery::new(cfg.max_unacked_psns),
            retrans_deadline: None,
            rnr_until: None,
            completions: VecDeque::with_capacity(completions_max),
            send_slots_pending: 0,
            recv_slots_pending: 0,
            events: VecDeque::new(),
            drain_reported: false,
            counters: Counters::default(),
            cc: cfg.cc.map(Dcqcn::new),
            paced: false,
            cnp_gate: CnpGate::default(),
            cnp_due: false,
        };
        qp.rec.set_max(qp.window_limit());
        qp
    }

    /// This QP's number.
    pub fn qpn(&self) -> Qpn {
        self.cfg.qpn
    }

    /// RC, UC or UD.
    pub fn service(&self) -> Service {
        self.cfg.service
    }

    /// Current state.
    pub fn state(&self) -> QpState {
        self.attr.qp_state
    }

    /// The creation-time configuration.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }

    /// Change [`QpConfig::max_unacked_psns`] (the device knows the path: e.g. a lossless
    /// internal one between two processes of a device, docs/daemon.md §2.1). A window no
    /// loss has cut moves to the new limit.
    pub fn set_max_unacked_psns(&mut self, n: u32) {
        self.cfg.max_unacked_psns = n.max(1);
        self.rec.set_max(self.window_limit());
    }

    /// `ibv_query_qp`: current attributes (`qp_state` is the current state; `sq_psn` and
    /// `rq_psn` are the current [`Qp::sq_psn`] and [`Qp::rq_psn`], as rxe reports
    /// `req.psn` / `resp.psn`, not the values last written by `modify`).
    pub fn query(&self) -> QpAttr {
        let mut a = self.attr;
        a.cur_qp_state = a.qp_state;
        a.sq_draining = self.attr.qp_state == QpState::Sqd && self.sq_busy();
        a.sq_psn = self.sq_psn().value();
        a.rq_psn = self.rq_psn().value();
        a
    }

    /// The PSN of the next request packet the requester will send (rxe `req.psn`; it
    /// steps back to the oldest unacknowledged PSN while a retry resends).
    pub fn sq_psn(&self) -> Psn {
        self.req.next_psn
    }

    /// The responder's expected PSN (ePSN, rxe `resp.psn`): the next new request it
    /// accepts.
    pub fn rq_psn(&self) -> Psn {
        self.resp.epsn
    }

    /// The path MTU in bytes.
    pub fn path_mtu_bytes(&self) -> u32 {
        self.mtu()
    }

    /// The connected peer's QP number (RC/UC; `dest_qp_num` without copying the
    /// attributes as [`Qp::query`] does).
    pub fn dest_qpn(&self) -> Qpn {
        Qpn::new(self.attr.dest_qp_num)
    }

    /// The UD Q_Key.
    pub(crate) fn qkey(&self) -> wire::Qkey {
        wire::Qkey(self.attr.qkey)
    }

    /// Counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Path MTU in bytes.
    pub(crate) fn mtu(&self) -> u32 {
        self.attr.path_mtu.bytes()
    }

    /// Transmit buffer size that always suffices for [`Qp::poll_transmit`].
    pub fn max_packet_len(&self) -> usize {
        self.mtu() as usize + MAX_HEADER_LEN
    }

    /// Whether any started send WQE is not yet complete.
    pub(crate) fn sq_busy(&self) -> bool {
        self.sq.front().is_some_and(|w| w.started)
    }

    /// `ibv_modify_qp`. Implements the transition table and its masks exactly
    /// (docs/wire.md §6.2) and the side effects of each transition (rxe_qp.c).
    pub fn modify(&mut self, attr: &QpAttr, mask: QpAttrMask) -> Result<(), crate::ModifyError> {
        use crate::ModifyError as E;
        let cur = self.attr.qp_state;
        let next = match self.cfg.xrc {
            Some(role) => crate::state::check_modify_xrc(cur, role, attr, mask)?,
            None => check_modify(cur, self.cfg.service, attr, mask)?,
        };
        if cur == QpState::Sqd && self.sq_busy() && !matches!(next, QpState::Err | QpState::Reset) {
            return Err(E::Busy);
        }
        attr.check(mask, &ATTR_LIMITS).map_err(E::BadAttr)?;
        self.attr.apply(attr, mask);
        // What a stored attribute sets in motion.
        if mask.contains(QpAttrMask::MAX_DEST_RD_ATOMIC) {
            self.resp
                .resources
                .truncate(usize::from(attr.max_dest_rd_atomic));
        }
        if mask.contains(QpAttrMask::RETRY_CNT) {
            self.comp.retry_left = attr.retry_cnt;
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            self.comp.rnr_left = attr.rnr_retry;
        }
        if mask.contains(QpAttrMask::RQ_PSN) {
            self.resp.epsn = Psn::new(attr.rq_psn);
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            let psn = Psn::new(attr.sq_psn);
            self.req.next_psn = psn;
            self.req.sent_high = psn;
            self.comp.unacked = psn;
            self.rec.una = psn;
        }

        match next {
            QpState::Reset => self.reset(),
            QpState::Err => self.enter_error(false),
            QpState::Sqd => {
                self.attr.qp_state = QpState::Sqd;
                self.check_drained();
            }
            s => self.attr.qp_state = s,
        }
        Ok(())
    }

    /// Turn selective repeat (docs/wire.md §5.6, [`QpConfig::selective_repeat`]) on or off.
    /// Only in RESET or INIT, before the QP exchanges packets, and only for an RC QP that is
    /// not XRC; otherwise `Err(ModifyError::InvalidValue)` and nothing changes. The caller turns it on only when the peer agreed to it.
    pub fn set_selective_repeat(&mut self, on: bool) -> Result<(), crate::ModifyError> {
        if !matches!(self.attr.qp_state, QpState::Reset | QpState::Init) {
            return Err(crate::ModifyError::InvalidValue(
                "selective repeat changes only in RESET or INIT",
            ));
        }
        if on && (self.cfg.service != Service::Rc || self.cfg.xrc.is_some()) {
            return Err(crate::ModifyError::InvalidValue(
                "selective repeat is for RC QPs that are not XRC",
            ));
        }
        self.cfg.selective_repeat = on;
        // The window's limit follows (requester.rs `window_limit`).
        self.rec.set_max(self.window_limit());
        Ok(())
    }

    /// Whether selective repeat is on ([`Qp::set_selective_repeat`]).
    pub fn selective_repeat(&self) -> bool {
        self.sr_active()
    }

    /// RESET: discard everything without completions (docs/wire.md §6.2 notes).
    fn reset(&mut self) {
        let cfg = self.cfg;
        let counters = self.counters;
        *self = Qp::new(cfg);
        self.counters = counters;
    }

    /// `ibv_post_send` for one WR. Validation failures are returned (EINVAL/ENOMEM at the
    /// edge); in ERR (and SQE) the WR is accepted and completes with `WR_FLUSH_ERR`.
    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        self.post_send_with(|slot| {
            *slot = wr;
            Ok::<(), std::convert::Infallible>(())
        })
        .unwrap_or_else(|never| match never {})
    }

    /// [`Qp::post_send`] for a WR that `fill` writes straight into its place in the send
    /// queue (a `SendWr` with inline data is a few hundred bytes: a device that takes WQEs
    /// from a ring at millions per second should not copy each several times). `fill` gets
    /// a WR with `SendWr::new(0, Send)`'s fields, except that its `local` may keep the form
    /// and storage of an earlier WR's, emptied (the slot is reused: `crate::sq`), so `fill`
    /// sets `local`; if it fails, nothing was posted and its error is returned.
    pub fn post_send_with<E>(
        &mut self,
        fill: impl FnOnce(&mut SendWr) -> Result<(), E>,
    ) -> Result<Result<(), PostError>, E> {
        let state = self.attr.qp_state;
        if matches!(state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Ok(Err(PostError::InvalidState));
        }
        if self.sq.len() + self.send_slots_pending >= self.cfg.caps.max_send_wr as usize {
            return Ok(Err(PostError::QueueFull));
        }
        let filled = fill(&mut self.sq.push_back().wr);
        if let Err(e) = filled {
            self.sq.pop_back();
            return Err(e);
        }
        let checked = match self.sq.back() {
            Some(w) => self.check_send_wr(&w.wr),
            None => Err(PostError::QueueFull),
        };
        let len = match checked {
            Ok(len) => len,
            Err(e) => {
                self.sq.pop_back();
                return Ok(Err(e));
            }
        };
        let sig_all = self.cfg.caps.sq_sig_all;
        if let Some(w) = self.sq.back_mut() {
            w.len = len as u32;
            w.signaled = sig_all || w.wr.flags.contains(SendFlags::SIGNALED);
        }
        if matches!(state, QpState::Err | QpState::Sqe) {
            if let Some(wqe) = self.sq.pop_back() {
                self.complete_send(&wqe, TransportError::Flushed.wc_status());
            }
        }
        Ok(Ok(()))
    }

    /// The checks `ibv_post_send` makes of one WR (opcode for the QP type, SGE count,
    /// inline size, lengths, UD destination); the message length if it passes.
    fn check_send_wr(&self, wr: &SendWr) -> Result<u64, PostError> {
        let ty = self.cfg.service;
        let op = wr.opcode;
        let op_ok = op.is_implemented()
            && match ty {
                Service::Rc => true,
                // rxe: local operations on RC and UC QPs (`rxe_wr_opcode_info`).
                Service::Uc => matches!(
                    op,
                    WrOpcode::Send
                        | WrOpcode::SendWithImm
                        | WrOpcode::RdmaWrite
                        | WrOpcode::RdmaWriteWithImm
                        | WrOpcode::LocalInv
                        | WrOpcode::BindMw
                ),
                Service::Ud => matches!(op, WrOpcode::Send | WrOpcode::SendWithImm),
            };
        if !op_ok {
            return Err(PostError::BadOpcode);
        }
        match &wr.local {
            crate::LocalData::Sges(l) => {
                if l.len() > self.cfg.caps.max_send_sge as usize {
                    return Err(PostError::TooManySge);
                }
            }
            crate::LocalData::Inline(_) | crate::LocalData::InlineData(_) => {
                let n = wr.local.len();
                if n > u64::from(self.cfg.caps.max_inline_data) {
                    return Err(PostError::InlineTooLong);
                }
                if op.is_read_or_atomic() {
                    // READ and atomic results need a registered destination.
                    return Err(PostError::BadOpcode);
                }
            }
        }
        let len = wr.local.len();
        if op.is_local() && len != 0 {
            // A local operation moves no data.
            return Err(PostError::BadLength);
        }
        if len > MAX_MSG_LEN {
            return Err(PostError::BadLength);
        }
        if op.is_atomic() && len != 8 {
            return Err(PostError::BadLength);
        }
        if ty == Service::Ud {
            if wr.ud.is_none() {
                return Err(PostError::BadDestination);
            }
            if len > u64::from(self.mtu()) {
                return Err(PostError::BadLength);
            }
        } else if wr.ud.is_some() {
            return Err(PostError::BadDestination);
        }
        Ok(len)
    }

    /// A send WR the caller took from its queue but could not turn into a [`SendWr`] (a
    /// malformed WQE, rxe `req_error`): move the QP to ERR — flushing every earlier send
    /// WR with `WR_FLUSH_ERR` and raising [`QpEvent::Fatal`] unless already in ERR — then
    /// complete this one with `status` (always, even if it was unsignaled: IBA 10.7.3.1),
    /// all in the QP's one ordered completion stream. `opcode` is the WR's, if known
    /// (otherwise the completion says SEND).
    pub fn fail_send(&mut self, wr_id: u64, opcode: Option<WrOpcode>, status: WcStatus) {
        if !matches!(self.attr.qp_state, QpState::Err) {
            self.enter_error(true);
        }
        let c = Completion {
            wr_id,
            status,
            opcode: opcode.map_or(WcOpcode::Send, WrOpcode::wc_opcode),
            vendor_err: 0,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: self.cfg.qpn,
            src_qp: self.dest_qpn(),
            wc_flags: WcFlags::default(),
            solicited: false,
        };
        self.send_slots_pending += 1;
        self.completions.push_back((c, Slot::Send));
    }

    /// `ibv_post_recv` for one WR (QPs without an SRQ). Accepted from INIT on; in ERR the WR
    /// completes with `WR_FLUSH_ERR`.
    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.cfg.uses_srq || self.attr.qp_state == QpState::Reset {
            return Err(PostError::InvalidState);
        }
        if wr.sges.len() > self.cfg.caps.max_recv_sge as usize {
            return Err(PostError::TooManySge);
        }
        if self.rq.len() + self.recv_slots_pending >= self.cfg.caps.max_recv_wr as usize {
            return Err(PostError::QueueFull);
        }
        if self.attr.qp_state == QpState::Err {
            self.flush_recv(wr, false);
            return Ok(());
        }
        self.rq.push_back(wr);
        Ok(())
    }

    /// Receive WQEs posted and not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    /// Send WRs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.len()
    }

    /// Send WRs posted and not yet sent in full (the one being sent counts; after a
    /// rewind for retransmission, so do the ones to send again).
    pub fn unsent_sends(&self) -> usize {
        self.sq.len().saturating_sub(self.req.cursor)
    }

    /// Packets the newest send WR posted takes at the path MTU (1 with none queued).
    pub fn newest_send_pkts(&self) -> u32 {
        self.sq.back().map_or(1, |w| w.npkts(self.mtu()))
    }

    /// Whether the QP has work it is waiting on the network for (sent, unacknowledged
    /// requests, or responses queued).
    pub fn has_outstanding(&self) -> bool {
        self.sq_busy() || !self.resp.responses.is_empty() || self.resp.last_gasp.is_some()
    }

    /// Next completion (send and receive completions share this queue in order;
    /// [`Completion::is_recv`] says which CQ it belongs to).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        let (c, slot) = self.completions.pop_front()?;
        match slot {
            Slot::Send => self.send_slots_pending -= 1,
            Slot::Recv => self.recv_slots_pending -= 1,
            Slot::None => {}
        }
        Some(c)
    }

    /// Next asynchronous event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// The earliest time [`Qp::handle_timeout`] has something to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        [
            self.retrans_deadline,
            self.rnr_until,
            self.rec.probe_deadline,
            self.cc
                .as_ref()
                .filter(|_| self.paced)
                .and_then(Dcqcn::next_departure),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Feed a received packet (already demultiplexed to this QP; the ICRC already checked).
    ///
    /// `srq` is the shared receive queue for QPs created with `uses_srq`. Every memory access
    /// goes through `mem`; nothing here can panic on hostile input.
    pub fn handle_packet<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        pkt: &RocePacketRepr<'_>,
        meta: &RxMeta,
        mem: &mut M,
        srq: Option<&mut dyn RecvQueue>,
    ) {
        let Some(info) = pkt.bth.opcode.info() else {
            self.counters.dropped_pkts += 1;
            return;
        };
        if pkt.bth.opcode == Opcode::CNP {
            self.counters.rcvd_cnp += 1;
            // Reaction point (docs/wire.md §11.3): a connected QP sending requests.
            let mtu = u64::from(self.mtu());
            if let Some(cc) = self.cc.as_mut() {
                if self.cfg.service != Service::Ud
                    && matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd)
                {
                    // What the path delivers: the bytes in flight over the round trip.
                    let flight = u64::from(self.req.next_psn.diff(self.comp.unacked).max(0) as u32);
                    let hint = self.rec.srtt_ns().filter(|_| flight > 0).map(|rtt| {
                        let bytes = flight * (mtu + 64);
                        u64::try_from(u128::from(bytes) * 8_000_000_000 / u128::from(rtt.max(1)))
                            .unwrap_or(u64::MAX)
                    });
                    cc.on_cnp_with_hint(now, hint);
                    self.counters.rp_cnp_handled += 1;
                    return;
                }
            }
            self.counters.rp_cnp_ignored += 1;
            return;
        }
        // The headers must be the ones the opcode says (a Repr built by hand may lie).
        if pkt.validate().is_err() || pkt.bth.dest_qp != self.cfg.qpn {
            self.counters.dropped_pkts += 1;
            return;
        }
        let want = match self.cfg.service {
            Service::Rc if self.cfg.xrc.is_some() => Transport::Xrc,
            Service::Rc => Transport::Rc,
            Service::Uc => Transport::Uc,
            Service::Ud => Transport::Ud,
        };
        if info.transport != want {
            self.counters.dropped_pkts += 1;
            return;
        }
        let state = self.attr.qp_state;
        if meta.ce && state != QpState::Reset && state != QpState::Init {
            self.note_ce(now);
        }
        if info.is_request {
            if !matches!(
                state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            ) {
                self.counters.dropped_pkts += 1;
                return;
            }
            self.counters.rcvd_pkts += 1;
            self.responder_handle(now, pkt, info, meta, mem, srq);
        } else {
            if !matches!(state, QpState::Rts | QpState::Sqd) || self.cfg.service != Service::Rc {
                self.counters.dropped_pkts += 1;
                return;
            }
            self.counters.rcvd_pkts += 1;
            self.completer_handle(now, pkt, info, mem);
        }
        self.check_drained();
    }

    /// Fire whatever timers are due at `now` (local ACK timeout, end of an RNR wait).
    pub fn handle_timeout(&mut self, now: Time) {
        self.requester_timeout(now);
        self.check_drained();
    }

    /// The caller will not ask for another packet for a while — its turn ends, its wire
    /// is full — so the next request packet carries AckReq (IBTA Vol 1 §9.2.3: a requester
    /// may set it on any packet). What the turn sent is then acknowledged at once instead
    /// of after the rest of the message, which may leave only when this QP's next turn
    /// comes: with many busy QPs sharing a device, later than the retransmission timer.
    pub fn request_ack_next(&mut self) {
        self.req.ack_req_next = true;
    }

    /// Build requests as their headers ([`Transmit::hdr`]) instead of bytes until said
    /// otherwise: for a receiver that takes the parsed headers (a QP of the same device),
    /// which saves writing them and parsing them back. Responses are always bytes.
    pub fn set_headers_only(&mut self, on: bool) {
        self.req.headers_only = on;
    }

    /// Build the next packet into `buf` (at least [`Qp::max_packet_len`] bytes). Responses
    /// go first (they release the peer's resources), then requests. Returns `None` when
    /// there is nothing to send now.
    pub fn poll_transmit<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.poll_transmit_run(now, mem, buf, 1)
    }

    /// Whether the request at the head of the send queue could leave as a [`Run`] now (a
    /// hint for choosing a buffer before [`Qp::poll_transmit_run`]; responses still go
    /// first).
    pub fn run_ready(&self) -> bool {
        self.run_len(u32::MAX, usize::MAX) >= 2
    }

    /// [`Qp::poll_transmit`], except that the next request may leave as a [`Run`] of up to
    /// `max_pkts` packets of one message when nothing needs them one by one (an RC WRITE or
    /// SEND, new PSNs, room in the window, no pacing, no selective repeat; see
    /// `Qp::run_len`); `buf` must then hold the run's payload too. The receiving QP must
    /// be given it with [`Qp::handle_run`], or its packets ([`Run::packet`]) one by one.
    pub fn poll_transmit_run<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        mem: &mut M,
        buf: &mut [u8],
        max_pkts: u32,
    ) -> Option<Transmit> {
        if self.cnp_due {
            self.cnp_due = false;
            if let Some(t) = self.build_cnp(buf) {
                self.counters.sent_pkts += 1;
                self.counters.np_cnp_sent += 1;
                return Some(t);
            }
        }
        // READ responses are this QP's data toward the peer as much as its requests are: the
        // same DCQCN pacer spaces them (docs/wire.md §11.3). ACKs are not paced; one queued
        // behind a waiting READ response waits with it (responses leave in PSN order).
        let read_next = self.read_response_next();
        if read_next && self.cc.as_mut().is_some_and(|cc| !cc.may_send(now)) {
            self.paced = true;
            return None;
        }
        let t = match self.responder_transmit(mem, buf) {
            Some(t) => {
                if let (true, Some(cc)) = (read_next, self.cc.as_mut()) {
                    cc.on_sent(now, t.len + wire::icrc::ICRC_LEN);
                }
                Some(t)
            }
            None => {
                let t = self.requester_transmit(now, mem, buf, max_pkts);
                if let (Some(t), Some(cc)) = (&t, self.cc.as_mut()) {
                    cc.on_sent(now, t.wire_len());
                }
                t
            }
        };
        if let Some(t) = &t {
            self.counters.sent_pkts += u64::from(t.pkts());
        }
        self.check_drained();
        t
    }

    /// Notification point (docs/wire.md §11.2): a CE-marked RoCEv2 packet for this QP. A
    /// connected QP owes its peer QP a CNP unless it sent one within
    /// `min_time_between_cnps_ns` (UD QPs are not notification points: the CNP would need an
    /// address handle for the sender).
    fn note_ce(&mut self, now: Time) {
        self.counters.np_ecn_marked_roce_packets += 1;
        let Some(p) = self.cfg.cc else {
            return;
        };
        if self.cfg.service == Service::Ud {
            return;
        }
        if self.cnp_gate.allow(now, p.min_time_between_cnps_ns) {
            self.cnp_due = true;
        }
    }

    /// A CNP to the peer QP (IBTA RoCEv2 Annex A17.9.3; docs/wire.md §11.2): BTH with opcode
    /// 0x81, the B bit set, P_Key of the QP, PSN 0, then 16 reserved zero bytes (the caller
    /// appends the ICRC).
    fn build_cnp(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let dest = self.dest_qpn();
        let mut bth = wire::BthRepr::new(Opcode::CNP, dest, wire::Psn::new(0));
        bth.pkey = self.cfg.pkey;
        bth.becn = true;
        let pkt = wire::RocePacketRepr::new(bth, &[]);
        let len = crate::packet::finish_in_place(&pkt, 0, buf)?;
        Some(Transmit {
            len,
            ah: None,
            dest_qpn: dest,
            run: None,
            hdr: None,
        })
    }

    // ---------------------------------------------------------------------------------------
    // Completions, errors and flushes (docs/wire.md §6.3, IBA 10.7.3.1)

    pub(crate) fn complete_send(&mut self, wqe: &Retired, status: WcStatus) {
        // Unsignaled WRs complete silently unless they fail (IBA 10.7.3.1).
        if status == WcStatus::Success && !wqe.signaled {
            return;
        }
        let mut flags = WcFlags::default();
        let imm = if wqe.opcode.has_imm() {
            flags |= WcFlags::WITH_IMM;
            Some(wqe.imm_data)
        } else {
            None
        };
        let c = Completion {
            wr_id: wqe.wr_id,
            status,
            opcode: wqe.opcode.wc_opcode(),
            vendor_err: 0,
            byte_len: wqe.len,
            imm_data: imm,
            invalidated_rkey: None,
            qp_num: self.cfg.qpn,
            src_qp: wqe.ud_qpn.unwrap_or_else(|| self.dest_qpn()),
            wc_flags: flags,
            solicited: false,
        };
        self.send_slots_pending += 1;
        self.completions.push_back((c, Slot::Send));
    }

    pub(crate) fn complete_recv(&mut self, held: HeldRecv, c: Completion) {
        let slot = if held.from_srq {
            Slot::None
        } else {
            Slot::Recv
        };
        if slot == Slot::Recv {
            self.recv_slots_pending += 1;
        }
        self.completions.push_back((c, slot));
    }

    fn flush_recv(&mut self, wr: RecvWr, from_srq: bool) {
        let c = self.recv_completion(
            wr.wr_id,
            TransportError::Flushed.wc_status(),
            WcOpcode::Recv,
        );
        self.complete_recv(HeldRecv { wr, from_srq }, c);
    }

    pub(crate) fn recv_completion(&self, wr_id: u64, status: WcStatus, op: WcOpcode) -> Completion {
        Completion {
            wr_id,
            status,
            opcode: op,
            vendor_err: 0,
            byte_len: 0,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: self.cfg.qpn,
            src_qp: self.dest_qpn(),
            wc_flags: WcFlags::default(),
            solicited: false,
        }
    }

    /// The front send WQE failed with `err`: complete it (always, even if unsignaled),
    /// then move the QP to ERR (RC) or SQE (UC/UD) and flush the rest.
    pub(crate) fn fail_front(&mut self, err: TransportError) {
        if let Some(wqe) = self.sq.pop_front() {
            self.complete_send(&wqe, err.wc_status());
        }
        match self.cfg.service {
            Service::Rc => self.enter_error(true),
            Service::Uc | Service::Ud => self.enter_sq_error(),
        }
    }

    /// UC/UD send-side error: flush the send queue, keep receiving (SQE).
    fn enter_sq_error(&mut self) {
        while let Some(w) = self.sq.pop_front() {
            self.complete_send(&w, TransportError::Flushed.wc_status());
        }
        self.req.cursor = 0;
        self.retrans_deadline = None;
        self.rec.probe_deadline = None;
        self.rnr_until = None;
        self.attr.qp_state = QpState::Sqe;
        self.events.push_back(QpEvent::Fatal);
    }

    /// Enter ERR: flush every send and (own) receive WR with `WR_FLUSH_ERR`, drop timers and
    /// queued responses (except a pending final NAK), stop processing packets.
    pub(crate) fn enter_error(&mut self, fatal: bool) {
        if self.attr.qp_state == QpState::Err {
            return;
        }
        self.attr.qp_state = QpState::Err;
        while let Some(w) = self.sq.pop_front() {
            self.complete_send(&w, TransportError::Flushed.wc_status());
        }
        self.req.cursor = 0;
        self.req.rd_atomic_outstanding = 0;
        self.retrans_deadline = None;
        self.rec.probe_deadline = None;
        self.rnr_until = None;
        if let Some(h) = self.resp.held.take() {
            self.flush_recv(h.wr, h.from_srq);
        }
        while let Some(wr) = self.rq.pop_front() {
            self.flush_recv(wr, false);
        }
        self.resp.in_msg = None;
        self.resp.responses.clear();
        self.resp.sr_rx.clear();
        self.req.sr_tx = crate::sr::SrSend::default();
        if fatal {
            self.events.push_back(QpEvent::Fatal);
        }
        if self.cfg.uses_srq {
            self.events.push_back(QpEvent::LastWqeReached);
        }
    }

    /// SQD: once nothing is in flight, report the drain (once).
    pub(crate) fn check_drained(&mut self) {
        if self.attr.qp_state != QpState::Sqd {
            self.drain_reported = false;
            return;
        }
        if !self.drain_reported && !self.sq_busy() {
            self.drain_reported = true;
            if self.attr.en_sqd_async_notify {
                self.events.push_back(QpEvent::SqDrained);
            }
        }
    }
}

/// Convenience: the attributes and masks for the usual RESET→INIT→RTR→RTS bring-up of a
/// connected or UD QP, as a test or the simulator uses it.
pub fn bring_up(
    qp: &mut Qp,
    dest_qpn: Qpn,
    rq_psn: Psn,
    sq_psn: Psn,
    mtu: Mtu,
    attr_in: &QpAttr,
) -> Result<(), crate::ModifyError> {
    let ty = qp.service();
    let mut a = *attr_in;
    a.qp_state = QpState::Init;
    let init_mask = match ty {
        Service::Ud => {
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY
        }
        _ => {
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS
        }
    };
    qp.modify(&a, init_mask)?;
    a.qp_state = QpState::Rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn.value();
    a.rq_psn = rq_psn.value();
    let rtr_mask = match ty {
        Service::Rc => {
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER
        }
        Service::Uc => {
            QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
        }
        Service::Ud => QpAttrMask::STATE,
    };
    qp.modify(&a, rtr_mask)?;
    if ty == Service::Ud {
        // UD has no PATH_MTU attribute in the table; the port MTU applies.
        qp.set_port_mtu(mtu);
    }
    a.qp_state = QpState::Rts;
    a.sq_psn = sq_psn.value();
    let rts_mask = match ty {
        Service::Rc => {
            QpAttrMask::STATE
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::SQ_PSN
                | QpAttrMask::MAX_QP_RD_ATOMIC
        }
        _ => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
    };
    qp.modify(&a, rts_mask)
}

impl Qp {
    /// Set the MTU a UD QP uses (the port's active MTU; UD has no path MTU attribute).
    pub fn set_port_mtu(&mut self, mtu: Mtu) {
        if self.cfg.service == Service::Ud {
            self.attr.path_mtu = mtu;
        }
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Qp>();
}
