//! The completer (rxe_comp.c): ACKs, NAKs, READ responses and ATOMIC ACKs against the send
//! queue. ACKs are cumulative; a response beyond an unfinished READ/ATOMIC means its response
//! was lost (implied NAK → retry); responses for PSNs never sent ("ghost" ACKs) and stale
//! ones are dropped; a response of the wrong kind for its WQE is a bad response.

use wire::{AckKind, Msn, NakCode, OpKind, OpcodeInfo, Psn, RocePacketRepr};

use crate::error::TransportError;
use crate::mem::{for_each_piece, Memory};
use crate::qp::Qp;
use crate::state::QpState;
use crate::time::{rnr_timer_ns, Time};
use crate::{MemError, WcStatus, WrOpcode};

/// Completer state (rxe `struct rxe_comp_info`, rxe_comp.c): how far the peer has
/// acknowledged and what is left of the retry budgets.
#[derive(Debug)]
pub(crate) struct Completer {
    /// Oldest PSN not yet acknowledged (rxe `comp.psn`). The requester reads it for its
    /// window and resumes from it on a retry.
    pub(crate) unacked: Psn,
    /// Transport retries left (rxe `comp.retry_cnt`).
    pub(crate) retry_left: u8,
    /// RNR retries left (rxe `comp.rnr_retry`).
    pub(crate) rnr_left: u8,
    /// A NAK-triggered (or implied-NAK) retry started and no progress since: further sequence
    /// NAKs are stale — sent before our resends arrived — and are ignored (rxe
    /// `comp.started_retry`). If a resend itself is lost, the responder does not NAK the same
    /// PSN twice, so the ACK timer recovers.
    pub(crate) retried_since_progress: bool,
    /// Limit sequence number from AETH credits; `None` = unlimited. Read by the requester.
    pub(crate) lsn: Option<Msn>,
}

impl Default for Completer {
    fn default() -> Completer {
        Completer {
            unacked: Psn::new(0),
            retry_left: 0,
            rnr_left: 0,
            retried_since_progress: false,
            lsn: None,
        }
    }
}

/// What a cumulative acknowledgement did.
#[derive(PartialEq, Eq)]
enum AckOutcome {
    /// Processed; carry on with the packet.
    Continue,
    /// A retry was started or the QP failed; stop processing this packet.
    Stop,
}

