//! QPs and SRQs: create/modify/query/destroy, and the `post_send` / `post_recv` /
//! `post_srq_recv` ops the inline `ibv_post_*` functions call.
//!
//! # The post path
//!
//! An application's post list is a linked list of `ibv_send_wr`; the `verbs` API takes a
//! slice of [`uroce::SendWr`]. Each op walks the list and builds the slice in a fixed-size
//! array on the stack (no allocation), in chunks of [`CHUNK`] WRs; each chunk is one
//! `verbs` post — WQEs written into the ring, one Release store, one doorbell — so a post
//! list of up to [`CHUNK`] WRs costs exactly one doorbell, as with rdma-core's providers.
//! Gather lists are not copied: `ibv_sge` and the ABI's `Sge` have the same layout
//! (asserted below), so the slice points at the application's array. Inline data is read
//! straight from the application's buffer for a one-element gather list; only a multi-element
//! inline gather list is first gathered into a 256-byte stack buffer (rdma-core copies inline
//! data too). On failure, `*bad_wr` is the first WR not posted and the ones before it were
//! posted, as the C API requires.

use core::ffi::c_int;
use core::mem::MaybeUninit;
use std::time::{Duration, Instant};

use abi::uverbs::Sge;
use uroce::{
    AccessFlags, Mtu, Payload, QpAttr, QpAttrMask, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    Remote, SendFlags, SendWr, SrqAttr, SrqAttrMask, WrOpcode,
};

use crate::context::{errno_of, uctx, ObjKind};
use crate::cq::ucq;
use crate::objects::{ah_attr_from_c, ah_attr_to_c, uah, upd};
use crate::types::*;
use crate::util::{errno_ret, guard, guard_errno, set_errno};

/// WRs converted and posted per `verbs` call (one doorbell each).
pub const CHUNK: usize = 32;

/// Largest inline payload gathered from more than one SGE (the WQE's inline limit,
/// abi `fastpath::MAX_INLINE_DATA`).
const GATHER_BYTES: usize = abi::fastpath::MAX_INLINE_DATA as usize;

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Sge>() == size_of::<ibv_sge>());
    assert!(align_of::<Sge>() <= align_of::<ibv_sge>());
    assert!(offset_of!(Sge, addr) == offset_of!(ibv_sge, addr));
    assert!(offset_of!(Sge, length) == offset_of!(ibv_sge, length));
    assert!(offset_of!(Sge, lkey) == offset_of!(ibv_sge, lkey));
};

/// A queue pair. `ibv` and `ex` together are a `struct ibv_qp_ex` (rdma-core's `verbs_qp`
/// is the union of both); `ex` is filled only for QPs made by `ibv_create_qp_ex`
/// (`ibv_qp_to_qp_ex` returns NULL for the others), see [`crate::qp_ex`].
#[repr(C)]
pub struct UQp {
    ibv: ibv_qp,
    pub(crate) ex: ibv_qp_ex_tail,
    pub(crate) qp: Option<uroce::Qp>,
    /// Made through the `create_qp_ex` op (rdma-core's `VERBS_QP_EX`).
    pub(crate) is_ex: bool,
    /// The `ibv_wr_*` batch between `wr_start` and `wr_complete`/`wr_abort`.
    pub(crate) batch: crate::qp_ex::BatchCell,
}

const _: () = {
    use core::mem::offset_of;
    assert!(offset_of!(UQp, ibv) == 0);
    assert!(offset_of!(UQp, ex) == core::mem::size_of::<ibv_qp>());
};

/// A shared receive queue.
#[repr(C)]
pub struct USrq {
    ibv: ibv_srq,
    srq: Option<uroce::Srq>,
}

impl UQp {
    /// The verbs QP behind it (rdma_cm moves it through its states).
    pub(crate) fn verbs_qp(&self) -> Option<uroce::Qp> {
        self.qp.clone()
    }

    /// Record a state the QP was moved to outside `ibv_modify_qp` (`qp->state`).
    pub(crate) fn set_state(&mut self, state: u32) {
        self.ibv.state = state;
    }
}

impl std::fmt::Debug for UQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UQp").field("qp", &self.qp).finish()
    }
}

impl std::fmt::Debug for USrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("USrq").field("srq", &self.srq).finish()
    }
}

/// The application's gather list as ABI SGEs, without copying.
///
/// # Safety
/// `sg_list` points to `num_sge` valid `ibv_sge`s (C API contract) that outlive `'a`.
unsafe fn sges<'a>(sg_list: *mut ibv_sge, num_sge: c_int) -> Result<&'a [Sge], c_int> {
    let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if sg_list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: `n` valid ibv_sge per the contract; Sge has the same layout (asserted above).
    Ok(unsafe { core::slice::from_raw_parts(sg_list.cast::<Sge>(), n) })
}

