//! The engine: the NIC's doorbell, DMA and transport processing, one thread for every
//! device of the process by default (docs/architecture.md §4).
//!
//! # A pass (per device, under the device lock)
//!
//! 1. **Doorbells**: drain each context's doorbell bitmap; each set bit names one SQ, whose
//!    QP joins the ready queue. The cost is the bitmap's words, never the number of QPs.
//! 2. **Receive**: `recvmmsg` a batch from the device's UDP socket (only while some QP can
//!    talk to another device, or after epoll reported the socket readable), verify ICRCs
//!    (the unseen-IPv4-ID check), demultiplex by destination QPN, feed the transport.
//! 3. **Timers**: fire the transport deadlines that are due (`poll_timeout`).
//! 4. **Work**: deliver internal-loopback packets; for each ready QP, pull WQEs from its SQ
//!    ring into the transport, let it transmit (bounded), free the SQ slots it retired,
//!    then write its completions into the CQ rings and post its async events (a polled
//!    completion's slot is always free already).
//! 5. **Transmit**: `sendmmsg` the batch of UDP datagrams (ICRC computed for the IPv4 ID 0 +
//!    DF header the socket will produce).
//!
//! # Parking
//!
//! While passes make progress the engine loops. Without progress it keeps polling for an
//! adaptive window (`crate::spin`: from `spin_us`, doubled by parks that a wake-up soon
//! ended, up to `max_spin_us`), and longer — a second adaptive window, `busy_spin_us` up
//! to `max_busy_spin_us` — while an application is mid-work (it owes a signaled send WQE
//! or has completions it has not consumed: it is descheduled, not done) — unless it was
//! recently preempted in an idle spin (more runnable threads than cores: spinning then
//! steals the core from whoever would make progress, so it spins a few µs only;
//! `DeviceConfig::park_when_contended`). Then it parks:
//! it announces `parked` on every doorbell page (abi::doorbell protocol) and in its own
//! flag for control-plane kicks, re-checks, then blocks in `epoll_wait` on the wake eventfd
//! and the UDP sockets with the next transport deadline as the timeout. A doorbell costs
//! the library a system call only in that state. An idle device costs no CPU.
//!
//! # The engine's work on the application's thread
//!
//! While the engine sleeps, its per-device I/O state (`Core`) is free: a library thread
//! that rings a doorbell or finds its CQ empty takes it (`try_lock`, never waiting) and runs
//! the passes itself (`EngineShared::drive`, `abi::doorbell::Progress`;
//! `DeviceConfig::app_progress`), as rxe's `post_send` transmits in the caller's context.
//! The engine stays asleep unless that work left something over or armed a deadline before
//! the one it sleeps until. On a machine with more runnable threads than cores this removes
//! the hand-off that otherwise dominates latency: an application busy-polling its CQ on the
//! core the engine needs. Pinned to one CPU, the engine counts as contended (parks right
//! after its work) for as long as an application thread keeps calling in, and a caller that
//! finds a contended engine awake yields its core to it. Measured on the 2-core VM, stock
//! perftest between two processes pinned to a core each (before → after): ib_send_lat
//! typical 27–37 → 8–16 µs, average 440–700 → 19–30 µs; ib_read_lat 41 / 341 → 8–9 / 16–18
//! µs; ib_write_bw 205 → 444–485 MB/s; ib_atomic_bw 0.018 → 0.084–0.093 Mpps. An
//! application that waits by spinning on memory (ib_write_lat) still needs the engine
//! thread to be scheduled for each incoming WRITE (typical ~45 µs, one wake-up here).
//!
//! The device's work is done where a core is already running: on the caller's thread when
//! it posts or polls, on the engine only when no caller is there. A caller marks itself
//! active (`EngineShared::app_active`); the engine then counts as contended for
//! `APP_HOLD` — it parks after a few µs of idle spin, and a caller that finds it awake in
//! that state takes the work too (the engine's loop `try_lock`s and waits for it, yielding
//! its core only if the caller holds on `HOLDER_STALLED`). On a
//! daemon device the caller also drains the peer rings while it does the passes (it
//! withdraws the rings' `parked` word meanwhile, so producers do not wake the engine for
//! what it reads anyway), and holds back an ACK-only batch for the answer it is about to
//! post (`peer_ring::TxRing::publish_or_hold`); a parked engine naps `RING_BACKLOG_NAP`
//! while callers have been holding ACKs or a ring is full, so that held ACKs and packets
//! waiting for room always leave (docs/daemon.md §2.1).

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use abi::fastpath::{SendPayload, SendWqe, WqeLimits, SEND_WQE_HDR_BYTES};
use transport::wire::icrc::{self, ICRC_LEN};
use transport::wire::ip::{IpRepr, UdpRepr, IPV4_HEADER_LEN, IPV6_HEADER_LEN};
use transport::wire::{Qkey, Qpn, Rkey, RocePacketRepr, ROCE_V2_PORT};
use transport::{
    AttrMask, Grh, InlineData, LocalData, PostError, QpAttr, QpEvent, QpState, QpType, RxMeta,
    SendFlags, SendWr, SgeList, Time, Transmit, UdDest, WcStatus, WrOpcode,
};

use crate::config::DeviceConfig;
use crate::device::Device;
use crate::spin::{SpinBounds, SpinPolicy};
use crate::state::*;
use crate::sys::{self, Epoll, MsgBatch, Sent, EPOLLIN};

/// Packet buffer: the largest path MTU, the longest header, the ICRC.
const PKT_BUF: usize = 4096 + transport::MAX_HEADER_LEN + ICRC_LEN + 16;
/// Messages per `recvmmsg`.
const BATCH: usize = 32;
/// A daemon client's engine reads the daemon's socket at least this often while busy.
const DAEMON_POLL_NS: u64 = 5_000_000;
/// Packets taken from one peer ring per pass.
const RING_BUDGET: u32 = 256;
/// Datagrams per `sendmmsg` (runs of them go as GSO sends: `sys::MsgBatch::send`).
const TX_BATCH: usize = 128;
/// Receive buffer: a message of datagrams the kernel coalesced (UDP GRO) is at most 64 KiB.
const RX_BUF: usize = (1 << 16) + size_of::<abi::daemon::DataHdr>();
/// Packets one QP may build per service before others get a turn.
const TX_BUDGET: usize = 64;
/// UDP datagrams queued before QPs stop transmitting (socket back-pressure).
const TXQ_MAX: usize = 1024;
/// Loopback packets delivered per round.
const LOOP_BUDGET: usize = 512;
/// Same-device packets queued before QPs stop transmitting: the internal loopback is a
/// wire with a bounded buffer. Unbounded, a thousand QPs each sending a window at once
/// queue tens of thousands of packets ahead of every ACK; the round trip then outgrows
/// the retransmission timeout and the device spends its time resending what is queued.
const LOOPQ_MAX: usize = 1024;
/// Rounds of (loopback, ready QPs) per pass.
const ROUNDS: usize = 8;
/// With [`crate::DeviceConfig::yield_when_idle`], idle spinning longer than this yields the
/// core between polls.
const YIELD_AFTER: Duration = Duration::from_micros(5);
/// A caller holding the device state this long (its passes take a few µs; tens in a debug
/// build or under strace) has lost its core: the engine then yields its own rather than
/// spin.
const HOLDER_STALLED: Duration = Duration::from_millis(1);
/// PAUSE hints between idle passes once idle longer than [`YIELD_AFTER`].
const IDLE_SPIN_HINTS: u32 = 16;
/// Deeper into an idle spin than `spin_us`, remote-capable devices' sockets are polled
/// this often (a datagram then waits at most this long, as it would for a wake-up).
const SOCKET_POLL_IDLE: Duration = Duration::from_micros(10);
/// A gap this long between two steps of an idle spin means the engine lost its core.
const PREEMPTED: Duration = Duration::from_micros(200);
/// After a preemption, the cores count as oversubscribed this long: the engine then parks
/// after [`CONTENDED_SPIN`] whatever its windows say (crate::spin).
const CONTENDED_HOLD: Duration = Duration::from_millis(100);
/// The idle spin while the cores are oversubscribed: a few passes, no window (measured on
/// the 2-core VM: a 50 µs window there doubled two-process round trips).
const CONTENDED_SPIN: Duration = Duration::from_micros(5);
/// After an application thread last called in, the engine parks after [`CONTENDED_SPIN`]
/// for this long: the caller does the work on its own core (`EngineShared::drive`).
const APP_HOLD: Duration = Duration::from_millis(2);
/// A parked engine with packets waiting for room in a full peer ring, or on whose rings
/// an application thread held back ACKs within [`RING_ACTIVE_NS`], looks again this often
/// (the consumer does not wake producers, and held ACKs must leave; a polling caller does
/// both sooner).
const RING_BACKLOG_NAP: Duration = Duration::from_nanos(RING_NAP_NS);
/// See [`RING_BACKLOG_NAP`].
const RING_ACTIVE_NS: u64 = 5_000_000;
/// [`RING_BACKLOG_NAP`] in ns.
const RING_NAP_NS: u64 = 100_000;
/// How often the engine re-reads its CPU affinity (one CPU: always contended).
const AFFINITY_CHECK: Duration = Duration::from_secs(1);
/// The wake eventfd's epoll token (devices' sockets use their ids, which start at 1).
const WAKE_TOKEN: u64 = 0;
/// Passes an application thread runs at most per [`EngineShared::drive`] before it leaves
/// the rest to the engine.
const DRIVE_PASSES: usize = 4;
/// Largest send WQE the engine reads: header + 32 SGEs.
const SEND_WQE_MAX: usize = SEND_WQE_HDR_BYTES + 32 * 16;

/// What the engine shares with the control planes and the library (through the wake fd).
#[derive(Debug)]
pub(crate) struct EngineShared {
    wake: OwnedFd,
    epoll: Epoll,
    parked: AtomicBool,
    kicked: AtomicBool,
    devices: Mutex<Vec<Arc<Device>>>,
    generation: AtomicU64,
    /// The engine's devices and their I/O state. The engine thread holds it except while
    /// it sleeps; an application thread may take it then ([`EngineShared::drive`]).
    core: Mutex<Core>,
    /// The engine's clock origin (transport [`Time`] counts from here, on every thread).
    epoch: Instant,
    /// While parked: the transport deadline the engine sleeps until (ns since `epoch`;
    /// `u64::MAX`: none). Work done for it that arms an earlier one must wake it.
    sleeps_until: AtomicU64,
    /// The engine noticed recently that it shares its core (it was preempted in an idle
    /// spin, or it is pinned to one CPU beside a polling application): pinned, a library
    /// thread that finds it awake then yields the CPU to it.
    contended: AtomicBool,
    /// The engine may run on one CPU only (its affinity mask), so it shares that CPU with
    /// any application thread of the process that polls.
    single_cpu: AtomicBool,
    /// Calls of `drive` counted while `single_cpu`: an application thread is polling or
    /// posting, on the engine's one CPU.
    app_calls: AtomicU64,
    /// A library thread called [`EngineShared::drive`] since the engine last looked: an
    /// application is polling or posting, on a core that is running anyway, so the engine
    /// leaves the work to it and parks after a short spin (set by the caller, cleared by
    /// the engine; written only when it changes, so a poller does not bounce the line).
    app_active: AtomicBool,
}

