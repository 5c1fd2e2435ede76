//! The control plane's command handlers: one function per uverbs command, each validating
//! every field of untrusted bytes and answering with a response or an errno — the work
//! `ib_uverbs` + `ib_core` + the rxe driver's verbs do in the kernel.
//!
//! Handles are checked to belong to the calling context (EINVAL otherwise, as a failed
//! `uobj_get_obj_read` gives). Nothing here transmits: commands that create work (posts,
//! state changes) queue the QP for the engine and ask the caller to kick it.
//!
//! Every refusal is a [`Refusal`]: the errno the kernel would return (the C contract), the
//! [`Rule`] broken and a sentence naming the attribute and the values, which travels back
//! in the error reply ([`abi::reason`]).

use std::net::IpAddr;
use std::os::fd::IntoRawFd;

use abi::cmd::{encode_refusal, encode_reply, Command, Frame};
use abi::doorbell::{DoorbellLayout, DoorbellReceiver};
use abi::fastpath::{
    recv_wqe_size, send_caps_for_elem, Cqe, RecvWqe, SendWqe, CQE_BYTES, MAX_INLINE_DATA, MAX_SGE,
    RECV_WQE_HDR_BYTES,
};
use abi::ring::{Consumer, Producer, RingLayout};
use abi::uverbs::*;
use abi::{
    AccessFlags, AhAttr, AttrError, AttrErrorKind, AttrLimits, Errno, GidType, GlobalRoute,
    LinkLayer, PortState, QpCap, Request, Rule, SendFlags, SrqAttrMask,
};
use transport::wire::Qpn;
use transport::{Mtu, Qp, QpAttr, QpAttrMask, QpCaps, QpConfig, QpState, Service};
use zerocopy::IntoBytes;

use crate::dma;
use crate::state::*;
use crate::sys;

/// Objects that belong to a context.
trait Owned {
    fn ctx(&self) -> CtxId;
}

macro_rules! owned {
    ($($t:ty),*) => {$(impl Owned for $t { fn ctx(&self) -> CtxId { self.ctx } })*};
}
owned!(Pd, Mr, Cq, Srq, Ah, Chan, QpObj, Xrcd, crate::keys::Mw);

/// Why a command was refused: the errno (all a C caller sees), the rule broken, and a
/// sentence with the attribute and values (without the verb, which [`DevState::execute`]
/// puts in front). There is deliberately no conversion from a bare errno: every refusal
/// names its rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) errno: Errno,
    pub(crate) rule: Rule,
    pub(crate) detail: String,
}

impl Refusal {
    pub(crate) fn new(errno: Errno, rule: Rule, detail: impl Into<String>) -> Refusal {
        Refusal {
            errno,
            rule,
            detail: detail.into(),
        }
    }
}

/// `refuse!(EINVAL, BAD_VALUE, "format", args..)`: a [`Refusal`].
macro_rules! refuse {
    ($errno:ident, $rule:ident, $($fmt:tt)+) => {
        Refusal::new(Errno::$errno, Rule::$rule, format!($($fmt)+))
    };
}

type Res<T> = Result<T, Refusal>;

fn bad_handle(what: &'static str, h: u32) -> Refusal {
    refuse!(
        EINVAL,
        BAD_HANDLE,
        "{what} {h} names no such object of this context"
    )
}

fn own<'s, T: Owned>(
    slab: &'s crate::slab::Slab<T>,
    ctx: CtxId,
    h: u32,
    what: &'static str,
) -> Res<&'s T> {
    slab.get(h)
        .filter(|o| o.ctx() == ctx)
        .ok_or_else(|| bad_handle(what, h))
}

fn own_mut<'s, T: Owned>(
    slab: &'s mut crate::slab::Slab<T>,
    ctx: CtxId,
    h: u32,
    what: &'static str,
) -> Res<&'s mut T> {
    slab.get_mut(h)
        .filter(|o| o.ctx() == ctx)
        .ok_or_else(|| bad_handle(what, h))
}

/// A ring descriptor or ring access the ABI layer refused.
fn ring_refusal(what: &'static str) -> impl Fn(abi::AbiError) -> Refusal {
    move |e| {
        let rule = if e.errno() == Errno::ENOMEM {
            Rule::QUEUE_FULL
        } else {
            Rule::BAD_RING
        };
        Refusal::new(e.errno(), rule, format!("{what}: {e}"))
    }
}

/// A memory range `dma` refused: EFAULT (not mapped so) or EINVAL (empty, wraps, at 0).
fn mem_refusal(what: &'static str, addr: u64, len: u64, write: bool) -> impl Fn(Errno) -> Refusal {
    move |e| {
        if e == Errno::EFAULT {
            let how = if write { " writable" } else { "" };
            refuse!(
                EFAULT,
                NOT_MAPPED,
                "{what} [{addr:#x}, +{len}) is not mapped{how} in the process"
            )
        } else {
            Refusal::new(
                e,
                Rule::BAD_RANGE,
                format!("{what} [{addr:#x}, +{len}) is empty, starts at 0, or wraps"),
            )
        }
    }
}

/// The verb of a command, as a reason names it (`modify_qp`, `query_gid`).
fn verb(c: Command) -> String {
    match c.name() {
        Some(n) => n.trim_start_matches("UROCE_").to_ascii_lowercase(),
        None => format!("command {:#x}", c.0),
    }
}

fn push<T: IntoBytes + zerocopy::Immutable>(resp: &mut Vec<u8>, v: &T) {
    resp.extend_from_slice(v.as_bytes());
}

/// GID table length of the (single) port: index 0 is the device's address.
pub(crate) const GID_TBL_LEN: u32 = 1;
/// P_Key table length: index 0 is the default P_Key (the transport's bound).
pub(crate) const PKEY_TBL_LEN: u16 = transport::ATTR_LIMITS.pkey_tbl_len;
/// Largest message (IBTA; the transport's limit).
const MAX_MSG_SZ: u32 = 1 << 31;

/// `IB_DEVICE_*` capability bits reported (ib_verbs.h): BAD_PKEY_CNTR, BAD_QKEY_CNTR,
/// CURR_QP_STATE_MOD, PORT_ACTIVE_EVENT, SYS_IMAGE_GUID, RC_RNR_NAK_GEN, MEM_WINDOW,
/// MEM_WINDOW_TYPE_2B (memory windows of both types, as rxe).
const DEVICE_CAP_FLAGS: u32 = 2 | 4 | 128 | 1024 | 2048 | 4096 | (1 << 17) | (1 << 24);
/// `IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS`.
const PORT_CAP_FLAGS: u32 = (1 << 16) | (1 << 26);

/// Where an address vector leads from a device at `dev_ip`, or why it leads nowhere.
fn dest_from(av: &AhAttr, dev_ip: IpAddr) -> Res<Dest> {
    let GlobalRoute {
        dgid,
        flow_label,
        sgid_index,
        hop_limit,
        traffic_class,
    } = av.grh;
    // RoCE needs a GRH (rxe: "no GRH") and our GID table has one entry.
    if !av.is_global {
        return Err(refuse!(
            EINVAL,
            BAD_ADDRESS,
            "is_global 0: RoCE needs a GRH"
        ));
    }
    if u32::from(sgid_index) >= GID_TBL_LEN {
        return Err(refuse!(
            EINVAL,
            BAD_INDEX,
            "sgid_index {sgid_index} >= gid_tbl_len {GID_TBL_LEN}"
        ));
    }
    // The flow label has 20 bits (IBTA 8.3.1; IPv6); the bits above are dropped, not refused,
    // as rdma-core's providers mask it (`IB_GRH_FLOWLABEL_MASK` in `providers/mlx5/verbs.c`)
    // and the kernel takes any value in an AV: UCX 1.13 passes `~0` to both create_ah and
    // modify_qp (docs/compat.md §11).
    let flow_label = flow_label & 0xF_FFFF;
    let ip = gid_to_ip(dgid.0);
    if ip.is_ipv4() != dev_ip.is_ipv4() || ip.is_unspecified() || ip.is_multicast() {
        return Err(refuse!(
            EINVAL,
            BAD_ADDRESS,
            "dgid {ip} unusable from device address {dev_ip} (family, unspecified or multicast)"
        ));
    }
    // No route between loopback and other addresses (the kernel refuses such a datagram
    // too: a loopback source never leaves the host).
    if ip.is_loopback() != dev_ip.is_loopback() {
        return Err(refuse!(
            EINVAL,
            BAD_ADDRESS,
            "no route between dgid {ip} and device address {dev_ip} (loopback vs not)"
        ));
    }
    Ok(Dest {
        ip,
        flow_label,
        traffic_class,
        hop_limit,
    })
}

/// The ring geometry of a descriptor, attached as shared memory.
fn attach_ring(
    space: dma::Space<'_>,
    desc: &RingDesc,
    what: &'static str,
) -> Res<(std::sync::Arc<abi::shm::SharedMem>, RingLayout)> {
    let layout = RingLayout::from_desc(desc).map_err(ring_refusal(what))?;
    let mem = dma::shared_region(space, desc.addr, layout.bytes()).map_err(shared_refusal(
        what,
        desc.addr,
        layout.bytes(),
    ))?;
    Ok((mem, layout))
}

/// Ring or doorbell memory `dma::shared_region` refused.
fn shared_refusal(what: &'static str, addr: u64, len: usize) -> impl Fn(Errno) -> Refusal {
    move |e| {
        if e == Errno::EFAULT {
            refuse!(
                EFAULT,
                NOT_MAPPED,
                "{what} [{addr:#x}, +{len}) is not mapped writable in the process"
            )
        } else {
            Refusal::new(
                e,
                Rule::BAD_RING,
                format!("{what} at {addr:#x} ({len} bytes) is misaligned or wraps"),
            )
        }
    }
}

/// A ring the library allocated for `want` entries (limit `max`), with elements of at least
/// `min_elem` bytes: enough slots, not more than the limit allows, elements big enough.
fn check_ring_fits(
    layout: &RingLayout,
    want: u32,
    max: u32,
    min_elem: u32,
    what: &'static str,
    field: &'static str,
) -> Res<()> {
    let slots = layout.slots();
    if slots < want {
        return Err(refuse!(
            EINVAL,
            BAD_RING,
            "{what} has {slots} slots < {field} {want}"
        ));
    }
    if slots > max.next_power_of_two() {
        return Err(refuse!(
            EINVAL,
            BAD_RING,
            "{what} has {slots} slots > limit {max} rounded to a power of two"
        ));
    }
    if layout.elem_size() < min_elem {
        return Err(refuse!(
            EINVAL,
            BAD_RING,
            "{what} elements of {} bytes < {min_elem}",
            layout.elem_size()
        ));
    }
    Ok(())
}

