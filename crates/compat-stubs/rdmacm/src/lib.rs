//! `librdmacm.so.1` for uroce.
//!
//! Every perftest binary, rping and ucmatose NEED librdmacm, and the system one cannot work
//! without the kernel's `/dev/infiniband/rdma_cm`, so uroce ships its own. It exports the
//! complete `RDMACM_1.0`–`1.3` symbol set of rdma-core 44, so every rdmacm program loads.
//!
//! * The connection manager proper — event channels, IDs (RC and UD port spaces,
//!   synchronous IDs), address and route resolution, QP creation on an ID,
//!   connect/listen/accept/reject/disconnect/establish, events, options, `rdma_migrate_id`,
//!   `rdma_init_qp_attr`, the endpoint API (`rdma_create_ep`, `rdma_get_request`,
//!   `rdma_destroy_ep`), `rdma_getaddrinfo` — lives in uroce's `libibverbs.so.1` beside the
//!   verbs objects it hands out (`id->verbs`, `id->qp`, `id->pd`), exported there as
//!   `uroce_rdma_*`; each function here forwards to its twin, found once with `dlsym`. Under
//!   another libibverbs (the system's) they fail with ENOSYS, as before.
//! * `rdma_event_str` (rdma-core's exact strings), `rpoll` and `rselect` (on ordinary
//!   descriptors an rsocket-aware poll *is* `poll`/`select`, and no rsocket can exist here)
//!   are implemented here.
//! * Not built yet, failing with `ENOSYS` in the C shape (−1 + errno, NULL + errno, or
//!   nothing for `void` functions): SRQs on IDs, multicast, `rdma_create_qp_ex` and
//!   rsockets. (ECE — `rdma_get_remote_ece`, `rdma_set_local_ece`, `rdma_reject_ece` — is
//!   forwarded: uroce's CM carries its own vendor ID, docs/wire.md §5.6.) Without uroce's
//!   libibverbs loaded, `rdma_get_devices` answers NULL,
//!   `*num_devices = 0`, errno ENODEV.
//!
//! Parameters of the failing functions are omitted: under the x86_64 SysV ABI the caller
//! owns the arguments, so a callee that ignores them fits any prototype. Return types do
//! matter and follow the C prototypes (`int`, `ssize_t`, `off_t`, `size_t`, pointers).

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicPtr, Ordering};

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

macro_rules! void_noop {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`void ", stringify!($name), "(...)`: nothing to release (nothing is ever created).")]
        pub extern "C" fn $name() {}
    )*};
}

// ---- rdma_cm core (RDMACM_1.0 .. 1.3) ----

int_minus1!(
    rdma_create_qp_ex,
    rdma_create_srq,
    rdma_create_srq_ex,
    rdma_join_multicast,
    rdma_join_multicast_ex,
    rdma_leave_multicast,
);

/// The address of uroce's libibverbs function `name` (NUL-terminated), looked up once and
/// kept in `slot`; NULL when the loaded libibverbs is not uroce's.
fn resolve(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let p = slot.load(Ordering::Acquire);
    if !p.is_null() {
        return p;
    }
    // SAFETY: dlsym with the default handle and a NUL-terminated name only reads.
    let mut f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if f.is_null() {
        // A program that links librdmacm without libibverbs: load ours (it is in the same
        // directory on LD_LIBRARY_PATH) and look there.
        // SAFETY: dlopen/dlsym with NUL-terminated names; the handle is kept for the
        // process's life.
        f = unsafe {
            let h = libc::dlopen(
                c"libibverbs.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_GLOBAL,
            );
            if h.is_null() {
                core::ptr::null_mut()
            } else {
                libc::dlsym(h, name.as_ptr())
            }
        };
    }
    slot.store(f, Ordering::Release);
    f
}

