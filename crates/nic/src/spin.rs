//! The engine's idle policy: how long it keeps polling after the last progress before it
//! parks (docs/architecture.md §3: busy-poll while there is work, park when idle; a doorbell costs
//! a wake-up system call only when the engine is parked).
//!
//! A fixed window of a few tens of µs is the ski-rental answer for one core per thread, but
//! on a shared machine the application thread is routinely descheduled for longer than that
//! in the middle of its work; the engine then parks, and every doorbell after that pays a
//! wake-up — system calls that grow with the work instead of being a constant. Two rules
//! keep the engine awake across such gaps, and neither keeps an idle device busy:
//!
//! * **Adaptive window** (the adaptive-mutex heuristic): the window starts at
//!   [`crate::DeviceConfig::spin_us`]. A park that the application ends (a doorbell or a
//!   command on the wake fd) sooner than the cap ([`crate::DeviceConfig::max_spin_us`])
//!   means spinning longer would have paid off: the window doubles, up to the cap. A park
//!   that lasts longer than twice the cap means the device really went idle: the window
//!   halves, down to `spin_us`. A park that a datagram or a transport deadline ended says
//!   nothing about the application and changes nothing unless it was long: spinning would
//!   not have received the datagram any sooner than the wake-up did, and growing on
//!   datagrams made every engine of a ping-pong spin for its whole cap after each packet —
//!   two processes on two cores then took turns by scheduler slices (7.7 ms per 64-byte
//!   round trip on a quiet 2-core machine, before this rule). (Linux's io_uring SQPOLL thread,
//!   the kernel's own polling "NIC", spins a fixed second by default before it sleeps.)
//! * **Application mid-work**: while some QP's newest send WQE was unsignaled (the
//!   application owes a signaled one: it is mid-stream), or a CQ holds completions the
//!   engine wrote and the application has not consumed yet, the application has work in
//!   hand and will be back — it is descheduled, not idle. The engine then keeps polling
//!   for a second adaptive window, [`crate::DeviceConfig::busy_spin_us`] doubling up to
//!   [`crate::DeviceConfig::max_busy_spin_us`] by the same rule: a park in this state that
//!   ends in a wake-up within the window doubles it, one that lasts longer than twice the
//!   window halves it. An application that leaves completions unpolled for good costs
//!   that window once per burst, then the engine parks as usual.
//!
//! * **Oversubscribed cores**: both windows assume the engine has a core of its own. When
//!   it has not — more runnable threads than cores, e.g. two processes' applications and
//!   engines on a 2-core machine, each spinning — every µs it spins is taken from a thread
//!   that would make progress, and progress waits for scheduler slices (ms). The engine
//!   notices being descheduled in the middle of an idle spin (a gap between two spin steps,
//!   no system call needed); it then drops both windows to their floors and, for a while,
//!   parks after a few µs whatever state the application is in. Parking costs the next
//!   doorbell one system call; spinning would cost a scheduler slice.
//!
//! Pure logic on durations (no clock inside), so it is unit-tested directly.

use std::time::Duration;

/// One adaptive window between a floor and a cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    min: Duration,
    max: Duration,
    cur: Duration,
}

impl Window {
    fn new(min: Duration, max: Duration) -> Window {
        Window {
            min,
            max: max.max(min),
            cur: min,
        }
    }

    fn grow(&mut self) {
        self.cur = self.cur.saturating_mul(2).min(self.max);
    }

    fn shrink(&mut self) {
        self.cur = (self.cur / 2).max(self.min);
    }

    fn rebound(&mut self, min: Duration, max: Duration) {
        let cur = self.cur;
        *self = Window::new(min, max);
        self.cur = cur.clamp(self.min, self.max);
    }
}

/// Spin windows and their adaptation (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpinPolicy {
    idle: Window,
    busy: Window,
}

/// The bounds of a [`SpinPolicy`]: idle window floor and cap, mid-work window floor and cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpinBounds {
    pub(crate) spin: Duration,
    pub(crate) max_spin: Duration,
    pub(crate) busy_spin: Duration,
    pub(crate) max_busy_spin: Duration,
}

impl SpinPolicy {
    /// A policy within `b`. Caps below their floors are raised to them, and the mid-work
    /// window is never shorter than the idle one.
    pub(crate) fn new(b: SpinBounds) -> SpinPolicy {
        let idle = Window::new(b.spin, b.max_spin);
        let busy = Window::new(b.busy_spin.max(idle.max), b.max_busy_spin);
        SpinPolicy { idle, busy }
    }

    /// Adopt new bounds (a device joined with another configuration), keeping the current
    /// windows inside them.
    pub(crate) fn reconfigure(&mut self, b: SpinBounds) {
        let fresh = SpinPolicy::new(b);
        self.idle.rebound(fresh.idle.min, fresh.idle.max);
        self.busy.rebound(fresh.busy.min, fresh.busy.max);
    }

    /// The current idle window.
    pub(crate) fn window(&self) -> Duration {
        self.idle.cur
    }

    /// The minimum window (`spin_us`).
    pub(crate) fn base(&self) -> Duration {
        self.idle.min
    }

