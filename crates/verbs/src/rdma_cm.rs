//! rdma_cm: connections by IP address and port over the devices' Communication Managers —
//! what librdmacm and the kernel's `drivers/infiniband/core/cma.c` do together on Linux.
//!
//! * An [`EventChannel`] delivers [`RdmaCmEvent`]s for the [`RdmaCmId`]s created on it; its
//!   fd is pollable (`rdma_create_event_channel`).
//! * An ID resolves a destination address to a local device ([`RdmaCmId::resolve_addr`]: the
//!   kernel's route lookup picks the source address, whose device serves the ID) and a route
//!   ([`RdmaCmId::resolve_route`]: path MTU), then connects ([`RdmaCmId::connect`]) or binds
//!   and listens ([`RdmaCmId::bind_addr`], [`RdmaCmId::listen`]).
//! * Connections use the reliable-connected port space (`RDMA_PS_TCP`): the CM REQ carries
//!   rdma_cm's 36-byte header (version, IP version, source port, both addresses) before the
//!   consumer's private data (≤ 56 bytes); the Service ID is `0x0000000001060000 | port`
//!   (kernel cma.c `cma_format_hdr`, `rdma_get_service_id`).
//! * With a QP on the ID ([`RdmaCmId::create_qp`]) the QP transitions happen here, as
//!   librdmacm makes them: INIT at creation; RTR and RTS with the peer's values before the
//!   RTU (active) or the REP (passive); ERR at disconnect.
//! * The REQ and REP carry uroce's Enhanced Connection Establishment when the QP offers
//!   selective repeat ([`Qp::set_ece`], or `UROCE_SELECTIVE_REPEAT=1` at its creation); the
//!   QPs run it when both sides offered it (docs/wire.md §5.6). [`RdmaCmId::set_local_ece`]
//!   and [`RdmaCmId::remote_ece`] serve a QP the consumer manages itself.
//!
//! One thread per process reads the devices' CM channels and hands each event to the
//! channel of the ID it concerns (it sleeps in `poll` when nothing happens).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::cm::{CmAccept, CmChannel, CmConnect, CmEvent, CmId};
use crate::cm::{CmaHdr, Ece, PortSpace, ServiceId, SidrReqRepr, SidrStatus, CMA_HDR_LEN};
use crate::context::Context;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::pd::{Ah, Pd};
use crate::qp::{ConnectOpts, Qp, QpEndpoint, QpInitAttr};
use crate::{AccessFlags, AhAttr, Errno, Gid, Mtu, QpAttr, QpAttrMask, QpState};

/// The Local ACK Timeout our REQs carry (4.096 µs × 2^19 ≈ 2.1 s: the CM's packet life time 18
/// plus one, `cm::CmConfig::linux_defaults`), which the passive side's QP takes from the REQ;
/// the active side's QP uses it too, with its REQ's retry count (kernel cm.c
/// `cm_init_qp_rts_attr`: both from the active ID's address vector and REQ parameters).
const REQ_ACK_TIMEOUT: u8 = 19;

/// rdma_cm event types (`enum rdma_cm_event_type`, same values and meanings).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RdmaCmEventKind {
    AddrResolved = 0,
    AddrError = 1,
    RouteResolved = 2,
    RouteError = 3,
    ConnectRequest = 4,
    ConnectResponse = 5,
    ConnectError = 6,
    Unreachable = 7,
    Rejected = 8,
    Established = 9,
    Disconnected = 10,
    DeviceRemoval = 11,
    MulticastJoin = 12,
    MulticastError = 13,
    AddrChange = 14,
    TimewaitExit = 15,
}

/// Connection parameters (`struct rdma_conn_param`).
#[allow(missing_docs)]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConnParam {
    /// Private data: at most 56 bytes to connect, 196 to accept, 148 to reject.
    pub private_data: Vec<u8>,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// The peer's QPN (in events) or ours when the ID has no QP.
    pub qp_num: u32,
}

/// The Q_Key of rdma_cm's UD port spaces (`RDMA_UDP_QKEY`, kernel cma.c `cma_set_qkey`): the
/// Q_Key of every UD QP on an `RDMA_PS_UDP`/`RDMA_PS_IPOIB` ID and the one a SIDR_REP carries.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// What a UD peer resolved with SIDR needs to be sent to (`struct rdma_ud_param` without the
/// private data): the address vector toward it, its QPN and Q_Key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdParam {
    /// Toward the peer's address (its GID, RoCEv2, hop limit 64, port 1).
    pub ah_attr: AhAttr,
    /// The peer's UD QP.
    pub qp_num: u32,
    /// The Q_Key its QP expects.
    pub qkey: u32,
}

impl UdParam {
    /// The address handle on `pd` that sends reach the peer with.
    pub fn create_ah(&self, pd: &Pd) -> Result<Ah> {
        pd.create_ah(&self.ah_attr)
    }
}

/// One event (`struct rdma_cm_event`).
#[allow(missing_docs)]
#[derive(Clone)]
pub struct RdmaCmEvent {
    pub kind: RdmaCmEventKind,
    /// The ID the event is for: for CONNECT_REQUEST, the new ID of the connection.
    pub id: RdmaCmId,
    /// For CONNECT_REQUEST: the listening ID.
    pub listen_id: Option<RdmaCmId>,
    /// 0, a negative errno, or (REJECTED) the reject reason.
    pub status: i32,
    /// The peer's connection parameters and private data (full CM field length after
    /// rdma_cm's header, as Linux reports it).
    pub param: ConnParam,
    /// UD IDs: ESTABLISHED on the active side carries the peer the SIDR_REP named.
    pub ud: Option<UdParam>,
}

impl fmt::Debug for RdmaCmEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RdmaCmEvent")
            .field("kind", &self.kind)
            .field("status", &self.status)
            .field("private_data_len", &self.param.private_data.len())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// The process-wide hub: one context and CM channel per device, the reader thread.

struct DevCm {
    ctx: Context,
    cm: Arc<CmChannel>,
}

#[derive(Default)]
struct Hub {
    devs: HashMap<String, Arc<DevCm>>,
    /// (device, CM ID) → the rdma_cm ID.
    ids: HashMap<(String, u32), Weak<IdInner>>,
    /// Wakes the reader thread when a device joins (it then sleeps in `poll` with no
    /// timeout); `None` until the thread runs.
    reader: Option<Arc<OwnedFd>>,
}

