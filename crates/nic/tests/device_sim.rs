//! Device-level cases on real device datapaths driven by `nic::simhost` (virtual time, a
//! seeded lossy wire, no thread or socket): the rings, doorbells, MR table and DMA checks,
//! CQs and timers of `crates/nic`, under conditions a loopback run rarely produces.

use std::net::Ipv4Addr;

use abi::uverbs::Wc;
use abi::{Mtu, SendFlags, WcStatus, WrOpcode};
use nic::simhost::workload::{self, pattern, RunConfig};
use nic::simhost::{
    all_access, rdma_wr, send_wr, sge, Cq, DevId, Host, Mr, Qp, RcOpts, CQ_USER_HANDLE,
    QP_USER_HANDLE,
};
use nic::Limits;

const A: Ipv4Addr = Ipv4Addr::new(127, 99, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(127, 99, 0, 2);
/// One second of virtual time.
const SECOND: u64 = 1_000_000_000;
const SIGNALED: u32 = SendFlags::SIGNALED.0;

/// Two devices with an RC QP each, connected to each other, every QP on its own CQ of
/// `cq_depth`, and an MR of `mr_len` bytes on each side.
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

fn pair(seed: u64, loss: f64, depth: u32, cq_depth: u32, mr_len: u64) -> Pair {
    pair_with(seed, loss, depth, cq_depth, mr_len, RcOpts::default())
}

/// [`pair`] with A's QP connected with `opts`, B's with the defaults and `opts.psn`.
fn pair_with(seed: u64, loss: f64, depth: u32, cq_depth: u32, mr_len: u64, opts: RcOpts) -> Pair {
    let mut h = Host::new(seed);
    h.loss = loss;
    let a = h.add_device(A, Limits::default()).unwrap();
    let b = h.add_device(B, Limits::default()).unwrap();
    let cqa = h.create_cq(a, cq_depth).unwrap();
    let cqb = h.create_cq(b, cq_depth).unwrap();
    let qa = h.create_rc_qp(a, &cqa, &cqa, depth).unwrap();
    let qb = h.create_rc_qp(b, &cqb, &cqb, depth).unwrap();
    // By default ACK timeout 4.096 µs × 2^8 ≈ 1 ms, 7 retries: loss is recovered, not fatal.
    h.connect_rc_with(a, qa, b, qb.qpn, opts).unwrap();
    let b_opts = RcOpts {
        psn: opts.psn,
        ..RcOpts::default()
    };
    h.connect_rc_with(b, qb, a, qa.qpn, b_opts).unwrap();
    let ma = h.reg_mr(a, mr_len, all_access()).unwrap();
    let mb = h.reg_mr(b, mr_len, all_access()).unwrap();
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

/// Poll `cq` until `n` completions have come (or `limit` virtual ns pass).
fn wait_for(h: &mut Host, cq: &mut Cq, n: usize, limit: u64) -> Vec<Wc> {
    let mut got = Vec::new();
    h.run_until(limit, |h| {
        got.extend(h.poll_cq(cq, 64));
        got.len() >= n
    });
    got
}

#[test]
fn rc_writes_and_sends_arrive_intact_across_a_lossy_wire() {
    let mut p = pair(7, 0.1, 64, 256, 1 << 20);
    const LEN: usize = 4096;
    const N: u64 = 100;
    // B receives the N / 2 sends into the second half of its MR.
    let recvs: Vec<_> = (0..N / 2)
        .map(|i| (1000 + i, sge(&p.mb, (1 << 19) + i * LEN as u64, LEN as u32)))
        .collect();
    for chunk in recvs.chunks(32) {
        p.h.post_recv(p.b, p.qb, chunk).unwrap();
    }
    let mut done_a = Vec::new();
    let mut done_b = Vec::new();
    for i in 0..N {
        let data = pattern(i, LEN);
        let src = (i % 64) * LEN as u64;
        p.h.write(p.a, p.ma.addr + src, &data);
        let (op, wr) = if i % 2 == 0 {
            let dst = p.mb.addr + i * LEN as u64;
            (
                "write",
                rdma_wr(i, WrOpcode::RdmaWrite, SIGNALED, dst, p.mb.rkey),
            )
        } else {
            ("send", send_wr(i, WrOpcode::Send, SIGNALED))
        };
        p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, src, LEN as u32)])])
            .unwrap_or_else(|e| panic!("{op} {i}: {e:?}"));
        // Keep at most 32 outstanding (the source buffers are reused after 64).
        let want = (i + 1).saturating_sub(32) as usize;
        while done_a.len() < want {
            let more = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
            assert!(!more.is_empty(), "no completion for WR {}", done_a.len());
            done_a.extend(more);
        }
        done_b.extend(p.h.poll_cq(&mut p.cqb, 64));
    }
    while done_a.len() < N as usize {
        let more = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
        assert!(!more.is_empty(), "no completion for WR {}", done_a.len());
        done_a.extend(more);
    }
    while done_b.len() < (N / 2) as usize {
        let more = wait_for(&mut p.h, &mut p.cqb, 1, SECOND);
        assert!(!more.is_empty(), "B: {} receives completed", done_b.len());
        done_b.extend(more);
    }
    // Completions in order, all successful.
    let ids: Vec<u64> = done_a.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..N).collect::<Vec<_>>());
    assert!(done_a.iter().all(|w| w.status == WcStatus::Success.raw()));
    assert!(done_b.iter().all(|w| w.status == WcStatus::Success.raw()));
    let recv_ids: Vec<u64> = done_b.iter().map(|w| w.wr_id).collect();
    assert_eq!(recv_ids, (1000..1000 + N / 2).collect::<Vec<_>>());
    // The bytes: each WRITE at its place, each SEND in the receive it consumed.
    for i in (0..N).step_by(2) {
        let dst = i * LEN as u64;
        assert_eq!(
            p.h.read(p.b, p.mb.addr + dst, LEN),
            pattern(i, LEN),
            "WRITE {i}"
        );
    }
    for (k, i) in (1..N).step_by(2).enumerate() {
        let at = (1 << 19) + k as u64 * LEN as u64;
        assert_eq!(
            p.h.read(p.b, p.mb.addr + at, LEN),
            pattern(i, LEN),
            "SEND {i}"
        );
        assert_eq!(done_b[k].byte_len, LEN as u32);
    }
    // The wire really lost packets, and the transport really recovered them.
    assert!(p.h.lost > 10, "lost {}", p.h.lost);
    let t = p.h.port_counters(p.a).transport;
    assert!(t.retransmissions > 0, "{t:?}");
    assert_eq!(p.h.port_counters(p.a).engine.engine_panics, 0);
}

