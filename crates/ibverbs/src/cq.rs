//! Completion channels and CQs: `ibv_create_comp_channel`, `ibv_create_cq`,
//! `ibv_get_cq_event`, `ibv_ack_cq_events`, and the `poll_cq` / `req_notify_cq` ops the
//! inline `ibv_poll_cq` / `ibv_req_notify_cq` call.
//!
//! `poll_cq` is the fast path: it copies CQEs straight from the CQ ring into the caller's
//! `ibv_wc` array (the first 48 bytes of a uroce CQE *are* an `ibv_wc`, abi `fastpath`), under
//! the CQ's own lock only — no system call, no allocation.
//!
//! Event accounting follows rdma-core: `ibv_get_cq_event` counts an event as reported on the
//! CQ, `ibv_ack_cq_events` adds to `comp_events_completed` under `cq->mutex` and signals
//! `cq->cond`, and `ibv_destroy_cq` waits until every reported event is acknowledged.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_uint, c_void};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use abi::uverbs;

use crate::context::{errno_of, uctx, ObjKind, UContext};
use crate::types::*;
use crate::util::{
    errno_ret, guard, guard_errno, is_nonblocking, set_blocking, set_errno, OwnerLock,
};

// The poll path reinterprets the caller's `ibv_wc` array as the ABI's `Wc` (CQE prefix).
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<uverbs::Wc>() == size_of::<ibv_wc>());
    assert!(align_of::<uverbs::Wc>() <= align_of::<ibv_wc>());
    assert!(offset_of!(uverbs::Wc, status) == offset_of!(ibv_wc, status));
    assert!(offset_of!(uverbs::Wc, opcode) == offset_of!(ibv_wc, opcode));
    assert!(offset_of!(uverbs::Wc, vendor_err) == offset_of!(ibv_wc, vendor_err));
    assert!(offset_of!(uverbs::Wc, byte_len) == offset_of!(ibv_wc, byte_len));
    assert!(offset_of!(uverbs::Wc, ex) == offset_of!(ibv_wc, imm_data));
    assert!(offset_of!(uverbs::Wc, qp_num) == offset_of!(ibv_wc, qp_num));
    assert!(offset_of!(uverbs::Wc, src_qp) == offset_of!(ibv_wc, src_qp));
    assert!(offset_of!(uverbs::Wc, wc_flags) == offset_of!(ibv_wc, wc_flags));
    assert!(offset_of!(uverbs::Wc, pkey_index) == offset_of!(ibv_wc, pkey_index));
    assert!(offset_of!(uverbs::Wc, slid) == offset_of!(ibv_wc, slid));
    assert!(offset_of!(uverbs::Wc, sl) == offset_of!(ibv_wc, sl));
    assert!(offset_of!(uverbs::Wc, dlid_path_bits) == offset_of!(ibv_wc, dlid_path_bits));
};

/// A completion channel.
#[repr(C)]
#[derive(Debug)]
pub struct UChannel {
    ibv: ibv_comp_channel,
    ch: uroce::CompChannel,
    /// CQs reporting here: verbs `user_handle` → `UCq` address.
    cqs: Mutex<HashMap<u64, usize>>,
}

/// A completion queue. `ibv` and `ex` together are a `struct ibv_cq_ex` (rdma-core's
/// `verbs_cq` is the union of both), so every CQ can be used through `ibv_poll_cq`, and one
/// made by `ibv_create_cq_ex` also through `ibv_start_poll` and the `ibv_wc_read_*` inlines.
#[repr(C)]
pub struct UCq {
    pub(crate) ibv: ibv_cq,
    ex: ibv_cq_ex_tail,
    pub(crate) cq: Option<uroce::Cq>,
    /// Events handed out by `ibv_get_cq_event` (compared with `comp_events_completed`).
    reported: AtomicU32,
    /// The completion `start_poll`/`next_poll` took from the ring; the `read_*` functions
    /// read it. Only the thread inside a poll batch (holding `polling`) touches it.
    cur: UnsafeCell<uverbs::Wc>,
    /// The wall-clock stamp of `cur` (CQs made with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`, whose CQEs carry one).
    cur_ts: UnsafeCell<u64>,
    /// Whether this CQ's CQEs are stamped.
    stamped: bool,
    /// Held from a successful `start_poll` until `end_poll`, as rxe holds its CQ lock.
    polling: OwnerLock,
}

