//! Classifying captured frames: RoCEv2 packet, something else, or damaged.
//!
//! A frame counts as RoCEv2 when it carries IPv4/IPv6 → UDP with destination port 4791
//! (docs/wire.md §1.1, §0). Such a frame is handed to [`wire::frame::parse_l3`]; if that
//! refuses it, the frame is *garbled* and the reason is kept. Frames that visibly carry
//! anything else (ARP, TCP, UDP to another port, later IP fragments) are *not RoCE* and are
//! only counted. A frame too short to tell is garbled too: a capture of RoCE traffic should
//! not contain runts, and hiding them among "not RoCE" would hide capture damage.

use std::fmt;
use std::io::Read;
use std::time::Duration;

use wire::frame::ParsedFrame;

use crate::link::{self, IpVersion, LinkError};
use crate::pcap::{
    Endian, FileHeader, LinkType, PcapError, PcapReader, Record, TsResolution, MAX_RECORD_LEN,
    RECORD_HEADER_LEN,
};

/// UDP destination port of RoCEv2 (docs/wire.md §0).
pub const ROCE_V2_UDP_PORT: u16 = 4791;

const IPV4_MIN_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const IP_PROTO_UDP: u8 = 17;

/// Why a frame was skipped as not RoCEv2 (not an error: captures mix traffic).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum NotRoce {
    /// No IP packet (ARP, LLDP, an unknown link type, more than two VLAN tags, ...).
    Link(LinkError),
    /// IP, but not UDP (IPv4 protocol / IPv6 next header).
    NotUdp {
        /// Protocol number.
        protocol: u8,
    },
    /// UDP to a port other than 4791.
    OtherUdpPort {
        /// Destination port.
        dst_port: u16,
    },
    /// An IPv4 fragment other than the first: it has no UDP header to look at.
    LaterFragment,
}

impl fmt::Display for NotRoce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRoce::Link(e) => write!(f, "{e}"),
            NotRoce::NotUdp { protocol } => write!(f, "IP protocol {protocol}, not UDP"),
            NotRoce::OtherUdpPort { dst_port } => {
                write!(f, "UDP destination port {dst_port}, not 4791")
            }
            NotRoce::LaterFragment => write!(f, "IPv4 fragment without UDP header"),
        }
    }
}

/// Why a frame could not be decoded: damaged link/IP headers, or a RoCEv2 packet that
/// [`wire::frame::parse_l3`] refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Garbled {
    /// The frame ends inside its link-layer header.
    Link(LinkError),
    /// The frame ends before the IP/UDP headers say whether it is RoCEv2.
    TruncatedIp {
        /// IP version from the link layer.
        version: IpVersion,
        /// Bytes after the link header.
        have: usize,
        /// Bytes needed to reach the UDP destination port.
        need: usize,
    },
    /// An IPv4 header length (IHL) below the minimum of 5 words.
    BadIhl(u8),
    /// A RoCEv2 frame cut short by the capture's snaplen.
    CutByCapture {
        /// Bytes captured.
        captured: usize,
        /// Length on the wire.
        orig_len: u32,
    },
    /// `wire::frame::parse_l3` refused the RoCEv2 packet.
    Roce(wire::Error),
}

impl fmt::Display for Garbled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Garbled::Link(e) => write!(f, "{e}"),
            Garbled::TruncatedIp {
                version,
                have,
                need,
            } => {
                let v = match version {
                    IpVersion::V4 => "IPv4",
                    IpVersion::V6 => "IPv6",
                };
                write!(
                    f,
                    "{v} packet truncated: {have} bytes, {need} needed to reach the UDP port"
                )
            }
            Garbled::BadIhl(ihl) => write!(f, "IPv4 header length {ihl} words (minimum 5)"),
            Garbled::CutByCapture { captured, orig_len } => {
                write!(
                    f,
                    "RoCEv2 frame cut by the capture: {captured} of {orig_len} bytes captured"
                )
            }
            Garbled::Roce(e) => write!(f, "malformed RoCEv2 packet: {e}"),
        }
    }
}

/// What one frame holds.
// The RoCE variant is large (a parsed packet), but a FrameKind is returned by value and
// matched at once, never stored in bulk; boxing it would cost an allocation per packet.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum FrameKind<'a> {
    /// A RoCEv2 packet that parsed (its ICRC may still be bad: see `parsed.icrc_ok`).
    Roce(RoceFrame<'a>),
    /// Not RoCEv2: skipped.
    NotRoce(NotRoce),
    /// Damaged or malformed.
    Garbled(Garbled),
}

