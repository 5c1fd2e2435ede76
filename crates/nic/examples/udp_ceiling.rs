//! What a stream of 64 KiB messages between two processes over loopback costs at the least
//! on UDP with RoCEv2's datagram size, beside TCP in the same run: the ceiling of the
//! two-device figure of `uroce bench ratios` (docs/perftest.md §9).
//!
//! ```text
//! cargo run --release -p nic --example udp_ceiling [-- SECS [SPAN_KIB]]
//! ```
//!
//! A forked child receives; this process sends for SECS seconds (default 3) each of:
//! * **TCP**: 64 KiB `write`s to a loopback TCP connection, read 128 KiB at a time (iperf3's
//!   shape);
//! * **UDP GSO**: one `sendmsg` of 62 datagrams of 1,040 bytes (a RoCEv2 packet at MTU 1024:
//!   BTH, 1,024 bytes of payload, ICRC) with `UDP_SEGMENT`, to a socket with `UDP_GRO`,
//!   which takes the whole send in one `recvmsg` (the kernel does not cut it up on
//!   loopback);
//! * **UDP GSO + copy + ICRC**: the same, and on each side what a RoCEv2 device must do
//!   per packet at the least: the sender copies the payload out of a source (the registered
//!   memory) into the datagram and seals it with its ICRC; the receiver checks the ICRC and
//!   copies the payload into a destination. No transport, no ACKs. The source and the
//!   destination span SPAN_KIB (default 64: one message, reused, as perftest's 64 KiB
//!   messages all use one buffer slot; 16384 streams them from memory).
//!
//! * **RC WRITEs' shape**: the same work, with the datagrams an RC connection's 64 KiB
//!   RDMA WRITEs at MTU 1024 take: a message is 64 packets, the first 16 bytes longer (its
//!   RETH), so it leaves as two GSO sends (the first two datagrams; the other 62), and the
//!   receiver answers each message with an ACK datagram (BTH, AETH, ICRC) that the sender
//!   reads from its socket; the sender waits for the ACK of the message two before (128
//!   packets unacknowledged at most: rxe's and uroce's window). Still no transport: what
//!   the socket interface costs a RoCEv2 device at the least for this stream. The last
//!   line leaves out the two payload copies (the sender seals datagrams already built, the
//!   receiver only checks them): what a device that placed payloads with no copy of its
//!   own, on both sides, could reach at best.
//!
//! The figures are payload bytes per second as the receiver saw them. UDP has no flow
//! control, and a sender faster than its receiver would spend its time on datagrams the
//! receiver's socket then drops: the sender here stays at most [`WINDOW`] sends ahead of
//! what the receiver counted, a counter in memory both processes map (no system call, as
//! RC's window and ACKs would pace it).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use wire::icrc;
use wire::{IpRepr, UdpRepr};

/// A RoCEv2 datagram at MTU 1024: BTH (12), payload, ICRC (4).
const DGRAM: usize = 12 + PAYLOAD + 4;
const PAYLOAD: usize = 1024;
/// Datagrams per GSO send: what fits one 64 KiB UDP payload.
const SEGS: usize = 62;
/// GSO sends the sender may be ahead of the receiver (1 MiB of datagrams).
const WINDOW: u64 = 16;
/// `UDP_SEGMENT`, `UDP_GRO` (linux/udp.h).
const UDP_SEGMENT: libc::c_int = 103;
const UDP_GRO: libc::c_int = 104;

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let dur = Duration::from_secs_f64(secs);
    let span = std::env::args()
        .nth(2)
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(64)
        .max(1)
        * 1024
        / PAYLOAD
        * PAYLOAD;
    // The receiver's count of datagrams, in memory the forked child shares.
    // SAFETY: a fresh shared anonymous mapping of one page, never unmapped (the program
    // ends with it).
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED, "mmap");
    // SAFETY: the page is zeroed, aligned and lives as long as the program.
    let count: &'static AtomicU64 = unsafe { &*page.cast::<AtomicU64>() };
    let tcp = measure(|| tcp_run(dur));
    let raw = measure(|| udp_run(dur, false, count, span));
    let work = measure(|| udp_run(dur, true, count, span));
    let rc = measure(|| udp_rc_run(dur, span, true));
    let rc_nocopy = measure(|| udp_rc_run(dur, span, false));
    println!(
        "payload MB/s as received, {secs} s each, span {} KiB (ratio to TCP)",
        span / 1024
    );
    for (name, v) in [
        ("TCP over loopback, 128 KiB writes", tcp),
        ("UDP GSO 62 x 1040 B to a GRO socket", raw),
        ("UDP GSO + per-packet copy and ICRC on each side", work),
        ("the same in RC WRITEs' shape, an ACK per message", rc),
        (
            "  and without the payload copies (only the ICRCs)",
            rc_nocopy,
        ),
    ] {
        println!("{name:<50} {v:>9.0} MB/s  {:.2}", v / tcp);
    }
}

