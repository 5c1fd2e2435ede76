//! Memory keys: where lkeys and rkeys come from, and the table that resolves them.
//!
//! An rkey is a capability: whoever knows it (and the QP it was meant for, or any QP of the
//! PD for a remote peer that can guess QPNs) can read or write the registered memory
//! (IBTA Vol 1 §10.6.3). rxe derives keys from the pool index and an 8-bit counter
//! (`rxe_mr.c`, `mr->lkey = mr->ibmr.lkey = mr->elem.index << 8 | key`), so every key is
//! guessable from the previous one. Here every key is 32 bits drawn from a ChaCha-based
//! CSPRNG seeded from the OS random source, unique among the device's live keys, and
//! resolved through a hash map from key to MR slot: an O(1) lookup on the packet path that
//! says nothing about the key's neighbours (docs/architecture.md §4, docs/abi.md §5). A
//! few recent lookups are remembered (`MrTable::by_key`), checked against the slot's key.
//!
//! A sealed (hermetic) device (`crate::fuzzing`) must replay exactly, so its generator is
//! seeded with a constant and starts over whenever it has no context left.

use std::cell::Cell;
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
                Source::Hermetic(state) => splitmix64(state) as u32,
            };
            if k != 0 && k != u32::MAX && !taken(k) {
                return k;
            }
        }
    }
}

/// One SplitMix64 step (Steele, Lea and Flood 2014): advance `state` and return its next
/// output. The one copy for the device's key draws, the simulators' seeds and streams and
/// the benchmarks' payload patterns.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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

type KeyMap = HashMap<u32, u32, BuildHasherDefault<KeyHasher>>;

/// Entries of [`MrTable`]'s cache of recent lookups: 8 sets of 2.
const RECENT: usize = 16;

/// The set of [`MrTable`]'s recent lookups that `key` goes to.
pub(crate) fn recent_set(key: u32) -> usize {
    (key.wrapping_mul(0x9e37_79b9) >> 29) as usize
}

/// Where a memory window points while it is bound (IBTA Vol 1 §10.6.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MwBinding {
    /// Key of the MR it lies in.
    pub(crate) mr_key: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    /// Remote access bits it grants.
    pub(crate) access: u32,
    /// Type 2: the QP it is bound to (the only one that may use its rkey).
    pub(crate) qpn: u32,
}

/// A memory window. Its 32-bit R_Key is 24 random index bits (unique on the device, like
/// an MR key) and an 8-bit key the consumer picks at each bind (`ibv_inc_rkey`). Binding
/// and invalidation happen on the packet path, through a shared reference to the table,
/// hence the cells.
#[derive(Debug)]
pub(crate) struct Mw {
    pub(crate) ctx: crate::state::CtxId,
    pub(crate) pd: u32,
    /// 1 or 2 (`IB_MW_TYPE_*`).
    pub(crate) ty: u8,
    pub(crate) rkey: Cell<u32>,
    pub(crate) binding: Cell<Option<MwBinding>>,
}

/// The MR table: handles index the slab (as the kernel's IDR), keys go through `by_key`.
/// Memory windows live here too, so one lookup resolves any rkey: an MR key exactly, a
/// window by its 24 index bits (`mw_by_prefix`), which no MR key shares (`mr_prefixes`).
#[derive(Debug)]
pub(crate) struct MrTable {
    slab: Slab<Mr>,
    by_key: KeyMap,
    /// Keys looked up lately and their slots, by a hash of the key: a packet's lookups
    /// mostly repeat a few keys. An entry is only a hint: the slot's MR must still have
    /// the key, else the map answers.
    recent: [Cell<(u32, u32)>; RECENT],
    /// MRs removed so far: a record of keys made when it had some value names only MRs
    /// that still exist while it has that value (`DeferList::sources_valid`).
    removals: u64,
    /// Payload bytes copied into or out of these MRs (`EngineCounters::mem_copy_bytes`;
    /// counted where the copies are made, which see the table but not the counters).
    copied: Cell<u64>,
    /// MR keys per 24-bit prefix.
    mr_prefixes: KeyMap,
    mws: Slab<Mw>,
    mw_by_prefix: KeyMap,
}

impl MrTable {
    pub(crate) fn new() -> MrTable {
        MrTable {
            slab: Slab::new(1),
            by_key: HashMap::default(),
            recent: std::array::from_fn(|_| Cell::new((0, u32::MAX))),
            removals: 0,
            copied: Cell::new(0),
            mr_prefixes: HashMap::default(),
            mws: Slab::new(1),
            mw_by_prefix: HashMap::default(),
        }
    }

    /// Whether `key` may not become an MR key: it names a live MR, or lies in a window's
    /// key range.
    pub(crate) fn key_taken(&self, key: u32) -> bool {
        self.by_key.contains_key(&key) || self.mw_by_prefix.contains_key(&(key >> 8))
    }

