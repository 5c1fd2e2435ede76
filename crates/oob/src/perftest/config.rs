//! What a perftest run is, as far as the out-of-band exchange is concerned.

use std::fmt;

use super::msg::Mtu;

/// The RDMA operation measured (perftest's `VerbType`; the tool name's first word).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `ib_send_*`.
    Send,
    /// `ib_write_*`.
    Write,
    /// `ib_read_*`.
    Read,
    /// `ib_atomic_*`.
    Atomic,
}

impl Verb {
    /// The name perftest prints in the header (`testsStr`).
    pub fn perftest_name(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
}

/// Bandwidth or latency test (the tool name's second word).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum TestKind {
    /// `ib_*_bw`.
    Bw,
    /// `ib_*_lat`.
    Lat,
}

/// `-c`: the QP transport. The exchange is the same for all three; UD changes the `-a`
/// size range of send tests and the size clamp (docs/perftest.md §3, §4.1).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Connection {
    /// Reliable connection (default).
    Rc,
    /// Unreliable connection.
    Uc,
    /// Unreliable datagram (send tests only).
    Ud,
}

impl Connection {
    /// The name perftest prints (`connStr`).
    pub fn perftest_name(self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Uc => "UC",
            Connection::Ud => "UD",
        }
    }
}

/// Which end of the TCP connection this side is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Given a host argument; connects; writes first in every exchange.
    Client,
    /// Listens; reads first in every exchange.
    Server,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Client => "client",
            Role::Server => "server",
        })
    }
}

/// The test options that decide the shape of the exchange. perftest compares none of them
/// with the peer (docs/perftest.md §3 "Not compared by anyone"): both sides must be given the
/// same ones, or the exchange desynchronises.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BenchConfig {
    /// The verb.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: TestKind,
    /// `-c`.
    pub connection: Connection,
    /// `-q` (bandwidth tests only; latency tests use 1).
    pub num_qps: usize,
    /// `-b` (bandwidth tests only).
    pub bidirectional: bool,
    /// `-a`: sweep message sizes 2, 4, … (see [`BenchConfig::sweep_sizes`]).
    pub run_all: bool,
    /// `-s` (or the default: 65536 for bw, 2 for lat, 8 for atomic).
    pub size: u64,
    /// `-s` was given explicitly (decides between clamping and refusing a UD size above
    /// the MTU).
    pub size_explicit: bool,
    /// `-D` (duration mode): send_bw `-b -D` skips REPORT.
    pub duration: bool,
    /// `--report-per-port`: REPORT carries four more fields.
    pub report_per_port: bool,
    /// A GID is in use: 108-byte KEY messages. Always true on RoCE (docs/perftest.md §2.1);
    /// false selects the 59-byte variant.
    pub use_gid: bool,
    /// `--dont_xchg_versions`: skip M1–M4. With perftest 6.06 this makes both sides fail
    /// the 5.70 version check (docs/perftest.md §3); kept to reproduce that.
    pub dont_xchg_versions: bool,
    /// `-R`: the exchange runs over an rdma_cm connection of its own and the test's QPs are
    /// connected by rdma_cm (docs/perftest.md §8): binary 56-byte KEY messages, a KEY pair
    /// of zeros before and after the QPs' connection, no GID check, no DONE.
    pub rdma_cm: bool,
    /// uroce only: offer selective repeat in M1 (docs/perftest.md §10); it is used when the
    /// peer offered it too ([`crate::perftest::Negotiated::selective_repeat`]).
    pub offer_selective_repeat: bool,
}

impl BenchConfig {
    /// perftest's defaults for a test: RC, one QP, unidirectional, the default size.
    pub fn new(verb: Verb, kind: TestKind) -> BenchConfig {
        let size = match (verb, kind) {
            (Verb::Atomic, _) => 8,
            (_, TestKind::Bw) => 65536,
            (_, TestKind::Lat) => 2,
        };
        BenchConfig {
            verb,
            kind,
            connection: Connection::Rc,
            num_qps: 1,
            bidirectional: false,
            run_all: false,
            size,
            size_explicit: false,
            duration: false,
            report_per_port: false,
            use_gid: true,
            dont_xchg_versions: false,
            rdma_cm: false,
            offer_selective_repeat: false,
        }
    }

