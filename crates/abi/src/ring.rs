//! Single-producer / single-consumer rings over shared memory (SQ, RQ, SRQ, CQ).
//!
//! # Layout
//!
//! A ring is a 384-byte header ([`crate::fastpath::RingHeader`]: geometry copy and magic on
//! the first cache line, the producer index alone at 128, the consumer index alone at 256)
//! followed by `slots` elements of `elem_size` bytes, both powers of two. It starts at a
//! 64-byte-aligned offset of a [`SharedMem`] region; several rings may share one region.
//!
//! # Indices
//!
//! Both indices are **free-running u64 counters** (never masked in memory): slot of index `i`
//! = `i & (slots − 1)`; empty ⇔ `producer == consumer`; full ⇔ `producer − consumer ==
//! slots`. So all `slots` slots are usable (rxe keeps masked u32 indices and wastes one
//! slot); capacity = slots, which is what CREATE_CQ/CREATE_QP report as granted.
//!
//! # Ownership and ordering
//!
//! * The producer writes a slot, then publishes with a **Release** store of the producer
//!   index; the consumer observes it with an **Acquire** load before reading the slot.
//! * The consumer frees slots with a **Release** store of the consumer index; the producer
//!   observes it with an **Acquire** load before overwriting them.
//! * Each side keeps its own index privately and never reads it back from memory, and keeps
//!   the geometry privately (from the validated [`RingDesc`]), never trusting the header.
//!   A peer index that breaks the invariant `0 ≤ producer − consumer ≤ slots` is reported
//!   as [`AbiError::RingCorrupt`] (EIO), never followed.
//! * SQ/RQ/SRQ: the library produces, the engine consumes. CQ: the engine produces, the
//!   library consumes. The side that allocates the memory (the library) calls
//!   [`RingLayout::init`] before passing its [`RingDesc`] in a create command.
//!
//! Producing a batch (a post list) is `stage` × n then one `publish`, and one doorbell.

use std::sync::Arc;

use zerocopy::{FromBytes, Immutable, IntoBytes};

use crate::error::{AbiError, Result};
use crate::fastpath::{
    RING_CONSUMER_OFFSET, RING_DATA_OFFSET, RING_INDEX_MASK_OFFSET, RING_LOG2_ELEM_OFFSET,
    RING_MAGIC, RING_MAGIC_OFFSET, RING_PRODUCER_OFFSET,
};
use crate::shm::{SharedMem, MIN_ALIGN};
use crate::uverbs::RingDesc;
use core::sync::atomic::Ordering;

/// Largest ring the layout allows (a device reports smaller limits in QUERY_DEVICE).
pub const MAX_RING_SLOTS: u32 = 1 << 20;
/// Smallest element (one cache line).
pub const MIN_ELEM_SIZE: u32 = 64;
/// Largest element.
pub const MAX_ELEM_SIZE: u32 = 1 << 16;

/// A ring's geometry: `slots` and `elem_size`, both powers of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    log2_slots: u32,
    log2_elem: u32,
}

impl RingLayout {
    /// Geometry with exactly `slots` slots of `elem_size` bytes. Errors (EINVAL) unless both
    /// are powers of two, `1 ≤ slots ≤ MAX_RING_SLOTS`, `64 ≤ elem_size ≤ MAX_ELEM_SIZE`.
    pub fn new(slots: u32, elem_size: u32) -> Result<RingLayout> {
        if !slots.is_power_of_two() || slots > MAX_RING_SLOTS {
            return Err(AbiError::InvalidField {
                field: "ring slots",
                value: u64::from(slots),
            });
        }
        if !elem_size.is_power_of_two() || !(MIN_ELEM_SIZE..=MAX_ELEM_SIZE).contains(&elem_size) {
            return Err(AbiError::InvalidField {
                field: "ring elem_size",
                value: u64::from(elem_size),
            });
        }
        Ok(RingLayout {
            log2_slots: slots.trailing_zeros(),
            log2_elem: elem_size.trailing_zeros(),
        })
    }

