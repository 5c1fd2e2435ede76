//! A tiny fake device for verbs' own tests: a control plane on the other end of a
//! socketpair that decodes commands with abi's decoder and answers with its reply encoder,
//! and a toy engine thread that drains the doorbell page, consumes send WQEs, records them
//! and writes success CQEs (with the engine side of the parked protocol). It checks what
//! the library puts on the wire and in the rings; it moves no data.
#![allow(dead_code, unsafe_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use abi::cmd::{encode_reply, CmdHdr, Command};
use abi::doorbell::{DoorbellLayout, DoorbellReceiver};
use abi::fastpath::{Cqe, RecvWqe, SendPayload, SendWqe, WqeLimits};
use abi::provider::{DeviceSpec, Provider};
use abi::ring::{Consumer, Producer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::*;
use abi::{Errno, QpState, SendFlags, WcStatus, WrOpcode};
use zerocopy::{FromBytes, IntoBytes};

/// What the engine saw: one consumed send WQE.
#[derive(Clone, Debug)]
pub struct SeenWqe {
    pub qpn: u32,
    pub wqe: SendWqe,
    pub sges: Vec<Sge>,
    pub inline: Vec<u8>,
    pub via_cmd: bool,
}

#[derive(Default)]
pub struct Shared {
    /// Every command number received, in order.
    pub commands: Vec<Command>,
    pub seen: Vec<SeenWqe>,
    /// REG_MR requests.
    pub reg_mrs: Vec<RegMr>,
    /// POST_RECV / POST_SRQ_RECV command WRs (wr_id, sges).
    pub cmd_recvs: Vec<(u64, Vec<Sge>)>,
    /// Wake-ups the engine received while parked.
    pub wakes: u64,
    /// Times the engine parked.
    pub parks: u64,
    /// Make the next QUERY_PKEY reply malformed.
    pub garble_next_pkey: bool,
    ctxs: Vec<Arc<Mutex<Ctx>>>,
}

pub struct FakeProvider {
    pub shared: Arc<(Mutex<Shared>, Condvar)>,
    /// Let the engine park (it then needs the wake fd); else it spins with short sleeps.
    pub parking: bool,
}

impl std::fmt::Debug for FakeProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FakeProvider")
    }
}

impl FakeProvider {
    pub fn new(parking: bool) -> Arc<FakeProvider> {
        Arc::new(FakeProvider {
            shared: Arc::new((Mutex::new(Shared::default()), Condvar::new())),
            parking,
        })
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut Shared) -> R) -> R {
        f(&mut self.shared.0.lock().unwrap())
    }

    /// Wait until `pred` holds (or panic after 5 s).
    pub fn wait_for(&self, what: &str, mut pred: impl FnMut(&Shared) -> bool) {
        let (m, cv) = &*self.shared;
        let mut g = m.lock().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !pred(&g) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            assert!(!left.is_zero(), "timed out waiting for {what}");
            g = cv.wait_timeout(g, left).unwrap().0;
        }
    }

    /// Consume up to `max` receive WQEs from QP `qpn`'s RQ ring (as the engine would).
    pub fn take_recvs(&self, qpn: u32, max: u32) -> Vec<(u64, Vec<Sge>)> {
        let ctxs = self.with(|s| s.ctxs.clone());
        for c in ctxs {
            let mut c = c.lock().unwrap();
            if let Some(qp) = c.qps.values_mut().find(|q| q.qpn == qpn) {
                let rq = qp.rq.as_mut().expect("QP has an RQ");
                return take_recv_wqes(rq, max);
            }
        }
        panic!("no QP {qpn}");
    }

    /// Consume up to `max` WQEs from SRQ number `srqn`.
    pub fn take_srq_recvs(&self, srqn: u32, max: u32) -> Vec<(u64, Vec<Sge>)> {
        let ctxs = self.with(|s| s.ctxs.clone());
        for c in ctxs {
            let mut c = c.lock().unwrap();
            if let Some(s) = c.srqs.get_mut(&srqn) {
                return take_recv_wqes(s, max);
            }
        }
        panic!("no SRQ {srqn}");
    }

    /// Queue an async event on every open context's async fd.
    pub fn raise_async(&self, event_type: u32, element: u64) {
        let ctxs = self.with(|s| s.ctxs.clone());
        for c in ctxs {
            let mut c = c.lock().unwrap();
            let d = AsyncEventDesc {
                element,
                event_type,
                reserved: 0,
            };
            c.async_w.write_all(d.as_bytes()).unwrap();
        }
    }

    /// Write a receive completion into the CQ with `user_handle`-less lookup by handle.
    pub fn complete(&self, cq_handle_of_qpn: u32, wc: Wc) {
        let ctxs = self.with(|s| s.ctxs.clone());
        for c in ctxs {
            let mut c = c.lock().unwrap();
            let Some(qp) = c.qps.values().find(|q| q.qpn == cq_handle_of_qpn) else {
                continue;
            };
            let h = qp.recv_cq;
            push_cqe(&mut c, h, wc);
            return;
        }
        panic!("no QP {cq_handle_of_qpn}");
    }
}

