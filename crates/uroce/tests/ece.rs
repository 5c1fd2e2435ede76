//! Selective repeat negotiated through the CM's Enhanced Connection Establishment
//! (docs/wire.md §5.6): an rdma_cm client and server each offer it or not — by
//! `Qp::set_ece`, by `rdma_set_local_ece` for a QP they manage themselves, or by the
//! `UROCE_SELECTIVE_REPEAT=1` environment variable — and the connected RC QPs run it only
//! when both offered; the device says which QPs run it. Every connection carries data.
//!
//! One test function: the environment variable is process-wide.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::rdma_cm::{ConnParam, EventChannel, RdmaCmEvent, RdmaCmEventKind as K, RdmaCmId};
use uroce::*;
use wire::cm::PortSpace;

const DEVICES: &str = "ece0=127.77.37.1,ece1=127.77.37.2";
const CLIENT: &str = "127.77.37.1:0";
const SERVER: &str = "127.77.37.2";

fn next(chan: &EventChannel) -> RdmaCmEvent {
    chan.get_event(Some(Duration::from_secs(10)))
        .expect("an rdma_cm event within 10 s")
}

fn expect(chan: &EventChannel, kind: K) -> RdmaCmEvent {
    let e = next(chan);
    assert_eq!(e.kind, kind, "{e:?}");
    e
}

fn param() -> ConnParam {
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

struct Res {
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

const CAP: QpCap = QpCap {
    max_send_wr: 8,
    max_recv_wr: 8,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 0,
};

/// A PD and CQ on the ID's device.
fn pd_cq(id: &RdmaCmId) -> (Pd, Cq) {
    let ctx = id.context().expect("bound to a device");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(32, None, 0).expect("cq");
    (pd, cq)
}

/// A QP on the ID (rdma_create_qp), offering selective repeat by `Qp::set_ece` if `ask`.
fn qp_on(id: &RdmaCmId, ask: bool) -> Res {
    let (pd, cq) = pd_cq(id);
    let qp = id
        .create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, CAP))
        .expect("rdma_create_qp");
    if ask {
        qp.set_ece(Ece::uroce(ECE_SELECTIVE_REPEAT))
            .expect("ibv_set_ece");
    }
    Res { pd, cq, qp }
}

/// Whether the device runs selective repeat on `qp`.
fn device_sr(id: &RdmaCmId, qp: &Qp) -> bool {
    let name = id.device_name().expect("device");
    nic::device(&name)
        .expect("the process's device")
        .qp_selective_repeat(qp.qp_num())
        .expect("a live QP")
}

/// How a side offers selective repeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    No,
    /// `Qp::set_ece` on the ID's QP.
    SetEce,
    /// The environment variable, read when the QP is created.
    Env,
}

/// Connect a client to a server on `port`, each offering as told; returns whether the
/// client's and the server's QPs run selective repeat, after checking the ECE each side
/// saw and that a SEND goes through.
fn connect(port: u16, client_ask: Ask, server_ask: Ask) -> (bool, bool) {
    let server: SocketAddr = format!("{SERVER}:{port}").parse().unwrap();
    let schan = EventChannel::new().expect("channel");
    let listen = RdmaCmId::new(&schan, PortSpace::TCP).expect("id");
    listen.bind_addr(server).expect("bind");
    listen.listen(8).expect("listen");

    let cchan = EventChannel::new().expect("channel");
    let client = RdmaCmId::new(&cchan, PortSpace::TCP).expect("id");
    client
        .resolve_addr(Some(CLIENT.parse().unwrap()), server)
        .expect("resolve_addr");
    expect(&cchan, K::AddrResolved);
    client.resolve_route().expect("resolve_route");
    expect(&cchan, K::RouteResolved);
    let env = |a: Ask| {
        if a == Ask::Env {
            std::env::set_var(SELECTIVE_REPEAT_ENV, "1");
        } else {
            std::env::remove_var(SELECTIVE_REPEAT_ENV);
        }
    };
    env(client_ask);
    let c = qp_on(&client, client_ask == Ask::SetEce);
    let client_offers = client_ask != Ask::No;
    let offer = if client_offers {
        Ece::uroce(ECE_SELECTIVE_REPEAT)
    } else {
        Ece::uroce(0)
    };
    assert_eq!(
        c.qp.query_ece(),
        offer,
        "client's ibv_query_ece before connect"
    );
    client.connect(&param()).expect("connect");

    let req = expect(&schan, K::ConnectRequest);
    let conn = req.id.clone();
    let req_ece = if client_offers {
        Ece::uroce(ECE_SELECTIVE_REPEAT)
    } else {
        Ece::NONE
    };
    assert_eq!(conn.remote_ece(), req_ece, "the REQ's ECE");
    env(server_ask);
    let s = qp_on(&conn, server_ask == Ask::SetEce);
    std::env::remove_var(SELECTIVE_REPEAT_ENV);
    let sbuf = s.pd.alloc_mr(4096, ALL_ACCESS).expect("mr");
    s.qp.post_recv(&[RecvWr::new(1, &[sbuf.sge(0, 4096)])])
        .expect("recv");
    conn.accept(&param()).expect("accept");
    expect(&cchan, K::Established);
    expect(&schan, K::Established);

    let both = client_offers && server_ask != Ask::No;
    let agreed = if both { ECE_SELECTIVE_REPEAT } else { 0 };
    // The REP carries uroce's ECE (with what was agreed) only if the REQ carried it.
    let rep_ece = if client_offers {
        Ece::uroce(agreed)
    } else {
        Ece::NONE
    };
    assert_eq!(client.remote_ece(), rep_ece, "the REP's ECE");
    assert_eq!(c.qp.query_ece(), Ece::uroce(agreed), "client's agreed ECE");
    assert_eq!(s.qp.query_ece(), Ece::uroce(agreed), "server's agreed ECE");

    let mut cbuf = c.pd.alloc_mr(4096, ALL_ACCESS).expect("mr");
    let data = pattern(port as u8, 4096);
    cbuf.copy_from_slice(&data);
    c.qp.post_send(&[SendWr::send(2, &[cbuf.sge(0, 4096)]).signaled()])
        .expect("send");
    assert_eq!(wait1(&c.cq).status, WcStatus::Success);
    let r = wait1(&s.cq);
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 4096));
    assert_eq!(&sbuf[..], &data[..]);

    let sr = (device_sr(&client, &c.qp), device_sr(&conn, &s.qp));
    client.disconnect().expect("disconnect");
    expect(&schan, K::Disconnected);
    conn.disconnect().expect("answer the disconnect");
    expect(&cchan, K::Disconnected);
    expect(&cchan, K::TimewaitExit);
    expect(&schan, K::TimewaitExit);
    for id in [client, conn, listen] {
        id.destroy();
    }
    sr
}

