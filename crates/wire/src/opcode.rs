//! BTH opcodes and the one table that describes them (docs/wire.md §2).
//!
//! Like rxe's `rxe_opcode[]`, a single static table says, for every opcode we speak, which
//! extension headers follow the BTH and in which order, the total header length, the packet's
//! position in its message, and what the responder does with it. The packet parser and builder
//! ([`crate::roce`]) and the transport layer read only this table; nothing else matches on
//! opcode numbers.
//!
//! Covered: RC 0x00–0x14, 0x16, 0x17; UC 0x20–0x2B; UD 0x64, 0x65; XRC 0xA0–0xB4, 0xB6, 0xB7
//! (RC's opcodes in class 0b101, requests with an XRCETH right after the BTH; docs/wire.md
//! §2.8); RoCEv2 CNP 0x81 (BTH + 16 reserved bytes, docs/wire.md §2.5 / §9.2). Not covered
//! (parsed as unknown): RD, FLUSH,
//! ATOMIC_WRITE, the native-IB CNP 0x80 and manufacturer-specific opcodes.

use core::fmt;

use crate::bth;

/// A BTH opcode. Open newtype: values outside the table survive a round trip and print in hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Opcode(pub u8);

impl Opcode {
    pub const RC_SEND_FIRST: Opcode = Opcode(0x00);
    pub const RC_SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const RC_SEND_LAST: Opcode = Opcode(0x02);
    pub const RC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x03);
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    pub const RC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x05);
    pub const RC_RDMA_WRITE_FIRST: Opcode = Opcode(0x06);
    pub const RC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const RC_RDMA_WRITE_LAST: Opcode = Opcode(0x08);
    pub const RC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x09);
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    pub const RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x0B);
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    pub const RC_RDMA_READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    pub const RC_RDMA_READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    pub const RC_RDMA_READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    pub const RC_RDMA_READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const RC_COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const RC_FETCH_ADD: Opcode = Opcode(0x14);
    pub const RC_SEND_LAST_WITH_INVALIDATE: Opcode = Opcode(0x16);
    pub const RC_SEND_ONLY_WITH_INVALIDATE: Opcode = Opcode(0x17);

    pub const UC_SEND_FIRST: Opcode = Opcode(0x20);
    pub const UC_SEND_MIDDLE: Opcode = Opcode(0x21);
    pub const UC_SEND_LAST: Opcode = Opcode(0x22);
    pub const UC_SEND_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x23);
    pub const UC_SEND_ONLY: Opcode = Opcode(0x24);
    pub const UC_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x25);
    pub const UC_RDMA_WRITE_FIRST: Opcode = Opcode(0x26);
    pub const UC_RDMA_WRITE_MIDDLE: Opcode = Opcode(0x27);
    pub const UC_RDMA_WRITE_LAST: Opcode = Opcode(0x28);
    pub const UC_RDMA_WRITE_LAST_WITH_IMMEDIATE: Opcode = Opcode(0x29);
    pub const UC_RDMA_WRITE_ONLY: Opcode = Opcode(0x2A);
    pub const UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x2B);

    pub const XRC_SEND_ONLY: Opcode = Opcode(0xA4);
    pub const XRC_ACKNOWLEDGE: Opcode = Opcode(0xB1);

    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);

    /// RoCEv2 congestion notification packet (docs/wire.md §2.5). Not 0x80, the native-IB CNP.
    pub const CNP: Opcode = Opcode(0x81);

    /// The table entry for this opcode, or `None` if we do not speak it.
    #[inline]
    pub fn info(self) -> Option<&'static OpcodeInfo> {
        TABLE[usize::from(self.0)].as_ref()
    }

    /// IBTA-style name (e.g. `"RC_SEND_FIRST"`), or `None` for unknown opcodes.
    pub fn name(self) -> Option<&'static str> {
        self.info().map(|i| i.name)
    }

    /// Every opcode in the table (RC, UC, UD and the CNP in numeric order, then XRC).
    pub fn all_known() -> impl Iterator<Item = Opcode> {
        ENTRIES.iter().chain(XRC_ENTRIES.iter()).map(|e| e.opcode)
    }

    /// The XRC opcode with the same operation and position as this RC opcode (class 0b101:
    /// `0xA0 | op`); any other opcode is returned unchanged.
    pub const fn rc_to_xrc(self) -> Opcode {
        if self.0 < 0x18 {
            Opcode(self.0 | XRC_CLASS)
        } else {
            self
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "0x{:02x}", self.0),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Opcode({n})"),
            None => write!(f, "Opcode(0x{:02x})", self.0),
        }
    }
}

