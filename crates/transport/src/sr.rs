//! Selective repeat for RC (docs/wire.md §5.6), a mode both ends of a connection turn on only
//! when both agreed to it ([`QpConfig::selective_repeat`](crate::QpConfig)); off, nothing here
//! runs and the transport is IBTA go-back-N.
//!
//! Responder: a request ahead of ePSN (within [`SR_WINDOW`] packets and [`SR_STORE_BYTES`]) is
//! copied into a reassembly store and executed once every PSN before it has been, so
//! placement, completions, READ/atomic execution and ACKs see requests in PSN order exactly
//! as without selective repeat. A missing PSN is named only once its gap is old enough
//! (three arrivals, and older than the reordering window learned from needless resends):
//! ePSN by the plain sequence NAK, as IBTA's (so it still acknowledges everything before
//! it), named again if it stays missing for [`SR_RENAK_AFTER`] more arrivals; later PSNs by
//! hole NAKs ([`SR_HOLE_OFFSET`]).
//!
//! Requester: a sequence NAK acknowledges what it always did and asks for that one packet;
//! it is resent alone, at most once per round trip; timeouts resend the oldest
//! unacknowledged packet, and only a second local ACK timeout without progress goes back N.
//! Its window is the responder's store ([`SR_WINDOW`] packets).

use std::collections::VecDeque;

use wire::{NakCode, OpKind, Psn, RocePacketRepr, Syndrome};

use crate::mem::Memory;
use crate::qp::{Qp, RecvQueue};
use crate::responder::Response;
use crate::state::{QpState, Service};
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
/// A missing PSN is named (NAKed) once at least this many requests arrived ahead of ePSN
/// since its gap appeared, the one that showed it included (TCP's duplicate-ACK threshold, RFC 5681 §3.2) and the gap is
/// older than the reordering the path has shown: the time by which a PSN that was named
/// came anyway before its resend could have (seen as a second copy arriving: the resend
/// was not needed, RFC 3708; TCP's RACK reordering window, RFC 8985 §6.2, learns the
/// same way). Arrivals come in bursts, so the window is a time, not a count.
const SR_REORDER_MIN_ARRIVALS: u64 = 3;
/// The reordering window never exceeds this.
const SR_REORDER_MAX_NS: u64 = 4_000_000;
/// ... and loses 1/2^this of itself at every arrival ahead of ePSN (halved in about 2,800
/// arrivals without a new sample).
const SR_REORDER_DECAY_SHIFT: u32 = 12;

/// One PSN at or after ePSN in the responder's reassembly store.
#[derive(Debug)]
enum Slot {
    /// Not received; its gap appeared at arrival count `seen`, time `seen_at`; `naked_at`
    /// is the arrival count when it was last NAKed.
    Missing {
        seen: u64,
        seen_at: Time,
        naked_at: Option<u64>,
    },
    /// Received ahead of ePSN: the packet from BTH to the last pad byte; `late` is how long
    /// after its gap appeared it came, if it was NAKed before it came.
    Held { pkt: Vec<u8>, late: Option<u64> },
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
    /// The reordering window (ns, at most [`SR_REORDER_MAX_NS`]).
    reorder_ns: u64,
    /// The time of the last packet handed to the store ([`SrStore::tick`]).
    now: Time,
    /// NAKed PSNs executed recently and how late their first copy came, so that a second
    /// copy arriving after execution still teaches the threshold.
    executed_late: VecDeque<(Psn, u64)>,
    /// Every missing slot before this index has been named by a hole NAK (a hole the
    /// response queue had no room to name when it appeared is named by a later arrival).
    named: usize,
    /// Spare buffers.
    pool: Vec<Vec<u8>>,
}

impl SrStore {
    /// The responder's clock, before each packet is handled.
    pub(crate) fn tick(&mut self, now: Time) {
        self.now = now;
    }

    fn missing(&self) -> Slot {
        Slot::Missing {
            seen: self.arrivals,
            seen_at: self.now,
            naked_at: None,
        }
    }

