//! The errors the three roles detect, and the one table that turns each into the status its
//! work completion carries.
//!
//! A role that finds an error names it here; [`TransportError::wc_status`] is the only place
//! that chooses a [`WcStatus`] for a failure. The table follows IBTA Vol 1 §10.7.3.1
//! (completion status per error class) and §9.9 (error detection and handling: responder
//! error classes and their NAK codes), read the way Linux rxe reads them: rxe_comp.c for the requester side, rxe_resp.c
//! for the responder side, rxe_req.c for local WQE errors (docs/wire.md §4.4, §5.2, §5.3,
//! §6.3).
//!
//! | error                         | detected by          | status                 |
//! |-------------------------------|----------------------|------------------------|
//! | `Flushed`                     | any (QP in ERR/SQE)  | `WR_FLUSH_ERR`         |
//! | `LocalLength`                 | requester, responder | `LOC_LEN_ERR`          |
//! | `LocalProtection`             | all three            | `LOC_PROT_ERR`         |
//! | `LocalQpOperation`            | requester            | `LOC_QP_OP_ERR`        |
//! | `MwBind`                      | requester            | `MW_BIND_ERR`          |
//! | `Internal`                    | requester            | `GENERAL_ERR`          |
//! | `RetryExceeded`               | requester, completer | `RETRY_EXC_ERR`        |
//! | `RnrRetryExceeded`            | completer            | `RNR_RETRY_EXC_ERR`    |
//! | `BadResponse`                 | completer            | `BAD_RESP_ERR`         |
//! | `RemoteInvalidRequest`        | completer, responder | `REM_INV_REQ_ERR`      |
//! | `RemoteAccess`                | completer            | `REM_ACCESS_ERR`       |
//! | `RemoteInvalidRdRequest`      | completer            | `REM_INV_RD_REQ_ERR`   |
//! | `RemoteOperational`           | completer            | `REM_OP_ERR`           |
//!
//! The responder has one asymmetry worth knowing: a request it rejects (class C or J) is
//! NAKed with the code that describes it, while the receive WQE that message had consumed
//! completes with `RemoteInvalidRequest` whatever the NAK code — except a receive buffer too
//! small (`LocalLength`) or a failed write into it (`LocalProtection`), which are this side's
//! own errors (docs/wire.md §5.3).

use wire::NakCode;

use crate::WcStatus;

/// A transport or local error that ends a work request (see the module table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TransportError {
    /// The QP entered ERR (or SQE, for the send queue) before the WR ran.
    Flushed,
    /// A local buffer is shorter than the data (receive buffer too small, inline data short).
    LocalLength,
    /// A local SGE failed its memory-region check.
    LocalProtection,
    /// The WR cannot run on this QP (no initiator depth for READ/ATOMIC, failed local
    /// invalidate).
    LocalQpOperation,
    /// A memory window bind failed.
    MwBind,
    /// The requester's own bookkeeping disagrees with itself (cannot happen by construction).
    Internal,
    /// The transport retry count ran out (local ACK timeouts, sequence NAKs, implied NAKs).
    RetryExceeded,
    /// The RNR retry count ran out.
    RnrRetryExceeded,
    /// A response of the wrong kind, position or length for its WQE.
    BadResponse,
    /// NAK Invalid Request received; or, at the responder, a rejected request.
    RemoteInvalidRequest,
    /// NAK Remote Access Error received.
    RemoteAccess,
    /// NAK Invalid RD Request received.
    RemoteInvalidRdRequest,
    /// NAK Remote Operational Error (or a reserved NAK code) received.
    RemoteOperational,
}

impl TransportError {
    /// The error a NAK other than a PSN sequence error reports (NAK codes: docs/wire.md
    /// §4.4; reserved codes count as Remote Operational Error, as rxe_comp.c does).
    pub(crate) fn from_nak(code: NakCode) -> TransportError {
        match code {
            NakCode::INVALID_REQUEST => TransportError::RemoteInvalidRequest,
            NakCode::REMOTE_ACCESS_ERROR => TransportError::RemoteAccess,
            NakCode::INVALID_RD_REQUEST => TransportError::RemoteInvalidRdRequest,
            _ => TransportError::RemoteOperational,
        }
    }

    /// The work-completion status for this error.
    pub(crate) fn wc_status(self) -> WcStatus {
        match self {
            TransportError::Flushed => WcStatus::WrFlushErr,
            TransportError::LocalLength => WcStatus::LocLenErr,
            TransportError::LocalProtection => WcStatus::LocProtErr,
            TransportError::LocalQpOperation => WcStatus::LocQpOpErr,
            TransportError::MwBind => WcStatus::MwBindErr,
            TransportError::Internal => WcStatus::GeneralErr,
            TransportError::RetryExceeded => WcStatus::RetryExcErr,
            TransportError::RnrRetryExceeded => WcStatus::RnrRetryExcErr,
            TransportError::BadResponse => WcStatus::BadRespErr,
            TransportError::RemoteInvalidRequest => WcStatus::RemInvReqErr,
            TransportError::RemoteAccess => WcStatus::RemAccessErr,
            TransportError::RemoteInvalidRdRequest => WcStatus::RemInvRdReqErr,
            TransportError::RemoteOperational => WcStatus::RemOpErr,
        }
    }
}