fn hub() -> MutexGuard<'static, Hub> {
    static HUB: OnceLock<Mutex<Hub>> = OnceLock::new();
    static PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let mut h = HUB
        .get_or_init(|| Mutex::new(Hub::default()))
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    // A forked child inherits the parent's contexts and IDs but not its reader thread:
    // it starts over (the parent's are leaked, never dropped, in the child).
    let pid = std::process::id();
    if PID.swap(pid, std::sync::atomic::Ordering::SeqCst) != pid {
        std::mem::forget(std::mem::take(&mut *h));
    }
    h
}

fn dev_cm(dev: &Device) -> Result<Arc<DevCm>> {
    let mut h = hub();
    if let Some(d) = h.devs.get(dev.name()) {
        return Ok(d.clone());
    }
    let ctx = dev.open()?;
    let cm = Arc::new(ctx.cm_channel()?);
    let d = Arc::new(DevCm { ctx, cm });
    h.devs.insert(dev.name().to_string(), d.clone());
    match &h.reader {
        Some(wake) => crate::sys::eventfd_signal(wake.as_raw_fd()),
        None => {
            let wake = Arc::new(crate::sys::eventfd().map_err(|e| Error::channel("rdma_cm", &e))?);
            let w = wake.clone();
            std::thread::Builder::new()
                .name("uroce-rdma-cm".into())
                .spawn(move || reader(&w))
                .map_err(|e| Error::channel("rdma_cm", &e))?;
            h.reader = Some(wake);
        }
    }
    Ok(d)
}

/// The reader thread: wait on every device's CM channel (and `wake`, which says a device
/// joined), route each event.
fn reader(wake: &OwnedFd) {
    loop {
        let devs: Vec<(String, Arc<DevCm>)> = hub()
            .devs
            .iter()
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect();
        let mut fds: Vec<libc::pollfd> = std::iter::once(wake.as_raw_fd())
            .chain(devs.iter().map(|(_, d)| d.cm.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let _ = crate::sys::poll(&mut fds, -1);
        crate::sys::eventfd_drain(wake.as_fd());
        for (name, d) in &devs {
            while let Ok(Some(e)) = d.cm.try_get_event() {
                route(name, d, e);
            }
        }
    }
}

fn find(dev: &str, id: CmId) -> Option<RdmaCmId> {
    hub()
        .ids
        .get(&(dev.to_string(), id.0))
        .and_then(Weak::upgrade)
        .map(RdmaCmId)
}

fn register(dev: &str, id: CmId, inner: &Arc<IdInner>) {
    hub()
        .ids
        .insert((dev.to_string(), id.0), Arc::downgrade(inner));
}

/// Run `cmd`, the CM command that creates a CM ID for `inner` on device `d`, and register
/// that ID before the reader thread can look it up: the hub stays locked throughout, so an
/// answer that comes at once (a REJ or SIDR_REP from a peer with no listener, a request
/// right after the listen) is never dropped as an event of an unknown ID.
fn issue(d: &DevCm, inner: &Arc<IdInner>, cmd: impl FnOnce() -> Result<CmId>) -> Result<CmId> {
    let name = d.ctx.device().name().to_string();
    let mut h = hub();
    let id = cmd()?;
    h.ids.insert((name, id.0), Arc::downgrade(inner));
    Ok(id)
}

fn route(dev: &str, d: &Arc<DevCm>, e: CmEvent) {
    match e {
        CmEvent::ConnectRequest {
            id,
            listen,
            peer,
            req,
            ece,
        } => {
            // A REQ whose path MTU is outside `enum ibv_mtu` is rejected like one no
            // listener takes.
            let Some(path_mtu) = Mtu::from_raw(req.path_mtu.into()) else {
                let _ = d.cm.reject(id, 28, &[]);
                return;
            };
            let Some((l, child)) = child_of(dev, listen, id, peer, &req.private_data) else {
                let _ = d.cm.reject(id, 28, &[]);
                return;
            };
            {
                let mut st = child.state();
                st.path_mtu = path_mtu;
                st.peer_req = Some(req.clone());
                st.remote_ece = ece;
            }
            let param = ConnParam {
                private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
                // Swapped as the kernel reports them (cm.c cm_format_req_event).
                responder_resources: req.initiator_depth,
                initiator_depth: req.responder_resources,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
                srq: req.srq,
                qp_num: req.local_qpn.value(),
            };
            l.push(connect_request(&l, child, param));
        }
        CmEvent::SidrRequest {
            id,
            listen,
            peer,
            req,
        } => {
            let Some((l, child)) = child_of(dev, listen, id, peer, &req.private_data) else {
                let _ = d.cm.sidr_reply(id, SidrStatus::REJECT.0, 0, 0, &[]);
                return;
            };
            let param = ConnParam {
                private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
                ..ConnParam::default()
            };
            child.state().peer_sidr = Some(req);
            // The kernel reports a SIDR_REQ as CONNECT_REQUEST with only the private data
            // (cma.c cma_ib_req_handler).
            l.push(connect_request(&l, child, param));
        }
        other => {
            let Some(id) = find(dev, other.id()) else {
                return;
            };
            id.on_cm_event(d, other);
        }
    }
}

/// The CONNECT_REQUEST event of listener `l` for its new ID `child`.
fn connect_request(l: &RdmaCmId, child: RdmaCmId, param: ConnParam) -> RdmaCmEvent {
    RdmaCmEvent {
        kind: RdmaCmEventKind::ConnectRequest,
        id: child,
        listen_id: Some(l.clone()),
        status: 0,
        param,
        ud: None,
    }
}

/// The listener `listen` and a new ID for request `id` from `peer`, whose private data
/// starts with rdma_cm's header; `None` if the listener is gone or the header is bad.
fn child_of(
    dev: &str,
    listen: CmId,
    id: CmId,
    peer: IpAddr,
    private_data: &[u8],
) -> Option<(RdmaCmId, RdmaCmId)> {
    let l = find(dev, listen)?;
    let hdr = CmaHdr::parse(private_data).ok()?;
    let lst = l.state();
    let child = Arc::new(IdInner {
        chan: Mutex::new(l.chan()),
        ps: l.0.ps,
        st: Mutex::new(IdState {
            dev: lst.dev.clone(),
            src: Some(SocketAddr::new(hdr.dst, lst.src.map_or(0, |s| s.port()))),
            dst: Some(SocketAddr::new(peer, hdr.src_port)),
            cm: Some(id),
            path_mtu: lst.path_mtu,
            ..IdState::default()
        }),
    });
    drop(lst);
    register(dev, id, &child);
    Some((l, RdmaCmId(child)))
}

// ---------------------------------------------------------------------------------------
// Event channels

struct ChanInner {
    q: Mutex<VecDeque<RdmaCmEvent>>,
    /// Readable while events are queued (an eventfd counting them).
    efd: OwnedFd,
}

/// `struct rdma_event_channel`: where a set of IDs report.
#[derive(Clone)]
pub struct EventChannel(Arc<ChanInner>);

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.0.efd.as_raw_fd())
            .finish()
    }
}

