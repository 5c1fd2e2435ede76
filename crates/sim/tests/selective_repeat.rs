//! Selective repeat (docs/wire.md §5.6) in the simulator: hostile links with it on at both
//! ends deliver every message once, in order and intact, with fewer retransmitted packets
//! than go-back-N on the same seed; with it forced on at one end only (negotiation never
//! does that) the transfer is still correct.

mod common;

use sim::workload::{run, Op, Report, WorkloadConfig};
use sim::LinkConfig;

fn hostile(seed: u64, messages: u64, ops: Vec<Op>, sr: [bool; 2]) -> WorkloadConfig {
    WorkloadConfig {
        selective_repeat: sr,
        ..common::hostile(seed, messages, ops)
    }
}

/// perftest's defaults one way over the netfault "hostile" profile (5 % loss, 2 %
/// duplication, 25 % reordering, 1 % corruption).
fn perftest_hostile(op: Op, seed: u64, sr: bool) -> WorkloadConfig {
    WorkloadConfig {
        selective_repeat: [sr; 2],
        ..common::perftest_like(op, seed, 128, (0.05, 0.02, 0.25, 0.01))
    }
}

fn assert_clean(r: &Report, what: &str, messages: u64) {
    assert!(r.passed(), "{what}: {:?}", r.violation_details);
    assert_eq!(r.messages_completed, messages, "{what}");
    assert_eq!(r.net.undetected_corruption, 0, "{what}");
    assert_eq!(
        r.status_counts.len(),
        1,
        "{what}: only successes: {:?}",
        r.status_counts
    );
}

#[test]
fn hostile_runs_pass_with_selective_repeat_over_op_mixes() {
    let mixes = [
        vec![Op::Send, Op::Write, Op::Read, Op::Atomic],
        vec![Op::Send],
        vec![Op::Write, Op::Read],
        vec![Op::Atomic, Op::Send],
    ];
    let mut kept = 0;
    let mut single = 0;
    for (i, ops) in mixes.iter().enumerate() {
        for seed in [11u64, 12] {
            let seed = seed + 100 * i as u64;
            let r = run(hostile(seed, 2000, ops.clone(), [true; 2]));
            assert_clean(&r, &format!("seed {seed} ops {ops:?}"), 2000);
            assert!(r.retransmissions > 0 && r.naks.seq > 0);
            kept += r
                .counters
                .iter()
                .map(|c| c.sr_out_of_order_kept)
                .sum::<u64>();
            single += r.counters.iter().map(|c| c.sr_single_resends).sum::<u64>();
        }
    }
    assert!(kept > 0, "requests ahead of ePSN were kept");
    assert!(single > 0, "single packets were resent");
}

#[test]
fn selective_repeat_resends_fewer_packets_than_go_back_n() {
    for op in [Op::Write, Op::Send] {
        for seed in [1u64, 2] {
            let gbn = run(perftest_hostile(op, seed, false));
            let sr = run(perftest_hostile(op, seed, true));
            assert_clean(&gbn, &format!("{op:?} seed {seed} go-back-N"), 128);
            assert_clean(&sr, &format!("{op:?} seed {seed} selective repeat"), 128);
            assert_eq!(sr.bytes_verified, 128 * 65536);
            let mut clean_cfg = perftest_hostile(op, seed, true);
            clean_cfg.link = LinkConfig {
                loss: 0.0,
                dup: 0.0,
                reorder: 0.0,
                corrupt: 0.0,
                ..clean_cfg.link
            };
            let clean = run(clean_cfg).last_completion_ns as f64;
            println!(
                "{op:?} seed {seed}: retransmissions go-back-N {} selective repeat {}; \
                 goodput against the clean link {:.3} / {:.3}; SR probes {} timeouts {} \
                 naks {}",
                gbn.retransmissions,
                sr.retransmissions,
                clean / gbn.last_completion_ns as f64,
                clean / sr.last_completion_ns as f64,
                sr.rto_probes,
                sr.timeouts,
                sr.naks.seq,
            );
            assert!(
                sr.retransmissions * 2 < gbn.retransmissions,
                "{op:?} seed {seed}: {} vs {}",
                sr.retransmissions,
                gbn.retransmissions
            );
            // The go-back-N run never kept anything ahead of ePSN.
            assert_eq!(gbn.counters[1].sr_out_of_order_kept, 0);
            assert!(sr.counters[1].sr_out_of_order_kept > 0);
        }
    }
}

#[test]
fn selective_repeat_forced_on_one_end_only_is_still_correct() {
    for sr in [[true, false], [false, true]] {
        for ops in [
            vec![Op::Send, Op::Write, Op::Read, Op::Atomic],
            vec![Op::Write],
        ] {
            let r = run(hostile(31, 1000, ops.clone(), sr));
            assert_clean(&r, &format!("{sr:?} {ops:?}"), 1000);
        }
    }
}
