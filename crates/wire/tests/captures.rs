//! Smoke test over real Linux soft-RoCE (rxe) captures from the rxe lab (copied into
//! the repository's `testdata/captures/`; see its README for how they were recorded).
//!
//! Every frame must parse, carry a good ICRC (except frame 4 of `fake_peer.pcap`, corrupted on
//! purpose), rebuild byte for byte, and give up its IPv4 ID to the UDP-socket ICRC check.
//! The pcap reader here is test-only and minimal (classic little-endian pcap, Ethernet II); the
//! real one lives in the `capture` crate.

use std::collections::BTreeSet;
use std::path::PathBuf;

use wire::frame::{build_l3, parse_l3};
use wire::{icrc, IpRepr, Opcode};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/captures")
}

/// Frames of a classic pcap file (magic 0xA1B2C3D4 written little-endian, link type Ethernet).
fn read_pcap(name: &str) -> Vec<Vec<u8>> {
    let bytes = std::fs::read(data_dir().join(name)).expect("read pcap");
    assert!(bytes.len() >= 24, "{name}: short");
    let u32_at =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    assert_eq!(u32_at(0), 0xA1B2_C3D4, "{name}: magic");
    assert_eq!(u32_at(20), 1, "{name}: link type must be Ethernet");
    let mut at = 24;
    let mut frames = Vec::new();
    while at < bytes.len() {
        assert!(at + 16 <= bytes.len(), "{name}: truncated record header");
        let incl = u32_at(at + 8) as usize;
        let orig = u32_at(at + 12) as usize;
        assert_eq!(incl, orig, "{name}: snapped frame");
        at += 16;
        assert!(at + incl <= bytes.len(), "{name}: truncated record");
        frames.push(bytes[at..at + incl].to_vec());
        at += incl;
    }
    frames
}

/// Strips Ethernet II (and any 802.1Q tags); returns the L3 bytes.
fn l3(frame: &[u8]) -> &[u8] {
    let mut at = 12;
    loop {
        let ty = u16::from_be_bytes([frame[at], frame[at + 1]]);
        at += 2;
        match ty {
            0x8100 | 0x88A8 => at += 2,
            0x0800 | 0x86DD => return &frame[at..],
            other => panic!("unexpected ethertype {other:#06x}"),
        }
    }
}

/// Parses every frame of `name`; returns the set of opcode names seen and the number of frames.
fn check_file(name: &str, bad_icrc_frames: &[usize]) -> (BTreeSet<String>, usize) {
    let frames = read_pcap(name);
    assert!(!frames.is_empty(), "{name}: no frames");
    let mut ops = BTreeSet::new();
    for (i, frame) in frames.iter().enumerate() {
        let number = i + 1; // Wireshark numbering
        let l3 = l3(frame);
        let f = parse_l3(l3).unwrap_or_else(|e| panic!("{name} frame {number}: {e}"));
        ops.insert(f.packet.bth.opcode.to_string());
        let expect_ok = !bad_icrc_frames.contains(&number);
        assert_eq!(f.icrc_ok, expect_ok, "{name} frame {number}: icrc");
        assert_eq!(icrc::verify(l3), expect_ok);
        assert!(f.ip_checksum_ok, "{name} frame {number}: ip checksum");
        assert_eq!(f.packet.bth.tver, 0);
        // Rebuild byte for byte (ICRC included when it was good).
        let len = f.l3_len();
        let mut out = vec![0u8; len];
        assert_eq!(build_l3(&f.ip, &f.udp, &f.packet, &mut out), Ok(len));
        if expect_ok {
            assert_eq!(&out[..], &l3[..len], "{name} frame {number}: rebuild");
        } else {
            assert_eq!(&out[..len - 4], &l3[..len - 4]);
            assert_ne!(&out[len - 4..], &l3[len - 4..len]);
        }
        // What a UDP socket sees: the unseen-ID check must recover the real ID and DF.
        if let (
            IpRepr::V4 {
                src,
                dst,
                ident,
                dont_frag,
                ..
            },
            true,
        ) = (f.ip, expect_ok)
        {
            let transport = &l3[28..len - 4];
            let got = icrc::verify_udp_v4_unseen_ident(src, dst, &f.udp, transport, f.icrc_wire);
            assert_eq!(
                got,
                Some(icrc::UnseenIpv4 { ident, dont_frag }),
                "{name} frame {number}"
            );
        }
    }
    (ops, frames.len())
}