impl EventChannel {
    /// `rdma_create_event_channel`.
    pub fn new() -> Result<EventChannel> {
        let efd = crate::sys::eventfd_blocking()
            .map_err(|e| Error::channel("rdma_create_event_channel", &e))?;
        Ok(EventChannel(Arc::new(ChanInner {
            q: Mutex::new(VecDeque::new()),
            efd,
        })))
    }

    fn push(&self, e: RdmaCmEvent) {
        self.0
            .q
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(e);
        crate::sys::eventfd_signal(self.0.efd.as_raw_fd());
    }

    /// Removes the queued events of `id`.
    fn take_for(&self, id: &RdmaCmId) -> Vec<RdmaCmEvent> {
        let mut q = self.0.q.lock().unwrap_or_else(|p| p.into_inner());
        let (mine, rest): (VecDeque<_>, VecDeque<_>) = q.drain(..).partition(|e| e.id == *id);
        *q = rest;
        mine.into()
    }

    /// The next event, if one is queued.
    pub fn try_get_event(&self) -> Option<RdmaCmEvent> {
        let mut q = self.0.q.lock().unwrap_or_else(|p| p.into_inner());
        let e = q.pop_front();
        if q.is_empty() && crate::sys::wait_readable(self.0.efd.as_fd(), 0).unwrap_or(false) {
            crate::sys::eventfd_drain(self.0.efd.as_fd());
        }
        e
    }

    /// `rdma_get_cm_event`: the next event, waiting up to `timeout` (`None`: forever).
    pub fn get_event(&self, timeout: Option<Duration>) -> Option<RdmaCmEvent> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(e) = self.try_get_event() {
                return Some(e);
            }
            if !crate::sys::wait_until(self.0.efd.as_fd(), deadline).unwrap_or(true) {
                return None;
            }
        }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.0.efd.as_raw_fd()
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.efd.as_fd()
    }
}

// ---------------------------------------------------------------------------------------
// IDs

/// The GID the ID's QP talks to: the route's address, else the destination's.
fn route_gid(st: &IdState) -> Gid {
    st.route
        .or(st.dst.map(|d| d.ip()))
        .map(|ip| Gid(wire::ip::gid_of_ip(ip)))
        .unwrap_or_default()
}

#[derive(Default)]
struct IdState {
    dev: Option<Arc<DevCm>>,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    /// Where the CM's messages (and so the QP) go when that is not `dst`'s address: a
    /// loopback destination on a daemon-shared device is the device itself.
    route: Option<IpAddr>,
    cm: Option<CmId>,
    /// The ID's QP (`id->qp`), owned by the consumer.
    qp: Option<crate::WeakQp>,
    path_mtu: Mtu,
    /// Our receive PSN (chosen at connect / accept).
    rq_psn: u32,
    /// Passive: the REQ that created the ID.
    peer_req: Option<Box<crate::cm::ReqRepr>>,
    /// Active: the REP that answered our REQ.
    peer_rep: Option<Box<crate::cm::RepRepr>>,
    /// Active: the transport retry count our REQ asked for, which our QP uses too (kernel
    /// cm.c cm_init_qp_rts_attr takes the active side's from its own REQ).
    retry_count: u8,
    /// Passive UD: the SIDR_REQ that created the ID.
    peer_sidr: Option<Box<SidrReqRepr>>,
    /// Bound to the wildcard address: listen for any address of the device.
    wildcard: bool,
    /// `rdma_listen` succeeded.
    listening: bool,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout at RTS, instead of the
    /// REQ's (kernel cma.c: `timeout_set` overrides it in `rdma_init_qp_attr`).
    ack_timeout: Option<u8>,
    /// `rdma_set_local_ece`: the ECE to offer for a QP the consumer manages itself.
    local_ece: Option<Ece>,
    /// The ECE the peer's REQ (passive) or REP (active) carried.
    remote_ece: Ece,
    /// Active: the uroce ECE options our REQ offered.
    offered_ece: u32,
}

/// The uroce ECE options both ends want: ours (`offer`) and those of `peer`'s message, if it
/// carried uroce's vendor ID (docs/wire.md §5.6). A peer without ECE (vendor ID 0, e.g.
/// rxe) or another vendor's gets none.
fn agreed_ece(offer: u32, peer: Ece) -> u32 {
    if peer.vendor_id == crate::UROCE_ECE_VENDOR_ID {
        offer & peer.options & wire::cm::UROCE_ECE_OPTIONS
    } else {
        0
    }
}

/// The uroce ECE options an ID offers: those `rdma_set_local_ece` set (if uroce's), else its
/// QP's ([`Qp::query_ece`]).
fn local_offer(st: &IdState, qp: Option<&Qp>) -> u32 {
    match (st.local_ece, qp) {
        (Some(e), _) if e.vendor_id == crate::UROCE_ECE_VENDOR_ID => e.options,
        (Some(_), _) => 0,
        (None, Some(qp)) => qp.query_ece().options,
        (None, None) => 0,
    }
}

struct IdInner {
    /// Where the ID's events go (changed by [`RdmaCmId::migrate`]); events are pushed with
    /// this lock held, so none lands on a channel the ID has left.
    chan: Mutex<EventChannel>,
    ps: PortSpace,
    st: Mutex<IdState>,
}

/// `struct rdma_cm_id`. Cheap to clone.
#[derive(Clone)]
pub struct RdmaCmId(Arc<IdInner>);

