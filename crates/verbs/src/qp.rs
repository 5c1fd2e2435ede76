//! Queue pairs (`ibv_qp`): create/modify/query/destroy through commands, and posting
//! through the rings.
//!
//! # Posting (fast path)
//!
//! [`Qp::post_send`] writes one send WQE per WR into the SQ ring (abi
//! [`abi::fastpath::SendWqe`]), publishes the whole post list with one Release store of the
//! producer index, then rings the QP's doorbell once: a bit in the context's doorbell page,
//! plus a wake-up system call only if the engine announced it is parked (abi
//! [`abi::doorbell`]). [`Qp::post_recv`] writes receive WQEs into the RQ ring (no doorbell:
//! the engine looks at the RQ when a request arrives). The SQ and the RQ each have their own
//! lock — a QP's queues are single-producer rings — so no lock is shared between QPs.
//!
//! Like rxe (docs/wire.md §6.2 "Post rules"), posting sends needs RTS or a later state (SQD,
//! SQE, ERR — in ERR the engine flushes them) and posting receives needs INIT or later;
//! otherwise `EINVAL`. The library knows the state it last set or queried; the engine may
//! have moved the QP to ERR since, which only makes further WRs flush.
//!
//! # Slow path
//!
//! [`Qp::post_send_cmd`] / [`Qp::post_recv_cmd`] send the same WRs as POST_SEND /
//! POST_RECV commands (rxe's doorbell is a `write()`): one system-call round trip per post
//! list, for comparison with the fast path.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use abi::fastpath::{recv_wqe_size, send_caps_for_elem, send_wqe_size, RECV_WQE_HDR_BYTES};
use abi::ring::{Producer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::{
    CreateQp, CreateQpResp, DestroyQp, ModifyQp, PostRecv, PostResp, PostSend, QueryQp,
    QueryQpResp, Request, RingDesc, Sge, UroceCreateQp, UroceCreateQpResp, WrList,
};
use abi::{AccessFlags, AhAttr, Errno, Gid, Mtu, QpAttr, QpAttrMask, QpCap, QpState, QpType};

use crate::context::{next_user_handle, take, Context};
use crate::cq::{leak, Cq};
use crate::error::{Error, ErrorKind, PostError, Result};
use crate::pd::alloc_ring_in;
use crate::pd::Pd;
use crate::srq::Srq;
use crate::wr::{
    bad_wr_result, encode_recv_cmd, encode_send_cmd, stage_recvs, stage_sends, RecvWr, SendLimits,
    SendWr,
};
use wire::cm::{Ece, ECE_SELECTIVE_REPEAT, UROCE_ECE_OPTIONS, UROCE_ECE_VENDOR_ID};

/// What to create (`struct ibv_qp_init_attr`).
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr<'a> {
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: &'a Cq,
    /// CQ for receive completions.
    pub recv_cq: &'a Cq,
    /// Take receive WQEs from this SRQ instead of an RQ.
    pub srq: Option<&'a Srq>,
    /// Requested capacities.
    pub cap: QpCap,
    /// Signal every send WR (otherwise only those with `SIGNALED`).
    pub sq_sig_all: bool,
    /// Selective repeat (docs/wire.md §5.6; RC only, not XRC) from the start. Set it only
    /// when the peer agreed to it (as `uroce bench --selective-repeat` negotiates); off by
    /// default. A QP connected through the CM negotiates it instead ([`Qp::set_ece`]).
    pub selective_repeat: bool,
}

impl<'a> QpInitAttr<'a> {
    /// A QP of `qp_type` with one CQ for both directions and `cap`.
    pub fn new(qp_type: QpType, cq: &'a Cq, cap: QpCap) -> QpInitAttr<'a> {
        QpInitAttr {
            qp_type,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
            selective_repeat: false,
        }
    }
}

/// The far end of a connection: what ibv_rc_pingpong exchanges out of band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// Remote QP number.
    pub qpn: u32,
    /// The PSN the remote QP starts sending with (our `rq_psn`).
    pub psn: u32,
    /// The remote device's GID.
    pub gid: Gid,
}

