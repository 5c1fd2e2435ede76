//! The C structures of rdma-core 44's `<infiniband/verbs.h>` that cross this library's
//! boundary, as `#[repr(C)]` mirrors with compile-time size and offset assertions.
//!
//! Every number asserted here comes from docs/compat.md §5 (a C program's `sizeof`/`offsetof`
//! against the Debian bookworm headers, x86_64). The ones the *inline* functions in
//! `verbs.h` bake into application binaries matter most, because a mismatch there is not an
//! error but a call through a wrong pointer: `ibv_context.ops.poll_cq` at +96,
//! `req_notify_cq` +104, `post_srq_recv` +168, `post_send` +208, `post_recv` +216,
//! `abi_compat` +320, and the `verbs_context` (648 B) that sits right before the context, with
//! `sz` at ctx−8 and `query_port` at ctx−320 (§3).
//!
//! Names are the C names so that the code reads against `verbs.h`.
#![allow(non_camel_case_types)]
// C mirrors: several hold pthread objects or unions, which have no meaningful Debug.
#![allow(missing_debug_implementations)]

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};

use libc::{pthread_cond_t, pthread_mutex_t};

/// An op slot we never fill (or fill only later): any function pointer, or NULL.
pub type AnyFn = Option<unsafe extern "C" fn()>;

/// `struct _ibv_device_ops`: two dummy pointers kept for ABI compatibility.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_ops {
    /// Unused.
    pub _dummy1: AnyFn,
    /// Unused.
    pub _dummy2: AnyFn,
}

/// `struct ibv_device` (664 B): everything an application sees of a device (§4).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    /// Unused.
    pub _ops: ibv_device_ops,
    /// `enum ibv_node_type`: `IBV_NODE_CA` for RoCE.
    pub node_type: c_int,
    /// `enum ibv_transport_type`: `IBV_TRANSPORT_IB` for RoCE.
    pub transport_type: c_int,
    /// Kernel device name (`uroce0`), what `ibv_get_device_name` returns.
    pub name: [c_char; 64],
    /// uverbs device name (`uverbs0`).
    pub dev_name: [c_char; 64],
    /// sysfs path of the uverbs device.
    pub dev_path: [c_char; 256],
    /// sysfs path of the IB device; ibv_devinfo hands it to `ibv_read_sysfs_file`.
    pub ibdev_path: [c_char; 256],
}

/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `ibv_context_ops.req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `ibv_context_ops.post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_context_ops` (256 B). Only the data-path slots are live in rdma-core 44; the
/// `_compat_*` ones are ABI padding.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_context_ops {
    pub _compat_query_device: AnyFn,
    pub _compat_query_port: AnyFn,
    pub _compat_alloc_pd: AnyFn,
    pub _compat_dealloc_pd: AnyFn,
    pub _compat_reg_mr: AnyFn,
    pub _compat_rereg_mr: AnyFn,
    pub _compat_dereg_mr: AnyFn,
    /// Called by the inline `ibv_alloc_mw` (which checks it for NULL).
    pub alloc_mw: Option<unsafe extern "C" fn(*mut ibv_pd, c_uint) -> *mut ibv_mw>,
    /// Called by the inline `ibv_bind_mw` (type 1 windows).
    pub bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_mw, *mut ibv_mw_bind) -> c_int>,
    /// Called by the inline `ibv_dealloc_mw`.
    pub dealloc_mw: Option<unsafe extern "C" fn(*mut ibv_mw) -> c_int>,
    pub _compat_create_cq: AnyFn,
    /// Called by the inline `ibv_poll_cq`; never NULL-checked.
    pub poll_cq: Option<PollCqFn>,
    /// Called by the inline `ibv_req_notify_cq`; never NULL-checked.
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: AnyFn,
    pub _compat_resize_cq: AnyFn,
    pub _compat_destroy_cq: AnyFn,
    pub _compat_create_srq: AnyFn,
    pub _compat_modify_srq: AnyFn,
    pub _compat_query_srq: AnyFn,
    pub _compat_destroy_srq: AnyFn,
    /// Called by the inline `ibv_post_srq_recv`; never NULL-checked.
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: AnyFn,
    pub _compat_query_qp: AnyFn,
    pub _compat_modify_qp: AnyFn,
    pub _compat_destroy_qp: AnyFn,
    /// Called by the inline `ibv_post_send`; never NULL-checked.
    pub post_send: Option<PostSendFn>,
    /// Called by the inline `ibv_post_recv`; never NULL-checked.
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: AnyFn,
    pub _compat_destroy_ah: AnyFn,
    pub _compat_attach_mcast: AnyFn,
    pub _compat_detach_mcast: AnyFn,
    pub _compat_async_event: AnyFn,
}

/// `struct ibv_context` (328 B).
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: pthread_mutex_t,
    /// `__VERBS_ABI_IS_EXTENDED` (`UINTPTR_MAX`) says a `verbs_context` precedes this struct.
    pub abi_compat: *mut c_void,
}

/// `verbs_context.query_port`: called by the inline `ibv_query_port` with `port_attr_len` 52.
pub type QueryPortFn =
    unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, usize) -> c_int;
/// `verbs_context.create_cq_ex`.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq;
/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
/// `verbs_context.query_device_ex`: called by the inline `ibv_query_device_ex` with 400.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;

/// `verbs_context.get_srq_num`: called by the inline `ibv_get_srq_num`.
pub type GetSrqNumFn = unsafe extern "C" fn(*mut ibv_srq, *mut u32) -> c_int;
/// `verbs_context.create_srq_ex`: called by the inline `ibv_create_srq_ex` for anything
/// but a basic SRQ of a PD.
pub type CreateSrqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_srq_init_attr_ex) -> *mut ibv_srq;
/// `verbs_context.open_xrcd`: called by the inline `ibv_open_xrcd`.
pub type OpenXrcdFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd;
/// `verbs_context.close_xrcd`: called by the inline `ibv_close_xrcd`.
pub type CloseXrcdFn = unsafe extern "C" fn(*mut ibv_xrcd) -> c_int;

/// `verbs_context.alloc_parent_domain`: called by the inline `ibv_alloc_parent_domain`.
pub type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;
/// `ibv_parent_domain_init_attr.alloc`.
pub type PdAllocFn =
    unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void;
/// `ibv_parent_domain_init_attr.free`.
pub type PdFreeFn = unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64);

/// `struct ibv_parent_domain_init_attr` (48 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut c_void,
    pub comp_mask: u32,
    pub alloc: Option<PdAllocFn>,
    pub free: Option<PdFreeFn>,
    pub pd_context: *mut c_void,
}

/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS: u32 = 1;
/// `IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`.
pub const IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT: u32 = 1 << 1;
/// `IBV_ALLOCATOR_USE_DEFAULT`: what an allocator returns to let the library allocate.
pub const IBV_ALLOCATOR_USE_DEFAULT: usize = usize::MAX;

/// `struct ibv_xrcd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_xrcd {
    pub context: *mut ibv_context,
}

