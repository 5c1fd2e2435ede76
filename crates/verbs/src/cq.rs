//! Completion queues and completion channels (`ibv_cq`, `ibv_comp_channel`).
//!
//! # Polling (fast path)
//!
//! The engine writes CQEs (abi [`abi::fastpath::Cqe`]: an `ibv_wc` and padding) into the
//! CQ ring this library allocated, and publishes them with a Release store of the ring's
//! producer index; [`Cq::poll`] reads the index (Acquire), copies the entries out and
//! frees them with one Release store of the consumer index. No system call, and the only
//! lock is the CQ's own (uncontended in the usual one-poller case: no system call either).
//!
//! # Event mode
//!
//! [`Cq::req_notify`] arms the CQ (a REQ_NOTIFY_CQ command); the next completion (or next
//! solicited one) makes the control plane write one [`abi::uverbs::CompEventDesc`] to the
//! completion channel's fd, which is what epoll or [`CompChannel::get_event`] wait for.

use std::collections::HashMap;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use abi::fastpath::CQE_BYTES;
use abi::ring::{Consumer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::{
    self, CompEventDesc, CreateCompChannel, CreateCompChannelResp, CreateCq, CreateCqResp,
    DestroyCq, PollCq, ReqNotifyCq, Request, ResizeCq, ResizeCqResp, UroceCreateCq, UroceResizeCq,
};
use abi::{Errno, WcFlags, WcOpcode, WcStatus};

use crate::asyncio::Readable;
use crate::context::{next_user_handle, take, Context};
use crate::error::{Error, ErrorKind, Result};
use crate::sys;

/// One work completion (`struct ibv_wc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wc {
    /// The WR's `wr_id`.
    pub wr_id: u64,
    /// Completion status; for errors only `wr_id`, `status`, `qp_num` and `vendor_err`
    /// are meaningful.
    pub status: WcStatus,
    /// What completed (receive completions have [`WcOpcode::is_recv`]).
    pub opcode: WcOpcode,
    /// Vendor error (uroce: a diagnostic code or 0).
    pub vendor_err: u32,
    /// Bytes transferred (receives, READs, atomics).
    pub byte_len: u32,
    /// Raw `imm_data` (network-order bytes) / `invalidated_rkey`; see the accessors.
    pub ex: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP (UD receives).
    pub src_qp: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
}

impl Wc {
    /// Convert from the ABI layout (the first 48 bytes of a CQE).
    pub fn from_abi(w: &uverbs::Wc) -> Wc {
        Wc {
            wr_id: w.wr_id,
            // A status or opcode outside its enum (the engine writes none) is reported
            // as a failed completion.
            status: match (WcStatus::from_raw(w.status), WcOpcode::from_raw(w.opcode)) {
                (Some(s), Some(_)) => s,
                _ => WcStatus::GeneralErr,
            },
            opcode: WcOpcode::from_raw(w.opcode).unwrap_or_default(),
            vendor_err: w.vendor_err,
            byte_len: w.byte_len,
            ex: w.ex,
            qp_num: w.qp_num,
            src_qp: w.src_qp,
            wc_flags: WcFlags(w.wc_flags),
            pkey_index: w.pkey_index,
            slid: w.slid,
            sl: w.sl,
            dlid_path_bits: w.dlid_path_bits,
        }
    }

    /// Whether the WR succeeded.
    pub fn is_success(&self) -> bool {
        self.status == WcStatus::Success
    }

    /// The immediate value in host order, if the completion carries one.
    pub fn imm_data(&self) -> Option<u32> {
        self.wc_flags
            .contains(WcFlags::WITH_IMM)
            .then(|| u32::from_be_bytes(self.ex.to_ne_bytes()))
    }

    /// The invalidated rkey, if the completion reports one (SEND_WITH_INV received).
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.wc_flags.contains(WcFlags::WITH_INV).then_some(self.ex)
    }

    /// Whether a 40-byte GRH precedes the payload in the receive buffer (UD).
    pub fn has_grh(&self) -> bool {
        self.wc_flags.contains(WcFlags::GRH)
    }
}

