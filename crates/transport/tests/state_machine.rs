//! The QP state machine through `Qp::modify` and the post rules (docs/wire.md §6).

use transport::wire::Qpn;
use transport::{
    AccessFlags, AttrError, AttrErrorKind, ModifyError, Mtu, PostError, Qp, QpAttr, QpAttrMask,
    QpConfig, QpState, RecvWr, SendWr, Service, WrOpcode,
};

fn attr(state: QpState) -> QpAttr {
    QpAttr {
        qp_state: state,
        path_mtu: Mtu::Mtu2048,
        qkey: 7,
        rq_psn: 100,
        sq_psn: 0xFF_FFFF + 5,
        dest_qp_num: 0x22,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        timeout: 12,
        retry_cnt: 5,
        rnr_retry: 6,
        ..QpAttr::default()
    }
}

const INIT_RC: QpAttrMask = QpAttrMask(
    QpAttrMask::STATE.0
        | QpAttrMask::PKEY_INDEX.0
        | QpAttrMask::PORT.0
        | QpAttrMask::ACCESS_FLAGS.0,
);
const RTR_RC: QpAttrMask = QpAttrMask(
    QpAttrMask::STATE.0
        | QpAttrMask::AV.0
        | QpAttrMask::PATH_MTU.0
        | QpAttrMask::DEST_QPN.0
        | QpAttrMask::RQ_PSN.0
        | QpAttrMask::MAX_DEST_RD_ATOMIC.0
        | QpAttrMask::MIN_RNR_TIMER.0,
);
const RTS_RC: QpAttrMask = QpAttrMask(
    QpAttrMask::STATE.0
        | QpAttrMask::TIMEOUT.0
        | QpAttrMask::RETRY_CNT.0
        | QpAttrMask::RNR_RETRY.0
        | QpAttrMask::SQ_PSN.0
        | QpAttrMask::MAX_QP_RD_ATOMIC.0,
);

fn rc() -> Qp {
    Qp::new(QpConfig::new(Qpn::new(0x11), Service::Rc))
}

#[test]
fn rc_bring_up_and_illegal_steps() {
    let mut q = rc();
    assert_eq!(q.state(), QpState::Reset);
    assert_eq!(
        q.post_send(SendWr::new(1, WrOpcode::Send)),
        Err(PostError::InvalidState)
    );
    assert_eq!(q.post_recv(RecvWr::default()), Err(PostError::InvalidState));
    assert_eq!(
        q.modify(&attr(QpState::Rtr), RTR_RC),
        Err(ModifyError::IllegalTransition {
            from: QpState::Reset,
            to: QpState::Rtr
        })
    );
    assert_eq!(
        q.modify(&attr(QpState::Err), QpAttrMask::STATE),
        Err(ModifyError::IllegalTransition {
            from: QpState::Reset,
            to: QpState::Err
        })
    );
    assert_eq!(
        q.modify(
            &attr(QpState::Init),
            QpAttrMask(INIT_RC.0 & !QpAttrMask::ACCESS_FLAGS.0)
        ),
        Err(ModifyError::MissingAttr(QpAttrMask::ACCESS_FLAGS))
    );
    // A refused modify changes nothing.
    assert_eq!(q.state(), QpState::Reset);
    q.modify(&attr(QpState::Init), INIT_RC).unwrap();
    assert_eq!(
        q.post_recv(RecvWr::default()),
        Ok(()),
        "receives from INIT on"
    );
    assert_eq!(
        q.post_send(SendWr::new(1, WrOpcode::Send)),
        Err(PostError::InvalidState)
    );
    assert_eq!(
        q.modify(&attr(QpState::Rts), RTS_RC),
        Err(ModifyError::IllegalTransition {
            from: QpState::Init,
            to: QpState::Rts
        })
    );
    assert_eq!(
        q.modify(&attr(QpState::Rtr), RTR_RC | QpAttrMask::SQ_PSN),
        Err(ModifyError::UnexpectedAttr(QpAttrMask::SQ_PSN))
    );
    q.modify(&attr(QpState::Rtr), RTR_RC).unwrap();
    assert_eq!(
        q.post_send(SendWr::new(1, WrOpcode::Send)),
        Err(PostError::InvalidState)
    );
    let bad = QpAttr {
        timeout: 32,
        ..attr(QpState::Rts)
    };
    assert_eq!(
        q.modify(&bad, RTS_RC),
        Err(ModifyError::BadAttr(AttrError {
            field: "timeout",
            value: 32,
            kind: AttrErrorKind::OutOfRange,
            bound: Some(31),
        }))
    );
    q.modify(&attr(QpState::Rts), RTS_RC).unwrap();
    let a = q.query();
    assert_eq!(a.qp_state, QpState::Rts);
    assert_eq!(a.path_mtu, Mtu::Mtu2048);
    assert_eq!(a.sq_psn, 4, "PSNs are 24-bit");
    assert_eq!(a.rq_psn, 100);
    assert_eq!((a.timeout, a.retry_cnt, a.rnr_retry), (12, 5, 6));
    assert_eq!(a.dest_qp_num, 0x22);
    assert_eq!(q.max_packet_len(), 2048 + transport::MAX_HEADER_LEN);
}

