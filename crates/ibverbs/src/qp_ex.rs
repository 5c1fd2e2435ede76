//! Extended QPs: `ibv_qp_to_qp_ex` and the `ibv_wr_*` post interface of `struct ibv_qp_ex`
//! (rdma-core's `verbs.h`; the semantics are those of rdma-core 44's rxe provider,
//! `providers/rxe/rxe.c`).
//!
//! A batch is opened by `wr_start`; each `wr_<opcode>` call begins a new WR, taking `wr_id`
//! and `wr_flags` from the `ibv_qp_ex` at that moment; `wr_set_sge`, `wr_set_sge_list`,
//! `wr_set_inline_data(_list)` and `wr_set_ud_addr` complete the WR begun last. Gather lists
//! and inline data are copied when set (the application may reuse its buffers at once, as
//! with rxe, which writes them into the WQE). `wr_complete` posts the whole batch with one
//! `verbs` post (one doorbell) and returns 0 or an errno; `wr_abort` drops it.
//!
//! Errors are recorded in the batch and returned by `wr_complete`, which then posts nothing:
//! ENOSPC for a gather list longer than `max_send_sge`, inline data longer than
//! `max_inline_data` or more WRs than `max_send_wr` (as rxe's `qp->err`); EINVAL for a
//! `wr_set_*` before any WR, a UD WR without `wr_set_ud_addr`, or an opcode whose
//! `IBV_QP_EX_WITH_*` flag was not in `send_ops_flags`. rxe leaves the slot of an opcode not
//! asked for NULL, so calling it crashes the program; uroce fills it (and those of the
//! opcodes it never offers: TSO, atomic write) with a function that fails the batch instead
//! (docs/compat.md §11). `wr_set_xrc_srqn` names an XRC initiator's responder SRQ.
//!
//! Concurrency: as rxe holds its send-queue lock from `wr_start` to `wr_complete` /
//! `wr_abort`, a batch is owned by the thread that opened it (`BatchCell::open`); another
//! thread's `wr_start` waits, the same thread's second `wr_start` drops the open batch and
//! starts anew (where rxe would deadlock). A `wr_*` call outside a batch, or from a thread
//! that does not own it, is ignored; `wr_complete` then returns EINVAL.

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::ops::Range;

use abi::uverbs::Sge;
use uroce::{Payload, QpCap, QpType, Remote, SendFlags, SendWr, WrOpcode};

use crate::objects::uah;
use crate::qp::{post_sends, UQp};
use crate::types::*;
use crate::util::{errno_ret, OwnerLock};

/// The `IBV_QP_EX_WITH_*` operations uroce offers per QP type (the subset of rxe's
/// `RXE_SUP_{RC,UC,UD}_QP_SEND_OPS_FLAGS` that uroce implements).
pub(crate) fn supported_send_ops(t: QpType) -> u64 {
    use send_ops::*;
    let uc = RDMA_WRITE
        | RDMA_WRITE_WITH_IMM
        | SEND
        | SEND_WITH_IMM
        | SEND_WITH_INV
        | LOCAL_INV
        | BIND_MW;
    match t {
        QpType::Rc => uc | RDMA_READ | ATOMIC_CMP_AND_SWP | ATOMIC_FETCH_AND_ADD,
        QpType::Uc => uc,
        QpType::Ud => SEND | SEND_WITH_IMM,
        // An XRC initiator sends what RC sends, to an SRQ named per WR.
        QpType::XrcSend => uc | RDMA_READ | ATOMIC_CMP_AND_SWP | ATOMIC_FETCH_AND_ADD,
        _ => 0,
    }
}

/// The opcode-specific part of a pending WR.
#[derive(Clone, Copy, Debug)]
enum PendRemote {
    None,
    Rdma {
        addr: u64,
        rkey: u32,
    },
    Atomic {
        addr: u64,
        rkey: u32,
        compare_add: u64,
        swap: u64,
    },
    MwBind {
        mw_rkey: u32,
        new_rkey: u32,
        lkey: u32,
        addr: u64,
        length: u64,
        access: u32,
    },
}

/// One WR of a batch; its gather list and inline data live in the batch's buffers.
#[derive(Clone, Debug)]
struct PendWr {
    wr_id: u64,
    opcode: WrOpcode,
    flags: u32,
    /// Host order.
    imm_data: u32,
    invalidate_rkey: u32,
    remote: PendRemote,
    sges: Range<usize>,
    inline: Option<Range<usize>>,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
}

