//! ICRC and frame build/parse cost.
//!
//! `cargo bench -p wire --bench icrc` (add `-- --quick` for a short run). Each ICRC size is
//! measured beside a plain `crc32fast::hash` of the same bytes, so the cost of masking the
//! headers shows as a ratio against the raw CRC speed of the machine.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use wire::frame::{build_l3, l3_len, parse_l3};
use wire::icrc;
use wire::{BthRepr, IpRepr, Opcode, Psn, Qpn, RocePacketRepr, UdpRepr};

fn frame(payload_len: usize) -> Vec<u8> {
    let payload: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
    let pkt = RocePacketRepr::new(
        BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x12), Psn::new(1)),
        &payload,
    );
    let ip = IpRepr::v4_socket(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        2,
        64,
    );
    let mut buf = vec![0u8; l3_len(&ip, &pkt)];
    build_l3(&ip, &UdpRepr::roce(0xC132), &pkt, &mut buf).expect("build");
    buf
}

fn bench_icrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc");
    for size in [64usize, 1024, 4096] {
        let f = frame(size);
        let covered = &f[..f.len() - 4];
        g.throughput(Throughput::Bytes(covered.len() as u64));
        g.bench_function(format!("icrc_{size}B_payload"), |b| {
            b.iter(|| icrc::compute(black_box(covered)))
        });
        g.bench_function(format!("raw_crc32_{size}B_payload"), |b| {
            b.iter(|| crc32fast::hash(black_box(covered)))
        });
        let transport = &f[28..f.len() - 4];
        let crc = icrc::read_icrc(&f[f.len() - 4..]);
        let udp = UdpRepr::roce(0xC132);
        let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        g.bench_function(format!("unseen_ident_check_{size}B_payload"), |b| {
            b.iter(|| icrc::verify_udp_v4_unseen_ident(src, dst, &udp, black_box(transport), crc))
        });
    }
    g.finish();
}

fn bench_frame(c: &mut Criterion) {
    let payload = vec![0xA5u8; 1024];
    let pkt = RocePacketRepr::new(
        BthRepr::new(Opcode::RC_SEND_ONLY, Qpn::new(0x12), Psn::new(1)),
        &payload,
    );
    let ip = IpRepr::v4_socket(
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        2,
        64,
    );
    let udp = UdpRepr::roce(0xC132);
    let mut buf = vec![0u8; l3_len(&ip, &pkt)];
    let mut g = c.benchmark_group("frame");
    g.throughput(Throughput::Bytes(buf.len() as u64));
    g.bench_function("build_parse_1KiB", |b| {
        b.iter(|| {
            let n = build_l3(&ip, &udp, black_box(&pkt), &mut buf).expect("build");
            let f = parse_l3(black_box(&buf[..n])).expect("parse");
            assert!(f.icrc_ok);
            f.packet.payload.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench_icrc, bench_frame);
criterion_main!(benches);
