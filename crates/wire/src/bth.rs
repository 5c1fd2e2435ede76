//! Base Transport Header: 12 bytes, big-endian (docs/wire.md §1.4).
//!
//! ```text
//! byte 0   OpCode
//! byte 1   SE | M | PadCnt(2) | TVer(4)
//! 2..4     P_Key
//! byte 4   F | B | resv6          (whole byte masked out of the ICRC, "resv8a")
//! 5..8     DestQP (24)
//! byte 8   A | resv7
//! 9..12    PSN (24)
//! ```
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic. The
//! [`BthRepr`] keeps every bit, reserved ones included, so a parsed header re-emits byte for byte.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::num::{Psn, Qpn};
use crate::opcode::Opcode;
use crate::Result;

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;

/// Default partition key, full member (docs/wire.md §0).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

mod field {
    use core::ops::Range;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: Range<usize> = 2..4;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: Range<usize> = 5..8;
    pub const ACK: usize = 8;
    pub const PSN: Range<usize> = 9..12;
}

fixed_header_view!("BTH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn opcode(&self) -> Opcode {
        Opcode(self.data()[field::OPCODE])
    }
    pub fn solicited(&self) -> bool {
        self.data()[field::FLAGS] & 0x80 != 0
    }
    pub fn migreq(&self) -> bool {
        self.data()[field::FLAGS] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.data()[field::FLAGS] >> 4) & 0x3
    }
    pub fn tver(&self) -> u8 {
        self.data()[field::FLAGS] & 0x0F
    }
    pub fn pkey(&self) -> u16 {
        be(&self.data()[field::PKEY]) as u16
    }
    pub fn fecn(&self) -> bool {
        self.data()[field::RESV8A] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.data()[field::RESV8A] & 0x40 != 0
    }
    pub fn resv6(&self) -> u8 {
        self.data()[field::RESV8A] & 0x3F
    }
    pub fn dest_qp(&self) -> Qpn {
        Qpn::new(be(&self.data()[field::DEST_QP]) as u32)
    }
    pub fn ack_req(&self) -> bool {
        self.data()[field::ACK] & 0x80 != 0
    }
    pub fn resv7(&self) -> u8 {
        self.data()[field::ACK] & 0x7F
    }
    pub fn psn(&self) -> Psn {
        Psn::new(be(&self.data()[field::PSN]) as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_opcode(&mut self, v: Opcode) {
        self.data_mut()[field::OPCODE] = v.0;
    }
    /// Sets SE, M, PadCnt (low 2 bits of `pad_count`) and TVer (low 4 bits of `tver`).
    pub fn set_flags(&mut self, solicited: bool, migreq: bool, pad_count: u8, tver: u8) {
        self.data_mut()[field::FLAGS] = (u8::from(solicited) << 7)
            | (u8::from(migreq) << 6)
            | ((pad_count & 0x3) << 4)
            | (tver & 0x0F);
    }
    pub fn set_pad_count(&mut self, pad_count: u8) {
        let b = &mut self.data_mut()[field::FLAGS];
        *b = (*b & !0x30) | ((pad_count & 0x3) << 4);
    }
    pub fn set_pkey(&mut self, v: u16) {
        put_be(&mut self.data_mut()[field::PKEY], u64::from(v));
    }
    /// Sets byte 4: F, B and the six reserved bits (low 6 bits of `resv6`).
    pub fn set_resv8a(&mut self, fecn: bool, becn: bool, resv6: u8) {
        self.data_mut()[field::RESV8A] =
            (u8::from(fecn) << 7) | (u8::from(becn) << 6) | (resv6 & 0x3F);
    }
    pub fn set_dest_qp(&mut self, v: Qpn) {
        put_be(&mut self.data_mut()[field::DEST_QP], u64::from(v.value()));
    }
    /// Sets byte 8: A and the seven reserved bits (low 7 bits of `resv7`).
    pub fn set_ack(&mut self, ack_req: bool, resv7: u8) {
        self.data_mut()[field::ACK] = (u8::from(ack_req) << 7) | (resv7 & 0x7F);
    }
    pub fn set_psn(&mut self, v: Psn) {
        put_be(&mut self.data_mut()[field::PSN], u64::from(v.value()));
    }
}

/// A parsed BTH. Every field of the wire header, reserved bits included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    pub opcode: Opcode,
    /// SE: solicited event (docs/wire.md §1.4).
    pub solicited: bool,
    /// M: MigReq. Receivers ignore it; rxe transmits 0.
    pub migreq: bool,
    /// PadCnt, 0..=3. [`crate::roce::RocePacketRepr::emit`] writes the pad the payload needs
    /// instead of this value.
    pub pad_count: u8,
    /// Transport header version, 0..=15; must be 0 to be accepted as RoCEv2.
    pub tver: u8,
    pub pkey: u16,
    /// F bit (byte 4, bit 7). Reserved in RoCEv2; not covered by the ICRC.
    pub fecn: bool,
    /// B bit (byte 4, bit 6). Set on CNPs (docs/wire.md §9.2); not covered by the ICRC.
    pub becn: bool,
    /// The six reserved bits of byte 4, 0..=63.
    pub resv6: u8,
    pub dest_qp: Qpn,
    /// A: acknowledge request.
    pub ack_req: bool,
    /// The seven reserved bits of byte 8, 0..=127. Covered by the ICRC.
    pub resv7: u8,
    pub psn: Psn,
}

