//! verbs against a fake control plane and toy engine (tests/fake): command encoding,
//! ring and doorbell writing, polling, event mode, error paths and teardown order.

mod fake;

use std::sync::Arc;
use std::time::Duration;

use abi::cmd::Command;
use abi::provider::DeviceSpec;
use fake::FakeProvider;
use verbs::*;

fn open(parking: bool) -> (Arc<FakeProvider>, Context) {
    let p = FakeProvider::new(parking);
    let dev = Device::new(
        DeviceSpec {
            name: "fake0".into(),
            addr: "127.0.0.1".parse().unwrap(),
        },
        p.clone(),
    );
    let ctx = dev.open().expect("open fake device");
    (p, ctx)
}

struct Setup {
    p: Arc<FakeProvider>,
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: MrBuf,
}

fn setup(parking: bool, sq_sig_all: bool) -> Setup {
    let (p, ctx) = open(parking);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None, 0).unwrap();
    let mut attr = QpInitAttr::new(
        QpType::Rc,
        &cq,
        QpCap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 4,
            max_recv_sge: 2,
            max_inline_data: 64,
        },
    );
    attr.sq_sig_all = sq_sig_all;
    let qp = pd.create_qp(&attr).unwrap();
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let remote = qp.endpoint(
        0,
        Gid::from("127.0.0.1".parse::<std::net::IpAddr>().unwrap()),
    );
    qp.connect(&remote, &ConnectOpts::default()).unwrap();
    Setup {
        p,
        ctx,
        pd,
        cq,
        qp,
        mr,
    }
}

fn poll_n(cq: &Cq, n: usize) -> Vec<Wc> {
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut wc = [Wc::default(); 8];
    while out.len() < n {
        let k = cq.poll(&mut wc).unwrap();
        out.extend_from_slice(&wc[..k]);
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {n} completions",
            out.len()
        );
        std::thread::yield_now();
    }
    out
}

#[test]
fn queries_decode_the_control_planes_answers() {
    let (_p, ctx) = open(false);
    let d = ctx.query_device().unwrap();
    assert_eq!(d.vendor_id, 0xffffff);
    assert_eq!(d.max_qp_wr, 1024);
    assert_eq!(d.phys_port_cnt, 1);
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::ACTIVE);
    assert_eq!(port.active_mtu, Mtu::Mtu1024);
    assert_eq!(port.link_layer, LinkLayer::ETHERNET);
    let e = ctx.query_port(2).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    assert_eq!(e.kind(), ErrorKind::ControlPlane);
    assert_eq!(e.op(), "query_port");
    let g = ctx.query_gid_entry(1, 0).unwrap();
    assert_eq!(
        g.gid.to_ip(),
        "127.0.0.1".parse::<std::net::IpAddr>().unwrap()
    );
    assert_eq!(g.gid_type, GidType::ROCE_V2);
    assert_eq!(g.gid.to_string(), "0000:0000:0000:0000:0000:ffff:7f00:0001");
    // Empty slot: zeros from query_gid, ENODATA from the entry query; beyond: EINVAL.
    assert!(ctx.query_gid(1, 1).unwrap().is_zero());
    assert_eq!(
        ctx.query_gid_entry(1, 1).unwrap_err().errno(),
        Errno::ENODATA
    );
    assert_eq!(ctx.query_gid(1, 2).unwrap_err().errno(), Errno::EINVAL);
    assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xffff);
    assert_eq!(ctx.max_inline_data(), 64);
}

#[test]
fn malformed_reply_is_a_protocol_error_and_poisons_the_channel() {
    let (p, ctx) = open(false);
    p.with(|s| s.garble_next_pkey = true);
    let e = ctx.query_pkey(1, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol);
    // The stream may be out of step now: later commands fail fast instead of misparsing.
    let e = ctx.query_device().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol);
}

