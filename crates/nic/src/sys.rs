//! The Linux system calls the NIC needs beyond `std`: eventfd, epoll, `SOCK_SEQPACKET`
//! socketpairs, `send(MSG_NOSIGNAL)`, PMTU discovery on the UDP socket, and batched datagram
//! I/O (`recvmmsg`/`sendmmsg`).
//!
//! Every `unsafe` block here is a system call or a plain-old-data conversion; each says why
//! it holds. Nothing here keeps a raw pointer across calls: the `mmsghdr` arrays of
//! [`MsgBatch`] are rewritten from the caller's buffers right before every call.
#![allow(unsafe_code)]

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use libc::{c_int, c_void};

fn cvt(r: c_int) -> io::Result<c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn is_would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// A non-blocking, close-on-exec eventfd (counter semantics: wake-ups are tokens, never lost).
pub(crate) fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just created by the kernel and belongs to no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add 1 to an eventfd. Errors are ignored: the only possible one on a valid eventfd is
/// EAGAIN when the counter is saturated, which already means "signalled".
pub(crate) fn eventfd_signal(fd: BorrowedFd<'_>) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast::<c_void>(), 8) };
}

/// How many CPUs the calling thread may run on (its affinity mask), if the kernel says.
pub(crate) fn cpus_allowed() -> Option<u32> {
    // SAFETY: cpu_set_t is plain data; all-zero is a valid (empty) set.
    let mut set: libc::cpu_set_t = unsafe { zeroed() };
    // SAFETY: the kernel writes at most size_of::<cpu_set_t>() bytes into the live local.
    let r = unsafe { libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    // SAFETY: CPU_COUNT only reads the set.
    u32::try_from(unsafe { libc::CPU_COUNT(&set) }).ok()
}

/// Reset an eventfd's counter (non-blocking read).
pub(crate) fn eventfd_drain(fd: BorrowedFd<'_>) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live local.
    let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast::<c_void>(), 8) };
}

/// Close a descriptor this process was handed in a reply of its own device (the fuzz
/// harness plays the library, which owns the fds in GET_CONTEXT and CREATE_COMP_CHANNEL
/// replies). Negative numbers are ignored.
pub(crate) fn close_handed_fd(fd: i32) {
    if fd >= 0 {
        // SAFETY: the device created this descriptor for the library and transferred it in
        // the reply; nothing else in the process owns it, so taking ownership to close it
        // cannot close a descriptor someone else uses.
        drop(unsafe { OwnedFd::from_raw_fd(fd) });
    }
}

/// A close-on-exec `AF_UNIX`/`SOCK_SEQPACKET` pair: every `send` is one message, so each
/// completion or async event is read whole (8 or 16 bytes), as from the kernel's event files.
pub(crate) fn seqpacket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [c_int; 2] = [-1, -1];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    cvt(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: both descriptors were just created and belong to no one else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One message from a datagram or seqpacket socket if one waits (`MSG_DONTWAIT`).
pub(crate) fn recv_message_nowait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is a live, writable slice of `buf.len()` bytes.
    let r = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast::<c_void>(),
            buf.len(),
            libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Take ownership of a descriptor a command reply handed to the library (GET_CONTEXT's
/// `async_fd` and `wake_fd`, a completion channel's fd), for a caller inside this crate
/// that plays the library.
pub(crate) fn adopt_handed_fd(fd: i32) -> Option<OwnedFd> {
    // SAFETY: the reply made the caller the descriptor's only owner (crate docs: those
    // descriptors belong to the library from then on); nothing else closes it.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Send one message without blocking and without SIGPIPE (the reader may be gone).
pub(crate) fn send_message(fd: BorrowedFd<'_>, msg: &[u8]) -> io::Result<usize> {
    // SAFETY: `msg` is a live slice of `msg.len()` bytes.
    let r = unsafe {
        libc::send(
            fd.as_raw_fd(),
            msg.as_ptr().cast::<c_void>(),
            msg.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// Send all of `buf` on a stream socket, blocking (up to the socket's send timeout), without
/// SIGPIPE: a tool that went away is an error here, not a signal in the traced program.
pub(crate) fn send_all(fd: BorrowedFd<'_>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        // SAFETY: `buf` is a live slice of `buf.len()` bytes.
        let r = unsafe {
            libc::send(
                fd.as_raw_fd(),
                buf.as_ptr().cast::<c_void>(),
                buf.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        buf = buf.get(r as usize..).unwrap_or(&[]);
    }
    Ok(())
}

/// Whether the other end of a stream socket has closed it (bytes it sent are discarded).
pub(crate) fn peer_closed(fd: BorrowedFd<'_>) -> bool {
    let mut b = [0u8; 64];
    loop {
        // SAFETY: `b` is a live buffer of `b.len()` bytes.
        let r = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                b.as_mut_ptr().cast::<c_void>(),
                b.len(),
                libc::MSG_DONTWAIT,
            )
        };
        match r {
            0 => return true,
            n if n > 0 => continue,
            _ => return !is_would_block(&io::Error::last_os_error()),
        }
    }
}

/// Receive into `buf` from a Unix socket, and the descriptors that came with it. Returns
/// the byte count (0: end of stream).
pub(crate) fn recv_with_fds(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut ctrl = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast::<c_void>(),
        iov_len: buf.len(),
    };
    // SAFETY: all-zero is a valid msghdr; the fields are set below.
    let mut m: libc::msghdr = unsafe { zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = ctrl.as_mut_ptr().cast::<c_void>();
    m.msg_controllen = size_of::<[u64; 8]>();
    // SAFETY: `m` points at `buf` and `ctrl`, both alive and writable during the call.
    let r = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut m, libc::MSG_CMSG_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut got: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control messages into
    // `ctrl`; every descriptor in an SCM_RIGHTS message is new and ours to own.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let n = ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<c_int>();
                let data = libc::CMSG_DATA(c).cast::<c_int>();
                for k in 0..n {
                    got.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(k))));
                }
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
    }
    Ok((r as usize, got))
}

/// Make descriptor `fd` refer to a fresh, unbound UDP socket of the same family, closing
/// what it referred to (`dup2`): a device whose daemon died gives back the daemon's port
/// (so a restarted daemon can bind it) while every copy of the number stays valid.
pub(crate) fn release_udp(fd: BorrowedFd<'_>, v6: bool) -> io::Result<()> {
    let fresh = if v6 {
        UdpSocket::bind("[::]:0")
    } else {
        UdpSocket::bind("0.0.0.0:0")
    }?;
    // SAFETY: dup2 onto a descriptor this process owns (borrowed for the call); the old file
    // is closed atomically and the number stays allocated.
    cvt(unsafe { libc::dup2(fresh.as_raw_fd(), fd.as_raw_fd()) })?;
    Ok(())
}

/// A Unix socket's `SO_SNDBUF` / `SO_RCVBUF` (best effort).
pub(crate) fn set_bufs(fd: BorrowedFd<'_>, bytes: c_int) {
    let _ = setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, bytes);
    let _ = setsockopt_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, bytes);
}

