//! The engine's only door to application memory — registered memory regions and the
//! library's ring and doorbell memory — the IOMMU/MTT of a real NIC (docs/architecture.md §4).
//!
//! In embedded mode both live in this process at the addresses the library names. The
//! control plane validates every range once, when it is registered or attached: it must be
//! mapped (and writable if it will be written), as the kernel's `ib_umem_get` pins pages.
//! The mappings come from `/proc/self/maps` ([`Maps`]), which the control plane reads before
//! it takes the device lock: generating that text takes 17–25 µs for a small process (more
//! with many libraries), and the engine needs the lock for every pass.
//! After that the engine reaches it only through [`UserRange`] (bounds-checked copies and
//! 8-byte atomics at offsets into the validated range) and [`abi::shm::SharedMem`] (the
//! ring and doorbell protocol: atomic words only).
//!
//! How a command's address names memory is the device's [`AddressSpace`]: the process's
//! own addresses (embedded mode), or offsets into one window of memory the device holds —
//! what the fuzz harness uses (`crate::fuzzing`), so hostile commands can only ever name
//! memory set aside for them, and the model for daemon mode's memfd registrations.
//!
//! # The embedded-mode contract
//!
//! As with DMA by real hardware, soundness rests on the application keeping the memory
//! mapped while it is registered (until DEREG_MR / DESTROY_* has been answered, or the
//! command connection has been closed and the control plane's end has closed in turn),
//! and not touching a buffer while an operation on it is outstanding. Daemon mode will swap
//! this module for memfd mappings owned by the daemon, which removes the first condition.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use abi::shm::SharedMem;
use abi::Errno;
use transport::AtomicOp;

/// A validated range of application memory.
#[derive(Debug)]
pub(crate) struct UserRange {
    base: usize,
    len: usize,
}

impl UserRange {
    /// Host address of `n` bytes at `off`, if inside the range.
    fn span(&self, off: u64, n: usize) -> Option<usize> {
        let off = usize::try_from(off).ok()?;
        let end = off.checked_add(n)?;
        if end > self.len {
            return None;
        }
        self.base.checked_add(off)
    }

    /// Copy `dst.len()` bytes at `off` out of the range; `false` if outside it.
    pub(crate) fn read(&self, off: u64, dst: &mut [u8]) -> bool {
        let Some(p) = self.span(off, dst.len()) else {
            return false;
        };
        if !dst.is_empty() {
            // SAFETY: `p..p+len` lies inside a range validated as mapped and readable when it
            // was registered, which the application keeps mapped while registered (module
            // docs). `dst` is our own buffer, so the two cannot overlap.
            unsafe { std::ptr::copy_nonoverlapping(p as *const u8, dst.as_mut_ptr(), dst.len()) };
        }
        true
    }

    /// Copy `src` into the range at `off`; `false` if outside it.
    pub(crate) fn write(&self, off: u64, src: &[u8]) -> bool {
        let Some(p) = self.span(off, src.len()) else {
            return false;
        };
        if !src.is_empty() {
            // SAFETY: as in `read`, and the range was validated writable (callers only write
            // to ranges registered with a write access flag, which requires it).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p as *mut u8, src.len()) };
        }
        true
    }

    /// Copy `n` bytes at `src_off` of `src` to `dst_off` of `self` directly, one copy
    /// from registered memory to registered memory (the same-device DMA path, no packet
    /// buffer in between); `false` if either span is outside its range. The spans may
    /// overlap (two MRs over the same memory): the copy is a memmove.
    pub(crate) fn copy_from(&self, dst_off: u64, src: &UserRange, src_off: u64, n: usize) -> bool {
        let (Some(d), Some(s)) = (self.span(dst_off, n), src.span(src_off, n)) else {
            return false;
        };
        if n > 0 {
            // SAFETY: both spans lie inside ranges validated as mapped (and the destination
            // as writable: callers only write to ranges registered with a write access
            // flag) when they were registered, which the application keeps mapped while
            // registered (module docs). `ptr::copy` allows the spans to overlap.
            unsafe { std::ptr::copy(s as *const u8, d as *mut u8, n) };
        }
        true
    }