/// Options for [`Qp::connect`], with ibv_rc_pingpong-like defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOpts {
    /// Port (1).
    pub port: u8,
    /// Source GID index (0: the device's address).
    pub sgid_index: u8,
    /// Remote access granted to the peer.
    pub access: AccessFlags,
    /// Path MTU (1024).
    pub path_mtu: Mtu,
    /// Our first send PSN.
    pub sq_psn: u32,
    /// Local ACK timeout code (14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries (7).
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code we advertise (12 ≈ 0.64 ms).
    pub min_rnr_timer: u8,
    /// Outstanding READs/atomics we issue.
    pub max_rd_atomic: u8,
    /// Outstanding READs/atomics we serve.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectOpts {
    fn default() -> ConnectOpts {
        ConnectOpts {
            port: 1,
            sgid_index: 0,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            path_mtu: Mtu::Mtu1024,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
        }
    }
}

/// A queue pair. Cheap to clone (handles share one QP); destroyed when the last handle is
/// dropped, or explicitly with [`Qp::destroy`].
#[derive(Clone)]
pub struct Qp(Arc<QpInner>);

/// A handle that does not keep its QP alive ([`Qp::downgrade`]): for holders that only act
/// on a QP while its owner still has it (an rdma_cm ID's `id->qp`).
#[derive(Clone, Debug)]
pub struct WeakQp(std::sync::Weak<QpInner>, Arc<AtomicU32>);

impl WeakQp {
    /// The QP, if some [`Qp`] handle still keeps it.
    pub fn upgrade(&self) -> Option<Qp> {
        self.0.upgrade().map(Qp)
    }

    /// The QP for one short step of a background thread (the rdma_cm event thread moving it
    /// to ERR or RTS): [`Qp::destroy`] waits for such a handle to go instead of failing
    /// with EBUSY, so a program's `ibv_destroy_qp` does not fail because a DREQ or REJ
    /// arrived at the same moment.
    pub fn upgrade_transient(&self) -> Option<TransientQp> {
        // Counted before the upgrade: destroy never sees an uncounted transient handle.
        self.1.fetch_add(1, Ordering::SeqCst);
        match self.0.upgrade() {
            Some(inner) => Some(TransientQp(Some(Qp(inner)), self.1.clone())),
            None => {
                self.1.fetch_sub(1, Ordering::SeqCst);
                None
            }
        }
    }
}

/// A [`Qp`] handle a background thread holds for a moment ([`WeakQp::upgrade_transient`]).
#[derive(Debug)]
pub struct TransientQp(Option<Qp>, Arc<AtomicU32>);

impl std::ops::Deref for TransientQp {
    type Target = Qp;
    fn deref(&self) -> &Qp {
        // Some until drop.
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("TransientQp used after drop"))
    }
}

impl Drop for TransientQp {
    fn drop(&mut self) {
        // The handle goes first, then the count: destroy waits while the count covers it.
        drop(self.0.take());
        self.1.fetch_sub(1, Ordering::SeqCst);
    }
}

struct QpInner {
    ctx: Context,
    /// `None` for an XRC target (`IBV_QPT_XRC_RECV`): its PD and CQs are its SRQs'.
    pd: Option<Pd>,
    send_cq: Option<Cq>,
    recv_cq: Option<Cq>,
    srq: Option<Srq>,
    /// An XRC target's domain.
    xrcd: Option<crate::Xrcd>,
    handle: u32,
    qpn: u32,
    user_handle: u64,
    qp_type: QpType,
    sq_sig_all: bool,
    cap: QpCap,
    state: AtomicU32,
    sq: Mutex<SendQueue>,
    rq: Option<Mutex<RecvQueue>>,
    sq_doorbell: u32,
    destroyed: bool,
    /// Handles held for a moment by background threads ([`WeakQp::upgrade_transient`]).
    transient: Arc<AtomicU32>,
    /// Enhanced Connection Establishment options (docs/wire.md §5.6).
    ece: Mutex<EceState>,
}

/// A QP's uroce ECE options: those it offers ([`Qp::query_ece`]) and those the next move
/// from INIT to RTR applies.
#[derive(Clone, Copy, Debug, Default)]
struct EceState {
    offer: u32,
    apply: u32,
}

/// The environment variable that makes every new RC QP of the process offer selective repeat
/// in the CM's ECE exchange (docs/wire.md §5.6): `1`.
pub const SELECTIVE_REPEAT_ENV: &str = "UROCE_SELECTIVE_REPEAT";

/// Whether [`SELECTIVE_REPEAT_ENV`] asks for selective repeat.
fn sr_env() -> bool {
    std::env::var_os(SELECTIVE_REPEAT_ENV).is_some_and(|v| v == "1")
}

struct SendQueue {
    prod: Producer,
    mem: Arc<SharedMem>,
    layout: RingLayout,
    limits: SendLimits,
}

