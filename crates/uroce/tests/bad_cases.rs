//! Bad cases (wrong keys, access, PD, receive buffer, RNR, CQ overflow, states, teardown),
//! on one device and between two devices: each must end in the status IBA prescribes
//! (docs/wire.md §5, §7.1), at the side that should see it, with nothing written where
//! nothing may be.

mod common;

use std::time::{Duration, Instant};

use common::*;
use uroce::pair::{PairOpts, ALL_ACCESS};
use uroce::*;

fn wait_async(ctx: &Context, what: &str, pred: impl Fn(&AsyncEvent) -> bool) -> AsyncEvent {
    let deadline = Instant::now() + TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no async event {what}; saw {seen:?}");
        if let Some(ev) = ctx.get_async_event(Some(left)).unwrap() {
            if pred(&ev) {
                return ev;
            }
            seen.push(ev);
        }
    }
}

topo_tests!(wrong_lkey_is_loc_prot_err, |t| {
    let (a, b) = rc(t);
    let dst = buf(&b, 64);
    b.qp.post_recv(&[RecvWr::new(1, &[dst.sge(0, 64)])])
        .unwrap();
    let src = buf(&a, 64);
    let mut sge = src.sge(0, 16);
    sge.lkey ^= 0x00ab_cd00;
    a.qp.post_send(&[SendWr::send(7, &[sge]).signaled()])
        .unwrap();
    let w = wait1(&a.cq);
    assert_eq!((w.wr_id, w.status), (7, WcStatus::LocProtErr));
    // The requester's QP is in ERR now: later WRs flush.
    wait_state(&a.qp, QpState::Err);
    a.qp.post_send(&[SendWr::send(8, &[src.sge(0, 8)]).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::WrFlushErr);
    quiet(&b.cq, Duration::from_millis(50));
});

topo_tests!(wrong_rkey_is_rem_access_err_and_writes_nothing, |t| {
    let (a, b) = rc(t);
    let mut src = buf(&a, 4096);
    src.fill(0x5a);
    let dst = buf(&b, 4096);
    let rm = dst.remote();
    a.qp.post_send(&[
        SendWr::write(1, &[src.sge(0, 4096)], rm.addr, rm.rkey ^ 0x0101_0000).signaled(),
    ])
    .unwrap();
    let w = wait1(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    assert!(dst.iter().all(|&x| x == 0), "responder memory was written");
    // Out of bounds with the right rkey is the same error.
    let (a, b) = rc(t);
    let src = buf(&a, 4096);
    let dst = buf(&b, 4096);
    a.qp.post_send(&[
        SendWr::write(2, &[src.sge(0, 4096)], dst.remote().at(1), dst.rkey()).signaled(),
    ])
    .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemAccessErr);
    assert!(dst.iter().all(|&x| x == 0));
});

topo_tests!(missing_remote_access_flag_is_rem_access_err, |t| {
    let (a, b) = rc(t);
    let mut src = buf(&a, 256);
    src.fill(0x77);
    // Registered for local writes and remote reads only.
    let mut dst =
        b.pd.alloc_mr(256, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
    dst.fill(0x11);
    let rm = dst.remote();
    a.qp.post_send(&[SendWr::write(1, &[src.sge(0, 256)], rm.addr, rm.rkey).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemAccessErr);
    assert!(
        dst.iter().all(|&x| x == 0x11),
        "written without REMOTE_WRITE"
    );
    // And a READ of memory registered without REMOTE_READ.
    let (a, b) = rc(t);
    let local = buf(&a, 64);
    let hidden = b.pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    a.qp.post_send(&[
        SendWr::read(2, &[local.sge(0, 64)], hidden.addr(), hidden.rkey()).signaled(),
    ])
    .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemAccessErr);
    // Atomics need REMOTE_ATOMIC.
    let (a, b) = rc(t);
    let out = buf(&a, 8);
    let no_atomic =
        b.pd.alloc_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            .unwrap();
    let o = out.sge(0, 8);
    a.qp.post_send(&[SendWr::fetch_add(3, &o, no_atomic.addr(), no_atomic.rkey(), 1).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemAccessErr);
    assert!(no_atomic.iter().all(|&x| x == 0));
});

topo_tests!(receive_buffer_too_small, |t| {
    let (a, b) = rc(t);
    let dst = buf(&b, 64);
    b.qp.post_recv(&[RecvWr::new(3, &[dst.sge(0, 16)])])
        .unwrap();
    let mut src = buf(&a, 100);
    src.fill(9);
    a.qp.post_send(&[SendWr::send(4, &[src.sge(0, 100)]).signaled()])
        .unwrap();
    let r = wait1(&b.cq);
    assert_eq!((r.wr_id, r.status), (3, WcStatus::LocLenErr));
    let s = wait1(&a.cq);
    assert_eq!((s.wr_id, s.status), (4, WcStatus::RemInvReqErr));
    assert!(
        dst[16..].iter().all(|&x| x == 0),
        "wrote past the receive buffer"
    );
});

topo_tests!(mr_of_another_pd, |t| {
    // Local side: an lkey from another PD of the same context.
    let (a, b) = rc(t);
    let other_pd = a.ctx.alloc_pd().unwrap();
    let foreign = other_pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let dst = buf(&b, 64);
    b.qp.post_recv(&[RecvWr::new(1, &[dst.sge(0, 64)])])
        .unwrap();
    a.qp.post_send(&[SendWr::send(2, &[foreign.sge(0, 8)]).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::LocProtErr);
    // Remote side: an rkey of an MR in another PD of the responder.
    let (a, b) = rc(t);
    let other_pd = b.ctx.alloc_pd().unwrap();
    let foreign = other_pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let src = buf(&a, 64);
    a.qp.post_send(&[
        SendWr::write(3, &[src.sge(0, 64)], foreign.addr(), foreign.rkey()).signaled(),
    ])
    .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemAccessErr);
    assert!(foreign.iter().all(|&x| x == 0));
});

#[test]
fn posting_in_the_wrong_qp_state() {
    let (d, _) = topo_devices(Topo::SameDevice);
    let ctx = d.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap))
        .unwrap();
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let sge = [mr.sge(0, 8)];
    // RESET: neither sends nor receives; fast path and command path agree.
    for e in [
        qp.post_send(&[SendWr::send(1, &sge)]).unwrap_err(),
        qp.post_send_cmd(&[SendWr::send(1, &sge)]).unwrap_err(),
        qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap_err(),
        qp.post_recv_cmd(&[RecvWr::new(1, &sge)]).unwrap_err(),
    ] {
        assert_eq!((e.index, e.error.errno()), (0, Errno::EINVAL), "{e}");
    }
    // INIT: receives yes, sends no.
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: PORT,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    qp.post_recv(&[RecvWr::new(2, &sge)]).unwrap();
    qp.post_recv_cmd(&[RecvWr::new(3, &sge)]).unwrap();
    assert_eq!(
        qp.post_send(&[SendWr::send(4, &sge)])
            .unwrap_err()
            .error
            .errno(),
        Errno::EINVAL
    );
    assert_eq!(
        qp.post_send_cmd(&[SendWr::send(4, &sge)])
            .unwrap_err()
            .error
            .errno(),
        Errno::EINVAL
    );
    // An illegal transition (INIT → RTS) is refused by the control plane.
    let e = qp.set_state(QpState::Rts).unwrap_err();
    assert_eq!(
        (e.errno(), e.kind()),
        (Errno::EINVAL, ErrorKind::ControlPlane)
    );
    // ERR: posting is allowed and everything flushes (docs/wire.md §6.3).
    qp.set_state(QpState::Err).unwrap();
    qp.post_send(&[SendWr::send(5, &sge).signaled()]).unwrap();
    let w = wait(&cq, 3);
    let mut ids: Vec<u64> = w.iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, vec![2, 3, 5]);
    assert!(w.iter().all(|w| w.status == WcStatus::WrFlushErr), "{w:?}");
}

