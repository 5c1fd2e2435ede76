//! The device's Communication Manager (IBTA Vol 1 §12) on a context: listen, connect,
//! accept, reject, disconnect and UD service resolution (SIDR), with the CM's events read
//! from a pollable channel — the service the kernel's `ib_ucm` gave user space, on which an
//! rdma_cm (address resolution, port spaces, QP transitions) is built.
//!
//! Every call is one UROCE_CM command ([`abi::uverbs::CmCmd`]); the device sends and
//! retransmits the MADs on QP 1 and reports what happened as [`CmEvent`]s on the
//! [`CmChannel`] of the context that owns the ID (a connection request belongs to the
//! listener's channel).

use std::fmt;
use std::net::IpAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use abi::uverbs::{cm_event, cm_op, CmCmd, CmCmdResp, CmEventDesc, Request};
use wire::cm::{CmMadRepr, CmMsg};
use wire::mad::MAD_LEN;

pub use wire::cm::{
    CmaHdr, Ece, PortSpace, RejReason, RepRepr, ReqRepr, ServiceId, SidrRepRepr, SidrReqRepr,
    SidrStatus, CMA_HDR_LEN,
};

use crate::context::{take, Context};
use crate::error::{Error, Result};
use crate::qp::Qp;
use crate::sys;
use crate::{Errno, QpType};

/// A CM ID of the device (a listener, a connection, a SIDR lookup).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// What the CM reports. `id` is the ID concerned, `listen` the listener a request reached,
/// `peer` the requester's address; the message fields are the IBTA's (Vol 1 §12.6).
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ reached listener `listen`; `id` is the new connection (answer with
    /// [`CmChannel::accept`] or [`CmChannel::reject`]).
    ConnectRequest {
        id: CmId,
        listen: CmId,
        peer: IpAddr,
        req: Box<ReqRepr>,
        /// The REQ's Enhanced Connection Establishment (its Vendor ID and options).
        ece: Ece,
    },
    /// The REP to our REQ: bring the QP to RTS with it, then [`CmChannel::establish`].
    ConnectResponse {
        id: CmId,
        rep: Box<RepRepr>,
        /// The REP's Enhanced Connection Establishment (its Vendor ID and options).
        ece: Ece,
    },
    /// Passive side: the connection is up (the RTU came).
    Established { id: CmId },
    /// The peer refused (REJ), with its reason and private data.
    Rejected {
        id: CmId,
        reason: u16,
        private_data: Vec<u8>,
    },
    /// No answer within the CM's retries.
    Unreachable { id: CmId },
    /// The connection is down (`timed_out`: our DREQ was never answered).
    Disconnected { id: CmId, timed_out: bool },
    /// Timewait is over.
    TimewaitExit { id: CmId },
    /// A SIDR_REQ reached listener `listen` (answer with [`CmChannel::sidr_reply`]).
    SidrRequest {
        id: CmId,
        listen: CmId,
        peer: IpAddr,
        req: Box<SidrReqRepr>,
    },
    /// The answer to our SIDR request.
    SidrReply { id: CmId, rep: Box<SidrRepRepr> },
}

impl CmEvent {
    /// The ID the event concerns.
    pub fn id(&self) -> CmId {
        match self {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::Disconnected { id, .. }
            | CmEvent::TimewaitExit { id }
            | CmEvent::SidrRequest { id, .. }
            | CmEvent::SidrReply { id, .. } => *id,
        }
    }
}

/// A connection request: the fields of a REQ (IBTA Vol 1 Table 106) a consumer chooses.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmConnect {
    /// The peer's address (its QP 1 receives the REQ).
    pub peer: IpAddr,
    pub service_id: ServiceId,
    /// Our QP (RC or UC, of this context).
    pub qpn: u32,
    /// UC instead of RC.
    pub uc: bool,
    /// Our receive PSN: the first PSN the peer sends.
    pub rq_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// IBTA MTU code (3 = 1024).
    pub path_mtu: u8,
    pub srq: bool,
    pub flow_label: u32,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// At most 92 bytes.
    pub private_data: Vec<u8>,
    /// uroce's ECE options the REQ offers (docs/wire.md §5.6): 0 sends no ECE (Vendor ID
    /// and options 0, as a CM without ECE).
    pub ece_options: u32,
}

