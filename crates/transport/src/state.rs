//! QP states, attribute masks and the legal-transition table.
//!
//! Implements the kernel's `qp_state_table` / `ib_modify_qp_is_ok` (docs/wire.md §6.2): a
//! transition must be listed; every required attribute bit must be in the mask; no bit outside
//! required ∪ optional ∪ STATE may be set; CUR_STATE is accepted only from RTR, RTS, SQD or SQE
//! (it is in those rows' optional sets) and, when given, must name the QP's actual state.

use core::fmt;

pub use abi::{AccessFlags, AttrError, AttrErrorKind, Mtu, QpAttr, QpAttrMask, QpState, QpType};

/// The transport service a QP runs (IBTA Vol 1 §9.8: reliable connected, unreliable
/// connected, unreliable datagram) — what decides its opcodes, acknowledgements and
/// retries. The verbs type of a QP is [`abi::QpType`]; [`Service::of`] is the one mapping
/// (XRC initiators and targets run the RC service in an [`XrcRole`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl Service {
    /// The service and XRC role of a QP of verbs type `ty`; `None` for a type this crate
    /// does not implement (RAW_PACKET).
    pub const fn of(ty: QpType) -> Option<(Service, Option<XrcRole>)> {
        match ty {
            QpType::Rc => Some((Service::Rc, None)),
            QpType::Uc => Some((Service::Uc, None)),
            QpType::Ud => Some((Service::Ud, None)),
            QpType::XrcSend => Some((Service::Rc, Some(XrcRole::Initiator))),
            QpType::XrcRecv => Some((Service::Rc, Some(XrcRole::Target))),
            QpType::RawPacket => None,
        }
    }
}

/// Why a modify was refused. The NIC maps every variant to EINVAL (as rxe and the kernel do),
/// except [`ModifyError::Busy`], which the kernel reports as EBUSY/EINVAL depending on version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModifyError {
    /// The (current, next) transition is not in the table.
    IllegalTransition {
        /// Current state.
        from: QpState,
        /// Requested state.
        to: QpState,
    },
    /// A required attribute bit is missing.
    MissingAttr(QpAttrMask),
    /// A bit outside required ∪ optional ∪ STATE was set.
    UnexpectedAttr(QpAttrMask),
    /// CUR_STATE names a state the QP is not in.
    CurStateMismatch,
    /// An attribute value is out of range ([`QpAttr::check`]).
    BadAttr(AttrError),
    /// A request the QP's service or state does not allow (selective repeat on a QP
    /// that is not plain RC, or once it has left INIT).
    InvalidValue(&'static str),
    /// SQD is still draining: only SQD→ERR/RESET are accepted (rxe rule).
    Busy,
}

impl fmt::Display for ModifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModifyError::IllegalTransition { from, to } => {
                write!(f, "illegal QP transition {from} -> {to}")
            }
            ModifyError::MissingAttr(m) => write!(f, "missing required attribute(s) {m:?}"),
            ModifyError::UnexpectedAttr(m) => write!(f, "attribute(s) not allowed here {m:?}"),
            ModifyError::CurStateMismatch => f.write_str("cur_qp_state does not match"),
            ModifyError::BadAttr(e) => write!(f, "invalid attribute value: {e}"),
            ModifyError::InvalidValue(what) => write!(f, "not allowed: {what}"),
            ModifyError::Busy => f.write_str("send queue still draining"),
        }
    }
}

impl std::error::Error for ModifyError {}

/// Required and optional masks of one legal transition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransitionMasks {
    /// Bits that must be present.
    pub required: QpAttrMask,
    /// Bits that may be present.
    pub optional: QpAttrMask,
}

const fn m(bits: &[QpAttrMask]) -> QpAttrMask {
    let mut acc = 0u32;
    let mut i = 0;
    while i < bits.len() {
        acc |= bits[i].0;
        i += 1;
    }
    QpAttrMask(acc)
}

use QpAttrMask as A;

