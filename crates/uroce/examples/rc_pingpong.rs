//! RC ping-pong, after rdma-core's `ibv_rc_pingpong`: two QPs bounce a SEND back and forth
//! and the program prints the round-trip latency.
//!
//! ```text
//! cargo run --release -p uroce --example rc_pingpong                      # one device (loopback)
//! cargo run --release -p uroce --example rc_pingpong -- --pair 127.0.0.1,127.0.0.2
//! cargo run --release -p uroce --example rc_pingpong -- -s 4096 -n 5000 --events
//! ```
//!
//! Both ends live in this process, each on its own thread; `--pair` puts them on two
//! devices that talk RoCEv2 over UDP. `--events` waits on the completion channel
//! (`ibv_rc_pingpong -e`) instead of busy-polling the CQ.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uroce::pair::{connect, End, PairOpts};
use uroce::*;

struct Args {
    size: usize,
    iters: u64,
    pair: Option<String>,
    events: bool,
}

fn args() -> Args {
    let mut a = Args {
        size: 64,
        iters: 1000,
        pair: None,
        events: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        match arg.as_str() {
            "-s" | "--size" => a.size = val().parse().unwrap_or_else(|_| usage("bad --size")),
            "-n" | "--iters" => a.iters = val().parse().unwrap_or_else(|_| usage("bad --iters")),
            "--pair" => a.pair = Some(val()),
            "-e" | "--events" => a.events = true,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.iters == 0 {
        usage("--iters must be > 0");
    }
    a
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("rc_pingpong: {msg}");
    }
    eprintln!("usage: rc_pingpong [-s SIZE] [-n ITERS] [--pair ADDR1,ADDR2] [-e|--events]");
    std::process::exit(2)
}

/// Wait for one completion on `end`'s CQ, by polling or through its completion channel.
fn next_wc(end: &End, events: bool) -> Result<Wc> {
    let mut wc = [Wc::default()];
    loop {
        if end.cq.poll(&mut wc)? == 1 {
            return Ok(wc[0]);
        }
        match (&end.channel, events) {
            (Some(ch), true) => {
                end.cq.req_notify(false)?;
                // Re-poll after arming: a completion may have landed in between.
                if end.cq.poll(&mut wc)? == 1 {
                    return Ok(wc[0]);
                }
                if let Some(cq) = ch.get_event(Some(Duration::from_secs(10)))? {
                    cq.ack_events(1);
                }
            }
            // Busy-poll, but give the core away between polls: both ends and the engine
            // may share fewer cores than they are threads.
            _ => std::thread::yield_now(),
        }
    }
}

/// One side's loop: `first` sends first; each side waits for the peer's message before
/// answering. Every message's first 8 bytes carry the iteration number, checked on arrival.
fn run(end: End, size: usize, iters: u64, first: bool, events: bool) -> Result<Duration> {
    let mut send = end.pd.alloc_mr(size.max(8), AccessFlags::LOCAL_WRITE)?;
    let recv = end.pd.alloc_mr(size.max(8), AccessFlags::LOCAL_WRITE)?;
    let rsge = [recv.sge(0, size as u32)];
    end.qp.post_recv(&[RecvWr::new(0, &rsge)])?;
    let start = Instant::now();
    for i in 0..iters {
        if first {
            send[..8].copy_from_slice(&i.to_ne_bytes());
            end.qp
                .post_send(&[SendWr::send(i, &[send.sge(0, size as u32)]).signaled()])?;
            expect(next_wc(&end, events)?, WcOpcode::Send)?;
            let w = expect(next_wc(&end, events)?, WcOpcode::Recv)?;
            check(&recv, w, i, size)?;
            end.qp.post_recv(&[RecvWr::new(i + 1, &rsge)])?;
        } else {
            let w = expect(next_wc(&end, events)?, WcOpcode::Recv)?;
            check(&recv, w, i, size)?;
            end.qp.post_recv(&[RecvWr::new(i + 1, &rsge)])?;
            send[..8].copy_from_slice(&i.to_ne_bytes());
            end.qp
                .post_send(&[SendWr::send(i, &[send.sge(0, size as u32)]).signaled()])?;
            expect(next_wc(&end, events)?, WcOpcode::Send)?;
        }
    }
    Ok(start.elapsed())
}

fn expect(w: Wc, op: WcOpcode) -> Result<Wc> {
    if w.status != WcStatus::Success || w.opcode != op {
        return Err(Error::local(
            "rc_pingpong",
            Errno::EIO,
            format!("completion {w:?}: {}", w.status.as_str()),
        ));
    }
    Ok(w)
}

fn check(recv: &MrBuf, w: Wc, i: u64, size: usize) -> Result<()> {
    let got = u64::from_ne_bytes(recv[..8].try_into().unwrap_or([0; 8]));
    if w.byte_len as usize != size || (size >= 8 && got != i) {
        return Err(Error::local(
            "rc_pingpong",
            Errno::EIO,
            format!("iteration {i}: got {} bytes carrying {got}", w.byte_len),
        ));
    }
    Ok(())
}

fn main() {
    let a = args();
    if let Err(e) = pingpong(&a) {
        eprintln!("rc_pingpong: {e}");
        std::process::exit(1);
    }
}

fn pingpong(a: &Args) -> Result<()> {
    let (da, db) = uroce::pair_devices(a.pair.as_deref())?;
    let opts = PairOpts {
        channel: a.events,
        ..PairOpts::default()
    };
    let (ea, eb) = connect(&da, &db, &opts)?;
    println!(
        "  local address:  QPN {:#08x}, GID {}  ({} on {})",
        ea.qp.qp_num(),
        ea.gid,
        da.name(),
        da.addr()
    );
    println!(
        "  remote address: QPN {:#08x}, GID {}  ({} on {})",
        eb.qp.qp_num(),
        eb.gid,
        db.name(),
        db.addr()
    );
    let (size, iters, events) = (a.size, a.iters, a.events);
    let barrier = Arc::new(std::sync::Barrier::new(2));
    let b2 = barrier.clone();
    let server = std::thread::spawn(move || {
        b2.wait();
        run(eb, size, iters, false, events)
    });
    barrier.wait();
    let elapsed = run(ea, size, iters, true, events)?;
    server
        .join()
        .map_err(|_| Error::local("rc_pingpong", Errno::EIO, "server thread panicked"))??;
    let secs = elapsed.as_secs_f64();
    let bytes = (2 * size as u64 * iters) as f64;
    println!(
        "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
        2 * size as u64 * iters,
        secs,
        bytes * 8.0 / secs / 1e6
    );
    println!(
        "{iters} iters in {secs:.2} seconds = {:.2} usec/iter (round trip), {:.2} usec one way",
        secs * 1e6 / iters as f64,
        secs * 1e6 / iters as f64 / 2.0
    );
    Ok(())
}
