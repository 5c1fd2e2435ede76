//! The classic RC error cases with a hand on the wire, on real device datapaths
//! (`nic::simhost`: rings, doorbells, MR table and DMA checks, CQs and timers, in virtual
//! time): one chosen packet lost or duplicated, and what the spec prescribes — the NAK,
//! the resend from the right PSN, the duplicate answered and not executed again, one
//! completion per work request, memory intact (IBTA Vol 1 §9.7, reliable service).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use abi::uverbs::AtomicWr;
use abi::uverbs::Wc;
use abi::{Mtu, SendFlags, WcOpcode, WcStatus, WrOpcode};
use nic::simhost::workload::pattern;
use nic::simhost::{
    all_access, rdma_wr, send_wr, sge, Cq, Datagram, DevId, Fate, FateFn, Host, Mr, Qp, RcOpts,
};
use nic::Limits;
use transport::wire::{AethRepr, BthRepr, Msn, Opcode, Psn, Qpn, RocePacketRepr, Syndrome};

const A: Ipv4Addr = Ipv4Addr::new(127, 98, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 98, 0, 2);
const SECOND: u64 = 1_000_000_000;
const SIGNALED: u32 = SendFlags::SIGNALED.0;
/// Path MTU 1024 (`RcOpts::default`): a 3 KiB message is FIRST, MIDDLE, LAST.
const MTU: usize = 1024;

// RC opcodes (IBTA Vol 1 Table 38).
const WRITE_FIRST: u8 = 0x06;
const WRITE_MIDDLE: u8 = 0x07;
const WRITE_ONLY_IMM: u8 = 0x0B;
const WRITE_ONLY: u8 = 0x0A;
const SEND_ONLY: u8 = 0x04;
const READ_REQUEST: u8 = 0x0C;
const READ_RESPONSE_MIDDLE: u8 = 0x0E;
const ACKNOWLEDGE: u8 = 0x11;

/// One datagram as the wire saw it: sender, BTH opcode and PSN, AETH syndrome (ACKs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    from_a: bool,
    opcode: u8,
    dqpn: u32,
    psn: u32,
    syndrome: Option<u8>,
}

fn seen(d: &Datagram<'_>, a: Ipv4Addr) -> Option<Seen> {
    let b = d.bytes;
    if b.len() < 12 {
        return None;
    }
    Some(Seen {
        from_a: d.from == IpAddr::V4(a),
        opcode: b[0],
        dqpn: u32::from_be_bytes([0, b[5], b[6], b[7]]),
        psn: u32::from_be_bytes([0, b[9], b[10], b[11]]),
        syndrome: (b[0] == ACKNOWLEDGE).then(|| b.get(12).copied()).flatten(),
    })
}

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
    /// Every datagram the wire carried, in order.
    log: Arc<Mutex<Vec<Seen>>>,
}

/// Two connected devices; `pick` decides the fate of each datagram given what it is, how
/// many of its kind (same sender and opcode) went before it, and its bytes (BTH first).
fn pair(pick: impl FnMut(&Seen, usize, &[u8]) -> Fate + Send + 'static) -> Pair {
    pair_with(RcOpts::default(), pick)
}

/// [`pair`] with both QPs connected with `opts`.
fn pair_with(opts: RcOpts, pick: impl FnMut(&Seen, usize, &[u8]) -> Fate + Send + 'static) -> Pair {
    pair_on([A, B], opts, pick)
}

