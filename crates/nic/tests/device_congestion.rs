//! ECN congestion control (DCQCN, docs/wire.md §11) on real device datapaths
//! (`nic::simhost`, virtual time): RC flows from their own sender devices into one receiver
//! device behind a 10 Gbit/s switch port with a 192 KiB queue that marks CE above 32 KiB
//! (`simhost::Bottleneck`). With the devices' ECN on, the receiver's device answers CE marks
//! with CNPs and each sender's rate controller backs off: the flows share the port fairly
//! and nothing is tail-dropped after the warm-up. With ECN off, the same scenario overflows
//! the queue. The same holds for READs, whose data are the responders' READ responses (the
//! CNPs go to the responder, whose rate controller paces them), for eight flows, and for
//! netfault's 100 Mbit/s bottleneck with the device's default parameters. The figures are
//! virtual time's, not the host's.

use std::net::Ipv4Addr;

use abi::{SendFlags, WcStatus, WrOpcode};
use nic::simhost::{all_access, rdma_wr, sge, Bottleneck, Cq, DevId, Host, Mr, Qp, RcOpts};
use nic::Limits;
use transport::DcqcnParams;

const MSG: u32 = 64 * 1024;
const DEPTH: u64 = 4;
const B: Ipv4Addr = Ipv4Addr::new(127, 97, 0, 1);

/// One bottleneck experiment.
#[derive(Clone, Copy)]
struct Scenario {
    flows: usize,
    /// ECN (CE marks answered with CNPs, rate control) on every device.
    ecn: bool,
    /// The receiver READs from each sender instead of each sender WRITEing to it.
    read: bool,
    params: DcqcnParams,
    /// Each device's own link (Mbit/s).
    link_mbps: u64,
    /// One-way wire delay (ns).
    delay_ns: u64,
    /// The switch port in front of the receiver (Mbit/s).
    port_mbps: u64,
    /// Flows start this far apart (ns).
    stagger_ns: u64,
    warm_ns: u64,
    measure_ns: u64,
}

/// A 10 Gbit/s port in front of the receiver, 25 Gbit/s device links 2 µs apart, DCQCN with
/// mlx5's parameters and a 50 µs measurement period.
fn datacentre(flows: usize, ecn: bool) -> Scenario {
    Scenario {
        flows,
        ecn,
        read: false,
        params: DcqcnParams {
            max_rate: 25_000_000_000,
            pacer_burst_ns: 2_000,
            measure_ns: 50_000,
            ..DcqcnParams::mlx5()
        },
        link_mbps: 25_000,
        delay_ns: 2_000,
        port_mbps: 10_000,
        stagger_ns: 200_000,
        warm_ns: 10_000_000,
        measure_ns: 20_000_000,
    }
}

struct Flow {
    dev: DevId,
    /// The QP that posts (the sender's for WRITEs, the receiver's for READs), its device
    /// and CQ, the MR it gathers from or scatters to, and the other end's MR.
    poster: (DevId, Qp),
    cq: Cq,
    local: Mr,
    remote: Mr,
    /// When it starts sending (ns after the run's start).
    starts: u64,
    posted: u64,
    done: u64,
    /// Bytes completed inside the measurement window.
    goodput: u64,
}

struct Outcome {
    goodput: Vec<u64>,
    drops_measured: u64,
    marks: u64,
    cnps_received: u64,
}

fn jain(x: &[u64]) -> f64 {
    let s: f64 = x.iter().map(|&v| v as f64).sum();
    let q: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    s * s / (x.len() as f64 * q)
}