/// Run `f` (which forks its receiver and returns the receiver's bytes and seconds) and
/// turn that into MB/s.
fn measure(f: impl FnOnce() -> (u64, f64)) -> f64 {
    let (bytes, secs) = f();
    if secs > 0.0 {
        bytes as f64 / secs / 1e6
    } else {
        0.0
    }
}

/// Fork a receiver running `recv` (which returns its payload bytes and the seconds from
/// its first to its last receive), run `send` here, and collect the receiver's figures.
fn with_child(recv: impl FnOnce() -> (u64, f64), send: impl FnOnce()) -> (u64, f64) {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        panic!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the child only runs `recv`, writes to the pipe and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let (bytes, secs) = recv();
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&bytes.to_le_bytes());
        out[8..].copy_from_slice(&secs.to_le_bytes());
        // SAFETY: writes 16 bytes of `out` to the pipe's write end, then ends the child.
        unsafe {
            libc::write(fds[1], out.as_ptr().cast(), out.len());
            libc::_exit(0);
        }
    }
    send();
    let mut got = [0u8; 16];
    // SAFETY: reads at most 16 bytes into `got`; the descriptors are ours.
    unsafe {
        libc::close(fds[1]);
        libc::read(fds[0], got.as_mut_ptr().cast(), got.len());
        libc::close(fds[0]);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let bytes = u64::from_le_bytes(got[..8].try_into().unwrap_or_default());
    let secs = f64::from_le_bytes(got[8..].try_into().unwrap_or_default());
    (bytes, secs)
}

fn tcp_run(dur: Duration) -> (u64, f64) {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("tcp listen");
    let addr = l.local_addr().expect("tcp addr");
    with_child(
        || {
            let (mut s, _) = l.accept().expect("accept");
            let mut buf = vec![0u8; 128 << 10];
            let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
            while let Ok(n) = s.read(&mut buf) {
                if n == 0 {
                    break;
                }
                first.get_or_insert_with(Instant::now);
                bytes += n as u64;
                last = Instant::now();
            }
            let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
            (bytes, secs)
        },
        || {
            let mut s = TcpStream::connect(addr).expect("connect");
            let buf = vec![7u8; 128 << 10];
            let end = Instant::now() + dur;
            while Instant::now() < end {
                s.write_all(&buf).expect("tcp write");
            }
        },
    )
}

