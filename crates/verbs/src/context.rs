//! The device context (`ibv_context`): the command channel, the doorbell page, the async
//! event fd, and the device/port/GID queries.
//!
//! # The command channel (slow path)
//!
//! Each context owns one stream to the control plane (abi [`abi::cmd`] module docs): a
//! command is one request message, answered by exactly one reply, one command at a time —
//! so the channel sits behind a mutex, as rdma-core serializes `write()`s on the uverbs fd.
//! The reply is read until the length its header declares, which works whether the
//! provider hands out a `SOCK_STREAM` or a `SOCK_SEQPACKET` socket.
//!
//! # Teardown
//!
//! The engine reaches ring and doorbell memory that this library allocated. So memory is
//! freed only after the control plane confirmed it let go: a ring after its DESTROY command
//! succeeded, the doorbell page after the control plane closed its end of the channel in
//! answer to ours (it tears the context down on EOF, as the kernel does when the uverbs fd
//! is closed). If that confirmation never comes, the memory is leaked instead of freed.

use std::fmt;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use abi::cmd::{Reply, ReplyHdr};
use abi::doorbell::{DoorbellLayout, Doorbells, Progress};
use abi::shm::SharedMem;
use abi::uverbs::{
    AsyncEventDesc, GetContext, GetContextResp, QueryDevice, QueryDeviceResp, QueryGid,
    QueryGidResp, QueryPkey, QueryPkeyResp, QueryPort, QueryPortResp, Request, UroceGetContext,
    UroceGetContextResp, UROCE_ABI_VERSION,
};
use abi::{AtomicCap, Errno, Gid, GidType, LinkLayer, Mtu, PortState};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::device::Device;
use crate::error::{Error, Result};
use crate::sys;

/// Doorbell slots per context: one per QP, so at most this many QPs per context.
pub const DOORBELL_SLOTS: u32 = 4096;

/// How long a closing context waits for the control plane to confirm teardown before it
/// leaks the doorbell page instead of freeing it.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Read a `T` from the front of `bytes`, zero-filling what is missing (the kernel clears
/// the unused tail of a core response; abi `cmd` module docs), and advance `bytes`.
pub(crate) fn take<T: FromBytes + IntoBytes + KnownLayout + Immutable>(bytes: &mut &[u8]) -> T {
    let mut v = T::new_zeroed();
    let n = core::mem::size_of::<T>().min(bytes.len());
    if let (Some(dst), Some(src)) = (v.as_mut_bytes().get_mut(..n), bytes.get(..n)) {
        dst.copy_from_slice(src);
    }
    *bytes = bytes.get(n..).unwrap_or(&[]);
    v
}

/// The command channel: one request, one reply.
struct Channel {
    stream: UnixStream,
    out: Vec<u8>,
    inb: Vec<u8>,
    /// Set when a reply could not be framed: the stream is out of step and unusable.
    broken: bool,
}

