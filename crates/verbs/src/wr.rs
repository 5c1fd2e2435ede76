//! Work requests (`ibv_send_wr`, `ibv_recv_wr`) and their encodings: the WQEs of the
//! fast path (abi [`abi::fastpath`]) and the WR lists of the POST_* commands (abi
//! [`abi::uverbs::SendWr`]).

use abi::fastpath::{RecvWqe, SendWqe};
use abi::ring::Producer;
use abi::uverbs::{self, AtomicWr, RdmaWr, Sge, UdWr};
use abi::{AccessFlags, Errno, QpType, SendFlags, WrOpcode};
use zerocopy::IntoBytes;

use crate::error::{Error, PostError};
use crate::pd::Ah;

/// What a send WR carries: a gather list of registered memory, or bytes copied into the
/// WQE at post time (`IBV_SEND_INLINE`: no lkey, the engine skips the DMA read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// Scatter/gather elements (lkey, address, length) over registered memory.
    Sges(&'a [Sge]),
    /// Inline data (at most the QP's `max_inline_data` bytes).
    Inline(&'a [u8]),
}

/// The opcode-specific part of a send WR (`ibv_send_wr.wr` union).
#[derive(Clone, Copy, Debug)]
pub enum Remote<'a> {
    /// SEND variants on connected QPs.
    None,
    /// RDMA WRITE / READ target.
    Rdma {
        /// Remote I/O virtual address.
        addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Atomic target and operands.
    Atomic {
        /// Remote address (8-byte aligned).
        addr: u64,
        /// Remote key.
        rkey: u32,
        /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
        compare_add: u64,
        /// Swap value (CMP_AND_SWP).
        swap: u64,
    },
    /// A memory window binding (BIND_MW; `struct ibv_mw_bind_info` and the new R_Key).
    MwBind {
        /// The window's current R_Key (names the window).
        mw_rkey: u32,
        /// The R_Key it gets (same index bits; [`inc_rkey`]).
        new_rkey: u32,
        /// L_Key of the MR (registered with `MW_BIND`) the window lies in.
        lkey: u32,
        /// First byte of the window.
        addr: u64,
        /// Length (0 unbinds a type 1 window).
        length: u64,
        /// Remote access the window grants (`IBV_ACCESS_REMOTE_*`).
        access: u32,
    },
    /// UD destination.
    Ud {
        /// Address handle of the destination.
        ah: &'a Ah,
        /// Destination QPN.
        remote_qpn: u32,
        /// Q_Key.
        remote_qkey: u32,
    },
}

/// One send work request (`struct ibv_send_wr` without `next`: a post list is a slice).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// `IBV_WR_*`.
    pub opcode: WrOpcode,
    /// `IBV_SEND_*` (INLINE is implied by [`Payload::Inline`]).
    pub send_flags: SendFlags,
    /// The local data.
    pub payload: Payload<'a>,
    /// Immediate data in host order (`*_WITH_IMM`; sent big-endian).
    pub imm_data: u32,
    /// The rkey the responder invalidates (`SEND_WITH_INV`).
    pub invalidate_rkey: u32,
    /// Opcode-specific fields.
    pub remote: Remote<'a>,
    /// XRC initiator QPs: the number of the XRC SRQ at the responder that receives this
    /// message (`qp_type.xrc.remote_srqn`; [`crate::Srq::srq_num`] there).
    pub xrc_remote_srqn: u32,
}