    /// How long after the last progress the engine keeps polling; `mid_work`: the
    /// application has work in hand (module docs).
    pub(crate) fn limit(&self, mid_work: bool) -> Duration {
        if mid_work {
            self.busy.cur.max(self.idle.cur)
        } else {
            self.idle.cur
        }
    }

    /// The engine was descheduled in the middle of an idle spin: the cores are
    /// oversubscribed, and long windows steal them (module docs).
    pub(crate) fn preempted(&mut self) {
        self.idle.cur = self.idle.min;
        self.busy.cur = self.busy.min;
    }

    /// A park that blocked for `slept` ended; `by_app`: the application woke it (a doorbell
    /// or a control-plane command), not a datagram or the timeout; `mid_work`: the engine
    /// parked although the application was mid-work (its mid-work window ran out).
    pub(crate) fn parked(&mut self, slept: Duration, by_app: bool, mid_work: bool) {
        let w = if mid_work {
            &mut self.busy
        } else {
            &mut self.idle
        };
        let soon = if mid_work { w.cur } else { w.max };
        if by_app && slept < soon {
            w.grow();
        } else if slept > w.max.saturating_mul(2) || (mid_work && slept > w.cur * 2) {
            w.shrink();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    const MS: Duration = Duration::from_millis(1);

    fn bounds() -> SpinBounds {
        SpinBounds {
            spin: 50 * US,
            max_spin: 4 * MS,
            busy_spin: 50 * MS,
            max_busy_spin: 1000 * MS,
        }
    }

    #[test]
    fn quick_wake_ups_grow_the_idle_window_to_the_cap() {
        let mut p = SpinPolicy::new(bounds());
        assert_eq!(p.window(), 50 * US);
        p.parked(300 * US, true, false);
        assert_eq!(p.window(), 100 * US);
        for _ in 0..20 {
            p.parked(3 * MS, true, false);
        }
        assert_eq!(p.window(), 4 * MS);
        // A timeout or datagram wake-up says nothing about the application.
        let mut q = SpinPolicy::new(bounds());
        q.parked(300 * US, false, false);
        assert_eq!(q.window(), 50 * US);
    }

    #[test]
    fn long_parks_shrink_it_back_and_middling_ones_keep_it() {
        let mut p = SpinPolicy::new(bounds());
        for _ in 0..10 {
            p.parked(10 * US, true, false);
        }
        assert_eq!(p.window(), 4 * MS);
        p.parked(6 * MS, true, false);
        assert_eq!(p.window(), 4 * MS);
        p.parked(1000 * MS, true, false);
        assert_eq!(p.window(), 2 * MS);
        for _ in 0..20 {
            p.parked(1000 * MS, false, false);
        }
        assert_eq!(p.window(), 50 * US);
    }

    #[test]
    fn mid_work_window_adapts_on_its_own() {
        let mut p = SpinPolicy::new(bounds());
        assert_eq!(p.limit(false), 50 * US);
        assert_eq!(p.limit(true), 50 * MS);
        // Woken within the window after a mid-work park: the application was only away.
        p.parked(30 * MS, true, true);
        assert_eq!(p.limit(true), 100 * MS);
        assert_eq!(p.window(), 50 * US);
        for _ in 0..10 {
            p.parked(1 * MS, true, true);
        }
        assert_eq!(p.limit(true), 1000 * MS);
        // Woken later than the window: no growth; much later: shrink.
        p.parked(1500 * MS, true, true);
        assert_eq!(p.limit(true), 1000 * MS);
        p.parked(2500 * MS, true, true);
        assert_eq!(p.limit(true), 500 * MS);
        for _ in 0..10 {
            p.parked(60_000 * MS, false, true);
        }
        assert_eq!(p.limit(true), 50 * MS);
    }

    #[test]
    fn preemption_drops_both_windows_to_their_floors() {
        let mut p = SpinPolicy::new(bounds());
        for _ in 0..10 {
            p.parked(10 * US, true, false);
            p.parked(1 * MS, true, true);
        }
        assert_eq!(p.window(), 4 * MS);
        assert_eq!(p.limit(true), 1000 * MS);
        p.preempted();
        assert_eq!(p.window(), 50 * US);
        assert_eq!(p.limit(false), 50 * US);
        assert_eq!(p.limit(true), 50 * MS);
    }

    #[test]
    fn bounds_are_ordered_and_reconfiguring_keeps_the_windows_inside() {
        // Caps below the floors are raised to them; mid-work never below idle.
        let q = SpinPolicy::new(SpinBounds {
            spin: 2000 * MS,
            max_spin: 10 * US,
            busy_spin: 10 * US,
            max_busy_spin: Duration::ZERO,
        });
        assert_eq!(q.limit(true), 2000 * MS);
        assert_eq!(q.limit(false), 2000 * MS);
        let mut r = SpinPolicy::new(bounds());
        for _ in 0..10 {
            r.parked(10 * US, true, false);
        }
        r.reconfigure(SpinBounds {
            spin: 100 * US,
            max_spin: 1 * MS,
            busy_spin: Duration::ZERO,
            max_busy_spin: Duration::ZERO,
        });
        assert_eq!(r.window(), 1 * MS);
        assert_eq!(r.limit(true), 1 * MS);
        assert_eq!(r.base(), 100 * US);
    }
}
