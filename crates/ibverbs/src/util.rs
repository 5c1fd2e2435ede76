//! Small helpers shared by the exported functions: errno, panic containment, C strings.

use core::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Sets the calling thread's `errno`, as the C API reports most failures.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes
    // for the whole life of the thread.
    unsafe { *libc::__errno_location() = e }
}

/// Returns `r`, storing it in `errno` too when it is a positive errno value. rdma-core's `int`
/// verbs return the errno of a failure and leave the same value in `errno` (the failed uverbs
/// `write`/`ioctl` set it), and callers test either one.
pub(crate) fn errno_ret(r: c_int) -> c_int {
    if r > 0 {
        set_errno(r);
    }
    r
}

/// [`guard`] for an entry point returning 0 or a positive errno: a panic becomes EIO, and
/// every error value is also stored in `errno` ([`errno_ret`]).
pub(crate) fn guard_errno(f: impl FnOnce() -> c_int) -> c_int {
    errno_ret(guard(libc::EIO, f))
}

/// Whether `UROCE_DEBUG=1` asked for a line on stderr for each failed verb (read once).
pub(crate) fn debug_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("UROCE_DEBUG").is_some_and(|v| v == "1"))
}

/// The calling thread's `errno`.
pub(crate) fn errno() -> c_int {
    // SAFETY: as in `set_errno`, the slot is valid for reads.
    unsafe { *libc::__errno_location() }
}

/// Runs a slow-path entry point so that a bug surfaces as an error return (`on_panic`, errno
/// EIO) rather than unwinding into C, which would abort the application. The fast path does
/// not use this: it is written not to panic.
pub(crate) fn guard<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            set_errno(libc::EIO);
            on_panic
        }
    }
}

/// Whether `fd` is in non-blocking mode (`O_NONBLOCK`).
pub(crate) fn is_nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL only reads the descriptor's flags; an invalid fd yields −1.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// Puts `fd` in blocking mode, as the kernel hands out completion-channel and async-event
/// descriptors: applications that want non-blocking reads set `O_NONBLOCK` themselves, and
/// `ibv_get_cq_event`/`ibv_get_async_event` then fail with EAGAIN instead of waiting.
pub(crate) fn set_blocking(fd: c_int) {
    // SAFETY: F_GETFL/F_SETFL only read and change the descriptor's status flags.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

/// Copies `s` into a fixed-size C `char` array, truncating, always NUL-terminated, and
/// zero-filling the rest (so no stale bytes leak into a struct the application can read).
pub(crate) fn fill_cstr(dst: &mut [c_char], s: &str) {
    dst.fill(0);
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
}

/// Reads a C string argument; `None` for NULL or non-UTF-8 text.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid for `'a`.
pub(crate) unsafe fn str_arg<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// The text of a fixed-size C `char` array up to its first NUL.
pub(crate) fn array_str(a: &[c_char]) -> &str {
    // SAFETY: `c_char` and `u8` have the same size and alignment; the slice covers exactly
    // the same memory, borrowed for the same lifetime.
    let bytes = unsafe { core::slice::from_raw_parts(a.as_ptr().cast::<u8>(), a.len()) };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    core::str::from_utf8(bytes.get(..end).unwrap_or(&[])).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_cstr_truncates_and_terminates() {
        let mut a = [1 as c_char; 4];
        fill_cstr(&mut a, "abcdef");
        assert_eq!(a, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
        fill_cstr(&mut a, "x");
        assert_eq!(a, [b'x' as c_char, 0, 0, 0]);
        assert_eq!(array_str(&a), "x");
    }

    #[test]
    fn blocking_mode_round_trip() {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) };
        assert_eq!(rc, 0);
        assert!(is_nonblocking(fds[0]));
        set_blocking(fds[0]);
        assert!(!is_nonblocking(fds[0]));
        assert!(!is_nonblocking(-1));
        // SAFETY: closing the descriptors this test opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn errors_are_stored_in_errno() {
        set_errno(0);
        assert_eq!(guard_errno(|| 0), 0);
        assert_eq!(errno(), 0);
        assert_eq!(guard_errno(|| libc::EBUSY), libc::EBUSY);
        assert_eq!(errno(), libc::EBUSY);
        set_errno(libc::ENOENT);
        assert_eq!(errno_ret(-1), -1);
        assert_eq!(errno(), libc::ENOENT);
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = guard_errno(|| panic!("boom"));
        std::panic::set_hook(prev);
        assert_eq!((r, errno()), (libc::EIO, libc::EIO));
    }

    #[test]
    fn guard_turns_panic_into_error_value() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = guard(-1, || -> i32 { panic!("boom") });
        std::panic::set_hook(prev);
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::EIO);
        assert_eq!(guard(-1, || 7), 7);
    }
}

/// A lock held by one thread across calls (from `ibv_start_poll` to `ibv_end_poll`, from
/// `ibv_wr_start` to `ibv_wr_complete`), as rxe holds a spinlock there. Unlike a spinlock,
/// a second `acquire` by the thread that already holds it takes it over instead of
/// deadlocking, and `held` tells whether the calling thread holds it, so calls made outside
/// the bracket, or from another thread, can be refused.
#[derive(Debug, Default)]
pub(crate) struct OwnerLock(std::sync::atomic::AtomicUsize);

thread_local! {
    static THREAD_TOKEN: u8 = const { 0 };
}

/// A non-zero value unique to the calling thread while it lives.
fn thread_token() -> usize {
    THREAD_TOKEN.with(|t| core::ptr::from_ref(t) as usize)
}

impl OwnerLock {
    /// Takes the lock for the calling thread, waiting while another thread holds it.
    pub(crate) fn acquire(&self) {
        use std::sync::atomic::Ordering;
        let me = thread_token();
        loop {
            match self
                .0
                .compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(cur) if cur == me => return,
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// Whether the calling thread holds the lock.
    pub(crate) fn held(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) == thread_token()
    }

    /// Releases the lock if the calling thread holds it.
    pub(crate) fn release(&self) {
        use std::sync::atomic::Ordering;
        let me = thread_token();
        let _ = self
            .0
            .compare_exchange(me, 0, Ordering::Release, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod owner_lock_tests {
    use super::OwnerLock;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[test]
    fn owner_lock_is_per_thread_and_reentrant() {
        let l = Arc::new(OwnerLock::default());
        assert!(!l.held());
        l.acquire();
        assert!(l.held());
        // The owner taking it again does not deadlock.
        l.acquire();
        assert!(l.held());
        // Another thread neither holds it nor can release it; its acquire waits until the
        // owner releases.
        let got = Arc::new(AtomicBool::new(false));
        let (l2, got2) = (Arc::clone(&l), Arc::clone(&got));
        let t = std::thread::spawn(move || {
            assert!(!l2.held());
            l2.release();
            l2.acquire();
            got2.store(true, Ordering::SeqCst);
            assert!(l2.held());
            l2.release();
        });
        // Whatever the scheduling, the other thread cannot have it while we hold it.
        std::thread::yield_now();
        assert!(l.held());
        assert!(!got.load(Ordering::SeqCst));
        l.release();
        t.join().unwrap();
        assert!(got.load(Ordering::SeqCst));
        assert!(!l.held());
    }
}
