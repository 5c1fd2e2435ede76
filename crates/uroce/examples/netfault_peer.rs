//! One end of a bulk transfer between two uroce devices in two processes (two network
//! namespaces in `scripts/netfault-test.sh`, with loss, reordering, duplication and corruption
//! on the kernel path between them): the client moves `--bytes` by RDMA WRITE and then
//! `--bytes` by SEND over one RC QP, the server verifies every byte, and each prints a
//! one-line JSON summary with its device's port counters.
//!
//! ```text
//! netfault_peer --server [--dev 10.79.0.1]                  # in namespace nfa
//! netfault_peer --client 10.79.0.1 [--dev 10.79.0.2]        # in namespace nfb
//! ```
//!
//! The two ends exchange QPN, first PSN, GID, path MTU and the WRITE target (address, rkey,
//! length) over a plain TCP connection, as `ibv_rc_pingpong` does; netfault impairs only UDP,
//! so this exchange is reliable while the RoCEv2 traffic is not.
//!
//! * WRITE: the client keeps `--depth` signaled WRITEs of `--msg-size` bytes in flight into
//!   one server buffer of `--bytes`; message `i` lands at offset `i × msg-size` and carries
//!   the pattern of message `i`. An RC WRITE completes at the requester only once the
//!   responder acknowledged it, i.e. placed it (docs/wire.md §5.2), so after the last
//!   completion the client says `WRITE_DONE` over TCP and the server checks the whole buffer.
//! * SEND: the server keeps `max(2 × depth, 16)` receives posted; RC delivers messages in
//!   order, so the `k`-th receive completion must be message `k`, and the server checks its
//!   length and every byte before reposting the buffer.
//!
//! Both ends use the verbs API of `uroce` only, except that the device is started first
//! with [`nic::start_device`] to set the port MTU (`--mtu`, default 1024; 4096 needs a link
//! MTU above 4096 + headers) and optionally the engine's spin window (`--spin-us`).
//! Transport retries are unlimited (`retry_cnt` and `rnr_retry` 7) with the local ACK
//! timeout code `--ack-timeout` (4.096 µs × 2^code; default 10 ≈ 4 ms). While the RDMA
//! traffic stalls each end watches the TCP connection, so a peer that failed ends the run
//! at once instead of leaving the other end retrying until `--deadline`.
//!
//! Payload bytes come from a keyed hash of (phase, message, word), so a message that is
//! misplaced, stale, duplicated or corrupted does not verify. Any error completion, any
//! mismatch, or running past `--deadline` makes the program exit non-zero (the summary then
//! has `"ok":false` and the reason).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use uroce::*;

/// Default TCP port of the out-of-band exchange (ibv_rc_pingpong's).
const DEFAULT_PORT: u16 = 18515;
/// Version tag of the exchange lines.
const TAG: &str = "NFPEER1";
/// Pattern keys of the two phases.
const SEED_WRITE: u64 = 0x5752_4954_455f_3031;
const SEED_SEND: u64 = 0x5345_4e44_5f5f_3032;

type Res<T> = std::result::Result<T, String>;

/// Attach what was being done to any displayable error.
trait Ctx<T> {
    fn ctx(self, what: &str) -> Res<T>;
}

impl<T, E: std::fmt::Display> Ctx<T> for std::result::Result<T, E> {
    fn ctx(self, what: &str) -> Res<T> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Server,
    Client(String),
}

#[derive(Clone, Debug)]
struct Args {
    role: Role,
    dev: Option<IpAddr>,
    port: u16,
    bytes: u64,
    msg_size: usize,
    depth: usize,
    mtu: u32,
    ack_timeout: u8,
    deadline: Duration,
    write: bool,
    send: bool,
    yield_idle: bool,
    spin_us: Option<u32>,
    psn: u32,
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("netfault_peer: {msg}");
    }
    eprintln!(
        "usage: netfault_peer (--server | --client HOST[:PORT]) [--dev ADDR] [--port PORT]\n\
         \x20      [--bytes N[K|M|G]] [--msg-size N[K|M]] [--depth N] [--mtu 256..4096]\n\
         \x20      [--ack-timeout CODE] [--deadline SECS] [--phases write,send]\n\
         \x20      [--yield-idle] [--spin-us US] [--psn PSN]\n\
         The device is --dev ADDR (named uroce0), else the first entry of UROCE_DEVICES.\n\
         Sizes and the plan are the client's; the server takes them from the exchange."
    );
    std::process::exit(2)
}

