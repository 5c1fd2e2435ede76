//! The simulator's memory is the NIC's: each region is an MR record in the device's MR
//! table, and every access a QP makes is decided by the device's DMA checks
//! (`nic::simhost::SimMemory`). These cases pin rules that exist only in that code: memory
//! windows — bound, used, invalidated and re-bound through a QP's send queue, a type 2
//! window answering only the QP it is bound to — REG_MR's access rule, and the errors the
//! device gives each refused access, counted where the simulator reports them.

use sim::pair::{Pair, BUF_VA, QPN};
use sim::{MrAccess, SimMemory};
use transport::wire::{Lkey, Qpn, Rkey};
use transport::{
    AtomicOp, Completion, LocalData, MemError, Memory, MwBind, SendWr, Sge, SgeList, WcStatus,
    WrOpcode,
};

/// Where side 1's window region lies.
const WIN_VA: u64 = 0x90_0000;
const WIN_LEN: usize = 256;

fn statuses(cs: &[Completion]) -> Vec<(u64, WcStatus)> {
    cs.iter().map(|c| (c.wr_id, c.status)).collect()
}

/// An RDMA WRITE of `len` bytes from side 0's scratch region to `va` under `rkey`.
fn write(p: &Pair, id: u64, rkey: Rkey, va: u64, len: u32) -> SendWr {
    let mut w = SendWr::new(id, WrOpcode::RdmaWrite);
    w.local = LocalData::Sges(SgeList::single(Sge {
        addr: BUF_VA,
        length: len,
        lkey: p.lkey(0),
    }));
    w.remote_addr = va;
    w.rkey = rkey;
    w
}

/// A pair whose side 1 has a 256-byte region windows may be bound to, and side 0's
/// scratch region filled with a pattern.
fn pair_with_window_region() -> (Pair, usize) {
    let mut p = Pair::rc();
    let region = p.mem[1].register(WIN_VA, WIN_LEN, MrAccess::LOCAL_WRITE | MrAccess::MW_BIND);
    let pattern: Vec<u8> = (0..WIN_LEN as u32).map(|i| (i * 7 + 1) as u8).collect();
    p.fill(0, BUF_VA, &pattern);
    (p, region)
}

#[test]
fn a_type_2_window_answers_only_the_qp_it_is_bound_to() {
    let (mut p, region) = pair_with_window_region();
    let w = MrAccess::REMOTE_WRITE;
    let mine = p.mem[1]
        .bind_window(region, Qpn::new(QPN[1]), w)
        .expect("bind to the pair's QP");
    let other = p.mem[1]
        .bind_window(region, Qpn::new(0x77), w)
        .expect("bind to another QP of the same device");
    assert!(p.mem[1].rkey_valid(mine) && p.mem[1].rkey_valid(other));
    p.qps[0].post_send(write(&p, 1, mine, WIN_VA, 64)).unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mem[1].read(region, 0, 64), p.bytes(0, BUF_VA, 64));
    assert_eq!(p.mem[1].stats.refused, 0);

    // The same bytes under the window bound to QP 0x77: the responder (QP 0x12) is refused.
    p.qps[0]
        .post_send(write(&p, 2, other, WIN_VA + 128, 64))
        .unwrap();
    p.run_clean();
    assert_eq!(
        statuses(&p.collect(0)[1..]),
        vec![(2, WcStatus::RemAccessErr)]
    );
    assert_eq!(p.mem[1].stats.refused, 1);
    assert!(p.mem[1].read(region, 128, 64).iter().all(|&b| b == 0));
}

