//! Decode records: what `uroce decode` prints for each RoCEv2 packet of a capture.
//!
//! [`DecodeRecord`] is the one description of a packet; its `Display` is the text line and
//! its serde form is the JSON object of `uroce decode --json`. The JSON keys are a published
//! interface (scripts parse them), so they are fixed here and tested: `frame`, `src`, `dst`,
//! `opcode`, `opcode_name`, `dest_qp`, `psn`, `ack_req`, `se`, `pad`, `payload_len`, `icrc`,
//! and, only when the packet carries the header, `xrceth` (the XRC SRQ number), `reth`,
//! `aeth`, `deth`, `atomic_eth`, `atomic_ack`, `immdt`, `ieth`. All numbers are JSON integers.

use std::fmt;
use std::io::Read;
use std::net::IpAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use wire::frame::ParsedFrame;
use wire::ip::IpRepr;
use wire::AckKind;

use crate::frame::{Frame, FrameKind, Frames, Garbled, NotRoce};
use crate::pcap::PcapError;

/// Every top-level JSON key a [`DecodeRecord`] can have, in output order.
pub const JSON_KEYS: [&str; 20] = [
    "frame",
    "src",
    "dst",
    "opcode",
    "opcode_name",
    "dest_qp",
    "psn",
    "ack_req",
    "se",
    "pad",
    "payload_len",
    "icrc",
    "xrceth",
    "reth",
    "aeth",
    "deth",
    "atomic_eth",
    "atomic_ack",
    "immdt",
    "ieth",
];

/// The keys every record has (the rest appear only with their extension header).
pub const JSON_KEYS_ALWAYS: [&str; 12] = [
    "frame",
    "src",
    "dst",
    "opcode",
    "opcode_name",
    "dest_qp",
    "psn",
    "ack_req",
    "se",
    "pad",
    "payload_len",
    "icrc",
];

/// Result of the ICRC check (docs/wire.md §3).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IcrcStatus {
    /// The ICRC on the wire matches the one computed over the packet.
    Ok,
    /// It does not: a receiver such as rxe drops the packet.
    Bad,
}

impl fmt::Display for IcrcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IcrcStatus::Ok => "ok",
            IcrcStatus::Bad => "bad",
        })
    }
}

/// RETH fields (docs/wire.md §1.5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RethFields {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length of the whole message.
    pub len: u32,
}

/// AETH fields (docs/wire.md §4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AethFields {
    /// Syndrome byte.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// DETH fields (docs/wire.md §1.5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DethFields {
    /// Q_Key.
    pub qkey: u32,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

/// AtomicETH fields (docs/wire.md §1.5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtomicEthFields {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap (compare-and-swap) or add (fetch-and-add) operand.
    pub swap_add: u64,
    /// Compare operand (compare-and-swap only).
    pub compare: u64,
}

/// AtomicAckETH fields (docs/wire.md §1.5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtomicAckFields {
    /// Original remote data.
    pub orig: u64,
}

/// Everything `uroce decode` shows about one RoCEv2 packet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodeRecord {
    /// 1-based frame number in the capture file.
    pub frame: u64,
    /// IP source address.
    pub src: IpAddr,
    /// IP destination address.
    pub dst: IpAddr,
    /// BTH opcode.
    pub opcode: u8,
    /// Opcode name from the `wire` opcode table (e.g. `RC_RDMA_WRITE_FIRST`).
    pub opcode_name: String,
    /// BTH destination QP (24 bits).
    pub dest_qp: u32,
    /// BTH packet sequence number (24 bits).
    pub psn: u32,
    /// BTH AckReq bit.
    pub ack_req: bool,
    /// BTH Solicited Event bit.
    pub se: bool,
    /// BTH pad count (0–3).
    pub pad: u8,
    /// Payload bytes (after the extension headers, without pad and ICRC).
    pub payload_len: usize,
    /// ICRC check result.
    pub icrc: IcrcStatus,
    /// XRCETH (the responder's XRC SRQ number), when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xrceth: Option<u32>,
    /// RETH, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reth: Option<RethFields>,
    /// AETH, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aeth: Option<AethFields>,
    /// DETH, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deth: Option<DethFields>,
    /// AtomicETH, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic_eth: Option<AtomicEthFields>,
    /// AtomicAckETH, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atomic_ack: Option<AtomicAckFields>,
    /// Immediate data (the 4 bytes as a big-endian integer), when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub immdt: Option<u32>,
    /// IETH R_Key to invalidate, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ieth: Option<u32>,
}

