//! Deterministic pseudo-random numbers: xoshiro256** seeded through SplitMix64.
//!
//! One `u64` seed drives everything in a simulation; independent streams (link faults,
//! workload choices, payload bytes) are derived with [`Rng::fork`] so that changing one
//! stream's consumption does not shift another's.

/// SplitMix64 step (also used to derive seeds and per-message payload streams).
pub use nic::splitmix64;

/// xoshiro256** generator.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded from `seed`.
    pub fn new(seed: u64) -> Rng {
        let mut sm = seed;
        let mut s = [0u64; 4];
        for x in &mut s {
            *x = splitmix64(&mut sm);
        }
        if s == [0; 4] {
            s[0] = 1;
        }
        Rng { s }
    }

    /// An independent stream derived from this seed and `stream`.
    pub fn fork(seed: u64, stream: u64) -> Rng {
        let mut sm = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        Rng::new(splitmix64(&mut sm))
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, n)` (`n > 0`; 0 yields 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the tiny bias is irrelevant for a simulator.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[lo, hi]` (inclusive; swapped if reversed).
    #[inline]
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        let (lo, hi) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `[0, 1)`.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// `true` with probability `p` (clamped to [0, 1]). Consumes no randomness when `p <= 0`.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        self.unit() < p
    }
}

/// Fill `buf` with the deterministic byte stream of `key` (fast: 8 bytes per step).
pub fn fill_stream(key: u64, buf: &mut [u8]) {
    let mut st = key;
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        c.copy_from_slice(&splitmix64(&mut st).to_le_bytes());
    }
    let rest = chunks.into_remainder();
    if !rest.is_empty() {
        let v = splitmix64(&mut st).to_le_bytes();
        rest.copy_from_slice(&v[..rest.len()]);
    }
}

/// Whether `buf` equals the stream of `key` (without materialising it).
pub fn check_stream(key: u64, buf: &[u8]) -> bool {
    let mut st = key;
    let mut chunks = buf.chunks_exact(8);
    for c in &mut chunks {
        if c != splitmix64(&mut st).to_le_bytes() {
            return false;
        }
    }
    let rest = chunks.remainder();
    rest.is_empty() || rest == &splitmix64(&mut st).to_le_bytes()[..rest.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_forked_streams_differ() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut f1 = Rng::fork(42, 1);
        let mut f2 = Rng::fork(42, 2);
        assert_ne!(f1.next_u64(), f2.next_u64());
    }

    #[test]
    fn ranges_and_chance() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            let v = r.range(3, 9);
            assert!((3..=9).contains(&v));
            assert!(r.below(5) < 5);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert!(!r.chance(0.0));
        assert!(r.chance(1.0));
        let hits = (0..10_000).filter(|_| r.chance(0.25)).count();
        assert!((2_000..3_000).contains(&hits), "{hits}");
    }

    #[test]
    fn stream_fill_and_check() {
        for len in [0usize, 1, 7, 8, 9, 100] {
            let mut b = vec![0u8; len];
            fill_stream(99, &mut b);
            assert!(check_stream(99, &b));
            if len > 0 {
                b[len - 1] ^= 1;
                assert!(!check_stream(99, &b));
            }
        }
    }
}
