//! Command payloads: the core structs of `ib_user_verbs.h` (docs/abi.md §3),
//! uroce's driver-specific data, and [`Request`], the typed decode of a whole command.
//!
//! Sizes and offsets are asserted at compile time against x86-64 gcc `sizeof`/`offsetof`
//! (docs/abi.md §3, docs/wire.md §7.5). All fields are host-endian (the uverbs ABI is), except
//! those typed big-endian (`node_guid`) and the `imm_data` half of the `ex` unions, which holds the
//! four immediate bytes in network order, as in `ibv_wc.imm_data` (`__be32`).
//!
//! # Driver-specific data (uroce)
//!
//! Like rxe's `rxe_create_qp_resp{rq_mi, sq_mi}`, our device puts its extras after the core
//! struct, in the request (driver data) and in the response (driver response):
//!
//! | command | driver request | driver response |
//! |---|---|---|
//! | GET_CONTEXT | [`UroceGetContext`] (24 B): ABI version, doorbell page | [`UroceGetContextResp`] (16 B): ABI version, max inline, wake fd |
//! | CREATE_CQ | [`UroceCreateCq`] (32 B): CQ ring, flags (wall-clock stamps) | — |
//! | RESIZE_CQ | [`UroceResizeCq`] (24 B): the new CQ ring | — |
//! | CREATE_QP | [`UroceCreateQp`] (48 B): SQ ring, RQ ring | [`UroceCreateQpResp`] (8 B): SQ doorbell slot |
//! | CREATE_SRQ | [`UroceCreateSrq`] (24 B): SRQ ring | — |
//! | CREATE_XSRQ | [`UroceCreateSrq`] (24 B): SRQ ring | — |
//! | OPEN_XRCD | [`UroceOpenXrcd`] (16 B): the file's device and inode | — |
//!
//! **Ring memory is allocated by the library** (the mlx5 model: the provider allocates the
//! queue buffer and passes `buf_addr` in driver data), described by a [`RingDesc`] (address,
//! length, geometry). The control plane validates the descriptor, and the engine reaches the
//! memory through the same interface it uses for registered memory: in embedded mode the
//! address is in the shared process; in daemon mode it is inside a memfd the library shared
//! with the daemon. Every other command carries no driver data: any driver bytes sent must be
//! zero (forward compatibility, like the kernel's `ib_is_udata_cleared`), else EINVAL.
//!
//! Handles (`pd_handle`, `cq_handle`, …) are per-context numbers chosen by the control plane;
//! a send WQE names its UD address handle by `ah_handle`.
//!
//! File descriptors in responses (`async_fd`, CREATE_COMP_CHANNEL `fd`, `wake_fd`): in
//! embedded mode they are fd numbers valid in the (shared) process; in daemon mode the fd
//! travels as `SCM_RIGHTS` ancillary data with the reply and the field holds its position
//! among the passed fds (a proposal: daemon mode is not built yet).

use zerocopy::byteorder::big_endian;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::cmd::{encode_legacy, Command, Frame};
use crate::error::{AbiError, Result};
use crate::verbs_consts::{QpAttrMask, QpState, QpType, WrOpcode};

macro_rules! abi_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident { $($body:tt)* }
        size = $size:expr;
    ) => {
        $(#[$m])*
        #[repr(C)]
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
        pub struct $name { $($body)* }

        impl $name {
            /// Size in bytes (asserted at compile time against the C layout).
            pub const SIZE: usize = $size;
        }

        const _: () = assert!(core::mem::size_of::<$name>() == $size);
    };
}

macro_rules! offsets {
    ($t:ty { $($f:ident = $o:expr),* $(,)? }) => {
        $(const _: () = assert!(core::mem::offset_of!($t, $f) == $o);)*
    };
}

// ---------------------------------------------------------------------------------------
// GET_CONTEXT, QUERY_DEVICE, QUERY_PORT

