//! The Communication Manager on the wire: RC QPs connected through REQ/REP/RTU MADs on QP 1
//! (between two devices over UDP, and on one device through its internal loopback), data
//! through the connection both ways, then DREQ/DREP and timewait; a REQ nobody listens for
//! is rejected with reason 8. The CM is driven through the device handle (the layer the
//! rdma_cm library will sit on).

mod common;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use nic::cm::{AcceptParams, CmEvent, CmId, ConnectParams};
use nic::DeviceHandle;
use uroce::pair::ALL_ACCESS;
use uroce::*;
use wire::cm::{CmaHdr, PortSpace, RejReason, ServiceId, CMA_HDR_LEN};
use wire::{Psn, Qpn};

struct Side {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    gid: Gid,
    dev: DeviceHandle,
}

fn side(d: &Device) -> Side {
    let ctx = d.open().expect("open");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(64, None, 0).expect("cq");
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap))
        .expect("qp");
    let gid = ctx.query_gid(1, 0).expect("gid");
    let dev = nic::device(d.name()).expect("the embedded device runs");
    Side {
        ctx,
        pd,
        cq,
        qp,
        gid,
        dev,
    }
}

/// Events polled from a device but not yet taken, per device name: on one device the active
/// and the passive side share the event queue, and one side's wait must not lose the other's.
static STASH: Mutex<BTreeMap<String, Vec<CmEvent>>> = Mutex::new(BTreeMap::new());

