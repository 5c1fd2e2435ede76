//! Selective repeat for RC (docs/wire.md §5.6), a mode both ends of a connection turn on only
//! when both agreed to it ([`QpConfig::selective_repeat`](crate::QpConfig)); off, nothing here
//! runs and the transport is IBTA go-back-N.
//!
//! Responder: a request ahead of ePSN (within [`SR_WINDOW`] packets and [`SR_STORE_BYTES`]) is
//! copied into a reassembly store and executed once every PSN before it has been, so
//! placement, completions, READ/atomic execution and ACKs see requests in PSN order exactly
//! as without selective repeat. The sequence NAK names ePSN, as IBTA's does (so it still
//! acknowledges everything before it): once when ePSN is first seen missing behind a kept
//! request — also right after a resend filled the previous gap — and again if it stays
//! missing for [`SR_RENAK_AFTER`] more arrivals.
//!
//! Requester: a sequence NAK acknowledges what it always did and asks for that one packet;
//! it is resent alone, at most once per round trip; timeouts resend the oldest
//! unacknowledged packet, and only a second local ACK timeout without progress goes back N.

use std::collections::VecDeque;

use wire::{NakCode, OpKind, Psn, RocePacketRepr, Syndrome};

use crate::mem::Memory;
use crate::qp::{Qp, RecvQueue, Response};
use crate::state::{QpState, QpType};
use crate::time::Time;

/// The responder keeps requests at most this many PSNs ahead of ePSN.
pub(crate) const SR_WINDOW: u32 = 1024;
/// ... and at most this many bytes of them per QP.
pub(crate) const SR_STORE_BYTES: usize = 4 << 20;
/// A missing ePSN already NAKed is NAKed again after this many more requests arrived ahead
/// of it (its resend was probably lost; the requester ignores a NAK within a round trip of
/// its resend anyway).
const SR_RENAK_AFTER: u64 = 16;
/// A hole NAK names missing PSN `x` as `x + 2^23`: half the PSN space away from every PSN
/// the requester has outstanding, so a requester without selective repeat drops it as a
/// response to a PSN never sent (docs/wire.md §5.6), while one with it subtracts the offset.
pub(crate) const SR_HOLE_OFFSET: u32 = 1 << 23;
/// Hole NAKs are sent only while the response queue is at most this full (fraction 1/2 of
/// its cap), so that they never crowd out the ACKs and READ responses.
const HOLE_NAK_QUEUE_DIVISOR: usize = 2;

/// One PSN at or after ePSN in the responder's reassembly store.
#[derive(Debug)]
enum Slot {
    /// Not received; `naked_at` is the arrival count when it was last NAKed.
    Missing { naked_at: Option<u64> },
    /// Received ahead of ePSN: the packet from BTH to the last pad byte.
    Held(Vec<u8>),
}

/// The responder's reassembly store: `slots[i]` is PSN `base + i`, `base` is ePSN after
/// [`SrStore::sync`], and the last slot (if any) holds a packet.
#[derive(Debug, Default)]
pub(crate) struct SrStore {
    base: Psn,
    slots: VecDeque<Slot>,
    bytes: usize,
    /// Requests received ahead of ePSN, for [`SR_RENAK_AFTER`].
    arrivals: u64,
    /// Spare buffers.
    pool: Vec<Vec<u8>>,
}

impl SrStore {
    /// Forget PSNs before `epsn` (executed, or skipped by a READ's response PSNs).
    pub(crate) fn sync(&mut self, epsn: Psn) {
        let d = epsn.diff(self.base);
        if d < 0 || d as usize >= self.slots.len() {
            self.clear();
            self.base = epsn;
            return;
        }
        for _ in 0..d {
            if let Some(s) = self.slots.pop_front() {
                self.recycle(s);
            }
        }
        self.base = epsn;
    }

    /// Drop everything (QP error or reset).
    pub(crate) fn clear(&mut self) {
        while let Some(s) = self.slots.pop_front() {
            self.recycle(s);
        }
        self.bytes = 0;
    }

    fn recycle(&mut self, s: Slot) {
        if let Slot::Held(mut b) = s {
            self.bytes -= b.len();
            if self.pool.len() < 64 {
                b.clear();
                self.pool.push(b);
            }
        }
    }

    /// Whether a packet ahead of ePSN is held (so ePSN is known to be missing).
    pub(crate) fn has_later(&self) -> bool {
        matches!(self.slots.back(), Some(Slot::Held(_)))
    }