/// Send one message made of `a` then `b` without blocking and without SIGPIPE.
pub(crate) fn send_two(fd: BorrowedFd<'_>, a: &[u8], b: &[u8]) -> io::Result<()> {
    let mut iov = [
        libc::iovec {
            iov_base: a.as_ptr() as *mut c_void,
            iov_len: a.len(),
        },
        libc::iovec {
            iov_base: b.as_ptr() as *mut c_void,
            iov_len: b.len(),
        },
    ];
    // SAFETY: all-zero is a valid msghdr; the fields are set below.
    let mut m: libc::msghdr = unsafe { zeroed() };
    m.msg_iov = iov.as_mut_ptr();
    m.msg_iovlen = 2;
    // SAFETY: `m` points at two live, read-only slices (sendmsg does not write them).
    let r = unsafe { libc::sendmsg(fd.as_raw_fd(), &m, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A signalfd for SIGINT and SIGTERM, which it blocks for normal delivery (call before
/// starting threads, so they inherit the mask).
pub(crate) fn signal_fd() -> io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local, zero-initialised set; signalfd returns a new
    // descriptor or -1.
    unsafe {
        let mut set: libc::sigset_t = zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Read and discard what a non-blocking descriptor holds (a signalfd's records).
pub(crate) fn drain_fd(fd: BorrowedFd<'_>) {
    let mut b = [0u8; 512];
    // SAFETY: reads into a local buffer of the stated length.
    while unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast::<c_void>(), b.len()) } > 0 {}
}

/// A new memfd of `len` bytes (close-on-exec).
pub(crate) fn memfd(name: &std::ffi::CStr, len: usize) -> io::Result<OwnedFd> {
    // SAFETY: memfd_create takes a NUL-terminated name and returns a new descriptor or -1.
    let fd = cvt(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: the descriptor was just created and belongs to no one else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on a descriptor we own.
    cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) })?;
    Ok(fd)
}

/// A shared read-write mapping of the first `len` bytes of `fd`; unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory valid until drop; who accesses it, and how, is the
// business of the `SharedMem` built on it (atomic words only).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(crate) fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of a descriptor we hold; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: p.cast::<u8>(),
            len,
        })
    }

    /// The mapping as a region of atomic words. The `SharedMem` must be dropped before this
    /// mapping (the caller keeps both in one owner, mapping last).
    pub(crate) fn region(&self) -> io::Result<abi::shm::SharedMem> {
        // SAFETY: `ptr..ptr+len` is a live shared mapping until `self` drops, which the
        // caller orders after every user of the region; every access through `SharedMem` is
        // atomic, and the only other accessor is another process.
        unsafe { abi::shm::SharedMem::from_raw_parts(self.ptr, self.len) }
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range `shared` mapped.
        unsafe { libc::munmap(self.ptr.cast::<c_void>(), self.len) };
    }
}

/// Send `msg` with several descriptors attached (`SCM_RIGHTS`), blocking, all of it.
pub(crate) fn send_with_fds(
    sock: BorrowedFd<'_>,
    msg: &[u8],
    pass: &[BorrowedFd<'_>],
    flags: c_int,
) -> io::Result<()> {
    let n = pass.len().min(4);
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((n * size_of::<c_int>()) as u32) } as usize;
    let mut ctrl = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut c_void,
        iov_len: msg.len(),
    };
    // SAFETY: all-zero is a valid msghdr; the fields are set below.
    let mut m: libc::msghdr = unsafe { zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    if n > 0 {
        m.msg_control = ctrl.as_mut_ptr().cast::<c_void>();
        m.msg_controllen = space;
        // SAFETY: `ctrl` (64 bytes) has room for one control message with up to 4 ints;
        // CMSG_FIRSTHDR/CMSG_DATA point inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN((n * size_of::<c_int>()) as u32) as usize;
            let data = libc::CMSG_DATA(c).cast::<c_int>();
            for (k, fd) in pass.iter().take(n).enumerate() {
                std::ptr::write_unaligned(data.add(k), fd.as_raw_fd());
            }
        }
    }
    // SAFETY: `m` points at `iov` (a live slice) and `ctrl`, both alive during the call.
    let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &m, libc::MSG_NOSIGNAL | flags) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if (r as usize) < msg.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "short send of a message with descriptors",
        ));
    }
    Ok(())
}

/// An epoll instance.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