/// The first event of `dev` that `pick` takes, within 10 s (the others stay for later waits).
fn wait_event<T>(dev: &DeviceHandle, mut pick: impl FnMut(&CmEvent) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        {
            let mut stash = STASH.lock().unwrap_or_else(|e| e.into_inner());
            let q = stash.entry(dev.name().to_string()).or_default();
            while let Some(e) = dev.cm_poll_event() {
                q.push(e);
            }
            if let Some(i) = q.iter().position(|e| pick(e).is_some()) {
                let e = q.remove(i);
                return pick(&e).expect("picked");
            }
        }
        assert!(
            Instant::now() < deadline,
            "no such CM event within 10 s on {}",
            dev.name()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn private_data(src: IpAddr, dst: IpAddr, user: &[u8]) -> Vec<u8> {
    let mut pd = vec![0u8; CMA_HDR_LEN];
    CmaHdr {
        cma_version: 0,
        src_port: 51000,
        src,
        dst,
    }
    .emit(&mut pd)
    .expect("cma_hdr");
    pd.extend_from_slice(user);
    pd
}

fn connect_params(a: &Side, b: &Side, port: u16, rq_psn: u32) -> ConnectParams {
    let (ia, ib) = (a.gid.to_ip(), b.gid.to_ip());
    ConnectParams {
        peer: ib,
        service_id: ServiceId::rdma_ip(PortSpace::TCP, port),
        local_gid: a.gid.0,
        remote_gid: b.gid.0,
        local_qpn: Qpn::new(a.qp.qp_num()),
        starting_psn: Psn::new(rq_psn),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        path_mtu: 3,
        transport_type: 0,
        srq: false,
        flow_label: 0,
        traffic_class: 0,
        hop_limit: 64,
        private_data: private_data(ia, ib, b"hello"),
        ece: wire::cm::Ece::NONE,
    }
}

fn opts(sq_psn: u32) -> ConnectOpts {
    ConnectOpts {
        sq_psn,
        ..ConnectOpts::default()
    }
}

/// Connect `a` (active) to `b` (passive, listening on `port`) through the CM and check the
/// connection carries data both ways; then disconnect and wait for timewait to end.
fn connect_through_cm(a: &Side, b: &Side, port: u16) {
    let sid = ServiceId::rdma_ip(PortSpace::TCP, port);
    let listen = b.dev.with_cm(|cm, _| cm.listen(sid, None)).expect("listen");
    let (a_rq_psn, b_rq_psn) = (0x12_3456, 0xAB_CDEF);
    let p = connect_params(a, b, port, a_rq_psn);
    let active = a
        .dev
        .with_cm(|cm, now| cm.connect(now, &p))
        .expect("connect");

    // Passive: the request names our listener and the active QP; bring our QP to RTS with
    // its values, then answer with the REP.
    let (pid, req) = wait_event(&b.dev, |e| match e {
        CmEvent::ConnectRequest {
            listen: l, id, req, ..
        } if *l == listen => Some((*id, req.clone())),
        _ => None,
    });
    assert_eq!(req.local_qpn, Qpn::new(a.qp.qp_num()));
    assert_eq!(
        &req.private_data[CMA_HDR_LEN..CMA_HDR_LEN + 5],
        b"hello",
        "private data after rdma_cm's header"
    );
    let remote_a = QpEndpoint {
        qpn: req.local_qpn.value(),
        psn: b_rq_psn,
        gid: Gid(req.primary.local_gid),
    };
    b.qp.connect(&remote_a, &opts(req.starting_psn.value()))
        .expect("passive QP to RTS");
    let accept = AcceptParams {
        local_qpn: Qpn::new(b.qp.qp_num()),
        starting_psn: Psn::new(b_rq_psn),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: b"welcome".to_vec(),
        ece: wire::cm::Ece::NONE,
    };
    b.dev
        .with_cm(|cm, now| cm.accept(now, pid, &accept))
        .expect("accept");

    // Active: the response carries the passive QP; RTS, then the RTU.
    let rep = wait_event(&a.dev, |e| match e {
        CmEvent::ConnectResponse { id, rep, .. } if *id == active => Some(rep.clone()),
        _ => None,
    });
    assert_eq!(rep.local_qpn, Qpn::new(b.qp.qp_num()));
    assert_eq!(&rep.private_data[..7], b"welcome");
    let remote_b = QpEndpoint {
        qpn: rep.local_qpn.value(),
        psn: a_rq_psn,
        gid: b.gid,
    };
    a.qp.connect(&remote_b, &opts(rep.starting_psn.value()))
        .expect("active QP to RTS");
    a.dev
        .with_cm(|cm, now| cm.establish(now, active))
        .expect("establish");
    wait_event(&b.dev, |e| {
        matches!(e, CmEvent::Established { id } if *id == pid).then_some(())
    });

    // Data both ways through the connection the CM set up.
    for (tx, rx, seed) in [(a, b, 3u8), (b, a, 4u8)] {
        let mut src = tx.pd.alloc_mr(4096, ALL_ACCESS).expect("mr");
        let data = pattern(seed, 4096);
        src.copy_from_slice(&data);
        let dst = rx.pd.alloc_mr(4096, ALL_ACCESS).expect("mr");
        rx.qp
            .post_recv(&[RecvWr::new(1, &[dst.sge(0, 4096)])])
            .expect("post_recv");
        tx.qp
            .post_send(&[SendWr::send(2, &[src.sge(0, 4096)]).signaled()])
            .expect("post_send");
        assert_eq!(wait1(&tx.cq).status, WcStatus::Success);
        let r = wait1(&rx.cq);
        assert_eq!((r.status, r.byte_len), (WcStatus::Success, 4096));
        assert_eq!(&dst[..], &data[..]);
    }

    // Disconnect from the active side; the passive side answers its DREQ.
    a.dev
        .with_cm(|cm, now| cm.disconnect(now, active))
        .expect("disconnect");
    wait_event(&b.dev, |e| {
        matches!(e, CmEvent::Disconnected { id, timed_out: false } if *id == pid).then_some(())
    });
    b.dev
        .with_cm(|cm, now| cm.disconnect(now, pid))
        .expect("drep");
    wait_event(&a.dev, |e| {
        matches!(e, CmEvent::Disconnected { id, timed_out: false } if *id == active).then_some(())
    });
    for (dev, id) in [(&a.dev, active), (&b.dev, pid)] {
        wait_event(dev, |e| {
            matches!(e, CmEvent::TimewaitExit { id: t } if *t == id).then_some(())
        });
        dev.with_cm(|cm, now| cm.destroy(now, id));
    }
    b.dev.with_cm(|cm, now| cm.destroy(now, listen));
    // No MAD needed a second try on this clean path.
    for dev in [&a.dev, &b.dev] {
        assert_eq!(dev.with_cm(|cm, _| cm.stats().retransmits), 0);
    }
    let _ = (&a.ctx, &b.ctx);
}

/// Each test has devices of its own: a device's CM events go to whoever polls them.
fn dev(name: &str, addr: &str) -> Device {
    uroce::device(name, addr.parse().expect("address"))
}

#[test]
fn rc_connection_through_the_cm_between_two_devices() {
    let (da, db) = (dev("cma0", "127.77.31.1"), dev("cma1", "127.77.31.2"));
    let (a, b) = (side(&da), side(&db));
    connect_through_cm(&a, &b, 7174);
}

#[test]
fn rc_connection_through_the_cm_on_one_device() {
    let da = dev("cmb0", "127.77.32.1");
    let (a, b) = (side(&da), side(&da));
    connect_through_cm(&a, &b, 7175);
}

#[test]
fn req_to_a_port_nobody_listens_on_is_rejected_with_reason_8() {
    let (da, db) = (dev("cmc0", "127.77.33.1"), dev("cmc1", "127.77.33.2"));
    let (a, b) = (side(&da), side(&db));
    let p = connect_params(&a, &b, 7999, 1);
    let id: CmId = a
        .dev
        .with_cm(|cm, now| cm.connect(now, &p))
        .expect("connect");
    let reason = wait_event(&a.dev, |e| match e {
        CmEvent::Rejected { id: r, reason, .. } if *r == id => Some(*reason),
        _ => None,
    });
    assert_eq!(reason, RejReason::INVALID_SERVICE_ID);
}

/// The same connection through the context's CM channel (the UROCE_CM commands): events on
/// the channel fd, IDs owned by the context that made them, the listener gone with its
/// context.
#[test]
fn cm_channel_connects_and_keeps_ids_to_their_context() {
    use uroce::cm::{CmAccept, CmConnect, CmEvent as Ev, CmId as Id};
    let (da, db) = (dev("cmd0", "127.77.34.1"), dev("cmd1", "127.77.34.2"));
    let (a, b) = (side(&da), side(&db));
    let (cma, cmb) = (
        a.ctx.cm_channel().expect("a"),
        b.ctx.cm_channel().expect("b"),
    );
    assert_eq!(
        a.ctx.cm_channel().expect_err("one per context").errno(),
        Errno::EEXIST
    );
    let get = |ch: &uroce::cm::CmChannel| {
        ch.get_event(Some(Duration::from_secs(10)))
            .expect("read event")
            .expect("an event within 10 s")
    };
    let sid = ServiceId::rdma_ip(PortSpace::TCP, 7200);
    let listen = cmb.listen(sid, Some(b.gid.to_ip())).expect("listen");
    assert_eq!(
        cmb.listen(sid, None).expect_err("taken").errno(),
        Errno(98),
        "EADDRINUSE"
    );

    let (ip_a, ip_b) = (a.gid.to_ip(), b.gid.to_ip());
    let mut p = CmConnect::new(&a.qp, ip_b, sid, 0x10_0000);
    p.private_data = private_data(ip_a, ip_b, b"hi");
    // A QP that is not this context's is refused.
    let other = side(&da);
    let mut stolen = p.clone();
    stolen.qpn = other.qp.qp_num();
    assert_eq!(
        cma.connect(&stolen).expect_err("foreign QP").errno(),
        Errno::EINVAL
    );
    let active = cma.connect(&p).expect("connect");

    let (pid, req) = match get(&cmb) {
        Ev::ConnectRequest {
            id,
            listen: l,
            peer,
            req,
            ece,
        } => {
            assert_eq!((l, peer), (listen, ip_a));
            assert_eq!(ece, Ece::NONE, "no ECE asked, none sent");
            (id, req)
        }
        e => panic!("expected a request, got {e:?}"),
    };
    assert_eq!(&req.private_data[CMA_HDR_LEN..CMA_HDR_LEN + 2], b"hi");
    // Another context of the same device cannot answer for this one.
    let intruder = side(&db);
    let ich = intruder.ctx.cm_channel().expect("channel");
    let acc = CmAccept {
        qpn: b.qp.qp_num(),
        rq_psn: 0x20_0000,
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: Vec::new(),
        ece_options: None,
    };
    assert_eq!(
        ich.accept(pid, &acc).expect_err("not its ID").errno(),
        Errno::EINVAL
    );
    b.qp.connect(
        &QpEndpoint {
            qpn: req.local_qpn.value(),
            psn: 0x20_0000,
            gid: Gid(req.primary.local_gid),
        },
        &opts(req.starting_psn.value()),
    )
    .expect("passive RTS");
    cmb.accept(pid, &acc).expect("accept");
    let rep = match get(&cma) {
        Ev::ConnectResponse { id, rep, ece } if id == active => {
            assert_eq!(ece, Ece::NONE, "no ECE asked, none sent");
            rep
        }
        e => panic!("expected the response, got {e:?}"),
    };
    a.qp.connect(
        &QpEndpoint {
            qpn: rep.local_qpn.value(),
            psn: 0x10_0000,
            gid: b.gid,
        },
        &opts(rep.starting_psn.value()),
    )
    .expect("active RTS");
    cma.establish(active).expect("rtu");
    assert_eq!(get(&cmb), Ev::Established { id: pid });

    let mut src = a.pd.alloc_mr(1000, ALL_ACCESS).expect("mr");
    src.copy_from_slice(&pattern(9, 1000));
    let dst = b.pd.alloc_mr(1000, ALL_ACCESS).expect("mr");
    b.qp.post_recv(&[RecvWr::new(1, &[dst.sge(0, 1000)])])
        .expect("recv");
    a.qp.post_send(&[SendWr::send(2, &[src.sge(0, 1000)]).signaled()])
        .expect("send");
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    assert_eq!(wait1(&b.cq).byte_len, 1000);
    assert_eq!(&dst[..], &pattern(9, 1000)[..]);

    cmb.disconnect(pid).expect("dreq");
    assert_eq!(
        get(&cma),
        Ev::Disconnected {
            id: active,
            timed_out: false
        }
    );
    cma.disconnect(active).expect("drep");
    assert_eq!(
        get(&cmb),
        Ev::Disconnected {
            id: pid,
            timed_out: false
        }
    );
    assert_eq!(get(&cma), Ev::TimewaitExit { id: active });
    assert_eq!(get(&cmb), Ev::TimewaitExit { id: pid });
    cma.destroy(active).expect("destroy");
    assert_eq!(
        cma.destroy(active).expect_err("gone").errno(),
        Errno::EINVAL
    );

    // The listener leaves with its context: the same request is now refused with reason 8.
    drop((cmb, b, dst, intruder, ich));
    let again = cma.connect(&p).expect("connect");
    match get(&cma) {
        Ev::Rejected { id, reason, .. } => {
            assert_eq!((id, reason), (again, RejReason::INVALID_SERVICE_ID.0));
        }
        e => panic!("expected a REJ, got {e:?}"),
    }
    let _: Id = again;
}
