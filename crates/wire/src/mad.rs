//! Management datagrams (MADs): the 256-byte messages the General Services Interface (QP1)
//! carries, here only the Communication Manager class (IBTA Vol 1 §13.4 "MAD formats", §12.6
//! "CM messages").
//!
//! On RoCEv2 a MAD is the whole payload of a UD SEND Only to destination QP 1 with Q_Key
//! 0x8001_0000: all 256 bytes are sent, the unused tail zeroed.
//!
//! ```text
//! 0      BaseVersion (1)
//! 1      MgmtClass   (0x07 = CM)
//! 2      ClassVersion (2 for the CM)
//! 3      R (1 bit) | Method (7 bits; the CM only uses 0x03 Send)
//! 4..6   Status
//! 6..8   ClassSpecific
//! 8..16  TransactionID
//! 16..18 AttributeID
//! 18..20 reserved
//! 20..24 AttributeModifier
//! 24..256 attribute data (232 bytes)
//! ```
//!
//! [`Packet::new_checked`] validates the length once (at least [`MAD_LEN`] bytes); after it no
//! accessor can panic. The reserved half-word is ignored on parse and written as zero.

use crate::bytes::{be, put_be};
use crate::{Error, Result};

/// Size of every MAD on the wire.
pub const MAD_LEN: usize = 256;
/// Size of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Size of the attribute data that follows the header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// The only base version the Linux MAD layer accepts for InfiniBand ports (mad.c validate_mad).
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager.
pub const CLASS_CM: u8 = 0x07;
/// Class version of the CM (kernel `IB_CM_CLASS_VERSION`).
pub const CM_CLASS_VERSION: u8 = 2;
/// Method Send: every CM message uses it (never Get/Set/GetResp).
pub const METHOD_SEND: u8 = 0x03;

mod field {
    use core::ops::Range;
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: Range<usize> = 4..6;
    pub const CLASS_SPECIFIC: Range<usize> = 6..8;
    pub const TID: Range<usize> = 8..16;
    pub const ATTR_ID: Range<usize> = 16..18;
    pub const RESERVED: Range<usize> = 18..20;
    pub const ATTR_MOD: Range<usize> = 20..24;
    pub const DATA: Range<usize> = 24..256;
}

/// Offset range of the reserved half-word of the header (not kept in [`MadHeader`]).
pub const RESERVED: core::ops::Range<usize> = field::RESERVED;

/// Zero-copy view of a MAD over a byte buffer.
///
/// Construct with [`Packet::new_checked`] for untrusted input: it checks that the buffer holds a
/// whole MAD, after which every accessor is infallible. Bytes after the 256th are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps `buffer` without checking its length; accessors panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps `buffer` after checking it holds at least [`MAD_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` if the buffer is shorter than a MAD.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MAD_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    pub fn base_version(&self) -> u8 {
        self.b()[field::BASE_VERSION]
    }
    pub fn mgmt_class(&self) -> u8 {
        self.b()[field::MGMT_CLASS]
    }
    pub fn class_version(&self) -> u8 {
        self.b()[field::CLASS_VERSION]
    }
    /// The response bit (the top bit of byte 3).
    pub fn response(&self) -> bool {
        self.b()[field::METHOD] & 0x80 != 0
    }
    pub fn method(&self) -> u8 {
        self.b()[field::METHOD] & 0x7F
    }
    pub fn status(&self) -> u16 {
        be(&self.b()[field::STATUS]) as u16
    }
    pub fn class_specific(&self) -> u16 {
        be(&self.b()[field::CLASS_SPECIFIC]) as u16
    }
    pub fn tid(&self) -> u64 {
        be(&self.b()[field::TID])
    }
    pub fn attr_id(&self) -> u16 {
        be(&self.b()[field::ATTR_ID]) as u16
    }
    pub fn attr_mod(&self) -> u32 {
        be(&self.b()[field::ATTR_MOD]) as u32
    }
    /// The 232 bytes of attribute data after the header.
    pub fn data(&self) -> &[u8] {
        &self.b()[field::DATA]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// The attribute data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.bm()[field::DATA]
    }
}

/// The common MAD header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHeader {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub response: bool,
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_id: u16,
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM Send header for `attr_id` with transaction ID `tid` and attribute modifier
    /// `attr_mod` (the ECE modifier in REQ/REP, otherwise 0).
    pub const fn cm(attr_id: u16, tid: u64, attr_mod: u32) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            response: false,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<MadHeader> {
        p.check_len()?;
        Ok(MadHeader {
            base_version: p.base_version(),
            mgmt_class: p.mgmt_class(),
            class_version: p.class_version(),
            response: p.response(),
            method: p.method(),
            status: p.status(),
            class_specific: p.class_specific(),
            tid: p.tid(),
            attr_id: p.attr_id(),
            attr_mod: p.attr_mod(),
        })
    }

    /// Writes the header (the reserved half-word as zero); the attribute data is untouched.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Packet<T>) {
        let b = p.bm();
        b[field::BASE_VERSION] = self.base_version;
        b[field::MGMT_CLASS] = self.mgmt_class;
        b[field::CLASS_VERSION] = self.class_version;
        b[field::METHOD] = (u8::from(self.response) << 7) | (self.method & 0x7F);
        put_be(&mut b[field::STATUS], u64::from(self.status));
        put_be(
            &mut b[field::CLASS_SPECIFIC],
            u64::from(self.class_specific),
        );
        put_be(&mut b[field::TID], self.tid);
        put_be(&mut b[field::ATTR_ID], u64::from(self.attr_id));
        put_be(&mut b[field::RESERVED], 0);
        put_be(&mut b[field::ATTR_MOD], u64::from(self.attr_mod));
    }

    /// True for what the Linux CM agent accepts: base version 1, class CM, class version 2,
    /// method Send, not a response (mad.c validate_mad / find_mad_agent, cm.c cm_add_one).
    pub fn is_cm_send(&self) -> bool {
        self.base_version == BASE_VERSION
            && self.mgmt_class == CLASS_CM
            && self.class_version == CM_CLASS_VERSION
            && self.method == METHOD_SEND
            && !self.response
    }
}