/// A parsed RoCEv2 frame.
#[derive(Debug)]
pub struct RoceFrame<'a> {
    /// The L3 bytes handed to `parse_l3`: IP header through ICRC, Ethernet padding and FCS
    /// removed (the IP length field says where the packet ends).
    pub l3: &'a [u8],
    /// VLAN IDs the frame carried, outer first.
    pub vlan_ids: [Option<u16>; link::MAX_VLAN_TAGS],
    /// What `wire` made of it.
    pub parsed: ParsedFrame<'a>,
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

/// Classifies one captured frame.
///
/// `orig_len` is the frame's length on the wire (the pcap record's original length), used
/// to tell a capture that cut a RoCEv2 frame short from a malformed packet.
pub fn classify(link_type: LinkType, data: &[u8], orig_len: u32) -> FrameKind<'_> {
    let l3 = match link::decapsulate(link_type, data) {
        Ok(l3) => l3,
        Err(e) if e.is_damage() => return FrameKind::Garbled(Garbled::Link(e)),
        Err(e) => return FrameKind::NotRoce(NotRoce::Link(e)),
    };
    let ip = l3.bytes;
    // Locate the UDP header and the IP packet's end from the family's fixed fields only;
    // everything else (version nibble, IHL 5, checksums, lengths) is parse_l3's job.
    let (udp_at, ip_end) = match l3.version {
        IpVersion::V4 => {
            let Some(&b0) = ip.first() else {
                return truncated_ip(l3.version, ip.len(), IPV4_MIN_HEADER_LEN);
            };
            let ihl_bytes = usize::from(b0 & 0x0F) * 4;
            if ip.len() < IPV4_MIN_HEADER_LEN {
                return truncated_ip(l3.version, ip.len(), IPV4_MIN_HEADER_LEN);
            }
            if ihl_bytes < IPV4_MIN_HEADER_LEN {
                return FrameKind::Garbled(Garbled::BadIhl(b0 & 0x0F));
            }
            let protocol = ip.get(9).copied().unwrap_or(0);
            if protocol != IP_PROTO_UDP {
                return FrameKind::NotRoce(NotRoce::NotUdp { protocol });
            }
            let frag_offset = be16(ip, 6).unwrap_or(0) & 0x1FFF;
            if frag_offset != 0 {
                return FrameKind::NotRoce(NotRoce::LaterFragment);
            }
            (ihl_bytes, usize::from(be16(ip, 2).unwrap_or(0)))
        }
        IpVersion::V6 => {
            if ip.len() < IPV6_HEADER_LEN {
                return truncated_ip(l3.version, ip.len(), IPV6_HEADER_LEN);
            }
            let next_header = ip.get(6).copied().unwrap_or(0);
            if next_header != IP_PROTO_UDP {
                // RoCEv2 never uses IPv6 extension headers; anything else is not ours.
                return FrameKind::NotRoce(NotRoce::NotUdp {
                    protocol: next_header,
                });
            }
            (
                IPV6_HEADER_LEN,
                IPV6_HEADER_LEN + usize::from(be16(ip, 4).unwrap_or(0)),
            )
        }
    };
    let Some(dst_port) = be16(ip, udp_at + 2) else {
        return truncated_ip(l3.version, ip.len(), udp_at + 4);
    };
    if dst_port != ROCE_V2_UDP_PORT {
        return FrameKind::NotRoce(NotRoce::OtherUdpPort { dst_port });
    }
    // From here on the frame claims to be RoCEv2.
    let captured = data.len();
    if u64::from(orig_len) > captured as u64 && ip_end > ip.len() {
        return FrameKind::Garbled(Garbled::CutByCapture { captured, orig_len });
    }
    // Drop Ethernet minimum-size padding and any FCS after the IP packet. If the length
    // field claims more than we have, hand everything over and let parse_l3 say so.
    let bytes = ip.get(..ip_end).unwrap_or(ip);
    match wire::frame::parse_l3(bytes) {
        Ok(parsed) => FrameKind::Roce(RoceFrame {
            l3: bytes,
            vlan_ids: l3.vlan_ids,
            parsed,
        }),
        Err(e) => FrameKind::Garbled(Garbled::Roce(e)),
    }
}

