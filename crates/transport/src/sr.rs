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
const SR_RENAK_AFTER: u64 = 64;

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
    /// window or the byte bound (then it is dropped).
    pub(crate) fn insert(&mut self, pkt: &RocePacketRepr<'_>) -> bool {
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
        while self.slots.len() <= d {
            self.slots.push_back(Slot::Missing { naked_at: None });
        }
        self.bytes += len;
        self.slots[d] = Slot::Held(buf);
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
        if self.sr_rx.insert(pkt) {
            self.counters.sr_out_of_order_kept += 1;
        } else {
            self.counters.sr_out_of_order_dropped += 1;
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
            .any(|&(p, t)| p == psn && now.nanos_since(t) < rtt);
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
        self.rec
            .on_loss(self.flight(), self.sent_high, false, self.cfg.min_window);
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
        self.sq.iter().position(|w| {
            w.started && !psn.is_before(w.first_psn) && !psn.is_after(w.last_psn)
        })
    }
}