/// [`pair_with`] on devices at these addresses (A's first).
fn pair_on(
    [addr_a, addr_b]: [Ipv4Addr; 2],
    opts: RcOpts,
    mut pick: impl FnMut(&Seen, usize, &[u8]) -> Fate + Send + 'static,
) -> Pair {
    let mut h = Host::new(7);
    let a = h.add_device(addr_a, Limits::default()).unwrap();
    let b = h.add_device(addr_b, Limits::default()).unwrap();
    let cqa = h.create_cq(a, 64).unwrap();
    let cqb = h.create_cq(b, 64).unwrap();
    let qa = h.create_rc_qp(a, &cqa, &cqa, 16).unwrap();
    let qb = h.create_rc_qp(b, &cqb, &cqb, 16).unwrap();
    h.connect_rc_with(a, qa, b, qb.qpn, opts).unwrap();
    h.connect_rc_with(b, qb, a, qa.qpn, opts).unwrap();
    let ma = h.reg_mr(a, 1 << 16, all_access()).unwrap();
    let mb = h.reg_mr(b, 1 << 16, all_access()).unwrap();
    let log = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let l = log.clone();
    h.fate = Some(FateFn(Box::new(move |d| {
        let Some(s) = seen(d, addr_a) else {
            return Fate::Deliver;
        };
        let mut l = l.lock().unwrap();
        let before = l
            .iter()
            .filter(|x| x.from_a == s.from_a && x.opcode == s.opcode)
            .count();
        l.push(s);
        pick(&s, before, d.bytes)
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
        log,
    }
}

/// A fate that loses the first datagram with `opcode` sent by A (`from_a`) or by B.
fn drop_first(from_a: bool, opcode: u8) -> impl FnMut(&Seen, usize, &[u8]) -> Fate + Send {
    move |s, before, _| {
        if s.from_a == from_a && s.opcode == opcode && before == 0 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }
}

impl Pair {
    /// Post `wr` on A with one SGE over the first `len` bytes of A's MR, and wait for its
    /// completion (and a further second for any that should not come).
    fn post_one(&mut self, wr: abi::uverbs::SendWr, len: usize) -> Vec<Wc> {
        self.h
            .post_send(self.a, self.qa, &[(wr, vec![sge(&self.ma, 0, len as u32)])])
            .unwrap();
        completions(&mut self.h, &mut self.cqa, 1)
    }

    fn log(&self) -> Vec<Seen> {
        self.log.lock().unwrap().clone()
    }

    /// What A sent with `opcode`, as PSNs in order.
    fn sent_by_a(&self, opcode: u8) -> Vec<u32> {
        self.log()
            .iter()
            .filter(|s| s.from_a && s.opcode == opcode)
            .map(|s| s.psn)
            .collect()
    }
}

/// Poll `cq` until `n` completions have come, then a further virtual second for any
/// that should not come.
fn completions(h: &mut Host, cq: &mut Cq, n: usize) -> Vec<Wc> {
    let mut got = Vec::new();
    h.run_until(SECOND, |h| {
        got.extend(h.poll_cq(cq, 64));
        got.len() >= n
    });
    h.run_until(SECOND, |_| false);
    got.extend(h.poll_cq(cq, 64));
    got
}

fn statuses(got: &[Wc]) -> Vec<(u64, u32)> {
    got.iter().map(|w| (w.wr_id, w.status)).collect()
}

#[test]
fn a_lost_middle_packet_is_nakked_and_resent_from_its_psn() {
    // The first WRITE MIDDLE is lost: B sees the LAST out of sequence and answers with one
    // PSN sequence error NAK naming the missing PSN; A resends from there (go-back-N), not
    // the FIRST, and the WRITE completes once with every byte in place.
    let mut p = pair(drop_first(true, WRITE_MIDDLE));
    let data = pattern(1, 3 * MTU);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    let got = p.post_one(wr, data.len());
    assert_eq!(statuses(&got), [(1, WcStatus::Success.raw())]);
    assert_eq!(p.h.read(p.b, p.mb.addr, data.len()), data);
    let middle = p.sent_by_a(WRITE_MIDDLE);
    assert_eq!(middle.len(), 2, "the middle once lost, once resent");
    assert_eq!(middle[0], middle[1]);
    assert_eq!(
        p.sent_by_a(WRITE_FIRST).len(),
        1,
        "the FIRST was not resent"
    );
    let naks: Vec<Seen> = p
        .log()
        .into_iter()
        .filter(|s| !s.from_a && s.syndrome.is_some_and(|y| y >> 5 == 3))
        .collect();
    assert_eq!(naks.len(), 1, "{naks:?}");
    // Syndrome 011_00000: NAK, PSN sequence error; its PSN is the one B expects.
    assert_eq!(naks[0].syndrome, Some(0x60));
    assert_eq!(naks[0].psn, middle[0]);
    let ca = p.h.port_counters(p.a).transport;
    let cb = p.h.port_counters(p.b).transport;
    assert_eq!(ca.rcvd_seq_err, 1);
    assert!(cb.out_of_seq_request >= 1);
    assert_eq!(ca.retry_exceeded_err, 0);
}

#[test]
fn a_duplicated_request_is_acknowledged_again_and_not_executed_twice() {
    // A WRITE WITH IMMEDIATE arrives twice, the copy 50 µs after B has acknowledged the
    // original: B executes it once (one receive consumed of the two posted), counts the
    // duplicate and acknowledges it again; A completes once.
    let mut p = pair(|s, before, _| {
        if s.from_a && s.opcode == WRITE_ONLY_IMM && before == 0 {
            Fate::Duplicate(50_000)
        } else {
            Fate::Deliver
        }
    });
    p.h.post_recv(p.b, p.qb, &[(10, sge(&p.mb, 0, 0)), (11, sge(&p.mb, 0, 0))])
        .unwrap();
    let data = pattern(2, 200);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(
        1,
        WrOpcode::RdmaWriteWithImm,
        SIGNALED,
        p.mb.addr + 4096,
        p.mb.rkey,
    );
    let got = p.post_one(wr, data.len());
    assert_eq!(statuses(&got), [(1, WcStatus::Success.raw())]);
    let at_b = completions(&mut p.h, &mut p.cqb, 2);
    assert_eq!(
        statuses(&at_b),
        [(10, WcStatus::Success.raw())],
        "one receive consumed"
    );
    assert_eq!(p.h.read(p.b, p.mb.addr + 4096, data.len()), data);
    assert_eq!(p.h.port_counters(p.b).transport.duplicate_request, 1);
    let acks = p
        .log()
        .iter()
        .filter(|s| !s.from_a && s.opcode == ACKNOWLEDGE && s.syndrome.is_some_and(|y| y >> 5 == 0))
        .count();
    assert_eq!(acks, 2, "the duplicate acknowledged again");
    // A later request still lands: B's expected PSN did not move for the duplicate.
    let wr = rdma_wr(
        2,
        WrOpcode::RdmaWriteWithImm,
        SIGNALED,
        p.mb.addr,
        p.mb.rkey,
    );
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(2, WcStatus::Success.raw())]
    );
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqb, 1)),
        [(11, WcStatus::Success.raw())]
    );
}

#[test]
fn a_lost_ack_is_recovered_by_the_local_ack_timeout() {
    // B's only ACK is lost: A's local ACK timer (4.096 µs × 2^8) fires, A resends the
    // WRITE, B answers the duplicate with an ACK, and A completes once, successfully.
    let mut p = pair(drop_first(false, ACKNOWLEDGE));
    let data = pattern(3, 512);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    let got = p.post_one(wr, data.len());
    assert_eq!(statuses(&got), [(1, WcStatus::Success.raw())]);
    assert_eq!(p.h.read(p.b, p.mb.addr, data.len()), data);
    let writes = p.sent_by_a(WRITE_ONLY);
    assert_eq!(writes.len(), 2, "sent, then resent after the timeout");
    assert_eq!(writes[0], writes[1]);
    let ca = p.h.port_counters(p.a).transport;
    assert_eq!(ca.local_ack_timeouts, 1);
    assert_eq!(ca.retransmissions, 1);
    assert_eq!(p.h.port_counters(p.b).transport.duplicate_request, 1);
}

#[test]
fn a_lost_read_response_is_read_again_from_the_missing_psn() {
    // The first READ RESPONSE MIDDLE of a 3 KiB READ is lost: A notices the gap when the
    // LAST arrives and issues the READ again for what is missing, starting at that PSN;
    // the READ completes once with every byte of B's memory.
    let mut p = pair(drop_first(false, READ_RESPONSE_MIDDLE));
    let data = pattern(4, 3 * MTU);
    p.h.write(p.b, p.mb.addr, &data);
    let wr = rdma_wr(1, WrOpcode::RdmaRead, SIGNALED, p.mb.addr, p.mb.rkey);
    let got = p.post_one(wr, data.len());
    assert_eq!(statuses(&got), [(1, WcStatus::Success.raw())]);
    assert_eq!(p.h.read(p.a, p.ma.addr, data.len()), data);
    let reads = p.sent_by_a(READ_REQUEST);
    assert_eq!(reads.len(), 2, "{reads:?}");
    assert_eq!(
        reads[1],
        (reads[0] + 1) & 0xff_ffff,
        "the second READ starts at the missing response's PSN"
    );
    assert_eq!(p.h.port_counters(p.a).transport.retry_exceeded_err, 0);
}

