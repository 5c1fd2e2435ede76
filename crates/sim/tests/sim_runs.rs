//! Whole-workload runs in the simulator: several seeds and op mixes over a hostile link,
//! exact replay from a seed, a clean link, a partition, RNR starvation, MTU variants — and a
//! sabotaged run proving the checker catches corrupted delivery.

mod common;

use std::net::Ipv4Addr;

use sim::workload::{run, Op, WorkloadConfig};
use sim::{LinkConfig, Sim, Step};
use transport::wire::{Psn, Qkey, Qpn};
use transport::{
    bring_up, LocalData, Mtu, QpAttr, QpConfig, RecvWr, SendWr, Service, Sge, SgeList, Time,
    UdDest, WcFlags, WcStatus, WrOpcode,
};

#[test]
fn lossy_runs_pass_over_seeds_and_op_mixes() {
    let mixes = [
        vec![Op::Send, Op::Write, Op::Read, Op::Atomic],
        vec![Op::Send],
        vec![Op::Write, Op::Read],
        vec![Op::Atomic, Op::Send],
    ];
    let mut corrupt_caught = 0;
    for (i, ops) in mixes.iter().enumerate() {
        for seed in [11u64, 12] {
            let seed = seed + 100 * i as u64;
            let r = run(common::hostile(seed, 2000, ops.clone()));
            assert!(
                r.passed(),
                "seed {seed} ops {ops:?}: {:?}",
                r.violation_details
            );
            assert_eq!(r.messages_completed, 2000, "seed {seed}");
            assert!(r.bytes_verified > 0);
            assert!(r.retransmissions > 0, "a lossy link forces retransmissions");
            assert!(r.naks.seq > 0);
            assert!(r.net.dropped > 0 && r.net.duplicated > 0 && r.net.reordered > 0);
            assert_eq!(r.net.undetected_corruption, 0);
            assert!(r.status_counts.get("success").copied().unwrap_or(0) >= 2000);
            assert_eq!(
                r.status_counts.len(),
                1,
                "only successes: {:?}",
                r.status_counts
            );
            corrupt_caught += r.net.corrupt_detected;
        }
    }
    assert!(
        corrupt_caught > 0,
        "some corrupted frames were caught by the ICRC"
    );
}

#[test]
fn same_seed_replays_exactly() {
    let a = run(common::hostile(
        77,
        400,
        vec![Op::Send, Op::Read, Op::Atomic],
    ));
    let b = run(common::hostile(
        77,
        400,
        vec![Op::Send, Op::Read, Op::Atomic],
    ));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
    let c = run(common::hostile(
        78,
        400,
        vec![Op::Send, Op::Read, Op::Atomic],
    ));
    assert_ne!(a.net, c.net, "another seed, another run");
}

#[test]
fn fault_free_run_has_no_retransmissions() {
    let r = run(WorkloadConfig {
        seed: 5,
        messages: 2000,
        ..WorkloadConfig::default()
    });
    assert!(r.passed(), "{:?}", r.violation_details);
    assert_eq!(r.retransmissions, 0);
    assert_eq!(r.timeouts, 0);
    assert_eq!(r.naks, Default::default());
    assert_eq!(r.duplicates_received, 0);
    assert_eq!(r.messages_completed, 2000);
}

#[test]
fn partition_ends_in_retry_exceeded_then_flush() {
    let cfg = WorkloadConfig {
        seed: 9,
        messages: 20_000,
        link: LinkConfig {
            partition_at: Some(Time::from_millis(2)),
            ..LinkConfig::default()
        },
        ..WorkloadConfig::default()
    };
    let r = run(cfg);
    assert!(r.passed(), "{:?}", r.violation_details);
    assert_eq!(
        r.final_states,
        [transport::QpState::Err, transport::QpState::Err]
    );
    assert_eq!(
        r.status_counts.get(WcStatus::RetryExcErr.as_str()),
        Some(&2),
        "one per direction"
    );
    let flushed = r
        .status_counts
        .get(WcStatus::WrFlushErr.as_str())
        .copied()
        .unwrap_or(0);
    assert!(
        flushed >= 8,
        "outstanding and later work flushed: {flushed}"
    );
    assert!(r.messages_completed > 0 && r.messages_completed < 20_000);
    assert!(r.net.partition_drops > 0);
    // retry_cnt 3 by default with a partition: 4 timeouts per side.
    assert_eq!(r.timeouts, 8);
}

