//! The engine: the driver of the device datapath (`crate::datapath`, which owns no thread,
//! socket or clock) — one thread for every device of the process by default
//! (docs/architecture.md §4).
//!
//! Each pass over a device, under the device lock, reads the clock and runs the datapath:
//! doorbells, what the network port received (`port`: the UDP socket, read only while some
//! QP can talk to another device or after epoll reported it readable, or the daemon's link),
//! the peer rings, timers, the CM's MADs, the loopback packets and ready QPs; then the port
//! sends what the datapath queued.
//!
//! # Parking
//!
//! While passes make progress the engine loops. Without progress it keeps polling for an
//! adaptive window (`crate::spin`: from `spin_us`, doubled by parks that a wake-up soon
//! ended, up to `max_spin_us`), and longer — `busy_spin_us` up to `max_busy_spin_us` —
//! while an application is mid-work (it owes a signaled send WQE or has completions it has
//! not consumed: it is descheduled, not done), unless the cores are oversubscribed (it was
//! preempted in an idle spin, or it is pinned to one CPU beside a polling application):
//! then it spins a few µs only (`DeviceConfig::park_when_contended`). Then it parks
//! (`park`): a doorbell costs the library a system call only in that state, and an idle
//! device costs no CPU.
//!
//! # The engine's work on the application's thread
//!
//! The device's work is done where a core is already running: on the caller's thread when
//! it posts or polls, on the engine only when no caller is there. While the engine sleeps,
//! the right to do the work (`EngineShared::core`) is free: a library thread that rings a
//! doorbell or finds its CQ empty takes it (`try_lock`, never waiting) and runs the passes
//! itself ([`EngineShared::drive_dev`], `abi::doorbell::Progress`;
//! `DeviceConfig::app_progress`), as rxe's `post_send` transmits in the caller's context —
//! over its own device first, then over the engine's other devices. A caller marks itself
//! active (`EngineShared::app_active`); the engine then counts as contended for `APP_HOLD`
//! — it parks after a few µs of idle spin, and a caller that finds it awake in that state
//! takes the work too (the engine's loop waits for it, sleeping on the lock only if the
//! caller holds on longer than `HOLDER_STALLED`).
//!
//! # Two threads, two devices
//!
//! Each device has its own I/O state (`EngineDev::io`), taken only under the core or by
//! the engine thread without it. A device no application thread of this process calls in
//! for (within `APP_HOLD`) is the engine's own: it serves it without the core, so that a
//! caller can meanwhile hold the core and serve its device. With both ends of a pair in one
//! process (`uroce bench --pair`), the sender's thread then builds and sends while the
//! engine receives, on two cores, where one thread used to do both. A caller leaves a
//! device alone while the engine's last pass over it made progress (`engine_busy`), and
//! takes it when the engine is idle or asleep, as before. Whoever holds the core finds
//! every other device's I/O state free, so the park's checks need no other lock.
//!
//! # Daemon devices
//!
//! On a daemon device the caller also drains the peer rings while it does the passes (it
//! withdraws the rings' `parked` word meanwhile, so producers do not wake the engine for
//! what it reads anyway) and holds back an ACK-only batch for the answer it is about to
//! post (`peer_ring::TxRing::publish_or_hold`); a parked engine naps `RING_BACKLOG_NAP`
//! while callers have been holding ACKs or a ring is full, so that held ACKs and packets
//! waiting for room always leave (docs/daemon.md §2.1).

mod park;
mod port;

use std::cmp::Reverse;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use transport::Time;

use crate::config::DeviceConfig;
use crate::datapath::*;
use crate::device::Device;
use crate::spin::{SpinBounds, SpinPolicy};
use crate::state::*;
use crate::sys::{self, Epoll, EPOLLIN};
use park::park;
use port::{flush_tx, receive, DevIo, DAEMON_POLL_NS};

