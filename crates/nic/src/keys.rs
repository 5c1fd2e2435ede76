//! Memory keys: where lkeys and rkeys come from, and the table that resolves them.
//!
//! An rkey is a capability: whoever knows it (and the QP it was meant for, or any QP of the
//! PD for a remote peer that can guess QPNs) can read or write the registered memory
//! (IBTA Vol 1 §10.6.3). rxe derives keys from the pool index and an 8-bit counter
//! (`rxe_mr.c`, `mr->lkey = mr->ibmr.lkey = mr->elem.index << 8 | key`), so every key is
//! guessable from the previous one. Here every key is 32 bits drawn from a ChaCha-based
//! CSPRNG seeded from the OS random source, unique among the device's live keys, and
//! resolved through a hash map from key to MR slot: an O(1) lookup on the packet path that
//! says nothing about the key's neighbours (docs/architecture.md §4, docs/abi.md §5).
//!
//! A sealed (hermetic) device (`crate::fuzzing`) must replay exactly, so its generator is
//! seeded with a constant and starts over whenever it has no context left.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use rand::rngs::{StdRng, SysRng};
use rand::{Rng, SeedableRng};

use crate::slab::Slab;
use crate::state::Mr;

/// The seed of a hermetic device's key sequence.
const HERMETIC_SEED: u64 = 0x7572_6f63_656b_6579;

/// Where keys come from.
#[derive(Debug)]
enum Source {
    /// ChaCha12 (`rand`'s `StdRng`) seeded from the OS: unpredictable.
    Os(Box<StdRng>),
    /// SplitMix64 from [`HERMETIC_SEED`]: a sealed device's replayable sequence, fixed
    /// here rather than by a crate's choice of algorithm (`crate::fuzzing::MR_KEY` is its
    /// first key).
    Hermetic(u64),
}

/// Draws unpredictable memory keys.
#[derive(Debug, Default)]
pub(crate) struct KeyGen {
    /// Chosen on first use, so a device made hermetic after it was built (`device.rs`)
    /// never draws from the OS-seeded sequence.
    src: Option<Source>,
}

impl KeyGen {
    /// Forget the sequence: the next key starts it over (from the constant seed on a
    /// hermetic device, from the OS otherwise).
    pub(crate) fn reset(&mut self) {
        self.src = None;
    }

    /// A key that is neither 0 nor `u32::MAX` (both stand for "no key" in places: the
    /// invalid-SGE WR, rdma-core's unset fields) and not `taken`.
    pub(crate) fn draw(&mut self, hermetic: bool, taken: impl Fn(u32) -> bool) -> u32 {
        let src = self.src.get_or_insert_with(|| {
            if hermetic {
                Source::Hermetic(HERMETIC_SEED)
            } else {
                Source::Os(Box::new(
                    StdRng::try_from_rng(&mut SysRng)
                        .unwrap_or_else(|_| StdRng::seed_from_u64(crate::gsi::id_seed())),
                ))
            }
        });
        loop {
            let k = match src {
                Source::Os(rng) => rng.next_u32(),
                Source::Hermetic(state) => {
                    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let mut z = *state;
                    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                    (z ^ (z >> 31)) as u32
                }
            };
            if k != 0 && k != u32::MAX && !taken(k) {
                return k;
            }
        }
    }
}

/// Keys are uniformly random and never chosen by the peer (lookups of foreign keys do not
/// insert), so one multiplication spreads them over hashbrown's buckets and tag bits.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, k: u32) {
        self.0 = (self.0 ^ u64::from(k)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The MR table: handles index the slab (as the kernel's IDR), keys go through `by_key`.
#[derive(Debug)]
pub(crate) struct MrTable {
    slab: Slab<Mr>,
    by_key: HashMap<u32, u32, BuildHasherDefault<KeyHasher>>,
}

impl MrTable {
    pub(crate) fn new() -> MrTable {
        MrTable {
            slab: Slab::new(1),
            by_key: HashMap::default(),
        }
    }

    /// Whether `key` names a live MR.
    pub(crate) fn key_taken(&self, key: u32) -> bool {
        self.by_key.contains_key(&key)
    }

    /// Insert an MR whose `key` is not taken; its handle, or `None` at `limit` MRs.
    pub(crate) fn insert(&mut self, mr: Mr, limit: u32) -> Option<u32> {
        let key = mr.key;
        if self.by_key.contains_key(&key) {
            return None;
        }
        let idx = self.slab.insert(mr, limit)?;
        self.by_key.insert(key, idx);
        Some(idx)
    }

    pub(crate) fn remove(&mut self, idx: u32) -> Option<Mr> {
        let mr = self.slab.remove(idx)?;
        self.by_key.remove(&mr.key);
        Some(mr)
    }

    /// The MR a key names (the packet path's lookup).
    pub(crate) fn by_key(&self, key: u32) -> Option<&Mr> {
        let idx = *self.by_key.get(&key)?;
        self.slab.get(idx).filter(|m| m.key == key)
    }
}

impl MrTable {
    /// The MR behind a handle, to change anything but its key (which `by_key` indexes).
    pub(crate) fn get_mut(&mut self, idx: u32) -> Option<&mut Mr> {
        self.slab.get_mut(idx)
    }
}

impl std::ops::Deref for MrTable {
    type Target = Slab<Mr>;

    fn deref(&self) -> &Slab<Mr> {
        &self.slab
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermetic_sequences_replay_and_os_sequences_differ() {
        let draw = |g: &mut KeyGen, h| (0..8).map(|_| g.draw(h, |_| false)).collect::<Vec<_>>();
        let mut a = KeyGen::default();
        let first = draw(&mut a, true);
        a.reset();
        assert_eq!(
            draw(&mut a, true),
            first,
            "a hermetic device replays its keys"
        );
        let (mut b, mut c) = (KeyGen::default(), KeyGen::default());
        assert_ne!(draw(&mut b, false), draw(&mut c, false));
        assert_ne!(draw(&mut b, false), first);
    }

    #[test]
    fn the_fuzzing_prelude_mr_has_the_first_hermetic_key() {
        assert_eq!(
            KeyGen::default().draw(true, |_| false),
            crate::fuzzing::MR_KEY
        );
    }

    #[test]
    fn draw_skips_taken_and_reserved_keys() {
        let mut g = KeyGen::default();
        let first = g.draw(true, |_| false);
        g.reset();
        assert_ne!(g.draw(true, |k| k == first), first);
    }
}
