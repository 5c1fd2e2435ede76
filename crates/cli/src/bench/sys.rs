//! `getrusage(2)` for `bench compare`: CPU time and context switches, per process or per
//! thread (the standard library has no wrapper).
#![allow(unsafe_code)]

use std::time::Duration;

/// Which resource usage to read.
#[derive(Clone, Copy, Debug)]
pub enum Who {
    /// The whole process (every thread: the application, the engine, the control plane).
    Process,
    /// The calling thread only.
    Thread,
}

/// The part of `struct rusage` the comparison uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// User plus system CPU time.
    pub cpu: Duration,
    /// Voluntary plus involuntary context switches.
    pub ctx_switches: u64,
}

impl Usage {
    /// `later − self`, saturating.
    pub fn delta(&self, later: &Usage) -> Usage {
        Usage {
            cpu: later.cpu.saturating_sub(self.cpu),
            ctx_switches: later.ctx_switches.saturating_sub(self.ctx_switches),
        }
    }
}

fn tv(t: libc::timeval) -> Duration {
    Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
        + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
}

/// Reads the resource usage; `None` if the call fails.
pub fn usage(who: Who) -> Option<Usage> {
    let which = match who {
        Who::Process => libc::RUSAGE_SELF,
        Who::Thread => libc::RUSAGE_THREAD,
    };
    // SAFETY: `rusage` is plain old data, so all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `struct rusage` for the duration of the call, and
    // `which` is one of the two values getrusage accepts here.
    let rc = unsafe { libc::getrusage(which, &mut ru) };
    if rc != 0 {
        return None;
    }
    Some(Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        ctx_switches: u64::try_from(ru.ru_nvcsw).unwrap_or(0)
            + u64::try_from(ru.ru_nivcsw).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_with_work() {
        // Spin until this thread has used 5 ms of CPU (bounded in wall time, so a loaded
        // machine only makes it slower): the thread's figure must see it.
        let a = usage(Who::Thread).expect("getrusage");
        let start = std::time::Instant::now();
        let mut x = 0u64;
        let mut b = a;
        while a.delta(&b).cpu < Duration::from_millis(5)
            && start.elapsed() < Duration::from_secs(20)
        {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            b = usage(Who::Thread).expect("getrusage");
        }
        assert!(a.delta(&b).cpu >= Duration::from_millis(5), "{a:?} {b:?}");
        assert!(usage(Who::Process).expect("getrusage").cpu >= b.cpu);
    }
}