/// What only the thread doing the engine's work touches.
#[derive(Debug)]
struct Core {
    devs: Vec<EngineDev>,
    /// The `EngineShared::generation` `devs` reflects.
    gen: u64,
}

impl Core {
    /// Take in devices added since the last look; returns whether there were any.
    fn refresh(&mut self, shared: &EngineShared) -> bool {
        let g = shared.generation.load(SeqCst);
        if g == self.gen {
            return false;
        }
        self.gen = g;
        for d in lock(&shared.devices).iter() {
            if !self.devs.iter().any(|e| Arc::ptr_eq(&e.dev, d)) {
                self.devs.push(EngineDev {
                    dev: d.clone(),
                    io: DevIo::new(d.gso, d.tap.clone()),
                });
            }
        }
        true
    }

    /// One pass over every device; returns whether anything happened.
    fn pass(&mut self, epoch: Instant, poll_sockets: bool, by_app: bool) -> bool {
        let mut progress = false;
        for d in self.devs.iter_mut() {
            // A bug must not take every device of the process down with this thread: the
            // state stays usable (the lock ignores poisoning) and the pass is retried.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pass(&d.dev, &mut d.io, epoch, poll_sockets, by_app)
            }));
            match r {
                Ok(p) => progress |= p,
                Err(_) => d.dev.lock_engine().res.counters.engine_panics += 1,
            }
        }
        progress
    }

    /// Set (or clear) the `parked` word of every peer ring of the engine's devices; when
    /// setting, whether a ring holds packets (the re-check of the doorbell protocol).
    fn rings_parked(&self, parked: bool) -> bool {
        let mut pending = false;
        for d in &self.devs {
            let mut st = d.dev.lock_engine();
            for r in st.peer_rx.iter_mut() {
                r.set_parked(parked);
                pending |= parked && r.pending();
            }
        }
        pending
    }

    /// Whether packets wait for room in another process's full ring.
    fn ring_stalled(&self) -> bool {
        self.devs.iter().any(|d| !d.io.ring_backlog.is_empty())
    }

    /// After passes on a library thread: whether work is left that only another pass would
    /// do (or a TX backlog), and the earliest transport deadline — one device lock each.
    /// Packets waiting for a full peer ring are not such work: the parked engine looks at
    /// them every [`RING_BACKLOG_NAP`], and a caller that keeps polling moves them sooner.
    fn leftover(&self) -> (bool, Option<Time>) {
        let mut left = false;
        let mut next: Option<Time> = None;
        for d in &self.devs {
            let st = d.dev.lock_engine();
            left |= busy(&d.io, &st) || !d.io.txq.is_empty();
            if let Some(Reverse((t, _))) = st.timers.peek() {
                next = Some(next.map_or(*t, |n| n.min(*t)));
            }
            // ACKs held back here must leave even if this caller does not come back: by
            // the engine's next nap at the latest (a sleep without one is woken).
            for tx in st.peer_tx.values() {
                if let Some(h) = tx.held_at() {
                    let t = Time(h + crate::peer_ring::ACK_HOLD_NS + RING_NAP_NS);
                    next = Some(next.map_or(t, |n| n.min(t)));
                }
            }
        }
        (left, next)
    }
}

/// Whether a device has work only another pass would do: ready QPs, a socket epoll said
/// is readable, undelivered loopback packets.
fn busy(io: &DevIo, st: &DevState) -> bool {
    !st.ready.is_empty() || io.force_rx || !io.loopq.is_empty()
}

