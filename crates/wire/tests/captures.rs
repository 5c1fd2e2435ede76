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
