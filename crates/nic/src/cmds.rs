//! The control plane's command handlers: one function per uverbs command, each validating
//! every field of untrusted bytes and answering with a response or an errno — the work
//! `ib_uverbs` + `ib_core` + the rxe driver's verbs do in the kernel.
//!
//! Handles are checked to belong to the calling context (EINVAL otherwise, as a failed
//! `uobj_get_obj_read` gives). Nothing here transmits: commands that create work (posts,
//! state changes) queue the QP for the engine and ask the caller to kick it.

use std::net::IpAddr;
use std::os::fd::IntoRawFd;

use abi::cmd::{encode_reply, Frame};
use abi::doorbell::{DoorbellLayout, DoorbellReceiver};
use abi::fastpath::{
    recv_wqe_size, send_caps_for_elem, Cqe, RecvWqe, SendWqe, CQE_BYTES, MAX_INLINE_DATA, MAX_SGE,
    RECV_WQE_HDR_BYTES,
};
use abi::ring::{Consumer, Producer, RingLayout};
use abi::uverbs::*;
use abi::{AccessFlags, Errno, GidType, LinkLayer, PortState, Request, SendFlags, SrqAttrMask};
use transport::wire::{Psn, Qkey, Qpn};
use transport::{AttrMask, Mtu, Qp, QpAttr, QpCaps, QpConfig, QpState, QpType};
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
owned!(Pd, Mr, Cq, Srq, Ah, Chan, QpObj);

fn own<T: Owned>(slab: &crate::slab::Slab<T>, ctx: CtxId, h: u32) -> Result<&T, Errno> {
    slab.get(h).filter(|o| o.ctx() == ctx).ok_or(Errno::EINVAL)
}

fn own_mut<T: Owned>(slab: &mut crate::slab::Slab<T>, ctx: CtxId, h: u32) -> Result<&mut T, Errno> {
    slab.get_mut(h)
        .filter(|o| o.ctx() == ctx)
        .ok_or(Errno::EINVAL)
}

fn push<T: IntoBytes + zerocopy::Immutable>(resp: &mut Vec<u8>, v: &T) {
    resp.extend_from_slice(v.as_bytes());
}

/// GID table length of the (single) port: index 0 is the device's address.
pub(crate) const GID_TBL_LEN: u32 = 1;
/// P_Key table length: index 0 is the default P_Key.
pub(crate) const PKEY_TBL_LEN: u16 = 1;
/// Largest message (IBTA; the transport's limit).
const MAX_MSG_SZ: u32 = 1 << 31;

/// `IB_DEVICE_*` capability bits reported (ib_verbs.h): BAD_PKEY_CNTR, BAD_QKEY_CNTR,
/// CURR_QP_STATE_MOD, PORT_ACTIVE_EVENT, SYS_IMAGE_GUID, RC_RNR_NAK_GEN.
const DEVICE_CAP_FLAGS: u32 = 2 | 4 | 128 | 1024 | 2048 | 4096;
/// `IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS`.
const PORT_CAP_FLAGS: u32 = (1 << 16) | (1 << 26);