    /// Execute an atomic on the 8-byte word at `off` (which must be 8-aligned in host
    /// memory); returns the original value.
    pub(crate) fn atomic(&self, off: u64, op: AtomicOp) -> Option<u64> {
        let p = self.span(off, 8)?;
        if p % 8 != 0 {
            return None;
        }
        // SAFETY: `p` is 8-aligned and the word lies inside a mapped, writable range (as in
        // `write`). Atomic RMW on application memory is what a NIC's atomic unit does; the
        // application accesses remote-atomic targets only atomically (verbs contract).
        let word = unsafe { AtomicU64::from_ptr(p as *mut u64) };
        Some(match op {
            AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => {
                match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        })
    }
}

/// How the addresses in a device's commands name memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AddressSpace {
    /// This process's own addresses (embedded mode), checked against its mappings.
    Process,
    /// Address `a` names byte `a` of a window of `len` bytes at host address `base`,
    /// which the device's owner keeps mapped read-write for as long as the device lives
    /// (the fuzz harness; daemon mode's memfd registrations work the same way).
    Window { base: usize, len: usize },
}

/// An address space and, for [`AddressSpace::Process`], optionally the process's mappings
/// as read before the command took the device lock (`ctrl`: reading `/proc/self/maps`
/// takes tens of µs, and the engine waits for the lock meanwhile).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Space<'a> {
    kind: AddressSpace,
    maps: Option<&'a Maps>,
}

impl<'a> Space<'a> {
    pub(crate) fn new(kind: AddressSpace, maps: Option<&'a Maps>) -> Space<'a> {
        Space { kind, maps }
    }

    /// The host address of `[addr, end)`, checked mapped (and writable if `write`): against
    /// the mappings given, else against the mappings read now.
    fn host(self, addr: u64, end: u64, write: bool) -> Result<usize, Errno> {
        match self.kind {
            AddressSpace::Process => {
                match self.maps {
                    Some(m) => m.check(addr, end, write)?,
                    None => Maps::read()?.check(addr, end, write)?,
                }
                usize::try_from(addr).map_err(|_| Errno::EFAULT)
            }
            AddressSpace::Window { base, len } => {
                if end > len as u64 {
                    return Err(Errno::EFAULT);
                }
                usize::try_from(addr)
                    .ok()
                    .and_then(|a| base.checked_add(a))
                    .ok_or(Errno::EFAULT)
            }
        }
    }
}

impl From<AddressSpace> for Space<'static> {
    fn from(kind: AddressSpace) -> Space<'static> {
        Space { kind, maps: None }
    }
}

/// Validate `len` bytes of application memory at `addr` (mapped, and writable if `write`).
/// EINVAL for an empty or wrapping range, EFAULT if not mapped so.
pub(crate) fn user_range<'a>(
    space: impl Into<Space<'a>>,
    addr: u64,
    len: u64,
    write: bool,
) -> Result<UserRange, Errno> {
    let end = addr.checked_add(len).ok_or(Errno::EINVAL)?;
    if len == 0 || addr == 0 {
        return Err(Errno::EINVAL);
    }
    let len = usize::try_from(len).map_err(|_| Errno::EFAULT)?;
    let base = space.into().host(addr, end, write)?;
    base.checked_add(len).ok_or(Errno::EFAULT)?;
    Ok(UserRange { base, len })
}

/// Attach `len` bytes of library memory at `addr` (ring or doorbell page) as a
/// [`SharedMem`]: checked mapped and writable, 64-byte aligned, `len` a multiple of 8.
pub(crate) fn shared_region<'a>(
    space: impl Into<Space<'a>>,
    addr: u64,
    len: usize,
) -> Result<Arc<SharedMem>, Errno> {
    let end = addr.checked_add(len as u64).ok_or(Errno::EINVAL)?;
    if addr == 0 || usize::try_from(addr).is_err() {
        return Err(Errno::EFAULT);
    }
    let host = space.into().host(addr, end, true)?;
    // SAFETY: the range is mapped read-write (checked above, or inside the window its
    // owner keeps mapped). The library allocated it for the ring/doorbell protocol and
    // accesses it only through atomic words (abi::shm), and keeps it alive until the object
    // using it is destroyed (module docs). `from_raw_parts` itself checks alignment, null
    // and length.
    let mem = unsafe { SharedMem::from_raw_parts(host as *mut u8, len) }.map_err(|e| e.errno())?;
    Ok(Arc::new(mem))
}

