//! Work completions (docs/wire.md §7).

pub use abi::{WcOpcode, WcStatus};
use wire::{Qpn, Rkey};

/// `wc_flags` in the libibverbs numbering (docs/wire.md §7.4: user and kernel differ for bits
/// 2/3; this crate uses the libibverbs values and the ABI layer converts if it must).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// The first 40 bytes of the receive buffer hold a GRH area (UD).
    pub const GRH: WcFlags = WcFlags(1 << 0);
    /// `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(1 << 1);
    /// `invalidated_rkey` is valid (libibverbs `IBV_WC_WITH_INV` = 1<<3).
    pub const WITH_INV: WcFlags = WcFlags(1 << 3);

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: WcFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl core::ops::BitOr for WcFlags {
    type Output = WcFlags;
    fn bitor(self, rhs: WcFlags) -> WcFlags {
        WcFlags(self.0 | rhs.0)
    }
}

impl core::ops::BitOrAssign for WcFlags {
    fn bitor_assign(&mut self, rhs: WcFlags) {
        self.0 |= rhs.0;
    }
}

/// One work completion. For error statuses only `wr_id`, `status`, `opcode` (best effort),
/// `qp_num` and `vendor_err` are meaningful (docs/wire.md §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The WR's caller-chosen id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// Operation.
    pub opcode: WcOpcode,
    /// Implementation-specific detail (0 here).
    pub vendor_err: u32,
    /// Bytes transferred (receive: bytes placed, including the 40-byte GRH area for UD).
    pub byte_len: u32,
    /// Immediate data as carried on the wire (the ImmDt field read as a big-endian u32).
    pub imm_data: Option<u32>,
    /// The R_Key invalidated by a SEND_WITH_INVALIDATE.
    pub invalidated_rkey: Option<Rkey>,
    /// The local QP.
    pub qp_num: Qpn,
    /// The sender's QP (UD receives; connected QPs report the peer).
    pub src_qp: Qpn,
    /// GRH / WITH_IMM / WITH_INV.
    pub wc_flags: WcFlags,
    /// A receive completion of a message whose last packet carried the BTH SE (solicited
    /// event) bit (SEND or RDMA WRITE WITH IMMEDIATE posted with `IBV_SEND_SOLICITED`).
    /// Not part of `ibv_wc`: it decides whether a CQ armed for solicited completions only
    /// raises its event (IBA 11.4.2.2; [`Completion::fires_solicited`]).
    pub solicited: bool,
}

impl Completion {
    /// Whether this completion goes to the receive CQ.
    pub fn is_recv(&self) -> bool {
        self.opcode.is_recv()
    }

    /// Whether this completion raises the event of a CQ armed for solicited completions
    /// only (`ibv_req_notify_cq(cq, 1)`): a solicited receive, or any unsuccessful
    /// completion (IBA 11.4.2.2: an error completion also triggers).
    pub fn fires_solicited(&self) -> bool {
        (self.solicited && self.is_recv()) || self.status != WcStatus::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_numbers_and_strings() {
        for (i, s) in WcStatus::ALL.iter().enumerate() {
            assert_eq!(*s as u32, i as u32);
            assert_eq!(WcStatus::from_raw(i as u32), Some(*s));
        }
        assert_eq!(WcStatus::from_raw(24), None);
        assert_eq!(
            WcStatus::RetryExcErr.as_str(),
            "transport retry counter exceeded"
        );
        assert_eq!(
            WcStatus::WrFlushErr.to_string(),
            "Work Request Flushed Error"
        );
        assert_eq!(WcStatus::RnrRetryExcErr as u32, 13);
    }

    #[test]
    fn solicited_arming_fires_on_solicited_receives_and_errors_only() {
        let c = Completion {
            wr_id: 1,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            vendor_err: 0,
            byte_len: 8,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: Qpn::new(17),
            src_qp: Qpn::new(18),
            wc_flags: WcFlags::default(),
            solicited: false,
        };
        assert!(!c.fires_solicited());
        assert!(Completion {
            solicited: true,
            ..c
        }
        .fires_solicited());
        let send = Completion {
            opcode: WcOpcode::Send,
            solicited: true,
            ..c
        };
        assert!(!send.fires_solicited());
        for status in [WcStatus::WrFlushErr, WcStatus::LocLenErr] {
            assert!(Completion { status, ..c }.fires_solicited());
            assert!(Completion { status, ..send }.fires_solicited());
        }
    }

    #[test]
    fn opcode_values() {
        assert_eq!(WcOpcode::Recv as u32, 128);
        assert_eq!(WcOpcode::RecvRdmaWithImm as u32, 129);
        assert!(WcOpcode::Recv.is_recv());
        assert!(!WcOpcode::FetchAdd.is_recv());
    }
}
