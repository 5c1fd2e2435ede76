//! Datagram Extended Transport Header: 8 bytes, UD only (docs/wire.md §1.5).
//!
//! ```text
//! 0..4  Q_Key
//! 4     reserved
//! 5..8  SrcQP (24)
//! ```
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic. The
//! reserved byte is ignored on parse and written as zero.

use crate::bytes::{be, fixed_header_view, put_be};
use crate::num::{Qkey, Qpn};
use crate::Result;

/// Length of the DETH.
pub const HEADER_LEN: usize = 8;

mod field {
    use core::ops::Range;
    pub const QKEY: Range<usize> = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Range<usize> = 5..8;
}

/// Offset of the reserved byte inside the DETH (not kept in [`DethRepr`]).
pub const RESERVED_OFFSET: usize = field::RESERVED;

fixed_header_view!("DETH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn qkey(&self) -> Qkey {
        Qkey(be(&self.data()[field::QKEY]) as u32)
    }
    pub fn reserved(&self) -> u8 {
        self.data()[field::RESERVED]
    }
    pub fn src_qp(&self) -> Qpn {
        Qpn::new(be(&self.data()[field::SRC_QP]) as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_qkey(&mut self, v: Qkey) {
        put_be(&mut self.data_mut()[field::QKEY], u64::from(v.0));
    }
    pub fn set_reserved(&mut self, v: u8) {
        self.data_mut()[field::RESERVED] = v;
    }
    pub fn set_src_qp(&mut self, v: Qpn) {
        put_be(&mut self.data_mut()[field::SRC_QP], u64::from(v.value()));
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    pub qkey: Qkey,
    pub src_qp: Qpn,
}

impl DethRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<DethRepr> {
        packet.check_len()?;
        Ok(DethRepr {
            qkey: packet.qkey(),
            src_qp: packet.src_qp(),
        })
    }

    /// Writes Q_Key and SrcQP; the reserved byte is written as zero.
    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_qkey(self.qkey);
        packet.set_reserved(0);
        packet.set_src_qp(self.src_qp);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gsi_deth() {
        // Q_Key 0x80010000 (QP1), reserved, SrcQP 0x000001.
        let bytes = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];
        let r = DethRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(
            r,
            DethRepr {
                qkey: Qkey::GSI,
                src_qp: Qpn::GSI
            }
        );
        let mut out = [0xAAu8; 8];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn reserved_byte_is_ignored_and_zeroed() {
        let bytes = [0x11, 0x22, 0x33, 0x44, 0xEE, 0xAB, 0xCD, 0xEF];
        let r = DethRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(r.qkey, Qkey(0x1122_3344));
        assert_eq!(r.src_qp, Qpn::new(0xAB_CDEF));
        let mut out = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, [0x11, 0x22, 0x33, 0x44, 0x00, 0xAB, 0xCD, 0xEF]);
        assert!(Packet::new_checked(&bytes[..7]).is_err());
    }
}
