//! UD echo: a client sends datagrams to an echo server over UD QPs; the server answers
//! each one to whoever sent it, finding the sender in the receive's GRH area.
//!
//! ```text
//! cargo run --release -p uroce --example ud_echo                          # one device (loopback)
//! cargo run --release -p uroce --example ud_echo -- --pair 127.0.0.1,127.0.0.2 -n 1000
//! ```
//!
//! Every UD receive buffer starts with a 40-byte GRH area (IBA §11.4.1.1): for RoCEv2 over
//! IPv4 the device puts the packet's IPv4 header in its last 20 bytes, so the payload
//! starts at byte 40 and `byte_len` counts those 40 bytes. The server builds its reply's
//! address handle from that header (`ibv_init_ah_from_wc`) and the completion's `src_qp`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use uroce::pair::{connect, End, PairOpts};
use uroce::*;

const QKEY: u32 = 0x1111_1111;

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("ud_echo: {msg}");
    }
    eprintln!("usage: ud_echo [-s SIZE] [-n COUNT] [--pair ADDR1,ADDR2]");
    std::process::exit(2)
}

fn main() {
    let (mut size, mut count, mut pair) = (256usize, 100u64, None::<String>);
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-s" | "--size" => {
                size = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage("bad -s"))
            }
            "-n" | "--count" => {
                count = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage("bad -n"))
            }
            "--pair" => pair = Some(it.next().unwrap_or_else(|| usage("--pair needs a value"))),
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if let Err(e) = echo(size, count, pair.as_deref()) {
        eprintln!("ud_echo: {e}");
        std::process::exit(1);
    }
}

fn fail(msg: String) -> Error {
    Error::local("ud_echo", Errno::EIO, msg)
}

fn wait_wc(end: &End, deadline: Instant) -> Result<Wc> {
    let mut wc = [Wc::default()];
    loop {
        if end.cq.poll(&mut wc)? == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(fail(format!(
                    "completion {:?}: {}",
                    wc[0],
                    wc[0].status.as_str()
                )));
            }
            return Ok(wc[0]);
        }
        if Instant::now() > deadline {
            return Err(fail("timed out waiting for a completion".into()));
        }
        std::hint::spin_loop();
    }
}

/// Receive buffers the server posts before the client may send: a UD datagram that finds
/// no receive WQE is dropped silently (IBA §9.7.5.1.2 — no RNR for UD).
const DEPTH: usize = 16;

fn post_server_receives(end: &End, size: usize) -> Result<MrBuf> {
    let slot = GRH_BYTES + size;
    let bufs = end.pd.alloc_mr(DEPTH * slot, AccessFlags::LOCAL_WRITE)?;
    for i in 0..DEPTH {
        end.qp
            .post_recv(&[RecvWr::new(i as u64, &[bufs.sge(i * slot, slot as u32)])])?;
    }
    Ok(bufs)
}

/// The server: echo `count` datagrams back to their senders.
fn serve(end: End, bufs: MrBuf, size: usize, count: u64) -> Result<()> {
    let slot = GRH_BYTES + size;
    let sges: Vec<[Sge; 1]> = (0..DEPTH)
        .map(|i| [bufs.sge(i * slot, slot as u32)])
        .collect();
    let mut ahs: HashMap<Gid, Ah> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for _ in 0..count {
        let w = wait_wc(&end, deadline)?;
        if !w.opcode.is_recv() {
            continue;
        }
        let i = w.wr_id as usize;
        let base = i * slot;
        let grh = &bufs[base..base + GRH_BYTES];
        let attr = uroce::init_ah_from_wc(&w, grh, 0, PORT)
            .ok_or_else(|| fail("receive without a usable GRH".into()))?;
        let ah = match ahs.get(&attr.grh.dgid) {
            Some(ah) => ah.clone(),
            None => {
                let ah = end.pd.create_ah(&attr)?;
                ahs.insert(attr.grh.dgid, ah.clone());
                ah
            }
        };
        let len = (w.byte_len as usize).saturating_sub(GRH_BYTES) as u32;
        let reply = [bufs.sge(base + GRH_BYTES, len)];
        end.qp
            .post_send(&[SendWr::ud_send(u64::MAX, &reply, &ah, w.src_qp, QKEY).signaled()])?;
        // The reply reads the receive buffer: repost it only after the send completed.
        let s = wait_wc(&end, deadline)?;
        if s.opcode != WcOpcode::Send {
            return Err(fail(format!("expected the reply's completion, got {s:?}")));
        }
        end.qp.post_recv(&[RecvWr::new(i as u64, &sges[i])])?;
    }
    Ok(())
}

fn echo(size: usize, count: u64, pair: Option<&str>) -> Result<()> {
    let (da, db) = uroce::pair_devices(pair)?;
    let opts = PairOpts {
        qp_type: QpType::Ud,
        qkey: QKEY,
        ..PairOpts::default()
    };
    let (client, server) = connect(&da, &db, &opts)?;
    let mtu = client.ctx.query_port(PORT)?.active_mtu.bytes() as usize;
    if size > mtu {
        return Err(fail(format!(
            "UD messages must fit the {mtu}-byte path MTU"
        )));
    }
    println!(
        "UD echo: client QPN {:#x} on {} ({}), server QPN {:#x} on {} ({}), {size} bytes x {count}",
        client.qp.qp_num(),
        da.name(),
        client.gid.to_ip(),
        server.qp.qp_num(),
        db.name(),
        server.gid.to_ip()
    );
    let server_qpn = server.qp.qp_num();
    let server_gid = server.gid;
    let bufs = post_server_receives(&server, size)?;
    let t = std::thread::spawn(move || serve(server, bufs, size, count));
    let ah = client.pd.create_ah(&AhAttr::roce(server_gid, 0, PORT))?;
    let mut out = client.pd.alloc_mr(size, AccessFlags::LOCAL_WRITE)?;
    let back = client
        .pd
        .alloc_mr(GRH_BYTES + size, AccessFlags::LOCAL_WRITE)?;
    let rsge = [back.sge(0, (GRH_BYTES + size) as u32)];
    let ssge = [out.sge(0, size as u32)];
    let deadline = Instant::now() + Duration::from_secs(60);
    let start = Instant::now();
    for i in 0..count {
        for (k, b) in out.iter_mut().enumerate() {
            *b = (i as usize).wrapping_add(k) as u8;
        }
        client.qp.post_recv(&[RecvWr::new(i, &rsge)])?;
        client
            .qp
            .post_send(&[SendWr::ud_send(i, &ssge, &ah, server_qpn, QKEY).signaled()])?;
        let (mut sent, mut got) = (false, None);
        while !(sent && got.is_some()) {
            let w = wait_wc(&client, deadline)?;
            if w.opcode.is_recv() {
                got = Some(w);
            } else {
                sent = true;
            }
        }
        let w = got.unwrap_or_default();
        if w.src_qp != server_qpn || w.byte_len as usize != GRH_BYTES + size {
            return Err(fail(format!("echo {i}: unexpected completion {w:?}")));
        }
        if back[GRH_BYTES..] != out[..] {
            return Err(fail(format!("echo {i}: payload differs")));
        }
    }
    let secs = start.elapsed().as_secs_f64();
    t.join()
        .map_err(|_| fail("server thread panicked".into()))??;
    println!(
        "{count} echoes verified in {secs:.3} s: {:.2} usec round trip",
        secs * 1e6 / count as f64
    );
    Ok(())
}
