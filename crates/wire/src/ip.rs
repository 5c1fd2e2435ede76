//! IPv4 / IPv6 + UDP encapsulation of RoCEv2 (docs/wire.md §1.1–§1.3).
//!
//! Zero-copy views [`Ipv4Packet`], [`Ipv6Packet`] and [`UdpPacket`] follow the smoltcp pattern:
//! `new_checked` validates the buffer length once, after which no accessor can panic. The
//! [`IpRepr`] / [`UdpRepr`] values carry exactly the fields RoCEv2 leaves free; the rest is fixed
//! (IPv4 without options, protocol/next header 17, no IPv6 extension headers, no fragments) or
//! derived from the packet (lengths, IPv4 header checksum).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::bytes::{be, put_be};
use crate::error::{Error, Result};
use crate::num::Qpn;

/// RoCEv2 UDP destination port (docs/wire.md §0).
pub const ROCE_V2_PORT: u16 = 4791;
/// IP protocol / IPv6 next header for UDP.
pub const IP_PROTO_UDP: u8 = 17;
/// IPv4 header length without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// IPv6 fixed header length.
pub const IPV6_HEADER_LEN: usize = 40;
/// UDP header length.
pub const UDP_HEADER_LEN: usize = 8;

mod v4field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: Range<usize> = 2..4;
    pub const IDENT: Range<usize> = 4..6;
    pub const FLAGS_FRAG: Range<usize> = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Range<usize> = 10..12;
    pub const SRC: Range<usize> = 12..16;
    pub const DST: Range<usize> = 16..20;
}

mod v6field {
    use core::ops::Range;
    pub const VER_TC_FLOW: Range<usize> = 0..4;
    pub const PAYLOAD_LEN: Range<usize> = 4..6;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: Range<usize> = 8..24;
    pub const DST: Range<usize> = 24..40;
}

mod udpfield {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const LEN: Range<usize> = 4..6;
    pub const CHECKSUM: Range<usize> = 6..8;
}

/// Byte offsets of fields the ICRC masks (docs/wire.md §3.2), relative to their header.
pub(crate) mod mask {
    pub const V4_DSCP_ECN: usize = super::v4field::DSCP_ECN;
    pub const V4_TTL: usize = super::v4field::TTL;
    pub const V4_CHECKSUM: core::ops::Range<usize> = super::v4field::CHECKSUM;
    pub const V4_IDENT: core::ops::Range<usize> = super::v4field::IDENT;
    pub const V4_FLAGS: usize = super::v4field::FLAGS_FRAG.start;
    pub const V6_HOP_LIMIT: usize = super::v6field::HOP_LIMIT;
    pub const UDP_CHECKSUM: core::ops::Range<usize> = super::udpfield::CHECKSUM;
}

/// Zero-copy view of an IPv4 header. `new_checked` guarantees 20 bytes; accessors then cannot
/// panic. It does not check the version, IHL or lengths: [`IpRepr::parse`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps without checking; accessors panic on fewer than 20 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }
    /// Wraps after checking the buffer holds a 20-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < IPV4_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Ipv4Packet { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn d(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn version(&self) -> u8 {
        self.d()[v4field::VER_IHL] >> 4
    }
    /// Header length in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.d()[v4field::VER_IHL] & 0x0F
    }
    pub fn dscp_ecn(&self) -> u8 {
        self.d()[v4field::DSCP_ECN]
    }
    pub fn total_len(&self) -> u16 {
        be(&self.d()[v4field::TOTAL_LEN]) as u16
    }
    pub fn ident(&self) -> u16 {
        be(&self.d()[v4field::IDENT]) as u16
    }
    /// The reserved ("evil") flag bit.
    pub fn reserved_flag(&self) -> bool {
        self.d()[v4field::FLAGS_FRAG.start] & 0x80 != 0
    }
    pub fn dont_frag(&self) -> bool {
        self.d()[v4field::FLAGS_FRAG.start] & 0x40 != 0
    }
    pub fn more_frags(&self) -> bool {
        self.d()[v4field::FLAGS_FRAG.start] & 0x20 != 0
    }
    /// Fragment offset in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        (be(&self.d()[v4field::FLAGS_FRAG]) & 0x1FFF) as u16
    }
    pub fn ttl(&self) -> u8 {
        self.d()[v4field::TTL]
    }
    pub fn protocol(&self) -> u8 {
        self.d()[v4field::PROTOCOL]
    }
    pub fn checksum(&self) -> u16 {
        be(&self.d()[v4field::CHECKSUM]) as u16
    }
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::from(be(&self.d()[v4field::SRC]) as u32)
    }
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::from(be(&self.d()[v4field::DST]) as u32)
    }
    /// The header checksum verifies (the 20-byte header sums to 0xFFFF, RFC 791/1071).
    pub fn checksum_ok(&self) -> bool {
        ones_complement_sum(&self.d()[..IPV4_HEADER_LEN]) == 0xFFFF
    }
}