/// `struct ibv_xrcd_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_xrcd_init_attr {
    pub comp_mask: u32,
    pub fd: c_int,
    pub oflags: c_int,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex` (64 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut ibv_xrcd,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `IBV_XRCD_INIT_ATTR_FD`.
pub const IBV_XRCD_INIT_ATTR_FD: u32 = 1;
/// `IBV_XRCD_INIT_ATTR_OFLAGS`.
pub const IBV_XRCD_INIT_ATTR_OFLAGS: u32 = 1 << 1;
/// `IBV_SRQ_INIT_ATTR_TYPE`.
pub const IBV_SRQ_INIT_ATTR_TYPE: u32 = 1;
/// `IBV_SRQ_INIT_ATTR_PD`.
pub const IBV_SRQ_INIT_ATTR_PD: u32 = 1 << 1;
/// `IBV_SRQ_INIT_ATTR_XRCD`.
pub const IBV_SRQ_INIT_ATTR_XRCD: u32 = 1 << 2;
/// `IBV_SRQ_INIT_ATTR_CQ`.
pub const IBV_SRQ_INIT_ATTR_CQ: u32 = 1 << 3;
/// `IBV_SRQ_INIT_ATTR_TM`.
pub const IBV_SRQ_INIT_ATTR_TM: u32 = 1 << 4;
/// `IBV_SRQT_BASIC`.
pub const IBV_SRQT_BASIC: u32 = 0;
/// `IBV_SRQT_XRC`.
pub const IBV_SRQT_XRC: u32 = 1;
/// `IBV_QP_INIT_ATTR_XRCD`.
pub const IBV_QP_INIT_ATTR_XRCD: u32 = 1 << 1;

/// `struct verbs_context` (648 B): the extended ops table in front of the `ibv_context`.
/// The `_ex` inlines use a slot only if `abi_compat` is `UINTPTR_MAX`, `sz` covers it and it
/// is non-NULL (`verbs_get_ctx_op`, §3); NULL means "not supported" and each caller then
/// falls back or fails with EOPNOTSUPP.
#[repr(C)]
pub struct verbs_context {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: AnyFn,
    pub alloc_null_mr: AnyFn,
    pub read_counters: AnyFn,
    pub attach_counters_point_flow: AnyFn,
    pub create_counters: AnyFn,
    pub destroy_counters: AnyFn,
    pub reg_dm_mr: AnyFn,
    pub alloc_dm: AnyFn,
    pub free_dm: AnyFn,
    pub modify_flow_action_esp: AnyFn,
    pub destroy_flow_action: AnyFn,
    pub create_flow_action_esp: AnyFn,
    pub modify_qp_rate_limit: AnyFn,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: AnyFn,
    pub alloc_td: AnyFn,
    pub modify_cq: AnyFn,
    pub post_srq_ops: AnyFn,
    pub destroy_rwq_ind_table: AnyFn,
    pub create_rwq_ind_table: AnyFn,
    pub destroy_wq: AnyFn,
    pub modify_wq: AnyFn,
    pub create_wq: AnyFn,
    pub query_rt_values: AnyFn,
    /// Called by the inline `ibv_create_cq_ex`.
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: AnyFn,
    pub abi_placeholder2: AnyFn,
    pub ibv_create_flow: AnyFn,
    pub abi_placeholder1: AnyFn,
    pub open_qp: AnyFn,
    /// Called by the inline `ibv_create_qp_ex` unless `comp_mask` is exactly
    /// `IBV_QP_INIT_ATTR_PD`.
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<GetSrqNumFn>,
    pub create_srq_ex: Option<CreateSrqExFn>,
    pub open_xrcd: Option<OpenXrcdFn>,
    pub close_xrcd: Option<CloseXrcdFn>,
    pub _abi_placeholder3: u64,
    /// Must be ≥ 648 for the inline `ibv_query_port` to use `query_port` (§3).
    pub sz: usize,
    pub context: ibv_context,
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    /// A real, pollable fd: applications block on it or hand it to epoll.
    pub fd: c_int,
    /// CQs using this channel; `ibv_destroy_comp_channel` refuses (EBUSY) while non-zero.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: pthread_mutex_t,
    pub cond: pthread_cond_t,
    pub events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_wc` (48 B). The engine's CQE starts with exactly these bytes (abi `Cqe`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_wc {
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: u32,
    /// `enum ibv_wc_opcode`.
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Network byte order when `IBV_WC_WITH_IMM`; the invalidated rkey with `IBV_WC_WITH_INV`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `ibv_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.ud`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_ud {
    pub ah: *mut ibv_ah,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr` (32 B at +40).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_mw` (32 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub type_: c_uint,
}

/// `struct ibv_mw_bind` (48 B), the argument of `ibv_bind_mw`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_mw_bind {
    pub wr_id: u64,
    pub send_flags: c_uint,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.bind_mw`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut c_void,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `ibv_send_wr.tso`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// The trailing union of `struct ibv_send_wr` (48 B at +80).
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr` (128 B).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: u32,
    pub send_flags: c_uint,
    /// Network byte order for `*_WITH_IMM`; the rkey to invalidate for `*_INV`.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub xrc_remote_srqn: u32,
    pub ext: ibv_send_wr_ext,
}

