//! `uroce bench -R`: perftest's rdma_cm mode (docs/perftest.md §8).
//!
//! Two rdma_cm connections, both to the server's port (18515 unless `-p`):
//!
//! * the **exchange** connection ([`Comm`]): one RC QP on an `RDMA_PS_TCP` ID, over which
//!   every out-of-band message of `oob::perftest` travels as one SEND (perftest's
//!   `rdma_write_data`/`rdma_read_data`), KEY messages in their 56-byte binary form;
//! * the **test** connections ([`connect_work`]): one ID per QP, the QPs made on the IDs and
//!   connected by rdma_cm (REQ/REP/RTU), between the two zero KEY pairs of the exchange.
//!
//! The server keeps its listening ID from the exchange connection for the test connections,
//! so a client's REQ never finds the port without a listener (perftest's own server listens
//! again only after the first zero KEY pair, and a fast client is then rejected with
//! reason 8; for UD a SIDR_REP with status 1, UNREACHABLE). The client retries a rejected
//! connect of its test QPs up to ten times, 100 ms apart, with new IDs — what perftest's
//! `rdma_cm_client_connection` means to do.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use oob::perftest::{Connection, KeyMessage, Negotiated, Role, TestKind, Verb};
use uroce::cm::PortSpace;
use uroce::rdma_cm::{
    ConnParam, EventChannel, RdmaCmEvent, RdmaCmEventKind as K, RdmaCmId, RDMA_UDP_QKEY,
};
use uroce::{
    grh_addresses, AccessFlags, AhAttr, Cq, Device, Gid, MrBuf, Pd, Qp, QpCap, QpInitAttr, QpType,
    RecvWr, SendWr, GRH_BYTES,
};

use super::params::Params;
use super::side::Side;

/// Receive slots of the exchange QP, and their size (every perftest message fits 56 bytes).
const SLOTS: usize = 8;
const SLOT: usize = 64;
/// How often perftest's client tries to connect its test QPs, and the pause between tries.
const CONNECT_TRIES: u32 = 10;
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long the end of a test waits for the DISCONNECTED of its connections (a peer that has
/// already exited never answers the DREQ).
const DISCONNECT_WAIT: Duration = Duration::from_secs(5);

/// The next event on `chan` (waiting at most `timeout`, `None`: for ever).
fn next_event(chan: &EventChannel, timeout: Option<Duration>, what: &str) -> Result<RdmaCmEvent> {
    chan.get_event(timeout)
        .ok_or_else(|| anyhow!("no rdma_cm event while waiting for {what}"))
}

/// Waits for `kind` on `id`, skipping other IDs' events; another event on `id` is an error
/// that names it (rdmacm.sh looks for "REJECTED").
fn expect_on(chan: &EventChannel, id: &RdmaCmId, kind: K, stall: Duration) -> Result<RdmaCmEvent> {
    let deadline = Instant::now() + stall;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let e = next_event(chan, Some(left), &format!("{kind:?}"))?;
        if &e.id != id {
            continue;
        }
        if e.kind == kind {
            return Ok(e);
        }
        bail!(
            "Unexpected CM event {:?} (status {}) while waiting for {kind:?}",
            e.kind,
            e.status
        );
    }
}

fn ipv4_of(host: &str, port: u16) -> Result<SocketAddr> {
    (host, port)
        .to_socket_addrs()
        .with_context(|| format!("Problem in resolving basic address and port ({host})"))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| anyhow!("{host}: no IPv4 address"))
}

/// The port space of the test connections: UDP (SIDR) for `-c UD`, else TCP.
fn work_ps(p: &Params) -> PortSpace {
    if p.cfg.connection == Connection::Ud {
        PortSpace::UDP
    } else {
        PortSpace::TCP
    }
}

/// UD tests in which the server sends too (latency, `-b`): perftest's client then tells the
/// server its QPN in a SEND with immediate (the QPN) right after ESTABLISHED, and the server
/// makes its address handle from that receive (`rdma_cm_send_ud_connection_parameters`).
fn ud_qpn_message(p: &Params) -> bool {
    p.cfg.connection == Connection::Ud && (p.cfg.kind == TestKind::Lat || p.cfg.duplex())
}

/// wr_id of that SEND and of the receive it lands in.
const UD_QPN_WR: u64 = u64::MAX - 1;

