//! Enum-ish constants used inside payloads, WQEs and CQEs (docs/wire.md §6–§7).
//!
//! Values are libibverbs' (`verbs.h`), which equal the kernel's except where noted. Struct
//! fields keep the C width (`u8` in `modify_qp`, `u32` in `ibv_wc`); these newtypes are what
//! accessors hand out.

closed_enum! {
    /// `enum ibv_qp_state` (docs/wire.md §6.1), same numbers as the kernel's `ib_qp_state`.
    #[derive(Default)]
    pub enum QpState: u8 {
        /// Freshly created or reset: no queues, no traffic.
        #[default]
        Reset = 0 => "RESET",
        /// Receive WRs may be posted; packets are not yet accepted.
        Init = 1 => "INIT",
        /// Ready to receive: the responder is live.
        Rtr = 2 => "RTR",
        /// Ready to send: requester and responder live.
        Rts = 3 => "RTS",
        /// Send queue drain: no new send WRs start; outstanding ones finish.
        Sqd = 4 => "SQD",
        /// Send queue error (UC/UD only): sends flushed, receives still work.
        Sqe = 5 => "SQE",
        /// Error: everything flushed, packets dropped.
        Err = 6 => "ERR",
    }
}

impl core::fmt::Display for QpState {
    /// The name rdma-core's `ibv_qp_state` uses, without the prefix (`RTS`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

open_enum! {
    /// `enum ibv_qp_type` / kernel `ib_qp_type` for user QPs (docs/wire.md §6.1).
    pub struct QpType(u32) {
        /// Reliable connected.
        RC = 2,
        /// Unreliable connected.
        UC = 3,
        /// Unreliable datagram.
        UD = 4,
        /// Raw packet (not supported by uroce).
        RAW_PACKET = 8,
        /// XRC initiator: a send queue only; each WR names the responder's XRC SRQ.
        XRC_SEND = 9,
        /// XRC target: no queues; receives land in the XRC SRQ its requests name.
        XRC_RECV = 10,
    }
}

open_flags! {
    /// `enum ibv_qp_attr_mask` (docs/wire.md §6.1); same bits as the kernel `ib_qp_attr_mask`.
    pub struct QpAttrMask(u32) {
        /// qp_state.
        STATE = 1 << 0,
        /// cur_qp_state.
        CUR_STATE = 1 << 1,
        /// en_sqd_async_notify.
        EN_SQD_ASYNC_NOTIFY = 1 << 2,
        /// qp_access_flags.
        ACCESS_FLAGS = 1 << 3,
        /// pkey_index.
        PKEY_INDEX = 1 << 4,
        /// port_num.
        PORT = 1 << 5,
        /// qkey.
        QKEY = 1 << 6,
        /// ah_attr / dest.
        AV = 1 << 7,
        /// path_mtu.
        PATH_MTU = 1 << 8,
        /// timeout.
        TIMEOUT = 1 << 9,
        /// retry_cnt.
        RETRY_CNT = 1 << 10,
        /// rnr_retry.
        RNR_RETRY = 1 << 11,
        /// rq_psn.
        RQ_PSN = 1 << 12,
        /// max_rd_atomic.
        MAX_QP_RD_ATOMIC = 1 << 13,
        /// alt path.
        ALT_PATH = 1 << 14,
        /// min_rnr_timer.
        MIN_RNR_TIMER = 1 << 15,
        /// sq_psn.
        SQ_PSN = 1 << 16,
        /// max_dest_rd_atomic.
        MAX_DEST_RD_ATOMIC = 1 << 17,
        /// path_mig_state.
        PATH_MIG_STATE = 1 << 18,
        /// cap (query only).
        CAP = 1 << 19,
        /// dest_qp_num.
        DEST_QPN = 1 << 20,
        /// rate_limit (extended modify only).
        RATE_LIMIT = 1 << 25,
    }
}

open_flags! {
    /// `enum ibv_access_flags` (docs/wire.md §7.3).
    pub struct AccessFlags(u32) {
        /// Local write (needed for any remote write or receive into the MR).
        LOCAL_WRITE = 1 << 0,
        /// Remote RDMA WRITE.
        REMOTE_WRITE = 1 << 1,
        /// Remote RDMA READ.
        REMOTE_READ = 1 << 2,
        /// Remote atomics.
        REMOTE_ATOMIC = 1 << 3,
        /// Memory-window binding.
        MW_BIND = 1 << 4,
        /// Zero-based addressing.
        ZERO_BASED = 1 << 5,
        /// On-demand paging.
        ON_DEMAND = 1 << 6,
        /// Huge pages hint.
        HUGETLB = 1 << 7,
        /// FLUSH to global visibility.
        FLUSH_GLOBAL = 1 << 8,
        /// FLUSH to persistence.
        FLUSH_PERSISTENT = 1 << 9,
        /// Relaxed ordering: first optional bit (`IBV_ACCESS_OPTIONAL_FIRST`); perftest sets it.
        RELAXED_ORDERING = 1 << 20,
    }
}

impl AccessFlags {
    /// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20..29, which a device may ignore (docs/compat.md §9).
    pub const OPTIONAL_RANGE: AccessFlags = AccessFlags(((1 << 10) - 1) << 20);
}

open_flags! {
    /// `enum ibv_send_flags` (docs/wire.md §7.3).
    pub struct SendFlags(u32) {
        /// Wait for prior RDMA READ / atomic to complete.
        FENCE = 1 << 0,
        /// Generate a completion even if `sq_sig_all` is 0.
        SIGNALED = 1 << 1,
        /// Set the solicited-event bit in the last packet.
        SOLICITED = 1 << 2,
        /// Payload is inline in the WQE (no lkey check).
        INLINE = 1 << 3,
        /// IP checksum offload (raw packet only).
        IP_CSUM = 1 << 4,
    }
}

open_enum! {
    /// `enum ibv_wr_opcode` (docs/wire.md §7.3). Values 11–13 differ between user space
    /// (`IBV_WR_DRIVER1`) and the kernel (`RDMA_READ_WITH_INV`, masked atomics) and are not named.
    pub struct WrOpcode(u32) {
        /// RDMA WRITE.
        RDMA_WRITE = 0,
        /// RDMA WRITE with immediate.
        RDMA_WRITE_WITH_IMM = 1,
        /// SEND.
        SEND = 2,
        /// SEND with immediate.
        SEND_WITH_IMM = 3,
        /// RDMA READ.
        RDMA_READ = 4,
        /// Atomic compare and swap.
        ATOMIC_CMP_AND_SWP = 5,
        /// Atomic fetch and add.
        ATOMIC_FETCH_AND_ADD = 6,
        /// Local invalidate.
        LOCAL_INV = 7,
        /// Bind memory window.
        BIND_MW = 8,
        /// SEND with invalidate.
        SEND_WITH_INV = 9,
        /// TCP segmentation offload (raw packet).
        TSO = 10,
        /// FLUSH.
        FLUSH = 14,
        /// ATOMIC WRITE.
        ATOMIC_WRITE = 15,
    }
}

impl WrOpcode {
    /// The send-side completion opcode for this work request (rxe `wr_to_wc_opcode`,
    /// docs/wire.md §7.2); `None` for opcodes without one.
    pub fn wc_opcode(self) -> Option<WcOpcode> {
        Some(match self {
            WrOpcode::RDMA_WRITE | WrOpcode::RDMA_WRITE_WITH_IMM => WcOpcode::RDMA_WRITE,
            WrOpcode::SEND | WrOpcode::SEND_WITH_IMM | WrOpcode::SEND_WITH_INV => WcOpcode::SEND,
            WrOpcode::RDMA_READ => WcOpcode::RDMA_READ,
            WrOpcode::ATOMIC_CMP_AND_SWP => WcOpcode::COMP_SWAP,
            WrOpcode::ATOMIC_FETCH_AND_ADD => WcOpcode::FETCH_ADD,
            WrOpcode::LOCAL_INV => WcOpcode::LOCAL_INV,
            WrOpcode::BIND_MW => WcOpcode::BIND_MW,
            WrOpcode::TSO => WcOpcode::TSO,
            WrOpcode::FLUSH => WcOpcode::FLUSH,
            WrOpcode::ATOMIC_WRITE => WcOpcode::ATOMIC_WRITE,
            _ => return None,
        })
    }

