//! rdma_cm by address and port: a client resolves the server's address and route, creates
//! its QP on the ID, connects with private data; the server listens, gets the request with
//! the client's private data, creates its QP and accepts; both see ESTABLISHED (the client
//! with the server's private data), data flows, and a disconnect ends in DISCONNECTED and
//! TIMEWAIT_EXIT on both sides. A connect to a port nobody listens on is REJECTED (8).
//!
//! UD (RDMA_PS_UDP): the connect is a SIDR_REQ, the server's CONNECT_REQUEST carries the
//! client's private data, its accept is the SIDR_REP; the client's ESTABLISHED names the
//! server's QP and Q_Key and gives the AH a datagram reaches it with. A rejected SIDR and one
//! to a port nobody listens on end in UNREACHABLE with the SIDR status (2, 1).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::rdma_cm::{
    ConnParam, EventChannel, RdmaCmEvent, RdmaCmEventKind as K, RdmaCmId, RDMA_UDP_QKEY,
};
use uroce::*;
use wire::cm::PortSpace;

/// Every test's devices (the tests may share a process): each test uses its own pair, so
/// that tests in separate processes do not share addresses either.
const DEVICES: &str = "rcm0=127.77.36.1,rcm1=127.77.36.2,rcm2=127.77.36.3,rcm3=127.77.36.4";

fn next(chan: &EventChannel) -> RdmaCmEvent {
    chan.get_event(Some(Duration::from_secs(10)))
        .expect("an rdma_cm event within 10 s")
}

fn expect(chan: &EventChannel, kind: K) -> RdmaCmEvent {
    let e = next(chan);
    assert_eq!(e.kind, kind, "{e:?}");
    e
}