#[test]
fn the_send_queue_wraps_around_many_times() {
    // A 16-deep SQ and 1,000 WRITEs: every slot is reused ~60 times.
    let mut p = pair(1, 0.0, 16, 64, 1 << 16);
    let mut done = Vec::new();
    let mut posted = 0u64;
    while posted < 1000 {
        let room = 16 - (posted - done.len() as u64);
        let batch: Vec<_> = (posted..(posted + room).min(1000))
            .map(|i| {
                let wr = rdma_wr(
                    i,
                    WrOpcode::RdmaWrite,
                    SIGNALED,
                    p.mb.addr + (i % 16) * 8,
                    p.mb.rkey,
                );
                p.h.write(p.a, p.ma.addr + (i % 16) * 8, &i.to_le_bytes());
                (wr, vec![sge(&p.ma, (i % 16) * 8, 8)])
            })
            .collect();
        posted += batch.len() as u64;
        if !batch.is_empty() {
            p.h.post_send(p.a, p.qa, &batch).unwrap();
        }
        let more = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
        assert!(!more.is_empty(), "stuck after {} completions", done.len());
        done.extend(more);
    }
    while done.len() < 1000 {
        let more = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
        assert!(!more.is_empty(), "stuck after {} completions", done.len());
        done.extend(more);
    }
    let ids: Vec<u64> = done.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..1000).collect::<Vec<_>>());
    assert!(done.iter().all(|w| w.status == WcStatus::Success.raw()));
    for k in 0..16u64 {
        let last = 1000 - 16 + k;
        let slot = last % 16;
        assert_eq!(p.h.read(p.b, p.mb.addr + slot * 8, 8), last.to_le_bytes());
    }
    // Posting beyond the SQ's depth is refused, not queued or overwritten.
    let over: Vec<_> = (0..17)
        .map(|i| {
            (
                rdma_wr(i, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey),
                vec![sge(&p.ma, 0, 8)],
            )
        })
        .collect();
    assert!(p.h.post_send(p.a, p.qa, &over).is_err());
}

#[test]
fn a_cq_that_overflows_reports_cq_err_and_qp_fatal_and_keeps_its_earlier_completions() {
    // A CQ of 4 CQEs never polled while 8 signaled WRITEs complete.
    let mut p = pair(2, 0.0, 16, 4, 1 << 16);
    let cap = p.cqa.capacity();
    let wrs: Vec<_> = (0..8u64)
        .map(|i| {
            (
                rdma_wr(i, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey),
                vec![sge(&p.ma, 0, 64)],
            )
        })
        .collect();
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    p.h.run_until(SECOND, |h| h.port_counters(0).engine.cq_overflow > 0);
    p.h.run_until(10_000_000, |_| false);
    let c = p.h.port_counters(p.a).engine;
    assert!(c.cq_overflow > 0, "{c:?}");
    assert_eq!(
        p.h.cq_errors(p.a, &p.cqa),
        1,
        "one CQ_ERR per overflow episode"
    );
    // What the ring holds are the first completions, intact and in order.
    let got = p.h.poll_cq(&mut p.cqa, 64);
    assert_eq!(got.len(), cap as usize);
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..u64::from(cap)).collect::<Vec<_>>());
    assert!(got.iter().all(|w| w.status == WcStatus::Success.raw()));
    assert_eq!(p.h.port_counters(p.a).engine.engine_panics, 0);
    // The library hears IBV_EVENT_CQ_ERR for the CQ and IBV_EVENT_QP_FATAL for the QP whose
    // completion was lost (its user handles), and the QP is in ERR: new work flushes.
    assert_eq!(
        p.h.async_events(p.a),
        [
            (nic::event::CQ_ERR, CQ_USER_HANDLE),
            (nic::event::QP_FATAL, QP_USER_HANDLE)
        ]
    );
    let wr = rdma_wr(50, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 64)])])
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(statuses(&got), [(50, WcStatus::WrFlushErr.raw())]);
}

#[test]
fn a_write_to_a_deregistered_mr_completes_with_remote_access_error() {
    let mut p = pair(3, 0.0, 16, 64, 1 << 16);
    let mb = p.mb;
    p.h.dereg_mr(p.b, &mb).unwrap();
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, mb.addr, mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 1024)])])
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::RemAccessErr.raw(), "{:?}", got[0]);
    assert!(p.h.port_counters(p.a).transport.rcvd_nak_remote_access > 0);
    // B's memory was not written.
    assert_eq!(p.h.read(p.b, mb.addr, 1024), vec![0; 1024]);
}

