//! Link-layer decapsulation: from a captured frame to the IP packet inside it.
//!
//! Handles Ethernet II with up to two 802.1Q/802.1ad VLAN tags (docs/wire.md §1.1: "Ethernet
//! (14, +4 per VLAN tag)"), Linux cooked captures (SLL v1 and v2, what `tcpdump -i any`
//! writes) and raw IP link types. Every field read is bounds-checked; a frame too short for
//! its link header is reported, never indexed past.

use crate::pcap::LinkType;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86DD;
/// 802.1Q customer VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// 802.1ad service VLAN tag (the outer tag of Q-in-Q).
pub const ETHERTYPE_QINQ: u16 = 0x88A8;
/// Pre-standard Q-in-Q outer tag still used by some switches.
pub const ETHERTYPE_QINQ_OLD: u16 = 0x9100;

/// Most VLAN tags we look through.
pub const MAX_VLAN_TAGS: usize = 2;

const ETH_HEADER_LEN: usize = 14;
const VLAN_TAG_LEN: usize = 4;
const SLL_HEADER_LEN: usize = 16;
const SLL2_HEADER_LEN: usize = 20;

/// IP version of a decapsulated packet.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum IpVersion {
    /// IPv4.
    V4,
    /// IPv6.
    V6,
}

/// The IP packet found in a frame.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct L3<'a> {
    /// IP version announced by the link layer (EtherType or, for raw links, the version
    /// nibble). The IP header itself is checked later.
    pub version: IpVersion,
    /// VLAN IDs passed on the way in, outer first.
    pub vlan_ids: [Option<u16>; MAX_VLAN_TAGS],
    /// Bytes from the IP header to the end of the frame (may include Ethernet padding or an
    /// FCS after the IP packet; the IP length fields say where it ends).
    pub bytes: &'a [u8],
}

/// Why a frame holds no IP packet for us.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    /// The link type is not one we decapsulate.
    #[error("unsupported {0}")]
    UnsupportedLinkType(LinkType),
    /// The frame ends inside its link-layer header.
    #[error("frame of {have} bytes ends inside its {need}-byte link-layer header")]
    Truncated {
        /// Bytes present.
        have: usize,
        /// Bytes the header needs (including VLAN tags seen so far).
        need: usize,
    },
    /// The payload is not IPv4 or IPv6 (ARP, LLDP, an 802.3 length field, ...).
    #[error("not IP (EtherType 0x{0:04x})")]
    NotIp(u16),
    /// A raw-IP frame whose version nibble is neither 4 nor 6.
    #[error("raw IP frame with IP version {0}")]
    BadIpVersion(u8),
    /// More VLAN tags than [`MAX_VLAN_TAGS`].
    #[error("more than {MAX_VLAN_TAGS} VLAN tags")]
    TooManyVlanTags,
}

impl LinkError {
    /// True for a frame that is damaged (as opposed to one that simply carries something
    /// other than IP).
    pub fn is_damage(&self) -> bool {
        matches!(self, LinkError::Truncated { .. })
    }
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([*b.first()?, *b.get(1)?]))
}

/// Finds the IP packet inside `frame`, captured with link type `link`.
pub fn decapsulate(link: LinkType, frame: &[u8]) -> Result<L3<'_>, LinkError> {
    match link {
        LinkType::ETHERNET => ethernet(frame),
        LinkType::LINUX_SLL => {
            // SLL v1: packet type 2, ARPHRD 2, address length 2, address 8, protocol 2.
            let proto = be16(frame, 14).ok_or(LinkError::Truncated {
                have: frame.len(),
                need: SLL_HEADER_LEN,
            })?;
            by_ethertype(proto, frame.get(SLL_HEADER_LEN..).unwrap_or(&[]), [None; 2])
        }
        LinkType::LINUX_SLL2 => {
            // SLL v2: protocol 2, reserved 2, ifindex 4, ARPHRD 2, packet type 1,
            // address length 1, address 8.
            if frame.len() < SLL2_HEADER_LEN {
                return Err(LinkError::Truncated {
                    have: frame.len(),
                    need: SLL2_HEADER_LEN,
                });
            }
            let proto = be16(frame, 0).ok_or(LinkError::Truncated {
                have: frame.len(),
                need: SLL2_HEADER_LEN,
            })?;
            by_ethertype(
                proto,
                frame.get(SLL2_HEADER_LEN..).unwrap_or(&[]),
                [None; 2],
            )
        }
        LinkType::RAW => raw_ip(frame),
        LinkType::IPV4 => Ok(L3 {
            version: IpVersion::V4,
            vlan_ids: [None; 2],
            bytes: frame,
        }),
        LinkType::IPV6 => Ok(L3 {
            version: IpVersion::V6,
            vlan_ids: [None; 2],
            bytes: frame,
        }),
        other => Err(LinkError::UnsupportedLinkType(other)),
    }
}

fn ethernet(frame: &[u8]) -> Result<L3<'_>, LinkError> {
    // Destination MAC 6, source MAC 6, then EtherType or TPID.
    let mut offset = 12;
    let mut vlan_ids = [None; MAX_VLAN_TAGS];
    let mut tags = 0;
    loop {
        let need = offset + 2;
        let ethertype = be16(frame, offset).ok_or(LinkError::Truncated {
            have: frame.len(),
            need,
        })?;
        match ethertype {
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => {
                let slot = vlan_ids.get_mut(tags).ok_or(LinkError::TooManyVlanTags)?;
                // TCI: PCP 3 bits, DEI 1 bit, VLAN ID 12 bits.
                let tci = be16(frame, offset + 2).ok_or(LinkError::Truncated {
                    have: frame.len(),
                    need: offset + VLAN_TAG_LEN + 2,
                })?;
                *slot = Some(tci & 0x0FFF);
                tags += 1;
                offset += VLAN_TAG_LEN;
            }
            _ => {
                let payload = frame.get(offset + 2..).unwrap_or(&[]);
                debug_assert!(offset + 2 >= ETH_HEADER_LEN);
                return by_ethertype(ethertype, payload, vlan_ids);
            }
        }
    }
}