/// One line of `/proc/self/maps`: `[start, end)` and whether it is readable, writable.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    start: u64,
    end: u64,
    read: bool,
    write: bool,
}

/// This process's mappings, from `/proc/self/maps` (in address order, as the kernel
/// lists them).
#[derive(Debug, Default)]
pub(crate) struct Maps(Vec<Mapping>);

impl Maps {
    pub(crate) fn read() -> Result<Maps, Errno> {
        let text = std::fs::read_to_string("/proc/self/maps").map_err(|_| Errno::EFAULT)?;
        Ok(Maps::parse(&text))
    }

    fn parse(text: &str) -> Maps {
        let mut v = Vec::new();
        for line in text.lines() {
            let mut it = line.split_whitespace();
            let (Some(range), Some(perms)) = (it.next(), it.next()) else {
                continue;
            };
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(start), Ok(end)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
            else {
                continue;
            };
            let p = perms.as_bytes();
            v.push(Mapping {
                start,
                end,
                read: p.first() == Some(&b'r'),
                write: p.get(1) == Some(&b'w'),
            });
        }
        Maps(v)
    }

    /// Check that `[start, end)` is covered by consecutive mappings that are readable (and
    /// writable if `write`).
    fn check(&self, start: u64, end: u64, write: bool) -> Result<(), Errno> {
        let mut cur = start;
        for m in &self.0 {
            if m.end <= cur || m.start > cur {
                continue;
            }
            if !m.read || (write && !m.write) {
                return Err(Errno::EFAULT);
            }
            cur = m.end;
            if cur >= end {
                return Ok(());
            }
        }
        Err(Errno::EFAULT)
    }
}

