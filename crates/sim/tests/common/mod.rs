//! Workload shapes the simulator suites share.
#![allow(dead_code)]

use sim::transport::Mtu;
use sim::workload::{Op, WorkloadConfig};
use sim::LinkConfig;

/// The hostile-link suites' link: 10 % loss, 5 % duplication, 10 % reordering, 1 %
/// corruption, the default delays.
pub fn hostile(seed: u64, messages: u64, ops: Vec<Op>) -> WorkloadConfig {
    WorkloadConfig {
        seed,
        messages,
        ops,
        link: LinkConfig {
            loss: 0.1,
            dup: 0.05,
            reorder: 0.1,
            corrupt: 0.01,
            ..LinkConfig::default()
        },
        ..WorkloadConfig::default()
    }
}

/// perftest's defaults, one way — `messages` messages of 64 KiB, path MTU 1024, local ACK
/// timeout 14 (67 ms), a window of 128 messages and rxe's 128 unacknowledged PSNs — on a
/// 1 Gbit/s path with a 40 µs round trip and the given faults (probabilities).
pub fn perftest_like(
    op: Op,
    seed: u64,
    messages: u64,
    (loss, dup, reorder, corrupt): (f64, f64, f64, f64),
) -> WorkloadConfig {
    WorkloadConfig {
        seed,
        messages,
        size_min: 65536,
        size_max: 65536,
        ops: vec![op],
        link: LinkConfig {
            loss,
            dup,
            reorder,
            corrupt,
            delay_ns: 20_000,
            jitter_ns: 4_000,
            reorder_delay_ns: (20_000, 201_000),
            rate_gbps: 1,
            partition_at: None,
            bottleneck: None,
        },
        mtu: Mtu::Mtu1024,
        timeout: 14,
        window: 128,
        bidirectional: false,
        max_unacked_psns: 128,
        ..WorkloadConfig::default()
    }
}
