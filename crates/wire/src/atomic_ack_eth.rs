//! Atomic Acknowledge Extended Transport Header: 8 bytes, the original remote value
//! (docs/wire.md §1.5).
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::Result;

/// Length of the AtomicAckETH.
pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const ORIG: Range<usize> = 0..8;
}

fixed_header_view!("AtomicAckETH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn orig(&self) -> u64 {
        be(&self.data()[field::ORIG])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_orig(&mut self, v: u64) {
        put_be(&mut self.data_mut()[field::ORIG], v);
    }
}

/// A parsed AtomicAckETH: the value the target held before the atomic executed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    pub orig: u64,
}

impl AtomicAckEthRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<AtomicAckEthRepr> {
        packet.check_len()?;
        Ok(AtomicAckEthRepr {
            orig: packet.orig(),
        })
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_orig(self.orig);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_endian_u64() {
        let bytes = [0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0x00, 0x00, 0x2A];
        let r =
            AtomicAckEthRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r.orig, 0xDEAD_BEEF_0000_002A);
        let mut out = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(Packet::new_checked(&bytes[..7]).is_err());
    }
}