    /// A NAKed PSN was executed, its first copy `late` ns after its gap appeared: keep that
    /// for [`SrStore::duplicate`] (the last 64).
    fn remember_late(&mut self, psn: Psn, late: u64) {
        if self.executed_late.len() >= 64 {
            self.executed_late.pop_front();
        }
        self.executed_late.push_back((psn, late));
    }

    /// Whether a gap that appeared at arrival `seen`, time `seen_at`, is old enough to name
    /// now (the rule at [`SR_REORDER_MIN_ARRIVALS`]).
    fn old_enough(&self, seen: u64, seen_at: Time) -> bool {
        self.arrivals - seen + 1 >= SR_REORDER_MIN_ARRIVALS
            && self.now.nanos_since(seen_at) >= self.reorder_ns
    }

    /// A named PSN came `late` ns after its gap appeared and a second copy came too.
    fn learn(&mut self, late: u64) {
        let w = late.saturating_add(late / 8).min(SR_REORDER_MAX_NS);
        self.reorder_ns = self.reorder_ns.max(w);
    }

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
        self.named = self.named.saturating_sub(d as usize);
        self.base = epsn;
    }

    /// Drop everything (QP error or reset).
    pub(crate) fn clear(&mut self) {
        while let Some(s) = self.slots.pop_front() {
            self.recycle(s);
        }
        self.bytes = 0;
        self.named = 0;
    }

    fn recycle(&mut self, s: Slot) {
        if let Slot::Held { pkt: mut b, .. } = s {
            self.bytes -= b.len();
            if self.pool.len() < 64 {
                b.clear();
                self.pool.push(b);
            }
        }
    }

    /// Whether a packet ahead of ePSN is held (so ePSN is known to be missing).
    pub(crate) fn has_later(&self) -> bool {
        matches!(self.slots.back(), Some(Slot::Held { .. }))
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
        if let Some(Slot::Held { late, .. }) = self.slots.get_mut(d) {
            // Again: if it had been NAKed, one of the two copies was a needless resend and
            // the first came `late` arrivals after its gap appeared (or the network
            // duplicated the resend: the threshold then decays back).
            if let Some(l) = late.take() {
                self.learn(l);
            }
            return false;
        }
        if self.bytes + len > SR_STORE_BYTES {
            return false;
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.resize(len, 0);
        if pkt.emit(&mut buf).is_err() {
            self.pool.push(buf);
            return false;
        }
        self.arrivals += 1;
        self.reorder_ns -= self.reorder_ns >> SR_REORDER_DECAY_SHIFT;
        let arrivals = self.arrivals;
        let now = self.now;
        while self.slots.len() <= d {
            let m = self.missing();
            self.slots.push_back(m);
        }
        let late = match self.slots[d] {
            Slot::Missing {
                seen_at,
                naked_at: Some(_),
                ..
            } => Some(now.nanos_since(seen_at)),
            _ => None,
        };
        self.bytes += len;
        self.slots[d] = Slot::Held { pkt: buf, late };
        // Name the missing PSNs behind the last held one, oldest first, as far as
        // `max_holes` allows; index 0 (ePSN) is named by the plain NAK
        // ([`SrStore::front_nak`]).
        // Gaps appear in PSN order, so the first one too young to name ends the walk.
        let mut i = self.named.max(1);
        while i < self.slots.len() && holes.len() < max_holes {
            if let Some(&Slot::Missing { seen, seen_at, .. }) = self.slots.get(i) {
                if !self.old_enough(seen, seen_at) {
                    break;
                }
                if let Some(Slot::Missing { naked_at, .. }) = self.slots.get_mut(i) {
                    if naked_at.is_none() {
                        *naked_at = Some(arrivals);
                        holes.push(self.base.add(i as u32));
                    }
                }
            }
            i += 1;
        }
        self.named = i;
        true
    }

    /// The request at ePSN arrived and is executed without passing through the store: if
    /// it had been NAKed, remember how late it came (see [`SrStore::duplicate`]).
    pub(crate) fn arrived_in_order(&mut self, epsn: Psn) {
        self.sync(epsn);
        if let Some(Slot::Missing {
            seen_at,
            naked_at: Some(_),
            ..
        }) = self.slots.front()
        {
            let l = self.now.nanos_since(*seen_at);
            self.remember_late(epsn, l);
        }
    }

    /// A request before ePSN arrived again: if it was NAKed and came late, learn from it as
    /// [`SrStore::insert`] does for a copy that is still held.
    pub(crate) fn duplicate(&mut self, psn: Psn) {
        if let Some(i) = self.executed_late.iter().position(|&(p, _)| p == psn) {
            let (_, l) = self.executed_late.remove(i).unwrap_or((psn, 0));
            self.learn(l);
        }
    }

    /// The packet at `base` (ePSN), if held; its slot becomes missing again.
    pub(crate) fn take_front(&mut self) -> Option<Vec<u8>> {
        if !matches!(self.slots.front(), Some(Slot::Held { .. })) {
            return None;
        }
        let missing = self.missing();
        let slot = self.slots.front_mut()?;
        let Slot::Held { pkt: b, late } = std::mem::replace(slot, missing) else {
            return None;
        };
        if let Some(l) = late {
            self.remember_late(self.base, l);
        }
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

    /// ePSN (`base`) is missing while later packets are held: NAK it once its gap is old
    /// enough to name, and again if [`SR_RENAK_AFTER`] packets arrived since it was.
    pub(crate) fn front_nak(&mut self) -> Option<Psn> {
        if !self.has_later() {
            return None;
        }
        let arrivals = self.arrivals;
        let due = match self.slots.front() {
            Some(&Slot::Missing {
                seen,
                seen_at,
                naked_at,
            }) => naked_at.map_or(self.old_enough(seen, seen_at), |t| {
                arrivals - t >= SR_RENAK_AFTER
            }),
            _ => false,
        };
        if !due {
            return None;
        }
        if let Some(Slot::Missing { naked_at, .. }) = self.slots.front_mut() {
            *naked_at = Some(arrivals);
        }
        Some(self.base)
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
        self.cfg.selective_repeat && self.cfg.service == Service::Rc && self.cfg.xrc.is_none()
    }

    fn sr_push_nak(&mut self, psn: Psn) {
        self.counters.send_nak += 1;
        self.counters.sr_naks_sent += 1;
        self.resp.responses.push_back(Response::Ack {
            psn,
            syndrome: Syndrome::nak(NakCode::PSN_SEQ_ERROR),
        });
    }

    /// Responder: the plain NAK for ePSN if it is due and the response queue has room.
    fn sr_front_nak_if_room(&mut self) {
        if self.resp.responses.len() < self.responses_cap() {
            if let Some(p) = self.resp.sr_rx.front_nak() {
                self.sr_push_nak(p);
            }
        }
    }

    /// Responder: a request ahead of ePSN.
    pub(crate) fn sr_keep(&mut self, pkt: &RocePacketRepr<'_>) {
        self.resp.sr_rx.sync(self.resp.epsn);
        self.sr_front_nak_if_room();
        let room = (self.responses_cap() / HOLE_NAK_QUEUE_DIVISOR)
            .saturating_sub(self.resp.responses.len());
        let mut holes = Vec::new();
        if self.resp.sr_rx.insert(pkt, &mut holes, room) {
            self.counters.sr_out_of_order_kept += 1;
        } else {
            self.counters.sr_out_of_order_dropped += 1;
        }
        for h in holes {
            self.counters.sr_hole_naks_sent += 1;
            self.sr_push_nak(h.add(SR_HOLE_OFFSET));
        }
        self.sr_front_nak_if_room();
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
                self.resp.sr_rx.clear();
                return;
            }
            self.resp.sr_rx.sync(self.resp.epsn);
            if self.resp.responses.len() >= self.responses_cap() {
                break;
            }
            let Some(buf) = self.resp.sr_rx.take_front() else {
                break;
            };
            if let Ok(pkt) = RocePacketRepr::parse(&buf) {
                if let Some(info) = pkt.bth.opcode.info() {
                    let before = self.resp.epsn;
                    self.rc_execute(&pkt, info, mem, srq);
                    ack = self.resp.epsn != before
                        && matches!(info.kind, OpKind::Send | OpKind::RdmaWrite);
                }
            }
            self.resp.sr_rx.give_back(buf);
        }
        if ack {
            // The kept requests' AckReq bits were set for other ACK points: acknowledge
            // everything executed so far (coalesced with a queued ACK).
            self.push_ack(self.resp.epsn.sub(1));
        }
        self.resp.sr_rx.sync(self.resp.epsn);
        if let Some(p) = self.resp.sr_rx.front_nak() {
            self.sr_push_nak(p);
        }
    }

    /// Requester: a sequence NAK naming `psn` (in `[unacked, sent_high)`).
    pub(crate) fn sr_on_nak(&mut self, now: Time, psn: Psn) {
        self.counters.rcvd_seq_err += 1;
        self.rec.discard_sample_behind(psn);
        let rtt = self.rec.srtt_ns().unwrap_or(0);
        let recent = self
            .req
            .sr_tx
            .resent
            .iter()
            .find(|&&(p, t)| p == psn && now.nanos_since(t) < rtt)
            .map(|&(_, t)| t);
        if let (Some(t), true) = (recent, psn == self.comp.unacked) {
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
            || !psn.is_before(self.req.next_psn)
            || self.req.sr_tx.resend.contains(&psn)
        {
            self.counters.sr_naks_ignored += 1;
            return;
        }
        // A NAK costs one packet here, not a window, and under reordering most NAKs are
        // spurious: the window stays at its limit (`max_unacked_psns`, rxe's fixed window;
        // ECN/DCQCN is the congestion response, docs/wire.md §11). Timeouts still cut it.
        let floor = self.window_limit();
        self.rec
            .on_loss(self.flight(), self.req.sent_high, false, floor);
        self.req.sr_tx.resend.push_back(psn);
    }

    /// Requester: a PSN at or after the oldest unacknowledged one is known missing (NAKed,
    /// waiting for or in its resend).
    pub(crate) fn sr_hole_known(&self) -> bool {
        self.sr_active() && !(self.req.sr_tx.resend.is_empty() && self.req.sr_tx.resent.is_empty())
    }

    /// Requester: progress; forget resend bookkeeping for acknowledged PSNs.
    pub(crate) fn sr_progress(&mut self) {
        let una = self.comp.unacked;
        self.req.sr_tx.resent.retain(|&(p, _)| !p.is_before(una));
        self.req.sr_tx.resend.retain(|p| !p.is_before(una));
        self.req.sr_tx.timeouts = 0;
    }

    /// Requester: remember that `psn` was resent alone at `now`.
    pub(crate) fn sr_note_resent(&mut self, psn: Psn, now: Time) {
        self.counters.sr_single_resends += 1;
        if psn == self.comp.unacked {
            // The oldest unacknowledged PSN: the ACK that passes it answers this resend one
            // round trip from now (packets behind a hole never time the path, see
            // `sr_hole_known`).
            self.rec.time_resend(psn, now);
        }
        if let Some(e) = self.req.sr_tx.resent.iter_mut().find(|(p, _)| *p == psn) {
            e.1 = now;
            return;
        }
        if self.req.sr_tx.resent.len() >= SR_WINDOW as usize {
            self.req.sr_tx.resent.pop_front();
        }
        self.req.sr_tx.resent.push_back((psn, now));
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
    fn names_a_gap_after_three_arrivals_and_gives_back_in_order() {
        let mut s = SrStore::default();
        s.sync(Psn::new(10));
        let mut holes = Vec::new();
        // 10 missing, 11 arrives: a gap, too young to name (one arrival has shown it).
        assert!(s.insert(&pkt(11, b"b"), &mut holes, 8));
        assert!(holes.is_empty());
        assert_eq!(s.front_nak(), None);
        // 14 arrives: 12 and 13 are new gaps; 15 is the third arrival behind ePSN's gap.
        for p in [14, 15] {
            assert!(s.insert(&pkt(p, b"e"), &mut holes, 8));
        }
        assert!(holes.is_empty(), "12 and 13 were shown by two arrivals");
        assert_eq!(s.front_nak(), Some(Psn::new(10)));
        assert_eq!(s.front_nak(), None, "once");
        assert!(s.insert(&pkt(16, b"f"), &mut holes, 8));
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
        // 13 was named by a hole NAK already: no plain NAK for it until SR_RENAK_AFTER more
        // arrivals.
        assert_eq!(s.front_nak(), None);
    }

    #[test]
    fn a_hole_the_response_queue_could_not_name_is_named_later() {
        let mut s = SrStore::default();
        s.sync(Psn::new(0));
        let mut holes = Vec::new();
        // 1..=3 missing behind 4; then three arrivals with no room to name anything.
        for p in [4, 5, 6, 7] {
            assert!(s.insert(&pkt(p, b"x"), &mut holes, 0));
        }
        assert!(holes.is_empty());
        // Room again: the next arrival names every old enough hole, oldest first, up to
        // the room it has.
        assert!(s.insert(&pkt(9, b"x"), &mut holes, 2));
        assert_eq!(psns(&holes), [1, 2]);
        holes.clear();
        assert!(s.insert(&pkt(10, b"x"), &mut holes, 8));
        assert_eq!(psns(&holes), [3], "8 appeared only two arrivals ago");
    }

    #[test]
    fn learns_the_reordering_window_from_a_needless_resend() {
        let t = |us: u64| Time::from_nanos(us * 1_000);
        let mut s = SrStore::default();
        s.tick(t(0));
        s.sync(Psn::new(0));
        let mut holes = Vec::new();
        for p in [1, 2, 3] {
            assert!(s.insert(&pkt(p, b"x"), &mut holes, 8));
        }
        assert_eq!(s.front_nak(), Some(Psn::new(0)), "no reordering seen yet");
        // PSN 0 comes 500 µs after its gap appeared, then its resend: the NAK was needless.
        s.tick(t(500));
        s.arrived_in_order(Psn::new(0));
        s.sync(Psn::new(4));
        s.duplicate(Psn::new(0));
        assert_eq!(s.reorder_ns, 562_500, "the late time and an eighth");
        // A new gap at 4 is named only once it is older than that.
        s.tick(t(1_000));
        for p in [5, 6, 7] {
            assert!(s.insert(&pkt(p, b"x"), &mut holes, 8));
        }
        assert_eq!(s.front_nak(), None, "3 arrivals but only 0 µs old");
        s.tick(t(1_600));
        assert!(s.insert(&pkt(8, b"x"), &mut holes, 8));
        assert_eq!(s.front_nak(), Some(Psn::new(4)));
        // The same for a gap behind ePSN, and the window decays with arrivals.
        let before = s.reorder_ns;
        for p in 10..20 {
            assert!(s.insert(&pkt(p, b"x"), &mut holes, 8));
        }
        assert!(holes.is_empty(), "9 is 0 µs old");
        assert!(s.reorder_ns < before);
        s.tick(t(2_200));
        assert!(s.insert(&pkt(20, b"x"), &mut holes, 8));
        assert_eq!(psns(&holes), [9]);
        // A second copy of a PSN never NAKed teaches nothing.
        let w = s.reorder_ns;
        assert!(!s.insert(&pkt(10, b"x"), &mut holes, 8));
        s.duplicate(Psn::new(2));
        assert_eq!(s.reorder_ns, w);
    }

    #[test]
    fn the_window_is_the_store_with_selective_repeat() {
        let mut qp = Qp::new(crate::QpConfig::new(wire::Qpn::new(0x11), Service::Rc));
        assert_eq!(qp.window(), 128, "rxe's window without it");
        qp.set_selective_repeat(true).unwrap();
        assert_eq!(qp.window(), SR_WINDOW);
        qp.set_max_unacked_psns(4096);
        assert_eq!(qp.window(), 4096, "a larger limit stands");
        qp.set_max_unacked_psns(128);
        qp.set_selective_repeat(false).unwrap();
        assert_eq!(qp.window(), 128);
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
        assert!(s.insert(&pkt(base.add(SR_WINDOW - 2).value(), b"x"), &mut holes, 4));
        assert!(holes.is_empty(), "two arrivals");
        assert!(s.insert(&pkt(base.add(SR_WINDOW - 3).value(), b"x"), &mut holes, 4));
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
