//! RC ping-pong connected by rdma_cm (IP address and port, the IB CM on the wire) instead of
//! an out-of-band socket: `ibv_rc_pingpong`'s exchange of SENDs, `rping`'s way of connecting.
//!
//! ```text
//! UROCE_DEVICES=uroce0=127.0.0.1 cargo run --release -p uroce --example cm_pingpong &
//! UROCE_DEVICES=uroce1=127.0.0.2 cargo run --release -p uroce --example cm_pingpong -- 127.0.0.1
//! ```
//!
//! Options: `-p PORT` (default 18516), `-s SIZE` (default 64), `-n ITERS` (default 1000).
//! The server listens on every address of its device, accepts one connection (its private
//! data greets the client), answers every message with one of its own, and ends when the
//! client disconnects. The client resolves the server's address and route, connects,
//! checks every answer's bytes, disconnects, and prints `ibv_rc_pingpong`'s two result lines.
//! Either side may be a Linux host (rxe or a RoCE NIC) running the same protocol.

use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use uroce::cm::PortSpace;
use uroce::rdma_cm::{ConnParam, EventChannel, RdmaCmEvent, RdmaCmEventKind as K, RdmaCmId};
use uroce::*;

/// How long either side waits for the other before giving up.
const WAIT: Duration = Duration::from_secs(30);

struct Args {
    server: Option<String>,
    port: u16,
    size: usize,
    iters: u64,
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("cm_pingpong: {msg}");
    }
    eprintln!("usage: cm_pingpong [-p PORT] [-s SIZE] [-n ITERS] [SERVER]");
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        server: None,
        port: 18516,
        size: 64,
        iters: 1000,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "-p" | "--port" => a.port = val().parse().unwrap_or_else(|_| usage("bad --port")),
            "-s" | "--size" => a.size = val().parse().unwrap_or_else(|_| usage("bad --size")),
            "-n" | "--iters" => a.iters = val().parse().unwrap_or_else(|_| usage("bad --iters")),
            "-h" | "--help" => usage(""),
            s if !s.starts_with('-') && a.server.is_none() => a.server = Some(s.to_string()),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.iters == 0 || a.size == 0 {
        usage("--iters and --size must be > 0");
    }
    a
}

/// The next event, which must be `kind`.
fn expect(chan: &EventChannel, kind: K) -> std::result::Result<RdmaCmEvent, String> {
    let e = chan
        .get_event(Some(WAIT))
        .ok_or_else(|| format!("no rdma_cm event while waiting for {kind:?}"))?;
    if e.kind != kind {
        return Err(format!(
            "{:?} (status {}) while waiting for {kind:?}",
            e.kind, e.status
        ));
    }
    Ok(e)
}

/// The verbs objects of one end: a QP on the rdma_cm ID, one buffer for sending and one for
/// receiving.
struct End {
    _pd: Pd,
    cq: Cq,
    qp: Qp,
    tx: MrBuf,
    rx: MrBuf,
}

