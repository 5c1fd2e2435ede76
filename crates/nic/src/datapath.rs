//! The device's datapath, sans I/O: doorbells → WQEs → transport → DMA with protection
//! checks → CQEs, received packets → demultiplexing → transport, timers, same-device
//! loopback and packet rings (docs/architecture.md §4).
//!
//! Nothing here owns a thread, a socket or a clock. Its driver (`crate::engine`: the
//! engine thread or an application thread doing the engine's work) reads the clock and
//! hands in the time, hands in each datagram the socket received
//! ([`handle_datagram`]), and takes the datagrams to send from [`Queues::txq`], sealed
//! with their ICRC for the IPv4 Identification the socket will give them. Application
//! memory is reached only through `crate::dma` (registered memory, the ring and doorbell
//! pages); another process of a daemon's device only through its packet ring
//! (`crate::peer_ring`, whose wake-up of a parked consumer is that corner's one system
//! call).
//!
//! The steps of a pass, in the order the driver calls them:
//! 1. [`drain_doorbells`]: each set bit of a context's doorbell bitmap names an SQ whose QP
//!    joins the ready queue (the cost is the bitmap's words, never the number of QPs);
//! 2. the driver's receive, each datagram through [`handle_datagram`] (ICRC verified as far
//!    as a UDP socket allows, demultiplexed by destination QPN), and [`receive_rings`];
//! 3. [`fire_timers`]: the transport deadlines that are due;
//! 4. [`send_gsi`], then [`work`]: deliver internal-loopback packets; for each ready QP pull
//!    WQEs from its SQ ring into the transport, let it transmit (bounded), free the SQ
//!    slots it retired, write its completions into the CQ rings and post its events;
//! 5. [`flush_rings`] and the driver's send of [`Queues::txq`].

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use abi::fastpath::{SendPayload, SendWqe, WqeLimits, SEND_WQE_HDR_BYTES};
use transport::wire::icrc::{self, ICRC_LEN};
use transport::wire::ip::{IpRepr, UdpRepr, IPV4_HEADER_LEN, IPV6_HEADER_LEN};
use transport::wire::{Qkey, Qpn, Rkey, RocePacketRepr, ROCE_V2_PORT};
use transport::{
    Grh, PostError, QpAttr, QpAttrMask, QpEvent, QpState, ReqHeaders, Run, RxMeta, SendFlags,
    SendWr, Service, Time, Transmit, UdDest, WcStatus, WrOpcode,
};
use zerocopy::FromBytes;

use crate::state::*;

/// Packet buffer: the largest path MTU, the longest header, the ICRC.
const PKT_BUF: usize = 4096 + transport::MAX_HEADER_LEN + ICRC_LEN + 16;
/// Packets taken from one peer ring per pass.
const RING_BUDGET: u32 = 256;
/// Packets one QP may build per service before others get a turn.
const TX_BUDGET: usize = 64;
/// UDP datagrams queued before QPs stop transmitting (socket back-pressure).
const TXQ_MAX: usize = 1024;
/// Loopback packets delivered per round.
const LOOP_BUDGET: usize = 512;
/// Same-device packets queued before QPs stop transmitting: the internal loopback is a
/// wire with a bounded buffer. Unbounded, a thousand QPs each sending a window at once
/// queue tens of thousands of packets ahead of every ACK; the round trip then outgrows
/// the retransmission timeout and the device spends its time resending what is queued.
const LOOPQ_MAX: usize = 1024;
/// Payload bytes of the largest run of packets a QP sends another QP of this device as one
/// (`transport::Run`; docs/architecture.md §4): 64 packets at MTU 1024.
const RUN_BYTES: usize = 64 * 1024;
/// A run's buffer: its payload and the longest header.
const RUN_BUF: usize = RUN_BYTES + PKT_BUF;
/// Rounds of (loopback, ready QPs) per pass.
const ROUNDS: usize = 8;

/// Bytes of a send WQE [`pull_sq`] reads at first: the header and what most WQEs carry
/// after it (up to four SGEs or 64 inline bytes). The rest of its slot is read only if the
/// header says it is used.
const SEND_WQE_FIRST_READ: usize = SEND_WQE_HDR_BYTES + 64;
/// Largest send WQE the engine reads: header + 32 SGEs.
const SEND_WQE_MAX: usize = SEND_WQE_HDR_BYTES + 32 * 16;

/// A datagram waiting for the socket: `buf[..len]` (BTH .. ICRC) to `dst`, its ICRC computed
/// for IPv4 Identification `ident` (0, unless a GSO send will number it: `flush_tx`).
#[derive(Debug)]
pub(crate) struct Datagram {
    pub(crate) buf: Vec<u8>,
    pub(crate) len: usize,
    pub(crate) dst: SocketAddr,
    pub(crate) ident: u16,
}

impl Datagram {
    pub(crate) fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// Make the ICRC (IPv4) the one for Identification `ident`.
    pub(crate) fn set_ident(&mut self, ident: u16) {
        if ident == self.ident || !self.dst.is_ipv4() || self.len < ICRC_LEN {
            return;
        }
        let t = self.len - ICRC_LEN;
        if let Some(tail) = self.buf.get_mut(t..self.len) {
            let crc = icrc::v4_with_ident(icrc::read_icrc(tail), t, self.ident, ident);
            tail.copy_from_slice(&icrc::icrc_wire_bytes(crc));
            self.ident = ident;
        }
    }
}

/// A same-device packet (or run) waiting for delivery: `buf[..len]`, its payload left in
/// the source MRs (`deferred`), the run it stands for (`None`: one packet), and its headers
/// when it was built as headers only (`transport::Qp::set_headers_only`; the buffer then
/// holds only the payload, after where they would be).
#[derive(Debug)]
pub(crate) struct LoopPkt {
    buf: Vec<u8>,
    len: usize,
    deferred: DeferList,
    run: Option<Run>,
    hdr: Option<ReqHeaders>,
}

impl LoopPkt {
    fn dest_qpn(&self) -> u32 {
        match &self.hdr {
            Some(h) => h.bth.dest_qp.value(),
            None => bth_dest_qpn(&self.buf),
        }
    }
}

/// Write the headers (and pad) of a request built as headers only into `buf`, which holds
/// its payload where it follows them: the bytes it would have been built as.
fn write_out(h: &ReqHeaders, len: usize, buf: &mut [u8]) -> bool {
    transport::finish_in_place(&h.repr(&[]), h.payload_len(len), buf).is_some()
}

