//! Protocol numbers as newtypes (docs/wire.md §0, §5.1).
//!
//! PSN, QPN and MSN are 24-bit fields on the wire. The constructors mask to 24 bits so a value
//! of these types is always representable in its field. PSNs compare over a half-space window
//! (2^23), like rxe's `psn_compare`, so `Psn` deliberately does not implement `Ord`.

use core::fmt;

const MASK24: u32 = 0x00FF_FFFF;

/// Packet sequence number: 24 bits, arithmetic modulo 2^24 (docs/wire.md §5.1).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Psn(u32);

impl Psn {
    /// Largest PSN value.
    pub const MAX: Psn = Psn(MASK24);
    /// Half the PSN space: two PSNs compare meaningfully only while they are closer than this.
    pub const WINDOW: u32 = 1 << 23;

    /// A PSN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & MASK24)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & MASK24)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & MASK24)
    }

    /// The PSN after this one.
    #[inline]
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// Signed distance `self − other` in `[−2^23, 2^23)`.
    ///
    /// docs/wire.md §5.1: the 24-bit difference is read as a signed 24-bit number (rxe shifts it
    /// left by 8 and reads it as `i32`). Meaningful only while the true distance is below 2^23.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// `self` comes strictly after `other` in sequence space.
    #[inline]
    pub const fn is_after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// `self` comes strictly before `other` in sequence space.
    #[inline]
    pub const fn is_before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

/// Queue pair number: 24 bits (docs/wire.md §0).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
pub struct Qpn(u32);

impl Qpn {
    /// QP1, the general services interface (docs/wire.md §0).
    pub const GSI: Qpn = Qpn(1);
    /// The multicast destination QPN (docs/wire.md §0).
    pub const MULTICAST: Qpn = Qpn(MASK24);

    /// A QPN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Qpn {
        Qpn(v & MASK24)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }
}

impl fmt::Display for Qpn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:06x}", self.0)
    }
}

impl From<Qpn> for u32 {
    fn from(q: Qpn) -> u32 {
        q.0
    }
}

/// Message sequence number carried in every AETH: 24 bits, wrapping (docs/wire.md §4.5).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct Msn(u32);

impl Msn {
    /// An MSN from the low 24 bits of `v`.
    #[inline]
    pub const fn new(v: u32) -> Msn {
        Msn(v & MASK24)
    }

    /// The 24-bit value.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// The MSN after this one (modulo 2^24).
    #[inline]
    pub const fn next(self) -> Msn {
        self.add(1)
    }

    /// `self + n` modulo 2^24 (e.g. LSN = MSN + credits, docs/wire.md §4.2).
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Msn {
        Msn(self.0.wrapping_add(n) & MASK24)
    }

    /// Signed distance `self − other` in `[−2^23, 2^23)`, like [`Psn::diff`].
    #[inline]
    pub const fn diff(self, other: Msn) -> i32 {
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }
}

impl fmt::Display for Msn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<Msn> for u32 {
    fn from(m: Msn) -> u32 {
        m.0
    }
}

macro_rules! key32 {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord)]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "0x{:08x}", self.0)
            }
        }

        impl From<$name> for u32 {
            fn from(k: $name) -> u32 {
                k.0
            }
        }
    };
}

key32!(
    /// Remote key of a memory region (RETH, AtomicETH, IETH).
    Rkey
);
key32!(
    /// Local key of a memory region (never on the wire; used by the verbs and the NIC).
    Lkey
);
key32!(
    /// Queue key of a UD QP (DETH, docs/wire.md §1.5).
    Qkey
);

impl Qkey {
    /// Q_Key of QP1 (docs/wire.md §0).
    pub const GSI: Qkey = Qkey(0x8001_0000);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn masks_to_24_bits() {
        assert_eq!(Psn::new(0x1234_5678).value(), 0x34_5678);
        assert_eq!(Qpn::new(0xFF00_0011).value(), 0x11);
        assert_eq!(Msn::new(0x0100_0000).value(), 0);
    }

    #[test]
    fn psn_wraps() {
        assert_eq!(Psn::MAX.add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::MAX);
        assert_eq!(Psn::new(0).diff(Psn::MAX), 1);
        assert_eq!(Psn::MAX.diff(Psn::new(0)), -1);
        assert!(Psn::new(0).is_after(Psn::MAX));
        assert!(Psn::MAX.is_before(Psn::new(0)));
        // The two ends of the window: −2^23 is representable, +2^23 wraps to −2^23.
        assert_eq!(Psn::new(0).diff(Psn::new(1 << 23)), -(1 << 23));
        assert_eq!(Psn::new((1 << 23) - 1).diff(Psn::new(0)), (1 << 23) - 1);
        assert!(!Psn::new(5).is_after(Psn::new(5)));
        assert!(!Psn::new(5).is_before(Psn::new(5)));
    }

    #[test]
    fn msn_next_wraps() {
        assert_eq!(Msn::new(0xFF_FFFF).next(), Msn::new(0));
        assert_eq!(Msn::new(7).next().value(), 8);
    }

    #[test]
    fn display() {
        assert_eq!(Psn::new(0x123456).to_string(), "1193046");
        assert_eq!(Qpn::new(0x12).to_string(), "0x000012");
        assert_eq!(Rkey(0x1234).to_string(), "0x00001234");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn psn_add_then_diff(a in 0u32..(1 << 24), n in 0u32..(1 << 23)) {
            let p = Psn::new(a);
            let q = p.add(n);
            prop_assert_eq!(q.diff(p), n as i32);
            prop_assert_eq!(p.diff(q), -(n as i32));
            prop_assert_eq!(q.sub(n), p);
            prop_assert_eq!(n > 0, q.is_after(p));
            prop_assert_eq!(n > 0, p.is_before(q));
        }

        #[test]
        fn psn_diff_is_antisymmetric_and_in_range(a in any::<u32>(), b in any::<u32>()) {
            let (p, q) = (Psn::new(a), Psn::new(b));
            let d = p.diff(q);
            prop_assert!((-(1 << 23)..(1 << 23)).contains(&d));
            prop_assert_eq!(q.add(d as u32), p);
            if d != -(1 << 23) {
                prop_assert_eq!(q.diff(p), -d);
                prop_assert_eq!(p.is_after(q), q.is_before(p));
            }
        }

        /// Across the 2^24 boundary the comparison agrees with plain integer comparison on
        /// the unwrapped values.
        #[test]
        fn psn_order_across_wrap(base in (1u32 << 24) - 4096..(1u32 << 24), x in 0u32..8192, y in 0u32..8192) {
            let (p, q) = (Psn::new(base + x), Psn::new(base + y));
            prop_assert_eq!(p.is_after(q), x > y);
            prop_assert_eq!(p.diff(q), x as i32 - y as i32);
        }
    }
}