#[test]
fn reg_mr_masks_optional_access_bits_and_objects_die_children_first() {
    let (p, ctx) = open(false);
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd
        .alloc_mr(
            100,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::RELAXED_ORDERING,
        )
        .unwrap();
    assert_eq!(mr.addr() % PAGE_SIZE as u64, 0);
    assert_eq!(mr.len(), 100);
    mr[99] = 5;
    assert_eq!(mr.as_slice()[99], 5);
    let reg = p.with(|s| s.reg_mrs[0]);
    assert_eq!(reg.start, mr.addr());
    assert_eq!(reg.hca_va, mr.addr());
    assert_eq!(reg.length, 100);
    assert_eq!(
        AccessFlags(reg.access_flags),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ
    );
    assert_eq!(
        mr.sge(10, 20),
        Sge {
            addr: mr.addr() + 10,
            length: 20,
            lkey: mr.lkey()
        }
    );
    // Dropping the PD handle first must not deallocate it while the MR lives.
    drop(pd);
    assert!(!p.with(|s| s.commands.contains(&Command::DEALLOC_PD)));
    drop(mr);
    let cmds = p.with(|s| s.commands.clone());
    let dereg = cmds.iter().position(|c| *c == Command::DEREG_MR).unwrap();
    let dealloc = cmds.iter().position(|c| *c == Command::DEALLOC_PD).unwrap();
    assert!(dereg < dealloc, "{cmds:?}");
    drop(ctx);
}

#[test]
fn dereg_failure_hands_the_region_back() {
    let (_p, ctx) = open(false);
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    mr.dereg().unwrap();
    // A raw registration of memory we keep alive for the test.
    let mut buf = vec![0u8; 64];
    // SAFETY: `buf` outlives the MR (the MR is deregistered or dropped below first).
    let raw =
        unsafe { pd.reg_mr_raw(buf.as_mut_ptr(), buf.len(), AccessFlags::LOCAL_WRITE) }.unwrap();
    assert_eq!(raw.addr(), buf.as_ptr() as u64);
    raw.dereg().unwrap();
}

#[test]
fn post_send_writes_every_opcode_into_the_ring_with_one_doorbell() {
    let s = setup(false, false);
    let mr = &s.mr;
    let sge = [mr.sge(0, 8), mr.sge(64, 100)];
    let one = mr.sge(128, 8);
    let ah_less = [
        SendWr::send(1, &sge).signaled(),
        SendWr::send(2, &sge[..1]).with_imm(0x1234_5678).signaled(),
        SendWr::send_with_inv(3, &sge, 0xabcd).signaled(),
        SendWr::write(4, &sge, 0x1000, 0x77).signaled(),
        SendWr::write(5, &sge, 0x2000, 0x78).with_imm(7).signaled(),
        SendWr::read(6, &sge, 0x3000, 0x79).signaled(),
        SendWr::compare_swap(7, &one, 0x4000, 0x7a, 10, 20).signaled(),
        SendWr::fetch_add(8, &one, 0x5000, 0x7b, 3).signaled(),
        SendWr::send_inline(9, b"hello inline")
            .signaled()
            .solicited(),
        SendWr::write(10, &[], 0x6000, 0x7c)
            .inline(b"xyz")
            .signaled(),
        SendWr::send(11, &sge), // unsignaled: no completion
    ];
    s.qp.post_send(&ah_less).unwrap();
    s.p.wait_for("11 WQEs", |sh| sh.seen.len() == 11);
    let seen = s.p.with(|sh| sh.seen.clone());
    let op = |i: usize| WrOpcode::from_raw(seen[i].wqe.opcode).expect("a known opcode");
    assert_eq!(op(0), WrOpcode::Send);
    assert_eq!(seen[0].sges, sge.to_vec());
    assert_eq!(op(1), WrOpcode::SendWithImm);
    assert_eq!(seen[1].wqe.imm_data(), 0x1234_5678);
    assert_eq!(op(2), WrOpcode::SendWithInv);
    assert_eq!(seen[2].wqe.ex, 0xabcd);
    assert_eq!(
        (op(3), seen[3].wqe.remote_addr, seen[3].wqe.rkey),
        (WrOpcode::RdmaWrite, 0x1000, 0x77)
    );
    assert_eq!(
        (op(4), seen[4].wqe.imm_data()),
        (WrOpcode::RdmaWriteWithImm, 7)
    );
    assert_eq!(
        (op(5), seen[5].wqe.remote_addr),
        (WrOpcode::RdmaRead, 0x3000)
    );
    assert_eq!(
        (
            op(6),
            seen[6].wqe.compare_add,
            seen[6].wqe.swap,
            seen[6].sges.clone()
        ),
        (WrOpcode::AtomicCmpAndSwp, 10, 20, vec![one])
    );
    assert_eq!(
        (op(7), seen[7].wqe.compare_add),
        (WrOpcode::AtomicFetchAndAdd, 3)
    );
    assert_eq!(seen[8].inline, b"hello inline");
    let f = SendFlags(seen[8].wqe.send_flags);
    assert!(f.contains(SendFlags::INLINE | SendFlags::SOLICITED | SendFlags::SIGNALED));
    assert_eq!(
        (op(9), seen[9].inline.as_slice()),
        (WrOpcode::RdmaWrite, &b"xyz"[..])
    );
    assert!(!SendFlags(seen[10].wqe.send_flags).contains(SendFlags::SIGNALED));
    let wcs = poll_n(&s.cq, 10);
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (1..=10).collect::<Vec<_>>());
    assert!(wcs
        .iter()
        .all(|w| w.is_success() && w.qp_num == s.qp.qp_num()));
    assert_eq!(wcs[5].opcode, WcOpcode::RdmaRead);
    assert_eq!(wcs[6].opcode, WcOpcode::CompSwap);
    std::thread::sleep(Duration::from_millis(20));
    let mut wc = [Wc::default(); 4];
    assert_eq!(s.cq.poll(&mut wc).unwrap(), 0, "unsignaled WR completed");
    // The post list rang the doorbell once, so the engine saw all 11 in one drain; the
    // fake engine only processes on doorbells, so it got them.
    drop(s);
}

