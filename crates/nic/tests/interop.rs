//! Regression vectors from the rxe lab (tests/interop/run.sh): RoCEv2 over IPv6 link-local
//! GIDs between uroce (bound to fe80::1 on the lab bridge) and Linux rxe (GID index 0,
//! fe80::5054:ff:fe77:b), captured on the bridge into testdata/interop/:
//!
//! * `rc_pingpong_ipv6.pcap`: stock `ibv_rc_pingpong -g 0 -s 2500 -n 5 -c` on uroce's
//!   drop-in library (server) against `ibv_rc_pingpong -d rxe0 -g 0` (client);
//! * `ud_pingpong_ipv6.pcap`: `ibv_ud_pingpong -g 0 -s 100 -n 5 -c`, rxe the server.
//!
//! * `rc_pingpong_m512_spurious_retx.pcap` (IPv4, 20 frames of a `-m 512 -s 2500` run):
//!   uroce resending a SEND's first packet 13 µs after the original: a 67 ms deadline
//!   armed from a clock read taken before a stalled engine pass fires at once, so
//!   `engine::pass` reads the clock after taking the device lock and again for each QP it
//!   serves (`tests/engine_clock.rs` reproduces the stall deterministically;
//!   `tests/interop/analyze.py --selftest` must flag this capture).
//!
//! The IPv6 captures need two things of `sys::bind_roce_udp`: a link-local address binds
//! only with its interface's scope id, and rxe sends UDP checksum 0 over IPv6, which the
//! kernel drops (`Udp6InCsumErrors`) unless the socket opts in with UDP_NO_CHECK6_RX.

mod common;

use std::net::{IpAddr, Ipv6Addr, UdpSocket};
use std::os::fd::AsRawFd;

use abi::uverbs::ModifyQp;
use abi::{AccessFlags, QpType};
use common::*;
use transport::wire::icrc;
use transport::wire::ip::{IpRepr, UdpRepr};

const UROCE: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);
const RXE: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0x5054, 0xff, 0xfe77, 0xb);

/// One captured IPv6 RoCEv2 packet.
struct V6Packet {
    src: Ipv6Addr,
    dst: Ipv6Addr,
    flow_label: u32,
    hop_limit: u8,
    udp_src: u16,
    udp_checksum: u16,
    /// BTH .. pad, without the ICRC.
    transport: Vec<u8>,
    icrc: u32,
}

fn testdata(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../testdata/interop/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The IPv6 RoCEv2 packets of a classic little-endian Ethernet pcap.
fn v6_packets(pcap: &[u8]) -> Vec<V6Packet> {
    assert_eq!(
        pcap.get(..4),
        Some(&[0xd4, 0xc3, 0xb2, 0xa1][..]),
        "pcap magic"
    );
    let mut out = Vec::new();
    let mut off = 24;
    while let Some(hdr) = pcap.get(off..off + 16) {
        let incl = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
        let frame = &pcap[off + 16..off + 16 + incl];
        off += 16 + incl;
        if frame[12..14] != [0x86, 0xdd] || frame[14 + 6] != 17 {
            continue;
        }
        let ip = &frame[14..54];
        let udp = &frame[54..62];
        let be16 = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        assert_eq!(be16(&udp[2..4]), 4791);
        let payload = &frame[62..14 + 40 + usize::from(be16(&ip[4..6]))];
        let (transport, icrc) = payload.split_at(payload.len() - 4);
        out.push(V6Packet {
            src: Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap()),
            dst: Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap()),
            flow_label: u32::from_be_bytes(ip[0..4].try_into().unwrap()) & 0xf_ffff,
            hop_limit: ip[7],
            udp_src: be16(&udp[0..2]),
            udp_checksum: be16(&udp[6..8]),
            transport: transport.to_vec(),
            icrc: u32::from_le_bytes(icrc.try_into().unwrap()),
        });
    }
    out
}

/// What the engine assumes of an IPv6 header it cannot see (`handle_datagram`): the ICRC
/// masks traffic class, flow label and hop limit, so these values must not matter.
fn v6_repr(src: Ipv6Addr, dst: Ipv6Addr, flow_label: u32, hop_limit: u8) -> IpRepr {
    IpRepr::V6 {
        src,
        dst,
        traffic_class: 0,
        flow_label,
        hop_limit,
    }
}