#[test]
fn cur_state_rule_and_rts_options() {
    let mut q = rc();
    q.modify(&attr(QpState::Init), INIT_RC).unwrap();
    q.modify(&attr(QpState::Rtr), RTR_RC).unwrap();
    q.modify(&attr(QpState::Rts), RTS_RC).unwrap();
    let mut a = attr(QpState::Rts);
    a.cur_qp_state = QpState::Rtr;
    assert_eq!(
        q.modify(&a, QpAttrMask::STATE | QpAttrMask::CUR_STATE),
        Err(ModifyError::CurStateMismatch)
    );
    a.cur_qp_state = QpState::Rts;
    a.min_rnr_timer = 20;
    q.modify(
        &a,
        QpAttrMask::STATE | QpAttrMask::CUR_STATE | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    assert_eq!(q.query().min_rnr_timer, 20);
    // RTS->RTS may not change the path MTU or the PSNs.
    assert!(matches!(
        q.modify(&a, QpAttrMask::PATH_MTU),
        Err(ModifyError::UnexpectedAttr(_))
    ));
    // RTS->SQD->RTS with nothing in flight.
    q.modify(&attr(QpState::Sqd), QpAttrMask::STATE).unwrap();
    assert_eq!(q.state(), QpState::Sqd);
    q.modify(&attr(QpState::Sqd), QpAttrMask::TIMEOUT).unwrap();
    q.modify(&attr(QpState::Rts), QpAttrMask::STATE).unwrap();
    // Any state but RESET -> ERR; ERR -> only RESET/ERR.
    q.modify(&attr(QpState::Err), QpAttrMask::STATE).unwrap();
    for s in [
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
    ] {
        assert!(q.modify(&attr(s), QpAttrMask::STATE).is_err(), "ERR -> {s}");
    }
    q.modify(&attr(QpState::Err), QpAttrMask::STATE).unwrap();
    q.modify(&attr(QpState::Reset), QpAttrMask::STATE).unwrap();
    assert_eq!(q.query().timeout, 14, "RESET restores defaults");
}

#[test]
fn ud_masks_and_post_rules() {
    let mut q = Qp::new(QpConfig::new(Qpn::new(0x33), Service::Ud));
    assert!(
        q.modify(&attr(QpState::Init), INIT_RC).is_err(),
        "UD takes QKEY, not ACCESS_FLAGS"
    );
    let init = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    q.modify(&attr(QpState::Init), init).unwrap();
    q.modify(&attr(QpState::Rtr), QpAttrMask::STATE).unwrap();
    assert!(
        q.modify(&attr(QpState::Rts), QpAttrMask::STATE).is_err(),
        "SQ_PSN required"
    );
    q.modify(&attr(QpState::Rts), QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap();
    assert_eq!(q.query().qkey, 7);
    // UD: SEND only, with a destination.
    assert_eq!(
        q.post_send(SendWr::new(1, WrOpcode::RdmaWrite)),
        Err(PostError::BadOpcode)
    );
    assert_eq!(
        q.post_send(SendWr::new(1, WrOpcode::Send)),
        Err(PostError::BadDestination)
    );
    // UC: no READ or atomics.
    let mut u = Qp::new(QpConfig::new(Qpn::new(0x34), Service::Uc));
    let rtr_uc = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN;
    u.modify(&attr(QpState::Init), INIT_RC).unwrap();
    assert!(
        u.modify(&attr(QpState::Rtr), RTR_RC).is_err(),
        "UC takes no MAX_DEST_RD_ATOMIC"
    );
    u.modify(&attr(QpState::Rtr), rtr_uc).unwrap();
    u.modify(&attr(QpState::Rts), QpAttrMask::STATE | QpAttrMask::SQ_PSN)
        .unwrap();
    assert_eq!(
        u.post_send(SendWr::new(1, WrOpcode::RdmaRead)),
        Err(PostError::BadOpcode)
    );
    assert_eq!(
        u.post_send(SendWr::new(1, WrOpcode::AtomicFetchAndAdd)),
        Err(PostError::BadOpcode)
    );
}

#[test]
fn queue_limits() {
    let mut cfg = QpConfig::new(Qpn::new(0x11), Service::Rc);
    cfg.caps.max_send_wr = 2;
    cfg.caps.max_recv_wr = 1;
    let mut q = Qp::new(cfg);
    q.modify(&attr(QpState::Init), INIT_RC).unwrap();
    q.post_recv(RecvWr::default()).unwrap();
    assert_eq!(q.post_recv(RecvWr::default()), Err(PostError::QueueFull));
    q.modify(&attr(QpState::Rtr), RTR_RC).unwrap();
    q.modify(&attr(QpState::Rts), RTS_RC).unwrap();
    q.post_send(SendWr::new(1, WrOpcode::Send)).unwrap();
    q.post_send(SendWr::new(2, WrOpcode::Send)).unwrap();
    assert_eq!(
        q.post_send(SendWr::new(3, WrOpcode::Send)),
        Err(PostError::QueueFull)
    );
    // Flushed completions keep their slots until polled.
    q.modify(&attr(QpState::Err), QpAttrMask::STATE).unwrap();
    assert_eq!(
        q.post_send(SendWr::new(3, WrOpcode::Send)),
        Err(PostError::QueueFull)
    );
    assert!(q.poll_completion().is_some());
    q.post_send(SendWr::new(3, WrOpcode::Send)).unwrap();
    while q.poll_completion().is_some() {}
    let mut atomic = SendWr::new(4, WrOpcode::AtomicCmpAndSwp);
    atomic.local = transport::LocalData::Inline(vec![0; 8]);
    assert_eq!(
        q.post_send(atomic),
        Err(PostError::BadOpcode),
        "atomic results need an SGE"
    );
}