impl EngineShared {
    /// Create an engine and start its thread.
    pub(crate) fn start(name: &str) -> io::Result<Arc<EngineShared>> {
        let wake = sys::eventfd()?;
        let epoll = Epoll::new()?;
        epoll.add(wake.as_raw_fd(), WAKE_TOKEN, EPOLLIN)?;
        let shared = Arc::new(EngineShared {
            wake,
            epoll,
            parked: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            devices: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            core: Mutex::new(Core {
                devs: Vec::new(),
                gen: u64::MAX,
            }),
            epoch: Instant::now(),
            sleeps_until: AtomicU64::new(u64::MAX),
            contended: AtomicBool::new(false),
            single_cpu: AtomicBool::new(false),
            app_calls: AtomicU64::new(0),
            app_active: AtomicBool::new(false),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("uroce-engine-{name}"))
            .spawn(move || run(s))?;
        Ok(shared)
    }

    /// The eventfd that un-parks the engine (handed to libraries as `wake_fd`, dup'ed).
    /// The engine's clock now (what its transport and CM deadlines count in).
    pub(crate) fn now(&self) -> Time {
        now_of(self.epoch)
    }

    pub(crate) fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Tell the engine there is new work (a command changed state); costs a system call
    /// only if the engine is parked. Dekker with the engine's park: either it sees
    /// `kicked`, or we see `parked`.
    pub(crate) fn kick(&self) {
        self.kicked.store(true, SeqCst);
        if self.parked.load(SeqCst) {
            sys::eventfd_signal(self.wake.as_fd());
        }
    }

    /// [`abi::doorbell::Progress::drive`] for this engine: if it is parked and its core is
    /// free, do its work on the calling thread — passes until one finds nothing to do (at
    /// most [`DRIVE_PASSES`]) — then wake it only if work is left or a deadline was armed
    /// before the one it sleeps until.
    ///
    /// An engine pinned to one CPU that is awake (or whose work another thread is doing)
    /// while contended is waiting for this very CPU: the caller, about to spin on an empty
    /// CQ, yields it (`sched_yield`) rather than make it wait for the end of a scheduler
    /// slice. With several CPUs the engine may well be running elsewhere, and a yield per
    /// empty poll would be a system call per poll for nothing.
    pub(crate) fn drive(&self) -> bool {
        if self.single_cpu.load(Relaxed) {
            // Only then: on separate cores this line would bounce on every poll.
            self.app_calls.fetch_add(1, Relaxed);
        }
        if !self.app_active.load(Relaxed) {
            self.app_active.store(true, Relaxed);
        }
        // Parked, or awake beside an active caller (it only spins a few µs then, and
        // releases its state between spin steps): the work is done here, at once.
        let parked = self.parked.load(SeqCst);
        let core = if parked || self.contended.load(Relaxed) {
            self.core.try_lock().ok()
        } else {
            None
        };
        let Some(mut core) = core else {
            if self.single_cpu.load(Relaxed) && self.contended.load(Relaxed) {
                std::thread::yield_now();
            }
            return false;
        };
        core.refresh(self);
        // While this thread does the passes it is the peer rings' consumer: producers need
        // not wake the sleeping engine for what it will read anyway (docs/daemon.md §2.1).
        if parked {
            core.rings_parked(false);
        }
        let mut any = false;
        for _ in 0..DRIVE_PASSES {
            if !core.pass(self.epoch, true, true) {
                break;
            }
            any = true;
        }
        // The doorbell protocol on the way out: parked again, then one more look.
        if parked && core.rings_parked(true) {
            core.rings_parked(false);
            core.pass(self.epoch, true, true);
            core.rings_parked(true);
        }
        let (left, next) = core.leftover();
        let earlier = next.is_some_and(|t| t.0 < self.sleeps_until.load(SeqCst));
        if parked && self.parked.load(SeqCst) && (left || earlier) {
            sys::eventfd_signal(self.wake.as_fd());
        }
        let stalled = !any && core.ring_stalled();
        drop(core);
        if stalled {
            // Nothing moved because another process's ring is full: its consumer needs a
            // core more than this poller does.
            std::thread::yield_now();
        }
        true
    }

    pub(crate) fn add_device(&self, dev: Arc<Device>) -> io::Result<()> {
        // A daemon's client reads what the daemon forwards, never the shared UDP socket.
        let fd = match &dev.daemon {
            Some(l) => l.data.as_raw_fd(),
            None => dev.sock.as_raw_fd(),
        };
        self.epoll.add(fd, dev.id, EPOLLIN)?;
        lock(&self.devices).push(dev);
        self.generation.fetch_add(1, SeqCst);
        self.kick();
        Ok(())
    }
}

impl abi::doorbell::Progress for EngineShared {
    fn drive(&self) -> bool {
        EngineShared::drive(self)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A datagram waiting for the socket: `buf[..len]` (BTH .. ICRC) to `dst`, its ICRC computed
/// for IPv4 Identification `ident` (0, unless a GSO send will number it: `flush_tx`).
#[derive(Debug)]
struct Datagram {
    buf: Vec<u8>,
    len: usize,
    dst: SocketAddr,
    ident: u16,
}

impl Datagram {
    fn bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// Make the ICRC (IPv4) the one for Identification `ident`.
    fn set_ident(&mut self, ident: u16) {
        if ident == self.ident || !self.dst.is_ipv4() || self.len < ICRC_LEN {
            return;
        }
        let t = self.len - ICRC_LEN;
        if let Some(tail) = self.buf.get_mut(t..self.len) {
            let crc = icrc::v4_with_ident(icrc::read_icrc(tail), t, self.ident, ident);
            tail.copy_from_slice(&icrc::icrc_wire_bytes(crc));
            self.ident = ident;
        }
    }
}

/// Engine-private per-device I/O state (not behind the device lock).
#[derive(Debug)]
pub(crate) struct DevIo {
    pool: Vec<Vec<u8>>,
    /// Same-device packets: buffer, length, payload left in the source MRs.
    loopq: VecDeque<(Vec<u8>, usize, DeferList)>,
    txq: VecDeque<Datagram>,
    rx_bufs: Vec<Vec<u8>>,
    rx: MsgBatch,
    tx: MsgBatch,
    /// GSO sends (runs of datagrams in one system call) to IPv4 loopback peers, and how the
    /// kernel numbers their IDs (`Device::gso`; `None`: off, for good once the kernel
    /// refused one for want of segmentation offload). Elsewhere each datagram goes
    /// alone: how a NIC's segmentation offload numbers IPv4 IDs — which the ICRC covers, and
    /// rxe and RoCE NICs check — is not known here.
    gso: Option<sys::GsoIds>,
    force_rx: bool,
    /// Packets for peer rings that were full: (slot, buffer, length), in order.
    ring_backlog: VecDeque<(u32, Vec<u8>, usize)>,
    /// Scratch for packets read from peer rings.
    ring_rx: Vec<u8>,
    /// When the daemon's socket was last read.
    daemon_polled: Time,
    /// When an application thread last held back ACKs (`Time(0)`: never).
    ring_seen: Time,
    /// The device's capture point (`crate::tap`; `UROCE_CAPTURE` or an attached `uroce
    /// capture`): one relaxed load per packet when nobody captures ([`DevIo::tap`]).
    tap: Arc<crate::tap::Tap>,
}

impl DevIo {
    fn new(gso: Option<sys::GsoIds>, tap: Arc<crate::tap::Tap>) -> DevIo {
        DevIo {
            pool: Vec::new(),
            loopq: VecDeque::new(),
            txq: VecDeque::new(),
            rx_bufs: (0..BATCH).map(|_| vec![0u8; RX_BUF]).collect(),
            rx: MsgBatch::new(BATCH),
            tx: MsgBatch::new(TX_BATCH),
            gso,
            force_rx: true,
            ring_backlog: VecDeque::new(),
            ring_rx: Vec::new(),
            daemon_polled: Time(0),
            ring_seen: Time(0),
            tap,
        }
    }

    /// The capture point if anything captures this device.
    #[inline]
    fn tap(&self) -> Option<&crate::tap::Tap> {
        self.tap.active().then_some(&*self.tap)
    }

    fn take_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_else(|| vec![0u8; PKT_BUF])
    }

    fn put_buf(&mut self, b: Vec<u8>) {
        self.pool.push(b);
    }

    /// Whether `more` packets would leave a queue toward the wire at its bound.
    fn backlogged_after(&self, more: usize) -> bool {
        self.txq.len() + more >= TXQ_MAX
            || self.ring_backlog.len() + more >= TXQ_MAX
            || self.loopq.len() + more >= LOOPQ_MAX
    }

    fn backlogged(&self) -> bool {
        self.backlogged_after(0)
    }
}

#[derive(Debug)]
struct EngineDev {
    dev: Arc<Device>,
    io: DevIo,
}

fn now_of(epoch: Instant) -> Time {
    time_at(epoch, Instant::now())
}

fn time_at(epoch: Instant, t: Instant) -> Time {
    Time(u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX))
}

fn us(v: u32) -> Duration {
    Duration::from_micros(u64::from(v))
}

/// The idle-policy bounds over the engine's devices (the largest of each).
fn spin_bounds(devs: &[EngineDev]) -> SpinBounds {
    let dflt = DeviceConfig::new("", IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
    let max = |f: fn(&DeviceConfig) -> u32| {
        us(devs.iter().map(|d| f(&d.dev.cfg)).max().unwrap_or(f(&dflt)))
    };
    SpinBounds {
        spin: max(|c| c.spin_us),
        max_spin: max(|c| c.max_spin_us),
        busy_spin: max(|c| c.busy_spin_us),
        max_busy_spin: max(|c| c.max_busy_spin_us),
    }
}

/// Whether an application of some device is mid-work (`crate::spin`).
fn app_mid_work(devs: &[EngineDev]) -> bool {
    devs.iter().any(|d| d.dev.lock_engine().res.app_mid_work())
}

fn run(shared: Arc<EngineShared>) {
    let epoch = shared.epoch;
    let mut last_progress = Instant::now();
    let mut last_socket_poll = Instant::now();
    let mut events = Vec::new();
    let mut policy = SpinPolicy::new(spin_bounds(&[]));
    let mut yield_idle = false;
    let mut contention_aware = true;
    // When the last idle spin step ended (a gap from there to the next pass means the
    // engine lost its core), and until when the cores count as oversubscribed.
    let mut spun_at: Option<Instant> = None;
    let mut contended_until = Instant::now();
    let mut seen_calls = 0u64;
    let mut affinity_checked = Instant::now() - AFFINITY_CHECK;
    // Since when a caller has held the device state (`EngineShared::drive`).
    let mut blocked_since: Option<Instant> = None;
    loop {
        // Held for this iteration (released between passes, and while asleep in `park`).
        // A caller doing the work meanwhile (`EngineShared::drive`) is not waited for.
        let mut core = match shared.core.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                // A caller is doing the passes (a few µs). Wait for it without a system
                // call; only if it holds on longer — it lost its core, maybe to this
                // thread — yield the core to it. A yield at every collision would be a
                // system call per collision, that is, per few operations.
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= HOLDER_STALLED {
                    std::thread::yield_now();
                } else {
                    for _ in 0..IDLE_SPIN_HINTS {
                        std::hint::spin_loop();
                    }
                }
                spun_at = None;
                continue;
            }
        };
        blocked_since = None;
        if core.refresh(&shared) {
            policy.reconfigure(spin_bounds(&core.devs));
            yield_idle = core.devs.iter().any(|d| d.dev.cfg.yield_when_idle);
            contention_aware = core.devs.iter().all(|d| d.dev.cfg.park_when_contended);
        }
        shared.kicked.store(false, SeqCst);
        let t = Instant::now();
        if let Some(s) = spun_at.take() {
            if contention_aware && t.saturating_duration_since(s) >= PREEMPTED {
                // Descheduled in the middle of an idle spin: more runnable threads than
                // cores. Spinning now takes the core from the threads that would make
                // progress (crate::spin, "Oversubscribed cores").
                contended_until = t + CONTENDED_HOLD;
                policy.preempted();
            }
        }
        if contention_aware && t >= affinity_checked + AFFINITY_CHECK {
            // Pinned to one CPU (taskset, a container's cpuset)?
            affinity_checked = t;
            let one = sys::cpus_allowed() == Some(1);
            if shared.single_cpu.load(Relaxed) != one {
                shared.single_cpu.store(one, Relaxed);
            }
        }
        let calls = shared.app_calls.load(Relaxed);
        if calls != seen_calls && contention_aware {
            // Pinned to one CPU with an application thread that polls or posts: they share
            // this CPU for as long as that goes on, so the engine parks right after its
            // work and leaves the rest to the poller, rather than spin until the scheduler
            // preempts it (a slice of milliseconds the application waits).
            contended_until = t + CONTENDED_HOLD;
        }
        seen_calls = calls;
        if shared.app_active.load(Relaxed) {
            // An application thread polls or posts: it does the work while this thread
            // parks (EngineShared::drive). Spinning beside it would only take a core from
            // it, or from the other process of a pair on the same device.
            shared.app_active.store(false, Relaxed);
            if contention_aware {
                contended_until = contended_until.max(t + APP_HOLD);
            }
        }
        let contended = t < contended_until;
        if shared.contended.load(Relaxed) != contended {
            shared.contended.store(contended, Relaxed);
        }
        let idle = t.saturating_duration_since(last_progress);
        // Sockets are polled on every pass while work is recent; deeper into an idle spin
        // only every SOCKET_POLL_IDLE, so a long spin window is not a stream of recvmmsg.
        let poll_sockets = idle < policy.base()
            || t.saturating_duration_since(last_socket_poll) >= SOCKET_POLL_IDLE;
        if poll_sockets {
            last_socket_poll = t;
        }
        if core.pass(epoch, poll_sockets, false) {
            last_progress = t;
            continue;
        }
        // Inside the adaptive window; beyond it, only while an application is mid-work
        // (crate::spin).
        let mid_work = idle >= policy.window() && app_mid_work(&core.devs);
        let limit = if contended {
            CONTENDED_SPIN
        } else {
            policy.limit(mid_work)
        };
        if idle < limit {
            drop(core);
            if yield_idle && idle > YIELD_AFTER {
                // The application may be waiting for this very core (more runnable threads
                // than cores): let it run rather than burn the rest of the spin window.
                std::thread::yield_now();
            } else if idle > YIELD_AFTER {
                // Idle for a while: poll a little less eagerly (PAUSE hints, no system call).
                for _ in 0..IDLE_SPIN_HINTS {
                    std::hint::spin_loop();
                }
            } else {
                std::hint::spin_loop();
            }
            spun_at = Some(Instant::now());
            continue;
        }
        if let Some((slept, by_app)) = park(&shared, core, &mut events) {
            // A quick doorbell after a park while the cores are oversubscribed says the
            // application was descheduled, not that a longer spin would have paid off.
            policy.parked(slept, by_app && !contended, mid_work);
            last_progress = Instant::now();
        }
    }
}

/// Try to sleep. Returns `None` if the engine did not block, else how long it slept and
/// whether the application ended the sleep: its doorbell or a control-plane command came
/// through the wake fd. A datagram or the timeout says nothing about the application, and
/// spinning would not have served a datagram sooner than the wake-up did (`crate::spin`).
/// A deadline closer than this is met by spinning rather than sleeping.
const SPIN_DEADLINE_NS: u64 = 60_000;
/// A sleep until a deadline ends this much before it (timer slack, wake-up latency).
const WAKE_EARLY_NS: u64 = 30_000;