#[test]
fn sq_sig_all_signals_every_wr() {
    let s = setup(false, true);
    let sge = [s.mr.sge(0, 8)];
    s.qp.post_send(&[SendWr::send(1, &sge), SendWr::send(2, &sge)])
        .unwrap();
    let wcs = poll_n(&s.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (1, 2));
}

#[test]
fn post_errors_report_the_first_bad_wr_and_keep_the_earlier_ones() {
    let s = setup(false, false);
    let five: Vec<Sge> = (0..5).map(|i| s.mr.sge(i * 8, 8)).collect();
    let ok = [s.mr.sge(0, 8)];
    let big = [0u8; 65];
    let wrs = [
        SendWr::send(1, &ok).signaled(),
        SendWr::send(2, &five).signaled(), // max_send_sge is 4
        SendWr::send(3, &ok).signaled(),
    ];
    let e = s.qp.post_send(&wrs).unwrap_err();
    assert_eq!(e.index, 1);
    assert_eq!(e.error.errno(), Errno::EINVAL);
    assert_eq!(e.error.kind(), ErrorKind::Local);
    let e = s.qp.post_send(&[SendWr::send_inline(4, &big)]).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (0, Errno::EINVAL));
    let wcs = poll_n(&s.cq, 1);
    assert_eq!(wcs[0].wr_id, 1);
    // A UD destination on an RC QP is refused.
    let ah = s.pd.create_ah(&AhAttr::roce(Gid::default(), 0, 1)).unwrap();
    let e =
        s.qp.post_send(&[SendWr::ud_send(5, &ok, &ah, 1, 2)])
            .unwrap_err();
    assert_eq!(e.error.errno(), Errno::EINVAL);
}

#[test]
fn ring_full_is_enomem_at_the_overflowing_wr() {
    let (p, ctx) = open(false);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None, 0).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(
            QpType::Rc,
            &cq,
            QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ))
        .unwrap();
    assert_eq!(qp.cap().max_recv_wr, 4);
    let mr = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 8)];
    qp.connect(&qp.endpoint(0, Gid::default()), &ConnectOpts::default())
        .unwrap();
    // The RQ has 4 slots and nobody consumes it.
    let recvs: Vec<RecvWr<'_>> = (0..6).map(|i| RecvWr::new(i, &sge)).collect();
    let e = qp.post_recv(&recvs).unwrap_err();
    assert_eq!((e.index, e.error.errno()), (4, Errno::ENOMEM));
    let got = p.take_recvs(qp.qp_num(), 10);
    assert_eq!(
        got.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(got[2].1, sge.to_vec());
    // Consumed slots are reusable.
    qp.post_recv(&recvs[4..]).unwrap();
    assert_eq!(p.take_recvs(qp.qp_num(), 10).len(), 2);
}