impl CmConnect {
    /// A request for `qp` to `peer`'s `service_id` with rdma_cm's defaults: one outstanding
    /// READ/atomic each way, 7 retries, 7 RNR retries (infinite), MTU 1024, hop limit 64.
    pub fn new(qp: &Qp, peer: IpAddr, service_id: ServiceId, rq_psn: u32) -> CmConnect {
        CmConnect {
            uc: qp.qp_type() == QpType::Uc,
            ..CmConnect::new_for_qpn(qp.qp_num(), peer, service_id, rq_psn)
        }
    }

    /// The same for an RC QP known only by number (a QP the consumer manages itself).
    pub fn new_for_qpn(qpn: u32, peer: IpAddr, service_id: ServiceId, rq_psn: u32) -> CmConnect {
        CmConnect {
            peer,
            service_id,
            qpn,
            uc: false,
            rq_psn,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            path_mtu: 3,
            srq: false,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            private_data: Vec::new(),
            ece_options: 0,
        }
    }
}

/// An answer to a connection request: the fields of a REP (IBTA Vol 1 Table 110) a consumer
/// chooses.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmAccept {
    /// Our QP (RC or UC, of this context).
    pub qpn: u32,
    /// Our receive PSN.
    pub rq_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub rnr_retry_count: u8,
    pub srq: bool,
    /// At most 196 bytes.
    pub private_data: Vec<u8>,
    /// uroce's ECE options the REP answers with (docs/wire.md §5.6), when the REQ carried
    /// uroce's ECE; `None` sends no ECE (Vendor ID and options 0).
    pub ece_options: Option<u32>,
}

/// This context's CM: its calls and its event channel.
pub struct CmChannel {
    ctx: Context,
    fd: OwnedFd,
}

impl fmt::Debug for CmChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CmChannel")
            .field("fd", &self.fd.as_raw_fd())
            .finish()
    }
}

fn too_long(op: &'static str) -> Error {
    Error::local(
        op,
        Errno::EINVAL,
        "private data longer than the CM message carries",
    )
}

