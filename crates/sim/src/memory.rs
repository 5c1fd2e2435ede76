//! A Vec-backed memory-region table implementing [`transport::Memory`].
//!
//! Every access is validated the way the NIC's MR table validates it — key lookup, bounds,
//! access flags, alignment for atomics — and every refused access is counted, so tests can
//! assert that hostile packets only ever produced refused accesses, never out-of-range ones.

use transport::wire::{Lkey, Rkey};
use transport::{AtomicOp, MemError, Memory, RemoteAccess};

/// MR access flags (`ibv_access_flags` values).
pub mod access {
    /// Local write.
    pub const LOCAL_WRITE: u32 = 1;
    /// Remote write.
    pub const REMOTE_WRITE: u32 = 2;
    /// Remote read.
    pub const REMOTE_READ: u32 = 4;
    /// Remote atomic.
    pub const REMOTE_ATOMIC: u32 = 8;
    /// Remote invalidation allowed (stands in for an MW / a key the peer may invalidate).
    pub const REMOTE_INVALIDATE: u32 = 1 << 16;
}

/// One registered region.
#[derive(Debug, Clone)]
pub struct Region {
    /// Virtual address of byte 0.
    pub va: u64,
    /// Local key.
    pub lkey: Lkey,
    /// Remote key.
    pub rkey: Rkey,
    /// Access flags ([`access`]).
    pub access: u32,
    /// Still valid (not invalidated).
    pub valid: bool,
    /// Contents.
    pub bytes: Vec<u8>,
}

/// Counters of what the transport asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Accesses that passed validation.
    pub ok: u64,
    /// Accesses refused (bad key, out of bounds, no access, misaligned, invalidated).
    pub refused: u64,
    /// Bytes moved by accepted accesses.
    pub bytes: u64,
}

/// The region table.
#[derive(Debug, Default, Clone)]
pub struct SimMemory {
    regions: Vec<Region>,
    /// Access statistics.
    pub stats: MemStats,
}

impl SimMemory {
    /// Empty table.
    pub fn new() -> SimMemory {
        SimMemory::default()
    }

    /// Register `len` zeroed bytes at `va` with `access`; returns the region index. Keys are
    /// derived from the index (`lkey = 0x100 * (index + 1) + 1`, `rkey = lkey + 0x80`).
    pub fn register(&mut self, va: u64, len: usize, access: u32) -> usize {
        let idx = self.regions.len();
        let key = 0x100 * (idx as u32 + 1) + 1;
        self.regions.push(Region {
            va,
            lkey: Lkey(key),
            rkey: Rkey(key + 0x80),
            access,
            valid: true,
            bytes: vec![0; len],
        });
        idx
    }

    /// A region by index.
    pub fn region(&self, idx: usize) -> &Region {
        &self.regions[idx]
    }

    /// A region by index, mutably (for test setup and verification).
    pub fn region_mut(&mut self, idx: usize) -> &mut Region {
        &mut self.regions[idx]
    }

    /// All regions.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    fn find_local(&self, lkey: Lkey) -> Option<usize> {
        self.regions.iter().position(|r| r.lkey == lkey)
    }

    fn find_remote(&self, rkey: Rkey) -> Option<usize> {
        self.regions.iter().position(|r| r.rkey == rkey)
    }

    /// Validate `[addr, addr + len)` in region `idx`; returns the byte offset.
    fn range(&self, idx: usize, addr: u64, len: u64) -> Result<usize, MemError> {
        let r = &self.regions[idx];
        if !r.valid {
            return Err(MemError::InvalidKey);
        }
        let off = addr.checked_sub(r.va).ok_or(MemError::OutOfBounds)?;
        let end = off.checked_add(len).ok_or(MemError::OutOfBounds)?;
        if end > r.bytes.len() as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok(off as usize)
    }

    fn check(&mut self, r: Result<(usize, usize), MemError>) -> Result<(usize, usize), MemError> {
        match r {
            Ok(v) => {
                self.stats.ok += 1;
                Ok(v)
            }
            Err(e) => {
                self.stats.refused += 1;
                Err(e)
            }
        }
    }

    fn local(
        &mut self,
        lkey: Lkey,
        addr: u64,
        len: usize,
        need: u32,
    ) -> Result<(usize, usize), MemError> {
        let r = (|| {
            let idx = self.find_local(lkey).ok_or(MemError::InvalidKey)?;
            if self.regions[idx].access & need != need {
                return Err(MemError::AccessDenied);
            }
            Ok((idx, self.range(idx, addr, len as u64)?))
        })();
        self.check(r)
    }

    fn remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        need: u32,
    ) -> Result<(usize, usize), MemError> {
        let r = (|| {
            let idx = self.find_remote(rkey).ok_or(MemError::InvalidKey)?;
            if self.regions[idx].access & need != need {
                return Err(MemError::AccessDenied);
            }
            Ok((idx, self.range(idx, va, len)?))
        })();
        self.check(r)
    }
}

