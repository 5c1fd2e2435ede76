//! Named conformance tests for the classic RC transport error cases, each
//! driving two real QPs through the hand-controlled pipe of `sim::pair` and asserting the
//! packets, memory, completions, counters and QP states the spec prescribes.

use sim::pair::{Fate, Pair, BUF_VA};
use transport::wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, Msn, NakCode, Opcode, Psn, Qpn, RocePacketRepr, Syndrome,
};
use transport::{
    local_ack_timeout_ns, rnr_timer_ns, Completion, LocalData, Mtu, QpAttr, QpState, RecvWr,
    SendFlags, SendWr, Service, Sge, SgeList, WcOpcode, WcStatus, WrOpcode,
};

const MTU: usize = 1024;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A SEND of `len` bytes from side 0's scratch at `src`.
fn send_wr(p: &Pair, id: u64, src: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, WrOpcode::Send);
    wr.local = LocalData::Sges(SgeList::single(Sge {
        addr: src,
        length: len,
        lkey: p.lkey(0),
    }));
    wr
}

fn recv_wr(p: &Pair, side: usize, id: u64, dst: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        sges: SgeList::single(Sge {
            addr: dst,
            length: len,
            lkey: p.lkey(side),
        }),
    }
}

fn rdma_wr(p: &Pair, id: u64, op: WrOpcode, local: u64, remote: u64, len: u32) -> SendWr {
    let mut wr = SendWr::new(id, op);
    wr.local = LocalData::Sges(SgeList::single(Sge {
        addr: local,
        length: len,
        lkey: p.lkey(0),
    }));
    wr.remote_addr = remote;
    wr.rkey = p.rkey(1);
    wr
}