/// Converts one `ibv_send_wr`. `gather` is the chunk's inline gather buffer, used at most
/// once per chunk (`gather_used`); a second multi-SGE inline WR returns `Ok(None)` so the
/// caller starts a new chunk for it.
///
/// # Safety
/// `w` and everything it points to (gather list, inline data, AH) are valid for `'a`
/// (C API contract); `gather` outlives `'a`.
unsafe fn send_wr<'a>(
    w: &ibv_send_wr,
    ud: bool,
    gather: *mut u8,
    gather_used: &mut bool,
) -> Result<Option<SendWr<'a>>, c_int> {
    // SAFETY: forwarded contract.
    let list: &'a [Sge] = unsafe { sges(w.sg_list, w.num_sge) }?;
    let flags = SendFlags(w.send_flags);
    let payload = if flags.contains(SendFlags::INLINE) {
        match list {
            [] => Payload::Inline(&[]),
            [one] => {
                let len = one.length as usize;
                if len > 0 && one.addr == 0 {
                    return Err(libc::EINVAL);
                }
                // SAFETY: inline data is read from the application's buffer, which is valid
                // for `length` bytes (contract), exactly as rdma-core memcpy's it.
                Payload::Inline(unsafe {
                    core::slice::from_raw_parts(one.addr as usize as *const u8, len)
                })
            }
            many => {
                if *gather_used {
                    return Ok(None);
                }
                let total: usize = many.iter().map(|s| s.length as usize).sum();
                if total > GATHER_BYTES {
                    return Err(libc::EINVAL);
                }
                let mut off = 0usize;
                for s in many {
                    let len = s.length as usize;
                    // SAFETY: source valid for `len` bytes (contract); destination has room
                    // (off + len ≤ total ≤ GATHER_BYTES) and is our own stack buffer.
                    unsafe {
                        core::ptr::copy_nonoverlapping(
                            s.addr as usize as *const u8,
                            gather.add(off),
                            len,
                        );
                    }
                    off += len;
                }
                *gather_used = true;
                // SAFETY: the first `total` bytes of the buffer were just written.
                Payload::Inline(unsafe { core::slice::from_raw_parts(gather, total) })
            }
        }
    } else {
        Payload::Sges(list)
    };
    // An opcode outside `enum ibv_wr_opcode` is refused at post, as the providers do.
    let opcode = WrOpcode::from_raw(w.opcode).ok_or(libc::EINVAL)?;
    let remote = if ud {
        let d = w.ud();
        // SAFETY: a UD WR names a live AH (contract).
        let Some(ah) = (unsafe { uah(d.ah) }) else {
            return Err(libc::EINVAL);
        };
        Remote::Ud {
            ah: &ah.ah,
            remote_qpn: d.remote_qpn,
            remote_qkey: d.remote_qkey,
        }
    } else {
        match opcode {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm | WrOpcode::RdmaRead => {
                let r = w.rdma();
                Remote::Rdma {
                    addr: r.remote_addr,
                    rkey: r.rkey,
                }
            }
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                let a = w.atomic();
                Remote::Atomic {
                    addr: a.remote_addr,
                    rkey: a.rkey,
                    compare_add: a.compare_add,
                    swap: a.swap,
                }
            }
            WrOpcode::BindMw => {
                let b = w.bind_mw();
                // SAFETY: a BIND_MW WR names a live window and a NULL or live MR (contract).
                let Some(mw) = (unsafe { b.mw.cast::<ibv_mw>().as_ref() }) else {
                    return Err(libc::EINVAL);
                };
                // SAFETY: as above.
                let lkey = unsafe { b.bind_info.mr.as_ref() }.map_or(0, |m| m.lkey);
                Remote::MwBind {
                    mw_rkey: mw.rkey,
                    new_rkey: b.rkey,
                    lkey,
                    addr: b.bind_info.addr,
                    length: b.bind_info.length,
                    access: b.bind_info.mw_access_flags,
                }
            }
            _ => Remote::None,
        }
    };
    Ok(Some(SendWr {
        wr_id: w.wr_id,
        opcode,
        send_flags: flags,
        payload,
        // C carries the immediate in network byte order; verbs takes it in host order.
        imm_data: u32::from_be(w.imm_data),
        invalidate_rkey: w.imm_data,
        remote,
        xrc_remote_srqn: w.xrc_remote_srqn,
    }))
}

/// The `index`-th WR after `first` (where a post error points `bad_wr`).
///
/// # Safety
/// The list from `first` has more than `index` elements (they were just converted).
unsafe fn nth<T>(first: *mut T, index: usize, next: impl Fn(*mut T) -> *mut T) -> *mut T {
    let mut p = first;
    for _ in 0..index {
        p = next(p);
    }
    p
}

/// The `post_send` op.
///
/// # Safety
/// Called by the inline `ibv_post_send` with a live QP, a valid WR list and a valid
/// `bad_wr`.
pub(crate) unsafe extern "C" fn op_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    let fail = |at: *mut ibv_send_wr, err: c_int| {
        if !bad_wr.is_null() {
            // SAFETY: valid for a write per the contract.
            unsafe { bad_wr.write(at) };
        }
        errno_ret(err)
    };
    // SAFETY: per the contract.
    let Some(q) = (unsafe { qp.cast::<UQp>().as_ref() }).and_then(|q| q.qp.as_ref()) else {
        return fail(wr, libc::EINVAL);
    };
    let ud = q.qp_type() == QpType::Ud;
    let mut cur = wr;
    while !cur.is_null() {
        let chunk_start = cur;
        let mut buf: [MaybeUninit<SendWr<'_>>; CHUNK] = [const { MaybeUninit::uninit() }; CHUNK];
        let mut gather = MaybeUninit::<[u8; GATHER_BYTES]>::uninit();
        let mut gather_used = false;
        let mut n = 0usize;
        let mut conv_err = None;
        while !cur.is_null() && n < CHUNK {
            // SAFETY: `cur` is an element of the application's list (contract).
            let w = unsafe { &*cur };
            // SAFETY: as above; `gather` lives until the end of this chunk.
            match unsafe { send_wr(w, ud, gather.as_mut_ptr().cast::<u8>(), &mut gather_used) } {
                Ok(Some(s)) => {
                    if let Some(slot) = buf.get_mut(n) {
                        slot.write(s);
                    }
                    n += 1;
                    cur = w.next;
                }
                Ok(None) => break,
                Err(e) => {
                    conv_err = Some(e);
                    break;
                }
            }
        }
        // SAFETY: the first `n` slots were initialised above; SendWr is Copy (no drop).
        let wrs = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<SendWr<'_>>(), n) };
        if let Err((index, err)) = post_sends(q, wrs) {
            // SAFETY: index < n elements of the list from chunk_start.
            let at = unsafe { nth(chunk_start, index, |p| (*p).next) };
            return fail(at, err);
        }
        // Posted binds give their windows the new R_Key (`mw->rkey`, as irdma's provider
        // does; the window is named by its index bits, so an application that keeps the
        // old value can still rebind it).
        let mut p = chunk_start;
        for _ in 0..n {
            // SAFETY: the `n` elements from chunk_start were just converted (contract).
            let w = unsafe { &*p };
            if WrOpcode::from_raw(w.opcode) == Some(WrOpcode::BindMw) {
                let b = w.bind_mw();
                // SAFETY: a live window (contract); the application does not read it
                // concurrently with this post.
                if let Some(mw) = unsafe { b.mw.cast::<crate::objects::UMw>().as_mut() } {
                    mw.ibv.rkey = b.rkey;
                    if let Some(m) = &mw.mw {
                        m.set_rkey(b.rkey);
                    }
                }
            }
            p = w.next;
        }
        if let Some(e) = conv_err {
            return fail(cur, e);
        }
    }
    0
}

