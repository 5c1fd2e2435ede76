//! Why the control plane refused a command: a machine-readable [`Rule`] and a sentence
//! naming the attribute and the rule ("modify_qp: INIT -> RTR: DEST_QPN missing from attr_mask").
//!
//! # Encoding
//!
//! An error reply may carry one reason record as its body ([`crate::cmd::ReplyHdr`]
//! `resp_len` > 0 with a negative `status`):
//!
//! ```text
//! ReasonHdr{rule: u16, text_len: u16, reserved: u32 = 0} | text (text_len bytes of UTF-8)
//! ```
//!
//! `resp_len` is exactly `8 + text_len`, and `text_len` ≤ [`MAX_REASON_TEXT`]. An error
//! reply with `resp_len` 0 (what every control plane sent before reasons existed) still
//! decodes: it has no reason. The record is not bounded by the response capacity the
//! request offered (MODIFY_QP offers none); a reader accepts an error reply of up to
//! [`MAX_REASON_BYTES`] body bytes whatever it offered. The errno is the contract: C callers
//! see only it, exactly as from the kernel; the reason is for people and tools.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{AbiError, Result};

/// Longest reason text carried (longer text is cut at a character boundary).
pub const MAX_REASON_TEXT: usize = 240;

/// Largest reason record: header plus the longest text.
pub const MAX_REASON_BYTES: usize = ReasonHdr::SIZE + MAX_REASON_TEXT;

/// The header of a reason record.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ReasonHdr {
    /// The [`Rule`] code.
    pub rule: u16,
    /// Bytes of text following the header.
    pub text_len: u16,
    /// Must be 0.
    pub reserved: u32,
}

impl ReasonHdr {
    /// Size in bytes.
    pub const SIZE: usize = 8;
}

const _: () = assert!(core::mem::size_of::<ReasonHdr>() == ReasonHdr::SIZE);

open_enum! {
    /// Which rule a refused command broke. Stable codes: tools match on these, people read
    /// the text beside them. Codes without a name here (from a newer control plane) survive.
    pub struct Rule(u16) {
        /// No rule recorded.
        UNSPECIFIED = 0,
        /// The command's bytes are malformed (framing, lengths, reserved fields).
        MALFORMED = 1,
        /// A command other than GET_CONTEXT before GET_CONTEXT succeeded, or a second one.
        NO_CONTEXT = 2,
        /// Library and device disagree on the uroce ABI version.
        ABI_VERSION = 3,
        /// A handle that names no object of this kind in the calling context.
        BAD_HANDLE = 4,
        /// Objects of different protection domains combined.
        WRONG_PD = 5,
        /// A requested size or count above the device's limit.
        OVER_LIMIT = 6,
        /// The device has no room for another object of this kind.
        EXHAUSTED = 7,
        /// The object is still in use by others.
        IN_USE = 8,
        /// A port number other than 1.
        BAD_PORT = 9,
        /// A table index (GID, P_Key) beyond the table.
        BAD_INDEX = 10,
        /// An attribute value outside its range.
        BAD_VALUE = 11,
        /// Unknown or reserved flag bits.
        BAD_FLAGS = 12,
        /// A known feature uroce does not implement.
        UNSUPPORTED = 13,
        /// An address vector the device cannot use (no GRH, address family, routing).
        BAD_ADDRESS = 14,
        /// Application memory not mapped (or not writable where it must be).
        NOT_MAPPED = 15,
        /// A memory range that is empty, wraps, or is misaligned.
        BAD_RANGE = 16,
        /// A ring descriptor whose geometry the device cannot use.
        BAD_RING = 17,
        /// A QP state transition not in the IBTA table.
        ILLEGAL_TRANSITION = 18,
        /// An attribute the transition requires is missing from attr_mask.
        MISSING_ATTR = 19,
        /// An attribute the transition does not allow is in attr_mask.
        UNEXPECTED_ATTR = 20,
        /// cur_qp_state names a state the QP is not in.
        CUR_STATE_MISMATCH = 21,
        /// The send queue is still draining.
        QP_BUSY = 22,
        /// The QP's state does not allow the operation.
        WRONG_STATE = 23,
        /// The ring has no room for the work requests.
        QUEUE_FULL = 24,
        /// An opcode unknown, or not allowed on this QP type.
        BAD_OPCODE = 25,
        /// A system resource (descriptors, sockets) could not be had.
        SYSTEM = 26,
        /// A bug in the control plane cost this command.
        INTERNAL = 27,
        /// The device is dead (its daemon went away): only releasing objects still works.
        DEVICE_FATAL = 28,
    }
}

