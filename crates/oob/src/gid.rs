//! GIDs as the two tool families see them: 16 bytes in wire order.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A GID: 16 bytes in wire (network) order, e.g. `::ffff:10.77.0.12`.
pub type Gid = [u8; 16];

/// The RoCE v2 GID of an IP address: IPv4 addresses become IPv4-mapped IPv6 addresses.
pub fn gid_from_ip(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

/// The IPv4-mapped GID `::ffff:a.b.c.d`.
pub fn gid_from_ipv4(ip: Ipv4Addr) -> Gid {
    gid_from_ip(IpAddr::V4(ip))
}

/// perftest's `ipv6_addr_v4mapped()`: `::ffff:a.b.c.d`, or the IPv4-encoded multicast form
/// `ff0e::ffff:a.b.c.d`. perftest compares this property of its own and the peer's QP0 GID
/// after the first KEY round (docs/perftest.md §3 "GID type").
pub fn is_v4_mapped(gid: &Gid) -> bool {
    let w = words32(gid);
    let mapped_tail = w[2] == 0x0000_ffff;
    mapped_tail && w[1] == 0 && (w[0] == 0 || w[0] == 0xff0e_0000)
}

/// rdma-core pingpong's "is global" test: the peer's GID has a non-zero interface ID (its
/// lower 64 bits); only then does a side give its address vector a GRH (docs/perftest.md §7.1).
pub fn has_interface_id(gid: &Gid) -> bool {
    let w = words32(gid);
    w[2] != 0 || w[3] != 0
}

fn words32(gid: &Gid) -> [u32; 4] {
    let mut w = [0u32; 4];
    for (i, chunk) in gid.chunks_exact(4).enumerate() {
        if let (Some(slot), Ok(bytes)) = (w.get_mut(i), <[u8; 4]>::try_from(chunk)) {
            *slot = u32::from_be_bytes(bytes);
        }
    }
    w
}

/// glibc's `inet_ntop(AF_INET6, …)`, which rdma-core's pingpong tools use to print GIDs
/// (docs/perftest.md §7.4): the first longest run of two or more zero words becomes `::`, hex is
/// lowercase, and `::a.b.c.d` / `::ffff:a.b.c.d` print their last 32 bits in dotted form.
/// (Rust's `Ipv6Addr` display differs for the deprecated `::a.b.c.d` form.)
pub fn inet_ntop6(gid: &Gid) -> String {
    let mut words = [0u16; 8];
    for (i, pair) in gid.chunks_exact(2).enumerate() {
        if let (Some(slot), [hi, lo]) = (words.get_mut(i), pair) {
            *slot = u16::from_be_bytes([*hi, *lo]);
        }
    }
    // Longest run of zero words; the first one wins a tie.
    let mut best: Option<(usize, usize)> = None;
    let mut cur: Option<(usize, usize)> = None;
    for (i, &w) in words.iter().enumerate() {
        if w == 0 {
            cur = Some(match cur {
                Some((base, len)) => (base, len + 1),
                None => (i, 1),
            });
        } else if let Some(c) = cur.take() {
            if best.is_none_or(|b| c.1 > b.1) {
                best = Some(c);
            }
        }
    }
    if let Some(c) = cur {
        if best.is_none_or(|b| c.1 > b.1) {
            best = Some(c);
        }
    }
    let best = best.filter(|&(_, len)| len >= 2);

    let mut out = String::new();
    for (i, &w) in words.iter().enumerate() {
        if let Some((base, len)) = best {
            if i >= base && i < base + len {
                if i == base {
                    out.push(':');
                }
                continue;
            }
        }
        if i != 0 {
            out.push(':');
        }
        let embedded_v4 = i == 6
            && best.is_some_and(|(base, len)| {
                base == 0 && (len == 6 || (len == 5 && words[5] == 0xffff))
            });
        if embedded_v4 {
            let v4 = Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]);
            out.push_str(&v4.to_string());
            return out;
        }
        out.push_str(&format!("{w:x}"));
    }
    if best.is_some_and(|(base, len)| base + len == 8) {
        out.push(':');
    }
    out
}

/// Parses a GID written as an IPv6 (or IPv4, taken as IPv4-mapped) address.
pub fn parse_gid(text: &str) -> Option<Gid> {
    if let Ok(v6) = text.parse::<Ipv6Addr>() {
        return Some(v6.octets());
    }
    text.parse::<Ipv4Addr>().ok().map(gid_from_ipv4)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(text: &str) -> Gid {
        text.parse::<Ipv6Addr>()
            .map(|a| a.octets())
            .unwrap_or([0xee; 16])
    }

    #[test]
    fn ntop_matches_glibc() {
        assert_eq!(inet_ntop6(&g("::ffff:10.77.0.11")), "::ffff:10.77.0.11");
        assert_eq!(inet_ntop6(&[0; 16]), "::");
        assert_eq!(inet_ntop6(&g("::1")), "::1");
        assert_eq!(inet_ntop6(&g("::10.77.0.11")), "::10.77.0.11");
        assert_eq!(
            inet_ntop6(&g("fe80::5054:ff:fe77:1")),
            "fe80::5054:ff:fe77:1"
        );
        assert_eq!(inet_ntop6(&g("1:0:0:2:0:0:0:3")), "1:0:0:2::3");
        assert_eq!(
            inet_ntop6(&g("1:0:0:2:0:0:3:4")),
            "1::2:0:0:3:4",
            "first run wins a tie"
        );
        assert_eq!(
            inet_ntop6(&g("1:0:2:3:4:5:6:7")),
            "1:0:2:3:4:5:6:7",
            "no :: for one zero word"
        );
        assert_eq!(inet_ntop6(&g("1::")), "1::");
        assert_eq!(inet_ntop6(&g("2001:db8::ffff:1:2")), "2001:db8::ffff:1:2");
    }

    #[test]
    fn v4_mapped_and_interface_id() {
        assert!(is_v4_mapped(&g("::ffff:10.77.0.12")));
        assert!(is_v4_mapped(&g("ff0e::ffff:239.1.2.3")));
        assert!(!is_v4_mapped(&g("fe80::5054:ff:fe77:1")));
        assert!(!is_v4_mapped(&[0; 16]));
        assert!(has_interface_id(&g("::ffff:10.77.0.12")));
        assert!(!has_interface_id(&[0; 16]));
        assert!(!has_interface_id(&g("fe80::")));
        assert_eq!(
            gid_from_ipv4(Ipv4Addr::new(10, 77, 0, 12)),
            g("::ffff:10.77.0.12")
        );
        assert_eq!(parse_gid("10.77.0.1"), Some(g("::ffff:10.77.0.1")));
        assert_eq!(parse_gid("fe80::1"), Some(g("fe80::1")));
        assert_eq!(parse_gid("nope"), None);
    }
}