/// The transition table (docs/wire.md §6.2, kernel `qp_state_table`). `None` = illegal.
pub fn transition_masks(from: QpState, to: QpState, ty: Service) -> Option<TransitionMasks> {
    use QpState::*;
    use Service::*;
    let none = QpAttrMask::EMPTY;
    let t =
        |required: QpAttrMask, optional: QpAttrMask| Some(TransitionMasks { required, optional });
    match (from, to) {
        (_, Reset) => t(none, none),
        (Reset, Err) => None,
        (_, Err) => t(none, none),
        (Reset, Init) => match ty {
            Rc | Uc => t(m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS]), none),
            Ud => t(m(&[A::PKEY_INDEX, A::PORT, A::QKEY]), none),
        },
        (Init, Init) => match ty {
            Rc | Uc => t(none, m(&[A::PKEY_INDEX, A::PORT, A::ACCESS_FLAGS])),
            Ud => t(none, m(&[A::PKEY_INDEX, A::PORT, A::QKEY])),
        },
        (Init, Rtr) => match ty {
            Rc => t(
                m(&[
                    A::AV,
                    A::PATH_MTU,
                    A::DEST_QPN,
                    A::RQ_PSN,
                    A::MAX_DEST_RD_ATOMIC,
                    A::MIN_RNR_TIMER,
                ]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
            Uc => t(
                m(&[A::AV, A::PATH_MTU, A::DEST_QPN, A::RQ_PSN]),
                m(&[A::ALT_PATH, A::ACCESS_FLAGS, A::PKEY_INDEX]),
            ),
            Ud => t(none, m(&[A::PKEY_INDEX, A::QKEY])),
        },
        (Rtr, Rts) => match ty {
            Rc => t(
                m(&[
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::SQ_PSN,
                    A::MAX_QP_RD_ATOMIC,
                ]),
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Uc => t(
                A::SQ_PSN,
                m(&[
                    A::CUR_STATE,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud => t(A::SQ_PSN, m(&[A::CUR_STATE, A::QKEY])),
        },
        (Rts, Rts) | (Sqd, Rts) => match ty {
            Rc => t(
                none,
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                    A::MIN_RNR_TIMER,
                ]),
            ),
            Uc => t(
                none,
                m(&[
                    A::CUR_STATE,
                    A::ACCESS_FLAGS,
                    A::ALT_PATH,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud => t(none, m(&[A::CUR_STATE, A::QKEY])),
        },
        (Rts, Sqd) => t(none, A::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match ty {
            Rc => t(
                none,
                m(&[
                    A::PORT,
                    A::AV,
                    A::TIMEOUT,
                    A::RETRY_CNT,
                    A::RNR_RETRY,
                    A::MAX_QP_RD_ATOMIC,
                    A::MAX_DEST_RD_ATOMIC,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::MIN_RNR_TIMER,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Uc => t(
                none,
                m(&[
                    A::AV,
                    A::ALT_PATH,
                    A::ACCESS_FLAGS,
                    A::PKEY_INDEX,
                    A::PATH_MIG_STATE,
                ]),
            ),
            Ud => t(none, m(&[A::PKEY_INDEX, A::QKEY])),
        },
        (Sqe, Rts) => match ty {
            Rc => t(none, none),
            Uc => t(none, m(&[A::CUR_STATE, A::ACCESS_FLAGS])),
            Ud => t(none, m(&[A::CUR_STATE, A::QKEY])),
        },
        _ => None,
    }
}

/// The role of an XRC QP (IBTA XRC annex): its transport is RC's, with the XRC opcodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XrcRole {
    /// `IBV_QPT_XRC_SEND`: a send queue only.
    Initiator,
    /// `IBV_QPT_XRC_RECV`: no queues; receives land in XRC SRQs.
    Target,
}

/// [`check_modify`] for an XRC QP: RC's table, except what the kernel's `qp_state_table`
/// asks differently of XRC_INI (INIT→RTR: no responder attributes) and XRC_TGT (RTR→RTS:
/// only TIMEOUT and SQ_PSN, it never sends requests).
pub fn check_modify_xrc(
    cur: QpState,
    role: XrcRole,
    attr: &QpAttr,
    mask: QpAttrMask,
) -> Result<QpState, ModifyError> {
    let next = if mask.contains(QpAttrMask::STATE) {
        attr.qp_state
    } else {
        cur
    };
    let relaxed = match (role, cur, next) {
        (XrcRole::Initiator, QpState::Init, QpState::Rtr) => {
            m(&[A::MAX_DEST_RD_ATOMIC, A::MIN_RNR_TIMER])
        }
        (XrcRole::Target, QpState::Rtr, QpState::Rts) => {
            m(&[A::RETRY_CNT, A::RNR_RETRY, A::MAX_QP_RD_ATOMIC])
        }
        _ => return check_modify(cur, Service::Rc, attr, mask),
    };
    // Fill the relaxed bits in for RC's check: they are neither required nor refused.
    let filled = QpAttrMask(mask.0 | relaxed.0);
    check_modify(cur, Service::Rc, attr, filled)
}

/// `ib_modify_qp_is_ok`: check the mask for a modify from `cur` (the QP's actual state).
/// Returns the target state on success. Value ranges are checked separately.
pub fn check_modify(
    cur: QpState,
    ty: Service,
    attr: &QpAttr,
    mask: QpAttrMask,
) -> Result<QpState, ModifyError> {
    if mask.contains(QpAttrMask::CUR_STATE) && attr.cur_qp_state != cur {
        return Err(ModifyError::CurStateMismatch);
    }
    let next = if mask.contains(QpAttrMask::STATE) {
        attr.qp_state
    } else {
        cur
    };
    let masks = transition_masks(cur, next, ty).ok_or(ModifyError::IllegalTransition {
        from: cur,
        to: next,
    })?;
    let missing = masks.required.minus(mask);
    if !missing.is_empty() {
        return Err(ModifyError::MissingAttr(missing));
    }
    let extra = mask
        .minus(masks.required)
        .minus(masks.optional)
        .minus(QpAttrMask::STATE);
    if !extra.is_empty() {
        return Err(ModifyError::UnexpectedAttr(extra));
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_STATES: [QpState; 7] = [
        QpState::Reset,
        QpState::Init,
        QpState::Rtr,
        QpState::Rts,
        QpState::Sqd,
        QpState::Sqe,
        QpState::Err,
    ];

    #[test]
    fn listed_illegal_transitions() {
        for ty in [Service::Rc, Service::Uc, Service::Ud] {
            assert!(transition_masks(QpState::Reset, QpState::Err, ty).is_none());
            assert!(transition_masks(QpState::Reset, QpState::Rtr, ty).is_none());
            assert!(transition_masks(QpState::Init, QpState::Rts, ty).is_none());
            for to in ALL_STATES {
                let ok = transition_masks(QpState::Err, to, ty).is_some();
                assert_eq!(ok, matches!(to, QpState::Reset | QpState::Err), "ERR->{to}");
            }
            for from in ALL_STATES {
                assert!(transition_masks(from, QpState::Reset, ty).is_some());
            }
        }
    }

    #[test]
    fn rc_rtr_requires_its_six_bits() {
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        let req = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER;
        assert_eq!(
            check_modify(QpState::Init, Service::Rc, &attr, req),
            Ok(QpState::Rtr)
        );
        let short = QpAttrMask(req.0 & !QpAttrMask::MIN_RNR_TIMER.0);
        assert_eq!(
            check_modify(QpState::Init, Service::Rc, &attr, short),
            Err(ModifyError::MissingAttr(QpAttrMask::MIN_RNR_TIMER))
        );
        // UC does not take MAX_DEST_RD_ATOMIC.
        assert_eq!(
            check_modify(QpState::Init, Service::Uc, &attr, req),
            Err(ModifyError::UnexpectedAttr(
                QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER
            ))
        );
    }

    #[test]
    fn cur_state_only_from_rtr_rts_sqd_sqe() {
        let attr = QpAttr {
            qp_state: QpState::Init,
            cur_qp_state: QpState::Init,
            ..QpAttr::default()
        };
        let mask = QpAttrMask::STATE | QpAttrMask::CUR_STATE;
        assert!(matches!(
            check_modify(QpState::Init, Service::Rc, &attr, mask),
            Err(ModifyError::UnexpectedAttr(_))
        ));
        let attr = QpAttr {
            qp_state: QpState::Rts,
            cur_qp_state: QpState::Rts,
            ..attr
        };
        assert_eq!(
            check_modify(QpState::Rts, Service::Rc, &attr, mask),
            Ok(QpState::Rts)
        );
        let wrong = QpAttr {
            cur_qp_state: QpState::Sqd,
            ..attr
        };
        assert_eq!(
            check_modify(QpState::Rts, Service::Rc, &wrong, mask),
            Err(ModifyError::CurStateMismatch)
        );
    }

    #[test]
    fn no_state_bit_means_same_state() {
        let attr = QpAttr::default();
        // RTS->RTS with MIN_RNR_TIMER is fine for RC, not for UC.
        assert_eq!(
            check_modify(QpState::Rts, Service::Rc, &attr, QpAttrMask::MIN_RNR_TIMER),
            Ok(QpState::Rts)
        );
        assert!(check_modify(QpState::Rts, Service::Uc, &attr, QpAttrMask::MIN_RNR_TIMER).is_err());
        // RTR->RTR is not in the table.
        assert!(check_modify(QpState::Rtr, Service::Rc, &attr, QpAttrMask::EMPTY).is_err());
    }

    #[test]
    fn mtu_bytes() {
        assert_eq!(Mtu::Mtu256.bytes(), 256);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::Mtu2048));
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(
            format!("{:?}", QpAttrMask::STATE | QpAttrMask(1 << 30)),
            "STATE | 0x40000000"
        );
    }
}
