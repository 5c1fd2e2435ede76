//! Transport behaviour beyond the classic error cases: UD (GRH area, Q_Key), UC (loss drops
//! the message), SEND WITH INVALIDATE, SRQ, credits, ACK coalescing, SQD drain, fences,
//! max_rd_atomic, segmentation and padding, inline data, local errors, zero-length messages.

use sim::pair::{Fate, Pair, BUF_VA, QPN};
use sim::MrAccess;
use transport::wire::{Opcode, Qkey, Qpn, RocePacketRepr};
use transport::{
    Completion, LocalData, Mtu, PostError, QpAttr, QpAttrMask, QpEvent, QpState, RecvWr, SendFlags,
    SendWr, Service, Sge, SgeList, Srq, UdDest, WcFlags, WcOpcode, WcStatus, WrOpcode,
};

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(17).wrapping_add(seed))
        .collect()
}

fn sges(p: &Pair, side: usize, addr: u64, len: u32) -> SgeList {
    SgeList::single(Sge {
        addr,
        length: len,
        lkey: p.lkey(side),
    })
}

fn wr(p: &Pair, id: u64, op: WrOpcode, local: u64, len: u32, remote: u64) -> SendWr {
    let mut w = SendWr::new(id, op);
    w.local = LocalData::Sges(sges(p, 0, local, len));
    w.remote_addr = remote;
    w.rkey = p.rkey(1);
    w
}

fn recv(p: &Pair, side: usize, id: u64, addr: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id: id,
        sges: sges(p, side, addr, len),
    }
}

fn st(cs: &[Completion]) -> Vec<(u64, WcStatus)> {
    cs.iter().map(|c| (c.wr_id, c.status)).collect()
}