/// The datapath's per-device queues and buffers, kept by its driver beside the device
/// lock (only the driver holding the device's I/O state touches them).
#[derive(Debug)]
pub(crate) struct Queues {
    pool: Vec<Vec<u8>>,
    /// Buffers for runs ([`RUN_BUF`] bytes).
    run_pool: Vec<Vec<u8>>,
    /// Same-device packets.
    pub(crate) loopq: VecDeque<LoopPkt>,
    /// Packets in `loopq` (a run counts as its packets).
    loopq_pkts: usize,
    /// Datagrams for the socket, each sealed with its ICRC.
    pub(crate) txq: VecDeque<Datagram>,
    /// Packets for peer rings that were full: (slot, buffer, length, run), in order.
    pub(crate) ring_backlog: VecDeque<(u32, Vec<u8>, usize, Option<Run>)>,
    /// Scratch for packets read from peer rings.
    ring_rx: Vec<u8>,
    /// When an application thread last held back ACKs (`Time(0)`: never).
    pub(crate) ring_seen: Time,
    /// The device's capture point (`crate::tap`; `UROCE_CAPTURE` or an attached `uroce
    /// capture`): one relaxed load per packet when nobody captures ([`Queues::tap`]).
    pub(crate) tap: Arc<crate::tap::Tap>,
}

impl Queues {
    pub(crate) fn new(tap: Arc<crate::tap::Tap>) -> Queues {
        Queues {
            pool: Vec::new(),
            run_pool: Vec::new(),
            loopq: VecDeque::new(),
            loopq_pkts: 0,
            txq: VecDeque::new(),
            ring_backlog: VecDeque::new(),
            ring_rx: Vec::new(),
            ring_seen: Time(0),
            tap,
        }
    }

    /// The capture point if anything captures this device.
    #[inline]
    pub(crate) fn tap(&self) -> Option<&crate::tap::Tap> {
        self.tap.active().then_some(&*self.tap)
    }

    pub(crate) fn take_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_else(|| vec![0u8; PKT_BUF])
    }

    fn take_run_buf(&mut self) -> Vec<u8> {
        self.run_pool.pop().unwrap_or_else(|| vec![0u8; RUN_BUF])
    }

    pub(crate) fn put_buf(&mut self, b: Vec<u8>) {
        if b.len() > PKT_BUF {
            self.run_pool.push(b);
        } else {
            self.pool.push(b);
        }
    }

    /// Queue a same-device packet (or run) for delivery.
    fn push_loop(
        &mut self,
        buf: Vec<u8>,
        len: usize,
        deferred: &DeferList,
        run: Option<Run>,
        hdr: Option<ReqHeaders>,
    ) {
        self.loopq_pkts += Run::pkts_of(run) as usize;
        self.loopq.push_back(LoopPkt {
            buf,
            len,
            deferred: *deferred,
            run,
            hdr,
        });
    }

    /// Whether `more` packets would leave a queue toward the wire at its bound.
    pub(crate) fn backlogged_after(&self, more: usize) -> bool {
        self.txq.len() + more >= TXQ_MAX
            || self.ring_backlog.len() + more >= TXQ_MAX
            || self.loopq_pkts + more >= LOOPQ_MAX
    }

    pub(crate) fn backlogged(&self) -> bool {
        self.backlogged_after(0)
    }
}

/// Deliver internal-loopback packets and serve ready QPs, in up to [`ROUNDS`] rounds of
/// (loopback queue, ready queue); `clock` is read for each QP served (a deadline the
/// transport arms as it builds a packet counts from when the packet leaves). Returns
/// whether anything happened.
pub(crate) fn work(st: &mut DevState, io: &mut Queues, mut clock: impl FnMut() -> Time) -> bool {
    let mut progress = false;
    let now = clock();
    for _ in 0..ROUNDS {
        let mut did = false;
        for _ in 0..LOOP_BUDGET {
            // Delivered in place, then taken off the queue (its payload list stays put).
            let Some(p) = io.loopq.front() else {
                break;
            };
            let run = p.run;
            // With many QPs, the next packet's QP is out of the near caches: start
            // loading its state while this packet is delivered (not when it is this one's).
            if let Some(next) = io.loopq.get(1) {
                let (this_qpn, next_qpn) = (p.dest_qpn(), next.dest_qpn());
                if next_qpn != this_qpn {
                    if let Some(q) = st.qps.get(next_qpn) {
                        crate::dma::prefetch(q, std::mem::size_of::<QpObj>());
                    }
                }
            }
            if let Some(bytes) = p.buf.get(..p.len) {
                deliver_loopback(st, bytes, p.hdr.as_ref(), &p.deferred, run, now);
            }
            io.loopq_pkts = io.loopq_pkts.saturating_sub(Run::pkts_of(run) as usize);
            if let Some(p) = io.loopq.pop_front() {
                io.put_buf(p.buf);
            }
            did = true;
        }
        let n = st.ready.len();
        for _ in 0..n {
            // With the wire full, the rest wait for the next round (the loopback queue
            // drains at its head): visiting them now would only find it full.
            if io.backlogged() {
                did = true;
                break;
            }
            let Some(idx) = st.ready.pop_front() else {
                break;
            };
            match st.qps.get_mut(idx) {
                Some(q) => q.in_ready = false,
                None => continue,
            }
            did |= service_qp(st, io, idx, clock());
        }
        if !did {
            break;
        }
        progress = true;
    }
    progress
}

pub(crate) fn drain_doorbells(st: &mut DevState) -> bool {
    let DevState {
        res, qps, ready, ..
    } = st;
    let mut rung = 0u32;
    let fast = crate::trace::fast_on();
    for cx in res.ctxs.values() {
        let r = cx.doorbells.drain(|slot| {
            if let Some(Some(q)) = cx.db_slots.get(slot as usize) {
                if fast {
                    let qpn = qps.get(*q).map_or(0, |o| o.qp.qpn().value());
                    crate::trace::fast(&res.dev_name, || {
                        format!("DOORBELL slot={slot} qpn={qpn:#x}")
                    });
                }
                make_ready(qps, ready, *q);
            }
        });
        rung += r.unwrap_or(0);
    }
    rung > 0
}

/// Receives posted to a QP in ERR flush; look for new ones (no doorbell announces them).
pub(crate) fn check_err_rqs(st: &mut DevState) {
    if st.err_rqs.is_empty() {
        return;
    }
    let mut i = 0;
    while let Some(&idx) = st.err_rqs.get(i) {
        let keep = match st.qps.get_mut(idx) {
            Some(q) if q.in_err_list && q.qp.state() == QpState::Err => {
                let pending =
                    q.rq.as_mut()
                        .is_some_and(|rq| rq.refresh().unwrap_or(0) > 0);
                if pending {
                    st.make_ready(idx);
                }
                true
            }
            Some(q) => {
                q.in_err_list = false;
                false
            }
            None => false,
        };
        if keep {
            i += 1;
        } else {
            st.err_rqs.swap_remove(i);
        }
    }
}

pub(crate) fn fire_timers(st: &mut DevState, now: Time) -> bool {
    let mut fired = false;
    while let Some(Reverse((t, idx))) = st.timers.peek().copied() {
        if t > now {
            break;
        }
        st.timers.pop();
        if idx == crate::gsi::GSI_TIMER {
            fired |= st.gsi.fire(t, now);
            st.arm_gsi();
            continue;
        }
        let Some(q) = st.qps.get_mut(idx) else {
            continue;
        };
        if q.timer != Some(t) {
            continue; // stale: the QP re-armed earlier, or is another QP now
        }
        q.timer = None;
        match q.qp.poll_timeout() {
            Some(d) if d <= now => {
                q.qp.handle_timeout(now);
                st.make_ready(idx);
                fired = true;
            }
            // The deadline moved later since this entry was queued: wait for it.
            Some(d) => {
                q.timer = Some(d);
                st.timers.push(Reverse((d, idx)));
            }
            None => {}
        }
    }
    fired
}