impl ibv_send_wr {
    /// `wr.rdma` (also the first two words of `wr.atomic`' layout-compatible prefix).
    pub fn rdma(&self) -> ibv_send_wr_rdma {
        // SAFETY: every variant of the union is plain integers and pointers, so any bit
        // pattern is a valid `ibv_send_wr_rdma`; the union is 32 bytes, larger than it.
        unsafe { self.wr.rdma }
    }

    /// `wr.atomic`.
    pub fn atomic(&self) -> ibv_send_wr_atomic {
        // SAFETY: as in `rdma`: all-integer variants, any bit pattern valid.
        unsafe { self.wr.atomic }
    }

    /// `wr.ud`.
    pub fn ud(&self) -> ibv_send_wr_ud {
        // SAFETY: as in `rdma`; a pointer read from arbitrary bits is valid as a value (it is
        // only dereferenced after the caller checks it against its own AH registry).
        unsafe { self.wr.ud }
    }

    /// `bind_mw` (of the trailing union).
    pub fn bind_mw(&self) -> ibv_send_wr_bind_mw {
        // SAFETY: both variants are integers and pointers, any bit pattern valid; pointers
        // are only dereferenced under the C API contract (a BIND_MW WR names a live MW).
        unsafe { self.ext.bind_mw }
    }
}

/// `struct ibv_recv_wr` (32 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

/// `union ibv_gid` (16 B, 8-aligned because of its `global` view).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_ece` (12 B): Enhanced Connection Establishment options of a QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ibv_qp_attr` (144 B).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_qp_attr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_qp_init_attr` (64 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    /// In: requested; out: what the QP actually got (perftest reads `max_inline_data` back).
    pub cap: ibv_qp_cap,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` (136 B): the argument of the `create_qp_ex` op.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub cap: ibv_qp_cap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    /// In: requested; out: actual.
    pub attr: ibv_srq_attr,
}

/// `struct ibv_device_attr` (232 B).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    /// Big-endian, as the kernel reports it.
    pub node_guid: u64,
    /// Big-endian.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex` (400 B). uroce fills `orig_attr`, `phys_port_cnt_ex` and zeroes
/// the optional capability blocks (ODP, TSO, RSS, packet pacing, tag matching, DM: none).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    /// `odp_caps` (24 B).
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `tso_caps` (8 B).
    pub tso_caps: [u32; 2],
    /// `rss_caps` (32 B).
    pub rss_caps: [u64; 4],
    pub max_wq_type_rq: u32,
    /// `packet_pacing_caps` (12 B).
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    /// `tm_caps` (20 B).
    pub tm_caps: [u32; 5],
    /// `cq_mod_caps` (4 B).
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    /// `pci_atomic_caps` (6 B).
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr` (52 B; the first 48 are `struct _compat_ibv_port_attr`, all that the
/// exported `ibv_query_port@IBVERBS_1.1` may write, §3).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_port_attr {
    /// `enum ibv_port_state`.
    pub state: u32,
    /// `enum ibv_mtu`.
    pub max_mtu: u32,
    /// `enum ibv_mtu`.
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// Bytes of `ibv_port_attr` that the compat (exported-symbol) `ibv_query_port` fills.
pub const COMPAT_PORT_ATTR_LEN: usize = 48;

/// `struct ibv_gid_entry` (32 B), filled by `_ibv_query_gid_ex`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type` (IB 0, RoCE v1 1, RoCE v2 2).
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_async_event {
    /// Union of `cq`, `qp`, `srq`, `wq` pointers and `port_num`.
    pub element: *mut c_void,
    /// `enum ibv_event_type`.
    pub event_type: u32,
}

/// `struct ibv_grh` (40 B): what a UD receive places in front of the payload.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ibv_grh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
}

// ---- constants (verbs.h; values checked against the Debian 12 header) ----

