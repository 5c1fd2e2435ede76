//! Shared receive queues (`ibv_srq`): a receive ring several QPs take WQEs from.

use std::fmt;
use std::sync::{Arc, Mutex};

use abi::fastpath::{recv_wqe_size, RECV_WQE_HDR_BYTES};
use abi::ring::{Producer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::{
    CreateSrq, CreateSrqResp, CreateXsrq, DestroySrq, ModifySrq, PostResp, PostSrqRecv, QuerySrq,
    QuerySrqResp, Request, Sge, UroceCreateSrq, WrList, SRQT_XRC,
};
use abi::{Errno, SrqAttrMask};

use crate::context::{next_user_handle, take};
use crate::cq::leak;
use crate::error::{Error, ErrorKind, PostError, Result};
use crate::pd::alloc_ring_in;
use crate::pd::Pd;
use crate::wr::{bad_wr_result, encode_recv_cmd, stage_recvs, RecvWr};

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Outstanding receive WRs.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// Raise SRQ_LIMIT_REACHED when fewer WQEs than this remain (0: disarmed).
    pub srq_limit: u32,
}

/// A shared receive queue. Cheap to clone; QPs attached to it keep it alive.
#[derive(Clone)]
pub struct Srq(Arc<SrqInner>);

struct SrqInner {
    pd: Pd,
    handle: u32,
    srqn: u32,
    user_handle: u64,
    attr: SrqAttr,
    ring: Mutex<SrqRing>,
    /// An XRC SRQ's domain and completion CQ (kept alive with it).
    xrc: Option<(crate::Xrcd, crate::Cq)>,
    destroyed: bool,
}

struct SrqRing {
    prod: Producer,
    mem: Arc<SharedMem>,
    layout: RingLayout,
}

impl Pd {
    /// `ibv_create_srq` with `attr.max_wr` WQEs of `attr.max_sge` SGEs.
    pub fn create_srq(&self, attr: &SrqAttr) -> Result<Srq> {
        Srq::create(self, attr, None)
    }

    /// `ibv_create_srq_ex` with `IBV_SRQT_XRC`: an SRQ of XRC domain `xrcd` whose receive
    /// completions go to `cq`; XRC target QPs of the domain deliver into it, by its
    /// [`Srq::srq_num`].
    pub fn create_xrc_srq(
        &self,
        attr: &SrqAttr,
        xrcd: &crate::Xrcd,
        cq: &crate::Cq,
    ) -> Result<Srq> {
        Srq::create(self, attr, Some((xrcd.clone(), cq.clone())))
    }
}

impl Srq {
    fn create(pd: &Pd, attr: &SrqAttr, xrc: Option<(crate::Xrcd, crate::Cq)>) -> Result<Srq> {
        const OP: &str = "create_srq";
        if let Some((x, cq)) = &xrc {
            if !x.context().same(pd.context()) || !cq.context().same(pd.context()) {
                return Err(Error::local(
                    OP,
                    Errno::EINVAL,
                    "XRCD or CQ of another context",
                ));
            }
        }
        let elem = recv_wqe_size(attr.max_sge)
            .ok_or_else(|| Error::local(OP, Errno::EINVAL, "max_sge beyond the WQE layout"))?;
        let (mem, layout) =
            alloc_ring_in(Some(pd), crate::pd::BufferKind::Srq, OP, attr.max_wr, elem)?;
        let user_handle = next_user_handle();
        let drv = UroceCreateSrq {
            ring: layout.desc(mem.addr()),
        };
        let req = match &xrc {
            None => Request::CreateSrq(
                CreateSrq {
                    response: 0,
                    user_handle,
                    pd_handle: pd.handle(),
                    max_wr: attr.max_wr,
                    max_sge: attr.max_sge,
                    srq_limit: attr.srq_limit,
                },
                drv,
            ),
            Some((x, cq)) => Request::CreateXsrq(
                CreateXsrq {
                    response: 0,
                    user_handle,
                    srq_type: SRQT_XRC,
                    pd_handle: pd.handle(),
                    max_wr: attr.max_wr,
                    max_sge: attr.max_sge,
                    srq_limit: attr.srq_limit,
                    max_num_tags: 0,
                    xrcd_handle: x.handle(),
                    cq_handle: cq.handle(),
                },
                drv,
            ),
        };
        let r: CreateSrqResp = match pd.context().cmd(OP, &req, |mut r| Ok(take(&mut r))) {
            Ok(r) => r,
            Err(e) => {
                if e.kind() != ErrorKind::ControlPlane {
                    leak(&mem);
                }
                return Err(e);
            }
        };
        let room = ((layout.elem_size() as usize - RECV_WQE_HDR_BYTES) / Sge::SIZE) as u32;
        let granted = SrqAttr {
            max_wr: r.max_wr.min(layout.slots()),
            max_sge: r.max_sge.min(room),
            srq_limit: attr.srq_limit,
        };
        let prod = Producer::attach(mem.clone(), 0, layout).map_err(|e| Error::abi(OP, &e))?;
        Ok(Srq(Arc::new(SrqInner {
            pd: pd.clone(),
            handle: r.srq_handle,
            srqn: r.srqn,
            user_handle,
            attr: granted,
            ring: Mutex::new(SrqRing { prod, mem, layout }),
            xrc,
            destroyed: false,
        })))
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.0.pd
    }