#[test]
fn a_qp_destroyed_with_work_outstanding_leaves_nothing_behind() {
    let mut p = pair(4, 0.2, 64, 256, 1 << 20);
    let wrs: Vec<_> = (0..32u64)
        .map(|i| {
            (
                rdma_wr(i, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey),
                vec![sge(&p.ma, 0, 16384)],
            )
        })
        .collect();
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    // Some of it on the wire, none of it finished.
    p.h.run_until(SECOND, |h| h.port_counters(0).transport.sent_pkts > 20);
    let qa = p.qa;
    p.h.destroy_qp(p.a, qa).unwrap();
    // The wire drains; late ACKs find no QP; the device stays sound.
    p.h.run_until(SECOND, |_| false);
    assert!(
        p.h.objects(p.a).iter().all(|o| !o.ends_with(" qps")),
        "{:?}",
        p.h.objects(p.a)
    );
    assert_eq!(p.h.port_counters(p.a).engine.engine_panics, 0);
    assert_eq!(p.h.port_counters(p.b).engine.engine_panics, 0);
    // A new QP on the same device works.
    let q2 = p.h.create_rc_qp(p.a, &p.cqa, &p.cqa, 16).unwrap();
    let qb = p.qb;
    let _ = p.h.poll_cq(&mut p.cqa, 256);
    p.h.command(
        p.b,
        &abi::Request::DestroyQp(abi::uverbs::DestroyQp {
            qp_handle: qb.handle,
            ..Default::default()
        }),
    )
    .unwrap();
    let qb2 = p.h.create_rc_qp(p.b, &p.cqb, &p.cqb, 16).unwrap();
    p.h.connect_rc(p.a, q2, p.b, qb2.qpn, 8, 7).unwrap();
    p.h.connect_rc(p.b, qb2, p.a, q2.qpn, 8, 7).unwrap();
    p.h.loss = 0.0;
    p.h.write(p.a, p.ma.addr, b"after");
    let wr = rdma_wr(99, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, q2, &[(wr, vec![sge(&p.ma, 0, 5)])])
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(
        got.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(99, 0)]
    );
    assert_eq!(p.h.read(p.b, p.mb.addr, 5), b"after");
}

#[test]
fn a_slow_poller_loses_nothing() {
    // 16 WRITEs complete while the application does not poll for a whole (virtual) second.
    let mut p = pair(5, 0.05, 16, 16, 1 << 16);
    let wrs: Vec<_> = (0..16u64)
        .map(|i| {
            p.h.write(p.a, p.ma.addr + i * 256, &pattern(i, 256));
            (
                rdma_wr(
                    i,
                    WrOpcode::RdmaWrite,
                    SIGNALED,
                    p.mb.addr + i * 256,
                    p.mb.rkey,
                ),
                vec![sge(&p.ma, i * 256, 256)],
            )
        })
        .collect();
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    p.h.run_until(SECOND, |_| false);
    let got = p.h.poll_cq(&mut p.cqa, 64);
    assert_eq!(
        got.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..16).collect::<Vec<_>>()
    );
    assert!(got.iter().all(|w| w.status == WcStatus::Success.raw()));
    for i in 0..16u64 {
        assert_eq!(p.h.read(p.b, p.mb.addr + i * 256, 256), pattern(i, 256));
    }
}

#[test]
fn many_qps_on_one_device_all_complete() {
    // 64 RC QP pairs between two devices, each moving 8 KiB at once, on a lossy wire.
    let mut h = Host::new(6);
    h.loss = 0.02;
    let a = h.add_device(A, Limits::default()).unwrap();
    let b = h.add_device(B, Limits::default()).unwrap();
    let mut cqa = h.create_cq(a, 256).unwrap();
    let cqb = h.create_cq(b, 256).unwrap();
    let ma = h.reg_mr(a, 64 * 8192, all_access()).unwrap();
    let mb = h.reg_mr(b, 64 * 8192, all_access()).unwrap();
    let mut qps = Vec::new();
    for _ in 0..64 {
        let qa = h.create_rc_qp(a, &cqa, &cqa, 4).unwrap();
        let qb = h.create_rc_qp(b, &cqb, &cqb, 4).unwrap();
        h.connect_rc(a, qa, b, qb.qpn, 8, 7).unwrap();
        h.connect_rc(b, qb, a, qa.qpn, 8, 7).unwrap();
        qps.push(qa);
    }
    for (i, qa) in qps.iter().enumerate() {
        let off = i as u64 * 8192;
        h.write(a, ma.addr + off, &pattern(i as u64, 8192));
        let wr = rdma_wr(
            i as u64,
            WrOpcode::RdmaWrite,
            SIGNALED,
            mb.addr + off,
            mb.rkey,
        );
        h.post_send(a, *qa, &[(wr, vec![sge(&ma, off, 8192)])])
            .unwrap();
    }
    let got = wait_for(&mut h, &mut cqa, 64, 10 * SECOND);
    assert_eq!(got.len(), 64);
    assert!(
        got.iter().all(|w| w.status == WcStatus::Success.raw()),
        "{got:?}"
    );
    let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..64).collect::<Vec<_>>());
    for i in 0..64u64 {
        assert_eq!(
            h.read(b, mb.addr + i * 8192, 8192),
            pattern(i, 8192),
            "QP {i}"
        );
    }
}