// ---------------------------------------------------------------------------------------
// Send side

/// What [`fill_wr`] needs to know of the QP the WQE was posted to.
#[derive(Clone, Copy)]
struct WqeQp {
    ty: Service,
    xrc_initiator: bool,
    ctx: CtxId,
    pd: u32,
}

/// Write a send WQE from the SQ ring as a transport work request into `wr` (its place in
/// the transport's send queue), or say the completion status it fails with (LOC_QP_OP_ERR
/// for anything malformed, rxe `req_error`).
fn fill_wr(
    wr: &mut SendWr,
    hdr: &SendWqe,
    payload: &SendPayload<'_>,
    q: WqeQp,
    res: &Resources,
) -> Result<(), WcStatus> {
    let op = WrOpcode::from_raw(hdr.opcode)
        .filter(|o| o.is_implemented())
        .ok_or(WcStatus::LocQpOpErr)?;
    wr.wr_id = hdr.wr_id;
    wr.opcode = op;
    wr.flags = SendFlags(hdr.send_flags & 0xf);
    match payload {
        // Inline bytes stay inside the WR (no allocation); the parser bounds them by the
        // QP's max_inline, itself at most abi's MAX_INLINE_DATA = the transport's.
        SendPayload::Inline(b) => {
            if !wr.local.inline_data_mut().extend_from_slice(b) {
                return Err(WcStatus::LocQpOpErr);
            }
        }
        // Written in place: a reused send-queue slot keeps its list.
        SendPayload::Sges(_) => {
            let l = wr.local.sges_mut();
            for s in payload.sges() {
                l.push(transport::Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: transport::wire::Lkey(s.lkey),
                });
            }
        }
    }
    wr.imm_data = hdr.imm_data();
    wr.invalidate_rkey = Rkey(hdr.ex);
    wr.remote_addr = hdr.remote_addr;
    wr.rkey = Rkey(hdr.rkey);
    wr.compare_add = hdr.compare_add;
    wr.swap = hdr.swap;
    if q.xrc_initiator {
        // An XRC send WQE names the responder's XRC SRQ in `remote_qpn` (24 bits).
        if hdr.remote_qpn > 0xff_ffff {
            return Err(WcStatus::LocQpOpErr);
        }
        wr.xrc_srqn = hdr.remote_qpn;
    }
    if q.ty == Service::Ud {
        // The AH must exist in the QP's context and PD (IBA: same PD).
        match res.ahs.get(hdr.ah) {
            Some(a) if a.ctx == q.ctx && a.pd == q.pd => {}
            _ => return Err(WcStatus::LocQpOpErr),
        }
        if hdr.remote_qpn > 0xff_ffff {
            return Err(WcStatus::LocQpOpErr);
        }
        wr.ud = Some(UdDest {
            ah: hdr.ah,
            remote_qpn: Qpn::new(hdr.remote_qpn),
            remote_qkey: Qkey(hdr.remote_qkey),
        });
    }
    Ok(())
}

/// Move WQEs from the SQ ring into the transport while it accepts them. WQEs posted while
/// the QP is below RTS stay in the ring until it gets there (rxe's requester waits too).
///
/// Only about one turn's worth ([`TX_BUDGET`] packets, counted at the size of the newest
/// WQE the transport holds) is taken ahead of what the transport is sending; the rest wait in the ring, as
/// a NIC fetches WQEs when it gets to them. Each WQE the transport holds is a slot of
/// several hundred bytes: with a thousand busy QPs, whole rings of them taken at once would
/// be out of the caches again by the time they are sent.
fn pull_sq(q: &mut QpObj, res: &mut Resources) -> bool {
    if pulled_enough(q) {
        return false;
    }
    if matches!(q.qp.state(), QpState::Reset | QpState::Init | QpState::Rtr) {
        return false;
    }
    let limits = WqeLimits {
        max_sge: q.caps.max_send_sge,
        max_inline: q.caps.max_inline,
    };
    let read_len = (q.sq_layout.elem_size() as usize).min(SEND_WQE_MAX);
    let mut buf = [0u8; SEND_WQE_MAX];
    let mut progress = false;
    loop {
        let avail = match q.sq.available() {
            Ok(n) => n,
            Err(_) => {
                res.counters.ring_corrupt += 1;
                return progress;
            }
        };
        if q.sq_taken >= avail || pulled_enough(q) {
            return progress;
        }
        // The header first, then only the bytes it says follow (a slot sized for inline
        // data is mostly unused by a WQE with one SGE: its other cache lines stay unread).
        let first = SEND_WQE_FIRST_READ.min(read_len);
        let Some(head) = buf.get_mut(..first) else {
            return progress;
        };
        if q.sq.read(q.sq_taken, 0, head).is_err() {
            return progress;
        }
        let used =
            SendWqe::read_from_prefix(head).map_or(read_len, |(h, _)| h.wire_len().min(read_len));
        let Some(slot) = buf.get_mut(..used.max(first)) else {
            return progress;
        };
        if let Some(rest) = slot.get_mut(first..).filter(|r| !r.is_empty()) {
            if q.sq.read(q.sq_taken, first, rest).is_err() {
                return progress;
            }
        }
        let Some(slot) = slot.get(..used) else {
            return progress;
        };
        let parsed = SendWqe::parse(slot, limits);
        let (wr_id, opcode) = match &parsed {
            Ok((h, _)) => (h.wr_id, h.opcode),
            Err(_) => (
                slot.get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_ne_bytes),
                u32::MAX,
            ),
        };
        let wq = WqeQp {
            ty: q.ty,
            xrc_initiator: q.xrc == Some(QpXrc::Initiator),
            ctx: q.ctx,
            pd: q.pd,
        };
        let signaled = match &parsed {
            Ok((h, _)) => q.sq_sig_all || SendFlags(h.send_flags).contains(SendFlags::SIGNALED),
            Err(_) => true, // a bad WQE always completes
        };
        let posted = match &parsed {
            Ok((h, p)) => q.qp.post_send_with(|wr| fill_wr(wr, h, p, wq, res)),
            Err(_) => Err(WcStatus::LocQpOpErr),
        };
        if crate::trace::fast_on() {
            let qpn = q.qp.qpn().value();
            let len = match &parsed {
                Ok((_, SendPayload::Inline(b))) => b.len() as u64,
                Ok((_, p)) => p.sges().map(|s| u64::from(s.length)).sum(),
                Err(_) => 0,
            };
            let err = posted.as_ref().err().copied();
            crate::trace::fast(&res.dev_name, || match err {
                None => format!("WQE qpn={qpn:#x} wr_id={wr_id} opcode={opcode} length={len}"),
                Some(st) => format!(
                    "WQE qpn={qpn:#x} wr_id={wr_id} opcode={opcode} = bad WQE: {}",
                    st.as_str()
                ),
            });
        }
        progress = true;
        match posted {
            Ok(Ok(())) => {
                q.sq_taken += 1;
                res.set_owes_signal(q, !signaled);
            }
            Ok(Err(PostError::QueueFull)) | Ok(Err(PostError::InvalidState)) => return true,
            Ok(Err(PostError::BadLength)) => fail_wqe(q, res, wr_id, opcode, WcStatus::LocLenErr),
            Ok(Err(_)) => fail_wqe(q, res, wr_id, opcode, WcStatus::LocQpOpErr),
            Err(status) => fail_wqe(q, res, wr_id, opcode, status),
        }
    }
}

