//! The RC requester's loss recovery, packet by packet through the hand-controlled pipe of
//! `sim::pair`: a sequence NAK is answered at once from its PSN with a window cut to half of
//! what was in flight, nothing acknowledged is sent again, the responder NAKs a gap once, a
//! lost tail is recovered by the retransmission timer well before the local ACK timeout, and
//! that timer's probes use no retries (IBTA Vol 1 §9.7.6.1.3: only local ACK timeouts and
//! NAKs do), and a timeout that an acknowledgement shows was spurious gives its window back.

use sim::pair::{Fate, Pair, BUF_VA};
use transport::wire::{AckKind, NakCode, Psn};
use transport::{
    local_ack_timeout_ns, LocalData, Mtu, QpAttr, QpState, SendWr, Service, Sge, SgeList, WcStatus,
    WrOpcode,
};

const MTU: usize = 1024;
const DST: u64 = BUF_VA + 0x40000;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn write_wr(p: &Pair, id: u64, src: u64, dst: u64, len: usize) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::RdmaWrite);
    wr.local = LocalData::Sges(SgeList::single(Sge {
        addr: src,
        length: len as u32,
        lkey: p.lkey(0),
    }));
    wr.remote_addr = dst;
    wr.rkey = p.rkey(1);
    wr
}

/// PSNs of the packets waiting in the pipe toward `to`.
fn in_pipe(p: &Pair, to: usize) -> Vec<u32> {
    p.pipe[to]
        .iter()
        .map(|b| {
            transport::wire::RocePacketRepr::parse(b)
                .unwrap()
                .bth
                .psn
                .value()
        })
        .collect()
}

/// Deliver what is in the pipe toward `to`, losing the packets `lose` picks.
fn deliver(p: &mut Pair, to: usize, lose: &mut dyn FnMut(u32) -> bool) {
    while let Some(b) = p.pipe[to].pop_front() {
        let psn = transport::wire::RocePacketRepr::parse(&b)
            .unwrap()
            .bth
            .psn
            .value();
        if !lose(psn) {
            p.deliver_bytes(to, &b);
        }
    }
}

/// One 2-packet WRITE whose first packet is lost once: the requester has seen a loss (the
/// retransmission timer is armed only on a path that loses) and measured a round trip (0 ns
/// in the pipe, so its retransmission timeout is the 1 ms floor).
fn warm_up(p: &mut Pair) {
    p.qps[0]
        .post_send(write_wr(p, 100, BUF_VA, DST, 2 * MTU))
        .unwrap();
    let mut lost = false;
    p.run(4, &mut |to, _| {
        if to == 1 && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    p.completions[0].clear();
    let c = p.qps[0].counters();
    assert_eq!(
        (c.rcvd_seq_err, c.retransmissions, c.rto_probes),
        (1, WARM_RESENDS, 0)
    );
}

/// The warm-up's own resends (PSNs 0 and 1).
const WARM_RESENDS: u64 = 2;

#[test]
fn no_probe_on_a_path_that_never_lost_anything() {
    let mut p = pair(7);
    p.fill(0, BUF_VA, &pattern(4 * MTU, 5));
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, 4 * MTU))
        .unwrap();
    // The ACK is late (lost here): only the local ACK timer resends.
    let mut lost = false;
    p.run(20, &mut |to, _| {
        if to == 0 && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    let c = p.qps[0].counters();
    assert_eq!((c.rto_probes, c.local_ack_timeouts), (0, 1));
}

fn pair(retry_cnt: u8) -> Pair {
    let attr = QpAttr {
        retry_cnt,
        ..Pair::rc_attr()
    };
    Pair::new(Service::Rc, Mtu::Mtu1024, &attr, [0, 0], |_, c| {
        c.retry_cnt_7_infinite = false;
        c.min_rto_ns = 1_000_000;
        c.min_window = 2;
    })
}

#[test]
fn sequence_nak_resends_at_once_from_its_psn_with_a_halved_window() {
    let mut p = pair(7);
    let data = pattern(8 * MTU, 1);
    p.fill(0, BUF_VA, &data);
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, data.len()))
        .unwrap();
    assert_eq!(p.transmit(0), 8);
    deliver(&mut p, 1, &mut |psn| psn == 3);
    // Four packets arrived ahead of ePSN 3: one NAK for the gap, the rest dropped silently.
    p.transmit(1);
    assert_eq!(in_pipe(&p, 0), vec![3]);
    let nak = transport::wire::RocePacketRepr::parse(&p.pipe[0][0])
        .unwrap()
        .aeth
        .unwrap();
    assert_eq!(nak.syndrome.kind(), AckKind::Nak(NakCode::PSN_SEQ_ERROR));
    assert_eq!(p.qps[1].counters().out_of_seq_request, 4);
    assert_eq!(p.qps[1].counters().send_nak, 1);
    deliver(&mut p, 0, &mut |_| false);
    // At once (no time passes), from PSN 3 — 0..2 were acknowledged by the NAK — and no
    // further than half of the 5 packets (3..7) that were still in flight.
    p.transmit(0);
    assert_eq!(in_pipe(&p, 1), vec![3, 4]);
    deliver(&mut p, 1, &mut |_| false);
    p.transmit(1);
    deliver(&mut p, 0, &mut |_| false);
    // The ACK of 3..4 lets the window grow by one (congestion avoidance from 2): 5..7,
    // nothing the ACK covered.
    p.transmit(0);
    assert_eq!(in_pipe(&p, 1), vec![5, 6, 7]);
    p.run_clean();
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    assert_eq!(p.bytes(1, DST, data.len()), &data[..]);
    let c = p.qps[0].counters();
    assert_eq!(c.retransmissions, 5, "PSNs 3 to 7, once each");
    assert_eq!(
        (c.rcvd_seq_err, c.local_ack_timeouts, c.rto_probes),
        (1, 0, 0)
    );
}

