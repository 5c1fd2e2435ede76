//! Damaged, re-encapsulated and hostile inputs: the decoder reports, never panics.

use std::path::PathBuf;
use std::time::Duration;

use capture::decode::{decode_all, Outcome};
use capture::frame::{FrameKind, Garbled};
use capture::pcap::{LinkType, PcapError, PcapReader, PcapWriter, TsResolution, MAX_RECORD_LEN};
use capture::{fuzzing, DecodeRecord, Frames, IcrcStatus, NotRoce};
use proptest::prelude::*;

fn read(rel: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

const ROCE: [&str; 7] = [
    "captures/rc_pingpong.pcap",
    "captures/write_bw.pcap",
    "captures/read_bw.pcap",
    "captures/atomic_bw.pcap",
    "captures/ud_pingpong.pcap",
    "captures/rping_cm.pcap",
    "captures/fake_peer.pcap",
];

fn packets(bytes: &[u8]) -> Vec<DecodeRecord> {
    let (decoded, _, stop) = decode_all(bytes).expect("header");
    assert!(stop.is_none(), "{stop:?}");
    decoded
        .into_iter()
        .filter_map(|d| match d.outcome {
            Outcome::Packet(r) => Some(r),
            _ => None,
        })
        .collect()
}

/// The Ethernet frames of a capture with their timestamps.
fn frames(bytes: &[u8]) -> Vec<(Duration, Vec<u8>)> {
    Frames::new(bytes)
        .expect("header")
        .map(|f| {
            let f = f.expect("record");
            (f.timestamp, f.data)
        })
        .collect()
}

#[test]
fn truncated_copies_decode_up_to_the_cut_and_say_where() {
    let whole = read("captures/write_bw.pcap");
    let all = packets(&whole);
    // Record boundaries: 24-byte file header, then 16-byte header + captured bytes each.
    let mut ends = vec![24usize];
    for (_, data) in frames(&whole) {
        let last = *ends.last().expect("nonempty");
        ends.push(last + 16 + data.len());
    }
    assert_eq!(*ends.last().expect("end"), whole.len());
    for cut in [
        0,
        10,
        23,
        24,
        30,
        40,
        500,
        1138,
        1139,
        5000,
        whole.len() - 1,
    ] {
        let bytes = &whole[..cut];
        match decode_all(bytes) {
            Err(e) => {
                assert!(cut < 24, "cut {cut}: {e}");
                assert!(matches!(e, PcapError::TruncatedFileHeader { have } if have == cut));
            }
            Ok((decoded, summary, stop)) => {
                let complete = ends.iter().filter(|&&e| e <= cut).count() - 1;
                assert_eq!(decoded.len(), complete, "cut {cut}");
                assert_eq!(summary.packets as usize, complete);
                for (d, want) in decoded.iter().zip(&all) {
                    assert_eq!(d.outcome, Outcome::Packet(want.clone()));
                }
                let at_boundary = ends.contains(&cut);
                match stop {
                    None => assert!(at_boundary, "cut {cut} mid-record must be reported"),
                    Some(PcapError::TruncatedRecordHeader { record, .. })
                    | Some(PcapError::TruncatedRecordData { record, .. }) => {
                        assert!(!at_boundary);
                        assert_eq!(record as usize, complete + 1, "cut {cut}");
                    }
                    Some(other) => panic!("cut {cut}: unexpected {other}"),
                }
            }
        }
    }
}

#[test]
fn garbage_files_are_refused_with_a_reason() {
    let cases: [(&[u8], &str); 5] = [
        (b"", "only 0 bytes"),
        (
            b"hello, this is not a capture file at all",
            "unknown magic number 0x68656c6c",
        ),
        (
            &[
                0x0a, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0x1c, 0x1a, 0x2b, 0x3c, 0x4d, 0, 1, 0, 0, 0xff,
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
            "pcapng",
        ),
        (
            &[
                0xd4, 0xc3, 0xb2, 0xa1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0,
            ],
            "version 1.0",
        ),
        (&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0], "only 6 bytes"),
    ];
    for (bytes, want) in cases {
        let err = decode_all(bytes).expect_err("refused");
        assert!(
            err.to_string().contains(want),
            "{err} should mention {want:?}"
        );
    }
}

#[test]
fn absurd_record_length_stops_without_allocating() {
    let mut bytes = read("captures/fake_peer.pcap");
    let first_len = u32::from_le_bytes(bytes[32..36].try_into().expect("4"));
    bytes[32..36].copy_from_slice(&(MAX_RECORD_LEN + 1).to_le_bytes());
    let (decoded, _, stop) = decode_all(&bytes).expect("header ok");
    assert!(decoded.is_empty());
    assert!(
        matches!(stop, Some(PcapError::RecordTooLong { record: 1, .. })),
        "{stop:?}"
    );
    bytes[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode_all(&bytes).expect("hdr").2,
        Some(PcapError::RecordTooLong { .. })
    ));
    assert!(first_len < MAX_RECORD_LEN);
}

