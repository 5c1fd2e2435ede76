//! `libefa.so.1` stub: every function and version node of rdma-core 44's
//! `providers/efa/libefa.map`, so that programs linked against libefa (perftest, libfabric's
//! EFA provider) load beside uroce's libibverbs. A uroce device is not an EFA device, and each
//! function fails as rdma-core's libefa does for a device it does not drive (`is_efa_dev()`
//! false in `providers/efa/verbs.c`): pointer results are NULL with `errno` EOPNOTSUPP, `int`
//! results are EOPNOTSUPP (positive, as libefa returns them) with `errno` set to it too.
//!
//! Parameters are omitted: under the x86_64 SysV ABI a callee that ignores its arguments fits
//! any prototype.

use core::ffi::{c_int, c_void};

const NOT_EFA: c_int = libc::EOPNOTSUPP;

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes.
    unsafe { *libc::__errno_location() = e }
}

macro_rules! null_ptr {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "(...)` returning a pointer: NULL, errno EOPNOTSUPP.")]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(NOT_EFA);
            core::ptr::null_mut()
        }
    )*};
}

macro_rules! int_errno {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`int ", stringify!($name), "(...)`: EOPNOTSUPP, also stored in errno.")]
        pub extern "C" fn $name() -> c_int {
            set_errno(NOT_EFA);
            NOT_EFA
        }
    )*};
}

null_ptr!(
    efadv_create_driver_qp,
    efadv_create_qp_ex,
    efadv_create_cq,
    efadv_cq_from_ibv_cq_ex,
);

int_errno!(efadv_query_device, efadv_query_ah, efadv_wc_read_sgid);

// Versioned entry points for the functions above (compat-symver).
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/exports.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> c_int {
        // SAFETY: the calling thread's errno slot is valid for reads.
        unsafe { *libc::__errno_location() }
    }

    #[test]
    fn calls_report_not_supported() {
        for f in [
            efadv_create_driver_qp as extern "C" fn() -> *mut c_void,
            efadv_create_qp_ex,
            efadv_create_cq,
            efadv_cq_from_ibv_cq_ex,
        ] {
            set_errno(0);
            assert!(f().is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
        for f in [
            efadv_query_device as extern "C" fn() -> c_int,
            efadv_query_ah,
            efadv_wc_read_sgid,
        ] {
            set_errno(0);
            assert_eq!(f(), libc::EOPNOTSUPP);
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
    }
}
