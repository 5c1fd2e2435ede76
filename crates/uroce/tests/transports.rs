//! UC, UD and SRQ basics, and event mode (completion channel with epoll and the async
//! adapter), on one device and between two devices.

mod common;

use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use uroce::pair::{PairOpts, ALL_ACCESS};
use uroce::*;

topo_tests!(uc_send_and_write, |t| {
    let o = PairOpts {
        qp_type: QpType::Uc,
        ..PairOpts::default()
    };
    let (a, b) = pair(t, &o);
    let mut src = buf(&a, 4096);
    let data = pattern(7, 4096);
    src.copy_from_slice(&data);
    let dst = buf(&b, 8192);
    b.qp.post_recv(&[RecvWr::new(1, &[dst.sge(0, 4096)]), RecvWr::new(2, &[])])
        .unwrap();
    let rm = dst.remote();
    a.qp.post_send(&[
        SendWr::send(10, &[src.sge(0, 3000)]).signaled(),
        SendWr::write(11, &[src.sge(0, 4096)], rm.at(4096), rm.rkey).signaled(),
        SendWr::write(12, &[src.sge(0, 10)], rm.at(4096), rm.rkey)
            .with_imm(5)
            .signaled(),
    ])
    .unwrap();
    let s = wait(&a.cq, 3);
    assert!(s.iter().all(|w| w.status == WcStatus::Success), "{s:?}");
    let r = wait(&b.cq, 2);
    assert_eq!(
        (r[0].wr_id, r[0].byte_len, r[0].opcode),
        (1, 3000, WcOpcode::Recv)
    );
    assert_eq!((r[1].wr_id, r[1].imm_data()), (2, Some(5)));
    assert_eq!(r[1].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(&dst[..3000], &data[..3000]);
    assert_eq!(&dst[4096..], &data[..]);
});

topo_tests!(ud_send_recv_with_grh, |t| {
    let o = PairOpts {
        qp_type: QpType::Ud,
        ..PairOpts::default()
    };
    let (a, b) = pair(t, &o);
    let len = 512usize;
    let dst = buf(&b, 2 * (GRH_BYTES + len));
    let r0 = [dst.sge(0, (GRH_BYTES + len) as u32)];
    let r1 = [dst.sge(GRH_BYTES + len, (GRH_BYTES + len) as u32)];
    b.qp.post_recv(&[RecvWr::new(1, &r0), RecvWr::new(2, &r1)])
        .unwrap();
    let mut src = buf(&a, len);
    let data = pattern(8, len);
    src.copy_from_slice(&data);
    // A flow label wider than its 20 bits is cut, not refused (UCX 1.13 passes ~0).
    let mut av = AhAttr::roce(b.gid, 0, PORT);
    av.grh.flow_label = u32::MAX;
    let ah = a.pd.create_ah(&av).unwrap();
    let s = [src.sge(0, len as u32)];
    a.qp.post_send(&[SendWr::ud_send(3, &s, &ah, b.qp.qp_num(), o.qkey)
        .with_imm(99)
        .signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    let w = wait1(&b.cq);
    assert_eq!(
        (w.wr_id, w.status, w.opcode),
        (1, WcStatus::Success, WcOpcode::Recv)
    );
    assert!(w.has_grh());
    assert_eq!(
        w.byte_len as usize,
        GRH_BYTES + len,
        "UD byte_len counts the GRH"
    );
    assert_eq!(w.src_qp, a.qp.qp_num());
    assert_eq!(w.imm_data(), Some(99));
    // wc.sl of a UD receive: the RoCE L3 header type as mlx5 reports it (2 IPv4, 1 IPv6).
    let l3 = if b.gid.to_ip().is_ipv4() { 2 } else { 1 };
    assert_eq!(w.sl, l3, "UD receive sl is the network header type");
    assert_eq!(&dst[GRH_BYTES..GRH_BYTES + len], &data[..]);
    let (src_ip, dst_ip) = grh_addresses(&dst[..GRH_BYTES]).expect("GRH holds the IP header");
    assert_eq!(src_ip, a.gid.to_ip());
    assert_eq!(dst_ip, b.gid.to_ip());
    // The reply path: an AH built from the received GRH reaches A.
    let back = uroce::init_ah_from_wc(&w, &dst[..GRH_BYTES], 0, PORT).unwrap();
    assert_eq!(back.grh.dgid, a.gid);
    let back_ah = b.pd.create_ah(&back).unwrap();
    let abuf = buf(&a, GRH_BYTES + len);
    a.qp.post_recv(&[RecvWr::new(6, &[abuf.sge(0, (GRH_BYTES + len) as u32)])])
        .unwrap();
    let echo = [dst.sge(GRH_BYTES, len as u32)];
    b.qp.post_send(&[SendWr::ud_send(7, &echo, &back_ah, w.src_qp, o.qkey).signaled()])
        .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
    let w2 = wait1(&a.cq);
    assert_eq!(
        (w2.wr_id, w2.status, w2.src_qp),
        (6, WcStatus::Success, b.qp.qp_num())
    );
    assert_eq!(&abuf[GRH_BYTES..], &data[..]);
    // A wrong Q_Key is dropped silently at the responder; the UD sender still completes.
    a.qp.post_send(&[SendWr::ud_send(4, &s, &ah, b.qp.qp_num(), o.qkey ^ 1).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    quiet(&b.cq, Duration::from_millis(50));
    // A message larger than the path MTU is refused for UD.
    let big = buf(&a, 4096);
    let r = a.qp.post_send(&[
        SendWr::ud_send(5, &[big.sge(0, 4096)], &ah, b.qp.qp_num(), o.qkey).signaled(),
    ]);
    match r {
        Err(e) => assert_eq!(e.error.errno(), Errno::EINVAL),
        Ok(()) => {
            let w = wait1(&a.cq);
            assert_eq!(w.wr_id, 5);
            assert_ne!(w.status, WcStatus::Success);
        }
    }
});

topo_tests!(srq_feeds_two_qps, |t| {
    let (da, db) = topo_devices(t);
    let ca = da.open().unwrap();
    let cb = if t == Topo::SameDevice {
        ca.clone()
    } else {
        db.open().unwrap()
    };
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (
        ca.create_cq(64, None, 0).unwrap(),
        cb.create_cq(64, None, 0).unwrap(),
    );
    let srq = pb
        .create_srq(&SrqAttr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mut qps = Vec::new();
    for _ in 0..2 {
        let qa = pa
            .create_qp(&QpInitAttr::new(QpType::Rc, &cqa, cap))
            .unwrap();
        let mut attr = QpInitAttr::new(QpType::Rc, &cqb, cap);
        attr.srq = Some(&srq);
        let qb = pb.create_qp(&attr).unwrap();
        let (ga, gb) = (
            ca.query_gid(PORT, 0).unwrap(),
            cb.query_gid(PORT, 0).unwrap(),
        );
        qa.connect(&qb.endpoint(0, gb), &ConnectOpts::default())
            .unwrap();
        qb.connect(&qa.endpoint(0, ga), &ConnectOpts::default())
            .unwrap();
        qps.push((qa, qb));
    }
    let rbuf = pb.alloc_mr(4 * 64, ALL_ACCESS).unwrap();
    let rs: Vec<[Sge; 1]> = (0..4).map(|i| [rbuf.sge(i * 64, 64)]).collect();
    let rw: Vec<RecvWr<'_>> = (0..4).map(|i| RecvWr::new(50 + i as u64, &rs[i])).collect();
    srq.post_recv(&rw).unwrap();
    let mut sbuf = pa.alloc_mr(64, ALL_ACCESS).unwrap();
    sbuf[..2].copy_from_slice(b"q0");
    qps[0]
        .0
        .post_send(&[SendWr::send(1, &[sbuf.sge(0, 2)]).signaled()])
        .unwrap();
    assert_eq!(wait1(&cqa).status, WcStatus::Success);
    sbuf[..2].copy_from_slice(b"q1");
    qps[1]
        .0
        .post_send(&[SendWr::send(2, &[sbuf.sge(0, 2)]).signaled()])
        .unwrap();
    assert_eq!(wait1(&cqa).status, WcStatus::Success);
    let r = wait(&cqb, 2);
    assert_eq!((r[0].wr_id, r[0].qp_num), (50, qps[0].1.qp_num()));
    assert_eq!((r[1].wr_id, r[1].qp_num), (51, qps[1].1.qp_num()));
    assert_eq!(&rbuf[..2], b"q0");
    assert_eq!(&rbuf[64..66], b"q1");
    assert_eq!(srq.query().unwrap().max_wr, srq.attr().max_wr);
    drop(qps);
    srq.destroy().unwrap();
});

fn epoll_wait_one(fd: i32, timeout_ms: i32) -> bool {
    // SAFETY: plain epoll system calls on an fd we own for the duration of the call; the
    // event buffer is a live local.
    unsafe {
        let ep = libc::epoll_create1(libc::EPOLL_CLOEXEC);
        assert!(ep >= 0);
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 7,
        };
        assert_eq!(libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev), 0);
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 1];
        let n = libc::epoll_wait(ep, out.as_mut_ptr(), 1, timeout_ms);
        libc::close(ep);
        assert!(n >= 0);
        n == 1 && out[0].u64 == 7
    }
}

topo_tests!(event_mode_with_epoll, |t| {
    let o = PairOpts {
        channel: true,
        ..PairOpts::default()
    };
    let (a, b) = pair(t, &o);
    let ch = b.channel.clone().unwrap();
    let dst = buf(&b, 256);
    let rs: Vec<[Sge; 1]> = (0..3).map(|i| [dst.sge(i * 64, 64)]).collect();
    let rw: Vec<RecvWr<'_>> = (0..3).map(|i| RecvWr::new(i as u64, &rs[i])).collect();
    b.qp.post_recv(&rw).unwrap();
    let src = buf(&a, 64);
    let s = [src.sge(0, 8)];
    // Armed: the completion makes the channel fd readable for epoll.
    b.cq.req_notify(false).unwrap();
    assert!(!epoll_wait_one(ch.as_raw_fd(), 0));
    a.qp.post_send(&[SendWr::send(1, &s)]).unwrap();
    assert!(
        epoll_wait_one(ch.as_raw_fd(), 10_000),
        "no completion event"
    );
    let cq = ch.try_get_event().unwrap().expect("event queued");
    assert!(cq.same(&b.cq));
    cq.ack_events(1);
    assert_eq!(wait1(&b.cq).wr_id, 0);
    // Armed for solicited completions: a solicited SEND raises the event.
    b.cq.req_notify(true).unwrap();
    a.qp.post_send(&[SendWr::send(2, &s).solicited()]).unwrap();
    assert!(epoll_wait_one(ch.as_raw_fd(), 10_000), "no solicited event");
    let cq = ch.try_get_event().unwrap().expect("event queued");
    assert!(cq.same(&b.cq));
    cq.ack_events(1);
    assert_eq!(wait1(&b.cq).wr_id, 1);
    // Not armed again: no event.
    a.qp.post_send(&[SendWr::send(3, &s)]).unwrap();
    assert_eq!(wait1(&b.cq).wr_id, 2);
    assert!(!epoll_wait_one(ch.as_raw_fd(), 20), "event without arming");
    assert_eq!(b.cq.unacked_events(), 0);
});

// IBA §11.4.2.2: a CQ armed for solicited completions raises an event only for a
// solicited receive (or an error). The transport's receive completions carry the SE bit
// of the message's last packet (`transport::Completion::solicited`).
#[test]
fn solicited_only_arming_ignores_unsolicited_completions_same_device() {
    solicited_only(Topo::SameDevice);
}

#[test]
fn solicited_only_arming_ignores_unsolicited_completions_two_devices() {
    solicited_only(Topo::TwoDevices);
}

fn solicited_only(t: Topo) {
    let o = PairOpts {
        channel: true,
        ..PairOpts::default()
    };
    let (a, b) = pair(t, &o);
    let ch = b.channel.clone().unwrap();
    let dst = buf(&b, 256);
    let rs: Vec<[Sge; 1]> = (0..3).map(|i| [dst.sge(i * 64, 64)]).collect();
    let rw: Vec<RecvWr<'_>> = (0..3).map(|i| RecvWr::new(i as u64, &rs[i])).collect();
    b.qp.post_recv(&rw).unwrap();
    let src = buf(&a, 64);
    let s = [src.sge(0, 8)];
    // Solicited-only: an unsolicited SEND completes without an event; a solicited one
    // raises it.
    b.cq.req_notify(true).unwrap();
    a.qp.post_send(&[SendWr::send(2, &s)]).unwrap();
    assert_eq!(wait1(&b.cq).wr_id, 0);
    assert!(
        !epoll_wait_one(ch.as_raw_fd(), 50),
        "event for an unsolicited completion"
    );
    a.qp.post_send(&[SendWr::send(3, &s).solicited()]).unwrap();
    let cq = ch
        .get_event(Some(TIMEOUT))
        .unwrap()
        .expect("solicited event");
    assert!(cq.same(&b.cq));
    cq.ack_events(1);
    assert_eq!(wait1(&b.cq).wr_id, 1);
}

#[test]
fn async_adapter_waits_for_completion_events() {
    let o = PairOpts {
        channel: true,
        ..PairOpts::default()
    };
    let (a, b) = pair(Topo::TwoDevices, &o);
    let dst = buf(&b, 64);
    b.qp.post_recv(&[RecvWr::new(1, &[dst.sge(0, 64)])])
        .unwrap();
    b.cq.req_notify(false).unwrap();
    let ch = b.channel.clone().unwrap();
    let qa = a.qp.clone();
    let src = buf(&a, 64);
    let sge = src.sge(0, 16);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        qa.post_send(&[SendWr::send(1, &[sge])]).unwrap();
    });
    let cq = block_on(async {
        let cq = ch.get_event_async().await.unwrap();
        cq.ack_events(1);
        cq
    });
    t.join().unwrap();
    assert!(cq.same(&b.cq));
    assert_eq!(wait1(&b.cq).byte_len, 16);
    drop(src);
}

// ibv_resize_cq never loses a completion: right after posting seven signaled WRs, a shrink
// below seven is refused with EINVAL (the completions are in flight or unpolled, and the
// device owes all of them), every completion arrives, and once they are polled the same
// shrink succeeds. Unsignaled WRs are not owed.
#[test]
fn resize_cq_refuses_shrink_below_owed_completions() {
    for topo in [Topo::SameDevice, Topo::TwoDevices] {
        let (a, b) = rc(topo);
        let src = buf(&a, 64);
        let dst = buf(&b, 64);
        let s = [src.sge(0, 8)];
        let wrs: Vec<SendWr<'_>> = (0..7)
            .map(|i| SendWr::write(i, &s, dst.addr(), dst.rkey()).signaled())
            .collect();
        a.qp.post_send(&wrs).unwrap();
        let err = a.cq.resize(2).expect_err("shrink below 7 owed completions");
        assert_eq!(err.errno(), Errno::EINVAL, "{err}");
        let w = wait(&a.cq, 7);
        assert_eq!(
            w.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            (0..7).collect::<Vec<_>>()
        );
        assert!(w.iter().all(|w| w.status == WcStatus::Success));
        let n = a.cq.resize(2).expect("shrink with nothing owed");
        assert!(n >= 2);
        // One signaled WR behind unsignaled ones fits a CQ of two.
        let wrs: Vec<SendWr<'_>> = (10..15)
            .map(|i| {
                let w = SendWr::write(i, &s, dst.addr(), dst.rkey());
                if i == 14 {
                    w.signaled()
                } else {
                    w
                }
            })
            .collect();
        a.qp.post_send(&wrs).unwrap();
        a.cq.resize(2).expect("unsignaled WRs are not owed");
        assert_eq!(wait1(&a.cq).wr_id, 14);
        drop(b);
    }
}

// The same while the completions are certainly still in flight: the peer address has no
// device, so no WR can complete before the transport gives up (retry exceeded, the rest
// flushed). Each of the seven still reaches the CQ.
#[test]
fn resize_cq_counts_sends_in_flight() {
    let (dev, _) = topo_devices(Topo::SameDevice);
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None, 0).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, PairOpts::default().cap))
        .unwrap();
    let nobody = QpEndpoint {
        qpn: 0x77,
        psn: 0,
        gid: Gid::from("127.0.0.77".parse::<std::net::IpAddr>().unwrap()),
    };
    let opts = ConnectOpts {
        timeout: 1,
        retry_cnt: 1,
        ..ConnectOpts::default()
    };
    qp.connect(&nobody, &opts).unwrap();
    let src = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let s = [src.sge(0, 8)];
    let wrs: Vec<SendWr<'_>> = (0..7)
        .map(|i| SendWr::write(i, &s, 0x1000, 0x1234).signaled())
        .collect();
    qp.post_send(&wrs).unwrap();
    let err = cq.resize(2).expect_err("shrink below 7 sends in flight");
    assert_eq!(err.errno(), Errno::EINVAL, "{err}");
    let w = wait(&cq, 7);
    assert_eq!(
        w.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (0..7).collect::<Vec<_>>()
    );
    assert_eq!(w[0].status, WcStatus::RetryExcErr, "{w:?}");
    assert!(
        w[1..].iter().all(|w| w.status == WcStatus::WrFlushErr),
        "{w:?}"
    );
}

// ibv_resize_cq: unpolled completions move to the new ring in order, and the CQ keeps
// working at its new size.
#[test]
fn resize_cq_keeps_unpolled_completions() {
    let (a, b) = rc(Topo::SameDevice);
    let src = buf(&a, 64);
    let s = [src.sge(0, 8)];
    let wrs: Vec<SendWr<'_>> = (0..3)
        .map(|i| SendWr::write(i, &s, src.addr(), src.rkey()).signaled())
        .collect();
    a.qp.post_send(&wrs).unwrap();
    // Give the engine time to write all three into the old ring (not taken out).
    std::thread::sleep(Duration::from_millis(50));
    let old = a.cq.cqe();
    let new = a.cq.resize(1000).unwrap();
    assert!(new >= 1000 && new != old, "{old} -> {new}");
    assert_eq!(a.cq.cqe(), new);
    let w = wait(&a.cq, 3);
    assert_eq!(w.iter().map(|w| w.wr_id).collect::<Vec<_>>(), vec![0, 1, 2]);
    a.qp.post_send(&[SendWr::write(3, &s, src.addr(), src.rkey()).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).wr_id, 3);
    drop(b);
}
