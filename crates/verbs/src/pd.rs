//! Protection domains, memory regions and address handles (`ibv_pd`, `ibv_mr`, `ibv_ah`).
//!
//! # Memory regions and memory safety
//!
//! The engine reads and writes registered memory (it plays the NIC's DMA engine), checking
//! every access against the MR table: key, PD, bounds, access flags (docs/architecture.md §4). So a
//! work request can only touch memory that is registered, and the library's job is to keep
//! registered memory valid while it is registered:
//!
//! * [`MrBuf`] owns its memory (page-aligned, zeroed). It frees it only after DEREG_MR
//!   succeeded — the control plane's confirmation that the engine no longer accesses it.
//!   If deregistration fails the memory is leaked rather than freed. Ordinary code needs no
//!   `unsafe`.
//! * [`Pd::reg_mr_raw`] registers caller memory; the caller promises it stays valid.
//!
//! As with a hardware NIC's DMA, the engine writes into an MR whenever an operation that
//! targets it runs (a receive, an RDMA READ response, a remote WRITE): read the bytes after
//! the completion that reports the operation, and do not expect them to stay still while
//! a peer may write them.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use abi::uverbs::{
    AhAttr as AbiAhAttr, AllocMw, AllocMwResp, AllocPd, AllocPdResp, CreateAh, CreateAhResp,
    DeallocMw, DeallocPd, DeregMr, DestroyAh, RegMr, RegMrResp, Request, ReregMr, ReregMrResp, Sge,
};
use abi::{AccessFlags, AhAttr, Errno, Gid};

use crate::context::{next_user_handle, take, Context};
use crate::error::{Error, Result};
use crate::mem::PageBuf;

/// A protection domain (`ibv_pd`). Cheap to clone; MRs, QPs, SRQs and AHs keep it alive,
/// and it is deallocated when the last of them and of its handles is gone.
#[derive(Clone)]
pub struct Pd(pub(crate) Arc<PdInner>);

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    destroyed: bool,
    /// A parent domain's allocator for queue buffers.
    pub(crate) alloc: Option<Arc<dyn BufferAllocator>>,
    /// A parent domain: the PD it stands for (same handle; deallocating the parent domain
    /// leaves the PD alone).
    parent: Option<Pd>,
}

/// What a queue buffer is for, as a parent domain's allocator is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferKind {
    /// A QP's send or receive ring.
    Qp,
    /// An SRQ's ring.
    Srq,
    /// A CQ's ring.
    Cq,
}

/// What a parent domain's allocator answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffer {
    /// Use the library's own allocation (`IBV_ALLOCATOR_USE_DEFAULT`).
    Default,
    /// No memory: the create fails with ENOMEM.
    Failed,
    /// The buffer: at least the size asked, with the alignment asked, valid until `free`.
    At(*mut u8),
}

/// The allocator of a parent domain (`ibv_parent_domain_init_attr.alloc` / `free`): the
/// library asks it for the memory of every ring of a QP or SRQ made in the parent domain.
pub trait BufferAllocator: Send + Sync {
    /// `len` bytes aligned to `align`, for a `kind` ring.
    fn alloc(&self, len: usize, align: usize, kind: BufferKind) -> Buffer;
    /// Give back a buffer [`BufferAllocator::alloc`] returned, once the device no longer
    /// uses it.
    fn free(&self, ptr: *mut u8, kind: BufferKind);
}

impl Pd {
    pub(crate) fn alloc(ctx: &Context) -> Result<Pd> {
        let handle = ctx.cmd(
            "alloc_pd",
            &Request::AllocPd(AllocPd { response: 0 }),
            |mut r| Ok(take::<AllocPdResp>(&mut r).pd_handle),
        )?;
        Ok(Pd(Arc::new(PdInner {
            ctx: ctx.clone(),
            handle,
            destroyed: false,
            alloc: None,
            parent: None,
        })))
    }

