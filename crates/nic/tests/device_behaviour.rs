//! Queue-pair behaviour beyond RC's error cases, on real device datapaths (`nic::simhost`:
//! rings, doorbells, MR table and DMA checks, CQs, SRQs, async events, in virtual time):
//! a UC message lost whole, the send-queue-drained state, an SRQ that outlives the QP that
//! used it, and inline data (IBTA Vol 1 §9.8.3 unreliable connected, §10.3.1 SQD, §10.2.9
//! shared receive queues; rdma-core's `ibv_post_send` IBV_SEND_INLINE).

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use abi::uverbs::{ModifyQp, Request, Wc};
use abi::{QpAttrMask, QpState, QpType, SendFlags, WcOpcode, WcStatus, WrOpcode};
use nic::simhost::workload::pattern;
use nic::simhost::{
    all_access, rdma_wr, send_wr, sge, Cq, DevId, Fate, FateFn, Host, Mr, Qp, RcOpts,
    QP_USER_HANDLE,
};
use nic::Limits;
use transport::Service;

const A: Ipv4Addr = Ipv4Addr::new(127, 98, 1, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 98, 1, 2);
const SECOND: u64 = 1_000_000_000;
const SIGNALED: u32 = SendFlags::SIGNALED.0;

struct Pair {
    h: Host,
    a: DevId,
    b: DevId,
    qa: Qp,
    qb: Qp,
    cqa: Cq,
    cqb: Cq,
    ma: Mr,
    mb: Mr,
}

/// Two devices with a connected pair of QPs of type `ty` (RC or UC); `fate` sees each
/// datagram (`true` if A sent it) with how many A or B sent before it.
fn pair(ty: QpType, mut fate: impl FnMut(bool, usize) -> Fate + Send + 'static) -> Pair {
    let mut h = Host::new(11);
    let a = h.add_device(A, Limits::default()).unwrap();
    let b = h.add_device(B, Limits::default()).unwrap();
    let cqa = h.create_cq(a, 64).unwrap();
    let cqb = h.create_cq(b, 64).unwrap();
    let qa = h.create_qp(a, ty, &cqa, &cqa, 16, None).unwrap();
    let qb = h.create_qp(b, ty, &cqb, &cqb, 16, None).unwrap();
    let (service, _) = Service::of(ty).unwrap();
    h.connect_with(a, qa, service, b, qb.qpn, RcOpts::default())
        .unwrap();
    h.connect_with(b, qb, service, a, qa.qpn, RcOpts::default())
        .unwrap();
    let ma = h.reg_mr(a, 1 << 16, all_access()).unwrap();
    let mb = h.reg_mr(b, 1 << 16, all_access()).unwrap();
    let sent = Arc::new(Mutex::new([0usize; 2]));
    h.fate = Some(FateFn(Box::new(move |d| {
        let from_a = d.from == std::net::IpAddr::V4(A);
        let mut n = sent.lock().unwrap();
        let before = n[usize::from(!from_a)];
        n[usize::from(!from_a)] += 1;
        fate(from_a, before)
    })));
    Pair {
        h,
        a,
        b,
        qa,
        qb,
        cqa,
        cqb,
        ma,
        mb,
    }
}

/// Poll `cq` until `n` completions have come, then a further virtual second for any that
/// should not come.
fn completions(h: &mut Host, cq: &mut Cq, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    h.run_until(SECOND, |h| {
        got.extend(h.poll_cq(cq, 64));
        got.len() >= n
    });
    let idle_until = h.now() + SECOND;
    h.alarm = Some(idle_until);
    h.run_until(2 * SECOND, |h| h.now() >= idle_until);
    got.extend(h.poll_cq(cq, 64));
    got
}

fn statuses(got: &[Wc]) -> Vec<(u64, u32)> {
    got.iter().map(|w| (w.wr_id, w.status)).collect()
}

fn modify(h: &mut Host, id: DevId, m: ModifyQp) -> Result<(), nic::simhost::Refused> {
    h.command(id, &Request::ModifyQp(m)).map(|_| ())
}

