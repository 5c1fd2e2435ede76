//! Entry point for the `wire_parse` fuzz target (and its stable property test).
//!
//! [`parse_any`] runs every parser in this crate on the same bytes and, whenever one succeeds,
//! checks that re-emitting the parsed value reproduces the input. A mismatch panics: that is a
//! finding. Fields that parsers deliberately ignore and emitters write as zero (pad bytes, the
//! DETH reserved byte, the CNP reserved block) are compared after zeroing them in the input; the
//! IPv4 header checksum and the ICRC, which builders compute, are compared through the
//! `ip_checksum_ok` / `icrc_ok` flags instead.

use crate::opcode::CNP_RESERVED_LEN;
use crate::{
    aeth, atomic_ack_eth, atomic_eth, bth, deth, frame, icrc, ieth, immdt, ip, reth, roce,
};
use crate::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDt, RethRepr,
};

/// Runs every parser on `data`; panics if a successful parse does not re-emit the input.
pub fn parse_any(data: &[u8]) {
    headers(data);
    transport(data);
    datagram(data);
    l3(data);
    cm_mad(data);
}

/// Entry point of the `cm_mad` fuzz target: parses `data` as a CM MAD (and its first 36
/// private-data bytes as rdma_cm's header); a successful parse must re-emit to bytes that parse
/// to the same value, and the emitted MAD must equal the input wherever the input's reserved
/// bits were already zero (checked by emitting twice: emit(parse(emit)) == emit).
pub fn cm_mad(data: &[u8]) {
    use crate::cm::{CmMadRepr, CmMsg, CmaHdr};
    use crate::mad::MAD_LEN;
    let Ok(m) = CmMadRepr::parse(data) else {
        return;
    };
    let mut out = [0u8; MAD_LEN];
    m.emit(&mut out).expect("emit into a whole MAD");
    let again = CmMadRepr::parse(&out).expect("re-parse of an emitted MAD");
    assert_eq!(again, m, "CM MAD parse/emit round trip differs");
    let mut out2 = [0u8; MAD_LEN];
    again.emit(&mut out2).expect("emit");
    assert_eq!(out, out2, "CM MAD emit is not canonical");
    let pd: &[u8] = match &m.msg {
        CmMsg::Req(r) => &r.private_data,
        CmMsg::SidrReq(r) => &r.private_data,
        _ => return,
    };
    if let Ok(h) = CmaHdr::parse(pd) {
        let mut b = [0u8; crate::cm::CMA_HDR_LEN];
        h.emit(&mut b)
            .expect("a parsed cma_hdr has one address family");
        assert_eq!(CmaHdr::parse(&b).expect("re-parse cma_hdr"), h);
    }
}

macro_rules! header_roundtrip {
    ($data:expr, $module:ident, $repr:ident) => {
        if let Ok(p) = $module::Packet::new_checked($data) {
            let r = $repr::parse(&p).expect(concat!(stringify!($repr), " parse of checked packet"));
            let mut out = [0u8; $module::HEADER_LEN];
            r.emit(&mut $module::Packet::new_unchecked(&mut out[..]));
            (out, r.buffer_len())
        } else {
            assert!($data.len() < $module::HEADER_LEN);
            ([0u8; $module::HEADER_LEN], 0)
        }
    };
}

fn headers(data: &[u8]) {
    let check = |out: &[u8], len: usize, canon: &dyn Fn(&mut [u8])| {
        if len > 0 {
            let mut want = data[..len].to_vec();
            canon(&mut want);
            assert_eq!(out, &want[..], "header re-emit differs");
        }
    };
    let none = |_: &mut [u8]| {};
    let (o, n) = header_roundtrip!(data, bth, BthRepr);
    check(&o, n, &none);
    let (o, n) = header_roundtrip!(data, deth, DethRepr);
    check(&o, n, &|b: &mut [u8]| b[deth::RESERVED_OFFSET] = 0);
    let (o, n) = header_roundtrip!(data, reth, RethRepr);
    check(&o, n, &none);
    let (o, n) = header_roundtrip!(data, atomic_eth, AtomicEthRepr);
    check(&o, n, &none);
    let (o, n) = header_roundtrip!(data, aeth, AethRepr);
    check(&o, n, &none);
    let (o, n) = header_roundtrip!(data, atomic_ack_eth, AtomicAckEthRepr);
    check(&o, n, &none);
    let (o, n) = header_roundtrip!(data, immdt, ImmDt);
    check(&o, n, &none);
    let (o, n) = header_roundtrip!(data, ieth, IethRepr);
    check(&o, n, &none);
}

