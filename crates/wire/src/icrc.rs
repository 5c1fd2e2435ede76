//! RoCEv2 invariant CRC (docs/wire.md §3).
//!
//! The ICRC is the standard CRC-32 (zlib/Ethernet) of 8 bytes of 0xFF (stand-in for the IB LRH)
//! followed by the IP header, UDP header, BTH, extension headers, payload and pad, with the
//! fields a network may change replaced by ones (§3.2): IPv4 TOS, TTL and header checksum; IPv6
//! traffic class, flow label and hop limit; UDP checksum; BTH byte 4 (F, B, resv6). It is sent
//! least-significant byte first (§3.4).
//!
//! No packet is copied to mask it: the masked IP/UDP/BTH bytes (at most 68 bytes with the 0xFF
//! prefix) are assembled in a stack buffer and fed to the CRC, then the rest of the packet is fed
//! straight from the caller's slice — CRC-32 streams.
//!
//! # Receiving through a UDP socket
//!
//! A UDP socket delivers BTH..ICRC. Everything the ICRC covers in the IP and UDP headers can be
//! rebuilt from what the socket reports (addresses, ports, lengths) except, for IPv4, the 16-bit
//! Identification and the DF flag, which the sender chose (rxe: random ID, DF set). CRC-32 is
//! affine over GF(2): `crc(m ⊕ e) = crc(m) ⊕ L(e)` for messages of equal length, with `L`
//! linear. So the ICRC with the unseen bits `u` is `crc(m₀) ⊕ Σ uᵢ·L(eᵢ)`, where `m₀` has them
//! all zero. [`verify_udp_v4_unseen_ident`] computes `crc(m₀)`, the 17 contributions `L(eᵢ)`
//! for this packet length (polynomial arithmetic modulo the CRC polynomial, no pass over the
//! data), and solves `syndrome = Σ uᵢ·L(eᵢ)` by Gaussian elimination; a solution also recovers
//! the sender's ID and DF.
//!
//! **False-accept rate**: the 17 contributions are linearly independent (the unseen bits lie
//! within a 23-bit window and CRC-32 detects every burst of up to 32 bits), so they span 2^17
//! of the 2^32 possible syndromes. A corruption that scrambles the CRC uniformly is accepted
//! with probability 2^17 / 2^32 = 2^-15 ≈ 3.1·10^-5 (instead of 2^-32 for a full check), and a
//! change confined to the ID/DF bits themselves is not detectable at all. Use the exact check
//! ([`verify`], [`verify_udp`]) whenever the IP header is available, and for IPv6, where no
//! covered field is unseen.

use std::net::Ipv4Addr;

