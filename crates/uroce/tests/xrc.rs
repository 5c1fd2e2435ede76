//! XRC (IBTA Vol 1, XRC annex) through the Rust API: an XRC initiator QP (`XRC_SEND`)
//! names, per WR, the XRC SRQ at the responder; the responder's XRC target QP
//! (`XRC_RECV`) delivers into that SRQ if it belongs to the target's XRC domain, and the
//! completion goes to the SRQ's CQ. SEND (one and several packets, with immediate), RDMA
//! WRITE / READ and both atomics, with the data checked; the bad cases — an SRQ number
//! that names no SRQ, or an SRQ of another domain — are NAKed Invalid Request, which the
//! requester sees as `REM_INV_REQ_ERR`. Same device and two devices.

mod common;

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::*;

const MSG: usize = 3000; // three packets at the 1024-byte path MTU

/// One side: a PD, a CQ, an XRC domain with an XRC SRQ (completing to `cq`), an XRC target
/// QP of the domain and an XRC initiator QP.
struct Side {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    xrcd: Xrcd,
    srq: Srq,
    tgt: Qp,
    ini: Qp,
    gid: Gid,
}

fn side(dev: &Device, ctx: Option<&Context>) -> Side {
    let ctx = match ctx {
        Some(c) => c.clone(),
        None => dev.open().unwrap(),
    };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64, None, 0).unwrap();
    let xrcd = ctx.open_xrcd(None, 0).unwrap();
    let srq = pd
        .create_xrc_srq(
            &SrqAttr {
                max_wr: 16,
                max_sge: 2,
                srq_limit: 0,
            },
            &xrcd,
            &cq,
        )
        .unwrap();
    let tgt = xrcd.create_recv_qp().unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 0,
        max_send_sge: 2,
        max_recv_sge: 0,
        max_inline_data: 0,
    };
    let ini = pd
        .create_qp(&QpInitAttr::new(QpType::XrcSend, &cq, cap))
        .unwrap();
    let gid = ctx.query_gid(1, 0).unwrap();
    Side {
        ctx,
        pd,
        cq,
        xrcd,
        srq,
        tgt,
        ini,
        gid,
    }
}

/// `a`'s initiator connected to `b`'s target and `b`'s initiator to `a`'s target.
fn xrc_pair(t: Topo) -> (Side, Side) {
    let (da, db) = topo_devices(t);
    let a = side(&da, None);
    let b = if t == Topo::SameDevice {
        side(&db, Some(&a.ctx))
    } else {
        side(&db, None)
    };
    let o = ConnectOpts {
        access: ALL_ACCESS,
        ..ConnectOpts::default()
    };
    let link = |ini: &Side, tgt: &Side, psn: u32| {
        let mut oi = o;
        oi.sq_psn = psn;
        ini.ini
            .connect(&tgt.tgt.endpoint(psn + 7, tgt.gid), &oi)
            .unwrap();
        let mut ot = o;
        ot.sq_psn = psn + 7;
        tgt.tgt
            .connect(&ini.ini.endpoint(psn, ini.gid), &ot)
            .unwrap();
    };
    link(&a, &b, 100);
    link(&b, &a, 5000);
    (a, b)
}

fn mr(s: &Side, len: usize) -> MrBuf {
    s.pd.alloc_mr(len, ALL_ACCESS).unwrap()
}

