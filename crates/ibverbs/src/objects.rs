//! Protection domains, memory regions and address handles (`ibv_alloc_pd`, `ibv_reg_mr*`,
//! `ibv_create_ah*`, …).
//!
//! Every C object is a box whose first field is the public struct the application reads
//! (`ibv_pd`, `ibv_mr`, `ibv_ah`), filled as rdma-core fills it (docs/compat.md §4), followed
//! by the `verbs` object that owns the resource. A pointer the application holds is thus a
//! pointer to the box.

use core::ffi::{c_int, c_uint, c_void};

use uroce::{AccessFlags, AhAttr, Gid, GlobalRoute, Wc, WcFlags};

use crate::context::{errno_of, release, retain, uctx};
use crate::types::*;
use crate::util::{guard, guard_errno, set_errno};

/// A protection domain.
#[repr(C)]
#[derive(Debug)]
pub struct UPd {
    pub(crate) ibv: ibv_pd,
    pub(crate) pd: uroce::Pd,
}

/// A memory region over application memory.
#[repr(C)]
#[derive(Debug)]
pub struct UMr {
    ibv: ibv_mr,
    mr: Option<uroce::Mr>,
}

/// A memory window.
#[repr(C)]
#[derive(Debug)]
pub struct UMw {
    pub(crate) ibv: ibv_mw,
    pub(crate) mw: Option<uroce::Mw>,
}

/// An address handle.
#[repr(C)]
#[derive(Debug)]
pub struct UAh {
    ibv: ibv_ah,
    pub(crate) ah: uroce::Ah,
}

/// # Safety
/// `pd` is NULL or a PD from [`ibv_alloc_pd`] not yet deallocated.
pub(crate) unsafe fn upd<'a>(pd: *mut ibv_pd) -> Option<&'a UPd> {
    // SAFETY: a non-NULL PD pointer is the first field of a live boxed UPd.
    unsafe { pd.cast::<UPd>().as_ref() }
}

/// # Safety
/// `ah` is a non-NULL AH from [`ibv_create_ah`] not yet destroyed (the fast path trusts
/// the application here, as rdma-core's providers do).
pub(crate) unsafe fn uah<'a>(ah: *mut ibv_ah) -> Option<&'a UAh> {
    // SAFETY: a non-NULL AH pointer is the first field of a live boxed UAh.
    unsafe { ah.cast::<UAh>().as_ref() }
}

/// `struct ibv_pd *ibv_alloc_pd(struct ibv_context *)`.
///
/// # Safety
/// `context` is a live context.
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { uctx(context) }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        match u.ctx.alloc_pd() {
            Ok(pd) => {
                let b = Box::new(UPd {
                    ibv: ibv_pd {
                        context,
                        handle: pd.handle(),
                    },
                    pd,
                });
                u.retain();
                Box::into_raw(b).cast::<ibv_pd>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// `int ibv_dealloc_pd(struct ibv_pd *)`. The verbs PD is released when its last child
/// (MR, QP, SRQ, AH) is gone; until then its handle stays valid on the device.
///
/// # Safety
/// `pd` came from [`ibv_alloc_pd`] and is not used after this call.
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract, NULL or a live boxed UPd.
        let Some(p) = (unsafe { upd(pd) }) else {
            return libc::EINVAL;
        };
        // As rdma-core's providers (the kernel's ib_dealloc_pd refuses a PD with users):
        // EBUSY, PD intact, while MRs, QPs, SRQs or AHs still use it.
        if p.pd.in_use() {
            return libc::EBUSY;
        }
        // SAFETY: per the contract, the pointer is a leaked Box<UPd>, reclaimed once; its
        // context is live.
        unsafe {
            let b = Box::from_raw(pd.cast::<UPd>());
            release(b.ibv.context);
        }
        0
    })
}

/// The C allocator of a parent domain: `alloc` / `free` called with the parent domain's
/// `ibv_pd` and `pd_context`, and uroce's resource types (1 QP, 2 SRQ, 3 CQ).
struct CAllocator {
    alloc: PdAllocFn,
    free: PdFreeFn,
    /// The parent domain's `ibv_pd` (its boxed UPd outlives every ring made in it).
    pd: usize,
    pd_context: usize,
}

fn resource_type(kind: uroce::BufferKind) -> u64 {
    match kind {
        uroce::BufferKind::Qp => 1,
        uroce::BufferKind::Srq => 2,
        uroce::BufferKind::Cq => 3,
    }
}

