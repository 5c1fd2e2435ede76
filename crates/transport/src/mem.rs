//! Registered memory, as the transport sees it.
//!
//! The transport never touches memory itself. Every byte it moves goes through [`Memory`],
//! which the caller implements on top of its MR table (key lookup, PD match, bounds and
//! access-flag checks — the NIC's IOMMU/MTT, docs/architecture.md §4). The transport treats every
//! call as fallible and turns failures into the completion status or NAK the spec prescribes:
//! local-key failures → `LOC_PROT_ERR`; remote-key failures → NAK remote access error.

use core::fmt;

use wire::{Lkey, Qpn, Rkey};

/// The access a remote operation needs (checked against the MR's access flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RemoteAccess {
    /// RDMA READ source.
    Read,
    /// RDMA WRITE destination.
    Write,
    /// Atomic target.
    Atomic,
}

/// An atomic operation on a 64-bit word. The word's byte order in memory is the caller's
/// (native) order, as with a hardware NIC operating on host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// If `*va == compare` then `*va = swap`.
    CompareSwap {
        /// Compared value.
        compare: u64,
        /// Stored value.
        swap: u64,
    },
    /// `*va = *va + add` (wrapping).
    FetchAdd {
        /// Addend.
        add: u64,
    },
}

impl AtomicOp {
    /// Apply to `orig`, returning the new value.
    pub fn apply(self, orig: u64) -> u64 {
        match self {
            AtomicOp::CompareSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
        }
    }
}

/// Why a memory access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemError {
    /// No MR with this key (or it belongs to another PD, or was invalidated).
    InvalidKey,
    /// The range is not inside the MR.
    OutOfBounds,
    /// The MR does not grant the needed access.
    AccessDenied,
    /// The address is not suitably aligned (atomics need 8 bytes).
    Misaligned,
    /// The key cannot be invalidated (not an MR/MW that allows remote invalidation).
    InvalidateDenied,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MemError::InvalidKey => "invalid key",
            MemError::OutOfBounds => "range outside the memory region",
            MemError::AccessDenied => "access not granted",
            MemError::Misaligned => "misaligned address",
            MemError::InvalidateDenied => "key cannot be invalidated",
        })
    }
}

impl std::error::Error for MemError {}

/// Registered memory. Implementations validate every call (key, PD, bounds, access);
/// the transport relies on the result and never assumes a range is valid.
pub trait Memory {
    /// Gather `dst.len()` bytes at `addr` under local key `lkey` (send payload).
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError>;

    /// Scatter `src` to `addr` under `lkey`; needs LOCAL_WRITE (receive buffers, READ
    /// destinations, atomic results).
    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError>;

    /// Check that `[va, va + len)` under `rkey` grants `access`, without moving data. The
    /// responder calls this once per message (on the RETH packet) before placing any byte.
    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), MemError>;

    /// Read for an RDMA READ response (REMOTE_READ).
    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError>;

    /// Place RDMA WRITE payload (REMOTE_WRITE).
    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError>;

    /// Execute an atomic on the 8 bytes at `va` (REMOTE_ATOMIC); returns the original value.
    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError>;

    /// Invalidate `rkey` (SEND_WITH_INVALIDATE).
    fn invalidate(&mut self, rkey: Rkey) -> Result<(), MemError>;

    /// Bind a memory window (BIND_MW WR of QP `qpn`; IBTA Vol 1 §10.6.7.2). Memory without
    /// windows refuses.
    fn bind_mw(&mut self, qpn: Qpn, bind: &crate::MwBind) -> Result<(), MemError> {
        let _ = (qpn, bind);
        Err(MemError::InvalidKey)
    }

    /// Invalidate `rkey` for a LOCAL_INV WR of QP `qpn`. Memory without windows refuses.
    fn invalidate_local(&mut self, qpn: Qpn, rkey: Rkey) -> Result<(), MemError> {
        let _ = (qpn, rkey);
        Err(MemError::InvalidateDenied)
    }

    // Payload between memory and a packet. The transport moves every payload byte through
    // these four, naming the range of the packet (BTH first: byte 0 is the BTH's first)
    // that the bytes fill or come from, so that a device which moves payload memory to
    // memory itself — a packet that never leaves the device, as a NIC's internal loopback
    // does — may record where a packet's payload is instead of copying it, and resolve
    // that record when the packet is delivered. Each defaults to the plain operation.

    /// [`Memory::read_local`] into bytes `at..at + dst.len()` of the packet being built
    /// (`dst` is that range of its buffer). An implementation may leave `dst` unwritten
    /// and record the source instead; the transport never reads payload it gathered.
    fn read_local_to_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        let _ = at;
        self.read_local(lkey, addr, dst)
    }

    /// [`Memory::read_remote`] into bytes `at..` of the packet being built (a READ
    /// response), with the same freedom as [`Memory::read_local_to_packet`].
    fn read_remote_to_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        let _ = at;
        self.read_remote(rkey, va, dst)
    }

    /// [`Memory::write_local`] of `src`, bytes `at..at + src.len()` of the packet being
    /// handled (a SEND's payload into a receive buffer, a READ response's into the
    /// requester's).
    fn write_local_from_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        let _ = at;
        self.write_local(lkey, addr, src)
    }

    /// [`Memory::write_remote`] of `src`, bytes `at..` of the packet being handled (an RDMA
    /// WRITE's payload).
    fn write_remote_from_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        let _ = at;
        self.write_remote(rkey, va, src)
    }
}

