//! WQE/CQE layouts and their validation, end to end through a ring, plus the verbs
//! constants that cross the boundary.

use abi::fastpath::*;
use abi::ring::{channel, RingLayout};
use abi::uverbs::{Sge, Wc};
use abi::*;
use proptest::prelude::*;
use zerocopy::IntoBytes;

const LIMITS: WqeLimits = WqeLimits {
    max_sge: 4,
    max_inline: 256,
};

#[test]
fn sizing_rules() {
    assert_eq!(send_wqe_size(1, 0), Some(128));
    assert_eq!(send_wqe_size(0, 0), Some(64));
    assert_eq!(send_wqe_size(4, 0), Some(128));
    assert_eq!(send_wqe_size(4, 64), Some(128));
    assert_eq!(send_wqe_size(1, 256), Some(512));
    assert_eq!(send_wqe_size(32, 0), Some(1024));
    assert_eq!(send_wqe_size(33, 0), None);
    assert_eq!(send_wqe_size(1, 257), None);
    assert_eq!(recv_wqe_size(1), Some(64));
    assert_eq!(recv_wqe_size(4), Some(128));
    assert_eq!(recv_wqe_size(0), Some(64));
    // A 128-byte slot grants 4 SGEs and 64 inline bytes, whatever was asked.
    assert_eq!(send_caps_for_elem(128), (4, 64));
    assert_eq!(send_caps_for_elem(512), (28, 256));
}

#[test]
fn send_wqe_with_sges_through_the_sq() {
    let elem = send_wqe_size(4, 0).unwrap();
    let (mut sq, mut eng) = channel(RingLayout::new(8, elem).unwrap()).unwrap();
    let mut hdr = SendWqe {
        wr_id: 0xfeed,
        opcode: WrOpcode::RdmaWriteWithImm.raw(),
        send_flags: (SendFlags::SIGNALED | SendFlags::SOLICITED).0,
        num_sge: 2,
        remote_addr: 0x7000_0000,
        rkey: 0x1234,
        ..Default::default()
    };
    hdr.set_imm_data(0xcafe_babe);
    let sges = [
        Sge {
            addr: 0x1000,
            length: 8,
            lkey: 1,
        },
        Sge {
            addr: 0x2000,
            length: 100,
            lkey: 2,
        },
    ];
    // Header and SGEs go straight into the slot, no staging buffer.
    sq.stage_parts(&[hdr.as_bytes(), sges.as_bytes()]).unwrap();
    sq.publish().unwrap();

    assert_eq!(eng.available().unwrap(), 1);
    let mut slot = vec![0u8; elem as usize];
    eng.read(0, 0, &mut slot).unwrap();
    let (got, payload) = SendWqe::parse(&slot, LIMITS).unwrap();
    assert_eq!(got, hdr);
    assert_eq!(got.op(), Some(WrOpcode::RdmaWriteWithImm));
    assert_eq!(got.imm_data(), 0xcafe_babe);
    assert_eq!(got.wire_len(), 64 + 32);
    assert_eq!(payload.sges().collect::<Vec<_>>(), sges.to_vec());
    eng.release(1).unwrap();
}

#[test]
fn inline_send_and_ud_fields() {
    let elem = send_wqe_size(1, 256).unwrap();
    let (mut sq, mut eng) = channel(RingLayout::new(2, elem).unwrap()).unwrap();
    let data: Vec<u8> = (0..200u8).collect();
    let hdr = SendWqe {
        wr_id: 1,
        opcode: WrOpcode::Send.raw(),
        send_flags: SendFlags::INLINE.0,
        inline_len: 200,
        ah: 9,
        remote_qpn: 0x11,
        remote_qkey: 0x8001_0000,
        ..Default::default()
    };
    sq.stage_parts(&[hdr.as_bytes(), &data]).unwrap();
    sq.publish().unwrap();
    eng.available().unwrap();
    let mut slot = vec![0u8; elem as usize];
    eng.read(0, 0, &mut slot).unwrap();
    let (got, payload) = SendWqe::parse(&slot, LIMITS).unwrap();
    assert_eq!(
        (got.ah, got.remote_qpn, got.remote_qkey),
        (9, 0x11, 0x8001_0000)
    );
    assert_eq!(payload, SendPayload::Inline(&data));
    assert_eq!(payload.sges().count(), 0);
}