    /// `ibv_alloc_parent_domain`: a PD that stands for this one (MRs, QPs, SRQs and AHs
    /// made in it are this PD's) and whose QP and SRQ rings come from `alloc`, when given
    /// (each call may still answer [`Buffer::Default`]). It keeps this PD alive; dropping
    /// it does not deallocate this PD.
    pub fn parent_domain(&self, alloc: Option<Arc<dyn BufferAllocator>>) -> Pd {
        Pd(Arc::new(PdInner {
            ctx: self.0.ctx.clone(),
            handle: self.0.handle,
            destroyed: false,
            alloc,
            parent: Some(self.clone()),
        }))
    }

    /// Whether this is a parent domain ([`Pd::parent_domain`]).
    pub fn is_parent_domain(&self) -> bool {
        self.0.parent.is_some()
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// The control plane's handle (for tracing).
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// `ibv_reg_mr` over caller memory: register `len` bytes at `ptr` with `access`
    /// (I/O virtual address = `ptr`).
    ///
    /// # Safety
    ///
    /// `ptr..ptr+len` must be memory of this process that stays allocated and is not
    /// otherwise freed or unmapped until the returned [`Mr`] is deregistered or dropped.
    /// While the MR is registered, the engine may read it (sends, remote READs) and write
    /// it (receives, READ responses, remote WRITEs and atomics) at any time an operation
    /// targeting it runs, concurrently with the caller — exactly as a NIC's DMA would. The
    /// caller must not hold Rust references to bytes the engine may write while it does.
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_raw(&self, ptr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr> {
        // SAFETY: forwarded contract.
        unsafe { self.reg_mr_iova(ptr, len, ptr as usize as u64, access) }
    }

    /// `ibv_reg_mr_iova2`: as [`Pd::reg_mr_raw`], with the address peers use for this
    /// region (`iova`) chosen by the caller.
    ///
    /// # Safety
    ///
    /// As for [`Pd::reg_mr_raw`].
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_iova(
        &self,
        ptr: *mut u8,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<Mr> {
        self.register(ptr as usize as u64, len, iova, access)
    }

    fn register(&self, start: u64, len: usize, iova: u64, access: AccessFlags) -> Result<Mr> {
        // rdma-core masks off the optional access bits a device does not report
        // supporting (docs/compat.md §9); perftest always sets RELAXED_ORDERING.
        let access = access & !AccessFlags::OPTIONAL_RANGE;
        let req = Request::RegMr(RegMr {
            response: 0,
            start,
            length: len as u64,
            hca_va: iova,
            pd_handle: self.0.handle,
            access_flags: access.bits(),
        });
        let r: RegMrResp = self.0.ctx.cmd("reg_mr", &req, |mut r| Ok(take(&mut r)))?;
        Ok(Mr {
            pd: self.clone(),
            handle: r.mr_handle,
            lkey: r.lkey,
            rkey: r.rkey,
            iova,
            start,
            len,
            access,
            registered: true,
        })
    }

    /// Allocate `len` zeroed, page-aligned bytes and register them with `access` — the
    /// safe way to get a memory region.
    pub fn alloc_mr(&self, len: usize, access: AccessFlags) -> Result<MrBuf> {
        let buf = PageBuf::new_zeroed(len)
            .ok_or_else(|| Error::local("reg_mr", Errno::ENOMEM, "allocation size overflow"))?;
        let mr = self.register(
            buf.as_ptr() as usize as u64,
            len,
            buf.as_ptr() as usize as u64,
            access,
        )?;
        Ok(MrBuf { mr, buf: Some(buf) })
    }

    /// `ibv_alloc_mw`: an unbound memory window of `ty` in this PD.
    pub fn alloc_mw(&self, ty: MwType) -> Result<Mw> {
        let req = Request::AllocMw(AllocMw {
            response: 0,
            pd_handle: self.0.handle,
            mw_type: ty as u8,
            reserved: [0; 3],
        });
        let r: AllocMwResp = self.0.ctx.cmd("alloc_mw", &req, |mut r| Ok(take(&mut r)))?;
        Ok(Mw {
            pd: self.clone(),
            handle: r.mw_handle,
            rkey: std::sync::atomic::AtomicU32::new(r.rkey),
            ty,
            allocated: true,
        })
    }

    /// `ibv_create_ah`.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let user_handle = next_user_handle();
        let req = Request::CreateAh(CreateAh {
            response: 0,
            user_handle,
            pd_handle: self.0.handle,
            reserved: 0,
            attr: AbiAhAttr::from(attr),
        });
        let r: CreateAhResp = self
            .0
            .ctx
            .cmd("create_ah", &req, |mut r| Ok(take(&mut r)))?;
        Ok(Ah(Arc::new(AhInner {
            pd: self.clone(),
            handle: r.ah_handle,
            attr: *attr,
            destroyed: false,
        })))
    }
}

impl Pd {
    /// Whether MRs, QPs, SRQs, AHs or other handles still use this PD ([`Pd::dealloc`]
    /// would fail with `EBUSY`).
    pub fn in_use(&self) -> bool {
        Arc::strong_count(&self.0) > 1
    }

    /// `ibv_dealloc_pd`. `EBUSY` (PD handed back) while MRs, QPs, SRQs, AHs or other
    /// handles use it; dropping the last handle deallocates it too.
    pub fn dealloc(self) -> core::result::Result<(), (Error, Pd)> {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => match inner.dealloc() {
                Ok(()) => Ok(()),
                Err(e) => Err((e, Pd(Arc::new(inner)))),
            },
            Err(arc) => Err((
                Error::local(
                    "dealloc_pd",
                    Errno::EBUSY,
                    "PD still used by objects or handles",
                ),
                Pd(arc),
            )),
        }
    }
}

impl PdInner {
    fn dealloc(&mut self) -> Result<()> {
        if self.destroyed || self.parent.is_some() {
            self.destroyed = true;
            return Ok(());
        }
        let req = Request::DeallocPd(DeallocPd {
            pd_handle: self.handle,
        });
        self.ctx.cmd("dealloc_pd", &req, |_| Ok(()))?;
        self.destroyed = true;
        Ok(())
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // Nothing refers to the PD any more (every child holds a clone), so a failure here
        // can only be a dead channel; the control plane then reclaims it with the context.
        let _ = self.dealloc();
    }
}

/// [`crate::cq::alloc_ring`], from `pd`'s parent-domain allocator when it has one (docs/compat.md
/// §11.6): the buffer is zeroed, laid out, and handed back to the allocator's `free` when
/// the ring's memory is dropped.
pub(crate) fn alloc_ring_in(
    pd: Option<&Pd>,
    kind: BufferKind,
    op: &'static str,
    depth: u32,
    elem: u32,
) -> Result<(Arc<abi::shm::SharedMem>, abi::ring::RingLayout)> {
    let Some(a) = pd.and_then(|p| p.0.alloc.clone()) else {
        return crate::cq::alloc_ring(op, depth, elem);
    };
    let layout = abi::ring::RingLayout::for_depth(depth, elem).map_err(|e| Error::abi(op, &e))?;
    let len = layout.bytes().next_multiple_of(abi::shm::MIN_ALIGN);
    let ptr = match a.alloc(len, abi::shm::REGION_ALIGN, kind) {
        Buffer::Default => return crate::cq::alloc_ring(op, depth, elem),
        Buffer::Failed => {
            return Err(Error::local(
                op,
                Errno::ENOMEM,
                "the parent domain's allocator failed",
            ))
        }
        Buffer::At(p) => p,
    };
    if (ptr as usize) % abi::shm::REGION_ALIGN != 0 {
        a.free(ptr, kind);
        return Err(Error::local(
            op,
            Errno::EINVAL,
            "the parent domain's allocator misaligned a buffer",
        ));
    }
    let addr = ptr as usize;
    let back = a.clone();
    // SAFETY: the allocator gave `len` bytes at `ptr`, ours until its `free`, which runs
    // only when the SharedMem (the one user of the region) is dropped.
    #[allow(unsafe_code)]
    let mem = unsafe {
        abi::shm::SharedMem::from_raw_parts_released(
            ptr,
            len,
            Box::new(move || back.free(addr as *mut u8, kind)),
        )
    }
    .map_err(|e| Error::abi(op, &e))?;
    mem.zero(0, len).map_err(|e| Error::abi(op, &e))?;
    layout.init(&mem, 0).map_err(|e| Error::abi(op, &e))?;
    Ok((Arc::new(mem), layout))
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("handle", &self.0.handle)
            .finish()
    }
}