    /// Whether the WR carries immediate data in the WQE's `ex` field.
    pub fn has_imm(self) -> bool {
        matches!(
            self,
            WrOpcode::RDMA_WRITE_WITH_IMM | WrOpcode::SEND_WITH_IMM
        )
    }

    /// Whether the WR is an atomic that uses `compare_add` / `swap` and returns 8 bytes.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::ATOMIC_CMP_AND_SWP | WrOpcode::ATOMIC_FETCH_AND_ADD
        )
    }
}

open_enum! {
    /// `enum ibv_wc_opcode` (docs/wire.md §7.2); equal to `ib_uverbs_wc_opcode` for send opcodes.
    pub struct WcOpcode(u32) {
        /// SEND completed.
        SEND = 0,
        /// RDMA WRITE completed.
        RDMA_WRITE = 1,
        /// RDMA READ completed.
        RDMA_READ = 2,
        /// Compare and swap completed.
        COMP_SWAP = 3,
        /// Fetch and add completed.
        FETCH_ADD = 4,
        /// Memory-window bind completed.
        BIND_MW = 5,
        /// Local invalidate completed.
        LOCAL_INV = 6,
        /// TSO completed.
        TSO = 7,
        /// FLUSH completed.
        FLUSH = 8,
        /// ATOMIC WRITE completed.
        ATOMIC_WRITE = 9,
        /// A SEND was received (test `opcode & RECV`).
        RECV = 1 << 7,
        /// An RDMA WRITE with immediate was received.
        RECV_RDMA_WITH_IMM = (1 << 7) + 1,
    }
}