fn need_for(a: RemoteAccess) -> u32 {
    match a {
        RemoteAccess::Read => access::REMOTE_READ,
        RemoteAccess::Write => access::REMOTE_WRITE,
        RemoteAccess::Atomic => access::REMOTE_ATOMIC,
    }
}

impl Memory for SimMemory {
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (idx, off) = self.local(lkey, addr, dst.len(), 0)?;
        dst.copy_from_slice(&self.regions[idx].bytes[off..off + dst.len()]);
        self.stats.bytes += dst.len() as u64;
        Ok(())
    }

    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let (idx, off) = self.local(lkey, addr, src.len(), access::LOCAL_WRITE)?;
        self.regions[idx].bytes[off..off + src.len()].copy_from_slice(src);
        self.stats.bytes += src.len() as u64;
        Ok(())
    }

    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), MemError> {
        self.remote(rkey, va, len, need_for(access)).map(|_| ())
    }

    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let (idx, off) = self.remote(rkey, va, dst.len() as u64, access::REMOTE_READ)?;
        dst.copy_from_slice(&self.regions[idx].bytes[off..off + dst.len()]);
        self.stats.bytes += dst.len() as u64;
        Ok(())
    }

    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError> {
        let (idx, off) = self.remote(rkey, va, src.len() as u64, access::REMOTE_WRITE)?;
        self.regions[idx].bytes[off..off + src.len()].copy_from_slice(src);
        self.stats.bytes += src.len() as u64;
        Ok(())
    }

    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        if va % 8 != 0 {
            self.stats.refused += 1;
            return Err(MemError::Misaligned);
        }
        let (idx, off) = self.remote(rkey, va, 8, access::REMOTE_ATOMIC)?;
        let word = &mut self.regions[idx].bytes[off..off + 8];
        let mut b = [0u8; 8];
        b.copy_from_slice(word);
        let orig = u64::from_ne_bytes(b);
        word.copy_from_slice(&op.apply(orig).to_ne_bytes());
        Ok(orig)
    }

    fn invalidate(&mut self, rkey: Rkey) -> Result<(), MemError> {
        match self.find_remote(rkey) {
            Some(idx) if self.regions[idx].access & access::REMOTE_INVALIDATE != 0 => {
                self.regions[idx].valid = false;
                self.stats.ok += 1;
                Ok(())
            }
            _ => {
                self.stats.refused += 1;
                Err(MemError::InvalidateDenied)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_and_counting() {
        let mut m = SimMemory::new();
        let a = m.register(0x1000, 16, access::LOCAL_WRITE | access::REMOTE_WRITE);
        let (lk, rk) = (m.region(a).lkey, m.region(a).rkey);
        assert!(m.write_local(lk, 0x1000, &[1, 2, 3]).is_ok());
        assert_eq!(
            m.write_local(lk, 0x100E, &[1, 2, 3]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(m.write_local(lk, 0x0FFF, &[1]), Err(MemError::OutOfBounds));
        assert_eq!(
            m.write_local(Lkey(5), 0x1000, &[1]),
            Err(MemError::InvalidKey)
        );
        assert_eq!(
            m.read_remote(rk, 0x1000, &mut [0; 2]),
            Err(MemError::AccessDenied)
        );
        assert!(m.write_remote(rk, 0x1004, &[9]).is_ok());
        assert_eq!(
            m.atomic_remote(rk, 0x1004, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::Misaligned)
        );
        assert_eq!(m.invalidate(rk), Err(MemError::InvalidateDenied));
        assert_eq!(m.region(a).bytes[..5], [1, 2, 3, 0, 9]);
        assert_eq!(m.stats.ok, 2);
        assert_eq!(m.stats.refused, 6);
        assert_eq!(
            m.write_local(lk, u64::MAX, &[1, 2]),
            Err(MemError::OutOfBounds)
        );
    }

    #[test]
    fn atomics_and_invalidate() {
        let mut m = SimMemory::new();
        let a = m.register(
            0x2000,
            16,
            access::REMOTE_ATOMIC | access::REMOTE_INVALIDATE,
        );
        let rk = m.region(a).rkey;
        assert_eq!(
            m.atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 5 }),
            Ok(0)
        );
        assert_eq!(
            m.atomic_remote(
                rk,
                0x2008,
                AtomicOp::CompareSwap {
                    compare: 5,
                    swap: 7
                }
            ),
            Ok(5)
        );
        assert_eq!(
            m.atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 0 }),
            Ok(7)
        );
        assert!(m.invalidate(rk).is_ok());
        assert_eq!(
            m.atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 0 }),
            Err(MemError::InvalidKey)
        );
    }
}