/// How long a post waits for send-queue slots that the engine has completed but not yet
/// handed back (see [`post_sends`]).
const SQ_FULL_GRACE: Duration = Duration::from_millis(2);

/// Posts `wrs`; on failure returns the index of the first WR not posted and the errno.
///
/// A full send queue (ENOMEM) is retried for up to [`SQ_FULL_GRACE`]. Applications size
/// their post rate by the completions they poll: once a signaled completion is seen, every
/// earlier WR's slot counts as free (rdma-core providers account SQ space that way). The
/// uroce engine publishes a send completion slightly before it releases the ring slots of
/// the WQEs it retires, so for a moment the ring can look full to an application that is
/// within its limits; perftest's bandwidth tests (tx_depth outstanding, one signaled WR per
/// cq_mod) hit exactly that window. A queue that is really full still fails with ENOMEM,
/// after the grace period.
pub(crate) fn post_sends(q: &uroce::Qp, wrs: &[SendWr<'_>]) -> Result<(), (usize, c_int)> {
    let mut done = 0usize;
    let mut deadline: Option<Instant> = None;
    while let Some(rest) = wrs.get(done..).filter(|r| !r.is_empty()) {
        match q.post_send(rest) {
            Ok(()) => return Ok(()),
            Err(e) => {
                done += e.index;
                if e.error.errno() != uroce::Errno::ENOMEM {
                    return Err((done, errno_of(&e.error)));
                }
                let now = Instant::now();
                if now >= *deadline.get_or_insert(now + SQ_FULL_GRACE) {
                    return Err((done, errno_of(&e.error)));
                }
                std::thread::yield_now();
            }
        }
    }
    Ok(())
}

/// Converts one `ibv_recv_wr`.
///
/// # Safety
/// The gather list is valid for `'a` (contract).
unsafe fn recv_wr<'a>(w: &ibv_recv_wr) -> Result<RecvWr<'a>, c_int> {
    Ok(RecvWr {
        wr_id: w.wr_id,
        // SAFETY: forwarded contract.
        sg_list: unsafe { sges(w.sg_list, w.num_sge) }?,
    })
}

/// Posts a receive list in chunks through `post`.
///
/// # Safety
/// `wr` is a valid list and `bad_wr` valid for a write (C API contract).
unsafe fn post_recv_list(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    post: impl Fn(&[RecvWr<'_>]) -> Result<(), uroce::PostError>,
) -> c_int {
    let fail = |at: *mut ibv_recv_wr, err: c_int| {
        if !bad_wr.is_null() {
            // SAFETY: valid for a write per the contract.
            unsafe { bad_wr.write(at) };
        }
        errno_ret(err)
    };
    let mut cur = wr;
    while !cur.is_null() {
        let chunk_start = cur;
        let mut buf: [MaybeUninit<RecvWr<'_>>; CHUNK] = [const { MaybeUninit::uninit() }; CHUNK];
        let mut n = 0usize;
        let mut conv_err = None;
        while !cur.is_null() && n < CHUNK {
            // SAFETY: an element of the application's list (contract).
            let w = unsafe { &*cur };
            // SAFETY: forwarded contract.
            match unsafe { recv_wr(w) } {
                Ok(r) => {
                    if let Some(slot) = buf.get_mut(n) {
                        slot.write(r);
                    }
                    n += 1;
                    cur = w.next;
                }
                Err(e) => {
                    conv_err = Some(e);
                    break;
                }
            }
        }
        // SAFETY: the first `n` slots were initialised; RecvWr is Copy.
        let wrs = unsafe { core::slice::from_raw_parts(buf.as_ptr().cast::<RecvWr<'_>>(), n) };
        if n > 0 {
            if let Err(e) = post(wrs) {
                // SAFETY: e.index < n elements of the list from chunk_start.
                let at = unsafe { nth(chunk_start, e.index, |p| (*p).next) };
                return fail(at, errno_of(&e.error));
            }
        }
        if let Some(e) = conv_err {
            return fail(cur, e);
        }
    }
    0
}

/// The `post_recv` op.
///
/// # Safety
/// Called by the inline `ibv_post_recv` with a live QP, a valid list and `bad_wr`.
pub(crate) unsafe extern "C" fn op_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(q) = (unsafe { qp.cast::<UQp>().as_ref() }).and_then(|q| q.qp.as_ref()) else {
        if !bad_wr.is_null() {
            // SAFETY: valid for a write per the contract.
            unsafe { bad_wr.write(wr) };
        }
        return errno_ret(libc::EINVAL);
    };
    // SAFETY: forwarded contract.
    unsafe { post_recv_list(wr, bad_wr, |w| q.post_recv(w)) }
}

/// The `post_srq_recv` op.
///
/// # Safety
/// Called by the inline `ibv_post_srq_recv` with a live SRQ, a valid list and `bad_wr`.
pub(crate) unsafe extern "C" fn op_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { srq.cast::<USrq>().as_ref() }).and_then(|s| s.srq.as_ref()) else {
        if !bad_wr.is_null() {
            // SAFETY: valid for a write per the contract.
            unsafe { bad_wr.write(wr) };
        }
        return errno_ret(libc::EINVAL);
    };
    // SAFETY: forwarded contract.
    unsafe { post_recv_list(wr, bad_wr, |w| s.post_recv(w)) }
}

fn cap_from_c(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

fn cap_to_c(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The `create_qp_ex` op (the inline `ibv_create_qp_ex` calls it for any `comp_mask` other
/// than `IBV_QP_INIT_ATTR_PD` alone). It accepts what rdma-core's rxe provider accepts
/// (`check_qp_init_attr` in `providers/rxe/rxe.c`): `comp_mask` within `PD | CREATE_FLAGS |
/// SEND_OPS_FLAGS`, `create_flags` 0 (rxe supports no creation flag), and `send_ops_flags`
/// within what the QP type supports (RC: RDMA WRITE (with immediate), SEND (with immediate
/// or invalidate), LOCAL_INV, BIND_MW, RDMA READ, the two atomics; UC: the writes, sends,
/// LOCAL_INV and BIND_MW; UD: SEND and SEND with immediate; no other QP type). Anything else
/// is EOPNOTSUPP, as rxe answers; uroce also refuses `ATOMIC_WRITE`, which rxe offers but
/// uroce has no atomic write for. Without `IBV_QP_INIT_ATTR_PD` there is no PD:
/// EINVAL. The QP then gets the `ibv_wr_*` interface ([`crate::qp_ex`]), as every QP rxe
/// makes through this op does.
///
/// # Safety
/// `context` is a live context; `attr` is valid, with live CQs (and SRQ) of that context.
pub(crate) unsafe extern "C" fn op_create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    let fail = |e: c_int| {
        set_errno(e);
        core::ptr::null_mut()
    };
    // SAFETY: per the contract.
    let Some(a) = (unsafe { attr.as_mut() }) else {
        return fail(libc::EINVAL);
    };
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let send_ops = if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
        a.send_ops_flags
    } else {
        0
    };
    // A number `enum ibv_qp_type` does not name: EINVAL, as the kernel's create_qp.
    let Some(qp_type) = QpType::from_raw(a.qp_type) else {
        return fail(libc::EINVAL);
    };
    if send_ops & !crate::qp_ex::supported_send_ops(qp_type) != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    if qp_type == QpType::XrcRecv {
        // An XRC target: of an XRC domain, without PD, CQs or queues.
        if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
            return fail(libc::EINVAL);
        }
        // SAFETY: the application's live XRCD or NULL (contract).
        return unsafe { create_xrc_recv_qp(context, a) };
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: a non-NULL PD of the application's (contract).
    if unsafe { (*a.pd).context } != context {
        return fail(libc::EINVAL);
    }
    // SAFETY: `ibv_qp_init_attr_ex` begins with the fields of `ibv_qp_init_attr`, in the same
    // order and at the same offsets (rdma-core's verbs.h defines it so), so `attr` is also a
    // valid `ibv_qp_init_attr`; the granted capacities are written back into `a.cap`.
    unsafe { create_qp(a.pd, attr.cast::<ibv_qp_init_attr>(), Some(send_ops)) }
}

/// `struct ibv_qp *ibv_create_qp(struct ibv_pd *, struct ibv_qp_init_attr *)`: the granted
/// capacities are written back into `init_attr->cap` (perftest reads `max_inline_data`).
///
/// # Safety
/// `pd` is a live PD; `init_attr` is valid, with live CQs (and SRQ) of the same context.
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: forwarded contract.
    unsafe { create_qp(pd, init_attr, None) }
}

/// [`ibv_create_qp`]; with `send_ops` (the validated `send_ops_flags`, possibly 0) the QP is
/// an extended one with the `ibv_wr_*` interface.
///
/// # Safety
/// As [`ibv_create_qp`].
unsafe fn create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
    send_ops: Option<u64>,
) -> *mut ibv_qp {
    guard(core::ptr::null_mut(), || {
        let inval = || {
            set_errno(libc::EINVAL);
            core::ptr::null_mut()
        };
        // SAFETY: per the contract.
        let (Some(p), Some(a)) = (unsafe { upd(pd) }, unsafe { init_attr.as_mut() }) else {
            return inval();
        };
        // A number `enum ibv_qp_type` does not name: EINVAL, as the kernel's create_qp.
        let Some(qp_type) = QpType::from_raw(a.qp_type) else {
            return inval();
        };
        // An XRC initiator has no receive side: its receive CQ is its send CQ.
        if qp_type == QpType::XrcSend {
            a.recv_cq = a.send_cq;
            a.srq = core::ptr::null_mut();
        }
        // SAFETY: live CQs / SRQ per the contract.
        let (scq, rcq) = unsafe { (ucq(a.send_cq), ucq(a.recv_cq)) };
        let (Some(scq), Some(rcq)) = (
            scq.and_then(|c| c.cq.as_ref()),
            rcq.and_then(|c| c.cq.as_ref()),
        ) else {
            return inval();
        };
        let srq = if a.srq.is_null() {
            None
        } else {
            // SAFETY: a live SRQ per the contract.
            match unsafe { a.srq.cast::<USrq>().as_ref() }.and_then(|s| s.srq.as_ref()) {
                Some(s) => Some(s),
                None => return inval(),
            }
        };
        let attr = QpInitAttr {
            qp_type,
            send_cq: scq,
            recv_cq: rcq,
            srq,
            cap: cap_from_c(&a.cap),
            sq_sig_all: a.sq_sig_all != 0,
            // A C consumer has no way to negotiate it with its peer (docs/wire.md §5.6).
            selective_repeat: false,
        };
        let qp = match p.pd.create_qp(&attr) {
            Ok(q) => q,
            Err(e) => {
                set_errno(errno_of(&e));
                return core::ptr::null_mut();
            }
        };
        let cap = qp.cap();
        a.cap = cap_to_c(&cap);
        let user_handle = qp.user_handle();
        let ex = send_ops.map_or_else(crate::qp_ex::plain_tail, crate::qp_ex::tail);
        let b = Box::new(UQp {
            ibv: ibv_qp {
                context: p.ibv.context,
                qp_context: a.qp_context,
                pd,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                handle: qp.handle(),
                qp_num: qp.qp_num(),
                state: QpState::Reset.raw(),
                qp_type: a.qp_type,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            ex,
            qp: Some(qp),
            is_ex: send_ops.is_some(),
            batch: crate::qp_ex::BatchCell::new(&cap),
        });
        let ptr = Box::into_raw(b);
        // SAFETY: the PD's context is live (contract).
        if let Some(u) = unsafe { uctx(p.ibv.context) } {
            u.register(user_handle, ObjKind::Qp, ptr as usize);
            u.retain();
        }
        ptr.cast::<ibv_qp>()
    })
}

/// An XRC target QP (`IBV_QPT_XRC_RECV`) of the domain `a.xrcd`.
///
/// # Safety
/// `context` is a live context; `a.xrcd` is NULL or a live XRCD of it.
unsafe fn create_xrc_recv_qp(
    context: *mut ibv_context,
    a: &mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(x) = (unsafe { crate::xrc::uxrcd(a.xrcd.cast()) }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        let qp = match x.create_recv_qp() {
            Ok(q) => q,
            Err(e) => {
                set_errno(errno_of(&e));
                return core::ptr::null_mut();
            }
        };
        a.cap = ibv_qp_cap {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let user_handle = qp.user_handle();
        let cap = qp.cap();
        let b = Box::new(UQp {
            ibv: ibv_qp {
                context,
                qp_context: a.qp_context,
                pd: core::ptr::null_mut(),
                send_cq: core::ptr::null_mut(),
                recv_cq: core::ptr::null_mut(),
                srq: core::ptr::null_mut(),
                handle: qp.handle(),
                qp_num: qp.qp_num(),
                state: QpState::Reset.raw(),
                qp_type: a.qp_type,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            ex: crate::qp_ex::tail(0),
            qp: Some(qp),
            is_ex: true,
            batch: crate::qp_ex::BatchCell::new(&cap),
        });
        let ptr = Box::into_raw(b);
        // SAFETY: live context (contract).
        if let Some(u) = unsafe { uctx(context) } {
            u.register(user_handle, ObjKind::Qp, ptr as usize);
            u.retain();
        }
        ptr.cast::<ibv_qp>()
    })
}

/// The `create_srq_ex` op (the inline `ibv_create_srq_ex` calls it for anything but a basic
/// SRQ of a PD): a basic SRQ, or an XRC SRQ (`IBV_SRQT_XRC`, with PD, XRCD and CQ, as
/// rdma-core's `ibv_cmd_create_srq_ex` requires: EINVAL without them). Tag matching:
/// EOPNOTSUPP, as rxe.
///
/// # Safety
/// `context` is a live context; `attr` is valid, with live objects of that context.
pub(crate) unsafe extern "C" fn op_create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    guard(core::ptr::null_mut(), || {
        let fail = |e: c_int| {
            set_errno(e);
            core::ptr::null_mut()
        };
        // SAFETY: per the contract.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return fail(libc::EINVAL);
        };
        let known = IBV_SRQ_INIT_ATTR_TYPE
            | IBV_SRQ_INIT_ATTR_PD
            | IBV_SRQ_INIT_ATTR_XRCD
            | IBV_SRQ_INIT_ATTR_CQ
            | IBV_SRQ_INIT_ATTR_TM;
        if a.comp_mask & !known != 0 {
            return fail(libc::EINVAL);
        }
        let ty = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
            a.srq_type
        } else {
            IBV_SRQT_BASIC
        };
        if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live PD (contract).
        let Some(p) = (unsafe { upd(a.pd) }) else {
            return fail(libc::EINVAL);
        };
        if p.ibv.context != context {
            return fail(libc::EINVAL);
        }
        let want = SrqAttr {
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            srq_limit: a.attr.srq_limit,
        };
        let made = match ty {
            IBV_SRQT_BASIC => p.pd.create_srq(&want),
            IBV_SRQT_XRC => {
                let need = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
                if a.comp_mask & need != need {
                    return fail(libc::EINVAL);
                }
                // SAFETY: a live XRCD and CQ of this context, or NULL (contract).
                let (x, cq) = unsafe { (crate::xrc::uxrcd(a.xrcd), ucq(a.cq)) };
                let (Some(x), Some(cq)) = (x, cq.and_then(|c| c.cq.as_ref())) else {
                    return fail(libc::EINVAL);
                };
                p.pd.create_xrc_srq(&want, x, cq)
            }
            2 => return fail(libc::EOPNOTSUPP),
            _ => return fail(libc::EINVAL),
        };
        let srq = match made {
            Ok(s) => s,
            Err(e) => return fail(errno_of(&e)),
        };
        let got = srq.attr();
        a.attr.max_wr = got.max_wr;
        a.attr.max_sge = got.max_sge;
        Box::into_raw(wrap_srq(p, a.pd, a.srq_context, srq)).cast::<ibv_srq>()
    })
}

/// The `get_srq_num` op (`ibv_get_srq_num`): the number XRC senders name.
///
/// # Safety
/// `srq` is a live SRQ; `srq_num` is valid for a write.
pub(crate) unsafe extern "C" fn op_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: per the contract.
    let Some(s) = (unsafe { srq.cast::<USrq>().as_ref() }).and_then(|s| s.srq.as_ref()) else {
        return libc::EINVAL;
    };
    if srq_num.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: valid for a write (contract).
    unsafe { srq_num.write(s.srq_num()) };
    0
}