fn statuses(cs: &[Completion]) -> Vec<(u64, WcStatus)> {
    cs.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn is_data(op: Opcode) -> bool {
    op.info().is_some_and(|i| i.is_request)
}

/// A pair whose retry counters are finite (IBTA semantics), `retry_cnt` retries.
fn finite_pair(retry_cnt: u8, rnr_retry: u8) -> Pair {
    let attr = QpAttr {
        retry_cnt,
        rnr_retry,
        ..Pair::rc_attr()
    };
    Pair::new(Service::Rc, Mtu::Mtu1024, &attr, [0, 0], |_, c| {
        c.retry_cnt_7_infinite = false
    })
}

#[test]
fn implied_nak_sequence_error_retry_within_limit() {
    let mut p = finite_pair(2, 7);
    let data = pattern(3 * MTU, 1);
    p.fill(0, BUF_VA, &data);
    p.qps[1]
        .post_recv(recv_wr(&p, 1, 7, BUF_VA + 0x8000, 4 * MTU as u32))
        .unwrap();
    p.qps[0]
        .post_send(send_wr(&p, 1, BUF_VA, data.len() as u32))
        .unwrap();
    // Lose the first packet once: the responder sees PSN 1 ahead of ePSN 0 and NAKs.
    let mut dropped = false;
    p.run(100, &mut |to, pkt| {
        if to == 1 && pkt.bth.psn == Psn::new(0) && !dropped {
            dropped = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    let rc = p.collect(1).to_vec();
    assert_eq!(statuses(&rc), vec![(7, WcStatus::Success)]);
    assert_eq!(rc[0].byte_len as usize, data.len());
    assert_eq!(p.bytes(1, BUF_VA + 0x8000, data.len()), &data[..]);
    // One sequence NAK sent and received, the message resent from the NAK'd PSN; no timeout.
    assert_eq!(
        p.qps[1].counters().out_of_seq_request,
        2,
        "PSN 1 and 2 arrived ahead"
    );
    assert_eq!(p.qps[0].counters().rcvd_seq_err, 1);
    assert_eq!(p.qps[0].counters().local_ack_timeouts, 0);
    assert_eq!(p.qps[0].counters().retransmissions, 3);
    let naks: Vec<_> = p
        .log
        .iter()
        .filter(|l| l.from == 1)
        .filter_map(|l| l.repr().aeth)
        .filter(|a| a.syndrome == Syndrome::nak(NakCode::PSN_SEQ_ERROR))
        .collect();
    assert_eq!(naks.len(), 1, "one sequence NAK per gap");
    assert_eq!(p.qps[0].state(), QpState::Rts);
}

#[test]
fn implied_nak_sequence_error_retry_beyond_limit() {
    // retry_cnt 2: the lost packet is lost every time; the NAK and then the timer retry it;
    // after the third failed retry the WR fails with RETRY_EXC_ERR and everything is flushed.
    let mut p = finite_pair(2, 7);
    p.fill(0, BUF_VA, &pattern(2 * MTU, 2));
    p.qps[1]
        .post_recv(recv_wr(&p, 1, 7, BUF_VA, 4 * MTU as u32))
        .unwrap();
    p.qps[0]
        .post_send(send_wr(&p, 1, BUF_VA, 2 * MTU as u32))
        .unwrap();
    p.qps[0].post_send(send_wr(&p, 2, BUF_VA, 10)).unwrap();
    let t0 = p.now;
    p.run(100, &mut |to, pkt| {
        if to == 1 && pkt.bth.psn == Psn::new(0) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(
        statuses(p.collect(0)),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    let c = p.qps[0].counters();
    assert_eq!(c.rcvd_seq_err, 1);
    assert_eq!(c.retry_exceeded_err, 1);
    // One NAK retry plus timer retries: 2 retries used, the third failure is fatal.
    assert_eq!(c.completer_retry_err + c.local_ack_timeouts, 3);
    assert_eq!(p.qps[0].state(), QpState::Err);
    let t = local_ack_timeout_ns(10).unwrap();
    assert!(p.now.nanos_since(t0) >= 2 * t, "two timer periods elapsed");
    // The responder never completed anything (PSN 0 never arrived).
    assert!(p.collect(1).is_empty());
    // Later work is flushed.
    p.qps[0].post_send(send_wr(&p, 3, BUF_VA, 10)).unwrap();
    assert_eq!(
        p.collect(0).last().map(|c| (c.wr_id, c.status)),
        Some((3, WcStatus::WrFlushErr))
    );
}

#[test]
fn implied_nak_lost_read_response_retried() {
    // READ then SEND: the READ response is lost, the SEND's ACK (cumulative, PSN beyond the
    // READ) implies it; the requester re-issues the READ without waiting for the timer.
    let mut p = Pair::rc();
    let src = pattern(200, 3);
    p.fill(1, BUF_VA + 0x4000, &src);
    p.qps[1].post_recv(recv_wr(&p, 1, 9, BUF_VA, 64)).unwrap();
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            1,
            WrOpcode::RdmaRead,
            BUF_VA + 0x100,
            BUF_VA + 0x4000,
            200,
        ))
        .unwrap();
    p.qps[0]
        .post_send(send_wr(&p, 2, BUF_VA + 0x2000, 8))
        .unwrap();
    let mut lost = false;
    p.run(10, &mut |to, pkt| {
        if to == 0 && pkt.bth.opcode == Opcode::RC_RDMA_READ_RESPONSE_ONLY && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(
        statuses(p.collect(0)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(p.bytes(0, BUF_VA + 0x100, 200), &src[..]);
    assert_eq!(
        p.qps[0].counters().local_ack_timeouts,
        0,
        "recovered by the implied NAK"
    );
    assert_eq!(p.qps[0].counters().completer_retry_err, 1);
    assert_eq!(p.sent(0, Opcode::RC_RDMA_READ_REQUEST), 2);
    // The SEND was delivered once even though it was resent after the READ.
    assert_eq!(statuses(p.collect(1)), vec![(9, WcStatus::Success)]);
    assert_eq!(p.qps[1].counters().duplicate_request, 2);
}

/// [`finite_pair`] without the retransmission timer's probes, so that only the local ACK
/// timer acts.
fn ack_timer_only_pair(retry_cnt: u8, rnr_retry: u8, finite: bool) -> Pair {
    let attr = QpAttr {
        retry_cnt,
        rnr_retry,
        ..Pair::rc_attr()
    };
    Pair::new(Service::Rc, Mtu::Mtu1024, &attr, [0, 0], |_, c| {
        c.retry_cnt_7_infinite = !finite;
        c.min_rto_ns = 0;
    })
}

#[test]
fn local_ack_timeout_retry() {
    let mut p = ack_timer_only_pair(7, 7, false);
    p.fill(0, BUF_VA, &pattern(100, 4));
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            1,
            WrOpcode::RdmaWrite,
            BUF_VA,
            BUF_VA + 0x3000,
            100,
        ))
        .unwrap();
    // The request arrives but its ACK is lost.
    p.exchange(&mut |to, _| if to == 0 { Fate::Drop } else { Fate::Deliver });
    assert!(p.collect(0).is_empty());
    let t = local_ack_timeout_ns(10).unwrap();
    assert_eq!(
        p.qps[0].poll_timeout(),
        Some(p.now.add_nanos(t)),
        "4.096 us x 2^10"
    );
    // Just before the deadline nothing is resent.
    p.advance(t - 1);
    assert_eq!(p.transmit(0), 0);
    p.advance(1);
    assert_eq!(p.qps[0].counters().local_ack_timeouts, 1);
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.bytes(1, BUF_VA + 0x3000, 100), &pattern(100, 4)[..]);
    // The resent WRITE was a duplicate: re-ACKed, not re-executed.
    assert_eq!(p.qps[1].counters().duplicate_request, 1);
    assert_eq!(p.qps[0].counters().retransmissions, 1);
    assert_eq!(
        p.qps[0].poll_timeout(),
        None,
        "nothing outstanding, no timer"
    );
}

#[test]
fn local_ack_timeout_beyond_retry_cnt() {
    let mut p = ack_timer_only_pair(3, 7, true);
    p.qps[0]
        .post_send(rdma_wr(&p, 1, WrOpcode::RdmaWrite, BUF_VA, BUF_VA, 16))
        .unwrap();
    p.qps[0]
        .post_send(rdma_wr(&p, 2, WrOpcode::RdmaWrite, BUF_VA, BUF_VA, 16))
        .unwrap();
    p.qps[1].post_recv(recv_wr(&p, 1, 5, BUF_VA, 16)).unwrap();
    let jumps = p.run(100, &mut |_, _| Fate::Drop);
    assert_eq!(jumps, 4, "retry_cnt 3: the 4th timeout is fatal");
    assert_eq!(
        statuses(p.collect(0)),
        vec![(1, WcStatus::RetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.qps[0].counters().local_ack_timeouts, 4);
    assert_eq!(p.qps[0].state(), QpState::Err);
    // Entering ERR also flushes the QP's own receive queue... side 0 has none; side 1 keeps
    // its RWQE because it never saw an error.
    assert!(p.collect(1).is_empty());
    assert_eq!(p.qps[1].state(), QpState::Rts);
}

#[test]
fn rnr_nak_retry_finite() {
    let mut p = finite_pair(7, 2);
    p.qps[0].post_send(send_wr(&p, 1, BUF_VA, 10)).unwrap();
    let start = p.now;
    // No receive WQE: RNR NAK, wait min_rnr_timer (code 1 = 10 us), resend; 2 retries.
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(p.qps[0].counters().rcvd_rnr_err, 1);
    assert_eq!(
        p.qps[0].poll_timeout(),
        Some(start.add_nanos(rnr_timer_ns(1)))
    );
    p.run(100, &mut |_, _| Fate::Deliver);
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::RnrRetryExcErr)]);
    assert_eq!(p.qps[0].counters().rcvd_rnr_err, 3);
    assert_eq!(p.qps[0].counters().retry_rnr_exceeded_err, 1);
    assert_eq!(p.qps[1].counters().send_rnr_err, 3);
    assert_eq!(p.qps[0].state(), QpState::Err);
    assert_eq!(p.now.nanos_since(start), 2 * rnr_timer_ns(1));
}

#[test]
fn rnr_nak_retry_infinite() {
    let mut p = Pair::rc(); // rnr_retry 7
    p.fill(0, BUF_VA, &pattern(1500, 5));
    p.qps[0].post_send(send_wr(&p, 1, BUF_VA, 1500)).unwrap();
    for _ in 0..20 {
        p.exchange(&mut |_, _| Fate::Deliver);
        let t = p.qps[0].poll_timeout().expect("RNR wait armed");
        p.advance(t.nanos_since(p.now));
    }
    assert_eq!(p.qps[0].counters().rcvd_rnr_err, 20);
    assert!(p.collect(0).is_empty(), "still retrying");
    p.qps[1]
        .post_recv(recv_wr(&p, 1, 3, BUF_VA + 0x1000, 2048))
        .unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(statuses(p.collect(1)), vec![(3, WcStatus::Success)]);
    assert_eq!(p.bytes(1, BUF_VA + 0x1000, 1500), &pattern(1500, 5)[..]);
    // The RNR NAK changed nothing at the responder: exactly one completion, MSN 1.
    assert_eq!(p.qps[1].counters().send_rnr_err, 20);
}

#[test]
fn rkey_violation_remote_access_error() {
    let mut p = Pair::rc();
    p.qps[1].post_recv(recv_wr(&p, 1, 4, BUF_VA, 64)).unwrap();
    let mut bad = rdma_wr(&p, 1, WrOpcode::RdmaWrite, BUF_VA, BUF_VA, 64);
    bad.rkey = transport::wire::Rkey(0xDEAD);
    p.qps[0].post_send(bad).unwrap();
    // Out of bounds with a good key, queued behind: flushed.
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            2,
            WrOpcode::RdmaRead,
            BUF_VA,
            BUF_VA + (1 << 20) - 8,
            64,
        ))
        .unwrap();
    p.run_clean();
    assert_eq!(
        statuses(p.collect(0)),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.qps[0].counters().rcvd_nak_remote_access, 1);
    assert_eq!(p.qps[0].state(), QpState::Err);
    // The responder NAKed, went to ERR and flushed its receive queue; nothing was written.
    assert_eq!(p.qps[1].state(), QpState::Err);
    assert_eq!(statuses(p.collect(1)), vec![(4, WcStatus::WrFlushErr)]);
    assert_eq!(p.mem[1].stats.refused, 1);
    assert!(p.bytes(1, BUF_VA, 64).iter().all(|&b| b == 0));

    // A READ past the end of the region: same outcome on a fresh pair.
    let mut p = Pair::rc();
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            1,
            WrOpcode::RdmaRead,
            BUF_VA,
            BUF_VA + (1 << 20) - 8,
            64,
        ))
        .unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::RemAccessErr)]);
}

