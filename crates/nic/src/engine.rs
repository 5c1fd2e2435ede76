//! The engine: the NIC's doorbell, DMA and transport processing, one thread for every
//! device of the process by default (docs/architecture.md §4).
//!
//! The engine drives the device's datapath (`crate::datapath`, which owns no thread, socket
//! or clock): it reads the clock, runs a pass per device under the device lock — doorbells,
//! then `recvmmsg` from the UDP socket (only while some QP can talk to another device, or
//! after epoll reported the socket readable; UDP GRO messages cut into datagrams) and from
//! the daemon's socket, timers, the CM's MADs, the work on loopback packets and ready QPs —
//! and sends what the datapath queued with `sendmmsg` (runs to an IPv4 loopback peer as GSO
//! sends, each datagram's ICRC made for the IPv4 ID the kernel will give it).
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

use transport::wire::ROCE_V2_PORT;
use transport::{AttrMask, QpState, Time};

use crate::config::DeviceConfig;
use crate::datapath::*;
use crate::device::Device;
use crate::spin::{SpinBounds, SpinPolicy};
use crate::state::*;
use crate::sys::{self, Epoll, MsgBatch, Sent, EPOLLIN};

/// Messages per `recvmmsg`.
const BATCH: usize = 32;
/// A daemon client's engine reads the daemon's socket at least this often while busy.
const DAEMON_POLL_NS: u64 = 5_000_000;
/// Datagrams per `sendmmsg` (runs of them go as GSO sends: `sys::MsgBatch::send`).
const TX_BATCH: usize = 128;
/// Receive buffer: a message of datagrams the kernel coalesced (UDP GRO) is at most 64 KiB.
const RX_BUF: usize = (1 << 16) + size_of::<abi::daemon::DataHdr>();
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
    fn pass(&mut self, epoll: &Epoll, epoch: Instant, poll_sockets: bool, by_app: bool) -> bool {
        let mut progress = false;
        for d in self.devs.iter_mut() {
            // A bug must not take every device of the process down with this thread: the
            // state stays usable (the lock ignores poisoning) and the pass is retried.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pass(&d.dev, &mut d.io, epoll, epoch, poll_sockets, by_app)
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
        self.devs.iter().any(|d| !d.io.q.ring_backlog.is_empty())
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
            left |= busy(&d.io, &st) || !d.io.q.txq.is_empty();
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
    !st.ready.is_empty() || io.force_rx || !io.q.loopq.is_empty()
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
            if !core.pass(&self.epoll, self.epoch, true, true) {
                break;
            }
            any = true;
        }
        // The doorbell protocol on the way out: parked again, then one more look.
        if parked && core.rings_parked(true) {
            core.rings_parked(false);
            core.pass(&self.epoll, self.epoch, true, true);
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

impl EngineLink for EngineShared {
    fn now(&self) -> Time {
        EngineShared::now(self)
    }

    fn wake_fd(&self) -> BorrowedFd<'_> {
        EngineShared::wake_fd(self)
    }

    fn kick(&self) {
        EngineShared::kick(self)
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

/// The engine's per-device I/O state (not behind the device lock): the datapath's queues
/// and what the driver adds around them — the socket's message batches, GSO, when to read.
#[derive(Debug)]
pub(crate) struct DevIo {
    q: Queues,
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
    /// When the daemon's socket was last read.
    daemon_polled: Time,
}

impl DevIo {
    fn new(gso: Option<sys::GsoIds>, tap: Arc<crate::tap::Tap>) -> DevIo {
        DevIo {
            q: Queues::new(tap),
            rx_bufs: (0..BATCH).map(|_| vec![0u8; RX_BUF]).collect(),
            rx: MsgBatch::new(BATCH),
            tx: MsgBatch::new(TX_BATCH),
            gso,
            force_rx: true,
            daemon_polled: Time(0),
        }
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
        if core.pass(&shared.epoll, epoch, poll_sockets, false) {
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
        backlog |= !d.io.q.ring_backlog.is_empty()
            || (d.io.q.ring_seen.0 != 0
                && now_of(shared.epoch).nanos_since(d.io.q.ring_seen) < RING_ACTIVE_NS);
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
fn pass(
    dev: &Device,
    io: &mut DevIo,
    epoll: &Epoll,
    epoch: Instant,
    poll_socket: bool,
    by_app: bool,
) -> bool {
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
        progress |= receive(dev, st, io, epoll, now);
    }
    progress |= receive_rings(st, &mut io.q, now);
    progress |= fire_timers(st, now);
    progress |= send_gsi(st, &mut io.q);
    check_err_rqs(st);
    progress |= work(st, &mut io.q, || now_of(epoch));
    // MADs the CM queued while QPs were served (answers to loopback MADs).
    progress |= send_gsi(st, &mut io.q);
    progress |= flush_tx(dev, st, io, now_of(epoch), by_app);
    if by_app && progress {
        st.res.counters.app_passes += 1;
    }
    progress
}

fn flush_tx(dev: &Device, st: &mut DevState, io: &mut DevIo, now: Time, by_app: bool) -> bool {
    let mut progress = flush_rings(st, &mut io.q, now, by_app);
    let mut groups = [0usize; TX_BATCH];
    // After a refused GSO send, the next message goes datagram by datagram.
    let mut single_first = false;
    while !io.q.txq.is_empty() {
        let n = io.q.txq.len().min(TX_BATCH);
        let planned = plan_sends(&mut io.q.txq, n, io.gso, single_first, &mut groups);
        single_first = false;
        let txq = &io.q.txq;
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
                    if let Some(d) = io.q.txq.pop_front() {
                        if let Some(tap) = io.q.tap() {
                            tap.sent(d.dst, d.ident, d.bytes());
                        }
                        io.q.put_buf(d.buf);
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
                if let Some(d) = io.q.txq.pop_front() {
                    io.q.put_buf(d.buf);
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

fn receive(dev: &Device, st: &mut DevState, io: &mut DevIo, epoll: &Epoll, now: Time) -> bool {
    if let Some(link) = &dev.daemon {
        return receive_forwarded(dev, link, st, io, epoll, now);
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
            receive_message(st, io.q.tap(), data, &m, counting, 0, now);
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
    epoll: &Epoll,
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
                daemon_gone(dev, link, st, epoll);
                return true;
            }
        };
        for i in 0..n {
            let len = io.rx.received_len(i);
            if len == 0 {
                daemon_gone(dev, link, st, epoll);
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
            receive_message(st, io.q.tap(), data, &m, counting, h.first_index, now);
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
fn daemon_gone(
    dev: &Device,
    link: &crate::daemon_client::DaemonLink,
    st: &mut DevState,
    epoll: &Epoll,
) {
    if link.fatal.swap(true, SeqCst) {
        return;
    }
    let _ = epoll.delete(link.data.as_raw_fd());
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use transport::wire::icrc::{self, ICRC_LEN};
    use transport::wire::ip::{IpRepr, UdpRepr};

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
