//! XRC Extended Transport Header (IBTA Vol 1, XRC annex; §9.2 XRCETH): 4 bytes right after
//! the BTH of every XRC request packet — 8 reserved bits, then the 24-bit number of the XRC
//! SRQ at the responder that receives the message (docs/wire.md §2.8).
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::Result;

/// Length of the XRCETH.
pub const HEADER_LEN: usize = 4;

/// Largest XRC SRQ number (24 bits).
pub const MAX_SRQN: u32 = 0x00ff_ffff;

mod field {
    use core::ops::Range;
    pub const WORD: Range<usize> = 0..4;
}

fixed_header_view!("XRCETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The XRC SRQ number (low 24 bits; the reserved byte is ignored).
    pub fn srqn(&self) -> u32 {
        (be(&self.data()[field::WORD]) as u32) & MAX_SRQN
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the SRQ number (masked to 24 bits) with a zero reserved byte.
    pub fn set_srqn(&mut self, v: u32) {
        put_be(&mut self.data_mut()[field::WORD], u64::from(v & MAX_SRQN));
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcEthRepr {
    /// The responder's XRC SRQ number (24 bits).
    pub srqn: u32,
}

impl XrcEthRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<XrcEthRepr> {
        packet.check_len()?;
        Ok(XrcEthRepr {
            srqn: packet.srqn(),
        })
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_srqn(self.srqn);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srqn_is_24_bits_after_a_reserved_byte() {
        let bytes = [0xFF, 0x12, 0x34, 0x56];
        let r = XrcEthRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r.srqn, 0x12_3456);
        let mut out = [0xAAu8; 4];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, [0x00, 0x12, 0x34, 0x56]);
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