#[test]
fn sequence_naks_and_timeouts_use_up_the_retry_count_then_the_wr_fails() {
    // retry_cnt 2 and the WRITE MIDDLE lost every time: the sequence NAK's resend and then
    // the local ACK timer's use up the retries; the third failure completes the WRITE with
    // RETRY_EXC_ERR, the SEND queued behind it is flushed, and so is later work.
    let opts = RcOpts {
        retry_cnt: 2,
        ..RcOpts::default()
    };
    let mut p = pair_with(opts, |s, _, _| {
        if s.from_a && s.opcode == WRITE_MIDDLE {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    p.h.post_recv(p.b, p.qb, &[(7, sge(&p.mb, 0, 64))]).unwrap();
    let wr = rdma_wr(
        1,
        WrOpcode::RdmaWrite,
        SIGNALED,
        p.mb.addr + 4096,
        p.mb.rkey,
    );
    let send = send_wr(2, WrOpcode::Send, SIGNALED);
    p.h.post_send(
        p.a,
        p.qa,
        &[
            (wr, vec![sge(&p.ma, 0, 3 * MTU as u32)]),
            (send, vec![sge(&p.ma, 0, 10)]),
        ],
    )
    .unwrap();
    let got = completions(&mut p.h, &mut p.cqa, 2);
    assert_eq!(
        statuses(&got),
        [
            (1, WcStatus::RetryExcErr.raw()),
            (2, WcStatus::WrFlushErr.raw())
        ]
    );
    let c = p.h.port_counters(p.a).transport;
    assert_eq!(
        c.rcvd_seq_err, 1,
        "one NAK: its PSN was already NAKed after that"
    );
    assert_eq!(c.retry_exceeded_err, 1);
    assert_eq!(c.completer_retry_err + c.local_ack_timeouts, 3);
    // Nothing reached B's receive queue: the SEND never left.
    assert!(completions(&mut p.h, &mut p.cqb, 0).is_empty());
    let wr = send_wr(3, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 10)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(3, WcStatus::WrFlushErr.raw())]
    );
}

#[test]
fn a_wrong_rkey_is_nakked_and_both_ends_go_to_error() {
    // A WRITE with an rkey B never issued: B answers NAK remote access error (syndrome
    // 011_00010), writes nothing, moves to ERR and flushes its receive; A completes the
    // WRITE with REM_ACCESS_ERR and flushes what was queued behind it.
    let mut p = pair(|_, _, _| Fate::Deliver);
    p.h.post_recv(p.b, p.qb, &[(4, sge(&p.mb, 0, 64))]).unwrap();
    p.h.write(p.a, p.ma.addr, &[0x5a; 64]);
    let bad = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, 0xDEAD);
    let next = rdma_wr(2, WrOpcode::RdmaRead, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(
        p.a,
        p.qa,
        &[
            (bad, vec![sge(&p.ma, 0, 64)]),
            (next, vec![sge(&p.ma, 0, 64)]),
        ],
    )
    .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 2)),
        [
            (1, WcStatus::RemAccessErr.raw()),
            (2, WcStatus::WrFlushErr.raw())
        ]
    );
    let naks: Vec<Option<u8>> = p
        .log()
        .iter()
        .filter(|s| !s.from_a && s.opcode == ACKNOWLEDGE)
        .map(|s| s.syndrome)
        .collect();
    assert_eq!(naks, [Some(0x62)]);
    assert_eq!(p.h.port_counters(p.a).transport.rcvd_nak_remote_access, 1);
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqb, 1)),
        [(4, WcStatus::WrFlushErr.raw())]
    );
    assert_eq!(p.h.read(p.b, p.mb.addr, 64), vec![0; 64], "nothing written");
}

#[test]
fn duplicated_atomics_execute_once_and_duplicates_get_the_saved_result() {
    // Every request reaches B twice and B's first three answers are lost, so A retries as
    // well: each atomic still executes exactly once, and every duplicate is answered with
    // the value the original saw (IBTA Vol 1 §9.7.5.2.2, the responder's saved results).
    let mut answers = 0;
    let mut p = pair(move |s, _, _| {
        if s.from_a {
            return Fate::Duplicate(0);
        }
        answers += 1;
        if answers <= 3 {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let target = p.mb.addr + 0x100;
    p.h.write(p.b, target, &100u64.to_ne_bytes());
    let atomic = |id: u64, op: WrOpcode, compare_add: u64, swap: u64| {
        let mut wr = send_wr(id, op, SIGNALED);
        wr.set_atomic(AtomicWr {
            remote_addr: target,
            compare_add,
            swap,
            rkey: p.mb.rkey,
            reserved: 0,
        });
        wr
    };
    let wrs = [
        (
            atomic(1, WrOpcode::AtomicFetchAndAdd, 5, 0),
            vec![sge(&p.ma, 0, 8)],
        ),
        (
            atomic(2, WrOpcode::AtomicCmpAndSwp, 105, 7),
            vec![sge(&p.ma, 8, 8)],
        ),
        (
            atomic(3, WrOpcode::AtomicCmpAndSwp, 105, 9),
            vec![sge(&p.ma, 16, 8)],
        ),
    ];
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    let got = completions(&mut p.h, &mut p.cqa, 3);
    assert_eq!(
        statuses(&got),
        [
            (1, WcStatus::Success.raw()),
            (2, WcStatus::Success.raw()),
            (3, WcStatus::Success.raw())
        ]
    );
    let ops: Vec<u32> = got.iter().map(|w| w.opcode).collect();
    assert_eq!(
        ops,
        [
            WcOpcode::FetchAdd.raw(),
            WcOpcode::CompSwap.raw(),
            WcOpcode::CompSwap.raw()
        ]
    );
    let word =
        |h: &mut Host, d: DevId, at: u64| u64::from_ne_bytes(h.read(d, at, 8).try_into().unwrap());
    assert_eq!(
        word(&mut p.h, p.a, p.ma.addr),
        100,
        "FAA returned the original"
    );
    assert_eq!(
        word(&mut p.h, p.a, p.ma.addr + 8),
        105,
        "CAS saw the FAA's result"
    );
    assert_eq!(
        word(&mut p.h, p.a, p.ma.addr + 16),
        7,
        "the second CAS saw the swap"
    );
    assert_eq!(word(&mut p.h, p.b, target), 7, "each atomic executed once");
    assert!(p.h.port_counters(p.b).transport.duplicate_request >= 3);
    assert!(p.h.port_counters(p.a).transport.retransmissions >= 1);
}

/// A forged packet's bytes (BTH through pad; the wire adds the ICRC).
fn forge(pkt: &RocePacketRepr<'_>) -> Vec<u8> {
    let mut b = vec![0u8; pkt.buffer_len()];
    let n = pkt
        .emit(&mut b)
        .expect("a packet consistent with its opcode");
    b.truncate(n);
    b
}

/// An ACK (syndrome ACK, credits 31) to QP `dqpn` for `psn`.
fn ack(dqpn: u32, psn: u32) -> Vec<u8> {
    forge(&RocePacketRepr {
        aeth: Some(AethRepr {
            syndrome: Syndrome::ack(31),
            msn: Msn::new(1),
        }),
        ..RocePacketRepr::new(
            BthRepr::new(Opcode::RC_ACKNOWLEDGE, Qpn::new(dqpn), Psn::new(psn)),
            &[],
        )
    })
}

#[test]
fn ghost_acks_complete_nothing_and_are_counted() {
    // While A's three WRITE packets are on their way (held 300 µs), ACKs arrive for PSNs
    // A never sent — 50 ahead, and the first PSN not yet sent — and one half the PSN space
    // away, which reads as old: none completes anything; the real exchange then completes
    // the WRITE without a retransmission.
    let mut p = pair(|s, _, _| {
        if s.from_a {
            Fate::Delay(300_000)
        } else {
            Fate::Deliver
        }
    });
    let first = RcOpts::default().psn;
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 3000)])])
        .unwrap();
    p.h.run_until(20_000, |_| false);
    assert_eq!(p.sent_by_a(0x06).len(), 1, "the WRITE left");
    for psn in [first + 50, first + 3, (first + 0x80_0003) & 0xff_ffff] {
        p.h.inject(B, A, &ack(p.qa.qpn, psn));
    }
    p.h.run_until(50_000, |_| false);
    assert!(
        p.h.poll_cq(&mut p.cqa, 8).is_empty(),
        "a ghost ACK completes nothing"
    );
    let c = p.h.port_counters(p.a).transport;
    assert_eq!(c.ghost_responses, 2);
    assert_eq!(c.duplicate_responses, 1);
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(1, WcStatus::Success.raw())]
    );
    assert_eq!(p.h.port_counters(p.a).transport.retransmissions, 0);
}

