//! A whole RoCEv2 transport packet: BTH, extension headers, payload and pad — everything a UDP
//! socket delivers except the trailing 4-byte ICRC.
//!
//! Which extension headers are present is decided by the opcode table ([`crate::opcode`]) only.
//! Parsing validates TVer, the opcode, the length against the opcode's header length, and the
//! pad count; it never panics. Emitting a `Repr` whose `Option`s disagree with its opcode is an
//! error ([`Error::HeaderMismatch`]), never a panic.

use crate::error::{Error, Result};
use crate::opcode::{HeaderSet, OpcodeInfo, CNP_RESERVED_LEN};
use crate::XrcEthRepr;
use crate::{aeth, atomic_ack_eth, atomic_eth, bth, deth, icrc, ieth, immdt, reth, xrceth};
use crate::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDt, RethRepr,
};

/// Everything from the BTH to the last pad byte. The ICRC is not part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RocePacketRepr<'a> {
    pub bth: BthRepr,
    /// XRC requests only (IBTA XRC annex): the responder's XRC SRQ number.
    pub xrceth: Option<XrcEthRepr>,
    pub deth: Option<DethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack: Option<AtomicAckEthRepr>,
    pub immdt: Option<ImmDt>,
    pub ieth: Option<IethRepr>,
    pub payload: &'a [u8],
}

/// The pad count that brings `payload_len` to a 4-byte boundary: (−len) mod 4 (docs/wire.md §1.6).
#[inline]
pub const fn pad_for(payload_len: usize) -> u8 {
    (payload_len.wrapping_neg() & 3) as u8
}

/// `bytes[off..off + len]`, or `Truncated`.
#[inline]
fn slice(bytes: &[u8], off: usize, len: usize) -> Result<&[u8]> {
    bytes
        .get(off..off.saturating_add(len))
        .ok_or(Error::Truncated)
}

#[inline]
fn slice_mut(bytes: &mut [u8], off: usize, len: usize) -> Result<&mut [u8]> {
    bytes
        .get_mut(off..off.saturating_add(len))
        .ok_or(Error::BufferTooSmall)
}