#[test]
fn rnr_starved_receiver() {
    let cfg = WorkloadConfig {
        seed: 3,
        messages: 1500,
        ops: vec![Op::Send, Op::Write],
        recv_depth: 2,
        recv_delay_ns: 30_000,
        ..WorkloadConfig::default()
    };
    let r = run(cfg);
    assert!(r.passed(), "{:?}", r.violation_details);
    assert!(r.naks.rnr > 0, "the responder ran dry");
}

#[test]
fn mtu_variants() {
    for mtu in [Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu2048, Mtu::Mtu4096] {
        let mut cfg = common::hostile(21, 300, vec![Op::Send, Op::Write, Op::Read]);
        cfg.mtu = mtu;
        let r = run(cfg);
        assert!(r.passed(), "{mtu:?}: {:?}", r.violation_details);
    }
}

#[test]
fn checker_catches_sabotaged_delivery() {
    let cfg = WorkloadConfig {
        seed: 4,
        messages: 300,
        ops: vec![Op::Send],
        sabotage_every: 50,
        ..WorkloadConfig::default()
    };
    let r = run(cfg);
    assert!(!r.passed());
    assert!(r.violations >= 5, "{}", r.violations);
    assert!(
        r.violation_details[0].contains("received bytes differ"),
        "{:?}",
        r.violation_details
    );
}

#[test]
fn ud_over_real_frames_carries_the_ipv4_header() {
    let mut sim = Sim::new(1, LinkConfig::default());
    let a = sim.add_endpoint(Ipv4Addr::new(10, 1, 0, 1));
    let b = sim.add_endpoint(Ipv4Addr::new(10, 1, 0, 2));
    let attr = QpAttr {
        qkey: 0x42,
        ..QpAttr::default()
    };
    for (ep, qpn) in [(a, 0x21), (b, 0x22)] {
        sim.endpoints[ep]
            .mem
            .register(0x1000, 0x10000, sim::MrAccess::LOCAL_WRITE);
        sim.add_qp(ep, QpConfig::new(Qpn::new(qpn), Service::Ud), 1 - ep);
        bring_up(
            sim.qp_mut(ep, 0),
            Qpn::new(0),
            Psn::new(0),
            Psn::new(0),
            Mtu::Mtu1024,
            &attr,
        )
        .unwrap();
    }
    let lkey_b = sim.endpoints[b].mem.region(0).lkey;
    let lkey_a = sim.endpoints[a].mem.region(0).lkey;
    for i in 0..10u64 {
        let sge = Sge {
            addr: 0x1000 + i * 0x400,
            length: 0x400,
            lkey: lkey_b,
        };
        sim.qp_mut(b, 0)
            .post_recv(RecvWr {
                wr_id: i,
                sges: SgeList::single(sge),
            })
            .unwrap();
        let mut w = SendWr::new(i, WrOpcode::Send);
        w.local = LocalData::Sges(SgeList::single(Sge {
            addr: 0x1000,
            length: 100 + i as u32,
            lkey: lkey_a,
        }));
        w.ud = Some(UdDest {
            ah: b as u32,
            remote_qpn: Qpn::new(0x22),
            remote_qkey: Qkey(0x42),
        });
        sim.qp_mut(a, 0).post_send(w).unwrap();
    }
    sim.kick(a);
    while sim.step() != Step::Idle {}
    let mut got = 0;
    while let Some(c) = sim.qp_mut(b, 0).poll_completion() {
        assert_eq!(c.status, WcStatus::Success);
        assert_eq!(c.byte_len, 40 + 100 + c.wr_id as u32);
        assert!(c.wc_flags.contains(WcFlags::GRH));
        let area = sim.endpoints[b].mem.read(0, c.wr_id * 0x400, 40);
        assert_eq!(&area[..20], &[0u8; 20]);
        assert_eq!(area[20], 0x45, "IPv4 version/IHL");
        assert_eq!(&area[32..36], &[10, 1, 0, 1], "source address");
        assert_eq!(&area[36..40], &[10, 1, 0, 2], "destination address");
        got += 1;
    }
    assert_eq!(got, 10);
    assert_eq!(sim.stats().frames_delivered, 10);
}
