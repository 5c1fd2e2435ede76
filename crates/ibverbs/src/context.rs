//! Contexts: `ibv_open_device`/`ibv_close_device`, the device/port/GID/P_Key queries, async
//! events, and the `verbs_context` + ops table every other object hangs off.
//!
//! An open context is a [`UContext`]: the 648-byte `verbs_context` (whose last 328 bytes are
//! the `ibv_context` the application holds) followed by the Rust state — the `verbs`
//! [`uroce::Context`] that owns the command channel to the device. The application's
//! `struct ibv_context *` therefore points 320 bytes into a `UContext`, and the inline
//! functions of `verbs.h` find `sz`, `query_port` and `query_device_ex` in front of it
//! (docs/compat.md §3, §4).

use core::ffi::{c_int, c_uint, c_void};
use core::mem::offset_of;
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use uroce::{Context, DeviceSpec, Errno, EventType};

use crate::device::{lookup, UDevice};
use crate::types::*;
use crate::util::{fill_cstr, guard, guard_errno, is_nonblocking, set_blocking, set_errno};

/// `ibv_context` offset inside [`UContext`]: the `verbs_context` comes first.
pub(crate) const CTX_OFFSET: usize = offset_of!(verbs_context, context);

/// Which kind of object an async event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ObjKind {
    Cq,
    Qp,
    Srq,
}

/// An object pointer kept for async-event lookup (`user_handle` → C object).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ObjRef {
    pub(crate) kind: ObjKind,
    pub(crate) ptr: usize,
}

/// An open device context (see module docs). `#[repr(C)]` with the `verbs_context` first.
#[repr(C)]
pub struct UContext {
    vctx: verbs_context,
    pub(crate) dev: &'static UDevice,
    pub(crate) ctx: Context,
    /// CQs, QPs and SRQs by the `user_handle` their async events carry.
    pub(crate) objects: Mutex<HashMap<u64, ObjRef>>,
    /// Serialises completion-channel reference counts (`context->mutex` upstream).
    pub(crate) lock: Mutex<()>,
    /// Objects created on this context and not destroyed yet (PDs, MRs, AHs, channels,
    /// CQs, QPs, SRQs): their C structs point at this context, so it must outlive them.
    live: AtomicUsize,
}

impl std::fmt::Debug for UContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UContext")
            .field("dev", &self.dev.spec)
            .finish()
    }
}

impl UContext {
    /// The application's view.
    pub(crate) fn ibv(&self) -> *mut ibv_context {
        core::ptr::from_ref(&self.vctx.context).cast_mut()
    }

    pub(crate) fn register(&self, user_handle: u64, kind: ObjKind, ptr: usize) {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(user_handle, ObjRef { kind, ptr });
    }

    /// Counts an object created on this context.
    pub(crate) fn retain(&self) {
        self.live.fetch_add(1, Ordering::AcqRel);
    }

    /// Counts an object destroyed.
    pub(crate) fn release(&self) {
        self.live.fetch_sub(1, Ordering::AcqRel);
    }

    pub(crate) fn unregister(&self, user_handle: u64) {
        self.objects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&user_handle);
    }
}

/// The [`UContext`] behind an application's `ibv_context *`.
///
/// # Safety
/// `ctx` is NULL or a context returned by [`ibv_open_device`] and not closed yet.
pub(crate) unsafe fn uctx<'a>(ctx: *mut ibv_context) -> Option<&'a UContext> {
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a context from ibv_open_device is the `context` field of a `verbs_context` at
    // offset 0 of a live, boxed `UContext`; stepping back CTX_OFFSET bytes stays inside that
    // allocation and yields its start.
    unsafe { ctx.cast::<u8>().sub(CTX_OFFSET).cast::<UContext>().as_ref() }
}

/// [`UContext::retain`] through an object's `context` pointer.
///
/// # Safety
/// `ctx` is NULL or a live context.
pub(crate) unsafe fn retain(ctx: *mut ibv_context) {
    // SAFETY: forwarded contract.
    if let Some(u) = unsafe { uctx(ctx) } {
        u.retain();
    }
}

