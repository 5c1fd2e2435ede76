//! Bad MADs on the wire to a device's QP 1 (IBTA Vol 1 §13.5; Linux's MAD layer drops
//! them): a truncated CM MAD, a whole MAD that is not a CM message, and 256 bytes of zeros
//! arrive as RoCEv2 UD SEND Only packets from a plain UDP socket. The CM drops and counts
//! each one as malformed, answers none, reports no event and keeps no ID; a well-formed
//! REQ after them is still answered (REJ, nobody listens).

mod common;

use std::net::UdpSocket;
use std::time::{Duration, Instant};

use common::*;
use transport::wire::icrc;
use transport::wire::ip::{IpRepr, UdpRepr};
use transport::wire::{BthRepr, DethRepr, Opcode, Psn, Qkey, Qpn, RocePacketRepr};

const DEV_IP: &str = "127.77.65.1";
const PEER_IP: &str = "127.77.65.2";

/// A UD SEND Only to QP 1 with the GSI Q_Key carrying `mad`, with its ICRC.
fn gsi_datagram(from: &UdpSocket, mad: &[u8]) -> Vec<u8> {
    let bth = BthRepr::new(Opcode::UD_SEND_ONLY, Qpn::GSI, Psn::new(0));
    let mut pkt = RocePacketRepr::new(bth, mad);
    pkt.deth = Some(DethRepr {
        qkey: Qkey::GSI,
        src_qp: Qpn::GSI,
    });
    let mut b = vec![0u8; pkt.buffer_len() + 4];
    let n = pkt.emit(&mut b).expect("emit");
    let std::net::IpAddr::V4(src) = from.local_addr().expect("addr").ip() else {
        unreachable!("IPv4 socket")
    };
    let ipr = IpRepr::V4 {
        src,
        dst: DEV_IP.parse().expect("ip"),
        dscp_ecn: 0,
        ttl: 64,
        ident: 0,
        dont_frag: true,
    };
    let udp = UdpRepr::roce(from.local_addr().expect("addr").port());
    let crc = icrc::compute_for(&ipr, &udp, &b[..n]).expect("icrc");
    b[n..n + 4].copy_from_slice(&icrc::icrc_wire_bytes(crc));
    b.truncate(n + 4);
    b
}

/// A CM MAD header (base version 1, class 0x07 version 2, method Send) for `attr_id`,
/// followed by zeros up to 256 bytes.
fn cm_mad(attr_id: u16) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    m[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
    m[8..16].copy_from_slice(&0x1234_5678_9abc_def0u64.to_be_bytes());
    m[16..18].copy_from_slice(&attr_id.to_be_bytes());
    m
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn truncated_and_malformed_mads_are_dropped_and_counted() {
    let dev = device("gsi_bad", DEV_IP);
    let peer = UdpSocket::bind((PEER_IP, 4791)).expect("bind the peer's RoCE port");
    peer.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    let to = (DEV_IP, 4791);
    let malformed = || dev.with_cm(|cm, _| cm.stats().mads_malformed);
    let before = malformed();

    // A REQ cut to 200 bytes, a whole MAD of another management class, all zeros.
    let req = cm_mad(0x0010);
    let mut other_class = cm_mad(0x0010);
    other_class[1] = 0x81;
    for (i, mad) in [&req[..200], &other_class[..], &[0u8; 256][..]]
        .into_iter()
        .enumerate()
    {
        peer.send_to(&gsi_datagram(&peer, mad), to).expect("send");
        wait_for("the bad MAD counted", || malformed() > before + i as u64);
    }
    assert_eq!(malformed(), before + 3);
    assert!(dev.cm_poll_event().is_none(), "no event for a bad MAD");
    assert_eq!(dev.with_cm(|cm, _| cm.live_ids()), 0, "no ID kept");
    let mut buf = [0u8; 512];
    assert!(
        peer.recv_from(&mut buf).is_err(),
        "no answer to a bad MAD (got one)"
    );

    // The CM still serves: the whole REQ (to a Service ID nobody listens on) is answered,
    // with a REJ (attribute 0x0012) to the sender's RoCE port.
    peer.send_to(&gsi_datagram(&peer, &req), to).expect("send");
    peer.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let (n, _) = peer
        .recv_from(&mut buf)
        .expect("an answer to the whole REQ");
    // BTH 12 + DETH 8, then the MAD: attribute ID at MAD offset 16.
    let attr = buf.get(20 + 16..20 + 18).expect("a MAD in the answer");
    assert!(n >= 20 + 256, "{n} bytes");
    assert_eq!(attr, &[0x00, 0x12], "REJ");
    assert_eq!(malformed(), before + 3);
}