impl Channel {
    /// Send `req`, wait for its reply, return the response bytes or the errno.
    fn call(&mut self, op: &'static str, req: &Request<'_>) -> Result<&[u8]> {
        if self.broken {
            return Err(Error::protocol(
                op,
                "command channel out of step after an earlier bad reply",
            ));
        }
        req.encode(&mut self.out).map_err(|e| Error::abi(op, &e))?;
        self.stream
            .write_all(&self.out)
            .map_err(|e| Error::channel(op, &e))?;
        // An error reply may carry a reason record whatever the request offered.
        let offered = ReplyHdr::SIZE + req.response_capacity();
        let cap = offered.max(ReplyHdr::SIZE + abi::reason::MAX_REASON_BYTES);
        self.inb.clear();
        self.inb.resize(cap, 0);
        let mut have = 0usize;
        let total = loop {
            let n = match self
                .stream
                .read(self.inb.get_mut(have..).unwrap_or(&mut []))
            {
                Ok(0) => {
                    self.broken = true;
                    return Err(Error::channel(
                        op,
                        &std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "control plane closed the channel",
                        ),
                    ));
                }
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.broken = true;
                    return Err(Error::channel(op, &e));
                }
            };
            have += n;
            if have >= ReplyHdr::SIZE {
                let hdr: ReplyHdr = take(&mut self.inb.get(..ReplyHdr::SIZE).unwrap_or(&[]));
                let total = ReplyHdr::SIZE.saturating_add(hdr.resp_len as usize);
                let allowed = if hdr.status < 0 { cap } else { offered };
                if total > allowed {
                    self.broken = true;
                    return Err(Error::protocol(
                        op,
                        format!("reply of {total} bytes exceeds the {allowed} offered"),
                    ));
                }
                if have >= total {
                    break total;
                }
            }
            if have >= cap {
                self.broken = true;
                return Err(Error::protocol(op, "reply longer than offered"));
            }
        };
        let bytes = self.inb.get(..total).unwrap_or(&[]);
        let reply = Reply::parse(bytes).map_err(|e| Error::abi(op, &e));
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                self.broken = true;
                return Err(e);
            }
        };
        let sent = self
            .out
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_ne_bytes)
            .unwrap_or(0);
        if reply.command != sent {
            self.broken = true;
            return Err(Error::protocol(
                op,
                format!("reply for command {:#x}, sent {sent:#x}", reply.command),
            ));
        }
        let reason = reply.reason;
        reply.result.map_err(|errno| {
            let e = Error::control_plane(op, errno);
            match reason {
                Some(r) => e.with_reason(r.rule, r.text),
                None => e,
            }
        })
    }
}

/// An open device (`ibv_context`). Cheap to clone; every object created from it keeps it
/// alive, and the channel closes when the last handle and object are gone.
#[derive(Clone)]
pub struct Context(pub(crate) Arc<CtxInner>);

pub(crate) struct CtxInner {
    device: Device,
    chan: Mutex<Channel>,
    async_fd: Option<OwnedFd>,
    /// Bytes of a partially read async event.
    async_partial: Mutex<Vec<u8>>,
    pub(crate) doorbells: Doorbells,
    doorbell_mem: Arc<SharedMem>,
    pub(crate) wake: sys::EventFdWake,
    /// The engine's work on this thread while it sleeps (embedded mode only).
    pub(crate) progress: Option<Arc<dyn Progress>>,
    pub(crate) max_inline: u32,
    num_comp_vectors: u32,
}

