//! The few system calls the library makes on raw file descriptors: reading completion and
//! async events, waiting for readability, and the engine wake-up. All `unsafe` for fds
//! lives here; everything else in the crate uses these safe wrappers.
#![allow(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// Take ownership of an fd number the control plane created for this process (GET_CONTEXT
/// `async_fd`, CREATE_COMP_CHANNEL `fd`). Returns `None` for −1 or a number that is not an
/// open descriptor, so a misbehaving control plane cannot make us adopt a closed fd.
///
/// Ownership follows uverbs: the kernel installs these fds in the caller's table and the
/// caller closes them; in embedded mode the control plane passes them the same way (abi
/// `uverbs` module docs, "File descriptors in responses").
pub(crate) fn adopt_fd(raw: u32) -> Option<OwnedFd> {
    let fd = i32::try_from(raw).ok()?;
    if fd < 0 {
        return None;
    }
    // SAFETY: F_GETFD only reads the descriptor flags of `fd`; it has no memory effects.
    let open = unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1;
    if !open {
        return None;
    }
    // SAFETY: the control plane created `fd` for this context and hands its ownership to
    // the library (the ABI contract above); it is open (checked) and nothing else in this
    // process claims it, so wrapping it in an `OwnedFd` that closes it once is sound.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Put `fd` in non-blocking mode, so reads return `WouldBlock` and blocking is done with
/// [`wait_readable`] (which can time out and serve the async adapter).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor we borrow; F_GETFL/F_SETFL touch no memory.
    let flags = unsafe { libc::fcntl(raw, libc::F_GETFL) };
    if flags == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(raw, libc::F_SETFL, flags | libc::O_NONBLOCK) } == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `read(2)` into `buf`, retrying on EINTR.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the duration of the call.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Wait until `fd` is readable (or hung up) or `deadline` has passed (`None`: no deadline).
/// Returns `false` once the deadline has passed.
pub(crate) fn wait_until(
    fd: BorrowedFd<'_>,
    deadline: Option<std::time::Instant>,
) -> io::Result<bool> {
    let ms = match deadline {
        None => -1,
        Some(d) => {
            let left = d.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX)
        }
    };
    wait_readable(fd, ms)?;
    Ok(true)
}

/// Wait until `fd` is readable (or hung up), at most `timeout_ms` (−1 = forever).
/// Returns whether it is.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if n >= 0 {
            return Ok(n > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `poll(2)` over several descriptors (the async reactor).
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> io::Result<usize> {
    loop {
        // SAFETY: `fds` is a valid array of `fds.len()` pollfds for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// A new non-blocking, close-on-exec eventfd.
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd has no memory arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add 1 to an eventfd's counter (`write` of a native-endian u64 1). Errors are ignored:
/// EAGAIN means the counter is already huge, i.e. the reader will wake anyway.
pub(crate) fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local; an invalid `fd` only yields EBADF.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// The engine wake-up of [`abi::doorbell::Wake`]: one `write` to the `wake_fd` from
/// GET_CONTEXT (an eventfd the control plane duplicated for this context; ours to close).
#[derive(Debug)]
pub(crate) struct EventFdWake {
    /// `None` when the engine never parks.
    fd: Option<OwnedFd>,
}

impl EventFdWake {
    pub(crate) fn new(fd: Option<OwnedFd>) -> EventFdWake {
        EventFdWake { fd }
    }
}

impl abi::doorbell::Wake for EventFdWake {
    fn wake(&self) {
        if let Some(fd) = &self.fd {
            eventfd_signal(fd.as_raw_fd());
        }
    }
}

/// Reset an eventfd's count to 0 (not readable until the next add).
pub(crate) fn eventfd_drain(fd: BorrowedFd<'_>) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64.
    let _ = unsafe {
        libc::read(
            fd.as_raw_fd(),
            (&mut v as *mut u64).cast(),
            std::mem::size_of::<u64>(),
        )
    };
}

/// Four random bytes from the kernel, or `None` if it cannot give them now.
pub(crate) fn random_u32() -> Option<u32> {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    (n == 4).then_some(u32::from_ne_bytes(b))
}

/// A blocking, close-on-exec eventfd: a consumer may switch it to non-blocking itself (an
/// rdma_cm channel's fd), and readers here check readability before they read.
pub(crate) fn eventfd_blocking() -> io::Result<OwnedFd> {
    // SAFETY: eventfd has no memory arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