#[test]
fn captured_ipv6_exchanges_have_the_properties_the_nic_relies_on() {
    for name in ["rc_pingpong_ipv6.pcap", "ud_pingpong_ipv6.pcap"] {
        let pkts = v6_packets(&testdata(name));
        let (mut from_rxe, mut from_uroce, mut labelled) = (0, 0, 0);
        for p in &pkts {
            let udp = UdpRepr {
                src_port: p.udp_src,
                dst_port: 4791,
                checksum: 0,
            };
            if p.src == RXE {
                from_rxe += 1;
                assert_eq!(p.dst, UROCE);
                // rxe leaves the UDP checksum 0 over IPv6: the reason for UDP_NO_CHECK6_RX.
                assert_eq!(p.udp_checksum, 0, "{name}: rxe packet with a UDP checksum");
                // The receive path's check (unseen TC/flow label/hop limit taken as 0/0/64).
                let ip = v6_repr(p.src, p.dst, 0, 64);
                assert!(
                    icrc::verify_udp(&ip, &udp, &p.transport, p.icrc),
                    "{name}: rxe ICRC rejected"
                );
            } else {
                from_uroce += 1;
                assert_eq!((p.src, p.dst), (UROCE, RXE));
                assert_eq!(p.udp_src, 4791, "uroce sends from its bound port");
                // The kernel computes a real UDP checksum for uroce's datagrams.
                assert_ne!(p.udp_checksum, 0);
                // The ICRC the engine put in before the kernel chose the flow label and hop
                // limit (the tools' address vector: hop limit 1, flow label 0).
                labelled += usize::from(p.flow_label != 0);
                let predicted =
                    icrc::compute_for(&v6_repr(p.src, p.dst, 0, 1), &udp, &p.transport).unwrap();
                assert_eq!(predicted, p.icrc, "{name}: uroce ICRC");
                assert_ne!(p.hop_limit, 1, "the kernel, not the AV, set the hop limit");
            }
        }
        assert!(
            from_rxe >= 5 && from_uroce >= 5,
            "{name}: {from_rxe} / {from_uroce}"
        );
        // Linux labels uroce's flows (auto_flowlabels): the masked field really differed.
        assert!(labelled > 0, "{name}: no flow label on uroce's packets");
    }
}

/// Replays rxe's captured UD datagram (zero UDP checksum over IPv6) into a live device
/// bound to ::1: it must arrive in the receive buffer, with the captured payload.
#[test]
fn zero_checksum_ud_datagram_from_rxe_is_delivered() {
    let pkts = v6_packets(&testdata("ud_pingpong_ipv6.pcap"));
    let captured = pkts
        .iter()
        .find(|p| p.src == RXE && p.transport.first() == Some(&0x64))
        .expect("an rxe UD SEND in the capture");
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; nothing to check");
        return;
    }
    let dev = device("interop_v6", "::1");
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, AccessFlags::LOCAL_WRITE.0).unwrap();
    let mut cq = c.create_cq(16, -1, 1).unwrap();
    let mut q = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Ud, 8, None)
        .unwrap();
    // The Q_Key ibv_ud_pingpong (and perftest) use; it is in the captured DETH.
    let qkey = u32::from_be_bytes(captured.transport[12..16].try_into().unwrap());
    assert_eq!(qkey, 0x1111_1111);
    for (state, mask) in init_rtr_rts(QpType::Ud) {
        let m = ModifyQp {
            qp_handle: q.handle,
            attr_mask: mask,
            qp_state: state as u8,
            port_num: 1,
            qkey,
            sq_psn: 1,
            ..ModifyQp::default()
        };
        c.modify(&m).unwrap();
    }
    let len = captured.transport.len() - 12 - 8; // BTH, DETH; the payload has no pad here
    assert_eq!(captured.transport[1] & 0x30, 0);
    c.post_recv(
        q.rq.as_mut().unwrap(),
        7,
        &[sge(buf.as_ptr() as u64, 40 + len as u32, m.lkey)],
    );

    // The captured packet, addressed to our QP, with its ICRC recomputed for ::1 → ::1.
    let tx = UdpSocket::bind("[::1]:0").unwrap();
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live c_int.
    let r = unsafe {
        libc::setsockopt(
            tx.as_raw_fd(),
            libc::SOL_UDP,
            libc::UDP_NO_CHECK6_TX,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "UDP_NO_CHECK6_TX");
    let mut transport = captured.transport.clone();
    transport[5..8].copy_from_slice(&q.qpn.to_be_bytes()[1..]);
    let udp = UdpRepr {
        src_port: tx.local_addr().unwrap().port(),
        dst_port: 4791,
        checksum: 0,
    };
    let crc = icrc::compute_for(
        &v6_repr(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 0, 64),
        &udp,
        &transport,
    )
    .unwrap();
    let mut datagram = transport.clone();
    datagram.extend_from_slice(&icrc::icrc_wire_bytes(crc));
    tx.send_to(&datagram, (IpAddr::V6(Ipv6Addr::LOCALHOST), 4791))
        .unwrap();

    let wc = poll(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (7, 0));
    assert_eq!(wc.byte_len as usize, 40 + len);
    assert_eq!(&buf[40..40 + len], &captured.transport[20..]);
    // The GRH is the IPv6 header: version 6, source ::1.
    assert_eq!(buf[0] >> 4, 6);
    assert_eq!(&buf[8..24], &Ipv6Addr::LOCALHOST.octets());
    assert_eq!(dev.port_counters().engine.rcvd_icrc_err, 0);
    let _ = &mut q;
    c.close();
}