impl Context {
    pub(crate) fn open(device: Device) -> Result<Context> {
        const OP: &str = "open_device";
        let stream = device
            .provider()
            .open(device.spec())
            .map_err(|e| Error::channel(OP, &e))?;
        let layout = DoorbellLayout::new(DOORBELL_SLOTS).map_err(|e| Error::abi(OP, &e))?;
        let mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).map_err(|e| Error::abi(OP, &e))?);
        layout.init(&mem, 0).map_err(|e| Error::abi(OP, &e))?;
        let doorbells =
            Doorbells::attach(mem.clone(), 0, layout).map_err(|e| Error::abi(OP, &e))?;
        let mut chan = Channel {
            stream,
            out: Vec::with_capacity(256),
            inb: Vec::with_capacity(256),
            broken: false,
        };
        let req = Request::GetContext(
            GetContext { response: 0 },
            UroceGetContext {
                abi_version: UROCE_ABI_VERSION,
                doorbell_slots: layout.slots(),
                doorbell_addr: mem.addr(),
                doorbell_len: layout.bytes() as u64,
            },
        );
        let (core, drv) = {
            let mut resp = chan.call("get_context", &req)?;
            let core: GetContextResp = take(&mut resp);
            let drv: UroceGetContextResp = take(&mut resp);
            (core, drv)
        };
        // From here on the control plane may touch the doorbell page, so failing must go
        // through CtxInner's teardown (which waits for the control plane to let go).
        let async_fd = sys::adopt_fd(core.async_fd);
        // The wake fd is ours too (a duplicate of the engine's eventfd), closed with the
        // context; −1 means the engine never parks.
        let wake_fd = sys::adopt_fd(drv.wake_fd as u32);
        let progress = device.provider().progress(device.spec());
        let inner = CtxInner {
            device,
            chan: Mutex::new(chan),
            async_fd,
            async_partial: Mutex::new(Vec::new()),
            doorbells,
            doorbell_mem: mem,
            wake: sys::EventFdWake::new(wake_fd),
            progress,
            max_inline: drv.max_inline_data.min(abi::fastpath::MAX_INLINE_DATA),
            num_comp_vectors: core.num_comp_vectors.max(1),
        };
        let ctx = Context(Arc::new(inner));
        if drv.abi_version != UROCE_ABI_VERSION {
            return Err(Error::protocol(
                OP,
                format!(
                    "device speaks uroce ABI {}, library {}",
                    drv.abi_version, UROCE_ABI_VERSION
                ),
            ));
        }
        if let Some(fd) = &ctx.0.async_fd {
            sys::set_nonblocking(fd.as_fd()).map_err(|e| Error::channel(OP, &e))?;
        }
        Ok(ctx)
    }

    /// Run one command and hand its response bytes to `f` (under the channel lock).
    pub(crate) fn cmd<R>(
        &self,
        op: &'static str,
        req: &Request<'_>,
        f: impl FnOnce(&[u8]) -> Result<R>,
    ) -> Result<R> {
        let mut chan = self.lock_chan();
        let resp = chan.call(op, req)?;
        f(resp)
    }

    fn lock_chan(&self) -> MutexGuard<'_, Channel> {
        // A panic while holding the lock leaves the channel consistent or marked broken.
        self.0.chan.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device this context was opened on.
    pub fn device(&self) -> &Device {
        &self.0.device
    }

    /// Largest inline payload the device accepts in a send WQE.
    pub fn max_inline_data(&self) -> u32 {
        self.0.max_inline
    }

    /// `num_comp_vectors`.
    pub fn num_comp_vectors(&self) -> u32 {
        self.0.num_comp_vectors
    }

    pub(crate) fn same(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Identity of this context (handles are only meaningful within one context).
    pub(crate) fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        self.cmd(
            "query_device",
            &Request::QueryDevice(QueryDevice { response: 0 }),
            |mut r| Ok(DeviceAttr::from_resp(&take(&mut r))),
        )
    }

    /// `ibv_query_port` (ports are numbered from 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let req = Request::QueryPort(QueryPort {
            response: 0,
            port_num: port,
            reserved: [0; 7],
        });
        self.cmd("query_port", &req, |mut r| {
            PortAttr::from_resp(&take(&mut r))
        })
    }

    /// `ibv_query_gid_ex`: one GID table entry with its type. An empty slot is `ENODATA`.
    pub fn query_gid_entry(&self, port: u8, index: u32) -> Result<GidEntry> {
        let req = Request::QueryGid(QueryGid {
            response: 0,
            port_num: port,
            reserved: [0; 3],
            index,
        });
        let r: QueryGidResp = self.cmd("query_gid", &req, |mut r| Ok(take(&mut r)))?;
        if r.flags & QueryGidResp::FLAG_VALID == 0 {
            return Err(Error::control_plane("query_gid", Errno::ENODATA));
        }
        Ok(GidEntry {
            gid: Gid(r.gid),
            gid_type: GidType(r.gid_type),
            index,
            port,
        })
    }

    /// `ibv_query_gid`: the GID at `index` (all zeros for an empty slot, as libibverbs).
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        match self.query_gid_entry(port, index) {
            Ok(e) => Ok(e.gid),
            Err(e) if e.errno() == Errno::ENODATA => Ok(Gid::default()),
            Err(e) => Err(e),
        }
    }

    /// `ibv_query_pkey`.
    pub fn query_pkey(&self, port: u8, index: u32) -> Result<u16> {
        let req = Request::QueryPkey(QueryPkey {
            response: 0,
            port_num: port,
            reserved: [0; 3],
            index,
        });
        let r: QueryPkeyResp = self.cmd("query_pkey", &req, |mut r| Ok(take(&mut r)))?;
        Ok(r.pkey)
    }

    /// The command channel's socket (`context->cmd_fd`): valid, and the same descriptor,
    /// for the context's whole life. It identifies the context (its inode) to
    /// `ibv_import_device`-style lookups; commands must go through this API, as they are
    /// framed and serialised here (writing to it directly puts the channel out of step).
    pub fn cmd_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.lock_chan().stream.as_raw_fd()
    }

    /// The async event fd (`context->async_fd`), non-blocking; readable when an async
    /// event is queued. Register it with epoll or use [`Context::get_async_event`].
    pub fn async_fd(&self) -> Option<BorrowedFd<'_>> {
        self.0.async_fd.as_ref().map(|f| f.as_fd())
    }

    /// `ibv_get_async_event` without blocking: the next event, or `None` if none is queued.
    pub fn try_get_async_event(&self) -> Result<Option<AsyncEvent>> {
        const OP: &str = "get_async_event";
        let fd = self
            .async_fd()
            .ok_or_else(|| Error::local(OP, Errno::EOPNOTSUPP, "device has no async event fd"))?;
        let mut partial = self
            .0
            .async_partial
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        loop {
            let have = partial.len();
            if have >= AsyncEventDesc::SIZE {
                let mut bytes: &[u8] = &partial;
                let d: AsyncEventDesc = take(&mut bytes);
                partial.drain(..AsyncEventDesc::SIZE);
                return Ok(Some(AsyncEvent {
                    event_type: EventType(d.event_type),
                    element: d.element,
                }));
            }
            let mut buf = [0u8; AsyncEventDesc::SIZE];
            let want = AsyncEventDesc::SIZE - have;
            match sys::read(fd, buf.get_mut(..want).unwrap_or(&mut [])) {
                Ok(0) => return Err(Error::protocol(OP, "async event fd closed")),
                Ok(n) => partial.extend_from_slice(buf.get(..n).unwrap_or(&[])),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(Error::channel(OP, &e)),
            }
        }
    }

    /// `ibv_get_async_event`: block until an async event arrives (or `timeout` passes:
    /// `Ok(None)`; `None` waits forever).
    pub fn get_async_event(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        loop {
            if let Some(ev) = self.try_get_async_event()? {
                return Ok(Some(ev));
            }
            let ms = match deadline {
                None => -1,
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX)
                }
            };
            if let Some(fd) = self.async_fd() {
                sys::wait_readable(fd, ms).map_err(|e| Error::channel("get_async_event", &e))?;
            }
        }
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<crate::Pd> {
        crate::pd::Pd::alloc(self)
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self) -> Result<crate::CompChannel> {
        crate::cq::CompChannel::create(self)
    }

    /// `ibv_create_cq`: a CQ of at least `cqe` entries, optionally reporting completion
    /// events on `channel`.
    pub fn create_cq(
        &self,
        cqe: u32,
        channel: Option<&crate::CompChannel>,
        comp_vector: u32,
    ) -> Result<crate::Cq> {
        crate::cq::Cq::create(self, cqe, channel, comp_vector, None, false)
    }

    /// [`Context::create_cq`] with `ibv_create_cq_ex`'s extras: in a parent domain `pd`
    /// (`parent_domain`: the ring's memory comes from its allocator, if it has one), and
    /// with `wallclock` every completion stamped with the wall-clock time the device wrote
    /// it (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK`; [`crate::Cq::poll_raw_stamped`]).
    pub fn create_cq_ex(
        &self,
        cqe: u32,
        channel: Option<&crate::CompChannel>,
        comp_vector: u32,
        pd: Option<&crate::Pd>,
        wallclock: bool,
    ) -> Result<crate::Cq> {
        crate::cq::Cq::create(self, cqe, channel, comp_vector, pd, wallclock)
    }
}

