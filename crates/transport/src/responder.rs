//! The responder (rxe_resp.c): PSN checks, opcode-sequence, access, length and R_Key checks,
//! receive-WQE consumption (RNR NAK when none), placement of SEND/WRITE data, READ and ATOMIC
//! execution with saved results for duplicates, ACK coalescing and NAK generation; plus the
//! UC and UD variants (docs/wire.md §5.3, §5.4).

use wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, Msn, NakCode, OpKind, Opcode, OpcodeInfo, Position, Psn,
    Rkey, RocePacketRepr, Syndrome,
};

use crate::error::TransportError;
use crate::mem::{for_each_piece, AtomicOp, MemError, Memory, RemoteAccess};
use crate::packet::{finish_in_place, header_len, read_response_opcode};
use std::collections::VecDeque;

use crate::qp::{HeldRecv, Qp, RecvQueue, RxMeta, Transmit, MAX_MSG_LEN};
use crate::state::{AccessFlags, QpState, Service};
use crate::time::Time;
use crate::{WcFlags, WcOpcode, WcStatus};

/// A multi-packet request message in progress at the responder.
#[derive(Debug, Clone, Copy)]
pub(crate) enum InMsg {
    Send {
        received: u32,
    },
    Write {
        rkey: Rkey,
        va: u64,
        len: u32,
        received: u32,
    },
}

/// A saved READ/ATOMIC result for duplicate requests (responder resources).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    Read {
        first_psn: Psn,
        last_psn: Psn,
        va: u64,
        rkey: Rkey,
        len: u32,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// A response waiting to be transmitted, in PSN order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Response {
    Ack {
        psn: Psn,
        syndrome: wire::Syndrome,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
    Read {
        psn: Psn,
        va: u64,
        rkey: Rkey,
        remaining: u32,
        first: bool,
    },
}

/// Responder state (rxe `struct rxe_resp_info`, rxe_resp.c).
#[derive(Debug, Default)]
pub(crate) struct Responder {
    /// Expected PSN of the next new request (ePSN, rxe `resp.psn`).
    pub(crate) epsn: Psn,
    /// Message sequence number carried in AETHs (rxe `resp.msn`).
    pub(crate) msn: Msn,
    /// A sequence NAK for the current gap went out (rxe `resp.sent_psn_nak`).
    pub(crate) nak_sent: bool,
    /// The multi-packet message in progress (rxe tracks it in `resp.opcode`, `resp.va`,
    /// `resp.resid`).
    pub(crate) in_msg: Option<InMsg>,
    /// The receive WQE the message in progress consumes (rxe `resp.wqe`).
    pub(crate) held: Option<HeldRecv>,
    /// Saved READ/ATOMIC results for duplicate requests (rxe `resp.resources`).
    pub(crate) resources: VecDeque<Resource>,
    /// Responses waiting to be transmitted, in PSN order.
    pub(crate) responses: VecDeque<Response>,
    /// The NAK a responder error leaves behind, sent even though the QP is in ERR.
    pub(crate) last_gasp: Option<Response>,
    /// UC: drop packets until the next FIRST/ONLY (rxe `resp.drop_msg`).
    pub(crate) uc_drop: bool,
    /// Selective repeat: requests kept ahead of ePSN (sr.rs).
    pub(crate) sr_rx: crate::sr::SrStore,
}

/// Marker syndrome for a plain ACK in the response queue; the credit count is filled in when
/// the ACK is transmitted.
const PLAIN_ACK: Syndrome = Syndrome::ACK_UNLIMITED;

