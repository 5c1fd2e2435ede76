//! Shared memory regions: the only `unsafe` code in this crate.
//!
//! A [`SharedMem`] is a byte range that the library and the engine both access — today a
//! heap allocation in one process, later an mmap of a memfd shared by two processes.
//! Because the other side may write at any time (and, across processes, may be hostile),
//! **every access is atomic**: the region is treated as an array of `AtomicU64` words and
//! nothing else. Bulk copies use `Relaxed` word loads/stores (plain `mov`s on x86-64);
//! ordering comes from the Release/Acquire index protocol of [`crate::ring`] and
//! [`crate::doorbell`]. With a single access size there are no mixed-size or non-atomic
//! races, so every method here is safe to call from any thread at any time; a racing
//! misuse can only produce torn *values*, never undefined behaviour.
//!
//! Offsets given to the byte-copy methods must be 8-byte aligned; lengths need not be (a
//! partial last word is read-modify-written, preserving the bytes outside the range).
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use std::alloc::Layout;

use crate::error::{AbiError, Result};

/// Alignment of regions allocated by [`SharedMem::new_zeroed`] (a page, so a region could
/// later be handed to `mmap`-style consumers unchanged).
pub const REGION_ALIGN: usize = 4096;

/// Minimum alignment of a region (cache line: the ring and doorbell layouts put indices on
/// their own 64-byte lines).
pub const MIN_ALIGN: usize = 64;

const WORD: usize = 8;

/// A region of memory shared between the library and the engine, accessed only atomically.
pub struct SharedMem {
    ptr: NonNull<AtomicU64>,
    len: usize,
    /// `Some` when this value allocated the memory and frees it on drop.
    owned: Option<Layout>,
    /// Run once on drop: hands memory from someone else's allocator back to it
    /// ([`SharedMem::from_raw_parts_released`]).
    release: Option<Box<dyn FnOnce() + Send + Sync>>,
}

// SAFETY: the region is only ever accessed through `&AtomicU64` (see the module docs), which
// is `Sync`; the pointer stays valid for the value's lifetime (owned allocation, or the
// caller's promise in `from_raw_parts`).
unsafe impl Send for SharedMem {}
// SAFETY: as above — all access is atomic, so shared references from many threads are fine.
unsafe impl Sync for SharedMem {}

impl core::fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedMem")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("owned", &self.owned.is_some())
            .finish()
    }
}

