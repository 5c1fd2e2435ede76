//! Registered memory for a bare transport QP, checked by the device's own MR table and DMA
//! code: the memory of `crates/sim`'s endpoints.
//!
//! A [`SimMemory`] holds heap memory and real MR records (`state::Mr` in a `keys::MrTable`,
//! one PD), and implements [`Memory`] for a QP through [`SimMemory::for_qp`] by handing every
//! call to a `state::DmaView` over that table — the key lookup, PD match, bounds, access
//! flags, atomic alignment, memory windows and invalidation the engine applies to
//! application memory. Registration applies REG_MR's access rule (`ib_check_mr_access`).
//! What the transport asked for is counted ([`MemStats`]), so a test can assert that hostile
//! packets only ever produced refused accesses.
//!
//! Region `i` is addressed at the virtual address its caller chose (its iova); its bytes
//! live in an allocation of their own at the same offset within a 4 KiB page, as REG_MR
//! requires of `start` and `hca_va`. Keys follow the region's index: `0x100 * (i + 1) + 1`,
//! the L_Key and the R_Key alike (an MR has one key, as in rxe).

use std::cell::Cell;

use abi::shm::SharedMem;
use transport::wire::{Lkey, Qpn, Rkey};
use transport::{AtomicOp, MemError, Memory, MwBind, RemoteAccess};

use crate::dma::{user_range, AddressSpace};
use crate::keys::{MrTable, Mw};
use crate::state::{DevState, DmaView, Mr, Payload};

pub use abi::AccessFlags;

/// The protection domain every region and window belongs to.
const PD: u32 = 1;
/// At most this many regions or windows.
const LIMIT: u32 = (1 << 24) - 1;
/// The 24 index bits of the first window's R_Key (far above any region's key).
const FIRST_WINDOW: u32 = 0xF0_0000;

/// One registered region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Virtual address (iova) of byte 0.
    pub va: u64,
    /// Length in bytes.
    pub len: u64,
    /// Local key.
    pub lkey: Lkey,
    /// Remote key (the same value as the local key).
    pub rkey: Rkey,
    /// Access flags granted at registration.
    pub access: AccessFlags,
}

/// Counters of what the transport asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemStats {
    /// Calls the DMA checks allowed (accesses, binds, invalidations).
    pub ok: u64,
    /// Calls the DMA checks refused (bad key, out of bounds, no access, misaligned,
    /// invalidated window, key that may not be invalidated, refused bind).
    pub refused: u64,
    /// Bytes moved by allowed reads and writes.
    pub bytes: u64,
}

impl MemStats {
    fn count<T>(&mut self, r: Result<T, MemError>, bytes: usize) -> Result<T, MemError> {
        match r {
            Ok(_) => {
                self.ok += 1;
                self.bytes += bytes as u64;
            }
            Err(_) => self.refused += 1,
        }
        r
    }
}

/// Heap memory, MR records over it, and memory windows, in one PD.
#[derive(Debug)]
pub struct SimMemory {
    regions: Vec<Region>,
    /// Each region's allocation and where in it the region starts; the region's MR reaches
    /// it through its `dma::UserRange`. Kept as long as the MR table.
    arenas: Vec<(SharedMem, usize)>,
    mrs: MrTable,
    next_window: u32,
    /// Access statistics.
    pub stats: MemStats,
}

impl Default for SimMemory {
    fn default() -> SimMemory {
        SimMemory::new()
    }
}

impl SimMemory {
    /// No regions.
    pub fn new() -> SimMemory {
        SimMemory {
            regions: Vec::new(),
            arenas: Vec::new(),
            mrs: MrTable::new(),
            next_window: FIRST_WINDOW,
            stats: MemStats::default(),
        }
    }

