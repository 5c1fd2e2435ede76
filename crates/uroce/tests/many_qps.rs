//! Many busy RC QPs sharing one device: hundreds of QPs each with a window of 64 KiB WRITEs
//! outstanding at once must all complete, intact, without the device resending what it
//! still holds queued (docs/architecture.md §4, "Many QPs"). Its own test binary: the
//! counters it checks are the device's, which nothing else may use meanwhile.

mod common;

use common::*;
use uroce::pair::{connect_in, PairOpts};
use uroce::*;

/// 400 connected pairs on one device (800 QPs), each requester posting 4 WRITEs of 64 KiB
/// at once: 102,400 packets want the internal loopback at the same moment. Every WRITE
/// completes and lands; retransmissions stay a small fraction of the packets sent. (A device
/// that queues every packet the QPs can build, and whose QPs send half a message per turn
/// and wait a whole round of the queue for the rest, times out and resends about a third
/// of its packets here.)
#[test]
fn four_hundred_busy_qps_on_one_device_do_not_resend_what_is_queued() {
    const PAIRS: usize = 400;
    const MSGS: u64 = 4;
    const LEN: usize = 65536;
    let ctx = uroce::device("uroce0", "127.0.0.1".parse().unwrap())
        .open()
        .expect("open");
    let pairs: Vec<_> = (0..PAIRS)
        .map(|_| connect_in(&ctx, &ctx, &PairOpts::default()).expect("connect"))
        .collect();
    let bufs: Vec<_> = pairs
        .iter()
        .enumerate()
        .map(|(i, (a, b))| {
            let mut src = buf(a, LEN);
            src.copy_from_slice(&pattern(i as u8, LEN));
            (src, buf(b, LEN))
        })
        .collect();
    for ((a, _), (src, dst)) in pairs.iter().zip(&bufs) {
        let rm = dst.remote();
        let sge = [src.sge(0, LEN as u32)];
        let wrs: Vec<_> = (0..MSGS)
            .map(|k| {
                let wr = SendWr::write(k, &sge, rm.at(0), rm.rkey);
                if k == MSGS - 1 {
                    wr.signaled()
                } else {
                    wr
                }
            })
            .collect();
        a.qp.post_send(&wrs).expect("post");
    }
    for (i, ((a, _), (_, dst))) in pairs.iter().zip(&bufs).enumerate() {
        let w = wait1(&a.cq);
        assert_eq!(
            (w.status, w.wr_id),
            (WcStatus::Success, MSGS - 1),
            "pair {i}"
        );
        assert!(
            dst[..] == pattern(i as u8, LEN)[..],
            "pair {i}: payload differs"
        );
    }
    let c = nic::device("uroce0").expect("device").port_counters();
    let t = c.transport;
    let payload_pkts = PAIRS as u64 * MSGS * (LEN as u64 / 1024);
    assert!(
        t.sent_pkts >= payload_pkts,
        "sent {} packets, fewer than the {payload_pkts} the WRITEs need",
        t.sent_pkts
    );
    assert!(
        t.retransmissions * 20 < payload_pkts,
        "{} of {payload_pkts} packets resent ({} local ACK timeouts, {} probes)",
        t.retransmissions,
        t.local_ack_timeouts,
        t.rto_probes
    );
}