#[test]
fn send_wqe_validation() {
    let slot = |h: SendWqe| {
        let mut v = h.as_bytes().to_vec();
        v.resize(512, 0);
        v
    };
    let base = SendWqe {
        opcode: WrOpcode::Send.raw(),
        ..Default::default()
    };
    assert!(SendWqe::parse(&slot(base), LIMITS).is_ok());
    // Too many SGEs for the QP.
    let e = SendWqe::parse(&slot(SendWqe { num_sge: 5, ..base }), LIMITS).unwrap_err();
    assert_eq!(e.errno(), Errno::EINVAL);
    // SGEs that don't fit the slot.
    let v = slot(SendWqe { num_sge: 4, ..base });
    assert!(SendWqe::parse(&v[..64 + 63], LIMITS).is_err());
    // Inline beyond the QP's limit, inline bytes without the INLINE flag, SGEs with it.
    let inl = SendWqe {
        send_flags: SendFlags::INLINE.0,
        ..base
    };
    assert!(SendWqe::parse(
        &slot(SendWqe {
            inline_len: 300,
            ..inl
        }),
        WqeLimits {
            max_sge: 4,
            max_inline: 512
        }
    )
    .is_err());
    assert!(SendWqe::parse(
        &slot(SendWqe {
            inline_len: 65,
            ..inl
        }),
        WqeLimits {
            max_sge: 4,
            max_inline: 64
        }
    )
    .is_err());
    assert!(SendWqe::parse(
        &slot(SendWqe {
            inline_len: 8,
            ..base
        }),
        LIMITS
    )
    .is_err());
    assert!(SendWqe::parse(
        &slot(SendWqe {
            num_sge: 1,
            inline_len: 8,
            ..inl
        }),
        LIMITS
    )
    .is_err());
    // Shorter than a header.
    assert!(SendWqe::parse(&[0u8; 63], LIMITS).is_err());
}

#[test]
fn recv_wqe_validation() {
    let mut v = RecvWqe {
        wr_id: 5,
        num_sge: 2,
        reserved: 0,
    }
    .as_bytes()
    .to_vec();
    v.extend_from_slice(
        [
            Sge {
                addr: 1,
                length: 2,
                lkey: 3,
            },
            Sge {
                addr: 4,
                length: 5,
                lkey: 6,
            },
        ]
        .as_bytes(),
    );
    let (h, sges) = RecvWqe::parse(&v, 2).unwrap();
    assert_eq!(h.wr_id, 5);
    assert_eq!(sges.len(), 32);
    assert!(RecvWqe::parse(&v, 1).is_err());
    assert!(RecvWqe::parse(&v[..40], 2).is_err());
}

#[test]
fn cqe_prefix_is_ibv_wc() {
    let mut wc = Wc {
        wr_id: 0x0102_0304_0506_0708,
        status: WcStatus::RetryExcErr.raw(),
        opcode: WcOpcode::RdmaWrite.raw(),
        qp_num: 0x11,
        wc_flags: (WcFlags::WITH_IMM | WcFlags::GRH).0,
        port_num: 1,
        ..Default::default()
    };
    wc.set_imm_data(0x0a0b_0c0d);
    let cqe = Cqe {
        wc,
        reserved: [0; 2],
    };
    let b = cqe.as_bytes();
    assert_eq!(b.len(), 64);
    assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_ne_bytes());
    assert_eq!(&b[8..12], &12u32.to_ne_bytes());
    assert_eq!(
        &b[24..28],
        &[0x0a, 0x0b, 0x0c, 0x0d],
        "imm_data in network order"
    );
    assert_eq!(&b[28..32], &0x11u32.to_ne_bytes());
    assert_eq!(&b[36..40], &3u32.to_ne_bytes());
    assert_eq!(b[46], 1);
}