#[test]
fn an_srq_below_its_limit_raises_the_limit_event_once() {
    // Two QPs of B share one SRQ of 32 WQEs armed at 8; A sends 30 messages over both QPs.
    let mut h = Host::new(8);
    h.loss = 0.05;
    let a = h.add_device(A, Limits::default()).unwrap();
    let b = h.add_device(B, Limits::default()).unwrap();
    let mut cqa = h.create_cq(a, 64).unwrap();
    let mut cqb = h.create_cq(b, 64).unwrap();
    let srq = h.create_srq(b, 32, 0, 0x5151).unwrap();
    let ma = h.reg_mr(a, 1 << 16, all_access()).unwrap();
    let mb = h.reg_mr(b, 1 << 16, all_access()).unwrap();
    let mut qas = Vec::new();
    for _ in 0..2 {
        let qa = h.create_rc_qp(a, &cqa, &cqa, 32).unwrap();
        let qb = h.create_rc_qp_on(b, &cqb, &cqb, 32, Some(srq)).unwrap();
        h.connect_rc(a, qa, b, qb.qpn, 8, 7).unwrap();
        h.connect_rc(b, qb, a, qa.qpn, 8, 7).unwrap();
        qas.push(qa);
    }
    let recvs: Vec<_> = (0..32u64).map(|i| (i, sge(&mb, i * 512, 512))).collect();
    h.post_srq_recv(b, srq, &recvs).unwrap();
    h.arm_srq(b, srq, 8).unwrap();
    // SEND `i` of 512 bytes from slot `i`, on the QPs in turn.
    let send = |h: &mut Host, i: u64| {
        h.write(a, ma.addr + i * 512, &pattern(i, 512));
        let wr = send_wr(100 + i, WrOpcode::Send, SIGNALED);
        let sg = vec![sge(&ma, i * 512, 512)];
        h.post_send(a, qas[(i % 2) as usize], &[(wr, sg)]).unwrap();
    };
    for i in 0..20u64 {
        send(&mut h, i);
    }
    // 20 of 32 taken: 12 left, above the limit — no event yet.
    let done = wait_for(&mut h, &mut cqa, 20, SECOND);
    assert_eq!(done.len(), 20);
    assert!(done.iter().all(|w| w.status == WcStatus::Success.raw()));
    let got = wait_for(&mut h, &mut cqb, 20, SECOND);
    assert_eq!(got.len(), 20);
    assert_eq!(h.async_events(b), []);
    for i in 20..30u64 {
        send(&mut h, i);
    }
    let done = wait_for(&mut h, &mut cqa, 10, SECOND);
    assert_eq!(done.len(), 10);
    let mut got = got;
    got.extend(wait_for(&mut h, &mut cqb, 10, SECOND));
    assert_eq!(got.len(), 30);
    // 2 left < 8: one IBV_EVENT_SRQ_LIMIT_REACHED, naming the SRQ; the limit disarms.
    assert_eq!(h.async_events(b), [(nic::event::SRQ_LIMIT_REACHED, 0x5151)]);
    // Every SEND landed in the receive buffer its completion names, in posting order per QP.
    for w in &got {
        assert_eq!(w.status, WcStatus::Success.raw());
        assert_eq!(w.byte_len, 512);
    }
    let mut per_slot: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    per_slot.sort_unstable();
    assert_eq!(
        per_slot,
        (0..30).collect::<Vec<_>>(),
        "each receive WQE used once"
    );
    let mut contents: Vec<Vec<u8>> = got
        .iter()
        .map(|w| h.read(b, mb.addr + w.wr_id * 512, 512))
        .collect();
    let mut want: Vec<Vec<u8>> = (0..30).map(|i| pattern(i, 512)).collect();
    contents.sort();
    want.sort();
    assert_eq!(contents, want);
}

#[test]
fn an_mr_deregistered_in_the_middle_of_a_write_stops_it_with_remote_access_error() {
    // A 256 KiB WRITE (256 packets); B deregisters the target after part of it landed.
    let mut p = pair(9, 0.0, 16, 64, 1 << 20);
    let data = pattern(77, 256 << 10);
    p.h.write(p.a, p.ma.addr, &data);
    let wr = rdma_wr(1, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 256 << 10)])])
        .unwrap();
    assert!(p
        .h
        .run_until(SECOND, |h| h.port_counters(1).transport.rcvd_pkts >= 40));
    let mb = p.mb;
    p.h.dereg_mr(p.b, &mb).unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].status, WcStatus::RemAccessErr.raw(), "{:?}", got[0]);
    // What landed before the deregistration is the WRITE's prefix; nothing after the
    // point where the responder refused was written.
    let landed = p.h.read(p.b, mb.addr, 256 << 10);
    let n = landed.iter().zip(&data).take_while(|(a, b)| a == b).count();
    assert!(n >= 40 * 1024, "{n} bytes landed");
    assert!(n < 256 << 10, "the whole WRITE landed");
    assert!(landed[n.next_multiple_of(1024)..].iter().all(|&b| b == 0));
}

#[test]
fn rc_traffic_survives_duplication_reordering_and_corruption() {
    let mut p = pair(10, 0.05, 64, 256, 1 << 20);
    p.h.dup = 0.05;
    p.h.reorder = 0.1;
    p.h.corrupt = 0.02;
    const LEN: usize = 8192;
    let mut done = Vec::new();
    for i in 0..60u64 {
        let src = (i % 32) * LEN as u64;
        p.h.write(p.a, p.ma.addr + src, &pattern(i, LEN));
        let op = if i % 3 == 2 {
            WrOpcode::RdmaRead
        } else {
            WrOpcode::RdmaWrite
        };
        let wr = rdma_wr(i, op, SIGNALED, p.mb.addr + i * LEN as u64, p.mb.rkey);
        if op == WrOpcode::RdmaRead {
            // What the READ fetches: B's bytes at that place.
            p.h.write(p.b, p.mb.addr + i * LEN as u64, &pattern(1000 + i, LEN));
        }
        p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, src, LEN as u32)])])
            .unwrap();
        let want = (i + 1).saturating_sub(16) as usize;
        while done.len() < want {
            let more = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
            assert!(!more.is_empty(), "stuck at {}", done.len());
            for w in &more {
                check_landed(&mut p, w);
            }
            done.extend(more);
        }
    }
    while done.len() < 60 {
        let more = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
        assert!(!more.is_empty(), "stuck at {}", done.len());
        for w in &more {
            check_landed(&mut p, w);
        }
        done.extend(more);
    }
    assert_eq!(
        done.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..60).collect::<Vec<_>>()
    );
    let c = p.h.port_counters(p.b);
    assert!(
        c.engine.rcvd_icrc_err > 0,
        "corrupted packets were dropped by the ICRC check: {:?}",
        c.engine
    );
    assert!(c.transport.duplicate_request > 0, "{:?}", c.transport);
}

/// A completed WRITE's bytes are at B; a completed READ's bytes are in A's source slot.
fn check_landed(p: &mut Pair, w: &Wc) {
    const LEN: usize = 8192;
    assert_eq!(w.status, WcStatus::Success.raw(), "{w:?}");
    let i = w.wr_id;
    if i % 3 == 2 {
        let src = (i % 32) * LEN as u64;
        assert_eq!(
            p.h.read(p.a, p.ma.addr + src, LEN),
            pattern(1000 + i, LEN),
            "READ {i}"
        );
    } else {
        assert_eq!(
            p.h.read(p.b, p.mb.addr + i * LEN as u64, LEN),
            pattern(i, LEN),
            "WRITE {i}"
        );
    }
}