impl Qp {
    /// A response for this QP's requests. The steps follow rxe_comp.c: a selective-repeat
    /// hole NAK is taken first (its PSN lies outside the window on purpose), then
    /// [`Qp::check_psn`], then by kind [`Qp::check_ack`], [`Qp::read_response`] or
    /// [`Qp::atomic_ack`] (rxe `do_read` / `do_atomic`), which retire completed WQEs
    /// through `ack_through` and `pop_completed` (rxe `complete_ack` / `do_complete`).
    pub(crate) fn completer_handle<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        mem: &mut M,
    ) {
        let p = pkt.bth.psn;
        if self.sr_active() && info.kind == OpKind::Acknowledge && !p.is_before(self.req.sent_high)
        {
            // Selective repeat: a hole NAK names PSN p - 2^23 (docs/wire.md §5.6).
            let x = p.sub(crate::sr::SR_HOLE_OFFSET);
            let seq_nak = pkt
                .aeth
                .is_some_and(|a| a.syndrome.kind() == AckKind::Nak(NakCode::PSN_SEQ_ERROR));
            if seq_nak && !x.is_before(self.comp.unacked) && x.is_before(self.req.sent_high) {
                self.sr_on_nak(now, x);
                return;
            }
        }
        if !self.check_psn(p) {
            return;
        }
        match info.kind {
            OpKind::Acknowledge => self.check_ack(now, p, pkt.aeth),
            OpKind::ReadResponse => self.read_response(now, pkt, info, mem),
            OpKind::AtomicAcknowledge => self.atomic_ack(now, pkt, mem),
            _ => self.counters.dropped_pkts += 1,
        }
    }

    /// Whether a response's PSN can answer anything (rxe `check_psn`): only PSNs in
    /// `[unacked, sent_high)` can (docs/wire.md §5.2); one never sent is a ghost, one
    /// already acknowledged a duplicate, and both are dropped.
    fn check_psn(&mut self, p: Psn) -> bool {
        if !p.is_before(self.req.sent_high) {
            self.counters.ghost_responses += 1;
            return false;
        }
        if p.is_before(self.comp.unacked) || !self.outstanding() {
            self.counters.duplicate_responses += 1;
            return false;
        }
        true
    }

    /// An ACK or NAK at PSN `p` (rxe `check_ack` for the Acknowledge opcode): an ACK
    /// acknowledges through `p`; a NAK acknowledges what precedes `p`, then an RNR NAK
    /// starts an RNR wait, a sequence NAK a retry, and any other NAK fails the WQE.
    fn check_ack(&mut self, now: Time, p: Psn, aeth: Option<wire::AethRepr>) {
        let Some(aeth) = aeth else {
            self.counters.dropped_pkts += 1;
            return;
        };
        match aeth.syndrome.kind() {
            AckKind::Ack { credit_code } => {
                self.update_credits(aeth.msn, credit_code);
                self.ack_through(now, p);
            }
            AckKind::RnrNak { timer_code } => {
                self.counters.rcvd_rnr_err += 1;
                if self.ack_through(now, p.sub(1)) == AckOutcome::Stop {
                    return;
                }
                self.rnr_nak(now, timer_code);
            }
            AckKind::Nak(NakCode::PSN_SEQ_ERROR) if self.sr_active() => {
                // Selective repeat (docs/wire.md §5.6): PSNs before p are
                // acknowledged as always; resend p alone.
                if self.ack_through(now, p.sub(1)) == AckOutcome::Stop {
                    return;
                }
                self.sr_on_nak(now, p);
            }
            AckKind::Nak(code) => {
                if self.ack_through(now, p.sub(1)) == AckOutcome::Stop {
                    return;
                }
                self.nak(now, code);
            }
            AckKind::Reserved => self.counters.dropped_pkts += 1,
        }
    }

    /// AETH credits (docs/wire.md §4.2): LSN = MSN + credits; code 31 = unlimited.
    fn update_credits(&mut self, msn: Msn, code: u8) {
        self.comp.lsn = wire::aeth::credits_for_code(code).map(|c| msn.add(c));
    }

    /// Cumulative acknowledgement of every PSN up to and including `p`.
    fn ack_through(&mut self, now: Time, p: Psn) -> AckOutcome {
        let mut progressed = false;
        while let Some(w) = self.sq.front() {
            if !w.started {
                break;
            }
            if w.last_psn.diff(p) <= 0 {
                if w.wr.opcode.is_read_or_atomic() {
                    // Acknowledged past a READ/ATOMIC whose response never came: it was lost.
                    if progressed {
                        self.progress(now);
                    }
                    if self.comp.retried_since_progress {
                        self.counters.stale_naks += 1;
                        return AckOutcome::Stop;
                    }
                    self.nak_retry(now);
                    return AckOutcome::Stop;
                }
                self.pop_completed(WcStatus::Success);
                progressed = true;
            } else {
                if !w.wr.opcode.is_read_or_atomic() && !p.is_before(self.comp.unacked) {
                    self.comp.unacked = p.next();
                    progressed = true;
                }
                break;
            }
        }
        if progressed {
            self.progress(now);
        }
        AckOutcome::Continue
    }

    /// Remove the front WQE as complete with `status`, keeping cursor and PSNs consistent.
    fn pop_completed(&mut self, status: WcStatus) {
        let Some(w) = self.sq.pop_front() else {
            return;
        };
        self.comp.unacked = w.last_psn.next();
        if self.req.cursor > 0 {
            self.req.cursor -= 1;
        }
        if self.req.next_psn.is_before(self.comp.unacked) {
            self.req.next_psn = self.comp.unacked;
        }
        if w.opcode.is_read_or_atomic() {
            self.req.rd_atomic_outstanding = self.req.rd_atomic_outstanding.saturating_sub(1);
        }
        self.complete_send(&w, status);
    }

    fn rnr_nak(&mut self, now: Time, timer_code: u8) {
        // rnr_retry 7 means retry forever (docs/wire.md §5.2).
        if self.attr.rnr_retry != 7 {
            if self.comp.rnr_left == 0 {
                self.counters.retry_rnr_exceeded_err += 1;
                self.fail_front(TransportError::RnrRetryExceeded);
                return;
            }
            self.comp.rnr_left -= 1;
        }
        self.retrans_deadline = None;
        self.rec.probe_deadline = None;
        self.rnr_until = Some(now.add_nanos(rnr_timer_ns(timer_code)));
    }

    fn nak(&mut self, now: Time, code: NakCode) {
        match code {
            NakCode::PSN_SEQ_ERROR => {
                self.counters.rcvd_seq_err += 1;
                // None during an RNR wait; one per episode (rxe `started_retry`).
                if self.rnr_until.is_some() || self.comp.retried_since_progress {
                    self.counters.stale_naks += 1;
                    return;
                }
                self.nak_retry(now);
                return;
            }
            NakCode::INVALID_REQUEST => self.counters.rcvd_nak_invalid_request += 1,
            NakCode::REMOTE_ACCESS_ERROR => self.counters.rcvd_nak_remote_access += 1,
            // INVALID_RD_REQUEST, REMOTE_OPERATIONAL_ERROR, and reserved codes as rxe does
            // (docs/wire.md §4.4).
            _ => self.counters.rcvd_nak_remote_op += 1,
        }
        self.fail_front(TransportError::from_nak(code));
    }

    fn bad_response(&mut self) {
        self.fail_front(TransportError::BadResponse);
    }

    fn read_response<M: Memory + ?Sized>(
        &mut self,
        now: Time,
        pkt: &RocePacketRepr<'_>,
        info: &'static OpcodeInfo,
        mem: &mut M,
    ) {
        let p = pkt.bth.psn;
        // A response implicitly acknowledges everything before it.
        if self.ack_through(now, p.sub(1)) == AckOutcome::Stop {
            return;
        }
        let mtu = u64::from(self.mtu());
        let Some(w) = self.sq.front() else {
            return;
        };
        let (started, op, first_psn, last_psn, wlen) =
            (w.started, w.wr.opcode, w.first_psn, w.last_psn, w.len);
        let in_range = started && !p.is_before(first_psn) && !p.is_after(last_psn);
        if !in_range || op != WrOpcode::RdmaRead {
            self.bad_response();
            return;
        }
        if p != self.comp.unacked {
            // A gap: an earlier response was lost. Responses are only accepted in order;
            // ask again for the rest at once, once per episode (rxe_comp.c `check_psn`:
            // a later response to a READ is an implied NAK).
            if self.comp.retried_since_progress {
                self.counters.stale_naks += 1;
                return;
            }
            self.nak_retry(now);
            return;
        }
        if let Some(aeth) = pkt.aeth {
            match aeth.syndrome.kind() {
                AckKind::Ack { credit_code } => self.update_credits(aeth.msn, credit_code),
                _ => {
                    self.bad_response();
                    return;
                }
            }
        }
        let is_last_psn = p == last_psn;
        let off = p.diff(first_psn) as u64 * mtu;
        let expect = u64::from(wlen).saturating_sub(off).min(mtu) as usize;
        if info.position.is_last() != is_last_psn || pkt.payload.len() != expect {
            self.bad_response();
            return;
        }
        let Some(w) = self.sq.front() else {
            return;
        };
        if let crate::LocalData::Sges(sges) = &w.wr.local {
            let r = for_each_piece(sges.as_slice(), off, expect, |sge, o, n, at| {
                let addr = sge.addr.checked_add(o).ok_or(MemError::OutOfBounds)?;
                mem.write_local_from_packet(
                    sge.lkey,
                    addr,
                    &pkt.payload[at..at + n],
                    pkt.header_len() + at,
                )
            });
            if r.is_err() {
                self.counters.send_err += 1;
                self.fail_front(TransportError::LocalProtection);
                return;
            }
        }
        if is_last_psn {
            self.pop_completed(WcStatus::Success);
        } else {
            self.comp.unacked = p.next();
        }
        self.progress(now);
    }

    fn atomic_ack<M: Memory + ?Sized>(&mut self, now: Time, pkt: &RocePacketRepr<'_>, mem: &mut M) {
        let p = pkt.bth.psn;
        if self.ack_through(now, p.sub(1)) == AckOutcome::Stop {
            return;
        }
        let Some(w) = self.sq.front() else {
            return;
        };
        if !w.started || !w.wr.opcode.is_atomic() || p != w.first_psn || p != self.comp.unacked {
            self.bad_response();
            return;
        }
        let (Some(aeth), Some(ack)) = (pkt.aeth, pkt.atomic_ack) else {
            self.bad_response();
            return;
        };
        match aeth.syndrome.kind() {
            AckKind::Ack { credit_code } => self.update_credits(aeth.msn, credit_code),
            _ => {
                self.bad_response();
                return;
            }
        }
        let Some(w) = self.sq.front() else {
            return;
        };
        // The original value lands in the local buffer in host byte order (as rxe does).
        let bytes = ack.orig.to_ne_bytes();
        if let crate::LocalData::Sges(sges) = &w.wr.local {
            let r = for_each_piece(sges.as_slice(), 0, bytes.len(), |sge, o, n, at| {
                let addr = sge.addr.checked_add(o).ok_or(MemError::OutOfBounds)?;
                mem.write_local(sge.lkey, addr, &bytes[at..at + n])
            });
            if r.is_err() {
                self.counters.send_err += 1;
                self.fail_front(TransportError::LocalProtection);
                return;
            }
        }
        self.pop_completed(WcStatus::Success);
        self.progress(now);
        debug_assert!(self.attr.qp_state != QpState::Reset);
    }
}