struct RecvQueue {
    prod: Producer,
    mem: Arc<SharedMem>,
    layout: RingLayout,
    max_sge: u32,
}

impl Pd {
    /// `ibv_create_qp`. The granted capacities are in [`Qp::cap`]. An XRC initiator
    /// (`QpType::XrcSend`) has a send queue only: `recv_cq` and `srq` are ignored, and each
    /// send WR names the responder's XRC SRQ ([`SendWr::xrc_remote_srqn`]).
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<Qp> {
        Qp::create(&Spec {
            ctx: self.context(),
            pd: Some(self),
            xrcd: None,
            send_cq: Some(attr.send_cq),
            recv_cq: Some(attr.recv_cq),
            srq: attr.srq,
            qp_type: attr.qp_type,
            cap: attr.cap,
            sq_sig_all: attr.sq_sig_all,
            selective_repeat: attr.selective_repeat,
        })
    }
}

impl crate::Xrcd {
    /// `ibv_create_qp_ex` with `IBV_QPT_XRC_RECV`: an XRC target QP of this domain. It has
    /// no queues: a request's XRCETH names the XRC SRQ of the domain that receives it (and
    /// whose CQ gets the completion).
    pub fn create_recv_qp(&self) -> Result<Qp> {
        Qp::create(&Spec {
            ctx: self.context(),
            pd: None,
            xrcd: Some(self),
            send_cq: None,
            recv_cq: None,
            srq: None,
            qp_type: QpType::XrcRecv,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            sq_sig_all: false,
            selective_repeat: false,
        })
    }
}

/// What [`Qp::create`] makes: a QP of a PD, or an XRC target of a domain.
struct Spec<'a> {
    ctx: &'a Context,
    pd: Option<&'a Pd>,
    xrcd: Option<&'a crate::Xrcd>,
    send_cq: Option<&'a Cq>,
    recv_cq: Option<&'a Cq>,
    srq: Option<&'a Srq>,
    qp_type: QpType,
    cap: QpCap,
    sq_sig_all: bool,
    selective_repeat: bool,
}

impl Qp {
    /// A handle that does not keep the QP alive.
    pub fn downgrade(&self) -> WeakQp {
        WeakQp(Arc::downgrade(&self.0), self.0.transient.clone())
    }