#[test]
fn a_uc_message_that_loses_a_packet_is_dropped_whole_and_the_next_one_lands() {
    // UC has no ACKs and no resends: the second packet of a three-packet SEND is lost, so
    // B drops that message whole (its receive WQE is not consumed) and resynchronises on
    // the next FIRST/ONLY; A completes everything as sent.
    let mut p = pair(QpType::Uc, |from_a, before| {
        if from_a && before == 1 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let first = pattern(1, 3000);
    let second = pattern(2, 1500);
    p.h.write(p.a, p.ma.addr, &first);
    p.h.write(p.a, p.ma.addr + 0x2000, &second);
    p.h.post_recv(
        p.b,
        p.qb,
        &[(1, sge(&p.mb, 0, 4096)), (2, sge(&p.mb, 0x1000, 4096))],
    )
    .unwrap();
    let mut imm = rdma_wr(
        3,
        WrOpcode::RdmaWriteWithImm,
        SIGNALED,
        p.mb.addr + 0x4000,
        p.mb.rkey,
    );
    imm.set_imm_data(77);
    p.h.post_send(
        p.a,
        p.qa,
        &[
            (
                send_wr(1, WrOpcode::Send, SIGNALED),
                vec![sge(&p.ma, 0, 3000)],
            ),
            (
                send_wr(2, WrOpcode::Send, SIGNALED),
                vec![sge(&p.ma, 0x2000, 1500)],
            ),
            (imm, vec![sge(&p.ma, 0, 100)]),
        ],
    )
    .unwrap();
    let ok = WcStatus::Success.raw();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 3)),
        [(1, ok), (2, ok), (3, ok)]
    );
    let got = completions(&mut p.h, &mut p.cqb, 2);
    assert_eq!(
        statuses(&got),
        [(1, ok), (2, ok)],
        "the first WQE took the second SEND"
    );
    assert_eq!(got[0].byte_len, 1500);
    assert_eq!(p.h.read(p.b, p.mb.addr, 1500), second);
    assert_eq!(
        (got[1].opcode, got[1].imm_data(), got[1].byte_len),
        (WcOpcode::RecvRdmaWithImm.raw(), 77, 100)
    );
    assert_eq!(p.h.read(p.b, p.mb.addr + 0x4000, 100), first[..100]);
    let c = p.h.port_counters(p.a).transport;
    assert_eq!(c.retransmissions, 0, "UC never resends");
}

#[test]
fn sqd_lets_outstanding_work_finish_starts_nothing_new_and_resumes_at_rts() {
    // B's ACKs are held back a while, so three WRITEs are still unacknowledged when A
    // moves to SQD (with the async notification asked for). A fourth WRITE posted in SQD
    // waits; RTS is refused while the queue drains (the kernel's EBUSY/EINVAL); once the
    // three are acknowledged: their completions, one SQ_DRAINED event, and RTS starts the
    // fourth.
    let mut p = pair(QpType::Rc, |from_a, _| {
        if from_a {
            Fate::Deliver
        } else {
            Fate::Delay(2_000_000)
        }
    });
    let w = |id| {
        (
            rdma_wr(id, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey),
            vec![sge(&p.ma, 0, 64)],
        )
    };
    let three = [w(1), w(2), w(3)];
    let fourth = w(4);
    p.h.post_send(p.a, p.qa, &three).unwrap();
    // Let the three leave (well short of the held ACKs).
    let t = p.h.now() + 100_000;
    p.h.alarm = Some(t);
    p.h.run_until(SECOND, |h| h.now() >= t);
    assert!(
        p.h.poll_cq(&mut p.cqa, 64).is_empty(),
        "nothing acknowledged yet"
    );
    let sqd = ModifyQp {
        qp_handle: p.qa.handle,
        attr_mask: (QpAttrMask::STATE | QpAttrMask::EN_SQD_ASYNC_NOTIFY).0,
        qp_state: QpState::Sqd.raw() as u8,
        en_sqd_async_notify: 1,
        ..ModifyQp::default()
    };
    modify(&mut p.h, p.a, sqd).unwrap();
    p.h.post_send(p.a, p.qa, &[fourth]).unwrap();
    let rts = ModifyQp {
        qp_handle: p.qa.handle,
        attr_mask: QpAttrMask::STATE.0,
        qp_state: QpState::Rts.raw() as u8,
        ..ModifyQp::default()
    };
    assert!(
        modify(&mut p.h, p.a, rts).is_err(),
        "RTS while the send queue is still draining"
    );
    let ok = WcStatus::Success.raw();
    let got = completions(&mut p.h, &mut p.cqa, 3);
    assert_eq!(
        statuses(&got),
        [(1, ok), (2, ok), (3, ok)],
        "the fourth waits in SQD"
    );
    assert_eq!(
        p.h.async_events(p.a),
        [(nic::event::SQ_DRAINED, QP_USER_HANDLE)]
    );
    modify(&mut p.h, p.a, rts).unwrap();
    assert_eq!(statuses(&completions(&mut p.h, &mut p.cqa, 1)), [(4, ok)]);
}