    /// Keep `pkt` (PSN after `base`); `false` if it was already held or is beyond the
    /// window or the byte bound (then it is dropped). Missing PSNs after `base` that this
    /// arrival shows for the first time — every PSN of a new gap in front of it, or the PSN
    /// right after the hole it filled — are appended to `holes` (at most `max_holes`).
    pub(crate) fn insert(
        &mut self,
        pkt: &RocePacketRepr<'_>,
        holes: &mut Vec<Psn>,
        max_holes: usize,
    ) -> bool {
        let d = pkt.bth.psn.diff(self.base);
        if d <= 0 || d as u32 >= SR_WINDOW {
            return false;
        }
        let d = d as usize;
        let len = pkt.transport_len();
        if matches!(self.slots.get(d), Some(Slot::Held(_))) || self.bytes + len > SR_STORE_BYTES {
            return false;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.resize(len, 0);
        if pkt.emit(&mut buf).is_err() {
            self.pool.push(buf);
            return false;
        }
        self.arrivals += 1;
        let old_len = self.slots.len();
        while self.slots.len() <= d {
            self.slots.push_back(Slot::Missing { naked_at: None });
        }
        self.bytes += len;
        self.slots[d] = Slot::Held(buf);
        // Index 0 (ePSN) is named by the plain NAK ([`SrStore::front_nak`]).
        let range = if d >= old_len {
            old_len.max(1)..d
        } else {
            (d + 1).max(1)..(d + 2).min(self.slots.len())
        };
        let arrivals = self.arrivals;
        for i in range {
            if holes.len() >= max_holes {
                break;
            }
            if let Some(Slot::Missing { naked_at }) = self.slots.get_mut(i) {
                if naked_at.is_none() {
                    *naked_at = Some(arrivals);
                    holes.push(self.base.add(i as u32));
                }
            }
        }
        true
    }

    /// The packet at `base` (ePSN), if held; its slot becomes missing again.
    pub(crate) fn take_front(&mut self) -> Option<Vec<u8>> {
        let slot = self.slots.front_mut()?;
        if !matches!(slot, Slot::Held(_)) {
            return None;
        }
        let Slot::Held(b) = std::mem::replace(slot, Slot::Missing { naked_at: None }) else {
            return None;
        };
        self.bytes -= b.len();
        Some(b)
    }

    /// Give a buffer from [`SrStore::take_front`] back.
    pub(crate) fn give_back(&mut self, mut b: Vec<u8>) {
        if self.pool.len() < 64 {
            b.clear();
            self.pool.push(b);
        }
    }

    /// ePSN (`base`) is missing while later packets are held: NAK it if it never was, or
    /// if [`SR_RENAK_AFTER`] packets arrived since it was.
    pub(crate) fn front_nak(&mut self) -> Option<Psn> {
        if !self.has_later() {
            return None;
        }
        let arrivals = self.arrivals;
        match self.slots.front_mut() {
            Some(Slot::Missing { naked_at })
                if naked_at.is_none_or(|t| arrivals - t >= SR_RENAK_AFTER) =>
            {
                *naked_at = Some(arrivals);
                Some(self.base)
            }
            _ => None,
        }
    }
}

/// The requester's selective-repeat state.
#[derive(Debug, Default)]
pub(crate) struct SrSend {
    /// PSNs to resend alone, oldest request first.
    pub(crate) resend: VecDeque<Psn>,
    /// When each recently resent PSN last left (pruned as ACKs advance).
    pub(crate) resent: VecDeque<(Psn, Time)>,
    /// Local ACK timeouts since the last progress.
    pub(crate) timeouts: u8,
}

impl Qp {
    /// Selective repeat is on for this QP (RC, not XRC: an XRC target's SRQ is chosen per
    /// packet by the caller).
    pub(crate) fn sr_active(&self) -> bool {
        self.cfg.selective_repeat && self.cfg.qp_type == QpType::Rc && self.cfg.xrc.is_none()
    }

    fn sr_push_nak(&mut self, psn: Psn) {
        self.counters.send_nak += 1;
        self.counters.sr_naks_sent += 1;
        self.responses.push_back(Response::Ack {
            psn,
            syndrome: Syndrome::nak(NakCode::PSN_SEQ_ERROR),
        });
    }

    /// Responder: a request ahead of ePSN.
    pub(crate) fn sr_keep(&mut self, pkt: &RocePacketRepr<'_>) {
        self.sr_rx.sync(self.epsn);
        if let Some(p) = self.sr_rx.front_nak() {
            self.sr_push_nak(p);
        }
        let room =
            (self.responses_cap() / HOLE_NAK_QUEUE_DIVISOR).saturating_sub(self.responses.len());
        let mut holes = Vec::new();
        if self.sr_rx.insert(pkt, &mut holes, room) {
            self.counters.sr_out_of_order_kept += 1;
        } else {
            self.counters.sr_out_of_order_dropped += 1;
        }
        for h in holes {
            self.counters.sr_hole_naks_sent += 1;
            self.sr_push_nak(h.add(SR_HOLE_OFFSET));
        }
        if let Some(p) = self.sr_rx.front_nak() {
            self.sr_push_nak(p);
        }
    }