fn park(
    shared: &EngineShared,
    mut core: std::sync::MutexGuard<'_, Core>,
    events: &mut Vec<(u64, u32)>,
) -> Option<(Duration, bool)> {
    let unpark_all = |devs: &mut [EngineDev]| {
        for d in devs.iter() {
            let st = d.dev.lock_engine();
            for cx in st.res.ctxs.values() {
                let _ = cx.doorbells.finish_park();
            }
            for r in st.peer_rx.iter() {
                r.set_parked(false);
            }
        }
    };
    // 1. Announce `parked` on every doorbell page and peer ring, re-checking them.
    let mut may_sleep = true;
    let mut backlog = false;
    let mut next: Option<Time> = None;
    for d in core.devs.iter() {
        let mut st = d.dev.lock_engine();
        for cx in st.res.ctxs.values() {
            if !cx.doorbells.prepare_park().unwrap_or(false) {
                may_sleep = false;
            }
        }
        for r in st.peer_rx.iter_mut() {
            r.set_parked(true);
            if r.pending() {
                may_sleep = false;
            }
        }
        if let Some(Reverse((t, _))) = st.timers.peek() {
            next = Some(next.map_or(*t, |n| n.min(*t)));
        }
        if busy(&d.io, &st) {
            may_sleep = false;
        }
        // A full peer ring empties at its consumer's pace: nap, don't spin. And while
        // application threads hold back ACKs for a moment (`flush_rings`), one may stop
        // calling in: nap so that they leave regardless.
        backlog |= !d.io.ring_backlog.is_empty()
            || (d.io.ring_seen.0 != 0
                && now_of(shared.epoch).nanos_since(d.io.ring_seen) < RING_ACTIVE_NS);
        if !may_sleep {
            break;
        }
    }
    // 2. The same for control-plane kicks.
    shared.parked.store(true, SeqCst);
    if !may_sleep || shared.kicked.load(SeqCst) {
        shared.parked.store(false, SeqCst);
        unpark_all(&mut core.devs);
        return None;
    }
    // 3. Sleep until a wake-up, a datagram or the next deadline. Deadlines under
    //    `SPIN_DEADLINE_NS` are met by spinning; later ones are slept for with nanosecond
    //    resolution (`Epoll::wait_for`), waking `WAKE_EARLY_NS` early to spin the rest —
    //    so a paced QP (docs/wire.md §11.3) whose next packet is due in a few hundred µs
    //    does not keep a core busy. While asleep, the core is free for an application
    //    thread to do the work (`EngineShared::drive`); it wakes the engine if it arms an
    //    earlier deadline.
    let timeout = match next {
        None => None,
        Some(t) => {
            let dt = t.nanos_since(now_of(shared.epoch));
            if dt < SPIN_DEADLINE_NS {
                shared.parked.store(false, SeqCst);
                unpark_all(&mut core.devs);
                return None;
            }
            Some(Duration::from_nanos(dt - WAKE_EARLY_NS))
        }
    };
    let timeout = if backlog {
        Some(timeout.map_or(RING_BACKLOG_NAP, |t| t.min(RING_BACKLOG_NAP)))
    } else {
        timeout
    };
    // What a caller compares its deadlines with (`EngineShared::drive`): the transport's,
    // or the nap's if sooner.
    let nap_end = backlog.then(|| now_of(shared.epoch).0.saturating_add(RING_NAP_NS));
    let until = match (next.map(|t| t.0), nap_end) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(u64::MAX),
    };
    shared.sleeps_until.store(until, SeqCst);
    drop(core);
    let t0 = Instant::now();
    let _ = shared.epoll.wait_for(events, timeout);
    let slept = t0.elapsed();
    let mut core = lock(&shared.core);
    shared.parked.store(false, SeqCst);
    sys::eventfd_drain(shared.wake.as_fd());
    for (token, _) in events.iter() {
        if let Some(d) = core.devs.iter_mut().find(|d| d.dev.id == *token) {
            d.io.force_rx = true;
        }
    }
    unpark_all(&mut core.devs);
    Some((slept, events.iter().any(|&(token, _)| token == WAKE_TOKEN)))
}

/// One pass over one device; returns whether anything happened.
fn pass(dev: &Device, io: &mut DevIo, epoch: Instant, poll_socket: bool, by_app: bool) -> bool {
    let mut st = dev.lock_engine();
    let st = &mut *st;

    // The clock is read after the lock (which waits while the control plane holds it, e.g.
    // for a REG_MR) and again for each QP served: a retransmission deadline the transport
    // arms when it builds a packet must count from when that packet leaves, or a pass that
    // was held up fires it at once (a spurious retransmission, seen against rxe in
    // tests/interop when the engine thread lost its core for 100 ms).
    let now = now_of(epoch);
    let mut progress = drain_doorbells(st);
    // Before a retransmission deadline fires, read what the socket holds even when this
    // pass would not poll it: after a stall the awaited ACK is often already there.
    let timer_due = st.timers.peek().is_some_and(|Reverse((t, _))| *t <= now);
    // A daemon's client also looks every few ms whatever its QPs do: the daemon hands
    // over peer rings and says it is gone on that socket (docs/daemon.md §7).
    let daemon_due = dev.daemon.is_some() && now.nanos_since(io.daemon_polled) >= DAEMON_POLL_NS;
    if io.force_rx
        || daemon_due
        || ((poll_socket || timer_due) && (st.remote_qps > 0 || st.gsi_live()))
    {
        io.force_rx = false;
        if dev.daemon.is_some() {
            io.daemon_polled = now;
        }
        progress |= receive(dev, st, io, now);
    }
    progress |= receive_rings(st, io, now);
    progress |= fire_timers(st, now);
    progress |= send_gsi(st, io);
    check_err_rqs(st);
    for _ in 0..ROUNDS {
        let mut did = false;
        for _ in 0..LOOP_BUDGET {
            let Some((buf, len, deferred)) = io.loopq.pop_front() else {
                break;
            };
            if let Some(bytes) = buf.get(..len) {
                deliver_loopback(st, bytes, deferred, now);
            }
            io.put_buf(buf);
            did = true;
        }
        let n = st.ready.len();
        for _ in 0..n {
            // With the wire full, the rest wait for the next round (the loopback queue
            // drains at its head): visiting them now would only find it full.
            if io.backlogged() {
                did = true;
                break;
            }
            let Some(idx) = st.ready.pop_front() else {
                break;
            };
            match st.qps.get_mut(idx) {
                Some(q) => q.in_ready = false,
                None => continue,
            }
            did |= service_qp(st, io, idx, now_of(epoch));
        }
        if !did {
            break;
        }
        progress = true;
    }
    // MADs the CM queued while QPs were served (answers to loopback MADs).
    progress |= send_gsi(st, io);
    progress |= flush_tx(dev, st, io, now_of(epoch), by_app);
    if by_app && progress {
        st.res.counters.app_passes += 1;
    }
    progress
}

fn drain_doorbells(st: &mut DevState) -> bool {
    let DevState {
        res, qps, ready, ..
    } = st;
    let mut rung = 0u32;
    let fast = crate::trace::fast_on();
    for cx in res.ctxs.values() {
        let r = cx.doorbells.drain(|slot| {
            if let Some(Some(q)) = cx.db_slots.get(slot as usize) {
                if fast {
                    let qpn = qps.get(*q).map_or(0, |o| o.qp.qpn().value());
                    crate::trace::fast(&res.dev_name, || {
                        format!("DOORBELL slot={slot} qpn={qpn:#x}")
                    });
                }
                make_ready(qps, ready, *q);
            }
        });
        rung += r.unwrap_or(0);
    }
    rung > 0
}

/// Receives posted to a QP in ERR flush; look for new ones (no doorbell announces them).
fn check_err_rqs(st: &mut DevState) {
    if st.err_rqs.is_empty() {
        return;
    }
    let mut i = 0;
    while let Some(&idx) = st.err_rqs.get(i) {
        let keep = match st.qps.get_mut(idx) {
            Some(q) if q.in_err_list && q.qp.state() == QpState::Err => {
                let pending =
                    q.rq.as_mut()
                        .is_some_and(|rq| rq.refresh().unwrap_or(0) > 0);
                if pending {
                    st.make_ready(idx);
                }
                true
            }
            Some(q) => {
                q.in_err_list = false;
                false
            }
            None => false,
        };
        if keep {
            i += 1;
        } else {
            st.err_rqs.swap_remove(i);
        }
    }
}

fn fire_timers(st: &mut DevState, now: Time) -> bool {
    let mut fired = false;
    while let Some(Reverse((t, idx))) = st.timers.peek().copied() {
        if t > now {
            break;
        }
        st.timers.pop();
        if idx == crate::gsi::GSI_TIMER {
            fired |= st.gsi.fire(t, now);
            st.arm_gsi();
            continue;
        }
        let Some(q) = st.qps.get_mut(idx) else {
            continue;
        };
        if q.timer != Some(t) {
            continue; // stale: the QP re-armed earlier, or is another QP now
        }
        q.timer = None;
        match q.qp.poll_timeout() {
            Some(d) if d <= now => {
                q.qp.handle_timeout(now);
                st.make_ready(idx);
                fired = true;
            }
            // The deadline moved later since this entry was queued: wait for it.
            Some(d) => {
                q.timer = Some(d);
                st.timers.push(Reverse((d, idx)));
            }
            None => {}
        }
    }
    fired
}

// ---------------------------------------------------------------------------------------
// Send side

/// A send WQE from the SQ ring as a transport work request, or the completion status it
/// fails with (LOC_QP_OP_ERR for anything malformed, rxe `req_error`).
fn wqe_to_wr(
    hdr: &SendWqe,
    payload: &SendPayload<'_>,
    q: &QpObj,
    res: &Resources,
) -> Result<SendWr, WcStatus> {
    let op = WrOpcode::from_u32(hdr.opcode).ok_or(WcStatus::LocQpOpErr)?;
    let mut wr = SendWr::new(hdr.wr_id, op);
    wr.flags = SendFlags(hdr.send_flags & 0xf);
    wr.local = match payload {
        // Inline bytes stay inside the WR (no allocation); the parser bounds them by the
        // QP's max_inline, itself at most abi's MAX_INLINE_DATA = the transport's.
        SendPayload::Inline(b) => {
            LocalData::InlineData(InlineData::from_slice(b).ok_or(WcStatus::LocQpOpErr)?)
        }
        SendPayload::Sges(_) => {
            let mut l = SgeList::new();
            for s in payload.sges() {
                l.push(transport::Sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: transport::wire::Lkey(s.lkey),
                });
            }
            LocalData::Sges(l)
        }
    };
    wr.imm_data = hdr.imm_data();
    wr.invalidate_rkey = Rkey(hdr.ex);
    wr.remote_addr = hdr.remote_addr;
    wr.rkey = Rkey(hdr.rkey);
    wr.compare_add = hdr.compare_add;
    wr.swap = hdr.swap;
    if q.xrc == Some(QpXrc::Initiator) {
        // An XRC send WQE names the responder's XRC SRQ in `remote_qpn` (24 bits).
        if hdr.remote_qpn > 0xff_ffff {
            return Err(WcStatus::LocQpOpErr);
        }
        wr.xrc_srqn = hdr.remote_qpn;
    }
    if q.ty == QpType::Ud {
        // The AH must exist in the QP's context and PD (IBA: same PD).
        match res.ahs.get(hdr.ah) {
            Some(a) if a.ctx == q.ctx && a.pd == q.pd => {}
            _ => return Err(WcStatus::LocQpOpErr),
        }
        if hdr.remote_qpn > 0xff_ffff {
            return Err(WcStatus::LocQpOpErr);
        }
        wr.ud = Some(UdDest {
            ah: hdr.ah,
            remote_qpn: Qpn::new(hdr.remote_qpn),
            remote_qkey: Qkey(hdr.remote_qkey),
        });
    }
    Ok(wr)
}