/// The state of an open batch.
#[derive(Debug, Default)]
struct Batch {
    /// The first error, returned by `wr_complete` (0: none).
    err: c_int,
    wrs: Vec<PendWr>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
}

/// A QP's batch with its owner flag (see the module documentation).
#[derive(Debug)]
pub struct BatchCell {
    open: OwnerLock,
    batch: UnsafeCell<Batch>,
    max_wr: usize,
    max_sge: usize,
    max_inline: usize,
}

impl BatchCell {
    pub(crate) fn new(cap: &QpCap) -> BatchCell {
        BatchCell {
            open: OwnerLock::default(),
            batch: UnsafeCell::new(Batch::default()),
            max_wr: cap.max_send_wr as usize,
            max_sge: cap.max_send_sge as usize,
            max_inline: cap.max_inline_data as usize,
        }
    }
}

/// `ibv_qp_ex` tail of a QP made without the extended interface.
pub(crate) fn plain_tail() -> ibv_qp_ex_tail {
    // SAFETY: all-zero is valid: integers and `None` function pointers.
    unsafe { core::mem::zeroed() }
}

/// The `ibv_qp_ex` tail of an extended QP whose `send_ops_flags` (already validated) are
/// `ops`: the functions of the opcodes asked for, refusing stand-ins for the others.
pub(crate) fn tail(ops: u64) -> ibv_qp_ex_tail {
    let has = |f: u64| ops & f != 0;
    let mut t = plain_tail();
    t.wr_atomic_cmp_swp = Some(if has(send_ops::ATOMIC_CMP_AND_SWP) {
        wr_atomic_cmp_swp
    } else {
        refuse_cmp_swp
    });
    t.wr_atomic_fetch_add = Some(if has(send_ops::ATOMIC_FETCH_AND_ADD) {
        wr_atomic_fetch_add
    } else {
        refuse_rkey_addr_u64
    });
    t.wr_rdma_read = Some(if has(send_ops::RDMA_READ) {
        wr_rdma_read
    } else {
        refuse_rkey_addr
    });
    t.wr_rdma_write = Some(if has(send_ops::RDMA_WRITE) {
        wr_rdma_write
    } else {
        refuse_rkey_addr
    });
    t.wr_rdma_write_imm = Some(if has(send_ops::RDMA_WRITE_WITH_IMM) {
        wr_rdma_write_imm
    } else {
        refuse_rkey_addr_u32
    });
    t.wr_send = Some(if has(send_ops::SEND) {
        wr_send
    } else {
        refuse_plain
    });
    t.wr_send_imm = Some(if has(send_ops::SEND_WITH_IMM) {
        wr_send_imm
    } else {
        refuse_u32
    });
    t.wr_send_inv = Some(if has(send_ops::SEND_WITH_INV) {
        wr_send_inv
    } else {
        refuse_u32
    });
    t.wr_bind_mw = Some(if has(send_ops::BIND_MW) {
        wr_bind_mw
    } else {
        refuse_bind_mw
    });
    t.wr_local_inv = Some(if has(send_ops::LOCAL_INV) {
        wr_local_inv
    } else {
        refuse_u32
    });
    // Opcodes uroce never offers (TSO, atomic write): refused too, rather than left NULL.
    t.wr_send_tso = Some(refuse_tso);
    t.wr_atomic_write = Some(refuse_atomic_write);
    t.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
    t.wr_set_ud_addr = Some(wr_set_ud_addr);
    t.wr_set_inline_data = Some(wr_set_inline_data);
    t.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    t.wr_set_sge = Some(wr_set_sge);
    t.wr_set_sge_list = Some(wr_set_sge_list);
    t.wr_start = Some(wr_start);
    t.wr_complete = Some(wr_complete);
    t.wr_abort = Some(wr_abort);
    t
}

/// `struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *)`: the QP itself (its `ibv_qp_ex`
/// starts with the `ibv_qp`) if it was made by `ibv_create_qp_ex`, else NULL — as
/// upstream's `VERBS_QP_EX` test.
///
/// # Safety
/// `qp` is NULL or a live QP.
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp {
    // SAFETY: a live QP is a boxed UQp (contract).
    match unsafe { qp.cast::<UQp>().as_ref() } {
        Some(q) if q.is_ex => qp,
        _ => core::ptr::null_mut(),
    }
}

