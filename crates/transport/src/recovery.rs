//! The RC requester's loss recovery beyond the letter of IBTA, with nothing changed on the
//! wire: a congestion window in packets (slow start and congestion avoidance, NewReno-like:
//! one multiplicative decrease per loss episode, on a sequence NAK or a timeout) and a
//! retransmission timer estimated from the round trip time (RFC 6298) that fires well before
//! the local ACK timeout after a lost tail.
//!
//! A probe resends from the oldest unacknowledged PSN, which is always legal: the responder
//! either executes it (it was missing) or answers it as a duplicate with an ACK of its
//! expected PSN minus one (IBTA Vol 1 §9.9, duplicate requests; C9-105 as rxe_resp.c
//! `duplicate_request` cites it; READs are re-executed). A probe is not a local ACK timeout:
//! it uses no retry and does not restart the local ACK timer, so a dead path still ends in
//! `RETRY_EXC_ERR` after `retry_cnt` local ACK timeouts (IBTA Vol 1 §9.7.6.1.3).
//!
//! A timeout (local ACK timeout or second probe) that was spurious — the acknowledgements
//! were only late, as when a peer's engine or a user-space hop is descheduled for a few
//! milliseconds — is undone as soon as an acknowledgement shows it (the Eifel response,
//! RFC 3522 / RFC 4015, as F-RTO detects it, RFC 5682): the window returns to what it was.

use wire::Psn;

use crate::time::Time;

/// Window after a timeout: one packet, then slow start.
pub(crate) const LOSS_WINDOW: u32 = 1;
/// Packets the loss floor keeps above twice the bandwidth-delay product (ACK coalescing
/// and the responder's batching hold a few back).
const BDP_SLACK: u32 = 4;
/// How long the smallest round trip measured stands for the path's (ns).
const MIN_RTT_LIFETIME_NS: u64 = 10_000_000_000;
/// At most this many doublings of the retransmission timeout while nothing advances.
const MAX_BACKOFF: u32 = 3;

/// What a timeout changed in the window, kept until the next progress shows whether the
/// timeout was spurious.
#[derive(Clone, Copy, Debug)]
struct Undo {
    cwnd: u32,
    ssthresh: u32,
    ca_acked: u32,
    recover: Option<Psn>,
    since_loss: u32,
    loss_gap8: u64,
    /// One past the highest PSN sent since the timeout.
    resent_to: Psn,
}

/// Congestion window and round-trip state of one RC requester.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Recovery {
    /// Packets that may be outstanding (sent and not acknowledged), at most the QP's
    /// `max_unacked_psns`.
    pub(crate) cwnd: u32,
    /// Slow start below this, congestion avoidance at or above it.
    pub(crate) ssthresh: u32,
    /// Congestion avoidance: packets acknowledged since the window last grew by one.
    ca_acked: u32,
    /// The oldest unacknowledged PSN when acknowledgements were last counted.
    pub(crate) una: Psn,
    /// A loss episode lasts until everything sent when it began is acknowledged; the
    /// window is cut once per episode.
    recover: Option<Psn>,
    /// Smoothed round trip time and its mean deviation (RFC 6298), once measured.
    srtt_ns: Option<u64>,
    rttvar_ns: u64,
    /// The packet being timed: a first transmission carrying AckReq, when it left, and the
    /// oldest unacknowledged PSN then (what the path delivers while it is out).
    sample: Option<(Psn, Time, Psn)>,
    /// The smallest round trip measured, and when: the path's own delay, without the
    /// queue the window builds (forgotten after [`MIN_RTT_LIFETIME_NS`]).
    min_rtt: Option<(u64, Time)>,
    /// The path's bandwidth-delay product in packets (delivery rate × smallest round
    /// trip), a maximum that decays by an eighth per sample; `None` until measured.
    bdp: Option<u32>,
    /// Doublings of the retransmission timeout since the last progress.
    backoff: u32,
    /// Packets acknowledged since the current (or last) loss episode began.
    since_loss: u32,
    /// Packets acknowledged between the starts of loss episodes, smoothed (× 8); 0 until
    /// losses have shown how far apart they are.
    loss_gap8: u64,
    /// The window's upper limit (`max_unacked_psns`).
    max: u32,
    /// The path has lost something (a sequence NAK, implied NAK or local ACK timeout was
    /// seen): only then may the retransmission timer fire. On a path that never loses, a
    /// round trip longer than the estimate would only make it resend needlessly.
    seen_loss: bool,
    /// When the retransmission timer fires (`None` = not armed).
    pub(crate) probe_deadline: Option<Time>,
    /// A first probe is due: the oldest unacknowledged packet alone, with AckReq.
    pub(crate) probe_one: bool,
    /// The window before the last timeout, until the next progress.
    undo: Option<Undo>,
}