/// Transport service of an opcode (bits 7..5 of the opcode, docs/wire.md §2).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    Rc,
    Uc,
    Ud,
    /// eXtended Reliable Connected (IBTA XRC annex): RC's rules, requests carry an XRCETH.
    Xrc,
    /// RoCEv2 congestion notification (not a QP transport).
    Cnp,
}

/// Where a packet sits in its message (docs/wire.md §2.1 F/M/L flags; ONLY = first and last).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
    /// Not part of a message (CNP).
    NotApplicable,
}

impl Position {
    /// First or only packet of a message.
    pub const fn is_first(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Last or only packet of a message.
    pub const fn is_last(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// What operation a packet belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum OpKind {
    Send,
    RdmaWrite,
    ReadRequest,
    ReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Cnp,
}

/// Set of extension headers after the BTH. Their order on the wire is fixed (docs/wire.md §2):
/// DETH, RETH / AtomicETH, AETH, AtomicAckETH, ImmDt / IETH; a CNP carries 16 reserved bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

/// Wire order and length of every extension header, used for all offset computations.
const ORDER: [(HeaderSet, usize, &str); 9] = [
    (HeaderSet::XRCETH, crate::xrceth::HEADER_LEN, "XRCETH"),
    (HeaderSet::DETH, crate::deth::HEADER_LEN, "DETH"),
    (HeaderSet::RETH, crate::reth::HEADER_LEN, "RETH"),
    (
        HeaderSet::ATOMIC_ETH,
        crate::atomic_eth::HEADER_LEN,
        "AtomicETH",
    ),
    (HeaderSet::AETH, crate::aeth::HEADER_LEN, "AETH"),
    (
        HeaderSet::ATOMIC_ACK_ETH,
        crate::atomic_ack_eth::HEADER_LEN,
        "AtomicAckETH",
    ),
    (HeaderSet::IMMDT, crate::immdt::HEADER_LEN, "ImmDt"),
    (HeaderSet::IETH, crate::ieth::HEADER_LEN, "IETH"),
    (HeaderSet::CNP_RESERVED, CNP_RESERVED_LEN, "CNP-reserved"),
];

/// Length of the reserved block that follows the BTH of a RoCEv2 CNP (docs/wire.md §9.2).
pub const CNP_RESERVED_LEN: usize = 16;

impl HeaderSet {
    pub const NONE: HeaderSet = HeaderSet(0);
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    pub const RETH: HeaderSet = HeaderSet(1 << 1);
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 2);
    pub const AETH: HeaderSet = HeaderSet(1 << 3);
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 4);
    pub const IMMDT: HeaderSet = HeaderSet(1 << 5);
    pub const IETH: HeaderSet = HeaderSet(1 << 6);
    /// The 16 reserved bytes after the BTH of a CNP.
    pub const CNP_RESERVED: HeaderSet = HeaderSet(1 << 7);
    /// XRC requests: the XRCETH, first after the BTH.
    pub const XRCETH: HeaderSet = HeaderSet(1 << 8);

    /// Union of two sets.
    #[inline]
    pub const fn with(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }

    /// All headers of `other` are in `self`.
    #[inline]
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn has_deth(self) -> bool {
        self.contains(Self::DETH)
    }
    pub const fn has_reth(self) -> bool {
        self.contains(Self::RETH)
    }
    pub const fn has_atomic_eth(self) -> bool {
        self.contains(Self::ATOMIC_ETH)
    }
    pub const fn has_aeth(self) -> bool {
        self.contains(Self::AETH)
    }
    pub const fn has_atomic_ack_eth(self) -> bool {
        self.contains(Self::ATOMIC_ACK_ETH)
    }
    pub const fn has_immdt(self) -> bool {
        self.contains(Self::IMMDT)
    }
    pub const fn has_ieth(self) -> bool {
        self.contains(Self::IETH)
    }
    pub const fn has_cnp_reserved(self) -> bool {
        self.contains(Self::CNP_RESERVED)
    }

    /// Total length of the extension headers in the set (BTH excluded).
    pub const fn ext_len(self) -> usize {
        let mut len = 0;
        let mut i = 0;
        while i < ORDER.len() {
            if self.contains(ORDER[i].0) {
                len += ORDER[i].1;
            }
            i += 1;
        }
        len
    }

    /// Offset of header `h` (a single header) from the start of the BTH, if present.
    pub const fn offset_of(self, h: HeaderSet) -> Option<usize> {
        if h.0.count_ones() != 1 || !self.contains(h) {
            return None;
        }
        let mut off = bth::HEADER_LEN;
        let mut i = 0;
        while i < ORDER.len() {
            if ORDER[i].0 .0 == h.0 {
                return Some(off);
            }
            if self.contains(ORDER[i].0) {
                off += ORDER[i].1;
            }
            i += 1;
        }
        None
    }

    pub const fn has_xrceth(self) -> bool {
        self.contains(Self::XRCETH)
    }
    pub const fn xrceth_offset(self) -> Option<usize> {
        self.offset_of(Self::XRCETH)
    }
    pub const fn deth_offset(self) -> Option<usize> {
        self.offset_of(Self::DETH)
    }
    pub const fn reth_offset(self) -> Option<usize> {
        self.offset_of(Self::RETH)
    }
    pub const fn atomic_eth_offset(self) -> Option<usize> {
        self.offset_of(Self::ATOMIC_ETH)
    }
    pub const fn aeth_offset(self) -> Option<usize> {
        self.offset_of(Self::AETH)
    }
    pub const fn atomic_ack_eth_offset(self) -> Option<usize> {
        self.offset_of(Self::ATOMIC_ACK_ETH)
    }
    pub const fn immdt_offset(self) -> Option<usize> {
        self.offset_of(Self::IMMDT)
    }
    pub const fn ieth_offset(self) -> Option<usize> {
        self.offset_of(Self::IETH)
    }
    pub const fn cnp_reserved_offset(self) -> Option<usize> {
        self.offset_of(Self::CNP_RESERVED)
    }

    /// Offset of the payload from the start of the BTH (= BTH + all extension headers).
    pub const fn payload_offset(self) -> usize {
        bth::HEADER_LEN + self.ext_len()
    }
}

impl fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            return f.write_str("{}");
        }
        let mut first = true;
        f.write_str("{")?;
        for (h, _, name) in ORDER {
            if self.contains(h) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        f.write_str("}")
    }
}

/// Everything the parser, builder, requester and responder need to know about one opcode.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OpcodeInfo {
    /// The opcode this entry describes.
    pub opcode: Opcode,
    /// IBTA / Wireshark / rxe style name, e.g. `"RC_RDMA_WRITE_ONLY"`.
    pub name: &'static str,
    pub transport: Transport,
    /// Extension headers after the BTH.
    pub headers: HeaderSet,
    /// BTH plus extension headers, in bytes: the payload starts here.
    pub header_len: usize,
    pub position: Position,
    pub kind: OpKind,
    /// Sent by a requester (true) or a responder (false). A CNP counts as neither; `false`.
    pub is_request: bool,
    /// May carry payload bytes. Packets of opcodes without payload must have none and PadCnt 0.
    pub has_payload: bool,
    /// Consumes a receive WQE at the responder (docs/wire.md §2.1 RWQE column).
    pub consumes_rwqe: bool,
    /// Generates a receive completion at the responder (docs/wire.md §2.1 CQE column).
    pub completes_recv: bool,
}

