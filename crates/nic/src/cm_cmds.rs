//! UROCE_CM: the Communication Manager's command set on a context (the part of the kernel's
//! `ib_ucm`/`rdma_ucm` character devices a device plays). Each CM ID belongs to the context
//! that created it (a connection request's ID to its listener's context); another context's
//! ID is EINVAL, as any foreign handle is. A QP named in CONNECT or ACCEPT must be one of the
//! caller's RC/UC QPs. Events go to the owner's event channel (CREATE_CHANNEL).

use std::os::fd::IntoRawFd;

use abi::uverbs::{cm_op, CmCmd, CmCmdResp};
use abi::{Errno, Rule};
use cm::{AcceptParams, CmError, CmId, ConnectParams};
use transport::wire::cm::{Ece, RejReason, ServiceId, SidrStatus};
use transport::wire::{Psn, Qkey, Qpn};
use transport::Service;

use crate::cmds::Refusal;
use crate::state::{gid_to_ip, CtxId, DevState};
use crate::sys;

type Res<T> = Result<T, Refusal>;

/// The refusal for what the CM said about operation `op`.
fn cm_refusal(op: &'static str) -> impl Fn(CmError) -> Refusal {
    move |e| {
        let rule = match e {
            CmError::UnknownId => Rule::BAD_HANDLE,
            CmError::InvalidState => Rule::WRONG_STATE,
            CmError::PrivateDataTooLong => Rule::OVER_LIMIT,
            CmError::AddressInUse => Rule::IN_USE,
        };
        Refusal::new(Errno(e.errno()), rule, format!("{op}: {e}"))
    }
}

fn inval(rule: Rule, detail: String) -> Refusal {
    Refusal::new(Errno::EINVAL, rule, detail)
}

impl DevState {
    /// One UROCE_CM command from context `ctx`.
    pub(crate) fn cm_command(&mut self, ctx: CtxId, c: &CmCmd, resp: &mut Vec<u8>) -> Res<()> {
        let now = self.engine.now();
        let r = self.cm_op(ctx, c, now);
        self.gsi.collect();
        self.arm_gsi();
        let out = r?;
        resp.extend_from_slice(zerocopy::IntoBytes::as_bytes(&out));
        Ok(())
    }

    fn cm_owned(&self, ctx: CtxId, id: u32) -> Res<CmId> {
        match self.gsi.owners.get(&id) {
            Some(o) if *o == ctx => Ok(CmId(id)),
            _ => Err(inval(
                Rule::BAD_HANDLE,
                format!("CM ID {id} names no CM ID of this context"),
            )),
        }
    }

    /// `qpn` is one of `ctx`'s connected-service QPs.
    fn cm_qp(&self, ctx: CtxId, qpn: u32) -> Res<Qpn> {
        match self.qps.get(qpn) {
            Some(q) if q.ctx == ctx && matches!(q.ty, Service::Rc | Service::Uc) => {
                Ok(Qpn::new(qpn))
            }
            _ => Err(inval(
                Rule::BAD_HANDLE,
                format!("qpn {qpn} is no RC or UC QP of this context"),
            )),
        }
    }

