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

closed_enum! {
    /// `enum ibv_qp_type` / kernel `ib_qp_type` for user QPs (docs/wire.md §6.1).
    pub enum QpType: u8 {
        /// Reliable connected.
        Rc = 2 => "RC",
        /// Unreliable connected.
        Uc = 3 => "UC",
        /// Unreliable datagram.
        Ud = 4 => "UD",
        /// Raw packet (not supported by uroce).
        RawPacket = 8 => "RAW_PACKET",
        /// XRC initiator: a send queue only; each WR names the responder's XRC SRQ.
        XrcSend = 9 => "XRC_SEND",
        /// XRC target: no queues; receives land in the XRC SRQ its requests name.
        XrcRecv = 10 => "XRC_RECV",
    }
}

impl core::fmt::Display for QpType {
    /// The name rdma-core's `ibv_qp_type` uses, without the prefix (`RC`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
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

closed_enum! {
    /// `enum ibv_wr_opcode` (docs/wire.md §7.3). Values 11–13 differ between user space
    /// (`IBV_WR_DRIVER1`) and the kernel (`RDMA_READ_WITH_INV`, masked atomics) and are not named.
    pub enum WrOpcode: u32 {
        /// RDMA WRITE.
        RdmaWrite = 0 => "RDMA_WRITE",
        /// RDMA WRITE WITH IMMEDIATE.
        RdmaWriteWithImm = 1 => "RDMA_WRITE_WITH_IMM",
        /// SEND.
        Send = 2 => "SEND",
        /// SEND WITH IMMEDIATE.
        SendWithImm = 3 => "SEND_WITH_IMM",
        /// RDMA READ.
        RdmaRead = 4 => "RDMA_READ",
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5 => "ATOMIC_CMP_AND_SWP",
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6 => "ATOMIC_FETCH_AND_ADD",
        /// LOCAL INVALIDATE: invalidate a type 2 memory window of the QP's PD (no packet).
        LocalInv = 7 => "LOCAL_INV",
        /// BIND MEMORY WINDOW (no packet).
        BindMw = 8 => "BIND_MW",
        /// SEND WITH INVALIDATE (RC).
        SendWithInv = 9 => "SEND_WITH_INV",
        /// TCP segmentation offload (raw packet; not implemented by uroce).
        Tso = 10 => "TSO",
        /// FLUSH (not implemented by uroce).
        Flush = 14 => "FLUSH",
        /// ATOMIC WRITE (not implemented by uroce).
        AtomicWrite = 15 => "ATOMIC_WRITE",
    }
}

impl WrOpcode {
    /// The send-side completion opcode for this work request (rxe `wr_to_wc_opcode`,
    /// docs/wire.md §7.2).
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::Tso => WcOpcode::Tso,
            WrOpcode::Flush => WcOpcode::Flush,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
        }
    }

    /// SEND, SEND_WITH_IMM, SEND_WITH_INV.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv
        )
    }

    /// RDMA WRITE (with or without immediate).
    pub fn is_write(self) -> bool {
        matches!(self, WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm)
    }

    /// Whether the WR carries immediate data in the WQE's `ex` field.
    pub fn has_imm(self) -> bool {
        matches!(self, WrOpcode::RdmaWriteWithImm | WrOpcode::SendWithImm)
    }

    /// Whether the WR is an atomic that uses `compare_add` / `swap` and returns 8 bytes.
    pub fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }

    /// READ or atomic: counts against `max_rd_atomic` and expects a data-bearing response.
    pub fn is_read_or_atomic(self) -> bool {
        self == WrOpcode::RdmaRead || self.is_atomic()
    }

    /// Executed by the requester itself, without a packet (LOCAL_INV, BIND_MW): it waits
    /// until every earlier WR of the SQ has completed, then completes at once.
    pub fn is_local(self) -> bool {
        matches!(self, WrOpcode::LocalInv | WrOpcode::BindMw)
    }

    /// Consumes a receive WQE at the responder.
    pub fn consumes_rwqe(self) -> bool {
        self.is_send() || self == WrOpcode::RdmaWriteWithImm
    }

    /// Whether uroce implements this opcode (TSO, FLUSH and ATOMIC WRITE it does not).
    pub fn is_implemented(self) -> bool {
        !matches!(
            self,
            WrOpcode::Tso | WrOpcode::Flush | WrOpcode::AtomicWrite
        )
    }
}

impl core::fmt::Display for WrOpcode {
    /// The constant's name (`RDMA_WRITE`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

closed_enum! {
    /// `enum ibv_wc_opcode` (docs/wire.md §7.2); equal to `ib_uverbs_wc_opcode` for send opcodes.
    #[derive(Default)]
    pub enum WcOpcode: u32 {
        /// SEND, SEND_WITH_IMM, SEND_WITH_INV completed.
        #[default]
        Send = 0 => "SEND",
        /// RDMA WRITE (with or without immediate) completed.
        RdmaWrite = 1 => "RDMA_WRITE",
        /// RDMA READ completed.
        RdmaRead = 2 => "RDMA_READ",
        /// Compare and swap completed.
        CompSwap = 3 => "COMP_SWAP",
        /// Fetch and add completed.
        FetchAdd = 4 => "FETCH_ADD",
        /// Memory-window bind completed.
        BindMw = 5 => "BIND_MW",
        /// Local invalidate completed.
        LocalInv = 6 => "LOCAL_INV",
        /// TSO completed.
        Tso = 7 => "TSO",
        /// FLUSH completed.
        Flush = 8 => "FLUSH",
        /// ATOMIC WRITE completed.
        AtomicWrite = 9 => "ATOMIC_WRITE",
        /// A SEND was received (C code tests `opcode & IBV_WC_RECV`).
        Recv = 1 << 7 => "RECV",
        /// An RDMA WRITE with immediate was received.
        RecvRdmaWithImm = (1 << 7) + 1 => "RECV_RDMA_WITH_IMM",
    }
}

impl WcOpcode {
    /// Whether this is a receive-side completion (`opcode & IBV_WC_RECV`).
    pub fn is_recv(self) -> bool {
        self.raw() & WcOpcode::Recv.raw() != 0
    }
}

impl core::fmt::Display for WcOpcode {
    /// The constant's name (`RECV`).
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
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