use crate::bth;
use crate::error::{Error, Result};
use crate::ip::{mask, IpRepr, UdpRepr, IPV4_HEADER_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Bytes of 0xFF that stand in for the IB local route header (docs/wire.md §3.1).
const LRH_STANDIN_LEN: usize = 8;

/// CRC-32 (zlib form) over a good packet's covered bytes followed by its ICRC wire bytes
/// (docs/wire.md §3.3, formulation 3).
pub const RESIDUE: u32 = 0x2144_DF1C;

/// Largest masked prefix: 0xFF×8, IPv6 header, UDP header, BTH.
const PREFIX_MAX: usize = LRH_STANDIN_LEN + IPV6_HEADER_LEN + UDP_HEADER_LEN + bth::HEADER_LEN;

/// Offset of the byte in the BTH that is masked (F, B, resv6).
const BTH_MASKED_BYTE: usize = 4;

/// Masks the variant fields (docs/wire.md §3.2) of `hdr` = IP header, UDP header, BTH, in place.
fn apply_mask(hdr: &mut [u8], ip_len: usize) {
    let ones = |b: &mut [u8]| b.fill(0xFF);
    if ip_len == IPV4_HEADER_LEN {
        hdr[mask::V4_DSCP_ECN] = 0xFF;
        hdr[mask::V4_TTL] = 0xFF;
        ones(&mut hdr[mask::V4_CHECKSUM]);
    } else {
        // Version stays; traffic class and flow label become all ones: 0x6F FF FF FF.
        hdr[0] |= 0x0F;
        ones(&mut hdr[1..4]);
        hdr[mask::V6_HOP_LIMIT] = 0xFF;
    }
    let udp = ip_len;
    ones(&mut hdr[udp + mask::UDP_CHECKSUM.start..udp + mask::UDP_CHECKSUM.end]);
    hdr[udp + UDP_HEADER_LEN + BTH_MASKED_BYTE] = 0xFF;
}

/// CRC over `0xFF×8 ‖ mask(hdr) ‖ rest`, where `hdr` is exactly IP + UDP + BTH.
fn crc_split(hdr: &[u8], ip_len: usize, rest: &[u8]) -> u32 {
    let mut prefix = [0xFFu8; PREFIX_MAX];
    let n = LRH_STANDIN_LEN + hdr.len();
    let body = &mut prefix[LRH_STANDIN_LEN..n];
    body.copy_from_slice(hdr);
    apply_mask(body, ip_len);
    let mut h = crc32fast::Hasher::new();
    h.update(&prefix[..n]);
    h.update(rest);
    h.finalize()
}

/// ICRC over an L3 frame whose IP header is `ip_len` bytes: `l3` runs from the IP header to the
/// last pad byte (no ICRC).
fn compute_with(l3: &[u8], ip_len: usize) -> Result<u32> {
    let hdr_len = ip_len + UDP_HEADER_LEN + bth::HEADER_LEN;
    if l3.len() < hdr_len {
        return Err(Error::Truncated);
    }
    let (hdr, rest) = l3.split_at(hdr_len);
    Ok(crc_split(hdr, ip_len, rest))
}

/// ICRC of an IPv4 frame: `l3` = IPv4 header .. last pad byte (ICRC excluded). The header must
/// have no options (IHL 5).
pub fn compute_v4(l3: &[u8]) -> Result<u32> {
    match l3.first() {
        None => Err(Error::Truncated),
        Some(b) if b >> 4 != 4 => Err(Error::BadVersion),
        Some(b) if b & 0x0F != 5 => Err(Error::BadIhl),
        Some(_) => compute_with(l3, IPV4_HEADER_LEN),
    }
}

/// ICRC of an IPv6 frame: `l3` = IPv6 header .. last pad byte (ICRC excluded). Extension
/// headers are not supported (the UDP header must follow the fixed header).
pub fn compute_v6(l3: &[u8]) -> Result<u32> {
    match l3.first() {
        None => Err(Error::Truncated),
        Some(b) if b >> 4 != 6 => Err(Error::BadVersion),
        Some(_) => compute_with(l3, IPV6_HEADER_LEN),
    }
}

/// ICRC of an IPv4 or IPv6 frame (chosen by the version nibble).
pub fn compute(l3: &[u8]) -> Result<u32> {
    match l3.first().map(|b| b >> 4) {
        None => Err(Error::Truncated),
        Some(4) => compute_v4(l3),
        Some(6) => compute_v6(l3),
        Some(_) => Err(Error::BadVersion),
    }
}

/// Checks the ICRC of an L3 frame that ends with it. The frame's end is taken from the IP length
/// field (IPv4 total length, IPv6 40 + payload length), so trailing bytes such as Ethernet
/// padding are ignored. `false` for anything malformed.
pub fn verify(l3_with_icrc: &[u8]) -> bool {
    let Ok((_, end)) = IpRepr::parse(l3_with_icrc) else {
        return false;
    };
    let Some(frame) = l3_with_icrc.get(..end) else {
        return false;
    };
    let Some(covered_len) = end.checked_sub(ICRC_LEN) else {
        return false;
    };
    let (covered, trailer) = frame.split_at(covered_len);
    match compute(covered) {
        Ok(crc) => crc == read_icrc(trailer),
        Err(_) => false,
    }
}

/// Reads 4 ICRC wire bytes (least-significant byte first, docs/wire.md §3.4).
pub fn read_icrc(wire: &[u8]) -> u32 {
    wire.iter()
        .take(ICRC_LEN)
        .rev()
        .fold(0u32, |acc, &b| (acc << 8) | u32::from(b))
}

/// ICRC wire bytes for a CRC value (least-significant byte first).
pub const fn icrc_wire_bytes(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// The ICRC a packet will carry once the kernel wraps `transport` (BTH .. last pad byte) in the
/// IP and UDP headers described by `ip` and `udp`, for senders that hand the transport bytes to a
/// UDP socket. Lengths are derived from `transport.len()` + 4 (ICRC).
///
/// For IPv4 the ICRC covers the Identification and DF bit, which the kernel chooses: pass
/// [`IpRepr::v4_socket`] (ID 0, DF set), which is what an unconnected Linux UDP socket with
/// `IP_PMTUDISC_DO` sends (rxe-lab README). TOS/TTL/flow label/hop limit are masked and do not
/// matter.
pub fn compute_for(ip: &IpRepr, udp: &UdpRepr, transport: &[u8]) -> Result<u32> {
    if transport.len() < bth::HEADER_LEN {
        return Err(Error::Truncated);
    }
    let ip_len = ip.header_len();
    let udp_payload = transport.len() + ICRC_LEN;
    let mut hdr = [0u8; IPV6_HEADER_LEN + UDP_HEADER_LEN + bth::HEADER_LEN];
    let hdr_len = ip_len + UDP_HEADER_LEN + bth::HEADER_LEN;
    let hdr = &mut hdr[..hdr_len];
    ip.emit(hdr, UDP_HEADER_LEN + udp_payload)?;
    udp.emit(&mut hdr[ip_len..], udp_payload)?;
    let (bth_bytes, rest) = transport.split_at(bth::HEADER_LEN);
    hdr[ip_len + UDP_HEADER_LEN..].copy_from_slice(bth_bytes);
    Ok(crc_split(hdr, ip_len, rest))
}

/// Exact receive-side check for a datagram whose IP header fields are all known (always the case
/// for IPv6; for IPv4 when the ID and DF are known).
pub fn verify_udp(ip: &IpRepr, udp: &UdpRepr, transport: &[u8], icrc_wire: u32) -> bool {
    compute_for(ip, udp, transport) == Ok(icrc_wire)
}

/// The IPv4 fields a UDP socket does not report, recovered from the ICRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UnseenIpv4 {
    pub ident: u16,
    pub dont_frag: bool,
}

/// Receive-side ICRC check for IPv4 when the Identification and DF bit are not visible (UDP
/// socket). Assumes the reserved flag, MF and fragment offset were 0 and the header had no
/// options; TOS/TTL are masked anyway. Returns the ID and DF that make the ICRC match, or
/// `None` if no value does. See the module docs for the false-accept rate (2^-15).
pub fn verify_udp_v4_unseen_ident(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    udp: &UdpRepr,
    transport: &[u8],
    icrc_wire: u32,
) -> Option<UnseenIpv4> {
    let ip0 = IpRepr::V4 {
        src,
        dst,
        dscp_ecn: 0,
        ttl: 0,
        ident: 0,
        dont_frag: false,
    };
    let base = compute_for(&ip0, udp, transport).ok()?;
    let syndrome = base ^ icrc_wire;
    let vectors = unseen_v4_contributions(transport.len());
    let combo = gf2::solve(&vectors, syndrome)?;
    Some(UnseenIpv4 {
        ident: (combo & 0xFFFF) as u16,
        dont_frag: combo & (1 << 16) != 0,
    })
}

/// The ICRC of the same IPv4 packet (`transport_len` bytes from the BTH to the last pad byte)
/// with Identification `to` where `icrc` was computed for `from`: CRC-32 is affine, so only the
/// contributions of the ID bits that differ change it — no pass over the data. For senders
/// whose kernel numbers the datagrams of one GSO send 1, 2, … after the first.
pub fn v4_with_ident(icrc: u32, transport_len: usize, from: u16, to: u16) -> u32 {
    let diff = from ^ to;
    if diff == 0 {
        return icrc;
    }
    let c = unseen_v4_contributions(transport_len);
    c.iter()
        .take(16)
        .enumerate()
        .filter(|&(bit, _)| diff >> bit & 1 == 1)
        .fold(icrc, |acc, (_, &v)| acc ^ v)
}

/// Linear ICRC contributions of IPv4 ID bits 0..15 (index = bit number) and DF (index 16), for a
/// packet with `transport_len` bytes from the BTH to the last pad byte.
fn unseen_v4_contributions(transport_len: usize) -> [u32; 17] {
    // Covered message: 0xFF×8, IPv4 20, UDP 8, transport. The ID occupies message offsets 12
    // (high byte) and 13 (low byte), the flags byte offset 14.
    let msg_len = (LRH_STANDIN_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN + transport_len) as u64;
    let flags = (LRH_STANDIN_LEN + mask::V4_FLAGS) as u64;
    debug_assert_eq!(flags, (LRH_STANDIN_LEN + mask::V4_IDENT.end) as u64);
    // A set bit b of a byte followed by n bytes contributes x^(39−b)·x^(8n) mod P (the reflected
    // CRC feeds bit 0 of each byte first). So walking back from bit 7 of the flags byte through
    // the ID, each earlier bit is one more factor of x: a chain of 24 register shifts.
    let mut chain = [0u32; 24];
    chain[0] = gf2::mul_mod_p(gf2::x8n_mod_p(msg_len - flags - 1), gf2::X32);
    for p in 1..chain.len() {
        chain[p] = gf2::times_x(chain[p - 1]);
    }
    let mut out = [0u32; 17];
    for (bit, c) in out.iter_mut().enumerate().take(16) {
        // ID bit i: low byte (offset 13) for i < 8, high byte (offset 12) otherwise.
        *c = if bit < 8 {
            chain[15 - bit]
        } else {
            chain[31 - bit]
        };
    }
    out[16] = chain[1]; // DF = bit 6 of the flags byte
    out
}

/// Arithmetic on the CRC-32 polynomial in the reflected representation used by zlib and
/// crc32fast: bit 31 holds the coefficient of x^0, bit 0 that of x^31.
mod gf2 {
    /// The CRC-32 polynomial, reflected.
    const POLY: u32 = 0xEDB8_8320;
    /// x^32 mod P (one shift of x^31, the lowest bit).
    pub(super) const X32: u32 = POLY;

    /// One register shift: multiply by x modulo P.
    pub(super) const fn times_x(v: u32) -> u32 {
        (v >> 1) ^ (POLY & 0u32.wrapping_sub(v & 1))
    }

    /// a·b mod P (branch-free shift-and-add over the 32 coefficients of `a`).
    pub(super) const fn mul_mod_p(a: u32, b: u32) -> u32 {
        let mut p = 0;
        let mut b = b;
        let mut i = 0;
        while i < 32 {
            // Coefficient of x^i in `a` sits at bit 31 − i.
            p ^= b & 0u32.wrapping_sub((a >> (31 - i)) & 1);
            b = times_x(b);
            i += 1;
        }
        p
    }

    /// x^(2^k) mod P for k = 0..32.
    const X2K: [u32; 32] = {
        let mut t = [0u32; 32];
        t[0] = 1 << 30; // x^1
        let mut k = 1;
        while k < 32 {
            t[k] = mul_mod_p(t[k - 1], t[k - 1]);
            k += 1;
        }
        t
    };

    /// `X8N[k][j]` = x^(8·j·16^k) mod P: four hex digits of a byte count cover every IP length,
    /// so shifting over up to 65535 zero bytes costs at most four multiplications.
    const X8N: [[u32; 16]; 4] = {
        let mut t = [[0u32; 16]; 4];
        let mut k = 0;
        while k < 4 {
            t[k][0] = 1 << 31; // x^0
            let step = X2K[3 + 4 * k]; // x^(8·16^k)
            let mut j = 1;
            while j < 16 {
                t[k][j] = mul_mod_p(t[k][j - 1], step);
                j += 1;
            }
            k += 1;
        }
        t
    };

    /// x^(8n) mod P: the effect of feeding n zero bytes through the register.
    pub(super) fn x8n_mod_p(n: u64) -> u32 {
        let mut p = 1u32 << 31; // x^0
        let mut n = n;
        for row in &X8N {
            let digit = (n & 0xF) as usize;
            if digit != 0 {
                p = mul_mod_p(row[digit], p);
            }
            n >>= 4;
        }
        // Beyond 16 bits (not reachable for IP packets): square-and-multiply.
        let mut k = 3 + 16;
        while n != 0 {
            if n & 1 != 0 {
                p = mul_mod_p(X2K[k % 32], p);
            }
            n >>= 1;
            k += 1;
        }
        p
    }

    /// Register contribution of one byte `d` fed into a zero register (no bytes after it).
    #[cfg(test)]
    pub(super) const fn byte_lin(d: u8) -> u32 {
        let mut r = d as u32;
        let mut i = 0;
        while i < 8 {
            r = times_x(r);
            i += 1;
        }
        r
    }

    /// x^8 mod P, for tests.
    #[cfg(test)]
    pub(super) const X8N_STEP: u32 = 1 << (31 - 8);

    /// A combination (bit i = take `vectors[i]`, at most 32 vectors) whose XOR is `target`, or
    /// `None` if `target` is not in their span. Gaussian elimination keyed by leading bit.
    pub(super) fn solve(vectors: &[u32], target: u32) -> Option<u32> {
        // basis[b] = (vector with leading bit b, combination that produced it)
        let mut basis: [Option<(u32, u32)>; 32] = [None; 32];
        for (i, &v0) in vectors.iter().enumerate().take(32) {
            let (mut v, mut combo) = (v0, 1u32 << i);
            while v != 0 {
                let lead = 31 - v.leading_zeros() as usize;
                match basis[lead] {
                    Some((bv, bc)) => {
                        v ^= bv;
                        combo ^= bc;
                    }
                    None => {
                        basis[lead] = Some((v, combo));
                        break;
                    }
                }
            }
        }
        let (mut v, mut combo) = (target, 0u32);
        while v != 0 {
            let lead = 31 - v.leading_zeros() as usize;
            let (bv, bc) = basis[lead]?;
            v ^= bv;
            combo ^= bc;
        }
        Some(combo)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn byte_lin_matches_crc32fast() {
        // Linear part of a single byte followed by n zeros equals crc(d‖0ⁿ) ⊕ crc(0‖0ⁿ).
        for n in [0usize, 1, 7, 100, 1500] {
            for d in [1u8, 0x40, 0x80, 0xA5] {
                let mut a = vec![0u8; n + 1];
                a[0] = d;
                let z = vec![0u8; n + 1];
                let want = crc32fast::hash(&a) ^ crc32fast::hash(&z);
                let got = gf2::mul_mod_p(gf2::x8n_mod_p(n as u64), gf2::byte_lin(d));
                assert_eq!(got, want, "n={n} d={d:#x}");
            }
        }
    }

    #[test]
    fn x8n_matches_repeated_multiplication() {
        let mut want = 1u32 << 31; // x^0
        for n in 0u64..300 {
            assert_eq!(gf2::x8n_mod_p(n), want, "n={n}");
            want = gf2::mul_mod_p(want, gf2::X8N_STEP);
        }
        // x^(8(a+b)) = x^(8a)·x^(8b), including counts past the 16-bit table.
        for n in [255u64, 4095, 65535, 65536, 1 << 20, 123_456_789] {
            assert_eq!(
                gf2::x8n_mod_p(n + 7),
                gf2::mul_mod_p(gf2::x8n_mod_p(n), gf2::x8n_mod_p(7)),
                "n={n}"
            );
        }
    }

    /// Each contribution equals the CRC change from flipping that header bit, computed the slow
    /// way with crc32fast over a real message of the same length.
    #[test]
    fn unseen_contributions_match_bit_flips() {
        for transport_len in [12usize, 16, 20, 1024 + 12, 4096 + 40] {
            let msg_len = 8 + 20 + 8 + transport_len;
            let msg: Vec<u8> = (0..msg_len).map(|i| (i * 31 + 7) as u8).collect();
            let base = crc32fast::hash(&msg);
            let c = unseen_v4_contributions(transport_len);
            for (bit, &want) in c.iter().enumerate().take(16) {
                let mut m = msg.clone();
                let (byte, b) = if bit < 8 { (13, bit) } else { (12, bit - 8) };
                m[byte] ^= 1 << b;
                let got = crc32fast::hash(&m) ^ base;
                assert_eq!(got, want, "len {transport_len} ID bit {bit}");
            }
            let mut m = msg.clone();
            m[14] ^= 0x40;
            assert_eq!(crc32fast::hash(&m) ^ base, c[16], "DF");
            // Linearly independent: rank 17.
            for (i, &ci) in c.iter().enumerate() {
                let others: Vec<u32> = (0..17).filter(|&j| j != i).map(|j| c[j]).collect();
                assert_eq!(gf2::solve(&others, ci), None);
            }
        }
    }

    #[test]
    fn v4_with_ident_is_the_icrc_computed_with_that_id() {
        let (s, d) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
        let udp = UdpRepr::roce(4791);
        for len in [12usize, 100, 4096 + 12] {
            let t: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let with = |ident| {
                let ip = IpRepr::V4 {
                    src: s,
                    dst: d,
                    dscp_ecn: 0,
                    ttl: 64,
                    ident,
                    dont_frag: true,
                };
                compute_for(&ip, &udp, &t).unwrap()
            };
            for (from, to) in [(0u16, 1u16), (0, 63), (5, 0), (0x1234, 0xfedc), (9, 9)] {
                assert_eq!(
                    v4_with_ident(with(from), len, from, to),
                    with(to),
                    "{len} {from}->{to}"
                );
            }
        }
    }

    /// Solving for the hidden Identification and DF weakens the ICRC: in a packet of a given
    /// length some single-bit flips have a CRC syndrome the 17 hidden bits span, so the
    /// flipped packet "verifies" with some Identification — the same one whatever the
    /// payload, since CRC syndromes depend only on where the bits are. The receive path's
    /// plausibility check (crates/nic/src/ident.rs) is what stops them.
    #[test]
    fn some_single_bit_flips_solve_to_a_fixed_identification() {
        let (s, d) = (Ipv4Addr::new(10, 79, 0, 2), Ipv4Addr::new(10, 79, 0, 1));
        let udp = UdpRepr::roce(4791);
        let ip = IpRepr::V4 {
            src: s,
            dst: d,
            dscp_ecn: 0,
            ttl: 64,
            ident: 0,
            dont_frag: true,
        };
        let solutions = |seed: usize| {
            let t: Vec<u8> = (0..12 + 1024).map(|i| (i * 31 + seed) as u8).collect();
            let crc = read_icrc(&icrc_wire_bytes(compute_for(&ip, &udp, &t).unwrap()));
            let mut found = Vec::new();
            for bit in 0..t.len() * 8 {
                let mut f = t.clone();
                f[bit / 8] ^= 1 << (bit % 8);
                // BTH byte 4 (bits 32..40) is masked out of the ICRC (§3.3): those verify
                // with the real Identification, as they should.
                match verify_udp_v4_unseen_ident(s, d, &udp, &f, crc) {
                    Some(u) if (u.ident, u.dont_frag) != (0, true) => {
                        found.push((bit, u.ident, u.dont_frag))
                    }
                    Some(_) => assert!((32..40).contains(&bit), "bit {bit}"),
                    None => {}
                }
            }
            found
        };
        let a = solutions(1);
        // One place in this layout: payload byte 161 bit 3, solving to Identification 14262
        // without DF. A link that flips one random bit in 1 % of packets hits it once in
        // about 840,000 such packets (8,320 bits each).
        assert_eq!(a, [(1387, 14262, false)]);
        assert_eq!(
            a,
            solutions(77),
            "where and to what depends on the layout only"
        );
    }

    #[test]
    fn solve_finds_combination_or_rejects() {
        let v = [0b0001u32, 0b0110, 0b1100];
        assert_eq!(gf2::solve(&v, 0b1010), Some(0b110));
        assert_eq!(gf2::solve(&v, 0), Some(0));
        assert_eq!(gf2::solve(&v, 0b1_0000), None);
        // Dependent vectors still give some valid combination.
        let v = [3u32, 5, 6];
        let c = gf2::solve(&v, 6).expect("in span");
        let x = v
            .iter()
            .enumerate()
            .filter(|(i, _)| c & (1 << i) != 0)
            .fold(0, |a, (_, &b)| a ^ b);
        assert_eq!(x, 6);
    }

    #[test]
    fn residue_constant() {
        // docs/wire.md §3.3 (3): CRC over covered bytes ‖ ICRC wire bytes is constant.
        let msg = b"\xff\xff\xff\xff\xff\xff\xff\xffanything at all";
        let crc = crc32fast::hash(msg);
        let mut all = msg.to_vec();
        all.extend_from_slice(&icrc_wire_bytes(crc));
        assert_eq!(crc32fast::hash(&all), RESIDUE);
    }

    #[test]
    fn compute_rejects_short_and_bad_version() {
        let a = unhex(
            "45020034000140004011b762c0a80101c0a80102 c13212b700200000 0430ffff0000001280123456",
        );
        assert_eq!(compute(&a[..39]), Err(Error::Truncated));
        assert!(compute(&a).is_ok());
        let mut b = a.clone();
        b[0] = 0x46;
        assert_eq!(compute_v4(&b), Err(Error::BadIhl));
        b[0] = 0x55;
        assert_eq!(compute(&b), Err(Error::BadVersion));
        assert_eq!(compute_v6(&a), Err(Error::BadVersion));
        assert_eq!(compute(&[]), Err(Error::Truncated));
        assert!(!verify(&[]));
        assert!(!verify(&a[..30]));
    }
}