    /// The smallest geometry holding at least `depth` entries (slots rounded up to a power
    /// of two; `depth` 0 gets one slot).
    pub fn for_depth(depth: u32, elem_size: u32) -> Result<RingLayout> {
        let slots = depth
            .max(1)
            .checked_next_power_of_two()
            .ok_or(AbiError::InvalidField {
                field: "ring depth",
                value: u64::from(depth),
            })?;
        RingLayout::new(slots, elem_size)
    }

    /// Validate a descriptor from a create command (control plane side): geometry as in
    /// [`RingLayout::new`], `addr` 64-byte aligned, `len ≥ bytes()`.
    pub fn from_desc(desc: &RingDesc) -> Result<RingLayout> {
        let layout = RingLayout::new(desc.slots, desc.elem_size)?;
        if desc.addr % MIN_ALIGN as u64 != 0 || desc.addr == 0 {
            return Err(AbiError::Misaligned {
                what: "ring address",
                value: desc.addr,
                align: MIN_ALIGN as u64,
            });
        }
        if desc.len < layout.bytes() as u64 {
            return Err(AbiError::InvalidField {
                field: "ring len",
                value: desc.len,
            });
        }
        Ok(layout)
    }

    /// The descriptor for a ring of this geometry at `addr` (library side).
    pub fn desc(&self, addr: u64) -> RingDesc {
        RingDesc {
            addr,
            len: self.bytes() as u64,
            slots: self.slots(),
            elem_size: self.elem_size(),
        }
    }

    /// Number of slots (= capacity).
    pub fn slots(&self) -> u32 {
        1 << self.log2_slots
    }

    /// Bytes per slot.
    pub fn elem_size(&self) -> u32 {
        1 << self.log2_elem
    }

    /// Bytes of header + slots.
    pub fn bytes(&self) -> usize {
        RING_DATA_OFFSET + ((self.slots() as usize) << self.log2_elem)
    }

    fn mask(&self) -> u64 {
        u64::from(self.slots()) - 1
    }

    fn slot_offset(&self, index: u64) -> usize {
        RING_DATA_OFFSET + (((index & self.mask()) as usize) << self.log2_elem)
    }

    fn check_region(&self, mem: &SharedMem, base: usize) -> Result<()> {
        if base % MIN_ALIGN != 0 {
            return Err(AbiError::Misaligned {
                what: "ring base",
                value: base as u64,
                align: MIN_ALIGN as u64,
            });
        }
        match base.checked_add(self.bytes()) {
            Some(end) if end <= mem.len() => Ok(()),
            _ => Err(AbiError::OutOfBounds {
                offset: base,
                len: self.bytes(),
                region: mem.len(),
            }),
        }
    }

    /// Write the header (geometry, magic, both indices 0) of a ring at `base` in `mem`.
    /// Done once by the side that allocated the memory, before anyone attaches.
    pub fn init(&self, mem: &SharedMem, base: usize) -> Result<()> {
        self.check_region(mem, base)?;
        mem.zero(base, RING_DATA_OFFSET)?;
        let mut first = [0u8; 16];
        first[RING_LOG2_ELEM_OFFSET..RING_LOG2_ELEM_OFFSET + 4]
            .copy_from_slice(&self.log2_elem.to_ne_bytes());
        first[RING_INDEX_MASK_OFFSET..RING_INDEX_MASK_OFFSET + 4]
            .copy_from_slice(&(self.slots() - 1).to_ne_bytes());
        first[RING_MAGIC_OFFSET..RING_MAGIC_OFFSET + 4].copy_from_slice(&RING_MAGIC.to_ne_bytes());
        mem.write(base, &first)
    }
}

/// Allocate and initialize a ring in its own region, and return both ends (in-process use:
/// tests, and embedded mode before descriptors exist).
pub fn channel(layout: RingLayout) -> Result<(Producer, Consumer)> {
    let mem = Arc::new(SharedMem::new_zeroed(layout.bytes())?);
    layout.init(&mem, 0)?;
    Ok((
        Producer::attach(mem.clone(), 0, layout)?,
        Consumer::attach(mem, 0, layout)?,
    ))
}

fn load_index(mem: &SharedMem, base: usize, off: usize) -> Result<u64> {
    Ok(mem.word(base + off)?.load(Ordering::Acquire))
}

fn store_index(mem: &SharedMem, base: usize, off: usize, v: u64) -> Result<()> {
    mem.word(base + off)?.store(v, Ordering::Release);
    Ok(())
}