/// Zero-copy view of an IPv6 fixed header. `new_checked` guarantees 40 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Wraps without checking; accessors panic on fewer than 40 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }
    /// Wraps after checking the buffer holds a 40-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < IPV6_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(Ipv6Packet { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn d(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn word0(&self) -> u32 {
        be(&self.d()[v6field::VER_TC_FLOW]) as u32
    }
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xF_FFFF
    }
    pub fn payload_len(&self) -> u16 {
        be(&self.d()[v6field::PAYLOAD_LEN]) as u16
    }
    pub fn next_header(&self) -> u8 {
        self.d()[v6field::NEXT_HEADER]
    }
    pub fn hop_limit(&self) -> u8 {
        self.d()[v6field::HOP_LIMIT]
    }
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.d()[v6field::SRC]);
        Ipv6Addr::from(a)
    }
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.d()[v6field::DST]);
        Ipv6Addr::from(a)
    }
}

/// Zero-copy view of a UDP header. `new_checked` guarantees 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps without checking; accessors panic on fewer than 8 bytes.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    /// Wraps after checking the buffer holds an 8-byte header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        if buffer.as_ref().len() < UDP_HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(UdpPacket { buffer })
    }
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn d(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn src_port(&self) -> u16 {
        be(&self.d()[udpfield::SRC_PORT]) as u16
    }
    pub fn dst_port(&self) -> u16 {
        be(&self.d()[udpfield::DST_PORT]) as u16
    }
    /// UDP length: header plus payload.
    pub fn len(&self) -> u16 {
        be(&self.d()[udpfield::LEN]) as u16
    }
    /// The UDP length field is zero (never valid for RoCEv2).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn checksum(&self) -> u16 {
        be(&self.d()[udpfield::CHECKSUM]) as u16
    }
}

/// RFC 1071 ones' complement sum of 16-bit big-endian words (odd trailing byte padded).
fn ones_complement_sum(b: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in b.chunks(2) {
        let hi = u32::from(chunk.first().copied().unwrap_or(0));
        let lo = u32::from(chunk.get(1).copied().unwrap_or(0));
        sum += (hi << 8) | lo;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// The IP header fields RoCEv2 leaves free. Lengths, protocol 17, IHL 5 and the IPv4 checksum
/// are derived when emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    V4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        /// DSCP (upper 6 bits) and ECN (low 2 bits); masked out of the ICRC.
        dscp_ecn: u8,
        /// Masked out of the ICRC.
        ttl: u8,
        /// Covered by the ICRC. A Linux UDP socket with PMTU discovery sends 0 (rxe-lab README).
        ident: u16,
        /// Covered by the ICRC. rxe and our NIC set it.
        dont_frag: bool,
    },
    V6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        /// Masked out of the ICRC.
        traffic_class: u8,
        /// 20 bits; masked out of the ICRC. rxe writes 0.
        flow_label: u32,
        /// Masked out of the ICRC.
        hop_limit: u8,
    },
}

impl IpRepr {
    /// The IPv4 header a Linux UDP socket with `IP_PMTUDISC_DO` produces: ID 0, DF set
    /// (rxe-lab README, "Notes for a user-space RoCEv2 implementation").
    pub const fn v4_socket(src: Ipv4Addr, dst: Ipv4Addr, dscp_ecn: u8, ttl: u8) -> IpRepr {
        IpRepr::V4 {
            src,
            dst,
            dscp_ecn,
            ttl,
            ident: 0,
            dont_frag: true,
        }
    }

