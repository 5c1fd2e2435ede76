//! RoCEv2 wire format for uroce.
//!
//! Everything that turns bytes into typed values and back lives here, and nothing else: no I/O,
//! no clocks, no allocation on the parse/emit paths. The layout follows smoltcp: every header has
//! a zero-copy view (`Packet<T: AsRef<[u8]>>`) whose `new_checked` validates the length once, after
//! which no accessor can panic, plus a plain `Repr` with `parse`, `emit` and `buffer_len`.
//!
//! * [`num`] — protocol numbers: 24-bit [`Psn`] with wrapping comparison, [`Qpn`], [`Msn`], keys.
//! * [`opcode`] — the one opcode table (RC, UC, UD, CNP) every parser and builder reads.
//! * [`bth`], [`deth`], [`reth`], [`atomic_eth`], [`aeth`], [`atomic_ack_eth`], [`immdt`],
//!   [`ieth`] — the base and extended transport headers (docs/wire.md §1.4, §1.5).
//! * [`roce`] — a whole transport packet, BTH through pad ([`RocePacketRepr`]).
//! * [`ip`] — the IPv4/IPv6 + UDP encapsulation of RoCEv2 (docs/wire.md §1.1–§1.3).
//! * [`icrc`] — the invariant CRC (docs/wire.md §3), including the receive-side check for a UDP
//!   socket that cannot see the IPv4 Identification field.
//! * [`mad`], [`cm`] — management datagrams on QP1 and the Communication Manager messages
//!   (REQ, MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP) with rdma_cm's `cma_hdr` and
//!   Service IDs.
//! * [`frame`] — build and parse a complete L3 frame (IP header through ICRC).
//! * [`fuzzing`] — the function the `wire_parse` fuzz target drives.
//!
//! All multi-byte fields are big-endian except the ICRC, which is sent least-significant byte
//! first (docs/wire.md §3.4).
#![forbid(unsafe_code)]

mod bytes;
pub mod error;
pub mod num;
pub mod opcode;

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod ieth;
pub mod immdt;
pub mod reth;
pub mod xrceth;

pub mod cm;
pub mod frame;
pub mod fuzzing;
pub mod icrc;
pub mod ip;
pub mod mad;
pub mod roce;

pub use aeth::{AckKind, AethRepr, NakCode, Syndrome};
pub use atomic_ack_eth::AtomicAckEthRepr;
pub use atomic_eth::AtomicEthRepr;
pub use bth::BthRepr;
pub use deth::DethRepr;
pub use error::{Error, Result};
pub use frame::{build_l3, parse_l3, ParsedFrame};
pub use ieth::IethRepr;
pub use immdt::ImmDt;
pub use ip::{udp_sport_for_qp, IpRepr, UdpRepr, ROCE_V2_PORT};
pub use num::{Lkey, Msn, Psn, Qkey, Qpn, Rkey};
pub use opcode::{HeaderSet, OpKind, Opcode, OpcodeInfo, Position, Transport};
pub use reth::RethRepr;
pub use roce::RocePacketRepr;
pub use xrceth::XrcEthRepr;
