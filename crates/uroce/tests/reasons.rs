//! Refusals of the control plane carry a reason: the rule broken (a stable code) and a
//! sentence naming the attribute and values, visible through the Rust `Error` — while the
//! errno stays the one rdma-core's callers see.

mod common;

use common::*;
use uroce::pair::{PairOpts, ALL_ACCESS};
use uroce::*;

fn cap() -> QpCap {
    QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// The reason of a control-plane refusal, after checking errno and kind.
fn reason(e: &Error, errno: Errno) -> (Rule, String) {
    assert_eq!(e.errno(), errno, "{e}");
    assert_eq!(e.kind(), ErrorKind::ControlPlane, "{e}");
    let r = e.reason().unwrap_or_else(|| panic!("no reason in {e}"));
    assert!(
        e.to_string().contains(r.text()),
        "Display lacks the reason: {e}"
    );
    (r.rule(), r.text().to_owned())
}

#[test]
fn modify_qp_refusals_name_state_and_attribute() {
    let (d, _) = topo_devices(Topo::SameDevice);
    let ctx = d.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None, 0).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap()))
        .unwrap();

    // RESET -> INIT without PKEY_INDEX, PORT and ACCESS_FLAGS.
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: PORT,
        qp_access_flags: AccessFlags::LOCAL_WRITE,
        ..QpAttr::default()
    };
    let e = qp.modify(&init, QpAttrMask::STATE).unwrap_err();
    let (rule, text) = reason(&e, Errno::EINVAL);
    assert_eq!(rule, Rule::MISSING_ATTR);
    assert!(text.starts_with("modify_qp: RESET -> INIT: "), "{text}");
    assert!(
        text.contains("PORT") && text.ends_with("missing from attr_mask"),
        "{text}"
    );

    qp.modify(
        &init,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS,
    )
    .unwrap();

    // INIT -> RTR with everything but DEST_QPN.
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: qp.qp_num(),
        rq_psn: 1,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    rtr.ah_attr = AhAttr::roce(ctx.query_gid(PORT, 0).unwrap(), 0, PORT);
    let all_but_dest_qpn = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    let e = qp.modify(&rtr, all_but_dest_qpn).unwrap_err();
    let (rule, text) = reason(&e, Errno::EINVAL);
    assert_eq!(rule, Rule::MISSING_ATTR);
    assert_eq!(
        text,
        "modify_qp: INIT -> RTR: DEST_QPN missing from attr_mask"
    );

    // An illegal transition.
    let e = qp.set_state(QpState::Rts).unwrap_err();
    let (rule, text) = reason(&e, Errno::EINVAL);
    assert_eq!(rule, Rule::ILLEGAL_TRANSITION);
    assert_eq!(
        text,
        "modify_qp: INIT -> RTS is not a legal QP state transition"
    );

    // A value out of range, checked by the device before the transition table.
    rtr.max_dest_rd_atomic = 200;
    let e = qp
        .modify(&rtr, all_but_dest_qpn | QpAttrMask::DEST_QPN)
        .unwrap_err();
    let (rule, text) = reason(&e, Errno::EINVAL);
    assert_eq!(rule, Rule::OVER_LIMIT);
    assert!(
        text.starts_with("modify_qp: max_dest_rd_atomic 200 > max_qp_rd_atom "),
        "{text}"
    );
}

#[test]
fn reg_mr_of_unmapped_memory_says_so() {
    let (d, _) = topo_devices(Topo::SameDevice);
    let ctx = d.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // Page 1 is never mapped in a Linux process (vm.mmap_min_addr).
    let addr = 0x1000usize as *mut u8;
    // SAFETY: the registration is refused (the range is not mapped), so nothing is ever
    // accessed through the pointer.
    let e = unsafe { pd.reg_mr_raw(addr, 4096, AccessFlags::LOCAL_WRITE) }.unwrap_err();
    let (rule, text) = reason(&e, Errno::EFAULT);
    assert_eq!(rule, Rule::NOT_MAPPED);
    assert_eq!(
        text,
        "reg_mr: range [0x1000, +4096) is not mapped writable in the process"
    );

    // Remote write without local write: a flags rule, EINVAL as ib_check_mr_access.
    let e = pd
        .alloc_mr(4096, AccessFlags::REMOTE_WRITE)
        .map(|_| ())
        .unwrap_err();
    let (rule, text) = reason(&e, Errno::EINVAL);
    assert_eq!(rule, Rule::BAD_FLAGS);
    assert!(text.contains("without LOCAL_WRITE"), "{text}");
}

#[test]
fn create_qp_over_the_device_limits() {
    let (d, _) = topo_devices(Topo::SameDevice);
    let ctx = d.open().unwrap();
    let max_qp_wr = ctx.query_device().unwrap().max_qp_wr;
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None, 0).unwrap();
    let mut c = cap();
    c.max_send_wr = max_qp_wr + 1;
    let e = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, c))
        .map(|_| ())
        .unwrap_err();
    let (rule, text) = reason(&e, Errno::EINVAL);
    assert_eq!(rule, Rule::OVER_LIMIT);
    assert_eq!(
        text,
        format!(
            "create_qp: max_send_wr {} > max_qp_wr {max_qp_wr}",
            max_qp_wr + 1
        )
    );
}

#[test]
fn ud_send_with_an_ah_of_another_pd() {
    let o = PairOpts {
        qp_type: QpType::Ud,
        ..PairOpts::default()
    };
    let (a, b) = pair(Topo::SameDevice, &o);
    let other = a.ctx.alloc_pd().unwrap();
    let ah = other.create_ah(&AhAttr::roce(b.gid, 0, PORT)).unwrap();
    let src = a.pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let s = [src.sge(0, 8)];
    let e =
        a.qp.post_send_cmd(&[SendWr::ud_send(1, &s, &ah, b.qp.qp_num(), o.qkey)])
            .unwrap_err();
    let (rule, text) = reason(&e.error, Errno::EINVAL);
    assert_eq!(rule, Rule::WRONG_PD);
    assert_eq!(
        text,
        format!(
            "post_send: ah {} belongs to pd_handle {}, the QP to pd_handle {}",
            ah.handle(),
            other.handle(),
            a.pd.handle()
        )
    );
}

#[test]
fn local_refusals_have_no_device_reason() {
    let (d, _) = topo_devices(Topo::SameDevice);
    let ctx = d.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None, 0).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap()))
        .unwrap();
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let sge = [mr.sge(0, 8)];
    // Posting in RESET is refused by the library itself (as rdma-core providers do).
    let e = qp.post_send(&[SendWr::send(1, &sge)]).unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Local);
    assert!(e.error.reason().is_none());
    assert!(e.error.detail().is_some());
}