fn run(sc: Scenario) -> Outcome {
    let flows = sc.flows;
    let mut h = Host::new(7 + flows as u64);
    h.delay_ns = sc.delay_ns;
    h.link_mbps = Some(sc.link_mbps);
    h.bottleneck = Some(Bottleneck {
        to: B,
        rate_mbps: sc.port_mbps,
        queue_bytes: 192 * 1024,
        mark_bytes: 32 * 1024,
    });
    let configure = |c: &mut nic::DeviceConfig| {
        c.ecn = sc.ecn;
        c.dcqcn = sc.params;
    };
    let rx = h.add_device_with(B, Limits::default(), configure).unwrap();
    let opts = RcOpts {
        timeout: 14,
        ..RcOpts::default()
    };
    let mut fl = Vec::new();
    for i in 0..flows {
        let addr = Ipv4Addr::new(127, 97, 1, 1 + i as u8);
        let dev = h
            .add_device_with(addr, Limits::default(), configure)
            .unwrap();
        let tx_cq = h.create_cq(dev, 64).unwrap();
        let rx_cq = h.create_cq(rx, 64).unwrap();
        let qp = h.create_rc_qp(dev, &tx_cq, &tx_cq, 16).unwrap();
        let peer = h.create_rc_qp(rx, &rx_cq, &rx_cq, 16).unwrap();
        h.connect_rc_with(dev, qp, rx, peer.qpn, opts).unwrap();
        h.connect_rc_with(rx, peer, dev, qp.qpn, opts).unwrap();
        let tx_mr = h.reg_mr(dev, u64::from(MSG), all_access()).unwrap();
        let rx_mr = h.reg_mr(rx, u64::from(MSG), all_access()).unwrap();
        let (poster, cq, local, remote) = if sc.read {
            ((rx, peer), rx_cq, rx_mr, tx_mr)
        } else {
            ((dev, qp), tx_cq, tx_mr, rx_mr)
        };
        fl.push(Flow {
            dev,
            poster,
            cq,
            local,
            remote,
            starts: sc.stagger_ns * i as u64,
            posted: 0,
            done: 0,
            goodput: 0,
        });
    }
    let op = if sc.read {
        WrOpcode::RdmaRead
    } else {
        WrOpcode::RdmaWrite
    };
    let start = h.now();
    let last_start = sc.stagger_ns * (flows as u64 - 1);
    let warm_end = start + last_start + sc.warm_ns;
    let end = warm_end + sc.measure_ns;
    let mut drops_at_warm_end = None;
    while h.now() < end {
        for f in fl.iter_mut() {
            while h.now() >= start + f.starts && f.posted - f.done < DEPTH {
                let wr = rdma_wr(
                    f.posted,
                    op,
                    SendFlags::SIGNALED.0,
                    f.remote.addr,
                    f.remote.rkey,
                );
                h.post_send(f.poster.0, f.poster.1, &[(wr, vec![sge(&f.local, 0, MSG)])])
                    .unwrap();
                f.posted += 1;
            }
        }
        let limit = end - h.now();
        let next_start = fl
            .iter()
            .map(|f| start + f.starts)
            .filter(|&t| t > h.now())
            .min();
        h.alarm = next_start;
        let woke = h.run_until(limit, |h| {
            h.now() >= warm_end && drops_at_warm_end.is_none()
                || next_start.is_some_and(|t| h.now() >= t)
                || fl.iter_mut().any(|f| f.cq.pending())
        });
        h.alarm = None;
        if !woke {
            break; // the end came first
        }
        if h.now() >= warm_end && drops_at_warm_end.is_none() {
            drops_at_warm_end = Some(h.port.tail_drops);
        }
        for f in fl.iter_mut() {
            for wc in h.poll_cq(&mut f.cq, 64) {
                assert_eq!(wc.status, WcStatus::Success.raw(), "{wc:?}");
                f.done += 1;
                if h.now() >= warm_end {
                    f.goodput += u64::from(MSG);
                }
            }
        }
    }
    // The rate controllers that react: the senders' requesters, or for READs the senders'
    // responders (either way the flow's own device).
    let cnps_received = fl
        .iter()
        .map(|f| h.port_counters(f.dev).transport.rp_cnp_handled)
        .sum();
    Outcome {
        goodput: fl.iter().map(|f| f.goodput).collect(),
        drops_measured: h.port.tail_drops - drops_at_warm_end.unwrap_or(0),
        marks: h.port.ce_marks,
        cnps_received,
    }
}