/// Functions forwarded to uroce's libibverbs (`uroce_<name>`), with what they return when it
/// is not loaded (errno ENOSYS).
macro_rules! forward {
    ($(fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $fail:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: forwarded to uroce's libibverbs.")]
        ///
        /// # Safety
        /// The C API contract of the function of the same name in `rdma_cma.h`.
        #[allow(clippy::unused_unit)] // `void` functions fail with `()`
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
            let f = resolve(&SLOT, const { match CStr::from_bytes_with_nul(concat!("uroce_", stringify!($name), "\0").as_bytes()) { Ok(c) => c, Err(_) => panic!("name") } });
            if f.is_null() {
                set_errno(NOT_YET);
                return $fail;
            }
            // SAFETY: `f` is uroce's implementation of this very prototype.
            let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { core::mem::transmute(f) };
            // SAFETY: the caller's contract, passed on unchanged.
            unsafe { f($($a),*) }
        }
    )*};
}

type P = *mut c_void;

forward! {
    fn rdma_create_event_channel() -> P = core::ptr::null_mut();
    fn rdma_destroy_event_channel(channel: P) -> () = ();
    fn rdma_create_id(channel: P, id: *mut P, context: P, ps: u32) -> c_int = -1;
    fn rdma_destroy_id(id: P) -> c_int = -1;
    fn rdma_bind_addr(id: P, addr: P) -> c_int = -1;
    fn rdma_resolve_addr(id: P, src: P, dst: P, timeout_ms: c_int) -> c_int = -1;
    fn rdma_resolve_route(id: P, timeout_ms: c_int) -> c_int = -1;
    fn rdma_create_qp(id: P, pd: P, attr: P) -> c_int = -1;
    fn rdma_destroy_qp(id: P) -> () = ();
    fn rdma_connect(id: P, param: P) -> c_int = -1;
    fn rdma_listen(id: P, backlog: c_int) -> c_int = -1;
    fn rdma_accept(id: P, param: P) -> c_int = -1;
    fn rdma_reject(id: P, private_data: *const c_void, len: u8) -> c_int = -1;
    fn rdma_reject_ece(id: P, private_data: *const c_void, len: u8) -> c_int = -1;
    fn rdma_disconnect(id: P) -> c_int = -1;
    fn rdma_establish(id: P) -> c_int = -1;
    fn rdma_notify(id: P, event: c_int) -> c_int = -1;
    fn rdma_get_cm_event(channel: P, event: *mut P) -> c_int = -1;
    fn rdma_ack_cm_event(event: P) -> c_int = -1;
    fn rdma_set_option(id: P, level: c_int, optname: c_int, optval: P, optlen: usize) -> c_int = -1;
    fn rdma_migrate_id(id: P, channel: P) -> c_int = -1;
    fn rdma_get_src_port(id: P) -> u16 = 0;
    fn rdma_get_dst_port(id: P) -> u16 = 0;
    fn rdma_freeaddrinfo(res: P) -> () = ();
    fn rdma_init_qp_attr(id: P, qp_attr: P, qp_attr_mask: *mut c_int) -> c_int = -1;
    fn rdma_create_ep(id: *mut P, res: P, pd: P, qp_init_attr: P) -> c_int = -1;
    fn rdma_destroy_ep(id: P) -> () = ();
    fn rdma_get_request(listen: P, id: *mut P) -> c_int = -1;
    fn rdma_free_devices(list: *mut P) -> () = ();
    fn rdma_get_remote_ece(id: P, ece: P) -> c_int = -1;
    fn rdma_set_local_ece(id: P, ece: P) -> c_int = -1;
}

/// Why the connection manager is unavailable, as librdmacm reports it when it finds no
/// `rdma_cm` device (`ucma_init()` failing in `librdmacm/cma.c`).
const NO_CM_DEVICE: c_int = libc::ENODEV;