    fn create(spec: &Spec<'_>) -> Result<Qp> {
        const OP: &str = "create_qp";
        let ctx = spec.ctx;
        let xrc_send = spec.qp_type == QpType::XrcSend;
        let xrc_recv = spec.qp_type == QpType::XrcRecv;
        // An XRC initiator has no receive side (the kernel ignores what is given for it).
        let (recv_cq, srq) = if xrc_send {
            (spec.send_cq, None)
        } else {
            (spec.recv_cq, spec.srq)
        };
        let attr = Spec {
            ctx,
            recv_cq,
            srq,
            ..*spec
        };
        let inval = |d: &str| Error::local(OP, Errno::EINVAL, d);
        if attr.send_cq.is_some_and(|c| !c.context().same(ctx))
            || attr.recv_cq.is_some_and(|c| !c.context().same(ctx))
        {
            return Err(inval("CQ of another context"));
        }
        if let Some(srq) = attr.srq {
            if !srq.pd().context().same(ctx) {
                return Err(inval("SRQ of another context"));
            }
        }
        let pd_handle = match (attr.pd, attr.xrcd) {
            (Some(pd), None) if !xrc_recv => pd.handle(),
            (None, Some(x)) if xrc_recv => x.handle(),
            _ => {
                return Err(inval(
                    "a PD (or, for an XRC target, an XRC domain) is needed",
                ))
            }
        };
        let (send_cq, recv_cq) = (attr.send_cq, attr.recv_cq);
        if !xrc_recv && (send_cq.is_none() || recv_cq.is_none()) {
            return Err(inval("send and receive CQs are needed"));
        }
        if !matches!(
            attr.qp_type,
            QpType::Rc | QpType::Uc | QpType::Ud | QpType::XrcSend | QpType::XrcRecv
        ) {
            return Err(Error::local(
                OP,
                Errno::EOPNOTSUPP,
                format!("QP type {}", attr.qp_type),
            ));
        }
        let cap = attr.cap;
        let sq_elem = send_wqe_size(cap.max_send_sge, cap.max_inline_data)
            .ok_or_else(|| inval("max_send_sge or max_inline_data beyond the WQE layout"))?;
        let kind = crate::pd::BufferKind::Qp;
        let (sq_mem, sq_layout) = alloc_ring_in(attr.pd, kind, OP, cap.max_send_wr, sq_elem)?;
        let rq = match attr.srq {
            Some(_) => None,
            None if xrc_send || xrc_recv => None,
            None => {
                let elem = recv_wqe_size(cap.max_recv_sge)
                    .ok_or_else(|| inval("max_recv_sge beyond the WQE layout"))?;
                Some(alloc_ring_in(attr.pd, kind, OP, cap.max_recv_wr, elem)?)
            }
        };
        let user_handle = next_user_handle();
        let req = Request::CreateQp(
            CreateQp {
                response: 0,
                user_handle,
                pd_handle,
                send_cq_handle: send_cq.map_or(0, Cq::handle),
                recv_cq_handle: recv_cq.map_or(0, Cq::handle),
                srq_handle: attr.srq.map_or(0, |s| s.handle()),
                max_send_wr: cap.max_send_wr,
                max_recv_wr: cap.max_recv_wr,
                max_send_sge: cap.max_send_sge,
                max_recv_sge: cap.max_recv_sge,
                max_inline_data: cap.max_inline_data,
                sq_sig_all: u8::from(attr.sq_sig_all),
                qp_type: attr.qp_type.raw() as u8,
                is_srq: u8::from(attr.srq.is_some()),
                reserved: 0,
            },
            UroceCreateQp {
                sq: sq_layout.desc(sq_mem.addr()),
                rq: rq
                    .as_ref()
                    .map_or(RingDesc::default(), |(m, l)| l.desc(m.addr())),
                flags: if attr.selective_repeat {
                    abi::uverbs::CREATE_QP_SELECTIVE_REPEAT
                } else {
                    0
                },
                reserved: 0,
            },
        );
        let resp = ctx.cmd(OP, &req, |mut r| {
            let core: CreateQpResp = take(&mut r);
            let drv: UroceCreateQpResp = take(&mut r);
            Ok((core, drv))
        });
        let (core, drv) = match resp {
            Ok(v) => v,
            Err(e) => {
                if e.kind() != ErrorKind::ControlPlane {
                    leak(&sq_mem);
                    if let Some((m, _)) = &rq {
                        leak(m);
                    }
                }
                return Err(e);
            }
        };
        // Granted caps, never beyond what our slots hold (the rings are ours).
        let (slot_sge, slot_inline) = send_caps_for_elem(sq_layout.elem_size());
        let granted = QpCap {
            max_send_wr: core.max_send_wr.min(sq_layout.slots()),
            max_recv_wr: rq
                .as_ref()
                .map_or(0, |(_, l)| core.max_recv_wr.min(l.slots())),
            max_send_sge: core.max_send_sge.min(slot_sge),
            max_recv_sge: rq.as_ref().map_or(0, |(_, l)| {
                let room = (l.elem_size() as usize - RECV_WQE_HDR_BYTES) / Sge::SIZE;
                core.max_recv_sge.min(room as u32)
            }),
            max_inline_data: core
                .max_inline_data
                .min(slot_inline)
                .min(ctx.max_inline_data()),
        };
        let sq_prod =
            Producer::attach(sq_mem.clone(), 0, sq_layout).map_err(|e| Error::abi(OP, &e))?;
        let rq = match rq {
            Some((mem, layout)) => Some(Mutex::new(RecvQueue {
                prod: Producer::attach(mem.clone(), 0, layout).map_err(|e| Error::abi(OP, &e))?,
                mem,
                layout,
                max_sge: granted.max_recv_sge,
            })),
            None => None,
        };
        let inner = QpInner {
            ctx: ctx.clone(),
            pd: attr.pd.cloned(),
            send_cq: send_cq.cloned(),
            recv_cq: recv_cq.cloned(),
            srq: attr.srq.cloned(),
            xrcd: attr.xrcd.cloned(),
            handle: core.qp_handle,
            qpn: core.qpn,
            user_handle,
            qp_type: attr.qp_type,
            sq_sig_all: attr.sq_sig_all,
            cap: granted,
            state: AtomicU32::new(QpState::Reset.raw()),
            sq: Mutex::new(SendQueue {
                prod: sq_prod,
                mem: sq_mem,
                layout: sq_layout,
                limits: SendLimits {
                    max_sge: granted.max_send_sge,
                    max_inline: granted.max_inline_data,
                    qp_type: attr.qp_type,
                    ctx_id: ctx.id(),
                },
            }),
            rq,
            sq_doorbell: drv.sq_doorbell,
            destroyed: false,
            transient: Arc::new(AtomicU32::new(0)),
            ece: Mutex::new({
                let rc = attr.qp_type == QpType::Rc;
                let sr = |on: bool| if rc && on { ECE_SELECTIVE_REPEAT } else { 0 };
                EceState {
                    offer: sr(attr.selective_repeat || sr_env()),
                    apply: sr(attr.selective_repeat),
                }
            }),
        };
        let qp = Qp(Arc::new(inner));
        if drv.sq_doorbell >= ctx.0.doorbells.layout().slots() {
            // Dropping `qp` destroys it through the control plane.
            return Err(Error::protocol(
                OP,
                format!("SQ doorbell slot {} outside the page", drv.sq_doorbell),
            ));
        }
        Ok(qp)
    }