    fn cm_op(&mut self, ctx: CtxId, c: &CmCmd, now: transport::Time) -> Res<CmCmdResp> {
        let mut out = CmCmdResp::default();
        let cm_pd = c.pd();
        if usize::from(c.pd_len) > cm_pd.len() {
            return Err(inval(
                Rule::OVER_LIMIT,
                format!(
                    "pd_len {} > {} bytes of private data",
                    c.pd_len,
                    cm_pd.len()
                ),
            ));
        }
        let ece_op = matches!(c.op, cm_op::CONNECT | cm_op::ACCEPT);
        if c.flags & !CmCmd::FLAG_ECE != 0 || (c.flags & CmCmd::FLAG_ECE != 0 && !ece_op) {
            return Err(inval(
                Rule::BAD_VALUE,
                format!(
                    "flags {:#x}: unknown, or ECE with an operation other than CONNECT and ACCEPT",
                    c.flags
                ),
            ));
        }
        // Enhanced Connection Establishment in the REQ/REP (docs/wire.md §5.6).
        let ece = if c.flags & CmCmd::FLAG_ECE != 0 {
            Ece::uroce(c.qkey)
        } else {
            Ece::NONE
        };
        match c.op {
            cm_op::CREATE_CHANNEL => {
                if self.gsi.chans.contains_key(&ctx) {
                    return Err(Refusal::new(
                        Errno::EEXIST,
                        Rule::IN_USE,
                        "the context already has a CM event channel",
                    ));
                }
                let (lib, ours) = sys::seqpacket_pair().map_err(|e| {
                    Refusal::new(
                        Errno::ENOMEM,
                        Rule::SYSTEM,
                        format!("CM event channel socketpair: {e}"),
                    )
                })?;
                self.gsi.chans.insert(ctx, ours);
                out.fd = lib.into_raw_fd() as u32;
            }
            cm_op::LISTEN => {
                let bind = (c.bind != [0u8; 16]).then(|| gid_to_ip(c.bind));
                let id = self
                    .gsi
                    .cm
                    .listen(ServiceId(c.service_id), bind)
                    .map_err(cm_refusal("listen"))?;
                // On a daemon's device the service ID must be ours host-wide.
                if let Some(l) = &self.daemon {
                    if let Err(e) = l.listen(c.service_id) {
                        self.gsi.cm.destroy(now, id);
                        return Err(Refusal::new(
                            Errno(e.raw_os_error().unwrap_or(libc::EADDRINUSE)),
                            Rule::IN_USE,
                            format!(
                                "listen: service ID {:#x} is taken on this device by another process ({e})",
                                c.service_id
                            ),
                        ));
                    }
                }
                self.gsi.owners.insert(id.0, ctx);
                out.id = id.0;
            }
            cm_op::CONNECT => {
                if c.peer == [0u8; 16] || c.transport_type > 1 {
                    return Err(inval(
                        Rule::BAD_VALUE,
                        format!(
                            "connect: peer unspecified or transport_type {} not RC (0) or UC (1)",
                            c.transport_type
                        ),
                    ));
                }
                let p = ConnectParams {
                    peer: gid_to_ip(c.peer),
                    service_id: ServiceId(c.service_id),
                    local_gid: c.local_gid,
                    remote_gid: c.remote_gid,
                    local_qpn: self.cm_qp(ctx, c.qpn)?,
                    starting_psn: Psn::new(c.psn),
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth,
                    retry_count: c.retry_count,
                    rnr_retry_count: c.rnr_retry_count,
                    path_mtu: c.path_mtu,
                    transport_type: c.transport_type,
                    srq: c.srq != 0,
                    flow_label: c.flow_label,
                    traffic_class: c.traffic_class,
                    hop_limit: c.hop_limit,
                    private_data: cm_pd.to_vec(),
                    ece,
                };
                let id = self
                    .gsi
                    .cm
                    .connect(now, &p)
                    .map_err(cm_refusal("connect"))?;
                self.gsi.owners.insert(id.0, ctx);
                out.id = id.0;
            }
            cm_op::ACCEPT => {
                let id = self.cm_owned(ctx, c.id)?;
                let p = AcceptParams {
                    local_qpn: self.cm_qp(ctx, c.qpn)?,
                    starting_psn: Psn::new(c.psn),
                    responder_resources: c.responder_resources,
                    initiator_depth: c.initiator_depth,
                    rnr_retry_count: c.rnr_retry_count,
                    srq: c.srq != 0,
                    private_data: cm_pd.to_vec(),
                    ece,
                };
                self.gsi
                    .cm
                    .accept(now, id, &p)
                    .map_err(cm_refusal("accept"))?;
            }
            cm_op::REJECT => {
                let id = self.cm_owned(ctx, c.id)?;
                self.gsi.flush_before_reply = true;
                self.gsi
                    .cm
                    .reject(now, id, RejReason(c.reason), cm_pd)
                    .map_err(cm_refusal("reject"))?;
            }
            cm_op::ESTABLISH => {
                let id = self.cm_owned(ctx, c.id)?;
                self.gsi
                    .cm
                    .establish(now, id)
                    .map_err(cm_refusal("establish"))?;
            }
            cm_op::DISCONNECT => {
                let id = self.cm_owned(ctx, c.id)?;
                self.gsi.flush_before_reply = true;
                self.gsi
                    .cm
                    .disconnect(now, id)
                    .map_err(cm_refusal("disconnect"))?;
            }
            cm_op::NOTIFY => {
                let id = self.cm_owned(ctx, c.id)?;
                self.gsi
                    .cm
                    .established_by_data(id)
                    .map_err(cm_refusal("notify"))?;
            }
            cm_op::DESTROY => {
                let id = self.cm_owned(ctx, c.id)?;
                let before = self.gsi.cm.listening();
                self.gsi.cm.destroy(now, id);
                self.gsi.owners.remove(&id.0);
                self.release_listens(&before);
            }
            cm_op::SIDR_REQUEST => {
                if c.peer == [0u8; 16] {
                    return Err(inval(
                        Rule::BAD_VALUE,
                        "sidr_request: peer unspecified".to_string(),
                    ));
                }
                let id = self
                    .gsi
                    .cm
                    .sidr_request(now, gid_to_ip(c.peer), ServiceId(c.service_id), cm_pd)
                    .map_err(cm_refusal("sidr_request"))?;
                self.gsi.owners.insert(id.0, ctx);
                out.id = id.0;
            }
            cm_op::SIDR_REPLY => {
                let id = self.cm_owned(ctx, c.id)?;
                self.gsi
                    .cm
                    .sidr_reply(
                        now,
                        id,
                        SidrStatus(c.status),
                        Qpn::new(c.qpn),
                        Qkey(c.qkey),
                        cm_pd,
                    )
                    .map_err(cm_refusal("sidr_reply"))?;
                // A SIDR lookup ends with its answer.
                self.gsi.owners.remove(&id.0);
            }
            op => {
                return Err(inval(
                    Rule::BAD_VALUE,
                    format!("op {op} is no CM operation"),
                ))
            }
        }
        Ok(out)
    }
}
