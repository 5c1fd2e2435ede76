//! `libibverbs.so.1` for uroce: unmodified rdma-core programs (ibverbs-utils, perftest,
//! rdmacm-utils as built by Debian 12) run on uroce's device when
//! `LD_LIBRARY_PATH=target/compat` puts this library in front of the system one.
//!
//! # The ABI (reference: docs/compat.md)
//!
//! * **Exports**: the 146 default-version symbols of rdma-core 44, under upstream's version
//!   nodes `IBVERBS_1.0 ← 1.1 ← 1.5 ← … ← 1.14` and `IBVERBS_PRIVATE_34` (§1, §2), listed in
//!   `exports.txt`, including the 1-byte data object `verbs_allow_disassociate_destroy`. The
//!   binaries are linked `-z now`, so every import must resolve at load time, including
//!   ones they never call. `build.rs` (crate `compat-symver`) turns the table into a version
//!   script plus one assembly entry point per symbol — a `jmp` to the Rust function of the
//!   same name re-exported at this crate's root — bound to its node with `.symver`, so each
//!   comes out as `name@@NODE` (rustc's own version script never names these symbols, which
//!   is what made plain `#[no_mangle]` exports come out unversioned, §6.2). The link refuses
//!   undefined symbols, so a table entry without a definition fails the build.
//! * **Layouts**: [`types`] mirrors the C structs with compile-time size/offset assertions,
//!   in particular the `ibv_context.ops` slots the inline fast-path functions call and the
//!   `verbs_context` (sz 648, `abi_compat` = `UINTPTR_MAX`) in front of the context (§3, §5).
//!   [`cq`] and [`qp`] also assert that `ibv_wc`/`ibv_sge` and the ABI's `Wc`/`Sge` share
//!   one layout, which is what lets the fast path hand the application's arrays to the
//!   rings without copying.
//!
//! # What is implemented where
//!
//! On the device, through the `uroce` crate (the `verbs` API with the embedded NIC as
//! provider, installed on the first `ibv_open_device`):
//! * [`context`]: `ibv_open_device`, `ibv_close_device`, `ibv_query_device` (+ the
//!   `query_device_ex` op), `ibv_query_port` (48-byte compat symbol + the 52-byte
//!   `query_port` op), `ibv_query_gid`, `_ibv_query_gid_ex`, `_ibv_query_gid_table`,
//!   `ibv_query_gid_type`, `ibv_query_pkey`, `ibv_get_pkey_index`, `ibv_get_async_event`,
//!   `ibv_ack_async_event`;
//! * [`objects`]: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr`, `ibv_reg_mr_iova`,
//!   `ibv_reg_mr_iova2`, `ibv_dereg_mr`, `ibv_create_ah`, `ibv_create_ah_from_wc`,
//!   `ibv_init_ah_from_wc`, `ibv_destroy_ah`;
//! * [`cq`]: `ibv_create_comp_channel`, `ibv_destroy_comp_channel`, `ibv_create_cq`,
//!   `ibv_resize_cq`, `ibv_destroy_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events`, ops
//!   `poll_cq`, `req_notify_cq` and `create_cq_ex` (the `ibv_cq_ex` poll interface:
//!   `start_poll`, `next_poll`, `end_poll`, `read_*`);
//! * [`qp`]: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`,
//!   `ibv_query_ece`, `ibv_set_ece` (docs/wire.md §5.6),
//!   `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`, `ibv_destroy_srq`, ops
//!   `post_send`, `post_recv`, `post_srq_recv` (straight to the rings), `create_qp_ex`;
//! * [`qp_ex`]: `ibv_qp_to_qp_ex` and the `ibv_wr_*` functions of an extended QP.
//!
//! Without the device:
//! * [`device`]: `ibv_get_device_list`, `ibv_free_device_list`, `ibv_get_device_name`,
//!   `ibv_get_device_guid`, `ibv_get_device_index` (from `UROCE_DEVICES`),
//!   `ibv_get_sysfs_path`, `ibv_read_sysfs_file` (emulated attributes for our devices,
//!   real files otherwise), `ibv_read_ibdev_sysfs_file` (−1: providers only);
//! * [`strings`]: `ibv_wc_status_str`, `ibv_port_state_str`, `ibv_node_type_str`,
//!   `ibv_event_type_str`, `ibv_rate_to_mult`, `mult_to_ibv_rate`, `ibv_rate_to_mbps`,
//!   `mbps_to_ibv_rate` (byte-identical to rdma-core 44, checked by tests/compat/load.sh);
//! * [`stubs`]: `ibv_fork_init`, `ibv_is_fork_initialized` (UNNEEDED), `ibv_dofork_range`,
//!   `ibv_dontfork_range`, `ibv_query_qp_data_in_order` (0), `verbs_register_driver_34`
//!   (no-op), `__ioctl_final_num_attrs`.
//!
//! Not offered by uroce (EOPNOTSUPP in the C shape; [`stubs`]): `ibv_import_*`,
//! `ibv_unimport_*`, `ibv_reg_dmabuf_mr`, `ibv_attach_mcast`,
//! `ibv_detach_mcast`, `ibv_resolve_eth_l2_from_gid`, the
//! `ibv_copy_*_kern` converters (no-ops; system librdmacm only), the provider interface
//! (`ibv_cmd_*`, `execute_ioctl`, `_verbs_init_and_alloc_context`, `verbs_open_device`,
//! `verbs_init_cq`, `verbs_set_ops`, `verbs_uninit_context`, `__verbs_log`), and every
//! extended `verbs_context` op except `query_port`, `query_device_ex`, `create_qp_ex`,
//! `create_cq_ex` and XRC's `open_xrcd`, `close_xrcd`, `create_srq_ex`, `get_srq_num`
//! ([`xrc`], [`qp`]; docs/compat.md §11.5) (NULL slots: the inlines `ibv_alloc_dm`,
//! `ibv_open_qp`, … fail with EOPNOTSUPP as for a device without them).
//!
//! Errors follow rdma-core's conventions: an `int` verb returns the errno value and stores it
//! in `errno` as well; pointer-returning verbs give NULL with `errno` set; the few documented
//! as −1 (`ibv_query_gid`, `ibv_query_pkey`, `ibv_get_cq_event`, …) set `errno`.
//!
//! # Safety
//!
//! This is an FFI crate: every exported function takes raw pointers from C and trusts them
//! as the C API contract says (as rdma-core does); device pointers are checked against our
//! registry, NULL is rejected everywhere. Each `unsafe` block says which part of the
//! contract makes it sound. Entry points on the slow path run under `util::guard`, so a
//! bug returns an error instead of unwinding into C; the fast-path ops are written not to
//! panic.

pub mod context;
pub mod cq;
pub mod device;
pub mod objects;
pub mod qp;
pub mod qp_ex;
pub mod rdmacm;
pub mod strings;
pub mod stubs;
pub mod types;
mod util;
pub mod xrc;

// The exported C names, each an entry point that jumps to the Rust function of the same
// name re-exported here (compat-symver). Not in unit-test builds: an executable has no
// version script defining the nodes.
pub use context::*;
pub use cq::*;
pub use device::*;
pub use objects::*;
pub use qp::*;
pub use qp_ex::*;
pub use rdmacm::*;
pub use strings::*;
pub use stubs::*;

#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/exports.rs"));
