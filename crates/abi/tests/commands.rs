//! Command framing and payload codec: golden bytes, errno mapping, round trips, random input.

use abi::cmd::{
    encode_extended, encode_legacy, encode_reply, CmdHdr, Command, ExCmdHdr, Frame, Reply,
    ReplyHdr, CMD_FLAG_EXTENDED,
};
use abi::uverbs::*;
use abi::{decode_request, AbiError, Errno, Request};
use proptest::prelude::*;
use zerocopy::{FromBytes, IntoBytes};

/// Commands uroce implements (legacy form).
const SUPPORTED: &[Command] = &[
    Command::GET_CONTEXT,
    Command::QUERY_DEVICE,
    Command::QUERY_PORT,
    Command::ALLOC_PD,
    Command::DEALLOC_PD,
    Command::CREATE_AH,
    Command::DESTROY_AH,
    Command::REG_MR,
    Command::DEREG_MR,
    Command::CREATE_COMP_CHANNEL,
    Command::CREATE_CQ,
    Command::RESIZE_CQ,
    Command::DESTROY_CQ,
    Command::POLL_CQ,
    Command::REQ_NOTIFY_CQ,
    Command::CREATE_QP,
    Command::QUERY_QP,
    Command::MODIFY_QP,
    Command::DESTROY_QP,
    Command::POST_SEND,
    Command::POST_RECV,
    Command::CREATE_SRQ,
    Command::MODIFY_SRQ,
    Command::QUERY_SRQ,
    Command::DESTROY_SRQ,
    Command::POST_SRQ_RECV,
    Command::UROCE_QUERY_GID,
    Command::UROCE_QUERY_PKEY,
];

fn errno_of(bytes: &[u8]) -> Errno {
    match decode_request(bytes) {
        Ok(r) => panic!("expected an error, decoded {r:?}"),
        Err(e) => e.errno(),
    }
}

fn legacy(cmd: Command, payload: &[u8], cap: usize) -> Vec<u8> {
    let mut v = Vec::new();
    encode_legacy(cmd, payload, &[], cap, &mut v).unwrap();
    v
}

#[test]
fn command_numbers_match_uapi() {
    // docs/abi.md §2, spot-checked across the table.
    assert_eq!(Command::GET_CONTEXT.0, 0);
    assert_eq!(Command::REG_MR.0, 9);
    assert_eq!(Command::CREATE_COMP_CHANNEL.0, 17);
    assert_eq!(Command::REQ_NOTIFY_CQ.0, 23);
    assert_eq!(Command::CREATE_QP.0, 24);
    assert_eq!(Command::MODIFY_QP.0, 26);
    assert_eq!(Command::POST_SEND.0, 28);
    assert_eq!(Command::CREATE_SRQ.0, 32);
    assert_eq!(Command::POST_SRQ_RECV.0, 36);
    assert_eq!(Command::OPEN_QP.0, 40);
    assert_eq!(Command::CREATE_FLOW.0, 50);
    assert_eq!(Command::MODIFY_CQ.0, 57);
    assert!(Command::UROCE_QUERY_GID.is_driver_private());
    assert!(!Command::OPEN_QP.is_driver_private());
    assert_eq!(format!("{:?}", Command::POLL_CQ), "POLL_CQ");
    assert_eq!(format!("{:?}", Command(0x77)), "Command(0x77)");
    assert_eq!(Command::CREATE_QP.ex_word(), 0x8000_0018);
}

#[test]
fn golden_alloc_pd_as_rdma_core_writes_it() {
    // ibv_cmd_alloc_pd: hdr{3, in_words 4, out_words 1}, then `response` (a user pointer).
    let mut bytes = vec![3, 0, 0, 0, 4, 0, 1, 0];
    bytes.extend_from_slice(&0x7fff_dead_beefu64.to_ne_bytes());
    let (frame, req) = decode_request(&bytes).unwrap();
    assert_eq!(frame.response_capacity(), 4);
    assert_eq!(
        req,
        Request::AllocPd(AllocPd {
            response: 0x7fff_dead_beef
        })
    );
    // Our encoder produces the same bytes (modulo the ignored response field).
    let mut out = Vec::new();
    Request::AllocPd(AllocPd {
        response: 0x7fff_dead_beef,
    })
    .encode(&mut out)
    .unwrap();
    assert_eq!(out, bytes);
}