#[test]
fn wc_status_strings_are_rdma_cores() {
    assert_eq!(WcStatus::Success.as_str(), "success");
    assert_eq!(WcStatus::LocProtErr.as_str(), "local protection error");
    assert_eq!(WcStatus::WrFlushErr.as_str(), "Work Request Flushed Error");
    assert_eq!(
        WcStatus::RetryExcErr.as_str(),
        "transport retry counter exceeded"
    );
    assert_eq!(
        WcStatus::RnrRetryExcErr.as_str(),
        "RNR retry counter exceeded"
    );
    assert_eq!(WcStatus::RemAccessErr.as_str(), "remote access error");
    assert_eq!(
        WcStatus::MwBindErr.as_str(),
        "memory management operation error"
    );
    assert_eq!(WcStatus::RemAbortErr.as_str(), "aborted error");
    assert_eq!(
        WcStatus::TmRndvIncomplete.as_str(),
        "TM software rendezvous"
    );
    assert_eq!(WcStatus::str_of_raw(24), "unknown");
    assert_eq!(WcStatus::from_raw(24), None);
    assert_eq!(WcStatus::ALL.len(), 24);
    for (i, s) in WcStatus::ALL.iter().enumerate() {
        assert_eq!(s.raw() as usize, i, "statuses are numbered 0..=23 in order");
        assert_eq!(WcStatus::from_raw(i as u32), Some(*s));
        assert_ne!(s.as_str(), "unknown");
    }
    assert_eq!(PortState::ACTIVE.as_str(), "active");
}

#[test]
fn enum_values_and_debug() {
    assert_eq!(QpState::Err.raw(), 6);
    assert_eq!(QpType::Ud.raw(), 4);
    assert_eq!(QpAttrMask::DEST_QPN.0, 1 << 20);
    assert_eq!(QpAttrMask::RATE_LIMIT.0, 1 << 25);
    // perftest's INIT mask 0x39 = STATE|ACCESS_FLAGS|PKEY_INDEX|PORT.
    let m = QpAttrMask(0x39);
    assert_eq!(format!("{m:?}"), "STATE | ACCESS_FLAGS | PKEY_INDEX | PORT");
    assert_eq!(format!("{:?}", QpAttrMask(1 | 1 << 22)), "STATE | 0x400000");
    assert_eq!(AccessFlags(0x100003).unknown_bits(), 0);
    assert!(AccessFlags(0x100003).contains(AccessFlags::RELAXED_ORDERING));
    assert!(AccessFlags::OPTIONAL_RANGE.contains(AccessFlags::RELAXED_ORDERING));
    assert_eq!(
        WcFlags::IP_CSUM_OK.0,
        4,
        "libibverbs value, not the kernel's 8"
    );
    assert_eq!(WcFlags::WITH_INV.0, 8);
    assert!(WcOpcode::RecvRdmaWithImm.is_recv());
    assert!(!WcOpcode::RdmaRead.is_recv());
    assert_eq!(WrOpcode::SendWithInv.wc_opcode(), WcOpcode::Send);
    assert_eq!(WrOpcode::AtomicFetchAndAdd.wc_opcode(), WcOpcode::FetchAdd);
    assert_eq!(WrOpcode::from_raw(11), None);
    assert_eq!(WrOpcode::raw_name(11).to_string(), "WrOpcode(0xb)");
    assert_eq!(WrOpcode::Flush.wc_opcode(), WcOpcode::Flush);
    assert_eq!(WcOpcode::RecvRdmaWithImm.raw(), 129);
    assert_eq!(Mtu::Mtu1024.bytes(), 1024);
    assert_eq!(Mtu::from_bytes(4096), Some(Mtu::Mtu4096));
    assert_eq!(Mtu::from_raw(0), None);
    assert_eq!(Mtu::from_bytes(1500), None);
    assert_eq!(QpState::raw_name(3).to_string(), "RTS");
    assert_eq!(QpState::raw_name(9).to_string(), "QpState(0x9)");
    assert_eq!(Errno::EOPNOTSUPP.0, 95);
    assert_eq!(format!("{:?}", Errno(1234)), "Errno(1234)");
}

proptest! {
    /// Any bytes as a send or receive WQE: errors, never panics; accepted WQEs keep their
    /// payload inside the slot.
    #[test]
    fn wqe_parse_random(slot in proptest::collection::vec(any::<u8>(), 0..600), max_sge in 0u32..40, max_inline in 0u32..600) {
        if let Ok((h, p)) = SendWqe::parse(&slot, WqeLimits { max_sge, max_inline }) {
            prop_assert!(h.wire_len() <= slot.len());
            match p {
                SendPayload::Inline(d) => prop_assert!(d.len() as u32 <= max_inline.min(MAX_INLINE_DATA)),
                SendPayload::Sges(s) => prop_assert!(s.len() / 16 <= max_sge.min(MAX_SGE) as usize),
            }
        }
        if let Ok((h, s)) = RecvWqe::parse(&slot, max_sge) {
            prop_assert_eq!(s.len(), h.num_sge as usize * 16);
        }
    }
}