/// The QP's batch if the calling thread has it open.
///
/// # Safety
/// `qp` is a live extended QP; the caller is inside `wr_start` … `wr_complete`/`wr_abort`
/// (the C contract), so no other thread touches the batch.
unsafe fn batch<'a>(qp: *mut ibv_qp) -> Option<(&'a UQp, &'a mut Batch)> {
    // SAFETY: per the contract.
    let q = unsafe { qp.cast::<UQp>().as_ref() }?;
    if !q.batch.open.held() {
        return None;
    }
    // SAFETY: the batch is open and owned by the caller (contract).
    Some((q, unsafe { &mut *q.batch.batch.get() }))
}

/// Begins a WR of `opcode` with the QP's current `wr_id` and `wr_flags`.
///
/// # Safety
/// As [`batch`].
unsafe fn begin(qp: *mut ibv_qp, opcode: WrOpcode, remote: PendRemote) -> Option<()> {
    // SAFETY: forwarded contract.
    let (q, b) = unsafe { batch(qp) }?;
    if b.err != 0 {
        return None;
    }
    if b.wrs.len() >= q.batch.max_wr {
        b.err = libc::ENOSPC;
        return None;
    }
    let start = b.sges.len();
    b.wrs.push(PendWr {
        wr_id: q.ex.wr_id,
        opcode,
        flags: q.ex.wr_flags,
        imm_data: 0,
        invalidate_rkey: 0,
        remote,
        sges: start..start,
        inline: None,
        ah: core::ptr::null_mut(),
        remote_qpn: 0,
        remote_qkey: 0,
    });
    Some(())
}

/// The WR begun last, or None (after an error, or EINVAL recorded when there is none).
///
/// # Safety
/// As [`batch`].
unsafe fn last<'a>(qp: *mut ibv_qp) -> Option<(&'a UQp, &'a mut Batch)> {
    // SAFETY: forwarded contract.
    let (q, b) = unsafe { batch(qp) }?;
    if b.err != 0 {
        return None;
    }
    if b.wrs.is_empty() {
        b.err = libc::EINVAL;
        return None;
    }
    Some((q, b))
}

/// Marks the open batch failed with EINVAL: an opcode not in `send_ops_flags`.
///
/// # Safety
/// As [`batch`].
unsafe fn refuse(qp: *mut ibv_qp) {
    // SAFETY: forwarded contract.
    if let Some((_, b)) = unsafe { batch(qp) } {
        if b.err == 0 {
            b.err = libc::EINVAL;
        }
    }
}

unsafe extern "C" fn refuse_cmp_swp(qp: *mut ibv_qp, _: u32, _: u64, _: u64, _: u64) {
    // SAFETY: called through the QP's own slot (contract).
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_rkey_addr_u64(qp: *mut ibv_qp, _: u32, _: u64, _: u64) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_rkey_addr(qp: *mut ibv_qp, _: u32, _: u64) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_rkey_addr_u32(qp: *mut ibv_qp, _: u32, _: u64, _: u32) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_plain(qp: *mut ibv_qp) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_u32(qp: *mut ibv_qp, _: u32) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}

unsafe extern "C" fn refuse_bind_mw(qp: *mut ibv_qp, _: *mut c_void, _: u32, _: *const c_void) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_tso(qp: *mut ibv_qp, _: *mut c_void, _: u16, _: u16) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}
unsafe extern "C" fn refuse_atomic_write(qp: *mut ibv_qp, _: u32, _: u64, _: *const c_void) {
    // SAFETY: as above.
    unsafe { refuse(qp) }
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ibv_qp,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    let remote = PendRemote::Atomic {
        addr: remote_addr,
        rkey,
        compare_add: compare,
        swap,
    };
    // SAFETY: called through the QP's own slot inside a batch (contract).
    let _ = unsafe { begin(qp, WrOpcode::AtomicCmpAndSwp, remote) };
}

