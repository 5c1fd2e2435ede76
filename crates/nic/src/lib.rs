//! The uroce software RoCEv2 NIC: the control plane that plays the kernel behind the
//! uverbs command ABI, and the engine that plays the NIC (docs/architecture.md §1–§5).
//!
//! # Use
//!
//! The `verbs` library reaches a device only through [`abi`]: [`EmbeddedProvider`]
//! implements [`abi::provider::Provider`], so `open(spec)` starts the device `spec.name` on
//! `spec.addr` (once per process) and returns the library's end of a fresh command channel.
//! [`start_device`] starts one programmatically with a full [`DeviceConfig`];
//! [`DeviceHandle::port_counters`] reads its counters.
//!
//! # Architecture
//!
//! * **Control plane** (`ctrl`, `cmds`): one thread per device serves all its command
//!   connections (epoll); each connection is one context. It frames commands by the uverbs
//!   header, decodes them with [`abi::decode_request`], validates every handle (it must
//!   belong to the caller's context) and attribute, and answers once per command with a
//!   response or an errno — never a panic. A connection closing destroys its context's
//!   objects, as closing `/dev/infiniband/uverbsN` does.
//! * **Engine** (`engine`): one thread serving every device of the process by default. It
//!   finds rung doorbells through each context's doorbell bitmap, pulls WQEs from the SQ
//!   rings into the `transport` state machines, executes their memory operations through
//!   the MR table (`state::DmaView`: key, PD, bounds and access checks), writes CQEs into
//!   the CQ rings (never overwriting: overflow raises IBV_EVENT_CQ_ERR and moves the QP to
//!   ERR), loops same-device packets back internally — their payload is not copied into
//!   the packet but moved straight from the source MR into the destination at delivery,
//!   one copy as with a NIC's DMA (`state::Payload`) — and sends the rest as RoCEv2 over
//!   UDP 4791 with batched `sendmmsg`/`recvmmsg` (32 datagrams per call). It busy-polls while
//!   there is work, and after it for an adaptive window ([`DeviceConfig::spin_us`] = 50 µs
//!   doubling up to [`DeviceConfig::max_spin_us`] = 20 ms when parks turn out short;
//!   longer, up to [`DeviceConfig::max_busy_spin_us`], while the application is mid-work
//!   and merely descheduled), then parks in `epoll_wait` on its wake eventfd and the UDP
//!   sockets with the next transport deadline as the timeout, so a doorbell costs a system
//!   call only then and an idle device costs no CPU. The socket is polled while busy only if some QP of the device
//!   can talk to another device (UD, or a remote address vector): same-device traffic
//!   makes no system call at all in steady state.
//! * **QP 1** (`gsi`): the device's Communication Manager (the `cm` crate) on the General
//!   Services Interface: UD SEND Only packets to QP 1 with the GSI Q_Key carry 256-byte CM
//!   MADs in and out (internal loopback for the device's own address, UDP otherwise); the
//!   CM's deadline sits in the engine's timer heap. [`DeviceHandle::with_cm`] and
//!   [`DeviceHandle::cm_poll_event`] drive it.
//! * **Memory** (`dma`): every access to application memory — registered regions and the
//!   library's ring and doorbell memory — goes through one small module, the only place
//!   besides `sys` (system calls) with `unsafe`. How a command's addresses name memory is
//!   the device's address space: the process's own (embedded mode), or a window the
//!   device holds ([`fuzzing`] uses one; daemon mode's memfd registrations will too).
//! * **Fuzzing** ([`fuzzing`]): arbitrary command sequences against a live context of a
//!   sealed device, then a check that closing the context reclaimed everything — the
//!   `nic_commands` cargo-fuzz target and a stable test share it.
//!
//! # Reading of the ABI (documented choices)
//!
//! * SQ ring slots are freed (consumer index advanced) when the transport retires the WQE,
//!   as rxe's completer frees them, and always before the WQE's completion (or that of a
//!   later WQE) is visible in the CQ ring, so a polled completion's slot can be reused at
//!   once; RQ/SRQ slots when the responder takes the WQE.
//! * `POST_SEND` / `POST_RECV` / `POST_SRQ_RECV` write exactly the WQEs the fast path would
//!   into the same rings, starting at the producer index found in shared memory, then ring
//!   the doorbell internally; `POLL_CQ` consumes from the CQ ring at the consumer index in
//!   shared memory. A library that mixes them with its own ring access re-reads the index.
//!   Posts are all-or-nothing: on error nothing was queued (`bad_wr` is then the first WR).
//! * The fds in GET_CONTEXT (`async_fd`, `wake_fd`) and CREATE_COMP_CHANNEL replies belong
//!   to the library from then on; the device keeps its own ends.
//! * Completion channels and the async fd are `SOCK_SEQPACKET` sockets: each read returns
//!   one [`abi::uverbs::CompEventDesc`] / [`abi::uverbs::AsyncEventDesc`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod attach;
mod cm_cmds;
mod cmds;
mod config;
mod counters;
mod ctrl;
pub mod daemon;
mod daemon_client;
mod datapath;
mod device;
mod dma;
mod engine;
pub mod fuzzing;
mod gsi;
mod ident;
mod keys;
mod peer_ring;
mod registry;
pub mod simhost;
mod slab;
mod spin;
mod state;
mod sys;
mod tap;
pub mod trace;

pub use cm;
pub use config::{ecn_setting, DeviceConfig, Limits, DCQCN_ENV, ECN_ENV};
pub use counters::{CqCounters, EngineCounters, PortCounters};
pub use device::{DeviceHandle, DeviceStats};
pub use keys::splitmix64;
pub use registry::{device, device_names, start_device, EmbeddedProvider};
pub use state::event;
pub use tap::{
    expand_path as capture_path, DEFAULT_SNAPLEN as CAPTURE_DEFAULT_SNAPLEN,
    ENV_PATH as CAPTURE_ENV, ENV_SNAPLEN as CAPTURE_SNAPLEN_ENV,
};