fn setsockopt(fd: libc::c_int, level: libc::c_int, name: libc::c_int, v: libc::c_int) {
    // SAFETY: passes a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        panic!(
            "setsockopt({level}, {name}): {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The ICRC of a datagram whose BTH..payload is `t` from `src` port 49152 to 4791 on
/// 127.0.0.1, as a sender computes it (IPv4 Identification 0, DF).
fn icrc_of(t: &[u8]) -> u32 {
    let ip = IpRepr::v4_socket(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 0, 64);
    icrc::compute_for(&ip, &UdpRepr::roce(49152), t).unwrap_or(0)
}

/// What a receiver reports: its payload bytes and the seconds from its first to its last
/// receive (and, on stderr, datagrams whose ICRC did not check).
fn received(bytes: u64, first: Option<Instant>, last: Instant, bad: u64, dst: &[u8]) -> (u64, f64) {
    if bad > 0 {
        eprintln!("udp_ceiling: {bad} datagrams failed their ICRC");
    }
    std::hint::black_box(dst);
    let secs = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    (bytes, secs)
}

/// The receiving socket: UDP GRO, an 8 MiB buffer, reads that give up after 300 ms (the
/// stream has ended).
fn gro_receiver() -> (UdpSocket, SocketAddr) {
    let rx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("udp bind");
    let to: SocketAddr = rx.local_addr().expect("udp addr");
    setsockopt(rx.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1);
    setsockopt(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 8 << 20);
    rx.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    (rx, to)
}

fn udp_run(dur: Duration, work: bool, count: &AtomicU64, span: usize) -> (u64, f64) {
    count.store(0, Ordering::SeqCst);
    let (rx, to) = gro_receiver();
    with_child(
        || {
            let mut buf = vec![0u8; 64 << 10];
            let mut dst = vec![0u8; span];
            let mut at = 0usize;
            let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
            let mut bad = 0u64;
            // (No GRO size needed: every datagram of the stream is DGRAM bytes.)
            while let Ok(n) = rx.recv(&mut buf) {
                first.get_or_insert_with(Instant::now);
                for d in buf[..n].chunks(DGRAM) {
                    if work && d.len() == DGRAM {
                        let (t, crc) = d.split_at(DGRAM - 4);
                        if icrc_of(t) != icrc::read_icrc(crc) {
                            bad += 1;
                        }
                        dst[at..at + PAYLOAD].copy_from_slice(&t[12..]);
                        at = (at + PAYLOAD) % span;
                    }
                    bytes += (d.len().saturating_sub(16)) as u64;
                }
                count.fetch_add((n / DGRAM) as u64, Ordering::Release);
                last = Instant::now();
            }
            received(bytes, first, last, bad, &dst)
        },
        || {
            let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("udp bind");
            tx.connect(to).expect("udp connect");
            setsockopt(tx.as_raw_fd(), libc::SOL_UDP, UDP_SEGMENT, DGRAM as i32);
            setsockopt(tx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
            let src: Vec<u8> = (0..span).map(|i| i as u8).collect();
            let mut msg = vec![0u8; SEGS * DGRAM];
            let mut at = 0usize;
            let end = Instant::now() + dur;
            let mut sent = 0u64;
            let mut stalls = 0u64;
            while Instant::now() < end {
                // Wait for the receiver to be within the window (a lost datagram would
                // stall it for good: give up waiting after 10 ms).
                let since = Instant::now();
                while sent.saturating_sub(count.load(Ordering::Acquire)) > WINDOW * SEGS as u64
                    && since.elapsed() < Duration::from_millis(10)
                {
                    std::hint::spin_loop();
                }
                if since.elapsed() >= Duration::from_millis(10) {
                    stalls += 1;
                    // Start counting afresh from what the receiver has.
                    sent = count.load(Ordering::Acquire);
                }
                if work {
                    for d in msg.chunks_mut(DGRAM) {
                        d[12..12 + PAYLOAD].copy_from_slice(&src[at..at + PAYLOAD]);
                        at = (at + PAYLOAD) % span;
                        let (t, crc) = d.split_at_mut(DGRAM - 4);
                        crc.copy_from_slice(&icrc::icrc_wire_bytes(icrc_of(t)));
                    }
                }
                // A full socket buffer (ENOBUFS/EAGAIN) drops this send, as a wire would.
                let _ = tx.send(&msg);
                sent += SEGS as u64;
            }
            if stalls > 0 {
                eprintln!("udp_ceiling: the receiver lost datagrams ({stalls} stalls of 10 ms)");
            }
        },
    )
}

/// Packets of a 64 KiB message at MTU 1024.
const MSG_PKTS: usize = 64;
/// Messages the RC sender may have unacknowledged (128 packets).
const RC_WINDOW: u64 = 2;
/// A first packet: BTH, RETH (16), payload, ICRC.
const FIRST: usize = DGRAM + 16;
/// An ACK: BTH, AETH (4), ICRC.
const ACK: usize = 12 + 4 + 4;

/// A message header naming one buffer and a control buffer of `ctrl_len` bytes.
fn msghdr(iov: &mut libc::iovec, ctrl: &mut [u64; 8], ctrl_len: usize) -> libc::msghdr {
    // SAFETY: msghdr is a plain C struct for which all-zero bytes are a valid value.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov;
    m.msg_iovlen = 1;
    m.msg_control = ctrl.as_mut_ptr().cast();
    m.msg_controllen = ctrl_len.min(std::mem::size_of_val(ctrl));
    m
}

/// Send `buf` as one GSO send of `seg`-byte datagrams (`UDP_SEGMENT` as a control message).
fn send_gso(fd: libc::c_int, buf: &[u8], seg: usize) {
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr().cast_mut().cast(),
        iov_len: buf.len(),
    };
    let mut ctrl = [0u64; 8];
    // SAFETY: the msghdr names `iov` and `ctrl`, both live for the call; CMSG_* only
    // compute offsets into `ctrl`, which has room for one u16 control message.
    unsafe {
        let m = msghdr(&mut iov, &mut ctrl, libc::CMSG_SPACE(2) as usize);
        let c = libc::CMSG_FIRSTHDR(&m);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg as u16);
        // A full socket buffer drops the send, as a wire would (the window then stalls).
        libc::sendmsg(fd, &m, 0);
    }
}