impl<'a> RocePacketRepr<'a> {
    /// A packet with only a BTH and payload; add extension headers with struct update syntax.
    pub const fn new(bth: BthRepr, payload: &'a [u8]) -> RocePacketRepr<'a> {
        RocePacketRepr {
            bth,
            xrceth: None,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            immdt: None,
            ieth: None,
            payload,
        }
    }

    /// Parses BTH through pad (`bytes` must not include the ICRC; see [`split_icrc`]).
    ///
    /// Checks, in order: BTH present; TVer = 0 ([`Error::BadTver`]); opcode in the table
    /// ([`Error::UnknownOpcode`]); all of the opcode's headers present ([`Error::Truncated`]);
    /// PadCnt ≤ bytes after the headers and payload+pad a multiple of 4 ([`Error::BadPad`]);
    /// no payload and no pad on opcodes without payload ([`Error::BadLength`] / `BadPad`).
    /// Pad byte values, the DETH reserved byte and the CNP reserved block are not checked
    /// (receivers ignore reserved fields); re-emitting writes them as zero.
    pub fn parse(bytes: &'a [u8]) -> Result<RocePacketRepr<'a>> {
        let bth = BthRepr::parse(&bth::Packet::new_checked(bytes)?)?;
        if bth.tver != 0 {
            return Err(Error::BadTver);
        }
        let info = bth.opcode.info().ok_or(Error::UnknownOpcode)?;
        if bytes.len() < info.header_len {
            return Err(Error::Truncated);
        }
        let h = info.headers;
        let at = |off: Option<usize>, len: usize| -> Result<Option<&'a [u8]>> {
            match off {
                Some(o) => slice(bytes, o, len).map(Some),
                None => Ok(None),
            }
        };
        let xrceth = match at(h.xrceth_offset(), xrceth::HEADER_LEN)? {
            Some(b) => Some(XrcEthRepr::parse(&xrceth::Packet::new_checked(b)?)?),
            None => None,
        };
        let deth = match at(h.deth_offset(), deth::HEADER_LEN)? {
            Some(b) => Some(DethRepr::parse(&deth::Packet::new_checked(b)?)?),
            None => None,
        };
        let reth = match at(h.reth_offset(), reth::HEADER_LEN)? {
            Some(b) => Some(RethRepr::parse(&reth::Packet::new_checked(b)?)?),
            None => None,
        };
        let atomic_eth = match at(h.atomic_eth_offset(), atomic_eth::HEADER_LEN)? {
            Some(b) => Some(AtomicEthRepr::parse(&atomic_eth::Packet::new_checked(b)?)?),
            None => None,
        };
        let aeth = match at(h.aeth_offset(), aeth::HEADER_LEN)? {
            Some(b) => Some(AethRepr::parse(&aeth::Packet::new_checked(b)?)?),
            None => None,
        };
        let atomic_ack = match at(h.atomic_ack_eth_offset(), atomic_ack_eth::HEADER_LEN)? {
            Some(b) => Some(AtomicAckEthRepr::parse(
                &atomic_ack_eth::Packet::new_checked(b)?,
            )?),
            None => None,
        };
        let immdt = match at(h.immdt_offset(), immdt::HEADER_LEN)? {
            Some(b) => Some(ImmDt::parse(&immdt::Packet::new_checked(b)?)?),
            None => None,
        };
        let ieth = match at(h.ieth_offset(), ieth::HEADER_LEN)? {
            Some(b) => Some(IethRepr::parse(&ieth::Packet::new_checked(b)?)?),
            None => None,
        };

        let rest = bytes.len() - info.header_len;
        let pad = usize::from(bth.pad_count);
        if !info.has_payload {
            if pad != 0 {
                return Err(Error::BadPad);
            }
            if rest != 0 {
                return Err(Error::BadLength);
            }
        }
        if pad > rest || rest % 4 != 0 {
            return Err(Error::BadPad);
        }
        let payload = slice(bytes, info.header_len, rest - pad)?;
        Ok(RocePacketRepr {
            bth,
            xrceth,
            deth,
            reth,
            atomic_eth,
            aeth,
            atomic_ack,
            immdt,
            ieth,
            payload,
        })
    }

    /// The headers actually present in this `Repr`'s `Option`s.
    pub fn present_headers(&self) -> HeaderSet {
        let mut h = HeaderSet::NONE;
        let pairs = [
            (self.xrceth.is_some(), HeaderSet::XRCETH),
            (self.deth.is_some(), HeaderSet::DETH),
            (self.reth.is_some(), HeaderSet::RETH),
            (self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH),
            (self.aeth.is_some(), HeaderSet::AETH),
            (self.atomic_ack.is_some(), HeaderSet::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), HeaderSet::IMMDT),
            (self.ieth.is_some(), HeaderSet::IETH),
        ];
        for (present, set) in pairs {
            if present {
                h = h.with(set);
            }
        }
        h
    }

