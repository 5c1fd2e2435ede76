//! Small pieces shared by `uroce bench` and `uroce pingpong`: random PSNs, waiting for
//! completions (busy polling or completion events) with a stall watchdog, and the
//! nanosecond clock the measurements use.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use uroce::{CompChannel, Cq, Wc};

/// A random 32-bit value (the standard library's randomly keyed hasher, so no extra
/// dependency): for PSNs, as `lrand48() & 0xffffff` in the C tools.
pub fn random_u32() -> u32 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() >> 16) as u32
}

/// A random 24-bit PSN.
pub fn random_psn() -> u32 {
    random_u32() & 0xff_ffff
}

/// Nanoseconds since the first call in this process: the measurement clock. `Instant`
/// reads `CLOCK_MONOTONIC` through the vDSO, so taking a timestamp makes no system call.
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Empty polls between two checks of the clock (and two `sched_yield`s while yielding).
const SPINS_PER_CHECK: u32 = 256;
/// A gap this long between two clock checks of one wait (they are a few microseconds of
/// polling apart) means the thread lost its core to another.
const PREEMPTED: Duration = Duration::from_micros(200);
/// After a preemption, the cores count as oversubscribed, and waits yield, this long.
const CONTENDED_HOLD: Duration = Duration::from_millis(100);

/// Gives up when a wait makes no progress for `limit`: a peer that died or a lost UD
/// datagram would otherwise make a busy loop spin forever (the C tools do).
#[derive(Debug)]
pub struct Watchdog {
    limit: Duration,
    last_progress: Instant,
    spins: u32,
    /// Call `sched_yield` every `SPINS_PER_CHECK` empty polls while the cores are
    /// oversubscribed: when more threads spin than there are cores (both ends in one
    /// process, plus the engine), yielding lets the others run (docs/architecture.md §4
    /// "Threads"). Only then: with a core to itself a wait that yields makes a system call
    /// per wait, so a run's calls would grow with its length (docs/architecture.md §3).
    yield_cpu: bool,
    /// The clock at this wait's previous check (`None` right after progress).
    checked: Option<Instant>,
    /// Yield until then (set when a wait finds it was preempted).
    contended_until: Option<Instant>,
}

impl Watchdog {
    /// A watchdog allowing `limit` without progress.
    pub fn new(limit: Duration, yield_cpu: bool) -> Watchdog {
        Watchdog {
            limit,
            last_progress: Instant::now(),
            spins: 0,
            yield_cpu,
            checked: None,
            contended_until: None,
        }
    }

    /// Something happened: restart the stall clock.
    pub fn progress(&mut self) {
        self.spins = 0;
        self.last_progress = Instant::now();
        self.checked = None;
    }

    /// Nothing happened this time; errors after `limit` without progress. `what` names
    /// what was awaited.
    pub fn idle(&mut self, what: &dyn Fn() -> String) -> Result<()> {
        self.spins += 1;
        if self.spins < SPINS_PER_CHECK {
            std::hint::spin_loop();
            return Ok(());
        }
        self.spins = 0;
        if self.yield_cpu {
            let now = Instant::now();
            if self
                .checked
                .is_some_and(|t| now.duration_since(t) > PREEMPTED)
            {
                self.contended_until = Some(now + CONTENDED_HOLD);
            }
            self.checked = Some(now);
            if self.contended_until.is_some_and(|t| now < t) {
                std::thread::yield_now();
            }
        }
        if self.last_progress.elapsed() > self.limit {
            bail!(
                "no progress for {} s while waiting for {}",
                self.limit.as_secs(),
                what()
            );
        }
        Ok(())
    }

    /// Time left before the watchdog fires (for blocking waits).
    pub fn remaining(&self) -> Duration {
        self.limit.saturating_sub(self.last_progress.elapsed())
    }
}

/// Polls `cq` until at least one completion arrives. With a completion channel
/// (`-e`), it sleeps on the channel between polls (arm, re-poll, wait, acknowledge), as
/// the C tools do with `ibv_req_notify_cq` / `ibv_get_cq_event`; without, it busy-polls.
pub fn wait_cq(
    cq: &Cq,
    channel: Option<&CompChannel>,
    wc: &mut [Wc],
    dog: &mut Watchdog,
    what: &dyn Fn() -> String,
) -> Result<usize> {
    loop {
        let n = cq.poll(wc)?;
        if n > 0 {
            dog.progress();
            return Ok(n);
        }
        match channel {
            None => dog.idle(what)?,
            Some(ch) => {
                cq.req_notify(false)?;
                // A completion may have arrived before the CQ was armed.
                let n = cq.poll(wc)?;
                if n > 0 {
                    dog.progress();
                    return Ok(n);
                }
                let left = dog.remaining();
                if left.is_zero() {
                    bail!("no completion event while waiting for {}", what());
                }
                if let Some(ev_cq) = ch.get_event(Some(left))? {
                    ev_cq.ack_events(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bits_and_varies() {
        let a: Vec<u32> = (0..16).map(|_| random_psn()).collect();
        assert!(a.iter().all(|&p| p <= 0xff_ffff));
        assert!(a.iter().any(|&p| p != a[0]), "16 equal PSNs: {a:?}");
    }

    #[test]
    fn watchdog_fires_after_its_limit() {
        let mut d = Watchdog::new(Duration::from_millis(20), false);
        let start = Instant::now();
        let err = loop {
            if let Err(e) = d.idle(&|| "nothing".to_string()) {
                break e;
            }
        };
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(err.to_string().contains("waiting for nothing"), "{err}");
        d.progress();
        assert!(d.remaining() > Duration::from_millis(10));
    }
}
