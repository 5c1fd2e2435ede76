//! Work requests as the transport keeps them (docs/wire.md §7.3, docs/abi.md §10).

use core::fmt;

pub use abi::{SendFlags, WrOpcode};
use wire::{Lkey, Qkey, Qpn, Rkey};

/// A scatter/gather element: `length` bytes at `addr` under `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Byte count.
    pub length: u32,
    /// Local key of the MR containing the range.
    pub lkey: Lkey,
}

/// SGEs kept inline up to this many (no heap allocation for the common case).
const SGE_INLINE: usize = 2;

/// A list of SGEs. The first `SGE_INLINE` (2) live inside the struct; longer lists spill to
/// the heap once, when the WR is posted.
#[derive(Clone, PartialEq, Eq)]
pub struct SgeList {
    inline: [Sge; SGE_INLINE],
    inline_len: u8,
    spill: Vec<Sge>,
}

const NO_SGE: Sge = Sge {
    addr: 0,
    length: 0,
    lkey: Lkey(0),
};

impl SgeList {
    /// No SGEs.
    pub const fn new() -> SgeList {
        SgeList {
            inline: [NO_SGE; SGE_INLINE],
            inline_len: 0,
            spill: Vec::new(),
        }
    }

    /// One SGE.
    pub fn single(sge: Sge) -> SgeList {
        let mut l = SgeList::new();
        l.push(sge);
        l
    }

    /// Build from a slice.
    pub fn from_slice(sges: &[Sge]) -> SgeList {
        if sges.len() <= SGE_INLINE {
            let mut l = SgeList::new();
            for s in sges {
                l.push(*s);
            }
            l
        } else {
            SgeList {
                inline: [NO_SGE; SGE_INLINE],
                inline_len: 0,
                spill: sges.to_vec(),
            }
        }
    }

    /// Append.
    pub fn push(&mut self, sge: Sge) {
        if self.spill.is_empty() && usize::from(self.inline_len) < SGE_INLINE {
            self.inline[usize::from(self.inline_len)] = sge;
            self.inline_len += 1;
        } else {
            if self.spill.is_empty() {
                self.spill
                    .extend_from_slice(&self.inline[..usize::from(self.inline_len)]);
                self.inline_len = 0;
            }
            self.spill.push(sge);
        }
    }

    /// The SGEs.
    pub fn as_slice(&self) -> &[Sge] {
        if self.spill.is_empty() {
            &self.inline[..usize::from(self.inline_len)]
        } else {
            &self.spill
        }
    }

    /// Number of SGEs.
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Remove every SGE (a spilled list keeps its heap storage).
    pub fn clear(&mut self) {
        self.inline_len = 0;
        self.spill.clear();
    }

    /// Sum of lengths (u64: cannot overflow for ≤ 2^32 SGEs).
    pub fn total_len(&self) -> u64 {
        self.as_slice().iter().map(|s| u64::from(s.length)).sum()
    }
}

impl Default for SgeList {
    fn default() -> SgeList {
        SgeList::new()
    }
}

impl fmt::Debug for SgeList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// Most inline payload bytes an [`InlineData`] holds (the device limit, as abi's
/// `MAX_INLINE_DATA`).
pub const MAX_INLINE_DATA: usize = 256;

/// Inline payload kept inside the WR: up to [`MAX_INLINE_DATA`] bytes in a fixed array, so
/// taking an inline WQE from a ring allocates nothing (the BlueFlame idea,
/// docs/architecture.md §3).
#[derive(Clone)]
pub struct InlineData {
    len: u16,
    bytes: [u8; MAX_INLINE_DATA],
}

impl InlineData {
    /// No bytes.
    pub const fn new() -> InlineData {
        InlineData {
            len: 0,
            bytes: [0; MAX_INLINE_DATA],
        }
    }

    /// A copy of `data`; `None` if it is longer than [`MAX_INLINE_DATA`].
    pub fn from_slice(data: &[u8]) -> Option<InlineData> {
        let mut d = InlineData::new();
        d.extend_from_slice(data).then_some(d)
    }

