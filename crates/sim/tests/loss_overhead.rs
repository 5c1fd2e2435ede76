//! What loss costs with perftest's defaults — 128 WRITEs or SENDs of 64 KiB in flight, path
//! MTU 1024, local ACK timeout 14 (67 ms), rxe's 128 unacknowledged PSNs — on a 1 Gbit/s
//! path with a 40 µs round trip: every byte verified, and counts bound the retransmissions
//! and local ACK timeouts (plus, at 1 % loss, the goodput in virtual time against the same
//! run without loss: deterministic, no wall clock). Go-back-N with the whole 128-packet
//! window resent after each loss and a lost tail left to the local ACK timeout fails these
//! bounds (7 local ACK timeouts at 1 % loss, 5.6 data packets per payload packet and 265
//! timeouts on the hostile link).

mod common;

use sim::workload::{self, Op, Report};

const MESSAGES: u64 = 256;
const SIZE: u32 = 65536;

fn perftest_like(op: Op, seed: u64, loss: f64, reorder: f64, dup: f64, corrupt: f64) -> Report {
    let cfg = common::perftest_like(op, seed, MESSAGES, (loss, dup, reorder, corrupt));
    let r = workload::run(cfg);
    assert!(r.passed(), "seed {seed}: {:?}", r.violation_details);
    assert_eq!(r.messages_completed, MESSAGES, "seed {seed}");
    assert_eq!(r.bytes_verified, MESSAGES * u64::from(SIZE), "seed {seed}");
    r
}

/// Request packets sent per payload packet (each message is 64 packets at MTU 1024).
fn data_per_payload(r: &Report) -> f64 {
    let payload = MESSAGES * u64::from(SIZE / 1024);
    (payload + r.retransmissions) as f64 / payload as f64
}

/// Bytes verified per virtual second up to the last completion.
fn goodput(r: &Report) -> f64 {
    r.bytes_verified as f64 / r.last_completion_ns.max(1) as f64
}

#[test]
fn one_percent_loss_costs_little_retransmission_and_no_ack_timeouts() {
    for op in [Op::Write, Op::Send] {
        let clean = goodput(&perftest_like(op, 1, 0.0, 0.0, 0.0, 0.0));
        for seed in 1..=3 {
            let r = perftest_like(op, seed, 0.01, 0.0, 0.0, 0.0);
            let g = goodput(&r) / clean;
            println!("{op:?} seed {seed}: goodput {g:.3} x the lossless run");
            assert!(g >= 0.5, "{op:?} seed {seed}: {g:.3} x");
            let ratio = data_per_payload(&r);
            println!(
                "{op:?} seed {seed}: {ratio:.3} data packets per payload packet, {} local ACK \
                 timeouts, {} frames",
                r.timeouts, r.net.frames_sent
            );
            assert!(ratio < 1.5, "{op:?} seed {seed}: {ratio:.3}");
            assert!(
                r.timeouts <= 1,
                "{op:?} seed {seed}: {} timeouts",
                r.timeouts
            );
        }
    }
}

#[test]
fn hostile_link_costs_a_bounded_retransmission() {
    // Loss 5 %, reordering 25 %, duplication 2 %, corruption 1 %: every reordered packet is
    // a sequence NAK and a go-back, so the window stays small.
    for op in [Op::Write, Op::Send] {
        let r = perftest_like(op, 1, 0.05, 0.25, 0.02, 0.01);
        let ratio = data_per_payload(&r);
        println!(
            "{op:?}: {ratio:.3} data packets per payload packet, {} local ACK timeouts, {} \
             frames",
            r.timeouts, r.net.frames_sent
        );
        assert!(ratio < 5.0, "{op:?}: {ratio:.3}");
        assert!(r.timeouts <= 5, "{op:?}: {} timeouts", r.timeouts);
    }
}