topo_tests!(send_lands_in_the_named_srq_and_completes_on_its_cq, |t| {
    let (a, b) = xrc_pair(t);
    assert_eq!(a.ini.qp_type(), QpType::XrcSend);
    assert_eq!(b.tgt.qp_type(), QpType::XrcRecv);
    assert!(b.tgt.pd().is_none() && b.tgt.xrcd().is_some());
    let mut dst = mr(&b, 2 * MSG);
    dst.fill(0);
    b.srq
        .post_recv(&[RecvWr::new(1, &[dst.sge(0, MSG as u32)])])
        .unwrap();
    b.srq
        .post_recv(&[RecvWr::new(2, &[dst.sge(MSG, MSG as u32)])])
        .unwrap();
    let mut src = mr(&a, MSG);
    src.copy_from_slice(&pattern(3, MSG));
    let srqn = b.srq.srq_num();
    a.ini
        .post_send(&[
            SendWr::send(10, &[src.sge(0, MSG as u32)])
                .to_xrc_srq(srqn)
                .signaled(),
            SendWr::send(11, &[src.sge(0, 100)])
                .with_imm(0xabcd)
                .to_xrc_srq(srqn)
                .signaled(),
        ])
        .unwrap();
    let sent = wait(&a.cq, 2);
    assert!(
        sent.iter().all(|w| w.status == WcStatus::Success),
        "{sent:?}"
    );
    let got = wait(&b.cq, 2);
    assert_eq!((got[0].wr_id, got[0].status), (1, WcStatus::Success));
    assert_eq!(got[0].byte_len, MSG as u32);
    assert_eq!(got[0].opcode, WcOpcode::Recv);
    assert_eq!(got[0].qp_num, b.tgt.qp_num());
    assert_eq!((got[1].wr_id, got[1].byte_len), (2, 100));
    assert_eq!(got[1].imm_data(), Some(0xabcd));
    assert_eq!(&dst[..MSG], &pattern(3, MSG)[..]);
    assert_eq!(&dst[MSG..MSG + 100], &pattern(3, MSG)[..100]);

    // The other direction, through the other pair of QPs.
    let mut back = mr(&a, 64);
    back.fill(0);
    a.srq
        .post_recv(&[RecvWr::new(5, &[back.sge(0, 64)])])
        .unwrap();
    dst[..64].fill(0x5a);
    b.ini
        .post_send(&[SendWr::send(6, &[dst.sge(0, 64)])
            .to_xrc_srq(a.srq.srq_num())
            .signaled()])
        .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
    let w = wait1(&a.cq);
    assert_eq!(
        (w.wr_id, w.status, w.qp_num),
        (5, WcStatus::Success, a.tgt.qp_num())
    );
    assert!(back.iter().all(|&x| x == 0x5a));
});

