//! ECN congestion control (DCQCN, docs/wire.md §11) through a marking bottleneck: 2, 4 and
//! 8 RC flows from their own senders (25 Gbit/s links) into one receiver behind a 10 Gbit/s
//! switch port with a 192 KiB queue that marks CE above 32 KiB. With DCQCN on, the flows
//! share the port fairly (Jain's index ≥ 0.9), nothing is tail-dropped after the warm-up and
//! the queue stays under the marking threshold plus one window; with it off, the same
//! scenario overflows the queue. The same holds when the data are READ responses (the
//! receiver READs from each sender, whose responder is paced by its own rate controller).
//! Virtual time: the figures do not depend on the host.

use std::net::Ipv4Addr;

use sim::net::Bottleneck;
use sim::{LinkConfig, NetStats, Sim};
use transport::wire::{Psn, Qpn};
use transport::{
    bring_up, AccessFlags, DcqcnParams, LocalData, Mtu, QpAttr, QpConfig, SendWr, Service, Sge,
    SgeList, Time, WcStatus, WrOpcode,
};

const MSG: u32 = 64 * 1024;
const DEPTH: usize = 4;
const MARK: u64 = 32 * 1024;
const QUEUE: u64 = 192 * 1024;
const WINDOW_PKTS: u32 = 128;
/// One window of full packets on the wire: 1024 payload + BTH/RETH + ICRC + IPv4/UDP +
/// Ethernet framing.
const WINDOW_BYTES: u64 = WINDOW_PKTS as u64 * (1024 + 12 + 16 + 4 + 28 + 38);

struct Outcome {
    /// Bytes each flow completed in the measurement window.
    goodput: Vec<u64>,
    /// Network counters over the whole run, and the largest queue after the warm-up.
    net: NetStats,
    /// Tail drops during the measurement window.
    drops_measured: u64,
    cnps: u64,
    measure_ns: u64,
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let q: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    s * s / (x.len() as f64 * q)
}

/// One scenario: `flows` senders on `link_gbps` links, `delay_ns` away from a switch port of
/// `port_mbps` in front of the receiver; flows start `stagger_ns` apart, goodput is measured
/// for `measure_ns` from `warm_ns` after the last start.
#[derive(Clone, Copy)]
struct Scenario {
    flows: usize,
    /// The receiver READs from the senders instead of the senders WRITing to it.
    read: bool,
    cc: Option<DcqcnParams>,
    seed: u64,
    link_gbps: u64,
    delay_ns: u64,
    port_mbps: u64,
    stagger_ns: u64,
    warm_ns: u64,
    measure_ns: u64,
}

/// The data-centre case: 25 Gbit/s senders, 2 µs links, a 10 Gbit/s port.
fn datacentre(flows: usize, cc: bool) -> Scenario {
    Scenario {
        flows,
        read: false,
        cc: cc.then_some(DcqcnParams {
            max_rate: 25_000_000_000,
            pacer_burst_ns: 2_000,
            measure_ns: 50_000,
            ..DcqcnParams::mlx5()
        }),
        seed: 7 + flows as u64,
        link_gbps: 25,
        delay_ns: 2_000,
        port_mbps: 10_000,
        stagger_ns: 200_000,
        warm_ns: 20_000_000,
        measure_ns: 30_000_000,
    }
}

