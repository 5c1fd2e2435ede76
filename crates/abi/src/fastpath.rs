//! Fast-path layouts: send and receive WQEs, CQEs, the ring header, and their sizing rules.
//!
//! These live in memory shared by the library and the engine, so each is `#[repr(C)]` with
//! compile-time size/offset checks. Everything is host-endian except `imm_data` (network
//! order, as in `ibv_wc`). The engine copies a WQE out of the ring once and then validates
//! the copy ([`SendWqe::parse`], [`RecvWqe::parse`]); it never trusts the library's bytes.
//!
//! # Send WQE (one SQ slot, `elem_size` bytes)
//!
//! ```text
//! 0   wr_id          u64   returned in the CQE
//! 8   opcode         u32   WrOpcode (IBV_WR_*)
//! 12  send_flags     u32   SendFlags (SIGNALED, SOLICITED, FENCE, INLINE)
//! 16  ex             u32   imm_data (network-order bytes) or invalidate_rkey
//! 20  num_sge        u16   SGEs after the header (0 when INLINE)
//! 22  inline_len     u16   inline bytes after the header (0 unless INLINE)
//! 24  remote_addr    u64   RDMA / atomic target
//! 32  rkey           u32   RDMA / atomic rkey
//! 36  ah             u32   UD: AH handle from CREATE_AH
//! 40  remote_qpn     u32   UD: destination QPN
//! 44  remote_qkey    u32   UD: Q_Key
//! 48  compare_add    u64   atomic: compare (CMP_AND_SWP) or add (FETCH_AND_ADD) value
//! 56  swap           u64   atomic: swap value
//! 64  payload: num_sge × Sge (16 B each) | inline_len bytes
//! ```
//!
//! One 64-byte cache line holds everything but the payload, so the engine finds every
//! parameter of the operation without the command channel. Inline payloads (the BlueFlame
//! idea) are at most [`MAX_INLINE_DATA`] bytes and skip the lkey check and DMA read. An
//! atomic's 8-byte result goes to its (single) SGE.
//!
//! # Receive WQE (RQ/SRQ slot)
//!
//! `wr_id u64 @0, num_sge u32 @8, reserved u32 @12`, then `num_sge` × [`Sge`] @16 — the
//! layout of `ib_uverbs_recv_wr` followed by its SGEs.
//!
//! # CQE (CQ slot, 64 bytes)
//!
//! The 48-byte [`Wc`] (`ib_uverbs_wc` = the first 48 bytes of `struct ibv_wc`) at the slot
//! start, then 16 reserved bytes, so a C-ABI `ibv_poll_cq` copies the prefix out as is.
//! `wc_flags` uses libibverbs values ([`crate::verbs_consts::WcFlags`]).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::{AbiError, Result};
use crate::uverbs::{Sge, Wc};
use crate::verbs_consts::{SendFlags, WrOpcode};

/// Largest inline payload a send WQE can carry. Devices may report less
/// ([`crate::uverbs::UroceGetContextResp::max_inline_data`]).
pub const MAX_INLINE_DATA: u32 = 256;

/// Largest SGE count per WQE the layout allows (rxe's limit too).
pub const MAX_SGE: u32 = 32;

/// Bytes of a send WQE before its payload.
pub const SEND_WQE_HDR_BYTES: usize = 64;

/// Bytes of a receive WQE before its SGEs.
pub const RECV_WQE_HDR_BYTES: usize = 16;

/// Bytes of a CQE slot.
pub const CQE_BYTES: u32 = 64;

