//! ACK Extended Transport Header: syndrome (8) | MSN (24) (docs/wire.md §4).
//!
//! [`Packet::new_checked`] validates the length once; after it no accessor can panic. Also here:
//! the AETH credit table (§4.2) and the RNR NAK timer table (§4.3).

use core::fmt;

use crate::bytes::{be, fixed_header_view, put_be};
use crate::num::Msn;
use crate::Result;

/// Length of the AETH.
pub const HEADER_LEN: usize = 4;

mod field {
    use core::ops::Range;
    pub const SYNDROME: usize = 0;
    pub const MSN: Range<usize> = 1..4;
}

fixed_header_view!("AETH");

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn syndrome(&self) -> Syndrome {
        Syndrome(self.data()[field::SYNDROME])
    }
    pub fn msn(&self) -> Msn {
        Msn::new(be(&self.data()[field::MSN]) as u32)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_syndrome(&mut self, v: Syndrome) {
        self.data_mut()[field::SYNDROME] = v.0;
    }
    pub fn set_msn(&mut self, v: Msn) {
        put_be(&mut self.data_mut()[field::MSN], u64::from(v.value()));
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    pub msn: Msn,
}

impl AethRepr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<AethRepr> {
        packet.check_len()?;
        Ok(AethRepr {
            syndrome: packet.syndrome(),
            msn: packet.msn(),
        })
    }

    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
}

/// The AETH syndrome byte (docs/wire.md §4.1). Open newtype: every byte value survives.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Syndrome(pub u8);

/// NAK code, the low 5 bits of a NAK syndrome (docs/wire.md §4.4).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct NakCode(pub u8);

impl NakCode {
    pub const PSN_SEQ_ERROR: NakCode = NakCode(0);
    pub const INVALID_REQUEST: NakCode = NakCode(1);
    pub const REMOTE_ACCESS_ERROR: NakCode = NakCode(2);
    pub const REMOTE_OPERATIONAL_ERROR: NakCode = NakCode(3);
    pub const INVALID_RD_REQUEST: NakCode = NakCode(4);
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => f.write_str("PSN sequence error"),
            1 => f.write_str("invalid request"),
            2 => f.write_str("remote access error"),
            3 => f.write_str("remote operational error"),
            4 => f.write_str("invalid RD request"),
            n => write!(f, "reserved NAK code {n}"),
        }
    }
}

/// What a syndrome means (docs/wire.md §4.1: bits 6..5 select the type, bits 4..0 the value).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AckKind {
    /// Positive acknowledgement with an end-to-end credit code (31 = no credit information).
    Ack {
        credit_code: u8,
    },
    /// Receiver not ready; retry after the time given by [`rnr_timer_us`]`(timer_code)`.
    RnrNak {
        timer_code: u8,
    },
    Nak(NakCode),
    /// Bit 7 set or type 0b10: not a valid syndrome.
    Reserved,
}

impl Syndrome {
    /// rxe's ACK syndrome: credit code 31, "no credit information" (docs/wire.md §4.1).
    pub const ACK_UNLIMITED: Syndrome = Syndrome(0x1F);

    /// ACK with a 5-bit credit count code.
    pub const fn ack(credit_code: u8) -> Syndrome {
        Syndrome(credit_code & 0x1F)
    }

    /// RNR NAK with a 5-bit timer code.
    pub const fn rnr_nak(timer_code: u8) -> Syndrome {
        Syndrome(0x20 | (timer_code & 0x1F))
    }

    /// NAK with the given code.
    pub const fn nak(code: NakCode) -> Syndrome {
        Syndrome(0x60 | (code.0 & 0x1F))
    }

    pub const fn kind(self) -> AckKind {
        if self.0 & 0x80 != 0 {
            return AckKind::Reserved;
        }
        let value = self.0 & 0x1F;
        match (self.0 >> 5) & 0x3 {
            0 => AckKind::Ack { credit_code: value },
            1 => AckKind::RnrNak { timer_code: value },
            3 => AckKind::Nak(NakCode(value)),
            _ => AckKind::Reserved,
        }
    }

    pub const fn is_ack(self) -> bool {
        matches!(self.kind(), AckKind::Ack { .. })
    }
}

impl fmt::Debug for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Syndrome(0x{:02x} {:?})", self.0, self.kind())
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            AckKind::Ack { credit_code } => write!(f, "ACK credits={credit_code}"),
            AckKind::RnrNak { timer_code } => write!(f, "RNR-NAK timer={timer_code}"),
            AckKind::Nak(code) => write!(f, "NAK {code}"),
            AckKind::Reserved => write!(f, "reserved syndrome 0x{:02x}", self.0),
        }
    }
}

