//! post_send + poll_cq round trips of an 8-byte RDMA WRITE on one device (internal
//! loopback), through the fast path (WQE into the SQ ring + doorbell, CQE read from the
//! CQ ring: no system call) and through the slow path (POST_SEND and POLL_CQ commands to
//! the control plane: a socket round trip each), for the comparison docs/architecture.md
//! §2–§3 draws.
//!
//! `cargo bench -p uroce --bench post_poll` (add `-- --quick` or
//! `-- --measurement-time 3 --warm-up-time 1` for a short run). One round trip = post one
//! signaled WRITE and poll until its completion arrives, so it includes the engine noticing
//! the doorbell, the requester, the loopback, the responder's DMA, the ACK and the
//! completer. `write8_postlist32` posts 32 WRITEs (the last signaled) with one doorbell and
//! reports per-WRITE throughput, the ≥ 5 M/s target of docs/architecture.md §8. The device is bound
//! to 127.77.93.1 so a bench run does not collide with tests using 127.0.0.1.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use uroce::pair::{connect, End, PairOpts, ALL_ACCESS};
use uroce::{AccessFlags, MrBuf, Result, SendWr, Wc, WcStatus};

/// Longest wait for one completion before the benchmark gives up (a broken device must not
/// hang the run).
const COMPLETION_WAIT: Duration = Duration::from_secs(10);

struct Setup {
    a: End,
    _b: End,
    src: MrBuf,
    dst: MrBuf,
}

fn setup() -> Setup {
    let dev = uroce::device("bench0", "127.77.93.1".parse().expect("address"));
    let (a, b) = connect(&dev, &dev, &PairOpts::default()).expect("connect a loopback pair");
    let src = a.pd.alloc_mr(8, AccessFlags::LOCAL_WRITE).expect("src MR");
    let dst = b.pd.alloc_mr(8 * 32, ALL_ACCESS).expect("dst MR");
    Setup { a, _b: b, src, dst }
}

/// Poll with `poll` until one completion arrives; panics on an error completion or after
/// [`COMPLETION_WAIT`].
fn wait_one(mut poll: impl FnMut(&mut [Wc]) -> Result<usize>) {
    let mut wc = [Wc::default(); 1];
    let mut spins = 0u32;
    let mut deadline: Option<Instant> = None;
    loop {
        if poll(&mut wc).expect("poll") == 1 {
            assert_eq!(wc[0].status, WcStatus::Success, "completion {:?}", wc[0]);
            return;
        }
        spins += 1;
        if spins % 4096 == 0 {
            let d = *deadline.get_or_insert_with(|| Instant::now() + COMPLETION_WAIT);
            assert!(
                Instant::now() < d,
                "no completion within {COMPLETION_WAIT:?}"
            );
        }
    }
}

fn bench_round_trips(c: &mut Criterion) {
    let s = setup();
    let rm = s.dst.remote();
    let sge = [s.src.sge(0, 8)];
    let payload = [0x5au8; 8];
    let mut g = c.benchmark_group("write8");
    g.throughput(Throughput::Elements(1));

    g.bench_function("fast_post_send_poll_cq", |b| {
        b.iter(|| {
            let wr = SendWr::write(1, &sge, rm.addr, rm.rkey).signaled();
            s.a.qp.post_send(black_box(&[wr])).expect("post_send");
            wait_one(|wc| s.a.cq.poll(wc));
        })
    });

    g.bench_function("fast_inline_post_send_poll_cq", |b| {
        b.iter(|| {
            let wr = SendWr::write(2, &[], rm.addr, rm.rkey)
                .inline(black_box(&payload))
                .signaled();
            s.a.qp.post_send(&[wr]).expect("post_send");
            wait_one(|wc| s.a.cq.poll(wc));
        })
    });

    g.bench_function("slow_post_send_cmd_poll_cmd", |b| {
        b.iter(|| {
            let wr = SendWr::write(3, &sge, rm.addr, rm.rkey).signaled();
            s.a.qp
                .post_send_cmd(black_box(&[wr]))
                .expect("post_send_cmd");
            wait_one(|wc| s.a.cq.poll_cmd(wc));
        })
    });
    g.finish();

    // 32 WRITEs per doorbell, one completion per list: per-WRITE cost of the fast path.
    let mut g = c.benchmark_group("write8_postlist32");
    g.throughput(Throughput::Elements(32));
    let list: Vec<SendWr<'_>> = (0..32u64)
        .map(|i| {
            let wr = SendWr::write(100 + i, &sge, rm.addr + 8 * i, rm.rkey);
            if i == 31 {
                wr.signaled()
            } else {
                wr
            }
        })
        .collect();
    g.bench_function("fast_post_send_poll_cq", |b| {
        b.iter(|| {
            s.a.qp.post_send(black_box(&list)).expect("post_send");
            wait_one(|wc| s.a.cq.poll(wc));
        })
    });
    g.finish();
}

criterion_group!(benches, bench_round_trips);
criterion_main!(benches);