fn hostile(seed: u64) -> RunConfig {
    RunConfig {
        seed,
        messages: 300,
        size_max: 16384,
        window: 16,
        loss: 0.1,
        dup: 0.05,
        reorder: 0.1,
        corrupt: 0.01,
        ..RunConfig::default()
    }
}

#[test]
fn a_random_mix_over_a_hostile_wire_arrives_exactly_once_and_intact() {
    // SEND and WRITE ± immediate, READ, fetch-and-add, compare-and-swap, 1 B–16 KiB, from
    // device to device over a wire that loses, duplicates, reorders and corrupts
    // (`nic::simhost::workload`: every completion once, in order, every byte checked).
    let (mut lost, mut resent, mut icrc) = (0, 0, 0);
    for seed in 1..=12 {
        let r = workload::run(&hostile(seed));
        assert!(r.passed(), "seed {seed}: {:?}", r.details);
        assert_eq!(r.completed, 300);
        lost += r.lost;
        resent += r.retransmissions;
        icrc += r.icrc_errors;
    }
    // The wire did its worst and the transport repaired it.
    assert!(
        lost > 100 && resent > 100 && icrc > 0,
        "lost {lost}, resent {resent}, icrc {icrc}"
    );
}

#[test]
fn a_two_way_mix_over_a_hostile_wire_arrives_exactly_once_and_intact() {
    // Both devices post the random mix to each other at once (each QP requester and
    // responder, ACKs and requests of the two directions sharing the wire), loss,
    // duplication, reordering and corruption included; a cut wire then ends both
    // directions in "transport retry counter exceeded" and flushes, with the receives the
    // failing QPs flushed told apart from deliveries.
    for seed in 21..=26 {
        let r = workload::run(&RunConfig {
            two_way: true,
            ..hostile(seed)
        });
        assert!(r.passed(), "seed {seed}: {:?}", r.details);
        assert_eq!(r.completed, 300);
        assert!(r.retransmissions > 0 && r.lost > 0);
    }
    let r = workload::run(&RunConfig {
        two_way: true,
        messages: 100_000,
        partition_at_ns: Some(2_000_000),
        retry_cnt: 3,
        ..hostile(27)
    });
    assert!(r.passed(), "{:?}", r.details);
    assert_eq!(
        r.statuses.get(&WcStatus::RetryExcErr.raw()),
        Some(&2),
        "{:?}",
        r.statuses
    );
    assert!(r.completed > 0 && r.completed < 100_000);
}

#[test]
fn the_workload_checker_catches_corrupted_delivery() {
    for two_way in [false, true] {
        let cfg = RunConfig {
            ops: [true, false, false, false],
            sabotage_every: 7,
            two_way,
            ..hostile(3)
        };
        let r = workload::run(&cfg);
        assert!(!r.passed());
        // Every seventh SEND of each direction is caught (300 SENDs in all, each direction
        // numbering its own), and nothing else is flagged.
        let per_direction = if two_way { 150 } else { 300 };
        let directions = if two_way { 2 } else { 1 };
        let caught = directions * (per_direction / 7);
        assert_eq!(r.violations, caught, "{:?}", r.details);
        assert!(
            r.details.iter().all(|d| d.contains("wrong bytes")),
            "{:?}",
            r.details
        );
    }
}

#[test]
fn a_workload_cut_mid_run_ends_in_retry_exceeded_then_flushes() {
    for seed in 1..=4 {
        let cfg = RunConfig {
            messages: 100_000,
            partition_at_ns: Some(2_000_000),
            retry_cnt: 3,
            ..hostile(seed)
        };
        let r = workload::run(&cfg);
        assert!(r.passed(), "seed {seed}: {:?}", r.details);
        assert_eq!(
            r.statuses.get(&WcStatus::RetryExcErr.raw()),
            Some(&1),
            "{:?}",
            r.statuses
        );
        let flushed = r
            .statuses
            .get(&WcStatus::WrFlushErr.raw())
            .copied()
            .unwrap_or(0);
        assert!(flushed >= 4, "{:?}", r.statuses);
        assert!(r.completed > 0 && r.completed < 100_000);
    }
}

/// Statuses of `got`, by wr_id order.
fn statuses(got: &[Wc]) -> Vec<(u64, u32)> {
    got.iter().map(|w| (w.wr_id, w.status)).collect()
}

#[test]
fn a_cut_wire_ends_in_retry_exceeded_and_flushes_the_rest() {
    // retry_cnt 3: the first WR fails after four sends of its packets; the three behind it,
    // and one posted after the QP reached ERR, complete flushed (IBTA o11-5.2.x, rdma-core).
    let opts = RcOpts {
        retry_cnt: 3,
        ..RcOpts::default()
    };
    let mut p = pair_with(11, 0.0, 16, 64, 1 << 16, opts);
    let (a, qa) = (p.a, p.qa);
    p.h.loss = 1.0;
    let wrs: Vec<_> = (0..4u64)
        .map(|i| {
            let wr = rdma_wr(i, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey);
            (wr, vec![sge(&p.ma, 0, 2048)])
        })
        .collect();
    p.h.post_send(a, qa, &wrs).unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 4, 10 * SECOND);
    let flush = WcStatus::WrFlushErr.raw();
    assert_eq!(
        statuses(&got),
        [
            (0, WcStatus::RetryExcErr.raw()),
            (1, flush),
            (2, flush),
            (3, flush)
        ]
    );
    assert_eq!(p.h.port_counters(a).transport.retry_exceeded_err, 1);
    // Retries took 4 × ~1 ms of virtual time, not of the test's.
    assert!(p.h.now() > 3_000_000, "{}", p.h.now());
    let wr = send_wr(9, WrOpcode::Send, SIGNALED);
    p.h.post_send(a, qa, &[(wr, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    assert_eq!(
        statuses(&wait_for(&mut p.h, &mut p.cqa, 1, SECOND)),
        [(9, flush)]
    );
}

#[test]
fn a_send_without_a_receive_waits_out_rnr_naks_then_lands() {
    let mut p = pair(12, 0.0, 16, 64, 1 << 16);
    p.h.write(p.a, p.ma.addr, b"late receive");
    let wr = send_wr(1, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 12)])])
        .unwrap();
    // Nothing posted at B: RNR NAKs, and the SEND stays outstanding.
    p.h.run_until(5_000_000, |_| false);
    assert!(p.h.poll_cq(&mut p.cqa, 8).is_empty());
    assert!(p.h.port_counters(p.a).transport.rcvd_rnr_err > 0);
    p.h.post_recv(p.b, p.qb, &[(7, sge(&p.mb, 0, 64))]).unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(statuses(&got), [(1, WcStatus::Success.raw())]);
    let got = wait_for(&mut p.h, &mut p.cqb, 1, SECOND);
    assert_eq!((got[0].wr_id, got[0].byte_len), (7, 12));
    assert_eq!(p.h.read(p.b, p.mb.addr, 12), b"late receive");
}