#[test]
fn posting_in_the_wrong_state_is_einval() {
    let (_p, ctx) = open(false);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(
            QpType::Rc,
            &cq,
            QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ))
        .unwrap();
    let mr = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 8)];
    assert_eq!(qp.state(), QpState::Reset);
    let e = qp.post_send(&[SendWr::send(1, &sge)]).unwrap_err();
    assert_eq!(e.error.errno(), Errno::EINVAL);
    let e = qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap_err();
    assert_eq!(e.error.errno(), Errno::EINVAL);
    let e = qp.post_send_cmd(&[SendWr::send(1, &sge)]).unwrap_err();
    assert_eq!(e.error.errno(), Errno::EINVAL);
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();
    qp.post_recv(&[RecvWr::new(1, &sge)]).unwrap();
    assert!(qp.post_send(&[SendWr::send(1, &sge)]).is_err());
    assert_eq!(qp.query(QpAttrMask::STATE).unwrap().qp_state, QpState::Init);
}

#[test]
fn slow_path_commands_post_and_poll() {
    let s = setup(false, false);
    let sge = [s.mr.sge(0, 16)];
    s.qp.post_send_cmd(&[
        SendWr::write(21, &sge, 0x9000, 5).signaled(),
        SendWr::fetch_add(22, &sge[0], 0x9008, 5, 1).signaled(),
    ])
    .unwrap();
    let seen = s.p.with(|sh| sh.seen.clone());
    assert!(seen.iter().all(|w| w.via_cmd));
    assert_eq!(seen[0].wqe.remote_addr, 0x9000);
    assert_eq!(seen[1].wqe.compare_add, 1);
    s.qp.post_send_cmd(&[SendWr::send_inline(24, b"inline via command")])
        .unwrap();
    let last = s.p.with(|sh| sh.seen.last().cloned().unwrap());
    assert_eq!(last.inline, b"inline via command");
    assert!(SendFlags(last.wqe.send_flags).contains(SendFlags::INLINE));
    // The control plane consumes the CQ ring for POLL_CQ; then fast polling resumes
    // from where it left off.
    let mut wc = [Wc::default(); 1];
    assert_eq!(s.cq.poll_cmd(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 21);
    s.qp.post_send(&[SendWr::send(23, &sge).signaled()])
        .unwrap();
    let wcs = poll_n(&s.cq, 2);
    assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (22, 23));
    s.qp.post_recv_cmd(&[RecvWr::new(31, &sge)]).unwrap();
    assert_eq!(
        s.p.with(|sh| sh.cmd_recvs.clone()),
        vec![(31, sge.to_vec())]
    );
}

#[test]
fn parked_engine_is_woken_by_one_doorbell_per_post_list() {
    let s = setup(true, false);
    s.p.wait_for("engine parked", |sh| sh.parks > 0);
    let sge = [s.mr.sge(0, 8)];
    let before = s.p.with(|sh| sh.wakes);
    let list: Vec<SendWr<'_>> = (0..8).map(|i| SendWr::send(i, &sge).signaled()).collect();
    s.qp.post_send(&list).unwrap();
    let wcs = poll_n(&s.cq, 8);
    assert_eq!(wcs.len(), 8);
    let after = s.p.with(|sh| sh.wakes);
    assert_eq!(after - before, 1, "one post list, one wake-up");
}

#[test]
fn event_mode_with_poll_epoll_style_and_async() {
    let (_p, ctx) = open(false);
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(16, Some(&ch), 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(
            QpType::Rc,
            &cq,
            QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ))
        .unwrap();
    qp.connect(&qp.endpoint(0, Gid::default()), &ConnectOpts::default())
        .unwrap();
    let mr = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 8)];
    // Not armed: a completion raises no event.
    qp.post_send(&[SendWr::send(1, &sge).signaled()]).unwrap();
    poll_n(&cq, 1);
    assert!(ch.try_get_event().unwrap().is_none());
    // Armed: exactly one event, naming the CQ.
    cq.req_notify(false).unwrap();
    qp.post_send(&[SendWr::send(2, &sge).signaled()]).unwrap();
    let got = ch
        .get_event(Some(Duration::from_secs(5)))
        .unwrap()
        .expect("event");
    assert!(got.same(&cq));
    assert_eq!(cq.unacked_events(), 1);
    cq.ack_events(1);
    assert_eq!(cq.unacked_events(), 0);
    assert_eq!(poll_n(&cq, 1)[0].wr_id, 2);
    assert!(ch
        .get_event(Some(Duration::from_millis(30)))
        .unwrap()
        .is_none());
    // Async adapter.
    cq.req_notify(false).unwrap();
    let qp2 = qp.clone();
    let mr_addr = sge;
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        qp2.post_send(&[SendWr::send(3, &mr_addr).signaled()])
            .unwrap();
    });
    let got = block_on(ch.get_event_async()).unwrap();
    assert!(got.same(&cq));
    t.join().unwrap();
    assert_eq!(poll_n(&cq, 1)[0].wr_id, 3);
}