fn dest_from(
    dgid: [u8; 16],
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
    is_global: u8,
    dev_ip: IpAddr,
) -> Result<Dest, Errno> {
    // RoCE needs a GRH (rxe: "no GRH") and our GID table has one entry.
    if is_global == 0 || u32::from(sgid_index) >= GID_TBL_LEN || flow_label > 0xF_FFFF {
        return Err(Errno::EINVAL);
    }
    let ip = gid_to_ip(dgid);
    if ip.is_ipv4() != dev_ip.is_ipv4() || ip.is_unspecified() || ip.is_multicast() {
        return Err(Errno::EINVAL);
    }
    // No route between loopback and other addresses (the kernel refuses such a datagram
    // too: a loopback source never leaves the host).
    if ip.is_loopback() != dev_ip.is_loopback() {
        return Err(Errno::EINVAL);
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
) -> Result<(std::sync::Arc<abi::shm::SharedMem>, RingLayout), Errno> {
    let layout = RingLayout::from_desc(desc).map_err(ring_errno)?;
    let mem = dma::shared_region(space, desc.addr, layout.bytes())?;
    Ok((mem, layout))
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
        )
    })
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
                encode_reply(word, Err(e.errno()), 0, out);
                return false;
            }
        };
        let mut resp = Vec::new();
        let mut kick = false;
        let r = self.dispatch(ctx, &frame, &req, &mut resp, &mut kick);
        let cap = frame.response_capacity();
        match r {
            Ok(()) => encode_reply(word, Ok(&[&resp[..]]), cap, out),
            Err(e) => encode_reply(word, Err(e), cap, out),
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
    ) -> Result<(), Errno> {
        if let Request::GetContext(_, d) = req {
            return self.get_context(ctx, d, resp);
        }
        // Before GET_CONTEXT only GET_CONTEXT is accepted (docs/abi.md §1).
        if !self.res.ctxs.contains_key(&ctx) {
            return Err(Errno::EINVAL);
        }
        match req {
            Request::GetContext(..) => Err(Errno::EINVAL),
            Request::QueryDevice(_) => {
                push(resp, &self.query_device());
                Ok(())
            }
            Request::QueryPort(q) => {
                if q.port_num != 1 {
                    return Err(Errno::EINVAL);
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
                if q.port_num != 1 || q.index >= u32::from(PKEY_TBL_LEN) {
                    return Err(Errno::EINVAL);
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
                    .ok_or(Errno::ENOMEM)?;
                push(resp, &AllocPdResp { pd_handle: h });
                Ok(())
            }
            Request::DeallocPd(d) => {
                let pd = own(&self.res.pds, ctx, d.pd_handle)?;
                if pd.users != 0 {
                    return Err(Errno::EBUSY);
                }
                self.res.pds.remove(d.pd_handle);
                Ok(())
            }
            Request::RegMr(r) => self.reg_mr(ctx, r, resp),
            Request::DeregMr(d) => {
                let pd = own(&self.res.mrs, ctx, d.mr_handle)?.pd;
                self.res.mrs.remove(d.mr_handle);
                self.pd_release(pd);
                Ok(())
            }
            Request::CreateCompChannel(_) => self.create_comp_channel(ctx, resp),
            Request::CreateCq(c, d) => self.create_cq(ctx, c, d, resp),
            Request::ResizeCq(c, d) => self.resize_cq(ctx, c, d, resp),
            Request::DestroyCq(d) => {
                let cq = own(&self.res.cqs, ctx, d.cq_handle)?;
                if cq.users != 0 {
                    return Err(Errno::EBUSY);
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
                let cq = own_mut(&mut self.res.cqs, ctx, r.cq_handle)?;
                cq.arm = match (cq.arm, r.solicited_only != 0) {
                    (_, false) | (Arm::Next, true) => Arm::Next,
                    (_, true) => Arm::Solicited,
                };
                Ok(())
            }
            Request::CreateQp(c, d) => self.create_qp(ctx, c, d, resp),
            Request::QueryQp(q) => self.query_qp(ctx, q, resp),
            Request::ModifyQp(m) => {
                self.modify_qp(ctx, m)?;
                *kick = true;
                Ok(())
            }
            Request::DestroyQp(d) => {
                own(&self.qps, ctx, d.qp_handle)?;
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
                own(&self.res.pds, ctx, c.pd_handle)?;
                let a = &c.attr;
                if a.port_num != 1 {
                    return Err(Errno::EINVAL);
                }
                let g = &a.grh;
                let dest = dest_from(
                    g.dgid,
                    g.flow_label,
                    g.sgid_index,
                    g.hop_limit,
                    g.traffic_class,
                    a.is_global,
                    self.dev_ip(),
                )?;
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
                    .ok_or(Errno::ENOMEM)?;
                self.pd_use(c.pd_handle);
                push(resp, &CreateAhResp { ah_handle: h });
                Ok(())
            }
            Request::DestroyAh(d) => {
                let pd = own(&self.res.ahs, ctx, d.ah_handle)?.pd;
                self.res.ahs.remove(d.ah_handle);
                self.pd_release(pd);
                Ok(())
            }
            Request::CreateSrq(c, d) => self.create_srq(ctx, c, d, resp),
            Request::ModifySrq(m) => {
                let srq = own_mut(&mut self.res.srqs, ctx, m.srq_handle)?;
                let mask = SrqAttrMask(m.attr_mask);
                if mask.0 & !(SrqAttrMask::MAX_WR.0 | SrqAttrMask::LIMIT.0) != 0 {
                    return Err(Errno::EINVAL);
                }
                if mask.0 & SrqAttrMask::MAX_WR.0 != 0 {
                    return Err(Errno::EOPNOTSUPP);
                }
                if mask.0 & SrqAttrMask::LIMIT.0 != 0 {
                    if m.srq_limit > srq.rq.layout.slots() {
                        return Err(Errno::EINVAL);
                    }
                    srq.limit = m.srq_limit;
                }
                Ok(())
            }
            Request::QuerySrq(q) => {
                let srq = own(&self.res.srqs, ctx, q.srq_handle)?;
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
                let srq = own(&self.res.srqs, ctx, d.srq_handle)?;
                if srq.users != 0 {
                    return Err(Errno::EBUSY);
                }
                let r = DestroySrqResp {
                    events_reported: srq.events,
                };
                let pd = srq.pd;
                self.res.srqs.remove(d.srq_handle);
                self.pd_release(pd);
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

    fn cq_use(&mut self, cq: u32, delta: i32) {
        if let Some(c) = self.res.cqs.get_mut(cq) {
            c.users = c.users.saturating_add_signed(delta);
        }
    }

    // -----------------------------------------------------------------------------------
    // Context, device, port

    fn get_context(
        &mut self,
        ctx: CtxId,
        d: &UroceGetContext,
        resp: &mut Vec<u8>,
    ) -> Result<(), Errno> {
        if self.res.ctxs.contains_key(&ctx) || d.abi_version != UROCE_ABI_VERSION {
            return Err(Errno::EINVAL);
        }
        if self.res.ctxs.len() >= self.cfg.limits.max_contexts as usize {
            return Err(Errno::ENOMEM);
        }
        let layout = DoorbellLayout::new(d.doorbell_slots).map_err(ring_errno)?;
        if d.doorbell_len < layout.bytes() as u64 {
            return Err(Errno::EINVAL);
        }
        let mem = dma::shared_region(self.mem_space(), d.doorbell_addr, layout.bytes())?;
        let doorbells = DoorbellReceiver::attach(mem, 0, layout).map_err(ring_errno)?;
        let (lib_async, our_async) = sys::seqpacket_pair().map_err(|_| Errno::ENOMEM)?;
        let wake = self
            .engine
            .wake_fd()
            .try_clone_to_owned()
            .map_err(|_| Errno::ENOMEM)?;
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
            max_mw: 0,
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

    fn query_gid(&self, q: &QueryGid, resp: &mut Vec<u8>) -> Result<(), Errno> {
        if q.port_num != 1 || q.index >= GID_TBL_LEN {
            return Err(Errno::EINVAL);
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

    fn reg_mr(&mut self, ctx: CtxId, r: &RegMr, resp: &mut Vec<u8>) -> Result<(), Errno> {
        own(&self.res.pds, ctx, r.pd_handle)?;
        // Optional bits may be ignored (IBV_ACCESS_OPTIONAL_RANGE; perftest sets RELAXED_ORDERING).
        let acc = r.access_flags & !AccessFlags::OPTIONAL_RANGE.0;
        let supported = AccessFlags::LOCAL_WRITE.0
            | AccessFlags::REMOTE_WRITE.0
            | AccessFlags::REMOTE_READ.0
            | AccessFlags::REMOTE_ATOMIC.0;
        if acc & !supported != 0 {
            // LOCAL_WRITE ..= FLUSH_PERSISTENT (docs/wire.md §7.3).
            let known = (1u32 << 10) - 1;
            return Err(if acc & !known == 0 {
                Errno::EOPNOTSUPP
            } else {
                Errno::EINVAL
            });
        }
        // ib_check_mr_access: remote write or atomic requires local write.
        let remote_w = AccessFlags::REMOTE_WRITE.0 | AccessFlags::REMOTE_ATOMIC.0;
        if acc & remote_w != 0 && acc & AccessFlags::LOCAL_WRITE.0 == 0 {
            return Err(Errno::EINVAL);
        }
        // ib_uverbs_reg_mr: start and iova must share their offset within a page.
        if (r.start ^ r.hca_va) & 0xfff != 0 || r.length == 0 {
            return Err(Errno::EINVAL);
        }
        r.hca_va.checked_add(r.length).ok_or(Errno::EINVAL)?;
        let write = acc & (AccessFlags::LOCAL_WRITE.0 | remote_w) != 0;
        let range = dma::user_range(self.mem_space(), r.start, r.length, write)?;
        self.next_mr_key = self.next_mr_key.wrapping_add(1);
        let key8 = u32::from(self.next_mr_key);
        let idx = self
            .res
            .mrs
            .insert(
                Mr {
                    ctx,
                    pd: r.pd_handle,
                    key: 0,
                    iova: r.hca_va,
                    length: r.length,
                    access: acc,
                    range,
                },
                self.cfg.limits.max_mr.min((1 << 24) - 1),
            )
            .ok_or(Errno::ENOMEM)?;
        // rxe: key = pool index << 8 | 8-bit key; lkey == rkey.
        let key = (idx << 8) | key8;
        if let Some(mr) = self.res.mrs.get_mut(idx) {
            mr.key = key;
        }
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

    fn create_comp_channel(&mut self, ctx: CtxId, resp: &mut Vec<u8>) -> Result<(), Errno> {
        let c = self.res.ctxs.get_mut(&ctx).ok_or(Errno::EINVAL)?;
        if c.channels >= self.cfg.limits.max_comp_channels {
            return Err(Errno::ENOMEM);
        }
        let (lib, ours) = sys::seqpacket_pair().map_err(|_| Errno::ENOMEM)?;
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
            .ok_or(Errno::ENOMEM)?;
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
    ) -> Result<(), Errno> {
        let l = &self.cfg.limits;
        if c.cqe == 0 || c.cqe > l.max_cqe || c.comp_vector != 0 {
            return Err(Errno::EINVAL);
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
            Some(found.ok_or(Errno::EBADF)?)
        };
        let (mem, layout) = attach_ring(self.mem_space(), &d.ring)?;
        if layout.slots() < c.cqe
            || layout.slots() > l.max_cqe.next_power_of_two()
            || layout.elem_size() < CQE_BYTES
        {
            return Err(Errno::EINVAL);
        }
        let ring = Producer::attach(mem.clone(), 0, layout).map_err(ring_errno)?;
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
                    watched: false,
                },
                self.cfg.limits.max_cq,
            )
            .ok_or(Errno::ENOMEM)?;
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
    ) -> Result<(), Errno> {
        let max = self.cfg.limits.max_cqe;
        own(&self.res.cqs, ctx, c.cq_handle)?;
        let in_flight = self.signaled_in_flight(c.cq_handle)?;
        let cq = own_mut(&mut self.res.cqs, ctx, c.cq_handle)?;
        if c.cqe == 0 || c.cqe > max {
            return Err(Errno::EINVAL);
        }
        let space = dma::Space::new(self.space, self.maps.as_ref());
        let (mem, layout) = attach_ring(space, &d.ring)?;
        if layout.slots() < c.cqe
            || layout.slots() > max.next_power_of_two()
            || layout.elem_size() < CQE_BYTES
        {
            return Err(Errno::EINVAL);
        }
        let mut old = Consumer::attach(cq.mem.clone(), 0, cq.layout).map_err(ring_errno)?;
        let pending = old.available().map_err(ring_errno)?;
        // Never fewer slots than completions the CQ still owes the application: the CQEs not
        // yet polled plus one for each signaled send WQE still in flight (rxe refuses only
        // the first part, `rxe_cq_chk_attr`; a shrink right after posting would otherwise
        // overrun the new ring and lose completions). Posted receives are not counted: they
        // complete only when a message arrives, as with any CQ sized by the application.
        if pending.saturating_add(in_flight) > layout.slots() {
            return Err(Errno::EINVAL);
        }
        let mut new = Producer::attach(mem.clone(), 0, layout).map_err(ring_errno)?;
        if new.free().map_err(ring_errno)? < layout.slots() {
            // The new ring must start empty.
            return Err(Errno::EINVAL);
        }
        for i in 0..pending {
            let cqe: Cqe = old.read_struct(i).map_err(ring_errno)?;
            new.stage_struct(&cqe).map_err(ring_errno)?;
        }
        new.publish().map_err(ring_errno)?;
        old.release(pending).map_err(ring_errno)?;
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
    fn signaled_in_flight(&mut self, cq: u32) -> Result<u32, Errno> {
        let mut n = 0u32;
        for (_, q) in self.qps.iter_mut_all().filter(|(_, q)| q.send_cq == cq) {
            let posted = q.sq.available().map_err(ring_errno)?;
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
    fn poll_cq(
        &mut self,
        ctx: CtxId,
        p: &PollCq,
        capacity: usize,
        resp: &mut Vec<u8>,
    ) -> Result<(), Errno> {
        let cq = own(&self.res.cqs, ctx, p.cq_handle)?;
        let mut cons = Consumer::attach(cq.mem.clone(), 0, cq.layout).map_err(ring_errno)?;
        let avail = cons.available().map_err(ring_errno)?;
        let n = avail.min(p.max_entries(capacity));
        let mut wcs = Vec::with_capacity(n as usize);
        for i in 0..n {
            let cqe: Cqe = cons.read_struct(i).map_err(ring_errno)?;
            wcs.push(cqe.wc);
        }
        cons.release(n).map_err(ring_errno)?;
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
    ) -> Result<(), Errno> {
        let l = self.cfg.limits;
        let ty = match QpType::from_u8(c.qp_type) {
            Some(t) => t,
            None if abi::QpType(u32::from(c.qp_type)).is_known() => return Err(Errno::EOPNOTSUPP),
            None => return Err(Errno::EINVAL),
        };
        if c.reserved != 0 || c.is_srq > 1 || c.sq_sig_all > 1 {
            return Err(Errno::EINVAL);
        }
        own(&self.res.pds, ctx, c.pd_handle)?;
        own(&self.res.cqs, ctx, c.send_cq_handle)?;
        own(&self.res.cqs, ctx, c.recv_cq_handle)?;
        let srq = if c.is_srq != 0 {
            own(&self.res.srqs, ctx, c.srq_handle)?;
            if d.rq != RingDesc::default() {
                return Err(Errno::EINVAL);
            }
            Some(c.srq_handle)
        } else {
            None
        };
        if c.max_send_wr > l.max_qp_wr
            || c.max_send_sge > l.max_sge
            || c.max_inline_data > l.max_inline_data
            || (srq.is_none() && (c.max_recv_wr > l.max_qp_wr || c.max_recv_sge > l.max_sge))
        {
            return Err(Errno::EINVAL);
        }
        // Send queue ring: enough slots, and slots big enough for the SGEs / inline asked.
        let (sq_mem, sq_layout) = attach_ring(self.mem_space(), &d.sq)?;
        let (sq_sge, sq_inline) = send_caps_for_elem(sq_layout.elem_size());
        let max_send_sge = sq_sge.min(l.max_sge);
        let max_inline = sq_inline.min(l.max_inline_data).min(MAX_INLINE_DATA);
        if sq_layout.slots() < c.max_send_wr.max(1)
            || sq_layout.slots() > l.max_qp_wr.next_power_of_two()
            || max_send_sge < c.max_send_sge
            || max_inline < c.max_inline_data
        {
            return Err(Errno::EINVAL);
        }
        let sq = Consumer::attach(sq_mem.clone(), 0, sq_layout).map_err(ring_errno)?;
        let rq = match srq {
            Some(_) => None,
            None => {
                let (mem, layout) = attach_ring(self.mem_space(), &d.rq)?;
                let max_sge = ((layout.elem_size() as usize - RECV_WQE_HDR_BYTES)
                    / abi::uverbs::Sge::SIZE) as u32;
                let max_sge = max_sge.min(MAX_SGE).min(l.max_sge);
                if layout.slots() < c.max_recv_wr.max(1)
                    || layout.slots() > l.max_qp_wr.next_power_of_two()
                    || max_sge < c.max_recv_sge
                    || recv_wqe_size(c.max_recv_sge).is_none()
                {
                    return Err(Errno::EINVAL);
                }
                let ring = Consumer::attach(mem.clone(), 0, layout).map_err(ring_errno)?;
                Some(RecvRing {
                    mem,
                    layout,
                    ring,
                    max_sge,
                })
            }
        };
        let db_slot = {
            let cx = self.res.ctxs.get(&ctx).ok_or(Errno::EINVAL)?;
            cx.db_slots
                .iter()
                .position(Option::is_none)
                .ok_or(Errno::ENOMEM)? as u32
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
            pd: c.pd_handle,
            send_cq: c.send_cq_handle,
            recv_cq: c.recv_cq_handle,
            srq,
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
            dest_raw: QpDest::default(),
            alt_raw: QpDest::default(),
            alt_pkey_index: 0,
            alt_port: 0,
            alt_timeout: 0,
            events_reported: 0,
            in_ready: false,
            timer: None,
            in_err_list: false,
            owes_signal: false,
        };
        let qpn = self
            .qps
            .insert_rotating(qpo, l.max_qp)
            .ok_or(Errno::ENOMEM)?;
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
        self.pd_use(c.pd_handle);
        self.cq_use(c.send_cq_handle, 1);
        self.cq_use(c.recv_cq_handle, 1);
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

    fn query_qp(&self, ctx: CtxId, q: &QueryQp, resp: &mut Vec<u8>) -> Result<(), Errno> {
        let qpo = own(&self.qps, ctx, q.qp_handle)?;
        let a = qpo.qp.query();
        push(
            resp,
            &QueryQpResp {
                dest: qpo.dest_raw,
                alt_dest: qpo.alt_raw,
                max_send_wr: qpo.caps.max_send_wr,
                max_recv_wr: qpo.caps.max_recv_wr,
                max_send_sge: qpo.caps.max_send_sge,
                max_recv_sge: qpo.caps.max_recv_sge,
                max_inline_data: qpo.caps.max_inline,
                qkey: a.qkey.0,
                rq_psn: a.rq_psn.value(),
                sq_psn: a.sq_psn.value(),
                dest_qp_num: a.dest_qp_num.value(),
                qp_access_flags: a.qp_access_flags.0,
                pkey_index: a.pkey_index,
                alt_pkey_index: qpo.alt_pkey_index,
                qp_state: a.qp_state as u8,
                cur_qp_state: a.qp_state as u8,
                path_mtu: a.path_mtu as u8,
                path_mig_state: a.path_mig_state,
                sq_draining: u8::from(a.sq_draining),
                max_rd_atomic: a.max_rd_atomic,
                max_dest_rd_atomic: a.max_dest_rd_atomic,
                min_rnr_timer: a.min_rnr_timer,
                port_num: a.port_num,
                timeout: a.timeout,
                retry_cnt: a.retry_cnt,
                rnr_retry: a.rnr_retry,
                alt_port_num: qpo.alt_port,
                alt_timeout: qpo.alt_timeout,
                sq_sig_all: u8::from(qpo.sq_sig_all),
                reserved: [0; 5],
            },
        );
        Ok(())
    }

    /// MODIFY_QP: device checks (AV, P_Key index, RD atomic limits), then the transport's
    /// transition table and value checks (docs/wire.md §6.2); any failure is EINVAL.
    fn modify_qp(&mut self, ctx: CtxId, m: &ModifyQp) -> Result<(), Errno> {
        let dev_ip = self.dev_ip();
        let max_rd = self.cfg.limits.max_qp_rd_atom;
        let port_mtu = self.cfg.mtu().unwrap_or(Mtu::Mtu1024);
        let qpo = own_mut(&mut self.qps, ctx, m.qp_handle)?;
        let mask = AttrMask(m.attr_mask);
        let mut a = QpAttr::default();
        if mask.contains(AttrMask::STATE) {
            a.qp_state = QpState::from_u8(m.qp_state).ok_or(Errno::EINVAL)?;
        }
        if mask.contains(AttrMask::CUR_STATE) {
            a.cur_qp_state = QpState::from_u8(m.cur_qp_state).ok_or(Errno::EINVAL)?;
        }
        if mask.contains(AttrMask::PATH_MTU) {
            a.path_mtu = Mtu::from_u8(m.path_mtu).ok_or(Errno::EINVAL)?;
        }
        if mask.contains(AttrMask::PKEY_INDEX) && m.pkey_index >= PKEY_TBL_LEN {
            return Err(Errno::EINVAL);
        }
        if mask.contains(AttrMask::DEST_QPN) && m.dest_qp_num > 0xff_ffff {
            return Err(Errno::EINVAL);
        }
        if (mask.contains(AttrMask::MAX_QP_RD_ATOMIC) && u32::from(m.max_rd_atomic) > max_rd)
            || (mask.contains(AttrMask::MAX_DEST_RD_ATOMIC)
                && u32::from(m.max_dest_rd_atomic) > max_rd)
        {
            return Err(Errno::EINVAL);
        }
        let av = if mask.contains(AttrMask::AV) {
            let dd = &m.dest;
            Some(dest_from(
                dd.dgid,
                dd.flow_label,
                dd.sgid_index,
                dd.hop_limit,
                dd.traffic_class,
                dd.is_global,
                dev_ip,
            )?)
        } else {
            None
        };
        if mask.contains(AttrMask::ALT_PATH) {
            let ad = &m.alt_dest;
            dest_from(
                ad.dgid,
                ad.flow_label,
                ad.sgid_index,
                ad.hop_limit,
                ad.traffic_class,
                ad.is_global,
                dev_ip,
            )?;
            if m.alt_pkey_index >= PKEY_TBL_LEN || m.alt_port_num != 1 || m.alt_timeout > 31 {
                return Err(Errno::EINVAL);
            }
        }
        a.path_mig_state = m.path_mig_state;
        a.qkey = Qkey(m.qkey);
        a.rq_psn = Psn::new(m.rq_psn);
        a.sq_psn = Psn::new(m.sq_psn);
        a.dest_qp_num = Qpn::new(m.dest_qp_num);
        a.qp_access_flags = transport::AccessFlags(m.qp_access_flags);
        a.pkey_index = m.pkey_index;
        a.en_sqd_async_notify = m.en_sqd_async_notify != 0;
        a.max_rd_atomic = m.max_rd_atomic;
        a.max_dest_rd_atomic = m.max_dest_rd_atomic;
        a.min_rnr_timer = m.min_rnr_timer;
        a.port_num = m.port_num;
        a.timeout = m.timeout;
        a.retry_cnt = m.retry_cnt;
        a.rnr_retry = m.rnr_retry;
        qpo.qp.modify(&a, mask).map_err(|_| Errno::EINVAL)?;
        if let Some(av) = av {
            qpo.av = Some(av);
            qpo.dest_raw = m.dest;
        }
        if mask.contains(AttrMask::ALT_PATH) {
            qpo.alt_raw = m.alt_dest;
            qpo.alt_pkey_index = m.alt_pkey_index;
            qpo.alt_port = m.alt_port_num;
            qpo.alt_timeout = m.alt_timeout;
        }
        qpo.qp.set_port_mtu(port_mtu);
        if qpo.qp.state() == QpState::Reset {
            // RESET empties the rings without completions (docs/wire.md §6.2 notes).
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
            if mask.contains(AttrMask::STATE) {
                qpo.av = None;
                qpo.dest_raw = QpDest::default();
            }
        }
        let idx = m.qp_handle;
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
        self.retired.accumulate(q.qp.counters());
        if q.owes_signal {
            self.res.owing_qps = self.res.owing_qps.saturating_sub(1);
        }
        if let Some(cx) = self.res.ctxs.get_mut(&q.ctx) {
            if let Some(s) = cx.db_slots.get_mut(q.db_slot as usize) {
                *s = None;
            }
        }
        self.pd_release(q.pd);
        self.cq_use(q.send_cq, -1);
        self.cq_use(q.recv_cq, -1);
        if let Some(s) = q.srq.and_then(|s| self.res.srqs.get_mut(s)) {
            s.users = s.users.saturating_sub(1);
        }
        self.recount_remote();
        q.events_reported
    }

    // -----------------------------------------------------------------------------------
    // Slow-path posting: write exactly the WQEs the library's fast path would, into the
    // same rings, then ring the doorbell internally (rxe's post via write()).

    fn post_send(&mut self, ctx: CtxId, c: &PostSend, list: &WrList<'_>) -> Result<(), Errno> {
        let qpo = own(&self.qps, ctx, c.qp_handle)?;
        if matches!(
            qpo.qp.state(),
            QpState::Reset | QpState::Init | QpState::Rtr
        ) {
            return Err(Errno::EINVAL);
        }
        if list.is_empty() {
            // A null post: only a doorbell.
            self.make_ready(c.qp_handle);
            return Ok(());
        }
        let mut prod =
            Producer::attach(qpo.sq_mem.clone(), 0, qpo.sq_layout).map_err(ring_errno)?;
        if (prod.free().map_err(ring_errno)? as usize) < list.len() {
            return Err(Errno::ENOMEM);
        }
        // Validate everything first: either every WR is queued or none is.
        let mut staged: Vec<(SendWqe, Vec<u8>)> = Vec::with_capacity(list.len());
        for (wr, sges) in list.send_wrs() {
            staged.push(self.build_send_wqe(ctx, qpo, &wr, &sges)?);
        }
        for (hdr, payload) in &staged {
            prod.stage_parts(&[hdr.as_bytes(), payload])
                .map_err(ring_errno)?;
        }
        prod.publish().map_err(ring_errno)?;
        self.make_ready(c.qp_handle);
        Ok(())
    }

    fn build_send_wqe(
        &self,
        ctx: CtxId,
        qpo: &QpObj,
        wr: &SendWr,
        sges: &SgeList<'_>,
    ) -> Result<(SendWqe, Vec<u8>), Errno> {
        let op = transport::WrOpcode::from_u32(wr.opcode).ok_or(Errno::EINVAL)?;
        let ok = match qpo.ty {
            QpType::Rc => true,
            QpType::Uc => {
                op.is_write()
                    || matches!(
                        op,
                        transport::WrOpcode::Send | transport::WrOpcode::SendWithImm
                    )
            }
            QpType::Ud => matches!(
                op,
                transport::WrOpcode::Send | transport::WrOpcode::SendWithImm
            ),
        };
        let known_flags = SendFlags::FENCE.0
            | SendFlags::SIGNALED.0
            | SendFlags::SOLICITED.0
            | SendFlags::INLINE.0;
        if !ok || wr.send_flags & !known_flags != 0 {
            return Err(Errno::EINVAL);
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
        if qpo.ty == QpType::Ud {
            let u = wr.ud();
            let ah = own(&self.res.ahs, ctx, u.ah)?;
            if ah.pd != qpo.pd || u.remote_qpn > 0xff_ffff {
                return Err(Errno::EINVAL);
            }
            hdr.ah = u.ah;
            hdr.remote_qpn = u.remote_qpn;
            hdr.remote_qkey = u.remote_qkey;
        }
        let inline = wr.send_flags & SendFlags::INLINE.0 != 0;
        if inline && op.is_read_or_atomic() {
            // READ and atomic results need a registered destination.
            return Err(Errno::EINVAL);
        }
        let payload = if inline {
            // Inline: the device copies the bytes now, with no lkey check (IBV_SEND_INLINE).
            let mut data = Vec::new();
            for s in sges.iter() {
                if data.len() + s.length as usize > qpo.caps.max_inline as usize {
                    return Err(Errno::EINVAL);
                }
                if s.length == 0 {
                    continue;
                }
                let r = dma::user_range(self.mem_space(), s.addr, u64::from(s.length), false)?;
                let start = data.len();
                data.resize(start + s.length as usize, 0);
                if !r.read(0, &mut data[start..]) {
                    return Err(Errno::EFAULT);
                }
            }
            hdr.inline_len = data.len() as u16;
            data
        } else {
            if sges.len() > qpo.caps.max_send_sge as usize {
                return Err(Errno::EINVAL);
            }
            hdr.num_sge = sges.len() as u16;
            sges.0.to_vec()
        };
        Ok((hdr, payload))
    }

    /// POST_RECV; returns whether the engine must look (the QP is in ERR: flush).
    fn post_recv(&mut self, ctx: CtxId, c: &PostRecv, list: &WrList<'_>) -> Result<bool, Errno> {
        let qpo = own(&self.qps, ctx, c.qp_handle)?;
        let state = qpo.qp.state();
        let rq = match &qpo.rq {
            Some(rq) if state != QpState::Reset => rq,
            _ => return Err(Errno::EINVAL),
        };
        post_recv_ring(rq, list)?;
        if flushes_receives(state) {
            self.make_ready(c.qp_handle);
            return Ok(true);
        }
        Ok(false)
    }

    fn post_srq_recv(
        &mut self,
        ctx: CtxId,
        c: &PostSrqRecv,
        list: &WrList<'_>,
    ) -> Result<(), Errno> {
        let srq = own(&self.res.srqs, ctx, c.srq_handle)?;
        post_recv_ring(&srq.rq, list)
    }

    fn create_srq(
        &mut self,
        ctx: CtxId,
        c: &CreateSrq,
        d: &UroceCreateSrq,
        resp: &mut Vec<u8>,
    ) -> Result<(), Errno> {
        let l = self.cfg.limits;
        own(&self.res.pds, ctx, c.pd_handle)?;
        if c.max_wr == 0 || c.max_wr > l.max_srq_wr || c.max_sge > l.max_srq_sge {
            return Err(Errno::EINVAL);
        }
        let (mem, layout) = attach_ring(self.mem_space(), &d.ring)?;
        let max_sge =
            (((layout.elem_size() as usize - RECV_WQE_HDR_BYTES) / abi::uverbs::Sge::SIZE) as u32)
                .min(MAX_SGE)
                .min(l.max_srq_sge);
        if layout.slots() < c.max_wr
            || layout.slots() > l.max_srq_wr.next_power_of_two()
            || max_sge < c.max_sge
            || c.srq_limit > layout.slots()
        {
            return Err(Errno::EINVAL);
        }
        let ring = Consumer::attach(mem.clone(), 0, layout).map_err(ring_errno)?;
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
                },
                l.max_srq,
            )
            .ok_or(Errno::ENOMEM)?;
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
        for q in self.qps.indices_where(|q| q.ctx == ctx) {
            self.destroy_qp(q);
        }
        for i in self.res.srqs.indices_where(|o| o.ctx == ctx) {
            self.res.srqs.remove(i);
        }
        for i in self.res.cqs.indices_where(|o| o.ctx == ctx) {
            self.res.cqs.remove(i);
        }
        for i in self.res.ahs.indices_where(|o| o.ctx == ctx) {
            self.res.ahs.remove(i);
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
        self.gsi.close_context(ctx, now);
        self.arm_gsi();
        self.res.ctxs.remove(&ctx);
        if self.hermetic && self.res.ctxs.is_empty() {
            // Nothing can hold a key or QPN of this device any more (no peers, no
            // contexts): start both sequences over.
            self.next_mr_key = 0;
            self.qps.reset_rotation();
        }
    }
}

/// Queue receive WQEs into an RQ/SRQ ring as the library would (all or nothing).
fn post_recv_ring(rq: &RecvRing, list: &WrList<'_>) -> Result<(), Errno> {
    let mut prod = Producer::attach(rq.mem.clone(), 0, rq.layout).map_err(ring_errno)?;
    if (prod.free().map_err(ring_errno)? as usize) < list.len() {
        return Err(Errno::ENOMEM);
    }
    for (_, sges) in list.recv_wrs() {
        if sges.len() > rq.max_sge as usize {
            return Err(Errno::EINVAL);
        }
    }
    for (wr, sges) in list.recv_wrs() {
        let hdr = RecvWqe {
            wr_id: wr.wr_id,
            num_sge: sges.len() as u32,
            reserved: 0,
        };
        prod.stage_parts(&[hdr.as_bytes(), sges.0])
            .map_err(ring_errno)?;
    }
    prod.publish().map_err(ring_errno)?;
    Ok(())
}