    /// The control plane's handle.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The XRC domain of an XRC SRQ.
    pub fn xrcd(&self) -> Option<&crate::Xrcd> {
        self.0.xrc.as_ref().map(|(x, _)| x)
    }

    /// The SRQ number (`ibv_get_srq_num`: what an XRC sender names in its WRs).
    pub fn srq_num(&self) -> u32 {
        self.0.srqn
    }

    /// The `user_handle` async events carry for this SRQ.
    pub fn user_handle(&self) -> u64 {
        self.0.user_handle
    }

    /// The granted attributes.
    pub fn attr(&self) -> SrqAttr {
        self.0.attr
    }

    /// `ibv_post_srq_recv`: write receive WQEs into the SRQ ring. No system call.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let mut ring = self.0.ring.lock().unwrap_or_else(|p| p.into_inner());
        stage_recvs("post_srq_recv", &mut ring.prod, self.0.attr.max_sge, wrs)
    }

    /// Slow-path post_srq_recv: one POST_SRQ_RECV command.
    pub fn post_recv_cmd(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        const OP: &str = "post_srq_recv_cmd";
        let mut ring = self.0.ring.lock().unwrap_or_else(|p| p.into_inner());
        let (mut wr_bytes, mut sge_bytes) = (Vec::new(), Vec::new());
        encode_recv_cmd(OP, wrs, self.0.attr.max_sge, &mut wr_bytes, &mut sge_bytes)?;
        let req = Request::PostSrqRecv(
            PostSrqRecv {
                response: 0,
                srq_handle: self.0.handle,
                wr_count: wrs.len() as u32,
                sge_count: (sge_bytes.len() / Sge::SIZE) as u32,
                wqe_size: abi::uverbs::RecvWr::SIZE as u32,
            },
            WrList {
                wrs: &wr_bytes,
                sges: &sge_bytes,
                wqe_size: abi::uverbs::RecvWr::SIZE,
            },
        );
        let res = self
            .0
            .pd
            .context()
            .cmd(OP, &req, |mut r| Ok(take::<PostResp>(&mut r).bad_wr));
        let (mem, layout) = (ring.mem.clone(), ring.layout);
        if let Ok(p) = Producer::attach(mem, 0, layout) {
            ring.prod = p;
        }
        match res {
            Ok(bad) => bad_wr_result(OP, bad, wrs.len()),
            Err(error) => Err(PostError { index: 0, error }),
        }
    }

    /// `ibv_modify_srq` (uroce supports [`SrqAttrMask::LIMIT`]).
    pub fn modify(&self, attr: &SrqAttr, mask: SrqAttrMask) -> Result<()> {
        let req = Request::ModifySrq(ModifySrq {
            srq_handle: self.0.handle,
            attr_mask: mask.bits(),
            max_wr: attr.max_wr,
            srq_limit: attr.srq_limit,
        });
        self.0.pd.context().cmd("modify_srq", &req, |_| Ok(()))
    }

    /// `ibv_query_srq`.
    pub fn query(&self) -> Result<SrqAttr> {
        let req = Request::QuerySrq(QuerySrq {
            response: 0,
            srq_handle: self.0.handle,
            reserved: 0,
        });
        let r: QuerySrqResp = self
            .0
            .pd
            .context()
            .cmd("query_srq", &req, |mut r| Ok(take(&mut r)))?;
        Ok(SrqAttr {
            max_wr: r.max_wr,
            max_sge: r.max_sge,
            srq_limit: r.srq_limit,
        })
    }

    /// `ibv_destroy_srq`. `EBUSY` (SRQ handed back) while QPs or other handles use it.
    pub fn destroy(self) -> core::result::Result<(), (Error, Srq)> {
        match Arc::try_unwrap(self.0) {
            Ok(mut inner) => match inner.destroy() {
                Ok(()) => Ok(()),
                Err(e) => Err((e, Srq(Arc::new(inner)))),
            },
            Err(arc) => Err((
                Error::local(
                    "destroy_srq",
                    Errno::EBUSY,
                    "SRQ still used by QPs or other handles",
                ),
                Srq(arc),
            )),
        }
    }
}

impl SrqInner {
    fn destroy(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        let req = Request::DestroySrq(DestroySrq {
            response: 0,
            srq_handle: self.handle,
            reserved: 0,
        });
        self.pd.context().cmd("destroy_srq", &req, |_| Ok(()))?;
        self.destroyed = true;
        Ok(())
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if self.destroy().is_err() {
            leak(&self.ring.get_mut().unwrap_or_else(|p| p.into_inner()).mem);
        }
    }
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq")
            .field("srqn", &self.0.srqn)
            .field("attr", &self.0.attr)
            .finish()
    }
}
