//! Opcode selection (docs/wire.md §2.7) and in-place packet emission.
//!
//! Payload bytes are written straight into the caller's transmit buffer by a memory read (one
//! copy, like DMA); the headers are then emitted in front of them with the `wire` Reprs. So a
//! packet is built without any intermediate buffer or allocation.

use wire::{bth, Opcode, RocePacketRepr};

use crate::{Service, WrOpcode};

/// The wire opcode of one request packet (rxe `next_opcode_rc/uc`, docs/wire.md §2.7).
/// `first`/`last` say where the packet sits in its message.
pub(crate) fn request_opcode(ty: Service, op: WrOpcode, first: bool, last: bool) -> Opcode {
    use WrOpcode as W;
    match ty {
        Service::Ud => {
            if op == W::SendWithImm {
                Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
            } else {
                Opcode::UD_SEND_ONLY
            }
        }
        Service::Rc => match (op, first, last) {
            (W::RdmaRead, _, _) => Opcode::RC_RDMA_READ_REQUEST,
            (W::AtomicCmpAndSwp, _, _) => Opcode::RC_COMPARE_SWAP,
            (W::AtomicFetchAndAdd, _, _) => Opcode::RC_FETCH_ADD,
            (W::Send, true, true) => Opcode::RC_SEND_ONLY,
            (W::SendWithImm, true, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            (W::SendWithInv, true, true) => Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            (W::Send | W::SendWithImm | W::SendWithInv, true, false) => Opcode::RC_SEND_FIRST,
            (W::Send | W::SendWithImm | W::SendWithInv, false, false) => Opcode::RC_SEND_MIDDLE,
            (W::Send, false, true) => Opcode::RC_SEND_LAST,
            (W::SendWithImm, false, true) => Opcode::RC_SEND_LAST_WITH_IMMEDIATE,
            (W::SendWithInv, false, true) => Opcode::RC_SEND_LAST_WITH_INVALIDATE,
            (W::RdmaWrite, true, true) => Opcode::RC_RDMA_WRITE_ONLY,
            (W::RdmaWriteWithImm, true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            (W::RdmaWrite | W::RdmaWriteWithImm, true, false) => Opcode::RC_RDMA_WRITE_FIRST,
            (W::RdmaWrite | W::RdmaWriteWithImm, false, false) => Opcode::RC_RDMA_WRITE_MIDDLE,
            (W::RdmaWrite, false, true) => Opcode::RC_RDMA_WRITE_LAST,
            (W::RdmaWriteWithImm, false, true) => Opcode::RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            // Local operations never become packets (`WrOpcode::is_local`), and `post_send`
            // refuses opcodes uroce does not implement (`WrOpcode::is_implemented`).
            (W::LocalInv | W::BindMw | W::Tso | W::Flush | W::AtomicWrite, _, _) => {
                Opcode::RC_SEND_ONLY
            }
        },
        Service::Uc => match (op, first, last) {
            (W::SendWithImm, true, true) => Opcode::UC_SEND_ONLY_WITH_IMMEDIATE,
            (_, true, true) if op.is_send() => Opcode::UC_SEND_ONLY,
            (_, true, false) if op.is_send() => Opcode::UC_SEND_FIRST,
            (_, false, false) if op.is_send() => Opcode::UC_SEND_MIDDLE,
            (W::SendWithImm, false, true) => Opcode::UC_SEND_LAST_WITH_IMMEDIATE,
            (_, false, true) if op.is_send() => Opcode::UC_SEND_LAST,
            (W::RdmaWriteWithImm, true, true) => Opcode::UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
            (_, true, true) => Opcode::UC_RDMA_WRITE_ONLY,
            (_, true, false) => Opcode::UC_RDMA_WRITE_FIRST,
            (_, false, false) => Opcode::UC_RDMA_WRITE_MIDDLE,
            (W::RdmaWriteWithImm, false, true) => Opcode::UC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
            (_, false, true) => Opcode::UC_RDMA_WRITE_LAST,
        },
    }
}

/// READ response opcode for a packet at this position of the response stream.
pub(crate) fn read_response_opcode(first: bool, last: bool) -> Opcode {
    match (first, last) {
        (true, true) => Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        (true, false) => Opcode::RC_RDMA_READ_RESPONSE_FIRST,
        (false, false) => Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
        (false, true) => Opcode::RC_RDMA_READ_RESPONSE_LAST,
    }
}

/// BTH + extension header length of `op` (from the one opcode table).
pub(crate) fn header_len(op: Opcode) -> usize {
    op.info().map_or(bth::HEADER_LEN, |i| i.header_len)
}

/// Emit the headers of `hdr` (whose `payload` must be empty) into `buf[..header_len]`, when
/// `payload_len` payload bytes already sit at `buf[header_len..]`; then write the pad and set
/// PadCnt. Returns the transport length (BTH .. last pad byte), or `None` if the Repr disagrees
/// with its opcode or `buf` is too small.
pub fn finish_in_place(
    hdr: &RocePacketRepr<'_>,
    payload_len: usize,
    buf: &mut [u8],
) -> Option<usize> {
    let hl = header_len(hdr.bth.opcode);
    let pad = usize::from(wire::roce::pad_for(payload_len));
    let total = hl + payload_len + pad;
    if buf.len() < total || !hdr.payload.is_empty() {
        return None;
    }
    hdr.emit(buf).ok()?;
    // At most 3 pad bytes: a loop, not `fill` (a `memset` call even for none, which
    // showed as 5 % of a 1,000-QP run's profile).
    for b in buf.get_mut(hl + payload_len..total)? {
        *b = 0;
    }
    let mut b = bth::Packet::new_checked(buf.get_mut(..bth::HEADER_LEN)?).ok()?;
    b.set_pad_count(pad as u8);
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{BthRepr, Psn, Qpn, RethRepr, Rkey};

    #[test]
    fn opcode_selection_matches_table_positions() {
        use WrOpcode as W;
        for ty in [Service::Rc, Service::Uc] {
            for op in [W::Send, W::SendWithImm, W::RdmaWrite, W::RdmaWriteWithImm] {
                for (first, last) in [(true, true), (true, false), (false, false), (false, true)] {
                    let o = request_opcode(ty, op, first, last);
                    let info = o.info().expect("known opcode");
                    assert_eq!(info.position.is_first(), first, "{o}");
                    assert_eq!(info.position.is_last(), last, "{o}");
                    assert_eq!(info.headers.has_immdt(), op.has_imm() && last, "{o}");
                    assert_eq!(info.headers.has_reth(), op.is_write() && first, "{o}");
                    let want = if ty == Service::Rc {
                        wire::Transport::Rc
                    } else {
                        wire::Transport::Uc
                    };
                    assert_eq!(info.transport, want);
                }
            }
        }
        let inv = request_opcode(Service::Rc, W::SendWithInv, false, true);
        assert!(inv.info().expect("known").headers.has_ieth());
        assert_eq!(
            request_opcode(Service::Ud, W::SendWithImm, true, true),
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
        );
    }

    #[test]
    fn in_place_emission_equals_repr_emit() {
        let payload = [1u8, 2, 3, 4, 5];
        let mut bth = BthRepr::new(Opcode::RC_RDMA_WRITE_ONLY, Qpn::new(7), Psn::new(9));
        bth.ack_req = true;
        let reth = Some(RethRepr {
            va: 0x1000,
            rkey: Rkey(5),
            len: 5,
        });
        let full = RocePacketRepr {
            reth,
            ..RocePacketRepr::new(bth, &payload)
        };
        let mut a = [0xAAu8; 64];
        let n = full.emit(&mut a).expect("emit");
        let mut b = [0xBBu8; 64];
        let hl = header_len(bth.opcode);
        b[hl..hl + 5].copy_from_slice(&payload);
        let hdr = RocePacketRepr {
            reth,
            ..RocePacketRepr::new(bth, &[])
        };
        assert_eq!(finish_in_place(&hdr, 5, &mut b), Some(n));
        assert_eq!(&a[..n], &b[..n]);
        assert_eq!(finish_in_place(&hdr, 5, &mut b[..n - 1]), None);
    }
}