#[test]
fn rnr_retry_zero_fails_the_send_with_rnr_retry_exceeded() {
    let opts = RcOpts {
        rnr_retry: 0,
        ..RcOpts::default()
    };
    let mut p = pair_with(13, 0.0, 16, 64, 1 << 16, opts);
    let wr = send_wr(1, WrOpcode::Send, SIGNALED);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(statuses(&got), [(1, WcStatus::RnrRetryExcErr.raw())]);
}

#[test]
fn receives_posted_to_a_qp_moved_to_error_complete_flushed() {
    let mut p = pair(14, 0.0, 16, 64, 1 << 16);
    let recvs: Vec<_> = (0..5u64).map(|i| (i, sge(&p.mb, i * 64, 64))).collect();
    p.h.post_recv(p.b, p.qb, &recvs).unwrap();
    p.h.modify_state(p.b, p.qb, abi::QpState::Err.raw() as u8)
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqb, 5, SECOND);
    let flush = WcStatus::WrFlushErr.raw();
    assert_eq!(
        statuses(&got),
        (0..5).map(|i| (i, flush)).collect::<Vec<_>>()
    );
    // And one posted afterwards.
    p.h.post_recv(p.b, p.qb, &[(5, sge(&p.mb, 0, 64))]).unwrap();
    assert_eq!(
        statuses(&wait_for(&mut p.h, &mut p.cqb, 1, SECOND)),
        [(5, flush)]
    );
}

#[test]
fn a_read_into_memory_without_local_write_is_a_local_protection_error() {
    let mut p = pair(15, 0.0, 16, 64, 1 << 16);
    // A's second MR: readable only (no IBV_ACCESS_LOCAL_WRITE).
    let ro = p.h.reg_mr(p.a, 4096, 0).unwrap();
    p.h.write(p.b, p.mb.addr, &[7; 64]);
    let wr = rdma_wr(1, WrOpcode::RdmaRead, SIGNALED, p.mb.addr, p.mb.rkey);
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&ro, 0, 64)])])
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(statuses(&got), [(1, WcStatus::LocProtErr.raw())]);
    assert_eq!(p.h.read(p.a, ro.addr, 64), vec![0; 64]);
}

#[test]
fn an_atomic_on_a_misaligned_address_is_refused_by_the_responder() {
    let mut p = pair(16, 0.0, 16, 64, 1 << 16);
    let mut wr = send_wr(1, WrOpcode::AtomicFetchAndAdd, SIGNALED);
    wr.set_atomic(abi::uverbs::AtomicWr {
        remote_addr: p.mb.addr + 4,
        compare_add: 1,
        swap: 0,
        rkey: p.mb.rkey,
        reserved: 0,
    });
    p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 8)])])
        .unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 1, SECOND);
    assert_eq!(got.len(), 1);
    // IBTA o9-21: a misaligned atomic is an invalid request (NAK) — or refused locally.
    assert!(
        [WcStatus::RemInvReqErr.raw(), WcStatus::LocQpOpErr.raw()].contains(&got[0].status),
        "{:?}",
        got[0]
    );
    assert_eq!(p.h.read(p.b, p.mb.addr, 16), vec![0; 16]);
}

#[test]
fn ud_datagrams_arrive_with_their_grh_and_source_or_not_at_all() {
    // UD over a 20 % lossy wire: no retransmission, so some datagrams are simply gone; each
    // one that arrives carries the sender's IPv4 header in its 40-byte GRH area, the source
    // QPN, and its bytes intact. A wrong Q_Key is dropped by the receiver.
    const QKEY: u32 = 0x1111_0000;
    let mut h = Host::new(17);
    h.loss = 0.2;
    let a = h.add_device(A, Limits::default()).unwrap();
    let b = h.add_device(B, Limits::default()).unwrap();
    let mut cqa = h.create_cq(a, 256).unwrap();
    let mut cqb = h.create_cq(b, 256).unwrap();
    let qa = h.create_ud_qp(a, &cqa, 64, QKEY).unwrap();
    let qb = h.create_ud_qp(b, &cqb, 64, QKEY).unwrap();
    let ma = h.reg_mr(a, 1 << 16, all_access()).unwrap();
    let mb = h.reg_mr(b, 1 << 20, all_access()).unwrap();
    let ah = h.create_ah(a, b).unwrap();
    let recvs: Vec<_> = (0..64u64).map(|i| (i, sge(&mb, i * 2048, 2048))).collect();
    h.post_recv(b, qb, &recvs).unwrap();
    for i in 0..50u64 {
        let len = 100 + i as usize * 10;
        h.write(a, ma.addr + i * 1024, &pattern(i, len));
        // Every tenth with a wrong Q_Key.
        let qkey = if i % 10 == 9 { QKEY + 1 } else { QKEY };
        let wr = nic::simhost::ud_wr(i, SIGNALED, ah, qb.qpn, qkey);
        h.post_send(a, qa, &[(wr, vec![sge(&ma, i * 1024, len as u32)])])
            .unwrap();
    }
    // The sender completes every datagram (UD: once it left).
    let sent = wait_for(&mut h, &mut cqa, 50, SECOND);
    assert_eq!(sent.len(), 50);
    assert!(sent.iter().all(|w| w.status == WcStatus::Success.raw()));
    h.run_until(10_000_000, |_| false);
    let got = h.poll_cq(&mut cqb, 64);
    assert!(!got.is_empty() && got.len() < 45, "{} arrived", got.len());
    assert!(h.port_counters(b).transport.qkey_violation > 0);
    let mut seen = std::collections::BTreeSet::new();
    for w in &got {
        assert_eq!(w.status, WcStatus::Success.raw());
        assert_eq!(w.src_qp, qa.qpn);
        assert_ne!(w.wc_flags & abi::WcFlags::GRH.0, 0);
        let len = w.byte_len as usize - 40;
        let i = (len as u64 - 100) / 10;
        assert_ne!(i % 10, 9, "a datagram with a wrong Q_Key was delivered");
        assert!(seen.insert(i), "datagram {i} delivered twice");
        let buf = h.read(b, mb.addr + w.wr_id * 2048, 40 + len);
        // The GRH area of a RoCEv2 IPv4 datagram: 20 zero bytes, then the IPv4 header.
        assert_eq!(
            buf[20] >> 4,
            4,
            "IPv4 header in the GRH area: {:02x?}",
            &buf[..40]
        );
        assert_eq!(&buf[32..36], &A.octets(), "source address");
        assert_eq!(&buf[36..40], &B.octets(), "destination address");
        assert_eq!(&buf[40..], pattern(i, len), "datagram {i}");
    }
    // Receives are consumed in order.
    let ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..got.len() as u64).collect::<Vec<_>>());
}

