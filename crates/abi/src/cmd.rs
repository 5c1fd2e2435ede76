//! Command framing: the Linux uverbs `write()` header, the extended header, and the reply.
//!
//! # Request (library → control plane), one message per command
//!
//! Exactly the bytes a provider would `write()` to `/dev/infiniband/uverbsN`
//! (docs/abi.md §1, kernel `uverbs_main.c` `verify_hdr`):
//!
//! ```text
//! legacy:   CmdHdr{command, in_words, out_words} | core request struct | driver data
//!           in_words  = total message length / 4, INCLUDING the 8-byte header
//!           out_words = response capacity / 4 (core response + driver response)
//! extended: CmdHdr | ExCmdHdr{response, provider_in_words, provider_out_words, reserved=0}
//!           | core request (in_words * 8 bytes) | driver data (provider_in_words * 8 bytes)
//!           all four counts are 8-byte words EXCLUDING both headers
//! ```
//!
//! `command` = command number (bits 7..0) | optional [`CMD_FLAG_EXTENDED`]; any other bit is
//! EINVAL. The `response` field (the first `u64` of most legacy core structs, and the one in
//! [`ExCmdHdr`]) is a user pointer in the kernel ABI. **We carry it but ignore it**: the
//! channel is a socket, so there is no address to write into; the response travels back in
//! the reply message instead. Libraries should set it to 0.
//!
//! # Reply (control plane → library), exactly one per request
//!
//! ```text
//! ReplyHdr{command (echo of the request's command word), status, resp_len, reserved=0}
//! | response bytes (resp_len): core response struct | driver response data
//! ```
//!
//! * `status` = 0 on success, otherwise `-errno` — the value `write()` would have returned.
//!   On error `resp_len` is 0, or the body is one reason record ([`crate::reason`]): which
//!   rule the command broke, as a code and a sentence. The reason is not bounded by the
//!   capacity the request offered, only by [`crate::reason::MAX_REASON_BYTES`].
//! * `resp_len` ≤ the capacity the request offered (`out_words * 4`, or
//!   `(out_words + provider_out_words) * 8`). The control plane truncates a longer response
//!   to the capacity, as `copy_to_user` of `min(out_len, resp_len)` does; the library treats a
//!   shorter one as zero-filled (the kernel clears the unused tail of the core response).
//! * Commands without a response (DEALLOC_PD, DEREG_MR, REQ_NOTIFY_CQ, MODIFY_QP, MODIFY_SRQ,
//!   DESTROY_AH) still get a reply header, with `resp_len` 0.
//!
//! The channel carries one outstanding command at a time (request, then its reply); a
//! library with several threads serializes them, so no tag is needed. The control plane
//! accepts only GET_CONTEXT until a GET_CONTEXT has succeeded (§1).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{AbiError, Errno, Result};
use crate::reason::{Reason, Rule};

/// `IB_USER_VERBS_ABI_VERSION`: the uverbs ABI these structs follow.
pub const IB_USER_VERBS_ABI_VERSION: u32 = 6;