    fn ctx(&self) -> &Context {
        &self.0.ctx
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.0.qpn
    }

    /// RC, UC or UD.
    pub fn qp_type(&self) -> QpType {
        self.0.qp_type
    }

    /// The granted capacities.
    pub fn cap(&self) -> QpCap {
        self.0.cap
    }

    /// Whether every send WR is signaled.
    pub fn sq_sig_all(&self) -> bool {
        self.0.sq_sig_all
    }

    /// The state last set by [`Qp::modify`] or seen by [`Qp::query`].
    pub fn state(&self) -> QpState {
        // Only values decoded as a `QpState` are stored.
        QpState::from_raw(self.0.state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    /// The `user_handle` async events carry for this QP.
    pub fn user_handle(&self) -> u64 {
        self.0.user_handle
    }

    /// The control plane's handle.
    pub fn handle(&self) -> u32 {
        self.0.handle
    }

    /// The PD (`None` for an XRC target).
    pub fn pd(&self) -> Option<&Pd> {
        self.0.pd.as_ref()
    }

    /// The send CQ (`None` for an XRC target).
    pub fn send_cq(&self) -> Option<&Cq> {
        self.0.send_cq.as_ref()
    }

    /// The receive CQ (an XRC initiator's is its send CQ; `None` for an XRC target).
    pub fn recv_cq(&self) -> Option<&Cq> {
        self.0.recv_cq.as_ref()
    }

    /// An XRC target's domain.
    pub fn xrcd(&self) -> Option<&crate::Xrcd> {
        self.0.xrcd.as_ref()
    }

    /// The SRQ, if receives come from one.
    pub fn srq(&self) -> Option<&Srq> {
        self.0.srq.as_ref()
    }

    /// The ECE options this QP knows: selective repeat on an RC QP, none on others.
    fn ece_supported(&self) -> u32 {
        if self.0.qp_type == QpType::Rc {
            UROCE_ECE_OPTIONS
        } else {
            0
        }
    }

    fn ece_state(&self) -> MutexGuard<'_, EceState> {
        self.0.ece.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `ibv_query_ece`: uroce's vendor ID and the options the QP offers to a peer in the CM's
    /// REQ or REP (docs/wire.md §5.6) — after [`Qp::set_ece`], the options set. A new RC QP
    /// offers selective repeat if [`QpInitAttr::selective_repeat`] or the environment
    /// variable [`SELECTIVE_REPEAT_ENV`]`=1` asked for it; nothing otherwise.
    pub fn query_ece(&self) -> Ece {
        Ece::uroce(self.ece_state().offer)
    }

    /// `ibv_set_ece`: the options to offer and to run with: the next move from INIT to RTR
    /// turns selective repeat on if they hold [`ECE_SELECTIVE_REPEAT`]. Options the QP does
    /// not know are dropped (a non-RC QP knows none), as mlx5's firmware keeps only those it
    /// supports. Another vendor ID or a `comp_mask` is EINVAL, as for mlx5.
    pub fn set_ece(&self, ece: Ece) -> Result<()> {
        if ece.vendor_id != UROCE_ECE_VENDOR_ID {
            return Err(Error::local(
                "ibv_set_ece",
                Errno::EINVAL,
                format!("vendor_id {:#x} is not uroce's", ece.vendor_id),
            ));
        }
        let opts = ece.options & self.ece_supported();
        *self.ece_state() = EceState {
            offer: opts,
            apply: opts,
        };
        Ok(())
    }

    /// `ibv_modify_qp`: apply the fields of `attr` selected by `mask`.
    pub fn modify(&self, attr: &QpAttr, mask: QpAttrMask) -> Result<()> {
        // Selective repeat set by the ECE exchange goes with the move from INIT to RTR.
        let flags = if mask.contains(QpAttrMask::STATE)
            && attr.qp_state == QpState::Rtr
            && self.state() == QpState::Init
            && self.ece_state().apply & ECE_SELECTIVE_REPEAT != 0
        {
            abi::uverbs::MODIFY_QP_SELECTIVE_REPEAT
        } else {
            0
        };
        let req = Request::ModifyQp(ModifyQp::new(self.0.handle, attr, mask, flags));
        self.ctx().cmd("modify_qp", &req, |_| Ok(()))?;
        if mask.contains(QpAttrMask::STATE) {
            self.0.state.store(attr.qp_state.raw(), Ordering::Release);
            if attr.qp_state == QpState::Reset {
                // As mlx4/mlx5: the QP's completions not yet polled go with it.
                if let Some(s) = &self.0.send_cq {
                    s.clean(self.qp_num())?;
                }
                if let Some(r) = &self.0.recv_cq {
                    if !self
                        .0
                        .send_cq
                        .as_ref()
                        .is_some_and(|s| Arc::ptr_eq(&s.0, &r.0))
                    {
                        r.clean(self.qp_num())?;
                    }
                }
            }
        }
        Ok(())
    }

    /// `ibv_query_qp`: the attributes selected by `mask` (the control plane may fill more).
    /// Also refreshes [`Qp::state`].
    pub fn query(&self, mask: QpAttrMask) -> Result<QpAttr> {
        let req = Request::QueryQp(QueryQp {
            response: 0,
            qp_handle: self.0.handle,
            attr_mask: mask.bits(),
        });
        let r: QueryQpResp = self.ctx().cmd("query_qp", &req, |mut r| Ok(take(&mut r)))?;
        let attr = r
            .attr()
            .map_err(|e| Error::protocol("query_qp", e.to_string()))?;
        self.0.state.store(attr.qp_state.raw(), Ordering::Release);
        Ok(attr)
    }

    /// This QP as a peer sees it ([`Qp::connect`]'s argument on the other side).
    pub fn endpoint(&self, psn: u32, gid: Gid) -> QpEndpoint {
        QpEndpoint {
            qpn: self.0.qpn,
            psn,
            gid,
        }
    }

    /// RESET → INIT → RTR → RTS for an RC or UC QP talking to `remote`, as
    /// ibv_rc_pingpong does (UC ignores the READ/atomic and retry fields).
    pub fn connect(&self, remote: &QpEndpoint, o: &ConnectOpts) -> Result<()> {
        let uc = self.0.qp_type == QpType::Uc;
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: o.port,
            qp_access_flags: if uc {
                o.access & (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
            } else {
                o.access
            },
            ..QpAttr::default()
        };
        self.modify(
            &a,
            QpAttrMask::STATE
                | QpAttrMask::PKEY_INDEX
                | QpAttrMask::PORT
                | QpAttrMask::ACCESS_FLAGS,
        )?;
        a.qp_state = QpState::Rtr;
        a.path_mtu = o.path_mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = o.max_dest_rd_atomic;
        a.min_rnr_timer = o.min_rnr_timer;
        a.ah_attr = AhAttr::roce(remote.gid, o.sgid_index, o.port);
        let mut m = QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN;
        if !uc {
            m |= QpAttrMask::MAX_DEST_RD_ATOMIC | QpAttrMask::MIN_RNR_TIMER;
        }
        self.modify(&a, m)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = o.sq_psn;
        a.timeout = o.timeout;
        a.retry_cnt = o.retry_cnt;
        a.rnr_retry = o.rnr_retry;
        a.max_rd_atomic = o.max_rd_atomic;
        let mut m = QpAttrMask::STATE | QpAttrMask::SQ_PSN;
        if !uc {
            m |= QpAttrMask::TIMEOUT
                | QpAttrMask::RETRY_CNT
                | QpAttrMask::RNR_RETRY
                | QpAttrMask::MAX_QP_RD_ATOMIC;
        }
        self.modify(&a, m)
    }

    /// RESET → INIT → RTR → RTS for a UD QP with Q_Key `qkey` (ibv_ud_pingpong).
    pub fn ready_ud(&self, port: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: port,
            qkey,
            ..QpAttr::default()
        };
        self.modify(
            &a,
            QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY,
        )?;
        a.qp_state = QpState::Rtr;
        self.modify(&a, QpAttrMask::STATE)?;
        a.qp_state = QpState::Rts;
        a.sq_psn = sq_psn;
        self.modify(&a, QpAttrMask::STATE | QpAttrMask::SQ_PSN)
    }

    /// Move to `state` with no other attribute (e.g. ERR, or RESET to reuse the QP).
    pub fn set_state(&self, state: QpState) -> Result<()> {
        let a = QpAttr {
            qp_state: state,
            ..QpAttr::default()
        };
        self.modify(&a, QpAttrMask::STATE)
    }

    fn sq(&self) -> MutexGuard<'_, SendQueue> {
        self.0.sq.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn check_send_state(&self, op: &'static str) -> Result<(), PostError> {
        let s = self.state();
        if s < QpState::Rts {
            return Err(PostError {
                index: 0,
                error: Error::local(
                    op,
                    Errno::EINVAL,
                    format!("QP {} is in {s}, not RTS", self.0.qpn),
                ),
            });
        }
        Ok(())
    }

    fn check_recv_state(&self, op: &'static str) -> Result<(), PostError> {
        let s = self.state();
        if s == QpState::Reset {
            return Err(PostError {
                index: 0,
                error: Error::local(op, Errno::EINVAL, format!("QP {} is in RESET", self.0.qpn)),
            });
        }
        Ok(())
    }

    /// `ibv_bind_mw` for a type 1 window, as rdma-core's rxe provider does it: post a
    /// BIND_MW WR giving the window the next R_Key ([`crate::inc_rkey`]) and the range of
    /// `info`, and record that R_Key in `mw` (the bind completes, with `wr_id`, on this
    /// QP's send CQ if `flags` has SIGNALED). A length of 0 unbinds. Returns the new R_Key.
    pub fn bind_mw(
        &self,
        mw: &crate::Mw,
        wr_id: u64,
        info: crate::MwBindInfo,
        flags: abi::SendFlags,
    ) -> Result<u32> {
        if mw.mw_type() != crate::MwType::Type1 {
            return Err(Error::local(
                "bind_mw",
                Errno::EINVAL,
                "ibv_bind_mw binds type 1 windows; type 2 are bound by a BIND_MW WR",
            ));
        }
        let new_rkey = crate::inc_rkey(mw.rkey());
        let wr = SendWr::bind_mw(wr_id, mw.rkey(), new_rkey, info).flags(flags);
        self.post_send(&[wr]).map_err(|e| e.error)?;
        mw.set_rkey(new_rkey);
        Ok(new_rkey)
    }

    /// `ibv_post_send`: write `wrs` into the SQ ring and ring the doorbell once (module
    /// docs). No system call unless the engine is parked. On error, WRs before
    /// [`PostError::index`] were posted.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        self.check_send_state("post_send")?;
        let (posted, err) = {
            let mut sq = self.sq();
            let SendQueue { prod, limits, .. } = &mut *sq;
            stage_sends(prod, limits, wrs)
        };
        if posted > 0 {
            let ctx = self.ctx();
            // The slot was checked at creation, so ringing cannot fail; if it somehow did,
            // the WRs are published and the next doorbell makes the engine find them. A
            // parked engine's work is done on this thread if it can be (embedded mode), as
            // rxe transmits in the caller's context.
            let _ = ctx.0.doorbells.ring_or_drive(
                self.0.sq_doorbell,
                &ctx.0.wake,
                ctx.0.progress.as_deref(),
            );
        }
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `ibv_post_recv`: write `wrs` into the RQ ring. No system call.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        const OP: &str = "post_recv";
        self.check_recv_state(OP)?;
        let rq = self.0.rq.as_ref().ok_or_else(|| PostError {
            index: 0,
            error: Error::local(OP, Errno::EINVAL, "QP receives from an SRQ"),
        })?;
        let mut rq = rq.lock().unwrap_or_else(|p| p.into_inner());
        let max_sge = rq.max_sge;
        stage_recvs(OP, &mut rq.prod, max_sge, wrs)
    }

