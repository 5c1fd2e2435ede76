//! Invalidate Extended Transport Header: the 4-byte R_Key to invalidate (docs/wire.md §1.5).
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::num::Rkey;
use crate::Result;

/// Length of the IETH.
pub const HEADER_LEN: usize = 4;

mod field {
    use core::ops::Range;
    pub const RKEY: Range<usize> = 0..4;
}

fixed_header_view!("IETH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn rkey(&self) -> Rkey {
        Rkey(be(&self.data()[field::RKEY]) as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_rkey(&mut self, v: Rkey) {
        put_be(&mut self.data_mut()[field::RKEY], u64::from(v.0));
    }
}

/// A parsed IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IethRepr {
    pub rkey: Rkey,
}

impl IethRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<IethRepr> {
        packet.check_len()?;
        Ok(IethRepr {
            rkey: packet.rkey(),
        })
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_rkey(self.rkey);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rkey_big_endian() {
        let bytes = [0x00, 0xAB, 0xCD, 0xEF];
        let r = IethRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r.rkey, Rkey(0x00AB_CDEF));
        let mut out = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