impl Recovery {
    pub(crate) fn new(max: u32) -> Recovery {
        Recovery {
            cwnd: max.max(1),
            ssthresh: max.max(1),
            ca_acked: 0,
            una: Psn::new(0),
            recover: None,
            srtt_ns: None,
            rttvar_ns: 0,
            sample: None,
            min_rtt: None,
            bdp: None,
            backoff: 0,
            since_loss: 0,
            loss_gap8: 0,
            max: max.max(1),
            seen_loss: false,
            probe_deadline: None,
            probe_one: false,
            undo: None,
        }
    }

    /// A new upper limit for the window (the QP's `max_unacked_psns` changed): a window
    /// still at the old limit (no loss cut it) moves to the new one.
    pub(crate) fn set_max(&mut self, max: u32) {
        let max = max.max(1);
        if self.cwnd >= self.max {
            self.cwnd = max;
        }
        if self.ssthresh >= self.max {
            self.ssthresh = max;
        }
        self.max = max;
        self.cwnd = self.cwnd.min(max);
        self.ssthresh = self.ssthresh.min(max);
    }

    /// `newly` packets were acknowledged: grow the window (one packet per packet acked in
    /// slow start, one packet per window in congestion avoidance), up to `max`.
    pub(crate) fn on_ack(&mut self, newly: u32, unacked: Psn, max: u32) {
        let max = max.max(1);
        if let Some(r) = self.recover {
            if !unacked.is_before(r) {
                self.recover = None;
            }
        }
        self.since_loss = self.since_loss.saturating_add(newly);
        let mut n = newly;
        while n > 0 && self.cwnd < max {
            if self.cwnd < self.ssthresh {
                let step = n.min(self.ssthresh - self.cwnd);
                self.cwnd += step;
                n -= step;
            } else {
                // The window may have shrunk under what was counted toward its growth
                // (a timeout inside a loss episode, a smaller limit): then the next
                // acknowledged packet completes the round.
                let need = self.cwnd.saturating_sub(self.ca_acked).max(1);
                if n >= need {
                    n -= need;
                    self.ca_acked = 0;
                    self.cwnd += 1;
                } else {
                    self.ca_acked += n;
                    n = 0;
                }
            }
        }
        self.cwnd = self.cwnd.min(max);
        self.backoff = 0;
    }

    /// A loss was detected (sequence NAK, implied NAK, probe or local ACK timeout) with
    /// `flight` packets outstanding and `sent_high` one past the highest PSN sent. Halves
    /// the window once per episode, but not below the loss-adaptive floor (see
    /// [`Recovery::floor`]) nor `min`; `timeout` restarts from [`LOSS_WINDOW`] (then slow
    /// start up to the halved window).
    pub(crate) fn on_loss(&mut self, flight: u32, sent_high: Psn, timeout: bool, min: u32) {
        self.seen_loss = true;
        if !timeout {
            // A sequence NAK: a packet really was lost; nothing to undo.
            self.undo = None;
        } else if self.undo.is_none() {
            self.undo = Some(Undo {
                cwnd: self.cwnd,
                ssthresh: self.ssthresh,
                ca_acked: self.ca_acked,
                recover: self.recover,
                since_loss: self.since_loss,
                loss_gap8: self.loss_gap8,
                resent_to: self.una,
            });
        }
        let in_episode = self.recover.is_some();
        if !in_episode {
            self.loss_gap8 = self.loss_gap8 - self.loss_gap8 / 8 + u64::from(self.since_loss);
            self.since_loss = 0;
            let floor = self.floor().max(min).max(1);
            self.ssthresh = (self.cwnd.min(flight.max(1)) / 2).max(floor);
            self.recover = Some(sent_high);
            self.ca_acked = 0;
        }
        if timeout {
            self.cwnd = LOSS_WINDOW;
            self.ca_acked = 0;
        } else if !in_episode {
            self.cwnd = self.ssthresh;
        }
    }

    /// A request packet left (after a timeout: a resend); `end` is one past its PSNs.
    pub(crate) fn on_sent(&mut self, end: Psn) {
        if let Some(u) = self.undo.as_mut() {
            if end.is_after(u.resent_to) {
                u.resent_to = end;
            }
        }
    }