#[test]
fn an_srq_keeps_its_receives_when_a_qp_using_it_goes_to_error() {
    // Three receives on B's SRQ; one SEND takes the first. B's QP moves to ERR: the QP's
    // own queues flush, the SRQ's WQEs do not (they belong to the SRQ), and the QP raises
    // LAST_WQE_REACHED. A second QP on the same SRQ then receives into the other two.
    let mut h = Host::new(12);
    let a = h.add_device(A, Limits::default()).unwrap();
    let b = h.add_device(B, Limits::default()).unwrap();
    let mut cqa = h.create_cq(a, 64).unwrap();
    let mut cqb = h.create_cq(b, 64).unwrap();
    let srq = h.create_srq(b, 8, 0, 0x5252).unwrap();
    let ma = h.reg_mr(a, 1 << 16, all_access()).unwrap();
    let mb = h.reg_mr(b, 1 << 16, all_access()).unwrap();
    let recvs: Vec<_> = (0..3u64)
        .map(|i| (10 + i, sge(&mb, i * 0x1000, 0x1000)))
        .collect();
    h.post_srq_recv(b, srq, &recvs).unwrap();
    let connect = |h: &mut Host, cqa: &Cq, cqb: &Cq| {
        let qa = h.create_rc_qp(a, cqa, cqa, 8).unwrap();
        let qb = h.create_rc_qp_on(b, cqb, cqb, 8, Some(srq)).unwrap();
        h.connect_rc(a, qa, b, qb.qpn, 8, 7).unwrap();
        h.connect_rc(b, qb, a, qa.qpn, 8, 7).unwrap();
        (qa, qb)
    };
    let send = |h: &mut Host, qa: Qp, id: u64| {
        h.write(a, ma.addr + id * 256, &pattern(id, 256));
        let wr = send_wr(id, WrOpcode::Send, SIGNALED);
        h.post_send(a, qa, &[(wr, vec![sge(&ma, id * 256, 256)])])
            .unwrap();
    };
    let ok = WcStatus::Success.raw();
    let (qa, qb) = connect(&mut h, &cqa, &cqb);
    send(&mut h, qa, 1);
    assert_eq!(statuses(&completions(&mut h, &mut cqa, 1)), [(1, ok)]);
    assert_eq!(statuses(&completions(&mut h, &mut cqb, 1)), [(10, ok)]);
    h.modify_state(b, qb, QpState::Err.raw() as u8).unwrap();
    let flushed = completions(&mut h, &mut cqb, 1);
    assert!(
        flushed.is_empty(),
        "the SRQ's receives are not flushed with the QP: {:?}",
        statuses(&flushed)
    );
    assert_eq!(
        h.async_events(b),
        [(nic::event::QP_LAST_WQE_REACHED, QP_USER_HANDLE)]
    );
    let (qa2, _qb2) = connect(&mut h, &cqa, &cqb);
    send(&mut h, qa2, 2);
    send(&mut h, qa2, 3);
    assert_eq!(
        statuses(&completions(&mut h, &mut cqa, 2)),
        [(2, ok), (3, ok)]
    );
    let got = completions(&mut h, &mut cqb, 2);
    assert_eq!(statuses(&got), [(11, ok), (12, ok)]);
    assert_eq!(h.read(b, mb.addr + 0x1000, 256), pattern(2, 256));
    assert_eq!(h.read(b, mb.addr + 0x2000, 256), pattern(3, 256));
}

