//! Exported symbols that uroce does not implement, each failing the way the C API expects
//! (docs/compat.md §0: every import of a `-z now` binary must resolve, including ones on
//! paths the tools never take).
//!
//! A stub is declared without parameters: under the x86_64 SysV calling convention the
//! caller owns its arguments, so a callee that ignores them is ABI-compatible with any
//! prototype, variadic ones included. Only the return value must match the C type: an
//! `int` errno, an `int` −1 with `errno`, a NULL pointer with `errno`, or nothing.

use core::ffi::{c_int, c_uint, c_void};

use crate::util::set_errno;

/// `int f(...)` returning a positive errno (also stored in `errno`), as rdma-core's `int`
/// verbs do; 0 is success.
macro_rules! errno_stubs {
    ($err:expr => $($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        pub extern "C" fn $name() -> c_int {
            crate::util::errno_ret($err)
        }
    )*};
}

/// `T *f(...)` returning NULL with `errno` set.
macro_rules! null_stubs {
    ($err:expr => $($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        pub extern "C" fn $name() -> *mut c_void {
            set_errno($err);
            core::ptr::null_mut()
        }
    )*};
}

/// `void f(...)` that does nothing.
macro_rules! void_stubs {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        pub extern "C" fn $name() {}
    )*};
}

// ---- Public API that uroce does not offer (permanent: no such feature in the device) ----

null_stubs!(libc::EOPNOTSUPP =>
    /// Sharing a context across processes needs a kernel file descriptor.
    ibv_import_device,
    /// See `ibv_import_device`.
    ibv_import_pd,
    /// See `ibv_import_device`.
    ibv_import_mr,
    /// See `ibv_import_device`.
    ibv_import_dm,
    /// dma-buf registration needs a kernel exporter.
    ibv_reg_dmabuf_mr,
);

void_stubs!(
    /// Nothing can be imported, so nothing is unimported.
    ibv_unimport_pd,
    /// See `ibv_unimport_pd`.
    ibv_unimport_mr,
    /// See `ibv_unimport_pd`.
    ibv_unimport_dm,
    /// Converts kernel `ib_user_path_rec`; only the system librdmacm calls it, and uroce
    /// ships its own librdmacm.
    ibv_copy_path_rec_from_kern,
    /// See `ibv_copy_path_rec_from_kern`.
    ibv_copy_path_rec_to_kern,
    /// See `ibv_copy_path_rec_from_kern`.
    ibv_copy_qp_attr_from_kern,
    /// See `ibv_copy_path_rec_from_kern`.
    ibv_copy_ah_attr_from_kern,
);

errno_stubs!(libc::EOPNOTSUPP =>
    /// Multicast groups are not implemented by the uroce device (perftest uses them only
    /// with `--mcg`).
    ibv_attach_mcast,
    /// See `ibv_attach_mcast`.
    ibv_detach_mcast,
    /// Provider-internal L2 resolution (mlx4/mlx5 only).
    ibv_resolve_eth_l2_from_gid,
);

/// `ibv_fork_init`: nothing to do (registered memory is not pinned by a kernel, so a fork
/// cannot take pages away from the device).
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`, the truthful answer (see `ibv_fork_init`).
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    crate::types::IBV_FORK_UNNEEDED
}

errno_stubs!(0 =>
    /// `madvise(MADV_DOFORK)` bookkeeping is not needed (see `ibv_fork_init`); success.
    ibv_dofork_range,
    /// See `ibv_dofork_range`.
    ibv_dontfork_range,
    /// `ibv_query_qp_data_in_order`: 0 means "in-order placement not guaranteed", which is
    /// always a correct answer.
    ibv_query_qp_data_in_order,
);

// ---- IBVERBS_PRIVATE_34: the provider interface (§2.1) ----
//
// rdma-core's own providers (the system libmlx5/libefa) link against these. They are
// loaded only if our stub libmlx5/libefa are not found first, and even then they never get a
// device from us, so only their ELF constructors run: those call `verbs_register_driver_34`.

/// `verbs_register_driver_34(const struct verbs_device_ops *)`: called from provider
/// constructors; accepting and ignoring the registration is correct, as uroce's device is
/// not a kernel device a provider could drive.
pub extern "C" fn verbs_register_driver_34() {}

// `bool verbs_allow_disassociate_destroy` (IBVERBS_PRIVATE_34): a 1-byte, writable data
// object, defined in assembly from exports.txt (`data 1`) so that it carries its version.

/// `unsigned int __ioctl_final_num_attrs(unsigned int num_attrs, struct ibv_command_buffer *)`.
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint) -> c_uint {
    num_attrs
}

null_stubs!(libc::EOPNOTSUPP =>
    /// Provider context allocation: no kernel device to allocate for.
    _verbs_init_and_alloc_context,
    /// See `_verbs_init_and_alloc_context`.
    verbs_open_device,
);

void_stubs!(
    /// Provider logging.
    __verbs_log,
    /// Provider CQ initialisation.
    verbs_init_cq,
    /// Provider op-table installation.
    verbs_set_ops,
    /// Provider context teardown.
    verbs_uninit_context,
);

errno_stubs!(libc::EOPNOTSUPP =>
    /// The kernel ioctl path.
    execute_ioctl,
    ibv_cmd_advise_mr, ibv_cmd_alloc_dm, ibv_cmd_alloc_mw, ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast, ibv_cmd_close_xrcd, ibv_cmd_create_ah, ibv_cmd_create_counters,
    ibv_cmd_create_cq, ibv_cmd_create_cq_ex, ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp, ibv_cmd_create_qp, ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2, ibv_cmd_create_rwq_ind_table, ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex, ibv_cmd_create_wq, ibv_cmd_dealloc_mw, ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr, ibv_cmd_destroy_ah, ibv_cmd_destroy_counters, ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow, ibv_cmd_destroy_flow_action, ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table, ibv_cmd_destroy_srq, ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast, ibv_cmd_free_dm, ibv_cmd_get_context, ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp, ibv_cmd_modify_qp, ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq, ibv_cmd_modify_wq, ibv_cmd_open_qp, ibv_cmd_open_xrcd,
    ibv_cmd_poll_cq, ibv_cmd_post_recv, ibv_cmd_post_send, ibv_cmd_post_srq_recv,
    ibv_cmd_query_context, ibv_cmd_query_device_any, ibv_cmd_query_mr, ibv_cmd_query_port,
    ibv_cmd_query_qp, ibv_cmd_query_srq, ibv_cmd_read_counters, ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr, ibv_cmd_reg_mr, ibv_cmd_req_notify_cq, ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);