#[test]
fn async_events_are_read_from_the_async_fd() {
    let (p, ctx) = open(false);
    assert!(ctx.try_get_async_event().unwrap().is_none());
    p.raise_async(EventType::QP_FATAL.0, 42);
    let ev = ctx
        .get_async_event(Some(Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    assert_eq!(ev.event_type, EventType::QP_FATAL);
    assert_eq!(ev.element, 42);
    assert_eq!(format!("{}", ev.event_type), "QP_FATAL");
}

#[test]
fn cq_in_use_is_ebusy_and_teardown_order_is_children_first() {
    let s = setup(false, false);
    let Setup {
        p,
        ctx,
        pd,
        cq,
        qp,
        mr,
    } = s;
    let (e, cq) = cq.destroy().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    let (e, other) = qp.clone().destroy().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    drop(other);
    qp.destroy().unwrap();
    cq.destroy().unwrap();
    let (e, pd) = pd.dealloc().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY, "the MR still uses the PD");
    drop(mr);
    pd.dealloc().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(4, Some(&ch), 0).unwrap();
    let (e, ch) = ch.destroy().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY, "a CQ still uses the channel");
    drop(cq);
    ch.destroy().unwrap();
    drop(ctx);
    let cmds = p.with(|sh| sh.commands.clone());
    let pos = |c| cmds.iter().position(|x| *x == c).unwrap();
    assert!(pos(Command::DESTROY_QP) < pos(Command::DESTROY_CQ));
    assert!(pos(Command::DEREG_MR) < pos(Command::DEALLOC_PD));
}

#[test]
fn srq_posts_into_its_ring() {
    let (p, ctx) = open(false);
    let pd = ctx.alloc_pd().unwrap();
    let srq = pd
        .create_srq(&SrqAttr {
            max_wr: 8,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let mut attr = QpInitAttr::new(
        QpType::Rc,
        &cq,
        QpCap {
            max_send_wr: 4,
            max_send_sge: 1,
            ..QpCap::default()
        },
    );
    attr.srq = Some(&srq);
    let qp = pd.create_qp(&attr).unwrap();
    assert!(qp.srq().is_some());
    let mr = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 32), mr.sge(32, 32)];
    srq.post_recv(&[RecvWr::new(7, &sge), RecvWr::new(8, &sge[..1])])
        .unwrap();
    let got = p.take_srq_recvs(srq.srq_num(), 8);
    assert_eq!(got, vec![(7, sge.to_vec()), (8, sge[..1].to_vec())]);
    // QP receives come from the SRQ: post_recv on the QP is refused.
    qp.connect(&qp.endpoint(0, Gid::default()), &ConnectOpts::default())
        .unwrap();
    assert_eq!(
        qp.post_recv(&[RecvWr::new(1, &sge)])
            .unwrap_err()
            .error
            .errno(),
        Errno::EINVAL
    );
    let three = [mr.sge(0, 1), mr.sge(1, 1), mr.sge(2, 1)];
    assert_eq!(
        srq.post_recv(&[RecvWr::new(9, &three)]).unwrap_err().index,
        0
    );
    // SRQ in use by a QP.
    let (e, srq) = srq.destroy().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    drop(qp);
    srq.destroy().unwrap();
}

#[test]
fn no_provider_is_a_clear_error() {
    // This test binary never installs a global provider.
    let e = devices().unwrap_err();
    assert_eq!(e.errno(), Errno::ENOSYS);
    assert!(e.to_string().contains("uroce"), "{e}");
}