/// `123`, `64K`, `256M`, `1G` (binary multiples).
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1u64 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mul)
}

fn args() -> Args {
    let mut a = Args {
        role: Role::Server,
        dev: None,
        port: DEFAULT_PORT,
        bytes: 256 << 20,
        msg_size: 128 << 10,
        depth: 2,
        mtu: 1024,
        ack_timeout: 10,
        deadline: Duration::from_secs(900),
        write: true,
        send: true,
        yield_idle: false,
        spin_us: None,
        // Just below the 24-bit wrap, so that every run crosses it (docs/wire.md §5.1).
        psn: 0xff_f000,
    };
    let mut role = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{arg} needs a value")))
        };
        let size = |v: String, what: &str| {
            parse_size(&v).unwrap_or_else(|| usage(&format!("bad {what} `{v}`")))
        };
        match arg.as_str() {
            "--server" => role = Some(Role::Server),
            "--client" => role = Some(Role::Client(val())),
            "--dev" => {
                a.dev = Some(
                    val()
                        .parse()
                        .unwrap_or_else(|_| usage("--dev wants an IP address")),
                )
            }
            "--port" => a.port = val().parse().unwrap_or_else(|_| usage("bad --port")),
            "--bytes" => a.bytes = size(val(), "--bytes"),
            "--msg-size" => a.msg_size = size(val(), "--msg-size") as usize,
            "--depth" => a.depth = size(val(), "--depth") as usize,
            "--mtu" => a.mtu = size(val(), "--mtu") as u32,
            "--ack-timeout" => {
                a.ack_timeout = val().parse().unwrap_or_else(|_| usage("bad --ack-timeout"))
            }
            "--deadline" => {
                a.deadline =
                    Duration::from_secs(val().parse().unwrap_or_else(|_| usage("bad --deadline")))
            }
            "--phases" => {
                let v = val();
                a.write = v.split(',').any(|p| p == "write");
                a.send = v.split(',').any(|p| p == "send");
                if !a.write && !a.send {
                    usage("--phases wants write, send or write,send");
                }
            }
            "--yield-idle" => a.yield_idle = true,
            "--spin-us" => {
                a.spin_us = Some(val().parse().unwrap_or_else(|_| usage("bad --spin-us")))
            }
            "--psn" => a.psn = parse_u32(&val()).unwrap_or_else(|| usage("bad --psn")) & 0xff_ffff,
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    a.role = role.unwrap_or_else(|| usage("--server or --client HOST is required"));
    if a.msg_size == 0 || a.msg_size % 8 != 0 || a.msg_size > (1 << 30) {
        usage("--msg-size must be a non-zero multiple of 8, at most 1G");
    }
    if a.bytes == 0 || a.bytes % a.msg_size as u64 != 0 {
        usage("--bytes must be a non-zero multiple of --msg-size");
    }
    if a.depth == 0 || a.depth > 4096 {
        usage("--depth must be 1..=4096");
    }
    if mtu_enum(a.mtu).is_none() {
        usage("--mtu must be 256, 512, 1024, 2048 or 4096");
    }
    a
}

fn parse_u32(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

fn mtu_enum(bytes: u32) -> Option<Mtu> {
    Some(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return None,
    })
}

// ---------------------------------------------------------------------------------------
// The payload pattern.

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Word `w` (stored as 8 little-endian bytes) of the message whose key is `base`.
fn pattern_word(base: u64, w: u64) -> u64 {
    splitmix64(base ^ w.wrapping_mul(0xD6E8_FEB8_6659_FD93))
}

/// The key of message `msg` of the phase keyed `seed`.
fn message_base(seed: u64, msg: u64) -> u64 {
    splitmix64(seed ^ splitmix64(msg))
}

fn fill(buf: &mut [u8], seed: u64, msg: u64) {
    let base = message_base(seed, msg);
    for (w, chunk) in buf.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&pattern_word(base, w as u64).to_le_bytes());
    }
}