struct Res {
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn qp_on(id: &RdmaCmId) -> Res {
    qp_of(id, QpType::Rc)
}

fn qp_of(id: &RdmaCmId, ty: QpType) -> Res {
    let ctx = id.context().expect("bound to a device");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(32, None, 0).expect("cq");
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = id
        .create_qp(&pd, &QpInitAttr::new(ty, &cq, cap))
        .expect("rdma_create_qp");
    Res { pd, cq, qp }
}

fn param(pd: &[u8]) -> ConnParam {
    ConnParam {
        private_data: pd.to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

#[test]
fn rdma_cm_connect_accept_send_disconnect() {
    // The IDs find their devices among the configured ones, as rdma_cm finds a netdev.
    std::env::set_var("UROCE_DEVICES", DEVICES);
    uroce::init();
    let client_ip: SocketAddr = "127.77.36.1:0".parse().unwrap();
    let server: SocketAddr = "127.77.36.2:7471".parse().unwrap();

    let schan = EventChannel::new().expect("channel");
    let listen = RdmaCmId::new(&schan, PortSpace::TCP).expect("id");
    listen.bind_addr(server).expect("bind");
    listen.listen(8).expect("listen");

    let cchan = EventChannel::new().expect("channel");
    let client = RdmaCmId::new(&cchan, PortSpace::TCP).expect("id");
    client
        .resolve_addr(Some(client_ip), server)
        .expect("resolve_addr");
    expect(&cchan, K::AddrResolved);
    client.resolve_route().expect("resolve_route");
    expect(&cchan, K::RouteResolved);
    let c = qp_on(&client);
    let cbuf = c.pd.alloc_mr(4096, ALL_ACCESS).expect("mr");
    client.connect(&param(b"client hello")).expect("connect");

    let req = expect(&schan, K::ConnectRequest);
    assert!(req.listen_id.as_ref() == Some(&listen));
    assert_eq!(
        req.param.private_data.len(),
        56,
        "the REQ's 92 bytes less rdma_cm's 36"
    );
    assert_eq!(&req.param.private_data[..12], b"client hello");
    assert_eq!(req.param.qp_num, c.qp.qp_num());
    let conn = req.id.clone();
    assert_eq!(conn.dst_addr().map(|a| a.ip()), Some(client_ip.ip()));
    let s = qp_on(&conn);
    let sbuf = s.pd.alloc_mr(4096, ALL_ACCESS).expect("mr");
    s.qp.post_recv(&[RecvWr::new(1, &[sbuf.sge(0, 4096)])])
        .expect("recv");
    conn.accept(&param(b"server welcome")).expect("accept");

    let est = expect(&cchan, K::Established);
    assert_eq!(est.param.private_data.len(), 196);
    assert_eq!(&est.param.private_data[..14], b"server welcome");
    expect(&schan, K::Established);

    let mut cbuf = cbuf;
    let data = pattern(5, 4096);
    cbuf.copy_from_slice(&data);
    c.qp.post_send(&[SendWr::send(2, &[cbuf.sge(0, 4096)]).signaled()])
        .expect("send");
    assert_eq!(wait1(&c.cq).status, WcStatus::Success);
    let r = wait1(&s.cq);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 4096));
    assert_eq!(&sbuf[..], &data[..]);

    client.disconnect().expect("disconnect");
    expect(&schan, K::Disconnected);
    conn.disconnect().expect("answer the disconnect");
    expect(&cchan, K::Disconnected);
    expect(&cchan, K::TimewaitExit);
    expect(&schan, K::TimewaitExit);

    // Nobody listens on 7472: REJECTED with reason 8 (invalid service ID).
    let other = RdmaCmId::new(&cchan, PortSpace::TCP).expect("id");
    other
        .resolve_addr(Some(client_ip), "127.77.36.2:7472".parse().unwrap())
        .expect("resolve");
    expect(&cchan, K::AddrResolved);
    other.resolve_route().expect("route");
    expect(&cchan, K::RouteResolved);
    let _o = qp_on(&other);
    other.connect(&param(b"")).expect("connect");
    let rej = expect(&cchan, K::Rejected);
    assert_eq!(rej.status, 8);

    for id in [client, conn, listen, other] {
        id.destroy();
    }
}

#[test]
fn rdma_cm_ud_sidr_resolve_send_reject() {
    std::env::set_var("UROCE_DEVICES", DEVICES);
    uroce::init();
    let client_ip: SocketAddr = "127.77.36.3:0".parse().unwrap();
    let server: SocketAddr = "127.77.36.4:7174".parse().unwrap();

    let schan = EventChannel::new().expect("channel");
    let listen = RdmaCmId::new(&schan, PortSpace::UDP).expect("id");
    assert!(listen.is_ud());
    listen.bind_addr(server).expect("bind");
    listen.listen(8).expect("listen");

    let cchan = EventChannel::new().expect("channel");
    let ud_client = |chan: &EventChannel, to: SocketAddr| {
        let id = RdmaCmId::new(chan, PortSpace::UDP).expect("id");
        id.resolve_addr(Some(client_ip), to).expect("resolve_addr");
        expect(chan, K::AddrResolved);
        id.resolve_route().expect("resolve_route");
        expect(chan, K::RouteResolved);
        let r = qp_of(&id, QpType::Ud);
        (id, r)
    };
    let (client, c) = ud_client(&cchan, server);
    // rdma_create_qp leaves a UD QP ready to send, with rdma_cm's Q_Key.
    let qa =
        c.qp.query(QpAttrMask::STATE | QpAttrMask::QKEY)
            .expect("query");
    assert_eq!((qa.qp_state, qa.qkey), (QpState::Rts, RDMA_UDP_QKEY));
    client
        .connect(&param(b"ud hello"))
        .expect("connect (SIDR_REQ)");

    let req = expect(&schan, K::ConnectRequest);
    assert!(req.listen_id.as_ref() == Some(&listen));
    assert_eq!(
        req.param.private_data.len(),
        180,
        "the SIDR_REQ's 216 bytes less rdma_cm's 36"
    );
    assert_eq!(&req.param.private_data[..8], b"ud hello");
    let conn = req.id.clone();
    assert_eq!(conn.dst_addr().map(|a| a.ip()), Some(client_ip.ip()));
    let s = qp_of(&conn, QpType::Ud);
    let len = 256usize;
    let sbuf = s.pd.alloc_mr(GRH_BYTES + len, ALL_ACCESS).expect("mr");
    s.qp.post_recv(&[RecvWr::new(1, &[sbuf.sge(0, (GRH_BYTES + len) as u32)])])
        .expect("recv");
    conn.accept(&param(b"ud welcome"))
        .expect("accept (SIDR_REP)");

    let est = expect(&cchan, K::Established);
    assert_eq!(est.param.private_data.len(), 136);
    assert_eq!(&est.param.private_data[..10], b"ud welcome");
    let ud = est.ud.expect("UD parameters on ESTABLISHED");
    assert_eq!((ud.qp_num, ud.qkey), (s.qp.qp_num(), RDMA_UDP_QKEY));
    assert_eq!(ud.ah_attr.grh.dgid, Gid(wire::ip::gid_of_ip(server.ip())));

    let ah = ud.create_ah(&c.pd).expect("AH toward the server");
    let mut cbuf = c.pd.alloc_mr(len, ALL_ACCESS).expect("mr");
    let data = pattern(9, len);
    cbuf.copy_from_slice(&data);
    c.qp.post_send(&[
        SendWr::ud_send(2, &[cbuf.sge(0, len as u32)], &ah, ud.qp_num, ud.qkey).signaled(),
    ])
    .expect("send");
    assert_eq!(wait1(&c.cq).status, WcStatus::Success);
    let r = wait1(&s.cq);
    assert_eq!(
        (r.status, r.byte_len),
        (WcStatus::Success, (GRH_BYTES + len) as u32)
    );
    assert_eq!(r.src_qp, c.qp.qp_num());
    assert_eq!(&sbuf[GRH_BYTES..], &data[..]);

    // The server refuses the next one: UNREACHABLE with SIDR status 2 (REJECT) and the
    // server's private data.
    let (refused, _r) = ud_client(&cchan, server);
    refused.connect(&param(b"")).expect("connect");
    let req = expect(&schan, K::ConnectRequest);
    req.id.reject(b"not you").expect("reject (SIDR_REP)");
    let un = expect(&cchan, K::Unreachable);
    assert_eq!(un.status, 2);
    assert_eq!(&un.param.private_data[..7], b"not you");

    // Nobody listens on 7175: SIDR status 1 (service not supported).
    let (nobody, _n) = ud_client(&cchan, "127.77.36.4:7175".parse().unwrap());
    nobody.connect(&param(b"")).expect("connect");
    let un = expect(&cchan, K::Unreachable);
    assert_eq!(un.status, 1);

    for id in [client, conn, listen, refused, req.id, nobody] {
        id.destroy();
    }
}