    /// Checks the `Repr` against the opcode table: opcode known, `Option`s exactly the opcode's
    /// headers, no payload on opcodes without one. Returns the table entry.
    pub fn validate(&self) -> Result<&'static OpcodeInfo> {
        let info = self.bth.opcode.info().ok_or(Error::UnknownOpcode)?;
        // The CNP reserved block has no `Option`; it comes from the opcode alone.
        let want = HeaderSet::from_bits_without_cnp(info.headers);
        if self.present_headers() != want {
            return Err(Error::HeaderMismatch);
        }
        if !info.has_payload && !self.payload.is_empty() {
            return Err(Error::BadLength);
        }
        Ok(info)
    }

    /// PadCnt this packet is emitted with: (−payload_len) mod 4.
    pub const fn pad_count(&self) -> u8 {
        pad_for(self.payload.len())
    }

    /// BTH + extension headers, from the opcode table (or from the `Option`s when the opcode is
    /// unknown, which [`emit`](Self::emit) rejects).
    pub fn header_len(&self) -> usize {
        match self.bth.opcode.info() {
            Some(info) => info.header_len,
            None => self.present_headers().payload_offset(),
        }
    }

    /// Bytes from the BTH to the last pad byte (the ICRC excluded).
    pub fn transport_len(&self) -> usize {
        self.header_len() + self.payload.len() + usize::from(self.pad_count())
    }

    /// Payload bytes (pad excluded).
    pub const fn payload_len(&self) -> usize {
        self.payload.len()
    }

    /// Bytes [`emit`](Self::emit) writes; same as [`transport_len`](Self::transport_len).
    pub fn buffer_len(&self) -> usize {
        self.transport_len()
    }

    /// Writes BTH through pad into the front of `buf` and returns the bytes written
    /// ([`transport_len`](Self::transport_len)).
    ///
    /// The BTH PadCnt is always written as [`pad_for`]`(payload.len())`, whatever
    /// `bth.pad_count` says; pad bytes, the DETH reserved byte and the CNP reserved block are
    /// zero. All other BTH bits are written as given (including TVer, so test code can build
    /// packets a receiver must drop).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let info = self.validate()?;
        let h = info.headers;
        let pad = self.pad_count();
        let total = info.header_len + self.payload.len() + usize::from(pad);
        let out = buf.get_mut(..total).ok_or(Error::BufferTooSmall)?;

        let mut bth = self.bth;
        bth.pad_count = pad;
        bth.emit(&mut bth::Packet::new_checked(&mut out[..])?);

        if let (Some(r), Some(o)) = (&self.xrceth, h.xrceth_offset()) {
            r.emit(&mut xrceth::Packet::new_checked(slice_mut(
                out,
                o,
                xrceth::HEADER_LEN,
            )?)?);
        }
        if let (Some(r), Some(o)) = (&self.deth, h.deth_offset()) {
            r.emit(&mut deth::Packet::new_checked(slice_mut(
                out,
                o,
                deth::HEADER_LEN,
            )?)?);
        }
        if let (Some(r), Some(o)) = (&self.reth, h.reth_offset()) {
            r.emit(&mut reth::Packet::new_checked(slice_mut(
                out,
                o,
                reth::HEADER_LEN,
            )?)?);
        }
        if let (Some(r), Some(o)) = (&self.atomic_eth, h.atomic_eth_offset()) {
            let b = slice_mut(out, o, atomic_eth::HEADER_LEN)?;
            r.emit(&mut atomic_eth::Packet::new_checked(b)?);
        }
        if let (Some(r), Some(o)) = (&self.aeth, h.aeth_offset()) {
            r.emit(&mut aeth::Packet::new_checked(slice_mut(
                out,
                o,
                aeth::HEADER_LEN,
            )?)?);
        }
        if let (Some(r), Some(o)) = (&self.atomic_ack, h.atomic_ack_eth_offset()) {
            let b = slice_mut(out, o, atomic_ack_eth::HEADER_LEN)?;
            r.emit(&mut atomic_ack_eth::Packet::new_checked(b)?);
        }
        if let (Some(r), Some(o)) = (&self.immdt, h.immdt_offset()) {
            r.emit(&mut immdt::Packet::new_checked(slice_mut(
                out,
                o,
                immdt::HEADER_LEN,
            )?)?);
        }
        if let (Some(r), Some(o)) = (&self.ieth, h.ieth_offset()) {
            r.emit(&mut ieth::Packet::new_checked(slice_mut(
                out,
                o,
                ieth::HEADER_LEN,
            )?)?);
        }
        if let Some(o) = h.cnp_reserved_offset() {
            slice_mut(out, o, CNP_RESERVED_LEN)?.fill(0);
        }
        let payload_end = info.header_len + self.payload.len();
        slice_mut(out, info.header_len, self.payload.len())?.copy_from_slice(self.payload);
        slice_mut(out, payload_end, usize::from(pad))?.fill(0);
        Ok(total)
    }
}

impl HeaderSet {
    /// `h` without the CNP reserved block (which has no `Option` in [`RocePacketRepr`]).
    const fn from_bits_without_cnp(h: HeaderSet) -> HeaderSet {
        let mut out = HeaderSet::NONE;
        let all = [
            HeaderSet::XRCETH,
            HeaderSet::DETH,
            HeaderSet::RETH,
            HeaderSet::ATOMIC_ETH,
            HeaderSet::AETH,
            HeaderSet::ATOMIC_ACK_ETH,
            HeaderSet::IMMDT,
            HeaderSet::IETH,
        ];
        let mut i = 0;
        while i < all.len() {
            if h.contains(all[i]) {
                out = out.with(all[i]);
            }
            i += 1;
        }
        out
    }
}

/// Splits what a UDP socket delivers for RoCEv2 (BTH .. pad, ICRC) into the transport bytes and
/// the ICRC value. The ICRC travels least-significant byte first (docs/wire.md §3.4).
pub fn split_icrc(datagram: &[u8]) -> Result<(&[u8], u32)> {
    let n = datagram.len();
    if n < bth::HEADER_LEN + icrc::ICRC_LEN {
        return Err(Error::Truncated);
    }
    let (transport, crc) = datagram.split_at(n - icrc::ICRC_LEN);
    // Little-endian: reverse the bytes, then read big-endian.
    let value = crc.iter().rev().fold(0u64, |a, &b| (a << 8) | u64::from(b));
    Ok((transport, value as u32))
}

