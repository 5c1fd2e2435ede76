//! ECN congestion control (DCQCN, docs/wire.md §11) on real device datapaths
//! (`nic::simhost`, virtual time): RC flows from their own sender devices into one receiver
//! device behind a 10 Gbit/s switch port with a 192 KiB queue that marks CE above 32 KiB
//! (`simhost::Bottleneck`). With the devices' ECN on, the receiver's device answers CE marks
//! with CNPs and each sender's rate controller backs off: the flows share the port fairly
//! and nothing is tail-dropped after the warm-up. With ECN off, the same scenario overflows
//! the queue. The figures are virtual time's, not the host's.

use std::net::Ipv4Addr;

use abi::{SendFlags, WcStatus, WrOpcode};
use nic::simhost::{all_access, rdma_wr, sge, Bottleneck, Cq, DevId, Host, Mr, Qp, RcOpts};
use nic::Limits;
use transport::DcqcnParams;

const MSG: u32 = 64 * 1024;
const DEPTH: u64 = 4;
const B: Ipv4Addr = Ipv4Addr::new(127, 97, 0, 1);
const WARM_NS: u64 = 10_000_000;
const MEASURE_NS: u64 = 20_000_000;
/// Flows start this far apart.
const STAGGER_NS: u64 = 200_000;

struct Flow {
    dev: DevId,
    qp: Qp,
    cq: Cq,
    mr: Mr,
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

fn run(flows: usize, ecn: bool) -> Outcome {
    let mut h = Host::new(7 + flows as u64);
    h.delay_ns = 2_000;
    h.link_mbps = Some(25_000);
    h.bottleneck = Some(Bottleneck {
        to: B,
        rate_mbps: 10_000,
        queue_bytes: 192 * 1024,
        mark_bytes: 32 * 1024,
    });
    let configure = |c: &mut nic::DeviceConfig| {
        c.ecn = ecn;
        c.dcqcn = DcqcnParams {
            max_rate: 25_000_000_000,
            pacer_burst_ns: 2_000,
            measure_ns: 50_000,
            ..DcqcnParams::mlx5()
        };
    };
    let rx = h.add_device_with(B, Limits::default(), configure).unwrap();
    let rx_cq = h.create_cq(rx, 64).unwrap();
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
        let cq = h.create_cq(dev, 64).unwrap();
        let qp = h.create_rc_qp(dev, &cq, &cq, 16).unwrap();
        let peer = h.create_rc_qp(rx, &rx_cq, &rx_cq, 16).unwrap();
        h.connect_rc_with(dev, qp, rx, peer.qpn, opts).unwrap();
        h.connect_rc_with(rx, peer, dev, qp.qpn, opts).unwrap();
        let mr = h.reg_mr(dev, u64::from(MSG), all_access()).unwrap();
        let remote = h.reg_mr(rx, u64::from(MSG), all_access()).unwrap();
        fl.push(Flow {
            dev,
            qp,
            cq,
            mr,
            remote,
            starts: STAGGER_NS * i as u64,
            posted: 0,
            done: 0,
            goodput: 0,
        });
    }
    let start = h.now();
    let last_start = STAGGER_NS * (flows as u64 - 1);
    let warm_end = start + last_start + WARM_NS;
    let end = warm_end + MEASURE_NS;
    let mut drops_at_warm_end = None;
    while h.now() < end {
        for f in fl.iter_mut() {
            while h.now() >= start + f.starts && f.posted - f.done < DEPTH {
                let wr = rdma_wr(
                    f.posted,
                    WrOpcode::RdmaWrite,
                    SendFlags::SIGNALED.0,
                    f.remote.addr,
                    f.remote.rkey,
                );
                h.post_send(f.dev, f.qp, &[(wr, vec![sge(&f.mr, 0, MSG)])])
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
fn shares_fairly(flows: usize) {
    let o = run(flows, true);
    let total: u64 = o.goodput.iter().sum();
    let gbps = total as f64 * 8.0 / MEASURE_NS as f64;
    eprintln!(
        "{flows} flows: goodput {:?} ({gbps:.2} Gbit/s, Jain {:.3}), marks {}, CNPs {}, drops after warm-up {}",
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
    assert!(gbps > 5.0, "the port is used: {gbps:.2} Gbit/s");
}

#[test]
fn dcqcn_two_flows_share_a_marking_bottleneck() {
    shares_fairly(2);
}

#[test]
fn dcqcn_four_flows_share_a_marking_bottleneck() {
    shares_fairly(4);
}

#[test]
fn without_ecn_the_same_bottleneck_overflows() {
    let o = run(2, false);
    eprintln!(
        "goodput {:?}, drops after warm-up {}",
        o.goodput, o.drops_measured
    );
    assert_eq!(o.cnps_received, 0);
    assert!(
        o.drops_measured > 0,
        "tail drops without congestion control"
    );
}