/// Whether the transport holds about a turn's worth of packets not yet sent ([`pull_sq`]).
fn pulled_enough(q: &QpObj) -> bool {
    q.qp.unsent_sends()
        .saturating_mul(q.qp.newest_send_pkts() as usize)
        >= TX_BUDGET
}

/// A send WQE the transport cannot take: the transport moves the QP to ERR (flushing
/// earlier WQEs in order, raising IBV_EVENT_QP_FATAL) and completes this one with `status`
/// in the same ordered stream (`transport::Qp::fail_send`; always, even if unsignaled: IBA
/// 10.7.3.1). The slot is taken and done, so `drain_completions` frees it (with the flushed
/// ones before it) before any of their CQEs becomes visible.
fn fail_wqe(q: &mut QpObj, res: &mut Resources, wr_id: u64, opcode: u32, status: WcStatus) {
    res.counters.bad_wqe += 1;
    res.set_owes_signal(q, false);
    q.sq_taken += 1;
    q.qp.fail_send(wr_id, WrOpcode::from_raw(opcode), status);
    drain_completions(q, res);
}

pub(crate) fn err_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    }
}

/// Give the SQ ring slots of the send WQEs the transport has retired back to the library.
/// The transport retires send WQEs in order, so the oldest taken entries no longer in its
/// queue are done. This must happen before their completions become visible: an
/// application that has polled a completion may post into the slot at once (IBA 10.8, as
/// rdma-core's providers free SQ slots by the time `poll_cq` returns), and the Release
/// store of the CQ producer index then orders this consumer-index store before it.
fn release_retired(q: &mut QpObj) -> bool {
    let inflight = u32::try_from(q.qp.send_queue_len()).unwrap_or(u32::MAX);
    let done = q.sq_taken.saturating_sub(inflight);
    if done > 0 && q.sq.release(done).is_ok() {
        q.sq_taken -= done;
        return true;
    }
    false
}

/// Free retired SQ slots, then write the transport's completions into the CQ rings and its
/// events into the async fd. A CQ overflow moves the QP to ERR (its flushes then overflow
/// too; nothing is overwritten). Every path that publishes a QP's completions goes through
/// here, so no CQE is visible before its slot is free.
fn drain_completions(q: &mut QpObj, res: &mut Resources) -> bool {
    let mut any = false;
    loop {
        any |= release_retired(q);
        let mut overflow = false;
        while let Some(c) = q.qp.poll_completion() {
            any = true;
            let cq = if c.is_recv() { q.recv_cq } else { q.send_cq };
            // A solicited-only arming fires for a receive whose last packet had the SE
            // bit, and for any error (IBA 11.4.2.2).
            let mut wc = to_wc(&c);
            // Only UD receives carry the GRH area (and the flag).
            if c.wc_flags.contains(transport::WcFlags::GRH) {
                wc.sl = res.ud_recv_sl;
            }
            if res.push_cqe(cq, &wc, c.fires_solicited()).is_err() {
                overflow = true;
            }
        }
        while let Some(ev) = q.qp.poll_event() {
            any = true;
            let ty = match ev {
                QpEvent::Fatal => event::QP_FATAL,
                QpEvent::SqDrained => event::SQ_DRAINED,
                // Every QP uses the transport's SRQ path; only real SRQ users get this.
                QpEvent::LastWqeReached if q.srq.is_some() => event::QP_LAST_WQE_REACHED,
                QpEvent::LastWqeReached => continue,
            };
            q.events_reported = q.events_reported.wrapping_add(1);
            res.post_async(q.ctx, q.user_handle, ty);
        }
        if overflow && !matches!(q.qp.state(), QpState::Err | QpState::Reset) {
            let _ = q.qp.modify(&err_attr(), QpAttrMask::STATE);
            q.events_reported = q.events_reported.wrapping_add(1);
            res.post_async(q.ctx, q.user_handle, event::QP_FATAL);
            continue;
        }
        return any;
    }
}