unsafe extern "C" fn wr_atomic_fetch_add(qp: *mut ibv_qp, rkey: u32, remote_addr: u64, add: u64) {
    let remote = PendRemote::Atomic {
        addr: remote_addr,
        rkey,
        compare_add: add,
        swap: 0,
    };
    // SAFETY: as above.
    let _ = unsafe { begin(qp, WrOpcode::AtomicFetchAndAdd, remote) };
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp, rkey: u32, remote_addr: u64) {
    let remote = PendRemote::Rdma {
        addr: remote_addr,
        rkey,
    };
    // SAFETY: as above.
    let _ = unsafe { begin(qp, WrOpcode::RdmaRead, remote) };
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp, rkey: u32, remote_addr: u64) {
    let remote = PendRemote::Rdma {
        addr: remote_addr,
        rkey,
    };
    // SAFETY: as above.
    let _ = unsafe { begin(qp, WrOpcode::RdmaWrite, remote) };
}

/// `imm_data` is `__be32`, as in `ibv_send_wr`.
unsafe extern "C" fn wr_rdma_write_imm(qp: *mut ibv_qp, rkey: u32, remote_addr: u64, imm: u32) {
    let remote = PendRemote::Rdma {
        addr: remote_addr,
        rkey,
    };
    // SAFETY: as above.
    if unsafe { begin(qp, WrOpcode::RdmaWriteWithImm, remote) }.is_some() {
        // SAFETY: as above; the WR was just begun.
        if let Some(w) = unsafe { batch(qp) }.and_then(|(_, b)| b.wrs.last_mut()) {
            w.imm_data = u32::from_be(imm);
        }
    }
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp) {
    // SAFETY: as above.
    let _ = unsafe { begin(qp, WrOpcode::Send, PendRemote::None) };
}

unsafe extern "C" fn wr_send_imm(qp: *mut ibv_qp, imm: u32) {
    // SAFETY: as above.
    if unsafe { begin(qp, WrOpcode::SendWithImm, PendRemote::None) }.is_some() {
        // SAFETY: as above.
        if let Some(w) = unsafe { batch(qp) }.and_then(|(_, b)| b.wrs.last_mut()) {
            w.imm_data = u32::from_be(imm);
        }
    }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ibv_qp, invalidate_rkey: u32) {
    // SAFETY: as above.
    if unsafe { begin(qp, WrOpcode::SendWithInv, PendRemote::None) }.is_some() {
        // SAFETY: as above.
        if let Some(w) = unsafe { batch(qp) }.and_then(|(_, b)| b.wrs.last_mut()) {
            w.invalidate_rkey = invalidate_rkey;
        }
    }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ibv_qp, invalidate_rkey: u32) {
    // SAFETY: as above.
    if unsafe { begin(qp, WrOpcode::LocalInv, PendRemote::None) }.is_some() {
        // SAFETY: as above.
        if let Some(w) = unsafe { batch(qp) }.and_then(|(_, b)| b.wrs.last_mut()) {
            w.invalidate_rkey = invalidate_rkey;
        }
    }
}

/// `ibv_wr_bind_mw`: bind `mw` (type 2) with R_Key `rkey` to `bind_info`; `mw->rkey`
/// takes `rkey` at once, as a WR bind's does in `ibv_post_send`.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp,
    mw: *mut c_void,
    rkey: u32,
    bind_info: *const c_void,
) {
    // SAFETY: the application passes a live window and bind info (C contract).
    let (Some(m), Some(b)) = (
        unsafe { mw.cast::<crate::objects::UMw>().as_mut() },
        unsafe { bind_info.cast::<ibv_mw_bind_info>().as_ref() },
    ) else {
        // SAFETY: as above.
        unsafe { refuse(qp) };
        return;
    };
    // SAFETY: a NULL or live MR (contract).
    let lkey = unsafe { b.mr.as_ref() }.map_or(0, |r| r.lkey);
    let remote = PendRemote::MwBind {
        mw_rkey: m.ibv.rkey,
        new_rkey: rkey,
        lkey,
        addr: b.addr,
        length: b.length,
        access: b.mw_access_flags,
    };
    // SAFETY: as above.
    if unsafe { begin(qp, WrOpcode::BindMw, remote) }.is_some() {
        m.ibv.rkey = rkey;
        if let Some(w) = &m.mw {
            w.set_rkey(rkey);
        }
    }
}