    /// Progress after a timeout: the oldest unacknowledged PSN is now `unacked` while the
    /// go-back after the timeout has sent only up to `resent_to` (exclusive). If the
    /// acknowledgement covers a PSN not resent since, the responder got that PSN's original
    /// transmission — and, PSNs being accepted in order only, every one before it: the
    /// timeout was spurious and the window is put back as it was before it. Either way the
    /// question is settled (only the first progress after a timeout is unambiguous).
    /// Returns whether the timeout was undone. Call before [`Recovery::on_ack`].
    pub(crate) fn undo_if_spurious(&mut self, unacked: Psn) -> bool {
        let Some(u) = self.undo.take() else {
            return false;
        };
        if !unacked.is_after(u.resent_to) {
            return false;
        }
        self.cwnd = u.cwnd;
        self.ssthresh = u.ssthresh;
        self.ca_acked = u.ca_acked;
        self.recover = u.recover;
        self.since_loss = u.since_loss;
        self.loss_gap8 = u.loss_gap8;
        true
    }

    /// Go-back-N resends, after a loss, what was in flight behind it: with losses every G
    /// packets on average, a window of G / 2 costs at most about half a packet resent per
    /// packet delivered, whatever the window's limit. So the window is not halved below
    /// G / 2: random loss on a long path then leaves the window large (halving on every
    /// loss would shrink it far below what the path holds, 1.22 / sqrt(p) packets), and
    /// frequent loss or reordering shrinks it to a few packets.
    ///
    /// Nor does the floor exceed twice the path's bandwidth-delay product (plus a few
    /// packets), once measured: a window beyond it only queues behind the sender (in its
    /// socket or link), and a go-back resends that whole queue after each loss.
    pub(crate) fn floor(&self) -> u32 {
        let gap = u32::try_from(self.loss_gap8 / 16).unwrap_or(u32::MAX);
        let path = self
            .bdp
            .map_or(u32::MAX, |b| b.saturating_mul(2).saturating_add(BDP_SLACK));
        gap.min(path).min(self.max)
    }

    /// A packet carrying AckReq left; `fresh` when it was never sent before (only those
    /// are timed). The timing survives a go-back that resends it: the ACK may then answer
    /// the resend and the sample overestimate the round trip, which only makes probes
    /// later (under heavy loss a go-back comes before nearly every ACK, and dropping the
    /// sample each time would leave the round trip never measured).
    pub(crate) fn on_send(&mut self, psn: Psn, now: Time, fresh: bool) {
        if fresh && self.sample.is_none() {
            self.sample = Some((psn, now, self.una));
        }
    }

    /// Selective repeat: time the resend of the oldest unacknowledged PSN (unless a packet
    /// is being timed already).
    pub(crate) fn time_resend(&mut self, psn: Psn, now: Time) {
        if self.sample.is_none() {
            self.sample = Some((psn, now, self.una));
        }
    }

    /// Selective repeat: PSN `hole` was reported missing. A timed packet at or after it is
    /// acknowledged only once the hole is repaired, so its sample would measure the repair
    /// (a NAK, a resend, perhaps a lost resend) rather than the path: drop it.
    pub(crate) fn discard_sample_behind(&mut self, hole: Psn) {
        if self.sample.is_some_and(|(p, _, _)| !p.is_before(hole)) {
            self.sample = None;
        }
    }