impl<M: Memory + ?Sized> Memory for &mut M {
    fn read_local(&mut self, lkey: Lkey, addr: u64, dst: &mut [u8]) -> Result<(), MemError> {
        (**self).read_local(lkey, addr, dst)
    }
    fn write_local(&mut self, lkey: Lkey, addr: u64, src: &[u8]) -> Result<(), MemError> {
        (**self).write_local(lkey, addr, src)
    }
    fn check_remote(
        &mut self,
        rkey: Rkey,
        va: u64,
        len: u64,
        access: RemoteAccess,
    ) -> Result<(), MemError> {
        (**self).check_remote(rkey, va, len, access)
    }
    fn read_remote(&mut self, rkey: Rkey, va: u64, dst: &mut [u8]) -> Result<(), MemError> {
        (**self).read_remote(rkey, va, dst)
    }
    fn write_remote(&mut self, rkey: Rkey, va: u64, src: &[u8]) -> Result<(), MemError> {
        (**self).write_remote(rkey, va, src)
    }
    fn atomic_remote(&mut self, rkey: Rkey, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        (**self).atomic_remote(rkey, va, op)
    }
    fn invalidate(&mut self, rkey: Rkey) -> Result<(), MemError> {
        (**self).invalidate(rkey)
    }
    fn bind_mw(&mut self, qpn: Qpn, bind: &crate::MwBind) -> Result<(), MemError> {
        (**self).bind_mw(qpn, bind)
    }
    fn invalidate_local(&mut self, qpn: Qpn, rkey: Rkey) -> Result<(), MemError> {
        (**self).invalidate_local(qpn, rkey)
    }
    fn read_local_to_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        (**self).read_local_to_packet(lkey, addr, dst, at)
    }
    fn read_remote_to_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        dst: &mut [u8],
        at: usize,
    ) -> Result<(), MemError> {
        (**self).read_remote_to_packet(rkey, va, dst, at)
    }
    fn write_local_from_packet(
        &mut self,
        lkey: Lkey,
        addr: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        (**self).write_local_from_packet(lkey, addr, src, at)
    }
    fn write_remote_from_packet(
        &mut self,
        rkey: Rkey,
        va: u64,
        src: &[u8],
        at: usize,
    ) -> Result<(), MemError> {
        (**self).write_remote_from_packet(rkey, va, src, at)
    }
}

/// Visit the pieces of `sges` covering message bytes `[offset, offset + len)`:
/// `f(sge, offset_within_sge, piece_len, offset_within_request)`. Stops at the first error.
/// Returns `Err(None)` if the SGEs are shorter than the range.
pub(crate) fn for_each_piece<E>(
    sges: &[crate::Sge],
    offset: u64,
    len: usize,
    mut f: impl FnMut(&crate::Sge, u64, usize, usize) -> Result<(), E>,
) -> Result<(), Option<E>> {
    let mut skip = offset;
    let mut done = 0usize;
    for sge in sges {
        if done == len {
            break;
        }
        let sl = u64::from(sge.length);
        if skip >= sl {
            skip -= sl;
            continue;
        }
        let avail = sl - skip;
        let want = (len - done) as u64;
        let n = avail.min(want) as usize;
        f(sge, skip, n, done).map_err(Some)?;
        done += n;
        skip = 0;
    }
    if done == len {
        Ok(())
    } else {
        Err(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Sge;

    #[test]
    fn atomic_apply() {
        assert_eq!(
            AtomicOp::CompareSwap {
                compare: 5,
                swap: 9
            }
            .apply(5),
            9
        );
        assert_eq!(
            AtomicOp::CompareSwap {
                compare: 5,
                swap: 9
            }
            .apply(6),
            6
        );
        assert_eq!(AtomicOp::FetchAdd { add: 2 }.apply(u64::MAX), 1);
    }

    #[test]
    fn pieces_span_sges() {
        let sges = [
            Sge {
                addr: 1000,
                length: 4,
                lkey: Lkey(1),
            },
            Sge {
                addr: 2000,
                length: 0,
                lkey: Lkey(2),
            },
            Sge {
                addr: 3000,
                length: 6,
                lkey: Lkey(3),
            },
        ];
        let mut got = Vec::new();
        let r: Result<(), Option<()>> = for_each_piece(&sges, 2, 5, |s, o, n, at| {
            got.push((s.addr + o, n, at));
            Ok(())
        });
        assert_eq!(r, Ok(()));
        assert_eq!(got, vec![(1002, 2, 0), (3000, 3, 2)]);
        let r: Result<(), Option<()>> = for_each_piece(&sges, 8, 3, |_, _, _, _| Ok(()));
        assert_eq!(r, Err(None));
        let r: Result<(), Option<()>> = for_each_piece(&sges, 0, 0, |_, _, _, _| Ok(()));
        assert_eq!(r, Ok(()));
    }
}