fn take_recv_wqes(rq: &mut RecvRing, max: u32) -> Vec<(u64, Vec<Sge>)> {
    let mut out = Vec::new();
    let n = rq.cons.available().unwrap().min(max);
    for i in 0..n {
        let mut slot = vec![0u8; rq.elem];
        rq.cons.read(i, 0, &mut slot).unwrap();
        let (hdr, sges) = RecvWqe::parse(&slot, 32).unwrap();
        out.push((hdr.wr_id, parse_sges(sges)));
    }
    rq.cons.release(n).unwrap();
    out
}

fn parse_sges(b: &[u8]) -> Vec<Sge> {
    b.chunks_exact(Sge::SIZE)
        .map(|c| Sge::read_from_bytes(c).unwrap())
        .collect()
}

struct RecvRing {
    cons: Consumer,
    elem: usize,
}

struct FakeCq {
    prod: Producer,
    mem: Arc<SharedMem>,
    user_handle: u64,
    channel: Option<i32>,
    armed: bool,
}

struct FakeQp {
    qpn: u32,
    sq: Consumer,
    sq_elem: usize,
    rq: Option<RecvRing>,
    send_cq: u32,
    recv_cq: u32,
    sq_sig_all: bool,
    state: QpState,
    doorbell: u32,
    max_sge: u32,
    max_inline: u32,
}

struct Ctx {
    doorbell: Option<DoorbellReceiver>,
    wake: Option<OwnedFd>,
    async_w: UnixStream,
    channels: HashMap<i32, UnixStream>,
    next_handle: u32,
    cqs: HashMap<u32, FakeCq>,
    qps: HashMap<u32, FakeQp>,
    srqs: HashMap<u32, RecvRing>,
    srq_by_handle: HashMap<u32, u32>,
    mrs: HashMap<u32, u32>,
    pds: Vec<u32>,
    closed: bool,
}

/// SAFETY contract for views: the library keeps ring and doorbell memory alive until the
/// DESTROY command (or context close) that drops the view has been answered.
fn view(addr: u64, len: u64) -> Arc<SharedMem> {
    // SAFETY: see above; all access through SharedMem is atomic.
    Arc::new(unsafe { SharedMem::from_raw_parts(addr as usize as *mut u8, len as usize) }.unwrap())
}

fn push_cqe(c: &mut Ctx, cq: u32, wc: Wc) {
    let Some(cq) = c.cqs.get_mut(&cq) else { return };
    let cqe = Cqe {
        wc,
        reserved: [0; 2],
    };
    cq.prod.push(cqe.as_bytes()).expect("fake CQ overflow");
    if cq.armed {
        cq.armed = false;
        if let Some(fd) = cq.channel {
            if let Some(w) = c.channels.get_mut(&fd) {
                let d = CompEventDesc {
                    cq_handle: cq.user_handle,
                };
                let _ = w.write_all(d.as_bytes());
            }
        }
    }
}

