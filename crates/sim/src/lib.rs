//! A deterministic network simulator for the uroce transport.
//!
//! N endpoints, each with [`transport::Qp`]s and registered memory ([`SimMemory`]), exchange
//! real RoCEv2 frames (IPv4 + UDP + ICRC, built and parsed by `wire`) over links that drop,
//! duplicate, reorder, delay, corrupt and partition. Time is virtual and jumps to the next
//! event; one `u64` seed drives every random choice, so any run replays exactly
//! (in the style of TigerBeetle's VOPR and quinn's `Pair`; docs/testing.md §2.2).
//!
//! * [`net`] — the event loop, endpoints and links.
//! * [`workload`] — the checked RC workload behind `uroce sim --transport`: every byte,
//!   every completion, exactly once and in order, or the error the spec prescribes.
//! * [`rng`] — xoshiro256** / SplitMix64.
//! * [`pair`] — two QPs back to back with a hand-controlled pipe, for conformance tests.
//!
//! An endpoint's memory is the NIC's own: [`SimMemory`] (`nic::simhost::memory`) keeps real
//! MR records in the device's MR table, and every access a QP makes goes through the
//! device's DMA checks — key lookup, PD, bounds, access flags, atomic alignment, memory
//! windows and their invalidation — as the engine applies them to application memory. A QP
//! is handed its endpoint's memory as it sees it ([`SimMemory::for_qp`]); refused accesses
//! are counted ([`MemStats`]), so tests can assert that hostile packets only ever produced
//! refused accesses, never out-of-range ones.
#![forbid(unsafe_code)]

pub mod net;
pub mod pair;
pub mod rng;
pub mod workload;

pub use net::{LinkConfig, NetStats, Sim, Step};
pub use nic::simhost::memory::{AccessFlags as MrAccess, MemStats, QpMemory, Region, SimMemory};
pub use rng::Rng;
pub use workload::{Op, Report, WorkloadConfig};

pub use transport;