impl uroce::BufferAllocator for CAllocator {
    fn alloc(&self, len: usize, align: usize, kind: uroce::BufferKind) -> uroce::Buffer {
        // SAFETY: the application's allocator, called as rdma-core's providers call it.
        let p = unsafe {
            (self.alloc)(
                self.pd as *mut ibv_pd,
                self.pd_context as *mut c_void,
                len,
                align,
                resource_type(kind),
            )
        };
        if p as usize == IBV_ALLOCATOR_USE_DEFAULT {
            uroce::Buffer::Default
        } else if p.is_null() {
            uroce::Buffer::Failed
        } else {
            uroce::Buffer::At(p.cast())
        }
    }

    fn free(&self, ptr: *mut u8, kind: uroce::BufferKind) {
        // SAFETY: a buffer this allocator gave, handed back once (contract of the trait).
        unsafe {
            (self.free)(
                self.pd as *mut ibv_pd,
                self.pd_context as *mut c_void,
                ptr.cast(),
                resource_type(kind),
            )
        };
    }
}

// SAFETY: the pointers are the application's, used only to call its allocator back with
// them, as rdma-core's providers do from whichever thread creates or destroys a queue.
unsafe impl Send for CAllocator {}
// SAFETY: as above.
unsafe impl Sync for CAllocator {}

/// The `alloc_parent_domain` op (`ibv_alloc_parent_domain`): a PD standing for `attr->pd`
/// whose QPs' and SRQs' rings come from `attr->alloc` (when `IBV_PARENT_DOMAIN_INIT_ATTR_
/// ALLOCATORS` is set; an allocator may answer `IBV_ALLOCATOR_USE_DEFAULT`), freed with
/// `attr->free` when the queue is destroyed (docs/compat.md §11.6). No thread domains:
/// `td` must be NULL (EOPNOTSUPP otherwise, as `ibv_alloc_td` is). Released with
/// `ibv_dealloc_pd`, which leaves `attr->pd` allocated.
///
/// # Safety
/// `context` is a live context; `attr` is valid with a live PD of it.
pub(crate) unsafe extern "C" fn op_alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    guard(core::ptr::null_mut(), || {
        let fail = |e: c_int| {
            set_errno(e);
            core::ptr::null_mut()
        };
        // SAFETY: per the contract.
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        let known = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
        if a.comp_mask & !known != 0 {
            return fail(libc::EINVAL);
        }
        if !a.td.is_null() {
            return fail(libc::EOPNOTSUPP);
        }
        // SAFETY: a live PD (contract).
        let Some(p) = (unsafe { upd(a.pd) }) else {
            return fail(libc::EINVAL);
        };
        if p.ibv.context != context || p.pd.is_parent_domain() {
            return fail(libc::EINVAL);
        }
        let allocators = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS != 0 {
            match (a.alloc, a.free) {
                (Some(al), Some(fr)) => Some((al, fr)),
                _ => return fail(libc::EINVAL),
            }
        } else {
            None
        };
        let pd_context = if a.comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT != 0 {
            a.pd_context
        } else {
            core::ptr::null_mut()
        };
        let mut b = Box::new(UPd {
            ibv: ibv_pd {
                context,
                handle: p.ibv.handle,
            },
            pd: p.pd.clone(),
        });
        let me = core::ptr::from_mut(&mut b.ibv) as usize;
        let alloc = allocators.map(|(alloc, free)| {
            std::sync::Arc::new(CAllocator {
                alloc,
                free,
                pd: me,
                pd_context: pd_context as usize,
            }) as std::sync::Arc<dyn uroce::BufferAllocator>
        });
        b.pd = p.pd.parent_domain(alloc);
        // SAFETY: live context (contract).
        unsafe { retain(context) };
        Box::into_raw(b).cast::<ibv_pd>()
    })
}

