//! XRC domains: the `open_xrcd` and `close_xrcd` ops of the `verbs_context`, which the
//! inline `ibv_open_xrcd` / `ibv_close_xrcd` of `verbs.h` call (docs/compat.md §11.5). The
//! XRC SRQ and QP ops are in [`crate::qp`].

use core::ffi::c_int;
use std::os::fd::BorrowedFd;

use crate::context::{errno_of, uctx};
use crate::types::*;
use crate::util::{guard, guard_errno, set_errno};

/// An XRC domain: rdma-core's `verbs_xrcd` as far as programs read it (`ibv_xrcd` first).
#[derive(Debug)]
#[repr(C)]
pub struct UXrcd {
    pub(crate) ibv: ibv_xrcd,
    pub(crate) xrcd: Option<uroce::Xrcd>,
}

/// The domain behind a non-NULL `ibv_xrcd`.
///
/// # Safety
/// `x` is NULL or an XRCD from [`op_open_xrcd`] not yet closed.
pub(crate) unsafe fn uxrcd<'a>(x: *mut ibv_xrcd) -> Option<&'a uroce::Xrcd> {
    // SAFETY: a non-NULL XRCD pointer is the first field of a live boxed UXrcd.
    unsafe { x.cast::<UXrcd>().as_ref() }.and_then(|u| u.xrcd.as_ref())
}

/// The `open_xrcd` op: `IBV_XRCD_INIT_ATTR_FD` and `IBV_XRCD_INIT_ATTR_OFLAGS` are
/// required (rdma-core's `ibv_cmd_open_xrcd` refuses others with EINVAL); `fd` −1 opens a
/// domain of its own, a file's descriptor the domain every open of that file shares.
///
/// # Safety
/// `context` is a live context; `attr` is valid.
pub(crate) unsafe extern "C" fn op_open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    guard(core::ptr::null_mut(), || {
        // SAFETY: per the contract.
        let (Some(u), Some(a)) = (unsafe { uctx(context) }, unsafe { attr.as_ref() }) else {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        };
        let need = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if a.comp_mask & need != need || a.comp_mask & !need != 0 {
            set_errno(libc::EINVAL);
            return core::ptr::null_mut();
        }
        let file = if a.fd == -1 {
            None
        } else if a.fd < 0 {
            set_errno(libc::EBADF);
            return core::ptr::null_mut();
        } else {
            // SAFETY: the application's descriptor, open for the duration of this call
            // (contract); only fstat'ed.
            Some(unsafe { BorrowedFd::borrow_raw(a.fd) })
        };
        match u.ctx.open_xrcd(file, a.oflags) {
            Ok(x) => {
                u.retain();
                Box::into_raw(Box::new(UXrcd {
                    ibv: ibv_xrcd { context },
                    xrcd: Some(x),
                }))
                .cast::<ibv_xrcd>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// The `close_xrcd` op: 0, or an errno (EBUSY while its SRQs or QPs exist) with the domain
/// intact.
///
/// # Safety
/// `xrcd` came from [`op_open_xrcd`]; after success it is not used again.
pub(crate) unsafe extern "C" fn op_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    guard_errno(|| {
        let ux = xrcd.cast::<UXrcd>();
        if ux.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live boxed UXrcd; only this call touches it now.
        let Some(inner) = (unsafe { (*ux).xrcd.take() }) else {
            return libc::EINVAL;
        };
        if let Err((e, back)) = inner.close() {
            // SAFETY: as above.
            unsafe { (*ux).xrcd = Some(back) };
            return errno_of(&e);
        }
        // SAFETY: the domain's context outlives it (contract).
        if let Some(u) = unsafe { uctx((*ux).ibv.context) } {
            u.release();
        }
        // SAFETY: the leaked Box<UXrcd>, reclaimed once.
        drop(unsafe { Box::from_raw(ux) });
        0
    })
}