    /// The tool this configuration imitates, e.g. `ib_write_bw`.
    pub fn tool_name(&self) -> String {
        let verb = match self.verb {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic => "atomic",
        };
        let kind = match self.kind {
            TestKind::Bw => "bw",
            TestKind::Lat => "lat",
        };
        format!("ib_{verb}_{kind}")
    }

    /// Only `ib_write_bw` sleeps 1 s after the TCP connect (docs/perftest.md §1 "pauses").
    pub fn pauses_after_connect(&self) -> bool {
        self.verb == Verb::Write && self.kind == TestKind::Bw
    }

    /// Number of QPs whose KEY is exchanged in each KEY round.
    pub fn qps(&self) -> usize {
        match self.kind {
            TestKind::Bw => self.num_qps.max(1),
            TestKind::Lat => 1,
        }
    }

    /// Whether `-b` is in effect (only bandwidth tests accept it).
    pub fn duplex(&self) -> bool {
        self.bidirectional && self.kind == TestKind::Bw
    }

    /// The message sizes of one run, given the negotiated MTU and the (possibly clamped)
    /// size. Without `-a`: just `size`. With `-a` (perftest's `RUN_ALL` loops):
    /// * write/read (bw and lat): 2^1 … 2^23;
    /// * send (bw and lat): 2^1 … 2^23, or up to the MTU for UD;
    /// * atomic: no sweep (`-a` runs the one size).
    pub fn sweep_sizes(&self, mtu: Mtu, size: u64) -> Vec<u64> {
        if !self.run_all || self.verb == Verb::Atomic {
            return vec![size];
        }
        let max_pow = if self.verb == Verb::Send && self.connection == Connection::Ud {
            // MSG_SZ_2_EXP(MTU_SIZE(curr_mtu)) + 1
            mtu.raw() + 7 + 1
        } else {
            24
        };
        (1..max_pow).map(|i| 1u64 << i).collect()
    }
}

/// This side's system values exchanged in M2–M4.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct LocalSystem {
    /// Page size (perftest's `cycle_buffer`), e.g. 4096.
    pub page_size: i32,
    /// L1 data cache line size (fallback 64).
    pub cache_line: i32,
    /// This side's MTU: the port's active MTU, or `-m` capped to it.
    pub mtu: Mtu,
}

impl Default for LocalSystem {
    fn default() -> LocalSystem {
        LocalSystem {
            page_size: 4096,
            cache_line: 64,
            mtu: Mtu::Mtu1024,
        }
    }
}

/// The local option combinations perftest's parser refuses (docs/perftest.md §3), checked before
/// any connection. Not exchanged with the peer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionCheck {
    /// The test.
    pub verb: Verb,
    /// The test kind.
    pub kind: TestKind,
    /// `-c`.
    pub connection: Connection,
    /// `-q`.
    pub num_qps: usize,
    /// `-b`.
    pub bidirectional: bool,
    /// `-e`.
    pub use_event: bool,
    /// `-n`.
    pub iters: u64,
    /// `-l` / `--post_list`.
    pub post_list: u64,
    /// `-s` given.
    pub size_explicit: bool,
}

/// A local option combination perftest refuses; `Display` is perftest's text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    /// `-e` with a write test.
    #[error(" Events feature not available on WRITE verb\n Parser function exited with Error")]
    EventsOnWrite,
    /// `-b` with a latency test.
    #[error(" Bidirectional is only available in BW test\n Parser function exited with Error")]
    BidirectionalLat,
    /// `-q` > 1 with a latency test.
    #[error(" Multiple QPs only available on bw tests\n Parser function exited with Error")]
    MultipleQpsLat,
    /// `-c UD` with a non-send test.
    #[error(" UD connection only possible in SEND verb")]
    UdNotSend,
    /// `-n` not a multiple of `-l`.
    #[error("Number of iterations must be a multiple of post list size")]
    IterationsNotMultipleOfPostList,
    /// `-s` with an atomic test (perftest prints this on stdout, with a trailing space).
    #[error("Message size cannot be changed for Atomic tests ")]
    AtomicSize,
}