fn end_on(id: &RdmaCmId, size: usize) -> std::result::Result<End, String> {
    let ctx = id.context().ok_or("the ID has no device")?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(8, None, 0).map_err(|e| e.to_string())?;
    let cap = QpCap {
        max_send_wr: 2,
        max_recv_wr: 2,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = id
        .create_qp(&pd, &QpInitAttr::new(QpType::Rc, &cq, cap))
        .map_err(|e| e.to_string())?;
    let tx = pd
        .alloc_mr(size, AccessFlags::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let rx = pd
        .alloc_mr(size, AccessFlags::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let e = End {
        _pd: pd,
        cq,
        qp,
        tx,
        rx,
    };
    e.post_recv()?;
    Ok(e)
}

impl End {
    fn post_recv(&self) -> std::result::Result<(), String> {
        let sge = [self.rx.sge(0, self.rx.len() as u32)];
        self.qp
            .post_recv(&[RecvWr::new(1, &sge)])
            .map_err(|e| e.to_string())
    }

    /// Sends `tx` (filled with `fill`) and waits for its completion.
    fn send(&mut self, fill: u8) -> std::result::Result<(), String> {
        self.tx.fill(fill);
        let sge = [self.tx.sge(0, self.tx.len() as u32)];
        self.qp
            .post_send(&[SendWr::send(2, &sge).signaled()])
            .map_err(|e| e.to_string())?;
        self.wait(2).map(|_| ())
    }

    /// Waits for the next receive, re-posts the buffer, returns the first byte received.
    fn recv(&mut self) -> std::result::Result<u8, String> {
        let n = self.wait(1)?;
        let first = self.rx.first().copied().unwrap_or(0);
        if n != self.rx.len() || self.rx.iter().any(|&b| b != first) {
            return Err(format!("a corrupt message of {n} bytes"));
        }
        self.post_recv()?;
        Ok(first)
    }

    /// The completion of WR `id` (the other kind may come first: kept for later is not
    /// needed, since each side alternates strictly).
    fn wait(&self, id: u64) -> std::result::Result<usize, String> {
        let deadline = Instant::now() + WAIT;
        let mut wc = [Wc::default()];
        loop {
            if self.cq.poll(&mut wc).map_err(|e| e.to_string())? == 1 {
                let [w] = wc;
                if !w.is_success() {
                    return Err(format!("completion error {:?}", w.status));
                }
                if w.wr_id == id {
                    return Ok(w.byte_len as usize);
                }
                return Err(format!("unexpected completion {}", w.wr_id));
            }
            if Instant::now() > deadline {
                return Err("the peer stopped answering".into());
            }
            std::hint::spin_loop();
        }
    }
}

fn server(a: &Args) -> std::result::Result<(), String> {
    let chan = EventChannel::new().map_err(|e| e.to_string())?;
    let listen = RdmaCmId::new(&chan, PortSpace::TCP).map_err(|e| e.to_string())?;
    listen
        .bind_addr(SocketAddr::from((Ipv4Addr::UNSPECIFIED, a.port)))
        .map_err(|e| e.to_string())?;
    listen.listen(1).map_err(|e| e.to_string())?;
    println!("listening on port {} of {:?}", a.port, listen.device_name());
    let req = chan
        .get_event(None)
        .filter(|e| e.kind == K::ConnectRequest)
        .ok_or("no connection request")?;
    let id = req.id.clone();
    let mut end = end_on(&id, a.size)?;
    id.accept(&ConnParam {
        private_data: b"uroce cm_pingpong".to_vec(),
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    })
    .map_err(|e| e.to_string())?;
    expect(&chan, K::Established)?;
    println!("connection from {:?}", id.dst_addr());
    for _ in 0..a.iters {
        let b = end.recv()?;
        end.send(b.wrapping_add(1))?;
    }
    expect(&chan, K::Disconnected)?;
    id.disconnect().map_err(|e| e.to_string())?;
    id.destroy();
    listen.destroy();
    Ok(())
}

fn client(a: &Args, host: &str) -> std::result::Result<(), String> {
    let dst = (host, a.port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}: {e}"))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| format!("{host}: no IPv4 address"))?;
    let chan = EventChannel::new().map_err(|e| e.to_string())?;
    let id = RdmaCmId::new(&chan, PortSpace::TCP).map_err(|e| e.to_string())?;
    id.resolve_addr(None, dst).map_err(|e| e.to_string())?;
    expect(&chan, K::AddrResolved)?;
    id.resolve_route().map_err(|e| e.to_string())?;
    expect(&chan, K::RouteResolved)?;
    let mut end = end_on(&id, a.size)?;
    id.connect(&ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    })
    .map_err(|e| e.to_string())?;
    let est = expect(&chan, K::Established)?;
    let greeting = est
        .param
        .private_data
        .split(|&b| b == 0)
        .next()
        .unwrap_or(&[]);
    println!(
        "connected to {dst}: \"{}\"",
        String::from_utf8_lossy(greeting)
    );
    let start = Instant::now();
    for i in 0..a.iters {
        let ping = (i % 251) as u8;
        end.send(ping)?;
        let pong = end.recv()?;
        if pong != ping.wrapping_add(1) {
            return Err(format!("answer {pong} to {ping}"));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    id.disconnect().map_err(|e| e.to_string())?;
    expect(&chan, K::Disconnected)?;
    id.destroy();
    let bytes = a.size as u64 * a.iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        a.iters,
        secs * 1e6 / a.iters as f64
    );
    Ok(())
}

fn main() -> ExitCode {
    let a = args();
    uroce::init();
    let r = match &a.server {
        Some(host) => client(&a, host),
        None => server(&a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cm_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}