#[test]
fn golden_modify_qp_rts() {
    // perftest's RTR→RTS: mask 0x12e01, timeout 14, retry 7, rnr 7, max_rd_atomic 1.
    let m = ModifyQp {
        qp_handle: 5,
        attr_mask: 0x12e01,
        sq_psn: 0x123456,
        qp_state: 3,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let mut out = Vec::new();
    Request::ModifyQp(m).encode(&mut out).unwrap();
    assert_eq!(out.len(), 8 + 112);
    assert_eq!(&out[..8], &[26, 0, 0, 0, 30, 0, 0, 0]);
    // Byte offsets inside the core struct (docs/abi.md §3): attr_mask @68, qp_state @96,
    // timeout @105, retry_cnt @106.
    assert_eq!(&out[8 + 68..8 + 72], &0x12e01u32.to_ne_bytes());
    assert_eq!(out[8 + 96], 3);
    assert_eq!(out[8 + 105], 14);
    assert_eq!(out[8 + 106], 7);
    let (_, r) = decode_request(&out).unwrap();
    let Request::ModifyQp(d) = r else {
        panic!("{r:?}")
    };
    assert_eq!(d.state(), Some(abi::QpState::Rts));
    assert!(d
        .mask()
        .contains(abi::QpAttrMask::SQ_PSN | abi::QpAttrMask::TIMEOUT));
}

#[test]
fn header_errors_map_to_kernel_errnos() {
    // Shorter than the header.
    assert_eq!(errno_of(&[0, 0, 0]), Errno::EINVAL);
    // Bits outside FLAG_EXTENDED | 0xff.
    assert_eq!(
        errno_of(&[3, 1, 0, 0, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Errno::EINVAL
    );
    // in_words disagrees with the length.
    assert_eq!(
        errno_of(&[3, 0, 0, 0, 5, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
        Errno::EINVAL
    );
    // Unknown command number.
    assert_eq!(
        errno_of(&legacy(Command(0x60), &[0; 8], 64)),
        Errno::EOPNOTSUPP
    );
    // Known but not implemented (BIND_MW is a work request, as in the kernel).
    assert_eq!(
        errno_of(&legacy(Command::BIND_MW, &[0; 16], 64)),
        Errno::EOPNOTSUPP
    );
    // Core struct missing (verify_hdr: ENOSPC).
    assert_eq!(
        errno_of(&legacy(Command::REG_MR, &[0; 32], 12)),
        Errno::ENOSPC
    );
    // Response capacity below the core response (ENOSPC).
    assert_eq!(
        errno_of(&legacy(Command::REG_MR, &[0; 40], 8)),
        Errno::ENOSPC
    );
    // Below core + uroce driver response (EINVAL, as rxe checks udata->outlen).
    let mut v = Vec::new();
    let gc = [
        GetContext::default().as_bytes(),
        UroceGetContext::default().as_bytes(),
    ]
    .concat();
    encode_legacy(Command::GET_CONTEXT, &gc, &[], GetContextResp::SIZE, &mut v).unwrap();
    assert_eq!(errno_of(&v), Errno::EINVAL);
    // Driver data missing where uroce needs it.
    assert_eq!(
        errno_of(&legacy(Command::GET_CONTEXT, &[0; 8], 24)),
        Errno::EINVAL
    );
    // Nonzero driver data where none is defined.
    let mut p = vec![0u8; 8];
    p.extend_from_slice(&[0, 0, 0, 1]);
    assert_eq!(errno_of(&legacy(Command::ALLOC_PD, &p, 4)), Errno::EINVAL);
    // Zero driver data where none is defined is accepted (forward compatible).
    assert!(decode_request(&legacy(Command::ALLOC_PD, &[0; 16], 4)).is_ok());
}

#[test]
fn extended_framing() {
    let mut v = Vec::new();
    encode_extended(Command::CREATE_CQ, &[0; 32], &[0; 24], 16, 8, &mut v).unwrap();
    let f = Frame::parse(&v).unwrap();
    assert!(f.is_extended());
    assert_eq!(f.command, Command::CREATE_CQ);
    assert_eq!(f.core.len(), 32);
    assert_eq!(f.driver.len(), 24);
    assert_eq!(f.response_capacity(), 24);
    assert_eq!(f.ex.unwrap().provider_in_words, 3);
    assert_eq!(f.hdr.command & CMD_FLAG_EXTENDED, CMD_FLAG_EXTENDED);
    // No extended command is implemented yet.
    assert_eq!(errno_of(&v), Errno::EOPNOTSUPP);
    // Word counts must cover the message exactly.
    let mut bad = v.clone();
    bad.extend_from_slice(&[0; 8]);
    assert!(matches!(
        Frame::parse(&bad),
        Err(AbiError::LengthMismatch { .. })
    ));
    // Reserved must be 0.
    let mut bad = v.clone();
    bad[CmdHdr::SIZE + 12] = 1;
    assert_eq!(Frame::parse(&bad).unwrap_err().errno(), Errno::EINVAL);
    // Truncated extended header.
    assert!(Frame::parse(&v[..CmdHdr::SIZE + ExCmdHdr::SIZE - 1]).is_err());
    // Core must be whole 8-byte words.
    assert!(encode_extended(Command::CREATE_CQ, &[0; 12], &[], 0, 0, &mut v).is_err());
}

#[test]
fn post_send_lists() {
    let mut w0 = SendWr {
        wr_id: 1,
        num_sge: 2,
        opcode: abi::WrOpcode::RdmaWrite.raw(),
        ..Default::default()
    };
    w0.set_rdma(RdmaWr {
        remote_addr: 0x1000,
        rkey: 0x77,
        reserved: 0,
    });
    let mut w1 = SendWr {
        wr_id: 2,
        num_sge: 1,
        opcode: abi::WrOpcode::SendWithImm.raw(),
        ..Default::default()
    };
    w1.set_imm_data(0x0102_0304);
    let sges = [
        Sge {
            addr: 10,
            length: 1,
            lkey: 5,
        },
        Sge {
            addr: 20,
            length: 2,
            lkey: 5,
        },
        Sge {
            addr: 30,
            length: 3,
            lkey: 6,
        },
    ];
    let wrs = [w0, w1];
    let cmd = PostSend {
        response: 0,
        qp_handle: 9,
        wr_count: 2,
        sge_count: 3,
        wqe_size: 56,
    };
    let req = Request::PostSend(
        cmd,
        WrList {
            wrs: wrs.as_bytes(),
            sges: sges.as_bytes(),
            wqe_size: 56,
        },
    );
    let mut out = Vec::new();
    req.encode(&mut out).unwrap();
    let (_, back) = decode_request(&out).unwrap();
    assert_eq!(back, req);
    let Request::PostSend(_, list) = back else {
        unreachable!()
    };
    let items: Vec<_> = list
        .send_wrs()
        .map(|(w, s)| (w.wr_id, s.iter().map(|g| g.addr).collect::<Vec<_>>()))
        .collect();
    assert_eq!(items, vec![(1, vec![10, 20]), (2, vec![30])]);
    let (w, _) = list.send_wrs().next().unwrap();
    assert_eq!(w.rdma().rkey, 0x77);
    let (w, _) = list.send_wrs().nth(1).unwrap();
    assert_eq!(w.imm_data(), 0x0102_0304);
    assert_eq!(
        w.ex.to_ne_bytes(),
        [1, 2, 3, 4],
        "imm_data is in network order"
    );

    // A WR claiming more SGEs than the array holds: EINVAL.
    let mut bad_wrs = wrs;
    bad_wrs[1].num_sge = 2;
    let bad = Request::PostSend(
        cmd,
        WrList {
            wrs: bad_wrs.as_bytes(),
            sges: sges.as_bytes(),
            wqe_size: 56,
        },
    );
    bad.encode(&mut out).unwrap();
    assert_eq!(errno_of(&out), Errno::EINVAL);
    // wqe_size below sizeof(ib_uverbs_send_wr): EINVAL.
    let small = PostSend {
        wqe_size: 48,
        ..cmd
    };
    let bad = Request::PostSend(
        small,
        WrList {
            wrs: &[0; 96],
            sges: sges.as_bytes(),
            wqe_size: 48,
        },
    );
    bad.encode(&mut out).unwrap();
    assert_eq!(errno_of(&out), Errno::EINVAL);
    // Counts larger than the message: EINVAL, and hostile counts don't overflow.
    let huge = PostSend {
        wr_count: u32::MAX,
        wqe_size: u32::MAX,
        ..cmd
    };
    let bad = Request::PostSend(
        huge,
        WrList {
            wrs: &[],
            sges: &[],
            wqe_size: 56,
        },
    );
    bad.encode(&mut out).unwrap();
    assert_eq!(errno_of(&out), Errno::EINVAL);
    // A null post (rxe's SQ doorbell) is fine.
    let null = Request::PostSend(
        PostSend {
            wr_count: 0,
            sge_count: 0,
            ..cmd
        },
        WrList {
            wrs: &[],
            sges: &[],
            wqe_size: 56,
        },
    );
    null.encode(&mut out).unwrap();
    let (_, r) = decode_request(&out).unwrap();
    let Request::PostSend(_, l) = r else {
        unreachable!()
    };
    assert!(l.is_empty());
}

#[test]
fn post_recv_lists_with_larger_wqe_size() {
    // wqe_size may exceed sizeof(recv_wr); the extra bytes per WR are skipped.
    let mut wrs = vec![0u8; 2 * 24];
    wrs[..16].copy_from_slice(
        RecvWr {
            wr_id: 7,
            num_sge: 1,
            reserved: 0,
        }
        .as_bytes(),
    );
    wrs[24..40].copy_from_slice(
        RecvWr {
            wr_id: 8,
            num_sge: 0,
            reserved: 0,
        }
        .as_bytes(),
    );
    let sges = [Sge {
        addr: 1,
        length: 64,
        lkey: 3,
    }];
    let cmd = PostRecv {
        response: 0,
        qp_handle: 1,
        wr_count: 2,
        sge_count: 1,
        wqe_size: 24,
    };
    let req = Request::PostRecv(
        cmd,
        WrList {
            wrs: &wrs,
            sges: sges.as_bytes(),
            wqe_size: 24,
        },
    );
    let mut out = Vec::new();
    req.encode(&mut out).unwrap();
    let (_, back) = decode_request(&out).unwrap();
    let Request::PostRecv(_, l) = back else {
        unreachable!()
    };
    let got: Vec<_> = l.recv_wrs().map(|(w, s)| (w.wr_id, s.len())).collect();
    assert_eq!(got, vec![(7, 1), (8, 0)]);
}

#[test]
fn replies() {
    let resp = RegMrResp {
        mr_handle: 1,
        lkey: 0x100,
        rkey: 0x200,
    };
    let mut out = Vec::new();
    encode_reply(Command::REG_MR.word(), Ok(&[resp.as_bytes()]), 12, &mut out);
    assert_eq!(out.len(), ReplyHdr::SIZE + 12);
    let r = Reply::parse(&out).unwrap();
    assert_eq!(r.command, 9);
    let body = r.result.unwrap();
    let (got, rest) = read_prefix::<RegMrResp>(body, "reg_mr_resp").unwrap();
    assert_eq!(got, resp);
    assert!(rest.is_empty());

    // Truncated to the offered capacity, across parts.
    let drv = UroceCreateQpResp {
        sq_doorbell: 3,
        reserved: 0,
    };
    encode_reply(
        Command::CREATE_QP.word(),
        Ok(&[CreateQpResp::default().as_bytes(), drv.as_bytes()]),
        36,
        &mut out,
    );
    assert_eq!(Reply::parse(&out).unwrap().result.unwrap().len(), 36);

    // Errors carry -errno and no body.
    encode_reply(Command::CREATE_QP.word(), Err(Errno::ENOMEM), 100, &mut out);
    assert_eq!(out.len(), ReplyHdr::SIZE);
    let hdr = ReplyHdr::read_from_bytes(&out).unwrap();
    assert_eq!(hdr.status, -12);
    assert_eq!(Reply::parse(&out).unwrap().result, Err(Errno::ENOMEM));

    // Old-style error replies carry no reason; new ones carry one, past any capacity.
    assert_eq!(Reply::parse(&out).unwrap().reason, None);
    let mut why = Vec::new();
    abi::cmd::encode_refusal(
        Command::MODIFY_QP.word(),
        Errno::EINVAL,
        abi::Rule::MISSING_ATTR,
        "modify_qp: INIT -> RTR: DEST_QPN missing from attr_mask",
        &mut why,
    );
    let r = Reply::parse(&why).unwrap();
    assert_eq!(r.result, Err(Errno::EINVAL));
    let reason = r.reason.unwrap();
    assert_eq!(reason.rule, abi::Rule::MISSING_ATTR);
    assert_eq!(
        reason.text,
        "modify_qp: INIT -> RTR: DEST_QPN missing from attr_mask"
    );
    assert!(abi::fuzzing::decode_reply(&why).is_ok());
    let mut bad = why.clone();
    bad.pop();
    assert!(Reply::parse(&bad).is_err());

    // Malformed replies are errors, not panics.
    assert!(Reply::parse(&out[..8]).is_err());
    let mut bad = out.clone();
    bad.push(0);
    assert!(Reply::parse(&bad).is_err());
    let mut bad = out.clone();
    bad[4..8].copy_from_slice(&5i32.to_ne_bytes());
    assert!(Reply::parse(&bad).is_err());
}

#[test]
fn poll_cq_response() {
    let mut wc = Wc {
        wr_id: 42,
        status: 0,
        opcode: 128,
        byte_len: 5,
        qp_num: 17,
        ..Default::default()
    };
    wc.set_imm_data(0xdead_beef);
    let mut out = Vec::new();
    encode_poll_cq_resp(&[wc, wc], &mut out);
    assert_eq!(out.len(), 8 + 96);
    let (hdr, it) = decode_poll_cq_resp(&out).unwrap();
    assert_eq!(hdr.count, 2);
    let v: Vec<Wc> = it.collect();
    assert_eq!(v, vec![wc, wc]);
    assert_eq!(v[0].imm_data(), 0xdead_beef);
    assert!(decode_poll_cq_resp(&out[..out.len() - 1]).is_err());
}

#[test]
fn fuzz_regressions() {
    // POLL_CQ with a huge `ne`: the re-encoded capacity must fit `out_words` (found by
    // cargo-fuzz). The capacity is capped and the reply carries at most `max_entries`.
    let crash = [
        0x15, 0, 0, 0, 6, 0, 3, 0, 0, 0, 0, 0x32, 0, 0, 0, 0, 1, 0, 0, 0, 4, 0, 0, 0x41,
    ];
    let r = abi::fuzzing::decode_command(&crash).unwrap();
    let Request::PollCq(p) = r else {
        panic!("{r:?}")
    };
    assert_eq!(p.ne, 0x4100_0004);
    assert_eq!(r.response_capacity(), 0xffff * 4);
    assert_eq!(p.max_entries(12), 0);
    assert_eq!(p.max_entries(8 + 48 * 3 + 47), 3);
    assert_eq!(PollCq { ne: 2, ..p }.max_entries(1000), 2);

    // POST_RECV with wqe_size 17 (not a multiple of 4): the message carries zero padding
    // after the arrays; re-encoding must pad again rather than fail.
    let mut wrs = [0u8; 34];
    wrs[..16].copy_from_slice(
        RecvWr {
            wr_id: 1,
            num_sge: 0,
            reserved: 0,
        }
        .as_bytes(),
    );
    let cmd = PostRecv {
        response: 0,
        qp_handle: 1,
        wr_count: 2,
        sge_count: 0,
        wqe_size: 17,
    };
    let req = Request::PostRecv(
        cmd,
        WrList {
            wrs: &wrs,
            sges: &[],
            wqe_size: 17,
        },
    );
    let mut out = Vec::new();
    req.encode(&mut out).unwrap();
    assert_eq!(out.len(), 8 + 24 + 36);
    assert_eq!(abi::fuzzing::decode_command(&out).unwrap(), req);
}

/// Build a valid random request for `cmd` from random bytes.
fn random_request_bytes(cmd: Command, fill: &[u8], n_wrs: usize, n_sges_each: &[u32]) -> Vec<u8> {
    let (core_len, drv_len) = Request::request_sizes(cmd).unwrap();
    let (resp_core, resp_drv) = Request::response_sizes(cmd).unwrap();
    let mut payload: Vec<u8> = fill
        .iter()
        .copied()
        .cycle()
        .take(core_len + drv_len)
        .collect();
    payload.resize(core_len + drv_len, 0);
    let mut cap = resp_core + resp_drv;
    match cmd {
        Command::POST_SEND | Command::POST_RECV | Command::POST_SRQ_RECV => {
            let (wqe, num_sge_off) = if cmd == Command::POST_SEND {
                (56usize, 8)
            } else {
                (16usize, 8)
            };
            let total_sges: u32 = n_sges_each.iter().take(n_wrs).sum();
            payload[12..16].copy_from_slice(&(n_wrs as u32).to_ne_bytes());
            payload[16..20].copy_from_slice(&total_sges.to_ne_bytes());
            payload[20..24].copy_from_slice(&(wqe as u32).to_ne_bytes());
            for n_sge in n_sges_each.iter().take(n_wrs) {
                let mut wr: Vec<u8> = fill.iter().rev().copied().cycle().take(wqe).collect();
                wr.resize(wqe, 0);
                wr[num_sge_off..num_sge_off + 4].copy_from_slice(&n_sge.to_ne_bytes());
                payload.extend_from_slice(&wr);
            }
            payload.extend(fill.iter().copied().cycle().take(total_sges as usize * 16));
            payload.resize(core_len + n_wrs * wqe + total_sges as usize * 16, 0xAB);
        }
        Command::POLL_CQ => {
            let ne = u32::from_ne_bytes(payload[12..16].try_into().unwrap()) % 64;
            payload[12..16].copy_from_slice(&ne.to_ne_bytes());
            cap += ne as usize * Wc::SIZE;
        }
        _ => {}
    }
    let mut out = Vec::new();
    encode_legacy(cmd, &payload, &[], cap, &mut out).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Every supported command: random field values decode, and encode back to the same
    /// bytes.
    #[test]
    fn supported_commands_roundtrip_byte_exact(
        idx in 0..SUPPORTED.len(),
        fill in proptest::collection::vec(any::<u8>(), 1..64),
        n_wrs in 0usize..4,
        sges in proptest::collection::vec(0u32..4, 4),
    ) {
        let cmd = SUPPORTED[idx];
        let bytes = random_request_bytes(cmd, &fill, n_wrs, &sges);
        let (frame, req) = decode_request(&bytes).map_err(|e| TestCaseError::fail(format!("{cmd:?}: {e}")))?;
        prop_assert_eq!(req.command(), cmd);
        prop_assert_eq!(frame.response_capacity(), req.response_capacity().next_multiple_of(4));
        let mut again = Vec::new();
        req.encode(&mut again).unwrap();
        prop_assert_eq!(&again, &bytes);
        prop_assert!(abi::fuzzing::decode_command(&bytes).is_ok());
    }

    /// The fuzz entry point on random bytes: never panics.
    #[test]
    fn decode_command_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        let _ = abi::fuzzing::decode_command(&data);
    }

    /// The reply fuzz entry point on random bytes, and on random reason records behind an
    /// error header: never panics; what decodes re-encodes identically.
    #[test]
    fn decode_reply_random(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        errno in 1i32..200,
    ) {
        let _ = abi::fuzzing::decode_reply(&data);
        let hdr = ReplyHdr {
            command: 26,
            status: -errno,
            resp_len: data.len() as u32,
            reserved: 0,
        };
        let mut bytes = hdr.as_bytes().to_vec();
        bytes.extend_from_slice(&data);
        let _ = abi::fuzzing::decode_reply(&bytes);
    }

    /// The daemon protocol's decoder on random bytes and on random bodies behind every
    /// known op: never panics; what decodes re-encodes identically.
    #[test]
    fn decode_daemon_message_random(
        data in proptest::collection::vec(any::<u8>(), 0..300),
        op in prop_oneof![Just(1u32), Just(2), Just(3), Just(4), Just(5), Just(6), Just(0x8000_0006), Just(0x8000_0001),
                          Just(0x8000_0002), Just(0x8000_0003), Just(0x8000_0005),
                          Just(0xffff_ffff)],
    ) {
        let _ = abi::fuzzing::decode_daemon_message(&data);
        let mut bytes = op.to_le_bytes().to_vec();
        bytes.extend_from_slice(&(data.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&data);
        let _ = abi::fuzzing::decode_daemon_message(&bytes);
    }

    /// Random bytes behind a valid header of a random supported command: deeper coverage
    /// than fully random input. Errors are fine; panics are not; successes round-trip.
    #[test]
    fn decode_command_random_payloads(
        idx in 0..SUPPORTED.len(),
        body in proptest::collection::vec(any::<u8>(), 0..400),
        out_words in any::<u16>(),
    ) {
        let mut body = body;
        body.truncate(body.len() / 4 * 4);
        let mut bytes = Vec::new();
        encode_legacy(SUPPORTED[idx], &body, &[], usize::from(out_words) * 4, &mut bytes).unwrap();
        if let Ok(r) = abi::fuzzing::decode_command(&bytes) {
            prop_assert_eq!(r.command(), SUPPORTED[idx]);
        }
    }
}
