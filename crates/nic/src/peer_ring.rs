//! Packet rings between two processes on one daemon device (docs/daemon.md §2.1): the
//! internal loopback of a NIC shared by several functions, in memory both map.
//!
//! One ring per direction and pair of processes, made by the daemon (a memfd) when a QP of
//! the producer is connected to a QP of the consumer: a control page, then an
//! `abi::ring` SPSC ring of [`SLOTS`] elements of [`ELEM`] bytes, each `[len: u32, run:
//! u32, packet]` — the packet as the transport built it (BTH first, no ICRC: memory does not
//! flip bits). `run` is 0 for a packet, or says that the buffer is a `transport::Run` of
//! that many packets (bits 0–15; bit 16: it ends the message, bit 17: it asks for an ACK),
//! which the consumer's transport takes as those packets. The producer stages packets and
//! publishes them with one Release store per batch; the consumer's engine polls the ring on
//! every pass (no system call) and, before it parks, sets the control page's `parked` word
//! and re-checks the ring; a producer that publishes into a ring whose consumer is parked
//! writes the consumer's wake eventfd (the only system call, and only for an idle consumer
//! — the doorbell protocol of `abi::doorbell`). The consumer may be an application thread
//! doing the engine's pass (`EngineShared::drive_dev`): it clears `parked` while it does. A
//! batch of nothing but plain ACKs staged on such a thread may wait [`ACK_HOLD_NS`] for the
//! request the application answers with ([`TxRing::publish_or_hold`]): the other side,
//! polling for that ACK, then finds both at once. A ring is lossless, so an RC QP that
//! sends into one may have as many PSNs outstanding as it has slots (`max_unacked_psns` =
//! [`SLOTS`]).
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
use transport::Run;

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
    /// What is staged and unpublished is only plain RC ACKs.
    acks_only: bool,
    /// Since when (engine ns) such ACKs are held back ([`TxRing::publish_or_hold`]).
    held_at: Option<u64>,
}

/// An ACK-only batch may wait this long for a packet to travel with (ns).
pub(crate) const ACK_HOLD_NS: u64 = 20_000;