#[test]
fn lost_tail_is_probed_long_before_the_ack_timeout() {
    let mut p = pair(7);
    warm_up(&mut p);
    let data = pattern(8 * MTU, 2);
    p.fill(0, BUF_VA, &data);
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, data.len()))
        .unwrap();
    let t0 = p.now;
    let last = 2 + 7;
    // The last packet (the only one asking for an ACK) is lost once: nothing later makes the
    // responder NAK, and nothing is acknowledged.
    let mut lost = false;
    p.run(20, &mut |to, pkt| {
        if to == 1 && pkt.bth.psn == Psn::new(last) && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    assert_eq!(p.bytes(1, DST, data.len()), &data[..]);
    let c = p.qps[0].counters();
    assert_eq!((c.rto_probes, c.local_ack_timeouts), (1, 0));
    // The warm-up's loss left a window of 2 packets, each window acknowledged before the
    // next, so the lost last packet was the oldest unacknowledged one: the probe resent just
    // that packet.
    assert_eq!(c.retransmissions - WARM_RESENDS, 1);
    assert_eq!(p.qps[1].counters().duplicate_request, 0);
    let done = p
        .qps
        .iter()
        .all(|q| q.poll_timeout().is_none() || q.state() == QpState::Rts);
    assert!(done);
    let ack_timeout = local_ack_timeout_ns(Pair::rc_attr().timeout).unwrap();
    let took = p.now.nanos_since(t0);
    assert!(
        took < ack_timeout / 2,
        "recovered after {took} virtual ns; the local ACK timeout is {ack_timeout} ns"
    );
}

#[test]
fn lost_ack_probe_resends_from_the_oldest_and_the_duplicate_ack_covers_the_rest() {
    let mut p = pair(7);
    warm_up(&mut p);
    let data = pattern(8 * MTU, 3);
    p.fill(0, BUF_VA, &data);
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, data.len()))
        .unwrap();
    let mut acks_lost = 0;
    p.run(20, &mut |to, _| {
        if to == 0 && acks_lost == 0 {
            acks_lost += 1;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    let c = p.qps[0].counters();
    assert_eq!((c.rto_probes, c.local_ack_timeouts), (1, 0));
    // The requester, its window of 2 unacknowledged, waited; the probe resent the oldest
    // unacknowledged packet alone, the responder re-ACKed the duplicate (covering both) and
    // the rest of the message followed.
    assert_eq!(c.retransmissions - WARM_RESENDS, 1);
    assert_eq!(p.qps[1].counters().duplicate_request, 1);
}

#[test]
fn probes_use_no_retries_the_local_ack_timeout_does() {
    // retry_cnt 1 (IBTA semantics): a dead path ends in RETRY_EXC_ERR after the second local
    // ACK timeout, however many probes went out in between.
    let mut p = pair(1);
    warm_up(&mut p);
    p.fill(0, BUF_VA, &pattern(2 * MTU, 4));
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, 2 * MTU))
        .unwrap();
    let t0 = p.now;
    p.run(100, &mut |to, _| {
        if to == 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(p.collect(0)[0].status, WcStatus::RetryExcErr);
    let c = p.qps[0].counters();
    assert_eq!(c.local_ack_timeouts, 2);
    assert!(c.rto_probes >= 2, "{} probes", c.rto_probes);
    let ack_timeout = local_ack_timeout_ns(Pair::rc_attr().timeout).unwrap();
    assert!(p.now.nanos_since(t0) >= 2 * ack_timeout);
    assert_eq!(p.qps[0].state(), QpState::Err);
}

/// The requester of a pair with the window of a lossless path between two processes of a
/// device (`max_unacked_psns` 512, docs/daemon.md §2.1) sends a WRITE that all arrives, and
/// then its peer is gone: nothing comes back, not even the ACK. Timeout 14 and retry_cnt 7
/// as ibv_rc_pingpong and perftest set them.
fn peer_gone_after_the_last_request(retry_cnt_7_infinite: bool) -> Pair {
    let attr = QpAttr {
        timeout: 14,
        retry_cnt: 7,
        ..Pair::rc_attr()
    };
    let mut p = Pair::new(Service::Rc, Mtu::Mtu1024, &attr, [0, 0], |_, c| {
        c.retry_cnt_7_infinite = retry_cnt_7_infinite;
        c.min_rto_ns = 1_000_000;
        c.min_window = 2;
    });
    p.qps[0].set_max_unacked_psns(512);
    warm_up(&mut p);
    p.fill(0, BUF_VA, &pattern(16 * MTU, 5));
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, 16 * MTU))
        .unwrap();
    p.run(400, &mut |to, _| {
        if to == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p
}

#[test]
fn a_vanished_peer_ends_in_retry_exceeded_after_retry_cnt_timeouts() {
    // IBTA semantics: retry_cnt 7 is seven retries; the eighth local ACK timeout is fatal,
    // and the probes between them (which resend but use no retry) do not prolong it.
    let mut p = peer_gone_after_the_last_request(false);
    assert_eq!(p.collect(0)[0].status, WcStatus::RetryExcErr);
    let c = p.qps[0].counters();
    assert_eq!((c.local_ack_timeouts, c.retry_exceeded_err), (8, 1));
    assert!(c.rto_probes >= 8, "{} probes", c.rto_probes);
    assert_eq!(p.qps[0].state(), QpState::Err);
    assert_eq!(p.qps[0].poll_timeout(), None, "nothing left to retry");
}

#[test]
fn retry_cnt_7_retries_forever_by_default_as_rxe_does() {
    // `QpConfig::retry_cnt_7_infinite` (the default, docs/wire.md §5.2): the same vanished
    // peer is retried for as long as the QP lives, as rxe does with a vanished host.
    let mut p = peer_gone_after_the_last_request(true);
    assert!(p.collect(0).is_empty());
    let c = p.qps[0].counters();
    assert!(
        c.local_ack_timeouts > 8,
        "{} timeouts",
        c.local_ack_timeouts
    );
    assert_eq!(c.retry_exceeded_err, 0);
    assert_eq!(p.qps[0].state(), QpState::Rts);
    assert!(p.qps[0].poll_timeout().is_some(), "still retrying");
}

/// A pair whose requester has never lost anything (window = 128 packets) sends a 32-packet
/// WRITE that all arrives; the responder's acknowledgements are held back past the local ACK
/// timeout (a stalled peer), which restarts the window from one packet and resends PSN 0.
/// Returns the pair with the late acknowledgements still in the pipe toward the requester
/// and the go-back's resend toward the responder.
fn stall_past_the_ack_timeout(deliver_originals: bool) -> Pair {
    let mut p = pair(7);
    let data = pattern(32 * MTU, 6);
    p.fill(0, BUF_VA, &data);
    p.qps[0]
        .post_send(write_wr(&p, 1, BUF_VA, DST, data.len()))
        .unwrap();
    assert_eq!(p.transmit(0), 32);
    deliver(&mut p, 1, &mut |_| !deliver_originals);
    p.transmit(1);
    let held = p.pipe[0].len();
    assert_eq!(
        held,
        usize::from(deliver_originals),
        "one ACK, for the last packet"
    );
    let ack_timeout = local_ack_timeout_ns(Pair::rc_attr().timeout).unwrap();
    p.advance(ack_timeout);
    assert_eq!(p.qps[0].counters().local_ack_timeouts, 1);
    // Go-back with a window of one packet.
    assert_eq!(p.transmit(0), 1);
    assert_eq!(in_pipe(&p, 1), vec![0]);
    p
}

#[test]
fn a_late_ack_after_a_timeout_gives_the_window_back() {
    let mut p = stall_past_the_ack_timeout(true);
    // The late ACK (PSN 31) covers PSNs the go-back has not resent: the originals arrived.
    deliver(&mut p, 0, &mut |_| false);
    assert_eq!(p.qps[0].counters().spurious_timeouts, 1);
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    // The window is 128 packets again: a 64-packet WRITE leaves whole, not in slow start.
    let data = pattern(64 * MTU, 7);
    p.fill(0, BUF_VA, &data);
    p.qps[0]
        .post_send(write_wr(&p, 2, BUF_VA, DST, data.len()))
        .unwrap();
    assert_eq!(p.transmit(0), 64);
    p.run_clean();
    assert_eq!(p.collect(0)[1].status, WcStatus::Success);
    assert_eq!(p.bytes(1, DST, data.len()), &data[..]);
    let c = p.qps[0].counters();
    assert_eq!(c.retransmissions, 1, "only the go-back's PSN 0");
}

#[test]
fn a_real_tail_loss_keeps_the_window_cut() {
    // The whole 32-packet WRITE was lost: the ACK after the resend covers only PSN 0.
    let mut p = stall_past_the_ack_timeout(false);
    deliver(&mut p, 1, &mut |_| false);
    p.transmit(1);
    deliver(&mut p, 0, &mut |_| false);
    assert_eq!(p.qps[0].counters().spurious_timeouts, 0);
    // Slow start from one packet: two more now.
    assert_eq!(p.transmit(0), 2);
    assert_eq!(in_pipe(&p, 1), vec![1, 2]);
    p.run_clean();
    assert_eq!(p.collect(0)[0].status, WcStatus::Success);
    assert_eq!(p.qps[0].counters().spurious_timeouts, 0);
}