/// With ECN on: CE marks, CNPs, no tail drop after the warm-up, fair shares (Jain's index
/// at least 0.9), the port used.
fn shares_fairly(sc: Scenario) {
    let o = run(sc);
    let total: u64 = o.goodput.iter().sum();
    let gbps = total as f64 * 8.0 / sc.measure_ns as f64;
    eprintln!(
        "{} flows{}: goodput {:?} ({gbps:.2} Gbit/s, Jain {:.3}), marks {}, CNPs {}, drops after warm-up {}",
        sc.flows,
        if sc.read { " (READ)" } else { "" },
        o.goodput,
        jain(&o.goodput),
        o.marks,
        o.cnps_received,
        o.drops_measured
    );
    assert!(o.marks > 0, "the port marked CE");
    assert!(
        o.cnps_received > 0,
        "the receiver's device answered with CNPs"
    );
    assert_eq!(o.drops_measured, 0, "no tail drop after the warm-up");
    assert!(jain(&o.goodput) >= 0.9, "fair shares: {:?}", o.goodput);
    assert!(
        gbps > 0.5 * sc.port_mbps as f64 / 1000.0,
        "the port is used: {gbps:.2} Gbit/s"
    );
}

/// With ECN off: tail drops after the warm-up, and no CNP.
fn overflows(sc: Scenario) {
    let o = run(sc);
    eprintln!(
        "{} flows{}, no ECN: goodput {:?}, drops after warm-up {}",
        sc.flows,
        if sc.read { " (READ)" } else { "" },
        o.goodput,
        o.drops_measured
    );
    assert_eq!(o.cnps_received, 0);
    assert!(
        o.drops_measured > 0,
        "tail drops without congestion control"
    );
}

#[test]
fn dcqcn_two_flows_share_a_marking_bottleneck() {
    shares_fairly(datacentre(2, true));
}

#[test]
fn dcqcn_four_flows_share_a_marking_bottleneck() {
    shares_fairly(datacentre(4, true));
}

#[test]
fn dcqcn_eight_flows_share_a_marking_bottleneck() {
    shares_fairly(datacentre(8, true));
}

#[test]
fn dcqcn_paces_read_responses_through_a_marking_bottleneck() {
    // Four READs of 64 KiB at a time from four senders: the data are READ responses, and
    // the senders' responders, cut by the receiver's CNPs, pace them.
    shares_fairly(Scenario {
        read: true,
        ..datacentre(4, true)
    });
}

#[test]
fn without_ecn_the_same_bottleneck_overflows() {
    overflows(datacentre(2, false));
    overflows(Scenario {
        read: true,
        ..datacentre(4, false)
    });
}

#[test]
fn two_flows_at_100_mbit_with_the_default_parameters() {
    // netfault's bottleneck (tests/netfault) in virtual time with the device's default
    // (software path) parameters: 100 Mbit/s, the same queue and threshold, 2 Gbit/s
    // senders 30 µs away.
    let sc = Scenario {
        params: DcqcnParams::default(),
        link_mbps: 2_000,
        delay_ns: 30_000,
        port_mbps: 100,
        stagger_ns: 1_000_000,
        warm_ns: 1_000_000_000,
        measure_ns: 2_000_000_000,
        ..datacentre(2, true)
    };
    let o = run(sc);
    let mbps: Vec<f64> = o
        .goodput
        .iter()
        .map(|&b| b as f64 * 8e3 / sc.measure_ns as f64)
        .collect();
    let total: f64 = mbps.iter().sum();
    let j = jain(&o.goodput);
    eprintln!(
        "100 Mbit/s, 2 flows: goodput {mbps:.1?} Mbit/s (sum {total:.1}), Jain {j:.3}, marks {}, CNPs {}, drops after warm-up {}",
        o.marks, o.cnps_received, o.drops_measured
    );
    // At most 1024 of every 1106 bytes on the wire are payload: 92.6 Mbit/s of goodput.
    let max = 100.0 * 1024.0 / 1106.0;
    assert!(j >= 0.9, "Jain {j:.3}");
    assert_eq!(o.drops_measured, 0);
    assert!(total >= 0.85 * max, "{total:.1} Mbit/s");
}