/// Whether executing this command checks application memory against the process's
/// mappings — registering an MR, attaching rings or the doorbell page — so the control
/// plane reads them before it takes the device lock (`dma::Maps`). Only the header is read
/// (the command is decoded once, under the lock). A slow-path inline POST_SEND still reads
/// the mappings under the lock: it is rare, and deciding would mean walking its work
/// requests twice.
pub(crate) fn checks_mappings(bytes: &[u8]) -> bool {
    use abi::cmd::Command;
    Frame::parse(bytes).is_ok_and(|f| {
        matches!(
            f.command,
            Command::GET_CONTEXT
                | Command::REG_MR
                | Command::CREATE_CQ
                | Command::RESIZE_CQ
                | Command::CREATE_QP
                | Command::CREATE_SRQ
                | Command::CREATE_XSRQ
        )
    })
}

/// Commands a dead device still serves: those that release objects (and polling, which
/// hands out the flushed completions), so a program can clean up.
fn releases(req: &Request<'_>) -> bool {
    match req {
        Request::Cm(c) => c.op == abi::uverbs::cm_op::DESTROY,
        r => matches!(
            r,
            Request::DeallocPd(_)
                | Request::DestroyAh(_)
                | Request::DeregMr(_)
                | Request::DestroyCq(_)
                | Request::PollCq(_)
                | Request::DestroyQp(_)
                | Request::DestroySrq(_)
                | Request::CloseXrcd(_)
                | Request::DeallocMw(_)
        ),
    }
}

impl DevState {
    /// Execute one framed command from context `ctx` and write the reply into `out`.
    /// Returns whether the engine has new work (the caller kicks it).
    pub(crate) fn execute(&mut self, ctx: CtxId, bytes: &[u8], out: &mut Vec<u8>) -> bool {
        let word = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
            .unwrap_or(0);
        let (frame, req) = match abi::decode_request(bytes) {
            Ok(v) => v,
            Err(e) => {
                let rule = if e.errno() == Errno::EOPNOTSUPP {
                    Rule::UNSUPPORTED
                } else {
                    Rule::MALFORMED
                };
                let text = format!("{}: {e}", verb(Command(word & abi::cmd::CMD_COMMAND_MASK)));
                encode_refusal(word, e.errno(), rule, &text, out);
                return false;
            }
        };
        let mut resp = Vec::new();
        let mut kick = false;
        let r = self.dispatch(ctx, &frame, &req, &mut resp, &mut kick);
        let cap = frame.response_capacity();
        match r {
            Ok(()) => encode_reply(word, Ok(&[&resp[..]]), cap, out),
            Err(e) if e.rule == Rule::UNSPECIFIED => encode_reply(word, Err(e.errno), cap, out),
            Err(e) => {
                let text = format!("{}: {}", verb(frame.command), e.detail);
                encode_refusal(word, e.errno, e.rule, &text, out);
            }
        }
        kick
    }

    fn dispatch(
        &mut self,
        ctx: CtxId,
        frame: &Frame<'_>,
        req: &Request<'_>,
        resp: &mut Vec<u8>,
        kick: &mut bool,
    ) -> Res<()> {
        if let Request::GetContext(_, d) = req {
            return self.get_context(ctx, d, resp);
        }
        // Before GET_CONTEXT only GET_CONTEXT is accepted (docs/abi.md §1).
        if !self.res.ctxs.contains_key(&ctx) {
            return Err(refuse!(
                EINVAL,
                NO_CONTEXT,
                "no GET_CONTEXT has succeeded on this channel"
            ));
        }
        if self.fatal() && !releases(req) {
            return Err(refuse!(
                EIO,
                DEVICE_FATAL,
                "the device is dead: its daemon went away (only destroying objects works)"
            ));
        }
        match req {
            Request::GetContext(..) => Err(refuse!(EINVAL, NO_CONTEXT, "context already exists")),
            Request::QueryDevice(_) => {
                push(resp, &self.query_device());
                Ok(())
            }
            Request::QueryPort(q) => {
                if q.port_num != 1 {
                    return Err(refuse!(
                        EINVAL,
                        BAD_PORT,
                        "port_num {} (the device has port 1)",
                        q.port_num
                    ));
                }
                push(resp, &self.query_port());
                Ok(())
            }
            Request::QueryGid(q) => self.query_gid(q, resp),
            Request::Cm(c) => {
                let r = self.cm_command(ctx, c, resp);
                *kick = true;
                r
            }
            Request::QueryPkey(q) => {
                if q.port_num != 1 {
                    return Err(refuse!(
                        EINVAL,
                        BAD_PORT,
                        "port_num {} (the device has port 1)",
                        q.port_num
                    ));
                }
                if q.index >= u32::from(PKEY_TBL_LEN) {
                    return Err(refuse!(
                        EINVAL,
                        BAD_INDEX,
                        "index {} >= pkey_tbl_len {PKEY_TBL_LEN}",
                        q.index
                    ));
                }
                push(
                    resp,
                    &QueryPkeyResp {
                        pkey: transport::wire::bth::DEFAULT_PKEY,
                        ..Default::default()
                    },
                );
                Ok(())
            }
            Request::AllocPd(_) => {
                let h = self
                    .res
                    .pds
                    .insert(Pd { ctx, users: 0 }, self.cfg.limits.max_pd)
                    .ok_or_else(|| {
                        refuse!(
                            ENOMEM,
                            EXHAUSTED,
                            "max_pd {} PDs exist",
                            self.cfg.limits.max_pd
                        )
                    })?;
                push(resp, &AllocPdResp { pd_handle: h });
                Ok(())
            }
            Request::DeallocPd(d) => {
                let pd = own(&self.res.pds, ctx, d.pd_handle, "pd_handle")?;
                if pd.users != 0 {
                    return Err(refuse!(
                        EBUSY,
                        IN_USE,
                        "pd_handle {} still has {} MRs, QPs, SRQs or AHs",
                        d.pd_handle,
                        pd.users
                    ));
                }
                self.res.pds.remove(d.pd_handle);
                Ok(())
            }
            Request::RegMr(r) => self.reg_mr(ctx, r, resp),
            Request::ReregMr(r) => self.rereg_mr(ctx, r, resp),
            Request::AllocMw(a) => self.alloc_mw(ctx, a, resp),
            Request::DeallocMw(d) => {
                let pd = own(self.res.mrs.mws(), ctx, d.mw_handle, "mw_handle")?.pd;
                self.res.mrs.remove_mw(d.mw_handle);
                self.pd_release(pd);
                Ok(())
            }
            Request::DeregMr(d) => {
                let mr = own(&self.res.mrs, ctx, d.mr_handle, "mr_handle")?;
                let pd = mr.pd;
                if self.res.mrs.mr_has_windows(mr.key) {
                    return Err(refuse!(
                        EBUSY,
                        IN_USE,
                        "mr_handle {} has memory windows bound to it",
                        d.mr_handle
                    ));
                }
                self.res.mrs.remove(d.mr_handle);
                self.pd_release(pd);
                Ok(())
            }
            Request::CreateCompChannel(_) => self.create_comp_channel(ctx, resp),
            Request::CreateCq(c, d) => self.create_cq(ctx, c, d, resp),
            Request::ResizeCq(c, d) => self.resize_cq(ctx, c, d, resp),
            Request::DestroyCq(d) => {
                let cq = own(&self.res.cqs, ctx, d.cq_handle, "cq_handle")?;
                if cq.users != 0 {
                    return Err(refuse!(
                        EBUSY,
                        IN_USE,
                        "cq_handle {} is still the CQ of {} QPs",
                        d.cq_handle,
                        cq.users
                    ));
                }
                let r = DestroyCqResp {
                    comp_events_reported: cq.comp_events,
                    async_events_reported: cq.async_events,
                };
                if let Some(cq) = self.res.cqs.remove(d.cq_handle) {
                    if let Some(ch) = cq.chan.and_then(|c| self.res.chans.get_mut(c)) {
                        ch.users = ch.users.saturating_sub(1);
                    }
                }
                push(resp, &r);
                Ok(())
            }
            Request::PollCq(p) => self.poll_cq(ctx, p, frame.response_capacity(), resp),
            Request::ReqNotifyCq(r) => {
                let cq = own_mut(&mut self.res.cqs, ctx, r.cq_handle, "cq_handle")?;
                cq.arm = match (cq.arm, r.solicited_only != 0) {
                    (_, false) | (Arm::Next, true) => Arm::Next,
                    (_, true) => Arm::Solicited,
                };
                Ok(())
            }
            Request::CreateQp(c, d) => self.create_qp(ctx, c, d, resp),
            Request::QueryQp(q) => self.query_qp(ctx, q, resp),
            Request::ModifyQp(m) => {
                self.publish_peer_rings();
                self.modify_qp(ctx, m)?;
                *kick = true;
                Ok(())
            }
            Request::DestroyQp(d) => {
                own(&self.qps, ctx, d.qp_handle, "qp_handle")?;
                self.publish_peer_rings();
                let ev = self.destroy_qp(d.qp_handle);
                push(
                    resp,
                    &DestroyQpResp {
                        events_reported: ev,
                    },
                );
                Ok(())
            }
            Request::PostSend(c, list) => {
                self.post_send(ctx, c, list)?;
                *kick = true;
                push(resp, &PostResp { bad_wr: 0 });
                Ok(())
            }
            Request::PostRecv(c, list) => {
                *kick = self.post_recv(ctx, c, list)?;
                push(resp, &PostResp { bad_wr: 0 });
                Ok(())
            }
            Request::PostSrqRecv(c, list) => {
                self.post_srq_recv(ctx, c, list)?;
                push(resp, &PostResp { bad_wr: 0 });
                Ok(())
            }
            Request::CreateAh(c) => {
                own(&self.res.pds, ctx, c.pd_handle, "pd_handle")?;
                let a = &c.attr;
                if a.port_num != 1 {
                    return Err(refuse!(
                        EINVAL,
                        BAD_PORT,
                        "port_num {} (the device has port 1)",
                        a.port_num
                    ));
                }
                let dest = dest_from(&AhAttr::from(a), self.dev_ip())?;
                let h = self
                    .res
                    .ahs
                    .insert(
                        Ah {
                            ctx,
                            pd: c.pd_handle,
                            dest,
                        },
                        self.cfg.limits.max_ah,
                    )
                    .ok_or_else(|| {
                        refuse!(
                            ENOMEM,
                            EXHAUSTED,
                            "max_ah {} AHs exist",
                            self.cfg.limits.max_ah
                        )
                    })?;
                self.pd_use(c.pd_handle);
                push(resp, &CreateAhResp { ah_handle: h });
                Ok(())
            }
            Request::DestroyAh(d) => {
                let pd = own(&self.res.ahs, ctx, d.ah_handle, "ah_handle")?.pd;
                self.res.ahs.remove(d.ah_handle);
                self.pd_release(pd);
                Ok(())
            }
            Request::CreateSrq(c, d) => self.create_srq(ctx, c, d, None, resp),
            Request::OpenXrcd(c, d) => self.open_xrcd(ctx, c, d, resp),
            Request::CloseXrcd(c) => self.close_xrcd(ctx, c),
            Request::CreateXsrq(c, d) => self.create_xsrq(ctx, c, d, resp),
            Request::ModifySrq(m) => {
                let srq = own_mut(&mut self.res.srqs, ctx, m.srq_handle, "srq_handle")?;
                let mask = SrqAttrMask(m.attr_mask);
                if mask.0 & !(SrqAttrMask::MAX_WR.0 | SrqAttrMask::LIMIT.0) != 0 {
                    return Err(refuse!(
                        EINVAL,
                        BAD_FLAGS,
                        "attr_mask {:#x} has bits other than MAX_WR and LIMIT",
                        mask.0
                    ));
                }
                if mask.0 & SrqAttrMask::MAX_WR.0 != 0 {
                    return Err(refuse!(
                        EOPNOTSUPP,
                        UNSUPPORTED,
                        "resizing an SRQ (IBV_SRQ_MAX_WR) is not supported"
                    ));
                }
                if mask.0 & SrqAttrMask::LIMIT.0 != 0 {
                    if m.srq_limit > srq.rq.layout.slots() {
                        return Err(refuse!(
                            EINVAL,
                            OVER_LIMIT,
                            "srq_limit {} > max_wr {}",
                            m.srq_limit,
                            srq.rq.layout.slots()
                        ));
                    }
                    srq.limit = m.srq_limit;
                }
                Ok(())
            }
            Request::QuerySrq(q) => {
                let srq = own(&self.res.srqs, ctx, q.srq_handle, "srq_handle")?;
                push(
                    resp,
                    &QuerySrqResp {
                        max_wr: srq.rq.layout.slots(),
                        max_sge: srq.rq.max_sge,
                        srq_limit: srq.limit,
                        reserved: 0,
                    },
                );
                Ok(())
            }
            Request::DestroySrq(d) => {
                let srq = own(&self.res.srqs, ctx, d.srq_handle, "srq_handle")?;
                if srq.users != 0 {
                    return Err(refuse!(
                        EBUSY,
                        IN_USE,
                        "srq_handle {} is still the SRQ of {} QPs",
                        d.srq_handle,
                        srq.users
                    ));
                }
                let r = DestroySrqResp {
                    events_reported: srq.events,
                };
                let pd = srq.pd;
                let xrc = srq.xrc;
                self.res.srqs.remove(d.srq_handle);
                self.pd_release(pd);
                if let Some(x) = xrc {
                    self.xrcd_use(x.xrcd, -1);
                    self.cq_use(x.cq, -1);
                }
                push(resp, &r);
                Ok(())
            }
        }
    }

