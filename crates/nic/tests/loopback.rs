//! Same-device traffic (internal loopback): data movement through rings, doorbells and
//! slow-path commands, completion statuses of the bad cases, events, and counters.

mod common;

use std::time::Duration;

use abi::fastpath::SendWqe;
use abi::uverbs::*;
use abi::{AccessFlags, QpType, Request, SendFlags, WcOpcode, WcStatus, WrOpcode};
use common::*;
use zerocopy::{FromBytes, IntoBytes};

const ALL: u32 = AccessFlags::LOCAL_WRITE.0
    | AccessFlags::REMOTE_WRITE.0
    | AccessFlags::REMOTE_READ.0
    | AccessFlags::REMOTE_ATOMIC.0;

const IP: &str = "127.77.1.1";

/// Two connected RC QPs on one device with their CQs.
struct Pair {
    a: QpH,
    b: QpH,
    cq_a: Cq,
    cq_b: Cq,
    pd: u32,
}

fn pair(c: &mut Client, ty: QpType) -> Pair {
    let pd = c.alloc_pd();
    let cq_a = c.create_cq(64, -1, 0xa).unwrap();
    let cq_b = c.create_cq(64, -1, 0xb).unwrap();
    let (a, b) = c.connected(pd, (cq_a.handle, cq_b.handle), ty, 16, IP);
    Pair {
        a,
        b,
        cq_a,
        cq_b,
        pd,
    }
}