/// `ibv_wr_set_xrc_srqn`: the XRC SRQ at the responder that receives the WR begun last
/// (an XRC initiator's; on other QPs the number is ignored, as the hardware would).
unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ibv_qp, srqn: u32) {
    // SAFETY: as above.
    let Some((_, b)) = (unsafe { last(qp) }) else {
        return;
    };
    if let Some(w) = b.wrs.last_mut() {
        w.remote_qpn = srqn;
    }
}

unsafe extern "C" fn wr_set_ud_addr(qp: *mut ibv_qp, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: as above.
    let Some((_, b)) = (unsafe { last(qp) }) else {
        return;
    };
    if ah.is_null() {
        b.err = libc::EINVAL;
        return;
    }
    if let Some(w) = b.wrs.last_mut() {
        w.ah = ah;
        w.remote_qpn = qpn;
        w.remote_qkey = qkey;
    }
}

/// Replaces the last WR's payload with the gather list `list` (copied).
fn set_sges(q: &UQp, b: &mut Batch, list: &[ibv_sge]) {
    if list.len() > q.batch.max_sge {
        b.err = libc::ENOSPC;
        return;
    }
    let Some(w) = b.wrs.last_mut() else {
        return;
    };
    // The last WR's SGEs are at the end of the buffer: replace them.
    b.sges.truncate(w.sges.start);
    b.sges.extend(list.iter().map(|s| Sge {
        addr: s.addr,
        length: s.length,
        lkey: s.lkey,
    }));
    w.sges = w.sges.start..b.sges.len();
    w.inline = None;
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp, lkey: u32, addr: u64, length: u32) {
    // SAFETY: as above.
    let Some((q, b)) = (unsafe { last(qp) }) else {
        return;
    };
    // As rxe: a zero-length SGE is no gather list at all.
    if length == 0 {
        set_sges(q, b, &[]);
    } else {
        set_sges(q, b, &[ibv_sge { addr, length, lkey }]);
    }
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: as above.
    let Some((q, b)) = (unsafe { last(qp) }) else {
        return;
    };
    if num_sge > q.batch.max_sge {
        b.err = libc::ENOSPC;
        return;
    }
    if num_sge > 0 && sg_list.is_null() {
        b.err = libc::EINVAL;
        return;
    }
    let list = if num_sge == 0 {
        &[][..]
    } else {
        // SAFETY: `sg_list` holds `num_sge` SGEs (contract).
        unsafe { core::slice::from_raw_parts(sg_list, num_sge) }
    };
    set_sges(q, b, list);
}

/// Replaces the last WR's payload with the concatenation of `bufs` (copied).
///
/// # Safety
/// Every buffer is valid for its length (contract).
unsafe fn set_inline(q: &UQp, b: &mut Batch, bufs: &[(*const u8, usize)]) {
    let total = bufs.iter().fold(0usize, |t, &(_, l)| t.saturating_add(l));
    if total > q.batch.max_inline {
        b.err = libc::ENOSPC;
        return;
    }
    if bufs.iter().any(|&(p, l)| l > 0 && p.is_null()) {
        b.err = libc::EINVAL;
        return;
    }
    let Some(w) = b.wrs.last_mut() else {
        return;
    };
    if let Some(r) = w.inline.take() {
        b.inline.truncate(r.start);
    }
    b.sges.truncate(w.sges.start);
    w.sges = w.sges.start..w.sges.start;
    let start = b.inline.len();
    for &(p, l) in bufs {
        if l > 0 {
            // SAFETY: valid for `l` bytes (contract), copied now as rxe copies into the WQE.
            b.inline
                .extend_from_slice(unsafe { core::slice::from_raw_parts(p, l) });
        }
    }
    w.inline = Some(start..b.inline.len());
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ibv_qp, addr: *mut c_void, length: usize) {
    // SAFETY: as above.
    let Some((q, b)) = (unsafe { last(qp) }) else {
        return;
    };
    // SAFETY: forwarded contract.
    unsafe { set_inline(q, b, &[(addr.cast::<u8>().cast_const(), length)]) };
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    // SAFETY: as above.
    let Some((q, b)) = (unsafe { last(qp) }) else {
        return;
    };
    if num_buf > 0 && buf_list.is_null() {
        b.err = libc::EINVAL;
        return;
    }
    let list = if num_buf == 0 {
        &[][..]
    } else {
        // SAFETY: `buf_list` holds `num_buf` entries (contract).
        unsafe { core::slice::from_raw_parts(buf_list, num_buf) }
    };
    let bufs: Vec<(*const u8, usize)> = list
        .iter()
        .map(|d| (d.addr.cast::<u8>().cast_const(), d.length))
        .collect();
    // SAFETY: forwarded contract.
    unsafe { set_inline(q, b, &bufs) };
}