/// Where a peer may access a region: what applications exchange out of band.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RemoteMr {
    /// I/O virtual address of the first byte.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u64,
}

impl RemoteMr {
    /// The address `offset` bytes in.
    pub fn at(&self, offset: u64) -> u64 {
        self.addr.wrapping_add(offset)
    }
}

/// A registered memory region over caller memory (`ibv_mr`). Deregistered on drop.
pub struct Mr {
    pd: Pd,
    handle: u32,
    lkey: u32,
    rkey: u32,
    iova: u64,
    start: u64,
    len: usize,
    access: AccessFlags,
    registered: bool,
}

impl Mr {
    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key, for peers.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// I/O virtual address of the first byte (what SGEs and peers use).
    pub fn addr(&self) -> u64 {
        self.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The control plane's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Start address in this process (differs from [`Mr::addr`] only with a custom iova).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// An SGE for `len` bytes at `offset`.
    ///
    /// # Panics
    ///
    /// If the range is not inside the region (a programming error, like slice indexing).
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        let end = offset.checked_add(len as usize);
        assert!(
            end.is_some_and(|e| e <= self.len),
            "sge {offset}+{len} outside a {}-byte MR",
            self.len
        );
        Sge {
            addr: self.iova.wrapping_add(offset as u64),
            length: len,
            lkey: self.lkey,
        }
    }