    /// Register `len` zeroed bytes at virtual address `va` with `access`; returns the
    /// region's index. Its key is `0x100 * (index + 1) + 1`.
    ///
    /// # Panics
    ///
    /// If REG_MR would refuse the registration: `len` 0, `va + len` past `u64::MAX`, or
    /// access flags the device does not accept (unknown bits; REMOTE_WRITE or
    /// REMOTE_ATOMIC without LOCAL_WRITE).
    pub fn register(&mut self, va: u64, len: usize, access: AccessFlags) -> usize {
        let acc = DevState::mr_access(access.0)
            .unwrap_or_else(|r| panic!("REG_MR refuses access {access:?}: {}", r.detail));
        let length = len as u64;
        assert!(
            length > 0 && va.checked_add(length).is_some(),
            "REG_MR refuses {len} bytes at {va:#x}"
        );
        // The bytes start at the offset within a page that `va` has, one page in (offset 0
        // of a window names nothing).
        let off = 0x1000 + (va & 0xfff);
        let arena = SharedMem::new_zeroed(off as usize + len).expect("memory for a region");
        let space = AddressSpace::Window {
            base: arena.addr() as usize,
            len: arena.len(),
        };
        let write = acc
            & (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC).0
            != 0;
        let range = user_range(space, off, length, write).expect("a range inside the arena");
        let idx = self.regions.len();
        let key = 0x100 * (idx as u32 + 1) + 1;
        let mr = Mr {
            ctx: 0,
            pd: PD,
            key,
            start: arena.addr() + off,
            iova: va,
            length,
            access: acc,
            range,
        };
        self.mrs
            .insert(mr, LIMIT)
            .expect("a fresh key below the table's limit");
        self.arenas.push((arena, off as usize));
        self.regions.push(Region {
            va,
            len: length,
            lkey: Lkey(key),
            rkey: Rkey(key),
            access: AccessFlags(acc),
        });
        idx
    }

    /// A type 2 memory window over all of region `idx`, bound to QP `qpn` with the remote
    /// rights `access`; its R_Key. Only that QP may use the key, and a SEND WITH INVALIDATE
    /// it receives or a LOCAL_INV it executes unbinds the window. The bind is the device's
    /// (`Memory::bind_mw`): the region needs MW_BIND, and LOCAL_WRITE if the window grants
    /// remote writes or atomics. A refused bind leaves the window allocated and unbound.
    pub fn bind_window(
        &mut self,
        idx: usize,
        qpn: Qpn,
        access: AccessFlags,
    ) -> Result<Rkey, MemError> {
        let r = self.regions[idx];
        let key = self.next_window << 8;
        self.next_window += 1;
        let mw = Mw {
            ctx: 0,
            pd: PD,
            ty: 2,
            rkey: Cell::new(key),
            binding: Cell::new(None),
        };
        self.mrs
            .insert_mw(mw, LIMIT)
            .expect("a fresh window key below the table's limit");
        let new_rkey = Rkey(key | 1);
        let bind = MwBind {
            mw_rkey: Rkey(key),
            new_rkey,
            mr_lkey: r.lkey,
            addr: r.va,
            length: r.len,
            access: access.0,
        };
        self.dma(qpn).bind_mw(qpn, &bind)?;
        Ok(new_rkey)
    }

    /// Whether `rkey` reaches memory: the key of a region, or of a window while it is bound.
    pub fn rkey_valid(&self, rkey: Rkey) -> bool {
        self.mrs.by_key(rkey.0).is_some()
            || self
                .mrs
                .mw_by_key(rkey.0)
                .is_some_and(|w| w.binding.get().is_some())
    }

    /// A region by index.
    pub fn region(&self, idx: usize) -> &Region {
        &self.regions[idx]
    }

    /// All regions.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// Where bytes `off..off + len` of region `idx` are in its arena.
    fn span(&self, idx: usize, off: u64, len: usize) -> (&SharedMem, usize) {
        let inside = off
            .checked_add(len as u64)
            .is_some_and(|end| end <= self.regions[idx].len);
        assert!(
            inside,
            "{len} bytes at offset {off} are not inside region {idx}"
        );
        let (arena, start) = &self.arenas[idx];
        (arena, start + off as usize)
    }

    /// `len` bytes of region `idx` from byte `off` (test setup and verification: no access
    /// check, not counted).
    ///
    /// # Panics
    ///
    /// If the range is not inside the region.
    pub fn read(&self, idx: usize, off: u64, len: usize) -> Vec<u8> {
        let (arena, at) = self.span(idx, off, len);
        let skip = at % 8;
        let mut v = vec![0; skip + len];
        arena.read(at - skip, &mut v).expect("inside the arena");
        v.split_off(skip)
    }