/// Readable.
pub(crate) const EPOLLIN: u32 = libc::EPOLLIN as u32;
/// Writable.
pub(crate) const EPOLLOUT: u32 = libc::EPOLLOUT as u32;
/// Hang-up / error (always reported).
pub(crate) const EPOLLHUP_ERR: u32 = (libc::EPOLLHUP | libc::EPOLLERR | libc::EPOLLRDHUP) as u32;

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` was just created by the kernel and belongs to no one else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    fn ctl(&self, op: c_int, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` is a live epoll_event; the kernel copies it.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(|_| ())
    }

    pub(crate) fn add(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    pub(crate) fn modify(&self, fd: RawFd, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    pub(crate) fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Wait up to `timeout_ms` (−1 = forever); returns `(token, events)` pairs in `out`.
    /// Wait for events at most `timeout` (`None`: forever), with nanosecond resolution
    /// (`epoll_pwait2`, Linux 5.11), or in whole milliseconds rounded up where the kernel
    /// lacks it.
    pub(crate) fn wait_for(
        &self,
        out: &mut Vec<(u64, u32)>,
        timeout: Option<std::time::Duration>,
    ) -> io::Result<()> {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        static NO_PWAIT2: AtomicBool = AtomicBool::new(false);
        let Some(t) = timeout else {
            return self.wait(out, -1);
        };
        if !NO_PWAIT2.load(Relaxed) {
            const N: usize = 64;
            // SAFETY: epoll_event is plain data; all-zero is a valid value.
            let mut evs: [libc::epoll_event; N] = unsafe { zeroed() };
            let ts = libc::timespec {
                tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
            };
            // SAFETY: `evs` has room for N events, `ts` is a live timespec, and a null
            // signal mask means "unchanged" (epoll_pwait2(2)).
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd.as_raw_fd(),
                    evs.as_mut_ptr(),
                    N as c_int,
                    &ts as *const libc::timespec,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            out.clear();
            if r >= 0 {
                for ev in evs.iter().take(r as usize) {
                    let (token, events) = (ev.u64, ev.events);
                    out.push((token, events));
                }
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOSYS) {
                return if is_would_block(&e) || e.kind() == io::ErrorKind::Interrupted {
                    Ok(())
                } else {
                    Err(e)
                };
            }
            NO_PWAIT2.store(true, Relaxed);
        }
        let ms = t.as_nanos().div_ceil(1_000_000);
        self.wait(out, i32::try_from(ms).unwrap_or(i32::MAX))
    }

    pub(crate) fn wait(&self, out: &mut Vec<(u64, u32)>, timeout_ms: i32) -> io::Result<()> {
        const N: usize = 64;
        // SAFETY: epoll_event is plain data; all-zero is a valid value.
        let mut evs: [libc::epoll_event; N] = unsafe { zeroed() };
        // SAFETY: `evs` has room for N events.
        let r = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                evs.as_mut_ptr(),
                N as c_int,
                timeout_ms,
            )
        };
        out.clear();
        if r < 0 {
            let e = io::Error::last_os_error();
            return if is_would_block(&e) { Ok(()) } else { Err(e) };
        }
        for ev in evs.iter().take(r as usize) {
            let (token, events) = (ev.u64, ev.events);
            out.push((token, events));
        }
        Ok(())
    }
}

/// Bind the device's RoCEv2 UDP socket: `addr:4791`, non-blocking, PMTU discovery "do" so
/// IPv4 datagrams leave with DF set and IP ID 0 (the ICRC covers both; rxe-lab README,
/// "Notes for a user-space RoCEv2 implementation"), and larger buffers for bursts.
/// A link-local IPv6 address is bound with its interface as the scope
/// ([`with_link_local_scope`]).
pub(crate) fn bind_roce_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let addr = with_link_local_scope(addr)?;
    let sock = UdpSocket::bind(addr)?;
    let fd = sock.as_raw_fd();
    let (level, name, val) = match addr {
        SocketAddr::V4(_) => (
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        ),
        SocketAddr::V6(_) => (
            libc::IPPROTO_IPV6,
            libc::IPV6_MTU_DISCOVER,
            libc::IPV6_PMTUDISC_DO,
        ),
    };
    setsockopt_int(fd, level, name, val)?;
    if addr.is_ipv6() {
        // RoCEv2 senders may leave the UDP checksum 0 over IPv6 too (Linux rxe does: every
        // IPv6 packet in testdata/interop/*ipv6*.pcap), which RFC 8200 forbids unless the
        // receiving socket opts in (RFC 6936); without this the kernel drops them all
        // (Udp6InCsumErrors). The ICRC protects the payload instead.
        setsockopt_int(fd, libc::SOL_UDP, libc::UDP_NO_CHECK6_RX, 1)?;
    }
    // Best effort: coalesced receives (UDP GRO, Linux 5.0). A run of same-size datagrams of
    // one flow then arrives as one buffer, with the segment size in a control message
    // (`MsgBatch::received`) — on loopback a GSO send (`MsgBatch::send`) arrives whole.
    let _ = setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1);
    // Best effort: the kernel caps these at rmem_max / wmem_max.
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, 4 << 20);
    let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, 4 << 20);
    sock.set_nonblocking(true)?;
    Ok(sock)
}

/// ECN on the device's socket (docs/wire.md §11.1): with `ecn`, every datagram leaves
/// ECN-capable — ECT(0) in the IPv4 TOS / IPv6 traffic class, DSCP 0 (`IP_TOS` /
/// `IPV6_TCLASS`) — as a RoCE NIC with DCQCN sends; without, not-ECT. Either way the kernel
/// reports each received datagram's TOS / traffic class (`IP_RECVTOS` / `IPV6_RECVTCLASS`),
/// which [`MsgBatch::received`] reads, so a CE mark is seen.
pub(crate) fn set_ecn(sock: &UdpSocket, ecn: bool) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    let tos = if ecn { ECT0 } else { 0 };
    if sock.local_addr()?.is_ipv6() {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_TCLASS, tos)?;
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)
    } else {
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, tos)?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)
    }
}

/// ECN codepoints (RFC 3168 §5): ECT(0) and CE.
pub(crate) const ECT0: c_int = 0b10;
pub(crate) const CE: u8 = 0b11;

/// Linux binds a link-local IPv6 address (fe80::/10) only with a scope id, the index of the
/// interface that holds it (EINVAL otherwise), but a device is configured with a bare address
/// (`UROCE_DEVICES=uroce0=fe80::1`, and a GID carries no scope either). So the interface is
/// looked up in `/proc/net/if_inet6` (this process's network namespace). Bound that way the
/// socket also sends to link-local peers given without a scope through that interface (the
/// kernel falls back to the socket's bound device), which is how the RoCEv2 link-local GIDs of
/// Linux rxe (its GID index 0) are reached. Other addresses are returned unchanged.
pub(crate) fn with_link_local_scope(addr: SocketAddr) -> io::Result<SocketAddr> {
    let SocketAddr::V6(a) = addr else {
        return Ok(addr);
    };
    if a.scope_id() != 0 || !a.ip().is_unicast_link_local() {
        return Ok(addr);
    }
    let table = std::fs::read_to_string("/proc/net/if_inet6")?;
    let ifindex = ifindex_of_v6(&table, *a.ip()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("link-local address {} is not on any interface", a.ip()),
        )
    })?;
    Ok(SocketAddr::V6(SocketAddrV6::new(
        *a.ip(),
        a.port(),
        a.flowinfo(),
        ifindex,
    )))
}