/// Move WQEs from the SQ ring into the transport while it accepts them. WQEs posted while
/// the QP is below RTS stay in the ring until it gets there (rxe's requester waits too).
fn pull_sq(q: &mut QpObj, res: &mut Resources) -> bool {
    if matches!(q.qp.state(), QpState::Reset | QpState::Init | QpState::Rtr) {
        return false;
    }
    let limits = WqeLimits {
        max_sge: q.caps.max_send_sge,
        max_inline: q.caps.max_inline,
    };
    let read_len = (q.sq_layout.elem_size() as usize).min(SEND_WQE_MAX);
    let mut buf = [0u8; SEND_WQE_MAX];
    let mut progress = false;
    loop {
        let avail = match q.sq.available() {
            Ok(n) => n,
            Err(_) => {
                res.counters.ring_corrupt += 1;
                return progress;
            }
        };
        if q.sq_taken >= avail {
            return progress;
        }
        let Some(slot) = buf.get_mut(..read_len) else {
            return progress;
        };
        if q.sq.read(q.sq_taken, 0, slot).is_err() {
            return progress;
        }
        let parsed = SendWqe::parse(slot, limits);
        let (wr_id, opcode) = match &parsed {
            Ok((h, _)) => (h.wr_id, h.opcode),
            Err(_) => (
                slot.get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map_or(0, u64::from_ne_bytes),
                u32::MAX,
            ),
        };
        let wr = match &parsed {
            Ok((h, p)) => wqe_to_wr(h, p, q, res),
            Err(_) => Err(WcStatus::LocQpOpErr),
        };
        if crate::trace::fast_on() {
            let qpn = q.qp.qpn().value();
            let len = wr.as_ref().map_or(0, |w| w.local.len());
            let err = wr.as_ref().err().copied();
            crate::trace::fast(&res.dev_name, || match err {
                None => format!("WQE qpn={qpn:#x} wr_id={wr_id} opcode={opcode} length={len}"),
                Some(st) => format!(
                    "WQE qpn={qpn:#x} wr_id={wr_id} opcode={opcode} = bad WQE: {}",
                    st.as_str()
                ),
            });
        }
        progress = true;
        let signaled = match &wr {
            Ok(w) => q.sq_sig_all || w.flags.contains(SendFlags::SIGNALED),
            Err(_) => true, // a bad WQE always completes
        };
        match wr.map(|wr| q.qp.post_send(wr)) {
            Ok(Ok(())) => {
                q.sq_taken += 1;
                res.set_owes_signal(q, !signaled);
            }
            Ok(Err(PostError::QueueFull)) | Ok(Err(PostError::InvalidState)) => return true,
            Ok(Err(PostError::BadLength)) => fail_wqe(q, res, wr_id, opcode, WcStatus::LocLenErr),
            Ok(Err(_)) => fail_wqe(q, res, wr_id, opcode, WcStatus::LocQpOpErr),
            Err(status) => fail_wqe(q, res, wr_id, opcode, status),
        }
    }
}

/// A send WQE the transport cannot take: the transport moves the QP to ERR (flushing
/// earlier WQEs in order, raising IBV_EVENT_QP_FATAL) and completes this one with `status`
/// in the same ordered stream (`transport::Qp::fail_send`; always, even if unsignaled: IBA
/// 10.7.3.1). The slot is taken and done, so `drain_completions` frees it (with the flushed
/// ones before it) before any of their CQEs becomes visible.
fn fail_wqe(q: &mut QpObj, res: &mut Resources, wr_id: u64, opcode: u32, status: WcStatus) {
    res.counters.bad_wqe += 1;
    res.set_owes_signal(q, false);
    q.sq_taken += 1;
    q.qp.fail_send(wr_id, WrOpcode::from_u32(opcode), status);
    drain_completions(q, res);
}

fn err_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Err,
        ..QpAttr::default()
    }
}

/// Give the SQ ring slots of the send WQEs the transport has retired back to the library.
/// The transport retires send WQEs in order, so the oldest taken entries no longer in its
/// queue are done. This must happen before their completions become visible: an
/// application that has polled a completion may post into the slot at once (IBA 10.8, as
/// rdma-core's providers free SQ slots by the time `poll_cq` returns), and the Release
/// store of the CQ producer index then orders this consumer-index store before it.
fn release_retired(q: &mut QpObj) -> bool {
    let inflight = u32::try_from(q.qp.send_queue_len()).unwrap_or(u32::MAX);
    let done = q.sq_taken.saturating_sub(inflight);
    if done > 0 && q.sq.release(done).is_ok() {
        q.sq_taken -= done;
        return true;
    }
    false
}

/// Free retired SQ slots, then write the transport's completions into the CQ rings and its
/// events into the async fd. A CQ overflow moves the QP to ERR (its flushes then overflow
/// too; nothing is overwritten). Every path that publishes a QP's completions goes through
/// here, so no CQE is visible before its slot is free.
fn drain_completions(q: &mut QpObj, res: &mut Resources) -> bool {
    let mut any = false;
    loop {
        any |= release_retired(q);
        let mut overflow = false;
        while let Some(c) = q.qp.poll_completion() {
            any = true;
            let cq = if c.is_recv() { q.recv_cq } else { q.send_cq };
            // A solicited-only arming fires for a receive whose last packet had the SE
            // bit, and for any error (IBA 11.4.2.2).
            let mut wc = to_wc(&c);
            // Only UD receives carry the GRH area (and the flag).
            if c.wc_flags.contains(transport::WcFlags::GRH) {
                wc.sl = res.ud_recv_sl;
            }
            if res.push_cqe(cq, &wc, c.fires_solicited()).is_err() {
                overflow = true;
            }
        }
        while let Some(ev) = q.qp.poll_event() {
            any = true;
            let ty = match ev {
                QpEvent::Fatal => event::QP_FATAL,
                QpEvent::SqDrained => event::SQ_DRAINED,
                // Every QP uses the transport's SRQ path; only real SRQ users get this.
                QpEvent::LastWqeReached if q.srq.is_some() => event::QP_LAST_WQE_REACHED,
                QpEvent::LastWqeReached => continue,
            };
            q.events_reported = q.events_reported.wrapping_add(1);
            res.post_async(q.ctx, q.user_handle, ty);
        }
        if overflow && !matches!(q.qp.state(), QpState::Err | QpState::Reset) {
            let _ = q.qp.modify(&err_attr(), AttrMask::STATE);
            q.events_reported = q.events_reported.wrapping_add(1);
            res.post_async(q.ctx, q.user_handle, event::QP_FATAL);
            continue;
        }
        return any;
    }
}

fn service_qp(st: &mut DevState, io: &mut DevIo, idx: u32, now: Time) -> bool {
    let dev_ip = st.cfg.addr;
    let own = st.own_qpns;
    let hermetic = st.hermetic;
    let DevState {
        res,
        qps,
        ready,
        timers,
        err_rqs,
        peer_tx,
        ..
    } = st;
    let Some(q) = qps.get_mut(idx) else {
        return false;
    };
    let mut progress = pull_sq(q, res);
    let mut more = false;
    let mut sent = 0;
    while sent < TX_BUDGET {
        if io.backlogged() {
            more = true;
            break;
        }
        if sent + 1 == TX_BUDGET || io.backlogged_after(1) {
            // This QP's turn ends with this packet: have it acknowledged now.
            q.qp.request_ack_next();
        }
        let mut buf = io.take_buf();
        // Payload read from registered memory is recorded, not copied: a packet that
        // stays on the device is delivered straight from the source MR (one copy, like
        // DMA); one that leaves gets its bytes in `route`.
        let mut mem = DmaView {
            mrs: &res.mrs,
            pd: q.pd,
            qpn: q.qp.qpn().value(),
            payload: Payload::defer_into(&buf),
        };
        let Some(t) = q.qp.poll_transmit(now, &mut mem, &mut buf) else {
            io.put_buf(buf);
            break;
        };
        let deferred = mem.payload.deferred();
        sent += 1;
        route(dev_ip, own, hermetic, q, res, peer_tx, io, buf, t, deferred);
    }
    if sent == TX_BUDGET {
        more = true;
    }
    progress |= sent > 0;
    progress |= drain_completions(q, res);
    if q.qp.state() == QpState::Err {
        // Its WQEs all complete (flushed): nothing more is owed.
        res.set_owes_signal(q, false);
        let (qpn, rcq) = (q.qp.qpn().value(), q.recv_cq);
        if let Some(rq) = q.rq.as_mut() {
            progress |= flush_rq_ring(res, rq, qpn, rcq) > 0;
            if !q.in_err_list {
                q.in_err_list = true;
                err_rqs.push(idx);
            }
        }
    }
    // At most one heap entry per QP: only a deadline earlier than the armed one is queued;
    // a later one is picked up when the armed entry fires (see `fire_timers`), so steady
    // traffic that keeps pushing the ACK timer out does not grow the heap.
    if let Some(t) = q.qp.poll_timeout() {
        if q.timer.is_none_or(|armed| t < armed) {
            q.timer = Some(t);
            timers.push(Reverse((t, idx)));
        }
    }
    if more {
        make_ready(qps, ready, idx);
    }
    progress
}