fn names(list: &[Opcode]) -> BTreeSet<String> {
    list.iter().map(|o| o.to_string()).collect()
}

#[test]
fn rc_pingpong() {
    let (ops, n) = check_file("rc_pingpong.pcap", &[]);
    assert_eq!(n, 30);
    assert!(
        ops.is_superset(&names(&[
            Opcode::RC_SEND_FIRST,
            Opcode::RC_SEND_LAST,
            Opcode::RC_ACKNOWLEDGE
        ])),
        "{ops:?}"
    );
}

#[test]
fn write_bw() {
    let (ops, n) = check_file("write_bw.pcap", &[]);
    assert_eq!(n, 40);
    let want = names(&[
        Opcode::RC_RDMA_WRITE_FIRST,
        Opcode::RC_RDMA_WRITE_MIDDLE,
        Opcode::RC_RDMA_WRITE_LAST,
        Opcode::RC_ACKNOWLEDGE,
    ]);
    assert!(ops.is_superset(&want), "{ops:?}");
}

#[test]
fn read_bw() {
    let (ops, n) = check_file("read_bw.pcap", &[]);
    assert_eq!(n, 40);
    let want = names(&[
        Opcode::RC_RDMA_READ_REQUEST,
        Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        Opcode::RC_RDMA_READ_RESPONSE_LAST,
    ]);
    assert!(ops.is_superset(&want), "{ops:?}");
}

#[test]
fn atomic_bw() {
    let (ops, n) = check_file("atomic_bw.pcap", &[]);
    assert_eq!(n, 20);
    assert!(
        ops.is_superset(&names(&[
            Opcode::RC_FETCH_ADD,
            Opcode::RC_ATOMIC_ACKNOWLEDGE
        ])),
        "{ops:?}"
    );
}

#[test]
fn ud_pingpong() {
    let (ops, n) = check_file("ud_pingpong.pcap", &[]);
    assert_eq!(n, 10);
    assert_eq!(ops, names(&[Opcode::UD_SEND_ONLY]));
}

#[test]
fn rping_cm() {
    let (ops, n) = check_file("rping_cm.pcap", &[]);
    assert_eq!(n, 41);
    assert!(ops.contains("UD_SEND_ONLY"), "{ops:?}");
    assert!(ops.contains("RC_RDMA_READ_REQUEST"), "{ops:?}");
}

#[test]
fn fake_peer_frame_4_has_bad_icrc() {
    let (_, n) = check_file("fake_peer.pcap", &[4]);
    assert_eq!(n, 6);
}