/// `__VERBS_ABI_IS_EXTENDED`.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;
/// `IBV_NODE_CA`.
pub const IBV_NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB`.
pub const IBV_TRANSPORT_IB: c_int = 0;
/// `enum ibv_gid_type_sysfs` (out-parameter of `ibv_query_gid_type`).
pub const IBV_GID_TYPE_SYSFS_IB_ROCE_V1: c_int = 0;
/// `enum ibv_gid_type_sysfs`: RoCE v2.
pub const IBV_GID_TYPE_SYSFS_ROCE_V2: c_int = 1;
/// `IBV_FORK_UNNEEDED` (`enum ibv_fork_status`): registered memory stays valid across fork.
pub const IBV_FORK_UNNEEDED: c_int = 2;
/// `IBV_REREG_MR_ERR_CMD`.
pub const IBV_REREG_MR_ERR_CMD: c_int = -4;
/// `IBV_REREG_MR_ERR_INPUT`.
pub const IBV_REREG_MR_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
pub const IBV_REREG_MR_CHANGE_TRANSLATION: c_int = 1;
/// `IBV_REREG_MR_CHANGE_PD`.
pub const IBV_REREG_MR_CHANGE_PD: c_int = 2;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
pub const IBV_REREG_MR_CHANGE_ACCESS: c_int = 4;
/// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20..29, which a provider may ignore (§9).
pub const IBV_ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;
/// `IBV_QP_INIT_ATTR_PD`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1;
/// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
pub const IBV_QP_INIT_ATTR_CREATE_FLAGS: u32 = 1 << 2;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: `send_ops_flags` asks for the `ibv_wr_*` interface.
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;

/// `enum ibv_qp_create_send_ops_flags` (`IBV_QP_EX_WITH_*`).
pub mod send_ops {
    pub const RDMA_WRITE: u64 = 1 << 0;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const LOCAL_INV: u64 = 1 << 7;
    pub const BIND_MW: u64 = 1 << 8;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    pub const TSO: u64 = 1 << 10;
    pub const ATOMIC_WRITE: u64 = 1 << 12;
}

/// `enum ibv_create_cq_wc_flags` (`IBV_WC_EX_WITH_*`).
pub mod wc_ex {
    pub const BYTE_LEN: u64 = 1 << 0;
    pub const IMM: u64 = 1 << 1;
    pub const QP_NUM: u64 = 1 << 2;
    pub const SRC_QP: u64 = 1 << 3;
    pub const SLID: u64 = 1 << 4;
    pub const SL: u64 = 1 << 5;
    pub const DLID_PATH_BITS: u64 = 1 << 6;
    pub const COMPLETION_TIMESTAMP: u64 = 1 << 7;
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`.
    pub const COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
    /// `IBV_WC_STANDARD_FLAGS`: the fields of a plain `ibv_wc`.
    pub const STANDARD: u64 = BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID | SL | DLID_PATH_BITS;
}

/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
pub const IBV_CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
/// `IBV_CQ_INIT_ATTR_MASK_PD`.
pub const IBV_CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: a hint only.
pub const IBV_CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
pub const IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

/// `struct ibv_cq_init_attr_ex` (56 B): the argument of the `create_cq_ex` op.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// `struct ibv_data_buf` (`ibv_wr_set_inline_data_list`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct ibv_cq_ex` after its `ibv_cq`-shaped prefix (which ends at 128): the fields the
/// inline `ibv_start_poll`, `ibv_wc_read_*`, … read. Placed right after an [`ibv_cq`], it
/// makes the two together an `ibv_cq_ex` (asserted in `cq.rs`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_cq_ex_tail {
    pub comp_mask: u32,
    pub status: u32,
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut ibv_cq) -> c_uint>,
    pub read_slid: Option<unsafe extern "C" fn(*mut ibv_cq) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut ibv_cq) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut ibv_cq) -> u8>,
    pub read_completion_ts: AnyFn,
    pub read_cvlan: AnyFn,
    pub read_flow_tag: AnyFn,
    pub read_tm_info: AnyFn,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq) -> u64>,
}

/// `struct ibv_qp_ex` after its `ibv_qp` (`qp_base`, 160 B): `wr_id`, `wr_flags` and the
/// `ibv_wr_*` function pointers. Placed right after an [`ibv_qp`] it makes an `ibv_qp_ex`
/// (asserted in `qp_ex.rs`). The QP pointer every function takes is the `ibv_qp_ex`'s, which
/// is also the `ibv_qp`'s (`qp_base` is at 0).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ibv_qp_ex_tail {
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64, u64)>,
    pub wr_bind_mw: Option<unsafe extern "C" fn(*mut ibv_qp, *mut c_void, u32, *const c_void)>,
    pub wr_local_inv: Option<unsafe extern "C" fn(*mut ibv_qp, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(*mut ibv_qp, u32)>,
    pub wr_send_tso: Option<unsafe extern "C" fn(*mut ibv_qp, *mut c_void, u16, u16)>,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp, *mut ibv_ah, u32, u32)>,
    pub wr_set_xrc_srqn: Option<unsafe extern "C" fn(*mut ibv_qp, u32)>,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(*mut ibv_qp, u32, u64, *const c_void)>,
}

