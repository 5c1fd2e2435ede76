//! The rdma_cm C ABI (rdma-core 44's `rdma_cma.h`), implemented here beside the verbs
//! objects it hands out (`id->verbs`, `id->qp`, `id->pd`) and exported from this library as
//! `uroce_rdma_*` under the private node `UROCE_PRIVATE_1.0`; uroce's `librdmacm.so.1`
//! forwards each `rdma_*` call to its `uroce_rdma_*` twin. The logic is `verbs::rdma_cm`'s;
//! this module only converts between C structs and it.
//!
//! Layouts (x86-64, asserted below) are rdma-core 44's: `struct rdma_cm_id` 416 bytes,
//! `struct rdma_cm_event` 80, `struct rdma_conn_param` 24, `struct rdma_addrinfo` 96.
//!
//! Per device, the IDs share one verbs context (the one whose CM channel carries their
//! connections) and one default PD, as librdmacm's `cma_device` does.

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};
use std::collections::HashMap;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use uroce::cm::PortSpace;
use uroce::rdma_cm::{ConnParam, EventChannel, RdmaCmEvent, RdmaCmEventKind, RdmaCmId, UdParam};

use crate::context::{errno_of, wrap_context};
use crate::qp::UQp;
use crate::types::*;
use crate::util::{guard, guard_errno, is_nonblocking, set_errno};

// ---------------------------------------------------------------------------------------
// C layouts

/// `struct rdma_ib_addr` inside the route (40 bytes with padding).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ib_addr {
    pub sgid: [u64; 2],
    pub dgid: [u64; 2],
    pub pkey: u16,
    _pad: [u8; 6],
}