    fn pd_use(&mut self, pd: u32) {
        if let Some(p) = self.res.pds.get_mut(pd) {
            p.users += 1;
        }
    }

    fn pd_release(&mut self, pd: u32) {
        if let Some(p) = self.res.pds.get_mut(pd) {
            p.users = p.users.saturating_sub(1);
        }
    }

    fn xrcd_use(&mut self, xrcd: u32, delta: i32) {
        if let Some(x) = self.res.xrcds.get_mut(xrcd) {
            x.users = x.users.saturating_add_signed(delta);
        }
    }

    // -----------------------------------------------------------------------------------
    // XRC (IBTA XRC annex): domains and XRC SRQs

    /// OPEN_XRCD as the kernel's `ib_uverbs_open_xrcd`: `fd` −1 makes a new anonymous
    /// domain; a file (its device and inode in the driver data) names a shared one, made
    /// if absent only with `O_CREAT`, refused if present with `O_EXCL` (EINVAL both).
    fn open_xrcd(
        &mut self,
        ctx: CtxId,
        c: &OpenXrcd,
        d: &UroceOpenXrcd,
        resp: &mut Vec<u8>,
    ) -> Res<()> {
        const O_CREAT: u32 = 0o100;
        const O_EXCL: u32 = 0o200;
        let file = if c.fd == u32::MAX {
            if d.dev != 0 || d.ino != 0 {
                return Err(refuse!(
                    EINVAL,
                    BAD_VALUE,
                    "fd -1 (an anonymous domain) with a file identity in the driver data"
                ));
            }
            None
        } else {
            if d.ino == 0 {
                return Err(refuse!(
                    EBADF,
                    BAD_VALUE,
                    "fd {} names no file (no inode in the driver data)",
                    c.fd
                ));
            }
            Some((d.dev, d.ino))
        };
        let existing = file.and_then(|f| {
            self.res
                .xrcds
                .indices_where(|x| x.file == Some(f))
                .first()
                .and_then(|&i| self.res.xrcds.get(i))
                .map(|x| x.domain)
        });
        if existing.is_some() && c.oflags & O_EXCL != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_FLAGS,
                "the file's XRC domain exists and oflags has O_EXCL"
            ));
        }
        if existing.is_none() && file.is_some() && c.oflags & O_CREAT == 0 {
            return Err(refuse!(
                EINVAL,
                BAD_FLAGS,
                "the file has no XRC domain and oflags lacks O_CREAT"
            ));
        }
        let domain = match existing {
            Some(d) => d,
            None => {
                let d = self.res.next_xrc_domain;
                self.res.next_xrc_domain = d.wrapping_add(1).max(1);
                d
            }
        };
        let max = self.cfg.limits.max_pd;
        let h = self
            .res
            .xrcds
            .insert(
                Xrcd {
                    ctx,
                    domain,
                    file,
                    users: 0,
                },
                max,
            )
            .ok_or_else(|| refuse!(ENOMEM, EXHAUSTED, "{max} XRC domains are open"))?;
        push(resp, &OpenXrcdResp { xrcd_handle: h });
        Ok(())
    }

    /// CLOSE_XRCD: EBUSY while XRC SRQs or XRC target QPs of this handle exist (the
    /// kernel's `ib_dealloc_xrcd_user`).
    fn close_xrcd(&mut self, ctx: CtxId, c: &CloseXrcd) -> Res<()> {
        let x = own(&self.res.xrcds, ctx, c.xrcd_handle, "xrcd_handle")?;
        if x.users != 0 {
            return Err(refuse!(
                EBUSY,
                IN_USE,
                "xrcd_handle {} still has {} XRC SRQs and target QPs",
                c.xrcd_handle,
                x.users
            ));
        }
        self.res.xrcds.remove(c.xrcd_handle);
        Ok(())
    }

    /// CREATE_XSRQ: a basic SRQ, or an XRC SRQ of a domain with the CQ its receives
    /// complete to; tag matching is not offered (EOPNOTSUPP, as rxe), other types EINVAL.
    fn create_xsrq(
        &mut self,
        ctx: CtxId,
        c: &CreateXsrq,
        d: &UroceCreateSrq,
        resp: &mut Vec<u8>,
    ) -> Res<()> {
        let core = CreateSrq {
            response: 0,
            user_handle: c.user_handle,
            pd_handle: c.pd_handle,
            max_wr: c.max_wr,
            max_sge: c.max_sge,
            srq_limit: c.srq_limit,
        };
        let xrc = match c.srq_type {
            SRQT_BASIC => None,
            SRQT_XRC => {
                let domain = own(&self.res.xrcds, ctx, c.xrcd_handle, "xrcd_handle")?.domain;
                own(&self.res.cqs, ctx, c.cq_handle, "cq_handle")?;
                Some(SrqXrc {
                    xrcd: c.xrcd_handle,
                    domain,
                    cq: c.cq_handle,
                })
            }
            SRQT_TM => {
                return Err(refuse!(
                    EOPNOTSUPP,
                    UNSUPPORTED,
                    "tag-matching SRQs are not supported"
                ))
            }
            t => return Err(refuse!(EINVAL, BAD_VALUE, "srq_type {t} is unknown")),
        };
        self.create_srq(ctx, &core, d, xrc, resp)?;
        if let Some(x) = xrc {
            self.xrcd_use(x.xrcd, 1);
            self.cq_use(x.cq, 1);
        }
        Ok(())
    }

    fn cq_use(&mut self, cq: u32, delta: i32) {
        if let Some(c) = self.res.cqs.get_mut(cq) {
            c.users = c.users.saturating_add_signed(delta);
        }
    }

    // -----------------------------------------------------------------------------------
    // Context, device, port

    fn get_context(&mut self, ctx: CtxId, d: &UroceGetContext, resp: &mut Vec<u8>) -> Res<()> {
        if self.res.ctxs.contains_key(&ctx) {
            return Err(refuse!(EINVAL, NO_CONTEXT, "context already exists"));
        }
        if d.abi_version != UROCE_ABI_VERSION {
            return Err(refuse!(
                EINVAL,
                ABI_VERSION,
                "library ABI version {} != device's {UROCE_ABI_VERSION}",
                d.abi_version
            ));
        }
        if self.res.ctxs.len() >= self.cfg.limits.max_contexts as usize {
            return Err(refuse!(
                ENOMEM,
                EXHAUSTED,
                "max_contexts {} contexts are open",
                self.cfg.limits.max_contexts
            ));
        }
        let layout =
            DoorbellLayout::new(d.doorbell_slots).map_err(ring_refusal("doorbell page"))?;
        if d.doorbell_len < layout.bytes() as u64 {
            return Err(refuse!(
                EINVAL,
                BAD_RING,
                "doorbell_len {} < {} bytes for {} slots",
                d.doorbell_len,
                layout.bytes(),
                d.doorbell_slots
            ));
        }
        let mem = dma::shared_region(self.mem_space(), d.doorbell_addr, layout.bytes()).map_err(
            shared_refusal("doorbell page", d.doorbell_addr, layout.bytes()),
        )?;
        let doorbells =
            DoorbellReceiver::attach(mem, 0, layout).map_err(ring_refusal("doorbell page"))?;
        let (lib_async, our_async) = sys::seqpacket_pair()
            .map_err(|e| refuse!(ENOMEM, SYSTEM, "async event socketpair: {e}"))?;
        let wake = self
            .engine
            .wake_fd()
            .try_clone_to_owned()
            .map_err(|e| refuse!(ENOMEM, SYSTEM, "duplicating the wake fd: {e}"))?;
        self.res.ctxs.insert(
            ctx,
            Context {
                doorbells,
                db_slots: vec![None; layout.slots() as usize],
                async_tx: our_async,
                channels: 0,
            },
        );
        // From here the library owns these two descriptors (it closes them, as
        // ibv_close_device closes the async fd).
        let async_fd = lib_async.into_raw_fd();
        let wake_fd = wake.into_raw_fd();
        push(
            resp,
            &GetContextResp {
                async_fd: async_fd as u32,
                num_comp_vectors: 1,
            },
        );
        push(
            resp,
            &UroceGetContextResp {
                abi_version: UROCE_ABI_VERSION,
                max_inline_data: self.cfg.limits.max_inline_data,
                wake_fd,
                reserved: 0,
            },
        );
        Ok(())
    }

    /// QUERY_DEVICE, modelled on rxe (`rxe_param.h`; docs/abi.md §10).
    pub(crate) fn query_device(&self) -> QueryDeviceResp {
        let l = &self.cfg.limits;
        let guid = abi::provider::node_guid(self.dev_ip());
        QueryDeviceResp {
            fw_ver: 0,
            node_guid: zerocopy::byteorder::big_endian::U64::new(guid),
            sys_image_guid: zerocopy::byteorder::big_endian::U64::new(guid),
            max_mr_size: u64::MAX,
            page_size_cap: 0xffff_f000,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: l.max_qp,
            max_qp_wr: l.max_qp_wr,
            device_cap_flags: DEVICE_CAP_FLAGS,
            max_sge: l.max_sge,
            max_sge_rd: l.max_sge,
            max_cq: l.max_cq,
            max_cqe: l.max_cqe,
            max_mr: l.max_mr,
            max_pd: l.max_pd,
            max_qp_rd_atom: l.max_qp_rd_atom,
            max_ee_rd_atom: 0,
            max_res_rd_atom: l.max_qp_rd_atom.saturating_mul(l.max_qp.min(0x3f00)),
            max_qp_init_rd_atom: l.max_qp_rd_atom,
            max_ee_init_rd_atom: 0,
            atomic_cap: abi::AtomicCap::HCA.0,
            max_ee: 0,
            max_rdd: 0,
            max_mw: self.cfg.limits.max_mr,
            max_raw_ipv6_qp: 0,
            max_raw_ethy_qp: 0,
            max_mcast_grp: 0,
            max_mcast_qp_attach: 0,
            max_total_mcast_qp_attach: 0,
            max_ah: l.max_ah,
            max_fmr: 0,
            max_map_per_fmr: 0,
            max_srq: l.max_srq,
            max_srq_wr: l.max_srq_wr,
            max_srq_sge: l.max_srq_sge,
            max_pkeys: PKEY_TBL_LEN,
            local_ca_ack_delay: 15,
            phys_port_cnt: 1,
            reserved: [0; 4],
        }
    }

    /// QUERY_PORT of port 1: ACTIVE, Ethernet link layer, the configured active MTU.
    pub(crate) fn query_port(&self) -> QueryPortResp {
        QueryPortResp {
            port_cap_flags: PORT_CAP_FLAGS,
            max_msg_sz: MAX_MSG_SZ,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            gid_tbl_len: GID_TBL_LEN,
            pkey_tbl_len: PKEY_TBL_LEN,
            lid: 0,
            sm_lid: 0,
            state: PortState::ACTIVE.0 as u8,
            max_mtu: Mtu::Mtu4096 as u8,
            active_mtu: self.cfg.mtu().unwrap_or(Mtu::Mtu1024) as u8,
            lmc: 0,
            max_vl_num: 1,
            sm_sl: 0,
            subnet_timeout: 0,
            init_type_reply: 0,
            active_width: 2,  // 4X
            active_speed: 32, // EDR: reported as 100 Gb/s, like a fast rxe netdev
            phys_state: 5,    // LinkUp
            link_layer: LinkLayer::ETHERNET.0,
            flags: 0,
            reserved: 0,
        }
    }

    fn query_gid(&self, q: &QueryGid, resp: &mut Vec<u8>) -> Res<()> {
        if q.port_num != 1 {
            return Err(refuse!(
                EINVAL,
                BAD_PORT,
                "port_num {} (the device has port 1)",
                q.port_num
            ));
        }
        if q.index >= GID_TBL_LEN {
            return Err(refuse!(
                EINVAL,
                BAD_INDEX,
                "index {} >= gid_tbl_len {GID_TBL_LEN}",
                q.index
            ));
        }
        push(
            resp,
            &QueryGidResp {
                gid: ip_to_gid(self.dev_ip()),
                gid_type: GidType::ROCE_V2.0,
                flags: QueryGidResp::FLAG_VALID,
            },
        );
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // MR, completion channel, CQ

    /// The access flags REG_MR and REREG_MR accept, optional bits dropped
    /// (`ib_check_mr_access`).
    pub(crate) fn mr_access(access_flags: u32) -> Res<u32> {
        // Optional bits may be ignored (IBV_ACCESS_OPTIONAL_RANGE; perftest sets RELAXED_ORDERING).
        let acc = access_flags & !AccessFlags::OPTIONAL_RANGE.0;
        let supported = AccessFlags::LOCAL_WRITE.0
            | AccessFlags::REMOTE_WRITE.0
            | AccessFlags::REMOTE_READ.0
            | AccessFlags::REMOTE_ATOMIC.0
            | AccessFlags::MW_BIND.0;
        if acc & !supported != 0 {
            // LOCAL_WRITE ..= FLUSH_PERSISTENT (docs/wire.md §7.3).
            let known = (1u32 << 10) - 1;
            return Err(if acc & !known == 0 {
                refuse!(
                    EOPNOTSUPP,
                    UNSUPPORTED,
                    "access_flags {:#x}: unsupported bits {:#x}",
                    acc,
                    acc & !supported
                )
            } else {
                refuse!(
                    EINVAL,
                    BAD_FLAGS,
                    "access_flags {:#x}: unknown bits {:#x}",
                    acc,
                    acc & !known
                )
            });
        }
        // ib_check_mr_access: remote write or atomic requires local write.
        let remote_w = AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0;
        if acc & remote_w != 0 && acc & AccessFlags::LOCAL_WRITE.0 == 0 {
            return Err(refuse!(
                EINVAL,
                BAD_FLAGS,
                "access_flags {acc:#x}: REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE"
            ));
        }
        Ok(acc)
    }

    /// Check an MR's translation (`start`, `length`, `hca_va`) and find its memory, writable
    /// if `acc` lets the device write it.
    fn mr_range(&self, start: u64, length: u64, hca_va: u64, acc: u32) -> Res<dma::UserRange> {
        // ib_uverbs_reg_mr: start and iova must share their offset within a page.
        if (start ^ hca_va) & 0xfff != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_RANGE,
                "start {:#x} and hca_va {:#x} differ in their offset within a page",
                start,
                hca_va
            ));
        }
        if length == 0 {
            return Err(refuse!(EINVAL, BAD_RANGE, "length 0"));
        }
        hca_va.checked_add(length).ok_or_else(|| {
            refuse!(
                EINVAL,
                BAD_RANGE,
                "hca_va {:#x} + length {} wraps",
                hca_va,
                length
            )
        })?;
        let write = acc
            & (AccessFlags::LOCAL_WRITE.0
                | AccessFlags::REMOTE_WRITE.0
                | AccessFlags::REMOTE_ATOMIC.0)
            != 0;
        dma::user_range(self.mem_space(), start, length, write)
            .map_err(mem_refusal("range", start, length, write))
    }

    fn reg_mr(&mut self, ctx: CtxId, r: &RegMr, resp: &mut Vec<u8>) -> Res<()> {
        own(&self.res.pds, ctx, r.pd_handle, "pd_handle")?;
        let acc = Self::mr_access(r.access_flags)?;
        let range = self.mr_range(r.start, r.length, r.hca_va, acc)?;
        // Unpredictable and unique among the device's keys (`crate::keys`); lkey == rkey
        // as in rxe.
        let mrs = &self.res.mrs;
        let key = self.keygen.draw(self.hermetic, |k| mrs.key_taken(k));
        let idx = self
            .res
            .mrs
            .insert(
                Mr {
                    ctx,
                    pd: r.pd_handle,
                    key,
                    start: r.start,
                    iova: r.hca_va,
                    length: r.length,
                    access: acc,
                    range,
                },
                self.cfg.limits.max_mr.min((1 << 24) - 1),
            )
            .ok_or_else(|| {
                refuse!(
                    ENOMEM,
                    EXHAUSTED,
                    "max_mr {} MRs exist",
                    self.cfg.limits.max_mr
                )
            })?;
        self.pd_use(r.pd_handle);
        push(
            resp,
            &RegMrResp {
                mr_handle: idx,
                lkey: key,
                rkey: key,
            },
        );
        Ok(())
    }

    /// ALLOC_MW (kernel `ib_uverbs_alloc_mw`): a window of type 1 or 2 in a PD, unbound,
    /// with an R_Key whose 24 index bits are random and unique on the device
    /// (`crate::keys`) and whose 8-bit key is 0.
    fn alloc_mw(&mut self, ctx: CtxId, a: &AllocMw, resp: &mut Vec<u8>) -> Res<()> {
        own(&self.res.pds, ctx, a.pd_handle, "pd_handle")?;
        if a.mw_type != 1 && a.mw_type != 2 {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "mw_type {}: only 1 and 2 exist",
                a.mw_type
            ));
        }
        if a.reserved != [0; 3] {
            return Err(refuse!(EINVAL, BAD_VALUE, "reserved bytes not zero"));
        }
        let mrs = &self.res.mrs;
        let rkey = self.keygen.draw(self.hermetic, |k| mrs.mw_key_taken(k)) & !0xff;
        let mw = crate::keys::Mw {
            ctx,
            pd: a.pd_handle,
            ty: a.mw_type,
            rkey: std::cell::Cell::new(rkey),
            binding: std::cell::Cell::new(None),
        };
        let h = self
            .res
            .mrs
            .insert_mw(mw, self.cfg.limits.max_mr)
            .ok_or_else(|| {
                refuse!(
                    ENOMEM,
                    EXHAUSTED,
                    "max_mw {} windows exist",
                    self.cfg.limits.max_mr
                )
            })?;
        self.pd_use(a.pd_handle);
        push(resp, &AllocMwResp { mw_handle: h, rkey });
        Ok(())
    }

    /// REREG_MR (kernel `ib_uverbs_rereg_mr`): everything is checked before anything
    /// changes, so a refused command leaves the MR as it was. The handle and keys stay
    /// (as rxe's `rxe_rereg_user_mr`): peers holding the rkey keep reaching the region,
    /// now with its new translation, PD and access.
    fn rereg_mr(&mut self, ctx: CtxId, r: &ReregMr, resp: &mut Vec<u8>) -> Res<()> {
        let all = ReregMr::CHANGE_TRANSLATION | ReregMr::CHANGE_PD | ReregMr::CHANGE_ACCESS;
        let mr = own(&self.res.mrs, ctx, r.mr_handle, "mr_handle")?;
        if r.flags == 0 {
            return Err(refuse!(EINVAL, BAD_FLAGS, "flags 0: nothing to change"));
        }
        if r.flags & !all != 0 {
            return Err(refuse!(
                EOPNOTSUPP,
                UNSUPPORTED,
                "flags {:#x}: unknown bits {:#x}",
                r.flags,
                r.flags & !all
            ));
        }
        let (old_pd, key) = (mr.pd, mr.key);
        if self.res.mrs.mr_has_windows(key) {
            // A bound window's range, PD and access were checked against the MR as it was.
            return Err(refuse!(
                EBUSY,
                IN_USE,
                "mr_handle {} has memory windows bound to it",
                r.mr_handle
            ));
        }
        let (mut start, mut length, mut iova) = (mr.start, mr.length, mr.iova);
        let mut acc = mr.access;
        let mut pd = mr.pd;
        if r.flags & ReregMr::CHANGE_PD != 0 {
            own(&self.res.pds, ctx, r.pd_handle, "pd_handle")?;
            pd = r.pd_handle;
        }
        if r.flags & ReregMr::CHANGE_ACCESS != 0 {
            acc = Self::mr_access(r.access_flags)?;
        }
        if r.flags & ReregMr::CHANGE_TRANSLATION != 0 {
            if r.start == 0 || r.hca_va == 0 {
                return Err(refuse!(
                    EINVAL,
                    BAD_RANGE,
                    "new start {:#x} or hca_va {:#x} is 0",
                    r.start,
                    r.hca_va
                ));
            }
            (start, length, iova) = (r.start, r.length, r.hca_va);
        }
        // A new translation, or access that may add writes, is looked up again.
        let range = if r.flags & (ReregMr::CHANGE_TRANSLATION | ReregMr::CHANGE_ACCESS) != 0 {
            Some(self.mr_range(start, length, iova, acc)?)
        } else {
            None
        };
        let Some(m) = self.res.mrs.get_mut(r.mr_handle) else {
            return Err(bad_handle("mr_handle", r.mr_handle));
        };
        m.pd = pd;
        m.access = acc;
        (m.start, m.length, m.iova) = (start, length, iova);
        if let Some(range) = range {
            m.range = range;
        }
        if pd != old_pd {
            self.pd_use(pd);
            self.pd_release(old_pd);
        }
        push(
            resp,
            &ReregMrResp {
                lkey: key,
                rkey: key,
            },
        );
        Ok(())
    }

    fn create_comp_channel(&mut self, ctx: CtxId, resp: &mut Vec<u8>) -> Res<()> {
        let c = self
            .res
            .ctxs
            .get_mut(&ctx)
            .ok_or_else(|| refuse!(EINVAL, NO_CONTEXT, "no context"))?;
        if c.channels >= self.cfg.limits.max_comp_channels {
            return Err(refuse!(
                ENOMEM,
                EXHAUSTED,
                "max_comp_channels {} channels exist",
                self.cfg.limits.max_comp_channels
            ));
        }
        let (lib, ours) = sys::seqpacket_pair()
            .map_err(|e| refuse!(ENOMEM, SYSTEM, "completion channel socketpair: {e}"))?;
        let lib_fd = lib.into_raw_fd();
        // The library closed any older channel that had this fd number.
        for (_, ch) in self.res.chans.iter_mut_all() {
            if ch.ctx == ctx && ch.lib_fd == lib_fd {
                ch.lib_fd = -1;
            }
        }
        let h = self
            .res
            .chans
            .insert(
                Chan {
                    ctx,
                    tx: ours,
                    lib_fd,
                    users: 0,
                },
                u32::MAX,
            )
            .ok_or_else(|| refuse!(ENOMEM, EXHAUSTED, "no room for another channel"))?;
        let _ = h;
        if let Some(c) = self.res.ctxs.get_mut(&ctx) {
            c.channels += 1;
        }
        push(resp, &CreateCompChannelResp { fd: lib_fd as u32 });
        Ok(())
    }

    fn create_cq(
        &mut self,
        ctx: CtxId,
        c: &CreateCq,
        d: &UroceCreateCq,
        resp: &mut Vec<u8>,
    ) -> Res<()> {
        if d.flags & !UroceCreateCq::WALLCLOCK != 0 || d.reserved != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_FLAGS,
                "uroce_create_cq flags {:#x} / reserved {}: only WALLCLOCK is defined",
                d.flags,
                d.reserved
            ));
        }
        let l = &self.cfg.limits;
        if c.cqe == 0 || c.cqe > l.max_cqe {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "cqe {} not in 1..=max_cqe {}",
                c.cqe,
                l.max_cqe
            ));
        }
        if c.comp_vector != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "comp_vector {} >= num_comp_vectors 1",
                c.comp_vector
            ));
        }
        let chan = if c.comp_channel == -1 {
            None
        } else {
            let fd = c.comp_channel;
            let found = self
                .res
                .chans
                .iter()
                .find(|(_, ch)| ch.ctx == ctx && ch.lib_fd == fd && fd >= 0)
                .map(|(i, _)| i);
            Some(found.ok_or_else(|| {
                refuse!(
                    EBADF,
                    BAD_HANDLE,
                    "comp_channel fd {fd} is no completion channel of this context"
                )
            })?)
        };
        let (mem, layout) = attach_ring(self.mem_space(), &d.ring, "cq ring")?;
        check_ring_fits(&layout, c.cqe, l.max_cqe, CQE_BYTES, "cq ring", "cqe")?;
        let ring = Producer::attach(mem.clone(), 0, layout).map_err(ring_refusal("cq ring"))?;
        let h = self
            .res
            .cqs
            .insert(
                Cq {
                    ctx,
                    user_handle: c.user_handle,
                    mem,
                    layout,
                    ring,
                    chan,
                    arm: Arm::Off,
                    users: 0,
                    comp_events: 0,
                    async_events: 0,
                    overflowed: false,
                    wallclock: d.flags & UroceCreateCq::WALLCLOCK != 0,
                    lost_cqes: 0,
                    watched: false,
                },
                self.cfg.limits.max_cq,
            )
            .ok_or_else(|| {
                refuse!(
                    ENOMEM,
                    EXHAUSTED,
                    "max_cq {} CQs exist",
                    self.cfg.limits.max_cq
                )
            })?;
        if let Some(ch) = chan.and_then(|c| self.res.chans.get_mut(c)) {
            ch.users += 1;
        }
        push(
            resp,
            &CreateCqResp {
                cq_handle: h,
                cqe: layout.slots(),
            },
        );
        Ok(())
    }

    fn resize_cq(
        &mut self,
        ctx: CtxId,
        c: &ResizeCq,
        d: &UroceResizeCq,
        resp: &mut Vec<u8>,
    ) -> Res<()> {
        let max = self.cfg.limits.max_cqe;
        own(&self.res.cqs, ctx, c.cq_handle, "cq_handle")?;
        let in_flight = self.signaled_in_flight(c.cq_handle)?;
        let cq = own_mut(&mut self.res.cqs, ctx, c.cq_handle, "cq_handle")?;
        if c.cqe == 0 || c.cqe > max {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "cqe {} not in 1..=max_cqe {max}",
                c.cqe
            ));
        }
        let space = dma::Space::new(self.space, self.maps.as_ref());
        let (mem, layout) = attach_ring(space, &d.ring, "new cq ring")?;
        check_ring_fits(&layout, c.cqe, max, CQE_BYTES, "new cq ring", "cqe")?;
        let rr = ring_refusal("cq ring");
        let mut old = Consumer::attach(cq.mem.clone(), 0, cq.layout).map_err(&rr)?;
        let pending = old.available().map_err(&rr)?;
        // Never fewer slots than completions the CQ still owes the application: the CQEs not
        // yet polled plus one for each signaled send WQE still in flight (rxe refuses only
        // the first part, `rxe_cq_chk_attr`; a shrink right after posting would otherwise
        // overrun the new ring and lose completions). Posted receives are not counted: they
        // complete only when a message arrives, as with any CQ sized by the application.
        if pending.saturating_add(in_flight) > layout.slots() {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "{pending} unpolled completions and {in_flight} signaled sends in flight do not fit {} slots",
                layout.slots()
            ));
        }
        let mut new = Producer::attach(mem.clone(), 0, layout).map_err(&rr)?;
        if new.free().map_err(&rr)? < layout.slots() {
            // The new ring must start empty.
            return Err(refuse!(EINVAL, BAD_RING, "new cq ring is not empty"));
        }
        for i in 0..pending {
            let cqe: Cqe = old.read_struct(i).map_err(&rr)?;
            new.stage_struct(&cqe).map_err(&rr)?;
        }
        new.publish().map_err(&rr)?;
        old.release(pending).map_err(&rr)?;
        cq.mem = mem;
        cq.layout = layout;
        cq.ring = new;
        cq.overflowed = false;
        push(
            resp,
            &ResizeCqResp {
                cqe: layout.slots(),
                reserved: 0,
            },
        );
        Ok(())
    }

    /// Send WQEs posted to QPs whose send CQ is `cq` that will complete into it: every
    /// posted, not yet completed WQE that is signaled (or of a `sq_sig_all` QP), and any
    /// the engine could not parse (a bad WQE always completes). A WQE leaves its ring only
    /// once its completion is written or it is known to need none.
    fn signaled_in_flight(&mut self, cq: u32) -> Res<u32> {
        let mut n = 0u32;
        let rr = ring_refusal("sq ring");
        for (_, q) in self.qps.iter_mut_all().filter(|(_, q)| q.send_cq == cq) {
            let posted = q.sq.available().map_err(&rr)?;
            for i in 0..posted {
                let signaled = q.sq_sig_all
                    || q.sq
                        .read_struct::<SendWqe>(i)
                        .map_or(true, |w| w.send_flags & SendFlags::SIGNALED.0 != 0);
                n = n.saturating_add(u32::from(signaled));
            }
        }
        Ok(n)
    }

    /// POLL_CQ: consume CQEs from the ring on the library's behalf (its consumer index in
    /// shared memory advances; a library mixing this with ring polling re-reads it).
    fn poll_cq(&mut self, ctx: CtxId, p: &PollCq, capacity: usize, resp: &mut Vec<u8>) -> Res<()> {
        let cq = own(&self.res.cqs, ctx, p.cq_handle, "cq_handle")?;
        let rr = ring_refusal("cq ring");
        let mut cons = Consumer::attach(cq.mem.clone(), 0, cq.layout).map_err(&rr)?;
        let avail = cons.available().map_err(&rr)?;
        let n = avail.min(p.max_entries(capacity));
        let mut wcs = Vec::with_capacity(n as usize);
        for i in 0..n {
            let cqe: Cqe = cons.read_struct(i).map_err(&rr)?;
            wcs.push(cqe.wc);
        }
        cons.release(n).map_err(&rr)?;
        encode_poll_cq_resp(&wcs, resp);
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // QP

    fn create_qp(
        &mut self,
        ctx: CtxId,
        c: &CreateQp,
        d: &UroceCreateQp,
        resp: &mut Vec<u8>,
    ) -> Res<()> {
        let l = self.cfg.limits;
        let Some(qp_type) = c.qp_type() else {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "qp_type {} is unknown",
                c.qp_type
            ));
        };
        let Some((ty, role)) = Service::of(qp_type) else {
            return Err(refuse!(
                EOPNOTSUPP,
                UNSUPPORTED,
                "qp_type {qp_type} is not supported (RC, UC, UD and XRC are)"
            ));
        };
        // XRC (IBTA XRC annex): an initiator is an RC send queue; a target has no queues,
        // its `pd_handle` names an XRCD (the kernel's `create_qp`).
        let xrc = match role {
            Some(transport::XrcRole::Initiator) => Some(QpXrc::Initiator),
            Some(transport::XrcRole::Target) => {
                let x = own(&self.res.xrcds, ctx, c.pd_handle, "xrcd_handle (pd_handle)")?;
                Some(QpXrc::Target {
                    xrcd: c.pd_handle,
                    domain: x.domain,
                })
            }
            None => None,
        };
        let target = matches!(xrc, Some(QpXrc::Target { .. }));
        if c.reserved != 0 || c.is_srq > 1 || c.sq_sig_all > 1 {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "reserved {}, is_srq {}, sq_sig_all {}: must be 0, 0 or 1, 0 or 1",
                c.reserved,
                c.is_srq,
                c.sq_sig_all
            ));
        }
        let sr = d.flags & CREATE_QP_SELECTIVE_REPEAT != 0;
        if d.flags & !CREATE_QP_SELECTIVE_REPEAT != 0 || d.reserved != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "flags {:#x}, reserved {}: unknown flags or reserved not 0",
                d.flags,
                d.reserved
            ));
        }
        if sr && (ty != Service::Rc || xrc.is_some()) {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "selective repeat is for RC QPs that are not XRC"
            ));
        }
        if xrc.is_some() && (c.is_srq != 0 || d.rq != RingDesc::default()) {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "an XRC QP has no receive queue: is_srq {} and an RQ ring must be absent",
                c.is_srq
            ));
        }
        // A target's CQs are its SRQs'; an initiator's receive CQ is ignored (kernel).
        let (send_cq, recv_cq) = match xrc {
            Some(QpXrc::Target { .. }) => (NO_HANDLE, NO_HANDLE),
            Some(QpXrc::Initiator) => (c.send_cq_handle, c.send_cq_handle),
            None => (c.send_cq_handle, c.recv_cq_handle),
        };
        if !target {
            own(&self.res.pds, ctx, c.pd_handle, "pd_handle")?;
            own(&self.res.cqs, ctx, c.send_cq_handle, "send_cq_handle")?;
        }
        if xrc.is_none() {
            own(&self.res.cqs, ctx, c.recv_cq_handle, "recv_cq_handle")?;
        }
        let srq = if c.is_srq != 0 {
            own(&self.res.srqs, ctx, c.srq_handle, "srq_handle")?;
            if d.rq != RingDesc::default() {
                return Err(refuse!(
                    EINVAL,
                    BAD_RING,
                    "a QP on an SRQ has no receive ring, yet one was described"
                ));
            }
            Some(c.srq_handle)
        } else {
            None
        };
        let over = |field: &str, v: u32, limit: &str, max: u32| {
            refuse!(EINVAL, OVER_LIMIT, "{field} {v} > {limit} {max}")
        };
        if c.max_send_wr > l.max_qp_wr {
            return Err(over("max_send_wr", c.max_send_wr, "max_qp_wr", l.max_qp_wr));
        }
        if c.max_send_sge > l.max_sge {
            return Err(over("max_send_sge", c.max_send_sge, "max_sge", l.max_sge));
        }
        if c.max_inline_data > l.max_inline_data {
            return Err(over(
                "max_inline_data",
                c.max_inline_data,
                "max_inline_data",
                l.max_inline_data,
            ));
        }
        if srq.is_none() && xrc.is_none() && c.max_recv_wr > l.max_qp_wr {
            return Err(over("max_recv_wr", c.max_recv_wr, "max_qp_wr", l.max_qp_wr));
        }
        if srq.is_none() && xrc.is_none() && c.max_recv_sge > l.max_sge {
            return Err(over("max_recv_sge", c.max_recv_sge, "max_sge", l.max_sge));
        }
        // Send queue ring: enough slots, and slots big enough for the SGEs / inline asked.
        let (sq_mem, sq_layout) = attach_ring(self.mem_space(), &d.sq, "sq ring")?;
        let (sq_sge, sq_inline) = send_caps_for_elem(sq_layout.elem_size());
        let max_send_sge = sq_sge.min(l.max_sge);
        let max_inline = sq_inline.min(l.max_inline_data).min(MAX_INLINE_DATA);
        check_ring_fits(
            &sq_layout,
            c.max_send_wr.max(1),
            l.max_qp_wr,
            0,
            "sq ring",
            "max_send_wr",
        )?;
        if max_send_sge < c.max_send_sge || max_inline < c.max_inline_data {
            return Err(refuse!(
                EINVAL,
                BAD_RING,
                "sq ring elements of {} bytes hold {max_send_sge} SGEs / {max_inline} inline bytes < max_send_sge {} / max_inline_data {}",
                sq_layout.elem_size(),
                c.max_send_sge,
                c.max_inline_data
            ));
        }
        let sq = Consumer::attach(sq_mem.clone(), 0, sq_layout).map_err(ring_refusal("sq ring"))?;
        let rq = match srq {
            Some(_) => None,
            None if xrc.is_some() => None,
            None => {
                let (mem, layout) = attach_ring(self.mem_space(), &d.rq, "rq ring")?;
                let max_sge = ((layout.elem_size() as usize - RECV_WQE_HDR_BYTES)
                    / abi::uverbs::Sge::SIZE) as u32;
                let max_sge = max_sge.min(MAX_SGE).min(l.max_sge);
                check_ring_fits(
                    &layout,
                    c.max_recv_wr.max(1),
                    l.max_qp_wr,
                    0,
                    "rq ring",
                    "max_recv_wr",
                )?;
                if max_sge < c.max_recv_sge || recv_wqe_size(c.max_recv_sge).is_none() {
                    return Err(refuse!(
                        EINVAL,
                        BAD_RING,
                        "rq ring elements of {} bytes hold {max_sge} SGEs < max_recv_sge {}",
                        layout.elem_size(),
                        c.max_recv_sge
                    ));
                }
                let ring =
                    Consumer::attach(mem.clone(), 0, layout).map_err(ring_refusal("rq ring"))?;
                Some(RecvRing {
                    mem,
                    layout,
                    ring,
                    max_sge,
                })
            }
        };
        let db_slot = {
            let cx = self
                .res
                .ctxs
                .get(&ctx)
                .ok_or_else(|| refuse!(EINVAL, NO_CONTEXT, "no context"))?;
            cx.db_slots
                .iter()
                .position(Option::is_none)
                .ok_or_else(|| {
                    refuse!(
                        ENOMEM,
                        EXHAUSTED,
                        "all {} doorbell slots of the context are taken",
                        cx.db_slots.len()
                    )
                })? as u32
        };
        let caps = Caps {
            max_send_wr: sq_layout.slots(),
            max_recv_wr: rq.as_ref().map_or(0, |r| r.layout.slots()),
            max_send_sge,
            max_recv_sge: rq.as_ref().map_or(0, |r| r.max_sge),
            max_inline,
        };
        let qpo = QpObj {
            ctx,
            pd: if target { NO_HANDLE } else { c.pd_handle },
            send_cq,
            recv_cq,
            srq,
            xrc,
            user_handle: c.user_handle,
            // Placeholder; replaced below once the QPN (= slab index) is known.
            qp: Qp::new(QpConfig::new(Qpn::new(0), ty)),
            ty,
            sq_mem,
            sq_layout,
            sq,
            sq_taken: 0,
            rq,
            caps,
            sq_sig_all: c.sq_sig_all != 0,
            db_slot,
            av: None,
            events_reported: 0,
            in_ready: false,
            timer: None,
            in_err_list: false,
            owes_signal: false,
        };
        let qpn = self
            .qps
            .insert_rotating(qpo, l.max_qp)
            .ok_or_else(|| refuse!(ENOMEM, EXHAUSTED, "max_qp {} QPs exist", l.max_qp))?;
        let mut cfg = QpConfig::new(Qpn::new(qpn), ty);
        cfg.caps = QpCaps {
            max_send_wr: caps.max_send_wr,
            // Receive WQEs stay in the ring until the responder needs one: the transport
            // sees every receive queue as a shared one (RecvQueue over the ring).
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge.max(1),
            max_inline_data: caps.max_inline,
            sq_sig_all: c.sq_sig_all != 0,
        };
        cfg.uses_srq = true;
        cfg.xrc = xrc.map(|x| match x {
            QpXrc::Initiator => transport::XrcRole::Initiator,
            QpXrc::Target { .. } => transport::XrcRole::Target,
        });
        // ECN congestion control (docs/wire.md §11): every connected QP of a device with
        // ECN on is a DCQCN reaction and notification point.
        cfg.cc = self.cfg.ecn.then_some(self.cfg.dcqcn);
        // Selective repeat (docs/wire.md §5.6), when the library says both ends agreed.
        cfg.selective_repeat = sr;
        let mtu = self.cfg.mtu().unwrap_or(Mtu::Mtu1024);
        if let Some(q) = self.qps.get_mut(qpn) {
            q.qp = Qp::new(cfg);
            q.qp.set_port_mtu(mtu);
        }
        if let Some(cx) = self.res.ctxs.get_mut(&ctx) {
            if let Some(s) = cx.db_slots.get_mut(db_slot as usize) {
                *s = Some(qpn);
            }
        }
        if target {
            self.xrcd_use(c.pd_handle, 1);
        } else {
            self.pd_use(c.pd_handle);
            self.cq_use(send_cq, 1);
            self.cq_use(recv_cq, 1);
        }
        if let Some(s) = srq.and_then(|s| self.res.srqs.get_mut(s)) {
            s.users += 1;
        }
        self.recount_remote();
        push(
            resp,
            &CreateQpResp {
                qp_handle: qpn,
                qpn,
                max_send_wr: caps.max_send_wr,
                max_recv_wr: caps.max_recv_wr,
                max_send_sge: caps.max_send_sge,
                max_recv_sge: caps.max_recv_sge,
                max_inline_data: caps.max_inline,
                reserved: 0,
            },
        );
        push(
            resp,
            &UroceCreateQpResp {
                sq_doorbell: db_slot,
                reserved: 0,
            },
        );
        Ok(())
    }

    fn query_qp(&self, ctx: CtxId, q: &QueryQp, resp: &mut Vec<u8>) -> Res<()> {
        let qpo = own(&self.qps, ctx, q.qp_handle, "qp_handle")?;
        let a = QpAttr {
            cap: QpCap {
                max_send_wr: qpo.caps.max_send_wr,
                max_recv_wr: qpo.caps.max_recv_wr,
                max_send_sge: qpo.caps.max_send_sge,
                max_recv_sge: qpo.caps.max_recv_sge,
                max_inline_data: qpo.caps.max_inline,
            },
            sq_sig_all: qpo.sq_sig_all,
            ..qpo.qp.query()
        };
        push(resp, &QueryQpResp::from(&a));
        Ok(())
    }

    /// MODIFY_QP: the attributes decoded and their values checked against the device
    /// ([`QpAttr::check`]), the address vectors resolved, then the transport's transition
    /// table (docs/wire.md §6.2); any failure is EINVAL and changes nothing.
    fn modify_qp(&mut self, ctx: CtxId, m: &ModifyQp) -> Res<()> {
        let dev_ip = self.dev_ip();
        let limits = AttrLimits {
            max_rd_atomic: self.cfg.limits.max_qp_rd_atom,
            pkey_tbl_len: PKEY_TBL_LEN,
        };
        let port_mtu = self.cfg.mtu().unwrap_or(Mtu::Mtu1024);
        let qpo = own_mut(&mut self.qps, ctx, m.qp_handle, "qp_handle")?;
        let mask = m.mask();
        if m.flags & !MODIFY_QP_SELECTIVE_REPEAT != 0 || m.reserved != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "flags {:#x}, reserved {}: unknown flags or reserved not 0",
                m.flags,
                m.reserved
            ));
        }
        let a = m.attr().map_err(attr_refusal)?;
        a.check(mask, &limits).map_err(attr_refusal)?;
        // Selective repeat agreed in the CM's ECE exchange (docs/wire.md §5.6): only with the
        // move from INIT to RTR, before the QP exchanges packets.
        let sr = m.flags & MODIFY_QP_SELECTIVE_REPEAT != 0;
        if sr
            && !(mask.contains(QpAttrMask::STATE)
                && a.qp_state == QpState::Rtr
                && qpo.qp.state() == QpState::Init)
        {
            return Err(refuse!(
                EINVAL,
                BAD_VALUE,
                "selective repeat is turned on only with the move from INIT to RTR"
            ));
        }
        let resolve = |what: &str, av: &AhAttr| {
            dest_from(av, dev_ip).map_err(|r| Refusal {
                detail: format!("{what}: {}", r.detail),
                ..r
            })
        };
        let av = if mask.contains(QpAttrMask::AV) {
            Some(resolve("ah_attr", &a.ah_attr)?)
        } else {
            None
        };
        if mask.contains(QpAttrMask::ALT_PATH) {
            resolve("alt_ah_attr", &a.alt_ah_attr)?;
        }
        let cur = qpo.qp.state();
        let to = if mask.contains(QpAttrMask::STATE) {
            a.qp_state
        } else {
            cur
        };
        let sr_before = qpo.qp.config().selective_repeat;
        if sr {
            qpo.qp
                .set_selective_repeat(true)
                .map_err(|e| modify_refusal(e, cur, to, m.cur_qp_state))?;
        }
        if let Err(e) = qpo.qp.modify(&a, mask) {
            // A refused modify changes nothing.
            let _ = qpo.qp.set_selective_repeat(sr_before);
            return Err(modify_refusal(e, cur, to, m.cur_qp_state));
        }
        if av.is_some() {
            qpo.av = av;
        }
        let ring_to = qpo.av.map(|d| (d.ip, qpo.qp.dest_qpn().value()));
        qpo.qp.set_port_mtu(port_mtu);
        if qpo.qp.state() == QpState::Reset {
            // RESET empties the rings without completions (docs/wire.md §6.2 notes) and
            // forgets the path.
            if let Ok(n) = qpo.sq.available() {
                let _ = qpo.sq.release(n);
            }
            qpo.sq_taken = 0;
            qpo.timer = None;
            if qpo.owes_signal {
                qpo.owes_signal = false;
                self.res.owing_qps = self.res.owing_qps.saturating_sub(1);
            }
            if let Some(rq) = qpo.rq.as_mut() {
                rq.discard_all();
            }
            qpo.av = None;
        }
        let idx = m.qp_handle;
        if let Some((ip, qpn)) = ring_to {
            // A ring is lossless and holds back what does not fit (docs/daemon.md §2.1):
            // the window may fill it, where a lossy path keeps rxe's 128 PSNs (with 128, a
            // 64 KiB stream waited for the other process's engine every 128 KiB).
            let window = if self.ensure_peer_ring(ip, qpn) {
                crate::peer_ring::SLOTS
            } else {
                QpConfig::new(Qpn::new(0), Service::Rc).max_unacked_psns
            };
            if let Some(q) = self.qps.get_mut(idx) {
                if q.qp.config().max_unacked_psns != window {
                    q.qp.set_max_unacked_psns(window);
                }
            }
        }
        self.make_ready(idx);
        self.recount_remote();
        Ok(())
    }

    /// Remove a QP (no completions for outstanding work, as `ib_destroy_qp`). Returns its
    /// async event count.
    pub(crate) fn destroy_qp(&mut self, idx: u32) -> u32 {
        let Some(q) = self.qps.remove(idx) else {
            return 0;
        };
        // Type 2 windows bound to it lose their QP (a later QP with its number must not
        // inherit them).
        self.res.mrs.unbind_qp(q.qp.qpn().value());
        self.retired.accumulate(q.qp.counters());
        if q.owes_signal {
            self.res.owing_qps = self.res.owing_qps.saturating_sub(1);
        }
        if let Some(cx) = self.res.ctxs.get_mut(&q.ctx) {
            if let Some(s) = cx.db_slots.get_mut(q.db_slot as usize) {
                *s = None;
            }
        }
        if let Some(QpXrc::Target { xrcd, .. }) = q.xrc {
            self.xrcd_use(xrcd, -1);
        } else {
            self.pd_release(q.pd);
            self.cq_use(q.send_cq, -1);
            self.cq_use(q.recv_cq, -1);
        }
        if let Some(s) = q.srq.and_then(|s| self.res.srqs.get_mut(s)) {
            s.users = s.users.saturating_sub(1);
        }
        self.recount_remote();
        q.events_reported
    }

    // -----------------------------------------------------------------------------------
    // Slow-path posting: write exactly the WQEs the library's fast path would, into the
    // same rings, then ring the doorbell internally (rxe's post via write()).

    fn post_send(&mut self, ctx: CtxId, c: &PostSend, list: &WrList<'_>) -> Res<()> {
        let qpo = own(&self.qps, ctx, c.qp_handle, "qp_handle")?;
        if matches!(
            qpo.qp.state(),
            QpState::Reset | QpState::Init | QpState::Rtr
        ) {
            return Err(refuse!(
                EINVAL,
                WRONG_STATE,
                "QP {} is in {}: sends need RTS or later",
                c.qp_handle,
                qpo.qp.state()
            ));
        }
        if list.is_empty() {
            // A null post: only a doorbell.
            self.make_ready(c.qp_handle);
            return Ok(());
        }
        let rr = ring_refusal("sq ring");
        let mut prod = Producer::attach(qpo.sq_mem.clone(), 0, qpo.sq_layout).map_err(&rr)?;
        let free = prod.free().map_err(&rr)?;
        if (free as usize) < list.len() {
            return Err(refuse!(
                ENOMEM,
                QUEUE_FULL,
                "{} work requests, {free} free slots in the send queue",
                list.len()
            ));
        }
        // Validate everything first: either every WR is queued or none is.
        let mut staged: Vec<(SendWqe, Vec<u8>)> = Vec::with_capacity(list.len());
        for (wr, sges) in list.send_wrs() {
            staged.push(self.build_send_wqe(ctx, qpo, &wr, &sges)?);
        }
        for (hdr, payload) in &staged {
            prod.stage_parts(&[hdr.as_bytes(), payload]).map_err(&rr)?;
        }
        prod.publish().map_err(&rr)?;
        self.make_ready(c.qp_handle);
        Ok(())
    }

    fn build_send_wqe(
        &self,
        ctx: CtxId,
        qpo: &QpObj,
        wr: &SendWr,
        sges: &SgeList<'_>,
    ) -> Res<(SendWqe, Vec<u8>)> {
        let op = transport::WrOpcode::from_raw(wr.opcode)
            .filter(|o| o.is_implemented())
            .ok_or_else(|| refuse!(EINVAL, BAD_OPCODE, "opcode {} is unknown", wr.opcode))?;
        if op == transport::WrOpcode::BindMw {
            // ib_uverbs_send_wr has no room for a binding (the kernel refuses it too); the
            // fast path's WQE carries it.
            return Err(refuse!(
                EINVAL,
                BAD_OPCODE,
                "BIND_MW through POST_SEND: post it to the SQ ring"
            ));
        }
        let ok = match qpo.ty {
            Service::Rc => true,
            Service::Uc => {
                op.is_write()
                    || matches!(
                        op,
                        transport::WrOpcode::Send
                            | transport::WrOpcode::SendWithImm
                            | transport::WrOpcode::LocalInv
                    )
            }
            Service::Ud => matches!(
                op,
                transport::WrOpcode::Send | transport::WrOpcode::SendWithImm
            ),
        };
        let known_flags = SendFlags::FENCE.0
            | SendFlags::SIGNALED.0
            | SendFlags::SOLICITED.0
            | SendFlags::INLINE.0;
        if !ok {
            return Err(refuse!(
                EINVAL,
                BAD_OPCODE,
                "opcode {op:?} is not allowed on a {:?} QP",
                qpo.ty
            ));
        }
        if wr.send_flags & !known_flags != 0 {
            return Err(refuse!(
                EINVAL,
                BAD_FLAGS,
                "send_flags {:#x}: unknown bits {:#x}",
                wr.send_flags,
                wr.send_flags & !known_flags
            ));
        }
        let mut hdr = SendWqe {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            send_flags: wr.send_flags,
            ex: wr.ex,
            ..SendWqe::default()
        };
        if op.is_atomic() {
            let a = wr.atomic();
            hdr.remote_addr = a.remote_addr;
            hdr.rkey = a.rkey;
            hdr.compare_add = a.compare_add;
            hdr.swap = a.swap;
        } else if op.is_write() || op == transport::WrOpcode::RdmaRead {
            let r = wr.rdma();
            hdr.remote_addr = r.remote_addr;
            hdr.rkey = r.rkey;
        }
        if qpo.ty == Service::Ud {
            let u = wr.ud();
            let ah = own(&self.res.ahs, ctx, u.ah, "ah")?;
            if ah.pd != qpo.pd {
                return Err(refuse!(
                    EINVAL,
                    WRONG_PD,
                    "ah {} belongs to pd_handle {}, the QP to pd_handle {}",
                    u.ah,
                    ah.pd,
                    qpo.pd
                ));
            }
            if u.remote_qpn > 0xff_ffff {
                return Err(refuse!(
                    EINVAL,
                    BAD_VALUE,
                    "remote_qpn {:#x} > 24 bits",
                    u.remote_qpn
                ));
            }
            hdr.ah = u.ah;
            hdr.remote_qpn = u.remote_qpn;
            hdr.remote_qkey = u.remote_qkey;
        }
        let inline = wr.send_flags & SendFlags::INLINE.0 != 0;
        if inline && op.is_read_or_atomic() {
            // READ and atomic results need a registered destination.
            return Err(refuse!(
                EINVAL,
                BAD_FLAGS,
                "IBV_SEND_INLINE with {op:?}: its result needs a registered buffer"
            ));
        }
        let payload = if inline {
            // Inline: the device copies the bytes now, with no lkey check (IBV_SEND_INLINE).
            let mut data = Vec::new();
            for s in sges.iter() {
                if data.len() + s.length as usize > qpo.caps.max_inline as usize {
                    return Err(refuse!(
                        EINVAL,
                        OVER_LIMIT,
                        "inline data of {}+ bytes > max_inline_data {}",
                        data.len() + s.length as usize,
                        qpo.caps.max_inline
                    ));
                }
                if s.length == 0 {
                    continue;
                }
                let len = u64::from(s.length);
                let r = dma::user_range(self.mem_space(), s.addr, len, false)
                    .map_err(mem_refusal("inline sge", s.addr, len, false))?;
                let start = data.len();
                data.resize(start + s.length as usize, 0);
                if !r.read(0, &mut data[start..]) {
                    return Err(refuse!(
                        EFAULT,
                        NOT_MAPPED,
                        "inline sge [{:#x}, +{len}) could not be read",
                        s.addr
                    ));
                }
            }
            hdr.inline_len = data.len() as u16;
            data
        } else {
            if sges.len() > qpo.caps.max_send_sge as usize {
                return Err(refuse!(
                    EINVAL,
                    OVER_LIMIT,
                    "num_sge {} > max_send_sge {}",
                    sges.len(),
                    qpo.caps.max_send_sge
                ));
            }
            hdr.num_sge = sges.len() as u16;
            sges.0.to_vec()
        };
        Ok((hdr, payload))
    }

    /// POST_RECV; returns whether the engine must look (the QP is in ERR: flush).
    fn post_recv(&mut self, ctx: CtxId, c: &PostRecv, list: &WrList<'_>) -> Res<bool> {
        let qpo = own(&self.qps, ctx, c.qp_handle, "qp_handle")?;
        let state = qpo.qp.state();
        let rq = match &qpo.rq {
            Some(rq) if state != QpState::Reset => rq,
            Some(_) => {
                return Err(refuse!(
                    EINVAL,
                    WRONG_STATE,
                    "QP {} is in RESET: receives need INIT or later",
                    c.qp_handle
                ))
            }
            None => {
                return Err(refuse!(
                    EINVAL,
                    WRONG_STATE,
                    "QP {} receives through an SRQ: post to the SRQ",
                    c.qp_handle
                ))
            }
        };
        post_recv_ring(rq, list)?;
        if flushes_receives(state) {
            self.make_ready(c.qp_handle);
            return Ok(true);
        }
        Ok(false)
    }

    fn post_srq_recv(&mut self, ctx: CtxId, c: &PostSrqRecv, list: &WrList<'_>) -> Res<()> {
        let srq = own(&self.res.srqs, ctx, c.srq_handle, "srq_handle")?;
        post_recv_ring(&srq.rq, list)
    }

    fn create_srq(
        &mut self,
        ctx: CtxId,
        c: &CreateSrq,
        d: &UroceCreateSrq,
        xrc: Option<SrqXrc>,
        resp: &mut Vec<u8>,
    ) -> Res<()> {
        let l = self.cfg.limits;
        own(&self.res.pds, ctx, c.pd_handle, "pd_handle")?;
        if c.max_wr == 0 || c.max_wr > l.max_srq_wr {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "max_wr {} not in 1..=max_srq_wr {}",
                c.max_wr,
                l.max_srq_wr
            ));
        }
        if c.max_sge > l.max_srq_sge {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "max_sge {} > max_srq_sge {}",
                c.max_sge,
                l.max_srq_sge
            ));
        }
        let (mem, layout) = attach_ring(self.mem_space(), &d.ring, "srq ring")?;
        let max_sge =
            (((layout.elem_size() as usize - RECV_WQE_HDR_BYTES) / abi::uverbs::Sge::SIZE) as u32)
                .min(MAX_SGE)
                .min(l.max_srq_sge);
        check_ring_fits(&layout, c.max_wr, l.max_srq_wr, 0, "srq ring", "max_wr")?;
        if max_sge < c.max_sge {
            return Err(refuse!(
                EINVAL,
                BAD_RING,
                "srq ring elements of {} bytes hold {max_sge} SGEs < max_sge {}",
                layout.elem_size(),
                c.max_sge
            ));
        }
        if c.srq_limit > layout.slots() {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "srq_limit {} > {} slots",
                c.srq_limit,
                layout.slots()
            ));
        }
        let ring = Consumer::attach(mem.clone(), 0, layout).map_err(ring_refusal("srq ring"))?;
        let h = self
            .res
            .srqs
            .insert(
                Srq {
                    ctx,
                    pd: c.pd_handle,
                    user_handle: c.user_handle,
                    rq: RecvRing {
                        mem,
                        layout,
                        ring,
                        max_sge,
                    },
                    limit: 0,
                    users: 0,
                    events: 0,
                    xrc,
                },
                l.max_srq,
            )
            .ok_or_else(|| refuse!(ENOMEM, EXHAUSTED, "max_srq {} SRQs exist", l.max_srq))?;
        self.pd_use(c.pd_handle);
        push(
            resp,
            &CreateSrqResp {
                srq_handle: h,
                max_wr: layout.slots(),
                max_sge,
                srqn: h,
            },
        );
        Ok(())
    }

    /// Tear down everything a context owns (its connection closed or died), like closing
    /// `/dev/infiniband/uverbsN`. Descriptors given to the library are the library's; ours
    /// (event senders) close here.
    pub(crate) fn destroy_context(&mut self, ctx: CtxId) {
        self.publish_peer_rings();
        for q in self.qps.indices_where(|q| q.ctx == ctx) {
            self.destroy_qp(q);
        }
        for i in self.res.srqs.indices_where(|o| o.ctx == ctx) {
            self.res.srqs.remove(i);
        }
        for i in self.res.xrcds.indices_where(|o| o.ctx == ctx) {
            self.res.xrcds.remove(i);
        }
        for i in self.res.cqs.indices_where(|o| o.ctx == ctx) {
            self.res.cqs.remove(i);
        }
        for i in self.res.ahs.indices_where(|o| o.ctx == ctx) {
            self.res.ahs.remove(i);
        }
        for i in self.res.mrs.mws().indices_where(|o| o.ctx == ctx) {
            self.res.mrs.remove_mw(i);
        }
        for i in self.res.mrs.indices_where(|o| o.ctx == ctx) {
            self.res.mrs.remove(i);
        }
        for i in self.res.pds.indices_where(|o| o.ctx == ctx) {
            self.res.pds.remove(i);
        }
        for i in self.res.chans.indices_where(|o| o.ctx == ctx) {
            self.res.chans.remove(i);
        }
        let now = self.engine.now();
        let before = self.gsi.cm.listening();
        self.gsi.close_context(ctx, now);
        self.release_listens(&before);
        self.arm_gsi();
        self.res.ctxs.remove(&ctx);
        if self.hermetic && self.res.ctxs.is_empty() {
            // Nothing can hold a key or QPN of this device any more (no peers, no
            // contexts): start both sequences over.
            self.keygen.reset();
            self.qps.reset_rotation();
        }
    }
}