/// The producing end of a ring. Exactly one per ring (a second producer would corrupt it —
/// a logic error, not memory unsafety: all shared accesses are atomic).
#[derive(Debug)]
pub struct Producer {
    mem: Arc<SharedMem>,
    base: usize,
    layout: RingLayout,
    /// Next index to write (staged entries are `published..head`).
    head: u64,
    /// Last value stored to the shared producer index.
    published: u64,
    /// Last consumer index observed.
    tail: u64,
}

impl Producer {
    /// Attach to an initialized ring at `base` in `mem`, resuming from the indices in memory.
    pub fn attach(mem: Arc<SharedMem>, base: usize, layout: RingLayout) -> Result<Producer> {
        layout.check_region(&mem, base)?;
        let head = load_index(&mem, base, RING_PRODUCER_OFFSET)?;
        let tail = load_index(&mem, base, RING_CONSUMER_OFFSET)?;
        let mut p = Producer {
            mem,
            base,
            layout,
            head,
            published: head,
            tail,
        };
        p.check(tail)?;
        Ok(p)
    }

    /// The geometry.
    pub fn layout(&self) -> RingLayout {
        self.layout
    }

    fn check(&mut self, tail: u64) -> Result<()> {
        // A consumer index must lie in [published − slots, published]: it can neither run
        // ahead of what was published nor lag more than the ring holds.
        let used = self.published.wrapping_sub(tail);
        if used > u64::from(self.layout.slots()) {
            return Err(AbiError::RingCorrupt {
                producer: self.head,
                consumer: tail,
                slots: u64::from(self.layout.slots()),
            });
        }
        self.tail = tail;
        Ok(())
    }

    /// Free slots, refreshing the consumer index (Acquire).
    pub fn free(&mut self) -> Result<u32> {
        let tail = load_index(&self.mem, self.base, RING_CONSUMER_OFFSET)?;
        self.check(tail)?;
        let used = self.head.wrapping_sub(self.tail);
        Ok(u32::try_from(u64::from(self.layout.slots()).saturating_sub(used)).unwrap_or(0))
    }

    fn reserve(&mut self, len: usize) -> Result<usize> {
        if len > self.layout.elem_size() as usize {
            return Err(AbiError::TooLarge {
                what: "ring element",
                len,
            });
        }
        if self.head.wrapping_sub(self.tail) >= u64::from(self.layout.slots()) && self.free()? == 0
        {
            return Err(AbiError::RingFull);
        }
        Ok(self.base + self.layout.slot_offset(self.head))
    }

    /// Write the concatenation of `parts` into the next slot, without publishing it.
    /// Errors: [`AbiError::RingFull`] (ENOMEM), element too large (EINVAL).
    pub fn stage_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        let len = parts
            .iter()
            .map(|p| p.len())
            .fold(0usize, usize::saturating_add);
        let off = self.reserve(len)?;
        self.mem.write_parts(off, parts)?;
        self.head = self.head.wrapping_add(1);
        Ok(())
    }

    /// Write `bytes` into the next slot, without publishing it.
    pub fn stage(&mut self, bytes: &[u8]) -> Result<()> {
        self.stage_parts(&[bytes])
    }

    /// Write a struct into the next slot, without publishing it.
    pub fn stage_struct<T: IntoBytes + Immutable>(&mut self, v: &T) -> Result<()> {
        self.stage_parts(&[v.as_bytes()])
    }

    /// Entries staged but not yet published.
    pub fn staged(&self) -> u64 {
        self.head.wrapping_sub(self.published)
    }

    /// Publish every staged entry with one Release store of the producer index. Returns the
    /// new producer index.
    pub fn publish(&mut self) -> Result<u64> {
        if self.head != self.published {
            store_index(&self.mem, self.base, RING_PRODUCER_OFFSET, self.head)?;
            self.published = self.head;
        }
        Ok(self.head)
    }

    /// Stage and publish one entry.
    pub fn push(&mut self, bytes: &[u8]) -> Result<()> {
        self.stage(bytes)?;
        self.publish().map(|_| ())
    }
}