    /// Write `bytes` into region `idx` from byte `off` (test setup: no access check, not
    /// counted).
    ///
    /// # Panics
    ///
    /// If the range is not inside the region.
    pub fn write(&mut self, idx: usize, off: u64, bytes: &[u8]) {
        let (arena, at) = self.span(idx, off, bytes.len());
        let skip = at % 8;
        let mut head = [0u8; 8];
        arena
            .read(at - skip, &mut head[..skip])
            .expect("inside the arena");
        arena
            .write_parts(at - skip, &[&head[..skip], bytes])
            .expect("inside the arena");
    }

    /// The memory as QP `qpn` sees it (a type 2 window answers only the QP it is bound to).
    pub fn for_qp(&mut self, qpn: Qpn) -> QpMemory<'_> {
        QpMemory { mem: self, qpn }
    }

    fn dma(&self, qpn: Qpn) -> DmaView<'_> {
        DmaView {
            mrs: &self.mrs,
            pd: PD,
            qpn: qpn.value(),
            payload: Payload::Copy,
        }
    }
}

/// A [`SimMemory`] as one QP sees it: the [`Memory`] a transport QP is handed. Every call
/// is the device's DMA code (`state::DmaView`), counted in [`SimMemory::stats`].
#[derive(Debug)]
pub struct QpMemory<'a> {
    mem: &'a mut SimMemory,
    qpn: Qpn,
}

impl QpMemory<'_> {
    fn dma(&self) -> DmaView<'_> {
        self.mem.dma(self.qpn)
    }

    fn count<T>(&mut self, r: Result<T, MemError>, bytes: usize) -> Result<T, MemError> {
        self.mem.stats.count(r, bytes)
    }
}