/// The reason for a transition the transport refused (all EINVAL, as rxe and
/// `ib_modify_qp_is_ok` answer).
fn modify_refusal(e: transport::ModifyError, cur: QpState, to: QpState, cur_raw: u8) -> Refusal {
    use transport::ModifyError as E;
    match e {
        E::IllegalTransition { from, to } => refuse!(
            EINVAL,
            ILLEGAL_TRANSITION,
            "{from} -> {to} is not a legal QP state transition"
        ),
        E::MissingAttr(m) => refuse!(
            EINVAL,
            MISSING_ATTR,
            "{cur} -> {to}: {m:?} missing from attr_mask"
        ),
        E::UnexpectedAttr(m) => refuse!(
            EINVAL,
            UNEXPECTED_ATTR,
            "{cur} -> {to}: {m:?} not allowed in attr_mask"
        ),
        E::CurStateMismatch => refuse!(
            EINVAL,
            CUR_STATE_MISMATCH,
            "cur_qp_state {cur_raw} but the QP is in {cur}"
        ),
        E::BadAttr(e) => attr_refusal(e),
        E::InvalidValue(what) => refuse!(EINVAL, BAD_VALUE, "{cur} -> {to}: {what}"),
        E::Busy => refuse!(
            EINVAL,
            QP_BUSY,
            "{cur} -> {to}: the send queue is still draining"
        ),
    }
}