/// Box a new SRQ for C and register it with its context (async events, lifetime).
fn wrap_srq(
    p: &crate::objects::UPd,
    pd: *mut ibv_pd,
    srq_context: *mut core::ffi::c_void,
    srq: uroce::Srq,
) -> Box<USrq> {
    let user_handle = srq.user_handle();
    let b = Box::new(USrq {
        ibv: ibv_srq {
            context: p.ibv.context,
            srq_context,
            pd,
            handle: srq.handle(),
            mutex: libc::PTHREAD_MUTEX_INITIALIZER,
            cond: libc::PTHREAD_COND_INITIALIZER,
            events_completed: 0,
        },
        srq: Some(srq),
    });
    // SAFETY: the PD's context is live (contract of the callers).
    if let Some(u) = unsafe { uctx(p.ibv.context) } {
        u.register(user_handle, ObjKind::Srq, core::ptr::from_ref(&*b) as usize);
        u.retain();
    }
    b
}

/// The attributes `mask` selects must hold values their C enums name (else `None`, which
/// the caller returns as EINVAL); the others are not read.
fn qp_attr_from_c(a: &ibv_qp_attr, mask: QpAttrMask) -> Option<QpAttr> {
    fn pick<T: Default>(on: bool, v: Option<T>) -> Option<T> {
        if on {
            v
        } else {
            Some(v.unwrap_or_default())
        }
    }
    Some(QpAttr {
        qp_state: pick(
            mask.contains(QpAttrMask::STATE),
            QpState::from_raw(a.qp_state),
        )?,
        cur_qp_state: pick(
            mask.contains(QpAttrMask::CUR_STATE),
            QpState::from_raw(a.cur_qp_state),
        )?,
        path_mtu: pick(
            mask.contains(QpAttrMask::PATH_MTU),
            Mtu::from_raw(a.path_mtu),
        )?,
        path_mig_state: u8::try_from(a.path_mig_state).unwrap_or(u8::MAX),
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: AccessFlags(a.qp_access_flags),
        cap: cap_from_c(&a.cap),
        ah_attr: ah_attr_from_c(&a.ah_attr),
        alt_ah_attr: ah_attr_from_c(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
        sq_draining: a.sq_draining != 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        sq_sig_all: false,
    })
}

pub(crate) fn qp_attr_to_c(a: &QpAttr) -> ibv_qp_attr {
    ibv_qp_attr {
        qp_state: a.qp_state.raw(),
        cur_qp_state: a.cur_qp_state.raw(),
        path_mtu: a.path_mtu.raw(),
        path_mig_state: u32::from(a.path_mig_state),
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags.bits(),
        cap: cap_to_c(&a.cap),
        ah_attr: ah_attr_to_c(&a.ah_attr),
        alt_ah_attr: ah_attr_to_c(&a.alt_ah_attr),
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
        sq_draining: u8::from(a.sq_draining),
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        rate_limit: 0,
    }
}

/// `int ibv_modify_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask)`: 0 or an
/// errno; on success with `IBV_QP_STATE`, `qp->state` follows.
///
/// # Safety
/// `qp` is a live QP; `attr` is valid.
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    guard_errno(|| {
        let uq = qp.cast::<UQp>();
        // SAFETY: per the contract.
        let (Some(q), Some(a)) = (unsafe { uq.as_ref() }.and_then(|q| q.qp.as_ref()), unsafe {
            attr.as_ref()
        }) else {
            return libc::EINVAL;
        };
        let mask = QpAttrMask(mask as u32);
        let Some(attr) = qp_attr_from_c(a, mask) else {
            return libc::EINVAL;
        };
        match q.modify(&attr, mask) {
            Ok(()) => {
                if mask.contains(QpAttrMask::STATE) {
                    // SAFETY: live QP; `state` is the application-visible mirror.
                    unsafe { (*uq).ibv.state = a.qp_state };
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `int ibv_query_ece(struct ibv_qp *, struct ibv_ece *)`: uroce's ECE vendor ID and the
/// options the QP offers in the CM's REQ or REP (docs/wire.md §5.6; `verbs::Qp::query_ece`).
///
/// # Safety
/// `qp` is a live QP; `ece` is NULL or valid for writes.
pub unsafe extern "C" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let Some(q) = (unsafe { qp.cast::<UQp>().as_ref() }).and_then(|q| q.qp.as_ref()) else {
            return libc::EINVAL;
        };
        if ece.is_null() {
            return libc::EINVAL;
        }
        let e = q.query_ece();
        // SAFETY: non-NULL and writable per the contract.
        unsafe {
            ece.write(ibv_ece {
                vendor_id: e.vendor_id,
                options: e.options,
                comp_mask: 0,
            })
        };
        0
    })
}

/// `int ibv_set_ece(struct ibv_qp *, struct ibv_ece *)`: the options the QP offers and runs
/// with from its next move to RTR (docs/wire.md §5.6; `verbs::Qp::set_ece`). vendor_id 0:
/// EOPNOTSUPP (libibverbs' own check); a comp_mask or another vendor's ID: EINVAL (as mlx5).
///
/// # Safety
/// `qp` is a live QP; `ece` is NULL or readable.
pub unsafe extern "C" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let Some(q) = (unsafe { qp.cast::<UQp>().as_ref() }).and_then(|q| q.qp.as_ref()) else {
            return libc::EINVAL;
        };
        // SAFETY: NULL or readable per the contract.
        let Some(e) = (unsafe { ece.as_ref() }) else {
            return libc::EINVAL;
        };
        if e.vendor_id == 0 {
            return libc::EOPNOTSUPP;
        }
        if e.comp_mask != 0 {
            return libc::EINVAL;
        }
        match q.set_ece(uroce::Ece {
            vendor_id: e.vendor_id,
            options: e.options,
        }) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

/// `int ibv_query_qp(struct ibv_qp *, struct ibv_qp_attr *, int attr_mask, struct
/// ibv_qp_init_attr *)`: fills `attr` and `init_attr` (caps, type, CQs, SRQ, sq_sig_all).
///
/// # Safety
/// `qp` is a live QP; `attr` and `init_attr` are valid for writes.
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard_errno(|| {
        let uq = qp.cast::<UQp>();
        // SAFETY: per the contract.
        let Some(q) = (unsafe { uq.as_ref() }).and_then(|q| q.qp.as_ref()) else {
            return libc::EINVAL;
        };
        if attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        match q.query(QpAttrMask(mask as u32)) {
            Ok(a) => {
                // SAFETY: live QP and valid out-parameters per the contract.
                unsafe {
                    let c = &mut (*uq).ibv;
                    c.state = a.qp_state.raw();
                    attr.write(qp_attr_to_c(&a));
                    init_attr.write(ibv_qp_init_attr {
                        qp_context: c.qp_context,
                        send_cq: c.send_cq,
                        recv_cq: c.recv_cq,
                        srq: c.srq,
                        cap: cap_to_c(&a.cap),
                        qp_type: c.qp_type,
                        sq_sig_all: c_int::from(a.sq_sig_all),
                    });
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `int ibv_destroy_qp(struct ibv_qp *)`: 0, or an errno with the QP intact.
///
/// # Safety
/// `qp` came from [`ibv_create_qp`]; after success it is not used again.
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    guard_errno(|| {
        let uq = qp.cast::<UQp>();
        if uq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live boxed UQp; only this call touches it now.
        let Some(inner) = (unsafe { (*uq).qp.take() }) else {
            return libc::EINVAL;
        };
        let user_handle = inner.user_handle();
        if let Err((e, back)) = inner.destroy() {
            // SAFETY: as above.
            unsafe { (*uq).qp = Some(back) };
            return errno_of(&e);
        }
        // SAFETY: the QP's context outlives it (contract).
        if let Some(u) = unsafe { uctx((*uq).ibv.context) } {
            u.unregister(user_handle);
            u.release();
        }
        // SAFETY: the leaked Box<UQp>, reclaimed once.
        drop(unsafe { Box::from_raw(uq) });
        0
    })
}

/// `struct ibv_srq *ibv_create_srq(struct ibv_pd *, struct ibv_srq_init_attr *)`: the
/// granted `max_wr`/`max_sge` are written back.
///
/// # Safety
/// `pd` is a live PD; `init_attr` is valid.
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let (Some(p), Some(a)) = (unsafe { upd(pd) }, unsafe { init_attr.as_mut() }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        let want = SrqAttr {
            max_wr: a.attr.max_wr,
            max_sge: a.attr.max_sge,
            srq_limit: a.attr.srq_limit,
        };
        let srq = match p.pd.create_srq(&want) {
            Ok(s) => s,
            Err(e) => {
                set_errno(errno_of(&e));
                return core::ptr::null_mut();
            }
        };
        let got = srq.attr();
        a.attr.max_wr = got.max_wr;
        a.attr.max_sge = got.max_sge;
        let user_handle = srq.user_handle();
        let b = Box::new(USrq {
            ibv: ibv_srq {
                context: p.ibv.context,
                srq_context: a.srq_context,
                pd,
                handle: srq.handle(),
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            srq: Some(srq),
        });
        let ptr = Box::into_raw(b);
        // SAFETY: the PD's context is live (contract).
        if let Some(u) = unsafe { uctx(p.ibv.context) } {
            u.register(user_handle, ObjKind::Srq, ptr as usize);
            u.retain();
        }
        ptr.cast::<ibv_srq>()
    })
}

/// `int ibv_modify_srq(struct ibv_srq *, struct ibv_srq_attr *, int srq_attr_mask)`.
///
/// # Safety
/// `srq` is a live SRQ; `attr` is valid.
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let (Some(s), Some(a)) = (
            unsafe { srq.cast::<USrq>().as_ref() }.and_then(|s| s.srq.as_ref()),
            unsafe { attr.as_ref() },
        ) else {
            return libc::EINVAL;
        };
        let attr = SrqAttr {
            max_wr: a.max_wr,
            max_sge: a.max_sge,
            srq_limit: a.srq_limit,
        };
        match s.modify(&attr, SrqAttrMask(mask as u32)) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

/// `int ibv_query_srq(struct ibv_srq *, struct ibv_srq_attr *)`.
///
/// # Safety
/// `srq` is a live SRQ; `attr` is valid for a write.
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let Some(s) = (unsafe { srq.cast::<USrq>().as_ref() }).and_then(|s| s.srq.as_ref()) else {
            return libc::EINVAL;
        };
        if attr.is_null() {
            return libc::EINVAL;
        }
        match s.query() {
            Ok(a) => {
                // SAFETY: valid for a write per the contract.
                unsafe {
                    attr.write(ibv_srq_attr {
                        max_wr: a.max_wr,
                        max_sge: a.max_sge,
                        srq_limit: a.srq_limit,
                    })
                };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `int ibv_destroy_srq(struct ibv_srq *)`: 0, or an errno (EBUSY while QPs use it).
///
/// # Safety
/// `srq` came from [`ibv_create_srq`]; after success it is not used again.
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    guard_errno(|| {
        let us = srq.cast::<USrq>();
        if us.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live boxed USrq; only this call touches it now.
        let Some(inner) = (unsafe { (*us).srq.take() }) else {
            return libc::EINVAL;
        };
        let user_handle = inner.user_handle();
        if let Err((e, back)) = inner.destroy() {
            // SAFETY: as above.
            unsafe { (*us).srq = Some(back) };
            return errno_of(&e);
        }
        // SAFETY: the SRQ's context outlives it (contract).
        if let Some(u) = unsafe { uctx((*us).ibv.context) } {
            u.unregister(user_handle);
            u.release();
        }
        // SAFETY: the leaked Box<USrq>, reclaimed once.
        drop(unsafe { Box::from_raw(us) });
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zeroed_send_wr() -> ibv_send_wr {
        // SAFETY: all-zero is valid for ibv_send_wr (integers, nullable pointers, unions).
        unsafe { core::mem::zeroed() }
    }

    #[test]
    fn send_wr_conversion_rdma_write_with_imm() {
        let mut sge = [ibv_sge {
            addr: 0x1000,
            length: 64,
            lkey: 7,
        }];
        let mut w = zeroed_send_wr();
        w.wr_id = 42;
        w.sg_list = sge.as_mut_ptr();
        w.num_sge = 1;
        w.opcode = WrOpcode::RdmaWriteWithImm.raw();
        w.send_flags = SendFlags::SIGNALED.bits();
        w.imm_data = 0x1234_5678u32.to_be();
        w.wr.rdma = ibv_send_wr_rdma {
            remote_addr: 0xdead_0000,
            rkey: 99,
        };
        let mut g = [0u8; GATHER_BYTES];
        let mut used = false;
        // SAFETY: the WR and its gather list are locals that outlive the result.
        let s = unsafe { send_wr(&w, false, g.as_mut_ptr(), &mut used) }
            .unwrap()
            .unwrap();
        assert_eq!(s.wr_id, 42);
        assert_eq!(s.imm_data, 0x1234_5678);
        match s.payload {
            Payload::Sges(l) => {
                assert_eq!(l.len(), 1);
                assert_eq!((l[0].addr, l[0].length, l[0].lkey), (0x1000, 64, 7));
                assert!(core::ptr::eq(l.as_ptr().cast::<ibv_sge>(), sge.as_ptr()));
            }
            Payload::Inline(_) => panic!("not inline"),
        }
        assert!(matches!(
            s.remote,
            Remote::Rdma {
                addr: 0xdead_0000,
                rkey: 99
            }
        ));
    }

    #[test]
    fn inline_gathers_multiple_sges_once_per_chunk() {
        let a = *b"hello ";
        let b = *b"world";
        let mut sge = [
            ibv_sge {
                addr: a.as_ptr() as u64,
                length: 6,
                lkey: 0,
            },
            ibv_sge {
                addr: b.as_ptr() as u64,
                length: 5,
                lkey: 0,
            },
        ];
        let mut w = zeroed_send_wr();
        w.sg_list = sge.as_mut_ptr();
        w.num_sge = 2;
        w.opcode = WrOpcode::Send.raw();
        w.send_flags = SendFlags::INLINE.bits();
        let mut g = [0u8; GATHER_BYTES];
        let mut used = false;
        // SAFETY: locals outlive the result.
        let s = unsafe { send_wr(&w, false, g.as_mut_ptr(), &mut used) }
            .unwrap()
            .unwrap();
        match s.payload {
            Payload::Inline(d) => assert_eq!(d, b"hello world"),
            Payload::Sges(_) => panic!("inline expected"),
        }
        assert!(used);
        // A second multi-SGE inline WR must go to a new chunk.
        // SAFETY: as above.
        assert!(unsafe { send_wr(&w, false, g.as_mut_ptr(), &mut used) }
            .unwrap()
            .is_none());
    }

    #[test]
    fn bad_wrs_are_rejected() {
        let mut g = [0u8; GATHER_BYTES];
        let mut used = false;
        let mut try_conv = |w: &ibv_send_wr, ud: bool| {
            // SAFETY: every case below is rejected before any pointer in `w` is used.
            unsafe { send_wr(w, ud, g.as_mut_ptr(), &mut used) }.err()
        };
        let mut w = zeroed_send_wr();
        w.num_sge = -1;
        assert_eq!(try_conv(&w, false), Some(libc::EINVAL));
        w.num_sge = 1; // with a NULL list
        assert_eq!(try_conv(&w, false), Some(libc::EINVAL));
        w.num_sge = 0; // UD without an AH
        assert_eq!(try_conv(&w, true), Some(libc::EINVAL));
    }

    #[test]
    fn qp_attr_round_trips() {
        let mut c = ibv_qp_attr {
            qp_state: 3,
            path_mtu: 3,
            qkey: 0x1111_1111,
            rq_psn: 5,
            sq_psn: 6,
            dest_qp_num: 17,
            qp_access_flags: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            port_num: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..Default::default()
        };
        c.ah_attr.is_global = 1;
        c.ah_attr.grh.dgid.raw[15] = 1;
        assert_eq!(
            qp_attr_to_c(&qp_attr_from_c(&c, QpAttrMask(!0)).unwrap()),
            c
        );
    }
}
