//! Packet rings between two processes on one daemon device (docs/daemon.md §2.1): the
//! internal loopback of a NIC shared by several functions, in memory both map.
//!
//! One ring per direction and pair of processes, made by the daemon (a memfd) when a QP of
//! the producer is connected to a QP of the consumer: a control page, then an
//! `abi::ring` SPSC ring of [`SLOTS`] elements of [`ELEM`] bytes, each `[len: u32, 0: u32,
//! packet]` — the packet as the transport built it (BTH first, no ICRC: memory does not flip
//! bits). The producer stages packets and publishes them with one Release store per batch;
//! the consumer's engine polls the ring on every pass (no system call) and, before it parks,
//! sets the control page's `parked` word and re-checks the ring; a producer that publishes
//! into a ring whose consumer is parked writes the consumer's wake eventfd (the only system
//! call, and only for an idle consumer — the doorbell protocol of `abi::doorbell`).
//!
//! The other process may be hostile: every access goes through `abi::shm::SharedMem`
//! (atomic words), the geometry is each side's own constant, indices that break the ring
//! invariant are refused (`abi::ring`), lengths are checked, and the packets are parsed as
//! any received packet is.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use abi::ring::{Consumer, Producer, RingLayout};
use abi::shm::SharedMem;

use crate::sys::{self, Mapping};

/// Slots per ring.
pub(crate) const SLOTS: u32 = 512;
/// Bytes per slot: the largest packet (MTU 4096 + headers) and the 8-byte length word.
pub(crate) const ELEM: u32 = 8192;
/// The control page before the ring.
const CTRL: usize = 4096;
/// Largest packet a slot carries.
pub(crate) const MAX_PACKET: usize = ELEM as usize - 8;

fn layout() -> RingLayout {
    // Constants that satisfy RingLayout's rules (powers of two within its limits).
    RingLayout::new(SLOTS, ELEM).unwrap_or_else(|_| unreachable!("ring constants are valid"))
}

/// Bytes of a ring's memfd.
pub(crate) fn bytes() -> usize {
    CTRL + layout().bytes()
}

fn bad(e: abi::AbiError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

/// Make a ring's memory (the daemon does, once per direction and pair).
pub(crate) fn create() -> io::Result<OwnedFd> {
    let fd = sys::memfd(c"uroce-peer-ring", bytes())?;
    let map = Mapping::shared(fd.as_fd(), bytes())?;
    let mem = map.region()?;
    layout().init(&mem, CTRL).map_err(bad)?;
    drop(mem);
    drop(map);
    Ok(fd)
}

/// A mapped ring: the region and the mapping, dropped in that order.
#[derive(Debug)]
struct Mapped {
    mem: Arc<SharedMem>,
    _map: Mapping,
}

fn map(fd: &OwnedFd) -> io::Result<Mapped> {
    let map = Mapping::shared(fd.as_fd(), bytes())?;
    let mem = Arc::new(map.region()?);
    Ok(Mapped { mem, _map: map })
}

fn parked_word(mem: &SharedMem) -> io::Result<&std::sync::atomic::AtomicU64> {
    mem.word(0).map_err(bad)
}

fn inode(fd: &OwnedFd) -> u64 {
    use std::os::unix::fs::MetadataExt;
    fd.try_clone()
        .ok()
        .and_then(|f| std::fs::File::from(f).metadata().ok())
        .map_or(0, |m| m.ino())
}

/// The producing end, in the sending process.
#[derive(Debug)]
pub(crate) struct TxRing {
    /// The memfd's inode: which ring this is.
    ino: u64,
    prod: Producer,
    /// The consumer's engine wake-up (an eventfd of the other process).
    wake: OwnedFd,
    m: Mapped,
}

impl TxRing {
    pub(crate) fn attach(fd: &OwnedFd, wake: OwnedFd) -> io::Result<TxRing> {
        let m = map(fd)?;
        let prod = Producer::attach(m.mem.clone(), CTRL, layout()).map_err(bad)?;
        Ok(TxRing {
            ino: inode(fd),
            prod,
            wake,
            m,
        })
    }

    /// Whether `fd` is this ring's memory.
    pub(crate) fn same_memory(&self, fd: &OwnedFd) -> bool {
        inode(fd) == self.ino
    }

    /// Stage one packet; `false` if the ring is full (or the consumer broke it).
    pub(crate) fn stage(&mut self, pkt: &[u8]) -> bool {
        if pkt.len() > MAX_PACKET {
            return false;
        }
        let len = (pkt.len() as u64).to_le_bytes();
        self.prod.stage_parts(&[&len, pkt]).is_ok()
    }

    /// Publish what was staged; wake the consumer if it is parked.
    pub(crate) fn publish(&mut self) {
        if self.prod.staged() == 0 {
            return;
        }
        if self.prod.publish().is_err() {
            return;
        }
        let parked = parked_word(&self.m.mem).is_ok_and(|w| w.load(Ordering::SeqCst) != 0);
        if parked {
            sys::eventfd_signal(self.wake.as_fd());
        }
    }
}

/// The consuming end, in the receiving process.
#[derive(Debug)]
pub(crate) struct RxRing {
    cons: Consumer,
    m: Mapped,
    /// The producer broke the ring: it is ignored from now on.
    pub(crate) broken: bool,
}

impl RxRing {
    pub(crate) fn attach(fd: &OwnedFd) -> io::Result<RxRing> {
        let m = map(fd)?;
        let cons = Consumer::attach(m.mem.clone(), CTRL, layout()).map_err(bad)?;
        Ok(RxRing {
            cons,
            m,
            broken: false,
        })
    }

    /// Take up to `max` packets, handing each to `f`. Returns how many.
    pub(crate) fn drain(&mut self, max: u32, buf: &mut Vec<u8>, mut f: impl FnMut(&[u8])) -> u32 {
        if self.broken {
            return 0;
        }
        let n = match self.cons.available() {
            Ok(n) => n.min(max),
            Err(_) => {
                self.broken = true;
                return 0;
            }
        };
        for i in 0..n {
            let mut len = [0u8; 8];
            if self.cons.read(i, 0, &mut len).is_err() {
                self.broken = true;
                break;
            }
            let len = u64::from_le_bytes(len) as usize;
            if len > MAX_PACKET {
                self.broken = true;
                break;
            }
            buf.resize(len, 0);
            if self.cons.read(i, 8, buf).is_ok() {
                f(buf);
            }
        }
        let _ = self.cons.release(n);
        n
    }

    /// Whether packets wait (refreshes the producer index).
    pub(crate) fn pending(&mut self) -> bool {
        !self.broken && self.cons.available().is_ok_and(|n| n > 0)
    }

    /// Announce (or withdraw) that this consumer sleeps: producers then wake it.
    pub(crate) fn set_parked(&self, parked: bool) {
        if let Ok(w) = parked_word(&self.m.mem) {
            w.store(u64::from(parked), Ordering::SeqCst);
        }
    }
}
