//! Atomic Extended Transport Header: 28 bytes, packed (docs/wire.md §1.5).
//!
//! ```text
//! 0..8    VA
//! 8..12   R_Key
//! 12..20  Swap (CompareSwap) or Add (FetchAdd) data
//! 20..28  Compare data (CompareSwap only)
//! ```
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::num::Rkey;
use crate::Result;

/// Length of the AtomicETH.
pub const HEADER_LEN: usize = 28;

mod field {
    use core::ops::Range;
    pub const VA: Range<usize> = 0..8;
    pub const RKEY: Range<usize> = 8..12;
    pub const SWAP_ADD: Range<usize> = 12..20;
    pub const COMPARE: Range<usize> = 20..28;
}

fixed_header_view!("AtomicETH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn va(&self) -> u64 {
        be(&self.data()[field::VA])
    }
    pub fn rkey(&self) -> Rkey {
        Rkey(be(&self.data()[field::RKEY]) as u32)
    }
    pub fn swap_add(&self) -> u64 {
        be(&self.data()[field::SWAP_ADD])
    }
    pub fn compare(&self) -> u64 {
        be(&self.data()[field::COMPARE])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_va(&mut self, v: u64) {
        put_be(&mut self.data_mut()[field::VA], v);
    }
    pub fn set_rkey(&mut self, v: Rkey) {
        put_be(&mut self.data_mut()[field::RKEY], u64::from(v.0));
    }
    pub fn set_swap_add(&mut self, v: u64) {
        put_be(&mut self.data_mut()[field::SWAP_ADD], v);
    }
    pub fn set_compare(&mut self, v: u64) {
        put_be(&mut self.data_mut()[field::COMPARE], v);
    }
}

/// A parsed AtomicETH. docs/wire.md §2.7: CompareSwap puts the WR's `swap` in `swap_add` and
/// `compare_add` in `compare`; FetchAdd puts the add value in `swap_add`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: Rkey,
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEthRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<AtomicEthRepr> {
        packet.check_len()?;
        Ok(AtomicEthRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_layout() {
        let bytes: Vec<u8> = (1..=28).collect();
        let r =
            AtomicEthRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r.va, 0x0102_0304_0506_0708);
        assert_eq!(r.rkey, Rkey(0x090A_0B0C));
        assert_eq!(r.swap_add, 0x0D0E_0F10_1112_1314);
        assert_eq!(r.compare, 0x1516_1718_191A_1B1C);
        let mut out = [0u8; 28];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], &bytes[..]);
        assert!(Packet::new_checked(&bytes[..27]).is_err());
    }
}