impl SharedMem {
    /// Allocate a zeroed region of `len` bytes (rounded up to a multiple of 64), aligned to
    /// [`REGION_ALIGN`]. This is how the library allocates ring and doorbell memory in
    /// embedded mode.
    pub fn new_zeroed(len: usize) -> Result<SharedMem> {
        let len = len
            .max(1)
            .checked_next_multiple_of(MIN_ALIGN)
            .ok_or(AbiError::Overflow("region length"))?;
        let layout = Layout::from_size_align(len, REGION_ALIGN)
            .map_err(|_| AbiError::Overflow("region layout"))?;
        // SAFETY: `layout` has nonzero size (len ≥ 64).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<AtomicU64>()) else {
            std::alloc::handle_alloc_error(layout);
        };
        Ok(SharedMem {
            ptr,
            len,
            owned: Some(layout),
            release: None,
        })
    }

    /// View memory someone else owns — an mmap of a shared memfd, or (in embedded mode) the
    /// library's allocation as seen by the engine through a [`crate::uverbs::RingDesc`].
    ///
    /// Checks: non-null, [`MIN_ALIGN`]-aligned, `len` a nonzero multiple of 8.
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must be valid for reads and writes for as long as the returned value
    /// (or any clone of an `Arc` holding it) lives, and must never be accessed other than
    /// through atomic operations of 8-byte words while it lives (every user of the region
    /// goes through a `SharedMem`, or is another process). It must not be deallocated or
    /// unmapped before the `SharedMem` is dropped.
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> Result<SharedMem> {
        let addr = ptr as usize;
        if addr % MIN_ALIGN != 0 {
            return Err(AbiError::Misaligned {
                what: "region address",
                value: addr as u64,
                align: MIN_ALIGN as u64,
            });
        }
        if len == 0 || len % WORD != 0 {
            return Err(AbiError::Misaligned {
                what: "region length",
                value: len as u64,
                align: WORD as u64,
            });
        }
        let ptr = NonNull::new(ptr.cast::<AtomicU64>()).ok_or(AbiError::InvalidField {
            field: "region address",
            value: 0,
        })?;
        Ok(SharedMem {
            ptr,
            len,
            owned: None,
            release: None,
        })
    }

    /// As [`SharedMem::from_raw_parts`], and `release` runs when the value is dropped (after
    /// which the region is no longer accessed): memory an application's allocator gave for a
    /// queue (a parent domain's `alloc`), handed back to its `free`.
    ///
    /// # Safety
    ///
    /// As [`SharedMem::from_raw_parts`], until `release` runs.
    pub unsafe fn from_raw_parts_released(
        ptr: *mut u8,
        len: usize,
        release: Box<dyn FnOnce() + Send + Sync>,
    ) -> Result<SharedMem> {
        // SAFETY: forwarded contract.
        let mut m = unsafe { SharedMem::from_raw_parts(ptr, len) }?;
        m.release = Some(release);
        Ok(m)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (never, for a constructed region).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region's address, for descriptors sent to the control plane
    /// ([`crate::uverbs::RingDesc::addr`]).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as usize as u64
    }

    /// The region's start as a raw pointer (for the engine's own memory-access layer).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr().cast::<u8>()
    }

    fn check(&self, off: usize, len: usize) -> Result<()> {
        if off % WORD != 0 {
            return Err(AbiError::Misaligned {
                what: "shared-memory offset",
                value: off as u64,
                align: WORD as u64,
            });
        }
        match off.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(AbiError::OutOfBounds {
                offset: off,
                len,
                region: self.len,
            }),
        }
    }

    /// The 8-byte word at byte offset `off` (8-aligned, in bounds).
    pub fn word(&self, off: usize) -> Result<&AtomicU64> {
        self.check(off, WORD)?;
        self.word_at(off / WORD)
    }

    /// The words holding bytes `off..off + len` (`off` 8-aligned; a partial last word
    /// included), bounds-checked once for a bulk access.
    pub fn words(&self, off: usize, len: usize) -> Result<&[AtomicU64]> {
        self.check(off, len)?;
        let first = off / WORD;
        let n = len.div_ceil(WORD);
        if first + n > self.len / WORD {
            return Err(AbiError::OutOfBounds {
                offset: off,
                len,
                region: self.len,
            });
        }
        // SAFETY: words `first..first + n` lie inside the region (checked above; the region
        // is a whole number of words), which is valid for `self`'s lifetime and 8-aligned,
        // and every access to it is atomic (module docs), so a shared slice of
        // `AtomicU64` cannot alias a non-atomic access.
        Ok(unsafe { core::slice::from_raw_parts(self.ptr.as_ptr().add(first), n) })
    }

    /// Word `i` of the region, bounds-checked here so soundness does not depend on callers.
    #[inline]
    fn word_at(&self, i: usize) -> Result<&AtomicU64> {
        if i >= self.len / WORD {
            return Err(AbiError::OutOfBounds {
                offset: i.saturating_mul(WORD),
                len: WORD,
                region: self.len,
            });
        }
        // SAFETY: `i < len / 8`, so the word lies inside the region, which is valid for
        // `self`'s lifetime (constructor contracts) and 8-aligned (base is ≥ 64-aligned).
        // Every access to the region is atomic (module docs), so a `&AtomicU64` cannot alias
        // a non-atomic access.
        Ok(unsafe { &*self.ptr.as_ptr().add(i) })
    }

    /// Copy `out.len()` bytes starting at `off` (8-aligned) out of the region, with Relaxed
    /// word loads.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<()> {
        let words = self.words(off, out.len())?;
        let whole = out.len() / WORD;
        let mut chunks = out.chunks_exact_mut(WORD);
        for (chunk, w) in chunks.by_ref().zip(words) {
            chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        let tail = chunks.into_remainder();
        // A partial last word: `words` holds it.
        if let Some(w) = words.get(whole).filter(|_| !tail.is_empty()) {
            let n = tail.len();
            tail.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes()[..n]);
        }
        Ok(())
    }

    /// Copy `data` into the region at `off` (8-aligned) with Relaxed word stores.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        self.write_parts(off, &[data])
    }

    /// Copy the concatenation of `parts` into the region at `off` (8-aligned): e.g. a WQE
    /// header followed by its SGEs or inline data, without staging them first.
    pub fn write_parts(&self, off: usize, parts: &[&[u8]]) -> Result<()> {
        let total = parts
            .iter()
            .try_fold(0usize, |a, p| a.checked_add(p.len()))
            .ok_or(AbiError::Overflow("write length"))?;
        let mut words = self.words(off, total)?.iter();
        let mut acc = [0u8; WORD];
        let mut fill = 0usize;
        for part in parts {
            let mut p: &[u8] = part;
            // Top up a word left partial by the previous part.
            while fill != 0 {
                let Some((&b, rest)) = p.split_first() else {
                    break;
                };
                acc[fill] = b;
                fill += 1;
                p = rest;
                if fill == WORD {
                    if let Some(w) = words.next() {
                        w.store(u64::from_ne_bytes(acc), Ordering::Relaxed);
                    }
                    fill = 0;
                }
            }
            let mut chunks = p.chunks_exact(WORD);
            for (c, w) in chunks.by_ref().zip(words.by_ref()) {
                let mut b = [0u8; WORD];
                b.copy_from_slice(c);
                w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            // Here `fill == 0` or `p` was used up, and the remainder is < 8 bytes.
            for &b in chunks.remainder() {
                if let Some(slot) = acc.get_mut(fill) {
                    *slot = b;
                    fill += 1;
                }
            }
        }
        if fill != 0 {
            // `words` covers the partial last word too: keep the bytes after the range.
            if let Some(w) = words.next() {
                let mut cur = w.load(Ordering::Relaxed).to_ne_bytes();
                cur[..fill].copy_from_slice(&acc[..fill]);
                w.store(u64::from_ne_bytes(cur), Ordering::Relaxed);
            }
        }
        Ok(())
    }

    /// Zero `len` bytes at `off` (8-aligned).
    pub fn zero(&self, off: usize, len: usize) -> Result<()> {
        for w in self.words(off, len)?.iter().take(len / WORD) {
            w.store(0, Ordering::Relaxed);
        }
        if len % WORD != 0 {
            self.write(off + len / WORD * WORD, &[0u8; WORD][..len % WORD])?;
        }
        Ok(())
    }
}