topo_tests!(rnr_with_rnr_retry_zero, |t| {
    let mut o = PairOpts::default();
    o.connect.rnr_retry = 0;
    o.connect.min_rnr_timer = 1;
    let (a, b) = pair(t, &o);
    let src = buf(&a, 64);
    // No receive posted at B.
    a.qp.post_send(&[SendWr::send(1, &[src.sge(0, 8)]).signaled()])
        .unwrap();
    let w = wait1(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RnrRetryExcErr));
    quiet(&b.cq, Duration::from_millis(20));
});

topo_tests!(cq_overflow_raises_async_error_and_stops_the_qp, |t| {
    let o = PairOpts {
        cqe: 4,
        ..PairOpts::default()
    };
    let (a, b) = pair(t, &o);
    assert_eq!(b.cq.cqe(), 4);
    // Receive buffers with canaries between them.
    let mut rbuf = buf(&b, 4096);
    rbuf.fill(0xaa);
    let rsges: Vec<[Sge; 1]> = (0..8).map(|i| [rbuf.sge(64 * i + 16, 32)]).collect();
    let rwrs: Vec<RecvWr<'_>> = (0..8)
        .map(|i| RecvWr::new(100 + i as u64, &rsges[i]))
        .collect();
    b.qp.post_recv(&rwrs).unwrap();
    let mut src = buf(&a, 32);
    src.fill(0x33);
    let s = [src.sge(0, 32)];
    let wrs: Vec<SendWr<'_>> = (0..8).map(|i| SendWr::send(i, &s)).collect();
    a.qp.post_send(&wrs).unwrap();
    // B never polls: the fifth receive completion overflows its 4-entry CQ.
    let ev = wait_async(&b.ctx, "CQ_ERR for B's CQ", |e| {
        e.event_type == EventType::CQ_ERR && e.element == b.cq.user_handle()
    });
    assert_eq!(ev.element, b.cq.user_handle());
    wait_state(&b.qp, QpState::Err);
    // The lost completion is counted on the CQ itself (and in the port's cq_overflow).
    let snap = uroce::stats::snapshot();
    let lost = snap
        .devices
        .iter()
        .filter(|d| d.counters.get("cq_overflow") >= Some(1))
        .flat_map(|d| &d.cqs)
        .filter(|c| c.cq == b.cq.handle())
        .filter_map(|c| c.counters.get("lost_cqes"))
        .max();
    assert!(lost >= Some(1), "{snap:?}");
    // The CQ holds at most its 4 entries, all real receives; nothing outside the receive
    // buffers changed.
    let mut wc = [Wc::default(); 16];
    let n = b.cq.poll(&mut wc).unwrap();
    assert!(n <= 4, "{n} CQEs from a 4-entry CQ");
    for w in &wc[..n] {
        assert!((100..108).contains(&w.wr_id), "{w:?}");
        assert_eq!(w.qp_num, b.qp.qp_num());
    }
    for i in 0..8 {
        let base = 64 * i;
        assert!(
            rbuf[base..base + 16].iter().all(|&x| x == 0xaa),
            "canary {i} hit"
        );
        assert!(
            rbuf[base + 48..base + 64].iter().all(|&x| x == 0xaa),
            "canary {i} hit"
        );
        let body = &rbuf[base + 16..base + 48];
        assert!(body.iter().all(|&x| x == 0x33) || body.iter().all(|&x| x == 0xaa));
    }
    drop(a);
});