#[test]
fn a_read_response_for_a_send_is_a_bad_response() {
    // B's ACK of A's first SEND is replaced by a READ RESPONSE ONLY at the same PSN: A
    // completes that SEND with BAD_RESP_ERR, flushes the next and its QP is in error.
    let mut p = pair(|s, before, _| {
        if !s.from_a && s.opcode == ACKNOWLEDGE && before == 0 {
            Fate::Replace(forge(&RocePacketRepr {
                aeth: Some(AethRepr {
                    syndrome: Syndrome::ack(31),
                    msn: Msn::new(1),
                }),
                ..RocePacketRepr::new(
                    BthRepr::new(
                        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
                        Qpn::new(s.dqpn),
                        Psn::new(s.psn),
                    ),
                    &[1, 2, 3, 4],
                )
            }))
        } else {
            Fate::Deliver
        }
    });
    p.h.post_recv(
        p.b,
        p.qb,
        &[(5, sge(&p.mb, 0, 64)), (6, sge(&p.mb, 64, 64))],
    )
    .unwrap();
    let one = send_wr(1, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(one, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(1, WcStatus::BadRespErr.raw())]
    );
    let two = send_wr(2, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(two, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(2, WcStatus::WrFlushErr.raw())]
    );
}

#[test]
fn a_middle_without_a_first_is_an_invalid_request() {
    // A's SEND FIRST is rewritten into a SEND MIDDLE on the way: B answers NAK invalid
    // request (syndrome 011_00001) at that PSN, moves to ERR and flushes its receive; A
    // completes the SEND with REM_INV_REQ_ERR.
    let mut p = pair(|s, _, bytes| {
        if s.from_a && s.opcode == 0x00 {
            let mut forged = bytes[..bytes.len() - 4].to_vec();
            forged[0] = 0x01;
            Fate::Replace(forged)
        } else {
            Fate::Deliver
        }
    });
    p.h.post_recv(p.b, p.qb, &[(4, sge(&p.mb, 0, 4096))])
        .unwrap();
    let wr = send_wr(1, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 3 * MTU as u32)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(1, WcStatus::RemInvReqErr.raw())]
    );
    let first = RcOpts::default().psn;
    let naks: Vec<(Option<u8>, u32)> = p
        .log()
        .iter()
        .filter(|s| !s.from_a && s.opcode == ACKNOWLEDGE)
        .map(|s| (s.syndrome, s.psn))
        .collect();
    assert_eq!(naks, [(Some(0x61), first)]);
    assert_eq!(p.h.port_counters(p.a).transport.rcvd_nak_invalid_request, 1);
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqb, 1)),
        [(4, WcStatus::WrFlushErr.raw())]
    );
}

#[test]
fn an_rnr_nak_on_a_write_with_immediate_leaves_nothing_half_done() {
    // Two WRITEs WITH IMMEDIATE (one packet, three packets) reach B before any receive is
    // posted: RNR NAK, and the retried messages are accepted whole once receives come.
    let mut p = pair(|_, _, _| Fate::Deliver);
    let data = pattern(6, 2500);
    p.h.write(p.a, p.ma.addr, &data);
    let wrs: Vec<_> = [(1u64, 64u32), (2, 2500)]
        .iter()
        .map(|&(id, len)| {
            let mut w = rdma_wr(
                id,
                WrOpcode::RdmaWriteWithImm,
                SIGNALED,
                p.mb.addr + 0x1000 * id,
                p.mb.rkey,
            );
            w.set_imm_data(id as u32);
            (w, vec![sge(&p.ma, 0, len)])
        })
        .collect();
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    let a = p.a;
    p.h.run_until(SECOND, |h| h.port_counters(a).transport.rcvd_rnr_err > 0);
    assert!(p.h.port_counters(p.a).transport.rcvd_rnr_err >= 1);
    assert!(p.h.poll_cq(&mut p.cqa, 8).is_empty());
    p.h.post_recv(p.b, p.qb, &[(7, sge(&p.mb, 0, 8)), (8, sge(&p.mb, 0, 8))])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 2)),
        [(1, WcStatus::Success.raw()), (2, WcStatus::Success.raw())]
    );
    let rc = completions(&mut p.h, &mut p.cqb, 2);
    assert_eq!(
        statuses(&rc),
        [(7, WcStatus::Success.raw()), (8, WcStatus::Success.raw())]
    );
    assert_eq!((rc[0].imm_data(), rc[0].byte_len), (1, 64));
    assert_eq!((rc[1].imm_data(), rc[1].byte_len), (2, 2500));
    assert_eq!(p.h.read(p.b, p.mb.addr + 0x1000, 64), data[..64]);
    assert_eq!(p.h.read(p.b, p.mb.addr + 0x2000, 2500), data);
}