/// An attribute value a modify may not carry, as the rule it broke.
fn attr_refusal(e: AttrError) -> Refusal {
    match e.kind {
        AttrErrorKind::BadIndex => refuse!(EINVAL, BAD_INDEX, "{e}"),
        AttrErrorKind::OverLimit => refuse!(EINVAL, OVER_LIMIT, "{e}"),
        AttrErrorKind::OutOfRange => refuse!(EINVAL, BAD_VALUE, "{e}"),
    }
}

/// Queue receive WQEs into an RQ/SRQ ring as the library would (all or nothing).
fn post_recv_ring(rq: &RecvRing, list: &WrList<'_>) -> Res<()> {
    let rr = ring_refusal("receive ring");
    let mut prod = Producer::attach(rq.mem.clone(), 0, rq.layout).map_err(&rr)?;
    let free = prod.free().map_err(&rr)?;
    if (free as usize) < list.len() {
        return Err(refuse!(
            ENOMEM,
            QUEUE_FULL,
            "{} work requests, {free} free slots in the receive queue",
            list.len()
        ));
    }
    for (_, sges) in list.recv_wrs() {
        if sges.len() > rq.max_sge as usize {
            return Err(refuse!(
                EINVAL,
                OVER_LIMIT,
                "num_sge {} > max_recv_sge {}",
                sges.len(),
                rq.max_sge
            ));
        }
    }
    for (wr, sges) in list.recv_wrs() {
        let hdr = RecvWqe {
            wr_id: wr.wr_id,
            num_sge: sges.len() as u32,
            reserved: 0,
        };
        prod.stage_parts(&[hdr.as_bytes(), sges.0]).map_err(&rr)?;
    }
    prod.publish().map_err(&rr)?;
    Ok(())
}