#[test]
fn rc_write_read_send_atomics_through_rings_and_commands() {
    let dev = device("lo_ops", IP);
    let mut src = vec![0u8; 8192];
    let mut dst = vec![0u8; 8192];
    let mut c = Client::connect(&dev);
    let mut p = pair(&mut c, QpType::Rc);
    let ms = c.reg_mr(p.pd, &mut src, ALL).unwrap();
    let md = c.reg_mr(p.pd, &mut dst, ALL).unwrap();
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    let (sa, da) = (src.as_ptr() as u64, dst.as_ptr() as u64);

    // RDMA WRITE of 3000 bytes (3 packets at MTU 1024) via ring + doorbell.
    let w = write_wqe(1, WrOpcode::RdmaWrite, da + 100, md.rkey);
    c.post_send(&mut p.a, w, sge(sa, 3000, ms.lkey).as_bytes());
    let wc = poll(&mut p.cq_a);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, WcStatus::Success.raw(), WcOpcode::RdmaWrite.raw())
    );
    assert_eq!(wc.qp_num, p.a.qpn);
    assert_eq!(&dst[100..3100], &src[..3000]);

    // RDMA READ back into dst+4000.
    let r = write_wqe(2, WrOpcode::RdmaRead, sa + 10, ms.rkey);
    c.post_send(&mut p.a, r, sge(da + 4000, 2000, md.lkey).as_bytes());
    let wc = poll(&mut p.cq_a);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (2, 0, WcOpcode::RdmaRead.raw(), 2000)
    );
    assert_eq!(&dst[4000..6000], &src[10..2010]);

    // SEND via the POST_SEND command, into a receive posted with POST_RECV.
    let rsge = sge(da + 6000, 1000, md.lkey);
    let rwr = RecvWr {
        wr_id: 77,
        num_sge: 1,
        reserved: 0,
    };
    let recv = Request::PostRecv(
        PostRecv {
            response: 0,
            qp_handle: p.b.handle,
            wr_count: 1,
            sge_count: 1,
            wqe_size: RecvWr::SIZE as u32,
        },
        WrList {
            wrs: rwr.as_bytes(),
            sges: rsge.as_bytes(),
            wqe_size: RecvWr::SIZE,
        },
    );
    let r = c.call(&recv).unwrap();
    assert_eq!(read_prefix::<PostResp>(&r, "p").unwrap().0.bad_wr, 0);
    let mut swr = SendWr {
        wr_id: 3,
        num_sge: 1,
        opcode: WrOpcode::SendWithImm.raw(),
        send_flags: SendFlags::SIGNALED.0,
        ..SendWr::default()
    };
    swr.set_imm_data(0xdead_beef);
    let sg = sge(sa + 50, 700, ms.lkey);
    let send = Request::PostSend(
        PostSend {
            response: 0,
            qp_handle: p.a.handle,
            wr_count: 1,
            sge_count: 1,
            wqe_size: SendWr::SIZE as u32,
        },
        WrList {
            wrs: swr.as_bytes(),
            sges: sg.as_bytes(),
            wqe_size: SendWr::SIZE,
        },
    );
    c.call(&send).unwrap();
    let wc = poll(&mut p.cq_a);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (3, 0, WcOpcode::Send.raw())
    );
    let wc = poll(&mut p.cq_b);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (77, 0, WcOpcode::Recv.raw(), 700)
    );
    assert_eq!(wc.imm_data(), 0xdead_beef);
    assert_eq!(
        wc.wc_flags & abi::WcFlags::WITH_IMM.0,
        abi::WcFlags::WITH_IMM.0
    );
    assert_eq!(wc.src_qp, p.a.qpn);
    assert_eq!(&dst[6000..6700], &src[50..750]);

    // Inline SEND through the ring into a receive posted on the RQ ring (after the
    // commands above advanced both producer indices on our behalf).
    p.a.resync();
    p.b.resync();
    c.post_recv(
        p.b.rq.as_mut().unwrap(),
        78,
        &[sge(da + 7000, 100, md.lkey)],
    );
    let msg = b"inline hello";
    let w = SendWqe {
        wr_id: 4,
        opcode: WrOpcode::Send.raw(),
        send_flags: SendFlags::SIGNALED.0 | SendFlags::INLINE.0,
        inline_len: msg.len() as u16,
        ..SendWqe::default()
    };
    c.post_send(&mut p.a, w, msg);
    assert_eq!(poll(&mut p.cq_a).status, 0);
    let wc = poll(&mut p.cq_b);
    assert_eq!((wc.wr_id, wc.byte_len), (78, msg.len() as u32));
    assert_eq!(&dst[7000..7000 + msg.len()], msg);

    // Atomics on an 8-byte word of dst.
    let word = da + 8000;
    dst[8000..8008].copy_from_slice(&40u64.to_ne_bytes());
    let mut fa = write_wqe(5, WrOpcode::AtomicFetchAndAdd, word, md.rkey);
    fa.compare_add = 2;
    c.post_send(&mut p.a, fa, sge(sa, 8, ms.lkey).as_bytes());
    let wc = poll(&mut p.cq_a);
    assert_eq!((wc.status, wc.opcode), (0, WcOpcode::FetchAdd.raw()));
    assert_eq!(u64::from_ne_bytes(src[..8].try_into().unwrap()), 40);
    assert_eq!(u64::from_ne_bytes(dst[8000..8008].try_into().unwrap()), 42);
    let mut cs = write_wqe(6, WrOpcode::AtomicCmpAndSwp, word, md.rkey);
    cs.compare_add = 42;
    cs.swap = 9;
    c.post_send(&mut p.a, cs, sge(sa + 8, 8, ms.lkey).as_bytes());
    assert_eq!(poll(&mut p.cq_a).status, 0);
    assert_eq!(u64::from_ne_bytes(src[8..16].try_into().unwrap()), 42);
    assert_eq!(u64::from_ne_bytes(dst[8000..8008].try_into().unwrap()), 9);

    let pc = dev.port_counters();
    assert!(pc.get("loopback_pkts").unwrap() >= 8, "{pc:?}");
    assert!(pc.get("sent_pkts").unwrap() >= 8);
    assert!(pc.get("rdma_sends").unwrap() >= 2);
    assert_eq!(pc.get("rcvd_icrc_err"), Some(0));
    // Payload copied into or out of MRs: the WRITE's 3000 bytes, the READ's 2000, the
    // SEND's 700 and the inline SEND's 12 (placed), each once — a packet that stays on the
    // device is copied from MR to MR — and none through the socket.
    let copied = pc.get("mem_copy_bytes").unwrap();
    assert!((5712..5712 + 3000).contains(&copied), "{pc:?}");
    assert_eq!(pc.get("socket_bytes"), Some(0));
    let qc = dev.qp_counters(p.a.qpn).unwrap();
    assert!(qc.sent_pkts >= 6);
    // QUERY_QP reports the current PSNs (both started at 100): WRITE 3, READ 2, SEND 1,
    // inline SEND 1, two atomics 1 each went from a to b; nothing the other way.
    let (qa, qb) = (c.query_qp(p.a.handle), c.query_qp(p.b.handle));
    assert_eq!((qa.sq_psn, qb.rq_psn), (109, 109));
    assert_eq!((qb.sq_psn, qa.rq_psn), (100, 100));
    c.close();
}