#[test]
fn messages_are_cut_at_the_path_mtu_and_padded_to_four_bytes() {
    // Per path MTU (ibv_mtu code), a SEND of `len` bytes leaves as ceil(len / MTU) packets,
    // each full but the last, each padded to a multiple of 4 (BTH PadCnt), AckReq on the
    // last one only (IBTA Vol 1 §9.2, §9.7.5.1), and arrives intact.
    for (code, mtu, len) in [
        (Mtu::Mtu256, 256usize, 1001usize),
        (Mtu::Mtu4096, 4096, 10_000),
        (Mtu::Mtu512, 512, 512),
        (Mtu::Mtu2048, 2048, 2),
    ] {
        let opts = RcOpts {
            path_mtu: code,
            ..RcOpts::default()
        };
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen_sizes = sizes.clone();
        let mut p = pair_with(opts, move |s, _, b| {
            if s.from_a && s.opcode <= 0x04 {
                let pad = usize::from((b[1] >> 4) & 3);
                let ack_req = b[8] & 0x80 != 0;
                // BTH (12 bytes), payload, pad, ICRC (4).
                seen_sizes
                    .lock()
                    .unwrap()
                    .push((b.len() - 12 - pad - 4, pad, ack_req));
            }
            Fate::Deliver
        });
        let data = pattern(5, len);
        p.h.write(p.a, p.ma.addr, &data);
        p.h.post_recv(p.b, p.qb, &[(1, sge(&p.mb, 0, 0x8000))])
            .unwrap();
        let wr = send_wr(1, WrOpcode::Send, SIGNALED);
        p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, len as u32)])])
            .unwrap();
        assert_eq!(
            statuses(&completions(&mut p.h, &mut p.cqb, 1)),
            [(1, WcStatus::Success.raw())]
        );
        assert_eq!(p.h.read(p.b, p.mb.addr, len), data, "MTU {mtu}");
        let sizes = sizes.lock().unwrap().clone();
        let n = len.div_ceil(mtu);
        assert_eq!(sizes.len(), n, "MTU {mtu}: {sizes:?}");
        for (i, &(plen, pad, ack_req)) in sizes.iter().enumerate() {
            let want = if i + 1 < n { mtu } else { len - mtu * (n - 1) };
            assert_eq!(plen, want, "MTU {mtu} packet {i}");
            assert_eq!(pad, (4 - want % 4) % 4, "pad to 4 bytes");
            assert_eq!(ack_req, i + 1 == n, "AckReq on the last packet only");
        }
    }
}

#[test]
fn unsignaled_wrs_complete_silently_unless_they_fail() {
    // retry_cnt 0: an unsignaled WRITE leaves no completion when it succeeds, but one that
    // fails (everything lost) reports its error all the same (IBTA o10-2.2-x, rdma-core).
    let drop_all = Arc::new(Mutex::new(false));
    let dropping = drop_all.clone();
    let opts = RcOpts {
        retry_cnt: 0,
        ..RcOpts::default()
    };
    let mut p = pair_with(opts, move |_, _, _| {
        if *dropping.lock().unwrap() {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let quiet = rdma_wr(1, WrOpcode::RdmaWrite, 0, p.mb.addr, p.mb.rkey);
    let loud = rdma_wr(2, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(
        p.a,
        p.qa,
        &[
            (quiet, vec![sge(&p.ma, 0, 8)]),
            (loud, vec![sge(&p.ma, 0, 8)]),
        ],
    )
    .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(2, WcStatus::Success.raw())]
    );
    *drop_all.lock().unwrap() = true;
    let quiet = rdma_wr(3, WrOpcode::RdmaWrite, 0, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(quiet, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(3, WcStatus::RetryExcErr.raw())]
    );
}

#[test]
fn the_initiator_depth_bounds_outstanding_reads_and_a_fence_waits_for_them() {
    // max_rd_atomic 2, and B's answers held 200 µs on the wire: of four READs posted at
    // once only two requests leave before the first answer comes back. Then a SEND posted
    // with FENCE behind a READ leaves only after that READ's response has arrived.
    let opts = RcOpts {
        max_rd_atomic: 2,
        ..RcOpts::default()
    };
    let mut p = pair_with(opts, |s, _, _| {
        if s.from_a {
            Fate::Deliver
        } else {
            Fate::Delay(200_000)
        }
    });
    p.h.write(p.b, p.mb.addr, &pattern(8, 64));
    let reads: Vec<_> = (0..4u64)
        .map(|id| {
            let wr = rdma_wr(id, WrOpcode::RdmaRead, SIGNALED, p.mb.addr, p.mb.rkey);
            (wr, vec![sge(&p.ma, id * 64, 64)])
        })
        .collect();
    p.h.post_send(p.a, p.qa, &reads).unwrap();
    let got = completions(&mut p.h, &mut p.cqa, 4);
    assert_eq!(
        statuses(&got),
        (0..4)
            .map(|i| (i, WcStatus::Success.raw()))
            .collect::<Vec<_>>()
    );
    let log = p.log();
    let before_answer = log.iter().take_while(|s| s.from_a).count();
    assert_eq!(before_answer, 2, "initiator depth 2: {log:?}");
    for id in 0..4 {
        assert_eq!(p.h.read(p.a, p.ma.addr + id * 64, 64), pattern(8, 64));
    }

    p.h.post_recv(p.b, p.qb, &[(1, sge(&p.mb, 0x1000, 64))])
        .unwrap();
    let read = rdma_wr(10, WrOpcode::RdmaRead, SIGNALED, p.mb.addr, p.mb.rkey);
    let fenced = send_wr(11, WrOpcode::Send, SIGNALED | SendFlags::FENCE.0);
    let from = p.log().len();
    p.h.post_send(
        p.a,
        p.qa,
        &[
            (read, vec![sge(&p.ma, 0, 64)]),
            (fenced, vec![sge(&p.ma, 0, 8)]),
        ],
    )
    .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 2)),
        [(10, WcStatus::Success.raw()), (11, WcStatus::Success.raw())]
    );
    let log = p.log()[from..].to_vec();
    let response = log
        .iter()
        .position(|s| !s.from_a && s.opcode == 0x10)
        .expect("the READ's response");
    let send = log
        .iter()
        .position(|s| s.from_a && s.opcode == 0x04)
        .expect("the SEND");
    assert!(send > response, "the fenced SEND waited: {log:?}");
}

#[test]
fn acks_are_coalesced_and_packets_without_ackreq_are_acknowledged_later() {
    // Ten one-packet WRITEs (each with AckReq) arriving together draw one cumulative ACK
    // for the last PSN; a three-packet WRITE's first two packets (no AckReq) are
    // acknowledged with the last one (counted as deferred ACKs).
    let mut p = pair(|_, _, _| Fate::Deliver);
    let first = RcOpts::default().psn;
    let wrs: Vec<_> = (0..10u64)
        .map(|id| {
            let wr = rdma_wr(
                id,
                WrOpcode::RdmaWrite,
                SIGNALED,
                p.mb.addr + id * 8,
                p.mb.rkey,
            );
            (wr, vec![sge(&p.ma, 0, 8)])
        })
        .collect();
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    assert_eq!(completions(&mut p.h, &mut p.cqa, 10).len(), 10);
    let acks: Vec<u32> = p
        .log()
        .iter()
        .filter(|s| !s.from_a && s.opcode == ACKNOWLEDGE)
        .map(|s| s.psn)
        .collect();
    assert_eq!(acks, [first + 9], "ten AckReq packets, one cumulative ACK");
    let wr = rdma_wr(11, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 3000)])])
        .unwrap();
    assert_eq!(completions(&mut p.h, &mut p.cqa, 1).len(), 1);
    assert_eq!(p.h.port_counters(p.b).transport.ack_deferred, 2);
}