impl DecodeRecord {
    /// Builds the record of frame number `frame` from what `wire::frame::parse_l3` returned.
    pub fn new(frame: u64, parsed: &ParsedFrame<'_>) -> DecodeRecord {
        let (src, dst) = match parsed.ip {
            IpRepr::V4 { src, dst, .. } => (IpAddr::V4(src), IpAddr::V4(dst)),
            IpRepr::V6 { src, dst, .. } => (IpAddr::V6(src), IpAddr::V6(dst)),
        };
        let pkt = &parsed.packet;
        let bth = &pkt.bth;
        let opcode_name = match bth.opcode.info() {
            Some(info) => info.name.to_string(),
            None => format!("UNKNOWN_0x{:02x}", bth.opcode.0),
        };
        DecodeRecord {
            frame,
            src,
            dst,
            opcode: bth.opcode.0,
            opcode_name,
            dest_qp: bth.dest_qp.value(),
            psn: bth.psn.value(),
            ack_req: bth.ack_req,
            se: bth.solicited,
            pad: bth.pad_count,
            payload_len: pkt.payload.len(),
            icrc: if parsed.icrc_ok {
                IcrcStatus::Ok
            } else {
                IcrcStatus::Bad
            },
            xrceth: pkt.xrceth.map(|x| x.srqn),
            reth: pkt.reth.map(|r| RethFields {
                va: r.va,
                rkey: r.rkey.0,
                len: r.len,
            }),
            aeth: pkt.aeth.map(|a| AethFields {
                syndrome: a.syndrome.0,
                msn: a.msn.value(),
            }),
            deth: pkt.deth.map(|d| DethFields {
                qkey: d.qkey.0,
                src_qp: d.src_qp.value(),
            }),
            atomic_eth: pkt.atomic_eth.map(|a| AtomicEthFields {
                va: a.va,
                rkey: a.rkey.0,
                swap_add: a.swap_add,
                compare: a.compare,
            }),
            atomic_ack: pkt.atomic_ack.map(|a| AtomicAckFields { orig: a.orig }),
            immdt: pkt.immdt.map(|i| i.0),
            ieth: pkt.ieth.map(|i| i.rkey.0),
        }
    }

    /// The JSON object (one line, no trailing newline) of `uroce decode --json`.
    pub fn to_json(&self) -> String {
        // Serialising plain integers, strings and bools into a String cannot fail; fall back
        // to an empty object rather than panic should serde_json ever disagree.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

/// Text form of an AETH syndrome (docs/wire.md §4.1).
fn fmt_aeth(f: &mut fmt::Formatter<'_>, a: &AethFields) -> fmt::Result {
    let syndrome = wire::Syndrome(a.syndrome);
    write!(f, "  aeth(0x{:02x} ", a.syndrome)?;
    match syndrome.kind() {
        AckKind::Ack { credit_code } => write!(f, "ACK credit={credit_code}")?,
        AckKind::RnrNak { timer_code } => write!(f, "RNR_NAK timer={timer_code}")?,
        AckKind::Nak(code) => write!(f, "NAK code={} ({code})", code.0)?,
        AckKind::Reserved => write!(f, "reserved")?,
    }
    write!(f, " msn={})", a.msn)
}

impl fmt::Display for DecodeRecord {
    /// One line, e.g.
    /// `   7 10.77.0.12 -> 10.77.0.11  RC_RDMA_WRITE_FIRST  qp=0x000051 psn=0x733ee9  reth(va=0x563071a94000 rkey=0x423c len=3000)  len=1024 icrc=ok`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>4} {} -> {}  {}  qp=0x{:06x} psn=0x{:06x}",
            self.frame, self.src, self.dst, self.opcode_name, self.dest_qp, self.psn
        )?;
        if self.ack_req {
            f.write_str(" ack_req")?;
        }
        if self.se {
            f.write_str(" se")?;
        }
        if self.pad != 0 {
            write!(f, " pad={}", self.pad)?;
        }
        if let Some(x) = self.xrceth {
            write!(f, "  xrceth(srqn=0x{x:06x})")?;
        }
        if let Some(d) = &self.deth {
            write!(f, "  deth(qkey=0x{:08x} src_qp=0x{:06x})", d.qkey, d.src_qp)?;
        }
        if let Some(r) = &self.reth {
            write!(
                f,
                "  reth(va=0x{:x} rkey=0x{:x} len={})",
                r.va, r.rkey, r.len
            )?;
        }
        if let Some(a) = &self.atomic_eth {
            write!(
                f,
                "  atomic_eth(va=0x{:x} rkey=0x{:x} swap_add=0x{:x} compare=0x{:x})",
                a.va, a.rkey, a.swap_add, a.compare
            )?;
        }
        if let Some(a) = &self.aeth {
            fmt_aeth(f, a)?;
        }
        if let Some(a) = &self.atomic_ack {
            write!(f, "  atomic_ack(orig=0x{:x})", a.orig)?;
        }
        if let Some(i) = self.immdt {
            write!(f, "  immdt=0x{i:08x}")?;
        }
        if let Some(k) = self.ieth {
            write!(f, "  ieth(rkey=0x{k:x})")?;
        }
        write!(f, "  len={} icrc={}", self.payload_len, self.icrc)
    }
}