impl Provider for FakeProvider {
    fn open(&self, _device: &DeviceSpec) -> std::io::Result<UnixStream> {
        let (lib, cp) = UnixStream::pair()?;
        let (async_r, async_w) = UnixStream::pair()?;
        let ctx = Arc::new(Mutex::new(Ctx {
            doorbell: None,
            wake: None,
            async_w,
            channels: HashMap::new(),
            next_handle: 1,
            cqs: HashMap::new(),
            qps: HashMap::new(),
            srqs: HashMap::new(),
            srq_by_handle: HashMap::new(),
            mrs: HashMap::new(),
            pds: Vec::new(),
            closed: false,
        }));
        self.with(|s| s.ctxs.push(ctx.clone()));
        let shared = self.shared.clone();
        let parking = self.parking;
        let async_fd = async_r.into_raw_fd();
        let c2 = ctx.clone();
        let s2 = shared.clone();
        std::thread::spawn(move || control_plane(cp, ctx, shared, parking, async_fd));
        std::thread::spawn(move || engine(c2, s2));
        Ok(lib)
    }
}

fn read_request(s: &mut UnixStream) -> Option<Vec<u8>> {
    let mut hdr = [0u8; CmdHdr::SIZE];
    s.read_exact(&mut hdr).ok()?;
    let h = CmdHdr::read_from_bytes(&hdr).ok()?;
    let total = usize::from(h.in_words) * 4;
    let mut msg = hdr.to_vec();
    msg.resize(total.max(CmdHdr::SIZE), 0);
    s.read_exact(&mut msg[CmdHdr::SIZE..]).ok()?;
    Some(msg)
}

fn control_plane(
    mut s: UnixStream,
    ctx: Arc<Mutex<Ctx>>,
    shared: Arc<(Mutex<Shared>, Condvar)>,
    parking: bool,
    async_fd: i32,
) {
    let mut out = Vec::new();
    while let Some(msg) = read_request(&mut s) {
        let (frame, req) = match decode_request(&msg) {
            Ok(v) => v,
            Err(e) => {
                let word = u32::from_ne_bytes(msg[..4].try_into().unwrap());
                encode_reply(word, Err(e.errno()), 0, &mut out);
                s.write_all(&out).unwrap();
                continue;
            }
        };
        {
            let mut sh = shared.0.lock().unwrap();
            sh.commands.push(frame.command);
            if matches!(req, Request::QueryPkey(_)) && sh.garble_next_pkey {
                sh.garble_next_pkey = false;
                // A reply whose resp_len disagrees with its length.
                let mut bad = vec![0u8; 16];
                bad[..4].copy_from_slice(&frame.hdr.command.to_ne_bytes());
                bad[8..12].copy_from_slice(&100u32.to_ne_bytes());
                s.write_all(&bad).unwrap();
                continue;
            }
        }
        let result = handle(&ctx, &shared, req, parking, async_fd);
        let parts: Vec<&[u8]>;
        let r = match &result {
            Ok(bytes) => {
                parts = vec![bytes.as_slice()];
                Ok(parts.as_slice())
            }
            Err(e) => Err(*e),
        };
        encode_reply(frame.hdr.command, r, frame.response_capacity(), &mut out);
        s.write_all(&out).unwrap();
        shared.1.notify_all();
    }
    // EOF: tear the context down, then close our end (the library's confirmation).
    let mut c = ctx.lock().unwrap();
    c.closed = true;
    c.qps.clear();
    c.cqs.clear();
    c.srqs.clear();
    c.doorbell = None;
    drop(c);
    drop(s);
}