/// Registers `[addr, addr+length)` with I/O virtual address `iova`.
///
/// # Safety
/// `pd` is a live PD; the memory stays mapped while registered (C API contract).
unsafe fn reg(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(p) = (unsafe { upd(pd) }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        // Optional access bits (relaxed ordering, …) are dropped by verbs, as rdma-core does
        // for a device that does not report them (§9).
        let access = AccessFlags(access);
        // SAFETY: the C API contract is reg_mr_iova's: the application keeps the memory
        // mapped until ibv_dereg_mr, and the device may access it concurrently.
        let res = unsafe { p.pd.reg_mr_iova(addr.cast::<u8>(), length, iova, access) };
        match res {
            Ok(mr) => {
                let b = Box::new(UMr {
                    ibv: ibv_mr {
                        context: p.ibv.context,
                        pd,
                        addr,
                        length,
                        handle: mr.handle(),
                        lkey: mr.lkey(),
                        rkey: mr.rkey(),
                    },
                    mr: Some(mr),
                });
                // SAFETY: the PD's context is live (contract).
                unsafe { retain(p.ibv.context) };
                Box::into_raw(b).cast::<ibv_mr>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// `struct ibv_mr *ibv_reg_mr(struct ibv_pd *, void *addr, size_t length, int access)`.
///
/// # Safety
/// `pd` is a live PD and the memory stays mapped until [`ibv_dereg_mr`].
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg(pd, addr, length, addr as usize as u64, access as c_uint) }
}

/// `struct ibv_mr *ibv_reg_mr_iova(pd, addr, length, uint64_t iova, int access)`.
///
/// # Safety
/// As [`ibv_reg_mr`].
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg(pd, addr, length, iova, access as c_uint) }
}

/// `struct ibv_mr *ibv_reg_mr_iova2(pd, addr, length, uint64_t iova, unsigned int access)`:
/// what perftest's `ibv_reg_mr` macro calls (§3).
///
/// # Safety
/// As [`ibv_reg_mr`].
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: forwarded contract.
    unsafe { reg(pd, addr, length, iova, access) }
}

/// `int ibv_dereg_mr(struct ibv_mr *)`: 0, or an errno with the MR still registered.
///
/// # Safety
/// `mr` came from an `ibv_reg_mr*` call; after success it is not used again.
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    guard_errno(|| {
        if mr.is_null() {
            return libc::EINVAL;
        }
        let m = mr.cast::<UMr>();
        // SAFETY: a live boxed UMr per the contract; only this call touches it now.
        let Some(inner) = (unsafe { (*m).mr.take() }) else {
            return libc::EINVAL;
        };
        match inner.dereg() {
            Ok(()) => {
                // SAFETY: the leaked Box<UMr>, reclaimed once, after its MR is gone; its
                // context is live.
                unsafe {
                    let b = Box::from_raw(m);
                    release(b.ibv.context);
                }
                0
            }
            Err((e, back)) => {
                // SAFETY: as above; the MR stays registered and owned by the box.
                unsafe { (*m).mr = Some(back) };
                errno_of(&e)
            }
        }
    })
}

/// `int ibv_rereg_mr(struct ibv_mr *, int flags, struct ibv_pd *, void *addr, size_t
/// length, int access)`, with rdma-core's return values (`libibverbs/verbs.c`): 0;
/// `IBV_REREG_MR_ERR_INPUT` with errno EINVAL for flags outside the three
/// `IBV_REREG_MR_CHANGE_*`, a translation without address or length, or access bits
/// without `CHANGE_ACCESS`; `IBV_REREG_MR_ERR_CMD` with the device's errno when the command
/// is refused (the MR is then unchanged). Fork ranges need no bookkeeping here
/// (`ibv_dontfork_range` is a no-op), so the fork errors never occur. Keys and handle stay;
/// `mr->pd`, `addr`, `length`, `lkey`, `rkey` are updated as rdma-core updates them.
///
/// # Safety
/// `mr` came from an `ibv_reg_mr*` call and is not deregistered; `pd` is NULL or a live
/// PD; with `CHANGE_TRANSLATION` the new memory stays mapped while registered.
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(IBV_REREG_MR_ERR_CMD, || {
        let input = || {
            set_errno(libc::EINVAL);
            IBV_REREG_MR_ERR_INPUT
        };
        let all =
            IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
        let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
        if mr.is_null()
            || flags & !all != 0
            || (translation && (length == 0 || addr.is_null()))
            || (access != 0 && flags & IBV_REREG_MR_CHANGE_ACCESS == 0)
        {
            return input();
        }
        let m = mr.cast::<UMr>();
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            // SAFETY: per the contract, NULL or a live boxed UPd.
            match unsafe { upd(pd) } {
                Some(p) => Some(p),
                None => {
                    set_errno(libc::EINVAL);
                    return IBV_REREG_MR_ERR_CMD;
                }
            }
        } else {
            None
        };
        // SAFETY: a live boxed UMr per the contract; the application does not use it
        // concurrently with this call (as with every verb on one MR).
        let Some(inner) = (unsafe { (*m).mr.as_mut() }) else {
            set_errno(libc::EINVAL);
            return IBV_REREG_MR_ERR_CMD;
        };
        let change = uroce::Rereg {
            translation: translation.then_some((addr as u64, length, addr as u64)),
            pd: new_pd.map(|p| &p.pd),
            access: (flags & IBV_REREG_MR_CHANGE_ACCESS != 0).then_some(AccessFlags(access as u32)),
        };
        // SAFETY: the C contract: the new memory stays mapped while registered.
        match unsafe { inner.rereg_raw(&change) } {
            Ok(()) => {
                let (lkey, rkey) = (inner.lkey(), inner.rkey());
                // SAFETY: as above.
                let ibv = unsafe { &mut (*m).ibv };
                (ibv.lkey, ibv.rkey) = (lkey, rkey);
                if new_pd.is_some() {
                    ibv.pd = pd;
                }
                if translation {
                    (ibv.addr, ibv.length) = (addr, length);
                }
                0
            }
            Err(e) => {
                set_errno(errno_of(&e));
                IBV_REREG_MR_ERR_CMD
            }
        }
    })
}