/// The interface index of `addr` in `/proc/net/if_inet6` text: one line per address, the
/// address as 32 hex digits, then the interface index, prefix length, scope and flags in
/// hex, then the interface name. Malformed lines are skipped.
pub(crate) fn ifindex_of_v6(table: &str, addr: Ipv6Addr) -> Option<u32> {
    let want = addr.octets();
    table.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let hex = fields.next()?;
        let index = fields.next()?;
        if hex.len() != 32 {
            return None;
        }
        let mut octets = [0u8; 16];
        for (i, o) in octets.iter_mut().enumerate() {
            *o = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        if octets != want {
            return None;
        }
        u32::from_str_radix(index, 16).ok()
    })
}

fn setsockopt_int(fd: RawFd, level: c_int, name: c_int, val: c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&val as *const c_int).cast::<c_void>(),
            size_of::<c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// `UDP_SEGMENT` (linux/udp.h): a send's segment size, as a socket option or control message.
const UDP_SEGMENT: c_int = 103;
/// `UDP_GRO` (linux/udp.h): receive coalesced datagrams; the control message gives their size.
const UDP_GRO: c_int = 104;
/// Datagrams one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS` is 64 before 6.9).
const GSO_MAX_SEGMENTS: usize = 64;
/// Bytes one GSO send may carry (the UDP length field, less room for headers).
const GSO_MAX_BYTES: usize = 65_000;

/// Preallocated headers for `recvmmsg` / `sendmmsg` of up to `cap` datagrams.
pub(crate) struct MsgBatch {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    addrs: Vec<libc::sockaddr_storage>,
    /// One control-message buffer per header (a GSO segment size out; a GRO one and the
    /// TOS / traffic class in).
    ctrl: Vec<[u64; 8]>,
    /// Datagrams in each header of the last send.
    groups: Vec<usize>,
}

/// What [`MsgBatch::send`] did.
#[derive(Debug)]
pub(crate) enum Sent {
    /// The kernel took this many datagrams (0: its buffer is full).
    Took(usize),
    /// It refused the first message, which held this many datagrams (more than one: a GSO
    /// send) — e.g. EMSGSIZE, or EIO/EINVAL where segmentation offload is not available.
    Refused(usize, io::Error),
}

impl std::fmt::Debug for MsgBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MsgBatch")
            .field("cap", &self.hdrs.len())
            .finish()
    }
}

// SAFETY: the raw pointers inside the headers are rewritten from the caller's live buffers
// right before every system call and never dereferenced by Rust code, so moving the batch
// to another thread cannot create a dangling access.
unsafe impl Send for MsgBatch {}

impl MsgBatch {
    pub(crate) fn new(cap: usize) -> MsgBatch {
        // SAFETY: mmsghdr, iovec and sockaddr_storage are plain C structs for which all-zero
        // bytes (null pointers, zero lengths) are valid values.
        let (h, i, a) = unsafe {
            (
                zeroed::<libc::mmsghdr>(),
                zeroed::<libc::iovec>(),
                zeroed::<libc::sockaddr_storage>(),
            )
        };
        MsgBatch {
            hdrs: vec![h; cap],
            iovs: vec![i; cap],
            addrs: vec![a; cap],
            ctrl: vec![[0; 8]; cap],
            groups: vec![0; cap],
        }
    }

    /// Header `h`: address slot `h`, the `count` iovecs from `iov` on, and `ctrl_len` bytes
    /// of control buffer `h` (0: none).
    fn prepare(
        &mut self,
        h: usize,
        iov: usize,
        count: usize,
        namelen: libc::socklen_t,
        ctrl_len: usize,
    ) {
        let (Some(hdr), Some(addr), Some(ctrl)) = (
            self.hdrs.get_mut(h),
            self.addrs.get_mut(h),
            self.ctrl.get_mut(h),
        ) else {
            return;
        };
        let Some(iovs) = self.iovs.get_mut(iov..iov + count) else {
            return;
        };
        // SAFETY: all-zero is a valid msghdr (see `new`); the fields are set below.
        let mut m: libc::msghdr = unsafe { zeroed() };
        m.msg_name = (addr as *mut libc::sockaddr_storage).cast::<c_void>();
        m.msg_namelen = namelen;
        m.msg_iov = iovs.as_mut_ptr();
        m.msg_iovlen = count;
        if ctrl_len > 0 {
            m.msg_control = ctrl.as_mut_ptr().cast::<c_void>();
            m.msg_controllen = ctrl_len.min(size_of::<[u64; 8]>());
        }
        hdr.msg_hdr = m;
        hdr.msg_len = 0;
    }

    fn set_iov(&mut self, i: usize, base: *mut u8, len: usize) {
        if let Some(iov) = self.iovs.get_mut(i) {
            iov.iov_base = base.cast::<c_void>();
            iov.iov_len = len;
        }
    }

    /// Receive up to `bufs.len()` datagrams without blocking. Returns how many arrived; read
    /// each with [`MsgBatch::received`].
    pub(crate) fn recv(&mut self, sock: BorrowedFd<'_>, bufs: &mut [Vec<u8>]) -> io::Result<usize> {
        let n = bufs.len().min(self.hdrs.len());
        // Room for two int-sized messages: the GRO segment size and the TOS / traffic class.
        // SAFETY: CMSG_SPACE only computes a size.
        let ctrl_len = 2 * unsafe { libc::CMSG_SPACE(size_of::<c_int>() as u32) } as usize;
        for (i, b) in bufs.iter_mut().enumerate().take(n) {
            let len = b.len();
            self.set_iov(i, b.as_mut_ptr(), len);
            self.prepare(
                i,
                i,
                1,
                size_of::<libc::sockaddr_storage>() as libc::socklen_t,
                ctrl_len,
            );
        }
        // SAFETY: the first `n` headers point at live, distinct buffers of the stated lengths
        // and at this batch's own address slots; none is touched by Rust during the call.
        let r = unsafe {
            libc::recvmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if is_would_block(&e) { Ok(0) } else { Err(e) };
        }
        Ok(r as usize)
    }