#[test]
fn protection_and_length_errors_complete_with_the_prescribed_status() {
    let dev = device("lo_err", "127.77.1.2");
    let ip = "127.77.1.2";
    let mut src = vec![1u8; 4096];
    let mut dst = vec![0u8; 4096];
    let mut ro = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let ms = c.reg_mr(pd, &mut src, ALL).unwrap();
    let md = c.reg_mr(pd, &mut dst, ALL).unwrap();
    // No REMOTE_WRITE.
    let mro = c
        .reg_mr(
            pd,
            &mut ro,
            AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_READ.0,
        )
        .unwrap();
    // An MR of another PD.
    let pd2 = c.alloc_pd();
    let mut other = vec![0u8; 64];
    let m2 = c.reg_mr(pd2, &mut other, ALL).unwrap();
    let (sa, da) = (src.as_ptr() as u64, dst.as_ptr() as u64);

    let mk = |c: &mut Client| {
        let cq_a = c.create_cq(64, -1, 1).unwrap();
        let cq_b = c.create_cq(64, -1, 2).unwrap();
        let (a, b) = c.connected(pd, (cq_a.handle, cq_b.handle), QpType::Rc, 8, ip);
        (a, b, cq_a, cq_b)
    };

    // Wrong lkey: LOC_PROT_ERR, and the QP goes to ERR.
    let (mut a, _b, mut cq_a, _cq_b) = mk(&mut c);
    let w = write_wqe(10, WrOpcode::RdmaWrite, da, md.rkey);
    c.post_send(&mut a, w, sge(sa, 16, ms.lkey ^ 0x55).as_bytes());
    let wc = poll(&mut cq_a);
    assert_eq!((wc.wr_id, wc.status), (10, WcStatus::LocProtErr.raw()));
    assert_eq!(c.query_qp(a.handle).qp_state, abi::QpState::Err.raw() as u8);
    // A WR posted now is flushed.
    c.post_send(
        &mut a,
        write_wqe(11, WrOpcode::RdmaWrite, da, md.rkey),
        sge(sa, 16, ms.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq_a).status, WcStatus::WrFlushErr.raw());

    // An lkey of another PD's MR: LOC_PROT_ERR too.
    let (mut a, _b, mut cq_a, _cq_b) = mk(&mut c);
    c.post_send(
        &mut a,
        write_wqe(12, WrOpcode::RdmaWrite, da, md.rkey),
        sge(other.as_ptr() as u64, 16, m2.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq_a).status, WcStatus::LocProtErr.raw());

    // Wrong rkey: REM_ACCESS_ERR at the requester, nothing written.
    let (mut a, _b, mut cq_a, _cq_b) = mk(&mut c);
    c.post_send(
        &mut a,
        write_wqe(13, WrOpcode::RdmaWrite, da, md.rkey ^ 0x1),
        sge(sa, 16, ms.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq_a).status, WcStatus::RemAccessErr.raw());
    assert!(dst.iter().all(|b| *b == 0));

    // Missing REMOTE_WRITE on the target MR: REM_ACCESS_ERR, nothing written.
    let (mut a, _b, mut cq_a, _cq_b) = mk(&mut c);
    c.post_send(
        &mut a,
        write_wqe(14, WrOpcode::RdmaWrite, ro.as_ptr() as u64, mro.rkey),
        sge(sa, 16, ms.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq_a).status, WcStatus::RemAccessErr.raw());
    assert!(ro.iter().all(|b| *b == 0));

    // Receive buffer too small: LOC_LEN_ERR at the responder, REM_INV_REQ_ERR at the
    // requester.
    let (mut a, mut b, mut cq_a, mut cq_b) = mk(&mut c);
    c.post_recv(b.rq.as_mut().unwrap(), 20, &[sge(da, 8, md.lkey)]);
    let mut s = write_wqe(15, WrOpcode::Send, 0, 0);
    s.rkey = 0;
    c.post_send(&mut a, s, sge(sa, 64, ms.lkey).as_bytes());
    let wb = poll(&mut cq_b);
    assert_eq!((wb.wr_id, wb.status), (20, WcStatus::LocLenErr.raw()));
    let wa = poll(&mut cq_a);
    assert_eq!((wa.wr_id, wa.status), (15, WcStatus::RemInvReqErr.raw()));

    // A malformed WQE (unknown opcode) completes with LOC_QP_OP_ERR.
    let (mut a, _b, mut cq_a, _cq_b) = mk(&mut c);
    let mut bad = write_wqe(16, WrOpcode::RdmaWrite, da, md.rkey);
    bad.opcode = 77;
    c.post_send(&mut a, bad, sge(sa, 16, ms.lkey).as_bytes());
    let wc = poll(&mut cq_a);
    assert_eq!((wc.wr_id, wc.status), (16, WcStatus::LocQpOpErr.raw()));
    let ev = c.async_event();
    assert_eq!(ev.event_type, nic::event::QP_FATAL);

    assert!(dev.port_counters().engine.bad_wqe >= 1);
    c.close();
}

#[test]
fn rnr_retry_zero_fails_with_rnr_retry_exc_err() {
    let ip = "127.77.1.3";
    let dev = device("lo_rnr", ip);
    let mut buf = vec![0u8; 256];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let cq = c.create_cq(16, -1, 1).unwrap();
    let mut cq = cq;
    let mut a = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    let b = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    c.connect_qp(b.handle, QpType::Rc, a.qpn, ip);
    // Bring `a` up with rnr_retry = 0.
    for (state, mask) in init_rtr_rts(QpType::Rc) {
        let mut mq = ModifyQp {
            qp_handle: a.handle,
            attr_mask: mask,
            qp_state: state as u8,
            qp_access_flags: ALL,
            port_num: 1,
            path_mtu: 3,
            dest_qp_num: b.qpn,
            rq_psn: 100,
            sq_psn: 100,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 0,
            ..ModifyQp::default()
        };
        mq.dest.dgid = gid(ip);
        mq.dest.is_global = 1;
        c.modify(&mq).unwrap();
    }
    // No receive posted at b.
    let s = write_wqe(1, WrOpcode::Send, 0, 0);
    c.post_send(&mut a, s, sge(buf.as_ptr() as u64, 8, m.lkey).as_bytes());
    let wc = poll(&mut cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::RnrRetryExcErr.raw()));
    assert!(dev.qp_counters(a.qpn).unwrap().rcvd_rnr_err >= 1);
    c.close();
}

