//! The requester (rxe_req.c): turns send WQEs into request packets, segments by path MTU,
//! sets AckReq, enforces the unacknowledged-PSN window, `max_rd_atomic`, fences and
//! end-to-end credits, and runs the local ACK timer, RNR waits and go-back-N retries.

use wire::{
    AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDt, Msn, Psn, RethRepr, RocePacketRepr,
    XrcEthRepr,
};

use crate::error::TransportError;
use crate::mem::{for_each_piece, Memory};
use crate::packet::{finish_in_place, header_len, request_opcode};
use crate::qp::{Qp, Transmit};
use crate::state::{QpState, Service};
use crate::time::{local_ack_timeout_ns, Time};
use crate::{LocalData, SendFlags, WcStatus, WrOpcode};

/// Requester state (rxe `struct rxe_req_info`, rxe_req.c): where in the send queue and PSN
/// space the next request packet comes from. The completer updates it as WQEs retire: the
/// cursor follows the retired front, `next_psn` never trails the oldest unacknowledged PSN,
/// the READ/ATOMIC count drops, and a selective-repeat NAK queues a resend.
#[derive(Debug)]
pub(crate) struct Requester {
    /// Index in `sq` of the WQE being transmitted (rxe `req.wqe_index`).
    pub(crate) cursor: usize,
    /// PSN of the next request packet to build (rxe `req.psn`).
    pub(crate) next_psn: Psn,
    /// One past the highest PSN ever transmitted: responses at or beyond it are ghosts.
    pub(crate) sent_high: Psn,
    /// Send sequence number of the next WQE started (for end-to-end credits).
    pub(crate) next_ssn: Msn,
    /// READ/ATOMIC WQEs started and not yet completed (against `max_rd_atomic`).
    pub(crate) rd_atomic_outstanding: u32,
    /// Packets sent since the last one with AckReq (rxe `req.noack_pkts`).
    pub(crate) pkts_since_ackreq: u32,
    /// The next request packet asks for an acknowledgement ([`Qp::request_ack_next`]).
    pub(crate) ack_req_next: bool,
    /// Requests are built as their headers, not bytes ([`Qp::set_headers_only`]).
    pub(crate) headers_only: bool,
    /// Selective repeat: the single resends (sr.rs).
    pub(crate) sr_tx: crate::sr::SrSend,
}

impl Default for Requester {
    fn default() -> Requester {
        Requester {
            cursor: 0,
            next_psn: Psn::new(0),
            sent_high: Psn::new(0),
            next_ssn: Msn::new(1),
            rd_atomic_outstanding: 0,
            pkts_since_ackreq: 0,
            ack_req_next: false,
            headers_only: false,
            sr_tx: crate::sr::SrSend::default(),
        }
    }
}

/// While the rate is limited, AckReq at least every this many packets.
const PACED_ACK_EVERY: u32 = 4;

/// Why a request packet could not be built.
enum BuildError {
    /// The WQE failed locally with this error.
    Wqe(TransportError),
    /// The caller's buffer is too small (nothing changed).
    Buffer,
}

/// A request packet [`Qp::build_request`] wrote, for [`Qp::update_state`].
struct Sent {
    /// Index in the send queue of its WQE.
    idx: usize,
    /// The PSNs the WQE occupies.
    first_psn: Psn,
    last_psn: Psn,
    /// This packet's PSN (a run's first).
    psn: Psn,
    /// Packets built: 1, or a run's.
    n: u32,
    op: WrOpcode,
    ack_req: bool,
    /// The message's last packet.
    last: bool,
}

