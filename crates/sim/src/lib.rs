//! A deterministic network simulator for the uroce transport.
//!
//! N endpoints, each with [`transport::Qp`]s and a Vec-backed [`memory::SimMemory`], exchange
//! real RoCEv2 frames (IPv4 + UDP + ICRC, built and parsed by `wire`) over links that drop,
//! duplicate, reorder, delay, corrupt and partition. Time is virtual and jumps to the next
//! event; one `u64` seed drives every random choice, so any run replays exactly
//! (in the style of TigerBeetle's VOPR and quinn's `Pair`; docs/testing.md §2.2).
//!
//! * [`net`] — the event loop, endpoints and links.
//! * [`memory`] — the MR table implementing [`transport::Memory`], counting refused accesses.
//! * [`workload`] — the checked RC workload behind `uroce sim`: every byte, every completion,
//!   exactly once and in order, or the error the spec prescribes.
//! * [`rng`] — xoshiro256** / SplitMix64.
//! * [`pair`] — two QPs back to back with a hand-controlled pipe, for conformance tests.
#![forbid(unsafe_code)]

pub mod memory;
pub mod net;
pub mod pair;
pub mod rng;
pub mod workload;

pub use memory::SimMemory;
pub use net::{LinkConfig, NetStats, Sim, Step};
pub use rng::Rng;
pub use workload::{Op, Report, WorkloadConfig};

pub use transport;