impl<'a> SendWr<'a> {
    fn base(wr_id: u64, opcode: WrOpcode, sges: &'a [Sge], remote: Remote<'a>) -> SendWr<'a> {
        SendWr {
            wr_id,
            opcode,
            send_flags: SendFlags::EMPTY,
            payload: Payload::Sges(sges),
            imm_data: 0,
            invalidate_rkey: 0,
            remote,
            xrc_remote_srqn: 0,
        }
    }

    /// A SEND of `sges` (connected QPs).
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> SendWr<'a> {
        SendWr::base(wr_id, WrOpcode::Send, sges, Remote::None)
    }

    /// A SEND of `data`, inline.
    pub fn send_inline(wr_id: u64, data: &'a [u8]) -> SendWr<'a> {
        SendWr::send(wr_id, &[]).inline(data)
    }

    /// A SEND_WITH_INV of `sges` that invalidates `rkey` at the responder.
    pub fn send_with_inv(wr_id: u64, sges: &'a [Sge], rkey: u32) -> SendWr<'a> {
        let mut wr = SendWr::base(wr_id, WrOpcode::SendWithInv, sges, Remote::None);
        wr.invalidate_rkey = rkey;
        wr
    }

    /// A LOCAL_INV of `rkey` (a type 2 memory window of the QP's PD).
    pub fn local_inv(wr_id: u64, rkey: u32) -> SendWr<'a> {
        let mut wr = SendWr::base(wr_id, WrOpcode::LocalInv, &[], Remote::None);
        wr.invalidate_rkey = rkey;
        wr
    }

    /// A BIND_MW: window `mw_rkey` gets R_Key `new_rkey` and the range of `info` (how
    /// type 2 windows are bound, and what [`crate::Qp::bind_mw`] posts for type 1).
    pub fn bind_mw(wr_id: u64, mw_rkey: u32, new_rkey: u32, info: MwBindInfo) -> SendWr<'a> {
        SendWr::base(
            wr_id,
            WrOpcode::BindMw,
            &[],
            Remote::MwBind {
                mw_rkey,
                new_rkey,
                lkey: info.lkey,
                addr: info.addr,
                length: info.length,
                access: info.access.bits(),
            },
        )
    }

    /// An RDMA WRITE of `sges` to `addr`/`rkey`.
    pub fn write(wr_id: u64, sges: &'a [Sge], addr: u64, rkey: u32) -> SendWr<'a> {
        SendWr::base(
            wr_id,
            WrOpcode::RdmaWrite,
            sges,
            Remote::Rdma { addr, rkey },
        )
    }

    /// An RDMA READ from `addr`/`rkey` into `sges`.
    pub fn read(wr_id: u64, sges: &'a [Sge], addr: u64, rkey: u32) -> SendWr<'a> {
        SendWr::base(wr_id, WrOpcode::RdmaRead, sges, Remote::Rdma { addr, rkey })
    }

    /// ATOMIC_CMP_AND_SWP on the 8 bytes at `addr`; the original value lands in `sge`.
    pub fn compare_swap(
        wr_id: u64,
        sge: &'a Sge,
        addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> SendWr<'a> {
        SendWr::base(
            wr_id,
            WrOpcode::AtomicCmpAndSwp,
            core::slice::from_ref(sge),
            Remote::Atomic {
                addr,
                rkey,
                compare_add: compare,
                swap,
            },
        )
    }

    /// ATOMIC_FETCH_AND_ADD on the 8 bytes at `addr`; the original value lands in `sge`.
    pub fn fetch_add(wr_id: u64, sge: &'a Sge, addr: u64, rkey: u32, add: u64) -> SendWr<'a> {
        SendWr::base(
            wr_id,
            WrOpcode::AtomicFetchAndAdd,
            core::slice::from_ref(sge),
            Remote::Atomic {
                addr,
                rkey,
                compare_add: add,
                swap: 0,
            },
        )
    }

    /// A UD SEND of `sges` to QP `remote_qpn` behind `ah`, with Q_Key `remote_qkey`.
    pub fn ud_send(
        wr_id: u64,
        sges: &'a [Sge],
        ah: &'a Ah,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> SendWr<'a> {
        SendWr::base(
            wr_id,
            WrOpcode::Send,
            sges,
            Remote::Ud {
                ah,
                remote_qpn,
                remote_qkey,
            },
        )
    }

    /// Carry `data` inline instead of the gather list.
    pub fn inline(mut self, data: &'a [u8]) -> SendWr<'a> {
        self.payload = Payload::Inline(data);
        self
    }

    /// Add immediate data (host order): SEND becomes SEND_WITH_IMM, RDMA_WRITE becomes
    /// RDMA_WRITE_WITH_IMM; other opcodes only get the value.
    pub fn with_imm(mut self, imm: u32) -> SendWr<'a> {
        self.opcode = match self.opcode {
            WrOpcode::Send => WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite => WrOpcode::RdmaWriteWithImm,
            other => other,
        };
        self.imm_data = imm;
        self
    }

    /// On an XRC initiator: deliver to the responder's XRC SRQ number `srqn`
    /// (`qp_type.xrc.remote_srqn`).
    pub fn to_xrc_srq(mut self, srqn: u32) -> SendWr<'a> {
        self.xrc_remote_srqn = srqn;
        self
    }

    /// Ask for a completion even if the QP does not signal all WRs.
    pub fn signaled(mut self) -> SendWr<'a> {
        self.send_flags |= SendFlags::SIGNALED;
        self
    }

    /// Set the solicited-event bit (wakes a peer armed with `solicited_only`).
    pub fn solicited(mut self) -> SendWr<'a> {
        self.send_flags |= SendFlags::SOLICITED;
        self
    }

    /// Wait for earlier READs and atomics before this WR.
    pub fn fence(mut self) -> SendWr<'a> {
        self.send_flags |= SendFlags::FENCE;
        self
    }

    /// Add `flags`.
    pub fn flags(mut self, flags: SendFlags) -> SendWr<'a> {
        self.send_flags |= flags;
        self
    }

    /// The `ex` word of the WQE: immediate (network-order bytes) or the rkey to invalidate.
    fn ex(&self) -> u32 {
        if self.opcode.has_imm() {
            u32::from_ne_bytes(self.imm_data.to_be_bytes())
        } else if self.opcode == WrOpcode::SendWithInv || self.opcode == WrOpcode::LocalInv {
            self.invalidate_rkey
        } else if let Remote::MwBind { new_rkey, .. } = self.remote {
            new_rkey
        } else {
            0
        }
    }
}