impl Drop for CtxInner {
    fn drop(&mut self) {
        // Close our half and wait for the control plane to close its half: that is its
        // confirmation that the context is torn down and the doorbell page released.
        let chan = self.chan.get_mut().unwrap_or_else(|p| p.into_inner());
        let confirmed = chan.stream.shutdown(std::net::Shutdown::Write).is_ok()
            && chan.stream.set_read_timeout(Some(CLOSE_TIMEOUT)).is_ok()
            && {
                let mut sink = [0u8; 256];
                loop {
                    match chan.stream.read(&mut sink) {
                        Ok(0) => break true,
                        Ok(_) => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(_) => break false,
                    }
                }
            };
        if !confirmed {
            std::mem::forget(self.doorbell_mem.clone());
        }
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.0.device.name())
            .field("max_inline", &self.0.max_inline)
            .finish()
    }
}

/// A GID table entry (`ibv_gid_entry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its type (uroce: RoCE v2).
    pub gid_type: GidType,
    /// Table index.
    pub index: u32,
    /// Port.
    pub port: u8,
}

/// `struct ibv_device_attr` (from QUERY_DEVICE).
#[allow(missing_docs)] // fields are named and documented as in ibv_device_attr
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    pub fw_ver: u64,
    /// Host-order value of the big-endian node GUID.
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: AtomicCap,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

