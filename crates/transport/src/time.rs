//! Caller-supplied time.
//!
//! The transport never reads a clock (docs/architecture.md §4): every entry point that can start or
//! expire a timer takes `now: Time`, and `poll_timeout` hands the next deadline back. The
//! engine feeds a monotonic clock; the simulator feeds its virtual clock.

use core::fmt;

/// A point in time: nanoseconds since an epoch the caller chooses (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// The epoch.
    pub const ZERO: Time = Time(0);
    /// Never: used for "no deadline" arithmetic that saturates.
    pub const NEVER: Time = Time(u64::MAX);

    /// A time `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Time {
        Time(ns)
    }

    /// A time `us` microseconds after the epoch (saturating).
    pub const fn from_micros(us: u64) -> Time {
        Time(us.saturating_mul(1_000))
    }

    /// A time `ms` milliseconds after the epoch (saturating).
    pub const fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + ns`, saturating at [`Time::NEVER`].
    #[must_use]
    pub const fn add_nanos(self, ns: u64) -> Time {
        Time(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub const fn nanos_since(self, earlier: Time) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ns = self.0;
        write!(f, "{}.{:06}ms", ns / 1_000_000, ns % 1_000_000)
    }
}

/// IBTA Vol 1 §9.7.6.1.3 (docs/wire.md §5.2): the local ACK timeout is
/// 4.096 µs × 2^`timeout` for `timeout` in 1..=31; 0 means "infinite" (no timer).
pub fn local_ack_timeout_ns(timeout: u8) -> Option<u64> {
    match timeout {
        0 => None,
        1..=31 => Some(4_096u64 << timeout),
        _ => None,
    }
}

/// How long a requester waits after an RNR NAK carrying timer `code` (low 5 bits used), in
/// nanoseconds: the RNR timer table of docs/wire.md §4.3 (code 0 is the longest wait, 655.36 ms;
/// code 1 the shortest, 10 µs), from `wire`'s one copy of it.
pub fn rnr_timer_ns(code: u8) -> u64 {
    u64::from(wire::aeth::rnr_timer_us(code)) * 1_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeout_formula() {
        assert_eq!(local_ack_timeout_ns(0), None);
        assert_eq!(local_ack_timeout_ns(1), Some(8_192));
        assert_eq!(local_ack_timeout_ns(14), Some(67_108_864));
        assert_eq!(local_ack_timeout_ns(31), Some(4_096u64 << 31));
        assert_eq!(local_ack_timeout_ns(32), None);
    }

    #[test]
    fn rnr_table_endpoints() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(25), 61_440_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
        assert_eq!(rnr_timer_ns(0xFF), 491_520_000);
    }

    #[test]
    fn time_arithmetic_saturates() {
        assert_eq!(Time::NEVER.add_nanos(5), Time::NEVER);
        assert_eq!(Time(3).nanos_since(Time(10)), 0);
        assert_eq!(Time::from_millis(2).as_nanos(), 2_000_000);
        assert_eq!(Time(1_500_000).to_string(), "1.500000ms");
    }
}