    /// Slow-path post_send: the WRs as one POST_SEND command (no inline data).
    pub fn post_send_cmd(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        const OP: &str = "post_send_cmd";
        self.check_send_state(OP)?;
        let mut sq = self.sq();
        let (mut wr_bytes, mut sge_bytes) = (Vec::new(), Vec::new());
        encode_send_cmd(wrs, &sq.limits, &mut wr_bytes, &mut sge_bytes)?;
        let req = Request::PostSend(
            PostSend {
                response: 0,
                qp_handle: self.0.handle,
                wr_count: wrs.len() as u32,
                sge_count: (sge_bytes.len() / Sge::SIZE) as u32,
                wqe_size: abi::uverbs::SendWr::SIZE as u32,
            },
            WrList {
                wrs: &wr_bytes,
                sges: &sge_bytes,
                wqe_size: abi::uverbs::SendWr::SIZE,
            },
        );
        let res = self
            .ctx()
            .cmd(OP, &req, |mut r| Ok(take::<PostResp>(&mut r).bad_wr));
        // The control plane may have produced into our SQ ring: resume from its index.
        let (mem, layout) = (sq.mem.clone(), sq.layout);
        if let Ok(p) = Producer::attach(mem, 0, layout) {
            sq.prod = p;
        }
        match res {
            Ok(bad) => bad_wr_result(OP, bad, wrs.len()),
            Err(error) => Err(PostError { index: 0, error }),
        }
    }