/// With [`crate::DeviceConfig::yield_when_idle`], idle spinning longer than this yields the
/// core between polls.
const YIELD_AFTER: Duration = Duration::from_micros(5);
/// A caller holding the core this long (its passes take a few µs; tens in a debug build or
/// under strace) has lost its core: the engine then sleeps on the lock rather than spin.
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
/// for this long: the caller does the work on its own core (`EngineShared::drive_dev`).
const APP_HOLD: Duration = Duration::from_nanos(APP_HOLD_NS);
/// [`APP_HOLD`] in ns.
const APP_HOLD_NS: u64 = 2_000_000;
/// How often the engine looks whether a device's callers still call in
/// ([`EngineDev::app_driving`]).
const APP_SEEN_REFRESH_NS: u64 = 100_000;
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
/// Passes an application thread runs at most per [`EngineShared::drive_dev`] before it leaves
/// the rest to the engine.
const DRIVE_PASSES: usize = 4;

/// What the engine shares with the control planes and the library (through the wake fd).
#[derive(Debug)]
pub(crate) struct EngineShared {
    wake: OwnedFd,
    epoll: Epoll,
    parked: AtomicBool,
    kicked: AtomicBool,
    /// The engine's devices, each with its I/O state; `generation` counts additions.
    devices: Mutex<Vec<Arc<EngineDev>>>,
    generation: AtomicU64,
    /// This engine, for the per-device [`DeviceProgress`] handed to libraries.
    me: std::sync::Weak<EngineShared>,
    /// The right to work on devices callers serve, and to park: the engine thread holds
    /// it except while it sleeps or works on a device no caller serves; an application
    /// thread may take it then ([`EngineShared::drive_dev`]). A device's I/O state is
    /// taken only under it, or by the engine thread without it — so whoever holds it finds
    /// every device's I/O state free, but for devices the engine works on alone at that
    /// moment (`run`).
    core: Mutex<Core>,
    /// The engine's clock origin (transport [`Time`] counts from here, on every thread).
    epoch: Instant,
    /// While parked: the transport deadline the engine sleeps until (ns since `epoch`;
    /// `u64::MAX`: none). Work done for it that arms an earlier one must wake it.
    sleeps_until: AtomicU64,
    /// An application thread has woken the parked engine since it last went to sleep:
    /// further passes on application threads need not wake it again. (The engine takes
    /// `core` when it wakes, which a driving application thread may hold for a while;
    /// without this, each of that thread's passes until then wrote the wake-up eventfd
    /// again — a system call per operation.)
    wake_sent: AtomicBool,
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
    /// A library thread called [`EngineShared::drive_dev`] since the engine last looked: an
    /// application is polling or posting, on a core that is running anyway, so the engine
    /// leaves the work to it and parks after a short spin (set by the caller, cleared by
    /// the engine; written only when it changes, so a poller does not bounce the line).
    app_active: AtomicBool,
}

/// What the thread holding [`EngineShared::core`] works with: the engine's devices.
#[derive(Debug)]
struct Core {
    devs: Vec<Arc<EngineDev>>,
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
        self.devs = lock(&shared.devices).clone();
        true
    }
}

/// One device of an engine, and its I/O state.
#[derive(Debug)]
pub(crate) struct EngineDev {
    dev: Arc<Device>,
    /// The device's I/O state (socket batches, queues), held by whichever thread does the
    /// device's passes: one holding [`EngineShared::core`], or the engine thread without
    /// it for a device no caller serves. Lock order: the core, this, the device state.
    io: Mutex<DevIo>,
    /// An application thread of this device called in ([`EngineShared::drive_dev`]) since
    /// the engine last looked: set by callers (when clear), cleared by the engine at most
    /// every [`APP_SEEN_REFRESH_NS`]. Each of these fields has a cache line of its own, so
    /// that who writes one does not pull in what another thread reads.
    app_driving: Padded<AtomicBool>,
    /// epoll reported the device's socket readable while the engine slept (set by the
    /// engine, taken by whoever does the next pass).
    force_rx: Padded<AtomicBool>,
    /// The engine's last pass over this device made progress: it is busy with it, and a
    /// caller of another device leaves it to the engine (`EngineShared::drive_dev`).
    engine_busy: Padded<AtomicBool>,
}