topo_tests!(destroy_qp_with_work_outstanding, |t| {
    let (a, b) = rc(t);
    let len = 64 * 1024;
    let src = buf(&a, len);
    let dst = buf(&b, len * 8);
    let rm = dst.remote();
    let sges = [src.sge(0, len as u32)];
    let wrs: Vec<SendWr<'_>> = (0..8)
        .map(|i| SendWr::write(i, &sges, rm.at(i * len as u64), rm.rkey).signaled())
        .collect();
    let rsge = [dst.sge(0, 64)];
    b.qp.post_recv(&[RecvWr::new(1, &rsge), RecvWr::new(2, &rsge)])
        .unwrap();
    a.qp.post_send(&wrs).unwrap();
    let (qa, qb) = (a.qp.clone(), b.qp.clone());
    let (a_cq, b_cq) = (a.cq.clone(), b.cq.clone());
    let (a_ctx, a_pd, b_pd) = (a.ctx.clone(), a.pd.clone(), b.pd.clone());
    drop((a, b));
    qa.destroy().expect("destroy QP with sends outstanding");
    qb.destroy().expect("destroy QP with receives outstanding");
    // Buffers can go right away; the device keeps working for new QPs on the same CQs.
    drop((src, dst));
    let _ = (a_cq, b_cq, a_pd, b_pd, a_ctx);
    let (a, b) = rc(t);
    let d2 = buf(&b, 8);
    let s2 = buf(&a, 8);
    b.qp.post_recv(&[RecvWr::new(9, &[d2.sge(0, 8)])]).unwrap();
    a.qp.post_send(&[SendWr::send(9, &[s2.sge(0, 8)]).signaled()])
        .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
});

