//! MR keys are capabilities (IBTA Vol 1 §10.6.3): they must not be derivable from one
//! another, and a key next to a valid one must be refused (docs/architecture.md §4,
//! `crates/nic/src/keys.rs`).

mod common;

use std::collections::HashSet;

use common::*;
use uroce::pair::ALL_ACCESS;
use uroce::*;

const N: usize = 1000;

/// The keys of `N` registrations on one PD, all alive at once.
fn keys() -> Vec<u32> {
    let dev = uroce::device("uroce0", "127.0.0.1".parse().unwrap());
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mrs: Vec<MrBuf> = (0..N)
        .map(|_| pd.alloc_mr(64, ALL_ACCESS).unwrap())
        .collect();
    for m in &mrs {
        assert_eq!(m.lkey(), m.rkey(), "lkey == rkey, as rxe");
    }
    mrs.iter().map(|m| m.rkey()).collect()
}

#[test]
fn keys_are_unique_and_not_derivable_from_each_other() {
    let k = keys();
    let distinct: HashSet<u32> = k.iter().copied().collect();
    assert_eq!(distinct.len(), N, "keys repeat");
    // Every bit of a key is a coin flip: with 1000 fair flips, a count outside 350..=650 is
    // 9.5 standard deviations out. Index-derived keys (rxe: index << 8 | counter) have
    // high bits that are all zero.
    for bit in 0..32 {
        let ones = k.iter().filter(|&&x| x >> bit & 1 == 1).count();
        assert!(
            (350..=650).contains(&ones),
            "bit {bit} set in {ones} of {N} keys: predictable"
        );
    }
    // No key is a simple function of the previous one: not the next index, not the next
    // 8-bit counter, not a constant step.
    let mut steps = HashSet::new();
    for w in k.windows(2) {
        let (p, n) = (w[0], w[1]);
        for guess in [
            p.wrapping_add(1),
            p.wrapping_add(0x100),
            p.wrapping_add(0x101),
            (p & !0xff) | (p.wrapping_add(1) & 0xff),
            p ^ 1,
        ] {
            assert_ne!(n, guess, "key {n:#x} follows from {p:#x}");
        }
        steps.insert(n.wrapping_sub(p));
    }
    assert!(steps.len() > N - 10, "only {} distinct steps", steps.len());
    // The low 24 bits alone (what an index in the top byte would leave) are spread too.
    let low: HashSet<u32> = k.iter().map(|x| x & 0xff_ffff).collect();
    assert!(
        low.len() > N - 10,
        "low 24 bits repeat: {} distinct",
        low.len()
    );
}

#[test]
fn a_deregistered_slot_gets_an_unrelated_key() {
    let dev = uroce::device("uroce0", "127.0.0.1".parse().unwrap());
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut seen = HashSet::new();
    for _ in 0..200 {
        let m = pd.alloc_mr(64, ALL_ACCESS).unwrap();
        assert!(seen.insert(m.rkey()), "key {:#x} came back", m.rkey());
        drop(m);
    }
}

topo_tests!(keys_next_to_a_valid_one_are_rem_access_err, |t| {
    // Probes an attacker would try from a valid key: single bit flips anywhere, and what
    // an index << 8 | counter scheme would hand out next for the same index.
    let probes: [fn(u32) -> u32; 6] = [
        |k| k ^ 1,
        |k| k ^ 0x80,
        |k| k ^ 0x100,
        |k| k ^ 0x8000_0000,
        |k| (k & !0xff) | (k.wrapping_add(1) & 0xff),
        |k| k.wrapping_add(0x100),
    ];
    for (i, probe) in probes.iter().enumerate() {
        let (a, b) = rc(t);
        let mut src = buf(&a, 256);
        src.fill(0xa5);
        let dst = buf(&b, 256);
        let rm = dst.remote();
        let bad = probe(rm.rkey);
        assert_ne!(bad, rm.rkey);
        a.qp.post_send(&[SendWr::write(i as u64, &[src.sge(0, 256)], rm.addr, bad).signaled()])
            .unwrap();
        let w = wait1(&a.cq);
        assert_eq!(
            (w.wr_id, w.status),
            (i as u64, WcStatus::RemAccessErr),
            "rkey {bad:#x} next to {:#x} was accepted",
            rm.rkey
        );
        assert!(dst.iter().all(|&x| x == 0), "responder memory was written");
        // The right key still works on a fresh pair.
        let (a, b) = rc(t);
        let mut src = buf(&a, 256);
        src.fill(0x3c);
        let dst = buf(&b, 256);
        let rm = dst.remote();
        a.qp.post_send(&[SendWr::write(9, &[src.sge(0, 256)], rm.addr, rm.rkey).signaled()])
            .unwrap();
        assert_eq!(wait1(&a.cq).status, WcStatus::Success);
        assert!(dst.iter().all(|&x| x == 0x3c));
    }
});