/// [`UContext::release`] through an object's `context` pointer.
///
/// # Safety
/// `ctx` is NULL or a live context.
pub(crate) unsafe fn release(ctx: *mut ibv_context) {
    // SAFETY: forwarded contract.
    if let Some(u) = unsafe { uctx(ctx) } {
        u.release();
    }
}

/// Converts a verbs error into the positive errno the C API returns. With `UROCE_DEBUG=1`
/// it also writes one line to stderr: the verb, the errno and why (the control plane's
/// reason, or the library's own explanation). The errno is unchanged either way.
pub(crate) fn errno_of(e: &uroce::Error) -> c_int {
    if crate::util::debug_enabled() {
        eprintln!("{}", debug_line(e));
    }
    e.errno().0
}

/// The `UROCE_DEBUG` line for a failed verb:
/// `uroce: ibv_modify_qp: EINVAL (22): modify_qp: INIT -> RTR: DEST_QPN missing from
/// attr_mask [MISSING_ATTR]`.
pub(crate) fn debug_line(e: &uroce::Error) -> String {
    let errno = e.errno();
    let why = match (e.reason(), e.detail()) {
        (Some(r), _) => r.to_string(),
        (None, Some(d)) => d.to_owned(),
        (None, None) => "no reason given".to_owned(),
    };
    format!("uroce: ibv_{}: {errno} ({}): {why}", e.op(), errno.0)
}

/// Opens the uroce device behind `dev`. The embedded NIC is installed as the provider on
/// first use (crate `uroce`).
fn open(dev: &'static UDevice) -> Result<Box<UContext>, c_int> {
    uroce::init();
    let spec: DeviceSpec = dev.spec.clone();
    let device = uroce::device(&spec.name, spec.addr);
    let ctx = device.open().map_err(|e| errno_of(&e))?;
    Ok(context_for(dev, ctx))
}

/// A C context for a verbs context opened elsewhere (the one rdma_cm's IDs of a device
/// share), leaked like one from [`ibv_open_device`]; `None` if its device is not one of
/// the configured ones.
pub(crate) fn wrap_context(ctx: Context) -> Option<*mut ibv_context> {
    let name = ctx.device().name().to_string();
    let dev = crate::device::configured()
        .ok()?
        .into_iter()
        .find(|d| d.spec.name == name)?;
    Some(Box::leak(context_for(dev, ctx)).ibv())
}

fn context_for(dev: &'static UDevice, ctx: Context) -> Box<UContext> {
    // SAFETY: an all-zero bit pattern is valid for verbs_context: every field is a raw
    // pointer, an `Option` of a function pointer (None), an integer, or a pthread object
    // (overwritten with its initializer below).
    let mut vctx: verbs_context = unsafe { core::mem::zeroed() };
    vctx.sz = core::mem::size_of::<verbs_context>();
    vctx.query_port = Some(op_query_port);
    vctx.query_device_ex = Some(op_query_device_ex);
    vctx.create_qp_ex = Some(crate::qp::op_create_qp_ex);
    vctx.create_cq_ex = Some(crate::cq::op_create_cq_ex);
    vctx.open_xrcd = Some(crate::xrc::op_open_xrcd);
    vctx.alloc_parent_domain = Some(crate::objects::op_alloc_parent_domain);
    vctx.close_xrcd = Some(crate::xrc::op_close_xrcd);
    vctx.create_srq_ex = Some(crate::qp::op_create_srq_ex);
    vctx.get_srq_num = Some(crate::qp::op_get_srq_num);
    let c = &mut vctx.context;
    c.device = core::ptr::from_ref(&dev.ibv).cast_mut();
    c.ops.poll_cq = Some(crate::cq::op_poll_cq);
    c.ops.req_notify_cq = Some(crate::cq::op_req_notify_cq);
    c.ops.post_send = Some(crate::qp::op_post_send);
    c.ops.post_recv = Some(crate::qp::op_post_recv);
    c.ops.post_srq_recv = Some(crate::qp::op_post_srq_recv);
    c.ops.alloc_mw = Some(crate::objects::op_alloc_mw);
    c.ops.bind_mw = Some(crate::objects::op_bind_mw);
    c.ops.dealloc_mw = Some(crate::objects::op_dealloc_mw);
    // The command socket: a real descriptor for the context's life, so programs can
    // `dup`/`fstat` it as they do a uverbs fd (rdma-core's tests/test_shared_pd.py).
    c.cmd_fd = ctx.cmd_fd();
    c.async_fd = ctx.async_fd().map_or(-1, |fd| fd.as_raw_fd());
    if c.async_fd >= 0 {
        set_blocking(c.async_fd);
    }
    c.num_comp_vectors = c_int::try_from(ctx.num_comp_vectors().max(1)).unwrap_or(1);
    c.mutex = libc::PTHREAD_MUTEX_INITIALIZER;
    c.abi_compat = VERBS_ABI_IS_EXTENDED;
    Box::new(UContext {
        vctx,
        dev,
        ctx,
        objects: Mutex::new(HashMap::new()),
        lock: Mutex::new(()),
        live: AtomicUsize::new(0),
    })
}