/// Parses a UDP datagram payload (BTH .. ICRC, no IP header) as the NIC's sockets receive it.
/// Returns the packet and the ICRC value from the wire; verify it with
/// [`icrc::verify_udp`] or [`icrc::verify_udp_v4_unseen_ident`].
pub fn parse_datagram(datagram: &[u8]) -> Result<(RocePacketRepr<'_>, u32)> {
    let (transport, crc) = split_icrc(datagram)?;
    Ok((RocePacketRepr::parse(transport)?, crc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Msn, Opcode, Psn, Qkey, Qpn, Rkey, Syndrome};

    fn bth(op: Opcode) -> BthRepr {
        let mut b = BthRepr::new(op, Qpn::new(0x12), Psn::new(0x123456));
        b.ack_req = true;
        b
    }

    #[test]
    fn send_only_hello_matches_example_a() {
        let p = RocePacketRepr::new(bth(Opcode::RC_SEND_ONLY), b"hello");
        let mut buf = [0u8; 64];
        let n = p.emit(&mut buf).expect("emit");
        assert_eq!(n, 20);
        assert_eq!(
            &buf[..n],
            &[
                0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x12, 0x34, 0x56, b'h', b'e',
                b'l', b'l', b'o', 0, 0, 0
            ]
        );
        let back = RocePacketRepr::parse(&buf[..n]).expect("parse");
        assert_eq!(back.payload, b"hello");
        assert_eq!(back.bth.pad_count, 3);
        assert_eq!(back.transport_len(), 20);
    }

    #[test]
    fn write_only_with_imm_layout() {
        let reth = RethRepr {
            va: 0x1000,
            rkey: Rkey(0xAABBCCDD),
            len: 4,
        };
        let p = RocePacketRepr {
            reth: Some(reth),
            immdt: Some(ImmDt(0x01020304)),
            ..RocePacketRepr::new(
                bth(Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE),
                &[9, 9, 9, 9],
            )
        };
        let mut buf = [0u8; 64];
        let n = p.emit(&mut buf).expect("emit");
        assert_eq!(n, 12 + 16 + 4 + 4);
        assert_eq!(&buf[12..20], &[0, 0, 0, 0, 0, 0, 0x10, 0]);
        assert_eq!(&buf[20..24], &[0xAA, 0xBB, 0xCC, 0xDD]);
        assert_eq!(&buf[28..32], &[1, 2, 3, 4]);
        assert_eq!(&buf[32..36], &[9, 9, 9, 9]);
        assert_eq!(RocePacketRepr::parse(&buf[..n]).expect("parse"), {
            let mut q = p;
            q.bth.pad_count = 0;
            q
        });
    }

    #[test]
    fn atomic_ack_and_ud_and_cnp() {
        let p = RocePacketRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome::ACK_UNLIMITED,
                msn: Msn::new(3),
            }),
            atomic_ack: Some(AtomicAckEthRepr { orig: 42 }),
            ..RocePacketRepr::new(bth(Opcode::RC_ATOMIC_ACKNOWLEDGE), &[])
        };
        let mut buf = [0u8; 64];
        assert_eq!(p.emit(&mut buf), Ok(24));
        assert_eq!(&buf[12..16], &[0x1f, 0, 0, 3]);
        assert_eq!(&buf[16..24], &[0, 0, 0, 0, 0, 0, 0, 42]);
        assert_eq!(RocePacketRepr::parse(&buf[..24]), Ok(p));

        let ud = RocePacketRepr {
            deth: Some(DethRepr {
                qkey: Qkey(0x11111111),
                src_qp: Qpn::new(0x22),
            }),
            immdt: Some(ImmDt(7)),
            ..RocePacketRepr::new(bth(Opcode::UD_SEND_ONLY_WITH_IMMEDIATE), b"abcd")
        };
        assert_eq!(ud.emit(&mut buf), Ok(28));
        assert_eq!(&buf[12..20], &[0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x22]);
        assert_eq!(&buf[20..24], &[0, 0, 0, 7]);
        assert_eq!(RocePacketRepr::parse(&buf[..28]), Ok(ud));

        let mut cnp_bth = BthRepr::new(Opcode::CNP, Qpn::new(0x118), Psn::new(0));
        cnp_bth.becn = true;
        let cnp = RocePacketRepr::new(cnp_bth, &[]);
        let mut buf = [0xAAu8; 64];
        assert_eq!(cnp.emit(&mut buf), Ok(28));
        assert!(buf[12..28].iter().all(|&b| b == 0));
        assert_eq!(RocePacketRepr::parse(&buf[..28]), Ok(cnp));
    }

    #[test]
    fn emit_rejects_mismatched_headers() {
        let mut buf = [0u8; 128];
        // RETH missing on WRITE_FIRST.
        let p = RocePacketRepr::new(bth(Opcode::RC_RDMA_WRITE_FIRST), &[1; 8]);
        assert_eq!(p.emit(&mut buf), Err(Error::HeaderMismatch));
        // Extra AETH on a SEND.
        let p = RocePacketRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome(0),
                msn: Msn::new(0),
            }),
            ..RocePacketRepr::new(bth(Opcode::RC_SEND_ONLY), &[])
        };
        assert_eq!(p.emit(&mut buf), Err(Error::HeaderMismatch));
        // Payload on an opcode without payload.
        let p = RocePacketRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome(0),
                msn: Msn::new(0),
            }),
            ..RocePacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE), &[1])
        };
        assert_eq!(p.emit(&mut buf), Err(Error::BadLength));
        // Unknown opcode.
        let p = RocePacketRepr::new(bth(Opcode(0x15)), &[]);
        assert_eq!(p.emit(&mut buf), Err(Error::UnknownOpcode));
        // Buffer too small.
        let p = RocePacketRepr::new(bth(Opcode::RC_SEND_ONLY), &[0; 5]);
        assert_eq!(p.emit(&mut buf[..19]), Err(Error::BufferTooSmall));
        assert_eq!(p.emit(&mut buf[..20]), Ok(20));
    }

    #[test]
    fn parse_rejects_malformed() {
        let mut buf = [0u8; 64];
        let p = RocePacketRepr::new(bth(Opcode::RC_SEND_ONLY), b"hello");
        let n = p.emit(&mut buf).expect("emit");
        let good = buf;
        assert!(RocePacketRepr::parse(&good[..n]).is_ok());
        assert_eq!(RocePacketRepr::parse(&good[..11]), Err(Error::Truncated));
        // TVer 1.
        let mut b = good;
        b[1] |= 0x01;
        assert_eq!(RocePacketRepr::parse(&b[..n]), Err(Error::BadTver));
        // Unknown opcode.
        let mut b = good;
        b[0] = 0x15;
        assert_eq!(RocePacketRepr::parse(&b[..n]), Err(Error::UnknownOpcode));
        // Pad 3 but only 2 trailing bytes... and odd total length.
        assert_eq!(RocePacketRepr::parse(&good[..n - 1]), Err(Error::BadPad));
        // Another pad count on the same aligned length only moves the payload boundary.
        let mut b = good;
        b[1] = (b[1] & !0x30) | 0x10;
        assert_eq!(
            RocePacketRepr::parse(&b[..n]).map(|p| p.payload.len()),
            Ok(7)
        );
        // A length that is not a multiple of 4 is never valid.
        let mut b = good;
        b[1] &= !0x30;
        assert_eq!(RocePacketRepr::parse(&b[..n - 1]), Err(Error::BadPad));
        // Opcode needing RETH, buffer too short for it.
        let mut b = good;
        b[0] = Opcode::RC_RDMA_WRITE_ONLY.0;
        assert_eq!(RocePacketRepr::parse(&b[..n]), Err(Error::Truncated));
        // ACK with trailing bytes / with pad.
        let ack = RocePacketRepr {
            aeth: Some(AethRepr {
                syndrome: Syndrome(0x1f),
                msn: Msn::new(1),
            }),
            ..RocePacketRepr::new(bth(Opcode::RC_ACKNOWLEDGE), &[])
        };
        let mut b = [0u8; 64];
        let n = ack.emit(&mut b).expect("emit");
        assert_eq!(RocePacketRepr::parse(&b[..n + 4]), Err(Error::BadLength));
        b[1] |= 0x10;
        assert_eq!(RocePacketRepr::parse(&b[..n]), Err(Error::BadPad));
    }

    #[test]
    fn datagram_split() {
        let mut d = vec![0u8; 12];
        d[0] = Opcode::RC_RDMA_READ_RESPONSE_MIDDLE.0;
        d.extend_from_slice(&[0x82, 0xfd, 0x00, 0x2a]);
        let (p, crc) = parse_datagram(&d).expect("parse");
        assert_eq!(crc, 0x2A00_FD82);
        assert_eq!(p.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_MIDDLE);
        assert_eq!(split_icrc(&d[..15]).err(), Some(Error::Truncated));
    }

    #[test]
    fn pad_for_values() {
        assert_eq!(
            [pad_for(0), pad_for(1), pad_for(2), pad_for(3), pad_for(4)],
            [0, 3, 2, 1, 0]
        );
    }
}