abi_struct! {
    /// `ib_uverbs_get_context`.
    pub struct GetContext {
        /// Ignored (see [`crate::cmd`]).
        pub response: u64,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_get_context_resp`.
    pub struct GetContextResp {
        /// Async event fd.
        pub async_fd: u32,
        /// Completion vectors (≥ 1).
        pub num_comp_vectors: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_query_device`.
    pub struct QueryDevice {
        /// Ignored.
        pub response: u64,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_query_device_resp` (176 B).
    pub struct QueryDeviceResp {
        /// Firmware version.
        pub fw_ver: u64,
        /// Node GUID (big-endian).
        pub node_guid: big_endian::U64,
        /// System image GUID (big-endian).
        pub sys_image_guid: big_endian::U64,
        /// Largest MR.
        pub max_mr_size: u64,
        /// Supported page sizes.
        pub page_size_cap: u64,
        /// Vendor id (uroce reports 0xffffff like rxe; docs/compat.md §9).
        pub vendor_id: u32,
        /// Vendor part id (0: keeps perftest on its generic path).
        pub vendor_part_id: u32,
        /// Hardware version.
        pub hw_ver: u32,
        /// Max QPs.
        pub max_qp: u32,
        /// Max WRs per QP.
        pub max_qp_wr: u32,
        /// `ib_uverbs_device_cap_flags` (low 32 bits).
        pub device_cap_flags: u32,
        /// Max SGEs per WR.
        pub max_sge: u32,
        /// Max SGEs per RDMA READ.
        pub max_sge_rd: u32,
        /// Max CQs.
        pub max_cq: u32,
        /// Max CQEs per CQ.
        pub max_cqe: u32,
        /// Max MRs.
        pub max_mr: u32,
        /// Max PDs.
        pub max_pd: u32,
        /// Max outstanding RDMA READ/atomic as initiator per QP.
        pub max_qp_rd_atom: u32,
        /// RD only.
        pub max_ee_rd_atom: u32,
        /// Max responder resources in total.
        pub max_res_rd_atom: u32,
        /// Max outstanding RDMA READ/atomic as responder per QP.
        pub max_qp_init_rd_atom: u32,
        /// RD only.
        pub max_ee_init_rd_atom: u32,
        /// [`crate::verbs_consts::AtomicCap`].
        pub atomic_cap: u32,
        /// RD only.
        pub max_ee: u32,
        /// RD only.
        pub max_rdd: u32,
        /// Max memory windows.
        pub max_mw: u32,
        /// Raw IPv6 QPs.
        pub max_raw_ipv6_qp: u32,
        /// Raw Ethertype QPs.
        pub max_raw_ethy_qp: u32,
        /// Multicast groups.
        pub max_mcast_grp: u32,
        /// QPs per multicast group.
        pub max_mcast_qp_attach: u32,
        /// Total multicast attachments.
        pub max_total_mcast_qp_attach: u32,
        /// Max AHs.
        pub max_ah: u32,
        /// Obsolete.
        pub max_fmr: u32,
        /// Obsolete.
        pub max_map_per_fmr: u32,
        /// Max SRQs.
        pub max_srq: u32,
        /// Max WRs per SRQ.
        pub max_srq_wr: u32,
        /// Max SGEs per SRQ WR.
        pub max_srq_sge: u32,
        /// P_Key table size (≥ 1).
        pub max_pkeys: u16,
        /// Local CA ACK delay.
        pub local_ca_ack_delay: u8,
        /// Physical ports.
        pub phys_port_cnt: u8,
        /// Reserved.
        pub reserved: [u8; 4],
    }
    size = 176;
}
offsets!(QueryDeviceResp {
    vendor_id = 40, max_qp_wr = 56, max_qp_rd_atom = 88, atomic_cap = 108, max_srq_sge = 164,
    max_pkeys = 168, local_ca_ack_delay = 170, phys_port_cnt = 171, reserved = 172,
});

abi_struct! {
    /// `ib_uverbs_query_port`.
    pub struct QueryPort {
        /// Ignored.
        pub response: u64,
        /// Port (1-based).
        pub port_num: u8,
        /// Reserved.
        pub reserved: [u8; 7],
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_query_port_resp` (40 B).
    pub struct QueryPortResp {
        /// Capability flags.
        pub port_cap_flags: u32,
        /// Max message size.
        pub max_msg_sz: u32,
        /// Bad P_Key counter.
        pub bad_pkey_cntr: u32,
        /// Q_Key violation counter.
        pub qkey_viol_cntr: u32,
        /// GID table length.
        pub gid_tbl_len: u32,
        /// P_Key table length.
        pub pkey_tbl_len: u16,
        /// LID (0 on Ethernet).
        pub lid: u16,
        /// SM LID.
        pub sm_lid: u16,
        /// [`crate::verbs_consts::PortState`].
        pub state: u8,
        /// [`crate::verbs_consts::Mtu`].
        pub max_mtu: u8,
        /// [`crate::verbs_consts::Mtu`].
        pub active_mtu: u8,
        /// LMC.
        pub lmc: u8,
        /// Max VLs.
        pub max_vl_num: u8,
        /// SM SL.
        pub sm_sl: u8,
        /// Subnet timeout.
        pub subnet_timeout: u8,
        /// Init type reply.
        pub init_type_reply: u8,
        /// Active width.
        pub active_width: u8,
        /// Active speed.
        pub active_speed: u8,
        /// Physical state.
        pub phys_state: u8,
        /// [`crate::verbs_consts::LinkLayer`].
        pub link_layer: u8,
        /// Port flags.
        pub flags: u8,
        /// Reserved.
        pub reserved: u8,
    }
    size = 40;
}
offsets!(QueryPortResp { gid_tbl_len = 16, pkey_tbl_len = 20, state = 26, active_mtu = 28, link_layer = 37 });

// ---------------------------------------------------------------------------------------
// PD, MR, completion channel

abi_struct! {
    /// `ib_uverbs_alloc_pd`.
    pub struct AllocPd {
        /// Ignored.
        pub response: u64,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_alloc_pd_resp`.
    pub struct AllocPdResp {
        /// New PD handle.
        pub pd_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_dealloc_pd` (no response).
    pub struct DeallocPd {
        /// PD handle.
        pub pd_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_reg_mr`.
    pub struct RegMr {
        /// Ignored.
        pub response: u64,
        /// Start address in the caller's memory.
        pub start: u64,
        /// Length in bytes.
        pub length: u64,
        /// I/O virtual address remote peers use (`ibv_reg_mr_iova2`).
        pub hca_va: u64,
        /// PD handle.
        pub pd_handle: u32,
        /// [`crate::verbs_consts::AccessFlags`].
        pub access_flags: u32,
    }
    size = 40;
}

abi_struct! {
    /// `ib_uverbs_reg_mr_resp`.
    pub struct RegMrResp {
        /// MR handle.
        pub mr_handle: u32,
        /// Local key.
        pub lkey: u32,
        /// Remote key.
        pub rkey: u32,
    }
    size = 12;
}

abi_struct! {
    /// `ib_uverbs_rereg_mr`: change an MR's translation, PD or access in place (handle and
    /// keys stay; kernel `ib_uverbs_rereg_mr`).
    pub struct ReregMr {
        /// Ignored.
        pub response: u64,
        /// MR handle.
        pub mr_handle: u32,
        /// [`ReregMr::CHANGE_TRANSLATION`] | [`ReregMr::CHANGE_PD`] |
        /// [`ReregMr::CHANGE_ACCESS`] (`IB_MR_REREG_*`); at least one.
        pub flags: u32,
        /// New start address (with `CHANGE_TRANSLATION`).
        pub start: u64,
        /// New length (with `CHANGE_TRANSLATION`).
        pub length: u64,
        /// New I/O virtual address (with `CHANGE_TRANSLATION`).
        pub hca_va: u64,
        /// New PD handle (with `CHANGE_PD`).
        pub pd_handle: u32,
        /// New [`crate::verbs_consts::AccessFlags`] (with `CHANGE_ACCESS`).
        pub access_flags: u32,
    }
    size = 48;
}

impl ReregMr {
    /// `IB_MR_REREG_TRANS`.
    pub const CHANGE_TRANSLATION: u32 = 1;
    /// `IB_MR_REREG_PD`.
    pub const CHANGE_PD: u32 = 2;
    /// `IB_MR_REREG_ACCESS`.
    pub const CHANGE_ACCESS: u32 = 4;
}

abi_struct! {
    /// `ib_uverbs_rereg_mr_resp`.
    pub struct ReregMrResp {
        /// Local key.
        pub lkey: u32,
        /// Remote key.
        pub rkey: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_alloc_mw`.
    pub struct AllocMw {
        /// Ignored.
        pub response: u64,
        /// PD handle.
        pub pd_handle: u32,
        /// 1 or 2 (`IB_MW_TYPE_*`).
        pub mw_type: u8,
        /// Zero.
        pub reserved: [u8; 3],
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_alloc_mw_resp`.
    pub struct AllocMwResp {
        /// MW handle.
        pub mw_handle: u32,
        /// The window's first R_Key (random index bits, 8-bit key 0).
        pub rkey: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_dealloc_mw` (no response).
    pub struct DeallocMw {
        /// MW handle.
        pub mw_handle: u32,
        /// Zero.
        pub reserved: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_dereg_mr` (no response).
    pub struct DeregMr {
        /// MR handle.
        pub mr_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_create_comp_channel`.
    pub struct CreateCompChannel {
        /// Ignored.
        pub response: u64,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_create_comp_channel_resp`. Each completion event read from the fd is a
    /// [`CompEventDesc`] naming the CQ by its CREATE_CQ `user_handle` (`ibv_get_cq_event`).
    pub struct CreateCompChannelResp {
        /// Event fd.
        pub fd: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_comp_event_desc`: one completion event as read from a completion channel.
    pub struct CompEventDesc {
        /// The CQ's `user_handle` from CREATE_CQ.
        pub cq_handle: u64,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_async_event_desc`: one async event as read from `async_fd`.
    pub struct AsyncEventDesc {
        /// The object's `user_handle`, or the port number for port events.
        pub element: u64,
        /// `enum ib_event_type`.
        pub event_type: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

// ---------------------------------------------------------------------------------------
// CQ

abi_struct! {
    /// `ib_uverbs_create_cq`. Driver data: [`UroceCreateCq`].
    pub struct CreateCq {
        /// Ignored.
        pub response: u64,
        /// Caller's cookie, returned in completion events.
        pub user_handle: u64,
        /// Requested CQEs.
        pub cqe: u32,
        /// Completion vector.
        pub comp_vector: u32,
        /// Completion channel fd, or −1 for none.
        pub comp_channel: i32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 32;
}

abi_struct! {
    /// `ib_uverbs_create_cq_resp`.
    pub struct CreateCqResp {
        /// CQ handle.
        pub cq_handle: u32,
        /// CQEs granted (= the CQ ring's slot count).
        pub cqe: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_resize_cq`. Driver data: [`UroceResizeCq`].
    pub struct ResizeCq {
        /// Ignored.
        pub response: u64,
        /// CQ handle.
        pub cq_handle: u32,
        /// Requested CQEs.
        pub cqe: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_resize_cq_resp`.
    pub struct ResizeCqResp {
        /// CQEs granted.
        pub cqe: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_destroy_cq`.
    pub struct DestroyCq {
        /// Ignored.
        pub response: u64,
        /// CQ handle.
        pub cq_handle: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_destroy_cq_resp`.
    pub struct DestroyCqResp {
        /// Completion events delivered.
        pub comp_events_reported: u32,
        /// Async events delivered.
        pub async_events_reported: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_poll_cq`. The response is [`PollCqResp`] followed by `count` × [`Wc`].
    pub struct PollCq {
        /// Ignored.
        pub response: u64,
        /// CQ handle.
        pub cq_handle: u32,
        /// Max entries wanted.
        pub ne: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_poll_cq_resp` header.
    pub struct PollCqResp {
        /// Entries that follow.
        pub count: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 8;
}

abi_struct! {
    /// `ib_uverbs_wc` = the first 48 bytes of `struct ibv_wc` (docs/wire.md §7.5). Also the
    /// first 48 bytes of every CQE in a CQ ring ([`crate::fastpath::Cqe`]).
    ///
    /// `opcode` holds [`crate::verbs_consts::WcOpcode`], `status`
    /// [`crate::verbs_consts::WcStatus`], `wc_flags` [`crate::verbs_consts::WcFlags`] with
    /// libibverbs values.
    pub struct Wc {
        /// The WR's `wr_id`.
        pub wr_id: u64,
        /// Completion status.
        pub status: u32,
        /// Completion opcode.
        pub opcode: u32,
        /// Vendor error (uroce: 0, or a diagnostic code).
        pub vendor_err: u32,
        /// Bytes transferred (receives, RDMA READ, atomics).
        pub byte_len: u32,
        /// `imm_data` (network byte order bytes) or `invalidated_rkey`; see accessors.
        pub ex: u32,
        /// Local QPN.
        pub qp_num: u32,
        /// Remote QPN (UD receives).
        pub src_qp: u32,
        /// Completion flags.
        pub wc_flags: u32,
        /// P_Key index.
        pub pkey_index: u16,
        /// Source LID (0 on RoCE).
        pub slid: u16,
        /// Service level.
        pub sl: u8,
        /// DLID path bits.
        pub dlid_path_bits: u8,
        /// Port (uverbs only; beyond `ibv_wc`'s 46 meaningful bytes).
        pub port_num: u8,
        /// Reserved.
        pub reserved: u8,
    }
    size = 48;
}
offsets!(Wc {
    status = 8, opcode = 12, vendor_err = 16, byte_len = 20, ex = 24, qp_num = 28, src_qp = 32,
    wc_flags = 36, pkey_index = 40, slid = 42, sl = 44, dlid_path_bits = 45, port_num = 46,
});

/// The largest response capacity a legacy header can offer (`out_words` is a u16 count of
/// 4-byte words).
pub const MAX_LEGACY_RESPONSE_BYTES: usize = 0xffff * 4;

impl PollCq {
    /// How many work completions a POLL_CQ reply may carry: `ne`, limited by the response
    /// capacity the request offered (the control plane returns at most this many).
    pub fn max_entries(&self, response_capacity: usize) -> u32 {
        let fit = response_capacity.saturating_sub(PollCqResp::SIZE) / Wc::SIZE;
        self.ne.min(u32::try_from(fit).unwrap_or(u32::MAX))
    }
}

impl Wc {
    /// The immediate value in host order (the `ex` bytes are big-endian on the wire and in
    /// `ibv_wc.imm_data`).
    pub fn imm_data(&self) -> u32 {
        u32::from_be_bytes(self.ex.to_ne_bytes())
    }

    /// Store an immediate value given in host order.
    pub fn set_imm_data(&mut self, imm: u32) {
        self.ex = u32::from_ne_bytes(imm.to_be_bytes());
    }

    /// `invalidated_rkey` (host order).
    pub fn invalidated_rkey(&self) -> u32 {
        self.ex
    }
}

abi_struct! {
    /// `ib_uverbs_req_notify_cq` (no response).
    pub struct ReqNotifyCq {
        /// CQ handle.
        pub cq_handle: u32,
        /// Nonzero: only solicited completions (and errors) raise the event.
        pub solicited_only: u32,
    }
    size = 8;
}

// ---------------------------------------------------------------------------------------
// Address vectors, QP

abi_struct! {
    /// `ib_uverbs_global_route`.
    pub struct GlobalRoute {
        /// Destination GID.
        pub dgid: [u8; 16],
        /// Flow label (20 bits).
        pub flow_label: u32,
        /// Source GID index.
        pub sgid_index: u8,
        /// Hop limit.
        pub hop_limit: u8,
        /// Traffic class.
        pub traffic_class: u8,
        /// Reserved.
        pub reserved: u8,
    }
    size = 24;
}

abi_struct! {
    /// `ib_uverbs_ah_attr`.
    pub struct AhAttr {
        /// GRH fields.
        pub grh: GlobalRoute,
        /// Destination LID (0 on RoCE).
        pub dlid: u16,
        /// Service level.
        pub sl: u8,
        /// Source path bits.
        pub src_path_bits: u8,
        /// Static rate.
        pub static_rate: u8,
        /// Whether the GRH is valid (always for RoCE).
        pub is_global: u8,
        /// Port.
        pub port_num: u8,
        /// Reserved.
        pub reserved: u8,
    }
    size = 32;
}
offsets!(AhAttr { dlid = 24, sl = 26, is_global = 29, port_num = 30 });

abi_struct! {
    /// `ib_uverbs_qp_dest`: the address vector inside MODIFY_QP / QUERY_QP (32 B).
    pub struct QpDest {
        /// Destination GID.
        pub dgid: [u8; 16],
        /// Flow label.
        pub flow_label: u32,
        /// Destination LID.
        pub dlid: u16,
        /// Reserved.
        pub reserved: u16,
        /// Source GID index.
        pub sgid_index: u8,
        /// Hop limit.
        pub hop_limit: u8,
        /// Traffic class.
        pub traffic_class: u8,
        /// Service level.
        pub sl: u8,
        /// Source path bits.
        pub src_path_bits: u8,
        /// Static rate.
        pub static_rate: u8,
        /// GRH valid.
        pub is_global: u8,
        /// Port.
        pub port_num: u8,
    }
    size = 32;
}
offsets!(QpDest { flow_label = 16, dlid = 20, sgid_index = 24, sl = 27, is_global = 30, port_num = 31 });

abi_struct! {
    /// `ib_uverbs_create_qp` (56 B). Driver data: [`UroceCreateQp`]; driver response:
    /// [`UroceCreateQpResp`].
    pub struct CreateQp {
        /// Ignored.
        pub response: u64,
        /// Caller's cookie, returned in async events.
        pub user_handle: u64,
        /// PD handle.
        pub pd_handle: u32,
        /// Send CQ handle.
        pub send_cq_handle: u32,
        /// Receive CQ handle.
        pub recv_cq_handle: u32,
        /// SRQ handle (if `is_srq`).
        pub srq_handle: u32,
        /// Requested SQ depth.
        pub max_send_wr: u32,
        /// Requested RQ depth.
        pub max_recv_wr: u32,
        /// Requested SGEs per send WR.
        pub max_send_sge: u32,
        /// Requested SGEs per receive WR.
        pub max_recv_sge: u32,
        /// Requested inline bytes.
        pub max_inline_data: u32,
        /// Signal every send WR.
        pub sq_sig_all: u8,
        /// [`QpType`].
        pub qp_type: u8,
        /// Receives come from the SRQ.
        pub is_srq: u8,
        /// Reserved.
        pub reserved: u8,
    }
    size = 56;
}
offsets!(CreateQp { pd_handle = 16, max_send_wr = 32, max_inline_data = 48, sq_sig_all = 52, qp_type = 53, is_srq = 54 });

impl CreateQp {
    /// The QP type as an enum; `None` for a number `ibv_qp_type` does not name.
    pub fn qp_type(&self) -> Option<QpType> {
        QpType::from_raw(u32::from(self.qp_type))
    }
}

abi_struct! {
    /// `ib_uverbs_create_qp_resp` (32 B): the granted capabilities.
    pub struct CreateQpResp {
        /// QP handle.
        pub qp_handle: u32,
        /// QP number (24 bits).
        pub qpn: u32,
        /// Granted SQ depth.
        pub max_send_wr: u32,
        /// Granted RQ depth.
        pub max_recv_wr: u32,
        /// Granted send SGEs.
        pub max_send_sge: u32,
        /// Granted receive SGEs.
        pub max_recv_sge: u32,
        /// Granted inline bytes (perftest reads it back).
        pub max_inline_data: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 32;
}

abi_struct! {
    /// `ib_uverbs_query_qp`.
    pub struct QueryQp {
        /// Ignored.
        pub response: u64,
        /// QP handle.
        pub qp_handle: u32,
        /// [`QpAttrMask`] of attributes wanted.
        pub attr_mask: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_query_qp_resp` (128 B).
    pub struct QueryQpResp {
        /// Primary path.
        pub dest: QpDest,
        /// Alternate path.
        pub alt_dest: QpDest,
        /// SQ depth.
        pub max_send_wr: u32,
        /// RQ depth.
        pub max_recv_wr: u32,
        /// Send SGEs.
        pub max_send_sge: u32,
        /// Receive SGEs.
        pub max_recv_sge: u32,
        /// Inline bytes.
        pub max_inline_data: u32,
        /// Q_Key.
        pub qkey: u32,
        /// Receive PSN.
        pub rq_psn: u32,
        /// Send PSN.
        pub sq_psn: u32,
        /// Remote QPN.
        pub dest_qp_num: u32,
        /// Access flags.
        pub qp_access_flags: u32,
        /// P_Key index.
        pub pkey_index: u16,
        /// Alternate P_Key index.
        pub alt_pkey_index: u16,
        /// [`QpState`].
        pub qp_state: u8,
        /// Current state.
        pub cur_qp_state: u8,
        /// [`crate::verbs_consts::Mtu`].
        pub path_mtu: u8,
        /// Path migration state.
        pub path_mig_state: u8,
        /// SQ draining.
        pub sq_draining: u8,
        /// Initiator depth.
        pub max_rd_atomic: u8,
        /// Responder resources.
        pub max_dest_rd_atomic: u8,
        /// Min RNR NAK timer code.
        pub min_rnr_timer: u8,
        /// Port.
        pub port_num: u8,
        /// Local ACK timeout code.
        pub timeout: u8,
        /// Retry count.
        pub retry_cnt: u8,
        /// RNR retry count.
        pub rnr_retry: u8,
        /// Alternate port.
        pub alt_port_num: u8,
        /// Alternate timeout.
        pub alt_timeout: u8,
        /// Signal all.
        pub sq_sig_all: u8,
        /// Reserved.
        pub reserved: [u8; 5],
    }
    size = 128;
}
offsets!(QueryQpResp {
    alt_dest = 32, max_send_wr = 64, qkey = 84, dest_qp_num = 96, qp_access_flags = 100,
    pkey_index = 104, qp_state = 108, sq_draining = 112, port_num = 116, sq_sig_all = 122,
    reserved = 123,
});

abi_struct! {
    /// `ib_uverbs_modify_qp` (112 B, no response).
    pub struct ModifyQp {
        /// Primary path (with [`QpAttrMask::AV`]).
        pub dest: QpDest,
        /// Alternate path.
        pub alt_dest: QpDest,
        /// QP handle.
        pub qp_handle: u32,
        /// [`QpAttrMask`].
        pub attr_mask: u32,
        /// Q_Key.
        pub qkey: u32,
        /// Receive PSN.
        pub rq_psn: u32,
        /// Send PSN.
        pub sq_psn: u32,
        /// Remote QPN.
        pub dest_qp_num: u32,
        /// Access flags.
        pub qp_access_flags: u32,
        /// P_Key index.
        pub pkey_index: u16,
        /// Alternate P_Key index.
        pub alt_pkey_index: u16,
        /// Target state.
        pub qp_state: u8,
        /// Claimed current state.
        pub cur_qp_state: u8,
        /// Path MTU.
        pub path_mtu: u8,
        /// Path migration state.
        pub path_mig_state: u8,
        /// Raise an event when SQD is reached.
        pub en_sqd_async_notify: u8,
        /// Initiator depth.
        pub max_rd_atomic: u8,
        /// Responder resources.
        pub max_dest_rd_atomic: u8,
        /// Min RNR NAK timer code.
        pub min_rnr_timer: u8,
        /// Port.
        pub port_num: u8,
        /// Local ACK timeout code (≤ 31).
        pub timeout: u8,
        /// Retry count.
        pub retry_cnt: u8,
        /// RNR retry count.
        pub rnr_retry: u8,
        /// Alternate port.
        pub alt_port_num: u8,
        /// Alternate timeout.
        pub alt_timeout: u8,
        /// uroce: `MODIFY_QP_*` flags (other bits: EINVAL). The kernel's struct has a reserved
        /// byte here that its callers leave 0.
        pub flags: u8,
        /// Reserved.
        pub reserved: u8,
    }
    size = 112;
}
offsets!(ModifyQp {
    alt_dest = 32, qp_handle = 64, attr_mask = 68, qkey = 72, rq_psn = 76, sq_psn = 80,
    dest_qp_num = 84, qp_access_flags = 88, pkey_index = 92, alt_pkey_index = 94, qp_state = 96,
    path_mtu = 98, en_sqd_async_notify = 100, min_rnr_timer = 103, port_num = 104, timeout = 105,
    alt_timeout = 109, flags = 110, reserved = 111,
});

/// [`ModifyQp::flags`]: with a move from INIT to RTR, turn selective repeat (docs/wire.md
/// §5.6) on for an RC QP that is not XRC (else EINVAL) — what the two ends agreed in the
/// CM's ECE exchange. Without it the QP keeps what it has (off, unless CREATE_QP set it).
pub const MODIFY_QP_SELECTIVE_REPEAT: u8 = 1 << 0;

impl ModifyQp {
    /// The attribute mask.
    pub fn mask(&self) -> QpAttrMask {
        QpAttrMask(self.attr_mask)
    }

    /// The target state, or `None` for a value outside `enum ibv_qp_state`.
    pub fn state(&self) -> Option<QpState> {
        QpState::from_raw(u32::from(self.qp_state))
    }
}

abi_struct! {
    /// `ib_uverbs_destroy_qp`.
    pub struct DestroyQp {
        /// Ignored.
        pub response: u64,
        /// QP handle.
        pub qp_handle: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_destroy_qp_resp`.
    pub struct DestroyQpResp {
        /// Async events delivered.
        pub events_reported: u32,
    }
    size = 4;
}

// ---------------------------------------------------------------------------------------
// Slow-path posting

abi_struct! {
    /// `ib_uverbs_sge`; also the SGE format inside WQEs.
    pub struct Sge {
        /// Address in the caller's memory.
        pub addr: u64,
        /// Length in bytes.
        pub length: u32,
        /// Local key.
        pub lkey: u32,
    }
    size = 16;
}

abi_struct! {
    /// RDMA fields of the `ib_uverbs_send_wr.wr` union (first 16 of its 32 bytes).
    pub struct RdmaWr {
        /// Remote virtual address.
        pub remote_addr: u64,
        /// Remote key.
        pub rkey: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// Atomic fields of the `ib_uverbs_send_wr.wr` union (all 32 bytes).
    pub struct AtomicWr {
        /// Remote virtual address (8-byte aligned).
        pub remote_addr: u64,
        /// Compare value (CMP_AND_SWP) or add value (FETCH_AND_ADD).
        pub compare_add: u64,
        /// Swap value.
        pub swap: u64,
        /// Remote key.
        pub rkey: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 32;
}

abi_struct! {
    /// UD fields of the `ib_uverbs_send_wr.wr` union (first 16 of its 32 bytes).
    pub struct UdWr {
        /// AH handle.
        pub ah: u32,
        /// Remote QPN.
        pub remote_qpn: u32,
        /// Remote Q_Key.
        pub remote_qkey: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_send_wr` (56 B): one send WR of a POST_SEND command.
    pub struct SendWr {
        /// Caller's id, returned in the completion.
        pub wr_id: u64,
        /// SGEs of this WR (taken in order from the command's SGE array).
        pub num_sge: u32,
        /// [`WrOpcode`] (kernel `ib_uverbs_wr_opcode`).
        pub opcode: u32,
        /// [`crate::verbs_consts::SendFlags`].
        pub send_flags: u32,
        /// `imm_data` (network-order bytes) or `invalidate_rkey`.
        pub ex: u32,
        /// The rdma / atomic / ud union; see the accessors.
        pub wr: [u8; 32],
    }
    size = 56;
}
offsets!(SendWr { num_sge = 8, opcode = 12, send_flags = 16, ex = 20, wr = 24 });

impl SendWr {
    /// The opcode, or `None` for a value outside `enum ibv_wr_opcode`.
    pub fn op(&self) -> Option<WrOpcode> {
        WrOpcode::from_raw(self.opcode)
    }

    /// The union read as RDMA fields.
    pub fn rdma(&self) -> RdmaWr {
        RdmaWr::read_from_prefix(&self.wr)
            .map(|(v, _)| v)
            .unwrap_or_default()
    }

    /// The union read as atomic fields.
    pub fn atomic(&self) -> AtomicWr {
        AtomicWr::read_from_prefix(&self.wr)
            .map(|(v, _)| v)
            .unwrap_or_default()
    }

    /// The union read as UD fields.
    pub fn ud(&self) -> UdWr {
        UdWr::read_from_prefix(&self.wr)
            .map(|(v, _)| v)
            .unwrap_or_default()
    }

    /// Set the union from RDMA fields (the rest is zeroed).
    pub fn set_rdma(&mut self, v: RdmaWr) {
        self.set_union(v.as_bytes());
    }

    /// Set the union from atomic fields.
    pub fn set_atomic(&mut self, v: AtomicWr) {
        self.set_union(v.as_bytes());
    }

    /// Set the union from UD fields (the rest is zeroed).
    pub fn set_ud(&mut self, v: UdWr) {
        self.set_union(v.as_bytes());
    }

    fn set_union(&mut self, bytes: &[u8]) {
        self.wr = [0; 32];
        for (d, s) in self.wr.iter_mut().zip(bytes) {
            *d = *s;
        }
    }

    /// The immediate value in host order.
    pub fn imm_data(&self) -> u32 {
        u32::from_be_bytes(self.ex.to_ne_bytes())
    }

    /// Store an immediate value given in host order.
    pub fn set_imm_data(&mut self, imm: u32) {
        self.ex = u32::from_ne_bytes(imm.to_be_bytes());
    }
}

abi_struct! {
    /// `ib_uverbs_post_send`: followed by `wr_count × wqe_size` bytes of [`SendWr`] (each
    /// `wqe_size ≥ 56`; extra bytes per WR are ignored) and `sge_count` × [`Sge`].
    pub struct PostSend {
        /// Ignored.
        pub response: u64,
        /// QP handle.
        pub qp_handle: u32,
        /// WRs that follow.
        pub wr_count: u32,
        /// SGEs that follow.
        pub sge_count: u32,
        /// Bytes per WR.
        pub wqe_size: u32,
    }
    size = 24;
}

abi_struct! {
    /// `ib_uverbs_post_send_resp` (also post_recv / post_srq_recv).
    pub struct PostResp {
        /// 0 if all WRs were posted, else the 1-based index of the first WR not posted.
        pub bad_wr: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_recv_wr` (16 B).
    pub struct RecvWr {
        /// Caller's id.
        pub wr_id: u64,
        /// SGEs of this WR.
        pub num_sge: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_post_recv`: followed by `wr_count × wqe_size` bytes of [`RecvWr`] and
    /// `sge_count` × [`Sge`].
    pub struct PostRecv {
        /// Ignored.
        pub response: u64,
        /// QP handle.
        pub qp_handle: u32,
        /// WRs that follow.
        pub wr_count: u32,
        /// SGEs that follow.
        pub sge_count: u32,
        /// Bytes per WR (≥ 16).
        pub wqe_size: u32,
    }
    size = 24;
}

abi_struct! {
    /// `ib_uverbs_post_srq_recv`: as [`PostRecv`], for an SRQ.
    pub struct PostSrqRecv {
        /// Ignored.
        pub response: u64,
        /// SRQ handle.
        pub srq_handle: u32,
        /// WRs that follow.
        pub wr_count: u32,
        /// SGEs that follow.
        pub sge_count: u32,
        /// Bytes per WR (≥ 16).
        pub wqe_size: u32,
    }
    size = 24;
}

// ---------------------------------------------------------------------------------------
// AH, SRQ

abi_struct! {
    /// `ib_uverbs_create_ah` (56 B).
    pub struct CreateAh {
        /// Ignored.
        pub response: u64,
        /// Caller's cookie.
        pub user_handle: u64,
        /// PD handle.
        pub pd_handle: u32,
        /// Reserved.
        pub reserved: u32,
        /// Address attributes.
        pub attr: AhAttr,
    }
    size = 56;
}

abi_struct! {
    /// `ib_uverbs_create_ah_resp`. The handle is also what UD send WQEs name.
    pub struct CreateAhResp {
        /// AH handle.
        pub ah_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_destroy_ah` (no response).
    pub struct DestroyAh {
        /// AH handle.
        pub ah_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_create_srq`. Driver data: [`UroceCreateSrq`].
    pub struct CreateSrq {
        /// Ignored.
        pub response: u64,
        /// Caller's cookie.
        pub user_handle: u64,
        /// PD handle.
        pub pd_handle: u32,
        /// Requested depth.
        pub max_wr: u32,
        /// Requested SGEs per WR.
        pub max_sge: u32,
        /// Limit event threshold.
        pub srq_limit: u32,
    }
    size = 32;
}

abi_struct! {
    /// `ib_uverbs_create_srq_resp`.
    pub struct CreateSrqResp {
        /// SRQ handle.
        pub srq_handle: u32,
        /// Granted depth.
        pub max_wr: u32,
        /// Granted SGEs.
        pub max_sge: u32,
        /// SRQ number.
        pub srqn: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_modify_srq` (no response). uroce supports only
    /// [`crate::verbs_consts::SrqAttrMask::LIMIT`]; resizing (`MAX_WR`) is EOPNOTSUPP.
    pub struct ModifySrq {
        /// SRQ handle.
        pub srq_handle: u32,
        /// [`crate::verbs_consts::SrqAttrMask`].
        pub attr_mask: u32,
        /// New depth.
        pub max_wr: u32,
        /// New limit.
        pub srq_limit: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_query_srq`.
    pub struct QuerySrq {
        /// Ignored.
        pub response: u64,
        /// SRQ handle.
        pub srq_handle: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_query_srq_resp`.
    pub struct QuerySrqResp {
        /// Depth.
        pub max_wr: u32,
        /// SGEs.
        pub max_sge: u32,
        /// Limit.
        pub srq_limit: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_destroy_srq`.
    pub struct DestroySrq {
        /// Ignored.
        pub response: u64,
        /// SRQ handle.
        pub srq_handle: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_destroy_srq_resp`.
    pub struct DestroySrqResp {
        /// Async events delivered.
        pub events_reported: u32,
    }
    size = 4;
}

// ---------------------------------------------------------------------------------------
// XRC (IBTA XRC annex): domains and XRC SRQs

abi_struct! {
    /// `ib_uverbs_open_xrcd`. `fd` −1 opens a new anonymous domain; another `fd` names the
    /// file whose inode identifies a shared one (the library sends its device and inode in
    /// [`UroceOpenXrcd`]). `oflags`: `O_CREAT`, `O_EXCL`.
    pub struct OpenXrcd {
        /// Ignored.
        pub response: u64,
        /// File descriptor, or −1 (`u32::MAX`).
        pub fd: u32,
        /// `O_CREAT` / `O_EXCL`.
        pub oflags: u32,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_open_xrcd_resp`.
    pub struct OpenXrcdResp {
        /// XRCD handle.
        pub xrcd_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// `ib_uverbs_close_xrcd` (no response).
    pub struct CloseXrcd {
        /// XRCD handle.
        pub xrcd_handle: u32,
    }
    size = 4;
}

abi_struct! {
    /// OPEN_XRCD driver data: what identifies the file `fd` names (`st_dev`, `st_ino`), so
    /// that every open of one file shares a domain; zeros with `fd` −1.
    pub struct UroceOpenXrcd {
        /// `st_dev` of the file.
        pub dev: u64,
        /// `st_ino` of the file.
        pub ino: u64,
    }
    size = 16;
}

abi_struct! {
    /// `ib_uverbs_create_xsrq` (48 B). Driver data: [`UroceCreateSrq`]. Response:
    /// [`CreateSrqResp`].
    pub struct CreateXsrq {
        /// Ignored.
        pub response: u64,
        /// Caller's cookie.
        pub user_handle: u64,
        /// `IBV_SRQT_BASIC` (0), `IBV_SRQT_XRC` (1) or `IBV_SRQT_TM` (2).
        pub srq_type: u32,
        /// PD handle.
        pub pd_handle: u32,
        /// Requested depth.
        pub max_wr: u32,
        /// Requested SGEs per WR.
        pub max_sge: u32,
        /// Limit event threshold.
        pub srq_limit: u32,
        /// Tag matching only.
        pub max_num_tags: u32,
        /// XRC: the domain.
        pub xrcd_handle: u32,
        /// XRC: the CQ receive completions go to.
        pub cq_handle: u32,
    }
    size = 48;
}

/// `IBV_SRQT_BASIC`.
pub const SRQT_BASIC: u32 = 0;
/// `IBV_SRQT_XRC`.
pub const SRQT_XRC: u32 = 1;
/// `IBV_SRQT_TM`.
pub const SRQT_TM: u32 = 2;

// ---------------------------------------------------------------------------------------
// uroce driver-private commands

abi_struct! {
    /// UROCE_QUERY_GID request (ours, [`Command::UROCE_QUERY_GID`]).
    pub struct QueryGid {
        /// Ignored.
        pub response: u64,
        /// Port (1-based).
        pub port_num: u8,
        /// Reserved (0).
        pub reserved: [u8; 3],
        /// GID table index.
        pub index: u32,
    }
    size = 16;
}

abi_struct! {
    /// UROCE_QUERY_GID response. An empty slot is a success with `flags` lacking
    /// [`QueryGidResp::FLAG_VALID`] and a zero GID (`ibv_query_gid` returns zeros for it;
    /// `_ibv_query_gid_ex` maps it to ENODATA); an index beyond the table is EINVAL.
    pub struct QueryGidResp {
        /// The GID (for RoCEv2 over IPv4: `::ffff:a.b.c.d`).
        pub gid: [u8; 16],
        /// [`crate::verbs_consts::GidType`].
        pub gid_type: u32,
        /// `FLAG_*`.
        pub flags: u32,
    }
    size = 24;
}

impl QueryGidResp {
    /// The slot holds a GID.
    pub const FLAG_VALID: u32 = 1 << 0;
}

abi_struct! {
    /// UROCE_QUERY_PKEY request (ours, [`Command::UROCE_QUERY_PKEY`]).
    pub struct QueryPkey {
        /// Ignored.
        pub response: u64,
        /// Port (1-based).
        pub port_num: u8,
        /// Reserved (0).
        pub reserved: [u8; 3],
        /// P_Key table index.
        pub index: u32,
    }
    size = 16;
}

abi_struct! {
    /// UROCE_QUERY_PKEY response.
    pub struct QueryPkeyResp {
        /// The P_Key (host order; 0xffff = default full membership).
        pub pkey: u16,
        /// Reserved.
        pub reserved: u16,
        /// Reserved.
        pub reserved2: u32,
    }
    size = 8;
}

// ---------------------------------------------------------------------------------------
// UROCE_CM: the device's Communication Manager

/// What a [`CmCmd`] asks for (its `op`).
pub mod cm_op {
    /// Create this context's CM event channel: the response's `fd` is a `SOCK_SEQPACKET`
    /// socket from which each read returns one [`super::CmEventDesc`] (at most one channel per
    /// context; a second call gives EEXIST).
    pub const CREATE_CHANNEL: u32 = 1;
    /// Listen on `service_id` for requests to address `bind` (all zero: any). Response `id`.
    pub const LISTEN: u32 = 2;
    /// Send a REQ to `peer` (fields: service_id, local/remote GID, qpn, psn = our receive PSN,
    /// responder resources … hop limit, private data ≤ 92). Response `id`.
    pub const CONNECT: u32 = 3;
    /// Answer request `id` with a REP (qpn, psn = our receive PSN, responder resources,
    /// initiator depth, rnr retry, srq, private data ≤ 196).
    pub const ACCEPT: u32 = 4;
    /// Refuse `id` with REJ `reason` and private data ≤ 148.
    pub const REJECT: u32 = 5;
    /// Active side after the response: send the RTU.
    pub const ESTABLISH: u32 = 6;
    /// DREQ, or DREP to the peer's DREQ.
    pub const DISCONNECT: u32 = 7;
    /// Let go of `id` (a listener stops; a connection is refused or disconnected).
    pub const DESTROY: u32 = 8;
    /// Send a SIDR_REQ to `peer` for `service_id` (private data ≤ 216). Response `id`.
    pub const SIDR_REQUEST: u32 = 9;
    /// Answer SIDR request `id` (status, qpn, qkey, private data ≤ 136).
    pub const SIDR_REPLY: u32 = 10;
    /// Passive side: data arrived before the RTU (rdma_notify with IBV_EVENT_COMM_EST).
    pub const NOTIFY: u32 = 11;
}

abi_struct! {
    /// UROCE_CM request (ours, [`Command::UROCE_CM`]): one CM operation, `op` from
    /// [`cm_op`]. Fields an operation does not use must be zero. Addresses and GIDs are
    /// 16-byte IPv6 or IPv4-mapped (`::ffff:a.b.c.d`) addresses.
    pub struct CmCmd {
        /// [`cm_op`].
        pub op: u32,
        /// The CM ID the operation applies to (0 for those that create one).
        pub id: u32,
        /// Service ID (LISTEN, CONNECT, SIDR_REQUEST).
        pub service_id: u64,
        /// Our QPN (CONNECT, ACCEPT) or the QPN granted (SIDR_REPLY).
        pub qpn: u32,
        /// Our receive PSN (CONNECT, ACCEPT).
        pub psn: u32,
        /// Q_Key (SIDR_REPLY), or the ECE options with [`CmCmd::FLAG_ECE`] (CONNECT, ACCEPT).
        pub qkey: u32,
        /// Flow label (CONNECT).
        pub flow_label: u32,
        /// Peer address (CONNECT, SIDR_REQUEST).
        pub peer: [u8; 16],
        /// Address to listen on, all zero for any (LISTEN).
        pub bind: [u8; 16],
        /// Our port GID (CONNECT).
        pub local_gid: [u8; 16],
        /// The peer's port GID (CONNECT).
        pub remote_gid: [u8; 16],
        /// Responder resources (CONNECT, ACCEPT).
        pub responder_resources: u8,
        /// Initiator depth (CONNECT, ACCEPT).
        pub initiator_depth: u8,
        /// Transport retry count (CONNECT; clamped to 7).
        pub retry_count: u8,
        /// RNR retry count (CONNECT, ACCEPT; clamped to 7).
        pub rnr_retry_count: u8,
        /// IBTA MTU code (CONNECT).
        pub path_mtu: u8,
        /// 0 = RC, 1 = UC (CONNECT).
        pub transport_type: u8,
        /// 1 if the QP uses an SRQ (CONNECT, ACCEPT).
        pub srq: u8,
        /// Traffic class (CONNECT).
        pub traffic_class: u8,
        /// Hop limit (CONNECT).
        pub hop_limit: u8,
        /// SIDR_REP status (SIDR_REPLY).
        pub status: u8,
        /// REJ reason (REJECT).
        pub reason: u16,
        /// Bytes of `private_data` that count.
        pub pd_len: u16,
        /// `FLAG_*` (other bits: EINVAL).
        pub flags: u16,
        /// Private data (224 bytes, in 32-byte rows: see [`CmCmd::pd`]).
        pub private_data: [[u8; 32]; 7],
    }
    size = 336;
}

offsets!(CmCmd {
    service_id = 8,
    peer = 32,
    bind = 48,
    local_gid = 64,
    remote_gid = 80,
    responder_resources = 96,
    reason = 106,
    pd_len = 108,
    private_data = 112,
});

impl CmCmd {
    /// CONNECT, ACCEPT: the REQ/REP carries Enhanced Connection Establishment with uroce's
    /// vendor ID (`wire::cm::UROCE_ECE_VENDOR_ID`) and `qkey` as the options (the MAD's
    /// Attribute Modifier; docs/wire.md §5.6). Without it both are 0, as from a CM without
    /// ECE. Refused (EINVAL) with other operations.
    pub const FLAG_ECE: u16 = 1 << 0;

    /// The private data that counts (`pd_len` bytes, at most the field).
    pub fn pd(&self) -> &[u8] {
        let all = self.private_data.as_flattened();
        &all[..usize::from(self.pd_len).min(all.len())]
    }

    /// Set the private data; `false` (nothing set) if longer than the field.
    pub fn set_pd(&mut self, pd: &[u8]) -> bool {
        let all = self.private_data.as_flattened_mut();
        if pd.len() > all.len() {
            return false;
        }
        all.fill(0);
        all[..pd.len()].copy_from_slice(pd);
        self.pd_len = pd.len() as u16;
        true
    }
}

abi_struct! {
    /// UROCE_CM response.
    pub struct CmCmdResp {
        /// The CM ID created (LISTEN, CONNECT, SIDR_REQUEST).
        pub id: u32,
        /// The event channel (CREATE_CHANNEL).
        pub fd: u32,
    }
    size = 8;
}

/// What a [`CmEventDesc`] reports (its `kind`).
pub mod cm_event {
    /// A REQ reached listener `listen`; `id` is the new connection; `mad` holds the REQ.
    pub const CONNECT_REQUEST: u32 = 1;
    /// The REP to our REQ; `mad` holds it.
    pub const CONNECT_RESPONSE: u32 = 2;
    /// Passive side: the RTU came.
    pub const ESTABLISHED: u32 = 3;
    /// A REJ; `mad` holds it.
    pub const REJECTED: u32 = 4;
    /// No answer within the retries.
    pub const UNREACHABLE: u32 = 5;
    /// DREQ received, or our DREQ answered (or not: [`super::CmEventDesc::FLAG_TIMED_OUT`]).
    pub const DISCONNECTED: u32 = 6;
    /// Timewait is over.
    pub const TIMEWAIT_EXIT: u32 = 7;
    /// A SIDR_REQ reached listener `listen`; `mad` holds it.
    pub const SIDR_REQUEST: u32 = 8;
    /// The SIDR_REP to our request; `mad` holds it.
    pub const SIDR_REPLY: u32 = 9;
}

abi_struct! {
    /// One CM event as read from a CM event channel.
    pub struct CmEventDesc {
        /// [`cm_event`].
        pub kind: u32,
        /// The CM ID it concerns.
        pub id: u32,
        /// The listener (CONNECT_REQUEST, SIDR_REQUEST), else 0.
        pub listen: u32,
        /// `FLAG_*`.
        pub flags: u32,
        /// The peer's address (IPv6 or IPv4-mapped), when known.
        pub peer: [u8; 16],
        /// The CM MAD that caused the event, as on the wire (256 bytes in 32-byte rows: see
        /// [`CmEventDesc::mad`]), or zeros.
        pub mad: [[u8; 32]; 8],
    }
    size = 288;
}

impl CmEventDesc {
    /// DISCONNECTED: our DREQ was never answered.
    pub const FLAG_TIMED_OUT: u32 = 1 << 0;
    /// `mad` holds a MAD.
    pub const FLAG_MAD: u32 = 1 << 1;

    /// The MAD bytes, when [`CmEventDesc::FLAG_MAD`] is set.
    pub fn mad(&self) -> Option<&[u8]> {
        (self.flags & Self::FLAG_MAD != 0).then_some(self.mad.as_flattened())
    }
}

// ---------------------------------------------------------------------------------------
// uroce driver-specific data

/// Version of uroce's driver-specific data and fast-path layouts. Bumped on any change.
pub const UROCE_ABI_VERSION: u32 = 3;

abi_struct! {
    /// Where a ring lives and its geometry (library-allocated; see the module docs and
    /// [`crate::ring::RingLayout::from_desc`]).
    pub struct RingDesc {
        /// Address of the ring header in the caller's memory (64-byte aligned).
        pub addr: u64,
        /// Bytes available at `addr` (≥ [`crate::ring::RingLayout::bytes`]).
        pub len: u64,
        /// Slots (a power of two).
        pub slots: u32,
        /// Bytes per slot (a power of two ≥ 64).
        pub elem_size: u32,
    }
    size = 24;
}

abi_struct! {
    /// GET_CONTEXT driver data: the library's ABI version and its doorbell page
    /// ([`crate::doorbell`]), allocated by the library.
    pub struct UroceGetContext {
        /// Must equal [`UROCE_ABI_VERSION`] (else EINVAL: library and device disagree).
        pub abi_version: u32,
        /// Doorbell slots in the page (a multiple of 64).
        pub doorbell_slots: u32,
        /// Address of the doorbell page (64-byte aligned).
        pub doorbell_addr: u64,
        /// Bytes available at `doorbell_addr`.
        pub doorbell_len: u64,
    }
    size = 24;
}

abi_struct! {
    /// GET_CONTEXT driver response.
    pub struct UroceGetContextResp {
        /// The device's [`UROCE_ABI_VERSION`].
        pub abi_version: u32,
        /// Largest inline payload the device accepts in a send WQE
        /// (≤ [`crate::fastpath::MAX_INLINE_DATA`]).
        pub max_inline_data: u32,
        /// fd whose wake-up un-parks the engine (an eventfd: write 8 bytes of 1), or −1 if
        /// the engine never parks. Used by the library's [`crate::doorbell::Wake`].
        pub wake_fd: i32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 16;
}

abi_struct! {
    /// CREATE_CQ driver data: the CQ ring (elements are [`crate::fastpath::Cqe`],
    /// `elem_size` ≥ 64). The engine produces, the library consumes.
    pub struct UroceCreateCq {
        /// The ring.
        pub ring: RingDesc,
        /// [`UroceCreateCq::WALLCLOCK`], or 0.
        pub flags: u32,
        /// Reserved (0).
        pub reserved: u32,
    }
    size = 32;
}

impl UroceCreateCq {
    /// Every CQE of the CQ carries the wall-clock time (`CLOCK_REALTIME`, ns) the device
    /// wrote it, in [`crate::fastpath::Cqe::reserved`]`[0]` (`ibv_cq_ex`'s
    /// `read_completion_wallclock_ns`).
    pub const WALLCLOCK: u32 = 1;
}

abi_struct! {
    /// RESIZE_CQ driver data: the new ring. On success the device has moved the unconsumed
    /// CQEs of the old ring, in order, to slots 0.. of the new one (whose indices start at 0)
    /// and produces only there; the library must not poll the CQ during the command.
    pub struct UroceResizeCq {
        /// The new ring.
        pub ring: RingDesc,
    }
    size = 24;
}

abi_struct! {
    /// CREATE_QP driver data: the SQ ring (send WQEs) and the RQ ring (receive WQEs; all
    /// zero when `is_srq`), and transport options. The library produces, the engine
    /// consumes.
    pub struct UroceCreateQp {
        /// Send queue.
        pub sq: RingDesc,
        /// Receive queue.
        pub rq: RingDesc,
        /// `CREATE_QP_*` flags; other bits are refused.
        pub flags: u32,
        /// Reserved (0).
        pub reserved: u32,
    }
    size = 56;
}

/// [`UroceCreateQp::flags`]: selective repeat (docs/wire.md §5.6) for an RC QP that is not
/// XRC. Set only when the peer agreed to it: the wire is IBTA's either way, but a peer that
/// drops packets ahead of its ePSN makes every loss cost a round trip per packet.
pub const CREATE_QP_SELECTIVE_REPEAT: u32 = 1 << 0;

abi_struct! {
    /// CREATE_QP driver response.
    pub struct UroceCreateQpResp {
        /// Doorbell slot the library rings after publishing send WQEs.
        pub sq_doorbell: u32,
        /// Reserved.
        pub reserved: u32,
    }
    size = 8;
}

abi_struct! {
    /// CREATE_SRQ driver data: the SRQ ring (receive WQEs).
    pub struct UroceCreateSrq {
        /// The ring.
        pub ring: RingDesc,
    }
    size = 24;
}

// ---------------------------------------------------------------------------------------
// WR lists of POST_SEND / POST_RECV / POST_SRQ_RECV

/// The WR and SGE arrays after a post command, validated by [`Request::decode`]: every
/// WR's SGEs lie inside the SGE array, so iteration cannot fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrList<'a> {
    /// `wr_count × wqe_size` bytes.
    pub wrs: &'a [u8],
    /// `sge_count × 16` bytes.
    pub sges: &'a [u8],
    /// Bytes per WR.
    pub wqe_size: usize,
}

impl<'a> WrList<'a> {
    fn parse(
        rest: &'a [u8],
        wr_count: u32,
        sge_count: u32,
        wqe_size: u32,
        min_wqe: usize,
        num_sge_of: fn(&[u8]) -> u32,
    ) -> Result<Self> {
        let wqe_size = wqe_size as usize;
        if wqe_size < min_wqe {
            return Err(AbiError::InvalidField {
                field: "wqe_size",
                value: wqe_size as u64,
            });
        }
        let wr_bytes = (wr_count as usize)
            .checked_mul(wqe_size)
            .ok_or(AbiError::Overflow("wr array"))?;
        let sge_bytes = (sge_count as usize)
            .checked_mul(Sge::SIZE)
            .ok_or(AbiError::Overflow("sge array"))?;
        let need = wr_bytes
            .checked_add(sge_bytes)
            .ok_or(AbiError::Overflow("post payload"))?;
        if rest.len() < need {
            return Err(AbiError::Truncated {
                what: "post WR/SGE arrays",
                need,
                have: rest.len(),
            });
        }
        let (wrs, rest) = rest.split_at(wr_bytes);
        let (sges, tail) = rest.split_at(sge_bytes);
        require_zero(tail, "bytes after the SGE array")?;
        let mut used: u64 = 0;
        for wr in wrs.chunks_exact(wqe_size) {
            used += u64::from(num_sge_of(wr));
            if used > u64::from(sge_count) {
                return Err(AbiError::InvalidField {
                    field: "num_sge",
                    value: used,
                });
            }
        }
        Ok(WrList {
            wrs,
            sges,
            wqe_size,
        })
    }

    /// Number of WRs.
    pub fn len(&self) -> usize {
        self.wrs.len().checked_div(self.wqe_size).unwrap_or(0)
    }

    /// Whether there are no WRs (a "null post", rxe's SQ doorbell).
    pub fn is_empty(&self) -> bool {
        self.wrs.is_empty()
    }

    fn items<W: FromBytes + 'a>(
        &self,
        num_sge_of: fn(&W) -> u32,
    ) -> impl Iterator<Item = (W, SgeList<'a>)> + 'a {
        let sges = self.sges;
        let mut next = 0usize;
        let wqe = self.wqe_size.max(1);
        self.wrs.chunks_exact(wqe).filter_map(move |chunk| {
            let (wr, _) = W::read_from_prefix(chunk).ok()?;
            let n = num_sge_of(&wr) as usize * Sge::SIZE;
            let list = sges.get(next..next.checked_add(n)?).unwrap_or(&[]);
            next = next.saturating_add(n);
            Some((wr, SgeList(list)))
        })
    }

    /// The send WRs with their SGEs (POST_SEND).
    pub fn send_wrs(&self) -> impl Iterator<Item = (SendWr, SgeList<'a>)> + 'a {
        self.items::<SendWr>(|w| w.num_sge)
    }

    /// The receive WRs with their SGEs (POST_RECV, POST_SRQ_RECV).
    pub fn recv_wrs(&self) -> impl Iterator<Item = (RecvWr, SgeList<'a>)> + 'a {
        self.items::<RecvWr>(|w| w.num_sge)
    }
}

/// A run of 16-byte SGEs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgeList<'a>(pub &'a [u8]);

impl<'a> SgeList<'a> {
    /// The SGEs.
    pub fn iter(&self) -> impl Iterator<Item = Sge> + 'a {
        self.0
            .chunks_exact(Sge::SIZE)
            .filter_map(|c| Sge::read_from_bytes(c).ok())
    }

    /// Number of SGEs.
    pub fn len(&self) -> usize {
        self.0.len() / Sge::SIZE
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.len() < Sge::SIZE
    }
}

// ---------------------------------------------------------------------------------------
// Typed requests

/// A fully decoded command: core struct, uroce driver data, and for posts the WR lists.
///
/// Each variant is named after its command and holds the structs above. One slow-path
/// command is decoded at a time, on the stack: the CM command's 336 bytes beside the others'
/// few dozen cost nothing worth a box.
#[allow(missing_docs, clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    GetContext(GetContext, UroceGetContext),
    QueryDevice(QueryDevice),
    QueryPort(QueryPort),
    AllocPd(AllocPd),
    DeallocPd(DeallocPd),
    CreateAh(CreateAh),
    DestroyAh(DestroyAh),
    RegMr(RegMr),
    ReregMr(ReregMr),
    DeregMr(DeregMr),
    AllocMw(AllocMw),
    DeallocMw(DeallocMw),
    CreateCompChannel(CreateCompChannel),
    CreateCq(CreateCq, UroceCreateCq),
    ResizeCq(ResizeCq, UroceResizeCq),
    DestroyCq(DestroyCq),
    PollCq(PollCq),
    ReqNotifyCq(ReqNotifyCq),
    CreateQp(CreateQp, UroceCreateQp),
    QueryQp(QueryQp),
    ModifyQp(ModifyQp),
    DestroyQp(DestroyQp),
    PostSend(PostSend, WrList<'a>),
    PostRecv(PostRecv, WrList<'a>),
    CreateSrq(CreateSrq, UroceCreateSrq),
    ModifySrq(ModifySrq),
    QuerySrq(QuerySrq),
    DestroySrq(DestroySrq),
    PostSrqRecv(PostSrqRecv, WrList<'a>),
    OpenXrcd(OpenXrcd, UroceOpenXrcd),
    CloseXrcd(CloseXrcd),
    CreateXsrq(CreateXsrq, UroceCreateSrq),
    QueryGid(QueryGid),
    Cm(CmCmd),
    QueryPkey(QueryPkey),
}

fn require_zero(bytes: &[u8], field: &'static str) -> Result<()> {
    match bytes.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(i) => Err(AbiError::InvalidField {
            field,
            value: i as u64,
        }),
    }
}

fn core<'p, T: FromBytes>(payload: &'p [u8], what: &'static str) -> Result<(T, &'p [u8])> {
    T::read_from_prefix(payload).map_err(|_| AbiError::RequestTooShort {
        what,
        need: core::mem::size_of::<T>(),
        have: payload.len(),
    })
}

fn driver<T: FromBytes>(rest: &[u8], what: &'static str) -> Result<T> {
    let (v, tail) = T::read_from_prefix(rest).map_err(|_| AbiError::Truncated {
        what,
        need: core::mem::size_of::<T>(),
        have: rest.len(),
    })?;
    require_zero(tail, "driver data beyond the uroce struct")?;
    Ok(v)
}

fn no_driver(rest: &[u8]) -> Result<()> {
    require_zero(rest, "driver data (none defined)")
}

impl<'a> Request<'a> {
    /// The command number.
    pub fn command(&self) -> Command {
        match self {
            Request::GetContext(..) => Command::GET_CONTEXT,
            Request::QueryDevice(_) => Command::QUERY_DEVICE,
            Request::QueryPort(_) => Command::QUERY_PORT,
            Request::AllocPd(_) => Command::ALLOC_PD,
            Request::DeallocPd(_) => Command::DEALLOC_PD,
            Request::CreateAh(_) => Command::CREATE_AH,
            Request::DestroyAh(_) => Command::DESTROY_AH,
            Request::RegMr(_) => Command::REG_MR,
            Request::ReregMr(_) => Command::REREG_MR,
            Request::AllocMw(_) => Command::ALLOC_MW,
            Request::DeallocMw(_) => Command::DEALLOC_MW,
            Request::DeregMr(_) => Command::DEREG_MR,
            Request::CreateCompChannel(_) => Command::CREATE_COMP_CHANNEL,
            Request::CreateCq(..) => Command::CREATE_CQ,
            Request::ResizeCq(..) => Command::RESIZE_CQ,
            Request::DestroyCq(_) => Command::DESTROY_CQ,
            Request::PollCq(_) => Command::POLL_CQ,
            Request::ReqNotifyCq(_) => Command::REQ_NOTIFY_CQ,
            Request::CreateQp(..) => Command::CREATE_QP,
            Request::QueryQp(_) => Command::QUERY_QP,
            Request::ModifyQp(_) => Command::MODIFY_QP,
            Request::DestroyQp(_) => Command::DESTROY_QP,
            Request::PostSend(..) => Command::POST_SEND,
            Request::PostRecv(..) => Command::POST_RECV,
            Request::CreateSrq(..) => Command::CREATE_SRQ,
            Request::ModifySrq(_) => Command::MODIFY_SRQ,
            Request::QuerySrq(_) => Command::QUERY_SRQ,
            Request::DestroySrq(_) => Command::DESTROY_SRQ,
            Request::PostSrqRecv(..) => Command::POST_SRQ_RECV,
            Request::OpenXrcd(..) => Command::OPEN_XRCD,
            Request::CloseXrcd(_) => Command::CLOSE_XRCD,
            Request::CreateXsrq(..) => Command::CREATE_XSRQ,
            Request::QueryGid(_) => Command::UROCE_QUERY_GID,
            Request::Cm(_) => Command::UROCE_CM,
            Request::QueryPkey(_) => Command::UROCE_QUERY_PKEY,
        }
    }

    /// `(core request bytes, uroce driver request bytes)` of a supported legacy command
    /// (for posts, the fixed part only: the WR and SGE arrays follow). `None` for commands
    /// uroce does not implement. What `uroce trace` needs to split a request.
    pub fn request_sizes(command: Command) -> Option<(usize, usize)> {
        Some(match command {
            Command::GET_CONTEXT => (GetContext::SIZE, UroceGetContext::SIZE),
            Command::QUERY_DEVICE => (QueryDevice::SIZE, 0),
            Command::QUERY_PORT => (QueryPort::SIZE, 0),
            Command::ALLOC_PD => (AllocPd::SIZE, 0),
            Command::DEALLOC_PD => (DeallocPd::SIZE, 0),
            Command::CREATE_AH => (CreateAh::SIZE, 0),
            Command::DESTROY_AH => (DestroyAh::SIZE, 0),
            Command::REG_MR => (RegMr::SIZE, 0),
            Command::REREG_MR => (ReregMr::SIZE, 0),
            Command::ALLOC_MW => (AllocMw::SIZE, 0),
            Command::DEALLOC_MW => (DeallocMw::SIZE, 0),
            Command::DEREG_MR => (DeregMr::SIZE, 0),
            Command::CREATE_COMP_CHANNEL => (CreateCompChannel::SIZE, 0),
            Command::CREATE_CQ => (CreateCq::SIZE, UroceCreateCq::SIZE),
            Command::RESIZE_CQ => (ResizeCq::SIZE, UroceResizeCq::SIZE),
            Command::DESTROY_CQ => (DestroyCq::SIZE, 0),
            Command::POLL_CQ => (PollCq::SIZE, 0),
            Command::REQ_NOTIFY_CQ => (ReqNotifyCq::SIZE, 0),
            Command::CREATE_QP => (CreateQp::SIZE, UroceCreateQp::SIZE),
            Command::QUERY_QP => (QueryQp::SIZE, 0),
            Command::MODIFY_QP => (ModifyQp::SIZE, 0),
            Command::DESTROY_QP => (DestroyQp::SIZE, 0),
            Command::POST_SEND => (PostSend::SIZE, 0),
            Command::POST_RECV => (PostRecv::SIZE, 0),
            Command::CREATE_SRQ => (CreateSrq::SIZE, UroceCreateSrq::SIZE),
            Command::MODIFY_SRQ => (ModifySrq::SIZE, 0),
            Command::QUERY_SRQ => (QuerySrq::SIZE, 0),
            Command::DESTROY_SRQ => (DestroySrq::SIZE, 0),
            Command::POST_SRQ_RECV => (PostSrqRecv::SIZE, 0),
            Command::OPEN_XRCD => (OpenXrcd::SIZE, UroceOpenXrcd::SIZE),
            Command::CLOSE_XRCD => (CloseXrcd::SIZE, 0),
            Command::CREATE_XSRQ => (CreateXsrq::SIZE, UroceCreateSrq::SIZE),
            Command::UROCE_QUERY_GID => (QueryGid::SIZE, 0),
            Command::UROCE_CM => (CmCmd::SIZE, 0),
            Command::UROCE_QUERY_PKEY => (QueryPkey::SIZE, 0),
            _ => return None,
        })
    }

    /// `(core response bytes, uroce driver response bytes)` this command answers with; the
    /// request must offer at least their sum. POLL_CQ's entries come on top
    /// ([`Request::response_capacity`]).
    pub fn response_sizes(command: Command) -> Option<(usize, usize)> {
        Some(match command {
            Command::GET_CONTEXT => (GetContextResp::SIZE, UroceGetContextResp::SIZE),
            Command::QUERY_DEVICE => (QueryDeviceResp::SIZE, 0),
            Command::QUERY_PORT => (QueryPortResp::SIZE, 0),
            Command::ALLOC_PD => (AllocPdResp::SIZE, 0),
            Command::CREATE_AH => (CreateAhResp::SIZE, 0),
            Command::REG_MR => (RegMrResp::SIZE, 0),
            Command::REREG_MR => (ReregMrResp::SIZE, 0),
            Command::ALLOC_MW => (AllocMwResp::SIZE, 0),
            Command::CREATE_COMP_CHANNEL => (CreateCompChannelResp::SIZE, 0),
            Command::CREATE_CQ => (CreateCqResp::SIZE, 0),
            Command::RESIZE_CQ => (ResizeCqResp::SIZE, 0),
            Command::DESTROY_CQ => (DestroyCqResp::SIZE, 0),
            Command::POLL_CQ => (PollCqResp::SIZE, 0),
            Command::CREATE_QP => (CreateQpResp::SIZE, UroceCreateQpResp::SIZE),
            Command::QUERY_QP => (QueryQpResp::SIZE, 0),
            Command::DESTROY_QP => (DestroyQpResp::SIZE, 0),
            Command::POST_SEND | Command::POST_RECV | Command::POST_SRQ_RECV => (PostResp::SIZE, 0),
            Command::CREATE_SRQ | Command::CREATE_XSRQ => (CreateSrqResp::SIZE, 0),
            Command::OPEN_XRCD => (OpenXrcdResp::SIZE, 0),
            Command::QUERY_SRQ => (QuerySrqResp::SIZE, 0),
            Command::DESTROY_SRQ => (DestroySrqResp::SIZE, 0),
            Command::UROCE_QUERY_GID => (QueryGidResp::SIZE, 0),
            Command::UROCE_CM => (CmCmdResp::SIZE, 0),
            Command::UROCE_QUERY_PKEY => (QueryPkeyResp::SIZE, 0),
            Command::DEALLOC_PD
            | Command::DESTROY_AH
            | Command::DEREG_MR
            | Command::DEALLOC_MW
            | Command::REQ_NOTIFY_CQ
            | Command::MODIFY_QP
            | Command::MODIFY_SRQ
            | Command::CLOSE_XRCD => (0, 0),
            _ => return None,
        })
    }

    /// The response capacity the library offers for this request (what [`Request::encode`]
    /// puts in `out_words`): core + driver response, plus `ne` work completions for POLL_CQ,
    /// capped at what a legacy header can express ([`MAX_LEGACY_RESPONSE_BYTES`]). So a
    /// POLL_CQ returns at most [`PollCq::max_entries`] of the capacity, whatever `ne` says
    /// (rdma-core's `ibv_cmd_poll_cq` would silently truncate `out_words` instead).
    pub fn response_capacity(&self) -> usize {
        let (c, d) = Self::response_sizes(self.command()).unwrap_or((0, 0));
        let extra = match self {
            Request::PollCq(p) => (p.ne as usize).saturating_mul(Wc::SIZE),
            _ => 0,
        };
        c.saturating_add(d)
            .saturating_add(extra)
            .min(MAX_LEGACY_RESPONSE_BYTES)
    }

    /// Decode a parsed frame into a typed request, checking what `verify_hdr` checks
    /// (core struct present: ENOSPC; response capacity ≥ the core response: ENOSPC) plus
    /// uroce's driver data (present: EINVAL; driver response capacity: EINVAL) and the
    /// structure of post WR lists (EINVAL). Extended commands and commands uroce does not
    /// implement are EOPNOTSUPP. Semantic checks (handles, states, limits) are the control
    /// plane's.
    pub fn decode(frame: &Frame<'a>) -> Result<Request<'a>> {
        let cmd = frame.command;
        if frame.is_extended() {
            // No extended command is implemented; rdma-core falls back to the legacy form
            // (or the C library's query_device_ex falls back on EOPNOTSUPP).
            return Err(if cmd.is_known() {
                AbiError::Unsupported(cmd)
            } else {
                AbiError::UnknownCommand {
                    number: cmd.0,
                    extended: true,
                }
            });
        }
        let (core_resp, drv_resp) = match Self::response_sizes(cmd) {
            Some(s) => s,
            None if cmd.is_known() => return Err(AbiError::Unsupported(cmd)),
            None => {
                return Err(AbiError::UnknownCommand {
                    number: cmd.0,
                    extended: false,
                })
            }
        };
        let cap = frame.response_capacity();
        if cap < core_resp {
            return Err(AbiError::ResponseTooSmall {
                what: "core response",
                need: core_resp,
                have: cap,
            });
        }
        if cap < core_resp + drv_resp {
            return Err(AbiError::InvalidField {
                field: "out_words (driver response)",
                value: cap as u64,
            });
        }
        let p = frame.core;
        let req = match cmd {
            Command::GET_CONTEXT => {
                let (c, rest) = core(p, "ib_uverbs_get_context")?;
                Request::GetContext(c, driver(rest, "uroce_get_context")?)
            }
            Command::QUERY_DEVICE => {
                let (c, rest) = core(p, "ib_uverbs_query_device")?;
                no_driver(rest)?;
                Request::QueryDevice(c)
            }
            Command::QUERY_PORT => {
                let (c, rest) = core(p, "ib_uverbs_query_port")?;
                no_driver(rest)?;
                Request::QueryPort(c)
            }
            Command::ALLOC_PD => {
                let (c, rest) = core(p, "ib_uverbs_alloc_pd")?;
                no_driver(rest)?;
                Request::AllocPd(c)
            }
            Command::DEALLOC_PD => {
                let (c, rest) = core(p, "ib_uverbs_dealloc_pd")?;
                no_driver(rest)?;
                Request::DeallocPd(c)
            }
            Command::CREATE_AH => {
                let (c, rest) = core(p, "ib_uverbs_create_ah")?;
                no_driver(rest)?;
                Request::CreateAh(c)
            }
            Command::DESTROY_AH => {
                let (c, rest) = core(p, "ib_uverbs_destroy_ah")?;
                no_driver(rest)?;
                Request::DestroyAh(c)
            }
            Command::REG_MR => {
                let (c, rest) = core(p, "ib_uverbs_reg_mr")?;
                no_driver(rest)?;
                Request::RegMr(c)
            }
            Command::REREG_MR => {
                let (c, rest) = core(p, "ib_uverbs_rereg_mr")?;
                no_driver(rest)?;
                Request::ReregMr(c)
            }
            Command::ALLOC_MW => {
                let (c, rest) = core(p, "ib_uverbs_alloc_mw")?;
                no_driver(rest)?;
                Request::AllocMw(c)
            }
            Command::DEALLOC_MW => {
                let (c, rest) = core(p, "ib_uverbs_dealloc_mw")?;
                no_driver(rest)?;
                Request::DeallocMw(c)
            }
            Command::DEREG_MR => {
                let (c, rest) = core(p, "ib_uverbs_dereg_mr")?;
                no_driver(rest)?;
                Request::DeregMr(c)
            }
            Command::CREATE_COMP_CHANNEL => {
                let (c, rest) = core(p, "ib_uverbs_create_comp_channel")?;
                no_driver(rest)?;
                Request::CreateCompChannel(c)
            }
            Command::CREATE_CQ => {
                let (c, rest) = core(p, "ib_uverbs_create_cq")?;
                Request::CreateCq(c, driver(rest, "uroce_create_cq")?)
            }
            Command::RESIZE_CQ => {
                let (c, rest) = core(p, "ib_uverbs_resize_cq")?;
                Request::ResizeCq(c, driver(rest, "uroce_resize_cq")?)
            }
            Command::DESTROY_CQ => {
                let (c, rest) = core(p, "ib_uverbs_destroy_cq")?;
                no_driver(rest)?;
                Request::DestroyCq(c)
            }
            Command::POLL_CQ => {
                let (c, rest) = core(p, "ib_uverbs_poll_cq")?;
                no_driver(rest)?;
                Request::PollCq(c)
            }
            Command::REQ_NOTIFY_CQ => {
                let (c, rest) = core(p, "ib_uverbs_req_notify_cq")?;
                no_driver(rest)?;
                Request::ReqNotifyCq(c)
            }
            Command::CREATE_QP => {
                let (c, rest) = core(p, "ib_uverbs_create_qp")?;
                Request::CreateQp(c, driver(rest, "uroce_create_qp")?)
            }
            Command::QUERY_QP => {
                let (c, rest) = core(p, "ib_uverbs_query_qp")?;
                no_driver(rest)?;
                Request::QueryQp(c)
            }
            Command::MODIFY_QP => {
                let (c, rest) = core(p, "ib_uverbs_modify_qp")?;
                no_driver(rest)?;
                Request::ModifyQp(c)
            }
            Command::DESTROY_QP => {
                let (c, rest) = core(p, "ib_uverbs_destroy_qp")?;
                no_driver(rest)?;
                Request::DestroyQp(c)
            }
            Command::POST_SEND => {
                let (c, rest): (PostSend, _) = core(p, "ib_uverbs_post_send")?;
                let list = WrList::parse(
                    rest,
                    c.wr_count,
                    c.sge_count,
                    c.wqe_size,
                    SendWr::SIZE,
                    |w| {
                        SendWr::read_from_prefix(w)
                            .map(|(w, _)| w.num_sge)
                            .unwrap_or(u32::MAX)
                    },
                )?;
                Request::PostSend(c, list)
            }
            Command::POST_RECV => {
                let (c, rest): (PostRecv, _) = core(p, "ib_uverbs_post_recv")?;
                let list = WrList::parse(
                    rest,
                    c.wr_count,
                    c.sge_count,
                    c.wqe_size,
                    RecvWr::SIZE,
                    recv_num_sge,
                )?;
                Request::PostRecv(c, list)
            }
            Command::CREATE_SRQ => {
                let (c, rest) = core(p, "ib_uverbs_create_srq")?;
                Request::CreateSrq(c, driver(rest, "uroce_create_srq")?)
            }
            Command::OPEN_XRCD => {
                let (c, rest) = core(p, "ib_uverbs_open_xrcd")?;
                Request::OpenXrcd(c, driver(rest, "uroce_open_xrcd")?)
            }
            Command::CLOSE_XRCD => {
                let (c, rest) = core(p, "ib_uverbs_close_xrcd")?;
                no_driver(rest)?;
                Request::CloseXrcd(c)
            }
            Command::CREATE_XSRQ => {
                let (c, rest) = core(p, "ib_uverbs_create_xsrq")?;
                Request::CreateXsrq(c, driver(rest, "uroce_create_srq")?)
            }
            Command::MODIFY_SRQ => {
                let (c, rest) = core(p, "ib_uverbs_modify_srq")?;
                no_driver(rest)?;
                Request::ModifySrq(c)
            }
            Command::QUERY_SRQ => {
                let (c, rest) = core(p, "ib_uverbs_query_srq")?;
                no_driver(rest)?;
                Request::QuerySrq(c)
            }
            Command::DESTROY_SRQ => {
                let (c, rest) = core(p, "ib_uverbs_destroy_srq")?;
                no_driver(rest)?;
                Request::DestroySrq(c)
            }
            Command::POST_SRQ_RECV => {
                let (c, rest): (PostSrqRecv, _) = core(p, "ib_uverbs_post_srq_recv")?;
                let list = WrList::parse(
                    rest,
                    c.wr_count,
                    c.sge_count,
                    c.wqe_size,
                    RecvWr::SIZE,
                    recv_num_sge,
                )?;
                Request::PostSrqRecv(c, list)
            }
            Command::UROCE_QUERY_GID => {
                let (c, rest) = core(p, "uroce_query_gid")?;
                no_driver(rest)?;
                Request::QueryGid(c)
            }
            Command::UROCE_QUERY_PKEY => {
                let (c, rest) = core(p, "uroce_query_pkey")?;
                no_driver(rest)?;
                Request::QueryPkey(c)
            }
            Command::UROCE_CM => {
                let (c, rest) = core(p, "uroce_cm")?;
                no_driver(rest)?;
                Request::Cm(c)
            }
            other => return Err(AbiError::Unsupported(other)),
        };
        Ok(req)
    }

    /// Encode as a legacy request message into `out` (replacing its contents), offering
    /// [`Request::response_capacity`] bytes of response. For posts, the WR list's bytes are
    /// written as they are (the core struct's counts must describe them), then zero-padded
    /// to a whole 4-byte word.
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<()> {
        let mut core_bytes: Vec<u8> = Vec::new();
        let mut push = |parts: &[&[u8]]| {
            for p in parts {
                core_bytes.extend_from_slice(p);
            }
        };
        match self {
            Request::GetContext(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::QueryDevice(c) => push(&[c.as_bytes()]),
            Request::QueryPort(c) => push(&[c.as_bytes()]),
            Request::AllocPd(c) => push(&[c.as_bytes()]),
            Request::DeallocPd(c) => push(&[c.as_bytes()]),
            Request::CreateAh(c) => push(&[c.as_bytes()]),
            Request::DestroyAh(c) => push(&[c.as_bytes()]),
            Request::RegMr(c) => push(&[c.as_bytes()]),
            Request::ReregMr(c) => push(&[c.as_bytes()]),
            Request::AllocMw(c) => push(&[c.as_bytes()]),
            Request::DeallocMw(c) => push(&[c.as_bytes()]),
            Request::DeregMr(c) => push(&[c.as_bytes()]),
            Request::CreateCompChannel(c) => push(&[c.as_bytes()]),
            Request::CreateCq(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::ResizeCq(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::DestroyCq(c) => push(&[c.as_bytes()]),
            Request::PollCq(c) => push(&[c.as_bytes()]),
            Request::ReqNotifyCq(c) => push(&[c.as_bytes()]),
            Request::CreateQp(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::QueryQp(c) => push(&[c.as_bytes()]),
            Request::ModifyQp(c) => push(&[c.as_bytes()]),
            Request::DestroyQp(c) => push(&[c.as_bytes()]),
            Request::PostSend(c, l) => push(&[c.as_bytes(), l.wrs, l.sges]),
            Request::PostRecv(c, l) => push(&[c.as_bytes(), l.wrs, l.sges]),
            Request::CreateSrq(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::ModifySrq(c) => push(&[c.as_bytes()]),
            Request::QuerySrq(c) => push(&[c.as_bytes()]),
            Request::DestroySrq(c) => push(&[c.as_bytes()]),
            Request::PostSrqRecv(c, l) => push(&[c.as_bytes(), l.wrs, l.sges]),
            Request::OpenXrcd(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::CloseXrcd(c) => push(&[c.as_bytes()]),
            Request::CreateXsrq(c, d) => push(&[c.as_bytes(), d.as_bytes()]),
            Request::QueryGid(c) => push(&[c.as_bytes()]),
            Request::Cm(c) => push(&[c.as_bytes()]),
            Request::QueryPkey(c) => push(&[c.as_bytes()]),
        }
        // A WR array with an odd `wqe_size` can leave the message short of a 4-byte word;
        // pad with zeros, which the decoder accepts after the SGE array.
        core_bytes.resize(core_bytes.len().next_multiple_of(4), 0);
        encode_legacy(
            self.command(),
            &core_bytes,
            &[],
            self.response_capacity(),
            out,
        )
    }
}

fn recv_num_sge(w: &[u8]) -> u32 {
    RecvWr::read_from_prefix(w)
        .map(|(w, _)| w.num_sge)
        .unwrap_or(u32::MAX)
}

/// Parse a request message completely: framing ([`Frame::parse`]) then payload
/// ([`Request::decode`]).
pub fn decode_request(bytes: &[u8]) -> Result<(Frame<'_>, Request<'_>)> {
    let frame = Frame::parse(bytes)?;
    let req = Request::decode(&frame)?;
    Ok((frame, req))
}

/// Read a `T` from the front of `bytes`, returning it and the rest (library side: split a
/// response into core struct and driver data).
pub fn read_prefix<'b, T: FromBytes>(bytes: &'b [u8], what: &'static str) -> Result<(T, &'b [u8])> {
    T::read_from_prefix(bytes).map_err(|_| AbiError::Truncated {
        what,
        need: core::mem::size_of::<T>(),
        have: bytes.len(),
    })
}

/// Split a POLL_CQ response into its header and work completions (library side). The count
/// must match the bytes present.
pub fn decode_poll_cq_resp(bytes: &[u8]) -> Result<(PollCqResp, impl Iterator<Item = Wc> + '_)> {
    let (hdr, rest): (PollCqResp, _) = read_prefix(bytes, "ib_uverbs_poll_cq_resp")?;
    let need = (hdr.count as usize)
        .checked_mul(Wc::SIZE)
        .ok_or(AbiError::Overflow("poll_cq count"))?;
    if rest.len() != need {
        return Err(AbiError::LengthMismatch {
            declared: need,
            actual: rest.len(),
        });
    }
    Ok((
        hdr,
        rest.chunks_exact(Wc::SIZE)
            .filter_map(|c| Wc::read_from_bytes(c).ok()),
    ))
}

/// Build a POLL_CQ response: header + completions (control plane side).
pub fn encode_poll_cq_resp(wcs: &[Wc], out: &mut Vec<u8>) {
    let hdr = PollCqResp {
        count: u32::try_from(wcs.len()).unwrap_or(u32::MAX),
        reserved: 0,
    };
    out.clear();
    out.extend_from_slice(hdr.as_bytes());
    out.extend_from_slice(wcs.as_bytes());
}