/// Ring header: log2 of the element size (informational copy; see [`crate::ring`]).
pub const RING_LOG2_ELEM_OFFSET: usize = 0;
/// Ring header: `slots − 1` (informational copy).
pub const RING_INDEX_MASK_OFFSET: usize = 4;
/// Ring header: [`RING_MAGIC`].
pub const RING_MAGIC_OFFSET: usize = 8;
/// Ring header: the producer index (u64, free-running), alone on its cache line.
pub const RING_PRODUCER_OFFSET: usize = 128;
/// Ring header: the consumer index (u64, free-running), alone on its cache line.
pub const RING_CONSUMER_OFFSET: usize = 256;
/// Ring header size; slot `i` is at `RING_DATA_OFFSET + (i & index_mask) * elem_size`.
pub const RING_DATA_OFFSET: usize = 384;
/// Written at [`RING_MAGIC_OFFSET`] by whoever initializes a ring (`"URNG"` little-endian).
pub const RING_MAGIC: u32 = u32::from_le_bytes(*b"URNG");

/// The ring header as a struct, for documentation, tracing and the offset checks; the ring
/// code accesses the indices as atomics at the offsets above (after rxe's `rxe_queue_buf`,
/// docs/abi.md §10, with u64 free-running indices instead of masked u32 ones).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct RingHeader {
    /// log2(element size).
    pub log2_elem_size: u32,
    /// slots − 1.
    pub index_mask: u32,
    /// [`RING_MAGIC`].
    pub magic: u32,
    /// Reserved.
    pub pad0: [u8; 116],
    /// Producer index, written only by the producer (Release), read by the consumer (Acquire).
    pub producer: u64,
    /// Reserved: the rest of the producer's cache lines.
    pub pad1: [u8; 120],
    /// Consumer index, written only by the consumer (Release), read by the producer (Acquire).
    pub consumer: u64,
    /// Reserved.
    pub pad2: [u8; 120],
}
const _: () = assert!(core::mem::size_of::<RingHeader>() == RING_DATA_OFFSET);
const _: () = assert!(core::mem::offset_of!(RingHeader, index_mask) == RING_INDEX_MASK_OFFSET);
const _: () = assert!(core::mem::offset_of!(RingHeader, magic) == RING_MAGIC_OFFSET);
const _: () = assert!(core::mem::offset_of!(RingHeader, producer) == RING_PRODUCER_OFFSET);
const _: () = assert!(core::mem::offset_of!(RingHeader, consumer) == RING_CONSUMER_OFFSET);

/// The fixed part of a send WQE (64 bytes; see the module docs for the layout).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct SendWqe {
    /// Returned in the CQE.
    pub wr_id: u64,
    /// [`WrOpcode`].
    pub opcode: u32,
    /// [`SendFlags`].
    pub send_flags: u32,
    /// `imm_data` (network-order bytes) or `invalidate_rkey`.
    pub ex: u32,
    /// SGEs following the header.
    pub num_sge: u16,
    /// Inline bytes following the header.
    pub inline_len: u16,
    /// RDMA / atomic remote address.
    pub remote_addr: u64,
    /// RDMA / atomic rkey.
    pub rkey: u32,
    /// UD: AH handle.
    pub ah: u32,
    /// UD: remote QPN; XRC initiator: the responder's XRC SRQ number (24 bits).
    pub remote_qpn: u32,
    /// UD: remote Q_Key.
    pub remote_qkey: u32,
    /// Atomic compare / add value.
    pub compare_add: u64,
    /// Atomic swap value.
    pub swap: u64,
}
const _: () = assert!(core::mem::size_of::<SendWqe>() == SEND_WQE_HDR_BYTES);
const _: () = assert!(core::mem::offset_of!(SendWqe, opcode) == 8);
const _: () = assert!(core::mem::offset_of!(SendWqe, ex) == 16);
const _: () = assert!(core::mem::offset_of!(SendWqe, num_sge) == 20);
const _: () = assert!(core::mem::offset_of!(SendWqe, inline_len) == 22);
const _: () = assert!(core::mem::offset_of!(SendWqe, remote_addr) == 24);
const _: () = assert!(core::mem::offset_of!(SendWqe, ah) == 36);
const _: () = assert!(core::mem::offset_of!(SendWqe, remote_qkey) == 44);
const _: () = assert!(core::mem::offset_of!(SendWqe, compare_add) == 48);
const _: () = assert!(core::mem::offset_of!(SendWqe, swap) == 56);