/// (timestamp µs, source, BTH..pad, ICRC) of the IPv4 RoCEv2 frames of a pcap.
fn v4_packets(pcap: &[u8]) -> Vec<(u64, [u8; 4], Vec<u8>, u32)> {
    let mut out = Vec::new();
    let mut off = 24;
    while let Some(hdr) = pcap.get(off..off + 16) {
        let sec = u64::from(u32::from_le_bytes(hdr[0..4].try_into().unwrap()));
        let usec = u64::from(u32::from_le_bytes(hdr[4..8].try_into().unwrap()));
        let incl = u32::from_le_bytes(hdr[8..12].try_into().unwrap()) as usize;
        let frame = &pcap[off + 16..off + 16 + incl];
        off += 16 + incl;
        if frame[12..14] != [0x08, 0x00] {
            continue;
        }
        let total = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
        let payload = &frame[14 + 28..14 + total];
        let (transport, icrc) = payload.split_at(payload.len() - 4);
        out.push((
            sec * 1_000_000 + usec,
            frame[26..30].try_into().unwrap(),
            transport.to_vec(),
            u32::from_le_bytes(icrc.try_into().unwrap()),
        ));
    }
    out
}

#[test]
fn captured_spurious_retransmission_is_what_the_engine_clock_test_reproduces() {
    let pkts = v4_packets(&testdata("rc_pingpong_m512_spurious_retx.pcap"));
    assert_eq!(pkts.len(), 20);
    // Every uroce packet's ICRC is what the engine computes (IPv4 ID 0, DF; TTL/TOS masked).
    let udp = UdpRepr::roce(4791);
    for (_, src, transport, crc) in pkts.iter().filter(|p| p.1 == [10, 77, 0, 1]) {
        let ip = IpRepr::V4 {
            src: (*src).into(),
            dst: [10, 77, 0, 11].into(),
            dscp_ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        };
        assert_eq!(icrc::compute_for(&ip, &udp, transport).unwrap(), *crc);
    }
    // The same request PSN from uroce twice, the copy within a millisecond of the original
    // although the QP timeout is 14 (67 ms): not a timeout of that packet.
    let mut first_seen = std::collections::HashMap::new();
    let mut dups = Vec::new();
    for (t, src, transport, _) in &pkts {
        let opcode = transport[0];
        if *src != [10, 77, 0, 1] || opcode > 0x05 {
            continue; // only uroce's SEND packets
        }
        let psn = u32::from_be_bytes([0, transport[9], transport[10], transport[11]]);
        if let Some(t0) = first_seen.insert(psn, *t) {
            dups.push((psn, *t - t0));
        }
    }
    assert_eq!(dups.len(), 1, "{dups:?}");
    assert!(dups[0].1 < 1_000, "{dups:?}");
}
