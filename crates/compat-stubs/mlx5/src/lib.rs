//! `libmlx5.so.1` stub: every function and version node of rdma-core 44's
//! `providers/mlx5/libmlx5.map`, so that any program or plugin linked against libmlx5 (perftest,
//! UCX's `libuct_ib`, libfabric, pyverbs, DPDK) loads beside uroce's libibverbs.
//!
//! A uroce device is not an mlx5 device, and every function here answers the way rdma-core's
//! libmlx5 answers for a device it does not drive (`mlx5_get_dv_ops()` finding no mlx5 ops, or
//! `is_mlx5_dev()` false in `providers/mlx5/mlx5.c` and `verbs.c`):
//!
//! * `mlx5dv_is_supported` is false, so callers take their plain-verbs path;
//! * functions returning a pointer give NULL with `errno` EOPNOTSUPP;
//! * functions returning `int` give EOPNOTSUPP (positive, as libmlx5 does) and set `errno` to
//!   it as well; the few whose success value is a count or descriptor give −1
//!   (`mlx5dv_vfio_get_events_fd`, `mlx5dv_devx_get_event`) or a negative errno
//!   (`mlx5dv_qp_cancel_posted_send_wrs`, `mlx5dv_dump_dr_*`), as their C documentation says;
//! * `void` functions do nothing (nothing they could release was ever created here).
//!
//! Placing this library next to uroce's libibverbs keeps the system libmlx5 (and its
//! `IBVERBS_PRIVATE_34` imports) out of the process.
//!
//! Parameters are omitted: under the x86_64 SysV ABI the caller owns the arguments, so a
//! callee that ignores them is compatible with any prototype; only the return type matters.

use core::ffi::{c_int, c_void};

const NOT_MLX5: c_int = libc::EOPNOTSUPP;

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes.
    unsafe { *libc::__errno_location() = e }
}

macro_rules! null_ptr {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "(...)` returning a pointer: NULL, errno EOPNOTSUPP.")]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(NOT_MLX5);
            core::ptr::null_mut()
        }
    )*};
}

macro_rules! int_errno {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`int ", stringify!($name), "(...)`: EOPNOTSUPP, also stored in errno.")]
        pub extern "C" fn $name() -> c_int {
            set_errno(NOT_MLX5);
            NOT_MLX5
        }
    )*};
}

macro_rules! int_neg_errno {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`int ", stringify!($name), "(...)`: −EOPNOTSUPP, errno EOPNOTSUPP.")]
        pub extern "C" fn $name() -> c_int {
            set_errno(NOT_MLX5);
            -NOT_MLX5
        }
    )*};
}

macro_rules! void_noop {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`void ", stringify!($name), "(...)`: nothing to release.")]
        pub extern "C" fn $name() {}
    )*};
}

/// `bool mlx5dv_is_supported(struct ibv_device *)`: false, no uroce device is an mlx5 device.
pub extern "C" fn mlx5dv_is_supported() -> bool {
    false
}

/// `int mlx5dv_vfio_get_events_fd(struct ibv_context *)`: no VFIO context, −1 with errno
/// EOPNOTSUPP.
pub extern "C" fn mlx5dv_vfio_get_events_fd() -> c_int {
    set_errno(NOT_MLX5);
    -1
}

/// `ssize_t mlx5dv_devx_get_event(channel, event_data, len)`: −1 with errno EOPNOTSUPP.
pub extern "C" fn mlx5dv_devx_get_event() -> isize {
    set_errno(NOT_MLX5);
    -1
}

int_neg_errno!(
    mlx5dv_qp_cancel_posted_send_wrs,
    mlx5dv_dump_dr_domain,
    mlx5dv_dump_dr_matcher,
    mlx5dv_dump_dr_rule,
    mlx5dv_dump_dr_table,
);

null_ptr!(
    mlx5dv_alloc_dm,
    mlx5dv_alloc_var,
    mlx5dv_create_cq,
    mlx5dv_create_flow,
    mlx5dv_create_flow_action_esp,
    mlx5dv_create_flow_action_modify_header,
    mlx5dv_create_flow_action_packet_reformat,
    mlx5dv_create_flow_matcher,
    mlx5dv_create_mkey,
    mlx5dv_create_qp,
    mlx5dv_create_steering_anchor,
    mlx5dv_create_wq,
    mlx5dv_crypto_login_create,
    mlx5dv_dek_create,
    mlx5dv_devx_alloc_msi_vector,
    mlx5dv_devx_alloc_uar,
    mlx5dv_devx_create_cmd_comp,
    mlx5dv_devx_create_eq,
    mlx5dv_devx_create_event_channel,
    mlx5dv_devx_obj_create,
    mlx5dv_devx_umem_reg,
    mlx5dv_devx_umem_reg_ex,
    mlx5dv_dm_map_op_addr,
    mlx5dv_dr_action_create_aso,
    mlx5dv_dr_action_create_default_miss,
    mlx5dv_dr_action_create_dest_array,
    mlx5dv_dr_action_create_dest_devx_tir,
    mlx5dv_dr_action_create_dest_ib_port,
    mlx5dv_dr_action_create_dest_ibv_qp,
    mlx5dv_dr_action_create_dest_root_table,
    mlx5dv_dr_action_create_dest_table,
    mlx5dv_dr_action_create_dest_vport,
    mlx5dv_dr_action_create_drop,
    mlx5dv_dr_action_create_flow_counter,
    mlx5dv_dr_action_create_flow_meter,
    mlx5dv_dr_action_create_flow_sampler,
    mlx5dv_dr_action_create_modify_header,
    mlx5dv_dr_action_create_packet_reformat,
    mlx5dv_dr_action_create_pop_vlan,
    mlx5dv_dr_action_create_push_vlan,
    mlx5dv_dr_action_create_tag,
    mlx5dv_dr_domain_create,
    mlx5dv_dr_matcher_create,
    mlx5dv_dr_rule_create,
    mlx5dv_dr_table_create,
    mlx5dv_get_vfio_device_list,
    mlx5dv_open_device,
    mlx5dv_pp_alloc,
    mlx5dv_qp_ex_from_ibv_qp_ex,
    mlx5dv_sched_leaf_create,
    mlx5dv_sched_node_create,
);