    /// What a peer needs to access the whole region.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.iova,
            rkey: self.rkey,
            len: self.len as u64,
        }
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_ACCESS`: the same memory, PD and keys,
    /// new access rights (peers' operations are checked against them from now on).
    pub fn rereg_access(&mut self, access: AccessFlags) -> Result<()> {
        self.rereg(&Rereg {
            access: Some(access),
            ..Rereg::default()
        })
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_PD`: the region moves to `pd` (QPs of the
    /// old PD can no longer use it; the old PD is released by this MR).
    pub fn rereg_pd(&mut self, pd: &Pd) -> Result<()> {
        self.rereg(&Rereg {
            pd: Some(pd),
            ..Rereg::default()
        })
    }

    /// `ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION`: the handle and keys now
    /// name `len` bytes at `ptr`, at I/O virtual address `iova`.
    ///
    /// # Safety
    ///
    /// As for [`Pd::reg_mr_raw`], for the new memory; the old memory is no longer accessed
    /// once this returns `Ok`.
    #[allow(unsafe_code)]
    pub unsafe fn rereg_translation(&mut self, ptr: *mut u8, len: usize, iova: u64) -> Result<()> {
        self.rereg(&Rereg {
            translation: Some((ptr as usize as u64, len, iova)),
            ..Rereg::default()
        })
    }

    /// Any combination of the three changes at once, in one command; on failure nothing
    /// changed. Private: a translation change needs the caller's promise
    /// ([`Mr::rereg_translation`]); [`Mr::rereg_raw`] is its `unsafe` door.
    fn rereg(&mut self, r: &Rereg<'_>) -> Result<()> {
        let mut flags = 0;
        let mut req = ReregMr {
            response: 0,
            mr_handle: self.handle,
            flags: 0,
            start: 0,
            length: 0,
            hca_va: 0,
            pd_handle: 0,
            access_flags: 0,
        };
        if let Some((start, len, iova)) = r.translation {
            flags |= ReregMr::CHANGE_TRANSLATION;
            (req.start, req.length, req.hca_va) = (start, len as u64, iova);
        }
        if let Some(pd) = r.pd {
            flags |= ReregMr::CHANGE_PD;
            if !Arc::ptr_eq(&pd.0.ctx.0, &self.pd.0.ctx.0) {
                return Err(Error::local(
                    "rereg_mr",
                    Errno::EINVAL,
                    "PD of another context",
                ));
            }
            req.pd_handle = pd.0.handle;
        }
        let access = r.access.map(|a| a & !AccessFlags::OPTIONAL_RANGE);
        if let Some(a) = access {
            flags |= ReregMr::CHANGE_ACCESS;
            req.access_flags = a.bits();
        }
        req.flags = flags;
        let resp: ReregMrResp =
            self.pd
                .0
                .ctx
                .cmd("rereg_mr", &Request::ReregMr(req), |mut r| Ok(take(&mut r)))?;
        (self.lkey, self.rkey) = (resp.lkey, resp.rkey);
        if let Some((start, len, iova)) = r.translation {
            (self.start, self.len, self.iova) = (start, len, iova);
        }
        if let Some(pd) = r.pd {
            self.pd = pd.clone();
        }
        if let Some(a) = access {
            self.access = a;
        }
        Ok(())
    }

    /// [`Mr::rereg`] for callers that build the change themselves (the C ABI's
    /// `ibv_rereg_mr`).
    ///
    /// # Safety
    ///
    /// With a translation, as for [`Mr::rereg_translation`].
    #[allow(unsafe_code)]
    pub unsafe fn rereg_raw(&mut self, r: &Rereg<'_>) -> Result<()> {
        self.rereg(r)
    }

    fn do_dereg(&mut self) -> Result<()> {
        if !self.registered {
            return Ok(());
        }
        let req = Request::DeregMr(DeregMr {
            mr_handle: self.handle,
        });
        self.pd.0.ctx.cmd("dereg_mr", &req, |_| Ok(()))?;
        self.registered = false;
        Ok(())
    }

    /// `ibv_dereg_mr`. On failure (e.g. `EBUSY` while the device still uses it) the MR is
    /// handed back, still registered.
    pub fn dereg(mut self) -> core::result::Result<(), (Error, Mr)> {
        match self.do_dereg() {
            Ok(()) => Ok(()),
            Err(e) => Err((e, self)),
        }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        let _ = self.do_dereg();
        // Whatever happened, never try again.
        self.registered = false;
    }
}