/// Ask the CPU to bring the first `max` bytes of `v` into its caches before they are used
/// (a hint: no effect on results; nothing on other architectures).
#[inline(always)]
pub(crate) fn prefetch<T>(v: &T, max: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = (v as *const T).cast::<i8>();
        let n = std::mem::size_of::<T>().min(max);
        let mut off = 0;
        while off < n {
            // SAFETY: a prefetch reads nothing the program sees and never faults; the
            // addresses lie inside `v` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off)) };
            off += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, max);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_cover_consecutive_mappings_with_the_needed_rights() {
        let m = Maps::parse(
            "1000-3000 rw-p 00000000 00:00 0\n\
             3000-4000 rw-p 00000000 00:00 0 [heap]\n\
             5000-6000 r--p 00000000 08:01 42 /usr/lib/x\n\
             garbage line\n\
             6000-7000 ---p 00000000 00:00 0\n",
        );
        assert_eq!(m.check(0x1000, 0x4000, true), Ok(()));
        assert_eq!(m.check(0x2fff, 0x3001, true), Ok(()));
        // A hole at 0x4000.
        assert_eq!(m.check(0x3800, 0x5800, false), Err(Errno::EFAULT));
        // Read-only: fine to read, not to write.
        assert_eq!(m.check(0x5000, 0x6000, false), Ok(()));
        assert_eq!(m.check(0x5000, 0x6000, true), Err(Errno::EFAULT));
        // No rights at all.
        assert_eq!(m.check(0x5800, 0x6800, false), Err(Errno::EFAULT));
        assert_eq!(m.check(0x8000, 0x8001, false), Err(Errno::EFAULT));
        // Given a snapshot, a range check answers from it and does not read the mappings
        // again: an empty one refuses memory that is mapped.
        let buf = vec![1u8; 1 << 22];
        let (a, e) = (buf.as_ptr() as u64, buf.as_ptr() as u64 + buf.len() as u64);
        assert_eq!(Maps::read().unwrap().check(a, e, true), Ok(()));
        let p = AddressSpace::Process;
        assert!(user_range(Space::new(p, Some(&Maps::default())), a, 64, false).is_err());
        assert!(user_range(Space::new(p, Some(&Maps::read().unwrap())), a, 64, true).is_ok());
        assert!(user_range(p, a, 64, true).is_ok());
    }

    #[test]
    fn validates_heap_and_rejects_garbage() {
        let mut buf = vec![7u8; 100_000];
        let p = AddressSpace::Process;
        let r = user_range(p, buf.as_mut_ptr() as u64, buf.len() as u64, true).unwrap();
        let mut out = [0u8; 4];
        assert!(r.read(99_996, &mut out));
        assert_eq!(out, [7; 4]);
        assert!(!r.read(99_997, &mut out));
        assert!(!r.read(u64::MAX, &mut out));
        assert!(r.write(0, &[1, 2]));
        assert_eq!(buf[..3], [1, 2, 7]);
        assert_eq!(user_range(p, 16, 4096, false).unwrap_err(), Errno::EFAULT);
        assert_eq!(user_range(p, 0, 4096, false).unwrap_err(), Errno::EINVAL);
        assert_eq!(
            user_range(p, u64::MAX - 1, 4, false).unwrap_err(),
            Errno::EINVAL
        );
        assert_eq!(
            user_range(p, buf.as_ptr() as u64, 0, false).unwrap_err(),
            Errno::EINVAL
        );
        drop(buf);
    }

    #[test]
    fn window_addresses_are_offsets_into_the_window() {
        let win = SharedMem::new_zeroed(4096).unwrap();
        let w = AddressSpace::Window {
            base: win.addr() as usize,
            len: 4096,
        };
        let r = user_range(w, 64, 128, true).unwrap();
        assert!(r.write(0, &[9; 8]));
        assert_eq!(
            win.word(64).unwrap().load(Ordering::Relaxed),
            u64::from_ne_bytes([9; 8])
        );
        assert!(user_range(w, 4000, 96, true).is_ok());
        assert_eq!(user_range(w, 4000, 97, true).unwrap_err(), Errno::EFAULT);
        assert_eq!(
            user_range(w, u64::MAX / 2, 8, true).unwrap_err(),
            Errno::EFAULT
        );
        assert_eq!(user_range(w, 0, 8, true).unwrap_err(), Errno::EINVAL);
        let m = shared_region(w, 128, 256).unwrap();
        assert_eq!(m.addr(), win.addr() + 128);
        assert_eq!(shared_region(w, 96, 64).unwrap_err(), Errno::EINVAL); // misaligned
        assert_eq!(shared_region(w, 4032, 128).unwrap_err(), Errno::EFAULT);
        // The process's own addresses are not window offsets.
        assert_eq!(shared_region(w, win.addr(), 64).unwrap_err(), Errno::EFAULT);
    }

    #[test]
    fn copies_between_ranges_directly_and_overlapping() {
        let mut a = vec![0u8; 64];
        let mut b: Vec<u8> = (0..64).collect();
        let p = AddressSpace::Process;
        let ra = user_range(p, a.as_mut_ptr() as u64, 64, true).unwrap();
        let rb = user_range(p, b.as_mut_ptr() as u64, 64, true).unwrap();
        assert!(ra.copy_from(8, &rb, 16, 8));
        assert_eq!(a[8..16], [16, 17, 18, 19, 20, 21, 22, 23]);
        assert!(!ra.copy_from(60, &rb, 0, 8));
        assert!(!ra.copy_from(0, &rb, 60, 8));
        // Within one range, overlapping: memmove semantics.
        assert!(rb.copy_from(1, &rb, 0, 4));
        assert_eq!(b[..6], [0, 0, 1, 2, 3, 5]);
        drop((a, b));
    }

    #[test]
    fn atomics_need_alignment() {
        let mut words = [5u64; 4];
        let r = user_range(AddressSpace::Process, words.as_mut_ptr() as u64, 32, true).unwrap();
        assert_eq!(r.atomic(8, AtomicOp::FetchAdd { add: 2 }), Some(5));
        assert_eq!(
            r.atomic(
                8,
                AtomicOp::CompareSwap {
                    compare: 7,
                    swap: 1
                }
            ),
            Some(7)
        );
        assert_eq!(r.atomic(4, AtomicOp::FetchAdd { add: 1 }), None);
        assert_eq!(r.atomic(32, AtomicOp::FetchAdd { add: 1 }), None);
        assert_eq!(words[1], 1);
    }
}