    /// 20 or 40.
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4 { .. } => IPV4_HEADER_LEN,
            IpRepr::V6 { .. } => IPV6_HEADER_LEN,
        }
    }

    /// ECN codepoint (low 2 bits of TOS / traffic class, docs/wire.md §9.1).
    pub const fn ecn(&self) -> u8 {
        match self {
            IpRepr::V4 { dscp_ecn, .. } => *dscp_ecn & 0x3,
            IpRepr::V6 { traffic_class, .. } => *traffic_class & 0x3,
        }
    }

    /// Source address as a 16-byte GID (IPv4 as `::ffff:a.b.c.d`, docs/wire.md §1.1).
    pub fn src_gid(&self) -> [u8; 16] {
        match self {
            IpRepr::V4 { src, .. } => gid_of_ip((*src).into()),
            IpRepr::V6 { src, .. } => gid_of_ip((*src).into()),
        }
    }

    /// Destination address as a 16-byte GID.
    pub fn dst_gid(&self) -> [u8; 16] {
        match self {
            IpRepr::V4 { dst, .. } => gid_of_ip((*dst).into()),
            IpRepr::V6 { dst, .. } => gid_of_ip((*dst).into()),
        }
    }

    /// Parses an IP header that must carry UDP, returning the `Repr` and the number of bytes the
    /// IP header says the whole datagram occupies (header included). Validates the version, IHL
    /// = 5, protocol/next header 17, no fragmentation and that the datagram fits in `bytes`
    /// (trailing bytes, e.g. Ethernet padding, are allowed). Does not verify the IPv4 checksum;
    /// see [`Ipv4Packet::checksum_ok`].
    pub fn parse(bytes: &[u8]) -> Result<(IpRepr, usize)> {
        let first = *bytes.first().ok_or(Error::Truncated)?;
        match first >> 4 {
            4 => {
                let p = Ipv4Packet::new_checked(bytes)?;
                if p.ihl() != 5 {
                    return Err(Error::BadIhl);
                }
                let total = usize::from(p.total_len());
                if total < IPV4_HEADER_LEN + UDP_HEADER_LEN {
                    return Err(Error::BadLength);
                }
                if total > bytes.len() {
                    return Err(Error::Truncated);
                }
                if p.reserved_flag() || p.more_frags() || p.frag_offset() != 0 {
                    return Err(Error::BadIpFlags);
                }
                if p.protocol() != IP_PROTO_UDP {
                    return Err(Error::NotRoce);
                }
                let repr = IpRepr::V4 {
                    src: p.src(),
                    dst: p.dst(),
                    dscp_ecn: p.dscp_ecn(),
                    ttl: p.ttl(),
                    ident: p.ident(),
                    dont_frag: p.dont_frag(),
                };
                Ok((repr, total))
            }
            6 => {
                let p = Ipv6Packet::new_checked(bytes)?;
                if p.next_header() != IP_PROTO_UDP {
                    return Err(Error::NotRoce);
                }
                let payload = usize::from(p.payload_len());
                if payload < UDP_HEADER_LEN {
                    return Err(Error::BadLength);
                }
                let total = IPV6_HEADER_LEN + payload;
                if total > bytes.len() {
                    return Err(Error::Truncated);
                }
                let repr = IpRepr::V6 {
                    src: p.src(),
                    dst: p.dst(),
                    traffic_class: p.traffic_class(),
                    flow_label: p.flow_label(),
                    hop_limit: p.hop_limit(),
                };
                Ok((repr, total))
            }
            _ => Err(Error::BadVersion),
        }
    }

    /// Writes the IP header for a datagram whose IP payload (UDP header onward) is
    /// `payload_len` bytes. Computes the lengths and, for IPv4, the header checksum.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        let out = buf
            .get_mut(..self.header_len())
            .ok_or(Error::BufferTooSmall)?;
        match *self {
            IpRepr::V4 {
                src,
                dst,
                dscp_ecn,
                ttl,
                ident,
                dont_frag,
            } => {
                let total =
                    u16::try_from(IPV4_HEADER_LEN + payload_len).map_err(|_| Error::BadLength)?;
                out[v4field::VER_IHL] = 0x45;
                out[v4field::DSCP_ECN] = dscp_ecn;
                put_be(&mut out[v4field::TOTAL_LEN], u64::from(total));
                put_be(&mut out[v4field::IDENT], u64::from(ident));
                put_be(
                    &mut out[v4field::FLAGS_FRAG],
                    if dont_frag { 0x4000 } else { 0 },
                );
                out[v4field::TTL] = ttl;
                out[v4field::PROTOCOL] = IP_PROTO_UDP;
                put_be(&mut out[v4field::CHECKSUM], 0);
                out[v4field::SRC].copy_from_slice(&src.octets());
                out[v4field::DST].copy_from_slice(&dst.octets());
                let sum = !ones_complement_sum(out);
                put_be(&mut out[v4field::CHECKSUM], u64::from(sum));
            }
            IpRepr::V6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
            } => {
                let plen = u16::try_from(payload_len).map_err(|_| Error::BadLength)?;
                let word0 =
                    (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0xF_FFFF);
                put_be(&mut out[v6field::VER_TC_FLOW], u64::from(word0));
                put_be(&mut out[v6field::PAYLOAD_LEN], u64::from(plen));
                out[v6field::NEXT_HEADER] = IP_PROTO_UDP;
                out[v6field::HOP_LIMIT] = hop_limit;
                out[v6field::SRC].copy_from_slice(&src.octets());
                out[v6field::DST].copy_from_slice(&dst.octets());
            }
        }
        Ok(())
    }
}