#[test]
fn ud_and_srq_and_uc() {
    let ip = "127.77.1.4";
    let dev = device("lo_ud", ip);
    let mut buf = vec![0u8; 8192];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    buf[..32].copy_from_slice(&[0x5a; 32]);

    // UD: a → b through an AH naming our own address.
    let mut cq = c.create_cq(32, -1, 3).unwrap();
    let mut a = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Ud, 8, None)
        .unwrap();
    let mut b = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Ud, 8, None)
        .unwrap();
    c.connect_qp(a.handle, QpType::Ud, 0, ip);
    c.connect_qp(b.handle, QpType::Ud, 0, ip);
    let ah = c.create_ah(pd, ip).unwrap();
    c.post_recv(
        b.rq.as_mut().unwrap(),
        9,
        &[sge(ba + 1000, 40 + 100, m.lkey)],
    );
    let w = SendWqe {
        wr_id: 8,
        opcode: WrOpcode::Send.raw(),
        send_flags: SendFlags::SIGNALED.0,
        num_sge: 1,
        ah,
        remote_qpn: b.qpn,
        remote_qkey: 0x1111,
        ..SendWqe::default()
    };
    c.post_send(&mut a, w, sge(ba, 32, m.lkey).as_bytes());
    let mut got = [poll(&mut cq), poll(&mut cq)];
    got.sort_by_key(|w| w.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (8, 0));
    assert_eq!(
        (got[1].wr_id, got[1].status, got[1].byte_len, got[1].src_qp),
        (9, 0, 40 + 32, a.qpn)
    );
    assert_eq!(got[1].wc_flags & abi::WcFlags::GRH.0, abi::WcFlags::GRH.0);
    assert_eq!(&buf[1040..1072], &[0x5a; 32]);

    // SRQ: an RC QP drawing its receives from a shared queue.
    let mut srq = c.create_srq(pd, 8);
    let mut cq2 = c.create_cq(32, -1, 4).unwrap();
    let mut s = c
        .create_qp(pd, cq2.handle, cq2.handle, QpType::Rc, 8, None)
        .unwrap();
    let r = c
        .create_qp(pd, cq2.handle, cq2.handle, QpType::Rc, 8, Some(srq.handle))
        .unwrap();
    assert_eq!(r.resp.max_recv_wr, 0);
    c.connect_qp(s.handle, QpType::Rc, r.qpn, ip);
    c.connect_qp(r.handle, QpType::Rc, s.qpn, ip);
    c.post_recv(&mut srq.ring, 31, &[sge(ba + 3000, 64, m.lkey)]);
    c.post_send(
        &mut s,
        write_wqe(30, WrOpcode::Send, 0, 0),
        sge(ba, 20, m.lkey).as_bytes(),
    );
    let mut got = [poll(&mut cq2), poll(&mut cq2)];
    got.sort_by_key(|w| w.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (30, 0));
    assert_eq!((got[1].wr_id, got[1].status, got[1].byte_len), (31, 0, 20));
    assert_eq!(&buf[3000..3020], &[0x5a; 20]);

    // UC WRITE with immediate: consumes a receive at the target.
    let mut cq3 = c.create_cq(32, -1, 5).unwrap();
    let mut u1 = c
        .create_qp(pd, cq3.handle, cq3.handle, QpType::Uc, 8, None)
        .unwrap();
    let mut u2 = c
        .create_qp(pd, cq3.handle, cq3.handle, QpType::Uc, 8, None)
        .unwrap();
    c.connect_qp(u1.handle, QpType::Uc, u2.qpn, ip);
    c.connect_qp(u2.handle, QpType::Uc, u1.qpn, ip);
    c.post_recv(u2.rq.as_mut().unwrap(), 41, &[]);
    let mut w = write_wqe(40, WrOpcode::RdmaWriteWithImm, ba + 5000, m.rkey);
    w.set_imm_data(0x1234);
    c.post_send(&mut u1, w, sge(ba, 16, m.lkey).as_bytes());
    let mut got = [poll(&mut cq3), poll(&mut cq3)];
    got.sort_by_key(|w| w.wr_id);
    assert_eq!((got[0].wr_id, got[0].status), (40, 0));
    assert_eq!(
        (got[1].wr_id, got[1].opcode, got[1].byte_len),
        (41, WcOpcode::RecvRdmaWithImm.raw(), 16)
    );
    assert_eq!(got[1].imm_data(), 0x1234);
    assert_eq!(&buf[5000..5016], &[0x5a; 16]);
    c.close();
}