topo_tests!(rdma_and_atomics_over_xrc, |t| {
    let (a, b) = xrc_pair(t);
    let srqn = b.srq.srq_num();
    let mut remote = mr(&b, MSG);
    remote.fill(0);
    let mut src = mr(&a, MSG);
    src.copy_from_slice(&pattern(9, MSG));
    // WRITE (three packets), then READ it back into another buffer.
    a.ini
        .post_send(&[
            SendWr::write(1, &[src.sge(0, MSG as u32)], remote.addr(), remote.rkey())
                .to_xrc_srq(srqn)
                .signaled(),
        ])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    assert_eq!(&remote[..], &pattern(9, MSG)[..]);
    let mut rd = mr(&a, MSG);
    rd.fill(0);
    a.ini
        .post_send(&[
            SendWr::read(2, &[rd.sge(0, MSG as u32)], remote.addr(), remote.rkey())
                .to_xrc_srq(srqn)
                .signaled(),
        ])
        .unwrap();
    let w = wait1(&a.cq);
    assert_eq!(
        (w.wr_id, w.status, w.byte_len),
        (2, WcStatus::Success, MSG as u32)
    );
    assert_eq!(&rd[..], &pattern(9, MSG)[..]);
    // FETCH_AND_ADD and CMP_AND_SWP on the first 8 bytes.
    remote[..8].copy_from_slice(&40u64.to_ne_bytes());
    let old = mr(&a, 16);
    let s0 = old.sge(0, 8);
    a.ini
        .post_send(&[SendWr::fetch_add(3, &s0, remote.addr(), remote.rkey(), 2)
            .to_xrc_srq(srqn)
            .signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    assert_eq!(u64::from_ne_bytes(old[..8].try_into().unwrap()), 40);
    assert_eq!(u64::from_ne_bytes(remote[..8].try_into().unwrap()), 42);
    let s1 = old.sge(8, 8);
    a.ini
        .post_send(&[
            SendWr::compare_swap(4, &s1, remote.addr(), remote.rkey(), 42, 7)
                .to_xrc_srq(srqn)
                .signaled(),
        ])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    assert_eq!(u64::from_ne_bytes(old[8..16].try_into().unwrap()), 42);
    assert_eq!(u64::from_ne_bytes(remote[..8].try_into().unwrap()), 7);
    // No receive was consumed by any of it.
    quiet(&b.cq, std::time::Duration::from_millis(20));
});

topo_tests!(the_srq_number_picks_among_srqs_of_the_domain, |t| {
    let (a, b) = xrc_pair(t);
    let cq2 = b.ctx.create_cq(16, None, 0).unwrap();
    let srq2 =
        b.pd.create_xrc_srq(
            &SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
            &b.xrcd,
            &cq2,
        )
        .unwrap();
    assert_ne!(srq2.srq_num(), b.srq.srq_num());
    let mut d1 = mr(&b, 64);
    let mut d2 = mr(&b, 64);
    d1.fill(0);
    d2.fill(0);
    b.srq
        .post_recv(&[RecvWr::new(1, &[d1.sge(0, 64)])])
        .unwrap();
    srq2.post_recv(&[RecvWr::new(2, &[d2.sge(0, 64)])]).unwrap();
    let mut src = mr(&a, 64);
    src.fill(0x77);
    a.ini
        .post_send(&[SendWr::send(9, &[src.sge(0, 64)])
            .to_xrc_srq(srq2.srq_num())
            .signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    let w = wait1(&cq2);
    assert_eq!(
        (w.wr_id, w.status, w.qp_num),
        (2, WcStatus::Success, b.tgt.qp_num())
    );
    assert!(d2.iter().all(|&x| x == 0x77));
    assert!(d1.iter().all(|&x| x == 0));
    quiet(&b.cq, std::time::Duration::from_millis(20));
});

/// A SEND to `srqn` from `a`'s initiator: the requester's completion status, and whether
/// `b`'s own SRQ stayed untouched.
fn send_to(a: &Side, b: &Side, srqn: u32) -> WcStatus {
    let mut d = mr(b, 64);
    d.fill(0);
    b.srq.post_recv(&[RecvWr::new(1, &[d.sge(0, 64)])]).unwrap();
    let mut src = mr(a, 64);
    src.fill(0x33);
    a.ini
        .post_send(&[SendWr::send(4, &[src.sge(0, 64)])
            .to_xrc_srq(srqn)
            .signaled()])
        .unwrap();
    let st = wait1(&a.cq).status;
    quiet(&b.cq, std::time::Duration::from_millis(20));
    assert!(
        d.iter().all(|&x| x == 0),
        "nothing lands in the domain's SRQ"
    );
    st
}

topo_tests!(an_srq_number_naming_no_srq_is_an_invalid_request, |t| {
    let (a, b) = xrc_pair(t);
    let bogus = b.srq.srq_num() + 1000;
    assert_eq!(send_to(&a, &b, bogus), WcStatus::RemInvReqErr);
    // The initiator is in ERR now; a later WR flushes.
    wait_state(&a.ini, QpState::Err);
});

topo_tests!(an_srq_of_another_domain_is_an_invalid_request, |t| {
    let (a, b) = xrc_pair(t);
    // Same context, same PD and CQ: only the domain differs.
    let other = b.ctx.open_xrcd(None, 0).unwrap();
    let foreign =
        b.pd.create_xrc_srq(
            &SrqAttr {
                max_wr: 4,
                max_sge: 1,
                srq_limit: 0,
            },
            &other,
            &b.cq,
        )
        .unwrap();
    let mut f = mr(&b, 64);
    f.fill(0);
    foreign
        .post_recv(&[RecvWr::new(8, &[f.sge(0, 64)])])
        .unwrap();
    assert_eq!(send_to(&a, &b, foreign.srq_num()), WcStatus::RemInvReqErr);
    assert!(
        f.iter().all(|&x| x == 0),
        "nothing lands in the foreign SRQ"
    );
    // An RDMA WRITE naming it is refused too: the SRQ decides the PD checked.
    let (a, b) = xrc_pair(t);
    let other = b.ctx.open_xrcd(None, 0).unwrap();
    let foreign =
        b.pd.create_xrc_srq(
            &SrqAttr {
                max_wr: 1,
                max_sge: 1,
                srq_limit: 0,
            },
            &other,
            &b.cq,
        )
        .unwrap();
    let mut remote = mr(&b, 64);
    remote.fill(0);
    let src = mr(&a, 64);
    a.ini
        .post_send(&[
            SendWr::write(1, &[src.sge(0, 64)], remote.addr(), remote.rkey())
                .to_xrc_srq(foreign.srq_num())
                .signaled(),
        ])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemInvReqErr);
    assert!(remote.iter().all(|&x| x == 0));
});

#[test]
fn domains_stay_while_used_and_files_share_them() {
    let (dev, _) = topo_devices(Topo::SameDevice);
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4, None, 0).unwrap();
    // A domain with an SRQ cannot close; without, it can.
    let x = ctx.open_xrcd(None, 0).unwrap();
    let srq = pd
        .create_xrc_srq(
            &SrqAttr {
                max_wr: 1,
                max_sge: 1,
                srq_limit: 0,
            },
            &x,
            &cq,
        )
        .unwrap();
    let (e, x) = x.close().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    srq.destroy().unwrap();
    x.close().unwrap();

    // Opens of one file share a domain: an SRQ made through one handle takes a target
    // QP's traffic through the other. O_CREAT is needed for the first open, O_EXCL refuses
    // the second.
    let file = tempfile();
    use std::os::fd::AsFd;
    let e = ctx.open_xrcd(Some(file.as_fd()), 0).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    let x1 = ctx.open_xrcd(Some(file.as_fd()), libc_o_creat()).unwrap();
    let e = ctx
        .open_xrcd(Some(file.as_fd()), libc_o_creat() | libc_o_excl())
        .unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    let ctx2 = dev.open().unwrap();
    let x2 = ctx2.open_xrcd(Some(file.as_fd()), 0).unwrap();
    let pd2 = ctx2.alloc_pd().unwrap();
    let cq2 = ctx2.create_cq(4, None, 0).unwrap();
    let srq2 = pd2
        .create_xrc_srq(
            &SrqAttr {
                max_wr: 2,
                max_sge: 1,
                srq_limit: 0,
            },
            &x2,
            &cq2,
        )
        .unwrap();
    let tgt = x1.create_recv_qp().unwrap();
    let ini = pd
        .create_qp(&QpInitAttr::new(
            QpType::XrcSend,
            &cq,
            QpCap {
                max_send_wr: 4,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
        ))
        .unwrap();
    let gid = ctx.query_gid(1, 0).unwrap();
    let o = ConnectOpts {
        access: ALL_ACCESS,
        ..ConnectOpts::default()
    };
    ini.connect(&tgt.endpoint(o.sq_psn, gid), &o).unwrap();
    tgt.connect(&ini.endpoint(o.sq_psn, gid), &o).unwrap();
    let mut d = pd2.alloc_mr(32, ALL_ACCESS).unwrap();
    d.fill(0);
    srq2.post_recv(&[RecvWr::new(3, &[d.sge(0, 32)])]).unwrap();
    let mut s = pd.alloc_mr(32, ALL_ACCESS).unwrap();
    s.fill(0x42);
    ini.post_send(&[SendWr::send(1, &[s.sge(0, 32)])
        .to_xrc_srq(srq2.srq_num())
        .signaled()])
        .unwrap();
    assert_eq!(wait1(&cq).status, WcStatus::Success);
    let w = wait1(&cq2);
    assert_eq!(
        (w.wr_id, w.status, w.qp_num),
        (3, WcStatus::Success, tgt.qp_num())
    );
    assert!(d.iter().all(|&x| x == 0x42));
}

fn tempfile() -> std::fs::File {
    let p = std::env::temp_dir().join(format!("uroce-xrc-{}", std::process::id()));
    let f = std::fs::File::create(&p).unwrap();
    let _ = std::fs::remove_file(&p);
    f
}

fn libc_o_creat() -> i32 {
    0o100
}

fn libc_o_excl() -> i32 {
    0o200
}