impl Qp {
    /// Next request packet, if the requester may send one now. In order (rxe_req.c
    /// `rxe_requester`): the QP state and an RNR wait; the DCQCN pacer; a probe; a
    /// selective-repeat resend; a local operation at the front; for a WQE not yet started,
    /// SQD, the fence, the READ/ATOMIC depth and end-to-end credits; the window; then
    /// [`Qp::build_request`].
    pub(crate) fn requester_transmit<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        mem: &mut M,
        buf: &mut [u8],
        max_pkts: u32,
    ) -> Option<Transmit> {
        loop {
            let state = self.attr.qp_state;
            if !matches!(state, QpState::Rts | QpState::Sqd) || self.rnr_until.is_some() {
                return None;
            }
            let ty = self.cfg.service;
            // DCQCN's pacer (docs/wire.md §11.3): while the rate is limited, a request
            // leaves no earlier than its schedule; `poll_timeout` then names that time.
            if let Some(cc) = self.cc.as_mut() {
                let work = self.rec.probe_one
                    || !self.req.sr_tx.resend.is_empty()
                    || self.req.cursor < self.sq.len();
                if work && !cc.may_send(now) {
                    self.paced = true;
                    return None;
                }
            }
            self.paced = false;
            if self.rec.probe_one && ty == Service::Rc {
                if let Some(t) = self.send_probe(now, mem, buf) {
                    return Some(t);
                }
                continue;
            }
            // Selective repeat (docs/wire.md §5.6): single resends go before new packets
            // and outside the window (each replaces a lost one).
            if let Some(psn) = self.req.sr_tx.resend.pop_front() {
                if psn.is_before(self.comp.unacked) || !psn.is_before(self.req.next_psn) {
                    continue;
                }
                if let Some(t) = self.send_single(now, psn, mem, buf) {
                    self.sr_note_resent(psn, now);
                    return Some(t);
                }
                continue;
            }
            let idx = self.req.cursor;
            let wqe = self.sq.get(idx)?;
            if wqe.wr.opcode.is_local() {
                // Only once every earlier WR has completed (rxe executes local operations
                // in order too, `rxe_do_local_ops`); then it completes without a packet.
                if idx > 0 || state == QpState::Sqd {
                    return None;
                }
                self.execute_local(mem);
                continue;
            }
            if !wqe.started {
                // SQD: in-flight WQEs finish, no new ones start (docs/wire.md §6.2 notes).
                if state == QpState::Sqd {
                    return None;
                }
                // rxe fences on all prior WQEs (docs/wire.md §5.2).
                if wqe.wr.flags.contains(SendFlags::FENCE) && idx > 0 {
                    return None;
                }
                if ty == Service::Rc && wqe.wr.opcode.is_read_or_atomic() {
                    if self.attr.max_rd_atomic == 0 {
                        // No initiator depth at all: this WQE can never be sent.
                        self.fail_at(idx, TransportError::LocalQpOperation);
                        continue;
                    }
                    if self.req.rd_atomic_outstanding >= u32::from(self.attr.max_rd_atomic) {
                        return None;
                    }
                }
                // End-to-end credits (docs/wire.md §4.2): a receive-consuming message waits
                // while SSN > LSN, unless nothing is outstanding (then it probes; the
                // responder answers RNR NAK if it really has no WQE).
                if ty == Service::Rc && wqe.wr.opcode.consumes_rwqe() {
                    if let Some(lsn) = self.comp.lsn {
                        if self.req.next_ssn.diff(lsn) > 0 && idx > 0 {
                            return None;
                        }
                    }
                }
            }
            if ty == Service::Rc
                && self.req.next_psn.diff(self.comp.unacked) >= self.window() as i32
            {
                return None;
            }
            let n = if max_pkts > 1 {
                self.run_len(max_pkts, buf.len()).max(1)
            } else {
                1
            };
            match self.build_request(now, mem, buf, n) {
                Ok(t) => return Some(t),
                Err(BuildError::Buffer) => {
                    self.counters.send_err += 1;
                    return None;
                }
                Err(BuildError::Wqe(err)) => {
                    self.counters.send_err += 1;
                    self.fail_at(self.req.cursor, err);
                }
            }
        }
    }

    /// Run the local operation at the front of the SQ: BIND_MW (failure: MW_BIND_ERR) or
    /// LOCAL_INV (failure: LOC_QP_OP_ERR, as rxe); a failure moves the QP to ERR (RC) or
    /// SQE (UC) like any local error.
    fn execute_local<M: Memory + ?Sized>(&mut self, mem: &mut M) {
        let Some(w) = self.sq.front() else {
            return;
        };
        let qpn = self.cfg.qpn;
        let result = match w.wr.opcode {
            WrOpcode::BindMw => mem
                .bind_mw(qpn, &w.wr.mw_bind())
                .map_err(|_| TransportError::MwBind),
            _ => mem
                .invalidate_local(qpn, w.wr.invalidate_rkey)
                .map_err(|_| TransportError::LocalQpOperation),
        };
        match result {
            Ok(()) => {
                if let Some(done) = self.sq.pop_front() {
                    self.complete_send(&done, WcStatus::Success);
                }
            }
            Err(err) => {
                self.counters.send_err += 1;
                self.fail_at(0, err);
            }
        }
    }

    /// AckReq at least every this many packets: `max_pkts_per_ack`, and every half window,
    /// so that a small window slides on ACKs instead of stopping and waiting.
    fn ack_every(&self) -> u32 {
        let every = self.cfg.max_pkts_per_ack.min((self.window() / 2).max(1));
        // While DCQCN paces this QP (docs/wire.md §11.3), packets leave slowly: a packet
        // would otherwise wait for the acknowledgement of an AckReq packet sent up to half a
        // window later, and the round-trip-estimated retransmission timer would resend it
        // needlessly. So request an ACK every few packets.
        if self.cc.as_ref().is_some_and(crate::Dcqcn::is_active) {
            every.min(PACED_ACK_EVERY)
        } else {
            every
        }
    }

    /// How many packets of the WQE at the cursor may leave now as one [`crate::Run`] (at
    /// least 2; 0 when they must go one by one) into a buffer of `buf_len` bytes, at most
    /// `max`: an RC WRITE or SEND that is not a retransmission, with no selective repeat, no
    /// active DCQCN pacing and no XRC, as far as the window allows, and never the last
    /// packet when it carries immediate data, an invalidation or the solicited bit. The
    /// checks [`Qp::requester_transmit`] makes before a packet are made by the caller. A
    /// run ends at the packet that asks for an ACK, so its packets ask where single ones
    /// would.
    pub(crate) fn run_len(&self, max: u32, buf_len: usize) -> u32 {
        let mtu = self.mtu();
        let Some(wqe) = self.sq.get(self.req.cursor) else {
            return 0;
        };
        // Most messages are one packet: say so first.
        if wqe.len <= mtu
            || self.cfg.service != Service::Rc
            || self.cfg.xrc.is_some()
            || self.sr_active()
            || self.cc.as_ref().is_some_and(crate::Dcqcn::is_active)
            || self.req.next_psn.is_before(self.req.sent_high)
        {
            return 0;
        }
        let op = wqe.wr.opcode;
        if !(op.is_send() || op.is_write()) {
            return 0;
        }
        let first_psn = if wqe.started {
            wqe.first_psn
        } else {
            self.req.next_psn
        };
        let done = self.req.next_psn.diff(first_psn).max(0) as u32;
        let mut left = wqe.npkts(mtu).saturating_sub(done);
        let extras = op.has_imm()
            || op == WrOpcode::SendWithInv
            || wqe.wr.flags.contains(SendFlags::SOLICITED);
        if extras {
            left = left.saturating_sub(1);
        }
        let flight = self.req.next_psn.diff(self.comp.unacked).max(0) as u32;
        let room = self.window().saturating_sub(flight);
        let fits = buf_len.saturating_sub(crate::MAX_HEADER_LEN + 4) / mtu as usize;
        // A run ends at the packet that would ask for an ACK by count (or is one packet,
        // when the next asks anyway), so that its packets ask where single ones would.
        let until_ack = if self.req.ack_req_next {
            1
        } else {
            self.ack_every()
                .saturating_sub(self.req.pkts_since_ackreq)
                .max(1)
        };
        let n = left
            .min(room)
            .min(max)
            .min(until_ack)
            .min(u32::try_from(fits).unwrap_or(u32::MAX));
        if n >= 2 {
            n
        } else {
            0
        }
    }

    /// Build the packet at `self.req.next_psn` of the WQE at `self.req.cursor` into `buf`
    /// (rxe `init_req_packet` and `finish_packet`: segment by path MTU, headers, payload from
    /// memory) — or, with `n` > 1, a run of `n` packets ([`Qp::run_len`] allows it) — then
    /// commit it ([`Qp::update_state`]). The QP changes only if it succeeds.
    fn build_request<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        mem: &mut M,
        buf: &mut [u8],
        n: u32,
    ) -> Result<Transmit, BuildError> {
        let mtu = self.mtu();
        let ty = self.cfg.service;
        let idx = self.req.cursor;
        let next_psn = self.req.next_psn;
        let wqe = self
            .sq
            .get(idx)
            .ok_or(BuildError::Wqe(TransportError::Internal))?;
        let (first_psn, last_psn) = if wqe.started {
            (wqe.first_psn, wqe.last_psn)
        } else {
            let npkts = match ty {
                Service::Ud => 1,
                _ => wqe.npkts(mtu),
            };
            (next_psn, next_psn.add(npkts - 1))
        };
        let pkt_index = next_psn.diff(first_psn);
        if pkt_index < 0 || next_psn.is_after(last_psn) {
            // The cursor and PSNs disagree: cannot happen by construction; fail safe.
            return Err(BuildError::Wqe(TransportError::Internal));
        }
        let op = wqe.wr.opcode;
        let len = u64::from(wqe.len);
        let offset = pkt_index as u64 * u64::from(mtu);
        let n = if op.is_read_or_atomic() { 1 } else { n.max(1) };
        let span = u64::from(mtu) * u64::from(n);
        // `last`: the message's last packet is in this buffer (a run's is its own last).
        let (first, last, plen) = if op.is_read_or_atomic() {
            (true, true, 0usize)
        } else {
            let rest = len.saturating_sub(offset);
            (offset == 0, rest <= span, rest.min(span) as usize)
        };
        // A run's headers are its first packet's, which is never the message's last.
        let single = n == 1;
        let mut opcode = request_opcode(ty, op, first, last && single);
        if self.cfg.xrc.is_some() {
            opcode = opcode.rc_to_xrc();
        }
        let hl = header_len(opcode);
        if buf.len() < hl + plen + 3 {
            return Err(BuildError::Buffer);
        }

        // Payload straight from memory into the transmit buffer (one copy, like DMA).
        if plen > 0 {
            let dst = &mut buf[hl..hl + plen];
            match &wqe.wr.local {
                LocalData::Inline(_) | LocalData::InlineData(_) => {
                    let bytes = wqe.wr.local.inline_bytes().unwrap_or(&[]);
                    let src = usize::try_from(offset)
                        .ok()
                        .and_then(|o| bytes.get(o..o + plen))
                        .ok_or(BuildError::Wqe(TransportError::LocalLength))?;
                    dst.copy_from_slice(src);
                }
                LocalData::Sges(sges) => {
                    for_each_piece(sges.as_slice(), offset, plen, |sge, off, n, at| {
                        let addr = sge
                            .addr
                            .checked_add(off)
                            .ok_or(crate::MemError::OutOfBounds)?;
                        mem.read_local_to_packet(sge.lkey, addr, &mut dst[at..at + n], hl + at)
                    })
                    .map_err(|_| BuildError::Wqe(TransportError::LocalProtection))?;
                }
            }
        }

        let dest_qpn = match wqe.wr.ud {
            Some(ud) => ud.remote_qpn,
            None => self.dest_qpn(),
        };
        let mut bth = BthRepr::new(opcode, dest_qpn, next_psn);
        bth.pkey = self.cfg.pkey;
        // AckReq on the last packet of a message, after `max_pkts_per_ack` packets without
        // one (rxe), and on the packet that fills the window — otherwise a window-stalled
        // requester would wait for an ACK the responder has no reason to send — and every
        // half window, so that a small window slides on ACKs instead of stopping and waiting.
        let window = self.window();
        let fills_window = next_psn.add(n).diff(self.comp.unacked) >= window as i32;
        let every = self.ack_every();
        let ack_req = ty == Service::Rc
            && (last
                || fills_window
                || self.req.ack_req_next
                || self.req.pkts_since_ackreq.saturating_add(n) >= every);
        // A run asks through `Run::ack_req`: its headers are its first packet's.
        bth.ack_req = ack_req && single;
        bth.solicited = last
            && single
            && wqe.wr.flags.contains(SendFlags::SOLICITED)
            && (op.is_send() || op == WrOpcode::RdmaWriteWithImm);
        let mut hdr = RocePacketRepr::new(bth, &[]);
        let w = &wqe.wr;
        if self.cfg.xrc.is_some() {
            hdr.xrceth = Some(XrcEthRepr {
                srqn: w.xrc_srqn & wire::xrceth::MAX_SRQN,
            });
        }
        match op {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm if first => {
                hdr.reth = Some(RethRepr {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    len: wqe.len,
                });
            }
            WrOpcode::RdmaRead => {
                // A retried READ asks only for what is still missing (docs/wire.md §5.2).
                hdr.reth = Some(RethRepr {
                    va: w.remote_addr.wrapping_add(offset),
                    rkey: w.rkey,
                    len: (len - offset.min(len)) as u32,
                });
            }
            WrOpcode::AtomicCmpAndSwp => {
                hdr.atomic_eth = Some(AtomicEthRepr {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    swap_add: w.swap,
                    compare: w.compare_add,
                });
            }
            WrOpcode::AtomicFetchAndAdd => {
                hdr.atomic_eth = Some(AtomicEthRepr {
                    va: w.remote_addr,
                    rkey: w.rkey,
                    swap_add: w.compare_add,
                    compare: 0,
                });
            }
            _ => {}
        }
        if last && single && op.has_imm() {
            hdr.immdt = Some(ImmDt(w.imm_data));
        }
        if last && single && op == WrOpcode::SendWithInv {
            hdr.ieth = Some(IethRepr {
                rkey: w.invalidate_rkey,
            });
        }
        if let Some(ud) = w.ud {
            // IBA 10.2.5: a Q_Key with the high bit set means "use the QP's own Q_Key".
            let qkey = if ud.remote_qkey.0 & 0x8000_0000 != 0 {
                self.qkey()
            } else {
                ud.remote_qkey
            };
            hdr.deth = Some(DethRepr {
                qkey,
                src_qp: self.cfg.qpn,
            });
        }
        let ah = w.ud.map(|u| u.ah);
        let mut compact = if self.req.headers_only {
            crate::ReqHeaders::of(&hdr)
        } else {
            None
        };
        let total = match compact.as_mut() {
            Some(h) => {
                let pad = wire::roce::pad_for(plen);
                h.bth.pad_count = pad;
                hl + plen + usize::from(pad)
            }
            None => finish_in_place(&hdr, plen, buf).ok_or(BuildError::Buffer)?,
        };

        self.update_state(
            now,
            Sent {
                idx,
                first_psn,
                last_psn,
                psn: next_psn,
                n,
                op,
                ack_req,
                last,
            },
        )?;
        Ok(Transmit {
            len: total,
            ah,
            dest_qpn,
            run: (!single).then_some(crate::Run {
                pkts: n,
                ends_message: last,
                ack_req,
            }),
            hdr: compact,
        })
    }

    /// Commit a packet just built (rxe `update_wqe_state` / `update_state`): assign the WQE
    /// its PSNs and SSN on its first packet, count it, feed the round-trip estimator, advance
    /// `next_psn` and the cursor, complete an unreliable WR on its last packet, and make sure
    /// the RC timers run.
    fn update_state(&mut self, now: Time, sent: Sent) -> Result<(), BuildError> {
        let Sent {
            idx,
            first_psn,
            last_psn,
            psn: next_psn,
            n,
            op,
            ack_req,
            last,
        } = sent;
        let ty = self.cfg.service;
        let is_read = op == WrOpcode::RdmaRead;
        let Some(wqe) = self.sq.get_mut(idx) else {
            return Err(BuildError::Wqe(TransportError::Internal));
        };
        if !wqe.started {
            wqe.started = true;
            wqe.first_psn = first_psn;
            wqe.last_psn = last_psn;
            wqe.ssn = self.req.next_ssn;
            self.req.next_ssn = self.req.next_ssn.next();
            if ty == Service::Rc && op.is_read_or_atomic() {
                self.req.rd_atomic_outstanding += 1;
            }
            if is_read || op.is_write() {
                self.counters.rdma_sends += 1;
            }
        }
        let fresh = !next_psn.is_before(self.req.sent_high);
        if !fresh {
            self.counters.retransmissions += 1;
        }
        if ty == Service::Rc && ack_req {
            // With selective repeat a packet sent behind a known hole is acknowledged when
            // the hole is repaired: not a sample of the path's round trip.
            let timed = fresh && !self.sr_hole_known();
            self.rec.on_send(next_psn.add(n - 1), now, timed);
        }
        self.req.next_psn = if is_read {
            last_psn.next()
        } else {
            next_psn.add(n)
        };
        if self.req.next_psn.is_after(self.req.sent_high) {
            self.req.sent_high = self.req.next_psn;
        }
        if ty == Service::Rc {
            self.rec.on_sent(self.req.next_psn);
        }
        self.req.ack_req_next = false;
        self.req.pkts_since_ackreq = if ack_req {
            0
        } else {
            self.req.pkts_since_ackreq.saturating_add(n)
        };
        if last {
            match ty {
                Service::Rc => self.req.cursor += 1,
                // Unreliable: the WR is done once its last packet is on the wire.
                Service::Uc | Service::Ud => {
                    if let Some(done) = self.sq.pop_front() {
                        self.complete_send(&done, WcStatus::Success);
                    }
                }
            }
        }
        if ty == Service::Rc && self.retrans_deadline.is_none() {
            self.arm_retrans(now);
        }
        if ty == Service::Rc && self.rec.probe_deadline.is_none() {
            self.arm_probe(now);
        }
        Ok(())
    }

    /// Packets the requester may have outstanding now.
    pub(crate) fn window(&self) -> u32 {
        self.rec.cwnd.clamp(1, self.window_limit())
    }

    /// The most packets the requester ever has outstanding: `max_unacked_psns`, or with
    /// selective repeat the responder's reassembly window (docs/wire.md §5.6), which lets a
    /// late packet hold the cumulative ACK back without stopping the sender.
    pub(crate) fn window_limit(&self) -> u32 {
        let n = self.cfg.max_unacked_psns.max(1);
        if self.sr_active() {
            n.max(crate::sr::SR_WINDOW)
        } else {
            n
        }
    }

    /// (Re)start the local ACK timer (4.096 µs × 2^timeout; 0 = none).
    pub(crate) fn arm_retrans(&mut self, now: Time) {
        self.retrans_deadline = local_ack_timeout_ns(self.attr.timeout).map(|t| now.add_nanos(t));
    }

    /// (Re)start the retransmission timer: one RTO (at most a sixteenth of the local ACK
    /// timeout before backoff) from `now`, unless the local ACK timer fires first anyway (or
    /// no round trip has been measured yet).
    pub(crate) fn arm_probe(&mut self, now: Time) {
        // While DCQCN limits the rate (docs/wire.md §11.3) the path is congested and its
        // round trip is mostly queueing, which varies by milliseconds: a probe capped at a
        // sixteenth of the local ACK timeout would fire while the packet still waits in a
        // queue and start a go-back-N that only adds to it. So the cap is a quarter then.
        let div = if self.cc.as_ref().is_some_and(crate::Dcqcn::is_active) {
            4
        } else {
            16
        };
        let cap = local_ack_timeout_ns(self.attr.timeout).map_or(u64::MAX, |t| t / div);
        self.rec.probe_deadline = self
            .rec
            .rto_ns(self.cfg.min_rto_ns, cap)
            .map(|t| now.add_nanos(t))
            .filter(|d| self.retrans_deadline.is_none_or(|ibta| *d < ibta));
    }

    /// Packets sent and not acknowledged.
    pub(crate) fn flight(&self) -> u32 {
        u32::try_from(self.req.sent_high.diff(self.comp.unacked)).unwrap_or(0)
    }

    /// PSNs sent and not acknowledged.
    pub(crate) fn outstanding(&self) -> bool {
        self.comp.unacked.is_before(self.req.sent_high)
    }

    /// Real progress (a valid ACK or response advanced): reload both retry counters
    /// (docs/wire.md §5.2) and restart the timer while anything is outstanding.
    pub(crate) fn progress(&mut self, now: Time) {
        self.comp.retry_left = self.attr.retry_cnt;
        self.comp.rnr_left = self.attr.rnr_retry;
        self.comp.retried_since_progress = false;
        self.rec.probe_one = false;
        self.sr_progress();
        let newly = u32::try_from(self.comp.unacked.diff(self.rec.una)).unwrap_or(0);
        self.rec.una = self.comp.unacked;
        if self.rec.undo_if_spurious(self.comp.unacked) {
            self.counters.spurious_timeouts += 1;
        }
        self.rec.measure(self.comp.unacked, now);
        self.rec
            .on_ack(newly, self.comp.unacked, self.window_limit());
        if self.req.next_psn.is_before(self.comp.unacked) {
            self.req.next_psn = self.comp.unacked;
        }
        if self.outstanding() && self.rnr_until.is_none() {
            self.arm_retrans(now);
            self.arm_probe(now);
        } else {
            self.retrans_deadline = None;
            self.rec.probe_deadline = None;
        }
    }

    /// Use one transport retry; `false` when the counter is exhausted.
    pub(crate) fn consume_retry(&mut self) -> bool {
        if self.attr.retry_cnt == 7 && self.cfg.retry_cnt_7_infinite {
            return true;
        }
        if self.comp.retry_left == 0 {
            return false;
        }
        self.comp.retry_left -= 1;
        true
    }

    /// Go-back-N: resend from the oldest unacknowledged PSN. The first WQE resumes mid-message
    /// (SEND/WRITE skip acknowledged packets; READ asks for the missing bytes); later WQEs are
    /// resent whole, with the PSNs they had (docs/wire.md §5.2, rxe `req_retry`).
    pub(crate) fn start_retry(&mut self, now: Time) {
        self.go_back();
        if self.outstanding() {
            self.arm_retrans(now);
            self.arm_probe(now);
        }
    }

    /// Resend from the oldest unacknowledged PSN on.
    fn go_back(&mut self) {
        self.rec.probe_one = false;
        self.req.sr_tx.resend.clear();
        self.req.cursor = 0;
        self.req.next_psn = self.comp.unacked;
        self.req.pkts_since_ackreq = 0;
    }

    /// Retry after a NAK or an implied NAK. `false` if the retry counter was exhausted (the
    /// QP is then in ERR).
    pub(crate) fn nak_retry(&mut self, now: Time) -> bool {
        self.comp.retried_since_progress = true;
        self.counters.completer_retry_err += 1;
        self.rec.on_loss(
            self.flight(),
            self.req.sent_high,
            false,
            self.cfg.min_window,
        );
        if !self.consume_retry() {
            self.counters.retry_exceeded_err += 1;
            self.fail_front(TransportError::RetryExceeded);
            return false;
        }
        self.start_retry(now);
        true
    }

    /// The requester's timers.
    pub(crate) fn requester_timeout(&mut self, now: Time) {
        if !matches!(self.attr.qp_state, QpState::Rts | QpState::Sqd) {
            self.retrans_deadline = None;
            self.rec.probe_deadline = None;
            self.rnr_until = None;
            return;
        }
        if let Some(t) = self.rnr_until {
            if now >= t {
                // RNR wait over: resend from the NAK'd PSN (docs/wire.md §5.2).
                self.rnr_until = None;
                self.start_retry(now);
            }
            return;
        }
        if !self.outstanding() {
            self.retrans_deadline = None;
            self.rec.probe_deadline = None;
            return;
        }
        if self.retrans_deadline.is_none_or(|d| now < d) {
            if self.rec.probe_deadline.is_some_and(|d| now >= d) {
                self.probe(now);
            }
            return;
        }
        self.counters.local_ack_timeouts += 1;
        if !self.consume_retry() {
            self.counters.retry_exceeded_err += 1;
            self.fail_front(TransportError::RetryExceeded);
            return;
        }
        if self.sr_active() && self.req.sr_tx.timeouts == 0 {
            // Selective repeat: the first timeout without progress resends the oldest
            // unacknowledged packet alone; a second one goes back N (docs/wire.md §5.6).
            self.req.sr_tx.timeouts = 1;
            self.rec.on_loss(
                self.flight(),
                self.req.sent_high,
                false,
                self.cfg.min_window,
            );
            self.rec.probe_one = true;
            self.arm_retrans(now);
            self.arm_probe(now);
            return;
        }
        // The path just lost a whole window: resend one packet and grow on each ACK
        // (slow start) instead of resending the full window into it.
        self.rec
            .on_loss(self.flight(), self.req.sent_high, true, self.cfg.min_window);
        self.start_retry(now);
    }

    /// The retransmission timer fired before the local ACK timer: the tail of what was sent
    /// (or its ACK, or a NAK, or a resend) was lost, or the round trip is longer than it
    /// was. First resend the oldest unacknowledged packet alone, with AckReq: the responder
    /// executes it if it was missing and re-ACKs it as a duplicate otherwise, and in both
    /// cases answers with the PSN it expects; the window is left as it was, so a probe that
    /// only beat a late ACK costs one packet. If that probe goes unanswered too, the path is
    /// losing: go back to the oldest unacknowledged PSN with a window of one packet. No
    /// retry is used and the local ACK timer keeps running from the last progress.
    fn probe(&mut self, now: Time) {
        self.counters.rto_probes += 1;
        if self.rec.backed_off() && !self.sr_active() {
            self.rec
                .on_loss(self.flight(), self.req.sent_high, true, self.cfg.min_window);
            // Sequence NAKs sent before this resend arrives are stale.
            self.comp.retried_since_progress = true;
            self.go_back();
        } else {
            self.rec.probe_one = true;
        }
        self.rec.back_off();
        self.arm_probe(now);
    }

    /// Build the first probe: the packet at the oldest unacknowledged PSN, with AckReq,
    /// leaving the resume point of the send queue where it was.
    fn send_probe<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.rec.probe_one = false;
        if !self.outstanding() {
            return None;
        }
        let t = self.send_single(now, self.comp.unacked, mem, buf);
        if t.is_some() && self.sr_active() {
            self.sr_note_resent(self.comp.unacked, now);
        }
        t
    }

    /// Resend the packet at `psn` (sent before, not acknowledged) alone, with AckReq,
    /// leaving the resume point of the send queue where it was.
    fn send_single<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        psn: wire::Psn,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let idx = self.wqe_index_of(psn)?;
        let (cursor, next_psn, since) = (
            self.req.cursor,
            self.req.next_psn,
            self.req.pkts_since_ackreq,
        );
        self.req.cursor = idx;
        self.req.next_psn = psn;
        self.req.pkts_since_ackreq = u32::MAX - 1;
        let r = self.build_request(now, mem, buf, 1);
        self.req.cursor = cursor;
        self.req.next_psn = next_psn;
        self.req.pkts_since_ackreq = since;
        match r {
            Ok(t) => Some(t),
            Err(BuildError::Buffer) => {
                self.counters.send_err += 1;
                None
            }
            Err(BuildError::Wqe(err)) => {
                self.counters.send_err += 1;
                self.fail_at(idx, err);
                None
            }
        }
    }

    /// The WQE at `idx` failed locally: earlier WQEs are flushed, it completes with `err`'s
    /// status, the QP goes to ERR (RC) or SQE (UC/UD).
    pub(crate) fn fail_at(&mut self, idx: usize, err: TransportError) {
        for _ in 0..idx {
            if let Some(w) = self.sq.pop_front() {
                self.complete_send(&w, TransportError::Flushed.wc_status());
            }
        }
        self.fail_front(err);
    }
}