#[test]
fn cq_overflow_raises_cq_err_and_moves_the_qp_to_err() {
    let ip = "127.77.1.5";
    let dev = device("lo_ovf", ip);
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut small = c.create_cq(2, -1, 0xcc).unwrap();
    let big = c.create_cq(16, -1, 0xdd).unwrap();
    let (mut a, _b) = c.connected(pd, (small.handle, big.handle), QpType::Rc, 8, ip);
    for i in 0..4 {
        c.post_send(
            &mut a,
            write_wqe(i, WrOpcode::RdmaWrite, ba + 2048, m.rkey),
            sge(ba, 8, m.lkey).as_bytes(),
        );
    }
    // The two CQEs that fit are intact; the rest were dropped, never overwritten.
    let ev = c.async_event();
    assert_eq!((ev.event_type, ev.element), (nic::event::CQ_ERR, 0xcc));
    let deadline = std::time::Instant::now() + TIMEOUT;
    while c.query_qp(a.handle).qp_state != abi::QpState::Err.raw() as u8 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(small.cons.available().unwrap(), 2);
    let w0 = poll(&mut small);
    let w1 = poll(&mut small);
    assert_eq!((w0.wr_id, w1.wr_id), (0, 1));
    assert!(dev.port_counters().engine.cq_overflow >= 1);
    c.close();
}

#[test]
fn completion_channel_gets_an_event_for_an_armed_cq() {
    let ip = "127.77.1.6";
    let dev = device("lo_chan", ip);
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let r = c
        .call(&Request::CreateCompChannel(CreateCompChannel::default()))
        .unwrap();
    let fd = read_prefix::<CreateCompChannelResp>(&r, "ch").unwrap().0.fd as i32;
    // SAFETY: the reply gave us this descriptor.
    let chan = std::os::unix::net::UnixDatagram::from(unsafe {
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd)
    });
    chan.set_read_timeout(Some(TIMEOUT)).unwrap();
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(16, fd, 0xfeed).unwrap();
    let (mut a, _b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 8, ip);
    c.call(&Request::ReqNotifyCq(ReqNotifyCq {
        cq_handle: cq.handle,
        solicited_only: 0,
    }))
    .unwrap();
    c.post_send(
        &mut a,
        write_wqe(1, WrOpcode::RdmaWrite, ba + 100, m.rkey),
        sge(ba, 8, m.lkey).as_bytes(),
    );
    let mut ev = [0u8; 8];
    assert_eq!(chan.recv(&mut ev).unwrap(), 8);
    assert_eq!(
        CompEventDesc::read_from_bytes(&ev).unwrap().cq_handle,
        0xfeed
    );
    assert_eq!(poll(&mut cq).wr_id, 1);
    // Not re-armed: no second event.
    c.post_send(
        &mut a,
        write_wqe(2, WrOpcode::RdmaWrite, ba + 100, m.rkey),
        sge(ba, 8, m.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq).wr_id, 2);
    chan.set_nonblocking(true).unwrap();
    assert!(chan.recv(&mut ev).is_err());
    // POLL_CQ as a command sees what the ring holds.
    c.post_send(
        &mut a,
        write_wqe(3, WrOpcode::RdmaWrite, ba + 100, m.rkey),
        sge(ba, 8, m.lkey).as_bytes(),
    );
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let r = c
            .call(&Request::PollCq(PollCq {
                response: 0,
                cq_handle: cq.handle,
                ne: 4,
            }))
            .unwrap();
        let (h, wcs) = decode_poll_cq_resp(&r).unwrap();
        if h.count == 1 {
            let wcs: Vec<Wc> = wcs.collect();
            assert_eq!((wcs[0].wr_id, wcs[0].status), (3, 0));
            break;
        }
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    }
    let r = c
        .call(&Request::DestroyCq(DestroyCq {
            response: 0,
            cq_handle: cq.handle,
            reserved: 0,
        }))
        .unwrap_err();
    assert_eq!(r, abi::Errno::EBUSY);
    c.close();
}

#[test]
fn engine_parks_when_idle_and_a_doorbell_wakes_it() {
    let ip = "127.77.1.7";
    let dev = device("lo_park", ip);
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(16, -1, 1).unwrap();
    let (mut a, _b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 8, ip);
    // Idle: the engine announces `parked` on our doorbell page (other tests in this
    // process may keep it busy for a while).
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !c.parked() {
        assert!(std::time::Instant::now() < deadline, "engine never parked");
        std::thread::sleep(Duration::from_millis(2));
    }
    for i in 0..3 {
        c.post_send(
            &mut a,
            write_wqe(i, WrOpcode::RdmaWrite, ba + 1024, m.rkey),
            sge(ba, 8, m.lkey).as_bytes(),
        );
        assert_eq!(poll(&mut cq).status, 0);
    }
    c.close();
}

#[test]
fn closing_the_connection_destroys_the_context() {
    let ip = "127.77.1.8";
    let dev = device("lo_close", ip);
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    c.reg_mr(pd, &mut buf, ALL).unwrap();
    let cq = c.create_cq(16, -1, 1).unwrap();
    c.create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    let s = dev.stats();
    assert_eq!((s.contexts, s.pds, s.mrs, s.cqs, s.qps), (1, 1, 1, 1, 1));
    c.close();
    assert_eq!(dev.stats(), nic::DeviceStats::default());
}