/// Flags for `entry`: kept as named booleans so the table reads like docs/wire.md §2.1.
#[derive(Clone, Copy)]
struct Flags {
    request: bool,
    payload: bool,
    rwqe: bool,
    cqe: bool,
}

const REQ: Flags = Flags {
    request: true,
    payload: true,
    rwqe: false,
    cqe: false,
};
const REQ_NO_PAYLOAD: Flags = Flags {
    payload: false,
    ..REQ
};
const REQ_RWQE: Flags = Flags { rwqe: true, ..REQ };
const REQ_CQE: Flags = Flags { cqe: true, ..REQ };
const REQ_RWQE_CQE: Flags = Flags {
    rwqe: true,
    cqe: true,
    ..REQ
};
const RESP: Flags = Flags {
    request: false,
    payload: true,
    rwqe: false,
    cqe: false,
};
const RESP_NO_PAYLOAD: Flags = Flags {
    payload: false,
    ..RESP
};
const CNP_FLAGS: Flags = Flags {
    request: false,
    payload: false,
    rwqe: false,
    cqe: false,
};

const fn entry(
    op: u8,
    name: &'static str,
    transport: Transport,
    headers: HeaderSet,
    position: Position,
    kind: OpKind,
    flags: Flags,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode: Opcode(op),
        name,
        transport,
        headers,
        header_len: headers.payload_offset(),
        position,
        kind,
        is_request: flags.request,
        has_payload: flags.payload,
        consumes_rwqe: flags.rwqe,
        completes_recv: flags.cqe,
    }
}

use HeaderSet as H;
use OpKind as K;
use Position as P;
use Transport as T;

const IMM: HeaderSet = H::IMMDT;
const RETH_IMM: HeaderSet = H::RETH.with(H::IMMDT);