#[test]
fn ghost_ack_is_ignored() {
    let mut p = Pair::rc();
    p.qps[0]
        .post_send(rdma_wr(&p, 1, WrOpcode::RdmaWrite, BUF_VA, BUF_VA, 3000))
        .unwrap();
    assert_eq!(p.transmit(0), 3); // PSNs 0..2 sent, held in the pipe
                                  // ACKs for PSN 50 and for PSN 3 — the first PSN not yet sent — are ghosts; one for a PSN
                                  // half the space away reads as old (24-bit window) and is dropped as stale.
    let ghost = |psn: u32| RocePacketRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::ack(31),
            msn: Msn::new(1),
        }),
        ..RocePacketRepr::new(
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, Qpn::new(0x11), Psn::new(psn)),
            &[],
        )
    };
    p.inject(0, &ghost(50));
    p.inject(0, &ghost(3));
    p.inject(0, &ghost(0x80_0003));
    assert!(p.collect(0).is_empty(), "a ghost ACK completes nothing");
    assert_eq!(p.qps[0].counters().ghost_responses, 2);
    assert_eq!(p.qps[0].counters().duplicate_responses, 1);
    // The real exchange still works.
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.qps[0].counters().retransmissions, 0);
}

#[test]
fn bad_response_opcode() {
    // A READ RESPONSE for a SEND's PSN: bad response, the WR fails, the QP errors.
    let mut p = Pair::rc();
    p.qps[0].post_send(send_wr(&p, 1, BUF_VA, 8)).unwrap();
    p.qps[0].post_send(send_wr(&p, 2, BUF_VA, 8)).unwrap();
    p.transmit(0);
    let resp = RocePacketRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::ack(31),
            msn: Msn::new(1),
        }),
        ..RocePacketRepr::new(
            BthRepr::new(
                Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                Qpn::new(0x11),
                Psn::new(0),
            ),
            &[1, 2, 3, 4],
        )
    };
    p.inject(0, &resp);
    assert_eq!(
        statuses(p.collect(0)),
        vec![(1, WcStatus::BadRespErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.qps[0].state(), QpState::Err);

    // An ATOMIC ACKNOWLEDGE for a READ, and a READ response of the wrong length.
    for forged in 0..2 {
        let mut p = Pair::rc();
        p.qps[0]
            .post_send(rdma_wr(&p, 1, WrOpcode::RdmaRead, BUF_VA, BUF_VA, 100))
            .unwrap();
        p.transmit(0);
        let bth = |op| BthRepr::new(op, Qpn::new(0x11), Psn::new(0));
        let aeth = Some(AethRepr {
            syndrome: Syndrome::ack(31),
            msn: Msn::new(1),
        });
        let pkt = if forged == 0 {
            RocePacketRepr {
                aeth,
                atomic_ack: Some(AtomicAckEthRepr { orig: 7 }),
                ..RocePacketRepr::new(bth(Opcode::RC_ATOMIC_ACKNOWLEDGE), &[])
            }
        } else {
            RocePacketRepr {
                aeth,
                ..RocePacketRepr::new(bth(Opcode::RC_RDMA_READ_RESPONSE_ONLY), &[0; 99])
            }
        };
        p.inject(0, &pkt);
        assert_eq!(
            statuses(p.collect(0)),
            vec![(1, WcStatus::BadRespErr)],
            "forgery {forged}"
        );
    }
}

#[test]
fn unexpected_opcode() {
    // A SEND_MIDDLE with no SEND_FIRST before it, at ePSN: NAK invalid request, responder to
    // ERR; the requester that sent it completes with REM_INV_REQ_ERR.
    let mut p = Pair::rc();
    p.qps[1].post_recv(recv_wr(&p, 1, 4, BUF_VA, 4096)).unwrap();
    p.fill(0, BUF_VA, &pattern(3 * MTU, 6));
    p.qps[0]
        .post_send(send_wr(&p, 1, BUF_VA, 3 * MTU as u32))
        .unwrap();
    // Rewrite the FIRST into a MIDDLE on the way.
    p.transmit(0);
    let first = p.pipe[1].pop_front().unwrap();
    let mut forged = first.clone();
    forged[0] = Opcode::RC_SEND_MIDDLE.0;
    p.deliver_bytes(1, &forged);
    p.pipe[1].clear();
    p.transmit(1);
    let nak = p.pipe[0].front().cloned().expect("a NAK");
    let r = RocePacketRepr::parse(&nak).unwrap();
    assert_eq!(r.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(
        r.aeth.unwrap().syndrome,
        Syndrome::nak(NakCode::INVALID_REQUEST)
    );
    assert_eq!(r.bth.psn, Psn::new(0));
    assert_eq!(p.qps[1].state(), QpState::Err);
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(p.qps[0].counters().rcvd_nak_invalid_request, 1);
    assert_eq!(statuses(p.collect(1)), vec![(4, WcStatus::WrFlushErr)]);

    // An RDMA WRITE to a QP that does not grant REMOTE_WRITE is also an invalid request.
    let attr = QpAttr {
        qp_access_flags: transport::AccessFlags::REMOTE_READ,
        ..Pair::rc_attr()
    };
    let mut p = Pair::new(Service::Rc, Mtu::Mtu1024, &attr, [0, 0], |_, _| {});
    p.qps[0]
        .post_send(rdma_wr(&p, 1, WrOpcode::RdmaWrite, BUF_VA, BUF_VA, 8))
        .unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::RemInvReqErr)]);
}