impl fmt::Debug for Mr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("handle", &self.handle)
            .field("addr", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey))
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .field("access", &self.access)
            .finish()
    }
}

/// `enum ibv_mw_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MwType {
    /// Bound with [`crate::Qp::bind_mw`] (`ibv_bind_mw`); usable by any QP of its PD.
    Type1 = 1,
    /// Bound with a BIND_MW work request ([`crate::SendWr::bind_mw`]) to the posting QP,
    /// which alone may use it; invalidated by LOCAL_INV or a peer's SEND_WITH_INV.
    Type2 = 2,
}

/// A memory window (`ibv_mw`): remote access to part of an MR under its own R_Key, which
/// changes at every bind (IBTA Vol 1 §10.6.7). Deallocated on drop.
pub struct Mw {
    pd: Pd,
    handle: u32,
    rkey: std::sync::atomic::AtomicU32,
    ty: MwType,
    allocated: bool,
}

impl Mw {
    /// The current R_Key (type 1: as the last [`crate::Qp::bind_mw`] set it; type 2: as
    /// allocated, or as [`Mw::set_rkey`] recorded after a bind WR).
    pub fn rkey(&self) -> u32 {
        self.rkey.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Record the R_Key a type 2 bind WR gave the window (`mw->rkey` is the application's
    /// to keep up to date for WR binds, as in rdma-core).
    pub fn set_rkey(&self, rkey: u32) {
        self.rkey.store(rkey, std::sync::atomic::Ordering::Release);
    }

    /// Its type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// The control plane's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    fn do_dealloc(&mut self) -> Result<()> {
        if !self.allocated {
            return Ok(());
        }
        let req = Request::DeallocMw(DeallocMw {
            mw_handle: self.handle,
            reserved: 0,
        });
        self.pd.0.ctx.cmd("dealloc_mw", &req, |_| Ok(()))?;
        self.allocated = false;
        Ok(())
    }

    /// `ibv_dealloc_mw` (a bound window is unbound first).
    pub fn dealloc(mut self) -> Result<()> {
        self.do_dealloc()
    }
}

impl Drop for Mw {
    fn drop(&mut self) {
        let _ = self.do_dealloc();
        self.allocated = false;
    }
}

impl fmt::Debug for Mw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mw")
            .field("handle", &self.handle)
            .field("type", &self.ty)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// What [`Mr::rereg_raw`] changes: each `Some` is one `IBV_REREG_MR_CHANGE_*` flag.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rereg<'a> {
    /// New memory: start address in this process, length, I/O virtual address.
    pub translation: Option<(u64, usize, u64)>,
    /// New PD (of the same context).
    pub pd: Option<&'a Pd>,
    /// New access flags.
    pub access: Option<AccessFlags>,
}