/// One receive work request (`struct ibv_recv_wr` without `next`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes (a UD receive starts with a 40-byte GRH area).
    pub sg_list: &'a [Sge],
}

impl<'a> RecvWr<'a> {
    /// A receive into `sges`.
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> RecvWr<'a> {
        RecvWr {
            wr_id,
            sg_list: sges,
        }
    }
}

/// Where a memory window is bound (`struct ibv_mw_bind_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MwBindInfo {
    /// L_Key of the MR (registered with `MW_BIND`) the window lies in.
    pub lkey: u32,
    /// First byte of the window (an address of the MR).
    pub addr: u64,
    /// Length; 0 unbinds a type 1 window.
    pub length: u64,
    /// Remote access the window grants (`IBV_ACCESS_REMOTE_*`).
    pub access: AccessFlags,
}

/// The next R_Key of a memory window: same 24 index bits, 8-bit key plus one
/// (`ibv_inc_rkey`).
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// What a send queue accepts (the QP's granted caps, bounded by its slot size).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendLimits {
    pub(crate) max_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) qp_type: QpType,
    /// The QP's context ([`crate::Context`] identity), to check that a UD WR's AH handle
    /// names an object of this context (handles are per context).
    pub(crate) ctx_id: usize,
}

fn bad(op: &'static str, detail: impl Into<String>) -> Error {
    Error::local(op, Errno::EINVAL, detail)
}