    /// Forget the bytes (the array is reused as it is).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Append `data`; `false` (and nothing appended) if the result would exceed
    /// [`MAX_INLINE_DATA`].
    pub fn extend_from_slice(&mut self, data: &[u8]) -> bool {
        let start = usize::from(self.len);
        let Some(dst) = start
            .checked_add(data.len())
            .and_then(|end| self.bytes.get_mut(start..end))
        else {
            return false;
        };
        dst.copy_from_slice(data);
        self.len = (start + data.len()) as u16;
        true
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or(&[])
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for InlineData {
    fn default() -> InlineData {
        InlineData::new()
    }
}

impl PartialEq for InlineData {
    fn eq(&self, other: &InlineData) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for InlineData {}

impl fmt::Debug for InlineData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("InlineData").field(&self.as_slice()).finish()
    }
}

/// Where a send WR's payload comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalData {
    /// Gathered from registered memory.
    Sges(SgeList),
    /// Carried in the WR itself (`IBV_SEND_INLINE`): no MR check, no DMA read. A heap
    /// buffer; [`LocalData::InlineData`] is the allocation-free form of the same thing.
    Inline(Vec<u8>),
    /// Carried in the WR itself, in a fixed array (what the NIC engine uses on its fast
    /// path: no allocation per WQE). Same semantics as [`LocalData::Inline`].
    InlineData(InlineData),
}

impl LocalData {
    /// Message length.
    pub fn len(&self) -> u64 {
        match self {
            LocalData::Sges(l) => l.total_len(),
            LocalData::Inline(v) => v.len() as u64,
            LocalData::InlineData(d) => d.len() as u64,
        }
    }

    /// The payload bytes if they travel inside the WR (either inline form).
    pub fn inline_bytes(&self) -> Option<&[u8]> {
        match self {
            LocalData::Sges(_) => None,
            LocalData::Inline(v) => Some(v),
            LocalData::InlineData(d) => Some(d.as_slice()),
        }
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The inline array, emptied, for bytes written in place (made one if it held another
    /// form; a reused send-queue slot usually already is one: `crate::sq`).
    pub fn inline_data_mut(&mut self) -> &mut InlineData {
        if !matches!(self, LocalData::InlineData(_)) {
            *self = LocalData::InlineData(InlineData::new());
        }
        match self {
            LocalData::InlineData(d) => {
                d.clear();
                d
            }
            _ => unreachable!("made an inline array above"),
        }
    }

    /// The SGE list, emptied, for SGEs written in place (made one if it held another form).
    pub fn sges_mut(&mut self) -> &mut SgeList {
        if !matches!(self, LocalData::Sges(_)) {
            *self = LocalData::Sges(SgeList::new());
        }
        match self {
            LocalData::Sges(l) => {
                l.clear();
                l
            }
            _ => unreachable!("made an SGE list above"),
        }
    }

    /// Empty it, keeping its form and storage (an inline array stays for the next bytes).
    fn clear(&mut self) {
        match self {
            LocalData::Sges(l) => l.clear(),
            LocalData::Inline(v) => v.clear(),
            LocalData::InlineData(d) => d.clear(),
        }
    }
}

impl Default for LocalData {
    fn default() -> LocalData {
        LocalData::Sges(SgeList::new())
    }
}

/// UD destination carried by a send WR.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct UdDest {
    /// The caller's address-handle id; returned in [`crate::Transmit::ah`] so the caller
    /// knows where to send.
    pub ah: u32,
    /// Destination QPN.
    pub remote_qpn: Qpn,
    /// Q_Key; if its most significant bit is set the QP's own Q_Key is used (IBA 10.2.5).
    pub remote_qkey: Qkey,
}

/// A send work request (`ibv_send_wr`, flattened).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// `ibv_send_flags`.
    pub flags: SendFlags,
    /// Payload source: SGEs (also the READ / atomic-result destination) or inline bytes.
    pub local: LocalData,
    /// Immediate data (for `*_WITH_IMM`), as the big-endian wire value.
    pub imm_data: u32,
    /// R_Key to invalidate at the responder (SEND_WITH_INV).
    pub invalidate_rkey: Rkey,
    /// Remote virtual address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: Rkey,
    /// Atomic compare value (CAS) or addend (FAA).
    pub compare_add: u64,
    /// Atomic swap value (CAS).
    pub swap: u64,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// XRC: the responder's XRC SRQ number, carried in the XRCETH (24 bits).
    pub xrc_srqn: u32,
}

