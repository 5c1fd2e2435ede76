//! rdma_cm by address and port: a client resolves the server's address and route, creates
//! its QP on the ID, connects with private data; the server listens, gets the request with
//! the client's private data, creates its QP and accepts; both see ESTABLISHED (the client
//! with the server's private data), data flows, and a disconnect ends in DISCONNECTED and
//! TIMEWAIT_EXIT on both sides. A connect to a port nobody listens on is REJECTED (8).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::rdma_cm::{ConnParam, EventChannel, RdmaCmEvent, RdmaCmEventKind as K, RdmaCmId};
use uroce::*;
use wire::cm::PortSpace;

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
        .create_qp(&pd, &QpInitAttr::new(QpType::RC, &cq, cap))
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
    std::env::set_var("UROCE_DEVICES", "rcm0=127.77.36.1,rcm1=127.77.36.2");
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
    assert_eq!(wait1(&c.cq).status, WcStatus::SUCCESS);
    let r = wait1(&s.cq);
    assert_eq!((r.status, r.byte_len), (WcStatus::SUCCESS, 4096));
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
