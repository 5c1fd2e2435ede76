//! A raw ABI client for driving a live control plane over its socketpair, the way the
//! verbs library will: commands encoded with abi's encoders, rings and the doorbell page
//! allocated here with abi's helpers.
#![allow(dead_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use abi::cmd::{Reply, ReplyHdr};
use abi::doorbell::{DoorbellLayout, Doorbells, Wake, DOORBELL_PARKED_OFFSET};
use abi::fastpath::{recv_wqe_size, send_wqe_size, Cqe, RecvWqe, SendWqe, CQE_BYTES};
use abi::ring::{Consumer, Producer, RingLayout};
use abi::shm::SharedMem;
use abi::uverbs::*;
use abi::{Errno, Request};
use nic::{DeviceConfig, DeviceHandle};
use zerocopy::{FromBytes, IntoBytes};

pub const TIMEOUT: Duration = Duration::from_secs(20);

/// Start (or reuse) a device.
pub fn device(name: &str, ip: &str) -> DeviceHandle {
    let cfg = DeviceConfig::new(name, ip.parse::<IpAddr>().unwrap());
    nic::start_device(cfg).expect("start device")
}

pub fn gid(ip: &str) -> [u8; 16] {
    match ip.parse::<IpAddr>().unwrap() {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

struct Waker(File);

impl Wake for Waker {
    fn wake(&self) {
        let _ = (&self.0).write(&1u64.to_ne_bytes());
    }
}

/// One context.
pub struct Client {
    pub s: UnixStream,
    pub db_mem: Arc<SharedMem>,
    pub db: Doorbells,
    waker: Waker,
    pub async_ev: UnixDatagram,
    keep: Vec<Arc<SharedMem>>,
    pub wakes: u32,
}

pub struct Mr {
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

pub struct Cq {
    pub handle: u32,
    pub cons: Consumer,
    pub slots: u32,
}

pub struct QpH {
    pub handle: u32,
    pub qpn: u32,
    pub sq: Producer,
    pub rq: Option<Producer>,
    pub db_slot: u32,
    pub resp: CreateQpResp,
    sq_mem: Arc<SharedMem>,
    rq_mem: Option<Arc<SharedMem>>,
}

impl QpH {
    /// Re-read the producer indices from shared memory after slow-path posts (POST_SEND /
    /// POST_RECV commands advance them on our behalf).
    pub fn resync(&mut self) {
        self.sq = Producer::attach(self.sq_mem.clone(), 0, self.sq.layout()).unwrap();
        if let (Some(rq), Some(m)) = (self.rq.as_mut(), self.rq_mem.as_ref()) {
            *rq = Producer::attach(m.clone(), 0, rq.layout()).unwrap();
        }
    }
}

pub struct SrqH {
    pub handle: u32,
    pub ring: Producer,
}

/// Take ownership of an fd number the device handed us.
fn own_fd(fd: i32) -> OwnedFd {
    assert!(fd >= 0, "bad fd {fd}");
    // SAFETY: the device created this descriptor for us and nobody else owns it (the ABI
    // gives the library ownership of fds in replies).
    unsafe { OwnedFd::from_raw_fd(fd) }
}

pub fn ring_mem(layout: RingLayout) -> Arc<SharedMem> {
    let mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).unwrap());
    layout.init(&mem, 0).unwrap();
    mem
}

impl Client {
    /// Open a context: connection + GET_CONTEXT with a fresh doorbell page.
    pub fn connect(dev: &DeviceHandle) -> Client {
        let s = dev.open_context().unwrap();
        Client::from_stream(s)
    }

    pub fn from_stream(s: UnixStream) -> Client {
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let layout = DoorbellLayout::new(abi::doorbell::DEFAULT_DOORBELL_SLOTS).unwrap();
        let db_mem = Arc::new(SharedMem::new_zeroed(layout.bytes()).unwrap());
        layout.init(&db_mem, 0).unwrap();
        let db = Doorbells::attach(db_mem.clone(), 0, layout).unwrap();
        let mut s = s;
        let req = Request::GetContext(
            GetContext::default(),
            UroceGetContext {
                abi_version: UROCE_ABI_VERSION,
                doorbell_slots: layout.slots(),
                doorbell_addr: db_mem.addr(),
                doorbell_len: layout.bytes() as u64,
            },
        );
        let resp = call_on(&mut s, &req).expect("GET_CONTEXT");
        let (c, rest): (GetContextResp, _) = read_prefix(&resp, "ctx").unwrap();
        let (d, _): (UroceGetContextResp, _) = read_prefix(rest, "drv").unwrap();
        assert_eq!(c.num_comp_vectors, 1);
        assert_eq!(d.abi_version, UROCE_ABI_VERSION);
        let async_ev = UnixDatagram::from(own_fd(c.async_fd as i32));
        async_ev.set_read_timeout(Some(TIMEOUT)).unwrap();
        let waker = Waker(File::from(own_fd(d.wake_fd)));
        Client {
            s,
            db_mem,
            db,
            waker,
            async_ev,
            keep: Vec::new(),
            wakes: 0,
        }
    }

    /// Send raw bytes; return the raw reply (header + response), or the I/O error (EOF
    /// when the control plane closed the connection).
    pub fn raw(&mut self, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        raw_on(&mut self.s, bytes)
    }

    pub fn call(&mut self, req: &Request<'_>) -> Result<Vec<u8>, Errno> {
        call_on(&mut self.s, req)
    }

    /// Send `req`, expect a refusal, return its errno and reason (rule, text).
    pub fn refusal(&mut self, req: &Request<'_>) -> (Errno, Option<(abi::Rule, String)>) {
        let mut bytes = Vec::new();
        req.encode(&mut bytes).unwrap();
        let r = raw_on(&mut self.s, &bytes).expect("control plane answered");
        let reply = Reply::parse(&r).expect("well-formed reply");
        let errno = reply.result.expect_err("refused");
        (errno, reply.reason.map(|r| (r.rule, r.text.to_owned())))
    }

    pub fn alloc_pd(&mut self) -> u32 {
        let r = self.call(&Request::AllocPd(AllocPd::default())).unwrap();
        read_prefix::<AllocPdResp>(&r, "pd").unwrap().0.pd_handle
    }

    pub fn reg_mr(&mut self, pd: u32, buf: &mut [u8], access: u32) -> Result<Mr, Errno> {
        let addr = buf.as_mut_ptr() as u64;
        self.reg_mr_raw(pd, addr, buf.len() as u64, addr, access)
    }

    pub fn reg_mr_raw(
        &mut self,
        pd: u32,
        start: u64,
        length: u64,
        iova: u64,
        access: u32,
    ) -> Result<Mr, Errno> {
        let r = self.call(&Request::RegMr(RegMr {
            response: 0,
            start,
            length,
            hca_va: iova,
            pd_handle: pd,
            access_flags: access,
        }))?;
        let m = read_prefix::<RegMrResp>(&r, "mr").unwrap().0;
        Ok(Mr {
            handle: m.mr_handle,
            lkey: m.lkey,
            rkey: m.rkey,
        })
    }

    pub fn create_cq(&mut self, cqe: u32, chan_fd: i32, user_handle: u64) -> Result<Cq, Errno> {
        let layout = RingLayout::for_depth(cqe, CQE_BYTES).unwrap();
        let mem = ring_mem(layout);
        let r = self.call(&Request::CreateCq(
            CreateCq {
                response: 0,
                user_handle,
                cqe,
                comp_vector: 0,
                comp_channel: chan_fd,
                reserved: 0,
            },
            UroceCreateCq {
                ring: layout.desc(mem.addr()),
                ..Default::default()
            },
        ))?;
        let c = read_prefix::<CreateCqResp>(&r, "cq").unwrap().0;
        assert_eq!(c.cqe, layout.slots());
        self.keep.push(mem.clone());
        Ok(Cq {
            handle: c.cq_handle,
            cons: Consumer::attach(mem, 0, layout).unwrap(),
            slots: c.cqe,
        })
    }

    /// Create a QP with `depth` send and receive slots, 4 SGEs and 64 inline bytes.
    pub fn create_qp(
        &mut self,
        pd: u32,
        scq: u32,
        rcq: u32,
        qp_type: abi::QpType,
        depth: u32,
        srq: Option<u32>,
    ) -> Result<QpH, Errno> {
        let sq_layout = RingLayout::for_depth(depth, send_wqe_size(4, 64).unwrap()).unwrap();
        let sq_mem = ring_mem(sq_layout);
        let (rq_desc, rq_mem) = if srq.is_some() {
            (RingDesc::default(), None)
        } else {
            let l = RingLayout::for_depth(depth, recv_wqe_size(4).unwrap()).unwrap();
            let m = ring_mem(l);
            (l.desc(m.addr()), Some((m, l)))
        };
        let r = self.call(&Request::CreateQp(
            CreateQp {
                response: 0,
                user_handle: 0x1000 + u64::from(pd),
                pd_handle: pd,
                send_cq_handle: scq,
                recv_cq_handle: rcq,
                srq_handle: srq.unwrap_or(0),
                max_send_wr: depth,
                max_recv_wr: if srq.is_some() { 0 } else { depth },
                max_send_sge: 4,
                max_recv_sge: if srq.is_some() { 0 } else { 4 },
                max_inline_data: 64,
                sq_sig_all: 0,
                qp_type: qp_type.raw() as u8,
                is_srq: u8::from(srq.is_some()),
                reserved: 0,
            },
            UroceCreateQp {
                sq: sq_layout.desc(sq_mem.addr()),
                rq: rq_desc,
                ..UroceCreateQp::default()
            },
        ))?;
        let (c, rest): (CreateQpResp, _) = read_prefix(&r, "qp").unwrap();
        let (d, _): (UroceCreateQpResp, _) = read_prefix(rest, "qpd").unwrap();
        self.keep.push(sq_mem.clone());
        let rq_keep = rq_mem.as_ref().map(|(m, _)| m.clone());
        let rq = rq_mem.map(|(m, l)| {
            self.keep.push(m.clone());
            Producer::attach(m, 0, l).unwrap()
        });
        Ok(QpH {
            handle: c.qp_handle,
            qpn: c.qpn,
            sq: Producer::attach(sq_mem.clone(), 0, sq_layout).unwrap(),
            rq,
            db_slot: d.sq_doorbell,
            resp: c,
            sq_mem,
            rq_mem: rq_keep,
        })
    }

    pub fn create_srq(&mut self, pd: u32, depth: u32) -> SrqH {
        let l = RingLayout::for_depth(depth, recv_wqe_size(4).unwrap()).unwrap();
        let m = ring_mem(l);
        let r = self
            .call(&Request::CreateSrq(
                CreateSrq {
                    response: 0,
                    user_handle: 0x5151,
                    pd_handle: pd,
                    max_wr: depth,
                    max_sge: 4,
                    srq_limit: 0,
                },
                UroceCreateSrq {
                    ring: l.desc(m.addr()),
                },
            ))
            .unwrap();
        let c = read_prefix::<CreateSrqResp>(&r, "srq").unwrap().0;
        self.keep.push(m.clone());
        SrqH {
            handle: c.srq_handle,
            ring: Producer::attach(m, 0, l).unwrap(),
        }
    }

    pub fn create_ah(&mut self, pd: u32, ip: &str) -> Result<u32, Errno> {
        let r = self.call(&Request::CreateAh(CreateAh {
            response: 0,
            user_handle: 7,
            pd_handle: pd,
            reserved: 0,
            attr: AhAttr {
                grh: GlobalRoute {
                    dgid: gid(ip),
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 64,
                    traffic_class: 0,
                    reserved: 0,
                },
                dlid: 0,
                sl: 0,
                src_path_bits: 0,
                static_rate: 0,
                is_global: 1,
                port_num: 1,
                reserved: 0,
            },
        }))?;
        Ok(read_prefix::<CreateAhResp>(&r, "ah").unwrap().0.ah_handle)
    }

    pub fn modify(&mut self, m: &ModifyQp) -> Result<(), Errno> {
        self.call(&Request::ModifyQp(*m)).map(|_| ())
    }

    pub fn query_qp(&mut self, qp: u32) -> QueryQpResp {
        let r = self
            .call(&Request::QueryQp(QueryQp {
                response: 0,
                qp_handle: qp,
                attr_mask: !0,
            }))
            .unwrap();
        read_prefix::<QueryQpResp>(&r, "qq").unwrap().0
    }

    /// RESET → INIT → RTR → RTS for an RC/UC QP talking to `dest_qpn` at `dest_ip`.
    /// Two QPs of type `ty` on PD `pd` with `depth` WRs each, A completing on CQ `cqs.0` and
    /// B on `cqs.1`, connected to each other through the device at `ip`.
    pub fn connected(
        &mut self,
        pd: u32,
        cqs: (u32, u32),
        ty: abi::QpType,
        depth: u32,
        ip: &str,
    ) -> (QpH, QpH) {
        let a = self.create_qp(pd, cqs.0, cqs.0, ty, depth, None).unwrap();
        let b = self.create_qp(pd, cqs.1, cqs.1, ty, depth, None).unwrap();
        self.connect_qp(a.handle, ty, b.qpn, ip);
        self.connect_qp(b.handle, ty, a.qpn, ip);
        (a, b)
    }

    pub fn connect_qp(&mut self, qp: u32, ty: abi::QpType, dest_qpn: u32, dest_ip: &str) {
        let all = abi::AccessFlags::LOCAL_WRITE.0
            | abi::AccessFlags::REMOTE_WRITE.0
            | abi::AccessFlags::REMOTE_READ.0
            | abi::AccessFlags::REMOTE_ATOMIC.0;
        let rc = ty == abi::QpType::Rc;
        for (state, mask) in init_rtr_rts(ty) {
            let mut m = ModifyQp {
                qp_handle: qp,
                attr_mask: mask,
                qp_state: state as u8,
                qp_access_flags: if rc {
                    all
                } else {
                    abi::AccessFlags::LOCAL_WRITE.0 | abi::AccessFlags::REMOTE_WRITE.0
                },
                port_num: 1,
                path_mtu: abi::Mtu::Mtu1024.raw() as u8,
                dest_qp_num: dest_qpn,
                rq_psn: 100,
                sq_psn: 100,
                max_dest_rd_atomic: 4,
                max_rd_atomic: 4,
                min_rnr_timer: 1,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                qkey: 0x1111,
                ..ModifyQp::default()
            };
            m.dest.dgid = gid(dest_ip);
            m.dest.is_global = 1;
            m.dest.hop_limit = 64;
            m.dest.port_num = 1;
            self.modify(&m)
                .unwrap_or_else(|e| panic!("modify to {state}: {e}"));
        }
    }

    /// Ring a doorbell (after publishing).
    pub fn ring(&mut self, slot: u32) {
        if self.db.ring(slot, &self.waker).unwrap() {
            self.wakes += 1;
        }
    }

    /// Publish one send WQE and ring its doorbell.
    pub fn post_send(&mut self, qp: &mut QpH, wqe: SendWqe, payload: &[u8]) {
        qp.sq.stage_parts(&[wqe.as_bytes(), payload]).unwrap();
        qp.sq.publish().unwrap();
        if self.db.ring(qp.db_slot, &self.waker).unwrap() {
            self.wakes += 1;
        }
    }

    pub fn post_recv(&mut self, rq: &mut Producer, wr_id: u64, sges: &[Sge]) {
        let h = RecvWqe {
            wr_id,
            num_sge: sges.len() as u32,
            reserved: 0,
        };
        rq.stage_parts(&[h.as_bytes(), sges.as_bytes()]).unwrap();
        rq.publish().unwrap();
    }

    pub fn parked(&self) -> bool {
        self.db_mem
            .word(DOORBELL_PARKED_OFFSET)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst)
            != 0
    }

    /// Read one async event (blocking up to the timeout).
    pub fn async_event(&self) -> AsyncEventDesc {
        let mut b = [0u8; 16];
        let n = self.async_ev.recv(&mut b).expect("async event");
        assert_eq!(n, 16);
        AsyncEventDesc::read_from_bytes(&b).unwrap()
    }

    /// Close the connection and wait until the control plane has torn the context down
    /// (its end closes after), so the rings and buffers may be freed.
    pub fn close(mut self) {
        self.shutdown_and_wait();
    }

    fn shutdown_and_wait(&mut self) {
        let _ = self.s.shutdown(std::net::Shutdown::Write);
        let mut b = [0u8; 256];
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            match self.s.read(&mut b) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown_and_wait();
    }
}