/// `struct ibv_context *ibv_open_device(struct ibv_device *)`: NULL + errno on failure
/// (ENODEV for a device that is not ours).
///
/// # Safety
/// `device` is any pointer; it is checked against our registry.
pub unsafe extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    guard(core::ptr::null_mut(), || {
        let Some(dev) = lookup(device) else {
            set_errno(libc::ENODEV);
            return core::ptr::null_mut();
        };
        match open(dev) {
            Ok(b) => Box::leak(b).ibv(),
            Err(e) => {
                set_errno(e);
                core::ptr::null_mut()
            }
        }
    })
}

/// `int ibv_close_device(struct ibv_context *)`. Closing a context whose objects are not all
/// destroyed is an application error upstream (the kernel then reclaims them); here those
/// objects keep the device channel alive (verbs objects hold their context) and their C
/// structs keep pointing at the context, so its memory is then deliberately not freed —
/// the objects stay usable and destroyable, at the cost of one small leak.
///
/// # Safety
/// `context` came from [`ibv_open_device`] and is not used after this call.
pub unsafe extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    guard_errno(|| {
        if context.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: per the contract this is the `context` field of a leaked Box<UContext>;
        // stepping back CTX_OFFSET gives the Box's pointer, owned again here exactly once.
        let b = unsafe { Box::from_raw(context.cast::<u8>().sub(CTX_OFFSET).cast::<UContext>()) };
        if b.live.load(Ordering::Acquire) != 0 {
            Box::leak(b);
        } else {
            drop(b);
        }
        0
    })
}

/// Formats the 64-bit firmware version as rxe does (`major.minor.sub` from bits 63..32,
/// 31..16, 15..0).
fn fw_ver_text(raw: u64) -> String {
    format!("{}.{}.{}", raw >> 32, (raw >> 16) & 0xffff, raw & 0xffff)
}

fn c_i32(v: u32) -> c_int {
    c_int::try_from(v).unwrap_or(c_int::MAX)
}