#[test]
fn ud_send_grh_area_and_qkey() {
    let attr = QpAttr {
        qkey: 0x1234,
        ..Pair::rc_attr()
    };
    let mut p = Pair::new(Service::Ud, Mtu::Mtu1024, &attr, [0, 0], |_, _| {});
    let data = pattern(500, 1);
    p.fill(0, BUF_VA, &data);
    p.qps[1]
        .post_recv(recv(&p, 1, 1, BUF_VA + 0x1000, 600))
        .unwrap();
    p.qps[1]
        .post_recv(recv(&p, 1, 2, BUF_VA + 0x2000, 100))
        .unwrap();
    let ud = |qkey| {
        Some(UdDest {
            ah: 7,
            remote_qpn: Qpn::new(0x12),
            remote_qkey: Qkey(qkey),
        })
    };

    let mut w = wr(&p, 1, WrOpcode::SendWithImm, BUF_VA, 500, 0);
    w.imm_data = 0xABCD;
    w.ud = ud(0x1234);
    p.qps[0].post_send(w).unwrap();
    let mut buf = vec![0u8; 2048];
    let t = p.qps[0]
        .poll_transmit(p.now, &mut p.mem[0].for_qp(Qpn::new(QPN[0])), &mut buf)
        .unwrap();
    assert_eq!(t.ah, Some(7), "UD transmits name the WR's address handle");
    assert_eq!(t.dest_qpn, Qpn::new(0x12));
    let pkt = RocePacketRepr::parse(&buf[..t.len]).unwrap();
    assert_eq!(pkt.bth.opcode, Opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(pkt.deth.unwrap().src_qp, Qpn::new(0x11));
    p.deliver_bytes(1, &buf[..t.len]);
    assert_eq!(
        st(p.collect(0)),
        vec![(1, WcStatus::Success)],
        "UD completes once sent"
    );
    let c = p.collect(1)[0];
    assert_eq!(
        (c.wr_id, c.status, c.opcode),
        (1, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(c.byte_len, 540, "40-byte GRH area + payload");
    assert_eq!(c.wc_flags, WcFlags::GRH | WcFlags::WITH_IMM);
    assert_eq!(c.imm_data, Some(0xABCD));
    assert_eq!(c.src_qp, Qpn::new(0x11));
    // IPv4: 20 zero bytes, then the IPv4 header as received (the pair's RxMeta is 0x45s).
    assert_eq!(p.bytes(1, BUF_VA + 0x1000, 20), &[0u8; 20]);
    assert_eq!(p.bytes(1, BUF_VA + 0x1000 + 20, 20), &[0x45u8; 20]);
    assert_eq!(p.bytes(1, BUF_VA + 0x1000 + 40, 500), &data[..]);

    // Wrong Q_Key: dropped, the receive WQE stays.
    let mut w = wr(&p, 2, WrOpcode::Send, BUF_VA, 50, 0);
    w.ud = ud(0x9999);
    p.qps[0].post_send(w).unwrap();
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(p.qps[1].counters().qkey_violation, 1);
    assert_eq!(p.collect(1).len(), 1);
    // High bit set: the sender's own Q_Key is used (IBA 10.2.5) — it matches, so delivered,
    // into the 100-byte buffer: 40 + 50 fits.
    let mut w = wr(&p, 3, WrOpcode::Send, BUF_VA, 50, 0);
    w.ud = ud(0x8000_0000);
    p.qps[0].post_send(w).unwrap();
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(st(&p.collect(1)[1..]), vec![(2, WcStatus::Success)]);
    // Too big for the posted buffer: local length error, the QP keeps going.
    p.qps[1]
        .post_recv(recv(&p, 1, 4, BUF_VA + 0x3000, 64))
        .unwrap();
    let mut w = wr(&p, 4, WrOpcode::Send, BUF_VA, 100, 0);
    w.ud = ud(0x1234);
    p.qps[0].post_send(w).unwrap();
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(st(&p.collect(1)[2..]), vec![(4, WcStatus::LocLenErr)]);
    assert_eq!(p.qps[1].state(), QpState::Rts);
    // Larger than the MTU cannot be posted.
    let mut w = wr(&p, 5, WrOpcode::Send, BUF_VA, 1025, 0);
    w.ud = ud(0x1234);
    assert_eq!(p.qps[0].post_send(w), Err(PostError::BadLength));
}

#[test]
fn uc_loss_drops_the_message_and_resyncs() {
    let mut p = Pair::new(
        Service::Uc,
        Mtu::Mtu1024,
        &Pair::rc_attr(),
        [0, 0],
        |_, _| {},
    );
    let a = pattern(3000, 2);
    let b = pattern(1500, 3);
    p.fill(0, BUF_VA, &a);
    p.fill(0, BUF_VA + 0x2000, &b);
    p.qps[1]
        .post_recv(recv(&p, 1, 1, BUF_VA + 0x8000, 4096))
        .unwrap();
    p.qps[1]
        .post_recv(recv(&p, 1, 2, BUF_VA + 0xA000, 4096))
        .unwrap();
    p.qps[0]
        .post_send(wr(&p, 1, WrOpcode::Send, BUF_VA, 3000, 0))
        .unwrap();
    p.qps[0]
        .post_send(wr(&p, 2, WrOpcode::Send, BUF_VA + 0x2000, 1500, 0))
        .unwrap();
    let mut w = wr(
        &p,
        3,
        WrOpcode::RdmaWriteWithImm,
        BUF_VA,
        100,
        BUF_VA + 0xC000,
    );
    w.imm_data = 77;
    p.qps[0].post_send(w).unwrap();
    p.exchange(&mut |to, pkt| {
        if to == 1 && pkt.bth.psn.value() == 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    // The sender completes everything (UC has no ACKs); the first message vanished and its
    // receive WQE was reused for the second.
    assert_eq!(
        st(p.collect(0)),
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    let rc = p.collect(1).to_vec();
    assert_eq!(
        st(&rc),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(rc[0].byte_len, 1500);
    assert_eq!(p.bytes(1, BUF_VA + 0x8000, 1500), &b[..]);
    assert_eq!(
        (rc[1].opcode, rc[1].imm_data, rc[1].byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(77), 100)
    );
    assert_eq!(p.bytes(1, BUF_VA + 0xC000, 100), &a[..100]);
    assert!(p.qps[1].counters().out_of_seq_request >= 1);
    assert!(
        p.log.iter().all(|l| l.repr().aeth.is_none()),
        "UC never ACKs"
    );
}

#[test]
fn send_with_invalidate() {
    let mut p = Pair::rc();
    // A key the peer may invalidate: a type 2 window bound to QP 1.
    let victim = p.mem[1].register(0x90_0000, 64, MrAccess::LOCAL_WRITE | MrAccess::MW_BIND);
    let vkey = p.mem[1]
        .bind_window(victim, Qpn::new(QPN[1]), MrAccess::REMOTE_WRITE)
        .unwrap();
    p.qps[1].post_recv(recv(&p, 1, 1, BUF_VA, 64)).unwrap();
    let mut w = wr(&p, 1, WrOpcode::SendWithInv, BUF_VA, 16, 0);
    w.invalidate_rkey = vkey;
    p.qps[0].post_send(w).unwrap();
    p.run_clean();
    assert_eq!(st(p.collect(0)), vec![(1, WcStatus::Success)]);
    let c = p.collect(1)[0];
    assert_eq!(c.wc_flags, WcFlags::WITH_INV);
    assert_eq!(c.invalidated_rkey, Some(vkey));
    assert!(!p.mem[1].rkey_valid(vkey));
    // The invalidated key is gone: a WRITE with it fails.
    let mut w = wr(&p, 2, WrOpcode::RdmaWrite, BUF_VA, 8, 0x90_0000);
    w.rkey = vkey;
    p.qps[0].post_send(w).unwrap();
    p.run_clean();
    assert_eq!(st(&p.collect(0)[1..]), vec![(2, WcStatus::RemAccessErr)]);

    // A key that may not be invalidated: invalid request (class J) on both sides.
    let mut p = Pair::rc();
    p.qps[1].post_recv(recv(&p, 1, 1, BUF_VA, 64)).unwrap();
    let mut w = wr(&p, 1, WrOpcode::SendWithInv, BUF_VA, 16, 0);
    w.invalidate_rkey = p.rkey(1);
    p.qps[0].post_send(w).unwrap();
    p.run_clean();
    assert_eq!(st(p.collect(0)), vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(st(p.collect(1)), vec![(1, WcStatus::RemInvReqErr)]);
}

#[test]
fn srq_feeds_the_responder_and_is_not_flushed() {
    let mut p = Pair::new(
        Service::Rc,
        Mtu::Mtu1024,
        &Pair::rc_attr(),
        [0, 0],
        |side, c| c.uses_srq = side == 1,
    );
    let mut srq = Srq::new(8, 1);
    for i in 0..3 {
        srq.post(recv(&p, 1, 10 + i, BUF_VA + i * 0x1000, 0x1000))
            .unwrap();
    }
    p.srq[1] = Some(srq);
    assert_eq!(
        p.qps[1].post_recv(recv(&p, 1, 1, BUF_VA, 8)),
        Err(PostError::InvalidState)
    );
    p.fill(0, BUF_VA, &pattern(100, 4));
    p.qps[0]
        .post_send(wr(&p, 1, WrOpcode::Send, BUF_VA, 100, 0))
        .unwrap();
    p.run_clean();
    assert_eq!(st(p.collect(1)), vec![(10, WcStatus::Success)]);
    // Credits are "unlimited" with an SRQ.
    let ack = p.log.iter().rev().find_map(|l| l.repr().aeth).unwrap();
    assert_eq!(ack.syndrome, transport::wire::Syndrome::ack(31));
    // ERR flushes the QP's own queues but not the SRQ's WQEs.
    let a = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    p.qps[1].modify(&a, QpAttrMask::STATE).unwrap();
    assert_eq!(p.srq[1].as_ref().map(transport::RecvQueue::len), Some(2));
    assert_eq!(p.qps[1].poll_event(), Some(QpEvent::LastWqeReached));
}

#[test]
fn credits_limit_new_sends_then_probe() {
    let mut p = Pair::rc();
    for i in 0..3 {
        p.qps[1]
            .post_recv(recv(&p, 1, i, BUF_VA + i * 0x100, 0x100))
            .unwrap();
    }
    p.qps[0]
        .post_send(wr(&p, 1, WrOpcode::Send, BUF_VA, 8, 0))
        .unwrap();
    p.run_clean();
    // The ACK advertised 2 free WQEs (credit code 2) with MSN 1: LSN 3.
    let ack = p.log.iter().rev().find_map(|l| l.repr().aeth).unwrap();
    assert_eq!(ack.syndrome, transport::wire::Syndrome::ack(2));
    for id in 2..=5 {
        p.qps[0]
            .post_send(wr(&p, id, WrOpcode::Send, BUF_VA, 8, 0))
            .unwrap();
    }
    assert_eq!(p.transmit(0), 2, "SSN 2 and 3 fit the credits, SSN 4 waits");
    p.exchange(&mut |_, _| Fate::Deliver);
    // With nothing outstanding the requester probes with SSN 4 and gets an RNR NAK.
    assert!(p.qps[0].counters().rcvd_rnr_err >= 1);
    for i in 3..6 {
        p.qps[1]
            .post_recv(recv(&p, 1, i, BUF_VA + i * 0x100, 0x100))
            .unwrap();
    }
    p.run_clean();
    assert_eq!(p.collect(0).len(), 5);
    assert!(p.collect(0).iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(p.collect(1).len(), 5);
}

#[test]
fn acks_are_coalesced() {
    let mut p = Pair::rc();
    for id in 0..10 {
        p.qps[0]
            .post_send(wr(&p, id, WrOpcode::RdmaWrite, BUF_VA, 8, BUF_VA + id * 8))
            .unwrap();
    }
    assert_eq!(p.transmit(0), 10);
    while let Some(b) = p.pipe[1].pop_front() {
        p.deliver_bytes(1, &b);
    }
    assert_eq!(p.transmit(1), 1, "ten AckReq packets, one cumulative ACK");
    let ack = RocePacketRepr::parse(p.pipe[0].front().unwrap()).unwrap();
    assert_eq!(ack.bth.psn.value(), 9);
    assert_eq!(ack.aeth.unwrap().msn.value(), 10);
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(p.collect(0).len(), 10);
    // Packets without AckReq are acknowledged later (counted as deferred).
    p.qps[0]
        .post_send(wr(&p, 11, WrOpcode::RdmaWrite, BUF_VA, 3000, BUF_VA))
        .unwrap();
    p.run_clean();
    assert_eq!(p.qps[1].counters().ack_deferred, 2);
}

#[test]
fn sqd_drains_in_flight_work_then_resumes() {
    let mut p = Pair::rc();
    for id in 0..3 {
        p.qps[0]
            .post_send(wr(&p, id, WrOpcode::RdmaWrite, BUF_VA, 8, BUF_VA))
            .unwrap();
    }
    // Send the first two, hold the third back by draining.
    let mut buf = vec![0u8; 2048];
    for _ in 0..2 {
        let t = p.qps[0]
            .poll_transmit(p.now, &mut p.mem[0].for_qp(Qpn::new(QPN[0])), &mut buf)
            .unwrap();
        p.pipe[1].push_back(buf[..t.len].to_vec());
    }
    let a = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: true,
        ..QpAttr::default()
    };
    p.qps[0]
        .modify(&a, QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY)
        .unwrap();
    assert!(p.qps[0].query().sq_draining);
    assert_eq!(p.transmit(0), 0, "SQD starts nothing new");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    assert_eq!(
        p.qps[0].modify(&rts, QpAttrMask::STATE),
        Err(transport::ModifyError::Busy)
    );
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(
        st(p.collect(0)),
        vec![(0, WcStatus::Success), (1, WcStatus::Success)]
    );
    assert_eq!(p.qps[0].poll_event(), Some(QpEvent::SqDrained));
    assert_eq!(p.qps[0].poll_event(), None);
    p.qps[0].modify(&rts, QpAttrMask::STATE).unwrap();
    p.run_clean();
    assert_eq!(st(&p.collect(0)[2..]), vec![(2, WcStatus::Success)]);
}

#[test]
fn fence_and_max_rd_atomic() {
    let attr = QpAttr {
        max_rd_atomic: 2,
        ..Pair::rc_attr()
    };
    let mut p = Pair::new(Service::Rc, Mtu::Mtu1024, &attr, [0, 0], |_, _| {});
    for id in 0..4 {
        p.qps[0]
            .post_send(wr(&p, id, WrOpcode::RdmaRead, BUF_VA + id * 64, 64, BUF_VA))
            .unwrap();
    }
    assert_eq!(p.transmit(0), 2, "initiator depth 2");
    p.run_clean();
    assert_eq!(p.collect(0).len(), 4);
    // A fenced SEND waits for the READ before it.
    p.qps[1].post_recv(recv(&p, 1, 1, BUF_VA, 64)).unwrap();
    p.qps[0]
        .post_send(wr(&p, 10, WrOpcode::RdmaRead, BUF_VA, 64, BUF_VA))
        .unwrap();
    let mut s = wr(&p, 11, WrOpcode::Send, BUF_VA, 8, 0);
    s.flags = SendFlags::SIGNALED | SendFlags::FENCE;
    p.qps[0].post_send(s).unwrap();
    assert_eq!(p.transmit(0), 1);
    p.run_clean();
    assert_eq!(
        st(&p.collect(0)[4..]),
        vec![(10, WcStatus::Success), (11, WcStatus::Success)]
    );
}

#[test]
fn segmentation_and_padding() {
    for (mtu, len) in [
        (Mtu::Mtu256, 1001u32),
        (Mtu::Mtu4096, 10_000),
        (Mtu::Mtu512, 512),
        (Mtu::Mtu2048, 2),
    ] {
        let mut p = Pair::new(Service::Rc, mtu, &Pair::rc_attr(), [0, 0], |_, _| {});
        let data = pattern(len as usize, 5);
        p.fill(0, BUF_VA, &data);
        p.qps[1]
            .post_recv(recv(&p, 1, 1, BUF_VA + 0x40000, 0x10000))
            .unwrap();
        p.qps[0]
            .post_send(wr(&p, 1, WrOpcode::Send, BUF_VA, len, 0))
            .unwrap();
        p.run_clean();
        assert_eq!(p.bytes(1, BUF_VA + 0x40000, len as usize), &data[..]);
        let sizes: Vec<(usize, u8, bool)> = p
            .log
            .iter()
            .filter(|l| l.from == 0)
            .map(|l| {
                let r = l.repr();
                (r.payload.len(), r.bth.pad_count, r.bth.ack_req)
            })
            .collect();
        let m = mtu.bytes() as usize;
        let n = (len as usize).div_ceil(m);
        assert_eq!(sizes.len(), n, "{mtu:?}");
        for (i, (plen, pad, ack)) in sizes.iter().enumerate() {
            let want = if i + 1 < n {
                m
            } else {
                len as usize - m * (n - 1)
            };
            assert_eq!(*plen, want);
            assert_eq!(usize::from(*pad), (4 - want % 4) % 4, "pad to 4 bytes");
            assert_eq!(*ack, i + 1 == n, "AckReq on the last packet only");
        }
    }
}

#[test]
fn a_turn_that_ends_mid_message_asks_for_an_ack() {
    // A driver that stops asking for packets mid-message (its turn is over, its wire is
    // full) says so with request_ack_next: the packet it takes next carries AckReq, the
    // responder acknowledges what arrived, and later packets go back to the usual rule.
    let mut p = Pair::new(
        Service::Rc,
        Mtu::Mtu1024,
        &Pair::rc_attr(),
        [0, 0],
        |_, _| {},
    );
    let len = 8 * 1024u32;
    p.fill(0, BUF_VA, &pattern(len as usize, 9));
    p.qps[0]
        .post_send(wr(
            &p,
            1,
            WrOpcode::RdmaWrite,
            BUF_VA,
            len,
            BUF_VA + 0x40000,
        ))
        .unwrap();
    let mut sent = Vec::new();
    let mut buf = vec![0u8; 8192];
    for i in 0..3 {
        if i == 2 {
            p.qps[0].request_ack_next();
        }
        let t = p.qps[0]
            .poll_transmit(p.now, &mut p.mem[0].for_qp(Qpn::new(QPN[0])), &mut buf)
            .expect("a packet of the WRITE");
        let pkt = buf[..t.len].to_vec();
        sent.push(RocePacketRepr::parse(&pkt).unwrap().bth.ack_req);
        p.deliver_bytes(1, &pkt);
    }
    assert_eq!(
        sent,
        [false, false, true],
        "AckReq on the packet after the hint only"
    );
    // The responder answers the third packet at once: PSNs 0..=2 are acknowledged before
    // the rest of the message leaves.
    let t = p.qps[1]
        .poll_transmit(p.now, &mut p.mem[1].for_qp(Qpn::new(QPN[1])), &mut buf)
        .expect("an ACK");
    let ack = RocePacketRepr::parse(&buf[..t.len]).unwrap();
    assert_eq!((ack.bth.psn.value(), ack.aeth.is_some()), (2, true));
    p.run_clean();
    assert_eq!(
        p.bytes(1, BUF_VA + 0x40000, len as usize),
        &pattern(len as usize, 9)[..]
    );
    let later: Vec<bool> = p
        .log
        .iter()
        .filter(|l| l.from == 0)
        .map(|l| l.repr().bth.ack_req)
        .collect();
    assert_eq!(later.len(), 5, "the other five packets of the message");
    assert_eq!(later, [false, false, false, false, true]);
}

#[test]
fn inline_local_errors_and_zero_length() {
    let mut p = Pair::rc();
    p.qps[1].post_recv(recv(&p, 1, 1, BUF_VA, 64)).unwrap();
    p.qps[1]
        .post_recv(recv(&p, 1, 2, BUF_VA + 0x100, 64))
        .unwrap();
    // Inline SEND: no local key involved.
    let mut s = SendWr::new(1, WrOpcode::Send);
    s.local = LocalData::Inline(b"inline!".to_vec());
    p.qps[0].post_send(s).unwrap();
    // Zero-length SEND, WRITE (any key) and READ.
    p.qps[0]
        .post_send(wr(&p, 2, WrOpcode::Send, BUF_VA, 0, 0))
        .unwrap();
    let mut z = wr(&p, 3, WrOpcode::RdmaWrite, BUF_VA, 0, 0);
    z.rkey = transport::wire::Rkey(0);
    p.qps[0].post_send(z).unwrap();
    p.qps[0]
        .post_send(wr(&p, 4, WrOpcode::RdmaRead, BUF_VA, 0, 0))
        .unwrap();
    p.run_clean();
    assert!(p.collect(0).iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(p.collect(0).len(), 4);
    let rc = p.collect(1).to_vec();
    assert_eq!((rc[0].byte_len, rc[1].byte_len), (7, 0));
    assert_eq!(p.bytes(1, BUF_VA, 7), b"inline!");
    let mut long = SendWr::new(9, WrOpcode::Send);
    long.local = LocalData::Inline(vec![0; 1000]);
    assert_eq!(p.qps[0].post_send(long), Err(PostError::InlineTooLong));

    // A bad local key: LOC_PROT_ERR, nothing sent, QP to ERR.
    let mut p = Pair::rc();
    let mut bad = wr(&p, 1, WrOpcode::Send, BUF_VA, 8, 0);
    bad.local = LocalData::Sges(SgeList::single(Sge {
        addr: BUF_VA,
        length: 8,
        lkey: transport::wire::Lkey(99),
    }));
    p.qps[0].post_send(bad).unwrap();
    p.qps[0]
        .post_send(wr(&p, 2, WrOpcode::Send, BUF_VA, 8, 0))
        .unwrap();
    assert_eq!(p.transmit(0), 0);
    assert_eq!(
        st(p.collect(0)),
        vec![(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.qps[0].state(), QpState::Err);

    // A receive buffer too small: local length error at the responder, invalid request NAK.
    let mut p = Pair::rc();
    p.qps[1].post_recv(recv(&p, 1, 1, BUF_VA, 100)).unwrap();
    p.qps[0]
        .post_send(wr(&p, 1, WrOpcode::Send, BUF_VA, 200, 0))
        .unwrap();
    p.run_clean();
    assert_eq!(st(p.collect(0)), vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(st(p.collect(1)), vec![(1, WcStatus::LocLenErr)]);
}

#[test]
fn modify_to_err_flushes_and_reset_discards() {
    let mut p = Pair::rc();
    p.qps[0].post_recv(recv(&p, 0, 5, BUF_VA, 64)).unwrap();
    p.qps[0]
        .post_send(wr(&p, 1, WrOpcode::RdmaWrite, BUF_VA, 8, BUF_VA))
        .unwrap();
    let mut u = wr(&p, 2, WrOpcode::RdmaWrite, BUF_VA, 8, BUF_VA);
    u.flags = SendFlags::default();
    p.qps[0].post_send(u).unwrap();
    p.transmit(0);
    let err = QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    };
    p.qps[0].modify(&err, QpAttrMask::STATE).unwrap();
    let cs = p.collect(0).to_vec();
    // Every WR — the unsignaled one too — and the receive WR are flushed, once each.
    assert_eq!(
        st(&cs),
        vec![
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr),
            (5, WcStatus::WrFlushErr)
        ]
    );
    assert!(cs[2].is_recv());
    assert_eq!(p.qps[0].poll_timeout(), None);
    // Posting in ERR: accepted and flushed.
    p.qps[0]
        .post_send(wr(&p, 3, WrOpcode::Send, BUF_VA, 8, 0))
        .unwrap();
    assert_eq!(st(&p.collect(0)[3..]), vec![(3, WcStatus::WrFlushErr)]);
    // The ACK that arrives now is dropped.
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(p.collect(0).len(), 4);
    // ERR -> RTS is illegal; ERR -> RESET discards everything silently.
    let rts = QpAttr {
        qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    assert!(p.qps[0].modify(&rts, QpAttrMask::STATE).is_err());
    p.qps[0]
        .post_send(wr(&p, 4, WrOpcode::Send, BUF_VA, 8, 0))
        .unwrap();
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    p.qps[0].modify(&reset, QpAttrMask::STATE).unwrap();
    assert_eq!(p.qps[0].state(), QpState::Reset);
    assert_eq!(p.qps[0].poll_completion(), None, "RESET completes nothing");
    assert_eq!(p.qps[0].send_queue_len(), 0);
    assert_eq!(
        p.qps[0].post_send(wr(&p, 5, WrOpcode::Send, BUF_VA, 8, 0)),
        Err(PostError::InvalidState)
    );
}

#[test]
fn rnr_on_write_with_imm_changes_nothing() {
    // Regression (found by the simulator): an RNR NAK on RDMA_WRITE_ONLY_WITH_IMMEDIATE must
    // leave no message in progress, so the retried ONLY packet is accepted.
    let mut p = Pair::rc();
    p.fill(0, BUF_VA, &pattern(64, 6));
    for (id, len) in [(1u64, 64u32), (2, 2500)] {
        let mut w = wr(
            &p,
            id,
            WrOpcode::RdmaWriteWithImm,
            BUF_VA,
            len,
            BUF_VA + 0x1000 * id,
        );
        w.imm_data = id as u32;
        p.qps[0].post_send(w).unwrap();
    }
    p.exchange(&mut |_, _| Fate::Deliver);
    assert_eq!(p.qps[0].counters().rcvd_rnr_err, 1);
    p.qps[1].post_recv(recv(&p, 1, 7, BUF_VA, 8)).unwrap();
    p.qps[1].post_recv(recv(&p, 1, 8, BUF_VA, 8)).unwrap();
    p.run_clean();
    assert_eq!(
        st(p.collect(0)),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let rc = p.collect(1).to_vec();
    assert_eq!(
        st(&rc),
        vec![(7, WcStatus::Success), (8, WcStatus::Success)]
    );
    assert_eq!((rc[0].imm_data, rc[0].byte_len), (Some(1), 64));
    assert_eq!((rc[1].imm_data, rc[1].byte_len), (Some(2), 2500));
    assert_eq!(p.bytes(1, BUF_VA + 0x1000, 64), &pattern(64, 6)[..]);
}
