//! The one error type of the wire layer.
//!
//! Every variant says what was wrong with the bytes (or with a `Repr` handed to an emitter); none
//! of them carries data, so callers can match on them cheaply and they are `Copy`.

use core::fmt;

/// Why bytes could not be parsed, or a `Repr` could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Error {
    /// The input is shorter than a header (or a length field) says it must be.
    Truncated,
    /// The output buffer is too small for what is being emitted.
    BufferTooSmall,
    /// The IP version nibble is neither 4 nor 6.
    BadVersion,
    /// IPv4 header length is not 5 words. RoCEv2 never uses IPv4 options
    /// (docs/wire.md §3.2: rxe only handles a 20-byte header; we treat IHL≠5 as malformed).
    BadIhl,
    /// IPv4 flags/fragment offset: reserved bit set, or the packet is a fragment.
    BadIpFlags,
    /// Length fields disagree with each other, with the bytes present, or with the opcode.
    BadLength,
    /// Not a RoCEv2 packet: IP protocol is not UDP or UDP destination port is not 4791.
    NotRoce,
    /// BTH transport header version is not 0 (docs/wire.md §0: receivers drop others).
    BadTver,
    /// The BTH opcode is not in the opcode table.
    UnknownOpcode,
    /// BTH PadCnt is larger than the bytes after the headers, does not pad the payload to a
    /// 4-byte boundary, or is nonzero on an opcode that carries no payload (docs/wire.md §1.6).
    BadPad,
    /// A `Repr`'s extension headers disagree with what the opcode table says its opcode carries.
    HeaderMismatch,
    /// The ICRC does not match (only from [`crate::frame::ParsedFrame::check_icrc`] and similar
    /// explicit checks; parsers report a bad ICRC as a flag, not an error).
    BadIcrc,
    /// A MAD whose header is not a Communication Manager Send (base version 1, class 0x07, class
    /// version 2, method 0x03), which the CM agent never sees (kernel mad.c validate_mad).
    NotCm,
    /// A CM MAD with an attribute ID this CM does not handle.
    UnknownAttribute,
}

/// Result alias for the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Error::Truncated => "truncated packet",
            Error::BufferTooSmall => "output buffer too small",
            Error::BadVersion => "IP version is neither 4 nor 6",
            Error::BadIhl => "IPv4 header length is not 20 bytes",
            Error::BadIpFlags => "IPv4 reserved flag set or packet is a fragment",
            Error::BadLength => "inconsistent length fields",
            Error::NotRoce => "not RoCEv2 (not UDP, or UDP destination port is not 4791)",
            Error::BadTver => "BTH transport version is not 0",
            Error::UnknownOpcode => "unknown BTH opcode",
            Error::BadPad => "bad BTH pad count",
            Error::HeaderMismatch => "extension headers do not match the opcode",
            Error::BadIcrc => "bad ICRC",
            Error::NotCm => "not a CM Send MAD",
            Error::UnknownAttribute => "unknown CM attribute ID",
        };
        f.write_str(s)
    }
}

impl std::error::Error for Error {}