pub(crate) fn service_qp(st: &mut DevState, io: &mut Queues, idx: u32, now: Time) -> bool {
    let dev_ip = st.cfg.addr;
    let own = st.own_qpns;
    let hermetic = st.hermetic;
    let DevState {
        res,
        qps,
        ready,
        timers,
        err_rqs,
        peer_tx,
        ..
    } = st;
    let Some(q) = qps.get_mut(idx) else {
        return false;
    };
    let mut progress = pull_sq(q, res);
    let mut more = false;
    let mut sent = 0;
    // A connected QP may send runs of packets (`transport::Run`: one build for a message's
    // packets) to a QP of this device, or of another process of a daemon device with a
    // packet ring — nothing between them needs the packets cut (a ring's runs fit its
    // slots) — and to another address, where `route` cuts the run into the datagrams the
    // wire carries. Not while something captures the device, which is to see every
    // packet as the transport built it.
    let mtu = q.qp.path_mtu_bytes().max(1) as usize;
    let dest_qpn = q.qp.dest_qpn().value();
    let captured = io.tap().is_some();
    // Its peer is a QP of this device (what it sends goes to the internal loopback).
    let same_device = q.av.is_some_and(|d| d.ip == dev_ip)
        && own.is_none_or(|w| crate::state::in_window(w, dest_qpn));
    let run_max = if q.ty != Service::Rc || captured {
        1
    } else if same_device || q.av.is_some_and(|d| d.ip != dev_ip) {
        (RUN_BYTES / mtu) as u32
    } else if q.av.is_some() && peer_tx.contains_key(&(dest_qpn >> crate::daemon::WINDOW_BITS)) {
        ((crate::peer_ring::MAX_PACKET - transport::MAX_HEADER_LEN - 4) / mtu) as u32
    } else {
        1
    };
    // A connected QP whose peer is a QP of this device hands it the headers of its
    // requests as it builds them, not bytes to be parsed back (not while something
    // captures the device, which is to see each packet's bytes).
    q.qp.set_headers_only(
        same_device && matches!(q.ty, Service::Rc | Service::Uc) && q.xrc.is_none() && !captured,
    );
    // Each packet's deferred payload ranges (emptied per packet, not rebuilt).
    let mut deferred = DeferList::default();
    let mut pulls = 0;
    while sent < TX_BUDGET {
        if io.backlogged() {
            more = true;
            break;
        }
        if sent + 1 == TX_BUDGET || io.backlogged_after(1) {
            // This QP's turn ends with this packet: have it acknowledged now.
            q.qp.request_ack_next();
        }
        // A run ends before the packet that ends the turn or fills a queue.
        let room = (TX_BUDGET - sent - 1)
            .min(LOOPQ_MAX.saturating_sub(io.loopq_pkts + 1))
            .min(TXQ_MAX.saturating_sub(io.txq.len() + 1));
        let max_pkts = if run_max > 1 && q.qp.run_ready() {
            run_max.min(room as u32).max(1)
        } else {
            1
        };
        // (A run's buffer only for a run: a thousand QPs' single packets waiting in the
        // loopback queue would otherwise each hold 68 KiB.)
        let mut buf = if max_pkts > 1 {
            io.take_run_buf()
        } else {
            io.take_buf()
        };
        // Payload read from registered memory is recorded, not copied: a packet that
        // stays on the device is delivered straight from the source MR (one copy, like
        // DMA); one that leaves gets its bytes in `route`.
        deferred.clear();
        let mut mem = DmaView {
            mrs: &res.mrs,
            pd: q.pd,
            qpn: q.qp.qpn().value(),
            payload: Payload::Defer(&mut deferred),
        };
        let Some(t) = q.qp.poll_transmit_run(now, &mut mem, &mut buf, max_pkts) else {
            io.put_buf(buf);
            // The transport has sent all it held: take more from the ring, if any (a
            // bounded number of times: a ring flushed in ERR frees its slots at once).
            pulls += 1;
            if pulls <= TX_BUDGET && pull_sq(q, res) {
                progress = true;
                continue;
            }
            break;
        };
        deferred.stamp(&res.mrs);
        sent += t.pkts() as usize;
        route(
            dev_ip, own, hermetic, q, res, peer_tx, io, buf, t, &deferred,
        );
    }
    if sent >= TX_BUDGET {
        more = true;
    }
    progress |= sent > 0;
    progress |= drain_completions(q, res);
    if q.qp.state() == QpState::Err {
        // Its WQEs all complete (flushed): nothing more is owed.
        res.set_owes_signal(q, false);
        let (qpn, rcq) = (q.qp.qpn().value(), q.recv_cq);
        if let Some(rq) = q.rq.as_mut() {
            progress |= flush_rq_ring(res, rq, qpn, rcq) > 0;
            if !q.in_err_list {
                q.in_err_list = true;
                err_rqs.push(idx);
            }
        }
    }
    // At most one heap entry per QP: only a deadline earlier than the armed one is queued;
    // a later one is picked up when the armed entry fires (see `fire_timers`), so steady
    // traffic that keeps pushing the ACK timer out does not grow the heap.
    if let Some(t) = q.qp.poll_timeout() {
        if q.timer.is_none_or(|armed| t < armed) {
            q.timer = Some(t);
            timers.push(Reverse((t, idx)));
        }
    }
    if more {
        make_ready(qps, ready, idx);
    }
    progress
}

/// Send a packet the transport built: to the internal loopback when the destination is
/// this device (its payload still in the source MRs, `deferred`), else as a UDP datagram
/// with its payload and ICRC (never from a hermetic device).
#[allow(clippy::too_many_arguments)]
fn route(
    dev_ip: IpAddr,
    own: Option<(u32, u32)>,
    hermetic: bool,
    q: &QpObj,
    res: &mut Resources,
    peer_tx: &mut std::collections::HashMap<u32, crate::peer_ring::TxRing>,
    io: &mut Queues,
    mut buf: Vec<u8>,
    t: Transmit,
    deferred: &DeferList,
) {
    let dest = match t.ah {
        Some(ah) => res.ahs.get(ah).filter(|a| a.ctx == q.ctx).map(|a| a.dest),
        None => q.av,
    };
    let Some(dest) = dest.filter(|d| !hermetic || d.ip == dev_ip) else {
        res.counters.xmit_no_route += 1;
        io.put_buf(buf);
        return;
    };
    let c = &mut res.counters;
    c.port_xmit_packets += u64::from(t.pkts());
    c.port_xmit_data += wire_words(t.len, t.run);
    // On a daemon's device, a QP of another process at this address is reached through
    // the daemon (the datagram goes to our own address and the daemon forwards it).
    let here = own.is_none_or(|w| crate::state::in_window(w, t.dest_qpn.value()));
    if dest.ip == dev_ip && here {
        c.loopback_pkts += u64::from(t.pkts());
        if let Some(tap) = io.tap() {
            // (Built as headers only if the capture began since: written out for it.)
            let written = t.hdr.is_none_or(|h| write_out(&h, t.len, &mut buf));
            if let Some(pkt) = buf.get(..t.len).filter(|_| written) {
                tap.looped(pkt, |p| deferred.materialize(&res.mrs, p));
            }
        }
        io.push_loop(buf, t.len, deferred, t.run, t.hdr);
        return;
    }
    if let Some(h) = &t.hdr {
        // Headers only, yet not for a QP of this device (`service_qp` asks for them only
        // then; kept safe all the same): the bytes are written before it goes anywhere.
        if !write_out(h, t.len, &mut buf) {
            res.counters.xmit_discards += 1;
            io.put_buf(buf);
            return;
        }
    }
    if let Some(run) = t.run.filter(|_| dest.ip != dev_ip) {
        // Its payload is copied once, into each datagram.
        let mtu = q.qp.path_mtu_bytes().max(1) as usize;
        send_udp_run(dev_ip, &dest, res, io, buf, t.len, run, deferred, mtu);
        return;
    }
    if !deferred.materialize(&res.mrs, &mut buf) {
        res.counters.xmit_discards += 1;
        io.put_buf(buf);
        return;
    }
    // Another process of this daemon device with a packet ring: straight into its memory.
    let slot = bth_dest_qpn(&buf) >> crate::daemon::WINDOW_BITS;
    if dest.ip == dev_ip {
        if let Some(tx) = peer_tx.get_mut(&slot) {
            if let Some(tap) = io.tap() {
                if let Some(pkt) = buf.get(..t.len) {
                    tap.looped(pkt, |_| true);
                }
            }
            // (Usually one peer: the newest entry answers without a scan.)
            let queued = !io.ring_backlog.is_empty()
                && (io.ring_backlog.back().is_some_and(|(s, ..)| *s == slot)
                    || io.ring_backlog.iter().any(|(s, ..)| *s == slot));
            if !queued && buf.get(..t.len).is_some_and(|p| tx.stage(p, t.run)) {
                io.put_buf(buf);
            } else {
                io.ring_backlog.push_back((slot, buf, t.len, t.run));
            }
            return;
        }
    }
    if t.run.is_some() {
        // A run toward this address is for a QP of this device or a peer ring only
        // (`service_qp`); one toward another address was cut into datagrams above.
        res.counters.xmit_discards += 1;
        io.put_buf(buf);
        return;
    }
    send_udp(dev_ip, &dest, &mut res.counters, io, buf, t.len);
}