#[test]
fn err_state_flushes_receives_and_dereg_and_destroy_with_work_outstanding() {
    let ip = "127.77.1.9";
    let dev = device("lo_flush", ip);
    let mut buf = vec![0u8; 8192];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(32, -1, 1).unwrap();
    let (mut a, mut b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 8, ip);

    // Two receives posted, then the QP is moved to ERR: both flush, in order.
    c.post_recv(b.rq.as_mut().unwrap(), 1, &[sge(ba, 64, m.lkey)]);
    c.post_recv(b.rq.as_mut().unwrap(), 2, &[sge(ba, 64, m.lkey)]);
    c.modify(&ModifyQp {
        qp_handle: b.handle,
        attr_mask: abi::QpAttrMask::STATE.0,
        qp_state: abi::QpState::Err.raw() as u8,
        ..ModifyQp::default()
    })
    .unwrap();
    let (w1, w2) = (poll(&mut cq), poll(&mut cq));
    assert_eq!((w1.wr_id, w1.status), (1, WcStatus::WrFlushErr.raw()));
    assert_eq!((w2.wr_id, w2.status), (2, WcStatus::WrFlushErr.raw()));
    assert_eq!(w1.opcode, WcOpcode::Recv.raw());
    // A receive posted on the ring while in ERR flushes too (no doorbell for receives).
    c.post_recv(b.rq.as_mut().unwrap(), 3, &[sge(ba, 64, m.lkey)]);
    let w3 = poll(&mut cq);
    assert_eq!((w3.wr_id, w3.status), (3, WcStatus::WrFlushErr.raw()));

    // Dereg of an MR that WQEs still name: allowed; later use is a protection error.
    let mut other = vec![0u8; 64];
    let m2 = c.reg_mr(pd, &mut other, ALL).unwrap();
    c.call(&Request::DeregMr(DeregMr {
        mr_handle: m2.handle,
    }))
    .unwrap();
    c.post_send(
        &mut a,
        write_wqe(9, WrOpcode::RdmaWrite, ba, m.rkey),
        sge(other.as_ptr() as u64, 8, m2.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq).status, WcStatus::LocProtErr.raw());

    // Destroying a QP with work outstanding: no completion, and the device stays sane.
    let mut x = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    let y = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    c.connect_qp(x.handle, QpType::Rc, y.qpn, ip);
    // y never gets to RTR: x's SEND waits for an ACK that never comes.
    c.post_send(
        &mut x,
        write_wqe(20, WrOpcode::Send, 0, 0),
        sge(ba, 8, m.lkey).as_bytes(),
    );
    std::thread::sleep(Duration::from_millis(20));
    let r = c
        .call(&Request::DestroyQp(DestroyQp {
            response: 0,
            qp_handle: x.handle,
            reserved: 0,
        }))
        .unwrap();
    assert_eq!(r.len(), DestroyQpResp::SIZE);
    expect_empty(&mut cq, Duration::from_millis(50));
    assert_eq!(dev.stats().qps, 3);
    c.close();
}