fn by_ethertype(
    ethertype: u16,
    bytes: &[u8],
    vlan_ids: [Option<u16>; MAX_VLAN_TAGS],
) -> Result<L3<'_>, LinkError> {
    let version = match ethertype {
        ETHERTYPE_IPV4 => IpVersion::V4,
        ETHERTYPE_IPV6 => IpVersion::V6,
        other => return Err(LinkError::NotIp(other)),
    };
    Ok(L3 {
        version,
        vlan_ids,
        bytes,
    })
}

fn raw_ip(frame: &[u8]) -> Result<L3<'_>, LinkError> {
    let first = *frame
        .first()
        .ok_or(LinkError::Truncated { have: 0, need: 1 })?;
    let version = match first >> 4 {
        4 => IpVersion::V4,
        6 => IpVersion::V6,
        v => return Err(LinkError::BadIpVersion(v)),
    };
    Ok(L3 {
        version,
        vlan_ids: [None; 2],
        bytes: frame,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth(tags: &[(u16, u16)], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for (tpid, tci) in tags {
            v.extend_from_slice(&tpid.to_be_bytes());
            v.extend_from_slice(&tci.to_be_bytes());
        }
        v.extend_from_slice(&ethertype.to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn ethernet_plain_and_vlan() {
        let f = eth(&[], ETHERTYPE_IPV4, &[0x45, 1, 2]);
        let l3 = decapsulate(LinkType::ETHERNET, &f).expect("ipv4");
        assert_eq!(l3.version, IpVersion::V4);
        assert_eq!(l3.bytes, &[0x45, 1, 2]);
        assert_eq!(l3.vlan_ids, [None, None]);

        let f = eth(
            &[(ETHERTYPE_QINQ, 0x2064), (ETHERTYPE_VLAN, 0x0005)],
            ETHERTYPE_IPV6,
            &[0x60],
        );
        let l3 = decapsulate(LinkType::ETHERNET, &f).expect("ipv6 in q-in-q");
        assert_eq!(l3.version, IpVersion::V6);
        assert_eq!(l3.vlan_ids, [Some(0x064), Some(5)]);
        assert_eq!(l3.bytes, &[0x60]);

        let f = eth(
            &[
                (ETHERTYPE_VLAN, 1),
                (ETHERTYPE_VLAN, 2),
                (ETHERTYPE_VLAN, 3),
            ],
            ETHERTYPE_IPV4,
            &[],
        );
        assert_eq!(
            decapsulate(LinkType::ETHERNET, &f),
            Err(LinkError::TooManyVlanTags)
        );

        let f = eth(&[], 0x0806, &[0; 28]);
        assert_eq!(
            decapsulate(LinkType::ETHERNET, &f),
            Err(LinkError::NotIp(0x0806))
        );
    }

    #[test]
    fn truncated_link_headers() {
        for len in 0..14 {
            let f = eth(&[], ETHERTYPE_IPV4, &[]);
            let err = decapsulate(LinkType::ETHERNET, &f[..len]).expect_err("short");
            assert!(err.is_damage(), "{len}: {err}");
        }
        let f = eth(&[(ETHERTYPE_VLAN, 7)], ETHERTYPE_IPV4, &[]);
        for len in 14..18 {
            assert!(decapsulate(LinkType::ETHERNET, &f[..len])
                .expect_err("short")
                .is_damage());
        }
        assert!(
            decapsulate(LinkType::ETHERNET, &f).is_ok(),
            "empty IP payload is for the IP layer to judge"
        );
        assert!(decapsulate(LinkType::LINUX_SLL, &[0; 15])
            .expect_err("short")
            .is_damage());
        assert!(decapsulate(LinkType::LINUX_SLL2, &[0; 19])
            .expect_err("short")
            .is_damage());
        assert!(decapsulate(LinkType::RAW, &[])
            .expect_err("short")
            .is_damage());
    }

    #[test]
    fn cooked_and_raw() {
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        sll.push(0x45);
        let l3 = decapsulate(LinkType::LINUX_SLL, &sll).expect("sll");
        assert_eq!((l3.version, l3.bytes), (IpVersion::V4, &[0x45][..]));

        let mut sll2 = ETHERTYPE_IPV6.to_be_bytes().to_vec();
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.push(0x60);
        let l3 = decapsulate(LinkType::LINUX_SLL2, &sll2).expect("sll2");
        assert_eq!((l3.version, l3.bytes), (IpVersion::V6, &[0x60][..]));

        assert_eq!(
            decapsulate(LinkType::RAW, &[0x60, 0])
                .expect("raw6")
                .version,
            IpVersion::V6
        );
        assert_eq!(
            decapsulate(LinkType::RAW, &[0x50]),
            Err(LinkError::BadIpVersion(5))
        );
        assert_eq!(
            decapsulate(LinkType::IPV4, &[0x45]).expect("v4").version,
            IpVersion::V4
        );
        assert_eq!(
            decapsulate(LinkType(105), &[0; 40]),
            Err(LinkError::UnsupportedLinkType(LinkType(105)))
        );
    }
}
