//! The ICRC worked examples A–G of docs/wire.md §3.5, built byte for byte from the hex given there.

use std::net::{Ipv4Addr, Ipv6Addr};

use wire::frame::{build_l3, parse_l3};
use wire::icrc;
use wire::{IpRepr, Msn, Opcode, Psn, Qpn, Rkey, Syndrome, UdpRepr};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    assert_eq!(s.len() % 2, 0, "odd hex");
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
        .collect()
}

const ETH_V4: &str = "020000000002 020000000001 0800";
const ETH_V6: &str = "020000000002 020000000001 86dd";

const A: &str = "45 02 0034 0001 4000 40 11 b762 c0a80101 c0a80102
                 c132 12b7 0020 0000
                 04 30 ffff 00 000012 80 123456
                 68656c6c6f 000000
                 4273c384";
const B: &str = "45 03 0034 0001 4000 11 11 e661 c0a80101 c0a80102
                 c132 12b7 0020 0000
                 04 30 ffff 00 000012 80 123456
                 68656c6c6f 000000
                 4273c384";
const C: &str = "45 02 0034 0001 4000 40 11 b762 c0a80101 c0a80102
                 c132 12b7 0020 0000
                 04 30 ffff 80 000012 80 123456
                 68656c6c6f 000000
                 4273c384";
const D: &str = "6 02 12345 0020 11 40
                 fd000000000000000000000000000001 fd000000000000000000000000000002
                 c132 12b7 0020 0000 0430ffff 00000012 80123456 68656c6c6f000000 60f0d8d8";
const E: &str =
    "45020030000140004011b766c0a80101c0a80102 c13212b7001c0000 1100ffff00000011 00123456
                 1f000001 15599361";
const F: &str =
    "45020044000140004011b752c0a80101c0a80102 c13212b700300000 0a00ffff00000012 80000001
                 00007f0000001000 00001234 00000008 0001020304050607 31f5bfef";
const G_FRAME: &str = "e41d2dab2bc2 7cfe90643b32 0800 45c2003c718c400040119161 0a001101 0a001201
                       000012b700280000 8100ffff40000118 00000000 00000000000000000000000000000000
                       82fd002a";

/// Frame = Ethernet ‖ L3; returns the L3 part after checking the Ethernet header and length.
fn l3_of(eth: &str, l3: &str, frame_len: Option<usize>) -> Vec<u8> {
    let mut frame = unhex(eth);
    frame.extend(unhex(l3));
    if let Some(n) = frame_len {
        assert_eq!(frame.len(), n);
    }
    frame.split_off(14)
}

/// Common checks: the ICRC equals `icrc_hex` (wire order), every way of computing it agrees,
/// and rebuilding from the parsed reprs reproduces the frame byte for byte.
fn check<'a>(l3: &'a [u8], icrc_hex: &str) -> wire::ParsedFrame<'a> {
    let wire_bytes = unhex(icrc_hex);
    let n = l3.len();
    assert_eq!(&l3[n - 4..], &wire_bytes[..]);
    let crc = icrc::compute(&l3[..n - 4]).expect("compute");
    assert_eq!(icrc::icrc_wire_bytes(crc)[..], wire_bytes[..]);
    assert!(icrc::verify(l3));
    let f = parse_l3(l3).expect("parse_l3");
    assert!(f.icrc_ok && f.ip_checksum_ok);
    assert_eq!(f.icrc_wire, crc);
    assert!(f.check_icrc().is_ok());
    let mut out = vec![0u8; n];
    assert_eq!(build_l3(&f.ip, &f.udp, &f.packet, &mut out), Ok(n));
    assert_eq!(out, l3);
    // The socket-side computation from reprs gives the same ICRC.
    let transport = &l3[f.ip.header_len() + 8..n - 4];
    assert_eq!(icrc::compute_for(&f.ip, &f.udp, transport), Ok(crc));
    assert!(icrc::verify_udp(&f.ip, &f.udp, transport, crc));
    f
}

#[test]
fn example_a_send_only_hello_ipv4() {
    let l3 = l3_of(ETH_V4, A, Some(66));
    let f = check(&l3, "42 73 c3 84");
    assert_eq!(
        f.ip,
        IpRepr::V4 {
            src: Ipv4Addr::new(192, 168, 1, 1),
            dst: Ipv4Addr::new(192, 168, 1, 2),
            dscp_ecn: 0x02,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }
    );
    assert_eq!(
        f.udp,
        UdpRepr {
            src_port: 0xC132,
            dst_port: 4791,
            checksum: 0
        }
    );
    let b = f.packet.bth;
    assert_eq!(b.opcode, Opcode::RC_SEND_ONLY);
    assert_eq!(
        (b.pad_count, b.pkey, b.dest_qp, b.ack_req, b.psn),
        (3, 0xFFFF, Qpn::new(0x12), true, Psn::new(0x123456))
    );
    assert_eq!(f.packet.payload, b"hello");
    // The same frame from scratch.
    let pkt = wire::RocePacketRepr::new(b, b"hello");
    let mut out = vec![0u8; 52];
    assert_eq!(
        build_l3(&f.ip, &UdpRepr::roce(0xC132), &pkt, &mut out),
        Ok(52)
    );
    assert_eq!(out, l3);
}

#[test]
fn example_b_tos_and_ttl_do_not_change_icrc() {
    let l3 = l3_of(ETH_V4, B, Some(66));
    let f = check(&l3, "42 73 c3 84");
    match f.ip {
        IpRepr::V4 { dscp_ecn, ttl, .. } => assert_eq!((dscp_ecn, ttl), (0x03, 17)),
        IpRepr::V6 { .. } => panic!("v4 expected"),
    }
    assert_eq!(&l3[10..12], &[0xe6, 0x61]);
}