/// The UDP header fields that are not derived. RoCEv2 sends checksum 0 (docs/wire.md §1.2); the
/// field is kept so captured packets re-emit exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    pub checksum: u16,
}

impl UdpRepr {
    /// UDP header as rxe sends it: destination 4791, checksum 0.
    pub const fn roce(src_port: u16) -> UdpRepr {
        UdpRepr {
            src_port,
            dst_port: ROCE_V2_PORT,
            checksum: 0,
        }
    }

    /// Parses the 8-byte header; returns the `Repr` and the UDP length field.
    pub fn parse(bytes: &[u8]) -> Result<(UdpRepr, u16)> {
        let p = UdpPacket::new_checked(bytes)?;
        Ok((
            UdpRepr {
                src_port: p.src_port(),
                dst_port: p.dst_port(),
                checksum: p.checksum(),
            },
            p.len(),
        ))
    }

    /// Writes the header for `payload_len` bytes of UDP payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        let out = buf.get_mut(..UDP_HEADER_LEN).ok_or(Error::BufferTooSmall)?;
        let len = u16::try_from(UDP_HEADER_LEN + payload_len).map_err(|_| Error::BadLength)?;
        put_be(&mut out[udpfield::SRC_PORT], u64::from(self.src_port));
        put_be(&mut out[udpfield::DST_PORT], u64::from(self.dst_port));
        put_be(&mut out[udpfield::LEN], u64::from(len));
        put_be(&mut out[udpfield::CHECKSUM], u64::from(self.checksum));
        Ok(())
    }

    pub const fn buffer_len(&self) -> usize {
        UDP_HEADER_LEN
    }
}

/// Flow label Linux derives from a QP pair when none is given (docs/wire.md §1.3,
/// `rdma_calc_flow_label`): symmetric in the two QPNs, so both ends agree.
pub fn flow_label_for_qp(lqpn: Qpn, rqpn: Qpn) -> u32 {
    let mut v = u64::from(lqpn.value()) * u64::from(rqpn.value());
    v ^= v >> 20;
    v ^= v >> 40;
    (v & 0xF_FFFF) as u32
}

/// UDP source port for a QP (docs/wire.md §1.3, Linux `rdma_get_udp_sport`): a flow label of 0
/// is replaced by [`flow_label_for_qp`], then folded into 14 bits with the top two bits set
/// (0xC000–0xFFFF), constant per QP so its packets stay on one ECMP path.
pub fn udp_sport_for_qp(lqpn: Qpn, rqpn: Qpn, flow_label: u32) -> u16 {
    let mut fl = flow_label & 0xF_FFFF;
    if fl == 0 {
        fl = flow_label_for_qp(lqpn, rqpn);
    }
    let low = fl & 0x3FFF;
    let high = fl & 0xF_C000;
    ((low ^ (high >> 14)) | 0xC000) as u16
}