/// `None` if `buf` is message `msg`'s pattern, else the first differing byte offset and the
/// number of differing 8-byte words.
fn verify(buf: &[u8], seed: u64, msg: u64) -> Option<(usize, u64)> {
    let base = message_base(seed, msg);
    let mut first = None;
    let mut bad = 0u64;
    for (w, chunk) in buf.chunks_exact(8).enumerate() {
        let want = pattern_word(base, w as u64).to_le_bytes();
        if chunk != want {
            bad += 1;
            if first.is_none() {
                let byte = chunk.iter().zip(want).position(|(a, b)| *a != b);
                first = Some(w * 8 + byte.unwrap_or(0));
            }
        }
    }
    first.map(|f| (f, bad))
}

// ---------------------------------------------------------------------------------------
// The out-of-band exchange: one text line each way, `TAG role key=value ...`.

struct Line {
    stream: BufReader<TcpStream>,
    /// A line [`Line::check_peer`] read ahead.
    pending: Option<String>,
}

impl Line {
    fn new(s: TcpStream) -> Res<Line> {
        s.set_nodelay(true).ctx("TCP_NODELAY")?;
        Ok(Line {
            stream: BufReader::new(s),
            pending: None,
        })
    }

    fn send(&mut self, line: &str) -> Res<()> {
        let s = self.stream.get_mut();
        s.write_all(line.as_bytes()).ctx("tcp send")?;
        s.write_all(b"\n").ctx("tcp send")?;
        s.flush().ctx("tcp send")
    }

    fn recv(&mut self) -> Res<String> {
        if let Some(l) = self.pending.take() {
            return Ok(l);
        }
        let mut l = String::new();
        let n = self.stream.read_line(&mut l).ctx("tcp receive")?;
        if n == 0 {
            return Err("peer closed the TCP connection".into());
        }
        Ok(l.trim_end().to_string())
    }

