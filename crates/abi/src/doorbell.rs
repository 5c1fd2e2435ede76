//! Doorbells: how the library tells the engine "this queue has new work" without a system
//! call, and the `parked` protocol that makes a system call happen only when the engine
//! sleeps (docs/architecture.md §3; the siw trick: notify only an idle engine).
//!
//! # The doorbell page
//!
//! One per context, allocated by the library and passed in GET_CONTEXT's driver data
//! ([`crate::uverbs::UroceGetContext`]). Layout (all u64 words; `slots` a multiple of 64):
//!
//! ```text
//! 0     magic u32 "UDBL" | slots u32     written by the library at init (informational)
//! 64    parked  u64                      engine: 1 = parked (sleeping or about to), 0 = running
//! 128   pending bitmap, slots/64 words   bit s = doorbell slot s was rung since the last drain
//! ```
//!
//! Each SQ gets a doorbell slot from CREATE_QP ([`crate::uverbs::UroceCreateQpResp`]).
//! The ring's producer index (in the ring header) is the doorbell *record* — what the engine
//! processes up to; the bitmap only says *which* queues to look at, so the engine never scans
//! all queues. RQ/SRQ/CQ need no doorbell (the engine looks at an RQ when a packet arrives;
//! CQ arming is the REQ_NOTIFY_CQ command).
//!
//! # Protocol (all SeqCst on the page)
//!
//! Library, after publishing WQEs (Release store of the SQ producer index):
//! 1. `pending[s/64].fetch_or(1 << s%64)`
//! 2. if `parked.load() == 1` and `parked.swap(0) == 1`: call [`Wake::wake`] (one system
//!    call; the swap makes exactly one of several racing ringers pay it).
//!
//! Engine, when it has found no work:
//! 1. `parked.store(1)`
//! 2. if any pending bit is set: `parked.store(0)`, don't sleep (the race was lost to a ring)
//! 3. else [`Wait::wait`], then `parked.store(0)`.
//!
//! No lost wake-up: both sides write one location then read the other's (Dekker). In the
//! single total order of SeqCst operations, either the engine's store of `parked = 1` comes
//! before the library's load of `parked` — then the library (or a racing ringer) swaps it
//! and wakes — or the library's `fetch_or` comes before the engine's bitmap load, and the
//! engine sees the bit and does not sleep. The wait primitive must have *token* semantics
//! (an eventfd counter, or a futex on `parked` that returns when it is no longer 1): a wake
//! delivered before the engine actually blocks is not lost, only turned into a spurious
//! return, which the engine handles by looping.

use std::fmt;
use std::sync::Arc;

use core::sync::atomic::{AtomicU64, Ordering::SeqCst};

use crate::error::{AbiError, Result};
use crate::shm::{SharedMem, MIN_ALIGN};

/// Offset of the magic/slots word.
pub const DOORBELL_MAGIC_OFFSET: usize = 0;
/// Offset of the engine's `parked` word (own cache line).
pub const DOORBELL_PARKED_OFFSET: usize = 64;
/// Offset of the pending bitmap (own cache lines).
pub const DOORBELL_BITMAP_OFFSET: usize = 128;
/// `"UDBL"` little-endian.
pub const DOORBELL_MAGIC: u32 = u32::from_le_bytes(*b"UDBL");
/// Largest page the layout allows.
pub const MAX_DOORBELL_SLOTS: u32 = 1 << 16;
/// What the library allocates by default (one 4 KiB page holds 64 + 8·(slots/64) words).
pub const DEFAULT_DOORBELL_SLOTS: u32 = 1024;

/// The system call that un-parks the engine (library side): an eventfd write, a futex wake.
pub trait Wake: Send + Sync {
    /// Wake the engine. Called only after this thread swapped `parked` from 1 to 0.
    fn wake(&self);
}

/// The engine's work done on the library's own thread while the engine sleeps — what rxe
/// and siw do when `ibv_post_send` transmits in the caller's context. Only an engine that
/// runs in the caller's process can offer it (embedded mode,
/// [`crate::provider::Provider::progress`]).
///
/// On a machine with more runnable threads than cores, an application that busy-polls its
/// CQ and the engine thread it waits for share a core: each completion then waits until the
/// scheduler hands the engine that core (milliseconds when it does not preempt the poller).
/// Doing the engine's pass on the polling thread removes that hand-off.
pub trait Progress: Send + Sync + fmt::Debug {
    /// If the engine is parked and no other thread is doing its work, do one round of it on
    /// this thread (drain doorbells, receive, fire due timers, serve queues, transmit) and
    /// return `true`; whatever that round could not finish is handed to the engine (it is
    /// woken). Returns `false` without doing anything while the engine is awake or busy:
    /// the caller must then rely on the engine ([`Doorbells::ring`]'s wake-up protocol).
    fn drive(&self) -> bool;
}