const _: () = {
    assert!(size_of::<pthread_mutex_t>() == 40);
    assert!(size_of::<pthread_cond_t>() == 48);

    assert!(size_of::<ibv_device>() == 664);
    assert!(offset_of!(ibv_device, node_type) == 16);
    assert!(offset_of!(ibv_device, transport_type) == 20);
    assert!(offset_of!(ibv_device, name) == 24);
    assert!(offset_of!(ibv_device, dev_name) == 88);
    assert!(offset_of!(ibv_device, dev_path) == 152);
    assert!(offset_of!(ibv_device, ibdev_path) == 408);

    assert!(size_of::<ibv_context_ops>() == 256);
    assert!(offset_of!(ibv_context_ops, alloc_mw) == 56);
    assert!(offset_of!(ibv_context_ops, poll_cq) == 88);
    assert!(offset_of!(ibv_context_ops, _compat_async_event) == 248);

    assert!(size_of::<ibv_context>() == 328);
    assert!(offset_of!(ibv_context, ops) == 8);
    // The inline fast-path functions' offsets, relative to the ibv_context (§3).
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, poll_cq) == 96);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, req_notify_cq) == 104);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_srq_recv) == 168);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_send) == 208);
    assert!(offset_of!(ibv_context, ops) + offset_of!(ibv_context_ops, post_recv) == 216);
    assert!(offset_of!(ibv_context, cmd_fd) == 264);
    assert!(offset_of!(ibv_context, async_fd) == 268);
    assert!(offset_of!(ibv_context, num_comp_vectors) == 272);
    assert!(offset_of!(ibv_context, mutex) == 280);
    assert!(offset_of!(ibv_context, abi_compat) == 320);

    assert!(size_of::<verbs_context>() == 648);
    assert!(offset_of!(verbs_context, query_port) == 0);
    assert!(offset_of!(verbs_context, advise_mr) == 8);
    assert!(offset_of!(verbs_context, reg_dm_mr) == 56);
    assert!(offset_of!(verbs_context, alloc_dm) == 64);
    assert!(offset_of!(verbs_context, free_dm) == 72);
    assert!(offset_of!(verbs_context, modify_qp_rate_limit) == 104);
    assert!(offset_of!(verbs_context, modify_cq) == 136);
    assert!(offset_of!(verbs_context, query_rt_values) == 192);
    assert!(offset_of!(verbs_context, create_cq_ex) == 200);
    assert!(offset_of!(verbs_context, priv_) == 208);
    assert!(offset_of!(verbs_context, query_device_ex) == 216);
    assert!(offset_of!(verbs_context, open_qp) == 256);
    assert!(offset_of!(verbs_context, create_qp_ex) == 264);
    assert!(offset_of!(verbs_context, get_srq_num) == 272);
    assert!(offset_of!(verbs_context, create_srq_ex) == 280);
    assert!(offset_of!(verbs_context, open_xrcd) == 288);
    assert!(offset_of!(verbs_context, close_xrcd) == 296);
    assert!(offset_of!(verbs_context, sz) == 312);
    assert!(offset_of!(verbs_context, context) == 320);
    // `verbs_get_ctx_op` from the context side: query_port at ctx−320, sz at ctx−8,
    // query_device_ex at ctx−104, create_cq_ex ctx−120, create_qp_ex ctx−56 (§3).
    assert!(offset_of!(verbs_context, context) - offset_of!(verbs_context, sz) == 8);
    assert!(offset_of!(verbs_context, context) - offset_of!(verbs_context, query_device_ex) == 104);
    assert!(offset_of!(verbs_context, context) - offset_of!(verbs_context, create_cq_ex) == 120);
    assert!(offset_of!(verbs_context, context) - offset_of!(verbs_context, create_qp_ex) == 56);

    assert!(size_of::<ibv_pd>() == 16);
    assert!(offset_of!(ibv_pd, handle) == 8);

    assert!(size_of::<ibv_mr>() == 48);
    assert!(offset_of!(ibv_mr, addr) == 16);
    assert!(offset_of!(ibv_mr, length) == 24);
    assert!(offset_of!(ibv_mr, handle) == 32);
    assert!(offset_of!(ibv_mr, lkey) == 36);
    assert!(offset_of!(ibv_mr, rkey) == 40);

    assert!(size_of::<ibv_comp_channel>() == 16);
    assert!(offset_of!(ibv_comp_channel, fd) == 8);
    assert!(offset_of!(ibv_comp_channel, refcnt) == 12);

    assert!(size_of::<ibv_cq>() == 128);
    assert!(offset_of!(ibv_cq, channel) == 8);
    assert!(offset_of!(ibv_cq, cq_context) == 16);
    assert!(offset_of!(ibv_cq, handle) == 24);
    assert!(offset_of!(ibv_cq, cqe) == 28);
    assert!(offset_of!(ibv_cq, mutex) == 32);
    assert!(offset_of!(ibv_cq, cond) == 72);
    assert!(offset_of!(ibv_cq, comp_events_completed) == 120);
    assert!(offset_of!(ibv_cq, async_events_completed) == 124);

    assert!(size_of::<ibv_qp>() == 160);
    assert!(offset_of!(ibv_qp, qp_context) == 8);
    assert!(offset_of!(ibv_qp, pd) == 16);
    assert!(offset_of!(ibv_qp, send_cq) == 24);
    assert!(offset_of!(ibv_qp, recv_cq) == 32);
    assert!(offset_of!(ibv_qp, srq) == 40);
    assert!(offset_of!(ibv_qp, handle) == 48);
    assert!(offset_of!(ibv_qp, qp_num) == 52);
    assert!(offset_of!(ibv_qp, state) == 56);
    assert!(offset_of!(ibv_qp, qp_type) == 60);
    assert!(offset_of!(ibv_qp, mutex) == 64);
    assert!(offset_of!(ibv_qp, cond) == 104);
    assert!(offset_of!(ibv_qp, events_completed) == 152);

    assert!(size_of::<ibv_srq>() == 128);
    assert!(offset_of!(ibv_srq, handle) == 24);
    assert!(offset_of!(ibv_srq, mutex) == 32);
    assert!(offset_of!(ibv_srq, cond) == 72);
    assert!(offset_of!(ibv_srq, events_completed) == 120);

    assert!(size_of::<ibv_ah>() == 24);
    assert!(offset_of!(ibv_ah, handle) == 16);

    assert!(size_of::<ibv_wc>() == 48);
    assert!(offset_of!(ibv_wc, status) == 8);
    assert!(offset_of!(ibv_wc, opcode) == 12);
    assert!(offset_of!(ibv_wc, vendor_err) == 16);
    assert!(offset_of!(ibv_wc, byte_len) == 20);
    assert!(offset_of!(ibv_wc, imm_data) == 24);
    assert!(offset_of!(ibv_wc, qp_num) == 28);
    assert!(offset_of!(ibv_wc, src_qp) == 32);
    assert!(offset_of!(ibv_wc, wc_flags) == 36);
    assert!(offset_of!(ibv_wc, pkey_index) == 40);
    assert!(offset_of!(ibv_wc, slid) == 42);
    assert!(offset_of!(ibv_wc, sl) == 44);
    assert!(offset_of!(ibv_wc, dlid_path_bits) == 45);

    assert!(size_of::<ibv_sge>() == 16);
    assert!(offset_of!(ibv_sge, length) == 8);
    assert!(offset_of!(ibv_sge, lkey) == 12);

    assert!(size_of::<ibv_send_wr>() == 128);
    assert!(offset_of!(ibv_send_wr, next) == 8);
    assert!(offset_of!(ibv_send_wr, sg_list) == 16);
    assert!(offset_of!(ibv_send_wr, num_sge) == 24);
    assert!(offset_of!(ibv_send_wr, opcode) == 28);
    assert!(offset_of!(ibv_send_wr, send_flags) == 32);
    assert!(offset_of!(ibv_send_wr, imm_data) == 36);
    assert!(offset_of!(ibv_send_wr, wr) == 40);
    assert!(size_of::<ibv_send_wr_wr>() == 32);
    assert!(offset_of!(ibv_send_wr_rdma, rkey) == 8);
    assert!(offset_of!(ibv_send_wr_atomic, compare_add) == 8);
    assert!(offset_of!(ibv_send_wr_atomic, swap) == 16);
    assert!(offset_of!(ibv_send_wr_atomic, rkey) == 24);
    assert!(offset_of!(ibv_send_wr_ud, remote_qpn) == 8);
    assert!(offset_of!(ibv_send_wr_ud, remote_qkey) == 12);
    assert!(offset_of!(ibv_send_wr, xrc_remote_srqn) == 72);
    assert!(offset_of!(ibv_send_wr, ext) == 80);
    assert!(offset_of!(ibv_send_wr_bind_mw, rkey) == 8);
    assert!(size_of::<ibv_mw>() == 32);
    assert!(offset_of!(ibv_mw, rkey) == 16);
    assert!(offset_of!(ibv_mw, type_) == 24);
    assert!(size_of::<ibv_mw_bind>() == 48);
    assert!(offset_of!(ibv_mw_bind, bind_info) == 16);
    assert!(offset_of!(ibv_send_wr_bind_mw, bind_info) == 16);
    assert!(size_of::<ibv_mw_bind_info>() == 32);
    assert!(offset_of!(ibv_send_wr_tso, hdr_sz) == 8);
    assert!(offset_of!(ibv_send_wr_tso, mss) == 10);

    assert!(size_of::<ibv_recv_wr>() == 32);
    assert!(offset_of!(ibv_recv_wr, next) == 8);
    assert!(offset_of!(ibv_recv_wr, sg_list) == 16);
    assert!(offset_of!(ibv_recv_wr, num_sge) == 24);

    assert!(size_of::<ibv_gid>() == 16);
    assert!(core::mem::align_of::<ibv_gid>() == 8);
    assert!(size_of::<ibv_global_route>() == 24);
    assert!(offset_of!(ibv_global_route, flow_label) == 16);
    assert!(offset_of!(ibv_global_route, sgid_index) == 20);
    assert!(offset_of!(ibv_global_route, hop_limit) == 21);
    assert!(offset_of!(ibv_global_route, traffic_class) == 22);

    assert!(size_of::<ibv_ah_attr>() == 32);
    assert!(offset_of!(ibv_ah_attr, dlid) == 24);
    assert!(offset_of!(ibv_ah_attr, sl) == 26);
    assert!(offset_of!(ibv_ah_attr, src_path_bits) == 27);
    assert!(offset_of!(ibv_ah_attr, static_rate) == 28);
    assert!(offset_of!(ibv_ah_attr, is_global) == 29);
    assert!(offset_of!(ibv_ah_attr, port_num) == 30);

    assert!(size_of::<ibv_qp_cap>() == 20);
    assert!(size_of::<ibv_qp_attr>() == 144);
    assert!(size_of::<ibv_ece>() == 12);
    assert!(offset_of!(ibv_ece, comp_mask) == 8);
    assert!(offset_of!(ibv_qp_attr, qkey) == 16);
    assert!(offset_of!(ibv_qp_attr, dest_qp_num) == 28);
    assert!(offset_of!(ibv_qp_attr, qp_access_flags) == 32);
    assert!(offset_of!(ibv_qp_attr, cap) == 36);
    assert!(offset_of!(ibv_qp_attr, ah_attr) == 56);
    assert!(offset_of!(ibv_qp_attr, alt_ah_attr) == 88);
    assert!(offset_of!(ibv_qp_attr, pkey_index) == 120);
    assert!(offset_of!(ibv_qp_attr, en_sqd_async_notify) == 124);
    assert!(offset_of!(ibv_qp_attr, max_rd_atomic) == 126);
    assert!(offset_of!(ibv_qp_attr, max_dest_rd_atomic) == 127);
    assert!(offset_of!(ibv_qp_attr, min_rnr_timer) == 128);
    assert!(offset_of!(ibv_qp_attr, port_num) == 129);
    assert!(offset_of!(ibv_qp_attr, timeout) == 130);
    assert!(offset_of!(ibv_qp_attr, retry_cnt) == 131);
    assert!(offset_of!(ibv_qp_attr, rnr_retry) == 132);
    assert!(offset_of!(ibv_qp_attr, alt_timeout) == 134);
    assert!(offset_of!(ibv_qp_attr, rate_limit) == 136);

    assert!(size_of::<ibv_qp_init_attr>() == 64);
    assert!(offset_of!(ibv_qp_init_attr, cap) == 32);
    assert!(offset_of!(ibv_qp_init_attr, qp_type) == 52);
    assert!(offset_of!(ibv_qp_init_attr, sq_sig_all) == 56);

    assert!(size_of::<ibv_cq_init_attr_ex>() == 56);
    assert!(offset_of!(ibv_cq_init_attr_ex, comp_vector) == 24);
    assert!(offset_of!(ibv_cq_init_attr_ex, wc_flags) == 32);
    assert!(offset_of!(ibv_cq_init_attr_ex, comp_mask) == 40);
    assert!(offset_of!(ibv_cq_init_attr_ex, flags) == 44);
    assert!(offset_of!(ibv_cq_init_attr_ex, parent_domain) == 48);
    // ibv_cq_ex = ibv_cq (128 B) + this tail: start_poll at 144, read_opcode at 168, …
    assert!(size_of::<ibv_cq>() + size_of::<ibv_cq_ex_tail>() == 288);
    assert!(128 + offset_of!(ibv_cq_ex_tail, wr_id) == 136);
    assert!(128 + offset_of!(ibv_cq_ex_tail, start_poll) == 144);
    assert!(128 + offset_of!(ibv_cq_ex_tail, read_opcode) == 168);
    assert!(128 + offset_of!(ibv_cq_ex_tail, read_dlid_path_bits) == 240);
    assert!(128 + offset_of!(ibv_cq_ex_tail, read_completion_wallclock_ns) == 280);
    // ibv_qp_ex = ibv_qp (160 B) + this tail: wr_id at 168, wr_start at 320, …
    assert!(size_of::<ibv_qp>() + size_of::<ibv_qp_ex_tail>() == 352);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_id) == 168);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_flags) == 176);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_atomic_cmp_swp) == 184);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_rdma_read) == 216);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_send) == 240);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_set_ud_addr) == 272);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_set_inline_data) == 288);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_set_sge_list) == 312);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_start) == 320);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_abort) == 336);
    assert!(160 + offset_of!(ibv_qp_ex_tail, wr_atomic_write) == 344);
    assert!(size_of::<ibv_data_buf>() == 16);
    assert!(offset_of!(verbs_context, create_cq_ex) == 200);

    assert!(size_of::<ibv_qp_init_attr_ex>() == 136);
    assert!(offset_of!(ibv_qp_init_attr_ex, comp_mask) == 60);
    assert!(offset_of!(ibv_qp_init_attr_ex, pd) == 64);
    assert!(offset_of!(ibv_qp_init_attr_ex, create_flags) == 80);
    // The `create_qp_ex` op hands an `ibv_qp_init_attr_ex` to `ibv_create_qp` as its prefix.
    assert!(offset_of!(ibv_qp_init_attr_ex, cap) == offset_of!(ibv_qp_init_attr, cap));
    assert!(offset_of!(ibv_qp_init_attr_ex, qp_type) == offset_of!(ibv_qp_init_attr, qp_type));
    assert!(
        offset_of!(ibv_qp_init_attr_ex, sq_sig_all) == offset_of!(ibv_qp_init_attr, sq_sig_all)
    );
    assert!(size_of::<ibv_qp_init_attr>() <= size_of::<ibv_qp_init_attr_ex>());
    assert!(offset_of!(ibv_qp_init_attr_ex, max_tso_header) == 84);
    assert!(offset_of!(ibv_qp_init_attr_ex, rwq_ind_tbl) == 88);
    assert!(offset_of!(ibv_qp_init_attr_ex, rx_hash_conf) == 96);
    assert!(size_of::<ibv_rx_hash_conf>() == 24);
    assert!(offset_of!(ibv_qp_init_attr_ex, source_qpn) == 120);
    assert!(offset_of!(ibv_qp_init_attr_ex, send_ops_flags) == 128);

    assert!(size_of::<ibv_srq_attr>() == 12);
    assert!(size_of::<ibv_srq_init_attr_ex>() == 64);
    assert!(offset_of!(ibv_srq_init_attr_ex, comp_mask) == 20);
    assert!(offset_of!(ibv_srq_init_attr_ex, pd) == 32);
    assert!(offset_of!(ibv_srq_init_attr_ex, cq) == 48);
    assert!(size_of::<ibv_xrcd_init_attr>() == 12);
    assert!(size_of::<ibv_parent_domain_init_attr>() == 48);
    assert!(offset_of!(ibv_parent_domain_init_attr, alloc) == 24);
    assert!(size_of::<ibv_srq_init_attr>() == 24);
    assert!(offset_of!(ibv_srq_init_attr, attr) == 8);

    assert!(size_of::<ibv_device_attr>() == 232);
    assert!(offset_of!(ibv_device_attr, node_guid) == 64);
    assert!(offset_of!(ibv_device_attr, max_mr_size) == 80);
    assert!(offset_of!(ibv_device_attr, vendor_id) == 96);
    assert!(offset_of!(ibv_device_attr, vendor_part_id) == 100);
    assert!(offset_of!(ibv_device_attr, max_qp) == 108);
    assert!(offset_of!(ibv_device_attr, device_cap_flags) == 116);
    assert!(offset_of!(ibv_device_attr, max_qp_rd_atom) == 144);
    assert!(offset_of!(ibv_device_attr, atomic_cap) == 164);
    assert!(offset_of!(ibv_device_attr, max_ah) == 200);
    assert!(offset_of!(ibv_device_attr, max_srq_sge) == 220);
    assert!(offset_of!(ibv_device_attr, max_pkeys) == 224);
    assert!(offset_of!(ibv_device_attr, local_ca_ack_delay) == 226);
    assert!(offset_of!(ibv_device_attr, phys_port_cnt) == 227);

    assert!(size_of::<ibv_device_attr_ex>() == 400);
    assert!(offset_of!(ibv_device_attr_ex, comp_mask) == 232);
    assert!(offset_of!(ibv_device_attr_ex, odp_caps) == 240);
    assert!(offset_of!(ibv_device_attr_ex, completion_timestamp_mask) == 264);
    assert!(offset_of!(ibv_device_attr_ex, hca_core_clock) == 272);
    assert!(offset_of!(ibv_device_attr_ex, device_cap_flags_ex) == 280);
    assert!(offset_of!(ibv_device_attr_ex, tso_caps) == 288);
    assert!(offset_of!(ibv_device_attr_ex, rss_caps) == 296);
    assert!(offset_of!(ibv_device_attr_ex, max_wq_type_rq) == 328);
    assert!(offset_of!(ibv_device_attr_ex, packet_pacing_caps) == 332);
    assert!(offset_of!(ibv_device_attr_ex, raw_packet_caps) == 344);
    assert!(offset_of!(ibv_device_attr_ex, tm_caps) == 348);
    assert!(offset_of!(ibv_device_attr_ex, cq_mod_caps) == 368);
    assert!(offset_of!(ibv_device_attr_ex, max_dm_size) == 376);
    assert!(offset_of!(ibv_device_attr_ex, pci_atomic_caps) == 384);
    assert!(offset_of!(ibv_device_attr_ex, xrc_odp_caps) == 392);
    assert!(offset_of!(ibv_device_attr_ex, phys_port_cnt_ex) == 396);

    assert!(size_of::<ibv_port_attr>() == 52);
    assert!(core::mem::align_of::<ibv_port_attr>() == 4);
    assert!(offset_of!(ibv_port_attr, gid_tbl_len) == 12);
    assert!(offset_of!(ibv_port_attr, max_msg_sz) == 20);
    assert!(offset_of!(ibv_port_attr, pkey_tbl_len) == 32);
    assert!(offset_of!(ibv_port_attr, lid) == 34);
    assert!(offset_of!(ibv_port_attr, lmc) == 38);
    assert!(offset_of!(ibv_port_attr, active_width) == 43);
    assert!(offset_of!(ibv_port_attr, active_speed) == 44);
    assert!(offset_of!(ibv_port_attr, phys_state) == 45);
    assert!(offset_of!(ibv_port_attr, link_layer) == 46);
    assert!(offset_of!(ibv_port_attr, flags) == 47);
    assert!(offset_of!(ibv_port_attr, port_cap_flags2) == COMPAT_PORT_ATTR_LEN);

    assert!(size_of::<ibv_gid_entry>() == 32);
    assert!(offset_of!(ibv_gid_entry, gid_index) == 16);
    assert!(offset_of!(ibv_gid_entry, port_num) == 20);
    assert!(offset_of!(ibv_gid_entry, gid_type) == 24);
    assert!(offset_of!(ibv_gid_entry, ndev_ifindex) == 28);

    assert!(size_of::<ibv_async_event>() == 16);
    assert!(offset_of!(ibv_async_event, event_type) == 8);

    assert!(size_of::<ibv_grh>() == 40);
    assert!(offset_of!(ibv_grh, paylen) == 4);
    assert!(offset_of!(ibv_grh, next_hdr) == 6);
    assert!(offset_of!(ibv_grh, hop_limit) == 7);
    assert!(offset_of!(ibv_grh, sgid) == 8);
    assert!(offset_of!(ibv_grh, dgid) == 24);
};