/// A completion channel (`ibv_comp_channel`): an fd that becomes readable when an armed CQ
/// gets a completion. Cheap to clone; CQs using it keep it alive.
#[derive(Clone)]
pub struct CompChannel(Arc<ChanInner>);

struct ChanInner {
    ctx: Context,
    fd: OwnedFd,
    /// Bytes of a partially read event.
    partial: Mutex<Vec<u8>>,
    /// CQs reporting here, by the `user_handle` events carry.
    cqs: Mutex<HashMap<u64, Weak<CqInner>>>,
}

impl CompChannel {
    pub(crate) fn create(ctx: &Context) -> Result<CompChannel> {
        const OP: &str = "create_comp_channel";
        let req = Request::CreateCompChannel(CreateCompChannel { response: 0 });
        let r: CreateCompChannelResp = ctx.cmd(OP, &req, |mut r| Ok(take(&mut r)))?;
        let fd = sys::adopt_fd(r.fd)
            .ok_or_else(|| Error::protocol(OP, format!("fd {} is not open", r.fd as i32)))?;
        sys::set_nonblocking(fd.as_fd()).map_err(|e| Error::channel(OP, &e))?;
        Ok(CompChannel(Arc::new(ChanInner {
            ctx: ctx.clone(),
            fd,
            partial: Mutex::new(Vec::new()),
            cqs: Mutex::new(HashMap::new()),
        })))
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    fn cqs(&self) -> MutexGuard<'_, HashMap<u64, Weak<CqInner>>> {
        self.0.cqs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `ibv_get_cq_event` without blocking: the CQ of the next event, or `None`. Events
    /// for CQs destroyed meanwhile are skipped.
    pub fn try_get_event(&self) -> Result<Option<Cq>> {
        const OP: &str = "get_cq_event";
        let mut partial = self.0.partial.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if partial.len() >= CompEventDesc::SIZE {
                let mut bytes: &[u8] = &partial;
                let d: CompEventDesc = take(&mut bytes);
                partial.drain(..CompEventDesc::SIZE);
                let cq = self.cqs().get(&d.cq_handle).and_then(Weak::upgrade);
                if let Some(inner) = cq {
                    inner.events_reported.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some(Cq(inner)));
                }
                continue;
            }
            let mut buf = [0u8; 64];
            match sys::read(self.0.fd.as_fd(), &mut buf) {
                Ok(0) => return Err(Error::protocol(OP, "completion channel fd closed")),
                Ok(n) => partial.extend_from_slice(buf.get(..n).unwrap_or(&[])),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) => return Err(Error::channel(OP, &e)),
            }
        }
    }

    /// `ibv_get_cq_event`: block until an event arrives; `Ok(None)` after `timeout`
    /// (`None` waits forever).
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<Cq>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(cq) = self.try_get_event()? {
                return Ok(Some(cq));
            }
            if !sys::wait_until(self.0.fd.as_fd(), deadline)
                .map_err(|e| Error::channel("get_cq_event", &e))?
            {
                return Ok(None);
            }
        }
    }

    /// `ibv_destroy_comp_channel`: `EBUSY` (channel handed back) while CQs or other
    /// handles use it; otherwise its fd is closed.
    pub fn destroy(self) -> core::result::Result<(), (Error, CompChannel)> {
        match Arc::try_unwrap(self.0) {
            Ok(inner) => {
                drop(inner);
                Ok(())
            }
            Err(arc) => Err((
                Error::local(
                    "destroy_comp_channel",
                    Errno::EBUSY,
                    "CQs or other handles still use the channel",
                ),
                CompChannel(arc),
            )),
        }
    }

    /// A future that resolves when the channel's fd is readable.
    pub fn readable(&self) -> Readable<'_> {
        Readable::new(self.0.fd.as_fd())
    }

    /// Async `ibv_get_cq_event`: wait (without blocking a thread) for the next event.
    pub async fn get_event_async(&self) -> Result<Cq> {
        loop {
            if let Some(cq) = self.try_get_event()? {
                return Ok(cq);
            }
            self.readable()
                .await
                .map_err(|e| Error::channel("get_cq_event", &e))?;
        }
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.fd.as_fd()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd.as_raw_fd()
    }
}