/// What follows a send WQE's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendPayload<'a> {
    /// Gather list: the SGEs' bytes (16 each).
    Sges(&'a [u8]),
    /// Inline data.
    Inline(&'a [u8]),
}

impl<'a> SendPayload<'a> {
    /// The SGEs (empty for inline).
    pub fn sges(&self) -> impl Iterator<Item = Sge> + 'a {
        let b: &'a [u8] = match self {
            SendPayload::Sges(b) => b,
            SendPayload::Inline(_) => &[],
        };
        b.chunks_exact(Sge::SIZE)
            .filter_map(|c| Sge::read_from_bytes(c).ok())
    }
}

/// Limits a consumer applies when parsing WQEs (from the QP's granted caps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqeLimits {
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max inline bytes.
    pub max_inline: u32,
}

impl SendWqe {
    /// The opcode, or `None` for a value outside `enum ibv_wr_opcode`.
    pub fn op(&self) -> Option<WrOpcode> {
        WrOpcode::from_raw(self.opcode)
    }

    /// The flags.
    pub fn flags(&self) -> SendFlags {
        SendFlags(self.send_flags)
    }

    /// The immediate value in host order.
    pub fn imm_data(&self) -> u32 {
        u32::from_be_bytes(self.ex.to_ne_bytes())
    }

    /// Store an immediate value given in host order.
    pub fn set_imm_data(&mut self, imm: u32) {
        self.ex = u32::from_ne_bytes(imm.to_be_bytes());
    }

    /// Bytes this WQE occupies in its slot (header + payload).
    pub fn wire_len(&self) -> usize {
        SEND_WQE_HDR_BYTES + usize::from(self.num_sge) * Sge::SIZE + usize::from(self.inline_len)
    }

    /// Parse and validate a send WQE copied out of an SQ slot (engine side): the payload
    /// fits the slot, `num_sge ≤ max_sge`, inline only with [`SendFlags::INLINE`], no SGEs
    /// with it, `inline_len ≤ max_inline`. Opcode/QP-type/access checks are the engine's and
    /// become completion errors (LOC_QP_OP_ERR, LOC_PROT_ERR), never panics.
    pub fn parse(slot: &[u8], limits: WqeLimits) -> Result<(SendWqe, SendPayload<'_>)> {
        let (hdr, rest) = SendWqe::read_from_prefix(slot).map_err(|_| AbiError::Truncated {
            what: "send WQE",
            need: SEND_WQE_HDR_BYTES,
            have: slot.len(),
        })?;
        let inline = hdr.flags().contains(SendFlags::INLINE);
        if inline {
            if hdr.num_sge != 0 {
                return Err(AbiError::InvalidField {
                    field: "num_sge (inline)",
                    value: u64::from(hdr.num_sge),
                });
            }
            if u32::from(hdr.inline_len) > limits.max_inline.min(MAX_INLINE_DATA) {
                return Err(AbiError::InvalidField {
                    field: "inline_len",
                    value: u64::from(hdr.inline_len),
                });
            }
            let data = rest
                .get(..usize::from(hdr.inline_len))
                .ok_or(AbiError::Truncated {
                    what: "send WQE inline data",
                    need: hdr.wire_len(),
                    have: slot.len(),
                })?;
            Ok((hdr, SendPayload::Inline(data)))
        } else {
            if hdr.inline_len != 0 {
                return Err(AbiError::InvalidField {
                    field: "inline_len (not inline)",
                    value: u64::from(hdr.inline_len),
                });
            }
            if u32::from(hdr.num_sge) > limits.max_sge.min(MAX_SGE) {
                return Err(AbiError::InvalidField {
                    field: "num_sge",
                    value: u64::from(hdr.num_sge),
                });
            }
            let sges =
                rest.get(..usize::from(hdr.num_sge) * Sge::SIZE)
                    .ok_or(AbiError::Truncated {
                        what: "send WQE SGEs",
                        need: hdr.wire_len(),
                        have: slot.len(),
                    })?;
            Ok((hdr, SendPayload::Sges(sges)))
        }
    }
}