/// `struct ibv_context **rdma_get_devices(int *num_devices)`: forwarded to uroce's
/// libibverbs. Without it, no RDMA CM device: NULL with errno ENODEV and `*num_devices = 0`,
/// as librdmacm answers when `ucma_init()` fails (`librdmacm/cma.c`); callers that read the
/// count without checking the pointer (libfabric's verbs provider) see zero devices.
///
/// # Safety
/// `num_devices` is NULL or points to a writable `int`.
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut c_void {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let f = resolve(&SLOT, c"uroce_rdma_get_devices");
    if !f.is_null() {
        // SAFETY: `f` is uroce's implementation of this prototype.
        let f: unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void =
            unsafe { core::mem::transmute(f) };
        // SAFETY: the caller's contract, passed on unchanged.
        return unsafe { f(num_devices) };
    }
    if !num_devices.is_null() {
        // SAFETY: non-NULL, and the caller's contract makes it a writable int.
        unsafe { *num_devices = 0 };
    }
    set_errno(NO_CM_DEVICE);
    core::ptr::null_mut()
}

/// `getaddrinfo(3)`'s "system error" code (`EAI_SYSTEM` in glibc's `<netdb.h>`): the reason is
/// in `errno`.
const EAI_SYSTEM: c_int = -11;

/// `int rdma_getaddrinfo(node, service, hints, struct rdma_addrinfo **res)`: forwarded to
/// uroce's libibverbs. Without it, no RDMA CM device: `*res` is NULL and the result is
/// `EAI_SYSTEM` with errno ENODEV (callers print it with `gai_strerror`: "System error").
///
/// # Safety
/// `res` is NULL or points to a writable pointer; the rest as `rdma_getaddrinfo(3)`.
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const c_void,
    res: *mut *mut c_void,
) -> c_int {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(core::ptr::null_mut());
    let f = resolve(&SLOT, c"uroce_rdma_getaddrinfo");
    if !f.is_null() {
        type F = unsafe extern "C" fn(
            *const c_char,
            *const c_char,
            *const c_void,
            *mut *mut c_void,
        ) -> c_int;
        // SAFETY: `f` is uroce's implementation of this prototype.
        let f: F = unsafe { core::mem::transmute(f) };
        // SAFETY: the caller's contract, passed on unchanged.
        return unsafe { f(node, service, hints, res) };
    }
    if !res.is_null() {
        // SAFETY: non-NULL, and the caller's contract makes it a writable pointer slot.
        unsafe { *res = core::ptr::null_mut() };
    }
    set_errno(NO_CM_DEVICE);
    EAI_SYSTEM
}

void_noop!(rdma_destroy_srq,);

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
    fn cm_calls_fail_cleanly_without_uroce_s_libibverbs() {
        let mut id: P = core::ptr::null_mut();
        // SAFETY: the forwarder finds no uroce libibverbs in a test binary and touches
        // nothing.
        let r =
            unsafe { rdma_create_id(core::ptr::null_mut(), &mut id, core::ptr::null_mut(), 0x106) };
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::ENOSYS);
        // SAFETY: as above.
        assert!(unsafe { rdma_create_event_channel() }.is_null());
        let null = core::ptr::null_mut();
        // SAFETY: as above.
        let r = unsafe { rdma_create_ep(&mut id, null, null, null) };
        assert_eq!(r, -1);
        assert_eq!(rread(), -1);
        assert_eq!(riowrite(), 0);
    }

    #[test]
    fn no_devices_and_no_addresses() {
        let mut n: c_int = 7;
        // SAFETY: a valid int to write the count into.
        assert!(unsafe { rdma_get_devices(&mut n) }.is_null());
        assert_eq!(n, 0);
        assert_eq!(errno(), libc::ENODEV);
        // SAFETY: NULL is allowed.
        assert!(unsafe { rdma_get_devices(core::ptr::null_mut()) }.is_null());
        let mut res: *mut c_void = core::ptr::dangling_mut();
        set_errno(0);
        // SAFETY: NULL strings and hints are never read; res is a valid slot.
        let r = unsafe {
            rdma_getaddrinfo(
                core::ptr::null(),
                core::ptr::null(),
                core::ptr::null(),
                &mut res,
            )
        };
        assert_eq!(r, EAI_SYSTEM);
        assert!(res.is_null());
        assert_eq!(errno(), libc::ENODEV);
        // SAFETY: gai_strerror returns a static string for every code.
        let msg = unsafe { core::ffi::CStr::from_ptr(libc::gai_strerror(r)) };
        assert_eq!(msg.to_str().unwrap(), "System error");
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
