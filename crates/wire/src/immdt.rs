//! Immediate Data header: 4 opaque bytes (docs/wire.md §1.5).
//!
//! The value is kept as the 4 wire bytes read as a big-endian `u32`; it is copied unchanged into
//! the receive completion (`wc.imm_data` is in network order). [`Packet::new_checked`]
//! validates the length once; after it no accessor can panic.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::Result;

/// Length of the ImmDt header.
pub const HEADER_LEN: usize = 4;

mod field {
    use core::ops::Range;
    pub const IMM: Range<usize> = 0..4;
}

fixed_header_view!("ImmDt header");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn imm(&self) -> u32 {
        be(&self.data()[field::IMM]) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_imm(&mut self, v: u32) {
        put_be(&mut self.data_mut()[field::IMM], u64::from(v));
    }
}

/// Immediate data: the 4 wire bytes as a big-endian `u32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDt(pub u32);

impl ImmDt {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<ImmDt> {
        packet.check_len()?;
        Ok(ImmDt(packet.imm()))
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_imm(self.0);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// The 4 bytes in wire order.
    pub const fn to_wire_bytes(self) -> [u8; 4] {
        self.0.to_be_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_order() {
        let bytes = [0x12, 0x34, 0x56, 0x78];
        let r = ImmDt::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r, ImmDt(0x1234_5678));
        assert_eq!(r.to_wire_bytes(), bytes);
        let mut out = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }
}