/// `IB_USER_VERBS_CMD_COMMAND_MASK`: the command number's bits in the command word.
pub const CMD_COMMAND_MASK: u32 = 0xff;

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`: the extended-form flag in the command word.
pub const CMD_FLAG_EXTENDED: u32 = 0x8000_0000;

/// The largest request the framing can describe: both headers plus `in_words` and
/// `provider_in_words` at their u16 maximum of 8-byte words (a legacy request is at most
/// `0xffff * 4` bytes). A socket reader sizes its buffer with this.
pub const MAX_REQUEST_BYTES: usize = CmdHdr::SIZE + ExCmdHdr::SIZE + 2 * 0xffff * 8;

/// The largest reply: header plus the largest response capacity a request can offer.
pub const MAX_REPLY_BYTES: usize = ReplyHdr::SIZE + 2 * 0xffff * 8;

/// The first 8 bytes of every command (`struct ib_uverbs_cmd_hdr`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct CmdHdr {
    /// Command number | flags.
    pub command: u32,
    /// Legacy: total words (4 B) including this header. Extended: core request words (8 B).
    pub in_words: u16,
    /// Legacy: response capacity in 4-byte words. Extended: core response words (8 B).
    pub out_words: u16,
}

impl CmdHdr {
    /// Size in bytes.
    pub const SIZE: usize = 8;
}

/// The extended-form second header (`struct ib_uverbs_ex_cmd_hdr`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ExCmdHdr {
    /// User pointer in the kernel ABI; carried but ignored here (see module docs).
    pub response: u64,
    /// Driver request data, in 8-byte words.
    pub provider_in_words: u16,
    /// Driver response capacity, in 8-byte words.
    pub provider_out_words: u16,
    /// Must be 0 (EINVAL otherwise, like `verify_hdr`).
    pub cmd_hdr_reserved: u32,
}

impl ExCmdHdr {
    /// Size in bytes.
    pub const SIZE: usize = 16;
}

/// The header of every reply message (ours; the kernel answers through `write()`'s return
/// value and the user's response buffer instead).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct ReplyHdr {
    /// The request's command word, echoed (lets `uroce trace` pair replies with requests).
    pub command: u32,
    /// 0 on success, otherwise `-errno`.
    pub status: i32,
    /// Bytes of response following this header.
    pub resp_len: u32,
    /// Must be 0.
    pub reserved: u32,
}

impl ReplyHdr {
    /// Size in bytes.
    pub const SIZE: usize = 16;
}

const _: () = assert!(core::mem::size_of::<CmdHdr>() == CmdHdr::SIZE);
const _: () = assert!(core::mem::size_of::<ExCmdHdr>() == ExCmdHdr::SIZE);
const _: () = assert!(core::mem::size_of::<ReplyHdr>() == ReplyHdr::SIZE);
const _: () = assert!(core::mem::offset_of!(CmdHdr, in_words) == 4);
const _: () = assert!(core::mem::offset_of!(CmdHdr, out_words) == 6);
const _: () = assert!(core::mem::offset_of!(ExCmdHdr, provider_in_words) == 8);
const _: () = assert!(core::mem::offset_of!(ExCmdHdr, cmd_hdr_reserved) == 12);

open_enum! {
    /// A command number (`IB_USER_VERBS_CMD_*`, docs/abi.md §2) — the command word's low
    /// 8 bits. Whether the extended flag was set is carried separately.
    ///
    /// Numbers `0x80..=0xff` are **uroce driver-private** commands (prefix `UROCE_`): the kernel
    /// defines none there (legacy numbers end at 40, extended at 57), and they cover what the
    /// kernel answers through sysfs or ioctl instead of `write()`.
    pub struct Command(u32) {
        /// `ib_uverbs_get_context`.
        GET_CONTEXT = 0,
        /// `ib_uverbs_query_device`.
        QUERY_DEVICE = 1,
        /// `ib_uverbs_query_port`.
        QUERY_PORT = 2,
        /// `ib_uverbs_alloc_pd`.
        ALLOC_PD = 3,
        /// `ib_uverbs_dealloc_pd`.
        DEALLOC_PD = 4,
        /// `ib_uverbs_create_ah`.
        CREATE_AH = 5,
        /// Not supported.
        MODIFY_AH = 6,
        /// Not supported.
        QUERY_AH = 7,
        /// `ib_uverbs_destroy_ah`.
        DESTROY_AH = 8,
        /// `ib_uverbs_reg_mr`.
        REG_MR = 9,
        /// Not supported.
        REG_SMR = 10,
        /// `ib_uverbs_rereg_mr`.
        REREG_MR = 11,
        /// Not supported.
        QUERY_MR = 12,
        /// `ib_uverbs_dereg_mr`.
        DEREG_MR = 13,
        /// `ib_uverbs_alloc_mw`.
        ALLOC_MW = 14,
        /// Not supported.
        BIND_MW = 15,
        /// `ib_uverbs_dealloc_mw`.
        DEALLOC_MW = 16,
        /// `ib_uverbs_create_comp_channel`.
        CREATE_COMP_CHANNEL = 17,
        /// `ib_uverbs_create_cq`.
        CREATE_CQ = 18,
        /// `ib_uverbs_resize_cq`.
        RESIZE_CQ = 19,
        /// `ib_uverbs_destroy_cq`.
        DESTROY_CQ = 20,
        /// `ib_uverbs_poll_cq` (slow-path polling; the fast path reads the CQ ring).
        POLL_CQ = 21,
        /// Not supported.
        PEEK_CQ = 22,
        /// `ib_uverbs_req_notify_cq`.
        REQ_NOTIFY_CQ = 23,
        /// `ib_uverbs_create_qp`.
        CREATE_QP = 24,
        /// `ib_uverbs_query_qp`.
        QUERY_QP = 25,
        /// `ib_uverbs_modify_qp`.
        MODIFY_QP = 26,
        /// `ib_uverbs_destroy_qp`.
        DESTROY_QP = 27,
        /// `ib_uverbs_post_send` (slow path; the fast path writes the SQ ring).
        POST_SEND = 28,
        /// `ib_uverbs_post_recv` (slow path).
        POST_RECV = 29,
        /// Not supported.
        ATTACH_MCAST = 30,
        /// Not supported.
        DETACH_MCAST = 31,
        /// `ib_uverbs_create_srq`.
        CREATE_SRQ = 32,
        /// `ib_uverbs_modify_srq`.
        MODIFY_SRQ = 33,
        /// `ib_uverbs_query_srq`.
        QUERY_SRQ = 34,
        /// `ib_uverbs_destroy_srq`.
        DESTROY_SRQ = 35,
        /// `ib_uverbs_post_srq_recv` (slow path).
        POST_SRQ_RECV = 36,
        /// Not supported.
        OPEN_XRCD = 37,
        /// Not supported.
        CLOSE_XRCD = 38,
        /// Not supported.
        CREATE_XSRQ = 39,
        /// Not supported.
        OPEN_QP = 40,
        /// Extended only; not supported.
        CREATE_FLOW = 50,
        /// Extended only; not supported.
        DESTROY_FLOW = 51,
        /// Extended only; not supported.
        CREATE_WQ = 52,
        /// Extended only; not supported.
        MODIFY_WQ = 53,
        /// Extended only; not supported.
        DESTROY_WQ = 54,
        /// Extended only; not supported.
        CREATE_RWQ_IND_TBL = 55,
        /// Extended only; not supported.
        DESTROY_RWQ_IND_TBL = 56,
        /// Extended only; not supported.
        MODIFY_CQ = 57,
        /// uroce driver-private: read one GID table entry and its type
        /// ([`crate::uverbs::QueryGid`]). The kernel serves this through sysfs / the
        /// `QUERY_GID_ENTRY` ioctl.
        UROCE_QUERY_GID = 0x80,
        /// uroce driver-private: read one P_Key table entry ([`crate::uverbs::QueryPkey`]).
        /// The kernel serves this through sysfs.
        UROCE_QUERY_PKEY = 0x81,
        /// uroce driver-private: the device's Communication Manager
        /// ([`crate::uverbs::CmCmd`]; the kernel's `ib_ucm`/`rdma_ucm` character devices).
        UROCE_CM = 0x82,
    }
}

impl Command {
    /// First number of the uroce driver-private range.
    pub const DRIVER_PRIVATE_FIRST: u32 = 0x80;

    /// Whether this number is in the uroce driver-private range.
    pub fn is_driver_private(self) -> bool {
        self.0 >= Self::DRIVER_PRIVATE_FIRST
    }

    /// The command word for a legacy request.
    pub fn word(self) -> u32 {
        self.0 & CMD_COMMAND_MASK
    }

    /// The command word for an extended request.
    pub fn ex_word(self) -> u32 {
        (self.0 & CMD_COMMAND_MASK) | CMD_FLAG_EXTENDED
    }
}

/// A request message with its headers checked and its payload located, before the payload
/// is decoded. After [`Frame::parse`] succeeds, no accessor can panic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The first header.
    pub hdr: CmdHdr,
    /// The command number.
    pub command: Command,
    /// The extended header, if the extended flag was set.
    pub ex: Option<ExCmdHdr>,
    /// Legacy: everything after [`CmdHdr`] (core struct + driver data).
    /// Extended: the core request (`in_words * 8` bytes).
    pub core: &'a [u8],
    /// Legacy: empty (the split depends on the command's core struct size; see
    /// [`crate::uverbs::Request::decode`]). Extended: the driver data.
    pub driver: &'a [u8],
}

impl<'a> Frame<'a> {
    /// Check a request's headers against its length, as `ib_uverbs_write()` +
    /// `verify_hdr()` do, and locate its payload.
    ///
    /// Errors: shorter than a header, bad command bits, length mismatch, nonzero
    /// `cmd_hdr_reserved` → EINVAL (docs/abi.md §1).
    pub fn parse(bytes: &'a [u8]) -> Result<Frame<'a>> {
        let (hdr, rest) = CmdHdr::read_from_prefix(bytes).map_err(|_| AbiError::Truncated {
            what: "ib_uverbs_cmd_hdr",
            need: CmdHdr::SIZE,
            have: bytes.len(),
        })?;
        if hdr.command & !(CMD_FLAG_EXTENDED | CMD_COMMAND_MASK) != 0 {
            return Err(AbiError::BadCommandWord(hdr.command));
        }
        let command = Command(hdr.command & CMD_COMMAND_MASK);
        if hdr.command & CMD_FLAG_EXTENDED == 0 {
            let declared = usize::from(hdr.in_words) * 4;
            if declared != bytes.len() {
                return Err(AbiError::LengthMismatch {
                    declared,
                    actual: bytes.len(),
                });
            }
            return Ok(Frame {
                hdr,
                command,
                ex: None,
                core: rest,
                driver: &[],
            });
        }
        let (ex, rest) = ExCmdHdr::read_from_prefix(rest).map_err(|_| AbiError::Truncated {
            what: "ib_uverbs_ex_cmd_hdr",
            need: CmdHdr::SIZE + ExCmdHdr::SIZE,
            have: bytes.len(),
        })?;
        let core_len = usize::from(hdr.in_words) * 8;
        let declared = core_len + usize::from(ex.provider_in_words) * 8;
        if declared != rest.len() {
            return Err(AbiError::LengthMismatch {
                declared: declared + CmdHdr::SIZE + ExCmdHdr::SIZE,
                actual: bytes.len(),
            });
        }
        if ex.cmd_hdr_reserved != 0 {
            return Err(AbiError::InvalidField {
                field: "cmd_hdr_reserved",
                value: u64::from(ex.cmd_hdr_reserved),
            });
        }
        let (core, driver) = rest.split_at(core_len);
        Ok(Frame {
            hdr,
            command,
            ex: Some(ex),
            core,
            driver,
        })
    }

    /// Whether the extended flag was set.
    pub fn is_extended(&self) -> bool {
        self.ex.is_some()
    }

    /// Total response capacity the caller offered, in bytes (core + driver).
    pub fn response_capacity(&self) -> usize {
        match self.ex {
            None => usize::from(self.hdr.out_words) * 4,
            Some(ex) => (usize::from(self.hdr.out_words) + usize::from(ex.provider_out_words)) * 8,
        }
    }
}

/// Build a legacy request: header + `core` + `driver`. `resp_capacity` is the response
/// buffer the caller offers (core + driver response), rounded up to 4-byte words.
///
/// Errors: lengths not a multiple of 4, or too large for the u16 word counts.
pub fn encode_legacy(
    command: Command,
    core: &[u8],
    driver: &[u8],
    resp_capacity: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let total = CmdHdr::SIZE + core.len() + driver.len();
    if total % 4 != 0 {
        return Err(AbiError::Misaligned {
            what: "legacy request length",
            value: total as u64,
            align: 4,
        });
    }
    let in_words = u16::try_from(total / 4).map_err(|_| AbiError::TooLarge {
        what: "request",
        len: total,
    })?;
    let out_words = u16::try_from(resp_capacity.div_ceil(4)).map_err(|_| AbiError::TooLarge {
        what: "response capacity",
        len: resp_capacity,
    })?;
    let hdr = CmdHdr {
        command: command.word(),
        in_words,
        out_words,
    };
    out.clear();
    out.reserve(total);
    out.extend_from_slice(hdr.as_bytes());
    out.extend_from_slice(core);
    out.extend_from_slice(driver);
    Ok(())
}

/// Build an extended request. `core` and `driver` must be multiples of 8 bytes; capacities
/// are rounded up to 8-byte words. `response` is written as 0 (it is ignored).
pub fn encode_extended(
    command: Command,
    core: &[u8],
    driver: &[u8],
    core_resp_capacity: usize,
    driver_resp_capacity: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let words8 = |what: &'static str, len: usize, exact: bool| -> Result<u16> {
        if exact && len % 8 != 0 {
            return Err(AbiError::Misaligned {
                what,
                value: len as u64,
                align: 8,
            });
        }
        u16::try_from(len.div_ceil(8)).map_err(|_| AbiError::TooLarge { what, len })
    };
    let hdr = CmdHdr {
        command: command.ex_word(),
        in_words: words8("core request", core.len(), true)?,
        out_words: words8("core response", core_resp_capacity, false)?,
    };
    let ex = ExCmdHdr {
        response: 0,
        provider_in_words: words8("driver request", driver.len(), true)?,
        provider_out_words: words8("driver response", driver_resp_capacity, false)?,
        cmd_hdr_reserved: 0,
    };
    out.clear();
    out.extend_from_slice(hdr.as_bytes());
    out.extend_from_slice(ex.as_bytes());
    out.extend_from_slice(core);
    out.extend_from_slice(driver);
    Ok(())
}

/// A decoded reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply<'a> {
    /// The echoed command word.
    pub command: u32,
    /// The response bytes, or the errno.
    pub result: core::result::Result<&'a [u8], Errno>,
    /// Why the command was refused, if the control plane said (error replies only).
    pub reason: Option<Reason<'a>>,
}

impl<'a> Reply<'a> {
    /// Parse a reply message (library side). The control plane is trusted less than a kernel
    /// would be, so this checks everything and never panics.
    pub fn parse(bytes: &'a [u8]) -> Result<Reply<'a>> {
        let (hdr, rest) = ReplyHdr::read_from_prefix(bytes)
            .map_err(|_| AbiError::BadReply("shorter than the reply header"))?;
        if hdr.reserved != 0 {
            return Err(AbiError::BadReply("reserved field nonzero"));
        }
        if usize::try_from(hdr.resp_len).ok() != Some(rest.len()) {
            return Err(AbiError::BadReply(
                "resp_len disagrees with the message length",
            ));
        }
        let (result, reason) = match hdr.status {
            0 => (Ok(rest), None),
            s if s < 0 => {
                let reason = if rest.is_empty() {
                    None
                } else {
                    Some(Reason::parse(rest)?)
                };
                (Err(Errno(s.wrapping_neg())), reason)
            }
            _ => return Err(AbiError::BadReply("positive status")),
        };
        Ok(Reply {
            command: hdr.command,
            result,
            reason,
        })
    }
}

/// Build a reply. On success the response is the concatenation of `parts` (core response,
/// then driver data), truncated to `capacity` bytes (the request's
/// [`Frame::response_capacity`]).
pub fn encode_reply(
    command_word: u32,
    result: core::result::Result<&[&[u8]], Errno>,
    capacity: usize,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(ReplyHdr::default().as_bytes());
    let status = match result {
        Ok(parts) => {
            for p in parts {
                let room = capacity.saturating_sub(out.len() - ReplyHdr::SIZE);
                out.extend_from_slice(p.get(..room).unwrap_or(p));
            }
            0
        }
        Err(e) => e.as_negative(),
    };
    let resp_len = u32::try_from(out.len() - ReplyHdr::SIZE).unwrap_or(u32::MAX);
    let hdr = ReplyHdr {
        command: command_word,
        status,
        resp_len,
        reserved: 0,
    };
    if let Some(h) = out.get_mut(..ReplyHdr::SIZE) {
        h.copy_from_slice(hdr.as_bytes());
    }
}

/// Build an error reply that says why: `-errno` and one reason record ([`crate::reason`]).
pub fn encode_refusal(command_word: u32, errno: Errno, rule: Rule, text: &str, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(ReplyHdr::default().as_bytes());
    Reason::encode(rule, text, out);
    let hdr = ReplyHdr {
        command: command_word,
        status: errno.as_negative(),
        resp_len: (out.len() - ReplyHdr::SIZE) as u32,
        reserved: 0,
    };
    if let Some(h) = out.get_mut(..ReplyHdr::SIZE) {
        h.copy_from_slice(hdr.as_bytes());
    }
}