/// Cut a run (`buf[..len]`: its first packet's headers, then the payload of all its
/// packets at path MTU `mtu`, some of it still in the source MRs: `deferred`) into the
/// datagrams a wire carries, each with its payload copied straight from where it is and
/// sealed for `dest`: the packets the transport would have built one by one
/// (`transport::Run::packet`).
#[allow(clippy::too_many_arguments)]
fn send_udp_run(
    dev_ip: IpAddr,
    dest: &Dest,
    res: &mut Resources,
    io: &mut Queues,
    buf: Vec<u8>,
    len: usize,
    run: Run,
    deferred: &DeferList,
    mtu: usize,
) {
    let Some(pkt) = buf.get(..len).and_then(|b| RocePacketRepr::parse(b).ok()) else {
        res.counters.xmit_discards += u64::from(run.pkts);
        io.put_buf(buf);
        return;
    };
    let payload_at = pkt.header_len();
    for i in 0..run.pkts {
        let Some(p) = run.packet(&pkt, i, mtu) else {
            res.counters.xmit_discards += u64::from(run.pkts - i);
            break;
        };
        let from = payload_at + i as usize * mtu;
        let plen = p.payload.len();
        let hl = p.header_len();
        let mut d = io.take_buf();
        let placed = d
            .get_mut(hl..hl + plen)
            .is_some_and(|dst| deferred.materialize_range(&res.mrs, &buf, from, dst));
        let hdr = RocePacketRepr { payload: &[], ..p };
        match placed
            .then(|| transport::finish_in_place(&hdr, plen, &mut d))
            .flatten()
        {
            Some(tl) => send_udp(dev_ip, dest, &mut res.counters, io, d, tl),
            None => {
                // A source MR deregistered since the build: the rest is lost like packets
                // dropped on a wire; the sender's retry finds the key gone.
                res.counters.xmit_discards += u64::from(run.pkts - i);
                io.put_buf(d);
                break;
            }
        }
    }
    io.put_buf(buf);
}

/// The destination QP of a packet that starts with its BTH (IBTA Vol 1 §9.2: bytes 5–7).
pub(crate) fn bth_dest_qpn(pkt: &[u8]) -> u32 {
    match pkt.get(5..8) {
        Some(b) => u32::from_be_bytes([0, b[0], b[1], b[2]]),
        None => 0,
    }
}

/// Queue `buf[..len]` (a transport packet, room for the ICRC after it) as a UDP datagram to
/// `dest`, with the ICRC its IP and UDP headers give.
fn send_udp(
    dev_ip: IpAddr,
    dest: &Dest,
    c: &mut crate::counters::EngineCounters,
    io: &mut Queues,
    mut buf: Vec<u8>,
    len: usize,
) {
    match seal_datagram(dev_ip, dest, &mut buf, len) {
        Ok(()) => io.txq.push_back(Datagram {
            buf,
            len: len + ICRC_LEN,
            dst: SocketAddr::new(dest.ip, ROCE_V2_PORT),
            ident: 0,
        }),
        Err(NoRoute) => {
            c.xmit_no_route += 1;
            io.put_buf(buf);
        }
        Err(Discard) => {
            c.xmit_discards += 1;
            io.put_buf(buf);
        }
    }
}

/// Why a packet could not be sealed into a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealError {
    /// Source and destination address families differ.
    NoRoute,
    /// The packet or the room for its ICRC is missing.
    Discard,
}
use SealError::{Discard, NoRoute};

/// Write the ICRC after `buf[..len]` (a transport packet from `dev_ip` to `dest` over UDP
/// port 4791 as a socket sends it: IPv4 ID 0 and DF), making it a RoCEv2 UDP payload of
/// `len + ICRC_LEN` bytes.
pub(crate) fn seal_datagram(
    dev_ip: IpAddr,
    dest: &Dest,
    buf: &mut [u8],
    len: usize,
) -> Result<(), SealError> {
    let ip = match (dev_ip, dest.ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            IpRepr::v4_socket(s, d, dest.traffic_class, dest.hop_limit)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6 {
            src: s,
            dst: d,
            traffic_class: dest.traffic_class,
            flow_label: dest.flow_label,
            hop_limit: dest.hop_limit,
        },
        _ => return Err(NoRoute),
    };
    let udp = UdpRepr::roce(ROCE_V2_PORT);
    let crc = match buf.get(..len).map(|p| icrc::compute_for(&ip, &udp, p)) {
        Some(Ok(crc)) => crc,
        _ => return Err(Discard),
    };
    let tail = buf.get_mut(len..len + ICRC_LEN).ok_or(Discard)?;
    tail.copy_from_slice(&icrc::icrc_wire_bytes(crc));
    Ok(())
}

/// Queue the CM's MADs (QP 1): to the internal loopback for this device's own address,
/// as UDP datagrams otherwise (never from a hermetic device). Returns whether any went.
pub(crate) fn send_gsi(st: &mut DevState, io: &mut Queues) -> bool {
    // Every pass comes here: with nothing queued it costs one check. (The CM's deadline is
    // queued where its state changes: received MADs, fired timers, consumer calls.)
    if !st.gsi.cm.has_transmits() {
        return false;
    }
    let dev_ip = st.cfg.addr;
    let mut any = false;
    loop {
        let mut buf = io.take_buf();
        let Some((to, len)) = st.gsi.next_packet(&mut buf) else {
            io.put_buf(buf);
            break;
        };
        any = true;
        let c = &mut st.res.counters;
        if st.hermetic && to != dev_ip {
            c.xmit_no_route += 1;
            io.put_buf(buf);
            continue;
        }
        c.port_xmit_packets += 1;
        c.port_xmit_data += ((len + ICRC_LEN) / 4) as u64;
        // On a daemon's device the daemon routes MADs (another process may own the ID).
        if to == dev_ip && st.own_qpns.is_none() {
            c.loopback_pkts += 1;
            if let Some(tap) = io.tap() {
                if let Some(pkt) = buf.get(..len) {
                    tap.looped(pkt, |_| true);
                }
            }
            io.push_loop(buf, len, &DeferList::default(), None, None);
            continue;
        }
        let dest = Dest::roce(to);
        send_udp(dev_ip, &dest, c, io, buf, len);
    }
    any
}

/// Move what waits for full peer rings into them (in order), then publish every ring that
/// got packets (one Release store each, a wake-up only for a parked consumer). On an
/// application thread (`hold`), a batch of nothing but ACKs may wait a little for the
/// answer the application is about to post (`peer_ring::TxRing::publish_or_hold`).
pub(crate) fn flush_rings(st: &mut DevState, io: &mut Queues, now: Time, hold: bool) -> bool {
    let mut progress = false;
    let mut blocked: Vec<u32> = Vec::new();
    let mut k = 0;
    while k < io.ring_backlog.len() {
        let Some((slot, ..)) = io.ring_backlog.get(k) else {
            break;
        };
        let slot = *slot;
        if blocked.contains(&slot) {
            k += 1;
            continue;
        }
        let staged = match (st.peer_tx.get_mut(&slot), io.ring_backlog.get(k)) {
            (Some(tx), Some((_, b, len, run))) => b.get(..*len).is_some_and(|p| tx.stage(p, *run)),
            // The ring is gone: the packet is lost, as on a vanished link.
            (None, _) => true,
            _ => false,
        };
        if staged {
            if let Some((_, b, ..)) = io.ring_backlog.remove(k) {
                io.put_buf(b);
            }
            progress = true;
        } else {
            blocked.push(slot);
            k += 1;
        }
    }
    for tx in st.peer_tx.values_mut() {
        tx.publish_or_hold(now.0, hold);
        if tx.held_at().is_some() {
            io.ring_seen = now;
        }
    }
    progress
}