fn device_attr(a: &uroce::DeviceAttr) -> ibv_device_attr {
    let mut fw_ver = [0; 64];
    fill_cstr(&mut fw_ver, &fw_ver_text(a.fw_ver));
    ibv_device_attr {
        fw_ver,
        node_guid: a.node_guid.to_be(),
        sys_image_guid: a.sys_image_guid.to_be(),
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: c_i32(a.max_qp),
        max_qp_wr: c_i32(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: c_i32(a.max_sge),
        max_sge_rd: c_i32(a.max_sge_rd),
        max_cq: c_i32(a.max_cq),
        max_cqe: c_i32(a.max_cqe),
        max_mr: c_i32(a.max_mr),
        max_pd: c_i32(a.max_pd),
        max_qp_rd_atom: c_i32(a.max_qp_rd_atom),
        max_ee_rd_atom: c_i32(a.max_ee_rd_atom),
        max_res_rd_atom: c_i32(a.max_res_rd_atom),
        max_qp_init_rd_atom: c_i32(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: c_i32(a.max_ee_init_rd_atom),
        atomic_cap: a.atomic_cap.0,
        max_ee: c_i32(a.max_ee),
        max_rdd: c_i32(a.max_rdd),
        max_mw: c_i32(a.max_mw),
        max_raw_ipv6_qp: c_i32(a.max_raw_ipv6_qp),
        max_raw_ethy_qp: c_i32(a.max_raw_ethy_qp),
        max_mcast_grp: c_i32(a.max_mcast_grp),
        max_mcast_qp_attach: c_i32(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: c_i32(a.max_total_mcast_qp_attach),
        max_ah: c_i32(a.max_ah),
        max_fmr: c_i32(a.max_fmr),
        max_map_per_fmr: c_i32(a.max_map_per_fmr),
        max_srq: c_i32(a.max_srq),
        max_srq_wr: c_i32(a.max_srq_wr),
        max_srq_sge: c_i32(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    }
}

/// `int ibv_query_device(struct ibv_context *, struct ibv_device_attr *)`: 0 or an errno.
///
/// # Safety
/// `context` is a live context; `attr` is valid for a write of `ibv_device_attr`.
pub unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        match u.ctx.query_device() {
            Ok(a) => {
                // SAFETY: `attr` is valid for a write per the contract.
                unsafe { attr.write(device_attr(&a)) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// The `query_device_ex` op of the `verbs_context` (the inline `ibv_query_device_ex` calls
/// it with `attr_size` 400): the basic attributes plus zeroed extended capabilities
/// (uroce offers no ODP, TSO, RSS, tag matching, device memory or packet pacing). Writes at
/// most `attr_size` bytes.
unsafe extern "C" fn op_query_device_ex(
    context: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    guard_errno(|| {
        // SAFETY: the inline passes the application's context.
        let Some(u) = (unsafe { uctx(context) }) else {
            return libc::EINVAL;
        };
        // SAFETY: `input` is NULL or a valid input struct (inline contract).
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return libc::EINVAL;
        }
        if attr.is_null() || attr_size < core::mem::size_of::<ibv_device_attr>() {
            return libc::EINVAL;
        }
        let a = match u.ctx.query_device() {
            Ok(a) => a,
            Err(e) => return errno_of(&e),
        };
        // SAFETY: all-zero is a valid ibv_device_attr_ex (integers and arrays only).
        let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
        ex.orig_attr = device_attr(&a);
        ex.phys_port_cnt_ex = u32::from(a.phys_port_cnt);
        let n = attr_size.min(core::mem::size_of::<ibv_device_attr_ex>());
        // SAFETY: `attr` is valid for `attr_size` bytes (inline contract), n ≤ both sizes,
        // and the regions cannot overlap (one is our local).
        unsafe {
            core::ptr::copy_nonoverlapping(
                core::ptr::from_ref(&ex).cast::<u8>(),
                attr.cast::<u8>(),
                n,
            );
        }
        0
    })
}

fn port_attr(p: &uroce::PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state.0,
        max_mtu: p.max_mtu.raw(),
        active_mtu: p.active_mtu.raw(),
        gid_tbl_len: c_i32(p.gid_tbl_len),
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer.0,
        flags: p.flags,
        port_cap_flags2: 0,
    }
}

/// Queries `port` and writes at most `len` bytes of `ibv_port_attr` to `attr`.
///
/// # Safety
/// `attr` is valid for `len` bytes.
unsafe fn query_port_into(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: callers pass the application's context.
    let Some(u) = (unsafe { uctx(context) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    match u.ctx.query_port(port) {
        Ok(p) => {
            let full = port_attr(&p);
            let n = len.min(core::mem::size_of::<ibv_port_attr>());
            // SAFETY: `attr` is valid for `len` ≥ n bytes; source is our local.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    core::ptr::from_ref(&full).cast::<u8>(),
                    attr.cast::<u8>(),
                    n,
                );
            }
            0
        }
        Err(e) => errno_of(&e),
    }
}

/// The `query_port` op (the inline `ibv_query_port` passes `port_attr_len` 52).
unsafe extern "C" fn op_query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: the inline passes a buffer of `len` bytes.
    guard_errno(|| unsafe { query_port_into(context, port, attr, len) })
}

/// `int ibv_query_port(struct ibv_context *, uint8_t, struct _compat_ibv_port_attr *)`:
/// the exported symbol, which takes the 48-byte compat struct and must not write beyond it
/// (§3).
///
/// # Safety
/// `context` is a live context; `attr` is valid for 48 bytes.
pub unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the compat struct is COMPAT_PORT_ATTR_LEN bytes.
    guard_errno(|| unsafe { query_port_into(context, port, attr, COMPAT_PORT_ATTR_LEN) })
}

/// `int ibv_query_gid(struct ibv_context *, uint8_t, int, union ibv_gid *)`: 0 (an empty
/// slot reads as all zeros) or −1 with errno.
///
/// # Safety
/// `context` is a live context; `gid` is valid for a write.
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let Ok(index) = u32::try_from(index) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if gid.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        match u.ctx.query_gid(port, index) {
            Ok(g) => {
                // SAFETY: `gid` is valid for a write per the contract.
                unsafe { gid.write(ibv_gid { raw: g.0 }) };
                0
            }
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        }
    })
}

