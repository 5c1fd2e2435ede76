//! Any single flipped bit in the ICRC-covered bytes of a packet makes
//! `uroce decode` report `icrc=bad` for that packet.
//!
//! For one packet of every (opcode, IP version) found in the shipped and lab captures, this
//! writes a pcap holding one copy of the packet per flipped bit — every bit of the L3 headers
//! through the transport headers, the ICRC itself, and a sample of payload bits — and runs the
//! built `uroce decode --json` over it once. A flip inside a field the ICRC masks (IPv4 TOS,
//! TTL, header checksum; IPv6 traffic class, flow label, hop limit; UDP checksum; BTH byte 4)
//! must leave `icrc` "ok"; every other flip must give a packet that is either reported with
//! `icrc` "bad" or not reported as a good RoCEv2 packet at all (a flip in the UDP port or IP
//! protocol makes the frame something else, a flip in a length field makes it garbled).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use capture::frame::{FrameKind, Frames};
use capture::pcap::PcapWriter;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

fn pcaps(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read testdata dir")
        .map(|e| e.expect("dir entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            pcaps(&p, out);
        } else if p.extension().is_some_and(|e| e == "pcap") {
            out.push(p);
        }
    }
}

/// One sample packet: the whole Ethernet frame and where its L3 header starts.
struct Sample {
    name: String,
    frame: Vec<u8>,
    l3_off: usize,
    l3_len: usize,
    v6: bool,
}

fn samples() -> Vec<Sample> {
    let mut files = Vec::new();
    pcaps(&testdata(), &mut files);
    let mut seen: BTreeMap<(u8, bool), Sample> = BTreeMap::new();
    for file in files {
        let reader = std::fs::File::open(&file).expect("open pcap");
        let frames = Frames::new(std::io::BufReader::new(reader)).expect("pcap header");
        for frame in frames {
            let Ok(frame) = frame else { break };
            let FrameKind::Roce(roce) = frame.classify() else {
                continue;
            };
            if !roce.parsed.icrc_ok {
                continue; // the packet corrupted on purpose in fake_peer.pcap
            }
            let opcode = roce.parsed.packet.bth.opcode.0;
            let v6 = matches!(roce.parsed.ip, wire::IpRepr::V6 { .. });
            if seen.contains_key(&(opcode, v6)) {
                continue;
            }
            // Ethernet II without VLAN tags in every shipped capture.
            let l3_off = 14;
            let l3_len = roce.parsed.l3_len();
            assert!(
                frame.data.len() >= l3_off + l3_len,
                "frame shorter than its L3 length"
            );
            seen.insert(
                (opcode, v6),
                Sample {
                    name: format!("{} frame {}", file.display(), frame.number),
                    frame: frame.data.clone(),
                    l3_off,
                    l3_len,
                    v6,
                },
            );
        }
    }
    seen.into_values().collect()
}

/// Is bit `bit` of L3 byte `i` inside a field the ICRC masks (docs/wire.md §3.2)?
fn masked(v6: bool, i: usize, bit: u8) -> bool {
    let (ip_len, udp) = if v6 { (40, 40) } else { (20, 20) };
    let in_ip_masked = if v6 {
        // Traffic class (low nibble of byte 0, high nibble of byte 1), flow label, hop limit.
        (i == 0 && bit < 4) || i == 1 || i == 2 || i == 3 || i == 7
    } else {
        i == 1 || i == 8 || i == 10 || i == 11
    };
    let in_udp_checksum = i == udp + 6 || i == udp + 7;
    let bth_byte4 = i == ip_len + 8 + 4;
    in_ip_masked || in_udp_checksum || bth_byte4
}

#[test]
fn every_single_bit_flip_is_reported() {
    let samples = samples();
    assert!(
        samples.len() >= 20,
        "only {} distinct (opcode, IP version) samples",
        samples.len()
    );
    assert!(samples.iter().any(|s| s.v6), "no IPv6 sample in testdata");

    // (frame number in the output file) -> (sample index, L3 byte, bit, masked?)
    let mut flips: Vec<(usize, usize, u8, bool)> = Vec::new();
    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("decode_bitflip_{}.pcap", std::process::id()));
    {
        let file = std::fs::File::create(&path).expect("create pcap");
        let mut writer = PcapWriter::ethernet(std::io::BufWriter::new(file)).expect("writer");
        for (si, s) in samples.iter().enumerate() {
            let headers_end = (if s.v6 { 40 } else { 20 }) + 8 + 80; // IP + UDP + up to 80 B of BTH+ETH
            for i in 0..s.l3_len {
                let icrc = i + 4 >= s.l3_len;
                // Every bit of the headers and the ICRC; one byte in 7 of the payload.
                if !(i < headers_end || icrc || i % 7 == 3) {
                    continue;
                }
                for bit in 0..8u8 {
                    let mut f = s.frame.clone();
                    f[s.l3_off + i] ^= 1 << bit;
                    let ts = Duration::from_micros(flips.len() as u64);
                    writer.write_frame(ts, &f).expect("write frame");
                    flips.push((si, i, bit, masked(s.v6, i, bit)));
                }
            }
        }
        writer.flush().expect("flush");
    }

    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["decode", "--json"])
        .arg(&path)
        .output()
        .expect("run uroce decode");
    assert!(
        out.status.success(),
        "decode failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut icrc_of_frame: BTreeMap<u64, String> = BTreeMap::new();
    for line in String::from_utf8(out.stdout).expect("utf8").lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        let frame = v["frame"].as_u64().expect("frame number");
        let icrc = v["icrc"].as_str().expect("icrc").to_string();
        icrc_of_frame.insert(frame, icrc);
    }

    let (mut bad, mut masked_ok, mut not_reported) = (0usize, 0usize, 0usize);
    for (n, &(si, i, bit, is_masked)) in flips.iter().enumerate() {
        let frame = n as u64 + 1;
        let s = &samples[si];
        match (icrc_of_frame.get(&frame).map(String::as_str), is_masked) {
            (Some("ok"), true) => masked_ok += 1,
            (Some("bad"), false) => bad += 1,
            (None, false) => not_reported += 1,
            (got, _) => panic!(
                "{}: flipping bit {bit} of L3 byte {i} (masked: {is_masked}) gave icrc {got:?}",
                s.name
            ),
        }
    }
    eprintln!(
        "{} samples, {} flips: {bad} reported icrc=bad, {not_reported} not reported as RoCEv2, \
         {masked_ok} in masked fields left icrc=ok",
        samples.len(),
        flips.len()
    );
    assert!(
        bad > flips.len() / 2,
        "most flips must be reported as icrc=bad"
    );
    assert!(masked_ok > 0);
    let _ = std::fs::remove_file(&path);
}