#[test]
fn partially_written_write_retried() {
    // A 4-packet WRITE; AckReq every 2 packets. Packets 0 and 1 land and are ACKed, packet 2
    // is lost, packet 3 arrives out of sequence. The retry resumes at PSN 2 with
    // RDMA_WRITE_MIDDLE (no RETH): the placed half is not rewritten, the result is exact.
    let mut p = Pair::new(
        Service::Rc,
        Mtu::Mtu1024,
        &Pair::rc_attr(),
        [0, 0],
        |_, c| c.max_pkts_per_ack = 2,
    );
    let data = pattern(4 * MTU - 100, 7);
    p.fill(0, BUF_VA, &data);
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            1,
            WrOpcode::RdmaWrite,
            BUF_VA,
            BUF_VA + 0x10000,
            data.len() as u32,
        ))
        .unwrap();
    let mut lost = false;
    p.run(10, &mut |to, pkt| {
        if to == 1 && pkt.bth.psn == Psn::new(2) && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.bytes(1, BUF_VA + 0x10000, data.len()), &data[..]);
    let resent: Vec<_> = p
        .log
        .iter()
        .filter(|l| l.from == 0 && is_data(l.repr().bth.opcode))
        .map(|l| (l.repr().bth.psn.value(), l.repr().bth.opcode))
        .collect();
    assert_eq!(
        resent,
        vec![
            (0, Opcode::RC_RDMA_WRITE_FIRST),
            (1, Opcode::RC_RDMA_WRITE_MIDDLE),
            (2, Opcode::RC_RDMA_WRITE_MIDDLE),
            (3, Opcode::RC_RDMA_WRITE_LAST),
            (2, Opcode::RC_RDMA_WRITE_MIDDLE),
            (3, Opcode::RC_RDMA_WRITE_LAST),
        ]
    );
    assert_eq!(
        p.qps[1].counters().duplicate_request,
        0,
        "nothing placed twice"
    );
    assert_eq!(p.qps[0].counters().retransmissions, 2);
}