/// Whether `pkt` (BTH first) is a plain RC ACK: RC_ACKNOWLEDGE with an ACK syndrome in its
/// AETH (IBTA Vol 1 §9.7.5.1), not a NAK.
fn plain_ack(pkt: &[u8]) -> bool {
    pkt.first() == Some(&0x11) && pkt.get(12).is_some_and(|s| s >> 5 == 0)
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
            acks_only: false,
            held_at: None,
        })
    }

    /// Whether `fd` is this ring's memory.
    pub(crate) fn same_memory(&self, fd: &OwnedFd) -> bool {
        inode(fd) == self.ino
    }

    /// Stage one packet (or run); `false` if the ring is full (or the consumer broke it).
    pub(crate) fn stage(&mut self, pkt: &[u8], run: Option<Run>) -> bool {
        if pkt.len() > MAX_PACKET {
            return false;
        }
        let len = (pkt.len() as u64 | u64::from(run_word(run)) << 32).to_le_bytes();
        let first = self.prod.staged() == 0;
        if self.prod.stage_parts(&[&len, pkt]).is_err() {
            return false;
        }
        self.acks_only = (first || self.acks_only) && plain_ack(pkt);
        true
    }

    /// Since when (engine ns) ACKs are held back, if they are.
    pub(crate) fn held_at(&self) -> Option<u64> {
        self.held_at
    }

    /// [`TxRing::publish`], except that with `hold` a batch of nothing but plain ACKs
    /// waits up to [`ACK_HOLD_NS`] (from `now`, engine ns) for a packet to go with: an
    /// application thread that just took a request off the ring usually answers it at
    /// once, and the consumer — polling for that ACK — then finds both in one look
    /// instead of being woken for the request after it returned with the ACK.
    pub(crate) fn publish_or_hold(&mut self, now: u64, hold: bool) {
        if self.prod.staged() == 0 {
            self.held_at = None;
            return;
        }
        if hold && self.acks_only {
            let t = *self.held_at.get_or_insert(now);
            if now.saturating_sub(t) < ACK_HOLD_NS {
                return;
            }
        }
        self.publish();
    }

    /// Publish what was staged; wake the consumer if it is parked.
    pub(crate) fn publish(&mut self) {
        self.held_at = None;
        self.acks_only = false;
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

impl Drop for TxRing {
    /// A ring that goes away (its device's state is dropped, or a new ring to the slot
    /// replaces it) leaves nothing staged behind: held ACKs still reach the consumer.
    fn drop(&mut self) {
        self.publish();
    }
}

/// The slot header's `run` word for `run`.
fn run_word(run: Option<Run>) -> u32 {
    run.map_or(0, |r| {
        (r.pkts.min(0xffff)) | u32::from(r.ends_message) << 16 | u32::from(r.ack_req) << 17
    })
}

/// The run a slot header's `run` word names (`None`: one packet). The other process wrote
/// it: the transport takes a run that does not fit its payload as one packet.
fn word_run(w: u32) -> Option<Run> {
    let pkts = w & 0xffff;
    (pkts > 1).then_some(Run {
        pkts,
        ends_message: w & 1 << 16 != 0,
        ack_req: w & 1 << 17 != 0,
    })
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

    /// Take up to `max` packets (or runs), handing each to `f`. Returns how many.
    pub(crate) fn drain(
        &mut self,
        max: u32,
        buf: &mut Vec<u8>,
        mut f: impl FnMut(&[u8], Option<Run>),
    ) -> u32 {
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
            let word = u64::from_le_bytes(len);
            let run = word_run((word >> 32) as u32);
            let len = (word & 0xffff_ffff) as usize;
            if len > MAX_PACKET {
                self.broken = true;
                break;
            }
            buf.resize(len, 0);
            if self.cons.read(i, 8, buf).is_ok() {
                f(buf, run);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A packet: BTH (opcode first) and, for an ACK, the AETH syndrome at byte 12.
    fn pkt(opcode: u8, syndrome: u8) -> Vec<u8> {
        let mut p = vec![0u8; 16];
        p[0] = opcode;
        p[12] = syndrome;
        p
    }

    fn ring() -> (TxRing, RxRing) {
        let fd = create().expect("memfd");
        let wake = sys::eventfd().expect("eventfd");
        let tx = TxRing::attach(&fd, wake).expect("producer");
        let rx = RxRing::attach(&fd).expect("consumer");
        (tx, rx)
    }

    #[test]
    fn only_plain_acks_count_as_acks() {
        assert!(plain_ack(&pkt(0x11, 0x1f)));
        // NAKs (syndrome 011xxxxx) and RNR NAKs (001xxxxx) are not held.
        assert!(!plain_ack(&pkt(0x11, 0x60)));
        assert!(!plain_ack(&pkt(0x11, 0x20)));
        // An RDMA WRITE ONLY, an atomic ACK, a truncated packet.
        assert!(!plain_ack(&pkt(0x0a, 0)));
        assert!(!plain_ack(&pkt(0x12, 0)));
        assert!(!plain_ack(&[0x11]));
    }

    #[test]
    fn an_ack_only_batch_waits_for_company_or_its_time() {
        let (mut tx, mut rx) = ring();
        let mut buf = Vec::new();
        assert!(tx.stage(&pkt(0x11, 0x1f), None));
        tx.publish_or_hold(1_000, true);
        assert!(!rx.pending(), "held");
        assert_eq!(tx.held_at(), Some(1_000));
        tx.publish_or_hold(1_000 + ACK_HOLD_NS - 1, true);
        assert!(!rx.pending(), "still within the hold");
        // A request staged behind it: both leave at once, in order.
        assert!(tx.stage(&pkt(0x0a, 0), None));
        tx.publish_or_hold(1_000 + ACK_HOLD_NS - 1, true);
        let mut got = Vec::new();
        assert_eq!(rx.drain(8, &mut buf, |p, _| got.push(p[0])), 2);
        assert_eq!(got, [0x11, 0x0a]);
        assert_eq!(tx.held_at(), None);
        // Alone, it leaves when its time is up, and at once when not held.
        assert!(tx.stage(&pkt(0x11, 0x1f), None));
        tx.publish_or_hold(5_000, true);
        tx.publish_or_hold(5_000 + ACK_HOLD_NS, true);
        assert!(rx.pending());
        assert_eq!(rx.drain(8, &mut buf, |_, _| {}), 1);
        assert!(tx.stage(&pkt(0x11, 0x1f), None));
        tx.publish_or_hold(9_000, false);
        assert!(rx.pending());
    }

    #[test]
    fn held_acks_leave_when_the_ring_goes_away() {
        let (mut tx, mut rx) = ring();
        let mut buf = Vec::new();
        assert!(tx.stage(&pkt(0x11, 0x1f), None));
        tx.publish_or_hold(1_000, true);
        assert!(!rx.pending(), "held");
        // Torn down within the hold (the device closed, the process exits): published.
        drop(tx);
        assert_eq!(rx.drain(8, &mut buf, |p, _| assert_eq!(p[0], 0x11)), 1);
    }

    #[test]
    fn a_run_crosses_the_ring_with_its_count_and_flags() {
        let (mut tx, mut rx) = ring();
        let mut buf = Vec::new();
        let run = Run {
            pkts: 7,
            ends_message: true,
            ack_req: false,
        };
        assert!(tx.stage(&pkt(0x06, 0), Some(run)));
        assert!(tx.stage(&pkt(0x0a, 0), None));
        tx.publish();
        let mut got = Vec::new();
        assert_eq!(rx.drain(8, &mut buf, |p, r| got.push((p[0], r))), 2);
        assert_eq!(got, [(0x06, Some(run)), (0x0a, None)]);
        // A count below 2 is one packet; the flags alone mean nothing.
        assert_eq!(word_run(1 | 1 << 16 | 1 << 17), None);
        assert_eq!(word_run(run_word(Some(run))), Some(run));
    }
}