const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(UCq, ibv) == 0);
    assert!(offset_of!(UCq, ex) == core::mem::size_of::<ibv_cq>());
};

impl std::fmt::Debug for UCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UCq").field("cq", &self.cq).finish()
    }
}

/// # Safety
/// `cq` is NULL or a live CQ from [`ibv_create_cq`].
pub(crate) unsafe fn ucq<'a>(cq: *mut ibv_cq) -> Option<&'a UCq> {
    // SAFETY: a non-NULL CQ pointer is the first field of a live boxed UCq.
    unsafe { cq.cast::<UCq>().as_ref() }
}

/// `struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *)`: its `fd` is a
/// real descriptor that becomes readable when an armed CQ completes.
///
/// # Safety
/// `context` is a live context.
pub unsafe extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        match u.ctx.create_comp_channel() {
            Ok(ch) => {
                set_blocking(ch.as_raw_fd());
                let b = Box::new(UChannel {
                    ibv: ibv_comp_channel {
                        context,
                        fd: ch.as_raw_fd(),
                        refcnt: 0,
                    },
                    ch,
                    cqs: Mutex::new(HashMap::new()),
                });
                u.retain();
                Box::into_raw(b).cast::<ibv_comp_channel>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// `int ibv_destroy_comp_channel(struct ibv_comp_channel *)`: EBUSY while CQs use it.
///
/// # Safety
/// `channel` came from [`ibv_create_comp_channel`]; after success it is not used again.
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    guard_errno(|| {
        if channel.is_null() {
            return libc::EINVAL;
        }
        let c = channel.cast::<UChannel>();
        // SAFETY: a live boxed UChannel per the contract.
        let Some(u) = (unsafe { uctx((*c).ibv.context) }) else {
            return libc::EINVAL;
        };
        let _g = u.lock.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: refcnt is only changed under the context lock we hold.
        if unsafe { (*c).ibv.refcnt } != 0 {
            return libc::EBUSY;
        }
        // SAFETY: the leaked Box<UChannel>, reclaimed once; no CQ refers to it any more.
        drop(unsafe { Box::from_raw(c) });
        u.release();
        0
    })
}

/// Creates a CQ and its box; `ex` is its `ibv_cq_ex` tail (zero for `ibv_create_cq`); `pd`
/// a parent domain whose allocator gives the ring.
///
/// # Safety
/// `channel` is NULL or a live channel of `u`'s context.
#[allow(clippy::too_many_arguments)]
unsafe fn new_cq(
    u: &UContext,
    context: *mut ibv_context,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    vector: u32,
    ex: ibv_cq_ex_tail,
    pd: Option<&uroce::Pd>,
) -> Result<*mut UCq, c_int> {
    let stamped = ex.read_completion_wallclock_ns.is_some();
    let chan = channel.cast::<UChannel>();
    // SAFETY: NULL or a live channel per the contract.
    let ch = unsafe { chan.as_ref() };
    let cq = u
        .ctx
        .create_cq_ex(cqe, ch.map(|c| &c.ch), vector, pd, stamped)
        .map_err(|e| errno_of(&e))?;
    let b = Box::new(UCq {
        ibv: ibv_cq {
            context,
            channel,
            cq_context,
            handle: cq.handle(),
            cqe: c_int::try_from(cq.cqe()).unwrap_or(c_int::MAX),
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            cond: libc::PTHREAD_COND_INITIALIZER,
            comp_events_completed: 0,
            async_events_completed: 0,
        },
        ex,
        reported: AtomicU32::new(0),
        cq: Some(cq),
        cur: UnsafeCell::new(uverbs::Wc::default()),
        cur_ts: UnsafeCell::new(0),
        stamped,
        polling: OwnerLock::default(),
    });
    let user_handle = b.cq.as_ref().map_or(0, uroce::Cq::user_handle);
    let ptr = Box::into_raw(b);
    if let Some(c) = ch {
        let _g = u.lock.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: refcnt is only changed under the context lock we hold; the channel is
        // live per the contract.
        unsafe { (*chan).ibv.refcnt += 1 };
        c.cqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(user_handle, ptr as usize);
    }
    u.register(user_handle, ObjKind::Cq, ptr as usize);
    u.retain();
    Ok(ptr)
}

/// `struct ibv_cq *ibv_create_cq(ctx, int cqe, void *cq_context, struct ibv_comp_channel *,
/// int comp_vector)`. `cq->cqe` is the size actually granted.
///
/// # Safety
/// `context` is a live context; `channel` is NULL or a live channel of that context.
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        let (Ok(cqe), Ok(vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        // SAFETY: an all-zero tail is valid (integers and `None` function pointers).
        let tail = unsafe { core::mem::zeroed() };
        // SAFETY: forwarded contract.
        match unsafe { new_cq(u, context, cqe, cq_context, channel, vector, tail, None) } {
            Ok(p) => p.cast::<ibv_cq>(),
            Err(e) => {
                set_errno(e);
                core::ptr::null_mut()
            }
        }
    })
}