/// A memory region that owns its memory: page-aligned, zeroed, freed only after the
/// device let go of it (module docs). Dereferences to `[u8]`.
pub struct MrBuf {
    mr: Mr,
    /// `None` only after `dereg` moved it out.
    buf: Option<PageBuf>,
}

impl MrBuf {
    /// The registration (keys, address, SGE helpers).
    pub fn mr(&self) -> &Mr {
        &self.mr
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.mr.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }

    /// I/O virtual address of the first byte.
    pub fn addr(&self) -> u64 {
        self.mr.iova
    }

    /// An SGE for `len` bytes at `offset` (panics outside the region; see [`Mr::sge`]).
    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        self.mr.sge(offset, len)
    }

    /// What a peer needs to access the whole region.
    pub fn remote(&self) -> RemoteMr {
        self.mr.remote()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], |b| b.as_slice())
    }

    /// The bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut().map_or(&mut [], |b| b.as_mut_slice())
    }

    /// `ibv_rereg_mr` changing the access rights ([`Mr::rereg_access`]).
    pub fn rereg_access(&mut self, access: AccessFlags) -> Result<()> {
        self.mr.rereg_access(access)
    }

    /// `ibv_rereg_mr` moving the region to another PD ([`Mr::rereg_pd`]).
    pub fn rereg_pd(&mut self, pd: &Pd) -> Result<()> {
        self.mr.rereg_pd(pd)
    }

    /// `ibv_dereg_mr`, then free the memory. On failure the region is handed back, still
    /// registered and still owning its memory.
    #[allow(clippy::result_large_err)] // a rare slow-path call; handing the region back matters more
    pub fn dereg(mut self) -> core::result::Result<(), (Error, MrBuf)> {
        match self.mr.do_dereg() {
            Ok(()) => Ok(()),
            Err(e) => Err((e, self)),
        }
    }
}

impl Drop for MrBuf {
    fn drop(&mut self) {
        if self.mr.do_dereg().is_err() {
            // The device did not confirm it stopped using the memory: never free it.
            self.mr.registered = false;
            if let Some(b) = self.buf.take() {
                b.leak();
            }
        }
    }
}

impl Deref for MrBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl DerefMut for MrBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for MrBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("MrBuf").field(&self.mr).finish()
    }
}

/// `ibv_init_ah_from_wc`: the address vector that answers a UD receive, from the 40-byte
/// GRH area at the start of its buffer (`grh`) — the sender's address becomes the
/// destination. `None` if the completion has no GRH or the area holds neither an IPv4
/// header (RoCEv2 over IPv4: bytes 20..40, IBA's "reserved + IPv4 header" layout) nor an
/// IPv6 header.
pub fn init_ah_from_wc(wc: &crate::Wc, grh: &[u8], sgid_index: u8, port: u8) -> Option<AhAttr> {
    if !wc.has_grh() {
        return None;
    }
    let (src, _dst) = grh_addresses(grh)?;
    Some(AhAttr::roce(Gid::from(src), sgid_index, port))
}

/// An address handle (`ibv_ah`), named by UD send WRs. Cheap to clone.
#[derive(Clone)]
pub struct Ah(pub(crate) Arc<AhInner>);

