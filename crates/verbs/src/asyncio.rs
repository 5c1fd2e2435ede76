//! A minimal async adapter for the completion channel and async event fds.
//!
//! [`Readable`] is a future that resolves when a file descriptor becomes readable. It
//! needs no runtime: a small process-wide reactor thread (started on first use) waits in
//! `poll(2)` on every registered fd and wakes the task. It works under any executor,
//! including the tiny [`block_on`] here. Users of tokio can instead wrap the channel's fd
//! (it implements `AsFd`) in `tokio::io::unix::AsyncFd` and skip the reactor thread.
//!
//! The reactor is only for event mode; the fast path never touches it.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use crate::sys;

struct Reactor {
    /// Interrupts the reactor's poll when registrations change.
    notify: OwnedFd,
    entries: Mutex<HashMap<u64, (RawFd, Waker)>>,
    next: AtomicU64,
}

fn reactor() -> io::Result<&'static Reactor> {
    static REACTOR: OnceLock<Option<Reactor>> = OnceLock::new();
    REACTOR
        .get_or_init(|| {
            let notify = sys::eventfd().ok()?;
            let r = Reactor {
                notify,
                entries: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
            };
            Some(r)
        })
        .as_ref()
        .inspect(|r| start_thread(r))
        .ok_or_else(|| io::Error::other("cannot create the reactor's eventfd"))
}

fn start_thread(r: &'static Reactor) {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        // If the thread cannot start, futures stay pending; report it loudly instead.
        if let Err(e) = std::thread::Builder::new()
            .name("verbs-reactor".into())
            .spawn(move || r.run())
        {
            eprintln!("verbs: cannot start the async reactor thread: {e}");
        }
    });
}

impl Reactor {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, (RawFd, Waker)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut tokens: Vec<u64> = Vec::new();
        let mut drain = [0u8; 8];
        loop {
            fds.clear();
            tokens.clear();
            fds.push(libc::pollfd {
                fd: self.notify.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
            for (t, (fd, _)) in self.lock().iter() {
                fds.push(libc::pollfd {
                    fd: *fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
                tokens.push(*t);
            }
            if sys::poll(&mut fds, -1).is_err() {
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            }
            if fds.first().is_some_and(|p| p.revents != 0) {
                let _ = sys::read(self.notify.as_fd(), &mut drain);
            }
            let ready: Vec<u64> = fds
                .iter()
                .skip(1)
                .zip(&tokens)
                .filter(|(p, _)| p.revents != 0)
                .map(|(_, t)| *t)
                .collect();
            if !ready.is_empty() {
                let mut entries = self.lock();
                for t in ready {
                    // Readable, hung up, or closed (POLLNVAL): wake once and forget the
                    // entry; the future re-registers if it still has to wait.
                    if let Some((_, w)) = entries.remove(&t) {
                        w.wake();
                    }
                }
            }
        }
    }

    fn register(&self, token: u64, fd: RawFd, waker: &Waker) {
        self.lock().insert(token, (fd, waker.clone()));
        sys::eventfd_signal(self.notify.as_raw_fd());
    }

    fn deregister(&self, token: u64) {
        // No need to interrupt the poll: a stale entry wakes at most once, spuriously.
        self.lock().remove(&token);
    }
}

/// A future that resolves when `fd` is readable (or hung up).
#[derive(Debug)]
pub struct Readable<'a> {
    fd: BorrowedFd<'a>,
    token: Option<u64>,
}

impl<'a> Readable<'a> {
    /// Wait for `fd` to become readable.
    pub fn new(fd: BorrowedFd<'a>) -> Readable<'a> {
        Readable { fd, token: None }
    }
}

impl Future for Readable<'_> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        match sys::wait_readable(self.fd, 0) {
            Ok(true) => return Poll::Ready(Ok(())),
            Ok(false) => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
        let r = match reactor() {
            Ok(r) => r,
            Err(e) => return Poll::Ready(Err(e)),
        };
        let token = *self
            .token
            .get_or_insert_with(|| r.next.fetch_add(1, Ordering::Relaxed));
        // Level-triggered: if the fd became readable after the check above, the reactor's
        // poll returns at once and wakes us.
        r.register(token, self.fd.as_raw_fd(), cx.waker());
        Poll::Pending
    }
}

impl Drop for Readable<'_> {
    fn drop(&mut self) {
        if let (Some(t), Ok(r)) = (self.token, reactor()) {
            r.deregister(t);
        }
    }
}

struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Run a future to completion on the current thread (parks between wake-ups). Enough for
/// examples and tests of the async adapter; real programs use their executor.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_resolves_when_another_thread_signals() {
        let fd = sys::eventfd().unwrap();
        let raw = fd.as_raw_fd();
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            sys::eventfd_signal(raw);
        });
        block_on(Readable::new(fd.as_fd())).unwrap();
        assert!(sys::wait_readable(fd.as_fd(), 0).unwrap());
        t.join().unwrap();
        // Already readable: resolves without the reactor.
        block_on(Readable::new(fd.as_fd())).unwrap();
    }
}
