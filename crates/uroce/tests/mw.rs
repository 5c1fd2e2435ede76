//! Memory windows through the Rust API (IBTA Vol 1 §10.6.7; rxe's behaviour): type 1 bound
//! with `Qp::bind_mw`, type 2 with a BIND_MW WR, remote access through the window's R_Key
//! checked for bounds, access, PD, QP and state, LOCAL_INV and SEND_WITH_INV of type 2
//! windows, and the completion statuses of the bad cases. Same device and two devices.

mod common;

use common::*;
use uroce::pair::{End, ALL_ACCESS};
use uroce::*;

const LEN: usize = 8192;

/// A region of `b` that windows may be bound to (LOCAL_WRITE, remote read/write, MW_BIND).
fn target(b: &End) -> MrBuf {
    b.pd.alloc_mr(LEN, ALL_ACCESS | AccessFlags::MW_BIND)
        .unwrap()
}

fn info(mr: &MrBuf, off: u64, length: u64, access: AccessFlags) -> MwBindInfo {
    MwBindInfo {
        lkey: mr.lkey(),
        addr: mr.addr() + off,
        length,
        access,
    }
}

/// RDMA WRITE of `len` bytes of `fill` from `a` to `(addr, rkey)`; the status.
fn write(a: &End, addr: u64, rkey: u32, fill: u8, len: usize) -> WcStatus {
    let mut src = buf(a, len);
    src.fill(fill);
    a.qp.post_send(&[SendWr::write(77, &[src.sge(0, len as u32)], addr, rkey).signaled()])
        .unwrap();
    wait1(&a.cq).status
}

/// Post a BIND_MW / LOCAL_INV on `b` and return its completion.
fn local(b: &End, wr: SendWr<'_>) -> Wc {
    b.qp.post_send(&[wr.signaled()]).unwrap();
    wait1(&b.cq)
}