/// Packets other processes of the daemon's device put into this device's peer rings.
pub(crate) fn receive_rings(st: &mut DevState, io: &mut Queues, now: Time) -> bool {
    if st.peer_rx.is_empty() {
        return false;
    }
    let mut rings = std::mem::take(&mut st.peer_rx);
    // Its own scratch buffer: `drain` sizes it to each packet (never a pool buffer).
    let mut buf = std::mem::take(&mut io.ring_rx);
    let mut n = 0;
    // Only a capture that wants ring packets records them here (their sender did).
    let tap = io.tap().is_some().then(|| io.tap.clone());
    for r in rings.iter_mut() {
        n += r.drain(RING_BUDGET, &mut buf, |pkt, run| {
            if let Some(t) = &tap {
                t.ring_received(pkt);
            }
            deliver_loopback(st, pkt, None, &DeferList::default(), run, now);
        });
    }
    io.ring_rx = buf;
    st.peer_rx = rings;
    n > 0
}

/// One datagram from the socket: parse, verify the ICRC as far as a UDP socket allows
/// (IPv4: the ID and DF the socket hides are solved for; wire::icrc docs), deliver.
pub(crate) fn handle_datagram(
    st: &mut DevState,
    tap: Option<&crate::tap::Tap>,
    data: &[u8],
    from: SocketAddr,
    likely_ident: u16,
    ce: bool,
    now: Time,
) {
    let dev_ip = st.cfg.addr;
    let c = &mut st.res.counters;
    let Ok((pkt, crc)) = transport::wire::roce::parse_datagram(data) else {
        c.port_rcv_errors += 1;
        if let Some(tap) = tap {
            tap.received(from, 0, true, data);
        }
        return;
    };
    let transport_bytes = data
        .get(..data.len().saturating_sub(ICRC_LEN))
        .unwrap_or(&[]);
    let udp = UdpRepr {
        src_port: from.port(),
        dst_port: ROCE_V2_PORT,
        checksum: 0,
    };
    let udp_len = 8 + data.len();
    let grh = match (from.ip(), dev_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            // Fast path: what this NIC and Linux senders with PMTU discovery send (ID 0 —
            // or its place in a GSO send, `likely_ident` — and DF) is one plain CRC;
            // otherwise solve for the ID/DF bits the socket hides.
            let likely = IpRepr::V4 {
                src: s,
                dst: d,
                dscp_ecn: 0,
                ttl: 64,
                ident: likely_ident,
                dont_frag: true,
            };
            let (ident, dont_frag) = if icrc::compute_for(&likely, &udp, transport_bytes) == Ok(crc)
            {
                st.idents.expected(s, likely_ident, now.0);
                (likely_ident, true)
            } else {
                // Solving for the hidden ID and DF accepts one corrupted packet in 2^15
                // unless the solution is plausible for this sender (crate::ident).
                match icrc::verify_udp_v4_unseen_ident(s, d, &udp, transport_bytes, crc)
                    .filter(|u| st.idents.believe_solved(s, u.ident, u.dont_frag, now.0))
                {
                    Some(u) => (u.ident, u.dont_frag),
                    None => {
                        c.rcvd_icrc_err += 1;
                        c.port_rcv_errors += 1;
                        if let Some(tap) = tap {
                            tap.received(from, 0, true, data);
                        }
                        return;
                    }
                }
            };
            if let Some(tap) = tap {
                tap.received(from, ident, dont_frag, data);
            }
            if shows_grh(&st.qps, &pkt) {
                v4_grh(s, d, ident, dont_frag, udp_len)
            } else {
                RxMeta::default().grh
            }
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = IpRepr::V6 {
                src: s,
                dst: d,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            };
            if let Some(tap) = tap {
                tap.received(from, 0, true, data);
            }
            if !icrc::verify_udp(&ip, &udp, transport_bytes, crc) {
                c.rcvd_icrc_err += 1;
                c.port_rcv_errors += 1;
                return;
            }
            let mut h = [0u8; IPV6_HEADER_LEN];
            let _ = ip.emit(&mut h, udp_len);
            Grh::V6(h)
        }
        _ => {
            c.port_rcv_errors += 1;
            return;
        }
    };
    c.port_rcv_packets += 1;
    c.port_rcv_data += (data.len() / 4) as u64;
    deliver(
        st,
        &pkt,
        None,
        from.ip(),
        &RxMeta { grh, ce },
        now,
        Payload::Copy,
    );
}

fn v4_grh(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    ident: u16,
    dont_frag: bool,
    udp_len: usize,
) -> Grh {
    let ip = IpRepr::V4 {
        src,
        dst,
        dscp_ecn: 0,
        ttl: 64,
        ident,
        dont_frag,
    };
    let mut h = [0u8; IPV4_HEADER_LEN];
    let _ = ip.emit(&mut h, udp_len);
    Grh::V4(h)
}

/// Whether `pkt`'s receiver shows the IP header (its GRH area): only a UD QP's receive
/// does, so for others it is not built.
fn shows_grh(qps: &crate::slab::Slab<QpObj>, pkt: &RocePacketRepr<'_>) -> bool {
    qps.get(pkt.bth.dest_qp.value())
        .is_some_and(|q| q.ty == Service::Ud)
}

/// The 4-byte words a transmit puts on a wire (a run: each of its packets, every one after
/// the first with a BTH only), ICRCs included, for the port data counters.
fn wire_words(len: usize, run: Option<Run>) -> u64 {
    (Run::wire_len(len, run) / 4) as u64
}