/// A decoded reason, borrowed from the reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason<'a> {
    /// The rule broken.
    pub rule: Rule,
    /// The sentence: verb, attribute, rule and values.
    pub text: &'a str,
}

impl<'a> Reason<'a> {
    /// Parse a reason record (an error reply's whole body). Never panics.
    ///
    /// Errors: shorter than the header, nonzero reserved field, `text_len` disagreeing with
    /// the body or above [`MAX_REASON_TEXT`], text not UTF-8 → [`AbiError::BadReply`].
    pub fn parse(body: &'a [u8]) -> Result<Reason<'a>> {
        let (hdr, text) = ReasonHdr::read_from_prefix(body)
            .map_err(|_| AbiError::BadReply("reason shorter than its header"))?;
        if hdr.reserved != 0 {
            return Err(AbiError::BadReply("reason reserved field nonzero"));
        }
        let len = usize::from(hdr.text_len);
        if len != text.len() || len > MAX_REASON_TEXT {
            return Err(AbiError::BadReply(
                "reason text_len disagrees with the reply",
            ));
        }
        let text = core::str::from_utf8(text)
            .map_err(|_| AbiError::BadReply("reason text is not UTF-8"))?;
        Ok(Reason {
            rule: Rule(hdr.rule),
            text,
        })
    }

    /// Append the record for `rule` and `text` (cut to [`MAX_REASON_TEXT`] bytes at a
    /// character boundary) to `out`.
    pub fn encode(rule: Rule, text: &str, out: &mut Vec<u8>) {
        let text = truncate(text, MAX_REASON_TEXT);
        let hdr = ReasonHdr {
            rule: rule.0,
            text_len: text.len() as u16,
            reserved: 0,
        };
        out.extend_from_slice(hdr.as_bytes());
        out.extend_from_slice(text.as_bytes());
    }
}

impl core::fmt::Display for Reason<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{} [{}]", self.text, self.rule)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut out = Vec::new();
        Reason::encode(
            Rule::MISSING_ATTR,
            "modify_qp: INIT -> RTR: DEST_QPN missing",
            &mut out,
        );
        let r = Reason::parse(&out).unwrap();
        assert_eq!(r.rule, Rule::MISSING_ATTR);
        assert_eq!(r.text, "modify_qp: INIT -> RTR: DEST_QPN missing");
        assert_eq!(r.rule.name(), Some("MISSING_ATTR"));

        let long = "é".repeat(200);
        out.clear();
        Reason::encode(Rule::BAD_VALUE, &long, &mut out);
        let r = Reason::parse(&out).unwrap();
        assert!(r.text.len() <= MAX_REASON_TEXT && r.text.len() >= MAX_REASON_TEXT - 1);
        assert!(long.starts_with(r.text));

        assert!(Reason::parse(&out[..4]).is_err());
        assert!(Reason::parse(&out[..out.len() - 1]).is_err());
        let mut bad = out.clone();
        bad[4] = 1;
        assert!(Reason::parse(&bad).is_err());
        let mut bad = vec![0u8; 8];
        bad[2] = 1;
        bad.push(0xff);
        assert!(Reason::parse(&bad).is_err());
        assert_eq!(Rule(999).name(), None);
    }
}