/// Writes `frames` (already link-layer framed) to a pcap of `link`.
fn write(link: LinkType, res: TsResolution, frames: &[(Duration, Vec<u8>)]) -> Vec<u8> {
    let mut w = PcapWriter::new(Vec::new(), link, res).expect("header");
    for (ts, f) in frames {
        w.write_frame(*ts, f).expect("frame");
    }
    w.into_inner().expect("flush")
}

#[test]
fn writer_round_trips_every_real_capture_exactly() {
    for rel in ROCE {
        let original = read(rel);
        let fr = frames(&original);
        // The lab files are microsecond little-endian, like what we write with Micro.
        let rewritten = write(LinkType::ETHERNET, TsResolution::Micro, &fr);
        let hdr = PcapReader::new(&original[..])
            .expect("hdr")
            .header()
            .snaplen;
        assert_eq!(
            hdr, MAX_RECORD_LEN,
            "{rel}: tcpdump -s 0 writes snaplen 262144, as we do"
        );
        assert_eq!(rewritten, original, "{rel}: byte-identical file");
        // Nanosecond files carry the same frames and times.
        let nano = write(LinkType::ETHERNET, TsResolution::Nano, &fr);
        assert_eq!(frames(&nano), fr, "{rel}");
        assert_eq!(packets(&nano), packets(&original), "{rel}");
    }
}

fn big_endian_copy(le: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let swap4 = |b: &[u8]| [b[3], b[2], b[1], b[0]];
    out.extend_from_slice(&swap4(&le[0..4]));
    out.extend_from_slice(&[le[5], le[4], le[7], le[6]]);
    for at in [8, 12, 16, 20] {
        out.extend_from_slice(&swap4(&le[at..at + 4]));
    }
    let mut pos = 24;
    while pos < le.len() {
        for at in [0, 4, 8, 12] {
            out.extend_from_slice(&swap4(&le[pos + at..pos + at + 4]));
        }
        let len = u32::from_le_bytes(le[pos + 8..pos + 12].try_into().expect("4")) as usize;
        out.extend_from_slice(&le[pos + 16..pos + 16 + len]);
        pos += 16 + len;
    }
    out
}

#[test]
fn big_endian_files_decode_the_same() {
    for rel in ROCE {
        let le = read(rel);
        let be = big_endian_copy(&le);
        assert_eq!(&be[..4], &[0xa1, 0xb2, 0xc3, 0xd4]);
        assert_eq!(frames(&be), frames(&le), "{rel}");
        assert_eq!(packets(&be), packets(&le), "{rel}");
    }
}