impl fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompChannel")
            .field("fd", &self.0.fd.as_raw_fd())
            .finish()
    }
}

/// A completion queue (`ibv_cq`). Cheap to clone; QPs using it keep it alive, and it is
/// destroyed when the last of them and of its handles is gone.
#[derive(Clone)]
pub struct Cq(pub(crate) Arc<CqInner>);

pub(crate) struct CqInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    user_handle: u64,
    channel: Option<CompChannel>,
    /// The parent domain whose allocator gives the ring memory (also on resize).
    pd: Option<crate::Pd>,
    ring: Mutex<CqRing>,
    cqe: AtomicU32,
    events_reported: AtomicU32,
    events_acked: AtomicU32,
    destroyed: bool,
}

struct CqRing {
    consumer: Consumer,
    mem: Arc<SharedMem>,
    layout: RingLayout,
}

/// Allocate and initialize a ring of at least `depth` entries of `elem` bytes.
pub(crate) fn alloc_ring(
    op: &'static str,
    depth: u32,
    elem: u32,
) -> Result<(Arc<SharedMem>, RingLayout)> {
    let layout = RingLayout::for_depth(depth, elem).map_err(|e| Error::abi(op, &e))?;
    let mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).map_err(|e| Error::abi(op, &e))?);
    layout.init(&mem, 0).map_err(|e| Error::abi(op, &e))?;
    Ok((mem, layout))
}

/// After a failed create/destroy/resize: the control plane refused (it did not attach, or
/// is still attached and will release with the context) — or we cannot know. Only in the
/// first case of a create may the memory be freed; otherwise it is leaked so the engine can
/// never write into freed memory.
pub(crate) fn leak(mem: &Arc<SharedMem>) {
    std::mem::forget(mem.clone());
}

impl Cq {
    pub(crate) fn create(
        ctx: &Context,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
        pd: Option<&crate::Pd>,
        wallclock: bool,
    ) -> Result<Cq> {
        const OP: &str = "create_cq";
        if pd.is_some_and(|p| !p.context().same(ctx)) {
            return Err(Error::local(OP, Errno::EINVAL, "PD of another context"));
        }
        if let Some(ch) = channel {
            if !ch.context().same(ctx) {
                return Err(Error::local(
                    OP,
                    Errno::EINVAL,
                    "completion channel of another context",
                ));
            }
        }
        let (mem, layout) =
            crate::pd::alloc_ring_in(pd, crate::pd::BufferKind::Cq, OP, cqe, CQE_BYTES)?;
        let user_handle = next_user_handle();
        let req = Request::CreateCq(
            CreateCq {
                response: 0,
                user_handle,
                cqe,
                comp_vector,
                comp_channel: channel.map_or(-1, |c| c.as_raw_fd()),
                reserved: 0,
            },
            UroceCreateCq {
                ring: layout.desc(mem.addr()),
                flags: if wallclock {
                    UroceCreateCq::WALLCLOCK
                } else {
                    0
                },
                reserved: 0,
            },
        );
        let r: CreateCqResp = match ctx.cmd(OP, &req, |mut r| Ok(take(&mut r))) {
            Ok(r) => r,
            Err(e) => {
                if e.kind() != ErrorKind::ControlPlane {
                    leak(&mem);
                }
                return Err(e);
            }
        };
        let consumer = Consumer::attach(mem.clone(), 0, layout).map_err(|e| Error::abi(OP, &e))?;
        let inner = Arc::new(CqInner {
            ctx: ctx.clone(),
            handle: r.cq_handle,
            user_handle,
            channel: channel.cloned(),
            pd: pd.cloned(),
            ring: Mutex::new(CqRing {
                consumer,
                mem,
                layout,
            }),
            cqe: AtomicU32::new(r.cqe.min(layout.slots())),
            events_reported: AtomicU32::new(0),
            events_acked: AtomicU32::new(0),
            destroyed: false,
        });
        if let Some(ch) = channel {
            ch.cqs().insert(user_handle, Arc::downgrade(&inner));
        }
        Ok(Cq(inner))
    }