/// Send a packet the transport built: to the internal loopback when the destination is
/// this device (its payload still in the source MRs, `deferred`), else as a UDP datagram
/// with its payload and ICRC (never from a hermetic device).
#[allow(clippy::too_many_arguments)]
fn route(
    dev_ip: IpAddr,
    own: Option<(u32, u32)>,
    hermetic: bool,
    q: &QpObj,
    res: &mut Resources,
    peer_tx: &mut std::collections::HashMap<u32, crate::peer_ring::TxRing>,
    io: &mut DevIo,
    mut buf: Vec<u8>,
    t: Transmit,
    deferred: DeferList,
) {
    let dest = match t.ah {
        Some(ah) => res.ahs.get(ah).filter(|a| a.ctx == q.ctx).map(|a| a.dest),
        None => q.av,
    };
    let Some(dest) = dest.filter(|d| !hermetic || d.ip == dev_ip) else {
        res.counters.xmit_no_route += 1;
        io.put_buf(buf);
        return;
    };
    let c = &mut res.counters;
    c.port_xmit_packets += 1;
    c.port_xmit_data += ((t.len + ICRC_LEN) / 4) as u64;
    // On a daemon's device, a QP of another process at this address is reached through
    // the daemon (the datagram goes to our own address and the daemon forwards it).
    let here = own.is_none_or(|w| crate::state::in_window(w, bth_dest_qpn(&buf)));
    if dest.ip == dev_ip && here {
        c.loopback_pkts += 1;
        if let Some(tap) = io.tap() {
            if let Some(pkt) = buf.get(..t.len) {
                tap.looped(pkt, |p| deferred.materialize(&res.mrs, p));
            }
        }
        io.loopq.push_back((buf, t.len, deferred));
        return;
    }
    if !deferred.materialize(&res.mrs, &mut buf) {
        res.counters.xmit_discards += 1;
        io.put_buf(buf);
        return;
    }
    // Another process of this daemon device with a packet ring: straight into its memory.
    let slot = bth_dest_qpn(&buf) >> crate::daemon::WINDOW_BITS;
    if dest.ip == dev_ip {
        if let Some(tx) = peer_tx.get_mut(&slot) {
            if let Some(tap) = io.tap() {
                if let Some(pkt) = buf.get(..t.len) {
                    tap.looped(pkt, |_| true);
                }
            }
            // (Usually one peer: the newest entry answers without a scan.)
            let queued = !io.ring_backlog.is_empty()
                && (io.ring_backlog.back().is_some_and(|(s, _, _)| *s == slot)
                    || io.ring_backlog.iter().any(|(s, _, _)| *s == slot));
            if !queued && buf.get(..t.len).is_some_and(|p| tx.stage(p)) {
                io.put_buf(buf);
            } else {
                io.ring_backlog.push_back((slot, buf, t.len));
            }
            return;
        }
    }
    send_udp(dev_ip, &dest, &mut res.counters, io, buf, t.len);
}

/// The destination QP of a packet that starts with its BTH (IBTA Vol 1 §9.2: bytes 5–7).
pub(crate) fn bth_dest_qpn(pkt: &[u8]) -> u32 {
    match pkt.get(5..8) {
        Some(b) => u32::from_be_bytes([0, b[0], b[1], b[2]]),
        None => 0,
    }
}

/// Queue `buf[..len]` (a transport packet, room for the ICRC after it) as a UDP datagram to
/// `dest`, with the ICRC its IP and UDP headers give.
fn send_udp(
    dev_ip: IpAddr,
    dest: &Dest,
    c: &mut crate::counters::EngineCounters,
    io: &mut DevIo,
    mut buf: Vec<u8>,
    len: usize,
) {
    match seal_datagram(dev_ip, dest, &mut buf, len) {
        Ok(()) => io.txq.push_back(Datagram {
            buf,
            len: len + ICRC_LEN,
            dst: SocketAddr::new(dest.ip, ROCE_V2_PORT),
            ident: 0,
        }),
        Err(NoRoute) => {
            c.xmit_no_route += 1;
            io.put_buf(buf);
        }
        Err(Discard) => {
            c.xmit_discards += 1;
            io.put_buf(buf);
        }
    }
}

/// Why a packet could not be sealed into a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SealError {
    /// Source and destination address families differ.
    NoRoute,
    /// The packet or the room for its ICRC is missing.
    Discard,
}
use SealError::{Discard, NoRoute};

/// Write the ICRC after `buf[..len]` (a transport packet from `dev_ip` to `dest` over UDP
/// port 4791 as a socket sends it: IPv4 ID 0 and DF), making it a RoCEv2 UDP payload of
/// `len + ICRC_LEN` bytes.
pub(crate) fn seal_datagram(
    dev_ip: IpAddr,
    dest: &Dest,
    buf: &mut [u8],
    len: usize,
) -> Result<(), SealError> {
    let ip = match (dev_ip, dest.ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            IpRepr::v4_socket(s, d, dest.traffic_class, dest.hop_limit)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6 {
            src: s,
            dst: d,
            traffic_class: dest.traffic_class,
            flow_label: dest.flow_label,
            hop_limit: dest.hop_limit,
        },
        _ => return Err(NoRoute),
    };
    let udp = UdpRepr::roce(ROCE_V2_PORT);
    let crc = match buf.get(..len).map(|p| icrc::compute_for(&ip, &udp, p)) {
        Some(Ok(crc)) => crc,
        _ => return Err(Discard),
    };
    let tail = buf.get_mut(len..len + ICRC_LEN).ok_or(Discard)?;
    tail.copy_from_slice(&icrc::icrc_wire_bytes(crc));
    Ok(())
}

/// Queue the CM's MADs (QP 1): to the internal loopback for this device's own address,
/// as UDP datagrams otherwise (never from a hermetic device). Returns whether any went.
fn send_gsi(st: &mut DevState, io: &mut DevIo) -> bool {
    // Every pass comes here: with nothing queued it costs one check. (The CM's deadline is
    // queued where its state changes: received MADs, fired timers, consumer calls.)
    if !st.gsi.cm.has_transmits() {
        return false;
    }
    let dev_ip = st.cfg.addr;
    let mut any = false;
    loop {
        let mut buf = io.take_buf();
        let Some((to, len)) = st.gsi.next_packet(&mut buf) else {
            io.put_buf(buf);
            break;
        };
        any = true;
        let c = &mut st.res.counters;
        if st.hermetic && to != dev_ip {
            c.xmit_no_route += 1;
            io.put_buf(buf);
            continue;
        }
        c.port_xmit_packets += 1;
        c.port_xmit_data += ((len + ICRC_LEN) / 4) as u64;
        // On a daemon's device the daemon routes MADs (another process may own the ID).
        if to == dev_ip && st.own_qpns.is_none() {
            c.loopback_pkts += 1;
            if let Some(tap) = io.tap() {
                if let Some(pkt) = buf.get(..len) {
                    tap.looped(pkt, |_| true);
                }
            }
            io.loopq.push_back((buf, len, DeferList::default()));
            continue;
        }
        let dest = Dest::roce(to);
        send_udp(dev_ip, &dest, c, io, buf, len);
    }
    any
}

/// Move what waits for full peer rings into them (in order), then publish every ring that
/// got packets (one Release store each, a wake-up only for a parked consumer). On an
/// application thread (`hold`), a batch of nothing but ACKs may wait a little for the
/// answer the application is about to post (`peer_ring::TxRing::publish_or_hold`).
fn flush_rings(st: &mut DevState, io: &mut DevIo, now: Time, hold: bool) -> bool {
    let mut progress = false;
    let mut blocked: Vec<u32> = Vec::new();
    let mut k = 0;
    while k < io.ring_backlog.len() {
        let Some((slot, _, _)) = io.ring_backlog.get(k) else {
            break;
        };
        let slot = *slot;
        if blocked.contains(&slot) {
            k += 1;
            continue;
        }
        let staged = match (st.peer_tx.get_mut(&slot), io.ring_backlog.get(k)) {
            (Some(tx), Some((_, b, len))) => b.get(..*len).is_some_and(|p| tx.stage(p)),
            // The ring is gone: the packet is lost, as on a vanished link.
            (None, _) => true,
            _ => false,
        };
        if staged {
            if let Some((_, b, _)) = io.ring_backlog.remove(k) {
                io.pool.push(b);
            }
            progress = true;
        } else {
            blocked.push(slot);
            k += 1;
        }
    }
    for tx in st.peer_tx.values_mut() {
        tx.publish_or_hold(now.0, hold);
        if tx.held_at().is_some() {
            io.ring_seen = now;
        }
    }
    progress
}

/// Packets other processes of the daemon's device put into this device's peer rings.
fn receive_rings(st: &mut DevState, io: &mut DevIo, now: Time) -> bool {
    if st.peer_rx.is_empty() {
        return false;
    }
    let mut rings = std::mem::take(&mut st.peer_rx);
    // Its own scratch buffer: `drain` sizes it to each packet (never a pool buffer).
    let mut buf = std::mem::take(&mut io.ring_rx);
    let mut n = 0;
    // Only a capture that wants ring packets records them here (their sender did).
    let tap = io.tap().is_some().then(|| io.tap.clone());
    for r in rings.iter_mut() {
        n += r.drain(RING_BUDGET, &mut buf, |pkt| {
            if let Some(t) = &tap {
                t.ring_received(pkt);
            }
            deliver_loopback(st, pkt, DeferList::default(), now);
        });
    }
    io.ring_rx = buf;
    st.peer_rx = rings;
    n > 0
}

fn flush_tx(dev: &Device, st: &mut DevState, io: &mut DevIo, now: Time, by_app: bool) -> bool {
    let mut progress = flush_rings(st, io, now, by_app);
    let mut groups = [0usize; TX_BATCH];
    // After a refused GSO send, the next message goes datagram by datagram.
    let mut single_first = false;
    while !io.txq.is_empty() {
        let n = io.txq.len().min(TX_BATCH);
        let planned = plan_sends(&mut io.txq, n, io.gso, single_first, &mut groups);
        single_first = false;
        let txq = &io.txq;
        let r = io
            .tx
            .send(&dev.sock, &groups[..planned], |i| match txq.get(i) {
                Some(d) => (d.bytes(), d.dst),
                None => (&[][..], SocketAddr::new(dev.cfg.addr, ROCE_V2_PORT)),
            });
        match r {
            Sent::Took(0) => break, // socket buffer full: retry on the next pass
            Sent::Took(k) => {
                for _ in 0..k {
                    if let Some(d) = io.txq.pop_front() {
                        if let Some(tap) = io.tap() {
                            tap.sent(d.dst, d.ident, d.bytes());
                        }
                        io.pool.push(d.buf);
                    }
                }
                progress = true;
            }
            Sent::Refused(k, e) if k > 1 => {
                // A GSO send refused: where segmentation offload is missing (EIO, EINVAL,
                // EOPNOTSUPP) send datagram by datagram from now on; otherwise (EMSGSIZE)
                // the next try sends the run's first datagram alone — the largest of the
                // run, so if one is too large it is — and only that one is dropped.
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                ) {
                    io.gso = None;
                }
                single_first = true;
                progress = true;
            }
            Sent::Refused(..) => {
                // The first datagram was refused (e.g. EMSGSIZE with DF): drop it.
                if let Some(d) = io.txq.pop_front() {
                    io.pool.push(d.buf);
                }
                st.res.counters.xmit_discards += 1;
                progress = true;
            }
        }
    }
    progress
}