int_errno!(
    _mlx5dv_mkey_check,
    _mlx5dv_query_port,
    mlx5dv_crypto_login,
    mlx5dv_crypto_login_destroy,
    mlx5dv_crypto_login_query,
    mlx5dv_crypto_login_query_state,
    mlx5dv_crypto_logout,
    mlx5dv_dci_stream_id_reset,
    mlx5dv_dek_destroy,
    mlx5dv_dek_query,
    mlx5dv_destroy_flow_matcher,
    mlx5dv_destroy_mkey,
    mlx5dv_destroy_steering_anchor,
    mlx5dv_devx_cq_modify,
    mlx5dv_devx_cq_query,
    mlx5dv_devx_destroy_eq,
    mlx5dv_devx_free_msi_vector,
    mlx5dv_devx_general_cmd,
    mlx5dv_devx_get_async_cmd_comp,
    mlx5dv_devx_ind_tbl_modify,
    mlx5dv_devx_ind_tbl_query,
    mlx5dv_devx_obj_destroy,
    mlx5dv_devx_obj_modify,
    mlx5dv_devx_obj_query,
    mlx5dv_devx_obj_query_async,
    mlx5dv_devx_qp_modify,
    mlx5dv_devx_qp_query,
    mlx5dv_devx_query_eqn,
    mlx5dv_devx_srq_modify,
    mlx5dv_devx_srq_query,
    mlx5dv_devx_subscribe_devx_event,
    mlx5dv_devx_subscribe_devx_event_fd,
    mlx5dv_devx_umem_dereg,
    mlx5dv_devx_wq_modify,
    mlx5dv_devx_wq_query,
    mlx5dv_dr_action_destroy,
    mlx5dv_dr_action_modify_aso,
    mlx5dv_dr_action_modify_flow_meter,
    mlx5dv_dr_aso_other_domain_link,
    mlx5dv_dr_aso_other_domain_unlink,
    mlx5dv_dr_domain_destroy,
    mlx5dv_dr_domain_sync,
    mlx5dv_dr_matcher_destroy,
    mlx5dv_dr_matcher_set_layout,
    mlx5dv_dr_rule_destroy,
    mlx5dv_dr_table_destroy,
    mlx5dv_get_clock_info,
    mlx5dv_init_obj,
    mlx5dv_map_ah_to_qp,
    mlx5dv_modify_qp_lag_port,
    mlx5dv_modify_qp_sched_elem,
    mlx5dv_modify_qp_udp_sport,
    mlx5dv_query_device,
    mlx5dv_query_qp_lag_port,
    mlx5dv_reserved_qpn_alloc,
    mlx5dv_reserved_qpn_dealloc,
    mlx5dv_sched_leaf_destroy,
    mlx5dv_sched_leaf_modify,
    mlx5dv_sched_node_destroy,
    mlx5dv_sched_node_modify,
    mlx5dv_set_context_attr,
    mlx5dv_vfio_process_events,
);

void_noop!(
    mlx5dv_devx_destroy_cmd_comp,
    mlx5dv_devx_destroy_event_channel,
    mlx5dv_devx_free_uar,
    mlx5dv_dr_domain_allow_duplicate_rules,
    mlx5dv_dr_domain_set_reclaim_device_memory,
    mlx5dv_free_var,
    mlx5dv_pp_free,
);

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

    fn clear_errno() {
        set_errno(0);
    }

    #[test]
    fn every_call_reports_not_supported() {
        assert!(!mlx5dv_is_supported());
        for f in [
            mlx5dv_create_qp as extern "C" fn() -> *mut c_void,
            mlx5dv_open_device,
            mlx5dv_create_cq,
            mlx5dv_qp_ex_from_ibv_qp_ex,
            mlx5dv_get_vfio_device_list,
            mlx5dv_dm_map_op_addr,
        ] {
            clear_errno();
            assert!(f().is_null());
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
        for f in [
            mlx5dv_query_device as extern "C" fn() -> c_int,
            mlx5dv_init_obj,
            mlx5dv_devx_general_cmd,
            mlx5dv_destroy_mkey,
            mlx5dv_crypto_login,
        ] {
            clear_errno();
            assert_eq!(f(), libc::EOPNOTSUPP);
            assert_eq!(errno(), libc::EOPNOTSUPP);
        }
        clear_errno();
        assert_eq!(mlx5dv_vfio_get_events_fd(), -1);
        assert_eq!(errno(), libc::EOPNOTSUPP);
        assert_eq!(mlx5dv_devx_get_event(), -1);
        assert_eq!(mlx5dv_dump_dr_domain(), -libc::EOPNOTSUPP);
        assert_eq!(mlx5dv_qp_cancel_posted_send_wrs(), -libc::EOPNOTSUPP);
        mlx5dv_free_var();
    }
}