#[test]
fn read_response_psn_error_retried() {
    // A 4-packet READ; the second response is lost. Response 3 reveals the gap, an implied
    // NAK (rxe_comp.c `check_psn`): the READ is re-issued at once for the missing 3 packets
    // (VA and length advanced, PSN 1), response 4 is stale, the responder replays from its
    // saved resource, the data is exact, no timer was needed.
    let mut p = Pair::rc();
    let src = pattern(4 * MTU - 10, 8);
    p.fill(1, BUF_VA + 0x20000, &src);
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            1,
            WrOpcode::RdmaRead,
            BUF_VA,
            BUF_VA + 0x20000,
            src.len() as u32,
        ))
        .unwrap();
    let mut lost = false;
    p.run(10, &mut |to, pkt| {
        if to == 0 && pkt.bth.psn == Psn::new(1) && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.bytes(0, BUF_VA, src.len()), &src[..]);
    let reqs: Vec<_> = p
        .log
        .iter()
        .filter(|l| l.from == 0 && l.repr().bth.opcode == Opcode::RC_RDMA_READ_REQUEST)
        .map(|l| {
            let r = l.repr();
            let reth = r.reth.unwrap();
            (r.bth.psn.value(), reth.va, reth.len)
        })
        .collect();
    assert_eq!(
        reqs,
        vec![
            (0, BUF_VA + 0x20000, src.len() as u32),
            (1, BUF_VA + 0x20000 + MTU as u64, (src.len() - MTU) as u32)
        ]
    );
    assert_eq!(p.qps[0].counters().local_ack_timeouts, 0);
    assert_eq!(p.qps[0].counters().completer_retry_err, 1);
    assert_eq!(p.qps[0].counters().stale_naks, 1);
    assert_eq!(p.qps[1].counters().duplicate_request, 1);
    // The replay starts with READ_RESPONSE_FIRST at PSN 1.
    let replay: Vec<_> = p
        .log
        .iter()
        .filter(|l| l.from == 1)
        .map(|l| (l.repr().bth.psn.value(), l.repr().bth.opcode))
        .skip(4)
        .collect();
    assert_eq!(
        replay,
        vec![
            (1, Opcode::RC_RDMA_READ_RESPONSE_FIRST),
            (2, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE),
            (3, Opcode::RC_RDMA_READ_RESPONSE_LAST)
        ]
    );
}