impl Drop for SharedMem {
    fn drop(&mut self) {
        if let Some(r) = self.release.take() {
            r();
        }
        if let Some(layout) = self.owned {
            // SAFETY: `ptr` came from `alloc_zeroed(layout)` in `new_zeroed` and is freed
            // only here, once.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr().cast::<u8>(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_roundtrip_with_unaligned_lengths() {
        let m = SharedMem::new_zeroed(128).unwrap();
        assert_eq!(m.len(), 128);
        assert_eq!(m.addr() % REGION_ALIGN as u64, 0);
        m.write(0, &[0xAA; 64]).unwrap();
        // A 3-byte write must preserve bytes 3..8 of its word.
        m.write(8, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 16];
        m.read(0, &mut out).unwrap();
        assert_eq!(
            out,
            [
                0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 0xAA, 1, 2, 3, 0xAA, 0xAA, 0xAA, 0xAA,
                0xAA
            ]
        );
        m.write_parts(16, &[&[9; 5], &[], &[7; 6]]).unwrap();
        let mut out = [0u8; 13];
        m.read(16, &mut out).unwrap();
        assert_eq!(out, [9, 9, 9, 9, 9, 7, 7, 7, 7, 7, 7, 0xAA, 0xAA]);
        m.zero(16, 11).unwrap();
        m.read(16, &mut out).unwrap();
        assert_eq!(out, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xAA, 0xAA]);
    }