pub(crate) struct AhInner {
    pub(crate) pd: Pd,
    pub(crate) handle: u32,
    attr: AhAttr,
    destroyed: bool,
}

impl Ah {
    /// The attributes it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.0.attr
    }

    /// The control plane's handle (what UD WQEs carry).
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.0.pd
    }
}

impl Ah {
    /// `ibv_destroy_ah`. `EBUSY` (AH handed back) while other handles exist. A UD WR
    /// already posted with it and not yet sent then fails with an error completion.
    pub fn destroy(self) -> core::result::Result<(), (Error, Ah)> {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => match inner.destroy() {
                Ok(()) => Ok(()),
                Err(e) => Err((e, Ah(Arc::new(inner)))),
            },
            Err(arc) => Err((
                Error::local("destroy_ah", Errno::EBUSY, "other handles to this AH exist"),
                Ah(arc),
            )),
        }
    }
}

impl AhInner {
    fn destroy(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        let req = Request::DestroyAh(DestroyAh {
            ah_handle: self.handle,
        });
        self.pd.0.ctx.cmd("destroy_ah", &req, |_| Ok(()))?;
        self.destroyed = true;
        Ok(())
    }
}

impl Drop for AhInner {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah")
            .field("handle", &self.0.handle)
            .field("dgid", &self.0.attr.grh.dgid)
            .finish()
    }
}

/// The (source, destination) addresses in a UD receive's 40-byte GRH area: an IPv6 header
/// (version 6 in the first nibble) or, for RoCEv2 over IPv4, an IPv4 header in bytes 20..40
/// (version 4, IHL 5), as rdma-core's `get_grh_header_version` tells them apart.
pub fn grh_addresses(grh: &[u8]) -> Option<(std::net::IpAddr, std::net::IpAddr)> {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let grh = grh.get(..crate::GRH_BYTES)?;
    let v4 = grh.get(20..40)?;
    if v4.first() == Some(&0x45) {
        let src: [u8; 4] = v4.get(12..16)?.try_into().ok()?;
        let dst: [u8; 4] = v4.get(16..20)?.try_into().ok()?;
        return Some((
            IpAddr::V4(Ipv4Addr::from(src)),
            IpAddr::V4(Ipv4Addr::from(dst)),
        ));
    }
    if grh.first().map(|b| b >> 4) == Some(6) {
        let src: [u8; 16] = grh.get(8..24)?.try_into().ok()?;
        let dst: [u8; 16] = grh.get(24..40)?.try_into().ok()?;
        return Some((
            IpAddr::V6(Ipv6Addr::from(src)),
            IpAddr::V6(Ipv6Addr::from(dst)),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_addresses_for_ipv4_and_ipv6() {
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[127, 0, 0, 2]);
        g[36..40].copy_from_slice(&[127, 0, 0, 1]);
        let (s, d) = grh_addresses(&g).unwrap();
        assert_eq!(s, "127.0.0.2".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(d, "127.0.0.1".parse::<std::net::IpAddr>().unwrap());
        let mut g6 = [0u8; 40];
        g6[0] = 0x60;
        g6[23] = 1;
        g6[39] = 2;
        let (s, d) = grh_addresses(&g6).unwrap();
        assert_eq!(s, "::1".parse::<std::net::IpAddr>().unwrap());
        assert_eq!(d, "::2".parse::<std::net::IpAddr>().unwrap());
        assert!(grh_addresses(&[0u8; 40]).is_none());
        assert!(grh_addresses(&[0x45u8; 10]).is_none());
        let wc = crate::Wc {
            wc_flags: abi::WcFlags::GRH,
            ..Default::default()
        };
        let ah = init_ah_from_wc(&wc, &g, 0, 1).unwrap();
        assert_eq!(
            ah.grh.dgid.to_ip(),
            "127.0.0.2".parse::<std::net::IpAddr>().unwrap()
        );
        assert!(init_ah_from_wc(&crate::Wc::default(), &g, 0, 1).is_none());
    }
}
