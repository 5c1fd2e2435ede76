//! Doorbell page and the `parked` protocol: deterministic interleavings, then two real
//! threads racing "engine about to park" against "library rings".

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use abi::doorbell::{doorbell_page, DoorbellLayout, Progress, Wait, Wake};
use abi::ring::{channel, RingLayout};

/// An eventfd stand-in: a counter with token semantics.
#[derive(Default)]
struct EventFd {
    count: Mutex<u64>,
    cv: Condvar,
    wakes: AtomicU64,
    waits: AtomicU64,
    /// Set if a wait ran into the liveness bound: a lost wake-up.
    stuck: AtomicBool,
}

impl Wake for EventFd {
    fn wake(&self) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        *self.count.lock().unwrap() += 1;
        self.cv.notify_one();
    }
}

impl Wait for EventFd {
    fn wait(&self) {
        self.waits.fetch_add(1, Ordering::SeqCst);
        let mut c = self.count.lock().unwrap();
        // Liveness bound, not a timing assertion: a correct protocol returns as soon as the
        // other thread runs; only a lost wake-up can sleep this long.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while *c == 0 {
            let now = std::time::Instant::now();
            if now >= deadline {
                self.stuck.store(true, Ordering::SeqCst);
                return;
            }
            c = self.cv.wait_timeout(c, deadline - now).unwrap().0;
        }
        *c = 0;
    }
}

impl EventFd {
    fn tokens(&self) -> u64 {
        *self.count.lock().unwrap()
    }
}

#[test]
fn layout_rules() {
    assert!(DoorbellLayout::new(0).is_err());
    assert!(DoorbellLayout::new(100).is_err());
    assert!(DoorbellLayout::new(1 << 17).is_err());
    let l = DoorbellLayout::new(1024).unwrap();
    assert_eq!(l.bytes(), 128 + 128);
    assert!(l.bytes() <= 4096);
    let (db, _rx) = doorbell_page(DoorbellLayout::new(64).unwrap()).unwrap();
    let ev = EventFd::default();
    assert!(db.ring(64, &ev).is_err(), "slot beyond the page");
}

#[test]
fn drain_reports_each_rung_slot_once() {
    let (db, rx) = doorbell_page(DoorbellLayout::new(256).unwrap()).unwrap();
    let ev = EventFd::default();
    for s in [3u32, 64, 255, 3, 130] {
        assert!(!db.ring(s, &ev).unwrap(), "running engine: no wake-up");
    }
    assert!(rx.has_pending().unwrap());
    let mut got = Vec::new();
    assert_eq!(rx.drain(|s| got.push(s)).unwrap(), 4);
    assert_eq!(got, vec![3, 64, 130, 255]);
    assert!(!rx.has_pending().unwrap());
    assert_eq!(rx.drain(|_| panic!("nothing pending")).unwrap(), 0);
    assert_eq!(ev.wakes.load(Ordering::SeqCst), 0);
}

#[test]
fn park_interleavings() {
    let (db, rx) = doorbell_page(DoorbellLayout::new(64).unwrap()).unwrap();
    let ev = EventFd::default();

    // Ring before the engine parks: the engine sees the bit and does not block.
    db.ring(1, &ev).unwrap();
    assert!(!rx.prepare_park().unwrap());
    assert!(!rx.is_parked().unwrap());
    assert_eq!(rx.drain(|_| {}).unwrap(), 1);

    // Engine parks first: the ring wakes it exactly once, even if rung again.
    assert!(rx.prepare_park().unwrap());
    assert!(rx.is_parked().unwrap());
    assert!(db.ring(2, &ev).unwrap());
    assert!(
        !db.ring(3, &ev).unwrap(),
        "second ringer must not make another syscall"
    );
    assert_eq!(ev.wakes.load(Ordering::SeqCst), 1);
    assert_eq!(ev.tokens(), 1, "the wake is a token the wait will consume");
    ev.wait();
    rx.finish_park().unwrap();
    assert_eq!(rx.drain(|_| {}).unwrap(), 2);

    // The race window: engine announced parked, library rang (and woke) before the engine
    // blocked. The engine's wait must return at once thanks to the token.
    assert!(rx.prepare_park().unwrap());
    db.ring(5, &ev).unwrap();
    ev.wait(); // would hit the liveness bound if the token were lost
    assert!(!ev.stuck.load(Ordering::SeqCst));
    rx.finish_park().unwrap();

    // park() convenience: pending work means no wait at all.
    let waits = ev.waits.load(Ordering::SeqCst);
    assert!(!rx.park(&ev).unwrap());
    assert_eq!(ev.waits.load(Ordering::SeqCst), waits);
}