/// The consuming end of a ring. Exactly one per ring.
#[derive(Debug)]
pub struct Consumer {
    mem: Arc<SharedMem>,
    base: usize,
    layout: RingLayout,
    /// Next index to consume.
    tail: u64,
    /// Last producer index observed (entries `tail..head` are readable).
    head: u64,
}

impl Consumer {
    /// Attach to an initialized ring at `base` in `mem`, resuming from the indices in memory.
    pub fn attach(mem: Arc<SharedMem>, base: usize, layout: RingLayout) -> Result<Consumer> {
        layout.check_region(&mem, base)?;
        let tail = load_index(&mem, base, RING_CONSUMER_OFFSET)?;
        let mut c = Consumer {
            mem,
            base,
            layout,
            tail,
            head: tail,
        };
        c.available()?;
        Ok(c)
    }

    /// The geometry.
    pub fn layout(&self) -> RingLayout {
        self.layout
    }

    /// Entries ready to read, refreshing the producer index (Acquire). Errors with
    /// [`AbiError::RingCorrupt`] if the producer index is behind the consumer or more than
    /// `slots` ahead.
    pub fn available(&mut self) -> Result<u32> {
        let head = load_index(&self.mem, self.base, RING_PRODUCER_OFFSET)?;
        let n = head.wrapping_sub(self.tail);
        if n > u64::from(self.layout.slots()) {
            return Err(AbiError::RingCorrupt {
                producer: head,
                consumer: self.tail,
                slots: u64::from(self.layout.slots()),
            });
        }
        self.head = head;
        Ok(n as u32)
    }

    /// Entries known readable without touching the producer's cache line.
    pub fn cached_available(&self) -> u32 {
        self.head.wrapping_sub(self.tail) as u32
    }

    fn offset_of(&self, i: u32, offset: usize, len: usize) -> Result<usize> {
        if i >= self.cached_available() {
            return Err(AbiError::RingEmpty);
        }
        match offset.checked_add(len) {
            Some(end) if end <= self.layout.elem_size() as usize => {}
            _ => {
                return Err(AbiError::TooLarge {
                    what: "ring element read",
                    len: offset.saturating_add(len),
                })
            }
        }
        Ok(self.base
            + self
                .layout
                .slot_offset(self.tail.wrapping_add(u64::from(i)))
            + offset)
    }

    /// Copy bytes `offset..offset + out.len()` of the `i`-th readable entry (0 = oldest).
    /// `offset` must be a multiple of 8. The copy is what the consumer validates; the slot
    /// itself is never read twice for the same decision.
    pub fn read(&self, i: u32, offset: usize, out: &mut [u8]) -> Result<()> {
        let off = self.offset_of(i, offset, out.len())?;
        self.mem.read(off, out)
    }

    /// Overwrite bytes `offset..offset + data.len()` of the `i`-th readable entry: the
    /// consumer owns the entries it has not released, so it may rearrange them (a CQ
    /// dropping the completions of a QP moved to RESET).
    pub fn write(&mut self, i: u32, offset: usize, data: &[u8]) -> Result<()> {
        let off = self.offset_of(i, offset, data.len())?;
        self.mem.write(off, data)
    }

    /// Copy the `i`-th readable entry's first `size_of::<T>()` bytes out as a `T`.
    pub fn read_struct<T: FromBytes + IntoBytes>(&self, i: u32) -> Result<T> {
        let mut v = T::new_zeroed();
        self.read(i, 0, v.as_mut_bytes())?;
        Ok(v)
    }

    /// Free the `n` oldest entries with one Release store of the consumer index.
    pub fn release(&mut self, n: u32) -> Result<()> {
        if n > self.cached_available() {
            return Err(AbiError::RingEmpty);
        }
        if n > 0 {
            self.tail = self.tail.wrapping_add(u64::from(n));
            store_index(&self.mem, self.base, RING_CONSUMER_OFFSET, self.tail)?;
        }
        Ok(())
    }

    /// Copy the oldest entry's first `out.len()` bytes and free it. `Ok(false)` if empty.
    pub fn pop_into(&mut self, out: &mut [u8]) -> Result<bool> {
        if self.cached_available() == 0 && self.available()? == 0 {
            return Ok(false);
        }
        self.read(0, 0, out)?;
        self.release(1)?;
        Ok(true)
    }
}