/// Cut the first `n` queued datagrams into messages (`groups`; returns how many): runs to an
/// IPv4 loopback peer that one GSO send can carry (`sys::gso_run`), every other datagram
/// alone (and the first alone if `single_first`). Each datagram's ICRC is made the one for
/// the IPv4 ID the kernel will give it: its place in its run if the kernel counts, else 0.
fn plan_sends(
    txq: &mut VecDeque<Datagram>,
    n: usize,
    gso: Option<sys::GsoIds>,
    single_first: bool,
    groups: &mut [usize],
) -> usize {
    let mut i = 0;
    let mut h = 0;
    while i < n && h < groups.len() {
        let loopback_v4 = txq
            .get(i)
            .is_some_and(|d| matches!(d.dst.ip(), IpAddr::V4(a) if a.is_loopback()));
        let g = match gso {
            Some(_) if !(single_first && i == 0) && loopback_v4 => sys::gso_run(i, n, |k| {
                txq.get(k)
                    .map_or((0, SocketAddr::from(([0, 0, 0, 0], 0))), |d| (d.len, d.dst))
            }),
            _ => 1,
        };
        for (pos, k) in (i..i + g).enumerate() {
            let ident = match gso {
                Some(sys::GsoIds::Counting) if g > 1 => u16::try_from(pos).unwrap_or(0),
                _ => 0,
            };
            if let Some(d) = txq.get_mut(k) {
                d.set_ident(ident);
            }
        }
        if let Some(slot) = groups.get_mut(h) {
            *slot = g;
        }
        h += 1;
        i += g;
    }
    h
}

// ---------------------------------------------------------------------------------------
// Receive side

fn receive(dev: &Device, st: &mut DevState, io: &mut DevIo, now: Time) -> bool {
    if let Some(link) = &dev.daemon {
        return receive_forwarded(dev, link, st, io, now);
    }
    let mut any = false;
    // A coalesced message (UDP GRO) is, on loopback, one GSO send, whose ICRCs a counting
    // kernel's sender made for IDs 0, 1, 2, … (`plan_sends`): the first guess at each ID.
    let counting = io.gso == Some(sys::GsoIds::Counting);
    for _ in 0..4 {
        let n = io.rx.recv(dev.sock.as_fd(), &mut io.rx_bufs).unwrap_or(0);
        for i in 0..n {
            let Some(m) = io.rx.received(i) else {
                continue;
            };
            if m.truncated {
                st.res.counters.port_rcv_errors += 1;
                continue;
            }
            let Some(data) = io.rx_bufs.get(i).and_then(|b| b.get(..m.len)) else {
                continue;
            };
            receive_message(st, io.tap(), data, &m, counting, 0, now);
        }
        any |= n > 0;
        if n < BATCH {
            break;
        }
    }
    any
}

/// One received message: a datagram, or datagrams of `m.segment` bytes back to back
/// (UDP GRO; `first` is the first one's place in its GSO send).
fn receive_message(
    st: &mut DevState,
    tap: Option<&crate::tap::Tap>,
    data: &[u8],
    m: &sys::Received,
    counting: bool,
    first: u16,
    now: Time,
) {
    for (j, d) in data.chunks(m.segment.unwrap_or(m.len).max(1)).enumerate() {
        let likely = if counting {
            u16::try_from(j).unwrap_or(0).wrapping_add(first)
        } else {
            0
        };
        handle_datagram(st, tap, d, m.from, likely, m.ce(), now);
    }
}

/// What the daemon forwarded (`crate::daemon_client`): each message an
/// `abi::daemon::DataHdr` and the datagram(s). End of stream: the daemon is gone.
fn receive_forwarded(
    dev: &Device,
    link: &crate::daemon_client::DaemonLink,
    st: &mut DevState,
    io: &mut DevIo,
    now: Time,
) -> bool {
    use abi::daemon::DataHdr;
    use zerocopy::FromBytes;
    if link.fatal.load(SeqCst) {
        return false;
    }
    let counting = io.gso == Some(sys::GsoIds::Counting);
    let mut any = false;
    for _ in 0..4 {
        let n = match io.rx.recv(link.data.as_fd(), &mut io.rx_bufs) {
            Ok(n) => n,
            Err(_) => {
                daemon_gone(dev, link, st);
                return true;
            }
        };
        for i in 0..n {
            let len = io.rx.received_len(i);
            if len == 0 {
                daemon_gone(dev, link, st);
                return true;
            }
            let Some(msg) = io.rx_bufs.get(i).and_then(|b| b.get(..len)) else {
                continue;
            };
            let Ok((h, data)) = DataHdr::read_from_prefix(msg) else {
                st.res.counters.port_rcv_errors += 1;
                continue;
            };
            if h.flags & DataHdr::RING != 0 {
                // A packet ring from another process of the device (crate::peer_ring).
                for fd in io.rx.take_fds(i) {
                    match crate::peer_ring::RxRing::attach(&fd) {
                        Ok(r) => st.peer_rx.push(r),
                        Err(e) => eprintln!("uroce: {}: peer ring: {e}", dev.cfg.name),
                    }
                }
                continue;
            }
            let m = sys::Received {
                len: data.len(),
                from: SocketAddr::new(abi::daemon::addr_of_gid(h.src), h.src_port),
                truncated: false,
                segment: (h.segment > 0).then_some(usize::from(h.segment)),
                tos: (h.flags & DataHdr::TOS_VALID != 0).then_some(h.tos),
            };
            receive_message(st, io.tap(), data, &m, counting, h.first_index, now);
        }
        any |= n > 0;
        if n < BATCH {
            break;
        }
    }
    any
}

/// The daemon closed our link: the device is dead (docs/daemon.md §7).
/// Stop reading, give the daemon's port back, flush every QP, and tell every context.
fn daemon_gone(dev: &Device, link: &crate::daemon_client::DaemonLink, st: &mut DevState) {
    if link.fatal.swap(true, SeqCst) {
        return;
    }
    let _ = dev.engine.epoll.delete(link.data.as_raw_fd());
    let _ = sys::release_udp(dev.sock.as_fd(), dev.cfg.addr.is_ipv6());
    let DevState {
        qps, res, ready, ..
    } = st;
    for idx in qps.indices_where(|_| true) {
        if let Some(q) = qps.get_mut(idx) {
            if !matches!(q.qp.state(), QpState::Err | QpState::Reset) {
                let _ = q.qp.modify(&err_attr(), AttrMask::STATE);
            }
        }
        make_ready(qps, ready, idx);
    }
    let ctxs: Vec<_> = res.ctxs.keys().copied().collect();
    for c in ctxs {
        res.post_async(c, 1, crate::state::event::DEVICE_FATAL);
    }
    eprintln!(
        "uroce: {}: the daemon at {} went away; the device is fatal (reopen it once a \
         daemon serves it again)",
        dev.cfg.name,
        link.socket.display()
    );
}

/// One datagram from the socket: parse, verify the ICRC as far as a UDP socket allows
/// (IPv4: the ID and DF the socket hides are solved for; wire::icrc docs), deliver.
fn handle_datagram(
    st: &mut DevState,
    tap: Option<&crate::tap::Tap>,
    data: &[u8],
    from: SocketAddr,
    likely_ident: u16,
    ce: bool,
    now: Time,
) {
    let dev_ip = st.cfg.addr;
    let c = &mut st.res.counters;
    let Ok((pkt, crc)) = transport::wire::roce::parse_datagram(data) else {
        c.port_rcv_errors += 1;
        if let Some(tap) = tap {
            tap.received(from, 0, true, data);
        }
        return;
    };
    let transport_bytes = data
        .get(..data.len().saturating_sub(ICRC_LEN))
        .unwrap_or(&[]);
    let udp = UdpRepr {
        src_port: from.port(),
        dst_port: ROCE_V2_PORT,
        checksum: 0,
    };
    let udp_len = 8 + data.len();
    let grh = match (from.ip(), dev_ip) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            // Fast path: what this NIC and Linux senders with PMTU discovery send (ID 0 —
            // or its place in a GSO send, `likely_ident` — and DF) is one plain CRC;
            // otherwise solve for the ID/DF bits the socket hides.
            let likely = IpRepr::V4 {
                src: s,
                dst: d,
                dscp_ecn: 0,
                ttl: 64,
                ident: likely_ident,
                dont_frag: true,
            };
            let (ident, dont_frag) = if icrc::compute_for(&likely, &udp, transport_bytes) == Ok(crc)
            {
                st.idents.expected(s);
                (likely_ident, true)
            } else {
                // Solving for the hidden ID and DF accepts one corrupted packet in 2^15
                // unless the solution is plausible for this sender (crate::ident).
                match icrc::verify_udp_v4_unseen_ident(s, d, &udp, transport_bytes, crc)
                    .filter(|u| st.idents.believe_solved(s, u.ident, u.dont_frag))
                {
                    Some(u) => (u.ident, u.dont_frag),
                    None => {
                        c.rcvd_icrc_err += 1;
                        c.port_rcv_errors += 1;
                        if let Some(tap) = tap {
                            tap.received(from, 0, true, data);
                        }
                        return;
                    }
                }
            };
            if let Some(tap) = tap {
                tap.received(from, ident, dont_frag, data);
            }
            v4_grh(s, d, ident, dont_frag, udp_len)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let ip = IpRepr::V6 {
                src: s,
                dst: d,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            };
            if let Some(tap) = tap {
                tap.received(from, 0, true, data);
            }
            if !icrc::verify_udp(&ip, &udp, transport_bytes, crc) {
                c.rcvd_icrc_err += 1;
                c.port_rcv_errors += 1;
                return;
            }
            let mut h = [0u8; IPV6_HEADER_LEN];
            let _ = ip.emit(&mut h, udp_len);
            Grh::V6(h)
        }
        _ => {
            c.port_rcv_errors += 1;
            return;
        }
    };
    c.port_rcv_packets += 1;
    c.port_rcv_data += (data.len() / 4) as u64;
    deliver(st, &pkt, from.ip(), &RxMeta { grh, ce }, now, Payload::Copy);
}

fn v4_grh(
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    ident: u16,
    dont_frag: bool,
    udp_len: usize,
) -> Grh {
    let ip = IpRepr::V4 {
        src,
        dst,
        dscp_ecn: 0,
        ttl: 64,
        ident,
        dont_frag,
    };
    let mut h = [0u8; IPV4_HEADER_LEN];
    let _ = ip.emit(&mut h, udp_len);
    Grh::V4(h)
}