pub fn init_rtr_rts(ty: abi::QpType) -> Vec<(u32, u32)> {
    let (ty, _) = transport::Service::of(ty).expect("an RC, UC or UD QP");
    nic::simhost::rts_steps(ty)
        .iter()
        .map(|&(state, mask)| (u32::from(state), mask))
        .collect()
}

pub fn raw_on(s: &mut UnixStream, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    s.write_all(bytes)?;
    let mut hdr = [0u8; ReplyHdr::SIZE];
    s.read_exact(&mut hdr)?;
    let h = ReplyHdr::read_from_bytes(&hdr).unwrap();
    let mut out = hdr.to_vec();
    out.resize(ReplyHdr::SIZE + h.resp_len as usize, 0);
    s.read_exact(&mut out[ReplyHdr::SIZE..])?;
    Ok(out)
}

pub fn call_on(s: &mut UnixStream, req: &Request<'_>) -> Result<Vec<u8>, Errno> {
    let mut bytes = Vec::new();
    req.encode(&mut bytes).unwrap();
    let r = raw_on(s, &bytes).expect("control plane answered");
    let reply = Reply::parse(&r).expect("well-formed reply");
    assert_eq!(reply.command, req.command().word());
    reply.result.map(|b| b.to_vec())
}

/// Wait for one CQE.
pub fn poll(cq: &mut Cq) -> Wc {
    let deadline = Instant::now() + TIMEOUT;
    let mut out = [0u8; 64];
    loop {
        if cq.cons.pop_into(&mut out).unwrap() {
            return Cqe::read_from_bytes(&out).unwrap().wc;
        }
        assert!(
            Instant::now() < deadline,
            "no completion within {TIMEOUT:?}"
        );
        std::thread::yield_now();
    }
}

/// No CQE for a short while.
pub fn expect_empty(cq: &mut Cq, wait: Duration) {
    std::thread::sleep(wait);
    assert_eq!(cq.cons.available().unwrap(), 0, "unexpected completion");
}

pub fn write_wqe(wr_id: u64, op: abi::WrOpcode, remote_addr: u64, rkey: u32) -> SendWqe {
    SendWqe {
        wr_id,
        opcode: op.raw(),
        send_flags: abi::SendFlags::SIGNALED.0,
        num_sge: 1,
        remote_addr,
        rkey,
        ..SendWqe::default()
    }
}

pub fn sge(addr: u64, length: u32, lkey: u32) -> Sge {
    Sge { addr, length, lkey }
}

pub fn errno_of(reply: &[u8]) -> Option<Errno> {
    Reply::parse(reply).ok()?.result.err()
}
