//! Property tests: emit→parse identity, single-bit corruption detection, and parsers that never
//! panic. Case counts are modest so the whole suite stays fast on a 2-core machine.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use wire::frame::{build_l3, parse_l3};
use wire::icrc;
use wire::roce::{pad_for, RocePacketRepr};
use wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDt, IpRepr, Msn,
    Opcode, Psn, Qkey, Qpn, RethRepr, Rkey, Syndrome, UdpRepr, XrcEthRepr,
};

/// An owned packet; `repr()` borrows it as a `RocePacketRepr`.
#[derive(Debug, Clone)]
struct Owned {
    bth: BthRepr,
    xrceth: Option<XrcEthRepr>,
    deth: Option<DethRepr>,
    reth: Option<RethRepr>,
    atomic_eth: Option<AtomicEthRepr>,
    aeth: Option<AethRepr>,
    atomic_ack: Option<AtomicAckEthRepr>,
    immdt: Option<ImmDt>,
    ieth: Option<IethRepr>,
    payload: Vec<u8>,
}

impl Owned {
    fn repr(&self) -> RocePacketRepr<'_> {
        RocePacketRepr {
            bth: self.bth,
            xrceth: self.xrceth,
            deth: self.deth,
            reth: self.reth,
            atomic_eth: self.atomic_eth,
            aeth: self.aeth,
            atomic_ack: self.atomic_ack,
            immdt: self.immdt,
            ieth: self.ieth,
            payload: &self.payload,
        }
    }
}

fn arb_bth(op: Opcode) -> impl Strategy<Value = BthRepr> {
    (
        (
            any::<bool>(),
            any::<bool>(),
            any::<u16>(),
            any::<bool>(),
            any::<bool>(),
            0u8..64,
        ),
        (any::<u32>(), any::<bool>(), 0u8..128, any::<u32>()),
    )
        .prop_map(
            move |((se, m, pkey, f, b, resv6), (qp, a, resv7, psn))| BthRepr {
                opcode: op,
                solicited: se,
                migreq: m,
                pad_count: 0,
                tver: 0,
                pkey,
                fecn: f,
                becn: b,
                resv6,
                dest_qp: Qpn::new(qp),
                ack_req: a,
                resv7,
                psn: Psn::new(psn),
            },
        )
}

fn arb_packet() -> impl Strategy<Value = Owned> {
    let ops: Vec<Opcode> = Opcode::all_known().collect();
    prop::sample::select(ops).prop_flat_map(|op| {
        let info = op.info().copied().expect("from the table");
        let h = info.headers;
        let max_payload = if info.has_payload { 4096 } else { 0 };
        (
            arb_bth(op),
            (any::<u32>(), any::<u32>()),
            (any::<u64>(), any::<u32>(), any::<u32>()),
            (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()),
            (any::<u8>(), any::<u32>(), any::<u64>()),
            (any::<u32>(), any::<u32>()),
            prop::collection::vec(any::<u8>(), 0..=max_payload),
        )
            .prop_map(
                move |(mut bth, deth, reth, aeth_, ack, (imm, ieth), payload)| {
                    bth.pad_count = pad_for(payload.len());
                    Owned {
                        bth,
                        // The reserved byte is not round-tripped: 24 bits.
                        xrceth: h.has_xrceth().then_some(XrcEthRepr {
                            srqn: deth.0 & wire::xrceth::MAX_SRQN,
                        }),
                        deth: h.has_deth().then_some(DethRepr {
                            qkey: Qkey(deth.0),
                            src_qp: Qpn::new(deth.1),
                        }),
                        reth: h.has_reth().then_some(RethRepr {
                            va: reth.0,
                            rkey: Rkey(reth.1),
                            len: reth.2,
                        }),
                        atomic_eth: h.has_atomic_eth().then_some(AtomicEthRepr {
                            va: aeth_.0,
                            rkey: Rkey(aeth_.1),
                            swap_add: aeth_.2,
                            compare: aeth_.3,
                        }),
                        aeth: h.has_aeth().then_some(AethRepr {
                            syndrome: Syndrome(ack.0),
                            msn: Msn::new(ack.1),
                        }),
                        atomic_ack: h
                            .has_atomic_ack_eth()
                            .then_some(AtomicAckEthRepr { orig: ack.2 }),
                        immdt: h.has_immdt().then_some(ImmDt(imm)),
                        ieth: h.has_ieth().then_some(IethRepr { rkey: Rkey(ieth) }),
                        payload,
                    }
                },
            )
    })
}