    fn ring(&self) -> MutexGuard<'_, CqRing> {
        self.0.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// Entries the CQ holds (`cq->cqe`).
    pub fn cqe(&self) -> u32 {
        self.0.cqe.load(Ordering::Relaxed)
    }

    /// The `user_handle` completion and async events carry for this CQ.
    pub fn user_handle(&self) -> u64 {
        self.0.user_handle
    }

    /// The control plane's handle.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The completion channel, if any.
    pub fn channel(&self) -> Option<&CompChannel> {
        self.0.channel.as_ref()
    }

    /// Whether `other` is a handle to the same CQ.
    pub fn same(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// `ibv_poll_cq`: move up to `wc.len()` completions into `wc`, oldest first; returns
    /// how many. Reads the CQ ring directly: no system call.
    ///
    /// An empty ring while the engine sleeps (embedded mode): the engine's work is done on
    /// this thread ([`abi::doorbell::Progress`]) and the ring read once more, so a poller
    /// that shares its core with the engine does not wait for the scheduler to hand it over.
    pub fn poll(&self, wc: &mut [Wc]) -> Result<usize> {
        self.poll_driving(wc.len(), |i, w| {
            if let Some(slot) = wc.get_mut(i) {
                *slot = Wc::from_abi(w);
            }
        })
    }

    fn poll_driving(&self, max: usize, mut put: impl FnMut(usize, &uverbs::Wc)) -> Result<usize> {
        let n = ring_take(&mut self.ring().consumer, max, &mut put)?;
        if n > 0 || max == 0 {
            return Ok(n);
        }
        match &self.0.ctx.0.progress {
            Some(p) if p.drive() => ring_take(&mut self.ring().consumer, max, put),
            _ => Ok(0),
        }
    }

    /// How many completions are in the ring now, without taking any (and without doing
    /// the engine's work as [`Cq::poll`] may).
    pub fn pending(&self) -> Result<usize> {
        let n = self
            .ring()
            .consumer
            .available()
            .map_err(|e| Error::abi("poll_cq", &e))?;
        Ok(n as usize)
    }

    /// As [`Cq::poll`], into the ABI layout (the first 48 bytes of `struct ibv_wc`), for
    /// a C-ABI library that copies completions out unchanged.
    pub fn poll_raw(&self, wc: &mut [uverbs::Wc]) -> Result<usize> {
        self.poll_driving(wc.len(), |i, w| {
            if let Some(slot) = wc.get_mut(i) {
                *slot = *w;
            }
        })
    }

    /// One completion with the wall-clock time the device wrote it (ns since the epoch; 0
    /// unless the CQ was made with `wallclock`, [`crate::Context::create_cq_ex`]), or `None`
    /// when the CQ is empty.
    pub fn poll_raw_stamped(&self, wc: &mut uverbs::Wc) -> Result<Option<u64>> {
        const OP: &str = "poll_cq";
        let mut take = |c: &mut Consumer| -> Result<Option<u64>> {
            if c.available().map_err(|e| Error::abi(OP, &e))? == 0 {
                return Ok(None);
            }
            let cqe: abi::fastpath::Cqe = c.read_struct(0).map_err(|e| Error::abi(OP, &e))?;
            c.release(1).map_err(|e| Error::abi(OP, &e))?;
            *wc = cqe.wc;
            Ok(Some(cqe.reserved[0]))
        };
        if let Some(t) = take(&mut self.ring().consumer)? {
            return Ok(Some(t));
        }
        match &self.0.ctx.0.progress {
            Some(p) if p.drive() => take(&mut self.ring().consumer),
            _ => Ok(None),
        }
    }

    /// Slow-path `ibv_poll_cq`: a POLL_CQ command, so the control plane reads the ring on
    /// the caller's behalf (one system-call round trip per call; for comparison with
    /// [`Cq::poll`]).
    pub fn poll_cmd(&self, wc: &mut [Wc]) -> Result<usize> {
        const OP: &str = "poll_cq_cmd";
        let ne = u32::try_from(wc.len()).unwrap_or(u32::MAX);
        let mut ring = self.ring();
        let req = Request::PollCq(PollCq {
            response: 0,
            cq_handle: self.0.handle,
            ne,
        });
        let result = self.0.ctx.cmd(OP, &req, |r| {
            let (_, entries) = uverbs::decode_poll_cq_resp(r).map_err(|e| Error::abi(OP, &e))?;
            let mut n = 0;
            for (slot, w) in wc.iter_mut().zip(entries) {
                *slot = Wc::from_abi(&w);
                n += 1;
            }
            Ok(n)
        });
        // The control plane consumed from our ring: resume from the consumer index it left.
        let (mem, layout) = (ring.mem.clone(), ring.layout);
        ring.consumer = Consumer::attach(mem, 0, layout).map_err(|e| Error::abi(OP, &e))?;
        result
    }

    /// `ibv_req_notify_cq`: arm the CQ so that the next completion (`solicited_only`: the
    /// next solicited or error completion) raises an event on its channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let req = Request::ReqNotifyCq(ReqNotifyCq {
            cq_handle: self.0.handle,
            solicited_only: u32::from(solicited_only),
        });
        self.0.ctx.cmd("req_notify_cq", &req, |_| Ok(()))
    }

    /// `ibv_ack_cq_events`: acknowledge `n` events taken from the channel for this CQ.
    /// (Rust handles keep the CQ alive while an event is held, so this only keeps count.)
    pub fn ack_events(&self, n: u32) {
        self.0.events_acked.fetch_add(n, Ordering::Relaxed);
    }

    /// Events taken from the channel for this CQ and not yet acknowledged.
    pub fn unacked_events(&self) -> u32 {
        self.0
            .events_reported
            .load(Ordering::Relaxed)
            .wrapping_sub(self.0.events_acked.load(Ordering::Relaxed))
    }

    /// `ibv_resize_cq`: give the CQ at least `cqe` entries (unpolled completions move to
    /// the new ring). Returns the new size.
    pub fn resize(&self, cqe: u32) -> Result<u32> {
        const OP: &str = "resize_cq";
        let mut ring = self.ring();
        let (mem, layout) = crate::pd::alloc_ring_in(
            self.0.pd.as_ref(),
            crate::pd::BufferKind::Cq,
            OP,
            cqe,
            CQE_BYTES,
        )?;
        let req = Request::ResizeCq(
            ResizeCq {
                response: 0,
                cq_handle: self.0.handle,
                cqe,
            },
            UroceResizeCq {
                ring: layout.desc(mem.addr()),
            },
        );
        let r: ResizeCqResp = match self.0.ctx.cmd(OP, &req, |mut r| Ok(take(&mut r))) {
            Ok(r) => r,
            Err(e) => {
                if e.kind() != ErrorKind::ControlPlane {
                    leak(&mem);
                }
                return Err(e);
            }
        };
        ring.consumer = Consumer::attach(mem.clone(), 0, layout).map_err(|e| Error::abi(OP, &e))?;
        ring.mem = mem;
        ring.layout = layout;
        let n = r.cqe.min(layout.slots());
        self.0.cqe.store(n, Ordering::Relaxed);
        Ok(n)
    }

    /// `ibv_destroy_cq`. `EBUSY` (and the CQ handed back) while QPs or other handles still
    /// use it; dropping the last handle destroys it too.
    pub fn destroy(self) -> core::result::Result<(), (Error, Cq)> {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => match inner.destroy() {
                Ok(()) => Ok(()),
                Err(e) => Err((e, Cq(Arc::new(inner)))),
            },
            Err(arc) => Err((
                Error::local(
                    "destroy_cq",
                    Errno::EBUSY,
                    "CQ still used by QPs or other handles",
                ),
                Cq(arc),
            )),
        }
    }
}