/// The RoCEv2 GID of an address: IPv4 as `::ffff:a.b.c.d`, IPv6 as itself (docs/wire.md §1.1).
pub fn gid_of_ip(ip: core::net::IpAddr) -> [u8; 16] {
    match ip {
        core::net::IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        core::net::IpAddr::V6(v6) => v6.octets(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sport_example() {
        assert_eq!(udp_sport_for_qp(Qpn::new(0x11), Qpn::new(0x12), 0), 0xC132);
        assert_eq!(udp_sport_for_qp(Qpn::new(0x12), Qpn::new(0x11), 0), 0xC132);
        assert_eq!(flow_label_for_qp(Qpn::new(0x11), Qpn::new(0x12)), 0x132);
        // Explicit flow label: low 14 bits XOR the high 6 bits.
        assert_eq!(
            udp_sport_for_qp(Qpn::new(1), Qpn::new(2), 0xFC000 | 0x5),
            0xC000 | (0x5 ^ 0x3F)
        );
        for (a, b) in [(0u32, 0u32), (0xFF_FFFF, 0xFF_FFFF), (0x1234, 0xABCDEF)] {
            assert!(udp_sport_for_qp(Qpn::new(a), Qpn::new(b), 0) >= 0xC000);
        }
    }

    // docs/wire.md §3.5 example A, IPv4 header: total length 52, ID 1, DF, TTL 64, csum b762.
    const V4_A: [u8; 20] = [
        0x45, 0x02, 0x00, 0x34, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0xb7, 0x62, 0xc0, 0xa8, 0x01,
        0x01, 0xc0, 0xa8, 0x01, 0x02,
    ];

    fn repr_a() -> IpRepr {
        IpRepr::V4 {
            src: Ipv4Addr::new(192, 168, 1, 1),
            dst: Ipv4Addr::new(192, 168, 1, 2),
            dscp_ecn: 0x02,
            ttl: 64,
            ident: 1,
            dont_frag: true,
        }
    }

    #[test]
    fn ipv4_emit_and_parse() {
        let mut out = [0u8; 20];
        repr_a().emit(&mut out, 32).expect("emit");
        assert_eq!(out, V4_A);
        let mut buf = V4_A.to_vec();
        buf.resize(52, 0);
        assert_eq!(IpRepr::parse(&buf), Ok((repr_a(), 52)));
        assert!(Ipv4Packet::new_checked(&V4_A[..])
            .expect("len")
            .checksum_ok());
        // Trailing bytes (Ethernet padding) are fine; a short buffer is not.
        buf.resize(60, 0);
        assert_eq!(IpRepr::parse(&buf).map(|r| r.1), Ok(52));
        assert_eq!(IpRepr::parse(&buf[..51]), Err(Error::Truncated));
    }

    #[test]
    fn ipv4_rejections() {
        let mut base = V4_A.to_vec();
        base.resize(52, 0);
        let with = |i: usize, v: u8| {
            let mut b = base.clone();
            b[i] = v;
            IpRepr::parse(&b).err()
        };
        assert_eq!(with(0, 0x46), Some(Error::BadIhl));
        assert_eq!(with(0, 0x55), Some(Error::BadVersion));
        assert_eq!(with(9, 6), Some(Error::NotRoce));
        assert_eq!(with(6, 0x60), Some(Error::BadIpFlags)); // MF
        assert_eq!(with(6, 0xC0), Some(Error::BadIpFlags)); // reserved
        assert_eq!(with(7, 0x01), Some(Error::BadIpFlags)); // offset
        assert_eq!(with(3, 27), Some(Error::BadLength));
        assert_eq!(IpRepr::parse(&[]), Err(Error::Truncated));
        assert_eq!(IpRepr::parse(&base[..19]), Err(Error::Truncated));
    }

    #[test]
    fn ipv6_emit_and_parse() {
        let repr = IpRepr::V6 {
            src: "fd00::1".parse().expect("addr"),
            dst: "fd00::2".parse().expect("addr"),
            traffic_class: 0x02,
            flow_label: 0x12345,
            hop_limit: 64,
        };
        let mut out = [0u8; 40];
        repr.emit(&mut out, 32).expect("emit");
        // docs/wire.md §3.5 D: `6 02 12345 0020 11 40 fd00…0001 fd00…0002`.
        assert_eq!(&out[..8], &[0x60, 0x21, 0x23, 0x45, 0x00, 0x20, 0x11, 0x40]);
        assert_eq!(out[8], 0xfd);
        assert_eq!(out[23], 0x01);
        assert_eq!(out[39], 0x02);
        let mut buf = out.to_vec();
        buf.resize(72, 0);
        assert_eq!(IpRepr::parse(&buf), Ok((repr, 72)));
        buf[6] = 0; // hop-by-hop options header: not supported
        assert_eq!(IpRepr::parse(&buf), Err(Error::NotRoce));
        assert_eq!(repr.src_gid()[15], 1);
    }

    #[test]
    fn udp_header() {
        let mut out = [0u8; 8];
        UdpRepr::roce(0xC132).emit(&mut out, 24).expect("emit");
        assert_eq!(out, [0xc1, 0x32, 0x12, 0xb7, 0x00, 0x20, 0x00, 0x00]);
        assert_eq!(UdpRepr::parse(&out), Ok((UdpRepr::roce(0xC132), 32)));
        assert_eq!(UdpRepr::parse(&out[..7]), Err(Error::Truncated));
        assert_eq!(
            UdpRepr::roce(1).emit(&mut out, 65535 - 7),
            Err(Error::BadLength)
        );
    }

    #[test]
    fn gid_of_v4_is_mapped() {
        let g = repr_a().src_gid();
        assert_eq!(&g[..12], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(&g[12..], &[192, 168, 1, 1]);
    }
}