/// `struct rdma_route` (312 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_route {
    /// `struct sockaddr_storage`-sized, 8-aligned.
    pub src_addr: [u64; 16],
    pub dst_addr: [u64; 16],
    pub ibaddr: rdma_ib_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id` (416 bytes).
#[repr(C)]
#[derive(Debug)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: u32,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut c_void,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    pub qp_type: u32,
}

/// `struct rdma_event_channel`: `{ int fd; }`, what applications read.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_conn_param` (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_cm_event` (80 bytes); `param` is the 56-byte union of `rdma_conn_param` and
/// `rdma_ud_param`.
#[repr(C)]
#[derive(Debug)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: u32,
    pub status: c_int,
    pub param: [u64; 7],
}

/// `struct rdma_ud_param` (56 bytes), the UD view of the event's `param` union.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `struct rdma_addrinfo` (96 bytes).
#[repr(C)]
#[derive(Debug)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: u32,
    pub ai_dst_len: u32,
    pub ai_src_addr: *mut libc::sockaddr,
    pub ai_dst_addr: *mut libc::sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

const _: () = {
    assert!(size_of::<rdma_route>() == 312);
    assert!(size_of::<rdma_cm_id>() == 416);
    assert!(offset_of!(rdma_cm_id, route) == 32);
    assert!(offset_of!(rdma_cm_id, ps) == 344);
    assert!(offset_of!(rdma_cm_id, port_num) == 348);
    assert!(offset_of!(rdma_cm_id, event) == 352);
    assert!(offset_of!(rdma_cm_id, pd) == 400);
    assert!(offset_of!(rdma_cm_id, qp_type) == 408);
    assert!(size_of::<rdma_conn_param>() == 24);
    assert!(size_of::<rdma_ud_param>() == 56);
    assert!(offset_of!(rdma_ud_param, ah_attr) == 16);
    assert!(offset_of!(rdma_ud_param, qp_num) == 48);
    assert!(offset_of!(rdma_ud_param, qkey) == 52);
    assert!(offset_of!(rdma_cm_id, send_cq_channel) == 360);
    assert!(offset_of!(rdma_cm_id, send_cq) == 368);
    assert!(offset_of!(rdma_cm_id, recv_cq_channel) == 376);
    assert!(offset_of!(rdma_cm_id, recv_cq) == 384);
    assert!(offset_of!(rdma_cm_id, srq) == 392);
    assert!(offset_of!(rdma_conn_param, qp_num) == 16);
    assert!(size_of::<rdma_cm_event>() == 80);
    assert!(offset_of!(rdma_cm_event, param) == 24);
    assert!(size_of::<rdma_addrinfo>() == 96);
    assert!(offset_of!(rdma_addrinfo, ai_next) == 88);
};

const RDMA_PS_IPOIB: u32 = 0x0002;
const RDMA_PS_TCP: u32 = 0x0106;
const RDMA_PS_UDP: u32 = 0x0111;
const IBV_QPT_RC: u32 = 2;
const IBV_QPT_UD: u32 = 4;
const RAI_PASSIVE: c_int = 1;
const RAI_NUMERICHOST: c_int = 2;

// ---------------------------------------------------------------------------------------
// Our objects behind the C pointers

/// An event channel: the C struct first.
#[repr(C)]
#[derive(Debug)]
pub struct UEvChannel {
    ch: rdma_event_channel,
    /// `None` once destroyed. The struct itself is never freed, so a second
    /// `rdma_destroy_event_channel` (perftest 4.5's error path) is harmless.
    rust: Mutex<Option<EventChannel>>,
}

/// The event channel behind `channel`, if it is one of ours and not destroyed.
///
/// # Safety
/// None beyond the pointer being NULL or anything: it is looked up before it is read.
unsafe fn uchan(channel: *mut rdma_event_channel) -> Option<EventChannel> {
    if !registry().chans.contains(&(channel as usize)) {
        return None;
    }
    // SAFETY: one of ours: a boxed UEvChannel, never freed.
    let c = unsafe { &*channel.cast::<UEvChannel>() };
    c.rust.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// An ID: the C struct first.
#[repr(C)]
#[derive(Debug)]
pub struct UCmId {
    id: rdma_cm_id,
    rust: RdmaCmId,
    /// Events delivered for this ID and not acked yet (`rdma_destroy_id` waits for 0).
    pending: AtomicUsize,
    /// `rdma_destroy_id` was called: every later call on this ID is EINVAL. The memory is
    /// never freed, so a program that keeps using a destroyed ID (perftest 4.5 retries a
    /// rejected connect on the IDs it just destroyed) gets errors instead of a crash.
    destroyed: std::sync::atomic::AtomicBool,
    /// Synchronous (made without a channel, `rdma_create_ep`, or a request taken with
    /// `rdma_get_request`): the ID has its own channel, and the calls that end in an event
    /// wait for it and leave it at `id->event` (librdmacm's `ucma_complete`).
    sync: bool,
    /// `rdma_create_ep(RAI_PASSIVE)`'s QP attributes, for the QPs `rdma_get_request` makes.
    qp_init_attr: Option<ibv_qp_init_attr>,
}

/// An event: the C struct first, then the private data it points at.
#[repr(C)]
struct UEvent {
    ev: rdma_cm_event,
    private_data: Vec<u8>,
}

/// Per process: IDs by their `verbs::rdma_cm` key, the C context and default PD per device.
#[derive(Default)]
struct Registry {
    ids: HashMap<usize, usize>,
    /// Every C ID ever made (their memory is never freed): a pointer not in here is not an
    /// ID, and is refused rather than read.
    made: std::collections::HashSet<usize>,
    /// Every C event channel ever made (never freed either).
    chans: std::collections::HashSet<usize>,
    ctxs: HashMap<String, usize>,
    pds: HashMap<String, usize>,
}

fn registry() -> MutexGuard<'static, Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(Registry::default()))
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// # Safety
/// `id` is NULL or an ID from `uroce_rdma_create_id` (or an event) not destroyed yet.
unsafe fn ucm<'a>(id: *mut rdma_cm_id) -> Option<&'a mut UCmId> {
    if !registry().made.contains(&(id as usize)) {
        return None;
    }
    // SAFETY: `id` is one of ours: the first field of a boxed UCmId, never freed.
    unsafe { id.cast::<UCmId>().as_mut() }.filter(|u| !u.destroyed.load(Ordering::Acquire))
}

fn sockaddr_of(a: SocketAddr) -> [u64; 16] {
    let mut out = [0u64; 16];
    let bytes: &mut [u8] = bytemuck_u64(&mut out);
    match a {
        SocketAddr::V4(v4) => {
            bytes[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            bytes[2..4].copy_from_slice(&v4.port().to_be_bytes());
            bytes[4..8].copy_from_slice(&v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            bytes[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            bytes[2..4].copy_from_slice(&v6.port().to_be_bytes());
            bytes[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
            bytes[8..24].copy_from_slice(&v6.ip().octets());
            bytes[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
        }
    }
    out
}

fn bytemuck_u64(a: &mut [u64; 16]) -> &mut [u8] {
    // A [u64; 16] is 128 initialized bytes with no padding.
    let len = size_of::<[u64; 16]>();
    let p = a.as_mut_ptr().cast::<u8>();
    // SAFETY: `p` points at `len` bytes of `a`, borrowed mutably for the result's lifetime.
    unsafe { core::slice::from_raw_parts_mut(p, len) }
}

/// Reads a `struct sockaddr` (AF_INET or AF_INET6).
///
/// # Safety
/// `sa` is NULL or points at a sockaddr of the length its family implies.
unsafe fn addr_from(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    // SAFETY: non-NULL per the contract; the family is read first.
    let fam = c_int::from(unsafe { sa.as_ref() }?.sa_family);
    if fam == libc::AF_INET {
        // SAFETY: an AF_INET sockaddr is a sockaddr_in.
        let s = unsafe { &*sa.cast::<libc::sockaddr_in>() };
        Some(SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
            u16::from_be(s.sin_port),
        )))
    } else if fam == libc::AF_INET6 {
        // SAFETY: an AF_INET6 sockaddr is a sockaddr_in6.
        let s = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
        Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(s.sin6_addr.s6_addr),
            u16::from_be(s.sin6_port),
            u32::from_be(s.sin6_flowinfo),
            s.sin6_scope_id,
        )))
    } else {
        None
    }
}

fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

fn fail_with(e: &uroce::Error) -> c_int {
    fail(errno_of(e))
}

/// The body of an ID call returning `int`: the ID looked up (EINVAL if it is not a live one
/// of ours), `f` run, 0 or −1 with errno.
fn on_id(id: *mut rdma_cm_id, f: impl FnOnce(&mut UCmId) -> uroce::Result<()>) -> c_int {
    guard(-1, || {
        // SAFETY: `ucm` reads the pointer only if it is one of ours.
        let Some(u) = (unsafe { ucm(id) }) else {
            return fail(libc::EINVAL);
        };
        match f(u) {
            Ok(()) => 0,
            Err(e) => fail_with(&e),
        }
    })
}

/// The C context and default PD of the ID's device (created once per device).
fn device_objects(id: &RdmaCmId) -> Option<(*mut ibv_context, *mut ibv_pd)> {
    let name = id.device_name()?;
    device_objects_with(name, || id.context())
}

/// The C context and default PD of device `name`, opening it with `open` the first time.
fn device_objects_with(
    name: String,
    open: impl FnOnce() -> Option<uroce::Context>,
) -> Option<(*mut ibv_context, *mut ibv_pd)> {
    let mut r = registry();
    if let (Some(c), Some(p)) = (r.ctxs.get(&name), r.pds.get(&name)) {
        return Some((*c as *mut ibv_context, *p as *mut ibv_pd));
    }
    let ctx = open()?;
    let c = wrap_context(ctx)?;
    // SAFETY: `c` is a live context we just wrapped.
    let p = unsafe { crate::objects::ibv_alloc_pd(c) };
    if p.is_null() {
        return None;
    }
    r.ctxs.insert(name.clone(), c as usize);
    r.pds.insert(name, p as usize);
    Some((c, p))
}

/// Refresh the C view of an ID after the Rust side bound it or learned addresses.
fn sync(u: &mut UCmId) {
    if u.id.verbs.is_null() {
        if let Some((c, p)) = device_objects(&u.rust) {
            u.id.verbs = c;
            u.id.pd = p;
        }
    }
    if let Some(a) = u.rust.src_addr() {
        u.id.route.src_addr = sockaddr_of(a);
    }
    if let Some(a) = u.rust.dst_addr() {
        u.id.route.dst_addr = sockaddr_of(a);
    }
    u.id.port_num = 1;
}

fn new_id(rust: RdmaCmId, chan: *mut rdma_event_channel, context: *mut c_void) -> *mut UCmId {
    // SAFETY: an all-zero rdma_cm_id is valid: pointers NULL, integers 0.
    let mut id: rdma_cm_id = unsafe { core::mem::zeroed() };
    id.channel = chan;
    id.context = context;
    id.ps = u32::from(rust.port_space().0);
    id.qp_type = if rust.is_ud() { IBV_QPT_UD } else { IBV_QPT_RC };
    let key = rust.key();
    let b = Box::into_raw(Box::new(UCmId {
        id,
        rust,
        pending: AtomicUsize::new(0),
        destroyed: std::sync::atomic::AtomicBool::new(false),
        sync: false,
        qp_init_attr: None,
    }));
    let mut r = registry();
    r.ids.insert(key, b as usize);
    r.made.insert(b as usize);
    b
}

// ---------------------------------------------------------------------------------------
// The API

/// `struct rdma_event_channel *rdma_create_event_channel(void)`.
pub extern "C" fn uroce_rdma_create_event_channel() -> *mut rdma_event_channel {
    guard(core::ptr::null_mut(), || {
        uroce::init();
        match EventChannel::new() {
            Ok(rust) => {
                use std::os::fd::AsRawFd;
                let fd = rust.as_raw_fd();
                let p = Box::into_raw(Box::new(UEvChannel {
                    ch: rdma_event_channel { fd },
                    rust: Mutex::new(Some(rust)),
                }));
                registry().chans.insert(p as usize);
                p.cast()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                core::ptr::null_mut()
            }
        }
    })
}

/// `void rdma_destroy_event_channel(struct rdma_event_channel *)`.
///
/// # Safety
/// `channel` came from [`uroce_rdma_create_event_channel`] and is not used afterwards.
pub unsafe extern "C" fn uroce_rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    guard((), || {
        if registry().chans.contains(&(channel as usize)) {
            // SAFETY: one of ours: a boxed UEvChannel, never freed.
            let c = unsafe { &*channel.cast::<UEvChannel>() };
            c.rust.lock().unwrap_or_else(|p| p.into_inner()).take();
        }
    })
}

/// The event channel an ID is to use: `channel`, or for a synchronous ID (NULL) a private
/// one made here (librdmacm's `rdma_create_id` with no channel). `None` with errno set if
/// `channel` is not one of ours or the private one cannot be made.
fn channel_or_private(
    channel: *mut rdma_event_channel,
) -> Option<(*mut rdma_event_channel, EventChannel)> {
    let channel = if channel.is_null() {
        let c = uroce_rdma_create_event_channel();
        if c.is_null() {
            return None;
        }
        c
    } else {
        channel
    };
    // SAFETY: looked up before it is read.
    match unsafe { uchan(channel) } {
        Some(ch) => Some((channel, ch)),
        None => {
            set_errno(libc::EINVAL);
            None
        }
    }
}

/// `int rdma_create_id(channel, &id, context, ps)`: RDMA_PS_TCP (RC), RDMA_PS_UDP or
/// RDMA_PS_IPOIB (UD). A NULL channel makes a synchronous ID with a channel of its own.
///
/// # Safety
/// `channel` is NULL or a live channel; `id` is valid for a write.
pub unsafe extern "C" fn uroce_rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: u32,
) -> c_int {
    guard(-1, || {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        let ps = match ps {
            RDMA_PS_TCP => PortSpace::TCP,
            RDMA_PS_UDP => PortSpace::UDP,
            RDMA_PS_IPOIB => PortSpace::IPOIB,
            _ => return fail(libc::EOPNOTSUPP),
        };
        let sync = channel.is_null();
        let Some((channel, ch)) = channel_or_private(channel) else {
            return -1;
        };
        match RdmaCmId::new(&ch, ps) {
            Ok(rust) => {
                let b = new_id(rust, channel, context);
                // SAFETY: `b` was just made and is ours.
                unsafe { (*b).sync = sync };
                // SAFETY: valid for a write per the contract.
                unsafe { id.write(b.cast()) };
                0
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// Synchronous IDs (`UCmId::sync`): after a call that ends in an event, wait for that event
/// on the ID's own channel, keep it at `id->event` (acking the one kept before) and turn a
/// failure into −1 with errno: ECONNREFUSED for REJECTED, else the status as an errno
/// (librdmacm's `ucma_complete`). Asynchronous IDs: 0 at once.
///
/// # Safety
/// `id` is one of ours and live.
unsafe fn complete(id: *mut rdma_cm_id) -> c_int {
    let (sync, chan, old) = {
        // SAFETY: per the contract; the reference ends before the event is fetched.
        let u = unsafe { &mut *id.cast::<UCmId>() };
        let old = core::mem::replace(&mut u.id.event, core::ptr::null_mut());
        (u.sync, u.id.channel, old)
    };
    if !sync {
        return 0;
    }
    if !old.is_null() {
        // SAFETY: an event we handed out and kept at id->event, acked once.
        unsafe { uroce_rdma_ack_cm_event(old) };
    }
    let mut ev: *mut rdma_cm_event = core::ptr::null_mut();
    // SAFETY: the ID's own live channel; `ev` is a valid slot.
    if unsafe { uroce_rdma_get_cm_event(chan, &mut ev) } != 0 {
        return -1;
    }
    // SAFETY: as above; `ev` is the live event just fetched.
    let (kind, status) = unsafe {
        (*id.cast::<UCmId>()).id.event = ev;
        ((*ev).event, (*ev).status)
    };
    if status == 0 {
        0
    } else if kind == RdmaCmEventKind::Rejected as u32 {
        fail(libc::ECONNREFUSED)
    } else {
        fail(status.saturating_abs())
    }
}

/// [`on_id`], then [`complete`] when the call succeeded.
fn on_id_complete(id: *mut rdma_cm_id, f: impl FnOnce(&mut UCmId) -> uroce::Result<()>) -> c_int {
    let r = on_id(id, f);
    if r != 0 {
        return r;
    }
    // SAFETY: `on_id` found `id` to be a live ID of ours.
    guard(-1, || unsafe { complete(id) })
}

/// `int rdma_destroy_id(struct rdma_cm_id *)`: waits until the ID's events are acked, then
/// lets go of the CM ID; the C struct stays allocated (see `UCmId::destroyed`).
///
/// # Safety
/// `id` is a live ID, not used afterwards.
pub unsafe extern "C" fn uroce_rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { ucm(id) }) else {
            return fail(libc::EINVAL);
        };
        let kept = core::mem::replace(&mut u.id.event, core::ptr::null_mut());
        if !kept.is_null() {
            // SAFETY: the event a synchronous call kept at id->event, acked once.
            unsafe { uroce_rdma_ack_cm_event(kept) };
        }
        while u.pending.load(Ordering::Acquire) > 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        registry().ids.remove(&u.rust.key());
        u.destroyed.store(true, Ordering::Release);
        u.rust.clone().destroy();
        if u.sync {
            // SAFETY: the ID's own channel, made for it alone.
            unsafe { uroce_rdma_destroy_event_channel(u.id.channel) };
        }
        0
    })
}

/// `int rdma_bind_addr(id, addr)`.
///
/// # Safety
/// `id` is a live ID; `addr` a valid sockaddr.
pub unsafe extern "C" fn uroce_rdma_bind_addr(
    id: *mut rdma_cm_id,
    addr: *mut libc::sockaddr,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let (Some(u), Some(a)) = (unsafe { ucm(id) }, unsafe { addr_from(addr) }) else {
            return fail(libc::EINVAL);
        };
        match u.rust.bind_addr(a) {
            Ok(()) => {
                sync(u);
                0
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// `int rdma_resolve_addr(id, src, dst, timeout_ms)`.
///
/// # Safety
/// `id` is a live ID; `src` NULL or a sockaddr; `dst` a sockaddr.
pub unsafe extern "C" fn uroce_rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let (Some(u), Some(d)) = (unsafe { ucm(id) }, unsafe { addr_from(dst) }) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: per the contract.
        let s = unsafe { addr_from(src) }.filter(|s| !s.ip().is_unspecified());
        match u.rust.resolve_addr(s, d) {
            Ok(()) => {
                sync(u);
                // SAFETY: a live ID of ours.
                unsafe { complete(id) }
            }
            Err(e) => fail_with(&e),
        }
    })
}

/// `int rdma_resolve_route(id, timeout_ms)`.
///
/// # Safety
/// `id` is a live ID.
pub unsafe extern "C" fn uroce_rdma_resolve_route(
    id: *mut rdma_cm_id,
    _timeout_ms: c_int,
) -> c_int {
    on_id_complete(id, |u| u.rust.resolve_route())
}

/// `int rdma_create_qp(id, pd, qp_init_attr)`: the QP on the ID's context (its default PD
/// when `pd` is NULL), in INIT, at `id->qp`.
///
/// # Safety
/// `id` is a live ID bound to a device; `pd` NULL or a PD of `id->verbs`; `attr` valid.
pub unsafe extern "C" fn uroce_rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { ucm(id) }) else {
            return fail(libc::EINVAL);
        };
        sync(u);
        let pd = if pd.is_null() { u.id.pd } else { pd };
        if pd.is_null() || attr.is_null() || u.id.verbs.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a valid init attr per the contract.
        let a = unsafe { &mut *attr };
        // Missing CQs are made here, each with its own completion channel and the ID as CQ
        // context (librdmacm's ucma_create_cqs; rdma_verbs.h's inlines rely on that).
        if a.recv_cq.is_null() {
            let depth = c_int::try_from(a.cap.max_recv_wr.max(1)).unwrap_or(c_int::MAX);
            // SAFETY: `verbs` is the ID's live context.
            let (ch, cq) = unsafe { auto_cq(u.id.verbs, depth, id.cast()) };
            if cq.is_null() {
                return -1;
            }
            u.id.recv_cq_channel = ch.cast();
            u.id.recv_cq = cq;
            a.recv_cq = cq;
        }
        if a.send_cq.is_null() {
            let depth = c_int::try_from(a.cap.max_send_wr.max(1)).unwrap_or(c_int::MAX);
            // SAFETY: as above.
            let (ch, cq) = unsafe { auto_cq(u.id.verbs, depth, id.cast()) };
            if cq.is_null() {
                return -1;
            }
            u.id.send_cq_channel = ch.cast();
            u.id.send_cq = cq;
            a.send_cq = cq;
        }
        // SAFETY: per the contract: a live PD and a valid init attr.
        let qp = unsafe { crate::qp::ibv_create_qp(pd, attr) };
        if qp.is_null() {
            return -1;
        }
        // SAFETY: `qp` is the live QP just created.
        let Some(q) = (unsafe { qp.cast::<UQp>().as_mut() }) else {
            return fail(libc::EINVAL);
        };
        let Some(vq) = q.verbs_qp() else {
            return fail(libc::EINVAL);
        };
        if let Err(e) = u.rust.attach_qp(&vq) {
            // SAFETY: our own QP, destroyed once.
            unsafe { crate::qp::ibv_destroy_qp(qp) };
            return fail_with(&e);
        }
        q.set_state(if vq.qp_type() == uroce::QpType::Ud {
            QP_STATE_RTS
        } else {
            QP_STATE_INIT
        });
        u.id.qp = qp;
        // SAFETY: a valid init attr per the contract.
        let a = unsafe { &*attr };
        u.id.send_cq = a.send_cq;
        u.id.recv_cq = a.recv_cq;
        u.id.srq = a.srq;
        0
    })
}

/// A completion channel and a CQ of `depth` on it, for an ID (`cq_context` = the ID).
///
/// # Safety
/// `verbs` is a live context.
unsafe fn auto_cq(
    verbs: *mut ibv_context,
    depth: c_int,
    cq_context: *mut c_void,
) -> (*mut ibv_comp_channel, *mut ibv_cq) {
    // SAFETY: a live context per the contract.
    let ch = unsafe { crate::cq::ibv_create_comp_channel(verbs) };
    if ch.is_null() {
        return (ch, core::ptr::null_mut());
    }
    // SAFETY: as above, with the channel just made.
    let cq = unsafe { crate::cq::ibv_create_cq(verbs, depth, cq_context, ch, 0) };
    if cq.is_null() {
        // SAFETY: the channel just made, unused.
        unsafe { crate::cq::ibv_destroy_comp_channel(ch) };
    }
    (ch, cq)
}

/// Destroy the CQs and channels [`uroce_rdma_create_qp`] made for an ID.
fn drop_auto_cqs(u: &mut UCmId) {
    for (cq, ch) in [
        (&mut u.id.send_cq, &mut u.id.send_cq_channel),
        (&mut u.id.recv_cq, &mut u.id.recv_cq_channel),
    ] {
        if !ch.is_null() {
            if !cq.is_null() {
                // SAFETY: a CQ we made for this ID, destroyed once.
                unsafe { crate::cq::ibv_destroy_cq(*cq) };
            }
            // SAFETY: a channel we made for this ID, destroyed once.
            unsafe { crate::cq::ibv_destroy_comp_channel(ch.cast()) };
            *ch = core::ptr::null_mut();
        }
        *cq = core::ptr::null_mut();
    }
}

/// `void rdma_destroy_qp(id)`.
///
/// # Safety
/// `id` is a live ID.
pub unsafe extern "C" fn uroce_rdma_destroy_qp(id: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: per the contract.
        if let Some(u) = unsafe { ucm(id) } {
            u.rust.detach_qp();
            if !u.id.qp.is_null() {
                // SAFETY: the QP rdma_create_qp made, destroyed once.
                unsafe { crate::qp::ibv_destroy_qp(u.id.qp) };
                u.id.qp = core::ptr::null_mut();
            }
            drop_auto_cqs(u);
        }
    })
}

/// # Safety
/// `p` is NULL or a valid `rdma_conn_param` whose private data pointer covers its length.
unsafe fn param_from(p: *const rdma_conn_param) -> ConnParam {
    // SAFETY: per the contract.
    let Some(p) = (unsafe { p.as_ref() }) else {
        return ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        };
    };
    let pd = if p.private_data.is_null() || p.private_data_len == 0 {
        Vec::new()
    } else {
        // SAFETY: the caller's buffer of `private_data_len` bytes.
        unsafe {
            core::slice::from_raw_parts(
                p.private_data.cast::<u8>(),
                usize::from(p.private_data_len),
            )
        }
        .to_vec()
    };
    // 0xFF means "the device's maximum" (RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH).
    let cap = |v: u8| if v == 0xFF { 16 } else { v };
    ConnParam {
        private_data: pd,
        responder_resources: cap(p.responder_resources),
        initiator_depth: cap(p.initiator_depth),
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        srq: p.srq != 0,
        qp_num: p.qp_num,
    }
}

/// `int rdma_connect(id, conn_param)`.
///
/// # Safety
/// `id` is a live ID; `param` NULL or valid.
pub unsafe extern "C" fn uroce_rdma_connect(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: per the contract.
    let p = unsafe { param_from(param) };
    on_id_complete(id, |u| u.rust.connect(&p))
}

/// `int rdma_listen(id, backlog)`.
///
/// # Safety
/// `id` is a live, bound ID.
pub unsafe extern "C" fn uroce_rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    on_id(id, |u| u.rust.listen(backlog))
}

/// `int rdma_accept(id, conn_param)`.
///
/// # Safety
/// `id` is a live ID from a CONNECT_REQUEST; `param` NULL or valid.
pub unsafe extern "C" fn uroce_rdma_accept(
    id: *mut rdma_cm_id,
    param: *mut rdma_conn_param,
) -> c_int {
    // SAFETY: per the contract.
    let p = unsafe { param_from(param) };
    let mut ud = false;
    let r = on_id(id, |u| {
        u.rust.accept(&p)?;
        set_qp_state(u, QP_STATE_RTS);
        ud = u.rust.is_ud();
        Ok(())
    });
    if r != 0 || ud {
        // A UD accept is the SIDR_REP: nothing follows on this side.
        return r;
    }
    // SAFETY: `on_id` found `id` to be a live ID of ours.
    guard(-1, || unsafe { complete(id) })
}

/// `rdma_reject` and `rdma_reject_ece`: the private data, then `how` on the ID.
///
/// # Safety
/// `id` is a live ID; `pd` NULL or `len` readable bytes.
unsafe fn reject_with(
    id: *mut rdma_cm_id,
    pd: *const c_void,
    len: u8,
    how: fn(&RdmaCmId, &[u8]) -> uroce::Result<()>,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(u) = (unsafe { ucm(id) }) else {
            return fail(libc::EINVAL);
        };
        let data = if pd.is_null() || len == 0 {
            &[][..]
        } else {
            // SAFETY: per the contract.
            unsafe { core::slice::from_raw_parts(pd.cast::<u8>(), usize::from(len)) }
        };
        match how(&u.rust, data) {
            Ok(()) => 0,
            Err(e) => fail_with(&e),
        }
    })
}

/// `int rdma_reject(id, private_data, len)`.
///
/// # Safety
/// `id` is a live ID; `pd` covers `len` bytes.
pub unsafe extern "C" fn uroce_rdma_reject(
    id: *mut rdma_cm_id,
    pd: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: per the contract.
    unsafe { reject_with(id, pd, len, |r, d| r.reject(d)) }
}

/// `int rdma_reject_ece(id, private_data, len)` (RDMACM_1.3): as `rdma_reject`, with REJ
/// reason 35 (vendor option not supported), as librdmacm's.
///
/// # Safety
/// `id` is a live ID; `pd` NULL or `len` readable bytes.
pub unsafe extern "C" fn uroce_rdma_reject_ece(
    id: *mut rdma_cm_id,
    pd: *const c_void,
    len: u8,
) -> c_int {
    // SAFETY: per the contract.
    unsafe { reject_with(id, pd, len, |r, d| r.reject_ece(d)) }
}

/// `int rdma_disconnect(id)`.
///
/// # Safety
/// `id` is a live ID.
pub unsafe extern "C" fn uroce_rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    on_id_complete(id, |u| {
        u.rust.disconnect()?;
        set_qp_state(u, QP_STATE_ERR);
        Ok(())
    })
}

pub use crate::types::ibv_ece;

/// `int rdma_get_remote_ece(id, ece)` (RDMACM_1.3): the ECE the peer's REQ (passive side) or
/// REP (active side) carried — vendor_id 0 when none — for an ID whose QP the consumer
/// manages (an ID with a QP is EINVAL, as in librdmacm). docs/wire.md §5.6.
///
/// # Safety
/// `id` is a live ID; `ece` NULL or writable.
pub unsafe extern "C" fn uroce_rdma_get_remote_ece(
    id: *mut rdma_cm_id,
    ece: *mut ibv_ece,
) -> c_int {
    guard(-1, || {
        // SAFETY: looked up before it is read.
        let Some(u) = (unsafe { ucm(id) }) else {
            return fail(libc::EINVAL);
        };
        if !u.id.qp.is_null() || ece.is_null() {
            return fail(libc::EINVAL);
        }
        let r = u.rust.remote_ece();
        // SAFETY: non-NULL and writable per the contract.
        unsafe {
            ece.write(ibv_ece {
                vendor_id: r.vendor_id,
                options: r.options,
                comp_mask: 0,
            })
        };
        0
    })
}

/// `int rdma_set_local_ece(id, ece)` (RDMACM_1.3): the ECE the REQ offers or the REP answers
/// with for a QP the consumer manages, after librdmacm's argument checks (EINVAL for an ID
/// with a QP, a NULL `ece`, vendor_id 0 or a comp_mask). Only uroce's vendor ID travels
/// (docs/wire.md §5.6).
///
/// # Safety
/// `id` is a live ID; `ece` NULL or readable.
pub unsafe extern "C" fn uroce_rdma_set_local_ece(
    id: *mut rdma_cm_id,
    ece: *const ibv_ece,
) -> c_int {
    guard(-1, || {
        // SAFETY: looked up before it is read.
        let Some(u) = (unsafe { ucm(id) }) else {
            return fail(libc::EINVAL);
        };
        // SAFETY: NULL or readable per the contract.
        let Some(e) = (unsafe { ece.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        if !u.id.qp.is_null() || e.vendor_id == 0 || e.comp_mask != 0 {
            return fail(libc::EINVAL);
        }
        let ece = uroce::Ece {
            vendor_id: e.vendor_id,
            options: e.options,
        };
        match u.rust.set_local_ece(ece) {
            Ok(()) => 0,
            Err(e) => fail_with(&e),
        }
    })
}

/// `int rdma_establish(id)` (RDMACM_1.2).
///
/// # Safety
/// `id` is a live ID.
pub unsafe extern "C" fn uroce_rdma_establish(id: *mut rdma_cm_id) -> c_int {
    on_id(id, |u| u.rust.establish())
}

const QP_STATE_INIT: u32 = 1;
const QP_STATE_RTS: u32 = 3;
const QP_STATE_ERR: u32 = 6;

fn set_qp_state(u: &mut UCmId, s: u32) {
    // SAFETY: `id->qp` is NULL or the live QP rdma_create_qp made.
    if let Some(q) = unsafe { u.id.qp.cast::<UQp>().as_mut() } {
        q.set_state(s);
    }
}

/// `int rdma_get_cm_event(channel, &event)`: blocks unless the channel's fd was made
/// non-blocking (then −1, EAGAIN when none is waiting).
///
/// # Safety
/// `channel` is a live channel; `event` valid for a write.
pub unsafe extern "C" fn uroce_rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    guard(-1, || {
        if channel.is_null() || event.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: looked up before it is read.
        let Some(ch) = (unsafe { uchan(channel) }) else {
            return fail(libc::EINVAL);
        };
        let nonblocking = is_nonblocking(std::os::fd::AsRawFd::as_raw_fd(&ch));
        let ev = loop {
            let e = if nonblocking {
                match ch.try_get_event() {
                    Some(e) => e,
                    None => return fail(libc::EAGAIN),
                }
            } else {
                match ch.get_event(None) {
                    Some(e) => e,
                    None => return fail(libc::EIO),
                }
            };
            if let Some(ev) = to_c(channel, e) {
                break ev;
            }
        };
        // SAFETY: valid for a write per the contract.
        unsafe { event.write(ev) };
        0
    })
}

/// The C event for `e`, allocating the C ID of a new connection; `None` for an event of an
/// ID destroyed meanwhile (dropped, as the kernel drops a destroyed ID's unreported events).
fn to_c(channel: *mut rdma_event_channel, e: RdmaCmEvent) -> Option<*mut rdma_cm_event> {
    let listen = e
        .listen_id
        .as_ref()
        .and_then(|l| registry().ids.get(&l.key()).copied())
        .unwrap_or(0) as *mut UCmId;
    let known = registry().ids.get(&e.id.key()).copied();
    let id = match known {
        Some(p) => p as *mut UCmId,
        None if e.kind != RdmaCmEventKind::ConnectRequest => return None,
        None if listen.is_null() => {
            // The listener was destroyed with this request still queued.
            let _ = e.id.reject(&[]);
            e.id.clone().destroy();
            return None;
        }
        None => {
            // SAFETY: `listen` is NULL or a live registered ID.
            let context =
                unsafe { listen.as_ref() }.map_or(core::ptr::null_mut(), |l| l.id.context);
            new_id(e.id.clone(), channel, context)
        }
    };
    // SAFETY: `id` is a live registered ID (found or just made).
    let u = unsafe { &mut *id };
    sync(u);
    u.pending.fetch_add(1, Ordering::AcqRel);
    if matches!(e.kind, RdmaCmEventKind::Established) && !u.id.qp.is_null() {
        set_qp_state(u, QP_STATE_RTS);
    }
    if matches!(
        e.kind,
        RdmaCmEventKind::Disconnected | RdmaCmEventKind::Rejected
    ) {
        set_qp_state(u, QP_STATE_ERR);
    }
    let mut b = Box::new(UEvent {
        // SAFETY: all-zero is a valid rdma_cm_event (NULL pointers, zero integers).
        ev: unsafe { core::mem::zeroed() },
        private_data: e.param.private_data.clone(),
    });
    b.ev.id = id.cast();
    b.ev.listen_id = listen.cast();
    b.ev.event = e.kind as u32;
    b.ev.status = e.status;
    let pd_ptr = if b.private_data.is_empty() {
        core::ptr::null()
    } else {
        b.private_data.as_ptr().cast()
    };
    let pd_len = u8::try_from(b.private_data.len()).unwrap_or(u8::MAX);
    if u.rust.is_ud() {
        let ud = e.ud.unwrap_or(UdParam {
            ah_attr: uroce::AhAttr::default(),
            qp_num: 0,
            qkey: 0,
        });
        let up = rdma_ud_param {
            private_data: pd_ptr,
            private_data_len: pd_len,
            ah_attr: crate::objects::ah_attr_to_c(&ud.ah_attr),
            qp_num: ud.qp_num,
            qkey: ud.qkey,
        };
        // SAFETY: `param` is 56 bytes, 8-aligned: exactly an rdma_ud_param.
        unsafe {
            core::ptr::addr_of_mut!(b.ev.param)
                .cast::<rdma_ud_param>()
                .write(up)
        };
        return Some(Box::into_raw(b).cast());
    }
    let cp = rdma_conn_param {
        private_data: pd_ptr,
        private_data_len: pd_len,
        responder_resources: e.param.responder_resources,
        initiator_depth: e.param.initiator_depth,
        flow_control: 0,
        retry_count: e.param.retry_count,
        rnr_retry_count: e.param.rnr_retry_count,
        srq: u8::from(e.param.srq),
        qp_num: e.param.qp_num,
    };
    // SAFETY: `param` is 56 bytes, 8-aligned; a 24-byte rdma_conn_param fits at its start.
    unsafe {
        core::ptr::addr_of_mut!(b.ev.param)
            .cast::<rdma_conn_param>()
            .write(cp)
    };
    Some(Box::into_raw(b).cast())
}

/// `int rdma_ack_cm_event(event)`.
///
/// # Safety
/// `event` came from [`uroce_rdma_get_cm_event`] and is not used afterwards.
pub unsafe extern "C" fn uroce_rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    guard(-1, || {
        if event.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: per the contract, a leaked Box<UEvent> owned again exactly once.
        let b = unsafe { Box::from_raw(event.cast::<UEvent>()) };
        // SAFETY: the event's ID stays alive until its events are acked.
        if let Some(u) = unsafe { b.ev.id.cast::<UCmId>().as_ref() } {
            u.pending.fetch_sub(1, Ordering::AcqRel);
        }
        0
    })
}

/// `RDMA_OPTION_ID` (`rdma_cma.h`).
const RDMA_OPTION_ID: c_int = 0;
/// `RDMA_OPTION_ID_ACK_TIMEOUT` (`rdma_cma.h`): a `uint8_t`.
const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

/// `int rdma_set_option(id, level, optname, optval, optlen)`: ACK_TIMEOUT (one byte, as the
/// kernel's `ucma_set_option_id` requires) sets the ID's QP's local ACK timeout at RTS; TOS,
/// REUSEADDR and AFONLY are accepted (the device's defaults apply); anything else is
/// ENOSYS.
///
/// # Safety
/// `id` is a live ID; `optval` covers `optlen` bytes.
pub unsafe extern "C" fn uroce_rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    guard(-1, || {
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        if level == RDMA_OPTION_ID && optname == RDMA_OPTION_ID_ACK_TIMEOUT {
            // SAFETY: per the contract.
            let Some(u) = (unsafe { ucm(id) }) else {
                return fail(libc::EINVAL);
            };
            if optval.is_null() || optlen != 1 {
                return fail(libc::EINVAL);
            }
            // SAFETY: one readable byte, per the contract and the check above.
            let t = unsafe { *optval.cast::<u8>() };
            return match u.rust.set_ack_timeout(t) {
                Ok(()) => 0,
                Err(e) => fail_with(&e),
            };
        }
        if level == RDMA_OPTION_ID && (0..=2).contains(&optname) {
            0
        } else {
            fail(libc::ENOSYS)
        }
    })
}

/// `int rdma_migrate_id(id, channel)`: the ID reports to `channel` from now on (its events
/// still queued move along); a NULL channel makes it synchronous with a channel of its own.
///
/// # Safety
/// `id` is a live ID; `channel` NULL or a live channel.
pub unsafe extern "C" fn uroce_rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    guard(-1, || {
        // SAFETY: looked up before it is read.
        if unsafe { ucm(id) }.is_none() {
            return fail(libc::EINVAL);
        }
        let sync = channel.is_null();
        let Some((channel, ch)) = channel_or_private(channel) else {
            return -1;
        };
        // SAFETY: checked above: a live ID of ours.
        let u = unsafe { &mut *id.cast::<UCmId>() };
        u.rust.migrate(&ch);
        if u.sync {
            // Leaving the private channel: the event a synchronous call kept is acked, as
            // librdmacm's rdma_migrate_id does.
            let kept = core::mem::replace(&mut u.id.event, core::ptr::null_mut());
            if !kept.is_null() {
                // SAFETY: an event we handed out and kept at id->event, acked once.
                unsafe { uroce_rdma_ack_cm_event(kept) };
            }
        }
        if u.sync && u.id.channel != channel {
            // SAFETY: the channel the ID made for itself, used by no one else.
            unsafe { uroce_rdma_destroy_event_channel(u.id.channel) };
        }
        u.id.channel = channel;
        u.sync = sync;
        0
    })
}

/// `int rdma_get_request(listen, &id)`: on a synchronous listener, wait for the next
/// connection request; the new ID is synchronous too, holds the request at `id->event`, and
/// has a QP when `rdma_create_ep` was given QP attributes (librdmacm `rdma_get_request`).
///
/// # Safety
/// `listen` is a live, listening synchronous ID; `id` valid for a write.
pub unsafe extern "C" fn uroce_rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    guard(-1, || {
        // SAFETY: looked up before it is read.
        let Some(l) = (unsafe { ucm(listen) }) else {
            return fail(libc::EINVAL);
        };
        // (librdmacm would wait for ever on an ID that does not listen.)
        if !l.sync || id.is_null() || !l.rust.is_listening() {
            return fail(libc::EINVAL);
        }
        let kept = core::mem::replace(&mut l.id.event, core::ptr::null_mut());
        let (chan, attr, pd) = (l.id.channel, l.qp_init_attr, l.id.pd);
        if !kept.is_null() {
            // SAFETY: the event kept at listen->event, acked once.
            unsafe { uroce_rdma_ack_cm_event(kept) };
        }
        let mut ev: *mut rdma_cm_event = core::ptr::null_mut();
        // SAFETY: the listener's own live channel; `ev` a valid slot.
        if unsafe { uroce_rdma_get_cm_event(chan, &mut ev) } != 0 {
            return -1;
        }
        // SAFETY: the live event just fetched.
        let e = unsafe { &*ev };
        let err = if e.event == RdmaCmEventKind::Rejected as u32 {
            libc::ECONNREFUSED
        } else if e.status != 0 {
            e.status.saturating_abs()
        } else if e.event != RdmaCmEventKind::ConnectRequest as u32 {
            libc::EINVAL
        } else {
            0
        };
        if err != 0 {
            // SAFETY: the event just fetched, acked once.
            unsafe { uroce_rdma_ack_cm_event(ev) };
            return fail(err);
        }
        let new = e.id;
        // The new ID leaves the listener's channel for one of its own.
        // SAFETY: `new` is the live ID the event names.
        if unsafe { uroce_rdma_migrate_id(new, core::ptr::null_mut()) } != 0 {
            // SAFETY: as above.
            unsafe { uroce_rdma_ack_cm_event(ev) };
            return -1;
        }
        if let Some(mut a) = attr {
            // SAFETY: `new` is live; `a` a copy of the saved attributes.
            if unsafe { uroce_rdma_create_qp(new, pd, &mut a) } != 0 {
                // SAFETY: as above.
                unsafe { uroce_rdma_ack_cm_event(ev) };
                return -1;
            }
        }
        // SAFETY: `new` is live and ours; `id` valid for a write per the contract.
        unsafe {
            (*new).event = ev;
            id.write(new);
        }
        0
    })
}

/// `int rdma_create_ep(&id, res, pd, qp_init_attr)`: a synchronous ID for `res`. Passive
/// (`RAI_PASSIVE`): bound to `res->ai_src_addr`, the QP attributes kept for
/// `rdma_get_request`. Active: address and route resolved, and with `qp_init_attr` a QP
/// made on `pd` (the device's default PD when NULL), CQs and completion channels included.
///
/// # Safety
/// `id` valid for a write; `res` a valid rdma_addrinfo; `pd` NULL or a PD of the device;
/// `qp_init_attr` NULL or valid.
pub unsafe extern "C" fn uroce_rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let Some(r) = (unsafe { res.as_ref() }) else {
            return fail(libc::EINVAL);
        };
        if id.is_null() {
            return fail(libc::EINVAL);
        }
        let ps = u32::try_from(r.ai_port_space).unwrap_or(0);
        let mut cm: *mut rdma_cm_id = core::ptr::null_mut();
        // SAFETY: NULL channel (synchronous); `cm` a valid slot.
        if unsafe {
            uroce_rdma_create_id(core::ptr::null_mut(), &mut cm, core::ptr::null_mut(), ps)
        } != 0
        {
            return -1;
        }
        let undo = |cm: *mut rdma_cm_id| {
            let e = crate::util::errno();
            // SAFETY: the ID just made, destroyed once.
            unsafe { uroce_rdma_destroy_id(cm) };
            set_errno(e);
            -1
        };
        // SAFETY: per the contract (ai_*_addr NULL or valid sockaddrs).
        let qp_attr = unsafe { qp_init_attr.as_mut() };
        if r.ai_flags & RAI_PASSIVE != 0 {
            // SAFETY: as above.
            if unsafe { uroce_rdma_bind_addr(cm, r.ai_src_addr) } != 0 {
                return undo(cm);
            }
            if let Some(a) = qp_attr {
                let mut a = *a;
                a.qp_type = u32::try_from(r.ai_qp_type).unwrap_or(IBV_QPT_RC);
                // SAFETY: `cm` is live and ours.
                unsafe { (*cm.cast::<UCmId>()).qp_init_attr = Some(a) };
            }
        } else {
            // SAFETY: as above.
            if unsafe { uroce_rdma_resolve_addr(cm, r.ai_src_addr, r.ai_dst_addr, 2000) } != 0 {
                return undo(cm);
            }
            // SAFETY: `cm` is live and ours.
            if unsafe { uroce_rdma_resolve_route(cm, 2000) } != 0 {
                return undo(cm);
            }
            if let Some(a) = qp_attr {
                a.qp_type = u32::try_from(r.ai_qp_type).unwrap_or(IBV_QPT_RC);
                // SAFETY: `cm` is live; `a` the caller's valid attributes.
                if unsafe { uroce_rdma_create_qp(cm, pd, a) } != 0 {
                    return undo(cm);
                }
            }
        }
        // SAFETY: valid for a write per the contract.
        unsafe { id.write(cm) };
        0
    })
}

/// `void rdma_destroy_ep(id)`: its QP (and the CQs made for it), then the ID.
///
/// # Safety
/// `id` is a live ID, not used afterwards.
pub unsafe extern "C" fn uroce_rdma_destroy_ep(id: *mut rdma_cm_id) {
    guard((), || {
        // SAFETY: per the contract; both look the pointer up first.
        unsafe {
            uroce_rdma_destroy_qp(id);
            uroce_rdma_destroy_id(id);
        }
    })
}

/// `uint16_t rdma_get_src_port(id)` (network order).
///
/// # Safety
/// `id` is a live ID.
pub unsafe extern "C" fn uroce_rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        // SAFETY: per the contract.
        unsafe { ucm(id) }
            .and_then(|u| u.rust.src_addr())
            .map_or(0, |a| a.port().to_be())
    })
}

/// `uint16_t rdma_get_dst_port(id)` (network order).
///
/// # Safety
/// `id` is a live ID.
pub unsafe extern "C" fn uroce_rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    guard(0, || {
        // SAFETY: per the contract.
        unsafe { ucm(id) }
            .and_then(|u| u.rust.dst_addr())
            .map_or(0, |a| a.port().to_be())
    })
}

/// `struct ibv_context **rdma_get_devices(int *num_devices)`: every configured device's
/// context — the very ones the IDs bound to it carry in `id->verbs` (librdmacm opens each
/// device once, `ucma_init` in librdmacm/cma.c) — in a NULL-terminated array that
/// [`uroce_rdma_free_devices`] frees; the contexts stay open. No device: NULL, ENODEV.
///
/// # Safety
/// `num_devices` is NULL or points to a writable `int`.
pub unsafe extern "C" fn uroce_rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    let ctxs: Vec<*mut ibv_context> = uroce::devices()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|d| {
            let name = d.name().to_string();
            device_objects_with(name, || d.open().ok()).map(|(c, _)| c)
        })
        .collect();
    if !num_devices.is_null() {
        // SAFETY: non-NULL and writable by the caller's contract.
        unsafe { *num_devices = c_int::try_from(ctxs.len()).unwrap_or(c_int::MAX) };
    }
    if ctxs.is_empty() {
        set_errno(libc::ENODEV);
        return std::ptr::null_mut();
    }
    // SAFETY: plain allocation of n + 1 pointers; freed by uroce_rdma_free_devices.
    let list = unsafe { libc::calloc(ctxs.len() + 1, std::mem::size_of::<*mut ibv_context>()) }
        .cast::<*mut ibv_context>();
    if list.is_null() {
        set_errno(libc::ENOMEM);
        return std::ptr::null_mut();
    }
    for (i, c) in ctxs.iter().enumerate() {
        // SAFETY: `list` holds ctxs.len() + 1 slots; the last stays NULL (calloc).
        unsafe { *list.add(i) = *c };
    }
    list
}

/// `void rdma_free_devices(struct ibv_context **list)`: frees the array (not the contexts).
///
/// # Safety
/// `list` is NULL or came from [`uroce_rdma_get_devices`] and is not used afterwards.
pub unsafe extern "C" fn uroce_rdma_free_devices(list: *mut *mut ibv_context) {
    if !list.is_null() {
        // SAFETY: allocated with calloc by uroce_rdma_get_devices.
        unsafe { libc::free(list.cast()) };
    }
}

/// `int rdma_getaddrinfo(node, service, hints, &res)`: one result (the first address
/// `getaddrinfo` gives), as librdmacm converts it: a passive lookup fills `ai_src_addr`,
/// otherwise `ai_dst_addr` (and `ai_src_addr` from the hints' source address); the port
/// space and QP type from the hints (RDMA_PS_UDP ↔ UD, else RDMA_PS_TCP ↔ RC).
///
/// # Safety
/// `node`/`service` NULL or C strings; `hints` NULL or valid; `res` valid for a write.
pub unsafe extern "C" fn uroce_rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    guard(libc::EAI_FAIL, || {
        if res.is_null() {
            set_errno(libc::EINVAL);
            return libc::EAI_SYSTEM;
        }
        // SAFETY: per the contract.
        let h = unsafe { hints.as_ref() };
        let flags = h.map_or(0, |h| h.ai_flags);
        // SAFETY: an all-zero addrinfo is a valid hints struct.
        let mut gh: libc::addrinfo = unsafe { core::mem::zeroed() };
        gh.ai_family = h.map_or(0, |h| h.ai_family);
        // The port space (else the QP type) picks the socket type (librdmacm addrinfo.c).
        let hps = h.map_or(0, |h| u32::try_from(h.ai_port_space).unwrap_or(0));
        let hqp = h.map_or(0, |h| u32::try_from(h.ai_qp_type).unwrap_or(0));
        let ud = matches!(hps, RDMA_PS_UDP | RDMA_PS_IPOIB) || (hps == 0 && hqp == IBV_QPT_UD);
        gh.ai_socktype = if ud {
            libc::SOCK_DGRAM
        } else {
            libc::SOCK_STREAM
        };
        if flags & RAI_PASSIVE != 0 {
            gh.ai_flags |= libc::AI_PASSIVE;
        }
        if flags & RAI_NUMERICHOST != 0 {
            gh.ai_flags |= libc::AI_NUMERICHOST;
        }
        let passive = flags & RAI_PASSIVE != 0;
        // SAFETY: the hints' addresses are NULL or valid sockaddrs per the contract.
        let hsrc = h.and_then(|h| unsafe { addr_from(h.ai_src_addr) });
        // SAFETY: as above.
        let hdst = h.and_then(|h| unsafe { addr_from(h.ai_dst_addr) });
        let (src, dst) = if node.is_null() && service.is_null() {
            // Nothing to look up: the addresses the hints carry (librdmacm's addrinfo.c;
            // libfabric's verbs provider asks this way).
            if hsrc.is_none() && hdst.is_none() {
                return libc::EAI_NONAME;
            }
            (hsrc, if passive { None } else { hdst })
        } else {
            let mut out: *mut libc::addrinfo = core::ptr::null_mut();
            // SAFETY: C strings or NULL per the contract; `out` receives a list freed below.
            let r = unsafe { libc::getaddrinfo(node, service, &gh, &mut out) };
            if r != 0 {
                return r;
            }
            // SAFETY: getaddrinfo succeeded: `out` is a valid list with at least one entry.
            let first = unsafe { &*out };
            // SAFETY: the entry's address has its family's length.
            let addr = unsafe { addr_from(first.ai_addr) };
            // SAFETY: the list from getaddrinfo, freed once.
            unsafe { libc::freeaddrinfo(out) };
            let Some(addr) = addr else {
                return libc::EAI_FAMILY;
            };
            // An active lookup keeps the source address the hints name (rdmacm's examples
            // pass the `-b` address that way).
            if passive {
                (Some(addr), None)
            } else {
                (hsrc, Some(addr))
            }
        };
        let boxed = |a: Option<SocketAddr>| match a {
            Some(a) => (
                Box::into_raw(Box::new(sockaddr_of(a))).cast::<libc::sockaddr>(),
                match a {
                    SocketAddr::V4(_) => size_of::<libc::sockaddr_in>(),
                    SocketAddr::V6(_) => size_of::<libc::sockaddr_in6>(),
                } as u32,
            ),
            None => (core::ptr::null_mut(), 0),
        };
        let v4 = dst.or(src).is_some_and(|a| a.is_ipv4());
        let (src, src_len) = boxed(src);
        let (dst, dst_len) = boxed(dst);
        let (ps, qp_type) = match (hps, hqp) {
            (0, 0) if ud => (RDMA_PS_UDP, IBV_QPT_UD),
            (0, 0) => (RDMA_PS_TCP, IBV_QPT_RC),
            (0, q) => (
                if q == IBV_QPT_UD {
                    RDMA_PS_UDP
                } else {
                    RDMA_PS_TCP
                },
                q,
            ),
            (p, 0) => (p, if ud { IBV_QPT_UD } else { IBV_QPT_RC }),
            (p, q) => (p, q),
        };
        let ai = rdma_addrinfo {
            ai_flags: flags,
            ai_family: if v4 { libc::AF_INET } else { libc::AF_INET6 },
            ai_qp_type: qp_type as c_int,
            ai_port_space: ps as c_int,
            ai_src_len: src_len,
            ai_dst_len: dst_len,
            ai_src_addr: src,
            ai_dst_addr: dst,
            ai_src_canonname: core::ptr::null_mut(),
            ai_dst_canonname: core::ptr::null_mut(),
            ai_route_len: 0,
            ai_route: core::ptr::null_mut(),
            ai_connect_len: 0,
            ai_connect: core::ptr::null_mut(),
            ai_next: core::ptr::null_mut(),
        };
        // SAFETY: valid for a write per the contract.
        unsafe { res.write(Box::into_raw(Box::new(ai))) };
        0
    })
}

/// `void rdma_freeaddrinfo(res)`.
///
/// # Safety
/// `res` came from [`uroce_rdma_getaddrinfo`] and is not used afterwards.
pub unsafe extern "C" fn uroce_rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    guard((), || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: a leaked Box<rdma_addrinfo> of ours, owned again exactly once.
            let b = unsafe { Box::from_raw(p) };
            for sa in [b.ai_src_addr, b.ai_dst_addr] {
                if !sa.is_null() {
                    // SAFETY: our own boxed [u64; 16], freed once.
                    drop(unsafe { Box::from_raw(sa.cast::<[u64; 16]>()) });
                }
            }
            p = b.ai_next;
        }
    })
}

/// `int rdma_notify(id, event)`: accepted (the CM already learns of the connection from its
/// RTU).
pub extern "C" fn uroce_rdma_notify(_id: *mut rdma_cm_id, _event: c_int) -> c_int {
    guard_errno(|| 0)
}

/// `int rdma_init_qp_attr(id, qp_attr, qp_attr_mask)` (RDMACM_1.2): the attributes that
/// move a QP the application manages itself to `qp_attr->qp_state` for this connection.
///
/// # Safety
/// `id` is a live ID; `attr` and `mask` are valid.
pub unsafe extern "C" fn uroce_rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    attr: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    guard(-1, || {
        // SAFETY: per the contract.
        let (Some(u), Some(a), false) =
            (unsafe { ucm(id) }, unsafe { attr.as_mut() }, mask.is_null())
        else {
            return fail(libc::EINVAL);
        };
        let Some(state) = uroce::QpState::from_raw(a.qp_state) else {
            return fail(libc::EINVAL);
        };
        match u.rust.init_qp_attr(state) {
            Ok((qa, m)) => {
                *a = crate::qp::qp_attr_to_c(&qa);
                // SAFETY: valid for a write per the contract.
                unsafe { mask.write(m.bits() as c_int) };
                0
            }
            Err(e) => fail_with(&e),
        }
    })
}