#[test]
fn modify_to_err_flushes_everything_once_and_reset_discards() {
    // Moved to ERR with two WRITEs (one unsignaled) and a receive outstanding: each is
    // flushed once, the unsignaled one too; work posted in ERR is flushed; ERR -> RTS is
    // refused; ERR -> RESET completes nothing.
    let mut p = pair(|_, _, _| Fate::Deliver);
    p.h.post_recv(p.a, p.qa, &[(5, sge(&p.ma, 0x1000, 64))])
        .unwrap();
    let one = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    let two = rdma_wr(2, WrOpcode::RdmaWrite, 0, p.mb.addr, p.mb.rkey);
    p.h.post_send(
        p.a,
        p.qa,
        &[(one, vec![sge(&p.ma, 0, 8)]), (two, vec![sge(&p.ma, 0, 8)])],
    )
    .unwrap();
    p.h.modify_state(p.a, p.qa, abi::QpState::Err.raw() as u8)
        .unwrap();
    let mut got = statuses(&completions(&mut p.h, &mut p.cqa, 3));
    got.sort_unstable();
    let flush = WcStatus::WrFlushErr.raw();
    assert_eq!(got, [(1, flush), (2, flush), (5, flush)]);
    let three = send_wr(3, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(three, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(3, flush)]
    );
    assert!(p
        .h
        .modify_state(p.a, p.qa, abi::QpState::Rts.raw() as u8)
        .is_err());
    p.h.modify_state(p.a, p.qa, abi::QpState::Reset.raw() as u8)
        .unwrap();
    assert!(
        completions(&mut p.h, &mut p.cqa, 0).is_empty(),
        "RESET completes nothing"
    );
}

/// perftest's QP timeout (4.096 µs × 2^14 ≈ 67 ms): long enough that the retransmission
/// timer's probes, at most a sixteenth of it, come well before it.
const PERFTEST_TIMEOUT: u8 = 14;

/// A pair with perftest's timeout and `retry_cnt`, losing A's packets whose PSN is in
/// `lose` the first time each is sent (all of A's packets with `lose_all`).
fn lossy_pair(retry_cnt: u8, lose: &'static [u32], lose_all: Arc<Mutex<bool>>) -> Pair {
    let opts = RcOpts {
        timeout: PERFTEST_TIMEOUT,
        retry_cnt,
        ..RcOpts::default()
    };
    let mut lost = Vec::new();
    pair_with(opts, move |s, _, _| {
        if s.from_a
            && (*lose_all.lock().unwrap() || lose.contains(&s.psn) && !lost.contains(&s.psn))
        {
            lost.push(s.psn);
            Fate::Drop
        } else {
            Fate::Deliver
        }
    })
}

/// Post a WRITE of `len` bytes from A to B and wait for its completion.
fn write(p: &mut Pair, id: u64, len: usize) -> Wc {
    let data = pattern(id, len);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(id, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, len as u32)])])
        .unwrap();
    let mut got = Vec::new();
    p.h.run_until(10 * SECOND, |h| {
        got.extend(h.poll_cq(&mut p.cqa, 8));
        !got.is_empty()
    });
    assert_eq!(got.len(), 1);
    if got[0].status == WcStatus::Success.raw() {
        assert_eq!(p.h.read(p.b, p.mb.addr, len), data);
    }
    got[0]
}

#[test]
fn no_probe_on_a_path_that_never_lost_anything() {
    // B's first ACK is lost on a path that never lost anything before: the retransmission
    // timer is off, so only the local ACK timer (67 ms) resends.
    let opts = RcOpts {
        timeout: PERFTEST_TIMEOUT,
        ..RcOpts::default()
    };
    let mut p = pair_with(opts, drop_first(false, ACKNOWLEDGE));
    let t0 = p.h.now();
    assert_eq!(write(&mut p, 1, 4 * MTU).status, WcStatus::Success.raw());
    let c = p.h.port_counters(p.a).transport;
    assert_eq!((c.rto_probes, c.local_ack_timeouts), (0, 1));
    assert!(p.h.now() - t0 >= 67_000_000, "{} ns", p.h.now() - t0);
}

#[test]
fn a_lost_tail_is_probed_long_before_the_local_ack_timeout() {
    // A first WRITE loses its first packet (a sequence NAK repairs it: the path has now
    // lost something). The next WRITE's last packet, the only one asking for an ACK, is
    // lost once: nothing makes B NAK, and the retransmission timer recovers it in a few ms
    // instead of the 67 ms local ACK timeout, without using a retry. Each probe resends
    // one packet, the oldest unacknowledged: B acknowledges packets without AckReq only
    // every few, so that may be one B has (its duplicate draws the ACK that leaves the
    // lost one oldest) — at most two probes, never the whole message again.
    let first = RcOpts::default().psn;
    static LOSE: [u32; 2] = [0x100, 0x100 + 2 + 7];
    assert_eq!(first, LOSE[0]);
    let mut p = lossy_pair(7, &LOSE, Arc::new(Mutex::new(false)));
    assert_eq!(write(&mut p, 1, 2 * MTU).status, WcStatus::Success.raw());
    let warm = p.h.port_counters(p.a).transport;
    assert_eq!((warm.rcvd_seq_err, warm.rto_probes), (1, 0));
    let t0 = p.h.now();
    assert_eq!(write(&mut p, 2, 8 * MTU).status, WcStatus::Success.raw());
    let took = p.h.now() - t0;
    let c = p.h.port_counters(p.a).transport;
    assert!((1..=2).contains(&c.rto_probes), "{} probes", c.rto_probes);
    assert_eq!(c.local_ack_timeouts, 0);
    assert_eq!(c.retransmissions - warm.retransmissions, c.rto_probes);
    let resent: Vec<u32> = p.sent_by_a(WRITE_MIDDLE)[6..].to_vec();
    assert!(resent.len() < 2, "{resent:?}");
    assert!(took < 67_000_000 / 2, "recovered after {took} ns");
}

#[test]
fn probes_use_no_retries_the_local_ack_timeout_does() {
    // retry_cnt 1 (IBTA semantics, not rxe's "7 is forever"): after a loss armed the
    // retransmission timer, a dead path still ends in RETRY_EXC_ERR only after the second
    // local ACK timeout, however many probes went out in between.
    static LOSE: [u32; 1] = [0x100];
    let dead = Arc::new(Mutex::new(false));
    let mut p = lossy_pair(1, &LOSE, dead.clone());
    assert_eq!(write(&mut p, 1, 2 * MTU).status, WcStatus::Success.raw());
    *dead.lock().unwrap() = true;
    let t0 = p.h.now();
    assert_eq!(
        write(&mut p, 2, 2 * MTU).status,
        WcStatus::RetryExcErr.raw()
    );
    let c = p.h.port_counters(p.a).transport;
    assert_eq!(c.local_ack_timeouts, 2);
    assert!(c.rto_probes >= 2, "{} probes", c.rto_probes);
    assert!(p.h.now() - t0 >= 2 * 67_000_000);
}