#[test]
fn inline_data_is_taken_at_post_time_and_bounded_by_max_inline_data() {
    // An inline SEND's bytes are copied from the SGE when it is posted: overwriting the
    // buffer afterwards changes nothing that arrives. More than the QP's max_inline_data
    // (64 here) is refused at post time and nothing is sent.
    let mut p = pair(QpType::Rc, |_, _| Fate::Deliver);
    p.h.post_recv(p.b, p.qb, &[(1, sge(&p.mb, 0, 256))])
        .unwrap();
    p.h.write(p.a, p.ma.addr, b"inline!");
    let inline = SendFlags::INLINE.0 | SIGNALED;
    p.h.post_send(
        p.a,
        p.qa,
        &[(send_wr(1, WrOpcode::Send, inline), vec![sge(&p.ma, 0, 7)])],
    )
    .unwrap();
    p.h.write(p.a, p.ma.addr, b"changed");
    let ok = WcStatus::Success.raw();
    assert_eq!(statuses(&completions(&mut p.h, &mut p.cqa, 1)), [(1, ok)]);
    let got = completions(&mut p.h, &mut p.cqb, 1);
    assert_eq!((statuses(&got), got[0].byte_len), (vec![(1, ok)], 7));
    assert_eq!(p.h.read(p.b, p.mb.addr, 7), b"inline!");

    let long = p.h.post_send(
        p.a,
        p.qa,
        &[(send_wr(2, WrOpcode::Send, inline), vec![sge(&p.ma, 0, 65)])],
    );
    assert!(long.is_err(), "65 inline bytes on a QP of 64");
    assert!(completions(&mut p.h, &mut p.cqa, 1).is_empty());
    assert!(completions(&mut p.h, &mut p.cqb, 1).is_empty());
    assert_eq!(
        p.h.port_counters(p.a).transport.sent_pkts,
        1,
        "only the first SEND"
    );
}

#[test]
fn a_send_with_invalidate_naming_a_key_that_may_not_be_invalidated_fails_both_ends() {
    // SEND WITH INVALIDATE may name only a memory window's R_Key (IBTA Vol 1 §10.6.7.2.3):
    // naming an ordinary MR's is an invalid request — B's receive completes in error, B
    // NAKs Invalid Request, A's SEND completes with REM_INV_REQ_ERR — and the MR is not
    // invalidated: a WRITE over a new connection still lands in it.
    let mut p = pair(QpType::Rc, |_, _| Fate::Deliver);
    p.h.post_recv(p.b, p.qb, &[(1, sge(&p.mb, 0, 64))]).unwrap();
    let mut w = send_wr(1, WrOpcode::SendWithInv, SIGNALED);
    w.ex = p.mb.rkey;
    p.h.post_send(p.a, p.qa, &[(w, vec![sge(&p.ma, 0, 16)])])
        .unwrap();
    let bad = WcStatus::RemInvReqErr.raw();
    assert_eq!(statuses(&completions(&mut p.h, &mut p.cqa, 1)), [(1, bad)]);
    assert_eq!(statuses(&completions(&mut p.h, &mut p.cqb, 1)), [(1, bad)]);
    assert_eq!(p.h.port_counters(p.a).transport.rcvd_nak_invalid_request, 1);
    let qa = p.h.create_rc_qp(p.a, &p.cqa, &p.cqa, 8).unwrap();
    let qb = p.h.create_rc_qp(p.b, &p.cqb, &p.cqb, 8).unwrap();
    p.h.connect_rc(p.a, qa, p.b, qb.qpn, 8, 7).unwrap();
    p.h.connect_rc(p.b, qb, p.a, qa.qpn, 8, 7).unwrap();
    p.h.write(p.a, p.ma.addr, b"still valid");
    let wr = rdma_wr(
        2,
        WrOpcode::RdmaWrite,
        SIGNALED,
        p.mb.addr + 0x100,
        p.mb.rkey,
    );
    p.h.post_send(p.a, qa, &[(wr, vec![sge(&p.ma, 0, 11)])])
        .unwrap();
    let ok = WcStatus::Success.raw();
    assert_eq!(statuses(&completions(&mut p.h, &mut p.cqa, 1)), [(2, ok)]);
    assert_eq!(p.h.read(p.b, p.mb.addr + 0x100, 11), b"still valid");
}