/// Credits for ACK credit codes 0..=30 (docs/wire.md §4.2, rdmavt `credit_table`).
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Credit code meaning "no credit information, send freely" (docs/wire.md §4.2).
pub const CREDIT_CODE_UNLIMITED: u8 = 31;

/// Number of receive WQEs a credit code advertises; `None` for code 31 (no limit) and for
/// codes above 31.
pub fn credits_for_code(code: u8) -> Option<u32> {
    CREDITS.get(usize::from(code)).copied()
}

/// The code a responder advertises for `available` receive WQEs: the largest code whose credit
/// value is ≤ `available` (docs/wire.md §4.2).
pub fn credit_code_for(available: u32) -> u8 {
    // CREDITS is sorted; the count of entries ≤ available is one past the answer.
    let n = CREDITS.partition_point(|&c| c <= available);
    n.saturating_sub(1) as u8
}

/// RNR NAK timer codes in microseconds (docs/wire.md §4.3; code 0 is the longest, 655.36 ms).
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// Wait time for an RNR NAK timer code, in microseconds (only the low 5 bits of `code` count).
pub fn rnr_timer_us(code: u8) -> u32 {
    RNR_TIMER_US
        .get(usize::from(code & 0x1F))
        .copied()
        .unwrap_or(RNR_TIMER_US[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_e_aeth() {
        // docs/wire.md §3.5 E: syndrome 0x1F, MSN 1.
        let bytes = [0x1f, 0x00, 0x00, 0x01];
        let r = AethRepr::parse(&Packet::new_checked(&bytes[..]).expect("len")).expect("parse");
        assert_eq!(
            r,
            AethRepr {
                syndrome: Syndrome::ACK_UNLIMITED,
                msn: Msn::new(1)
            }
        );
        assert_eq!(r.syndrome.kind(), AckKind::Ack { credit_code: 31 });
        let mut out = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(Packet::new_checked(&bytes[..3]).is_err());
    }

    #[test]
    fn syndrome_kinds() {
        assert_eq!(Syndrome(0x00).kind(), AckKind::Ack { credit_code: 0 });
        assert_eq!(Syndrome(0x2E).kind(), AckKind::RnrNak { timer_code: 14 });
        assert_eq!(Syndrome(0x60).kind(), AckKind::Nak(NakCode::PSN_SEQ_ERROR));
        assert_eq!(
            Syndrome(0x63).kind(),
            AckKind::Nak(NakCode::REMOTE_OPERATIONAL_ERROR)
        );
        assert_eq!(Syndrome(0x40).kind(), AckKind::Reserved);
        assert_eq!(Syndrome(0x9F).kind(), AckKind::Reserved);
        assert_eq!(Syndrome::ack(5), Syndrome(0x05));
        assert_eq!(Syndrome::rnr_nak(31), Syndrome(0x3F));
        assert_eq!(Syndrome::nak(NakCode::INVALID_REQUEST), Syndrome(0x61));
        assert_eq!(Syndrome::nak(NakCode::REMOTE_ACCESS_ERROR), Syndrome(0x62));
        assert_eq!(Syndrome::nak(NakCode::INVALID_RD_REQUEST), Syndrome(0x64));
        for b in 0..=255u8 {
            let s = Syndrome(b);
            let rebuilt = match s.kind() {
                AckKind::Ack { credit_code } => Syndrome::ack(credit_code),
                AckKind::RnrNak { timer_code } => Syndrome::rnr_nak(timer_code),
                AckKind::Nak(c) => Syndrome::nak(c),
                AckKind::Reserved => continue,
            };
            assert_eq!(rebuilt, s);
        }
    }

    #[test]
    fn credit_table() {
        assert_eq!(credits_for_code(0), Some(0));
        assert_eq!(credits_for_code(5), Some(6));
        assert_eq!(credits_for_code(30), Some(32768));
        assert_eq!(credits_for_code(31), None);
        assert_eq!(credit_code_for(0), 0);
        assert_eq!(credit_code_for(5), 4);
        assert_eq!(credit_code_for(6), 5);
        assert_eq!(credit_code_for(100), 13);
        assert_eq!(credit_code_for(u32::MAX), 30);
        for code in 0..31u8 {
            let c = credits_for_code(code).expect("0..=30 have values");
            assert_eq!(credit_code_for(c), code);
        }
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(14), 1_280);
        assert_eq!(rnr_timer_us(25), 61_440);
        assert_eq!(rnr_timer_us(31), 491_520);
        assert_eq!(rnr_timer_us(0x20 | 1), 10);
        // Codes 1..=31 are increasing.
        for c in 2..32u8 {
            assert!(rnr_timer_us(c) > rnr_timer_us(c - 1));
        }
    }
}
