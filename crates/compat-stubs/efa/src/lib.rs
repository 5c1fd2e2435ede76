//! `libefa.so.1` stub. perftest NEEDs libefa (built with SRD support) but calls it only for
//! EFA devices, which a uroce device is not (docs/compat.md §0 item 6, §7). Each function
//! fails as efadv does for a device it does not drive. Parameters are omitted: under the
//! x86_64 SysV ABI a callee that ignores its arguments fits any prototype.

use core::ffi::{c_int, c_void};

/// `struct ibv_qp *efadv_create_qp_ex(ctx, attr_ex, efa_attr, inlen)`: NULL, errno
/// EOPNOTSUPP.
pub extern "C" fn efadv_create_qp_ex() -> *mut c_void {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
    core::ptr::null_mut()
}

/// `int efadv_query_device(ctx, attr, inlen)`: EOPNOTSUPP.
pub extern "C" fn efadv_query_device() -> c_int {
    libc::EOPNOTSUPP
}

// Versioned entry points for the functions above (compat-symver).
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/exports.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_report_not_supported() {
        assert!(efadv_create_qp_ex().is_null());
        // SAFETY: the calling thread's errno slot is valid for reads.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::EOPNOTSUPP);
        assert_eq!(efadv_query_device(), libc::EOPNOTSUPP);
    }
}