impl CmChannel {
    /// Open the context's CM channel (one per context: a second gives EEXIST).
    pub fn open(ctx: &Context) -> Result<CmChannel> {
        const OP: &str = "cm_create_channel";
        let r = call(ctx, OP, &op_cmd(cm_op::CREATE_CHANNEL, 0))?;
        let fd = sys::adopt_fd(r.fd)
            .ok_or_else(|| Error::protocol(OP, format!("fd {} is not open", r.fd as i32)))?;
        sys::set_nonblocking(fd.as_fd()).map_err(|e| Error::channel(OP, &e))?;
        Ok(CmChannel {
            ctx: ctx.clone(),
            fd,
        })
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    fn simple(&self, op: &'static str, code: u32, id: CmId) -> Result<()> {
        call(&self.ctx, op, &op_cmd(code, id.0)).map(|_| ())
    }

    /// Listen on `service_id` for requests to `bind` (any address of the device if `None`).
    pub fn listen(&self, service_id: ServiceId, bind: Option<IpAddr>) -> Result<CmId> {
        let mut c = op_cmd(cm_op::LISTEN, 0);
        c.service_id = service_id.0;
        c.bind = bind.map(wire::ip::gid_of_ip).unwrap_or([0; 16]);
        call(&self.ctx, "cm_listen", &c).map(|r| CmId(r.id))
    }

    /// Send a REQ. Ends in [`CmEvent::ConnectResponse`], `Rejected` or `Unreachable`.
    pub fn connect(&self, p: &CmConnect) -> Result<CmId> {
        const OP: &str = "cm_connect";
        let local = self.ctx.query_gid(1, 0)?;
        let mut c = op_cmd(cm_op::CONNECT, 0);
        c.service_id = p.service_id.0;
        c.peer = wire::ip::gid_of_ip(p.peer);
        c.local_gid = local.0;
        c.remote_gid = wire::ip::gid_of_ip(p.peer);
        c.qpn = p.qpn;
        c.psn = p.rq_psn & 0xFF_FFFF;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.retry_count = p.retry_count;
        c.rnr_retry_count = p.rnr_retry_count;
        c.path_mtu = p.path_mtu;
        c.transport_type = u8::from(p.uc);
        c.srq = u8::from(p.srq);
        c.flow_label = p.flow_label;
        c.traffic_class = p.traffic_class;
        c.hop_limit = p.hop_limit;
        if p.ece_options != 0 {
            c.flags |= CmCmd::FLAG_ECE;
            c.qkey = p.ece_options;
        }
        if p.private_data.len() > wire::cm::pd_len::REQ || !c.set_pd(&p.private_data) {
            return Err(too_long(OP));
        }
        call(&self.ctx, OP, &c).map(|r| CmId(r.id))
    }

    /// Accept request `id` (REP). Ends in `Established`, `Rejected` or `Unreachable`.
    pub fn accept(&self, id: CmId, p: &CmAccept) -> Result<()> {
        const OP: &str = "cm_accept";
        let mut c = op_cmd(cm_op::ACCEPT, id.0);
        c.qpn = p.qpn;
        c.psn = p.rq_psn & 0xFF_FFFF;
        c.responder_resources = p.responder_resources;
        c.initiator_depth = p.initiator_depth;
        c.rnr_retry_count = p.rnr_retry_count;
        c.srq = u8::from(p.srq);
        if let Some(o) = p.ece_options {
            c.flags |= CmCmd::FLAG_ECE;
            c.qkey = o;
        }
        if p.private_data.len() > wire::cm::pd_len::REP || !c.set_pd(&p.private_data) {
            return Err(too_long(OP));
        }
        call(&self.ctx, OP, &c).map(|_| ())
    }

    /// Refuse `id` (REJ with `reason`, e.g. 28 consumer-defined).
    pub fn reject(&self, id: CmId, reason: u16, private_data: &[u8]) -> Result<()> {
        const OP: &str = "cm_reject";
        let mut c = op_cmd(cm_op::REJECT, id.0);
        c.reason = reason;
        if private_data.len() > wire::cm::pd_len::REJ || !c.set_pd(private_data) {
            return Err(too_long(OP));
        }
        call(&self.ctx, OP, &c).map(|_| ())
    }

    /// Active side, QP in RTS: send the RTU.
    pub fn establish(&self, id: CmId) -> Result<()> {
        self.simple("cm_establish", cm_op::ESTABLISH, id)
    }

    /// Passive side: data came before the RTU (rdma_notify).
    pub fn notify(&self, id: CmId) -> Result<()> {
        self.simple("cm_notify", cm_op::NOTIFY, id)
    }

    /// DREQ (or DREP to the peer's DREQ).
    pub fn disconnect(&self, id: CmId) -> Result<()> {
        self.simple("cm_disconnect", cm_op::DISCONNECT, id)
    }

    /// Let go of `id`.
    pub fn destroy(&self, id: CmId) -> Result<()> {
        self.simple("cm_destroy", cm_op::DESTROY, id)
    }

    /// Send a SIDR_REQ. Ends in `SidrReply` or `Unreachable`.
    pub fn sidr_request(
        &self,
        peer: IpAddr,
        service_id: ServiceId,
        private_data: &[u8],
    ) -> Result<CmId> {
        const OP: &str = "cm_sidr_request";
        let mut c = op_cmd(cm_op::SIDR_REQUEST, 0);
        c.peer = wire::ip::gid_of_ip(peer);
        c.service_id = service_id.0;
        if private_data.len() > wire::cm::pd_len::SIDR_REQ || !c.set_pd(private_data) {
            return Err(too_long(OP));
        }
        call(&self.ctx, OP, &c).map(|r| CmId(r.id))
    }

    /// Answer SIDR request `id`.
    pub fn sidr_reply(
        &self,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<()> {
        const OP: &str = "cm_sidr_reply";
        let mut c = op_cmd(cm_op::SIDR_REPLY, id.0);
        c.status = status;
        c.qpn = qpn;
        c.qkey = qkey;
        if private_data.len() > wire::cm::pd_len::SIDR_REP || !c.set_pd(private_data) {
            return Err(too_long(OP));
        }
        call(&self.ctx, OP, &c).map(|_| ())
    }

    /// The next event, or `None` if none is waiting.
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        const OP: &str = "cm_get_event";
        let mut buf = [0u8; CmEventDesc::SIZE + 8];
        let n = match sys::read(self.fd.as_fd(), &mut buf) {
            Ok(0) => return Err(Error::protocol(OP, "CM channel closed")),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(Error::channel(OP, &e)),
        };
        if n != CmEventDesc::SIZE {
            return Err(Error::protocol(OP, format!("event of {n} bytes")));
        }
        let mut bytes: &[u8] = &buf[..n];
        let d: CmEventDesc = take(&mut bytes);
        decode(&d).map(Some).map_err(|m| Error::protocol(OP, m))
    }

    /// Block until an event arrives; `Ok(None)` after `timeout` (`None` waits forever).
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(e) = self.try_get_event()? {
                return Ok(Some(e));
            }
            if !sys::wait_until(self.fd.as_fd(), deadline)
                .map_err(|e| Error::channel("cm_get_event", &e))?
            {
                return Ok(None);
            }
        }
    }
}