/// The `create_cq_ex` op (the inline `ibv_create_cq_ex`). Checks as rdma-core 44 does for
/// rxe: `comp_mask` within `FLAGS | PD` (`ibv_cmd_create_cq_ex`), `wc_flags` within
/// `IBV_WC_STANDARD_FLAGS` (`providers/rxe/rxe.c`, `RXE_SUP_WC_EX_FLAGS`: no free-running
/// completion timestamps, CVLAN, flow tag or tag matching) plus
/// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK` (each CQE stamped by the device with
/// `CLOCK_REALTIME` when written), otherwise EOPNOTSUPP. Of the creation
/// flags, `SINGLE_THREADED` is a hint and accepted; `IGNORE_OVERRUN` (which the kernel rxe
/// refuses) and unknown bits are EOPNOTSUPP. With `IBV_CQ_INIT_ATTR_MASK_PD`,
/// `parent_domain` must be a parent domain of this context (EINVAL otherwise, as mlx5); its
/// allocator gives the ring (docs/compat.md §11.6). `read_byte_len` … `read_dlid_path_bits` are set only when their
/// `IBV_WC_EX_WITH_*` flag was asked for, as rxe sets them; `read_opcode`,
/// `read_vendor_err` and `read_wc_flags` always.
///
/// # Safety
/// Called by the inline `ibv_create_cq_ex` with a live context and a valid `attr`.
pub(crate) unsafe extern "C" fn op_create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq {
    guard(core::ptr::null_mut(), || {
        let fail = |e: c_int| {
            set_errno(e);
            core::ptr::null_mut()
        };
        // SAFETY: per the contract.
        let (Some(u), Some(a)) = (unsafe { uctx(context) }, unsafe { attr.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        if a.wc_flags & !(wc_ex::STANDARD | wc_ex::COMPLETION_TIMESTAMP_WALLCLOCK) != 0 {
            return fail(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
            && a.flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
        {
            return fail(libc::EOPNOTSUPP);
        }
        // A parent domain (`IBV_CQ_INIT_ATTR_MASK_PD`) gives the ring its memory; a plain
        // PD there is EINVAL, as rdma-core's providers refuse it.
        let pd = if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 {
            // SAFETY: NULL or a live PD of this context (contract).
            match unsafe { crate::objects::upd(a.parent_domain) } {
                Some(p) if p.pd.is_parent_domain() && p.ibv.context == context => Some(p),
                _ => return fail(libc::EINVAL),
            }
        } else {
            None
        };
        let want = |f: u64| a.wc_flags & f != 0;
        let tail = ibv_cq_ex_tail {
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            start_poll: Some(ex_start_poll),
            next_poll: Some(ex_next_poll),
            end_poll: Some(ex_end_poll),
            read_opcode: Some(ex_read_opcode),
            read_vendor_err: Some(ex_read_vendor_err),
            read_byte_len: want(wc_ex::BYTE_LEN).then_some(ex_read_byte_len as _),
            read_imm_data: want(wc_ex::IMM).then_some(ex_read_imm_data as _),
            read_qp_num: want(wc_ex::QP_NUM).then_some(ex_read_qp_num as _),
            read_src_qp: want(wc_ex::SRC_QP).then_some(ex_read_src_qp as _),
            read_wc_flags: Some(ex_read_wc_flags),
            read_slid: want(wc_ex::SLID).then_some(ex_read_slid as _),
            read_sl: want(wc_ex::SL).then_some(ex_read_sl as _),
            read_dlid_path_bits: want(wc_ex::DLID_PATH_BITS).then_some(ex_read_dlid_path_bits as _),
            read_completion_ts: None,
            read_cvlan: None,
            read_flow_tag: None,
            read_tm_info: None,
            read_completion_wallclock_ns: want(wc_ex::COMPLETION_TIMESTAMP_WALLCLOCK)
                .then_some(ex_read_completion_wallclock_ns as _),
        };
        // SAFETY: a live channel of this context or NULL (contract).
        match unsafe {
            new_cq(
                u,
                context,
                a.cqe,
                a.cq_context,
                a.channel,
                a.comp_vector,
                tail,
                pd.map(|p| &p.pd),
            )
        } {
            Ok(p) => p.cast::<ibv_cq>(),
            Err(e) => fail(e),
        }
    })
}

/// `read_completion_wallclock_ns`: the wall-clock time (ns since the epoch) the device
/// wrote the current completion.
///
/// # Safety
/// Called inside a poll batch on a CQ made with the WALLCLOCK flag (C API contract).
unsafe extern "C" fn ex_read_completion_wallclock_ns(cq: *mut ibv_cq) -> u64 {
    // SAFETY: a live UCq; only the poll batch's owner calls this.
    unsafe { cq.cast::<UCq>().as_ref() }.map_or(0, |c| unsafe { *c.cur_ts.get() })
}

/// Takes the next completion off the ring into `cur` and mirrors its `status` and `wr_id`
/// into the `ibv_cq_ex`; ENOENT when the ring is empty.
///
/// # Safety
/// `c` is a live CQ whose `polling` flag the caller holds.
unsafe fn ex_take(c: *mut UCq) -> c_int {
    // SAFETY: live CQ (contract).
    let Some(inner) = (unsafe { (*c).cq.as_ref() }) else {
        return libc::EINVAL;
    };
    // SAFETY: only the holder of `polling` touches `cur`.
    let cur = unsafe { &mut *(*c).cur.get() };
    // SAFETY: live CQ (contract).
    if unsafe { (*c).stamped } {
        return match inner.poll_raw_stamped(cur) {
            Ok(Some(ts)) => {
                // SAFETY: as above; only the holder of `polling` touches these.
                unsafe {
                    *(*c).cur_ts.get() = ts;
                    (*c).ex.status = cur.status;
                    (*c).ex.wr_id = cur.wr_id;
                }
                0
            }
            Ok(None) => libc::ENOENT,
            Err(e) => errno_of(&e),
        };
    }
    match inner.poll_raw(core::slice::from_mut(cur)) {
        Ok(1) => {
            // SAFETY: as above; `status`/`wr_id` are written only inside a poll batch.
            unsafe {
                (*c).ex.status = cur.status;
                (*c).ex.wr_id = cur.wr_id;
            }
            0
        }
        Ok(_) => libc::ENOENT,
        Err(e) => errno_of(&e),
    }
}

/// `start_poll`: 0 with the first completion current, or ENOENT (nothing to poll; the batch
/// is not open and `end_poll` must not be called) or another errno.
unsafe extern "C" fn ex_start_poll(cq: *mut ibv_cq, attr: *mut ibv_poll_cq_attr) -> c_int {
    let c = cq.cast::<UCq>();
    if c.is_null() {
        return errno_ret(libc::EINVAL);
    }
    // SAFETY: `attr` is NULL or valid (contract); the only comp_mask defined is 0.
    if unsafe { attr.as_ref() }.is_some_and(|a| a.comp_mask != 0) {
        return errno_ret(libc::EINVAL);
    }
    // SAFETY: live CQ (contract).
    let polling = unsafe { &(*c).polling };
    polling.acquire();
    // SAFETY: we hold `polling`.
    let r = unsafe { ex_take(c) };
    if r != 0 {
        polling.release();
        return errno_ret(r);
    }
    0
}

/// `next_poll`: 0 with the next completion current, or ENOENT; the batch stays open until
/// `end_poll` either way.
unsafe extern "C" fn ex_next_poll(cq: *mut ibv_cq) -> c_int {
    let c = cq.cast::<UCq>();
    // SAFETY: a live CQ inside a batch (contract).
    if c.is_null() || !unsafe { (*c).polling.held() } {
        return errno_ret(libc::EINVAL);
    }
    // SAFETY: the caller is the thread that opened the batch.
    errno_ret(unsafe { ex_take(c) })
}

/// `end_poll`: closes the batch (the completions read are already consumed).
unsafe extern "C" fn ex_end_poll(cq: *mut ibv_cq) {
    let c = cq.cast::<UCq>();
    if !c.is_null() {
        // SAFETY: live CQ (contract).
        unsafe { (*c).polling.release() };
    }
}

/// The current completion of a poll batch.
///
/// # Safety
/// `cq` is a live CQ inside a poll batch of the calling thread.
unsafe fn cur<'a>(cq: *mut ibv_cq) -> &'a uverbs::Wc {
    // SAFETY: per the contract; only this thread writes `cur` while the batch is open.
    unsafe { &*(*cq.cast::<UCq>()).cur.get() }
}

unsafe extern "C" fn ex_read_opcode(cq: *mut ibv_cq) -> u32 {
    // SAFETY: contract of the `ibv_wc_read_*` inlines: inside a batch.
    unsafe { cur(cq) }.opcode
}
unsafe extern "C" fn ex_read_vendor_err(cq: *mut ibv_cq) -> u32 {
    // SAFETY: as above.
    unsafe { cur(cq) }.vendor_err
}
unsafe extern "C" fn ex_read_byte_len(cq: *mut ibv_cq) -> u32 {
    // SAFETY: as above.
    unsafe { cur(cq) }.byte_len
}
/// The immediate in network byte order (`__be32`), as `ibv_wc.imm_data`.
unsafe extern "C" fn ex_read_imm_data(cq: *mut ibv_cq) -> u32 {
    // SAFETY: as above.
    unsafe { cur(cq) }.ex
}
unsafe extern "C" fn ex_read_qp_num(cq: *mut ibv_cq) -> u32 {
    // SAFETY: as above.
    unsafe { cur(cq) }.qp_num
}
unsafe extern "C" fn ex_read_src_qp(cq: *mut ibv_cq) -> u32 {
    // SAFETY: as above.
    unsafe { cur(cq) }.src_qp
}
unsafe extern "C" fn ex_read_wc_flags(cq: *mut ibv_cq) -> c_uint {
    // SAFETY: as above.
    unsafe { cur(cq) }.wc_flags
}
unsafe extern "C" fn ex_read_slid(cq: *mut ibv_cq) -> u32 {
    // SAFETY: as above.
    u32::from(unsafe { cur(cq) }.slid)
}
unsafe extern "C" fn ex_read_sl(cq: *mut ibv_cq) -> u8 {
    // SAFETY: as above.
    unsafe { cur(cq) }.sl
}
unsafe extern "C" fn ex_read_dlid_path_bits(cq: *mut ibv_cq) -> u8 {
    // SAFETY: as above.
    unsafe { cur(cq) }.dlid_path_bits
}

/// `int ibv_resize_cq(struct ibv_cq *, int cqe)`: `cq->cqe` becomes the new size.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    guard_errno(|| {
        let c = cq.cast::<UCq>();
        // SAFETY: per the contract.
        let Some(inner) = (unsafe { c.as_ref() }).and_then(|c| c.cq.as_ref()) else {
            return libc::EINVAL;
        };
        let Ok(cqe) = u32::try_from(cqe) else {
            return libc::EINVAL;
        };
        match inner.resize(cqe) {
            Ok(n) => {
                // SAFETY: live CQ; `cqe` is written only by create and resize.
                unsafe { (*c).ibv.cqe = c_int::try_from(n).unwrap_or(c_int::MAX) };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `int ibv_destroy_cq(struct ibv_cq *)`: waits until every event handed out for it has
/// been acknowledged, then destroys it; EBUSY (CQ intact) while QPs still use it.
///
/// # Safety
/// `cq` came from [`ibv_create_cq`]; after success it is not used again.
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    guard_errno(|| {
        let c = cq.cast::<UCq>();
        // SAFETY: NULL or a live boxed UCq per the contract.
        let Some(uc) = (unsafe { c.as_ref() }) else {
            return libc::EINVAL;
        };
        let Some(user_handle) = uc.cq.as_ref().map(uroce::Cq::user_handle) else {
            return libc::EINVAL;
        };
        let (context, channel) = (uc.ibv.context, uc.ibv.channel);
        // SAFETY: a CQ's context and channel outlive it (C API contract; the channel's
        // refcnt keeps ibv_destroy_comp_channel from freeing it).
        let (u, ch): (Option<&UContext>, Option<&UChannel>) =
            unsafe { (uctx(context), channel.cast::<UChannel>().as_ref()) };
        // Stop handing out new events for this CQ (an event found before this point was
        // counted as reported under the same lock, so the wait below covers it).
        if let Some(ch) = ch {
            ch.cqs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&user_handle);
        }
        // SAFETY: the box stays alive until the end of this function; events are counted
        // under its mutex, as upstream.
        unsafe {
            libc::pthread_mutex_lock(&mut (*c).ibv.mutex);
            while (*c).ibv.comp_events_completed != (*c).reported.load(Ordering::Acquire) {
                libc::pthread_cond_wait(&mut (*c).ibv.cond, &mut (*c).ibv.mutex);
            }
            libc::pthread_mutex_unlock(&mut (*c).ibv.mutex);
        }
        // SAFETY: only this call touches the UCq's verbs object now.
        let Some(inner) = (unsafe { (*c).cq.take() }) else {
            return libc::EINVAL;
        };
        if let Err((e, back)) = inner.destroy() {
            // SAFETY: as above; the CQ stays alive and owned by its box.
            unsafe { (*c).cq = Some(back) };
            if let Some(ch) = ch {
                ch.cqs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(user_handle, c as usize);
            }
            return errno_of(&e);
        }
        if let Some(u) = u {
            u.unregister(user_handle);
            u.release();
            if ch.is_some() {
                let _g = u.lock.lock().unwrap_or_else(|p| p.into_inner());
                // SAFETY: refcnt is only changed under the context lock we hold.
                unsafe { (*channel).refcnt -= 1 };
            }
        }
        // SAFETY: the leaked Box<UCq>, reclaimed once.
        drop(unsafe { Box::from_raw(c) });
        0
    })
}

/// `int ibv_get_cq_event(struct ibv_comp_channel *, struct ibv_cq **, void **cq_context)`:
/// blocks until an armed CQ of this channel completes — unless the application made
/// `channel->fd` non-blocking, in which case no pending event is −1 with EAGAIN, as with
/// the kernel's event file. 0 or −1 with errno.
///
/// # Safety
/// `channel` is a live channel; `cq` and `cq_context` are valid for writes.
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(ch) = (unsafe { channel.cast::<UChannel>().as_ref() }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        let nonblocking = is_nonblocking(ch.ibv.fd);
        loop {
            let next = if nonblocking {
                ch.ch.try_get_event()
            } else {
                ch.ch.get_event(None)
            };
            let got = match next {
                Ok(Some(c)) => c,
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
            let c = {
                let map = ch.cqs.lock().unwrap_or_else(|p| p.into_inner());
                let Some(&ptr) = map.get(&got.user_handle()) else {
                    continue;
                };
                let c = ptr as *mut UCq;
                // SAFETY: a CQ in the map is live; ibv_destroy_cq removes it under this lock
                // before waiting for the events reported so far, this one included.
                unsafe { (*c).reported.fetch_add(1, Ordering::AcqRel) };
                c
            };
            // SAFETY: the CQ cannot be freed before the application acknowledges this
            // event (see above); the out-parameters are valid per the contract.
            unsafe {
                cq.write(c.cast::<ibv_cq>());
                cq_context.write((*c).ibv.cq_context);
            }
            return 0;
        }
    })
}

/// `void ibv_ack_cq_events(struct ibv_cq *, unsigned int nevents)`.
///
/// # Safety
/// `cq` is a live CQ.
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    let c = cq.cast::<UCq>();
    if c.is_null() {
        return;
    }
    // SAFETY: a live CQ per the contract; the counter is updated under its mutex.
    unsafe {
        if let Some(inner) = &(*c).cq {
            inner.ack_events(nevents);
        }
        libc::pthread_mutex_lock(&mut (*c).ibv.mutex);
        (*c).ibv.comp_events_completed = (*c).ibv.comp_events_completed.wrapping_add(nevents);
        libc::pthread_cond_signal(&mut (*c).ibv.cond);
        libc::pthread_mutex_unlock(&mut (*c).ibv.mutex);
    }
}

/// The `poll_cq` op: up to `num_entries` completions into `wc`; returns how many, or a
/// negative value on error (a broken ring).
///
/// # Safety
/// Called by the inline `ibv_poll_cq` with a live CQ and room for `num_entries` `ibv_wc`s.
pub(crate) unsafe extern "C" fn op_poll_cq(
    cq: *mut ibv_cq,
    num_entries: c_int,
    wc: *mut ibv_wc,
) -> c_int {
    // SAFETY: per the contract.
    let Some(inner) = (unsafe { ucq(cq) }).and_then(|c| c.cq.as_ref()) else {
        set_errno(libc::EINVAL);
        return -1;
    };
    let n = usize::try_from(num_entries).unwrap_or(0);
    if n == 0 || wc.is_null() {
        return 0;
    }
    // SAFETY: the caller's array holds `n` ibv_wc, and uverbs::Wc has the same size,
    // field offsets and no stricter alignment (asserted above); any bytes are a valid Wc.
    let out = unsafe { core::slice::from_raw_parts_mut(wc.cast::<uverbs::Wc>(), n) };
    match inner.poll_raw(out) {
        Ok(got) => c_int::try_from(got).unwrap_or(c_int::MAX),
        Err(e) => {
            set_errno(errno_of(&e));
            -1
        }
    }
}

/// The `req_notify_cq` op: arm the CQ (`solicited_only` non-zero: only solicited and error
/// completions raise the event). 0 or an errno.
///
/// # Safety
/// Called by the inline `ibv_req_notify_cq` with a live CQ.
pub(crate) unsafe extern "C" fn op_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: per the contract.
    let Some(inner) = (unsafe { ucq(cq) }).and_then(|c| c.cq.as_ref()) else {
        return errno_ret(libc::EINVAL);
    };
    match inner.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => errno_ret(errno_of(&e)),
    }
}