    /// While the RDMA traffic stalls: has the peer given up (closed the connection or sent
    /// `ERROR`)? Its QP is then gone and ours would retry forever (retry_cnt 7). Any other
    /// line is kept for the next [`Line::recv`].
    fn check_peer(&mut self) -> Res<()> {
        if self.pending.is_some() {
            return Ok(());
        }
        self.stream.get_ref().set_nonblocking(true).ctx("tcp")?;
        let r = self.stream.fill_buf().map(|b| b.is_empty());
        self.stream.get_ref().set_nonblocking(false).ctx("tcp")?;
        match r {
            Ok(true) => Err("the peer closed the TCP connection".into()),
            Ok(false) => {
                let l = self.recv()?;
                match l.strip_prefix("ERROR ") {
                    Some(rest) => Err(format!("peer failed: {rest}")),
                    None => {
                        self.pending = Some(l);
                        Ok(())
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(format!("tcp: {e}")),
        }
    }

    /// After a local failure: if the peer reported one of its own (`ERROR ...`) within a
    /// moment, say that too, since it is usually the cause (e.g. a verification failure
    /// at the server shows up here as an error completion).
    fn peer_error(&mut self, e: String) -> String {
        if e.starts_with("peer failed") {
            return e;
        }
        let _ = self
            .stream
            .get_ref()
            .set_read_timeout(Some(Duration::from_secs(2)));
        while let Ok(l) = self.recv() {
            if let Some(rest) = l.strip_prefix("ERROR ") {
                return format!("{e}; the server says: {rest}");
            }
        }
        e
    }

    /// Receive a line and insist that it starts with `word`; returns the rest.
    fn expect(&mut self, word: &str) -> Res<String> {
        let l = self.recv()?;
        match l.split_once(' ').unwrap_or((l.as_str(), "")) {
            (w, rest) if w == word => Ok(rest.to_string()),
            ("ERROR", rest) => Err(format!("peer failed: {rest}")),
            _ => Err(format!("expected {word} from the peer, got `{l}`")),
        }
    }
}

fn kv(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn get<T: std::str::FromStr>(m: &HashMap<String, String>, k: &str) -> Res<T> {
    m.get(k)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("exchange: missing or bad `{k}`"))
}

// ---------------------------------------------------------------------------------------
// Device and QP.

struct Setup {
    name: String,
    addr: IpAddr,
    pd: Pd,
    chan: CompChannel,
    cq: Cq,
    qp: Qp,
    gid: Gid,
}

fn device_spec(a: &Args) -> Res<(String, IpAddr)> {
    if let Some(addr) = a.dev {
        return Ok(("uroce0".to_string(), addr));
    }
    let d = uroce::devices()
        .ctx("device list (UROCE_DEVICES)")?
        .into_iter()
        .next()
        .ok_or("UROCE_DEVICES names no device")?;
    Ok((d.name().to_string(), d.addr()))
}

/// Start the device with the port MTU the path needs (the provider would start it with the
/// default 1024), then open it through the verbs API like any application.
fn setup(a: &Args, max_send_wr: u32, max_recv_wr: u32) -> Res<Setup> {
    let (name, addr) = device_spec(a)?;
    let mut cfg = nic::DeviceConfig::new(name.clone(), addr);
    cfg.active_mtu = a.mtu;
    cfg.yield_when_idle = a.yield_idle;
    if let Some(us) = a.spin_us {
        cfg.spin_us = us;
        cfg.max_spin_us = us;
        cfg.busy_spin_us = us;
    }
    nic::start_device(cfg).ctx(&format!("start device {name} on {addr}"))?;
    let ctx = uroce::device(&name, addr).open().ctx("open device")?;
    let pd = ctx.alloc_pd().ctx("alloc_pd")?;
    let chan = ctx.create_comp_channel().ctx("create_comp_channel")?;
    let cqe = (max_send_wr + max_recv_wr).next_power_of_two().max(16);
    let cq = ctx.create_cq(cqe, Some(&chan), 0).ctx("create_cq")?;
    let qp = pd
        .create_qp(&QpInitAttr::new(
            QpType::Rc,
            &cq,
            QpCap {
                max_send_wr,
                max_recv_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
        ))
        .ctx("create_qp")?;
    let gid = ctx.query_gid(PORT, 0).ctx("query_gid")?;
    Ok(Setup {
        name,
        addr,
        pd,
        chan,
        cq,
        qp,
        gid,
    })
}

fn connect(s: &Setup, a: &Args, remote: QpEndpoint, mtu: u32) -> Res<()> {
    let o = ConnectOpts {
        path_mtu: mtu_enum(mtu).ok_or("exchange: bad path MTU")?,
        sq_psn: a.psn,
        timeout: a.ack_timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectOpts::default()
    };
    s.qp.connect(&remote, &o).ctx("connect QP (INIT, RTR, RTS)")
}

/// Wait for completions: poll the CQ, and when it is empty arm it and sleep on the
/// completion channel, so the application does not take a core from the engine.
fn wait_wc(s: &Setup, wc: &mut [Wc], line: &mut Line, deadline: Instant) -> Res<usize> {
    loop {
        for _ in 0..64 {
            let n = s.cq.poll(wc).ctx("poll_cq")?;
            if n > 0 {
                return Ok(n);
            }
            std::thread::yield_now();
        }
        s.cq.req_notify(false).ctx("req_notify_cq")?;
        let n = s.cq.poll(wc).ctx("poll_cq")?;
        if n > 0 {
            return Ok(n);
        }
        match s
            .chan
            .get_event(Some(Duration::from_millis(200)))
            .ctx("get_cq_event")?
        {
            Some(cq) => cq.ack_events(1),
            None => line.check_peer()?,
        }
        if Instant::now() > deadline {
            return Err("deadline passed while waiting for completions".into());
        }
    }
}

fn check_wc(w: &Wc, op: WcOpcode, what: &str) -> Res<()> {
    if w.status != WcStatus::Success {
        return Err(format!(
            "{what} wr_id {} completed with {} (vendor_err {})",
            w.wr_id,
            w.status.as_str(),
            w.vendor_err
        ));
    }
    if w.opcode != op {
        return Err(format!(
            "{what} wr_id {}: completion opcode {:?}, expected {op:?}",
            w.wr_id, w.opcode
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Summary.

#[derive(Default)]
struct Phase {
    bytes: u64,
    messages: u64,
    verified: u64,
    secs: f64,
}

#[derive(Default)]
struct Summary {
    /// Posts refused with ENOMEM (SQ ring full) and retried.
    ring_full: u64,
    write: Option<Phase>,
    send: Option<Phase>,
}

fn json_str(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// One line of JSON: flat keys (unique, so a shell script can pick them with grep), then
/// the device's port counters and this QP's transport counters.
fn print_summary(
    role: &str,
    a: &Args,
    plan: Option<(u64, usize, usize, u32)>,
    setup: Option<&Setup>,
    sum: &Summary,
    err: Option<&str>,
) {
    let mut o = String::new();
    let _ = write!(o, "{{\"role\":{}", json_str(role));
    if let Some(s) = setup {
        let _ = write!(
            o,
            ",\"device\":{},\"addr\":{},\"qpn\":{}",
            json_str(&s.name),
            json_str(&s.addr.to_string()),
            s.qp.qp_num()
        );
    }
    if let Some((bytes, msg, depth, mtu)) = plan {
        let _ = write!(
            o,
            ",\"bytes\":{bytes},\"msg_size\":{msg},\"depth\":{depth},\"path_mtu\":{mtu},\
             \"ack_timeout\":{}",
            a.ack_timeout
        );
    }
    for (name, p) in [("write", &sum.write), ("send", &sum.send)] {
        if let Some(p) = p {
            let mib_s = if p.secs > 0.0 {
                p.bytes as f64 / p.secs / (1 << 20) as f64
            } else {
                0.0
            };
            let _ = write!(
                o,
                ",\"{name}_bytes\":{},\"{name}_messages\":{},\"{name}_verified_bytes\":{},\
                 \"{name}_secs\":{:.3},\"{name}_mib_s\":{:.2}",
                p.bytes, p.messages, p.verified, p.secs, mib_s
            );
        }
    }
    let _ = write!(o, ",\"post_ring_full\":{}", sum.ring_full);
    let _ = write!(
        o,
        ",\"ok\":{},\"error\":{}",
        err.is_none(),
        err.map_or("null".to_string(), json_str)
    );
    if let Some(s) = setup {
        if let Some(h) = nic::device(&s.name) {
            o.push_str(",\"counters\":{");
            for (i, (k, v)) in h.port_counters().iter().enumerate() {
                let _ = write!(o, "{}\"{k}\":{v}", if i > 0 { "," } else { "" });
            }
            o.push('}');
            if let Some(c) = h.qp_counters(s.qp.qp_num()) {
                o.push_str(",\"qp_counters\":{");
                for (i, (k, v)) in c.iter().enumerate() {
                    let _ = write!(o, "{}\"qp_{k}\":{v}", if i > 0 { "," } else { "" });
                }
                o.push('}');
            }
        }
    }
    o.push('}');
    println!("{o}");
}

// ---------------------------------------------------------------------------------------
// Client: the requester of both phases.

fn tcp_connect(target: &str, port: u16, deadline: Instant) -> Res<TcpStream> {
    let with_port = if target.parse::<IpAddr>().is_ok() || !target.contains(':') {
        match target.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
            _ => format!("{target}:{port}"),
        }
    } else {
        target.to_string()
    };
    let addrs: Vec<SocketAddr> = with_port
        .to_socket_addrs()
        .ctx(&format!("resolve {with_port}"))?
        .collect();
    let give_up = (Instant::now() + Duration::from_secs(30)).min(deadline);
    loop {
        let mut last = String::from("no address");
        for sa in &addrs {
            match TcpStream::connect_timeout(sa, Duration::from_secs(2)) {
                Ok(s) => return Ok(s),
                Err(e) => last = format!("{sa}: {e}"),
            }
        }
        if Instant::now() > give_up {
            return Err(format!("cannot reach the server: {last}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn client(a: &Args, target: &str, setup_out: &mut Option<Setup>, sum: &mut Summary) -> Res<()> {
    let deadline = Instant::now() + a.deadline;
    let s = setup_out.insert(setup(a, 2 * a.depth as u32, 1)?);
    let mut line = Line::new(tcp_connect(target, a.port, deadline)?)?;
    line.send(&format!(
        "{TAG} client qpn={} psn={} gid={} mtu={} bytes={} msg={} depth={} write={} send={}",
        s.qp.qp_num(),
        a.psn,
        s.gid.to_ip(),
        a.mtu,
        a.bytes,
        a.msg_size,
        a.depth,
        u8::from(a.write),
        u8::from(a.send)
    ))?;
    let m = kv(&line.expect(TAG)?);
    let gid: IpAddr = get(&m, "gid")?;
    let remote = QpEndpoint {
        qpn: get(&m, "qpn")?,
        psn: get(&m, "psn")?,
        gid: Gid::from(gid),
    };
    let mtu = a.mtu.min(get(&m, "mtu")?);
    let (raddr, rkey, rlen): (u64, u32, u64) =
        (get(&m, "addr")?, get(&m, "rkey")?, get(&m, "len")?);
    connect(s, a, remote, mtu)?;
    line.send("RTS")?;
    line.expect("READY")?;
    eprintln!(
        "netfault_peer client: QPN {:#x} on {} -> QPN {:#x} at {gid}; path MTU {mtu}, {} B \
         messages, depth {}",
        s.qp.qp_num(),
        s.addr,
        remote.qpn,
        a.msg_size,
        a.depth
    );
    let target = Remote {
        addr: raddr,
        rkey,
        len: rlen,
    };
    transfer(a, s, &mut line, sum, target, deadline).map_err(|e| line.peer_error(e))
}

/// Where the client WRITEs.
struct Remote {
    addr: u64,
    rkey: u32,
    len: u64,
}

/// The client's two phases.
fn transfer(
    a: &Args,
    s: &Setup,
    line: &mut Line,
    sum: &mut Summary,
    r: Remote,
    deadline: Instant,
) -> Res<()> {
    let mut src =
        s.pd.alloc_mr(a.msg_size * a.depth, AccessFlags::LOCAL_WRITE)
            .ctx("alloc source buffer")?;
    let msgs = a.bytes / a.msg_size as u64;
    for (phase, seed) in [(a.write, SEED_WRITE), (a.send, SEED_SEND)] {
        if !phase {
            continue;
        }
        let is_write = seed == SEED_WRITE;
        let what = if is_write { "WRITE" } else { "SEND" };
        if is_write && r.len < a.bytes {
            return Err(format!(
                "server's WRITE buffer holds {} bytes, need {}",
                r.len, a.bytes
            ));
        }
        let start = Instant::now();
        let mut wc = [Wc::default(); 32];
        let (mut posted, mut done) = (0u64, 0u64);
        while done < msgs {
            let mut full = false;
            while posted < msgs && posted - done < a.depth as u64 {
                let slot = (posted % a.depth as u64) as usize * a.msg_size;
                fill(&mut src[slot..slot + a.msg_size], seed, posted);
                let sge = [src.sge(slot, a.msg_size as u32)];
                let wr = if is_write {
                    SendWr::write(posted, &sge, r.addr + posted * a.msg_size as u64, r.rkey)
                } else {
                    SendWr::send(posted, &sge)
                };
                match s.qp.post_send(&[wr.signaled()]) {
                    Ok(()) => posted += 1,
                    // The engine frees an SQ slot when it retires the WQE, which may be a
                    // moment after the completion was polled: post again a little later.
                    Err(e) if e.error.errno() == Errno::ENOMEM => {
                        sum.ring_full += 1;
                        full = true;
                        break;
                    }
                    Err(e) => return Err(format!("post {what} {posted}: {e}")),
                }
            }
            if posted == done {
                if full {
                    std::thread::yield_now();
                }
                continue;
            }
            let n = wait_wc(s, &mut wc, line, deadline)?;
            for w in &wc[..n] {
                check_wc(
                    w,
                    if is_write {
                        WcOpcode::RdmaWrite
                    } else {
                        WcOpcode::Send
                    },
                    what,
                )?;
                if w.wr_id != done {
                    return Err(format!(
                        "{what} completion for wr_id {}, expected {done}",
                        w.wr_id
                    ));
                }
                done += 1;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        line.send(&format!("{what}_DONE messages={msgs}"))?;
        let v = kv(&line.expect(&format!("{what}_VERIFIED"))?);
        let verified: u64 = get(&v, "bytes")?;
        let p = Phase {
            bytes: a.bytes,
            messages: msgs,
            verified,
            secs,
        };
        eprintln!(
            "netfault_peer client: {what}: {} bytes in {secs:.2} s ({:.1} MiB/s), server verified {verified}",
            a.bytes,
            a.bytes as f64 / secs / (1 << 20) as f64
        );
        if is_write {
            sum.write = Some(p);
        } else {
            sum.send = Some(p);
        }
        if verified != a.bytes {
            return Err(format!(
                "server verified {verified} of {} {what} bytes",
                a.bytes
            ));
        }
    }
    line.send("BYE")?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Server: the responder; verifies.

struct Plan {
    bytes: u64,
    msg: usize,
    depth: usize,
    mtu: u32,
}

fn server(
    a: &Args,
    setup_out: &mut Option<Setup>,
    plan_out: &mut Option<Plan>,
    sum: &mut Summary,
) -> Res<()> {
    let deadline = Instant::now() + a.deadline;
    let (_, dev_addr) = device_spec(a)?;
    let listener = TcpListener::bind(SocketAddr::new(dev_addr, a.port))
        .ctx(&format!("listen on {dev_addr}:{}", a.port))?;
    eprintln!("netfault_peer server: waiting on {dev_addr}:{}", a.port);
    let (stream, peer) = listener.accept().ctx("accept")?;
    let mut line = Line::new(stream)?;
    let reply_err = |line: &mut Line, e: String| {
        let _ = line.send(&format!("ERROR {e}"));
        e
    };
    let m = kv(&line.expect(TAG)?);
    let m2 = m.clone();
    let plan = (|| -> Res<Plan> {
        let p = Plan {
            bytes: get(&m2, "bytes")?,
            msg: get(&m2, "msg")?,
            depth: get(&m2, "depth")?,
            mtu: a.mtu.min(get(&m2, "mtu")?),
        };
        if p.msg == 0 || p.msg % 8 != 0 || p.bytes % p.msg as u64 != 0 || p.depth == 0 {
            return Err("exchange: bad plan".into());
        }
        if p.depth > 4096 || p.msg > 1 << 30 || p.bytes > 64 << 30 {
            return Err("exchange: plan too large".into());
        }
        Ok(p)
    })()
    .map_err(|e| reply_err(&mut line, e))?;
    let (do_write, do_send) = (get::<u8>(&m, "write")? == 1, get::<u8>(&m, "send")? == 1);
    let recv_depth = (2 * plan.depth).max(16);
    let plan = plan_out.insert(plan);
    let s = setup_out.insert(setup(a, 1, recv_depth as u32).map_err(|e| reply_err(&mut line, e))?);
    let gid: IpAddr = get(&m, "gid")?;
    let remote = QpEndpoint {
        qpn: get(&m, "qpn")?,
        psn: get(&m, "psn")?,
        gid: Gid::from(gid),
    };
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let target =
        s.pd.alloc_mr(if do_write { plan.bytes as usize } else { 8 }, access)
            .map_err(|e| reply_err(&mut line, format!("alloc WRITE target: {e}")))?;
    let mut recv =
        s.pd.alloc_mr(plan.msg * recv_depth, AccessFlags::LOCAL_WRITE)
            .map_err(|e| reply_err(&mut line, format!("alloc receive buffers: {e}")))?;
    let rm = target.remote();
    line.send(&format!(
        "{TAG} server qpn={} psn={} gid={} mtu={} addr={} rkey={} len={}",
        s.qp.qp_num(),
        a.psn,
        s.gid.to_ip(),
        plan.mtu,
        rm.addr,
        rm.rkey,
        rm.len
    ))?;
    connect(s, a, remote, plan.mtu).map_err(|e| reply_err(&mut line, e))?;
    let msgs = plan.bytes / plan.msg as u64;
    // Receives for the SEND phase go up before the client may send anything.
    let mut next_recv = 0u64;
    if do_send {
        while next_recv < msgs.min(recv_depth as u64) {
            let off = (next_recv % recv_depth as u64) as usize * plan.msg;
            let sge = [recv.sge(off, plan.msg as u32)];
            s.qp.post_recv(&[RecvWr::new(next_recv, &sge)])
                .ctx("post_recv")?;
            next_recv += 1;
        }
    }
    line.expect("RTS")?;
    line.send("READY")?;
    eprintln!(
        "netfault_peer server: client {peer} (QPN {:#x} at {gid}); path MTU {}, {} x {} B",
        remote.qpn, plan.mtu, msgs, plan.msg
    );
    if do_write {
        let start = Instant::now();
        let rest = line.expect("WRITE_DONE")?;
        let secs = start.elapsed().as_secs_f64();
        let n: u64 = get(&kv(&rest), "messages")?;
        if n != msgs {
            return Err(reply_err(
                &mut line,
                format!("client wrote {n} messages, plan says {msgs}"),
            ));
        }
        let mut verified = 0u64;
        for (i, chunk) in target.chunks_exact(plan.msg).enumerate() {
            if let Some((off, words)) = verify(chunk, SEED_WRITE, i as u64) {
                let e = format!(
                    "WRITE message {i}: byte {off} differs ({words} of {} words bad)",
                    plan.msg / 8
                );
                sum.write = Some(Phase {
                    bytes: plan.bytes,
                    messages: msgs,
                    verified,
                    secs,
                });
                return Err(reply_err(&mut line, e));
            }
            verified += plan.msg as u64;
        }
        line.send(&format!("WRITE_VERIFIED bytes={verified}"))?;
        sum.write = Some(Phase {
            bytes: plan.bytes,
            messages: msgs,
            verified,
            secs,
        });
    }
    if do_send {
        let start = Instant::now();
        let mut wc = [Wc::default(); 32];
        let mut got = 0u64;
        let mut verified = 0u64;
        while got < msgs {
            let n =
                wait_wc(s, &mut wc, &mut line, deadline).map_err(|e| reply_err(&mut line, e))?;
            for w in &wc[..n] {
                let fail = |e: String, verified: u64, sum: &mut Summary| {
                    sum.send = Some(Phase {
                        bytes: plan.bytes,
                        messages: msgs,
                        verified,
                        secs: start.elapsed().as_secs_f64(),
                    });
                    e
                };
                if let Err(e) = check_wc(w, WcOpcode::Recv, "RECV") {
                    return Err(reply_err(&mut line, fail(e, verified, sum)));
                }
                if w.wr_id != got || w.byte_len as usize != plan.msg {
                    let e = format!(
                        "RECV {got}: completion for wr_id {} with {} bytes, expected {} bytes",
                        w.wr_id, w.byte_len, plan.msg
                    );
                    return Err(reply_err(&mut line, fail(e, verified, sum)));
                }
                let off = (got % recv_depth as u64) as usize * plan.msg;
                if let Some((at, words)) = verify(&recv[off..off + plan.msg], SEED_SEND, got) {
                    let e = format!(
                        "SEND message {got}: byte {at} differs ({words} of {} words bad)",
                        plan.msg / 8
                    );
                    return Err(reply_err(&mut line, fail(e, verified, sum)));
                }
                verified += plan.msg as u64;
                // Poison the buffer so that a receive that lands nothing cannot pass.
                recv[off..off + 8].copy_from_slice(&[0xa5; 8]);
                got += 1;
                if next_recv < msgs {
                    let sge = [recv.sge(off, plan.msg as u32)];
                    s.qp.post_recv(&[RecvWr::new(next_recv, &sge)])
                        .ctx("post_recv")?;
                    next_recv += 1;
                }
            }
        }
        let secs = start.elapsed().as_secs_f64();
        line.expect("SEND_DONE")?;
        line.send(&format!("SEND_VERIFIED bytes={verified}"))?;
        sum.send = Some(Phase {
            bytes: plan.bytes,
            messages: msgs,
            verified,
            secs,
        });
    }
    line.expect("BYE")?;
    Ok(())
}

fn main() {
    let a = args();
    let role = match a.role {
        Role::Server => "server",
        Role::Client(_) => "client",
    };
    // A watchdog, so that a stuck transfer fails the test instead of hanging it.
    let deadline = a.deadline + Duration::from_secs(5);
    std::thread::spawn(move || {
        std::thread::sleep(deadline);
        println!(
            "{{\"role\":{},\"ok\":false,\"error\":\"watchdog: deadline passed\"}}",
            json_str(role)
        );
        std::process::exit(3);
    });
    let mut setup = None;
    let mut sum = Summary::default();
    let (result, plan) = match &a.role {
        Role::Server => {
            let mut plan = None;
            let r = server(&a, &mut setup, &mut plan, &mut sum);
            (r, plan.map(|p| (p.bytes, p.msg, p.depth, p.mtu)))
        }
        Role::Client(t) => {
            let r = client(&a, t, &mut setup, &mut sum);
            (r, Some((a.bytes, a.msg_size, a.depth, a.mtu)))
        }
    };
    let err = result.err();
    if let Some(e) = &err {
        eprintln!("netfault_peer {role}: {e}");
    }
    print_summary(role, &a, plan, setup.as_ref(), &sum, err.as_deref());
    // Keep the QP's resources alive until the summary has read the counters.
    drop(setup);
    std::process::exit(if err.is_some() { 1 } else { 0 });
}
