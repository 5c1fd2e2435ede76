//! Shared helpers for uroce's integration tests: the two topologies, connected pairs,
//! polling with a deadline.
#![allow(dead_code)]

pub mod strace;

use std::time::{Duration, Instant};

use uroce::pair::{connect, End, PairOpts, ALL_ACCESS};
use uroce::*;

/// Same device (internal loopback) or two devices on 127.0.0.1 / 127.0.0.2 (UDP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Topo {
    SameDevice,
    TwoDevices,
}

pub fn topo_devices(t: Topo) -> (Device, Device) {
    let a = uroce::device("uroce0", "127.0.0.1".parse().unwrap());
    match t {
        Topo::SameDevice => (a.clone(), a),
        Topo::TwoDevices => (a, uroce::device("uroce1", "127.0.0.2".parse().unwrap())),
    }
}

pub fn pair(t: Topo, o: &PairOpts) -> (End, End) {
    let (a, b) = topo_devices(t);
    connect(&a, &b, o).expect("connect pair")
}

pub fn rc(t: Topo) -> (End, End) {
    pair(t, &PairOpts::default())
}

pub fn buf(e: &End, len: usize) -> MrBuf {
    e.pd.alloc_mr(len, ALL_ACCESS).expect("alloc_mr")
}

pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Take exactly `n` completions from `cq` (panics after [`TIMEOUT`], saying what came).
pub fn wait(cq: &Cq, n: usize) -> Vec<Wc> {
    let deadline = Instant::now() + TIMEOUT;
    let mut out = Vec::new();
    let mut wc = [Wc::default(); 16];
    while out.len() < n {
        // Never take more than asked: the rest stay in the CQ for the next wait.
        let want = (n - out.len()).min(wc.len());
        let k = cq.poll(&mut wc[..want]).expect("poll");
        out.extend_from_slice(&wc[..k]);
        if Instant::now() > deadline {
            panic!("waited for {n} completions, got {}: {out:#?}", out.len());
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
    out
}

/// One completion.
pub fn wait1(cq: &Cq) -> Wc {
    wait(cq, 1)[0]
}

/// Assert that no completion arrives on `cq` for `d`.
pub fn quiet(cq: &Cq, d: Duration) {
    let deadline = Instant::now() + d;
    let mut wc = [Wc::default(); 4];
    while Instant::now() < deadline {
        let k = cq.poll(&mut wc).unwrap();
        assert_eq!(k, 0, "unexpected completion {:?}", &wc[..k]);
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A recognisable byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(u32::from(seed) * 7) as u8
        })
        .collect()
}

/// Wait until the QP's state (queried from the control plane) is `s`.
pub fn wait_state(qp: &Qp, s: QpState) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let now = qp.query(QpAttrMask::STATE).unwrap().qp_state;
        if now == s {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "QP {} stuck in {now}, want {s}",
            qp.qp_num()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Generate one test per topology: `topo_tests!(name, |t| body)`.
#[macro_export]
macro_rules! topo_tests {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn same_device() {
                let f: fn(Topo) = $body;
                f(Topo::SameDevice);
            }
            #[test]
            fn two_devices() {
                let f: fn(Topo) = $body;
                f(Topo::TwoDevices);
            }
        }
    };
}

/// `n` RDMA WRITEs of `sge` from `a` to `rkey` at `addr(i)`, at most `depth` outstanding,
/// every `every`-th (and the last) signaled, polling `a`'s CQ; panics on a failed completion.
pub fn write_stream(
    a: &End,
    sge: &[Sge],
    rkey: u32,
    addr: impl Fn(u64) -> u64,
    n: u64,
    depth: u64,
    every: u64,
) {
    let mut wc = [Wc::default(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    while done < n {
        while posted < n && posted - done < depth {
            let mut wr = SendWr::write(posted, sge, addr(posted), rkey);
            if posted % every == every - 1 || posted == n - 1 {
                wr = wr.signaled();
            }
            a.qp.post_send(&[wr]).expect("post_send");
            posted += 1;
        }
        let k = a.cq.poll(&mut wc).expect("poll");
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            done = w.wr_id + 1;
        }
    }
}