    /// The oldest unacknowledged PSN is now `unacked`: finish the timing of a packet it
    /// covers.
    pub(crate) fn measure(&mut self, unacked: Psn, now: Time) {
        let Some((psn, sent, una_then)) = self.sample else {
            return;
        };
        if !unacked.is_after(psn) {
            return;
        }
        self.sample = None;
        let r = now.nanos_since(sent);
        let min = match self.min_rtt {
            Some((m, at)) if m <= r && now.nanos_since(at) < MIN_RTT_LIFETIME_NS => m,
            _ => {
                self.min_rtt = Some((r, now));
                r
            }
        };
        // Packets acknowledged while the timed one was out, over its round trip: the
        // delivery rate, whatever queue the window built; times the path's own delay.
        let delivered = u64::try_from(unacked.diff(una_then)).unwrap_or(0);
        if let Some(per_rtt) = delivered.saturating_mul(min).checked_div(r) {
            let sample = u32::try_from(per_rtt).unwrap_or(u32::MAX);
            let decayed = self.bdp.map_or(0, |b| b - b / 8);
            self.bdp = Some(sample.max(decayed));
        }
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(r);
                self.rttvar_ns = r / 2;
            }
            Some(s) => {
                self.rttvar_ns = (3 * self.rttvar_ns + s.abs_diff(r)) / 4;
                self.srtt_ns = Some((7 * s + r) / 8);
            }
        }
    }

    /// The retransmission timeout, with backoff: srtt + 4 rttvar bounded below by `min_ns`
    /// and above by `max_ns` (so that a few probes fit into one local ACK timeout even when
    /// the round trip varies wildly), `max_ns` before any round trip was measured; `None`
    /// when `min_ns` is 0 (probes off), nothing bounds it or the path never lost anything.
    pub(crate) fn rto_ns(&self, min_ns: u64, max_ns: u64) -> Option<u64> {
        if min_ns == 0 || !self.seen_loss {
            return None;
        }
        let est = match self.srtt_ns {
            Some(s) => s.saturating_add(self.rttvar_ns.saturating_mul(4)),
            None if max_ns == u64::MAX => return None,
            None => max_ns,
        };
        let base = est.min(max_ns).max(min_ns);
        Some(base.saturating_mul(1 << self.backoff.min(MAX_BACKOFF)))
    }

    /// Whether a probe already fired since the last progress.
    pub(crate) fn backed_off(&self) -> bool {
        self.backoff > 0
    }

    /// A probe fired: the next timeout waits twice as long.
    pub(crate) fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }

    /// Smoothed round trip time, once measured.
    pub(crate) fn srtt_ns(&self) -> Option<u64> {
        self.srtt_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u32 = 128;
    const FLOOR: u32 = 2;

    fn at(us: u64) -> Time {
        Time::from_micros(us)
    }

    #[test]
    fn starts_at_the_limit_and_never_exceeds_it() {
        let mut r = Recovery::new(MAX);
        assert_eq!(r.cwnd, MAX);
        r.on_ack(1000, Psn::new(1000), MAX);
        assert_eq!(r.cwnd, MAX);
        assert_eq!(Recovery::new(0).cwnd, 1);
    }

    #[test]
    fn a_new_limit_moves_an_uncut_window_and_caps_a_cut_one() {
        let mut r = Recovery::new(MAX);
        r.set_max(512);
        assert_eq!((r.cwnd, r.ssthresh), (512, 512));
        r.on_ack(1000, Psn::new(1000), 512);
        assert_eq!(r.cwnd, 512);
        // A window a loss cut stays where it is; a smaller limit caps it.
        r.on_loss(100, Psn::new(1100), false, FLOOR);
        let cut = r.cwnd;
        assert!(cut < 512);
        r.set_max(1024);
        assert_eq!(r.cwnd, cut);
        r.set_max(8);
        assert_eq!(r.cwnd, cut.min(8));
        assert!(r.ssthresh <= 8);
    }

    #[test]
    fn a_timeout_inside_a_loss_episode_restarts_the_growth_count() {
        // A NAK with 20 packets in flight cuts the window to 10 and opens an episode that
        // lasts until PSN 1000 is acknowledged. Partial ACKs grow it to 12 with 11 packets
        // counted toward the next step; a timeout in the same episode drops it to one
        // packet, and the count must restart with it: slow start back to the threshold
        // (10), then one packet per window — the stale count of 11 underflowed there.
        let mut r = Recovery::new(MAX);
        r.on_loss(20, Psn::new(1000), false, FLOOR);
        assert_eq!((r.cwnd, r.ssthresh), (10, 10));
        r.on_ack(10, Psn::new(10), MAX);
        r.on_ack(11, Psn::new(21), MAX);
        r.on_ack(11, Psn::new(32), MAX);
        assert_eq!((r.cwnd, r.ca_acked), (12, 11));
        r.on_loss(12, Psn::new(1000), true, FLOOR);
        assert_eq!((r.cwnd, r.ca_acked), (LOSS_WINDOW, 0));
        r.on_ack(9, Psn::new(41), MAX);
        assert_eq!((r.cwnd, r.ca_acked), (10, 0));
        r.on_ack(10, Psn::new(51), MAX);
        assert_eq!((r.cwnd, r.ca_acked), (11, 0));
    }

    #[test]
    fn a_growth_count_above_the_window_completes_the_round() {
        // However the count came to exceed the window, the next acknowledged packet grows
        // the window by one and restarts the count.
        let mut r = Recovery::new(MAX);
        r.on_loss(16, Psn::new(16), false, FLOOR);
        (r.cwnd, r.ssthresh, r.ca_acked) = (8, 8, 20);
        r.on_ack(1, Psn::new(17), MAX);
        assert_eq!((r.cwnd, r.ca_acked), (9, 0));
    }

    #[test]
    fn the_floor_stays_within_twice_the_paths_bandwidth_delay_product() {
        // Timed packet 1: out for 100 µs (the path's own delay) while 11 packets were
        // acknowledged: 11 packets per round trip. Timed packet 2: out for 400 µs behind a
        // queue the window built, 40 acknowledged meanwhile: the same rate, so about 10
        // packets per 100 µs — the queue does not inflate the estimate.
        let mut r = Recovery::new(MAX);
        r.on_send(Psn::new(10), at(0), true);
        r.measure(Psn::new(11), at(100));
        assert_eq!(r.bdp, Some(11));
        r.una = Psn::new(11);
        r.on_send(Psn::new(50), at(100), true);
        r.measure(Psn::new(51), at(500));
        assert_eq!(
            r.bdp,
            Some(10),
            "40 x 100 / 400, the decayed 11 not above it"
        );
        // Losses 100 packets apart would hold the window at 50; the path needs about
        // 10, so the floor is 2 x 10 + 4.
        r.loss_gap8 = 100 * 8;
        assert_eq!(r.floor(), 24);
        // Without a measured path the loss gap alone sets it.
        let mut fresh = Recovery::new(MAX);
        fresh.loss_gap8 = 100 * 8;
        assert_eq!(fresh.floor(), 50);
    }

    #[test]
    fn nak_halves_the_window_once_per_episode() {
        let mut r = Recovery::new(MAX);
        // 100 packets in flight, PSNs up to 99 sent.
        r.on_loss(100, Psn::new(100), false, FLOOR);
        assert_eq!(r.cwnd, 50, "min(cwnd, flight) / 2");
        assert_eq!(r.ssthresh, 50);
        // A second NAK before everything sent at the first one is acknowledged: same episode.
        r.on_ack(10, Psn::new(10), MAX);
        r.on_loss(90, Psn::new(100), false, FLOOR);
        assert_eq!(r.cwnd, 50);
        // Past the episode: the next loss cuts again.
        r.on_ack(90, Psn::new(100), MAX);
        assert_eq!(r.cwnd, 51, "congestion avoidance: +1 for a window of ACKs");
        r.on_loss(40, Psn::new(140), false, FLOOR);
        assert_eq!(r.cwnd, 20, "min(cwnd, flight 40) / 2");
        // Never below the floor.
        for i in 0..20u32 {
            let psn = Psn::new(1000 + 100 * i);
            r.on_ack(1, psn, MAX);
            r.on_loss(1, psn.add(1), false, FLOOR);
        }
        assert_eq!(r.cwnd, FLOOR);
    }

    #[test]
    fn timeout_restarts_from_one_packet_then_slow_start_then_linear() {
        let mut r = Recovery::new(MAX);
        r.on_loss(64, Psn::new(64), true, FLOOR);
        assert_eq!(r.cwnd, LOSS_WINDOW);
        assert_eq!(r.ssthresh, 32);
        // Slow start: one packet per packet acknowledged, up to ssthresh.
        r.on_ack(1, Psn::new(1), MAX);
        assert_eq!(r.cwnd, 2);
        r.on_ack(2, Psn::new(3), MAX);
        assert_eq!(r.cwnd, 4);
        r.on_ack(100, Psn::new(103), MAX);
        // 28 packets take it to ssthresh (32); of the other 72, 32 add one packet (33),
        // 33 another (34), 7 count toward the next.
        assert_eq!(r.cwnd, 34);
        // Congestion avoidance: a window's worth of ACKs (27 more here) adds one packet.
        r.on_ack(26, Psn::new(129), MAX);
        assert_eq!(r.cwnd, 34);
        r.on_ack(1, Psn::new(130), MAX);
        assert_eq!(r.cwnd, 35);
    }

    #[test]
    fn a_spurious_timeout_is_undone_a_real_one_is_not() {
        let mut r = Recovery::new(MAX);
        r.on_loss(64, Psn::new(64), true, FLOOR);
        assert_eq!((r.cwnd, r.ssthresh), (LOSS_WINDOW, 32));
        // The go-back resent PSN 0 only; an ACK covering 0..=9 answers the originals.
        r.on_sent(Psn::new(1));
        assert!(r.undo_if_spurious(Psn::new(10)));
        assert_eq!((r.cwnd, r.ssthresh), (MAX, MAX));
        assert!(r.recover.is_none());
        assert_eq!(r.loss_gap8, 0, "the gap estimate is as before");
        // A real timeout: the first progress covers only what was resent.
        r.una = Psn::new(10);
        r.on_loss(64, Psn::new(74), true, FLOOR);
        r.on_sent(Psn::new(11));
        assert!(!r.undo_if_spurious(Psn::new(11)));
        assert_eq!(r.cwnd, LOSS_WINDOW);
        // Settled: a later jump is not taken for a spurious timeout.
        assert!(!r.undo_if_spurious(Psn::new(70)));
        // Nothing resent yet: any progress answers an original.
        r.una = Psn::new(70);
        r.on_loss(64, Psn::new(138), true, FLOOR);
        assert!(r.undo_if_spurious(Psn::new(71)));
        // A sequence NAK after a timeout is a real loss: nothing left to undo.
        r.on_loss(64, Psn::new(138), true, FLOOR);
        r.on_loss(60, Psn::new(138), false, FLOOR);
        assert!(!r.undo_if_spurious(Psn::new(100)));
    }

    #[test]
    fn the_floor_follows_the_distance_between_losses() {
        // Rare losses (one every 200 packets): the window stays near the limit.
        let mut r = Recovery::new(MAX);
        let mut psn = Psn::new(0);
        for i in 0..40 {
            psn = psn.add(200);
            r.on_ack(200, psn, MAX);
            r.on_loss(MAX, psn.add(MAX), false, FLOOR);
            if i >= 20 {
                assert!(r.cwnd >= 90, "cwnd {} after {i} losses", r.cwnd);
            }
        }
        assert_eq!(r.floor(), 99);
        // Then a loss every 4 packets (heavy loss and reordering): down to the minimum.
        for _ in 0..60 {
            psn = psn.add(MAX);
            r.on_ack(4, psn, MAX);
            r.on_loss(4, psn.add(4), false, FLOOR);
        }
        assert_eq!(r.floor(), 2);
        assert_eq!(r.cwnd, FLOOR);
    }

    #[test]
    fn rtt_estimate_and_timeout_bounds() {
        let mut r = Recovery::new(MAX);
        assert_eq!(
            r.rto_ns(1_000_000, 8_000_000),
            None,
            "no loss seen: no probe"
        );
        r.seen_loss = true;
        assert_eq!(
            r.rto_ns(1_000_000, u64::MAX),
            None,
            "no sample, no bound: no probe"
        );
        assert_eq!(
            r.rto_ns(1_000_000, 8_000_000),
            Some(8_000_000),
            "no sample: the cap"
        );
        r.on_send(Psn::new(9), at(0), true);
        // A retransmission is never timed, and one sample at a time.
        r.on_send(Psn::new(10), at(5), true);
        r.measure(Psn::new(9), at(100));
        assert_eq!(r.srtt_ns(), None, "ACK does not cover PSN 9 yet");
        r.measure(Psn::new(10), at(200));
        assert_eq!(r.srtt_ns(), Some(200_000));
        // srtt 200 us + 4 x 100 us = 600 us, raised to the 1 ms floor.
        assert_eq!(r.rto_ns(1_000_000, u64::MAX), Some(1_000_000));
        assert_eq!(r.rto_ns(100_000, u64::MAX), Some(600_000));
        assert_eq!(r.rto_ns(0, u64::MAX), None, "0 turns probes off");
        assert_eq!(r.rto_ns(100_000, 500_000), Some(500_000), "capped");
        r.back_off();
        r.back_off();
        assert_eq!(r.rto_ns(100_000, u64::MAX), Some(2_400_000));
        r.on_ack(1, Psn::new(11), MAX);
        assert_eq!(
            r.rto_ns(100_000, u64::MAX),
            Some(600_000),
            "progress resets the backoff"
        );
        r.on_send(Psn::new(11), at(1000), false);
        r.measure(Psn::new(12), at(5000));
        assert_eq!(r.srtt_ns(), Some(200_000), "retransmissions are not timed");
        // A go-back keeps the sample in flight (at worst an overestimate).
        r.on_send(Psn::new(12), at(6000), true);
        r.on_loss(1, Psn::new(13), false, FLOOR);
        r.measure(Psn::new(13), at(6600));
        assert_eq!(r.srtt_ns(), Some((7 * 200_000 + 600_000) / 8));
    }
}