    /// Whether `key`'s 24 index bits may not become a window's: a window or an MR key has
    /// them.
    pub(crate) fn mw_key_taken(&self, key: u32) -> bool {
        let p = key >> 8;
        self.mw_by_prefix.contains_key(&p) || self.mr_prefixes.contains_key(&p)
    }

    /// Insert an MR whose `key` is not taken; its handle, or `None` at `limit` MRs.
    pub(crate) fn insert(&mut self, mr: Mr, limit: u32) -> Option<u32> {
        let key = mr.key;
        if self.key_taken(key) {
            return None;
        }
        let idx = self.slab.insert(mr, limit)?;
        self.by_key.insert(key, idx);
        *self.mr_prefixes.entry(key >> 8).or_insert(0) += 1;
        Some(idx)
    }

    pub(crate) fn remove(&mut self, idx: u32) -> Option<Mr> {
        let mr = self.slab.remove(idx)?;
        self.removals += 1;
        self.by_key.remove(&mr.key);
        let p = mr.key >> 8;
        if let Some(n) = self.mr_prefixes.get_mut(&p) {
            *n -= 1;
            if *n == 0 {
                self.mr_prefixes.remove(&p);
            }
        }
        Some(mr)
    }

    /// Insert a window whose key's index bits are not taken; its handle, or `None` at
    /// `limit` windows.
    pub(crate) fn insert_mw(&mut self, mw: Mw, limit: u32) -> Option<u32> {
        let p = mw.rkey.get() >> 8;
        if self.mw_key_taken(mw.rkey.get()) {
            return None;
        }
        let idx = self.mws.insert(mw, limit)?;
        self.mw_by_prefix.insert(p, idx);
        Some(idx)
    }

    pub(crate) fn remove_mw(&mut self, idx: u32) -> Option<Mw> {
        let mw = self.mws.remove(idx)?;
        self.mw_by_prefix.remove(&(mw.rkey.get() >> 8));
        Some(mw)
    }

    /// The windows (handles).
    pub(crate) fn mws(&self) -> &Slab<Mw> {
        &self.mws
    }

    /// The window an rkey names (its index bits, then the whole key).
    pub(crate) fn mw_by_key(&self, key: u32) -> Option<&Mw> {
        let idx = *self.mw_by_prefix.get(&(key >> 8))?;
        self.mws.get(idx).filter(|w| w.rkey.get() == key)
    }

    /// The window whose index bits `key` has, whatever its 8-bit key (BIND_MW names the
    /// window by its current rkey and gives the next one).
    pub(crate) fn mw_by_index(&self, key: u32) -> Option<&Mw> {
        let idx = *self.mw_by_prefix.get(&(key >> 8))?;
        self.mws.get(idx)
    }

    /// Whether a window is bound to the MR with `key` (DEREG_MR is then EBUSY).
    pub(crate) fn mr_has_windows(&self, key: u32) -> bool {
        self.mws
            .iter()
            .any(|(_, w)| w.binding.get().is_some_and(|b| b.mr_key == key))
    }

    /// Unbind the type 2 windows bound to QP `qpn` (it is being destroyed).
    pub(crate) fn unbind_qp(&self, qpn: u32) {
        for (_, w) in self.mws.iter() {
            if w.ty == 2 && w.binding.get().is_some_and(|b| b.qpn == qpn) {
                w.binding.set(None);
            }
        }
    }

    /// How many MRs were removed so far.
    pub(crate) fn removals(&self) -> u64 {
        self.removals
    }

    /// Count `n` payload bytes copied into or out of an MR of this table.
    pub(crate) fn count_copy(&self, n: usize) {
        self.copied.set(self.copied.get().wrapping_add(n as u64));
    }

    /// Payload bytes copied into or out of this table's MRs so far.
    pub(crate) fn copied(&self) -> u64 {
        self.copied.get()
    }

    /// The MR a key names (the packet path's lookup).
    pub(crate) fn by_key(&self, key: u32) -> Option<&Mr> {
        // Two ways per set: two keys in turn (a WRITE's source and destination) that fall
        // in one set do not evict each other.
        let set = recent_set(key) * 2;
        let ways = self.recent.get(set..set + 2).unwrap_or(&[]);
        for w in ways {
            let (k, idx) = w.get();
            if k == key {
                if let Some(m) = self.slab.get(idx).filter(|m| m.key == key) {
                    return Some(m);
                }
            }
        }
        let idx = *self.by_key.get(&key)?;
        let m = self.slab.get(idx).filter(|m| m.key == key)?;
        if let [first, second] = ways {
            second.set(first.get());
            first.set((key, idx));
        }
        Some(m)
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