#[test]
fn atomics_under_duplicated_requests() {
    // Every request is delivered twice and every response of the first round is lost, so the
    // requester also retries: each atomic still executes exactly once, and duplicates are
    // answered from the saved original value.
    let mut p = Pair::rc();
    p.fill(1, BUF_VA + 0x100, &100u64.to_ne_bytes());
    let mut faa = rdma_wr(
        &p,
        1,
        WrOpcode::AtomicFetchAndAdd,
        BUF_VA,
        BUF_VA + 0x100,
        8,
    );
    faa.compare_add = 5;
    let mut cas = rdma_wr(
        &p,
        2,
        WrOpcode::AtomicCmpAndSwp,
        BUF_VA + 8,
        BUF_VA + 0x100,
        8,
    );
    cas.compare_add = 105;
    cas.swap = 7;
    let mut cas_miss = rdma_wr(
        &p,
        3,
        WrOpcode::AtomicCmpAndSwp,
        BUF_VA + 16,
        BUF_VA + 0x100,
        8,
    );
    cas_miss.compare_add = 105;
    cas_miss.swap = 9;
    for wr in [faa, cas, cas_miss] {
        p.qps[0].post_send(wr).unwrap();
    }
    let mut responses = 0;
    p.run(20, &mut |to, _| {
        if to == 1 {
            return Fate::Duplicate;
        }
        responses += 1;
        if responses <= 3 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    assert_eq!(
        statuses(p.collect(0)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let word = |va| u64::from_ne_bytes(p.bytes(0, va, 8).try_into().unwrap());
    assert_eq!(word(BUF_VA), 100, "FAA returned the original");
    assert_eq!(word(BUF_VA + 8), 105, "CAS saw the FAA result");
    assert_eq!(word(BUF_VA + 16), 7, "the second CAS saw the first's swap");
    let target = u64::from_ne_bytes(p.bytes(1, BUF_VA + 0x100, 8).try_into().unwrap());
    assert_eq!(target, 7, "each atomic executed once");
    assert!(p.qps[1].counters().duplicate_request >= 3);
    assert!(p.qps[0].counters().retransmissions >= 1);
    // Completion opcodes.
    let ops: Vec<_> = p.completions[0].iter().map(|c| c.opcode).collect();
    assert_eq!(
        ops,
        vec![WcOpcode::FetchAdd, WcOpcode::CompSwap, WcOpcode::CompSwap]
    );
}

#[test]
fn psn_wraparound_mid_message() {
    // Both requesters start 2 PSNs before 2^24: a 5-packet SEND, a 4-packet READ and a WRITE
    // cross the wrap, with a loss right at PSN 0.
    let mut p = Pair::new(
        Service::Rc,
        Mtu::Mtu1024,
        &Pair::rc_attr(),
        [0xFF_FFFE, 0xFF_FFFD],
        |_, _| {},
    );
    let data = pattern(5 * MTU - 3, 9);
    p.fill(0, BUF_VA, &data);
    let src = pattern(4 * MTU, 10);
    p.fill(1, BUF_VA + 0x40000, &src);
    p.qps[1]
        .post_recv(recv_wr(&p, 1, 1, BUF_VA, 8 * MTU as u32))
        .unwrap();
    p.qps[0]
        .post_send(send_wr(&p, 1, BUF_VA, data.len() as u32))
        .unwrap();
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            2,
            WrOpcode::RdmaRead,
            BUF_VA + 0x8000,
            BUF_VA + 0x40000,
            src.len() as u32,
        ))
        .unwrap();
    p.qps[0]
        .post_send(rdma_wr(
            &p,
            3,
            WrOpcode::RdmaWrite,
            BUF_VA,
            BUF_VA + 0x60000,
            data.len() as u32,
        ))
        .unwrap();
    let mut lost = false;
    p.run(20, &mut |to, pkt| {
        if to == 1 && pkt.bth.psn == Psn::new(0) && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    assert!(lost);
    assert_eq!(
        statuses(p.collect(0)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(statuses(p.collect(1)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.bytes(1, BUF_VA, data.len()), &data[..]);
    assert_eq!(p.bytes(0, BUF_VA + 0x8000, src.len()), &src[..]);
    assert_eq!(p.bytes(1, BUF_VA + 0x60000, data.len()), &data[..]);
    // PSNs used: 0xFFFFFE, 0xFFFFFF, 0, 1, 2 (SEND), 3..6 (READ), 7..11 (WRITE).
    let last = p
        .log
        .iter()
        .filter(|l| l.from == 0)
        .map(|l| l.repr().bth.psn.value())
        .max();
    assert_eq!(
        last,
        Some(0xFF_FFFF),
        "the largest PSN on the wire is the one before the wrap"
    );
    let write_last = p
        .log
        .iter()
        .filter(|l| l.from == 0 && l.repr().bth.opcode == Opcode::RC_RDMA_WRITE_LAST)
        .map(|l| l.repr().bth.psn.value())
        .next();
    assert_eq!(write_last, Some(11));
    assert_eq!(p.qps[0].counters().rcvd_seq_err, 1);
}

#[test]
fn unsignaled_wrs_complete_silently_unless_they_fail() {
    let mut p = finite_pair(0, 7);
    let mut wr = rdma_wr(&p, 1, WrOpcode::RdmaWrite, BUF_VA, BUF_VA, 8);
    wr.flags = SendFlags::default();
    p.qps[0].post_send(wr.clone()).unwrap();
    let mut wr2 = wr.clone();
    wr2.wr_id = 2;
    wr2.flags = SendFlags::SIGNALED;
    p.qps[0].post_send(wr2).unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(2, WcStatus::Success)]);
    // An unsignaled WR that fails (retry_cnt 0, all lost) still reports its error.
    wr.wr_id = 3;
    p.qps[0].post_send(wr).unwrap();
    p.run(10, &mut |_, _| Fate::Drop);
    assert_eq!(
        statuses(&p.collect(0)[1..]),
        vec![(3, WcStatus::RetryExcErr)]
    );
}