fn deliver_loopback(st: &mut DevState, bytes: &[u8], deferred: DeferList, now: Time) {
    let ip = st.cfg.addr;
    let Ok(pkt) = RocePacketRepr::parse(bytes) else {
        st.res.counters.port_rcv_errors += 1;
        return;
    };
    if !deferred.sources_valid(&st.res.mrs) {
        // Its source MR was deregistered while the packet waited (a later pass): lost,
        // like a packet dropped on a wire; the sender's retry finds the key gone.
        st.res.counters.xmit_discards += 1;
        return;
    }
    st.res.counters.port_rcv_packets += 1;
    st.res.counters.port_rcv_data += ((bytes.len() + ICRC_LEN) / 4) as u64;
    let udp_len = 8 + bytes.len() + ICRC_LEN;
    // Only a UD receive shows the IP header (its GRH area): skip building it otherwise.
    let ud = st
        .qps
        .get(pkt.bth.dest_qp.value())
        .is_some_and(|q| q.ty == QpType::Ud);
    let grh = match ip {
        _ if !ud => RxMeta::default().grh,
        IpAddr::V4(v4) => v4_grh(v4, v4, 0, true, udp_len),
        IpAddr::V6(v6) => {
            let mut h = [0u8; IPV6_HEADER_LEN];
            let r = IpRepr::V6 {
                src: v6,
                dst: v6,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
            };
            let _ = r.emit(&mut h, udp_len);
            Grh::V6(h)
        }
    };
    let payload = Payload::resolve_from(bytes, deferred);
    deliver(st, &pkt, ip, &RxMeta { grh, ce: false }, now, payload);
}

/// Hand a packet to its QP (demultiplexed by BTH destination QPN). RC/UC packets must come
/// from the QP's destination address (rxe `check_addr`).
fn deliver(
    st: &mut DevState,
    pkt: &RocePacketRepr<'_>,
    src: IpAddr,
    meta: &RxMeta,
    now: Time,
    payload: Payload,
) {
    let qpn = pkt.bth.dest_qp.value();
    if qpn == Qpn::GSI.value() {
        st.gsi.receive(now, pkt, src);
        st.arm_gsi();
        return;
    }
    let DevState {
        res, qps, ready, ..
    } = st;
    let Some(q) = qps.get_mut(qpn) else {
        res.counters.rcvd_unknown_qp += 1;
        return;
    };
    if q.ty != QpType::Ud && q.av.map(|d| d.ip) != Some(src) {
        res.counters.rcvd_addr_mismatch += 1;
        return;
    }
    if let Some(QpXrc::Target { domain, .. }) = q.xrc {
        deliver_xrc_target(res, q, domain, pkt, meta, now, payload);
        make_ready_first(qps, ready, qpn);
        return;
    }
    let mut mem = DmaView {
        mrs: &res.mrs,
        pd: q.pd,
        qpn: q.qp.qpn().value(),
        payload,
    };
    let mut limit_event = None;
    let mut corrupt = false;
    match q.srq {
        Some(s) => match res.srqs.get_mut(s) {
            Some(srq) => (corrupt, limit_event) = handle_on_srq(q, srq, &mut mem, now, pkt, meta),
            None => q.qp.handle_packet(now, pkt, meta, &mut mem, None),
        },
        None => match q.rq.as_mut() {
            Some(own) => {
                let mut rq = RingRecvQueue {
                    rq: own,
                    corrupt: false,
                };
                q.qp.handle_packet(now, pkt, meta, &mut mem, Some(&mut rq));
                corrupt = rq.corrupt;
            }
            None => q.qp.handle_packet(now, pkt, meta, &mut mem, None),
        },
    }
    if corrupt {
        res.counters.ring_corrupt += 1;
    }
    if let Some((ctx, h)) = limit_event {
        res.post_async(ctx, h, event::SRQ_LIMIT_REACHED);
    }
    make_ready_first(qps, ready, qpn);
}

/// Hand `pkt` to `q` with the shared receive queue `srq`. Returns whether the SRQ's ring
/// was found corrupt, and the SRQ limit event to post (armed by MODIFY_SRQ: it fires once,
/// then disarms).
fn handle_on_srq(
    q: &mut QpObj,
    srq: &mut crate::state::Srq,
    mem: &mut DmaView<'_>,
    now: Time,
    pkt: &RocePacketRepr<'_>,
    meta: &RxMeta,
) -> (bool, Option<(CtxId, u64)>) {
    let mut rq = RingRecvQueue {
        rq: &mut srq.rq,
        corrupt: false,
    };
    q.qp.handle_packet(now, pkt, meta, mem, Some(&mut rq));
    let corrupt = rq.corrupt;
    let mut limit_event = None;
    if srq.limit > 0 && srq.rq.ring.cached_available() < srq.limit {
        srq.limit = 0;
        srq.events = srq.events.wrapping_add(1);
        limit_event = Some((srq.ctx, srq.user_handle));
    }
    (corrupt, limit_event)
}

/// A packet for an XRC target QP (IBTA XRC annex): a request's XRCETH names the XRC SRQ
/// whose receive WQE it consumes, whose PD its memory accesses are checked against and whose
/// CQ its completion goes to. An SRQ number that names no XRC SRQ of the QP's domain reaches
/// the transport as no SRQ at all, which NAKs the request (Invalid Request). The completions
/// are written at once, while the SRQ's CQ is the QP's.
fn deliver_xrc_target(
    res: &mut Resources,
    q: &mut QpObj,
    domain: u32,
    pkt: &RocePacketRepr<'_>,
    meta: &RxMeta,
    now: Time,
    payload: Payload,
) {
    let srqn = pkt.xrceth.map(|x| x.srqn);
    let target = srqn.filter(|&n| {
        res.srqs
            .get(n)
            .is_some_and(|s| s.xrc.is_some_and(|x| x.domain == domain))
    });
    let mut limit_event = None;
    let mut corrupt = false;
    match target.and_then(|n| res.srqs.get_mut(n)) {
        Some(srq) => {
            if let Some(x) = srq.xrc {
                q.recv_cq = x.cq;
            }
            // Responses (READ data) are read later, under the PD of the SRQ last named.
            q.pd = srq.pd;
            let mut mem = DmaView {
                mrs: &res.mrs,
                pd: srq.pd,
                qpn: q.qp.qpn().value(),
                payload,
            };
            (corrupt, limit_event) = handle_on_srq(q, srq, &mut mem, now, pkt, meta);
        }
        None => {
            let mut mem = DmaView {
                mrs: &res.mrs,
                pd: NO_HANDLE,
                qpn: q.qp.qpn().value(),
                payload,
            };
            q.qp.handle_packet(now, pkt, meta, &mut mem, None);
        }
    }
    if corrupt {
        res.counters.ring_corrupt += 1;
    }
    if let Some((ctx, h)) = limit_event {
        res.post_async(ctx, h, event::SRQ_LIMIT_REACHED);
    }
    drain_completions(q, res);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const SRC: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);

    /// A datagram of `len` transport bytes to `dst`:4791 with its ICRC for ID 0, as `route`
    /// queues it.
    fn dgram(fill: u8, len: usize, dst: Ipv4Addr) -> Datagram {
        let mut buf = vec![fill; len];
        let ip = IpRepr::v4_socket(SRC, dst, 0, 64);
        let crc = icrc::compute_for(&ip, &UdpRepr::roce(ROCE_V2_PORT), &buf).unwrap();
        buf.extend_from_slice(&icrc::icrc_wire_bytes(crc));
        Datagram {
            buf,
            len: len + ICRC_LEN,
            dst: SocketAddr::new(dst.into(), ROCE_V2_PORT),
            ident: 0,
        }
    }

    /// The IPv4 ID each queued datagram's ICRC is right for (exactly, over the bytes).
    fn idents(q: &VecDeque<Datagram>) -> Vec<u16> {
        q.iter()
            .map(|d| {
                let IpAddr::V4(dst) = d.dst.ip() else {
                    unreachable!()
                };
                let (t, w) = d.bytes().split_at(d.len - ICRC_LEN);
                (0..=u16::MAX)
                    .find(|&ident| {
                        let ip = IpRepr::V4 {
                            src: SRC,
                            dst,
                            dscp_ecn: 0,
                            ttl: 64,
                            ident,
                            dont_frag: true,
                        };
                        icrc::compute_for(&ip, &UdpRepr::roce(ROCE_V2_PORT), t)
                            == Ok(icrc::read_icrc(w))
                    })
                    .expect("some ID")
            })
            .collect()
    }

    #[test]
    fn gso_runs_only_to_ipv4_loopback_and_icrcs_follow_the_kernel_s_numbering() {
        let lo = Ipv4Addr::new(127, 0, 0, 2);
        let far = Ipv4Addr::new(10, 0, 0, 2);
        let queue = || -> VecDeque<Datagram> {
            let mut q: VecDeque<Datagram> = (0..4).map(|i| dgram(i, 1024, lo)).collect();
            q.push_back(dgram(4, 100, lo)); // shorter: ends the run
            q.push_back(dgram(5, 1024, far)); // not loopback: alone
            q.push_back(dgram(6, 1024, far));
            q.push_back(dgram(7, 64, lo));
            q.push_back(dgram(8, 64, lo));
            q
        };
        let mut groups = [0usize; TX_BATCH];

        // A counting kernel: IDs 0, 1, 2, … within each run, 0 for datagrams alone.
        let mut q = queue();
        let h = plan_sends(&mut q, 9, Some(sys::GsoIds::Counting), false, &mut groups);
        assert_eq!(groups[..h], [5, 1, 1, 2]);
        assert_eq!(idents(&q), [0, 1, 2, 3, 4, 0, 0, 0, 1]);
        // Planned again differently (after a refusal: the first alone, then GSO off), the
        // ICRCs follow.
        let h = plan_sends(&mut q, 9, Some(sys::GsoIds::Counting), true, &mut groups);
        assert_eq!(groups[..h], [1, 4, 1, 1, 2]);
        assert_eq!(idents(&q), [0, 0, 1, 2, 3, 0, 0, 0, 1]);
        let h = plan_sends(&mut q, 9, None, false, &mut groups);
        assert_eq!(groups[..h], [1; 9]);
        assert_eq!(idents(&q), [0; 9]);

        // A kernel that keeps the ID: the same runs, every ICRC stays the one for ID 0.
        let mut q = queue();
        let h = plan_sends(&mut q, 9, Some(sys::GsoIds::Fixed), false, &mut groups);
        assert_eq!(groups[..h], [5, 1, 1, 2]);
        assert_eq!(idents(&q), [0; 9]);
        // Only the first `n` are planned.
        let mut q = queue();
        let h = plan_sends(&mut q, 3, Some(sys::GsoIds::Counting), false, &mut groups);
        assert_eq!(groups[..h], [3]);
        assert_eq!(idents(&q), [0, 1, 2, 0, 0, 0, 0, 0, 0]);
    }
}