fn run(sc: Scenario) -> Outcome {
    let Scenario { flows, seed, .. } = sc;
    let cc = sc.cc.is_some();
    let link = LinkConfig {
        rate_gbps: sc.link_gbps,
        delay_ns: sc.delay_ns,
        jitter_ns: sc.delay_ns / 10,
        bottleneck: Some(Bottleneck {
            rate_mbps: sc.port_mbps,
            queue_bytes: QUEUE,
            mark_bytes: MARK,
        }),
        ..LinkConfig::default()
    };
    let params = sc.cc.unwrap_or_default();
    let mut sim = Sim::new(seed, link);
    let rx = sim.add_endpoint(Ipv4Addr::new(10, 2, 0, 1));
    sim.endpoints[rx].mem.register(
        0x10_0000,
        MSG as usize,
        sim::MrAccess::REMOTE_WRITE | sim::MrAccess::LOCAL_WRITE,
    );
    let rx_rkey = sim.endpoints[rx].mem.region(0).rkey;
    let rx_lkey = sim.endpoints[rx].mem.region(0).lkey;
    let attr = QpAttr {
        qp_access_flags: AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ,
        max_rd_atomic: DEPTH as u8,
        max_dest_rd_atomic: DEPTH as u8,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    let mut senders = Vec::new();
    for i in 0..flows {
        let ep = sim.add_endpoint(Ipv4Addr::new(10, 2, 1, 1 + i as u8));
        sim.endpoints[ep].mem.register(
            0x1000,
            MSG as usize,
            sim::MrAccess::LOCAL_WRITE | sim::MrAccess::REMOTE_READ,
        );
        let (sq, rq) = (Qpn::new(0x100 + i as u32), Qpn::new(0x200 + i as u32));
        let mut cfg = QpConfig::new(sq, Service::Rc);
        cfg.max_unacked_psns = WINDOW_PKTS;
        cfg.cc = cc.then_some(params);
        let sqi = sim.add_qp(ep, cfg, rx);
        let mut rcfg = QpConfig::new(rq, Service::Rc);
        rcfg.cc = cc.then_some(params);
        let rqi = sim.add_qp(rx, rcfg, ep);
        bring_up(
            sim.qp_mut(ep, sqi),
            rq,
            Psn::new(0),
            Psn::new(0),
            Mtu::Mtu1024,
            &attr,
        )
        .unwrap();
        bring_up(
            sim.qp_mut(rx, rqi),
            sq,
            Psn::new(0),
            Psn::new(0),
            Mtu::Mtu1024,
            &attr,
        )
        .unwrap();
        // Who posts, its local key and the peer's remote key: the sender WRITEs to the
        // receiver, or the receiver READs from the sender.
        let (ep_lkey, ep_rkey) = {
            let r = sim.endpoints[ep].mem.region(0);
            (r.lkey, r.rkey)
        };
        senders.push(if sc.read {
            (rx, rqi, rx_lkey, 0x10_0000, ep_rkey, 0x1000)
        } else {
            (ep, sqi, ep_lkey, 0x1000, rx_rkey, 0x10_0000)
        });
    }
    let start = |i: usize| Time::from_nanos(sc.stagger_ns * i as u64);
    let warm = start(flows - 1).add_nanos(sc.warm_ns);
    let end = warm.add_nanos(sc.measure_ns);
    let mut outstanding = vec![0usize; flows];
    let mut goodput = vec![0u64; flows];
    let mut next_id = 0u64;
    let mut drops_at_warm = None;
    loop {
        let now = sim.now();
        if now >= end {
            break;
        }
        if now >= warm && drops_at_warm.is_none() {
            drops_at_warm = Some(sim.stats().tail_dropped);
            sim.reset_max_queue();
        }
        for (i, &(ep, qi, lkey, laddr, rkey, raddr)) in senders.iter().enumerate() {
            while let Some(c) = sim.qp_mut(ep, qi).poll_completion() {
                assert_eq!(c.status, WcStatus::Success, "flow {i}: {c:?}");
                outstanding[i] -= 1;
                if now >= warm {
                    goodput[i] += u64::from(MSG);
                }
            }
            if now < start(i) {
                continue;
            }
            let mut posted = false;
            while outstanding[i] < DEPTH {
                let op = if sc.read {
                    WrOpcode::RdmaRead
                } else {
                    WrOpcode::RdmaWrite
                };
                let mut w = SendWr::new(next_id, op);
                next_id += 1;
                w.local = LocalData::Sges(SgeList::single(Sge {
                    addr: laddr,
                    length: MSG,
                    lkey,
                }));
                w.remote_addr = raddr;
                w.rkey = rkey;
                sim.qp_mut(ep, qi).post_send(w).unwrap();
                outstanding[i] += 1;
                posted = true;
            }
            if posted {
                sim.kick(ep);
            }
        }
        let next_start = (0..flows).map(start).find(|&t| t > now);
        match (sim.next_event_at(), next_start) {
            (Some(e), Some(s)) if s < e => sim.advance_to(s),
            (None, Some(s)) => sim.advance_to(s),
            (None, None) => panic!("the network went idle"),
            _ => {
                sim.step();
            }
        }
    }
    let cnps = (0..flows)
        .map(|i| sim.endpoints[rx].qps[i].qp.counters().np_cnp_sent)
        .sum();
    let net = *sim.stats();
    Outcome {
        goodput,
        drops_measured: net.tail_dropped - drops_at_warm.unwrap_or(0),
        net,
        cnps,
        measure_ns: end.nanos_since(warm),
    }
}

fn check_with_cc(flows: usize) {
    check(datacentre(flows, true));
}

fn check(sc: Scenario) {
    let flows = sc.flows;
    let o = run(sc);
    let gbps: Vec<f64> = o
        .goodput
        .iter()
        .map(|&b| b as f64 * 8.0 / o.measure_ns as f64)
        .collect();
    let j = jain(&o.goodput);
    let total: f64 = gbps.iter().sum();
    eprintln!(
        "{flows} flows, DCQCN: goodput {gbps:.2?} Gbit/s (sum {total:.2}), Jain {j:.3}, \
         max queue {} B, tail drops {} ({} measured), CE {}, CNPs {}",
        o.net.max_queue_bytes, o.net.tail_dropped, o.drops_measured, o.net.ce_marked, o.cnps
    );
    assert!(
        o.net.ce_marked > 0 && o.cnps > 0,
        "the port marked and CNPs went"
    );
    assert!(j >= 0.9, "Jain's fairness {j:.3} < 0.9: {gbps:.2?}");
    assert!(
        o.net.max_queue_bytes <= MARK + WINDOW_BYTES,
        "queue {} above the marking threshold plus one window ({})",
        o.net.max_queue_bytes,
        MARK + WINDOW_BYTES
    );
    assert_eq!(o.drops_measured, 0, "no tail drops after the warm-up");
    // The port stays busy: at least 80 % of its 10 Gbit/s carries goodput.
    assert!(total >= 8.0, "aggregate goodput {total:.2} Gbit/s");
}

#[test]
fn dcqcn_two_flows_share_a_marking_bottleneck() {
    check_with_cc(2);
}

#[test]
fn dcqcn_four_flows_share_a_marking_bottleneck() {
    check_with_cc(4);
}

#[test]
fn dcqcn_eight_flows_share_a_marking_bottleneck() {
    check_with_cc(8);
}

#[test]
fn dcqcn_paces_read_responses_through_a_marking_bottleneck() {
    // Four receivers' READs of 64 KiB: the data are READ responses, from the senders'
    // responders, and their rate controllers (cut by the receiver's CNPs) pace them.
    check(Scenario {
        read: true,
        ..datacentre(4, true)
    });
}

#[test]
fn without_congestion_control_read_responses_overflow_the_same_bottleneck() {
    let o = run(Scenario {
        read: true,
        ..datacentre(4, false)
    });
    assert!(o.drops_measured > 0, "tail drops expected");
}

#[test]
fn without_congestion_control_the_same_bottleneck_overflows() {
    for flows in [2, 4, 8] {
        let o = run(datacentre(flows, false));
        eprintln!(
            "{flows} flows, no CC: goodput {:?} B, max queue {} B, tail drops {} ({} measured), CE {}",
            o.goodput, o.net.max_queue_bytes, o.net.tail_dropped, o.drops_measured, o.net.ce_marked
        );
        assert!(
            o.drops_measured > 0,
            "{flows} flows without congestion control: tail drops expected"
        );
        assert_eq!(o.cnps, 0, "no CNPs without congestion control");
    }
}

/// netfault's bottleneck (scripts/netfault-cc-test.sh) in virtual time, with the device's
/// default (software-path) parameters: two flows, 100 Mbit/s, the same queue and threshold,
/// software-NIC senders (2 Gbit/s) 30 µs away. `UROCE_DCQCN` overrides parameters, to try
/// others.
#[test]
fn two_flows_at_100_mbit_with_the_default_parameters() {
    let o = run(Scenario {
        flows: 2,
        read: false,
        cc: Some(tune(DcqcnParams::default())),
        seed: 3,
        link_gbps: 2,
        delay_ns: 30_000,
        port_mbps: 100,
        stagger_ns: 1_000_000,
        warm_ns: 1_000_000_000,
        measure_ns: 2_000_000_000,
    });
    let mbps: Vec<f64> = o
        .goodput
        .iter()
        .map(|&b| b as f64 * 8e3 / o.measure_ns as f64)
        .collect();
    let total: f64 = mbps.iter().sum();
    let j = jain(&o.goodput);
    eprintln!(
        "100 Mbit/s, 2 flows, DCQCN: goodput {mbps:.1?} Mbit/s (sum {total:.1}), Jain {j:.3}, \
         max queue {} B, tail drops {} ({} measured), CE {}, CNPs {}",
        o.net.max_queue_bytes, o.net.tail_dropped, o.drops_measured, o.net.ce_marked, o.cnps
    );
    // At most 1024 of every 1106 bytes on the wire are payload: 92.6 Mbit/s of goodput.
    let max = 100.0 * 1024.0 / 1106.0;
    assert!(j >= 0.9, "Jain {j:.3}");
    assert_eq!(o.drops_measured, 0);
    assert!(o.net.max_queue_bytes <= MARK + WINDOW_BYTES);
    assert!(total >= 0.85 * max, "{total:.1} Mbit/s");
}

fn tune(mut p: DcqcnParams) -> DcqcnParams {
    if let Ok(v) = std::env::var("UROCE_DCQCN") {
        p.apply(&v).unwrap();
    }
    p
}