fn gid_entry(u: &UContext, port: u8, index: u32) -> Result<ibv_gid_entry, c_int> {
    let e = u
        .ctx
        .query_gid_entry(port, index)
        .map_err(|e| errno_of(&e))?;
    Ok(ibv_gid_entry {
        gid: ibv_gid { raw: e.gid.0 },
        gid_index: index,
        port_num: u32::from(port),
        gid_type: e.gid_type.0,
        ndev_ifindex: 0,
    })
}

/// `int _ibv_query_gid_ex(ctx, port_num, gid_index, struct ibv_gid_entry *, flags,
/// entry_size)` (IBVERBS_1.11; the inline `ibv_query_gid_ex` passes `entry_size` 32):
/// 0, ENODATA for an empty slot, EOPNOTSUPP for non-zero flags, or another errno.
///
/// # Safety
/// `context` is a live context; `entry` is valid for `entry_size` bytes.
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            return libc::EINVAL;
        };
        if flags != 0 {
            return libc::EOPNOTSUPP;
        }
        let Ok(port) = u8::try_from(port) else {
            return libc::EINVAL;
        };
        if entry.is_null() || entry_size < offset_of!(ibv_gid_entry, ndev_ifindex) {
            return libc::EINVAL;
        }
        match gid_entry(u, port, index) {
            Ok(e) => {
                let n = entry_size.min(core::mem::size_of::<ibv_gid_entry>());
                // SAFETY: `entry` is valid for `entry_size` ≥ n bytes; source is a local.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        core::ptr::from_ref(&e).cast::<u8>(),
                        entry.cast::<u8>(),
                        n,
                    );
                }
                0
            }
            Err(e) => e,
        }
    })
}

/// `ssize_t _ibv_query_gid_table(ctx, struct ibv_gid_entry *, size_t max_entries, flags,
/// entry_size)`: the valid GIDs of every port, or a negative errno.
///
/// # Safety
/// `context` is a live context; `entries` is valid for `max_entries × entry_size` bytes.
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = guard(-(libc::EIO as isize), || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            return -(libc::EINVAL as isize);
        };
        if flags != 0 {
            return -(libc::EOPNOTSUPP as isize);
        }
        let esz = core::mem::size_of::<ibv_gid_entry>();
        if entry_size < esz || (entries.is_null() && max_entries > 0) {
            return -(libc::EINVAL as isize);
        }
        let ports = match u.ctx.query_device() {
            Ok(a) => a.phys_port_cnt,
            Err(e) => return -(errno_of(&e) as isize),
        };
        let mut n = 0usize;
        for port in 1..=ports {
            let len = match u.ctx.query_port(port) {
                Ok(p) => p.gid_tbl_len,
                Err(e) => return -(errno_of(&e) as isize),
            };
            for index in 0..len {
                let e = match gid_entry(u, port, index) {
                    Ok(e) => e,
                    Err(libc::ENODATA) => continue,
                    Err(e) => return -(e as isize),
                };
                if n >= max_entries {
                    return -(libc::EINVAL as isize);
                }
                // SAFETY: n < max_entries, and the caller's array holds max_entries slots of
                // entry_size ≥ esz bytes; the write covers the first esz bytes of slot n.
                unsafe {
                    let slot = entries.cast::<u8>().add(n * entry_size);
                    core::ptr::copy_nonoverlapping(core::ptr::from_ref(&e).cast::<u8>(), slot, esz);
                }
                n += 1;
            }
        }
        isize::try_from(n).unwrap_or(isize::MAX)
    });
    if r < 0 {
        set_errno(c_int::try_from(-r).unwrap_or(libc::EIO));
    }
    r
}

