//! uroce's Rust verbs API: libibverbs and its provider in one crate.
//!
//! The object model follows libibverbs (docs/compat.md §4, §9) so that the
//! drop-in C `libibverbs.so.1` of a later issue is a thin layer over it:
//!
//! | libibverbs | here |
//! |---|---|
//! | `ibv_get_device_list`, `ibv_open_device` | [`devices`], [`open_device`], [`Device::open`] |
//! | `ibv_context`, `ibv_query_device/port/gid` | [`Context`] |
//! | `ibv_pd`, `ibv_mr`, `ibv_ah` | [`Pd`], [`Mr`] / [`MrBuf`], [`Ah`] |
//! | `ibv_cq`, `ibv_comp_channel`, `ibv_wc` | [`Cq`], [`CompChannel`], [`Wc`] |
//! | `ibv_qp`, `ibv_qp_attr`, `ibv_qp_init_attr` | [`Qp`], [`QpAttr`], [`QpInitAttr`] |
//! | `ibv_srq` | [`Srq`] |
//! | `ibv_send_wr`, `ibv_recv_wr`, `ibv_sge` | [`SendWr`], [`RecvWr`], [`Sge`] (post lists are slices) |
//!
//! # Two paths to the device (docs/architecture.md §2–§3)
//!
//! * **Slow path**: every resource operation is a command (the Linux uverbs `write()`
//!   bytes of crate `abi`) on the context's channel to the control plane, answered by a
//!   reply carrying a response or an errno.
//! * **Fast path**: [`Qp::post_send`], [`Qp::post_recv`], [`Srq::post_recv`] and
//!   [`Cq::poll`] work on rings in memory shared with the engine, which this library
//!   allocates and describes to the control plane in the create commands. In steady state
//!   they make no system call: a post list is written, published with one Release store
//!   and announced by one doorbell bit; only a parked engine costs a wake-up `write`.
//!   [`Qp::post_send_cmd`], [`Qp::post_recv_cmd`] and [`Cq::poll_cmd`] do the same through
//!   commands, for comparison.
//!
//! # Providers
//!
//! The library never links the NIC: a [`abi::provider::Provider`] opens command channels.
//! The `uroce` facade crate installs the embedded NIC with [`set_provider`]; tests can
//! install a fake control plane.
//!
//! # Lifetimes
//!
//! Every object holds its parents (`Arc`), so a context lives until its last object is
//! gone and objects are destroyed children-first; explicit `destroy`/`dereg` methods
//! report `EBUSY` (and hand the object back) where libibverbs would. Ring and registered
//! memory is freed only after the control plane confirmed the engine let go of it; when
//! that confirmation fails the memory is leaked, never freed under the engine.
//!
//! # Safety
//!
//! `unsafe` lives in two small modules: `sys` (file-descriptor system calls) and `mem`
//! (the page-aligned buffers of [`MrBuf`]), plus the caller-facing [`Pd::reg_mr_raw`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod asyncio;
pub mod cm;
mod context;
mod cq;
mod device;
mod error;
mod mem;
mod pd;
mod qp;
pub mod rdma_cm;
mod srq;
mod sys;
mod wr;
mod xrc;

pub use abi::Rule;
pub use asyncio::{block_on, Readable};
pub use context::{AsyncEvent, Context, DeviceAttr, EventType, GidEntry, PortAttr, DOORBELL_SLOTS};
pub use cq::{CompChannel, Cq, Wc};
pub use device::{devices, open_device, provider, set_provider, Device};
pub use error::{Error, ErrorKind, PostError, Reason, Result};
pub use mem::PAGE_SIZE;
pub use pd::{
    grh_addresses, init_ah_from_wc, Ah, Buffer, BufferAllocator, BufferKind, Mr, MrBuf, Mw, MwType,
    Pd, RemoteMr, Rereg,
};
pub use qp::{ConnectOpts, Qp, QpEndpoint, QpInitAttr, TransientQp, WeakQp, SELECTIVE_REPEAT_ENV};
pub use srq::{Srq, SrqAttr};
pub use wire::cm::{Ece, ECE_SELECTIVE_REPEAT, UROCE_ECE_VENDOR_ID};
pub use wr::{inc_rkey, MwBindInfo, Payload, RecvWr, Remote, SendWr};
pub use xrc::Xrcd;

pub use abi::provider::{DeviceSpec, Provider};
pub use abi::uverbs::Sge;
pub use abi::{
    AccessFlags, AhAttr, AtomicCap, Errno, Gid, GidType, GlobalRoute, LinkLayer, Mtu, PortState,
    QpAttr, QpAttrMask, QpCap, QpState, QpType, SendFlags, SrqAttrMask, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};

/// Bytes of the Global Routing Header area at the start of every UD receive buffer
/// (IBA §11.4.1.1; for RoCEv2 over IPv4 the IPv4 header sits in its last 20 bytes).
pub const GRH_BYTES: usize = 40;

/// The port number of uroce devices (one port per device, as rxe).
pub const PORT: u8 = 1;