/// The `alloc_mw` op (inline `ibv_alloc_mw`): a window of type 1 or 2; NULL with errno
/// (EINVAL for another type, as the kernel).
///
/// # Safety
/// `pd` is a live PD.
pub(crate) unsafe extern "C" fn op_alloc_mw(pd: *mut ibv_pd, ty: c_uint) -> *mut ibv_mw {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let Some(p) = (unsafe { upd(pd) }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        let t = match ty {
            1 => uroce::MwType::Type1,
            2 => uroce::MwType::Type2,
            _ => {
                set_errno(libc::EINVAL);
                return core::ptr::null_mut();
            }
        };
        match p.pd.alloc_mw(t) {
            Ok(mw) => {
                let b = Box::new(UMw {
                    ibv: ibv_mw {
                        context: p.ibv.context,
                        pd,
                        rkey: mw.rkey(),
                        handle: mw.handle(),
                        type_: ty,
                    },
                    mw: Some(mw),
                });
                // SAFETY: the PD's context is live (contract).
                unsafe { retain(p.ibv.context) };
                Box::into_raw(b).cast::<ibv_mw>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// The `dealloc_mw` op: 0, or an errno with the window kept.
///
/// # Safety
/// `mw` came from [`op_alloc_mw`] and is not used after success.
pub(crate) unsafe extern "C" fn op_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    guard_errno(|| {
        if mw.is_null() {
            return libc::EINVAL;
        }
        let m = mw.cast::<UMw>();
        // SAFETY: a live boxed UMw per the contract.
        let Some(inner) = (unsafe { (*m).mw.take() }) else {
            return libc::EINVAL;
        };
        match inner.dealloc() {
            Ok(()) => {
                // SAFETY: the leaked Box<UMw>, reclaimed once; its context is live.
                unsafe {
                    let b = Box::from_raw(m);
                    release(b.ibv.context);
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// The `bind_mw` op (inline `ibv_bind_mw`, which has checked the type 1 window and the
/// MR's PD): posts a BIND_MW WR with the next R_Key, as rdma-core's rxe provider, and
/// stores that R_Key in `mw->rkey`. 0 or an errno.
///
/// # Safety
/// Live QP and window; `mw_bind` valid; its MR NULL or live.
pub(crate) unsafe extern "C" fn op_bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    guard_errno(|| {
        // SAFETY: per the contract.
        let (Some(q), Some(m), Some(b)) = (
            unsafe { qp.cast::<crate::qp::UQp>().as_ref() },
            unsafe { mw.cast::<UMw>().as_mut() },
            unsafe { mw_bind.as_ref() },
        ) else {
            return libc::EINVAL;
        };
        let (Some(qp), Some(w)) = (q.qp.as_ref(), m.mw.as_ref()) else {
            return libc::EINVAL;
        };
        // SAFETY: a non-NULL MR is live (contract).
        let lkey = unsafe { b.bind_info.mr.as_ref() }.map_or(0, |r| r.lkey);
        let info = uroce::MwBindInfo {
            lkey,
            addr: b.bind_info.addr,
            length: b.bind_info.length,
            access: AccessFlags(b.bind_info.mw_access_flags),
        };
        match qp.bind_mw(w, b.wr_id, info, uroce::SendFlags(b.send_flags)) {
            Ok(rkey) => {
                m.ibv.rkey = rkey;
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

pub(crate) fn ah_attr_from_c(a: &ibv_ah_attr) -> AhAttr {
    AhAttr {
        grh: GlobalRoute {
            dgid: Gid(a.grh.dgid.raw),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.is_global != 0,
        port_num: a.port_num,
    }
}

pub(crate) fn ah_attr_to_c(a: &AhAttr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: a.grh.dgid.0 },
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: u8::from(a.is_global),
        port_num: a.port_num,
    }
}

/// `struct ibv_ah *ibv_create_ah(struct ibv_pd *, struct ibv_ah_attr *)`. A flow label wider
/// than 20 bits is cut to them by the device, as rdma-core's providers do (docs/compat.md §11).
///
/// # Safety
/// `pd` is a live PD; `attr` is a valid `ibv_ah_attr`.
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let (Some(p), Some(a)) = (unsafe { upd(pd) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        match p.pd.create_ah(&ah_attr_from_c(a)) {
            Ok(ah) => {
                let b = Box::new(UAh {
                    ibv: ibv_ah {
                        context: p.ibv.context,
                        pd,
                        handle: ah.handle(),
                    },
                    ah,
                });
                // SAFETY: the PD's context is live (contract).
                unsafe { retain(p.ibv.context) };
                Box::into_raw(b).cast::<ibv_ah>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// `int ibv_destroy_ah(struct ibv_ah *)`.
///
/// # Safety
/// `ah` came from [`ibv_create_ah`] and no posted WR still refers to it.
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    guard_errno(|| {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the leaked Box<UAh>, reclaimed once; its context is live.
        unsafe {
            let b = Box::from_raw(ah.cast::<UAh>());
            release(b.ibv.context);
        }
        0
    })
}

/// `int ibv_init_ah_from_wc(ctx, port_num, struct ibv_wc *, struct ibv_grh *, struct
/// ibv_ah_attr *)`: the address vector answering a UD receive, from the GRH area at the start
/// of its buffer (RoCEv2: an IPv4 or IPv6 header inside those 40 bytes). 0 or −1 with errno.
///
/// # Safety
/// `wc` and `grh` are valid (`grh` 40 bytes); `ah_attr` is valid for a write.
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let ok = unsafe { uctx(context) }.is_some();
        if !ok || wc.is_null() || grh.is_null() || ah_attr.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: valid per the contract.
        let c = unsafe { wc.read() };
        let w = Wc {
            wr_id: c.wr_id,
            wc_flags: WcFlags(c.wc_flags),
            qp_num: c.qp_num,
            src_qp: c.src_qp,
            ..Wc::default()
        };
        // SAFETY: `grh` points to the 40-byte GRH area (contract).
        let bytes = unsafe {
            core::slice::from_raw_parts(grh.cast::<u8>(), core::mem::size_of::<ibv_grh>())
        };
        match uroce::init_ah_from_wc(&w, bytes, 0, port) {
            Some(a) => {
                // SAFETY: valid for a write per the contract.
                unsafe { ah_attr.write(ah_attr_to_c(&a)) };
                0
            }
            None => {
                set_errno(libc::EINVAL);
                -1
            }
        }
    })
}

/// `struct ibv_ah *ibv_create_ah_from_wc(pd, wc, grh, port_num)`.
///
/// # Safety
/// As [`ibv_init_ah_from_wc`] and [`ibv_create_ah`].
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { upd(pd) }) else {
        set_errno(libc::EINVAL);
        return core::ptr::null_mut();
    };
    let mut attr = ibv_ah_attr::default();
    // SAFETY: forwarded contract; `attr` is a local.
    if unsafe { ibv_init_ah_from_wc(p.ibv.context, port, wc, grh, &mut attr) } != 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: forwarded contract.
    unsafe { ibv_create_ah(pd, &mut attr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ah_attr_round_trips() {
        let c = ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: [7; 16] },
                flow_label: 0x12345,
                sgid_index: 1,
                hop_limit: 64,
                traffic_class: 3,
            },
            dlid: 0,
            sl: 2,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        };
        assert_eq!(ah_attr_to_c(&ah_attr_from_c(&c)), c);
    }
}