/// The connection parameters perftest uses: retry and RNR retry 7, and for read and atomic
/// tests its outstanding reads as responder resources and initiator depth.
fn conn_param(p: &Params, out_reads: u32) -> ConnParam {
    let rd = if matches!(p.cfg.verb, Verb::Read | Verb::Atomic) {
        out_reads.clamp(1, 255) as u8
    } else {
        0
    };
    ConnParam {
        responder_resources: rd,
        initiator_depth: rd,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// The exchange connection: an RC QP whose SENDs carry perftest's messages. Implements
/// `Read` and `Write` with message boundaries: a `write` is one SEND, a `read` takes one
/// received message, which must be exactly as long as the buffer.
pub struct Comm {
    /// The channel of every ID of this side (the test connections' too).
    pub chan: EventChannel,
    /// The exchange connection's ID.
    pub id: RdmaCmId,
    /// Server: the listening ID, kept for the test connections.
    pub listener: Option<RdmaCmId>,
    /// Server, `-c UD`: the listening ID of the UDP port space, for the test connections.
    pub ud_listener: Option<RdmaCmId>,
    /// Client: the server's address.
    pub dst: Option<SocketAddr>,
    _pd: Pd,
    scq: Cq,
    rcq: Cq,
    qp: Qp,
    buf: MrBuf,
    stall: Duration,
}

impl Comm {
    /// perftest's `rdma_client_connect`: resolve `host:port`, create the QP, connect.
    pub fn connect(host: &str, port: u16, p: &Params) -> Result<Comm> {
        uroce::init();
        let dst = ipv4_of(host, port)?;
        let chan = EventChannel::new().context("Failed to create RDMA CM event channel")?;
        let id = RdmaCmId::new(&chan, PortSpace::TCP).context("rdma_create_id failed")?;
        id.resolve_addr(None, dst)
            .context("rdma_resolve_addr failed")?;
        expect_on(&chan, &id, K::AddrResolved, p.stall)?;
        id.resolve_route().context("rdma_resolve_route failed")?;
        expect_on(&chan, &id, K::RouteResolved, p.stall)?;
        let mut c = Comm::on(chan, id, None, Some(dst), p.stall)?;
        c.id.connect(&conn_param(p, 1))
            .context("Function rdma_connect failed")?;
        expect_on(&c.chan, &c.id, K::Established, p.stall)?;
        c.post_all()?;
        Ok(c)
    }

    /// The server's listening ID on `0.0.0.0:port` (perftest binds the wildcard address),
    /// and with `ud` one in the UDP port space on the same port for the test connections.
    pub fn listen(port: u16, ud: bool) -> Result<(EventChannel, RdmaCmId, Option<RdmaCmId>)> {
        uroce::init();
        let chan = EventChannel::new().context("Failed to create RDMA CM event channel")?;
        let on = |ps| -> Result<RdmaCmId> {
            let l = RdmaCmId::new(&chan, ps).context("rdma_create_id failed")?;
            l.bind_addr(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::UNSPECIFIED,
                port,
            )))
            .context(" rdma_bind_addr failed")?;
            l.listen(1).context("rdma_listen failed")?;
            Ok(l)
        };
        let listener = on(PortSpace::TCP)?;
        let ud_listener = if ud { Some(on(PortSpace::UDP)?) } else { None };
        Ok((chan, listener, ud_listener))
    }

    /// perftest's `rdma_server_connect`: take the first connection request, accept it.
    pub fn accept(
        chan: EventChannel,
        listener: RdmaCmId,
        ud_listener: Option<RdmaCmId>,
        p: &Params,
    ) -> Result<Comm> {
        let req = loop {
            let e = next_event(&chan, None, "a connection request")?;
            if e.kind == K::ConnectRequest {
                break e;
            }
        };
        let mut c = Comm::on(chan, req.id.clone(), Some(listener), None, p.stall)?;
        c.ud_listener = ud_listener;
        c.post_all()?;
        c.id.accept(&conn_param(p, 1))
            .context("Function rdma_accept failed")?;
        expect_on(&c.chan, &c.id, K::Established, p.stall)?;
        Ok(c)
    }

    fn on(
        chan: EventChannel,
        id: RdmaCmId,
        listener: Option<RdmaCmId>,
        dst: Option<SocketAddr>,
        stall: Duration,
    ) -> Result<Comm> {
        let ctx = id
            .context()
            .ok_or_else(|| anyhow!("the rdma_cm ID has no device"))?;
        let pd = ctx.alloc_pd().context("Couldn't allocate PD")?;
        let scq = ctx.create_cq(4, None, 0).context("Couldn't create CQ")?;
        let rcq = ctx
            .create_cq(SLOTS as u32 + 4, None, 0)
            .context("Couldn't create CQ")?;
        let cap = QpCap {
            max_send_wr: 2,
            max_recv_wr: SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let mut init = QpInitAttr::new(QpType::Rc, &scq, cap);
        init.recv_cq = &rcq;
        let qp = id.create_qp(&pd, &init).context("Couldn't create QP")?;
        let buf = pd
            .alloc_mr((SLOTS + 1) * SLOT, AccessFlags::LOCAL_WRITE)
            .context("Couldn't allocate MR")?;
        Ok(Comm {
            chan,
            id,
            listener,
            ud_listener: None,
            dst,
            _pd: pd,
            scq,
            rcq,
            qp,
            buf,
            stall,
        })
    }

    fn post_recv(&self, slot: usize) -> Result<()> {
        let sge = [self.buf.sge(slot * SLOT, SLOT as u32)];
        self.qp
            .post_recv(&[RecvWr::new(slot as u64, &sge)])
            .map_err(|e| anyhow!("Function ibv_post_recv failed for RDMA_CM QP: {e}"))
    }

    fn post_all(&mut self) -> Result<()> {
        (0..SLOTS).try_for_each(|s| self.post_recv(s))
    }

    fn wait(&self, cq: &Cq) -> io::Result<uroce::Wc> {
        let deadline = Instant::now() + self.stall;
        let mut wc = [uroce::Wc::default()];
        loop {
            let n = cq.poll(&mut wc).map_err(io::Error::other)?;
            if n > 0 {
                let [w] = wc;
                if !w.is_success() {
                    return Err(io::Error::other(format!(
                        "Bad wc status {:?} on the rdma_cm exchange QP",
                        w.status
                    )));
                }
                return Ok(w);
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no message on the rdma_cm exchange connection",
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Ends the exchange connection (perftest's peers never disconnect it: the ID goes
    /// with the process; this side destroys it, which sends the DREQ).
    pub fn close(self) {
        self.id.destroy();
        for l in [self.listener, self.ud_listener].into_iter().flatten() {
            l.destroy();
        }
    }
}

impl Write for Comm {
    fn write(&mut self, msg: &[u8]) -> io::Result<usize> {
        if msg.len() > SLOT {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "message longer than perftest's receive buffer",
            ));
        }
        let off = SLOTS * SLOT;
        if let Some(dst) = self.buf.as_mut_slice().get_mut(off..off + msg.len()) {
            dst.copy_from_slice(msg);
        }
        let sge = [self.buf.sge(off, msg.len() as u32)];
        self.qp
            .post_send(&[SendWr::send(u64::MAX, &sge).signaled()])
            .map_err(|e| io::Error::other(format!("Function ibv_post_send failed: {e}")))?;
        self.wait(&self.scq)?;
        Ok(msg.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Comm {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let wc = self.wait(&self.rcq)?;
        let slot = usize::try_from(wc.wr_id).unwrap_or(0) % SLOTS;
        let len = wc.byte_len as usize;
        let got = self
            .buf
            .as_slice()
            .get(slot * SLOT..slot * SLOT + len.min(SLOT))
            .map(<[u8]>::to_vec)
            .unwrap_or_default();
        self.post_recv(slot).map_err(io::Error::other)?;
        if got.len() != buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "a {}-byte message where perftest's exchange has {} bytes",
                    got.len(),
                    buf.len()
                ),
            ));
        }
        buf.copy_from_slice(&got);
        Ok(got.len())
    }
}

/// The test connections of one side (`-R`).
pub struct WorkCm {
    chan: EventChannel,
    role: Role,
    dst: Option<SocketAddr>,
    ids: Vec<RdmaCmId>,
}

impl WorkCm {
    /// For the side that talks over `comm`.
    pub fn new(comm: &Comm, role: Role) -> WorkCm {
        WorkCm {
            chan: comm.chan.clone(),
            role,
            dst: comm.dst,
            ids: Vec::new(),
        }
    }

    /// After the exchange: disconnect every test connection and wait (a bounded time) for
    /// its DISCONNECTED — the client's DREQ, or the server's answer to it — then destroy
    /// the IDs. perftest's client waits for these events; its server disconnects its last
    /// connection only.
    pub fn teardown(self) {
        for id in self.ids.iter().filter(|id| !id.is_ud()) {
            let _ = id.disconnect();
        }
        let deadline = Instant::now() + DISCONNECT_WAIT;
        // UD "connections" (SIDR) are not disconnected.
        let mut left: Vec<&RdmaCmId> = self.ids.iter().filter(|id| !id.is_ud()).collect();
        while !left.is_empty() {
            let wait = deadline.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                break;
            }
            let Some(e) = self.chan.get_event(Some(wait)) else {
                break;
            };
            if e.kind == K::Disconnected {
                left.retain(|id| **id != e.id);
            }
        }
        for id in self.ids {
            id.destroy();
        }
    }
}

