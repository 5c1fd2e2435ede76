//! The engine going to sleep: the doorbell protocol's park (announce `parked` on every
//! doorbell page and peer ring, re-check, then block in `epoll_wait` until a wake-up, a
//! datagram or the next transport deadline; docs/abi.md §9, docs/architecture.md §4).

use std::cmp::Reverse;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use transport::Time;

use super::{
    busy, lock, now_of, try_io, Core, EngineDev, EngineShared, RING_ACTIVE_NS, RING_BACKLOG_NAP,
    RING_NAP_NS, WAKE_TOKEN,
};
use crate::sys;

/// Try to sleep. Returns `None` if the engine did not block, else how long it slept and
/// whether the application ended the sleep: its doorbell or a control-plane command came
/// through the wake fd. A datagram or the timeout says nothing about the application, and
/// spinning would not have served a datagram sooner than the wake-up did (`crate::spin`).
/// A deadline closer than this is met by spinning rather than sleeping.
const SPIN_DEADLINE_NS: u64 = 60_000;
/// A sleep until a deadline ends this much before it (timer slack, wake-up latency).
const WAKE_EARLY_NS: u64 = 30_000;

pub(super) fn park(
    shared: &EngineShared,
    core: std::sync::MutexGuard<'_, Core>,
    events: &mut Vec<(u64, u32)>,
) -> Option<(Duration, bool)> {
    let devs = &core.devs;
    // Every device's I/O state, for the checks: under the core none is held by a caller,
    // and the engine's own passes without it are over (`super::run`).
    let ios = devs.iter().map(|d| try_io(d)).collect::<Option<Vec<_>>>()?;
    let unpark_all = |devs: &[Arc<EngineDev>]| {
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
    for (d, io) in devs.iter().zip(&ios) {
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
        if busy(d, io, &st) {
            may_sleep = false;
        }
        // A full peer ring empties at its consumer's pace: nap, don't spin. And while
        // application threads hold back ACKs for a moment (`flush_rings`), one may stop
        // calling in: nap so that they leave regardless.
        backlog |= !io.q.ring_backlog.is_empty()
            || (io.q.ring_seen.0 != 0
                && now_of(shared.epoch).nanos_since(io.q.ring_seen) < RING_ACTIVE_NS);
        if !may_sleep {
            break;
        }
    }
    // 2. The same for control-plane kicks.
    shared.parked.store(true, SeqCst);
    if !may_sleep || shared.kicked.load(SeqCst) {
        shared.parked.store(false, SeqCst);
        unpark_all(devs);
        return None;
    }
    // 3. Sleep until a wake-up, a datagram or the next deadline. Deadlines under
    //    `SPIN_DEADLINE_NS` are met by spinning; later ones are slept for with nanosecond
    //    resolution (`Epoll::wait_for`), waking `WAKE_EARLY_NS` early to spin the rest —
    //    so a paced QP (docs/wire.md §11.3) whose next packet is due in a few hundred µs
    //    does not keep a core busy. While asleep, the core is free for an application
    //    thread to do the work (`EngineShared::drive_dev`); it wakes the engine if it arms an
    //    earlier deadline.
    let timeout = match next {
        None => None,
        Some(t) => {
            let dt = t.nanos_since(now_of(shared.epoch));
            if dt < SPIN_DEADLINE_NS {
                shared.parked.store(false, SeqCst);
                unpark_all(devs);
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
    // What a caller compares its deadlines with (`EngineShared::drive_dev`): the transport's,
    // or the nap's if sooner.
    let nap_end = backlog.then(|| now_of(shared.epoch).0.saturating_add(RING_NAP_NS));
    let until = match (next.map(|t| t.0), nap_end) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or(u64::MAX),
    };
    shared.sleeps_until.store(until, SeqCst);
    // Application threads may drive only once the I/O states are let go: from then on, one
    // of them waking this sleep is news again.
    shared.wake_sent.store(false, SeqCst);
    drop(ios);
    drop(core);
    let t0 = Instant::now();
    let _ = shared.epoll.wait_for(events, timeout);
    let slept = t0.elapsed();
    let core = lock(&shared.core);
    let devs = &core.devs;
    shared.parked.store(false, SeqCst);
    sys::eventfd_drain(shared.wake.as_fd());
    for (token, _) in events.iter() {
        if let Some(d) = devs.iter().find(|d| d.dev.id == *token) {
            d.force_rx.store(true, Relaxed);
        }
    }
    unpark_all(devs);
    Some((slept, events.iter().any(|&(token, _)| token == WAKE_TOKEN)))
}
