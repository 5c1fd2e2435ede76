//! What loss costs with perftest's defaults — 128 WRITEs or SENDs of 64 KiB in flight, path
//! MTU 1024, local ACK timeout 14 (67 ms) — between two real devices (`nic::simhost`,
//! virtual time) on 1 Gbit/s links with a 40 µs round trip: every byte verified, and
//! counts bound the retransmissions and local ACK timeouts (plus, at 1 % loss, the goodput
//! in virtual time against the same run without loss: deterministic, no wall clock).
//!
//! A device pushes what its window allows into its own link's queue (as the engine does
//! into its UDP socket), so at the moment of a loss the whole window is in flight and a
//! go-back-N resends all of it: about 1 + p × window packets per payload packet. The
//! window's loss floor is held to twice the measured bandwidth-delay product, so that
//! queue stays short (docs/wire.md §5.5): 1.29–1.55 at 1 % loss here, where half the loss
//! gap alone gave 1.67–1.72; the bare-transport simulation, whose link pulls packets only
//! as fast as it carries them, resends less (1.09–1.10) because it never queues.

use nic::simhost::workload::{run, RunConfig, RunReport};

const MESSAGES: u64 = 256;
const SIZE: u32 = 65536;

/// [SEND, WRITE, READ, atomics] with only `op` on.
const WRITE: [bool; 4] = [false, true, false, false];
const SEND: [bool; 4] = [true, false, false, false];

fn perftest_like(
    ops: [bool; 4],
    seed: u64,
    loss: f64,
    reorder: f64,
    dup: f64,
    corrupt: f64,
) -> RunReport {
    let r = run(&RunConfig {
        seed,
        messages: MESSAGES,
        size_min: SIZE,
        size_max: SIZE,
        ops,
        window: 128,
        link_mbps: Some(1_000),
        delay_ns: 20_000,
        reorder_ns: 200_000,
        timeout: 14,
        loss,
        reorder,
        dup,
        corrupt,
        ..RunConfig::default()
    });
    assert!(r.passed(), "seed {seed}: {:?}", r.details);
    assert_eq!(r.completed, MESSAGES, "seed {seed}");
    assert_eq!(r.bytes_verified, MESSAGES * u64::from(SIZE), "seed {seed}");
    r
}

/// Request packets sent per payload packet (each message is 64 packets at MTU 1024).
fn data_per_payload(r: &RunReport) -> f64 {
    let payload = MESSAGES * u64::from(SIZE / 1024);
    (payload + r.retransmissions) as f64 / payload as f64
}

/// Bytes verified per virtual nanosecond over the run.
fn goodput(r: &RunReport) -> f64 {
    r.bytes_verified as f64 / r.virtual_time_ns.max(1) as f64
}

#[test]
fn one_percent_loss_costs_little_retransmission_and_no_ack_timeouts() {
    for (name, ops) in [("WRITE", WRITE), ("SEND", SEND)] {
        let clean = goodput(&perftest_like(ops, 1, 0.0, 0.0, 0.0, 0.0));
        for seed in 1..=3 {
            let r = perftest_like(ops, seed, 0.01, 0.0, 0.0, 0.0);
            let g = goodput(&r) / clean;
            let ratio = data_per_payload(&r);
            println!(
                "{name} seed {seed}: goodput {g:.3} x the lossless run, {ratio:.3} data packets \
                 per payload packet, {} sequence NAKs, {} local ACK timeouts",
                r.counters[0].transport.rcvd_seq_err, r.timeouts
            );
            assert!(g >= 0.75, "{name} seed {seed}: {g:.3} x");
            assert!(ratio < 1.6, "{name} seed {seed}: {ratio:.3}");
            assert!(
                r.timeouts <= 1,
                "{name} seed {seed}: {} timeouts",
                r.timeouts
            );
        }
    }
}

#[test]
fn a_hostile_link_costs_a_bounded_retransmission() {
    // Loss 5 %, reordering 25 %, duplication 2 %, corruption 1 % (netfault's "hostile"):
    // every reordered packet is a sequence NAK and a go-back, so the window stays small.
    for (name, ops) in [("WRITE", WRITE), ("SEND", SEND)] {
        let r = perftest_like(ops, 1, 0.05, 0.25, 0.02, 0.01);
        let ratio = data_per_payload(&r);
        println!(
            "{name}: {ratio:.3} data packets per payload packet, {} local ACK timeouts",
            r.timeouts
        );
        assert!(ratio < 5.0, "{name}: {ratio:.3}");
        assert!(r.timeouts <= 5, "{name}: {} timeouts", r.timeouts);
    }
}