/// What one frame decoded to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A RoCEv2 packet.
    Packet(DecodeRecord),
    /// Not RoCEv2; skipped.
    NotRoce(NotRoce),
    /// Damaged or malformed, with the reason.
    Garbled(Garbled),
}

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// 1-based frame number.
    pub frame: u64,
    /// Capture time since the Unix epoch.
    pub timestamp: Duration,
    /// What the frame held.
    pub outcome: Outcome,
}

impl Decoded {
    /// Decodes one frame.
    pub fn from_frame(frame: &Frame) -> Decoded {
        let outcome = match frame.classify() {
            FrameKind::Roce(roce) => Outcome::Packet(DecodeRecord::new(frame.number, &roce.parsed)),
            FrameKind::NotRoce(why) => Outcome::NotRoce(why),
            FrameKind::Garbled(why) => Outcome::Garbled(why),
        };
        Decoded {
            frame: frame.number,
            timestamp: frame.timestamp,
            outcome,
        }
    }
}

/// Counts over a decoded capture.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Frames read.
    pub frames: u64,
    /// RoCEv2 packets decoded (good or bad ICRC).
    pub packets: u64,
    /// Frames skipped as not RoCEv2.
    pub not_roce: u64,
    /// Frames that were damaged or malformed.
    pub garbled: u64,
    /// Decoded packets whose ICRC is bad.
    pub bad_icrc: u64,
}

impl Summary {
    /// Counts one decoded frame.
    pub fn add(&mut self, outcome: &Outcome) {
        self.frames += 1;
        match outcome {
            Outcome::Packet(r) => {
                self.packets += 1;
                if r.icrc == IcrcStatus::Bad {
                    self.bad_icrc += 1;
                }
            }
            Outcome::NotRoce(_) => self.not_roce += 1,
            Outcome::Garbled(_) => self.garbled += 1,
        }
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} frames: {} RoCEv2 packets decoded, {} non-RoCE frames skipped, {} garbled, {} bad ICRC",
            self.frames, self.packets, self.not_roce, self.garbled, self.bad_icrc
        )
    }
}

/// Decodes every frame of a pcap stream, keeping a running [`Summary`].
///
/// Yields `Err` once if the file turns out damaged part-way (then stops); frames before the
/// damage have been yielded and counted.
#[derive(Debug)]
pub struct Decoder<R> {
    frames: Frames<R>,
    summary: Summary,
}

impl<R: Read> Decoder<R> {
    /// Reads the pcap file header from `reader`.
    pub fn new(reader: R) -> Result<Self, PcapError> {
        Ok(Decoder {
            frames: Frames::new(reader)?,
            summary: Summary::default(),
        })
    }

    /// Counts so far.
    pub fn summary(&self) -> Summary {
        self.summary
    }

    /// Link type of the file.
    pub fn link_type(&self) -> crate::pcap::LinkType {
        self.frames.link_type()
    }
}

impl<R: Read> Iterator for Decoder<R> {
    type Item = Result<Decoded, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        let frame = match self.frames.next()? {
            Ok(frame) => frame,
            Err(e) => return Some(Err(e)),
        };
        let decoded = Decoded::from_frame(&frame);
        self.summary.add(&decoded.outcome);
        Some(Ok(decoded))
    }
}

