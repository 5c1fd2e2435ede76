//! `libmlx5.so.1` stub. Every perftest binary NEEDs libmlx5 (it is built with mlx5dv support),
//! but calls these functions only for mlx5 devices: DC transport, AES-XTS crypto and the
//! mlx5 new-post-send path, none of which a uroce device (vendor_part_id 0) selects
//! (docs/compat.md §0 item 6, §7). Each fails the way mlx5dv does for a device it does not
//! drive: pointer results are NULL with errno EOPNOTSUPP, `int` results are EOPNOTSUPP.
//!
//! Placing this library next to uroce's libibverbs keeps the system libmlx5 (and its
//! `IBVERBS_PRIVATE_34` imports) out of the process (strategy B).
//!
//! Parameters are omitted: under the x86_64 SysV ABI the caller owns the arguments, so a
//! callee that ignores them is compatible with any prototype; only the return type matters.

use core::ffi::{c_int, c_void};

fn not_mlx5_null() -> *mut c_void {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes.
    unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
    core::ptr::null_mut()
}

/// `struct ibv_qp *mlx5dv_create_qp(ctx, qp_attr, mlx5_qp_attr)`.
pub extern "C" fn mlx5dv_create_qp() -> *mut c_void {
    not_mlx5_null()
}

/// `int mlx5dv_devx_general_cmd(ctx, in, inlen, out, outlen)`.
pub extern "C" fn mlx5dv_devx_general_cmd() -> c_int {
    libc::EOPNOTSUPP
}

/// `struct ibv_context *mlx5dv_open_device(device, attr)`.
pub extern "C" fn mlx5dv_open_device() -> *mut c_void {
    not_mlx5_null()
}

/// `struct mlx5dv_mkey *mlx5dv_create_mkey(mkey_init_attr)`.
pub extern "C" fn mlx5dv_create_mkey() -> *mut c_void {
    not_mlx5_null()
}

/// `int mlx5dv_destroy_mkey(mkey)`.
pub extern "C" fn mlx5dv_destroy_mkey() -> c_int {
    libc::EOPNOTSUPP
}

/// `struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(qp)`.
pub extern "C" fn mlx5dv_qp_ex_from_ibv_qp_ex() -> *mut c_void {
    not_mlx5_null()
}

/// `int mlx5dv_crypto_login(ctx, login_attr)`.
pub extern "C" fn mlx5dv_crypto_login() -> c_int {
    libc::EOPNOTSUPP
}

/// `struct mlx5dv_dek *mlx5dv_dek_create(ctx, init_attr)`.
pub extern "C" fn mlx5dv_dek_create() -> *mut c_void {
    not_mlx5_null()
}

/// `int mlx5dv_dek_destroy(dek)`.
pub extern "C" fn mlx5dv_dek_destroy() -> c_int {
    libc::EOPNOTSUPP
}

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
    fn every_call_reports_not_supported() {
        for f in [
            mlx5dv_create_qp as extern "C" fn() -> *mut c_void,
            mlx5dv_open_device,
            mlx5dv_create_mkey,
            mlx5dv_qp_ex_from_ibv_qp_ex,
            mlx5dv_dek_create,
        ] {
            // SAFETY: resetting this thread's errno.
            unsafe { *libc::__errno_location() = 0 };
            assert!(f().is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
        for f in [
            mlx5dv_devx_general_cmd as extern "C" fn() -> c_int,
            mlx5dv_destroy_mkey,
            mlx5dv_crypto_login,
            mlx5dv_dek_destroy,
        ] {
            assert_eq!(f(), libc::EOPNOTSUPP);
        }
    }
}
