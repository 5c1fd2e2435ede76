//! The out-of-band TCP exchanges that pair `uroce bench` and `uroce pingpong` with the real
//! tools, and perftest's console output (docs/perftest.md).
//!
//! * [`perftest`] — perftest 4.5-0.17 (version `6.06` on the wire): the message catalogue,
//!   the per-test client and server sequences as a sans-IO state machine, negotiation
//!   checks and aborts with perftest's messages, and a driver over `Read + Write`.
//! * [`pingpong`] — rdma-core 44 `ibv_rc_pingpong`, `ibv_ud_pingpong`,
//!   `ibv_srq_pingpong`: the 52-byte address message and the exchange sequences.
//! * [`console`] — perftest's console output (header block, address lines, bandwidth and
//!   latency results) and the pingpong tools' lines, byte for byte; plus the statistics
//!   perftest computes for them.
//! * [`json`] — uroce's own JSON form of the results (not a perftest format).
//! * [`gid`] — GID helpers (IPv4-mapped test, glibc's `inet_ntop`).
//! * [`fuzzing`] — the entry point of the `oob_exchange` fuzz target.
//!
//! Nothing here needs RDMA: QPN, PSN, rkey, address and GID are supplied by the caller,
//! and the peer's are handed back.
#![forbid(unsafe_code)]

pub mod cfmt;
pub mod console;
pub mod fuzzing;
pub mod gid;
pub mod json;
pub mod perftest;
pub mod pingpong;

pub use gid::Gid;
