//! The engine's idle policy: how long it keeps polling after the last progress before it
//! parks (DESIGN.md §3: busy-poll while there is work, park when idle; a doorbell costs a
//! wake-up system call only when the engine is parked).
//!
//! A fixed window of a few tens of µs is the ski-rental answer for one core per thread, but
//! on a shared machine the application thread is routinely descheduled for longer than that
//! in the middle of its work; the engine then parks, and every doorbell after that pays a
//! wake-up — system calls that grow with the work instead of being a constant. Two rules
//! keep the engine awake across such gaps, and neither keeps an idle device busy:
//!
//! * **Adaptive window** (the adaptive-mutex heuristic): the window starts at
//!   [`crate::DeviceConfig::spin_us`]. A park that ends in a wake-up (doorbell, command,
//!   datagram) sooner than the cap ([`crate::DeviceConfig::max_spin_us`]) means spinning
//!   longer would have paid off: the window doubles, up to the cap. A park that lasts
//!   longer than twice the cap means the device really went idle: the window halves, down
//!   to `spin_us`. A park that ended on a transport deadline says nothing about the
//!   application and changes nothing unless it was long.
//! * **Application mid-work**: while a CQ holds completions the engine wrote and the
//!   application has not consumed yet, the application has work in hand and will be back
//!   (it is descheduled, or busy elsewhere, not idle): the engine keeps polling up to
//!   [`crate::DeviceConfig::busy_spin_us`] after the last progress. An application that
//!   leaves completions unpolled for good costs that long, once per burst, then the engine
//!   parks as usual.
//!
//! Pure logic on durations (no clock inside), so it is unit-tested directly.

use std::time::Duration;

/// Spin windows and their adaptation (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SpinPolicy {
    base: Duration,
    cap: Duration,
    busy: Duration,
    window: Duration,
}

impl SpinPolicy {
    /// A policy spinning at least `base`, adapting up to `cap`, and up to `busy` while the
    /// application has unconsumed completions. `cap` and `busy` are raised to `base` if
    /// smaller.
    pub(crate) fn new(base: Duration, cap: Duration, busy: Duration) -> SpinPolicy {
        let cap = cap.max(base);
        SpinPolicy {
            base,
            cap,
            busy: busy.max(base),
            window: base,
        }
    }

    /// Adopt new bounds (a device joined with another configuration), keeping the current
    /// window inside them.
    pub(crate) fn reconfigure(&mut self, base: Duration, cap: Duration, busy: Duration) {
        let w = self.window;
        *self = SpinPolicy::new(base, cap, busy);
        self.window = w.clamp(self.base, self.cap);
    }

    /// The current adaptive window.
    pub(crate) fn window(&self) -> Duration {
        self.window
    }

    /// The minimum window (`spin_us`).
    pub(crate) fn base(&self) -> Duration {
        self.base
    }

    /// How long after the last progress the engine keeps polling; `app_busy`: some CQ
    /// holds completions the application has not consumed.
    pub(crate) fn limit(&self, app_busy: bool) -> Duration {
        if app_busy {
            self.window.max(self.busy)
        } else {
            self.window
        }
    }

    /// A park that blocked for `slept` ended; `by_event`: something woke it (a doorbell,
    /// a control-plane kick or a datagram) rather than its timeout.
    pub(crate) fn parked(&mut self, slept: Duration, by_event: bool) {
        if by_event && slept < self.cap {
            self.window = self.window.saturating_mul(2).min(self.cap);
        } else if slept > self.cap.saturating_mul(2) {
            self.window = (self.window / 2).max(self.base);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    fn policy() -> SpinPolicy {
        SpinPolicy::new(50 * US, 4000 * US, 50_000 * US)
    }

    #[test]
    fn quick_wake_ups_grow_the_window_to_the_cap() {
        let mut p = policy();
        assert_eq!(p.window(), 50 * US);
        p.parked(300 * US, true);
        assert_eq!(p.window(), 100 * US);
        for _ in 0..20 {
            p.parked(3 * 1000 * US, true);
        }
        assert_eq!(p.window(), 4000 * US);
        // A timeout wake-up says nothing about the application.
        let mut q = policy();
        q.parked(300 * US, false);
        assert_eq!(q.window(), 50 * US);
    }

    #[test]
    fn long_parks_shrink_it_back_and_middling_ones_keep_it() {
        let mut p = policy();
        for _ in 0..10 {
            p.parked(10 * US, true);
        }
        assert_eq!(p.window(), 4000 * US);
        p.parked(6000 * US, true);
        assert_eq!(p.window(), 4000 * US);
        p.parked(Duration::from_secs(1), true);
        assert_eq!(p.window(), 2000 * US);
        for _ in 0..20 {
            p.parked(Duration::from_secs(1), false);
        }
        assert_eq!(p.window(), 50 * US);
    }

    #[test]
    fn busy_application_extends_the_limit_only_while_busy() {
        let p = policy();
        assert_eq!(p.limit(false), 50 * US);
        assert_eq!(p.limit(true), 50_000 * US);
        // Bounds below the base are raised to it.
        let q = SpinPolicy::new(2_000_000 * US, 10 * US, 10 * US);
        assert_eq!(q.limit(true), 2_000_000 * US);
        assert_eq!(q.limit(false), 2_000_000 * US);
        let mut r = policy();
        for _ in 0..10 {
            r.parked(10 * US, true);
        }
        r.reconfigure(100 * US, 1000 * US, 0 * US);
        assert_eq!(r.window(), 1000 * US);
        assert_eq!(r.limit(true), 1000 * US);
        assert_eq!(r.base(), 100 * US);
    }
}
