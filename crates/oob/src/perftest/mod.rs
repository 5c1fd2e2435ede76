//! perftest 4.5-0.17 (`Version: 6.06`) out-of-band exchange over TCP port 18515
//! (docs/perftest.md §1–§5).
//!
//! * [`msg`] — every message, encoded byte for byte and decoded from untrusted bytes.
//! * [`Perftest`] — one side's exchange as a sans-IO state machine: the ordered client and
//!   server sequences of every test (write/read/send/atomic × bw/lat, `-b`, `-q`, `-a`,
//!   UD, `ib_write_bw`'s pause), the negotiation (version, page size, cache line, MTU) and
//!   perftest's checks and aborts.
//! * [`run_exchange`] — drives a [`Perftest`] over a `Read + Write` stream, calling
//!   [`BenchHooks`] for the RDMA-side steps.
//!
//! A typical client (the RDMA parts are the caller's):
//!
//! ```no_run
//! use oob::perftest::{self, BenchConfig, BenchHooks, HookError, KeyMessage, LocalSystem,
//!                     Negotiated, Perftest, Role, TestKind, Verb};
//! struct Rdma;
//! impl BenchHooks for Rdma {
//!     fn negotiated(&mut self, n: &Negotiated) -> Result<Vec<KeyMessage>, HookError> {
//!         // create QPs, MR of max(size, n.cycle_buffer) bytes, print the header ...
//!         Ok(vec![KeyMessage { qpn: 0x11, psn: 0x308158, out_reads: 1, ..Default::default() }])
//!     }
//!     fn connect(&mut self, remote: &[KeyMessage]) -> Result<(), HookError> { Ok(()) }
//! }
//! let cfg = BenchConfig::new(Verb::Write, TestKind::Bw);
//! let mut stream = perftest::connect("10.77.0.11", perftest::DEFAULT_PORT)?;
//! let mut ex = Perftest::new(cfg, Role::Client, LocalSystem::default());
//! perftest::run_exchange(&mut stream, &mut ex, &mut Rdma)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
mod driver;
mod error;
mod machine;
pub mod msg;

pub use config::{
    BenchConfig, Connection, LocalSystem, OptionCheck, OptionError, Role, TestKind, Verb,
};
pub use driver::{
    accept_one, connect, listen, read_message, run_exchange, write_message, BenchHooks,
    ConnectError, HookError, DEFAULT_PORT,
};
pub use error::{Context, MsgClass, PerftestError};
pub use machine::{
    describe_plan, Action, Event, Negotiated, Perftest, MIN_PEER_VERSION, WRITE_BW_PAUSE,
};
pub use msg::{
    mtu_from_enum, BwReport, KeyMessage, MsgError, Mtu, PeerVersion, ReportLayout, VERSION,
};