/// docs/wire.md §2.1 (RC), §2.2 (UC), §2.4 (UD), §2.5 (CNP). Sorted by opcode value.
const ENTRIES: &[OpcodeInfo] = &[
    // RC
    entry(
        0x00,
        "RC_SEND_FIRST",
        T::Rc,
        H::NONE,
        P::First,
        K::Send,
        REQ_RWQE,
    ),
    entry(
        0x01,
        "RC_SEND_MIDDLE",
        T::Rc,
        H::NONE,
        P::Middle,
        K::Send,
        REQ,
    ),
    entry(
        0x02,
        "RC_SEND_LAST",
        T::Rc,
        H::NONE,
        P::Last,
        K::Send,
        REQ_CQE,
    ),
    entry(
        0x03,
        "RC_SEND_LAST_WITH_IMMEDIATE",
        T::Rc,
        IMM,
        P::Last,
        K::Send,
        REQ_CQE,
    ),
    entry(
        0x04,
        "RC_SEND_ONLY",
        T::Rc,
        H::NONE,
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    entry(
        0x05,
        "RC_SEND_ONLY_WITH_IMMEDIATE",
        T::Rc,
        IMM,
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    entry(
        0x06,
        "RC_RDMA_WRITE_FIRST",
        T::Rc,
        H::RETH,
        P::First,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x07,
        "RC_RDMA_WRITE_MIDDLE",
        T::Rc,
        H::NONE,
        P::Middle,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x08,
        "RC_RDMA_WRITE_LAST",
        T::Rc,
        H::NONE,
        P::Last,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x09,
        "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        T::Rc,
        IMM,
        P::Last,
        K::RdmaWrite,
        REQ_RWQE_CQE,
    ),
    entry(
        0x0A,
        "RC_RDMA_WRITE_ONLY",
        T::Rc,
        H::RETH,
        P::Only,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x0B,
        "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        T::Rc,
        RETH_IMM,
        P::Only,
        K::RdmaWrite,
        REQ_RWQE_CQE,
    ),
    entry(
        0x0C,
        "RC_RDMA_READ_REQUEST",
        T::Rc,
        H::RETH,
        P::Only,
        K::ReadRequest,
        REQ_NO_PAYLOAD,
    ),
    entry(
        0x0D,
        "RC_RDMA_READ_RESPONSE_FIRST",
        T::Rc,
        H::AETH,
        P::First,
        K::ReadResponse,
        RESP,
    ),
    entry(
        0x0E,
        "RC_RDMA_READ_RESPONSE_MIDDLE",
        T::Rc,
        H::NONE,
        P::Middle,
        K::ReadResponse,
        RESP,
    ),
    entry(
        0x0F,
        "RC_RDMA_READ_RESPONSE_LAST",
        T::Rc,
        H::AETH,
        P::Last,
        K::ReadResponse,
        RESP,
    ),
    entry(
        0x10,
        "RC_RDMA_READ_RESPONSE_ONLY",
        T::Rc,
        H::AETH,
        P::Only,
        K::ReadResponse,
        RESP,
    ),
    entry(
        0x11,
        "RC_ACKNOWLEDGE",
        T::Rc,
        H::AETH,
        P::Only,
        K::Acknowledge,
        RESP_NO_PAYLOAD,
    ),
    entry(
        0x12,
        "RC_ATOMIC_ACKNOWLEDGE",
        T::Rc,
        H::AETH.with(H::ATOMIC_ACK_ETH),
        P::Only,
        K::AtomicAcknowledge,
        RESP_NO_PAYLOAD,
    ),
    entry(
        0x13,
        "RC_COMPARE_SWAP",
        T::Rc,
        H::ATOMIC_ETH,
        P::Only,
        K::CompareSwap,
        REQ_NO_PAYLOAD,
    ),
    entry(
        0x14,
        "RC_FETCH_ADD",
        T::Rc,
        H::ATOMIC_ETH,
        P::Only,
        K::FetchAdd,
        REQ_NO_PAYLOAD,
    ),
    entry(
        0x16,
        "RC_SEND_LAST_WITH_INVALIDATE",
        T::Rc,
        H::IETH,
        P::Last,
        K::Send,
        REQ_CQE,
    ),
    entry(
        0x17,
        "RC_SEND_ONLY_WITH_INVALIDATE",
        T::Rc,
        H::IETH,
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    // UC: RC 0x00–0x0B with prefix 0x20, same headers and flags.
    entry(
        0x20,
        "UC_SEND_FIRST",
        T::Uc,
        H::NONE,
        P::First,
        K::Send,
        REQ_RWQE,
    ),
    entry(
        0x21,
        "UC_SEND_MIDDLE",
        T::Uc,
        H::NONE,
        P::Middle,
        K::Send,
        REQ,
    ),
    entry(
        0x22,
        "UC_SEND_LAST",
        T::Uc,
        H::NONE,
        P::Last,
        K::Send,
        REQ_CQE,
    ),
    entry(
        0x23,
        "UC_SEND_LAST_WITH_IMMEDIATE",
        T::Uc,
        IMM,
        P::Last,
        K::Send,
        REQ_CQE,
    ),
    entry(
        0x24,
        "UC_SEND_ONLY",
        T::Uc,
        H::NONE,
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    entry(
        0x25,
        "UC_SEND_ONLY_WITH_IMMEDIATE",
        T::Uc,
        IMM,
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    entry(
        0x26,
        "UC_RDMA_WRITE_FIRST",
        T::Uc,
        H::RETH,
        P::First,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x27,
        "UC_RDMA_WRITE_MIDDLE",
        T::Uc,
        H::NONE,
        P::Middle,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x28,
        "UC_RDMA_WRITE_LAST",
        T::Uc,
        H::NONE,
        P::Last,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x29,
        "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
        T::Uc,
        IMM,
        P::Last,
        K::RdmaWrite,
        REQ_RWQE_CQE,
    ),
    entry(
        0x2A,
        "UC_RDMA_WRITE_ONLY",
        T::Uc,
        H::RETH,
        P::Only,
        K::RdmaWrite,
        REQ,
    ),
    entry(
        0x2B,
        "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
        T::Uc,
        RETH_IMM,
        P::Only,
        K::RdmaWrite,
        REQ_RWQE_CQE,
    ),
    // UD
    entry(
        0x64,
        "UD_SEND_ONLY",
        T::Ud,
        H::DETH,
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    entry(
        0x65,
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        T::Ud,
        H::DETH.with(H::IMMDT),
        P::Only,
        K::Send,
        REQ_RWQE_CQE,
    ),
    // RoCEv2 CNP: BTH + 16 reserved bytes.
    entry(
        0x81,
        "CNP",
        T::Cnp,
        H::CNP_RESERVED,
        P::NotApplicable,
        K::Cnp,
        CNP_FLAGS,
    ),
];

const fn build_table() -> [Option<OpcodeInfo>; 256] {
    let mut t: [Option<OpcodeInfo>; 256] = [None; 256];
    let mut i = 0;
    while i < ENTRIES.len() {
        t[ENTRIES[i].opcode.0 as usize] = Some(ENTRIES[i]);
        i += 1;
    }
    t
}

/// The opcode class of XRC (bits 7..5 = 0b101).
const XRC_CLASS: u8 = 0xA0;

/// XRC names, indexed by the low five bits (the RC opcode of the same operation).
const XRC_NAMES: [&str; 0x18] = [
    "XRC_SEND_FIRST",
    "XRC_SEND_MIDDLE",
    "XRC_SEND_LAST",
    "XRC_SEND_LAST_WITH_IMMEDIATE",
    "XRC_SEND_ONLY",
    "XRC_SEND_ONLY_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_FIRST",
    "XRC_RDMA_WRITE_MIDDLE",
    "XRC_RDMA_WRITE_LAST",
    "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_ONLY",
    "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "XRC_RDMA_READ_REQUEST",
    "XRC_RDMA_READ_RESPONSE_FIRST",
    "XRC_RDMA_READ_RESPONSE_MIDDLE",
    "XRC_RDMA_READ_RESPONSE_LAST",
    "XRC_RDMA_READ_RESPONSE_ONLY",
    "XRC_ACKNOWLEDGE",
    "XRC_ATOMIC_ACKNOWLEDGE",
    "XRC_COMPARE_SWAP",
    "XRC_FETCH_ADD",
    "",
    "XRC_SEND_LAST_WITH_INVALIDATE",
    "XRC_SEND_ONLY_WITH_INVALIDATE",
];

/// Number of XRC opcodes: RC's 23 (0x15 is reserved in both classes).
const XRC_COUNT: usize = 23;

/// XRC (IBTA XRC annex): every RC opcode in class 0b101, same position, kind and flags;
/// requests also carry the XRCETH right after the BTH, responses do not.
const fn build_xrc() -> [OpcodeInfo; XRC_COUNT] {
    let mut out = [ENTRIES[0]; XRC_COUNT];
    let mut i = 0;
    let mut n = 0;
    while i < ENTRIES.len() {
        let e = ENTRIES[i];
        if matches!(e.transport, Transport::Rc) {
            let headers = if e.is_request {
                e.headers.with(HeaderSet::XRCETH)
            } else {
                e.headers
            };
            out[n] = OpcodeInfo {
                opcode: Opcode(e.opcode.0 | XRC_CLASS),
                name: XRC_NAMES[e.opcode.0 as usize],
                transport: Transport::Xrc,
                headers,
                header_len: headers.payload_offset(),
                ..e
            };
            n += 1;
        }
        i += 1;
    }
    out
}

const XRC_ENTRIES: [OpcodeInfo; XRC_COUNT] = build_xrc();

const fn build_table_all() -> [Option<OpcodeInfo>; 256] {
    let mut t = build_table();
    let mut i = 0;
    while i < XRC_ENTRIES.len() {
        t[XRC_ENTRIES[i].opcode.0 as usize] = Some(XRC_ENTRIES[i]);
        i += 1;
    }
    t
}

static TABLE: [Option<OpcodeInfo>; 256] = build_table_all();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_sorted_unique_and_self_consistent() {
        let mut prev: Option<u8> = None;
        let mut names = std::collections::HashSet::new();
        for e in ENTRIES {
            if let Some(p) = prev {
                assert!(e.opcode.0 > p, "{} not sorted", e.name);
            }
            prev = Some(e.opcode.0);
            assert!(names.insert(e.name), "duplicate name {}", e.name);
            assert_eq!(e.opcode.info(), Some(e));
            assert_eq!(e.header_len, 12 + e.headers.ext_len());
            // Consuming or completing a receive WQE is something only a request that can
            // carry data does (docs/wire.md §2.1).
            if e.consumes_rwqe || e.completes_recv {
                assert!(e.is_request && e.has_payload, "{}", e.name);
            }
            let prefix = match e.transport {
                Transport::Rc => "RC_",
                Transport::Uc => "UC_",
                Transport::Ud => "UD_",
                Transport::Xrc => "XRC_",
                Transport::Cnp => "CNP",
            };
            assert!(e.name.starts_with(prefix), "{}", e.name);
        }
        assert_eq!(ENTRIES.len(), 23 + 12 + 2 + 1);
    }

    #[test]
    fn uc_mirrors_rc() {
        for op in 0x20u8..=0x2B {
            let uc = Opcode(op).info().expect("UC opcode in table");
            let rc = Opcode(op - 0x20).info().expect("RC opcode in table");
            assert_eq!(uc.transport, Transport::Uc);
            assert_eq!(uc.headers, rc.headers);
            assert_eq!(uc.position, rc.position);
            assert_eq!(uc.kind, rc.kind);
            assert_eq!(uc.consumes_rwqe, rc.consumes_rwqe);
            assert_eq!(uc.completes_recv, rc.completes_recv);
            assert_eq!(&uc.name[3..], &rc.name[3..]);
        }
        assert!(Opcode(0x2C).info().is_none());
    }

    #[test]
    fn xrc_mirrors_rc_with_xrceth_on_requests() {
        let mut n = 0;
        for op in 0xA0u8..=0xB7 {
            let Some(x) = Opcode(op).info() else {
                assert_eq!(op, 0xB5);
                continue;
            };
            n += 1;
            let rc = Opcode(op & 0x1f).info().expect("RC opcode in table");
            assert_eq!(x.transport, Transport::Xrc);
            assert_eq!(Opcode(op & 0x1f).rc_to_xrc(), Opcode(op));
            assert_eq!(x.position, rc.position);
            assert_eq!(x.kind, rc.kind);
            assert_eq!(x.is_request, rc.is_request);
            assert_eq!(x.consumes_rwqe, rc.consumes_rwqe);
            assert_eq!(&x.name[4..], &rc.name[3..]);
            if rc.is_request {
                assert_eq!(x.headers, rc.headers.with(H::XRCETH));
                assert_eq!(x.headers.xrceth_offset(), Some(12));
                assert_eq!(x.header_len, rc.header_len + 4);
            } else {
                assert_eq!(x.headers, rc.headers);
            }
        }
        assert_eq!(n, XRC_COUNT);
        assert_eq!(Opcode::all_known().count(), ENTRIES.len() + XRC_COUNT);
        // XRCETH comes before RETH / AtomicETH / ImmDt.
        let h = Opcode(0xAB).info().expect("XRC write only imm").headers;
        assert_eq!(h.reth_offset(), Some(16));
        assert_eq!(h.immdt_offset(), Some(32));
        assert_eq!(Opcode::XRC_SEND_ONLY.to_string(), "XRC_SEND_ONLY");
        assert_eq!(Opcode::UD_SEND_ONLY.rc_to_xrc(), Opcode::UD_SEND_ONLY);
    }

    #[test]
    fn header_lengths_match_wire_facts() {
        let cases: &[(Opcode, usize)] = &[
            (Opcode::RC_SEND_ONLY, 12),
            (Opcode::RC_SEND_ONLY_WITH_IMMEDIATE, 16),
            (Opcode::RC_RDMA_WRITE_FIRST, 28),
            (Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE, 32),
            (Opcode::RC_RDMA_READ_REQUEST, 28),
            (Opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 12),
            (Opcode::RC_RDMA_READ_RESPONSE_FIRST, 16),
            (Opcode::RC_ACKNOWLEDGE, 16),
            (Opcode::RC_ATOMIC_ACKNOWLEDGE, 24),
            (Opcode::RC_COMPARE_SWAP, 40),
            (Opcode::RC_FETCH_ADD, 40),
            (Opcode::RC_SEND_ONLY_WITH_INVALIDATE, 16),
            (Opcode::UD_SEND_ONLY, 20),
            (Opcode::UD_SEND_ONLY_WITH_IMMEDIATE, 24),
            (Opcode::CNP, 28),
        ];
        for &(op, len) in cases {
            assert_eq!(op.info().map(|i| i.header_len), Some(len), "{op}");
        }
    }

    #[test]
    fn offsets_follow_wire_order() {
        let h = Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
            .info()
            .map(|i| i.headers);
        let h = h.expect("known");
        assert_eq!(h.reth_offset(), Some(12));
        assert_eq!(h.immdt_offset(), Some(28));
        assert_eq!(h.aeth_offset(), None);
        assert_eq!(h.payload_offset(), 32);
        let h = H::AETH.with(H::ATOMIC_ACK_ETH);
        assert_eq!(h.aeth_offset(), Some(12));
        assert_eq!(h.atomic_ack_eth_offset(), Some(16));
        let h = H::DETH.with(H::IMMDT);
        assert_eq!(h.deth_offset(), Some(12));
        assert_eq!(h.immdt_offset(), Some(20));
        // offset_of takes exactly one header.
        assert_eq!(h.offset_of(H::DETH.with(H::IMMDT)), None);
        assert_eq!(format!("{h:?}"), "{DETH|ImmDt}");
    }

    #[test]
    fn names_and_unknown_display() {
        assert_eq!(Opcode::RC_SEND_FIRST.to_string(), "RC_SEND_FIRST");
        assert_eq!(Opcode(0x0E).to_string(), "RC_RDMA_READ_RESPONSE_MIDDLE");
        assert_eq!(Opcode(0x64).to_string(), "UD_SEND_ONLY");
        assert_eq!(Opcode(0x81).to_string(), "CNP");
        assert_eq!(Opcode(0x1f).to_string(), "0x1f");
        assert_eq!(Opcode(0x80).to_string(), "0x80");
        assert_eq!(format!("{:?}", Opcode(0x15)), "Opcode(0x15)");
        assert_eq!(format!("{:?}", Opcode(0x0A)), "Opcode(RC_RDMA_WRITE_ONLY)");
        assert!(Opcode(0x15).info().is_none());
    }

    #[test]
    fn flags_match_wire_facts_rwqe_column() {
        let i = |op: Opcode| op.info().copied().expect("known");
        assert!(i(Opcode::RC_SEND_FIRST).consumes_rwqe && !i(Opcode::RC_SEND_FIRST).completes_recv);
        assert!(!i(Opcode::RC_SEND_LAST).consumes_rwqe && i(Opcode::RC_SEND_LAST).completes_recv);
        assert!(!i(Opcode::RC_RDMA_WRITE_ONLY).consumes_rwqe);
        assert!(i(Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE).consumes_rwqe);
        assert!(!i(Opcode::RC_RDMA_READ_REQUEST).has_payload);
        assert!(!i(Opcode::RC_RDMA_READ_RESPONSE_ONLY).is_request);
        assert!(i(Opcode::RC_FETCH_ADD).is_request);
        assert_eq!(i(Opcode::CNP).position, Position::NotApplicable);
    }
}
