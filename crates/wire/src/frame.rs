//! Whole RoCEv2 L3 frames: IP header, UDP header, transport packet, ICRC (docs/wire.md §1.1).
//!
//! [`build_l3`] derives every length, the IPv4 header checksum, the pad and the ICRC.
//! [`parse_l3`] validates the frame and reports the ICRC result as a flag rather than an error,
//! so a decoder can still print a packet whose ICRC is bad. It never panics on any input.

use crate::error::{Error, Result};
use crate::icrc::{self, ICRC_LEN};
use crate::ip::{IpRepr, Ipv4Packet, UdpRepr, ROCE_V2_PORT, UDP_HEADER_LEN};
use crate::roce::RocePacketRepr;

/// A validated RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedFrame<'a> {
    pub ip: IpRepr,
    pub udp: UdpRepr,
    pub packet: RocePacketRepr<'a>,
    /// The ICRC as carried on the wire (bytes read least-significant first).
    pub icrc_wire: u32,
    /// The ICRC matches the frame.
    pub icrc_ok: bool,
    /// The IPv4 header checksum verifies (always `true` for IPv6, which has none).
    pub ip_checksum_ok: bool,
}

impl ParsedFrame<'_> {
    /// `Err(BadIcrc)` if the ICRC did not match.
    pub fn check_icrc(&self) -> Result<()> {
        if self.icrc_ok {
            Ok(())
        } else {
            Err(Error::BadIcrc)
        }
    }

    /// Length of the frame from the IP header through the ICRC.
    pub fn l3_len(&self) -> usize {
        l3_len(&self.ip, &self.packet)
    }
}

/// Bytes [`build_l3`] writes for this packet: IP + UDP + BTH..pad + ICRC.
pub fn l3_len(ip: &IpRepr, pkt: &RocePacketRepr<'_>) -> usize {
    ip.header_len() + UDP_HEADER_LEN + pkt.transport_len() + ICRC_LEN
}

/// Writes a complete L3 frame into the front of `buf` and returns its length.
///
/// Lengths, the IPv4 header checksum, the pad (see [`RocePacketRepr::emit`]) and the ICRC are
/// computed here. `udp.dst_port` is written as given (use [`ROCE_V2_PORT`]; [`parse_l3`]
/// accepts nothing else).
pub fn build_l3(
    ip: &IpRepr,
    udp: &UdpRepr,
    pkt: &RocePacketRepr<'_>,
    buf: &mut [u8],
) -> Result<usize> {
    pkt.validate()?;
    let total = l3_len(ip, pkt);
    let ip_len = ip.header_len();
    let out = buf.get_mut(..total).ok_or(Error::BufferTooSmall)?;
    let udp_payload = total - ip_len - UDP_HEADER_LEN;
    ip.emit(out, UDP_HEADER_LEN + udp_payload)?;
    udp.emit(&mut out[ip_len..], udp_payload)?;
    let transport_start = ip_len + UDP_HEADER_LEN;
    let icrc_at = total - ICRC_LEN;
    let written = pkt.emit(&mut out[transport_start..icrc_at])?;
    if written != icrc_at - transport_start {
        return Err(Error::BadLength);
    }
    let crc = icrc::compute(&out[..icrc_at])?;
    out[icrc_at..].copy_from_slice(&icrc::icrc_wire_bytes(crc));
    Ok(total)
}

/// Parses and validates an L3 RoCEv2 frame (IP header first; trailing bytes after the length the
/// IP header gives, such as Ethernet padding, are ignored).
///
/// Validates: IP version 4/6, IPv4 IHL 5 and no fragmentation, protocol/next header UDP, IP
/// length vs bytes present, UDP destination port 4791, UDP length = IP payload length, room for
/// BTH + ICRC, then everything [`RocePacketRepr::parse`] checks (TVer, opcode, length vs opcode
/// header length, pad). The ICRC and the IPv4 header checksum are reported in
/// [`ParsedFrame::icrc_ok`] / [`ParsedFrame::ip_checksum_ok`], not as errors.
pub fn parse_l3(bytes: &[u8]) -> Result<ParsedFrame<'_>> {
    let (ip, end) = IpRepr::parse(bytes)?;
    let frame = bytes.get(..end).ok_or(Error::Truncated)?;
    let ip_len = ip.header_len();
    let ip_checksum_ok = match ip {
        IpRepr::V4 { .. } => Ipv4Packet::new_checked(frame)?.checksum_ok(),
        IpRepr::V6 { .. } => true,
    };
    let l4 = frame.get(ip_len..).ok_or(Error::Truncated)?;
    let (udp, udp_len) = UdpRepr::parse(l4)?;
    if udp.dst_port != ROCE_V2_PORT {
        return Err(Error::NotRoce);
    }
    if usize::from(udp_len) != l4.len() {
        return Err(Error::BadLength);
    }
    let datagram = l4.get(UDP_HEADER_LEN..).ok_or(Error::Truncated)?;
    if datagram.len() < crate::bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::BadLength);
    }
    let (transport, icrc_wire) = crate::roce::split_icrc(datagram)?;
    let packet = RocePacketRepr::parse(transport)?;
    let covered = frame.get(..end - ICRC_LEN).ok_or(Error::Truncated)?;
    let icrc_ok = icrc::compute(covered)
        .map(|c| c == icrc_wire)
        .unwrap_or(false);
    Ok(ParsedFrame {
        ip,
        udp,
        packet,
        icrc_wire,
        icrc_ok,
        ip_checksum_ok,
    })
}