    /// The descriptors (`SCM_RIGHTS`) that came with message `i` of the last
    /// [`MsgBatch::recv`] on a Unix socket; each is taken once (a second call returns none).
    pub(crate) fn take_fds(&mut self, i: usize) -> Vec<OwnedFd> {
        let mut got = Vec::new();
        let Some(h) = self.hdrs.get_mut(i) else {
            return got;
        };
        if h.msg_hdr.msg_control.is_null() {
            return got;
        }
        // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control messages
        // into this header's own buffer; descriptors in SCM_RIGHTS are new and ours. The
        // control length is zeroed afterwards so they are never taken twice.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                    let n =
                        ((*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize) / size_of::<c_int>();
                    let data = libc::CMSG_DATA(c).cast::<c_int>();
                    for k in 0..n {
                        let fd = std::ptr::read_unaligned(data.add(k));
                        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
                        got.push(OwnedFd::from_raw_fd(fd));
                    }
                }
                c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
            }
        }
        h.msg_hdr.msg_controllen = 0;
        got
    }

    /// The length of message `i` of the last [`MsgBatch::recv`] (0: end of stream on a
    /// stream-like socket).
    pub(crate) fn received_len(&self, i: usize) -> usize {
        self.hdrs.get(i).map_or(0, |h| h.msg_len as usize)
    }

    /// Message `i` of the last [`MsgBatch::recv`]: its length, sender, whether it was
    /// truncated to the buffer, and — when the kernel coalesced datagrams into it (UDP GRO) —
    /// their size: the message is then datagrams of that size back to back, the last one
    /// possibly shorter.
    pub(crate) fn received(&self, i: usize) -> Option<Received> {
        let h = self.hdrs.get(i)?;
        let from = from_storage(self.addrs.get(i)?)?;
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let mut segment = None;
        let mut tos = None;
        if !h.msg_hdr.msg_control.is_null() {
            // SAFETY: the kernel wrote `msg_controllen` bytes of well-formed control messages
            // into this header's own buffer (`ctrl`), which CMSG_* walk within those bounds.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&h.msg_hdr);
                while !c.is_null() {
                    if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                        let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>());
                        segment = usize::try_from(v).ok().filter(|&v| v > 0);
                    } else if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS
                    {
                        // IPv4: one byte (ip(7), IP_RECVTOS).
                        tos = Some(*libc::CMSG_DATA(c));
                    } else if (*c).cmsg_level == libc::IPPROTO_IPV6
                        && (*c).cmsg_type == libc::IPV6_TCLASS
                    {
                        // IPv6: an int (ipv6(7), IPV6_RECVTCLASS).
                        let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<c_int>());
                        tos = Some(v as u8);
                    }
                    c = libc::CMSG_NXTHDR(&h.msg_hdr, c);
                }
            }
        }
        Some(Received {
            tos,
            len: h.msg_len as usize,
            from,
            truncated,
            segment,
        })
    }

    /// Send datagrams `0..` in the messages `groups` says: each `g` consecutive datagrams go
    /// as one message, as a GSO send (`UDP_SEGMENT`: the kernel cuts it into those datagrams;
    /// on loopback to a GRO socket it arrives whole) if `g` > 1 — a run [`gso_run`] found.
    /// The `i`-th datagram is `get(i)`. Returns how many datagrams the kernel took, or the
    /// first message's refusal.
    pub(crate) fn send<'a>(
        &mut self,
        sock: &UdpSocket,
        groups: &[usize],
        mut get: impl FnMut(usize) -> (&'a [u8], SocketAddr),
    ) -> Sent {
        let (mut i, mut h) = (0, 0);
        for &count in groups.iter().take(self.hdrs.len()) {
            if count == 0 || i + count > self.iovs.len() {
                break;
            }
            let (first, dst) = get(i);
            for k in i..i + count {
                let (d, _) = get(k);
                // sendmmsg only reads the buffer; the cast to *mut is what iovec requires.
                self.set_iov(k, d.as_ptr().cast_mut(), d.len());
            }
            let namelen = match self.addrs.get_mut(h) {
                Some(slot) => to_storage(&dst, slot),
                None => 0,
            };
            let ctrl_len = if count > 1 {
                self.segment_cmsg(h, first.len())
            } else {
                0
            };
            self.prepare(h, i, count, namelen, ctrl_len);
            if let Some(g) = self.groups.get_mut(h) {
                *g = count;
            }
            i += count;
            h += 1;
        }
        if h == 0 {
            return Sent::Took(0);
        }
        // SAFETY: the first `h` headers point at live buffers (borrowed for 'a, which outlives
        // this call), this batch's iovecs, address slots and control buffers.
        let r = unsafe {
            libc::sendmmsg(
                sock.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                h as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if is_would_block(&e) {
                return Sent::Took(0);
            }
            return Sent::Refused(self.groups.first().copied().unwrap_or(1), e);
        }
        Sent::Took(self.groups.iter().take(r as usize).sum())
    }

    /// Write a `UDP_SEGMENT` control message of `seg` into header `h`'s control buffer;
    /// returns its length.
    fn segment_cmsg(&mut self, h: usize, seg: usize) -> usize {
        let Some(ctrl) = self.ctrl.get_mut(h) else {
            return 0;
        };
        *ctrl = [0; 8];
        // SAFETY: CMSG_SPACE/CMSG_LEN only compute sizes; a u16 message fits the 64-byte,
        // 8-aligned buffer, where a msghdr naming that buffer lets CMSG_FIRSTHDR find it.
        unsafe {
            let space = libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
            let mut m: libc::msghdr = zeroed();
            m.msg_control = ctrl.as_mut_ptr().cast::<c_void>();
            m.msg_controllen = space;
            let c = libc::CMSG_FIRSTHDR(&m);
            if c.is_null() {
                return 0;
            }
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
            space
        }
    }
}