/// Decodes a whole capture held in memory: every frame's outcome, the counts, and the error
/// that stopped reading part-way, if any. A bad file header is the outer error.
pub fn decode_all(bytes: &[u8]) -> Result<(Vec<Decoded>, Summary, Option<PcapError>), PcapError> {
    let mut decoder = Decoder::new(bytes)?;
    let mut out = Vec::new();
    let mut stop = None;
    for item in decoder.by_ref() {
        match item {
            Ok(d) => out.push(d),
            Err(e) => stop = Some(e),
        }
    }
    Ok((out, decoder.summary(), stop))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> DecodeRecord {
        DecodeRecord {
            frame: 12,
            src: "fd00::1".parse().expect("addr"),
            dst: "fd00::2".parse().expect("addr"),
            opcode: 0x0B,
            opcode_name: "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE".into(),
            dest_qp: 0x12,
            psn: 0xFF_FFFF,
            ack_req: true,
            se: true,
            pad: 3,
            payload_len: 5,
            icrc: IcrcStatus::Ok,
            xrceth: None,
            reth: Some(RethFields {
                va: u64::MAX,
                rkey: 0x1234,
                len: 5,
            }),
            aeth: None,
            deth: None,
            atomic_eth: None,
            atomic_ack: None,
            immdt: Some(0xDEAD_BEEF),
            ieth: None,
        }
    }

    #[test]
    fn text_line_shows_flags_pad_and_immediate() {
        assert_eq!(
            record().to_string(),
            "  12 fd00::1 -> fd00::2  RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE  qp=0x000012 psn=0xffffff \
             ack_req se pad=3  reth(va=0xffffffffffffffff rkey=0x1234 len=5)  immdt=0xdeadbeef  \
             len=5 icrc=ok"
        );
    }

    #[test]
    fn aeth_kinds_and_ieth_in_text() {
        let mut r = record();
        r.reth = None;
        r.immdt = None;
        r.ack_req = false;
        r.se = false;
        r.pad = 0;
        r.icrc = IcrcStatus::Bad;
        let cases = [
            (0x1F, "aeth(0x1f ACK credit=31 msn=7)"),
            (0x2E, "aeth(0x2e RNR_NAK timer=14 msn=7)"),
            (0x61, "aeth(0x61 NAK code=1 (invalid request) msn=7)"),
            (0x40, "aeth(0x40 reserved msn=7)"),
        ];
        for (syndrome, want) in cases {
            r.aeth = Some(AethFields { syndrome, msn: 7 });
            let line = r.to_string();
            assert!(line.contains(want), "{line}");
            assert!(line.ends_with("len=5 icrc=bad"), "{line}");
        }
        r.aeth = None;
        r.ieth = Some(0xABCD);
        assert!(r.to_string().contains("  ieth(rkey=0xabcd)  "));
        r.xrceth = Some(0x12);
        let s = r.to_string();
        assert!(s.contains("  xrceth(srqn=0x000012)  "), "{s}");
        assert!(r.to_json().contains("\"xrceth\":18"));
    }

    #[test]
    fn json_has_integers_and_only_present_headers() {
        let json = record().to_json();
        assert_eq!(
            json,
            "{\"frame\":12,\"src\":\"fd00::1\",\"dst\":\"fd00::2\",\"opcode\":11,\
             \"opcode_name\":\"RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE\",\"dest_qp\":18,\
             \"psn\":16777215,\"ack_req\":true,\"se\":true,\"pad\":3,\"payload_len\":5,\
             \"icrc\":\"ok\",\"reth\":{\"va\":18446744073709551615,\"rkey\":4660,\"len\":5},\
             \"immdt\":3735928559}"
        );
        let back: DecodeRecord = serde_json::from_str(&json).expect("parse");
        assert_eq!(back, record());
        // Unknown keys are refused when reading records back.
        let extra = json.replacen('{', "{\"bogus\":1,", 1);
        assert!(serde_json::from_str::<DecodeRecord>(&extra).is_err());
    }

    #[test]
    fn summary_counts() {
        let mut s = Summary::default();
        let mut r = record();
        s.add(&Outcome::Packet(r.clone()));
        r.icrc = IcrcStatus::Bad;
        s.add(&Outcome::Packet(r));
        s.add(&Outcome::NotRoce(NotRoce::NotUdp { protocol: 6 }));
        s.add(&Outcome::Garbled(Garbled::BadIhl(2)));
        assert_eq!(
            s,
            Summary {
                frames: 4,
                packets: 2,
                not_roce: 1,
                garbled: 1,
                bad_icrc: 1
            }
        );
        assert_eq!(
            s.to_string(),
            "4 frames: 2 RoCEv2 packets decoded, 1 non-RoCE frames skipped, 1 garbled, 1 bad ICRC"
        );
    }
}