#[test]
fn example_c_fecn_does_not_change_icrc() {
    let l3 = l3_of(ETH_V4, C, Some(66));
    let f = check(&l3, "42 73 c3 84");
    assert!(f.packet.bth.fecn);
}

#[test]
fn example_d_ipv6() {
    let l3 = l3_of(ETH_V6, D, Some(86));
    let f = check(&l3, "60 f0 d8 d8");
    assert_eq!(
        f.ip,
        IpRepr::V6 {
            src: "fd00::1".parse::<Ipv6Addr>().expect("addr"),
            dst: "fd00::2".parse::<Ipv6Addr>().expect("addr"),
            traffic_class: 0x02,
            flow_label: 0x12345,
            hop_limit: 64,
        }
    );
    assert_eq!(f.packet.payload, b"hello");
}

#[test]
fn example_e_acknowledge() {
    let l3 = l3_of(ETH_V4, E, None);
    let f = check(&l3, "15 59 93 61");
    assert_eq!(f.packet.bth.opcode, Opcode::RC_ACKNOWLEDGE);
    assert_eq!(f.packet.bth.dest_qp, Qpn::new(0x11));
    assert!(!f.packet.bth.ack_req);
    let aeth = f.packet.aeth.expect("AETH");
    assert_eq!(
        (aeth.syndrome, aeth.msn),
        (Syndrome::ACK_UNLIMITED, Msn::new(1))
    );
    assert!(f.packet.payload.is_empty());
}

#[test]
fn example_f_rdma_write_only() {
    let l3 = l3_of(ETH_V4, F, None);
    let f = check(&l3, "31 f5 bf ef");
    assert_eq!(f.packet.bth.opcode, Opcode::RC_RDMA_WRITE_ONLY);
    assert_eq!(f.packet.bth.psn, Psn::new(1));
    let reth = f.packet.reth.expect("RETH");
    assert_eq!(
        (reth.va, reth.rkey, reth.len),
        (0x0000_7F00_0000_1000, Rkey(0x1234), 8)
    );
    assert_eq!(f.packet.payload, &[0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn example_g_connectx4_cnp() {
    let l3 = l3_of("", G_FRAME, Some(74));
    let f = check(&l3, "82 fd 00 2a");
    assert_eq!(f.icrc_wire, 0x2A00_FD82);
    assert_eq!(f.packet.bth.opcode, Opcode::CNP);
    assert!(f.packet.bth.becn);
    assert_eq!(f.packet.bth.dest_qp, Qpn::new(0x118));
    assert_eq!(f.udp.src_port, 0);
    match f.ip {
        IpRepr::V4 {
            dscp_ecn,
            ident,
            dont_frag,
            ..
        } => {
            assert_eq!((dscp_ecn, ident, dont_frag), (0xC2, 0x718C, true));
        }
        IpRepr::V6 { .. } => panic!("v4 expected"),
    }
}

/// The UDP-socket receive check recovers the sender's IPv4 ID and DF from the ICRC alone.
#[test]
fn unseen_ident_recovered_from_examples() {
    for (eth, hex, ident) in [
        (ETH_V4, A, 1u16),
        (ETH_V4, E, 1),
        (ETH_V4, F, 1),
        ("", G_FRAME, 0x718C),
    ] {
        let l3 = l3_of(eth, hex, None);
        let f = parse_l3(&l3).expect("parse");
        let IpRepr::V4 { src, dst, .. } = f.ip else {
            panic!("v4")
        };
        let transport = &l3[28..l3.len() - 4];
        let got = icrc::verify_udp_v4_unseen_ident(src, dst, &f.udp, transport, f.icrc_wire);
        assert_eq!(
            got,
            Some(icrc::UnseenIpv4 {
                ident,
                dont_frag: true
            })
        );
        // Wrong source address: rejected.
        let wrong = Ipv4Addr::new(192, 168, 1, 3);
        assert_eq!(
            icrc::verify_udp_v4_unseen_ident(wrong, dst, &f.udp, transport, f.icrc_wire),
            None
        );
    }
}

/// What a NIC sending through a UDP socket computes (ID 0, DF) is what a capture of the packet
/// would verify.
#[test]
fn socket_send_icrc_matches_built_frame() {
    let l3 = l3_of(ETH_V4, A, None);
    let f = parse_l3(&l3).expect("parse");
    let IpRepr::V4 {
        src,
        dst,
        dscp_ecn,
        ttl,
        ..
    } = f.ip
    else {
        panic!("v4")
    };
    let ip = IpRepr::v4_socket(src, dst, dscp_ecn, ttl);
    let transport = &l3[28..l3.len() - 4];
    let crc = icrc::compute_for(&ip, &f.udp, transport).expect("compute_for");
    let mut out = vec![0u8; l3.len()];
    build_l3(&ip, &f.udp, &f.packet, &mut out).expect("build");
    assert_eq!(icrc::read_icrc(&out[out.len() - 4..]), crc);
    assert_ne!(crc, f.icrc_wire, "ID 1 vs ID 0 must change the ICRC");
    assert_eq!(&out[4..6], &[0, 0]);
    assert_eq!(out[6], 0x40);
}

#[test]
fn corrupted_example_is_reported_not_rejected() {
    let mut l3 = l3_of(ETH_V4, A, None);
    l3[45] ^= 0x01; // a payload byte
    let f = parse_l3(&l3).expect("still parses");
    assert!(!f.icrc_ok);
    assert_eq!(f.check_icrc(), Err(wire::Error::BadIcrc));
    assert!(!icrc::verify(&l3));
}
