//! Cost of the slow-path command codec (docs/architecture.md §2): encoding a request as the library
//! does and decoding it as the control plane does, for the commands of a benchmark's life —
//! POST_SEND with 1 and 16 WRs (the slow-path post), MODIFY_QP (RTR with a GID) and REG_MR.
//!
//! `cargo bench -p abi --bench codec` (add `-- --quick` for a short run). Decoding a post
//! also walks its WRs and SGEs, as the control plane does before writing WQEs, so the
//! figure is the whole untrusted-bytes-to-typed-request cost.

use std::hint::black_box;

use abi::uverbs::{ModifyQp, PostSend, QpDest, RdmaWr, RegMr, SendWr, Sge, WrList};
use abi::{decode_request, AccessFlags, QpAttrMask, Request, SendFlags, WrOpcode};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zerocopy::IntoBytes;

/// `n` signaled 8-byte RDMA WRITEs, one SGE each, as POST_SEND carries them.
fn post_send_arrays(n: u64) -> (Vec<SendWr>, Vec<Sge>) {
    let wrs = (0..n)
        .map(|i| {
            let mut w = SendWr {
                wr_id: i,
                num_sge: 1,
                opcode: WrOpcode::RdmaWrite.raw(),
                send_flags: SendFlags::SIGNALED.0,
                ..Default::default()
            };
            w.set_rdma(RdmaWr {
                remote_addr: 0x7f00_0000_0000 + 8 * i,
                rkey: 0x1234,
                reserved: 0,
            });
            w
        })
        .collect();
    let sges = (0..n)
        .map(|i| Sge {
            addr: 0x7e00_0000_0000 + 8 * i,
            length: 8,
            lkey: 0x1234,
        })
        .collect();
    (wrs, sges)
}

fn post_send<'a>(wrs: &'a [SendWr], sges: &'a [Sge]) -> Request<'a> {
    Request::PostSend(
        PostSend {
            response: 0,
            qp_handle: 3,
            wr_count: wrs.len() as u32,
            sge_count: sges.len() as u32,
            wqe_size: SendWr::SIZE as u32,
        },
        WrList {
            wrs: wrs.as_bytes(),
            sges: sges.as_bytes(),
            wqe_size: SendWr::SIZE,
        },
    )
}

/// perftest's INIT→RTR for RoCE: path MTU, destination QPN and PSN, a global route.
fn modify_qp_rtr() -> Request<'static> {
    let mask = QpAttrMask::STATE
        | QpAttrMask::AV
        | QpAttrMask::PATH_MTU
        | QpAttrMask::DEST_QPN
        | QpAttrMask::RQ_PSN
        | QpAttrMask::MAX_DEST_RD_ATOMIC
        | QpAttrMask::MIN_RNR_TIMER;
    let mut dgid = [0u8; 16];
    dgid[10] = 0xff;
    dgid[11] = 0xff;
    dgid[12..].copy_from_slice(&[127, 0, 0, 2]);
    Request::ModifyQp(ModifyQp {
        dest: QpDest {
            dgid,
            hop_limit: 64,
            is_global: 1,
            port_num: 1,
            ..Default::default()
        },
        qp_handle: 3,
        attr_mask: mask.0,
        rq_psn: 0x12_3456,
        dest_qp_num: 0x11,
        qp_state: 2,
        path_mtu: 3,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        port_num: 1,
        ..Default::default()
    })
}

fn reg_mr() -> Request<'static> {
    Request::RegMr(RegMr {
        response: 0,
        start: 0x7f12_3456_0000,
        length: 1 << 20,
        hca_va: 0x7f12_3456_0000,
        pd_handle: 1,
        access_flags: (AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).0,
    })
}

/// What the control plane touches after decoding: every WR and SGE of a post.
fn consume(req: &Request<'_>) -> u64 {
    match req {
        Request::PostSend(_, list) => list
            .send_wrs()
            .map(|(w, sges)| w.wr_id ^ sges.iter().map(|s| s.addr).sum::<u64>())
            .sum(),
        Request::ModifyQp(m) => u64::from(m.attr_mask),
        Request::RegMr(r) => r.length,
        _ => 0,
    }
}

fn bench_codec(c: &mut Criterion) {
    let (wrs1, sges1) = post_send_arrays(1);
    let (wrs16, sges16) = post_send_arrays(16);
    let cases: [(&str, Request<'_>); 4] = [
        ("post_send_1wr", post_send(&wrs1, &sges1)),
        ("post_send_16wr", post_send(&wrs16, &sges16)),
        ("modify_qp_rtr", modify_qp_rtr()),
        ("reg_mr", reg_mr()),
    ];
    let mut g = c.benchmark_group("codec");
    g.throughput(Throughput::Elements(1));
    for (name, req) in &cases {
        let mut out = Vec::with_capacity(4096);
        req.encode(&mut out).expect("encode");
        // The bytes decode back to the same request, so the loops below measure real work.
        let (_, back) = decode_request(&out).expect("decode");
        assert_eq!(&back, req);
        g.bench_function(format!("encode_{name}"), |b| {
            b.iter(|| {
                black_box(req).encode(&mut out).expect("encode");
                out.len()
            })
        });
        let bytes = out.clone();
        g.bench_function(format!("decode_{name}"), |b| {
            b.iter(|| {
                let (_, r) = decode_request(black_box(&bytes)).expect("decode");
                consume(&r)
            })
        });
        g.bench_function(format!("encode_decode_{name}"), |b| {
            b.iter(|| {
                black_box(req).encode(&mut out).expect("encode");
                let (_, r) = decode_request(&out).expect("decode");
                consume(&r)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench_codec);
criterion_main!(benches);