    /// Responder: ePSN advanced; execute the kept requests that are now in order, then
    /// acknowledge them and name the next missing PSN if later ones are held.
    pub(crate) fn sr_drain<M: Memory + ?Sized>(
        &mut self,
        mem: &mut M,
        srq: &mut Option<&mut dyn RecvQueue>,
    ) {
        let mut ack = false;
        loop {
            if !matches!(
                self.attr.qp_state,
                QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
            ) {
                self.sr_rx.clear();
                return;
            }
            self.sr_rx.sync(self.epsn);
            if self.responses.len() >= self.responses_cap() {
                break;
            }
            let Some(buf) = self.sr_rx.take_front() else {
                break;
            };
            if let Ok(pkt) = RocePacketRepr::parse(&buf) {
                if let Some(info) = pkt.bth.opcode.info() {
                    let before = self.epsn;
                    self.rc_execute(&pkt, info, mem, srq);
                    ack = self.epsn != before
                        && matches!(info.kind, OpKind::Send | OpKind::RdmaWrite);
                }
            }
            self.sr_rx.give_back(buf);
        }
        if ack {
            // The kept requests' AckReq bits were set for other ACK points: acknowledge
            // everything executed so far (coalesced with a queued ACK).
            self.push_ack(self.epsn.sub(1));
        }
        self.sr_rx.sync(self.epsn);
        if let Some(p) = self.sr_rx.front_nak() {
            self.sr_push_nak(p);
        }
    }

    /// Requester: a sequence NAK naming `psn` (in `[unacked, sent_high)`).
    pub(crate) fn sr_on_nak(&mut self, now: Time, psn: Psn) {
        self.counters.rcvd_seq_err += 1;
        let rtt = self.rec.srtt_ns().unwrap_or(0);
        let recent = self
            .sr_tx
            .resent
            .iter()
            .find(|&&(p, t)| p == psn && now.nanos_since(t) < rtt)
            .map(|&(_, t)| t);
        if let (Some(t), true) = (recent, psn == self.unacked) {
            // The NAK may predate the resend's arrival, or the resend was lost: if nothing
            // has moved one round trip after the resend, the retransmission timer resends the
            // oldest unacknowledged packet then (instead of a full timeout later).
            let at = t.add_nanos(rtt);
            if self.rec.probe_deadline.is_none_or(|d| at < d) {
                self.rec.probe_deadline = Some(at);
            }
        }
        let recent = recent.is_some();
        // A READ occupies its response PSNs: only its first PSN is ever a request.
        let inside_read = self.sq.iter().any(|w| {
            w.started
                && w.wr.opcode.is_read_or_atomic()
                && psn.is_after(w.first_psn)
                && !psn.is_after(w.last_psn)
        });
        if self.rnr_until.is_some()
            || recent
            || inside_read
            || !psn.is_before(self.next_psn)
            || self.sr_tx.resend.contains(&psn)
        {
            self.counters.sr_naks_ignored += 1;
            return;
        }
        // A NAK costs one packet here, not a window, and under reordering most NAKs are
        // spurious: the window stays at its limit (`max_unacked_psns`, rxe's fixed window;
        // ECN/DCQCN is the congestion response, docs/wire.md §11). Timeouts still cut it.
        let floor = self.cfg.max_unacked_psns;
        self.rec
            .on_loss(self.flight(), self.sent_high, false, floor);
        self.sr_tx.resend.push_back(psn);
    }

    /// Requester: progress; forget resend bookkeeping for acknowledged PSNs.
    pub(crate) fn sr_progress(&mut self) {
        let una = self.unacked;
        self.sr_tx.resent.retain(|&(p, _)| !p.is_before(una));
        self.sr_tx.resend.retain(|p| !p.is_before(una));
        self.sr_tx.timeouts = 0;
    }

    /// Requester: remember that `psn` was resent alone at `now`.
    pub(crate) fn sr_note_resent(&mut self, psn: Psn, now: Time) {
        self.counters.sr_single_resends += 1;
        if let Some(e) = self.sr_tx.resent.iter_mut().find(|(p, _)| *p == psn) {
            e.1 = now;
            return;
        }
        if self.sr_tx.resent.len() >= SR_WINDOW as usize {
            self.sr_tx.resent.pop_front();
        }
        self.sr_tx.resent.push_back((psn, now));
    }

