//! ECN congestion control at the device (docs/wire.md §11): a CE-marked packet from the
//! peer makes the QP send the peer a CNP (opcode 0x81, B bit, the peer's QPN, 16 zero bytes,
//! a valid ICRC); a CNP from the peer is handled by the QP's DCQCN reaction point; with ECN
//! off both are only counted. The "peer" is a UDP socket of this test whose TOS says CE, as
//! a marking switch leaves it.

mod common;

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use abi::{AccessFlags, QpType};
use common::*;
use nic::DeviceConfig;
use transport::wire::icrc;
use transport::wire::ip::{IpRepr, UdpRepr};
use transport::wire::{BthRepr, Opcode, Psn, Qpn, RocePacketRepr};

const ALL: u32 = AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0;
const PEER_QPN: u32 = 0x99;

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A RoCEv2 datagram from `from` to `dev_ip` (ICRC for IPv4 ID 0 and DF).
fn datagram(from: &UdpSocket, dev_ip: &str, bth: BthRepr, payload: &[u8]) -> Vec<u8> {
    let pkt = RocePacketRepr::new(bth, payload);
    let mut b = vec![0u8; pkt.buffer_len() + 4];
    let n = pkt.emit(&mut b).unwrap();
    let std::net::IpAddr::V4(src) = from.local_addr().unwrap().ip() else {
        unreachable!()
    };
    let ipr = IpRepr::V4 {
        src,
        dst: dev_ip.parse().unwrap(),
        dscp_ecn: 0,
        ttl: 64,
        ident: 0,
        dont_frag: true,
    };
    let udp = UdpRepr::roce(from.local_addr().unwrap().port());
    let crc = icrc::compute_for(&ipr, &udp, &b[..n]).unwrap();
    b[n..n + 4].copy_from_slice(&icrc::icrc_wire_bytes(crc));
    b.truncate(n + 4);
    b
}

/// A fake peer on `ip`:4791 whose datagrams leave with the ECN field CE.
fn marked_peer(ip: &str) -> UdpSocket {
    let s = UdpSocket::bind((ip, 4791)).unwrap();
    let tos: libc::c_int = 3;
    // SAFETY: a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_TOS,
            (&tos as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s
}

struct Setup {
    dev: nic::DeviceHandle,
    c: Client,
    qpn: u32,
    peer: UdpSocket,
    _buf: Vec<u8>,
}

fn setup(name: &str, ip: &str, peer_ip: &str, ecn: bool) -> Setup {
    let mut cfg = DeviceConfig::new(name, ip.parse().unwrap());
    cfg.ecn = ecn;
    let dev = nic::start_device(cfg).expect("start device");
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let cq = c.create_cq(16, -1, 1).unwrap();
    let mut q = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    let peer = marked_peer(peer_ip);
    c.connect_qp(q.handle, QpType::Rc, PEER_QPN, peer_ip);
    for i in 0..4 {
        c.post_recv(
            q.rq.as_mut().unwrap(),
            i,
            &[sge(buf.as_ptr() as u64 + 64 * i, 64, m.lkey)],
        );
    }
    Setup {
        dev,
        c,
        qpn: q.qpn,
        peer,
        _buf: buf,
    }
}

/// The peer sends one CE-marked SEND with PSN `psn` (the QP's expected PSN is 100).
fn send_marked(s: &Setup, dev_ip: &str, psn: u32) {
    let mut bth = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(s.qpn), Psn::new(psn));
    bth.ack_req = true;
    let d = datagram(&s.peer, dev_ip, bth, b"marked");
    s.peer.send_to(&d, (dev_ip, 4791)).unwrap();
}