impl WcOpcode {
    /// Whether this is a receive-side completion (`opcode & IBV_WC_RECV`).
    pub fn is_recv(self) -> bool {
        self.0 & WcOpcode::RECV.0 != 0
    }
}

closed_enum! {
    /// `enum ibv_wc_status` (docs/wire.md §7.1); same numbers as the kernel `ib_wc_status`.
    #[derive(Default)]
    pub enum WcStatus: u32 {
        /// The WR completed.
        #[default]
        Success = 0 => "SUCCESS",
        /// Local length error (receive buffer too small).
        LocLenErr = 1 => "LOC_LEN_ERR",
        /// Local QP operation error (malformed WQE, opcode not allowed on this QP type).
        LocQpOpErr = 2 => "LOC_QP_OP_ERR",
        /// Local EE context operation error (RD only).
        LocEecOpErr = 3 => "LOC_EEC_OP_ERR",
        /// Local protection error: an SGE failed the MR check.
        LocProtErr = 4 => "LOC_PROT_ERR",
        /// Flushed because the QP is in ERR (or SQE for the send queue).
        WrFlushErr = 5 => "WR_FLUSH_ERR",
        /// Memory-window bind error.
        MwBindErr = 6 => "MW_BIND_ERR",
        /// Unexpected response opcode or length from the responder.
        BadRespErr = 7 => "BAD_RESP_ERR",
        /// Local access error.
        LocAccessErr = 8 => "LOC_ACCESS_ERR",
        /// NAK invalid request received.
        RemInvReqErr = 9 => "REM_INV_REQ_ERR",
        /// NAK remote access error received.
        RemAccessErr = 10 => "REM_ACCESS_ERR",
        /// NAK remote operational error received.
        RemOpErr = 11 => "REM_OP_ERR",
        /// Transport retry counter exceeded (ACK timeouts / sequence-error NAKs).
        RetryExcErr = 12 => "RETRY_EXC_ERR",
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 13 => "RNR_RETRY_EXC_ERR",
        /// Local RDD violation (RD only).
        LocRddViolErr = 14 => "LOC_RDD_VIOL_ERR",
        /// NAK invalid RD request received.
        RemInvRdReqErr = 15 => "REM_INV_RD_REQ_ERR",
        /// Remote aborted.
        RemAbortErr = 16 => "REM_ABORT_ERR",
        /// Invalid EE context number (RD only).
        InvEecnErr = 17 => "INV_EECN_ERR",
        /// Invalid EE context state (RD only).
        InvEecStateErr = 18 => "INV_EEC_STATE_ERR",
        /// Fatal error.
        FatalErr = 19 => "FATAL_ERR",
        /// Response timeout.
        RespTimeoutErr = 20 => "RESP_TIMEOUT_ERR",
        /// General error.
        GeneralErr = 21 => "GENERAL_ERR",
        /// Tag-matching error.
        TmErr = 22 => "TM_ERR",
        /// Tag-matching rendezvous incomplete.
        TmRndvIncomplete = 23 => "TM_RNDV_INCOMPLETE",
    }
}

