//! Selective repeat (docs/wire.md §5.6) on real device datapaths (`nic::simhost::workload`,
//! virtual time): with it agreed at both ends, hostile wires still deliver every message
//! once, in order and intact, and a perftest-like stream resends far fewer packets than
//! go-back-N on the same seed; forced on one end only (negotiation never does that) the
//! transfer is still correct.

use nic::simhost::workload::{run, RunConfig, RunReport};

fn assert_clean(r: &RunReport, what: &str, messages: u64) {
    assert!(r.passed(), "{what}: {:?}", r.details);
    assert_eq!(r.completed, messages, "{what}");
    assert_eq!(
        r.statuses.keys().copied().collect::<Vec<_>>(),
        [0],
        "{what}: only successes: {:?}",
        r.statuses
    );
}

#[test]
fn hostile_runs_pass_with_selective_repeat_over_op_mixes() {
    // SEND / WRITE / READ / atomics in four mixes, two seeds each, over a wire that loses
    // 10 %, duplicates 5 %, reorders 10 % and corrupts 1 %.
    let mixes = [
        [true, true, true, true],
        [true, false, false, false],
        [false, true, true, false],
        [true, false, false, true],
    ];
    let mut resent = 0;
    for (i, ops) in mixes.into_iter().enumerate() {
        for seed in [11u64, 12] {
            let seed = seed + 100 * i as u64;
            let r = run(&RunConfig {
                seed,
                messages: 400,
                size_max: 16384,
                window: 16,
                ops,
                loss: 0.1,
                dup: 0.05,
                reorder: 0.1,
                corrupt: 0.01,
                selective_repeat: [true; 2],
                ..RunConfig::default()
            });
            assert_clean(&r, &format!("seed {seed} ops {ops:?}"), 400);
            resent += r.retransmissions;
        }
    }
    assert!(resent > 0, "the wire made the transport resend");
}

#[test]
fn selective_repeat_resends_fewer_packets_than_go_back_n() {
    // perftest's defaults (64 KiB messages, 128 outstanding, path MTU 1024) one way over
    // the netfault "hostile" profile: 5 % loss, 2 % duplication, 25 % reordering, 1 %
    // corruption. Go-back-N resends everything after each hole; selective repeat only the
    // holes.
    for (seed, ops) in [
        (1u64, [false, true, false, false]),
        (2, [false, true, false, false]),
        (3, [true, false, false, false]),
    ] {
        let cfg = |sr| RunConfig {
            seed,
            messages: 128,
            size_min: 65536,
            size_max: 65536,
            window: 128,
            ops,
            loss: 0.05,
            dup: 0.02,
            reorder: 0.25,
            corrupt: 0.01,
            selective_repeat: [sr; 2],
            ..RunConfig::default()
        };
        let gbn = run(&cfg(false));
        let sr = run(&cfg(true));
        let what = format!("seed {seed} ops {ops:?}");
        assert_clean(&gbn, &format!("{what} go-back-N"), 128);
        assert_clean(&sr, &format!("{what} selective repeat"), 128);
        println!(
            "{what}: retransmissions go-back-N {} selective repeat {}; virtual time {} / {} ms",
            gbn.retransmissions,
            sr.retransmissions,
            gbn.virtual_time_ns / 1_000_000,
            sr.virtual_time_ns / 1_000_000
        );
        assert!(
            sr.retransmissions * 2 < gbn.retransmissions,
            "{what}: {} vs {}",
            sr.retransmissions,
            gbn.retransmissions
        );
    }
}

#[test]
fn selective_repeat_forced_on_one_end_only_is_still_correct() {
    // A requester that resends single packets facing a go-back-N responder, and the
    // reverse: whatever one end assumes, the other's rules keep the data right.
    for sr in [[true, false], [false, true]] {
        for ops in [[true, true, true, true], [false, true, false, false]] {
            let r = run(&RunConfig {
                seed: 31,
                messages: 400,
                size_max: 16384,
                window: 16,
                ops,
                loss: 0.1,
                dup: 0.05,
                reorder: 0.1,
                corrupt: 0.01,
                selective_repeat: sr,
                two_way: true,
                ..RunConfig::default()
            });
            assert_clean(&r, &format!("{sr:?} {ops:?}"), 400);
        }
    }
}