#[test]
fn gathers_and_scatters_of_many_pieces_on_one_device_and_between_two() {
    // Same device (the internal loopback, whose packets carry payload descriptors, not
    // bytes) and two devices (bytes on the wire): a SEND gathered from 4 uneven SGEs that
    // straddle packet boundaries into a receive scattered over 4 others, a WRITE gathered
    // the same way, and a READ scattered into 4 pieces.
    for same_device in [true, false] {
        let mut h = Host::new(18);
        let a = h.add_device(A, Limits::default()).unwrap();
        let b = if same_device {
            a
        } else {
            h.add_device(B, Limits::default()).unwrap()
        };
        let mut cqa = h.create_cq(a, 64).unwrap();
        let mut cqb = h.create_cq(b, 64).unwrap();
        let qa = h.create_rc_qp(a, &cqa, &cqa, 16).unwrap();
        let qb = h.create_rc_qp(b, &cqb, &cqb, 16).unwrap();
        h.connect_rc(a, qa, b, qb.qpn, 8, 7).unwrap();
        h.connect_rc(b, qb, a, qa.qpn, 8, 7).unwrap();
        let ma = h.reg_mr(a, 1 << 16, all_access()).unwrap();
        let mb = h.reg_mr(b, 1 << 16, all_access()).unwrap();
        let data = pattern(99, 5000);
        // Gather pieces (offset in A's MR, length): 5000 bytes in all.
        let pieces = [(3u64, 1021u32), (2000, 7), (4096, 2500), (9001, 1472)];
        let mut at = 0usize;
        let mut gather = Vec::new();
        for (off, len) in pieces {
            h.write(a, ma.addr + off, &data[at..at + len as usize]);
            gather.push(sge(&ma, off, len));
            at += len as usize;
        }
        // Scatter pieces at B for the SEND (5000 bytes over 4 SGEs).
        let scatter = [(100u64, 999u32), (5000, 1), (7000, 3000), (20000, 1000)];
        let recv_sges: Vec<_> = scatter.iter().map(|&(o, l)| sge(&mb, o, l)).collect();
        h.post_recv_sges(b, qb, &[(7, recv_sges)]).unwrap();
        let send = send_wr(1, WrOpcode::Send, SIGNALED);
        let write = rdma_wr(2, WrOpcode::RdmaWrite, SIGNALED, mb.addr + 30000, mb.rkey);
        h.post_send(a, qa, &[(send, gather.clone()), (write, gather.clone())])
            .unwrap();
        let got = wait_for(&mut h, &mut cqa, 2, SECOND);
        assert_eq!(
            statuses(&got),
            [(1, 0), (2, 0)],
            "same device: {same_device}"
        );
        let got = wait_for(&mut h, &mut cqb, 1, SECOND);
        assert_eq!((got[0].wr_id, got[0].byte_len), (7, 5000));
        let mut received = Vec::new();
        for (o, l) in scatter {
            let take = (l as usize).min(5000 - received.len());
            received.extend(h.read(b, mb.addr + o, take));
        }
        assert_eq!(received, data, "SEND, same device: {same_device}");
        assert_eq!(
            h.read(b, mb.addr + 30000, 5000),
            data,
            "WRITE, same device: {same_device}"
        );
        // READ the WRITE's bytes back, scattered over A's memory at new places.
        let places = [
            (40000u64, 13u32),
            (41000, 2048),
            (45000, 1939),
            (50000, 1000),
        ];
        let sg: Vec<_> = places.iter().map(|&(o, l)| sge(&ma, o, l)).collect();
        let read = rdma_wr(3, WrOpcode::RdmaRead, SIGNALED, mb.addr + 30000, mb.rkey);
        h.post_send(a, qa, &[(read, sg)]).unwrap();
        let got = wait_for(&mut h, &mut cqa, 1, SECOND);
        assert_eq!(statuses(&got), [(3, 0)]);
        let mut back = Vec::new();
        for (o, l) in places {
            back.extend(h.read(a, ma.addr + o, l as usize));
        }
        assert_eq!(back, data, "READ, same device: {same_device}");
        // The same-device run really took the internal loopback.
        assert_eq!(h.port_counters(a).engine.loopback_pkts > 0, same_device);
    }
}