#[test]
fn a_bad_lkey_fails_locally_and_a_short_receive_is_an_invalid_request() {
    // A SEND gathering through an lkey nobody registered: LOC_PROT_ERR, nothing sent, the
    // WR behind it flushed.
    let mut p = pair(|_, _, _| Fate::Deliver);
    let mut bad = sge(&p.ma, 0, 8);
    bad.lkey = 99;
    let one = send_wr(1, WrOpcode::Send, SIGNALED);
    let two = send_wr(2, WrOpcode::Send, SIGNALED);
    p.h.post_send(
        p.a,
        p.qa,
        &[(one, vec![bad]), (two, vec![sge(&p.ma, 0, 8)])],
    )
    .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 2)),
        [
            (1, WcStatus::LocProtErr.raw()),
            (2, WcStatus::WrFlushErr.raw())
        ]
    );
    assert!(p.log().iter().all(|s| !s.from_a), "nothing sent");

    // A 200-byte SEND into a 100-byte receive: LOC_LEN_ERR at B, invalid request NAK,
    // REM_INV_REQ_ERR at A.
    let mut p = pair(|_, _, _| Fate::Deliver);
    p.h.post_recv(p.b, p.qb, &[(1, sge(&p.mb, 0, 100))])
        .unwrap();
    let long = send_wr(1, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(long, vec![sge(&p.ma, 0, 200)])])
        .unwrap();
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(1, WcStatus::RemInvReqErr.raw())]
    );
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqb, 1)),
        [(1, WcStatus::LocLenErr.raw())]
    );
}

/// A fate that numbers A's datagrams as a kernel's per-destination IPv4 Identification
/// counter would (Linux rxe, `__ip_select_ident` in net/ipv4/route.c): consecutive values
/// with DF from `next`, which the test may move to model the counter's jump after an idle
/// spell.
fn counted_by_a(next: Arc<Mutex<u16>>) -> impl FnMut(&Seen, usize, &[u8]) -> Fate + Send {
    move |s, _, _| {
        if !s.from_a {
            return Fate::Deliver;
        }
        let mut n = next.lock().unwrap();
        let ident = *n;
        *n = n.wrapping_add(1);
        Fate::Numbered {
            ident,
            dont_frag: true,
        }
    }
}