/// What a BIND_MW WR asks for (IBTA Vol 1 §10.6.7.2), as [`SendWr::mw_bind`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBind {
    /// The window's current R_Key (names the window).
    pub mw_rkey: Rkey,
    /// The R_Key it gets: same index bits, new 8-bit key.
    pub new_rkey: Rkey,
    /// L_Key of the MR the window is bound to.
    pub mr_lkey: Lkey,
    /// First byte of the window (an address of the MR).
    pub addr: u64,
    /// Window length; 0 unbinds a type 1 window.
    pub length: u64,
    /// `ibv_access_flags` of the window (remote access bits).
    pub access: u32,
}

impl SendWr {
    /// The binding of a BIND_MW WR, carried in the RDMA and atomic fields the opcode does
    /// not use (as in the WQE, docs/abi.md §7): `rkey` the window, `invalidate_rkey` the
    /// new R_Key, `remote_addr` and `compare_add` the range, `swap` the MR's L_Key (low 32
    /// bits) and the access flags (high 32).
    pub fn mw_bind(&self) -> MwBind {
        MwBind {
            mw_rkey: self.rkey,
            new_rkey: self.invalidate_rkey,
            mr_lkey: Lkey(self.swap as u32),
            addr: self.remote_addr,
            length: self.compare_add,
            access: (self.swap >> 32) as u32,
        }
    }

    /// Store `b` as [`SendWr::mw_bind`] reads it.
    pub fn set_mw_bind(&mut self, b: &MwBind) {
        self.rkey = b.mw_rkey;
        self.invalidate_rkey = b.new_rkey;
        self.swap = u64::from(b.mr_lkey.0) | (u64::from(b.access) << 32);
        self.remote_addr = b.addr;
        self.compare_add = b.length;
    }

    /// A WR with every optional field empty; fill in what the opcode needs.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::SIGNALED,
            local: LocalData::default(),
            imm_data: 0,
            invalidate_rkey: Rkey(0),
            remote_addr: 0,
            rkey: Rkey(0),
            compare_add: 0,
            swap: 0,
            ud: None,
            xrc_srqn: 0,
        }
    }

    /// Make it what [`SendWr::new`]`(0, Send)` makes, except that `local` keeps its form
    /// and storage, emptied (a reused send-queue slot; `crate::sq`).
    pub(crate) fn reset(&mut self) {
        // Every field named: a new one must be reset here too.
        let SendWr {
            wr_id,
            opcode,
            flags,
            local,
            imm_data,
            invalidate_rkey,
            remote_addr,
            rkey,
            compare_add,
            swap,
            ud,
            xrc_srqn,
        } = self;
        *wr_id = 0;
        *opcode = WrOpcode::Send;
        *flags = SendFlags::SIGNALED;
        local.clear();
        *imm_data = 0;
        *invalidate_rkey = Rkey(0);
        *remote_addr = 0;
        *rkey = Rkey(0);
        *compare_add = 0;
        *swap = 0;
        *ud = None;
        *xrc_srqn = 0;
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where incoming SEND payload is scattered.
    pub sges: SgeList,
}

/// Why a post was refused. The NIC maps these to errno: [`PostError::QueueFull`] → ENOMEM,
/// everything else → EINVAL (rxe conventions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The QP state does not accept this post (RESET; INIT/RTR for sends).
    InvalidState,
    /// The queue is at its limit.
    QueueFull,
    /// Opcode not valid for this QP type.
    BadOpcode,
    /// More SGEs than the QP was created with.
    TooManySge,
    /// Inline data longer than `max_inline_data`.
    InlineTooLong,
    /// Message longer than 2^31 (RC/UC) or the path MTU (UD), or an atomic whose local
    /// buffer is not 8 bytes.
    BadLength,
    /// UD send without a destination, or a connected send with one.
    BadDestination,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PostError::InvalidState => "QP state does not accept this post",
            PostError::QueueFull => "queue full",
            PostError::BadOpcode => "opcode not valid for this QP type",
            PostError::TooManySge => "too many SGEs",
            PostError::InlineTooLong => "inline data too long",
            PostError::BadLength => "bad message length",
            PostError::BadDestination => "bad or missing destination",
        })
    }
}