    /// Index in the send queue of the started WQE whose PSNs include `psn`.
    pub(crate) fn wqe_index_of(&self, psn: Psn) -> Option<usize> {
        self.sq
            .iter()
            .position(|w| w.started && !psn.is_before(w.first_psn) && !psn.is_after(w.last_psn))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{BthRepr, Opcode};

    fn pkt(psn: u32, payload: &[u8]) -> RocePacketRepr<'_> {
        RocePacketRepr::new(
            BthRepr::new(Opcode::RC_SEND_MIDDLE, wire::Qpn::new(0x11), Psn::new(psn)),
            payload,
        )
    }

    fn psns(v: &[Psn]) -> Vec<u32> {
        v.iter().map(|p| p.value()).collect()
    }

    #[test]
    fn keeps_ahead_names_each_gap_once_and_gives_back_in_order() {
        let mut s = SrStore::default();
        s.sync(Psn::new(10));
        let mut holes = Vec::new();
        // 10 missing, 11 arrives: ePSN is for the plain NAK, no hole.
        assert!(s.insert(&pkt(11, b"b"), &mut holes, 8));
        assert!(holes.is_empty());
        assert_eq!(s.front_nak(), Some(Psn::new(10)));
        assert_eq!(s.front_nak(), None, "once");
        // 14 arrives: 12 and 13 are new holes.
        assert!(s.insert(&pkt(14, b"e"), &mut holes, 8));
        assert_eq!(psns(&holes), [12, 13]);
        holes.clear();
        // Already held: dropped, nothing named again.
        assert!(!s.insert(&pkt(14, b"e"), &mut holes, 8));
        // 12 fills its hole: 13 was named already.
        assert!(s.insert(&pkt(12, b"c"), &mut holes, 8));
        assert!(holes.is_empty());
        // Nothing at ePSN yet.
        assert_eq!(s.take_front(), None);
        // ePSN executed elsewhere: 11 and 12 come back in order, then the gap at 13.
        s.sync(Psn::new(11));
        let b = s.take_front().expect("11 held");
        assert_eq!(RocePacketRepr::parse(&b).unwrap().bth.psn, Psn::new(11));
        assert_eq!(RocePacketRepr::parse(&b).unwrap().payload, b"b");
        s.give_back(b);
        s.sync(Psn::new(12));
        let b = s.take_front().expect("12 held");
        assert_eq!(RocePacketRepr::parse(&b).unwrap().payload, b"c");
        s.sync(Psn::new(13));
        assert_eq!(s.take_front(), None, "13 missing");
        assert!(s.has_later());
        // 13 was named by a hole NAK already: no plain NAK for it until SR_RENAK_AFTER more arrivals.
        assert_eq!(s.front_nak(), None);
    }

    #[test]
    fn bounds_window_bytes_and_renak() {
        let mut s = SrStore::default();
        let base = Psn::new(0xff_fff0); // wraps
        s.sync(base);
        let mut holes = Vec::new();
        assert!(
            !s.insert(&pkt(base.value(), b"x"), &mut holes, 8),
            "ePSN itself"
        );
        assert!(
            !s.insert(&pkt(base.add(SR_WINDOW).value(), b"x"), &mut holes, 8),
            "beyond the window"
        );
        assert!(s.insert(&pkt(base.add(SR_WINDOW - 1).value(), b"x"), &mut holes, 4));
        assert_eq!(holes.len(), 4, "at most max_holes named");
        assert_eq!(s.front_nak(), Some(base));
        // 15 more arrivals: not yet named again; the 16th renames it.
        for i in 1..SR_RENAK_AFTER as u32 {
            assert!(s.insert(&pkt(base.add(i + 10).value(), b"x"), &mut holes, 0));
            assert_eq!(s.front_nak(), None);
        }
        assert!(s.insert(&pkt(base.add(9).value(), b"x"), &mut holes, 0));
        assert_eq!(s.front_nak(), Some(base));
        // The byte bound.
        let big = vec![0u8; 8192];
        let mut kept = 0;
        for i in 100..1000 {
            if s.insert(&pkt(base.add(i).value(), &big), &mut holes, 0) {
                kept += 1;
            }
        }
        assert!(s.bytes <= SR_STORE_BYTES);
        assert!(kept < 900, "the byte bound stopped it at {kept}");
        // A READ's response PSNs skip past everything: all dropped.
        s.sync(base.add(5000));
        assert!(!s.has_later());
        assert_eq!(s.bytes, 0);
    }
}