/// `-R`'s answer to `Negotiated`: connect the test's QPs by rdma_cm (the client resolves
/// and connects one ID per QP, the server accepts as many requests on its listener), make
/// the buffers on the IDs' device, and return the KEY messages.
pub fn connect_work(side: &mut Side, n: &Negotiated) -> Result<Vec<KeyMessage>, anyhow::Error> {
    let mut cm = side
        .cm
        .take()
        .ok_or_else(|| anyhow!("-R without an rdma_cm exchange"))?;
    let r = match cm.role {
        Role::Client => connect_client(side, &mut cm, n),
        Role::Server => accept_server(side, &mut cm, n),
    };
    side.cm = Some(cm);
    r?;
    Ok(side.created(n))
}

fn work_ctx(side: &mut Side, id: &RdmaCmId, n: &Negotiated) -> Result<()> {
    if side.res.is_none() {
        let ctx = id
            .context()
            .ok_or_else(|| anyhow!("the rdma_cm ID has no device"))?;
        side.set_context(ctx);
        side.create_res(n)?;
    }
    Ok(())
}

fn out_reads(side: &Side) -> u32 {
    side.res.as_ref().map_or(1, |r| r.out_reads)
}

fn connect_client(side: &mut Side, cm: &mut WorkCm, n: &Negotiated) -> Result<()> {
    let dst = cm.dst.ok_or_else(|| anyhow!("no server address"))?;
    let stall = side.p.stall;
    let q = side.p.cfg.qps();
    let mut last = None;
    for attempt in 1..=CONNECT_TRIES {
        if attempt > 1 {
            std::thread::sleep(RETRY_PAUSE);
        }
        let mut ids = Vec::with_capacity(q);
        let r = (|| -> Result<()> {
            for _ in 0..q {
                let id = RdmaCmId::new(&cm.chan, work_ps(&side.p)).context("rdma_create_id")?;
                ids.push(id.clone());
                id.resolve_addr(None, dst)
                    .context("Failed to resolve RDMA CM address.")?;
                expect_on(&cm.chan, &id, K::AddrResolved, stall)?;
                id.resolve_route()
                    .context("Failed to resolve RDMA CM route.")?;
                expect_on(&cm.chan, &id, K::RouteResolved, stall)?;
                work_ctx(side, &id, n)?;
                side.add_qp(Some(&id))?;
                id.connect(&conn_param(&side.p, out_reads(side)))
                    .context("Failed to connect through RDMA CM.")?;
            }
            for id in &ids {
                let e = expect_on(&cm.chan, id, K::Established, stall)?;
                if let Some(ud) = e.ud {
                    ud_client_established(side, &ud)?;
                }
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                cm.ids = ids;
                return Ok(());
            }
            Err(e) => {
                // RC: REJ (reason 8, no listener yet). UD: the SIDR_REP's status 1
                // (SIDR_UNSUPPORTED, no listener), which rdma_cm reports as UNREACHABLE
                // with status 1 (kernel cma.c cma_sidr_rep_handler).
                let msg = format!("{e:#}");
                let rejected = msg.contains("Rejected") || msg.contains("Unreachable (status 1)");
                for id in ids {
                    id.destroy();
                }
                if let Some(res) = side.res.as_mut() {
                    res.qps.clear();
                    res.local.clear();
                }
                if !rejected {
                    return Err(e);
                }
                last = Some(e);
            }
        }
    }
    Err(last
        .unwrap_or_else(|| anyhow!("no attempt"))
        .context(format!(
            "Failed to connect RDMA CM client, tried {CONNECT_TRIES} times."
        )))
}

fn accept_server(side: &mut Side, cm: &mut WorkCm, n: &Negotiated) -> Result<()> {
    let q = side.p.cfg.qps();
    let stall = side.p.stall;
    while cm.ids.len() < q {
        let e = next_event(&cm.chan, Some(stall), "the client's rdma_cm QPs")?;
        if e.kind != K::ConnectRequest {
            continue;
        }
        let id = e.id.clone();
        work_ctx(side, &id, n)?;
        side.add_qp(Some(&id))?;
        let qpn_message = ud_qpn_message(&side.p);
        if qpn_message {
            ud_server_post(side)?;
        }
        id.accept(&conn_param(&side.p, out_reads(side)))
            .context("Failed to accept RDMA CM connection.")?;
        if side.p.cfg.connection == Connection::Ud {
            if let Some(res) = side.res.as_mut() {
                res.qkey = RDMA_UDP_QKEY;
            }
        }
        if qpn_message {
            ud_server_ah(side)?;
        }
        cm.ids.push(id);
    }
    Ok(())
}

/// The UD client's ESTABLISHED: the address handle and Q_Key of the server's QP from the
/// SIDR_REP, and (latency, `-b`) this QP's number sent to the server.
fn ud_client_established(side: &mut Side, ud: &uroce::rdma_cm::UdParam) -> Result<()> {
    let qpn_message = ud_qpn_message(&side.p);
    let stall = side.p.stall;
    let res = side.res.as_mut().ok_or_else(|| anyhow!("no resources"))?;
    let ah = ud
        .create_ah(&res.pd)
        .context("Failed to create AH for RDMA CM connection.")?;
    res.qkey = ud.qkey;
    if qpn_message {
        let qpn = res.qps.last().ok_or_else(|| anyhow!("no QP"))?.qp_num();
        if let Some(b) = res.src.as_mut_slice().get_mut(..4) {
            b.copy_from_slice(&qpn.to_ne_bytes());
        }
        let sge = [res.src.sge(0, 4)];
        let qp = res.qps.last().ok_or_else(|| anyhow!("no QP"))?;
        qp.post_send(&[SendWr::ud_send(UD_QPN_WR, &sge, &ah, ud.qp_num, ud.qkey)
            .with_imm(qpn)
            .signaled()])
            .map_err(|e| anyhow!("Failed to send UD connection parameters: {e}"))?;
        let wc = wait_wc(&res.scq, stall)?;
        if !wc.is_success() || wc.wr_id != UD_QPN_WR {
            bail!(
                "Bad WQE status when sending UD connection parameters: {:?}",
                wc.status
            );
        }
    }
    res.ahs.push(ah);
    Ok(())
}

/// The UD server's receive for the client's QPN message, posted before it accepts.
fn ud_server_post(side: &mut Side) -> Result<()> {
    let res = side.res.as_mut().ok_or_else(|| anyhow!("no resources"))?;
    let qp = res.qps.last().ok_or_else(|| anyhow!("no QP"))?;
    let sge = [res.src.sge(0, (GRH_BYTES + 4) as u32)];
    qp.post_recv(&[RecvWr::new(UD_QPN_WR, &sge)])
        .map_err(|e| anyhow!("Failed to post receive for the UD connection parameters: {e}"))
}

/// The UD server: the client's QPN message arrives; the address handle toward it comes from
/// its GRH (perftest: `ibv_create_ah_from_wc`).
fn ud_server_ah(side: &mut Side) -> Result<()> {
    let stall = side.p.stall;
    let res = side.res.as_mut().ok_or_else(|| anyhow!("no resources"))?;
    let wc = wait_wc(&res.rcq, stall)?;
    if !wc.is_success() || wc.wr_id != UD_QPN_WR {
        bail!(
            "Bad WQE status when trying to create AH for UD connection in RDMA CM: {:?}",
            wc.status
        );
    }
    let (src, _) = res
        .src
        .as_slice()
        .get(..GRH_BYTES)
        .and_then(grh_addresses)
        .ok_or_else(|| anyhow!("the UD connection parameters carry no GRH"))?;
    let ah = res
        .pd
        .create_ah(&AhAttr::roce(Gid::from(src), 0, 1))
        .context("Failed to create AH from the client's message")?;
    res.ahs.push(ah);
    Ok(())
}

fn wait_wc(cq: &Cq, stall: Duration) -> Result<uroce::Wc> {
    let deadline = Instant::now() + stall;
    let mut wc = [uroce::Wc::default()];
    loop {
        if cq.poll(&mut wc)? == 1 {
            let [w] = wc;
            return Ok(w);
        }
        if Instant::now() > deadline {
            bail!("no completion for the UD connection parameters");
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// The device a `Comm`'s ID resolved to.
pub fn device_of(comm: &Comm) -> Result<Device> {
    Ok(comm
        .id
        .context()
        .ok_or_else(|| anyhow!("the rdma_cm ID has no device"))?
        .device()
        .clone())
}