impl Qp {
    pub(crate) fn responder_handle<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        meta: &RxMeta,
        mem: &mut M,
        srq: Option<&mut dyn RecvQueue>,
    ) {
        match self.cfg.service {
            Service::Rc => {
                if self.sr_active() {
                    self.resp.sr_rx.tick(now);
                }
                self.rc_request(pkt, info, mem, srq)
            }
            Service::Uc => self.uc_request(pkt, info, mem, srq),
            Service::Ud => self.ud_request(pkt, meta, mem, srq),
        }
    }

    /// Bound on queued responses: READ streams and atomic ACKs are bounded by
    /// `max_dest_rd_atomic` on a well-behaved peer; ACKs coalesce. Selective repeat adds
    /// room for the NAKs that name holes (a burst of arrivals can show many at once).
    pub(crate) fn responses_cap(&self) -> usize {
        let sr = if self.sr_active() { 64 } else { 0 };
        2 * usize::from(self.attr.max_dest_rd_atomic) + 16 + sr
    }

    /// Take a receive WQE: the one held from an abandoned UC message, else the QP's RQ or the
    /// SRQ.
    fn take_rwqe(&mut self, srq: &mut Option<&mut dyn RecvQueue>) -> Option<HeldRecv> {
        if let Some(h) = self.resp.held.take() {
            return Some(h);
        }
        if self.cfg.uses_srq {
            let wr = srq.as_deref_mut()?.pop()?;
            Some(HeldRecv { wr, from_srq: true })
        } else {
            let wr = self.rq.pop_front()?;
            Some(HeldRecv {
                wr,
                from_srq: false,
            })
        }
    }

    /// Queue an ACK for `psn`, merged into a plain ACK still waiting at the tail (ACK
    /// coalescing: one cumulative ACK covers them all).
    pub(crate) fn push_ack(&mut self, psn: Psn) {
        if let Some(Response::Ack { psn: q, syndrome }) = self.resp.responses.back_mut() {
            if *syndrome == PLAIN_ACK {
                if psn.is_after(*q) {
                    *q = psn;
                }
                return;
            }
        }
        self.resp.responses.push_back(Response::Ack {
            psn,
            syndrome: PLAIN_ACK,
        });
    }

    /// A request was executed: advance ePSN, ACK if asked (otherwise the ACK is deferred and a
    /// later cumulative ACK covers it).
    fn finish_request(&mut self, p: Psn, ack_req: bool) {
        self.resp.epsn = p.next();
        self.resp.nak_sent = false;
        if ack_req {
            self.push_ack(p);
        } else {
            self.counters.ack_deferred += 1;
        }
    }

    /// IBTA class C/J responder error: NAK the request with `code`, complete a held receive
    /// WQE with `recv_err`'s status (error.rs explains why the two differ), and move the QP
    /// to ERR. The NAK still goes out (`last_gasp`).
    fn responder_fatal(&mut self, p: Psn, code: NakCode, recv_err: TransportError) {
        self.counters.send_nak += 1;
        if let Some(h) = self.resp.held.take() {
            let c = self.recv_completion(h.wr.wr_id, recv_err.wc_status(), WcOpcode::Recv);
            self.complete_recv(h, c);
        }
        self.enter_error(true);
        self.resp.last_gasp = Some(Response::Ack {
            psn: p,
            syndrome: Syndrome::nak(code),
        });
    }

    fn rnr(&mut self, p: Psn) {
        // RNR NAK: nothing else changes; further packets of this burst are dropped until the
        // requester comes back at ePSN (no sequence NAK on top).
        self.counters.send_rnr_err += 1;
        self.resp.nak_sent = true;
        self.resp.responses.push_back(Response::Ack {
            psn: p,
            syndrome: Syndrome::rnr_nak(self.attr.min_rnr_timer),
        });
    }

    /// An RC request: first the PSN check (rxe `check_psn`) — ahead of ePSN is a sequence
    /// error (or, with selective repeat, kept for later), behind it a duplicate — then, at
    /// ePSN, execution ([`Qp::rc_execute`]).
    fn rc_request<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        mem: &mut M,
        mut srq: Option<&mut dyn RecvQueue>,
    ) {
        let p = pkt.bth.psn;
        let d = p.diff(self.resp.epsn);
        if d > 0 && self.sr_active() {
            // Selective repeat (docs/wire.md §5.6): keep it for later, in order. It needs
            // no answer now, so a full response queue does not drop it.
            self.counters.out_of_seq_request += 1;
            self.sr_keep(pkt);
            // ePSN may be held already (a drain stopped by a full response queue).
            return self.sr_drain(mem, &mut srq);
        }
        if self.resp.responses.len() >= self.responses_cap() {
            // No room to answer: drop; the requester retries.
            self.counters.dropped_pkts += 1;
            return;
        }
        if d > 0 {
            // Ahead of ePSN: one sequence NAK per gap (rxe `sent_psn_nak`).
            self.counters.out_of_seq_request += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                self.counters.send_nak += 1;
                self.resp.responses.push_back(Response::Ack {
                    psn: self.resp.epsn,
                    syndrome: Syndrome::nak(NakCode::PSN_SEQ_ERROR),
                });
            }
            return;
        }
        if d < 0 {
            self.counters.duplicate_request += 1;
            if self.sr_active() {
                self.resp.sr_rx.duplicate(p);
            }
            self.rc_duplicate(pkt, info);
            return;
        }
        if self.sr_active() {
            self.resp.sr_rx.arrived_in_order(p);
        }
        self.rc_execute(pkt, info, mem, &mut srq);
        if self.sr_active() {
            self.sr_drain(mem, &mut srq);
        }
    }

    /// Execute the request at ePSN: the rxe_resp.c steps after `check_psn` — the request
    /// checks ([`Qp::rc_check_request`]), then the operation (`rc_send`, `rc_write`,
    /// `rc_read`, `rc_atomic`), each of which places data, completes the receive WQE and
    /// queues its acknowledgement or response.
    pub(crate) fn rc_execute<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        mem: &mut M,
        srq: &mut Option<&mut dyn RecvQueue>,
    ) {
        if !self.rc_check_request(pkt, info, srq.is_some()) {
            // Class C (docs/wire.md §5.3).
            return self.responder_fatal(
                pkt.bth.psn,
                NakCode::INVALID_REQUEST,
                TransportError::RemoteInvalidRequest,
            );
        }
        match info.kind {
            OpKind::Send => self.rc_send(pkt, mem, srq, false),
            OpKind::RdmaWrite => self.rc_write(pkt, mem, srq, false),
            OpKind::ReadRequest => self.rc_read(pkt, mem),
            OpKind::CompareSwap | OpKind::FetchAdd => self.rc_atomic(pkt, info, mem),
            _ => self.counters.dropped_pkts += 1,
        }
    }

    /// The checks an in-sequence RC request passes before it runs; `false` means NAK Invalid
    /// Request. In rxe_resp.c order: the XRC target's SRQ, `check_op_seq`, `check_op_valid`
    /// with `check_resource`'s READ/ATOMIC depth, `check_length`. The R_Key and the receive
    /// WQE are checked by the operation itself.
    fn rc_check_request(
        &self,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        has_srq: bool,
    ) -> bool {
        // XRC target: the XRCETH must name an SRQ of the QP's XRC domain (the engine passes
        // it, or none when it names nothing valid); otherwise Invalid Request (IBTA XRC annex).
        if self.cfg.xrc.is_some() && !has_srq {
            return false;
        }
        self.check_op_seq(info)
            && self.check_op_valid(info)
            && self.payload_len_ok(info.position, pkt.payload.len())
    }

    /// Opcode sequence: a FIRST/ONLY starts a message, a MIDDLE/LAST continues the one in
    /// progress of the same kind (rxe `check_op_seq`).
    fn check_op_seq(&self, info: &'static OpcodeInfo) -> bool {
        let pos = info.position;
        match self.resp.in_msg {
            Some(InMsg::Send { .. }) => info.kind == OpKind::Send && !pos.is_first(),
            Some(InMsg::Write { .. }) => info.kind == OpKind::RdmaWrite && !pos.is_first(),
            None => pos.is_first(),
        }
    }

    /// Access rights granted to the peer (rxe `check_op_valid`), and a nonzero responder
    /// depth for READ and ATOMIC (`max_dest_rd_atomic`).
    fn check_op_valid(&self, info: &'static OpcodeInfo) -> bool {
        let need = match info.kind {
            OpKind::RdmaWrite => Some(AccessFlags::REMOTE_WRITE),
            OpKind::ReadRequest => Some(AccessFlags::REMOTE_READ),
            OpKind::CompareSwap | OpKind::FetchAdd => Some(AccessFlags::REMOTE_ATOMIC),
            _ => None,
        };
        if need.is_some_and(|need| !self.attr.qp_access_flags.contains(need)) {
            return false;
        }
        !(matches!(
            info.kind,
            OpKind::ReadRequest | OpKind::CompareSwap | OpKind::FetchAdd
        ) && self.attr.max_dest_rd_atomic == 0)
    }

    /// Payload length against the packet's position (docs/wire.md §1.6, rxe `check_length`):
    /// FIRST and MIDDLE carry exactly one MTU, LAST one byte to one MTU, ONLY at most one MTU.
    fn payload_len_ok(&self, pos: Position, plen: usize) -> bool {
        let mtu = self.mtu() as usize;
        match pos {
            Position::First | Position::Middle => plen == mtu,
            Position::Last => (1..=mtu).contains(&plen),
            Position::Only => plen <= mtu,
            Position::NotApplicable => false,
        }
    }

    /// SEND FIRST/MIDDLE/LAST/ONLY, in sequence. `uc`: errors drop the message instead of
    /// NAKing.
    fn rc_send<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        mem: &mut M,
        srq: &mut Option<&mut dyn RecvQueue>,
        uc: bool,
    ) {
        let p = pkt.bth.psn;
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        if info.position.is_first() {
            match self.take_rwqe(srq) {
                Some(h) => self.resp.held = Some(h),
                None => {
                    if uc {
                        self.counters.rcv_no_wqe_drop += 1;
                        self.resp.uc_drop = true;
                    } else {
                        self.rnr(p);
                    }
                    return;
                }
            }
            self.resp.in_msg = Some(InMsg::Send { received: 0 });
        }
        let Some(InMsg::Send { received }) = self.resp.in_msg else {
            return;
        };
        let Some(held) = self.resp.held.as_ref() else {
            return;
        };
        let plen = pkt.payload.len();
        let cap = held.wr.sges.total_len();
        if u64::from(received) + plen as u64 > cap {
            // Receive buffer too small: local length error at the responder (IBTA), NAK
            // invalid request to the requester (rxe, docs/wire.md §5.3).
            if uc {
                return self.uc_abandon(Some(TransportError::LocalLength));
            }
            return self.responder_fatal(p, NakCode::INVALID_REQUEST, TransportError::LocalLength);
        }
        let r = for_each_piece(
            held.wr.sges.as_slice(),
            u64::from(received),
            plen,
            |sge, o, n, at| {
                let addr = sge.addr.checked_add(o).ok_or(MemError::OutOfBounds)?;
                mem.write_local_from_packet(
                    sge.lkey,
                    addr,
                    &pkt.payload[at..at + n],
                    pkt.header_len() + at,
                )
            },
        );
        if r.is_err() {
            if uc {
                return self.uc_abandon(Some(TransportError::LocalProtection));
            }
            return self.responder_fatal(
                p,
                NakCode::REMOTE_OPERATIONAL_ERROR,
                TransportError::LocalProtection,
            );
        }
        let received = received + plen as u32;
        if info.position.is_last() {
            let mut inv = None;
            if let Some(ieth) = pkt.ieth {
                if mem.invalidate(ieth.rkey).is_err() {
                    // Class J (docs/wire.md §5.3).
                    return self.responder_fatal(
                        p,
                        NakCode::INVALID_REQUEST,
                        TransportError::RemoteInvalidRequest,
                    );
                }
                inv = Some(ieth.rkey);
            }
            let imm = pkt.immdt.map(|i| i.0);
            if !self.finish_send_message(received, imm, inv, pkt.bth.solicited) {
                return;
            }
        } else {
            self.resp.in_msg = Some(InMsg::Send { received });
        }
        if uc {
            self.resp.epsn = p.next();
        } else {
            self.finish_request(p, pkt.bth.ack_req);
        }
    }

    /// A SEND message's last packet was taken: its held receive WQE completes with
    /// `byte_len` bytes (and the immediate data, invalidated R_Key and SE bit of that
    /// packet), and the message ends. `false` if no receive WQE was held.
    fn finish_send_message(
        &mut self,
        byte_len: u32,
        imm: Option<u32>,
        inv: Option<Rkey>,
        solicited: bool,
    ) -> bool {
        let Some(h) = self.resp.held.take() else {
            return false;
        };
        let mut flags = WcFlags::default();
        if inv.is_some() {
            flags |= WcFlags::WITH_INV;
        }
        if imm.is_some() {
            flags |= WcFlags::WITH_IMM;
        }
        let mut c = self.recv_completion(h.wr.wr_id, WcStatus::Success, WcOpcode::Recv);
        c.byte_len = byte_len;
        c.imm_data = imm;
        c.invalidated_rkey = inv;
        c.wc_flags = flags;
        c.solicited = solicited;
        self.complete_recv(h, c);
        self.resp.in_msg = None;
        self.resp.msn = self.resp.msn.next();
        true
    }

    /// RDMA WRITE FIRST/MIDDLE/LAST/ONLY (and WITH_IMMEDIATE), in sequence.
    fn rc_write<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        mem: &mut M,
        srq: &mut Option<&mut dyn RecvQueue>,
        uc: bool,
    ) {
        let p = pkt.bth.psn;
        let Some(info) = pkt.bth.opcode.info() else {
            return;
        };
        let mtu = self.mtu();
        let plen = pkt.payload.len() as u32;
        let pos = info.position;
        macro_rules! fail {
            ($code:expr) => {{
                if uc {
                    return self.uc_abandon(None);
                }
                return self.responder_fatal(p, $code, TransportError::RemoteInvalidRequest);
            }};
        }
        if pos.is_first() {
            let Some(reth) = pkt.reth else {
                fail!(NakCode::INVALID_REQUEST)
            };
            if u64::from(reth.len) > MAX_MSG_LEN
                || (pos == Position::Only && plen != reth.len)
                || (pos == Position::First && reth.len <= mtu)
            {
                fail!(NakCode::INVALID_REQUEST);
            }
            // A zero-length WRITE needs no valid R_Key (docs/wire.md §5.3).
            if reth.len > 0
                && mem
                    .check_remote(reth.rkey, reth.va, u64::from(reth.len), RemoteAccess::Write)
                    .is_err()
            {
                fail!(NakCode::REMOTE_ACCESS_ERROR);
            }
            self.counters.rdma_recvs += 1;
            self.resp.in_msg = Some(InMsg::Write {
                rkey: reth.rkey,
                va: reth.va,
                len: reth.len,
                received: 0,
            });
        }
        let Some(InMsg::Write {
            rkey,
            va,
            len,
            received,
        }) = self.resp.in_msg
        else {
            return;
        };
        let after = u64::from(received) + u64::from(plen);
        let last = pos.is_last();
        if after > u64::from(len)
            || (last && after != u64::from(len))
            || (!last && after >= u64::from(len))
        {
            fail!(NakCode::INVALID_REQUEST);
        }
        // WRITE WITH IMMEDIATE consumes a receive WQE at the ImmDt packet, before any byte of
        // that packet is placed, so an RNR NAK changes nothing.
        let imm = pkt.immdt.map(|i| i.0);
        if last && imm.is_some() {
            match self.take_rwqe(srq) {
                Some(h) => self.resp.held = Some(h),
                None => {
                    if uc {
                        self.counters.rcv_no_wqe_drop += 1;
                        return self.uc_abandon(None);
                    }
                    // Nothing may change: an ONLY packet leaves no message in progress.
                    if pos.is_first() {
                        self.resp.in_msg = None;
                    }
                    return self.rnr(p);
                }
            }
        }
        if plen > 0 {
            let ok = va
                .checked_add(u64::from(received))
                .map(|at| mem.write_remote_from_packet(rkey, at, pkt.payload, pkt.header_len()))
                .is_some_and(|r| r.is_ok());
            if !ok {
                fail!(NakCode::REMOTE_ACCESS_ERROR);
            }
        }
        if last {
            self.resp.in_msg = None;
            self.resp.msn = self.resp.msn.next();
            if let Some(h) = self.resp.held.take() {
                let mut c =
                    self.recv_completion(h.wr.wr_id, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
                c.byte_len = len;
                c.imm_data = imm;
                c.wc_flags = WcFlags::WITH_IMM;
                c.solicited = pkt.bth.solicited;
                self.complete_recv(h, c);
            }
        } else {
            self.resp.in_msg = Some(InMsg::Write {
                rkey,
                va,
                len,
                received: after as u32,
            });
        }
        if uc {
            self.resp.epsn = p.next();
        } else {
            self.finish_request(p, pkt.bth.ack_req);
        }
    }

    fn save_resource(&mut self, r: Resource) {
        let cap = usize::from(self.attr.max_dest_rd_atomic);
        while self.resp.resources.len() >= cap && !self.resp.resources.is_empty() {
            // Recycle the oldest (rxe `rxe_prepare_res`).
            self.resp.resources.pop_front();
        }
        if cap > 0 {
            self.resp.resources.push_back(r);
        }
    }

    fn rc_read<M: Memory + ?Sized>(&mut self, pkt: &RocePacketRepr<'_>, mem: &mut M) {
        let p = pkt.bth.psn;
        let Some(reth) = pkt.reth else {
            return self.responder_fatal(
                p,
                NakCode::INVALID_REQUEST,
                TransportError::RemoteInvalidRequest,
            );
        };
        if u64::from(reth.len) > MAX_MSG_LEN {
            return self.responder_fatal(
                p,
                NakCode::INVALID_REQUEST,
                TransportError::RemoteInvalidRequest,
            );
        }
        if reth.len > 0
            && mem
                .check_remote(reth.rkey, reth.va, u64::from(reth.len), RemoteAccess::Read)
                .is_err()
        {
            return self.responder_fatal(
                p,
                NakCode::REMOTE_ACCESS_ERROR,
                TransportError::RemoteInvalidRequest,
            );
        }
        let npkts = reth.len.div_ceil(self.mtu()).max(1);
        let last_psn = p.add(npkts - 1);
        self.save_resource(Resource::Read {
            first_psn: p,
            last_psn,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.len,
        });
        self.resp.responses.push_back(Response::Read {
            psn: p,
            va: reth.va,
            rkey: reth.rkey,
            remaining: reth.len,
            first: true,
        });
        self.counters.rdma_recvs += 1;
        // READ responses acknowledge; ePSN skips the PSNs the responses use; MSN counts the
        // READ when it is accepted (docs/wire.md §4.5, C9-148).
        self.resp.epsn = last_psn.next();
        self.resp.msn = self.resp.msn.next();
        self.resp.nak_sent = false;
    }

    fn rc_atomic<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        mem: &mut M,
    ) {
        let p = pkt.bth.psn;
        let Some(a) = pkt.atomic_eth else {
            return self.responder_fatal(
                p,
                NakCode::INVALID_REQUEST,
                TransportError::RemoteInvalidRequest,
            );
        };
        if a.va % 8 != 0 {
            return self.responder_fatal(
                p,
                NakCode::INVALID_REQUEST,
                TransportError::RemoteInvalidRequest,
            );
        }
        let op = if info.kind == OpKind::CompareSwap {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let orig = match mem.atomic_remote(a.rkey, a.va, op) {
            Ok(v) => v,
            Err(MemError::Misaligned) => {
                return self.responder_fatal(
                    p,
                    NakCode::INVALID_REQUEST,
                    TransportError::RemoteInvalidRequest,
                )
            }
            Err(_) => {
                return self.responder_fatal(
                    p,
                    NakCode::REMOTE_ACCESS_ERROR,
                    TransportError::RemoteInvalidRequest,
                )
            }
        };
        self.save_resource(Resource::Atomic { psn: p, orig });
        self.resp
            .responses
            .push_back(Response::Atomic { psn: p, orig });
        self.resp.epsn = p.next();
        self.resp.msn = self.resp.msn.next();
        self.resp.nak_sent = false;
    }

    /// A request before ePSN (docs/wire.md §5.3): SEND/WRITE are re-ACKed and not re-executed;
    /// READ is re-executed from the saved resource; ATOMIC is answered from the saved result.
    fn rc_duplicate(&mut self, pkt: &RocePacketRepr<'_>, info: &'static OpcodeInfo) {
        let p = pkt.bth.psn;
        match info.kind {
            OpKind::Send | OpKind::RdmaWrite => self.push_ack(self.resp.epsn.sub(1)),
            OpKind::ReadRequest => {
                let Some(reth) = pkt.reth else { return };
                let mtu = u64::from(self.mtu());
                let found = self.resp.resources.iter().rev().find_map(|r| match *r {
                    Resource::Read {
                        first_psn,
                        last_psn,
                        va,
                        rkey,
                        len,
                    } if !p.is_before(first_psn) && !p.is_after(last_psn) => {
                        Some((first_psn, va, rkey, len))
                    }
                    _ => None,
                });
                let Some((first_psn, va, rkey, len)) = found else {
                    self.counters.dropped_pkts += 1;
                    return;
                };
                // The retried request must ask for exactly the rest of the original range.
                let off = p.diff(first_psn) as u64 * mtu;
                let ok = rkey == reth.rkey
                    && va.checked_add(off) == Some(reth.va)
                    && u64::from(len).checked_sub(off) == Some(u64::from(reth.len));
                if !ok {
                    self.counters.dropped_pkts += 1;
                    return;
                }
                self.resp.responses.push_back(Response::Read {
                    psn: p,
                    va: reth.va,
                    rkey,
                    remaining: reth.len,
                    first: true,
                });
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = self.resp.resources.iter().rev().find_map(|r| match *r {
                    Resource::Atomic { psn, orig } if psn == p => Some(orig),
                    _ => None,
                });
                match found {
                    Some(orig) => self
                        .resp
                        .responses
                        .push_back(Response::Atomic { psn: p, orig }),
                    None => self.counters.dropped_pkts += 1,
                }
            }
            _ => self.counters.dropped_pkts += 1,
        }
    }

    /// UC: drop the rest of the current message; a receive WQE already taken stays held for
    /// the next message (it was never completed), unless `err` names an error of this side,
    /// which completes it with that error's status.
    fn uc_abandon(&mut self, err: Option<TransportError>) {
        self.resp.in_msg = None;
        self.resp.uc_drop = true;
        if let Some(err) = err {
            if let Some(h) = self.resp.held.take() {
                let c = self.recv_completion(h.wr.wr_id, err.wc_status(), WcOpcode::Recv);
                self.complete_recv(h, c);
            }
        }
    }

    fn uc_request<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        mem: &mut M,
        mut srq: Option<&mut dyn RecvQueue>,
    ) {
        let p = pkt.bth.psn;
        let pos = info.position;
        if p != self.resp.epsn {
            // Lost packets: the message in progress is gone; resync on FIRST/ONLY.
            self.counters.out_of_seq_request += 1;
            self.resp.in_msg = None;
            self.resp.uc_drop = true;
        }
        if pos.is_first() {
            // A new message (possibly after a lost LAST) starts afresh.
            self.resp.in_msg = None;
            self.resp.uc_drop = false;
        }
        let kind_ok = match self.resp.in_msg {
            Some(InMsg::Send { .. }) => info.kind == OpKind::Send,
            Some(InMsg::Write { .. }) => info.kind == OpKind::RdmaWrite,
            None => pos.is_first(),
        };
        if self.resp.uc_drop || !kind_ok {
            self.counters.dropped_pkts += 1;
            self.resp.epsn = p.next();
            self.resp.uc_drop = true;
            self.resp.in_msg = None;
            return;
        }
        let len_ok = self.payload_len_ok(pos, pkt.payload.len());
        if !len_ok
            || (info.kind == OpKind::RdmaWrite
                && !self
                    .attr
                    .qp_access_flags
                    .contains(AccessFlags::REMOTE_WRITE))
        {
            self.resp.epsn = p.next();
            return self.uc_abandon(None);
        }
        match info.kind {
            OpKind::Send => self.rc_send(pkt, mem, &mut srq, true),
            OpKind::RdmaWrite => self.rc_write(pkt, mem, &mut srq, true),
            _ => self.counters.dropped_pkts += 1,
        }
        if self.resp.uc_drop {
            self.resp.epsn = p.next();
        }
    }

    fn ud_request<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        meta: &RxMeta,
        mem: &mut M,
        mut srq: Option<&mut dyn RecvQueue>,
    ) {
        let Some(deth) = pkt.deth else {
            self.counters.dropped_pkts += 1;
            return;
        };
        // Q_Key must match (docs/wire.md §5.3).
        if deth.qkey != self.qkey() {
            self.counters.qkey_violation += 1;
            return;
        }
        if pkt.payload.len() > self.mtu() as usize {
            self.counters.dropped_pkts += 1;
            return;
        }
        let Some(h) = self.take_rwqe(&mut srq) else {
            self.counters.rcv_no_wqe_drop += 1;
            return;
        };
        let grh = meta.grh.area();
        let need = grh.len() + pkt.payload.len();
        let sges = h.wr.sges.as_slice();
        let placed = if (need as u64) > h.wr.sges.total_len() {
            Err(TransportError::LocalLength)
        } else {
            // `in_pkt`: where `bytes` start in the packet (the payload), or `None` (the GRH).
            let write = |bytes: &[u8], in_pkt: Option<usize>, at_msg: u64, mem: &mut M| {
                for_each_piece(sges, at_msg, bytes.len(), |sge, o, n, at| {
                    let addr = sge.addr.checked_add(o).ok_or(MemError::OutOfBounds)?;
                    let src = &bytes[at..at + n];
                    match in_pkt {
                        Some(p) => mem.write_local_from_packet(sge.lkey, addr, src, p + at),
                        None => mem.write_local(sge.lkey, addr, src),
                    }
                })
            };
            let payload_at = Some(pkt.header_len());
            if write(&grh, None, 0, mem).is_err()
                || write(pkt.payload, payload_at, grh.len() as u64, mem).is_err()
            {
                Err(TransportError::LocalProtection)
            } else {
                Ok(())
            }
        };
        let status = placed.map_or_else(TransportError::wc_status, |()| WcStatus::Success);
        let mut c = self.recv_completion(h.wr.wr_id, status, WcOpcode::Recv);
        c.src_qp = deth.src_qp;
        c.solicited = pkt.bth.solicited;
        if status == WcStatus::Success {
            c.byte_len = need as u32;
            c.wc_flags = WcFlags::GRH;
            if let Some(i) = pkt.immdt {
                c.imm_data = Some(i.0);
                c.wc_flags |= WcFlags::WITH_IMM;
            }
        }
        self.complete_recv(h, c);
    }

    /// AETH credit code this responder advertises (docs/wire.md §4.2): its free receive WQEs, or
    /// "unlimited" with an SRQ (the SRQ is shared, so per-QP credits mean nothing).
    fn credit_code(&self) -> u8 {
        if self.cfg.uses_srq {
            wire::aeth::CREDIT_CODE_UNLIMITED
        } else {
            wire::aeth::credit_code_for(u32::try_from(self.rq.len()).unwrap_or(u32::MAX))
        }
    }

    /// Whether the responder's next packet is a READ response (data, paced like requests).
    pub(crate) fn read_response_next(&self) -> bool {
        self.resp.last_gasp.is_none()
            && matches!(
                self.attr.qp_state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            )
            && matches!(self.resp.responses.front(), Some(Response::Read { .. }))
    }

    /// Next response packet.
    pub(crate) fn responder_transmit<M: Memory + ?Sized>(
        &mut self,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        if let Some(r) = self.resp.last_gasp {
            let t = self.emit_simple(r, buf);
            if t.is_some() {
                self.resp.last_gasp = None;
            }
            return t;
        }
        if !matches!(
            self.attr.qp_state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            return None;
        }
        let r = *self.resp.responses.front()?;
        let Response::Read {
            psn,
            va,
            rkey,
            remaining,
            first,
        } = r
        else {
            let t = self.emit_simple(r, buf)?;
            self.resp.responses.pop_front();
            return Some(t);
        };
        let mtu = self.mtu();
        let plen = remaining.min(mtu) as usize;
        let last = remaining <= mtu;
        let op = read_response_opcode(first, last);
        let hl = header_len(op);
        if buf.len() < hl + plen + 3 {
            self.counters.send_err += 1;
            return None;
        }
        if plen > 0
            && mem
                .read_remote_to_packet(rkey, va, &mut buf[hl..hl + plen], hl)
                .is_err()
        {
            // The MR went away between request and response: NAK remote access error.
            self.counters.send_nak += 1;
            self.enter_error(true);
            let nak = Response::Ack {
                psn,
                syndrome: Syndrome::nak(NakCode::REMOTE_ACCESS_ERROR),
            };
            return self.emit_simple(nak, buf);
        }
        let bth = self.response_bth(op, psn);
        let mut hdr = RocePacketRepr::new(bth, &[]);
        if op.info().is_some_and(|i| i.headers.has_aeth()) {
            hdr.aeth = Some(AethRepr {
                syndrome: Syndrome::ack(self.credit_code()),
                msn: self.resp.msn,
            });
        }
        let len = finish_in_place(&hdr, plen, buf)?;
        if last {
            self.resp.responses.pop_front();
        } else if let Some(Response::Read {
            psn,
            va,
            remaining,
            first,
            ..
        }) = self.resp.responses.front_mut()
        {
            *psn = psn.next();
            *va = va.wrapping_add(plen as u64);
            *remaining -= plen as u32;
            *first = false;
        }
        Some(Transmit {
            len,
            ah: None,
            dest_qpn: self.dest_qpn(),
            run: None,
            hdr: None,
        })
    }

    fn response_bth(&self, op: Opcode, psn: Psn) -> BthRepr {
        // An XRC target answers with the XRC class of the same opcode.
        let op = if self.cfg.xrc.is_some() {
            op.rc_to_xrc()
        } else {
            op
        };
        let mut bth = BthRepr::new(op, self.dest_qpn(), psn);
        bth.pkey = self.cfg.pkey;
        bth
    }

    /// ACK/NAK or ATOMIC ACKNOWLEDGE.
    fn emit_simple(&mut self, r: Response, buf: &mut [u8]) -> Option<Transmit> {
        let aeth_for = |syndrome: Syndrome, this: &Qp| {
            let syndrome = if syndrome == PLAIN_ACK {
                Syndrome::ack(this.credit_code())
            } else {
                syndrome
            };
            AethRepr {
                syndrome,
                msn: this.resp.msn,
            }
        };
        let hdr = match r {
            Response::Ack { psn, syndrome } => RocePacketRepr {
                aeth: Some(aeth_for(syndrome, self)),
                ..RocePacketRepr::new(self.response_bth(Opcode::RC_ACKNOWLEDGE, psn), &[])
            },
            Response::Atomic { psn, orig } => RocePacketRepr {
                aeth: Some(aeth_for(PLAIN_ACK, self)),
                atomic_ack: Some(AtomicAckEthRepr { orig }),
                ..RocePacketRepr::new(self.response_bth(Opcode::RC_ATOMIC_ACKNOWLEDGE, psn), &[])
            },
            Response::Read { .. } => return None,
        };
        let len = finish_in_place(&hdr, 0, buf)?;
        Some(Transmit {
            len,
            ah: None,
            dest_qpn: self.dest_qpn(),
            run: None,
            hdr: None,
        })
    }
}