/// Build a send WQE header for `wr` and return it with its payload bytes, checking what
/// rdma-core providers check before writing the queue: SGE count, inline length, that a UD
/// QP gets a UD destination (and a connected one does not), that the AH belongs to this
/// context. Everything else (keys, bounds, access, opcode legality) is the engine's check
/// and becomes a completion status.
pub(crate) fn send_wqe<'w>(
    wr: &SendWr<'w>,
    lim: &SendLimits,
) -> Result<(SendWqe, &'w [u8]), Error> {
    const OP: &str = "post_send";
    let mut hdr = SendWqe {
        wr_id: wr.wr_id,
        opcode: wr.opcode.raw(),
        send_flags: (wr.send_flags & !SendFlags::INLINE).bits(),
        ex: wr.ex(),
        ..SendWqe::default()
    };
    let payload: &[u8] = match wr.payload {
        Payload::Sges(sges) => {
            if sges.len() > lim.max_sge as usize {
                return Err(bad(
                    OP,
                    format!("{} SGEs, QP allows {}", sges.len(), lim.max_sge),
                ));
            }
            hdr.num_sge = sges.len() as u16;
            sges.as_bytes()
        }
        Payload::Inline(data) => {
            if data.len() > lim.max_inline as usize {
                return Err(bad(
                    OP,
                    format!("{} inline bytes, QP allows {}", data.len(), lim.max_inline),
                ));
            }
            hdr.send_flags |= SendFlags::INLINE.bits();
            hdr.inline_len = data.len() as u16;
            data
        }
    };
    if lim.qp_type == QpType::XrcSend {
        // The engine reads an XRC WQE's SRQ number from the UD destination QPN slot.
        if wr.xrc_remote_srqn > 0xff_ffff {
            return Err(bad(OP, "xrc_remote_srqn beyond 24 bits"));
        }
        hdr.remote_qpn = wr.xrc_remote_srqn;
    }
    match (wr.remote, lim.qp_type == QpType::Ud) {
        (
            Remote::Ud {
                ah,
                remote_qpn,
                remote_qkey,
            },
            true,
        ) => {
            if ah.pd().context().id() != lim.ctx_id {
                return Err(bad(OP, "address handle of another context"));
            }
            hdr.ah = ah.handle();
            hdr.remote_qpn = remote_qpn;
            hdr.remote_qkey = remote_qkey;
        }
        (_, true) => return Err(bad(OP, "a UD QP needs a UD destination (ah, qpn, qkey)")),
        (Remote::Ud { .. }, false) => return Err(bad(OP, "UD destination on a connected QP")),
        (Remote::Rdma { addr, rkey }, false) => {
            hdr.remote_addr = addr;
            hdr.rkey = rkey;
        }
        (
            Remote::Atomic {
                addr,
                rkey,
                compare_add,
                swap,
            },
            false,
        ) => {
            hdr.remote_addr = addr;
            hdr.rkey = rkey;
            hdr.compare_add = compare_add;
            hdr.swap = swap;
        }
        (
            Remote::MwBind {
                mw_rkey,
                lkey,
                addr,
                length,
                access,
                ..
            },
            false,
        ) => {
            // The WQE layout of a bind (docs/abi.md §7): the window's rkey, the range, and
            // the MR's lkey with the access flags in the swap word; `ex` the new rkey.
            hdr.rkey = mw_rkey;
            hdr.remote_addr = addr;
            hdr.compare_add = length;
            hdr.swap = u64::from(lkey) | (u64::from(access) << 32);
        }
        (Remote::None, false) => {}
    }
    Ok((hdr, payload))
}