topo_tests!(dereg_of_an_mr_in_use, |t| {
    let (a, b) = rc(t);
    let chunk = 64 * 1024;
    let n = 16usize;
    let mut src = buf(&a, chunk);
    src.fill(0xc3);
    // Caller memory, so the test can look at it after deregistration.
    let mut target = vec![0u8; chunk * n];
    // SAFETY: `target` outlives the registration (deregistered below, dropped after).
    let mr = unsafe {
        b.pd.reg_mr_raw(target.as_mut_ptr(), target.len(), ALL_ACCESS)
    }
    .unwrap();
    let rm = mr.remote();
    let sges = [src.sge(0, chunk as u32)];
    let wrs: Vec<SendWr<'_>> = (0..n)
        .map(|i| SendWr::write(i as u64, &sges, rm.at((i * chunk) as u64), rm.rkey).signaled())
        .collect();
    a.qp.post_send(&wrs).unwrap();
    // Let the first WRITE land, so the MR is in use while the rest are in flight.
    let first = wait1(&a.cq);
    assert_eq!((first.wr_id, first.status), (0, WcStatus::Success));
    match mr.dereg() {
        Ok(()) => {
            eprintln!("dereg_mr of an MR in use: accepted");
            // Deregistered while WRITEs target it: after DEREG_MR returns, the engine must
            // never touch the memory; WRITEs that had not run fail with REM_ACCESS_ERR
            // (and the rest flush).
            let snapshot = target.clone();
            let w = wait(&a.cq, n - 1);
            eprintln!(
                "  statuses: {:?}",
                w.iter().map(|w| w.status).collect::<Vec<_>>()
            );
            for w in &w {
                assert!(
                    matches!(
                        w.status,
                        WcStatus::Success | WcStatus::RemAccessErr | WcStatus::WrFlushErr
                    ),
                    "{w:?}"
                );
            }
            assert!(target == snapshot, "memory written after dereg_mr returned");
        }
        Err((e, mr)) => {
            eprintln!("dereg_mr of an MR in use: {e}");
            // Or the device refuses while the MR is busy; the WRITEs then all land.
            assert_eq!(e.errno(), Errno::EBUSY, "{e}");
            let w = wait(&a.cq, n - 1);
            assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
            mr.dereg().unwrap();
            assert!(target.iter().all(|&x| x == 0xc3));
        }
    }
});

#[test]
fn destroying_objects_in_use_is_ebusy() {
    let (a, _b) = rc(Topo::SameDevice);
    // The QP holds its CQ: destroying the CQ now is EBUSY and hands it back.
    let cq = a.cq.clone();
    let (e, cq) = cq.destroy().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    drop(cq);
    let started = Instant::now();
    drop(a);
    assert!(started.elapsed() < TIMEOUT);
}