/// A value alone in its cache lines (two of 64 bytes: adjacent-line prefetch pairs them).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl EngineDev {
    /// One pass over the device; returns whether anything happened. A bug must not take
    /// every device of the process down with the thread: the state stays usable (the
    /// locks ignore poisoning) and the pass is retried.
    fn pass(
        &self,
        io: &mut DevIo,
        epoll: &Epoll,
        epoch: Instant,
        poll: bool,
        by_app: bool,
    ) -> bool {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pass(self, io, epoll, epoch, poll, by_app)
        }));
        r.unwrap_or_else(|_| {
            self.dev.lock_engine().res.counters.engine_panics += 1;
            false
        })
    }

    /// Set (or clear) the `parked` word of the device's peer rings; when setting, whether
    /// a ring holds packets (the re-check of the doorbell protocol).
    fn rings_parked(&self, parked: bool) -> bool {
        let mut pending = false;
        let mut st = self.dev.lock_engine();
        for r in st.peer_rx.iter_mut() {
            r.set_parked(parked);
            pending |= parked && r.pending();
        }
        pending
    }

    /// After passes on a library thread: whether work is left that only another pass would
    /// do (or a TX backlog), and the earliest transport deadline. Packets waiting for a
    /// full peer ring are not such work: the parked engine looks at them every
    /// [`RING_BACKLOG_NAP`], and a caller that keeps polling moves them sooner.
    fn leftover(&self, io: &DevIo) -> (bool, Option<Time>) {
        let st = self.dev.lock_engine();
        let left = busy(self, io, &st) || !io.q.txq.is_empty();
        let mut next = st.timers.peek().map(|Reverse((t, _))| *t);
        // ACKs held back here must leave even if this caller does not come back: by the
        // engine's next nap at the latest (a sleep without one is woken).
        for tx in st.peer_tx.values() {
            if let Some(h) = tx.held_at() {
                let t = Time(h + crate::peer_ring::ACK_HOLD_NS + RING_NAP_NS);
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        }
        (left, next)
    }
}

/// What a caller's passes over a device left ([`EngineShared::serve`]).
#[derive(Default)]
struct Served {
    /// Some pass made progress.
    any: bool,
    /// Work only another pass would do.
    left: bool,
    /// The earliest transport deadline.
    next: Option<Time>,
    /// Packets wait for room in another process's full ring.
    stalled: bool,
}

