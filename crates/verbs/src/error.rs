//! One error type for the verbs layer.
//!
//! Every failing verb returns an [`Error`] that says which verb failed, who erred
//! ([`ErrorKind`]), and the errno a C `libibverbs` would have returned for the same fault,
//! so the drop-in C library of a later issue maps it with [`Error::errno`] and nothing else.
//! Completion errors (LOC_PROT_ERR, REM_ACCESS_ERR, …) are not [`Error`]s: they arrive as
//! work completions with a [`crate::WcStatus`], exactly as in libibverbs.

use core::fmt;
use std::io;

use abi::{AbiError, Errno, Rule};

/// Who erred.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The control plane (the "kernel") refused the command and returned this errno — a
    /// bad handle, an illegal attribute or transition, a resource limit.
    ControlPlane,
    /// The library refused the call before it reached the device: bad argument, posting
    /// in the wrong QP state, queue full (rdma-core providers check the same things).
    Local,
    /// The command channel to the control plane failed (the device went away).
    Channel,
    /// The other side broke the ABI: a malformed reply, a ring index that violates the
    /// ring protocol.
    Protocol,
}

/// A failed verb: which one, who erred, the errno, a message, and — when the control plane
/// refused it — the rule it broke ([`Error::reason`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    op: &'static str,
    kind: ErrorKind,
    errno: Errno,
    detail: Option<String>,
    /// Boxed: most errors have none, and `Error` travels inside other results.
    reason: Option<Box<Reason>>,
}

/// Why the control plane refused a command: the rule broken (stable, for programs) and a
/// sentence naming the attribute and the values (for people), e.g. rule
/// [`Rule::MISSING_ATTR`] with "modify_qp: INIT -> RTR: DEST_QPN missing from attr_mask".
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reason {
    rule: Rule,
    text: String,
}

impl Reason {
    /// The rule broken.
    pub fn rule(&self) -> Rule {
        self.rule
    }

    /// The sentence: verb, attribute, rule and values.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} [{}]", self.text, self.rule)
    }
}

impl Error {
    /// An error the control plane returned for command `op`.
    pub(crate) fn control_plane(op: &'static str, errno: Errno) -> Error {
        Error {
            op,
            kind: ErrorKind::ControlPlane,
            errno,
            detail: None,
            reason: None,
        }
    }

    /// This error with the control plane's reason attached.
    pub(crate) fn with_reason(mut self, rule: Rule, text: &str) -> Error {
        self.reason = Some(Box::new(Reason {
            rule,
            text: text.to_owned(),
        }));
        self
    }

    /// A local refusal before anything reached the device — for layers built on this
    /// crate (the C library, the facade) to report bad arguments the same way.
    pub fn local(op: &'static str, errno: Errno, detail: impl Into<String>) -> Error {
        Error {
            op,
            kind: ErrorKind::Local,
            errno,
            detail: Some(detail.into()),
            reason: None,
        }
    }

    /// A failure of the command channel.
    pub(crate) fn channel(op: &'static str, e: &io::Error) -> Error {
        Error {
            op,
            kind: ErrorKind::Channel,
            errno: Errno(e.raw_os_error().unwrap_or(Errno::EIO.0)),
            detail: Some(e.to_string()),
            reason: None,
        }
    }

    /// The other side broke the protocol.
    pub(crate) fn protocol(op: &'static str, detail: impl Into<String>) -> Error {
        Error {
            op,
            kind: ErrorKind::Protocol,
            errno: Errno::EIO,
            detail: Some(detail.into()),
            reason: None,
        }
    }

    /// An ABI-layer error: ring full/empty and bad arguments are local, the rest protocol.
    pub(crate) fn abi(op: &'static str, e: &AbiError) -> Error {
        let kind = match e {
            AbiError::RingCorrupt { .. } | AbiError::BadReply(_) => ErrorKind::Protocol,
            _ => ErrorKind::Local,
        };
        Error {
            op,
            kind,
            errno: e.errno(),
            detail: Some(e.to_string()),
            reason: None,
        }
    }

    /// The verb that failed (`"create_qp"`, `"post_send"`, …).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// Who erred.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The errno a C libibverbs returns for this fault (positive, e.g. `Errno::EINVAL`).
    pub fn errno(&self) -> Errno {
        self.errno
    }

    /// Why the control plane refused the command, if it said (refusals of the control plane
    /// only; local, channel and protocol errors have [`Error::detail`] instead).
    pub fn reason(&self) -> Option<&Reason> {
        self.reason.as_deref()
    }

    /// The library's own explanation of a local, channel or protocol error.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }
}

fn strerror(e: Errno) -> &'static str {
    match e {
        Errno::EPERM => "operation not permitted",
        Errno::ENOENT => "no such object",
        Errno::EIO => "I/O error",
        Errno::EBADF => "bad file descriptor or handle",
        Errno::EAGAIN => "try again",
        Errno::ENOMEM => "out of memory or queue full",
        Errno::EACCES => "permission denied",
        Errno::EFAULT => "bad address",
        Errno::EBUSY => "resource busy",
        Errno::EEXIST => "already exists",
        Errno::EINVAL => "invalid argument",
        Errno::ENOSPC => "no space",
        Errno::ENOSYS => "not implemented",
        Errno::ENODATA => "no data",
        Errno::EPROTO => "protocol error",
        Errno::EOVERFLOW => "value too large",
        Errno::EOPNOTSUPP => "operation not supported",
        Errno::ETIMEDOUT => "timed out",
        _ => "error",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = match self.kind {
            ErrorKind::ControlPlane => "returned by the control plane",
            ErrorKind::Local => "rejected by the library",
            ErrorKind::Channel => "command channel failed",
            ErrorKind::Protocol => "device broke the ABI",
        };
        write!(
            f,
            "{}: {} ({}), {who}",
            self.op,
            self.errno,
            strerror(self.errno)
        )?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        if let Some(r) = &self.reason {
            write!(f, ": {r}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(io::Error::from_raw_os_error(e.errno.0).kind(), e)
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// A post list that was not posted entirely: `ibv_post_send`'s `bad_wr`.
///
/// WRs `0..index` were posted (and their doorbell rung); `index` and the ones after it
/// were not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PostError {
    /// Index in the slice of the first WR that was not posted.
    pub index: usize,
    /// Why it was not.
    pub error: Error,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work request {} not posted: {}", self.index, self.error)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Error {
        e.error
    }
}

impl From<PostError> for io::Error {
    fn from(e: PostError) -> io::Error {
        e.error.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_verb_errno_and_culprit() {
        let e = Error::control_plane("create_qp", Errno::EINVAL);
        assert_eq!(
            e.to_string(),
            "create_qp: EINVAL (invalid argument), returned by the control plane"
        );
        assert_eq!(e.errno(), Errno::EINVAL);
        assert_eq!(e.reason(), None);
        let e = e.with_reason(
            Rule::OVER_LIMIT,
            "create_qp: max_send_wr 70000 > max_qp_wr 16384",
        );
        assert_eq!(
            e.to_string(),
            "create_qp: EINVAL (invalid argument), returned by the control plane: \
             create_qp: max_send_wr 70000 > max_qp_wr 16384 [OVER_LIMIT]"
        );
        assert_eq!(e.reason().map(Reason::rule), Some(Rule::OVER_LIMIT));
        let e = Error::abi("post_send", &AbiError::RingFull);
        assert_eq!(e.errno(), Errno::ENOMEM);
        assert_eq!(e.kind(), ErrorKind::Local);
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::OutOfMemory);
    }
}