/// How many datagrams from `i` on (of `n`; `get(k)` = length and destination of datagram
/// `k`) one GSO send can carry: the same destination, the same length — except that a shorter
/// one may end the run — at most [`GSO_MAX_SEGMENTS`] and [`GSO_MAX_BYTES`]. At least 1.
pub(crate) fn gso_run(i: usize, n: usize, get: impl Fn(usize) -> (usize, SocketAddr)) -> usize {
    let (seg, dst) = get(i);
    let (mut count, mut bytes) = (1, seg);
    while i + count < n && count < GSO_MAX_SEGMENTS {
        let (len, to) = get(i + count);
        if to != dst || len > seg || len == 0 || bytes + len > GSO_MAX_BYTES {
            break;
        }
        count += 1;
        bytes += len;
        if len < seg {
            break;
        }
    }
    count
}

/// How the kernel numbers the IPv4 Identification of the datagrams one GSO send is cut into
/// (the ICRC covers it: `transport::wire::icrc`). The first is 0 (unconnected socket, DF),
/// as for any datagram of ours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GsoIds {
    /// All 0 (Linux 6.18 here).
    Fixed,
    /// 0, 1, 2, … (`inet_gso_segment` when it does not keep the ID fixed).
    Counting,
}

/// Find out, once per process, whether GSO sends work over IPv4 loopback and how the kernel
/// numbers their IDs: a two-datagram GSO send between two sockets of this process on
/// 127.0.0.1, to a receiver without GRO (so the kernel cuts it up, as it would before any
/// device without segmentation offload), whose second datagram's ID is recovered from its
/// ICRC. `None`: no GSO (the send failed, or the IDs are neither).
pub(crate) fn loopback_gso_ids() -> Option<GsoIds> {
    static PROBE: std::sync::OnceLock<Option<GsoIds>> = std::sync::OnceLock::new();
    *PROBE.get_or_init(|| probe_gso_ids().ok().flatten())
}

fn probe_gso_ids() -> io::Result<Option<GsoIds>> {
    let tx = bind_roce_udp(
        "127.0.0.1:0"
            .parse()
            .map_err(|_| io::ErrorKind::InvalidInput)?,
    )?;
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    let (src, dst) = (tx.local_addr()?, rx.local_addr()?);
    let Some(msgs) = icrc_datagrams(src, dst, 2, 64) else {
        return Ok(None);
    };
    let mut batch = MsgBatch::new(2);
    if !matches!(
        batch.send(&tx, &[2], |i| (&msgs[i][..], dst)),
        Sent::Took(2)
    ) {
        return Ok(None);
    }
    rx.set_read_timeout(Some(std::time::Duration::from_millis(500)))?;
    let mut buf = [0u8; 256];
    let mut second = None;
    for _ in 0..2 {
        let n = rx.recv(&mut buf)?;
        if let Some(d) = buf.get(..n).filter(|d| d.first() == Some(&1)) {
            second = Some(d.to_vec());
        }
    }
    Ok(match second.and_then(|d| unseen_v4_ident(src, dst, &d)) {
        Some((0, true)) => Some(GsoIds::Fixed),
        Some((1, true)) => Some(GsoIds::Counting),
        _ => None,
    })
}

/// `count` datagrams of `len` transport bytes (BTH on; the i-th filled with byte i) from
/// `src` to `dst`, each ending in its ICRC for IPv4 ID 0 with DF. `None` unless both are IPv4.
fn icrc_datagrams(src: SocketAddr, dst: SocketAddr, count: u8, len: usize) -> Option<Vec<Vec<u8>>> {
    use transport::wire::icrc;
    use transport::wire::ip::IpRepr;
    let (s4, d4, udp) = v4_flow(src, dst)?;
    let ip0 = IpRepr::v4_socket(s4, d4, 0, 64);
    (0..count)
        .map(|i| {
            let mut m = vec![i; len];
            let crc = icrc::compute_for(&ip0, &udp, &m).ok()?;
            m.extend_from_slice(&icrc::icrc_wire_bytes(crc));
            Some(m)
        })
        .collect()
}

/// The IPv4 ID and DF a datagram from `src` to `dst` (transport bytes and ICRC) was sent
/// with, recovered from its ICRC.
fn unseen_v4_ident(src: SocketAddr, dst: SocketAddr, datagram: &[u8]) -> Option<(u16, bool)> {
    use transport::wire::icrc;
    let (s4, d4, udp) = v4_flow(src, dst)?;
    let t = datagram.get(..datagram.len().checked_sub(4)?)?;
    let w = datagram.get(t.len()..)?;
    let u = icrc::verify_udp_v4_unseen_ident(s4, d4, &udp, t, icrc::read_icrc(w))?;
    Some((u.ident, u.dont_frag))
}

/// The addresses and UDP header of an IPv4 flow from `src` to `dst` (`None` otherwise).
fn v4_flow(
    src: SocketAddr,
    dst: SocketAddr,
) -> Option<(Ipv4Addr, Ipv4Addr, transport::wire::ip::UdpRepr)> {
    let (SocketAddr::V4(s4), SocketAddr::V4(d4)) = (src, dst) else {
        return None;
    };
    let udp = transport::wire::ip::UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        checksum: 0,
    };
    Some((*s4.ip(), *d4.ip(), udp))
}

/// One received message ([`MsgBatch::received`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) from: SocketAddr,
    pub(crate) truncated: bool,
    /// UDP GRO: the size of the datagrams coalesced into this message.
    pub(crate) segment: Option<usize>,
    /// The IPv4 TOS / IPv6 traffic class, when the socket reports it ([`set_ecn`]); for
    /// GRO, of every coalesced datagram: Linux's GRO does not merge packets whose TOS /
    /// traffic class differ (`inet_gro_receive` in net/ipv4/af_inet.c, `ipv6_gro_receive`
    /// in net/ipv6/ip6_offload.c).
    pub(crate) tos: Option<u8>,
}

impl Received {
    /// The ECN field said CE (congestion experienced).
    pub(crate) fn ce(&self) -> bool {
        self.tos.is_some_and(|t| t & 3 == CE)
    }
}