topo_tests!(type1_window_bounds_access_and_rebinding, |t| {
    let (a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let first = mw.rkey();
    let k =
        b.qp.bind_mw(
            &mw,
            5,
            info(&dst, 1024, 1024, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!((k, mw.rkey()), (inc_rkey(first), inc_rkey(first)));
    let w = wait1(&b.cq);
    assert_eq!(
        (w.wr_id, w.status, w.opcode),
        (5, WcStatus::Success, WcOpcode::BindMw)
    );
    // Inside the window: lands there, nowhere else.
    assert_eq!(
        write(&a, dst.addr() + 1024, k, 0x11, 1024),
        WcStatus::Success
    );
    assert!(dst[1024..2048].iter().all(|&x| x == 0x11));
    assert!(dst[..1024].iter().all(|&x| x == 0) && dst[2048..].iter().all(|&x| x == 0));
    // One byte past its end: REM_ACCESS_ERR, nothing written.
    assert_eq!(
        write(&a, dst.addr() + 1025, k, 0x22, 1024),
        WcStatus::RemAccessErr
    );
    assert!(dst[2048..].iter().all(|&x| x == 0));

    // Rebinding gives a new R_Key; the old one is dead.
    let (a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let old =
        b.qp.bind_mw(
            &mw,
            1,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
    let new =
        b.qp.bind_mw(
            &mw,
            2,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
    assert_ne!(old, new);
    assert_eq!(write(&a, dst.addr(), new, 0x33, 64), WcStatus::Success);
    assert_eq!(write(&a, dst.addr(), old, 0x44, 64), WcStatus::RemAccessErr);
    assert!(dst[..64].iter().all(|&x| x == 0x33));

    // A zero-length bind unbinds; a read the window never granted is refused.
    let (a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    b.qp.bind_mw(
        &mw,
        1,
        info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
        SendFlags::SIGNALED,
    )
    .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
    let mut back = buf(&a, 64);
    back.fill(0);
    a.qp.post_send(&[SendWr::read(8, &[back.sge(0, 64)], dst.addr(), mw.rkey()).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::RemAccessErr);
    let (a, b2) = rc(t);
    let dst = target(&b2);
    let mw = b2.pd.alloc_mw(MwType::Type1).unwrap();
    b2.qp
        .bind_mw(
            &mw,
            1,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(wait1(&b2.cq).status, WcStatus::Success);
    let k = b2
        .qp
        .bind_mw(
            &mw,
            2,
            info(&dst, 0, 0, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(wait1(&b2.cq).status, WcStatus::Success);
    assert_eq!(write(&a, dst.addr(), k, 0x55, 64), WcStatus::RemAccessErr);
    drop(b);
});

topo_tests!(type2_window_bind_use_and_invalidation, |t| {
    let (a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let k = inc_rkey(mw.rkey());
    let w = local(
        &b,
        SendWr::bind_mw(
            9,
            mw.rkey(),
            k,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!((w.status, w.opcode), (WcStatus::Success, WcOpcode::BindMw));
    mw.set_rkey(k);
    assert_eq!(write(&a, dst.addr() + 100, k, 0x66, 100), WcStatus::Success);
    assert!(dst[100..200].iter().all(|&x| x == 0x66));
    // LOCAL_INV: the window is dead.
    let w = local(&b, SendWr::local_inv(10, k));
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::Success, WcOpcode::LocalInv)
    );
    assert_eq!(write(&a, dst.addr(), k, 0x77, 64), WcStatus::RemAccessErr);
    assert!(dst[..100].iter().all(|&x| x == 0));

    // SEND_WITH_INV from the peer invalidates it too, and says so in the receive
    // completion.
    let (a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let k = inc_rkey(mw.rkey());
    let w = local(
        &b,
        SendWr::bind_mw(
            1,
            mw.rkey(),
            k,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::Success);
    let rbuf = buf(&b, 64);
    b.qp.post_recv(&[RecvWr::new(2, &[rbuf.sge(0, 64)])])
        .unwrap();
    let src = buf(&a, 16);
    a.qp.post_send(&[SendWr::send_with_inv(3, &[src.sge(0, 16)], k).signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    let r = wait1(&b.cq);
    assert_eq!(
        (r.wr_id, r.status, r.invalidated_rkey()),
        (2, WcStatus::Success, Some(k))
    );
    assert_eq!(write(&a, dst.addr(), k, 0x12, 64), WcStatus::RemAccessErr);
});

topo_tests!(type2_window_answers_only_its_qp, |t| {
    // Two pairs whose responders share a PD would need one context; on one device the
    // pair's ends share the context, so bind on b and reach it from a QP of another pair:
    // its rkey is foreign there (another PD on another pair, or another QP).
    let (a, b) = rc(t);
    let (a2, _b2) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let k = inc_rkey(mw.rkey());
    let w = local(
        &b,
        SendWr::bind_mw(
            1,
            mw.rkey(),
            k,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(write(&a2, dst.addr(), k, 0x21, 64), WcStatus::RemAccessErr);
    assert_eq!(write(&a, dst.addr(), k, 0x31, 64), WcStatus::Success);
    assert!(dst[..64].iter().all(|&x| x == 0x31));
});

topo_tests!(bad_binds_are_mw_bind_err, |t| {
    // An MR without MW_BIND.
    let (_a, b) = rc(t);
    let plain = buf(&b, 4096);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let w = local(
        &b,
        SendWr::bind_mw(
            1,
            mw.rkey(),
            inc_rkey(mw.rkey()),
            info(&plain, 0, 64, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!((w.wr_id, w.status), (1, WcStatus::MwBindErr));
    // A window of another PD.
    let (_a, b) = rc(t);
    let dst = target(&b);
    let other = b.ctx.alloc_pd().unwrap();
    let mw = other.alloc_mw(MwType::Type2).unwrap();
    let w = local(
        &b,
        SendWr::bind_mw(
            2,
            mw.rkey(),
            inc_rkey(mw.rkey()),
            info(&dst, 0, 64, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::MwBindErr);
    // A range beyond the MR.
    let (_a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let w = local(
        &b,
        SendWr::bind_mw(
            3,
            mw.rkey(),
            inc_rkey(mw.rkey()),
            info(&dst, LEN as u64 - 8, 64, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::MwBindErr);
    // A type 2 window bound twice, and a new rkey with other index bits.
    let (_a, b) = rc(t);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let k = inc_rkey(mw.rkey());
    let w = local(
        &b,
        SendWr::bind_mw(
            4,
            mw.rkey(),
            k,
            info(&dst, 0, 64, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::Success);
    let w = local(
        &b,
        SendWr::bind_mw(
            5,
            k,
            inc_rkey(k),
            info(&dst, 0, 64, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::MwBindErr);
    let (_a, b) = rc(t);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let dst = target(&b);
    let w = local(
        &b,
        SendWr::bind_mw(
            6,
            mw.rkey(),
            mw.rkey() ^ 0x100,
            info(&dst, 0, 64, AccessFlags::REMOTE_WRITE),
        ),
    );
    assert_eq!(w.status, WcStatus::MwBindErr);
    // LOCAL_INV of a type 1 window is LOC_QP_OP_ERR.
    let (_a, b) = rc(t);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let w = local(&b, SendWr::local_inv(7, mw.rkey()));
    assert_eq!(
        (w.status, w.opcode),
        (WcStatus::LocQpOpErr, WcOpcode::LocalInv)
    );
});

#[test]
fn windows_hold_their_mr_and_pd_and_die_with_dealloc() {
    let (a, b) = rc(Topo::SameDevice);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type1).unwrap();
    let k =
        b.qp.bind_mw(
            &mw,
            1,
            info(&dst, 0, 4096, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED,
        )
        .unwrap();
    assert_eq!(wait1(&b.cq).status, WcStatus::Success);
    // Bound: its MR cannot be deregistered or re-registered.
    let mut dst = dst;
    assert_eq!(
        dst.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
            .unwrap_err()
            .errno(),
        Errno::EBUSY
    );
    let (e, dst) = dst.dereg().unwrap_err();
    assert_eq!(e.errno(), Errno::EBUSY);
    // Deallocated: its rkey is dead, and the MR can go.
    mw.dealloc().unwrap();
    assert_eq!(write(&a, dst.addr(), k, 1, 64), WcStatus::RemAccessErr);
    assert!(dst.dereg().is_ok());
    // Type 2 BIND_MW cannot travel in a POST_SEND command.
    let (_a, b) = rc(Topo::SameDevice);
    let dst = target(&b);
    let mw = b.pd.alloc_mw(MwType::Type2).unwrap();
    let e =
        b.qp.post_send_cmd(&[SendWr::bind_mw(
            1,
            mw.rkey(),
            inc_rkey(mw.rkey()),
            info(&dst, 0, 64, AccessFlags::REMOTE_WRITE),
        )])
        .unwrap_err();
    assert_eq!(e.error.errno(), Errno::EINVAL);
    // ibv_bind_mw is for type 1 only.
    assert_eq!(
        b.qp.bind_mw(
            &mw,
            1,
            info(&dst, 0, 64, AccessFlags::REMOTE_WRITE),
            SendFlags::SIGNALED
        )
        .unwrap_err()
        .errno(),
        Errno::EINVAL
    );
}