/// Write `wrs` as send WQEs into `prod` and publish them with one index store. Returns how
/// many were published and, if one failed, the error for it (WRs after it are not written).
pub(crate) fn stage_sends(
    prod: &mut Producer,
    lim: &SendLimits,
    wrs: &[SendWr<'_>],
) -> (usize, Option<PostError>) {
    let mut err = None;
    let mut n = 0;
    for (i, wr) in wrs.iter().enumerate() {
        let staged = send_wqe(wr, lim).and_then(|(hdr, payload)| {
            prod.stage_parts(&[hdr.as_bytes(), payload])
                .map_err(|e| Error::abi("post_send", &e))
        });
        if let Err(error) = staged {
            err = Some(PostError { index: i, error });
            break;
        }
        n += 1;
    }
    if n > 0 {
        if let Err(e) = prod.publish() {
            return (
                0,
                Some(PostError {
                    index: 0,
                    error: Error::abi("post_send", &e),
                }),
            );
        }
    }
    (n, err)
}

/// Write `wrs` as receive WQEs into `prod` and publish them (no doorbell: the engine looks
/// at a receive queue when a request arrives; abi `doorbell` module docs).
pub(crate) fn stage_recvs(
    op: &'static str,
    prod: &mut Producer,
    max_sge: u32,
    wrs: &[RecvWr<'_>],
) -> Result<(), PostError> {
    let mut err = None;
    let mut n = 0usize;
    for (i, wr) in wrs.iter().enumerate() {
        let staged = if wr.sg_list.len() > max_sge as usize {
            Err(bad(
                op,
                format!("{} SGEs, queue allows {max_sge}", wr.sg_list.len()),
            ))
        } else {
            let hdr = RecvWqe {
                wr_id: wr.wr_id,
                num_sge: wr.sg_list.len() as u32,
                reserved: 0,
            };
            prod.stage_parts(&[hdr.as_bytes(), wr.sg_list.as_bytes()])
                .map_err(|e| Error::abi(op, &e))
        };
        if let Err(error) = staged {
            err = Some(PostError { index: i, error });
            break;
        }
        n += 1;
    }
    if n > 0 {
        prod.publish().map_err(|e| PostError {
            index: 0,
            error: Error::abi(op, &e),
        })?;
    }
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The WR and SGE arrays of a POST_SEND command (`ib_uverbs_send_wr` × n, then SGEs).
pub(crate) fn encode_send_cmd(
    wrs: &[SendWr<'_>],
    lim: &SendLimits,
    wr_bytes: &mut Vec<u8>,
    sge_bytes: &mut Vec<u8>,
) -> Result<(), PostError> {
    for (i, wr) in wrs.iter().enumerate() {
        let fail = |error| PostError { index: i, error };
        // Reuse the fast path's checks (limits, UD destination) for identical semantics.
        send_wqe(wr, lim).map_err(fail)?;
        // Inline data travels as the kernel ABI has it: SGEs over the caller's bytes with
        // IBV_SEND_INLINE, which the control plane copies while it handles the command
        // (the slice is borrowed for the whole call, so the bytes are there to read).
        let inline_sge;
        let sges: &[Sge] = match wr.payload {
            Payload::Sges(s) => s,
            Payload::Inline([]) => &[],
            Payload::Inline(data) => {
                inline_sge = Sge {
                    addr: data.as_ptr() as usize as u64,
                    length: data.len() as u32,
                    lkey: 0,
                };
                core::slice::from_ref(&inline_sge)
            }
        };
        let mut send_flags = wr.send_flags;
        if matches!(wr.payload, Payload::Inline(_)) {
            send_flags |= SendFlags::INLINE;
        }
        let mut w = uverbs::SendWr {
            wr_id: wr.wr_id,
            num_sge: sges.len() as u32,
            opcode: wr.opcode.raw(),
            send_flags: send_flags.bits(),
            ex: wr.ex(),
            wr: [0; 32],
        };
        match wr.remote {
            Remote::None => {}
            Remote::MwBind { .. } => {
                return Err(PostError {
                    index: i,
                    error: bad(
                        "post_send",
                        "BIND_MW cannot travel in a POST_SEND command (ib_uverbs_send_wr)",
                    ),
                })
            }
            Remote::Rdma { addr, rkey } => w.set_rdma(RdmaWr {
                remote_addr: addr,
                rkey,
                reserved: 0,
            }),
            Remote::Atomic {
                addr,
                rkey,
                compare_add,
                swap,
            } => w.set_atomic(AtomicWr {
                remote_addr: addr,
                compare_add,
                swap,
                rkey,
                reserved: 0,
            }),
            Remote::Ud {
                ah,
                remote_qpn,
                remote_qkey,
            } => w.set_ud(UdWr {
                ah: ah.handle(),
                remote_qpn,
                remote_qkey,
                reserved: 0,
            }),
        }
        wr_bytes.extend_from_slice(w.as_bytes());
        sge_bytes.extend_from_slice(sges.as_bytes());
    }
    Ok(())
}

/// The WR and SGE arrays of a POST_RECV / POST_SRQ_RECV command.
pub(crate) fn encode_recv_cmd(
    op: &'static str,
    wrs: &[RecvWr<'_>],
    max_sge: u32,
    wr_bytes: &mut Vec<u8>,
    sge_bytes: &mut Vec<u8>,
) -> Result<(), PostError> {
    for (i, wr) in wrs.iter().enumerate() {
        if wr.sg_list.len() > max_sge as usize {
            return Err(PostError {
                index: i,
                error: bad(
                    op,
                    format!("{} SGEs, queue allows {max_sge}", wr.sg_list.len()),
                ),
            });
        }
        let w = uverbs::RecvWr {
            wr_id: wr.wr_id,
            num_sge: wr.sg_list.len() as u32,
            reserved: 0,
        };
        wr_bytes.extend_from_slice(w.as_bytes());
        sge_bytes.extend_from_slice(wr.sg_list.as_bytes());
    }
    Ok(())
}

/// Turn a POST_* reply's `bad_wr` (0 = all posted, else the 1-based index of the first WR
/// not posted) into the library's result.
pub(crate) fn bad_wr_result(op: &'static str, bad_wr: u32, count: usize) -> Result<(), PostError> {
    if bad_wr == 0 {
        return Ok(());
    }
    let index = (bad_wr as usize)
        .saturating_sub(1)
        .min(count.saturating_sub(1));
    Err(PostError {
        index,
        error: Error::control_plane(op, Errno::EINVAL),
    })
}