impl fmt::Debug for RdmaCmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state();
        f.debug_struct("RdmaCmId")
            .field("src", &st.src)
            .field("dst", &st.dst)
            .finish()
    }
}

impl PartialEq for RdmaCmId {
    fn eq(&self, other: &RdmaCmId) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

fn einval(op: &'static str, what: &str) -> Error {
    Error::local(op, Errno::EINVAL, what.to_string())
}

fn random_u32() -> u32 {
    crate::sys::random_u32().unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0x1234_5678, |d| d.subsec_nanos())
    })
}

/// The device serving local address `ip` among the configured ones.
fn device_for(ip: IpAddr) -> Result<Device> {
    crate::devices()?
        .into_iter()
        .find(|d| d.addr() == ip)
        .ok_or_else(|| {
            Error::local(
                "rdma_resolve_addr",
                Errno(19), // ENODEV
                format!("no uroce device has address {ip}"),
            )
        })
}

/// The source address the kernel would use toward `dst` (its route lookup), if any.
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: SocketAddr = match dst {
        IpAddr::V4(_) => "0.0.0.0:0".parse().ok()?,
        IpAddr::V6(_) => "[::]:0".parse().ok()?,
    };
    let s = UdpSocket::bind(any).ok()?;
    s.connect(SocketAddr::new(dst, 4791)).ok()?;
    s.local_addr().ok().map(|a| a.ip())
}

impl RdmaCmId {
    /// `rdma_create_id` in port space `ps`: [`PortSpace::TCP`] (reliable connections) or
    /// [`PortSpace::UDP`] / [`PortSpace::IPOIB`] (UD, peers resolved with SIDR); others give
    /// EOPNOTSUPP.
    pub fn new(chan: &EventChannel, ps: PortSpace) -> Result<RdmaCmId> {
        if ![PortSpace::TCP, PortSpace::UDP, PortSpace::IPOIB].contains(&ps) {
            return Err(Error::local(
                "rdma_create_id",
                Errno::EOPNOTSUPP,
                "only RDMA_PS_TCP, RDMA_PS_UDP and RDMA_PS_IPOIB are supported",
            ));
        }
        Ok(RdmaCmId(Arc::new(IdInner {
            chan: Mutex::new(chan.clone()),
            ps,
            st: Mutex::new(IdState::default()),
        })))
    }

    /// The ID's port space.
    pub fn port_space(&self) -> PortSpace {
        self.0.ps
    }

    /// Whether the ID's connections are UD (`RDMA_PS_UDP`, `RDMA_PS_IPOIB`): `connect` sends
    /// a SIDR_REQ, `accept` a SIDR_REP.
    pub fn is_ud(&self) -> bool {
        self.0.ps != PortSpace::TCP
    }

    fn state(&self) -> MutexGuard<'_, IdState> {
        self.0.st.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn chan_lock(&self) -> MutexGuard<'_, EventChannel> {
        self.0.chan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The channel the ID reports to.
    pub fn chan(&self) -> EventChannel {
        self.chan_lock().clone()
    }

    fn push(&self, e: RdmaCmEvent) {
        self.chan_lock().push(e);
    }

    /// `rdma_migrate_id`: from now on the ID reports to `to`; its events still queued on
    /// the old channel move along.
    pub fn migrate(&self, to: &EventChannel) {
        let mut c = self.chan_lock();
        if Arc::ptr_eq(&c.0, &to.0) {
            return;
        }
        for e in c.take_for(self) {
            to.push(e);
        }
        *c = to.clone();
    }

    fn event(&self, kind: RdmaCmEventKind, status: i32, param: ConnParam) {
        self.push(RdmaCmEvent {
            kind,
            id: self.clone(),
            listen_id: None,
            status,
            param,
            ud: None,
        });
    }

    /// A number that identifies this ID (and its clones) for its lifetime.
    pub fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// The name of the device the ID is bound to.
    pub fn device_name(&self) -> Option<String> {
        self.state()
            .dev
            .as_ref()
            .map(|d| d.ctx.device().name().to_string())
    }

    /// The verbs context of the device the ID is bound to (`id->verbs`).
    pub fn context(&self) -> Option<Context> {
        self.state().dev.as_ref().map(|d| d.ctx.clone())
    }

    /// The ID's QP (`id->qp`).
    pub fn qp(&self) -> Option<Qp> {
        self.state().qp.as_ref().and_then(crate::WeakQp::upgrade)
    }

    /// Local address and port.
    pub fn src_addr(&self) -> Option<SocketAddr> {
        self.state().src
    }

    /// Remote address and port.
    pub fn dst_addr(&self) -> Option<SocketAddr> {
        self.state().dst
    }