#[test]
fn messages_cross_the_psn_wraparound_on_a_lossy_wire() {
    // Both directions start 20 PSNs before 2^24: 64-packet WRITEs and READs cross the wrap,
    // with loss forcing retransmissions across it.
    let opts = RcOpts {
        psn: (1 << 24) - 20,
        ..RcOpts::default()
    };
    let mut p = pair_with(19, 0.1, 16, 64, 1 << 20, opts);
    for i in 0..4u64 {
        let data = pattern(i, 64 << 10);
        p.h.write(p.a, p.ma.addr, &data);
        let at = p.mb.addr + (i % 2) * (64 << 10);
        let wr = rdma_wr(i, WrOpcode::RdmaWrite, SIGNALED, at, p.mb.rkey);
        p.h.post_send(p.a, p.qa, &[(wr, vec![sge(&p.ma, 0, 64 << 10)])])
            .unwrap();
        assert_eq!(
            statuses(&wait_for(&mut p.h, &mut p.cqa, 1, SECOND)),
            [(i, 0)]
        );
        assert_eq!(p.h.read(p.b, at, 64 << 10), data, "WRITE {i}");
        let rd = rdma_wr(10 + i, WrOpcode::RdmaRead, SIGNALED, at, p.mb.rkey);
        p.h.post_send(p.a, p.qa, &[(rd, vec![sge(&p.ma, 1 << 19, 64 << 10)])])
            .unwrap();
        assert_eq!(
            statuses(&wait_for(&mut p.h, &mut p.cqa, 1, SECOND)),
            [(10 + i, 0)]
        );
        assert_eq!(
            p.h.read(p.a, p.ma.addr + (1 << 19), 64 << 10),
            data,
            "READ {i}"
        );
    }
    assert!(p.h.port_counters(p.a).transport.retransmissions > 0);
}

#[test]
fn zero_length_messages_complete_and_touch_nothing() {
    // SEND, WRITE, WRITE WITH IMM and READ of 0 bytes, with no SGE at all.
    let mut p = pair(20, 0.0, 16, 64, 1 << 16);
    p.h.post_recv(
        p.b,
        p.qb,
        &[(1, sge(&p.mb, 0, 64)), (2, sge(&p.mb, 64, 64))],
    )
    .unwrap();
    let mut imm = rdma_wr(
        3,
        WrOpcode::RdmaWriteWithImm,
        SIGNALED,
        p.mb.addr,
        p.mb.rkey,
    );
    imm.set_imm_data(0xfeed);
    let wrs = vec![
        (send_wr(1, WrOpcode::Send, SIGNALED), vec![]),
        (
            rdma_wr(2, WrOpcode::RdmaWrite, SIGNALED, p.mb.addr, p.mb.rkey),
            vec![],
        ),
        (imm, vec![]),
        (
            rdma_wr(4, WrOpcode::RdmaRead, SIGNALED, p.mb.addr, p.mb.rkey),
            vec![],
        ),
    ];
    p.h.post_send(p.a, p.qa, &wrs).unwrap();
    let got = wait_for(&mut p.h, &mut p.cqa, 4, SECOND);
    assert_eq!(statuses(&got), [(1, 0), (2, 0), (3, 0), (4, 0)]);
    let got = wait_for(&mut p.h, &mut p.cqb, 2, SECOND);
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        [(1, 0, 0), (2, 0, 0)]
    );
    assert_eq!(got[1].imm_data(), 0xfeed);
    assert_eq!(p.h.read(p.b, p.mb.addr, 128), vec![0; 128]);
}

#[test]
fn the_same_seed_replays_exactly_and_another_seed_does_not() {
    // Everything a run does follows from its seed: the wire's draws, the workload's
    // choices, the devices' timers in virtual time. Two runs of one seed agree in every
    // figure and counter; another seed gives another run.
    let cfg = |seed| RunConfig {
        ops: [true, false, true, true],
        ..hostile(seed)
    };
    let a = workload::run(&cfg(77));
    let b = workload::run(&cfg(77));
    assert!(a.passed(), "{:?}", a.details);
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let c = workload::run(&cfg(78));
    assert_ne!(
        (a.lost, a.delivered, a.virtual_time_ns),
        (c.lost, c.delivered, c.virtual_time_ns),
        "another seed, another run"
    );
}

#[test]
fn a_fault_free_run_resends_nothing() {
    let r = workload::run(&RunConfig {
        seed: 5,
        messages: 2000,
        ..RunConfig::default()
    });
    assert!(r.passed(), "{:?}", r.details);
    assert_eq!(r.completed, 2000);
    assert_eq!((r.retransmissions, r.timeouts, r.lost), (0, 0, 0));
    for c in &r.counters {
        let t = &c.transport;
        assert_eq!(
            (
                t.rcvd_seq_err,
                t.send_nak,
                t.duplicate_request,
                t.rto_probes
            ),
            (0, 0, 0, 0),
            "{c:?}"
        );
    }
}

#[test]
fn a_receiver_that_runs_dry_answers_rnr_naks_and_loses_nothing() {
    // B keeps two receives posted and re-posts each 30 µs after it completes: SENDs
    // outrun it, B answers RNR NAKs, A waits them out (rnr_retry 7: forever).
    let r = workload::run(&RunConfig {
        seed: 3,
        messages: 1500,
        ops: [true, true, false, false],
        recv_depth: 2,
        recv_delay_ns: 30_000,
        ..RunConfig::default()
    });
    assert!(r.passed(), "{:?}", r.details);
    assert_eq!(r.completed, 1500);
    assert!(r.rnr_naks > 0, "the responder ran dry");
}

#[test]
fn every_path_mtu_carries_a_hostile_mix_intact() {
    for (code, bytes) in [
        (Mtu::Mtu256, 256),
        (Mtu::Mtu512, 512),
        (Mtu::Mtu2048, 2048),
        (Mtu::Mtu4096, 4096),
    ] {
        let r = workload::run(&RunConfig {
            seed: 21,
            path_mtu: code,
            ops: [true, true, true, false],
            ..hostile(21)
        });
        assert!(r.passed(), "MTU {bytes}: {:?}", r.details);
        assert_eq!(r.completed, 300, "MTU {bytes}");
    }
}
