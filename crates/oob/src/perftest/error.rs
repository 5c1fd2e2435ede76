//! Why a perftest exchange stopped, with perftest's own stderr text as `Display`.

use std::fmt;

use super::config::Role;
use super::msg::MsgError;

/// The call-site line(s) perftest prints after a failed exchange, and whether the failure
/// ends the program with an error (send tests carry on after a failed CLOSE and exit 0).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Context {
    /// perftest's text (without the final newline).
    pub text: &'static str,
    /// Whether perftest exits with status 1.
    pub fatal: bool,
}

impl Context {
    const fn fatal(text: &'static str) -> Context {
        Context { text, fatal: true }
    }

    const fn nonfatal(text: &'static str) -> Context {
        Context { text, fatal: false }
    }
}

// Call-site texts from perftest 4.5-0.17 (`*_bw.c`, `*_lat.c`, `perftest_communication.c`).
// The leading space differs between call sites; docs/perftest.md §3 notes this.
pub(crate) const X: Context = Context::fatal("Failed to exchange data between server and clients");
pub(crate) const X_SP: Context =
    Context::fatal(" Failed to exchange data between server and clients");
pub(crate) const SYNC: Context =
    Context::fatal("Failed to sync between server and client between different msg sizes");
pub(crate) const PAGE: Context =
    Context::fatal(" Failed to exchange Page Size data between server and client");
pub(crate) const CACHE: Context =
    Context::fatal(" Failed to exchange Cache Line Size data between server and client");
pub(crate) const CLOSE: Context =
    Context::fatal("Failed to close connection between server and client");
pub(crate) const CLOSE_SEND_BW: Context = Context::nonfatal(
    " Failed to close connection between server and client\n Trying to close this side resources",
);
pub(crate) const CLOSE_SEND_LAT: Context = Context::nonfatal(
    "Failed to close connection between server and client\n Trying to close this side resources",
);

/// Which reader/writer perftest would have used: KEY messages go through
/// `ethernet_{read,write}_keys`, everything else through `ethernet_{read,write}_data`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MsgClass {
    /// KEY (INIT, SYNC, CLOSE included).
    Keys,
    /// VERSION, CYCLE_BUFFER, CACHE_LINE, MTU, REPORT.
    Data,
    /// DONE.
    Done,
}

/// Why a perftest exchange failed. `Display` gives the lines perftest writes to stderr in
/// the same situation (without the final newline), so a caller can `eprintln!("{e}")`.
#[derive(Debug)]
pub enum PerftestError {
    /// A read ended before the whole message arrived (the peer closed, sent a short
    /// message and closed, or the socket failed). perftest fails the same way on a short
    /// `read()` (docs/perftest.md §3).
    Read {
        /// KEY or data message.
        class: MsgClass,
        /// This side's role.
        role: Role,
        /// Call site.
        context: Context,
        /// Bytes received before the end.
        got: usize,
        /// Message length.
        want: usize,
        /// The I/O error, if it was one (None: the peer closed).
        cause: Option<String>,
    },
    /// A write failed.
    Write {
        /// KEY, data or DONE message.
        class: MsgClass,
        /// This side's role.
        role: Role,
        /// Call site.
        context: Context,
        /// The I/O error.
        cause: String,
    },
    /// The peer's KEY message does not parse (perftest would misread it or crash).
    BadKey {
        /// This side's role.
        role: Role,
        /// Call site.
        context: Context,
        /// What is wrong.
        error: MsgError,
    },
    /// The peer's version is below 5.70 (or, with `--dont_xchg_versions`, unknown).
    VersionTooOld {
        /// The peer's version text.
        peer: String,
    },
    /// QP0's GIDs differ in being IPv4-mapped (docs/perftest.md §3 "GID type").
    GidTypeMismatch,
    /// UD with an explicit `-s` above the negotiated MTU (`check_mtu`).
    UdSizeAboveMtu {
        /// The negotiated MTU in bytes.
        mtu: u64,
    },
    /// The caller could not bring its QPs to RTR/RTS with the peer's values.
    Connect(String),
    /// Another caller-side step failed (resource setup, the measurement).
    Local(String),
    /// The exchange was driven out of order (a bug in the caller).
    Misuse(&'static str),
}

impl PerftestError {
    /// The exit status perftest ends with after this failure: 1, except a failed CLOSE in
    /// the send tests, after which perftest carries on and exits 0.
    pub fn exit_status(&self) -> i32 {
        match self {
            PerftestError::Read { context, .. } | PerftestError::Write { context, .. }
                if !context.fatal =>
            {
                0
            }
            _ => 1,
        }
    }
}

fn rw_line(role: Role, read: bool) -> &'static str {
    match (read, role) {
        (true, Role::Client) => " Unable to read from socket/rdma_cm",
        (true, Role::Server) => " Unable to read to socket/rdma_cm",
        (false, Role::Client) => " Unable to write to socket/rdma_cm",
        (false, Role::Server) => " Unable to write from socket/rdma_cm",
    }
}

impl fmt::Display for PerftestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PerftestError::Read {
                class,
                role,
                context,
                ..
            } => {
                let first = match class {
                    MsgClass::Keys | MsgClass::Done => {
                        "ethernet_read_keys: Couldn't read remote address"
                    }
                    MsgClass::Data => "ethernet_read_data: Couldn't read reports",
                };
                write!(f, "{first}\n{}\n{}", rw_line(*role, true), context.text)
            }
            PerftestError::Write {
                class,
                role,
                context,
                cause,
            } => match class {
                MsgClass::Keys => write!(
                    f,
                    "client write: {cause}\nCouldn't send local address\n{}\n{}",
                    rw_line(*role, false),
                    context.text
                ),
                MsgClass::Data => write!(
                    f,
                    "client write: {cause}\nCouldn't send reports\n{}\n{}",
                    rw_line(*role, false),
                    context.text
                ),
                MsgClass::Done => write!(
                    f,
                    " Client write: {cause}\nCouldn't write to socket\n{}",
                    context.text
                ),
            },
            PerftestError::BadKey {
                role,
                context,
                error,
            } => write!(
                f,
                "ethernet_read_keys: Couldn't parse remote address ({error})\n{}\n{}",
                rw_line(*role, true),
                context.text
            ),
            PerftestError::VersionTooOld { .. } => f.write_str(
                "Current implementation is not compatible with versions older than 5.70",
            ),
            PerftestError::GidTypeMismatch => f.write_str(
                "\n Found Incompatibility issue with GID types.\n Please Try to use a different IP version.\n",
            ),
            PerftestError::UdSizeAboveMtu { .. } => f.write_str(
                " Max message size in UD cannot be greater than MTU \n Couldn't get context for the device",
            ),
            PerftestError::Connect(msg) => {
                write!(f, "{msg}\n Unable to Connect the HCA's through the link")
            }
            PerftestError::Local(msg) => f.write_str(msg),
            PerftestError::Misuse(what) => write!(f, "perftest exchange driven out of order: {what}"),
        }
    }
}

impl std::error::Error for PerftestError {}