impl DeviceAttr {
    fn from_resp(r: &QueryDeviceResp) -> DeviceAttr {
        DeviceAttr {
            fw_ver: r.fw_ver,
            node_guid: r.node_guid.get(),
            sys_image_guid: r.sys_image_guid.get(),
            max_mr_size: r.max_mr_size,
            page_size_cap: r.page_size_cap,
            vendor_id: r.vendor_id,
            vendor_part_id: r.vendor_part_id,
            hw_ver: r.hw_ver,
            max_qp: r.max_qp,
            max_qp_wr: r.max_qp_wr,
            device_cap_flags: r.device_cap_flags,
            max_sge: r.max_sge,
            max_sge_rd: r.max_sge_rd,
            max_cq: r.max_cq,
            max_cqe: r.max_cqe,
            max_mr: r.max_mr,
            max_pd: r.max_pd,
            max_qp_rd_atom: r.max_qp_rd_atom,
            max_ee_rd_atom: r.max_ee_rd_atom,
            max_res_rd_atom: r.max_res_rd_atom,
            max_qp_init_rd_atom: r.max_qp_init_rd_atom,
            max_ee_init_rd_atom: r.max_ee_init_rd_atom,
            atomic_cap: AtomicCap(r.atomic_cap),
            max_ee: r.max_ee,
            max_rdd: r.max_rdd,
            max_mw: r.max_mw,
            max_raw_ipv6_qp: r.max_raw_ipv6_qp,
            max_raw_ethy_qp: r.max_raw_ethy_qp,
            max_mcast_grp: r.max_mcast_grp,
            max_mcast_qp_attach: r.max_mcast_qp_attach,
            max_total_mcast_qp_attach: r.max_total_mcast_qp_attach,
            max_ah: r.max_ah,
            max_fmr: r.max_fmr,
            max_map_per_fmr: r.max_map_per_fmr,
            max_srq: r.max_srq,
            max_srq_wr: r.max_srq_wr,
            max_srq_sge: r.max_srq_sge,
            max_pkeys: r.max_pkeys,
            local_ca_ack_delay: r.local_ca_ack_delay,
            phys_port_cnt: r.phys_port_cnt,
        }
    }
}

/// `struct ibv_port_attr` (from QUERY_PORT).
#[allow(missing_docs)] // fields are named and documented as in ibv_port_attr
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortAttr {
    pub state: PortState,
    pub max_mtu: Mtu,
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: LinkLayer,
    pub flags: u8,
}