impl Cq {
    /// Drop every completion of QP `qpn` still in the ring, keeping the others in order —
    /// what mlx4/mlx5's providers do when a QP is moved to RESET (rdma-core
    /// `providers/mlx5/cq.c`, `__mlx5_cq_clean`), so a QP brought back from ERR does not
    /// hand its new work the flushes of its old. Entries the engine adds meanwhile are past
    /// the producer index read here and untouched; QP `qpn` in RESET adds none.
    pub(crate) fn clean(&self, qpn: u32) -> Result<()> {
        use zerocopy::FromBytes;
        const OP: &str = "modify_qp";
        let mut ring = self.ring();
        let c = &mut ring.consumer;
        let n = c.available().map_err(|e| Error::abi(OP, &e))?;
        let elem = c.layout().elem_size() as usize;
        let mut entry = vec![0u8; elem];
        // Walk from the newest entry back, moving each kept one `dropped` slots newer.
        let mut dropped = 0;
        for i in (0..n).rev() {
            c.read(i, 0, &mut entry).map_err(|e| Error::abi(OP, &e))?;
            let w = uverbs::Wc::read_from_prefix(&entry)
                .map_err(|_| Error::local(OP, Errno::EIO, "short CQE"))?
                .0;
            if w.qp_num == qpn {
                dropped += 1;
            } else if dropped > 0 {
                c.write(i + dropped, 0, &entry)
                    .map_err(|e| Error::abi(OP, &e))?;
            }
        }
        c.release(dropped).map_err(|e| Error::abi(OP, &e))
    }
}