impl BthRepr {
    /// A BTH with the defaults Linux rxe sends: P_Key 0xFFFF, every flag and reserved bit 0.
    pub const fn new(opcode: Opcode, dest_qp: Qpn, psn: Psn) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qp,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }

    /// Reads every field. Never fails on a checked packet; the `Result` keeps the Repr API uniform.
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<BthRepr> {
        packet.check_len()?;
        Ok(BthRepr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            migreq: packet.migreq(),
            pad_count: packet.pad_count(),
            tver: packet.tver(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            resv6: packet.resv6(),
            dest_qp: packet.dest_qp(),
            ack_req: packet.ack_req(),
            resv7: packet.resv7(),
            psn: packet.psn(),
        })
    }

    /// Writes every field (out-of-range values are masked to their field width).
    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_opcode(self.opcode);
        packet.set_flags(self.solicited, self.migreq, self.pad_count, self.tver);
        packet.set_pkey(self.pkey);
        packet.set_resv8a(self.fecn, self.becn, self.resv6);
        packet.set_dest_qp(self.dest_qp);
        packet.set_ack(self.ack_req, self.resv7);
        packet.set_psn(self.psn);
    }

    /// Bytes the header occupies: always [`HEADER_LEN`].
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // docs/wire.md §3.5 example A: `04 30 ffff 00 000012 80 123456`.
    const EXAMPLE_A: [u8; 12] = [
        0x04, 0x30, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x12, 0x34, 0x56,
    ];
    // Example G (ConnectX-4 Lx CNP): `81 00 ffff 40 000118 00 000000`.
    const EXAMPLE_G: [u8; 12] = [
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn parse_example_a() {
        let p = Packet::new_checked(&EXAMPLE_A[..]).expect("12 bytes");
        let r = BthRepr::parse(&p).expect("parse");
        let mut want = BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x12), Psn::new(0x123456));
        want.pad_count = 3;
        want.ack_req = true;
        assert_eq!(r, want);
        let mut out = [0u8; 12];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, EXAMPLE_A);
    }

    #[test]
    fn parse_cnp_keeps_becn() {
        let r = BthRepr::parse(&Packet::new_checked(&EXAMPLE_G[..]).expect("len")).expect("parse");
        assert_eq!(r.opcode, Opcode::CNP);
        assert!(r.becn && !r.fecn);
        assert_eq!(r.dest_qp, Qpn::new(0x118));
        assert_eq!(r.psn, Psn::new(0));
    }

    #[test]
    fn every_bit_lands_in_its_field() {
        // All ones: every flag set, every reserved bit set.
        let bytes = [0xFFu8; 12];
        let r = BthRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r.opcode, Opcode(0xFF));
        assert!(r.solicited && r.migreq && r.fecn && r.becn && r.ack_req);
        assert_eq!((r.pad_count, r.tver, r.resv6, r.resv7), (3, 15, 63, 127));
        assert_eq!(r.pkey, 0xFFFF);
        assert_eq!(r.dest_qp, Qpn::new(0xFF_FFFF));
        assert_eq!(r.psn, Psn::MAX);
        let mut out = [0u8; 12];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);

        // One bit at a time: SE, M, pad, TVer, F, B, resv6, A, resv7.
        let mut r0 = BthRepr::new(Opcode(0), Qpn::new(0), Psn::new(0));
        r0.pkey = 0;
        type Setter = fn(&mut BthRepr);
        let cases: [(Setter, usize, u8); 9] = [
            (|r| r.solicited = true, 1, 0x80),
            (|r| r.migreq = true, 1, 0x40),
            (|r| r.pad_count = 2, 1, 0x20),
            (|r| r.tver = 1, 1, 0x01),
            (|r| r.fecn = true, 4, 0x80),
            (|r| r.becn = true, 4, 0x40),
            (|r| r.resv6 = 1, 4, 0x01),
            (|r| r.ack_req = true, 8, 0x80),
            (|r| r.resv7 = 0x40, 8, 0x40),
        ];
        for (set, byte, val) in cases {
            let mut r = r0;
            set(&mut r);
            let mut out = [0u8; 12];
            r.emit(&mut Packet::new_unchecked(&mut out[..]));
            let mut want = [0u8; 12];
            want[byte] = val;
            assert_eq!(out, want);
            let back = BthRepr::parse(&Packet::new_unchecked(&out[..])).expect("parse");
            assert_eq!(back, r);
        }
    }

    #[test]
    fn short_buffer_is_truncated() {
        assert_eq!(
            Packet::new_checked(&EXAMPLE_A[..11]).err(),
            Some(crate::Error::Truncated)
        );
        assert!(Packet::new_checked(&[][..]).is_err());
    }
}