#[test]
fn other_link_layers_and_vlan_tags_decode_the_same() {
    let original = read("captures/write_bw.pcap");
    let want = packets(&original);
    let fr = frames(&original);
    let l3: Vec<(Duration, Vec<u8>)> = fr.iter().map(|(t, f)| (*t, f[14..].to_vec())).collect();
    let with_header = |prefix: &dyn Fn(&[u8]) -> Vec<u8>| -> Vec<(Duration, Vec<u8>)> {
        l3.iter()
            .map(|(t, ip)| {
                let mut f = prefix(ip);
                f.extend_from_slice(ip);
                (*t, f)
            })
            .collect()
    };
    let eth_qinq = with_header(&|_| {
        let mut h = fr[0].1[..12].to_vec();
        h.extend_from_slice(&[0x88, 0xa8, 0x00, 0x64, 0x81, 0x00, 0x20, 0x05, 0x08, 0x00]);
        h
    });
    let eth_dot1q_fcs: Vec<(Duration, Vec<u8>)> = with_header(&|_| {
        let mut h = fr[0].1[..12].to_vec();
        h.extend_from_slice(&[0x81, 0x00, 0x00, 0x07, 0x08, 0x00]);
        h
    })
    .into_iter()
    .map(|(t, mut f)| {
        f.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // an FCS the IP length excludes
        (t, f)
    })
    .collect();
    let sll = with_header(&|_| {
        let mut h = vec![0, 0, 0, 1, 0, 6, 0x52, 0x54, 0, 0x77, 0, 0x0c, 0, 0];
        h.extend_from_slice(&[0x08, 0x00]);
        h
    });
    let sll2 = with_header(&|_| {
        let mut h = vec![0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6];
        h.extend_from_slice(&[0x52, 0x54, 0, 0x77, 0, 0x0c, 0, 0]);
        h
    });
    let cases = [
        (LinkType::ETHERNET, eth_qinq),
        (LinkType::ETHERNET, eth_dot1q_fcs),
        (LinkType::LINUX_SLL, sll),
        (LinkType::LINUX_SLL2, sll2),
        (LinkType::RAW, l3.clone()),
        (LinkType::IPV4, l3.clone()),
    ];
    for (link, frames) in cases {
        let file = write(link, TsResolution::Nano, &frames);
        assert_eq!(packets(&file), want, "{link}");
    }
    // IPv4 frames in an IPv6-only link: UDP port read at the IPv6 offset — not RoCE.
    let file = write(LinkType::IPV6, TsResolution::Nano, &l3);
    let (decoded, summary, _) = decode_all(&file).expect("hdr");
    assert_eq!(summary.packets, 0);
    assert_eq!(decoded.len(), 40);
}

#[test]
fn ethernet_padding_after_a_short_packet_is_ignored() {
    // fake_peer frame 2 is a 62-byte ACK; pad it like a switch would (to 64 + junk).
    let fr = frames(&read("captures/fake_peer.pcap"));
    let (t, mut ack) = fr[1].clone();
    assert_eq!(ack.len(), 62);
    ack.extend_from_slice(&[0x55; 10]);
    let file = write(LinkType::ETHERNET, TsResolution::Micro, &[(t, ack)]);
    let recs = packets(&file);
    assert_eq!(recs.len(), 1);
    assert_eq!(
        (recs[0].opcode_name.as_str(), recs[0].icrc),
        ("RC_ACKNOWLEDGE", IcrcStatus::Ok)
    );
}

#[test]
fn ipv6_packets_decode() {
    // Re-home a real packet onto IPv6 with wire's builder, frame it, decode it.
    let fr = frames(&read("captures/write_bw.pcap"));
    let data = &fr[0].1;
    let FrameKind::Roce(roce) = capture::classify(LinkType::ETHERNET, data, data.len() as u32)
    else {
        panic!("frame 1 is RoCE");
    };
    let ip6 = wire::ip::IpRepr::V6 {
        src: "fd00::12".parse().expect("addr"),
        dst: "::ffff:10.77.0.11".parse().expect("addr"),
        traffic_class: 2,
        flow_label: 0x12345,
        hop_limit: 64,
    };
    let mut buf = vec![0u8; 2048];
    let n = wire::frame::build_l3(&ip6, &roce.parsed.udp, &roce.parsed.packet, &mut buf)
        .expect("build");
    let mut eth = data[..12].to_vec();
    eth.extend_from_slice(&[0x86, 0xdd]);
    eth.extend_from_slice(&buf[..n]);
    let file = write(
        LinkType::ETHERNET,
        TsResolution::Nano,
        &[(Duration::from_secs(1), eth)],
    );
    let recs = packets(&file);
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.src.to_string(), "fd00::12");
    assert_eq!(r.dst.to_string(), "::ffff:10.77.0.11");
    assert_eq!(
        (r.opcode_name.as_str(), r.payload_len, r.icrc),
        ("RC_RDMA_WRITE_FIRST", 1024, IcrcStatus::Ok)
    );
    assert_eq!(r.reth.map(|x| x.len), Some(3000));
}