/// Zeroes, in `transport` (BTH .. pad), the bytes the parser ignores and the emitter zeroes.
/// Returns whether any of them was nonzero.
fn canonicalize_transport(transport: &mut [u8], pkt: &roce::RocePacketRepr<'_>) -> bool {
    let mut changed = false;
    let mut zero = |b: &mut [u8]| {
        if b.iter().any(|&x| x != 0) {
            changed = true;
            b.fill(0);
        }
    };
    if let Some(info) = pkt.bth.opcode.info() {
        let h = info.headers;
        if let Some(o) = h.xrceth_offset() {
            // The XRCETH's reserved byte (the SRQ number is its low 24 bits).
            zero(&mut transport[o..o + 1]);
        }
        if let Some(o) = h.deth_offset() {
            let at = o + deth::RESERVED_OFFSET;
            zero(&mut transport[at..at + 1]);
        }
        if let Some(o) = h.cnp_reserved_offset() {
            zero(&mut transport[o..o + CNP_RESERVED_LEN]);
        }
        let pad_start = info.header_len + pkt.payload.len();
        zero(&mut transport[pad_start..]);
    }
    changed
}

fn transport(data: &[u8]) {
    let Ok(pkt) = roce::RocePacketRepr::parse(data) else {
        return;
    };
    assert_eq!(pkt.transport_len(), data.len(), "transport_len");
    let mut out = vec![0u8; data.len()];
    let n = pkt.emit(&mut out).expect("emit of a parsed packet");
    assert_eq!(n, data.len());
    let mut want = data.to_vec();
    canonicalize_transport(&mut want, &pkt);
    assert_eq!(out, want, "transport re-emit differs");
    assert_eq!(
        roce::RocePacketRepr::parse(&out),
        Ok(pkt),
        "re-parse differs"
    );
}

fn datagram(data: &[u8]) {
    let Ok((pkt, crc)) = roce::parse_datagram(data) else {
        return;
    };
    assert_eq!(pkt.transport_len() + icrc::ICRC_LEN, data.len());
    assert_eq!(icrc::icrc_wire_bytes(crc)[..], data[data.len() - 4..]);
    // The unseen-ID check must never panic and, when it succeeds, the recovered fields must
    // make the exact check pass.
    let transport = &data[..data.len() - icrc::ICRC_LEN];
    let (src, dst) = (
        std::net::Ipv4Addr::new(10, 0, 0, 1),
        std::net::Ipv4Addr::new(10, 0, 0, 2),
    );
    let udp = ip::UdpRepr::roce(0xC000);
    if let Some(found) = icrc::verify_udp_v4_unseen_ident(src, dst, &udp, transport, crc) {
        let ipr = ip::IpRepr::V4 {
            src,
            dst,
            dscp_ecn: 0,
            ttl: 64,
            ident: found.ident,
            dont_frag: found.dont_frag,
        };
        assert!(
            icrc::verify_udp(&ipr, &udp, transport, crc),
            "recovered ID does not verify"
        );
    }
}

fn l3(data: &[u8]) {
    let verified = icrc::verify(data);
    let Ok(f) = frame::parse_l3(data) else {
        return;
    };
    assert_eq!(verified, f.icrc_ok, "icrc::verify disagrees with parse_l3");
    let len = f.l3_len();
    let mut out = vec![0u8; len];
    let n = frame::build_l3(&f.ip, &f.udp, &f.packet, &mut out).expect("build of a parsed frame");
    assert_eq!(n, len);
    let input = &data[..len];
    let t0 = f.ip.header_len() + ip::UDP_HEADER_LEN;
    let icrc_at = len - icrc::ICRC_LEN;
    let mut want = input.to_vec();
    let changed = canonicalize_transport(&mut want[t0..icrc_at], &f.packet);
    // Builders compute the IPv4 checksum and the ICRC; compare those through the flags.
    if let ip::IpRepr::V4 { .. } = f.ip {
        assert_eq!(
            f.ip_checksum_ok,
            out[10..12] == input[10..12],
            "ip checksum flag"
        );
        want[10..12].copy_from_slice(&out[10..12]);
    }
    if !changed {
        assert_eq!(f.icrc_ok, out[icrc_at..] == input[icrc_at..], "icrc flag");
    }
    want[icrc_at..].copy_from_slice(&out[icrc_at..]);
    assert_eq!(out, want, "frame re-emit differs");
    let again = frame::parse_l3(&out).expect("re-parse of a built frame");
    assert!(again.icrc_ok && again.ip_checksum_ok);
    assert_eq!(again.packet, f.packet);
    assert_eq!((again.ip, again.udp), (f.ip, f.udp));
    // For IPv4 with a good ICRC, the UDP-socket check recovers the real ID and DF.
    if let (
        ip::IpRepr::V4 {
            src,
            dst,
            ident,
            dont_frag,
            ..
        },
        true,
    ) = (f.ip, f.icrc_ok)
    {
        let transport = &data[t0..icrc_at];
        let got = icrc::verify_udp_v4_unseen_ident(src, dst, &f.udp, transport, f.icrc_wire);
        assert_eq!(
            got,
            Some(icrc::UnseenIpv4 { ident, dont_frag }),
            "unseen ID recovery"
        );
    }
}
