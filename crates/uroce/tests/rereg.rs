//! `ibv_rereg_mr` through the Rust API: access, PD and translation changes take effect on
//! the peer's next operation (same handle and keys), and refused changes leave the MR as it
//! was (kernel `ib_uverbs_rereg_mr`, docs/abi.md §3).

mod common;

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::*;

/// RDMA WRITE `len` bytes of `fill` from a fresh buffer of `a` to `(addr, rkey)`; the status.
fn write(a: &uroce::pair::End, addr: u64, rkey: u32, fill: u8, len: usize) -> WcStatus {
    let mut src = buf(a, len);
    src.fill(fill);
    a.qp.post_send(&[SendWr::write(1, &[src.sge(0, len as u32)], addr, rkey).signaled()])
        .unwrap();
    wait1(&a.cq).status
}

topo_tests!(access_change_is_enforced_and_keys_stay, |t| {
    let (a, b) = rc(t);
    let mut dst = buf(&b, 256);
    let rm = dst.remote();
    assert_eq!(write(&a, rm.addr, rm.rkey, 1, 256), WcStatus::Success);
    assert!(dst.iter().all(|&x| x == 1));
    dst.rereg_access(AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!((dst.lkey(), dst.rkey()), (rm.rkey, rm.rkey), "keys stay");
    assert_eq!(dst.mr().access(), AccessFlags::LOCAL_WRITE);
    assert_eq!(write(&a, rm.addr, rm.rkey, 2, 256), WcStatus::RemAccessErr);
    assert!(dst.iter().all(|&x| x == 1), "written without REMOTE_WRITE");
    // Back to remote write, on a fresh pair (the first QP is in ERR now).
    let (a, b2) = rc(t);
    let mut dst2 = buf(&b2, 256);
    dst2.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
        .unwrap();
    let rm2 = dst2.remote();
    assert_eq!(
        write(&a, rm2.addr, rm2.rkey, 3, 256),
        WcStatus::RemAccessErr
    );
    let (a, b3) = rc(t);
    let mut dst3 = buf(&b3, 256);
    dst3.rereg_access(AccessFlags::LOCAL_WRITE).unwrap();
    dst3.rereg_access(ALL_ACCESS).unwrap();
    let rm3 = dst3.remote();
    assert_eq!(write(&a, rm3.addr, rm3.rkey, 4, 256), WcStatus::Success);
    assert!(dst3.iter().all(|&x| x == 4));
});

topo_tests!(pd_change_moves_the_region_out_of_the_qps_reach, |t| {
    let (a, b) = rc(t);
    let other = b.ctx.alloc_pd().unwrap();
    let mut dst = buf(&b, 128);
    let rm = dst.remote();
    dst.rereg_pd(&other).unwrap();
    assert_eq!(dst.mr().pd().handle(), other.handle());
    // The responder's QP is on b.pd: the rkey no longer names memory it may touch.
    assert_eq!(write(&a, rm.addr, rm.rkey, 5, 128), WcStatus::RemAccessErr);
    assert!(dst.iter().all(|&x| x == 0));
    // There and back again, on a fresh pair: reachable.
    let (a2, b2) = rc(t);
    let mut dst2 = buf(&b2, 128);
    let other2 = b2.ctx.alloc_pd().unwrap();
    dst2.rereg_pd(&other2).unwrap();
    dst2.rereg_pd(&b2.pd).unwrap();
    let rm2 = dst2.remote();
    assert_eq!(write(&a2, rm2.addr, rm2.rkey, 6, 128), WcStatus::Success);
    assert!(dst2.iter().all(|&x| x == 6));
    // The PD the MR left is free to go.
    assert!(other2.dealloc().is_ok());
});

topo_tests!(translation_change_redirects_the_rkey, |t| {
    let (a, b) = rc(t);
    let mut old = vec![0u8; 4096];
    let mut new = vec![0u8; 8192];
    // SAFETY: both vectors outlive the MR (dropped explicitly before them).
    let mut mr = unsafe { b.pd.reg_mr_raw(old.as_mut_ptr(), 4096, ALL_ACCESS) }.unwrap();
    let key = mr.rkey();
    let old_addr = mr.addr();
    // SAFETY: as above.
    unsafe { mr.rereg_translation(new.as_mut_ptr(), 8192, new.as_ptr() as u64) }.unwrap();
    assert_eq!(
        (mr.rkey(), mr.len(), mr.addr()),
        (key, 8192, new.as_ptr() as u64)
    );
    let new_addr = new.as_ptr() as u64;
    assert_eq!(write(&a, new_addr + 4096, key, 7, 4096), WcStatus::Success);
    // The old range is no longer the region's (two live vectors do not overlap).
    assert_eq!(write(&a, old_addr, key, 8, 64), WcStatus::RemAccessErr);
    drop(mr);
    assert!(new[4096..].iter().all(|&x| x == 7));
    assert!(new[..4096].iter().all(|&x| x == 0));
    assert!(old.iter().all(|&x| x == 0), "the old memory was written");
});

#[test]
fn refused_changes_leave_the_region_as_it_was() {
    let dev = uroce::device("uroce0", "127.0.0.1".parse().unwrap());
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut m = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let before = (m.lkey(), m.rkey(), m.addr(), m.mr().access());
    let errno = |e: Error| e.errno();
    let e = |x| Err(x);
    // REMOTE_WRITE without LOCAL_WRITE (ib_check_mr_access).
    assert_eq!(
        m.rereg_access(AccessFlags::REMOTE_WRITE).map_err(errno),
        e(Errno::EINVAL)
    );
    // An access bit the device does not offer (ON_DEMAND).
    assert_eq!(
        m.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags(1 << 6))
            .map_err(errno),
        e(Errno::EOPNOTSUPP)
    );
    // A PD of another context.
    let ctx2 = dev.open().unwrap();
    let pd2 = ctx2.alloc_pd().unwrap();
    assert_eq!(m.rereg_pd(&pd2).map_err(errno), e(Errno::EINVAL));
    // Nothing to change, a zero length, an address the process has not mapped.
    // SAFETY: `m` owns the memory and outlives `raw`.
    let mut raw = unsafe { pd.reg_mr_raw(m.as_mut_ptr(), 4096, ALL_ACCESS) }.unwrap();
    // SAFETY: no translation in the first call; the others are refused before any change.
    unsafe {
        assert_eq!(
            raw.rereg_raw(&Rereg::default()).map_err(errno),
            e(Errno::EINVAL)
        );
        let p = raw.start();
        assert_eq!(
            raw.rereg_translation(p as *mut u8, 0, p).map_err(errno),
            e(Errno::EINVAL)
        );
        assert_eq!(
            raw.rereg_translation(0x1000 as *mut u8, 4096, 0x1000)
                .map_err(errno),
            e(Errno::EFAULT)
        );
    }
    drop(raw);
    assert_eq!(before, (m.lkey(), m.rkey(), m.addr(), m.mr().access()));
    // Still fully usable.
    m.rereg_access(AccessFlags::LOCAL_WRITE).unwrap();
    m.rereg_access(ALL_ACCESS).unwrap();
}