impl Served {
    /// Add what passes over another device left.
    fn add(&mut self, o: Served) {
        self.any |= o.any;
        self.left |= o.left;
        self.stalled |= o.stalled;
        self.next = match (self.next, o.next) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// A device's I/O state, locked.
type IoGuard<'a> = std::sync::MutexGuard<'a, DevIo>;

/// Lock a device's I/O state if it is free (poisoning ignored).
fn try_io(d: &EngineDev) -> Option<IoGuard<'_>> {
    match d.io.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Whether a device has work only another pass would do: ready QPs, a socket epoll said
/// is readable, undelivered loopback packets.
fn busy(d: &EngineDev, io: &DevIo, st: &DevState) -> bool {
    !st.ready.is_empty() || d.force_rx.load(Relaxed) || !io.q.loopq.is_empty()
}

impl EngineShared {
    /// Create an engine and start its thread.
    pub(crate) fn start(name: &str) -> io::Result<Arc<EngineShared>> {
        let wake = sys::eventfd()?;
        let epoll = Epoll::new()?;
        epoll.add(wake.as_raw_fd(), WAKE_TOKEN, EPOLLIN)?;
        let shared = Arc::new_cyclic(|me| EngineShared {
            wake,
            epoll,
            parked: AtomicBool::new(false),
            kicked: AtomicBool::new(false),
            devices: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            me: me.clone(),
            core: Mutex::new(Core {
                devs: Vec::new(),
                gen: u64::MAX,
            }),
            epoch: Instant::now(),
            sleeps_until: AtomicU64::new(u64::MAX),
            wake_sent: AtomicBool::new(false),
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

    /// [`abi::doorbell::Progress::drive`] for one device of this engine: if the engine is
    /// parked (or leaves the work to callers) and no other thread is doing this device's
    /// passes, do them on the calling thread — passes until one finds nothing to do (at most
    /// [`DRIVE_PASSES`]) — then wake the engine only if work is left or a deadline was armed
    /// before the one it sleeps until, and only once per sleep.
    ///
    /// An engine pinned to one CPU that is awake (or whose work another thread is doing)
    /// while contended is waiting for this very CPU: the caller, about to spin on an empty
    /// CQ, yields it (`sched_yield`) rather than make it wait for the end of a scheduler
    /// slice. With several CPUs the engine may well be running elsewhere, and a yield per
    /// empty poll would be a system call per poll for nothing.
    fn drive_dev(&self, d: &EngineDev) -> bool {
        if self.single_cpu.load(Relaxed) {
            // Only then: on separate cores this line would bounce on every poll.
            self.app_calls.fetch_add(1, Relaxed);
        }
        if !self.app_active.load(Relaxed) {
            self.app_active.store(true, Relaxed);
        }
        // This device has a caller: the engine leaves its work to callers when it can.
        if !d.app_driving.load(Relaxed) {
            d.app_driving.store(true, Relaxed);
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
        // This caller's device first, then the engine's other devices: another device of
        // this process is often the peer this caller's packets just went to (both ends of
        // a pair in one process). But not one the engine is busy with on its own
        // (`EngineDev::engine_busy`): the two threads then share the work, this one its
        // device, the engine the other.
        let mut out = Served::default();
        let Some(io) = try_io(d) else {
            // The engine is serving this device without the core (it took it for its own
            // before this caller called in): the same as finding the core taken.
            drop(core);
            if self.single_cpu.load(Relaxed) && self.contended.load(Relaxed) {
                std::thread::yield_now();
            }
            return false;
        };
        out.add(self.serve(d, io, parked));
        let others = core
            .devs
            .iter()
            .filter(|e| !std::ptr::eq(&***e, d) && !e.engine_busy.load(Relaxed));
        for e in others {
            if let Some(io) = try_io(e) {
                out.add(self.serve(e, io, parked));
            }
        }
        let earlier = out
            .next
            .is_some_and(|t| t.0 < self.sleeps_until.load(SeqCst));
        if parked
            && self.parked.load(SeqCst)
            && (out.left || earlier)
            && !self.wake_sent.swap(true, SeqCst)
        {
            sys::eventfd_signal(self.wake.as_fd());
        }
        drop(core);
        if out.stalled && !out.any {
            // Nothing moved because another process's ring is full: its consumer needs a
            // core more than this poller does.
            std::thread::yield_now();
        }
        true
    }

    /// A caller's passes over one device whose I/O state it holds (at most
    /// [`DRIVE_PASSES`]), and what they leave ([`EngineDev::leftover`]).
    fn serve(&self, d: &EngineDev, mut io: IoGuard<'_>, parked: bool) -> Served {
        // While this thread does the passes it is the peer rings' consumer: producers need
        // not wake the sleeping engine for what it will read anyway (docs/daemon.md §2.1).
        if parked {
            d.rings_parked(false);
        }
        let mut any = false;
        for _ in 0..DRIVE_PASSES {
            if !d.pass(&mut io, &self.epoll, self.epoch, true, true) {
                break;
            }
            any = true;
        }
        // The doorbell protocol on the way out: parked again, then one more look.
        if parked && d.rings_parked(true) {
            d.rings_parked(false);
            d.pass(&mut io, &self.epoll, self.epoch, true, true);
            d.rings_parked(true);
        }
        let (left, next) = d.leftover(&io);
        Served {
            any,
            left,
            next,
            stalled: !io.q.ring_backlog.is_empty(),
        }
    }

    /// [`EngineShared::drive_dev`] for the engine's devices (a control-plane thread
    /// flushing the CM's last MADs, the exit handler). Never waits for a lock.
    pub(crate) fn drive(&self) -> bool {
        let first = match self.devices.try_lock() {
            Ok(d) => d.first().cloned(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().first().cloned(),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        first.is_some_and(|d| self.drive_dev(&d))
    }

    /// What a library context of device `id` calls to do the device's work on its own
    /// thread (`DeviceConfig::app_progress`).
    pub(crate) fn progress_for(&self, id: u64) -> Option<Arc<dyn abi::doorbell::Progress>> {
        let engine = self.me.upgrade()?;
        let dev = lock(&self.devices).iter().find(|d| d.dev.id == id)?.clone();
        Some(Arc::new(DeviceProgress { engine, dev }))
    }

    pub(crate) fn add_device(&self, dev: Arc<Device>) -> io::Result<()> {
        // A daemon's client reads what the daemon forwards, never the shared UDP socket.
        let fd = match &dev.daemon {
            Some(l) => l.data.as_raw_fd(),
            None => dev.sock.as_raw_fd(),
        };
        self.epoll.add(fd, dev.id, EPOLLIN)?;
        let io = DevIo::new(dev.gso, dev.tap.clone());
        lock(&self.devices).push(Arc::new(EngineDev {
            dev,
            io: Mutex::new(io),
            app_driving: Padded::default(),
            force_rx: Padded(AtomicBool::new(true)),
            engine_busy: Padded::default(),
        }));
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

    fn progress_for(&self, id: u64) -> Option<Arc<dyn abi::doorbell::Progress>> {
        EngineShared::progress_for(self, id)
    }
}

impl abi::doorbell::Progress for EngineShared {
    fn drive(&self) -> bool {
        EngineShared::drive(self)
    }
}

/// The engine's work for one device, on the threads of that device's library contexts.
#[derive(Debug)]
struct DeviceProgress {
    engine: Arc<EngineShared>,
    dev: Arc<EngineDev>,
}

impl abi::doorbell::Progress for DeviceProgress {
    fn drive(&self) -> bool {
        self.engine.drive_dev(&self.dev)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
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
fn spin_bounds(devs: &[Arc<EngineDev>]) -> SpinBounds {
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
fn app_mid_work(devs: &[Arc<EngineDev>]) -> bool {
    devs.iter().any(|d| d.dev.lock_engine().res.app_mid_work())
}

fn run(shared: Arc<EngineShared>) {
    let epoch = shared.epoch;
    let mut devs: Vec<Arc<EngineDev>> = Vec::new();
    let mut gen = u64::MAX;
    // Which of `devs` no caller serves (as of the last look under the core): the engine's
    // own, served without the core. And when the engine last found each one's
    // `app_driving` set (ns since its epoch; 0: never).
    let mut owned: Vec<bool> = Vec::new();
    let mut app_seen: Vec<u64> = Vec::new();
    let mut poll_own = true;
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
    // Until when an application thread counts as active (`APP_HOLD` after its last call).
    let mut app_until = Instant::now();
    let mut seen_calls = 0u64;
    let mut affinity_checked = Instant::now() - AFFINITY_CHECK;
    // Since when a caller has held the core (`EngineShared::drive_dev`).
    let mut blocked_since: Option<Instant> = None;
    loop {
        let g = shared.generation.load(SeqCst);
        if g != gen {
            gen = g;
            devs = lock(&shared.devices).clone();
            owned = vec![true; devs.len()];
            app_seen.resize(devs.len(), 0);
            policy.reconfigure(spin_bounds(&devs));
            yield_idle = devs.iter().any(|d| d.dev.cfg.yield_when_idle);
            contention_aware = devs.iter().all(|d| d.dev.cfg.park_when_contended);
        }
        // The engine's own devices, without the core: a caller may meanwhile hold the core
        // and serve its device — the receiving end of a pair of devices in one process is
        // the engine's while the sender's thread builds and sends.
        let mut own_progress = false;
        for (d, _) in devs.iter().zip(&owned).filter(|(_, o)| **o) {
            if let Some(mut io) = try_io(d) {
                own_progress |= engine_pass(d, &mut io, &shared.epoll, epoch, poll_own);
            }
        }
        // Held for the rest of this iteration (released between passes, and while asleep
        // in `park`). A caller doing the work meanwhile (`EngineShared::drive_dev`) is not
        // waited for.
        let mut core = match shared.core.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => {
                if own_progress {
                    last_progress = Instant::now();
                    blocked_since = None;
                    continue;
                }
                // A caller is doing the passes (a few µs). Wait for it without a system
                // call; only if it holds on longer — it lost its core, maybe to this
                // thread — sleep on the lock until it lets go: one futex wait here and one
                // wake on its side per such stall. (Yielding in a loop would make a stream
                // of sched_yield calls for as long as the holder stays off its core, each
                // one a stop under a tracer, taking cores from that very holder.)
                spun_at = None;
                let since = *blocked_since.get_or_insert_with(Instant::now);
                if since.elapsed() < HOLDER_STALLED {
                    for _ in 0..IDLE_SPIN_HINTS {
                        std::hint::spin_loop();
                    }
                    continue;
                }
                lock(&shared.core)
            }
        };
        blocked_since = None;
        core.refresh(&shared);
        shared.kicked.store(false, SeqCst);
        let t = Instant::now();
        let t_ns = time_at(epoch, t).0;
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
            // parks (EngineShared::drive_dev). Spinning beside it would only take a core
            // from it, or from the other process of a pair on the same device.
            shared.app_active.store(false, Relaxed);
            if contention_aware {
                app_until = t + APP_HOLD;
            }
        }
        let contended = t < contended_until || t < app_until;
        if shared.contended.load(Relaxed) != contended {
            shared.contended.store(contended, Relaxed);
        }
        // Which devices callers serve (one called in within `APP_HOLD`). Pinned to one
        // CPU, the engine and a caller cannot work at once: all is done under the core,
        // as for devices callers serve.
        let split = !shared.single_cpu.load(Relaxed);
        for ((d, o), seen) in devs.iter().zip(owned.iter_mut()).zip(app_seen.iter_mut()) {
            if t_ns.saturating_sub(*seen) >= APP_SEEN_REFRESH_NS && d.app_driving.load(Relaxed) {
                d.app_driving.store(false, Relaxed);
                *seen = t_ns;
            }
            let served = *seen != 0 && t_ns.saturating_sub(*seen) < APP_HOLD_NS;
            *o = split && !served;
        }
        let idle = t.saturating_duration_since(last_progress);
        // Sockets are polled on every pass while work is recent; deeper into an idle spin
        // only every SOCKET_POLL_IDLE, so a long spin window is not a stream of recvmmsg.
        let poll_sockets = idle < policy.base()
            || t.saturating_duration_since(last_socket_poll) >= SOCKET_POLL_IDLE;
        if poll_sockets {
            last_socket_poll = t;
        }
        poll_own = poll_sockets;
        // The devices callers serve, when none is doing it right now.
        let mut progress = own_progress;
        for (d, _) in devs.iter().zip(&owned).filter(|(_, o)| !**o) {
            if let Some(mut io) = try_io(d) {
                progress |= engine_pass(d, &mut io, &shared.epoll, epoch, poll_sockets);
            }
        }
        if progress {
            last_progress = t;
            continue;
        }
        // Inside the adaptive window; beyond it, only while an application is mid-work
        // (crate::spin). Callers that leave the engine a device of its own (one no
        // application thread of this process polls) do not make it park sooner: it keeps
        // its usual window through the gaps of that device's traffic.
        let mid_work = idle >= policy.window() && app_mid_work(&core.devs);
        let spin_contended = t < contended_until || (t < app_until && !owned.contains(&true));
        let limit = if spin_contended {
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
        // About to sleep: busy with nothing, so callers take whatever comes.
        for d in &devs {
            if d.engine_busy.load(Relaxed) {
                d.engine_busy.store(false, Relaxed);
            }
        }
        if let Some((slept, by_app)) = park(&shared, core, &mut events) {
            // A quick doorbell after a park while the cores are oversubscribed says the
            // application was descheduled, not that a longer spin would have paid off.
            policy.parked(slept, by_app && !contended, mid_work);
            last_progress = Instant::now();
        }
    }
}

/// The engine's pass over a device; notes whether it is busy with it
/// ([`EngineDev::engine_busy`]).
fn engine_pass(d: &EngineDev, io: &mut DevIo, epoll: &Epoll, epoch: Instant, poll: bool) -> bool {
    let p = d.pass(io, epoll, epoch, poll, false);
    if d.engine_busy.load(Relaxed) != p {
        d.engine_busy.store(p, Relaxed);
    }
    p
}

/// One pass over one device; returns whether anything happened.
fn pass(
    d: &EngineDev,
    io: &mut DevIo,
    epoll: &Epoll,
    epoch: Instant,
    poll_socket: bool,
    by_app: bool,
) -> bool {
    let dev = &*d.dev;
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
    // (Set by the engine after a sleep; whoever does the pass takes it.)
    let forced = d.force_rx.load(Relaxed) && d.force_rx.swap(false, Relaxed);
    if forced || daemon_due || ((poll_socket || timer_due) && (st.remote_qps > 0 || st.gsi_live()))
    {
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