#[test]
fn damaged_roce_frames_are_garbled_or_bad_icrc_never_lost() {
    let fr = frames(&read("captures/write_bw.pcap"));
    let (t, first) = fr[0].clone(); // 1098 bytes: Eth 14, IPv4 20, UDP 8, BTH 12, RETH 16, 1024, ICRC 4
    let bth = 14 + 20 + 8;

    // A flipped payload bit: still decodes, ICRC bad.
    let mut f = first.clone();
    f[bth + 12 + 16 + 100] ^= 0x01;
    // An unknown opcode (0x15 is reserved in RC).
    let mut g = first.clone();
    g[bth] = 0x15;
    // TVer 1.
    let mut h = first.clone();
    h[bth + 1] |= 0x01;
    // IPv4 total length larger than the frame.
    let mut i = first.clone();
    i[14 + 2..14 + 4].copy_from_slice(&2000u16.to_be_bytes());
    // Cut inside the BTH (a runt, not a snaplen cut).
    let j = first[..bth + 6].to_vec();
    // Ethernet header cut short.
    let k = first[..10].to_vec();
    // IHL 3.
    let mut l = first.clone();
    l[14] = 0x43;
    // Same frame to UDP port 4792, and over TCP: skipped, not garbled.
    let mut m = first.clone();
    m[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&4792u16.to_be_bytes());
    let mut n = first.clone();
    n[14 + 9] = 6;
    // An ARP frame.
    let mut o = first[..14].to_vec();
    o[12..14].copy_from_slice(&[0x08, 0x06]);
    o.extend_from_slice(&[0u8; 28]);

    let mut w = PcapWriter::new(Vec::new(), LinkType::ETHERNET, TsResolution::Micro).expect("hdr");
    for frame in [&f, &g, &h, &i, &j, &k, &l, &m, &n, &o] {
        w.write_frame(t, frame).expect("write");
    }
    // Snaplen cut: 96 of 1098 bytes captured.
    w.write_frame_cut(t, &first[..96], first.len() as u32)
        .expect("write");
    let file = w.into_inner().expect("flush");

    let (decoded, summary, stop) = decode_all(&file).expect("hdr");
    assert!(stop.is_none());
    let outcomes: Vec<&Outcome> = decoded.iter().map(|d| &d.outcome).collect();
    match outcomes[0] {
        Outcome::Packet(r) => assert_eq!((r.icrc, r.payload_len), (IcrcStatus::Bad, 1024)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        outcomes[1],
        &Outcome::Garbled(Garbled::Roce(wire::Error::UnknownOpcode))
    );
    assert_eq!(
        outcomes[2],
        &Outcome::Garbled(Garbled::Roce(wire::Error::BadTver))
    );
    assert!(
        matches!(outcomes[3], Outcome::Garbled(Garbled::Roce(_))),
        "{:?}",
        outcomes[3]
    );
    assert!(
        matches!(
            outcomes[4],
            Outcome::Garbled(Garbled::Roce(
                wire::Error::Truncated | wire::Error::BadLength
            ))
        ),
        "{:?}",
        outcomes[4]
    );
    assert!(
        matches!(outcomes[5], Outcome::Garbled(Garbled::Link(_))),
        "{:?}",
        outcomes[5]
    );
    assert_eq!(outcomes[6], &Outcome::Garbled(Garbled::BadIhl(3)));
    assert_eq!(
        outcomes[7],
        &Outcome::NotRoce(NotRoce::OtherUdpPort { dst_port: 4792 })
    );
    assert_eq!(
        outcomes[8],
        &Outcome::NotRoce(NotRoce::NotUdp { protocol: 6 })
    );
    assert!(
        matches!(outcomes[9], Outcome::NotRoce(NotRoce::Link(_))),
        "{:?}",
        outcomes[9]
    );
    assert_eq!(
        outcomes[10],
        &Outcome::Garbled(Garbled::CutByCapture {
            captured: 96,
            orig_len: 1098
        })
    );
    assert_eq!(
        (
            summary.frames,
            summary.packets,
            summary.bad_icrc,
            summary.not_roce,
            summary.garbled
        ),
        (11, 1, 1, 3, 7)
    );
    for d in &decoded {
        if let Outcome::Garbled(why) = &d.outcome {
            assert!(!why.to_string().is_empty());
        }
    }
}

/// A small deterministic generator, so failures replay (seed printed in the message).
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// The stable stand-in for the `pcap_decode` fuzz target: mutate real captures (bit flips,
/// byte overwrites in headers, cuts, insertions, length-field damage) and run the whole
/// pipeline through `capture::fuzzing::decode_bytes`, which asserts its invariants.
#[test]
fn mutated_real_captures_never_panic() {
    let seed = 0x5eed_0001_u64;
    let mut rng = XorShift(seed);
    let mut decoded_some = 0;
    for rel in ROCE {
        let original = read(rel);
        for round in 0..120 {
            let mut m = original.clone();
            let edits = 1 + rng.below(4);
            for _ in 0..edits {
                match rng.below(6) {
                    0 => {
                        let at = rng.below(m.len());
                        m[at] ^= 1 << rng.below(8);
                    }
                    1 => {
                        // Overwrite near the start of some record: header fields live there.
                        let at = 24 + rng.below(m.len().saturating_sub(24).min(200));
                        if at < m.len() {
                            m[at] = rng.next() as u8;
                        }
                    }
                    2 => m.truncate(rng.below(m.len() + 1)),
                    3 => {
                        let at = rng.below(m.len() + 1);
                        m.insert(at, rng.next() as u8);
                    }
                    4 => {
                        if m.len() >= 40 {
                            m[32..36].copy_from_slice(&(rng.next() as u32).to_le_bytes());
                        }
                    }
                    _ => {
                        let at = rng.below(m.len());
                        m[at] = 0xff;
                    }
                }
            }
            if fuzzing::decode_bytes(&m).is_some_and(|s| s.packets > 0) {
                decoded_some += 1;
            }
            let _ = round;
        }
    }
    // Most mutations leave the file header intact and some packets decodable; if none did,
    // the test would not be exercising the decoder.
    assert!(
        decoded_some > 200,
        "seed {seed:#x}: only {decoded_some} mutants decoded anything"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes after a valid file header (any link type): never a panic.
    #[test]
    fn random_records_never_panic(
        link in prop::sample::select(vec![1u16, 101, 113, 228, 229, 276, 0]),
        body in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut file = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0];
        file.extend_from_slice(&u32::from(link).to_le_bytes());
        file.extend_from_slice(&body);
        let summary = fuzzing::decode_bytes(&file);
        prop_assert!(summary.is_some());
    }

    /// Random frames wrapped in valid records: every frame is counted exactly once.
    #[test]
    fn random_frames_are_all_accounted_for(
        frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..8),
        roce_header in any::<bool>(),
    ) {
        let mut w = PcapWriter::ethernet(Vec::new()).expect("hdr");
        for f in &frames {
            let mut f = f.clone();
            if roce_header && f.len() >= 38 {
                // Make it look like IPv4/UDP/4791 so parse_l3 sees random RoCE.
                f[12..14].copy_from_slice(&[0x08, 0x00]);
                f[14] = 0x45;
                f[14 + 6] = 0;
                f[14 + 7] = 0;
                f[14 + 9] = 17;
                f[36..38].copy_from_slice(&4791u16.to_be_bytes());
            }
            w.write_frame(Duration::from_secs(1), &f).expect("frame");
        }
        let file = w.into_inner().expect("flush");
        let summary = fuzzing::decode_bytes(&file).expect("valid header");
        prop_assert_eq!(summary.frames, frames.len() as u64);
    }

    /// Completely arbitrary input.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = fuzzing::decode_bytes(&bytes);
    }
}
