//! `librdmacm.so.1` for uroce — for now the loader half of it.
//!
//! Every perftest binary, rping and ucmatose NEED librdmacm, and the system one cannot work
//! without the kernel's `/dev/infiniband/rdma_cm` (docs/compat.md §10), so uroce ships its own.
//! This version exports the complete `RDMACM_1.0`–`1.3` symbol set of rdma-core 44, so
//! every rdmacm program loads, and:
//!
//! * implements what needs no connection manager: `rdma_event_str` (rdma-core's exact
//!   strings), `rpoll` and `rselect` (on ordinary descriptors an rsocket-aware poll *is*
//!   `poll`/`select`, and no rsocket can exist here), `rdma_freeaddrinfo`,
//!   `rdma_free_devices` (nothing to free: nothing is ever allocated);
//! * fails everything else with `ENOSYS` in the C shape (−1 + errno, NULL + errno, a
//!   zero port, or nothing for `void` functions). perftest uses rdma_cm only with `-R`/`-z`.
//!
//! The real connection manager (§10: event channel, ID state machine, CM exchange) comes
//! later on top of uroce's libibverbs.
//!
//! Parameters of the failing functions are omitted: under the x86_64 SysV ABI the caller
//! owns the arguments, so a callee that ignores them fits any prototype. Return types do
//! matter and follow the C prototypes (`int`, `ssize_t`, `off_t`, `size_t`, pointers).

use core::ffi::{c_char, c_int, c_void};

fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for writes.
    unsafe { *libc::__errno_location() = e }
}

const NOT_YET: c_int = libc::ENOSYS;

macro_rules! int_minus1 {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`int ", stringify!($name), "(...)`: −1, errno ENOSYS (no connection manager yet).")]
        pub extern "C" fn $name() -> c_int {
            set_errno(NOT_YET);
            -1
        }
    )*};
}

macro_rules! ssize_minus1 {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`ssize_t ", stringify!($name), "(...)`: −1, errno ENOSYS (no rsockets).")]
        pub extern "C" fn $name() -> isize {
            set_errno(NOT_YET);
            -1
        }
    )*};
}

macro_rules! null_ptr {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "(...)`: NULL, errno ENOSYS (no connection manager yet).")]
        pub extern "C" fn $name() -> *mut c_void {
            set_errno(NOT_YET);
            core::ptr::null_mut()
        }
    )*};
}

macro_rules! void_noop {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`void ", stringify!($name), "(...)`: nothing to release (nothing is ever created).")]
        pub extern "C" fn $name() {}
    )*};
}

// ---- rdma_cm core (RDMACM_1.0 .. 1.3) ----

int_minus1!(
    rdma_accept,
    rdma_ack_cm_event,
    rdma_bind_addr,
    rdma_connect,
    rdma_create_ep,
    rdma_create_id,
    rdma_create_qp,
    rdma_create_qp_ex,
    rdma_create_srq,
    rdma_create_srq_ex,
    rdma_destroy_id,
    rdma_disconnect,
    rdma_get_cm_event,
    rdma_get_request,
    rdma_getaddrinfo,
    rdma_join_multicast,
    rdma_join_multicast_ex,
    rdma_leave_multicast,
    rdma_listen,
    rdma_migrate_id,
    rdma_notify,
    rdma_reject,
    rdma_resolve_addr,
    rdma_resolve_route,
    rdma_set_option,
    rdma_establish,
    rdma_init_qp_attr,
    rdma_get_remote_ece,
    rdma_reject_ece,
    rdma_set_local_ece,
);

null_ptr!(rdma_create_event_channel, rdma_get_devices);

void_noop!(
    rdma_destroy_event_channel,
    rdma_destroy_qp,
    rdma_destroy_srq,
    rdma_destroy_ep,
    rdma_free_devices,
    rdma_freeaddrinfo,
);

/// `__be16 rdma_get_src_port(struct rdma_cm_id *)`: 0, as for an unbound id.
pub extern "C" fn rdma_get_src_port() -> u16 {
    0
}

/// `__be16 rdma_get_dst_port(struct rdma_cm_id *)`: 0, as for an unconnected id.
pub extern "C" fn rdma_get_dst_port() -> u16 {
    0
}