impl WcStatus {
    /// Exactly what rdma-core's `ibv_wc_status_str()` returns for this status
    /// (libibverbs/verbs.c), e.g. "transport retry counter exceeded".
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "aborted error",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
            WcStatus::TmErr => "TM error",
            WcStatus::TmRndvIncomplete => "TM software rendezvous",
        }
    }

    /// `ibv_wc_status_str()` of a raw value: [`WcStatus::as_str`], or `"unknown"` for a
    /// value outside the table, as rdma-core does.
    pub fn str_of_raw(v: u32) -> &'static str {
        WcStatus::from_raw(v).map_or("unknown", WcStatus::as_str)
    }
}

impl core::fmt::Display for WcStatus {
    /// The `ibv_wc_status_str()` text.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

open_flags! {
    /// Completion flags, with **libibverbs** values (`enum ibv_wc_flags`), not the kernel's
    /// (`ib_wc_flags` swaps bits 2 and 3; docs/wire.md §7.4). The engine writes these values
    /// into CQEs so a C-ABI `ibv_poll_cq` can copy the 48-byte CQE prefix out unchanged.
    pub struct WcFlags(u32) {
        /// A 40-byte GRH precedes the payload in the receive buffer (UD).
        GRH = 1 << 0,
        /// `imm_data` is valid.
        WITH_IMM = 1 << 1,
        /// IP checksum verified (libibverbs bit 2; the kernel uses bit 3).
        IP_CSUM_OK = 1 << 2,
        /// `invalidated_rkey` is valid (libibverbs bit 3; the kernel uses bit 2).
        WITH_INV = 1 << 3,
    }
}

closed_enum! {
    /// `enum ibv_mtu` (docs/wire.md §0): the path MTU, 1 = 256 … 5 = 4096 bytes.
    #[derive(Default)]
    pub enum Mtu: u8 {
        /// 256 bytes.
        Mtu256 = 1 => "MTU_256",
        /// 512 bytes.
        Mtu512 = 2 => "MTU_512",
        /// 1024 bytes.
        #[default]
        Mtu1024 = 3 => "MTU_1024",
        /// 2048 bytes.
        Mtu2048 = 4 => "MTU_2048",
        /// 4096 bytes.
        Mtu4096 = 5 => "MTU_4096",
    }
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128u32 << (self as u8)
    }

    /// The enum value for an exact byte size (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.iter().copied().find(|m| m.bytes() == bytes)
    }
}

impl core::fmt::Display for Mtu {
    /// The constant's name (`MTU_1024`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

open_enum! {
    /// `enum ibv_port_state`.
    pub struct PortState(u32) {
        /// No state change.
        NOP = 0,
        /// Down.
        DOWN = 1,
        /// Initializing.
        INIT = 2,
        /// Armed.
        ARMED = 3,
        /// Active (perftest requires this).
        ACTIVE = 4,
        /// Active, deferred.
        ACTIVE_DEFER = 5,
    }
}

impl PortState {
    /// What rdma-core's `ibv_port_state_str()` returns.
    pub fn as_str(self) -> &'static str {
        match self.0 {
            0 => "no state change (NOP)",
            1 => "down",
            2 => "init",
            3 => "armed",
            4 => "active",
            5 => "active defer",
            _ => "unknown",
        }
    }
}

open_enum! {
    /// `IBV_LINK_LAYER_*`.
    pub struct LinkLayer(u8) {
        /// Unspecified.
        UNSPECIFIED = 0,
        /// InfiniBand.
        INFINIBAND = 1,
        /// Ethernet (RoCE): what uroce reports.
        ETHERNET = 2,
    }
}

open_enum! {
    /// `enum ibv_gid_type` as in `ibv_gid_entry.gid_type` (docs/compat.md §5).
    pub struct GidType(u32) {
        /// InfiniBand GID.
        IB = 0,
        /// RoCE v1.
        ROCE_V1 = 1,
        /// RoCE v2 (what uroce's GIDs are).
        ROCE_V2 = 2,
    }
}

open_enum! {
    /// `enum ibv_atomic_cap` (QUERY_DEVICE `atomic_cap`).
    pub struct AtomicCap(u32) {
        /// No atomics.
        NONE = 0,
        /// Atomic within this HCA.
        HCA = 1,
        /// Atomic with respect to the host too.
        GLOB = 2,
    }
}

open_flags! {
    /// `enum ibv_srq_attr_mask` (MODIFY_SRQ `attr_mask`).
    pub struct SrqAttrMask(u32) {
        /// max_wr (resize).
        MAX_WR = 1 << 0,
        /// srq_limit (arm the limit event).
        LIMIT = 1 << 1,
    }
}