impl PortAttr {
    fn from_resp(r: &QueryPortResp) -> Result<PortAttr> {
        let mtu = |v: u8| {
            Mtu::from_raw(v.into())
                .ok_or_else(|| Error::protocol("query_port", format!("MTU value {v}")))
        };
        Ok(PortAttr {
            state: PortState(u32::from(r.state)),
            max_mtu: mtu(r.max_mtu)?,
            active_mtu: mtu(r.active_mtu)?,
            gid_tbl_len: r.gid_tbl_len,
            port_cap_flags: r.port_cap_flags,
            max_msg_sz: r.max_msg_sz,
            bad_pkey_cntr: r.bad_pkey_cntr,
            qkey_viol_cntr: r.qkey_viol_cntr,
            pkey_tbl_len: r.pkey_tbl_len,
            lid: r.lid,
            sm_lid: r.sm_lid,
            lmc: r.lmc,
            max_vl_num: r.max_vl_num,
            sm_sl: r.sm_sl,
            subnet_timeout: r.subnet_timeout,
            init_type_reply: r.init_type_reply,
            active_width: r.active_width,
            active_speed: r.active_speed,
            phys_state: r.phys_state,
            link_layer: LinkLayer(r.link_layer),
            flags: r.flags,
        })
    }
}

/// `enum ibv_event_type` (same numbers as the kernel's `ib_event_type`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct EventType(pub u32);

macro_rules! event_types {
    ($($name:ident = $v:expr, $doc:expr;)*) => {
        impl EventType {
            $(#[doc = $doc] pub const $name: EventType = EventType($v);)*
            /// The name (`"QP_FATAL"`), if known.
            pub fn name(self) -> Option<&'static str> {
                match self.0 { $($v => Some(stringify!($name)),)* _ => None }
            }
        }
    };
}

event_types! {
    CQ_ERR = 0, "CQ overrun or other CQ error (element: the CQ).";
    QP_FATAL = 1, "QP catastrophic error, e.g. its CQ overflowed (element: the QP).";
    QP_REQ_ERR = 2, "Invalid request local work queue error (element: the QP).";
    QP_ACCESS_ERR = 3, "Local access violation error (element: the QP).";
    COMM_EST = 4, "Communication established (element: the QP).";
    SQ_DRAINED = 5, "Send queue drained (element: the QP).";
    PATH_MIG = 6, "Path migrated (element: the QP).";
    PATH_MIG_ERR = 7, "Path migration failed (element: the QP).";
    DEVICE_FATAL = 8, "Device catastrophic error.";
    PORT_ACTIVE = 9, "Port became active (element: the port number).";
    PORT_ERR = 10, "Port went down (element: the port number).";
    LID_CHANGE = 11, "LID changed (element: the port number).";
    PKEY_CHANGE = 12, "P_Key table changed (element: the port number).";
    SM_CHANGE = 13, "SM changed (element: the port number).";
    SRQ_ERR = 14, "SRQ error (element: the SRQ).";
    SRQ_LIMIT_REACHED = 15, "SRQ fell below its limit (element: the SRQ).";
    QP_LAST_WQE_REACHED = 16, "Last WQE of an SRQ-attached QP reached (element: the QP).";
    CLIENT_REREGISTER = 17, "Client reregister (element: the port number).";
    GID_CHANGE = 18, "GID table changed (element: the port number).";
    WQ_FATAL = 19, "WQ fatal error.";
}

impl fmt::Debug for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "EventType({})", self.0),
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One async event (`struct ibv_async_event`). `element` is the `user_handle` of the
/// object it concerns — compare with [`crate::Qp::user_handle`], [`crate::Cq::user_handle`],
/// [`crate::Srq::user_handle`] — or the port number for port events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: EventType,
    /// The object's `user_handle`, or the port number.
    pub element: u64,
}

/// Process-unique `user_handle`s for CREATE_CQ/QP/SRQ/AH, so events can name objects.
pub(crate) fn next_user_handle() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
