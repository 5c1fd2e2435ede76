//! Moving a QP to RESET drops its completions still in the CQ, and only its own (as
//! mlx4/mlx5's providers do; docs/compat.md §9): a QP brought back from ERR must not hand
//! its next poller the flushes of its previous life. rdma-core's tests/test_mr.py restates
//! QPs this way.

mod common;

use uroce::pair::ALL_ACCESS;
use uroce::*;

#[test]
fn reset_drops_only_that_qps_completions_and_keeps_order() {
    let dev = uroce::device("uroce0", "127.0.0.1".parse().unwrap());
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let q1 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap))
        .unwrap();
    let q2 = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap))
        .unwrap();
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let sge = [mr.sge(0, 8)];
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    for q in [&q1, &q2] {
        q.modify(&init, mask).unwrap();
    }
    // Interleaved receives on both QPs, then both to ERR: their flushes interleave too.
    for (q, id) in [(&q1, 1), (&q2, 2), (&q1, 3), (&q2, 4), (&q1, 5)] {
        q.post_recv(&[RecvWr::new(id, &sge)]).unwrap();
    }
    q1.set_state(QpState::Err).unwrap();
    q2.set_state(QpState::Err).unwrap();
    // Wait until all five flushes are in the CQ, without taking any (an empty poll does
    // the engine's work while it sleeps).
    let deadline = std::time::Instant::now() + common::TIMEOUT;
    while cq.pending().unwrap() < 5 {
        assert!(
            std::time::Instant::now() < deadline,
            "flushes did not arrive"
        );
        let _ = cq.poll(&mut []);
        std::thread::yield_now();
    }
    q1.set_state(QpState::Reset).unwrap();
    let left = common::wait(&cq, 2);
    assert_eq!(
        left.iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect::<Vec<_>>(),
        vec![
            (2, q2.qp_num(), WcStatus::WrFlushErr),
            (4, q2.qp_num(), WcStatus::WrFlushErr)
        ]
    );
    common::quiet(&cq, std::time::Duration::from_millis(50));
}
