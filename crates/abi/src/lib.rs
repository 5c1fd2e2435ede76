//! The user/kernel contract of uroce — what Linux's uapi headers are to rdma-core and the
//! kernel. The `verbs` library and the `nic` (control plane + engine) meet **only** here.
//!
//! # Slow path: commands ([`cmd`], [`uverbs`])
//!
//! The library sends each resource operation as one message on the command channel (a
//! socketpair in embedded mode, a Unix socket in daemon mode): the Linux uverbs `write()`
//! bytes — [`cmd::CmdHdr`] `{command, in_words, out_words}` + the `ib_user_verbs.h` core
//! struct + uroce's driver data — and gets back exactly one reply: [`cmd::ReplyHdr`]
//! `{command, status (0 or −errno), resp_len}` + the core response + driver response (an
//! error reply instead carries nothing, or a [`reason`] record: the rule the command broke,
//! as a code and a sentence). The
//! kernel's `response` pointer fields are carried but ignored. The control plane decodes
//! with [`uverbs::decode_request`], which checks every length and never panics; errors map to
//! errnos through [`AbiError::errno`] (EINVAL, ENOSPC, EOPNOTSUPP, … as `verify_hdr` does).
//! Commands the kernel serves outside `write()` (GID and P_Key queries) are uroce
//! driver-private commands numbered from 0x80 ([`cmd::Command::UROCE_QUERY_GID`]).
//!
//! # Fast path: rings and doorbells ([`fastpath`], [`ring`], [`doorbell`])
//!
//! * **Who allocates**: the library allocates every ring (SQ, RQ, SRQ, CQ) and its
//!   per-context doorbell page, initializes them ([`ring::RingLayout::init`],
//!   [`doorbell::DoorbellLayout::init`]) and passes their addresses and geometry in the
//!   create commands' driver data ([`uverbs::RingDesc`]). The control plane validates the
//!   descriptors ([`ring::RingLayout::from_desc`]); the engine then attaches to the same
//!   memory through the interface it uses for registered memory (the process's own memory in
//!   embedded mode; a memfd shared with the daemon later).
//! * **Who writes what**: SQ, RQ and SRQ — the library writes WQEs ([`fastpath::SendWqe`],
//!   [`fastpath::RecvWqe`]) and the producer index, the engine reads them and writes the
//!   consumer index. CQ — the engine writes CQEs ([`fastpath::Cqe`], whose first 48 bytes are
//!   `ibv_wc`) and the producer index, the library reads them and writes the consumer
//!   index. Each side owns one index, keeps it privately and never trusts the other's beyond
//!   the ring invariant; the geometry each side uses is its own validated copy, never the
//!   header in shared memory.
//! * **Ordering**: write the slot, then a Release store of your index; read the other side's
//!   index with an Acquire load, then the slot. Indices are free-running u64 counters on
//!   separate cache lines; capacity = slots.
//! * **Doorbells**: after publishing a post list, the library sets its SQ's bit in the
//!   doorbell page's pending bitmap (one doorbell per post list, no system call). The engine
//!   drains the bitmap to learn which SQs to look at. Only if the engine has announced it is
//!   parked does the library make the wake-up system call ([`doorbell::Wake`]); the
//!   `parked` protocol guarantees no lost wake-up ([`doorbell`] module docs).
//! * CQ event mode (arming) is the REQ_NOTIFY_CQ command; completion events arrive on the
//!   completion channel fd as [`uverbs::CompEventDesc`].
//!
//! # Safety
//!
//! `unsafe` lives only in [`shm`]: a region of shared memory accessed exclusively through
//! `AtomicU64` words, so neither a racing peer thread nor another process can cause
//! undefined behaviour here — only wrong values, which the decoders reject.
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

pub mod attach;
pub mod attr;
pub mod cmd;
pub mod daemon;
pub mod doorbell;
pub mod error;
pub mod fastpath;
pub mod fuzzing;
pub mod provider;
pub mod reason;
pub mod ring;
pub mod shm;
pub mod uverbs;
pub mod verbs_consts;

pub use attr::{AhAttr, AttrError, AttrErrorKind, AttrLimits, Gid, GlobalRoute, QpAttr, QpCap};
pub use cmd::{Command, Frame, Reply};
pub use error::{AbiError, Errno};
pub use reason::{Reason, Rule};
pub use uverbs::{decode_request, Request};
pub use verbs_consts::*;