/// Same-device runs ([`crate::Run`]): the packets of a run, one by one or at once.
impl Qp {
    /// Take a run that [`Qp::poll_transmit_run`] built (`pkt` its headers and whole payload)
    /// as its packets in order, with the outcome of [`Qp::handle_packet`] for each: the first
    /// goes through every check as any packet; when it was taken in sequence (ePSN moved past
    /// it) and the rest of the message agrees with the run (lengths, message size, receive
    /// buffer), the rest is placed with one copy and ePSN, the MSN, the ACK and the receive
    /// completion advance as they would have packet by packet. Anything else — a duplicate,
    /// an error, a NAK, an RNR wait — hands the remaining packets to `handle_packet` one by
    /// one, which gives them exactly the answer separate packets get. `run: None` is
    /// `handle_packet`, and so is a run claiming more packets than its payload fills.
    pub fn handle_run<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        pkt: &RocePacketRepr<'_>,
        run: Option<crate::Run>,
        meta: &RxMeta,
        mem: &mut M,
        mut srq: Option<&mut dyn RecvQueue>,
    ) {
        // A run stands for at most as many packets as its payload fills (and at least 2).
        let mtu = self.mtu() as usize;
        let most = pkt.payload.len().div_ceil(mtu.max(1));
        let Some(run) = run.filter(|r| r.pkts > 1 && r.pkts as usize <= most) else {
            return self.handle_packet(now, pkt, meta, mem, srq);
        };
        let kind = match pkt.bth.opcode {
            Opcode::RC_RDMA_WRITE_FIRST | Opcode::RC_RDMA_WRITE_MIDDLE => OpKind::RdmaWrite,
            Opcode::RC_SEND_FIRST | Opcode::RC_SEND_MIDDLE => OpKind::Send,
            // Not a run this QP's peer builds: take it as the one packet it claims to be.
            _ => return self.handle_packet(now, pkt, meta, mem, srq),
        };
        let first = self.run_packet(pkt, run, 0, mtu);
        self.handle_packet(now, &first, meta, mem, reborrow(&mut srq));
        if self.resp.epsn == pkt.bth.psn.next()
            && self.attr.qp_state != QpState::Err
            && self.run_rest(pkt, run, kind, mtu, mem)
        {
            self.check_drained();
            return;
        }
        for i in 1..run.pkts {
            let p = self.run_packet(pkt, run, i, mtu);
            self.handle_packet(now, &p, meta, mem, reborrow(&mut srq));
        }
    }

    /// Packet `i` of a run as a packet of its own ([`crate::Run::packet`]; `kind` already
    /// said that `pkt` starts a run).
    fn run_packet<'a>(
        &self,
        pkt: &RocePacketRepr<'a>,
        run: crate::Run,
        i: u32,
        mtu: usize,
    ) -> RocePacketRepr<'a> {
        run.packet(pkt, i, mtu).unwrap_or(*pkt)
    }

    /// Packets 1.. of a run whose first was just taken in sequence, at once; `false` (and
    /// nothing changed) when they do not fit the message in progress, so that they go one
    /// by one.
    fn run_rest<M: Memory + ?Sized>(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        run: crate::Run,
        kind: OpKind,
        mtu: usize,
        mem: &mut M,
    ) -> bool {
        let rest = pkt.payload.get(mtu..).unwrap_or(&[]);
        let middles = (run.pkts as usize - 2) * mtu;
        // Every packet but the last carries one MTU; the last 1..=MTU bytes, exactly one
        // MTU unless it ends the message.
        let tail = rest.len().wrapping_sub(middles);
        let lengths_ok = pkt.payload.len() > mtu
            && rest.len() > middles
            && if run.ends_message {
                (1..=mtu).contains(&tail)
            } else {
                tail == mtu
            };
        if !lengths_ok || self.resp.responses.len() >= self.responses_cap() || self.sr_active() {
            return false;
        }
        let at0 = pkt.header_len() + mtu;
        let n = rest.len();
        match (kind, self.resp.in_msg) {
            (
                OpKind::RdmaWrite,
                Some(InMsg::Write {
                    rkey,
                    va,
                    len,
                    received,
                }),
            ) => {
                let after = u64::from(received) + n as u64;
                let fits = if run.ends_message {
                    after == u64::from(len)
                } else {
                    after < u64::from(len)
                };
                let placed = fits
                    && va.checked_add(u64::from(received)).is_some_and(|at| {
                        mem.write_remote_from_packet(rkey, at, rest, at0).is_ok()
                    });
                if !placed {
                    return false;
                }
                if run.ends_message {
                    self.resp.in_msg = None;
                    self.resp.msn = self.resp.msn.next();
                } else {
                    self.resp.in_msg = Some(InMsg::Write {
                        rkey,
                        va,
                        len,
                        received: after as u32,
                    });
                }
            }
            (OpKind::Send, Some(InMsg::Send { received })) => {
                let Some(held) = self.resp.held.as_ref() else {
                    return false;
                };
                let after = u64::from(received) + n as u64;
                if after > held.wr.sges.total_len() {
                    return false;
                }
                let placed = for_each_piece(
                    held.wr.sges.as_slice(),
                    u64::from(received),
                    n,
                    |sge, o, k, at| {
                        let addr = sge.addr.checked_add(o).ok_or(MemError::OutOfBounds)?;
                        mem.write_local_from_packet(sge.lkey, addr, &rest[at..at + k], at0 + at)
                    },
                );
                if placed.is_err() {
                    return false;
                }
                // (A run never ends with immediate data, an invalidation or the SE bit.)
                if run.ends_message {
                    self.finish_send_message(after as u32, None, None, false);
                } else {
                    self.resp.in_msg = Some(InMsg::Send {
                        received: after as u32,
                    });
                }
            }
            _ => return false,
        }
        // As `finish_request` for each packet: only the last may have asked for an ACK.
        let more = u64::from(run.pkts - 1);
        self.counters.rcvd_pkts += more;
        self.counters.ack_deferred += more - 1;
        self.finish_request(pkt.bth.psn.add(run.pkts - 1), run.ack_req);
        true
    }
}

/// A shorter-lived `Option<&mut dyn RecvQueue>` from one held for longer.
fn reborrow<'a>(srq: &'a mut Option<&mut dyn RecvQueue>) -> Option<&'a mut dyn RecvQueue> {
    match srq {
        Some(s) => Some(&mut **s),
        None => None,
    }
}
