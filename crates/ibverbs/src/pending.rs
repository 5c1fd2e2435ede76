//! Verbs that need an open device, not wired yet: each fails with `ENOSYS` in the shape the
//! C API expects (NULL + errno, a positive errno, or −1 + errno), never crashing.
//!
//! Wiring is mechanical: move a name from here to the module that implements it on top of
//! the `verbs` crate (the list in the crate docs says which goes where). Because no context
//! can be opened yet, no application can hold a uroce object to pass to these.

use core::ffi::{c_int, c_void};

use crate::util::set_errno;

const NOT_WIRED: c_int = libc::ENOSYS;

macro_rules! pending_null {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not wired to the device yet (NULL, ENOSYS).")]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(NOT_WIRED);
            core::ptr::null_mut()
        }
    )*};
}

macro_rules! pending_errno {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not wired to the device yet (returns ENOSYS).")]
        pub extern "C" fn $name() -> c_int {
            NOT_WIRED
        }
    )*};
}

macro_rules! pending_minus1 {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not wired to the device yet (−1, ENOSYS).")]
        pub extern "C" fn $name() -> c_int {
            set_errno(NOT_WIRED);
            -1
        }
    )*};
}

macro_rules! pending_void {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not wired to the device yet (no-op).")]
        pub extern "C" fn $name() {}
    )*};
}

pending_null!(
    ibv_open_device,
    ibv_alloc_pd,
    ibv_reg_mr,
    ibv_reg_mr_iova,
    ibv_reg_mr_iova2,
    ibv_create_comp_channel,
    ibv_create_cq,
    ibv_create_qp,
    ibv_create_srq,
    ibv_create_ah,
    ibv_create_ah_from_wc,
);

pending_errno!(
    ibv_close_device,
    ibv_query_device,
    ibv_query_port,
    ibv_dealloc_pd,
    ibv_dereg_mr,
    ibv_destroy_comp_channel,
    ibv_destroy_cq,
    ibv_resize_cq,
    ibv_modify_qp,
    ibv_query_qp,
    ibv_destroy_qp,
    ibv_modify_srq,
    ibv_query_srq,
    ibv_destroy_srq,
    ibv_destroy_ah,
    ibv_init_ah_from_wc,
    _ibv_query_gid_ex,
    ibv_query_gid_type,
);

pending_minus1!(
    ibv_query_gid,
    ibv_query_pkey,
    ibv_get_pkey_index,
    ibv_get_cq_event,
    ibv_get_async_event,
);

/// `_ibv_query_gid_table`: not wired yet (`ssize_t` −ENOSYS).
pub extern "C" fn _ibv_query_gid_table() -> isize {
    -(NOT_WIRED as isize)
}

pending_void!(ibv_ack_cq_events, ibv_ack_async_event);