/// `enum rdma_cm_event_type` names, indexed by value (librdmacm's `rdma_event_str`).
const EVENT_NAMES: &[&core::ffi::CStr] = &[
    c"RDMA_CM_EVENT_ADDR_RESOLVED",
    c"RDMA_CM_EVENT_ADDR_ERROR",
    c"RDMA_CM_EVENT_ROUTE_RESOLVED",
    c"RDMA_CM_EVENT_ROUTE_ERROR",
    c"RDMA_CM_EVENT_CONNECT_REQUEST",
    c"RDMA_CM_EVENT_CONNECT_RESPONSE",
    c"RDMA_CM_EVENT_CONNECT_ERROR",
    c"RDMA_CM_EVENT_UNREACHABLE",
    c"RDMA_CM_EVENT_REJECTED",
    c"RDMA_CM_EVENT_ESTABLISHED",
    c"RDMA_CM_EVENT_DISCONNECTED",
    c"RDMA_CM_EVENT_DEVICE_REMOVAL",
    c"RDMA_CM_EVENT_MULTICAST_JOIN",
    c"RDMA_CM_EVENT_MULTICAST_ERROR",
    c"RDMA_CM_EVENT_ADDR_CHANGE",
    c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
];

/// `const char *rdma_event_str(enum rdma_cm_event_type)`: a static string for every value,
/// "UNKNOWN EVENT" out of range.
pub extern "C" fn rdma_event_str(event: c_int) -> *const c_char {
    usize::try_from(event)
        .ok()
        .and_then(|i| EVENT_NAMES.get(i))
        .copied()
        .unwrap_or(c"UNKNOWN EVENT")
        .as_ptr()
}

// ---- rsockets ----

int_minus1!(
    rsocket,
    rbind,
    rlisten,
    raccept,
    rconnect,
    rshutdown,
    rclose,
    rgetpeername,
    rgetsockname,
    rsetsockopt,
    rgetsockopt,
    rfcntl,
    riounmap,
);

ssize_minus1!(
    rrecv, rrecvfrom, rrecvmsg, rsend, rsendto, rsendmsg, rread, rreadv, rwrite, rwritev,
);

/// `off_t riomap(int, void *, size_t, int, int, off_t)`: −1, errno ENOSYS.
pub extern "C" fn riomap() -> i64 {
    set_errno(NOT_YET);
    -1
}

/// `size_t riowrite(int, const void *, size_t, off_t, int)`: 0 bytes written, errno ENOSYS.
pub extern "C" fn riowrite() -> usize {
    set_errno(NOT_YET);
    0
}

/// `int rpoll(struct pollfd *, nfds_t, int)`: no rsocket can exist, so every descriptor is
/// an ordinary one and rsocket's poll is exactly `poll(2)`.
///
/// # Safety
/// As `poll(2)`: `fds` points to `nfds` valid `pollfd`s.
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's contract is poll(2)'s, which we forward unchanged.
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// `int rselect(int, fd_set *, fd_set *, fd_set *, struct timeval *)`: `select(2)`, for the
/// same reason as [`rpoll`].
///
/// # Safety
/// As `select(2)`.
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's contract is select(2)'s, which we forward unchanged.
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}

// Versioned entry points for the functions above (compat-symver).
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/exports.rs"));

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> c_int {
        // SAFETY: the calling thread's errno slot is valid for reads.
        unsafe { *libc::__errno_location() }
    }

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: rdma_event_str returns one of the 'static C strings above.
        unsafe { core::ffi::CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn event_names() {
        assert_eq!(s(rdma_event_str(0)), "RDMA_CM_EVENT_ADDR_RESOLVED");
        assert_eq!(s(rdma_event_str(9)), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(s(rdma_event_str(15)), "RDMA_CM_EVENT_TIMEWAIT_EXIT");
        assert_eq!(s(rdma_event_str(16)), "UNKNOWN EVENT");
        assert_eq!(s(rdma_event_str(-1)), "UNKNOWN EVENT");
    }

    #[test]
    fn cm_calls_fail_cleanly() {
        assert_eq!(rdma_create_id(), -1);
        assert_eq!(errno(), libc::ENOSYS);
        assert!(rdma_create_event_channel().is_null());
        assert_eq!(rread(), -1);
        assert_eq!(riowrite(), 0);
    }

    #[test]
    fn rpoll_is_poll() {
        let mut fds = [0 as c_int; 2];
        // SAFETY: fds has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let mut p = libc::pollfd {
            fd: fds[0],
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        assert_eq!(unsafe { rpoll(&mut p, 1, 0) }, 0);
        // SAFETY: writing one byte from a live buffer to the pipe's write end.
        assert_eq!(unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) }, 1);
        // SAFETY: as above.
        assert_eq!(unsafe { rpoll(&mut p, 1, 0) }, 1);
        assert_ne!(p.revents & libc::POLLIN, 0);
        // SAFETY: closing the two descriptors this test opened.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }
}