fn handle(
    ctx: &Arc<Mutex<Ctx>>,
    shared: &Arc<(Mutex<Shared>, Condvar)>,
    req: Request<'_>,
    parking: bool,
    async_fd: i32,
) -> Result<Vec<u8>, Errno> {
    let mut c = ctx.lock().unwrap();
    let h = c.next_handle;
    match req {
        Request::GetContext(_, d) => {
            if d.abi_version != UROCE_ABI_VERSION {
                return Err(Errno::EINVAL);
            }
            let layout = DoorbellLayout::new(d.doorbell_slots).map_err(|e| e.errno())?;
            let mem = view(d.doorbell_addr, d.doorbell_len);
            c.doorbell = Some(DoorbellReceiver::attach(mem, 0, layout).map_err(|e| e.errno())?);
            let wake_fd = if parking {
                // SAFETY: eventfd takes no pointers.
                let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
                assert!(fd >= 0);
                // SAFETY: a fresh descriptor nobody else owns.
                c.wake = Some(unsafe { OwnedFd::from_raw_fd(fd) });
                fd
            } else {
                -1
            };
            let mut v = GetContextResp {
                async_fd: async_fd as u32,
                num_comp_vectors: 1,
            }
            .as_bytes()
            .to_vec();
            v.extend_from_slice(
                UroceGetContextResp {
                    abi_version: UROCE_ABI_VERSION,
                    max_inline_data: 64,
                    wake_fd,
                    reserved: 0,
                }
                .as_bytes(),
            );
            Ok(v)
        }
        Request::QueryDevice(_) => Ok(QueryDeviceResp {
            vendor_id: 0xffffff,
            max_qp_wr: 1024,
            phys_port_cnt: 1,
            max_pkeys: 1,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()),
        Request::QueryPort(p) => {
            if p.port_num != 1 {
                return Err(Errno::EINVAL);
            }
            Ok(QueryPortResp {
                state: 4,
                max_mtu: 5,
                active_mtu: 3,
                gid_tbl_len: 1,
                link_layer: 2,
                ..Default::default()
            }
            .as_bytes()
            .to_vec())
        }
        Request::QueryGid(g) => {
            if g.index > 1 {
                return Err(Errno::EINVAL);
            }
            let mut gid = [0u8; 16];
            if g.index == 0 {
                gid[10] = 0xff;
                gid[11] = 0xff;
                gid[12..].copy_from_slice(&[127, 0, 0, 1]);
            }
            Ok(QueryGidResp {
                gid,
                gid_type: 2,
                flags: if g.index == 0 {
                    QueryGidResp::FLAG_VALID
                } else {
                    0
                },
            }
            .as_bytes()
            .to_vec())
        }
        Request::QueryPkey(_) => Ok(QueryPkeyResp {
            pkey: 0xffff,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()),
        Request::AllocPd(_) => {
            c.next_handle += 1;
            c.pds.push(h);
            Ok(AllocPdResp { pd_handle: h }.as_bytes().to_vec())
        }
        Request::DeallocPd(d) => {
            if c.mrs.values().any(|&pd| pd == d.pd_handle) {
                return Err(Errno::EBUSY);
            }
            c.pds.retain(|&p| p != d.pd_handle);
            Ok(vec![])
        }
        Request::RegMr(r) => {
            if !c.pds.contains(&r.pd_handle) {
                return Err(Errno::EINVAL);
            }
            c.next_handle += 1;
            c.mrs.insert(h, r.pd_handle);
            shared.0.lock().unwrap().reg_mrs.push(r);
            Ok(RegMrResp {
                mr_handle: h,
                lkey: 0x100 | h,
                rkey: 0x200 | h,
            }
            .as_bytes()
            .to_vec())
        }
        Request::DeregMr(d) => {
            c.mrs.remove(&d.mr_handle).ok_or(Errno::EINVAL)?;
            Ok(vec![])
        }
        Request::CreateCompChannel(_) => {
            let (r, w) = UnixStream::pair().map_err(|_| Errno::ENOMEM)?;
            let fd = r.into_raw_fd();
            c.channels.insert(fd, w);
            Ok(CreateCompChannelResp { fd: fd as u32 }.as_bytes().to_vec())
        }
        Request::CreateCq(cq, d) => {
            let layout = RingLayout::from_desc(&d.ring).map_err(|e| e.errno())?;
            if d.ring.elem_size < 64 {
                return Err(Errno::EINVAL);
            }
            let mem = view(d.ring.addr, d.ring.len);
            let prod = Producer::attach(mem.clone(), 0, layout).map_err(|e| e.errno())?;
            c.next_handle += 1;
            c.cqs.insert(
                h,
                FakeCq {
                    prod,
                    mem,
                    user_handle: cq.user_handle,
                    channel: (cq.comp_channel >= 0).then_some(cq.comp_channel),
                    armed: false,
                },
            );
            Ok(CreateCqResp {
                cq_handle: h,
                cqe: layout.slots(),
            }
            .as_bytes()
            .to_vec())
        }
        Request::DestroyCq(d) => {
            if c.qps
                .values()
                .any(|q| q.send_cq == d.cq_handle || q.recv_cq == d.cq_handle)
            {
                return Err(Errno::EBUSY);
            }
            c.cqs.remove(&d.cq_handle).ok_or(Errno::EINVAL)?;
            Ok(DestroyCqResp::default().as_bytes().to_vec())
        }
        Request::ReqNotifyCq(r) => {
            c.cqs.get_mut(&r.cq_handle).ok_or(Errno::EINVAL)?.armed = true;
            Ok(vec![])
        }
        Request::PollCq(p) => {
            let cq = c.cqs.get(&p.cq_handle).ok_or(Errno::EINVAL)?;
            // Consume from the ring as the library would.
            let mut cons =
                Consumer::attach(cq.mem.clone(), 0, cq.prod.layout()).map_err(|e| e.errno())?;
            let n = cons.available().map_err(|e| e.errno())?.min(p.ne);
            let mut wcs = Vec::new();
            for i in 0..n {
                wcs.push(cons.read_struct::<Wc>(i).unwrap());
            }
            cons.release(n).unwrap();
            let mut out = Vec::new();
            encode_poll_cq_resp(&wcs, &mut out);
            Ok(out)
        }
        Request::CreateQp(q, d) => {
            let sq_layout = RingLayout::from_desc(&d.sq).map_err(|e| e.errno())?;
            let sq =
                Consumer::attach(view(d.sq.addr, d.sq.len), 0, sq_layout).map_err(|e| e.errno())?;
            let rq = if q.is_srq == 0 {
                let l = RingLayout::from_desc(&d.rq).map_err(|e| e.errno())?;
                Some(RecvRing {
                    cons: Consumer::attach(view(d.rq.addr, d.rq.len), 0, l)
                        .map_err(|e| e.errno())?,
                    elem: l.elem_size() as usize,
                })
            } else {
                if d.rq != RingDesc::default() {
                    return Err(Errno::EINVAL);
                }
                None
            };
            if !c.cqs.contains_key(&q.send_cq_handle) || !c.cqs.contains_key(&q.recv_cq_handle) {
                return Err(Errno::EINVAL);
            }
            c.next_handle += 1;
            let qpn = 0x100 + h;
            let (max_sge, max_inline) = abi::fastpath::send_caps_for_elem(sq_layout.elem_size());
            c.qps.insert(
                h,
                FakeQp {
                    qpn,
                    sq,
                    sq_elem: sq_layout.elem_size() as usize,
                    rq,
                    send_cq: q.send_cq_handle,
                    recv_cq: q.recv_cq_handle,
                    sq_sig_all: q.sq_sig_all != 0,
                    state: QpState::Reset,
                    doorbell: h,
                    max_sge,
                    max_inline: max_inline.min(64),
                },
            );
            let mut v = CreateQpResp {
                qp_handle: h,
                qpn,
                max_send_wr: q.max_send_wr,
                max_recv_wr: q.max_recv_wr,
                max_send_sge: q.max_send_sge,
                max_recv_sge: q.max_recv_sge,
                max_inline_data: q.max_inline_data.min(64),
                reserved: 0,
            }
            .as_bytes()
            .to_vec();
            v.extend_from_slice(
                UroceCreateQpResp {
                    sq_doorbell: h,
                    reserved: 0,
                }
                .as_bytes(),
            );
            Ok(v)
        }
        Request::ModifyQp(m) => {
            let qp = c.qps.get_mut(&m.qp_handle).ok_or(Errno::EINVAL)?;
            if m.mask().contains(abi::QpAttrMask::STATE) {
                qp.state = m.state().ok_or(Errno::EINVAL)?;
            }
            Ok(vec![])
        }
        Request::QueryQp(q) => {
            let qp = c.qps.get(&q.qp_handle).ok_or(Errno::EINVAL)?;
            Ok(QueryQpResp {
                qp_state: qp.state as u8,
                cur_qp_state: qp.state as u8,
                path_mtu: abi::Mtu::Mtu1024 as u8,
                sq_sig_all: u8::from(qp.sq_sig_all),
                ..Default::default()
            }
            .as_bytes()
            .to_vec())
        }
        Request::DestroyQp(d) => {
            c.qps.remove(&d.qp_handle).ok_or(Errno::EINVAL)?;
            Ok(DestroyQpResp::default().as_bytes().to_vec())
        }
        Request::PostSend(p, list) => {
            let qp = c.qps.get(&p.qp_handle).ok_or(Errno::EINVAL)?;
            if qp.state < QpState::Rts {
                return Err(Errno::EINVAL);
            }
            let (qpn, cq, all) = (qp.qpn, qp.send_cq, qp.sq_sig_all);
            for (wr, sges) in list.send_wrs() {
                let mut wqe = SendWqe {
                    wr_id: wr.wr_id,
                    opcode: wr.opcode,
                    send_flags: wr.send_flags,
                    ex: wr.ex,
                    num_sge: wr.num_sge as u16,
                    ..Default::default()
                };
                match wr.op().ok_or(Errno::EINVAL)? {
                    WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd => {
                        let a = wr.atomic();
                        wqe.remote_addr = a.remote_addr;
                        wqe.rkey = a.rkey;
                        wqe.compare_add = a.compare_add;
                        wqe.swap = a.swap;
                    }
                    _ => {
                        let r = wr.rdma();
                        wqe.remote_addr = r.remote_addr;
                        wqe.rkey = r.rkey;
                    }
                }
                let mut seen = SeenWqe {
                    qpn,
                    wqe,
                    sges: sges.iter().collect(),
                    inline: vec![],
                    via_cmd: true,
                };
                if SendFlags(wr.send_flags).contains(SendFlags::INLINE) {
                    for s in std::mem::take(&mut seen.sges) {
                        // SAFETY: the library passes inline bytes it keeps borrowed for the
                        // whole command (verbs `encode_send_cmd`).
                        let b = unsafe {
                            std::slice::from_raw_parts(
                                s.addr as usize as *const u8,
                                s.length as usize,
                            )
                        };
                        seen.inline.extend_from_slice(b);
                    }
                }
                complete_send(&mut c, cq, all, &seen);
                shared.0.lock().unwrap().seen.push(seen);
            }
            Ok(PostResp { bad_wr: 0 }.as_bytes().to_vec())
        }
        Request::PostRecv(_, list) | Request::PostSrqRecv(_, list) => {
            let mut sh = shared.0.lock().unwrap();
            for (wr, sges) in list.recv_wrs() {
                sh.cmd_recvs.push((wr.wr_id, sges.iter().collect()));
            }
            Ok(PostResp { bad_wr: 0 }.as_bytes().to_vec())
        }
        Request::CreateSrq(q, d) => {
            let l = RingLayout::from_desc(&d.ring).map_err(|e| e.errno())?;
            c.next_handle += 1;
            let srqn = 0x500 + h;
            c.srqs.insert(
                srqn,
                RecvRing {
                    cons: Consumer::attach(view(d.ring.addr, d.ring.len), 0, l)
                        .map_err(|e| e.errno())?,
                    elem: l.elem_size() as usize,
                },
            );
            c.srq_by_handle.insert(h, srqn);
            Ok(CreateSrqResp {
                srq_handle: h,
                max_wr: q.max_wr,
                max_sge: q.max_sge,
                srqn,
            }
            .as_bytes()
            .to_vec())
        }
        Request::DestroySrq(d) => {
            let n = c.srq_by_handle.remove(&d.srq_handle).ok_or(Errno::EINVAL)?;
            c.srqs.remove(&n);
            Ok(DestroySrqResp::default().as_bytes().to_vec())
        }
        Request::CreateAh(_) => {
            c.next_handle += 1;
            Ok(CreateAhResp { ah_handle: h }.as_bytes().to_vec())
        }
        Request::DestroyAh(_) => Ok(vec![]),
        _ => Err(Errno::EOPNOTSUPP),
    }
}

fn complete_send(c: &mut Ctx, cq: u32, sig_all: bool, seen: &SeenWqe) {
    let flags = SendFlags(seen.wqe.send_flags);
    if !(sig_all || flags.contains(SendFlags::SIGNALED)) {
        return;
    }
    let op = WrOpcode::from_raw(seen.wqe.opcode).expect("the library writes known opcodes");
    let byte_len = if flags.contains(SendFlags::INLINE) {
        seen.inline.len() as u32
    } else {
        seen.sges.iter().map(|s| s.length).sum()
    };
    let wc = Wc {
        wr_id: seen.wqe.wr_id,
        status: WcStatus::Success.raw(),
        opcode: op.wc_opcode().raw(),
        byte_len,
        qp_num: seen.qpn,
        ..Default::default()
    };
    push_cqe(c, cq, wc);
}

fn engine(ctx: Arc<Mutex<Ctx>>, shared: Arc<(Mutex<Shared>, Condvar)>) {
    loop {
        let mut rung = Vec::new();
        let wake_fd;
        {
            let c = ctx.lock().unwrap();
            if c.closed {
                return;
            }
            let Some(db) = &c.doorbell else {
                drop(c);
                std::thread::sleep(Duration::from_millis(1));
                continue;
            };
            db.drain(|s| rung.push(s)).unwrap();
            wake_fd = c.wake.as_ref().map(|f| f.as_raw_fd());
        }
        if !rung.is_empty() {
            let mut c = ctx.lock().unwrap();
            let mut seen_all = Vec::new();
            let handles: Vec<u32> = c
                .qps
                .iter()
                .filter(|(_, q)| rung.contains(&q.doorbell))
                .map(|(h, _)| *h)
                .collect();
            for h in handles {
                let (cq, all, seen) = {
                    let qp = c.qps.get_mut(&h).unwrap();
                    let n = qp.sq.available().unwrap();
                    let mut seen = Vec::new();
                    for i in 0..n {
                        let mut slot = vec![0u8; qp.sq_elem];
                        qp.sq.read(i, 0, &mut slot).unwrap();
                        let (wqe, payload) = SendWqe::parse(
                            &slot,
                            WqeLimits {
                                max_sge: qp.max_sge,
                                max_inline: qp.max_inline,
                            },
                        )
                        .expect("library wrote a WQE the engine rejects");
                        let (sges, inline) = match payload {
                            SendPayload::Sges(b) => (parse_sges(b), vec![]),
                            SendPayload::Inline(d) => (vec![], d.to_vec()),
                        };
                        seen.push(SeenWqe {
                            qpn: qp.qpn,
                            wqe,
                            sges,
                            inline,
                            via_cmd: false,
                        });
                    }
                    qp.sq.release(n).unwrap();
                    (qp.send_cq, qp.sq_sig_all, seen)
                };
                for s in &seen {
                    complete_send(&mut c, cq, all, s);
                }
                seen_all.extend(seen);
            }
            drop(c);
            shared.0.lock().unwrap().seen.extend(seen_all);
            shared.1.notify_all();
            continue;
        }
        match wake_fd {
            Some(fd) => {
                // Park: announce, re-check, wait on the eventfd (token semantics).
                let may_block = {
                    let c = ctx.lock().unwrap();
                    match &c.doorbell {
                        Some(db) => db.prepare_park().unwrap(),
                        None => false,
                    }
                };
                if may_block {
                    shared.0.lock().unwrap().parks += 1;
                    shared.1.notify_all();
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    let n = unsafe { libc::poll(&mut p, 1, 200) };
                    if n > 0 {
                        let mut b = [0u8; 8];
                        // SAFETY: reads 8 bytes into a live local.
                        unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
                        shared.0.lock().unwrap().wakes += 1;
                    }
                    let c = ctx.lock().unwrap();
                    if let Some(db) = &c.doorbell {
                        db.finish_park().unwrap();
                    }
                }
            }
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    }
}