/// `int ibv_query_gid_type(ctx, port_num, index, enum ibv_gid_type_sysfs *)`
/// (IBVERBS_PRIVATE_34, used by ibv_devinfo): RoCE v2 → `IBV_GID_TYPE_SYSFS_ROCE_V2`; an
/// empty slot reads as `IB_ROCE_V1`, as upstream. 0 or −1 with errno.
///
/// # Safety
/// `context` is a live context; `gid_type` is valid for a write.
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut ibv_context,
    port: u8,
    index: c_uint,
    gid_type: *mut c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if gid_type.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let t = match u.ctx.query_gid_entry(port, index) {
            Ok(e) if e.gid_type == uroce::GidType::ROCE_V2 => IBV_GID_TYPE_SYSFS_ROCE_V2,
            Ok(_) => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
            Err(e) if e.errno() == Errno::ENODATA => IBV_GID_TYPE_SYSFS_IB_ROCE_V1,
            Err(e) => {
                set_errno(errno_of(&e));
                return -1;
            }
        };
        // SAFETY: valid for a write per the contract.
        unsafe { gid_type.write(t) };
        0
    })
}

/// `int ibv_query_pkey(ctx, port_num, index, __be16 *pkey)`: 0 or −1 with errno.
///
/// # Safety
/// `context` is a live context; `pkey` is valid for a write.
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let Ok(index) = u32::try_from(index) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if pkey.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        match u.ctx.query_pkey(port, index) {
            Ok(p) => {
                // SAFETY: valid for a write per the contract.
                unsafe { pkey.write(p.to_be()) };
                0
            }
            Err(e) => {
                set_errno(errno_of(&e));
                -1
            }
        }
    })
}

/// `int ibv_get_pkey_index(ctx, port_num, __be16 pkey)`: the table index holding `pkey`,
/// or −1 once the table is exhausted (as upstream, which walks `ibv_query_pkey`).
///
/// # Safety
/// `context` is a live context.
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut ibv_context,
    port: u8,
    pkey: u16,
) -> c_int {
    let mut got = 0u16;
    for i in 0..=c_int::from(u16::MAX) {
        // SAFETY: forwarded contract; `got` is a valid local.
        if unsafe { ibv_query_pkey(context, port, i, &mut got) } < 0 {
            return -1;
        }
        if got == pkey {
            return i;
        }
    }
    -1
}

fn element_kind(t: EventType) -> Option<ObjKind> {
    match t {
        EventType::CQ_ERR => Some(ObjKind::Cq),
        EventType::SRQ_ERR | EventType::SRQ_LIMIT_REACHED => Some(ObjKind::Srq),
        EventType::QP_FATAL
        | EventType::QP_REQ_ERR
        | EventType::QP_ACCESS_ERR
        | EventType::COMM_EST
        | EventType::SQ_DRAINED
        | EventType::PATH_MIG
        | EventType::PATH_MIG_ERR
        | EventType::QP_LAST_WQE_REACHED => Some(ObjKind::Qp),
        _ => None,
    }
}