    /// `rdma_bind_addr`: bind to a local address of a device (port 0: any free port).
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        // The wildcard address binds to the first device of the family (listeners there take
        // requests for any of its addresses).
        let wildcard = addr.ip().is_unspecified();
        let dev = if wildcard {
            crate::devices()?
                .into_iter()
                .find(|d| d.addr().is_ipv4() == addr.is_ipv4() || addr.is_ipv6())
                .ok_or_else(|| {
                    Error::local("rdma_bind_addr", Errno(19), "no uroce device configured")
                })?
        } else {
            match device_for(addr.ip()) {
                Ok(d) => d,
                // A loopback address no device has binds to the first device, as the
                // kernel's rdma_cm does (cma_bind_loopback in drivers/infiniband/core/cma.c);
                // libfabric's verbs provider binds "localhost" to find a device.
                Err(e) if addr.ip().is_loopback() => {
                    crate::devices()?.into_iter().next().ok_or(e)?
                }
                Err(e) => return Err(e),
            }
        };
        let d = dev_cm(&dev)?;
        let mut st = self.state();
        st.wildcard = wildcard;
        let port = if addr.port() == 0 {
            (random_u32() % 28232 + 32768) as u16
        } else {
            addr.port()
        };
        st.src = Some(SocketAddr::new(addr.ip(), port));
        st.path_mtu = Mtu::Mtu1024;
        st.dev = Some(d);
        Ok(())
    }

    /// `rdma_resolve_addr`: pick the local device toward `dst` (from `src` if given, else by
    /// the kernel's route), then report ADDR_RESOLVED (or ADDR_ERROR).
    pub fn resolve_addr(&self, src: Option<SocketAddr>, dst: SocketAddr) -> Result<()> {
        let local = match src {
            Some(s) => Some(s),
            None => self.state().src,
        };
        let ip = match local {
            Some(s) => s.ip(),
            None => match route_source(dst.ip()) {
                Some(ip) => ip,
                None => {
                    self.event(RdmaCmEventKind::AddrError, -113, ConnParam::default()); // EHOSTUNREACH
                    return Ok(());
                }
            },
        };
        // Loopback destinations on a host whose devices sit on other loopback addresses (one
        // device per process, 127.0.0.x): the first configured device of the family serves.
        let ip = match device_for(ip) {
            Ok(_) => Some(ip),
            Err(_) if local.is_none() && dst.ip().is_loopback() => crate::devices()
                .ok()
                .and_then(|ds| {
                    ds.into_iter()
                        .find(|d| d.addr().is_ipv4() == dst.ip().is_ipv4())
                })
                .map(|d| d.addr()),
            Err(_) => None,
        };
        let bound = match ip {
            Some(ip) => self.bind_addr(SocketAddr::new(ip, local.map_or(0, |l| l.port()))),
            None => Err(einval("rdma_resolve_addr", "no device")),
        };
        // A loopback destination on a device uroced shares among the host's processes is
        // that device itself (the kernel's cma_resolve_loopback: destination GID = source
        // GID): the server is another process on the same device. The address stays what
        // the caller gave (the rdma_cm header carries it, listeners match on it).
        let route = match ip {
            Some(dev_ip)
                if dst.ip().is_loopback()
                    && dst.ip() != dev_ip
                    && abi::daemon::lookup(dev_ip).is_some() =>
            {
                Some(dev_ip)
            }
            _ => None,
        };
        match bound {
            Ok(()) => {
                let mut st = self.state();
                st.dst = Some(dst);
                st.route = route;
                drop(st);
                self.event(RdmaCmEventKind::AddrResolved, 0, ConnParam::default());
            }
            Err(_) => self.event(RdmaCmEventKind::AddrError, -19, ConnParam::default()),
        }
        Ok(())
    }

    /// `rdma_resolve_route`: RoCE needs no path query; reports ROUTE_RESOLVED.
    pub fn resolve_route(&self) -> Result<()> {
        if self.state().dst.is_none() {
            return Err(einval("rdma_resolve_route", "address not resolved"));
        }
        self.event(RdmaCmEventKind::RouteResolved, 0, ConnParam::default());
        Ok(())
    }

    /// `rdma_create_qp`: a QP on the ID's device and `pd`, moved to INIT (RC, UC) or RTS (UD).
    pub fn create_qp(&self, pd: &Pd, attr: &QpInitAttr<'_>) -> Result<Qp> {
        if self.state().dev.is_none() {
            return Err(einval("rdma_create_qp", "ID not bound to a device"));
        }
        let qp = pd.create_qp(attr)?;
        self.attach_qp(&qp)?;
        Ok(qp)
    }

    /// Make `qp` (created on the ID's context) the ID's QP, as `rdma_create_qp` leaves it: an
    /// RC/UC QP in INIT with every remote access right; a UD QP through INIT (Q_Key
    /// [`RDMA_UDP_QKEY`]) and RTR to RTS, ready to send (librdmacm's `ucma_init_ud_qp`).
    pub fn attach_qp(&self, qp: &Qp) -> Result<()> {
        if qp.qp_type() == crate::QpType::Ud {
            let a = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qkey: RDMA_UDP_QKEY,
                ..QpAttr::default()
            };
            qp.modify(
                &a,
                QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
            )?;
            qp.set_state(QpState::Rtr)?;
            let a = QpAttr {
                qp_state: QpState::Rts,
                sq_psn: 0,
                ..QpAttr::default()
            };
            qp.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)?;
            self.state().qp = Some(qp.downgrade());
            return Ok(());
        }
        let a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            ..QpAttr::default()
        };
        qp.modify(
            &a,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )?;
        self.state().qp = Some(qp.downgrade());
        Ok(())
    }

    /// `rdma_destroy_qp`'s part: the ID forgets its QP.
    pub fn detach_qp(&self) {
        self.state().qp = None;
    }

    /// `rdma_establish`: after CONNECT_RESPONSE on an ID without a QP (the consumer moved its
    /// own QP to RTS), send the RTU.
    pub fn establish(&self) -> Result<()> {
        let st = self.state();
        let (Some(d), Some(id)) = (st.dev.clone(), st.cm) else {
            return Err(einval("rdma_establish", "not connecting"));
        };
        drop(st);
        d.cm.establish(id)
    }

    /// `rdma_connect`: send the REQ (rdma_cm header + `p.private_data`, ≤ 56 bytes), or on a
    /// UD ID the SIDR_REQ (≤ 180 bytes), answered by ESTABLISHED with the peer's
    /// [`UdParam`] or UNREACHABLE.
    pub fn connect(&self, p: &ConnParam) -> Result<()> {
        const OP: &str = "rdma_connect";
        let max = if self.is_ud() { 180 } else { 56 };
        if p.private_data.len() > max {
            return Err(einval(OP, "private data longer than the request carries"));
        }
        let mut st = self.state();
        let (Some(d), Some(src), Some(dst)) = (st.dev.clone(), st.src, st.dst) else {
            return Err(einval(OP, "route not resolved"));
        };
        let mut pd = vec![0u8; CMA_HDR_LEN];
        CmaHdr {
            cma_version: CmaHdr::VERSION,
            src_port: src.port(),
            src: src.ip(),
            dst: dst.ip(),
        }
        .emit(&mut pd)
        .map_err(|_| einval(OP, "source and destination of different families"))?;
        pd.extend_from_slice(&p.private_data);
        let sid = ServiceId::rdma_ip(self.0.ps, dst.port());
        let to = st.route.unwrap_or(dst.ip());
        if self.is_ud() {
            st.cm = Some(issue(&d, &self.0, || d.cm.sidr_request(to, sid, &pd))?);
            return Ok(());
        }
        let rq_psn = random_u32() & 0xFF_FFFF;
        let qp = st.qp.as_ref().and_then(crate::WeakQp::upgrade);
        let mut c = match &qp {
            Some(qp) => CmConnect::new(qp, to, sid, rq_psn),
            None if p.qp_num != 0 => CmConnect::new_for_qpn(p.qp_num, to, sid, rq_psn),
            None => return Err(einval(OP, "no QP on the ID and no qp_num")),
        };
        // The QP's ECE (or the consumer's, for its own QP) goes in the REQ, as librdmacm's
        // rdma_connect sends what ibv_query_ece / rdma_set_local_ece gave.
        c.ece_options = if c.uc {
            0
        } else {
            local_offer(&st, qp.as_ref())
        };
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = p.retry_count.min(7);
        c.rnr_retry_count = p.rnr_retry_count.min(7);
        c.srq = p.srq;
        c.path_mtu = st.path_mtu as u8;
        c.flow_label = (u32::from(src.port()).wrapping_mul(31) + u32::from(dst.port())) & 0xF_FFFF;
        c.private_data = pd;
        let retry_count = c.retry_count;
        let offered = c.ece_options;
        st.cm = Some(issue(&d, &self.0, || d.cm.connect(&c))?);
        st.offered_ece = offered;
        st.rq_psn = rq_psn;
        st.retry_count = retry_count;
        Ok(())
    }

    /// `rdma_listen`: listen on the bound address and port (the device's CM).
    pub fn listen(&self, _backlog: i32) -> Result<()> {
        const OP: &str = "rdma_listen";
        let mut st = self.state();
        let (Some(d), Some(src)) = (st.dev.clone(), st.src) else {
            return Err(einval(OP, "ID not bound"));
        };
        let bind = (!st.wildcard).then_some(src.ip());
        let sid = ServiceId::rdma_ip(self.0.ps, src.port());
        st.cm = Some(issue(&d, &self.0, || d.cm.listen(sid, bind))?);
        st.listening = true;
        Ok(())
    }

    /// Whether the ID listens (`rdma_listen` succeeded).
    pub fn is_listening(&self) -> bool {
        self.state().listening
    }

    /// `rdma_accept`: bring the QP to RTS with the request's values and send the REP
    /// (`p.private_data` ≤ 196 bytes).
    pub fn accept(&self, p: &ConnParam) -> Result<()> {
        const OP: &str = "rdma_accept";
        if self.is_ud() {
            return self.sidr_answer(OP, SidrStatus::SUCCESS, p);
        }
        let mut st = self.state();
        let (Some(d), Some(id), Some(req)) = (st.dev.clone(), st.cm, st.peer_req.clone()) else {
            return Err(einval(OP, "not a connection request"));
        };
        // A receive PSN handed out earlier (rdma_init_qp_attr for RTR) stays the one.
        if st.rq_psn == 0 {
            st.rq_psn = (random_u32() & 0xFF_FFFF) | 1;
        }
        let rq_psn = st.rq_psn;
        let qp = st.qp.as_ref().and_then(crate::WeakQp::upgrade);
        // ECE: what both ends want, when the REQ carried uroce's (docs/wire.md §5.6).
        let agreed = agreed_ece(local_offer(&st, qp.as_ref()), st.remote_ece);
        let rep_ece = (st.remote_ece.vendor_id == crate::UROCE_ECE_VENDOR_ID).then_some(agreed);
        let qpn = match qp {
            Some(qp) => {
                if qp.qp_type() == crate::QpType::Rc {
                    qp.set_ece(Ece::uroce(agreed))?;
                }
                let remote = QpEndpoint {
                    qpn: req.local_qpn.value(),
                    psn: rq_psn,
                    gid: Gid(req.primary.local_gid),
                };
                let mut o = opts(st.path_mtu, req.starting_psn.value(), p, &req);
                o.timeout = st.ack_timeout.unwrap_or(o.timeout);
                qp.connect(&remote, &o)?;
                qp.qp_num()
            }
            None if p.qp_num != 0 => p.qp_num,
            None => return Err(einval(OP, "no QP on the ID and no qp_num")),
        };
        d.cm.accept(
            id,
            &CmAccept {
                qpn,
                rq_psn,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                rnr_retry_count: p.rnr_retry_count.min(7),
                srq: p.srq,
                private_data: p.private_data.clone(),
                ece_options: rep_ece,
            },
        )?;
        Ok(())
    }

    /// `rdma_set_local_ece`: the ECE this ID offers in its REQ or answers with in its REP when
    /// the consumer manages its own QP (librdmacm: EINVAL on an ID with a QP or for vendor
    /// ID 0). Only uroce's vendor ID travels (docs/wire.md §5.6); another is kept and sends
    /// none.
    pub fn set_local_ece(&self, ece: Ece) -> Result<()> {
        let mut st = self.state();
        if st.qp.is_some() || ece.vendor_id == 0 {
            return Err(einval("rdma_set_local_ece", "ID with a QP, or vendor_id 0"));
        }
        st.local_ece = Some(ece);
        Ok(())
    }

    /// `rdma_get_remote_ece`: the ECE the peer's REQ (passive side) or REP (active side)
    /// carried; vendor ID 0 when none (or nothing received yet).
    pub fn remote_ece(&self) -> Ece {
        self.state().remote_ece
    }

    /// `rdma_init_qp_attr`: the attributes and mask that move a QP the consumer manages
    /// itself to `state` (INIT, RTR or RTS) for this connection — kernel cma.c
    /// rdma_init_qp_attr with cm.c's cm_init_qp_{init,rtr,rts}_attr.
    ///
    /// On a UD ID: INIT with the P_Key index, port and Q_Key [`RDMA_UDP_QKEY`]; RTR with the
    /// state alone; RTS with send PSN 0 (what librdmacm's `ucma_init_ud_qp` applies).
    pub fn init_qp_attr(&self, state: QpState) -> Result<(QpAttr, QpAttrMask)> {
        const OP: &str = "rdma_init_qp_attr";
        let mut a = QpAttr {
            qp_state: state,
            port_num: 1,
            ..QpAttr::default()
        };
        if self.is_ud() {
            let m = match state {
                QpState::Init => {
                    a.qkey = RDMA_UDP_QKEY;
                    QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY
                }
                QpState::Rtr => QpAttrMask::STATE,
                QpState::Rts => QpAttrMask::STATE | QpAttrMask::SQ_PSN,
                _ => return Err(einval(OP, "state is not INIT, RTR or RTS")),
            };
            return Ok((a, m));
        }
        let mut st = self.state();
        if state == QpState::Init {
            a.qp_access_flags = AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC;
            let m = QpAttrMask::STATE
                | QpAttrMask::ACCESS_FLAGS
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT;
            return Ok((a, m));
        }
        // (peer QPN, the PSN the peer starts sending with, peer GID, the PSN we start with,
        //  READs the peer serves for us, READs we serve, ACK timeout, retries, RNR retries)
        let peer = if let Some(rep) = &st.peer_rep {
            let gid = route_gid(&st);
            (
                rep.local_qpn.value(),
                st.rq_psn,
                gid,
                rep.starting_psn.value(),
                rep.responder_resources,
                rep.initiator_depth,
                REQ_ACK_TIMEOUT,
                st.retry_count,
                rep.rnr_retry_count,
            )
        } else if let Some(req) = st.peer_req.clone() {
            if st.rq_psn == 0 {
                st.rq_psn = (random_u32() & 0xFF_FFFF) | 1;
            }
            (
                req.local_qpn.value(),
                st.rq_psn,
                Gid(req.primary.local_gid),
                req.starting_psn.value(),
                req.initiator_depth,
                req.responder_resources,
                req.primary.local_ack_timeout.max(1),
                req.retry_count,
                req.rnr_retry_count,
            )
        } else {
            return Err(einval(OP, "no connection yet"));
        };
        let (qpn, rq_psn, gid, sq_psn, rd_atomic, dest_rd_atomic, timeout, retry, rnr) = peer;
        let timeout = st.ack_timeout.unwrap_or(timeout);
        if state == QpState::Rtr {
            a.path_mtu = st.path_mtu;
            a.dest_qp_num = qpn;
            a.rq_psn = rq_psn;
            a.max_dest_rd_atomic = dest_rd_atomic.max(1);
            // Code 0, the longest RNR wait (655.36 ms), as kernel cm.c
            // cm_init_qp_rtr_attr sets it: a consumer that posts its receive only after
            // its own send completed (pyverbs' external-QP test) is not run out of RNR
            // retries in a few milliseconds.
            a.min_rnr_timer = 0;
            a.ah_attr = crate::AhAttr::roce(gid, 0, 1);
            let m = QpAttrMask::STATE
                | QpAttrMask::AV
                | QpAttrMask::PATH_MTU
                | QpAttrMask::DEST_QPN
                | QpAttrMask::RQ_PSN
                | QpAttrMask::MAX_DEST_RD_ATOMIC
                | QpAttrMask::MIN_RNR_TIMER;
            return Ok((a, m));
        }
        if state == QpState::Rts {
            a.sq_psn = sq_psn;
            a.timeout = timeout;
            a.retry_cnt = retry.min(7);
            a.rnr_retry = rnr.min(7);
            a.max_rd_atomic = rd_atomic.max(1);
            let m = QpAttrMask::STATE
                | QpAttrMask::SQ_PSN
                | QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC;
            return Ok((a, m));
        }
        Err(einval(OP, "state is not INIT, RTR or RTS"))
    }

    /// UD `rdma_accept` / `rdma_reject`: the SIDR_REP with `status`, our QP (the ID's, else
    /// `p.qp_num`) and [`RDMA_UDP_QKEY`] (kernel cma.c `cma_send_sidr_rep`). No event
    /// follows on this side.
    fn sidr_answer(&self, op: &'static str, status: SidrStatus, p: &ConnParam) -> Result<()> {
        let st = self.state();
        let (Some(d), Some(id), true) = (st.dev.clone(), st.cm, st.peer_sidr.is_some()) else {
            return Err(einval(op, "not a UD connection request"));
        };
        if p.private_data.len() > 136 {
            return Err(einval(op, "private data longer than 136 bytes"));
        }
        let (qpn, qkey) = if status != SidrStatus::SUCCESS {
            (0, 0)
        } else {
            match st.qp.as_ref().and_then(crate::WeakQp::upgrade) {
                Some(qp) => (qp.qp_num(), RDMA_UDP_QKEY),
                None if p.qp_num != 0 => (p.qp_num, RDMA_UDP_QKEY),
                None => return Err(einval(op, "no QP on the ID and no qp_num")),
            }
        };
        drop(st);
        d.cm.sidr_reply(id, status.0, qpn, qkey, &p.private_data)
    }

    /// `rdma_set_option(RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT)`: the local ACK timeout
    /// (exponent, 4.096 µs × 2^t; 0..=31) this ID's QP gets at RTS — by `rdma_accept`, the
    /// active side's REP handling and `rdma_init_qp_attr` — instead of the REQ's.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        if timeout > 31 {
            return Err(einval("rdma_set_option", "ACK timeout above 31"));
        }
        self.state().ack_timeout = Some(timeout);
        Ok(())
    }

    /// `rdma_reject` (REJ reason 28, consumer defined; private data ≤ 148 bytes; on a UD ID
    /// a SIDR_REP with status REJECT, ≤ 136 bytes).
    pub fn reject(&self, private_data: &[u8]) -> Result<()> {
        if self.is_ud() {
            let p = ConnParam {
                private_data: private_data.to_vec(),
                ..ConnParam::default()
            };
            return self.sidr_answer("rdma_reject", SidrStatus::REJECT, &p);
        }
        let st = self.state();
        let (Some(d), Some(id)) = (st.dev.clone(), st.cm) else {
            return Err(einval("rdma_reject", "not a connection request"));
        };
        d.cm.reject(id, 28, private_data)
    }

    /// `rdma_reject_ece`: refuse a connection request because of its ECE options (REJ reason
    /// 35, vendor option not supported; private data ≤ 148 bytes).
    pub fn reject_ece(&self, private_data: &[u8]) -> Result<()> {
        let st = self.state();
        let (Some(d), Some(id), false) = (st.dev.clone(), st.cm, self.is_ud()) else {
            return Err(einval("rdma_reject_ece", "not a connection request"));
        };
        d.cm.reject(id, 35, private_data)
    }

    /// `rdma_disconnect`: the QP to ERR, then DREQ (or DREP to the peer's DREQ).
    pub fn disconnect(&self) -> Result<()> {
        let st = self.state();
        let (Some(d), Some(id)) = (st.dev.clone(), st.cm) else {
            return Err(einval("rdma_disconnect", "not connected"));
        };
        if let Some(qp) = st.qp.as_ref().and_then(crate::WeakQp::upgrade) {
            let _ = qp.set_state(QpState::Err);
        }
        d.cm.disconnect(id)
    }

    /// `rdma_destroy_id`: let go of the CM ID (a connection still up is disconnected); its
    /// events not taken from the channel yet are dropped, as the kernel drops them.
    pub fn destroy(self) {
        let st = self.state();
        if let (Some(d), Some(id)) = (st.dev.clone(), st.cm) {
            let _ = d.cm.destroy(id);
            hub().ids.remove(&(d.ctx.device().name().to_string(), id.0));
        }
        drop(st);
        drop(self.chan_lock().take_for(&self));
    }

    /// A device CM event for this ID.
    fn on_cm_event(&self, d: &Arc<DevCm>, e: CmEvent) {
        use RdmaCmEventKind as K;
        match e {
            CmEvent::ConnectResponse { id, rep, ece } => {
                let (qp, mtu, rq_psn, retry_count, ack_timeout, offered) = {
                    let mut st = self.state();
                    st.peer_rep = Some(rep.clone());
                    st.remote_ece = ece;
                    (
                        st.qp.as_ref().and_then(crate::WeakQp::upgrade_transient),
                        st.path_mtu,
                        st.rq_psn,
                        st.retry_count,
                        st.ack_timeout,
                        st.offered_ece,
                    )
                };
                let param = ConnParam {
                    private_data: rep.private_data.to_vec(),
                    responder_resources: rep.initiator_depth,
                    initiator_depth: rep.responder_resources,
                    retry_count: 0,
                    rnr_retry_count: rep.rnr_retry_count,
                    srq: rep.srq,
                    qp_num: rep.local_qpn.value(),
                };
                let Some(qp) = qp else {
                    self.event(K::ConnectResponse, 0, param);
                    return;
                };
                let dst_gid = route_gid(&self.state());
                let remote = QpEndpoint {
                    qpn: rep.local_qpn.value(),
                    psn: rq_psn,
                    gid: dst_gid,
                };
                // ECE: what our REQ offered and the REP agreed to (docs/wire.md §5.6), set
                // before the move to RTR.
                let ece_set = if qp.qp_type() == crate::QpType::Rc {
                    qp.set_ece(Ece::uroce(agreed_ece(offered, ece)))
                } else {
                    Ok(())
                };
                let mut o = ConnectOpts {
                    path_mtu: mtu,
                    sq_psn: rep.starting_psn.value(),
                    ..ConnectOpts::default()
                };
                o.max_rd_atomic = rep.responder_resources.max(1);
                o.max_dest_rd_atomic = rep.initiator_depth.max(1);
                o.retry_cnt = retry_count;
                o.timeout = ack_timeout.unwrap_or(REQ_ACK_TIMEOUT);
                match ece_set
                    .and_then(|()| qp.connect(&remote, &o))
                    .and_then(|()| d.cm.establish(id))
                {
                    Ok(()) => self.event(K::Established, 0, param),
                    Err(e) => {
                        let _ = d.cm.reject(id, 28, &[]);
                        self.event(K::ConnectError, -e.errno().0, param);
                    }
                }
            }
            CmEvent::Established { .. } => self.event(K::Established, 0, ConnParam::default()),
            CmEvent::Rejected {
                reason,
                private_data,
                ..
            } => {
                let qp = self
                    .state()
                    .qp
                    .as_ref()
                    .and_then(crate::WeakQp::upgrade_transient);
                if let Some(qp) = qp {
                    let _ = qp.set_state(QpState::Err);
                }
                self.event(
                    K::Rejected,
                    i32::from(reason),
                    ConnParam {
                        private_data,
                        ..ConnParam::default()
                    },
                );
            }
            CmEvent::Unreachable { .. } => self.event(K::Unreachable, -110, ConnParam::default()),
            CmEvent::Disconnected { timed_out, .. } => {
                let qp = self
                    .state()
                    .qp
                    .as_ref()
                    .and_then(crate::WeakQp::upgrade_transient);
                if let Some(qp) = qp {
                    let _ = qp.set_state(QpState::Err);
                }
                let status = if timed_out { -110 } else { 0 };
                self.event(K::Disconnected, status, ConnParam::default());
            }
            CmEvent::TimewaitExit { .. } => self.event(K::TimewaitExit, 0, ConnParam::default()),
            CmEvent::SidrReply { rep, .. } => {
                let param = ConnParam {
                    private_data: rep.private_data.to_vec(),
                    ..ConnParam::default()
                };
                if rep.status != SidrStatus::SUCCESS {
                    // Kernel cma.c cma_sidr_rep_handler: UNREACHABLE, status = SIDR status.
                    self.event(K::Unreachable, i32::from(rep.status.0), param);
                    return;
                }
                let gid = route_gid(&self.state());
                self.push(RdmaCmEvent {
                    kind: K::Established,
                    id: self.clone(),
                    listen_id: None,
                    status: 0,
                    param,
                    ud: Some(UdParam {
                        ah_attr: AhAttr::roce(gid, 0, 1),
                        qp_num: rep.qpn.value(),
                        qkey: rep.qkey.0,
                    }),
                });
            }
            CmEvent::ConnectRequest { .. } | CmEvent::SidrRequest { .. } => {}
        }
    }
}

/// QP attributes of the passive side from the REQ (kernel cma.c rdma_init_qp_attr with
/// cm.c cm_init_qp_rtr_attr / cm_init_qp_rts_attr).
fn opts(mtu: Mtu, sq_psn: u32, p: &ConnParam, req: &crate::cm::ReqRepr) -> ConnectOpts {
    ConnectOpts {
        path_mtu: mtu,
        sq_psn,
        timeout: req.primary.local_ack_timeout.max(1),
        retry_cnt: req.retry_count,
        rnr_retry: p.rnr_retry_count.min(7),
        max_rd_atomic: p.initiator_depth.max(1),
        max_dest_rd_atomic: p.responder_resources.max(1),
        ..ConnectOpts::default()
    }
}
