//! Entry point for the `pcap_decode` fuzz target (and its stable stand-in test).
//!
//! Runs the whole `uroce decode` pipeline — pcap parsing, link/IP/UDP decapsulation,
//! `wire::frame::parse_l3`, decode records, their text and JSON forms — over arbitrary bytes.

use crate::decode::{decode_all, Outcome, Summary};

/// Decodes `data` as a pcap file and renders every record as text and JSON.
///
/// Returns the counts, or `None` when the file header itself is refused. Panics only if an
/// internal invariant is broken (which is what the fuzzer looks for): the counts must add
/// up, and every record's JSON must parse back to the same record.
pub fn decode_bytes(data: &[u8]) -> Option<Summary> {
    let (decoded, summary, _stop) = decode_all(data).ok()?;
    let mut packets = 0u64;
    for d in &decoded {
        if let Outcome::Packet(record) = &d.outcome {
            packets += 1;
            let text = record.to_string();
            assert!(
                text.contains(&record.opcode_name),
                "text line names the opcode"
            );
            let json = record.to_json();
            let back: crate::decode::DecodeRecord =
                serde_json::from_str(&json).expect("decode JSON parses back");
            assert_eq!(&back, record, "decode JSON round-trips");
        } else if let Outcome::Garbled(why) = &d.outcome {
            let _ = why.to_string();
        }
    }
    assert_eq!(summary.packets, packets);
    assert_eq!(summary.frames, decoded.len() as u64);
    assert_eq!(
        summary.frames,
        summary.packets + summary.not_roce + summary.garbled
    );
    assert!(summary.bad_icrc <= summary.packets);
    Some(summary)
}
