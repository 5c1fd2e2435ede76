//! Teardown: objects die children-first whatever order the application drops them in,
//! closing a context is confirmed promptly by the control plane, and nothing is left on
//! the device afterwards. Own device (uroce-td on 127.0.0.9), so the counts are exact.

use std::time::{Duration, Instant};

use uroce::pair::{connect, PairOpts, ALL_ACCESS};
use uroce::*;

#[test]
fn dropping_everything_in_any_order_frees_every_device_object() {
    let dev = uroce::device("uroce-td", "127.0.0.9".parse().unwrap());
    let o = PairOpts {
        channel: true,
        ..PairOpts::default()
    };
    let (a, b) = connect(&dev, &dev, &o).unwrap();
    let nic_dev = nic::device("uroce-td").expect("device started");
    let srq =
        b.pd.create_srq(&SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let ah = a.pd.create_ah(&AhAttr::roce(b.gid, 0, PORT)).unwrap();
    let mr = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    // Work left outstanding: receives nobody will fill.
    b.qp.post_recv(&[RecvWr::new(1, &[mr.sge(0, 64)])]).unwrap();
    srq.post_recv(&[RecvWr::new(2, &[mr.sge(64, 64)])]).unwrap();
    let s = nic_dev.stats();
    assert_eq!((s.contexts, s.qps, s.cqs, s.pds), (1, 2, 2, 2), "{s:?}");
    assert_eq!((s.srqs, s.ahs, s.comp_channels), (1, 1, 2), "{s:?}");
    assert_eq!(s.mrs, 1);
    // Drop parents before children: the handles go, the objects wait for their users.
    let (ctx, pd_b, cq_a) = (a.ctx.clone(), b.pd.clone(), a.cq.clone());
    drop(ctx);
    drop(pd_b);
    drop(cq_a);
    drop(a);
    assert_eq!(nic_dev.stats().qps, 1, "A's QP is gone, B's is not");
    drop(b);
    drop(srq);
    drop(ah);
    let started = Instant::now();
    drop(mr);
    let s = nic_dev.stats();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "closing the context waited {:?} for the control plane",
        started.elapsed()
    );
    assert_eq!(s, nic::DeviceStats::default(), "objects left behind");
}