impl AsRawFd for CmChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn op_cmd(op: u32, id: u32) -> CmCmd {
    CmCmd {
        op,
        id,
        ..CmCmd::default()
    }
}

fn call(ctx: &Context, op: &'static str, c: &CmCmd) -> Result<CmCmdResp> {
    ctx.cmd(op, &Request::Cm(*c), |mut r| Ok(take(&mut r)))
}

fn peer_of(d: &CmEventDesc) -> IpAddr {
    crate::Gid(d.peer).to_ip()
}

/// An event record as the device wrote it, with the CM message behind it parsed.
fn decode(d: &CmEventDesc) -> core::result::Result<CmEvent, String> {
    let id = CmId(d.id);
    let (msg, attr_mod) = match d.mad() {
        Some(m) => {
            let r = CmMadRepr::parse(&m[..MAD_LEN.min(m.len())])
                .map_err(|e| format!("event MAD: {e}"))?;
            (Some(r.msg), r.attr_mod)
        }
        None => (None, 0),
    };
    let want = |what: &str| format!("event {} without its {what}", d.kind);
    Ok(match (d.kind, msg) {
        (cm_event::CONNECT_REQUEST, Some(CmMsg::Req(req))) => CmEvent::ConnectRequest {
            id,
            listen: CmId(d.listen),
            peer: peer_of(d),
            ece: Ece {
                vendor_id: req.vendor_id,
                options: attr_mod,
            },
            req,
        },
        (cm_event::CONNECT_RESPONSE, Some(CmMsg::Rep(rep))) => CmEvent::ConnectResponse {
            id,
            ece: Ece {
                vendor_id: rep.vendor_id,
                options: attr_mod,
            },
            rep,
        },
        (cm_event::ESTABLISHED, _) => CmEvent::Established { id },
        (cm_event::REJECTED, Some(CmMsg::Rej(rej))) => CmEvent::Rejected {
            id,
            reason: rej.reason.0,
            private_data: rej.private_data.to_vec(),
        },
        (cm_event::UNREACHABLE, _) => CmEvent::Unreachable { id },
        (cm_event::DISCONNECTED, _) => CmEvent::Disconnected {
            id,
            timed_out: d.flags & CmEventDesc::FLAG_TIMED_OUT != 0,
        },
        (cm_event::TIMEWAIT_EXIT, _) => CmEvent::TimewaitExit { id },
        (cm_event::SIDR_REQUEST, Some(CmMsg::SidrReq(req))) => CmEvent::SidrRequest {
            id,
            listen: CmId(d.listen),
            peer: peer_of(d),
            req,
        },
        (cm_event::SIDR_REPLY, Some(CmMsg::SidrRep(rep))) => CmEvent::SidrReply { id, rep },
        (cm_event::CONNECT_REQUEST, _) => return Err(want("REQ")),
        (cm_event::CONNECT_RESPONSE, _) => return Err(want("REP")),
        (cm_event::REJECTED, _) => return Err(want("REJ")),
        (cm_event::SIDR_REQUEST, _) => return Err(want("SIDR_REQ")),
        (cm_event::SIDR_REPLY, _) => return Err(want("SIDR_REP")),
        (k, _) => return Err(format!("unknown CM event kind {k}")),
    })
}

impl Context {
    /// This context's CM channel ([`CmChannel::open`]).
    pub fn cm_channel(&self) -> Result<CmChannel> {
        CmChannel::open(self)
    }
}