/// A client whose QP it manages itself offers selective repeat with `rdma_set_local_ece`;
/// it reads the REP's answer with `rdma_get_remote_ece` and applies it with `Qp::set_ece`.
fn connect_own_qp(port: u16) -> (bool, bool) {
    let server: SocketAddr = format!("{SERVER}:{port}").parse().unwrap();
    let schan = EventChannel::new().expect("channel");
    let listen = RdmaCmId::new(&schan, PortSpace::TCP).expect("id");
    listen.bind_addr(server).expect("bind");
    listen.listen(8).expect("listen");
    let cchan = EventChannel::new().expect("channel");
    let client = RdmaCmId::new(&cchan, PortSpace::TCP).expect("id");
    client
        .resolve_addr(Some(CLIENT.parse().unwrap()), server)
        .expect("resolve_addr");
    expect(&cchan, K::AddrResolved);
    client.resolve_route().expect("resolve_route");
    expect(&cchan, K::RouteResolved);
    let (cpd, ccq) = pd_cq(&client);
    let cqp = cpd
        .create_qp(&QpInitAttr::new(QpType::Rc, &ccq, CAP))
        .expect("own QP");
    assert_eq!(
        client
            .set_local_ece(Ece::NONE)
            .expect_err("vendor ID 0")
            .errno(),
        Errno::EINVAL
    );
    client
        .set_local_ece(Ece::uroce(ECE_SELECTIVE_REPEAT))
        .expect("rdma_set_local_ece");
    let (a, m) = client.init_qp_attr(QpState::Init).expect("INIT attributes");
    cqp.modify(&a, m).expect("INIT");
    let p = ConnParam {
        qp_num: cqp.qp_num(),
        ..param()
    };
    client.connect(&p).expect("connect");

    let req = expect(&schan, K::ConnectRequest);
    let conn = req.id.clone();
    assert_eq!(conn.remote_ece(), Ece::uroce(ECE_SELECTIVE_REPEAT));
    let s = qp_on(&conn, true);
    conn.accept(&param()).expect("accept");
    expect(&cchan, K::ConnectResponse);
    let rep = client.remote_ece();
    assert_eq!(rep, Ece::uroce(ECE_SELECTIVE_REPEAT), "the REP's ECE");
    cqp.set_ece(rep).expect("ibv_set_ece");
    for st in [QpState::Rtr, QpState::Rts] {
        let (a, m) = client.init_qp_attr(st).expect("attributes");
        cqp.modify(&a, m).expect("modify");
    }
    client.establish().expect("rdma_establish");
    expect(&schan, K::Established);
    let sr = (device_sr(&client, &cqp), device_sr(&conn, &s.qp));
    client.disconnect().expect("disconnect");
    expect(&schan, K::Disconnected);
    conn.disconnect().expect("answer");
    expect(&cchan, K::Disconnected);
    expect(&cchan, K::TimewaitExit);
    expect(&schan, K::TimewaitExit);
    for id in [client, conn, listen] {
        id.destroy();
    }
    sr
}

#[test]
fn selective_repeat_only_when_both_offer_it_in_the_ece() {
    std::env::set_var("UROCE_DEVICES", DEVICES);
    uroce::init();
    let cases = [
        (Ask::SetEce, Ask::SetEce, true),
        (Ask::SetEce, Ask::No, false),
        (Ask::No, Ask::SetEce, false),
        (Ask::No, Ask::No, false),
        (Ask::Env, Ask::Env, true),
        (Ask::Env, Ask::No, false),
        (Ask::SetEce, Ask::Env, true),
    ];
    for (i, (c, s, want)) in cases.into_iter().enumerate() {
        let sr = connect(7600 + i as u16, c, s);
        assert_eq!(sr, (want, want), "client {c:?}, server {s:?}");
    }
    assert_eq!(
        connect_own_qp(7650),
        (true, true),
        "own QP, rdma_set_local_ece"
    );

    // A QP the CM did not connect never runs it, whatever it offers: the offer alone does
    // nothing at RTR.
    std::env::set_var(SELECTIVE_REPEAT_ENV, "1");
    let (a, b) = rc(Topo::TwoDevices);
    std::env::remove_var(SELECTIVE_REPEAT_ENV);
    assert_eq!(a.qp.query_ece(), Ece::uroce(ECE_SELECTIVE_REPEAT));
    for e in [&a, &b] {
        let dev = nic::device(e.ctx.device().name()).expect("device");
        assert_eq!(dev.qp_selective_repeat(e.qp.qp_num()), Some(false));
    }
}