/// `wr_start`: opens a batch (waiting while another thread has one open on this QP).
unsafe extern "C" fn wr_start(qp: *mut ibv_qp) {
    // SAFETY: a live extended QP (contract).
    let Some(q) = (unsafe { qp.cast::<UQp>().as_ref() }) else {
        return;
    };
    q.batch.open.acquire();
    // SAFETY: we own the batch now.
    let b = unsafe { &mut *q.batch.batch.get() };
    b.err = 0;
    b.wrs.clear();
    b.sges.clear();
    b.inline.clear();
}

/// Closes the batch.
fn close(q: &UQp) {
    q.batch.open.release();
}

/// `wr_complete`: posts the batch; 0, or the batch's error / the post's errno. On a post
/// error the WRs before the failing one were posted (as with `ibv_post_send`).
unsafe extern "C" fn wr_complete(qp: *mut ibv_qp) -> c_int {
    // SAFETY: as above.
    let Some((q, b)) = (unsafe { batch(qp) }) else {
        return errno_ret(libc::EINVAL);
    };
    let r = post_batch(q, b);
    close(q);
    errno_ret(r)
}

/// `wr_abort`: drops the batch; nothing is posted.
unsafe extern "C" fn wr_abort(qp: *mut ibv_qp) {
    // SAFETY: as above.
    if let Some((q, _)) = unsafe { batch(qp) } {
        close(q);
    }
}

fn post_batch(q: &UQp, b: &Batch) -> c_int {
    if b.err != 0 {
        return b.err;
    }
    let Some(inner) = q.qp.as_ref() else {
        return libc::EINVAL;
    };
    if b.wrs.is_empty() {
        return 0;
    }
    let ud = inner.qp_type() == QpType::Ud;
    let mut wrs: Vec<SendWr<'_>> = Vec::with_capacity(b.wrs.len());
    for w in &b.wrs {
        let payload = match &w.inline {
            Some(r) => match b.inline.get(r.clone()) {
                Some(d) => Payload::Inline(d),
                None => return libc::EINVAL,
            },
            None => match b.sges.get(w.sges.clone()) {
                Some(l) => Payload::Sges(l),
                None => return libc::EINVAL,
            },
        };
        let mut flags = w.flags & !SendFlags::INLINE.bits();
        if w.inline.is_some() {
            flags |= SendFlags::INLINE.bits();
        }
        let remote = if ud {
            // SAFETY: a non-NULL AH the application named for this WR is live until the
            // WR completes (C API contract, as for `ibv_send_wr.wr.ud.ah`).
            let Some(ah) = (unsafe { uah(w.ah) }) else {
                return libc::EINVAL;
            };
            Remote::Ud {
                ah: &ah.ah,
                remote_qpn: w.remote_qpn,
                remote_qkey: w.remote_qkey,
            }
        } else {
            match w.remote {
                PendRemote::None => Remote::None,
                PendRemote::Rdma { addr, rkey } => Remote::Rdma { addr, rkey },
                PendRemote::Atomic {
                    addr,
                    rkey,
                    compare_add,
                    swap,
                } => Remote::Atomic {
                    addr,
                    rkey,
                    compare_add,
                    swap,
                },
                PendRemote::MwBind {
                    mw_rkey,
                    new_rkey,
                    lkey,
                    addr,
                    length,
                    access,
                } => Remote::MwBind {
                    mw_rkey,
                    new_rkey,
                    lkey,
                    addr,
                    length,
                    access,
                },
            }
        };
        wrs.push(SendWr {
            wr_id: w.wr_id,
            opcode: w.opcode,
            send_flags: SendFlags(flags),
            payload,
            imm_data: w.imm_data,
            invalidate_rkey: w.invalidate_rkey,
            remote,
            // `wr_set_xrc_srqn` keeps the SRQ number where UD keeps its QPN.
            xrc_remote_srqn: if ud { 0 } else { w.remote_qpn },
        });
    }
    match post_sends(inner, &wrs) {
        Ok(()) => 0,
        Err((_, e)) => e,
    }
}