#[test]
fn two_threads_no_lost_wakeup() {
    // Ping-pong: the library publishes one entry, rings, then waits for the engine's ack, so
    // almost every ring races an engine that is just about to park. 20k bounded rounds.
    const ROUNDS: u64 = 20_000;
    let (db, rx) = doorbell_page(DoorbellLayout::new(64).unwrap()).unwrap();
    let (mut p, mut c) = channel(RingLayout::new(4, 64).unwrap()).unwrap();
    let ev = Arc::new(EventFd::default());
    let acked = Arc::new(AtomicU64::new(0));
    let parks = Arc::new(AtomicU64::new(0));

    let engine = {
        let ev = ev.clone();
        let acked = acked.clone();
        let parks = parks.clone();
        std::thread::spawn(move || {
            let mut next = 0u64;
            while next < ROUNDS {
                let mut rung = false;
                rx.drain(|s| {
                    assert_eq!(s, 7);
                    rung = true;
                })
                .unwrap();
                let n = c.available().unwrap();
                for k in 0..n {
                    let mut b = [0u8; 8];
                    c.read(k, 0, &mut b).unwrap();
                    assert_eq!(u64::from_le_bytes(b), next);
                    next += 1;
                }
                c.release(n).unwrap();
                if n > 0 {
                    acked.store(next, Ordering::Release);
                    continue;
                }
                if !rung {
                    parks.fetch_add(1, Ordering::SeqCst);
                    rx.park(&*ev).unwrap();
                    if ev.stuck.load(Ordering::SeqCst) {
                        panic!("lost wake-up at item {next}");
                    }
                }
            }
        })
    };

    for i in 0..ROUNDS {
        p.push(&i.to_le_bytes()).unwrap();
        db.ring(7, &*ev).unwrap();
        let mut spins = 0u32;
        while acked.load(Ordering::Acquire) <= i {
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            }
            if ev.stuck.load(Ordering::SeqCst) {
                break;
            }
        }
        assert!(
            !ev.stuck.load(Ordering::SeqCst),
            "engine slept through a doorbell (round {i})"
        );
    }
    engine.join().unwrap();
    let wakes = ev.wakes.load(Ordering::SeqCst);
    let parks = parks.load(Ordering::SeqCst);
    eprintln!("rounds {ROUNDS}: parks {parks}, wakes {wakes}");
    // A wake-up system call happens only after the engine announced a park.
    assert!(wakes <= parks, "wakes {wakes} > parks {parks}");
    assert!(!ev.stuck.load(Ordering::SeqCst));
}

#[test]
fn busy_engine_costs_no_syscalls() {
    // The engine drains without ever parking: many threads ring, no wake is ever issued.
    let (db, rx) = doorbell_page(DoorbellLayout::new(128).unwrap()).unwrap();
    let ev = Arc::new(EventFd::default());
    let done = Arc::new(AtomicBool::new(false));
    let ringers: Vec<_> = (0..2u32)
        .map(|t| {
            let db = db.clone();
            let ev = ev.clone();
            std::thread::spawn(move || {
                for i in 0..20_000u32 {
                    db.ring((t * 64 + i) % 128, &*ev).unwrap();
                }
            })
        })
        .collect();
    let seen = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen = 0u64;
            loop {
                let finished = done.load(Ordering::SeqCst);
                seen += u64::from(rx.drain(|s| assert!(s < 128)).unwrap());
                if finished {
                    return seen;
                }
                std::thread::yield_now();
            }
        })
    };
    for r in ringers {
        r.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    let seen = seen.join().unwrap();
    assert!((1..=40_000).contains(&seen));
    assert_eq!(ev.wakes.load(Ordering::SeqCst), 0);
}

/// A [`Progress`] stand-in: drains the page like an engine pass when it "can run", and
/// counts its calls.
#[derive(Debug)]
struct FakeProgress {
    rx: abi::doorbell::DoorbellReceiver,
    can_run: AtomicBool,
    calls: AtomicU64,
    served: Mutex<Vec<u32>>,
}

impl Progress for FakeProgress {
    fn drive(&self) -> bool {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if !self.can_run.load(Ordering::SeqCst) {
            return false;
        }
        let mut served = self.served.lock().unwrap();
        self.rx.drain(|s| served.push(s)).unwrap();
        true
    }
}

#[test]
fn ring_or_drive_serves_a_parked_engine_on_the_ringing_thread_or_wakes_it() {
    let layout = DoorbellLayout::new(64).unwrap();
    let mem = Arc::new(abi::shm::SharedMem::new_zeroed(layout.bytes()).unwrap());
    layout.init(&mem, 0).unwrap();
    let db = abi::doorbell::Doorbells::attach(mem.clone(), 0, layout).unwrap();
    let rx = abi::doorbell::DoorbellReceiver::attach(mem.clone(), 0, layout).unwrap();
    // The fake progress drains the same page the engine would.
    let engine_side = abi::doorbell::DoorbellReceiver::attach(mem, 0, layout).unwrap();
    let p = FakeProgress {
        rx: engine_side,
        can_run: AtomicBool::new(true),
        calls: AtomicU64::new(0),
        served: Mutex::new(Vec::new()),
    };
    let ev = EventFd::default();

    // Engine awake: the doorbell is only a bit; progress is not asked.
    assert!(!db.ring_or_drive(3, &ev, Some(&p)).unwrap());
    assert_eq!(p.calls.load(Ordering::SeqCst), 0);
    assert_eq!(rx.drain(|_| {}).unwrap(), 1);

    // Engine parked, progress can run: served here, no wake-up, the engine stays parked.
    assert!(rx.prepare_park().unwrap());
    assert!(!db.ring_or_drive(5, &ev, Some(&p)).unwrap());
    assert_eq!(*p.served.lock().unwrap(), vec![5]);
    assert_eq!(ev.wakes.load(Ordering::SeqCst), 0);
    assert!(rx.is_parked().unwrap());
    assert!(!rx.has_pending().unwrap());

    // Engine parked, progress cannot run (another thread has the engine): the usual
    // wake-up, exactly once, and the bit is left for the engine.
    p.can_run.store(false, Ordering::SeqCst);
    assert!(db.ring_or_drive(7, &ev, Some(&p)).unwrap());
    assert_eq!(ev.wakes.load(Ordering::SeqCst), 1);
    assert!(!rx.is_parked().unwrap());
    let mut got = Vec::new();
    rx.drain(|s| got.push(s)).unwrap();
    assert_eq!(got, vec![7]);

    // Without a progress handle (daemon mode): the plain protocol.
    assert!(rx.prepare_park().unwrap());
    assert!(db.ring_or_drive(9, &ev, None).unwrap());
    assert_eq!(ev.wakes.load(Ordering::SeqCst), 2);
    assert!(db.ring_or_drive(64, &ev, Some(&p)).is_err());
}