impl Memory for QpMemory<'_> {
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let r = self.dma().read_local(lkey, addr, dst);
        self.count(r, dst.len())
    }

    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError> {
        let r = self.dma().write_local(lkey, addr, src);
        self.count(r, src.len())
    }

    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), MemError> {
        let r = self.dma().check_remote(rkey, va, len, access);
        self.count(r, 0)
    }

    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        let r = self.dma().read_remote(rkey, va, dst);
        self.count(r, dst.len())
    }

    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError> {
        let r = self.dma().write_remote(rkey, va, src);
        self.count(r, src.len())
    }

    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        let r = self.dma().atomic_remote(rkey, va, op);
        self.count(r, 0)
    }

    fn invalidate(&mut self, rkey: Rkey) -> Result<(), MemError> {
        let r = self.dma().invalidate(rkey);
        self.count(r, 0)
    }

    fn bind_mw(&mut self, qpn: Qpn, bind: &MwBind) -> Result<(), MemError> {
        let r = self.dma().bind_mw(qpn, bind);
        self.count(r, 0)
    }

    fn invalidate_local(&mut self, qpn: Qpn, rkey: Rkey) -> Result<(), MemError> {
        let r = self.dma().invalidate_local(qpn, rkey);
        self.count(r, 0)
    }

    fn read_local_to_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        let r = self.dma().read_local_to_packet(lkey, addr, dst, at);
        self.count(r, dst.len())
    }

    fn read_remote_to_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        let r = self.dma().read_remote_to_packet(rkey, va, dst, at);
        self.count(r, dst.len())
    }

    fn write_local_from_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        let r = self.dma().write_local_from_packet(lkey, addr, src, at);
        self.count(r, src.len())
    }

    fn write_remote_from_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        let r = self.dma().write_remote_from_packet(rkey, va, src, at);
        self.count(r, src.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: AccessFlags = AccessFlags::LOCAL_WRITE;
    const QPN: Qpn = Qpn::new(0x11);

    #[test]
    fn validation_and_counting() {
        let mut m = SimMemory::new();
        let a = m.register(0x1000, 16, A | AccessFlags::REMOTE_WRITE);
        let (lk, rk) = (m.region(a).lkey, m.region(a).rkey);
        let mut q = m.for_qp(QPN);
        assert!(q.write_local(lk, 0x1000, &[1, 2, 3]).is_ok());
        assert_eq!(
            q.write_local(lk, 0x100E, &[1, 2, 3]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(q.write_local(lk, 0x0FFF, &[1]), Err(MemError::OutOfBounds));
        assert_eq!(
            q.write_local(Lkey(5), 0x1000, &[1]),
            Err(MemError::InvalidKey)
        );
        assert_eq!(
            q.read_remote(rk, 0x1000, &mut [0; 2]),
            Err(MemError::AccessDenied)
        );
        assert!(q.write_remote(rk, 0x1004, &[9]).is_ok());
        assert_eq!(
            q.atomic_remote(rk, 0x1004, AtomicOp::FetchAdd { add: 1 }),
            Err(MemError::Misaligned)
        );
        assert_eq!(q.invalidate(rk), Err(MemError::InvalidateDenied));
        assert_eq!(
            q.write_local(lk, u64::MAX, &[1, 2]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(m.read(a, 0, 5), [1, 2, 3, 0, 9]);
        assert_eq!(m.stats.ok, 2);
        assert_eq!(m.stats.refused, 7);
        assert_eq!(m.stats.bytes, 4);
    }

    #[test]
    fn atomics_and_invalidate() {
        let mut m = SimMemory::new();
        let a = m.register(0x2000, 16, A | AccessFlags::MW_BIND);
        let rk = m
            .bind_window(a, QPN, AccessFlags::REMOTE_ATOMIC)
            .expect("bind");
        assert_ne!(rk, m.region(a).rkey);
        let mut q = m.for_qp(QPN);
        assert_eq!(
            q.atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 5 }),
            Ok(0)
        );
        assert_eq!(
            q.atomic_remote(
                rk,
                0x2008,
                AtomicOp::CompareSwap {
                    compare: 5,
                    swap: 7
                }
            ),
            Ok(5)
        );
        // The window grants atomics only; another QP may not use it at all.
        assert_eq!(
            q.write_remote(rk, 0x2000, &[1]),
            Err(MemError::AccessDenied)
        );
        assert_eq!(
            m.for_qp(Qpn::new(0x12))
                .atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 0 }),
            Err(MemError::InvalidKey)
        );
        let mut q = m.for_qp(QPN);
        assert_eq!(
            q.atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 0 }),
            Ok(7)
        );
        assert!(m.rkey_valid(rk));
        assert!(m.for_qp(QPN).invalidate(rk).is_ok());
        assert!(!m.rkey_valid(rk));
        assert!(m.rkey_valid(m.region(a).rkey), "the MR itself stays");
        assert_eq!(
            m.for_qp(QPN)
                .atomic_remote(rk, 0x2008, AtomicOp::FetchAdd { add: 0 }),
            Err(MemError::InvalidKey)
        );
        assert_eq!(m.read(a, 8, 8), 7u64.to_ne_bytes());
    }

    #[test]
    fn registration_follows_reg_mr() {
        let mut m = SimMemory::new();
        let a = m.register(0x1234_5678, 100, AccessFlags::REMOTE_READ);
        let b = m.register(0x10, 8, A | AccessFlags::REMOTE_ATOMIC);
        assert_eq!(
            (m.region(a).lkey, m.region(a).rkey),
            (Lkey(0x101), Rkey(0x101))
        );
        assert_eq!(m.region(b).lkey, Lkey(0x201));
        assert_eq!(m.regions().len(), 2);
        // The bytes keep the page offset of the address: an atomic on an 8-aligned address
        // is on an 8-aligned word.
        assert_eq!(
            m.for_qp(QPN)
                .atomic_remote(Rkey(0x201), 0x10, AtomicOp::FetchAdd { add: 3 }),
            Ok(0)
        );
        // A region the device may not write refuses local writes but is filled for tests.
        m.write(a, 98, &[4, 2]);
        assert_eq!(m.read(a, 97, 3), [0, 4, 2]);
        assert_eq!(
            m.for_qp(QPN).write_local(Lkey(0x101), 0x1234_5678, &[1]),
            Err(MemError::AccessDenied)
        );
        let r = std::panic::catch_unwind(|| {
            SimMemory::new().register(0x1000, 8, AccessFlags::REMOTE_WRITE)
        });
        assert!(r.is_err(), "REMOTE_WRITE without LOCAL_WRITE");
    }
}