fn arb_ip() -> impl Strategy<Value = IpRepr> {
    let v4 = (
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        any::<u8>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(s, d, tos, ttl, ident, df)| IpRepr::V4 {
            src: Ipv4Addr::from(s),
            dst: Ipv4Addr::from(d),
            dscp_ecn: tos,
            ttl,
            ident,
            dont_frag: df,
        });
    let v6 = (
        any::<u128>(),
        any::<u128>(),
        any::<u8>(),
        0u32..(1 << 20),
        any::<u8>(),
    )
        .prop_map(|(s, d, tc, fl, hl)| IpRepr::V6 {
            src: Ipv6Addr::from(s),
            dst: Ipv6Addr::from(d),
            traffic_class: tc,
            flow_label: fl,
            hop_limit: hl,
        });
    prop_oneof![v4, v6]
}

fn arb_udp() -> impl Strategy<Value = UdpRepr> {
    (any::<u16>(), any::<u16>()).prop_map(|(s, c)| UdpRepr {
        src_port: s,
        dst_port: 4791,
        checksum: c,
    })
}

fn build(ip: &IpRepr, udp: &UdpRepr, p: &Owned) -> Vec<u8> {
    let pkt = p.repr();
    let mut buf = vec![0u8; wire::frame::l3_len(ip, &pkt)];
    let n = build_l3(ip, udp, &pkt, &mut buf).expect("build");
    assert_eq!(n, buf.len());
    buf
}