pub(crate) fn deliver_loopback(
    st: &mut DevState,
    bytes: &[u8],
    hdr: Option<&ReqHeaders>,
    deferred: &DeferList,
    run: Option<Run>,
    now: Time,
) {
    let ip = st.cfg.addr;
    // Built as headers only: taken as they are, the payload where it would follow them;
    // else parsed, and looked at where `parse` left it (the headers are not moved again).
    let parsed = match hdr {
        Some(h) => {
            let at = h.header_len();
            match bytes.get(at..at + h.payload_len(bytes.len())) {
                Some(payload) => Ok(h.repr(payload)),
                None => Err(transport::wire::Error::Truncated),
            }
        }
        None => RocePacketRepr::parse(bytes),
    };
    let Ok(pkt) = &parsed else {
        st.res.counters.port_rcv_errors += 1;
        return;
    };
    #[cfg(debug_assertions)]
    if let Some(h) = hdr {
        // The bytes the headers stand for parse back to them (checked on every same-device
        // request of every test run).
        let mut b = bytes.to_vec();
        let written = transport::finish_in_place(&h.repr(&[]), pkt.payload.len(), &mut b);
        debug_assert_eq!(written, Some(bytes.len()));
        debug_assert_eq!(RocePacketRepr::parse(&b).as_ref(), Ok(pkt));
    }
    if !deferred.sources_valid(&st.res.mrs) {
        // Its source MR was deregistered while the packet waited (a later pass): lost,
        // like a packet dropped on a wire; the sender's retry finds the key gone.
        st.res.counters.xmit_discards += 1;
        return;
    }
    st.res.counters.port_rcv_packets += u64::from(Run::pkts_of(run));
    st.res.counters.port_rcv_data += wire_words(bytes.len(), run);
    let udp_len = 8 + bytes.len() + ICRC_LEN;
    let grh = match ip {
        _ if !shows_grh(&st.qps, pkt) => RxMeta::default().grh,
        IpAddr::V4(v4) => v4_grh(v4, v4, 0, true, udp_len),
        IpAddr::V6(v6) => {
            let mut h = [0u8; IPV6_HEADER_LEN];
            let r = IpRepr::V6 {
                src: v6,
                dst: v6,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            };
            let _ = r.emit(&mut h, udp_len);
            Grh::V6(h)
        }
    };
    let payload = Payload::resolve(deferred);
    deliver(st, pkt, run, ip, &RxMeta { grh, ce: false }, now, payload);
}

/// Hand a packet to its QP (demultiplexed by BTH destination QPN). RC/UC packets must come
/// from the QP's destination address (rxe `check_addr`).
fn deliver(
    st: &mut DevState,
    pkt: &RocePacketRepr<'_>,
    run: Option<Run>,
    src: IpAddr,
    meta: &RxMeta,
    now: Time,
    payload: Payload<'_>,
) {
    let qpn = pkt.bth.dest_qp.value();
    if qpn == Qpn::GSI.value() {
        st.gsi.receive(now, pkt, src);
        st.arm_gsi();
        return;
    }
    let DevState {
        res, qps, ready, ..
    } = st;
    let Some(q) = qps.get_mut(qpn) else {
        res.counters.rcvd_unknown_qp += 1;
        return;
    };
    if q.ty != Service::Ud && q.av.map(|d| d.ip) != Some(src) {
        res.counters.rcvd_addr_mismatch += 1;
        return;
    }
    if let Some(QpXrc::Target { domain, .. }) = q.xrc {
        deliver_xrc_target(res, q, domain, pkt, meta, now, payload);
        make_ready_first(qps, ready, qpn);
        return;
    }
    let mut mem = DmaView {
        mrs: &res.mrs,
        pd: q.pd,
        qpn: q.qp.qpn().value(),
        payload,
    };
    let mut limit_event = None;
    let mut corrupt = false;
    match q.srq {
        Some(s) => match res.srqs.get_mut(s) {
            Some(srq) => {
                (corrupt, limit_event) = handle_on_srq(q, srq, &mut mem, now, pkt, run, meta)
            }
            None => q.qp.handle_run(now, pkt, run, meta, &mut mem, None),
        },
        None => match q.rq.as_mut() {
            Some(own) => {
                let mut rq = RingRecvQueue {
                    rq: own,
                    corrupt: false,
                };
                q.qp.handle_run(now, pkt, run, meta, &mut mem, Some(&mut rq));
                corrupt = rq.corrupt;
            }
            None => q.qp.handle_run(now, pkt, run, meta, &mut mem, None),
        },
    }
    if corrupt {
        res.counters.ring_corrupt += 1;
    }
    if let Some((ctx, h)) = limit_event {
        res.post_async(ctx, h, event::SRQ_LIMIT_REACHED);
    }
    make_ready_first(qps, ready, qpn);
}

/// Hand `pkt` to `q` with the shared receive queue `srq`. Returns whether the SRQ's ring
/// was found corrupt, and the SRQ limit event to post (armed by MODIFY_SRQ: it fires once,
/// then disarms).
fn handle_on_srq(
    q: &mut QpObj,
    srq: &mut crate::state::Srq,
    mem: &mut DmaView<'_>,
    now: Time,
    pkt: &RocePacketRepr<'_>,
    run: Option<Run>,
    meta: &RxMeta,
) -> (bool, Option<(CtxId, u64)>) {
    let mut rq = RingRecvQueue {
        rq: &mut srq.rq,
        corrupt: false,
    };
    q.qp.handle_run(now, pkt, run, meta, mem, Some(&mut rq));
    let mut corrupt = rq.corrupt;
    let mut limit_event = None;
    // The cached count knows only what the last refresh saw (a packet that took no WQE —
    // out of sequence, a WRITE, a READ — never refreshed it): look at the ring before
    // judging, or an armed SRQ with plenty of WQEs reports its limit reached.
    let below = srq.limit > 0
        && srq.rq.ring.cached_available() < srq.limit
        && match srq.rq.refresh() {
            Ok(n) => n < srq.limit,
            Err(_) => {
                corrupt = true;
                false
            }
        };
    if below {
        srq.limit = 0;
        srq.events = srq.events.wrapping_add(1);
        limit_event = Some((srq.ctx, srq.user_handle));
    }
    (corrupt, limit_event)
}

/// A packet for an XRC target QP (IBTA XRC annex): a request's XRCETH names the XRC SRQ
/// whose receive WQE it consumes, whose PD its memory accesses are checked against and whose
/// CQ its completion goes to. An SRQ number that names no XRC SRQ of the QP's domain reaches
/// the transport as no SRQ at all, which NAKs the request (Invalid Request). The completions
/// are written at once, while the SRQ's CQ is the QP's.
fn deliver_xrc_target(
    res: &mut Resources,
    q: &mut QpObj,
    domain: u32,
    pkt: &RocePacketRepr<'_>,
    meta: &RxMeta,
    now: Time,
    payload: Payload<'_>,
) {
    let srqn = pkt.xrceth.map(|x| x.srqn);
    let target = srqn.filter(|&n| {
        res.srqs
            .get(n)
            .is_some_and(|s| s.xrc.is_some_and(|x| x.domain == domain))
    });
    let mut limit_event = None;
    let mut corrupt = false;
    match target.and_then(|n| res.srqs.get_mut(n)) {
        Some(srq) => {
            if let Some(x) = srq.xrc {
                q.recv_cq = x.cq;
            }
            // Responses (READ data) are read later, under the PD of the SRQ last named.
            q.pd = srq.pd;
            let mut mem = DmaView {
                mrs: &res.mrs,
                pd: srq.pd,
                qpn: q.qp.qpn().value(),
                payload,
            };
            (corrupt, limit_event) = handle_on_srq(q, srq, &mut mem, now, pkt, None, meta);
        }
        None => {
            let mut mem = DmaView {
                mrs: &res.mrs,
                pd: NO_HANDLE,
                qpn: q.qp.qpn().value(),
                payload,
            };
            q.qp.handle_packet(now, pkt, meta, &mut mem, None);
        }
    }
    if corrupt {
        res.counters.ring_corrupt += 1;
    }
    if let Some((ctx, h)) = limit_event {
        res.post_async(ctx, h, event::SRQ_LIMIT_REACHED);
    }
    drain_completions(q, res);
}