impl OptionCheck {
    /// perftest's parser checks, in its order.
    pub fn check(&self) -> Result<(), OptionError> {
        if self.use_event && self.verb == Verb::Write {
            return Err(OptionError::EventsOnWrite);
        }
        if self.bidirectional && self.kind == TestKind::Lat {
            return Err(OptionError::BidirectionalLat);
        }
        if self.num_qps > 1 && self.kind == TestKind::Lat {
            return Err(OptionError::MultipleQpsLat);
        }
        if self.connection == Connection::Ud && self.verb != Verb::Send {
            return Err(OptionError::UdNotSend);
        }
        if self.post_list > 1 && self.iters % self.post_list != 0 {
            return Err(OptionError::IterationsNotMultipleOfPostList);
        }
        if self.size_explicit && self.verb == Verb::Atomic {
            return Err(OptionError::AtomicSize);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps() {
        let mut c = BenchConfig::new(Verb::Write, TestKind::Bw);
        assert_eq!(c.sweep_sizes(Mtu::Mtu1024, 65536), vec![65536]);
        c.run_all = true;
        let s = c.sweep_sizes(Mtu::Mtu1024, 65536);
        assert_eq!(
            (s.len(), s.first(), s.last()),
            (23, Some(&2), Some(&8_388_608))
        );
        let mut ud = BenchConfig::new(Verb::Send, TestKind::Bw);
        ud.connection = Connection::Ud;
        ud.run_all = true;
        assert_eq!(
            ud.sweep_sizes(Mtu::Mtu1024, 1024),
            vec![2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
        );
        assert_eq!(ud.sweep_sizes(Mtu::Mtu512, 512).len(), 9);
        let mut at = BenchConfig::new(Verb::Atomic, TestKind::Bw);
        at.run_all = true;
        assert_eq!(at.sweep_sizes(Mtu::Mtu1024, 8), vec![8]);
        assert!(BenchConfig::new(Verb::Write, TestKind::Bw).pauses_after_connect());
        assert!(!BenchConfig::new(Verb::Write, TestKind::Lat).pauses_after_connect());
        assert!(!BenchConfig::new(Verb::Read, TestKind::Bw).pauses_after_connect());
        assert_eq!(
            BenchConfig::new(Verb::Atomic, TestKind::Lat).tool_name(),
            "ib_atomic_lat"
        );
    }

    #[test]
    fn option_checks() {
        let ok = OptionCheck {
            verb: Verb::Write,
            kind: TestKind::Bw,
            connection: Connection::Rc,
            num_qps: 1,
            bidirectional: false,
            use_event: false,
            iters: 5,
            post_list: 1,
            size_explicit: false,
        };
        assert_eq!(ok.check(), Ok(()));
        let e = OptionCheck {
            use_event: true,
            ..ok.clone()
        };
        assert_eq!(e.check(), Err(OptionError::EventsOnWrite));
        assert_eq!(
            e.check().map_err(|e| e.to_string()),
            Err(
                " Events feature not available on WRITE verb\n Parser function exited with Error"
                    .to_string()
            )
        );
        let lat = OptionCheck {
            kind: TestKind::Lat,
            bidirectional: true,
            ..ok.clone()
        };
        assert_eq!(lat.check(), Err(OptionError::BidirectionalLat));
        let q = OptionCheck {
            kind: TestKind::Lat,
            num_qps: 2,
            ..ok.clone()
        };
        assert_eq!(q.check(), Err(OptionError::MultipleQpsLat));
        let ud = OptionCheck {
            connection: Connection::Ud,
            ..ok.clone()
        };
        assert_eq!(ud.check(), Err(OptionError::UdNotSend));
        let pl = OptionCheck {
            post_list: 2,
            ..ok.clone()
        };
        assert_eq!(
            pl.check(),
            Err(OptionError::IterationsNotMultipleOfPostList)
        );
        let at = OptionCheck {
            verb: Verb::Atomic,
            size_explicit: true,
            ..ok
        };
        assert_eq!(at.check(), Err(OptionError::AtomicSize));
    }
}