/// Whether bit `bit` of byte `at` of the L3 frame is masked out of the ICRC (docs/wire.md §3.2).
fn is_masked(ip: &IpRepr, at: usize, bit: u8) -> bool {
    match ip {
        IpRepr::V4 { .. } => [1, 8, 10, 11, 20 + 6, 20 + 7, 28 + 4].contains(&at),
        // IPv6 byte 0: the low nibble is the top of the traffic class; the version stays.
        IpRepr::V6 { .. } => {
            (at == 0 && bit < 4) || [1, 2, 3, 7, 40 + 6, 40 + 7, 48 + 4].contains(&at)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn transport_emit_parse_identity(p in arb_packet()) {
        let pkt = p.repr();
        let mut buf = vec![0u8; pkt.transport_len()];
        prop_assert_eq!(pkt.emit(&mut buf), Ok(buf.len()));
        prop_assert_eq!(buf.len() % 4, 0);
        prop_assert_eq!(RocePacketRepr::parse(&buf), Ok(pkt));
        // A byte short is an error, not a panic, and not a different packet.
        prop_assert!(pkt.emit(&mut buf[..pkt.transport_len() - 1]).is_err());
    }

    #[test]
    fn frame_build_parse_identity(p in arb_packet(), ip in arb_ip(), udp in arb_udp()) {
        let frame = build(&ip, &udp, &p);
        let f = parse_l3(&frame).expect("parse built frame");
        prop_assert!(f.icrc_ok && f.ip_checksum_ok);
        prop_assert_eq!(f.ip, ip);
        prop_assert_eq!(f.udp, udp);
        prop_assert_eq!(f.packet, p.repr());
        prop_assert!(icrc::verify(&frame));
        // What a UDP socket sender would compute agrees with the frame.
        let t0 = ip.header_len() + 8;
        let transport = &frame[t0..frame.len() - 4];
        prop_assert!(icrc::verify_udp(&ip, &udp, transport, f.icrc_wire));
        // Trailing bytes (Ethernet padding) are ignored.
        let mut padded = frame.clone();
        padded.extend_from_slice(&[0xEE; 7]);
        let g = parse_l3(&padded).expect("parse with trailing bytes");
        prop_assert!(g.icrc_ok);
        prop_assert_eq!(g.packet, p.repr());
    }

    /// docs/wire.md §3.2: a bit flip in any covered, unmasked byte changes the ICRC; one in a
    /// masked byte does not.
    #[test]
    fn single_bit_flip_is_detected(p in arb_packet(), ip in arb_ip(), udp in arb_udp(), pick in any::<prop::sample::Index>(), bit in 0u8..8) {
        let frame = build(&ip, &udp, &p);
        let icrc_at = frame.len() - 4;
        let at = pick.index(frame.len());
        let mut bad = frame.clone();
        bad[at] ^= 1 << bit;
        let is_masked = is_masked(&ip, at, bit);
        let wire_crc = icrc::read_icrc(&frame[icrc_at..]);
        if at < icrc_at {
            let recomputed = icrc::compute(&bad[..icrc_at]);
            if is_masked {
                prop_assert_eq!(recomputed, Ok(wire_crc));
            } else if let Ok(c) = recomputed {
                prop_assert_ne!(c, wire_crc);
            }
        }
        if let Ok(f) = parse_l3(&bad) {
            prop_assert_eq!(f.icrc_ok, is_masked, "byte {} bit {}", at, bit);
        }
        prop_assert_eq!(icrc::verify(&bad), is_masked);
    }

    /// The UDP-socket receive check recovers ID and DF of any IPv4 frame, and never takes a
    /// frame whose transport bytes were corrupted (single bit) for the sender's: the true ID
    /// and DF no longer match (CRC-32 detects every single-bit error). Some other ID/DF pair
    /// may match by chance — the documented false-accept rate of the unseen-ID check, 2^-15
    /// per corrupted frame (wire::icrc module docs) — so "rejected" cannot be asserted for
    /// every case: over 256 cases per run it failed about once in 130 runs.
    #[test]
    fn unseen_ident_recovery(p in arb_packet(), ident in any::<u16>(), df in any::<bool>(), udp in arb_udp(), pick in any::<prop::sample::Index>(), bit in 0u8..8) {
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let ip = IpRepr::V4 { src, dst, dscp_ecn: 2, ttl: 64, ident, dont_frag: df };
        let frame = build(&ip, &udp, &p);
        let icrc_at = frame.len() - 4;
        let crc = icrc::read_icrc(&frame[icrc_at..]);
        let transport = &frame[28..icrc_at];
        let got = icrc::verify_udp_v4_unseen_ident(src, dst, &udp, transport, crc);
        prop_assert_eq!(got, Some(icrc::UnseenIpv4 { ident, dont_frag: df }));
        let mut bad = transport.to_vec();
        let at = pick.index(bad.len());
        bad[at] ^= 1 << bit;
        let bth_masked = at == 4;
        let got = icrc::verify_udp_v4_unseen_ident(src, dst, &udp, &bad, crc);
        if bth_masked {
            prop_assert_eq!(got, Some(icrc::UnseenIpv4 { ident, dont_frag: df }));
        } else {
            prop_assert_ne!(
                got,
                Some(icrc::UnseenIpv4 { ident, dont_frag: df }),
                "byte {} bit {} accepted as the sender's frame", at, bit
            );
        }
    }

    #[test]
    fn parse_l3_never_panics_on_bytes(data in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_l3(&data);
        wire::fuzzing::parse_any(&data);
    }

    /// Mutated valid frames: every parser either rejects them or round-trips them
    /// (`fuzzing::parse_any` panics otherwise).
    #[test]
    fn mutated_frames_never_panic(
        p in arb_packet(), ip in arb_ip(), udp in arb_udp(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let mut frame = build(&ip, &udp, &p);
        for (i, v) in edits {
            let at = i.index(frame.len());
            frame[at] = v;
        }
        if truncate {
            frame.truncate(cut.index(frame.len() + 1));
        }
        let _ = parse_l3(&frame);
        wire::fuzzing::parse_any(&frame);
        // Also as a UDP datagram (strip the IP/UDP headers).
        let hl = ip.header_len() + 8;
        if frame.len() > hl {
            wire::fuzzing::parse_any(&frame[hl..]);
        }
    }
}

/// Deterministic, exhaustive version of the bit-flip property for one small frame of each IP
/// version: every bit of every covered byte.
#[test]
fn every_single_bit_flip_in_small_frames() {
    for ip in [
        IpRepr::V4 {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            dscp_ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        },
        IpRepr::V6 {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
        },
    ] {
        let p = Owned {
            xrceth: None,
            bth: BthRepr::new(
                Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
                Qpn::new(0x12),
                Psn::new(7),
            ),
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            immdt: Some(ImmDt(0xDEADBEEF)),
            ieth: None,
            payload: b"0123456789".to_vec(),
        };
        let udp = UdpRepr::roce(0xC132);
        let frame = build(&ip, &udp, &p);
        let mut accepted = 0;
        let icrc_at = frame.len() - 4;
        for at in 0..frame.len() {
            for bit in 0..8 {
                let mut bad = frame.clone();
                bad[at] ^= 1 << bit;
                let ok = icrc::verify(&bad);
                assert_eq!(ok, is_masked(&ip, at, bit), "byte {at} bit {bit}");
                if at < icrc_at && !is_masked(&ip, at, bit) {
                    // Also the unseen-ID check for v4 (transport bytes only).
                    if let (IpRepr::V4 { src, dst, .. }, true) = (ip, at >= 28) {
                        let crc = icrc::read_icrc(&frame[icrc_at..]);
                        if icrc::verify_udp_v4_unseen_ident(src, dst, &udp, &bad[28..icrc_at], crc)
                            .is_some()
                        {
                            accepted += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(accepted, 0);
    }
}

/// The stable counterpart of the fuzz target: random byte strings, plus random bytes behind a
/// plausible IPv4/UDP/BTH prefix so that the deeper parsers are reached.
#[test]
fn fuzz_entry_on_random_inputs() {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let udp = UdpRepr::roce(0xC000);
    let ip = IpRepr::v4_socket(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8), 0, 64);
    let mut parsed = 0;
    for round in 0..3000 {
        let len = (next() % 160) as usize;
        let mut data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if round % 2 == 1 {
            // Random transport behind real headers.
            let known: Vec<Opcode> = Opcode::all_known().collect();
            let op = known[(next() % known.len() as u64) as usize];
            let hl = op.info().map(|i| i.header_len).unwrap_or(12);
            let mut t: Vec<u8> = (0..hl + (next() % 3) as usize * 4)
                .map(|_| next() as u8)
                .collect();
            t[0] = op.0;
            t[1] &= 0xC0; // TVer 0, pad 0
            let mut frame = vec![0u8; 28];
            ip.emit(&mut frame, 8 + t.len() + 4).expect("ip");
            udp.emit(&mut frame[20..], t.len() + 4).expect("udp");
            frame.extend_from_slice(&t);
            let crc = icrc::compute(&frame).expect("icrc");
            frame.extend_from_slice(&icrc::icrc_wire_bytes(crc));
            if let Ok(f) = parse_l3(&frame) {
                assert!(f.icrc_ok);
                parsed += 1;
            }
            data = frame;
        }
        wire::fuzzing::parse_any(&data);
    }
    assert!(
        parsed > 500,
        "only {parsed} frames reached the deep parsers"
    );
}