/// The fixed part of a receive WQE (16 bytes, = `ib_uverbs_recv_wr`).
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct RecvWqe {
    /// Returned in the CQE.
    pub wr_id: u64,
    /// SGEs following the header.
    pub num_sge: u32,
    /// Reserved (0).
    pub reserved: u32,
}
const _: () = assert!(core::mem::size_of::<RecvWqe>() == RECV_WQE_HDR_BYTES);

impl RecvWqe {
    /// Parse and validate a receive WQE copied out of an RQ/SRQ slot: `num_sge ≤ max_sge`
    /// and the SGEs fit the slot. Returns the header and the SGEs' bytes.
    pub fn parse(slot: &[u8], max_sge: u32) -> Result<(RecvWqe, &[u8])> {
        let (hdr, rest) = RecvWqe::read_from_prefix(slot).map_err(|_| AbiError::Truncated {
            what: "recv WQE",
            need: RECV_WQE_HDR_BYTES,
            have: slot.len(),
        })?;
        if hdr.num_sge > max_sge.min(MAX_SGE) {
            return Err(AbiError::InvalidField {
                field: "num_sge",
                value: u64::from(hdr.num_sge),
            });
        }
        let n = hdr.num_sge as usize * Sge::SIZE;
        let sges = rest.get(..n).ok_or(AbiError::Truncated {
            what: "recv WQE SGEs",
            need: RECV_WQE_HDR_BYTES + n,
            have: slot.len(),
        })?;
        Ok((hdr, sges))
    }
}

/// One CQ slot: a [`Wc`] and 16 reserved bytes.
#[repr(C)]
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable,
)]
pub struct Cqe {
    /// The completion, in `ib_uverbs_wc` / `ibv_wc` layout.
    pub wc: Wc,
    /// `[0]`: on a CQ made with [`crate::uverbs::UroceCreateCq::WALLCLOCK`], the wall-clock
    /// time (ns since the epoch) the device wrote the CQE; else 0. `[1]`: reserved (0).
    pub reserved: [u64; 2],
}
const _: () = assert!(core::mem::size_of::<Cqe>() == CQE_BYTES as usize);
const _: () = assert!(core::mem::offset_of!(Cqe, wc) == 0);

/// Slot size for an SQ: the header plus the larger of the SGE list and the inline area,
/// rounded up to a power of two (≥ 64, as rxe rounds). `None` if the caps exceed
/// [`MAX_SGE`] / [`MAX_INLINE_DATA`].
pub fn send_wqe_size(max_sge: u32, max_inline: u32) -> Option<u32> {
    if max_sge > MAX_SGE || max_inline > MAX_INLINE_DATA {
        return None;
    }
    let payload = (max_sge * Sge::SIZE as u32).max(max_inline);
    (SEND_WQE_HDR_BYTES as u32 + payload).checked_next_power_of_two()
}

/// Slot size for an RQ/SRQ: header + SGEs, rounded up to a power of two ≥ 64.
pub fn recv_wqe_size(max_sge: u32) -> Option<u32> {
    if max_sge > MAX_SGE {
        return None;
    }
    (RECV_WQE_HDR_BYTES as u32 + max_sge * Sge::SIZE as u32)
        .max(64)
        .checked_next_power_of_two()
}

/// Inline bytes and SGEs that actually fit a slot of `elem_size` bytes — what CREATE_QP
/// reports as granted (a slot rounded up to a power of two may hold more than asked).
pub fn send_caps_for_elem(elem_size: u32) -> (u32, u32) {
    let room = elem_size.saturating_sub(SEND_WQE_HDR_BYTES as u32);
    (
        (room / Sge::SIZE as u32).min(MAX_SGE),
        room.min(MAX_INLINE_DATA),
    )
}