fn truncated_ip(version: IpVersion, have: usize, need: usize) -> FrameKind<'static> {
    FrameKind::Garbled(Garbled::TruncatedIp {
        version,
        have,
        need,
    })
}

/// One captured frame, owned, with its 1-based number in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// 1-based frame number, as Wireshark counts.
    pub number: u64,
    /// Link type of the file.
    pub link_type: LinkType,
    /// Capture time since the Unix epoch.
    pub timestamp: Duration,
    /// Length on the wire.
    pub orig_len: u32,
    /// Captured bytes.
    pub data: Vec<u8>,
}

impl Frame {
    /// Classifies this frame (see [`classify`]).
    pub fn classify(&self) -> FrameKind<'_> {
        classify(self.link_type, &self.data, self.orig_len)
    }
}

/// Iterator over the frames of a pcap file, numbered from 1.
///
/// Yields `Err` once if the file is damaged (then stops); see [`PcapReader`].
#[derive(Debug)]
pub struct Frames<R> {
    reader: PcapReader<R>,
}

impl<R: Read> Frames<R> {
    /// Reads the file header of `reader`.
    pub fn new(reader: R) -> Result<Self, PcapError> {
        Ok(Frames {
            reader: PcapReader::new(reader)?,
        })
    }

    /// Wraps an already opened reader.
    pub fn from_reader(reader: PcapReader<R>) -> Self {
        Frames { reader }
    }

    /// Link type of the file.
    pub fn link_type(&self) -> LinkType {
        self.reader.link_type()
    }
}

impl<R: Read> Iterator for Frames<R> {
    type Item = Result<Frame, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        let link_type = self.reader.link_type();
        let result = self.reader.next_record().transpose()?;
        let number = self.reader.records_read();
        Some(result.map(
            |Record {
                 timestamp,
                 orig_len,
                 data,
             }| Frame {
                number,
                link_type,
                timestamp,
                orig_len,
                data,
            },
        ))
    }
}

/// The pcap records in `bytes` — a stream of records without a file header, as the attach
/// protocol carries them (`abi::attach`): 16-byte little-endian record headers with
/// nanosecond timestamps — each with its Ethernet frame (numbered 0); a damaged or cut tail
/// ends the list.
pub fn stream_records(bytes: &[u8]) -> Vec<(&[u8], Frame)> {
    let header = FileHeader {
        endian: Endian::Little,
        resolution: TsResolution::Nano,
        version_major: 2,
        version_minor: 4,
        snaplen: MAX_RECORD_LEN,
        link_type: LinkType::ETHERNET,
        fcs_len: None,
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    for r in PcapReader::continuing(bytes, header).map_while(Result::ok) {
        let end = at + RECORD_HEADER_LEN + r.data.len();
        out.push((
            bytes.get(at..end).unwrap_or(&[]),
            Frame {
                number: 0,
                link_type: LinkType::ETHERNET,
                timestamp: r.timestamp,
                orig_len: r.orig_len,
                data: r.data,
            },
        ));
        at = end;
    }
    out
}

#[cfg(test)]
mod stream_tests {
    use super::*;

    #[test]
    fn stream_records_split_whole_records_and_stop_at_a_cut_one() {
        let mut w =
            crate::pcap::PcapWriter::continuing(Vec::new(), crate::pcap::TsResolution::Nano);
        w.write_frame_cut(Duration::new(5, 7), b"abcdef", 6)
            .unwrap();
        w.write_frame_cut(Duration::new(6, 8), b"xyz", 10).unwrap();
        let bytes = w.get_mut().clone();
        let recs = stream_records(&bytes);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].1.data, b"abcdef");
        assert_eq!(recs[0].1.timestamp, Duration::new(5, 7));
        assert_eq!(
            (recs[1].1.data.as_slice(), recs[1].1.orig_len),
            (&b"xyz"[..], 10)
        );
        assert_eq!(recs[0].0.len() + recs[1].0.len(), bytes.len());
        // A record cut short is not returned; nor is a header claiming more than is there.
        assert_eq!(stream_records(&bytes[..bytes.len() - 1]).len(), 1);
        let mut lying = bytes[..16].to_vec();
        lying[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(stream_records(&lying).is_empty());
    }
}