fn udp_rc_run(dur: Duration, span: usize, copy: bool) -> (u64, f64) {
    let (rx, to) = gro_receiver();
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("udp bind");
    let back: SocketAddr = tx.local_addr().expect("udp addr");
    with_child(
        || {
            let mut buf = vec![0u8; 64 << 10];
            let mut dst = vec![0u8; span];
            let mut ack = [0u8; ACK];
            let (mut at, mut pkts) = (0usize, 0usize);
            let (mut bytes, mut first, mut last) = (0u64, None, Instant::now());
            let mut bad = 0u64;
            while let Ok((n, seg)) = recv_gro(&rx, &mut buf) {
                first.get_or_insert_with(Instant::now);
                for d in buf[..n].chunks(if seg == 0 { n } else { seg }) {
                    let hl = d.len().saturating_sub(PAYLOAD + 4);
                    if hl != DGRAM - PAYLOAD - 4 && hl != FIRST - PAYLOAD - 4 {
                        continue;
                    }
                    let (t, crc) = d.split_at(d.len() - 4);
                    if icrc_of(t) != icrc::read_icrc(crc) {
                        bad += 1;
                    }
                    if copy {
                        dst[at..at + PAYLOAD].copy_from_slice(&t[hl..]);
                    }
                    at = (at + PAYLOAD) % span;
                    bytes += PAYLOAD as u64;
                    pkts += 1;
                    if pkts % MSG_PKTS == 0 {
                        let (t, crc) = ack.split_at_mut(ACK - 4);
                        crc.copy_from_slice(&icrc::icrc_wire_bytes(icrc_of(t)));
                        let _ = rx.send_to(&ack, back);
                    }
                }
                last = Instant::now();
            }
            received(bytes, first, last, bad, &dst)
        },
        || {
            tx.connect(to).expect("udp connect");
            tx.set_nonblocking(true).expect("nonblocking");
            setsockopt(tx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, 8 << 20);
            let src: Vec<u8> = (0..span).map(|i| i as u8).collect();
            let mut msg = vec![0u8; FIRST + (MSG_PKTS - 1) * DGRAM];
            let mut acks = [0u8; 64];
            let (mut at, mut sent, mut acked) = (0usize, 0u64, 0u64);
            let end = Instant::now() + dur;
            let mut stalls = 0u64;
            while Instant::now() < end {
                // Read what ACKs have come (the sender's device polls its socket), and wait
                // while the window is full (give up after 10 ms: something was dropped).
                let since = Instant::now();
                loop {
                    while tx.recv(&mut acks).is_ok() {
                        acked += 1;
                    }
                    if sent < acked + RC_WINDOW {
                        break;
                    }
                    if since.elapsed() >= Duration::from_millis(10) {
                        stalls += 1;
                        acked = sent;
                        break;
                    }
                    std::hint::spin_loop();
                }
                let mut o = 0;
                for i in 0..MSG_PKTS {
                    let hl = if i == 0 { FIRST } else { DGRAM } - PAYLOAD - 4;
                    let d = &mut msg[o..o + hl + PAYLOAD + 4];
                    if copy {
                        d[hl..hl + PAYLOAD].copy_from_slice(&src[at..at + PAYLOAD]);
                    }
                    at = (at + PAYLOAD) % span;
                    let (t, crc) = d.split_at_mut(hl + PAYLOAD);
                    crc.copy_from_slice(&icrc::icrc_wire_bytes(icrc_of(t)));
                    o += hl + PAYLOAD + 4;
                }
                send_gso(tx.as_raw_fd(), &msg[..FIRST + DGRAM], FIRST);
                send_gso(tx.as_raw_fd(), &msg[FIRST + DGRAM..], DGRAM);
                sent += 1;
            }
            if stalls > 0 {
                eprintln!("udp_ceiling: the receiver lost datagrams ({stalls} stalls of 10 ms)");
            }
        },
    )
}

/// `recv` on a GRO socket: the message's length and the size of its datagrams (0 if the
/// kernel did not say: one datagram).
fn recv_gro(s: &UdpSocket, buf: &mut [u8]) -> std::io::Result<(usize, usize)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut ctrl = [0u64; 8];
    // SAFETY: the msghdr names `iov` and `ctrl`, both live for the call; the control
    // messages the kernel wrote lie within `ctrl`.
    unsafe {
        let mut m = msghdr(&mut iov, &mut ctrl, usize::MAX);
        let n = libc::recvmsg(s.as_raw_fd(), &mut m, 0);
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut seg = 0;
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                // An int (udp(7)).
                seg = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>()) as usize;
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
        Ok((n as usize, seg))
    }
}