#[test]
fn windows_are_invalidated_and_rebound_through_the_send_queue() {
    let (mut p, region) = pair_with_window_region();
    let q1 = Qpn::new(QPN[1]);
    let key = p.mem[1]
        .bind_window(region, q1, MrAccess::REMOTE_WRITE)
        .expect("bind");
    // LOCAL_INV on side 1's QP unbinds the window.
    let mut inv = SendWr::new(10, WrOpcode::LocalInv);
    inv.invalidate_rkey = key;
    p.qps[1].post_send(inv).unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(1)), vec![(10, WcStatus::Success)]);
    assert!(!p.mem[1].rkey_valid(key));
    // BIND_MW re-binds it over the second half of the region, with the next 8-bit key.
    let rebound = Rkey((key.0 & !0xff) | ((key.0 + 1) & 0xff));
    let mut bind = SendWr::new(11, WrOpcode::BindMw);
    bind.set_mw_bind(&MwBind {
        mw_rkey: key,
        new_rkey: rebound,
        mr_lkey: p.mem[1].region(region).lkey,
        addr: WIN_VA + 128,
        length: 128,
        access: MrAccess::REMOTE_WRITE.0,
    });
    p.qps[1].post_send(bind).unwrap();
    p.run_clean();
    assert_eq!(statuses(&p.collect(1)[1..]), vec![(11, WcStatus::Success)]);
    assert!(p.mem[1].rkey_valid(rebound) && !p.mem[1].rkey_valid(key));
    p.qps[0]
        .post_send(write(&p, 1, rebound, WIN_VA + 128, 128))
        .unwrap();
    p.run_clean();
    assert_eq!(statuses(p.collect(0)), vec![(1, WcStatus::Success)]);
    assert_eq!(p.mem[1].read(region, 128, 128), p.bytes(0, BUF_VA, 128));
    // The first half is outside the new binding.
    p.qps[0]
        .post_send(write(&p, 2, rebound, WIN_VA, 8))
        .unwrap();
    p.run_clean();
    assert_eq!(
        statuses(&p.collect(0)[1..]),
        vec![(2, WcStatus::RemAccessErr)]
    );
    assert_eq!(p.mem[1].stats.refused, 1);
    assert!(p.mem[1].read(region, 0, 128).iter().all(|&b| b == 0));
}

#[test]
fn refused_accesses_carry_the_devices_errors_and_are_counted() {
    let mut m = SimMemory::new();
    let ro = m.register(0x2000, 64, MrAccess::REMOTE_READ);
    let rw = m.register(
        0x3000,
        64,
        MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_ATOMIC,
    );
    let (ro_key, rw_key) = (m.region(ro).rkey, m.region(rw).rkey);
    // An MR has one key: the L_Key is the R_Key.
    assert_eq!(m.region(rw).lkey.0, rw_key.0);
    let mut q = m.for_qp(Qpn::new(QPN[1]));
    let add = AtomicOp::FetchAdd { add: 1 };
    assert_eq!(
        q.write_remote(Rkey(rw_key.0 ^ 0x8000), 0x3000, &[1]),
        Err(MemError::InvalidKey),
        "wrong key"
    );
    assert_eq!(
        q.write_remote(rw_key, 0x3000 + 60, &[1; 8]),
        Err(MemError::OutOfBounds),
        "past the end"
    );
    assert_eq!(
        q.atomic_remote(rw_key, 0x3004, add),
        Err(MemError::Misaligned),
        "misaligned atomic"
    );
    assert_eq!(
        q.write_remote(ro_key, 0x2000, &[1]),
        Err(MemError::AccessDenied),
        "no REMOTE_WRITE"
    );
    assert_eq!(
        q.write_local(Lkey(ro_key.0), 0x2000, &[1]),
        Err(MemError::AccessDenied),
        "no LOCAL_WRITE"
    );
    assert_eq!(
        q.invalidate(rw_key),
        Err(MemError::InvalidateDenied),
        "an MR cannot be invalidated"
    );
    assert_eq!(q.atomic_remote(rw_key, 0x3008, add), Ok(0));
    assert_eq!(q.read_remote(ro_key, 0x2000, &mut [0; 4]), Ok(()));
    assert_eq!(
        (m.stats.refused, m.stats.ok, m.stats.bytes),
        (6, 2, 4),
        "six refusals, an atomic and a 4-byte READ"
    );
    assert_eq!(m.read(rw, 0, 16), [[0; 8], 1u64.to_ne_bytes()].concat());
    assert!(m.read(ro, 0, 64).iter().all(|&b| b == 0));
}

#[test]
#[should_panic(expected = "REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE")]
fn registration_follows_reg_mr() {
    SimMemory::new().register(0x1000, 64, MrAccess::REMOTE_WRITE);
}
