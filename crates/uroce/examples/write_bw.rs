//! RDMA WRITE bandwidth, after perftest's `ib_write_bw`: one QP keeps `--tx-depth` WRITEs
//! in flight to a peer's buffer and the program prints Gbit/s and messages per second.
//!
//! ```text
//! cargo run --release -p uroce --example write_bw                         # one device (loopback)
//! cargo run --release -p uroce --example write_bw -- --pair 127.0.0.1,127.0.0.2
//! cargo run --release -p uroce --example write_bw -- -s 8 -n 1000000 -l 16
//! ```
//!
//! Completions are requested for one WRITE in `--cq-mod` (perftest's `-Q`), and `-l` posts
//! that many WRITEs per `post_send` call (perftest's `--post_list`, one doorbell per list).
//! `--verify` checks the destination buffer at the end.

use std::time::Instant;

use uroce::pair::{connect, PairOpts, ALL_ACCESS};
use uroce::*;

struct Args {
    size: usize,
    iters: u64,
    tx_depth: u64,
    post_list: u64,
    cq_mod: u64,
    pair: Option<String>,
    verify: bool,
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("write_bw: {msg}");
    }
    eprintln!(
        "usage: write_bw [-s SIZE] [-n ITERS] [-t TX_DEPTH] [-l POST_LIST] [-Q CQ_MOD] \
         [--pair ADDR1,ADDR2] [--verify]"
    );
    std::process::exit(2)
}

fn args() -> Args {
    let mut a = Args {
        size: 65536,
        iters: 5000,
        tx_depth: 128,
        post_list: 1,
        cq_mod: 32,
        pair: None,
        verify: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut num = |what: &str| -> u64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| usage(&format!("{what} needs a number")))
        };
        match arg.as_str() {
            "-s" | "--size" => a.size = num("--size") as usize,
            "-n" | "--iters" => a.iters = num("--iters"),
            "-t" | "--tx-depth" => a.tx_depth = num("--tx-depth"),
            "-l" | "--post-list" => a.post_list = num("--post-list"),
            "-Q" | "--cq-mod" => a.cq_mod = num("--cq-mod"),
            "--pair" => a.pair = Some(it.next().unwrap_or_else(|| usage("--pair needs a value"))),
            "--verify" => a.verify = true,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.iters == 0 || a.tx_depth == 0 || a.post_list == 0 || a.cq_mod == 0 {
        usage("counts must be > 0");
    }
    a.post_list = a.post_list.min(a.tx_depth);
    a
}

fn main() {
    let a = args();
    if let Err(e) = bench(&a) {
        eprintln!("write_bw: {e}");
        std::process::exit(1);
    }
}

fn bench(a: &Args) -> Result<()> {
    let (da, db) = uroce::pair_devices(a.pair.as_deref())?;
    let mut opts = PairOpts::default();
    opts.cap.max_send_wr = a.tx_depth as u32;
    opts.cqe = a.tx_depth as u32;
    let (ea, eb) = connect(&da, &db, &opts)?;
    let mut src = ea.pd.alloc_mr(a.size, AccessFlags::LOCAL_WRITE)?;
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(2_654_435_761) as u8;
    }
    let dst = eb.pd.alloc_mr(a.size, ALL_ACCESS)?;
    let rm = dst.remote();
    let sge = [src.sge(0, a.size as u32)];
    println!(
        " RDMA_Write BW: {} ({}) -> {} ({}), {} bytes x {} iterations, tx depth {}, post list {}",
        da.name(),
        da.addr(),
        db.name(),
        db.addr(),
        a.size,
        a.iters,
        a.tx_depth,
        a.post_list
    );
    let mut wc = [Wc::default(); 16];
    let mut list: Vec<SendWr<'_>> = Vec::with_capacity(a.post_list as usize);
    let (mut posted, mut done) = (0u64, 0u64);
    let start = Instant::now();
    while done < a.iters {
        while posted < a.iters && a.tx_depth - (posted - done) >= a.post_list.min(a.iters - posted)
        {
            list.clear();
            let n = a.post_list.min(a.iters - posted);
            for k in 0..n {
                let id = posted + k;
                let mut wr = SendWr::write(id, &sge, rm.addr, rm.rkey);
                if id % a.cq_mod == a.cq_mod - 1 || id == a.iters - 1 {
                    wr = wr.signaled();
                }
                list.push(wr);
            }
            match ea.qp.post_send(&list) {
                Ok(()) => posted += n,
                // Queue full (the device has not returned every retired slot yet): the WRs
                // before `index` went out; retry the rest after polling.
                Err(e) if e.error.errno() == Errno::ENOMEM => {
                    posted += e.index as u64;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let k = ea.cq.poll(&mut wc)?;
        for w in &wc[..k] {
            if w.status != WcStatus::Success {
                return Err(Error::local(
                    "write_bw",
                    Errno::EIO,
                    format!("WRITE {} failed: {}", w.wr_id, w.status.as_str()),
                ));
            }
            done = w.wr_id + 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = a.size as f64 * a.iters as f64;
    println!(" #bytes     #iterations    BW average[Gb/sec]    MsgRate[Mpps]");
    println!(
        " {:<10} {:<14} {:<21.2} {:.6}",
        a.size,
        a.iters,
        bytes * 8.0 / secs / 1e9,
        a.iters as f64 / secs / 1e6
    );
    println!(
        " {:.3} s, {:.2} Gbit/s, {:.0} msg/s",
        secs,
        bytes * 8.0 / secs / 1e9,
        a.iters as f64 / secs
    );
    if a.verify {
        if dst[..] != src[..] {
            return Err(Error::local(
                "write_bw",
                Errno::EIO,
                "verify: destination differs",
            ));
        }
        println!(" verify: destination matches");
    }
    Ok(())
}
