//! Every opcode of the transport, on one device (internal loopback) and between two
//! devices (127.0.0.1 ↔ 127.0.0.2 over UDP), with the data verified byte for byte.

mod common;

use common::*;
use uroce::*;

// SEND with a gather list of three SGEs into a scatter list of two, several MTUs long.
topo_tests!(send_gather_scatter, |t| {
    let (a, b) = rc(t);
    let mut src = buf(&a, 8192);
    let dst = buf(&b, 8192);
    let data = pattern(1, 3000);
    src[..1000].copy_from_slice(&data[..1000]);
    src[4096..6096].copy_from_slice(&data[1000..]);
    let rsges = [dst.sge(0, 1500), dst.sge(4096, 2000)];
    b.qp.post_recv(&[RecvWr::new(77, &rsges)]).unwrap();
    let sges = [src.sge(0, 600), src.sge(600, 400), src.sge(4096, 2000)];
    a.qp.post_send(&[SendWr::send(5, &sges).signaled()])
        .unwrap();
    let s = wait1(&a.cq);
    assert_eq!(
        (s.wr_id, s.status, s.opcode),
        (5, WcStatus::Success, WcOpcode::Send)
    );
    let r = wait1(&b.cq);
    assert_eq!(
        (r.wr_id, r.status, r.opcode),
        (77, WcStatus::Success, WcOpcode::Recv)
    );
    assert_eq!(r.byte_len, 3000);
    assert_eq!(r.qp_num, b.qp.qp_num());
    assert_eq!(r.imm_data(), None);
    assert_eq!(&dst[..1500], &data[..1500]);
    assert_eq!(&dst[4096..5596], &data[1500..]);
    assert!(
        dst[1500..4096].iter().all(|&x| x == 0),
        "scatter wrote outside its SGEs"
    );
});

// Messages of several packets whose sizes need padding (PadCnt) and whose gather lists
// break in the middle of packets: between two devices each is sent as a run of packets cut
// into datagrams, every datagram's payload gathered from the pieces it covers.
topo_tests!(unaligned_multi_packet_messages_with_gather_lists, |t| {
    let (a, b) = rc(t);
    let mut src = buf(&a, 16384);
    let dst = buf(&b, 16384);
    let data = pattern(7, 16384);
    src.copy_from_slice(&data);
    let rm = dst.remote();
    for (id, len) in [1025u32, 3073, 4097, 2047, 5001].into_iter().enumerate() {
        let id = id as u32 + 1;
        let cut = [len / 3, len / 3 + 1, len - 2 * (len / 3) - 1];
        let sges = [
            src.sge(0, cut[0]),
            src.sge(8192, cut[1]),
            src.sge(12000, cut[2]),
        ];
        let want: Vec<u8> = [
            &data[..cut[0] as usize],
            &data[8192..8192 + cut[1] as usize],
            &data[12000..12000 + cut[2] as usize],
        ]
        .concat();
        let at = u64::from(id) % 7 * 512;
        a.qp.post_send(&[SendWr::write(u64::from(id), &sges, rm.addr + at, rm.rkey).signaled()])
            .unwrap();
        let w = wait1(&a.cq);
        assert_eq!((w.wr_id, w.status), (u64::from(id), WcStatus::Success));
        assert_eq!(
            &dst[at as usize..at as usize + len as usize],
            &want[..],
            "WRITE of {len} bytes"
        );
        let r = [dst.sge(0, 8192)];
        b.qp.post_recv(&[RecvWr::new(u64::from(id), &r)]).unwrap();
        a.qp.post_send(&[SendWr::send(u64::from(id), &sges).signaled()])
            .unwrap();
        assert_eq!(wait1(&a.cq).status, WcStatus::Success);
        let r = wait1(&b.cq);
        assert_eq!((r.status, r.byte_len), (WcStatus::Success, len));
        assert_eq!(&dst[..len as usize], &want[..], "SEND of {len} bytes");
    }
});