fn to_storage(addr: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    // SAFETY: all-zero is a valid sockaddr_storage.
    *out = unsafe { zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: all-zero is a valid sockaddr_in.
            let mut sin: libc::sockaddr_in = unsafe { zeroed() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
            unsafe {
                std::ptr::write(
                    (out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>(),
                    sin,
                )
            };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: all-zero is a valid sockaddr_in6.
            let mut sin6: libc::sockaddr_in6 = unsafe { zeroed() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
            unsafe {
                std::ptr::write(
                    (out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>(),
                    sin6,
                )
            };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

fn from_storage(st: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match c_int::from(st.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, which it can contain
            // at a compatible alignment.
            let sin = unsafe {
                std::ptr::read((st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>())
            };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                std::ptr::read((st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>())
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// Run `f` when the process exits normally (`atexit(3)`).
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: `f` is a plain function with no arguments; libc keeps the pointer for the
    // process's life and calls it from `exit`.
    let _ = unsafe { libc::atexit(f) };
}

/// Hold an exclusive `flock` on `fd` until [`funlock`] (or the file's close): processes that
/// append to one capture file agree on who writes its header (docs/operations.md §1).
pub(crate) fn flock_exclusive(fd: BorrowedFd<'_>) -> io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor we borrow; no memory is passed.
        let r = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_EX) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Release a [`flock_exclusive`] lock.
pub(crate) fn funlock(fd: BorrowedFd<'_>) {
    // SAFETY: as in `flock_exclusive`.
    let _ = unsafe { libc::flock(fd.as_raw_fd(), libc::LOCK_UN) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn sockaddr_roundtrip() {
        for a in ["127.0.0.9:4791", "[::1]:4791", "10.1.2.3:49152"] {
            let a: SocketAddr = a.parse().unwrap();
            // SAFETY: all-zero sockaddr_storage is valid.
            let mut st: libc::sockaddr_storage = unsafe { zeroed() };
            to_storage(&a, &mut st);
            assert_eq!(from_storage(&st), Some(a));
        }
    }

    /// `/proc/net/if_inet6` as the rxe lab's namespace showed it (interop: uroce bound to
    /// fe80::1 on the lab bridge rxebr0, ifindex 2, talking to rxe's link-local GID).
    const IF_INET6: &str = "\
00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000024066cfffef7fc90 03 40 20 80  rxetap1
fe80000000000000b8ace2fffe5e76de 02 40 20 80   rxebr0
fe800000000000000000000000000001 02 40 20 82   rxebr0
garbage line
fe80000000000000000000000000000z 07 40 20 80   bad
";

    #[test]
    fn link_local_scope_comes_from_if_inet6() {
        let ll: Ipv6Addr = "fe80::1".parse().unwrap();
        assert_eq!(ifindex_of_v6(IF_INET6, ll), Some(2));
        assert_eq!(
            ifindex_of_v6(IF_INET6, "fe80::2406:6cff:fef7:fc90".parse().unwrap()),
            Some(3)
        );
        assert_eq!(ifindex_of_v6(IF_INET6, "::1".parse().unwrap()), Some(1));
        assert_eq!(ifindex_of_v6(IF_INET6, "fe80::9".parse().unwrap()), None);
        assert_eq!(ifindex_of_v6("", ll), None);
    }

    #[test]
    fn only_unscoped_link_local_addresses_get_a_scope() {
        for a in [
            "127.0.0.1:4791",
            "[::1]:4791",
            "[fe80::1%7]:4791",
            "[2001:db8::1]:4791",
        ] {
            let a: SocketAddr = a.parse().unwrap();
            assert_eq!(with_link_local_scope(a).unwrap(), a);
        }
        // An address no interface here has (fe80::/10 is never assigned like this).
        let absent: SocketAddr = "[fe80::dead:beef:1234:5678]:4791".parse().unwrap();
        let e = with_link_local_scope(absent).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable);
    }

    #[test]
    fn ipv6_socket_accepts_zero_udp_checksums() {
        // What Linux rxe sends over IPv6 (UDP checksum 0); a default socket never sees it.
        let Ok(rx) = bind_roce_udp("[::1]:0".parse().unwrap()) else {
            eprintln!("no IPv6 loopback here; nothing to check");
            return;
        };
        let tx = UdpSocket::bind("[::1]:0").unwrap();
        setsockopt_int(tx.as_raw_fd(), libc::SOL_UDP, libc::UDP_NO_CHECK6_TX, 1).unwrap();
        tx.send_to(b"zero-checksum", rx.local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 64];
        let mut got = None;
        for _ in 0..1000 {
            if let Ok((n, _)) = rx.recv_from(&mut buf) {
                got = Some(n);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, Some(13), "zero-checksum UDP/IPv6 datagram was dropped");
    }

    #[test]
    fn ecn_sockets_send_ect0_and_report_the_tos_they_receive() {
        let rx = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        set_ecn(&rx, true).unwrap();
        let to = rx.local_addr().unwrap();
        let on = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        set_ecn(&on, true).unwrap();
        let off = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        set_ecn(&off, false).unwrap();
        // A switch that marked the packet: the sender's TOS says CE (UDP sockets may set
        // the ECN bits, ip(7)).
        let marked = UdpSocket::bind("127.0.0.1:0").unwrap();
        setsockopt_int(marked.as_raw_fd(), libc::IPPROTO_IP, libc::IP_TOS, 3).unwrap();
        on.send_to(b"on", to).unwrap();
        off.send_to(b"off", to).unwrap();
        marked.send_to(b"marked", to).unwrap();
        let mut batch = MsgBatch::new(4);
        let mut bufs = vec![vec![0u8; 2048]; 4];
        let mut seen = Vec::new();
        for _ in 0..2000 {
            let n = batch.recv(rx.as_fd(), &mut bufs).unwrap();
            for (i, b) in bufs.iter().enumerate().take(n) {
                let m = batch.received(i).unwrap();
                let text = String::from_utf8_lossy(&b[..m.len]).into_owned();
                seen.push((text, m.tos, m.ce()));
            }
            if seen.len() >= 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        seen.sort();
        assert_eq!(
            seen,
            [
                ("marked".to_string(), Some(3), true),
                ("off".to_string(), Some(0), false),
                ("on".to_string(), Some(2), false),
            ]
        );
    }

    #[test]
    fn eventfd_and_seqpacket_work() {
        let e = eventfd().unwrap();
        eventfd_signal(e.as_fd());
        eventfd_drain(e.as_fd());
        let (a, b) = seqpacket_pair().unwrap();
        assert_eq!(send_message(a.as_fd(), &[1, 2, 3]).unwrap(), 3);
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live buffer.
        let n = unsafe { libc::read(b.as_raw_fd(), buf.as_mut_ptr().cast::<c_void>(), 8) };
        assert_eq!(n, 3);
        drop(b);
        // The reader is gone: an error, not a SIGPIPE.
        assert!(send_message(a.as_fd(), &[1]).is_err());
    }

    /// Receive until `want` datagrams came (GRO messages cut at their segment size); also
    /// returns how many messages held more than one.
    fn recv_datagrams(rx: &mut MsgBatch, sock: &UdpSocket, want: usize) -> (Vec<Vec<u8>>, usize) {
        let mut bufs = vec![vec![0u8; 1 << 16]; 8];
        let mut got = Vec::new();
        let mut coalesced = 0;
        for _ in 0..2000 {
            let n = rx.recv(sock.as_fd(), &mut bufs).unwrap();
            for (i, b) in bufs.iter().enumerate().take(n) {
                let m = rx.received(i).unwrap();
                assert!(!m.truncated);
                if m.segment.is_some_and(|s| s < m.len) {
                    coalesced += 1;
                }
                for d in b[..m.len].chunks(m.segment.unwrap_or(m.len)) {
                    got.push(d.to_vec());
                }
            }
            if got.len() >= want {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        (got, coalesced)
    }

    #[test]
    fn gso_runs_arrive_as_the_datagrams_sent_with_and_without_gro() {
        let a = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        // A uroce socket (GRO on) and a plain one (the kernel cuts the GSO send up).
        let b = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        plain.set_nonblocking(true).unwrap();
        for to in [&b, &plain] {
            let dst = to.local_addr().unwrap();
            // 12 of 1,000 bytes and a 500-byte one: one GSO send (a shorter datagram ends a
            // run); a 1,200-byte one starts the next (longer), the first 64-byte one ends it;
            // the last two 64-byte ones are the third.
            let mut msgs: Vec<Vec<u8>> = Vec::new();
            for i in 0..12u8 {
                msgs.push(vec![i; 1000]);
            }
            msgs.push(vec![12; 500]);
            msgs.push(vec![13; 1200]);
            for i in 14..17u8 {
                msgs.push(vec![i; 64]);
            }
            let lens = |k: usize| (msgs[k].len(), dst);
            let mut groups = Vec::new();
            let mut i = 0;
            while i < msgs.len() {
                let g = gso_run(i, msgs.len(), lens);
                groups.push(g);
                i += g;
            }
            assert_eq!(groups, [13, 2, 2]);
            let mut tx = MsgBatch::new(32);
            let sent = tx.send(&a, &groups, |i| (&msgs[i][..], dst));
            assert!(matches!(sent, Sent::Took(17)), "{sent:?}");
            let mut rx = MsgBatch::new(8);
            let (got, coalesced) = recv_datagrams(&mut rx, to, msgs.len());
            assert_eq!(got, msgs);
            // On loopback a GSO send reaches a GRO socket whole (if this kernel has GRO).
            let mut gro: c_int = 0;
            let mut len = size_of::<c_int>() as libc::socklen_t;
            // SAFETY: getsockopt writes at most `len` bytes into `gro`.
            let r = unsafe {
                libc::getsockopt(
                    to.as_raw_fd(),
                    libc::SOL_UDP,
                    UDP_GRO,
                    (&mut gro as *mut c_int).cast(),
                    &mut len,
                )
            };
            if r == 0 && gro != 0 {
                assert_eq!(coalesced, 3, "each GSO send arrives as one message");
            } else {
                assert_eq!(coalesced, 0);
            }
        }
    }

    #[test]
    fn the_probe_knows_how_the_kernel_numbers_the_ipv4_ids_of_a_gso_send() {
        // What the engine's ICRCs assume (engine::port::flush_tx): an unconnected socket with
        // IP_PMTUDISC_DO sends ID 0 with DF, and the segments of one GSO send get IDs all 0
        // or 0, 1, 2, … as `loopback_gso_ids` found. Every datagram here carries the ICRC for
        // ID 0; the receiver (a plain socket: the kernel cuts the send up on the way in, as
        // it does before a device without UDP segmentation offload) recovers each one's ID.
        let a = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        plain.set_nonblocking(true).unwrap();
        let (src, dst) = (a.local_addr().unwrap(), plain.local_addr().unwrap());
        let msgs = icrc_datagrams(src, dst, 6, 512).unwrap();
        let mut tx = MsgBatch::new(8);
        let sent = tx.send(&a, &[6], |i| (&msgs[i][..], dst));
        assert!(matches!(sent, Sent::Took(6)), "{sent:?}");
        let mut rx = MsgBatch::new(8);
        let (got, _) = recv_datagrams(&mut rx, &plain, msgs.len());
        assert_eq!(got, msgs);
        let ids: Vec<(u16, bool)> = got
            .iter()
            .map(|d| unseen_v4_ident(src, dst, d).expect("some ID/DF matches"))
            .collect();
        // One of the two numberings, and the probe the engine relies on says which.
        let fixed: Vec<(u16, bool)> = (0..6).map(|_| (0, true)).collect();
        let counting: Vec<(u16, bool)> = (0..6).map(|k| (k, true)).collect();
        match loopback_gso_ids() {
            Some(GsoIds::Fixed) => assert_eq!(ids, fixed),
            Some(GsoIds::Counting) => assert_eq!(ids, counting),
            None => panic!("GSO sends work here, but the probe says no: {ids:?}"),
        }
    }

    #[test]
    fn batch_roundtrip_over_loopback() {
        let a = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = bind_roce_udp("127.0.0.1:0".parse().unwrap()).unwrap();
        let dst = b.local_addr().unwrap();
        let mut tx = MsgBatch::new(8);
        let msgs: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        assert!(matches!(
            tx.send(&a, &[1; 5], |i| (&msgs[i][..], dst)),
            Sent::Took(5)
        ));
        let mut rx = MsgBatch::new(8);
        let mut bufs = vec![vec![0u8; 64]; 8];
        let mut got = 0;
        for _ in 0..1000 {
            got += rx.recv(b.as_fd(), &mut bufs[got..]).unwrap();
            if got == 5 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, 5);
        let m = rx.received(0).unwrap();
        assert!(!m.truncated);
        assert_eq!(m.from, a.local_addr().unwrap());
        assert!(m.len >= 10);
    }
}