    /// Slow-path post_recv: the WRs as one POST_RECV command.
    pub fn post_recv_cmd(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        const OP: &str = "post_recv_cmd";
        self.check_recv_state(OP)?;
        let rq = self.0.rq.as_ref().ok_or_else(|| PostError {
            index: 0,
            error: Error::local(OP, Errno::EINVAL, "QP receives from an SRQ"),
        })?;
        let mut rq = rq.lock().unwrap_or_else(|p| p.into_inner());
        let (mut wr_bytes, mut sge_bytes) = (Vec::new(), Vec::new());
        encode_recv_cmd(OP, wrs, rq.max_sge, &mut wr_bytes, &mut sge_bytes)?;
        let req = Request::PostRecv(
            PostRecv {
                response: 0,
                qp_handle: self.0.handle,
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
            .ctx()
            .cmd(OP, &req, |mut r| Ok(take::<PostResp>(&mut r).bad_wr));
        let (mem, layout) = (rq.mem.clone(), rq.layout);
        if let Ok(p) = Producer::attach(mem, 0, layout) {
            rq.prod = p;
        }
        match res {
            Ok(bad) => bad_wr_result(OP, bad, wrs.len()),
            Err(error) => Err(PostError { index: 0, error }),
        }
    }

    /// `ibv_destroy_qp`. Outstanding WRs are abandoned without completions (IBA: a
    /// destroyed QP generates none). `EBUSY` (QP handed back) while other handles exist.
    ///
    /// Handles a background thread holds for a moment ([`WeakQp::upgrade_transient`]: the
    /// rdma_cm event thread moving the QP to ERR on a DREQ) are waited out, for at most a
    /// second.
    pub fn destroy(self) -> core::result::Result<(), (Error, Qp)> {
        let mut arc = self.0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        loop {
            match Arc::try_unwrap(arc) {
                Ok(mut inner) => {
                    return match inner.destroy() {
                        Ok(()) => Ok(()),
                        Err(e) => Err((e, Qp(Arc::new(inner)))),
                    }
                }
                Err(a) => {
                    let others = Arc::strong_count(&a).saturating_sub(1);
                    let transient = a.transient.load(Ordering::SeqCst) as usize;
                    if others > transient || std::time::Instant::now() >= deadline {
                        return Err((
                            Error::local(
                                "destroy_qp",
                                Errno::EBUSY,
                                "other handles to this QP exist",
                            ),
                            Qp(a),
                        ));
                    }
                    arc = a;
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
            }
        }
    }

    /// The address of the peer this QP's primary path points at, if the control plane
    /// reports one (handy in examples and logs).
    pub fn remote_addr(&self) -> Result<IpAddr> {
        Ok(self.query(QpAttrMask::AV)?.ah_attr.grh.dgid.to_ip())
    }
}

impl QpInner {
    fn destroy(&mut self) -> Result<()> {
        if self.destroyed {
            return Ok(());
        }
        let req = Request::DestroyQp(DestroyQp {
            response: 0,
            qp_handle: self.handle,
            reserved: 0,
        });
        self.ctx.cmd("destroy_qp", &req, |_| Ok(()))?;
        self.destroyed = true;
        Ok(())
    }
}

impl Drop for QpInner {
    fn drop(&mut self) {
        if self.destroy().is_err() {
            // The engine may still read the rings: never free them.
            leak(&self.sq.get_mut().unwrap_or_else(|p| p.into_inner()).mem);
            if let Some(rq) = &mut self.rq {
                leak(&rq.get_mut().unwrap_or_else(|p| p.into_inner()).mem);
            }
        }
    }
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.0.qpn)
            .field("type", &self.0.qp_type)
            .field("state", &self.state())
            .field("cap", &self.0.cap)
            .finish()
    }
}