/// Measurement, not a test of speed (run with `--release -- --ignored --nocapture`):
/// same-device 8-byte RDMA WRITE round trips through ring + doorbell + CQ ring, and a
/// pipelined WRITE stream. Release mode:
/// `cargo test --release -p nic --test loopback measure_loopback_write -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_loopback_write() {
    let ip = "127.77.1.10";
    let dev = device("lo_bench", ip);
    let mut buf = vec![0u8; 1 << 20];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(1024, -1, 1).unwrap();
    let cqb = c.create_cq(16, -1, 2).unwrap();
    let mut a = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 256, None)
        .unwrap();
    let b = c
        .create_qp(pd, cqb.handle, cqb.handle, QpType::Rc, 16, None)
        .unwrap();
    c.connect_qp(a.handle, QpType::Rc, b.qpn, ip);
    c.connect_qp(b.handle, QpType::Rc, a.qpn, ip);
    let w = |i| write_wqe(i, WrOpcode::RdmaWrite, ba + 4096, m.rkey);
    for i in 0..1000 {
        c.post_send(&mut a, w(i), sge(ba, 8, m.lkey).as_bytes());
        poll(&mut cq);
    }
    let n = 100_000u64;
    let t = std::time::Instant::now();
    for i in 0..n {
        c.post_send(&mut a, w(i), sge(ba, 8, m.lkey).as_bytes());
        poll(&mut cq);
    }
    let rtt = t.elapsed().as_secs_f64() / n as f64;
    println!(
        "8 B WRITE post→CQE round trip: {:.2} µs ({} wakes)",
        rtt * 1e6,
        c.wakes
    );
    // Pipelined: keep up to 128 outstanding, one doorbell per post.
    let total = 1_000_000u64;
    let t = std::time::Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut out = [0u8; 64];
    while done < total {
        while posted < total && posted - done < 128 {
            a.sq.stage_parts(&[w(posted).as_bytes(), sge(ba, 8, m.lkey).as_bytes()])
                .unwrap();
            posted += 1;
            if posted % 16 == 0 || posted - done == 128 || posted == total {
                a.sq.publish().unwrap();
                c.ring(a.db_slot);
            }
        }
        while cq.cons.pop_into(&mut out).unwrap() {
            done += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "8 B WRITE stream (post lists of 16): {:.2} M ops/s ({} wakes)",
        total as f64 / secs / 1e6,
        c.wakes
    );
    // 64 KiB WRITEs.
    let big = 64 * 1024u32;
    let total = 20_000u64;
    let t = std::time::Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < total {
        while posted < total && posted - done < 16 {
            let mut ww = w(posted);
            ww.remote_addr = ba + 512 * 1024;
            a.sq.stage_parts(&[ww.as_bytes(), sge(ba, big, m.lkey).as_bytes()])
                .unwrap();
            a.sq.publish().unwrap();
            c.ring(a.db_slot);
            posted += 1;
        }
        while cq.cons.pop_into(&mut out).unwrap() {
            done += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let write_gbs = total as f64 * f64::from(big) / secs / 1e9;
    // The baseline, in the same run: one core copying the same 64 KiB from the same
    // source to the same destination (docs/architecture.md §8: ≥ 0.7 × single-core memcpy).
    let reps = 100_000u64;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        let (s, d) = buf.split_at_mut(512 * 1024);
        d[..big as usize].copy_from_slice(&s[..big as usize]);
        std::hint::black_box(&mut *d);
    }
    let memcpy_gbs = reps as f64 * f64::from(big) / t.elapsed().as_secs_f64() / 1e9;
    // And the docs/architecture.md §8 figure (6–8 GB/s there): memcpy of buffers far larger than
    // the caches.
    let (mut src, mut dst) = (vec![1u8; 64 << 20], vec![0u8; 64 << 20]);
    dst.copy_from_slice(&src);
    let t = std::time::Instant::now();
    for i in 0..8u8 {
        src[0] = i;
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
    }
    let big_gbs = 8.0 * (64 << 20) as f64 / t.elapsed().as_secs_f64() / 1e9;
    println!(
        "64 KiB WRITE stream: {write_gbs:.2} GB/s; memcpy of the same 64 KiB: \
         {memcpy_gbs:.2} GB/s (ratio {:.2}); memcpy of 64 MiB: {big_gbs:.2} GB/s (ratio {:.2})",
        write_gbs / memcpy_gbs,
        write_gbs / big_gbs
    );
    c.close();
}

/// For `strace -f -c`: `NIC_LOOP_N` single-outstanding 8-byte WRITEs on one device, the
/// application spinning on the CQ ring with no system call (run with `--ignored --exact`).
#[test]
#[ignore]
fn measure_syscall_loop() {
    let n: u64 = std::env::var("NIC_LOOP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let ip = "127.77.1.11";
    let dev = device("lo_strace", ip);
    let mut buf = vec![0u8; 8192];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(64, -1, 1).unwrap();
    let (mut a, _b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 64, ip);
    let mut out = [0u8; 64];
    for i in 0..n {
        let w = write_wqe(i, WrOpcode::RdmaWrite, ba + 4096, m.rkey);
        a.sq.stage_parts(&[w.as_bytes(), sge(ba, 8, m.lkey).as_bytes()])
            .unwrap();
        a.sq.publish().unwrap();
        c.ring(a.db_slot);
        while !cq.cons.pop_into(&mut out).unwrap() {
            std::hint::spin_loop();
        }
    }
    println!("{n} WRITEs, {} wake-ups", c.wakes);
    c.close();
}

/// The engine takes send WQEs from the ring about a turn's worth at a time, not the whole
/// ring at once: WQEs deep in a full ring are still taken, in order, and one that is bad
/// fails with its own status and moves the QP to ERR. Earlier WQEs complete in order, each
/// either done (its bytes landed) or, if still outstanding when the QP failed, flushed
/// (which depends on how far the device had got: IBA 10.7.3.1); every later one is flushed.
#[test]
fn a_full_ring_of_multi_packet_writes_completes_in_order_up_to_a_bad_wqe_deep_in_it() {
    const DEPTH: usize = 16;
    const LEN: usize = 8192; // 8 packets at MTU 1024
    const BAD: usize = 12;
    const IP: &str = "127.77.1.13";
    let dev = device("lo_deep", IP);
    let mut src = vec![0u8; DEPTH * LEN];
    let mut dst = vec![0u8; DEPTH * LEN];
    for (i, b) in src.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let mut cq_a = c.create_cq(64, -1, 1).unwrap();
    let cq_b = c.create_cq(64, -1, 2).unwrap();
    let (mut a, _b) = c.connected(pd, (cq_a.handle, cq_b.handle), QpType::Rc, DEPTH as u32, IP);
    let ms = c.reg_mr(pd, &mut src, ALL).unwrap();
    let md = c.reg_mr(pd, &mut dst, ALL).unwrap();
    let (sa, da) = (src.as_ptr() as u64, dst.as_ptr() as u64);
    for i in 0..DEPTH {
        let off = (i * LEN) as u64;
        let lkey = if i == BAD { ms.lkey ^ 0x55 } else { ms.lkey };
        let w = write_wqe(i as u64, WrOpcode::RdmaWrite, da + off, md.rkey);
        let s = sge(sa + off, LEN as u32, lkey);
        a.sq.stage_parts(&[w.as_bytes(), s.as_bytes()]).unwrap();
    }
    // The whole ring at once, with one doorbell.
    a.sq.publish().unwrap();
    c.ring(a.db_slot);
    let (ok, flushed) = (WcStatus::Success.raw(), WcStatus::WrFlushErr.raw());
    let mut done = 0;
    for i in 0..DEPTH {
        let wc = poll(&mut cq_a);
        assert_eq!(wc.wr_id, i as u64, "completions in order");
        match i {
            _ if i < BAD && wc.status == ok => {
                assert_eq!(done, i, "a WRITE done after an earlier one was flushed");
                done += 1;
            }
            _ if i < BAD => assert_eq!(wc.status, flushed, "completion {i}"),
            BAD => assert_eq!(wc.status, WcStatus::LocProtErr.raw()),
            _ => assert_eq!(wc.status, flushed, "completion {i}"),
        }
    }
    expect_empty(&mut cq_a, Duration::from_millis(50));
    assert_eq!(&dst[..done * LEN], &src[..done * LEN], "the WRITEs done");
    assert!(
        dst[BAD * LEN..].iter().all(|&b| b == 0),
        "nothing from the bad one on"
    );
    c.close();
}

#[test]
fn ipv6_device_uses_its_address_as_gid_and_loops_back() {
    let cfg = nic::DeviceConfig::new("lo_v6", "::1".parse().unwrap());
    let dev = match nic::start_device(cfg) {
        Ok(d) => d,
        Err(e) => {
            // IPv6 disabled on this host (or ::1:4791 taken): nothing to test here.
            println!("skipping: cannot start a device on ::1: {e}");
            return;
        }
    };
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let r = c
        .call(&Request::QueryGid(QueryGid {
            port_num: 1,
            ..Default::default()
        }))
        .unwrap();
    let g = read_prefix::<QueryGidResp>(&r, "gid").unwrap().0;
    assert_eq!(g.gid, std::net::Ipv6Addr::LOCALHOST.octets());
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(16, -1, 1).unwrap();
    let (mut a, _b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 8, "::1");
    buf[..4].copy_from_slice(b"six!");
    c.post_send(
        &mut a,
        write_wqe(1, WrOpcode::RdmaWrite, ba + 2048, m.rkey),
        sge(ba, 4, m.lkey).as_bytes(),
    );
    assert_eq!(poll(&mut cq).status, 0);
    assert_eq!(&buf[2048..2052], b"six!");
    // An IPv4 GID cannot be reached from an IPv6 device.
    assert!(c.create_ah(pd, "127.0.0.1").is_err());
    c.close();
}

#[test]
fn srq_limit_event_fires_once_when_armed() {
    let ip = "127.77.1.12";
    let dev = device("lo_srqlim", ip);
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, ALL).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut srq = c.create_srq(pd, 8);
    let mut cq = c.create_cq(32, -1, 1).unwrap();
    let mut s = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, None)
        .unwrap();
    let r = c
        .create_qp(pd, cq.handle, cq.handle, QpType::Rc, 8, Some(srq.handle))
        .unwrap();
    c.connect_qp(s.handle, QpType::Rc, r.qpn, ip);
    c.connect_qp(r.handle, QpType::Rc, s.qpn, ip);
    for i in 0..4 {
        c.post_recv(&mut srq.ring, 100 + i, &[sge(ba + 2048, 64, m.lkey)]);
    }
    c.call(&Request::ModifySrq(ModifySrq {
        srq_handle: srq.handle,
        attr_mask: abi::SrqAttrMask::LIMIT.0,
        max_wr: 0,
        srq_limit: 3,
    }))
    .unwrap();
    let q = c
        .call(&Request::QuerySrq(QuerySrq {
            response: 0,
            srq_handle: srq.handle,
            reserved: 0,
        }))
        .unwrap();
    let q = read_prefix::<QuerySrqResp>(&q, "q").unwrap().0;
    assert_eq!((q.max_wr, q.srq_limit), (8, 3));
    // Two receives consumed: 2 left < 3 → one SRQ_LIMIT_REACHED.
    for i in 0..2 {
        c.post_send(
            &mut s,
            write_wqe(i, WrOpcode::Send, 0, 0),
            sge(ba, 8, m.lkey).as_bytes(),
        );
        poll(&mut cq);
        poll(&mut cq);
    }
    let ev = c.async_event();
    assert_eq!(
        (ev.event_type, ev.element),
        (nic::event::SRQ_LIMIT_REACHED, 0x5151)
    );
    let e = c
        .call(&Request::DestroySrq(DestroySrq {
            response: 0,
            srq_handle: srq.handle,
            reserved: 0,
        }))
        .unwrap_err();
    assert_eq!(e, abi::Errno::EBUSY);
    c.close();
}
