//! One error type for the ABI layer, with one mapping to an errno at the edge.
//!
//! The control plane answers every malformed command with an errno in the reply header
//! (see [`crate::cmd::ReplyHdr`]); it never panics on outside bytes. The errno values follow
//! what Linux `ib_uverbs_write()` / `verify_hdr()` return for the same fault
//! (docs/abi.md §1), so a later drop-in `libibverbs.so.1` can hand them to
//! applications unchanged.

use core::fmt;

/// A Linux errno value (x86-64 / generic numbering), always positive.
///
/// Open newtype: values without a named constant survive and print as a number.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(transparent)]
pub struct Errno(pub i32);

macro_rules! errnos {
    ($($name:ident = $v:expr, $doc:expr;)*) => {
        impl Errno {
            $(#[doc = $doc] pub const $name: Errno = Errno($v);)*
            /// The symbolic name (`"EINVAL"`), if this value has one here.
            pub fn name(self) -> Option<&'static str> {
                match self.0 {
                    $($v => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    EPERM = 1, "Operation not permitted.";
    ENOENT = 2, "No such object (e.g. unknown handle in some paths).";
    EIO = 5, "I/O error: the peer broke the shared-memory protocol.";
    EBADF = 9, "Bad file descriptor or handle.";
    EAGAIN = 11, "Try again.";
    ENOMEM = 12, "Out of memory; also \"queue full\" for post_send/post_recv (rxe, mlx5).";
    EACCES = 13, "Permission denied.";
    EFAULT = 14, "Bad address (memory not registered / not mapped).";
    EBUSY = 16, "Resource busy (e.g. PD still has objects).";
    EEXIST = 17, "Already exists.";
    EINVAL = 22, "Invalid argument: bad length, bad field, bad flags.";
    ENOSPC = 28, "Request or response buffer smaller than the core struct (uverbs verify_hdr).";
    ENOSYS = 38, "Function not implemented.";
    ENODATA = 61, "No data (e.g. empty GID table slot in _ibv_query_gid_ex).";
    EPROTO = 71, "Protocol error (malformed reply).";
    EOVERFLOW = 75, "Value too large.";
    EOPNOTSUPP = 95, "Operation not supported: unknown or unimplemented command (uapi_get_method).";
    EADDRINUSE = 98, "Address in use (a CM listener already has the service ID and address).";
    ETIMEDOUT = 110, "Timed out.";
}

impl Errno {
    /// The value `write()` on `/dev/infiniband/uverbsN` would return: `-errno`.
    pub fn as_negative(self) -> i32 {
        self.0.wrapping_neg()
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n}"),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Everything that can go wrong decoding, encoding or driving ABI structures.
///
/// Each variant says who erred; [`AbiError::errno`] is the single mapping to the errno the
/// control plane puts in its reply (or the library returns from a verb).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AbiError {
    /// Fewer bytes than a header or struct needs.
    #[error("truncated: {what} needs {need} bytes, have {have}")]
    Truncated {
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The length fields of a header disagree with the message length
    /// (`in_words * 4 != count`, or the extended-form equivalent).
    #[error("length mismatch: header says {declared} bytes, message has {actual}")]
    LengthMismatch {
        /// Length implied by the header.
        declared: usize,
        /// Actual message length.
        actual: usize,
    },
    /// The request is shorter than the core command struct (uverbs `verify_hdr` → ENOSPC).
    #[error("request too short for {what}: need {need} bytes, have {have}")]
    RequestTooShort {
        /// The core struct.
        what: &'static str,
        /// Its size.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The caller's response capacity (`out_words`) cannot hold the core response (ENOSPC).
    #[error("response buffer too small for {what}: need {need} bytes, offered {have}")]
    ResponseTooSmall {
        /// The core response struct.
        what: &'static str,
        /// Its size.
        need: usize,
        /// Capacity offered.
        have: usize,
    },
    /// Bits outside `IB_USER_VERBS_CMD_FLAG_EXTENDED | IB_USER_VERBS_CMD_COMMAND_MASK` set.
    #[error("bad command word {0:#010x}")]
    BadCommandWord(u32),
    /// A command number nobody defines (EOPNOTSUPP, like `uapi_get_method`).
    #[error("unknown command {number:#x} (extended: {extended})")]
    UnknownCommand {
        /// The command number (low 8 bits).
        number: u32,
        /// Whether the extended flag was set.
        extended: bool,
    },
    /// A command the ABI knows but uroce does not implement (EOPNOTSUPP).
    #[error("unsupported command {0}")]
    Unsupported(crate::cmd::Command),
    /// A field has a value the ABI forbids.
    #[error("invalid field {field}: {value:#x}")]
    InvalidField {
        /// Field name.
        field: &'static str,
        /// Offending value.
        value: u64,
    },
    /// A size computation overflowed (hostile counts).
    #[error("size overflow in {0}")]
    Overflow(&'static str),
    /// Data to encode does not fit the ABI's width (e.g. more than 0xffff words).
    #[error("too large to encode: {what} is {len} bytes")]
    TooLarge {
        /// What was being encoded.
        what: &'static str,
        /// Its length.
        len: usize,
    },
    /// The ring has no free slot (post_send/post_recv return ENOMEM, as rxe and mlx5 do).
    #[error("ring full")]
    RingFull,
    /// Read beyond what the producer published.
    #[error("ring empty")]
    RingEmpty,
    /// The other side wrote indices that violate the ring protocol.
    #[error("ring corrupt: producer {producer}, consumer {consumer}, slots {slots}")]
    RingCorrupt {
        /// Producer index seen.
        producer: u64,
        /// Consumer index seen.
        consumer: u64,
        /// Ring size.
        slots: u64,
    },
    /// An access outside a shared-memory region (a layout bug or a bad descriptor).
    #[error("out of bounds: offset {offset} len {len} in region of {region} bytes")]
    OutOfBounds {
        /// Offset of the access.
        offset: usize,
        /// Length of the access.
        len: usize,
        /// Region length.
        region: usize,
    },
    /// A pointer, offset or size is not aligned as the layout requires.
    #[error("misaligned {what}: {value:#x} not a multiple of {align}")]
    Misaligned {
        /// What was misaligned.
        what: &'static str,
        /// The value.
        value: u64,
        /// Required alignment.
        align: u64,
    },
    /// The reply header is malformed (library side).
    #[error("malformed reply: {0}")]
    BadReply(&'static str),
}

impl AbiError {
    /// The errno the control plane returns for this error (docs/abi.md §1).
    pub fn errno(&self) -> Errno {
        match self {
            AbiError::Truncated { .. }
            | AbiError::LengthMismatch { .. }
            | AbiError::BadCommandWord(_)
            | AbiError::InvalidField { .. }
            | AbiError::Overflow(_)
            | AbiError::TooLarge { .. }
            | AbiError::OutOfBounds { .. }
            | AbiError::Misaligned { .. } => Errno::EINVAL,
            AbiError::RequestTooShort { .. } | AbiError::ResponseTooSmall { .. } => Errno::ENOSPC,
            AbiError::UnknownCommand { .. } | AbiError::Unsupported(_) => Errno::EOPNOTSUPP,
            AbiError::RingFull => Errno::ENOMEM,
            AbiError::RingEmpty => Errno::EAGAIN,
            AbiError::RingCorrupt { .. } => Errno::EIO,
            AbiError::BadReply(_) => Errno::EPROTO,
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = AbiError> = core::result::Result<T, E>;