/// The CM exchange of `rping_cm.pcap` (rping between two rxe hosts): REQ, REP, RTU, then DREQ
/// and DREP at the end. Every MAD parses to the values the kernel put there and re-emits to the
/// same 256 bytes.
#[test]
fn rping_cm_mads_parse_and_rebuild() {
    use std::net::{IpAddr, Ipv4Addr};
    use wire::cm::{CmMadRepr, CmMsg, CmaHdr, PortSpace, ServiceId};
    use wire::{Psn, Qkey, Qpn};

    let frames = read_pcap("rping_cm.pcap");
    let mut mads = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let f = parse_l3(l3(frame)).expect("frame parses");
        if f.packet.bth.dest_qp != Qpn::GSI {
            continue;
        }
        let deth = f.packet.deth.expect("GSI traffic is UD");
        assert_eq!(deth.qkey, Qkey::GSI);
        assert_eq!(deth.src_qp, Qpn::GSI);
        assert_eq!(f.packet.payload.len(), 256, "frame {}", i + 1);
        let m = CmMadRepr::parse(f.packet.payload).expect("CM MAD");
        let mut out = [0u8; 256];
        m.emit(&mut out).expect("emit");
        assert_eq!(&out[..], f.packet.payload, "frame {}: rebuild", i + 1);
        mads.push((i + 1, m));
    }
    let names: Vec<(usize, &str)> = mads.iter().map(|(n, m)| (*n, m.msg.name())).collect();
    assert_eq!(
        names,
        [
            (1, "REQ"),
            (2, "REP"),
            (3, "RTU"),
            (40, "DREQ"),
            (41, "DREP")
        ]
    );
    let tid = 0x0000_0002_D3CA_C430;
    assert!(mads[..4].iter().all(|(_, m)| m.tid == tid));

    let CmMsg::Req(req) = &mads[0].1.msg else {
        panic!("frame 1 is not a REQ")
    };
    assert_eq!(req.local_comm_id, 0x30C4_CAD3);
    assert_eq!(
        wire::cm::linux_style_tid(2, req.local_comm_id),
        mads[0].1.tid
    );
    assert_eq!(req.service_id, ServiceId::rdma_ip(PortSpace::TCP, 7174));
    assert_eq!(req.local_ca_guid, 0x5054_00FF_FE77_000C);
    assert_eq!(req.local_qpn, Qpn::new(0x30));
    assert_eq!((req.responder_resources, req.initiator_depth), (1, 1));
    assert_eq!(
        (
            req.remote_cm_response_timeout,
            req.local_cm_response_timeout
        ),
        (20, 20)
    );
    assert_eq!(req.transport_type, 0);
    assert_eq!(req.starting_psn, Psn::new(0xCE65AA));
    assert_eq!((req.retry_count, req.rnr_retry_count), (7, 7));
    assert_eq!(req.pkey, 0xFFFF);
    assert_eq!(req.path_mtu, 3);
    assert_eq!(req.max_cm_retries, 15);
    assert_eq!(
        (req.primary.local_lid, req.primary.remote_lid),
        (0xFFFF, 0xFFFF)
    );
    assert_eq!(&req.primary.local_gid[10..], &[0xFF, 0xFF, 10, 77, 0, 12]);
    assert_eq!(&req.primary.remote_gid[10..], &[0xFF, 0xFF, 10, 77, 0, 11]);
    // (sport 42276 * 31 + dport 7174) & 0xFFFFF, rdma_cm's RoCEv2 flow label.
    assert_eq!(req.primary.flow_label, 0x41B62);
    assert_eq!(req.primary.hop_limit, 64);
    assert_eq!(req.primary.local_ack_timeout, 19);
    let hdr = CmaHdr::parse(&req.private_data).expect("cma_hdr");
    assert_eq!(hdr.src_port, 42276);
    assert_eq!(hdr.src, IpAddr::V4(Ipv4Addr::new(10, 77, 0, 12)));
    assert_eq!(hdr.dst, IpAddr::V4(Ipv4Addr::new(10, 77, 0, 11)));

    let CmMsg::Rep(rep) = &mads[1].1.msg else {
        panic!("frame 2 is not a REP")
    };
    assert_eq!(
        (rep.local_comm_id, rep.remote_comm_id),
        (0xCDAE_FD4E, 0x30C4_CAD3)
    );
    assert_eq!(rep.local_qpn, Qpn::new(0x56));
    assert_eq!(rep.starting_psn, Psn::new(0x77E52C));
    assert_eq!(rep.target_ack_delay, 15);
    assert_eq!(rep.rnr_retry_count, 7);
    assert_eq!(rep.local_ca_guid, 0x5054_00FF_FE77_000B);

    let CmMsg::Dreq(dreq) = &mads[3].1.msg else {
        panic!("frame 40 is not a DREQ")
    };
    assert_eq!(dreq.remote_qpn, Qpn::new(0x56));
    let CmMsg::Drep(drep) = &mads[4].1.msg else {
        panic!("frame 41 is not a DREP")
    };
    assert_eq!(mads[4].1.tid, mads[3].1.tid);
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (0xCDAE_FD4E, 0x30C4_CAD3)
    );
}

/// The stable counterpart of the `cm_mad` fuzz target: random MADs behind a valid CM header
/// with every attribute ID (and some others), plus a few mutations of the real REQ.
#[test]
fn cm_mad_fuzz_entry_on_random_inputs() {
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut parsed = 0;
    for round in 0..4000u32 {
        let len = 240 + (next() % 40) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 4 != 0 && data.len() >= 24 {
            data[..4].copy_from_slice(&[1, 7, 2, 3]);
            let attr = 0x10 + (next() % 11) as u16;
            data[16..18].copy_from_slice(&attr.to_be_bytes());
            if round % 8 == 1 {
                // Plausible cma_hdr in the REQ / SIDR_REQ private data.
                let at = if attr == 0x10 { 24 + 140 } else { 24 + 16 };
                if data.len() > at + 2 {
                    data[at] = 0;
                    data[at + 1] = if next() % 2 == 0 { 0x40 } else { 0x60 };
                }
            }
        }
        if wire::cm::CmMadRepr::parse(&data).is_ok() {
            parsed += 1;
        }
        wire::fuzzing::cm_mad(&data);
    }
    assert!(
        parsed > 1000,
        "only {parsed} inputs reached the message parsers"
    );
}
