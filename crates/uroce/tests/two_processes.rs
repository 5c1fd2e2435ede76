//! One device per process: this test's process runs device `uroce-p` on 127.0.0.5, a
//! child process (this binary again, `child_side`) runs `uroce-c` on 127.0.0.6, and the two
//! talk RoCEv2 over UDP with the QP numbers exchanged through the child's stdin/stdout —
//! the shape of `ibv_rc_pingpong` between two hosts.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use uroce::pair::ALL_ACCESS;
use uroce::*;

const CHILD_ENV: &str = "UROCE_XPROC_CHILD";
const LEN: usize = 1024;

fn pattern() -> Vec<u8> {
    (0..LEN).map(|i| (i * 7 + 3) as u8).collect()
}

struct Side {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
}

fn side(name: &str, addr: &str) -> Side {
    let ctx = uroce::device(name, addr.parse().unwrap()).open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16, None, 0).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq, cap))
        .unwrap();
    Side { ctx, pd, cq, qp }
}

fn wait1(cq: &Cq) -> Wc {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [Wc::default()];
    loop {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        assert!(Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
}

fn fields(line: &str) -> Vec<u64> {
    line.split_whitespace()
        .map(|f| {
            f.parse()
                .unwrap_or_else(|_| panic!("bad field in `{line}`"))
        })
        .collect()
}

/// The child: receive a WRITE and a SEND, check them, report.
#[test]
fn child_side() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let s = side("uroce-c", "127.0.0.6");
    let mr = s.pd.alloc_mr(2 * LEN, ALL_ACCESS).unwrap();
    println!("{} {} {} {}", s.qp.qp_num(), 100, mr.addr(), mr.rkey());
    let mut stdin = BufReader::new(std::io::stdin());
    let mut line = String::new();
    stdin.read_line(&mut line).unwrap();
    let f = fields(&line);
    let gid = s.ctx.query_gid(PORT, 0).unwrap();
    assert_eq!(
        gid.to_ip(),
        "127.0.0.6".parse::<std::net::IpAddr>().unwrap()
    );
    let peer = QpEndpoint {
        qpn: f[0] as u32,
        psn: f[1] as u32,
        gid: Gid::from("127.0.0.5".parse::<std::net::IpAddr>().unwrap()),
    };
    let o = ConnectOpts {
        sq_psn: 100,
        ..ConnectOpts::default()
    };
    s.qp.connect(&peer, &o).unwrap();
    s.qp.post_recv(&[RecvWr::new(1, &[mr.sge(LEN, 64)])])
        .unwrap();
    println!("ready");
    let w = wait1(&s.cq);
    assert_eq!(
        (w.status, w.byte_len, w.imm_data()),
        (WcStatus::Success, 5, Some(0x1234))
    );
    assert_eq!(&mr[LEN..LEN + 5], b"hello");
    // The WRITE was posted before the SEND on the same QP, so it has landed.
    assert!(mr[..LEN] == pattern()[..], "WRITE data differs");
    println!("ok");
    line.clear();
    stdin.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "bye");
}

#[test]
fn one_device_per_process_over_udp() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_side",
            "--test-threads=1",
            "--nocapture",
            "-q",
        ])
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_child = child.stdin.take().unwrap();
    let mut from_child = BufReader::new(child.stdout.take().unwrap());
    let mut next_line = || {
        // libtest prints its own lines around the test's; ours are the ones we expect.
        loop {
            let mut l = String::new();
            assert!(
                from_child.read_line(&mut l).unwrap() > 0,
                "child exited early"
            );
            let t = l.trim().to_string();
            if t == "ready" || t == "ok" || t.split_whitespace().count() == 4 {
                return t;
            }
        }
    };
    let s = side("uroce-p", "127.0.0.5");
    let f = fields(&next_line());
    let (qpn, psn, addr, rkey) = (f[0] as u32, f[1] as u32, f[2], f[3] as u32);
    writeln!(to_child, "{} {}", s.qp.qp_num(), 200).unwrap();
    let peer = QpEndpoint {
        qpn,
        psn,
        gid: Gid::from("127.0.0.6".parse::<std::net::IpAddr>().unwrap()),
    };
    let o = ConnectOpts {
        sq_psn: 200,
        ..ConnectOpts::default()
    };
    s.qp.connect(&peer, &o).unwrap();
    assert_eq!(next_line(), "ready");
    let mut src = s.pd.alloc_mr(2 * LEN, ALL_ACCESS).unwrap();
    src[..LEN].copy_from_slice(&pattern());
    src[LEN..LEN + 5].copy_from_slice(b"hello");
    s.qp.post_send(&[
        SendWr::write(1, &[src.sge(0, LEN as u32)], addr, rkey),
        SendWr::send(2, &[src.sge(LEN, 5)])
            .with_imm(0x1234)
            .signaled(),
    ])
    .unwrap();
    let w = wait1(&s.cq);
    assert_eq!((w.wr_id, w.status), (2, WcStatus::Success));
    assert_eq!(next_line(), "ok");
    writeln!(to_child, "bye").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
}