#[test]
fn a_ce_marked_packet_gets_a_cnp_and_a_cnp_is_handled() {
    let (ip, peer_ip) = ("127.77.5.1", "127.77.5.2");
    let s = setup("ecn_on", ip, peer_ip, true);
    send_marked(&s, ip, 100);
    // Among what the device answers (an ACK and the CNP, in either order): the CNP.
    let mut cnp = None;
    for _ in 0..8 {
        let mut b = [0u8; 256];
        let (n, from) = s.peer.recv_from(&mut b).unwrap();
        assert_eq!(from.port(), 4791);
        let (pkt, crc) = transport::wire::roce::parse_datagram(&b[..n]).unwrap();
        if pkt.bth.opcode != Opcode::CNP {
            continue;
        }
        // IBTA RoCEv2 Annex A17: BTH + 16 reserved bytes + ICRC; B bit set; the DestQP is
        // the QP whose packet was marked; PSN 0.
        assert_eq!(n, 12 + 16 + 4);
        assert!(pkt.bth.becn && !pkt.bth.fecn && !pkt.bth.ack_req);
        assert_eq!(pkt.bth.dest_qp, Qpn::new(PEER_QPN));
        assert_eq!(pkt.bth.psn, Psn::new(0));
        assert_eq!(pkt.bth.pkey, 0xFFFF);
        assert_eq!(&b[12..28], &[0u8; 16]);
        let udp = UdpRepr::roce(4791);
        let unseen = icrc::verify_udp_v4_unseen_ident(
            ip.parse().unwrap(),
            peer_ip.parse().unwrap(),
            &udp,
            &b[..n - 4],
            crc,
        )
        .expect("the CNP's ICRC verifies");
        assert_eq!((unseen.ident, unseen.dont_frag), (0, true));
        cnp = Some(n);
        break;
    }
    assert!(cnp.is_some(), "a CNP answered the CE-marked packet");
    let t = s.dev.port_counters().transport;
    assert_eq!(t.np_ecn_marked_roce_packets, 1);
    assert_eq!(t.np_cnp_sent, 1);

    // More marks: at most one CNP per marked packet (and per 50 µs).
    for psn in 101..104 {
        send_marked(&s, ip, psn);
    }
    wait_for("marks counted", || {
        s.dev.port_counters().transport.np_ecn_marked_roce_packets == 4
    });
    let sent = s.dev.port_counters().transport.np_cnp_sent;
    assert!((1..=4).contains(&sent), "{sent} CNPs for 4 marks");

    // A CNP from the peer to the QP: its reaction point cuts the rate.
    let mut bth = BthRepr::new(Opcode::CNP, Qpn::new(s.qpn), Psn::new(0));
    bth.becn = true;
    let d = datagram(&s.peer, ip, bth, &[]);
    assert_eq!(d.len(), 12 + 16 + 4, "wire's CNP layout");
    s.peer.send_to(&d, (ip, 4791)).unwrap();
    wait_for("CNP handled", || {
        s.dev.port_counters().transport.rp_cnp_handled == 1
    });
    let t = s.dev.port_counters().transport;
    assert_eq!((t.rcvd_cnp, t.rp_cnp_ignored), (1, 0));
    s.c.close();
}

#[test]
fn with_ecn_off_marks_and_cnps_are_only_counted() {
    let (ip, peer_ip) = ("127.77.5.5", "127.77.5.6");
    let s = setup("ecn_off", ip, peer_ip, false);
    send_marked(&s, ip, 100);
    // The ACK comes back; no CNP.
    let mut b = [0u8; 256];
    let (n, _) = s.peer.recv_from(&mut b).unwrap();
    let (pkt, _) = transport::wire::roce::parse_datagram(&b[..n]).unwrap();
    assert_eq!(pkt.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    let mut bth = BthRepr::new(Opcode::CNP, Qpn::new(s.qpn), Psn::new(0));
    bth.becn = true;
    s.peer
        .send_to(&datagram(&s.peer, ip, bth, &[]), (ip, 4791))
        .unwrap();
    wait_for("CNP counted", || {
        s.dev.port_counters().transport.rp_cnp_ignored == 1
    });
    let t = s.dev.port_counters().transport;
    assert_eq!(t.np_ecn_marked_roce_packets, 1);
    assert_eq!((t.np_cnp_sent, t.rp_cnp_handled, t.rcvd_cnp), (0, 0, 1));
    s.c.close();
}