/// `int ibv_get_async_event(struct ibv_context *, struct ibv_async_event *)`: blocks until
/// an event arrives (or, if the application made `context->async_fd` non-blocking, fails
/// with EAGAIN when none is pending); `element` is the C object (or the port number for
/// port events).
/// Events for objects already destroyed are skipped. 0 or −1 with errno.
///
/// # Safety
/// `context` is a live context; `event` is valid for a write.
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the context is live; async_fd is set once at open.
        let fd = unsafe { (*context).async_fd };
        let nonblocking = is_nonblocking(fd);
        loop {
            let next = if nonblocking {
                u.ctx.try_get_async_event()
            } else {
                u.ctx.get_async_event(None)
            };
            let ev = match next {
                Ok(Some(ev)) => ev,
                Ok(None) if nonblocking => {
                    set_errno(libc::EAGAIN);
                    return -1;
                }
                Ok(None) => continue,
                Err(e) => {
                    set_errno(errno_of(&e));
                    return -1;
                }
            };
            let element = match element_kind(ev.event_type) {
                Some(kind) => {
                    let objs = u.objects.lock().unwrap_or_else(|p| p.into_inner());
                    match objs.get(&ev.element) {
                        Some(o) if o.kind == kind => o.ptr as *mut c_void,
                        _ => continue,
                    }
                }
                None => ev.element as usize as *mut c_void,
            };
            // SAFETY: valid for a write per the contract.
            unsafe {
                event.write(ibv_async_event {
                    element,
                    event_type: ev.event_type.0,
                })
            };
            return 0;
        }
    })
}

/// `void ibv_ack_async_event(struct ibv_async_event *)`: counts the event on its object
/// (`events_completed` / `async_events_completed`), as upstream.
///
/// # Safety
/// `event` came from [`ibv_get_async_event`] and its object is still alive.
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: per the contract.
    let ev = unsafe { event.read() };
    let Some(kind) = element_kind(EventType(ev.event_type)) else {
        return;
    };
    if ev.element.is_null() {
        return;
    }
    // SAFETY: the element is the live C object the event named (contract); each counter is
    // only touched under that object's own mutex, as upstream.
    unsafe {
        match kind {
            ObjKind::Cq => {
                let cq = ev.element.cast::<ibv_cq>();
                libc::pthread_mutex_lock(&mut (*cq).mutex);
                (*cq).async_events_completed = (*cq).async_events_completed.wrapping_add(1);
                libc::pthread_cond_signal(&mut (*cq).cond);
                libc::pthread_mutex_unlock(&mut (*cq).mutex);
            }
            ObjKind::Qp => {
                let qp = ev.element.cast::<ibv_qp>();
                libc::pthread_mutex_lock(&mut (*qp).mutex);
                (*qp).events_completed = (*qp).events_completed.wrapping_add(1);
                libc::pthread_cond_signal(&mut (*qp).cond);
                libc::pthread_mutex_unlock(&mut (*qp).mutex);
            }
            ObjKind::Srq => {
                let srq = ev.element.cast::<ibv_srq>();
                libc::pthread_mutex_lock(&mut (*srq).mutex);
                (*srq).events_completed = (*srq).events_completed.wrapping_add(1);
                libc::pthread_cond_signal(&mut (*srq).cond);
                libc::pthread_mutex_unlock(&mut (*srq).mutex);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fw_ver_formats_like_rxe() {
        assert_eq!(fw_ver_text(0), "0.0.0");
        assert_eq!(fw_ver_text((1 << 32) | (2 << 16) | 3), "1.2.3");
    }

    #[test]
    fn async_event_kinds() {
        assert_eq!(element_kind(EventType::CQ_ERR), Some(ObjKind::Cq));
        assert_eq!(element_kind(EventType::COMM_EST), Some(ObjKind::Qp));
        assert_eq!(
            element_kind(EventType::SRQ_LIMIT_REACHED),
            Some(ObjKind::Srq)
        );
        assert_eq!(element_kind(EventType::PORT_ACTIVE), None);
    }

    #[test]
    fn port_attr_copies_fields() {
        let p = uroce::PortAttr {
            state: uroce::PortState(4),
            active_mtu: uroce::Mtu::Mtu1024,
            gid_tbl_len: 2,
            link_layer: uroce::LinkLayer(2),
            ..Default::default()
        };
        let c = port_attr(&p);
        assert_eq!(
            (c.state, c.active_mtu, c.gid_tbl_len, c.link_layer),
            (4, 3, 2, 2)
        );
        assert_eq!(c.port_cap_flags2, 0);
    }
}
