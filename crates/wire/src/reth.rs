//! RDMA Extended Transport Header: 16 bytes (docs/wire.md §1.5).
//!
//! ```text
//! 0..8    VA
//! 8..12   R_Key
//! 12..16  DMA Length
//! ```
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::num::Rkey;
use crate::Result;

/// Length of the RETH.
pub const HEADER_LEN: usize = 16;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const LEN: Range<usize> = 12..16;
}

fixed_header_view!("RETH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn va(&self) -> u64 {
        be(&self.data()[field::VA])
    }
    pub fn rkey(&self) -> Rkey {
        Rkey(be(&self.data()[field::RKEY]) as u32)
    }
    pub fn dma_len(&self) -> u32 {
        be(&self.data()[field::LEN]) as u32
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, v: u64) {
        put_be(&mut self.data_mut()[field::VA], v);
    }
    pub fn set_rkey(&mut self, v: Rkey) {
        put_be(&mut self.data_mut()[field::RKEY], u64::from(v.0));
    }
    pub fn set_dma_len(&mut self, v: u32) {
        put_be(&mut self.data_mut()[field::LEN], u64::from(v));
    }
}

/// A parsed RETH. `len` is the DMA length of the whole message (docs/wire.md §1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: Rkey,
    pub len: u32,
}

impl RethRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<RethRepr> {
        packet.check_len()?;
        Ok(RethRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            len: packet.dma_len(),
        })
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.len);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_f_reth() {
        // docs/wire.md §3.5 F: VA 0x00007F0000001000, R_Key 0x1234, len 8.
        let bytes = [
            0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00,
            0x00, 0x08,
        ];
        let r = RethRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(
            r,
            RethRepr {
                va: 0x0000_7F00_0000_1000,
                rkey: Rkey(0x1234),
                len: 8
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(Packet::new_checked(&bytes[..15]).is_err());
    }

    #[test]
    fn field_boundaries() {
        let r = RethRepr {
            va: 0x0102_0304_0506_0708,
            rkey: Rkey(0x090A_0B0C),
            len: 0x0D0E_0F10,
        };
        let mut out = [0u8; 16];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        let want: Vec<u8> = (1..=16).collect();
        assert_eq!(&out[..], &want[..]);
    }
}