/// The engine's blocking primitive, with token semantics: it returns promptly if a
/// [`Wake::wake`] happened since the previous return (an eventfd read, a futex wait on
/// `parked == 1`, or `epoll_wait` that includes the wake fd). Spurious returns are allowed.
pub trait Wait {
    /// Block until woken.
    fn wait(&self);
}

/// Doorbell page geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoorbellLayout {
    slots: u32,
}

impl DoorbellLayout {
    /// A page with `slots` doorbells: a nonzero multiple of 64, at most
    /// [`MAX_DOORBELL_SLOTS`] (EINVAL otherwise).
    pub fn new(slots: u32) -> Result<DoorbellLayout> {
        if slots == 0 || slots % 64 != 0 || slots > MAX_DOORBELL_SLOTS {
            return Err(AbiError::InvalidField {
                field: "doorbell slots",
                value: u64::from(slots),
            });
        }
        Ok(DoorbellLayout { slots })
    }

    /// Number of doorbell slots.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Bytes the page needs (a multiple of 64).
    pub fn bytes(&self) -> usize {
        (DOORBELL_BITMAP_OFFSET + self.slots as usize / 8).next_multiple_of(MIN_ALIGN)
    }

    fn check_region(&self, mem: &SharedMem, base: usize) -> Result<()> {
        if base % MIN_ALIGN != 0 {
            return Err(AbiError::Misaligned {
                what: "doorbell base",
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

    /// Write a fresh page (magic, not parked, nothing pending). Done by the library, which
    /// allocates the page, before GET_CONTEXT.
    pub fn init(&self, mem: &SharedMem, base: usize) -> Result<()> {
        self.check_region(mem, base)?;
        mem.zero(base, self.bytes())?;
        let magic = u64::from(DOORBELL_MAGIC) | (u64::from(self.slots) << 32);
        mem.word(base + DOORBELL_MAGIC_OFFSET)?.store(magic, SeqCst);
        Ok(())
    }
}

/// Allocate and initialize a doorbell page, returning the library's and the engine's ends.
pub fn doorbell_page(layout: DoorbellLayout) -> Result<(Doorbells, DoorbellReceiver)> {
    let mem = Arc::new(SharedMem::new_zeroed(layout.bytes())?);
    layout.init(&mem, 0)?;
    Ok((
        Doorbells::attach(mem.clone(), 0, layout)?,
        DoorbellReceiver::attach(mem, 0, layout)?,
    ))
}

#[derive(Debug, Clone)]
struct Page {
    mem: Arc<SharedMem>,
    base: usize,
    layout: DoorbellLayout,
}

impl Page {
    fn new(mem: Arc<SharedMem>, base: usize, layout: DoorbellLayout) -> Result<Page> {
        layout.check_region(&mem, base)?;
        Ok(Page { mem, base, layout })
    }

    fn parked(&self) -> Result<&AtomicU64> {
        self.mem.word(self.base + DOORBELL_PARKED_OFFSET)
    }

    fn bitmap_word(&self, i: usize) -> Result<&AtomicU64> {
        self.mem.word(self.base + DOORBELL_BITMAP_OFFSET + i * 8)
    }

    fn words(&self) -> usize {
        self.layout.slots as usize / 64
    }

    /// The whole bitmap, bounds-checked once (the engine scans it on every pass).
    fn bitmap(&self) -> Result<&[AtomicU64]> {
        self.mem
            .words(self.base + DOORBELL_BITMAP_OFFSET, self.words() * 8)
    }
}

/// The library's end of a doorbell page. Cloneable; any thread may ring.
#[derive(Debug, Clone)]
pub struct Doorbells {
    page: Page,
}

impl Doorbells {
    /// Attach to an initialized page at `base` in `mem`.
    pub fn attach(mem: Arc<SharedMem>, base: usize, layout: DoorbellLayout) -> Result<Doorbells> {
        Ok(Doorbells {
            page: Page::new(mem, base, layout)?,
        })
    }

    /// The page geometry.
    pub fn layout(&self) -> DoorbellLayout {
        self.page.layout
    }

    /// Ring doorbell `slot` (after publishing the queue's producer index). Calls
    /// `waker.wake()` only if the engine is parked and this thread is the one that un-parked
    /// it; returns whether it did.
    pub fn ring(&self, slot: u32, waker: &dyn Wake) -> Result<bool> {
        self.ring_or_drive(slot, waker, None)
    }

    /// [`Doorbells::ring`], but if the engine is parked, first offer the work to `progress`
    /// ([`Progress::drive`]): when it ran the engine's round on this thread, the doorbell
    /// has been served and the engine stays asleep (no wake-up). Otherwise the wake-up
    /// protocol as in [`Doorbells::ring`]: the bit is set before `drive`, so either that
    /// round drained it or the engine will.
    pub fn ring_or_drive(
        &self,
        slot: u32,
        waker: &dyn Wake,
        progress: Option<&dyn Progress>,
    ) -> Result<bool> {
        if slot >= self.page.layout.slots {
            return Err(AbiError::InvalidField {
                field: "doorbell slot",
                value: u64::from(slot),
            });
        }
        self.page
            .bitmap_word(slot as usize / 64)?
            .fetch_or(1 << (slot % 64), SeqCst);
        let parked = self.page.parked()?;
        if parked.load(SeqCst) == 0 {
            return Ok(false);
        }
        if progress.is_some_and(|p| p.drive()) {
            return Ok(false);
        }
        if parked.swap(0, SeqCst) != 0 {
            waker.wake();
            return Ok(true);
        }
        Ok(false)
    }
}

/// The engine's end of a doorbell page. One per page.
#[derive(Debug)]
pub struct DoorbellReceiver {
    page: Page,
}

impl DoorbellReceiver {
    /// Attach to an initialized page at `base` in `mem` (the engine uses the geometry from
    /// the validated GET_CONTEXT driver data, not the magic word).
    pub fn attach(
        mem: Arc<SharedMem>,
        base: usize,
        layout: DoorbellLayout,
    ) -> Result<DoorbellReceiver> {
        Ok(DoorbellReceiver {
            page: Page::new(mem, base, layout)?,
        })
    }

    /// The page geometry.
    pub fn layout(&self) -> DoorbellLayout {
        self.page.layout
    }

    /// Take every pending bit (clearing it) and call `f(slot)` for each, lowest first.
    /// Returns how many were pending. Words that read 0 are skipped without a write, so an
    /// idle page costs only loads.
    pub fn drain(&self, mut f: impl FnMut(u32)) -> Result<u32> {
        let mut n = 0;
        for (i, w) in self.page.bitmap()?.iter().enumerate() {
            if w.load(SeqCst) == 0 {
                continue;
            }
            let mut bits = w.swap(0, SeqCst);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                f(i as u32 * 64 + b);
                n += 1;
            }
        }
        Ok(n)
    }

    /// Whether any doorbell is pending (loads only).
    pub fn has_pending(&self) -> Result<bool> {
        Ok(self.page.bitmap()?.iter().any(|w| w.load(SeqCst) != 0))
    }

    /// Step 1–2 of parking: announce `parked = 1`, then re-check the bitmap. Returns `true`
    /// if the engine may now block (then it must call [`DoorbellReceiver::finish_park`]
    /// after waking); `false` if a doorbell was pending (parked is reset, don't block). An
    /// engine serving several pages prepares all of them and blocks only if all say `true`
    /// (resetting the prepared ones otherwise).
    pub fn prepare_park(&self) -> Result<bool> {
        let parked = self.page.parked()?;
        parked.store(1, SeqCst);
        if self.has_pending()? {
            parked.store(0, SeqCst);
            return Ok(false);
        }
        Ok(true)
    }

    /// Step 3 of parking, after waking (or to cancel a prepared park): `parked = 0`.
    pub fn finish_park(&self) -> Result<()> {
        self.page.parked()?.store(0, SeqCst);
        Ok(())
    }

    /// Whether the page says the engine is parked.
    pub fn is_parked(&self) -> Result<bool> {
        Ok(self.page.parked()?.load(SeqCst) != 0)
    }

    /// Park on this page alone: prepare, wait if allowed, finish. Returns whether it waited.
    pub fn park(&self, waiter: &dyn Wait) -> Result<bool> {
        if !self.prepare_park()? {
            return Ok(false);
        }
        waiter.wait();
        self.finish_park()?;
        Ok(true)
    }
}