/// Copy up to `max` CQEs out of the ring via `f(index, wc)` and free them.
fn ring_take(
    consumer: &mut Consumer,
    max: usize,
    mut f: impl FnMut(usize, &uverbs::Wc),
) -> Result<usize> {
    const OP: &str = "poll_cq";
    let want = u32::try_from(max).unwrap_or(u32::MAX);
    let mut avail = consumer.cached_available();
    if avail < want {
        avail = consumer.available().map_err(|e| Error::abi(OP, &e))?;
    }
    let n = avail.min(want);
    for i in 0..n {
        let w: uverbs::Wc = consumer.read_struct(i).map_err(|e| Error::abi(OP, &e))?;
        f(i as usize, &w);
    }
    consumer.release(n).map_err(|e| Error::abi(OP, &e))?;
    Ok(n as usize)
}

impl CqInner {
    fn destroy(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        let req = Request::DestroyCq(DestroyCq {
            response: 0,
            cq_handle: self.handle,
            reserved: 0,
        });
        self.ctx.cmd("destroy_cq", &req, |_| Ok(()))?;
        self.destroyed = true;
        if let Some(ch) = &self.channel {
            ch.cqs().remove(&self.user_handle);
        }
        Ok(())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.destroy().is_err() {
            // The engine may still produce into the ring: never free it.
            let ring = self.ring.get_mut().unwrap_or_else(|p| p.into_inner());
            leak(&ring.mem);
            if let Some(ch) = &self.channel {
                ch.cqs().remove(&self.user_handle);
            }
        }
    }
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq")
            .field("handle", &self.0.handle)
            .field("cqe", &self.cqe())
            .finish()
    }
}