/// Reads `width` bits (at most 64) that start `bit` bits below the most significant bit of
/// `b[off]`, big-endian; the IBTA field notation of the CM message tables (IBTA Vol 1 §12.6,
/// kernel `include/rdma/iba.h`). The caller guarantees the bytes exist.
pub(crate) fn get_bits(b: &[u8], off: usize, bit: usize, width: usize) -> u64 {
    let nbytes = (bit + width).div_ceil(8);
    let raw = if nbytes <= 8 {
        be(&b[off..off + nbytes])
    } else {
        // Only reached for unaligned fields wider than 56 bits, which no table has; handled
        // for completeness with a 128-bit read.
        b[off..off + nbytes]
            .iter()
            .fold(0u128, |acc, &x| (acc << 8) | u128::from(x)) as u64
    };
    let shift = nbytes * 8 - bit - width;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    (raw >> shift) & mask
}

/// Writes the low `width` bits of `v` at the place [`get_bits`] reads, leaving the other bits of
/// the touched bytes as they are.
pub(crate) fn set_bits(b: &mut [u8], off: usize, bit: usize, width: usize, v: u64) {
    let nbytes = (bit + width).div_ceil(8);
    debug_assert!(nbytes <= 8, "field wider than 8 bytes");
    let shift = nbytes * 8 - bit - width;
    let mask = if width == 64 {
        u64::MAX
    } else {
        ((1u64 << width) - 1) << shift
    };
    let slot = &mut b[off..off + nbytes];
    let old = be(slot);
    let new = (old & !mask) | ((v << shift) & mask);
    put_be(slot, new);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_cm_check() {
        let h = MadHeader::cm(0x0010, 0x0000_0002_D3CA_C430, 0);
        let mut buf = [0xEEu8; MAD_LEN];
        h.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(
            &buf[..24],
            &[
                0x01, 0x07, 0x02, 0x03, 0, 0, 0, 0, 0, 0, 0, 0x02, 0xD3, 0xCA, 0xC4, 0x30, 0x00,
                0x10, 0, 0, 0, 0, 0, 0
            ]
        );
        let p = Packet::new_checked(&buf[..]).expect("len");
        let back = MadHeader::parse(&p).expect("parse");
        assert_eq!(back, h);
        assert!(back.is_cm_send());
        assert!(!MadHeader { method: 0x01, ..h }.is_cm_send());
        assert!(!MadHeader {
            class_version: 1,
            ..h
        }
        .is_cm_send());
        assert!(!MadHeader {
            response: true,
            ..h
        }
        .is_cm_send());
        assert_eq!(
            Packet::new_checked(&buf[..255]).err(),
            Some(Error::Truncated)
        );
    }

    #[test]
    fn bit_fields_follow_the_msb_first_notation() {
        // 0xA0 = 10100 0 0 0: a 5-bit field 20 at bit 0, a 2-bit field 0 at bit 5, 1 bit 0 at 7.
        let b = [0xA0u8, 0xCE, 0x65, 0xAA, 0xA7];
        assert_eq!(get_bits(&b, 0, 0, 5), 20);
        assert_eq!(get_bits(&b, 0, 5, 2), 0);
        assert_eq!(get_bits(&b, 1, 0, 24), 0xCE65AA);
        assert_eq!(get_bits(&b, 4, 0, 5), 20);
        assert_eq!(get_bits(&b, 4, 5, 3), 7);
        let mut w = [0u8; 5];
        set_bits(&mut w, 0, 0, 5, 20);
        set_bits(&mut w, 1, 0, 24, 0xCE65AA);
        set_bits(&mut w, 4, 0, 5, 20);
        set_bits(&mut w, 4, 5, 3, 7);
        assert_eq!(w, b);
        // Writing a field leaves its neighbours alone and truncates an oversized value.
        set_bits(&mut w, 0, 5, 2, 0xFF);
        assert_eq!(w[0], 0xA6);
        let mut wide = [0u8; 8];
        set_bits(&mut wide, 0, 0, 64, 0x0102_0304_0506_0708);
        assert_eq!(get_bits(&wide, 0, 0, 64), 0x0102_0304_0506_0708);
    }
}