topo_tests!(send_with_imm_and_inline, |t| {
    let (a, b) = rc(t);
    let dst = buf(&b, 256);
    let r = [dst.sge(0, 128), dst.sge(128, 128)];
    b.qp.post_recv(&[RecvWr::new(1, &r[..1]), RecvWr::new(2, &r[1..])])
        .unwrap();
    let src = buf(&a, 64);
    let s = [src.sge(0, 0)];
    a.qp.post_send(&[
        SendWr::send(10, &s).with_imm(0xdead_beef).signaled(),
        SendWr::send_inline(11, b"inline payload").signaled(),
    ])
    .unwrap();
    let sw = wait(&a.cq, 2);
    assert!(sw.iter().all(|w| w.status == WcStatus::Success), "{sw:?}");
    let rw = wait(&b.cq, 2);
    assert_eq!(rw[0].wr_id, 1);
    assert_eq!(rw[0].byte_len, 0);
    assert_eq!(rw[0].imm_data(), Some(0xdead_beef));
    assert!(rw[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!((rw[1].wr_id, rw[1].byte_len), (2, 14));
    assert_eq!(&dst[128..142], b"inline payload");
});

topo_tests!(rdma_write_large_and_with_imm, |t| {
    let (a, b) = rc(t);
    let len = 256 * 1024;
    let mut src = buf(&a, len);
    let dst = buf(&b, len);
    let data = pattern(3, len);
    src.copy_from_slice(&data);
    let rm = dst.remote();
    // A plain WRITE consumes no receive: the posted one stays for the WRITE_WITH_IMM.
    b.qp.post_recv(&[RecvWr::new(9, &[])]).unwrap();
    a.qp.post_send(&[SendWr::write(1, &[src.sge(0, len as u32)], rm.addr, rm.rkey).signaled()])
        .unwrap();
    let w = wait1(&a.cq);
    assert_eq!(
        (w.wr_id, w.status, w.opcode),
        (1, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert!(dst[..] == data[..], "WRITE data differs");
    quiet(&b.cq, std::time::Duration::from_millis(20));
    a.qp.post_send(&[SendWr::write(2, &[src.sge(0, 100)], rm.at(1000), rm.rkey)
        .with_imm(42)
        .signaled()])
        .unwrap();
    assert_eq!(wait1(&a.cq).status, WcStatus::Success);
    let r = wait1(&b.cq);
    assert_eq!((r.wr_id, r.opcode), (9, WcOpcode::RecvRdmaWithImm));
    assert_eq!((r.byte_len, r.imm_data()), (100, Some(42)));
    assert_eq!(&dst[1000..1100], &data[..100]);
});

topo_tests!(rdma_read, |t| {
    let (a, b) = rc(t);
    let len = 10_000;
    let local = buf(&a, len);
    let mut remote = buf(&b, len);
    let data = pattern(4, len);
    remote.copy_from_slice(&data);
    let rm = remote.remote();
    let sges = [local.sge(0, 4000), local.sge(4000, 6000)];
    a.qp.post_send(&[SendWr::read(3, &sges, rm.addr, rm.rkey).signaled()])
        .unwrap();
    let w = wait1(&a.cq);
    assert_eq!(
        (w.wr_id, w.status, w.opcode),
        (3, WcStatus::Success, WcOpcode::RdmaRead)
    );
    assert_eq!(w.byte_len, len as u32);
    assert!(local[..] == data[..]);
});

topo_tests!(atomics, |t| {
    let (a, b) = rc(t);
    let res = buf(&a, 64);
    let mut target = buf(&b, 64);
    target[8..16].copy_from_slice(&100u64.to_ne_bytes());
    let rm = target.remote();
    let out0 = res.sge(0, 8);
    let out1 = res.sge(8, 8);
    let out2 = res.sge(16, 8);
    // Compare matches → swap; compare mismatches → unchanged; both return the original.
    a.qp.post_send(&[
        SendWr::compare_swap(1, &out0, rm.at(8), rm.rkey, 100, 555).signaled(),
        SendWr::compare_swap(2, &out1, rm.at(8), rm.rkey, 100, 777).signaled(),
        SendWr::fetch_add(3, &out2, rm.at(8), rm.rkey, 45).signaled(),
    ])
    .unwrap();
    let w = wait(&a.cq, 3);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    assert_eq!(w[0].opcode, WcOpcode::CompSwap);
    assert_eq!(w[2].opcode, WcOpcode::FetchAdd);
    assert_eq!(w[0].byte_len, 8);
    let word = |s: &[u8], i: usize| u64::from_ne_bytes(s[i..i + 8].try_into().unwrap());
    assert_eq!(word(&res, 0), 100);
    assert_eq!(word(&res, 8), 555);
    assert_eq!(word(&res, 16), 555);
    assert_eq!(word(&target, 8), 600);
});

// uroce registers only user MRs, which IBA does not let a peer invalidate (no FRMRs or
// memory windows), so SEND_WITH_INV reaches the responder and comes back as the prescribed
// Invalid Request NAK (rxe does the same).
topo_tests!(send_with_invalidate_is_refused_for_user_mrs, |t| {
    let (a, b) = rc(t);
    let dst = buf(&b, 64);
    b.qp.post_recv(&[RecvWr::new(1, &[dst.sge(0, 64)])])
        .unwrap();
    let src = buf(&a, 64);
    a.qp.post_send(&[SendWr::send_with_inv(2, &[src.sge(0, 8)], dst.rkey()).signaled()])
        .unwrap();
    let w = wait1(&a.cq);
    assert_eq!((w.wr_id, w.status), (2, WcStatus::RemInvReqErr));
});

// A post list of 100 8-byte WRITEs, only the last one signaled: one completion,
// every word in place.
topo_tests!(post_list_selective_signaling, |t| {
    let (a, b) = rc(t);
    let n = 100usize;
    let mut src = buf(&a, n * 8);
    let dst = buf(&b, n * 8);
    for i in 0..n {
        src[i * 8..i * 8 + 8].copy_from_slice(&(i as u64 + 1).to_ne_bytes());
    }
    let rm = dst.remote();
    let sges: Vec<[Sge; 1]> = (0..n).map(|i| [src.sge(i * 8, 8)]).collect();
    let mut wrs: Vec<SendWr<'_>> = (0..n)
        .map(|i| SendWr::write(i as u64, &sges[i], rm.at(i as u64 * 8), rm.rkey))
        .collect();
    wrs[n - 1] = wrs[n - 1].signaled();
    a.qp.post_send(&wrs).unwrap();
    let w = wait1(&a.cq);
    assert_eq!((w.wr_id, w.status), (n as u64 - 1, WcStatus::Success));
    quiet(&a.cq, std::time::Duration::from_millis(20));
    assert!(dst[..] == src[..]);
});

// The slow path (POST_SEND / POST_RECV / POLL_CQ as commands) moves the same data.
topo_tests!(slow_path_commands, |t| {
    let (a, b) = rc(t);
    let mut src = buf(&a, 4096);
    let dst = buf(&b, 4096);
    let data = pattern(9, 4096);
    src.copy_from_slice(&data);
    b.qp.post_recv_cmd(&[RecvWr::new(5, &[dst.sge(0, 2048)])])
        .unwrap();
    a.qp.post_send_cmd(&[
        SendWr::send(1, &[src.sge(0, 2048)]).signaled(),
        SendWr::write(2, &[src.sge(2048, 2048)], dst.remote().at(2048), dst.rkey()).signaled(),
        SendWr::write(3, &[], dst.remote().at(100), dst.rkey())
            .inline(b"cmd-inline")
            .signaled(),
    ])
    .unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while got.len() < 3 {
        let mut wc = [Wc::default(); 4];
        let k = a.cq.poll_cmd(&mut wc).unwrap();
        got.extend_from_slice(&wc[..k]);
        assert!(std::time::Instant::now() < deadline, "{got:?}");
    }
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
    let r = wait1(&b.cq);
    assert_eq!((r.wr_id, r.byte_len), (5, 2048));
    assert_eq!(&dst[..100], &data[..100]);
    assert_eq!(&dst[100..110], b"cmd-inline");
    assert_eq!(&dst[110..], &data[110..]);
});

#[test]
fn queries_report_rxe_like_attributes_and_address_gids() {
    let (a, b) = topo_devices(Topo::TwoDevices);
    for (d, ip) in [(a, "127.0.0.1"), (b, "127.0.0.2")] {
        let ctx = d.open().unwrap();
        let attr = ctx.query_device().unwrap();
        assert_eq!((attr.vendor_id, attr.vendor_part_id), (0xffffff, 0));
        assert_eq!(attr.phys_port_cnt, 1);
        assert!(attr.max_qp_wr >= 1024 && attr.max_sge >= 4);
        let port = ctx.query_port(PORT).unwrap();
        assert_eq!(port.state, PortState::ACTIVE);
        assert_eq!(port.link_layer, LinkLayer::ETHERNET);
        assert_eq!(port.active_mtu, Mtu::Mtu1024);
        let g = ctx.query_gid_entry(PORT, 0).unwrap();
        assert_eq!(g.gid.to_ip(), ip.parse::<std::net::IpAddr>().unwrap());
        assert_eq!(g.gid_type, GidType::ROCE_V2);
        assert_eq!(ctx.query_pkey(PORT, 0).unwrap(), 0xffff);
        assert!(ctx.query_port(2).is_err());
    }
}

// IBA §10.8 (and rdma-core's providers): once the completion of a send WR has been polled,
// its send-queue slot — and those of the unsignaled WRs before it — is free again, so an
// application that keeps at most `max_send_wr` WRs outstanding never sees a full queue
// (perftest's loop). nic frees the retired WQEs' ring slots before it publishes their
// CQEs (datapath.rs `drain_completions`), so a post right after the poll never finds the
// ring full (ENOMEM).
#[test]
fn a_polled_completion_frees_its_send_queue_slots() {
    const DEPTH: u64 = 256;
    const LIST: u64 = 16;
    const SIGNAL_EVERY: u64 = 32;
    let mut o = uroce::pair::PairOpts::default();
    o.cap.max_send_wr = DEPTH as u32;
    o.cqe = DEPTH as u32;
    let (a, b) = pair(Topo::SameDevice, &o);
    assert_eq!(u64::from(a.qp.cap().max_send_wr), DEPTH);
    let src = buf(&a, 8);
    let dst = buf(&b, 8);
    let s = [src.sge(0, 8)];
    let n = 100_000u64;
    let (mut posted, mut done) = (0u64, 0u64);
    let mut wc = [Wc::default(); 16];
    let deadline = std::time::Instant::now() + TIMEOUT * 3;
    while done < n {
        while posted < n && DEPTH - (posted - done) >= LIST {
            let wrs: Vec<SendWr<'_>> = (posted..posted + LIST)
                .map(|id| {
                    let wr = SendWr::write(id, &s, dst.addr(), dst.rkey());
                    if id % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
                        wr.signaled()
                    } else {
                        wr
                    }
                })
                .collect();
            if let Err(e) = a.qp.post_send(&wrs) {
                panic!(
                    "{e}: {} outstanding of {DEPTH} after polling {done} completions",
                    posted - done
                );
            }
            posted += LIST;
        }
        let k = a.cq.poll(&mut wc).unwrap();
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success);
            done = w.wr_id + 1;
        }
        assert!(std::time::Instant::now() < deadline, "stuck at {done}");
    }
}