    #[test]
    fn every_split_of_a_write_lands_as_a_plain_byte_copy_would() {
        // Against a byte-array model: parts of every small length (partial words carried
        // across parts, empty parts, tails), at several offsets; bytes around the range
        // keep their values, and reads of every length give the model's bytes back.
        let m = SharedMem::new_zeroed(256).unwrap();
        let mut model = [0u8; 256];
        let mut fill = 1u8;
        for off in [0usize, 8, 64, 136] {
            for a in 0..20usize {
                for b in [0usize, 1, 7, 8, 9, 17] {
                    for c in [0usize, 3, 8, 13] {
                        let parts: Vec<Vec<u8>> = [a, b, c]
                            .iter()
                            .map(|&n| {
                                (0..n)
                                    .map(|_| {
                                        fill = fill.wrapping_add(37);
                                        fill
                                    })
                                    .collect()
                            })
                            .collect();
                        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                        m.write_parts(off, &refs).unwrap();
                        let flat: Vec<u8> = parts.concat();
                        model[off..off + flat.len()].copy_from_slice(&flat);
                        let mut all = [0u8; 256];
                        m.read(0, &mut all).unwrap();
                        assert_eq!(all, model, "off {off} parts {a} {b} {c}");
                        let mut part = vec![0u8; flat.len() + 3];
                        m.read(off, &mut part).unwrap();
                        assert_eq!(part[..], model[off..off + part.len()]);
                    }
                }
            }
        }
    }

    #[test]
    fn bounds_and_alignment_are_errors_not_panics() {
        let m = SharedMem::new_zeroed(64).unwrap();
        assert!(matches!(
            m.write(60, &[0; 8]),
            Err(AbiError::Misaligned { .. })
        ));
        assert!(matches!(
            m.write(56, &[0; 9]),
            Err(AbiError::OutOfBounds { .. })
        ));
        assert!(matches!(
            m.read(64, &mut [0; 1]),
            Err(AbiError::OutOfBounds { .. })
        ));
        assert!(matches!(m.word(64), Err(AbiError::OutOfBounds { .. })));
        assert!(matches!(
            m.read(usize::MAX - 7, &mut [0; 16]),
            Err(AbiError::OutOfBounds { .. })
        ));
        assert!(m.word(56).is_ok());
    }

    #[test]
    fn from_raw_parts_checks_alignment_and_length() {
        let owner = SharedMem::new_zeroed(256).unwrap();
        // SAFETY: the views below never outlive `owner`, and all access is atomic.
        let bad = unsafe { SharedMem::from_raw_parts(owner.as_ptr().wrapping_add(8), 64) };
        assert!(matches!(bad, Err(AbiError::Misaligned { .. })));
        // SAFETY: as above.
        let bad = unsafe { SharedMem::from_raw_parts(owner.as_ptr(), 12) };
        assert!(matches!(bad, Err(AbiError::Misaligned { .. })));
        // SAFETY: as above.
        let view = unsafe { SharedMem::from_raw_parts(owner.as_ptr(), 256) }.unwrap();
        view.write(64, b"hello").unwrap();
        let mut out = [0u8; 5];
        owner.read(64, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        drop(view);
        // SAFETY: null is rejected before any access.
        assert!(unsafe { SharedMem::from_raw_parts(core::ptr::null_mut(), 64) }.is_err());
    }
}
