//! The RoCEv2 transport — RC, UC and UD — as a sans-IO state machine.
//!
//! No I/O, no threads, no clocks (docs/architecture.md §4): a [`Qp`] is driven by posted work
//! requests, received packets ([`wire::RocePacketRepr`]) and the caller's [`Time`], and produces
//! packets (written into the caller's buffer by [`Qp::poll_transmit`]), memory operations (through
//! the caller's [`Memory`]), [`Completion`]s and timer deadlines ([`Qp::poll_timeout`]). The same
//! code runs in the NIC engine and in the deterministic simulator (`sim` crate).
//!
//! Layout follows Linux rxe's split, one module per role, each a function of state and input:
//! * `requester` — WQEs → request packets; segmentation by path MTU,
//!   AckReq, PSN window, `max_rd_atomic`, fences, credits; ACK timer, RNR wait, go-back-N.
//! * `recovery` — the requester's congestion window and round-trip-estimated retransmission
//!   timer.
//! * [`dcqcn`] — ECN congestion control: DCQCN's reaction point (rate, α, recovery, pacer)
//!   and the notification point's CNP spacing, evaluated lazily at the caller's time.
//! * `completer` — ACK/NAK/READ response/ATOMIC ACK → send completions.
//! * `responder` — requests → memory operations, receive completions,
//!   ACKs (coalesced), NAKs, READ responses, saved atomic results.
//! * `sr` — selective repeat: the responder's reassembly store and the requester's single
//!   resends.
//! * [`state`] — QP states, attribute masks, the legal-transition table.
//!
//! Sections cited as `docs/wire.md §N` are in the repository's docs/wire.md, which names the
//! IBTA section behind each rule.
//!
//! Choices beyond the letter of rxe, each documented where it lives:
//! * `retry_cnt == 7` means "retry forever" by default, as in rxe
//!   ([`QpConfig::retry_cnt_7_infinite`]); IBTA reads it as seven retries.
//! * Loss recovery, with nothing changed on the wire (`recovery`): a per-QP congestion
//!   window of at most `max_unacked_psns` packets, halved once per loss episode (sequence
//!   NAK, implied NAK, probe) but not below half the smoothed distance between losses,
//!   restarted from one packet after a local ACK timeout (and put back as it was when an
//!   acknowledgement shows the timeout was spurious), grown on ACKs (slow start, then
//!   one packet per window); and a retransmission timer estimated from the round trip that
//!   resends from the oldest unacknowledged PSN long before the local ACK timeout, without
//!   using a retry. AckReq is also set on the packet that fills the window and every half
//!   window.
//! * Selective repeat (`sr`, docs/wire.md §5.6), only when both ends agreed to it
//!   ([`QpConfig::selective_repeat`], off by default): the responder keeps requests that
//!   arrive ahead of ePSN and executes them in order once the gap fills, naming missing PSNs
//!   in sequence NAKs (PSNs after ePSN as "hole NAKs", offset by 2^23 so that a requester
//!   without selective repeat drops them); the requester resends each named PSN alone.
//! * Sequence NAKs and implied NAKs after a retry and before any progress are stale and
//!   ignored (rxe `started_retry`); the retransmission timer covers a lost resend. A gap in
//!   READ responses is an implied NAK at once (rxe_comp.c `check_psn`).
//! * Responder-side receive-buffer overflow completes the receive WQE with `LOC_LEN_ERR`
//!   (IBTA) while NAKing invalid request (rxe), docs/wire.md §10 item 3.
//! * A response of the wrong kind for its WQE is `BAD_RESP_ERR` (rxe uses `FATAL_ERR`).
//! * Receive completions carry the BTH SE bit of the message's last packet
//!   ([`Completion::solicited`]), which `ibv_wc` has no field for, so the caller can fire
//!   a CQ armed for solicited completions only as IBA 11.4.2.2 says.
//! * [`Qp::query`] reports the current send and expected receive PSNs, not the last values
//!   written; [`Qp::fail_send`] lets the caller put a WQE it could not decode into the
//!   ordered completion stream (moving the QP to ERR, as rxe's `req_error` does).
//! * Non-SRQ QPs advertise real AETH credits from their own receive queue; the NIC keeps
//!   receive WQEs in the application's ring and presents every QP as an SRQ user, so its
//!   QPs advertise "unlimited", as rxe does.
#![forbid(unsafe_code)]

mod completer;
mod counters;
pub mod dcqcn;
mod error;
pub mod fuzzing;
mod mem;
mod packet;
mod qp;
mod recovery;
mod requester;
mod responder;
mod sq;
mod sr;
pub mod state;
mod time;
mod wc;
mod wr;

pub use counters::Counters;
pub use dcqcn::{CnpGate, Dcqcn, DcqcnParams};
pub use mem::{AtomicOp, MemError, Memory, RemoteAccess};
pub use packet::finish_in_place;
pub use qp::{
    bring_up, Grh, Qp, QpCaps, QpConfig, QpEvent, RecvQueue, ReqHeaders, Run, RxMeta, Srq,
    Transmit, ATTR_LIMITS, GRH_LEN, MAX_HEADER_LEN, MAX_MSG_LEN, MAX_RD_ATOMIC,
};
pub use state::{
    AccessFlags, AttrError, AttrErrorKind, ModifyError, Mtu, QpAttr, QpAttrMask, QpState, QpType,
    Service, XrcRole,
};
pub use time::{local_ack_timeout_ns, rnr_timer_ns, Time};
pub use wc::{Completion, WcFlags, WcOpcode, WcStatus};
pub use wr::{
    InlineData, LocalData, MwBind, PostError, RecvWr, SendFlags, SendWr, Sge, SgeList, UdDest,
    WrOpcode, MAX_INLINE_DATA,
};

pub use wire;