#[test]
fn a_counting_senders_identification_may_run_through_zero_and_jump_after_idling() {
    // A's packets carry counting Identifications, as rxe's do: B's socket hides them, so B
    // solves for each (docs/wire.md §3.4a). The counter runs through 0 — which verifies
    // on B's fast path, as a uroce peer's packets do — and no packet may be refused.
    // Not loopback addresses: B would believe small Identifications from a loopback
    // sender anyway (a GSO send's numbering). The devices are virtual; nothing leaves the
    // process.
    let next = Arc::new(Mutex::new(65_532u16));
    let lan = [Ipv4Addr::new(10, 98, 0, 1), Ipv4Addr::new(10, 98, 0, 2)];
    let mut p = pair_on(lan, RcOpts::default(), counted_by_a(next.clone()));
    let write = |p: &mut Pair, seed: u64| {
        let data = pattern(seed, 8 * MTU);
        p.h.write(p.a, p.ma.addr, &data);
        let wr = rdma_wr(seed, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
        let got = p.post_one(wr, data.len());
        assert_eq!(statuses(&got), [(seed, WcStatus::Success.raw())]);
        assert_eq!(p.h.read(p.b, p.mb.addr, data.len()), data);
    };
    write(&mut p, 1);
    assert_eq!(*next.lock().unwrap(), 4, "A's eight packets ran through 0");
    assert_eq!(p.h.port_counters(p.b).engine.rcvd_icrc_err, 0);
    assert_eq!(p.h.port_counters(p.a).transport.retransmissions, 0);

    // A second of idling: the kernel may advance the counter by up to a thousand jiffies
    // more than the back-to-back window.
    let idle_until = p.h.now() + SECOND;
    p.h.alarm = Some(idle_until);
    p.h.run_until(2 * SECOND, |h| h.now() >= idle_until);
    *next.lock().unwrap() += 2_048 + 900;
    write(&mut p, 2);
    assert_eq!(p.h.port_counters(p.b).engine.rcvd_icrc_err, 0);
    assert_eq!(p.h.port_counters(p.a).transport.retransmissions, 0);

    // A jump past what the idle time allows is still refused: one packet counted as an
    // ICRC error (the next one corroborates the new numbering), resent, the data intact.
    *next.lock().unwrap() += 20_000;
    write(&mut p, 3);
    assert_eq!(p.h.port_counters(p.b).engine.rcvd_icrc_err, 1);
    assert!(p.h.port_counters(p.a).transport.retransmissions >= 1);
}

/// The longest run of consecutive datagrams A sent in `log` after position `from`.
fn longest_burst_from_a(log: &[Seen], from: usize) -> usize {
    let (mut best, mut run) = (0, 0);
    for s in &log[from..] {
        run = if s.from_a { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[test]
fn a_late_ack_after_a_timeout_shows_it_spurious_and_gives_the_window_back() {
    // Every packet of a 32-packet WRITE arrives, but B's acknowledgements are held back
    // past A's local ACK timeout (a stalled peer): A times out and goes back with a window
    // of one packet. The late ACK covers PSNs the go-back has not resent, so the timeout
    // was spurious (RFC 4015's idea): counted, and the window it cut is restored — a
    // 64-packet WRITE then leaves in one burst, not in slow start.
    let hold = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let h2 = hold.clone();
    let mut p = pair(move |s, _, _| {
        if !s.from_a && h2.load(std::sync::atomic::Ordering::Relaxed) {
            // Past the first local ACK timeout (4.096 µs × 2^8 ≈ 1.05 ms), before the
            // second.
            Fate::Delay(1_500_000)
        } else {
            Fate::Deliver
        }
    });
    let first = pattern(6, 32 * MTU);
    p.h.write(p.a, p.ma.addr, &first);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    assert_eq!(
        statuses(&p.post_one(wr, first.len())),
        [(1, WcStatus::Success.raw())]
    );
    let ca = p.h.port_counters(p.a).transport;
    assert_eq!((ca.local_ack_timeouts, ca.spurious_timeouts), (1, 1));
    assert_eq!(ca.retransmissions, 1, "only the go-back's first packet");
    hold.store(false, std::sync::atomic::Ordering::Relaxed);
    let mark = p.log().len();
    let second = pattern(7, 64 * MTU);
    p.h.write(p.a, p.ma.addr, &second);
    let wr = rdma_wr(2, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    assert_eq!(
        statuses(&p.post_one(wr, second.len())),
        [(2, WcStatus::Success.raw())]
    );
    assert_eq!(p.h.read(p.b, p.mb.addr, second.len()), second);
    assert_eq!(
        longest_burst_from_a(&p.log(), mark),
        64,
        "the whole window at once"
    );
    assert_eq!(p.h.port_counters(p.a).transport.retransmissions, 1);
}

#[test]
fn a_real_tail_loss_keeps_the_window_cut() {
    // The whole 32-packet WRITE is lost: A times out and resends its first packet alone;
    // the ACK for it covers nothing else, so the timeout was real — not counted spurious —
    // and A goes on in slow start (two packets, then four, ...), never the whole window.
    let mut sent_by_a = 0;
    let mut p = pair(move |s, _, _| {
        if s.from_a {
            sent_by_a += 1;
            if sent_by_a <= 32 {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    let data = pattern(8, 32 * MTU);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    assert_eq!(
        statuses(&p.post_one(wr, data.len())),
        [(1, WcStatus::Success.raw())]
    );
    assert_eq!(p.h.read(p.b, p.mb.addr, data.len()), data);
    let ca = p.h.port_counters(p.a).transport;
    assert_eq!((ca.local_ack_timeouts, ca.spurious_timeouts), (1, 0));
    // After the 32 lost originals: the resend of the first alone, then bursts that grow.
    let log = p.log();
    let resends = &log[32..];
    assert!(
        resends[0].from_a && !resends[1].from_a,
        "one packet, then its ACK"
    );
    let burst = longest_burst_from_a(&log, 33);
    assert!(
        (2..32).contains(&burst),
        "slow start, not the whole window: {burst}"
    );
}

#[test]
fn retry_cnt_7_retries_for_as_long_as_the_peer_is_gone_as_rxe_does() {
    // B vanishes (nothing of A's arrives) for far longer than 7 local ACK timeouts; A
    // keeps retrying (retry_cnt 7 is treated as unlimited, as rxe does: docs/wire.md
    // §5.2), and when B comes back the WRITE completes, intact.
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let g2 = gone.clone();
    let mut p = pair(move |s, _, _| {
        if s.from_a && g2.load(std::sync::atomic::Ordering::Relaxed) {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let data = pattern(9, 4 * MTU);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, data.len() as u32)])])
        .unwrap();
    // 4.096 µs × 2^8 ≈ 1 ms per timeout: two virtual seconds are hundreds of them.
    let got = completions(&mut p.h, &mut p.cqa, 1);
    p.h.alarm = Some(p.h.now() + SECOND);
    let until = p.h.now() + SECOND;
    p.h.run_until(2 * SECOND, |h| h.now() >= until);
    assert!(got.is_empty() && p.h.poll_cq(&mut p.cqa, 8).is_empty());
    let ca = p.h.port_counters(p.a).transport;
    assert!(
        ca.local_ack_timeouts > 8,
        "{} timeouts",
        ca.local_ack_timeouts
    );
    assert_eq!(ca.retry_exceeded_err, 0);
    gone.store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        statuses(&completions(&mut p.h, &mut p.cqa, 1)),
        [(1, WcStatus::Success.raw())]
    );
    assert_eq!(p.h.read(p.b, p.mb.addr, data.len()), data);
}

#[test]
fn a_peer_that_advertises_credits_holds_back_new_sends_until_a_probe() {
    // A uroce responder, as rxe, puts "no credit information" (code 31) in its ACKs; a
    // peer that advertises end-to-end credits (IBTA Vol 1 §9.7.7.2) bounds the SENDs A
    // may start. B's ACKs are rewritten as such a peer's would be: two credits after the
    // first SEND (three receives posted, one used), none after the next two. A sends only
    // the two SENDs the credits cover; with nothing left outstanding it probes with the
    // next one, which B (out of receives) answers with an RNR NAK, and the fifth waits.
    // Once B posts receives and its ACKs stop limiting, everything completes once, in order.
    let credits = Arc::new(Mutex::new(vec![2u8, 0]));
    let c = credits.clone();
    let mut p = pair(move |s, _, bytes| {
        if s.from_a || s.syndrome != Some(Syndrome::ACK_UNLIMITED.0) {
            return Fate::Deliver;
        }
        let mut left = c.lock().unwrap();
        if left.is_empty() {
            return Fate::Deliver;
        }
        let code = left.remove(0);
        let mut forged = bytes[..bytes.len() - 4].to_vec();
        forged[12] = Syndrome::ack(code).0;
        Fate::Replace(forged)
    });
    let recvs: Vec<_> = (10..13)
        .map(|i| (i, sge(&p.mb, 0x100 * i, 0x100)))
        .collect();
    p.h.post_recv(p.b, p.qb, &recvs).unwrap();
    let got = p.post_one(send_wr(1, WrOpcode::Send, SIGNALED), 8);
    assert_eq!(statuses(&got), [(1, WcStatus::Success.raw())]);
    let wrs: Vec<_> = (2..=5)
        .map(|id| {
            (
                send_wr(id, WrOpcode::Send, SIGNALED),
                vec![sge(&p.ma, 0, 8)],
            )
        })
        .collect();
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    let a = p.a;
    p.h.run_until(SECOND, |h| h.port_counters(a).transport.rcvd_rnr_err > 0);
    assert!(
        credits.lock().unwrap().is_empty(),
        "both ACKs were rewritten"
    );
    let log = p.log();
    let rnr = log
        .iter()
        .position(|s| !s.from_a && s.syndrome.is_some_and(|y| y >> 5 == 1))
        .expect("an RNR NAK");
    let sends: Vec<u32> = log[..rnr]
        .iter()
        .filter(|s| s.from_a && s.opcode == SEND_ONLY)
        .map(|s| s.psn)
        .collect();
    let first = sends[0];
    assert_eq!(
        sends,
        [first, first + 1, first + 2, first + 3],
        "the first SEND, two within the credits, then one probe"
    );
    assert_eq!(log[rnr].psn, first + 3, "the probe is RNR-NAKed");
    let more: Vec<_> = (13..16)
        .map(|i| (i, sge(&p.mb, 0x100 * i, 0x100)))
        .collect();
    p.h.post_recv(p.b, p.qb, &more).unwrap();
    let done = completions(&mut p.h, &mut p.cqa, 4);
    assert_eq!(
        statuses(&done),
        (2..=5)
            .map(|id| (id, WcStatus::Success.raw()))
            .collect::<Vec<_>>()
    );
    let rcvd = completions(&mut p.h, &mut p.cqb, 5);
    assert_eq!(
        rcvd.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [10, 11, 12, 13, 14],
        "one receive per SEND, in order"
    );
    assert!(rcvd.iter().all(|w| w.status == WcStatus::Success.raw()));
}