impl std::error::Error for PostError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(i: u32) -> Sge {
        Sge {
            addr: u64::from(i) * 100,
            length: i,
            lkey: Lkey(i),
        }
    }

    #[test]
    fn sge_list_inline_and_spill() {
        let mut l = SgeList::new();
        assert!(l.is_empty());
        l.push(sge(1));
        l.push(sge(2));
        assert_eq!(l.as_slice(), &[sge(1), sge(2)]);
        l.push(sge(3));
        l.push(sge(4));
        assert_eq!(l.as_slice(), &[sge(1), sge(2), sge(3), sge(4)]);
        assert_eq!(l.total_len(), 10);
        let v: Vec<Sge> = (1..=5).map(sge).collect();
        assert_eq!(SgeList::from_slice(&v).as_slice(), &v[..]);
        assert_eq!(SgeList::from_slice(&v[..1]).as_slice(), &v[..1]);
    }

    #[test]
    fn inline_data_is_bounded_and_compares_by_content() {
        let mut d = InlineData::from_slice(b"abc").unwrap();
        assert_eq!(d.as_slice(), b"abc");
        assert!(d.extend_from_slice(b"de"));
        assert_eq!((d.len(), d.as_slice()), (5, &b"abcde"[..]));
        assert!(!d.extend_from_slice(&[0; MAX_INLINE_DATA]));
        assert_eq!(d.len(), 5);
        assert!(InlineData::from_slice(&[7; MAX_INLINE_DATA]).is_some());
        assert!(InlineData::from_slice(&[7; MAX_INLINE_DATA + 1]).is_none());
        assert!(InlineData::new().is_empty());
        let a = LocalData::InlineData(d.clone());
        let b = LocalData::Inline(b"abcde".to_vec());
        assert_eq!(a.len(), 5);
        assert_eq!(a.inline_bytes(), b.inline_bytes());
        assert_eq!(LocalData::default().inline_bytes(), None);
        // Bytes past `len` do not take part in equality.
        let mut e = InlineData::from_slice(b"abcdeX").unwrap();
        e.len = 5;
        assert_eq!(e, d);
    }

    #[test]
    fn opcode_classes() {
        assert!(WrOpcode::RdmaWriteWithImm.consumes_rwqe());
        assert!(!WrOpcode::RdmaWrite.consumes_rwqe());
        assert!(WrOpcode::AtomicFetchAndAdd.is_read_or_atomic());
        assert_eq!(WrOpcode::from_raw(9), Some(WrOpcode::SendWithInv));
        assert_eq!(WrOpcode::from_raw(7), Some(WrOpcode::LocalInv));
        assert_eq!(WrOpcode::from_raw(8), Some(WrOpcode::BindMw));
        assert_eq!(WrOpcode::from_raw(11), None);
        assert!(!WrOpcode::Tso.is_implemented() && WrOpcode::SendWithInv.is_implemented());
        assert!(WrOpcode::BindMw.is_local() && WrOpcode::LocalInv.is_local());
        assert!(!WrOpcode::SendWithInv.is_local());
        // A binding survives the trip through the WR's spare fields.
        let b = MwBind {
            mw_rkey: Rkey(0xabcd_ef00),
            new_rkey: Rkey(0xabcd_ef01),
            mr_lkey: Lkey(0x1234_5678),
            addr: 0x7000_1000,
            length: 4096,
            access: 2 | 4,
        };
        let mut wr = SendWr::new(1, WrOpcode::BindMw);
        wr.set_mw_bind(&b);
        assert_eq!(wr.mw_bind(), b);
    }
}
